// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * egressd's cgroup programs: the SEC() entry points only. Each builds its
 * context (the sandbox from cgroup storage, the destination, the packet and
 * its socket), calls the decisions of bpf/lib/ (which return an enum
 * egr_reason, include/egr_reasons.h), maps the reason to the hook's verdict
 * and accounts for it. docs/architecture.md says which header holds what.
 *
 * They are loaded once and attached to every sandbox cgroup through BPF
 * links; each attachment learns which sandbox it serves from cgroup storage
 * (keyed by the cgroup it is attached to), never from the current task:
 * sock_addr hooks also run from kernel workers (MPTCP subflows) and
 * cgroup_skb hooks in softirq context.
 *
 * Every path that cannot prove an allow denies: no storage value, no sandbox
 * entry, no matching prefix, an expired prefix.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_tracing.h>

#include "egressd.h"
#include "egr_decide.h"
#include "egr_reasons.h"
#include "lib/maps.bpf.h"
#include "lib/sandbox.bpf.h"
#include "lib/skb.bpf.h"
#include "lib/meter.bpf.h"
#include "lib/events.bpf.h"
#include "lib/dns.bpf.h"
#include "lib/allow.bpf.h"
#include "lib/inspect.bpf.h"
#include "lib/listen.bpf.h"
#include "lib/quota.bpf.h"
#include "lib/sockaddr.bpf.h"

/* --- sock_addr: connect and unconnected sendmsg ---------------------------------- */

static __always_inline int egr_sock_addr(struct bpf_sock_addr *ctx, int v6, enum egr_hook hook)
{
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	const struct egr_sandbox *sb;
	__u32 sandbox_id = 0, daddr[4] = {};
	int reason, verdict, audited, auditable, peer = 0, peer_err = 0;

	if (v6) {
		/* The context only allows 4-byte loads of user_ip6. */
		daddr[0] = ctx->user_ip6[0];
		daddr[1] = ctx->user_ip6[1];
		daddr[2] = ctx->user_ip6[2];
		daddr[3] = ctx->user_ip6[3];
	} else {
		daddr[0] = ctx->user_ip4;
	}

	if (hook == EGR_HOOK_SENDMSG && port == 0) {
		peer = 1;
		peer_err = egr_connected_peer(ctx, v6, daddr, &port);
	} else if (v6 ? egr_ip6_unspec_to_loopback(daddr) : egr_ip4_unspec_to_loopback(&daddr[0])) {
		/* 0.0.0.0 / :: : judge, and connect to, the loopback. */
		if (v6) {
			ctx->user_ip6[0] = daddr[0];
			ctx->user_ip6[1] = daddr[1];
			ctx->user_ip6[2] = daddr[2];
			ctx->user_ip6[3] = daddr[3];
		} else {
			ctx->user_ip4 = daddr[0];
		}
	}

	sb = egr_current_sandbox(&sandbox_id);
	if (!sb)
		egr_count(EGR_CNT_NO_SANDBOX);
	reason = egr_addr_judge(sb, v6, daddr, port, ctx->protocol, peer, peer_err);
	/* DNS decisions are not the allowlist's: audit mode does not open
	 * DNS without a proxy (fail closed). */
	auditable = reason != EGR_R_ALLOW_DNS_REDIRECT && reason != EGR_R_DENY_NO_DNS_PROXY;
	/* sb is set for every allow reason; tested again for the verifier. */
	if (sb && reason == EGR_R_ALLOW_DNS_REDIRECT)
		reason = egr_redirect_dns(ctx, sb, v6, daddr);
	else if (sb && reason == EGR_R_ALLOW_RULE && !peer && (sb->flags & EGR_SB_INSPECT))
		reason = egr_inspect_redirect(ctx, sandbox_id, sb, v6, daddr, port);
	verdict = egr_apply_mode(sb, egr_reason_verdict(reason), auditable, &audited);
	egr_account_addr(hook, sandbox_id, sb, v6, daddr, port, ctx->protocol, ctx->type, verdict,
			 audited);
	return verdict;
}

/* TCP connect (and TCP Fast Open, which goes through the same path),
 * connected UDP, and connect on ping sockets. */
SEC("cgroup/connect4")
int egr_connect4(struct bpf_sock_addr *ctx)
{
	return egr_sock_addr(ctx, 0, EGR_HOOK_CONNECT);
}

SEC("cgroup/connect6")
int egr_connect6(struct bpf_sock_addr *ctx)
{
	return egr_sock_addr(ctx, 1, EGR_HOOK_CONNECT);
}

