// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The DNS proxy: see dnsproxy.h. One listener set per sandbox (UDP and TCP
 * on 127.0.0.1 and ::1), one shared unconnected UDP socket per upstream
 * family, one TCP connection per query that arrived over TCP. Queries in
 * flight live in a fixed table indexed through a 65536-entry map from
 * upstream id to slot, so an answer finds its query in O(1).
 *
 * Client TCP connections and upstream TCP sockets are registered
 * edge-triggered (EPOLLIN | EPOLLOUT | EPOLLET) so no re-registration is
 * needed when switching between reading and writing; they are always
 * drained to EAGAIN. Listeners are level-triggered and handle a bounded
 * batch per callback.
 *
 * Lifetimes: a client TCP connection that fails while one of its own
 * callbacks runs is only marked dead and closed when that callback
 * returns; the loop skips events of fds removed earlier in the same batch.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "clock.h"
#include "dnsproxy.h"
#include "localaddr.h"
#include "log.h"

#define RX_BATCH      64
#define MSG_MAX       65535
#define TCP_BACKLOG   64
#define TCP_WBUF_MAX  (256 * 1024) /* unsent replies per client connection */
#define TCP_PER_CONN  64           /* queries in flight per client connection */

struct sb;

struct listener {
	struct sb *sb;
	int fd;
	int family;
	bool tcp;
};

struct tconn {
	struct sb *sb;
	int fd;
	uint8_t *rbuf;             /* 2 + MSG_MAX */
	size_t rlen;
	uint8_t *wbuf;
	size_t wlen, woff, wcap;
	uint64_t last_ns;
	uint32_t npending;
	bool eof;                  /* client shut down its side */
	bool dead;                 /* close when the current callback returns */
	bool in_cb;
	bool more;                 /* stopped at the per-wake-up bound: resume on tick */
	struct tconn *next;
};

/* Queries handled per wake-up of one client TCP connection: a client that
 * pipelines (cheap, refused) queries must not keep the loop to itself. The
 * socket is edge-triggered, so the rest is resumed on the next tick. */
#define TCP_QUERIES_PER_WAKEUP 32

struct sb {
	struct egr_dnsproxy *p;
	uint32_t id;
	char *tenant;
	struct egr_dnspolicy *pol;
	struct egr_exfil *exfil;
	struct listener lis[4];    /* udp4, tcp4, udp6, tcp6; fd -1 if absent */
	struct egr_localaddr *ns_la; /* its own network namespace's addresses, or NULL */
	uint16_t port4, port6;
	struct tconn *conns;
	uint32_t nconns;
	uint32_t inflight;
	double tokens;             /* query rate bucket (rate_take) */
	uint64_t tokens_ns;
	struct egr_dnsproxy_stats st;
	struct sb *next;
};

enum tstate { T_CONNECTING = 1, T_SENDING, T_READING };

struct pending {
	bool used;
	uint32_t idx;
	struct sb *sb;
	int transport;
	int lfd;                   /* UDP: listener to answer from */
	struct sockaddr_storage caddr;
	socklen_t calen;
	struct tconn *conn;        /* TCP: client connection */
	uint16_t client_id, up_id;
	uint16_t qtype, qclass;
	char qname[EGR_DNS_NAME_BUF];
	uint8_t *query;            /* the client's bytes, for SERVFAIL */
	size_t qlen;
	struct egr_dns_ports ports;
	uint64_t deadline_ns;
	uint64_t received_ns;      /* when the client's query arrived (latency) */
	uint32_t up;               /* upstream index */
	/* TCP upstream */
	int ufd;
	enum tstate tstate;
	uint8_t *ubuf;
	size_t ulen, uoff;
};

struct egr_dnsproxy {
	struct egr_loop *loop;
	uint64_t answer_latency_ns; /* of the answer being reported, for emit() */
	uint32_t answer_learned;    /* and which of its listed addresses were learned */
	struct egr_dnsproxy_config cfg;
	int up4, up6;
	int timer_fd;
	int self_netns;
	struct egr_localaddr *host_la; /* egressd's network namespace's addresses */
	struct sb *sbs;
	struct pending *pend;
	uint32_t npend;
	uint32_t inflight;
	int32_t *by_id;            /* 65536: upstream id -> slot, -1 free */
	uint32_t cur_up;
	uint16_t rnd[256];
	uint32_t nrnd;
	uint64_t dropped_answers;  /* upstream packets that matched nothing */
	uint8_t buf[MSG_MAX + 1];
	uint8_t obuf[MSG_MAX + 1];
};

const char *egr_dns_verdict_name(enum egr_dns_verdict v)
{
	switch (v) {
	case EGR_DNS_V_ALLOWED:
		return "allowed";
	case EGR_DNS_V_REFUSED:
		return "refused";
	case EGR_DNS_V_SERVFAIL:
		return "servfail";
	case EGR_DNS_V_EXFIL:
		return "exfil";
	case EGR_DNS_V_CAP:
		return "cap";
	case EGR_DNS_V_REBIND:
		return "rebind";
	case EGR_DNS_V_AUDIT:
		return "audit";
	}
	return "?";
}

/* --- configuration helpers --------------------------------------------------- */

int egr_dnsproxy_parse_addr(const char *text, struct sockaddr_storage *out)
{
	char host[INET6_ADDRSTRLEN + 1];
	const char *port = NULL, *h = text, *end;
	unsigned long pnum = 53;
	size_t hlen;

	if (!text || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	if (text[0] == '[') {
		end = strchr(text, ']');
		if (!end)
			return -EINVAL;
		h = text + 1;
		hlen = (size_t)(end - h);
		if (end[1] == ':')
			port = end + 2;
		else if (end[1])
			return -EINVAL;
	} else {
		const char *c = strchr(text, ':');

		if (c && strchr(c + 1, ':')) {
			hlen = strlen(text); /* bare IPv6, no port */
		} else if (c) {
			hlen = (size_t)(c - text);
			port = c + 1;
		} else {
			hlen = strlen(text);
		}
	}
	if (!hlen || hlen >= sizeof(host))
		return -EINVAL;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	if (port) {
		char *e;

		if (!*port || *port < '0' || *port > '9')
			return -EINVAL;
		errno = 0;
		pnum = strtoul(port, &e, 10);
		if (errno || *e || pnum == 0 || pnum > 65535)
			return -EINVAL;
	}
	if (text[0] != '[') {
		struct sockaddr_in *s4 = (struct sockaddr_in *)out;

		if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
			s4->sin_family = AF_INET;
			s4->sin_port = htons((uint16_t)pnum);
			return 0;
		}
		if (port)
			return -EINVAL; /* "v6:port" without brackets is ambiguous */
	}
	{
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)out;
		char *pct = strchr(host, '%');

		if (pct) {
			s6->sin6_scope_id = if_nametoindex(pct + 1);
			*pct = '\0';
		}
		if (inet_pton(AF_INET6, host, &s6->sin6_addr) != 1) {
			memset(out, 0, sizeof(*out));
			return -EINVAL;
		}
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)pnum);
	}
	return 0;
}

int egr_dnsproxy_resolv_conf(const char *path, struct egr_dnsproxy_config *cfg)
{
	char line[512];
	FILE *f;

	if (!cfg)
		return -EINVAL;
	f = fopen(path ? path : "/etc/resolv.conf", "re");
	if (!f)
		return -errno;
	cfg->nupstreams = 0;
	while (fgets(line, sizeof(line), f) && cfg->nupstreams < EGR_DNSPROXY_MAX_UPSTREAMS) {
		char *s = line, *a;

		while (*s == ' ' || *s == '\t')
			s++;
		if (strncmp(s, "nameserver", 10) || (s[10] != ' ' && s[10] != '\t'))
			continue;
		s += 10;
		while (*s == ' ' || *s == '\t')
			s++;
		a = s;
		while (*s && *s != ' ' && *s != '\t' && *s != '\n' && *s != '#' && *s != ';')
			s++;
		*s = '\0';
		/* resolv.conf has bare addresses, never a port: a v6 with
		 * a scope ("fe80::1%eth0") parses as bare IPv6 too. */
		if (egr_dnsproxy_parse_addr(a, &cfg->upstreams[cfg->nupstreams]) == 0)
			cfg->nupstreams++;
		else
			log_warn("dns: ignoring nameserver \"%s\" in %s", a,
				 path ? path : "/etc/resolv.conf");
	}
	fclose(f);
	return cfg->nupstreams ? 0 : -ENOENT;
}

