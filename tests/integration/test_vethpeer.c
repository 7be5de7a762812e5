// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The host side of a container namespace's veth (user/lib/vethpeer.c, the
 * OCI hook's gVisor containers) on real namespaces and veths of the test's
 * own: C (the container's), H (a named host side, /run/netns), the test's
 * own private namespace (unshared at setup: "the hook's namespace") and U,
 * a namespace with no path (a process holds it). Each refusal has its twin
 * that the same layout minus the fault is found. Root.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "vethpeer.h"

static char ns_c[32], ns_h[32], path_c[64], path_h[64];

static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	rc = system(cmd);
	if (rc)
		fprintf(stderr, "test_vethpeer: '%s': %d\n", cmd, rc);
	return rc;
}

static int setup(void **state)
{
	(void)state;
	/* The test's own namespace stands for the hook's: nothing is made in
	 * the host's. */
	if (unshare(CLONE_NEWNET)) {
		perror("test_vethpeer: unshare(CLONE_NEWNET)");
		return -1;
	}
	snprintf(ns_c, sizeof(ns_c), "evp%dc", (int)getpid());
	snprintf(ns_h, sizeof(ns_h), "evp%dh", (int)getpid());
	snprintf(path_c, sizeof(path_c), "/run/netns/%s", ns_c);
	snprintf(path_h, sizeof(path_h), "/run/netns/%s", ns_h);
	return sh("ip netns add %s && ip netns add %s", ns_c, ns_h);
}

static int teardown(void **state)
{
	(void)state;
	sh("ip netns del %s; ip netns del %s", ns_c, ns_h);
	return 0;
}

/* Each test starts from C and H without interfaces but loopback. */
static int fresh(void **state)
{
	(void)state;
	return sh("for d in $(ip -n %s -o link show | awk -F': ' '{print $2}' | cut -d@ -f1); do "
		  "[ $d = lo ] || ip -n %s link del $d; done; "
		  "for d in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1); do "
		  "[ $d = lo ] || ip link del $d; done; true", ns_c, ns_c);
}

