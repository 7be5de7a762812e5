// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The kernel's decisions, include/egr_decide.h, compiled as plain C. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "egr_decide.h"
#include "egr_reasons.h"
#include "egressd.h"

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif

static struct egr_rule rule_of(unsigned int n, const struct egr_port_range *r)
{
	struct egr_rule rule;

	memset(&rule, 0, sizeof(rule));
	rule.nranges = n;
	memcpy(rule.ranges, r, n * sizeof(*r));
	return rule;
}

static int allows(const struct egr_rule *r, uint16_t port, uint32_t proto, uint64_t now)
{
	int expired = 42;
	int v = egr_rule_allows(r, port, proto, now, &expired);

	assert_true(expired == 0 || expired == 1);
	return v;
}

static void test_constants(void **state)
{
	/* The spelled-out numbers agree with the system headers. */
	assert_int_equal(EGR_IPPROTO_ICMP, IPPROTO_ICMP);
	assert_int_equal(EGR_IPPROTO_TCP, IPPROTO_TCP);
	assert_int_equal(EGR_IPPROTO_UDP, IPPROTO_UDP);
	assert_int_equal(EGR_IPPROTO_ICMPV6, IPPROTO_ICMPV6);
	assert_int_equal(EGR_IPPROTO_SCTP, IPPROTO_SCTP);
	assert_int_equal(EGR_IPPROTO_UDPLITE, IPPROTO_UDPLITE);
	assert_int_equal(EGR_IPPROTO_MPTCP, IPPROTO_MPTCP);
	assert_int_equal(EGR_AF_INET, AF_INET);
	assert_int_equal(EGR_AF_INET6, AF_INET6);
	assert_int_equal(EGR_SOCK_STREAM, SOCK_STREAM);
	assert_int_equal(EGR_SOCK_DGRAM, SOCK_DGRAM);
	assert_int_equal(EGR_SOCK_RAW, SOCK_RAW);
	assert_int_equal(EGR_SOCK_SEQPACKET, SOCK_SEQPACKET);
	assert_int_equal(EGR_DENY, 0);
	assert_int_equal(EGR_ALLOW, 1);
}

static void test_proto_bit(void **state)
{
	assert_int_equal(egr_proto_bit(EGR_IPPROTO_TCP), EGR_PROTO_TCP);
	assert_int_equal(egr_proto_bit(EGR_IPPROTO_MPTCP), EGR_PROTO_TCP);
	assert_int_equal(egr_proto_bit(EGR_IPPROTO_UDP), EGR_PROTO_UDP);
	assert_int_equal(egr_proto_bit(EGR_IPPROTO_UDPLITE), 0);
	assert_int_equal(egr_proto_bit(EGR_IPPROTO_ICMP), 0);
	assert_int_equal(egr_proto_bit(EGR_IPPROTO_ICMPV6), 0);
	assert_int_equal(egr_proto_bit(EGR_IPPROTO_SCTP), 0);
	assert_int_equal(egr_proto_bit(0), 0);
}

