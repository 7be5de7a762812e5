// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The BPF side's decisions, run in the kernel: tests/bpf/egr_test.bpf.c
 * (the functions of bpf/lib/ in a cgroup_skb program) is loaded with
 * libbpf, its maps (the real egressd map definitions, unpinned here) are
 * filled as egressd fills them, and each case runs through
 * BPF_PROG_TEST_RUN. Every deny has a twin that is allowed the same way.
 *
 * Needs root (BPF). It never skips: a host that cannot load or run the
 * program fails the test, under CI=true and everywhere else.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "egressd.h"
#include "egr_decide.h"
#include "egr_reasons.h"
#include "egr_test.h"
#include "egr_test.skel.h"

static struct egr_test_bpf *skel;

#define POLICY_A 11 /* the allowlist below */
#define POLICY_B 12 /* another policy: nothing */
#define POLICY_ANY 13 /* 0.0.0.0/0 and ::/0, TCP on every port */
#define TENANT_FREE 9
#define TENANT_CAPPED 8

static uint64_t boot_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static __u32 ip4(const char *s)
{
	struct in_addr a;

	assert_int_equal(inet_pton(AF_INET, s, &a), 1);
	return a.s_addr;
}

static void ip6(const char *s, __u32 out[4])
{
	assert_int_equal(inet_pton(AF_INET6, s, out), 1);
}

static void put_sandbox(__u32 id, __u32 policy, __u32 tenant, __u32 flags, __u16 dns4, __u16 dns6,
			__u64 quota_bytes, __u64 window_ns)
{
	struct egr_sandbox sb = {
		.policy_id = policy,
		.tenant_id = tenant,
		.flags = flags,
		.dns_port4 = dns4,
		.dns_port6 = dns6,
		.quota_bytes = quota_bytes,
		.quota_window_ns = window_ns,
	};

	assert_int_equal(bpf_map__update_elem(skel->maps.egr_sandboxes, &id, sizeof(id), &sb,
					      sizeof(sb), BPF_ANY), 0);
}

static struct egr_rule rule_of(__u64 expires_ns, __u16 protos, __u16 lo, __u16 hi)
{
	struct egr_rule r;

	memset(&r, 0, sizeof(r));
	r.expires_ns = expires_ns;
	r.nranges = 1;
	r.ranges[0] = (struct egr_port_range){ .lo = lo, .hi = hi, .protos = protos };
	return r;
}

static void put_rule4(__u32 policy, const char *addr, unsigned int len, const struct egr_rule *r)
{
	struct egr_lpm4_key k = { .prefixlen = EGR_LPM_POLICY_BITS + len, .policy_id = policy };
	__u32 a = ip4(addr);

	memcpy(k.addr, &a, 4);
	assert_int_equal(bpf_map__update_elem(skel->maps.egr_allow4, &k, sizeof(k), r, sizeof(*r),
					      BPF_ANY), 0);
}

static void put_rule6(__u32 policy, const char *addr, unsigned int len, const struct egr_rule *r)
{
	struct egr_lpm6_key k = { .prefixlen = EGR_LPM_POLICY_BITS + len, .policy_id = policy };

	ip6(addr, (__u32 *)k.addr);
	assert_int_equal(bpf_map__update_elem(skel->maps.egr_allow6, &k, sizeof(k), r, sizeof(*r),
					      BPF_ANY), 0);
}

/* --- packets: an Ethernet header, then IPv4 or IPv6 and the ports ---------------- */

struct pkt {
	unsigned char b[128];
	size_t len;
};

static void pkt_eth(struct pkt *p, __u16 ethertype)
{
	memset(p, 0, sizeof(*p));
	p->b[12] = ethertype >> 8;
	p->b[13] = ethertype & 0xff;
	p->len = 14;
}

static void pkt_ports(struct pkt *p, __u16 sport, __u16 dport)
{
	__u16 s = htons(sport), d = htons(dport);

	memcpy(p->b + p->len, &s, 2);
	memcpy(p->b + p->len + 2, &d, 2);
	p->len += 20; /* room for a TCP header; UDP's 8 fit in it */
}

static struct pkt pkt4(__u8 proto, const char *saddr, const char *daddr, __u16 sport, __u16 dport)
{
	struct pkt p;
	unsigned char *ip;
	__u32 s = ip4(saddr), d = ip4(daddr);

	pkt_eth(&p, 0x0800);
	ip = p.b + p.len;
	ip[0] = 0x45;
	ip[3] = 40; /* total length: 20 + 20 */
	ip[8] = 64;
	ip[9] = proto;
	memcpy(ip + 12, &s, 4);
	memcpy(ip + 16, &d, 4);
	p.len += 20;
	pkt_ports(&p, sport, dport);
	return p;
}

static struct pkt pkt6(__u8 proto, const char *saddr, const char *daddr, __u16 sport, __u16 dport)
{
	struct pkt p;
	unsigned char *ip;

