// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Least privilege for egressd itself (DESIGN non-negotiable 5): once the
 * programs are loaded, bpffs is mounted and every socket is bound, keep
 * only the capabilities the running daemon uses and refuse the syscalls
 * it never makes.
 *
 * Kept: CAP_BPF and CAP_PERFMON (map updates, links), CAP_NET_ADMIN
 * (cgroup program attach, SOCK_DESTROY), CAP_SYS_ADMIN (setns into a
 * sandbox's network namespace for its DNS listeners; BPF on kernels before
 * CAP_BPF), CAP_KILL (a process moved out of its sandbox by another one,
 * escape.bpf.c), CAP_LINUX_IMMUTABLE (FS_APPEND_FL on the audit log, its
 * state and billing.state, lifted for a cut-back or a rotation: issue 23,
 * finding 4). Everything else goes from the effective, permitted, inheritable
 * and bounding sets.
 *
 * With --user (issue 23 finding 1) egressd also stops being uid 0: a tool
 * that is root in an attach-mode sandbox, without a capability, may signal
 * and trace any uid 0 process, and not one of another uid. The switch keeps
 * the permitted set (PR_SET_KEEPCAPS) and raises the kept capabilities in
 * the effective set again, plus CAP_DAC_OVERRIDE: cgroupfs, bpffs and the
 * state and runtime directories are root's, and as root egressd reached
 * them as their owner. No ambient set: egressd executes nothing. Then it
 * is no longer dumpable (PR_SET_DUMPABLE 0): its /proc files are root's and
 * even its own uid cannot ptrace it or read its memory.
 *
 * The seccomp filter is a deny list, not an allow list: libbpf, jansson,
 * OpenSSL, zlib and libmicrohttpd make many syscalls, and an allow list
 * that misses one would take enforcement management down with it. What it
 * refuses is what an attacker in egressd would want and egressd never
 * does: loading kernel modules, kexec, ptrace and process_vm_*, mounts
 * after start-up, new user namespaces, io_uring, perf, keyrings, reboot.
 */
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <stdint.h>
#include <seccomp.h>
#include <stdbool.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "confine.h"
#include "harden.h"
#include "log.h"

static const int kept_caps[] = { CAP_BPF,      CAP_PERFMON, CAP_NET_ADMIN,
				 CAP_SYS_ADMIN, CAP_KILL,    CAP_LINUX_IMMUTABLE };
/* As another user than root, also (see above): */
static const int user_caps[] = { CAP_DAC_OVERRIDE };
/* Only for the switch itself, gone after it: */
static const int switch_caps[] = { CAP_SETUID, CAP_SETGID, CAP_SETPCAP };

struct keep_set {
	bool user, switching;
};

static const char *const denied_syscalls[] = {
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root",
	"chroot", "swapon", "swapoff", "reboot", "unshare", "io_uring_setup", "io_uring_enter",
	"io_uring_register", "perf_event_open", "add_key", "request_key", "keyctl",
	"userfaultfd", "personality", "acct", "settimeofday", "clock_settime", "iopl",
	"ioperm", "open_by_handle_at", "fsopen", "fsmount",
	"move_mount", "open_tree",
};

#define IN(arr, cap) in_list(arr, sizeof(arr) / sizeof(arr[0]), cap)
static bool in_list(const int *list, size_t n, int cap)
{
	for (size_t i = 0; i < n; i++)
		if (list[i] == cap)
			return true;
	return false;
}

static bool kept(int cap, void *ctx)
{
	const struct keep_set *k = ctx;

	return IN(kept_caps, cap) || (k && k->user && IN(user_caps, cap)) ||
	       (k && k->switching && IN(switch_caps, cap));
}

/* Effective = permitted = exactly what k keeps (a subset of what is
 * permitted now). */
static int caps_set(const struct keep_set *k)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];

	if (syscall(SYS_capget, &hdr, data) < 0)
		return -errno;
	for (int cap = 0; cap <= CAP_LAST_CAP; cap++) {
		uint32_t bit = 1u << (cap % 32);

		data[cap / 32].inheritable &= ~bit;
		if (kept(cap, (void *)k) && (data[cap / 32].permitted & bit)) {
			data[cap / 32].effective |= bit;
		} else {
			data[cap / 32].effective &= ~bit;
			data[cap / 32].permitted &= ~bit;
		}
	}
	return syscall(SYS_capset, &hdr, data) < 0 ? -errno : 0;
}

