// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The policy parser's network block: limits, inspect, approvals, mode and
 * breaker, families and trust, DNS types and rebinding ranges, URL hints. */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/socket.h>
#include <cmocka.h>

#include "confine.h"
#include "egressd.h"
#include "policy.h"

#include "policy_util.h"

/* A policy with the given limits object text (NULL: no limits field). */
static char *with_limits(const char *limits)
{
	static char buf[1024];

	snprintf(buf, sizeof(buf), "{\"tenant\":\"t1\",%s%s%s\"network\":{\"default\":\"deny\","
		 "\"outbound_allow\":[]}}", limits ? "\"limits\":" : "", limits ? limits : "",
		 limits ? "," : "");
	return buf;
}

static void test_limits(void **state)
{
	struct egr_policy p;
	struct egr_error e;

	assert_int_equal(parse(with_limits(NULL), &p, &e), 0);
	assert_int_equal(p.quota_bytes, 0);
	assert_int_equal(p.tenant_quota_bytes, 0);
	assert_int_equal(p.quota_window_s, 0);
	egr_policy_free(&p);

	assert_int_equal(parse(with_limits("{\"egress_bytes\":200000}"), &p, &e), 0);
	assert_int_equal(p.quota_bytes, 200000);
	assert_int_equal(p.tenant_quota_bytes, 0);
	assert_int_equal(p.quota_window_s, 3600);
	egr_policy_free(&p);

	assert_int_equal(parse(with_limits("{\"egress_bytes\":1,\"window_seconds\":60,"
					   "\"tenant_egress_bytes\":1099511627776}"), &p, &e), 0);
	assert_int_equal(p.quota_bytes, 1);
	assert_int_equal(p.tenant_quota_bytes, 1099511627776ULL);
	assert_int_equal(p.quota_window_s, 60);
	egr_policy_free(&p);

	assert_int_equal(parse(with_limits("{\"tenant_egress_bytes\":5}"), &p, &e), 0);
	assert_int_equal(p.quota_bytes, 0);
	assert_int_equal(p.tenant_quota_bytes, 5);
	assert_int_equal(p.quota_window_s, 3600);
	egr_policy_free(&p);

	expect_fail(with_limits("[]"), "limits", "must be an object");
	expect_fail(with_limits("{}"), "limits", "egress_bytes");
	expect_fail(with_limits("{\"window_seconds\":60}"), "limits", "egress_bytes");
	expect_fail(with_limits("{\"egress_bytes\":0}"), "limits.egress_bytes", "out of range");
	expect_fail(with_limits("{\"egress_bytes\":-5}"), "limits.egress_bytes", "out of range");
	expect_fail(with_limits("{\"egress_bytes\":1.5}"), "limits.egress_bytes", "integer");
	expect_fail(with_limits("{\"egress_bytes\":\"1000\"}"), "limits.egress_bytes", "integer");
	expect_fail(with_limits("{\"egress_bytes\":2305843009213693952}"), "limits.egress_bytes",
		    "out of range");
	expect_fail(with_limits("{\"egress_bytes\":1,\"window_seconds\":0}"),
		    "limits.window_seconds", "out of range");
	expect_fail(with_limits("{\"egress_bytes\":1,\"window_seconds\":31622401}"),
		    "limits.window_seconds", "out of range");
	expect_fail(with_limits("{\"tenant_egress_bytes\":0}"), "limits.tenant_egress_bytes",
		    "out of range");
	expect_fail(with_limits("{\"egress_bytes\":1,\"bytes\":2}"), "limits.bytes",
		    "unknown field");
}

