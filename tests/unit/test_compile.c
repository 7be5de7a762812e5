// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Rule compilation: user/lib/compile.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "compile.h"
#include "egr_decide.h"
#include "egressd.h"
#include "policy.h"

/* Parse a policy whose outbound_allow is the given JSON array body. */
static void load(struct egr_policy *p, const char *allow_body)
{
	char buf[16384];
	struct egr_error e;
	int ret;

	snprintf(buf, sizeof(buf),
		 "{\"tenant\":\"t\",\"network\":{\"default\":\"deny\",\"outbound_allow\":[%s]}}",
		 allow_body);
	ret = egr_policy_parse(buf, strlen(buf), p, &e);
	if (ret)
		print_error("%s: %s: %s\n", buf, e.field, e.message);
	assert_int_equal(ret, 0);
}

static void compile_ok(const char *allow_body, struct egr_compiled *c)
{
	struct egr_policy p;
	struct egr_error e;
	int ret;

	load(&p, allow_body);
	ret = egr_policy_compile(&p, c, &e);
	if (ret)
		print_error("%s: %s\n", e.field, e.message);
	assert_int_equal(ret, 0);
	egr_policy_free(&p);
}

static const struct egr_c4 *find4(const struct egr_compiled *c, const char *addr, int plen)
{
	uint8_t a[4];
	size_t i;

	assert_int_equal(inet_pton(AF_INET, addr, a), 1);
	for (i = 0; i < c->n4; i++)
		if (c->v4[i].prefixlen == plen && !memcmp(c->v4[i].addr, a, 4))
			return &c->v4[i];
	print_error("no %s/%d\n", addr, plen);
	fail();
	return NULL;
}

static void assert_range(const struct egr_rule *r, unsigned int i, int lo, int hi, int protos)
{
	assert_true(i < r->nranges);
	assert_int_equal(r->ranges[i].lo, lo);
	assert_int_equal(r->ranges[i].hi, hi);
	assert_int_equal(r->ranges[i].protos, protos);
}

static void test_grouping(void **state)
{
	struct egr_compiled c;
	const struct egr_c4 *e;

	compile_ok("\"tcp/10.0.0.1:443\",\"10.0.0.9/24:22\",\"udp/10.0.0.1:53\",\"10.0.0.0/24:80\","
		   "\"10.0.0.1/32:8080\"",
		   &c);
	assert_int_equal(c.n4, 2);
	assert_int_equal(c.n6, 0);
	/* Sorted by (prefixlen, addr). */
	assert_int_equal(c.v4[0].prefixlen, 24);
	assert_int_equal(c.v4[1].prefixlen, 32);
	e = find4(&c, "10.0.0.0", 24);
	assert_int_equal(e->rule.nranges, 2);
	assert_range(&e->rule, 0, 22, 22, EGR_PROTO_ANY);
	assert_range(&e->rule, 1, 80, 80, EGR_PROTO_ANY);
	assert_int_equal(e->rule.expires_ns, 0);
	e = find4(&c, "10.0.0.1", 32);
	assert_int_equal(e->rule.nranges, 5);
	assert_range(&e->rule, 0, 22, 22, EGR_PROTO_ANY);
	assert_range(&e->rule, 1, 53, 53, EGR_PROTO_UDP);
	assert_range(&e->rule, 2, 80, 80, EGR_PROTO_ANY);
	assert_range(&e->rule, 3, 443, 443, EGR_PROTO_TCP);
	assert_range(&e->rule, 4, 8080, 8080, EGR_PROTO_ANY);
	assert_int_equal(e->rule.expires_ns, 0);
	egr_compiled_free(&c);
	assert_null(c.v4);
	assert_int_equal(c.n4, 0);
	egr_compiled_free(&c);
	egr_compiled_free(NULL);
}