/* Become uid:gid keeping the capabilities egressd runs with (above). */
static int become_user(uid_t uid, gid_t gid)
{
	struct keep_set sw = { .user = true, .switching = true }, run = { .user = true };
	int err;

	/* egr_harden restricted the sets, while root, to what the daemon
	 * keeps plus the three the switch needs. */
	if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0 || setgroups(1, &gid) < 0 ||
	    setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0)
		return -errno;
	if (prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) < 0)
		return -errno;
	/* The uid change emptied the effective set: CAP_SETPCAP back for the
	 * bounding set, then only what the daemon keeps. */
	err = caps_set(&sw);
	for (size_t i = 0; !err && i < sizeof(switch_caps) / sizeof(switch_caps[0]); i++)
		if (prctl(PR_CAPBSET_DROP, switch_caps[i], 0, 0, 0) < 0 && errno != EINVAL)
			err = -errno;
	if (!err)
		err = caps_set(&run);
	/* After the uid change, which resets it. */
	if (!err && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		err = -errno;
	if (!err && (getuid() != uid || geteuid() != uid || getgid() != gid))
		err = -EPERM; /* what the daemon relies on, checked */
	return err;
}

static int deny_syscalls(struct egr_hardening *h)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	int err = 0;

	if (!ctx)
		return -ENOMEM;
	for (size_t i = 0; i < sizeof(denied_syscalls) / sizeof(denied_syscalls[0]) && !err; i++) {
		int nr = seccomp_syscall_resolve_name(denied_syscalls[i]);

		if (nr == __NR_SCMP_ERROR)
			continue; /* not on this architecture */
		err = seccomp_rule_add_exact(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
		if (!err)
			h->syscalls_denied++;
	}
	if (!err)
		err = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1);
	if (!err)
		err = seccomp_load(ctx);
	seccomp_release(ctx);
	return err;
}

int egr_harden(struct egr_hardening *h, const struct egr_run_as *as)
{
	/* With a user to become, the switch's capabilities go after it. */
	struct keep_set k = { .user = as && as->name, .switching = as && as->name };
	int err;

	memset(h, 0, sizeof(*h));
	/* no_new_privs first: without CAP_SETPCAP (a unit's bounding set, a
	 * start as the user with ambient capabilities) the bounding set
	 * cannot shrink, and egr_caps_restrict() accepts that only when no
	 * exec can raise a capability again (user/lib/confine.c). */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		err = -errno;
		log_error("harden: no_new_privs: %s", strerror(-err));
		return err;
	}
	err = egr_caps_restrict(kept, &k, &h->caps_dropped);
	if (err) {
		log_error("harden: dropping capabilities: %s", strerror(-err));
		return err;
	}
	if (as && as->name) {
		/* Already that user (a unit's User= with AmbientCapabilities=):
		 * the capabilities were restricted above; only dumpable is left. */
		if (getuid() == as->uid && geteuid() == as->uid)
			err = caps_set(&(struct keep_set){ .user = true }) ?:
			      (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 ? -errno : 0);
		else
			err = become_user(as->uid, as->gid);
		if (err) {
			log_error("harden: becoming user %s (uid %u gid %u): %s", as->name,
				  (unsigned)as->uid, (unsigned)as->gid, strerror(-err));
			return err;
		}
		h->uid = as->uid;
		h->user = true;
	}
	h->caps = true;
	err = deny_syscalls(h);
	if (err) {
		log_error("harden: seccomp filter: %s", strerror(-err));
		return err;
	}
	h->seccomp = true;
	log_info("hardened: %u capabilities dropped (kept bpf, perfmon, net_admin, sys_admin, "
		 "kill%s), %u syscalls refused by seccomp%s%s", h->caps_dropped,
		 h->user ? ", dac_override" : "", h->syscalls_denied,
		 h->user ? "; running as user " : "", h->user ? as->name : "");
	return 0;
}
