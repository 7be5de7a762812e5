// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The DNS proxy's listeners (dns_internal.h): each sandbox's UDP and TCP
 * sockets on 127.0.0.1 and ::1, the UDP receive path, and who asks: a
 * datagram or connection is served only when the kernel recorded its
 * sender as a socket of that sandbox (egr_dns_clients).
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
#include "kernel/maps.h"
#include "log.h"

/* --- who asks ------------------------------------------------------------------- */

/*
 * Did the kernel see this sender, a socket of sb, send to sb's proxy
 * (egr_dns_clients, written by cgroup_skb/egress before the packet reached
 * the listener)? Anyone else who reaches the listener's port — a process
 * outside every sandbox, another sandbox allowed to reach loopback — is
 * not sb, whatever it sends. Any error: not sb (fail closed).
 */
bool dnsp_client_is_sb(struct sb *sb, const struct sockaddr_storage *from, int protocol)
{
	struct egr_dnsproxy *p = sb->p;
	struct egr_dns_client_key key;
	int err;

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
	if ((err = egr_bpf_dns_client_known(p->cfg.bpf, &key)) == 1)
		return true;
	sb->st.foreign++;
	if (err)
		log_warn("dns: sandbox %u: egr_dns_clients lookup: %s; dropping", sb->id,
			 strerror(-err));
	return false;
}

/* Forget every sender recorded for sandbox id (it is gone, or its id is
 * new): a socket left from an earlier sandbox with this id must not ask as
 * the next one. */
void dnsp_purge_clients(struct egr_dnsproxy *p, uint32_t id)
{
	unsigned purged = 0;
	int err;

	if (!p->cfg.verify_clients)
		return;
	err = egr_bpf_dns_clients_purge(p->cfg.bpf, id, &purged);
	if (err)
		log_warn("dns: sandbox %u: forgetting its client sockets: %s (%u forgotten)", id,
			 strerror(-err), purged);
	if (purged)
		log_debug("dns: sandbox %u: forgot %u client sockets", id, purged);
}

/* --- listeners ------------------------------------------------------------------ */

void dnsp_on_udp_listener(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct listener *l = ctx;
	struct egr_dnsproxy *p = l->sb->p;

	int n;

	/* One sandbox's turn, one recvmmsg() (level-triggered: the rest on
	 * a later one). */
	n = dnsp_rx(p, fd, EGR_DNSPROXY_UDP_TURN);
	if (n < 0)
		log_debug("dns: sandbox %u: udp listener: %s", l->sb->id, strerror(-n));
	for (int i = 0; i < n; i++) {
		struct client cl = { .transport = IPPROTO_UDP, .lfd = fd, .caddr = &p->rxfrom[i] };

		cl.calen = p->rxmsg[i].msg_hdr.msg_namelen;
		/* Before anything is charged to the sandbox: a stranger's
		 * queries take none of its tokens or exfiltration budget. */
		if (!dnsp_client_is_sb(l->sb, &p->rxfrom[i], IPPROTO_UDP))
			continue;
		dnsp_handle_query(l->sb, &cl, dnsp_rx_buf(p, i), p->rxmsg[i].msg_len);
	}
	/* The turn's forwarded queries leave together. */
	dnsp_tx_flush(p);
}

void dnsp_close_listeners(struct sb *sb)
{
	for (int i = 0; i < 4; i++) {
		if (sb->lis[i].fd < 0)
			continue;
		egr_loop_del(sb->p->loop, sb->lis[i].fd);
		dnsp_tx_forget(sb->p, sb->lis[i].fd, NULL);
		close(sb->lis[i].fd);
		sb->lis[i].fd = -1;
	}
}

/* UDP on loopback:want (0 = any), then TCP on the same port; retried when
 * an ephemeral UDP port is taken for TCP. */
int dnsp_open_family(struct sb *sb, int family, uint16_t want, struct listener *u,
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
