/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A growing text buffer for the Prometheus exposition. Every metrics source
 * (metrics.c's own families, procmetrics, kcounters, the other modules'
 * egr_metrics_source_fn) appends to one; it depends on nothing else, so the
 * sources need not know metrics.c.
 */
#ifndef EGR_MBUF_H
#define EGR_MBUF_H

#include <stdbool.h>
#include <stddef.h>

struct egr_mbuf {
	char *p;
	size_t len, cap;
	bool oom;
};

void egr_mbuf_printf(struct egr_mbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* `# HELP` and `# TYPE` lines of a family. */
void egr_mbuf_family(struct egr_mbuf *b, const char *name, const char *type, const char *help);
/* A label value escaped per the exposition format (\\, \", \n). */
void egr_mbuf_label(struct egr_mbuf *b, const char *value);

#endif /* EGR_MBUF_H */
