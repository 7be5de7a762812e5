// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The bottom layer of the DNS proxy's query path (dns_internal.h): a query
 * in flight (its slot of the table freed or failed) and the client it
 * answers (a UDP reply, or a client TCP connection's buffered replies and
 * its close), and the verdict event. Freeing a slot and closing a
 * connection need each other, so they live together; every other file
 * of dns/ calls down into this one, and it calls none of them.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dns_internal.h"
#include "log.h"

/* --- events and replies ------------------------------------------------------ */

void dnsp_emit(struct sb *sb, const char *qname, uint16_t qtype, int transport,
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

void dnsp_reply(struct sb *sb, const struct client *cl, const uint8_t *msg, size_t len)
{
	if (cl->transport == IPPROTO_UDP) {
		if (sendto(cl->lfd, msg, len, MSG_NOSIGNAL, (const struct sockaddr *)cl->caddr,
			   cl->calen) < 0)
			log_debug("dns: sandbox %u: reply: %m", sb->id);
		return;
	}
	if (cl->conn)
		dnsp_conn_send(cl->conn, msg, len);
}

/* REFUSED or SERVFAIL built from the client's query bytes. */
void dnsp_reply_rcode(struct sb *sb, const struct client *cl, const uint8_t *q, size_t qlen,
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
	dnsp_reply(sb, cl, p->obuf, olen);
}

void dnsp_deny(struct sb *sb, const struct client *cl, const uint8_t *q, size_t qlen,
	       const char *qname, uint16_t qtype, enum egr_dns_verdict v, bool name_refused,
	       const char *why)
{
	uint16_t rcode = name_refused ? egr_dnspolicy_reject_rcode(sb->pol) : EGR_DNS_R_REFUSED;
	char text[EGR_DNS_EDE_TEXT_MAX + 1];
	size_t olen;
	int err;

	/* The text names no query byte: the client knows what it asked. */
	snprintf(text, sizeof(text), "egressd policy refused this %s (%s)",
		 name_refused ? "name" : "query", why);
	err = egr_dns_build_denial(q, qlen, rcode, EGR_DNS_EDE_BLOCKED, text, sb->p->obuf,
				   sizeof(sb->p->obuf), &olen);
	if (err)
		log_debug("dns: sandbox %u: cannot build its denial: %s", sb->id, strerror(-err));
	else
		dnsp_reply(sb, cl, sb->p->obuf, olen);
	if (v == EGR_DNS_V_EXFIL)
		sb->st.exfil++;
	else
		sb->st.refused++;
	dnsp_emit(sb, qname, qtype, cl->transport, v, why, 0, rcode, NULL, 0);
}

/* --- the in-flight table ----------------------------------------------------- */

void dnsp_pend_free(struct egr_dnsproxy *p, struct pending *q)
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
	if (q->query != q->qinline)
		free(q->query);
	free(q->ubuf);
	memset(q, 0, offsetof(struct pending, qinline));
	q->ufd = -1;
	q->next_free = p->free_head;
	p->free_head = (int32_t)(q - p->pend);
}

void dnsp_pend_client(const struct pending *q, struct client *cl)
{
	cl->transport = q->transport;
	cl->lfd = q->lfd;
	cl->caddr = &q->caddr;
	cl->calen = q->calen;
	cl->conn = q->conn;
}

/* Answer SERVFAIL, count, report and free. */
void dnsp_pend_fail(struct egr_dnsproxy *p, struct pending *q, enum egr_dns_verdict v,
		    const char *reason, int error, const struct egr_dns_addr *addrs, size_t n)
{
	struct sb *sb = q->sb;
	struct tconn *conn = q->conn;
	struct client cl;

	dnsp_pend_client(q, &cl);
	dnsp_reply_rcode(sb, &cl, q->query, q->qlen, EGR_DNS_R_SERVFAIL);
	sb->st.servfail++;
	if (v == EGR_DNS_V_CAP)
		sb->st.cap++;
	dnsp_emit(sb, q->qname, q->qtype, q->transport, v, reason, error, EGR_DNS_R_SERVFAIL, addrs,
	     n);
	dnsp_pend_free(p, q);
	if (conn)
		dnsp_conn_settle(conn);
}

/* --- client TCP connections: buffered replies, close -------------------------- */

void dnsp_conn_flush(struct tconn *c)
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
void dnsp_conn_settle(struct tconn *c)
{
	if (c->in_cb)
		return;
	if (c->dead || (c->eof && !c->more && !c->npending && c->woff == c->wlen))
		dnsp_conn_close(c);
}

void dnsp_conn_send(struct tconn *c, const uint8_t *msg, size_t len)
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
	dnsp_conn_flush(c);
}

/* Queries held for approval (dns_ask.c) on a connection that closes have
 * nobody left to answer. */
static void forget_held(struct tconn *c)
{
	for (struct ask *a = c->sb->asks; a; a = a->next)
		for (uint32_t i = 0; i < a->nwait;) {
			if (a->w[i].conn != c) {
				i++;
				continue;
			}
			free(a->w[i].query);
			a->w[i] = a->w[--a->nwait];
		}
}

void dnsp_conn_close(struct tconn *c)
{
	struct sb *sb = c->sb;
	struct egr_dnsproxy *p = sb->p;
	struct tconn **pc;

	forget_held(c);

	/* Its queries in flight are dropped: nobody is left to answer. */
	for (uint32_t i = 0; i < p->npend && c->npending; i++)
		if (p->pend[i].used && p->pend[i].conn == c)
			dnsp_pend_free(p, &p->pend[i]);
	egr_loop_del(p->loop, c->fd);
	close(c->fd);
	for (pc = &sb->conns; *pc; pc = &(*pc)->next)
		if (*pc == c) {
			*pc = c->next;
			break;
		}
	sb->nconns--;
	p->tcp_conns--;
	free(c->rbuf);
	free(c->wbuf);
	free(c);
}
