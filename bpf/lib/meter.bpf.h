/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Metering: per-CPU meters per sandbox and per tenant (docs/metering.md),
 * and bytes per real destination for the audit record (egr_sb_dests).
 */
#ifndef EGR_LIB_METER_BPF_H
#define EGR_LIB_METER_BPF_H

#include "maps.bpf.h"
#include "skb.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, EGR_MAX_SANDBOXES);
	__type(key, __u32);
	__type(value, struct egr_meter);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_meter_sb SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, EGR_MAX_SANDBOXES);
	__type(key, __u32);
	__type(value, struct egr_meter);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_meter_tenant SEC(".maps");

/* Not an LRU: one sandbox spraying destinations must not evict another's.
 * Each holds at most EGR_DESTS_PER_SB (egr_dests_n); 256 sandboxes at their
 * cap fill it, and then a new destination of anyone is counted dropped. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 20);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_dest_key);
	__type(value, struct egr_dest_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_sb_dests SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_SANDBOXES);
	__type(key, __u32);
	__type(value, struct egr_dests_count);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_dests_n SEC(".maps");

/* The meter of a sandbox or tenant, created on first use. */
static __always_inline struct egr_meter *egr_meter(void *map, __u32 id)
{
	static const struct egr_meter zero;
	struct egr_meter *m = bpf_map_lookup_elem(map, &id);

	if (m)
		return m;
	/* EEXIST from a racing CPU is fine: look it up again. */
	bpf_map_update_elem(map, &id, &zero, BPF_NOEXIST);
	m = bpf_map_lookup_elem(map, &id);
	if (!m)
		egr_count(EGR_CNT_METER_FULL);
	return m;
}

/* Offsets of the struct egr_meter fields a verdict counts in. */
#define METER_FIELD(f) (__builtin_offsetof(struct egr_meter, f) / sizeof(__u64))

static __always_inline void egr_meter_add(__u32 sandbox_id, __u32 tenant_id, __u32 field, __u64 n)
{
	struct egr_meter *m;

	m = egr_meter(&egr_meter_sb, sandbox_id);
	if (m && field < sizeof(*m) / sizeof(__u64))
		((__u64 *)m)[field] += n;
	m = egr_meter(&egr_meter_tenant, tenant_id);
	if (m && field < sizeof(*m) / sizeof(__u64))
		((__u64 *)m)[field] += n;
}

/* Bytes and packets of one packet, in one lookup per meter. */
static __always_inline void egr_meter_pkt(__u32 sandbox_id, __u32 tenant_id, int out, __u64 len)
{
	struct egr_meter *m;

	m = egr_meter(&egr_meter_sb, sandbox_id);
	if (m) {
		if (out) {
			m->bytes_out += len;
			m->pkts_out++;
		} else {
			m->bytes_in += len;
			m->pkts_in++;
		}
	}
	m = egr_meter(&egr_meter_tenant, tenant_id);
	if (m) {
		if (out) {
			m->bytes_out += len;
			m->pkts_out++;
		} else {
			m->bytes_in += len;
			m->pkts_in++;
		}
	}
}

/* Bytes per real destination, for the audit record of the execution. */
static __always_inline void egr_note_dest(__u32 sandbox_id, const struct egr_l3 *l3, __u32 len,
					  __u64 now)
{
	struct egr_dest_key key = {
		.sandbox_id = sandbox_id,
		.port = l3->has_ports ? l3->dport : 0,
		.family = l3->family,
		.protocol = l3->protocol,
	};
	struct egr_dest_val *v, init = { .first_ns = now };
	struct egr_dests_count *cnt, zero = {};
	long err;

	__builtin_memcpy(key.addr, l3->daddr, sizeof(key.addr));
	v = bpf_map_lookup_elem(&egr_sb_dests, &key);
	if (!v) {
		cnt = bpf_map_lookup_elem(&egr_dests_n, &sandbox_id);
		if (!cnt) {
			bpf_map_update_elem(&egr_dests_n, &sandbox_id, &zero, BPF_NOEXIST);
			cnt = bpf_map_lookup_elem(&egr_dests_n, &sandbox_id);
			if (!cnt)
				return; /* no room to count: egressd sees no count entry */
		}
		/* Racing CPUs may each pass the cap check once: a few over. */
		if (cnt->entries >= EGR_DESTS_PER_SB) {
			__sync_fetch_and_add(&cnt->dropped, 1);
			return;
		}
		err = bpf_map_update_elem(&egr_sb_dests, &key, &init, BPF_NOEXIST);
		if (err == 0)
			__sync_fetch_and_add(&cnt->entries, 1);
		v = bpf_map_lookup_elem(&egr_sb_dests, &key);
		if (!v) {
			__sync_fetch_and_add(&cnt->dropped, 1);
			return;
		}
	}
	__sync_fetch_and_add(&v->bytes_out, len);
	__sync_fetch_and_add(&v->pkts_out, 1);
	v->last_ns = now;
}

#endif /* EGR_LIB_METER_BPF_H */
