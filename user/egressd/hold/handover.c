// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The handover from an egressd without a listener holder (handover.h).
 */
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "confine.h"
#include "hold/handover.h"
#include "hold/lhold.h"
#include "log.h"
#include "loop.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

struct fdset {
	int *fd;
	size_t n;
};

static void fdset_close(struct fdset *s)
{
	for (size_t i = 0; i < s->n; i++)
		close(s->fd[i]);
	free(s->fd);
	s->fd = NULL;
	s->n = 0;
}

/* The pid's comm is egressd: an ExecStop= never takes another program's
 * sockets, whatever its $MAINPID says. */
static bool is_egressd(pid_t pid, char *comm, size_t len)
{
	char path[64];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	snprintf(comm, len, "?");
	f = fopen(path, "re");
	if (!f)
		return false;
	if (!fgets(comm, (int)len, f))
		snprintf(comm, len, "?");
	fclose(f);
	comm[strcspn(comm, "\n")] = '\0';
	return !strcmp(comm, "egressd");
}

/* Every socket of pid the holder would keep, duplicated into ours. */
static int take_sockets(int pidfd, pid_t pid, struct fdset *out)
{
	char dir[64], path[96], link[64];
	struct dirent *de;
	DIR *d;
	int err = 0;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	d = opendir(dir);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char *end;
		long n = strtol(de->d_name, &end, 10);
		ssize_t ll;
		int fd, *grown;

		if (de->d_name[0] < '0' || de->d_name[0] > '9' || *end || n < 0 || n > INT32_MAX)
			continue;
		snprintf(path, sizeof(path), "%s/%ld", dir, n);
		ll = readlink(path, link, sizeof(link) - 1);
		if (ll < 0)
			continue; /* closed meanwhile */
		link[ll] = '\0';
		if (strncmp(link, "socket:[", 8))
			continue;
		fd = (int)syscall(SYS_pidfd_getfd, pidfd, (int)n, 0U);
		if (fd < 0) {
			if (errno == EBADF)
				continue; /* closed since readlink */
			err = -errno;
			log_error("handover: cannot take fd %ld of egressd %d: %s", n, (int)pid,
				  strerror(errno));
			break;
		}
		if (!egr_lhold_holdable(fd)) {
			close(fd); /* upstream, control, metrics: not a listener of a sandbox */
			continue;
		}
		grown = realloc(out->fd, (out->n + 1) * sizeof(*out->fd));
		if (!grown) {
			close(fd);
			err = -ENOMEM;
			break;
		}
		out->fd = grown;
		out->fd[out->n++] = fd;
	}
	closedir(d);
	return err;
}

static bool keep_for_switch(int cap, void *ctx)
{
	(void)ctx;
	return cap == CAP_NET_ADMIN || cap == CAP_SETUID || cap == CAP_SETGID;
}

static bool keep_net_admin(int cap, void *ctx)
{
	(void)ctx;
	return cap == CAP_NET_ADMIN;
}

/* Effective and permitted: CAP_NET_ADMIN alone (the holder's PUT names a
 * socket by its network namespace, which SIOCGSKNS gives only with it). */
static int net_admin_only(void)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];
	uint32_t bit = 1u << (CAP_NET_ADMIN % 32);

	if (syscall(SYS_capget, &hdr, data) < 0)
		return -errno;
	memset(data, 0, sizeof(data));
	data[CAP_NET_ADMIN / 32].effective = bit;
	data[CAP_NET_ADMIN / 32].permitted = bit;
	if (syscall(SYS_capset, &hdr, data) < 0)
		return -errno;
	return 0;
}

/* The sockets taken, become the user the holder must be: the successor's
 * (the holder answers only its own uid). */
static int become(const struct egr_handover *h)
{
	int err;

	if (!h->user || geteuid() == h->uid)
		return egr_caps_restrict(keep_net_admin, NULL, NULL);
	err = egr_caps_restrict(keep_for_switch, NULL, NULL);
	if (err)
		return err;
	if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0 || setgroups(1, &h->gid) < 0 ||
	    setresgid(h->gid, h->gid, h->gid) < 0 || setresuid(h->uid, h->uid, h->uid) < 0)
		return -errno;
	prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);
	return net_admin_only();
}