static int open_c(void)
{
	int fd = open(path_c, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	return fd;
}

static int find(const char *const *cands, struct egr_veth_peer *p, char *why, size_t len)
{
	int fd = open_c(), err;

	why[0] = '\0';
	err = egr_veth_peer_find(fd, cands, p, why, len);
	close(fd);
	return err;
}

static void test_peer_in_a_named_namespace_is_found(void **state)
{
	const char *cands[] = { "", "/nonexistent/ns", path_h, NULL };
	struct egr_veth_peer p;
	char why[512];
	int fd;

	(void)state;
	assert_int_equal(sh("ip -n %s link add vh type veth peer name vc netns %s && "
			    "ip -n %s link set vc up && ip -n %s link set vh up", ns_h, ns_c, ns_c,
			    ns_h), 0);
	assert_int_equal(find(cands, &p, why, sizeof(why)), 0);
	assert_string_equal(p.inner, "vc");
	assert_string_equal(p.ifname, "vh");
	assert_string_equal(p.netns, path_h);
	assert_true(p.ifindex > 0 && p.inner_ifindex > 0);
	/* The hook's own list (its namespace, then each /run/netns entry) finds it too. */
	fd = open_c();
	assert_int_equal(egr_veth_peer_find_named(fd, &p, why, sizeof(why)), 0);
	close(fd);
	assert_string_equal(p.ifname, "vh");
	assert_string_equal(p.netns, path_h);
	/* Without H among the candidates it has no name: refused. */
	cands[2] = NULL;
	assert_int_equal(find(cands, &p, why, sizeof(why)), -ESRCH);
	assert_non_null(strstr(why, "neither the hook's nor one of /run/netns"));
}

static void test_peer_in_the_callers_namespace_has_no_path(void **state)
{
	const char *cands[] = { "", path_h, NULL };
	struct egr_veth_peer p;
	char why[512];

	(void)state;
	assert_int_equal(sh("ip link add vp type veth peer name vc netns %s", ns_c), 0);
	assert_int_equal(find(cands, &p, why, sizeof(why)), 0);
	assert_string_equal(p.ifname, "vp");
	assert_string_equal(p.netns, "");
}

static void test_no_veth_or_two_are_refused(void **state)
{
	const char *cands[] = { "", path_h, NULL };
	struct egr_veth_peer p;
	char why[512];

	(void)state;
	assert_int_equal(find(cands, &p, why, sizeof(why)), -ENOENT);
	assert_non_null(strstr(why, "no veth"));
	assert_int_equal(sh("ip -n %s link add vh type veth peer name vc netns %s", ns_h, ns_c), 0);
	assert_int_equal(find(cands, &p, why, sizeof(why)), 0); /* twin: one is found */
	assert_int_equal(sh("ip -n %s link add vh2 type veth peer name vc2 netns %s", ns_h, ns_c),
			 0);
	assert_int_equal(find(cands, &p, why, sizeof(why)), -ENOTUNIQ);
	assert_non_null(strstr(why, "two veths"));
}

static void test_another_interface_up_is_refused(void **state)
{
	const char *cands[] = { "", path_h, NULL };
	struct egr_veth_peer p;
	char why[512];

	(void)state;
	assert_int_equal(sh("ip -n %s link add vh type veth peer name vc netns %s && "
			    "ip -n %s link add br0 type bridge", ns_h, ns_c, ns_c), 0);
	/* Down: gVisor skips it. */
	assert_int_equal(find(cands, &p, why, sizeof(why)), 0);
	assert_int_equal(sh("ip -n %s link set br0 up", ns_c), 0);
	assert_int_equal(find(cands, &p, why, sizeof(why)), -ENOTUNIQ);
	assert_non_null(strstr(why, "br0"));
}

static void test_both_ends_inside_are_refused(void **state)
{
	const char *cands[] = { "", path_c, path_h, NULL };
	struct egr_veth_peer p;
	char why[512];

	(void)state;
	assert_int_equal(sh("ip -n %s link add va type veth peer name vb", ns_c), 0);
	/* Two veths, both ends: refused either way, never named. */
	assert_true(find(cands, &p, why, sizeof(why)) < 0);
	assert_int_equal(sh("ip -n %s link del va && ip -n %s link add vh type veth peer name vc "
			    "netns %s", ns_c, ns_h, ns_c), 0);
	/* C itself among the candidates is never taken for the peer's. */
	assert_int_equal(find(cands, &p, why, sizeof(why)), 0);
	assert_string_equal(p.netns, path_h);
}

static void test_peer_in_an_unnamed_namespace_is_refused(void **state)
{
	char upath[64], why[512];
	const char *cands[] = { "", path_h, NULL, NULL };
	struct egr_veth_peer p;
	int pfd[2], status;
	pid_t u;
	char c;

	(void)state;
	assert_int_equal(pipe(pfd), 0);
	u = fork();
	assert_true(u >= 0);
	if (u == 0) {
		close(pfd[0]);
		if (unshare(CLONE_NEWNET))
			_exit(1);
		if (write(pfd[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(pfd[1]);
	assert_int_equal(read(pfd[0], &c, 1), 1);
	close(pfd[0]);
	assert_int_equal(sh("ip -n %s link add vc type veth peer name vu netns %d", ns_c, (int)u),
			 0);
	assert_int_equal(find(cands, &p, why, sizeof(why)), -ESRCH);
	/* Twin: the same namespace by a path is found. */
	snprintf(upath, sizeof(upath), "/proc/%d/ns/net", (int)u);
	cands[2] = upath;
	assert_int_equal(find(cands, &p, why, sizeof(why)), 0);
	assert_string_equal(p.ifname, "vu");
	kill(u, SIGKILL);
	waitpid(u, &status, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_peer_in_a_named_namespace_is_found, fresh),
		cmocka_unit_test_setup(test_peer_in_the_callers_namespace_has_no_path, fresh),
		cmocka_unit_test_setup(test_no_veth_or_two_are_refused, fresh),
		cmocka_unit_test_setup(test_another_interface_up_is_refused, fresh),
		cmocka_unit_test_setup(test_both_ends_inside_are_refused, fresh),
		cmocka_unit_test_setup(test_peer_in_an_unnamed_namespace_is_refused, fresh),
	};

	return cmocka_run_group_tests_name("vethpeer", tests, setup, teardown);
}
