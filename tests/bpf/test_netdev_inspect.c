// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Inspection of device sandboxes (docs/inspect.md "Device sandboxes") in
 * the real device programs (bpf/netdev.bpf.c), run with BPF_PROG_TEST_RUN on
 * frames a hostile guest could send: every TCP packet the allowlist allows
 * goes to the inspecting listener (10.77.0.1 / fd77::1, the entry's inspect
 * ports) with both checksums right, its SYN publishes the real destination
 * for the proxy (egr_inspect_orig), the listener's packets go back with the
 * real destination as source; straight to the listener, a packet no SYN
 * went before, one on another connection's entry, a reply to nothing, QUIC,
 * no listener, a listener that is not egressd's one of this sandbox,
 * quarantine: dropped. Each has a twin that passes the same
 * way. Root; never skips (netdev_fixture.h).
 */
#include <sys/socket.h>

#include "netdev_fixture.h"

#define LI4 5443
#define LI6 5446
#define SYN 0x02
#define SYNACK 0x12
#define ACK 0x10
#define PSHACK 0x18
#define RST 0x04
#define FINACK 0x11

/* The proxy's listeners as egressd opens them (inspect_accept.c): on vh's
 * addresses, bound to vh, and marked as this sandbox's in egr_listen_sk
 * (kernel/listen.c). mark: write the mark; sandbox: whose. */
static int listener(bool v6, __u16 port, bool mark, __u32 sandbox)
{
	struct sockaddr_storage ss = { 0 };
	struct egr_listen_mark m = { .sandbox_id = sandbox, .port = port,
				     .kind = EGR_LISTEN_INSPECT, .protocol = EGR_IPPROTO_TCP };
	int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0), one = 1;
	socklen_t sl;

	assert_true(fd >= 0);
	if (v6) {
		struct sockaddr_in6 *a = (void *)&ss;

		a->sin6_family = AF_INET6;
		a->sin6_port = htons(port);
		ip6("fd77::1", &a->sin6_addr);
		sl = sizeof(*a);
		assert_int_equal(setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)), 0);
	} else {
		struct sockaddr_in *a = (void *)&ss;

		a->sin_family = AF_INET;
		a->sin_port = htons(port);
		a->sin_addr.s_addr = ip4("10.77.0.1");
		sl = sizeof(*a);
	}
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_BINDTOIFINDEX, &ifindex, sizeof(ifindex)), 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&ss, sl), 0);
	assert_int_equal(listen(fd, 8), 0);
	if (mark)
		assert_int_equal(bpf_map__update_elem(skel->maps.egr_listen_sk, &fd, sizeof(fd), &m,
						      sizeof(m), BPF_ANY), 0);
	return fd;
}

static int setup_listeners(void **state)
{
	if (setup(state))
		return -1;
	listener(false, LI4, true, SB);
	listener(true, LI6, true, SB);
	return 0;
}

static void put_inspected(__u16 port4, __u16 port6)
{
	put_entry((struct egr_sandbox){ .flags = EGR_SB_INSPECT, .inspect_port4 = port4,
					.inspect_port6 = port6 });
}

static struct pkt tcp_seg(bool v6, const char *s, const char *d, __u16 sp, __u16 dp, __u8 flags)
{
	return seg_pkt(v6, EGR_IPPROTO_TCP, s, d, sp, dp, flags, false);
}

/* The proxy's record for the guest's (address, port): 0 and *o, or -1. */
static int orig_of(bool v6, const char *guest, __u16 port, struct egr_inspect_orig *o)
{
	struct egr_inspect_key k = { .sandbox_id = SB, .port = port,
				     .family = v6 ? EGR_AF_INET6 : EGR_AF_INET };

	if (v6)
		ip6(guest, k.addr);
	else
		*(__u32 *)k.addr = ip4(guest);
	return bpf_map__lookup_elem(skel->maps.egr_inspect_orig, &k, sizeof(k), o, sizeof(*o), 0)
		       ? -1 : 0;
}

static void check_orig(bool v6, const char *guest, __u16 port, const char *dest, __u16 dport)
{
	struct egr_inspect_orig o;
	unsigned char a[16] = { 0 };

	assert_int_equal(orig_of(v6, guest, port, &o), 0);
	if (v6)
		ip6(dest, a);
	else
		*(__u32 *)a = ip4(dest);
	assert_memory_equal(o.addr, a, v6 ? 16 : 4);
	assert_int_equal(o.port, dport);
	assert_int_equal(o.family, v6 ? EGR_AF_INET6 : EGR_AF_INET);
}

