// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The inspecting proxy (inspect.h, docs/inspect.md).
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

#include <bpf/bpf.h>

#include "clock.h"
#include "egressd.h"
#include "httphead.h"
#include "inspect.h"
#include "learned.h"
#include "log.h"
#include "netaddr.h"
#include "tlshello.h"

#define BACKLOG      256
/* Bytes in flight per direction. 256 KiB and 1 MiB pipes measured slower on
 * the dev VM than the default 64 KiB (docs/benchmarks.md). */
#define PIPE_SIZE    (1 << 16)
#define PIPE_CHUNK   PIPE_SIZE
#define PIPE_POOL    64 /* empty pipes kept for the next connections */
#define ALLOW_EVENTS_PER_S 20 /* sampled, like the kernel's allow events; denies all */
#define PUMP_ROUNDS  64
#define TICK_MS      200

enum state { S_HELLO, S_CONNECTING, S_RELAY };

struct lit {
	int family;
	uint8_t addr[16];
	uint8_t plen;
	uint16_t lo, hi;
};

struct dest {
	char name[EGR_TLS_NAME_BUF];
	int family;
	uint8_t addr[16];
	uint16_t port;
	uint64_t bytes_out, bytes_in, conns;
	time_t first, last;
};

struct isb;

struct lsock {
	int fd;
	struct isb *sb;
};

struct isb {
	struct egr_inspect *p;
	uint32_t id;
	char *tenant;
	struct egr_dnspolicy *dpol;
	struct lit *lits;
	size_t nlits;
	int netns_fd;
	struct lsock l4, l6;
	uint16_t port4, port6;
	uint32_t nconns;
	uint64_t denied; /* policy refusals of this sandbox: its breaker counts them */
	struct dest dests[EGR_INSPECT_MAX_DESTS];
	size_t ndests;
	bool dests_full;
	struct isb *next;
};

struct conn;

struct side {
	int fd;
	bool watched;
	struct conn *c;
};

struct conn {
	struct egr_inspect *p;
	struct isb *sb;
	enum state state;
	struct side cl, up;
	uint8_t *hello;
	size_t hlen, hsent;
	int pcu[2], puc[2]; /* pipes: client->upstream, upstream->client */
	size_t incu, inuc;
	bool eof_c, eof_u, shut_u, shut_c;
	bool ready; /* on the ready list */
	uint64_t deadline_ns, last_ns;
	struct egr_inspect_orig orig;
	char name[EGR_TLS_NAME_BUF];
	char alpn[EGR_TLS_ALPN_BUF];
	const char *proto;
	uint64_t bytes_out, bytes_in;
	uint64_t noted_out, noted_in; /* already in the sandbox's dests */
	bool noted;
	struct conn *prev, *next, *ready_next;
};

struct egr_inspect {
	struct egr_loop *loop;
	struct egr_inspect_config cfg;
	int self_netns;
	int wake_fd;
	struct isb *sbs;
	struct conn *conns;
	struct conn *ready;
	struct egr_inspect_stats st;
	uint64_t allow_window, allow_sent;
	int pool[PIPE_POOL][2]; /* empty pipes, already sized */
	size_t npool;
};

/* --- decision -------------------------------------------------------------------- */

/* Is family/addr:port covered by a literal (unnamed) TCP entry? */
static bool literal_allows(const struct isb *sb, int family, const uint8_t *addr, uint16_t port)
{
	for (size_t i = 0; i < sb->nlits; i++) {
		const struct lit *l = &sb->lits[i];

		if (l->family == family && port >= l->lo && port <= l->hi &&
		    egr_prefix_covers(l->addr, l->plen, addr))
			return true;
	}
	return false;
}

/* The name the client sent must be one the policy resolves, and the
 * address it dialled one this sandbox learned for that name, or a literal
 * entry. An IP literal as the HTTP host passes only when it is the very
 * address dialled and a literal entry covers it: it names no other site. */
