// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Device sandboxes: a sandbox the socket hooks cannot see (gVisor's own
 * network stack, a microVM's guest kernel) is confined at the host side of
 * its network device (a veth peer, a tap). Its egress is that device's
 * ingress; what goes towards it is the device's egress. Two tc programs
 * (attached with TCX links, or tc clsact filters on kernels without TCX):
 *
 *  egr_nd_ingress  every frame the sandbox sends: parsed fail-closed (only
 *                  plain IPv4 without options, plain IPv6 without extension
 *                  headers, no fragments, no VLAN tag; ARP and neighbour
 *                  discovery for the link itself), the source must route back
 *                  through this device (strict reverse path, bpf_fib_lookup),
 *                  TCP and UDP to port 53 of any address go to the
 *                  sandbox's own DNS listener (rewritten, noted in
 *                  egr_nd_dns_nat), then the sandbox's allowlist, quota,
 *                  meters and events of bpf/lib/ decide, and an allowed
 *                  flow is noted; under network.inspect an allowed TCP
 *                  packet goes to the sandbox's inspecting listener
 *                  instead (rewritten, noted in egr_nd_insp_nat, its SYN
 *                  published in egr_inspect_orig for the proxy);
 *  egr_nd_egress   every frame towards the sandbox: the DNS and inspecting
 *                  listeners' packets, rewritten back to the resolver or
 *                  destination the guest addressed; else only
 *                  replies of flows it opened pass (a new connection into it never does, unless
 *                  network.inbound is "allow"), re-judged against the
 *                  allowlist in force so that an update takes effect at once.
 *
 * The sandbox id is a read-only constant of the loaded program (egressd loads
 * one instance per device, user/egressd/netdev*): the device never has to be
 * looked up, and a program can only ever serve the sandbox it was loaded for.
 * The maps are egressd's own (the same allowlist, meters, quotas, deny
 * budgets and event ring as cgroup sandboxes) plus egr_nd_flows,
 * egr_nd_counters, egr_nd_dns_nat and egr_nd_dns_counters
 * (include/egr_netdev.h).
 *
 * Verdicts: -1 (TC_ACT_UNSPEC / TCX_NEXT: the next program, if any, or
 * pass) and 2 (TC_ACT_SHOT / TCX_DROP). Every path that cannot prove an
 * allow drops.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "egressd.h"
#include "egr_netdev.h"
#include "egr_decide.h"
#include "egr_reasons.h"
#include "lib/maps.bpf.h"
#include "lib/sandbox.bpf.h"
#include "lib/skb.bpf.h"
#include "lib/meter.bpf.h"
#include "lib/events.bpf.h"
#include "lib/allow.bpf.h"
#include "lib/quota.bpf.h"
#include "lib/inspect_orig.bpf.h"
#include "lib/listen.bpf.h"

#define ND_PASS (-1)
#define ND_DROP 2

#define ETH_P_ARP   0x0806
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8
#define ND_ETH_HLEN 14

/* Set by egressd before load. */
const volatile __u32 egr_nd_sandbox_id = 0;
/* Link-layer header length of the device: 14 (Ethernet: veth, tap) or 0
 * (an L3 device: tun). */
const volatile __u32 egr_nd_l2_len = ND_ETH_HLEN;
/* A flow whose last egress packet is older than this lets no reply in. */
const volatile __u64 egr_nd_flow_idle_ns = 300ull * 1000000000ull;
/* The sandbox's DNS and inspecting listeners are bound to these addresses
 * of the device (network order; 0 / all zero: none for that family, its
 * DNS, and its TCP under inspection, are dropped). Their ports are the
 * sandbox entry's dns_port4/6 and inspect_port4/6. */
const volatile __u32 egr_nd_dns_addr4 = 0;
const volatile __u32 egr_nd_dns_addr6[4] = { 0, 0, 0, 0 };

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, EGR_ND_MAX_FLOWS);
	__type(key, struct egr_nd_flow_key);
	__type(value, struct egr_nd_flow);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_nd_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EGR_ND_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_nd_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, EGR_ND_MAX_DNS);
	__type(key, struct egr_nd_dns_key);
	__type(value, struct egr_nd_dns_nat);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_nd_dns_nat SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, EGR_ND_MAX_INSPECT);
	__type(key, struct egr_nd_dns_key);
	__type(value, struct egr_nd_nat);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_nd_insp_nat SEC(".maps");

/* The records a SYN of an inspected sandbox writes, built here rather than
 * on the stack: with the listener's socket lookup they would not fit the
 * ingress program's 512 bytes. Per CPU, of this program instance alone. */
struct nd_insp_scratch {
	struct egr_inspect_key ok;
	struct egr_inspect_orig ov;
	struct egr_nd_nat nv;
	struct bpf_sock_tuple t; /* the listener's lookup (nd_insp_listener_ours) */
	__u32 laddr[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nd_insp_scratch);
} egr_nd_insp_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EGR_ND_DNS_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_nd_dns_counters SEC(".maps");

/* Counter key of a per-CPU counter array, one up (per CPU: no atomics). */
static __always_inline void nd_bump(void *counters, __u32 key)
{
	__u64 *v = bpf_map_lookup_elem(counters, &key);

	if (v)
		*v += 1;
}

static __always_inline void nd_count(enum egr_nd_counter c)
{
	nd_bump(&egr_nd_counters, c);
}

