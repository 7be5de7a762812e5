// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The policy suggestion synthesiser (user/lib/suggest.c): from execution
 * audit records to a policy the policy parser accepts. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "policy.h"
#include "suggest.h"

static json_t *rec_of(const char *text)
{
	json_error_t je;
	json_t *r = json_loads(text, 0, &je);

	if (!r)
		fail_msg("bad test record: %s", je.text);
	return r;
}

/* Suggest from text; the policy must parse. */
static json_t *suggest(const char *text, json_t **notes)
{
	json_t *rec = rec_of(text), *pol = NULL;
	struct egr_error e = { { 0 }, { 0 } };
	struct egr_policy p;
	int ret = egr_suggest_policy(rec, &pol, notes, &e);

	json_decref(rec);
	if (ret)
		fail_msg("suggest: %d %s: %s", ret, e.field, e.message);
	if (egr_policy_from_json(pol, &p, &e)) {
		char *s = json_dumps(pol, 0);

		fail_msg("suggested policy %s does not parse: %s: %s", s, e.field, e.message);
	}
	egr_policy_free(&p);
	return pol;
}

static void assert_strings(const json_t *arr, const char *const *want, size_t n)
{
	if (json_array_size(arr) != n) {
		char *s = json_dumps(arr, 0);

		fail_msg("got %s, want %zu entries", s, n);
	}
	for (size_t i = 0; i < n; i++)
		assert_string_equal(json_string_value(json_array_get(arr, i)), want[i]);
}

#define OUT(p) json_object_get(json_object_get(p, "network"), "outbound_allow")
#define DNS(p) json_object_get(json_object_get(p, "network"), "dns_allow")

/* An audit-mode run: names reached by name, an address without a name,
 * DNS-only names, its own DNS proxy left out, identity copied. */
static void test_audit_run(void **state)
{
	static const char rec[] =
		"{\"type\":\"execution\",\"tenant\":\"acme\",\"execution_id\":\"x1\","
		"\"principal\":\"agent:a\",\"tool\":\"http\",\"version\":\"1.0\",\"mode\":\"audit\","
		"\"dns_proxy\":{\"port4\":40001,\"port6\":40002},"
		"\"egress\":["
		" {\"addr\":\"127.0.0.1\",\"port\":40001,\"proto\":\"udp\"},"
		" {\"addr\":\"::1\",\"port\":40002,\"proto\":\"udp\"},"
		" {\"addr\":\"192.0.2.10\",\"port\":443,\"proto\":\"tcp\"},"
		" {\"addr\":\"192.0.2.10\",\"port\":8443,\"proto\":\"tcp\"},"
		" {\"addr\":\"2001:db8::0:1\",\"port\":443,\"proto\":\"tcp\"},"
		" {\"addr\":\"198.51.100.7\",\"port\":123,\"proto\":\"udp\"}],"
		"\"observed\":{\"complete\":true,\"dns\":["
		" {\"name\":\"API.example.com\",\"verdict\":\"audit\",\"addrs\":[\"192.0.2.10\","
		"  \"2001:db8::1\"]},"
		" {\"name\":\"only.example.net\",\"verdict\":\"allow\",\"addrs\":[\"203.0.113.5\"]}],"
		" \"denied\":[{\"addr\":\"192.0.2.99\",\"port\":80,\"proto\":\"tcp\","
		"  \"kind\":\"connect\",\"verdict\":\"audit\",\"count\":2}]}}";
	static const char *const out[] = {
		"tcp/192.0.2.99:80", "tcp/api.example.com:443", "tcp/api.example.com:8443",
		"udp/198.51.100.7:123",
	};
	static const char *const dns[] = { "only.example.net" };
	json_t *notes, *p = suggest(rec, &notes);

	assert_strings(OUT(p), out, 4);
	assert_strings(DNS(p), dns, 1);
	assert_string_equal(json_string_value(json_object_get(p, "tenant")), "acme");
	assert_string_equal(json_string_value(json_object_get(p, "execution_id")), "x1");
	assert_string_equal(json_string_value(json_object_get(p, "principal")), "agent:a");
	assert_string_equal(json_string_value(json_object_get(p, "tool")), "http");
	assert_string_equal(json_string_value(json_object_get(p, "version")), "1.0");
	assert_null(json_object_get(json_object_get(p, "network"), "mode"));
	assert_int_equal(json_array_size(notes), 0);
	json_decref(p);
	json_decref(notes);
}

/* An enforced run: what was denied is a note, not an entry; refused names
 * too. A name shared by two addresses and an address of two names. */
