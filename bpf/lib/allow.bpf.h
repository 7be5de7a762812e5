/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The allowlist: one LPM trie per family holding every policy's prefixes
 * (the policy id is part of the key), the expired-/32 fallback, and the
 * backstop that judges where an egress packet really goes. Every function
 * returns an enum egr_reason; no prefix, an expired one, the wrong port or
 * an unspecified address deny.
 */
#ifndef EGR_LIB_ALLOW_BPF_H
#define EGR_LIB_ALLOW_BPF_H

#include "maps.bpf.h"
#include "skb.bpf.h"
#include "dns.bpf.h"
#include "egr_reasons.h"

/* Large enough for two million-entry policies at once: an update builds the
 * new rule set beside the old one before it switches. LPM tries allocate per
 * entry (BPF_F_NO_PREALLOC is mandatory for them), so this costs nothing
 * until used. */
#define EGR_MAX_RULES (1u << 22)

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, EGR_MAX_RULES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_lpm4_key);
	__type(value, struct egr_rule);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_allow4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, EGR_MAX_RULES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_lpm6_key);
	__type(value, struct egr_rule);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_allow6 SEC(".maps");

static __always_inline int egr_judge_rule(const struct egr_rule *rule, __u16 port, __u32 protocol)
{
	/* The clock only for a rule that can expire (DNS-learned): static
	 * rules and misses, most lookups, skip a clock read. 0 is never past
	 * an expiry, and egr_rule_allows looks at the time only when expires_ns
	 * is set. */
	__u64 now = rule && rule->expires_ns ? bpf_ktime_get_boot_ns() : 0;
	int expired, verdict = egr_rule_allows(rule, port, protocol, now, &expired);

	if (expired) {
		egr_count(EGR_CNT_EXPIRED);
		return EGR_R_DENY_EXPIRED;
	}
	if (verdict == EGR_ALLOW)
		return EGR_R_ALLOW_RULE;
	return rule ? EGR_R_DENY_PORT : EGR_R_DENY_NO_RULE;
}

/* After an expired /32 (or /128): what a shorter prefix says. Nothing
 * there keeps the reason "expired". */
static __always_inline int egr_after_expiry(int reason)
{
	return reason == EGR_R_DENY_NO_RULE ? EGR_R_DENY_EXPIRED : reason;
}

static __always_inline int egr_decide4(const struct egr_sandbox *sb, __u32 daddr_be, __u16 port,
				       __u32 protocol)
{
	struct egr_lpm4_key key = {
		.prefixlen = EGR_LPM_POLICY_BITS + 32,
		.policy_id = sb->policy_id,
	};
	int reason;

	/* 0.0.0.0 is judged as the loopback the kernel will use (the hooks
	 * rewrite it first); a rule for 0.0.0.0 itself never allows. */
	if (egr_ip4_is_unspec(daddr_be))
		return EGR_R_DENY_UNSPEC;
	__builtin_memcpy(key.addr, &daddr_be, sizeof(key.addr));
	reason = egr_judge_rule(bpf_map_lookup_elem(&egr_allow4, &key), port, protocol);
	if (reason == EGR_R_DENY_EXPIRED) {
		/* An expired DNS-learned /32 must not hide a static prefix
		 * that covers the same address: ask the trie for one bit less. */
		key.prefixlen = EGR_LPM_POLICY_BITS + 31;
		reason = egr_after_expiry(
			egr_judge_rule(bpf_map_lookup_elem(&egr_allow4, &key), port, protocol));
	}
	return reason;
}

static __always_inline int egr_decide6(const struct egr_sandbox *sb, const __u32 daddr[4],
				       __u16 port, __u32 protocol)
{
	struct egr_lpm6_key key = {
		.prefixlen = EGR_LPM_POLICY_BITS + 128,
		.policy_id = sb->policy_id,
	};
	__u32 v4;
	int reason;

	/* ::ffff:a.b.c.d goes to an IPv4 host: the IPv4 rules decide. */
	if (egr_ip6_is_v4mapped(daddr, &v4))
		return egr_decide4(sb, v4, port, protocol);
	if (egr_ip6_is_unspec(daddr))
		return EGR_R_DENY_UNSPEC;
	__builtin_memcpy(key.addr, daddr, sizeof(key.addr));
	reason = egr_judge_rule(bpf_map_lookup_elem(&egr_allow6, &key), port, protocol);
	if (reason == EGR_R_DENY_EXPIRED) {
		key.prefixlen = EGR_LPM_POLICY_BITS + 127;
		reason = egr_after_expiry(
			egr_judge_rule(bpf_map_lookup_elem(&egr_allow6, &key), port, protocol));
	}
	return reason;
}

/*
 * The backstop: may this egress packet go where it really goes? A packet of
 * a connected TCP or UDP socket to the very address and port that connect()
 * judged passes (this also keeps accepted inbound connections, when allowed,
 * working); checked first, from the socket alone, as most packets are these.
 * Anything else — unconnected datagrams, raw and ping sockets the policy
 * allowed, a first hop set by a routing header or IP options — must be in
 * the allowlist itself.
 */
static __always_inline int egr_backstop(const struct egr_sandbox *sb, const struct egr_l3 *l3,
					const struct egr_sock_view *sv)
{
	__u32 port = l3->has_ports ? l3->dport : 0;

	if (sv->kind == EGR_SV_FULL) {
		/* Only where connect() is hooked: TCP, UDP (and MPTCP, TCP on
		 * the wire). UDP-Lite has no pre_connect, so a connected
		 * UDP-Lite socket was never judged. */
		if (sv->dport && egr_connect_judged_kind(sv->type, sv->protocol) &&
		    sv->family == l3->family &&
		    egr_addr_eq(sv->dst, l3->daddr, sv->family == EGR_AF_INET6) &&
		    (!l3->has_ports || sv->dport == l3->dport))
			return EGR_R_ALLOW_CONNECTED;
		/* A listener answering a SYN (syncookies and the like send
		 * from the listener itself). */
		if (sv->state == TCP_LISTEN && (sb->flags & EGR_SB_INBOUND_ALLOW))
			return EGR_R_ALLOW_LISTENER;
	} else if (sv->kind == EGR_SV_MINI && (sb->flags & EGR_SB_INBOUND_ALLOW)) {
		/* Request and timewait sockets of accepted connections. */
		return EGR_R_ALLOW_LISTENER;
	}
	/* Datagrams the sendmsg hook redirected to the sandbox's DNS proxy. */
	if (l3->has_ports && (l3->family == EGR_AF_INET ? egr_is_proxy4(sb, l3->daddr[0], l3->dport)
							 : egr_is_proxy6(sb, l3->daddr, l3->dport)))
		return EGR_R_ALLOW_DNS_PROXY;
	if (l3->family == EGR_AF_INET)
		return egr_decide4(sb, l3->daddr[0], port, l3->protocol);
	return egr_decide6(sb, l3->daddr, port, l3->protocol);
}

#endif /* EGR_LIB_ALLOW_BPF_H */
