/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* What the DNS proxy's integration tests share (test_dnsproxy.c,
 * test_dnsproxy_fair.c): a dnsmasq on a free loopback port, the learn and
 * event recorders, the proxy fixture and the client side. Include it after
 * cmocka.h, loop.h and dns/dnsproxy.h. */
#ifndef EGR_TEST_DNSPROXY_FX_H
#define EGR_TEST_DNSPROXY_FX_H

#define SBID 7

/* The test's own clock readings, the same clocks the daemon uses. */
__attribute__((unused)) static uint64_t clock_ns(clockid_t id)
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
__attribute__((unused)) static int learn_fail;          /* returned by learn() when non-zero */
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

__attribute__((unused)) static int on_learn(void *ctx, uint32_t sandbox_id, const struct egr_dns_learned *a, size_t n)
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

__attribute__((unused)) static void on_event(void *ctx, const struct egr_dns_event *ev)
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

__attribute__((unused)) static void stop_dnsmasq(void)
{
	if (dnsmasq_pid > 0) {
		kill(dnsmasq_pid, SIGTERM);
		waitpid(dnsmasq_pid, NULL, 0);
		dnsmasq_pid = -1;
		unlink(logfile);
	}
}

__attribute__((unused)) static uint16_t free_port(void)
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

__attribute__((unused)) static bool log_has(const char *needle)
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

__attribute__((unused)) static int start_dnsmasq(void **state)
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

__attribute__((unused)) static int stop_dnsmasq_group(void **state)
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

__attribute__((unused)) static int setup_with(uint16_t upstream_port, uint32_t timeout_ms)
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

__attribute__((unused)) static int setup(void **state)
{
	return setup_with(dnsmasq_port, 2000);
}

__attribute__((unused)) static int teardown(void **state)
{
	egr_dnsproxy_free(fx.p);
	egr_loop_free(fx.loop);
	return 0;
}

/* --- client side ---------------------------------------------------------------------- */

__attribute__((unused)) static size_t build_query(uint8_t *b, uint16_t id, const char *name, uint16_t qtype, bool edns)
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

__attribute__((unused)) static int client_udp(int family)
{
	int s = socket(family, SOCK_DGRAM | SOCK_NONBLOCK, 0);

	assert_true(s >= 0);
	return s;
}

__attribute__((unused)) static void send_udp(int s, int family, const uint8_t *q, size_t len)
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

__attribute__((unused)) static uint64_t now_ms(void)
{
	return clock_ns(CLOCK_MONOTONIC) / 1000000ULL;
}

/* Run the loop until s has a datagram (or timeout_ms); its length or -1. */
__attribute__((unused)) static ssize_t pump_recv(int s, uint8_t *buf, size_t cap, int timeout_ms)
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
__attribute__((unused)) static ssize_t pump_recv_tcp(int s, uint8_t *buf, size_t cap, int timeout_ms)
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
__attribute__((unused)) static int ask_udp(int family, const char *name, uint16_t qtype, bool edns, uint16_t id)
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
__attribute__((unused)) static bool has_ede_blocked(const uint8_t *m, size_t len, const char *text)
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

__attribute__((unused)) static int tcp_connect4(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(fx.port4),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int s = socket(AF_INET, SOCK_STREAM, 0);

	assert_int_equal(connect(s, (void *)&sa, sizeof(sa)), 0);
	return s;
}

__attribute__((unused)) static ssize_t ask_tcp(int s, const char *name, uint16_t qtype, uint16_t id, bool split)
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


#endif /* EGR_TEST_DNSPROXY_FX_H */
