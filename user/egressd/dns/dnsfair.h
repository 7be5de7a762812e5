/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What the DNS proxy shed, per sandbox, for `list`, `stats` and /metrics
 * (docs/dns.md "Fairness between sandboxes"). The limits themselves are
 * enforced in dnsproxy.c.
 */
#ifndef EGR_DNSFAIR_H
#define EGR_DNSFAIR_H

#include <stdint.h>
#include <jansson.h>

#include "dnsproxy.h"
#include "obs/metrics.h"
#include "sandbox.h"

/* {"allowed":N,...,"shed_rate":N,"shed_inflight":N,"evicted":N,
 *  "foreign_dropped":N,"inflight":N}, or NULL when the proxy does not
 * know the sandbox. */
json_t *egr_dnsfair_json(const struct egr_dnsproxy *p, uint32_t sandbox_id);
/* A metrics source (ctx: the registry): egressd_dns_shed_total. */
void egr_dnsfair_metrics(void *ctx, struct egr_mbuf *b);

#endif /* EGR_DNSFAIR_H */