static void test_rule_ports(void **state)
{
	static const struct egr_port_range r[] = {
		{ 80, 80, EGR_PROTO_ANY },
		{ 443, 443, EGR_PROTO_TCP },
		{ 53, 53, EGR_PROTO_UDP },
		{ 8000, 8080, EGR_PROTO_ANY },
	};
	struct egr_rule rule = rule_of(4, r);

	assert_int_equal(allows(&rule, 80, EGR_IPPROTO_TCP, 0), EGR_ALLOW);
	assert_int_equal(allows(&rule, 80, EGR_IPPROTO_UDP, 0), EGR_ALLOW);
	assert_int_equal(allows(&rule, 80, EGR_IPPROTO_MPTCP, 0), EGR_ALLOW);
	assert_int_equal(allows(&rule, 81, EGR_IPPROTO_TCP, 0), EGR_DENY);
	assert_int_equal(allows(&rule, 79, EGR_IPPROTO_TCP, 0), EGR_DENY);
	assert_int_equal(allows(&rule, 443, EGR_IPPROTO_TCP, 0), EGR_ALLOW);
	assert_int_equal(allows(&rule, 443, EGR_IPPROTO_MPTCP, 0), EGR_ALLOW);
	assert_int_equal(allows(&rule, 443, EGR_IPPROTO_UDP, 0), EGR_DENY);
	assert_int_equal(allows(&rule, 53, EGR_IPPROTO_UDP, 0), EGR_ALLOW);
	assert_int_equal(allows(&rule, 53, EGR_IPPROTO_TCP, 0), EGR_DENY);
	/* Range edges are inclusive. */
	assert_int_equal(allows(&rule, 8000, EGR_IPPROTO_TCP, 0), EGR_ALLOW);
	assert_int_equal(allows(&rule, 8080, EGR_IPPROTO_UDP, 0), EGR_ALLOW);
	assert_int_equal(allows(&rule, 8040, EGR_IPPROTO_TCP, 0), EGR_ALLOW);
	assert_int_equal(allows(&rule, 7999, EGR_IPPROTO_TCP, 0), EGR_DENY);
	assert_int_equal(allows(&rule, 8081, EGR_IPPROTO_TCP, 0), EGR_DENY);
	/* Portless protocols need an address allowed outright. */
	assert_int_equal(allows(&rule, 80, EGR_IPPROTO_ICMP, 0), EGR_DENY);
	assert_int_equal(allows(&rule, 0, EGR_IPPROTO_ICMPV6, 0), EGR_DENY);
	assert_int_equal(allows(&rule, 80, EGR_IPPROTO_UDPLITE, 0), EGR_DENY);
	assert_int_equal(allows(&rule, 80, EGR_IPPROTO_SCTP, 0), EGR_DENY);
}

static void test_rule_allow_all(void **state)
{
	static const struct egr_port_range all[] = { { 0, 0xffff, EGR_PROTO_ANY } };
	static const struct egr_port_range tcp_all[] = { { 0, 0xffff, EGR_PROTO_TCP } };
	static const struct egr_port_range split[] = { { 0, 0xffff, EGR_PROTO_TCP },
						       { 0, 0xffff, EGR_PROTO_UDP } };
	static const struct egr_port_range almost[] = { { 1, 0xffff, EGR_PROTO_ANY } };
	struct egr_rule rule = rule_of(1, all);

	assert_int_equal(allows(&rule, 0, EGR_IPPROTO_TCP, 0), EGR_ALLOW);
	assert_int_equal(allows(&rule, 65535, EGR_IPPROTO_UDP, 0), EGR_ALLOW);
	assert_int_equal(allows(&rule, 0, EGR_IPPROTO_ICMP, 0), EGR_ALLOW);
	assert_int_equal(allows(&rule, 0, EGR_IPPROTO_ICMPV6, 0), EGR_ALLOW);
	assert_int_equal(allows(&rule, 9, EGR_IPPROTO_SCTP, 0), EGR_ALLOW);
	assert_int_equal(allows(&rule, 9, EGR_IPPROTO_UDPLITE, 0), EGR_ALLOW);

	rule = rule_of(1, tcp_all);
	assert_int_equal(allows(&rule, 1, EGR_IPPROTO_TCP, 0), EGR_ALLOW);
	assert_int_equal(allows(&rule, 1, EGR_IPPROTO_UDP, 0), EGR_DENY);
	assert_int_equal(allows(&rule, 0, EGR_IPPROTO_ICMP, 0), EGR_DENY);

	/* Split per protocol is not "allowed outright" (the compiler recombines). */
	rule = rule_of(2, split);
	assert_int_equal(allows(&rule, 1, EGR_IPPROTO_UDP, 0), EGR_ALLOW);
	assert_int_equal(allows(&rule, 0, EGR_IPPROTO_ICMP, 0), EGR_DENY);

	rule = rule_of(1, almost);
	assert_int_equal(allows(&rule, 0, EGR_IPPROTO_ICMP, 0), EGR_DENY);
	assert_int_equal(allows(&rule, 0, EGR_IPPROTO_TCP, 0), EGR_DENY);
}

