// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Tearing down established connections a narrowed policy no longer allows.
 * The hooks judge a destination once, at connect(); a policy update must
 * therefore also end what is already open. sock_diag dumps the TCP and UDP
 * sockets of both families with their cgroup ids; the ones in the
 * sandbox's cgroups whose peer the new policy refuses get SOCK_DESTROY
 * (CONFIG_INET_DIAG_DESTROY), which the owner sees as ECONNABORTED.
 * A detached sandbox loses every TCP and UDP socket it has, whatever its
 * state; with a network namespace of its own, the dumps run there too.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "sockdiag.h"

#define TCP_LISTEN_STATE 10
#define ALL_STATES 0xffffffffu

struct victim {
	uint8_t family, protocol;
	struct inet_diag_sockid id;
};

struct listener {
	uint8_t family;
	uint16_t port; /* network order */
};

struct scan {
	int netns_fd; /* -1: egressd's own */
	bool all;     /* every socket is a victim (detach) */
	const uint64_t *cgids;
	size_t ncg;
	struct listener *l;
	size_t nl, capl;
	struct victim *cand; /* established sockets, judged after the dump */
	size_t nc, capc;
};

static bool in_set(const uint64_t *ids, size_t n, uint64_t id)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
	void *na;

	if (n < *cap)
		return 0;
	na = realloc(*arr, (*cap ? *cap * 2 : 64) * elem);
	if (!na)
		return -ENOMEM;
	*arr = na;
	*cap = *cap ? *cap * 2 : 64;
	return 0;
}

struct netns_open {
	int netns_fd;
	int fd; /* result: the socket, or -errno */
};

/* setns() moves only the calling thread: a short-lived one enters the
 * sandbox's namespace, so egressd's own thread never leaves its own. */
static void *open_in_netns(void *arg)
{
	struct netns_open *o = arg;

	if (setns(o->netns_fd, CLONE_NEWNET) < 0) {
		o->fd = -errno;
		return NULL;
	}
	o->fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (o->fd < 0)
		o->fd = -errno;
	return NULL;
}

/* A sock_diag socket of the namespace netns_fd (-1: ours); sock_diag sees
 * the sockets of the namespace the socket was made in. fd or -errno. */
static int open_diag(int netns_fd)
{
	struct netns_open o = { .netns_fd = netns_fd, .fd = -EIO };
	pthread_t t;
	int err, fd;

	if (netns_fd < 0) {
		fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
		return fd < 0 ? -errno : fd;
	}
	err = pthread_create(&t, NULL, open_in_netns, &o);
	if (err)
		return -err;
	pthread_join(t, NULL);
	return o.fd;
}