static void test_ancestor_merge(void **state)
{
	struct egr_compiled c;
	const struct egr_c4 *e;

	compile_ok("\"10.0.0.0/8:80\",\"10.1.0.0/16:443\",\"11.1.0.0/16:443\"", &c);
	assert_int_equal(c.n4, 3);
	e = find4(&c, "10.0.0.0", 8);
	assert_int_equal(e->rule.nranges, 1);
	assert_range(&e->rule, 0, 80, 80, EGR_PROTO_ANY);
	e = find4(&c, "10.1.0.0", 16);
	assert_int_equal(e->rule.nranges, 2);
	assert_range(&e->rule, 0, 80, 80, EGR_PROTO_ANY);
	assert_range(&e->rule, 1, 443, 443, EGR_PROTO_ANY);
	/* Not covered by 10/8: keeps its own only. */
	e = find4(&c, "11.1.0.0", 16);
	assert_int_equal(e->rule.nranges, 1);
	assert_range(&e->rule, 0, 443, 443, EGR_PROTO_ANY);
	egr_compiled_free(&c);

	/* A chain: every level carries all of its ancestors, with gaps in the lengths. */
	compile_ok("\"192.168.1.7:40\",\"0.0.0.0/0:10\",\"192.168.0.0/16:20\","
		   "\"192.168.1.0/24:30\",\"192.169.1.7:50\"",
		   &c);
	assert_int_equal(c.n4, 5);
	e = find4(&c, "192.168.1.7", 32);
	assert_int_equal(e->rule.nranges, 4);
	assert_range(&e->rule, 0, 10, 10, EGR_PROTO_ANY);
	assert_range(&e->rule, 1, 20, 20, EGR_PROTO_ANY);
	assert_range(&e->rule, 2, 30, 30, EGR_PROTO_ANY);
	assert_range(&e->rule, 3, 40, 40, EGR_PROTO_ANY);
	e = find4(&c, "192.169.1.7", 32);
	assert_int_equal(e->rule.nranges, 2);
	assert_range(&e->rule, 0, 10, 10, EGR_PROTO_ANY);
	assert_range(&e->rule, 1, 50, 50, EGR_PROTO_ANY);
	e = find4(&c, "192.168.1.0", 24);
	assert_int_equal(e->rule.nranges, 3);
	egr_compiled_free(&c);

	/* Ancestors can close gaps: nine single ports under an allow-all /8 fit. */
	compile_ok("\"10.0.0.0/8:*\",\"10.0.0.1:1\",\"10.0.0.1:3\",\"10.0.0.1:5\",\"10.0.0.1:7\","
		   "\"10.0.0.1:9\",\"10.0.0.1:11\",\"10.0.0.1:13\",\"10.0.0.1:15\",\"10.0.0.1:17\"",
		   &c);
	e = find4(&c, "10.0.0.1", 32);
	assert_int_equal(e->rule.nranges, 1);
	assert_range(&e->rule, 0, 0, 65535, EGR_PROTO_ANY);
	egr_compiled_free(&c);
}

