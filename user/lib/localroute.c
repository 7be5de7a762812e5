// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * FIB lookups of answer addresses in a network namespace, cached until the
 * namespace changes (localroute.h), through libmnl.
 */
#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/rtnetlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "localroute.h"
#include "log.h"

#ifndef RTNLGRP_NEXTHOP
#define RTNLGRP_NEXTHOP 32
#endif

#define DRAIN_MAX  64   /* notification datagrams read per lookup at most */
#define READ_TRIES 4    /* stale replies skipped before giving up */
#define NL_BUF     8192 /* a route reply is a few hundred bytes */

struct slot {
	uint64_t gen; /* 0: empty */
	uint64_t at_ms;
	uint8_t family;
	bool local;
	uint8_t addr[16];
};

struct egr_localroute {
	struct mnl_socket *watch; /* change notifications, non-blocking */
	struct mnl_socket *query; /* RTM_GETROUTE, blocking with a timeout */
	uint32_t seq;
	uint64_t gen; /* bumped by every change seen: older slots are stale */
	struct egr_localroute_stats st;
	bool fail_logged;
	struct slot cache[EGR_LOCALROUTE_CACHE];
	char what[32];
};

/* What changes a FIB lookup's answer. NEXTHOP is optional (5.3+). */
static const unsigned int watch_groups[] = {
	RTNLGRP_IPV4_ROUTE, RTNLGRP_IPV6_ROUTE, RTNLGRP_IPV4_RULE,   RTNLGRP_IPV6_RULE,
	RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV6_IFADDR, RTNLGRP_LINK,
};