static void test_rule_nranges(void **state)
{
	struct egr_port_range r[EGR_MAX_PORT_RANGES];
	struct egr_rule rule;
	unsigned int i;

	for (i = 0; i < EGR_MAX_PORT_RANGES; i++)
		r[i] = (struct egr_port_range){ (uint16_t)(100 + i), (uint16_t)(100 + i),
						EGR_PROTO_TCP };
	rule = rule_of(EGR_MAX_PORT_RANGES, r);
	for (i = 0; i < EGR_MAX_PORT_RANGES; i++)
		assert_int_equal(allows(&rule, (uint16_t)(100 + i), EGR_IPPROTO_TCP, 0), EGR_ALLOW);
	assert_int_equal(allows(&rule, 100 + EGR_MAX_PORT_RANGES, EGR_IPPROTO_TCP, 0), EGR_DENY);

	/* Only the first nranges count. */
	rule.nranges = 3;
	assert_int_equal(allows(&rule, 102, EGR_IPPROTO_TCP, 0), EGR_ALLOW);
	assert_int_equal(allows(&rule, 103, EGR_IPPROTO_TCP, 0), EGR_DENY);
	rule.nranges = 0;
	assert_int_equal(allows(&rule, 100, EGR_IPPROTO_TCP, 0), EGR_DENY);

	/* A corrupt count denies everything, even what the ranges hold. */
	rule.nranges = EGR_MAX_PORT_RANGES + 1;
	assert_int_equal(allows(&rule, 100, EGR_IPPROTO_TCP, 0), EGR_DENY);
	rule.nranges = 0xffffffff;
	assert_int_equal(allows(&rule, 100, EGR_IPPROTO_TCP, 0), EGR_DENY);
}

static void test_rule_expiry_null(void **state)
{
	static const struct egr_port_range r[] = { { 443, 443, EGR_PROTO_ANY } };
	struct egr_rule rule = rule_of(1, r);
	int expired = 42;

	/* NULL: no matching prefix. */
	assert_int_equal(egr_rule_allows(NULL, 443, EGR_IPPROTO_TCP, 5, &expired), EGR_DENY);
	assert_int_equal(expired, 0);

	/* expires_ns 0 never expires. */
	assert_int_equal(egr_rule_allows(&rule, 443, EGR_IPPROTO_TCP, ~0ull, &expired),
			 EGR_ALLOW);
	assert_int_equal(expired, 0);

	rule.expires_ns = 1000;
	assert_int_equal(egr_rule_allows(&rule, 443, EGR_IPPROTO_TCP, 999, &expired), EGR_ALLOW);
	assert_int_equal(expired, 0);
	/* The deadline itself is already expired. */
	assert_int_equal(egr_rule_allows(&rule, 443, EGR_IPPROTO_TCP, 1000, &expired), EGR_DENY);
	assert_int_equal(expired, 1);
	assert_int_equal(egr_rule_allows(&rule, 443, EGR_IPPROTO_TCP, 5000, &expired), EGR_DENY);
	assert_int_equal(expired, 1);
	/* Expired and not matching: still reported as expired. */
	assert_int_equal(egr_rule_allows(&rule, 80, EGR_IPPROTO_TCP, 5000, &expired), EGR_DENY);
	assert_int_equal(expired, 1);
	/* Not expired but not matching. */
	assert_int_equal(egr_rule_allows(&rule, 80, EGR_IPPROTO_TCP, 5, &expired), EGR_DENY);
	assert_int_equal(expired, 0);
}

static int mapped(const char *text, uint32_t *v4)
{
	uint32_t w[4];

	assert_int_equal(inet_pton(AF_INET6, text, w), 1);
	*v4 = 0xdeadbeef;
	return egr_ip6_is_v4mapped(w, v4);
}

/* Row 7: the unspecified destination becomes the loopback the kernel uses. */
static void expect6_loopback(const char *in, const char *want, int changed)
{
	struct in6_addr a, w;

	assert_int_equal(inet_pton(AF_INET6, in, &a), 1);
	assert_int_equal(inet_pton(AF_INET6, want, &w), 1);
	assert_int_equal(egr_ip6_unspec_to_loopback((__u32 *)a.s6_addr32), changed);
	assert_memory_equal(&a, &w, sizeof(a));
}

