/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Alerting glue (docs/alerts.md): feeds user/lib/alerts.c from the tenant
 * meters (every --alert-interval seconds), from the bus's typed records
 * (denies, quota, escapes, DNS exfiltration, lost events, tampering) and
 * from egressd's own health (map pressure, audit write failures), and
 * writes the alerts as JSON lines to --alerts-file and to syslog.
 */
#ifndef EGR_ALERTING_H
#define EGR_ALERTING_H

#include <stdint.h>
#include <jansson.h>

#include "alerts.h"
#include "bus.h"
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

/* Subscribes to bus (the records it alerts on: denies, quota, escapes,
 * DNS exfiltration and rebinding, lost events, tampering; detaches forget
 * a sandbox's deny bursts). events renders an alert's evidence; audit's
 * write failures are checked every interval (may be NULL). */
struct egr_events;
int egr_alerting_new(struct egr_alerting **out, const struct egr_alerting_opts *o,
		     struct egr_registry *reg, struct egr_loop *loop, struct egr_bus *bus,
		     struct egr_events *events, const struct egr_auditlog *audit);
void egr_alerting_free(struct egr_alerting *al);
/* SIGHUP: new thresholds (volume floor, deny burst, de-duplication). */
int egr_alerting_set_cfg(struct egr_alerting *al, const struct egr_alert_cfg *cfg);
/* Raise an alert now (through de-duplication). */
int egr_alerting_raise(struct egr_alerting *al, const struct egr_alert_in *in);
/* {"raised","suppressed","write_failures","file"} */
json_t *egr_alerting_status(struct egr_alerting *al);

#endif /* EGR_ALERTING_H */
