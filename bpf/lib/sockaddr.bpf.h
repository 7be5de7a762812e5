/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The sock_addr decisions: connect4/6 (TCP, TFO, connected UDP, ping) and
 * sendmsg4/6 (every unconnected UDP datagram). egr_addr_judge() is what the
 * destination gets, a function of plain values (tests/bpf runs it, since
 * sock_addr programs cannot be test-run); the entry point then carries the
 * judgement out on the context (DNS redirect, inspection) and reports it.
 */
#ifndef EGR_LIB_SOCKADDR_BPF_H
#define EGR_LIB_SOCKADDR_BPF_H

#include "allow.bpf.h"
#include "dns.bpf.h"
#include "events.bpf.h"
#include "meter.bpf.h"
#include "egr_reasons.h"

enum egr_hook { EGR_HOOK_CONNECT, EGR_HOOK_SENDMSG };

/*
 * The peer of a connected UDP socket. A send with no address but with
 * ancillary data (IP_TOS, IPV6_TCLASS, IP_PKTINFO, ...) leaves the kernel's
 * connected fast path and runs the sendmsg hook with 0.0.0.0:0 or [::]:0:
 * the kernel fills in the connected peer after the hook (and ignores any
 * rewrite). udp_sendmsg and udpv6_sendmsg refuse an explicit port 0 before
 * the hook, so port 0 here always means "no address". The datagram goes to
 * the peer (or, with a routing header cmsg, to a first hop the skb backstop
 * judges), so the peer is what is judged, now, against the current policy.
 * -1 when the socket has no peer: denied.
 */
static __always_inline int egr_connected_peer(struct bpf_sock_addr *ctx, int v6, __u32 daddr[4],
					      __u16 *port)
{
	struct bpf_sock *sk = ctx->sk;
	__u32 family, d4;

	if (!sk)
		return -1;
	/* Every field read outright, each its own load: the verifier
	 * refuses a pointer the compiler would compute into the socket. */
	family = sk->family;
	*port = bpf_ntohs(sk->dst_port);
	d4 = sk->dst_ip4;
	daddr[0] = sk->dst_ip6[0];
	daddr[1] = sk->dst_ip6[1];
	daddr[2] = sk->dst_ip6[2];
	daddr[3] = sk->dst_ip6[3];
	if (!*port)
		return -1;
	if (family == EGR_AF_INET) {
		if (v6)
			return -1;
		daddr[0] = d4;
		daddr[1] = daddr[2] = daddr[3] = 0;
		return 0;
	}
	/* sendmsg4 on an AF_INET6 socket: it is connected to ::ffff:a.b.c.d. */
	if (!v6 && !egr_ip6_is_v4mapped(daddr, &daddr[0]))
		return -1;
	return 0;
}

/*
 * What a connect or datagram of sandbox sb (NULL: none) to daddr:port gets.
 * peer: a send without address, judged as its connected peer (peer_err: it
 * has none). Never redirected then: the kernel would not take the rewrite,
 * and a socket redirected at connect() has the proxy as its peer.
 * EGR_R_ALLOW_DNS_REDIRECT asks the caller to point it at the proxy.
 */
static __always_inline int egr_addr_judge(const struct egr_sandbox *sb, int v6,
					  const __u32 daddr[4], __u16 port, __u32 protocol,
					  int peer, int peer_err)
{
	int dns;

	if (!sb)
		return EGR_R_DENY_NO_SANDBOX;
	if (peer) {
		if (peer_err)
			return EGR_R_DENY_NO_PEER;
		if (v6 ? egr_is_proxy6(sb, daddr, port) : egr_is_proxy4(sb, daddr[0], port))
			return EGR_R_ALLOW_DNS_PROXY;
	} else {
		/* All DNS goes to the sandbox's own proxy, whatever resolver it
		 * named. */
		dns = egr_dns_route(sb, v6, port, protocol);
		if (dns)
			return dns;
	}
	return v6 ? egr_decide6(sb, daddr, port, protocol) : egr_decide4(sb, daddr[0], port, protocol);
}

/* Counters, meters and the event of one sock_addr decision. A would-be deny
 * (audited) is reported like a deny, within the deny budget. */
static __always_inline void egr_account_addr(enum egr_hook hook, __u32 sandbox_id,
					     const struct egr_sandbox *sb, int v6,
					     const __u32 daddr[4], __u16 port, __u32 protocol,
					     __u32 sock_type, int verdict, int audited)
{
	struct egr_event *e;

	if (hook == EGR_HOOK_CONNECT) {
		egr_count(verdict == EGR_ALLOW ? EGR_CNT_CONNECT_ALLOW : EGR_CNT_CONNECT_DENY);
		if (sb)
			egr_meter_add(sandbox_id, sb->tenant_id,
				      verdict == EGR_ALLOW ? METER_FIELD(conn_allowed)
							   : METER_FIELD(conn_denied), 1);
		if (sb && audited)
			egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(would_deny_conn), 1);
	} else {
		egr_count(verdict == EGR_ALLOW ? EGR_CNT_SENDMSG_ALLOW : EGR_CNT_SENDMSG_DENY);
		if (sb)
			egr_meter_add(sandbox_id, sb->tenant_id,
				      verdict == EGR_ALLOW ? METER_FIELD(dgram_allowed)
							   : METER_FIELD(dgram_denied), 1);
		if (sb && audited)
			egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(would_deny_dgram), 1);
	}

	if (!(verdict == EGR_ALLOW && !audited
		      ? egr_should_report(verdict)
		      : egr_deny_budget_take(sandbox_id, v6 ? EGR_AF_INET6 : EGR_AF_INET, protocol,
					     port, daddr)))
		return;
	e = egr_event_new(hook == EGR_HOOK_CONNECT ? EGR_EV_CONNECT : EGR_EV_SENDMSG, sandbox_id,
			  sb, 1);
	if (!e)
		return;
	e->verdict = audited ? EGR_VERDICT_AUDIT : verdict;
	e->family = v6 ? EGR_AF_INET6 : EGR_AF_INET;
	e->protocol = protocol;
	e->sock_type = sock_type;
	e->port = port;
	__builtin_memcpy(e->addr, daddr, v6 ? 16 : 4);
	bpf_ringbuf_submit(e, 0);
}

#endif /* EGR_LIB_SOCKADDR_BPF_H */
