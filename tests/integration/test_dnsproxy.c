// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The DNS proxy (user/egressd/dns/dnsproxy.c) against a real dnsmasq that this
 * test starts on a free loopback port. It links the daemon's objects
 * ($(OUT)/libegressd.a).
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

/* --- tests ---------------------------------------------------------------------------- */

static void test_allowed_a_learned_first(void **state)
{
	struct egr_dnsproxy_stats st;

	assert_int_equal(ask_udp(AF_INET, "api.test", EGR_DNS_T_A, false, 0x1234),
			 EGR_DNS_R_NOERROR);
	assert_int_equal(resp.naddrs, 1);
	assert_memory_equal(resp.addrs[0].addr, "\x7f\x00\x00\x0a", 4);
	assert_int_equal(nlearn, 1);
	assert_int_equal(learns[0].sandbox, SBID);
	assert_int_equal(learns[0].n, 1);
	assert_int_equal(learns[0].a[0].family, AF_INET);
	assert_memory_equal(learns[0].a[0].addr, "\x7f\x00\x00\x0a", 4);
	assert_int_equal(learns[0].a[0].ttl_s, 30); /* local-ttl 2 < min 30 */
	assert_int_equal(learns[0].a[0].ports.nranges, 1);
	assert_int_equal(learns[0].a[0].ports.ranges[0].lo, 443);
	assert_int_equal(learns[0].a[0].ports.ranges[0].protos, EGR_PROTO_ANY);
	/* learn() ran before the client had its answer */
	assert_int_equal(learns[0].seq, 1);
	assert_int_equal(seq, 2);
	assert_int_equal(last_ev.verdict, EGR_DNS_V_ALLOWED);
	assert_int_equal(last_ev.sandbox_id, SBID);
	assert_string_equal(last_ev.qname, "api.test");
	assert_int_equal(last_ev.naddrs, 1);
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID, &st), 0);
	assert_int_equal(st.allowed, 1);
	assert_int_equal(st.learned, 1);
}

static void test_ipv6_listener_aaaa(void **state)
{
	static const uint8_t want[16] = { 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10 };

	assert_true(fx.port6 != 0);
	assert_int_equal(ask_udp(AF_INET6, "API.test", EGR_DNS_T_AAAA, true, 0x4321),
			 EGR_DNS_R_NOERROR);
	assert_int_equal(resp.naddrs, 1);
	assert_true(resp.edns);
	assert_int_equal(nlearn, 1);
	assert_int_equal(learns[0].a[0].family, AF_INET6);
	assert_memory_equal(learns[0].a[0].addr, want, 16);
}

