// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * egressd's side of the listener holder (lhold.h): start or find it, take
 * the predecessor's sockets back, hand new listeners over, let go of the
 * ones closed for good, and start a new holder (handing it everything
 * again) if the one in use exits.
 */
#include <arpa/inet.h>
#include <signal.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hold/hold_proto.h"
#include "hold/lhold.h"
#include "log.h"
#include "loop.h"
#include "obs/mbuf.h"

struct lh_id {
	uint64_t dev, ino;
	int family, type;
	uint16_t port;
};

struct lh_sock {
	char key[HOLD_KEY_MAX];
	int fd;
	struct lh_id id;
};

struct egr_lhold {
	struct egr_loop *loop;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char exe[256];
	unsigned linger_s;
	int conn;
	int pidfd; /* the holder in use: its exit is what on_conn waits for */
	bool warned;
	bool frozen; /* exiting: nothing is let go any more */
	struct lh_sock *taken; /* handed over at start, not claimed (yet) */
	size_t ntaken;
	struct lh_sock *mine;  /* ours, held */
	size_t nmine, capmine;
	struct egr_lhold_stats st;
};

/* Bound to a device (SO_BINDTOIFINDEX): a device sandbox's DNS listener,
 * on an address of its device (docs/dns.md "Device sandboxes"). */
static bool on_device(int fd)
{
	socklen_t ol = sizeof(int);
	int idx = 0;

	return getsockopt(fd, SOL_SOCKET, SO_BINDTOIFINDEX, &idx, &ol) == 0 && idx > 0;
}

/* What the kernel says the socket is; -EINVAL when it is no listener of
 * ours (an unconnected UDP socket or a listening TCP one, on loopback, or
 * on a specific address of the device it is bound to). */
static int sock_id(int fd, struct lh_id *id)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss), ol = sizeof(int);
	struct stat st;
	int v = 0, nsfd;

	memset(id, 0, sizeof(*id));
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &id->family, &ol) < 0)
		return -errno;
	ol = sizeof(int);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &id->type, &ol) < 0)
		return -errno;
	if (id->type != SOCK_DGRAM && id->type != SOCK_STREAM)
		return -EINVAL;
	ol = sizeof(int);
	if (id->type == SOCK_STREAM &&
	    (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &ol) < 0 || !v))
		return -EINVAL;
	/* A connected datagram socket is a client's (an upstream query). */
	if (id->type == SOCK_DGRAM && getpeername(fd, (struct sockaddr *)&ss, &sl) == 0)
		return -EINVAL;
	sl = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
		return -errno;
	if (ss.ss_family == AF_INET && id->family == AF_INET) {
		const struct sockaddr_in *s = (const void *)&ss;

		if (s->sin_addr.s_addr != htonl(INADDR_LOOPBACK) &&
		    (s->sin_addr.s_addr == htonl(INADDR_ANY) || !on_device(fd)))
			return -EINVAL;
		id->port = ntohs(s->sin_port);
	} else if (ss.ss_family == AF_INET6 && id->family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)&ss;

		if (memcmp(&s->sin6_addr, &in6addr_loopback, 16) &&
		    (!memcmp(&s->sin6_addr, &in6addr_any, 16) || !on_device(fd)))
			return -EINVAL;
		id->port = ntohs(s->sin6_port);
	} else {
		return -EINVAL;
	}
	if (!id->port)
		return -EINVAL;
	nsfd = ioctl(fd, SIOCGSKNS);
	if (nsfd < 0)
		return -errno;
	v = fstat(nsfd, &st);
	close(nsfd);
	if (v < 0)
		return -errno;
	id->dev = st.st_dev;
	id->ino = st.st_ino;
	return 0;
}

static void id_key(const struct lh_id *id, char *key, size_t len)
{
	snprintf(key, len, "%s/%s/%llx/%llx/%u", id->family == AF_INET ? "ip4" : "ip6",
		 id->type == SOCK_DGRAM ? "udp" : "tcp", (unsigned long long)id->dev,
		 (unsigned long long)id->ino, id->port);
}

