/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The maps more than one BPF object uses: egressd.bpf.c (the cgroup
 * programs) declares and pins them; escape.bpf.c (the migration guard)
 * declares the same from here and egressd hands it the very fds
 * (bpf_map__reuse_fd in user/egressd/escape.c), so both always share them.
 * Maps only the cgroup programs use live with their concern in the other
 * bpf/lib headers, so the guard's object never declares (or pins) them.
 */
#ifndef EGR_LIB_MAPS_BPF_H
#define EGR_LIB_MAPS_BPF_H

#define EGR_MAX_SANDBOXES 65536

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_SANDBOXES);
	__type(key, __u32);
	__type(value, struct egr_sandbox);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_sandboxes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EGR_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_events SEC(".maps");

/* Sandbox cgroup id -> sandbox id (include/egressd.h). A sandbox has one
 * cgroup, so the size is the sandboxes'. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_SANDBOXES);
	__type(key, __u64);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_sandbox_cgroups SEC(".maps");

/* tgid -> home. A hash, not task storage: raw tracepoint programs may use
 * task storage only on current, and a fork's child is not current. The
 * entry goes when the process's last thread exits. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_HOMED_PROCS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct egr_proc_home);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_proc_home SEC(".maps");

/* One more of a global counter (egr_counters, per CPU: no atomics). */
static __always_inline void egr_count(enum egr_counter c)
{
	__u32 key = c;
	__u64 *v = bpf_map_lookup_elem(&egr_counters, &key);

	if (v)
		*v += 1;
}

#endif /* EGR_LIB_MAPS_BPF_H */
