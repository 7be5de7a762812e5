// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The device sandbox programs (bpf/netdev.bpf.c), the real object, run in
 * the kernel with BPF_PROG_TEST_RUN on frames built here, as a hostile guest
 * would send them: spoofed sources, fragments, IP options, VLAN tags,
 * non-IP ethertypes, IPv6 extension headers, DNS to other resolvers
 * (redirected to the sandbox's listener, checksums verified after the
 * rewrite), unsolicited inbound. Every attack has a twin that is let through the
 * same way. The maps are private copies (unpinned), filled as egressd fills
 * them.
 *
 * The test runs in a network namespace of its own with a veth pair whose
 * host side (vh, 10.77.0.1/30, fd77::1/64) is the sandbox's device, so the
 * reverse-path check (bpf_fib_lookup) asks real routes. Root; never skips.
 */
#include "netdev_fixture.h"

/* --- cases ------------------------------------------------------------------------- */

static void test_allowed_passes_denied_drops_and_is_reported(void **state)
{
	struct pkt ok = tcp4("10.77.0.2", "203.0.113.10", 40000, 443, 0x02);
	struct pkt bad_addr = tcp4("10.77.0.2", "203.0.113.11", 40000, 443, 0x02);
	struct pkt bad_port = tcp4("10.77.0.2", "203.0.113.10", 40000, 80, 0x02);
	struct egr_meter m0 = meter(), m1;

	deny_events();
	assert_int_equal(out(&ok), PASS);
	m1 = meter();
	assert_int_equal(m1.bytes_out - m0.bytes_out, 40); /* the IP packet, no Ethernet header */
	assert_int_equal(m1.pkts_out - m0.pkts_out, 1);
	assert_int_equal(out(&bad_addr), DROP);
	assert_int_equal(out(&bad_port), DROP);
	assert_int_equal(meter().backstop_drops - m1.backstop_drops, 2);
	assert_int_equal(deny_events(), 2);
}

static void test_udp_to_a_denied_port_drops(void **state)
{
	struct pkt ok = udp4("10.77.0.2", "203.0.113.10", 40001, 9000);
	struct pkt bad = udp4("10.77.0.2", "203.0.113.10", 40001, 9001);

	assert_int_equal(out(&ok), PASS);
	assert_int_equal(out(&bad), DROP);
}

static void test_dns_to_any_address_drops_without_a_proxy(void **state)
{
	struct pkt udp = udp4("10.77.0.2", "203.0.113.20", 40002, 53);
	struct pkt tcp = tcp4("10.77.0.2", "203.0.113.20", 40002, 53, 0x02);
	struct pkt other = udp4("10.77.0.2", "198.51.100.53", 40002, 53);
	__u64 c0 = counter(EGR_ND_CNT_DNS);

	assert_int_equal(out(&udp), DROP);
	assert_int_equal(out(&tcp), DROP);
	assert_int_equal(out(&other), DROP);
	assert_int_equal(counter(EGR_ND_CNT_DNS) - c0, 3);
}

static void test_spoofed_source_drops(void **state)
{
	struct pkt ok = tcp4("10.77.0.2", "203.0.113.10", 40003, 443, 0x02);
	struct pkt foreign = tcp4("192.0.2.99", "203.0.113.10", 40003, 443, 0x02);
	struct pkt hosts = tcp4("10.77.0.1", "203.0.113.10", 40003, 443, 0x02);
	struct pkt ok6 = tcp6("fd77::2", "2001:db8::10", 40003, 443, 0);
	struct pkt foreign6 = tcp6("fd99::2", "2001:db8::10", 40003, 443, 0);
	__u64 c0 = counter(EGR_ND_CNT_SPOOFED);

	assert_int_equal(out(&ok), PASS);
	assert_int_equal(out(&ok6), PASS);
	assert_int_equal(out(&foreign), DROP);
	assert_int_equal(out(&hosts), DROP);
	assert_int_equal(out(&foreign6), DROP);
	assert_int_equal(counter(EGR_ND_CNT_SPOOFED) - c0, 3);
}

