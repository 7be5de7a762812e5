/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Egress quotas per sandbox and per tenant (struct egr_quota): charged on
 * every egress packet the backstop let through, windows restarted lazily.
 */
#ifndef EGR_LIB_QUOTA_BPF_H
#define EGR_LIB_QUOTA_BPF_H

#include "egr_reasons.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_SANDBOXES);
	__type(key, __u32);
	__type(value, struct egr_quota);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_quota_sb SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_SANDBOXES);
	__type(key, __u32);
	__type(value, struct egr_quota);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_quota_tenant SEC(".maps");

/* Charge len bytes at now to the quota of id in map. No entry or no limit:
 * EGR_R_ALLOW_QUOTA. The packet that crossed the limit is
 * EGR_R_DENY_QUOTA_FIRST (reported once per window), later ones
 * EGR_R_DENY_QUOTA. */
static __always_inline int egr_charge_quota(void *map, __u32 id, __u64 len, __u64 now)
{
	struct egr_quota *q = bpf_map_lookup_elem(map, &id);
	__u64 before;
	int first_over, verdict;

	if (!q || !q->limit_bytes)
		return EGR_R_ALLOW_QUOTA;
	if (q->window_ns && now - q->window_start_ns >= q->window_ns) {
		/* Racy across CPUs by at most a few packets per window edge. */
		q->window_start_ns = now;
		q->bytes = 0;
	}
	before = __sync_fetch_and_add(&q->bytes, len);
	verdict = egr_quota_verdict(q->limit_bytes, before, len, &first_over);
	if (first_over)
		__sync_fetch_and_add(&q->exceeded, 1);
	if (verdict == EGR_ALLOW)
		return EGR_R_ALLOW_QUOTA;
	return first_over ? EGR_R_DENY_QUOTA_FIRST : EGR_R_DENY_QUOTA;
}

/* The sandbox's quota, then its tenant's. The sandbox's quota entry exists
 * only when its policy sets one, and the sandbox entry carries that limit
 * (egressd writes both): no limit, no lookup. The tenant's quota can come
 * from any sandbox of the tenant, so it is looked up unless the entry says
 * the tenant has none (EGR_SB_TENANT_NO_QUOTA, which egressd clears on all
 * the tenant's entries before it writes a tenant quota; without the flag,
 * the lookup). */
static __always_inline int egr_quota_egress(const struct egr_sandbox *sb, __u32 sandbox_id,
					    __u64 len, __u64 now)
{
	int r = sb->quota_bytes ? egr_charge_quota(&egr_quota_sb, sandbox_id, len, now)
				: EGR_R_ALLOW_QUOTA;

	if (r == EGR_R_ALLOW_QUOTA && !(sb->flags & EGR_SB_TENANT_NO_QUOTA))
		r = egr_charge_quota(&egr_quota_tenant, sb->tenant_id, len, now);
	return r;
}

#endif /* EGR_LIB_QUOTA_BPF_H */