static int nl_send(int fd, uint16_t type, uint16_t flags, const struct inet_diag_req_v2 *req)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 req;
	} msg = {
		.nlh = { .nlmsg_len = sizeof(msg), .nlmsg_type = type, .nlmsg_flags = flags },
		.req = *req,
	};
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };

	if (sendto(fd, &msg, sizeof(msg), 0, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	return 0;
}

/* Most cgroup ids one filter program takes: a jump ("no", 16 bits) spans
 * the rest of the program. */
#define BC_MAX_IDS 4000

/*
 * A dump request with an INET_DIAG_REQ_BYTECODE program that accepts only
 * sockets whose cgroup is one of ids, so the kernel skips the host's other
 * sockets instead of copying every one of them here (an attach dumped all
 * of them four times). Per id: CGROUP_COND (match: on to the next op, a
 * jump to the end = accept; no match: skip that jump), then one final jump
 * 4 bytes past the end = reject. The kernel's audit walks the "yes" chain,
 * so every op's yes is its own length. The userspace check in dump() stays.
 */
static int nl_send_filtered(int fd, const struct inet_diag_req_v2 *req, const uint64_t *ids,
			    size_t n)
{
	size_t bc_len = n * 16 + 4, len = NLMSG_LENGTH(sizeof(*req)) + NLA_HDRLEN + bc_len;
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
	struct nlmsghdr *nlh;
	struct nlattr *nla;
	unsigned char *bc;
	int err = 0;

	nlh = calloc(1, len);
	if (!nlh)
		return -ENOMEM;
	nlh->nlmsg_len = (uint32_t)len;
	nlh->nlmsg_type = SOCK_DIAG_BY_FAMILY;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	memcpy(NLMSG_DATA(nlh), req, sizeof(*req));
	nla = (struct nlattr *)((char *)nlh + NLMSG_LENGTH(sizeof(*req)));
	nla->nla_type = INET_DIAG_REQ_BYTECODE;
	nla->nla_len = (uint16_t)(NLA_HDRLEN + bc_len);
	bc = (unsigned char *)nla + NLA_HDRLEN;
	for (size_t i = 0; i < n; i++) {
		struct inet_diag_bc_op cond = { INET_DIAG_BC_CGROUP_COND, 12, 16 };
		struct inet_diag_bc_op jmp = { INET_DIAG_BC_JMP, 4, 0 };
		size_t off = i * 16;

		jmp.no = (unsigned short)(bc_len - (off + 12));
		memcpy(bc + off, &cond, sizeof(cond));
		memcpy(bc + off + 4, &ids[i], sizeof(ids[i]));
		memcpy(bc + off + 12, &jmp, sizeof(jmp));
	}
	memcpy(bc + n * 16, &(struct inet_diag_bc_op){ INET_DIAG_BC_JMP, 4, 8 },
	       sizeof(struct inet_diag_bc_op));
	if (sendto(fd, nlh, len, 0, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		err = -errno;
	free(nlh);
	return err;
}

static uint64_t msg_cgroup_id(const struct nlmsghdr *h, const struct inet_diag_msg *m)
{
	int len = (int)h->nlmsg_len - NLMSG_LENGTH(sizeof(*m));
	struct rtattr *a = (struct rtattr *)(m + 1);

	for (; RTA_OK(a, len); a = RTA_NEXT(a, len))
		if (a->rta_type == INET_DIAG_CGROUP_ID && RTA_PAYLOAD(a) >= (int)sizeof(uint64_t)) {
			uint64_t id;

			memcpy(&id, RTA_DATA(a), sizeof(id));
			return id;
		}
	return 0;
}

/* One dump of (family, protocol): listeners and connected sockets of the
 * sandbox's cgroups. filter: let the kernel select them (see
 * nl_send_filtered); without it every socket of the host comes back. */
static int dump(struct scan *s, uint8_t family, uint8_t protocol, bool filter)
{
	struct inet_diag_req_v2 req = {
		.sdiag_family = family,
		.sdiag_protocol = protocol,
		.idiag_states = ALL_STATES,
	};
	char buf[32768];
	int fd, err;
	bool done = false;

	fd = open_diag(s->netns_fd);
	if (fd < 0)
		return fd;
	if (filter)
		err = nl_send_filtered(fd, &req, s->cgids, s->ncg);
	else
		err = nl_send(fd, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, &req);
	while (!err && !done) {
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		struct nlmsghdr *h;

		if (n < 0) {
			err = errno == EINTR ? 0 : -errno;
			continue;
		}
		for (h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			struct inet_diag_msg *m = NLMSG_DATA(h);

			if (h->nlmsg_type == NLMSG_DONE) {
				done = true;
				break;
			}
			if (h->nlmsg_type == NLMSG_ERROR) {
				struct nlmsgerr *e = NLMSG_DATA(h);

				err = e->error ? e->error : -EIO;
				break;
			}
			if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*m)))
				continue;
			if (!in_set(s->cgids, s->ncg, msg_cgroup_id(h, m)))
				continue;
			if (s->all) {
				if ((err = grow((void **)&s->cand, &s->capc, s->nc,
						sizeof(*s->cand))))
					break;
				s->cand[s->nc++] = (struct victim){ family, protocol, m->id };
				continue;
			}
			if (protocol == IPPROTO_TCP && m->idiag_state == TCP_LISTEN_STATE) {
				if ((err = grow((void **)&s->l, &s->capl, s->nl, sizeof(*s->l))))
					break;
				s->l[s->nl++] = (struct listener){ family, m->id.idiag_sport };
				continue;
			}
			if (!m->id.idiag_dport)
				continue; /* not connected: sendmsg judges each datagram */
			if ((err = grow((void **)&s->cand, &s->capc, s->nc, sizeof(*s->cand))))
				break;
			s->cand[s->nc++] = (struct victim){ family, protocol, m->id };
		}
	}
	close(fd);
	return err;
}

