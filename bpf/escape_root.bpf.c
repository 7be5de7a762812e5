// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The escape guard's teeth (issue 23, finding 2): cgroup programs attached
 * once at the cgroup2 root (BPF_F_ALLOW_MULTI, so they run for the sockets
 * of every cgroup on the host, beside whatever each cgroup has) that refuse
 * what a process that left its sandbox does, in the kernel, whether egressd
 * runs, is stopped or is dead.
 *
 * A socket keeps the cgroup it was created in: one created in the sandbox
 * before the move stays under the sandbox's own hooks; one created after it
 * lives in whatever cgroup the process landed in, where no sandbox hook
 * runs. So sock_create refuses the new socket, and connect and unconnected
 * sendmsg refuse in case a socket came by another way. Which process is
 * asking comes from the current task (sockets are created, connected and
 * sent on in its syscalls), its state from egr_proc_home (escape.bpf.c):
 *   - no entry: the process never lived in a sandbox (every host process):
 *     allowed after one hash lookup;
 *   - EGR_HOME_ESCAPED: the guard judged the move an escape: refused, and
 *     SIGKILLed here where the kernel lets cgroup programs signal (6.10+;
 *     elsewhere egressd's pidfd kill and the fork kill finish it);
 *   - a live home the task is no longer under, unmarked: the instants
 *     between the kernel moving it and the cgroup_attach_task tracepoint
 *     judging the move. Refused unless the sandbox says on_escape "alert";
 *     the tracepoint then marks it, or forgets the home (a move by an
 *     administrator) and the next call is allowed.
 * Every other case (at home inside its live sandbox, a detached home) is
 * allowed here: the sandbox's own programs judge it.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "egressd.h"
#include "egr_decide.h"
#include "lib/maps.bpf.h"

#define SIGKILL 9

/* bpf_send_signal() is offered to cgroup programs on this kernel (egressd
 * probes it between open and load; the call is dead code otherwise). */
const volatile bool egr_kill_in_hook = false;

/* Is the current task's cgroup cgid or below it? bpf_get_current_ancestor_cgroup_id
 * answers 0 past the task's own level. */
static __always_inline int egr_current_under(__u64 cgid)
{
	for (int level = 0; level < EGR_MAX_CGROUP_LEVELS; level++) {
		__u64 anc = bpf_get_current_ancestor_cgroup_id(level);

		if (!anc)
			return 0;
		if (anc == cgid)
			return 1;
	}
	return 0;
}

/* 1: the current task may go on (its own cgroup's programs still judge);
 * 0: it left a sandbox and gets nothing. */
static __always_inline int egr_root_verdict(enum egr_counter denied)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	const struct egr_proc_home *h = bpf_map_lookup_elem(&egr_proc_home, &tgid);
	const struct egr_sandbox *sb;
	__u32 sandbox_id, *id;

	if (!h)
		return 1;
	if (h->flags & EGR_HOME_ESCAPED) {
		egr_count(denied);
		if (egr_kill_in_hook)
			bpf_send_signal(SIGKILL);
		return 0;
	}
	sandbox_id = h->sandbox_id;
	if (!sandbox_id)
		return 1;
	id = bpf_map_lookup_elem(&egr_sandbox_cgroups, &h->cgroup_id);
	if (!id || *id != sandbox_id)
		return 1; /* detached since: no longer ours to judge */
	if (egr_current_under(h->cgroup_id))
		return 1;
	sb = bpf_map_lookup_elem(&egr_sandboxes, &sandbox_id);
	if (sb && (sb->flags & EGR_SB_ESCAPE_ALERT))
		return 1;
	egr_count(denied);
	return 0;
}

SEC("cgroup/sock_create")
int egr_root_sock(struct bpf_sock *ctx)
{
	return egr_root_verdict(EGR_CNT_SOCK_CREATE_DENY);
}

SEC("cgroup/connect4")
int egr_root_connect4(struct bpf_sock_addr *ctx)
{
	return egr_root_verdict(EGR_CNT_CONNECT_DENY);
}

SEC("cgroup/connect6")
int egr_root_connect6(struct bpf_sock_addr *ctx)
{
	return egr_root_verdict(EGR_CNT_CONNECT_DENY);
}

SEC("cgroup/sendmsg4")
int egr_root_sendmsg4(struct bpf_sock_addr *ctx)
{
	return egr_root_verdict(EGR_CNT_SENDMSG_DENY);
}

SEC("cgroup/sendmsg6")
int egr_root_sendmsg6(struct bpf_sock_addr *ctx)
{
	return egr_root_verdict(EGR_CNT_SENDMSG_DENY);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
