// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * A matched upstream answer (dns_internal.h): rebinding addresses are
 * stripped, what remains is learned (fail closed: SERVFAIL when learning
 * fails) and only then released to the client with its own id.
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

#include "dns_internal.h"
#include "log.h"

/* What egr_dns_filter_addrs() removed, for the REBIND event. */
struct rebind_ctx {
	const struct sb *sb;
	size_t n;                  /* addresses drop() removed */
	size_t total;              /* with records removed without asking (non-IN A/AAAA) */
	bool keep;                 /* audit mode: list, do not remove */
	size_t kept;               /* addresses listed and kept (keep) */
	struct egr_dns_stripped listed[EGR_DNSPROXY_EVENT_ADDRS];
};

/* An address the host delivers to itself (egressd's namespace: the one a
 * sandbox without its own shares, and the one a namespaced sandbox reaches
 * through its veth), or the sandbox's own namespace does: an interface's
 * address, or one its routes deliver locally (issue 23, finding 7). */
bool dnsp_sb_is_local(void *ctx, int family, const uint8_t *addr)
{
	const struct sb *sb = ctx;

	return egr_localaddr_is_local(sb->p->host_la, family, addr) ||
	       (sb->ns_la && egr_localaddr_is_local(sb->ns_la, family, addr));
}

static bool sb_rebind_blocked(const struct sb *sb, int family, const uint8_t *addr,
			      struct egr_rebind_verdict *v)
{
	return egr_dnspolicy_rebind_blocked_local(sb->pol, family, addr, dnsp_sb_is_local,
						  (void *)sb, v);
}

/* Apply queued address changes before an answer is judged: an address added
 * before the answer arrived is known, whatever order epoll reported the two
 * in. One non-blocking recv per set when nothing is queued. */
void dnsp_localaddr_refresh(struct sb *sb)
{
	struct egr_dnsproxy *p = sb->p;

	/* Within one upstream batch, once per set: every answer of the batch
	 * had arrived when recvmmsg() returned, so a change made before any
	 * of them is queued by now (rtnetlink notifies synchronously). */
	if (!p->rx_batch || p->host_la_batch != p->rx_batch) {
		egr_localaddr_process(p->host_la);
		p->host_la_batch = p->rx_batch;
	}
	if (sb->ns_la && (!p->rx_batch || sb->la_batch != p->rx_batch)) {
		egr_localaddr_process(sb->ns_la);
		sb->la_batch = p->rx_batch;
	}
}

void dnsp_on_localaddr(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	egr_localaddr_process(ctx);
}

static bool rebind_drop(void *ctx, int family, const uint8_t *addr)
{
	struct rebind_ctx *rc = ctx;
	struct egr_rebind_verdict v;

	if (!sb_rebind_blocked(rc->sb, family, addr, &v))
		return false;
	/* Audit mode lists it and keeps it (docs/policy.md). */
	if (rc->keep)
		rc->kept++;
	if (rc->n < EGR_DNSPROXY_EVENT_ADDRS) {
		struct egr_dns_stripped *st = &rc->listed[rc->n];

		memset(st, 0, sizeof(*st));
		st->family = family;
		memcpy(st->addr, addr, family == AF_INET ? 4 : 16);
		st->cls = v.cls;
		st->form = v.form;
	}
	rc->n++;
	return !rc->keep;
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
		.verdict = rc->keep ? EGR_DNS_V_AUDIT : EGR_DNS_V_REBIND,
		.reason = reason,
		.rcode = rcode,
		.nstripped = rc->total > rc->n ? rc->total : rc->n,
	};

	ev.nstripped_listed = rc->n < EGR_DNSPROXY_EVENT_ADDRS ? rc->n : EGR_DNSPROXY_EVENT_ADDRS;
	memcpy(ev.stripped, rc->listed, ev.nstripped_listed * sizeof(rc->listed[0]));
	/* Per answer, like every other DNS verdict: the event and the
	 * (de-duplicated) alert carry it; a log line each would let a
	 * sandbox flood the log. */
	log_debug("dns: sandbox %u: %zu answer address(es) of %s %s (DNS rebinding)", sb->id,
		  rc->n, q->qname, rc->keep ? "kept (audit mode)" : "stripped");
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

