// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The inspecting proxy (inspect.h, docs/inspect.md): the decision and the
 * relay. Accepting connections and the sandboxes are inspect_accept.c.
 *
 * A connection goes HELLO (reading the first bytes, deadline) ->
 * CONNECTING (the decision allowed it; dialling) -> RELAY (splice both
 * ways). Every fd is registered edge-triggered once, for input and output,
 * and every event pumps both directions until each is blocked (EAGAIN) or
 * done, so no epoll_ctl(MOD) is needed. A pump that hits its round budget
 * (fairness between connections) puts the connection on a ready list that
 * an eventfd makes the loop come back to.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "egressd.h"
#include "httphead.h"
#include "inspect.h"
#include "inspect_int.h"
#include "dns/learned.h"
#include "log.h"
#include "netaddr.h"
#include "tlshello.h"

/* --- decision -------------------------------------------------------------------- */

/* Tell the client a policy refused it, in its own protocol, once its
 * hello was whole: an HTTP request head that named a host gets a 403 with
 * a one-line reason, a ClientHello judged by its name (or lack of one, or
 * ECH) a fatal access_denied alert (RFC 8446 6.2), so a tool reports a
 * refusal instead of a network fault. True when all of it was written:
 * then the close is orderly, since a reset could discard it before the
 * client reads it. Anything else (a timeout, half a hello, bytes of no
 * known protocol) is reset. */
static bool say_denied(struct conn *c, const char *reason)
{
	static const uint8_t alert[] = { 0x15, 0x03, 0x03, 0x00, 0x02, 2, 49 };
	char msg[512], body[384];
	const void *out = msg;
	size_t len;
	int n;

	if (c->proto && !strcmp(c->proto, "tls") &&
	    (c->name[0] || !strcmp(reason, "no_sni") || !strcmp(reason, "ech"))) {
		out = alert;
		len = sizeof(alert);
	} else if (c->proto && !strcmp(c->proto, "http") && c->name[0]) {
		n = snprintf(body, sizeof(body), "egressd policy refused %s: %s\n",
			     c->name[0] ? c->name : "this request", reason);
		if (n < 0 || (size_t)n >= sizeof(body))
			return false;
		n = snprintf(msg, sizeof(msg), "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\n"
			     "Content-Length: %d\r\nConnection: close\r\n\r\n%s", n, body);
		if (n < 0 || (size_t)n >= sizeof(msg))
			return false;
		len = (size_t)n;
	} else {
		return false;
	}
	return send(c->cl.fd, out, len, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)len &&
	       shutdown(c->cl.fd, SHUT_WR) == 0;
}

void egr_insp_deny(struct conn *c, const char *reason)
{
	c->p->st.denied++;
	c->sb->denied++;
	log_debug("inspect: sandbox %u: %s %s refused: %s", c->sb->id, c->proto ? c->proto : "?",
		  c->name[0] ? c->name : "(no name)", reason);
	egr_insp_emit(c, false, false, reason);
	egr_insp_conn_free(c, !say_denied(c, reason));
}

/* --- relay ------------------------------------------------------------------------ */

/* Move what can move from src to dst through the pipe. 1 if anything moved,
 * 0 if blocked or done, -errno on a socket error. */
static int pump_dir(int src, int dst, int pfd[2], size_t *inpipe, bool *eof, bool *shut,
		    uint64_t *bytes)
{
	int moved = 0;

	if (!*eof) {
		ssize_t n = splice(src, NULL, pfd[1], NULL, PIPE_CHUNK,
				   SPLICE_F_NONBLOCK | SPLICE_F_MOVE);

		if (n > 0) {
			*inpipe += (size_t)n;
			moved = 1;
		} else if (n == 0) {
			*eof = true;
		} else if (errno != EAGAIN) {
			return -errno;
		}
	}
	if (*inpipe) {
		ssize_t m = splice(pfd[0], NULL, dst, NULL, *inpipe,
				   SPLICE_F_NONBLOCK | SPLICE_F_MOVE);

		if (m > 0) {
			*inpipe -= (size_t)m;
			*bytes += (uint64_t)m;
			moved = 1;
		} else if (m < 0 && errno != EAGAIN) {
			return -errno;
		}
	}
	if (*eof && !*inpipe && !*shut) {
		/* Half-close: the peer sees EOF, the other way goes on. */
		shutdown(dst, SHUT_WR);
		*shut = true;
	}
	return moved;
}

