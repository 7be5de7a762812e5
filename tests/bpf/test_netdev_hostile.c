// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Red-team cases against the device sandbox programs (bpf/netdev.bpf.c): the
 * frames a hostile guest kernel sends to get past the passes the parser
 * grants without the allowlist (neighbour and router discovery) and the DNS
 * redirect, run with BPF_PROG_TEST_RUN on the real object (netdev_fixture.h,
 * as tests/bpf/test_netdev.c). Each attack
 * has a twin the program lets through the same way.
 *
 * The test runs in a network namespace of its own: vh (10.77.0.1/30,
 * fd77::1/64) is the sandbox's device, and a second veth d0 routes
 * 2001:db8::/32, so an address there is one the host would forward to.
 * Root; never skips.
 */

#include <stdbool.h>

#include "netdev_fixture.h"

/* An Ethernet frame carrying IPv6 (next header nh, hop limit hl) from s to
 * d, then n bytes of l4. */
static struct pkt v6(const char *s, const char *d, __u8 nh, __u8 hl, const unsigned char *l4,
		     size_t n)
{
	struct pkt p;
	unsigned char *ip;

	memset(&p, 0, sizeof(p));
	p.b[0] = 0x33;
	p.b[6] = 0x02;
	p.b[11] = 2;
	p.b[12] = 0x86;
	p.b[13] = 0xdd;
	ip = p.b + 14;
	ip[0] = 0x60;
	ip[4] = (__u8)(n >> 8);
	ip[5] = (__u8)n;
	ip[6] = nh;
	ip[7] = hl;
	assert_int_equal(inet_pton(AF_INET6, s, ip + 8), 1);
	assert_int_equal(inet_pton(AF_INET6, d, ip + 24), 1);
	memcpy(ip + 40, l4, n);
	p.len = 14 + 40 + n;
	return p;
}

/* ICMPv6 of type t with 16 bytes after its header (a target address, or
 * the data a hostile guest hides there) and a marker. */
static struct pkt icmp6(const char *s, const char *d, __u8 t, __u8 hl)
{
	unsigned char m[8 + 16 + 24] = { t };

	memcpy(m + 24, "exfiltrated-bytes-here..", 24);
	return v6(s, d, 58, hl, m, sizeof(m));
}

/* A UDP/IPv4 DNS query of 40 IP bytes from the guest to d:53 (or, answer:
 * from the listener 10.77.0.1:LPORT4 to the guest's port). No checksums:
 * the program's verdicts and meters are what this looks at. */
static struct pkt dns4(const char *s, const char *d, __u16 sp, __u16 dp)
{
	struct pkt p;
	unsigned char *ip;
	struct in_addr a;

	memset(&p, 0, sizeof(p));
	p.b[0] = 0x02;
	p.b[6] = 0x02;
	p.b[11] = 1;
	p.b[12] = 0x08;
	ip = p.b + 14;
	ip[0] = 0x45;
	ip[3] = 40;
	ip[8] = 64;
	ip[9] = 17;
	assert_int_equal(inet_pton(AF_INET, s, &a), 1);
	memcpy(ip + 12, &a, 4);
	assert_int_equal(inet_pton(AF_INET, d, &a), 1);
	memcpy(ip + 16, &a, 4);
	ip[20] = sp >> 8;
	ip[21] = sp & 0xff;
	ip[22] = dp >> 8;
	ip[23] = dp & 0xff;
	ip[25] = 20;
	memcpy(ip + 28, "\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00", 12);
	p.len = 14 + 40;
	return p;
}

/* ICMP of type t, id 0x4242, with 24 bytes of data (an error's "quoted"
 * packet, or whatever a guest hides there). */
static struct pkt icmp4(const char *s, const char *d, __u8 t)
{
	struct pkt p = dns4(s, d, 0, 0);
	unsigned char *ip = p.b + 14;

	ip[9] = 1;
	memset(ip + 20, 0, 20);
	ip[20] = t;
	ip[24] = 0x42;
	ip[25] = 0x42;
	memcpy(ip + 28, "exfiltrated-", 12);
	return p;
}

/* The fixture's namespace and object, and a second veth d0 that routes
 * 2001:db8::/32 (an address there is one the host would forward to) and a
 * narrower range of one that goes through vh. */
static int setup_hostile(void **state)
{
	if (setup(state))
		return -1;
	if (sh("ip link add d0 type veth peer name d1") || sh("ip link set d0 up") ||
	    sh("ip link set d1 up") || sh("ip -6 route add 2001:db8::/32 dev d0") ||
	    /* A wide route through the device, a narrower one of its range
	     * through another (another sandbox's, say). */
	    sh("ip route add 10.99.0.0/16 dev vh") || sh("ip route add 10.99.5.0/24 dev d0") ||
	    sh("ip -6 route add fd99::/32 dev vh") || sh("ip -6 route add fd99:0:5::/48 dev d0"))
		return -1;
	/* UDP 9000 of 203.0.113.10 (the fixture's) and of 2001:db8::10. */
	put_rule6("2001:db8::10", EGR_PROTO_UDP, 9000, 9000);
	return 0;
}