static void test_refused_never_upstream(void **state)
{
	struct egr_dnsproxy_stats st;
	uint64_t end;

	/* A refused name: NXDOMAIN (network.dns_reject's default), so
	 * resolvers fail at once instead of trying elsewhere. */
	assert_int_equal(ask_udp(AF_INET, "evil.test", EGR_DNS_T_A, false, 1), EGR_DNS_R_NXDOMAIN);
	assert_int_equal(last_ev.verdict, EGR_DNS_V_REFUSED);
	assert_int_equal(last_ev.rcode, EGR_DNS_R_NXDOMAIN);
	assert_string_equal(last_ev.qname, "evil.test");
	assert_false(resp.edns);
	assert_int_equal(ask_udp(AF_INET, "wild.test", EGR_DNS_T_A, false, 2), EGR_DNS_R_NXDOMAIN);
	assert_int_equal(ask_udp(AF_INET, "api.test.evil.test", EGR_DNS_T_A, false, 3),
			 EGR_DNS_R_NXDOMAIN);
	/* With EDNS the reply says who refused it: EDE 15 "Blocked". */
	assert_int_equal(ask_udp(AF_INET, "evil.test", EGR_DNS_T_A, true, 7), EGR_DNS_R_NXDOMAIN);
	assert_true(resp.edns);
	assert_true(has_ede_blocked(rbuf, sizeof(rbuf), "egressd policy refused this name"));
	/* TXT is not a default qtype: REFUSED (the name's other types may
	 * be allowed, NXDOMAIN would deny them too) */
	assert_int_equal(ask_udp(AF_INET, "txt.test", EGR_DNS_T_TXT, false, 4), EGR_DNS_R_REFUSED);
	assert_string_equal(last_ev.reason, "qtype not allowed");
	assert_int_equal(ask_udp(AF_INET, "api.test", EGR_DNS_T_ANY, false, 5), EGR_DNS_R_REFUSED);
	assert_int_equal(nlearn, 0);
	/* a marker that does go upstream, then the log must not show the rest */
	assert_int_equal(ask_udp(AF_INET, "marker.wild.test", EGR_DNS_T_A, false, 6),
			 EGR_DNS_R_NOERROR);
	end = now_ms() + 3000;
	while (!log_has("marker.wild.test") && now_ms() < end)
		usleep(20000);
	assert_true(log_has("query[A] marker.wild.test"));
	assert_false(log_has("evil.test"));
	assert_false(log_has("query[TXT] txt.test"));
	assert_false(log_has("query[A] wild.test "));
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID, &st), 0);
	assert_int_equal(st.refused, 6);
	assert_int_equal(st.allowed, 1);
}

static void test_wildcard_case_resolvable_only(void **state)
{
	assert_int_equal(ask_udp(AF_INET, "Host.WILD.test", EGR_DNS_T_A, false, 9),
			 EGR_DNS_R_NOERROR);
	assert_int_equal(resp.naddrs, 1);
	assert_memory_equal(resp.addrs[0].addr, "\x7f\x00\x00\x0b", 4);
	/* dns_allow only: no ports, so nothing is learned */
	assert_int_equal(nlearn, 0);
	assert_int_equal(last_ev.verdict, EGR_DNS_V_ALLOWED);
	assert_string_equal(last_ev.reason, "resolvable only");
	assert_int_equal(ask_udp(AF_INET, "a.b.c.wild.test.", EGR_DNS_T_A, false, 10),
			 EGR_DNS_R_NOERROR);
}

static void test_cname_chain(void **state)
{
	assert_int_equal(ask_udp(AF_INET, "alias.test", EGR_DNS_T_A, false, 11),
			 EGR_DNS_R_NOERROR);
	assert_int_equal(resp.ncnames, 1);
	assert_int_equal(nlearn, 1);
	assert_int_equal(learns[0].n, 1);
	assert_memory_equal(learns[0].a[0].addr, "\x7f\x00\x00\x0a", 4);
	assert_int_equal(learns[0].a[0].ttl_s, 30);
	assert_int_equal(learns[0].a[0].ports.ranges[0].lo, 8443);
	assert_true(learns[0].a[0].expires_ns > clock_ns(CLOCK_BOOTTIME));
}

/* Replace the sandbox's policy by policy_norebind_json with extra network fields. */
static void use_norebind_policy(const char *extra)
{
	char text[1024];
	struct egr_dnspolicy *pol;
	struct egr_policy p;
	struct egr_error e;

	snprintf(text, sizeof(text), policy_norebind_json, extra);
	assert_int_equal(egr_policy_parse(text, strlen(text), &p, &e), 0);
	assert_int_equal(egr_dnspolicy_new(&p, NULL, 0, &pol, &e), 0);
	egr_policy_free(&p);
	assert_int_equal(egr_dnsproxy_update_sandbox(fx.p, SBID, pol), 0);
}

/* network.dns_reject "refused": the policy keeps the old REFUSED answer
 * (with the same EDE under EDNS). */
