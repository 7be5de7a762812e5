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

void dnsp_on_tcp_conn(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct tconn *c = ctx;
	struct sb *sb = c->sb;
	unsigned int handled = 0;
	bool waiting = false;

	c->in_cb = true;
	c->more = false;
	c->last_ns = egr_mono_ns();
	if (events & EPOLLOUT)
		dnsp_conn_flush(c);
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
			/* Its sandbox at its in-flight limit (a restart's queue
			 * on its UDP too): the rest waits in the buffer for the
			 * tick, rather than a SERVFAIL. */
			if (c->sb->inflight >= c->sb->p->cfg.max_inflight_per_sb) {
				c->more = waiting = true;
				break;
			}
			dnsp_handle_query(c->sb, &cl, c->rbuf + 2, mlen);
			memmove(c->rbuf, c->rbuf + 2 + mlen, c->rlen - 2 - mlen);
			c->rlen -= 2 + mlen;
			handled++;
		}
		if (c->dead || waiting)
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
	/* It may have closed: a parked one takes its slot. */
	if (sb->nparked)
		dnsp_tcp_unpark(sb, false);
}

/* A connection of sb, served from now on. 0 or -errno (cfd closed). */
static int conn_start(struct sb *sb, int cfd)
{
	struct egr_dnsproxy *p = sb->p;
	struct tconn *c = calloc(1, sizeof(*c));

	if (c)
		c->rbuf = malloc(2 + MSG_MAX);
	if (!c || !c->rbuf) {
		free(c);
		close(cfd);
		return -ENOMEM;
	}
	c->sb = sb;
	c->fd = cfd;
	c->last_ns = egr_mono_ns();
	if (egr_loop_add(p->loop, cfd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, dnsp_on_tcp_conn,
			 c)) {
		free(c->rbuf);
		free(c);
		close(cfd);
		return -ENOMEM;
	}
	c->next = sb->conns;
	sb->conns = c;
	sb->nconns++;
	p->tcp_conns++;
	return 0;
}

void dnsp_tcp_unpark(struct sb *sb, bool free_all)
{
	uint32_t i = 0;

	if (!sb->parked)
		return;
	while (i < sb->nparked && (free_all || sb->nconns < sb->p->cfg.max_tcp_per_sb)) {
		if (free_all)
			close(sb->parked[i]);
		else
			conn_start(sb, sb->parked[i]);
		i++;
	}
	memmove(sb->parked, sb->parked + i, (sb->nparked - i) * sizeof(int));
	sb->nparked -= i;
	if (free_all) {
		free(sb->parked);
		sb->parked = NULL;
	}
}

void dnsp_on_tcp_listener(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct listener *l = ctx;
	struct egr_dnsproxy *p = l->g->p;

	for (int i = 0; i < RX_BATCH; i++) {
		struct sockaddr_storage peer;
		socklen_t plen = sizeof(peer);
		struct sb *sb;
		int cfd = accept4(fd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (cfd < 0)
			return;
		/* The accepted connection's peer is the client socket the
		 * kernel recorded: it names the sandbox. */
		sb = dnsp_client_sb(l->g, &peer, IPPROTO_TCP);
		if (!sb) {
			close(cfd);
			continue;
		}
		if (sb->nconns >= p->cfg.max_tcp_per_sb || sb->nparked) {
			/* Served in turn, as its own connections close. */
			if (!sb->parked)
				sb->parked = calloc(TCP_PARKED_PER_SB, sizeof(int));
			if (sb->parked && sb->nparked < TCP_PARKED_PER_SB) {
				sb->parked[sb->nparked++] = cfd;
				continue;
			}
			log_warn("dns: sandbox %u: more than %u tcp connections and %u waiting, "
				 "refusing one", sb->id, p->cfg.max_tcp_per_sb, TCP_PARKED_PER_SB);
			close(cfd);
			continue;
		}
		conn_start(sb, cfd);
	}
}
