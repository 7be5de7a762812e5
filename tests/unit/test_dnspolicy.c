// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* DNS policy matching and exfiltration scoring: user/lib/dnspolicy.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "dnspolicy.h"
#include "dnswire.h"
#include "policy.h"

#define SEC 1000000000ULL

static const char policy_json[] =
	"{\"tenant\": \"acme\", \"network\": {\"default\": \"deny\","
	" \"outbound_allow\": [\"api.example.com:443\", \"tcp/api.example.com:8080\","
	"   \"udp/api.example.com:8080\", \"udp/api.example.com:53\", \"x.example.org:80\","
	"   \"10.0.0.0/8:22\"],"
	" \"dns_allow\": [\"Foo.Example.NET.\", \"*.example.org\", \"*.deep.example.org\"]}}";

static struct egr_dnspolicy *compile(const char *json, const uint16_t *qt, size_t nqt)
{
	struct egr_policy p;
	struct egr_error e;
	struct egr_dnspolicy *pol = NULL;

	assert_int_equal(egr_policy_parse(json, strlen(json), &p, &e), 0);
	assert_int_equal(egr_dnspolicy_new(&p, qt, nqt, &pol, &e), 0);
	egr_policy_free(&p);
	assert_non_null(pol);
	return pol;
}

static void test_exact_case_dot(void **state)
{
	struct egr_dnspolicy *pol = compile(policy_json, NULL, 0);
	struct egr_dnspolicy_match m;

	assert_int_equal(egr_dnspolicy_nexact(pol), 3); /* foo, api, x */
	assert_int_equal(egr_dnspolicy_nwild(pol), 2);
	assert_int_equal(egr_dnspolicy_match(pol, "foo.example.net", &m), 1);
	assert_int_equal(m.ports.nranges, 0); /* dns_allow only: resolvable only */
	assert_true(m.exact);
	assert_false(m.wildcard);
	assert_string_equal(m.domain, "foo.example.net");
	assert_int_equal(egr_dnspolicy_match(pol, "FOO.example.Net.", &m), 1);
	assert_int_equal(egr_dnspolicy_match(pol, "bar.example.net", &m), 0);
	assert_int_equal(egr_dnspolicy_match(pol, "example.net", &m), 0);
	assert_int_equal(egr_dnspolicy_match(pol, "oo.example.net", &m), 0);
	assert_int_equal(egr_dnspolicy_match(pol, "foo.example.net.evil.com", &m), 0);
	assert_int_equal(egr_dnspolicy_match(pol, "", &m), 0);
	assert_int_equal(egr_dnspolicy_match(pol, ".", &m), 0);
	assert_int_equal(egr_dnspolicy_match(NULL, "a", &m), -EINVAL);
	assert_int_equal(egr_dnspolicy_match(pol, NULL, &m), -EINVAL);
	egr_dnspolicy_free(pol);
}

static void test_outbound_names_ports(void **state)
{
	struct egr_dnspolicy *pol = compile(policy_json, NULL, 0);
	struct egr_dnspolicy_match m;

	assert_int_equal(egr_dnspolicy_match(pol, "Api.Example.com.", &m), 1);
	assert_true(m.exact);
	/* udp 53, any 443, any 8080 (tcp and udp entries merged) */
	assert_int_equal(m.ports.nranges, 3);
	assert_int_equal(m.ports.ranges[0].lo, 53);
	assert_int_equal(m.ports.ranges[0].hi, 53);
	assert_int_equal(m.ports.ranges[0].protos, EGR_PROTO_UDP);
	assert_int_equal(m.ports.ranges[1].lo, 443);
	assert_int_equal(m.ports.ranges[1].protos, EGR_PROTO_ANY);
	assert_int_equal(m.ports.ranges[2].lo, 8080);
	assert_int_equal(m.ports.ranges[2].hi, 8080);
	assert_int_equal(m.ports.ranges[2].protos, EGR_PROTO_ANY);
	/* x.example.org: exact outbound name and under a wildcard */
	assert_int_equal(egr_dnspolicy_match(pol, "x.example.org", &m), 1);
	assert_true(m.exact && m.wildcard);
	assert_int_equal(m.ports.nranges, 1);
	assert_int_equal(m.ports.ranges[0].lo, 80);
	assert_string_equal(m.domain, "example.org");
	/* an address entry does not make anything resolvable */
	assert_int_equal(egr_dnspolicy_match(pol, "10.0.0.1", &m), 0);
	egr_dnspolicy_free(pol);
}