static void test_unspec_to_loopback(void **state)
{
	static const char *const v6_kept[] = {
		"::1", "::2", "::0.0.0.1", "::ffff:0.0.0.1", "::ffff:127.0.0.1", "::fffe:0.0.0.0",
		"::1:ffff:0.0.0.0", "1::", "2001:db8::", "fe80::", "::ffff:0:0:0",
	};
	uint32_t a4;
	size_t i;

	a4 = 0;
	assert_int_equal(egr_ip4_unspec_to_loopback(&a4), 1);
	assert_int_equal(a4, htonl(INADDR_LOOPBACK));
	assert_int_equal(egr_ip4_unspec_to_loopback(&a4), 0);
	assert_int_equal(a4, htonl(INADDR_LOOPBACK));
	/* Only 0.0.0.0 itself: the kernel routes 0.x.y.z like any address. */
	a4 = htonl(0x00000001);
	assert_int_equal(egr_ip4_unspec_to_loopback(&a4), 0);
	assert_int_equal(a4, htonl(0x00000001));
	a4 = htonl(0x0a000001);
	assert_int_equal(egr_ip4_unspec_to_loopback(&a4), 0);
	assert_int_equal(a4, htonl(0x0a000001));

	expect6_loopback("::", "::1", 1);
	expect6_loopback("::ffff:0.0.0.0", "::ffff:127.0.0.1", 1);
	for (i = 0; i < sizeof(v6_kept) / sizeof(v6_kept[0]); i++)
		expect6_loopback(v6_kept[i], v6_kept[i], 0);
}

static void test_unspec(void **state)
{
	struct in6_addr a;

	assert_true(egr_ip4_is_unspec(0));
	assert_false(egr_ip4_is_unspec(htonl(INADDR_LOOPBACK)));
	assert_false(egr_ip4_is_unspec(htonl(1)));
	assert_int_equal(inet_pton(AF_INET6, "::", &a), 1);
	assert_true(egr_ip6_is_unspec((__u32 *)a.s6_addr32));
	assert_int_equal(inet_pton(AF_INET6, "::ffff:0.0.0.0", &a), 1);
	assert_true(egr_ip6_is_unspec((__u32 *)a.s6_addr32));
	assert_int_equal(inet_pton(AF_INET6, "::1", &a), 1);
	assert_false(egr_ip6_is_unspec((__u32 *)a.s6_addr32));
	assert_int_equal(inet_pton(AF_INET6, "::ffff:0.0.0.1", &a), 1);
	assert_false(egr_ip6_is_unspec((__u32 *)a.s6_addr32));
	assert_int_equal(inet_pton(AF_INET6, "::0.0.0.1", &a), 1);
	assert_false(egr_ip6_is_unspec((__u32 *)a.s6_addr32));
	assert_int_equal(inet_pton(AF_INET6, "::fffe:0.0.0.0", &a), 1);
	assert_false(egr_ip6_is_unspec((__u32 *)a.s6_addr32));
}

static void test_v4mapped(void **state)
{
	static const char *const not_mapped[] = {
		"::", "::1", "::1.2.3.4", "::fffe:1.2.3.4", "::1:ffff:1.2.3.4", "1::ffff:1.2.3.4",
		"64:ff9b::1.2.3.4", "2001:db8::ffff:1.2.3.4", "::ffff:0:1.2.3.4", "ffff::",
		"0:0:0:0:1:ffff:102:304", "::ff:1.2.3.4", "::ff00:1.2.3.4",
	};
	uint32_t v4, want;
	size_t i;

	assert_int_equal(mapped("::ffff:1.2.3.4", &v4), 1);
	assert_int_equal(inet_pton(AF_INET, "1.2.3.4", &want), 1);
	assert_int_equal(v4, want);

	assert_int_equal(mapped("::ffff:127.0.0.1", &v4), 1);
	assert_int_equal(v4, htonl(INADDR_LOOPBACK));
	assert_int_equal(mapped("::ffff:0.0.0.0", &v4), 1);
	assert_int_equal(v4, 0);
	assert_int_equal(mapped("::FFFF:FFFF:FFFF", &v4), 1);
	assert_int_equal(v4, 0xffffffff);
	assert_int_equal(mapped("0:0:0:0:0:ffff:c000:0280", &v4), 1);
	assert_int_equal(inet_pton(AF_INET, "192.0.2.128", &want), 1);
	assert_int_equal(v4, want);

	for (i = 0; i < sizeof(not_mapped) / sizeof(not_mapped[0]); i++) {
		if (mapped(not_mapped[i], &v4))
			print_error("%s taken as mapped\n", not_mapped[i]);
		assert_int_equal(mapped(not_mapped[i], &v4), 0);
		assert_int_equal(v4, 0xdeadbeef); /* untouched */
	}
}