static socklen_t sa_len(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

static bool sa_equal(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;

		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	{
		const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;

		return x->sin6_port == y->sin6_port &&
		       !memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr));
	}
}

static const char *sa_str(const struct sockaddr_storage *ss, char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN];

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)ss;

		inet_ntop(AF_INET, &s->sin_addr, a, sizeof(a));
		snprintf(buf, len, "%s:%u", a, ntohs(s->sin_port));
	} else {
		const struct sockaddr_in6 *s = (const void *)ss;

		inet_ntop(AF_INET6, &s->sin6_addr, a, sizeof(a));
		snprintf(buf, len, "[%s]:%u", a, ntohs(s->sin6_port));
	}
	return buf;
}

/* --- events and replies ------------------------------------------------------ */

static void emit(struct sb *sb, const char *qname, uint16_t qtype, int transport,
		 enum egr_dns_verdict v, const char *reason, int error, uint16_t rcode,
		 const struct egr_dns_addr *addrs, size_t n)
{
	struct egr_dnsproxy *p = sb->p;
	struct egr_dns_event ev = {
		.sandbox_id = sb->id,
		.tenant = sb->tenant,
		.qname = qname,
		.qtype = qtype,
		.transport = transport,
		.verdict = v,
		.reason = reason ? reason : "",
		.error = error,
		.rcode = rcode,
		.naddrs = n,
		.latency_ns = p->answer_latency_ns,
		.learned_mask = p->answer_learned,
	};

	ev.naddrs_listed = n < EGR_DNSPROXY_EVENT_ADDRS ? n : EGR_DNSPROXY_EVENT_ADDRS;
	if (ev.naddrs_listed)
		memcpy(ev.addrs, addrs, ev.naddrs_listed * sizeof(*addrs));
	log_debug("dns: sandbox %u %s %s %s: %s%s%s", sb->id, qname,
		  egr_dns_type_name(qtype) ? egr_dns_type_name(qtype) : "?",
		  transport == IPPROTO_TCP ? "tcp" : "udp", egr_dns_verdict_name(v),
		  reason ? " - " : "", reason ? reason : "");
	if (p->cfg.event)
		p->cfg.event(p->cfg.ctx, &ev);
}

static void conn_close(struct tconn *c);

static void conn_flush(struct tconn *c)
{
	while (c->woff < c->wlen) {
		ssize_t k = send(c->fd, c->wbuf + c->woff, c->wlen - c->woff, MSG_NOSIGNAL);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				c->dead = true;
			return;
		}
		c->woff += (size_t)k;
	}
	c->woff = c->wlen = 0;
}

/* After a reply or an error outside the connection's own callback. */
static void conn_settle(struct tconn *c)
{
	if (c->in_cb)
		return;
	if (c->dead || (c->eof && !c->more && !c->npending && c->woff == c->wlen))
		conn_close(c);
}

static void conn_send(struct tconn *c, const uint8_t *msg, size_t len)
{
	size_t need;

	if (c->dead)
		return;
	need = c->wlen + 2 + len;
	if (need - c->woff > TCP_WBUF_MAX) {
		log_warn("dns: sandbox %u: tcp client not reading its answers, closing",
			 c->sb->id);
		c->dead = true;
		return;
	}
	if (c->woff) {
		memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
		c->wlen -= c->woff;
		c->woff = 0;
		need = c->wlen + 2 + len;
	}
	if (need > c->wcap) {
		size_t cap = need < 4096 ? 4096 : need * 2;
		uint8_t *b = realloc(c->wbuf, cap);

		if (!b) {
			c->dead = true;
			return;
		}
		c->wbuf = b;
		c->wcap = cap;
	}
	c->wbuf[c->wlen] = (uint8_t)(len >> 8);
	c->wbuf[c->wlen + 1] = (uint8_t)len;
	memcpy(c->wbuf + c->wlen + 2, msg, len);
	c->wlen += 2 + len;
	c->last_ns = egr_mono_ns();
	conn_flush(c);
}

/* Where an answer goes: a UDP client (lfd + address) or a TCP connection. */
struct client {
	int transport;
	int lfd;
	const struct sockaddr_storage *caddr;
	socklen_t calen;
	struct tconn *conn;
};

static void reply(struct sb *sb, const struct client *cl, const uint8_t *msg, size_t len)
{
	if (cl->transport == IPPROTO_UDP) {
		if (sendto(cl->lfd, msg, len, MSG_NOSIGNAL, (const struct sockaddr *)cl->caddr,
			   cl->calen) < 0)
			log_debug("dns: sandbox %u: reply: %m", sb->id);
		return;
	}
	if (cl->conn)
		conn_send(cl->conn, msg, len);
}

/* REFUSED or SERVFAIL built from the client's query bytes. */
static void reply_rcode(struct sb *sb, const struct client *cl, const uint8_t *q, size_t qlen,
			uint16_t rcode)
{
	struct egr_dnsproxy *p = sb->p;
	size_t olen;
	int err;

	if (rcode == EGR_DNS_R_REFUSED)
		err = egr_dns_build_refused(q, qlen, p->obuf, sizeof(p->obuf), &olen);
	else
		err = egr_dns_build_servfail(q, qlen, p->obuf, sizeof(p->obuf), &olen);
	if (err) {
		log_debug("dns: sandbox %u: cannot build rcode %u reply: %s", sb->id, rcode,
			  strerror(-err));
		return;
	}
	reply(sb, cl, p->obuf, olen);
}

/* --- the in-flight table ----------------------------------------------------- */

static int random_id(struct egr_dnsproxy *p, uint16_t *id)
{
	for (int tries = 0; tries < 64; tries++) {
		if (!p->nrnd) {
			ssize_t k = getrandom(p->rnd, sizeof(p->rnd), GRND_NONBLOCK);

			if (k != (ssize_t)sizeof(p->rnd))
				return k < 0 ? -errno : -EAGAIN;
			p->nrnd = sizeof(p->rnd) / sizeof(p->rnd[0]);
		}
		*id = p->rnd[--p->nrnd];
		if (p->by_id[*id] < 0)
			return 0;
	}
	return -EBUSY;
}

static void pend_free(struct egr_dnsproxy *p, struct pending *q)
{
	if (!q->used)
		return;
	if (q->ufd >= 0) {
		egr_loop_del(p->loop, q->ufd);
		close(q->ufd);
	}
	if (q->conn && q->conn->npending)
		q->conn->npending--;
	p->by_id[q->up_id] = -1;
	if (q->sb->inflight)
		q->sb->inflight--;
	if (p->inflight)
		p->inflight--;
	free(q->query);
	free(q->ubuf);
	memset(q, 0, sizeof(*q));
	q->ufd = -1;
}

static void pend_client(const struct pending *q, struct client *cl)
{
	cl->transport = q->transport;
	cl->lfd = q->lfd;
	cl->caddr = &q->caddr;
	cl->calen = q->calen;
	cl->conn = q->conn;
}

/* Answer SERVFAIL, count, report and free. */
static void pend_fail(struct egr_dnsproxy *p, struct pending *q, enum egr_dns_verdict v,
		      const char *reason, int error, const struct egr_dns_addr *addrs, size_t n)
{
	struct sb *sb = q->sb;
	struct tconn *conn = q->conn;
	struct client cl;

	pend_client(q, &cl);
	reply_rcode(sb, &cl, q->query, q->qlen, EGR_DNS_R_SERVFAIL);
	sb->st.servfail++;
	if (v == EGR_DNS_V_CAP)
		sb->st.cap++;
	emit(sb, q->qname, q->qtype, q->transport, v, reason, error, EGR_DNS_R_SERVFAIL, addrs,
	     n);
	pend_free(p, q);
	if (conn)
		conn_settle(conn);
}

/* What egr_dns_filter_addrs() removed, for the REBIND event. */
struct rebind_ctx {
	const struct sb *sb;
	size_t n;                  /* addresses drop() removed */
	size_t total;              /* with records removed without asking (non-IN A/AAAA) */
	struct egr_dns_stripped listed[EGR_DNSPROXY_EVENT_ADDRS];
};

/* An address the host delivers to itself (egressd's namespace: the one a
 * sandbox without its own shares, and the one a namespaced sandbox reaches
 * through its veth), or the sandbox's own namespace does. */
