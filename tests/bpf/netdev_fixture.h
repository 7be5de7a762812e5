/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The fixture of the device programs' BPF_PROG_TEST_RUN tests (test_netdev.c,
 * test_netdev_inspect.c, test_netdev_hostile.c): the real object with
 * private (unpinned) maps filled as egressd fills them, in a network
 * namespace of its own with a veth pair whose host side (vh, 10.77.0.1/30,
 * fd77::1/64) is the sandbox's device; frames built as a hostile guest
 * would send them, and checksum checks of rewritten ones. One test binary
 * per includer.
 */
#ifndef EGR_TEST_NETDEV_FIXTURE_H
#define EGR_TEST_NETDEV_FIXTURE_H

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

static inline __u32 ip4(const char *s)
{
	struct in_addr a;

	assert_int_equal(inet_pton(AF_INET, s, &a), 1);
	return a.s_addr;
}

static inline void ip6(const char *s, void *out)
{
	assert_int_equal(inet_pton(AF_INET6, s, out), 1);
}

static inline void put_entry(struct egr_sandbox sb)
{
	__u32 id = SB;

	sb.policy_id = POLICY;
	sb.tenant_id = TENANT;
	assert_int_equal(bpf_map__update_elem(skel->maps.egr_sandboxes, &id, sizeof(id), &sb,
					      sizeof(sb), BPF_ANY), 0);
}

static inline void put_sandbox(__u32 flags, __u64 quota)
{
	put_entry((struct egr_sandbox){ .flags = flags, .quota_bytes = quota });
}

static inline void put_rule4(const char *addr, __u16 protos, __u16 lo, __u16 hi)
{
	struct egr_lpm4_key k = { .prefixlen = EGR_LPM_POLICY_BITS + 32, .policy_id = POLICY };
	struct egr_rule r = { .nranges = 1 };
	__u32 a = ip4(addr);

	r.ranges[0] = (struct egr_port_range){ .lo = lo, .hi = hi, .protos = protos };
	memcpy(k.addr, &a, 4);
	assert_int_equal(bpf_map__update_elem(skel->maps.egr_allow4, &k, sizeof(k), &r, sizeof(r),
					      BPF_ANY), 0);
}

static inline void del_rule4(const char *addr)
{
	struct egr_lpm4_key k = { .prefixlen = EGR_LPM_POLICY_BITS + 32, .policy_id = POLICY };
	__u32 a = ip4(addr);

	memcpy(k.addr, &a, 4);
	assert_int_equal(bpf_map__delete_elem(skel->maps.egr_allow4, &k, sizeof(k), 0), 0);
}

static inline void put_rule6(const char *addr, __u16 protos, __u16 lo, __u16 hi)
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

static inline void eth(struct pkt *p, __u16 ethertype)
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
static inline struct pkt v4(__u8 proto, const char *s, const char *d, __u16 sp, __u16 dp,
			    __u8 flags, __u16 frag, unsigned ihl)
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

static inline struct pkt tcp4(const char *s, const char *d, __u16 sp, __u16 dp, __u8 flags)
{
	return v4(EGR_IPPROTO_TCP, s, d, sp, dp, flags, 0x4000 /* DF */, 5);
}

static inline struct pkt udp4(const char *s, const char *d, __u16 sp, __u16 dp)
{
	return v4(EGR_IPPROTO_UDP, s, d, sp, dp, 0, 0, 5);
}

/* IPv6 with the extension header ext (0: none) before TCP. */
static inline struct pkt tcp6(const char *s, const char *d, __u16 sp, __u16 dp, __u8 ext)
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
static inline int run(struct bpf_program *prog, const struct pkt *p)
{
	struct __sk_buff ctx = { .ifindex = (__u32)ifindex };
	LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = p->b, .data_size_in = (__u32)p->len,
		    .ctx_in = &ctx, .ctx_size_in = sizeof(ctx), .repeat = 1);
	int err = bpf_prog_test_run_opts(bpf_program__fd(prog), &opts);

	if (err)
		fail_msg("BPF_PROG_TEST_RUN of %s: %s", bpf_program__name(prog), strerror(-err));
	return (int)opts.retval;
}

