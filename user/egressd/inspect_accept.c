// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The inspecting proxy's front (inspect.h, docs/inspect.md): accepting a
 * sandbox's redirected connections (the original destination, per-sandbox
 * and reserved connection budgets, eviction), the periodic tick, and adding,
 * updating and removing sandboxes with their listeners. The decision and
 * the relay are inspect.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "egressd.h"
#include "httphead.h"
#include "inspect.h"
#include "inspect_int.h"
#include "kernel/listen.h"
#include "kernel/maps.h"
#include "dns/learned.h"
#include "hold/lhold.h"
#include "log.h"
#include "netaddr.h"
#include "tlshello.h"

/* --- accept ----------------------------------------------------------------------- */

/* One of the proxy's own listeners (loopback, or a device sandbox's
 * address): dialling it would serve a sandbox to itself. */
static bool is_listener(const struct egr_inspect *p, const struct egr_inspect_orig *o)
{
	static const uint8_t lo6[16] = { [15] = 1 };
	bool v4 = o->family == AF_INET;
	bool loop = v4 ? o->addr[0] == 127 : !memcmp(o->addr, lo6, 16);

	for (const struct isb *sb = p->sbs; sb; sb = sb->next) {
		bool here = loop;

		if (sb->device)
			here = v4 ? sb->dev.has4 && !memcmp(o->addr, sb->dev.addr4, 4)
				  : sb->dev.has6 && !memcmp(o->addr, sb->dev.addr6, 16);
		if (here && o->port == (v4 ? sb->port4 : sb->port6))
			return true;
	}
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
	if (egr_bpf_inspect_take(p->cfg.bpf, &key, out))
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
	egr_insp_publish(sb, &ev);
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
	egr_insp_emit(old, false, false, "evicted");
	egr_insp_conn_free(old, true);
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
	if (egr_insp_watch(c, &c->cl)) {
		egr_insp_conn_free(c, true);
		return;
	}
	egr_insp_read_hello(c);
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
			egr_insp_deny(c, c->hlen ? "hello_timeout" : "no_data");
		else if (c->state == S_CONNECTING && now >= c->deadline_ns)
			egr_insp_conn_free(c, true);
		else if (c->state == S_RELAY && now - c->last_ns >= idle)
			egr_insp_conn_free(c, true);
	}
	for (struct isb *sb = p->sbs; sb; sb = sb->next)
		egr_insp_report_suppressed(sb, now, false);
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
	err = egr_loop_add(loop, p->wake_fd, EPOLLIN, egr_insp_on_wake, p);
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

/* Where sb's listener of family goes: loopback, or its device's address. */
static socklen_t listen_addr(const struct isb *sb, int family, uint16_t port,
			     struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET) {
		struct sockaddr_in *s = (void *)ss;

		s->sin_family = AF_INET;
		s->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (sb->device)
			memcpy(&s->sin_addr, sb->dev.addr4, 4);
		s->sin_port = htons(port);
		return sizeof(*s);
	}
	struct sockaddr_in6 *s6 = (void *)ss;

	s6->sin6_family = AF_INET6;
	s6->sin6_addr = in6addr_loopback;
	if (sb->device)
		memcpy(&s6->sin6_addr, sb->dev.addr6, 16);
	s6->sin6_port = htons(port);
	return sizeof(*s6);
}

/* The listener's address for the log, into buf (INET6_ADDRSTRLEN + 2). */
static const char *listen_name(const struct isb *sb, int family, char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN] = "?";

	if (!sb->device)
		snprintf(buf, len, "%s", family == AF_INET ? "127.0.0.1" : "[::1]");
	else if (family == AF_INET)
		snprintf(buf, len, "%s", inet_ntop(AF_INET, sb->dev.addr4, a, sizeof(a)) ? a : "?");
	else
		snprintf(buf, len, "[%s]", inet_ntop(AF_INET6, sb->dev.addr6, a, sizeof(a)) ? a : "?");
	return buf;
}

static int open_listener_on(struct isb *sb, int family, uint16_t want, int *fd_out,
			    uint16_t *port)
{
	struct egr_bpf *bpf = sb->p->cfg.bpf;
	struct sockaddr_storage ss;
	socklen_t sl = listen_addr(sb, family, want, &ss);
	int one = 1, fd, err, idx = sb->dev.ifindex;

	fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	/* A device sandbox's: only what came in through its device (which
	 * its programs judged and rewrote) is delivered to it. */
	if ((sb->device &&
	     setsockopt(fd, SOL_SOCKET, SO_BINDTOIFINDEX, &idx, sizeof(idx)) < 0) ||
	    bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, BACKLOG) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	/* egressd's own in the kernel's eyes (kernel/listen.h): no sandbox may
	 * bind the port, and only this socket gets the sandbox's redirected
	 * connections; unclaimed it would get none. */
	if ((err = egr_bpf_listen_claim(bpf, fd, EGR_LISTEN_INSPECT, sb->id))) {
		close(fd);
		return err;
	}
	*fd_out = fd;
	*port = family == AF_INET ? ntohs(((struct sockaddr_in *)&ss)->sin_port)
				  : ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return 0;
}

