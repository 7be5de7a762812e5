/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Types shared by the BPF programs and egressd: map keys, map values and the
 * limits both sides agree on. Only fixed-width kernel types, largest fields
 * first, so the layout is the same for clang -target bpf and for gcc.
 *
 * This is the kernel/userspace ABI of egressd. The maps outlive egressd (they
 * are pinned), so a new egressd meets maps an older one created:
 * - EGR_ABI_VERSION names the layout of every pinned map; the maps live
 *   under <bpffs-dir>/v<EGR_ABI_VERSION>/maps (docs/architecture.md).
 * - Any change to a struct below, to a map's key, value or type, or to the
 *   meaning of a value increments EGR_ABI_VERSION, freezes the previous
 *   layout in include/egr_abi_v<N>.h and adds its conversion to
 *   user/egressd/migrate.c. The _Static_asserts at the end catch a size that
 *   changed by accident, under gcc and under clang -target bpf alike.
 * - Enum values that reach a map or an event are explicit: never renumber
 *   one; retire it as unused and append a new one.
 */
#ifndef EGRESSD_H
#define EGRESSD_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Version 1 was the unversioned layout (<bpffs-dir>/maps) of egressd up to
 * commit c5034ba; include/egr_abi_v1.h freezes it. */
#define EGR_ABI_VERSION 2

/* Port ranges one allowlist prefix can carry after ancestor rules are merged
 * into it (see user/compile.c). A policy that needs more is rejected. */
#define EGR_MAX_PORT_RANGES 8

/* Protocol bits of a port range. */
#define EGR_PROTO_TCP 0x1
#define EGR_PROTO_UDP 0x2
#define EGR_PROTO_ANY (EGR_PROTO_TCP | EGR_PROTO_UDP)

/* Sandbox flags: inet socket kinds that cgroup/sock_create refuses unless the
 * policy names them (network.allow_sockets). TCP and UDP are always allowed. */
#define EGR_SB_ALLOW_RAW     0x01 /* SOCK_RAW, any protocol */
#define EGR_SB_ALLOW_ICMP    0x02 /* SOCK_DGRAM ping sockets, ICMP and ICMPv6 */
#define EGR_SB_ALLOW_UDPLITE 0x04 /* IPPROTO_UDPLITE */
#define EGR_SB_ALLOW_SCTP    0x08 /* IPPROTO_SCTP */
#define EGR_SB_ALLOW_MPTCP   0x10 /* IPPROTO_MPTCP */
/* Other sandbox flags. */
#define EGR_SB_INBOUND_ALLOW 0x100 /* network.inbound = "allow" */
#define EGR_SB_INSPECT       0x200 /* network.inspect: TCP through the inspecting proxy */
#define EGR_SB_ESCAPE_ALERT  0x400 /* network.on_escape = "alert": a task leaving the
				    * sandbox cgroup is reported, not killed */
#define EGR_SB_AUDIT         0x800 /* network.mode = "audit": allowlist denies are let
				    * through and reported (egr_apply_mode) */
/* Not a policy switch but a cache the kernel layer keeps (user/egressd/kernel/
 * maps.c): when egressd wrote this entry its tenant had no quota, so
 * cgroup_skb/egress skips the egr_quota_tenant lookup. egressd clears it on
 * every entry of the tenant before it writes a quota for a tenant that had
 * none, and after; an entry without it (any older entry) looks the quota up,
 * so its absence is the old, safe behaviour and no ABI version is needed. */
#define EGR_SB_TENANT_NO_QUOTA 0x1000

/* Policy id 0 and sandbox id 0 are never allocated: a zeroed cgroup storage
 * (a link attached before egressd wrote the sandbox id) therefore resolves to
 * nothing and is denied. */
#define EGR_ID_NONE 0

/* LPM trie keys: the policy id is part of the prefix, so one trie holds every
 * policy and a lookup never crosses from one policy into another.
 * prefixlen = 32 (policy id bits) + the CIDR length. */
struct egr_lpm4_key {
	__u32 prefixlen;
	__u32 policy_id; /* all 32 bits always compared, so host order is fine */
	__u8 addr[4];
};

struct egr_lpm6_key {
	__u32 prefixlen;
	__u32 policy_id;
	__u8 addr[16];
};