static bool sb_is_local(void *ctx, int family, const uint8_t *addr)
{
	const struct sb *sb = ctx;

	return egr_localaddr_contains(sb->p->host_la, family, addr) ||
	       (sb->ns_la && egr_localaddr_contains(sb->ns_la, family, addr));
}

static bool sb_rebind_blocked(const struct sb *sb, int family, const uint8_t *addr,
			      struct egr_rebind_verdict *v)
{
	return egr_dnspolicy_rebind_blocked_local(sb->pol, family, addr, sb_is_local, (void *)sb,
						  v);
}

/* Apply queued address changes before an answer is judged: an address added
 * before the answer arrived is known, whatever order epoll reported the two
 * in. One non-blocking recv per set when nothing is queued. */
static void localaddr_refresh(struct sb *sb)
{
	egr_localaddr_process(sb->p->host_la);
	if (sb->ns_la)
		egr_localaddr_process(sb->ns_la);
}

static void on_localaddr(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	egr_localaddr_process(ctx);
}

static bool rebind_drop(void *ctx, int family, const uint8_t *addr)
{
	struct rebind_ctx *rc = ctx;
	struct egr_rebind_verdict v;

	if (!sb_rebind_blocked(rc->sb, family, addr, &v))
		return false;
	if (rc->n < EGR_DNSPROXY_EVENT_ADDRS) {
		struct egr_dns_stripped *st = &rc->listed[rc->n];

		memset(st, 0, sizeof(*st));
		st->family = family;
		memcpy(st->addr, addr, family == AF_INET ? 4 : 16);
		st->cls = v.cls;
		st->form = v.form;
	}
	rc->n++;
	return true;
}

static void emit_rebind(struct sb *sb, const struct pending *q, uint16_t rcode,
			const struct rebind_ctx *rc, const char *reason)
{
	struct egr_dnsproxy *p = sb->p;
	struct egr_dns_event ev = {
		.sandbox_id = sb->id,
		.tenant = sb->tenant,
		.qname = q->qname,
		.qtype = q->qtype,
		.transport = q->transport,
		.verdict = EGR_DNS_V_REBIND,
		.reason = reason,
		.rcode = rcode,
		.nstripped = rc->total > rc->n ? rc->total : rc->n,
	};

	ev.nstripped_listed = rc->n < EGR_DNSPROXY_EVENT_ADDRS ? rc->n : EGR_DNSPROXY_EVENT_ADDRS;
	memcpy(ev.stripped, rc->listed, ev.nstripped_listed * sizeof(rc->listed[0]));
	/* Per answer, like every other DNS verdict: the event and the
	 * (de-duplicated) alert carry it; a log line each would let a
	 * sandbox flood the log. */
	log_debug("dns: sandbox %u: %zu answer address(es) of %s stripped (DNS rebinding)", sb->id,
		  rc->n, q->qname);
	if (p->cfg.event)
		p->cfg.event(p->cfg.ctx, &ev);
}

/* The client's UDP limit (RFC 6891 6.2.5): 512, or its EDNS size. */
static size_t udp_limit(const struct pending *q)
{
	struct egr_dns_query cq;

	if (egr_dns_parse_query(q->query, q->qlen, &cq) || !cq.edns || cq.edns_udp_size < 512)
		return 512;
	return cq.edns_udp_size;
}

/*
 * An upstream answer that matched q (id, question, source): strip rebinding
 * addresses, learn, then release it with the client's id restored.
 */
static void pend_answer(struct egr_dnsproxy *p, struct pending *q, uint8_t *pkt, size_t len,
			const struct egr_dns_response *r)
{
	static struct egr_dns_response filtered; /* large; single-threaded */
	struct egr_dns_addr addrs[EGR_DNSPROXY_MAX_LEARN];
	struct egr_dns_learned learned[EGR_DNSPROXY_MAX_LEARN];
	struct rebind_ctx rc = { .sb = q->sb };
	struct sb *sb = q->sb;
	struct tconn *conn = q->conn;
	struct client cl;
	size_t n = 0, olen = 0, nstripped = 0;
	int err;

	egr_exfil_note_rcode(sb->exfil, q->qname, r->rcode, egr_mono_ns());
	localaddr_refresh(sb);
	/* Rebinding: what is learned and released is the answer without the
	 * addresses the policy does not let a name point to. */
	err = egr_dns_filter_addrs(pkt, len, rebind_drop, &rc, p->obuf, sizeof(p->obuf), &olen,
				   &nstripped);
	rc.total = nstripped;
	if (!err && nstripped)
		err = egr_dns_parse_response(p->obuf, olen, &filtered);
	if (err) {
		if (rc.n)
			emit_rebind(sb, q, EGR_DNS_R_SERVFAIL, &rc, "cannot strip the answer");
		pend_fail(p, q, EGR_DNS_V_SERVFAIL, "cannot strip rebinding addresses", err, NULL,
			  0);
		return;
	}
	if (nstripped) {
		sb->st.rebind++;
		sb->st.rebind_addrs += nstripped;
		if (q->transport == IPPROTO_UDP && olen > udp_limit(q)) {
			/* Decompressed names made it longer than the client
			 * takes: nothing learned, the client asks over TCP. */
			emit_rebind(sb, q, r->rcode, &rc, "stripped; too long for udp, sent TC");
			pend_client(q, &cl);
			if (!egr_dns_build_truncated(q->query, q->qlen, p->obuf, sizeof(p->obuf),
						     &olen))
				reply(sb, &cl, p->obuf, olen);
			sb->st.allowed++;
			emit(sb, q->qname, q->qtype, q->transport, EGR_DNS_V_ALLOWED,
			     "truncated", 0, r->rcode, NULL, 0);
			pend_free(p, q);
			return;
		}
		emit_rebind(sb, q, r->rcode, &rc, "stripped");
		pkt = p->obuf;
		len = olen;
		r = &filtered;
	}
	err = egr_dns_answer_addrs(r, q->qname, addrs, EGR_DNSPROXY_MAX_LEARN, &n);
	if (q->ports.nranges) {
		if (err == -ENOSPC || r->dropped) {
			/* Addresses we could not account for would reach the
			 * client without working: fail closed. */
			pend_fail(p, q, EGR_DNS_V_CAP, "answer has too many addresses", -ENOSPC,
				  addrs, n);
			return;
		}
		if (n) {
			uint64_t now = egr_boot_ns();

			for (size_t i = 0; i < n; i++) {
				uint32_t ttl = addrs[i].ttl;

				/* The filter removed them all; never learn one. */
				if (sb_rebind_blocked(sb, addrs[i].family, addrs[i].addr,
						      NULL)) {
					pend_fail(p, q, EGR_DNS_V_SERVFAIL,
						  "rebinding address left in the answer", -EFAULT,
						  addrs, n);
					return;
				}
				if (ttl < p->cfg.min_ttl_s)
					ttl = p->cfg.min_ttl_s;
				memset(&learned[i], 0, sizeof(learned[i]));
				learned[i].family = addrs[i].family;
				memcpy(learned[i].addr, addrs[i].addr, sizeof(learned[i].addr));
				learned[i].ttl_s = ttl;
				learned[i].expires_ns = now + (uint64_t)ttl * 1000000000ULL;
				learned[i].ports = q->ports;
				learned[i].qname = q->qname;
			}
			err = p->cfg.learn(p->cfg.ctx, sb->id, learned, n);
			if (err) {
				pend_fail(p, q, EGR_DNS_V_CAP,
					  err == -ENOSPC ? "learned-address cap" : "learn failed",
					  err < 0 ? err : -EIO, addrs, n);
				return;
			}
			sb->st.learned += n;
		}
	}
	pkt[0] = (uint8_t)(q->client_id >> 8);
	pkt[1] = (uint8_t)q->client_id;
	pend_client(q, &cl);
	reply(sb, &cl, pkt, len);
	sb->st.allowed++;
	p->answer_latency_ns = egr_mono_ns() - q->received_ns;
	/* learn() took all n or the query failed above; nothing is learned
	 * for a name that opens no ports. */
	p->answer_learned = q->ports.nranges && n ? (uint32_t)((1ull << (n < EGR_DNSPROXY_EVENT_ADDRS
								       ? n : EGR_DNSPROXY_EVENT_ADDRS)) - 1) : 0;
	emit(sb, q->qname, q->qtype, q->transport, EGR_DNS_V_ALLOWED,
	     r->tc ? "truncated" : (q->ports.nranges ? "learned" : "resolvable only"), 0,
	     r->rcode, addrs, n);
	p->answer_latency_ns = 0;
	p->answer_learned = 0;
	pend_free(p, q);
	if (conn)
		conn_settle(conn);
}

