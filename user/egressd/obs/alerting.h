/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Alerting glue (docs/alerts.md): feeds user/lib/alerts.c from the tenant
 * meters (every --alert-interval seconds), from the event stream (denies,
 * quota, DNS exfiltration) and from egressd's own health (lost events, map
 * pressure, audit write failures), and writes the alerts as JSON lines to
 * --alerts-file and to syslog.
 */
#ifndef EGR_ALERTING_H
#define EGR_ALERTING_H

#include <stdint.h>
#include <jansson.h>

#include "alerts.h"
#include "loop.h"
#include "sandbox.h"

struct egr_alerting;
struct egr_auditlog;

struct egr_alerting_opts {
	const char *file;        /* "-" = stdout */
	unsigned interval_s;     /* meter sampling interval */
	bool syslog;
	struct egr_alert_cfg cfg;
};

void egr_alerting_opts_default(struct egr_alerting_opts *o);

int egr_alerting_new(struct egr_alerting **out, const struct egr_alerting_opts *o,
		     struct egr_registry *reg, struct egr_loop *loop);
void egr_alerting_free(struct egr_alerting *al);
/* SIGHUP: new thresholds (volume floor, deny burst, de-duplication). */
int egr_alerting_set_cfg(struct egr_alerting *al, const struct egr_alert_cfg *cfg);
void egr_alerting_set_audit(struct egr_alerting *al, struct egr_auditlog *audit);

/* Every event of the stream (kernel or userspace). */
void egr_alerting_event(struct egr_alerting *al, const json_t *ev);
/* Raise an alert now (through de-duplication). */
int egr_alerting_raise(struct egr_alerting *al, const struct egr_alert_in *in);
void egr_alerting_forget_sandbox(struct egr_alerting *al, uint32_t sandbox);
/* {"raised","suppressed","write_failures","file"} */
json_t *egr_alerting_status(struct egr_alerting *al);

/* Realtime now in ns. */
uint64_t egr_now_ns(void);

#endif /* EGR_ALERTING_H */
