/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The host-wide guard against leaving a sandbox cgroup (bpf/escape.bpf.c):
 * raw tracepoint programs on cgroup_attach_task, sched_process_fork and
 * sched_process_exit, loaded and attached once, their links pinned under
 * <bpffs-dir>/guard/ so that they stay in force while egressd is down, and
 * replaced by the next egressd's own. egressd keeps its own link fds too:
 * the pins alone could be removed.
 */
#ifndef EGR_ESCAPE_H
#define EGR_ESCAPE_H

#include <stdbool.h>
#include <stdint.h>

struct escape_bpf;
struct bpf_link;
struct egr_bpf;

#define EGR_ESCAPE_LINKS 3

struct egr_escape {
	struct escape_bpf *skel;
	struct bpf_link *links[EGR_ESCAPE_LINKS];
	bool adopted; /* some link of an earlier egressd is kept */
};

/* Load the guard on the maps of b (egr_bpf_open() opened them), attach it
 * and pin its links under <bpffs-dir>/guard, replacing pinned ones. 0 when
 * the whole guard is in force afterwards, else -errno: the host lacks the
 * layer. */
int egr_escape_start(struct egr_escape *g, const struct egr_bpf *b);
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
