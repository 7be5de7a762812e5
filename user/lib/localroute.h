/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Does a network namespace deliver an address to itself by its routes? The
 * FIB's own answer (rtnetlink RTM_GETROUTE, the lookup `ip route get` does):
 * RTN_LOCAL, RTN_BROADCAST or RTN_ANYCAST is local. localaddr.h knows the
 * interface addresses; this covers what only a route says: AnyIP (`ip route
 * add local 45.67.0.0/24 dev lo`, as CDN and proxy hosts do), IPv6 anycast,
 * policy rules that pick a table with such a route (issue 23, finding 7).
 *
 * Cost: a lookup is a netlink round trip (about 5 us), so answers are
 * cached per namespace (EGR_LOCALROUTE_CACHE slots, direct-mapped). The
 * cache is flushed whenever the namespace reports a change of routes, rules,
 * nexthops, addresses or links (a socket subscribed to those groups, drained
 * without blocking before each lookup; a lost notification counts as a
 * change), and an entry lives at most EGR_LOCALROUTE_TTL_MS besides, for a
 * change the kernel does not announce.
 *
 * Fail closed: a lookup that fails for any reason other than "no route"
 * (ENETUNREACH, EHOSTUNREACH, EACCES, EINVAL: unreachable, prohibit,
 * blackhole) answers local.
 *
 * The sockets belong to the network namespace the caller is in when it calls
 * egr_localroute_open(); everything after that works from any namespace.
 */
#ifndef EGR_LOCALROUTE_H
#define EGR_LOCALROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EGR_LOCALROUTE_CACHE  256
#define EGR_LOCALROUTE_TTL_MS 1000

struct egr_localroute;

struct egr_localroute_stats {
	uint64_t lookups;  /* FIB round trips */
	uint64_t hits;     /* answered from the cache */
	uint64_t flushes;  /* changes seen */
	uint64_t failures; /* lookups that failed (answered local) */
};

/* In the current network namespace. what names it in logs. 0 or -errno. */
int egr_localroute_open(const char *what, struct egr_localroute **out);
void egr_localroute_free(struct egr_localroute *lr);

/* addr: 4 (AF_INET) or 16 (AF_INET6) bytes, network order. True when the
 * namespace's FIB delivers it locally, or when that cannot be told. */
bool egr_localroute_is_local(struct egr_localroute *lr, int family, const uint8_t *addr);

void egr_localroute_stats(const struct egr_localroute *lr, struct egr_localroute_stats *out);

/* The verdict of one RTM_GETROUTE reply in buf (an RTM_NEWROUTE or an
 * NLMSG_ERROR): 1 local, 0 not local, -errno when it says neither (then the
 * caller answers local). Exposed for the unit tests and the fuzz target. */
int egr_localroute_parse_reply(const void *buf, size_t len, uint32_t seq);

#endif