/* The sandbox's policy changed while q was upstream: judge it again under
 * the new one (a name or qtype it no longer allows is denied, with
 * nothing learned; one it still allows takes the new ports). True: q is
 * answered and freed. */
static bool refused_by_new_policy(struct egr_dnsproxy *p, struct pending *q)
{
	struct sb *sb = q->sb;
	struct egr_dnspolicy_match m;
	struct tconn *conn = q->conn;
	const char *why = NULL;
	bool name_refused = false;
	struct client cl;

	if (q->pol_gen == sb->pol_gen || egr_dnspolicy_audit(sb->pol))
		return false;
	if (egr_dnspolicy_match(sb->pol, q->qname, &m) != 1 &&
	    !(p->cfg.grant && p->cfg.grant(p->cfg.ctx, sb->id, q->qname, &m.ports)))
		why = "name not allowed (policy updated)", name_refused = true;
	else if (!egr_dnspolicy_qtype_allowed(sb->pol, q->qtype))
		why = "qtype not allowed (policy updated)";
	if (!why) {
		q->ports = m.ports;
		q->pol_gen = sb->pol_gen;
		return false;
	}
	dnsp_pend_client(q, &cl);
	dnsp_deny(sb, &cl, q->query, q->qlen, q->qname, q->qtype, EGR_DNS_V_REFUSED, name_refused,
		  why);
	dnsp_pend_free(p, q);
	if (conn)
		dnsp_conn_settle(conn);
	return true;
}

/*
 * An upstream answer that matched q (id, question, source): strip rebinding
 * addresses, learn, then release it with the client's id restored.
 */
