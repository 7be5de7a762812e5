/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The event stream (docs/events.md): the kernel's egr_events ring buffer is
 * read here and published on the bus (struct egr_rec, kind KERNEL); every
 * event kind of the bus (kernel, DNS and inspect verdicts, lifecycle, lost
 * and suppressed events) comes back to the stream's own subscriber, which
 * keeps the last N as typed records for `egressctl events` and sends each
 * to the `events --follow` subscribers as a JSON line. JSON is built only
 * for records somebody reads (render.c). Lost kernel events
 * (EGR_CNT_EVENTS_LOST) are checked every second and published as a loss
 * record (the audit log writes its gap, alerting raises lost_events).
 */
#ifndef EGR_EVENTS_H
#define EGR_EVENTS_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "kernel/bpfstate.h"
#include "bus.h"
#include "loop.h"
#include "mbuf.h"
#include "render.h"
#include "sandbox.h"

#define EGR_EVENTS_KEEP_DEFAULT 4096

struct egr_events;

/* Open the ring buffer, register it and a 1 s timer in loop, and subscribe
 * the stream to bus (before adoption: its lifecycle events are kept too).
 * state_dir holds events.state (the lost counter already reported). reg is
 * read for identities only. 0 or -errno. */
int egr_events_new(struct egr_events **out, struct egr_bpf *bpf, struct egr_registry *reg,
		   struct egr_loop *loop, struct egr_bus *bus, size_t keep, const char *state_dir);
void egr_events_free(struct egr_events *ev);

/* r as the stream would show it now (with the sandbox's tenant and
 * execution id): an alert's evidence. NULL on OOM. */
json_t *egr_events_render(struct egr_events *ev, const struct egr_rec *r);

/* The newest limit (0: all kept) events, oldest first, of sandbox (0: all). */
json_t *egr_events_query(struct egr_events *ev, uint32_t sandbox, size_t limit);

/* Take over a control connection as a --follow subscriber (fd is dup()ed;
 * the caller closes its own). Only events of sandbox (0: all). 0 or -errno. */
int egr_events_subscribe(struct egr_events *ev, int fd, uint32_t sandbox);

/* {"received","emitted","lost","kept","subscribers","subscribers_dropped",...} */
json_t *egr_events_status(struct egr_events *ev);

/* Drain the ring buffer and check the lost counter now (tests, shutdown). */
void egr_events_poll(struct egr_events *ev);
/* Is there room for another `events --follow` subscriber? */
bool egr_events_subscriber_room(const struct egr_events *ev);

/* A metrics source (ctx: the stream): per-sandbox suppressed and lost. */
void egr_events_metrics(void *ctx, struct egr_mbuf *mb);

#endif /* EGR_EVENTS_H */
