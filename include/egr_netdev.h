/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Device sandboxes (bpf/netdev.bpf.c): the maps only the device programs
 * use. Additive to the ABI of include/egressd.h: new maps under new names,
 * no struct of egressd.h changed, so EGR_ABI_VERSION is not touched; the
 * rules at the top of egressd.h apply to these structs as well (explicit
 * layout, sizes asserted, enum values never renumbered).
 */
#ifndef EGR_NETDEV_H
#define EGR_NETDEV_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* A flow a device sandbox opened (egr_nd_flows): the sandbox's side first.
 * Written by the ingress program (the sandbox's egress) for every allowed
 * packet; the egress program (towards the sandbox) lets a packet in only
 * when it answers such a flow. */
struct egr_nd_flow_key {
	__u32 sandbox_id;
	__u8 family;     /* AF_INET / AF_INET6 */
	__u8 protocol;   /* TCP, UDP, ICMP, ICMPv6 */
	__u16 sport;     /* the sandbox's port, host order (ICMP echo: the id) */
	__u16 dport;     /* the remote port, host order (ICMP: 0) */
	__u16 pad;
	__u32 saddr[4];  /* the sandbox's address; IPv4 in [0] */
	__u32 daddr[4];  /* the remote address */
};

struct egr_nd_flow {
	__u64 last_ns;   /* bpf_ktime_get_boot_ns() of its last allowed egress packet */
};

/* Counters of the device programs (egr_nd_counters, per CPU): why packets
 * were dropped or let through without the allowlist. Never renumbered. */
enum egr_nd_counter {
	EGR_ND_CNT_NO_SANDBOX = 0,  /* program without a sandbox entry: dropped */
	EGR_ND_CNT_NOT_IP = 1,      /* ethertype neither IP nor ARP: dropped */
	EGR_ND_CNT_VLAN = 2,        /* a VLAN tag (in the frame or offloaded): dropped */
	EGR_ND_CNT_MALFORMED = 3,   /* truncated, wrong version, ethertype and header disagree */
	EGR_ND_CNT_FRAGMENT = 4,    /* any IPv4 or IPv6 fragment: dropped */
	EGR_ND_CNT_IP_OPTIONS = 5,  /* IPv4 with options: dropped */
	EGR_ND_CNT_EXT_HDR = 6,     /* IPv6 with any extension header: dropped */
	EGR_ND_CNT_SPOOFED = 7,     /* a source address not routed back through the device */
	EGR_ND_CNT_PROTO = 8,       /* a transport neither TCP, UDP nor ICMP echo: dropped */
	EGR_ND_CNT_DNS = 9,         /* port 53, no DNS listener of the sandbox for the family: dropped */
	EGR_ND_CNT_ARP = 10,        /* ARP let through (the link needs it) */
	EGR_ND_CNT_ND = 11,         /* IPv6 neighbour/router discovery let through */
	EGR_ND_CNT_INBOUND_NEW = 12, /* towards the sandbox, answering no flow of it: dropped */
	EGR_ND_CNT_REPLY = 13,      /* towards the sandbox, answering a flow: let through */
	EGR_ND_CNT_FLOW_FULL = 14,  /* an allowed egress packet whose flow could not be noted */
	EGR_ND_CNT_MAX = 15,
};

/* Flows all device sandboxes together hold (an LRU: a sandbox opening many
 * can age out another's, whose replies are then dropped: fail closed). */
#define EGR_ND_MAX_FLOWS (1u << 18)

/*
 * DNS of a device sandbox (docs/dns.md "Device sandboxes"): every TCP and
 * UDP packet to port 53 it sends, to any address, has its destination
 * rewritten to the sandbox's own DNS listener (an address of the device in
 * its network namespace, the listener's port); egr_nd_dns_nat remembers
 * what it was, so that the answer's source is rewritten back to it. One
 * entry per guest socket (family, protocol, address, port): a guest that
 * asks two resolvers from one port at once gets both answers from the
 * one it asked last.
 */
struct egr_nd_dns_key {
	__u32 sandbox_id;
	__u8 family;     /* AF_INET / AF_INET6 */
	__u8 protocol;   /* TCP, UDP */
	__u16 port;      /* the guest's port, host order */
	__u32 addr[4];   /* the guest's address; IPv4 in [0] */
};

struct egr_nd_dns_nat {
	__u32 daddr[4];  /* where the guest sent it (the answer's source) */
	__u64 last_ns;   /* bpf_ktime_get_boot_ns() of its last query packet */
};

/* Counters of the DNS redirect (egr_nd_dns_counters, per CPU). A map of
 * their own: egr_nd_counters is pinned with EGR_ND_CNT_MAX entries, and a
 * map of another size would not be reused by the next egressd. */
enum egr_nd_dns_counter {
	EGR_ND_DNS_REDIRECT = 0,  /* a port-53 packet rewritten to the listener */
	EGR_ND_DNS_ANSWER = 1,    /* a listener's packet rewritten back to the resolver asked */
	EGR_ND_DNS_NAT_FULL = 2,  /* its entry could not be written: dropped */
	EGR_ND_DNS_STRAY = 3,     /* from the listener, answering nothing noted: dropped */
	/* Inspection (docs/inspect.md "Device sandboxes"): the same array,
	 * its spare slots. */
	EGR_ND_INSP_REDIRECT = 4, /* a TCP packet rewritten to the inspecting listener */
	EGR_ND_INSP_REPLY = 5,    /* a listener's packet rewritten back to the real destination */
	EGR_ND_INSP_REFUSED = 6,  /* straight to the listener, no listener, no or another flow's
				   * entry, QUIC: dropped */
	EGR_ND_INSP_NAT_FULL = 7, /* its entry (or the proxy's record) could not be written */
	EGR_ND_DNS_CNT_MAX = 8,
};

/* DNS sockets all device sandboxes together have in use (an LRU: one
 * aged out loses its answer, the guest asks again). */
#define EGR_ND_MAX_DNS (1u << 16)

/*
 * Inspection of a device sandbox (docs/inspect.md "Device sandboxes"):
 * every TCP packet its allowlist allows has its destination rewritten to
 * the sandbox's inspecting listener (the DNS listeners' address of the
 * device, the entry's inspect_port4/6); egr_nd_insp_nat, keyed like
 * egr_nd_dns_nat by the guest's socket (protocol TCP), remembers the real
 * destination and port, which the listener's packets get back as their
 * source. Only a SYN writes an entry (and publishes egr_inspect_orig for
 * the proxy); any other packet must match its entry's destination.
 */
struct egr_nd_nat {
	__u32 daddr[4];  /* the real destination; IPv4 in [0] */
	__u64 last_ns;   /* bpf_ktime_get_boot_ns() of its last packet from the guest */
	__u16 dport;     /* the real destination port, host order */
	__u16 pad[3];
};

/* Inspected connections all device sandboxes together have open. */
#define EGR_ND_MAX_INSPECT (1u << 16)

_Static_assert(sizeof(struct egr_nd_nat) == 32, "egr_nd_nat is ABI");
_Static_assert(sizeof(struct egr_nd_dns_key) == 24, "egr_nd_dns_key is ABI");
_Static_assert(sizeof(struct egr_nd_dns_nat) == 24, "egr_nd_dns_nat is ABI");
_Static_assert(sizeof(struct egr_nd_flow_key) == 44, "egr_nd_flow_key is ABI");
_Static_assert(sizeof(struct egr_nd_flow) == 8, "egr_nd_flow is ABI");

#endif /* EGR_NETDEV_H */