static void test_range_merge(void **state)
{
	struct egr_compiled c;
	const struct egr_c4 *e;

	/* Adjacent, overlapping, contained, duplicate; the 65535 edge. */
	compile_ok("\"1.1.1.1:80-90\",\"1.1.1.1:91-100\",\"1.1.1.1:95-99\",\"1.1.1.1:200-300\","
		   "\"1.1.1.1:250-400\",\"1.1.1.1:200-300\",\"1.1.1.1:65000-65535\","
		   "\"1.1.1.1:65535\",\"1.1.1.1:0\",\"1.1.1.1:1\",\"1.1.1.1:102\"",
		   &c);
	e = find4(&c, "1.1.1.1", 32);
	assert_int_equal(e->rule.nranges, 5);
	assert_range(&e->rule, 0, 0, 1, EGR_PROTO_ANY);
	assert_range(&e->rule, 1, 80, 100, EGR_PROTO_ANY);
	assert_range(&e->rule, 2, 102, 102, EGR_PROTO_ANY);
	assert_range(&e->rule, 3, 200, 400, EGR_PROTO_ANY);
	assert_range(&e->rule, 4, 65000, 65535, EGR_PROTO_ANY);
	egr_compiled_free(&c);

	/* Protocols: identical intervals recombine into ANY, others stay apart. */
	compile_ok("\"tcp/2.2.2.2:80\",\"udp/2.2.2.2:80\",\"tcp/2.2.2.2:100-110\","
		   "\"udp/2.2.2.2:100-109\",\"tcp/2.2.2.2:500-510\",\"udp/2.2.2.2:500-505\","
		   "\"udp/2.2.2.2:506-510\"",
		   &c);
	e = find4(&c, "2.2.2.2", 32);
	assert_int_equal(e->rule.nranges, 4);
	assert_range(&e->rule, 0, 80, 80, EGR_PROTO_ANY);
	assert_range(&e->rule, 1, 100, 109, EGR_PROTO_UDP);
	assert_range(&e->rule, 2, 100, 110, EGR_PROTO_TCP);
	assert_range(&e->rule, 3, 500, 510, EGR_PROTO_ANY);
	egr_compiled_free(&c);

	/* "tcp/HOST:*" plus "udp/HOST:*" is an address allowed outright: ping sockets pass too. */
	compile_ok("\"tcp/3.3.3.3:*\",\"udp/3.3.3.3:0-65535\"", &c);
	e = find4(&c, "3.3.3.3", 32);
	assert_int_equal(e->rule.nranges, 1);
	assert_range(&e->rule, 0, 0, 65535, EGR_PROTO_ANY);
	{
		int expired;

		assert_int_equal(egr_rule_allows(&e->rule, 0, EGR_IPPROTO_ICMP, 1, &expired),
				 EGR_ALLOW);
	}
	egr_compiled_free(&c);
}

static void test_too_many_ranges(void **state)
{
	struct egr_policy p;
	struct egr_compiled c;
	struct egr_error e;

	load(&p, "\"9.9.9.9:1\",\"5.5.5.5:1\",\"5.5.5.5:3\",\"5.5.5.5:5\",\"5.5.5.5:7\","
		 "\"5.5.5.5:9\",\"5.5.5.5:11\",\"5.5.5.5:13\",\"5.5.5.5:15\",\"5.5.5.5:17\"");
	memset(&c, 0x5a, sizeof(c));
	assert_int_equal(egr_policy_compile(&p, &c, &e), -EINVAL);
	assert_string_equal(e.field, "network.outbound_allow[1]");
	assert_non_null(strstr(e.message, "5.5.5.5/32 needs 9 port ranges, max 8"));
	assert_null(c.v4);
	assert_null(c.v6);
	assert_int_equal(c.n4, 0);
	egr_policy_free(&p);

	/* Eight fit exactly; tcp and udp on different ports count separately. */
	load(&p, "\"5.5.5.5:1\",\"5.5.5.5:3\",\"5.5.5.5:5\",\"5.5.5.5:7\","
		 "\"5.5.5.5:9\",\"5.5.5.5:11\",\"tcp/5.5.5.5:13\",\"udp/5.5.5.5:15\"");
	assert_int_equal(egr_policy_compile(&p, &c, &e), 0);
	assert_int_equal(c.v4[0].rule.nranges, 8);
	egr_compiled_free(&c);
	egr_policy_free(&p);

	/* Too many only once the ancestor's ranges are merged in: the /16 is named,
	 * by its first entry in policy order (the object at index 2). */
	load(&p, "\"10.0.0.0/8:1\",\"10.0.0.0/8:3\","
		 "{\"host\":\"10.1.0.0/16\",\"ports\":[5,7,9,11,13,15,17]},\"10.1.0.0/16:19\","
		 "\"10.0.0.0/8:21\"");
	assert_int_equal(egr_policy_compile(&p, &c, &e), -EINVAL);
	assert_string_equal(e.field, "network.outbound_allow[2]");
	assert_non_null(strstr(e.message, "10.1.0.0/16 needs 11 port ranges, max 8"));
	egr_policy_free(&p);

	/* IPv6 prefixes are named in brackets. */
	load(&p, "{\"host\":\"[2001:db8::/32]\",\"ports\":[1,3,5,7,9,11,13,15,17]}");
	assert_int_equal(egr_policy_compile(&p, &c, &e), -EINVAL);
	assert_string_equal(e.field, "network.outbound_allow[0]");
	assert_non_null(strstr(e.message, "[2001:db8::]/32 needs 9"));
	egr_policy_free(&p);
}