/*
 * Neighbour discovery passes without the allowlist, as the link needs it;
 * with hop limit 255 to an address the host forwards to, it would leave
 * the link (the host forwards it, hop limit 254): an ICMPv6 channel to any
 * host, from any source, unmetered. Only what stays on the link passes.
 */
static void test_ndisc_to_a_forwarded_address_drops(void **state)
{
	struct pkt ns_out = icmp6("fd77::2", "2001:db8::10", 135, 255);
	struct pkt na_out = icmp6("fd77::2", "2001:db8::10", 136, 255);
	struct pkt rs_out = icmp6("fd99::9", "2001:db8::10", 133, 255);
	struct pkt ns_ll = icmp6("fe80::2", "2001:db8::10", 135, 255);
	/* The twins: what a guest's kernel really sends. */
	struct pkt ns_mcast = icmp6("fd77::2", "ff02::1:ff00:1", 135, 255);
	struct pkt ns_dad = icmp6("::", "ff02::1:ff00:2", 135, 255);
	struct pkt ns_nud = icmp6("fd77::2", "fd77::1", 135, 255);
	struct pkt ns_nud_ll = icmp6("fe80::2", "fe80::1", 135, 255);
	struct pkt na_reply = icmp6("fd77::2", "fd77::1", 136, 255);
	struct pkt rs = icmp6("fe80::2", "ff02::2", 133, 255);
	__u64 nd0 = counter(EGR_ND_CNT_ND);
	struct egr_meter m0 = meter();

	assert_int_equal(out(&ns_out), DROP);
	assert_int_equal(out(&na_out), DROP);
	assert_int_equal(out(&rs_out), DROP);
	assert_int_equal(out(&ns_ll), DROP);
	assert_int_equal(out(&ns_mcast), PASS);
	assert_int_equal(out(&ns_dad), PASS);
	assert_int_equal(out(&ns_nud), PASS);
	assert_int_equal(out(&ns_nud_ll), PASS);
	assert_int_equal(out(&na_reply), PASS);
	assert_int_equal(out(&rs), PASS);
	assert_int_equal(counter(EGR_ND_CNT_ND) - nd0, 6);
	/* Judged as ICMPv6 that is not echo: metered drops. */
	assert_int_equal(meter().backstop_drops - m0.backstop_drops, 4);
}

/*
 * A guest is no router: a router advertisement (or a redirect) from it
 * would make the host side route through the guest where it accepts them
 * (accept_ra 2 on a forwarding host, the default of a host that takes its
 * own route from RAs). Towards the guest, the host's RAs still pass.
 */
static void test_router_advertisement_from_the_guest_drops(void **state)
{
	struct pkt ra = icmp6("fe80::2", "ff02::1", 134, 255);
	struct pkt ra_in = icmp6("fe80::1", "ff02::1", 134, 255);
	struct pkt rs = icmp6("fe80::2", "ff02::2", 133, 255);

	assert_int_equal(out(&ra), DROP);
	assert_int_equal(out(&rs), PASS);
	assert_int_equal(in(&ra_in), PASS);
}

/*
 * DNS of a device sandbox is egress like any other: its queries count in
 * bytes_out and against the quota (a cgroup sandbox's DNS to the proxy
 * does, bpf/egressd.bpf.c), its answers in bytes_in. Unmetered, a guest
 * over its quota would still push names (data) out through the proxy.
 */
static void test_dns_is_metered_and_charged_to_the_quota(void **state)
{
	struct pkt q = dns4("10.77.0.2", "198.51.100.53", 40100, 53);
	struct pkt a = dns4("10.77.0.1", "10.77.0.2", LPORT4, 40100);
	struct egr_quota quota = { .limit_bytes = 100 };
	struct egr_meter m0 = meter(), m1;
	__u32 id = SB;

	put_entry((struct egr_sandbox){ .dns_port4 = LPORT4 });
	assert_int_equal(out(&q), PASS);
	assert_int_equal(in(&a), PASS);
	m1 = meter();
	assert_int_equal(m1.bytes_out - m0.bytes_out, 40);
	assert_int_equal(m1.pkts_out - m0.pkts_out, 1);
	assert_int_equal(m1.bytes_in - m0.bytes_in, 40);
	assert_int_equal(m1.pkts_in - m0.pkts_in, 1);
	/* A quota of 100 bytes: two queries fit, the third does not. */
	assert_int_equal(bpf_map__update_elem(skel->maps.egr_quota_sb, &id, sizeof(id), &quota,
					      sizeof(quota), BPF_ANY), 0);
	put_entry((struct egr_sandbox){ .dns_port4 = LPORT4, .quota_bytes = 100 });
	assert_int_equal(out(&q), PASS);
	assert_int_equal(out(&q), PASS);
	assert_int_equal(out(&q), DROP);
	assert_int_equal(meter().quota_drops - m1.quota_drops, 1);
	put_entry((struct egr_sandbox){ 0 });
}