static __u64 insp_count(enum egr_nd_dns_counter c)
{
	int ncpu = libbpf_num_possible_cpus();
	__u64 vals[ncpu > 0 ? ncpu : 1], sum = 0;
	__u32 key = c;

	assert_int_equal(bpf_map__lookup_elem(skel->maps.egr_nd_dns_counters, &key, sizeof(key),
					      vals, sizeof(__u64) * (size_t)ncpu, 0), 0);
	for (int i = 0; i < ncpu; i++)
		sum += vals[i];
	return sum;
}

/* The guest's SYN, the listener's SYN-ACK, the guest's data: each through
 * its program, rewritten both ways with checksums that verify. */
static void round_trip(bool v6, const char *guest, const char *dest, const char *listener,
		       __u16 lport, __u16 gport)
{
	struct pkt syn = tcp_seg(v6, guest, dest, gport, 443, SYN);
	struct pkt sa = tcp_seg(v6, listener, guest, lport, gport, SYNACK);
	struct pkt data = tcp_seg(v6, guest, dest, gport, 443, PSHACK);
	struct pkt r;

	assert_int_equal(run_out(skel->progs.egr_nd_ingress, &syn, &r), PASS);
	check_rewritten(&r, v6, v6 ? 24 : 16, listener, 2, lport);
	check_orig(v6, guest, gport, dest, 443);
	assert_int_equal(run_out(skel->progs.egr_nd_egress, &sa, &r), PASS);
	check_rewritten(&r, v6, v6 ? 8 : 12, dest, 0, 443);
	assert_int_equal(run_out(skel->progs.egr_nd_ingress, &data, &r), PASS);
	check_rewritten(&r, v6, v6 ? 24 : 16, listener, 2, lport);
}

static void test_inspect_to_the_listener_and_back_checksums_verify(void **state)
{
	__u64 r0 = insp_count(EGR_ND_INSP_REDIRECT), a0 = insp_count(EGR_ND_INSP_REPLY);
	struct egr_meter m0 = meter(), m1;

	put_inspected(LI4, LI6);
	round_trip(false, "10.77.0.2", "203.0.113.10", "10.77.0.1", LI4, 41000);
	round_trip(true, "fd77::2", "2001:db8::10", "fd77::1", LI6, 41001);
	assert_int_equal(insp_count(EGR_ND_INSP_REDIRECT) - r0, 4);
	assert_int_equal(insp_count(EGR_ND_INSP_REPLY) - a0, 2);
	/* Metered both ways as the sandbox's traffic. */
	m1 = meter();
	assert_true(m1.pkts_out - m0.pkts_out == 4 && m1.bytes_in > m0.bytes_in);
	put_sandbox(0, 0);
}

static void test_inspect_uninspected_twin_goes_straight(void **state)
{
	struct pkt syn = tcp_seg(false, "10.77.0.2", "203.0.113.10", 41010, 443, SYN);
	struct egr_inspect_orig o;
	struct pkt r;

	/* The same SYN without network.inspect: through, untouched. */
	put_sandbox(0, 0);
	assert_int_equal(run_out(skel->progs.egr_nd_ingress, &syn, &r), PASS);
	assert_memory_equal(r.b, syn.b, syn.len);
	assert_int_equal(orig_of(false, "10.77.0.2", 41010, &o), -1);
}

static void test_inspect_listener_straight_and_denied_destinations_drop(void **state)
{
	/* Straight to the listener, even where the allowlist covers it. */
	struct pkt direct = tcp_seg(false, "10.77.0.2", "10.77.0.1", 41020, LI4, SYN);
	struct pkt direct6 = tcp_seg(true, "fd77::2", "fd77::1", 41021, LI6, SYN);
	struct pkt twin = tcp_seg(false, "10.77.0.2", "203.0.113.10", 41022, 443, SYN);
	struct pkt denied = tcp_seg(false, "10.77.0.2", "203.0.113.99", 41023, 443, SYN);
	struct pkt spoofed = tcp_seg(false, "10.77.0.9", "203.0.113.10", 41024, 443, SYN);
	struct egr_inspect_orig o;
	__u64 x0 = insp_count(EGR_ND_INSP_REFUSED);

	put_rule4("10.77.0.1", EGR_PROTO_TCP, 1, 65535);
	put_inspected(LI4, LI6);
	assert_int_equal(out(&direct), DROP);
	assert_int_equal(out(&direct6), DROP);
	assert_int_equal(insp_count(EGR_ND_INSP_REFUSED) - x0, 2);
	assert_int_equal(orig_of(false, "10.77.0.2", 41020, &o), -1);
	assert_int_equal(out(&twin), PASS);
	/* The allowlist still judges first; a spoofed source never gets an
	 * entry (the reverse-path check comes before anything). */
	assert_int_equal(out(&denied), DROP);
	assert_int_equal(orig_of(false, "10.77.0.2", 41023, &o), -1);
	assert_int_equal(out(&spoofed), DROP);
	assert_int_equal(orig_of(false, "10.77.0.9", 41024, &o), -1);
	del_rule4("10.77.0.1");
	put_sandbox(0, 0);
}

