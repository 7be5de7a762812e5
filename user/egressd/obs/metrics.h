/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Metering as egressd shows it (docs/metering.md): the per-tenant and
 * per-sandbox figures read from the kernel meters, the same numbers for the
 * control protocol's `stats` op and for the Prometheus text endpoint
 * (libmicrohttpd, driven by egressd's own event loop: no threads).
 *
 * Everything here runs on egressd's single thread.
 */
#ifndef EGR_METRICS_H
#define EGR_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "egressd.h"
#include "bus.h"
#include "loop.h"
#include "mbuf.h"
#include "sandbox.h"

#define EGR_METRICS_DEFAULT_ADDR "127.0.0.1:9477"
#define EGR_METRICS_DEFAULT_MAX_SANDBOXES 1000

struct egr_metrics;

/* Another module's metrics (billing, alerts, ...): fn appends complete
 * families to b at every scrape. */
typedef void (*egr_metrics_source_fn)(void *ctx, struct egr_mbuf *b);

/* The figures of one tenant or sandbox: its kernel meter and the DNS
 * proxy's query counts. */
struct egr_figures {
	struct egr_meter m;
	uint64_t dns_allowed, dns_refused;
};

/* max_sandboxes: per-sandbox series at most; the rest fold into
 * sandbox="_other" of their tenant. */
/* Subscribes to bus's DNS verdicts (the DNS counts and latency). */
int egr_metrics_new(struct egr_metrics **out, struct egr_registry *reg, struct egr_bus *bus,
		    unsigned max_sandboxes);
void egr_metrics_free(struct egr_metrics *m);

/* Serve /metrics on addr ("127.0.0.1:9477", "[::1]:9477"; "off": nothing)
 * from loop. 0 or -errno. */
int egr_metrics_listen(struct egr_metrics *m, const char *addr, struct egr_loop *loop);

/* 0 if addr is one egr_metrics_listen() takes ("off" included), -EINVAL. */
int egr_metrics_check_addr(const char *addr);
/* Is /metrics being served (egr_metrics_listen() succeeded, not "off")? */
bool egr_metrics_serving(const struct egr_metrics *m);
/* SIGHUP: a new per-sandbox series bound, from the next scrape on. */
void egr_metrics_set_max_sandboxes(struct egr_metrics *m, unsigned max_sandboxes);
int egr_metrics_add_source(struct egr_metrics *m, egr_metrics_source_fn fn, void *ctx);

/* --- fed by the DNS proxy's verdicts (the bus) ------------------------------------- */

/* One query answered (allowed: forwarded; else refused). */
void egr_metrics_count_dns(struct egr_metrics *m, uint32_t sandbox_id, uint32_t tenant_id,
			   bool allowed);
/* Time from a query's arrival to its answer leaving the proxy. */
void egr_metrics_observe_dns_latency(struct egr_metrics *m, double seconds);

/* --- the figures --------------------------------------------------------------- */

/* A tenant's cumulative figures (the kernel tenant meter survives egressd
 * restarts; the DNS counts are since this egressd started). 0, or -ENOENT
 * when nothing was ever counted for it (*out zeroed). */
int egr_metrics_tenant(struct egr_metrics *m, uint32_t tenant_id, struct egr_figures *out);
int egr_metrics_sandbox(struct egr_metrics *m, uint32_t sandbox_id, uint32_t tenant_id,
			struct egr_figures *out);

/* The `stats` control op's answer body: {"tenants": [...], "sandboxes": [...]},
 * only tenant `tenant` when non-NULL. NULL on OOM. */
json_t *egr_metrics_stats_json(struct egr_metrics *m, const char *tenant);

/* The whole exposition, as /metrics serves it (tests, debugging). Caller
 * frees; NULL on OOM. */
char *egr_metrics_render(struct egr_metrics *m, size_t *len);

#endif /* EGR_METRICS_H */
