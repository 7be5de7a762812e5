// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "confine.h"

/* Families beyond AF_MAX of this libc are refused with one GE rule. */
#define CONFINE_AF_LIMIT 64

static const int caps_to_drop[] = {
	CAP_NET_RAW,   /* raw and packet sockets, IP_OPTIONS source routing */
	CAP_NET_ADMIN, /* interfaces, routes, netfilter, SO_MARK */
	CAP_SYS_ADMIN, /* cgroup moves, bpf, mounts, setns */
	CAP_BPF,       /* loading or detaching BPF */
	CAP_PERFMON,
	CAP_SYS_PTRACE, /* reaching into egressd or other sandboxes */
	CAP_SYS_MODULE,
};

/* Refused outright in a sandbox: io_uring ops run where seccomp never looks
 * (IORING_OP_SOCKET made a raw socket in the bypass matrix); bpf() would let
 * a uid-0 sandbox open egressd's pinned maps and links and rewrite or
 * detach them (no capability is needed for BPF_OBJ_GET on a file it can
 * open); perf_event_open is the other way to attach programs. ptrace,
 * process_vm_readv/writev, pidfd_getfd and kcmp reach into another process
 * of the same uid (another sandbox's sockets and memory: row 6 of issue 8)
 * even where no pid namespace hides it (a runtime that applies only the
 * OCI profile). The keyring calls: a uid's user keyring is shared with
 * every process of that uid on the host (red team 1, F8). */
static const char *const refused_calls[] = {
	"io_uring_setup", "io_uring_enter",    "io_uring_register", "bpf",
	"perf_event_open", "ptrace",	       "process_vm_readv",  "process_vm_writev",
	"pidfd_getfd",	   "kcmp",	       "add_key",	    "keyctl",
	"request_key",
};

/* Calls refused for some argument values: arg & mask == value. The ioctl
 * request is an int: only its low 32 bits are compared (the kernel ignores
 * the rest, CVE-2019-10063). */
static const struct egr_confine_arg_rule refused_args[] = {
	/* Typing into a terminal the command shares (red team 1, F1). */
	{ "ioctl", 1, 0xffffffffu, TIOCSTI, EPERM },
	{ "ioctl", 1, 0xffffffffu, TIOCLINUX, EPERM },
	/* A user namespace gives back every capability over new mount and
	 * cgroup namespaces (red team 1, F3). clone3 passes its flags in
	 * memory seccomp cannot read: ENOSYS, and libc falls back to clone. */
	{ "unshare", 0, CLONE_NEWUSER, CLONE_NEWUSER, EPERM },
	{ "clone", 0, CLONE_NEWUSER, CLONE_NEWUSER, EPERM },
	{ "clone3", 0, 0, 0, ENOSYS }, /* mask 0: every call */
};

/*
 * The socket() calls the kernel turns into another family after seccomp has
 * judged the family argument: net/socket.c __sock_create() rewrites
 * (PF_INET, SOCK_PACKET) to PF_PACKET (the obsolete packet interface), on
 * the type with its flags masked off (SOCK_TYPE_MASK, 0xf). That is the only
 * rewrite of a family the filter allows (test_confine checks this kernel
 * against the table); AF_INET6 with SOCK_PACKET is not rewritten today
 * (ESOCKTNOSUPPORT) and is refused too, so no kernel that adds it opens a
 * packet socket. Refused while `to` is not itself an allowed family.
 */
static const struct egr_confine_rewrite rewrites[] = {
	{ AF_INET, SOCK_PACKET, AF_PACKET },
	{ AF_INET6, SOCK_PACKET, AF_PACKET },
};

static const struct {
	const char *name;
	int family;
} family_names[] = {
	{ "netlink", AF_NETLINK }, { "packet", AF_PACKET }, { "xdp", AF_XDP },
	{ "vsock", AF_VSOCK },	   { "bluetooth", AF_BLUETOOTH }, { "can", AF_CAN },
	{ "tipc", AF_TIPC },	   { "rds", AF_RDS },		  { "alg", AF_ALG },
	{ "qipcrtr", AF_QIPCRTR }, { "x25", AF_X25 },		  { "ax25", AF_AX25 },
	{ "appletalk", AF_APPLETALK },
};