/* want first (the port of a restarted egressd's sandbox); if someone took
 * it meanwhile, a new one, as the DNS proxy does: the registry points the
 * kernel's entry at whatever port this returns. */
static int open_listener(struct isb *sb, int family, uint16_t want, int *fd_out, uint16_t *port)
{
	int err = open_listener_on(sb, family, want, fd_out, port);
	char name[INET6_ADDRSTRLEN + 16];

	if (err == -EADDRINUSE && want) {
		log_warn("inspect: sandbox %u: %s port %u is taken; listening on a new one", sb->id,
			 listen_name(sb, family, name, sizeof(name)), want);
		err = open_listener_on(sb, family, 0, fd_out, port);
	}
	return err;
}

/* Is a held listener bound where sb's go (a device's address may have
 * changed while egressd was away)? */
static bool bound_as(const struct isb *sb, int fd, int family)
{
	struct sockaddr_storage want, have;
	socklen_t sl = sizeof(have);

	listen_addr(sb, family, 0, &want);
	if (getsockname(fd, (struct sockaddr *)&have, &sl) < 0 || have.ss_family != family)
		return false;
	return family == AF_INET ? !memcmp(&((struct sockaddr_in *)&have)->sin_addr,
					   &((struct sockaddr_in *)&want)->sin_addr, 4)
				 : !memcmp(&((struct sockaddr_in6 *)&have)->sin6_addr,
					   &((struct sockaddr_in6 *)&want)->sin6_addr, 16);
}

/* The predecessor's listener on want, kept by the listener holder with the
 * connections that queued on it while no egressd ran (they are inspected
 * as any other: the original destination waits in egr_inspect_orig),
 * claimed again as this egressd's in the kernel (kernel/listen.h). */
static bool claim_listener(struct isb *sb, int nsfd, int family, uint16_t want, int *fd_out,
			   uint16_t *port)
{
	struct egr_inspect *p = sb->p;
	struct egr_lhold *h = p->cfg.hold;
	struct stat st;
	int fd;

	if (!h || !want || nsfd < 0 || fstat(nsfd, &st) < 0)
		return false;
	fd = egr_lhold_claim(h, st.st_dev, st.st_ino, family, SOCK_STREAM, want);
	if (fd < 0)
		return false;
	if (!bound_as(sb, fd, family) ||
	    egr_bpf_listen_claim(p->cfg.bpf, fd, EGR_LISTEN_INSPECT, sb->id)) {
		egr_lhold_drop(h, fd);
		close(fd);
		return false;
	}
	*fd_out = fd;
	*port = want;
	return true;
}

static void sb_close_conns(struct isb *sb)
{
	struct conn *c = sb->p->conns, *next;

	for (; c; c = next) {
		next = c->next;
		if (c->sb == sb)
			egr_insp_conn_free(c, true);
	}
}

static void sb_free(struct isb *sb)
{
	struct egr_inspect *p = sb->p;

	sb_close_conns(sb);
	/* What its budget still held back is not lost with it. */
	egr_insp_report_suppressed(sb, egr_mono_ns(), true);
	/* Closed for good: its port reservation goes, the holder lets go too
	 * (not at exit: frozen). */
	if (sb->l4.fd >= 0) {
		egr_loop_del(p->loop, sb->l4.fd);
		egr_bpf_listen_release(p->cfg.bpf, sb->l4.fd);
		egr_lhold_drop(p->cfg.hold, sb->l4.fd);
		close(sb->l4.fd);
	}
	if (sb->l6.fd >= 0) {
		egr_loop_del(p->loop, sb->l6.fd);
		egr_bpf_listen_release(p->cfg.bpf, sb->l6.fd);
		egr_lhold_drop(p->cfg.hold, sb->l6.fd);
		close(sb->l6.fd);
	}
	if (sb->netns_fd >= 0)
		close(sb->netns_fd);
	egr_dnspolicy_free(sb->dpol);
	free(sb->lits);
	free(sb->tenant);
	free(sb);
}

/* A family of sb's with nowhere to listen (a device without an address of
 * it): port 0, the kernel drops that family's TCP. */
static bool has_family(const struct isb *sb, int family)
{
	return !sb->device || (family == AF_INET ? sb->dev.has4 : sb->dev.has6);
}