/* One message: its text into buf, a descriptor it carried into *fd (-1). */
static int recv_msg(int conn, char *buf, size_t len, int *fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = buf, .iov_len = len - 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	ssize_t n = recvmsg(conn, &mh, MSG_CMSG_CLOEXEC);

	*fd = -1;
	if (n < 0)
		return -errno;
	if (n == 0)
		return -ECONNRESET;
	buf[n] = '\0';
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(fd, CMSG_DATA(c), sizeof(int));
	return 0;
}

/* A request and its "OK"/"ERR n" answer. */
static int rpc(struct egr_lhold *h, const char *msg, int fd, char *out, size_t outlen)
{
	char buf[HOLD_MSG_MAX + 1];
	int got, err;

	if (h->conn < 0)
		return -ENOTCONN;
	err = egr_hold_send(h->conn, msg, fd);
	if (!err)
		err = recv_msg(h->conn, buf, sizeof(buf), &got);
	if (err)
		return err;
	if (got >= 0)
		close(got);
	if (out)
		snprintf(out, outlen, "%s", buf);
	if (!strncmp(buf, "OK", 2))
		return 0;
	if (!strncmp(buf, "ERR ", 4) && atoi(buf + 4) > 0)
		return -atoi(buf + 4);
	return -EPROTO;
}

static int dial(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 2 };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), err;

	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	/* A holder that stops answering costs the loop 2 s, not forever. */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return fd;
}

/*
 * A new holder on path: the socket bound and listening here (so the first
 * connect cannot race its start), then a double fork so that it is nobody's
 * child (no zombie, and egressd's exit does not concern it), in a session
 * of its own (a terminal's ^C to egressd's group does not reach it).
 */
static int spawn(struct egr_lhold *h)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	char linger[16];
	pid_t pid;
	int lfd, err, status;

	if (lstat(h->path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return -EEXIST; /* not ours to remove */
		unlink(h->path); /* a holder that is gone left it */
	}
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", h->path);
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(h->path, 0600) < 0 ||
	    listen(lfd, HOLD_MAX_CLIENTS) < 0) {
		err = -errno;
		close(lfd);
		return err;
	}
	snprintf(linger, sizeof(linger), "%u", h->linger_s);
	pid = fork();
	if (pid < 0) {
		err = -errno;
		close(lfd);
		return err;
	}
	if (pid == 0) {
		sigset_t none;

		if (fork() != 0)
			_exit(0);
		/* egressd blocks the signals its loop reads from a signalfd: an
		 * exec keeps the mask, and a holder deaf to SIGTERM is not what
		 * an operator expects. */
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		/* Nothing of the service manager's is the holder's to use. */
		unsetenv("NOTIFY_SOCKET");
		unsetenv("WATCHDOG_USEC");
		unsetenv("WATCHDOG_PID");
		setsid();
		if (chdir("/") < 0)
			_exit(126);
		if (lfd == 3)
			fcntl(3, F_SETFD, 0);
		else if (dup2(lfd, 3) < 0)
			_exit(126);
		syscall(SYS_close_range, 4U, ~0U, 0U);
		/* Its log lines as egressd's: journald priorities when egressd
		 * writes them (JOURNAL_STREAM is inherited, the forced kind is
		 * said here). */
		if (egr_log_priority_prefix())
			setenv("EGRESSD_LOG_PRIORITY_PREFIX", "1", 1);
		execl(h->exe, "egressd", "--run-listener-holder", "3", linger, (char *)NULL);
		_exit(127);
	}
	close(lfd);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return 0;
}

static void on_conn(struct egr_loop *loop, int fd, uint32_t events, void *ctx);

/*
 * A holder that is exiting (killed, QUIT, its linger over) releases its
 * files in an order of the kernel's: our connection to it can be gone
 * while its listening socket still takes a connect(), which the release
 * of that socket then resets. That holder is gone, not refusing us: wait
 * until its listener no longer accepts (connect() says ECONNREFUSED, and
 * a new one is started) instead of giving up. Bounded: a holder that
 * keeps accepting and resetting is not one that exits.
 */
#define HOLD_DYING_TRIES 50
#define HOLD_DYING_PAUSE_MS 20

static void pause_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* The holder's pid as a pidfd, opened while it answers us (it is alive:
 * the pid is its own); -1 if the kernel has none (then on_conn relies on
 * the retries above alone). */
static int holder_pidfd(long pid)
{
	int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0U);

	return fd < 0 ? -1 : fd;
}