	pkt_eth(&p, 0x86DD);
	ip = p.b + p.len;
	ip[0] = 0x60;
	ip[5] = 20; /* payload length */
	ip[6] = proto;
	ip[7] = 64;
	ip6(saddr, (__u32 *)(ip + 8));
	ip6(daddr, (__u32 *)(ip + 24));
	p.len += 40;
	pkt_ports(&p, sport, dport);
	return p;
}

/* One run of the test program on the case (and packet). */
static struct egr_t_out run(const struct egr_t_case *c, const struct pkt *p)
{
	struct pkt dummy = pkt4(EGR_IPPROTO_TCP, "192.0.2.1", "192.0.2.2", 1, 2);
	struct egr_t_out out, before;
	__u32 zero = 0;
	LIBBPF_OPTS(bpf_test_run_opts, opts);
	int err;

	if (!p)
		p = &dummy;
	assert_int_equal(bpf_map__update_elem(skel->maps.egr_t_cases, &zero, sizeof(zero), c,
					      sizeof(*c), BPF_ANY), 0);
	memset(&before, 0, sizeof(before));
	assert_int_equal(bpf_map__lookup_elem(skel->maps.egr_t_out, &zero, sizeof(zero), &before,
					      sizeof(before), 0), 0);
	opts.data_in = p->b;
	opts.data_size_in = (__u32)p->len;
	opts.repeat = 1;
	err = bpf_prog_test_run_opts(bpf_program__fd(skel->progs.egr_t_run), &opts);
	if (err)
		fail_msg("BPF_PROG_TEST_RUN of egr_t_run: %s", strerror(-err));
	assert_int_equal(opts.retval, 1);
	assert_int_equal(bpf_map__lookup_elem(skel->maps.egr_t_out, &zero, sizeof(zero), &out,
					      sizeof(out), 0), 0);
	assert_int_equal(out.runs, before.runs + 1); /* it ran, once */
	return out;
}