int egr_confine_family(const char *name)
{
	for (size_t i = 0; i < sizeof(family_names) / sizeof(family_names[0]); i++)
		if (strcmp(name, family_names[i].name) == 0)
			return family_names[i].family;
	return -EINVAL;
}

/* arg0 `op` value, spelled out: libseccomp's SCMP_A0() leaves datum_b to
 * the compiler, which clang's -Wmissing-field-initializers rejects. */
static struct scmp_arg_cmp cmp_arg0(enum scmp_compare op, scmp_datum_t value)
{
	struct scmp_arg_cmp c = { .arg = 0, .op = op, .datum_a = value, .datum_b = 0 };

	return c;
}

static bool family_allowed(const struct egr_confine *c, int af)
{
	if (af == AF_UNIX || af == AF_INET || af == AF_INET6)
		return true;
	return af < CONFINE_AF_LIMIT && (c->extra_families & (1ull << af));
}

/* (family, type & 0xf) refused: a rewrite to a family c does not allow. */
static int add_rewrite_rules(const struct egr_confine *c, scmp_filter_ctx ctx)
{
	int err = 0;

	for (size_t i = 0; i < sizeof(rewrites) / sizeof(rewrites[0]) && !err; i++) {
		struct scmp_arg_cmp type = { .arg = 1, .op = SCMP_CMP_MASKED_EQ,
					     .datum_a = EGR_CONFINE_TYPE_MASK,
					     .datum_b = (scmp_datum_t)rewrites[i].type };

		if (family_allowed(c, rewrites[i].to))
			continue;
		err = seccomp_rule_add_exact(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 2,
					     cmp_arg0(SCMP_CMP_EQ, (scmp_datum_t)rewrites[i].family),
					     type);
		if (!err)
			err = seccomp_rule_add_exact(
				ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socketpair), 2,
				cmp_arg0(SCMP_CMP_EQ, (scmp_datum_t)rewrites[i].family), type);
	}
	return err;
}

/* The filter's rules in a new libseccomp context (*out): the one source of
 * the rules for the installed program (egr_confine_seccomp_build) and for
 * libseccomp's own load (egr_confine_seccomp). 0 or -errno. */
static int filter_ctx(const struct egr_confine *c, scmp_filter_ctx *out)
{
	scmp_filter_ctx ctx;
	int err = 0;

	ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return -ENOMEM;
	/* Other ABIs are killed (the default bad-arch action), which closes
	 * i386 socketcall(2) and x32 on x86_64. */
	for (int af = 0; af < CONFINE_AF_LIMIT && !err; af++) {
		if (family_allowed(c, af))
			continue;
		err = seccomp_rule_add_exact(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
					     cmp_arg0(SCMP_CMP_EQ, (scmp_datum_t)af));
		if (!err && af != AF_UNIX)
			err = seccomp_rule_add_exact(ctx, SCMP_ACT_ERRNO(EPERM),
						     SCMP_SYS(socketpair), 1,
						     cmp_arg0(SCMP_CMP_EQ, (scmp_datum_t)af));
	}
	if (!err)
		err = seccomp_rule_add_exact(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
					     cmp_arg0(SCMP_CMP_GE, CONFINE_AF_LIMIT));
	if (!err)
		err = add_rewrite_rules(c, ctx);
	for (size_t i = 0; i < sizeof(refused_calls) / sizeof(refused_calls[0]) && !err; i++) {
		int nr = seccomp_syscall_resolve_name(refused_calls[i]);

		if (nr != __NR_SCMP_ERROR)
			err = seccomp_rule_add_exact(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
	}
	for (size_t i = 0; i < sizeof(refused_args) / sizeof(refused_args[0]) && !err; i++) {
		const struct egr_confine_arg_rule *r = &refused_args[i];
		int nr = seccomp_syscall_resolve_name(r->name);
		struct scmp_arg_cmp cmp = { .arg = r->arg, .op = SCMP_CMP_MASKED_EQ,
					    .datum_a = r->mask, .datum_b = r->value };

		if (nr == __NR_SCMP_ERROR)
			continue;
		if (r->mask)
			err = seccomp_rule_add_exact(ctx, SCMP_ACT_ERRNO(r->errno_ret), nr, 1, cmp);
		else
			err = seccomp_rule_add_exact(ctx, SCMP_ACT_ERRNO(r->errno_ret), nr, 0);
	}
	if (!err)
		err = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1);
	if (err) {
		seccomp_release(ctx);
		return err;
	}
	*out = ctx;
	return 0;
}

