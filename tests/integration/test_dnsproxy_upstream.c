// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The DNS proxy against an upstream that loses or delays datagrams
 * (user/egressd/dns/dns_upstream.c, docs/dns.md "How the proxy decides"): the proxy's
 * upstream is a socket of this test, which drops or holds what the proxy
 * sends and relays the rest to a real dnsmasq on a free loopback port.
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

#define TIMEOUT_MS 900

static int relay_fd = -1; /* the proxy's upstream */
static struct sockaddr_in proxy_from; /* where the proxy sends from */

static int setup_relay(void **state)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);

	relay_fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (relay_fd < 0 || bind(relay_fd, (void *)&sa, sl) || getsockname(relay_fd, (void *)&sa, &sl))
		return -1;
	return setup_with(ntohs(sa.sin_port), TIMEOUT_MS);
}

static int teardown_relay(void **state)
{
	teardown(state);
	close(relay_fd);
	relay_fd = -1;
	return 0;
}

/* Run the proxy's loop until the relay has a datagram from it (or ms
 * pass); its length, or -1. */
static ssize_t pump_relay(uint8_t *buf, size_t cap, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;

	while (now_ms() < end) {
		socklen_t sl = sizeof(proxy_from);
		ssize_t k = recvfrom(relay_fd, buf, cap, MSG_DONTWAIT, (void *)&proxy_from, &sl);

		if (k >= 0)
			return k;
		egr_loop_run_once(fx.loop, 10);
	}
	return -1;
}

/* dnsmasq's answer to query q (its id kept), in ans; its length. */
static size_t ask_dnsmasq(const uint8_t *q, size_t len, uint8_t *ans, size_t cap)
{
	struct sockaddr_in up = { .sin_family = AF_INET, .sin_port = htons(dnsmasq_port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct pollfd pfd = { .events = POLLIN };
	ssize_t k;

	pfd.fd = socket(AF_INET, SOCK_DGRAM, 0);
	assert_true(pfd.fd >= 0);
	assert_int_equal(sendto(pfd.fd, q, len, 0, (void *)&up, sizeof(up)), (ssize_t)len);
	assert_int_equal(poll(&pfd, 1, 2000), 1);
	k = recv(pfd.fd, ans, cap, 0);
	close(pfd.fd);
	assert_true(k > 12);
	return (size_t)k;
}

static void relay_answer(const uint8_t *ans, size_t len)
{
	assert_int_equal(sendto(relay_fd, ans, len, 0, (void *)&proxy_from, sizeof(proxy_from)),
			 (ssize_t)len);
}

/* Run the loop until the client c has its answer (within ms); its rcode,
 * the answer in resp. */
static uint16_t client_answer(int c, uint16_t id, int ms)
{
	ssize_t k = pump_recv(c, rbuf, sizeof(rbuf), ms);

	assert_true(k > 0);
	assert_int_equal(egr_dns_parse_response(rbuf, (size_t)k, &resp), 0);
	assert_int_equal(resp.id, id);
	return resp.rcode;
}

/* The proxy's first datagram to the upstream is lost: a third of the
 * timeout later it sends the same query (same id) again, and the client
 * gets the answer to that, not a SERVFAIL. Twin: an upstream that loses
 * nothing is asked once. */
static void test_lost_datagram_is_resent(void **state)
{
	uint8_t q[512], first[512], again[512], ans[4096];
	size_t qlen = build_query(q, 0x5101, "api.test", EGR_DNS_T_A, false);
	struct egr_dnsproxy_stats st;
	int c = client_udp(AF_INET);
	ssize_t n1, n2;
	uint64_t t0;

	send_udp(c, AF_INET, q, qlen);
	n1 = pump_relay(first, sizeof(first), 500);
	assert_true(n1 > 12);
	t0 = now_ms();
	/* Dropped. The same bytes come again after ~TIMEOUT_MS/3. */
	n2 = pump_relay(again, sizeof(again), TIMEOUT_MS);
	assert_int_equal(n2, n1);
	assert_memory_equal(again, first, (size_t)n1);
	assert_true(now_ms() - t0 >= TIMEOUT_MS / 3 - 60);
	relay_answer(ans, ask_dnsmasq(again, (size_t)n2, ans, sizeof(ans)));
	assert_int_equal(client_answer(c, 0x5101, 1000), 0);
	assert_true(resp.naddrs >= 1);
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID, &st), 0);
	assert_int_equal(st.resent, 1);
	assert_int_equal(st.servfail + st.timeouts, 0);

	/* Twin: answered at once, never sent again. */
	qlen = build_query(q, 0x5102, "api.test", EGR_DNS_T_A, false);
	send_udp(c, AF_INET, q, qlen);
	n1 = pump_relay(first, sizeof(first), 500);
	assert_true(n1 > 12);
	relay_answer(ans, ask_dnsmasq(first, (size_t)n1, ans, sizeof(ans)));
	assert_int_equal(client_answer(c, 0x5102, 1000), 0);
	assert_int_equal(pump_relay(again, sizeof(again), TIMEOUT_MS / 2), -1);
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID, &st), 0);
	assert_int_equal(st.resent, 1);
	close(c);
}