static __always_inline void nd_dns_count(enum egr_nd_dns_counter c)
{
	nd_bump(&egr_nd_dns_counters, c);
}

/* What a frame is, once parsed. */
enum nd_kind {
	ND_IP = 0,     /* IPv4 or IPv6 with l3 filled in */
	ND_ARP = 1,    /* ARP: the link's own */
	ND_NDISC = 2,  /* IPv6 neighbour or router discovery, link-local scope */
	ND_BAD = 3,    /* dropped; the counter says why */
};

struct nd_pkt {
	struct egr_l3 l3;
	__u8 icmp_type;
	__u8 tcp_flags;
	__u16 icmp_id;
};

#define TCP_FL_SYN 0x02
#define TCP_FL_ACK 0x10

/* The transport header at off: ports (TCP, UDP), flags (TCP), type and id
 * (ICMP). Anything else is not something a policy can allow. */
static __always_inline int nd_parse_l4(struct __sk_buff *skb, __u32 off, struct nd_pkt *p)
{
	__u8 h[14];

	switch (p->l3.protocol) {
	case EGR_IPPROTO_TCP:
		if (bpf_skb_load_bytes(skb, off, h, 14))
			return -1;
		p->tcp_flags = h[13];
		break;
	case EGR_IPPROTO_UDP:
		if (bpf_skb_load_bytes(skb, off, h, 8))
			return -1;
		break;
	case EGR_IPPROTO_ICMP:
	case EGR_IPPROTO_ICMPV6:
		if (bpf_skb_load_bytes(skb, off, h, 8))
			return -1;
		p->icmp_type = h[0];
		p->icmp_id = ((__u16)h[4] << 8) | h[5];
		return 0;
	default:
		nd_count(EGR_ND_CNT_PROTO);
		return -1;
	}
	p->l3.sport = ((__u16)h[0] << 8) | h[1];
	p->l3.dport = ((__u16)h[2] << 8) | h[3];
	p->l3.has_ports = 1;
	return 0;
}

/*
 * Does neighbour discovery the sandbox sent stay on the link? Hop limit 255
 * is no proof: to an address the host forwards to, the host forwards it (at
 * 254), and ND bypasses the allowlist, the reverse-path check and the
 * meters. It stays when sent to a link-scope multicast group (solicitations,
 * unsolicited advertisements), a link-local address, or an address the
 * host does not forward (its own: NUD of the host side's address; no
 * route). The lookup is the forwarding one (from the device), without the
 * packet's source: a link-local source would end it early, unanswered.
 */
static __always_inline int nd_ndisc_on_link(struct __sk_buff *skb, const struct ipv6hdr *ip6)
{
	const __u8 *d = (const __u8 *)&ip6->daddr;
	struct bpf_fib_lookup f = {};

	if (d[0] == 0xff)
		return (d[1] & 0x0f) == 2;
	if (d[0] == 0xfe && (d[1] & 0xc0) == 0x80)
		return 1;
	f.family = EGR_AF_INET6;
	f.ifindex = skb->ifindex;
	f.l4_protocol = EGR_IPPROTO_ICMPV6;
	__builtin_memcpy(f.ipv6_dst, &ip6->daddr, 16);
	return bpf_fib_lookup(skb, &f, sizeof(f), 0) == BPF_FIB_LKUP_RET_NOT_FWDED;
}

#define ND_ROUTER_SOLICIT 133
#define ND_ROUTER_ADVERT 134
#define ND_NEIGH_ADVERT 136

/* Parse a frame, failing closed on everything a policy does not describe.
 * from_sandbox: a frame the sandbox sent (the device's ingress). */