static void test_dns_reject_refused(void **state)
{
	use_norebind_policy(", \"dns_reject\": \"refused\"");
	assert_int_equal(ask_udp(AF_INET, "evil.test", EGR_DNS_T_A, false, 0x2101),
			 EGR_DNS_R_REFUSED);
	assert_int_equal(last_ev.rcode, EGR_DNS_R_REFUSED);
	assert_int_equal(ask_udp(AF_INET, "evil.test", EGR_DNS_T_A, true, 0x2102),
			 EGR_DNS_R_REFUSED);
	assert_true(has_ede_blocked(rbuf, sizeof(rbuf), "egressd policy refused this name"));
	/* Twin: an allowed name is still answered. */
	assert_int_equal(ask_udp(AF_INET, "x.wild.test", EGR_DNS_T_A, false, 0x2103),
			 EGR_DNS_R_NOERROR);
}

static void test_rebind_stripped(void **state)
{
	static const uint8_t fd10[16] = { 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10 };
	struct egr_dnsproxy_stats st;
	int s;

	use_norebind_policy("");
	/* 127.0.0.10: the answer arrives without it, nothing is learned. */
	assert_int_equal(ask_udp(AF_INET, "api.test", EGR_DNS_T_A, false, 0x2001),
			 EGR_DNS_R_NOERROR);
	assert_int_equal(resp.ancount, 0);
	assert_int_equal(resp.naddrs, 0);
	assert_int_equal(nlearn, 0);
	assert_int_equal(nrebind_ev, 1);
	assert_int_equal(rebind_ev.nstripped, 1);
	assert_int_equal(rebind_ev.stripped[0].family, AF_INET);
	assert_memory_equal(rebind_ev.stripped[0].addr, "\x7f\x00\x00\x0a", 4);
	assert_int_equal(rebind_ev.stripped[0].cls, EGR_REBIND_LOOPBACK);
	assert_int_equal(last_ev.verdict, EGR_DNS_V_ALLOWED);
	assert_int_equal(last_ev.naddrs, 0);
	/* fd00::10 (private), over IPv6 with EDNS */
	assert_int_equal(ask_udp(AF_INET6, "api.test", EGR_DNS_T_AAAA, true, 0x2002),
			 EGR_DNS_R_NOERROR);
	assert_int_equal(resp.naddrs, 0);
	assert_true(resp.edns);
	assert_int_equal(nrebind_ev, 2);
	assert_memory_equal(rebind_ev.stripped[0].addr, fd10, 16);
	assert_int_equal(rebind_ev.stripped[0].cls, EGR_REBIND_PRIVATE);
	/* Through a CNAME: the CNAME stays, the address goes. */
	assert_int_equal(ask_udp(AF_INET, "alias.test", EGR_DNS_T_A, false, 0x2003),
			 EGR_DNS_R_NOERROR);
	assert_int_equal(resp.ancount, 1);
	assert_int_equal(resp.ncnames, 1);
	assert_int_equal(resp.naddrs, 0);
	/* 40 addresses over TCP, every one stripped */
	s = tcp_connect4();
	ask_tcp(s, "big.test", EGR_DNS_T_A, 0x2004, false);
	close(s);
	assert_int_equal(resp.rcode, EGR_DNS_R_NOERROR);
	assert_int_equal(resp.naddrs, 0);
	assert_int_equal(rebind_ev.nstripped, 40);
	assert_int_equal(rebind_ev.nstripped_listed, EGR_DNSPROXY_EVENT_ADDRS);
	/* a dns_allow-only name is stripped too, though it learns nothing anyway */
	assert_int_equal(ask_udp(AF_INET, "x.wild.test", EGR_DNS_T_A, false, 0x2005),
			 EGR_DNS_R_NOERROR);
	assert_int_equal(resp.naddrs, 0);
	assert_int_equal(nlearn, 0);
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID, &st), 0);
	assert_int_equal(st.rebind, 5);
	assert_int_equal(st.rebind_addrs, 44);
	assert_int_equal(st.learned, 0);
}

