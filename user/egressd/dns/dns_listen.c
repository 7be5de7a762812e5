// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The DNS proxy's listeners (dns_internal.h): UDP and TCP sockets on
 * 127.0.0.1 and ::1 shared by the sandboxes of one network namespace (a
 * bounded number of sockets however many sandboxes there are), the UDP
 * receive path, and who asks: a datagram or connection is served only when
 * the kernel recorded its sender as a socket of a sandbox of that
 * namespace (egr_dns_senders), and as that sandbox. A device sandbox has
 * listeners of its own instead, bound to its device (docs/dns.md "Device
 * sandboxes"): whoever reaches them came in through that device, or is a
 * process of its namespace (refused).
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
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "dns_internal.h"
#include "hold/lhold.h"
#include "kernel/listen.h"
#include "kernel/maps.h"
#include "log.h"

/* --- who asks ------------------------------------------------------------------- */

struct sb *dnsp_sb_find(const struct egr_dnsproxy *p, uint32_t id)
{
	for (struct sb *sb = p->by_sb[id % SB_HASH]; sb; sb = sb->hnext)
		if (sb->id == id)
			return sb;
	return NULL;
}

/*
 * A device sandbox's listeners are bound to its device (SO_BINDTOIFINDEX):
 * what came in through it passed its program's reverse-path check, and the
 * device is the one sandbox's, so no egr_dns_senders record exists or is
 * needed. A process of the device's own namespace reaches them too (a
 * packet delivered locally counts as the local route's device): its source
 * is an address of that namespace, never the guest's, and is refused.
 */
static struct sb *device_client(struct lgroup *g, const struct sockaddr_storage *from)
{
	struct egr_localaddr *la = g->only ? g->only->ns_la : NULL;
	const void *addr = NULL;

	if (!la)
		la = g->p->host_la; /* a device of egressd's own namespace */
	if (from->ss_family == AF_INET)
		addr = &((const struct sockaddr_in *)from)->sin_addr;
	else if (from->ss_family == AF_INET6)
		addr = &((const struct sockaddr_in6 *)from)->sin6_addr;
	if (g->only && addr && la && !egr_localaddr_is_local(la, from->ss_family, addr))
		return g->only;
	g->foreign++;
	return NULL;
}

/*
 * Which sandbox's socket is this sender? The kernel recorded it
 * (egr_dns_senders, written by cgroup_skb/egress of the sending sandbox
 * before the packet reached the listener) under the listener's port, so
 * the record names the sandbox whatever the packet says. Anyone else who
 * reaches the listener's port — a process outside every sandbox, a
 * sandbox allowed to reach loopback ports — has no record, a source two
 * sandboxes share has a record marked shared: not served. Any error: not
 * served (fail closed).
 */
struct sb *dnsp_client_sb(struct lgroup *g, const struct sockaddr_storage *from, int protocol)
{
	struct egr_dnsproxy *p = g->p;
	struct egr_dns_client_key key;
	struct egr_dns_client_val val;
	struct sb *sb = NULL;
	int err;

	if (!p->cfg.verify_clients)
		return g->only; /* tests without BPF: a group per sandbox */
	if (g->device)
		return device_client(g, from);
	memset(&key, 0, sizeof(key));
	key.protocol = (uint8_t)protocol;
	if (from->ss_family == AF_INET) {
		const struct sockaddr_in *s4 = (const void *)from;

		key.lport = g->port4;
		key.family = AF_INET;
		key.port = ntohs(s4->sin_port);
		memcpy(key.addr, &s4->sin_addr, 4);
	} else if (from->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const void *)from;

		key.lport = g->port6;
		key.family = AF_INET6;
		key.port = ntohs(s6->sin6_port);
		memcpy(key.addr, &s6->sin6_addr, 16);
	} else {
		g->foreign++;
		return NULL;
	}
	err = egr_bpf_dns_client_lookup(p->cfg.bpf, &key, &val);
	if (err == 1 && !(val.flags & EGR_DNS_CLIENT_SHARED))
		sb = dnsp_sb_find(p, val.sandbox_id);
	/* The record names a sandbox of another namespace's listeners: cannot
	 * happen (each group has its own port), refused all the same. */
	if (sb && sb->g == g)
		return sb;
	g->foreign++;
	if (err < 0)
		log_warn("dns: listener %u: egr_dns_senders lookup: %s; dropping", key.lport,
			 strerror(-err));
	return NULL;
}