/* network.inspect: explicit, or following the trust class. */
static void test_inspect(void **state)
{
	struct egr_policy p;
	struct egr_error e;

	assert_int_equal(parse(with_net("\"outbound_allow\":[]"), &p, &e), 0);
	assert_int_equal(p.inspect, 0);
	egr_policy_free(&p);
	assert_int_equal(parse(with_net("\"outbound_allow\":[],\"trust\":\"strict\""), &p, &e), 0);
	assert_int_equal(p.inspect, 1);
	egr_policy_free(&p);
	/* Order of the keys does not matter. */
	assert_int_equal(parse(with_net("\"inspect\":false,\"outbound_allow\":[],"
					"\"trust\":\"strict\""),
			       &p, &e),
			 0);
	assert_int_equal(p.inspect, 0);
	assert_int_equal(p.trust_strict, 1);
	egr_policy_free(&p);
	assert_int_equal(parse(with_net("\"outbound_allow\":[],\"trust\":\"standard\","
					"\"inspect\":true"),
			       &p, &e),
			 0);
	assert_int_equal(p.inspect, 1);
	egr_policy_free(&p);
	expect_fail(with_net("\"outbound_allow\":[],\"inspect\":\"yes\""), "network.inspect",
		    "true or false");
	expect_fail(with_net("\"outbound_allow\":[],\"inspect\":1"), "network.inspect",
		    "true or false");
	expect_fail(with_net("\"outbound_allow\":[],\"Inspect\":true"), "network.Inspect",
		    "unknown field");
}

/* allow_sockets address families and network.trust. */
/* network.mode and network.breaker (issue 12). */
/* network.unknown_names, ask_timeout_s, ask_ports (docs/policy.md "Approvals"). */
static void test_ask(void **state)
{
	struct egr_policy p;
	struct egr_error e;

	assert_int_equal(parse(with_net("\"outbound_allow\":[]"), &p, &e), 0);
	assert_int_equal(p.ask_unknown, 0);
	assert_int_equal(p.ask_timeout_s, 20);
	assert_int_equal(p.nask_ports, 2);
	assert_int_equal(p.ask_ports[0].lo, 443);
	assert_int_equal(p.ask_ports[1].lo, 80);
	egr_policy_free(&p);
	assert_int_equal(parse(with_net("\"outbound_allow\":[],\"unknown_names\":\"ask\","
					"\"ask_timeout_s\":5,\"ask_ports\":[\"udp/53\",\"tcp/8000-8100\","
					"\"tcp/*\"]"),
			       &p, &e),
			 0);
	assert_int_equal(p.ask_unknown, 1);
	assert_int_equal(p.ask_timeout_s, 5);
	assert_int_equal(p.nask_ports, 3);
	assert_int_equal(p.ask_ports[0].protos, EGR_PROTO_UDP);
	assert_int_equal(p.ask_ports[1].lo, 8000);
	assert_int_equal(p.ask_ports[1].hi, 8100);
	assert_int_equal(p.ask_ports[2].lo, 0);
	assert_int_equal(p.ask_ports[2].hi, 65535);
	egr_policy_free(&p);

	expect_fail(with_net("\"unknown_names\":\"maybe\""), "network.unknown_names",
		    "must be \"deny\" or \"ask\", not \"maybe\"");
	expect_fail(with_net("\"ask_timeout_s\":0"), "network.ask_timeout_s", "from 1 to 300");
	expect_fail(with_net("\"ask_timeout_s\":301"), "network.ask_timeout_s", "from 1 to 300");
	expect_fail(with_net("\"ask_ports\":[]"), "network.ask_ports", "1 to 8 entries");
	expect_fail(with_net("\"ask_ports\":[\"443\"]"), "network.ask_ports[0]",
		    "must be \"tcp/PORT\" or \"udp/PORT\"");
	expect_fail(with_net("\"ask_ports\":[\"tcp/443\",\"tcp/99999\"]"), "network.ask_ports[1]",
		    "");
}

