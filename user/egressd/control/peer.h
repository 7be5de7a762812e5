/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Who is on the other end of a control connection (docs/security.md,
 * issue 23 finding 1): judged from what the kernel recorded, not from where
 * /proc says the peer is at one instant. A peer is refused when
 *   - it is in a sandbox's cgroup (or below one) now (/proc/<pid>/cgroup,
 *     read first), or
 *   - the escape guard recorded it as a sandbox's (egr_proc_home: marked
 *     escaped, or at home in a sandbox still managed), read after /proc:
 *     a move out is in the map before /proc shows it elsewhere (both under
 *     cgroup_mutex), so a move between the two reads is seen by one of them,
 *   - it has begun to exit (PF_EXITING in /proc/<pid>/stat, read after
 *     the record: the guard deletes the record of an exiting process at
 *     sched_process_exit, after PF_EXITING and well before its pidfd says
 *     it exited; without this a moved peer that exits, or is killed for
 *     its escape, between its request and egressd's judgement has neither
 *     record nor dead pidfd and is admitted: the race test's failure), or
 *   - it has exited (its pid says nothing any more), or
 *   - it is neither root nor in the control group.
 * The process is held by a pidfd (SO_PEERPIDFD, Linux 6.5+; pidfd_open of
 * the SO_PEERCRED pid on older kernels) that must still be alive after the
 * reads: the pid read was the peer's, not a reuse.
 */
#ifndef EGR_CONTROL_PEER_H
#define EGR_CONTROL_PEER_H

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>

struct egr_registry;
struct egr_bpf;

struct egr_peer_rules {
	const char *cgroup_root;   /* the cgroup2 mount; "": every peer counts as sandboxed */
	struct egr_registry *reg;  /* which cgroups are sandboxes */
	const struct egr_bpf *bpf; /* egr_proc_home (NULL: not consulted) */
	gid_t group;               /* (gid_t)-1: root only */
};

/* 0: admitted; -EPERM: refused, *why says why; cred as far as known. */
int egr_peer_judge(const struct egr_peer_rules *r, int cfd, struct ucred *cred, const char **why);
/* Does this /proc/<pid>/stat text say the process has begun to exit
 * (PF_EXITING in its flags, or a zombie)? Text it cannot parse: true. */
bool egr_peer_stat_exiting(const char *stat);
/* Does this kernel give SO_PEERPIDFD (6.5+)? Probed once. Without it the
 * peer's pid is held from the judgement on, not from its connect(). */
bool egr_peer_pidfd_supported(void);

#endif /* EGR_CONTROL_PEER_H */