static void test_v6(void **state)
{
	struct egr_compiled c;
	struct egr_lpm6_key k6;
	struct egr_lpm4_key k4;
	uint8_t a[16];

	compile_ok("\"[2001:db8::/32]:443\",\"[2001:db8:1::/48]:80\",\"[::1]:*\","
		   "\"[::ffff:7.7.7.7]:22\",\"api.example.com:443\"",
		   &c);
	assert_int_equal(c.n6, 3);
	assert_int_equal(c.n4, 1);
	assert_int_equal(c.v6[0].prefixlen, 32);
	assert_int_equal(c.v6[1].prefixlen, 48);
	assert_int_equal(c.v6[2].prefixlen, 128);
	assert_int_equal(inet_pton(AF_INET6, "2001:db8:1::", a), 1);
	assert_memory_equal(c.v6[1].addr, a, 16);
	assert_int_equal(c.v6[1].rule.nranges, 2);
	assert_range(&c.v6[1].rule, 0, 80, 80, EGR_PROTO_ANY);
	assert_range(&c.v6[1].rule, 1, 443, 443, EGR_PROTO_ANY);
	assert_int_equal(c.v6[2].rule.nranges, 1);
	assert_range(&c.v6[2].rule, 0, 0, 65535, EGR_PROTO_ANY);

	egr_c6_key(&c.v6[1], 77, &k6);
	assert_int_equal(k6.prefixlen, EGR_LPM_POLICY_BITS + 48);
	assert_int_equal(k6.policy_id, 77);
	assert_memory_equal(k6.addr, a, 16);

	/* The mapped address compiled as IPv4. */
	assert_int_equal(inet_pton(AF_INET, "7.7.7.7", a), 1);
	assert_memory_equal(c.v4[0].addr, a, 4);
	egr_c4_key(&c.v4[0], 0xfffffffe, &k4);
	assert_int_equal(k4.prefixlen, EGR_LPM_POLICY_BITS + 32);
	assert_int_equal(k4.policy_id, 0xfffffffe);
	assert_memory_equal(k4.addr, a, 4);
	egr_compiled_free(&c);
}

static void test_names_ignored(void **state)
{
	struct egr_compiled c;

	compile_ok("\"api.example.com:443\",{\"host\":\"x.example.org\",\"ports\":[1,2,3,4,5,6,7,"
		   "8,9,10,11,12,13,14,15,16,17,18,19,20]}",
		   &c);
	assert_int_equal(c.n4, 0);
	assert_int_equal(c.n6, 0);
	assert_null(c.v4);
	assert_null(c.v6);
	egr_compiled_free(&c);

	compile_ok("", &c);
	assert_int_equal(c.n4 + c.n6, 0);
	egr_compiled_free(&c);
}