static void make_ready(struct conn *c)
{
	uint64_t one = 1;

	if (c->ready)
		return;
	c->ready = true;
	c->ready_next = c->p->ready;
	c->p->ready = c;
	if (write(c->p->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_warn("inspect: eventfd: %m");
}

/* One relay round of c's sandbox in this loop turn, if it has one left. */
static bool take_round(struct isb *sb)
{
	uint64_t turn = egr_loop_turn(sb->p->loop);

	if (sb->turn != turn) {
		sb->turn = turn;
		sb->rounds = SB_ROUNDS_PER_TURN;
	}
	if (!sb->rounds)
		return false;
	sb->rounds--;
	return true;
}

/* Returns false when c was freed. */
static bool pump(struct conn *c)
{
	for (int round = 0; round < PUMP_ROUNDS; round++) {
		int a = 0, b;

		if (!take_round(c->sb)) {
			/* Its sandbox's share of this turn is spent: the
			 * ready list brings it back in a later turn. */
			c->p->st.deferred++;
			break;
		}

		if (c->filter) {
			a = egr_insp_filter_pump(c);
			if (a < 0)
				return false;
		} else if (c->hsent < c->hlen) {
			/* Bytes read but not yet sent go first. */
			ssize_t n = send(c->up.fd, c->hello + c->hsent, c->hlen - c->hsent,
					 MSG_NOSIGNAL | MSG_DONTWAIT);

			if (n > 0) {
				c->hsent += (size_t)n;
				c->bytes_out += (uint64_t)n;
				a = 1;
			} else if (n < 0 && errno != EAGAIN) {
				egr_insp_conn_free(c, true);
				return false;
			}
			if (c->hsent == c->hlen) {
				free(c->hello);
				c->hello = NULL;
			}
		} else {
			a = pump_dir(c->cl.fd, c->up.fd, c->pcu, &c->incu, &c->eof_c, &c->shut_u,
				     &c->bytes_out);
		}
		b = pump_dir(c->up.fd, c->cl.fd, c->puc, &c->inuc, &c->eof_u, &c->shut_c,
			     &c->bytes_in);
		if (a < 0 || b < 0) {
			egr_insp_conn_free(c, true);
			return false;
		}
		if (c->shut_u && c->shut_c) {
			egr_insp_conn_free(c, false);
			return false;
		}
		if (a || b)
			c->last_ns = egr_mono_ns();
		else
			return true;
	}
	make_ready(c);
	return true;
}

static void on_side(struct egr_loop *loop, int fd, uint32_t events, void *ctx);

int egr_insp_watch(struct conn *c, struct side *s)
{
	int err = egr_loop_add(c->p->loop, s->fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
			       on_side, s);

	s->watched = !err;
	return err;
}

static void connected(struct conn *c)
{
	int soerr = 0;
	socklen_t sl = sizeof(soerr);

	if (getsockopt(c->up.fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
		soerr = errno;
	if (soerr == EINPROGRESS || soerr == EALREADY)
		return;
	if (soerr) {
		log_debug("inspect: sandbox %u: %s: connect: %s", c->sb->id, c->name,
			  strerror(soerr));
		egr_insp_conn_free(c, true);
		return;
	}
	if (egr_insp_pipe_get(c->p, c->pcu) || egr_insp_pipe_get(c->p, c->puc)) {
		log_warn("inspect: pipe: %m");
		egr_insp_conn_free(c, true);
		return;
	}
	c->state = S_RELAY;
	c->last_ns = egr_mono_ns();
	pump(c);
}

/* A socket for the destination, in the sandbox's network namespace. */
static int dial(struct conn *c)
{
	struct egr_inspect *p = c->p;
	struct sockaddr_storage ss = { 0 };
	socklen_t sl;
	int fd, one = 1, err = 0;

	if (c->sb->netns_fd >= 0 && setns(c->sb->netns_fd, CLONE_NEWNET) < 0)
		return -errno;
	fd = socket(c->orig.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		err = -errno;
	if (c->sb->netns_fd >= 0 && setns(p->self_netns, CLONE_NEWNET) < 0) {
		log_error("inspect: cannot return to egressd's network namespace: %m");
		err = err ? err : -errno;
	}
	if (err) {
		if (fd >= 0)
			close(fd);
		return err;
	}
	if (c->orig.family == AF_INET) {
		struct sockaddr_in *s = (void *)&ss;

		s->sin_family = AF_INET;
		memcpy(&s->sin_addr, c->orig.addr, 4);
		s->sin_port = htons(c->orig.port);
		sl = sizeof(*s);
	} else {
		struct sockaddr_in6 *s = (void *)&ss;

		s->sin6_family = AF_INET6;
		memcpy(&s->sin6_addr, c->orig.addr, 16);
		s->sin6_port = htons(c->orig.port);
		sl = sizeof(*s);
	}
	c->up.fd = fd;
	/* Relay segments as they come: Nagle here would add a delay the
	 * client did not ask for (its own setting is on its own socket). */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(c->cl.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&ss, sl) < 0 && errno != EINPROGRESS)
		return -errno;
	return egr_insp_watch(c, &c->up);
}

/* Enough bytes to decide? Returns false when c was freed. */
static bool decide(struct conn *c)
{
	struct egr_http_head hh;
	const char *why = NULL;
	char bad[EGR_TLS_NAME_BUF];
	int err;

	if (c->hlen == 0)
		return true;
	if (c->hello[0] == 0x16) {
		struct egr_tls_hello h;

		c->proto = "tls";
		err = egr_tls_hello_parse(c->hello, c->hlen, &h);
		if (err == 0) {
			memcpy(c->name, h.sni, sizeof(c->name));
			memcpy(c->alpn, h.alpn, sizeof(c->alpn));
			if (h.has_ech)
				why = "ech";
			else if (!h.has_sni)
				why = "no_sni";
			/* What follows the hello in its first flight is walked
			 * record by record (inspect_filter.c). */
			c->hclear = h.records_len;
		} else if (err != -EAGAIN) {
			why = "malformed_tls";
		}
	} else {
		err = egr_http_head_parse(c->hello, c->hlen, &hh);
		if (err == -EPROTO) {
			why = "unknown_protocol";
		} else {
			c->proto = "http";
			if (err == 0)
				memcpy(c->name, hh.host, sizeof(c->name));
			else if (err != -EAGAIN)
				why = "malformed_http";
		}
	}
	if (!why && err == -EAGAIN) {
		if (c->hlen < EGR_INSPECT_HELLO_MAX)
			return true; /* wait for more, until the deadline */
		why = "hello_too_large";
	}
	if (!why && c->proto[0] == 'h')
		why = egr_insp_head_verdict(c, &hh);
	else if (!why)
		why = egr_insp_judge(c);
	if (!why && c->proto[0] == 'h') {
		/* Every later request on the connection is judged too. */
		egr_http_framer_body(&c->fr, &hh);
		c->hclear = hh.head_len;
	}
	c->filter = true;
	/* What else came with the first bytes (a pipelined or smuggled
	 * request, a second ClientHello), before anything is dialled. */
	if (!why && (why = egr_insp_filter_walk(c, bad)))
		memcpy(c->name, bad, sizeof(c->name));
	if (why) {
		egr_insp_deny(c, why);
		return false;
	}
	c->p->st.allowed++;
	log_debug("inspect: sandbox %u: %s %s allowed", c->sb->id, c->proto, c->name);
	if (egr_insp_allow_sample(c->p))
		egr_insp_emit(c, true, false, "allowed");
	c->state = S_CONNECTING;
	c->deadline_ns = egr_mono_ns() + (uint64_t)c->p->cfg.connect_timeout_ms * 1000000ull;
	err = dial(c);
	if (err) {
		log_debug("inspect: sandbox %u: dial %s: %s", c->sb->id, c->name, strerror(-err));
		egr_insp_conn_free(c, true);
		return false;
	}
	return true;
}

void egr_insp_read_hello(struct conn *c)
{
	for (;;) {
		ssize_t n;

		if (c->hlen == EGR_INSPECT_HELLO_MAX) {
			decide(c);
			return;
		}
		n = recv(c->cl.fd, c->hello + c->hlen, EGR_INSPECT_HELLO_MAX - c->hlen,
			 MSG_DONTWAIT);
		if (n > 0) {
			c->hlen += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EAGAIN) {
			decide(c);
			return;
		}
		/* EOF or an error before a decision: nothing to relay. */
		if (decide(c) && c->state == S_HELLO)
			egr_insp_deny(c, n == 0 ? "incomplete" : "client_error");
		return;
	}
}

static void on_side(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct side *s = ctx;
	struct conn *c = s->c;

	switch (c->state) {
	case S_HELLO:
		if (s == &c->cl)
			egr_insp_read_hello(c);
		break;
	case S_CONNECTING:
		if (s == &c->up)
			connected(c);
		break;
	case S_RELAY:
		pump(c);
		break;
	}
}

void egr_insp_on_wake(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_inspect *p = ctx;
	struct conn *list = p->ready;
	uint64_t v;

	if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		log_warn("inspect: eventfd: %m");
	p->ready = NULL;
	while (list) {
		struct conn *c = list;

		list = c->ready_next;
		c->ready = false;
		pump(c);
	}
}
