// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The DNS proxy's client TCP connections (dns_internal.h): 2-byte length
 * framing, a bounded number of queries per wake-up and in flight per
 * connection, buffered replies (a client not reading them is closed), and
 * the per-sandbox connection limit.
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
	conn_flush(c);
}

void dnsp_conn_close(struct tconn *c)
{
	struct sb *sb = c->sb;
	struct egr_dnsproxy *p = sb->p;
	struct tconn **pc;

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
	free(c->rbuf);
	free(c->wbuf);
	free(c);
}

void dnsp_on_tcp_conn(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
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
			dnsp_handle_query(c->sb, &cl, c->rbuf + 2, mlen);
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
	dnsp_conn_settle(c);
}

void dnsp_on_tcp_listener(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
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
		if (!dnsp_client_is_sb(sb, &peer, IPPROTO_TCP)) {
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
				 dnsp_on_tcp_conn, c)) {
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
