// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Address and prefix helpers (user/lib/netaddr.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "netaddr.h"

static void parse(const char *text, int family, int want, const char *formatted)
{
	struct egr_prefix p;
	char buf[EGR_PREFIX_TEXT_MAX];

	assert_int_equal(egr_prefix_parse(text, strlen(text), family, &p), want);
	if (want) {
		assert_int_equal(p.family, 0);
		return;
	}
	assert_true(egr_prefix_format(&p, true, buf, sizeof(buf)) > 0);
	assert_string_equal(buf, formatted);
}

static void test_parse_format(void **state)
{
	(void)state;
	parse("203.0.113.7", AF_INET, 0, "203.0.113.7");
	parse("203.0.113.7/24", AF_INET, 0, "203.0.113.0/24"); /* host bits cleared */
	parse("10.1.2.3/0", AF_INET, 0, "0.0.0.0/0");
	parse("10.255.255.255/9", AF_INET, 0, "10.128.0.0/9");
	parse("2001:db8::1/32", AF_INET6, 0, "[2001:db8::]/32");
	parse("2001:db8::1", AF_INET6, 0, "[2001:db8::1]");
	parse("::ffff:1.2.3.4/120", AF_INET6, 0, "[::ffff:1.2.3.0]/120");
	/* Prefix lengths: decimal, no sign, no leading zero, in range. */
	parse("10.0.0.0/33", AF_INET, -EDOM, NULL);
	parse("10.0.0.0/", AF_INET, -EDOM, NULL);
	parse("10.0.0.0/08", AF_INET, -EDOM, NULL);
	parse("10.0.0.0/+8", AF_INET, -EDOM, NULL);
	parse("10.0.0.0/8/8", AF_INET, -EDOM, NULL);
	parse("::/129", AF_INET6, -EDOM, NULL);
	parse("::/00128", AF_INET6, -EDOM, NULL);
	/* Addresses: of the family asked for, whole, nothing around them. */
	parse("10.0.0", AF_INET, -EINVAL, NULL);
	parse("10.0.0.256", AF_INET, -EINVAL, NULL);
	parse(" 10.0.0.1", AF_INET, -EINVAL, NULL);
	parse("::1", AF_INET, -EINVAL, NULL);
	parse("10.0.0.1", AF_INET6, -EINVAL, NULL);
	parse("[::1]", AF_INET6, -EINVAL, NULL);
	parse("", AF_INET, -EINVAL, NULL);
	parse("1.2.3.4", AF_UNIX, -EINVAL, NULL);
}

static void test_parse_len_bounded(void **state)
{
	struct egr_prefix p;
	/* Only len bytes are read: the rest is not part of the text. */
	const char text[] = "10.1.2.3/16garbage";

	(void)state;
	assert_int_equal(egr_prefix_parse(text, 11, AF_INET, &p), 0);
	assert_int_equal(p.plen, 16);
	assert_int_equal(egr_prefix_parse(text, 8, AF_INET, &p), 0);
	assert_int_equal(p.plen, 32);
	/* An embedded NUL is not an address. */
	assert_int_equal(egr_prefix_parse("1.2.3.4\0x", 9, AF_INET, &p), -EINVAL);
}

static void test_mask_covers(void **state)
{
	uint8_t a[16], net[16];

	(void)state;
	memset(a, 0xff, sizeof(a));
	egr_prefix_mask(a, 4, 20);
	assert_int_equal(a[0], 0xff);
	assert_int_equal(a[1], 0xff);
	assert_int_equal(a[2], 0xf0);
	assert_int_equal(a[3], 0);
	memset(a, 0xff, sizeof(a));
	egr_prefix_mask(a, 16, 0);
	for (int i = 0; i < 16; i++)
		assert_int_equal(a[i], 0);
	memset(a, 0xab, sizeof(a));
	egr_prefix_mask(a, 16, 128);
	assert_int_equal(a[15], 0xab);

	inet_pton(AF_INET, "203.0.113.0", net);
	inet_pton(AF_INET, "203.0.113.200", a);
	assert_true(egr_prefix_covers(net, 24, a));
	assert_true(egr_prefix_covers(net, 0, a));
	assert_false(egr_prefix_covers(net, 25, a));
	inet_pton(AF_INET, "203.0.112.1", a);
	assert_false(egr_prefix_covers(net, 24, a));
	assert_true(egr_prefix_covers(net, 23, a));
	inet_pton(AF_INET6, "2001:db8::", net);
	inet_pton(AF_INET6, "2001:db8:ffff::1", a);
	assert_true(egr_prefix_covers(net, 32, a));
	assert_false(egr_prefix_covers(net, 33, a));
	assert_false(egr_prefix_covers(net, 128, a));
}

