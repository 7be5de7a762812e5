/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* egressd drops what it no longer needs once it is up (harden.c). */
#ifndef EGR_HARDEN_H
#define EGR_HARDEN_H

#include <stdbool.h>

struct egr_hardening {
	bool caps;                 /* capabilities reduced */
	bool seccomp;              /* deny-list filter installed */
	unsigned int caps_dropped; /* effective capabilities given up */
	unsigned int syscalls_denied;
};

/* Call once, after start-up, before serving. 0 or -errno (then egressd
 * refuses to run: least privilege is not optional). */
int egr_harden(struct egr_hardening *h);

#endif /* EGR_HARDEN_H */