int egr_localroute_open(const char *what, struct egr_localroute **out)
{
	struct egr_localroute *lr;
	struct timeval tv = { .tv_sec = 1 };
	unsigned int nh = RTNLGRP_NEXTHOP;
	int err;

	if (!out)
		return -EINVAL;
	lr = calloc(1, sizeof(*lr));
	if (!lr)
		return -ENOMEM;
	snprintf(lr->what, sizeof(lr->what), "%s", what ? what : "?");
	lr->seq = (uint32_t)time(NULL);
	lr->gen = 1;
	lr->watch = mnl_socket_open2(NETLINK_ROUTE, SOCK_NONBLOCK | SOCK_CLOEXEC);
	lr->query = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
	if (!lr->watch || !lr->query) {
		err = -errno;
		log_error("localroute %s: netlink socket: %s", lr->what, strerror(-err));
		goto fail;
	}
	if (mnl_socket_bind(lr->watch, 0, MNL_SOCKET_AUTOPID) < 0 ||
	    mnl_socket_bind(lr->query, 0, MNL_SOCKET_AUTOPID) < 0) {
		err = -errno;
		log_error("localroute %s: netlink bind: %s", lr->what, strerror(-err));
		goto fail;
	}
	for (size_t i = 0; i < sizeof(watch_groups) / sizeof(watch_groups[0]); i++)
		if (mnl_socket_setsockopt(lr->watch, NETLINK_ADD_MEMBERSHIP,
					  (void *)&watch_groups[i], sizeof(watch_groups[i])) < 0) {
			err = -errno;
			log_error("localroute %s: netlink group %u: %s", lr->what,
				  watch_groups[i], strerror(-err));
			goto fail;
		}
	/* A kernel without nexthop objects has none to change. */
	(void)mnl_socket_setsockopt(lr->watch, NETLINK_ADD_MEMBERSHIP, &nh, sizeof(nh));
	/* The kernel answers a lookup at once; this only bounds a wedged one. */
	(void)setsockopt(mnl_socket_get_fd(lr->query), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	*out = lr;
	return 0;
fail:
	egr_localroute_free(lr);
	return err;
}

void egr_localroute_free(struct egr_localroute *lr)
{
	if (!lr)
		return;
	if (lr->watch)
		mnl_socket_close(lr->watch);
	if (lr->query)
		mnl_socket_close(lr->query);
	free(lr);
}

/* Read what the namespace announced since the last call; anything at all
 * (a lost notification too) flushes the cache. One recv when nothing is
 * queued; rtnetlink notifies synchronously, so a change made before the
 * answer arrived is queued by now. */
static void drain(struct egr_localroute *lr)
{
	static uint8_t buf[NL_BUF]; /* single-threaded callers */
	bool changed = false;

	for (int i = 0; i < DRAIN_MAX; i++) {
		ssize_t n = recv(mnl_socket_get_fd(lr->watch), buf, sizeof(buf), MSG_TRUNC);

		if (n >= 0) {
			changed = true;
			continue;
		}
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			break;
		if (errno == EINTR)
			continue;
		changed = true; /* ENOBUFS: lost ones; anything else: do not trust */
		if (errno != ENOBUFS)
			break;
	}
	if (changed) {
		lr->gen++;
		lr->st.flushes++;
	}
}

/* The verdict of one message of the lookup's sequence: 1, 0, -errno, or
 * -EAGAIN when it is neither a route nor an error. */
static int reply_verdict(const struct nlmsghdr *nlh)
{
	if (nlh->nlmsg_type == NLMSG_ERROR) {
		const struct nlmsgerr *e;

		if (nlh->nlmsg_len < mnl_nlmsg_size(sizeof(*e)))
			return -EBADMSG;
		e = mnl_nlmsg_get_payload(nlh);
		if (e->error > 0 || e->error < -4095)
			return -EBADMSG; /* no errno (INT_MIN cannot even be negated) */
		switch (-e->error) {
		case ENETUNREACH:  /* no route at all */
		case EHOSTUNREACH: /* an unreachable route */
		case EACCES:       /* prohibit */
		case EINVAL:       /* blackhole */
			return 0;
		case 0:
			return -EBADMSG; /* an ack is no answer */
		default:
			return e->error; /* the caller logs it */
		}
	}
	if (nlh->nlmsg_type == RTM_NEWROUTE) {
		const struct rtmsg *rtm;

		if (nlh->nlmsg_len < mnl_nlmsg_size(sizeof(*rtm)))
			return -EBADMSG;
		rtm = mnl_nlmsg_get_payload(nlh);
		return rtm->rtm_type == RTN_LOCAL || rtm->rtm_type == RTN_BROADCAST ||
		       rtm->rtm_type == RTN_ANYCAST;
	}
	return -EAGAIN;
}

int egr_localroute_parse_reply(const void *buf, size_t len, uint32_t seq)
{
	const uint8_t *p = buf;
	size_t off = 0;

	if (!buf)
		return -EINVAL;
	/* By hand, not mnl_nlmsg_ok(): it takes a length of 2^31 or more for a
	 * negative one that fits (found by fuzz_localroute). */
	while (len - off >= sizeof(struct nlmsghdr)) {
		const struct nlmsghdr *nlh = (const struct nlmsghdr *)(p + off);
		size_t step = MNL_ALIGN((size_t)nlh->nlmsg_len);
		int v;

		if (nlh->nlmsg_len < sizeof(*nlh) || nlh->nlmsg_len > len - off)
			break;
		/* A late reply to a lookup that timed out is skipped. */
		v = nlh->nlmsg_seq == seq ? reply_verdict(nlh) : -EAGAIN;
		if (v != -EAGAIN)
			return v;
		if (step > len - off)
			break;
		off += step;
	}
	return -EAGAIN; /* nothing for this lookup in buf */
}

/* One FIB lookup: 1 local, 0 not, -errno. */
static int fib_lookup(struct egr_localroute *lr, int family, const uint8_t *addr)
{
	static uint8_t buf[NL_BUF]; /* single-threaded callers */
	size_t alen = family == AF_INET ? 4 : 16;
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct rtmsg *rtm;
	uint32_t seq = ++lr->seq;

	nlh->nlmsg_type = RTM_GETROUTE;
	nlh->nlmsg_flags = NLM_F_REQUEST;
	nlh->nlmsg_seq = seq;
	rtm = mnl_nlmsg_put_extra_header(nlh, sizeof(*rtm));
	rtm->rtm_family = (uint8_t)family;
	rtm->rtm_dst_len = (uint8_t)(alen * 8);
	mnl_attr_put(nlh, RTA_DST, alen, addr);
	if (mnl_socket_sendto(lr->query, nlh, nlh->nlmsg_len) < 0)
		return -errno;
	for (int t = 0; t < READ_TRIES; t++) {
		ssize_t n = mnl_socket_recvfrom(lr->query, buf, sizeof(buf));
		int v;

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		v = egr_localroute_parse_reply(buf, (size_t)n, seq);
		if (v != -EAGAIN)
			return v;
	}
	return -EIO;
}

static size_t slot_of(int family, const uint8_t *addr)
{
	size_t alen = family == AF_INET ? 4 : 16;
	uint32_t h = 2166136261u; /* FNV-1a */

	for (size_t i = 0; i < alen; i++)
		h = (h ^ addr[i]) * 16777619u;
	return (h ^ (uint32_t)family) % EGR_LOCALROUTE_CACHE;
}

bool egr_localroute_is_local(struct egr_localroute *lr, int family, const uint8_t *addr)
{
	size_t alen = family == AF_INET ? 4 : 16;
	uint64_t now = egr_mono_ns() / 1000000ULL;
	struct slot *s;
	int v;

	if (!lr || !addr || (family != AF_INET && family != AF_INET6))
		return true;
	drain(lr);
	s = &lr->cache[slot_of(family, addr)];
	if (s->gen == lr->gen && s->family == family && !memcmp(s->addr, addr, alen) &&
	    now - s->at_ms < EGR_LOCALROUTE_TTL_MS) {
		lr->st.hits++;
		return s->local;
	}
	lr->st.lookups++;
	v = fib_lookup(lr, family, addr);
	if (v < 0) {
		lr->st.failures++;
		if (!lr->fail_logged)
			log_error("localroute %s: route lookup failed: %s; the answer address "
				  "counts as local",
				  lr->what, strerror(-v));
		lr->fail_logged = true;
		return true; /* not cached: the next answer asks again */
	}
	lr->fail_logged = false;
	memset(s, 0, sizeof(*s));
	s->gen = lr->gen;
	s->at_ms = now;
	s->family = (uint8_t)family;
	s->local = v == 1;
	memcpy(s->addr, addr, alen);
	return s->local;
}

void egr_localroute_stats(const struct egr_localroute *lr, struct egr_localroute_stats *out)
{
	if (!out)
		return;
	memset(out, 0, sizeof(*out));
	if (lr)
		*out = lr->st;
}