static void test_sock_create_tcp_udp(void **state)
{
	static const uint32_t fams[] = { EGR_AF_INET, EGR_AF_INET6 };
	static const uint32_t flag_sets[] = { 0, EGR_SB_ALLOW_RAW | EGR_SB_ALLOW_ICMP |
						     EGR_SB_ALLOW_UDPLITE | EGR_SB_ALLOW_SCTP |
						     EGR_SB_ALLOW_MPTCP };
	size_t f, s;

	for (f = 0; f < 2; f++) {
		for (s = 0; s < 2; s++) {
			uint32_t fl = flag_sets[s], fam = fams[f];

			/* Always: TCP streams and UDP datagrams. */
			assert_int_equal(egr_sock_create_allows(fl, fam, EGR_SOCK_STREAM,
								EGR_IPPROTO_TCP),
					 EGR_ALLOW);
			assert_int_equal(egr_sock_create_allows(fl, fam, EGR_SOCK_DGRAM,
								EGR_IPPROTO_UDP),
					 EGR_ALLOW);
			/* Mismatched type and protocol. */
			assert_int_equal(egr_sock_create_allows(fl, fam, EGR_SOCK_DGRAM,
								EGR_IPPROTO_TCP),
					 EGR_DENY);
			assert_int_equal(egr_sock_create_allows(fl, fam, EGR_SOCK_STREAM,
								EGR_IPPROTO_UDP),
					 EGR_DENY);
			assert_int_equal(egr_sock_create_allows(fl, fam, EGR_SOCK_SEQPACKET,
								EGR_IPPROTO_TCP),
					 EGR_DENY);
			/* Unknown protocols. */
			assert_int_equal(egr_sock_create_allows(fl, fam, EGR_SOCK_STREAM, 0),
					 EGR_DENY);
			assert_int_equal(egr_sock_create_allows(fl, fam, EGR_SOCK_DGRAM, 99),
					 EGR_DENY);
			assert_int_equal(egr_sock_create_allows(fl, fam, 10, EGR_IPPROTO_TCP),
					 EGR_DENY);
		}
	}
}

