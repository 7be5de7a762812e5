/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The load-time knobs of the BPF object and the predecessor's listeners
 * (bpfstate.h includes this): definitions below every file of kernel/, so
 * kernel_priv.h's struct egr_bpf can hold them without depending on
 * bpfstate.c. */
#ifndef EGR_BPF_KNOBS_H
#define EGR_BPF_KNOBS_H

#include <stddef.h>
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

/* The predecessor's listener sockets, handed over by the listener holder
 * (hold/lhold.h). An upgrade from an earlier ABI version, whose listeners
 * bear no mark of ours, marks them as egressd's DNS listeners before it
 * switches a sandbox to the new programs (kernel/listen.h): those refuse
 * DNS to an unmarked socket, until adoption claimed it. */
struct egr_bpf_listeners {
	const int *fd;
	size_t n;
};

#endif /* EGR_BPF_KNOBS_H */