static void test_mode_and_breaker(void **state)
{
	struct egr_policy p;
	struct egr_error e;

	/* Defaults: enforce, no breaker. */
	assert_int_equal(parse(with_net("\"outbound_allow\":[]"), &p, &e), 0);
	assert_int_equal(p.audit_mode, 0);
	assert_int_equal(p.breaker_max_denies, 0);
	assert_int_equal(p.breaker_window_s, 0);
	egr_policy_free(&p);

	assert_int_equal(parse(with_net("\"outbound_allow\":[],\"mode\":\"audit\",\"breaker\":{\"max_denies\":5,"
					"\"window_s\":10}"),
			       &p, &e),
			 0);
	assert_int_equal(p.audit_mode, 1);
	assert_int_equal(p.breaker_max_denies, 5);
	assert_int_equal(p.breaker_window_s, 10);
	egr_policy_free(&p);
	assert_int_equal(parse(with_net("\"outbound_allow\":[],\"mode\":\"enforce\""), &p, &e), 0);
	assert_int_equal(p.audit_mode, 0);
	egr_policy_free(&p);

	expect_fail(with_net("\"mode\":\"permissive\""), "network.mode",
		    "must be \"enforce\" or \"audit\", not \"permissive\"");
	expect_fail(with_net("\"mode\":1"), "network.mode", "must be \"enforce\" or \"audit\"");
	expect_fail(with_net("\"breaker\":5"), "network.breaker", "must be an object");
	expect_fail(with_net("\"breaker\":{\"window_s\":10}"), "network.breaker.max_denies",
		    "missing");
	expect_fail(with_net("\"breaker\":{\"max_denies\":3}"), "network.breaker.window_s",
		    "missing");
	expect_fail(with_net("\"breaker\":{\"max_denies\":0,\"window_s\":10}"),
		    "network.breaker.max_denies", "out of range 1-100000000");
	expect_fail(with_net("\"breaker\":{\"max_denies\":3,\"window_s\":86401}"),
		    "network.breaker.window_s", "out of range 1-86400");
	expect_fail(with_net("\"breaker\":{\"max_denies\":\"3\",\"window_s\":1}"),
		    "network.breaker.max_denies", "must be an integer");
	expect_fail(with_net("\"breaker\":{\"max_denies\":3,\"window_s\":1,\"x\":1}"),
		    "network.breaker.x", "unknown field");
	/* audit is not "default": "allow": that stays refused. */
	expect_fail("{\"tenant\":\"t\",\"network\":{\"default\":\"allow\",\"mode\":\"audit\"}}",
		    "network.default", "not supported");
}

