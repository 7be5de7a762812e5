// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * One DNS query (dns_internal.h): the sandbox's rate bucket, name, class and
 * qtype against its DNS policy, the exfiltration tracker, then a slot of
 * the in-flight table (per-sandbox limit; a full table evicts from the
 * heaviest sandbox) and the upstream send. Every verdict is answered
 * (a denial or SERVFAIL built from the client's bytes) and reported.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "dns_internal.h"
#include "log.h"

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
	dnsp_pend_fail(p, oldest, EGR_DNS_V_SERVFAIL, "evicted: sandbox over its in-flight share",
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
	int32_t next_free;
	uint16_t id = 0;
	int err;

	if (sb->inflight >= p->cfg.max_inflight_per_sb)
		return -EDQUOT;
	if (p->inflight >= p->npend && !evict_for(p, sb))
		return -EBUSY;
	if (p->free_head < 0)
		return -EBUSY;
	q = &p->pend[p->free_head];
	next_free = q->next_free;
	err = random_id(p, &id);
	if (err)
		return err;
	memset(q, 0, offsetof(struct pending, qinline));
	q->ufd = -1;
	q->next_free = next_free; /* still free until it is taken below */
	q->query = len <= sizeof(q->qinline) ? q->qinline : malloc(len);
	if (!q->query)
		return -ENOMEM;
	p->free_head = next_free;
	q->next_free = -1;
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
	q->pol_gen = sb->pol_gen;
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

		q->resend_ns = q->received_ns + (uint64_t)p->cfg.timeout_ms * 1000000ULL / 3;
		memcpy(p->obuf, pkt, len);
		p->obuf[0] = (uint8_t)(id >> 8);
		p->obuf[1] = (uint8_t)id;
		/* Sent with the rest of the listener's turn (dns_io.c); a
		 * failed send then answers SERVFAIL as here. */
		if (!dnsp_tx_add(p, ufd, p->obuf, len, true, up, sa_len(up), q, sb->id))
			return 0;
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
			   dnsp_on_upstream_tcp, q);
	if (err) {
		close(q->ufd);
		q->ufd = -1;
		goto fail;
	}
	if (q->tstate == T_SENDING)
		dnsp_tcp_up_step(p, q, EPOLLOUT);
	return 0;
fail:
	/* The caller answers SERVFAIL from the query bytes it still has. */
	if (q->ufd >= 0) {
		close(q->ufd);
		q->ufd = -1;
	}
	dnsp_pend_free(p, q);
	return err;
}

/* The query types an approval is asked for: what a connect needs. */
static bool ask_qtype(uint16_t t)
{
	return t == 1 /* A */ || t == 28 /* AAAA */ || t == 64 /* SVCB */ || t == 65 /* HTTPS */;
}

/* "a.b.example.com" is counted under "b.example.com" by the exfiltration
 * tracker: distinct unknown names under one parent look like a tunnel. */
static const char *parent_of(const char *name)
{
	const char *dot = strchr(name, '.');

	return dot && strchr(dot + 1, '.') ? dot + 1 : name;
}

/*
 * network.unknown_names "ask" (docs/dns.md "Approvals"): hold a query for
 * a name the policy does not allow until someone decides. True when the
 * query was taken care of (held, or refused: exfiltration, too many
 * held); false when it is not one to ask about.
 */
static bool held_for_approval(struct sb *sb, const struct client *cl, const uint8_t *pkt,
			      size_t len, const struct egr_dns_query *q)
{
	struct egr_dnsproxy *p = sb->p;
	struct egr_dns_ports ports;
	enum egr_exfil_reason why;
	uint32_t timeout_s;
	int err;

	if (!p->cfg.grant || !ask_qtype(q->qtype) || !egr_dnspolicy_qtype_allowed(sb->pol, q->qtype) ||
	    !egr_dnspolicy_ask(sb->pol, &timeout_s, &ports))
		return false;
	err = egr_exfil_check(sb->exfil, q->qname, parent_of(q->qname), egr_mono_ns(), &why);
	if (err == -EPERM) {
		dnsp_deny(sb, cl, pkt, len, q->qname, q->qtype, EGR_DNS_V_EXFIL, true,
			  egr_exfil_reason_name(why));
		return true;
	}
	err = dnsp_ask_hold(sb, cl, pkt, len, q, timeout_s, &ports);
	if (!err)
		return true;
	if (err == -EDQUOT && p->cfg.ask) {
		struct egr_dns_ask full = {
			.sandbox_id = sb->id, .tenant = sb->tenant, .qname = q->qname,
			.qtype = q->qtype, .since_unix_ns = egr_clock_ns(CLOCK_REALTIME),
			.ports = ports, .state = EGR_ASK_FULL,
		};

		p->cfg.ask(p->cfg.ctx, &full);
	}
	dnsp_deny(sb, cl, pkt, len, q->qname, q->qtype, EGR_DNS_V_REFUSED, true,
		  err == -EDQUOT ? "too many names awaiting approval" : "cannot hold for approval");
	return true;
}

