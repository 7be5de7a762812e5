/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The inet sockets each sandbox made (egr_sock_counts, written by
 * cgroup/sock_create: bpf/egressd.bpf.c), for the detach's choice to skip
 * its socket walk (registry/detach.c; docs/security.md, row 5 of
 * "Attacks on egressd's own state"). egr_bpf_del_sandbox drops a
 * sandbox's count with its entry.
 */
#ifndef EGR_KERNEL_SOCKCOUNT_H
#define EGR_KERNEL_SOCKCOUNT_H

#include <stdint.h>

struct egr_bpf;

/* How many inet sockets cgroup/sock_create let through for the sandbox
 * (*n 0: none; no entry means none). 0 or -errno, and then nothing is
 * known: the caller walks. */
int egr_bpf_sock_count(struct egr_bpf *b, uint32_t sandbox_id, uint64_t *n);

#endif /* EGR_KERNEL_SOCKCOUNT_H */