static __always_inline enum nd_kind nd_parse(struct __sk_buff *skb, struct nd_pkt *p,
					     int from_sandbox)
{
	__u32 l2 = egr_nd_l2_len ? ND_ETH_HLEN : 0;
	__u16 proto;

	/* An offloaded tag (the kernel took it out of the frame before tc). */
	if (skb->vlan_present) {
		nd_count(EGR_ND_CNT_VLAN);
		return ND_BAD;
	}
	if (l2) {
		__be16 eth_proto;

		if (bpf_skb_load_bytes(skb, 12, &eth_proto, sizeof(eth_proto))) {
			nd_count(EGR_ND_CNT_MALFORMED);
			return ND_BAD;
		}
		proto = bpf_ntohs(eth_proto);
		if (proto == ETH_P_8021Q || proto == ETH_P_8021AD) {
			nd_count(EGR_ND_CNT_VLAN);
			return ND_BAD;
		}
		/* The frame and the kernel must agree on what it carries. */
		if (eth_proto != skb->protocol) {
			nd_count(EGR_ND_CNT_MALFORMED);
			return ND_BAD;
		}
	} else {
		proto = bpf_ntohs(skb->protocol);
	}
	if (proto == ETH_P_ARP) {
		if (!l2) {
			nd_count(EGR_ND_CNT_NOT_IP);
			return ND_BAD;
		}
		nd_count(EGR_ND_CNT_ARP);
		return ND_ARP;
	}
	if (proto == ETH_P_IP) {
		struct iphdr ip;

		if (bpf_skb_load_bytes(skb, l2, &ip, sizeof(ip)) || ip.version != 4 ||
		    bpf_ntohs(ip.tot_len) < sizeof(ip) || bpf_ntohs(ip.tot_len) > skb->len - l2) {
			nd_count(EGR_ND_CNT_MALFORMED);
			return ND_BAD;
		}
		if (ip.ihl != 5) {
			nd_count(EGR_ND_CNT_IP_OPTIONS);
			return ND_BAD;
		}
		/* Every fragment, the first too: the later ones carry no ports
		 * to judge, and a first one alone is of no use. */
		if (ip.frag_off & bpf_htons(0x3fff)) {
			nd_count(EGR_ND_CNT_FRAGMENT);
			return ND_BAD;
		}
		p->l3.family = EGR_AF_INET;
		p->l3.daddr[0] = ip.daddr;
		p->l3.saddr[0] = ip.saddr;
		p->l3.protocol = ip.protocol;
		if (nd_parse_l4(skb, l2 + sizeof(ip), p)) {
			nd_count(EGR_ND_CNT_MALFORMED);
			return ND_BAD;
		}
		return ND_IP;
	}
	if (proto == ETH_P_IPV6) {
		struct ipv6hdr ip6;

		if (bpf_skb_load_bytes(skb, l2, &ip6, sizeof(ip6)) || ip6.version != 6) {
			nd_count(EGR_ND_CNT_MALFORMED);
			return ND_BAD;
		}
		p->l3.family = EGR_AF_INET6;
		__builtin_memcpy(p->l3.daddr, &ip6.daddr, 16);
		__builtin_memcpy(p->l3.saddr, &ip6.saddr, 16);
		p->l3.protocol = ip6.nexthdr;
		if (ip6.nexthdr == 44) {
			nd_count(EGR_ND_CNT_FRAGMENT);
			return ND_BAD;
		}
		/* Hop-by-hop, routing, destination options, ...: none. */
		if (ip6.nexthdr != EGR_IPPROTO_TCP && ip6.nexthdr != EGR_IPPROTO_UDP &&
		    ip6.nexthdr != EGR_IPPROTO_ICMPV6) {
			nd_count(EGR_ND_CNT_EXT_HDR);
			return ND_BAD;
		}
		if (nd_parse_l4(skb, l2 + sizeof(ip6), p)) {
			nd_count(EGR_ND_CNT_MALFORMED);
			return ND_BAD;
		}
		/* Router solicitation/advertisement, neighbour solicitation/
		 * advertisement: the link's own, and only with hop limit 255
		 * (RFC 4861). From the sandbox: only what stays on the link,
		 * and no router advertisement (a guest is no router: a host
		 * side that accepts RAs would route through it). Anything else
		 * is ICMPv6 that is not echo: judged, and dropped, as such. */
		if (ip6.nexthdr == EGR_IPPROTO_ICMPV6 && p->icmp_type >= ND_ROUTER_SOLICIT &&
		    p->icmp_type <= ND_NEIGH_ADVERT && ip6.hop_limit == 255 &&
		    (!from_sandbox ||
		     (p->icmp_type != ND_ROUTER_ADVERT && nd_ndisc_on_link(skb, &ip6)))) {
			nd_count(EGR_ND_CNT_ND);
			return ND_NDISC;
		}
		return ND_IP;
	}
	nd_count(EGR_ND_CNT_NOT_IP);
	return ND_BAD;
}

/* Strict reverse path: would a packet to the source leave through this very
 * device? A source the host routes elsewhere (another sandbox's, the host's
 * own, an address nobody routes) is spoofed. The forwarding lookup (the
 * device as the input interface), not BPF_FIB_LOOKUP_OUTPUT with it as the
 * output: an oif makes the kernel skip routes through other devices and
 * fall back to a shorter prefix through this one, so a source whose own
 * route goes elsewhere passed inside a wider route of the device. */
static __always_inline int nd_source_ok(struct __sk_buff *skb, const struct egr_l3 *l3)
{
	struct bpf_fib_lookup f = {};
	__u32 ifindex = skb->ifindex;
	long rc;

	f.ifindex = ifindex;
	f.l4_protocol = (__u8)l3->protocol;
	if (l3->family == EGR_AF_INET) {
		f.family = EGR_AF_INET;
		f.ipv4_dst = l3->saddr[0];
		f.ipv4_src = l3->daddr[0];
	} else {
		f.family = EGR_AF_INET6;
		__builtin_memcpy(f.ipv6_dst, l3->saddr, 16);
		__builtin_memcpy(f.ipv6_src, l3->daddr, 16);
	}
	rc = bpf_fib_lookup(skb, &f, sizeof(f), 0);
	/* No neighbour entry yet still names the device the route goes by. */
	return (rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH) &&
	       f.ifindex == ifindex;
}

static __always_inline void nd_flow_key(struct egr_nd_flow_key *k, __u32 sandbox_id,
					const struct nd_pkt *p, int inbound)
{
	const struct egr_l3 *l3 = &p->l3;

	__builtin_memset(k, 0, sizeof(*k));
	k->sandbox_id = sandbox_id;
	k->family = (__u8)l3->family;
	k->protocol = (__u8)l3->protocol;
	if (l3->has_ports) {
		k->sport = inbound ? l3->dport : l3->sport;
		k->dport = inbound ? l3->sport : l3->dport;
	} else {
		k->sport = p->icmp_id;
	}
	__builtin_memcpy(k->saddr, inbound ? l3->daddr : l3->saddr, 16);
	__builtin_memcpy(k->daddr, inbound ? l3->saddr : l3->daddr, 16);
}