/* Connected to a holder (started if none answers); its pid in the stats. */
static int connect_holder(struct egr_lhold *h, bool *started)
{
	char out[HOLD_MSG_MAX + 1];
	long pid = 0;
	int fd, err = -ECONNRESET;

	*started = false;
	for (int tries = 0; tries < HOLD_DYING_TRIES; tries++) {
		if (tries)
			pause_ms(HOLD_DYING_PAUSE_MS);
		fd = dial(h->path);
		if (fd == -ECONNREFUSED || fd == -ENOENT) {
			err = spawn(h);
			if (err)
				return err;
			*started = true;
			fd = dial(h->path);
		}
		if (fd < 0)
			return fd;
		h->conn = fd;
		err = rpc(h, "PING", -1, out, sizeof(out));
		if (!err && sscanf(out, "OK %ld", &pid) != 1)
			err = -EPROTO;
		if (!err)
			break;
		close(fd);
		h->conn = -1;
		/* Reset by one that was going away (above); anything else, or a
		 * holder we just started, is an answer. */
		if (*started || (err != -ECONNRESET && err != -EPIPE))
			return err;
		if (!tries)
			log_info("listener holder at %s was exiting when we connected; waiting "
				 "for it to be gone", h->path);
	}
	if (err)
		return err;
	h->st.holder_pid = pid;
	if (h->pidfd >= 0)
		close(h->pidfd);
	h->pidfd = holder_pidfd(pid);
	err = egr_loop_add(h->loop, fd, EPOLLIN | EPOLLRDHUP, on_conn, h);
	if (err) {
		close(fd);
		h->conn = -1;
	}
	return err;
}

/* The predecessor's sockets: kept by their kernel identity. */
static int take(struct egr_lhold *h)
{
	char buf[HOLD_MSG_MAX + 1];
	int err, fd;

	err = egr_hold_send(h->conn, "TAKE", -1);
	while (!err) {
		struct lh_sock *t;
		struct lh_id id;

		err = recv_msg(h->conn, buf, sizeof(buf), &fd);
		if (err)
			break;
		if (!strncmp(buf, "END", 3))
			return 0;
		if (strncmp(buf, "FD ", 3) || fd < 0) {
			if (fd >= 0)
				close(fd);
			return -EPROTO;
		}
		if (sock_id(fd, &id) < 0) {
			/* Nothing a successor could use: let it go. */
			log_warn("listener holder: %s is no listener of ours; released", buf + 3);
			char del[HOLD_MSG_MAX + 8];

			close(fd);
			snprintf(del, sizeof(del), "DEL %s", buf + 3);
			rpc(h, del, -1, NULL, 0);
			continue;
		}
		t = realloc(h->taken, (h->ntaken + 1) * sizeof(*t));
		if (!t) {
			close(fd);
			return -ENOMEM;
		}
		h->taken = t;
		t[h->ntaken].fd = fd;
		t[h->ntaken].id = id;
		snprintf(t[h->ntaken].key, sizeof(t[h->ntaken].key), "%s", buf + 3);
		h->ntaken++;
		h->st.handed_over++;
	}
	return err;
}

static int mine_add(struct egr_lhold *h, int fd, const struct lh_id *id, const char *key)
{
	if (h->nmine == h->capmine) {
		size_t cap = h->capmine ? h->capmine * 2 : 16;
		struct lh_sock *m = realloc(h->mine, cap * sizeof(*m));

		if (!m)
			return -ENOMEM;
		h->mine = m;
		h->capmine = cap;
	}
	h->mine[h->nmine].fd = fd;
	h->mine[h->nmine].id = *id;
	snprintf(h->mine[h->nmine].key, sizeof(h->mine[h->nmine].key), "%s", key);
	h->nmine++;
	h->st.held = (uint32_t)h->nmine;
	return 0;
}

/* The holder in use went away (killed, crashed): a new one gets every
 * socket again, or a restart would lose them. */
