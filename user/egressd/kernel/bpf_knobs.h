/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The load-time knobs of the BPF object (bpfstate.h includes this): a
 * definition below every file of kernel/, so kernel_priv.h's struct
 * egr_bpf can hold them without depending on bpfstate.c. */
#ifndef EGR_BPF_KNOBS_H
#define EGR_BPF_KNOBS_H

#include <stdint.h>

/* Load-time knobs: read-only data of the programs, set between open and
 * load (programs already attached keep the values they were loaded with). */
struct egr_bpf_knobs {
	uint64_t deny_events_per_s;  /* per sandbox, reported one by one; 0: no budget */
	uint64_t deny_events_burst;
	uint64_t allow_events_per_s; /* sampled allow events per CPU (burst the same); 0: none */
};
#define EGR_BPF_KNOBS_DEFAULT { .deny_events_per_s = 100, .deny_events_burst = 200, \
				.allow_events_per_s = 20 }

#endif /* EGR_BPF_KNOBS_H */
