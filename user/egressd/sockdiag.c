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
 * The netlink framing (headers, attributes, sequence and port checks, acks
 * and errors) is libmnl's, as in localaddr.c.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <libmnl/libmnl.h>

#include "log.h"
#include "sockdiag.h"

#define TCP_LISTEN_STATE 10
#define TCP_TIME_WAIT_STATE 6
#define TCP_CLOSE_STATE 7
#define ALL_STATES 0xffffffffu

struct victim {
	uint8_t family, protocol;
	struct inet_diag_sockid id;
};

struct listener {
	uint8_t family;
	uint16_t port; /* network order */
};

/* A dump reply larger than this is never sent: the kernel caps a dump
 * skb at 32 KiB (netlink_dump()'s max_recvmsg_len). */
#define DIAG_DUMP_BUF 32768

struct scan {
	int netns_fd; /* -1: egressd's own */
	bool all;     /* every socket is a victim (detach) */
	egr_sock_peer_fn peer; /* report connected sockets instead (no victims) */
	void *peer_ctx;
	const uint64_t *cgids;
	size_t ncg;
	struct listener *l;
	size_t nl, capl;
	struct victim *cand; /* established sockets, judged after the dump */
	size_t nc, capc;
	/* The dump callback's state. */
	uint8_t family, protocol;
	int cb_err;
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
	struct mnl_socket *nl; /* result, or NULL with err */
	int err;
};

static struct mnl_socket *diag_socket(int *err)
{
	struct mnl_socket *nl = mnl_socket_open2(NETLINK_SOCK_DIAG, SOCK_CLOEXEC);

	if (!nl) {
		*err = -errno;
		return NULL;
	}
	if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		*err = -errno;
		mnl_socket_close(nl);
		return NULL;
	}
	return nl;
}

/* setns() moves only the calling thread: a short-lived one enters the
 * sandbox's namespace, so egressd's own thread never leaves its own. */
static void *open_in_netns(void *arg)
{
	struct netns_open *o = arg;

	if (setns(o->netns_fd, CLONE_NEWNET) < 0) {
		o->err = -errno;
		return NULL;
	}
	o->nl = diag_socket(&o->err);
	return NULL;
}

/* A sock_diag socket of the namespace netns_fd (-1: ours); sock_diag sees
 * the sockets of the namespace the socket was made in. NULL with *err set
 * when it cannot be had. */
static struct mnl_socket *open_diag(int netns_fd, int *err)
{
	struct netns_open o = { .netns_fd = netns_fd, .err = -EIO };
	pthread_t t;
	int rc;

	if (netns_fd < 0)
		return diag_socket(err);
	rc = pthread_create(&t, NULL, open_in_netns, &o);
	if (rc) {
		*err = -rc;
		return NULL;
	}
	pthread_join(t, NULL);
	if (!o.nl)
		*err = o.err;
	return o.nl;
}

/* Most cgroup ids one filter program takes: a jump ("no", 16 bits) spans
 * the rest of the program. */
#define BC_MAX_IDS 4000

/* A request: the header, then req (reqlen bytes), in buf. */
static struct nlmsghdr *put_req(void *buf, uint16_t type, uint16_t flags, uint32_t seq,
				const void *req, size_t reqlen)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);

	nlh->nlmsg_type = type;
	nlh->nlmsg_flags = flags;
	nlh->nlmsg_seq = seq;
	memcpy(mnl_nlmsg_put_extra_header(nlh, reqlen), req, reqlen);
	return nlh;
}

/*
 * An INET_DIAG_REQ_BYTECODE program that accepts only sockets whose cgroup
 * is one of ids, so the kernel skips the host's other sockets instead of
 * copying every one of them here (an attach dumped all of them four times).
 * Per id: CGROUP_COND (match: on to the next op, a jump to the end = accept;
 * no match: skip that jump), then one final jump 4 bytes past the end =
 * reject. The kernel's audit walks the "yes" chain, so every op's yes is its
 * own length. The userspace check in the dump callback stays.
 */
static void put_cgroup_filter(struct nlmsghdr *nlh, unsigned char *bc, const uint64_t *ids,
			      size_t n)
{
	size_t bc_len = n * 16 + 4;

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
	mnl_attr_put(nlh, INET_DIAG_REQ_BYTECODE, bc_len, bc);
}

static int cgroup_attr_cb(const struct nlattr *attr, void *data)
{
	uint64_t *id = data;

	if (mnl_attr_get_type(attr) == INET_DIAG_CGROUP_ID &&
	    mnl_attr_get_payload_len(attr) >= sizeof(uint64_t))
		memcpy(id, mnl_attr_get_payload(attr), sizeof(*id));
	return MNL_CB_OK;
}

static uint64_t msg_cgroup_id(const struct nlmsghdr *h)
{
	uint64_t id = 0;

	if (mnl_attr_parse(h, sizeof(struct inet_diag_msg), cgroup_attr_cb, &id) < 0)
		return 0;
	return id;
}

