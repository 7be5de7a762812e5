/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#ifndef EGR_SOCKDIAG_H
#define EGR_SOCKDIAG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* May a socket of this family keep talking to daddr:dport (network-order
 * address, host-order port) over protocol? */
typedef bool (*egr_sock_judge_fn)(void *ctx, int family, const uint8_t *daddr, uint16_t dport,
				  int protocol);

/* Destroy every connected TCP and UDP socket (IPv4 and IPv6) whose cgroup
 * id is in cgids and whose peer judge() refuses. With keep_accepted
 * (inbound allowed), accepted inbound TCP connections (local port of a
 * listener in the same cgroups) are left to the inbound policy. netns_fd:
 * the network namespace to look in (-1: egressd's own). 0 or -errno (the
 * first failure; the others are still tried); *destroyed counts the sockets
 * ended. */
int egr_sockdiag_destroy_refused(int netns_fd, const uint64_t *cgids, size_t ncg,
				 bool keep_accepted, egr_sock_judge_fn judge, void *ctx,
				 unsigned int *destroyed);

/* Destroy every TCP and UDP socket of the cgroups, whatever its state
 * (listening, connected, bound or not): a detached sandbox keeps none. */
int egr_sockdiag_destroy_all(int netns_fd, const uint64_t *cgids, size_t ncg,
			     unsigned int *destroyed);

/* One connected socket found: its cgroup id, family, peer (network-order
 * address, host-order port) and protocol. */
typedef void (*egr_sock_peer_fn)(void *ctx, uint64_t cgroup_id, int family, const uint8_t *daddr,
				 uint16_t dport, int protocol);

/* Report every TCP socket of the cgroups that is connected or connecting
 * (not listening, closed or in TIME_WAIT) and every connected UDP socket,
 * of both families, in the network namespace netns_fd (-1: egressd's own).
 * Destroys nothing. 0 or -errno (then some may have been reported). */
int egr_sockdiag_connected(int netns_fd, const uint64_t *cgids, size_t ncg, egr_sock_peer_fn fn,
			   void *ctx);

#endif /* EGR_SOCKDIAG_H */
