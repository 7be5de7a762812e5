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
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "egressd.h"
#include "egr_netdev.h"
#include "egr_decide.h"
#include "netdev.skel.h"

static struct netdev_bpf *skel;
static int ifindex;

#define SB 7
#define POLICY 70
#define TENANT 3
#define PASS (-1)
#define DROP 2

static __u32 ip4(const char *s)
{
	struct in_addr a;

	assert_int_equal(inet_pton(AF_INET, s, &a), 1);
	return a.s_addr;
}

static void ip6(const char *s, void *out)
{
	assert_int_equal(inet_pton(AF_INET6, s, out), 1);
}

static void put_entry(struct egr_sandbox sb)
{
	__u32 id = SB;

	sb.policy_id = POLICY;
	sb.tenant_id = TENANT;
	assert_int_equal(bpf_map__update_elem(skel->maps.egr_sandboxes, &id, sizeof(id), &sb,
					      sizeof(sb), BPF_ANY), 0);
}

static void put_sandbox(__u32 flags, __u64 quota)
{
	put_entry((struct egr_sandbox){ .flags = flags, .quota_bytes = quota });
}

static void put_rule4(const char *addr, __u16 protos, __u16 lo, __u16 hi)
{
	struct egr_lpm4_key k = { .prefixlen = EGR_LPM_POLICY_BITS + 32, .policy_id = POLICY };
	struct egr_rule r = { .nranges = 1 };
	__u32 a = ip4(addr);

	r.ranges[0] = (struct egr_port_range){ .lo = lo, .hi = hi, .protos = protos };
	memcpy(k.addr, &a, 4);
	assert_int_equal(bpf_map__update_elem(skel->maps.egr_allow4, &k, sizeof(k), &r, sizeof(r),
					      BPF_ANY), 0);
}

static void del_rule4(const char *addr)
{
	struct egr_lpm4_key k = { .prefixlen = EGR_LPM_POLICY_BITS + 32, .policy_id = POLICY };
	__u32 a = ip4(addr);

	memcpy(k.addr, &a, 4);
	assert_int_equal(bpf_map__delete_elem(skel->maps.egr_allow4, &k, sizeof(k), 0), 0);
}

static void put_rule6(const char *addr, __u16 protos, __u16 lo, __u16 hi)
{
	struct egr_lpm6_key k = { .prefixlen = EGR_LPM_POLICY_BITS + 128, .policy_id = POLICY };
	struct egr_rule r = { .nranges = 1 };

	r.ranges[0] = (struct egr_port_range){ .lo = lo, .hi = hi, .protos = protos };
	ip6(addr, k.addr);
	assert_int_equal(bpf_map__update_elem(skel->maps.egr_allow6, &k, sizeof(k), &r, sizeof(r),
					      BPF_ANY), 0);
}

/* --- frames ----------------------------------------------------------------------- */

struct pkt {
	unsigned char b[160];
	size_t len;
};

static void eth(struct pkt *p, __u16 ethertype)
{
	memset(p, 0, sizeof(*p));
	p->b[0] = 0x02; /* to vh's peer MAC or anyone's: the program does not care */
	p->b[6] = 0x02;
	p->b[11] = 1;
	p->b[12] = ethertype >> 8;
	p->b[13] = ethertype & 0xff;
	p->len = 14;
}

/* IPv4, ihl words of header (5: no options), then a TCP (20) or UDP (8)
 * header with the ports; tcp_flags for TCP. */
static struct pkt v4(__u8 proto, const char *s, const char *d, __u16 sp, __u16 dp, __u8 flags,
		     __u16 frag, unsigned ihl)
{
	struct pkt p;
	unsigned char *ip, *l4;
	__u32 sa = ip4(s), da = ip4(d);
	unsigned l4len = proto == EGR_IPPROTO_TCP ? 20 : 8;
	__u16 tot = (__u16)(ihl * 4 + l4len), f = htons(frag);

	eth(&p, 0x0800);
	ip = p.b + p.len;
	ip[0] = (__u8)(0x40 | ihl);
	ip[2] = tot >> 8;
	ip[3] = tot & 0xff;
	memcpy(ip + 6, &f, 2);
	ip[8] = 64;
	ip[9] = proto;
	memcpy(ip + 12, &sa, 4);
	memcpy(ip + 16, &da, 4);
	if (ihl > 5)
		ip[20] = 0x94; /* router alert */
	l4 = ip + ihl * 4;
	l4[0] = sp >> 8;
	l4[1] = sp & 0xff;
	l4[2] = dp >> 8;
	l4[3] = dp & 0xff;
	if (proto == EGR_IPPROTO_TCP) {
		l4[12] = 0x50;
		l4[13] = flags;
	} else {
		l4[5] = 8;
	}
	p.len += tot;
	return p;
}