/* Unconnected UDP: every sendto/sendmsg/sendmmsg datagram. A v6 socket
 * sending to a mapped address runs sendmsg4, not sendmsg6. */
SEC("cgroup/sendmsg4")
int egr_sendmsg4(struct bpf_sock_addr *ctx)
{
	return egr_sock_addr(ctx, 0, EGR_HOOK_SENDMSG);
}

SEC("cgroup/sendmsg6")
int egr_sendmsg6(struct bpf_sock_addr *ctx)
{
	return egr_sock_addr(ctx, 1, EGR_HOOK_SENDMSG);
}

/* Replies of the DNS proxy show the resolver the stub asked (dns.bpf.h).
 * These hooks can change the address but never refuse. */
SEC("cgroup/recvmsg4")
int egr_recvmsg4(struct bpf_sock_addr *ctx)
{
	__u32 sandbox_id = 0;

	return egr_restore_resolver4(ctx, egr_current_sandbox(&sandbox_id));
}

SEC("cgroup/recvmsg6")
int egr_recvmsg6(struct bpf_sock_addr *ctx)
{
	__u32 sandbox_id = 0;

	return egr_restore_resolver6(ctx, egr_current_sandbox(&sandbox_id));
}

/* getpeername() names where an inspected or redirected socket meant to go.
 * One sandbox lookup for both questions. */
SEC("cgroup/getpeername4")
int egr_getpeername4(struct bpf_sock_addr *ctx)
{
	__u32 sandbox_id = 0;
	const struct egr_sandbox *sb = egr_current_sandbox(&sandbox_id);

	if (egr_restore_inspected(ctx, sb, 0))
		return 1;
	return egr_restore_resolver4(ctx, sb);
}

SEC("cgroup/getpeername6")
int egr_getpeername6(struct bpf_sock_addr *ctx)
{
	__u32 sandbox_id = 0;
	const struct egr_sandbox *sb = egr_current_sandbox(&sandbox_id);

	if (egr_restore_inspected(ctx, sb, 1))
		return 1;
	return egr_restore_resolver6(ctx, sb);
}

/* --- bind: egressd's listener ports are nobody else's --------------------------- */

/*
 * A bind to a port one of egressd's listeners holds in this network
 * namespace (egr_listen_ports, listen.bpf.h) is refused, whatever the
 * address and the policy (also in audit mode: it is not the sandbox's own
 * egress), and also while egressd is down, when the port is free: the
 * moment a neighbour would take the proxy's place. bind4/6 judge the port
 * asked for; post_bind4/6 the port the kernel chose for bind(port 0).
 */
static __always_inline int egr_bind_refuse(void *ctx, __u64 netns, __u32 family, __u32 type,
					   __u32 proto, const __u32 addr[4], __u16 port)
{
	__u32 sandbox_id = 0;
	const struct egr_sandbox *sb;
	struct egr_event *e;

	if (!egr_listen_reserved(netns, port))
		return 1;
	sb = egr_current_sandbox(&sandbox_id);
	if (sb)
		egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(sock_denied), 1);
	if (!egr_deny_budget_take(sandbox_id, family, proto, port, addr))
		return 0;
	e = egr_event_new(EGR_EV_BIND, sandbox_id, sb, 1);
	if (!e)
		return 0;
	e->verdict = EGR_DENY;
	e->family = family;
	e->sock_type = type;
	e->protocol = proto;
	e->port = port;
	__builtin_memcpy(e->addr, addr, family == EGR_AF_INET6 ? 16 : 4);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("cgroup/bind4")
int egr_bind4(struct bpf_sock_addr *ctx)
{
	__u32 addr[4] = { ctx->user_ip4 };

	return egr_bind_refuse(ctx, bpf_get_netns_cookie(ctx), EGR_AF_INET, ctx->type,
			       ctx->protocol, addr, bpf_ntohs((__u16)ctx->user_port));
}

SEC("cgroup/bind6")
int egr_bind6(struct bpf_sock_addr *ctx)
{
	__u32 addr[4] = { ctx->user_ip6[0], ctx->user_ip6[1], ctx->user_ip6[2], ctx->user_ip6[3] };

	return egr_bind_refuse(ctx, bpf_get_netns_cookie(ctx), EGR_AF_INET6, ctx->type,
			       ctx->protocol, addr, bpf_ntohs((__u16)ctx->user_port));
}

SEC("cgroup/post_bind4")
int egr_post_bind4(struct bpf_sock *sk)
{
	__u32 addr[4] = { sk->src_ip4 };

	return egr_bind_refuse(sk, bpf_get_netns_cookie(sk), EGR_AF_INET, sk->type, sk->protocol,
			       addr, (__u16)sk->src_port);
}