void dnsp_pend_answer(struct egr_dnsproxy *p, struct pending *q, uint8_t *pkt, size_t len,
		      const struct egr_dns_response *r)
{
	static struct egr_dns_response filtered; /* large; single-threaded */
	struct egr_dns_addr addrs[EGR_DNSPROXY_MAX_LEARN];
	struct egr_dns_learned learned[EGR_DNSPROXY_MAX_LEARN];
	struct rebind_ctx rc = { .sb = q->sb, .keep = egr_dnspolicy_audit(q->sb->pol) };
	struct sb *sb = q->sb;
	struct tconn *conn = q->conn;
	struct client cl;
	size_t n = 0, olen = 0, nstripped = 0;
	int err;

	if (refused_by_new_policy(p, q))
		return;
	egr_exfil_note_rcode(sb->exfil, q->qname, r->rcode, egr_mono_ns());
	dnsp_localaddr_refresh(sb);
	/* Rebinding: what is learned and released is the answer without the
	 * addresses the policy does not let a name point to. */
	err = egr_dns_filter_addrs(pkt, len, rebind_drop, &rc, p->obuf, sizeof(p->obuf), &olen,
				   &nstripped);
	rc.total = nstripped;
	if (!err && rc.kept) {
		/* Audit mode: enforce mode would strip these; reported, learned
		 * as the rest of the answer is. */
		sb->st.would_deny++;
		emit_rebind(sb, q, r->rcode, &rc, "rebinding address kept (audit mode)");
	}
	if (!err && nstripped)
		err = egr_dns_parse_response(p->obuf, olen, &filtered);
	if (err) {
		if (rc.n)
			emit_rebind(sb, q, EGR_DNS_R_SERVFAIL, &rc, "cannot strip the answer");
		dnsp_pend_fail(p, q, EGR_DNS_V_SERVFAIL, "cannot strip rebinding addresses", err, NULL,
			  0);
		return;
	}
	if (nstripped) {
		/* In audit mode only records that are never relayed (non-IN
		 * A/AAAA) were removed: the kept addresses were reported above. */
		struct rebind_ctx removed = rc;

		if (rc.keep) {
			removed.keep = false;
			removed.n = 0;
		}
		sb->st.rebind++;
		sb->st.rebind_addrs += nstripped;
		if (q->transport == IPPROTO_UDP && olen > udp_limit(q)) {
			/* Decompressed names made it longer than the client
			 * takes: nothing learned, the client asks over TCP. */
			emit_rebind(sb, q, r->rcode, &removed, "stripped; too long for udp, sent TC");
			dnsp_pend_client(q, &cl);
			if (!egr_dns_build_truncated(q->query, q->qlen, p->obuf, sizeof(p->obuf),
						     &olen))
				dnsp_reply(sb, &cl, p->obuf, olen);
			sb->st.allowed++;
			dnsp_emit(sb, q->qname, q->qtype, q->transport, EGR_DNS_V_ALLOWED,
			     "truncated", 0, r->rcode, NULL, 0);
			dnsp_pend_free(p, q);
			return;
		}
		emit_rebind(sb, q, r->rcode, &removed, "stripped");
		pkt = p->obuf;
		len = olen;
		r = &filtered;
	}
	err = egr_dns_answer_addrs(r, q->qname, addrs, EGR_DNSPROXY_MAX_LEARN, &n);
	if (q->ports.nranges) {
		if (err == -ENOSPC || r->dropped) {
			/* Addresses we could not account for would reach the
			 * client without working: fail closed. */
			dnsp_pend_fail(p, q, EGR_DNS_V_CAP, "answer has too many addresses", -ENOSPC,
				  addrs, n);
			return;
		}
		if (n) {
			uint64_t now = egr_boot_ns();

			for (size_t i = 0; i < n; i++) {
				uint32_t ttl = addrs[i].ttl;

				/* The filter removed them all; never learn one
				 * (but in audit mode, which keeps them). */
				if (!rc.keep && sb_rebind_blocked(sb, addrs[i].family,
								  addrs[i].addr, NULL)) {
					dnsp_pend_fail(p, q, EGR_DNS_V_SERVFAIL,
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
				learned[i].expires_ns =
					now + ((uint64_t)ttl + p->cfg.ttl_grace_s) * 1000000000ULL;
				learned[i].ports = q->ports;
				learned[i].qname = q->qname;
			}
			err = p->cfg.learn(p->cfg.ctx, sb->id, learned, n);
			if (err) {
				dnsp_pend_fail(p, q, EGR_DNS_V_CAP,
					  err == -ENOSPC ? "learned-address cap" : "learn failed",
					  err < 0 ? err : -EIO, addrs, n);
				return;
			}
			sb->st.learned += n;
		}
	}
	pkt[0] = (uint8_t)(q->client_id >> 8);
	pkt[1] = (uint8_t)q->client_id;
	dnsp_pend_client(q, &cl);
	/* An answer read by the current recvmmsg() batch leaves with the
	 * others of the batch (its bytes stay in rxbuf until the flush). */
	if (cl.transport != IPPROTO_UDP || !p->rx_batch || pkt == p->obuf ||
	    dnsp_tx_add(p, cl.lfd, pkt, len, false, cl.caddr, cl.calen, NULL, sb->id))
		dnsp_reply(sb, &cl, pkt, len);
	sb->st.allowed++;
	p->answer_latency_ns = egr_mono_ns() - q->received_ns;
	/* learn() took all n or the query failed above; nothing is learned
	 * for a name that opens no ports. */
	p->answer_learned = q->ports.nranges && n ? (uint32_t)((1ull << (n < EGR_DNSPROXY_EVENT_ADDRS
								       ? n : EGR_DNSPROXY_EVENT_ADDRS)) - 1) : 0;
	dnsp_emit(sb, q->qname, q->qtype, q->transport, EGR_DNS_V_ALLOWED,
	     r->tc ? "truncated" : (q->ports.nranges ? "learned" : "resolvable only"), 0,
	     r->rcode, addrs, n);
	p->answer_latency_ns = 0;
	p->answer_learned = 0;
	dnsp_pend_free(p, q);
	if (conn)
		dnsp_conn_settle(conn);
}
