// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Policy parsing and validation: user/lib/policy.c. */
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
#include <openssl/evp.h>

#include "confine.h"
#include "egressd.h"
#include "policy.h"

static const char example[] =
	"{\n"
	"  \"tenant\": \"acme\",\n"
	"  \"execution_id\": \"exec_01H8X\",\n"
	"  \"principal\": \"agent:order-assistant\",\n"
	"  \"tool\": \"http.request\",\n"
	"  \"version\": \"1.2.0\",\n"
	"  \"network\": {\n"
	"    \"default\": \"deny\",\n"
	"    \"outbound_allow\": [\"api.example.com:443\", \"203.0.113.0/24:8000-8080\",\n"
	"                       \"[2001:db8::/32]:443\", \"udp/198.51.100.7:123\"],\n"
	"    \"dns_allow\": [\"api.example.com\", \"*.example.org\"],\n"
	"    \"inbound\": \"deny\"\n"
	"  }\n"
	"}\n";

#include "policy_util.h"

static void test_example(void **state)
{
	struct egr_policy p;
	struct egr_error e;
	uint8_t v6[16];

	assert_int_equal(parse(example, &p, &e), 0);
	assert_string_equal(p.tenant, "acme");
	assert_string_equal(p.execution_id, "exec_01H8X");
	assert_string_equal(p.principal, "agent:order-assistant");
	assert_string_equal(p.tool, "http.request");
	assert_string_equal(p.version, "1.2.0");
	assert_int_equal(p.inbound_allow, 0);
	assert_int_equal(p.sb_flags, 0);
	assert_int_equal(p.nallow, 4);

	assert_int_equal(p.allow[0].kind, EGR_HOST_NAME);
	assert_string_equal(p.allow[0].name, "api.example.com");
	assert_int_equal(p.allow[0].port_lo, 443);
	assert_int_equal(p.allow[0].port_hi, 443);
	assert_int_equal(p.allow[0].protos, EGR_PROTO_ANY);
	assert_int_equal(p.allow[0].index, 0);

	assert_v4(&p.allow[1], "203.0.113.0", 24);
	assert_int_equal(p.allow[1].port_lo, 8000);
	assert_int_equal(p.allow[1].port_hi, 8080);
	assert_int_equal(p.allow[1].index, 1);

	assert_int_equal(p.allow[2].kind, EGR_HOST_V6);
	assert_int_equal(inet_pton(AF_INET6, "2001:db8::", v6), 1);
	assert_memory_equal(p.allow[2].addr, v6, 16);
	assert_int_equal(p.allow[2].prefixlen, 32);
	assert_int_equal(p.allow[2].port_lo, 443);

	assert_v4(&p.allow[3], "198.51.100.7", 32);
	assert_int_equal(p.allow[3].protos, EGR_PROTO_UDP);
	assert_int_equal(p.allow[3].port_lo, 123);
	assert_int_equal(p.allow[3].index, 3);

	assert_int_equal(p.ndns, 2);
	assert_string_equal(p.dns_allow[0], "api.example.com");
	assert_string_equal(p.dns_allow[1], "*.example.org");
	assert_int_equal(strlen(p.sha256), 64);
	assert_int_equal(strspn(p.sha256, "0123456789abcdef"), 64);
	egr_policy_free(&p);
	assert_zeroed(&p);
	egr_policy_free(&p); /* twice is fine */
	egr_policy_free(NULL);
}