/* ICMP echo out, echo reply in: the only ICMP a device sandbox exchanges
 * (errors included: fail closed). */
static __always_inline int nd_is_icmp(const struct nd_pkt *p)
{
	return p->l3.protocol == EGR_IPPROTO_ICMP || p->l3.protocol == EGR_IPPROTO_ICMPV6;
}

static __always_inline int nd_icmp_echo(const struct nd_pkt *p, int reply)
{
	if (p->l3.protocol == EGR_IPPROTO_ICMP)
		return p->icmp_type == (reply ? 0 : 8);
	return p->icmp_type == (reply ? 129 : 128);
}

/* The allowlist's word on the remote end of a packet. */
static __always_inline int nd_judge(const struct egr_sandbox *sb, const struct nd_pkt *p,
				    int inbound)
{
	const __u32 *remote = inbound ? p->l3.saddr : p->l3.daddr;
	__u16 port = p->l3.has_ports ? (inbound ? p->l3.sport : p->l3.dport) : 0;
	__u32 r[4];

	__builtin_memcpy(r, remote, sizeof(r));
	if (p->l3.family == EGR_AF_INET)
		return egr_decide4(sb, r[0], port, p->l3.protocol);
	return egr_decide6(sb, r, port, p->l3.protocol);
}

static __always_inline __u32 nd_l3_len(struct __sk_buff *skb)
{
	__u32 l2 = egr_nd_l2_len ? ND_ETH_HLEN : 0;

	return skb->len > l2 ? skb->len - l2 : 0;
}

/* --- the sandbox's listeners: DNS, and inspection ------------------------------- */

/* The listeners' address of the family (0: none) into addr. */
static __always_inline int nd_listen_addr(int family, __u32 addr[4])
{
	if (family == EGR_AF_INET) {
		addr[0] = egr_nd_dns_addr4;
		addr[1] = addr[2] = addr[3] = 0;
		return addr[0] != 0;
	}
	addr[0] = egr_nd_dns_addr6[0];
	addr[1] = egr_nd_dns_addr6[1];
	addr[2] = egr_nd_dns_addr6[2];
	addr[3] = egr_nd_dns_addr6[3];
	return (addr[0] | addr[1] | addr[2] | addr[3]) != 0;
}

/* The DNS listener of the packet's family: its port (0: none) and address. */
static __always_inline __u16 nd_dns_listener(const struct egr_sandbox *sb, int family,
					     __u32 addr[4])
{
	if (!nd_listen_addr(family, addr))
		return 0;
	return family == EGR_AF_INET ? sb->dns_port4 : sb->dns_port6;
}

/* The inspecting listener of the family, the same way. */
static __always_inline __u16 nd_insp_listener(const struct egr_sandbox *sb, int family,
					      __u32 addr[4])
{
	if (!nd_listen_addr(family, addr))
		return 0;
	return family == EGR_AF_INET ? sb->inspect_port4 : sb->inspect_port6;
}

static __always_inline int nd_same_addr(const __u32 a[4], const __u32 b[4])
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

static __always_inline void nd_dns_key(struct egr_nd_dns_key *k, __u32 sandbox_id,
				       const struct egr_l3 *l3, int inbound)
{
	__builtin_memset(k, 0, sizeof(*k));
	k->sandbox_id = sandbox_id;
	k->family = (__u8)l3->family;
	k->protocol = (__u8)l3->protocol;
	k->port = inbound ? l3->dport : l3->sport;
	__builtin_memcpy(k->addr, inbound ? l3->daddr : l3->saddr, 16);
}

/*
 * Rewrite one address (at addr_off: the source or the destination) and one
 * port (at port_off) of a TCP or UDP packet, with its checksums: the
 * transport's covers the address through the pseudo-header (BPF_F_PSEUDO_HDR,
 * also right for a CHECKSUM_PARTIAL packet of a local socket), IPv4's own
 * header checksum the address. A UDP/IPv4 checksum of 0 (none) stays 0
 * (BPF_F_MARK_MANGLED_0). 0 or -1 (dropped by the caller).
 */
static __always_inline int nd_rewrite(struct __sk_buff *skb, const struct egr_l3 *l3,
				      __u32 addr_off, const __u32 from[4], const __u32 to[4],
				      __u32 port_off, __u16 from_port, __u16 to_port)
{
	__u32 l2 = egr_nd_l2_len ? ND_ETH_HLEN : 0;
	__u32 l4 = l2 + (l3->family == EGR_AF_INET ? 20 : 40);
	__u32 csum_off = l4 + (l3->protocol == EGR_IPPROTO_TCP ? 16 : 6);
	__u64 mm = l3->protocol == EGR_IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	__be16 fp = bpf_htons(from_port), tp = bpf_htons(to_port);
	__u32 f[4], t[4];

	__builtin_memcpy(f, from, sizeof(f));
	__builtin_memcpy(t, to, sizeof(t));
	if (l3->family == EGR_AF_INET) {
		if (bpf_l4_csum_replace(skb, csum_off, f[0], t[0], BPF_F_PSEUDO_HDR | mm | 4) ||
		    bpf_l3_csum_replace(skb, l2 + 10, f[0], t[0], 4) ||
		    bpf_skb_store_bytes(skb, addr_off, &t[0], 4, 0))
			return -1;
	} else {
		__s64 diff = bpf_csum_diff(f, 16, t, 16, 0);

		if (diff < 0 ||
		    bpf_l4_csum_replace(skb, csum_off, 0, (__u32)diff, BPF_F_PSEUDO_HDR | mm) ||
		    bpf_skb_store_bytes(skb, addr_off, t, 16, 0))
			return -1;
	}
	if (bpf_l4_csum_replace(skb, csum_off, fp, tp, mm | 2) ||
	    bpf_skb_store_bytes(skb, port_off, &tp, 2, 0))
		return -1;
	return 0;
}