static void test_families_and_trust(void **state)
{
	struct egr_policy p;
	struct egr_error e;

	/* Defaults: no extra family, standard trust. */
	assert_int_equal(parse(with_net("\"outbound_allow\":[]"), &p, &e), 0);
	assert_true(p.families == 0);
	assert_int_equal(p.trust_strict, 0);
	egr_policy_free(&p);

	/* Families mixed with inet kinds; each lands in its own field. */
	assert_int_equal(parse(with_net("\"outbound_allow\":[],\"allow_sockets\":[\"netlink\","
					"\"raw\",\"packet\",\"xdp\",\"vsock\",\"packet\"],"
					"\"trust\":\"strict\""),
			       &p, &e),
			 0);
	assert_int_equal(p.sb_flags, EGR_SB_ALLOW_RAW);
	assert_true(p.families == ((1ULL << AF_NETLINK) | (1ULL << AF_PACKET) |
				   (1ULL << AF_XDP) | (1ULL << AF_VSOCK)));
	assert_int_equal(p.trust_strict, 1);
	egr_policy_free(&p);

	/* Every name egr_confine_family() knows is accepted as its family. */
	{
		static const char *const names[] = { "netlink", "packet", "xdp", "vsock",
						     "bluetooth", "can", "tipc", "rds",
						     "alg", "qipcrtr", "x25", "ax25",
						     "appletalk" };

		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			int af = egr_confine_family(names[i]);

			assert_true(af > 0 && af < 64);
			assert_int_equal(parse(with_net("\"outbound_allow\":[],"
							"\"allow_sockets\":[\"%s\"]", names[i]),
					       &p, &e),
					 0);
			assert_true(p.families == 1ULL << af);
			assert_int_equal(p.sb_flags, 0);
			egr_policy_free(&p);
		}
	}

	assert_int_equal(parse(with_net("\"outbound_allow\":[],\"trust\":\"standard\""), &p, &e),
			 0);
	assert_int_equal(p.trust_strict, 0);
	egr_policy_free(&p);

	/* The trust class is part of the policy's identity. */
	{
		struct egr_policy a, b;

		assert_int_equal(parse(with_net("\"outbound_allow\":[]"), &a, &e), 0);
		assert_int_equal(parse(with_net("\"outbound_allow\":[],\"trust\":\"strict\""), &b,
				       &e),
				 0);
		assert_string_not_equal(a.sha256, b.sha256);
		egr_policy_free(&a);
		egr_policy_free(&b);
	}

	/* The families AF_INET, AF_INET6 and AF_UNIX are always allowed and are
	 * not names; nor are misspellings, other cases or non-strings. */
	expect_fail(with_net("\"outbound_allow\":[],\"allow_sockets\":[\"packet\",\"inet\"]"),
		    "network.allow_sockets[1]", "\"inet\"");
	expect_fail(with_net("\"outbound_allow\":[],\"allow_sockets\":[\"unix\"]"),
		    "network.allow_sockets[0]", "address family");
	expect_fail(with_net("\"outbound_allow\":[],\"allow_sockets\":[\"PACKET\"]"),
		    "network.allow_sockets[0]", "\"PACKET\"");
	expect_fail(with_net("\"outbound_allow\":[],\"allow_sockets\":[\"af_packet\"]"),
		    "network.allow_sockets[0]", "\"af_packet\"");
	expect_fail(with_net("\"outbound_allow\":[],\"allow_sockets\":[17]"),
		    "network.allow_sockets[0]", "address family");
	/* An embedded NUL never reaches the name lookup (the reader refuses it). */
	expect_fail(with_net("\"outbound_allow\":[],\"allow_sockets\":[\"packet\\u0000x\"]"),
		    "", "\\u0000");
	expect_fail(with_net("\"outbound_allow\":[],\"trust\":\"paranoid\""), "network.trust",
		    "\"paranoid\"");
	expect_fail(with_net("\"outbound_allow\":[],\"trust\":\"Strict\""), "network.trust",
		    "must be \"standard\" or \"strict\"");
	expect_fail(with_net("\"outbound_allow\":[],\"trust\":1"), "network.trust",
		    "must be \"standard\" or \"strict\"");
	expect_fail(with_net("\"outbound_allow\":[],\"trust\":\"strict\\u0000\""), "",
		    "\\u0000");
	expect_fail(with_net("\"outbound_allow\":[],\"trust\":\"strict\",\"trust\":\"standard\""),
		    "", "duplicate");
}

/* Inputs found by tests/fuzz/fuzz_policy.c go here as regressions; so far it found
 * none, so these are the hand-picked edge cases its seed corpus also covers. */
static void test_fuzz_regressions(void **state)
{
	struct egr_policy p;
	struct egr_error e;

	/* Error quoting of non-ASCII and quotes stays inside the buffers. */
	expect_entry_fail("\\\"\\\\\\u00ff:1", "invalid character");
	assert_int_equal(parse("{\"tenant\":\"t\",\"network\":{\"default\":\"deny\","
			       "\"outbound_allow\":[\"[\"]}}",
			       &p, &e),
			 -EINVAL);
	assert_int_equal(parse("{\"tenant\":\"t\",\"network\":{\"default\":\"deny\","
			       "\"outbound_allow\":[\"[:\"]}}",
			       &p, &e),
			 -EINVAL);
	assert_int_equal(parse("{\"tenant\":\"t\",\"network\":{\"default\":\"deny\","
			       "\"outbound_allow\":[{\"host\":\"[\",\"ports\":[1]}]}}",
			       &p, &e),
			 -EINVAL);
	assert_int_equal(parse("{\"tenant\":\"t\",\"network\":{\"default\":\"deny\","
			       "\"outbound_allow\":[{\"host\":\"\",\"ports\":[1]}]}}",
			       &p, &e),
			 -EINVAL);
}

