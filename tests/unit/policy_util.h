/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* What the policy parser's unit tests share (test_policy.c,
 * test_policy_network.c). Include it after cmocka.h and policy.h. */
#ifndef EGR_TEST_POLICY_UTIL_H
#define EGR_TEST_POLICY_UTIL_H

__attribute__((unused)) static int parse(const char *text, struct egr_policy *p, struct egr_error *e)
{
	memset(e, 0x5a, sizeof(*e));
	return egr_policy_parse(text, strlen(text), p, e);
}

__attribute__((unused)) static void assert_zeroed(const struct egr_policy *p)
{
	static const struct egr_policy zero;

	assert_memory_equal(p, &zero, sizeof(zero));
}

/* Parse text, expect -EINVAL with exactly this field and a message containing msg. */
__attribute__((unused)) static void expect_fail(const char *text, const char *field, const char *msg)
{
	struct egr_policy p;
	struct egr_error e;
	int ret = parse(text, &p, &e);

	if (ret != -EINVAL || strcmp(e.field, field) || !strstr(e.message, msg))
		print_error("policy %s\n -> ret %d field \"%s\" message \"%s\"\n"
			    " wanted field \"%s\" message containing \"%s\"\n",
			    text, ret, ret ? e.field : "", ret ? e.message : "", field, msg);
	assert_int_equal(ret, -EINVAL);
	assert_string_equal(e.field, field);
	assert_non_null(strstr(e.message, msg));
	assert_zeroed(&p);
}

/* A policy around a network body. */
__attribute__((unused)) static char *with_net(const char *net_fmt, ...)
{
	static char buf[8192];
	char net[7000];
	va_list ap;

	va_start(ap, net_fmt);
	vsnprintf(net, sizeof(net), net_fmt, ap);
	va_end(ap);
	snprintf(buf, sizeof(buf), "{\"tenant\":\"t1\",\"network\":{\"default\":\"deny\",%s}}",
		 net);
	return buf;
}

/* One outbound_allow entry (raw JSON) that must fail at field with msg. */
__attribute__((unused)) static void expect_allow_fail(const char *entry_json, const char *field, const char *msg)
{
	expect_fail(with_net("\"outbound_allow\":[\"1.1.1.1:1\",%s]", entry_json), field, msg);
}

__attribute__((unused)) static void expect_entry_fail(const char *entry, const char *msg)
{
	char json[1024];

	snprintf(json, sizeof(json), "\"%s\"", entry);
	expect_allow_fail(json, "network.outbound_allow[1]", msg);
}

/* Parse one string entry; must succeed. */
__attribute__((unused)) static struct egr_allow one(const char *entry)
{
	struct egr_allow a;
	struct egr_error e;
	int ret = egr_allow_parse(entry, &a, &e);

	if (ret)
		print_error("%s: %s\n", entry, e.message);
	assert_int_equal(ret, 0);
	return a;
}

__attribute__((unused)) static void assert_v4(const struct egr_allow *a, const char *addr, int plen)
{
	uint8_t want[16] = { 0 };

	assert_int_equal(a->kind, EGR_HOST_V4);
	assert_int_equal(inet_pton(AF_INET, addr, want), 1);
	assert_memory_equal(a->addr, want, 16);
	assert_int_equal(a->prefixlen, plen);
	assert_null(a->name);
}

/* --- valid policies -------------------------------------------------------------- */

#endif /* EGR_TEST_POLICY_UTIL_H */
