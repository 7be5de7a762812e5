// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The DNS proxy (user/egressd/dnsproxy.c) against a real dnsmasq that this
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

#define SBID 7

/* The test's own clock readings, the same clocks the daemon uses. */
static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static pid_t dnsmasq_pid = -1;
static uint16_t dnsmasq_port;
static char logfile[] = "/tmp/egr-dnsmasq-XXXXXX";

/* --- learn / event recorders ------------------------------------------------ */

static unsigned int seq;
static int learn_fail;          /* returned by learn() when non-zero */
static unsigned int nlearn;
static struct {
	unsigned int seq;
	uint32_t sandbox;
	size_t n;
	struct egr_dns_learned a[EGR_DNSPROXY_MAX_LEARN];
} learns[8];
static unsigned int nevents;
static struct egr_dns_event last_ev;
static char last_ev_qname[EGR_DNS_NAME_BUF];

static int on_learn(void *ctx, uint32_t sandbox_id, const struct egr_dns_learned *a, size_t n)
{
	unsigned int i = nlearn % 8;

	nlearn++;
	learns[i].seq = ++seq;
	learns[i].sandbox = sandbox_id;
	learns[i].n = n;
	memcpy(learns[i].a, a, n * sizeof(*a));
	return learn_fail;
}

static unsigned int nrebind_ev;
static struct egr_dns_event rebind_ev;

static void on_event(void *ctx, const struct egr_dns_event *ev)
{
	if (ev->verdict == EGR_DNS_V_REBIND) {
		nrebind_ev++;
		rebind_ev = *ev;
		rebind_ev.qname = NULL;
		rebind_ev.tenant = NULL;
	}
	nevents++;
	last_ev = *ev;
	snprintf(last_ev_qname, sizeof(last_ev_qname), "%s", ev->qname);
	last_ev.qname = last_ev_qname;
	last_ev.tenant = NULL;
}

/* --- dnsmasq ------------------------------------------------------------------- */

static void stop_dnsmasq(void)
{
	if (dnsmasq_pid > 0) {
		kill(dnsmasq_pid, SIGTERM);
		waitpid(dnsmasq_pid, NULL, 0);
		dnsmasq_pid = -1;
		unlink(logfile);
	}
}

static uint16_t free_port(void)
{
	for (int tries = 0; tries < 50; tries++) {
		struct sockaddr_in sa = { .sin_family = AF_INET,
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t sl = sizeof(sa);
		int u = socket(AF_INET, SOCK_DGRAM, 0), t = socket(AF_INET, SOCK_STREAM, 0);
		uint16_t port = 0;

		if (!bind(u, (void *)&sa, sl) && !getsockname(u, (void *)&sa, &sl) &&
		    !bind(t, (void *)&sa, sl))
			port = ntohs(sa.sin_port);
		close(u);
		close(t);
		if (port)
			return port;
	}
	return 0;
}

static bool log_has(const char *needle)
{
	char buf[1 << 16];
	FILE *f = fopen(logfile, "r");
	size_t n;

	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	return strstr(buf, needle) != NULL;
}

static int start_dnsmasq(void **state)
{
	char *argv[80];
	char a_port[32], a_log[64];
	static char big[40][64];
	int fd, argc = 0;

	fd = mkstemp(logfile);
	if (fd < 0)
		return -1;
	close(fd);
	dnsmasq_port = free_port();
	snprintf(a_port, sizeof(a_port), "--port=%u", dnsmasq_port);
	snprintf(a_log, sizeof(a_log), "--log-facility=%s", logfile);
	argv[argc++] = "dnsmasq";
	argv[argc++] = "--conf-file=/dev/null";
	argv[argc++] = "--no-daemon";
	argv[argc++] = "--pid-file=";
	argv[argc++] = a_port;
	argv[argc++] = "--listen-address=127.0.0.1";
	argv[argc++] = "--bind-interfaces";
	argv[argc++] = "--no-resolv";
	argv[argc++] = "--no-hosts";
	argv[argc++] = "--log-queries";
	argv[argc++] = a_log;
	argv[argc++] = "--local-ttl=2";
	argv[argc++] = "--host-record=api.test,127.0.0.10,fd00::10";
	argv[argc++] = "--cname=alias.test,api.test";
	argv[argc++] = "--txt-record=txt.test,hello";
	argv[argc++] = "--address=/wild.test/127.0.0.11";
	argv[argc++] = "--address=/nx.test/";
	for (int i = 0; i < 40; i++) {
		snprintf(big[i], sizeof(big[i]), "--host-record=big.test,127.0.1.%d", i + 1);
		argv[argc++] = big[i];
	}
	argv[argc] = NULL;
	dnsmasq_pid = fork();
	if (dnsmasq_pid < 0)
		return -1;
	if (dnsmasq_pid == 0) {
		int null = open("/dev/null", O_RDWR);

		dup2(null, 1);
		dup2(null, 2);
		execv("/usr/sbin/dnsmasq", argv);
		_exit(127);
	}
	atexit(stop_dnsmasq);
	/* Wait until it answers on TCP (it binds UDP and TCP together). */
	for (int i = 0; i < 100; i++) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(dnsmasq_port),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		int s = socket(AF_INET, SOCK_STREAM, 0);
		int ok = connect(s, (void *)&sa, sizeof(sa)) == 0;

		close(s);
		if (ok)
			return 0;
		usleep(50000);
	}
	fprintf(stderr, "dnsmasq did not start\n");
	stop_dnsmasq();
	return -1;
}