#define EGR_LPM_POLICY_BITS 32

struct egr_port_range {
	__u16 lo;     /* host byte order, inclusive */
	__u16 hi;     /* host byte order, inclusive */
	__u16 protos; /* EGR_PROTO_* */
};

/* Value of an allowlist prefix: what may be reached there, and until when. */
struct egr_rule {
	__u64 expires_ns; /* bpf_ktime_get_boot_ns() deadline; 0 = never expires */
	__u32 nranges;
	__u16 pad;
	struct egr_port_range ranges[EGR_MAX_PORT_RANGES];
	__u16 pad2; /* explicit: the struct is 64 bytes, zero the padding */
};

/* Value of egr_sandboxes, keyed by sandbox id. Replacing this one entry is
 * how a policy change takes effect atomically. */
struct egr_sandbox {
	__u64 families;        /* address families beyond unix/inet/inet6 the policy
				* allows (bit n = AF n), for lsm_cgroup/socket_create */
	__u64 quota_bytes;     /* limits.egress_bytes per window; 0 = none */
	__u64 quota_window_ns;
	__u32 policy_id;
	__u32 tenant_id;
	__u32 flags;     /* EGR_SB_* */
	__u16 dns_port4; /* the DNS proxy on 127.0.0.1 of its network namespace, shared by
			  * that namespace's sandboxes (a device sandbox: its own, on its
			  * device's address); 0 = none (DNS denied) */
	__u16 dns_port6; /* and on ::1 (a device's IPv6 address) */
	__u16 inspect_port4; /* its inspecting proxy on 127.0.0.1 (EGR_SB_INSPECT); 0 = none */
	__u16 inspect_port6; /* and on ::1 */
	/* Appended after version 1 (migrate.c gives them their defaults). */
	__u32 quarantined; /* nonzero: the circuit breaker tripped; every decision of
			    * the sandbox denies, allowed or not, until released */
};

/*
 * The inspecting proxy (docs/inspect.md). connect4/6 record where an
 * inspected TCP socket meant to go in socket storage (egr_inspect_sk) and
 * point it at the sandbox's proxy listener; the SYN leaving that socket
 * (cgroup_skb/egress, the first moment its source port is known) publishes
 * the record in egr_inspect_orig under the client's address and port, which
 * is what the proxy sees as the peer of the connection it accepts.
 */
struct egr_inspect_key {
	__u32 sandbox_id;
	__u16 port;     /* client's source port, host order */
	__u8 family;    /* of the connection to the proxy: AF_INET or AF_INET6 */
	__u8 pad;
	__u8 addr[16];  /* client's source address; IPv4 in the first 4 bytes */
};

struct egr_inspect_orig {
	__u8 addr[16];  /* original destination; IPv4 (also v4-mapped) in the first 4 */
	__u16 port;     /* host order */
	__u8 family;    /* AF_INET or AF_INET6 */
	__u8 published; /* sk storage only: already written to egr_inspect_orig */
	__u32 pad;
};

#define EGR_QUIC_PORT 443 /* UDP 443 is refused under inspection: clients fall back to TCP */

/* Where a redirected DNS socket really sent to, so recvmsg can give the
 * reply that source back (egr_dns_orig, socket storage). Network order. */
struct egr_dns_orig {
	__u32 addr6[4];
	__u32 addr4;
	__u16 port4;
	__u16 port6;
};

#define EGR_DNS_PORT 53

/* Egress quota accounting, one per sandbox and one per tenant (egr_quota_sb,
 * egr_quota_tenant). Shared by all CPUs, updated with atomic adds. The
 * window restarts lazily: the first packet after window_ns resets it. */
struct egr_quota {
	__u64 limit_bytes;     /* tenants: set by egressd; sandboxes: copied from egr_sandbox */
	__u64 window_ns;
	__u64 window_start_ns;
	__u64 bytes;           /* bytes sent in the current window */
	__u64 exceeded;        /* windows in which the limit was hit */
};

/*
 * Meters per sandbox (egr_meter_sb) and per tenant (egr_meter_tenant),
 * per CPU; egressd sums the CPUs. A byte is a byte of the IP packet as the
 * cgroup_skb hook sees it: IP header + transport header + payload, no
 * link-layer header (docs/metering.md).
 */