/* One socket of a dump: a listener or connected socket of the sandbox's
 * cgroups is kept (every socket of them, for a detach). Its family is the
 * reply's: a TCP dump of both families (AF_UNSPEC) returns either, and its
 * SOCK_DESTROY must name the socket's own. */
static int dump_cb(const struct nlmsghdr *h, void *data)
{
	struct scan *s = data;
	const struct inet_diag_msg *m = mnl_nlmsg_get_payload(h);
	uint8_t family;

	if (h->nlmsg_len < mnl_nlmsg_size(sizeof(*m)))
		return MNL_CB_OK;
	if (!in_set(s->cgids, s->ncg, msg_cgroup_id(h)))
		return MNL_CB_OK;
	family = m->idiag_family;
	if (family != AF_INET && family != AF_INET6) {
		s->cb_err = -EPROTO; /* not a socket we could name: fail, never skip */
		return MNL_CB_ERROR;
	}
	if (s->family != AF_UNSPEC && family != s->family) {
		s->cb_err = -EPROTO;
		return MNL_CB_ERROR;
	}
	if (s->peer) {
		if (m->id.idiag_dport && m->idiag_state != TCP_LISTEN_STATE &&
		    m->idiag_state != TCP_TIME_WAIT_STATE && m->idiag_state != TCP_CLOSE_STATE)
			s->peer(s->peer_ctx, msg_cgroup_id(h), family,
				(const uint8_t *)m->id.idiag_dst, ntohs(m->id.idiag_dport),
				s->protocol);
		return MNL_CB_OK;
	}
	if (s->all) {
		if ((s->cb_err = grow((void **)&s->cand, &s->capc, s->nc, sizeof(*s->cand))))
			return MNL_CB_ERROR;
		s->cand[s->nc++] = (struct victim){ family, s->protocol, m->id };
		return MNL_CB_OK;
	}
	if (s->protocol == IPPROTO_TCP && m->idiag_state == TCP_LISTEN_STATE) {
		if ((s->cb_err = grow((void **)&s->l, &s->capl, s->nl, sizeof(*s->l))))
			return MNL_CB_ERROR;
		s->l[s->nl++] = (struct listener){ family, m->id.idiag_sport };
		return MNL_CB_OK;
	}
	if (!m->id.idiag_dport)
		return MNL_CB_OK; /* not connected: sendmsg judges each datagram */
	if ((s->cb_err = grow((void **)&s->cand, &s->capc, s->nc, sizeof(*s->cand))))
		return MNL_CB_ERROR;
	s->cand[s->nc++] = (struct victim){ family, s->protocol, m->id };
	return MNL_CB_OK;
}

/*
 * One dump of (family, protocol): listeners and connected sockets of the
 * sandbox's cgroups. filter: let the kernel select them (see
 * put_cgroup_filter); without it every socket of the host comes back.
 *
 * family AF_UNSPEC (TCP only): both families in one walk. The kernel
 * keeps IPv4 and IPv6 TCP sockets in one established hash and walks all
 * of its buckets for every dump (~2 ms here, whatever the cgroup holds),
 * so a dump per family walked it twice. SOCK_DIAG_BY_FAMILY needs a
 * family; the legacy TCPDIAG_GETSOCK request (struct inet_diag_req) dumps
 * with sdiag_family AF_UNSPEC (inet_diag_dump_compat), which skips the
 * family test, and takes the same bytecode filter (inet_diag_bc_audit)
 * and returns the same attributes (INET_DIAG_CGROUP_ID) and each
 * socket's family in idiag_family.
 */
static int dump(struct scan *s, uint8_t family, uint8_t protocol, bool filter)
{
	struct inet_diag_req_v2 req = {
		.sdiag_family = family,
		.sdiag_protocol = protocol,
		.idiag_states = ALL_STATES,
	};
	struct inet_diag_req legacy = { .idiag_family = AF_INET, .idiag_states = ALL_STATES };
	bool both = family == AF_UNSPEC;
	size_t hlen = both ? sizeof(legacy) : sizeof(req);
	size_t bc_len = filter ? s->ncg * 16 + 4 : 0;
	size_t reqlen = MNL_ALIGN(mnl_nlmsg_size(hlen)) + MNL_ATTR_HDRLEN + bc_len;
	unsigned char *reqbuf = NULL, *bc = NULL;
	struct mnl_socket *nl;
	struct nlmsghdr *nlh;
	uint32_t seq = 1, portid;
	char *buf = NULL;
	int err = 0, rc;

	nl = open_diag(s->netns_fd, &err);
	if (!nl)
		return err;
	portid = mnl_socket_get_portid(nl);
	reqbuf = calloc(1, MNL_ALIGN(reqlen));
	bc = filter ? malloc(bc_len) : NULL;
	buf = malloc(DIAG_DUMP_BUF);
	if (!reqbuf || !buf || (filter && !bc)) {
		err = -ENOMEM;
		goto out;
	}
	if (both && protocol != IPPROTO_TCP) {
		err = -EINVAL; /* the legacy request exists for TCP (and DCCP) only */
		goto out;
	}
	if (both)
		nlh = put_req(reqbuf, TCPDIAG_GETSOCK, NLM_F_REQUEST | NLM_F_DUMP, seq, &legacy,
			      sizeof(legacy));
	else
		nlh = put_req(reqbuf, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, &req,
			      sizeof(req));
	if (filter)
		put_cgroup_filter(nlh, bc, s->cgids, s->ncg);
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0) {
		err = -errno;
		goto out;
	}
	s->family = family;
	s->protocol = protocol;
	s->cb_err = 0;
	for (;;) {
		ssize_t n = mnl_socket_recvfrom(nl, buf, DIAG_DUMP_BUF);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			err = -errno;
			break;
		}
		rc = mnl_cb_run(buf, (size_t)n, seq, portid, dump_cb, s);
		if (rc == MNL_CB_STOP)
			break; /* NLMSG_DONE */
		if (rc == MNL_CB_ERROR) {
			/* Ours (out of memory), or the kernel's NLMSG_ERROR. */
			err = s->cb_err ? s->cb_err : errno ? -errno : -EIO;
			break;
		}
	}