/* Does an upstream response answer q? */
static bool pend_matches(const struct pending *q, const struct egr_dns_response *r)
{
	struct egr_dns_query want;

	memset(&want, 0, sizeof(want));
	want.id = q->up_id;
	want.qtype = q->qtype;
	want.qclass = q->qclass;
	memcpy(want.qname, q->qname, sizeof(want.qname));
	return egr_dns_response_matches(&want, r);
}

/* --- upstream ---------------------------------------------------------------- */

static void on_upstream_udp(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_dnsproxy *p = ctx;
	static struct egr_dns_response r; /* large; single-threaded */

	for (int i = 0; i < RX_BATCH; i++) {
		struct sockaddr_storage from;
		socklen_t flen = sizeof(from);
		struct pending *q;
		ssize_t k;
		int32_t slot;

		k = recvfrom(fd, p->buf, sizeof(p->buf), 0, (struct sockaddr *)&from, &flen);
		if (k < 0)
			return;
		if (egr_dns_parse_response(p->buf, (size_t)k, &r)) {
			p->dropped_answers++;
			continue;
		}
		slot = p->by_id[r.id];
		if (slot < 0) {
			p->dropped_answers++;
			continue;
		}
		q = &p->pend[slot];
		if (q->transport != IPPROTO_UDP ||
		    !sa_equal(&from, &p->cfg.upstreams[q->up]) || !pend_matches(q, &r)) {
			p->dropped_answers++;
			continue;
		}
		pend_answer(p, q, p->buf, (size_t)k, &r);
	}
}

/* Progress a TCP upstream exchange; on completion or error the query is
 * answered and freed. */
static void tcp_up_step(struct egr_dnsproxy *p, struct pending *q, uint32_t events)
{
	static struct egr_dns_response r;

	if (q->tstate == T_CONNECTING) {
		int soerr = 0;
		socklen_t sl = sizeof(soerr);

		if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		if (getsockopt(q->ufd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
			soerr = errno;
		if (soerr) {
			pend_fail(p, q, EGR_DNS_V_SERVFAIL, "upstream tcp connect", -soerr, NULL, 0);
			return;
		}
		q->tstate = T_SENDING;
	}
	if (q->tstate == T_SENDING) {
		while (q->uoff < q->ulen) {
			ssize_t k = send(q->ufd, q->ubuf + q->uoff, q->ulen - q->uoff,
					 MSG_NOSIGNAL);

			if (k < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN || errno == EWOULDBLOCK)
					return;
				pend_fail(p, q, EGR_DNS_V_SERVFAIL, "upstream tcp send", -errno,
					  NULL, 0);
				return;
			}
			q->uoff += (size_t)k;
		}
		q->tstate = T_READING;
		q->uoff = 0;
		q->ulen = 2;
	}
	/* T_READING: first the 2-byte length, then that many bytes. */
	for (;;) {
		ssize_t k;

		if (q->uoff == q->ulen) {
			if (q->ulen == 2) {
				size_t mlen = ((size_t)q->ubuf[0] << 8) | q->ubuf[1];

				if (mlen < EGR_DNS_HDR_LEN) {
					pend_fail(p, q, EGR_DNS_V_SERVFAIL, "upstream tcp framing",
						  -EBADMSG, NULL, 0);
					return;
				}
				q->ulen = 2 + mlen;
				continue;
			}
			break;
		}
		k = recv(q->ufd, q->ubuf + q->uoff, q->ulen - q->uoff, 0);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			pend_fail(p, q, EGR_DNS_V_SERVFAIL, "upstream tcp recv", -errno, NULL, 0);
			return;
		}
		if (k == 0) {
			pend_fail(p, q, EGR_DNS_V_SERVFAIL, "upstream tcp closed early", -EPIPE,
				  NULL, 0);
			return;
		}
		q->uoff += (size_t)k;
	}
	if (egr_dns_parse_response(q->ubuf + 2, q->ulen - 2, &r) || !pend_matches(q, &r)) {
		pend_fail(p, q, EGR_DNS_V_SERVFAIL, "upstream answer does not match", -EBADMSG,
			  NULL, 0);
		return;
	}
	pend_answer(p, q, q->ubuf + 2, q->ulen - 2, &r);
}

static void on_upstream_tcp(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct pending *q = ctx;

	/* ctx is a slot of the fixed table, never freed while the proxy lives;
	 * a slot reused since has another fd. */
	if (!q->used || q->ufd != fd)
		return;
	tcp_up_step(q->sb->p, q, events);
}

/* --- queries ------------------------------------------------------------------ */

/*
 * The table is full and sb wants a slot. A sandbox's queries in flight are
 * its own business only up to its share: the sandbox with the most in
 * flight, if it has at least two more than sb, loses its oldest query
 * (SERVFAIL, counted as evicted) so that sb gets the slot. Otherwise sb is
 * itself among the heaviest and is shed. So a neighbour that fills the
 * table with queries the upstream never answers costs the others nothing.
 */
static bool evict_for(struct egr_dnsproxy *p, struct sb *sb)
{
	struct sb *heavy = NULL;
	struct pending *oldest = NULL;

	for (struct sb *o = p->sbs; o; o = o->next)
		if (!heavy || o->inflight > heavy->inflight)
			heavy = o;
	if (!heavy || heavy == sb || heavy->inflight < sb->inflight + 2)
		return false;
	for (uint32_t i = 0; i < p->npend; i++) {
		struct pending *q = &p->pend[i];

		if (q->used && q->sb == heavy && (!oldest || q->received_ns < oldest->received_ns))
			oldest = q;
	}
	if (!oldest)
		return false;
	heavy->st.evicted++;
	pend_fail(p, oldest, EGR_DNS_V_SERVFAIL, "evicted: sandbox over its in-flight share",
		  -EBUSY, NULL, 0);
	return true;
}

/* Take one token of sb's query bucket; false when it is empty. */
static bool rate_take(struct egr_dnsproxy *p, struct sb *sb)
{
	uint64_t now = egr_mono_ns();

	if (now > sb->tokens_ns) {
		sb->tokens += (double)(now - sb->tokens_ns) * p->cfg.rate_qps / 1e9;
		if (sb->tokens > p->cfg.burst)
			sb->tokens = p->cfg.burst;
	}
	sb->tokens_ns = now;
	if (sb->tokens < 1.0) {
		sb->st.shed_rate++;
		return false;
	}
	sb->tokens -= 1.0;
	return true;
}