static struct pkt tcp4(const char *s, const char *d, __u16 sp, __u16 dp, __u8 flags)
{
	return v4(EGR_IPPROTO_TCP, s, d, sp, dp, flags, 0x4000 /* DF */, 5);
}

static struct pkt udp4(const char *s, const char *d, __u16 sp, __u16 dp)
{
	return v4(EGR_IPPROTO_UDP, s, d, sp, dp, 0, 0, 5);
}

/* IPv6 with the extension header ext (0: none) before TCP. */
static struct pkt tcp6(const char *s, const char *d, __u16 sp, __u16 dp, __u8 ext)
{
	struct pkt p;
	unsigned char *ip, *l4;
	unsigned plen = 20 + (ext ? 8 : 0);

	eth(&p, 0x86DD);
	ip = p.b + p.len;
	ip[0] = 0x60;
	ip[5] = (__u8)plen;
	ip[6] = ext ? ext : EGR_IPPROTO_TCP;
	ip[7] = 64;
	ip6(s, ip + 8);
	ip6(d, ip + 24);
	l4 = ip + 40;
	if (ext) {
		l4[0] = EGR_IPPROTO_TCP; /* next header; length 0: 8 bytes */
		l4 += 8;
	}
	l4[0] = sp >> 8;
	l4[1] = sp & 0xff;
	l4[2] = dp >> 8;
	l4[3] = dp & 0xff;
	l4[12] = 0x50;
	l4[13] = 0x02;
	p.len += 40 + plen;
	return p;
}

/* One run of a program on the frame, as if it arrived on (or left by) vh. */
static int run(struct bpf_program *prog, const struct pkt *p)
{
	struct __sk_buff ctx = { .ifindex = (__u32)ifindex };
	LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = p->b, .data_size_in = (__u32)p->len,
		    .ctx_in = &ctx, .ctx_size_in = sizeof(ctx), .repeat = 1);
	int err = bpf_prog_test_run_opts(bpf_program__fd(prog), &opts);

	if (err)
		fail_msg("BPF_PROG_TEST_RUN of %s: %s", bpf_program__name(prog), strerror(-err));
	return (int)opts.retval;
}

static int out(const struct pkt *p)
{
	return run(skel->progs.egr_nd_ingress, p);
}

static int in(const struct pkt *p)
{
	return run(skel->progs.egr_nd_egress, p);
}

static __u64 counter(enum egr_nd_counter c)
{
	int ncpu = libbpf_num_possible_cpus();
	__u64 vals[ncpu > 0 ? ncpu : 1], sum = 0;
	__u32 key = c;

	assert_int_equal(bpf_map__lookup_elem(skel->maps.egr_nd_counters, &key, sizeof(key), vals,
					      sizeof(__u64) * (size_t)ncpu, 0), 0);
	for (int i = 0; i < ncpu; i++)
		sum += vals[i];
	return sum;
}

static struct egr_meter meter(void)
{
	int ncpu = libbpf_num_possible_cpus();
	struct egr_meter vals[ncpu > 0 ? ncpu : 1], sum = { 0 };
	__u32 key = SB;

	if (bpf_map__lookup_elem(skel->maps.egr_meter_sb, &key, sizeof(key), vals,
				 sizeof(vals[0]) * (size_t)ncpu, 0))
		return sum;
	for (int i = 0; i < ncpu; i++) {
		sum.bytes_out += vals[i].bytes_out;
		sum.pkts_out += vals[i].pkts_out;
		sum.bytes_in += vals[i].bytes_in;
		sum.backstop_drops += vals[i].backstop_drops;
		sum.inbound_drops += vals[i].inbound_drops;
		sum.quota_drops += vals[i].quota_drops;
	}
	return sum;
}

/* Deny events in the ring for the sandbox since the last call. */
static int events_seen;
static int on_event(void *ctx, void *data, size_t size)
{
	const struct egr_event *e = data;

	if (size >= sizeof(*e) && e->sandbox_id == SB && e->verdict == EGR_DENY)
		events_seen++;
	return 0;
}

static int deny_events(void)
{
	struct ring_buffer *rb = ring_buffer__new(bpf_map__fd(skel->maps.egr_events), on_event,
						  NULL, NULL);

	assert_non_null(rb);
	events_seen = 0;
	assert_true(ring_buffer__consume(rb) >= 0);
	ring_buffer__free(rb);
	return events_seen;
}

/* --- fixture ----------------------------------------------------------------------- */

