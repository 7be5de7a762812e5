/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A bus record as the event stream's JSON object (docs/events.md): the one
 * place that builds event JSON. The stream calls it only for records that
 * somebody reads (a --follow subscriber, `egressctl events`, an alert's
 * evidence).
 */
#ifndef EGR_RENDER_H
#define EGR_RENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "bus.h"

/* Version of the JSON event schema ("v"). */
#define EGR_EVENTS_SCHEMA 1

/* r (an event kind) as its event. tenant, execution_id: the sandbox's, as
 * the stream resolved them when r was published (NULL: none); members r
 * carries itself win. NULL on OOM or for a kind that is no event. */
json_t *egr_render_event(const struct egr_rec *r, const char *tenant, const char *execution_id);

/* "connect", "sendmsg", ... (NULL: a type this egressd does not know). */
const char *egr_render_type_name(uint32_t type);
/* "tcp", "udp", ... or the number, in buf. */
const char *egr_render_proto_name(uint32_t proto, char *buf, size_t len);
/* "killed", "alerted", ... of an escape event. */
const char *egr_render_escape_action(uint32_t action);
/* The event's destination (inbound: its source) as text; false when it has
 * none (not an address-carrying type). */
bool egr_render_kernel_addr(const struct egr_event *e, char *buf, size_t len);

#endif /* EGR_RENDER_H */