static int forward(struct egr_dnsproxy *p, struct sb *sb, const struct client *cl,
		   const uint8_t *pkt, size_t len, const struct egr_dns_query *qq,
		   const struct egr_dns_ports *ports)
{
	const struct sockaddr_storage *up;
	struct pending *q = NULL;
	uint16_t id = 0;
	int err;

	if (sb->inflight >= p->cfg.max_inflight_per_sb)
		return -EDQUOT;
	if (p->inflight >= p->npend && !evict_for(p, sb))
		return -EBUSY;
	for (uint32_t i = 0; i < p->npend; i++)
		if (!p->pend[i].used) {
			q = &p->pend[i];
			break;
		}
	if (!q)
		return -EBUSY;
	err = random_id(p, &id);
	if (err)
		return err;
	memset(q, 0, sizeof(*q));
	q->ufd = -1;
	q->query = malloc(len);
	if (!q->query)
		return -ENOMEM;
	memcpy(q->query, pkt, len);
	q->qlen = len;
	q->used = true;
	q->idx = (uint32_t)(q - p->pend);
	q->sb = sb;
	q->transport = cl->transport;
	q->lfd = cl->lfd;
	if (cl->caddr) {
		memcpy(&q->caddr, cl->caddr, cl->calen);
		q->calen = cl->calen;
	}
	q->conn = cl->conn;
	q->client_id = qq->id;
	q->up_id = id;
	q->qtype = qq->qtype;
	q->qclass = qq->qclass;
	memcpy(q->qname, qq->qname, sizeof(q->qname));
	q->ports = *ports;
	q->received_ns = egr_mono_ns();
	q->deadline_ns = q->received_ns + (uint64_t)p->cfg.timeout_ms * 1000000ULL;
	q->up = p->cur_up;
	p->by_id[id] = (int32_t)q->idx;
	p->inflight++;
	sb->inflight++;
	if (q->conn)
		q->conn->npending++;
	up = &p->cfg.upstreams[q->up];

	if (cl->transport == IPPROTO_UDP) {
		int ufd = up->ss_family == AF_INET ? p->up4 : p->up6;

		memcpy(p->obuf, pkt, len);
		p->obuf[0] = (uint8_t)(id >> 8);
		p->obuf[1] = (uint8_t)id;
		if (sendto(ufd, p->obuf, len, MSG_NOSIGNAL, (const struct sockaddr *)up,
			   sa_len(up)) < 0) {
			err = -errno;
			goto fail;
		}
		return 0;
	}

	q->ubuf = malloc(2 + MSG_MAX);
	if (!q->ubuf) {
		err = -ENOMEM;
		goto fail;
	}
	q->ubuf[0] = (uint8_t)(len >> 8);
	q->ubuf[1] = (uint8_t)len;
	memcpy(q->ubuf + 2, pkt, len);
	q->ubuf[2] = (uint8_t)(id >> 8);
	q->ubuf[3] = (uint8_t)id;
	q->ulen = 2 + len;
	q->ufd = socket(up->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (q->ufd < 0) {
		err = -errno;
		goto fail;
	}
	q->tstate = T_CONNECTING;
	if (connect(q->ufd, (const struct sockaddr *)up, sa_len(up)) == 0) {
		q->tstate = T_SENDING;
	} else if (errno != EINPROGRESS) {
		err = -errno;
		goto fail;
	}
	err = egr_loop_add(p->loop, q->ufd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
			   on_upstream_tcp, q);
	if (err) {
		close(q->ufd);
		q->ufd = -1;
		goto fail;
	}
	if (q->tstate == T_SENDING)
		tcp_up_step(p, q, EPOLLOUT);
	return 0;
fail:
	/* The caller answers SERVFAIL from the query bytes it still has. */
	if (q->ufd >= 0) {
		close(q->ufd);
		q->ufd = -1;
	}
	pend_free(p, q);
	return err;
}

static void handle_query(struct sb *sb, const struct client *cl, const uint8_t *pkt, size_t len)
{
	struct egr_dnsproxy *p = sb->p;
	struct egr_dnspolicy_match m;
	enum egr_exfil_reason why;
	struct egr_dns_query q;
	int err;

	if (!rate_take(p, sb)) {
		/* Unanswered over UDP (the cheapest: nothing parsed, nothing
		 * sent); over TCP the stream's order needs an answer. */
		if (cl->transport == IPPROTO_TCP)
			reply_rcode(sb, cl, pkt, len, EGR_DNS_R_SERVFAIL);
		return;
	}
	err = egr_dns_parse_query(pkt, len, &q);
	if (err) {
		sb->st.malformed++;
		log_debug("dns: sandbox %u: malformed query (%zu bytes): %s", sb->id, len,
			  strerror(-err));
		return;
	}
	if (q.qclass != EGR_DNS_C_IN) {
		reply_rcode(sb, cl, pkt, len, EGR_DNS_R_REFUSED);
		sb->st.refused++;
		emit(sb, q.qname, q.qtype, cl->transport, EGR_DNS_V_REFUSED, "class not IN", 0,
		     EGR_DNS_R_REFUSED, NULL, 0);
		return;
	}
	if (egr_dnspolicy_match(sb->pol, q.qname, &m) != 1) {
		if (egr_dnspolicy_audit(sb->pol)) {
			/* Audit mode: resolve it; its addresses are learned
			 * without ports, so reaching them is a would-be deny
			 * the kernel reports too. */
			memset(&m, 0, sizeof(m));
			snprintf(m.domain, sizeof(m.domain), "%s", q.qname);
			sb->st.would_deny++;
			emit(sb, q.qname, q.qtype, cl->transport, EGR_DNS_V_AUDIT,
			     "name not allowed", 0, 0, NULL, 0);
		} else {
			reply_rcode(sb, cl, pkt, len, EGR_DNS_R_REFUSED);
			sb->st.refused++;
			emit(sb, q.qname, q.qtype, cl->transport, EGR_DNS_V_REFUSED,
			     "name not allowed", 0, EGR_DNS_R_REFUSED, NULL, 0);
			return;
		}
	}
	if (!egr_dnspolicy_qtype_allowed(sb->pol, q.qtype) && egr_dnspolicy_audit(sb->pol)) {
		sb->st.would_deny++;
		emit(sb, q.qname, q.qtype, cl->transport, EGR_DNS_V_AUDIT, "qtype not allowed", 0,
		     0, NULL, 0);
	} else if (!egr_dnspolicy_qtype_allowed(sb->pol, q.qtype)) {
		reply_rcode(sb, cl, pkt, len, EGR_DNS_R_REFUSED);
		sb->st.refused++;
		emit(sb, q.qname, q.qtype, cl->transport, EGR_DNS_V_REFUSED, "qtype not allowed",
		     0, EGR_DNS_R_REFUSED, NULL, 0);
		return;
	}
	err = egr_exfil_check(sb->exfil, q.qname, m.domain, egr_mono_ns(), &why);
	if (err) {
		reply_rcode(sb, cl, pkt, len, err == -EPERM ? EGR_DNS_R_REFUSED : EGR_DNS_R_SERVFAIL);
		if (err == -EPERM) {
			sb->st.exfil++;
			emit(sb, q.qname, q.qtype, cl->transport, EGR_DNS_V_EXFIL,
			     egr_exfil_reason_name(why), 0, EGR_DNS_R_REFUSED, NULL, 0);
		} else {
			sb->st.servfail++;
			emit(sb, q.qname, q.qtype, cl->transport, EGR_DNS_V_SERVFAIL,
			     "exfil tracker", err, EGR_DNS_R_SERVFAIL, NULL, 0);
		}
		return;
	}
	if (cl->conn && cl->conn->npending >= TCP_PER_CONN)
		err = -EBUSY;
	else
		err = forward(p, sb, cl, pkt, len, &q, &m.ports);
	if (err) {
		reply_rcode(sb, cl, pkt, len, EGR_DNS_R_SERVFAIL);
		sb->st.servfail++;
		if (err == -EBUSY || err == -EDQUOT)
			sb->st.shed_inflight++;
		emit(sb, q.qname, q.qtype, cl->transport, EGR_DNS_V_SERVFAIL,
		     err == -EDQUOT ? "sandbox's in-flight limit" :
		     err == -EBUSY ? "too many queries in flight" : "cannot forward", err,
		     EGR_DNS_R_SERVFAIL, NULL, 0);
	}
}

/* --- who asks ------------------------------------------------------------------- */

/*
 * Did the kernel see this sender, a socket of sb, send to sb's proxy
 * (egr_dns_clients, written by cgroup_skb/egress before the packet reached
 * the listener)? Anyone else who reaches the listener's port — a process
 * outside every sandbox, another sandbox allowed to reach loopback — is
 * not sb, whatever it sends. Any error: not sb (fail closed).
 */
static bool client_is_sb(struct sb *sb, const struct sockaddr_storage *from, int protocol)
{
	struct egr_dnsproxy *p = sb->p;
	struct egr_dns_client_key key;
	struct egr_dns_client_val val;

	if (!p->cfg.verify_clients)
		return true;
	memset(&key, 0, sizeof(key));
	key.sandbox_id = sb->id;
	key.protocol = (uint8_t)protocol;
	if (from->ss_family == AF_INET) {
		const struct sockaddr_in *s4 = (const void *)from;

		key.family = AF_INET;
		key.port = ntohs(s4->sin_port);
		memcpy(key.addr, &s4->sin_addr, 4);
	} else if (from->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const void *)from;

		key.family = AF_INET6;
		key.port = ntohs(s6->sin6_port);
		memcpy(key.addr, &s6->sin6_addr, 16);
	} else {
		return false;
	}
	if (bpf_map_lookup_elem(p->cfg.clients_fd, &key, &val) == 0)
		return true;
	sb->st.foreign++;
	if (errno != ENOENT)
		log_warn("dns: sandbox %u: egr_dns_clients lookup: %m; dropping", sb->id);
	return false;
}