struct egr_meter {
	__u64 bytes_out;
	__u64 pkts_out;
	__u64 bytes_in;
	__u64 pkts_in;
	__u64 conn_allowed;    /* connect(): TCP, connected UDP, TFO */
	__u64 conn_denied;
	__u64 dgram_allowed;   /* unconnected UDP datagrams */
	__u64 dgram_denied;
	__u64 sock_denied;     /* sock_create and setsockopt refusals */
	__u64 backstop_drops;  /* egress packets no earlier hook stopped */
	__u64 inbound_drops;   /* unsolicited inbound packets dropped */
	__u64 quota_drops;     /* egress packets dropped past a quota */
	/* Appended after version 1: what audit mode let through that
	 * enforce mode would have denied (counted as allowed above too). */
	__u64 would_deny_conn;
	__u64 would_deny_dgram;
	__u64 would_deny_sock;
	__u64 would_deny_backstop;
};

/* Value of the per-attachment cgroup storage: which sandbox this cgroup is.
 * FROZEN FOREVER, like the egr_cg_storage map itself (key: u64 cgroup id):
 * the storage belongs to the link's attachment, bpf_link_update swaps only
 * the program, so every future version reuses the pinned map of the
 * version before it and must read this exact layout. */
struct egr_cg_ref {
	__u32 sandbox_id;
	__u32 pad;
};

/* Global per-CPU counters, index into egr_counters (explicit values: never
 * renumber; retire as unused, append before EGR_CNT_MAX). */
enum egr_counter {
	EGR_CNT_CONNECT_ALLOW = 0,
	EGR_CNT_CONNECT_DENY = 1,
	EGR_CNT_SENDMSG_ALLOW = 2,
	EGR_CNT_SENDMSG_DENY = 3,
	EGR_CNT_SOCK_CREATE_ALLOW = 4,
	EGR_CNT_SOCK_CREATE_DENY = 5,
	EGR_CNT_NO_SANDBOX = 6,     /* managed cgroup without a sandbox entry: denied */
	EGR_CNT_EXPIRED = 7,        /* matching prefix past its expiry: denied */
	EGR_CNT_SETSOCKOPT_DENY = 8,
	EGR_CNT_BACKSTOP_DROP = 9,
	EGR_CNT_INBOUND_DROP = 10,
	EGR_CNT_QUOTA_DROP = 11,
	EGR_CNT_EVENTS_LOST = 12,    /* ring buffer reservation failed */
	EGR_CNT_METER_FULL = 13,     /* no room for a sandbox or tenant meter */
	EGR_CNT_MAX = 14,
};

/* Destinations a sandbox actually sent to (egr_sb_dests, a hash: at most
 * EGR_DESTS_PER_SB per sandbox, so no sandbox can push out another's; what
 * did not fit is counted in egr_dests_n and the audit record says so).
 * Keyed by the packet's real L3 destination. */
struct egr_dest_key {
	__u32 sandbox_id;
	__u16 port;     /* host order; 0 without ports */
	__u8 family;    /* AF_INET / AF_INET6 */
	__u8 protocol;
	__u8 addr[16];  /* IPv4 in the first 4 bytes */
};

struct egr_dest_val {
	__u64 bytes_out;
	__u64 pkts_out;
	__u64 first_ns;  /* bpf_ktime_get_boot_ns() of the first packet */
	__u64 last_ns;
};

/* egr_sandbox_cgroups: cgroup id (kernfs id) of a sandbox's own cgroup ->
 * its sandbox id, for the programs that are not attached to the cgroup
 * (the cgroup_attach_task guard) and so cannot read egr_cg_storage.
 * egressd writes it with the cgroup storage and removes it at detach. */
#define EGR_MAX_CGROUP_LEVELS 128 /* how far up the guard looks for a sandbox */

/* egr_proc_home (tgid -> this): the sandbox a process lives in, for the
 * guard to know where a task came from once the kernel has moved it. As
 * large as the pid space (PID_MAX_LIMIT on 64-bit), so it cannot fill up
 * before the kernel runs out of pids; allocated per entry. */
