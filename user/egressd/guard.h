/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Defends what egressd pinned against a root that can reach bpffs
 * (docs/security.md, row 2): when inotify says something was removed from a
 * pin directory, and every EGR_GUARD_FULL_EVERY seconds regardless (every
 * second without inotify), it makes every map and link pin it holds an fd
 * of exist again, and reports each one that was removed as a critical
 * `pin_removed` alert and audit record. A one-second tick reclaims detached
 * sandboxes whose cgroup the kernel has released.
 */
#ifndef EGR_GUARD_H
#define EGR_GUARD_H

#include <stdint.h>
#include <jansson.h>

#include "obs/auditlog.h"
#include "kernel/bpfstate.h"
#include "loop.h"
#include "sandbox.h"

#define EGR_GUARD_INTERVAL_MS 1000
#define EGR_GUARD_FULL_EVERY 10 /* ticks */

struct egr_guard;

int egr_guard_start(struct egr_guard **out, struct egr_loop *loop, struct egr_bpf *bpf,
		    struct egr_registry *reg, struct egr_auditlog *audit);
void egr_guard_free(struct egr_guard *g);
/* One check now (also what the timer does). */
void egr_guard_check(struct egr_guard *g);
/* {"pins_restored": N, "pin_restore_failures": N} */
json_t *egr_guard_status(const struct egr_guard *g);
/* /metrics: held cgroups by state, pins restored and failed (a
 * egr_metrics_source_fn; ctx is the guard). */
struct egr_mbuf;
void egr_guard_metrics(void *ctx, struct egr_mbuf *mb);

#endif /* EGR_GUARD_H */
