/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What the cgroup_skb programs know about a packet: its real L3 addresses
 * and ports (egr_parse_l3), and what its socket says (struct egr_sock_view,
 * built once by the entry point from skb->sk, so the decisions in allow.bpf.h
 * are functions of plain values that tests/bpf can hand them).
 */
#ifndef EGR_LIB_SKB_BPF_H
#define EGR_LIB_SKB_BPF_H

#include "egr_decide.h"

#define ETH_P_IP   0x0800
#define ETH_P_IPV6 0x86DD
#define TCP_LISTEN 10
#define EGR_TCP_SYN_SENT 2

struct egr_l3 {
	__u32 daddr[4];
	__u32 saddr[4];
	__u32 family;
	__u32 protocol;
	__u16 dport;
	__u16 sport;
	int has_ports;
};

/* The real L3 destination and, when the first fragment carries it, the
 * transport ports. IPv6 extension headers are walked a bounded number of
 * times; a chain longer than that is not parsed and judged without ports.
 * -1: neither IPv4 nor IPv6 (or too short to be). */
static __always_inline int egr_parse_l3(struct __sk_buff *skb, struct egr_l3 *l3)
{
	__u32 off;
	__u8 nexthdr;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		/* The header and, when it has no options, the ports in one
		 * read: straight from the linear data where it is there (a
		 * locally sent packet's headers always are), no helper call;
		 * else one bpf_skb_load_bytes. */
		struct {
			struct iphdr ip;
			__be16 ports[2];
		} h;
		void *data = (void *)(long)skb->data, *data_end = (void *)(long)skb->data_end;
		int ports_loaded;

		if (data + sizeof(h) <= data_end) {
			__builtin_memcpy(&h, data, sizeof(h));
			ports_loaded = 1;
		} else {
			ports_loaded = bpf_skb_load_bytes(skb, 0, &h, sizeof(h)) == 0;
		}
		if (!ports_loaded && bpf_skb_load_bytes(skb, 0, &h.ip, sizeof(h.ip)))
			return -1;
		l3->family = EGR_AF_INET;
		l3->daddr[0] = h.ip.daddr;
		l3->saddr[0] = h.ip.saddr;
		l3->protocol = h.ip.protocol;
		/* Later fragments carry no ports. */
		if (h.ip.frag_off & bpf_htons(0x1fff))
			return 0;
		off = h.ip.ihl * 4;
		if (ports_loaded && off == sizeof(h.ip)) {
			if (l3->protocol == EGR_IPPROTO_TCP || l3->protocol == EGR_IPPROTO_UDP ||
			    l3->protocol == EGR_IPPROTO_UDPLITE) {
				l3->sport = bpf_ntohs(h.ports[0]);
				l3->dport = bpf_ntohs(h.ports[1]);
				l3->has_ports = 1;
			}
			return 0;
		}
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;

		if (bpf_skb_load_bytes(skb, 0, &ip6, sizeof(ip6)))
			return -1;
		l3->family = EGR_AF_INET6;
		__builtin_memcpy(l3->daddr, &ip6.daddr, 16);
		__builtin_memcpy(l3->saddr, &ip6.saddr, 16);
		nexthdr = ip6.nexthdr;
		off = sizeof(ip6);
#pragma unroll
		for (int i = 0; i < 6; i++) {
			struct ipv6_opt_hdr oh;

			if (nexthdr != 0 && nexthdr != 43 && nexthdr != 60 && nexthdr != 44)
				break;
			if (bpf_skb_load_bytes(skb, off, &oh, sizeof(oh)))
				return 0;
			if (nexthdr == 44) {
				__be16 frag_off;

				if (bpf_skb_load_bytes(skb, off + 2, &frag_off, sizeof(frag_off)))
					return 0;
				nexthdr = oh.nexthdr;
				off += 8;
				if (frag_off & bpf_htons(0xfff8))
					return 0;
				continue;
			}
			nexthdr = oh.nexthdr;
			off += (oh.hdrlen + 1) * 8;
		}
		l3->protocol = nexthdr;
	} else {
		return -1;
	}
	if (l3->protocol == EGR_IPPROTO_TCP || l3->protocol == EGR_IPPROTO_UDP ||
	    l3->protocol == EGR_IPPROTO_UDPLITE) {
		__be16 ports[2];

		if (bpf_skb_load_bytes(skb, off, ports, sizeof(ports)))
			return 0;
		l3->sport = bpf_ntohs(ports[0]);
		l3->dport = bpf_ntohs(ports[1]);
		l3->has_ports = 1;
	}
	return 0;
}