int egr_confine_seccomp(const struct egr_confine *c)
{
	scmp_filter_ctx ctx;
	int err;

	err = filter_ctx(c, &ctx);
	if (err)
		return err;
	err = seccomp_load(ctx);
	seccomp_release(ctx);
	return err;
}

int egr_confine_seccomp_build(const struct egr_confine *c, struct sock_fprog *prog)
{
	scmp_filter_ctx ctx;
	struct stat st;
	ssize_t n;
	void *buf = NULL;
	int fd, err;

	memset(prog, 0, sizeof(*prog));
	err = filter_ctx(c, &ctx);
	if (err)
		return err;
	/* libseccomp 2.5 exports only to a file descriptor. */
	fd = memfd_create("egr-seccomp", MFD_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		goto out;
	}
	err = seccomp_export_bpf(ctx, fd);
	if (err)
		goto out;
	if (fstat(fd, &st) < 0) {
		err = -errno;
		goto out;
	}
	if (st.st_size <= 0 || st.st_size % sizeof(struct sock_filter) ||
	    st.st_size / sizeof(struct sock_filter) > BPF_MAXINSNS) {
		err = -E2BIG;
		goto out;
	}
	buf = malloc((size_t)st.st_size);
	if (!buf) {
		err = -ENOMEM;
		goto out;
	}
	n = pread(fd, buf, (size_t)st.st_size, 0);
	if (n != st.st_size) {
		err = n < 0 ? -errno : -EIO;
		goto out;
	}
	prog->filter = buf;
	prog->len = (unsigned short)(st.st_size / sizeof(struct sock_filter));
	buf = NULL;
out:
	free(buf);
	if (fd >= 0)
		close(fd);
	seccomp_release(ctx);
	return err;
}

void egr_confine_seccomp_free(struct sock_fprog *prog)
{
	free(prog->filter);
	prog->filter = NULL;
	prog->len = 0;
}

int egr_confine_seccomp_install(const struct sock_fprog *prog)
{
	/* Fail closed: an empty program is never "no filter". */
	if (!prog->filter || !prog->len)
		return -EINVAL;
	/* What libseccomp's load does with SCMP_FLTATR_CTL_NNP and no flags. */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, prog) < 0)
		return -errno;
	return 0;
}

int egr_caps_restrict(bool (*keep)(int cap, void *ctx), void *ctx, unsigned int *dropped)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];

	bool setpcap;

	if (dropped)
		*dropped = 0;
	if (syscall(SYS_capget, &hdr, data) < 0)
		return -errno;
	setpcap = data[CAP_SETPCAP / 32].effective & (1u << (CAP_SETPCAP % 32));
	/* The bounding set first: dropping from it needs CAP_SETPCAP, which
	 * may itself go with the capset below. A capability already out of
	 * it needs no drop. Without CAP_SETPCAP (a systemd unit's
	 * CapabilityBoundingSet= without it) the bounding set cannot shrink;
	 * that is safe only under no_new_privs, where no exec can raise a
	 * capability back from it (file capabilities and setuid are ignored):
	 * the capset below then takes the capability away for good. */
	for (int cap = 0; cap <= CAP_LAST_CAP; cap++) {
		int in = prctl(PR_CAPBSET_READ, cap, 0, 0, 0);

		if (keep(cap, ctx) || in == 0 || (in < 0 && errno == EINVAL))
			continue; /* EINVAL: the running kernel does not know it */
		if (!setpcap && prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1)
			continue;
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			return -errno;
	}
	for (int cap = 0; cap <= CAP_LAST_CAP; cap++) {
		uint32_t bit = 1u << (cap % 32);

		if (keep(cap, ctx))
			continue;
		if (dropped && (data[cap / 32].effective & bit))
			(*dropped)++;
		data[cap / 32].effective &= ~bit;
		data[cap / 32].permitted &= ~bit;
		data[cap / 32].inheritable &= ~bit;
	}
	if (syscall(SYS_capset, &hdr, data) < 0)
		return -errno;
	/* Ambient capabilities are cleared whenever a permitted bit goes. */
	return 0;
}

