/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The host-wide guard against leaving a sandbox cgroup (bpf/escape.bpf.c):
 * raw tracepoint programs on cgroup_attach_task, sched_process_fork and
 * sched_process_exit, loaded and attached once, their links pinned under
 * <bpffs-dir>/guard/ so that they stay in force while egressd is down, and
 * replaced by the next egressd's own. egressd keeps its own link fds too:
 * the pins alone could be removed.
 *
 * Its teeth (bpf/escape_root.bpf.c): cgroup programs (sock_create,
 * connect4/6, sendmsg4/6) attached once at the cgroup2 root with
 * BPF_F_ALLOW_MULTI, pinned under <bpffs-dir>/guard/ too, refuse every new
 * socket, connect and datagram of a process the guard marked escaped (and
 * of one in the instants between its move and the tracepoint's judgement),
 * whether egressd runs or not.
 *
 * Test only: EGRESSD_TEST_BREAK_ESCAPE_GUARD=tracepoints|root|all makes
 * that part fail to load as if the kernel had refused it (docs/testing.md);
 * nothing but the tests sets it.
 */
#ifndef EGR_ESCAPE_H
#define EGR_ESCAPE_H

#include <stdbool.h>
#include <stdint.h>

struct escape_bpf;
struct escape_root_bpf;
struct bpf_link;
struct egr_bpf;

#define EGR_ESCAPE_LINKS 3
#define EGR_ESCAPE_ROOT_LINKS 5

struct egr_escape {
	struct escape_bpf *skel;
	struct bpf_link *links[EGR_ESCAPE_LINKS];
	bool adopted; /* some link of an earlier egressd is kept */
	struct escape_root_bpf *root_skel;
	struct bpf_link *root_links[EGR_ESCAPE_ROOT_LINKS];
	bool root_adopted;
	bool root_kills; /* the root programs SIGKILL a marked process themselves */
};

/* Load the guard on the maps of b (egr_bpf_open() opened them), attach it
 * and pin its links under <bpffs-dir>/guard, replacing pinned ones. 0 when
 * the whole guard is in force afterwards, else -errno: the host lacks the
 * layer. */
int egr_escape_start(struct egr_escape *g, const struct egr_bpf *b);
/* Load the root programs (after egr_escape_start() succeeded) on the same
 * maps, attach them to the cgroup2 root (cgroup id 1: a mount of a subtree
 * is refused, it would miss the cgroups outside it) and pin their links
 * under <bpffs-dir>/guard. 0 when all five are in force, else -errno. */
int egr_escape_root_start(struct egr_escape *g, const struct egr_bpf *b);
/* Drop our references; the pinned links stay in force. */
void egr_escape_close(struct egr_escape *g);

/* SIGKILL process pid, which the guard marked escaped (EGR_HOME_ESCAPED in
 * egr_proc_home), wherever it is now: a later move does
 * not save it. The mark is checked after the pidfd holds the process, and
 * the kernel drops it at exit before the pid can be reused, so a reused
 * pid is never signalled. 0 (killed, already gone or not marked) or
 * -errno. */
int egr_escape_kill_moved(const struct egr_bpf *b, uint32_t pid);
/* SIGKILL every process egr_proc_home marks escaped (the children a
 * marked process forked before it died among them). The number killed. */
int egr_escape_kill_marked(const struct egr_bpf *b);

#endif /* EGR_ESCAPE_H */