static void test_wildcard_depth(void **state)
{
	struct egr_dnspolicy *pol = compile(policy_json, NULL, 0);
	struct egr_dnspolicy_match m;

	assert_int_equal(egr_dnspolicy_match(pol, "example.org", &m), 0); /* apex */
	assert_int_equal(egr_dnspolicy_match(pol, "example.org.", &m), 0);
	assert_int_equal(egr_dnspolicy_match(pol, "a.example.org", &m), 1);
	assert_true(m.wildcard);
	assert_false(m.exact);
	assert_int_equal(m.ports.nranges, 0);
	assert_string_equal(m.domain, "example.org");
	assert_int_equal(egr_dnspolicy_match(pol, "A.B.C.Example.ORG.", &m), 1);
	assert_string_equal(m.domain, "example.org");
	/* the broadest wildcard is the exfil domain */
	assert_int_equal(egr_dnspolicy_match(pol, "z.deep.example.org", &m), 1);
	assert_string_equal(m.domain, "example.org");
	assert_int_equal(egr_dnspolicy_match(pol, "notexample.org", &m), 0);
	assert_int_equal(egr_dnspolicy_match(pol, "a.example.org.evil", &m), 0);
	assert_int_equal(egr_dnspolicy_match(pol, "org", &m), 0);
	assert_int_equal(egr_dnspolicy_match(pol, "a.example.org", NULL), 1);
	egr_dnspolicy_free(pol);
}

static void test_qtypes(void **state)
{
	struct egr_dnspolicy *pol = compile(policy_json, NULL, 0);
	static const uint16_t extra[] = { EGR_DNS_T_A, EGR_DNS_T_TXT };

	assert_true(egr_dnspolicy_qtype_allowed(pol, EGR_DNS_T_A));
	assert_true(egr_dnspolicy_qtype_allowed(pol, EGR_DNS_T_AAAA));
	assert_true(egr_dnspolicy_qtype_allowed(pol, EGR_DNS_T_CNAME));
	assert_true(egr_dnspolicy_qtype_allowed(pol, EGR_DNS_T_HTTPS));
	assert_true(egr_dnspolicy_qtype_allowed(pol, EGR_DNS_T_SVCB));
	assert_false(egr_dnspolicy_qtype_allowed(pol, EGR_DNS_T_TXT));
	assert_false(egr_dnspolicy_qtype_allowed(pol, EGR_DNS_T_NULL));
	assert_false(egr_dnspolicy_qtype_allowed(pol, EGR_DNS_T_ANY));
	assert_false(egr_dnspolicy_qtype_allowed(pol, EGR_DNS_T_MX));
	egr_dnspolicy_free(pol);

	pol = compile(policy_json, extra, 2);
	assert_true(egr_dnspolicy_qtype_allowed(pol, EGR_DNS_T_TXT));
	assert_true(egr_dnspolicy_qtype_allowed(pol, EGR_DNS_T_A));
	assert_false(egr_dnspolicy_qtype_allowed(pol, EGR_DNS_T_AAAA));
	egr_dnspolicy_free(pol);
}

static void test_too_many_ranges(void **state)
{
	static const char json[] =
		"{\"tenant\": \"acme\", \"network\": {\"default\": \"deny\","
		" \"outbound_allow\": [\"a.test:1\", \"a.test:3\", \"a.test:5\", \"a.test:7\","
		" \"a.test:9\", \"a.test:11\", \"a.test:13\", \"a.test:15\", \"a.test:17\"]}}";
	struct egr_dnspolicy *pol = (void *)1;
	struct egr_policy p;
	struct egr_error e;

	assert_int_equal(egr_policy_parse(json, strlen(json), &p, &e), 0);
	assert_int_equal(egr_dnspolicy_new(&p, NULL, 0, &pol, &e), -EINVAL);
	assert_null(pol);
	assert_string_equal(e.field, "network.outbound_allow[0]");
	egr_policy_free(&p);
}

/* --- exfil ------------------------------------------------------------------ */

static struct egr_exfil *tracker(struct egr_exfil_limits *l)
{
	struct egr_exfil *t = NULL;