static inline int out(const struct pkt *p)
{
	return run(skel->progs.egr_nd_ingress, p);
}

static inline int in(const struct pkt *p)
{
	return run(skel->progs.egr_nd_egress, p);
}

static inline __u64 counter(enum egr_nd_counter c)
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

static inline struct egr_meter meter(void)
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
		sum.pkts_in += vals[i].pkts_in;
		sum.backstop_drops += vals[i].backstop_drops;
		sum.inbound_drops += vals[i].inbound_drops;
		sum.quota_drops += vals[i].quota_drops;
	}
	return sum;
}

/* Deny events in the ring for the sandbox since the last call. */
static int events_seen;
static inline int on_event(void *ctx, void *data, size_t size)
{
	const struct egr_event *e = data;

	if (size >= sizeof(*e) && e->sandbox_id == SB && e->verdict == EGR_DENY)
		events_seen++;
	return 0;
}

static inline int deny_events(void)
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

static inline int sh(const char *cmd)
{
	int rc = system(cmd);

	if (rc != 0)
		fprintf(stderr, "netdev fixture: '%s' failed (%d)\n", cmd, rc);
	return rc;
}

static inline int write_file(const char *path, const char *s)
{
	FILE *f = fopen(path, "w");
	int rc;

	if (!f)
		return -1;
	rc = fputs(s, f) < 0;
	return fclose(f) || rc ? -1 : 0;
}

static inline int setup(void **state)
{
	struct bpf_map *m;
	int err;

	/* A network namespace of our own: gone with the process. */
	if (unshare(CLONE_NEWNET)) {
		fprintf(stderr, "netdev fixture: unshare(CLONE_NEWNET) (root needed): %s\n",
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
		fprintf(stderr, "netdev fixture: open netdev.bpf.o: %s\n", strerror(errno));
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
		fprintf(stderr, "netdev fixture: load netdev.bpf.o: %s\n", strerror(-err));
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

static inline int teardown(void **state)
{
	netdev_bpf__destroy(skel);
	return 0;
}


#define LPORT4 5300
#define LPORT6 5306

static inline void put_sandbox_dns(__u16 port4, __u16 port6)
{
	put_entry((struct egr_sandbox){ .dns_port4 = port4, .dns_port6 = port6 });
}

static inline __u32 sum16(const unsigned char *b, size_t n, __u32 acc)
{
	for (size_t i = 0; i + 1 < n; i += 2)
		acc += (__u32)(b[i] << 8 | b[i + 1]);
	if (n & 1)
		acc += (__u32)(b[n - 1] << 8);
	return acc;
}

static inline __u16 fold(__u32 acc)
{
	while (acc >> 16)
		acc = (acc & 0xffff) + (acc >> 16);
	return (__u16)acc;
}

/* The transport checksum over the pseudo-header: 0xffff when it verifies. */
static inline __u16 l4_sum(const unsigned char *ip, bool v6)
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
static inline struct pkt seg_pkt(bool v6, __u8 proto, const char *s, const char *d, __u16 sp,
				 __u16 dp, __u8 tcp_flags, bool udp_no_sum)
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
		l4[13] = tcp_flags;
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

static inline struct pkt dns_pkt(bool v6, __u8 proto, const char *s, const char *d, __u16 sp,
				 __u16 dp, bool udp_no_sum)
{
	return seg_pkt(v6, proto, s, d, sp, dp, 0x18 /* PSH ACK */, udp_no_sum);
}

/* Run prog on p, the frame as the program left it in *res. */
static inline int run_out(struct bpf_program *prog, const struct pkt *p, struct pkt *res)
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
static inline void check_rewritten(const struct pkt *r, bool v6, unsigned off, const char *want,
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

#endif /* EGR_TEST_NETDEV_FIXTURE_H */