SEC("cgroup/post_bind6")
int egr_post_bind6(struct bpf_sock *sk)
{
	__u32 addr[4] = { sk->src_ip6[0], sk->src_ip6[1], sk->src_ip6[2], sk->src_ip6[3] };

	return egr_bind_refuse(sk, bpf_get_netns_cookie(sk), EGR_AF_INET6, sk->type, sk->protocol,
			       addr, (__u16)sk->src_port);
}

/* --- sock_create and setsockopt ------------------------------------------------ */

/*
 * Inet sockets a sandbox made (key: sandbox id; value: how many this hook
 * let through). No entry: none. egressd's detach skips its sock_diag walk
 * for a sandbox it made fresh and that has no entry here (docs/security.md,
 * the detach row): the hook runs for every inet socket a task creates
 * (inet_create and inet6_create; accept()ed sockets inherit a counted
 * listener's cgroup), so an entry missing is no socket. An entry this hook
 * cannot make refuses the socket. Deleted when the sandbox's entry goes.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_SANDBOXES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_sock_counts SEC(".maps");

/* Count one more socket of the sandbox: 0, or -1 when it cannot be counted. */
static __always_inline int egr_count_socket(__u32 sandbox_id)
{
	__u64 one = 1, *n = bpf_map_lookup_elem(&egr_sock_counts, &sandbox_id);

	if (n) {
		__sync_fetch_and_add(n, 1);
		return 0;
	}
	if (bpf_map_update_elem(&egr_sock_counts, &sandbox_id, &one, BPF_NOEXIST) == 0)
		return 0;
	/* Another CPU made it first (EEXIST), or the map is full. */
	n = bpf_map_lookup_elem(&egr_sock_counts, &sandbox_id);
	if (!n)
		return -1;
	__sync_fetch_and_add(n, 1);
	return 0;
}

/* Inet sockets the sock_addr hooks do not (fully) see: raw, UDP-Lite, SCTP,
 * ping. Only a policy that names them gets them. Every socket let through is
 * counted (egr_sock_counts); one that cannot be is refused. */
SEC("cgroup/sock_create")
int egr_sock_create(struct bpf_sock *sk)
{
	__u32 sandbox_id = 0, family = sk->family, type = sk->type, proto = sk->protocol;
	const struct egr_sandbox *sb = egr_current_sandbox(&sandbox_id);
	int verdict, audited = 0;

	if (!sb) {
		egr_count(EGR_CNT_NO_SANDBOX);
		verdict = EGR_DENY;
	} else {
		verdict = egr_sock_create_allows(sb->flags, family, type, proto);
		verdict = egr_apply_mode(sb, verdict, 1, &audited);
		if (verdict == EGR_ALLOW && egr_count_socket(sandbox_id))
			verdict = EGR_DENY; /* fail closed: an uncounted socket */
	}
	egr_count(verdict == EGR_ALLOW ? EGR_CNT_SOCK_CREATE_ALLOW : EGR_CNT_SOCK_CREATE_DENY);
	if (verdict != EGR_ALLOW || audited)
		egr_report_refusal(EGR_EV_SOCK_CREATE, sandbox_id, sb, family, type, proto, 0, 0,
				   audited);
	return verdict;
}

/* Source routing makes the packet go to a first hop the connect/sendmsg
 * hooks never judged (they see the final destination). Refuse the options
 * that set it; cmsg-borne routing headers are caught by the skb backstop. */
SEC("cgroup/setsockopt")
int egr_setsockopt(struct bpf_sockopt *ctx)
{
	int level = ctx->level, optname = ctx->optname, verdict, audited = 0;
	const struct egr_sandbox *sb;
	__u32 sandbox_id = 0;

	/* Leave optval and optlen alone: the kernel then uses the caller's
	 * buffer as is, whatever its size. The verdict depends on the option
	 * alone (a quarantine does not refuse options: its connects and
	 * packets are), so the sandbox is looked up only for a refused one:
	 * every socket sets a few options, and this keeps two map lookups off
	 * each. */
	if (egr_setsockopt_allows(level, optname) == EGR_ALLOW)
		return 1;
	sb = egr_current_sandbox(&sandbox_id);
	verdict = EGR_DENY;
	/* Options of sockets outside any sandbox entry stay refused; a
	 * sandbox's own go through its mode (audit lets them through). */
	if (sb)
		verdict = egr_apply_mode(sb, verdict, 1, &audited);
	if (verdict != EGR_ALLOW)
		egr_count(EGR_CNT_SETSOCKOPT_DENY);
	egr_report_refusal(EGR_EV_SETSOCKOPT, sandbox_id, sb, 0, 0, 0, level, optname, audited);
	return verdict == EGR_ALLOW ? 1 : 0;
}