static int add_sandbox(struct egr_inspect *p, uint32_t sandbox_id, const char *tenant,
		       const struct egr_policy *pol, struct egr_dnspolicy *dpol, int netns_fd,
		       const struct egr_inspect_device *dev, uint16_t want_port4,
		       uint16_t want_port6, uint16_t *port4, uint16_t *port6)
{
	char n4[INET6_ADDRSTRLEN + 16], n6[INET6_ADDRSTRLEN + 16];
	struct isb *sb;
	int err = 0, err6 = 0, nsfd;

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
	if (dev) {
		sb->device = true;
		sb->dev = *dev;
	}
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
	nsfd = netns_fd >= 0 ? netns_fd : p->self_netns;
	if (has_family(sb, AF_INET) &&
	    !claim_listener(sb, nsfd, AF_INET, want_port4, &sb->l4.fd, &sb->port4))
		err = open_listener(sb, AF_INET, want_port4, &sb->l4.fd, &sb->port4);
	if (!err && has_family(sb, AF_INET6) &&
	    !claim_listener(sb, nsfd, AF_INET6, want_port6, &sb->l6.fd, &sb->port6))
		err6 = open_listener(sb, AF_INET6, want_port6, &sb->l6.fd, &sb->port6);
	if (netns_fd >= 0 && setns(p->self_netns, CLONE_NEWNET) < 0) {
		log_error("inspect: cannot return to egressd's network namespace: %m");
		err = err ? err : -errno;
	}
	listen_name(sb, AF_INET, n4, sizeof(n4));
	listen_name(sb, AF_INET6, n6, sizeof(n6));
	if (err) {
		log_error("inspect: sandbox %u: %s listener: %s", sandbox_id, n4, strerror(-err));
		goto fail;
	}
	if (err6) {
		if ((want_port6 && !sb->device) ||
		    (err6 != -EADDRNOTAVAIL && err6 != -EAFNOSUPPORT)) {
			err = err6;
			log_error("inspect: sandbox %u: %s listener: %s", sandbox_id, n6,
				  strerror(-err));
			goto fail;
		}
		/* The kernel then refuses the sandbox's IPv6 TCP (port6 = 0). */
		log_warn("inspect: sandbox %u: no %s listener (%s): its IPv6 TCP is dropped",
			 sandbox_id, n6, strerror(-err6));
		sb->port6 = 0;
	}
	err = sb->l4.fd >= 0 ? egr_loop_add(p->loop, sb->l4.fd, EPOLLIN, on_listener, &sb->l4) : 0;
	if (!err && sb->l6.fd >= 0)
		err = egr_loop_add(p->loop, sb->l6.fd, EPOLLIN, on_listener, &sb->l6);
	if (err) {
		if (sb->l4.fd >= 0)
			egr_loop_del(p->loop, sb->l4.fd);
		goto fail;
	}
	/* Held from now on: they outlive this egressd (hold/lhold.h). */
	if (sb->l4.fd >= 0)
		egr_lhold_put(p->cfg.hold, sb->l4.fd);
	if (sb->l6.fd >= 0)
		egr_lhold_put(p->cfg.hold, sb->l6.fd);
	sb->next = p->sbs;
	p->sbs = sb;
	*port4 = sb->port4;
	*port6 = sb->port6;
	log_info("inspect: sandbox %u: listening on %s:%u and %s:%u%s", sandbox_id, n4, sb->port4,
		 n6, sb->port6, sb->device ? " (its device)" : "");
	return 0;
fail:
	sb_free(sb);
	return err;
}

int egr_inspect_add_sandbox(struct egr_inspect *p, uint32_t sandbox_id, const char *tenant,
			    const struct egr_policy *pol, struct egr_dnspolicy *dpol, int netns_fd,
			    uint16_t want_port4, uint16_t want_port6, uint16_t *port4,
			    uint16_t *port6)
{
	return add_sandbox(p, sandbox_id, tenant, pol, dpol, netns_fd, NULL, want_port4,
			   want_port6, port4, port6);
}

int egr_inspect_add_device(struct egr_inspect *p, uint32_t sandbox_id, const char *tenant,
			   const struct egr_policy *pol, struct egr_dnspolicy *dpol, int netns_fd,
			   const struct egr_inspect_device *dev, uint16_t want_port4,
			   uint16_t want_port6, uint16_t *port4, uint16_t *port6)
{
	if (!dev || dev->ifindex <= 0) {
		egr_dnspolicy_free(dpol);
		return -EINVAL;
	}
	return add_sandbox(p, sandbox_id, tenant, pol, dpol, netns_fd, dev, want_port4,
			   want_port6, port4, port6);
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
		if (c->sb != sb || c->state == S_HELLO || !(why = egr_insp_judge(c)))
			continue;
		log_info("inspect: sandbox %u: closing %s to a destination the new policy "
			 "refuses (%s)", sb->id, c->name, why);
		egr_insp_conn_free(c, true);
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
		egr_insp_pipe_close(p->pool[i]);
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
			egr_insp_note_dest(c);
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
	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:i, s:i}", "accepted",
			 (json_int_t)p->st.accepted, "allowed", (json_int_t)p->st.allowed,
			 "denied", (json_int_t)p->st.denied, "refused_full",
			 (json_int_t)p->st.refused_full, "evicted", (json_int_t)p->st.evicted,
			 "deferred", (json_int_t)p->st.deferred, "unidentified",
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
