// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The control socket's judgement of a peer: see peer.h. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernel/maps.h"
#include "log.h"
#include "peer.h"
#include "sandbox.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

#define EGR_PF_EXITING 0x00000004UL /* include/linux/sched.h PF_EXITING, stable since 2.6 */

static int peer_pidfd_state; /* 0: not probed, 1: SO_PEERPIDFD, -1: pidfd_open fallback */

bool egr_peer_pidfd_supported(void)
{
	return peer_pidfd_state >= 0;
}

/* A pidfd of the peer: the process that connect()ed (SO_PEERPIDFD), or on
 * kernels before 6.5 whatever holds its SO_PEERCRED pid now. -errno when
 * the peer is gone (the kernel refuses a pidfd of a reaped process). */
static int peer_pidfd(int cfd, pid_t pid)
{
	socklen_t len = sizeof(int);
	int fd = -1;

	if (getsockopt(cfd, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) == 0) {
		peer_pidfd_state = 1;
		return fd;
	}
	if (errno != ENOPROTOOPT)
		return -errno;
	if (peer_pidfd_state == 0)
		log_warn("control: this kernel has no SO_PEERPIDFD (Linux 6.5+): peers are held "
			 "by pidfd_open of their SO_PEERCRED pid, from accept on, not from their "
			 "connect()");
	peer_pidfd_state = -1;
	if (pid <= 0)
		return -ESRCH;
	fd = (int)syscall(SYS_pidfd_open, pid, 0);
	return fd < 0 ? -errno : fd;
}

/* Has the process behind pidfd not exited? (It polls readable once it has.) */
static bool pidfd_alive(int pidfd)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };

	return poll(&p, 1, 0) == 0;
}

/* Is the peer in a sandbox now? Its cgroup as /proc says must not be a
 * sandbox or below one. A cgroup egressd cannot resolve to a directory of
 * the cgroup2 mount (no cgroup v2 line, a path outside egressd's cgroup
 * namespace, one that is gone) counts as sandboxed: fail closed. */
static bool peer_in_sandbox(const struct egr_peer_rules *r, pid_t pid)
{
	char path[64], line[4096], full[4096 + 256], real[PATH_MAX];
	bool inside = true;
	FILE *f;

	if (!r->cgroup_root || !r->cgroup_root[0])
		return true;
	snprintf(path, sizeof(path), "/proc/%d/cgroup", pid);
	f = fopen(path, "re");
	if (!f)
		return true; /* cannot tell: fail closed */
	while (fgets(line, sizeof(line), f)) {
		const char *rel = line + 3;

		if (strncmp(line, "0::", 3) != 0)
			continue;
		line[strcspn(line, "\n")] = '\0';
		/* "/../x": outside the cgroup namespace root; " (deleted)": gone. */
		if (rel[0] != '/' || strstr(rel, "/..") || strstr(rel, " (deleted)"))
			break;
		snprintf(full, sizeof(full), "%s%s", r->cgroup_root, strcmp(rel, "/") ? rel : "");
		if (!realpath(full, real) || strcmp(real, full) != 0)
			break;
		inside = egr_reg_confines(r->reg, full);
		break;
	}
	fclose(f);
	return inside;
}

bool egr_peer_stat_exiting(const char *stat)
{
	const char *p = strrchr(stat, ')'); /* comm may hold spaces and parentheses */
	unsigned long flags;
	char *end;

	if (!p || p[1] != ' ' || !p[2])
		return true;
	p += 2;
	if (*p == 'Z' || *p == 'X' || *p == 'x')
		return true;
	/* state ppid pgrp session tty_nr tpgid flags: the 7th field from here */
	for (int i = 0; i < 6; i++) {
		p = strchr(p, ' ');
		if (!p)
			return true;
		p++;
	}
	if (*p < '0' || *p > '9')
		return true;
	flags = strtoul(p, &end, 10);
	if (*end != ' ' && *end != '\n' && *end != '\0')
		return true;
	return flags & EGR_PF_EXITING;
}

/* Has the peer begun to exit? Read AFTER egr_proc_home (peer.h): do_exit()
 * sets PF_EXITING before the guard's sched_process_exit program deletes the
 * record, and the pidfd turns readable only at exit_notify(), long after
 * (exit_mm, exit_files come between). In that window a moved peer has no
 * record and a live pidfd; this is what refuses it. Unreadable: exiting. */
static bool peer_exiting(pid_t pid)
{
	char path[64], buf[1024];
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return true;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	return egr_peer_stat_exiting(buf);
}

/* Is group among the peer's groups (primary or supplementary, /proc)? */
static bool peer_in_group(pid_t pid, const struct ucred *cred, gid_t group)
{
	char path[64], line[4096];
	bool ok = false;
	FILE *f;

	if (cred->gid == group)
		return true;
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (!ok && fgets(line, sizeof(line), f)) {
		char *p, *end;

		if (strncmp(line, "Groups:", 7) != 0)
			continue;
		for (p = line + 7;; p = end) {
			unsigned long g = strtoul(p, &end, 10);

			if (end == p)
				break;
			if ((gid_t)g == group)
				ok = true;
		}
	}
	fclose(f);
	return ok;
}

/* The checks of peer.h on a peer held by pidfd; NULL: admitted. */
static const char *judge_held(const struct egr_peer_rules *r, const struct ucred *cred)
{
	int held;

	/* /proc first, the guard's record second, exiting third (peer.h). */
	if (peer_in_sandbox(r, cred->pid))
		return "peer is in a sandbox";
	if (r->bpf) {
		held = egr_bpf_proc_held(r->bpf, (uint32_t)cred->pid);
		if (held == EGR_PROC_ESCAPED)
			return "peer was moved out of a sandbox (marked escaped)";
		if (held == EGR_PROC_AT_HOME)
			return "peer's home is a sandbox";
		if (held < 0)
			return "peer's escape-guard record cannot be read"; /* fail closed */
	}
	/* After the record: an exiting peer may have lost it already. */
	if (peer_exiting(cred->pid))
		return "peer is exiting";
	if (cred->uid == 0)
		return NULL;
	if (r->group == (gid_t)-1)
		return "peer is not root";
	if (!peer_in_group(cred->pid, cred, r->group))
		return "peer is neither root nor in the control group";
	return NULL;
}

int egr_peer_judge(const struct egr_peer_rules *r, int cfd, struct ucred *cred, const char **why)
{
	socklen_t len = sizeof(*cred);
	const char *no;
	int pidfd;

	memset(cred, 0, sizeof(*cred));
	*why = "peer has no credentials";
	if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, cred, &len) < 0 || cred->pid <= 0)
		return -EPERM;
	pidfd = peer_pidfd(cfd, cred->pid);
	if (pidfd < 0) {
		*why = "peer has exited";
		return -EPERM;
	}
	no = pidfd_alive(pidfd) ? judge_held(r, cred) : "peer has exited";
	/* Still alive after the reads: /proc/<pid> and egr_proc_home[pid]
	 * were the peer's, not a process that reused its pid. */
	if (!no && !pidfd_alive(pidfd))
		no = "peer has exited";
	close(pidfd);
	*why = no;
	return no ? -EPERM : 0;
}