static void test_enforced_run(void **state)
{
	static const char rec[] =
		"{\"type\":\"execution\",\"tenant\":\"acme\",\"mode\":\"enforce\","
		"\"egress_complete\":false,"
		"\"egress\":[{\"addr\":\"192.0.2.1\",\"port\":443,\"proto\":\"tcp\"},"
		" {\"addr\":\"10.0.0.1\",\"port\":0,\"proto\":\"icmp\"}],"
		"\"observed\":{\"complete\":false,\"dns\":["
		" {\"name\":\"a.example.com\",\"verdict\":\"allow\",\"addrs\":[\"192.0.2.1\"]},"
		" {\"name\":\"cdn.example.com\",\"verdict\":\"allow\",\"addrs\":[\"192.0.2.1\"]},"
		" {\"name\":\"evil.example\",\"verdict\":\"deny\",\"addrs\":[]}],"
		" \"denied\":[{\"addr\":\"2001:db8::5\",\"port\":22,\"proto\":\"tcp\","
		"  \"kind\":\"connect\",\"verdict\":\"deny\",\"count\":3}]}}";
	static const char *const out[] = { "tcp/a.example.com:443", "tcp/cdn.example.com:443" };
	json_t *notes, *p = suggest(rec, &notes);
	char *all;

	assert_strings(OUT(p), out, 2);
	assert_int_equal(json_array_size(DNS(p)), 0);
	all = json_dumps(notes, 0);
	assert_non_null(strstr(all, "denied tcp/[2001:db8::5]:22, 3 time(s) (not added)"));
	assert_non_null(strstr(all, "refused DNS name evil.example (not added)"));
	assert_non_null(strstr(all, "icmp traffic to 10.0.0.1"));
	assert_non_null(strstr(all, "incomplete"));
	assert_non_null(strstr(all, "hit their bound"));
	free(all);
	json_decref(p);
	json_decref(notes);
}

#define REBIND(p) json_object_get(json_object_get(p, "network"), "dns_rebind_allow")

/* dns_rebind_allow: a range of the run an answer used is kept, one no
 * answer used is not; an address audit mode kept is added as /32; one
 * enforce mode stripped is a note. */
static void test_rebind_ranges(void **state)
{
	static const char rec[] =
		"{\"type\":\"execution\",\"tenant\":\"acme\",\"mode\":\"audit\","
		"\"egress\":[{\"addr\":\"10.1.2.3\",\"port\":443,\"proto\":\"tcp\"}],"
		"\"observed\":{\"complete\":true,\"dns\":["
		" {\"name\":\"mirror.corp\",\"verdict\":\"allow\",\"addrs\":[\"10.1.2.3\"]},"
		" {\"name\":\"ula.corp\",\"verdict\":\"allow\",\"addrs\":[\"fd12::5\"]},"
		" {\"name\":\"meta.corp\",\"verdict\":\"audit\",\"addrs\":[\"172.16.5.5\"]}],"
		" \"rebind_allow\":[\"10.0.0.0/8\",\"192.168.0.0/16\",\"[fd00::/8]\"],"
		" \"rebind\":[{\"name\":\"meta.corp\",\"addr\":\"172.16.5.5\",\"class\":\"private\","
		"  \"action\":\"kept\",\"count\":1},"
		" {\"name\":\"evil.example\",\"addr\":\"127.0.0.1\",\"class\":\"loopback\","
		"  \"action\":\"stripped\",\"count\":2}],"
		" \"denied\":[]}}";
	static const char *const want[] = { "10.0.0.0/8", "172.16.5.5/32", "[fd00::/8]" };
	static const char *const out[] = { "tcp/mirror.corp:443" };
	json_t *notes, *p = suggest(rec, &notes);
	char *all;

	assert_strings(OUT(p), out, 1);
	assert_strings(REBIND(p), want, 3);
	all = json_dumps(notes, 0);
	assert_non_null(strstr(all, "dns_rebind_allow \\\"10.0.0.0/8\\\" kept: the answer for "
				    "mirror.corp (10.1.2.3)"));
	assert_non_null(strstr(all, "\\\"172.16.5.5/32\\\" added: the answer for meta.corp"));
	assert_non_null(strstr(all, "pointed to 127.0.0.1 (loopback), stripped (DNS rebinding "
				    "protection) 2 time(s)"));
	assert_null(strstr(all, "192.168.0.0/16"));
	free(all);
	json_decref(p);
	json_decref(notes);

	/* Approved names are named as candidates. */
	p = suggest("{\"type\":\"execution\",\"tenant\":\"acme\",\"observed\":{\"dns\":[],"
		    "\"approved\":[{\"name\":\"new.example\",\"ports\":\"tcp/443\","
		    "\"scope\":\"sandbox\",\"approver\":{\"uid\":0}}]}}", &notes);
	all = json_dumps(notes, 0);
	assert_non_null(strstr(all, "approved during the run: new.example on tcp/443 (scope "
				    "sandbox, by uid 0): a candidate for the policy file"));
	free(all);
	json_decref(p);
	json_decref(notes);

	/* Twin: a run with no rebinding addresses suggests no ranges. */
	p = suggest("{\"type\":\"execution\",\"tenant\":\"acme\",\"observed\":{\"dns\":["
		    "{\"name\":\"a.example\",\"verdict\":\"allow\",\"addrs\":[\"192.0.2.1\"]}],"
		    "\"rebind_allow\":[\"10.0.0.0/8\"],\"rebind\":[]}}", &notes);
	assert_null(REBIND(p));
	json_decref(p);
	json_decref(notes);
}