/* Forget every sender recorded for sandbox id (it is gone, or its id is
 * new): a socket left from an earlier sandbox with this id must not ask as
 * the next one. Its queue budget goes too. */
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
	struct lgroup *g = l->g;
	struct egr_dnsproxy *p = g->p;
	int n;

	/* One turn, one recvmmsg() (level-triggered: the rest on a later
	 * one, after the other ready descriptors). */
	n = dnsp_rx(p, fd, EGR_DNSPROXY_UDP_TURN);
	if (n < 0)
		log_debug("dns: udp listener %u: %s", l->family == AF_INET ? g->port4 : g->port6,
			  strerror(-n));
	for (int i = 0; i < n; i++) {
		struct client cl = { .transport = IPPROTO_UDP, .lfd = fd, .caddr = &p->rxfrom[i] };
		struct sb *sb;

		cl.calen = p->rxmsg[i].msg_hdr.msg_namelen;
		/* Before anything is charged to a sandbox: a stranger's
		 * queries take none of its tokens or exfiltration budget. */
		sb = dnsp_client_sb(g, &p->rxfrom[i], IPPROTO_UDP);
		if (!sb)
			continue;
		dnsp_handle_query(sb, &cl, dnsp_rx_buf(p, i), p->rxmsg[i].msg_len);
	}
	/* Slots freed since: deferred queries first (dns_query.c). */
	if (p->ndeferred)
		dnsp_run_deferred(p);
	/* The turn's forwarded queries leave together. */
	dnsp_tx_flush(p);
}

/* The shared UDP queue: big enough that no sandbox's kernel budget
 * (egr_dns_budget, a burst of 2x --dns-burst) fills more than a part of
 * it (docs/dns.md "Fairness"). SO_RCVBUFFORCE needs CAP_NET_ADMIN, which
 * egressd keeps; else what rmem_max allows. */
#define SHARED_RCVBUF (16 << 20)
#define SHARED_BACKLOG 4096

/* The address a group's listeners of family are bound to, for the log. */
static const char *bind_name(const struct lgroup *g, int family, char *buf, size_t len)
{
	if (!g->device)
		return family == AF_INET ? "127.0.0.1" : "[::1]";
	if (family == AF_INET) {
		inet_ntop(AF_INET, &g->dev.addr4, buf, (socklen_t)len);
		return buf;
	}
	buf[0] = '[';
	inet_ntop(AF_INET6, &g->dev.addr6, buf + 1, (socklen_t)len - 2);
	strcat(buf, "]");
	return buf;
}

/* Where a group's listeners of family go: loopback, or the device's
 * address. */
static void bind_addr(const struct lgroup *g, int family, uint16_t port,
		      struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET) {
		struct sockaddr_in *s = (void *)ss;

		s->sin_family = AF_INET;
		s->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (g->device)
			s->sin_addr = g->dev.addr4;
		s->sin_port = htons(port);
	} else {
		struct sockaddr_in6 *s = (void *)ss;

		s->sin6_family = AF_INET6;
		s->sin6_addr = g->device ? g->dev.addr6 : in6addr_loopback;
		s->sin6_port = htons(port);
	}
}

/* A device group's socket to its device, before bind: a packet that came
 * in through any other (a neighbour's device, the host's own) is not
 * delivered to it. */
static int bind_device(const struct lgroup *g, int fd)
{
	int idx = g->dev.ifindex;

	if (!g->device)
		return 0;
	return setsockopt(fd, SOL_SOCKET, SO_BINDTOIFINDEX, &idx, sizeof(idx)) < 0 ? -errno : 0;
}

/* UDP on the group's address:want (0 = any), then TCP on the same port;
 * retried when an ephemeral UDP port is taken for TCP. */
static int open_family(const struct lgroup *g, int family, uint16_t want, struct listener *u,
		       struct listener *t, uint16_t *port)
{
	struct egr_bpf *bpf = g->p->cfg.bpf;
	bool shared = g->shared;
	int err = 0;