static int stop_dnsmasq_group(void **state)
{
	stop_dnsmasq();
	return 0;
}

/* --- fixture ------------------------------------------------------------------------ */

static const char policy_json[] =
	"{\"tenant\": \"acme\", \"network\": {\"default\": \"deny\","
	" \"outbound_allow\": [\"api.test:443\", \"alias.test:8443\", \"tcp/big.test:80\"],"
	" \"dns_allow\": [\"*.wild.test\", \"txt.test\", \"nx.test\"],"
	" \"dns_rebind_allow\": [\"127.0.0.0/8\", \"fd00::/8\"]}}";

/* The same names without the rebinding exceptions (test_rebind_*). */
static const char policy_norebind_json[] =
	"{\"tenant\": \"acme\", \"network\": {\"default\": \"deny\","
	" \"outbound_allow\": [\"api.test:443\", \"alias.test:8443\", \"tcp/big.test:80\"],"
	" \"dns_allow\": [\"*.wild.test\"]%s}}";

struct fx {
	struct egr_loop *loop;
	struct egr_dnsproxy *p;
	uint16_t port4, port6;
};

static struct fx fx;
/* Fairness limits for the next setup_with (0: the proxy's defaults). */
static struct {
	uint32_t rate, burst, inflight, per_sb;
} fx_limits;

static int setup_with(uint16_t upstream_port, uint32_t timeout_ms)
{
	struct egr_dnsproxy_config cfg;
	struct egr_dnspolicy *pol;
	struct egr_policy p;
	struct egr_error e;
	char up[32];

	memset(&cfg, 0, sizeof(cfg));
	memset(&fx, 0, sizeof(fx));
	seq = nlearn = nevents = nrebind_ev = 0;
	learn_fail = 0;
	snprintf(up, sizeof(up), "127.0.0.1:%u", upstream_port);
	if (egr_dnsproxy_parse_addr(up, &cfg.upstreams[0]))
		return -1;
	cfg.nupstreams = 1;
	cfg.min_ttl_s = 30;
	cfg.timeout_ms = timeout_ms;
	cfg.tick_ms = 50;
	cfg.learn = on_learn;
	cfg.event = on_event;
	cfg.rate_qps = fx_limits.rate;
	cfg.burst = fx_limits.burst;
	cfg.max_inflight = fx_limits.inflight;
	cfg.max_inflight_per_sb = fx_limits.per_sb;
	memset(&fx_limits, 0, sizeof(fx_limits));
	if (egr_loop_new(&fx.loop) || egr_dnsproxy_new(fx.loop, &cfg, &fx.p))
		return -1;
	if (egr_policy_parse(policy_json, strlen(policy_json), &p, &e))
		return -1;
	if (egr_dnspolicy_new(&p, NULL, 0, &pol, &e))
		return -1;
	egr_policy_free(&p);
	return egr_dnsproxy_add_sandbox(fx.p, SBID, "acme", pol, -1, 0, 0, &fx.port4, &fx.port6);
}

