/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The standard process_* self metrics of a Prometheus exporter, from /proc. */
#ifndef EGR_PROCMETRICS_H
#define EGR_PROCMETRICS_H

#include "mbuf.h"

/*
 * Append process_cpu_seconds_total, process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_open_fds, process_max_fds and
 * process_start_time_seconds of the calling process (the names and meanings
 * of the Prometheus client libraries). Figures it cannot read are left out.
 * Returns how many could not be read (0 when all were), for the caller's
 * read-failure counter.
 */
int egr_procmetrics_emit(struct egr_mbuf *b);

#endif /* EGR_PROCMETRICS_H */