/* Was a socket of this type and protocol judged by connect4/6? Only TCP
 * (and MPTCP, TCP on the wire) stream sockets and UDP datagram sockets have
 * the pre_connect hook; a SOCK_RAW socket with protocol 17 connects without
 * one, and UDP-Lite has none either. */
static __always_inline int egr_connect_judged_kind(__u32 type, __u32 proto)
{
	if (type == EGR_SOCK_STREAM)
		return proto == EGR_IPPROTO_TCP || proto == EGR_IPPROTO_MPTCP;
	if (type == EGR_SOCK_DGRAM)
		return proto == EGR_IPPROTO_UDP;
	return 0;
}

static __always_inline int egr_connect_judged(const struct bpf_sock *sk)
{
	return egr_connect_judged_kind(sk->type, sk->protocol);
}

/* What the backstop needs of a packet's socket. */
#define EGR_SV_NONE     0 /* no socket (forwarded, or the kernel's own) */
#define EGR_SV_FULL     1 /* a full socket: the fields below are set */
#define EGR_SV_MINI     2 /* a request or timewait socket */

struct egr_sock_view {
	__u32 dst[4];   /* connected peer, network order; IPv4 in dst[0] */
	__u32 kind;     /* EGR_SV_* */
	__u32 family;   /* of the peer: a v4-mapped peer of an IPv6 socket is AF_INET */
	__u32 type;
	__u32 protocol;
	__u32 state;
	__u16 dport;    /* host order; 0 = not connected */
	__u16 pad;
};

static __always_inline int egr_addr_eq(const __u32 a[4], const __u32 b[4], int v6)
{
	if (!v6)
		return a[0] == b[0];
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

/* skb->sk as the backstop sees it, read field by field (the verifier
 * refuses a pointer the compiler would compute into the socket). pkt_family
 * is the packet's: a dual-stack socket connected to ::ffff:a.b.c.d sends
 * IPv4 packets, and its peer is then the IPv4 address. */
static __always_inline void egr_sock_view_of(struct __sk_buff *skb, __u32 pkt_family,
					     struct egr_sock_view *sv)
{
	struct bpf_sock *sk = skb->sk;

	sv->kind = EGR_SV_NONE;
	if (!sk)
		return;
	sk = bpf_sk_fullsock(sk);
	if (!sk) {
		sv->kind = EGR_SV_MINI;
		return;
	}
	sv->kind = EGR_SV_FULL;
	sv->family = sk->family;
	sv->type = sk->type;
	sv->protocol = sk->protocol;
	sv->state = sk->state;
	sv->dport = bpf_ntohs(sk->dst_port);
	if (sv->family == EGR_AF_INET) {
		sv->dst[0] = sk->dst_ip4;
	} else {
		sv->dst[0] = sk->dst_ip6[0];
		sv->dst[1] = sk->dst_ip6[1];
		sv->dst[2] = sk->dst_ip6[2];
		sv->dst[3] = sk->dst_ip6[3];
		if (pkt_family == EGR_AF_INET && egr_ip6_is_v4mapped(sv->dst, &sv->dst[0]))
			sv->family = EGR_AF_INET;
	}
}

#endif /* EGR_LIB_SKB_BPF_H */