/* A UDP query of a sandbox at its in-flight limit waits (bounded) instead
 * of a SERVFAIL. 0: deferred. */
static int defer(struct sb *sb, const struct client *cl, const uint8_t *pkt, size_t len)
{
	struct egr_dnsproxy *p = sb->p;
	struct deferred *d;

	if (cl->transport != IPPROTO_UDP || p->ndeferred >= DNS_DEFER_MAX ||
	    sb->ndeferred >= DNS_DEFER_PER_LIMIT * p->cfg.max_inflight_per_sb ||
	    cl->calen > sizeof(d->caddr))
		return -ENOSPC;
	d = malloc(sizeof(*d) + len);
	if (!d)
		return -ENOMEM;
	d->next = NULL;
	d->sb = sb;
	d->lfd = cl->lfd;
	d->calen = cl->calen;
	memcpy(&d->caddr, cl->caddr, cl->calen);
	d->len = len;
	memcpy(d->msg, pkt, len);
	if (!p->deferred_tail)
		p->deferred_tail = &p->deferred;
	*p->deferred_tail = d;
	p->deferred_tail = &d->next;
	p->ndeferred++;
	sb->ndeferred++;
	return 0;
}

static void handle(struct sb *sb, const struct client *cl, const uint8_t *pkt, size_t len);

static void unlink_deferred(struct egr_dnsproxy *p, struct deferred **pd)
{
	struct deferred *d = *pd;

	*pd = d->next;
	if (p->deferred_tail == &d->next)
		p->deferred_tail = pd;
	p->ndeferred--;
	d->sb->ndeferred--;
}

void dnsp_run_deferred(struct egr_dnsproxy *p)
{
	struct deferred **pd = &p->deferred;

	while (*pd) {
		struct deferred *d = *pd;
		struct client cl = { .transport = IPPROTO_UDP, .lfd = d->lfd, .caddr = &d->caddr,
				     .calen = d->calen };

		/* A full table: they wait too (eviction is for lighter
		 * sandboxes' new queries, and a deferred one is the heaviest's). */
		if (p->inflight >= p->npend)
			return;
		if (d->sb->inflight >= p->cfg.max_inflight_per_sb) {
			pd = &d->next;
			continue;
		}
		unlink_deferred(p, pd);
		handle(d->sb, &cl, d->msg, d->len);
		free(d);
	}
}

void dnsp_forget_deferred(struct egr_dnsproxy *p, struct sb *sb)
{
	struct deferred **pd = &p->deferred;

	while (*pd && sb->ndeferred) {
		struct deferred *d = *pd;

		if (d->sb != sb) {
			pd = &d->next;
			continue;
		}
		unlink_deferred(p, pd);
		free(d);
	}
}

void dnsp_handle_query(struct sb *sb, const struct client *cl, const uint8_t *pkt, size_t len)
{
	struct egr_dnsproxy *p = sb->p;

	if (!rate_take(p, sb)) {
		/* Unanswered over UDP (the cheapest: nothing parsed, nothing
		 * sent); over TCP the stream's order needs an answer. */
		if (cl->transport == IPPROTO_TCP)
			dnsp_reply_rcode(sb, cl, pkt, len, EGR_DNS_R_SERVFAIL);
		return;
	}
	/* Behind its earlier deferred ones, or at its limit: wait. */
	if ((sb->ndeferred || sb->inflight >= p->cfg.max_inflight_per_sb) &&
	    defer(sb, cl, pkt, len) == 0)
		return;
	handle(sb, cl, pkt, len);
}

