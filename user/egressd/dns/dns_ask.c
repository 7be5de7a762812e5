// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Queries held for a decision (docs/dns.md "Approvals"): a sandbox whose
 * policy says network.unknown_names "ask" asks for a name its policy does
 * not allow; the query is not answered until someone outside the sandbox
 * approves or denies the name (egr_dnsproxy_ask_decide(), dnsproxy.c, which
 * replays an approved query through the ordinary path) or ask_timeout_s
 * passes. Retries of the same name (a UDP client asks again, A and AAAA of
 * one getaddrinfo()) join the held request; a TCP client's connection
 * waits. Nothing is learned or released while held.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dns_internal.h"
#include "log.h"

#define ASK_MAX_PENDING_DEFAULT 16

static uint32_t max_pending(const struct egr_dnsproxy *p)
{
	return p->cfg.ask_max_pending ? p->cfg.ask_max_pending : ASK_MAX_PENDING_DEFAULT;
}

void dnsp_ask_report(struct sb *sb, struct ask *a)
{
	struct egr_dnsproxy *p = sb->p;

	a->pub.waiting = a->nwait;
	if (p->cfg.ask)
		p->cfg.ask(p->cfg.ctx, &a->pub);
}

static int add_waiter(struct ask *a, const struct client *cl, const uint8_t *pkt, size_t len)
{
	struct ask_waiter *w;

	if (a->nwait >= ASK_WAITERS)
		return -ENOSPC;
	w = &a->w[a->nwait];
	memset(w, 0, sizeof(*w));
	w->query = malloc(len);
	if (!w->query)
		return -ENOMEM;
	memcpy(w->query, pkt, len);
	w->qlen = len;
	w->transport = cl->transport;
	w->lfd = cl->lfd;
	if (cl->caddr && cl->calen <= sizeof(w->caddr)) {
		memcpy(&w->caddr, cl->caddr, cl->calen);
		w->calen = cl->calen;
	}
	w->conn = cl->conn;
	/* The connection is busy while it waits: not closed as idle. */
	if (w->conn)
		w->conn->npending++;
	a->nwait++;
	return 0;
}

int dnsp_ask_hold(struct sb *sb, const struct client *cl, const uint8_t *pkt, size_t len,
		  const struct egr_dns_query *q, uint32_t timeout_s,
		  const struct egr_dns_ports *ports)
{
	struct egr_dnsproxy *p = sb->p;
	uint64_t now = egr_mono_ns(), unix_now = egr_clock_ns(CLOCK_REALTIME);
	struct ask *a;
	int err;

	for (a = sb->asks; a; a = a->next)
		if (!strcasecmp(a->qname, q->qname)) {
			err = add_waiter(a, cl, pkt, len);
			/* A client past ASK_WAITERS retries: it waits with
			 * the ones held (UDP, unanswered) or is refused (TCP). */
			if (err && cl->transport == IPPROTO_UDP)
				return 0;
			if (!err)
				dnsp_ask_report(sb, a);
			return err;
		}
	if (sb->nasks >= max_pending(p))
		return -EDQUOT;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	snprintf(a->qname, sizeof(a->qname), "%s", q->qname);
	err = add_waiter(a, cl, pkt, len);
	if (err) {
		free(a);
		return err;
	}
	a->pub.id = ++p->next_ask_id;
	a->pub.sandbox_id = sb->id;
	a->pub.tenant = sb->tenant;
	a->pub.qname = a->qname;
	a->pub.qtype = q->qtype;
	a->pub.since_unix_ns = unix_now;
	a->pub.deadline_unix_ns = unix_now + (uint64_t)timeout_s * 1000000000ULL;
	a->pub.ports = *ports;
	a->pub.state = EGR_ASK_PENDING;
	a->deadline_ns = now + (uint64_t)timeout_s * 1000000000ULL;
	a->next = sb->asks;
	sb->asks = a;
	sb->nasks++;
	p->nasks++;
	log_info("dns: sandbox %u (tenant %s): %s held for approval (request %llu, %u s)", sb->id,
		 sb->tenant, a->qname, (unsigned long long)a->pub.id, timeout_s);
	dnsp_ask_report(sb, a);
	return 0;
}

