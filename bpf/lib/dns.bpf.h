/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * DNS: every DNS connect or datagram of a sandbox goes to the proxy
 * listener of its network namespace on the loopback (docs/dns.md), whatever
 * resolver it named; the reply is shown as coming from that resolver; the
 * proxy learns who asks from egr_dns_senders, written from the asking
 * socket's own packets, and egr_dns_budget bounds what one sandbox queues
 * on the shared listeners.
 */
#ifndef EGR_LIB_DNS_BPF_H
#define EGR_LIB_DNS_BPF_H

#include "maps.bpf.h"
#include "sandbox.bpf.h"
#include "skb.bpf.h"
#include "listen.bpf.h"
#include "egr_reasons.h"

#define EGR_LOOPBACK4 0x7f000001 /* host order */

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct egr_dns_orig);
	/* Pinned so that an upgrade reuses it: a DNS query in flight keeps
	 * its original destination for the reply (user/egressd/migrate.c). */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_dns_orig SEC(".maps");

/* Who asks the DNS proxy (include/egressd.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 18);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_dns_client_key);
	__type(value, struct egr_dns_client_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_dns_senders SEC(".maps");

/* Entries per sandbox in egr_dns_senders, for EGR_DNS_CLIENTS_PER_SB. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_SANDBOXES);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_dns_clients_n SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct egr_dns_client_rec);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_dns_sender_sk SEC(".maps");

/* Per sandbox: what it may queue on the shared listeners (include/egressd.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_SANDBOXES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct egr_dns_budget);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_dns_budget SEC(".maps");

static __always_inline int egr_is_proxy4(const struct egr_sandbox *sb, __u32 addr_be, __u16 port)
{
	return sb->dns_port4 && addr_be == bpf_htonl(EGR_LOOPBACK4) && port == sb->dns_port4;
}

static __always_inline int egr_is_proxy6(const struct egr_sandbox *sb, const __u32 a[4], __u16 port)
{
	return sb->dns_port6 && a[0] == 0 && a[1] == 0 && a[2] == 0 && a[3] == bpf_htonl(1) &&
	       port == sb->dns_port6;
}

/*
 * Is this connect or datagram DNS, and where does it go? 0: not DNS (the
 * allowlist judges it). DNS goes to the sandbox's own proxy
 * (EGR_R_ALLOW_DNS_REDIRECT); no proxy listener for the family (egressd
 * down) means no DNS (EGR_R_DENY_NO_DNS_PROXY).
 */
static __always_inline int egr_dns_route(const struct egr_sandbox *sb, int v6, __u16 port,
					 __u32 protocol)
{
	if (port != EGR_DNS_PORT || !egr_proto_bit(protocol))
		return 0;
	if (v6 ? !sb->dns_port6 : !sb->dns_port4)
		return EGR_R_DENY_NO_DNS_PROXY;
	return EGR_R_ALLOW_DNS_REDIRECT;
}

/*
 * Point a DNS connect or datagram at the proxy listener of the sandbox's
 * network namespace (shared: the proxy knows the sandbox from the sender's
 * record, egr_note_dns_client) and remember the resolver it named, for recvmsg to put back. A v4-mapped
 * resolver on a v6 socket goes to the IPv6 listener too.
 */
static __always_inline int egr_redirect_dns(struct bpf_sock_addr *ctx,
					    const struct egr_sandbox *sb, int v6,
					    const __u32 daddr[4])
{
	struct egr_dns_orig *orig;
	struct bpf_sock *sk = ctx->sk;
	__u32 any[4] = {};

	if (v6 ? !sb->dns_port6 : !sb->dns_port4)
		return EGR_R_DENY_NO_DNS_PROXY;
	if (!sk)
		return EGR_R_DENY_NO_STORAGE;
	/* Only to egressd's own listener (listen.bpf.h): with egressd down a
	 * socket someone else bound on the port would get the query. */
	if (!egr_listener_ours(ctx, v6, any, 0, v6 ? sb->dns_port6 : sb->dns_port4, ctx->protocol,
			       EGR_LISTEN_DNS, 0))
		return EGR_R_DENY_NOT_OURS;
	orig = bpf_sk_storage_get(&egr_dns_orig, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!orig)
		return EGR_R_DENY_NO_STORAGE;
	if (v6) {
		orig->addr6[0] = daddr[0];
		orig->addr6[1] = daddr[1];
		orig->addr6[2] = daddr[2];
		orig->addr6[3] = daddr[3];
		orig->port6 = (__u16)ctx->user_port;
		ctx->user_ip6[0] = 0;
		ctx->user_ip6[1] = 0;
		ctx->user_ip6[2] = 0;
		ctx->user_ip6[3] = bpf_htonl(1);
		ctx->user_port = bpf_htons(sb->dns_port6);
	} else {
		orig->addr4 = daddr[0];
		orig->port4 = (__u16)ctx->user_port;
		ctx->user_ip4 = bpf_htonl(EGR_LOOPBACK4);
		ctx->user_port = bpf_htons(sb->dns_port4);
	}
	return EGR_R_ALLOW_DNS_REDIRECT;
}