static bool not_listed(int cap, void *ctx)
{
	for (size_t i = 0; i < sizeof(caps_to_drop) / sizeof(caps_to_drop[0]); i++)
		if (caps_to_drop[i] == cap)
			return false;
	return true;
}

int egr_confine_drop_caps(void)
{
	return egr_caps_restrict(not_listed, NULL, NULL);
}

static bool keep_none(int cap, void *ctx)
{
	return false;
}

/* 0 when the bounding, effective, permitted, inheritable and ambient sets
 * are all empty, -EPERM otherwise: what the caller relies on, checked. */
static int check_no_caps(void)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];

	if (syscall(SYS_capget, &hdr, data) < 0)
		return -errno;
	for (int i = 0; i < 2; i++)
		if (data[i].effective || data[i].permitted || data[i].inheritable)
			return -EPERM;
	for (int cap = 0; cap <= CAP_LAST_CAP; cap++) {
		if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) > 0)
			return -EPERM;
		if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0) > 0)
			return -EPERM;
	}
	return 0;
}

/* no_new_privs, these securebits (locked as they say), no ambient set. */
static int lock_privs(unsigned long bits)
{
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) < 0)
		return -errno;
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return -errno;
	return 0;
}

int egr_confine_drop_all_caps(const struct egr_run_user *user)
{
	/* Locked: no later exec of a set-uid-root file or uid change brings a
	 * capability back (the bounding set is empty too; belt and braces). */
	const unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED |
				   SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED |
				   SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
				   SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
	int err = lock_privs(bits);

	if (err)
		return err;
	/* The uid change needs CAP_SETUID/CAP_SETGID: before the capset, which
	 * SECBIT_NO_SETUID_FIXUP leaves to us. */
	if (user) {
		gid_t gid = user->gid;

		if (setgroups(1, &gid) < 0 || setresgid(user->gid, user->gid, user->gid) < 0 ||
		    setresuid(user->uid, user->uid, user->uid) < 0)
			return -errno;
	}
	err = egr_caps_restrict(keep_none, NULL, NULL);
	if (err)
		return err;
	return check_no_caps();
}

static bool keep_ns(int cap, void *ctx)
{
	return cap < 64 && (EGR_CONFINE_NS_CAPS & (1ULL << cap));
}

int egr_confine_keep_ns_caps(void)
{
	const unsigned long bits = SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP_LOCKED |
				   SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
				   SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];
	int err = lock_privs(bits);

	if (err)
		return err;
	err = egr_caps_restrict(keep_ns, NULL, NULL);
	if (err)
		return err;
	if (syscall(SYS_capget, &hdr, data) < 0)
		return -errno;
	if ((data[0].effective | ((uint64_t)data[1].effective << 32)) != EGR_CONFINE_NS_CAPS ||
	    (data[0].permitted | ((uint64_t)data[1].permitted << 32)) != EGR_CONFINE_NS_CAPS ||
	    data[0].inheritable || data[1].inheritable)
		return -EPERM;
	for (int cap = 0; cap <= CAP_LAST_CAP; cap++)
		if ((prctl(PR_CAPBSET_READ, cap, 0, 0, 0) > 0) != keep_ns(cap, NULL) ||
		    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0) > 0)
			return -EPERM;
	return 0;
}

/* --- the tables, for the OCI profiles (seccomp_profile.c) --------------------- */

_Static_assert(CONFINE_AF_LIMIT == EGR_CONFINE_AF_LIMIT, "one family limit");

size_t egr_confine_refused_calls(const char *const **names)
{
	*names = refused_calls;
	return sizeof(refused_calls) / sizeof(refused_calls[0]);
}

size_t egr_confine_rewrites(const struct egr_confine_rewrite **table)
{
	*table = rewrites;
	return sizeof(rewrites) / sizeof(rewrites[0]);
}

bool egr_confine_family_allowed(const struct egr_confine *c, int af)
{
	return family_allowed(c, af);
}

size_t egr_confine_refused_args(const struct egr_confine_arg_rule **rules)
{
	*rules = refused_args;
	return sizeof(refused_args) / sizeof(refused_args[0]);
}
