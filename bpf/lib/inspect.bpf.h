/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The inspecting proxy (docs/inspect.md). connect4/6 record where an
 * inspected TCP socket meant to go in socket storage (egr_inspect_sk) and
 * point it at the sandbox's proxy listener; the SYN leaving that socket
 * publishes the record in egr_inspect_orig under the client's address and
 * port, for the proxy to find when it accepts.
 */
#ifndef EGR_LIB_INSPECT_BPF_H
#define EGR_LIB_INSPECT_BPF_H

#include "maps.bpf.h"
#include "skb.bpf.h"
#include "dns.bpf.h" /* EGR_LOOPBACK4 */
#include "egr_reasons.h"

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct egr_inspect_orig);
} egr_inspect_sk SEC(".maps");

#include "inspect_orig.bpf.h"

static __always_inline int egr_is_inspect4(const struct egr_sandbox *sb, __u32 addr_be,
					   __u16 port)
{
	return sb->inspect_port4 && addr_be == bpf_htonl(EGR_LOOPBACK4) &&
	       port == sb->inspect_port4;
}

static __always_inline int egr_is_inspect6(const struct egr_sandbox *sb, const __u32 a[4],
					   __u16 port)
{
	__u32 v4;

	if (egr_ip6_is_v4mapped(a, &v4))
		return egr_is_inspect4(sb, v4, port);
	return sb->inspect_port6 && a[0] == 0 && a[1] == 0 && a[2] == 0 &&
	       a[3] == bpf_htonl(1) && port == sb->inspect_port6;
}

/*
 * Under network.inspect, an allowed TCP connect goes to the sandbox's
 * inspecting proxy instead, which lets it through only if its TLS SNI or
 * HTTP Host names a host the policy allows at that address. The original
 * destination is kept in socket storage until the SYN publishes it
 * (egr_inspect_publish). UDP 443 (QUIC, which the proxy cannot read) is
 * refused so clients fall back to TCP; other protocols are refused too.
 * Called only for destinations the allowlist already allowed.
 */
static __always_inline int egr_inspect_redirect(struct bpf_sock_addr *ctx, __u32 sandbox_id,
						const struct egr_sandbox *sb, int v6,
						const __u32 daddr[4], __u16 port)
{
	struct egr_inspect_orig *orig;
	struct bpf_sock *sk = ctx->sk;
	__u32 v4, any[4] = {};

	if (ctx->protocol == EGR_IPPROTO_UDP)
		return port == EGR_QUIC_PORT ? EGR_R_DENY_INSPECT : EGR_R_ALLOW_NO_INSPECT;
	if (ctx->protocol != EGR_IPPROTO_TCP || ctx->type != EGR_SOCK_STREAM || !sk)
		return EGR_R_DENY_INSPECT;
	/* Its own listener: a loop that would serve the sandbox to itself. */
	if (v6 ? egr_is_inspect6(sb, daddr, port) : egr_is_inspect4(sb, daddr[0], port))
		return EGR_R_DENY_INSPECT;
	if (v6 ? !sb->inspect_port6 : !sb->inspect_port4)
		return EGR_R_DENY_INSPECT;
	/* Only to the sandbox's own listener of egressd's (listen.bpf.h). */
	if (!egr_listener_ours(ctx, v6, any, 0, v6 ? sb->inspect_port6 : sb->inspect_port4,
			       EGR_IPPROTO_TCP, EGR_LISTEN_INSPECT, sandbox_id))
		return EGR_R_DENY_NOT_OURS;
	orig = bpf_sk_storage_get(&egr_inspect_sk, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!orig)
		return EGR_R_DENY_NO_STORAGE;
	__builtin_memset(orig, 0, sizeof(*orig));
	orig->port = port;
	if (v6 && egr_ip6_is_v4mapped(daddr, &v4)) {
		orig->family = EGR_AF_INET;
		__builtin_memcpy(orig->addr, &v4, 4);
	} else if (v6) {
		orig->family = EGR_AF_INET6;
		__builtin_memcpy(orig->addr, daddr, 16);
	} else {
		orig->family = EGR_AF_INET;
		__builtin_memcpy(orig->addr, daddr, 4);
	}
	if (v6) {
		ctx->user_ip6[0] = 0;
		ctx->user_ip6[1] = 0;
		ctx->user_ip6[2] = 0;
		ctx->user_ip6[3] = bpf_htonl(1);
		ctx->user_port = bpf_htons(sb->inspect_port6);
	} else {
		ctx->user_ip4 = bpf_htonl(EGR_LOOPBACK4);
		ctx->user_port = bpf_htons(sb->inspect_port4);
	}
	return EGR_R_ALLOW_INSPECT;
}