static void test_sock_create_flagged(void **state)
{
	static const uint32_t fams[] = { EGR_AF_INET, EGR_AF_INET6 };
	static const struct {
		uint32_t type, protocol, flag; /* flag 0: never allowed */
	} cases[] = {
		{ EGR_SOCK_RAW, EGR_IPPROTO_ICMP, EGR_SB_ALLOW_RAW },
		{ EGR_SOCK_RAW, EGR_IPPROTO_ICMPV6, EGR_SB_ALLOW_RAW },
		{ EGR_SOCK_RAW, EGR_IPPROTO_TCP, EGR_SB_ALLOW_RAW },
		{ EGR_SOCK_RAW, EGR_IPPROTO_UDP, EGR_SB_ALLOW_RAW },
		{ EGR_SOCK_RAW, 255, EGR_SB_ALLOW_RAW },
		{ EGR_SOCK_RAW, 0, EGR_SB_ALLOW_RAW },
		{ EGR_SOCK_DGRAM, EGR_IPPROTO_ICMP, EGR_SB_ALLOW_ICMP },
		{ EGR_SOCK_DGRAM, EGR_IPPROTO_ICMPV6, EGR_SB_ALLOW_ICMP },
		{ EGR_SOCK_STREAM, EGR_IPPROTO_ICMP, 0 },
		{ EGR_SOCK_STREAM, EGR_IPPROTO_ICMPV6, 0 },
		{ EGR_SOCK_DGRAM, EGR_IPPROTO_UDPLITE, EGR_SB_ALLOW_UDPLITE },
		{ EGR_SOCK_STREAM, EGR_IPPROTO_SCTP, EGR_SB_ALLOW_SCTP },
		{ EGR_SOCK_SEQPACKET, EGR_IPPROTO_SCTP, EGR_SB_ALLOW_SCTP },
		{ EGR_SOCK_STREAM, EGR_IPPROTO_MPTCP, EGR_SB_ALLOW_MPTCP },
		{ EGR_SOCK_DGRAM, EGR_IPPROTO_MPTCP, 0 },
		{ EGR_SOCK_SEQPACKET, EGR_IPPROTO_MPTCP, 0 },
	};
	static const uint32_t all_flags[] = { EGR_SB_ALLOW_RAW, EGR_SB_ALLOW_ICMP,
					      EGR_SB_ALLOW_UDPLITE, EGR_SB_ALLOW_SCTP,
					      EGR_SB_ALLOW_MPTCP };
	size_t f, c, k;

	for (f = 0; f < 2; f++) {
		for (c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
			uint32_t fam = fams[f], t = cases[c].type, p = cases[c].protocol;
			uint32_t need = cases[c].flag, every = 0;

			/* Nothing flagged: denied. */
			assert_int_equal(egr_sock_create_allows(0, fam, t, p), EGR_DENY);
			/* Each single flag: allowed only by its own flag. */
			for (k = 0; k < 5; k++) {
				int want = (need && all_flags[k] == need) ? EGR_ALLOW : EGR_DENY;

				every |= all_flags[k];
				if (egr_sock_create_allows(all_flags[k], fam, t, p) != want)
					print_error("fam %u type %u proto %u flag %#x\n", fam, t, p,
						    all_flags[k]);
				assert_int_equal(egr_sock_create_allows(all_flags[k], fam, t, p),
						 want);
			}
			/* All flags: allowed unless never allowed. */
			assert_int_equal(egr_sock_create_allows(every, fam, t, p),
					 need ? EGR_ALLOW : EGR_DENY);
			/* All other flags: denied. */
			assert_int_equal(egr_sock_create_allows(every & ~need, fam, t, p),
					 EGR_DENY);
		}
	}
}

static void test_sock_create_family(void **state)
{
	static const uint32_t fams[] = { 0, 1 /* AF_UNIX */, 16 /* AF_NETLINK */,
					 17 /* AF_PACKET */, 3, 9, 11, 0xffffffff };
	size_t f;

	for (f = 0; f < sizeof(fams) / sizeof(fams[0]); f++) {
		assert_int_equal(egr_sock_create_allows(0xffffffff, fams[f], EGR_SOCK_STREAM,
							EGR_IPPROTO_TCP),
				 EGR_DENY);
		assert_int_equal(egr_sock_create_allows(0xffffffff, fams[f], EGR_SOCK_DGRAM,
							EGR_IPPROTO_UDP),
				 EGR_DENY);
		assert_int_equal(egr_sock_create_allows(0xffffffff, fams[f], EGR_SOCK_RAW, 0),
				 EGR_DENY);
	}
}

/* lsm_cgroup/socket_create's decision (loaded where the host can). */
static void test_family_allowed(void **state)
{
	uint64_t packet = 1ull << 17; /* AF_PACKET */

	assert_int_equal(egr_family_allowed(0, EGR_AF_UNIX, 0), EGR_ALLOW);
	assert_int_equal(egr_family_allowed(0, EGR_AF_INET, 0), EGR_ALLOW);
	assert_int_equal(egr_family_allowed(0, EGR_AF_INET6, 0), EGR_ALLOW);
	assert_int_equal(egr_family_allowed(0, 17, 0), EGR_DENY);     /* AF_PACKET */
	assert_int_equal(egr_family_allowed(0, 40, 0), EGR_DENY);     /* AF_VSOCK */
	assert_int_equal(egr_family_allowed(0, 44, 0), EGR_DENY);     /* AF_XDP */
	assert_int_equal(egr_family_allowed(packet, 17, 0), EGR_ALLOW);
	assert_int_equal(egr_family_allowed(packet, 16, 0), EGR_DENY); /* AF_NETLINK */
	assert_int_equal(egr_family_allowed(0, 17, 1), EGR_ALLOW);    /* kernel socket */
	assert_int_equal(egr_family_allowed(~0ull, 64, 0), EGR_DENY);
	assert_int_equal(egr_family_allowed(~0ull, -1, 0), EGR_DENY);
}