/* The guest's packet to a listener (laddr, lport) instead of where it was
 * sent: tc ingress runs before routing, so the rewritten packet is
 * delivered to the listener bound to the device's address. 0 or -1. */
static __always_inline int nd_to_listener(struct __sk_buff *skb, const struct nd_pkt *p,
					  const __u32 laddr[4], __u16 lport)
{
	__u32 l2 = egr_nd_l2_len ? ND_ETH_HLEN : 0;
	int v4 = p->l3.family == EGR_AF_INET;

	return nd_rewrite(skb, &p->l3, l2 + (v4 ? 16 : 24), p->l3.daddr, laddr,
			  l2 + (v4 ? 20 : 40) + 2, p->l3.dport, lport);
}

/* A listener's packet towards the guest: its source back to (orig, oport),
 * where the guest sent what it answers. 0 or -1. */
static __always_inline int nd_from_listener(struct __sk_buff *skb, const struct nd_pkt *p,
					    const __u32 laddr[4], const __u32 orig[4], __u16 oport)
{
	__u32 l2 = egr_nd_l2_len ? ND_ETH_HLEN : 0;
	int v4 = p->l3.family == EGR_AF_INET;

	return nd_rewrite(skb, &p->l3, l2 + (v4 ? 12 : 8), laddr, orig, l2 + (v4 ? 20 : 40),
			  p->l3.sport, oport);
}

/*
 * A port-53 packet of the sandbox, to any address: to its listener (tc
 * ingress runs before routing, so the rewritten packet is delivered to the
 * listener bound to the device's address), after noting where it was sent.
 * 0: rewritten, pass; -1: no listener for the family (or the note or the
 * rewrite failed): the caller drops it.
 */
static __always_inline int nd_dns_redirect(struct __sk_buff *skb, const struct egr_sandbox *sb,
					   __u32 sandbox_id, const struct nd_pkt *p)
{
	struct egr_nd_dns_key k;
	struct egr_nd_dns_nat v;
	__u32 laddr[4];
	__u16 lport;

	if (p->l3.protocol != EGR_IPPROTO_TCP && p->l3.protocol != EGR_IPPROTO_UDP)
		return -1;
	lport = nd_dns_listener(sb, p->l3.family, laddr);
	if (!lport || sb->quarantined)
		return -1;
	nd_dns_key(&k, sandbox_id, &p->l3, 0);
	__builtin_memcpy(v.daddr, p->l3.daddr, 16);
	v.last_ns = bpf_ktime_get_boot_ns();
	if (bpf_map_update_elem(&egr_nd_dns_nat, &k, &v, BPF_ANY)) {
		nd_dns_count(EGR_ND_DNS_NAT_FULL);
		return -1;
	}
	if (nd_to_listener(skb, p, laddr, lport))
		return -1;
	nd_dns_count(EGR_ND_DNS_REDIRECT);
	return 0;
}

/*
 * Towards the sandbox, from its listener's address and port: an answer,
 * whose source goes back to the resolver the guest asked and port 53.
 * 1: not from the listener (judged as any packet); 0: rewritten, pass;
 * -1: from the listener answering nothing noted (or recent): dropped as
 * inbound.
 */
static __always_inline int nd_dns_answer(struct __sk_buff *skb, const struct egr_sandbox *sb,
					 __u32 sandbox_id, const struct nd_pkt *p)
{
	struct egr_nd_dns_key k;
	struct egr_nd_dns_nat *v;
	__u32 laddr[4], orig[4];
	__u16 lport;

	if (!p->l3.has_ports)
		return 1;
	lport = nd_dns_listener(sb, p->l3.family, laddr);
	if (!lport || p->l3.sport != lport || !nd_same_addr(p->l3.saddr, laddr))
		return 1;
	nd_dns_key(&k, sandbox_id, &p->l3, 1);
	v = bpf_map_lookup_elem(&egr_nd_dns_nat, &k);
	if (!v || bpf_ktime_get_boot_ns() - v->last_ns > egr_nd_flow_idle_ns) {
		nd_dns_count(EGR_ND_DNS_STRAY);
		return -1;
	}
	__builtin_memcpy(orig, v->daddr, sizeof(orig));
	if (nd_from_listener(skb, p, laddr, orig, EGR_DNS_PORT))
		return -1;
	nd_dns_count(EGR_ND_DNS_ANSWER);
	return 0;
}

/* Charge an egress packet to the sandbox's and its tenant's quotas: 1 if
 * within them, else 0 with the drop metered (and reported once a window). */
