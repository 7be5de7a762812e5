/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The handover from an egressd without a listener holder (a release before
 * it, docs/operations.md "Upgrades"): `egressd --hold-listeners-of PID`,
 * run by the unit's ExecStop= before systemd stops that egressd, takes its
 * DNS and inspecting listener sockets (pidfd_getfd) and hands them to a
 * listener holder, so that they outlive it like those of an egressd that
 * has one: the queries sent while no egressd runs wait in them, and the
 * successor takes them at start (hold/lhold.h).
 *
 * Taking another process's descriptors is ptrace access: it runs as root
 * (ExecStop=+), takes the sockets, then becomes user (when set) keeping
 * CAP_NET_ADMIN alone (a socket's network namespace, SIOCGSKNS) and starts
 * the holder as that user, the one its successor will be.
 */
#ifndef EGR_HANDOVER_H
#define EGR_HANDOVER_H

#include <sys/types.h>

struct egr_handover {
	pid_t pid;             /* the predecessor; 0: none (nothing to take) */
	const char *holder;    /* the holder's socket path */
	unsigned linger_s;     /* a holder started here keeps them this long */
	const char *user;      /* NULL: stay who we are */
	uid_t uid;
	gid_t gid;
};

/*
 * Hand pid's listeners to a holder at h->holder, started if none answers;
 * nothing when one answers already (that egressd has it: it hands its own).
 * 0, or -errno (logged): the predecessor's listeners then close with it.
 */
int egr_handover_run(const struct egr_handover *h);

#endif /* EGR_HANDOVER_H */
