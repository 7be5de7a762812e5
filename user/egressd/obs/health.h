/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Is egressd healthy (docs/operations.md)? `egressctl status` exits
 * non-zero when not, so it serves as a liveness and readiness probe:
 * /metrics wanted but not served, no DNS proxy (sandboxes get no DNS),
 * the last billing export failed (the tenants' deltas wait for the next),
 * kernel events lost within the last minute, a map or a sandbox link no
 * longer pinned.
 */
#ifndef EGR_HEALTH_H
#define EGR_HEALTH_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

struct egr_billing;
struct egr_registry;
struct egr_metrics;

/* A loss counts as "rising" this long after it was first seen. */
#define EGR_HEALTH_LOSS_WINDOW_NS (60ull * 1000000000ull)

struct egr_health {
	struct egr_registry *reg;     /* its bpf and dns */
	struct egr_metrics *metrics;  /* NULL: none */
	bool metrics_wanted;          /* --metrics-addr was not "off" */
	const struct egr_billing *billing; /* NULL: no export */
	uint64_t lost_seen;           /* kernel events-lost counter, last look */
	uint64_t lost_rise_ns;        /* CLOCK_MONOTONIC when it last rose (0: never) */
	/* Every sandbox's links were pinned at these generations of the
	 * links (egr_bpf_links_gen) and of the registry: while both stand,
	 * the verdict holds without asking each sandbox again. */
	bool pins_all_ok;
	uint64_t pins_links_gen, pins_reg_gen;
};

/* Start counting event loss from now (what an earlier egressd lost is not
 * this one's problem). */
void egr_health_init(struct egr_health *h);
/* The problems as a JSON array of strings (empty: healthy); NULL on ENOMEM. */
json_t *egr_health_problems(struct egr_health *h);

#endif /* EGR_HEALTH_H */