/* Whether a holder answers the successor's user: asked from a child that
 * becomes that user (the holder answers only its own uid), so that this
 * process keeps root to take the sockets only when none does. 1, 0 or a
 * negative errno (the child could not become the user). */
static int holder_answers(const struct egr_handover *h)
{
	pid_t child = fork();
	int st;

	if (child < 0)
		return -errno;
	if (!child) {
		int err = become(h);

		if (err)
			log_error("handover: cannot become %s to ask the listener holder: %s",
				  h->user ? h->user : "ourselves", strerror(-err));
		_exit(err ? 2 : egr_lhold_answers(h->holder) ? 0 : 1);
	}
	while (waitpid(child, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (!WIFEXITED(st) || WEXITSTATUS(st) > 1)
		return -EPERM;
	return WEXITSTATUS(st) == 0;
}

/* The taken sockets into a holder of ours; how many it confirmed. */
static int hand_to_holder(const struct egr_handover *h, const struct fdset *s, size_t *held,
			  long *holder_pid)
{
	struct egr_lhold_stats st;
	struct egr_loop *loop;
	struct egr_lhold *lh;
	int err;

	*held = 0;
	err = egr_loop_new(&loop);
	if (err)
		return err;
	err = egr_lhold_open(loop, h->holder, "/proc/self/exe", h->linger_s, &lh);
	if (!err) {
		for (size_t i = 0; i < s->n; i++)
			if (!egr_lhold_put(lh, s->fd[i]))
				(*held)++;
		egr_lhold_stats(lh, &st);
		*holder_pid = st.holder_pid;
		/* Closing ours below must not let anything go: the holder
		 * keeps its own duplicates. */
		egr_lhold_freeze(lh);
		egr_lhold_free(lh);
	}
	egr_loop_free(loop);
	return err;
}

int egr_handover_run(const struct egr_handover *h)
{
	struct fdset taken = { 0 };
	char comm[32];
	long holder_pid = 0;
	size_t held = 0;
	int pidfd, err;

	if (!h->pid) {
		log_info("handover: no egressd to take listeners from (no main process)");
		return 0;
	}
	pidfd = (int)syscall(SYS_pidfd_open, h->pid, 0U);
	if (pidfd < 0) {
		if (errno == ESRCH) {
			log_info("handover: egressd %d is gone; nothing to take", (int)h->pid);
			return 0;
		}
		err = -errno;
		log_error("handover: pidfd_open %d: %s", (int)h->pid, strerror(-err));
		return err;
	}
	if (!is_egressd(h->pid, comm, sizeof(comm))) {
		close(pidfd);
		log_error("handover: process %d is no egressd (it is \"%s\"); taking nothing",
			  (int)h->pid, comm);
		return -ESRCH;
	}
	/* A current egressd has a holder: nothing to take (taking first would
	 * duplicate every listener of it at every stop, for nothing). */
	err = holder_answers(h);
	if (err > 0) {
		close(pidfd);
		log_info("handover: a listener holder answers at %s: egressd %d hands its own "
			 "listeners over", h->holder, (int)h->pid);
		return 0;
	}
	if (err < 0) {
		close(pidfd);
		log_error("handover: the listener holder could not be asked; taking nothing");
		return err;
	}
	err = take_sockets(pidfd, h->pid, &taken);
	close(pidfd);
	if (!err) {
		err = become(h);
		if (err)
			log_error("handover: cannot become %s with CAP_NET_ADMIN alone: %s",
				  h->user ? h->user : "ourselves", strerror(-err));
	}
	if (err) {
		fdset_close(&taken);
		return err;
	}
	if (egr_lhold_answers(h->holder)) {
		/* One came up meanwhile (egressd started it): it has them. */
		log_info("handover: a listener holder answers at %s: egressd %d hands its own "
			 "listeners over", h->holder, (int)h->pid);
		fdset_close(&taken);
		return 0;
	}
	if (!taken.n) {
		log_info("handover: egressd %d has no listener to hand over", (int)h->pid);
		return 0;
	}
	err = hand_to_holder(h, &taken, &held, &holder_pid);
	if (!err)
		log_info("handover: %zu of %zu listener socket(s) of egressd %d held by the "
			 "listener holder %ld for its successor", held, taken.n, (int)h->pid,
			 holder_pid);
	if (!err && held < taken.n)
		err = -EIO;
	fdset_close(&taken);
	return err;
}
