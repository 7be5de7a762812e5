// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* egressd's own listeners in the kernel's eyes (listen.h): their ports
 * reserved in egr_listen_ports, their sockets marked in egr_listen_sk. */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "egressd.h"
#include "kernel_priv.h"
#include "listen.h"
#include "log.h"

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71 /* Linux 5.14 */
#endif

/* This start's generation: claims carry it, the sweep keeps only those. */
static uint64_t listen_gen(struct egr_bpf *b)
{
	struct timespec ts;

	if (!b->listen_gen) {
		clock_gettime(CLOCK_BOOTTIME, &ts);
		b->listen_gen = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) | 1;
	}
	return b->listen_gen;
}

/* The key of listener fd: its network namespace, port, protocol, family. */
static int listen_key(int fd, struct egr_listen_key *k)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss), cl = sizeof(k->netns_cookie), pl;
	int proto = 0;

	memset(k, 0, sizeof(*k));
	pl = sizeof(proto);
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &pl) < 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &k->netns_cookie, &cl) < 0)
		return -errno;
	if (ss.ss_family == AF_INET)
		k->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	else if (ss.ss_family == AF_INET6)
		k->port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	else
		return -EAFNOSUPPORT;
	if ((proto != IPPROTO_TCP && proto != IPPROTO_UDP) || !k->port)
		return -EINVAL;
	k->family = (uint8_t)ss.ss_family;
	k->protocol = (uint8_t)proto;
	return 0;
}

/*
 * An upgrade's mark of the predecessor's listeners, written into the new
 * maps before the programs switch (migrate.h before_switch): the new
 * programs redirect a sandbox's DNS only to a marked socket, and an
 * earlier ABI version marked none. Provisional: generation 0, so the sweep
 * after adoption drops the reservation of any that adoption did not claim
 * (claim rewrites it as this start's). A socket marked already keeps its
 * mark (an inspecting listener's names its sandbox).
 */
void egr_kern_mig_premark(void *ctx, struct bpf_object *obj)
{
	struct egr_bpf *b = ctx;
	struct bpf_map *ports = bpf_object__find_map_by_name(obj, "egr_listen_ports");
	struct bpf_map *marks = bpf_object__find_map_by_name(obj, "egr_listen_sk");
	size_t n = 0;

	if (!b->prior || !b->prior->n)
		return;
	if (!ports || !marks) {
		log_warn("upgrade: no egr_listen_ports / egr_listen_sk: the predecessor's "
			 "listeners get no DNS until adoption claims them");
		return;
	}
	for (size_t i = 0; i < b->prior->n; i++) {
		int fd = b->prior->fd[i];
		struct egr_listen_key k;
		struct egr_listen_mark m;

		if (listen_key(fd, &k))
			continue;
		memset(&m, 0, sizeof(m));
		m.port = k.port;
		m.kind = EGR_LISTEN_DNS;
		m.protocol = k.protocol;
		if (bpf_map_update_elem(bpf_map__fd(marks), &fd, &m, BPF_NOEXIST) < 0) {
			if (errno != EEXIST)
				log_warn("upgrade: mark listener %s/%u: %s",
					 k.protocol == IPPROTO_TCP ? "tcp" : "udp", k.port,
					 strerror(errno));
			continue;
		}
		bpf_map_update_elem(bpf_map__fd(ports), &k, &m, BPF_NOEXIST);
		n++;
	}
	log_info("upgrade: %zu of %zu listener socket(s) of the previous egressd marked as its "
		 "DNS listeners before the switch",
		 n, b->prior->n);
}

int egr_bpf_listen_claim(struct egr_bpf *b, int fd, int kind, uint32_t sandbox_id)
{
	struct egr_listen_key k;
	struct egr_listen_mark m;
	int err;

	/* No kernel side (a proxy test with only the maps it needs): nothing
	 * to reserve or mark. Still closed: an unmarked socket gets no
	 * redirected traffic from a real kernel side. */
	if (!b || b->fd_listen_ports < 0 || b->fd_listen_sk < 0)
		return 0;
	if ((err = listen_key(fd, &k))) {
		log_error("listener fd %d: its address, protocol or namespace: %s", fd,
			  strerror(-err));
		return err;
	}
	memset(&m, 0, sizeof(m));
	m.gen = listen_gen(b);
	m.sandbox_id = sandbox_id;
	m.port = k.port;
	m.kind = (uint8_t)kind;
	m.protocol = k.protocol;
	/* The reservation first: from here no sandbox binds the port even
	 * after this socket is gone (egressd down). Then the mark. */
	if (bpf_map_update_elem(b->fd_listen_ports, &k, &m, BPF_ANY) < 0 ||
	    bpf_map_update_elem(b->fd_listen_sk, &fd, &m, BPF_ANY) < 0) {
		err = -errno;
		log_error("claim %s listener %s/%u: %s", kind == EGR_LISTEN_DNS ? "DNS" : "inspect",
			  k.protocol == IPPROTO_TCP ? "tcp" : "udp", k.port, strerror(-err));
		bpf_map_delete_elem(b->fd_listen_ports, &k);
		return err;
	}
	return 0;
}

void egr_bpf_listen_freeze(struct egr_bpf *b)
{
	if (b)
		b->listen_frozen = true;
}

void egr_bpf_listen_release(struct egr_bpf *b, int fd)
{
	struct egr_listen_key k;

	if (!b || b->listen_frozen || b->fd_listen_ports < 0 || fd < 0 || listen_key(fd, &k))
		return;
	bpf_map_delete_elem(b->fd_listen_sk, &fd);
	if (bpf_map_delete_elem(b->fd_listen_ports, &k) < 0 && errno != ENOENT)
		log_warn("release listener port %u: %m", k.port);
}

struct sweep_ctx {
	uint64_t gen;
	struct egr_key_list stale;
	size_t total;
};

static int sweep_one(void *ctx, const void *key, const void *value)
{
	struct sweep_ctx *s = ctx;
	const struct egr_listen_mark *m = value;

	s->total++;
	if (m->gen == s->gen)
		return 0;
	return egr_key_list_add(&s->stale, key);
}

int egr_bpf_listen_sweep(struct egr_bpf *b, size_t *dropped)
{
	struct sweep_ctx s = { .gen = b ? listen_gen(b) : 0,
			       .stale = { .key_size = sizeof(struct egr_listen_key) } };
	size_t n = 0;
	int err;

	if (dropped)
		*dropped = 0;
	if (!b)
		return 0;
	if (b->fd_listen_ports < 0)
		return -EBADF;
	err = egr_kmap_walk(b->fd_listen_ports, 0, sweep_one, &s);
	for (size_t i = 0; i < s.stale.n; i++)
		if (bpf_map_delete_elem(b->fd_listen_ports,
					s.stale.keys + i * s.stale.key_size) == 0)
			n++;
	free(s.stale.keys);
	if (n)
		log_info("listeners: %zu port reservation(s) of an earlier egressd's listeners not "
			 "reopened: released", n);
	if (dropped)
		*dropped = n;
	return err < 0 ? err : 0;
}

static int listen_count_one(void *ctx, const void *key, const void *value)
{
	(void)key;
	(void)value;
	(*(size_t *)ctx)++;
	return 0;
}

int egr_bpf_listen_count(struct egr_bpf *b, size_t *n)
{
	*n = 0;
	if (!b || b->fd_listen_ports < 0)
		return b ? -EBADF : 0;
	return egr_kmap_walk(b->fd_listen_ports, 0, listen_count_one, n);
}
