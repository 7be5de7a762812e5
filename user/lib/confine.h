/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The process-side layer of a sandbox, for the socket families no cgroup
 * hook sees (AF_PACKET, AF_XDP, AF_VSOCK, ...) and for io_uring, whose ops
 * skip seccomp: a libseccomp filter that allows socket() only for AF_INET,
 * AF_INET6 and AF_UNIX (plus families a policy names), not the types the
 * kernel turns into another family (AF_INET + SOCK_PACKET), and refuses the
 * io_uring syscalls, bpf, perf_event_open and the calls that reach into
 * another process (ptrace, process_vm_readv/writev, pidfd_getfd, kcmp), the
 * keyring calls, terminal injection (ioctl TIOCSTI/TIOCLINUX) and new user
 * namespaces (clone3: ENOSYS), and capability drops. `egressctl run` applies the filter and the full drop in
 * the command before exec; egressd writes the same filter as an OCI seccomp
 * profile for container runtimes.
 */
#ifndef EGR_CONFINE_H
#define EGR_CONFINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <linux/capability.h>
#include <linux/filter.h>

struct egr_confine {
	/* Bit n allows address family n besides AF_UNIX, AF_INET, AF_INET6. */
	uint64_t extra_families;
};

/* Install the seccomp filter in the calling process (sets no_new_privs).
 * Syscalls of other ABIs (x32, i386 on x86_64) are killed, so the 32-bit
 * socketcall() multiplexer cannot go around the filter. 0 or -errno. */
int egr_confine_seccomp(const struct egr_confine *c);

/* The same filter as a classic BPF program (libseccomp's export of the same
 * rules), built once and installed by several processes without libseccomp:
 * `egressctl run` builds it while its attach is in flight and pid 1 and the
 * command install it. prog->filter is malloc'd (egr_confine_seccomp_free).
 * 0 or -errno. */
int egr_confine_seccomp_build(const struct egr_confine *c, struct sock_fprog *prog);
void egr_confine_seccomp_free(struct sock_fprog *prog);

/* Set no_new_privs and install prog in the calling thread
 * (seccomp(SECCOMP_SET_MODE_FILTER)), as egr_confine_seccomp does.
 * 0 or -errno; -EINVAL for an empty program. */
int egr_confine_seccomp_install(const struct sock_fprog *prog);

/* Drop the capabilities a sandbox could use to go around egressd (raw and
 * packet sockets, interface and routing changes, BPF, cgroup moves, ptrace
 * of the agent) from the bounding set and the current sets. 0 or -errno. */
int egr_confine_drop_caps(void);

/* The identity a command runs as (egressctl run --user). */
struct egr_run_user {
	uint32_t uid;
	uint32_t gid;
};

/* Give up every capability for good, also as uid 0: an empty bounding set,
 * no effective, permitted, inheritable or ambient capability, locked
 * securebits (SECBIT_NOROOT: exec as root grants nothing) and
 * no_new_privs. With user set, switch to user->uid, user->gid and the
 * single supplementary group user->gid first. Checks the result: 0 only
 * when every set reads empty, else -errno (-EPERM: something is left). */
int egr_confine_drop_all_caps(const struct egr_run_user *user);

/* The capabilities uid 0 keeps in a user namespace whose ids map to a
 * host range of its own (egressctl run): they act only on processes and
 * files of those mapped ids (the kernel's capable_wrt_inode_uidgid), so
 * apt can drop to _apt and a tool chown its own files. */
#define EGR_CONFINE_NS_CAPS                                                               \
	((1ULL << CAP_CHOWN) | (1ULL << CAP_DAC_OVERRIDE) | (1ULL << CAP_FOWNER) |       \
	 (1ULL << CAP_SETGID) | (1ULL << CAP_SETUID))

/* Keep exactly EGR_CONFINE_NS_CAPS, for uid 0 in such a namespace: the
 * bounding set and the effective and permitted sets are those five (an
 * exec as uid 0 gets them back, no more: no_new_privs), none inheritable or
 * ambient; securebits locked with SECBIT_NOROOT and SECBIT_NO_SETUID_FIXUP
 * clear, so a change to a non-zero uid (apt's _apt) drops all of them.
 * Checks the result: 0, or -errno (-EPERM: the sets differ). */
int egr_confine_keep_ns_caps(void);

/* Drop every capability keep() refuses from the bounding, effective,
 * permitted and inheritable sets (*dropped: effective ones given up).
 * Without CAP_SETPCAP the bounding set stays as it is when no_new_privs is
 * set (systemd's NoNewPrivileges=), -EPERM otherwise.
 * 0 or -errno. egressd uses it for itself (harden.c). */
int egr_caps_restrict(bool (*keep)(int cap, void *ctx), void *ctx, unsigned int *dropped);

/* The filter as an OCI runtime-spec "linux.seccomp" object
 * (seccomp_profile.c): deny by default (ENOSYS) with containers-common's
 * allow list, this host's ABIs only, socket()/socketpair() for the allowed
 * families only, the refused calls refused. *out is a new reference.
 * 0 or -ENOMEM. */
int egr_confine_oci_profile(const struct egr_confine *c, json_t **out);

/* Families at or above this are refused by one GE rule. */
#define EGR_CONFINE_AF_LIMIT 64

/* The syscalls the filter refuses outright (*names: a static table). */
size_t egr_confine_refused_calls(const char *const **names);

/* May a sandbox open sockets of family af under c? */
bool egr_confine_family_allowed(const struct egr_confine *c, int af);

/* A call refused for some argument values: args[arg] & mask == value
 * (mask 0: every call) answers -errno_ret. */
struct egr_confine_arg_rule {
	const char *name;
	unsigned int arg;
	uint64_t mask, value;
	int errno_ret;
};

/* The filter's argument rules (*rules: a static table), for the OCI
 * profile. An allow-list profile must not also allow these calls
 * unconditionally: libseccomp lets an unconditional rule override a
 * conditional one of the same call. */
size_t egr_confine_refused_args(const struct egr_confine_arg_rule **rules);

/* socket(family, type) that the kernel creates as family `to` after seccomp
 * judged `family` (net/socket.c __sock_create: PF_INET + SOCK_PACKET is a
 * PF_PACKET socket). The filter and the OCI profile refuse (family,
 * type & EGR_CONFINE_TYPE_MASK) unless `to` is allowed. */
struct egr_confine_rewrite {
	int family, type, to;
};

/* The kernel's SOCK_TYPE_MASK: socket()'s type without SOCK_NONBLOCK etc. */
#define EGR_CONFINE_TYPE_MASK 0xf

/* The table of such rewrites (*table: static). */
size_t egr_confine_rewrites(const struct egr_confine_rewrite **table);

/* Family name ("packet", "netlink", ...) to number; -EINVAL if unknown. */
int egr_confine_family(const char *name);

#endif /* EGR_CONFINE_H */
