// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Batched datagram I/O of the DNS proxy (dns_internal.h): one recvmmsg()
 * takes what a listener or an upstream socket has queued, and the replies
 * and forwarded queries a callback produces leave in one sendmmsg() per
 * socket when it is done. At saturation that replaces two recvfrom() and
 * two sendto() per query (plus the recvfrom() that finds the queue empty)
 * with a few calls per batch; one query alone costs what it did.
 *
 * Nothing is held past the callback that queued it: a reply's bytes are
 * the received answer in rxbuf (not reused before the flush), a forwarded
 * query is copied. A forwarded query whose send fails is answered SERVFAIL
 * exactly as when the send happened at once.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "dns_internal.h"
#include "log.h"

int dnsp_io_init(struct egr_dnsproxy *p)
{
	p->rxbuf = malloc((size_t)DNS_RX_SLOTS * (MSG_MAX + 1));
	return p->rxbuf ? 0 : -ENOMEM;
}

void dnsp_io_free(struct egr_dnsproxy *p)
{
	free(p->rxbuf);
	p->rxbuf = NULL;
}

int dnsp_rx(struct egr_dnsproxy *p, int fd, unsigned int want)
{
	int n;

	if (want > DNS_RX_SLOTS)
		want = DNS_RX_SLOTS;
	for (unsigned int i = 0; i < want; i++) {
		p->rxiov[i].iov_base = dnsp_rx_buf(p, (int)i);
		p->rxiov[i].iov_len = MSG_MAX + 1;
		memset(&p->rxmsg[i].msg_hdr, 0, sizeof(p->rxmsg[i].msg_hdr));
		p->rxmsg[i].msg_hdr.msg_name = &p->rxfrom[i];
		p->rxmsg[i].msg_hdr.msg_namelen = sizeof(p->rxfrom[i]);
		p->rxmsg[i].msg_hdr.msg_iov = &p->rxiov[i];
		p->rxmsg[i].msg_hdr.msg_iovlen = 1;
		p->rxmsg[i].msg_len = 0;
	}
	do {
		n = recvmmsg(fd, p->rxmsg, want, MSG_DONTWAIT, NULL);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
	return n;
}

int dnsp_tx_add(struct egr_dnsproxy *p, int fd, const uint8_t *msg, size_t len, bool copy,
		const struct sockaddr_storage *to, socklen_t tolen, struct pending *q,
		uint32_t sandbox_id)
{
	struct dns_tx *t;

	if (copy && len > sizeof(t->copy))
		return -E2BIG;
	if (p->ntx == DNS_TX_SLOTS)
		dnsp_tx_flush(p);
	t = &p->tx[p->ntx++];
	t->fd = fd;
	memcpy(&t->to, to, tolen);
	t->tolen = tolen;
	if (copy) {
		memcpy(t->copy, msg, len);
		t->msg = t->copy;
	} else {
		t->msg = msg;
	}
	t->len = len;
	t->q = q;
	t->up_id = q ? q->up_id : 0;
	t->sandbox_id = sandbox_id;
	return 0;
}

void dnsp_tx_forget(struct egr_dnsproxy *p, int fd, const struct sb *sb)
{
	unsigned int k = 0;

	for (unsigned int i = 0; i < p->ntx; i++) {
		const struct pending *q = p->tx[i].q;

		if (p->tx[i].fd == fd || (sb && q && q->sb == sb))
			continue;
		if (k != i)
			p->tx[k] = p->tx[i];
		k++;
	}
	p->ntx = k;
}

/* The send of t failed with err. */
static void tx_failed(struct egr_dnsproxy *p, struct dns_tx *t, int err)
{
	struct pending *q = t->q;

	if (!q) {
		log_debug("dns: sandbox %u: reply: %s", t->sandbox_id, strerror(-err));
		return;
	}
	/* The slot may have been failed (evicted, timed out) since. */
	if (q->used && q->up_id == t->up_id)
		dnsp_pend_fail(p, q, EGR_DNS_V_SERVFAIL, "cannot forward", err, NULL, 0);
}

void dnsp_tx_flush(struct egr_dnsproxy *p)
{
	unsigned int n = p->ntx, i = 0;

	/* pend_fail() replies with sendto() at once, never through here. */
	p->ntx = 0;
	for (unsigned int k = 0; k < n; k++) {
		struct dns_tx *t = &p->tx[k];

		p->txiov[k].iov_base = (void *)t->msg;
		p->txiov[k].iov_len = t->len;
		memset(&p->txmsg[k].msg_hdr, 0, sizeof(p->txmsg[k].msg_hdr));
		p->txmsg[k].msg_hdr.msg_name = &t->to;
		p->txmsg[k].msg_hdr.msg_namelen = t->tolen;
		p->txmsg[k].msg_hdr.msg_iov = &p->txiov[k];
		p->txmsg[k].msg_hdr.msg_iovlen = 1;
	}
	while (i < n) {
		unsigned int run = 1;
		int sent;

		/* Consecutive datagrams for the same socket go in one call. */
		while (i + run < n && p->tx[i + run].fd == p->tx[i].fd)
			run++;
		sent = sendmmsg(p->tx[i].fd, &p->txmsg[i], run, MSG_NOSIGNAL);
		if (sent < 0 && errno == EINTR)
			continue;
		if (sent <= 0) {
			/* The error is the first unsent datagram's; go on after it. */
			tx_failed(p, &p->tx[i], sent < 0 ? -errno : -EIO);
			i++;
			continue;
		}
		i += (unsigned int)sent;
	}
}
