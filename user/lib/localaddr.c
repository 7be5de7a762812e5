// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * A live set of a network namespace's local addresses (localaddr.h), from
 * rtnetlink through libmnl.
 */
#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/if_addr.h>
#include <linux/rtnetlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "localaddr.h"
#include "localroute.h"
#include "log.h"

#define DUMP_TRIES          3   /* a dump the kernel interrupted is retried */
#define MSGS_PER_PROCESS    256 /* notification datagrams per egr_localaddr_process() */
#define NOTIFY_RCVBUF       (1 << 20)
#define NL_BUF              32768   /* a dump datagram (the kernel caps them at 32 KiB) */

enum kind { K_LOCAL = 0, K_BROADCAST = 1 };

struct entry {
	uint8_t family;  /* AF_INET or AF_INET6 */
	uint8_t kind;
	uint8_t addr[16];
	uint32_t ifindex;
};

struct egr_localaddr {
	struct mnl_socket *notify; /* groups: IPv4 and IPv6 address changes */
	struct mnl_socket *dump;   /* blocking, for RTM_GETADDR dumps */
	uint32_t seq;
	bool synced;
	int dump_err;              /* what dump_cb() failed with */
	uint64_t last_resync_ns;   /* an unknown set is re-read at most once a second */
	bool outage_logged;           /* the current outage was logged */
	struct egr_localroute *route; /* the FIB's word on what the set misses */
	struct entry *v;           /* sorted by (family, addr, ifindex, kind) */
	size_t n, cap;
	char what[32];
};

static int entry_cmp(const struct entry *a, const struct entry *b)
{
	int c;

	if (a->family != b->family)
		return a->family < b->family ? -1 : 1;
	c = memcmp(a->addr, b->addr, 16);
	if (c)
		return c;
	if (a->ifindex != b->ifindex)
		return a->ifindex < b->ifindex ? -1 : 1;
	return (int)a->kind - (int)b->kind;
}