#define EGR_MAX_HOMED_PROCS (4u << 20)
struct egr_proc_home {
	__u64 cgroup_id;  /* the sandbox's own cgroup */
	__u32 sandbox_id; /* 0: none */
	__u32 flags;      /* EGR_HOME_* */
};
/* The process left its sandbox and is to die (bpf/escape.bpf.c): the mark
 * survives later moves and is inherited at fork; a marked parent is killed
 * in the kernel when it forks, egressd kills marked processes it learns of. */
#define EGR_HOME_ESCAPED 0x1

/* Events, kernel to egressd through the egr_events ring buffer. The layout
 * only grows at the end; version says which fields are there. */
#define EGR_EVENT_VERSION 1

enum egr_event_type {
	EGR_EV_CONNECT = 1,   /* connect verdict */
	EGR_EV_SENDMSG = 2,       /* unconnected UDP verdict */
	EGR_EV_SOCK_CREATE = 3,   /* refused socket() */
	EGR_EV_SETSOCKOPT = 4,    /* refused routing option */
	EGR_EV_BACKSTOP = 5,      /* cgroup_skb/egress drop */
	EGR_EV_INBOUND = 6,       /* cgroup_skb/ingress drop */
	EGR_EV_QUOTA = 7,         /* first drop of a window past a quota */
	EGR_EV_ESCAPE = 8,        /* a task left its sandbox cgroup: struct egr_escape_event */
	EGR_EV_BIND = 9,          /* refused bind() to a port of egressd's listeners */
};

/* What the cgroup_attach_task guard did about a move out of a sandbox. */
enum egr_escape_action {
	EGR_ESCAPE_KILLED = 1,      /* the mover (in the sandbox) got SIGKILL */
	EGR_ESCAPE_ALERTED = 2,     /* network.on_escape "alert": reported only */
	EGR_ESCAPE_BY_OUTSIDER = 3, /* moved by a process outside the sandbox: reported */
	EGR_ESCAPE_KILL_FAILED = 4, /* bpf_send_signal refused: reported */
};

/* Event verdict of a decision the policy denies and audit mode let through
 * (EGR_ALLOW and EGR_DENY are the others, include/egr_decide.h). */
#define EGR_VERDICT_AUDIT 2

struct egr_event {
	__u64 ts_ns;          /* bpf_ktime_get_boot_ns() */
	__u64 cgroup_id;      /* the current task's cgroup; 0 in softirq context */
	__u32 version;
	__u32 type;           /* enum egr_event_type */
	__u32 sandbox_id;
	__u32 tenant_id;
	__u32 policy_id;
	__u32 pid;            /* tgid; 0 when not in task context */
	__u32 verdict;        /* EGR_ALLOW / EGR_DENY / EGR_VERDICT_AUDIT */
	__u32 family;         /* AF_INET / AF_INET6 */
	__u32 protocol;
	__u32 sock_type;
	__s32 level;          /* setsockopt only */
	__s32 optname;
	__u16 port;           /* destination, host order */
	__u16 pad;
	__u8 addr[16];        /* destination; IPv4 in the first 4 bytes */
	char comm[16];
};

/* EGR_EV_ESCAPE records are longer: struct egr_event (pid, comm, cgroup_id:
 * the mover, the writer of cgroup.procs) followed by the move. A record of
 * its own, so that struct egr_event, which every other program writes,
 * keeps its layout. */
struct egr_escape_event {
	struct egr_event ev;
	__u64 from_cgroup_id; /* the sandbox's cgroup the task left */
	__u64 to_cgroup_id;   /* the cgroup it was moved to (or born in) */
	__u32 target_pid;     /* the moved task (tgid) */
	__u32 action;         /* enum egr_escape_action */
};

/*
 * The DNS proxy's view of who asks (egr_dns_senders): a sandbox's socket
 * that sent to its proxy listener, keyed as the proxy sees the sender
 * (recvfrom / getpeername) plus the listener's port. The listeners are
 * shared by the sandboxes of one network namespace and egressd gives each
 * namespace's listeners a port of their own, so the port names the
 * namespace and the value names the sandbox. cgroup_skb/egress writes the
 * entry from the socket's own first packet to the proxy (the source port is
 * bound by then), before that packet can reach the listener;
 * cgroup/sock_release deletes it. A sender without an entry, or whose entry
 * is marked shared, is dropped and counted (docs/dns.md "Who asks").
 */