	for (int attempt = 0; attempt < 16; attempt++) {
		struct sockaddr_storage ss;
		socklen_t sl;
		int one = 1, ufd, tfd, rcv = SHARED_RCVBUF;

		bind_addr(g, family, want, &ss);
		sl = sa_len(&ss);
		ufd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (ufd < 0)
			return -errno;
		if (family == AF_INET6)
			setsockopt(ufd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		if (shared && setsockopt(ufd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof(rcv)) < 0)
			setsockopt(ufd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
		if ((err = bind_device(g, ufd)) ||
		    bind(ufd, (struct sockaddr *)&ss, sl) < 0 ||
		    getsockname(ufd, (struct sockaddr *)&ss, &sl) < 0) {
			err = err ? err : -errno;
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
		if ((err = bind_device(g, tfd)) ||
		    bind(tfd, (struct sockaddr *)&ss, sl) < 0 ||
		    listen(tfd, shared ? SHARED_BACKLOG : TCP_BACKLOG) < 0) {
			err = err ? err : -errno;
			close(tfd);
			close(ufd);
			if (err == -EADDRINUSE && !want)
				continue;
			return err;
		}
		/* egressd's own, in the kernel's eyes (kernel/listen.h): no
		 * sandbox may bind the port, and only these sockets get the
		 * redirected queries. Unclaimed they would get none. */
		if ((err = egr_bpf_listen_claim(bpf, ufd, EGR_LISTEN_DNS, 0)) ||
		    (err = egr_bpf_listen_claim(bpf, tfd, EGR_LISTEN_DNS, 0))) {
			egr_bpf_listen_release(bpf, ufd);
			close(tfd);
			close(ufd);
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

/* Another group listens on this port (in another namespace): the kernel's
 * records, keyed by the port, could not tell the two apart. */
static bool port_taken(const struct egr_dnsproxy *p, const struct lgroup *self, int family,
		       uint16_t port)
{
	for (const struct lgroup *g = p->groups; g; g = g->next)
		if (g != self && (family == AF_INET ? g->port4 : g->port6) == port)
			return true;
	return false;
}

/* Is fd bound where the group's listeners of family go (a held socket of
 * a device group: the device's address may have changed meanwhile)? */
static bool bound_as(const struct lgroup *g, int fd, int family, uint16_t port)
{
	struct sockaddr_storage want, have;
	socklen_t sl = sizeof(have);

	bind_addr(g, family, port, &want);
	if (getsockname(fd, (struct sockaddr *)&have, &sl) < 0 || have.ss_family != family)
		return false;
	return family == AF_INET ?
		       !memcmp(&((struct sockaddr_in *)&have)->sin_addr,
			       &((struct sockaddr_in *)&want)->sin_addr, 4) :
		       !memcmp(&((struct sockaddr_in6 *)&have)->sin6_addr,
			       &((struct sockaddr_in6 *)&want)->sin6_addr, 16);
}

/*
 * The predecessor's UDP and TCP sockets on want in this group's namespace,
 * kept by the listener holder across the restart with whatever queued on
 * them: the same sockets, so no query sent meanwhile is lost. Both or
 * neither (one alone is let go: a fresh pair is opened instead).
 */
static bool claim_family(struct lgroup *g, int family, uint16_t want, struct listener *u,
			 struct listener *t, uint16_t *port)
{
	struct egr_lhold *h = g->p->cfg.hold;
	uint64_t dev = g->own_ns ? g->p->self_ns_dev : g->ns_dev;
	uint64_t ino = g->own_ns ? g->p->self_ns_ino : g->ns_ino;
	int ufd, tfd;

	if (!h || !want)
		return false;
	ufd = egr_lhold_claim(h, (dev_t)dev, (ino_t)ino, family, SOCK_DGRAM, want);
	tfd = egr_lhold_claim(h, (dev_t)dev, (ino_t)ino, family, SOCK_STREAM, want);
	/* The new egressd claims them again in the kernel (kernel/listen.h):
	 * what it does not claim, the sweep after adoption releases. */
	if (ufd >= 0 && tfd >= 0 && bound_as(g, ufd, family, want) &&
	    bound_as(g, tfd, family, want) &&
	    !egr_bpf_listen_claim(g->p->cfg.bpf, ufd, EGR_LISTEN_DNS, 0) &&
	    !egr_bpf_listen_claim(g->p->cfg.bpf, tfd, EGR_LISTEN_DNS, 0)) {
		u->fd = ufd;
		t->fd = tfd;
		*port = want;
		return true;
	}
	for (int i = 0; i < 2; i++) {
		int fd = i ? tfd : ufd;

		if (fd >= 0) {
			egr_lhold_drop(h, fd);
			close(fd);
		}
	}
	return false;
}

/* want first (the port sockets adopted from before a restart know: the
 * very sockets if the listener holder kept them), any port unique among
 * the groups if it is taken. */
static int open_family_unique(struct lgroup *g, int family, uint16_t want, struct listener *u,
			      struct listener *t, uint16_t *port)
{
	char name[INET6_ADDRSTRLEN + 2];
	int err = -EADDRINUSE;

	if (want && !port_taken(g->p, g, family, want) &&
	    claim_family(g, family, want, u, t, port)) {
		log_info("dns: %s listeners on port %u taken over from the previous egressd",
			 bind_name(g, family, name, sizeof(name)), want);
		return 0;
	}
	for (int attempt = 0; attempt < 16; attempt++) {
		uint16_t try = attempt == 0 && !port_taken(g->p, g, family, want) ? want : 0;

		err = open_family(g, family, try, u, t, port);
		if (err == -EADDRINUSE && try)
			continue;
		if (err)
			return err;
		if (!port_taken(g->p, g, family, *port))
			return 0;
		egr_bpf_listen_release(g->p->cfg.bpf, u->fd);
		egr_bpf_listen_release(g->p->cfg.bpf, t->fd);
		close(u->fd);
		close(t->fd);
		u->fd = t->fd = -1;
		err = -EADDRINUSE;
	}
	return err;
}

static void group_close(struct lgroup *g)
{
	for (int i = 0; i < 4; i++) {
		if (g->lis[i].fd < 0)
			continue;
		egr_loop_del(g->p->loop, g->lis[i].fd);
		dnsp_tx_forget(g->p, g->lis[i].fd, NULL);
		/* Closed for good: its port reservation goes, the holder lets
		 * go too (not at exit: frozen). */
		egr_bpf_listen_release(g->p->cfg.bpf, g->lis[i].fd);
		egr_lhold_drop(g->p->cfg.hold, g->lis[i].fd);
		close(g->lis[i].fd);
		g->lis[i].fd = -1;
	}
}

static void group_use(struct sb *sb, struct lgroup *g)
{
	g->nsb++;
	sb->g = g;
	sb->port4 = g->port4;
	sb->port6 = g->port6;
}

int dnsp_group_join(struct sb *sb, int netns_fd, const struct egr_dnsproxy_device *dev,
		    uint16_t want4, uint16_t want6,
		    void (*on_tcp)(struct egr_loop *, int, uint32_t, void *))
{
	struct egr_dnsproxy *p = sb->p;
	char b4[INET6_ADDRSTRLEN + 2], b6[INET6_ADDRSTRLEN + 2];
	const char *n4, *n6;
	struct stat st = { 0 };
	struct lgroup *g;
	bool own = netns_fd < 0;
	int err = 0, err6 = 0;

	if (!own && fstat(netns_fd, &st) < 0)
		return -errno;
	/* A device sandbox never shares: its listeners are its device's. */
	for (g = p->cfg.verify_clients && !dev ? p->groups : NULL; g; g = g->next)
		if (g->shared && g->own_ns == own &&
		    (own || (g->ns_dev == st.st_dev && g->ns_ino == st.st_ino))) {
			group_use(sb, g);
			return 0;
		}
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->p = p;
	g->own_ns = own;
	g->ns_dev = st.st_dev;
	g->ns_ino = st.st_ino;
	g->shared = p->cfg.verify_clients && !dev;
	g->device = dev != NULL;
	if (dev)
		g->dev = *dev;
	for (int i = 0; i < 4; i++) {
		g->lis[i].fd = -1;
		g->lis[i].g = g;
		g->lis[i].family = i < 2 ? AF_INET : AF_INET6;
		g->lis[i].tcp = i & 1;
	}
	if (!own && setns(netns_fd, CLONE_NEWNET) < 0) {
		err = -errno;
		log_error("dns: sandbox %u: setns into its network namespace: %m", sb->id);
		free(g);
		return err;
	}
	if (!dev || dev->has4)
		err = open_family_unique(g, AF_INET, want4, &g->lis[0], &g->lis[1], &g->port4);
	if (!err && (!dev || dev->has6))
		err6 = open_family_unique(g, AF_INET6, want6, &g->lis[2], &g->lis[3], &g->port6);
	if (!own && setns(p->self_netns, CLONE_NEWNET) < 0) {
		/* Cannot happen short of a kernel bug; nothing more we can do
		 * than say so loudly: every later socket would be in the wrong
		 * namespace. */
		log_error("dns: cannot return to egressd's network namespace: %m");
		err = err ? err : -errno;
	}
	/* Loopback names are literals: only a device's are written to b4/b6. */
	n4 = bind_name(g, AF_INET, b4, sizeof(b4));
	n6 = bind_name(g, AF_INET6, b6, sizeof(b6));
	if (err) {
		log_error("dns: sandbox %u: %s listeners: %s", sb->id, n4, strerror(-err));
		goto fail;
	}
	if (err6) {
		/* A device's address may still be tentative (DAD), or gone:
		 * that family's DNS is dropped, as without an address. */
		if (err6 != -EADDRNOTAVAIL && err6 != -EAFNOSUPPORT) {
			err = err6;
			log_error("dns: sandbox %u: %s listeners: %s", sb->id, n6, strerror(-err));
			goto fail;
		}
		log_warn("dns: sandbox %u: no %s (%s): IPv6 DNS not served", sb->id,
			 dev ? n6 : "IPv6 loopback", strerror(-err6));
		g->port6 = 0;
	}
	for (int i = 0; i < 4; i++) {
		if (g->lis[i].fd < 0)
			continue;
		err = egr_loop_add(p->loop, g->lis[i].fd, EPOLLIN,
				   g->lis[i].tcp ? on_tcp : dnsp_on_udp_listener,
				   &g->lis[i]);
		if (err) {
			for (int j = 0; j < i; j++)
				if (g->lis[j].fd >= 0)
					egr_loop_del(p->loop, g->lis[j].fd);
			goto fail;
		}
	}
	/* Held from now on: they outlive this egressd (hold/lhold.h). */
	for (int i = 0; i < 4; i++)
		if (g->lis[i].fd >= 0)
			egr_lhold_put(p->cfg.hold, g->lis[i].fd);
	g->only = sb;
	g->next = p->groups;
	p->groups = g;
	group_use(sb, g);
	log_info("dns: listening on %s:%u and %s:%u%s", n4, g->port4, n6, g->port6,
		 dev ? " of a sandbox's device" :
		 own ? "" : " in a sandbox's network namespace");
	return 0;
fail:
	for (int j = 0; j < 4; j++)
		if (g->lis[j].fd >= 0) {
			egr_bpf_listen_release(p->cfg.bpf, g->lis[j].fd);
			egr_lhold_drop(p->cfg.hold, g->lis[j].fd);
			close(g->lis[j].fd);
		}
	free(g);
	return err;
}

void dnsp_group_leave(struct sb *sb)
{
	struct lgroup *g = sb->g, **pg;

	if (!g)
		return;
	sb->g = NULL;
	if (g->only == sb)
		g->only = NULL;
	if (--g->nsb)
		return;
	group_close(g);
	for (pg = &sb->p->groups; *pg; pg = &(*pg)->next)
		if (*pg == g) {
			*pg = g->next;
			break;
		}
	{
		char n4[INET6_ADDRSTRLEN + 2], n6[INET6_ADDRSTRLEN + 2];

		log_info("dns: listeners on %s:%u and %s:%u closed",
			 bind_name(g, AF_INET, n4, sizeof(n4)), g->port4,
			 bind_name(g, AF_INET6, n6, sizeof(n6)), g->port6);
	}
	free(g);
}