static __always_inline int nd_quota_ok(const struct egr_sandbox *sb, __u32 sandbox_id,
				       const struct nd_pkt *p, __u32 len, __u64 now)
{
	int reason = egr_quota_egress(sb, sandbox_id, len, now);

	if (reason == EGR_R_ALLOW_QUOTA)
		return 1;
	egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(quota_drops), 1);
	egr_count(EGR_CNT_QUOTA_DROP);
	if (reason == EGR_R_DENY_QUOTA_FIRST)
		egr_report_skb(EGR_EV_QUOTA, sandbox_id, sb, &p->l3, 0, EGR_DENY);
	return 0;
}

/* --- inspection: every allowed TCP packet to the sandbox's inspecting proxy ------ */

/* Is the packet addressed to the inspecting listener itself? No guest
 * reaches it but through the rewrite (which knows where it was going). */
static __always_inline int nd_insp_direct(const struct egr_sandbox *sb, const struct nd_pkt *p)
{
	__u32 laddr[4];
	__u16 lport;

	if (p->l3.protocol != EGR_IPPROTO_TCP || !p->l3.has_ports)
		return 0;
	lport = nd_insp_listener(sb, p->l3.family, laddr);
	return lport && p->l3.dport == lport && nd_same_addr(p->l3.daddr, laddr);
}

/* Is the socket a SYN to the listener reaches egressd's listener of this
 * sandbox? A function of its own (not inlined): the socket lookup's frame
 * would not fit in the ingress program's. */
static __noinline int nd_insp_listener_ours(struct __sk_buff *skb, const struct nd_pkt *p,
					    __u32 lport, __u32 sandbox_id)
{
	__u32 zero = 0;
	struct nd_insp_scratch *w = bpf_map_lookup_elem(&egr_nd_insp_scratch, &zero);

	/* Its tuple and address in the scratch too: 6.1's verifier counts
	 * this frame and the caller's together (at most 512 bytes). */
	if (!skb || !p || !w || !nd_listen_addr(p->l3.family, w->laddr))
		return 0;
	return egr_listener_ours_in(skb, &w->t, p->l3.family == EGR_AF_INET6, p->l3.saddr,
				    p->l3.sport, w->laddr, (__u16)lport, EGR_IPPROTO_TCP,
				    EGR_LISTEN_INSPECT, sandbox_id);
}

/*
 * An allowed TCP packet of an inspected sandbox: to its inspecting
 * listener. A SYN (without ACK) opens the entry of the guest's socket
 * (overwriting what an earlier connection from that port left: a reused
 * port is judged as the new connection it is) and publishes the real
 * destination for the proxy's accept; every other packet must belong to
 * the entry's connection (same destination and port, not idle), or it is
 * dropped: a packet no SYN went before, or one of another destination
 * sent on a port whose entry another connection opened, never gets a
 * connection of its own, and nothing of an inspected sandbox's TCP ever
 * leaves un-rewritten. 0: rewritten, pass; -1: the caller drops it.
 */
static __always_inline int nd_insp_redirect(struct __sk_buff *skb, const struct egr_sandbox *sb,
					    __u32 sandbox_id, const struct nd_pkt *p, __u64 now)
{
	struct nd_insp_scratch *w;
	struct egr_nd_dns_key k;
	struct egr_nd_nat *v;
	__u32 laddr[4], zero = 0;
	__u16 lport;

	lport = nd_insp_listener(sb, p->l3.family, laddr);
	if (!lport || sb->quarantined) {
		nd_dns_count(EGR_ND_INSP_REFUSED);
		return -1;
	}
	nd_dns_key(&k, sandbox_id, &p->l3, 0);
	if ((p->tcp_flags & (TCP_FL_SYN | TCP_FL_ACK)) == TCP_FL_SYN) {
		/* Only to egressd's listener of this sandbox (the mark of
		 * listen.bpf.h, as connect4 checks for cgroup sandboxes): a
		 * socket someone else bound to the port while egressd was
		 * away never gets the guest's connections. */
		if (!nd_insp_listener_ours(skb, p, lport, sandbox_id)) {
			nd_dns_count(EGR_ND_INSP_REFUSED);
			return -1;
		}
		w = bpf_map_lookup_elem(&egr_nd_insp_scratch, &zero);
		if (!w) {
			nd_dns_count(EGR_ND_INSP_NAT_FULL);
			return -1;
		}
		__builtin_memset(w, 0, sizeof(*w));
		__builtin_memcpy(w->nv.daddr, p->l3.daddr, 16);
		w->nv.dport = p->l3.dport;
		w->nv.last_ns = now;
		w->ok.sandbox_id = sandbox_id;
		w->ok.family = (__u8)p->l3.family;
		w->ok.port = p->l3.sport;
		__builtin_memcpy(w->ok.addr, p->l3.saddr, 16);
		__builtin_memcpy(w->ov.addr, p->l3.daddr, 16);
		w->ov.port = p->l3.dport;
		w->ov.family = (__u8)p->l3.family;
		if (bpf_map_update_elem(&egr_nd_insp_nat, &k, &w->nv, BPF_ANY) ||
		    bpf_map_update_elem(&egr_inspect_orig, &w->ok, &w->ov, BPF_ANY)) {
			nd_dns_count(EGR_ND_INSP_NAT_FULL);
			return -1;
		}
	} else {
		v = bpf_map_lookup_elem(&egr_nd_insp_nat, &k);
		if (!v || v->dport != p->l3.dport || !nd_same_addr(v->daddr, p->l3.daddr) ||
		    now - v->last_ns > egr_nd_flow_idle_ns) {
			nd_dns_count(EGR_ND_INSP_REFUSED);
			return -1;
		}
		v->last_ns = now;
	}
	if (nd_to_listener(skb, p, laddr, lport))
		return -1;
	nd_dns_count(EGR_ND_INSP_REDIRECT);
	return 0;
}

