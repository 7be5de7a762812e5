/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Control connections as non-blocking state machines on the event loop
 * (docs/control-protocol.md). A peer is judged when it is accepted: a
 * refused one gets its answer and is closed at once, never read. An allowed
 * one is read as its bytes arrive, judged again when its newline arrives
 * (what it became since accept counts: control/peer.h), answered, and
 * closed when its whole request (and then its whole reply) has not gone
 * through by the deadline: a slow or hostile client costs the loop one
 * read per wake-up, never a wait.
 */
#ifndef EGR_CTLCONN_H
#define EGR_CTLCONN_H

#include <stdint.h>

#include "loop.h"
#include "server.h"

#define EGR_CTL_DEADLINE_MS 10000 /* whole request, and again whole reply */
#define EGR_CTL_MAX_CONNS   64    /* allowed peers served at once */

struct egr_ctl;

/* Serve the listening socket lfd (non-blocking) on loop for srv. The
 * caller keeps lfd. 0 or -errno. */
int egr_ctl_start(struct egr_loop *loop, int lfd, struct egr_server *srv, struct egr_ctl **out);
/* Close every connection and unregister from the loop. */
void egr_ctl_free(struct egr_ctl *ctl);

struct egr_ctl_stats {
	uint64_t accepted;
	uint64_t refused;   /* peers refused (answered, closed, never read) */
	uint64_t refused_at_request; /* admitted at accept, refused when the request came */
	uint64_t timed_out; /* closed at the deadline */
	uint64_t overflow;  /* closed at accept: EGR_CTL_MAX_CONNS in service */
	uint32_t open;
};
void egr_ctl_stats(const struct egr_ctl *ctl, struct egr_ctl_stats *out);

#endif /* EGR_CTLCONN_H */