/* First index whose entry is >= key. */
static size_t lower_bound(const struct egr_localaddr *la, const struct entry *key)
{
	size_t lo = 0, hi = la->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (entry_cmp(&la->v[mid], key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int set_add(struct egr_localaddr *la, const struct entry *e)
{
	size_t i = lower_bound(la, e);

	if (i < la->n && !entry_cmp(&la->v[i], e))
		return 0;
	if (la->n == la->cap) {
		size_t cap = la->cap ? la->cap * 2 : 64;
		struct entry *v;

		if (la->cap >= EGR_LOCALADDR_MAX)
			return -ENOSPC;
		if (cap > EGR_LOCALADDR_MAX)
			cap = EGR_LOCALADDR_MAX;
		v = realloc(la->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		la->v = v;
		la->cap = cap;
	}
	memmove(&la->v[i + 1], &la->v[i], (la->n - i) * sizeof(*e));
	la->v[i] = *e;
	la->n++;
	return 0;
}

static void set_del(struct egr_localaddr *la, const struct entry *e)
{
	size_t i = lower_bound(la, e);

	if (i < la->n && !entry_cmp(&la->v[i], e)) {
		memmove(&la->v[i], &la->v[i + 1], (la->n - i - 1) * sizeof(*e));
		la->n--;
	}
}

struct attrs {
	const struct nlattr *tb[IFA_MAX + 1];
};

static int attr_cb(const struct nlattr *attr, void *data)
{
	struct attrs *a = data;
	int type = mnl_attr_get_type(attr);

	if (mnl_attr_type_valid(attr, IFA_MAX) < 0)
		return MNL_CB_OK; /* newer kernel attribute: not ours */
	a->tb[type] = attr;
	return MNL_CB_OK;
}

static bool attr_addr(const struct nlattr *attr, size_t alen, struct entry *e)
{
	if (!attr || mnl_attr_get_payload_len(attr) != alen)
		return false;
	memset(e->addr, 0, sizeof(e->addr));
	memcpy(e->addr, mnl_attr_get_payload(attr), alen);
	return true;
}

/* One RTM_NEWADDR / RTM_DELADDR: its local address and broadcast address. */
static int apply_msg(struct egr_localaddr *la, const struct nlmsghdr *nlh)
{
	const struct ifaddrmsg *ifa;
	struct attrs a = { { 0 } };
	struct entry e = { 0 };
	size_t alen;
	int err = 0;

	if (nlh->nlmsg_type != RTM_NEWADDR && nlh->nlmsg_type != RTM_DELADDR)
		return 0;
	if (nlh->nlmsg_len < mnl_nlmsg_size(sizeof(*ifa)))
		return -EBADMSG;
	ifa = mnl_nlmsg_get_payload(nlh);
	if (ifa->ifa_family != AF_INET && ifa->ifa_family != AF_INET6)
		return 0;
	alen = ifa->ifa_family == AF_INET ? 4 : 16;
	if (mnl_attr_parse(nlh, sizeof(*ifa), attr_cb, &a) < 0)
		return -EBADMSG;
	e.family = ifa->ifa_family;
	e.ifindex = ifa->ifa_index;
	/* IFA_LOCAL is the local end where it differs from IFA_ADDRESS (a
	 * point-to-point peer); otherwise IFA_ADDRESS is the address. */
	e.kind = K_LOCAL;
	if (attr_addr(a.tb[IFA_LOCAL] ? a.tb[IFA_LOCAL] : a.tb[IFA_ADDRESS], alen, &e)) {
		if (nlh->nlmsg_type == RTM_NEWADDR)
			err = set_add(la, &e);
		else
			set_del(la, &e);
	}
	e.kind = K_BROADCAST;
	if (!err && ifa->ifa_family == AF_INET && attr_addr(a.tb[IFA_BROADCAST], alen, &e)) {
		if (nlh->nlmsg_type == RTM_NEWADDR)
			err = set_add(la, &e);
		else
			set_del(la, &e);
	}
	return err;
}

int egr_localaddr_apply(struct egr_localaddr *la, const void *buf, size_t len)
{
	const struct nlmsghdr *nlh = buf;
	int remaining = len > (size_t)INT32_MAX ? INT32_MAX : (int)len;

	if (!la || !buf)
		return -EINVAL;
	while (mnl_nlmsg_ok(nlh, remaining)) {
		int err = apply_msg(la, nlh);

		if (err) {
			if (err == -ENOSPC) {
				if (!la->outage_logged)
					log_error("localaddr %s: more than %d local addresses: "
						  "every DNS answer address counts as local",
						  la->what, EGR_LOCALADDR_MAX);
				la->outage_logged = true;
				la->synced = false;
			}
			return err;
		}
		nlh = mnl_nlmsg_next(nlh, &remaining);
	}
	return 0;
}

static int dump_cb(const struct nlmsghdr *nlh, void *data)
{
	struct egr_localaddr *la = data;

	la->dump_err = apply_msg(la, nlh);
	return la->dump_err ? MNL_CB_ERROR : MNL_CB_OK;
}

/* Re-read the whole set. The notification socket was subscribed before, so
 * a change during the dump is in its queue too and applies after (adds and
 * deletes are idempotent, and they come in order). */
static int resync(struct egr_localaddr *la)
{
	static uint8_t buf[NL_BUF]; /* single-threaded callers */
	int err = -EIO;

	la->synced = false;
	la->last_resync_ns = egr_mono_ns();
	for (int t = 0; t < DUMP_TRIES; t++) {
		struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
		struct ifaddrmsg *ifa;
		uint32_t portid = mnl_socket_get_portid(la->dump);
		ssize_t n;
		int ret;

		nlh->nlmsg_type = RTM_GETADDR;
		nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
		nlh->nlmsg_seq = ++la->seq;
		ifa = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifa));
		ifa->ifa_family = AF_UNSPEC;
		la->n = 0;
		la->dump_err = 0;
		errno = 0;
		if (mnl_socket_sendto(la->dump, nlh, nlh->nlmsg_len) < 0) {
			err = -errno;
			break;
		}
		do {
			n = mnl_socket_recvfrom(la->dump, buf, sizeof(buf));
			if (n < 0) {
				ret = -1;
				break;
			}
			ret = mnl_cb_run(buf, (size_t)n, la->seq, portid, dump_cb, la);
		} while (ret > MNL_CB_STOP);
		if (ret == MNL_CB_STOP) {
			if (la->outage_logged)
				log_info("localaddr %s: local addresses known again (%zu entries)",
					 la->what, la->n);
			la->outage_logged = false;
			la->synced = true;
			return 0;
		}
		err = la->dump_err ? la->dump_err : errno ? -errno : -EIO;
		if (err != -EINTR) /* NLM_F_DUMP_INTR: the set changed, dump again */
			break;
	}
	la->n = 0;
	if (!la->outage_logged) /* once per outage, not per retry */
		log_error("localaddr %s: cannot read the local addresses: %s; every DNS answer "
			  "address counts as local until it works", la->what, strerror(-err));
	la->outage_logged = true;
	return err;
}

int egr_localaddr_new_detached(const char *what, struct egr_localaddr **out)
{
	struct egr_localaddr *la;

	if (!out)
		return -EINVAL;
	la = calloc(1, sizeof(*la));
	if (!la)
		return -ENOMEM;
	snprintf(la->what, sizeof(la->what), "%s", what ? what : "?");
	la->synced = true;
	*out = la;
	return 0;
}

int egr_localaddr_open(const char *what, struct egr_localaddr **out)
{
	struct egr_localaddr *la;
	int err, sz = NOTIFY_RCVBUF;
	struct timeval tv = { .tv_sec = 2 };

	err = egr_localaddr_new_detached(what, &la);
	if (err)
		return err;
	la->seq = (uint32_t)time(NULL);
	la->notify = mnl_socket_open2(NETLINK_ROUTE, SOCK_NONBLOCK | SOCK_CLOEXEC);
	la->dump = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
	if (!la->notify || !la->dump) {
		err = -errno;
		log_error("localaddr %s: netlink socket: %s", la->what, strerror(-err));
		goto fail;
	}
	/* A larger queue makes an overrun (and its re-dump) rarer; without
	 * CAP_NET_ADMIN the kernel clamps it, which is fine. */
	if (setsockopt(mnl_socket_get_fd(la->notify), SOL_SOCKET, SO_RCVBUFFORCE, &sz,
		       sizeof(sz)) < 0)
		(void)setsockopt(mnl_socket_get_fd(la->notify), SOL_SOCKET, SO_RCVBUF, &sz,
				 sizeof(sz));
	/* A dump answers at once; the timeout only bounds a wedged kernel. */
	(void)setsockopt(mnl_socket_get_fd(la->dump), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (mnl_socket_bind(la->notify, RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR,
			    MNL_SOCKET_AUTOPID) < 0 ||
	    mnl_socket_bind(la->dump, 0, MNL_SOCKET_AUTOPID) < 0) {
		err = -errno;
		log_error("localaddr %s: netlink bind: %s", la->what, strerror(-err));
		goto fail;
	}
	err = resync(la);
	if (!err)
		err = egr_localroute_open(la->what, &la->route);
	if (err)
		goto fail;
	log_debug("localaddr %s: %zu local address entries", la->what, la->n);
	*out = la;
	return 0;
fail:
	egr_localaddr_free(la);
	return err;
}

void egr_localaddr_free(struct egr_localaddr *la)
{
	if (!la)
		return;
	if (la->notify)
		mnl_socket_close(la->notify);
	if (la->dump)
		mnl_socket_close(la->dump);
	egr_localroute_free(la->route);
	free(la->v);
	free(la);
}

int egr_localaddr_fd(const struct egr_localaddr *la)
{
	return la && la->notify ? mnl_socket_get_fd(la->notify) : -1;
}

int egr_localaddr_process(struct egr_localaddr *la)
{
	static uint8_t buf[NL_BUF]; /* single-threaded callers */
	bool overrun = true; /* unless the queue is drained within the bound */
	bool lost = false;
	int err = 0;

	if (!la || !la->notify)
		return -EINVAL;
	/* More than the bound queued: a dump is cheaper than reading on, and
	 * it leaves the set current as of now (the caller relies on that). */
	for (int i = 0; i < MSGS_PER_PROCESS; i++) {
		ssize_t n = mnl_socket_recvfrom(la->notify, buf, sizeof(buf));

		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				overrun = lost;
				break;
			}
			if (errno == EINTR)
				continue;
			if (errno == ENOBUFS) { /* notifications were lost */
				lost = true;
				continue;
			}
			err = -errno; /* unexpected: re-read rather than guess */
			break;
		}
		if (egr_localaddr_apply(la, buf, (size_t)n) == -EBADMSG)
			lost = true; /* cannot tell what changed: re-read */
	}
	if (overrun) {
		if (lost)
			log_warn("localaddr %s: address notifications lost; re-reading", la->what);
		/* A namespace whose root churns addresses must not make egressd
		 * dump it for every answer: at most one dump a second, the set
		 * unknown (everything local) in between. */
		if (egr_mono_ns() - la->last_resync_ns < 1000000000ULL) {
			la->synced = false;
			return -EAGAIN;
		}
		return resync(la);
	}
	if (!la->synced && egr_mono_ns() - la->last_resync_ns >= 1000000000ULL)
		return resync(la);
	return la->synced ? err : -EIO;
}

bool egr_localaddr_contains(const struct egr_localaddr *la, int family, const uint8_t *addr)
{
	struct entry key = { 0 };
	size_t i;

	if (!la || !la->synced || !addr || (family != AF_INET && family != AF_INET6))
		return true;
	key.family = (uint8_t)family;
	memcpy(key.addr, addr, family == AF_INET ? 4 : 16);
	i = lower_bound(la, &key); /* ifindex 0, kind 0 sort first */
	return i < la->n && la->v[i].family == family && !memcmp(la->v[i].addr, key.addr, 16);
}

bool egr_localaddr_is_local(struct egr_localaddr *la, int family, const uint8_t *addr)
{
	if (egr_localaddr_contains(la, family, addr))
		return true;
	/* An address of no interface can still be local by a route (AnyIP, an
	 * IPv6 anycast address): the FIB has the last word. */
	return la->route && egr_localroute_is_local(la->route, family, addr);
}

struct egr_localroute *egr_localaddr_route(struct egr_localaddr *la)
{
	return la ? la->route : NULL;
}

bool egr_localaddr_synced(const struct egr_localaddr *la)
{
	return la && la->synced;
}

size_t egr_localaddr_count(const struct egr_localaddr *la)
{
	return la ? la->n : 0;
}