/*
 * Towards the sandbox, from its inspecting listener: the source back to
 * the destination the guest's connection was sent to. 1: not from the
 * listener; 0: rewritten, pass; -1: answering no entry: dropped.
 */
static __always_inline int nd_insp_reply(struct __sk_buff *skb, const struct egr_sandbox *sb,
					 __u32 sandbox_id, const struct nd_pkt *p)
{
	struct egr_nd_dns_key k;
	struct egr_nd_nat *v;
	__u32 laddr[4], orig[4];
	__u16 lport, oport;

	if (p->l3.protocol != EGR_IPPROTO_TCP || !p->l3.has_ports)
		return 1;
	lport = nd_insp_listener(sb, p->l3.family, laddr);
	if (!lport || p->l3.sport != lport || !nd_same_addr(p->l3.saddr, laddr))
		return 1;
	nd_dns_key(&k, sandbox_id, &p->l3, 1);
	v = bpf_map_lookup_elem(&egr_nd_insp_nat, &k);
	if (!v || bpf_ktime_get_boot_ns() - v->last_ns > egr_nd_flow_idle_ns) {
		nd_dns_count(EGR_ND_INSP_REFUSED);
		return -1;
	}
	__builtin_memcpy(orig, v->daddr, sizeof(orig));
	oport = v->dport;
	if (nd_from_listener(skb, p, laddr, orig, oport))
		return -1;
	nd_dns_count(EGR_ND_INSP_REPLY);
	return 0;
}

/* The sandbox's egress. */
SEC("tc")
int egr_nd_ingress(struct __sk_buff *skb)
{
	__u32 sandbox_id = egr_nd_sandbox_id, len = nd_l3_len(skb);
	const struct egr_sandbox *sb = egr_sandbox_of(sandbox_id);
	struct nd_pkt p = {};
	struct egr_nd_flow_key fk;
	struct egr_nd_flow fv;
	enum nd_kind kind;
	int reason, verdict, audited = 0;
	__u64 now;

	if (!sb) {
		nd_count(EGR_ND_CNT_NO_SANDBOX);
		egr_count(EGR_CNT_NO_SANDBOX);
		return ND_DROP;
	}
	kind = nd_parse(skb, &p, 1);
	if (kind == ND_ARP || kind == ND_NDISC) {
		if (sb->quarantined)
			return ND_DROP;
		return ND_PASS;
	}
	if (kind != ND_IP)
		goto drop_silent;
	if (!nd_source_ok(skb, &p.l3)) {
		nd_count(EGR_ND_CNT_SPOOFED);
		goto drop;
	}
	/* DNS to any address is the sandbox's DNS proxy's (docs/dns.md
	 * "Device sandboxes"), whatever the allowlist; without a listener
	 * for the family, none at all. */
	if (p.l3.has_ports && p.l3.dport == EGR_DNS_PORT) {
		if (nd_dns_redirect(skb, sb, sandbox_id, &p)) {
			nd_count(EGR_ND_CNT_DNS);
			goto drop;
		}
		/* Egress like any other (as a cgroup sandbox's DNS to its
		 * proxy): metered and charged to the quota, else a guest
		 * past its quota still pushes names out through the proxy. */
		now = bpf_ktime_get_boot_ns();
		if (!nd_quota_ok(sb, sandbox_id, &p, len, now))
			return ND_DROP;
		egr_meter_pkt(sandbox_id, sb->tenant_id, 1, len);
		return ND_PASS;
	}
	/* Under inspection: nothing straight to the listener; no QUIC,
	 * which the proxy cannot read (clients fall back to TCP). */
	if ((sb->flags & EGR_SB_INSPECT) &&
	    (nd_insp_direct(sb, &p) || (p.l3.protocol == EGR_IPPROTO_UDP &&
					p.l3.dport == EGR_QUIC_PORT))) {
		nd_dns_count(EGR_ND_INSP_REFUSED);
		goto drop;
	}
	if (nd_is_icmp(&p)) {
		/* Echo requests, where the policy allows ICMP and the address
		 * outright (HOST:*, egr_rule_allows without ports). */
		if (!nd_icmp_echo(&p, 0) || !(sb->flags & EGR_SB_ALLOW_ICMP))
			goto drop;
	}
	reason = nd_judge(sb, &p, 0);
	verdict = egr_apply_mode(sb, egr_reason_verdict(reason), 1, &audited);
	if (verdict != EGR_ALLOW)
		goto drop;
	if (audited) {
		egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(would_deny_backstop), 1);
		if (egr_should_report(EGR_ALLOW))
			egr_report_skb(EGR_EV_BACKSTOP, sandbox_id, sb, &p.l3, 0,
				       EGR_VERDICT_AUDIT);
	}
	now = bpf_ktime_get_boot_ns();
	if (!nd_quota_ok(sb, sandbox_id, &p, len, now))
		return ND_DROP;
	/* What only audit mode let through goes as it would uninspected, as
	 * for cgroup sandboxes (connect4 redirects only what a rule allows). */
	if ((sb->flags & EGR_SB_INSPECT) && p.l3.protocol == EGR_IPPROTO_TCP && !audited) {
		/* Metered here; the proxy names the real destination in
		 * the audit record (not egr_dests), and its listener's
		 * packets are answered by nd_insp_reply, not by a flow. */
		if (nd_insp_redirect(skb, sb, sandbox_id, &p, now))
			goto drop;
		egr_meter_pkt(sandbox_id, sb->tenant_id, 1, len);
		return ND_PASS;
	}
	nd_flow_key(&fk, sandbox_id, &p, 0);
	fv.last_ns = now;
	if (bpf_map_update_elem(&egr_nd_flows, &fk, &fv, BPF_ANY))
		nd_count(EGR_ND_CNT_FLOW_FULL); /* its replies are dropped: fail closed */
	egr_meter_pkt(sandbox_id, sb->tenant_id, 1, len);
	egr_note_dest(sandbox_id, &p.l3, len, now);
	return ND_PASS;