static void test_rebind_allow_covers(void **state)
{
	/* Only 127.0.0.10/32, given as an IPv4-mapped IPv6 CIDR. */
	use_norebind_policy(", \"dns_rebind_allow\": [\"::ffff:127.0.0.10/128\"]");
	assert_int_equal(ask_udp(AF_INET, "api.test", EGR_DNS_T_A, false, 0x3001),
			 EGR_DNS_R_NOERROR);
	assert_int_equal(resp.naddrs, 1);
	assert_int_equal(nlearn, 1);
	assert_int_equal(nrebind_ev, 0);
	/* 127.0.0.11 is not covered */
	assert_int_equal(ask_udp(AF_INET, "y.wild.test", EGR_DNS_T_A, false, 0x3002),
			 EGR_DNS_R_NOERROR);
	assert_int_equal(resp.naddrs, 0);
	assert_int_equal(nrebind_ev, 1);
	/* nor is fd00::10 */
	assert_int_equal(ask_udp(AF_INET6, "api.test", EGR_DNS_T_AAAA, false, 0x3003),
			 EGR_DNS_R_NOERROR);
	assert_int_equal(resp.naddrs, 0);
	assert_int_equal(nlearn, 1);
}

static void test_nxdomain_passes(void **state)
{
	assert_int_equal(ask_udp(AF_INET, "nx.test", EGR_DNS_T_A, false, 12), EGR_DNS_R_NXDOMAIN);
	assert_int_equal(last_ev.verdict, EGR_DNS_V_ALLOWED);
	assert_int_equal(last_ev.rcode, EGR_DNS_R_NXDOMAIN);
}

static void test_tcp(void **state)
{
	int s = tcp_connect4();
	struct egr_dnsproxy_stats st;

	ask_tcp(s, "api.test", EGR_DNS_T_A, 0x7001, false);
	assert_int_equal(resp.rcode, EGR_DNS_R_NOERROR);
	assert_int_equal(resp.naddrs, 1);
	assert_int_equal(nlearn, 1);
	assert_true(learns[0].seq < seq);
	/* a second query on the same connection, sent in pieces */
	ask_tcp(s, "alias.test", EGR_DNS_T_A, 0x7002, true);
	assert_int_equal(resp.rcode, EGR_DNS_R_NOERROR);
	assert_int_equal(nlearn, 2);
	/* refused over TCP too */
	ask_tcp(s, "evil.test", EGR_DNS_T_A, 0x7003, false);
	assert_int_equal(resp.rcode, EGR_DNS_R_NXDOMAIN);
	assert_int_equal(last_ev.transport, IPPROTO_TCP);
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID, &st), 0);
	assert_int_equal(st.tcp_conns, 1);
	close(s);
	for (int i = 0; i < 10; i++)
		egr_loop_run_once(fx.loop, 10);
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID, &st), 0);
	assert_int_equal(st.tcp_conns, 0);
}

/*
 * A client that pipelines many queries on one TCP connection and closes
 * its side: the proxy answers them a bounded number per wake-up (so one
 * connection cannot keep the loop to itself) yet answers every one, even
 * after the client's EOF (found by review).
 */