static void test_deterministic(void **state)
{
	struct egr_compiled a, b;
	size_t i;

	compile_ok("\"10.0.0.0/8:80\",\"tcp/10.1.0.0/16:443\",\"[2001:db8::/32]:1-5\","
		   "\"192.0.2.1:9\",\"udp/10.1.0.0/16:443\",\"[::1]:7\",\"1.0.0.0/8:1\"",
		   &a);
	compile_ok("\"[::1]:7\",\"1.0.0.0/8:1\",\"udp/10.1.0.0/16:443\",\"192.0.2.1:9\","
		   "\"[2001:db8::/32]:1-5\",\"tcp/10.1.0.0/16:443\",\"10.0.0.0/8:80\"",
		   &b);
	assert_int_equal(a.n4, b.n4);
	assert_int_equal(a.n6, b.n6);
	assert_memory_equal(a.v4, b.v4, a.n4 * sizeof(*a.v4));
	assert_memory_equal(a.v6, b.v6, a.n6 * sizeof(*a.v6));
	for (i = 1; i < a.n4; i++)
		assert_true(a.v4[i - 1].prefixlen < a.v4[i].prefixlen ||
			    (a.v4[i - 1].prefixlen == a.v4[i].prefixlen &&
			     memcmp(a.v4[i - 1].addr, a.v4[i].addr, 4) < 0));
	egr_compiled_free(&a);
	egr_compiled_free(&b);
}

/* --- the compiled rules decide exactly like the policy --------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state >> 11);
}

static int covers4(const uint8_t *pfx, int plen, const uint8_t *a)
{
	uint32_t p, x, m = plen ? 0xffffffffu << (32 - plen) : 0;

	memcpy(&p, pfx, 4);
	memcpy(&x, a, 4);
	p = ntohl(p);
	x = ntohl(x);

	return (p & m) == (x & m);
}

/* The kernel's view: longest matching prefix, then egr_rule_allows(). */
static int lpm_allows(const struct egr_compiled *c, const uint8_t *a, uint16_t port,
		      uint32_t proto)
{
	const struct egr_c4 *best = NULL;
	int expired;
	size_t i;

	for (i = 0; i < c->n4; i++)
		if (covers4(c->v4[i].addr, c->v4[i].prefixlen, a) &&
		    (!best || c->v4[i].prefixlen > best->prefixlen))
			best = &c->v4[i];
	return egr_rule_allows(best ? &best->rule : NULL, port, proto, 1, &expired);
}

/* The policy's meaning: any entry allows it. */
static int policy_allows(const struct egr_policy *p, const uint8_t *a, uint16_t port,
			 uint32_t proto)
{
	uint16_t bit = egr_proto_bit(proto);
	size_t i;

	for (i = 0; i < p->nallow; i++) {
		const struct egr_allow *e = &p->allow[i];

		if (e->kind != EGR_HOST_V4 || !covers4(e->addr, e->prefixlen, a))
			continue;
		if (bit && (e->protos & bit) && port >= e->port_lo && port <= e->port_hi)
			return EGR_ALLOW;
	}
	return EGR_DENY;
}

static void test_equivalence(void **state)
{
	static const int plens[] = { 0, 8, 12, 16, 24, 30, 32 };
	static const uint32_t protos[] = { EGR_IPPROTO_TCP, EGR_IPPROTO_UDP, EGR_IPPROTO_MPTCP };
	int round, checked = 0;

	for (round = 0; round < 300; round++) {
		struct egr_policy p = { 0 };
		struct egr_compiled c;
		struct egr_error e;
		size_t n = 1 + rnd() % 12, i;
		int t;

		p.allow = calloc(n, sizeof(*p.allow));
		assert_non_null(p.allow);
		p.nallow = n;
		for (i = 0; i < n; i++) {
			struct egr_allow *a = &p.allow[i];
			uint32_t addr = htonl(0x0a000000u | (rnd() & 0x3) << 16 |
					      (rnd() & 0x3) << 8 | (rnd() & 0x3));
			uint16_t lo = (uint16_t)(rnd() % 40), hi = (uint16_t)(lo + rnd() % 6);

			a->kind = EGR_HOST_V4;
			a->prefixlen = (uint8_t)plens[rnd() % 7];
			memcpy(a->addr, &addr, 4);
			/* Mask as the parser does. */
			if (a->prefixlen)
				addr = htonl(ntohl(addr) & (0xffffffffu << (32 - a->prefixlen)));
			else
				addr = 0;
			memcpy(a->addr, &addr, 4);
			a->port_lo = lo;
			a->port_hi = hi;
			a->protos = (uint16_t)(1 + rnd() % 3);
			a->index = (uint32_t)i;
		}
		if (egr_policy_compile(&p, &c, &e)) {
			assert_non_null(strstr(e.message, "max 8"));
			free(p.allow);
			continue;
		}
		for (t = 0; t < 400; t++) {
			uint32_t addr = htonl(((rnd() & 1) ? 0x0a000000u : 0x0b000000u) |
					      (rnd() & 0x3) << 16 | (rnd() & 0x3) << 8 |
					      (rnd() & 0x3));
			uint16_t port = (uint16_t)(rnd() % 50);
			uint32_t proto = protos[rnd() % 3];

			int expired;

			assert_int_equal(lpm_allows(&c, (uint8_t *)&addr, port, proto),
					 policy_allows(&p, (uint8_t *)&addr, port, proto));
			/* egressd's own lookup (socket teardown) agrees too. */
			assert_int_equal(egr_rule_allows(egr_compiled_lookup(&c, 0, (uint8_t *)&addr),
							 port, proto, 1, &expired),
					 policy_allows(&p, (uint8_t *)&addr, port, proto));
			checked++;
		}
		egr_compiled_free(&c);
		free(p.allow);
	}
	assert_true(checked > 10000);
}

