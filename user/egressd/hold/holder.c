// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The listener holder: a process of its own (egressd forks and execs it,
 * `egressd --listener-holder`) that keeps a duplicate of every DNS and
 * inspecting-proxy listener socket egressd hands it, so that the sockets
 * outlive egressd: a SIGTERM, an upgrade, a kill -9 or a watchdog abort.
 * While no egressd runs, the kernel keeps queueing the sandboxes' queries
 * and connections on them (nothing reads them, nothing passes); the next
 * egressd TAKEs them back and answers what waited.
 *
 * It does nothing else: no capability (all dropped at start), no socket
 * but its own listening one and its clients; a peer must have its uid and
 * its cgroup (peer_ok; the socket is 0600 in egressd's directory as well).
 * It exits linger_s after the last egressd disconnected if none came back,
 * closing what it held (the sandboxes' DNS then fails at once, closed, as
 * when egressd is down without a holder), or on QUIT.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "confine.h"
#include "hold/hold_proto.h"
#include "log.h"

struct held {
	char key[HOLD_KEY_MAX];
	int fd;
};

struct holder {
	struct held *h;
	size_t n, cap;
	int cl[HOLD_MAX_CLIENTS];
	size_t ncl;
	bool quit;
	unsigned refused;
	char cgroup[4096]; /* ours, the "0::" line: egressd's */
};

static bool keep_none(int cap, void *ctx)
{
	return false;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static struct held *find(struct holder *s, const char *key)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->h[i].key, key))
			return &s->h[i];
	return NULL;
}

static int put(struct holder *s, const char *key, int fd)
{
	struct held *e = find(s, key);

	if (e) {
		close(e->fd);
		e->fd = fd;
		return 0;
	}
	if (s->n >= HOLD_MAX_FDS)
		return -ENOSPC;
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct held *nh = realloc(s->h, cap * sizeof(*nh));

		if (!nh)
			return -ENOMEM;
		s->h = nh;
		s->cap = cap;
	}
	snprintf(s->h[s->n].key, sizeof(s->h[s->n].key), "%s", key);
	s->h[s->n++].fd = fd;
	return 0;
}

static int del(struct holder *s, const char *key)
{
	struct held *e = find(s, key);

	if (!e)
		return -ENOENT;
	close(e->fd);
	*e = s->h[--s->n];
	return 0;
}

/* One request of client fd. < 0: drop the client. */
static int serve(struct holder *s, int fd)
{
	char buf[HOLD_MSG_MAX + 1], out[HOLD_MSG_MAX + 16];
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = buf, .iov_len = HOLD_MSG_MAX };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	int got = -1, err = 0;
	ssize_t n;

	n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(&got, CMSG_DATA(c), sizeof(int));
	if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		err = -EMSGSIZE;
	} else if (!strncmp(buf, "PUT ", 4) && got >= 0 && strlen(buf + 4) < HOLD_KEY_MAX) {
		err = put(s, buf + 4, got);
		if (!err)
			got = -1;
	} else if (!strncmp(buf, "DEL ", 4) && got < 0) {
		err = del(s, buf + 4);
	} else if (!strcmp(buf, "TAKE") && got < 0) {
		for (size_t i = 0; i < s->n; i++) {
			snprintf(out, sizeof(out), "FD %s", s->h[i].key);
			if (egr_hold_send(fd, out, s->h[i].fd) < 0)
				return -1;
		}
		snprintf(out, sizeof(out), "END %zu", s->n);
		return egr_hold_send(fd, out, -1);
	} else if (!strcmp(buf, "PING") && got < 0) {
		snprintf(out, sizeof(out), "OK %ld %zu", (long)getpid(), s->n);
		return egr_hold_send(fd, out, -1);
	} else if (!strcmp(buf, "QUIT") && got < 0) {
		s->quit = true;
	} else {
		err = -EINVAL;
	}
	if (got >= 0)
		close(got);
	if (err)
		snprintf(out, sizeof(out), "ERR %d", -err);
	else
		snprintf(out, sizeof(out), "OK");
	return egr_hold_send(fd, out, -1);
}