static void test_tcp_pipelined(void **state)
{
	enum { N = 100 };
	static uint8_t out[N * 64], in[N * 600];
	size_t off = 0, got = 0, answers = 0;
	int s = tcp_connect4();

	for (int i = 0; i < N; i++) {
		char name[32];
		size_t qlen;

		snprintf(name, sizeof(name), "evil%d.test", i);
		qlen = build_query(out + off + 2, (uint16_t)(0x6000 + i), name, EGR_DNS_T_A, false);
		out[off] = (uint8_t)(qlen >> 8);
		out[off + 1] = (uint8_t)qlen;
		off += 2 + qlen;
	}
	assert_int_equal(send(s, out, off, 0), (ssize_t)off);
	shutdown(s, SHUT_WR);
	for (int t = 0; t < 500 && answers < N; t++) {
		ssize_t k;

		egr_loop_run_once(fx.loop, 10);
		k = recv(s, in + got, sizeof(in) - got, MSG_DONTWAIT);
		if (k > 0)
			got += (size_t)k;
		/* Count the complete length-prefixed answers so far. */
		answers = 0;
		for (size_t p = 0; p + 2 <= got;) {
			size_t mlen = ((size_t)in[p] << 8) | in[p + 1];

			if (p + 2 + mlen > got)
				break;
			assert_int_equal(egr_dns_parse_response(in + p + 2, mlen, &resp), 0);
			assert_int_equal(resp.rcode, EGR_DNS_R_NXDOMAIN);
			answers++;
			p += 2 + mlen;
		}
	}
	assert_int_equal(answers, N);
	close(s);
}

static void test_large_answer(void **state)
{
	int s;
	ssize_t len;
	uint8_t q[512];
	size_t qlen;
	ssize_t k;

	/* UDP without EDNS: 40 A records do not fit 512 bytes */
	s = client_udp(AF_INET);
	qlen = build_query(q, 0x5151, "big.test", EGR_DNS_T_A, false);
	send_udp(s, AF_INET, q, qlen);
	k = pump_recv(s, rbuf, sizeof(rbuf), 3000);
	assert_true(k > 0);
	assert_true(k <= 512);
	assert_int_equal(egr_dns_parse_response(rbuf, (size_t)k, &resp), 0);
	assert_true(resp.tc);
	/* UDP with EDNS 4096: the whole answer, over 512 bytes */
	qlen = build_query(q, 0x5152, "big.test", EGR_DNS_T_A, true);
	send_udp(s, AF_INET, q, qlen);
	k = pump_recv(s, rbuf, sizeof(rbuf), 3000);
	assert_true(k > 512);
	assert_int_equal(egr_dns_parse_response(rbuf, (size_t)k, &resp), 0);
	assert_false(resp.tc);
	assert_int_equal(resp.naddrs, 40);
	close(s);
	/* TCP: the client's retry gets everything, and all of it is learned */
	nlearn = 0;
	s = tcp_connect4();
	len = ask_tcp(s, "big.test", EGR_DNS_T_A, 0x5153, false);
	close(s);
	assert_true(len > 512);
	assert_false(resp.tc);
	assert_int_equal(resp.naddrs, 40);
	assert_int_equal(nlearn, 1);
	assert_int_equal(learns[0].n, 40);
	assert_int_equal(learns[0].a[0].ports.ranges[0].protos, EGR_PROTO_TCP);
	assert_int_equal(learns[0].a[0].ports.ranges[0].lo, 80);
}

static void test_learn_failure_servfail(void **state)
{
	struct egr_dnsproxy_stats st;

	learn_fail = -ENOSPC;
	assert_int_equal(ask_udp(AF_INET, "api.test", EGR_DNS_T_A, false, 0x6000),
			 EGR_DNS_R_SERVFAIL);
	assert_int_equal(resp.naddrs, 0);
	assert_int_equal(nlearn, 1);
	assert_int_equal(last_ev.verdict, EGR_DNS_V_CAP);
	assert_int_equal(last_ev.error, -ENOSPC);
	assert_int_equal(last_ev.naddrs, 1);
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID, &st), 0);
	assert_int_equal(st.cap, 1);
	assert_int_equal(st.servfail, 1);
	/* a name that learns nothing is unaffected */
	assert_int_equal(ask_udp(AF_INET, "x.wild.test", EGR_DNS_T_A, false, 0x6001),
			 EGR_DNS_R_NOERROR);
}

