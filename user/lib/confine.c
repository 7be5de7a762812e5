// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <linux/capability.h>
#include <seccomp.h>
#include <stdbool.h>
#include <string.h>
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
 * open); perf_event_open is the other way to attach programs. */
static const char *const refused_calls[] = { "io_uring_setup", "io_uring_enter",
					       "io_uring_register", "bpf", "perf_event_open" };

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

int egr_confine_seccomp(const struct egr_confine *c)
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
	for (size_t i = 0; i < sizeof(refused_calls) / sizeof(refused_calls[0]) && !err; i++) {
		int nr = seccomp_syscall_resolve_name(refused_calls[i]);

		if (nr != __NR_SCMP_ERROR)
			err = seccomp_rule_add_exact(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
	}
	if (!err)
		err = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1);
	if (!err)
		err = seccomp_load(ctx);
	seccomp_release(ctx);
	return err;
}

int egr_caps_restrict(bool (*keep)(int cap, void *ctx), void *ctx, unsigned int *dropped)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];

	if (dropped)
		*dropped = 0;
	/* The bounding set first: dropping from it needs CAP_SETPCAP, which
	 * may itself go with the capset below. */
	for (int cap = 0; cap <= CAP_LAST_CAP; cap++) {
		if (keep(cap, ctx))
			continue;
		/* EINVAL: the running kernel does not know this capability. */
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			return -errno;
	}
	if (syscall(SYS_capget, &hdr, data) < 0)
		return -errno;
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

/* --- the tables, for the OCI profiles (seccomp_profile.c) --------------------- */

_Static_assert(CONFINE_AF_LIMIT == EGR_CONFINE_AF_LIMIT, "one family limit");

size_t egr_confine_refused_calls(const char *const **names)
{
	*names = refused_calls;
	return sizeof(refused_calls) / sizeof(refused_calls[0]);
}

bool egr_confine_family_allowed(const struct egr_confine *c, int af)
{
	return family_allowed(c, af);
}
