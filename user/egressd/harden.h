/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* egressd drops what it no longer needs once it is up (harden.c). */
#ifndef EGR_HARDEN_H
#define EGR_HARDEN_H

#include <stdbool.h>

#include <sys/types.h>

struct egr_hardening {
	bool caps;                 /* capabilities reduced */
	bool user;                 /* no longer root: uid below */
	uid_t uid;
	bool seccomp;              /* deny-list filter installed */
	unsigned int caps_dropped; /* effective capabilities given up */
	unsigned int syscalls_denied;
};

/* The system user egressd becomes (--user; name NULL: it stays root). */
struct egr_run_as {
	const char *name;
	uid_t uid;
	gid_t gid;
};

/* Call once, after start-up, before serving. 0 or -errno (then egressd
 * refuses to run: least privilege is not optional). */
int egr_harden(struct egr_hardening *h, const struct egr_run_as *as);

#endif /* EGR_HARDEN_H */