#define assert_reason(got, want)                                                               \
	do {                                                                                   \
		int g_ = (got), w_ = (want);                                                   \
		if (g_ != w_)                                                                  \
			fail_msg("reason %d, expected %d (%s)", g_, w_, #want);                \
	} while (0)

/* What connect/sendmsg decide for a sandbox and destination. */
static int judge4(__u32 sandbox, const char *addr, __u16 port, __u32 proto)
{
	struct egr_t_case c = { .op = EGR_T_ADDR, .sandbox_id = sandbox, .port = port,
				.protocol = proto };

	c.daddr[0] = ip4(addr);
	return run(&c, NULL).reason;
}

static int judge6(__u32 sandbox, const char *addr, __u16 port, __u32 proto)
{
	struct egr_t_case c = { .op = EGR_T_ADDR, .sandbox_id = sandbox, .port = port,
				.protocol = proto, .v6 = 1 };

	ip6(addr, c.daddr);
	return run(&c, NULL).reason;
}

/* --- fixtures ------------------------------------------------------------------- */

#define SB_A 1        /* policy A, DNS proxy on 5353 / 5354 */
#define SB_B 2        /* policy B (empty) */
#define SB_ANY 3      /* policy ANY */
#define SB_NODNS 4    /* policy A, no DNS proxy (egressd down) */
#define SB_DNS4 5     /* policy A, IPv4 DNS proxy only */
#define SB_INBOUND 6  /* policy A, network.inbound = "allow" */
#define SB_NONE 999   /* no entry */

static int setup(void **state)
{
	struct bpf_map *m;
	__u64 now, past, future;
	struct egr_rule r;
	int err;

	skel = egr_test_bpf__open();
	if (!skel) {
		fprintf(stderr, "test_bpf: open egr_test.bpf.o: %s\n", strerror(errno));
		return -1;
	}
	/* egressd's maps are pinned by name: these must be private copies,
	 * never a running egressd's. */
	bpf_object__for_each_map(m, skel->obj)
		if (bpf_map__set_pin_path(m, NULL)) {
			fprintf(stderr, "test_bpf: unpin %s\n", bpf_map__name(m));
			return -1;
		}
	err = egr_test_bpf__load(skel);
	if (err) {
		fprintf(stderr, "test_bpf: load egr_test.bpf.o (root needed): %s\n", strerror(-err));
		return -1;
	}

	now = boot_ns();
	past = now - 1000000000ull;              /* expired a second ago */
	future = now + 3600ull * 1000000000ull;  /* in an hour */

	/* Policy A: 10.0.0.0/8 TCP 443 and UDP 5000 (static); DNS-learned
	 * /32s: 10.1.2.3 TCP 80 expired, 10.1.2.4 TCP 80 live, 192.168.7.7
	 * TCP 80 expired with no static prefix around it; 10.0.0.53 DNS. */
	r = rule_of(0, EGR_PROTO_TCP, 443, 443);
	r.nranges = 2;
	r.ranges[1] = (struct egr_port_range){ .lo = 5000, .hi = 5000, .protos = EGR_PROTO_UDP };
	put_rule4(POLICY_A, "10.0.0.0", 8, &r);
	r = rule_of(past, EGR_PROTO_TCP, 80, 80);
	put_rule4(POLICY_A, "10.1.2.3", 32, &r);
	r = rule_of(future, EGR_PROTO_TCP, 80, 80);
	put_rule4(POLICY_A, "10.1.2.4", 32, &r);
	r = rule_of(past, EGR_PROTO_TCP, 80, 80);
	put_rule4(POLICY_A, "192.168.7.7", 32, &r);
	r = rule_of(0, EGR_PROTO_ANY, 53, 53);
	put_rule4(POLICY_A, "10.0.0.53", 32, &r);
	/* IPv6: 2001:db8::/32 TCP 443; 2001:db8::5 TCP 80 expired, ::6 live. */
	r = rule_of(0, EGR_PROTO_TCP, 443, 443);
	put_rule6(POLICY_A, "2001:db8::", 32, &r);
	r = rule_of(past, EGR_PROTO_TCP, 80, 80);
	put_rule6(POLICY_A, "2001:db8::5", 128, &r);
	r = rule_of(future, EGR_PROTO_TCP, 80, 80);
	put_rule6(POLICY_A, "2001:db8::6", 128, &r);
	/* Policy ANY: everything, TCP, every port. */
	r = rule_of(0, EGR_PROTO_TCP, 0, 0xffff);
	put_rule4(POLICY_ANY, "0.0.0.0", 0, &r);
	put_rule6(POLICY_ANY, "::", 0, &r);

	put_sandbox(SB_A, POLICY_A, TENANT_FREE, 0, 5353, 5354, 0, 0);
	put_sandbox(SB_B, POLICY_B, TENANT_FREE, 0, 5353, 5354, 0, 0);
	put_sandbox(SB_ANY, POLICY_ANY, TENANT_FREE, 0, 5353, 5354, 0, 0);
	put_sandbox(SB_NODNS, POLICY_A, TENANT_FREE, 0, 0, 0, 0, 0);
	put_sandbox(SB_DNS4, POLICY_A, TENANT_FREE, 0, 5353, 0, 0, 0);
	put_sandbox(SB_INBOUND, POLICY_A, TENANT_FREE, EGR_SB_INBOUND_ALLOW, 5353, 5354, 0, 0);
	*state = NULL;
	return 0;
}

static int teardown(void **state)
{
	egr_test_bpf__destroy(skel);
	skel = NULL;
	return 0;
}

/* --- the allowlist and its expired-/32 fallback ---------------------------------- */

static void test_expired_learned_32_falls_back_to_static_prefix(void **state)
{
	/* The expired /32 does not hide the /8 around it... */
	assert_reason(judge4(SB_A, "10.1.2.3", 443, EGR_IPPROTO_TCP), EGR_R_ALLOW_RULE);
	/* ...nor does it still allow what it alone allowed. */
	assert_reason(judge4(SB_A, "10.1.2.3", 80, EGR_IPPROTO_TCP), EGR_R_DENY_PORT);
	/* Twin: the live learned /32 allows its port. */
	assert_reason(judge4(SB_A, "10.1.2.4", 80, EGR_IPPROTO_TCP), EGR_R_ALLOW_RULE);
	/* An expired /32 with nothing around it denies, as expired. */
	assert_reason(judge4(SB_A, "192.168.7.7", 80, EGR_IPPROTO_TCP), EGR_R_DENY_EXPIRED);
	/* The protocol counts: the /8 allows TCP 443, UDP 5000. */
	assert_reason(judge4(SB_A, "10.1.2.3", 443, EGR_IPPROTO_UDP), EGR_R_DENY_PORT);
	assert_reason(judge4(SB_A, "10.1.2.3", 5000, EGR_IPPROTO_UDP), EGR_R_ALLOW_RULE);
	assert_reason(judge4(SB_A, "11.0.0.1", 443, EGR_IPPROTO_TCP), EGR_R_DENY_NO_RULE);
}

static void test_expired_learned_128_falls_back_to_static_prefix(void **state)
{
	assert_reason(judge6(SB_A, "2001:db8::5", 443, EGR_IPPROTO_TCP), EGR_R_ALLOW_RULE);
	assert_reason(judge6(SB_A, "2001:db8::5", 80, EGR_IPPROTO_TCP), EGR_R_DENY_PORT);
	assert_reason(judge6(SB_A, "2001:db8::6", 80, EGR_IPPROTO_TCP), EGR_R_ALLOW_RULE);
	assert_reason(judge6(SB_A, "2001:db9::1", 443, EGR_IPPROTO_TCP), EGR_R_DENY_NO_RULE);
	/* A v4-mapped destination is judged by the IPv4 rules, fallback too. */
	assert_reason(judge6(SB_A, "::ffff:10.1.2.3", 443, EGR_IPPROTO_TCP), EGR_R_ALLOW_RULE);
	assert_reason(judge6(SB_A, "::ffff:10.1.2.3", 80, EGR_IPPROTO_TCP), EGR_R_DENY_PORT);
	assert_reason(judge6(SB_A, "::ffff:192.168.7.7", 80, EGR_IPPROTO_TCP), EGR_R_DENY_EXPIRED);
}

static void test_rules_never_cross_policies(void **state)
{
	assert_reason(judge4(SB_B, "10.1.2.4", 80, EGR_IPPROTO_TCP), EGR_R_DENY_NO_RULE);
	assert_reason(judge4(SB_B, "10.0.0.9", 443, EGR_IPPROTO_TCP), EGR_R_DENY_NO_RULE);
	assert_reason(judge6(SB_B, "2001:db8::6", 80, EGR_IPPROTO_TCP), EGR_R_DENY_NO_RULE);
	/* Twin: the sandbox of policy A, same destinations. */
	assert_reason(judge4(SB_A, "10.0.0.9", 443, EGR_IPPROTO_TCP), EGR_R_ALLOW_RULE);
	/* No sandbox entry: denied. */
	assert_reason(judge4(SB_NONE, "10.0.0.9", 443, EGR_IPPROTO_TCP), EGR_R_DENY_NO_SANDBOX);
}

static void test_unspecified_destination_never_allowed(void **state)
{
	/* 0.0.0.0/0 allows every TCP port, yet not 0.0.0.0 itself. */
	assert_reason(judge4(SB_ANY, "0.0.0.0", 443, EGR_IPPROTO_TCP), EGR_R_DENY_UNSPEC);
	assert_reason(judge6(SB_ANY, "::", 443, EGR_IPPROTO_TCP), EGR_R_DENY_UNSPEC);
	assert_reason(judge6(SB_ANY, "::ffff:0.0.0.0", 443, EGR_IPPROTO_TCP), EGR_R_DENY_UNSPEC);
	/* Twins. */
	assert_reason(judge4(SB_ANY, "198.51.100.1", 443, EGR_IPPROTO_TCP), EGR_R_ALLOW_RULE);
	assert_reason(judge6(SB_ANY, "2001:db8:1::1", 443, EGR_IPPROTO_TCP), EGR_R_ALLOW_RULE);
}

/* --- the DNS redirect decision -------------------------------------------------- */

static void test_dns_goes_to_the_sandbox_proxy_whatever_resolver(void **state)
{
	assert_reason(judge4(SB_A, "8.8.8.8", 53, EGR_IPPROTO_UDP), EGR_R_ALLOW_DNS_REDIRECT);
	assert_reason(judge4(SB_A, "8.8.8.8", 53, EGR_IPPROTO_TCP), EGR_R_ALLOW_DNS_REDIRECT);
	assert_reason(judge6(SB_A, "2001:4860::8888", 53, EGR_IPPROTO_UDP),
		      EGR_R_ALLOW_DNS_REDIRECT);
	/* A resolver the allowlist names is redirected all the same. */
	assert_reason(judge4(SB_A, "10.0.0.53", 53, EGR_IPPROTO_UDP), EGR_R_ALLOW_DNS_REDIRECT);
	/* Twin: a port that is not DNS is the allowlist's. */
	assert_reason(judge4(SB_A, "8.8.8.8", 443, EGR_IPPROTO_TCP), EGR_R_DENY_NO_RULE);
	/* Port 53 on a portless protocol is not DNS either: the rules judge. */
	assert_reason(judge4(SB_A, "8.8.8.8", 53, EGR_IPPROTO_ICMP), EGR_R_DENY_NO_RULE);
}

static void test_no_proxy_means_no_dns_even_if_allowlisted(void **state)
{
	assert_reason(judge4(SB_NODNS, "10.0.0.53", 53, EGR_IPPROTO_UDP), EGR_R_DENY_NO_DNS_PROXY);
	assert_reason(judge4(SB_NODNS, "8.8.8.8", 53, EGR_IPPROTO_TCP), EGR_R_DENY_NO_DNS_PROXY);
	/* Per family: an IPv4 listener only. */
	assert_reason(judge6(SB_DNS4, "2001:4860::8888", 53, EGR_IPPROTO_UDP),
		      EGR_R_DENY_NO_DNS_PROXY);
	assert_reason(judge4(SB_DNS4, "8.8.8.8", 53, EGR_IPPROTO_UDP), EGR_R_ALLOW_DNS_REDIRECT);
	/* Twin: the same sandbox's other traffic is unaffected. */
	assert_reason(judge4(SB_NODNS, "10.0.0.9", 443, EGR_IPPROTO_TCP), EGR_R_ALLOW_RULE);
}

static void test_send_without_address_is_judged_as_its_peer(void **state)
{
	struct egr_t_case c = { .op = EGR_T_ADDR, .sandbox_id = SB_A, .protocol = EGR_IPPROTO_UDP,
				.peer = 1 };

	/* Connected to the proxy (redirected at connect): allowed. */
	c.daddr[0] = ip4("127.0.0.1");
	c.port = 5353;
	assert_reason(run(&c, NULL).reason, EGR_R_ALLOW_DNS_PROXY);
	/* Connected to a resolver directly: never redirected here, judged. */
	c.daddr[0] = ip4("8.8.8.8");
	c.port = 53;
	assert_reason(run(&c, NULL).reason, EGR_R_DENY_NO_RULE);
	/* Twin: a peer the allowlist allows. */
	c.daddr[0] = ip4("10.0.0.9");
	c.port = 5000;
	assert_reason(run(&c, NULL).reason, EGR_R_ALLOW_RULE);
	/* No peer at all. */
	c.peer_err = 1;
	assert_reason(run(&c, NULL).reason, EGR_R_DENY_NO_PEER);
}

/* --- the backstop: connected vs unconnected ------------------------------------- */

static struct egr_t_case connected(__u32 sandbox, __u32 type, __u32 proto, const char *dst,
				   __u16 dport)
{
	struct egr_t_case c = { .op = EGR_T_BACKSTOP, .sandbox_id = sandbox,
				.sk_kind = 1 /* EGR_SV_FULL */, .sk_family = EGR_AF_INET,
				.sk_type = type, .sk_protocol = proto, .sk_dport = dport,
				.sk_state = 1 /* TCP_ESTABLISHED */ };

	c.sk_dst[0] = ip4(dst);
	return c;
}

static void test_backstop_passes_the_peer_connect_judged(void **state)
{
	struct pkt p = pkt4(EGR_IPPROTO_TCP, "10.200.0.1", "198.51.100.9", 40000, 443);
	struct egr_t_case c = connected(SB_A, EGR_SOCK_STREAM, EGR_IPPROTO_TCP, "198.51.100.9", 443);
	struct egr_t_out o = run(&c, &p);

	assert_int_equal(o.parsed, 1);
	assert_int_equal(o.has_ports, 1);
	assert_int_equal(o.dport, 443);
	assert_reason(o.reason, EGR_R_ALLOW_CONNECTED);
	/* MPTCP is TCP on the wire and judged at connect too. */
	c = connected(SB_A, EGR_SOCK_STREAM, EGR_IPPROTO_MPTCP, "198.51.100.9", 443);
	assert_reason(run(&c, &p).reason, EGR_R_ALLOW_CONNECTED);
	/* Connected UDP. */
	p = pkt4(EGR_IPPROTO_UDP, "10.200.0.1", "198.51.100.9", 40000, 7000);
	c = connected(SB_A, EGR_SOCK_DGRAM, EGR_IPPROTO_UDP, "198.51.100.9", 7000);
	assert_reason(run(&c, &p).reason, EGR_R_ALLOW_CONNECTED);
	/* IPv6. */
	p = pkt6(EGR_IPPROTO_TCP, "2001:db8:ff::1", "2001:db9::9", 40000, 443);
	c = connected(SB_A, EGR_SOCK_STREAM, EGR_IPPROTO_TCP, "0.0.0.0", 443);
	c.sk_family = EGR_AF_INET6;
	ip6("2001:db9::9", c.sk_dst);
	assert_reason(run(&c, &p).reason, EGR_R_ALLOW_CONNECTED);
	ip6("2001:db9::a", c.sk_dst);
	assert_reason(run(&c, &p).reason, EGR_R_DENY_NO_RULE);
}

static void test_backstop_judges_a_packet_not_going_to_the_peer(void **state)
{
	/* Connected to an allowed address, the packet goes elsewhere (a
	 * first hop from a routing header or IP options): the allowlist
	 * judges where it really goes. */
	struct pkt p = pkt4(EGR_IPPROTO_TCP, "10.200.0.1", "198.51.100.9", 40000, 443);
	struct egr_t_case c = connected(SB_A, EGR_SOCK_STREAM, EGR_IPPROTO_TCP, "10.0.0.7", 443);

	assert_reason(run(&c, &p).reason, EGR_R_DENY_NO_RULE);
	/* The right address, another port. */
	c = connected(SB_A, EGR_SOCK_STREAM, EGR_IPPROTO_TCP, "198.51.100.9", 8443);
	assert_reason(run(&c, &p).reason, EGR_R_DENY_NO_RULE);
	/* Twin: the packet to the allowed address it is connected to passes,
	 * and a packet to an allowed address passes on the rules alone. */
	p = pkt4(EGR_IPPROTO_TCP, "10.200.0.1", "10.0.0.7", 40000, 443);
	c = connected(SB_A, EGR_SOCK_STREAM, EGR_IPPROTO_TCP, "10.0.0.7", 443);
	assert_reason(run(&c, &p).reason, EGR_R_ALLOW_CONNECTED);
	c = connected(SB_A, EGR_SOCK_STREAM, EGR_IPPROTO_TCP, "198.51.100.9", 443);
	assert_reason(run(&c, &p).reason, EGR_R_ALLOW_RULE);
}

static void test_backstop_trusts_only_sockets_connect_judged(void **state)
{
	/* SOCK_RAW with protocol 17 and UDP-Lite connect without a
	 * pre_connect hook: their "peer" was never judged. */
	struct pkt p = pkt4(EGR_IPPROTO_UDP, "10.200.0.1", "198.51.100.9", 40000, 7000);
	struct egr_t_case c = connected(SB_A, EGR_SOCK_RAW, EGR_IPPROTO_UDP, "198.51.100.9", 7000);

	assert_reason(run(&c, &p).reason, EGR_R_DENY_NO_RULE);
	p = pkt4(EGR_IPPROTO_UDPLITE, "10.200.0.1", "198.51.100.9", 40000, 7000);
	c = connected(SB_A, EGR_SOCK_DGRAM, EGR_IPPROTO_UDPLITE, "198.51.100.9", 7000);
	assert_reason(run(&c, &p).reason, EGR_R_DENY_NO_RULE);
	/* Twin: a UDP socket connected the same way. */
	p = pkt4(EGR_IPPROTO_UDP, "10.200.0.1", "198.51.100.9", 40000, 7000);
	c = connected(SB_A, EGR_SOCK_DGRAM, EGR_IPPROTO_UDP, "198.51.100.9", 7000);
	assert_reason(run(&c, &p).reason, EGR_R_ALLOW_CONNECTED);
}

static void test_backstop_unconnected_datagrams_need_the_allowlist(void **state)
{
	struct pkt p = pkt4(EGR_IPPROTO_UDP, "10.200.0.1", "198.51.100.9", 40000, 5000);
	struct egr_t_case c = connected(SB_A, EGR_SOCK_DGRAM, EGR_IPPROTO_UDP, "0.0.0.0", 0);

	assert_reason(run(&c, &p).reason, EGR_R_DENY_NO_RULE);
	/* Twin: to an address and port the allowlist allows. */
	p = pkt4(EGR_IPPROTO_UDP, "10.200.0.1", "10.0.0.9", 40000, 5000);
	assert_reason(run(&c, &p).reason, EGR_R_ALLOW_RULE);
	/* The test run's own socket (egr_sock_view_of on a real skb->sk,
	 * which is not connected) decides the same. */
	c.real_sk = 1;
	assert_reason(run(&c, &p).reason, EGR_R_ALLOW_RULE);
	p = pkt4(EGR_IPPROTO_UDP, "10.200.0.1", "198.51.100.9", 40000, 5000);
	assert_reason(run(&c, &p).reason, EGR_R_DENY_NO_RULE);
	/* Datagrams the sendmsg hook redirected to the sandbox's proxy. */
	c.real_sk = 0;
	p = pkt4(EGR_IPPROTO_UDP, "127.0.0.1", "127.0.0.1", 40000, 5353);
	assert_reason(run(&c, &p).reason, EGR_R_ALLOW_DNS_PROXY);
	p = pkt4(EGR_IPPROTO_UDP, "127.0.0.1", "127.0.0.1", 40000, 5355);
	assert_reason(run(&c, &p).reason, EGR_R_DENY_NO_RULE);
	/* Not IP at all. */
	pkt_eth(&p, 0x0806);
	p.len += 28;
	assert_reason(run(&c, &p).reason, EGR_R_DENY_NOT_IP);
}

/* The parser reads where the packet really goes, options and extension
 * headers included; a later fragment has no ports. */
static void test_parse_finds_ports_past_options(void **state)
{
	struct egr_t_case c = connected(SB_A, EGR_SOCK_DGRAM, EGR_IPPROTO_UDP, "0.0.0.0", 0);
	struct pkt p = pkt4(EGR_IPPROTO_UDP, "10.200.0.1", "10.0.0.9", 40000, 5000);
	struct egr_t_out o;
	unsigned char *ip = p.b + 14;

	o = run(&c, &p);
	assert_int_equal(o.has_ports, 1);
	assert_int_equal(o.dport, 5000);
	assert_reason(o.reason, EGR_R_ALLOW_RULE);
	/* One word of IP options (a NOP-padded record): the ports move. */
	memmove(ip + 24, ip + 20, 20);
	memset(ip + 20, 1, 4);
	ip[0] = 0x46;
	p.len += 4;
	o = run(&c, &p);
	assert_int_equal(o.has_ports, 1);
	assert_int_equal(o.dport, 5000);
	assert_reason(o.reason, EGR_R_ALLOW_RULE);
	/* The same words read as ports without the options: what a parser
	 * that ignored ihl would judge. */
	ip[0] = 0x45;
	o = run(&c, &p);
	assert_int_equal(o.dport, 0x0101);
	assert_reason(o.reason, EGR_R_DENY_PORT);
	/* A later fragment: no ports, so only an address allowed on every
	 * port would pass. */
	ip[0] = 0x46;
	ip[6] = 0x00;
	ip[7] = 0x10;
	o = run(&c, &p);
	assert_int_equal(o.has_ports, 0);
	assert_reason(o.reason, EGR_R_DENY_PORT);
	/* IPv6, through a hop-by-hop header. */
	p = pkt6(EGR_IPPROTO_TCP, "2001:db8:ff::1", "2001:db8::7", 40000, 443);
	ip = p.b + 14;
	memmove(ip + 48, ip + 40, 20);
	memset(ip + 40, 0, 8);
	ip[40] = EGR_IPPROTO_TCP; /* next header */
	ip[6] = 0;                /* hop-by-hop */
	ip[5] = 28;
	p.len += 8;
	o = run(&c, &p);
	assert_int_equal(o.has_ports, 1);
	assert_int_equal(o.dport, 443);
	assert_reason(o.reason, EGR_R_ALLOW_RULE);
}

static void test_backstop_listeners_only_with_inbound_allow(void **state)
{
	struct pkt p = pkt4(EGR_IPPROTO_TCP, "10.200.0.1", "198.51.100.9", 8080, 40000);
	struct egr_t_case c = connected(SB_A, EGR_SOCK_STREAM, EGR_IPPROTO_TCP, "0.0.0.0", 0);

	c.sk_state = 10; /* TCP_LISTEN */
	assert_reason(run(&c, &p).reason, EGR_R_DENY_NO_RULE);
	c.sandbox_id = SB_INBOUND;
	assert_reason(run(&c, &p).reason, EGR_R_ALLOW_LISTENER);
	/* Request and timewait sockets likewise. */
	c.sk_kind = 2; /* EGR_SV_MINI */
	assert_reason(run(&c, &p).reason, EGR_R_ALLOW_LISTENER);
	c.sandbox_id = SB_A;
	assert_reason(run(&c, &p).reason, EGR_R_DENY_NO_RULE);
}

/* --- quotas --------------------------------------------------------------------- */

static void put_quota(struct bpf_map *map, __u32 id, __u64 limit, __u64 window, __u64 start)
{
	struct egr_quota q = { .limit_bytes = limit, .window_ns = window, .window_start_ns = start };

	assert_int_equal(bpf_map__update_elem(map, &id, sizeof(id), &q, sizeof(q), BPF_ANY), 0);
}

static struct egr_quota get_quota(struct bpf_map *map, __u32 id)
{
	struct egr_quota q;

	assert_int_equal(bpf_map__lookup_elem(map, &id, sizeof(id), &q, sizeof(q), 0), 0);
	return q;
}

static int charge(__u32 sandbox, __u64 len, __u64 now)
{
	struct egr_t_case c = { .op = EGR_T_QUOTA, .sandbox_id = sandbox, .len = len, .now = now };

	return run(&c, NULL).reason;
}

#define SEC_NS 1000000000ull

static void test_quota_first_over_then_window_reset(void **state)
{
	const __u32 sb = 21;
	const __u64 t0 = 5000 * SEC_NS;

	put_sandbox(sb, POLICY_A, TENANT_FREE, 0, 5353, 5354, 1000, SEC_NS);
	put_quota(skel->maps.egr_quota_sb, sb, 1000, SEC_NS, t0);
	assert_reason(charge(sb, 600, t0 + 1), EGR_R_ALLOW_QUOTA);
	assert_reason(charge(sb, 400, t0 + 2), EGR_R_ALLOW_QUOTA); /* exactly the limit */
	assert_reason(charge(sb, 1, t0 + 3), EGR_R_DENY_QUOTA_FIRST);
	assert_reason(charge(sb, 500, t0 + 4), EGR_R_DENY_QUOTA);
	assert_int_equal(get_quota(skel->maps.egr_quota_sb, sb).exceeded, 1);
	/* The next window starts afresh... */
	assert_reason(charge(sb, 900, t0 + SEC_NS + 5), EGR_R_ALLOW_QUOTA);
	assert_int_equal(get_quota(skel->maps.egr_quota_sb, sb).bytes, 900);
	/* ...and its first packet over the limit is reported again. */
	assert_reason(charge(sb, 200, t0 + SEC_NS + 6), EGR_R_DENY_QUOTA_FIRST);
	assert_reason(charge(sb, 1, t0 + SEC_NS + 7), EGR_R_DENY_QUOTA);
	assert_int_equal(get_quota(skel->maps.egr_quota_sb, sb).exceeded, 2);
}

static void test_tenant_quota_binds_a_sandbox_without_its_own(void **state)
{
	const __u32 capped = 23, free_sb = 24;
	const __u64 t0 = 7000 * SEC_NS;

	put_sandbox(capped, POLICY_A, TENANT_CAPPED, 0, 5353, 5354, 0, 0);
	put_sandbox(free_sb, POLICY_A, TENANT_FREE, 0, 5353, 5354, 0, 0);
	put_quota(skel->maps.egr_quota_tenant, TENANT_CAPPED, 1000, 0, t0);
	assert_reason(charge(capped, 800, t0 + 1), EGR_R_ALLOW_QUOTA);
	assert_reason(charge(capped, 800, t0 + 2), EGR_R_DENY_QUOTA_FIRST);
	/* No window: it never resets. */
	assert_reason(charge(capped, 1, t0 + 100 * SEC_NS), EGR_R_DENY_QUOTA);
	/* Twin: a sandbox of a tenant without a quota sends the same. */
	assert_reason(charge(free_sb, 800, t0 + 1), EGR_R_ALLOW_QUOTA);
	assert_reason(charge(free_sb, 800, t0 + 2), EGR_R_ALLOW_QUOTA);
	assert_reason(charge(free_sb, 1, t0 + 100 * SEC_NS), EGR_R_ALLOW_QUOTA);
}

/* EGR_SB_TENANT_NO_QUOTA skips the tenant's quota and nothing else; without
 * it (every older entry) the tenant's quota binds. That egressd never leaves
 * the flag on while the tenant has a quota is the e2e tests' (test_fastbpf). */
static void test_tenant_no_quota_flag_skips_only_the_tenant_quota(void **state)
{
	const __u32 flagged = 25, plain = 26, own = 27;
	const __u64 t0 = 9000 * SEC_NS;

	put_sandbox(flagged, POLICY_A, TENANT_CAPPED, EGR_SB_TENANT_NO_QUOTA, 5353, 5354, 0, 0);
	put_sandbox(plain, POLICY_A, TENANT_CAPPED, 0, 5353, 5354, 0, 0);
	put_sandbox(own, POLICY_A, TENANT_CAPPED, EGR_SB_TENANT_NO_QUOTA, 5353, 5354, 1000, 0);
	put_quota(skel->maps.egr_quota_tenant, TENANT_CAPPED, 1000, 0, t0);
	put_quota(skel->maps.egr_quota_sb, own, 1000, 0, t0);
	/* The flag: the tenant's quota is neither charged nor enforced. */
	assert_reason(charge(flagged, 1600, t0 + 1), EGR_R_ALLOW_QUOTA);
	assert_int_equal(get_quota(skel->maps.egr_quota_tenant, TENANT_CAPPED).bytes, 0);
	/* Twin: the same tenant's sandbox without the flag is bound by it. */
	assert_reason(charge(plain, 800, t0 + 2), EGR_R_ALLOW_QUOTA);
	assert_reason(charge(plain, 800, t0 + 3), EGR_R_DENY_QUOTA_FIRST);
	assert_int_equal(get_quota(skel->maps.egr_quota_tenant, TENANT_CAPPED).bytes, 1600);
	/* The flag does not skip the sandbox's own quota. */
	assert_reason(charge(own, 800, t0 + 4), EGR_R_ALLOW_QUOTA);
	assert_reason(charge(own, 800, t0 + 5), EGR_R_DENY_QUOTA_FIRST);
}

/* --- the deny-event budget ------------------------------------------------------- */

static __u32 takes(__u32 sandbox, __u32 n)
{
	struct egr_t_case c = { .op = EGR_T_BUDGET, .sandbox_id = sandbox, .count = n,
				.port = 443 };

	c.daddr[0] = ip4("198.51.100.77");
	return run(&c, NULL).taken;
}

static void test_deny_budget_per_sandbox(void **state)
{
	const __u32 noisy = 41, quiet = 42;
	const __u64 burst = skel->rodata->egr_deny_events_burst;
	const __u64 step = SEC_NS / skel->rodata->egr_deny_events_per_s;
	struct egr_deny_budget b;
	__u64 t0 = boot_ns(), refill;
	__u32 got, i;

	assert_true(burst + 100 <= EGR_T_MAX_TAKES);
	got = takes(noisy, (__u32)burst + 100);
	refill = (boot_ns() - t0) / step; /* tokens the clock may have added */
	assert_in_range(got, burst, burst + refill);
	assert_int_equal(bpf_map__lookup_elem(skel->maps.egr_deny_budget, &noisy, sizeof(noisy),
					      &b, sizeof(b), 0), 0);
	assert_int_equal(b.suppressed, burst + 100 - got);
	/* The suppressed denies are noted under their destination. */
	for (i = 0; i < EGR_DENY_TOP; i++)
		if (b.top[i].count)
			break;
	assert_true(i < EGR_DENY_TOP);
	assert_int_equal(b.top[i].count, b.suppressed);
	assert_int_equal(b.top[i].port, 443);
	/* Spent: the next denies are suppressed, bar what the clock refilled. */
	t0 = boot_ns();
	got = takes(noisy, 50);
	assert_in_range(got, 0, 1 + (boot_ns() - t0) / step);
	/* Twin: another sandbox's budget is its own, whole. */
	assert_int_equal(takes(quiet, (__u32)burst), burst);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_expired_learned_32_falls_back_to_static_prefix),
		cmocka_unit_test(test_expired_learned_128_falls_back_to_static_prefix),
		cmocka_unit_test(test_rules_never_cross_policies),
		cmocka_unit_test(test_unspecified_destination_never_allowed),
		cmocka_unit_test(test_dns_goes_to_the_sandbox_proxy_whatever_resolver),
		cmocka_unit_test(test_no_proxy_means_no_dns_even_if_allowlisted),
		cmocka_unit_test(test_send_without_address_is_judged_as_its_peer),
		cmocka_unit_test(test_backstop_passes_the_peer_connect_judged),
		cmocka_unit_test(test_backstop_judges_a_packet_not_going_to_the_peer),
		cmocka_unit_test(test_backstop_trusts_only_sockets_connect_judged),
		cmocka_unit_test(test_backstop_unconnected_datagrams_need_the_allowlist),
		cmocka_unit_test(test_parse_finds_ports_past_options),
		cmocka_unit_test(test_backstop_listeners_only_with_inbound_allow),
		cmocka_unit_test(test_quota_first_over_then_window_reset),
		cmocka_unit_test(test_tenant_quota_binds_a_sandbox_without_its_own),
		cmocka_unit_test(test_tenant_no_quota_flag_skips_only_the_tenant_quota),
		cmocka_unit_test(test_deny_budget_per_sandbox),
	};

	return cmocka_run_group_tests_name("bpf", tests, setup, teardown);
}