/*
 * Every socket family, where the host can load it (BPF trampolines): the
 * layer that sees AF_PACKET, AF_XDP and AF_VSOCK for sandboxes whose
 * commands were not started by egressctl run (which applies seccomp).
 * egressd loads it only when its start-up probe says the host can
 * (bpfstate.c); elsewhere seccomp is the only layer for those families.
 */
SEC("lsm_cgroup/socket_create")
int BPF_PROG(egr_lsm_socket_create, int family, int type, int protocol, int kern)
{
	__u32 sandbox_id = 0;
	const struct egr_sandbox *sb = egr_current_sandbox(&sandbox_id);
	int verdict;

	if (!sb) {
		egr_count(EGR_CNT_NO_SANDBOX);
		return kern ? 1 : 0;
	}
	verdict = egr_family_allowed(sb->families, family, kern);
	if (verdict != EGR_ALLOW) {
		egr_count(EGR_CNT_SOCK_CREATE_DENY);
		egr_report_refusal(EGR_EV_SOCK_CREATE, sandbox_id, sb, (__u32)family, (__u32)type,
				   (__u32)protocol, 0, 0, 0);
	}
	return verdict;
}
/* A socket that asked the DNS proxy closes: its source may be anyone's
 * next, so the proxy must stop taking it for this sandbox. */
SEC("cgroup/sock_release")
int egr_sock_release(struct bpf_sock *sk)
{
	struct egr_dns_client_rec *rec = bpf_sk_storage_get(&egr_dns_sender_sk, sk, 0, 0);
	__u64 cookie;

	if (!rec)
		return 1;
	cookie = bpf_get_socket_cookie(sk);
	if (rec->has[0])
		egr_forget_dns_client(sk, &rec->key[0], cookie);
	if (rec->has[1])
		egr_forget_dns_client(sk, &rec->key[1], cookie);
	return 1;
}

/* --- cgroup_skb: metering, quotas, inbound deny, the backstop -------------------- */

SEC("cgroup_skb/egress")
int egr_skb_egress(struct __sk_buff *skb)
{
	struct egr_l3 l3 = {};
	struct egr_sock_view sv;
	const struct egr_sandbox *sb;
	__u32 sandbox_id = 0, len = skb->len;
	__u64 now;
	int reason, ip, verdict, audited;

	sb = egr_current_sandbox(&sandbox_id);
	if (!sb) {
		egr_count(EGR_CNT_NO_SANDBOX);
		return EGR_DENY;
	}
	/* Not IP: nothing egressd allows. */
	ip = egr_parse_l3(skb, &l3) == 0;
	if (ip) {
		egr_sock_view_of(skb, l3.family, &sv);
		reason = egr_backstop(sb, &l3, &sv);
	} else {
		reason = EGR_R_DENY_NOT_IP;
	}
	verdict = egr_apply_mode(sb, egr_reason_verdict(reason), 1, &audited);
	if (verdict != EGR_ALLOW) {
		egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(backstop_drops), 1);
		egr_count(EGR_CNT_BACKSTOP_DROP);
		if (ip)
			egr_report_skb(EGR_EV_BACKSTOP, sandbox_id, sb, &l3, 0, EGR_DENY);
		return EGR_DENY;
	}
	if (audited) {
		egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(would_deny_backstop), 1);
		/* Every datagram of an audited sendmsg would come here again:
		 * counted in full, reported within the allow sample budget. */
		if (ip && egr_should_report(EGR_ALLOW))
			egr_report_skb(EGR_EV_BACKSTOP, sandbox_id, sb, &l3, 0, EGR_VERDICT_AUDIT);
	}
	/* A datagram or SYN to a proxy port must reach egressd's own listener
	 * there, never a socket someone else holds on it (listen.bpf.h); not
	 * the allowlist's decision, so audit mode does not let it through. */
	if (ip && !egr_listen_egress_ok(skb, sandbox_id, &l3, &sv, egr_proxy_kind(sb, &l3))) {
		egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(backstop_drops), 1);
		egr_count(EGR_CNT_BACKSTOP_DROP);
		egr_report_skb(EGR_EV_BACKSTOP, sandbox_id, sb, &l3, 0, EGR_DENY);
		return EGR_DENY;
	}
	/* DNS to the proxy: over the sandbox's budget (counted there), or not
	 * from a socket of that source (a forged one: a backstop drop),
	 * dropped here (dns.bpf.h). */
	switch (egr_note_dns_client(skb, sandbox_id, sb, &l3)) {
	case 0:
		break;
	case 2:
		egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(backstop_drops), 1);
		egr_count(EGR_CNT_BACKSTOP_DROP);
		egr_report_skb(EGR_EV_BACKSTOP, sandbox_id, sb, &l3, 0, EGR_DENY);
		return EGR_DENY;
	default:
		return EGR_DENY;
	}

	now = bpf_ktime_get_boot_ns();
	reason = egr_quota_egress(sb, sandbox_id, len, now);
	if (reason != EGR_R_ALLOW_QUOTA) {
		egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(quota_drops), 1);
		egr_count(EGR_CNT_QUOTA_DROP);
		if (reason == EGR_R_DENY_QUOTA_FIRST)
			egr_report_skb(EGR_EV_QUOTA, sandbox_id, sb, &l3, 0, EGR_DENY);
		return EGR_DENY;
	}
	egr_meter_pkt(sandbox_id, sb->tenant_id, 1, len);
	if (!(sb->flags & EGR_SB_INSPECT) || !egr_inspect_publish(skb, sandbox_id, sb, &l3))
		egr_note_dest(sandbox_id, &l3, len, now);
	return EGR_ALLOW;
}

