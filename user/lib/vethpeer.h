/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The host side of a network namespace's one veth (the OCI hook's gVisor
 * containers, docs/architecture.md "Device sandboxes"): rtnetlink from
 * inside the namespace says which interfaces it has, which is the veth, its
 * peer's ifindex (IFLA_LINK) and the peer's namespace as an id of the
 * inner namespace (IFLA_LINK_NETNSID). An id is no name: it is matched
 * against the namespaces the caller can name (RTM_GETNSID with NETNSA_FD
 * asked inside the inner namespace, which allocates no id), and the peer
 * is checked from its own side (a veth whose IFLA_LINK is the inner end and
 * whose peer namespace is the inner one).
 *
 * Refused, since gVisor would send through a device nobody confines: no
 * veth, two or more, or any other interface up besides loopback (gVisor
 * uses every interface that is up); a peer in the inner namespace itself;
 * a peer in a namespace none of the candidates is.
 */
#ifndef EGR_VETHPEER_H
#define EGR_VETHPEER_H

#include <limits.h>
#include <net/if.h>
#include <stddef.h>

struct egr_veth_peer {
	char inner[IF_NAMESIZE];   /* the veth inside the namespace */
	int inner_ifindex;
	char ifname[IF_NAMESIZE];  /* its peer, the host side */
	int ifindex;
	char netns[PATH_MAX];      /* the peer's namespace: "" the caller's own, else a path */
};

/*
 * The peer of the one veth in the namespace open at nsfd. candidates: the
 * paths of namespaces the peer may be in, NULL-terminated; "" is the
 * caller's own. 0, or -errno with why filled: -ENOENT no veth, -ENOTUNIQ
 * several (or another interface up), -ELOOP the peer is inside too, -ESRCH
 * its namespace is none of the candidates, others from netlink.
 * Briefly enters nsfd (setns): call it from a single-threaded process.
 */
int egr_veth_peer_find(int nsfd, const char *const *candidates, struct egr_veth_peer *out,
		       char *why, size_t whylen);

/* The same with the candidates egressd can be told: the caller's own
 * namespace, then every /run/netns/NAME (sorted). */
int egr_veth_peer_find_named(int nsfd, struct egr_veth_peer *out, char *why, size_t whylen);

#endif /* EGR_VETHPEER_H */