/* A million distinct /32s (plus a covering /8) compile; the time is printed. */
static void test_million(void **state)
{
	const size_t n = 1000000;
	struct egr_policy p = { 0 };
	struct egr_compiled c;
	struct egr_error e;
	struct timespec t0, t1;
	size_t i;

	p.allow = calloc(n + 1, sizeof(*p.allow));
	assert_non_null(p.allow);
	p.nallow = n + 1;
	for (i = 0; i < n; i++) {
		/* Scrambled order so the sort does real work. */
		uint32_t v = htonl(0x0a000000u | (uint32_t)((i * 2654435761u) & 0xffffff));

		p.allow[i].kind = EGR_HOST_V4;
		memcpy(p.allow[i].addr, &v, 4);
		p.allow[i].prefixlen = 32;
		p.allow[i].port_lo = p.allow[i].port_hi = 443;
		p.allow[i].protos = EGR_PROTO_TCP;
		p.allow[i].index = (uint32_t)i;
	}
	p.allow[n].kind = EGR_HOST_V4;
	p.allow[n].addr[0] = 10;
	p.allow[n].prefixlen = 8;
	p.allow[n].port_lo = p.allow[n].port_hi = 53;
	p.allow[n].protos = EGR_PROTO_UDP;
	p.allow[n].index = (uint32_t)n;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(egr_policy_compile(&p, &c, &e), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	print_message("compiled %zu entries into %zu prefixes in %.3f s\n", n + 1, c.n4,
		      (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	assert_int_equal(c.n4, n + 1);
	assert_int_equal(c.v4[0].prefixlen, 8);
	assert_int_equal(c.v4[0].rule.nranges, 1);
	assert_int_equal(c.v4[1].prefixlen, 32);
	assert_int_equal(c.v4[n].rule.nranges, 2);
	assert_range(&c.v4[n].rule, 0, 53, 53, EGR_PROTO_UDP);
	assert_range(&c.v4[n].rule, 1, 443, 443, EGR_PROTO_TCP);
	egr_compiled_free(&c);
	free(p.allow);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_grouping),
		cmocka_unit_test(test_ancestor_merge),
		cmocka_unit_test(test_range_merge),
		cmocka_unit_test(test_too_many_ranges),
		cmocka_unit_test(test_v6),
		cmocka_unit_test(test_names_ignored),
		cmocka_unit_test(test_deterministic),
		cmocka_unit_test(test_equivalence),
		cmocka_unit_test(test_million),
	};

	return cmocka_run_group_tests_name("compile", tests, NULL, NULL);
}
