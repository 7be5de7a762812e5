/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The metering export for billing (docs/metering.md): every interval, one
 * JSON line per tenant with what its kernel meter counted since the last
 * exported values, appended to a file. The last exported cumulative values
 * are kept in <state-dir>/billing.state, and every line carries them too, so
 * that no interval is ever exported twice, across crashes and restarts.
 */
#ifndef EGR_BILLING_H
#define EGR_BILLING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loop.h"
#include "metrics.h"
#include "sandbox.h"

#define EGR_BILLING_DEFAULT_INTERVAL_S 60

struct egr_billing;

/* Open the export: read the state, repair the file's tail, and take over
 * whatever lines a crash left beyond the state. 0 or -errno. */
int egr_billing_new(struct egr_billing **out, struct egr_registry *reg, struct egr_metrics *m,
		    const char *file, const char *state_path, const uint8_t *key, size_t keylen,
		    bool legacy_ok);

/* After open: a state that failed its MAC, was missing while the file has
 * lines, was contradicted by a line beyond it, or claims more exported than
 * the kernel counted raises the critical billing_state_tampered alert (and
 * an audit record). What was exported is then taken from the billing
 * file's lines, so the next export bills the rest of the kernel's meter
 * (issue 23, finding 5). key (may be NULL: unauthenticated) is copied. */
struct egr_auditlog;
void egr_billing_report_open(struct egr_billing *b, struct egr_auditlog *al);
void egr_billing_free(struct egr_billing *b);

/* Export every interval_s seconds from loop (and its counters on /metrics). */
int egr_billing_start(struct egr_billing *b, struct egr_loop *loop, unsigned interval_s);

/* One export now: 0, or -errno after counting the failure (the deltas stay
 * pending for the next one). */
int egr_billing_export(struct egr_billing *b);

/* Did the last export fail (the deltas still pending)? Then why holds
 * what failed. NULL b: no export, never failing. */
bool egr_billing_failing(const struct egr_billing *b, char *why, size_t len);

#endif /* EGR_BILLING_H */