drop:
	egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(backstop_drops), 1);
	egr_count(EGR_CNT_BACKSTOP_DROP);
	egr_report_skb(EGR_EV_BACKSTOP, sandbox_id, sb, &p.l3, 0, EGR_DENY);
	return ND_DROP;
drop_silent:
	/* Not IP (or not parseable as such): counted, nothing to name. */
	egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(backstop_drops), 1);
	egr_count(EGR_CNT_BACKSTOP_DROP);
	return ND_DROP;
}

/* Towards the sandbox. */
SEC("tc")
int egr_nd_egress(struct __sk_buff *skb)
{
	__u32 sandbox_id = egr_nd_sandbox_id, len = nd_l3_len(skb);
	const struct egr_sandbox *sb = egr_sandbox_of(sandbox_id);
	struct nd_pkt p = {};
	struct egr_nd_flow_key fk;
	struct egr_nd_flow *fv;
	enum nd_kind kind;
	int reason, audited;

	if (!sb) {
		nd_count(EGR_ND_CNT_NO_SANDBOX);
		egr_count(EGR_CNT_NO_SANDBOX);
		return ND_DROP;
	}
	kind = nd_parse(skb, &p, 0);
	if (kind == ND_ARP || kind == ND_NDISC)
		return sb->quarantined ? ND_DROP : ND_PASS;
	if (kind != ND_IP) {
		egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(inbound_drops), 1);
		egr_count(EGR_CNT_INBOUND_DROP);
		return ND_DROP;
	}
	/* An answer of its DNS proxy (checked first: the listener's packets
	 * are never a flow of the sandbox's). */
	reason = nd_dns_answer(skb, sb, sandbox_id, &p);
	if (reason == 0) {
		nd_count(EGR_ND_CNT_REPLY);
		egr_meter_pkt(sandbox_id, sb->tenant_id, 0, len);
		return ND_PASS;
	}
	/* Its inspecting proxy's packets, the same way (metered: what the
	 * proxy relays from the destination). */
	if (reason > 0 && (sb->flags & EGR_SB_INSPECT)) {
		reason = nd_insp_reply(skb, sb, sandbox_id, &p);
		if (reason == 0) {
			nd_count(EGR_ND_CNT_REPLY);
			egr_meter_pkt(sandbox_id, sb->tenant_id, 0, len);
			return ND_PASS;
		}
	}
	if (reason < 0) {
		reason = EGR_R_DENY_INBOUND;
	} else if (sb->flags & EGR_SB_INBOUND_ALLOW) {
		reason = EGR_R_ALLOW_REPLY;
	} else {
		reason = EGR_R_DENY_INBOUND;
		nd_flow_key(&fk, sandbox_id, &p, 1);
		fv = bpf_map_lookup_elem(&egr_nd_flows, &fk);
		/* A reply: to a flow the sandbox opened, recently; never a
		 * new TCP connection (a bare SYN), never ICMP but echo
		 * replies; and what it answers is still allowed (an update
		 * that removed it ends its replies too). */
		if (fv && bpf_ktime_get_boot_ns() - fv->last_ns <= egr_nd_flow_idle_ns &&
		    !(p.l3.protocol == EGR_IPPROTO_TCP &&
		      (p.tcp_flags & (TCP_FL_SYN | TCP_FL_ACK)) == TCP_FL_SYN) &&
		    (!nd_is_icmp(&p) || nd_icmp_echo(&p, 1))) {
			reason = nd_judge(sb, &p, 1);
			if (nd_is_icmp(&p) && !(sb->flags & EGR_SB_ALLOW_ICMP))
				reason = EGR_R_DENY_INBOUND;
			if (egr_reason_verdict(reason) == EGR_ALLOW)
				reason = EGR_R_ALLOW_REPLY;
		}
	}
	if (egr_apply_mode(sb, egr_reason_verdict(reason), 0, &audited) != EGR_ALLOW) {
		nd_count(EGR_ND_CNT_INBOUND_NEW);
		egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(inbound_drops), 1);
		egr_count(EGR_CNT_INBOUND_DROP);
		egr_report_skb(EGR_EV_INBOUND, sandbox_id, sb, &p.l3, 1, EGR_DENY);
		return ND_DROP;
	}
	nd_count(EGR_ND_CNT_REPLY);
	egr_meter_pkt(sandbox_id, sb->tenant_id, 0, len);
	return ND_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