struct ask *dnsp_ask_take(struct egr_dnsproxy *p, uint64_t id, struct sb **sbp)
{
	for (struct sb *sb = p->nasks ? p->sbs : NULL; sb; sb = sb->next)
		for (struct ask **pa = &sb->asks; *pa; pa = &(*pa)->next)
			if ((*pa)->pub.id == id) {
				struct ask *a = *pa;

				*pa = a->next;
				sb->nasks--;
				p->nasks--;
				*sbp = sb;
				return a;
			}
	return NULL;
}

void dnsp_ask_waiter_client(const struct ask_waiter *w, struct client *cl)
{
	cl->transport = w->transport;
	cl->lfd = w->lfd;
	cl->caddr = &w->caddr;
	cl->calen = w->calen;
	cl->conn = w->conn;
}

void dnsp_ask_free(struct ask *a)
{
	for (uint32_t i = 0; i < a->nwait; i++) {
		if (a->w[i].conn && a->w[i].conn->npending)
			a->w[i].conn->npending--;
		free(a->w[i].query);
	}
	free(a);
}

/* Each waiter gets the policy's refusal; the connections they wait on are
 * settled (closed if their client is done) once, after all of them. */
void dnsp_ask_refuse(struct sb *sb, struct ask *a, enum egr_dns_ask_state st, const char *why)
{
	struct tconn *conns[ASK_WAITERS];
	size_t nconns = 0;

	a->pub.state = st;
	dnsp_ask_report(sb, a);
	for (uint32_t i = 0; i < a->nwait; i++) {
		struct ask_waiter *w = &a->w[i];
		struct egr_dns_query q;
		struct client cl;
		bool seen = false;

		dnsp_ask_waiter_client(w, &cl);
		if (!egr_dns_parse_query(w->query, w->qlen, &q))
			dnsp_deny(sb, &cl, w->query, w->qlen, q.qname, q.qtype, EGR_DNS_V_REFUSED,
				  true, why);
		for (size_t k = 0; k < nconns; k++)
			seen = seen || conns[k] == w->conn;
		if (w->conn && !seen)
			conns[nconns++] = w->conn;
	}
	dnsp_ask_free(a);
	for (size_t k = 0; k < nconns; k++)
		dnsp_conn_settle(conns[k]);
}

void dnsp_ask_expire(struct egr_dnsproxy *p, uint64_t now)
{
	for (struct sb *sb = p->nasks ? p->sbs : NULL; sb; sb = sb->next) {
		struct ask **pa = &sb->asks;

		while (*pa) {
			struct ask *a = *pa;

			if (a->deadline_ns > now) {
				pa = &a->next;
				continue;
			}
			*pa = a->next;
			sb->nasks--;
			p->nasks--;
			log_info("dns: sandbox %u: approval request %llu for %s timed out", sb->id,
				 (unsigned long long)a->pub.id, a->qname);
			dnsp_ask_refuse(sb, a, EGR_ASK_TIMEOUT, "not approved in time");
		}
	}
}

/* The sandbox goes: its held queries go unanswered, their requests with it. */
void dnsp_ask_drop_sb(struct sb *sb)
{
	while (sb->asks) {
		struct ask *a = sb->asks;

		sb->asks = a->next;
		sb->nasks--;
		sb->p->nasks--;
		a->pub.state = EGR_ASK_GONE;
		dnsp_ask_report(sb, a);
		dnsp_ask_free(a);
	}
}

size_t dnsp_ask_list(const struct egr_dnsproxy *p, const struct egr_dns_ask **out, size_t max)
{
	size_t n = 0;

	for (const struct sb *sb = p->nasks ? p->sbs : NULL; sb; sb = sb->next)
		for (struct ask *a = sb->asks; a; a = a->next) {
			a->pub.waiting = a->nwait;
			if (n < max)
				out[n] = &a->pub;
			n++;
		}
	return n;
}
