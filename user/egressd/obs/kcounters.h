/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The kernel's global counters (EGR_CNT_*) as exposition families. */
#ifndef EGR_KCOUNTERS_H
#define EGR_KCOUNTERS_H

#include <stdint.h>

#include "mbuf.h"

/* Append egressd_kernel_{allowed,denied,dropped_packets,meter_full}_total
 * from cnt (EGR_CNT_MAX counters, egr_bpf_counters()). */
void egr_kcounters_emit(struct egr_mbuf *b, const uint64_t *cnt);

#endif /* EGR_KCOUNTERS_H */