/* DNS-only names fold into a wildcard from EGR_SUGGEST_WILDCARD_MIN
 * siblings on, never above a single-label parent; reached names never do. */
static void test_wildcard_threshold(void **state)
{
	char rec[4096], *w = rec;
	const char *end = rec + sizeof(rec);
	json_t *notes, *p;

	w += snprintf(w, (size_t)(end - w),
		      "{\"type\":\"execution\",\"tenant\":\"t\",\"egress\":["
		      "{\"addr\":\"192.0.2.1\",\"port\":443,\"proto\":\"tcp\"}],"
		      "\"observed\":{\"dns\":[{\"name\":\"r.many.example\",\"addrs\":[\"192.0.2.1\"]}");
	for (int i = 0; i < EGR_SUGGEST_WILDCARD_MIN; i++)
		w += snprintf(w, (size_t)(end - w), ",{\"name\":\"n%d.many.example\"}", i);
	for (int i = 0; i < EGR_SUGGEST_WILDCARD_MIN - 1; i++)
		w += snprintf(w, (size_t)(end - w), ",{\"name\":\"n%d.few.example\"}", i);
	for (int i = 0; i < EGR_SUGGEST_WILDCARD_MIN; i++)
		w += snprintf(w, (size_t)(end - w), ",{\"name\":\"x%d.com\"}", i);
	snprintf(w, (size_t)(end - w), "]}}");
	p = suggest(rec, &notes);
	{
		static const char *const out[] = { "tcp/r.many.example:443" };
		static const char *const dns[] = {
			"*.many.example", "n0.few.example", "n1.few.example", "n2.few.example",
			"n3.few.example", "x0.com", "x1.com", "x2.com", "x3.com", "x4.com",
		};

		assert_strings(OUT(p), out, 1);
		assert_strings(DNS(p), dns, 10);
	}
	/* An old record without observations: addresses only, and a note. */
	json_decref(p);
	json_decref(notes);
	p = suggest("{\"type\":\"execution\",\"tenant\":\"t\",\"egress\":[{\"addr\":\"::ffff:1.2.3.4\","
		    "\"port\":80,\"proto\":\"tcp\"}]}",
		    &notes);
	{
		static const char *const out[] = { "tcp/[::ffff:1.2.3.4]:80" };

		assert_strings(OUT(p), out, 1);
	}
	assert_int_equal(json_array_size(notes), 1);
	json_decref(p);
	json_decref(notes);
}

static void test_bad_records(void **state)
{
	struct egr_error e;
	json_t *pol = (json_t *)1, *notes = (json_t *)1, *r;

	r = rec_of("{\"type\":\"policy_change\",\"tenant\":\"t\"}");
	assert_int_equal(egr_suggest_policy(r, &pol, &notes, &e), -EINVAL);
	assert_string_equal(e.field, "type");
	assert_null(pol);
	assert_null(notes);
	json_decref(r);
	r = rec_of("{\"type\":\"execution\",\"tenant\":null}");
	assert_int_equal(egr_suggest_policy(r, &pol, &notes, &e), -EINVAL);
	assert_string_equal(e.field, "tenant");
	json_decref(r);
	/* Garbage inside is skipped, not trusted. */
	r = rec_of("{\"type\":\"execution\",\"tenant\":\"t\",\"egress\":[{\"addr\":\"nope\","
		   "\"port\":1,\"proto\":\"tcp\"},7],\"observed\":{\"dns\":[{\"name\":\"bad name!\","
		   "\"addrs\":[\"1.2.3.4\"]}]}}");
	assert_int_equal(egr_suggest_policy(r, &pol, &notes, &e), 0);
	assert_int_equal(json_array_size(OUT(pol)), 0);
	assert_int_equal(json_array_size(DNS(pol)), 0);
	json_decref(pol);
	json_decref(notes);
	json_decref(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_audit_run),
		cmocka_unit_test(test_enforced_run),
		cmocka_unit_test(test_wildcard_threshold),
		cmocka_unit_test(test_rebind_ranges),
		cmocka_unit_test(test_bad_records),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