static void test_fragments_and_ip_options_drop(void **state)
{
	struct pkt df = v4(EGR_IPPROTO_UDP, "10.77.0.2", "203.0.113.10", 40004, 9000, 0, 0x4000, 5);
	struct pkt first = v4(EGR_IPPROTO_UDP, "10.77.0.2", "203.0.113.10", 40004, 9000, 0, 0x2000, 5);
	struct pkt later = v4(EGR_IPPROTO_UDP, "10.77.0.2", "203.0.113.10", 40004, 9000, 0, 0x0010, 5);
	struct pkt opts = v4(EGR_IPPROTO_UDP, "10.77.0.2", "203.0.113.10", 40004, 9000, 0, 0, 6);
	__u64 f0 = counter(EGR_ND_CNT_FRAGMENT), o0 = counter(EGR_ND_CNT_IP_OPTIONS);

	assert_int_equal(out(&df), PASS);
	assert_int_equal(out(&first), DROP);
	assert_int_equal(out(&later), DROP);
	assert_int_equal(out(&opts), DROP);
	assert_int_equal(counter(EGR_ND_CNT_FRAGMENT) - f0, 2);
	assert_int_equal(counter(EGR_ND_CNT_IP_OPTIONS) - o0, 1);
}

static void test_vlan_and_non_ip_drop_arp_passes(void **state)
{
	struct pkt ok = tcp4("10.77.0.2", "203.0.113.10", 40005, 443, 0x02);
	struct pkt tagged, lldp, arp;
	__u64 v0 = counter(EGR_ND_CNT_VLAN), n0 = counter(EGR_ND_CNT_NOT_IP);

	/* The allowed packet again, behind an 802.1Q tag. */
	memset(&tagged, 0, sizeof(tagged));
	memcpy(tagged.b, ok.b, 12);
	tagged.b[12] = 0x81;
	tagged.b[13] = 0x00;
	tagged.b[15] = 5; /* VLAN 5 */
	memcpy(tagged.b + 16, ok.b + 12, ok.len - 12);
	tagged.len = ok.len + 4;
	eth(&lldp, 0x88CC);
	lldp.len = 60;
	eth(&arp, 0x0806);
	arp.len = 42;
	assert_int_equal(out(&ok), PASS);
	assert_int_equal(out(&tagged), DROP);
	assert_int_equal(out(&lldp), DROP);
	assert_int_equal(in(&lldp), DROP);
	assert_int_equal(out(&arp), PASS);
	assert_int_equal(counter(EGR_ND_CNT_VLAN) - v0, 1);
	assert_int_equal(counter(EGR_ND_CNT_NOT_IP) - n0, 2);
}

static void test_ipv6_extension_headers_drop(void **state)
{
	struct pkt ok = tcp6("fd77::2", "2001:db8::10", 40006, 443, 0);
	struct pkt hbh = tcp6("fd77::2", "2001:db8::10", 40006, 443, 60);
	struct pkt rthdr = tcp6("fd77::2", "2001:db8::10", 40006, 443, 43);
	struct pkt dstopt = tcp6("fd77::2", "2001:db8::10", 40006, 443, 60);
	struct pkt frag = tcp6("fd77::2", "2001:db8::10", 40006, 443, 44);

	__u64 e0 = counter(EGR_ND_CNT_EXT_HDR), f0 = counter(EGR_ND_CNT_FRAGMENT);

	hbh.b[14 + 6] = 0; /* the same 8-byte header, as hop-by-hop options */
	assert_int_equal(out(&ok), PASS);
	assert_int_equal(out(&hbh), DROP);
	assert_int_equal(out(&rthdr), DROP);
	assert_int_equal(out(&dstopt), DROP);
	assert_int_equal(out(&frag), DROP);
	/* Refused as extension headers, not by luck of a port that does not
	 * match (the ports read past the header would be garbage). */
	assert_int_equal(counter(EGR_ND_CNT_EXT_HDR) - e0, 3);
	assert_int_equal(counter(EGR_ND_CNT_FRAGMENT) - f0, 1);
}

