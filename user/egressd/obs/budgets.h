/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The kernel's per-sandbox deny budgets (egr_deny_budget, docs/events.md):
 * what they held back and what the ring had no room for, published on the
 * bus as it grows (one "denies_suppressed" and one "lost_events" record per
 * sandbox and tick), and as /metrics families and audit figures.
 */
#ifndef EGR_BUDGETS_H
#define EGR_BUDGETS_H

#include <stdint.h>

#include "kernel/bpfstate.h"
#include "bus.h"
#include "mbuf.h"
#include "sandbox.h"

struct egr_budget_seen;

/* What was already published, per sandbox (only the growth is). */
struct egr_budgets {
	struct egr_budget_seen *seen;
};

/* Publish the growth since the last call; forget detached sandboxes. */
void egr_budgets_report(struct egr_budgets *b, struct egr_bpf *bpf, struct egr_bus *bus);
void egr_budgets_free(struct egr_budgets *b);

/* A sandbox's kernel events held back by its deny budget and lost for want
 * of ring room (its audit record). 0 or -errno. */
int egr_budget_figures(struct egr_bpf *bpf, uint32_t sandbox_id, uint64_t *suppressed,
		       uint64_t *lost);
/* egressd_events_suppressed_total and egressd_sandbox_events_lost_total,
 * labelled as the meter series are (tenant, sandbox). */
void egr_budgets_metrics(struct egr_bpf *bpf, struct egr_registry *reg, struct egr_mbuf *mb);

#endif /* EGR_BUDGETS_H */
