// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The inspecting proxy's connections below its relay (inspect.c) and its
 * request filter (inspect_filter.c), which both use them: judging a name
 * at the dialled address and port, the verdict event, where a connection
 * went, the splice pipes, and freeing a connection.
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
#include "inspect_int.h"
#include "dns/learned.h"
#include "log.h"
#include "netaddr.h"
#include "tlshello.h"

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

/* Do the name's outbound_allow entries give TCP on port? */
static bool name_port_allows(const struct egr_dns_ports *ports, uint16_t port)
{
	for (uint32_t i = 0; i < ports->nranges && i < EGR_MAX_PORT_RANGES; i++)
		if ((ports->ranges[i].protos & EGR_PROTO_TCP) && port >= ports->ranges[i].lo &&
		    port <= ports->ranges[i].hi)
			return true;
	return false;
}

/* The name the client sent must be one the policy resolves, and the
 * address it dialled one this sandbox learned for that name, on a port the
 * name's own entries give TCP (two names at one address must not lend each
 * other their ports), or a literal entry must cover address and port. An
 * IP literal as the HTTP host passes only when it is the very address
 * dialled and a literal entry covers it: it names no other site. */
const char *egr_insp_judge(struct conn *c)
{
	return egr_insp_judge_name(c, c->name);
}

const char *egr_insp_judge_name(struct conn *c, const char *name)
{
	const struct isb *sb = c->sb;
	struct egr_dnspolicy_match m;
	int fam = c->orig.family;
	uint8_t lit[16];
	bool learned;

	if ((inet_pton(AF_INET, name, lit) == 1 && fam == AF_INET) ||
	    (inet_pton(AF_INET6, name, lit) == 1 && fam == AF_INET6)) {
		if (memcmp(lit, c->orig.addr, egr_addr_len(fam)) == 0 &&
		    literal_allows(sb, fam, c->orig.addr, c->orig.port))
			return NULL;
		return "address_mismatch";
	}
	if (egr_dnspolicy_match(sb->dpol, name, &m) != 1)
		return "name_not_allowed";
	learned = egr_learned_has_name(c->p->cfg.learned, sb->id, fam, c->orig.addr, name);
	if (learned && name_port_allows(&m.ports, c->orig.port))
		return NULL;
	if (literal_allows(sb, fam, c->orig.addr, c->orig.port))
		return NULL;
	return learned ? "port_not_allowed" : "address_mismatch";
}

/* --- events and bookkeeping ----------------------------------------------------- */

void egr_insp_emit(struct conn *c, bool allowed, bool closed, const char *reason)
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
	egr_insp_publish(c->sb, &ev);
}

void egr_insp_note_dest(struct conn *c)
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

int egr_insp_pipe_get(struct egr_inspect *p, int fds[2])
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

void egr_insp_pipe_close(int fds[2])
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
void egr_insp_conn_free(struct conn *c, bool reset)
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
		egr_insp_note_dest(c);
		egr_insp_emit(c, true, true, "closed");
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

/* Allow events within ALLOW_EVENTS_PER_S (a fixed one-second window). */
bool egr_insp_allow_sample(struct egr_inspect *p)
{
	uint64_t sec = egr_mono_ns() / 1000000000ull;

	if (sec != p->allow_window) {
		p->allow_window = sec;
		p->allow_sent = 0;
	}
	return p->allow_sent++ < ALLOW_EVENTS_PER_S;
}