/* A reply from the proxy is shown as coming from the resolver the stub
 * asked, or it would drop it; getpeername() on a redirected TCP or
 * connected UDP socket names that resolver too. These hooks can change the
 * address but never refuse. The caller looked up the sandbox (NULL: none,
 * nothing to restore). */
static __always_inline int egr_restore_resolver4(struct bpf_sock_addr *ctx,
						 const struct egr_sandbox *sb)
{
	struct egr_dns_orig *orig;
	struct bpf_sock *sk = ctx->sk;

	if (!sb || !sk || !egr_is_proxy4(sb, ctx->user_ip4, bpf_ntohs((__u16)ctx->user_port)))
		return 1;
	orig = bpf_sk_storage_get(&egr_dns_orig, sk, 0, 0);
	if (orig && orig->port4) {
		ctx->user_ip4 = orig->addr4;
		ctx->user_port = orig->port4;
	}
	return 1;
}

static __always_inline int egr_restore_resolver6(struct bpf_sock_addr *ctx,
						 const struct egr_sandbox *sb)
{
	struct egr_dns_orig *orig;
	__u32 src[4];
	struct bpf_sock *sk = ctx->sk;

	if (!sb || !sk)
		return 1;
	src[0] = ctx->user_ip6[0];
	src[1] = ctx->user_ip6[1];
	src[2] = ctx->user_ip6[2];
	src[3] = ctx->user_ip6[3];
	if (!egr_is_proxy6(sb, src, bpf_ntohs((__u16)ctx->user_port)))
		return 1;
	orig = bpf_sk_storage_get(&egr_dns_orig, sk, 0, 0);
	if (orig && orig->port6) {
		ctx->user_ip6[0] = orig->addr6[0];
		ctx->user_ip6[1] = orig->addr6[1];
		ctx->user_ip6[2] = orig->addr6[2];
		ctx->user_ip6[3] = orig->addr6[3];
		ctx->user_port = orig->port6;
	}
	return 1;
}

/*
 * One token of the sandbox's budget for the shared listeners' queues (a
 * bucket refilled at most once a millisecond; the unlocked refill and take
 * can let a few more through when CPUs race, never fewer). 0: over budget,
 * counted; no entry (egressd has not added the sandbox) refuses too.
 */
static __always_inline int egr_dns_budget_take(__u32 sandbox_id)
{
	struct egr_dns_budget *b = bpf_map_lookup_elem(&egr_dns_budget, &sandbox_id);
	__u64 now, us, add;
	__s64 t;

	if (!b)
		return 0;
	if (!b->rate)
		return 1;
	now = bpf_ktime_get_ns();
	if (now > b->stamp_ns + 1000000) {
		us = (now - b->stamp_ns) / 1000;
		if (us > 10000000)
			us = 10000000; /* 10 s: more than any burst needs, no overflow */
		add = us * b->rate / 1000000;
		if (add) {
			b->stamp_ns = now;
			t = b->tokens + (__s64)add;
			b->tokens = t > (__s64)b->burst ? (__s64)b->burst : t;
		}
	}
	if (b->tokens <= 0) {
		__sync_fetch_and_add(&b->dropped, 1);
		return 0;
	}
	__sync_fetch_and_add(&b->tokens, -1);
	return 1;
}

