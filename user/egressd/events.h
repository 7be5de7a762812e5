/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The event stream (docs/events.md): the kernel's egr_events ring buffer and
 * egressd's own events (DNS verdicts, sandbox lifecycle, lost events) as one
 * stream of JSON objects. The last N are kept in memory for `egressctl
 * events`; `events --follow` subscribers get each one as a line. Lost kernel
 * events (EGR_CNT_EVENTS_LOST) are checked every second and turned into a
 * "lost_events" event, an alert and an audit gap record.
 */
#ifndef EGR_EVENTS_H
#define EGR_EVENTS_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "kernel/bpfstate.h"
#include "loop.h"
#include "sandbox.h"

/* Version of the JSON event schema ("v"). */
#define EGR_EVENTS_SCHEMA 1
#define EGR_EVENTS_KEEP_DEFAULT 4096

struct egr_events;
struct egr_alerting;
struct egr_auditlog;

/* Open the ring buffer, register it and a 1 s timer in loop. state_dir
 * holds events.state (the lost counter already reported). 0 or -errno. */
int egr_events_new(struct egr_events **out, struct egr_bpf *bpf, struct egr_registry *reg,
		   struct egr_loop *loop, size_t keep, const char *state_dir);
void egr_events_free(struct egr_events *ev);

/* Where events and losses go besides the stream (both may be NULL). */
void egr_events_set_sinks(struct egr_events *ev, struct egr_alerting *alerting,
			  struct egr_auditlog *audit);

/*
 * A userspace-origin event into the stream. obj is a JSON object with at
 * least "type"; it is NOT stolen (the caller keeps its reference). Missing
 * "v", "seq", "time" and "origin" are filled in; a "sandbox" id without
 * "tenant"/"execution_id" gets them from the registry. DNS verdicts: "type":
 * "dns", "verdict": "allow" | "deny" | "exfil", "qname", ... (docs/events.md).
 */
void egr_events_emit(struct egr_events *ev, json_t *obj);

/* A DNS proxy verdict (struct egr_dns_event, dnsproxy.h) into the stream:
 * "type":"dns", verdict "allow" | "deny" | "exfil" | "servfail", qname,
 * qtype, transport, rcode, reason, addresses. ev may be NULL. */
struct egr_dns_event;
void egr_events_dns(struct egr_events *ev, const struct egr_dns_event *d);

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

/* A sandbox's kernel events held back by its deny budget and lost for
 * want of ring room (its audit record). 0 or -errno. */
int egr_events_sandbox_figures(struct egr_events *ev, uint32_t sandbox_id, uint64_t *suppressed,
			       uint64_t *lost);
/* A metrics source (ctx: the stream): per-sandbox suppressed and lost. */
struct egr_mbuf;
void egr_events_metrics(void *ctx, struct egr_mbuf *mb);

#endif /* EGR_EVENTS_H */
