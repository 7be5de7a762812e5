// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Device sandboxes attached for real (user/egressd/kernel/netdev.c): a veth
 * pair between two network namespaces of the test's own, the host side (H,
 * vh, 10.78.0.1) and the sandbox (S, 10.78.0.2), the device programs on vh
 * with egressd's real maps (egr_bpf_open on a bpffs directory of the test's
 * own), a policy compiled as egressd compiles it. What the sandbox sends to
 * a denied port never reaches the server in H; the allowed port does, TCP
 * replies come back through the flow table, a connection into the sandbox
 * does not. Both attach paths (TCX links, tc filters forced with
 * EGRESSD_TEST_NETDEV_TC=1); the links are pinned and the process holds no
 * fd of them; detach opens the device again. Each attack has its twin (the
 * same send before the attach, or after the detach, arrives). Root.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cmocka.h>

#include "kernel/bpfstate.h"
#include "kernel/netdev.h"
#include "compile.h"
#include "policy.h"

#define SB_ID 900
#define POLICY_ID 77

static struct egr_bpf *B;
static char ns_h[32], ns_s[32], dev_h[16], bpfdir[64];

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
		fprintf(stderr, "test_netdev_attach: '%s': %d\n", cmd, rc);
	return rc;
}

/* A socket of the namespace name (the thread goes there and back). */
static int ns_socket(const char *name, int type)
{
	char path[64];
	int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC), fd, s;

	snprintf(path, sizeof(path), "/run/netns/%s", name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(self >= 0 && fd >= 0);
	assert_int_equal(setns(fd, CLONE_NEWNET), 0);
	s = socket(AF_INET, type | SOCK_CLOEXEC, 0);
	assert_int_equal(setns(self, CLONE_NEWNET), 0);
	close(fd);
	close(self);
	assert_true(s >= 0);
	return s;
}

static struct sockaddr_in sin_of(const char *a, uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };

	assert_int_equal(inet_pton(AF_INET, a, &sa.sin_addr), 1);
	return sa;
}

/* Did a datagram from S to 10.78.0.1:port reach a server bound there in H? */
static bool udp_arrives(uint16_t port)
{
	struct sockaddr_in srv = sin_of("10.78.0.1", port);
	int rx = ns_socket(ns_h, SOCK_DGRAM), tx = ns_socket(ns_s, SOCK_DGRAM), n;
	struct pollfd p = { .fd = rx, .events = POLLIN };
	char buf[64];

	assert_int_equal(bind(rx, (struct sockaddr *)&srv, sizeof(srv)), 0);
	assert_int_equal(sendto(tx, "hello", 5, 0, (struct sockaddr *)&srv, sizeof(srv)), 5);
	n = poll(&p, 1, 400);
	if (n == 1)
		n = (int)recv(rx, buf, sizeof(buf), MSG_DONTWAIT);
	close(rx);
	close(tx);
	return n == 5;
}

/* Does a TCP connect from the namespace from to addr:port of the namespace
 * to complete (within 1 s)? */
static bool tcp_connects(const char *from, const char *to, const char *addr, uint16_t port)
{
	struct sockaddr_in srv = sin_of(addr, port);
	int l = ns_socket(to, SOCK_STREAM), c = ns_socket(from, SOCK_STREAM), one = 1, err = 0;
	struct pollfd p = { .fd = c, .events = POLLOUT };
	socklen_t len = sizeof(err);
	bool ok = false;

	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	assert_int_equal(bind(l, (struct sockaddr *)&srv, sizeof(srv)), 0);
	assert_int_equal(listen(l, 4), 0);
	fcntl(c, F_SETFL, O_NONBLOCK);
	if (connect(c, (struct sockaddr *)&srv, sizeof(srv)) == 0 || errno == EINPROGRESS)
		if (poll(&p, 1, 1000) == 1 && getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len) == 0)
			ok = err == 0;
	close(c);
	close(l);
	return ok;
}

static int setup(void **state)
{
	const char *doc = "{\"tenant\":\"t\",\"execution_id\":\"e\",\"principal\":\"p\","
			  "\"tool\":\"t\",\"version\":\"1\",\"network\":{\"default\":\"deny\","
			  "\"outbound_allow\":[\"udp/10.78.0.1:9000\",\"10.78.0.1:8443\"],"
			  "\"inbound\":\"deny\"}}";
	struct egr_policy p = { 0 };
	struct egr_compiled c = { 0 };
	struct egr_error e = { 0 };
	struct egr_sandbox ksb = { .policy_id = POLICY_ID, .tenant_id = 1 };
	struct egr_features feat;
	int pid = (int)getpid(), err;

	snprintf(ns_h, sizeof(ns_h), "egrndh%d", pid);
	snprintf(ns_s, sizeof(ns_s), "egrnds%d", pid);
	snprintf(dev_h, sizeof(dev_h), "ndh%d", pid);
	snprintf(bpfdir, sizeof(bpfdir), "/sys/fs/bpf/egr-ndtest-%d", pid);
	if (sh("ip netns add %s && ip netns add %s", ns_h, ns_s) ||
	    sh("ip -n %s link add %s type veth peer name vs netns %s", ns_h, dev_h, ns_s) ||
	    sh("ip -n %s addr add 10.78.0.1/30 dev %s && ip -n %s link set %s up && "
	       "ip -n %s link set lo up", ns_h, dev_h, ns_h, dev_h, ns_h) ||
	    sh("ip -n %s addr add 10.78.0.2/30 dev vs && ip -n %s link set vs up && "
	       "ip -n %s link set lo up", ns_s, ns_s, ns_s) ||
	    sh("ip netns exec %s sysctl -qw net.ipv4.conf.all.forwarding=1", ns_h))
		return -1;
	err = egr_bpf_open(&B, bpfdir, NULL, NULL, &feat);
	if (err) {
		fprintf(stderr, "test_netdev_attach: egr_bpf_open: %s\n", strerror(-err));
		return -1;
	}
	if (egr_policy_parse(doc, strlen(doc), &p, &e) || egr_policy_compile(&p, &c, &e) ||
	    egr_bpf_put_rules(B, POLICY_ID, &c) || egr_bpf_put_sandbox(B, SB_ID, &ksb)) {
		fprintf(stderr, "test_netdev_attach: policy: %s\n", e.message);
		return -1;
	}
	egr_compiled_free(&c);
	egr_policy_free(&p);
	*state = NULL;
	return 0;
}

