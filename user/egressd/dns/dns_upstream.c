// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Upstream resolvers (dns_internal.h): parsing resolver addresses and
 * resolv.conf, the shared unconnected UDP sockets (an answer must come
 * from the upstream the query went to and match its id and question) and
 * one TCP exchange per query that came over TCP.
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
#include "dns_upstream.h"
#include "log.h"

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

const char *dnsp_sa_str(const struct sockaddr_storage *ss, char *buf, size_t len)
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

void dnsp_on_upstream_udp(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_dnsproxy *p = ctx;
	static struct egr_dns_response r; /* large; single-threaded */

	for (int got = 0; got < RX_BATCH;) {
		int n = dnsp_rx(p, fd, DNS_RX_SLOTS);

		if (n <= 0) {
			if (n < 0)
				log_debug("dns: upstream udp: %s", strerror(-n));
			return;
		}
		got += n;
		p->rx_batch = ++p->rx_batches;
		for (int i = 0; i < n; i++) {
			const struct sockaddr_storage *from = &p->rxfrom[i];
			uint8_t *pkt = dnsp_rx_buf(p, i);
			size_t k = p->rxmsg[i].msg_len;
			struct pending *q;
			int32_t slot;

			if (egr_dns_parse_response(pkt, k, &r)) {
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
			    !sa_equal(from, &p->cfg.upstreams[q->up]) || !pend_matches(q, &r)) {
				p->dropped_answers++;
				continue;
			}
			dnsp_pend_answer(p, q, pkt, k, &r);
		}
		/* The batch's answers leave together, before rxbuf is reused. */
		dnsp_tx_flush(p);
		p->rx_batch = 0;
		if (n < DNS_RX_SLOTS)
			return; /* drained */
	}
}

/* Answers already in the upstream UDP sockets, read before the timer
 * fails anything: a tick that runs first after a stall (a successor's
 * start-up, a starved CPU) must not time out a query whose answer waits. */
void dnsp_upstream_read_waiting(struct egr_dnsproxy *p)
{
	if (p->up4 >= 0)
		dnsp_on_upstream_udp(p->loop, p->up4, EPOLLIN, p);
	if (p->up6 >= 0)
		dnsp_on_upstream_udp(p->loop, p->up6, EPOLLIN, p);
}

/* A UDP query unanswered for a third of the timeout goes to its upstream
 * again, same id: one lost datagram (a full queue, a restarting upstream)
 * costs a third of the timeout, not a SERVFAIL. */
void dnsp_upstream_resend(struct egr_dnsproxy *p, struct pending *q, uint64_t now)
{
	const struct sockaddr_storage *up = &p->cfg.upstreams[q->up];
	int ufd = up->ss_family == AF_INET ? p->up4 : p->up6;
	uint64_t step = (uint64_t)p->cfg.timeout_ms * 1000000ULL / 3;

	q->resend_ns = now + step < q->deadline_ns ? now + step : 0;
	memcpy(p->obuf, q->query, q->qlen);
	p->obuf[0] = (uint8_t)(q->up_id >> 8);
	p->obuf[1] = (uint8_t)q->up_id;
	if (sendto(ufd, p->obuf, q->qlen, MSG_NOSIGNAL, (const struct sockaddr *)up,
		   sa_len(up)) < 0) {
		log_debug("dns: sandbox %u: resend to the upstream: %m", q->sb->id);
		return;
	}
	q->resent++;
	q->sb->st.resent++;
}

/* Progress a TCP upstream exchange; on completion or error the query is
 * answered and freed. */
void dnsp_tcp_up_step(struct egr_dnsproxy *p, struct pending *q, uint32_t events)
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
			dnsp_pend_fail(p, q, EGR_DNS_V_SERVFAIL, "upstream tcp connect", -soerr, NULL, 0);
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
				dnsp_pend_fail(p, q, EGR_DNS_V_SERVFAIL, "upstream tcp send", -errno,
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
					dnsp_pend_fail(p, q, EGR_DNS_V_SERVFAIL, "upstream tcp framing",
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
			dnsp_pend_fail(p, q, EGR_DNS_V_SERVFAIL, "upstream tcp recv", -errno, NULL, 0);
			return;
		}
		if (k == 0) {
			dnsp_pend_fail(p, q, EGR_DNS_V_SERVFAIL, "upstream tcp closed early", -EPIPE,
				  NULL, 0);
			return;
		}
		q->uoff += (size_t)k;
	}
	if (egr_dns_parse_response(q->ubuf + 2, q->ulen - 2, &r) || !pend_matches(q, &r)) {
		dnsp_pend_fail(p, q, EGR_DNS_V_SERVFAIL, "upstream answer does not match", -EBADMSG,
			  NULL, 0);
		return;
	}
	dnsp_pend_answer(p, q, q->ubuf + 2, q->ulen - 2, &r);
}

void dnsp_on_upstream_tcp(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct pending *q = ctx;

	/* ctx is a slot of the fixed table, never freed while the proxy lives;
	 * a slot reused since has another fd. */
	if (!q->used || q->ufd != fd)
		return;
	dnsp_tcp_up_step(q->sb->p, q, events);
}
