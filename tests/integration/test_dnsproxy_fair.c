// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Fairness between sandboxes in the DNS proxy (user/egressd/dns/dnsproxy.c,
 * docs/dns.md) against a real dnsmasq that this test starts on a free
 * loopback port. It links the daemon's objects ($(OUT)/libegressd.a).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "loop.h"
#include "dns/dnsproxy.h"
#include "dnsproxy_fx.h"

#define SBID2 8

static uint16_t add_second_sandbox(void)
{
	struct egr_dnspolicy *pol;
	struct egr_policy p;
	struct egr_error e;
	uint16_t p4 = 0, p6 = 0;

	assert_int_equal(egr_policy_parse(policy_json, strlen(policy_json), &p, &e), 0);
	assert_int_equal(egr_dnspolicy_new(&p, NULL, 0, &pol, &e), 0);
	egr_policy_free(&p);
	assert_int_equal(egr_dnsproxy_add_sandbox(fx.p, SBID2, "other", pol, -1, 0, 0, &p4, &p6),
			 0);
	return p4;
}

/* Send n queries to 127.0.0.1:port, pump the loop for ms; answers seen. */
static int burst_to(uint16_t port, int n, uint16_t id0, int ms, int *servfails)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int s = client_udp(AF_INET), got = 0;
	uint8_t q[512];
	uint64_t end;

	*servfails = 0;
	for (int i = 0; i < n; i++) {
		size_t qlen = build_query(q, (uint16_t)(id0 + i), "api.test", EGR_DNS_T_A, false);

		assert_true(sendto(s, q, qlen, 0, (void *)&sa, sizeof(sa)) == (ssize_t)qlen);
	}
	end = now_ms() + (uint64_t)ms;
	while (now_ms() < end) {
		ssize_t k = recv(s, rbuf, sizeof(rbuf), MSG_DONTWAIT);

		if (k < 0) {
			egr_loop_run_once(fx.loop, 10);
			continue;
		}
		assert_int_equal(egr_dns_parse_response(rbuf, (size_t)k, &resp), 0);
		got++;
		if (resp.rcode == EGR_DNS_R_SERVFAIL)
			(*servfails)++;
	}
	close(s);
	return got;
}

static int setup_rate(void **state)
{
	fx_limits.rate = 1; /* one token a second: nothing refills during the test */
	fx_limits.burst = 5;
	return setup_with(dnsmasq_port, 2000);
}

/* A sandbox past its rate has its UDP queries dropped unanswered and
 * counted; another sandbox's queries are served all the same. */
static void test_rate_limit_is_per_sandbox(void **state)
{
	struct egr_dnsproxy_stats st;
	uint16_t other = add_second_sandbox();
	int sf;

	assert_int_equal(burst_to(fx.port4, 20, 0xb000, 500, &sf), 5);
	assert_int_equal(sf, 0);
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID, &st), 0);
	assert_int_equal(st.shed_rate, 15);
	assert_int_equal(st.allowed, 5);
	assert_int_equal(burst_to(other, 5, 0xb100, 500, &sf), 5);
	assert_int_equal(sf, 0);
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID2, &st), 0);
	assert_int_equal(st.shed_rate, 0);
}

static int hole_fd = -1;

static int setup_hole(void **state)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);

	/* An upstream that never answers: a bound socket nobody reads. */
	hole_fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (hole_fd < 0 || bind(hole_fd, (void *)&sa, sl) || getsockname(hole_fd, (void *)&sa, &sl))
		return -1;
	fx_limits.inflight = 8;
	fx_limits.per_sb = 8;
	return setup_with(ntohs(sa.sin_port), 5000);
}

static int teardown_hole(void **state)
{
	teardown(state);
	close(hole_fd);
	hole_fd = -1;
	return 0;
}

/* The table is full of one sandbox's unanswered queries: another
 * sandbox's query evicts the heaviest one's oldest (SERVFAIL to it, counted
 * on it), not the other way round; the heaviest one's deferred queries do
 * not take the freed slot from the table's newcomer. */
static void test_full_table_evicts_heaviest(void **state)
{
	struct egr_dnsproxy_stats a, b;
	uint16_t other = add_second_sandbox();
	int sf;

	assert_int_equal(burst_to(fx.port4, 8, 0xc000, 200, &sf), 0);
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID, &a), 0);
	assert_int_equal(a.inflight, 8);
	/* More of its own wait for a slot (a burst, a restart's queue), up to
	 * four times its limit: nothing answered yet. */
	assert_int_equal(burst_to(fx.port4, 32, 0xc080, 200, &sf), 0);
	/* One more: past that too, its own SERVFAIL. */
	assert_int_equal(burst_to(fx.port4, 1, 0xc100, 200, &sf), 1);
	assert_int_equal(sf, 1);
	assert_int_equal(burst_to(other, 1, 0xc200, 200, &sf), 0);
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID, &a), 0);
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID2, &b), 0);
	assert_int_equal(a.evicted, 1);
	assert_int_equal(a.inflight, 7);
	assert_int_equal(a.shed_inflight, 1);
	assert_int_equal(b.inflight, 1);
	assert_int_equal(b.shed_inflight + b.evicted + b.servfail, 0);
}

static int setup_small(void **state)
{
	fx_limits.inflight = 64;
	fx_limits.per_sb = 8;
	return setup_with(dnsmasq_port, 2000);
}

/* A burst five times a sandbox's in-flight limit (a restart's queue, read
 * at once) is answered in full: past the limit the queries wait for a slot
 * instead of a SERVFAIL, and all are learned as usual. */
static void test_burst_past_limit_waits(void **state)
{
	struct egr_dnsproxy_stats a;
	int sf;

	assert_int_equal(burst_to(fx.port4, 40, 0xd000, 1500, &sf), 40);
	assert_int_equal(sf, 0);
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID, &a), 0);
	assert_int_equal(a.shed_inflight, 0);
	assert_int_equal(a.allowed, 40);
	assert_int_equal(a.inflight, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_rate_limit_is_per_sandbox, setup_rate,
						teardown),
		cmocka_unit_test_setup_teardown(test_full_table_evicts_heaviest, setup_hole,
						teardown_hole),
		cmocka_unit_test_setup_teardown(test_burst_past_limit_waits, setup_small, teardown),
	};

	return cmocka_run_group_tests(tests, start_dnsmasq, stop_dnsmasq_group);
}
