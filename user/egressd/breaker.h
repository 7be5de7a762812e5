/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The circuit breaker (docs/policy.md "network.breaker"): every interval it
 * reads the kernel's per-sandbox deny counters (connect, datagram, socket,
 * backstop) and the DNS proxy's refusals of each sandbox that has a breaker
 * (its policy's, else egressd's --breaker default), and quarantines a
 * sandbox whose denies within window_s exceed max_denies: one update of its
 * kernel entry (egr_reg_set_quarantine), its connections destroyed, a
 * critical sandbox_quarantined alert and a "quarantine" audit record.
 * Counting happens in the kernel, so a flood cannot outrun it; the cost per
 * interval is one meter lookup per sandbox with a breaker.
 */
#ifndef EGR_BREAKER_H
#define EGR_BREAKER_H

#include <stdint.h>
#include <jansson.h>

#include "loop.h"
#include "sandbox.h"

/* Window resolution: denies are compared with the counters of the oldest
 * sample still inside the window; a sample is kept every window / this. */
#define EGR_BREAKER_SAMPLES 64
#define EGR_BREAKER_DEFAULT_INTERVAL_MS 200

struct egr_breaker;
struct egr_dnsproxy;
struct egr_alerting;
struct egr_auditlog;
struct egr_metrics;

struct egr_breaker_opts {
	uint32_t max_denies; /* --breaker default for policies without one; 0 = none */
	uint32_t window_s;
	uint32_t interval_ms; /* 0: EGR_BREAKER_DEFAULT_INTERVAL_MS */
};

int egr_breaker_new(struct egr_breaker **out, const struct egr_breaker_opts *o,
		    struct egr_registry *reg, struct egr_dnsproxy *dns, struct egr_loop *loop);
void egr_breaker_free(struct egr_breaker *b);
void egr_breaker_set_sinks(struct egr_breaker *b, struct egr_alerting *alerting,
			   struct egr_auditlog *audit);
/* /metrics: egressd_sandbox_quarantined, egressd_breaker_trips_total. */
int egr_breaker_add_metrics(struct egr_breaker *b, struct egr_metrics *m);
/* One pass now (the timer calls it; tests and the release op too). */
void egr_breaker_check(struct egr_breaker *b);
/* Lift sb's quarantine (the "release" control op): kernel entry, audit
 * record, and a fresh window so that old denies do not trip it again.
 * 0 or -errno with f filled. */
int egr_breaker_release(struct egr_breaker *b, struct egr_sb *sb, struct egr_fail *f);
/* {"default":{...}|null,"interval_ms","trips","quarantined"} for status. */
json_t *egr_breaker_status(const struct egr_breaker *b);

#endif /* EGR_BREAKER_H */