/*
 * A packet of this sandbox to its DNS proxy. A packet of a full socket
 * that is not a TCP or UDP socket bound to the packet's source port is
 * dropped (return 2). Then the budget: every
 * datagram, and every TCP packet of a socket not recorded yet (its SYN: a
 * connection), takes a token, so that no sandbox can fill the listeners'
 * queues the sandboxes of its namespace share; over budget, the packet is
 * dropped (return 1) before it is queued. Then record its socket as one
 * that may ask the proxy as this sandbox (egr_dns_senders). Only the
 * socket's own packets count (a full TCP or UDP socket bound to the
 * packet's source port: a raw socket forging that source is not one), one
 * source per family per socket, at most EGR_DNS_CLIENTS_PER_SB per sandbox.
 * A source another sandbox's socket already holds (SO_REUSEPORT on both)
 * is marked shared, and the proxy serves neither from it. This runs before
 * the packet is queued to the listener, so the entry is there when the
 * proxy reads it.
 */
static __always_inline int egr_note_dns_client(struct __sk_buff *skb, __u32 sandbox_id,
					       const struct egr_sandbox *sb,
					       const struct egr_l3 *l3)
{
	struct egr_dns_client_key key = {};
	struct egr_dns_client_val val = {}, *old;
	struct egr_dns_client_rec *rec = NULL;
	struct bpf_sock *sk = skb->sk;
	__u32 zero = 0, *n;
	int v6 = l3->family == EGR_AF_INET6, recorded;

	if (!l3->has_ports ||
	    (l3->protocol != EGR_IPPROTO_UDP && l3->protocol != EGR_IPPROTO_TCP))
		return 0;
	if (v6 ? !egr_is_proxy6(sb, l3->daddr, l3->dport)
	       : !egr_is_proxy4(sb, l3->daddr[0], l3->dport))
		return 0;
	if (sk)
		sk = bpf_sk_fullsock(sk);
	if (sk && egr_connect_judged(sk) && sk->src_port == l3->sport)
		rec = bpf_sk_storage_get(&egr_dns_sender_sk, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	/* A full socket that is not a TCP or UDP socket bound to the packet's
	 * source (a raw socket writing its own headers) could name any
	 * source, a neighbour's recorded one too, and be served as that
	 * neighbour on the shared listener: dropped (2). Packets without a
	 * full socket (a TIME_WAIT ACK) carry no query. */
	if (sk && !rec)
		return 2;
	recorded = rec && rec->has[v6 ? 1 : 0];
	if ((l3->protocol == EGR_IPPROTO_UDP || !recorded) && !egr_dns_budget_take(sandbox_id))
		return 1;
	if (!rec || recorded)
		return 0;
	key.lport = l3->dport;
	key.port = l3->sport;
	key.family = l3->family;
	key.protocol = l3->protocol;
	__builtin_memcpy(key.addr, l3->saddr, sizeof(key.addr));
	n = bpf_map_lookup_elem(&egr_dns_clients_n, &sandbox_id);
	if (!n) {
		bpf_map_update_elem(&egr_dns_clients_n, &sandbox_id, &zero, BPF_NOEXIST);
		n = bpf_map_lookup_elem(&egr_dns_clients_n, &sandbox_id);
		if (!n)
			return 0;
	}
	if (*n >= EGR_DNS_CLIENTS_PER_SB)
		return 0;
	val.cookie = bpf_get_socket_cookie(skb);
	val.sandbox_id = sandbox_id;
	if (bpf_map_update_elem(&egr_dns_senders, &key, &val, BPF_NOEXIST)) {
		/* Taken already: a sibling of this sandbox on the same source
		 * (SO_REUSEPORT) asks as this sandbox anyway; another sandbox's
		 * socket there makes the source nobody's. */
		old = bpf_map_lookup_elem(&egr_dns_senders, &key);
		if (old && old->sandbox_id != sandbox_id)
			old->flags |= EGR_DNS_CLIENT_SHARED; /* the same bit whoever races */
		return 0;
	}
	__sync_fetch_and_add(n, 1);
	if (v6) {
		rec->key[1] = key;
		rec->has[1] = 1;
	} else {
		rec->key[0] = key;
		rec->has[0] = 1;
	}
	return 0;
}

static __always_inline void egr_forget_dns_client(struct bpf_sock *sk,
						  const struct egr_dns_client_key *key,
						  __u64 cookie)
{
	struct egr_dns_client_val *v = bpf_map_lookup_elem(&egr_dns_senders, key);
	__u32 id, *n;

	if (!v || v->cookie != cookie)
		return;
	id = v->sandbox_id;
	if (bpf_map_delete_elem(&egr_dns_senders, key))
		return;
	n = bpf_map_lookup_elem(&egr_dns_clients_n, &id);
	if (n && *n)
		__sync_fetch_and_add(n, -1);
}

#endif /* EGR_LIB_DNS_BPF_H */