static int setup(void **state)
{
	return setup_with(dnsmasq_port, 2000);
}

static int teardown(void **state)
{
	egr_dnsproxy_free(fx.p);
	egr_loop_free(fx.loop);
	return 0;
}

/* --- client side ---------------------------------------------------------------------- */

static size_t build_query(uint8_t *b, uint16_t id, const char *name, uint16_t qtype, bool edns)
{
	size_t n = 0;
	const char *s = name;

	b[n++] = (uint8_t)(id >> 8);
	b[n++] = (uint8_t)id;
	b[n++] = 0x01; /* RD */
	b[n++] = 0;
	b[n++] = 0;
	b[n++] = 1;
	memset(b + n, 0, 6);
	b[n - 1 + 6] = edns ? 1 : 0;
	n += 6;
	while (*s) {
		const char *dot = strchr(s, '.');
		size_t l = dot ? (size_t)(dot - s) : strlen(s);

		b[n++] = (uint8_t)l;
		memcpy(b + n, s, l);
		n += l;
		s += l + (dot ? 1 : 0);
	}
	b[n++] = 0;
	b[n++] = (uint8_t)(qtype >> 8);
	b[n++] = (uint8_t)qtype;
	b[n++] = 0;
	b[n++] = 1;
	if (edns) {
		uint8_t opt[11] = { 0, 0, 41, 0x10, 0x00, 0, 0, 0, 0, 0, 0 }; /* 4096 */

		memcpy(b + n, opt, sizeof(opt));
		n += sizeof(opt);
	}
	return n;
}

static int client_udp(int family)
{
	int s = socket(family, SOCK_DGRAM | SOCK_NONBLOCK, 0);

	assert_true(s >= 0);
	return s;
}

static void send_udp(int s, int family, const uint8_t *q, size_t len)
{
	if (family == AF_INET) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(fx.port4),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

		assert_int_equal(sendto(s, q, len, 0, (void *)&sa, sizeof(sa)), (ssize_t)len);
	} else {
		struct sockaddr_in6 sa = { .sin6_family = AF_INET6, .sin6_port = htons(fx.port6),
					   .sin6_addr = IN6ADDR_LOOPBACK_INIT };

		assert_int_equal(sendto(s, q, len, 0, (void *)&sa, sizeof(sa)), (ssize_t)len);
	}
}

static uint64_t now_ms(void)
{
	return clock_ns(CLOCK_MONOTONIC) / 1000000ULL;
}

/* Run the loop until s has a datagram (or timeout_ms); its length or -1. */
static ssize_t pump_recv(int s, uint8_t *buf, size_t cap, int timeout_ms)
{
	uint64_t end = now_ms() + (uint64_t)timeout_ms;

	while (now_ms() < end) {
		ssize_t k = recv(s, buf, cap, MSG_DONTWAIT);

		if (k >= 0) {
			++seq;
			return k;
		}
		egr_loop_run_once(fx.loop, 10);
	}
	return -1;
}