static int sh(const char *cmd)
{
	int rc = system(cmd);

	if (rc != 0)
		fprintf(stderr, "test_netdev: '%s' failed (%d)\n", cmd, rc);
	return rc;
}

static int write_file(const char *path, const char *s)
{
	FILE *f = fopen(path, "w");
	int rc;

	if (!f)
		return -1;
	rc = fputs(s, f) < 0;
	return fclose(f) || rc ? -1 : 0;
}

static int setup(void **state)
{
	struct bpf_map *m;
	int err;

	/* A network namespace of our own: gone with the process. */
	if (unshare(CLONE_NEWNET)) {
		fprintf(stderr, "test_netdev: unshare(CLONE_NEWNET) (root needed): %s\n",
			strerror(errno));
		return -1;
	}
	if (sh("ip link set lo up") || sh("ip link add vh type veth peer name vs") ||
	    sh("ip addr add 10.77.0.1/30 dev vh") || sh("ip -6 addr add fd77::1/64 dev vh nodad") ||
	    sh("ip link set vh up") || sh("ip link set vs up") ||
	    write_file("/proc/sys/net/ipv4/conf/all/forwarding", "1") ||
	    write_file("/proc/sys/net/ipv6/conf/all/forwarding", "1"))
		return -1;
	ifindex = (int)if_nametoindex("vh");
	if (!ifindex)
		return -1;
	skel = netdev_bpf__open();
	if (!skel) {
		fprintf(stderr, "test_netdev: open netdev.bpf.o: %s\n", strerror(errno));
		return -1;
	}
	bpf_object__for_each_map(m, skel->obj)
		if (bpf_map__set_pin_path(m, NULL))
			return -1;
	skel->rodata->egr_nd_sandbox_id = SB;
	/* The DNS listeners' addresses (vh's, as egressd finds them); their
	 * ports are the entry's, 0 unless a case sets them. */
	skel->rodata->egr_nd_dns_addr4 = ip4("10.77.0.1");
	ip6("fd77::1", (void *)skel->rodata->egr_nd_dns_addr6);
	err = netdev_bpf__load(skel);
	if (err) {
		fprintf(stderr, "test_netdev: load netdev.bpf.o: %s\n", strerror(-err));
		return -1;
	}
	/* 203.0.113.10: TCP 443 and UDP 9000; 203.0.113.20: UDP and TCP 53
	 * (allowlisted, still no DNS without a proxy); 2001:db8::10 TCP 443. */
	put_rule4("203.0.113.10", EGR_PROTO_TCP, 443, 443);
	{
		struct egr_lpm4_key k = { .prefixlen = EGR_LPM_POLICY_BITS + 32,
					  .policy_id = POLICY };
		struct egr_rule r = { .nranges = 2 };
		__u32 a = ip4("203.0.113.10");

		r.ranges[0] = (struct egr_port_range){ .lo = 443, .hi = 443,
						       .protos = EGR_PROTO_TCP };
		r.ranges[1] = (struct egr_port_range){ .lo = 9000, .hi = 9000,
						       .protos = EGR_PROTO_UDP };
		memcpy(k.addr, &a, 4);
		assert_int_equal(bpf_map__update_elem(skel->maps.egr_allow4, &k, sizeof(k), &r,
						      sizeof(r), BPF_ANY), 0);
	}
	put_rule4("203.0.113.20", EGR_PROTO_ANY, 53, 53);
	put_rule6("2001:db8::10", EGR_PROTO_TCP, 443, 443);
	put_sandbox(0, 0);
	*state = NULL;
	return 0;
}

static int teardown(void **state)
{
	netdev_bpf__destroy(skel);
	return 0;
}

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

/* --- DNS to the sandbox's listener: the rewrite and its checksums ------------------ */

#define LPORT4 5300
#define LPORT6 5306

static void put_sandbox_dns(__u16 port4, __u16 port6)
{
	put_entry((struct egr_sandbox){ .dns_port4 = port4, .dns_port6 = port6 });
}

static __u32 sum16(const unsigned char *b, size_t n, __u32 acc)
{
	for (size_t i = 0; i + 1 < n; i += 2)
		acc += (__u32)(b[i] << 8 | b[i + 1]);
	if (n & 1)
		acc += (__u32)(b[n - 1] << 8);
	return acc;
}

static __u16 fold(__u32 acc)
{
	while (acc >> 16)
		acc = (acc & 0xffff) + (acc >> 16);
	return (__u16)acc;
}