/* The "0::" line of /proc/<pid>/cgroup (pid 0: ourselves); "" if none. */
static void cgroup_of(pid_t pid, char *buf, size_t len)
{
	char path[64], line[4096];
	FILE *f;

	buf[0] = '\0';
	if (pid)
		snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	else
		snprintf(path, sizeof(path), "/proc/self/cgroup");
	f = fopen(path, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "0::", 3)) {
			snprintf(buf, len, "%s", line);
			break;
		}
	fclose(f);
}

/*
 * Only egressd: its uid, and its cgroup, which is the holder's own (egressd
 * started it; a restarted egressd is in the same service cgroup). No
 * sandbox is egressd's cgroup (attach refuses it) and no sandboxed process
 * leaves its own, so root inside a sandbox that reaches the socket path
 * gets nothing: not the listeners (it would read other sandboxes'
 * queries), not a DEL (their DNS after the next restart).
 */
static bool peer_ok(struct holder *s, int fd)
{
	char cg[4096];
	struct ucred cr;
	socklen_t cl = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 || cr.uid != geteuid())
		return false;
	cgroup_of(cr.pid, cg, sizeof(cg));
	return s->cgroup[0] && !strcmp(cg, s->cgroup);
}

static void accept_one(struct holder *s, int lfd)
{
	struct timeval tv = { .tv_sec = 2 };
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return;
	if (s->ncl >= HOLD_MAX_CLIENTS || !peer_ok(s, fd)) {
		s->refused++;
		log_warn("listener holder: refused a peer (not egressd's uid and cgroup; %u so "
			 "far)", s->refused);
		close(fd);
		return;
	}
	/* A client that stops reading cannot hold the holder up for long. */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	s->cl[s->ncl++] = fd;
}

int egr_holder_main(int lfd, unsigned linger_s)
{
	struct holder s = { 0 };
	struct pollfd pf[1 + HOLD_MAX_CLIENTS];
	uint64_t alone_since = now_ms();
	unsigned dropped = 0;

	egr_log_init_priority(getenv("EGRESSD_LOG_PRIORITY_PREFIX") != NULL);
	unsetenv("EGRESSD_LOG_PRIORITY_PREFIX");
	signal(SIGPIPE, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	/* no_new_privs first: it lets the capabilities go also without
	 * CAP_SETPCAP (user/lib/confine.c). */
	prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
	if (egr_caps_restrict(keep_none, NULL, &dropped) < 0)
		log_warn("listener holder: dropping capabilities: %m");
	cgroup_of(0, s.cgroup, sizeof(s.cgroup));
	log_info("listener holder %ld: serving, lingering %u s without egressd", (long)getpid(),
		 linger_s);
	while (!s.quit) {
		int timeout = -1, n;

		if (!s.ncl) {
			uint64_t left, gone = now_ms() - alone_since;

			if (gone >= (uint64_t)linger_s * 1000)
				break;
			left = (uint64_t)linger_s * 1000 - gone;
			timeout = left > 60000 ? 60000 : (int)left;
		}
		pf[0] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		for (size_t i = 0; i < s.ncl; i++)
			pf[1 + i] = (struct pollfd){ .fd = s.cl[i], .events = POLLIN };
		n = poll(pf, 1 + s.ncl, timeout);
		if (n < 0 && errno != EINTR)
			break;
		if (n <= 0)
			continue;
		/* Clients from the back: removing one moves the last into its slot. */
		for (size_t i = s.ncl; i-- > 0;) {
			if (!pf[1 + i].revents || serve(&s, s.cl[i]) == 0)
				continue;
			close(s.cl[i]);
			s.cl[i] = s.cl[--s.ncl];
			if (!s.ncl)
				alone_since = now_ms();
		}
		if (pf[0].revents & POLLIN)
			accept_one(&s, lfd);
	}
	log_info("listener holder %ld: %s; releasing %zu socket(s)", (long)getpid(),
		 s.quit ? "told to quit" : "no egressd came back", s.n);
	for (size_t i = 0; i < s.n; i++)
		close(s.h[i].fd);
	for (size_t i = 0; i < s.ncl; i++)
		close(s.cl[i]);
	free(s.h);
	close(lfd);
	return 0;
}