/*
 * Inbound deny: a packet to a listening TCP socket is a connection attempt
 * (SYN, or the ACK of a syncookie handshake): dropped. An unconnected UDP
 * socket accepts datagrams only from what its allowlist lets it talk to;
 * a connected one only ever gets its peer's. Replies on connections the
 * sandbox opened pass.
 */
SEC("cgroup_skb/ingress")
int egr_skb_ingress(struct __sk_buff *skb)
{
	struct egr_l3 l3 = {};
	const struct egr_sandbox *sb;
	struct bpf_sock *sk;
	__u32 sandbox_id = 0, len = skb->len;
	int reason = EGR_R_ALLOW_REPLY, verdict, audited;

	sb = egr_current_sandbox(&sandbox_id);
	if (!sb) {
		egr_count(EGR_CNT_NO_SANDBOX);
		return EGR_DENY;
	}
	sk = skb->sk;
	if (sk)
		sk = bpf_sk_fullsock(sk);
	/* The common case first, without parsing the packet: a reply on a TCP
	 * connection (not a listener) or on a connected UDP socket passes, as
	 * below; only listeners and unconnected UDP sockets need the headers.
	 * Not in quarantine: there every inbound packet is dropped, even on a
	 * connection the breaker's socket teardown has not reached yet. */
	if (sk && !sb->quarantined &&
	    ((sk->protocol == EGR_IPPROTO_TCP && sk->state != TCP_LISTEN) ||
	     (sk->protocol == EGR_IPPROTO_UDP && sk->dst_port)))
		goto pass;
	if (!(sb->flags & EGR_SB_INBOUND_ALLOW) && egr_parse_l3(skb, &l3) == 0) {
		if (sk && sk->protocol == EGR_IPPROTO_TCP && sk->state == TCP_LISTEN) {
			reason = EGR_R_DENY_INBOUND;
		} else if (sk && sk->protocol == EGR_IPPROTO_UDP && !sk->dst_port) {
			__u32 src[4];

			__builtin_memcpy(src, l3.saddr, sizeof(src));
			if (l3.family == EGR_AF_INET)
				reason = egr_is_proxy4(sb, src[0], l3.sport)
						 ? EGR_R_ALLOW_DNS_PROXY
						 : egr_decide4(sb, src[0], l3.sport, l3.protocol);
			else
				reason = egr_is_proxy6(sb, src, l3.sport)
						 ? EGR_R_ALLOW_DNS_PROXY
						 : egr_decide6(sb, src, l3.sport, l3.protocol);
		}
	}
	/* Inbound deny is not the egress allowlist: audit mode does not
	 * open it; a quarantine drops every inbound packet. */
	verdict = egr_apply_mode(sb, egr_reason_verdict(reason), 0, &audited);
	if (verdict != EGR_ALLOW) {
		egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(inbound_drops), 1);
		egr_count(EGR_CNT_INBOUND_DROP);
		egr_report_skb(EGR_EV_INBOUND, sandbox_id, sb, &l3, 1, EGR_DENY);
		return EGR_DENY;
	}
pass:
	egr_meter_pkt(sandbox_id, sb->tenant_id, 0, len);
	return EGR_ALLOW;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
