// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The families the kernel rewrites after seccomp judged socket()'s family
 * (issue 23, finding 6): net/socket.c __sock_create() makes (PF_INET,
 * SOCK_PACKET) a PF_PACKET socket. The filter and the OCI profile refuse
 * it (confine.c's rewrite table); this checks the table against the
 * running kernel, the real filter in a child (tests/common/in_child.h) and
 * the profile's rules.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <cmocka.h>
#include <jansson.h>

#include "confine.h"
#include "../common/in_child.h"

static bool ci(void)
{
	const char *v = getenv("CI");

	return v && strcmp(v, "true") == 0;
}

/* The protocol a socket(family, type) attempt passes. */
static int proto_for(int family, int type)
{
	if (type == SOCK_PACKET)
		return htons(ETH_P_ALL);
	if (type == SOCK_RAW)
		return family == AF_UNIX ? 0 : 255; /* IPPROTO_RAW */
	return 0;
}

static bool in_table(int family, int type, int to)
{
	const struct egr_confine_rewrite *rw;
	size_t n = egr_confine_rewrites(&rw);

	for (size_t i = 0; i < n; i++)
		if (rw[i].family == family && rw[i].type == type && rw[i].to == to)
			return true;
	return false;
}

/*
 * Every (allowed family, type) this kernel creates as another family is in
 * the table. Only the families the filter allows are tried (creating one of
 * the others could load its module on the host). Root: SOCK_PACKET and
 * SOCK_RAW need CAP_NET_RAW (under CI=true a non-root run fails).
 */
static void test_kernel_rewrites_in_table(void **state)
{
	static const int families[] = { AF_UNIX, AF_INET, AF_INET6 };
	int seen_inet_packet = 0;

	if (geteuid() != 0) {
		if (ci())
			fail_msg("trying SOCK_PACKET and SOCK_RAW needs root");
		fprintf(stderr, "note: not root: the kernel's rewrites are not probed\n");
		return;
	}
	for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
		for (int t = 0; t <= EGR_CONFINE_TYPE_MASK; t++) {
			int fd = socket(families[i], t | SOCK_CLOEXEC, proto_for(families[i], t));
			int dom = -1;
			socklen_t len = sizeof(dom);

			if (fd < 0)
				continue;
			assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &len), 0);
			close(fd);
			if (dom == families[i])
				continue;
			if (!in_table(families[i], t, dom))
				fail_msg("socket(%d, %d) is a family %d socket: not in confine.c's "
					 "rewrite table",
					 families[i], t, dom);
			if (families[i] == AF_INET && t == SOCK_PACKET)
				seen_inet_packet = 1;
		}
	/* The probe sees the rewrite the finding used (so it can fail). */
	assert_true(seen_inet_packet);
}

static void expect_raw_eperm(long family, long type, int proto, const char *what)
{
	long fd = syscall(SYS_socket, family, type, proto);

	if (fd >= 0) {
		close((int)fd);
		child_fail("%s: socket() succeeded under the filter", what);
	}
	if (errno != EPERM)
		child_fail("%s: socket() failed with %s, expected EPERM", what, strerror(errno));
}

static void child_packet_refused(void)
{
	struct egr_confine c = { 0 };
	int err, sv[2];

	err = egr_confine_seccomp(&c);
	if (err)
		child_fail("egr_confine_seccomp: %s", strerror(-err));
	expect_socket_eperm(AF_INET, SOCK_PACKET, htons(ETH_P_ALL), "AF_INET SOCK_PACKET");
	expect_socket_eperm(AF_INET, SOCK_PACKET | SOCK_NONBLOCK, htons(ETH_P_ALL),
			    "AF_INET SOCK_PACKET|SOCK_NONBLOCK");
	expect_socket_eperm(AF_INET6, SOCK_PACKET, htons(ETH_P_ALL), "AF_INET6 SOCK_PACKET");
	/* The kernel takes an int: bits above 32 must not hide the type. */
	expect_raw_eperm(AF_INET, (long)SOCK_PACKET | (1L << 32), htons(ETH_P_ALL),
			 "AF_INET SOCK_PACKET | 1 << 32");
	if (socketpair(AF_INET, SOCK_PACKET, 0, sv) == 0 || errno != EPERM)
		child_fail("socketpair(AF_INET, SOCK_PACKET): not EPERM (%s)", strerror(errno));
	/* Sanity twin: the same family's ordinary types. */
	expect_socket_ok(AF_INET, SOCK_DGRAM, 0, "AF_INET dgram");
	expect_socket_ok(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0, "AF_INET stream nonblock");
	expect_socket_ok(AF_INET6, SOCK_DGRAM, 0, "AF_INET6 dgram");
}

