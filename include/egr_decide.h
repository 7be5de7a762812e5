/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The policy decisions, as pure functions of what the maps returned. The BPF
 * programs call them after their lookups; the cmocka tests compile the very
 * same functions (tests/unit/test_decide.c), because sock_addr programs cannot
 * be run with BPF_PROG_TEST_RUN on our kernels.
 *
 * Every function answers EGR_ALLOW or EGR_DENY; anything unexpected denies.
 */
#ifndef EGR_DECIDE_H
#define EGR_DECIDE_H

#include "egressd.h"

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

/* Verdicts as the cgroup hooks spell them: 1 lets the call through, 0 makes
 * it fail with EPERM. */
#define EGR_DENY  0
#define EGR_ALLOW 1

/* Protocol numbers, spelled out because vmlinux.h has the enum but
 * userspace's <netinet/in.h> and the BPF side must agree without either. */
#define EGR_IPPROTO_ICMP    1
#define EGR_IPPROTO_TCP     6
#define EGR_IPPROTO_UDP     17
#define EGR_IPPROTO_ICMPV6  58
#define EGR_IPPROTO_SCTP    132
#define EGR_IPPROTO_UDPLITE 136
#define EGR_IPPROTO_MPTCP   262

#define EGR_AF_INET  2
#define EGR_AF_INET6 10

#define EGR_SOCK_STREAM    1
#define EGR_SOCK_DGRAM     2
#define EGR_SOCK_RAW       3
#define EGR_SOCK_SEQPACKET 5

/*
 * Which EGR_PROTO_* bit a socket's protocol needs in a port range. MPTCP is
 * TCP on the wire. Anything else (ping sockets a policy allowed) has no
 * ports: it needs a range that allows both protocols on every port, that is
 * an address allowed outright ("HOST:*").
 */
static __always_inline __u16 egr_proto_bit(__u32 protocol)
{
	switch (protocol) {
	case EGR_IPPROTO_TCP:
	case EGR_IPPROTO_MPTCP:
		return EGR_PROTO_TCP;
	case EGR_IPPROTO_UDP:
		return EGR_PROTO_UDP;
	default:
		return 0;
	}
}

/*
 * Is (port, protocol) allowed by the rule of the longest matching prefix?
 * The rule already holds the ranges of every shorter prefix that covers it
 * (merged at compile time), so the longest match alone decides.
 * now_ns is bpf_ktime_get_boot_ns(); a rule with an expiry in the past
 * denies (DNS-learned addresses), and *expired tells the caller why.
 */
static __always_inline int egr_rule_allows(const struct egr_rule *rule, __u16 port,
					   __u32 protocol, __u64 now_ns, int *expired)
{
	__u16 bit = egr_proto_bit(protocol);
	__u32 n, i;

	*expired = 0;
	if (!rule)
		return EGR_DENY;
	if (rule->expires_ns && rule->expires_ns <= now_ns) {
		*expired = 1;
		return EGR_DENY;
	}
	n = rule->nranges;
	if (n > EGR_MAX_PORT_RANGES)
		return EGR_DENY;
	for (i = 0; i < EGR_MAX_PORT_RANGES; i++) {
		const struct egr_port_range *r = &rule->ranges[i];

		if (i >= n)
			break;
		if (bit) {
			if ((r->protos & bit) && port >= r->lo && port <= r->hi)
				return EGR_ALLOW;
		} else if (r->protos == EGR_PROTO_ANY && r->lo == 0 && r->hi == 0xffff) {
			return EGR_ALLOW;
		}
	}
	return EGR_DENY;
}

/*
 * An IPv6 destination in ::ffff:0:0/96 reaches an IPv4 host through a
 * dual-stack socket; connect6 is the only hook that sees it, so it must be
 * judged by the IPv4 rules. Address words are in network byte order, as in
 * bpf_sock_addr.user_ip6. Returns 1 and the IPv4 address (network order) in
 * *v4 when mapped.
 */
static __always_inline int egr_ip6_is_v4mapped(const __u32 w[4], __u32 *v4)
{
	/* 0000:0000 0000:0000 0000:ffff — the third word is 0x0000ffff in
	 * network order, whatever the host order is. */
	const __u8 *b = (const __u8 *)&w[2];

	if (w[0] != 0 || w[1] != 0)
		return 0;
	if (b[0] != 0 || b[1] != 0 || b[2] != 0xff || b[3] != 0xff)
		return 0;
	*v4 = w[3];
	return 1;
}