static void test_inspect_no_flow_past_the_proxy(void **state)
{
	/* A packet no SYN went before (an ACK, a RST, data): no entry. */
	struct pkt ack = tcp_seg(false, "10.77.0.2", "203.0.113.10", 41030, 443, ACK);
	struct pkt rst = tcp_seg(false, "10.77.0.2", "203.0.113.10", 41031, 443, RST);
	struct pkt syn = tcp_seg(false, "10.77.0.2", "203.0.113.10", 41032, 443, SYN);
	/* On the entry 41032 opened, to another allowed destination. */
	struct pkt other = tcp_seg(false, "10.77.0.2", "203.0.113.11", 41032, 443, PSHACK);
	struct pkt other_port = tcp_seg(false, "10.77.0.2", "203.0.113.10", 41032, 8443, PSHACK);
	struct pkt same = tcp_seg(false, "10.77.0.2", "203.0.113.10", 41032, 443, PSHACK);
	struct pkt fin = tcp_seg(false, "10.77.0.2", "203.0.113.10", 41032, 443, FINACK);
	/* The port used again for another destination: a new SYN, judged
	 * (and published) as the new connection. */
	struct pkt resyn = tcp_seg(false, "10.77.0.2", "203.0.113.11", 41032, 443, SYN);
	struct pkt r;

	put_rule4("203.0.113.11", EGR_PROTO_TCP, 443, 443);
	{
		struct egr_lpm4_key k = { .prefixlen = EGR_LPM_POLICY_BITS + 32,
					  .policy_id = POLICY };
		struct egr_rule rule = { .nranges = 1 };
		__u32 a = ip4("203.0.113.10");

		rule.ranges[0] = (struct egr_port_range){ .lo = 443, .hi = 8443,
							  .protos = EGR_PROTO_TCP };
		memcpy(k.addr, &a, 4);
		assert_int_equal(bpf_map__update_elem(skel->maps.egr_allow4, &k, sizeof(k), &rule,
						      sizeof(rule), BPF_ANY), 0);
	}
	put_inspected(LI4, LI6);
	assert_int_equal(out(&ack), DROP);
	assert_int_equal(out(&rst), DROP);
	assert_int_equal(out(&syn), PASS);
	assert_int_equal(out(&other), DROP);
	assert_int_equal(out(&other_port), DROP);
	/* The twins: the connection's own packets, FIN included, to the proxy. */
	assert_int_equal(run_out(skel->progs.egr_nd_ingress, &same, &r), PASS);
	check_rewritten(&r, false, 16, "10.77.0.1", 2, LI4);
	assert_int_equal(run_out(skel->progs.egr_nd_ingress, &fin, &r), PASS);
	check_rewritten(&r, false, 16, "10.77.0.1", 2, LI4);
	assert_int_equal(out(&resyn), PASS);
	check_orig(false, "10.77.0.2", 41032, "203.0.113.11", 443);
	/* The old destination's packets on the reused port no longer pass. */
	assert_int_equal(out(&same), DROP);
	put_rule4("203.0.113.10", EGR_PROTO_TCP, 443, 443);
	del_rule4("203.0.113.11");
	put_sandbox(0, 0);
}