static void test_v4mapped(void **state)
{
	struct egr_prefix p;
	char buf[EGR_PREFIX_TEXT_MAX];

	(void)state;
	assert_int_equal(egr_prefix_parse("::ffff:192.0.2.9/120", 20, AF_INET6, &p), 0);
	assert_true(egr_addr_is_v4mapped(p.addr));
	assert_true(egr_prefix_unmap(&p));
	assert_int_equal(p.family, AF_INET);
	assert_int_equal(p.plen, 24);
	assert_true(egr_prefix_format(&p, true, buf, sizeof(buf)) > 0);
	assert_string_equal(buf, "192.0.2.0/24");
	/* Shorter than /96 also covers non-mapped addresses: stays IPv6. */
	assert_int_equal(egr_prefix_parse("::ffff:0:0/95", 13, AF_INET6, &p), 0);
	assert_false(egr_prefix_unmap(&p));
	assert_int_equal(p.family, AF_INET6);
	/* Compatible (::a.b.c.d) and other IPv6 are not mapped. */
	assert_int_equal(egr_prefix_parse("::192.0.2.9", 11, AF_INET6, &p), 0);
	assert_false(egr_addr_is_v4mapped(p.addr));
	assert_false(egr_prefix_unmap(&p));
	/* IPv4 prefixes are left alone. */
	assert_int_equal(egr_prefix_parse("192.0.2.9", 9, AF_INET, &p), 0);
	assert_false(egr_prefix_unmap(&p));
}

static void test_format_bounds(void **state)
{
	struct egr_prefix p = { .family = AF_INET6, .plen = 128 };
	char buf[EGR_PREFIX_TEXT_MAX], small[8];

	(void)state;
	memset(p.addr, 0x12, sizeof(p.addr));
	assert_int_equal(egr_prefix_format(&p, false, buf, sizeof(buf)),
			 (int)strlen("[1212:1212:1212:1212:1212:1212:1212:1212]/128"));
	assert_int_equal(egr_prefix_format(&p, false, small, sizeof(small)), -ENOSPC);
	assert_string_equal(small, "");
	p.family = AF_UNIX;
	assert_int_equal(egr_prefix_format(&p, false, buf, sizeof(buf)), -EAFNOSUPPORT);
	/* The longest text there is fits EGR_PREFIX_TEXT_MAX. */
	assert_int_equal(egr_prefix_parse("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255/127",
					  49, AF_INET6, &p), 0);
	assert_true(egr_prefix_format(&p, false, buf, sizeof(buf)) > 0);
}

static void test_ipproto_name(void **state)
{
	(void)state;
	assert_string_equal(egr_ipproto_name(6), "tcp");
	assert_string_equal(egr_ipproto_name(17), "udp");
	assert_string_equal(egr_ipproto_name(1), "icmp");
	assert_string_equal(egr_ipproto_name(58), "icmpv6");
	assert_string_equal(egr_ipproto_name(136), "udplite");
	assert_string_equal(egr_ipproto_name(132), "sctp");
	assert_string_equal(egr_ipproto_name(262), "mptcp");
	assert_null(egr_ipproto_name(0));
	assert_null(egr_ipproto_name(255));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_format),
		cmocka_unit_test(test_parse_len_bounded),
		cmocka_unit_test(test_mask_covers),
		cmocka_unit_test(test_v4mapped),
		cmocka_unit_test(test_format_bounds),
		cmocka_unit_test(test_ipproto_name),
	};

	return cmocka_run_group_tests_name("netaddr", tests, NULL, NULL);
}