struct egr_dns_client_key {
	__u32 lport;    /* the proxy listener's port it sent to, host order */
	__u16 port;     /* source port, host order */
	__u8 family;    /* AF_INET / AF_INET6 */
	__u8 protocol;  /* IPPROTO_UDP / IPPROTO_TCP */
	__u8 addr[16];  /* source address; IPv4 in the first 4 bytes */
};

/* Another sandbox's socket sends from the same source too (both set
 * SO_REUSEPORT): the proxy serves neither from it. */
#define EGR_DNS_CLIENT_SHARED 1

struct egr_dns_client_val {
	__u64 cookie;     /* the recording socket (bpf_get_socket_cookie) */
	__u32 sandbox_id; /* whose socket it is */
	__u32 flags;      /* EGR_DNS_CLIENT_* */
};

/* Socket storage of a recorded client socket: what to delete at release. */
struct egr_dns_client_rec {
	struct egr_dns_client_key key[2]; /* [0] IPv4 packets, [1] IPv6 packets */
	__u8 has[2];
	__u8 pad[6];
};

/*
 * The kernel's bound on what one sandbox puts into the shared listeners'
 * queues (egr_dns_budget, docs/dns.md "Fairness"): a token bucket taken by
 * every datagram and every new TCP connection to the proxy, in
 * cgroup_skb/egress, before the packet is queued. egressd writes rate and
 * burst when it adds the sandbox; no entry denies (fail closed).
 */
struct egr_dns_budget {
	__u64 stamp_ns;  /* last refill, bpf_ktime_get_ns */
	__s64 tokens;
	__u64 dropped;   /* datagrams and connection attempts refused */
	__u32 rate;      /* tokens per second; 0 = no bound */
	__u32 burst;
};

/* Entries one sandbox may hold in egr_dns_senders (sockets talking to its
 * proxy at once); past it a new socket's DNS is dropped, that sandbox's
 * problem only. */
#define EGR_DNS_CLIENTS_PER_SB 4096

/* Value of egr_dests_n, per sandbox: its entries in egr_sb_dests and the
 * destinations that found no room (its cap, or the map full). */
struct egr_dests_count {
	__u64 entries;
	__u64 dropped;
};

#define EGR_DESTS_PER_SB 4096

/* Map sizes: one definition for the programs and for egressd, which sets
 * them at load (bpf_map__set_max_entries, user/egressd/kernel/bpfstate.c),
 * so these are the sizes in force. The programs' own copies must agree
 * (an identical redefinition); changing one changes the pinned layout. */
#define EGR_MAX_SANDBOXES 65536 /* every map keyed by sandbox or tenant id */
#define EGR_MAX_RULES (1u << 22) /* egr_allow4, egr_allow6 */
#define EGR_MAX_DESTS (1u << 20) /* egr_sb_dests, all sandboxes together */

/* A destination of suppressed denies (egr_deny_budget.top): direct-mapped,
 * a collision replaces the slot, so "top" is approximate. */
struct egr_deny_top {
	__u64 count;
	__u8 addr[16];  /* IPv4 in the first 4 bytes */
	__u16 port;     /* host order */
	__u8 family;
	__u8 protocol;
	__u32 pad;
};

#define EGR_DENY_TOP 4

/*
 * Value of egr_deny_budget, per sandbox: a token bucket for its deny events
 * (shared by all CPUs), and what did not get through: denies past the
 * budget (suppressed, reported by egressd as one aggregated event per
 * sandbox and interval) and events of any kind the ring had no room for.
 */
struct egr_deny_budget {
	__u64 last_ns;
	__s64 tokens;
	__u64 suppressed;
	__u64 lost;
	struct egr_deny_top top[EGR_DENY_TOP];
};

/*
 * egressd's own listeners: the DNS proxy's (shared by a network namespace)
 * and each inspected sandbox's inspecting proxy (docs/security.md "Redirect
 * targets"). egressd claims each listener socket it opens (user/egressd/
 * kernel/listen.c): its (network namespace, port, protocol, family) goes into
 * egr_listen_ports, which cgroup/bind4,6 and post_bind4,6 of every sandbox
 * consult to refuse a bind to that port, also while egressd is down (the
 * map is pinned); and the socket itself gets egr_listen_sk socket storage
 * (the mark), which only egressd can write. The redirects (DNS, inspect)
 * look up the socket a connect or packet to the proxy port would reach and
 * let it through only when that socket carries the mark of the right
 * listener: a socket anyone else bound there (egressd down, a process
 * outside every sandbox) is never reached.
 */
