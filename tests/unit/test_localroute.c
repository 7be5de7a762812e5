// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Route-based local addresses (issue 23, finding 7): the reply parser on
 * crafted messages, and real FIB lookups in this test's own network
 * namespace with the cache in front of them. */
#include <arpa/inet.h>
#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/rtnetlink.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "localroute.h"

static uint8_t buf[4096];

static size_t put_route(uint32_t seq, uint8_t type)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct rtmsg *rtm;

	nlh->nlmsg_type = RTM_NEWROUTE;
	nlh->nlmsg_seq = seq;
	rtm = mnl_nlmsg_put_extra_header(nlh, sizeof(*rtm));
	rtm->rtm_family = AF_INET;
	rtm->rtm_type = type;
	return nlh->nlmsg_len;
}

static size_t put_error(uint32_t seq, int err)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct nlmsgerr *e;

	nlh->nlmsg_type = NLMSG_ERROR;
	nlh->nlmsg_seq = seq;
	e = mnl_nlmsg_put_extra_header(nlh, sizeof(*e));
	e->error = err;
	return nlh->nlmsg_len;
}

static void test_parse_reply(void **state)
{
	assert_int_equal(egr_localroute_parse_reply(buf, put_route(7, RTN_LOCAL), 7), 1);
	assert_int_equal(egr_localroute_parse_reply(buf, put_route(7, RTN_BROADCAST), 7), 1);
	assert_int_equal(egr_localroute_parse_reply(buf, put_route(7, RTN_ANYCAST), 7), 1);
	assert_int_equal(egr_localroute_parse_reply(buf, put_route(7, RTN_UNICAST), 7), 0);
	assert_int_equal(egr_localroute_parse_reply(buf, put_route(7, RTN_MULTICAST), 7), 0);
	/* No route, unreachable, prohibit, blackhole: not delivered at all. */
	assert_int_equal(egr_localroute_parse_reply(buf, put_error(7, -ENETUNREACH), 7), 0);
	assert_int_equal(egr_localroute_parse_reply(buf, put_error(7, -EHOSTUNREACH), 7), 0);
	assert_int_equal(egr_localroute_parse_reply(buf, put_error(7, -EACCES), 7), 0);
	assert_int_equal(egr_localroute_parse_reply(buf, put_error(7, -EINVAL), 7), 0);
	/* Anything else is no answer: the caller counts the address local. */
	assert_int_equal(egr_localroute_parse_reply(buf, put_error(7, -ENOBUFS), 7), -ENOBUFS);
	assert_int_equal(egr_localroute_parse_reply(buf, put_error(7, 0), 7), -EBADMSG);
	assert_int_equal(egr_localroute_parse_reply(buf, put_error(7, 5), 7), -EBADMSG);
	/* Found by fuzz_localroute: no errno at all. */
	assert_int_equal(egr_localroute_parse_reply(buf, put_error(7, -16187291), 7), -EBADMSG);
	assert_int_equal(egr_localroute_parse_reply(buf, put_error(7, INT32_MIN), 7), -EBADMSG);
	/* A late reply of an earlier lookup is skipped. */
	assert_int_equal(egr_localroute_parse_reply(buf, put_route(6, RTN_UNICAST), 7), -EAGAIN);
	/* Truncated: the header claims more than the buffer holds. */
	assert_int_equal(egr_localroute_parse_reply(buf, put_route(7, RTN_LOCAL) - 4, 7), -EAGAIN);
	{
		struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);

		nlh->nlmsg_type = RTM_NEWROUTE;
		nlh->nlmsg_seq = 7;
		assert_int_equal(egr_localroute_parse_reply(buf, nlh->nlmsg_len, 7), -EBADMSG);
	}
	assert_int_equal(egr_localroute_parse_reply(NULL, 0, 7), -EINVAL);
}

static bool is_local(struct egr_localroute *lr, int family, const char *text)
{
	uint8_t a[16];

	assert_int_equal(inet_pton(family, text, a), 1);
	return egr_localroute_is_local(lr, family, a);
}

static void test_fib_lookups(void **state)
{
	struct egr_localroute *lr = NULL;
	struct egr_localroute_stats st;

	assert_int_equal(egr_localroute_open("unit", &lr), 0);
	/* 127.0.0.0/8 is a local route, not only 127.0.0.1 an address. */
	assert_true(is_local(lr, AF_INET, "127.0.0.1"));
	assert_true(is_local(lr, AF_INET, "127.45.6.7"));
	assert_true(is_local(lr, AF_INET6, "::1"));
	/* Twins: documentation addresses no host here delivers to itself
	 * (whether a default route exists or not). */
	assert_false(is_local(lr, AF_INET, "198.51.100.77"));
	assert_false(is_local(lr, AF_INET6, "2001:db8::77"));
	egr_localroute_stats(lr, &st);
	assert_int_equal(st.lookups, 5);
	assert_int_equal(st.failures, 0);
	/* Asked again at once: from the cache, same answers. */
	assert_true(is_local(lr, AF_INET, "127.45.6.7"));
	assert_false(is_local(lr, AF_INET, "198.51.100.77"));
	egr_localroute_stats(lr, &st);
	assert_true(st.hits + st.flushes >= 2); /* a change on the host may flush */
	assert_true(st.lookups <= 7);
	/* Fail closed on what it cannot judge. */
	assert_true(egr_localroute_is_local(lr, AF_UNIX, (const uint8_t *)"x"));
	assert_true(egr_localroute_is_local(NULL, AF_INET, (const uint8_t *)"\x01\x02\x03\x04"));
	egr_localroute_free(lr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_reply),
		cmocka_unit_test(test_fib_lookups),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
