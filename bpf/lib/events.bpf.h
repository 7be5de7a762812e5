/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Events to egressd through the egr_events ring: every deny within the
 * sandbox's deny budget (past it counted and aggregated), allows sampled
 * per CPU. A full ring is counted, never silent.
 */
#ifndef EGR_LIB_EVENTS_BPF_H
#define EGR_LIB_EVENTS_BPF_H

#include "maps.bpf.h"
#include "meter.bpf.h"
#include "skb.bpf.h"

/* Sampled allow events: at most this many per second and CPU (burst the
 * same). Set by egressd between open and load. */
const volatile __u64 egr_allow_events_per_s = 20;
/* Deny events per second and sandbox (burst: egr_deny_events_burst); past
 * it a sandbox's denies are counted, not reported one by one. */
const volatile __u64 egr_deny_events_per_s = 100;
const volatile __u64 egr_deny_events_burst = 200;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct egr_bucket);
} egr_allow_bucket SEC(".maps");

/* Per-sandbox deny-event budgets and losses (include/egressd.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_SANDBOXES);
	__type(key, __u32);
	__type(value, struct egr_deny_budget);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_deny_budget SEC(".maps");

/* The deny budget of a sandbox, created full on first use. */
static __always_inline struct egr_deny_budget *egr_budget_of(__u32 sandbox_id, __u64 now)
{
	struct egr_deny_budget *b, init = {};

	if (sandbox_id == EGR_ID_NONE)
		return NULL;
	b = bpf_map_lookup_elem(&egr_deny_budget, &sandbox_id);
	if (b)
		return b;
	init.last_ns = now;
	init.tokens = (__s64)egr_deny_events_burst;
	bpf_map_update_elem(&egr_deny_budget, &sandbox_id, &init, BPF_NOEXIST);
	return bpf_map_lookup_elem(&egr_deny_budget, &sandbox_id);
}

/*
 * May this sandbox report one more deny? Its bucket refills at
 * egr_deny_events_per_s up to the burst (the refill is not atomic: racing
 * CPUs may lose a token, never create one); the take is atomic. Past it,
 * the deny is counted as suppressed and its destination noted, for the
 * aggregated event egressd emits. No budget entry (map full): report.
 */
static __always_inline int egr_deny_budget_take(__u32 sandbox_id, __u32 family, __u32 protocol,
						__u16 port, const __u32 addr[4])
{
	__u64 now = bpf_ktime_get_boot_ns(), step;
	struct egr_deny_budget *b = egr_budget_of(sandbox_id, now);
	struct egr_deny_top *t;
	__u32 slot, have[4];
	__s64 old;

	if (!b || !egr_deny_events_per_s)
		return 1; /* no entry (map full), or no budget configured: report */
	step = 1000000000ull / egr_deny_events_per_s;
	if (now > b->last_ns && now - b->last_ns >= step) {
		__s64 add = (__s64)((now - b->last_ns) / step), tok = b->tokens;

		b->tokens = tok + add > (__s64)egr_deny_events_burst ?
				    (__s64)egr_deny_events_burst : tok + add;
		b->last_ns = now;
	}
	old = __sync_fetch_and_add(&b->tokens, -1);
	if (old > 0)
		return 1;
	__sync_fetch_and_add(&b->tokens, 1);
	__sync_fetch_and_add(&b->suppressed, 1);
	if (!addr)
		return 0;
	slot = (addr[0] ^ addr[3] ^ port) & (EGR_DENY_TOP - 1);
	t = &b->top[slot];
	__builtin_memcpy(have, t->addr, sizeof(have));
	if (t->port == port && t->family == family && t->protocol == protocol &&
	    have[0] == addr[0] && have[1] == addr[1] && have[2] == addr[2] && have[3] == addr[3]) {
		__sync_fetch_and_add(&t->count, 1);
		return 0;
	}
	/* Replace the slot (racy between CPUs: "top" is approximate). */
	__builtin_memcpy(t->addr, addr, 16);
	t->port = port;
	t->family = (__u8)family;
	t->protocol = (__u8)protocol;
	t->count = 1;
	return 0;
}

static __always_inline struct egr_event *egr_event_new(__u32 type, __u32 sandbox_id,
						       const struct egr_sandbox *sb, int task)
{
	struct egr_event *e = bpf_ringbuf_reserve(&egr_events, sizeof(*e), 0);

	if (!e) {
		struct egr_deny_budget *b = egr_budget_of(sandbox_id, bpf_ktime_get_boot_ns());

		egr_count(EGR_CNT_EVENTS_LOST);
		/* Whose event it was: attributed in the stream and the audit. */
		if (b)
			__sync_fetch_and_add(&b->lost, 1);
		return NULL;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ts_ns = bpf_ktime_get_boot_ns();
	e->version = EGR_EVENT_VERSION;
	e->type = type;
	e->sandbox_id = sandbox_id;
	if (sb) {
		e->tenant_id = sb->tenant_id;
		e->policy_id = sb->policy_id;
	}
	if (task) {
		e->pid = bpf_get_current_pid_tgid() >> 32;
		e->cgroup_id = bpf_get_current_cgroup_id();
		bpf_get_current_comm(e->comm, sizeof(e->comm));
	}
	return e;
}

/* Every deny is reported; allows only within the per-CPU sample budget. */
static __always_inline int egr_should_report(int verdict)
{
	__u32 zero = 0;
	struct egr_bucket *b;

	if (verdict != EGR_ALLOW)
		return 1;
	b = bpf_map_lookup_elem(&egr_allow_bucket, &zero);
	return b && egr_bucket_take(b, bpf_ktime_get_boot_ns(), egr_allow_events_per_s,
				    egr_allow_events_per_s);
}

static __always_inline void egr_report_skb(__u32 type, __u32 sandbox_id,
					   const struct egr_sandbox *sb, const struct egr_l3 *l3,
					   int inbound, __u32 verdict)
{
	struct egr_event *e;

	/* Audited packets are already sampled (egr_should_report). */
	if (verdict == EGR_DENY &&
	    !egr_deny_budget_take(sandbox_id, l3->family, l3->protocol,
				  inbound ? l3->sport : l3->dport, inbound ? l3->saddr : l3->daddr))
		return;
	e = egr_event_new(type, sandbox_id, sb, 0);
	if (!e)
		return;
	e->verdict = verdict;
	e->family = l3->family;
	e->protocol = l3->protocol;
	e->port = inbound ? l3->sport : l3->dport;
	__builtin_memcpy(e->addr, inbound ? l3->saddr : l3->daddr, 16);
	bpf_ringbuf_submit(e, 0);
}

static __always_inline void egr_report_refusal(__u32 type, __u32 sandbox_id,
					       const struct egr_sandbox *sb, __u32 family,
					       __u32 sock_type, __u32 protocol, int level,
					       int optname, int audited)
{
	struct egr_event *e;

	if (sb)
		egr_meter_add(sandbox_id, sb->tenant_id,
			      audited ? METER_FIELD(would_deny_sock) : METER_FIELD(sock_denied), 1);
	if (!egr_deny_budget_take(sandbox_id, family, protocol, 0, NULL))
		return;
	e = egr_event_new(type, sandbox_id, sb, 1);
	if (!e)
		return;
	e->verdict = audited ? EGR_VERDICT_AUDIT : EGR_DENY;
	e->family = family;
	e->sock_type = sock_type;
	e->protocol = protocol;
	e->level = level;
	e->optname = optname;
	bpf_ringbuf_submit(e, 0);
}

#endif /* EGR_LIB_EVENTS_BPF_H */