/* Forget every sender recorded for sandbox id (it is gone, or its id is
 * new): a socket left from an earlier sandbox with this id must not ask as
 * the next one. */
static void purge_clients(struct egr_dnsproxy *p, uint32_t id)
{
	struct egr_dns_client_key key, next, *prev = NULL;
	unsigned purged = 0;

	if (!p->cfg.verify_clients)
		return;
	while (bpf_map_get_next_key(p->cfg.clients_fd, prev, &next) == 0) {
		if (next.sandbox_id == id && bpf_map_delete_elem(p->cfg.clients_fd, &next) == 0) {
			purged++;
			continue; /* prev stays: the walk goes on from there */
		}
		key = next;
		prev = &key;
	}
	bpf_map_delete_elem(p->cfg.clients_n_fd, &id);
	if (purged)
		log_debug("dns: sandbox %u: forgot %u client sockets", id, purged);
}

/* --- listeners ------------------------------------------------------------------ */

static void on_udp_listener(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct listener *l = ctx;
	struct egr_dnsproxy *p = l->sb->p;

	/* One sandbox's turn (level-triggered: the rest on a later one). */
	for (int i = 0; i < EGR_DNSPROXY_UDP_TURN; i++) {
		struct sockaddr_storage from;
		struct client cl = { .transport = IPPROTO_UDP, .lfd = fd, .caddr = &from };
		ssize_t k;

		cl.calen = sizeof(from);
		k = recvfrom(fd, p->buf, sizeof(p->buf), 0, (struct sockaddr *)&from, &cl.calen);
		if (k < 0)
			return;
		/* Before anything is charged to the sandbox: a stranger's
		 * queries take none of its tokens or exfiltration budget. */
		if (!client_is_sb(l->sb, &from, IPPROTO_UDP))
			continue;
		handle_query(l->sb, &cl, p->buf, (size_t)k);
	}
}

static void conn_close(struct tconn *c)
{
	struct sb *sb = c->sb;
	struct egr_dnsproxy *p = sb->p;
	struct tconn **pc;

	/* Its queries in flight are dropped: nobody is left to answer. */
	for (uint32_t i = 0; i < p->npend && c->npending; i++)
		if (p->pend[i].used && p->pend[i].conn == c)
			pend_free(p, &p->pend[i]);
	egr_loop_del(p->loop, c->fd);
	close(c->fd);
	for (pc = &sb->conns; *pc; pc = &(*pc)->next)
		if (*pc == c) {
			*pc = c->next;
			break;
		}
	sb->nconns--;
	free(c->rbuf);
	free(c->wbuf);
	free(c);
}