static void test_inbound_only_replies_of_flows_it_opened(void **state)
{
	struct pkt syn = tcp4("10.77.0.2", "203.0.113.10", 40007, 443, 0x02);
	struct pkt synack = tcp4("203.0.113.10", "10.77.0.2", 443, 40007, 0x12);
	struct pkt stranger = tcp4("203.0.113.10", "10.77.0.2", 443, 22, 0x02);
	struct pkt new_conn = tcp4("203.0.113.10", "10.77.0.2", 443, 40007, 0x02);
	struct pkt uout = udp4("10.77.0.2", "203.0.113.10", 40008, 9000);
	struct pkt ureply = udp4("203.0.113.10", "10.77.0.2", 9000, 40008);
	struct pkt uother = udp4("198.51.100.1", "10.77.0.2", 9000, 40008);
	struct pkt early = tcp4("203.0.113.10", "10.77.0.2", 443, 40099, 0x12);

	assert_int_equal(in(&early), DROP); /* no flow yet */
	assert_int_equal(out(&syn), PASS);
	assert_int_equal(in(&synack), PASS);
	assert_int_equal(in(&stranger), DROP);
	assert_int_equal(in(&new_conn), DROP); /* a bare SYN on the flow's tuple */
	assert_int_equal(out(&uout), PASS);
	assert_int_equal(in(&ureply), PASS);
	assert_int_equal(in(&uother), DROP);
	assert_true(meter().inbound_drops >= 4);
}

static void test_update_ends_replies_of_a_removed_destination(void **state)
{
	struct pkt uout = udp4("10.77.0.2", "203.0.113.10", 40010, 9000);
	struct pkt ureply = udp4("203.0.113.10", "10.77.0.2", 9000, 40010);
	struct pkt syn = tcp4("10.77.0.2", "203.0.113.10", 40010, 443, 0x02);

	assert_int_equal(out(&uout), PASS);
	assert_int_equal(in(&ureply), PASS);
	del_rule4("203.0.113.10");
	assert_int_equal(in(&ureply), DROP);
	assert_int_equal(out(&syn), DROP);
	put_rule4("203.0.113.10", EGR_PROTO_TCP, 443, 443);
	assert_int_equal(out(&syn), PASS);
}

static void test_quota_and_missing_sandbox(void **state)
{
	struct pkt ok = tcp4("10.77.0.2", "203.0.113.10", 40011, 443, 0x02);
	struct egr_quota q = { .limit_bytes = 100 };
	__u32 id = SB;

	assert_int_equal(bpf_map__update_elem(skel->maps.egr_quota_sb, &id, sizeof(id), &q,
					      sizeof(q), BPF_ANY), 0);
	put_sandbox(0, 100);
	assert_int_equal(out(&ok), PASS); /* 40 */
	assert_int_equal(out(&ok), PASS); /* 80 */
	assert_int_equal(out(&ok), DROP); /* 120 > 100 */
	assert_true(meter().quota_drops >= 1);
	put_sandbox(0, 0);
	assert_int_equal(out(&ok), PASS);
	assert_int_equal(bpf_map__delete_elem(skel->maps.egr_sandboxes, &id, sizeof(id), 0), 0);
	assert_int_equal(out(&ok), DROP);
	assert_int_equal(in(&ok), DROP);
	put_sandbox(0, 0);
}


static void dns_round_trip(bool v6, __u8 proto, const char *guest, const char *resolver,
			   const char *listener, __u16 lport, __u16 gport)
{
	struct pkt q = dns_pkt(v6, proto, guest, resolver, gport, 53, false);
	struct pkt a = dns_pkt(v6, proto, listener, guest, lport, gport, false);
	struct pkt r;

	assert_int_equal(run_out(skel->progs.egr_nd_ingress, &q, &r), PASS);
	check_rewritten(&r, v6, v6 ? 24 : 16, listener, 2, lport);
	assert_int_equal(run_out(skel->progs.egr_nd_egress, &a, &r), PASS);
	check_rewritten(&r, v6, v6 ? 8 : 12, resolver, 0, 53);
}

static void test_dns_to_any_address_goes_to_the_listener_checksums_verify(void **state)
{
	__u64 r0 = counter(EGR_ND_CNT_REPLY);

	put_sandbox_dns(LPORT4, LPORT6);
	dns_round_trip(false, EGR_IPPROTO_UDP, "10.77.0.2", "198.51.100.53", "10.77.0.1", LPORT4,
		       40020);
	dns_round_trip(false, EGR_IPPROTO_TCP, "10.77.0.2", "203.0.113.20", "10.77.0.1", LPORT4,
		       40021);
	dns_round_trip(true, EGR_IPPROTO_UDP, "fd77::2", "2001:db8::53", "fd77::1", LPORT6, 40022);
	dns_round_trip(true, EGR_IPPROTO_TCP, "fd77::2", "2001:db8::53", "fd77::1", LPORT6, 40023);
	assert_int_equal(counter(EGR_ND_CNT_REPLY) - r0, 4);
	put_sandbox(0, 0);
}