/*
 * The unspecified address as a destination. The kernel sends a connect() or
 * a datagram to 0.0.0.0 to a local address it picks after the hooks ran
 * (the socket's bound source, else 127.0.0.1: ip_route_output_key_hash_rcu),
 * and one to :: to ::1 (the "BSD'ism" of tcp_v6_connect and udpv6_sendmsg).
 * Judging 0.0.0.0 itself would let a rule for it (a sinkhole's answer, a
 * learned 0.0.0.0) open local services. So the hooks make the loopback
 * explicit: these rewrite the destination to 127.0.0.1, ::1 or
 * ::ffff:127.0.0.1, the hook judges that and hands it to the kernel, and
 * what was judged is where it goes, whatever was bound before (or by a
 * racing thread) and whatever IP_PKTINFO says. Words in network order, as
 * in bpf_sock_addr. Return 1 when they rewrote the address.
 */
static __always_inline void egr_ip4_set_loopback(__u32 *a)
{
	__u8 *b = (__u8 *)a;

	b[0] = 127;
	b[1] = 0;
	b[2] = 0;
	b[3] = 1;
}

static __always_inline int egr_ip4_unspec_to_loopback(__u32 *a)
{
	if (*a != 0)
		return 0;
	egr_ip4_set_loopback(a);
	return 1;
}

static __always_inline int egr_ip6_unspec_to_loopback(__u32 w[4])
{
	__u32 v4;

	if (w[0] != 0 || w[1] != 0)
		return 0;
	if (w[2] == 0 && w[3] == 0) {
		((__u8 *)w)[15] = 1; /* :: -> ::1 */
		return 1;
	}
	if (egr_ip6_is_v4mapped(w, &v4) && v4 == 0) {
		egr_ip4_set_loopback(&w[3]); /* ::ffff:0.0.0.0 -> ::ffff:127.0.0.1 */
		return 1;
	}
	return 0;
}

/* Is the address unspecified (0.0.0.0, ::, ::ffff:0.0.0.0)? Never a
 * destination a rule may allow: only a packet from 0.0.0.0 (ingress) or a
 * rule that should not exist could name it, and both deny. */
static __always_inline int egr_ip4_is_unspec(__u32 a)
{
	return a == 0;
}

static __always_inline int egr_ip6_is_unspec(const __u32 w[4])
{
	__u32 v4;

	if (w[0] == 0 && w[1] == 0 && w[2] == 0 && w[3] == 0)
		return 1;
	return egr_ip6_is_v4mapped(w, &v4) && v4 == 0;
}

/*
 * cgroup/sock_create: which inet sockets may a sandbox create at all?
 * TCP and UDP always (their every destination is judged by connect and
 * sendmsg). The rest either have no sock_addr hooks (raw, UDP-Lite, SCTP) or
 * only some (ping: connect but not sendto), so only a policy that names them
 * gets them. Families other than inet never reach this hook.
 */
static __always_inline int egr_sock_create_allows(__u32 sb_flags, __u32 family, __u32 type,
						  __u32 protocol)
{
	if (family != EGR_AF_INET && family != EGR_AF_INET6)
		return EGR_DENY;

	if (type == EGR_SOCK_RAW)
		return (sb_flags & EGR_SB_ALLOW_RAW) ? EGR_ALLOW : EGR_DENY;

	switch (protocol) {
	case EGR_IPPROTO_TCP:
		return type == EGR_SOCK_STREAM ? EGR_ALLOW : EGR_DENY;
	case EGR_IPPROTO_UDP:
		return type == EGR_SOCK_DGRAM ? EGR_ALLOW : EGR_DENY;
	case EGR_IPPROTO_MPTCP:
		return (type == EGR_SOCK_STREAM && (sb_flags & EGR_SB_ALLOW_MPTCP)) ? EGR_ALLOW
										    : EGR_DENY;
	case EGR_IPPROTO_ICMP:
	case EGR_IPPROTO_ICMPV6:
		return (type == EGR_SOCK_DGRAM && (sb_flags & EGR_SB_ALLOW_ICMP)) ? EGR_ALLOW
										  : EGR_DENY;
	case EGR_IPPROTO_UDPLITE:
		return (sb_flags & EGR_SB_ALLOW_UDPLITE) ? EGR_ALLOW : EGR_DENY;
	case EGR_IPPROTO_SCTP:
		return (sb_flags & EGR_SB_ALLOW_SCTP) ? EGR_ALLOW : EGR_DENY;
	default:
		return EGR_DENY;
	}
}

