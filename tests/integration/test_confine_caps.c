// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Integration tests of user/lib/confine.c's capability drops (root: only
 * uid 0 with CAP_SETPCAP can drop from the bounding set, and the checks are
 * what uid 0 could do without them). Each drop is applied in a forked child
 * (tests/common/in_child.h); the seccomp tests that need no root are in
 * tests/unit/test_confine.c.
 */
#include <errno.h>
#include <linux/capability.h>
#include <linux/if_ether.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "confine.h"
#include "../common/in_child.h"

static int capbset_has(int cap)
{
	return prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1;
}

static void child_drop_caps(void)
{
	static const int gone[] = { CAP_NET_RAW, CAP_NET_ADMIN, CAP_SYS_ADMIN, CAP_BPF,
				    CAP_SYS_PTRACE, CAP_SYS_MODULE };
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];
	int err;

	if (!capbset_has(CAP_NET_RAW))
		child_fail("CAP_NET_RAW is not in the bounding set to begin with");
	err = egr_confine_drop_caps();
	if (err)
		child_fail("egr_confine_drop_caps: %s", strerror(-err));
	for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++)
		if (capbset_has(gone[i]))
			child_fail("capability %d is still in the bounding set", gone[i]);
	if (syscall(SYS_capget, &hdr, data))
		child_fail("capget: %s", strerror(errno));
	for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++) {
		uint32_t bit = 1u << (gone[i] % 32);

		if ((data[gone[i] / 32].effective | data[gone[i] / 32].permitted) & bit)
			child_fail("capability %d is still effective or permitted", gone[i]);
	}
	/* Others stay (the command may still need e.g. CAP_DAC_OVERRIDE). */
	if (!capbset_has(CAP_CHOWN))
		child_fail("CAP_CHOWN was dropped too");
	/* Without CAP_NET_RAW, even root gets no packet socket. */
	expect_socket_eperm(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL), "AF_PACKET without CAP_NET_RAW");
	expect_socket_eperm(AF_INET, SOCK_RAW, IPPROTO_ICMP, "raw inet without CAP_NET_RAW");
}

static void test_drop_caps(void **state)
{
	in_child(child_drop_caps, "drop caps");
}

/* egr_confine_drop_all_caps: nothing is left, for uid 0 too, and exec of
 * a root-owned binary gives nothing back. */
static void child_drop_all_caps(void)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];
	int err;

	err = egr_confine_drop_all_caps(NULL);
	if (err)
		child_fail("egr_confine_drop_all_caps: %s", strerror(-err));
	if (geteuid() != 0)
		child_fail("the uid changed without --user");
	if (syscall(SYS_capget, &hdr, data))
		child_fail("capget: %s", strerror(errno));
	for (int i = 0; i < 2; i++)
		if (data[i].effective || data[i].permitted || data[i].inheritable)
			child_fail("capabilities left: eff %#x prm %#x inh %#x (word %d)",
				   data[i].effective, data[i].permitted, data[i].inheritable, i);
	for (int cap = 0; cap <= CAP_LAST_CAP; cap++)
		if (capbset_has(cap))
			child_fail("capability %d is still in the bounding set", cap);
	if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1)
		child_fail("no_new_privs is not set");
	/* What uid 0 could do with them. */
	if (setuid(65534) == 0)
		child_fail("setuid(65534) succeeded without CAP_SETUID");
	if (chown("/", 65534, 65534) == 0)
		child_fail("chown(/) succeeded without CAP_CHOWN");
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_NET_RAW, 0, 0) == 0)
		child_fail("an ambient capability could be raised");
	expect_socket_eperm(AF_INET, SOCK_RAW, IPPROTO_ICMP, "raw inet without capabilities");
}

static void test_drop_all_caps(void **state)
{
	in_child(child_drop_all_caps, "drop all caps");
}

