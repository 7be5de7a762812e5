/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Which sandbox a program instance serves: the cgroup storage of the cgroup
 * it is attached to names the sandbox id (written by egressd at attach),
 * egr_sandboxes holds its entry. Never the current task: sock_addr hooks
 * also run from kernel workers (MPTCP subflows) and cgroup_skb hooks in
 * softirq context.
 */
#ifndef EGR_LIB_SANDBOX_BPF_H
#define EGR_LIB_SANDBOX_BPF_H

#include "maps.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_STORAGE);
	/* A plain cgroup id key (not bpf_cgroup_storage_key) makes the storage
	 * shared by every egressd program attached to the same cgroup, so one
	 * write names the sandbox for all hooks. */
	__type(key, __u64);
	__type(value, struct egr_cg_ref);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_cg_storage SEC(".maps");

/* The entry of a sandbox id; NULL for EGR_ID_NONE or an id egressd
 * removed. The tests' programs, which have no cgroup storage value, start
 * here. */
static __always_inline const struct egr_sandbox *egr_sandbox_of(__u32 id)
{
	if (id == EGR_ID_NONE)
		return NULL;
	return bpf_map_lookup_elem(&egr_sandboxes, &id);
}

/* The sandbox of the cgroup this program instance is attached to. NULL when
 * egressd has not written the storage yet or the sandbox entry is gone: the
 * caller denies (EGR_R_DENY_NO_SANDBOX). */
static __always_inline const struct egr_sandbox *egr_current_sandbox(__u32 *sandbox_id)
{
	struct egr_cg_ref *ref = bpf_get_local_storage(&egr_cg_storage, 0);
	__u32 id;

	if (!ref)
		return NULL;
	id = ref->sandbox_id;
	if (id == EGR_ID_NONE)
		return NULL;
	*sandbox_id = id;
	return bpf_map_lookup_elem(&egr_sandboxes, &id);
}

#endif /* EGR_LIB_SANDBOX_BPF_H */