/* The transport checksum over the pseudo-header: 0xffff when it verifies. */
static __u16 l4_sum(const unsigned char *ip, bool v6)
{
	unsigned hl = v6 ? 40 : 20;
	unsigned len = v6 ? (unsigned)(ip[4] << 8 | ip[5]) : (unsigned)(ip[2] << 8 | ip[3]) - hl;
	__u8 proto = v6 ? ip[6] : ip[9];
	__u32 acc = v6 ? sum16(ip + 8, 32, 0) : sum16(ip + 12, 8, 0);

	acc += proto + len;
	return fold(sum16(ip + hl, len, acc));
}

/* A TCP or UDP packet with a 12-byte payload and right checksums
 * (udp_no_sum: a UDP/IPv4 checksum of 0, "none"). BPF_PROG_TEST_RUN's
 * skb is CHECKSUM_NONE: the helpers' arithmetic on the checksum fields is
 * what this checks; CHECKSUM_PARTIAL (a local socket's packet) is the e2e
 * tests' (tests/e2e/test_netdev_dns.py). */
static struct pkt dns_pkt(bool v6, __u8 proto, const char *s, const char *d, __u16 sp, __u16 dp,
			  bool udp_no_sum)
{
	struct pkt p;
	unsigned hl = v6 ? 40 : 20, l4len = (proto == EGR_IPPROTO_TCP ? 20 : 8) + 12;
	unsigned char *ip, *l4;
	__u16 c;

	eth(&p, v6 ? 0x86DD : 0x0800);
	ip = p.b + p.len;
	if (v6) {
		ip[0] = 0x60;
		ip[4] = (__u8)(l4len >> 8);
		ip[5] = (__u8)l4len;
		ip[6] = proto;
		ip[7] = 64;
		ip6(s, ip + 8);
		ip6(d, ip + 24);
	} else {
		__u32 sa = ip4(s), da = ip4(d);

		ip[0] = 0x45;
		ip[2] = (__u8)((hl + l4len) >> 8);
		ip[3] = (__u8)(hl + l4len);
		ip[6] = 0x40;
		ip[8] = 64;
		ip[9] = proto;
		memcpy(ip + 12, &sa, 4);
		memcpy(ip + 16, &da, 4);
		c = (__u16)~fold(sum16(ip, 20, 0));
		ip[10] = c >> 8;
		ip[11] = c & 0xff;
	}
	l4 = ip + hl;
	l4[0] = sp >> 8;
	l4[1] = sp & 0xff;
	l4[2] = dp >> 8;
	l4[3] = dp & 0xff;
	if (proto == EGR_IPPROTO_TCP) {
		l4[12] = 0x50;
		l4[13] = 0x18; /* PSH ACK */
	} else {
		l4[4] = (__u8)(l4len >> 8);
		l4[5] = (__u8)l4len;
	}
	memcpy(l4 + l4len - 12, "\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00", 12);
	p.len += hl + l4len;
	if (!udp_no_sum) {
		unsigned co = proto == EGR_IPPROTO_TCP ? 16 : 6;

		c = (__u16)~l4_sum(ip, v6);
		if (proto == EGR_IPPROTO_UDP && c == 0)
			c = 0xffff;
		l4[co] = c >> 8;
		l4[co + 1] = c & 0xff;
	}
	return p;
}

/* Run prog on p, the frame as the program left it in *res. */
static int run_out(struct bpf_program *prog, const struct pkt *p, struct pkt *res)
{
	struct __sk_buff ctx = { .ifindex = (__u32)ifindex };
	LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = p->b, .data_size_in = (__u32)p->len,
		    .data_out = res->b, .data_size_out = sizeof(res->b), .ctx_in = &ctx,
		    .ctx_size_in = sizeof(ctx), .repeat = 1);

	memset(res, 0, sizeof(*res));
	assert_int_equal(bpf_prog_test_run_opts(bpf_program__fd(prog), &opts), 0);
	res->len = opts.data_size_out;
	return (int)opts.retval;
}

/* Both checksums of a rewritten frame verify; its address at off and port
 * at poff are want / wport. */
static void check_rewritten(const struct pkt *r, bool v6, unsigned off, const char *want,
			    unsigned poff, __u16 wport)
{
	const unsigned char *ip = r->b + 14;
	unsigned char a[16];

	if (v6) {
		ip6(want, a);
		assert_memory_equal(ip + off, a, 16);
	} else {
		__u32 w = ip4(want);

		assert_memory_equal(ip + off, &w, 4);
		assert_int_equal(fold(sum16(ip, 20, 0)), 0xffff); /* the IPv4 header */
	}
	assert_int_equal(ip[(v6 ? 40 : 20) + poff] << 8 | ip[(v6 ? 40 : 20) + poff + 1], wport);
	assert_int_equal(l4_sum(ip, v6), 0xffff);
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
