/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Where the inspecting proxy finds the original destination of a
 * connection it accepts (docs/inspect.md), under the client's address and
 * port as the proxy sees them: published by cgroup_skb/egress for cgroup
 * sandboxes (inspect.bpf.h) and by the device programs' ingress for device
 * sandboxes (bpf/netdev.bpf.c). One pinned map for both, so the proxy has
 * one lookup.
 */
#ifndef EGR_LIB_INSPECT_ORIG_BPF_H
#define EGR_LIB_INSPECT_ORIG_BPF_H

#include "egressd.h"

/* Original destinations of inspected connections, for the proxy to take
 * (and delete) when it accepts them. LRU: an entry the proxy never took (the
 * client gave up before accept) is forgotten, never leaked. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, struct egr_inspect_key);
	__type(value, struct egr_inspect_orig);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_inspect_orig SEC(".maps");

#endif /* EGR_LIB_INSPECT_ORIG_BPF_H */