	egr_exfil_limits_default(l);
	assert_int_equal(egr_exfil_new(l, &t), 0);
	return t;
}

static int check(struct egr_exfil *t, const char *name, const char *dom, uint64_t now,
		 enum egr_exfil_reason *r)
{
	return egr_exfil_check(t, name, dom, now, r);
}

static void test_lengths(void **state)
{
	struct egr_exfil_limits l;
	struct egr_exfil *t = tracker(&l);
	enum egr_exfil_reason r;
	char name[300], label[64];

	memset(label, 'a', 52);
	label[52] = '\0';
	snprintf(name, sizeof(name), "%s.example.org", label);
	assert_int_equal(check(t, name, "example.org", SEC, &r), 0);
	memset(label, 'a', 53);
	label[53] = '\0';
	snprintf(name, sizeof(name), "%s.example.org", label);
	assert_int_equal(check(t, name, "example.org", SEC, &r), -EPERM);
	assert_int_equal(r, EGR_EXFIL_LABEL_LEN);
	assert_string_equal(egr_exfil_reason_name(r), "label length");

	/* 45 labels "abc." = 180 characters: fine; one more: too long */
	name[0] = '\0';
	for (int i = 0; i < 44; i++)
		strcat(name, "abc.");
	strcat(name, "exa");
	assert_int_equal(strlen(name), 179);
	assert_int_equal(check(t, name, NULL, SEC, &r), 0);
	strcat(name, "m");
	assert_int_equal(check(t, name, NULL, SEC, &r), 0);
	strcat(name, "p");
	assert_int_equal(check(t, name, NULL, SEC, &r), -EPERM);
	assert_int_equal(r, EGR_EXFIL_NAME_LEN);
	egr_exfil_free(t);
}

static void test_entropy(void **state)
{
	static const char *const ok[] = {
		"api", "www", "cdn-eu-west-1", "kubernetes-dashboard-prod",
		"my-loadbalancer-1234567890", "internationalization",
		"storageaccountwesteurope", "the-quick-brown-fox-jumps-over",
		"ip-10-0-12-34-us-west-2-compute", "s3-website-us-east-1-amazonaws",
	};
	static const char *const bad[] = {
		"mfrggzdfmztwq2lknnwg23tpobyxe43u",       /* base32, 32 chars */
		"onswg4tfoqqgi2lsmvrxi2lwmuqhi3zamfrg",   /* base32, 36 chars */
		"5f4dcc3b5aa765d61d8327deb882cf99",       /* hex (md5), 32 chars */
		"9c56cc51b374c3ba189210d5b6d4bf57790d",   /* hex, 36 chars */
		"x7k2p9q4m1z8w3v6b5n0c4j7h2g9f1d",      /* base36, 31 chars */
	};
	struct egr_exfil_limits l;
	struct egr_exfil *t = tracker(&l);
	enum egr_exfil_reason r;
	char name[300];

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		if (egr_exfil_label_suspicious(&l, ok[i], strlen(ok[i])))
			fail_msg("\"%s\" (entropy %.2f) flagged", ok[i],
				 egr_dns_label_entropy(ok[i], strlen(ok[i])));
		snprintf(name, sizeof(name), "%s.example.org", ok[i]);
		assert_int_equal(check(t, name, "example.org", SEC, &r), 0);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (!egr_exfil_label_suspicious(&l, bad[i], strlen(bad[i])))
			fail_msg("\"%s\" (entropy %.2f) not flagged", bad[i],
				 egr_dns_label_entropy(bad[i], strlen(bad[i])));
		snprintf(name, sizeof(name), "%s.example.org", bad[i]);
		assert_int_equal(check(t, name, "example.org", SEC, &r), -EPERM);
		assert_int_equal(r, EGR_EXFIL_ENTROPY);
	}
	/* short labels are never judged by entropy */
	assert_false(egr_exfil_label_suspicious(&l, "x7k2p9q4m1z8w3v6b5n", 19));
	/* max_entropy 0 disables the check */
	l.max_entropy = 0;
	assert_false(egr_exfil_label_suspicious(&l, bad[0], strlen(bad[0])));
	egr_exfil_free(t);
}

