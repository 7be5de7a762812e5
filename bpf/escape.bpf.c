// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The cgroup migration guard: a task moved from a sandbox cgroup (or one
 * below it) to a cgroup outside that sandbox has left every hook egressd
 * attached; this sees the move, reports it and, unless the sandbox's policy
 * says "alert" (network.on_escape), kills the mover.
 *
 * Loaded once and attached once for the whole host, not per sandbox; its
 * links are pinned beside the maps so that it outlives egressd like the
 * sandboxes' links do. Raw tracepoints, because that is what this class of
 * host loads and attaches: no kprobes (CONFIG_KPROBES is off on the dev
 * kernel) and no trampolines (fentry, tp_btf).
 *
 * The cgroup_attach_task tracepoint fires after cgroup_migrate() finished:
 * the task's css_set is already the destination's and nothing in the
 * kernel says where it came from. So each process has its home sandbox in
 * egr_proc_home, set
 *   - when a task is moved into a sandbox cgroup (this tracepoint),
 *   - when a task is forked, from the cgroup it is born in (sched_process_fork:
 *     children, threads, clone3(CLONE_INTO_CGROUP) as egressctl run does),
 *   - by egressd at attach, for the processes already in the cgroup.
 * A move of a task whose home sandbox is still managed (egr_sandbox_cgroups)
 * to a cgroup outside it is an escape.
 *
 * Who is killed: bpf_send_signal() signals the current task, which is the
 * writer of cgroup.procs. When the writer is inside ANY sandbox (the task
 * moving itself, a sibling, a process of another sandbox, or of an outer
 * sandbox moving a process out of a nested one) it is the one escaping or
 * helping: SIGKILL is pending before its write() returns, so it runs no
 * further instruction in user space. The process it moved cannot be
 * signalled from here (bpf_send_signal signals current only): it is marked
 * escaped in egr_proc_home (the mark survives later moves and goes to its
 * children), killed in the kernel the moment it forks, and killed by
 * egressd from the event (target_pid; and every child's fork event). When
 * the writer is in no sandbox (an administrator, an orchestrator, a service
 * acting on a request) it has authority over both cgroups and is not ours
 * to kill: the move is reported (critical alert) and the moved task lives.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "egressd.h"
#include "egr_decide.h"
#include "lib/maps.bpf.h"

#define SIGKILL 9

/* A cgroup's parent, NULL at the root: cgroup_parent(), through the
 * parent css (cgrp->self.parent) that every kernel has. Not ancestors[]:
 * that array held ids before 6.0 (commit 7f203bc89eb6, "cgroup: Replace
 * cgroup->ancestor_ids[] with ->ancestors[]"; 5.15 has ancestor_ids) and
 * a CO-RE pick between the two is hoisted out of the loop by clang, so the
 * failed relocation of the layout the kernel lacks ends up on a live path. */
static __always_inline struct cgroup *egr_cgroup_parent(struct cgroup *cg)
{
	struct cgroup_subsys_state *css = BPF_CORE_READ(cg, self.parent);

	return css ? (struct cgroup *)((void *)css - bpf_core_field_offset(struct cgroup, self))
		   : NULL;
}

/* Is cg the cgroup with id cgid, or below it? Walked by id, not by depth:
 * a depth computed in user space would be relative to egressd's cgroup
 * namespace, the kernel's is absolute. */
static __always_inline int egr_cgroup_under(struct cgroup *cg, __u64 cgid)
{
	for (int j = 0; j < EGR_MAX_CGROUP_LEVELS && cg; j++) {
		if (BPF_CORE_READ(cg, kn, id) == cgid)
			return 1;
		cg = egr_cgroup_parent(cg);
	}
	return 0;
}

/* The innermost sandbox cg is in (itself or an ancestor): 1 and *home. */
static __always_inline int egr_sandbox_of(struct cgroup *cg, struct egr_proc_home *home)
{
	for (int j = 0; j < EGR_MAX_CGROUP_LEVELS && cg; j++) {
		__u64 cgid = BPF_CORE_READ(cg, kn, id);
		__u32 *id = bpf_map_lookup_elem(&egr_sandbox_cgroups, &cgid);

		if (id) {
			home->cgroup_id = cgid;
			home->sandbox_id = *id;
			return 1;
		}
		cg = egr_cgroup_parent(cg);
	}
	return 0;
}

/* Is the home still a managed sandbox (not detached since)? */
static __always_inline int egr_home_live(const struct egr_proc_home *h)
{
	__u32 *id;

	if (!h->sandbox_id)
		return 0;
	id = bpf_map_lookup_elem(&egr_sandbox_cgroups, &h->cgroup_id);
	return id && *id == h->sandbox_id;
}

static __always_inline void egr_set_home(__u32 tgid, const struct egr_proc_home *h)
{
	if (h->sandbox_id || (h->flags & EGR_HOME_ESCAPED))
		bpf_map_update_elem(&egr_proc_home, &tgid, h, BPF_ANY);
	else
		bpf_map_delete_elem(&egr_proc_home, &tgid);
}

/* Does on_escape say "alert" for this sandbox? No entry: no (fail closed). */
static __always_inline int egr_escape_alerts(__u32 sandbox_id)
{
	const struct egr_sandbox *sb = bpf_map_lookup_elem(&egr_sandboxes, &sandbox_id);

	return sb && (sb->flags & EGR_SB_ESCAPE_ALERT);
}

/* Report a task leaving home for cgroup dst and, unless on_escape says
 * "alert", stop it. moved is the task that left; the writer is current.
 * 1 when moved is to die (egressd kills it; the caller marks it escaped). */
static __always_inline int egr_escape(const struct egr_proc_home *home, struct task_struct *moved,
				      struct cgroup *dst)
{
	struct task_struct *cur = (struct task_struct *)bpf_get_current_task();
	__u32 sandbox_id = home->sandbox_id, action, cur_tgid = BPF_CORE_READ(cur, tgid);
	const struct egr_sandbox *sb = bpf_map_lookup_elem(&egr_sandboxes, &sandbox_id);
	struct egr_proc_home wr = {}, *ch;
	struct egr_escape_event *x;
	struct egr_event *e;
	int inside;

	/* The writer is inside if it is the moved process (its home is the
	 * one left), or it is in any sandbox's cgroup, or at home in any live
	 * sandbox: a process of another sandbox, or of a sandbox above a
	 * nested one, is no administrator. */
	if (cur_tgid == BPF_CORE_READ(moved, tgid)) {
		inside = 1;
		wr = *home;
	} else {
		inside = egr_sandbox_of(BPF_CORE_READ(cur, cgroups, dfl_cgrp), &wr);
		if (!inside) {
			ch = bpf_map_lookup_elem(&egr_proc_home, &cur_tgid);
			if (ch && egr_home_live(ch)) {
				inside = 1;
				wr = *ch;
			}
		}
	}
	if (!inside)
		action = EGR_ESCAPE_BY_OUTSIDER;
	/* Reported only when both the sandbox left and the writer's say so. */
	else if (egr_escape_alerts(sandbox_id) && egr_escape_alerts(wr.sandbox_id))
		action = EGR_ESCAPE_ALERTED;
	else /* no sandbox entry for a managed cgroup kills too: fail closed */
		action = bpf_send_signal(SIGKILL) == 0 ? EGR_ESCAPE_KILLED : EGR_ESCAPE_KILL_FAILED;

	x = bpf_ringbuf_reserve(&egr_events, sizeof(*x), 0);
	if (!x) {
		egr_count(EGR_CNT_EVENTS_LOST);
		goto out;
	}
	__builtin_memset(x, 0, sizeof(*x));
	e = &x->ev;
	e->ts_ns = bpf_ktime_get_boot_ns();
	e->version = EGR_EVENT_VERSION;
	e->type = EGR_EV_ESCAPE;
	e->sandbox_id = sandbox_id;
	if (sb) {
		e->tenant_id = sb->tenant_id;
		e->policy_id = sb->policy_id;
	}
	e->pid = cur_tgid;
	e->cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->verdict = action == EGR_ESCAPE_KILLED ? EGR_DENY : EGR_ALLOW;
	x->from_cgroup_id = home->cgroup_id;
	x->to_cgroup_id = dst ? BPF_CORE_READ(dst, kn, id) : 0;
	x->target_pid = BPF_CORE_READ(moved, tgid);
	x->action = action;
	bpf_ringbuf_submit(x, 0);
out:
	return action == EGR_ESCAPE_KILLED || action == EGR_ESCAPE_KILL_FAILED;
}

/* A marked process forked: kill it (current is the parent here) and report
 * the child, which carries the mark, for egressd to kill. */
static __always_inline void egr_escaped_fork(const struct egr_proc_home *home,
					     struct task_struct *child)
{
	struct egr_escape_event *x;
	__u32 action;

	action = bpf_send_signal(SIGKILL) == 0 ? EGR_ESCAPE_KILLED : EGR_ESCAPE_KILL_FAILED;
	x = bpf_ringbuf_reserve(&egr_events, sizeof(*x), 0);
	if (!x) {
		egr_count(EGR_CNT_EVENTS_LOST);
		return;
	}
	__builtin_memset(x, 0, sizeof(*x));
	x->ev.ts_ns = bpf_ktime_get_boot_ns();
	x->ev.version = EGR_EVENT_VERSION;
	x->ev.type = EGR_EV_ESCAPE;
	x->ev.sandbox_id = home->sandbox_id;
	x->ev.pid = bpf_get_current_pid_tgid() >> 32;
	x->ev.cgroup_id = bpf_get_current_cgroup_id();
	bpf_get_current_comm(x->ev.comm, sizeof(x->ev.comm));
	x->ev.verdict = EGR_DENY;
	x->from_cgroup_id = home->cgroup_id;
	x->to_cgroup_id = BPF_CORE_READ(child, cgroups, dfl_cgrp, kn, id);
	x->target_pid = BPF_CORE_READ(child, tgid);
	x->action = action;
	bpf_ringbuf_submit(x, 0);
}

/* TP_PROTO(struct cgroup *dst_cgrp, const char *path, struct task_struct *task,
 *	    bool threadgroup), after the move. */
SEC("raw_tracepoint/cgroup_attach_task")
int egr_cgroup_attach(struct bpf_raw_tracepoint_args *ctx)
{
	struct cgroup *dst = (struct cgroup *)ctx->args[0];
	struct task_struct *task = (struct task_struct *)ctx->args[2];
	struct egr_proc_home *h, now = {}, home;
	__u32 tgid;

	/* Only moves on the cgroup v2 hierarchy, where the hooks are: then
	 * the task's default cgroup is the destination. */
	if (!dst || !task || BPF_CORE_READ(task, cgroups, dfl_cgrp) != dst)
		return 0;
	tgid = BPF_CORE_READ(task, tgid);
	egr_sandbox_of(dst, &now);
	h = bpf_map_lookup_elem(&egr_proc_home, &tgid);
	/* Marked to die: no later move (back in, anywhere) clears the mark. */
	if (h && (h->flags & EGR_HOME_ESCAPED))
		return 0;
	if (h && egr_home_live(h) && !egr_cgroup_under(dst, h->cgroup_id)) {
		home = *h;
		if (egr_escape(&home, task, dst)) {
			home.flags |= EGR_HOME_ESCAPED;
			egr_set_home(tgid, &home);
			return 0;
		}
	}
	/* Where it lives now (a sandbox, a nested one, or none). */
	if (now.sandbox_id || h)
		egr_set_home(tgid, &now);
	return 0;
}

/* TP_PROTO(struct task_struct *parent, struct task_struct *child), once the
 * child is in its cgroup (cgroup_post_fork ran). */
SEC("raw_tracepoint/sched_process_fork")
int egr_task_fork(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *parent = (struct task_struct *)ctx->args[0];
	struct task_struct *child = (struct task_struct *)ctx->args[1];
	__u32 ptgid = BPF_CORE_READ(parent, tgid), ctgid = BPF_CORE_READ(child, tgid);
	struct cgroup *cg = BPF_CORE_READ(child, cgroups, dfl_cgrp);
	struct egr_proc_home now = {}, home, *h;

	/* A process marked to die forks (a thread too): it dies now, before
	 * egressd's kill; its child carries the mark for egressd to kill. */
	h = bpf_map_lookup_elem(&egr_proc_home, &ptgid);
	if (h && (h->flags & EGR_HOME_ESCAPED)) {
		home = *h;
		if (ctgid != ptgid) {
			egr_set_home(ctgid, &home);
			egr_escaped_fork(&home, child);
		} else {
			bpf_send_signal(SIGKILL);
		}
		return 0;
	}
	if (ctgid == ptgid)
		return 0; /* a thread: the process's home already counts */
	if (egr_sandbox_of(cg, &now))
		egr_set_home(ctgid, &now);
	/* clone3(CLONE_INTO_CGROUP) from a sandbox to a cgroup outside it. */
	h = bpf_map_lookup_elem(&egr_proc_home, &ptgid);
	if (h && egr_home_live(h) && !egr_cgroup_under(cg, h->cgroup_id)) {
		home = *h;
		if (egr_escape(&home, child, cg))
			home.flags |= EGR_HOME_ESCAPED;
		egr_set_home(ctgid, &home); /* it is still the sandbox's */
	}
	return 0;
}

/* The home goes with the process's last thread, before its pid can be
 * reused. TP_PROTO(struct task_struct *p) up to 6.x, (p, bool group_dead)
 * on newer kernels: a raw tracepoint program that reads an argument the
 * tracepoint does not have is refused at attach (EINVAL on Debian 12's 6.1
 * and 6.12), so only args[0] is read, and whether the group is dead comes
 * from the task: do_exit() decrements signal->live before this tracepoint
 * on every kernel we support. */
SEC("raw_tracepoint/sched_process_exit")
int egr_task_exit(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *p = (struct task_struct *)ctx->args[0];
	__u32 tgid;

	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	tgid = BPF_CORE_READ(p, tgid);
	bpf_map_delete_elem(&egr_proc_home, &tgid);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