static void handle(struct sb *sb, const struct client *cl, const uint8_t *pkt, size_t len)
{
	struct egr_dnsproxy *p = sb->p;
	struct egr_dnspolicy_match m;
	enum egr_exfil_reason why;
	struct egr_dns_query q;
	int err;

	err = egr_dns_parse_query(pkt, len, &q);
	if (err) {
		sb->st.malformed++;
		log_debug("dns: sandbox %u: malformed query (%zu bytes): %s", sb->id, len,
			  strerror(-err));
		return;
	}
	if (q.qclass != EGR_DNS_C_IN) {
		dnsp_deny(sb, cl, pkt, len, q.qname, q.qtype, EGR_DNS_V_REFUSED, false,
			  "class not IN");
		return;
	}
	if (egr_dnspolicy_match(sb->pol, q.qname, &m) != 1) {
		memset(&m, 0, sizeof(m));
		if (p->cfg.grant && p->cfg.grant(p->cfg.ctx, sb->id, q.qname, &m.ports)) {
			/* Approved (docs/dns.md "Approvals"): allowed with the
			 * approval's ports, counted as an exact name. */
			snprintf(m.domain, sizeof(m.domain), "%s", q.qname);
			m.exact = true;
		} else if (egr_dnspolicy_audit(sb->pol)) {
			/* Audit mode: resolve it; its addresses are learned
			 * without ports, so reaching them is a would-be deny
			 * the kernel reports too. */
			snprintf(m.domain, sizeof(m.domain), "%s", q.qname);
			sb->st.would_deny++;
			dnsp_emit(sb, q.qname, q.qtype, cl->transport, EGR_DNS_V_AUDIT,
			     "name not allowed", 0, 0, NULL, 0);
		} else if (held_for_approval(sb, cl, pkt, len, &q)) {
			return;
		} else {
			dnsp_deny(sb, cl, pkt, len, q.qname, q.qtype, EGR_DNS_V_REFUSED, true,
				  "name not allowed");
			return;
		}
	}
	if (!egr_dnspolicy_qtype_allowed(sb->pol, q.qtype) && egr_dnspolicy_audit(sb->pol)) {
		sb->st.would_deny++;
		dnsp_emit(sb, q.qname, q.qtype, cl->transport, EGR_DNS_V_AUDIT, "qtype not allowed", 0,
		     0, NULL, 0);
	} else if (!egr_dnspolicy_qtype_allowed(sb->pol, q.qtype)) {
		dnsp_deny(sb, cl, pkt, len, q.qname, q.qtype, EGR_DNS_V_REFUSED, false,
			  "qtype not allowed");
		return;
	}
	err = egr_exfil_check(sb->exfil, q.qname, m.domain, egr_mono_ns(), &why);
	if (err) {
		if (err == -EPERM) {
			dnsp_deny(sb, cl, pkt, len, q.qname, q.qtype, EGR_DNS_V_EXFIL, true,
				  egr_exfil_reason_name(why));
		} else {
			dnsp_reply_rcode(sb, cl, pkt, len, EGR_DNS_R_SERVFAIL);
			sb->st.servfail++;
			dnsp_emit(sb, q.qname, q.qtype, cl->transport, EGR_DNS_V_SERVFAIL,
			     "exfil tracker", err, EGR_DNS_R_SERVFAIL, NULL, 0);
		}
		return;
	}
	if (cl->conn && cl->conn->npending >= TCP_PER_CONN)
		err = -EBUSY;
	else
		err = forward(p, sb, cl, pkt, len, &q, &m.ports);
	if (err) {
		dnsp_reply_rcode(sb, cl, pkt, len, EGR_DNS_R_SERVFAIL);
		sb->st.servfail++;
		if (err == -EBUSY || err == -EDQUOT)
			sb->st.shed_inflight++;
		dnsp_emit(sb, q.qname, q.qtype, cl->transport, EGR_DNS_V_SERVFAIL,
		     err == -EDQUOT ? "sandbox's in-flight limit" :
		     err == -EBUSY ? "too many queries in flight" : "cannot forward", err,
		     EGR_DNS_R_SERVFAIL, NULL, 0);
	}
}