static void test_subdomain_burst(void **state)
{
	struct egr_exfil_limits l;
	struct egr_exfil *t = tracker(&l);
	enum egr_exfil_reason r;
	char name[64];

	for (int i = 0; i < 50; i++) {
		snprintf(name, sizeof(name), "h%d.example.org", i);
		assert_int_equal(check(t, name, "example.org", SEC + (uint64_t)i * SEC / 10, &r),
				 0);
	}
	/* the 51st distinct name within the minute is refused */
	assert_int_equal(check(t, "h50.example.org", "example.org", 10 * SEC, &r), -EPERM);
	assert_int_equal(r, EGR_EXFIL_SUBDOMAINS);
	/* names already seen stay fine, and other domains are separate */
	assert_int_equal(check(t, "h7.example.org", "example.org", 10 * SEC, &r), 0);
	assert_int_equal(check(t, "H7.Example.org", "example.org", 10 * SEC, &r), 0);
	assert_int_equal(check(t, "h50.other.org", "other.org", 10 * SEC, &r), 0);
	/* the window slides: at 61.05 s h0 (seen at 1 s) has left it... */
	assert_int_equal(check(t, "h50.example.org", "example.org", 61 * SEC + SEC / 20, &r),
			 0);
	/* ...but only h0 (h1 at 1.1 s is still in): the next new one is refused */
	assert_int_equal(check(t, "h51.example.org", "example.org", 61 * SEC + SEC / 20, &r),
			 -EPERM);
	/* h7 was refreshed at 10 s; at 71 s everything but h50 is gone */
	for (int i = 0; i < 49; i++) {
		snprintf(name, sizeof(name), "n%d.example.org", i);
		assert_int_equal(check(t, name, "example.org", 71 * SEC, &r), 0);
	}
	assert_int_equal(check(t, "n49.example.org", "example.org", 71 * SEC, &r), -EPERM);
	egr_exfil_free(t);
}

static void test_domain_lru(void **state)
{
	struct egr_exfil_limits l;
	struct egr_exfil *t;
	enum egr_exfil_reason r;
	char name[64], dom[64];

	egr_exfil_limits_default(&l);
	l.max_domains = 4;
	l.max_subdomains = 2;
	assert_int_equal(egr_exfil_new(&l, &t), 0);
	for (int d = 0; d < 10; d++) {
		snprintf(dom, sizeof(dom), "d%d.org", d);
		for (int i = 0; i < 2; i++) {
			snprintf(name, sizeof(name), "h%d.d%d.org", i, d);
			assert_int_equal(check(t, name, dom, SEC + (uint64_t)d, &r), 0);
		}
		snprintf(name, sizeof(name), "h9.d%d.org", d);
		assert_int_equal(check(t, name, dom, SEC + (uint64_t)d, &r), -EPERM);
	}
	egr_exfil_free(t);
}

static void test_nxdomain_rate(void **state)
{
	struct egr_exfil_limits l;
	struct egr_exfil *t = tracker(&l);
	enum egr_exfil_reason r;

	for (int i = 0; i < 29; i++)
		egr_exfil_note_rcode(t, "x.example.org", EGR_DNS_R_NXDOMAIN, SEC + (uint64_t)i);
	/* other rcodes do not count */
	egr_exfil_note_rcode(t, "x.example.org", EGR_DNS_R_NOERROR, SEC);
	egr_exfil_note_rcode(t, "x.example.org", EGR_DNS_R_SERVFAIL, SEC);
	assert_int_equal(check(t, "a.example.org", "example.org", 2 * SEC, &r), 0);
	egr_exfil_note_rcode(t, "x.example.org", EGR_DNS_R_NXDOMAIN, 30 * SEC);
	assert_int_equal(check(t, "a.example.org", "example.org", 31 * SEC, &r), -EPERM);
	assert_int_equal(r, EGR_EXFIL_NXDOMAIN);
	/* 29 of them leave the window after 61 s */
	assert_int_equal(check(t, "a.example.org", "example.org", 61 * SEC + 100, &r), 0);
	egr_exfil_free(t);
}

/* --- rebinding -------------------------------------------------------------- */

struct rebind_case {
	const char *addr;
	enum egr_rebind_class cls;
	enum egr_rebind_form form;
};

static void classify_text(const char *text, struct egr_rebind_verdict *v)
{
	uint8_t a[16] = { 0 };
	int fam = strchr(text, ':') ? AF_INET6 : AF_INET;

	assert_int_equal(inet_pton(fam, text, a), 1);
	egr_rebind_classify(fam, a, v);
}