static bool accepted(const struct scan *s, const struct victim *v)
{
	if (v->protocol != IPPROTO_TCP)
		return false;
	for (size_t i = 0; i < s->nl; i++)
		if (s->l[i].family == v->family && s->l[i].port == v->id.idiag_sport)
			return true;
	return false;
}

static int destroy(int fd, const struct victim *v)
{
	struct inet_diag_req_v2 req = {
		.sdiag_family = v->family,
		.sdiag_protocol = v->protocol,
		.idiag_states = ALL_STATES,
		.id = v->id,
	};
	char buf[4096];
	ssize_t n;
	int err;

	err = nl_send(fd, SOCK_DESTROY, NLM_F_REQUEST | NLM_F_ACK, &req);
	if (err)
		return err;
	n = recv(fd, buf, sizeof(buf), 0);
	if (n < 0)
		return -errno;
	if ((size_t)n >= NLMSG_LENGTH(sizeof(struct nlmsgerr))) {
		struct nlmsghdr *h = (struct nlmsghdr *)buf;

		if (h->nlmsg_type == NLMSG_ERROR)
			return ((struct nlmsgerr *)NLMSG_DATA(h))->error;
	}
	return 0;
}

static int destroy_matching(struct scan *s, bool keep_accepted, egr_sock_judge_fn judge,
			    void *ctx, unsigned int *destroyed)
{
	static const uint8_t families[] = { AF_INET, AF_INET6 };
	static const uint8_t protocols[] = { IPPROTO_TCP, IPPROTO_UDP };
	bool filter = s->ncg > 0 && s->ncg <= BC_MAX_IDS;
	int fd = -1, err = 0;

	*destroyed = 0;
	for (size_t f = 0; f < 2 && !err; f++) {
		for (size_t p = 0; p < 2 && !err; p++) {
			err = dump(s, families[f], protocols[p], filter);
			if (err == -EINVAL && filter) {
				/* A kernel without the cgroup condition (before
				 * 5.9): the same dump unfiltered. Nothing was
				 * collected from the refused one. */
				log_warn("sock_diag: cgroup filter refused; dumping every socket");
				filter = false;
				err = dump(s, families[f], protocols[p], false);
			}
		}
	}
	if (err) {
		log_error("sock_diag dump: %s", strerror(-err));
		goto out;
	}
	fd = open_diag(s->netns_fd);
	if (fd < 0) {
		err = fd;
		goto out;
	}
	for (size_t i = 0; i < s->nc; i++) {
		const struct victim *v = &s->cand[i];
		const uint8_t *dst = (const uint8_t *)v->id.idiag_dst;
		int rc;

		/* Accepted inbound connections were never judged by connect;
		 * with inbound allowed the inbound policy governs them. The
		 * test is only by local port (a SO_REUSEPORT socket can share
		 * a listener's), so with inbound denied nothing is exempt. */
		if (!s->all && keep_accepted && accepted(s, v))
			continue;
		if (!s->all && judge(ctx, v->family, dst, ntohs(v->id.idiag_dport), v->protocol))
			continue;
		rc = destroy(fd, v);
		if (rc && rc != -ENOENT) {
			log_warn("SOCK_DESTROY (protocol %u port %u): %s", v->protocol,
				 ntohs(v->id.idiag_dport), strerror(-rc));
			err = rc;
			continue;
		}
		(*destroyed)++;
	}
out:
	if (fd >= 0)
		close(fd);
	free(s->cand);
	free(s->l);
	return err;
}

int egr_sockdiag_destroy_refused(int netns_fd, const uint64_t *cgids, size_t ncg,
				 bool keep_accepted, egr_sock_judge_fn judge, void *ctx,
				 unsigned int *destroyed)
{
	struct scan s = { .netns_fd = netns_fd, .cgids = cgids, .ncg = ncg };

	return destroy_matching(&s, keep_accepted, judge, ctx, destroyed);
}

int egr_sockdiag_destroy_all(int netns_fd, const uint64_t *cgids, size_t ncg,
			     unsigned int *destroyed)
{
	struct scan s = { .netns_fd = netns_fd, .all = true, .cgids = cgids, .ncg = ncg };

	return destroy_matching(&s, false, NULL, NULL, destroyed);
}