static void test_dns_udp_without_checksum_keeps_none(void **state)
{
	struct pkt q = dns_pkt(false, EGR_IPPROTO_UDP, "10.77.0.2", "198.51.100.53", 40024, 53, true);
	struct pkt r;

	put_sandbox_dns(LPORT4, LPORT6);
	assert_int_equal(run_out(skel->progs.egr_nd_ingress, &q, &r), PASS);
	assert_int_equal(r.b[14 + 20 + 6] | r.b[14 + 20 + 7], 0); /* still "none" */
	assert_int_equal(r.b[14 + 22] << 8 | r.b[14 + 23], LPORT4);
	assert_int_equal(fold(sum16(r.b + 14, 20, 0)), 0xffff);
	put_sandbox(0, 0);
}

static void test_dns_hostile_direct_stray_and_no_listener(void **state)
{
	/* Straight to the listener: no port 53, the allowlist's (H is in none). */
	struct pkt direct = dns_pkt(false, EGR_IPPROTO_UDP, "10.77.0.2", "10.77.0.1", 40025, LPORT4,
				    false);
	/* From the listener to a guest port that asked nothing. */
	struct pkt stray = dns_pkt(false, EGR_IPPROTO_UDP, "10.77.0.1", "10.77.0.2", LPORT4, 40999,
				   false);
	/* A spoofed source to port 53: the reverse-path check comes first. */
	struct pkt spoofed = dns_pkt(false, EGR_IPPROTO_UDP, "10.77.0.9", "198.51.100.53", 40026, 53,
				     false);
	struct pkt q6 = dns_pkt(true, EGR_IPPROTO_UDP, "fd77::2", "2001:db8::53", 40027, 53, false);
	struct pkt q4 = dns_pkt(false, EGR_IPPROTO_UDP, "10.77.0.2", "198.51.100.53", 40028, 53,
				false);
	struct pkt r;
	__u64 s0 = counter(EGR_ND_CNT_SPOOFED), d0 = counter(EGR_ND_CNT_DNS);

	put_sandbox_dns(LPORT4, 0);
	assert_int_equal(out(&direct), DROP);
	assert_int_equal(in(&stray), DROP);
	assert_int_equal(out(&spoofed), DROP);
	assert_int_equal(counter(EGR_ND_CNT_SPOOFED) - s0, 1);
	/* No IPv6 listener (port 0): IPv6 DNS dropped, untouched. */
	assert_int_equal(run_out(skel->progs.egr_nd_ingress, &q6, &r), DROP);
	assert_int_equal(counter(EGR_ND_CNT_DNS) - d0, 1);
	/* Quarantined: no DNS either. */
	put_entry((struct egr_sandbox){ .dns_port4 = LPORT4, .quarantined = 1 });
	assert_int_equal(out(&q4), DROP);
	put_sandbox(0, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_allowed_passes_denied_drops_and_is_reported),
		cmocka_unit_test(test_udp_to_a_denied_port_drops),
		cmocka_unit_test(test_dns_to_any_address_drops_without_a_proxy),
		cmocka_unit_test(test_spoofed_source_drops),
		cmocka_unit_test(test_fragments_and_ip_options_drop),
		cmocka_unit_test(test_vlan_and_non_ip_drop_arp_passes),
		cmocka_unit_test(test_ipv6_extension_headers_drop),
		cmocka_unit_test(test_inbound_only_replies_of_flows_it_opened),
		cmocka_unit_test(test_update_ends_replies_of_a_removed_destination),
		cmocka_unit_test(test_quota_and_missing_sandbox),
		cmocka_unit_test(test_dns_to_any_address_goes_to_the_listener_checksums_verify),
		cmocka_unit_test(test_dns_udp_without_checksum_keeps_none),
		cmocka_unit_test(test_dns_hostile_direct_stray_and_no_listener),
	};

	return cmocka_run_group_tests_name("netdev", tests, setup, teardown);
}