static void test_rebind_classify(void **state)
{
	static const struct rebind_case cases[] = {
		{ "127.0.0.1", EGR_REBIND_LOOPBACK, EGR_REBIND_NATIVE },
		{ "127.255.255.254", EGR_REBIND_LOOPBACK, EGR_REBIND_NATIVE },
		{ "0.0.0.0", EGR_REBIND_UNSPECIFIED, EGR_REBIND_NATIVE },
		{ "0.1.2.3", EGR_REBIND_UNSPECIFIED, EGR_REBIND_NATIVE },
		{ "169.254.169.254", EGR_REBIND_LINK_LOCAL, EGR_REBIND_NATIVE },
		{ "224.0.0.1", EGR_REBIND_MULTICAST, EGR_REBIND_NATIVE },
		{ "239.255.255.250", EGR_REBIND_MULTICAST, EGR_REBIND_NATIVE },
		{ "255.255.255.255", EGR_REBIND_BROADCAST, EGR_REBIND_NATIVE },
		{ "10.1.2.3", EGR_REBIND_PRIVATE, EGR_REBIND_NATIVE },
		{ "172.16.0.1", EGR_REBIND_PRIVATE, EGR_REBIND_NATIVE },
		{ "172.31.255.255", EGR_REBIND_PRIVATE, EGR_REBIND_NATIVE },
		{ "192.168.1.1", EGR_REBIND_PRIVATE, EGR_REBIND_NATIVE },
		{ "100.64.0.1", EGR_REBIND_PRIVATE, EGR_REBIND_NATIVE },
		{ "100.127.255.255", EGR_REBIND_PRIVATE, EGR_REBIND_NATIVE },
		/* just outside */
		{ "172.15.255.255", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "172.32.0.0", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "100.63.255.255", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "100.128.0.0", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "169.253.255.255", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "192.169.0.1", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "11.0.0.1", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "126.255.255.255", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "128.0.0.0", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "223.255.255.255", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "255.255.255.254", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "93.184.216.34", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		/* IANA special-purpose, not globally reachable, and the edges */
		{ "192.0.0.0", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "192.0.0.8", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "192.0.0.9", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "192.0.0.10", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "192.0.0.11", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "192.0.0.255", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "191.255.255.255", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "192.0.1.0", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "192.0.2.0", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "192.0.2.255", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "192.0.3.0", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "198.17.255.255", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "198.18.0.0", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "198.19.255.255", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "198.20.0.0", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "198.51.99.255", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "198.51.100.0", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "198.51.100.255", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "198.51.101.0", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "203.0.112.255", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "203.0.113.0", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "203.0.113.255", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "203.0.114.0", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "239.255.255.255", EGR_REBIND_MULTICAST, EGR_REBIND_NATIVE },
		{ "240.0.0.0", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "240.0.0.1", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		/* IPv6 */
		{ "::", EGR_REBIND_UNSPECIFIED, EGR_REBIND_NATIVE },
		{ "::1", EGR_REBIND_LOOPBACK, EGR_REBIND_NATIVE },
		{ "fe80::1", EGR_REBIND_LINK_LOCAL, EGR_REBIND_NATIVE },
		{ "febf::1", EGR_REBIND_LINK_LOCAL, EGR_REBIND_NATIVE },
		{ "fec0::1", EGR_REBIND_PRIVATE, EGR_REBIND_NATIVE },
		{ "ff02::1", EGR_REBIND_MULTICAST, EGR_REBIND_NATIVE },
		{ "fc00::1", EGR_REBIND_PRIVATE, EGR_REBIND_NATIVE },
		{ "fd12:3456::1", EGR_REBIND_PRIVATE, EGR_REBIND_NATIVE },
		{ "64:ff9b:1::a", EGR_REBIND_PRIVATE, EGR_REBIND_NATIVE },
		{ "fe00::1", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "fbff::1", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "2001:db8::1", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "2001:db9::", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "100::", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "100::ffff:ffff:ffff:ffff", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "100:0:0:1::", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "101::", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "2001:1::", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "2001:1::1", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "2001:1::3", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "2001:1::4", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "2001:2::", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "2001:2:0:ffff::1", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "2001:3::1", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "2001:4:112::1", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "2001:4:113::1", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "2001:10::1", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "2001:1f::1", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "2001:20::1", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "2001:3f::1", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "2001:40::1", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "2001:200::", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "3fff::1", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "3fff:fff:ffff::1", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "3fff:1000::1", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "3ffe:ffff::1", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "5f00::1", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "5f00:ffff::1", EGR_REBIND_RESERVED, EGR_REBIND_NATIVE },
		{ "5f01::1", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "5eff:ffff::1", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		{ "2606:4700::1111", EGR_REBIND_NONE, EGR_REBIND_NATIVE },
		/* embedded IPv4 */
		{ "::ffff:127.0.0.1", EGR_REBIND_LOOPBACK, EGR_REBIND_V4MAPPED },
		{ "::ffff:0.0.0.0", EGR_REBIND_UNSPECIFIED, EGR_REBIND_V4MAPPED },
		{ "::ffff:169.254.169.254", EGR_REBIND_LINK_LOCAL, EGR_REBIND_V4MAPPED },
		{ "::ffff:10.0.0.1", EGR_REBIND_PRIVATE, EGR_REBIND_V4MAPPED },
		{ "::ffff:93.184.216.34", EGR_REBIND_NONE, EGR_REBIND_V4MAPPED },
		{ "::ffff:198.51.100.7", EGR_REBIND_RESERVED, EGR_REBIND_V4MAPPED },
		{ "64:ff9b::240.0.0.1", EGR_REBIND_RESERVED, EGR_REBIND_NAT64 },
		{ "::127.0.0.1", EGR_REBIND_LOOPBACK, EGR_REBIND_V4COMPAT },
		{ "::2", EGR_REBIND_UNSPECIFIED, EGR_REBIND_V4COMPAT },
		{ "::93.184.216.34", EGR_REBIND_NONE, EGR_REBIND_V4COMPAT },
		{ "::ffff:0:192.168.0.1", EGR_REBIND_PRIVATE, EGR_REBIND_V4TRANSLATED },
		{ "64:ff9b::127.0.0.1", EGR_REBIND_LOOPBACK, EGR_REBIND_NAT64 },
		{ "64:ff9b::a9fe:a9fe", EGR_REBIND_LINK_LOCAL, EGR_REBIND_NAT64 },
		{ "64:ff9b::93.184.216.34", EGR_REBIND_NONE, EGR_REBIND_NAT64 },
		{ "2002:7f00:1::", EGR_REBIND_LOOPBACK, EGR_REBIND_6TO4 },
		{ "2002:a00:1:5::1", EGR_REBIND_PRIVATE, EGR_REBIND_6TO4 },
		{ "2002:5db8:d822::1", EGR_REBIND_NONE, EGR_REBIND_6TO4 },
		{ "2002:c633:6407::1", EGR_REBIND_RESERVED, EGR_REBIND_6TO4 },
		/* Teredo: client 127.0.0.1 stored as ~ = 80ff:fffe */
		{ "2001:0:4136:e378:8000:63bf:80ff:fffe", EGR_REBIND_LOOPBACK, EGR_REBIND_TEREDO },
		{ "2001:0:4136:e378:8000:63bf:a247:27dd", EGR_REBIND_NONE, EGR_REBIND_TEREDO },
		{ "2001:0:4136:e378:8000:63bf:39cc:9bf8", EGR_REBIND_RESERVED, EGR_REBIND_TEREDO },
	};
	struct egr_rebind_verdict v;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		classify_text(cases[i].addr, &v);
		if (v.cls != cases[i].cls || v.form != cases[i].form)
			fail_msg("%s: class %s form %s, want %s %s", cases[i].addr,
				 egr_rebind_class_name(v.cls), egr_rebind_form_name(v.form),
				 egr_rebind_class_name(cases[i].cls),
				 egr_rebind_form_name(cases[i].form));
	}
	classify_text("::ffff:10.1.2.3", &v);
	assert_memory_equal(v.v4, "\x0a\x01\x02\x03", 4);
	assert_int_equal(egr_rebind_classify(AF_UNIX, (const uint8_t *)"\x7f\0\0\1", NULL),
			 EGR_REBIND_NONE);
	assert_int_equal(egr_rebind_classify(AF_INET, NULL, NULL), EGR_REBIND_NONE);
	assert_string_equal(egr_rebind_class_name(EGR_REBIND_LINK_LOCAL), "link-local");
	assert_string_equal(egr_rebind_form_name(EGR_REBIND_V4MAPPED), "ipv4-mapped");
}

static bool blocked(const struct egr_dnspolicy *pol, const char *text)
{
	uint8_t a[16] = { 0 };
	int fam = strchr(text, ':') ? AF_INET6 : AF_INET;

	assert_int_equal(inet_pton(fam, text, a), 1);
	return egr_dnspolicy_rebind_blocked(pol, fam, a, NULL);
}

static void test_rebind_allow(void **state)
{
	struct egr_dnspolicy *none = compile(policy_json, NULL, 0);
	struct egr_dnspolicy *pol = compile(
		"{\"tenant\": \"acme\", \"network\": {\"default\": \"deny\", \"outbound_allow\": [],"
		" \"dns_rebind_allow\": [\"10.0.0.0/8\", \"127.0.0.53\", \"fd00::/8\","
		" \"[fe80::/64]\", \"2002:7f00::/24\"]}}", NULL, 0);

	assert_int_equal(egr_dnspolicy_nrebind(none), 0);
	assert_int_equal(egr_dnspolicy_nrebind(pol), 5);
	/* Without exceptions every such address is blocked, global ones never. */
	assert_true(blocked(none, "127.0.0.1"));
	assert_true(blocked(none, "10.1.2.3"));
	assert_true(blocked(none, "::ffff:127.0.0.1"));
	assert_true(blocked(NULL, "169.254.169.254"));
	assert_false(blocked(none, "93.184.216.34"));
	assert_false(blocked(none, "2606:4700::1111"));
	assert_false(blocked(NULL, "1.1.1.1"));
	assert_true(blocked(none, "198.51.100.7"));
	assert_true(blocked(none, "2001:db8::1"));
	assert_true(blocked(NULL, "240.0.0.1"));
	/* Covered ones pass, in every form that embeds them. */
	assert_false(blocked(pol, "10.1.2.3"));
	assert_false(blocked(pol, "::ffff:10.1.2.3"));
	assert_false(blocked(pol, "64:ff9b::10.1.2.3"));
	assert_false(blocked(pol, "2002:a01:203::1"));
	assert_false(blocked(pol, "127.0.0.53"));
	assert_true(blocked(pol, "127.0.0.1"));
	assert_true(blocked(pol, "::ffff:127.0.0.1"));
	assert_false(blocked(pol, "fd12::1"));
	assert_true(blocked(pol, "fc12::1"));
	assert_false(blocked(pol, "fe80::1"));
	assert_true(blocked(pol, "fe80:0:0:1::1"));
	/* an IPv6 CIDR covers the IPv6 form itself (2002:7f00::/24 = 6to4 of 127/8) */
	assert_false(blocked(pol, "2002:7f00:1::"));
	assert_true(blocked(pol, "::1"));
	assert_true(blocked(pol, "192.168.0.1"));
	/* an IPv4 CIDR never covers a native IPv6 address */
	assert_true(blocked(pol, "::"));
	egr_dnspolicy_free(none);
	egr_dnspolicy_free(pol);
}

/* A fake local-address set: 93.184.216.34 and 2606:4700::1111 are "ours". */
static int local_calls;
static bool fake_local(void *ctx, int family, const uint8_t *a)
{
	static const uint8_t v4[4] = { 93, 184, 216, 34 };
	static const uint8_t v6[16] = { 0x26, 0x06, 0x47, 0, [14] = 0x11, [15] = 0x11 };

	local_calls++;
	assert_ptr_equal(ctx, &local_calls);
	return family == AF_INET ? !memcmp(a, v4, 4) : !memcmp(a, v6, 16);
}

static bool blocked_local(const struct egr_dnspolicy *pol, const char *text,
			  enum egr_rebind_class *cls)
{
	uint8_t a[16] = { 0 };
	int fam = strchr(text, ':') ? AF_INET6 : AF_INET;
	struct egr_rebind_verdict v;
	bool b;

	assert_int_equal(inet_pton(fam, text, a), 1);
	b = egr_dnspolicy_rebind_blocked_local(pol, fam, a, fake_local, &local_calls, &v);
	*cls = v.cls;
	return b;
}

/* What makes a dns_rebind alert critical (user/lib/rebind_target.c). */
static void test_rebind_targets_host(void **state)
{
	static const struct {
		const char *addr;
		bool host;
	} cases[] = {
		{ "127.0.0.1", true },       { "0.0.0.0", true },         { "169.254.169.254", true },
		{ "::1", true },             { "fe80::1", true },         { "fd00:ec2::254", true },
		{ "100.100.100.200", true }, { "::ffff:100.100.100.200", true },
		{ "::ffff:127.0.0.1", true }, { "10.1.2.3", false },      { "192.168.1.1", false },
		{ "fd00:ec2::253", false },  { "100.100.100.201", false }, { "198.51.100.7", false },
	};
	uint8_t a[16];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int fam = strchr(cases[i].addr, ':') ? AF_INET6 : AF_INET;
		struct egr_rebind_verdict v;

		assert_int_equal(inet_pton(fam, cases[i].addr, a), 1);
		if (egr_rebind_targets_host(fam, a, egr_rebind_classify(fam, a, &v)) !=
		    cases[i].host)
			fail_msg("%s: want %s", cases[i].addr, cases[i].host ? "host" : "not host");
	}
	/* An address of the host (egr_localaddr's class) reaches the host. */
	assert_int_equal(inet_pton(AF_INET, "198.51.100.7", a), 1);
	assert_true(egr_rebind_targets_host(AF_INET, a, EGR_REBIND_LOCAL));
}

static void test_rebind_local(void **state)
{
	struct egr_dnspolicy *none = compile(policy_json, NULL, 0);
	struct egr_dnspolicy *pol = compile(
		"{\"tenant\": \"acme\", \"network\": {\"default\": \"deny\", \"outbound_allow\": [],"
		" \"dns_rebind_allow\": [\"93.184.216.0/24\", \"[2606:4700::/32]\"]}}", NULL, 0);
	enum egr_rebind_class cls;

	/* The host's own addresses, plain and embedded, are blocked... */
	assert_true(blocked_local(none, "93.184.216.34", &cls));
	assert_int_equal(cls, EGR_REBIND_LOCAL);
	assert_string_equal(egr_rebind_class_name(cls), "host-local");
	assert_true(blocked_local(none, "2606:4700::1111", &cls));
	assert_int_equal(cls, EGR_REBIND_LOCAL);
	assert_true(blocked_local(none, "::ffff:93.184.216.34", &cls));
	assert_int_equal(cls, EGR_REBIND_LOCAL);
	assert_true(blocked_local(none, "64:ff9b::93.184.216.34", &cls));
	assert_true(blocked_local(none, "2002:5db8:d822::1", &cls));
	assert_true(blocked_local(NULL, "2001:0:4136:e378:8000:63bf:a247:27dd", &cls));
	/* ...their neighbours are not... */
	assert_false(blocked_local(none, "93.184.216.35", &cls));
	assert_int_equal(cls, EGR_REBIND_NONE);
	assert_false(blocked_local(none, "2606:4700::1112", &cls));
	assert_false(blocked_local(none, "::ffff:93.184.216.35", &cls));
	/* ...a range class wins without asking, and dns_rebind_allow exempts. */
	local_calls = 0;
	assert_true(blocked_local(none, "127.0.0.1", &cls));
	assert_int_equal(cls, EGR_REBIND_LOOPBACK);
	assert_int_equal(local_calls, 0);
	assert_false(blocked_local(pol, "93.184.216.34", &cls));
	assert_false(blocked_local(pol, "::ffff:93.184.216.34", &cls));
	assert_false(blocked_local(pol, "2606:4700::1111", &cls));
	/* Without a lookup: ranges only. */
	assert_false(blocked(none, "93.184.216.34"));
	egr_dnspolicy_free(none);
	egr_dnspolicy_free(pol);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exact_case_dot),
		cmocka_unit_test(test_outbound_names_ports),
		cmocka_unit_test(test_wildcard_depth),
		cmocka_unit_test(test_qtypes),
		cmocka_unit_test(test_too_many_ranges),
		cmocka_unit_test(test_lengths),
		cmocka_unit_test(test_entropy),
		cmocka_unit_test(test_subdomain_burst),
		cmocka_unit_test(test_domain_lru),
		cmocka_unit_test(test_nxdomain_rate),
		cmocka_unit_test(test_rebind_classify),
		cmocka_unit_test(test_rebind_allow),
		cmocka_unit_test(test_rebind_local),
		cmocka_unit_test(test_rebind_targets_host),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