/* Run the loop until a TCP message (2-byte length first) arrived on s. */
static ssize_t pump_recv_tcp(int s, uint8_t *buf, size_t cap, int timeout_ms)
{
	uint64_t end = now_ms() + (uint64_t)timeout_ms;
	size_t have = 0;

	while (now_ms() < end) {
		ssize_t k = recv(s, buf + have, cap - have, MSG_DONTWAIT);

		if (k > 0)
			have += (size_t)k;
		if (have >= 2 && have >= 2 + (((size_t)buf[0] << 8) | buf[1])) {
			++seq;
			return (ssize_t)have;
		}
		if (k == 0)
			return -1;
		egr_loop_run_once(fx.loop, 10);
	}
	return -1;
}

static uint8_t rbuf[70000];
static struct egr_dns_response resp;

/* One UDP exchange; returns the parsed rcode. */
static int ask_udp(int family, const char *name, uint16_t qtype, bool edns, uint16_t id)
{
	uint8_t q[512];
	size_t qlen = build_query(q, id, name, qtype, edns);
	int s = client_udp(family);
	ssize_t k;

	send_udp(s, family, q, qlen);
	k = pump_recv(s, rbuf, sizeof(rbuf), 3000);
	close(s);
	assert_true(k > 0);
	assert_int_equal(egr_dns_parse_response(rbuf, (size_t)k, &resp), 0);
	assert_int_equal(resp.id, id);
	return resp.rcode;
}

/* Does the reply (our denial: the question, then only the OPT RR) carry
 * an EDE 15 whose EXTRA-TEXT starts with text? */
static bool has_ede_blocked(const uint8_t *m, size_t len, const char *text)
{
	size_t i = 12, tl = strlen(text);

	while (i < len && m[i])
		i += 1 + m[i]; /* the echoed question is never compressed */
	i += 1 + 4;
	if (i + 17 + tl > len)
		return false;
	m += i;
	return m[0] == 0 && m[1] == 0 && m[2] == EGR_DNS_T_OPT && m[11] == 0 &&
	       m[12] == EGR_DNS_OPT_EDE && m[15] == 0 && m[16] == EGR_DNS_EDE_BLOCKED &&
	       !memcmp(m + 17, text, tl);
}

static int tcp_connect4(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(fx.port4),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int s = socket(AF_INET, SOCK_STREAM, 0);

	assert_int_equal(connect(s, (void *)&sa, sizeof(sa)), 0);
	return s;
}

static ssize_t ask_tcp(int s, const char *name, uint16_t qtype, uint16_t id, bool split)
{
	uint8_t q[520];
	size_t qlen = build_query(q + 2, id, name, qtype, false);
	ssize_t k;

	q[0] = (uint8_t)(qlen >> 8);
	q[1] = (uint8_t)qlen;
	if (split) {
		/* partial reads on the proxy's side */
		assert_int_equal(send(s, q, 1, 0), 1);
		egr_loop_run_once(fx.loop, 20);
		assert_int_equal(send(s, q + 1, 5, 0), 5);
		egr_loop_run_once(fx.loop, 20);
		assert_int_equal(send(s, q + 6, qlen - 4, 0), (ssize_t)qlen - 4);
	} else {
		assert_int_equal(send(s, q, qlen + 2, 0), (ssize_t)qlen + 2);
	}
	k = pump_recv_tcp(s, rbuf, sizeof(rbuf), 3000);
	assert_true(k > 2);
	assert_int_equal(egr_dns_parse_response(rbuf + 2, (size_t)k - 2, &resp), 0);
	assert_int_equal(resp.id, id);
	return k - 2;
}

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

/* --- fairness between sandboxes (docs/dns.md) -------------------------------------- */

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
		cmocka_unit_test_setup_teardown(test_rate_limit_is_per_sandbox, setup_rate,
						teardown),
		cmocka_unit_test_setup_teardown(test_full_table_evicts_heaviest, setup_hole,
						teardown_hole),
		cmocka_unit_test_setup_teardown(test_burst_past_limit_waits, setup_small, teardown),
	};

	return cmocka_run_group_tests(tests, start_dnsmasq, stop_dnsmasq_group);
}