static const char *judge(struct conn *c)
{
	const struct isb *sb = c->sb;
	int fam = c->orig.family;
	uint8_t lit[16];

	if ((inet_pton(AF_INET, c->name, lit) == 1 && fam == AF_INET) ||
	    (inet_pton(AF_INET6, c->name, lit) == 1 && fam == AF_INET6)) {
		if (memcmp(lit, c->orig.addr, egr_addr_len(fam)) == 0 &&
		    literal_allows(sb, fam, c->orig.addr, c->orig.port))
			return NULL;
		return "address_mismatch";
	}
	if (egr_dnspolicy_match(sb->dpol, c->name, NULL) != 1)
		return "name_not_allowed";
	if (egr_learned_has_name(c->p->cfg.learned, sb->id, fam, c->orig.addr, c->name))
		return NULL;
	if (literal_allows(sb, fam, c->orig.addr, c->orig.port))
		return NULL;
	return "address_mismatch";
}

/* --- events and bookkeeping ----------------------------------------------------- */

static void emit(struct conn *c, bool allowed, bool closed, const char *reason)
{
	struct egr_inspect_event ev = {
		.sandbox_id = c->sb->id,
		.tenant = c->sb->tenant,
		.allowed = allowed,
		.closed = closed,
		.reason = reason,
		.proto = c->proto ? c->proto : "unknown",
		.name = c->name,
		.alpn = c->alpn,
		.family = c->orig.family,
		.port = c->orig.port,
		.bytes_out = c->bytes_out,
		.bytes_in = c->bytes_in,
	};

	memcpy(ev.addr, c->orig.addr, sizeof(ev.addr));
	if (c->p->cfg.event)
		c->p->cfg.event(c->p->cfg.ctx, &ev);
}

static void note_dest(struct conn *c)
{
	struct isb *sb = c->sb;
	struct dest *d = NULL;

	for (size_t i = 0; i < sb->ndests; i++) {
		struct dest *x = &sb->dests[i];

		if (x->family == c->orig.family && x->port == c->orig.port &&
		    !memcmp(x->addr, c->orig.addr, 16) && !strcmp(x->name, c->name)) {
			d = x;
			break;
		}
	}
	if (!d) {
		if (sb->ndests == EGR_INSPECT_MAX_DESTS) {
			sb->dests_full = true;
			return;
		}
		d = &sb->dests[sb->ndests++];
		memset(d, 0, sizeof(*d));
		memcpy(d->name, c->name, sizeof(d->name));
		d->family = c->orig.family;
		memcpy(d->addr, c->orig.addr, 16);
		d->port = c->orig.port;
		d->first = time(NULL);
	}
	d->bytes_out += c->bytes_out - c->noted_out;
	d->bytes_in += c->bytes_in - c->noted_in;
	c->noted_out = c->bytes_out;
	c->noted_in = c->bytes_in;
	if (!c->noted)
		d->conns++;
	c->noted = true;
	d->last = time(NULL);
}

static void side_close(struct egr_inspect *p, struct side *s)
{
	if (s->fd < 0)
		return;
	if (s->watched)
		egr_loop_del(p->loop, s->fd);
	close(s->fd);
	s->fd = -1;
	s->watched = false;
}

/* An empty pipe goes back to the pool (saves four syscalls and a resize
 * per connection); one with bytes left in it is closed. */
static void pipe_put(struct egr_inspect *p, int fds[2], size_t inpipe)
{
	if (fds[0] >= 0 && !inpipe && p->npool < PIPE_POOL) {
		p->pool[p->npool][0] = fds[0];
		p->pool[p->npool][1] = fds[1];
		p->npool++;
		fds[0] = fds[1] = -1;
		return;
	}
	for (int i = 0; i < 2; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
}

static int pipe_get(struct egr_inspect *p, int fds[2])
{
	if (p->npool) {
		p->npool--;
		fds[0] = p->pool[p->npool][0];
		fds[1] = p->pool[p->npool][1];
		return 0;
	}
	if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) < 0)
		return -errno;
	/* Best effort: the default 64 KiB works too, only slower. */
	fcntl(fds[1], F_SETPIPE_SZ, PIPE_SIZE);
	return 0;
}