static void test_dns_types(void **state)
{
	const char *ok = "{\"tenant\":\"t\",\"network\":{\"default\":\"deny\","
			 "\"outbound_allow\":[],\"dns_types\":[\"A\",\"txt\",\"HTTPS\"]}}";
	const char *bad = "{\"tenant\":\"t\",\"network\":{\"default\":\"deny\","
			  "\"outbound_allow\":[],\"dns_types\":[\"A\",\"BOGUS\"]}}";
	const char *empty = "{\"tenant\":\"t\",\"network\":{\"default\":\"deny\","
			    "\"outbound_allow\":[],\"dns_types\":[]}}";
	struct egr_policy p;
	struct egr_error e;

	assert_int_equal(egr_policy_parse(ok, strlen(ok), &p, &e), 0);
	assert_int_equal(p.ndns_types, 3);
	assert_int_equal(p.dns_types[0], 1);
	assert_int_equal(p.dns_types[1], 16);
	assert_int_equal(p.dns_types[2], 65);
	egr_policy_free(&p);
	assert_int_equal(egr_policy_parse(bad, strlen(bad), &p, &e), -EINVAL);
	assert_string_equal(e.field, "network.dns_types[1]");
	assert_non_null(strstr(e.message, "BOGUS"));
	assert_int_equal(egr_policy_parse(empty, strlen(empty), &p, &e), -EINVAL);
	assert_string_equal(e.field, "network.dns_types");
}

/* A policy whose network block has "dns_rebind_allow": LIST (raw JSON). */
static int parse_rebind(const char *list, struct egr_policy *p, struct egr_error *e)
{
	char text[8192];

	snprintf(text, sizeof(text),
		 "{\"tenant\":\"t\",\"network\":{\"default\":\"deny\","
		 "\"outbound_allow\":[],\"dns_rebind_allow\":%s}}", list);
	return egr_policy_parse(text, strlen(text), p, e);
}

/* A URL given as a destination is refused with the entry it means. */
static void test_url_entry_hint(void **state)
{
	static const struct {
		const char *in, *hint;
	} cases[] = {
		{ "https://api.example.com/v1", "here \"api.example.com:443\"" },
		{ "http://mirror.test", "here \"mirror.test:80\"" },
		{ "https://api.example.com:8443/x", "here \"api.example.com:8443\"" },
		{ "gopher://old.test/", "write HOST:PORT (e.g." },
	};
	struct egr_allow a;
	struct egr_error e;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(egr_allow_parse(cases[i].in, &a, &e), -EINVAL);
		assert_non_null(strstr(e.message, "is a URL, not a destination"));
		assert_non_null(strstr(e.message, cases[i].hint));
	}
	/* Twin: the entry it suggests parses. */
	a = one("api.example.com:443");
	assert_string_equal(a.name, "api.example.com");
	free(a.name);
}