/* getpeername() of an inspected socket names where it meant to go, not the
 * proxy. Never refuses; 1 when it rewrote the address. */
static __always_inline int egr_restore_inspected(struct bpf_sock_addr *ctx,
						 const struct egr_sandbox *sb, int v6)
{
	__u32 peer[4] = {};
	struct egr_inspect_orig *orig;
	struct bpf_sock *sk = ctx->sk;
	__u16 port = bpf_ntohs((__u16)ctx->user_port);

	if (!sb || !sk || !(sb->flags & EGR_SB_INSPECT))
		return 0;
	if (v6) {
		peer[0] = ctx->user_ip6[0];
		peer[1] = ctx->user_ip6[1];
		peer[2] = ctx->user_ip6[2];
		peer[3] = ctx->user_ip6[3];
	} else {
		peer[0] = ctx->user_ip4;
	}
	if (v6 ? !egr_is_inspect6(sb, peer, port) : !egr_is_inspect4(sb, peer[0], port))
		return 0;
	orig = bpf_sk_storage_get(&egr_inspect_sk, sk, 0, 0);
	if (!orig || !orig->port)
		return 0;
	if (!v6) {
		if (orig->family != EGR_AF_INET)
			return 0;
		__builtin_memcpy(&ctx->user_ip4, orig->addr, 4);
	} else if (orig->family == EGR_AF_INET6) {
		__u32 a[4];

		__builtin_memcpy(a, orig->addr, 16);
		ctx->user_ip6[0] = a[0];
		ctx->user_ip6[1] = a[1];
		ctx->user_ip6[2] = a[2];
		ctx->user_ip6[3] = a[3];
	} else {
		__u32 a;

		__builtin_memcpy(&a, orig->addr, 4);
		ctx->user_ip6[0] = 0;
		ctx->user_ip6[1] = 0;
		ctx->user_ip6[2] = bpf_htonl(0xffff);
		ctx->user_ip6[3] = a;
	}
	ctx->user_port = bpf_htons(orig->port);
	return 1;
}

/*
 * The SYN of an inspected connection: its socket now has its source port,
 * so publish the original destination under the client's address and port
 * for the proxy to find when it accepts. Once per connect (published flag;
 * a new connect() resets it). Returns 1 for every packet to the sandbox's
 * proxy listener, whose bytes the proxy accounts to the real destination.
 */
static __always_inline int egr_inspect_publish(struct __sk_buff *skb, __u32 sandbox_id,
					       const struct egr_sandbox *sb,
					       const struct egr_l3 *l3)
{
	struct egr_inspect_key key = { .sandbox_id = sandbox_id };
	struct egr_inspect_orig *orig;
	struct bpf_sock *sk;

	if (!l3->has_ports || l3->protocol != EGR_IPPROTO_TCP)
		return 0;
	if (l3->family == EGR_AF_INET ? !egr_is_inspect4(sb, l3->daddr[0], l3->dport)
				      : !egr_is_inspect6(sb, l3->daddr, l3->dport))
		return 0;
	sk = skb->sk;
	if (sk)
		sk = bpf_sk_fullsock(sk);
	if (!sk)
		return 1;
	orig = bpf_sk_storage_get(&egr_inspect_sk, sk, 0, 0);
	if (!orig || orig->published)
		return 1;
	key.family = l3->family;
	key.port = l3->sport;
	__builtin_memcpy(key.addr, l3->saddr, sizeof(key.addr));
	/* Overwrites what an earlier, never-accepted connection from the same
	 * address and port left. */
	if (bpf_map_update_elem(&egr_inspect_orig, &key, orig, BPF_ANY) == 0)
		orig->published = 1;
	return 1;
}

/* Which of egressd's listeners a packet of the sandbox is sent to: its DNS
 * proxy's (EGR_LISTEN_DNS), its inspecting proxy's (EGR_LISTEN_INSPECT), or
 * none (0). For the egress check of listen.bpf.h. */
static __always_inline __u32 egr_proxy_kind(const struct egr_sandbox *sb, const struct egr_l3 *l3)
{
	int v6 = l3->family == EGR_AF_INET6;

	if (!l3->has_ports)
		return 0;
	if (v6 ? egr_is_proxy6(sb, l3->daddr, l3->dport) : egr_is_proxy4(sb, l3->daddr[0], l3->dport))
		return EGR_LISTEN_DNS;
	if (l3->protocol == EGR_IPPROTO_TCP &&
	    (v6 ? egr_is_inspect6(sb, l3->daddr, l3->dport)
		: egr_is_inspect4(sb, l3->daddr[0], l3->dport)))
		return EGR_LISTEN_INSPECT;
	return 0;
}

#endif /* EGR_LIB_INSPECT_BPF_H */