/* The last word of every hook (issue 12): quarantine denies everything,
 * audit mode lets a policy deny through and says so, nothing else changes. */
static void test_apply_mode(void **state)
{
	struct egr_sandbox sb = { .policy_id = 1 };
	int audited = 7;

	/* Enforce: the rule's verdict, normalised. */
	assert_int_equal(egr_apply_mode(&sb, EGR_ALLOW, 1, &audited), EGR_ALLOW);
	assert_int_equal(audited, 0);
	assert_int_equal(egr_apply_mode(&sb, EGR_DENY, 1, &audited), EGR_DENY);
	assert_int_equal(audited, 0);
	assert_int_equal(egr_apply_mode(&sb, 42, 1, &audited), EGR_DENY);

	/* Audit: a deny goes through, audited; an allow stays a plain allow. */
	sb.flags = EGR_SB_AUDIT | EGR_SB_INBOUND_ALLOW;
	assert_int_equal(egr_apply_mode(&sb, EGR_DENY, 1, &audited), EGR_ALLOW);
	assert_int_equal(audited, 1);
	assert_int_equal(egr_apply_mode(&sb, EGR_ALLOW, 1, &audited), EGR_ALLOW);
	assert_int_equal(audited, 0);
	/* ... but not what is not the allowlist's (no DNS proxy, inbound). */
	assert_int_equal(egr_apply_mode(&sb, EGR_DENY, 0, &audited), EGR_DENY);
	assert_int_equal(audited, 0);

	/* Quarantine: deny, allowed or audited alike; no sandbox: deny. */
	sb.quarantined = 1;
	assert_int_equal(egr_apply_mode(&sb, EGR_ALLOW, 1, &audited), EGR_DENY);
	assert_int_equal(egr_apply_mode(&sb, EGR_DENY, 1, &audited), EGR_DENY);
	assert_int_equal(audited, 0);
	sb.flags = 0;
	assert_int_equal(egr_apply_mode(&sb, EGR_ALLOW, 0, &audited), EGR_DENY);
	assert_int_equal(egr_apply_mode(NULL, EGR_ALLOW, 1, &audited), EGR_DENY);
	assert_int_equal(audited, 0);
}

/* Only a known allow reason allows: no reason, an unnumbered value below
 * the deny range, every deny reason and anything out of range deny. */
static void test_reason_verdict(void **state)
{
	(void)state;
	for (int r = EGR_R_ALLOW_RULE; r <= EGR_R_ALLOW_LAST; r++)
		assert_int_equal(egr_reason_verdict(r), EGR_ALLOW);
	assert_int_equal(egr_reason_verdict(EGR_R_NONE), EGR_DENY);
	for (int r = EGR_R_ALLOW_LAST + 1; r < EGR_R_DENY_BASE; r++)
		assert_int_equal(egr_reason_verdict(r), EGR_DENY);
	for (int r = EGR_R_DENY_BASE; r <= EGR_R_DENY_INBOUND + 50; r++)
		assert_int_equal(egr_reason_verdict(r), EGR_DENY);
	assert_int_equal(egr_reason_verdict(-1), EGR_DENY);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_family_allowed),
		cmocka_unit_test(test_apply_mode),
		cmocka_unit_test(test_reason_verdict),
		cmocka_unit_test(test_constants),
		cmocka_unit_test(test_proto_bit),
		cmocka_unit_test(test_rule_ports),
		cmocka_unit_test(test_rule_allow_all),
		cmocka_unit_test(test_rule_nranges),
		cmocka_unit_test(test_rule_expiry_null),
		cmocka_unit_test(test_v4mapped),
		cmocka_unit_test(test_unspec_to_loopback),
		cmocka_unit_test(test_unspec),
		cmocka_unit_test(test_sock_create_tcp_udp),
		cmocka_unit_test(test_sock_create_flagged),
		cmocka_unit_test(test_sock_create_family),
	};

	return cmocka_run_group_tests_name("decide", tests, NULL, NULL);
}