/* --user: the identity changes, and still nothing is left. */
static void child_drop_all_caps_user(void)
{
	struct egr_run_user u = { .uid = 65534, .gid = 65533 };
	gid_t groups[4];
	int err, n;

	err = egr_confine_drop_all_caps(&u);
	if (err)
		child_fail("egr_confine_drop_all_caps(65534:65533): %s", strerror(-err));
	if (getuid() != 65534 || geteuid() != 65534 || getgid() != 65533 || getegid() != 65533)
		child_fail("uid %d/%d gid %d/%d, expected 65534 and 65533", (int)getuid(),
			   (int)geteuid(), (int)getgid(), (int)getegid());
	n = getgroups(4, groups);
	if (n != 1 || groups[0] != 65533)
		child_fail("supplementary groups: %d of them, expected just 65533", n);
	if (setuid(0) == 0)
		child_fail("setuid(0) succeeded after the drop");
	for (int cap = 0; cap <= CAP_LAST_CAP; cap++)
		if (capbset_has(cap))
			child_fail("capability %d is still in the bounding set", cap);
}

static void test_drop_all_caps_user(void **state)
{
	in_child(child_drop_all_caps_user, "drop all caps, --user");
}

static int need_root(void **state)
{
	if (geteuid() != 0) {
		fprintf(stderr, "test_confine_caps needs root (PR_CAPBSET_DROP needs CAP_SETPCAP)\n");
		return -1; /* a failure, never a skip */
	}
	return 0;
}

/* egressd under its unit: CapabilityBoundingSet= without CAP_SETPCAP and
 * NoNewPrivileges=yes (issue 29: the unit failed to start under systemd,
 * "dropping capabilities: Operation not permitted"). */
static bool keep_bpf(int cap, void *ctx)
{
	return cap == CAP_BPF || cap == CAP_NET_ADMIN;
}

static void lose_setpcap(void)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];

	if (syscall(SYS_capget, &hdr, data))
		child_fail("capget: %s", strerror(errno));
	data[0].effective &= ~(1u << CAP_SETPCAP);
	data[0].permitted &= ~(1u << CAP_SETPCAP);
	if (syscall(SYS_capset, &hdr, data))
		child_fail("capset: %s", strerror(errno));
}

static void child_restrict_without_setpcap_nnp(void)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];
	int err;

	lose_setpcap();
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		child_fail("PR_SET_NO_NEW_PRIVS: %s", strerror(errno));
	err = egr_caps_restrict(keep_bpf, NULL, NULL);
	if (err)
		child_fail("egr_caps_restrict without CAP_SETPCAP, no_new_privs: %s", strerror(-err));
	if (syscall(SYS_capget, &hdr, data))
		child_fail("capget: %s", strerror(errno));
	if ((data[0].effective | data[0].permitted) & (1u << CAP_NET_RAW))
		child_fail("CAP_NET_RAW is still effective or permitted");
	if (!((data[1].permitted) & (1u << (CAP_BPF % 32))))
		child_fail("CAP_BPF, kept, is gone");
	expect_socket_eperm(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL), "AF_PACKET after the drop");
}

static void test_restrict_without_setpcap_nnp(void **state)
{
	in_child(child_restrict_without_setpcap_nnp, "restrict without CAP_SETPCAP, nnp");
}

/* Twin: without no_new_privs an exec could raise a capability from the
 * bounding set again, so a bounding set that cannot shrink is an error. */
static void child_restrict_without_setpcap(void)
{
	int err;

	lose_setpcap();
	err = egr_caps_restrict(keep_bpf, NULL, NULL);
	if (err != -EPERM)
		child_fail("egr_caps_restrict without CAP_SETPCAP or no_new_privs: %d, want -EPERM",
			   err);
}

static void test_restrict_without_setpcap(void **state)
{
	in_child(child_restrict_without_setpcap, "restrict without CAP_SETPCAP");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_drop_caps),
		cmocka_unit_test(test_drop_all_caps),
		cmocka_unit_test(test_drop_all_caps_user),
		cmocka_unit_test(test_restrict_without_setpcap_nnp),
		cmocka_unit_test(test_restrict_without_setpcap),
	};

	return cmocka_run_group_tests(tests, need_root, NULL);
}
