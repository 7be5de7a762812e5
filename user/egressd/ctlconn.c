// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Control connections: see ctlconn.h. Each connection is READING (bytes
 * appended as they arrive, level-triggered EPOLLIN) until its newline, then
 * WRITING (EPOLLOUT until the reply is out), then closed or handed to the
 * event stream. One timer closes whatever is past its deadline. A reply
 * whose request wrote records that are not durable yet waits in COMMIT, out
 * of epoll, until the commit queue's flush (on_commit, once per loop
 * iteration for every such reply) has put them on disk.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "ctlconn.h"
#include "fileio.h"
#include "obs/events.h"
#include "log.h"
#include "proto.h"

#define CTL_TICK_MS 50
#define CTL_READ_CHUNK 65536

enum conn_state { C_READING = 1, C_COMMIT, C_WRITING };

struct conn {
	struct egr_ctl *ctl;
	int fd;
	enum conn_state state;
	struct ucred cred;
	uint64_t deadline_ns;
	char *buf; /* request bytes, then reply bytes */
	size_t len, cap, off;
	json_t *req; /* kept for the events --follow hand-over */
	bool follow;
	uint32_t follow_sb;
	uint64_t ticket; /* C_COMMIT: the commit batch the reply waits for */
	struct conn *next;
};

struct egr_ctl {
	struct egr_loop *loop;
	struct egr_server *srv;
	int lfd;
	int timer_fd;
	struct egr_commitq *commit; /* NULL: nothing to wait for */
	bool commit_in_loop;        /* flushed by on_commit, else per reply */
	struct conn *conns;
	struct egr_ctl_stats st;
};

static void conn_close(struct conn *c)
{
	struct egr_ctl *ctl = c->ctl;
	struct conn **pc;

	egr_loop_del(ctl->loop, c->fd);
	close(c->fd);
	for (pc = &ctl->conns; *pc; pc = &(*pc)->next)
		if (*pc == c) {
			*pc = c->next;
			break;
		}
	ctl->st.open--;
	json_decref(c->req);
	free(c->buf);
	free(c);
}

static void on_conn(struct egr_loop *loop, int fd, uint32_t events, void *ctx);

/* Switch c to sending reply (its bytes replace the request's). */
static int conn_reply(struct conn *c, json_t *reply)
{
	char *text = reply ? json_dumps(reply, JSON_COMPACT) : NULL;
	int err;

	if (!text)
		return -ENOMEM;
	free(c->buf);
	c->buf = text;
	c->len = strlen(text);
	c->buf[c->len++] = '\n'; /* overwrites the NUL: no longer a C string */
	c->cap = c->len;
	c->off = 0;
	c->state = C_WRITING;
	c->deadline_ns = egr_mono_ns() + (uint64_t)EGR_CTL_DEADLINE_MS * 1000000ULL;
	egr_loop_del(c->ctl->loop, c->fd);
	err = egr_loop_add(c->ctl->loop, c->fd, EPOLLOUT, on_conn, c);
	return err;
}

/* c's batch was flushed (err: what the flush returned): send its reply, or
 * an error in its place when the batch could not be made durable. */
static int conn_commit_done(struct conn *c, int err)
{
	int st = egr_commit_status(c->ctl->commit, c->ticket);

	if (st < 0) {
		json_t *e = egr_server_error(EGR_ERR_INTERNAL, "the request's audit record or state "
							 "file could not be made durable; it is "
							 "not acknowledged");

		log_error("control: reply to pid %d withheld: %s", c->cred.pid,
			  strerror(-(err ?: st)));
		c->follow = false;
		err = conn_reply(c, e);
		json_decref(e);
		return err;
	}
	c->state = C_WRITING;
	return egr_loop_add(c->ctl->loop, c->fd, EPOLLOUT, on_conn, c);
}

