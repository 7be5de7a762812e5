/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Redirect targets nobody else can take (include/egressd.h, "egressd's own
 * listeners"; docs/security.md). Two maps, both pinned so that they hold
 * while egressd is down:
 *
 * - egr_listen_ports: the (network namespace, port, protocol, family) of
 *   every listener egressd claimed. cgroup/bind4,6 and post_bind4,6 of every
 *   sandbox refuse a bind to such a port, whatever the address (0.0.0.0 and
 *   :: receive what is sent to the loopback) and family (a dual-stack ::
 *   socket receives IPv4 too).
 * - egr_listen_sk: socket storage on egressd's listener sockets (the mark),
 *   written by egressd alone (bpf(2) on the map, with the socket's fd). A
 *   redirect lets a connect or packet reach the proxy port only when the
 *   socket the kernel would deliver it to carries the mark of the right
 *   listener (egr_listener_ours): a socket a process outside every sandbox,
 *   or a sandbox through a path no hook sees (listen() or sendto() on an
 *   unbound socket picks a port without a bind hook), holds there is never
 *   reached. egressd down: no socket, or one without the mark: refused.
 */
#ifndef EGR_LIB_LISTEN_BPF_H
#define EGR_LIB_LISTEN_BPF_H

#include "maps.bpf.h"
#include "skb.bpf.h"

#ifndef BPF_F_CURRENT_NETNS
#define BPF_F_CURRENT_NETNS (-1L)
#endif

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_LISTENERS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_listen_key);
	__type(value, struct egr_listen_mark);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_listen_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct egr_listen_mark);
	/* Pinned: a listener socket that outlives an egressd (handed to the
	 * next one) keeps its mark, and the next egressd reads the same map. */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_listen_sk SEC(".maps");

/* Is port (host order) of protocol proto one of egressd's listeners' in
 * network namespace netns, for either family and either of TCP and UDP? A
 * TCP listener and a UDP one may share a port number: a bind of either
 * protocol there is refused (nothing of a sandbox needs that very port). */
static __always_inline int egr_listen_reserved(__u64 netns, __u16 port)
{
	struct egr_listen_key k = { .netns_cookie = netns, .port = port };

	if (!port)
		return 0;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		k.protocol = i & 1 ? EGR_IPPROTO_UDP : EGR_IPPROTO_TCP;
		k.family = i & 2 ? EGR_AF_INET6 : EGR_AF_INET;
		if (bpf_map_lookup_elem(&egr_listen_ports, &k))
			return 1;
	}
	return 0;
}

/*
 * Does a connect or packet of proto to daddr (the loopback for cgroup
 * sandboxes, a device's address for device sandboxes) port reach
 * egressd's listener of kind (and, for the inspecting
 * proxy, the one of sandbox_id)? The socket it would reach is looked up as
 * the kernel will deliver it (in the network namespace of ctx: the
 * sandbox's socket for sock_addr, the device's for cgroup_skb), from saddr
 * and sport when known (a connected UDP socket of another takes a datagram
 * from its peer before an unconnected one does), and must carry the mark.
 * 1 yes, 0 no (nothing there, or someone else's socket).
 */
static __always_inline int egr_listener_ours_in(void *ctx, struct bpf_sock_tuple *tp, int v6,
						const __u32 saddr[4], __u16 sport,
						const __u32 daddr[4], __u16 port, __u32 proto,
						__u32 kind, __u32 sandbox_id)
{
	struct bpf_sock_tuple *t = tp;
	struct egr_listen_mark *m;
	struct bpf_sock *sk;
	__u32 size;
	int ok;

	__builtin_memset(t, 0, sizeof(*t));
	if (v6) {
		t->ipv6.saddr[0] = saddr[0];
		t->ipv6.saddr[1] = saddr[1];
		t->ipv6.saddr[2] = saddr[2];
		t->ipv6.saddr[3] = saddr[3];
		t->ipv6.daddr[0] = daddr[0];
		t->ipv6.daddr[1] = daddr[1];
		t->ipv6.daddr[2] = daddr[2];
		t->ipv6.daddr[3] = daddr[3];
		t->ipv6.sport = bpf_htons(sport);
		t->ipv6.dport = bpf_htons(port);
		size = sizeof(t->ipv6);
	} else {
		t->ipv4.saddr = saddr[0];
		t->ipv4.daddr = daddr[0];
		t->ipv4.sport = bpf_htons(sport);
		t->ipv4.dport = bpf_htons(port);
		size = sizeof(t->ipv4);
	}
	if (proto == EGR_IPPROTO_UDP) {
		sk = bpf_sk_lookup_udp(ctx, t, size, BPF_F_CURRENT_NETNS, 0);
	} else {
		sk = bpf_sk_lookup_tcp(ctx, t, size, BPF_F_CURRENT_NETNS, 0);
		if (!sk && sport) {
			/* The 4-tuple's TIME_WAIT (a client port used again) is no
			 * full socket: the SYN then goes to the listener. */
			if (v6) {
				t->ipv6.saddr[0] = t->ipv6.saddr[1] = t->ipv6.saddr[2] = 0;
				t->ipv6.saddr[3] = 0;
				t->ipv6.sport = 0;
			} else {
				t->ipv4.saddr = 0;
				t->ipv4.sport = 0;
			}
			sk = bpf_sk_lookup_tcp(ctx, t, size, BPF_F_CURRENT_NETNS, 0);
		}
	}
	if (!sk)
		return 0;
	m = bpf_sk_storage_get(&egr_listen_sk, sk, 0, 0);
	ok = m && m->kind == kind && m->port == port && m->protocol == proto &&
	     (kind != EGR_LISTEN_INSPECT || m->sandbox_id == sandbox_id);
	bpf_sk_release(sk);
	return ok;
}

/* The same for the loopback listeners of cgroup sandboxes' proxies. */
static __always_inline int egr_listener_ours(void *ctx, int v6, const __u32 saddr[4], __u16 sport,
					     __u16 port, __u32 proto, __u32 kind,
					     __u32 sandbox_id)
{
	struct bpf_sock_tuple t;
	__u32 lo[4] = { 0, 0, 0, 0 };

	if (v6)
		lo[3] = bpf_htonl(1);
	else
		lo[0] = bpf_htonl(0x7f000001);
	return egr_listener_ours_in(ctx, &t, v6, saddr, sport, lo, port, proto, kind,
				    sandbox_id);
}

/*
 * cgroup_skb/egress: a packet of the sandbox to its proxy listener of kind
 * (the caller found it is one: egr_proxy_kind) that starts something (a UDP
 * datagram; a SYN, its socket in SYN_SENT) must reach egressd's listener;
 * 0: it would not, drop it. Later packets of a TCP connection belong to the
 * connection its SYN made with egressd's listener: a socket that takes the
 * port afterwards never gets them. 1: not one of those, or egressd's.
 */
static __always_inline int egr_listen_egress_ok(struct __sk_buff *skb, __u32 sandbox_id,
						const struct egr_l3 *l3,
						const struct egr_sock_view *sv, __u32 kind)
{
	if (!kind || !l3->has_ports)
		return 1;
	if (l3->protocol != EGR_IPPROTO_UDP &&
	    (l3->protocol != EGR_IPPROTO_TCP || sv->kind != EGR_SV_FULL ||
	     sv->state != EGR_TCP_SYN_SENT))
		return 1;
	return egr_listener_ours(skb, l3->family == EGR_AF_INET6, l3->saddr, l3->sport, l3->dport,
				 l3->protocol, kind, sandbox_id);
}

#endif /* EGR_LIB_LISTEN_BPF_H */