static void on_tcp_conn(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct tconn *c = ctx;
	unsigned int handled = 0;

	c->in_cb = true;
	c->more = false;
	c->last_ns = egr_mono_ns();
	if (events & EPOLLOUT)
		conn_flush(c);
	for (;;) {
		ssize_t k;

		/* Every complete length-prefixed message already buffered,
		 * up to this wake-up's share. */
		while (c->rlen >= 2 && !c->dead && handled < TCP_QUERIES_PER_WAKEUP) {
			size_t mlen = ((size_t)c->rbuf[0] << 8) | c->rbuf[1];
			struct client cl = { .transport = IPPROTO_TCP, .lfd = -1, .conn = c };

			if (mlen == 0) {
				c->sb->st.malformed++;
				c->dead = true;
				break;
			}
			if (c->rlen < 2 + mlen)
				break;
			handle_query(c->sb, &cl, c->rbuf + 2, mlen);
			memmove(c->rbuf, c->rbuf + 2 + mlen, c->rlen - 2 - mlen);
			c->rlen -= 2 + mlen;
			handled++;
		}
		if (c->dead)
			break;
		if (handled >= TCP_QUERIES_PER_WAKEUP) {
			c->more = true; /* even after EOF: what is buffered is still owed */
			break;
		}
		if (c->eof)
			break;
		if (!(events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
			break;
		k = recv(fd, c->rbuf + c->rlen, 2 + MSG_MAX - c->rlen, 0);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				c->dead = true;
			break;
		}
		if (k == 0) {
			c->eof = true;
			break;
		}
		c->rlen += (size_t)k;
	}
	c->in_cb = false;
	conn_settle(c);
}

static void on_tcp_listener(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct listener *l = ctx;
	struct sb *sb = l->sb;
	struct egr_dnsproxy *p = sb->p;

	for (int i = 0; i < RX_BATCH; i++) {
		struct sockaddr_storage peer;
		socklen_t plen = sizeof(peer);
		struct tconn *c;
		int cfd = accept4(fd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (cfd < 0)
			return;
		if (!client_is_sb(sb, &peer, IPPROTO_TCP)) {
			close(cfd);
			continue;
		}
		if (sb->nconns >= p->cfg.max_tcp_per_sb) {
			log_warn("dns: sandbox %u: more than %u tcp connections, refusing one",
				 sb->id, p->cfg.max_tcp_per_sb);
			close(cfd);
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (c)
			c->rbuf = malloc(2 + MSG_MAX);
		if (!c || !c->rbuf) {
			free(c);
			close(cfd);
			continue;
		}
		c->sb = sb;
		c->fd = cfd;
		c->last_ns = egr_mono_ns();
		if (egr_loop_add(p->loop, cfd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
				 on_tcp_conn, c)) {
			free(c->rbuf);
			free(c);
			close(cfd);
			continue;
		}
		c->next = sb->conns;
		sb->conns = c;
		sb->nconns++;
	}
}

/* --- timer ------------------------------------------------------------------------ */

static void on_tick(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_dnsproxy *p = ctx;
	uint64_t now = egr_mono_ns(), idle = (uint64_t)p->cfg.tcp_idle_ms * 1000000ULL, exp;
	bool failover = false;

	if (read(fd, &exp, sizeof(exp)) < 0 && errno != EAGAIN)
		log_debug("dns: timer read: %m");
	for (uint32_t i = 0; i < p->npend; i++) {
		struct pending *q = &p->pend[i];

		if (!q->used || q->deadline_ns > now)
			continue;
		if (q->up == p->cur_up)
			failover = true;
		pend_fail(p, q, EGR_DNS_V_SERVFAIL, "upstream timeout", -ETIMEDOUT, NULL, 0);
	}
	if (failover && p->cfg.nupstreams > 1) {
		char b[80];

		p->cur_up = (p->cur_up + 1) % (uint32_t)p->cfg.nupstreams;
		log_warn("dns: upstream timed out, switching to %s",
			 sa_str(&p->cfg.upstreams[p->cur_up], b, sizeof(b)));
	}
	for (struct sb *sb = p->sbs; sb; sb = sb->next) {
		struct tconn *c = sb->conns, *next;

		for (; c; c = next) {
			next = c->next;
			if (c->more) {
				/* Its turn again: what it pipelined is still
				 * buffered, and edge-triggered epoll will not
				 * say so. */
				on_tcp_conn(loop, c->fd, EPOLLIN, c);
				continue;
			}
			if (!c->npending && c->last_ns + idle <= now)
				conn_close(c);
		}
	}
}

/* --- proxy and sandboxes --------------------------------------------------------- */

static struct sb *sb_find(const struct egr_dnsproxy *p, uint32_t id)
{
	for (struct sb *sb = p->sbs; sb; sb = sb->next)
		if (sb->id == id)
			return sb;
	return NULL;
}

static int upstream_socket(int family)
{
	int fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	return fd < 0 ? -errno : fd;
}

int egr_dnsproxy_new(struct egr_loop *loop, const struct egr_dnsproxy_config *cfg,
		     struct egr_dnsproxy **out)
{
	struct itimerspec its = { 0 };
	struct egr_dnsproxy *p;
	int err;

	if (!loop || !cfg || !out || !cfg->learn)
		return -EINVAL;
	*out = NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->loop = loop;
	p->cfg = *cfg;
	p->up4 = p->up6 = p->timer_fd = p->self_netns = -1;
	if (!p->cfg.nupstreams) {
		err = egr_dnsproxy_resolv_conf(NULL, &p->cfg);
		if (err) {
			log_error("dns: no upstream resolver given and none in /etc/resolv.conf");
			goto fail;
		}
	}
	if (p->cfg.nupstreams > EGR_DNSPROXY_MAX_UPSTREAMS) {
		err = -EINVAL;
		goto fail;
	}
	if (!p->cfg.timeout_ms)
		p->cfg.timeout_ms = 2000;
	if (!p->cfg.max_inflight)
		p->cfg.max_inflight = 1024;
	if (p->cfg.max_inflight > 16384)
		p->cfg.max_inflight = 16384;
	if (!p->cfg.max_inflight_per_sb)
		p->cfg.max_inflight_per_sb =
			p->cfg.max_inflight / 4 < 64 ? 64 : p->cfg.max_inflight / 4;
	if (!p->cfg.max_tcp_per_sb)
		p->cfg.max_tcp_per_sb = 16;
	if (!p->cfg.tcp_idle_ms)
		p->cfg.tcp_idle_ms = 10000;
	if (!p->cfg.tick_ms)
		p->cfg.tick_ms = 100;
	if (!p->cfg.rate_qps)
		p->cfg.rate_qps = EGR_DNSPROXY_RATE;
	if (!p->cfg.burst)
		p->cfg.burst = p->cfg.rate_qps > EGR_DNSPROXY_BURST ? p->cfg.rate_qps :
								      EGR_DNSPROXY_BURST;
	if (!p->cfg.exfil.window_ns && !p->cfg.exfil.max_label_len && !p->cfg.exfil.max_name_len &&
	    !p->cfg.exfil.max_subdomains && !p->cfg.exfil.max_nxdomain &&
	    p->cfg.exfil.max_entropy == 0)
		egr_exfil_limits_default(&p->cfg.exfil);

	p->npend = p->cfg.max_inflight;
	p->pend = calloc(p->npend, sizeof(*p->pend));
	p->by_id = malloc(65536 * sizeof(*p->by_id));
	if (!p->pend || !p->by_id) {
		err = -ENOMEM;
		goto fail;
	}
	for (uint32_t i = 0; i < p->npend; i++)
		p->pend[i].ufd = -1;
	for (int i = 0; i < 65536; i++)
		p->by_id[i] = -1;

	for (size_t i = 0; i < p->cfg.nupstreams; i++) {
		int fam = p->cfg.upstreams[i].ss_family;
		int *fd = fam == AF_INET ? &p->up4 : &p->up6;

		if (fam != AF_INET && fam != AF_INET6) {
			err = -EAFNOSUPPORT;
			goto fail;
		}
		if (*fd >= 0)
			continue;
		*fd = upstream_socket(fam);
		if (*fd < 0) {
			err = *fd;
			goto fail;
		}
		err = egr_loop_add(loop, *fd, EPOLLIN, on_upstream_udp, p);
		if (err) {
			close(*fd);
			*fd = -1;
			goto fail;
		}
	}
	p->self_netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (p->self_netns < 0)
		log_warn("dns: cannot open /proc/self/ns/net (%m): sandboxes with their own "
			 "network namespace are not supported");
	/* Without the host's addresses no answer could be judged: refuse to
	 * start rather than let "this machine" be learned. */
	err = egr_localaddr_open("host", &p->host_la);
	if (!err)
		err = egr_loop_add(loop, egr_localaddr_fd(p->host_la), EPOLLIN, on_localaddr,
				   p->host_la);
	if (err) {
		log_error("dns: the host's local addresses (rtnetlink): %s", strerror(-err));
		goto fail;
	}

	p->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (p->timer_fd < 0) {
		err = -errno;
		goto fail;
	}
	its.it_interval.tv_sec = p->cfg.tick_ms / 1000;
	its.it_interval.tv_nsec = (long)(p->cfg.tick_ms % 1000) * 1000000L;
	its.it_value = its.it_interval;
	if (timerfd_settime(p->timer_fd, 0, &its, NULL) < 0) {
		err = -errno;
		goto fail;
	}
	err = egr_loop_add(loop, p->timer_fd, EPOLLIN, on_tick, p);
	if (err) {
		close(p->timer_fd);
		p->timer_fd = -1;
		goto fail;
	}
	for (size_t i = 0; i < p->cfg.nupstreams; i++) {
		char b[80];

		log_info("dns: upstream %s", sa_str(&p->cfg.upstreams[i], b, sizeof(b)));
	}
	*out = p;
	return 0;
fail:
	egr_dnsproxy_free(p);
	return err;
}

static void close_listeners(struct sb *sb)
{
	for (int i = 0; i < 4; i++) {
		if (sb->lis[i].fd < 0)
			continue;
		egr_loop_del(sb->p->loop, sb->lis[i].fd);
		close(sb->lis[i].fd);
		sb->lis[i].fd = -1;
	}
}

static void sb_free(struct sb *sb)
{
	struct egr_dnsproxy *p = sb->p;

	while (sb->conns)
		conn_close(sb->conns);
	for (uint32_t i = 0; i < p->npend; i++)
		if (p->pend[i].used && p->pend[i].sb == sb)
			pend_free(p, &p->pend[i]);
	close_listeners(sb);
	if (sb->ns_la) {
		egr_loop_del(p->loop, egr_localaddr_fd(sb->ns_la));
		egr_localaddr_free(sb->ns_la);
	}
	egr_dnspolicy_free(sb->pol);
	egr_exfil_free(sb->exfil);
	free(sb->tenant);
	free(sb);
}

void egr_dnsproxy_free(struct egr_dnsproxy *p)
{
	if (!p)
		return;
	while (p->sbs) {
		struct sb *sb = p->sbs;

		p->sbs = sb->next;
		sb_free(sb);
	}
	if (p->up4 >= 0) {
		egr_loop_del(p->loop, p->up4);
		close(p->up4);
	}
	if (p->up6 >= 0) {
		egr_loop_del(p->loop, p->up6);
		close(p->up6);
	}
	if (p->timer_fd >= 0) {
		egr_loop_del(p->loop, p->timer_fd);
		close(p->timer_fd);
	}
	if (p->self_netns >= 0)
		close(p->self_netns);
	if (p->host_la) {
		egr_loop_del(p->loop, egr_localaddr_fd(p->host_la));
		egr_localaddr_free(p->host_la);
	}
	free(p->pend);
	free(p->by_id);
	free(p);
}

/* UDP on loopback:want (0 = any), then TCP on the same port; retried when
 * an ephemeral UDP port is taken for TCP. */
static int open_family(struct sb *sb, int family, uint16_t want, struct listener *u,
		       struct listener *t, uint16_t *port)
{
	int err = 0;

	for (int attempt = 0; attempt < 16; attempt++) {
		struct sockaddr_storage ss;
		socklen_t sl;
		int one = 1, ufd, tfd;

		memset(&ss, 0, sizeof(ss));
		if (family == AF_INET) {
			struct sockaddr_in *s = (void *)&ss;

			s->sin_family = AF_INET;
			s->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
			s->sin_port = htons(want);
		} else {
			struct sockaddr_in6 *s = (void *)&ss;

			s->sin6_family = AF_INET6;
			s->sin6_addr = in6addr_loopback;
			s->sin6_port = htons(want);
		}
		sl = sa_len(&ss);
		ufd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (ufd < 0)
			return -errno;
		if (family == AF_INET6)
			setsockopt(ufd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		if (bind(ufd, (struct sockaddr *)&ss, sl) < 0 ||
		    getsockname(ufd, (struct sockaddr *)&ss, &sl) < 0) {
			err = -errno;
			close(ufd);
			return err;
		}
		tfd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (tfd < 0) {
			err = -errno;
			close(ufd);
			return err;
		}
		setsockopt(tfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (family == AF_INET6)
			setsockopt(tfd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		if (bind(tfd, (struct sockaddr *)&ss, sl) < 0 || listen(tfd, TCP_BACKLOG) < 0) {
			err = -errno;
			close(tfd);
			close(ufd);
			if (err == -EADDRINUSE && !want)
				continue;
			return err;
		}
		u->fd = ufd;
		t->fd = tfd;
		*port = family == AF_INET ? ntohs(((struct sockaddr_in *)&ss)->sin_port) :
					    ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
		return 0;
	}
	return err ? err : -EADDRINUSE;
}

int egr_dnsproxy_add_sandbox(struct egr_dnsproxy *p, uint32_t sandbox_id, const char *tenant,
			     struct egr_dnspolicy *pol, int netns_fd, uint16_t want_port4,
			     uint16_t want_port6, uint16_t *port4, uint16_t *port6)
{
	struct sb *sb;
	int err, err6, errla = 0;

	if (!p || !pol || sandbox_id == EGR_ID_NONE) {
		egr_dnspolicy_free(pol);
		return -EINVAL;
	}
	if (sb_find(p, sandbox_id)) {
		egr_dnspolicy_free(pol);
		return -EEXIST;
	}
	if (netns_fd >= 0 && p->self_netns < 0) {
		egr_dnspolicy_free(pol);
		return -EOPNOTSUPP;
	}
	sb = calloc(1, sizeof(*sb));
	if (!sb) {
		egr_dnspolicy_free(pol);
		return -ENOMEM;
	}
	sb->p = p;
	sb->id = sandbox_id;
	sb->pol = pol;
	sb->tokens = p->cfg.burst;
	sb->tokens_ns = egr_mono_ns();
	for (int i = 0; i < 4; i++) {
		sb->lis[i].fd = -1;
		sb->lis[i].sb = sb;
		sb->lis[i].family = i < 2 ? AF_INET : AF_INET6;
		sb->lis[i].tcp = i & 1;
	}
	/* A new sandbox (adoption re-opens stored ports and keeps what the
	 * kernel recorded): nothing of an earlier one with this id may ask. */
	if (!want_port4 && !want_port6)
		purge_clients(p, sandbox_id);
	sb->tenant = strdup(tenant ? tenant : "");
	err = sb->tenant ? egr_exfil_new(&p->cfg.exfil, &sb->exfil) : -ENOMEM;
	if (err)
		goto fail;

	if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) < 0) {
		err = -errno;
		log_error("dns: sandbox %u: setns into its network namespace: %m", sandbox_id);
		goto fail;
	}
	err = open_family(sb, AF_INET, want_port4, &sb->lis[0], &sb->lis[1], &sb->port4);
	err6 = err ? 0 :
		     open_family(sb, AF_INET6, want_port6, &sb->lis[2], &sb->lis[3], &sb->port6);
	if (!err && netns_fd >= 0) {
		/* Its own addresses too: the netlink sockets belong to the
		 * namespace they are opened in. */
		char what[32];

		snprintf(what, sizeof(what), "sandbox %u", sandbox_id);
		errla = egr_localaddr_open(what, &sb->ns_la);
	}
	if (netns_fd >= 0 && setns(p->self_netns, CLONE_NEWNET) < 0) {
		/* Cannot happen short of a kernel bug; nothing more we can do
		 * than say so loudly: every later socket would be in the wrong
		 * namespace. */
		log_error("dns: cannot return to egressd's network namespace: %m");
		err = err ? err : -errno;
	}
	if (err) {
		log_error("dns: sandbox %u: 127.0.0.1 listeners: %s", sandbox_id, strerror(-err));
		goto fail;
	}
	if (errla) {
		err = errla;
		log_error("dns: sandbox %u: the local addresses of its network namespace: %s",
			  sandbox_id, strerror(-err));
		goto fail;
	}
	if (err6) {
		if (want_port6 || (err6 != -EADDRNOTAVAIL && err6 != -EAFNOSUPPORT)) {
			err = err6;
			log_error("dns: sandbox %u: [::1] listeners: %s", sandbox_id,
				  strerror(-err));
			goto fail;
		}
		log_warn("dns: sandbox %u: no IPv6 loopback (%s): IPv6 DNS not served",
			 sandbox_id, strerror(-err6));
		sb->port6 = 0;
	}
	for (int i = 0; i < 4; i++) {
		if (sb->lis[i].fd < 0)
			continue;
		err = egr_loop_add(p->loop, sb->lis[i].fd, EPOLLIN,
				   sb->lis[i].tcp ? on_tcp_listener : on_udp_listener, &sb->lis[i]);
		if (err) {
			/* Unregister the ones added so far. */
			for (int j = 0; j < i; j++)
				if (sb->lis[j].fd >= 0)
					egr_loop_del(p->loop, sb->lis[j].fd);
			for (int j = 0; j < 4; j++)
				if (sb->lis[j].fd >= 0) {
					close(sb->lis[j].fd);
					sb->lis[j].fd = -1;
				}
			goto fail;
		}
	}
	if (sb->ns_la) {
		err = egr_loop_add(p->loop, egr_localaddr_fd(sb->ns_la), EPOLLIN, on_localaddr,
				   sb->ns_la);
		if (err) {
			close_listeners(sb);
			goto fail;
		}
	}
	sb->next = p->sbs;
	p->sbs = sb;
	if (port4)
		*port4 = sb->port4;
	if (port6)
		*port6 = sb->port6;
	log_info("dns: sandbox %u (tenant %s): listening on 127.0.0.1:%u and [::1]:%u%s",
		 sandbox_id, sb->tenant, sb->port4, sb->port6,
		 netns_fd >= 0 ? " in its network namespace" : "");
	return 0;
fail:
	for (int j = 0; j < 4; j++)
		if (sb->lis[j].fd >= 0)
			close(sb->lis[j].fd);
	egr_localaddr_free(sb->ns_la);
	egr_dnspolicy_free(sb->pol);
	egr_exfil_free(sb->exfil);
	free(sb->tenant);
	free(sb);
	return err;
}

int egr_dnsproxy_update_sandbox(struct egr_dnsproxy *p, uint32_t sandbox_id,
				struct egr_dnspolicy *pol)
{
	struct sb *sb = p ? sb_find(p, sandbox_id) : NULL;

	if (!pol)
		return -EINVAL;
	if (!sb) {
		egr_dnspolicy_free(pol);
		return -ENOENT;
	}
	egr_dnspolicy_free(sb->pol);
	sb->pol = pol;
	return 0;
}

int egr_dnsproxy_set_limits(struct egr_dnsproxy *p, uint32_t min_ttl_s,
			    const struct egr_exfil_limits *exfil)
{
	struct egr_exfil **fresh;
	size_t n = 0, i = 0;
	int err = 0;

	for (struct sb *sb = p->sbs; sb; sb = sb->next)
		n++;
	fresh = calloc(n ? n : 1, sizeof(*fresh));
	if (!fresh)
		return -ENOMEM;
	/* New trackers for every sandbox first, so that a failure changes
	 * nothing; their windows start empty. */
	for (struct sb *sb = p->sbs; sb && !err; sb = sb->next)
		err = egr_exfil_new(exfil, &fresh[i++]);
	if (err) {
		for (i = 0; i < n; i++)
			egr_exfil_free(fresh[i]);
		free(fresh);
		return err;
	}
	i = 0;
	for (struct sb *sb = p->sbs; sb; sb = sb->next) {
		egr_exfil_free(sb->exfil);
		sb->exfil = fresh[i++];
	}
	free(fresh);
	p->cfg.exfil = *exfil;
	p->cfg.min_ttl_s = min_ttl_s;
	return 0;
}

int egr_dnsproxy_remove_sandbox(struct egr_dnsproxy *p, uint32_t sandbox_id)
{
	struct sb **psb;

	if (!p)
		return -EINVAL;
	for (psb = &p->sbs; *psb; psb = &(*psb)->next) {
		struct sb *sb = *psb;

		if (sb->id != sandbox_id)
			continue;
		*psb = sb->next;
		sb_free(sb);
		purge_clients(p, sandbox_id);
		log_info("dns: sandbox %u: listeners closed", sandbox_id);
		return 0;
	}
	return -ENOENT;
}

bool egr_dnsproxy_is_local(void *ctx, int family, const uint8_t *addr)
{
	const struct egr_dnsproxy_local *lc = ctx;
	const struct sb *sb;

	if (!lc || !lc->p)
		return true; /* cannot tell: fail closed */
	sb = sb_find(lc->p, lc->sandbox_id);
	if (sb)
		return sb_is_local((void *)sb, family, addr);
	return egr_localaddr_contains(lc->p->host_la, family, addr);
}

int egr_dnsproxy_stats(const struct egr_dnsproxy *p, uint32_t sandbox_id,
		       struct egr_dnsproxy_stats *out)
{
	const struct sb *sb = p ? sb_find(p, sandbox_id) : NULL;

	if (!out)
		return -EINVAL;
	if (!sb)
		return -ENOENT;
	*out = sb->st;
	out->tcp_conns = sb->nconns;
	out->inflight = sb->inflight;
	return 0;
}
