/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * How long a sandbox lives (docs/operations.md, "Lifetime"). Every second
 * each attached sandbox's cgroup is looked up at its path (one
 * name_to_handle_at per sandbox): one that was removed, or replaced by
 * another cgroup of the same name, is detached with audit status
 * "cgroup gone". A sandbox tied to a launcher (`egressctl run`, attach
 * field "launcher_pid") is watched by a pidfd in the event loop: when the
 * launcher exits without having detached, its cgroup is killed
 * (cgroup.kill), the sandbox detached with status "launcher gone" and the
 * cgroup tree (the launcher's own) removed. The tie is kept in the
 * sandbox's state file (pid and start time): a restarted egressd ties it
 * again, and handles a launcher that went meanwhile the same way.
 */
#ifndef EGR_LIFETIME_H
#define EGR_LIFETIME_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "loop.h"
#include "sandbox.h"

#define EGR_LIFETIME_INTERVAL_MS 1000

struct egr_lifetime;

/* Ties the adopted sandboxes at once and checks them every second. */
int egr_lifetime_start(struct egr_lifetime **out, struct egr_loop *loop, struct egr_registry *reg);
void egr_lifetime_free(struct egr_lifetime *lt);

/* The launcher an attach names: pid must be the control connection's peer
 * (SO_PEERCRED's pid, as egressd sees it), so a client cannot tie a sandbox
 * to another process; cgroup (resolved) must be the peer uid's (root: any)
 * and empty, so its end kills only what was started in it for the launcher.
 * Fills *l and *pidfd (the peer's, from SO_PEERPIDFD where the kernel has
 * it). 0, -EPERM (another pid, another uid's cgroup), -EBUSY (populated)
 * with *why set, or -errno. */
int egr_lifetime_peer_launcher(int cfd, const struct ucred *peer, long long pid,
			       const char *cgroup, struct egr_launcher *l, int *pidfd,
			       const char **why);
/* Watch sb's launcher through pidfd (taken, closed on error too). 0 or -errno. */
int egr_lifetime_tie(struct egr_lifetime *lt, const struct egr_sb *sb, int pidfd);
/* A check of every sandbox now. The timer does the same each second, of
 * every sandbox up to 1,000 and of a fifth of them beyond (lifetime.c). */
void egr_lifetime_check(struct egr_lifetime *lt);

#endif /* EGR_LIFETIME_H */