static void test_sha256(void **state)
{
	static const char a[] = "{\"tenant\":\"t\",\"network\":{\"default\":\"deny\","
				"\"outbound_allow\":[]}}";
	static const char b[] = "{ \"network\" : { \"outbound_allow\" : [ ],\n"
				"\"default\" : \"deny\" }, \"tenant\" : \"t\" }";
	static const char c[] = "{\"tenant\":\"u\",\"network\":{\"default\":\"deny\","
				"\"outbound_allow\":[]}}";
	static const char canon[] = "{\"network\":{\"default\":\"deny\",\"outbound_allow\":[]},"
				    "\"tenant\":\"t\"}";
	unsigned char md[32];
	char hex[65];
	struct egr_policy pa, pb, pc;
	struct egr_error e;
	unsigned int len = 0, i;

	assert_int_equal(parse(a, &pa, &e), 0);
	assert_int_equal(parse(b, &pb, &e), 0);
	assert_int_equal(parse(c, &pc, &e), 0);
	/* Key order and whitespace do not change the hash; content does. */
	assert_string_equal(pa.sha256, pb.sha256);
	assert_string_not_equal(pa.sha256, pc.sha256);
	/* It is the SHA-256 of the compact, sorted serialisation. */
	assert_int_equal(EVP_Digest(canon, strlen(canon), md, &len, EVP_sha256(), NULL), 1);
	for (i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	assert_string_equal(pa.sha256, hex);
	egr_policy_free(&pa);
	egr_policy_free(&pb);
	egr_policy_free(&pc);
}

/* egressctl's check: the same verdicts and fields, no hash. */
static void test_check_json_no_hash(void **state)
{
	static const char good[] = "{\"tenant\":\"t\",\"network\":{\"default\":\"deny\","
				   "\"outbound_allow\":[\"203.0.113.0/24:443\"],"
				   "\"allow_sockets\":[\"netlink\"]}}";
	static const char bad[] = "{\"tenant\":\"t\",\"network\":{\"default\":\"allow\"}}";
	struct egr_policy full, checked;
	struct egr_error e1, e2;
	json_t *root;

	root = json_loads(good, 0, NULL);
	assert_non_null(root);
	assert_int_equal(egr_policy_from_json(root, &full, &e1), 0);
	assert_int_equal(egr_policy_check_json(root, &checked, &e2), 0);
	assert_int_equal(strlen(full.sha256), 64);
	assert_string_equal(checked.sha256, "");
	assert_int_equal(checked.families, full.families);
	assert_int_equal(checked.nallow, full.nallow);
	assert_string_equal(checked.tenant, full.tenant);
	egr_policy_free(&full);
	egr_policy_free(&checked);
	json_decref(root);
	root = json_loads(bad, 0, NULL);
	assert_non_null(root);
	assert_int_equal(egr_policy_from_json(root, &full, &e1), -EINVAL);
	assert_int_equal(egr_policy_check_json(root, &checked, &e2), -EINVAL);
	assert_string_equal(e1.field, e2.field);
	assert_string_equal(e1.message, e2.message);
	json_decref(root);
}

static void test_optional_fields(void **state)
{
	struct egr_policy p;
	struct egr_error e;

	assert_int_equal(parse(with_net("\"outbound_allow\":[],\"inbound\":\"allow\","
					"\"allow_sockets\":[\"raw\",\"icmp\",\"udplite\",\"sctp\","
					"\"mptcp\",\"icmp\"]"),
			       &p, &e),
			 0);
	assert_string_equal(p.tenant, "t1");
	assert_null(p.execution_id);
	assert_null(p.principal);
	assert_null(p.tool);
	assert_null(p.version);
	assert_int_equal(p.inbound_allow, 1);
	assert_int_equal(p.sb_flags, EGR_SB_ALLOW_RAW | EGR_SB_ALLOW_ICMP | EGR_SB_ALLOW_UDPLITE |
					     EGR_SB_ALLOW_SCTP | EGR_SB_ALLOW_MPTCP);
	assert_int_equal(p.nallow, 0);
	assert_null(p.allow);
	assert_int_equal(p.ndns, 0);
	egr_policy_free(&p);

	assert_int_equal(parse(with_net("\"outbound_allow\":[],\"allow_sockets\":[\"icmp\"],"
					"\"inbound\":\"deny\",\"dns_allow\":[]"),
			       &p, &e),
			 0);
	assert_int_equal(p.sb_flags, EGR_SB_ALLOW_ICMP);
	assert_int_equal(p.inbound_allow, 0);
	egr_policy_free(&p);

	/* Tenant charset and the 256-byte limit, inclusive. */
	{
		char big[1024], name[300];

		memset(name, 'x', 256);
		name[256] = '\0';
		snprintf(big, sizeof(big), "{\"tenant\":\"A-z_0.9:x\",\"tool\":\"%s\","
			 "\"network\":{\"default\":\"deny\",\"outbound_allow\":[]}}", name);
		assert_int_equal(parse(big, &p, &e), 0);
		assert_string_equal(p.tenant, "A-z_0.9:x");
		assert_string_equal(p.tool, name);
		egr_policy_free(&p);
	}
}

static void test_allow_forms(void **state)
{
	struct egr_allow a;
	uint8_t v6[16];

	a = one("tcp/10.0.0.0/8:80-90");
	assert_v4(&a, "10.0.0.0", 8);
	assert_int_equal(a.protos, EGR_PROTO_TCP);
	assert_int_equal(a.port_lo, 80);
	assert_int_equal(a.port_hi, 90);

	a = one("udp/1.2.3.4:0");
	assert_v4(&a, "1.2.3.4", 32);
	assert_int_equal(a.protos, EGR_PROTO_UDP);
	assert_int_equal(a.port_lo, 0);
	assert_int_equal(a.port_hi, 0);

	a = one("1.2.3.4:65535");
	assert_int_equal(a.port_lo, 65535);
	assert_int_equal(a.protos, EGR_PROTO_ANY);

	a = one("0.0.0.0/0:*");
	assert_v4(&a, "0.0.0.0", 0);
	assert_int_equal(a.port_lo, 0);
	assert_int_equal(a.port_hi, 65535);

	/* Host bits are masked off. */
	a = one("10.1.2.3/8:80");
	assert_v4(&a, "10.0.0.0", 8);
	a = one("10.1.2.255/25:80");
	assert_v4(&a, "10.1.2.128", 25);

	a = one("[::1]:*");
	assert_int_equal(a.kind, EGR_HOST_V6);
	assert_int_equal(a.prefixlen, 128);
	assert_int_equal(inet_pton(AF_INET6, "::1", v6), 1);
	assert_memory_equal(a.addr, v6, 16);

	a = one("tcp/[2001:db8:ffff::1/36]:443");
	assert_int_equal(a.kind, EGR_HOST_V6);
	assert_int_equal(a.prefixlen, 36);
	assert_int_equal(inet_pton(AF_INET6, "2001:db8:f000::", v6), 1);
	assert_memory_equal(a.addr, v6, 16);

	a = one("API.Example.COM.:443");
	assert_int_equal(a.kind, EGR_HOST_NAME);
	assert_string_equal(a.name, "api.example.com");
	free(a.name);

	a = one("_sip._tcp.example.com:5060");
	assert_string_equal(a.name, "_sip._tcp.example.com");
	free(a.name);

	a = one("localhost:80");
	assert_string_equal(a.name, "localhost");
	free(a.name);

	/* Errors without an err still fail cleanly. */
	assert_int_equal(egr_allow_parse("nope", &a, NULL), -EINVAL);
	assert_int_equal(egr_allow_parse(NULL, &a, NULL), -EINVAL);
}

static void test_mapped_ipv6(void **state)
{
	struct egr_allow a;
	uint8_t v6[16];

	a = one("[::ffff:1.2.3.4]:80");
	assert_v4(&a, "1.2.3.4", 32);
	a = one("[::ffff:10.9.8.7/104]:80");
	assert_v4(&a, "10.0.0.0", 8);
	a = one("[::FFFF:c000:0201/120]:80");
	assert_v4(&a, "192.0.2.0", 24);
	a = one("[::ffff:0:0/96]:*");
	assert_v4(&a, "0.0.0.0", 0);
	/* Shorter than /96 is an IPv6 prefix: mapped destinations never match it. */
	a = one("[::ffff:0:0/80]:*");
	assert_int_equal(a.kind, EGR_HOST_V6);
	assert_int_equal(a.prefixlen, 80);
	memset(v6, 0, sizeof(v6));
	assert_memory_equal(a.addr, v6, 16);
	/* Not mapped: ::1.2.3.4 (compatible) and 64:ff9b::/96 stay IPv6. */
	a = one("[::1.2.3.4]:80");
	assert_int_equal(a.kind, EGR_HOST_V6);
	a = one("[64:ff9b::1.2.3.4]:80");
	assert_int_equal(a.kind, EGR_HOST_V6);
}

static void test_object_form(void **state)
{
	struct egr_policy p;
	struct egr_error e;
	size_t i;

	assert_int_equal(parse(with_net("\"outbound_allow\":[\"1.1.1.1:1\","
					"{\"host\":\"10.0.0.1\",\"ports\":[443,\"8000-8080\",\"*\","
					"\"22\"],\"protocol\":\"tcp\"},"
					"{\"host\":\"Svc.Example.net\",\"ports\":[53]},"
					"{\"host\":\"[2001:db8::/48]\",\"ports\":[1],"
					"\"protocol\":\"any\"},"
					"{\"protocol\":\"udp\",\"host\":\"::ffff:1.2.3.4\","
					"\"ports\":[\"0-0\"]},"
					"\"9.9.9.9:9\"]"),
			       &p, &e),
			 -EINVAL);
	/* An unbracketed IPv6 host is refused in the object form too. */
	assert_string_equal(e.field, "network.outbound_allow[4].host");

	assert_int_equal(parse(with_net("\"outbound_allow\":[\"1.1.1.1:1\","
					"{\"host\":\"10.0.0.1\",\"ports\":[443,\"8000-8080\",\"*\","
					"\"22\"],\"protocol\":\"tcp\"},"
					"{\"host\":\"Svc.Example.net\",\"ports\":[53]},"
					"{\"host\":\"[2001:db8::/48]\",\"ports\":[1],"
					"\"protocol\":\"any\"},"
					"{\"protocol\":\"udp\",\"host\":\"[::ffff:1.2.3.4]\","
					"\"ports\":[\"0-0\"]},"
					"\"9.9.9.9:9\"]"),
			       &p, &e),
			 0);
	assert_int_equal(p.nallow, 9);
	assert_int_equal(p.allow[0].index, 0);
	for (i = 1; i <= 4; i++) {
		assert_v4(&p.allow[i], "10.0.0.1", 32);
		assert_int_equal(p.allow[i].index, 1);
		assert_int_equal(p.allow[i].protos, EGR_PROTO_TCP);
	}
	assert_int_equal(p.allow[1].port_lo, 443);
	assert_int_equal(p.allow[1].port_hi, 443);
	assert_int_equal(p.allow[2].port_lo, 8000);
	assert_int_equal(p.allow[2].port_hi, 8080);
	assert_int_equal(p.allow[3].port_lo, 0);
	assert_int_equal(p.allow[3].port_hi, 65535);
	assert_int_equal(p.allow[4].port_lo, 22);
	assert_int_equal(p.allow[5].kind, EGR_HOST_NAME);
	assert_string_equal(p.allow[5].name, "svc.example.net");
	assert_int_equal(p.allow[5].protos, EGR_PROTO_ANY);
	assert_int_equal(p.allow[5].index, 2);
	assert_int_equal(p.allow[6].kind, EGR_HOST_V6);
	assert_int_equal(p.allow[6].prefixlen, 48);
	assert_int_equal(p.allow[6].index, 3);
	assert_v4(&p.allow[7], "1.2.3.4", 32);
	assert_int_equal(p.allow[7].protos, EGR_PROTO_UDP);
	assert_int_equal(p.allow[7].index, 4);
	assert_v4(&p.allow[8], "9.9.9.9", 32);
	assert_int_equal(p.allow[8].index, 5);
	egr_policy_free(&p);
}

static void test_dns_normalize(void **state)
{
	char n[EGR_DNS_NAME_MAX + 1], label[64], name[300];
	int i;

	assert_int_equal(egr_dns_name_normalize("Api.Example.COM.", 0, n, sizeof(n)), 0);
	assert_string_equal(n, "api.example.com");
	assert_int_equal(egr_dns_name_normalize("*.Example.org", 1, n, sizeof(n)), 0);
	assert_string_equal(n, "*.example.org");
	assert_int_equal(egr_dns_name_normalize("*.internal", 1, n, sizeof(n)), 0);
	assert_int_equal(egr_dns_name_normalize("*.example.org", 0, n, sizeof(n)), -EINVAL);
	assert_int_equal(egr_dns_name_normalize("localhost", 0, n, sizeof(n)), 0);
	assert_int_equal(egr_dns_name_normalize("_srv._tcp.x.io", 0, n, sizeof(n)), 0);
	assert_int_equal(egr_dns_name_normalize("a-b.c", 0, n, sizeof(n)), 0);
	assert_int_equal(egr_dns_name_normalize("x.example.com", 0, n, 5), -ENOSPC);

	static const char *const bad[] = {
		"", ".", "..", "a..b", ".a", "a.b..", "-a.com", "a-.com", "a.-b.com", "*", "*.",
		"**.a", "a.*.com", "*a.com", "a*.com", "1.2.3.4", "a.123", "sp ace.com",
		"bad!.com", "caf\xc3\xa9.com", "a/b.com", "a:b",
	};
	for (i = 0; i < (int)(sizeof(bad) / sizeof(bad[0])); i++) {
		if (egr_dns_name_normalize(bad[i], 1, n, sizeof(n)) != -EINVAL)
			print_error("accepted \"%s\"\n", bad[i]);
		assert_int_equal(egr_dns_name_normalize(bad[i], 1, n, sizeof(n)), -EINVAL);
	}
	assert_int_equal(egr_dns_name_normalize(NULL, 1, n, sizeof(n)), -EINVAL);

	/* Labels up to 63, names up to 253 (plus an optional trailing dot). */
	memset(label, 'a', 63);
	label[63] = '\0';
	snprintf(name, sizeof(name), "%s.com", label);
	assert_int_equal(egr_dns_name_normalize(name, 0, n, sizeof(n)), 0);
	snprintf(name, sizeof(name), "%sb.com", label);
	assert_int_equal(egr_dns_name_normalize(name, 0, n, sizeof(n)), -EINVAL);
	/* 4 * 63 + 3 dots = 255: too long; trim to exactly 253. */
	snprintf(name, sizeof(name), "%s.%s.%s.%s", label, label, label, label);
	assert_int_equal(egr_dns_name_normalize(name, 0, n, sizeof(n)), -EINVAL);
	name[253] = '\0';
	assert_int_equal(egr_dns_name_normalize(name, 0, n, sizeof(n)), 0);
	assert_int_equal(strlen(n), 253);
	strcat(name, ".");
	assert_int_equal(egr_dns_name_normalize(name, 0, n, sizeof(n)), 0);
	name[253] = 'x';
	assert_int_equal(egr_dns_name_normalize(name, 0, n, sizeof(n)), -EINVAL);
}

/* --- errors ------------------------------------------------------------------------- */

static void test_structure_errors(void **state)
{
	expect_fail("{\"tenant\":\"t\",\"limitz\":{},\"network\":{\"default\":\"deny\","
		    "\"outbound_allow\":[]}}",
		    "limitz", "unknown field");
	expect_fail(with_net("\"outbound_allow\":[],\"foo\":1"), "network.foo", "unknown field");
	expect_allow_fail("{\"host\":\"1.2.3.4\",\"ports\":[1],\"bar\":true}",
			  "network.outbound_allow[1].bar", "unknown field");
	expect_fail("{\"network\":{\"default\":\"deny\",\"outbound_allow\":[]}}", "tenant",
		    "missing");
	expect_fail("{\"tenant\":\"t\"}", "network", "missing");
	expect_fail("{\"tenant\":\"t\",\"network\":[]}", "network", "must be an object");
	expect_fail("{\"tenant\":\"t\",\"network\":{\"outbound_allow\":[]}}", "network.default",
		    "missing");
	expect_fail("{\"tenant\":\"t\",\"network\":{\"default\":\"allow\",\"outbound_allow\":[]}}",
		    "network.default", "only default-deny");
	expect_fail("{\"tenant\":\"t\",\"network\":{\"default\":\"DENY\",\"outbound_allow\":[]}}",
		    "network.default", "\"DENY\"");
	expect_fail("{\"tenant\":\"t\",\"network\":{\"default\":0,\"outbound_allow\":[]}}",
		    "network.default", "must be \"deny\"");
	expect_fail("{\"tenant\":\"t\",\"network\":{\"default\":\"deny\"}}",
		    "network.outbound_allow", "missing");
	expect_fail(with_net("\"outbound_allow\":{}"), "network.outbound_allow",
		    "must be an array");
	expect_fail(with_net("\"outbound_allow\":[],\"inbound\":\"maybe\""), "network.inbound",
		    "\"maybe\"");
	expect_fail(with_net("\"outbound_allow\":[],\"dns_allow\":\"a.com\""), "network.dns_allow",
		    "must be an array");
	expect_fail(with_net("\"outbound_allow\":[],\"dns_allow\":[1]"), "network.dns_allow[0]",
		    "must be a string");
	expect_fail(with_net("\"outbound_allow\":[],\"allow_sockets\":[\"raw\",\"tcp\"]"),
		    "network.allow_sockets[1]", "\"tcp\"");
	expect_fail(with_net("\"outbound_allow\":[],\"allow_sockets\":\"raw\""),
		    "network.allow_sockets", "must be an array");
	expect_fail("[]", "", "JSON object");
	expect_fail("\"x\"", "", "invalid JSON");
	expect_allow_fail("42", "network.outbound_allow[1]", "string");
	expect_allow_fail("null", "network.outbound_allow[1]", "string");
}

static void test_string_errors(void **state)
{
	char buf[2048], big[400];

	expect_fail("{\"tenant\":\"acme corp\",\"network\":{}}", "tenant", "\"acme corp\"");
	expect_fail("{\"tenant\":\"a/b\",\"network\":{}}", "tenant", "found '/'");
	expect_fail("{\"tenant\":\"a{b\",\"network\":{}}", "tenant", "letters, digits");
	expect_fail("{\"tenant\":\"\",\"network\":{}}", "tenant", "empty");
	expect_fail("{\"tenant\":7,\"network\":{}}", "tenant", "must be a string");
	expect_fail("{\"tenant\":\"t\",\"tool\":\"a\\u0001b\",\"network\":{}}", "tool",
		    "printable ASCII");
	expect_fail("{\"tenant\":\"t\",\"version\":\"caf\\u00e9\",\"network\":{}}", "version",
		    "printable ASCII");
	expect_fail("{\"tenant\":\"t\",\"principal\":null,\"network\":{}}", "principal",
		    "must be a string");
	memset(big, 'p', 257);
	big[257] = '\0';
	snprintf(buf, sizeof(buf), "{\"tenant\":\"t\",\"principal\":\"%s\",\"network\":{}}", big);
	expect_fail(buf, "principal", "too long: 257 bytes, max 256");
	snprintf(buf, sizeof(buf), "{\"tenant\":\"%s\",\"network\":{}}", big);
	expect_fail(buf, "tenant", "too long");
	snprintf(buf, sizeof(buf), "{\"tenant\":\"t\",\"execution_id\":\"%s\",\"network\":{}}",
		 big);
	expect_fail(buf, "execution_id", "too long");
}

static void test_on_escape(void **state)
{
	struct egr_policy p;
	struct egr_error e;

	assert_int_equal(parse(with_net("\"outbound_allow\":[]"), &p, &e), 0);
	assert_int_equal(p.escape_alert, 0); /* default: kill */
	egr_policy_free(&p);
	assert_int_equal(parse(with_net("\"outbound_allow\":[],\"on_escape\":\"kill\""), &p, &e),
			 0);
	assert_int_equal(p.escape_alert, 0);
	egr_policy_free(&p);
	assert_int_equal(parse(with_net("\"outbound_allow\":[],\"on_escape\":\"alert\""), &p,
			       &e), 0);
	assert_int_equal(p.escape_alert, 1);
	egr_policy_free(&p);
	expect_fail(with_net("\"outbound_allow\":[],\"on_escape\":\"ignore\""),
		    "network.on_escape", "must be \"kill\" or \"alert\", not \"ignore\"");
	expect_fail(with_net("\"outbound_allow\":[],\"on_escape\":true"), "network.on_escape",
		    "must be \"kill\" or \"alert\"");
	expect_fail(with_net("\"outbound_allow\":[],\"on_escape\":\"Kill\""), "network.on_escape",
		    "must be");
}

static void test_entry_errors(void **state)
{
	/* The unspecified address is loopback to the kernel: say loopback. */
	expect_entry_fail("0.0.0.0:8080", "0.0.0.0 is not a destination");
	expect_entry_fail("0.0.0.0/32:*", "allow 127.0.0.1");
	expect_entry_fail("udp/0.0.0.0:53", "0.0.0.0 is not a destination");
	expect_entry_fail("[::]:8080", "[::] is not a destination");
	expect_entry_fail("[::/128]:443", "allow [::1]");
	expect_entry_fail("[::ffff:0.0.0.0]:80", "0.0.0.0 is not a destination");
	expect_allow_fail("{\"host\":\"0.0.0.0\",\"ports\":[80]}",
			  "network.outbound_allow[1].host", "0.0.0.0 is not a destination");
	expect_entry_fail("1.2.3.256:80", "bad IPv4 address \"1.2.3.256\"");
	expect_entry_fail("1.2.3:80", "bad IPv4 address");
	expect_entry_fail("01.2.3.4:80", "bad IPv4 address");
	expect_entry_fail("1.2.3.4.5:80", "bad IPv4 address");
	expect_entry_fail("10.0.0.0/33:80", "bad IPv4 prefix length");
	expect_entry_fail("10.0.0.0/:80", "bad IPv4 prefix length");
	expect_entry_fail("10.0.0.0/08:80", "bad IPv4 prefix length");
	expect_entry_fail("10.0.0.0/8/8:80", "bad IPv4 prefix length");
	expect_entry_fail("[::/129]:80", "bad IPv6 prefix length");
	expect_entry_fail("[2001:db8::g]:443", "bad IPv6 address \"2001:db8::g\"");
	expect_entry_fail("[1.2.3.4]:443", "bad IPv6 address");
	expect_entry_fail("[]:443", "bad IPv6 address");
	expect_entry_fail("[::1]", "missing \":PORT\"");
	expect_entry_fail("[::1]80", "missing \":PORT\"");
	expect_entry_fail("[::1:80", "missing ']'");
	expect_entry_fail("2001:db8::1:443", "must be in brackets");
	expect_entry_fail("::1:80", "must be in brackets");
	expect_entry_fail("1.2.3.4", "missing \":PORT\"");
	expect_entry_fail("1.2.3.4:70000", "bad port \"70000\"");
	expect_entry_fail("1.2.3.4:65536", "bad port");
	expect_entry_fail("1.2.3.4:9-1", "9 is greater than 1");
	expect_entry_fail("1.2.3.4:", "empty port");
	expect_entry_fail("1.2.3.4:-", "bad port range");
	expect_entry_fail("1.2.3.4:1-", "bad port range");
	expect_entry_fail("1.2.3.4:1-2-3", "bad port range");
	expect_entry_fail("1.2.3.4:080", "bad port");
	expect_entry_fail("1.2.3.4:http", "bad port \"http\"");
	expect_entry_fail("1.2.3.4:**", "bad port");
	expect_entry_fail("1.2.3.4:+1", "bad port");
	expect_entry_fail("sctp/1.2.3.4:80", "unknown protocol prefix \"sctp/\"");
	expect_entry_fail("TCP/1.2.3.4:80", "unknown protocol prefix \"TCP/\"");
	expect_entry_fail("tcp/udp/1.2.3.4:80", "bad host");
	expect_entry_fail("*.example.org:443", "wildcard \"*.example.org\" not allowed");
	expect_entry_fail("a..example.org:443", "bad DNS name \"a..example.org\": empty label");
	expect_entry_fail("-a.example.org:443", "starts or ends with '-'");
	expect_entry_fail("exa mple.org:443", "invalid character");
	expect_entry_fail(":443", "empty host");
	expect_entry_fail("", "empty entry");
	expect_entry_fail("host.example/8:443", "only IP addresses take a /prefix length");

	/* Object form. */
	expect_allow_fail("{\"host\":\"1.2.3.4\",\"ports\":[1,\"9-1\"]}",
			  "network.outbound_allow[1].ports[1]", "9 is greater than 1");
	expect_allow_fail("{\"host\":\"1.2.3.4\",\"ports\":[70000]}",
			  "network.outbound_allow[1].ports[0]", "70000");
	expect_allow_fail("{\"host\":\"1.2.3.4\",\"ports\":[-1]}",
			  "network.outbound_allow[1].ports[0]", "out of range");
	expect_allow_fail("{\"host\":\"1.2.3.4\",\"ports\":[80.5]}",
			  "network.outbound_allow[1].ports[0]", "a port is a number");
	expect_allow_fail("{\"host\":\"1.2.3.4\",\"ports\":[\"\"]}",
			  "network.outbound_allow[1].ports[0]", "empty port");
	expect_allow_fail("{\"host\":\"1.2.3.4\",\"ports\":[]}",
			  "network.outbound_allow[1].ports", "1 to 64");
	expect_allow_fail("{\"host\":\"1.2.3.4\"}", "network.outbound_allow[1].ports", "missing");
	expect_allow_fail("{\"ports\":[1]}", "network.outbound_allow[1].host", "missing");
	expect_allow_fail("{\"host\":5,\"ports\":[1]}", "network.outbound_allow[1].host",
			  "must be a string");
	expect_allow_fail("{\"host\":\"1.2.3.4:80\",\"ports\":[1]}",
			  "network.outbound_allow[1].host", "no \":PORT\"");
	expect_allow_fail("{\"host\":\"*.a.com\",\"ports\":[1]}",
			  "network.outbound_allow[1].host", "wildcard");
	expect_allow_fail("{\"host\":\"1.2.3.4\",\"ports\":[1],\"protocol\":\"sctp\"}",
			  "network.outbound_allow[1].protocol", "\"sctp\"");
	expect_allow_fail("{\"host\":\"1.2.3.4\",\"ports\":[1],\"protocol\":6}",
			  "network.outbound_allow[1].protocol", "\"tcp\", \"udp\" or \"any\"");
}

static void test_dns_errors(void **state)
{
	char label[64], buf[1024];

	expect_fail(with_net("\"outbound_allow\":[],\"dns_allow\":[\"ok.com\",\"a..b\"]"),
		    "network.dns_allow[1]", "bad DNS name \"a..b\": empty label");
	expect_fail(with_net("\"outbound_allow\":[],\"dns_allow\":[\"a.*.com\"]"),
		    "network.dns_allow[0]", "'*' only as a leading");
	expect_fail(with_net("\"outbound_allow\":[],\"dns_allow\":[\"*\"]"),
		    "network.dns_allow[0]", "bad DNS name");
	expect_fail(with_net("\"outbound_allow\":[],\"dns_allow\":[\"*.\"]"),
		    "network.dns_allow[0]", "bad DNS name");
	expect_fail(with_net("\"outbound_allow\":[],\"dns_allow\":[\"a-.com\"]"),
		    "network.dns_allow[0]", "'-'");
	expect_fail(with_net("\"outbound_allow\":[],\"dns_allow\":[\"\"]"),
		    "network.dns_allow[0]", "empty name");
	expect_fail(with_net("\"outbound_allow\":[],\"dns_allow\":[\"10.0.0.1\"]"),
		    "network.dns_allow[0]", "all digits");
	memset(label, 'a', 63);
	label[63] = '\0';
	snprintf(buf, sizeof(buf), "\"outbound_allow\":[],\"dns_allow\":[\"%sa.com\"]", label);
	expect_fail(with_net("%s", buf), "network.dns_allow[0]", "longer than 63");
	snprintf(buf, sizeof(buf), "\"outbound_allow\":[],\"dns_allow\":[\"%s.%s.%s.%s\"]", label,
		 label, label, label);
	expect_fail(with_net("%s", buf), "network.dns_allow[0]", "longer than 253");

	/* Normalised on success. */
	{
		struct egr_policy p;
		struct egr_error e;

		assert_int_equal(parse(with_net("\"outbound_allow\":[],\"dns_allow\":["
						"\"WWW.Example.COM.\",\"*.Example.Org\"]"),
				       &p, &e),
				 0);
		assert_int_equal(p.ndns, 2);
		assert_string_equal(p.dns_allow[0], "www.example.com");
		assert_string_equal(p.dns_allow[1], "*.example.org");
		egr_policy_free(&p);
	}
}

static void test_json_errors(void **state)
{
	struct egr_policy p;
	struct egr_error e;

	expect_fail("{\"tenant\":\"a\",\"tenant\":\"b\",\"network\":{}}", "", "duplicate");
	expect_fail(with_net("\"outbound_allow\":[],\"inbound\":\"deny\",\"inbound\":\"allow\""),
		    "", "duplicate");
	expect_fail("{\"tenant\":\"t\",\n \"network\": {,}}", "", "line 2");
	expect_fail("{\"tenant\":\"t\",", "", "invalid JSON");
	expect_fail("", "", "invalid JSON");
	expect_fail("{\"tenant\":\"t\\u0000x\",\"network\":{}}", "", "invalid JSON");

	/* An embedded NUL (possible through the json_t API) is refused, not truncated. */
	{
		json_t *root = json_pack("{s:s%,s:{s:s,s:[]}}", "tenant", "a\0b", (size_t)3,
					 "network", "default", "deny", "outbound_allow");

		assert_non_null(root);
		memset(&e, 0, sizeof(e));
		assert_int_equal(egr_policy_from_json(root, &p, &e), -EINVAL);
		assert_string_equal(e.field, "tenant");
		assert_zeroed(&p);
		json_decref(root);

		root = json_pack("{s:s,s:{s:s,s:[s%]}}", "tenant", "t", "network", "default",
				 "deny", "outbound_allow", "1.2.3.4:80\0x", (size_t)12);
		assert_non_null(root);
		assert_int_equal(egr_policy_from_json(root, &p, &e), -EINVAL);
		assert_string_equal(e.field, "network.outbound_allow[0]");
		assert_non_null(strstr(e.message, "NUL"));
		json_decref(root);
	}
	assert_int_equal(egr_policy_from_json(NULL, &p, &e), -EINVAL);
	assert_int_equal(egr_policy_parse(NULL, 0, &p, &e), -EINVAL);
}

/* A policy whose array `key` (in network) holds n copies of item. */
static json_t *big_policy(const char *key, size_t n, const char *item)
{
	json_t *root = json_pack("{s:s,s:{s:s,s:[]}}", "tenant", "t", "network", "default",
				 "deny", "outbound_allow");
	json_t *net = json_object_get(root, "network"), *arr = json_array(), *s = json_string(item);
	size_t i;

	for (i = 0; i < n; i++)
		json_array_append(arr, s);
	json_decref(s);
	json_object_set_new(net, key, arr);
	return root;
}

static void test_oversized(void **state)
{
	struct egr_policy p;
	struct egr_error e;
	json_t *root, *ports, *obj;
	size_t i;

	root = big_policy("outbound_allow", EGR_POLICY_MAX_ALLOW + 1, "1.2.3.4:80");
	assert_int_equal(egr_policy_from_json(root, &p, &e), -EINVAL);
	assert_string_equal(e.field, "network.outbound_allow");
	assert_non_null(strstr(e.message, "too many entries: 1048577, max 1048576"));
	assert_zeroed(&p);
	json_decref(root);

	root = big_policy("dns_allow", EGR_POLICY_MAX_DNS + 1, "a.com");
	assert_int_equal(egr_policy_from_json(root, &p, &e), -EINVAL);
	assert_string_equal(e.field, "network.dns_allow");
	assert_non_null(strstr(e.message, "max 4096"));
	json_decref(root);

	root = big_policy("dns_allow", EGR_POLICY_MAX_DNS, "a.com");
	assert_int_equal(egr_policy_from_json(root, &p, &e), 0);
	assert_int_equal(p.ndns, EGR_POLICY_MAX_DNS);
	egr_policy_free(&p);
	json_decref(root);

	ports = json_array();
	for (i = 0; i < EGR_POLICY_MAX_PORTS + 1; i++)
		json_array_append_new(ports, json_integer((json_int_t)i));
	obj = json_pack("{s:s,s:o}", "host", "1.2.3.4", "ports", ports);
	root = json_pack("{s:s,s:{s:s,s:[o]}}", "tenant", "t", "network", "default", "deny",
			 "outbound_allow", obj);
	assert_int_equal(egr_policy_from_json(root, &p, &e), -EINVAL);
	assert_string_equal(e.field, "network.outbound_allow[0].ports");
	json_array_remove(ports, 0);
	assert_int_equal(egr_policy_from_json(root, &p, &e), 0);
	assert_int_equal(p.nallow, EGR_POLICY_MAX_PORTS);
	egr_policy_free(&p);
	json_decref(root);

	/* Object-form expansion counts against the limit too. */
	root = big_policy("outbound_allow", EGR_POLICY_MAX_ALLOW - 1, "1.2.3.4:80");
	obj = json_pack("{s:s,s:[i,i]}", "host", "1.2.3.4", "ports", 1, 2);
	json_array_append_new(json_object_get(json_object_get(root, "network"), "outbound_allow"),
			      obj);
	assert_int_equal(egr_policy_from_json(root, &p, &e), -EINVAL);
	assert_string_equal(e.field, "network.outbound_allow[1048575].ports[1]");
	assert_non_null(strstr(e.message, "in total"));
	assert_zeroed(&p);
	json_decref(root);

	/* An overlong entry string is quoted truncated. */
	{
		char entry[600];

		memset(entry, 'a', sizeof(entry) - 1);
		entry[sizeof(entry) - 1] = '\0';
		expect_entry_fail(entry, "too long");
		assert_int_equal(egr_allow_parse(entry, &(struct egr_allow){ 0 }, &e), -EINVAL);
		assert_true(strlen(e.message) < sizeof(e.message) - 1);
		assert_non_null(strstr(e.message, "aaaa\"..."));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_example),
		cmocka_unit_test(test_check_json_no_hash),
		cmocka_unit_test(test_sha256),
		cmocka_unit_test(test_optional_fields),
		cmocka_unit_test(test_allow_forms),
		cmocka_unit_test(test_mapped_ipv6),
		cmocka_unit_test(test_object_form),
		cmocka_unit_test(test_dns_normalize),
		cmocka_unit_test(test_structure_errors),
		cmocka_unit_test(test_string_errors),
		cmocka_unit_test(test_entry_errors),
		cmocka_unit_test(test_on_escape),
		cmocka_unit_test(test_dns_errors),
		cmocka_unit_test(test_json_errors),
		cmocka_unit_test(test_oversized),
	};

	return cmocka_run_group_tests_name("policy", tests, NULL, NULL);
}