/* The answer arrives after the query's deadline, while the loop is busy
 * for a moment (shorter than a stall, below): when the loop runs again the
 * timer is the first ready, and the waiting answer is still read before
 * anything is failed. */
static void test_answer_waiting_past_the_deadline_is_read(void **state)
{
	uint8_t q[512], fwd[512], ans[4096];
	size_t qlen = build_query(q, 0x5201, "api.test", EGR_DNS_T_A, false), alen;
	struct egr_dnsproxy_stats st;
	int c = client_udp(AF_INET);
	uint64_t t0;
	ssize_t n;

	send_udp(c, AF_INET, q, qlen);
	n = pump_relay(fwd, sizeof(fwd), 500);
	assert_true(n > 12);
	t0 = now_ms();
	alen = ask_dnsmasq(fwd, (size_t)n, ans, sizeof(ans));
	/* Its resends come and are not answered; the loop then does not run
	 * for 200 ms (4 ticks: no stall), past the deadline. */
	while (now_ms() < t0 + TIMEOUT_MS - 100)
		egr_loop_run_once(fx.loop, 10);
	usleep(200 * 1000);
	relay_answer(ans, alen);
	assert_int_equal(client_answer(c, 0x5201, 1000), 0);
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID, &st), 0);
	assert_int_equal(st.servfail + st.timeouts, 0);
	close(c);
}

/* The proxy does not run for twice the timeout (egressd starved, stopped,
 * its VM paused) with a query in flight whose datagram was lost: that time
 * is given back, the query goes to the upstream again at once, and its
 * answer reaches the client; no SERVFAIL for a wait the upstream never
 * had. */
static void test_stalled_proxy_gives_the_time_back(void **state)
{
	uint8_t q[512], fwd[512], ans[4096];
	size_t qlen = build_query(q, 0x5401, "api.test", EGR_DNS_T_A, false);
	struct egr_dnsproxy_stats st;
	int c = client_udp(AF_INET);
	ssize_t n;

	send_udp(c, AF_INET, q, qlen);
	n = pump_relay(fwd, sizeof(fwd), 500);
	assert_true(n > 12); /* lost */
	usleep(2 * TIMEOUT_MS * 1000);
	n = pump_relay(fwd, sizeof(fwd), 300);
	assert_true(n > 12);
	relay_answer(ans, ask_dnsmasq(fwd, (size_t)n, ans, sizeof(ans)));
	assert_int_equal(client_answer(c, 0x5401, 1000), 0);
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID, &st), 0);
	assert_int_equal(st.servfail + st.timeouts, 0);
	assert_true(st.resent >= 1);
	close(c);
}

/* Twin of all three: an upstream that never answers still costs a SERVFAIL at
 * the timeout, after the query went again (at most twice), counted as a
 * timeout. */
static void test_silent_upstream_times_out(void **state)
{
	uint8_t q[512], fwd[512];
	size_t qlen = build_query(q, 0x5301, "api.test", EGR_DNS_T_A, false);
	struct egr_dnsproxy_stats st;
	int c = client_udp(AF_INET), sent = 0;
	uint64_t t0 = now_ms();
	ssize_t k;

	send_udp(c, AF_INET, q, qlen);
	while (pump_relay(fwd, sizeof(fwd), TIMEOUT_MS + 300) > 0 && ++sent < 10)
		;
	k = pump_recv(c, rbuf, sizeof(rbuf), 500);
	assert_true(k > 0);
	assert_int_equal(egr_dns_parse_response(rbuf, (size_t)k, &resp), 0);
	assert_int_equal(resp.rcode, EGR_DNS_R_SERVFAIL);
	assert_true(now_ms() - t0 >= TIMEOUT_MS - 60);
	/* Twice again on time; once if a tick came so late (a loaded
	 * machine) that the second resend would have fallen past the
	 * deadline. Never more. */
	assert_in_range(sent, 2, 3);
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID, &st), 0);
	assert_int_equal(st.resent, (uint64_t)sent - 1);
	assert_int_equal(st.timeouts, 1);
	assert_int_equal(st.servfail, 1);
	close(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_lost_datagram_is_resent, setup_relay,
						teardown_relay),
		cmocka_unit_test_setup_teardown(test_answer_waiting_past_the_deadline_is_read,
						setup_relay, teardown_relay),
		cmocka_unit_test_setup_teardown(test_stalled_proxy_gives_the_time_back,
						setup_relay, teardown_relay),
		cmocka_unit_test_setup_teardown(test_silent_upstream_times_out, setup_relay,
						teardown_relay),
	};

	return cmocka_run_group_tests(tests, start_dnsmasq, stop_dnsmasq_group);
}