static int teardown(void **state)
{
	egr_nd_detach(B, SB_ID, NULL, NULL);
	egr_bpf_close(B);
	sh("ip netns del %s; ip netns del %s; rm -rf %s", ns_h, ns_s, bpfdir);
	return 0;
}

static void enforced_then_detached(enum egr_nd_mode want)
{
	char netns[64], pin[128];
	enum egr_nd_mode mode = 0;

	snprintf(netns, sizeof(netns), "/run/netns/%s", ns_h);
	/* Twins first: nothing attached, everything goes. */
	assert_true(udp_arrives(9001));
	assert_true(tcp_connects(ns_s, ns_h, "10.78.0.1", 8444));
	assert_true(tcp_connects(ns_h, ns_s, "10.78.0.2", 7000));

	assert_int_equal(egr_nd_attach(B, SB_ID, netns, dev_h, NULL, &mode), 0);
	assert_int_equal(mode, want);
	snprintf(pin, sizeof(pin), "%s/netdev/%d/ingress", bpfdir, SB_ID);
	assert_int_equal(access(pin, F_OK) == 0, want == EGR_ND_TCX);
	/* egr_nd_attach kept no fd: the pins (or the filters) alone enforce,
	 * as while egressd is down. */
	assert_true(udp_arrives(9000));
	assert_false(udp_arrives(9001));
	assert_true(tcp_connects(ns_s, ns_h, "10.78.0.1", 8443)); /* replies come back */
	assert_false(tcp_connects(ns_s, ns_h, "10.78.0.1", 8444));
	assert_false(tcp_connects(ns_h, ns_s, "10.78.0.2", 7000)); /* inbound denied */

	assert_int_equal(egr_nd_detach(B, SB_ID, netns, dev_h), 0);
	assert_int_equal(access(pin, F_OK), -1);
	assert_true(udp_arrives(9001));
	assert_true(tcp_connects(ns_h, ns_s, "10.78.0.2", 7000));
}

/* TCX came with 6.6: older kernels (the matrix's 6.1) take the tc path
 * on their own. */
static bool kernel_has_tcx(void)
{
	struct utsname u;
	int major = 0, minor = 0;

	assert_int_equal(uname(&u), 0);
	assert_int_equal(sscanf(u.release, "%d.%d", &major, &minor), 2);
	return major > 6 || (major == 6 && minor >= 6);
}

static void test_tcx_links_enforce_and_detach(void **state)
{
	unsetenv("EGRESSD_TEST_NETDEV_TC");
	enforced_then_detached(kernel_has_tcx() ? EGR_ND_TCX : EGR_ND_TC);
}

static void test_tc_filters_enforce_and_detach(void **state)
{
	setenv("EGRESSD_TEST_NETDEV_TC", "1", 1);
	enforced_then_detached(EGR_ND_TC);
	unsetenv("EGRESSD_TEST_NETDEV_TC");
}

static void test_attach_to_a_missing_device_fails_and_leaves_nothing(void **state)
{
	char netns[64], dir[128];
	enum egr_nd_mode mode = 0;

	snprintf(netns, sizeof(netns), "/run/netns/%s", ns_h);
	snprintf(dir, sizeof(dir), "%s/netdev/%d", bpfdir, SB_ID);
	assert_int_equal(egr_nd_attach(B, SB_ID, netns, "nosuchdev0", NULL, &mode), -ENODEV);
	assert_int_equal(access(dir, F_OK), -1);
	/* The device exists in S, not in H: the namespace is honoured. */
	assert_int_equal(egr_nd_attach(B, SB_ID, netns, "vs", NULL, &mode), -ENODEV);
}

/* Last: it deletes the device. A deleted device takes its TCX links with
 * it (they go defunct); the detach still removes the pins. */
static void test_device_deleted_then_detach_cleans_up(void **state)
{
	char netns[64], dir[128];
	enum egr_nd_mode mode = 0;

	unsetenv("EGRESSD_TEST_NETDEV_TC");
	snprintf(netns, sizeof(netns), "/run/netns/%s", ns_h);
	snprintf(dir, sizeof(dir), "%s/netdev/%d", bpfdir, SB_ID);
	assert_int_equal(egr_nd_attach(B, SB_ID, netns, dev_h, NULL, &mode), 0);
	assert_int_equal(access(dir, F_OK), 0);
	assert_int_equal(sh("ip -n %s link del %s", ns_h, dev_h), 0);
	assert_int_equal(egr_nd_detach(B, SB_ID, netns, dev_h), 0);
	assert_int_equal(access(dir, F_OK), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tcx_links_enforce_and_detach),
		cmocka_unit_test(test_tc_filters_enforce_and_detach),
		cmocka_unit_test(test_attach_to_a_missing_device_fails_and_leaves_nothing),
		cmocka_unit_test(test_device_deleted_then_detach_cleans_up),
	};

	return cmocka_run_group_tests_name("netdev_attach", tests, setup, teardown);
}
