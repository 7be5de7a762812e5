// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The decisions of bpf/lib/, compiled into a program BPF_PROG_TEST_RUN can
 * run here (cgroup_skb; sock_addr programs cannot be test-run), against the
 * very maps egressd's object declares: tests/bpf/test_bpf.c fills them,
 * writes one case into egr_t_cases and reads what the decision said from
 * egr_t_out. Nothing here decides on its own: every verdict comes from the
 * lib function named in the case's op.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "egressd.h"
#include "egr_decide.h"
#include "egr_reasons.h"
#include "lib/maps.bpf.h"
#include "lib/sandbox.bpf.h"
#include "lib/skb.bpf.h"
#include "lib/allow.bpf.h"
#include "lib/quota.bpf.h"
#include "lib/sockaddr.bpf.h"
#include "egr_test.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct egr_t_case);
} egr_t_cases SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct egr_t_out);
} egr_t_out SEC(".maps");

static __always_inline int egr_t_backstop(struct __sk_buff *skb, const struct egr_t_case *c,
					  struct egr_t_out *o)
{
	const struct egr_sandbox *sb = egr_sandbox_of(c->sandbox_id);
	struct egr_l3 l3 = {};
	struct egr_sock_view sv = {};

	if (egr_parse_l3(skb, &l3))
		return EGR_R_DENY_NOT_IP;
	o->parsed = 1;
	o->dport = l3.dport;
	o->has_ports = l3.has_ports;
	if (!sb)
		return EGR_R_DENY_NO_SANDBOX;
	if (c->real_sk) {
		egr_sock_view_of(skb, l3.family, &sv);
	} else {
		__builtin_memcpy(sv.dst, c->sk_dst, sizeof(sv.dst));
		sv.kind = c->sk_kind;
		sv.family = c->sk_family;
		sv.type = c->sk_type;
		sv.protocol = c->sk_protocol;
		sv.state = c->sk_state;
		sv.dport = c->sk_dport;
	}
	return egr_backstop(sb, &l3, &sv);
}

static __always_inline __u32 egr_t_budget(const struct egr_t_case *c)
{
	__u32 taken = 0, n = c->count;

	for (int i = 0; i < EGR_T_MAX_TAKES; i++) {
		if (i >= n)
			break;
		taken += egr_deny_budget_take(c->sandbox_id, EGR_AF_INET, EGR_IPPROTO_TCP, c->port,
					      c->daddr);
	}
	return taken;
}

SEC("cgroup_skb/egress")
int egr_t_run(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct egr_t_case *c = bpf_map_lookup_elem(&egr_t_cases, &zero);
	struct egr_t_out *o = bpf_map_lookup_elem(&egr_t_out, &zero);

	if (!c || !o)
		return 1;
	o->runs++;
	switch (c->op) {
	case EGR_T_BACKSTOP:
		o->reason = egr_t_backstop(skb, c, o);
		break;
	case EGR_T_ADDR:
		o->reason = egr_addr_judge(egr_sandbox_of(c->sandbox_id), c->v6 ? 1 : 0, c->daddr,
					   c->port, c->protocol, c->peer, c->peer_err);
		break;
	case EGR_T_QUOTA: {
		const struct egr_sandbox *sb = egr_sandbox_of(c->sandbox_id);

		o->reason = sb ? egr_quota_egress(sb, c->sandbox_id, c->len, c->now)
			       : EGR_R_DENY_NO_SANDBOX;
		break;
	}
	case EGR_T_BUDGET:
		o->taken = egr_t_budget(c);
		o->reason = EGR_R_NONE;
		break;
	case EGR_T_METER:
		egr_meter_pkt(c->sandbox_id, 1, 1, c->len);
		o->reason = EGR_R_NONE;
		break;
	case EGR_T_DEST: {
		struct egr_l3 l3 = { .family = EGR_AF_INET, .protocol = EGR_IPPROTO_TCP,
				     .dport = c->port, .has_ports = 1 };

		l3.daddr[0] = c->daddr[0];
		egr_note_dest(c->sandbox_id, &l3, (__u32)c->len, c->now);
		o->reason = EGR_R_NONE;
		break;
	}
	default:
		o->reason = EGR_R_NONE;
	}
	return 1;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