static void test_filter_refuses_inet_packet(void **state)
{
	in_child(child_packet_refused, "SOCK_PACKET under the filter");
}

/* With AF_PACKET itself allowed by the policy, the rewrite opens nothing
 * the policy does not: not refused (root: it is then a real socket). */
static void child_packet_allowed(void)
{
	struct egr_confine c = { .extra_families = 1ULL << AF_PACKET };
	int err;

	err = egr_confine_seccomp(&c);
	if (err)
		child_fail("egr_confine_seccomp: %s", strerror(-err));
	expect_socket_ok(AF_INET, SOCK_PACKET, htons(ETH_P_ALL), "AF_INET SOCK_PACKET, packet allowed");
}

static void test_filter_packet_family_allowed(void **state)
{
	if (geteuid() != 0) {
		if (ci())
			fail_msg("a packet socket needs root");
		return;
	}
	in_child(child_packet_allowed, "SOCK_PACKET with AF_PACKET allowed");
}

/* The rules of one socket/socketpair family in the OCI profile: n ALLOW
 * and n ERRNO rules conditioned on arg0 == af and arg1's type, and whether
 * the type rule for SOCK_PACKET is an EPERM. */
static void profile_family(const json_t *prof, const char *call, int af, int *allow, int *deny,
			   bool *packet_denied, bool *plain_allow)
{
	const json_t *r;
	size_t i;

	*allow = *deny = 0;
	*packet_denied = *plain_allow = false;
	json_array_foreach(json_object_get(prof, "syscalls"), i, r) {
		const json_t *args = json_object_get(r, "args");
		const json_t *a0 = json_array_get(args, 0), *a1 = json_array_get(args, 1);
		const char *act = json_string_value(json_object_get(r, "action")) ?: "";

		if (strcmp(json_string_value(json_array_get(json_object_get(r, "names"), 0)) ?: "",
			   call) ||
		    json_integer_value(json_object_get(a0, "index")) != 0 ||
		    json_integer_value(json_object_get(a0, "value")) != af ||
		    strcmp(json_string_value(json_object_get(a0, "op")) ?: "", "SCMP_CMP_EQ"))
			continue;
		if (!a1) {
			if (!strcmp(act, "SCMP_ACT_ALLOW"))
				*plain_allow = true;
			continue;
		}
		assert_int_equal(json_integer_value(json_object_get(a1, "index")), 1);
		assert_int_equal(json_integer_value(json_object_get(a1, "value")), 0xf);
		assert_string_equal(json_string_value(json_object_get(a1, "op")),
				    "SCMP_CMP_MASKED_EQ");
		if (!strcmp(act, "SCMP_ACT_ALLOW")) {
			(*allow)++;
		} else {
			(*deny)++;
			if (json_integer_value(json_object_get(a1, "valueTwo")) == SOCK_PACKET &&
			    json_integer_value(json_object_get(r, "errnoRet")) == EPERM)
				*packet_denied = true;
		}
	}
}

static void test_oci_profile_inet_packet(void **state)
{
	static const char *const calls[] = { "socket", "socketpair" };
	static const int inet[] = { AF_INET, AF_INET6 };
	struct egr_confine c = { 0 }, packet = { .extra_families = 1ULL << AF_PACKET };
	json_t *prof = NULL;
	int allow, deny;
	bool denied, plain;

	assert_int_equal(egr_confine_oci_profile(&c, &prof), 0);
	for (size_t k = 0; k < 2; k++)
		for (size_t j = 0; j < 2; j++) {
			profile_family(prof, calls[k], inet[j], &allow, &deny, &denied, &plain);
			/* No ALLOW of the whole family that would overlap the EPERM. */
			assert_false(plain);
			assert_int_equal(allow, 15);
			assert_int_equal(deny, 1);
			assert_true(denied);
		}
	/* Twin: AF_UNIX has no rewrite, one plain ALLOW. */
	profile_family(prof, "socket", AF_UNIX, &allow, &deny, &denied, &plain);
	assert_true(plain);
	assert_int_equal(allow + deny, 0);
	json_decref(prof);
	/* With AF_PACKET allowed there is nothing to refuse. */
	assert_int_equal(egr_confine_oci_profile(&packet, &prof), 0);
	profile_family(prof, "socket", AF_INET, &allow, &deny, &denied, &plain);
	assert_true(plain);
	assert_int_equal(allow + deny, 0);
	json_decref(prof);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kernel_rewrites_in_table),
		cmocka_unit_test(test_filter_refuses_inet_packet),
		cmocka_unit_test(test_filter_packet_family_allowed),
		cmocka_unit_test(test_oci_profile_inet_packet),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