/* The newline arrived: parse, answer, start writing. */
static int conn_request(struct conn *c, size_t len)
{
	json_error_t jerr;
	json_t *req, *reply;
	struct ucred now;
	const char *why;
	int err;

	/* Judged again now: a peer admitted at accept may have been moved, or
	 * marked escaped, since (issue 23 finding 1); the request is served only
	 * if the same process still passes, and it is not even parsed if not. */
	if (!egr_server_admit(c->ctl->srv, c->fd, &now, &why)) {
		c->ctl->st.refused_at_request++;
		log_warn("control: refused the request of pid %d uid %u (admitted at accept): %s",
			 c->cred.pid, c->cred.uid, why ?: "refused");
		reply = egr_server_error(EGR_ERR_FORBIDDEN, "peer is sandboxed, or neither root nor "
							    "in the control group");
		err = conn_reply(c, reply);
		json_decref(reply);
		return err;
	}
	req = json_loadb(c->buf, len, JSON_DISABLE_EOF_CHECK | JSON_REJECT_DUPLICATES, &jerr);
	if (!req || !json_is_object(req)) {
		reply = egr_server_error(EGR_ERR_BAD_REQUEST,
					 req ? "request is not a JSON object" : jerr.text);
		json_decref(req);
		req = NULL;
	} else {
		reply = egr_server_answer(c->ctl->srv, c->fd, &c->cred, req);
	}
	c->follow = req && egr_server_follows(req, reply, &c->follow_sb);
	c->req = req;
	err = conn_reply(c, reply);
	json_decref(reply);
	/* Never acknowledge what is not on disk: wait for the flush. */
	if (err || !c->ctl->commit || !(c->ticket = egr_commit_ticket(c->ctl->commit)))
		return err;
	c->state = C_COMMIT;
	egr_loop_del(c->ctl->loop, c->fd);
	if (!c->ctl->commit_in_loop)
		err = conn_commit_done(c, egr_commitq_flush(c->ctl->commit));
	return err;
}

/* 0: keep the connection, 1: done (close), <0: error (close). */
static int conn_read(struct conn *c)
{
	for (int round = 0; round < 4; round++) {
		ssize_t n;
		char *nl;

		if (c->cap - c->len < CTL_READ_CHUNK) {
			size_t cap = c->cap ? c->cap * 2 : CTL_READ_CHUNK;
			char *nb;

			if (c->len >= (size_t)EGR_PROTO_MAX_REQUEST + 1)
				goto too_large;
			while (cap - c->len < CTL_READ_CHUNK)
				cap *= 2;
			nb = realloc(c->buf, cap);
			if (!nb)
				return -ENOMEM;
			c->buf = nb;
			c->cap = cap;
		}
		n = recv(c->fd, c->buf + c->len, c->cap - c->len, MSG_DONTWAIT);
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
		if (n == 0)
			return -ECONNRESET; /* EOF before the newline */
		nl = memchr(c->buf + c->len, '\n', (size_t)n);
		c->len += (size_t)n;
		if (nl) {
			if ((size_t)(nl - c->buf) > EGR_PROTO_MAX_REQUEST)
				goto too_large;
			return conn_request(c, (size_t)(nl - c->buf) + 1);
		}
		if (c->len > EGR_PROTO_MAX_REQUEST)
			goto too_large;
	}
	return 0; /* more later: others get their turn */
too_large: {
		json_t *reply = egr_server_error(EGR_ERR_TOO_LARGE, "request exceeds 64 MiB");
		int err = conn_reply(c, reply);

		json_decref(reply);
		return err;
	}
}

/* 0: more to send, 1: all sent, <0: error. */
static int conn_write(struct conn *c)
{
	while (c->off < c->len) {
		ssize_t n = send(c->fd, c->buf + c->off, c->len - c->off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
		}
		c->off += (size_t)n;
	}
	return 1;
}

static void conn_done(struct conn *c)
{
	struct egr_server *srv = c->ctl->srv;
	int err;

	/* The event stream keeps its own dup of the fd. */
	if (c->follow && srv->events && (err = egr_events_subscribe(srv->events, c->fd,
								    c->follow_sb)))
		log_warn("control: events --follow for pid %d: %s", c->cred.pid, strerror(-err));
	conn_close(c);
}

static void on_conn(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct conn *c = ctx;
	int rc;

	if (c->state == C_READING) {
		rc = conn_read(c);
		if (rc < 0) {
			if (rc != -ECONNRESET)
				log_warn("control: request from pid %d: %s", c->cred.pid,
					 strerror(-rc));
			conn_close(c);
			return;
		}
		if (c->state != C_WRITING)
			return;
	}
	rc = conn_write(c);
	if (rc < 0) {
		log_warn("control: reply to pid %d: %s", c->cred.pid, strerror(-rc));
		conn_close(c);
	} else if (rc == 1) {
		conn_done(c);
	}
}

/* Flush the commit queue, then release the replies that waited for it; a
 * batch that could not be made durable turns them into errors. */
static void on_commit(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_ctl *ctl = ctx;
	struct conn *c, *next;
	int ferr;

	ferr = egr_commitq_sync(ctl->commit);
	for (c = ctl->conns; c; c = next) {
		next = c->next;
		if (c->state != C_COMMIT || !egr_commit_status(ctl->commit, c->ticket))
			continue; /* pending cannot happen: the flush covered every ticket */
		if (conn_commit_done(c, ferr)) {
			conn_close(c);
			continue;
		}
		on_conn(loop, c->fd, EPOLLOUT, c); /* usually sends it all right away */
	}
	/* The audit state file names only durable records; it may lag the
	 * replies (docs/audit.md), so it is written after they are out. */
	egr_commitq_after(ctl->commit);
}