static void pipe_close(int fds[2])
{
	for (int i = 0; i < 2; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
}

static void unready(struct conn *c)
{
	struct conn **pp;

	if (!c->ready)
		return;
	for (pp = &c->p->ready; *pp; pp = &(*pp)->ready_next) {
		if (*pp == c) {
			*pp = c->ready_next;
			break;
		}
	}
	c->ready = false;
}

/* End a connection. reset: make the client see a reset, not an orderly end
 * (a refused connection should fail loudly). */
static void conn_free(struct conn *c, bool reset)
{
	struct egr_inspect *p = c->p;

	if (reset && c->cl.fd >= 0) {
		struct linger lg = { 1, 0 };

		setsockopt(c->cl.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	}
	if (c->state != S_HELLO) {
		log_debug("inspect: sandbox %u: %s closed (%s), %llu bytes out, %llu in",
			  c->sb->id, c->name, reset ? "reset" : "both ends done",
			  (unsigned long long)c->bytes_out, (unsigned long long)c->bytes_in);
		note_dest(c);
		emit(c, true, true, "closed");
	}
	unready(c);
	side_close(p, &c->cl);
	side_close(p, &c->up);
	pipe_put(p, c->pcu, c->incu);
	pipe_put(p, c->puc, c->inuc);
	free(c->hello);
	if (c->prev)
		c->prev->next = c->next;
	else
		p->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->sb->nconns--;
	p->st.conns--;
	free(c);
}

static void deny(struct conn *c, const char *reason)
{
	c->p->st.denied++;
	c->sb->denied++;
	log_debug("inspect: sandbox %u: %s %s refused: %s", c->sb->id, c->proto ? c->proto : "?",
		  c->name[0] ? c->name : "(no name)", reason);
	emit(c, false, false, reason);
	conn_free(c, true);
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

/* Returns false when c was freed. */
static bool pump(struct conn *c)
{
	for (int round = 0; round < PUMP_ROUNDS; round++) {
		int a = 0, b;

		/* The first bytes the proxy read go first. */
		if (c->hsent < c->hlen) {
			ssize_t n = send(c->up.fd, c->hello + c->hsent, c->hlen - c->hsent,
					 MSG_NOSIGNAL | MSG_DONTWAIT);

			if (n > 0) {
				c->hsent += (size_t)n;
				c->bytes_out += (uint64_t)n;
				a = 1;
			} else if (n < 0 && errno != EAGAIN) {
				conn_free(c, true);
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
			conn_free(c, true);
			return false;
		}
		if (c->shut_u && c->shut_c) {
			conn_free(c, false);
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

static int watch(struct conn *c, struct side *s)
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
		conn_free(c, true);
		return;
	}
	if (pipe_get(c->p, c->pcu) || pipe_get(c->p, c->puc)) {
		log_warn("inspect: pipe: %m");
		conn_free(c, true);
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
	return watch(c, &c->up);
}

/* Allow events within ALLOW_EVENTS_PER_S (a fixed one-second window). */
static bool allow_sample(struct egr_inspect *p)
{
	uint64_t sec = egr_mono_ns() / 1000000000ull;

	if (sec != p->allow_window) {
		p->allow_window = sec;
		p->allow_sent = 0;
	}
	return p->allow_sent++ < ALLOW_EVENTS_PER_S;
}

/* Enough bytes to decide? Returns false when c was freed. */
static bool decide(struct conn *c)
{
	const char *why = NULL;
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
		} else if (err != -EAGAIN) {
			why = "malformed_tls";
		}
	} else {
		struct egr_http_head h;

		err = egr_http_head_parse(c->hello, c->hlen, &h);
		if (err == -EPROTO) {
			why = "unknown_protocol";
		} else {
			c->proto = "http";
			if (err == 0)
				memcpy(c->name, h.host, sizeof(c->name));
			else if (err != -EAGAIN)
				why = "malformed_http";
		}
	}
	if (!why && err == -EAGAIN) {
		if (c->hlen < EGR_INSPECT_HELLO_MAX)
			return true; /* wait for more, until the deadline */
		why = "hello_too_large";
	}
	if (!why)
		why = judge(c);
	if (why) {
		deny(c, why);
		return false;
	}
	c->p->st.allowed++;
	log_debug("inspect: sandbox %u: %s %s allowed", c->sb->id, c->proto, c->name);
	if (allow_sample(c->p))
		emit(c, true, false, "allowed");
	c->state = S_CONNECTING;
	c->deadline_ns = egr_mono_ns() + (uint64_t)c->p->cfg.connect_timeout_ms * 1000000ull;
	err = dial(c);
	if (err) {
		log_debug("inspect: sandbox %u: dial %s: %s", c->sb->id, c->name, strerror(-err));
		conn_free(c, true);
		return false;
	}
	return true;
}

static void read_hello(struct conn *c)
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
			deny(c, n == 0 ? "incomplete" : "client_error");
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
			read_hello(c);
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

static void on_wake(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
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

/* --- accept ----------------------------------------------------------------------- */

static bool is_listener(const struct egr_inspect *p, const struct egr_inspect_orig *o)
{
	static const uint8_t lo6[16] = { [15] = 1 };

	if (o->family == AF_INET && o->addr[0] != 127)
		return false;
	if (o->family == AF_INET6 && memcmp(o->addr, lo6, 16))
		return false;
	for (const struct isb *sb = p->sbs; sb; sb = sb->next)
		if (o->port == (o->family == AF_INET ? sb->port4 : sb->port6))
			return true;
	return false;
}

/* Take the original destination the kernel published for this client. */
static int take_orig(struct egr_inspect *p, uint32_t sandbox_id,
		     const struct sockaddr_storage *peer, struct egr_inspect_orig *out)
{
	struct egr_inspect_key key = { .sandbox_id = sandbox_id };

	if (peer->ss_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)peer;

		key.family = AF_INET;
		key.port = ntohs(s->sin_port);
		memcpy(key.addr, &s->sin_addr, 4);
	} else if (peer->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)peer;

		key.family = AF_INET6;
		key.port = ntohs(s->sin6_port);
		memcpy(key.addr, &s->sin6_addr, 16);
	} else {
		return -EAFNOSUPPORT;
	}
	/* Taken once: a later connection from the same address and port must
	 * be published by its own SYN. */
	if (bpf_map_lookup_and_delete_elem(p->cfg.orig_map_fd, &key, out))
		return -ENOENT;
	if ((out->family != AF_INET && out->family != AF_INET6) || !out->port)
		return -EINVAL;
	return 0;
}

static void refuse_fd(int fd)
{
	struct linger lg = { 1, 0 };

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

static void refused_event(struct isb *sb, const char *reason, const struct egr_inspect_orig *o)
{
	struct egr_inspect_event ev = {
		.sandbox_id = sb->id, .tenant = sb->tenant, .reason = reason,
		.proto = "unknown", .name = "", .alpn = "",
	};

	if (o) {
		ev.family = o->family;
		ev.port = o->port;
		memcpy(ev.addr, o->addr, sizeof(ev.addr));
	}
	if (sb->p->cfg.event)
		sb->p->cfg.event(sb->p->cfg.ctx, &ev);
}

/* The fair share (docs/inspect.md "Limits"): min(EGR_INSPECT_RESERVE,
 * max_conns / inspected sandboxes) slots per sandbox. */
static uint32_t reserve_of(const struct egr_inspect *p)
{
	uint32_t n = 0, r;

	for (const struct isb *t = p->sbs; t; t = t->next)
		n++;
	r = n ? p->cfg.max_conns / n : 0;
	return r < EGR_INSPECT_RESERVE ? r : EGR_INSPECT_RESERVE;
}

/* Slots the sandboxes other than sb are still owed of their reserve r. */
static uint32_t owed_to_others(const struct egr_inspect *p, const struct isb *sb, uint32_t r)
{
	uint32_t owed = 0;

	for (const struct isb *t = p->sbs; t; t = t->next)
		if (t != sb && t->nconns < r)
			owed += r - t->nconns;
	return owed;
}

/*
 * The pool is full and needy is below its reserve (it came after the others
 * took every slot): reset the oldest connection still waiting for its hello
 * of the largest holder above the reserve. Relayed connections are never
 * evicted (they carry a tool's work); a holder with none waiting keeps its
 * slots and needy is refused. false: nothing to evict.
 */
static bool evict_for(struct egr_inspect *p, const struct isb *needy, uint32_t r)
{
	struct isb *big = NULL;
	struct conn *old = NULL;

	for (struct isb *t = p->sbs; t; t = t->next)
		if (t != needy && t->nconns > r && (!big || t->nconns > big->nconns))
			big = t;
	if (!big)
		return false;
	/* p->conns is newest first: the last match is the oldest. */
	for (struct conn *c = p->conns; c; c = c->next)
		if (c->sb == big && c->state == S_HELLO)
			old = c;
	if (!old)
		return false;
	log_info("inspect: sandbox %u: a connection waiting for its hello reset to free a slot "
		 "for sandbox %u (below its reserve of %u)", big->id, needy->id, r);
	p->st.evicted++;
	/* Not a policy refusal: the holder's breaker does not count it. */
	emit(old, false, false, "evicted");
	conn_free(old, true);
	return true;
}

/* May sb take one more slot? Its own bound, then the fair share. */
static bool admit(struct egr_inspect *p, struct isb *sb)
{
	uint32_t r = reserve_of(p);

	if (sb->nconns >= p->cfg.max_conns_per_sb)
		return false;
	if (sb->nconns < r)
		/* Within its reserve: a free slot, or one evicted for it. */
		return p->st.conns < p->cfg.max_conns || evict_for(p, sb, r);
	/* Past it: only if the others' unused reserves stay free. */
	return p->st.conns + owed_to_others(p, sb, r) < p->cfg.max_conns;
}

static void accept_one(struct isb *sb, int fd, const struct sockaddr_storage *peer)
{
	struct egr_inspect *p = sb->p;
	struct egr_inspect_orig orig;
	struct conn *c;

	p->st.accepted++;
	if (take_orig(p, sb->id, peer, &orig)) {
		/* Not a connection the kernel redirected for this sandbox. */
		p->st.unidentified++;
		refuse_fd(fd);
		refused_event(sb, "no_origin", NULL);
		return;
	}
	if (is_listener(p, &orig)) {
		p->st.denied++;
		sb->denied++;
		refuse_fd(fd);
		refused_event(sb, "loop", &orig);
		return;
	}
	if (!admit(p, sb)) {
		p->st.refused_full++;
		refuse_fd(fd);
		refused_event(sb, "conn_limit", &orig);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (c)
		c->hello = malloc(EGR_INSPECT_HELLO_MAX);
	if (!c || !c->hello) {
		if (c)
			free(c);
		p->st.refused_full++;
		refuse_fd(fd);
		refused_event(sb, "conn_limit", &orig);
		return;
	}
	c->p = p;
	c->sb = sb;
	c->state = S_HELLO;
	c->cl.fd = fd;
	c->cl.c = c;
	c->up.fd = -1;
	c->up.c = c;
	c->pcu[0] = c->pcu[1] = c->puc[0] = c->puc[1] = -1;
	c->orig = orig;
	c->deadline_ns = egr_mono_ns() + (uint64_t)p->cfg.hello_timeout_ms * 1000000ull;
	c->next = p->conns;
	if (p->conns)
		p->conns->prev = c;
	p->conns = c;
	sb->nconns++;
	p->st.conns++;
	if (watch(c, &c->cl)) {
		conn_free(c, true);
		return;
	}
	read_hello(c);
}

static void on_listener(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct lsock *ls = ctx;

	for (int i = 0; i < 64; i++) {
		struct sockaddr_storage peer;
		socklen_t pl = sizeof(peer);
		int cfd = accept4(fd, (struct sockaddr *)&peer, &pl, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (cfd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				log_warn("inspect: sandbox %u: accept: %m", ls->sb->id);
			return;
		}
		accept_one(ls->sb, cfd, &peer);
	}
}

/* Hello deadlines, connect deadlines, idle connections. */
static void on_tick(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_inspect *p = ctx;
	uint64_t now = egr_mono_ns(), idle = (uint64_t)p->cfg.idle_ms * 1000000ull;
	struct conn *c = p->conns, *next;

	for (; c; c = next) {
		next = c->next;
		if (c->state == S_HELLO && now >= c->deadline_ns)
			deny(c, c->hlen ? "hello_timeout" : "no_data");
		else if (c->state == S_CONNECTING && now >= c->deadline_ns)
			conn_free(c, true);
		else if (c->state == S_RELAY && now - c->last_ns >= idle)
			conn_free(c, true);
	}
}

/* --- sandboxes -------------------------------------------------------------------- */

int egr_inspect_new(struct egr_loop *loop, const struct egr_inspect_config *cfg,
		    struct egr_inspect **out)
{
	struct egr_inspect *p = calloc(1, sizeof(*p));
	int err;

	if (!p)
		return -ENOMEM;
	p->loop = loop;
	p->cfg = *cfg;
	if (!p->cfg.max_conns)
		p->cfg.max_conns = 1024;
	if (!p->cfg.max_conns_per_sb)
		p->cfg.max_conns_per_sb = 256;
	if (!p->cfg.hello_timeout_ms)
		p->cfg.hello_timeout_ms = 5000;
	if (!p->cfg.connect_timeout_ms)
		p->cfg.connect_timeout_ms = 10000;
	if (!p->cfg.idle_ms)
		p->cfg.idle_ms = 300000;
	p->self_netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	p->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (p->self_netns < 0 || p->wake_fd < 0) {
		err = -errno;
		goto fail;
	}
	err = egr_loop_add(loop, p->wake_fd, EPOLLIN, on_wake, p);
	if (!err)
		err = egr_loop_every(loop, TICK_MS, on_tick, p);
	if (err)
		goto fail;
	*out = p;
	return 0;
fail:
	if (p->wake_fd >= 0)
		close(p->wake_fd);
	if (p->self_netns >= 0)
		close(p->self_netns);
	free(p);
	return err;
}

static struct isb *find_sb(const struct egr_inspect *p, uint32_t id)
{
	for (struct isb *sb = p ? p->sbs : NULL; sb; sb = sb->next)
		if (sb->id == id)
			return sb;
	return NULL;
}

static int load_lits(struct isb *sb, const struct egr_policy *pol)
{
	size_t n = 0;

	for (size_t i = 0; i < pol->nallow; i++)
		if (pol->allow[i].kind != EGR_HOST_NAME && (pol->allow[i].protos & EGR_PROTO_TCP))
			n++;
	free(sb->lits);
	sb->lits = n ? calloc(n, sizeof(*sb->lits)) : NULL;
	sb->nlits = 0;
	if (n && !sb->lits)
		return -ENOMEM;
	for (size_t i = 0; i < pol->nallow; i++) {
		const struct egr_allow *a = &pol->allow[i];
		struct lit *l;

		if (a->kind == EGR_HOST_NAME || !(a->protos & EGR_PROTO_TCP))
			continue;
		l = &sb->lits[sb->nlits++];
		l->family = a->kind == EGR_HOST_V4 ? AF_INET : AF_INET6;
		memcpy(l->addr, a->addr, 16);
		l->plen = a->prefixlen;
		l->lo = a->port_lo;
		l->hi = a->port_hi;
	}
	return 0;
}

static int open_listener(int family, uint16_t want, int *fd_out, uint16_t *port)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t sl;
	int one = 1, fd, err;

	if (family == AF_INET) {
		struct sockaddr_in *s = (void *)&ss;

		s->sin_family = AF_INET;
		s->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		s->sin_port = htons(want);
		sl = sizeof(*s);
	} else {
		struct sockaddr_in6 *s = (void *)&ss;

		s->sin6_family = AF_INET6;
		s->sin6_addr = in6addr_loopback;
		s->sin6_port = htons(want);
		sl = sizeof(*s);
	}
	fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, BACKLOG) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	*fd_out = fd;
	*port = family == AF_INET ? ntohs(((struct sockaddr_in *)&ss)->sin_port)
				  : ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return 0;
}

static void sb_close_conns(struct isb *sb)
{
	struct conn *c = sb->p->conns, *next;

	for (; c; c = next) {
		next = c->next;
		if (c->sb == sb)
			conn_free(c, true);
	}
}

static void sb_free(struct isb *sb)
{
	struct egr_inspect *p = sb->p;

	sb_close_conns(sb);
	if (sb->l4.fd >= 0) {
		egr_loop_del(p->loop, sb->l4.fd);
		close(sb->l4.fd);
	}
	if (sb->l6.fd >= 0) {
		egr_loop_del(p->loop, sb->l6.fd);
		close(sb->l6.fd);
	}
	if (sb->netns_fd >= 0)
		close(sb->netns_fd);
	egr_dnspolicy_free(sb->dpol);
	free(sb->lits);
	free(sb->tenant);
	free(sb);
}

int egr_inspect_add_sandbox(struct egr_inspect *p, uint32_t sandbox_id, const char *tenant,
			    const struct egr_policy *pol, struct egr_dnspolicy *dpol, int netns_fd,
			    uint16_t want_port4, uint16_t want_port6, uint16_t *port4,
			    uint16_t *port6)
{
	struct isb *sb;
	int err, err6 = 0;

	if (!p || !pol || !dpol || sandbox_id == EGR_ID_NONE) {
		egr_dnspolicy_free(dpol);
		return -EINVAL;
	}
	if (find_sb(p, sandbox_id)) {
		egr_dnspolicy_free(dpol);
		return -EEXIST;
	}
	sb = calloc(1, sizeof(*sb));
	if (!sb) {
		egr_dnspolicy_free(dpol);
		return -ENOMEM;
	}
	sb->p = p;
	sb->id = sandbox_id;
	sb->dpol = dpol;
	sb->l4.fd = sb->l6.fd = sb->netns_fd = -1;
	sb->l4.sb = sb->l6.sb = sb;
	sb->tenant = strdup(tenant ? tenant : "");
	err = sb->tenant ? load_lits(sb, pol) : -ENOMEM;
	if (err)
		goto fail;
	if (netns_fd >= 0) {
		sb->netns_fd = fcntl(netns_fd, F_DUPFD_CLOEXEC, 0);
		if (sb->netns_fd < 0 || setns(netns_fd, CLONE_NEWNET) < 0) {
			err = -errno;
			log_error("inspect: sandbox %u: its network namespace: %m", sandbox_id);
			goto fail;
		}
	}
	err = open_listener(AF_INET, want_port4, &sb->l4.fd, &sb->port4);
	if (!err)
		err6 = open_listener(AF_INET6, want_port6, &sb->l6.fd, &sb->port6);
	if (netns_fd >= 0 && setns(p->self_netns, CLONE_NEWNET) < 0) {
		log_error("inspect: cannot return to egressd's network namespace: %m");
		err = err ? err : -errno;
	}
	if (err) {
		log_error("inspect: sandbox %u: 127.0.0.1 listener: %s", sandbox_id, strerror(-err));
		goto fail;
	}
	if (err6) {
		if (want_port6 || (err6 != -EADDRNOTAVAIL && err6 != -EAFNOSUPPORT)) {
			err = err6;
			log_error("inspect: sandbox %u: [::1] listener: %s", sandbox_id,
				  strerror(-err));
			goto fail;
		}
		/* The kernel then refuses the sandbox's IPv6 TCP (port6 = 0). */
		sb->port6 = 0;
	}
	err = egr_loop_add(p->loop, sb->l4.fd, EPOLLIN, on_listener, &sb->l4);
	if (!err && sb->l6.fd >= 0)
		err = egr_loop_add(p->loop, sb->l6.fd, EPOLLIN, on_listener, &sb->l6);
	if (err) {
		egr_loop_del(p->loop, sb->l4.fd);
		goto fail;
	}
	sb->next = p->sbs;
	p->sbs = sb;
	*port4 = sb->port4;
	*port6 = sb->port6;
	log_info("inspect: sandbox %u: listening on 127.0.0.1:%u and [::1]:%u", sandbox_id,
		 sb->port4, sb->port6);
	return 0;
fail:
	sb_free(sb);
	return err;
}

int egr_inspect_update_sandbox(struct egr_inspect *p, uint32_t sandbox_id,
			       const struct egr_policy *pol, struct egr_dnspolicy *dpol)
{
	struct isb *sb = find_sb(p, sandbox_id);
	struct lit *old_lits;
	size_t old_n;
	int err;

	if (!sb || !pol || !dpol) {
		egr_dnspolicy_free(dpol);
		return sb ? -EINVAL : -ENOENT;
	}
	old_lits = sb->lits;
	old_n = sb->nlits;
	sb->lits = NULL;
	err = load_lits(sb, pol);
	if (err) {
		sb->lits = old_lits;
		sb->nlits = old_n;
		egr_dnspolicy_free(dpol);
		return err;
	}
	free(old_lits);
	egr_dnspolicy_free(sb->dpol);
	sb->dpol = dpol;
	/* Open connections the new policy refuses end now, as the kernel's
	 * teardown ends uninspected ones (which cannot see through us). */
	log_debug("inspect: sandbox %u: new policy, %u open connection(s)", sb->id, sb->nconns);
	for (struct conn *c = p->conns, *next; c; c = next) {
		const char *why;

		next = c->next;
		if (c->sb != sb || c->state == S_HELLO || !(why = judge(c)))
			continue;
		log_info("inspect: sandbox %u: closing %s to a destination the new policy "
			 "refuses (%s)", sb->id, c->name, why);
		conn_free(c, true);
	}
	return 0;
}

int egr_inspect_remove_sandbox(struct egr_inspect *p, uint32_t sandbox_id)
{
	struct isb **pp;

	for (pp = p ? &p->sbs : NULL; pp && *pp; pp = &(*pp)->next) {
		struct isb *sb = *pp;

		if (sb->id != sandbox_id)
			continue;
		*pp = sb->next;
		sb_free(sb);
		return 0;
	}
	return -ENOENT;
}

bool egr_inspect_has_sandbox(const struct egr_inspect *p, uint32_t sandbox_id)
{
	return find_sb(p, sandbox_id) != NULL;
}

void egr_inspect_free(struct egr_inspect *p)
{
	if (!p)
		return;
	while (p->sbs) {
		struct isb *sb = p->sbs;

		p->sbs = sb->next;
		sb_free(sb);
	}
	for (size_t i = 0; i < p->npool; i++)
		pipe_close(p->pool[i]);
	egr_loop_del(p->loop, p->wake_fd);
	close(p->wake_fd);
	close(p->self_netns);
	free(p);
}

int egr_inspect_sandbox_denied(const struct egr_inspect *p, uint32_t sandbox_id, uint64_t *out)
{
	const struct isb *sb = find_sb(p, sandbox_id);

	if (!sb)
		return -ENOENT;
	*out = sb->denied;
	return 0;
}

json_t *egr_inspect_dests_json(struct egr_inspect *p, uint32_t sandbox_id)
{
	const struct isb *sb = find_sb(p, sandbox_id);
	json_t *arr;

	if (!sb)
		return NULL;
	/* Connections still open count too: the record is written at detach,
	 * before they are closed. */
	for (struct conn *c = p->conns, *next; c; c = next) {
		next = c->next;
		if (c->sb == sb && c->state != S_HELLO)
			note_dest(c);
	}
	arr = json_array();
	for (size_t i = 0; arr && i < sb->ndests; i++) {
		const struct dest *d = &sb->dests[i];
		char addr[INET6_ADDRSTRLEN], dest[INET6_ADDRSTRLEN + 16];
		int v6 = d->family == AF_INET6;

		if (!inet_ntop(d->family, d->addr, addr, sizeof(addr)))
			continue;
		snprintf(dest, sizeof(dest), v6 ? "[%s]:%u" : "%s:%u", addr, d->port);
		json_array_append_new(arr,
				      json_pack("{s:s, s:s, s:s, s:s, s:i, s:I, s:I, s:I, s:b}",
						"dest", dest, "host", d->name, "proto", "tcp",
						"addr", addr, "port", (int)d->port, "bytes_out",
						(json_int_t)d->bytes_out, "bytes_in",
						(json_int_t)d->bytes_in, "connections",
						(json_int_t)d->conns, "inspected", 1));
	}
	return arr;
}

json_t *egr_inspect_status(const struct egr_inspect *p)
{
	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:i, s:i}", "accepted",
			 (json_int_t)p->st.accepted, "allowed", (json_int_t)p->st.allowed,
			 "denied", (json_int_t)p->st.denied, "refused_full",
			 (json_int_t)p->st.refused_full, "evicted", (json_int_t)p->st.evicted,
			 "unidentified",
			 (json_int_t)p->st.unidentified, "connections", (int)p->st.conns,
			 "max_connections", (int)p->cfg.max_conns);
}

int egr_inspect_stats(const struct egr_inspect *p, struct egr_inspect_stats *out)
{
	if (!p || !out)
		return -EINVAL;
	*out = p->st;
	return 0;
}