static void test_many_in_flight(void **state)
{
	enum { N = 200 };
	static bool seen[N];
	int s = client_udp(AF_INET), got = 0, rcv = 1 << 20;
	uint64_t end;
	uint8_t q[512];

	setsockopt(s, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	memset(seen, 0, sizeof(seen));
	for (int i = 0; i < N; i++) {
		const char *name = i % 2 ? "api.test" : "alias.test";
		size_t qlen = build_query(q, (uint16_t)(0x8000 + i), name, EGR_DNS_T_A, false);

		send_udp(s, AF_INET, q, qlen);
	}
	end = now_ms() + 5000;
	while (got < N && now_ms() < end) {
		ssize_t k = recv(s, rbuf, sizeof(rbuf), MSG_DONTWAIT);

		if (k < 0) {
			egr_loop_run_once(fx.loop, 10);
			continue;
		}
		assert_int_equal(egr_dns_parse_response(rbuf, (size_t)k, &resp), 0);
		assert_int_equal(resp.rcode, EGR_DNS_R_NOERROR);
		assert_true(resp.id >= 0x8000 && resp.id < 0x8000 + N);
		assert_false(seen[resp.id - 0x8000]);
		assert_string_equal(resp.qname, (resp.id - 0x8000) % 2 ? "api.test" : "alias.test");
		seen[resp.id - 0x8000] = true;
		got++;
	}
	close(s);
	assert_int_equal(got, N);
	assert_int_equal(nlearn, N);
}

static void test_exfil_label(void **state)
{
	struct egr_dnsproxy_stats st;
	char name[128];

	snprintf(name, sizeof(name), "%s.wild.test",
		 "mfrggzdfmztwq2lknnwg23tpobyxe43uovrwe3dfmztwq2lknnwg23tpobyx"); /* 60 */
	assert_int_equal(ask_udp(AF_INET, name, EGR_DNS_T_A, false, 0x9000), EGR_DNS_R_NXDOMAIN);
	assert_int_equal(last_ev.verdict, EGR_DNS_V_EXFIL);
	assert_string_equal(last_ev.qname, name);
	/* 32 base32 characters: within the length limit, caught by entropy */
	assert_int_equal(ask_udp(AF_INET, "mfrggzdfmztwq2lknnwg23tpobyxe43u.wild.test",
				 EGR_DNS_T_A, false, 0x9001),
			 EGR_DNS_R_NXDOMAIN);
	assert_int_equal(last_ev.verdict, EGR_DNS_V_EXFIL);
	assert_string_equal(last_ev.reason, "label entropy");
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID, &st), 0);
	assert_int_equal(st.exfil, 2);
}

static void test_malformed_dropped(void **state)
{
	struct egr_dnsproxy_stats st;
	int s = client_udp(AF_INET);
	uint8_t junk[7] = { 1, 2, 3, 4, 5, 6, 7 };

	send_udp(s, AF_INET, junk, sizeof(junk));
	assert_true(pump_recv(s, rbuf, sizeof(rbuf), 200) < 0);
	close(s);
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID, &st), 0);
	assert_int_equal(st.malformed, 1);
}

static int setup_down(void **state)
{
	/* nothing listens there */
	return setup_with(free_port(), 300);
}

static void test_upstream_down(void **state)
{
	uint64_t t0 = now_ms();
	int s = tcp_connect4();

	assert_int_equal(ask_udp(AF_INET, "api.test", EGR_DNS_T_A, false, 0xa000),
			 EGR_DNS_R_SERVFAIL);
	assert_true(now_ms() - t0 >= 250);
	assert_int_equal(last_ev.verdict, EGR_DNS_V_SERVFAIL);
	assert_int_equal(nlearn, 0);
	/* over TCP the refused connect fails it at once */
	ask_tcp(s, "api.test", EGR_DNS_T_A, 0xa001, false);
	assert_int_equal(resp.rcode, EGR_DNS_R_SERVFAIL);
	close(s);
}