static void test_inspect_stray_replies_quic_no_listener_quarantine(void **state)
{
	/* From the listener to a guest port that opened nothing. */
	struct pkt stray = tcp_seg(false, "10.77.0.1", "10.77.0.2", LI4, 41999, SYNACK);
	struct pkt syn6 = tcp_seg(true, "fd77::2", "2001:db8::10", 41040, 443, SYN);
	struct pkt syn4 = tcp_seg(false, "10.77.0.2", "203.0.113.10", 41041, 443, SYN);
	struct pkt quic = udp4("10.77.0.2", "203.0.113.10", 41042, 443);
	struct pkt udp = udp4("10.77.0.2", "203.0.113.10", 41043, 9000);
	struct egr_lpm4_key k = { .prefixlen = EGR_LPM_POLICY_BITS + 32, .policy_id = POLICY };
	struct egr_rule rule = { .nranges = 2 };
	__u32 a = ip4("203.0.113.10");

	/* UDP 443 allowlisted, so that only inspection refuses it. */
	rule.ranges[0] = (struct egr_port_range){ .lo = 443, .hi = 443, .protos = EGR_PROTO_ANY };
	rule.ranges[1] = (struct egr_port_range){ .lo = 9000, .hi = 9000, .protos = EGR_PROTO_UDP };
	memcpy(k.addr, &a, 4);
	assert_int_equal(bpf_map__update_elem(skel->maps.egr_allow4, &k, sizeof(k), &rule,
					      sizeof(rule), BPF_ANY), 0);
	put_inspected(LI4, 0);
	assert_int_equal(in(&stray), DROP);
	assert_int_equal(out(&quic), DROP);
	assert_int_equal(out(&udp), PASS); /* other UDP: judged as before */
	/* No IPv6 listener (port 0): IPv6 TCP dropped; IPv4 the twin. */
	assert_int_equal(out(&syn6), DROP);
	assert_int_equal(out(&syn4), PASS);
	/* Quarantined: nothing goes to the proxy either. */
	put_entry((struct egr_sandbox){ .flags = EGR_SB_INSPECT, .inspect_port4 = LI4,
					.quarantined = 1 });
	assert_int_equal(out(&syn4), DROP);
	/* Not inspected: UDP 443 passes as the allowlist says. */
	put_sandbox(0, 0);
	assert_int_equal(out(&quic), PASS);
	put_rule4("203.0.113.10", EGR_PROTO_TCP, 443, 443);
	{
		struct egr_rule back = { .nranges = 2 };

		back.ranges[0] = (struct egr_port_range){ .lo = 443, .hi = 443,
							  .protos = EGR_PROTO_TCP };
		back.ranges[1] = (struct egr_port_range){ .lo = 9000, .hi = 9000,
							  .protos = EGR_PROTO_UDP };
		assert_int_equal(bpf_map__update_elem(skel->maps.egr_allow4, &k, sizeof(k), &back,
						      sizeof(back), BPF_ANY), 0);
	}
}

static void test_inspect_only_to_egressds_listener_of_the_sandbox(void **state)
{
	struct pkt syn = tcp_seg(false, "10.77.0.2", "203.0.113.10", 41050, 443, SYN);
	struct pkt syn2 = tcp_seg(false, "10.77.0.2", "203.0.113.10", 41051, 443, SYN);
	struct pkt syn3 = tcp_seg(false, "10.77.0.2", "203.0.113.10", 41052, 443, SYN);
	struct egr_inspect_orig o;
	int unmarked = listener(false, LI4 + 10, false, SB);
	int other = listener(false, LI4 + 11, true, SB + 1);

	/* An entry pointing at a port someone else listens on (a socket
	 * without egressd's mark), or at another sandbox's listener, or at
	 * nothing: the SYN drops and nothing is published. */
	put_inspected(LI4 + 10, 0);
	assert_int_equal(out(&syn), DROP);
	assert_int_equal(orig_of(false, "10.77.0.2", 41050, &o), -1);
	put_inspected(LI4 + 11, 0);
	assert_int_equal(out(&syn2), DROP);
	put_inspected(LI4 + 12, 0);
	assert_int_equal(out(&syn3), DROP);
	/* The twin: egressd's listener of this sandbox. */
	put_inspected(LI4, 0);
	assert_int_equal(out(&syn), PASS);
	check_orig(false, "10.77.0.2", 41050, "203.0.113.10", 443);
	close(unmarked);
	close(other);
	put_sandbox(0, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_inspect_to_the_listener_and_back_checksums_verify),
		cmocka_unit_test(test_inspect_uninspected_twin_goes_straight),
		cmocka_unit_test(test_inspect_listener_straight_and_denied_destinations_drop),
		cmocka_unit_test(test_inspect_no_flow_past_the_proxy),
		cmocka_unit_test(test_inspect_stray_replies_quic_no_listener_quarantine),
		cmocka_unit_test(test_inspect_only_to_egressds_listener_of_the_sandbox),
	};

	return cmocka_run_group_tests_name("netdev_inspect", tests, setup_listeners, teardown);
}