static void on_conn(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_lhold *h = ctx;
	char b;
	bool started;
	int err;

	if (!(events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) &&
	    recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) != 0)
		return;
	egr_loop_del(loop, fd);
	close(fd);
	h->conn = -1;
	h->st.failures++;
	log_warn("listener holder %ld went away; starting another and handing it %zu socket(s)",
		 h->st.holder_pid, h->nmine);
	h->st.holder_pid = 0;
	/* Our connection closes before the holder's listener does (see
	 * connect_holder): a connect() now can reach the dying holder. Its
	 * pidfd is readable once it has exited, its files all released; a
	 * holder that only dropped us (still running) is dialled again. */
	if (h->pidfd >= 0) {
		struct pollfd pf = { .fd = h->pidfd, .events = POLLIN };

		while (poll(&pf, 1, HOLD_DYING_TRIES * HOLD_DYING_PAUSE_MS) < 0 && errno == EINTR)
			;
		close(h->pidfd);
		h->pidfd = -1;
	}
	err = connect_holder(h, &started);
	for (size_t i = 0; !err && i < h->nmine; i++) {
		char msg[HOLD_MSG_MAX];

		snprintf(msg, sizeof(msg), "PUT %s", h->mine[i].key);
		err = rpc(h, msg, h->mine[i].fd, NULL, 0);
	}
	if (err)
		log_error("listener holder: cannot start another: %s; a restart now loses the "
			  "listeners (DNS fails until the next egressd is up)", strerror(-err));
}

int egr_lhold_open(struct egr_loop *loop, const char *path, const char *self_exe,
		   unsigned linger_s, struct egr_lhold **out)
{
	struct egr_lhold *h;
	bool started = false;
	int err;

	*out = NULL;
	if (strlen(path) >= sizeof(h->path) || strlen(self_exe) >= sizeof(h->exe))
		return -ENAMETOOLONG;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->loop = loop;
	h->conn = -1;
	h->pidfd = -1;
	h->linger_s = linger_s;
	snprintf(h->path, sizeof(h->path), "%s", path);
	snprintf(h->exe, sizeof(h->exe), "%s", self_exe);
	err = connect_holder(h, &started);
	if (!err)
		err = take(h);
	if (err) {
		log_error("listener holder %s: %s; listeners will not outlive this egressd", path,
			  strerror(-err));
		egr_lhold_free(h);
		return err;
	}
	log_info("listener holder %ld (%s): %u socket(s) handed over", h->st.holder_pid,
		 started ? "started" : "running", h->st.handed_over);
	*out = h;
	return 0;
}

void egr_lhold_free(struct egr_lhold *h)
{
	if (!h)
		return;
	if (h->conn >= 0) {
		egr_loop_del(h->loop, h->conn);
		close(h->conn); /* the holder keeps everything */
	}
	if (h->pidfd >= 0)
		close(h->pidfd);
	for (size_t i = 0; i < h->ntaken; i++)
		close(h->taken[i].fd);
	free(h->taken);
	free(h->mine); /* their fds belong to the proxies */
	free(h);
}

int egr_lhold_claim(struct egr_lhold *h, dev_t ns_dev, ino_t ns_ino, int family, int type,
		    uint16_t port)
{
	if (!h || !port)
		return -ENOENT;
	for (size_t i = 0; i < h->ntaken; i++) {
		struct lh_sock t = h->taken[i];

		if (t.id.dev != (uint64_t)ns_dev || t.id.ino != (uint64_t)ns_ino ||
		    t.id.family != family || t.id.type != type || t.id.port != port)
			continue;
		if (mine_add(h, t.fd, &t.id, t.key))
			return -ENOMEM;
		h->taken[i] = h->taken[--h->ntaken];
		h->st.claimed++;
		return t.fd;
	}
	return -ENOENT;
}

int egr_lhold_put(struct egr_lhold *h, int fd)
{
	char key[HOLD_KEY_MAX], msg[HOLD_MSG_MAX];
	struct lh_id id;
	int err;

	if (!h || h->frozen)
		return 0;
	for (size_t i = 0; i < h->nmine; i++)
		if (h->mine[i].fd == fd)
			return 0; /* claimed: held already */
	err = sock_id(fd, &id);
	if (!err) {
		id_key(&id, key, sizeof(key));
		err = mine_add(h, fd, &id, key);
	}
	if (!err) {
		snprintf(msg, sizeof(msg), "PUT %s", key);
		err = rpc(h, msg, fd, NULL, 0);
		/* Not held now, but ours: a new holder (on_conn) gets it. */
	}
	if (err) {
		h->st.failures++;
		if (!h->warned)
			log_warn("listener holder: holding fd %d: %s; a restart would lose it "
				 "(logged once)", fd, strerror(-err));
		h->warned = true;
	}
	return err;
}