out:
	free(buf);
	free(bc);
	free(reqbuf);
	mnl_socket_close(nl);
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

static int destroy(struct mnl_socket *nl, uint32_t seq, const struct victim *v)
{
	struct inet_diag_req_v2 req = {
		.sdiag_family = v->family,
		.sdiag_protocol = v->protocol,
		.idiag_states = ALL_STATES,
		.id = v->id,
	};
	char buf[8192]; /* an ack: nlmsgerr and our request */
	struct nlmsghdr *nlh;
	ssize_t n;

	nlh = put_req(buf, SOCK_DESTROY, NLM_F_REQUEST | NLM_F_ACK, seq, &req, sizeof(req));
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
		return -errno;
	do
		n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	/* The ack: MNL_CB_STOP for success, MNL_CB_ERROR with errno. */
	if (mnl_cb_run(buf, (size_t)n, seq, mnl_socket_get_portid(nl), NULL, NULL) ==
	    MNL_CB_ERROR)
		return errno ? -errno : -EIO;
	return 0;
}

/* One dump, retried without the cgroup filter on a kernel that refuses
 * it (before 5.9; nothing was collected from the refused one). */
static int dump_filtered(struct scan *s, uint8_t family, uint8_t protocol, bool *filter)
{
	int err = dump(s, family, protocol, *filter);

	if (err == -EINVAL && *filter) {
		log_warn("sock_diag: cgroup filter refused; dumping every socket");
		*filter = false;
		err = dump(s, family, protocol, false);
	}
	return err;
}

/* The TCP and UDP sockets of both families: TCP in one walk of the
 * established hash where the kernel takes the legacy request (see dump()),
 * else one per family as before; UDP one per family (its tables are small).
 * A refused both-families dump collected nothing, so the per-family ones
 * repeat nothing. */
static int dump_all(struct scan *s, bool filter)
{
	int err = dump(s, AF_UNSPEC, IPPROTO_TCP, filter);

	if (err == -EINVAL || err == -EOPNOTSUPP || err == -ENOENT) {
		log_debug("sock_diag: no TCP dump of both families (%s); one per family",
			  strerror(-err));
		err = dump_filtered(s, AF_INET, IPPROTO_TCP, &filter);
		if (!err)
			err = dump_filtered(s, AF_INET6, IPPROTO_TCP, &filter);
	}
	if (!err)
		err = dump_filtered(s, AF_INET, IPPROTO_UDP, &filter);
	if (!err)
		err = dump_filtered(s, AF_INET6, IPPROTO_UDP, &filter);
	return err;
}

static int destroy_matching(struct scan *s, bool keep_accepted, egr_sock_judge_fn judge,
			    void *ctx, unsigned int *destroyed)
{
	bool filter = s->ncg > 0 && s->ncg <= BC_MAX_IDS;
	struct mnl_socket *nl = NULL;
	int err;

	*destroyed = 0;
	err = dump_all(s, filter);
	if (err) {
		log_error("sock_diag dump: %s", strerror(-err));
		goto out;
	}
	nl = open_diag(s->netns_fd, &err);
	if (!nl)
		goto out;
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
		rc = destroy(nl, (uint32_t)i + 1, v);
		if (rc && rc != -ENOENT) {
			log_warn("SOCK_DESTROY (protocol %u port %u): %s", v->protocol,
				 ntohs(v->id.idiag_dport), strerror(-rc));
			err = rc;
			continue;
		}
		(*destroyed)++;
	}
out:
	if (nl)
		mnl_socket_close(nl);
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

int egr_sockdiag_connected(int netns_fd, const uint64_t *cgids, size_t ncg, egr_sock_peer_fn fn,
			   void *ctx)
{
	struct scan s = { .netns_fd = netns_fd, .cgids = cgids, .ncg = ncg, .peer = fn,
			  .peer_ctx = ctx };
	int err;

	if (!ncg)
		return 0;
	err = dump_all(&s, ncg <= BC_MAX_IDS);
	free(s.cand);
	free(s.l);
	return err;
}
