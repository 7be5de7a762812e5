/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The addresses a network namespace delivers to itself: every address
 * configured on one of its interfaces (IFA_LOCAL, else IFA_ADDRESS) and every
 * IPv4 broadcast address (IFA_BROADCAST), kept live from rtnetlink; for the
 * rest, its routes (localroute.h: AnyIP prefixes, anycast).
 *
 * The DNS proxy strips answer addresses in this set (DNS rebinding to "this
 * machine": the host's public address, a bridge's address, the sandbox
 * namespace's own addresses), so the lookup is on the DNS hot path: a sorted
 * array, O(log n) per address, no netlink round trip. Changes arrive as
 * RTM_NEWADDR / RTM_DELADDR notifications on a socket the caller polls
 * (egr_localaddr_fd(), then egr_localaddr_process()); a lost notification
 * (ENOBUFS) re-reads the whole set with a dump.
 *
 * Fail closed: while the set is not known (a dump failed, the set hit its
 * cap) egr_localaddr_contains() answers true for every address.
 *
 * The sockets belong to the network namespace the caller is in when it calls
 * egr_localaddr_open(); everything after that works from any namespace.
 */
#ifndef EGR_LOCALADDR_H
#define EGR_LOCALADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EGR_LOCALADDR_MAX 65536 /* entries (address, interface, kind) */

struct egr_localaddr;

/* Subscribe, then dump, in the current network namespace. what names the
 * namespace in logs ("host", "sandbox 3"). 0 or -errno. */
int egr_localaddr_open(const char *what, struct egr_localaddr **out);
/* An empty set with no sockets, fed by egr_localaddr_apply() (tests). */
int egr_localaddr_new_detached(const char *what, struct egr_localaddr **out);
void egr_localaddr_free(struct egr_localaddr *la);

/* The notification socket (non-blocking), -1 for a detached set. */
int egr_localaddr_fd(const struct egr_localaddr *la);
/* Apply every pending notification; past a bound of queued datagrams, or
 * when some were lost, re-dump instead (at most once a second; until then
 * the set is unknown). On return the set holds every change made before the
 * call, or is unknown. 0 or -errno (then the set stays unknown until a later
 * call succeeds). */
int egr_localaddr_process(struct egr_localaddr *la);
/* Apply a buffer of netlink messages (RTM_NEWADDR / RTM_DELADDR; others are
 * ignored). 0 or -errno (-ENOSPC: the cap was hit, the set is unknown). */
int egr_localaddr_apply(struct egr_localaddr *la, const void *buf, size_t len);

/* addr: 4 (AF_INET) or 16 (AF_INET6) bytes, network order. True when the
 * address is in the set (an interface's), or when the set is not known. */
bool egr_localaddr_contains(const struct egr_localaddr *la, int family, const uint8_t *addr);
/* What the DNS proxy asks: in the set, or delivered locally by the
 * namespace's routes (a FIB lookup, localroute.h; a set opened with
 * egr_localaddr_open only). True when it cannot be told. */
bool egr_localaddr_is_local(struct egr_localaddr *la, int family, const uint8_t *addr);
/* The set's route lookups (NULL for a detached set), for their stats. */
struct egr_localroute *egr_localaddr_route(struct egr_localaddr *la);
bool egr_localaddr_synced(const struct egr_localaddr *la);
size_t egr_localaddr_count(const struct egr_localaddr *la);

#endif