static void test_remove_sandbox(void **state)
{
	struct egr_dnsproxy_stats st;
	int s = client_udp(AF_INET);
	uint8_t q[512];
	size_t qlen = build_query(q, 1, "api.test", EGR_DNS_T_A, false);

	assert_int_equal(egr_dnsproxy_remove_sandbox(fx.p, SBID), 0);
	assert_int_equal(egr_dnsproxy_stats(fx.p, SBID, &st), -ENOENT);
	assert_int_equal(egr_dnsproxy_remove_sandbox(fx.p, SBID), -ENOENT);
	send_udp(s, AF_INET, q, qlen);
	assert_true(pump_recv(s, rbuf, sizeof(rbuf), 200) < 0);
	close(s);
}

static void test_parse_addr(void **state)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *s4 = (void *)&ss;
	struct sockaddr_in6 *s6 = (void *)&ss;

	assert_int_equal(egr_dnsproxy_parse_addr("192.0.2.1", &ss), 0);
	assert_int_equal(ss.ss_family, AF_INET);
	assert_int_equal(ntohs(s4->sin_port), 53);
	assert_int_equal(egr_dnsproxy_parse_addr("192.0.2.1:5353", &ss), 0);
	assert_int_equal(ntohs(s4->sin_port), 5353);
	assert_int_equal(egr_dnsproxy_parse_addr("[2001:db8::1]:5300", &ss), 0);
	assert_int_equal(ss.ss_family, AF_INET6);
	assert_int_equal(ntohs(s6->sin6_port), 5300);
	assert_int_equal(egr_dnsproxy_parse_addr("2001:db8::1", &ss), 0);
	assert_int_equal(ntohs(s6->sin6_port), 53);
	assert_int_equal(egr_dnsproxy_parse_addr("[::1]", &ss), 0);
	assert_int_equal(egr_dnsproxy_parse_addr("192.0.2.1:0", &ss), -EINVAL);
	assert_int_equal(egr_dnsproxy_parse_addr("192.0.2.1:65536", &ss), -EINVAL);
	assert_int_equal(egr_dnsproxy_parse_addr("example.com", &ss), -EINVAL);
	assert_int_equal(egr_dnsproxy_parse_addr("[::1", &ss), -EINVAL);
	assert_int_equal(egr_dnsproxy_parse_addr("[::1]x", &ss), -EINVAL);
	assert_int_equal(egr_dnsproxy_parse_addr("", &ss), -EINVAL);
}

static void test_resolv_conf(void **state)
{
	char path[] = "/tmp/egr-resolv-XXXXXX";
	struct egr_dnsproxy_config cfg;
	int fd = mkstemp(path);
	const char *text = "# comment\nsearch example.com\nnameserver 127.0.0.53\n"
			   "nameserver   2001:db8::53 # trailing\noptions edns0\n"
			   "nameserver bogus\n";

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	memset(&cfg, 0, sizeof(cfg));
	assert_int_equal(egr_dnsproxy_resolv_conf(path, &cfg), 0);
	assert_int_equal(cfg.nupstreams, 2);
	assert_int_equal(cfg.upstreams[0].ss_family, AF_INET);
	assert_int_equal(cfg.upstreams[1].ss_family, AF_INET6);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_addr),
		cmocka_unit_test(test_resolv_conf),
		cmocka_unit_test_setup_teardown(test_allowed_a_learned_first, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ipv6_listener_aaaa, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_never_upstream, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wildcard_case_resolvable_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cname_chain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dns_reject_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rebind_stripped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rebind_allow_covers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nxdomain_passes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tcp, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tcp_pipelined, setup, teardown),
		cmocka_unit_test_setup_teardown(test_large_answer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_learn_failure_servfail, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_in_flight, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exfil_label, setup, teardown),
		cmocka_unit_test_setup_teardown(test_malformed_dropped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_upstream_down, setup_down, teardown),
		cmocka_unit_test_setup_teardown(test_remove_sandbox, setup, teardown),
	};

	return cmocka_run_group_tests(tests, start_dnsmasq, stop_dnsmasq_group);
}