static void test_dns_rebind_allow(void **state)
{
	static const uint8_t fc[16] = { 0xfc };
	struct egr_policy p;
	struct egr_error e;
	char big[4096];
	size_t o = 0;

	assert_int_equal(parse_rebind("[\"10.0.0.0/8\",\"127.0.0.1\",\"fc00::/7\","
				      "\"[::1/128]\",\"::ffff:192.168.0.0/112\",\"10.1.2.3/8\"]",
				      &p, &e), 0);
	assert_int_equal(p.nrebind, 6);
	assert_int_equal(p.rebind_allow[0].kind, EGR_HOST_V4);
	assert_int_equal(p.rebind_allow[0].prefixlen, 8);
	assert_memory_equal(p.rebind_allow[0].addr, "\x0a\0\0\0", 4);
	assert_int_equal(p.rebind_allow[1].prefixlen, 32);
	assert_memory_equal(p.rebind_allow[1].addr, "\x7f\0\0\x01", 4);
	assert_int_equal(p.rebind_allow[2].kind, EGR_HOST_V6);
	assert_int_equal(p.rebind_allow[2].prefixlen, 7);
	assert_memory_equal(p.rebind_allow[2].addr, fc, 16);
	assert_int_equal(p.rebind_allow[3].kind, EGR_HOST_V6);
	assert_int_equal(p.rebind_allow[3].prefixlen, 128);
	/* IPv4-mapped: judged (and stored) as IPv4 */
	assert_int_equal(p.rebind_allow[4].kind, EGR_HOST_V4);
	assert_int_equal(p.rebind_allow[4].prefixlen, 16);
	assert_memory_equal(p.rebind_allow[4].addr, "\xc0\xa8\0\0", 4);
	/* host bits cleared, as in outbound_allow */
	assert_memory_equal(p.rebind_allow[5].addr, "\x0a\0\0\0", 4);
	egr_policy_free(&p);
	assert_int_equal(parse_rebind("[]", &p, &e), 0);
	assert_int_equal(p.nrebind, 0);
	assert_null(p.rebind_allow);
	egr_policy_free(&p);

	/* Errors name the field and the entry. */
	assert_int_equal(parse_rebind("\"10.0.0.0/8\"", &p, &e), -EINVAL);
	assert_string_equal(e.field, "network.dns_rebind_allow");
	assert_int_equal(parse_rebind("[\"10.0.0.0/8\", \"localhost\"]", &p, &e), -EINVAL);
	assert_string_equal(e.field, "network.dns_rebind_allow[1]");
	assert_non_null(strstr(e.message, "localhost"));
	assert_int_equal(parse_rebind("[\"10.0.0.0/33\"]", &p, &e), -EINVAL);
	assert_string_equal(e.field, "network.dns_rebind_allow[0]");
	assert_non_null(strstr(e.message, "0-32"));
	assert_int_equal(parse_rebind("[\"fc00::/129\"]", &p, &e), -EINVAL);
	assert_string_equal(e.field, "network.dns_rebind_allow[0]");
	assert_int_equal(parse_rebind("[\"10.0.0.0/8:53\"]", &p, &e), -EINVAL);
	assert_string_equal(e.field, "network.dns_rebind_allow[0]");
	assert_int_equal(parse_rebind("[\"*.example.com\"]", &p, &e), -EINVAL);
	assert_int_equal(parse_rebind("[\"\"]", &p, &e), -EINVAL);
	assert_int_equal(parse_rebind("[8]", &p, &e), -EINVAL);
	assert_string_equal(e.field, "network.dns_rebind_allow[0]");
	assert_int_equal(parse_rebind("[\"10.0.0.0/8\\u0000x\"]", &p, &e), -EINVAL);
	assert_int_equal(parse_rebind("[\"999.0.0.0/8\"]", &p, &e), -EINVAL);
	assert_int_equal(parse_rebind("[\"[fc00::/7\"]", &p, &e), -EINVAL);
	/* at most EGR_POLICY_MAX_REBIND entries */
	o += (size_t)snprintf(big + o, sizeof(big) - o, "[");
	for (int i = 0; i <= EGR_POLICY_MAX_REBIND; i++)
		o += (size_t)snprintf(big + o, sizeof(big) - o, "%s\"10.0.0.%d\"", i ? "," : "",
				      i % 256);
	snprintf(big + o, sizeof(big) - o, "]");
	assert_int_equal(parse_rebind(big, &p, &e), -EINVAL);
	assert_string_equal(e.field, "network.dns_rebind_allow");
	assert_non_null(strstr(e.message, "too many"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_inspect),
		cmocka_unit_test(test_ask),
		cmocka_unit_test(test_mode_and_breaker),
		cmocka_unit_test(test_families_and_trust),
		cmocka_unit_test(test_fuzz_regressions),
		cmocka_unit_test(test_dns_types),
		cmocka_unit_test(test_url_entry_hint),
		cmocka_unit_test(test_dns_rebind_allow),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