void egr_lhold_drop(struct egr_lhold *h, int fd)
{
	char msg[HOLD_MSG_MAX];
	int err;

	if (!h || h->frozen)
		return;
	for (size_t i = 0; i < h->nmine; i++) {
		if (h->mine[i].fd != fd)
			continue;
		snprintf(msg, sizeof(msg), "DEL %s", h->mine[i].key);
		err = rpc(h, msg, -1, NULL, 0);
		if (err && err != -ENOENT)
			h->st.failures++;
		h->mine[i] = h->mine[--h->nmine];
		h->st.held = (uint32_t)h->nmine;
		return;
	}
}

void egr_lhold_freeze(struct egr_lhold *h)
{
	if (h)
		h->frozen = true;
}

void egr_lhold_settle(struct egr_lhold *h)
{
	char msg[HOLD_MSG_MAX];

	if (!h)
		return;
	for (size_t i = 0; i < h->ntaken; i++) {
		snprintf(msg, sizeof(msg), "DEL %s", h->taken[i].key);
		rpc(h, msg, -1, NULL, 0);
		close(h->taken[i].fd);
		h->st.released++;
	}
	if (h->ntaken)
		log_info("listener holder: %zu handed-over socket(s) no sandbox uses; released",
			 h->ntaken);
	h->ntaken = 0;
	log_info("listener holder %ld: %u of %u handed-over socket(s) in use, %u held",
		 h->st.holder_pid, h->st.claimed, h->st.handed_over, h->st.held);
}

size_t egr_lhold_taken_fds(const struct egr_lhold *h, int **fds)
{
	*fds = NULL;
	if (!h || !h->ntaken || !(*fds = calloc(h->ntaken, sizeof(**fds))))
		return 0;
	for (size_t i = 0; i < h->ntaken; i++)
		(*fds)[i] = h->taken[i].fd;
	return h->ntaken;
}

bool egr_lhold_holdable(int fd)
{
	struct lh_id id;

	return sock_id(fd, &id) == 0;
}

bool egr_lhold_answers(const char *path)
{
	char buf[HOLD_MSG_MAX + 1];
	int fd = dial(path), got = -1;
	bool ok;

	if (fd < 0)
		return false;
	ok = !egr_hold_send(fd, "PING", -1) && !recv_msg(fd, buf, sizeof(buf), &got) &&
	     !strncmp(buf, "OK ", 3);
	if (got >= 0)
		close(got);
	close(fd);
	return ok;
}

void egr_lhold_stats(const struct egr_lhold *h, struct egr_lhold_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (h)
		*out = h->st;
}

void egr_lhold_metrics(void *ctx, struct egr_mbuf *mb)
{
	struct egr_lhold_stats st;

	egr_lhold_stats(ctx, &st);
	egr_mbuf_family(mb, "egressd_listener_holder_up", "gauge",
			"1 while a listener holder keeps the DNS and inspecting listeners for the "
			"next egressd (0: a restart now fails DNS while it lasts).");
	egr_mbuf_printf(mb, "egressd_listener_holder_up %d\n",
			ctx && ((const struct egr_lhold *)ctx)->conn >= 0);
	egr_mbuf_family(mb, "egressd_listeners_held", "gauge",
			"Listener sockets the holder keeps for this egressd.");
	egr_mbuf_printf(mb, "egressd_listeners_held %u\n", st.held);
	egr_mbuf_family(mb, "egressd_listeners_handed_over", "gauge",
			"Listener sockets taken back from the holder at start, by what became of "
			"them (claimed by an adopted sandbox, released: nobody's).");
	egr_mbuf_printf(mb, "egressd_listeners_handed_over{fate=\"claimed\"} %u\n", st.claimed);
	egr_mbuf_printf(mb, "egressd_listeners_handed_over{fate=\"released\"} %u\n", st.released);
	egr_mbuf_family(mb, "egressd_listener_holder_failures_total", "counter",
			"Hand-overs the holder did not confirm and holders that went away.");
	egr_mbuf_printf(mb, "egressd_listener_holder_failures_total %llu\n",
			(unsigned long long)st.failures);
}