/* Socket options that change where a packet really goes while the hooks
 * judged its final destination: source routing. */
#define EGR_SOL_IP              0
#define EGR_SOL_IPV6            41
#define EGR_IP_OPTIONS          4
#define EGR_IPV6_2292RTHDR      5
#define EGR_IPV6_2292PKTOPTIONS 6 /* sticky options, may carry a routing header */
#define EGR_IPV6_NEXTHOP        9
#define EGR_IPV6_RTHDR          57

static __always_inline int egr_setsockopt_allows(int level, int optname)
{
	if (level == EGR_SOL_IP)
		return optname == EGR_IP_OPTIONS ? EGR_DENY : EGR_ALLOW;
	if (level == EGR_SOL_IPV6) {
		switch (optname) {
		case EGR_IPV6_RTHDR:
		case EGR_IPV6_2292RTHDR:
		case EGR_IPV6_2292PKTOPTIONS:
		case EGR_IPV6_NEXTHOP:
			return EGR_DENY;
		}
	}
	return EGR_ALLOW;
}

/*
 * Token bucket that bounds sampled allow events: rate_per_s tokens a second
 * up to burst. Returns 1 (and takes a token) when an event may be sent.
 * State is per CPU, so no atomics.
 */
struct egr_bucket {
	__u64 last_ns;
	__u64 tokens;
};

static __always_inline int egr_bucket_take(struct egr_bucket *b, __u64 now_ns, __u64 rate_per_s,
					   __u64 burst)
{
	__u64 elapsed = now_ns - b->last_ns;

	if (now_ns < b->last_ns)
		elapsed = 0;
	if (rate_per_s && elapsed >= 1000000000ull / rate_per_s) {
		__u64 add = elapsed / (1000000000ull / rate_per_s);

		b->tokens = b->tokens + add > burst ? burst : b->tokens + add;
		b->last_ns = now_ns;
	}
	if (!b->tokens)
		return 0;
	b->tokens--;
	return 1;
}

/*
 * Egress quota: charge len bytes to q at now_ns. Returns EGR_DENY once the
 * window's bytes are past the limit. *first_over is set for the packet that
 * crossed it (one event and one alert per window). The caller does the
 * atomic add; this decides on the value it got back.
 */
static __always_inline int egr_quota_verdict(__u64 limit, __u64 before, __u64 len, int *first_over)
{
	*first_over = 0;
	if (!limit)
		return EGR_ALLOW;
	if (before + len <= limit)
		return EGR_ALLOW;
	*first_over = before <= limit;
	return EGR_DENY;
}

/*
 * lsm_cgroup/socket_create: every socket family, not only inet (where the
 * host can load it). Unix, inet and inet6 always pass here (their kinds and
 * destinations are judged by the cgroup hooks); any other family only when
 * the policy names it. Kernel-internal sockets are not the sandbox's.
 */
#define EGR_AF_UNIX 1

static __always_inline int egr_family_allowed(__u64 families, int family, int kern)
{
	if (kern)
		return EGR_ALLOW;
	if (family == EGR_AF_UNIX || family == EGR_AF_INET || family == EGR_AF_INET6)
		return EGR_ALLOW;
	if (family < 0 || family >= 64)
		return EGR_DENY;
	return (families >> family) & 1 ? EGR_ALLOW : EGR_DENY;
}

/*
 * The last word on every decision of a sandbox, after the rule that judged
 * it: a quarantined sandbox (circuit breaker) is denied everything, what its
 * policy allows included; a sandbox in audit mode is let through where the
 * policy denied, and *audited says so (the caller reports and counts it).
 * auditable is 0 for decisions that are not the allowlist's (no DNS proxy
 * to redirect to): those deny in audit mode too, fail closed.
 */
static __always_inline int egr_apply_mode(const struct egr_sandbox *sb, int verdict, int auditable,
					  int *audited)
{
	*audited = 0;
	if (!sb || sb->quarantined)
		return EGR_DENY;
	if (verdict != EGR_ALLOW && auditable && (sb->flags & EGR_SB_AUDIT)) {
		*audited = 1;
		return EGR_ALLOW;
	}
	return verdict == EGR_ALLOW ? EGR_ALLOW : EGR_DENY;
}

#endif /* EGR_DECIDE_H */