static void on_accept(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_ctl *ctl = ctx;

	/* A bounded batch per wake-up; the listener is level-triggered. */
	for (int i = 0; i < 16; i++) {
		int cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		struct ucred cred;
		const char *why;
		struct conn *c;

		if (cfd < 0)
			return;
		if (!egr_server_admit(ctl->srv, cfd, &cred, &why)) {
			ctl->st.refused++;
			egr_server_refuse(cfd, &cred, why);
			close(cfd);
			continue;
		}
		if (ctl->st.open >= EGR_CTL_MAX_CONNS) {
			ctl->st.overflow++;
			log_warn("control: %u connections in service, closing one from pid %d",
				 ctl->st.open, cred.pid);
			close(cfd);
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (!c) {
			close(cfd);
			continue;
		}
		c->ctl = ctl;
		c->fd = cfd;
		c->cred = cred;
		c->state = C_READING;
		c->deadline_ns = egr_mono_ns() + (uint64_t)EGR_CTL_DEADLINE_MS * 1000000ULL;
		if (egr_loop_add(ctl->loop, cfd, EPOLLIN | EPOLLRDHUP, on_conn, c)) {
			free(c);
			close(cfd);
			continue;
		}
		c->next = ctl->conns;
		ctl->conns = c;
		ctl->st.open++;
		ctl->st.accepted++;
	}
}

static void on_tick(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_ctl *ctl = ctx;
	uint64_t now = egr_mono_ns(), exp;
	struct conn *c, *next;

	if (read(fd, &exp, sizeof(exp)) < 0 && errno != EAGAIN)
		log_debug("control: timer read: %m");
	for (c = ctl->conns; c; c = next) {
		next = c->next;
		if (c->deadline_ns > now)
			continue;
		log_warn("control: pid %d did not %s within %d ms, closing", c->cred.pid,
			 c->state == C_READING ? "send its whole request" : "take its whole reply",
			 EGR_CTL_DEADLINE_MS);
		ctl->st.timed_out++;
		conn_close(c);
	}
}

int egr_ctl_start(struct egr_loop *loop, int lfd, struct egr_server *srv, struct egr_ctl **out)
{
	struct itimerspec its = {
		.it_interval = { 0, CTL_TICK_MS * 1000000L },
		.it_value = { 0, CTL_TICK_MS * 1000000L },
	};
	struct egr_ctl *ctl = calloc(1, sizeof(*ctl));
	int err = 0;

	if (!ctl)
		return -ENOMEM;
	ctl->loop = loop;
	ctl->srv = srv;
	ctl->lfd = lfd;
	ctl->timer_fd = -1;
	err = egr_loop_add(loop, lfd, EPOLLIN, on_accept, ctl);
	if (err) {
		free(ctl);
		return err;
	}
	ctl->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (ctl->timer_fd < 0 || timerfd_settime(ctl->timer_fd, 0, &its, NULL) < 0 ||
	    (err = egr_loop_add(loop, ctl->timer_fd, EPOLLIN, on_tick, ctl))) {
		err = ctl->timer_fd < 0 || !err ? -errno : err;
		if (ctl->timer_fd >= 0)
			close(ctl->timer_fd);
		egr_loop_del(loop, lfd);
		free(ctl);
		return err;
	}
	ctl->commit = egr_commitq_default();
	ctl->commit_in_loop = ctl->commit && egr_commitq_fd(ctl->commit) >= 0 &&
			      !egr_loop_add(loop, egr_commitq_fd(ctl->commit), EPOLLIN, on_commit,
					    ctl);
	if (ctl->commit && !ctl->commit_in_loop)
		log_warn("control: commit queue not in the loop; one flush per reply");
	*out = ctl;
	return 0;
}

void egr_ctl_free(struct egr_ctl *ctl)
{
	if (!ctl)
		return;
	while (ctl->conns)
		conn_close(ctl->conns);
	egr_loop_del(ctl->loop, ctl->lfd);
	egr_loop_del(ctl->loop, ctl->timer_fd);
	close(ctl->timer_fd);
	if (ctl->commit_in_loop)
		egr_loop_del(ctl->loop, egr_commitq_fd(ctl->commit));
	free(ctl);
}

void egr_ctl_stats(const struct egr_ctl *ctl, struct egr_ctl_stats *out)
{
	*out = ctl->st;
}
