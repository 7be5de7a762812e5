// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The local-address set: notifications applied to a detached set, and a real
 * rtnetlink dump of this test's own network namespace. */
#include <arpa/inet.h>
#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/if_addr.h>
#include <linux/rtnetlink.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "localaddr.h"

static uint8_t msgbuf[8192];
static size_t msglen;

/* Append one RTM_NEWADDR/RTM_DELADDR to msgbuf. local/addr/brd may be NULL. */
static void put_addr(uint16_t type, int family, uint32_t ifindex, const char *local,
		     const char *addr, const char *brd)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(msgbuf + msglen);
	struct ifaddrmsg *ifa;
	size_t alen = family == AF_INET ? 4 : 16;
	uint8_t a[16];

	nlh->nlmsg_type = type;
	ifa = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifa));
	ifa->ifa_family = (uint8_t)family;
	ifa->ifa_prefixlen = family == AF_INET ? 24 : 64;
	ifa->ifa_index = ifindex;
	if (addr) {
		assert_int_equal(inet_pton(family, addr, a), 1);
		mnl_attr_put(nlh, IFA_ADDRESS, alen, a);
	}
	if (local) {
		assert_int_equal(inet_pton(family, local, a), 1);
		mnl_attr_put(nlh, IFA_LOCAL, alen, a);
	}
	if (brd) {
		assert_int_equal(inet_pton(family, brd, a), 1);
		mnl_attr_put(nlh, IFA_BROADCAST, alen, a);
	}
	msglen += nlh->nlmsg_len;
	assert_true(msglen < sizeof(msgbuf) - 256);
}

static void apply(struct egr_localaddr *la, int want)
{
	assert_int_equal(egr_localaddr_apply(la, msgbuf, msglen), want);
	msglen = 0;
}

static bool has(const struct egr_localaddr *la, const char *text)
{
	int family = strchr(text, ':') ? AF_INET6 : AF_INET;
	uint8_t a[16] = { 0 };

	assert_int_equal(inet_pton(family, text, a), 1);
	return egr_localaddr_contains(la, family, a);
}

static void test_notifications(void **state)
{
	struct egr_localaddr *la;

	assert_int_equal(egr_localaddr_new_detached("test", &la), 0);
	assert_true(egr_localaddr_synced(la));
	assert_int_equal(egr_localaddr_fd(la), -1);
	assert_false(has(la, "93.184.216.34"));
	/* eth0: local + broadcast; a point-to-point address whose IFA_ADDRESS
	 * is the peer; an IPv6 address on two interfaces. */
	put_addr(RTM_NEWADDR, AF_INET, 2, "93.184.216.34", "93.184.216.34", "93.184.216.255");
	put_addr(RTM_NEWADDR, AF_INET, 3, "5.5.5.5", "5.5.5.6", NULL);
	put_addr(RTM_NEWADDR, AF_INET6, 2, NULL, "2606:4700::1111", NULL);
	put_addr(RTM_NEWADDR, AF_INET6, 4, NULL, "2606:4700::1111", NULL);
	put_addr(RTM_NEWADDR, AF_INET, 2, "93.184.216.34", "93.184.216.34", "93.184.216.255");
	apply(la, 0);
	assert_int_equal(egr_localaddr_count(la), 5);
	assert_true(has(la, "93.184.216.34"));
	assert_true(has(la, "93.184.216.255"));
	assert_false(has(la, "93.184.216.35"));
	assert_true(has(la, "5.5.5.5"));
	assert_false(has(la, "5.5.5.6")); /* the peer is not local */
	assert_true(has(la, "2606:4700::1111"));
	assert_false(has(la, "2606:4700::1112"));
	/* The same bytes in the other family are another address. */
	assert_false(has(la, "5db8:d822::"));
	/* Deleting it from one interface keeps it on the other. */
	put_addr(RTM_DELADDR, AF_INET6, 2, NULL, "2606:4700::1111", NULL);
	apply(la, 0);
	assert_true(has(la, "2606:4700::1111"));
	put_addr(RTM_DELADDR, AF_INET6, 4, NULL, "2606:4700::1111", NULL);
	put_addr(RTM_DELADDR, AF_INET, 2, "93.184.216.34", "93.184.216.34", "93.184.216.255");
	put_addr(RTM_DELADDR, AF_INET, 9, "8.8.8.8", NULL, NULL); /* unknown: no-op */
	apply(la, 0);
	assert_false(has(la, "2606:4700::1111"));
	assert_false(has(la, "93.184.216.34"));
	assert_false(has(la, "93.184.216.255"));
	assert_int_equal(egr_localaddr_count(la), 1);
	/* Other messages and families are ignored; a short one is an error. */
	put_addr(RTM_NEWADDR, AF_UNIX, 2, NULL, NULL, NULL);
	apply(la, 0);
	{
		struct nlmsghdr *nlh = mnl_nlmsg_put_header(msgbuf);

		nlh->nlmsg_type = RTM_NEWADDR;
		assert_int_equal(egr_localaddr_apply(la, msgbuf, nlh->nlmsg_len), -EBADMSG);
	}
	assert_int_equal(egr_localaddr_apply(la, NULL, 0), -EINVAL);
	assert_int_equal(egr_localaddr_process(la), -EINVAL); /* detached */
	/* Bad arguments count as local (fail closed). */
	assert_true(egr_localaddr_contains(la, AF_UNIX, (const uint8_t *)"\1\2\3\4"));
	assert_true(egr_localaddr_contains(la, AF_INET, NULL));
	assert_true(egr_localaddr_contains(NULL, AF_INET, (const uint8_t *)"\1\2\3\4"));
	egr_localaddr_free(la);
}

static void test_cap_fails_closed(void **state)
{
	struct egr_localaddr *la;
	int err = 0;

	assert_int_equal(egr_localaddr_new_detached("cap", &la), 0);
	for (uint32_t i = 0; i <= EGR_LOCALADDR_MAX && !err; i++) {
		char text[32];

		snprintf(text, sizeof(text), "2606:4700::%x:%x", i >> 16, i & 0xffff);
		put_addr(RTM_NEWADDR, AF_INET6, 1, NULL, text, NULL);
		err = egr_localaddr_apply(la, msgbuf, msglen);
		msglen = 0;
	}
	assert_int_equal(err, -ENOSPC);
	assert_int_equal(egr_localaddr_count(la), EGR_LOCALADDR_MAX);
	assert_false(egr_localaddr_synced(la));
	/* Not knowing the set: everything counts as local. */
	assert_true(has(la, "93.184.216.34"));
	egr_localaddr_free(la);
}

static void test_real_dump(void **state)
{
	struct egr_localaddr *la;

	/* This namespace's loopback interface has 127.0.0.1. */
	assert_int_equal(egr_localaddr_open("unit", &la), 0);
	assert_true(egr_localaddr_synced(la));
	assert_true(egr_localaddr_fd(la) >= 0);
	assert_true(egr_localaddr_count(la) >= 1);
	assert_true(has(la, "127.0.0.1"));
	assert_false(has(la, "127.0.0.2")); /* in lo's /8, not an address of it */
	/* Nothing pending: a no-op that keeps the set. */
	assert_int_equal(egr_localaddr_process(la), 0);
	assert_true(has(la, "127.0.0.1"));
	egr_localaddr_free(la);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_notifications),
		cmocka_unit_test(test_cap_fails_closed),
		cmocka_unit_test(test_real_dump),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