#define EGR_LISTEN_DNS     1 /* a DNS proxy listener (UDP or TCP), shared by a namespace */
#define EGR_LISTEN_INSPECT 2 /* an inspected sandbox's inspecting proxy listener */

struct egr_listen_key {
	__u64 netns_cookie; /* SO_NETNS_COOKIE of the listener, bpf_get_netns_cookie */
	__u16 port;         /* host order */
	__u8 protocol;      /* IPPROTO_TCP / IPPROTO_UDP */
	__u8 family;        /* of the listener: AF_INET / AF_INET6 */
	__u32 pad;
};

/* Value of egr_listen_ports and of egr_listen_sk (the mark). */
struct egr_listen_mark {
	__u64 gen;         /* the egressd start that claimed it last (the sweep's) */
	__u32 sandbox_id;  /* EGR_LISTEN_INSPECT: the sandbox it serves; DNS: 0 (shared) */
	__u16 port;        /* host order */
	__u8 kind;         /* EGR_LISTEN_* */
	__u8 protocol;
};

/* Listeners egr_listen_ports holds: 4 DNS listeners per network namespace
 * and 2 per inspected sandbox. */
#define EGR_MAX_LISTENERS (EGR_MAX_SANDBOXES * 4)

/* The sizes every map and event depend on (see the top of this file). */
_Static_assert(sizeof(struct egr_lpm4_key) == 12, "egr_lpm4_key is ABI");
_Static_assert(sizeof(struct egr_lpm6_key) == 24, "egr_lpm6_key is ABI");
_Static_assert(sizeof(struct egr_port_range) == 6, "egr_port_range is ABI");
_Static_assert(sizeof(struct egr_rule) == 64, "egr_rule is ABI");
_Static_assert(sizeof(struct egr_sandbox) == 48, "egr_sandbox is ABI");
_Static_assert(sizeof(struct egr_dns_orig) == 24, "egr_dns_orig is ABI");
_Static_assert(sizeof(struct egr_quota) == 40, "egr_quota is ABI");
_Static_assert(sizeof(struct egr_meter) == 128, "egr_meter is ABI");
_Static_assert(sizeof(struct egr_cg_ref) == 8, "egr_cg_ref is frozen forever");
_Static_assert(sizeof(struct egr_dest_key) == 24, "egr_dest_key is ABI");
_Static_assert(sizeof(struct egr_dest_val) == 32, "egr_dest_val is ABI");
_Static_assert(sizeof(struct egr_event) == 104, "egr_event is ABI");
_Static_assert(EGR_CNT_MAX == 14, "egr_counters' size is ABI: a new counter bumps EGR_ABI_VERSION");
_Static_assert(sizeof(struct egr_escape_event) == 128, "egr_escape_event is ABI");
_Static_assert(sizeof(struct egr_proc_home) == 16, "egr_proc_home is ABI (rebuilt, not carried, by migrate.c)");
_Static_assert(sizeof(struct egr_dns_client_key) == 24, "egr_dns_client_key is ABI");
_Static_assert(sizeof(struct egr_dns_client_val) == 16, "egr_dns_client_val is ABI");
_Static_assert(sizeof(struct egr_dns_budget) == 32, "egr_dns_budget is ABI");
_Static_assert(sizeof(struct egr_dns_client_rec) == 56, "egr_dns_client_rec is ABI");
_Static_assert(sizeof(struct egr_dests_count) == 16, "egr_dests_count is ABI");
_Static_assert(sizeof(struct egr_deny_top) == 32, "egr_deny_top is ABI");
_Static_assert(sizeof(struct egr_deny_budget) == 160, "egr_deny_budget is ABI");
_Static_assert(sizeof(struct egr_listen_key) == 16, "egr_listen_key is ABI");
_Static_assert(sizeof(struct egr_listen_mark) == 16, "egr_listen_mark is ABI");
#endif /* EGRESSD_H */