/*
 * The reverse-path check asked for a route of the source through this
 * device (BPF_FIB_LOOKUP_OUTPUT with the device as oif: IPv4's lookup skips
 * the routes through other devices and backtracks to a shorter prefix).
 * An IPv4 source inside a wide route of the device whose own, narrower
 * route goes elsewhere (another sandbox's subnet carved out of it) passed;
 * IPv6's lookup did not backtrack (kept as a guard). Strict: the host's
 * best route to the source must be this device.
 */
static void test_spoofed_source_of_a_narrower_route_elsewhere_drops(void **state)
{
	unsigned char u[8] = { 0x9c, 0x40, 0x23, 0x28, 0, 8, 0, 0 }; /* 40000 -> 9000 */
	struct pkt other4 = dns4("10.99.5.7", "203.0.113.10", 40000, 9000);
	struct pkt mine4 = dns4("10.99.7.7", "203.0.113.10", 40000, 9000);
	struct pkt guest4 = dns4("10.77.0.2", "203.0.113.10", 40000, 9000);
	struct pkt other6 = v6("fd99:0:5::7", "2001:db8::10", 17, 64, u, sizeof(u));
	struct pkt mine6 = v6("fd99:0:7::7", "2001:db8::10", 17, 64, u, sizeof(u));
	struct pkt guest6 = v6("fd77::2", "2001:db8::10", 17, 64, u, sizeof(u));
	__u64 s0 = counter(EGR_ND_CNT_SPOOFED);

	assert_int_equal(out(&other4), DROP);
	assert_int_equal(out(&other6), DROP);
	assert_int_equal(counter(EGR_ND_CNT_SPOOFED) - s0, 2);
	/* The twins: sources whose best route is this device. */
	assert_int_equal(out(&mine4), PASS);
	assert_int_equal(out(&guest4), PASS);
	assert_int_equal(out(&mine6), PASS);
	assert_int_equal(out(&guest6), PASS);
}

/*
 * ICMP from the guest: only echo requests, only under allow_sockets ICMP,
 * only to a HOST:* address; errors (which carry data: the "quoted"
 * packet), timestamps and the rest never. Towards it, only the echo reply
 * of an echo it sent. (Held: no change needed; the suite had no ICMP case.)
 */
static void test_icmp_only_echo_to_a_host_star_address(void **state)
{
	struct pkt echo = icmp4("10.77.0.2", "203.0.113.30", 8);
	struct pkt echo_denied = icmp4("10.77.0.2", "203.0.113.31", 8);
	struct pkt unreach = icmp4("10.77.0.2", "203.0.113.30", 3);
	struct pkt tstamp = icmp4("10.77.0.2", "203.0.113.30", 13);
	struct pkt reply = icmp4("203.0.113.30", "10.77.0.2", 0);
	struct pkt reply_other = icmp4("203.0.113.31", "10.77.0.2", 0);
	struct pkt err_in = icmp4("203.0.113.30", "10.77.0.2", 3);

	put_rule4("203.0.113.30", EGR_PROTO_ANY, 0, 0xffff);  /* HOST:* */
	put_entry((struct egr_sandbox){ 0 });
	assert_int_equal(in(&reply), DROP);       /* no echo sent yet */
	assert_int_equal(out(&echo), DROP);       /* ICMP not allowed by the policy */
	put_entry((struct egr_sandbox){ .flags = EGR_SB_ALLOW_ICMP });
	assert_int_equal(out(&echo), PASS);       /* the twin */
	assert_int_equal(in(&reply), PASS);       /* and its reply */
	assert_int_equal(out(&echo_denied), DROP);
	assert_int_equal(out(&unreach), DROP);
	assert_int_equal(out(&tstamp), DROP);
	assert_int_equal(in(&reply_other), DROP);
	assert_int_equal(in(&err_in), DROP);
	put_entry((struct egr_sandbox){ 0 });
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ndisc_to_a_forwarded_address_drops),
		cmocka_unit_test(test_router_advertisement_from_the_guest_drops),
		cmocka_unit_test(test_dns_is_metered_and_charged_to_the_quota),
		cmocka_unit_test(test_spoofed_source_of_a_narrower_route_elsewhere_drops),
		cmocka_unit_test(test_icmp_only_echo_to_a_host_star_address),
	};

	return cmocka_run_group_tests_name("netdev_hostile", tests, setup_hostile, teardown);
}
