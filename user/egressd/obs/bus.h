/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The observation bus: what egressd observes (kernel events, DNS and
 * inspecting proxy verdicts, sandbox lifecycle, lost and suppressed events,
 * health findings) as typed records, handed to every subscriber of its kind.
 * Publishers know only the bus; subscribers (the event stream, alerting, the
 * audit log, metrics) know only the records. Nothing here builds JSON: the
 * event stream (events.c, render.c) renders an event when somebody reads it.
 *
 * Subscribers are registered while egressd starts, before the registry
 * adopts the pinned sandboxes, so that adoption's records reach all of them.
 * A record and everything it points to live only during egr_bus_publish():
 * a subscriber that keeps one copies it. Single-threaded, like the loop.
 */
#ifndef EGR_BUS_H
#define EGR_BUS_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "egressd.h"

struct egr_sb;
struct egr_dns_event;
struct egr_inspect_event;

enum egr_rec_kind {
	EGR_REC_KERNEL,     /* a record of the kernel's ring buffer */
	EGR_REC_DNS,        /* a DNS proxy verdict */
	EGR_REC_INSPECT,    /* an inspecting proxy verdict */
	EGR_REC_LIFECYCLE,  /* a sandbox attached, adopted, updated, ... */
	EGR_REC_LOSS,       /* kernel events the ring had no room for */
	EGR_REC_SUPPRESSED, /* deny events a sandbox's budget held back */
	EGR_REC_HEALTH,     /* egressd's own state tampered with (not an event) */
	EGR_REC_APPROVAL,   /* a name held for approval, and its decision */
	EGR_REC_NKINDS
};

#define EGR_REC_BIT(k) (1u << (k))
#define EGR_REC_ALL ((1u << EGR_REC_NKINDS) - 1)
/* The kinds that are events of the stream (docs/events.md): numbered by
 * the bus ("seq") and stamped with their time. */
#define EGR_REC_EVENTS (EGR_REC_ALL & ~EGR_REC_BIT(EGR_REC_HEALTH))

enum egr_life {
	EGR_LIFE_ATTACH,
	EGR_LIFE_ADOPT,
	EGR_LIFE_UPDATE,
	EGR_LIFE_DETACH,
	EGR_LIFE_QUARANTINE,
	EGR_LIFE_RELEASE,
};

struct egr_rec_kernel {
	/* The ring's record; an egr_escape_event when type is EGR_EV_ESCAPE. */
	const struct egr_event *e;
	/* EGR_EV_ESCAPE of another process: was the moved process killed
	 * (1), not (0); -1 when no kill was due. */
	int target_killed;
};

struct egr_rec_lifecycle {
	enum egr_life what;
	const struct egr_sb *sb;
	const char *old_sha256; /* UPDATE: the policy it replaced */
	int closed;             /* connections torn down; -1: not told */
};

struct egr_rec_loss {
	uint64_t lost, total;
	const char *reason;
};

struct egr_rec_suppressed {
	uint64_t n, total;
	const struct egr_deny_budget *budget; /* its top destinations */
};

struct egr_rec_health {
	const char *type;        /* "pin_removed", "state_tampered" */
	const struct egr_sb *sb; /* NULL: only the sandbox id is known */
	const char *summary;
	const json_t *detail;    /* the audit record's and alert's members */
};

/* docs/events.md "approval": a query held for approval (docs/dns.md
 * "Approvals") and what became of it. */
struct egr_approval_event {
	uint64_t id;
	uint32_t sandbox_id;
	const char *tenant, *execution_id, *name;
	uint16_t qtype;
	const char *state;   /* "pending", "approved", "denied", "timeout", "refused", "gone" */
	const char *scope;   /* approved: "sandbox", "execution" or "tenant"; else NULL */
	const char *ports;   /* "tcp/443,tcp/80": granted, or the policy's ask_ports */
	uint64_t ttl_s;      /* approved: 0 for the sandbox's life */
	int64_t approver_uid, approver_pid; /* decisions; -1 otherwise */
	const char *reason;  /* the approver's, or NULL */
	uint64_t deadline_unix_ns; /* pending: when it times out */
};

struct egr_rec {
	enum egr_rec_kind kind;
	uint32_t sandbox;  /* 0: none (a global loss, ...) */
	uint64_t seq;      /* event kinds: stamped by egr_bus_publish() */
	uint64_t unix_ns;  /* event kinds: when (kernel: the event's own time) */
	union {
		struct egr_rec_kernel kernel;
		const struct egr_dns_event *dns;
		const struct egr_inspect_event *inspect;
		struct egr_rec_lifecycle life;
		struct egr_rec_loss loss;
		struct egr_rec_suppressed suppressed;
		struct egr_rec_health health;
		const struct egr_approval_event *approval;
	};
};

typedef void (*egr_bus_fn)(void *ctx, const struct egr_rec *r);

#define EGR_BUS_MAX_SUBS 8

struct egr_bus {
	struct {
		unsigned kinds;
		egr_bus_fn fn;
		void *ctx;
	} subs[EGR_BUS_MAX_SUBS];
	size_t nsubs;
	uint64_t seq;                        /* last event number given */
	uint64_t published[EGR_REC_NKINDS];  /* status and tests */
};

/* fn gets every record whose kind is in kinds (EGR_REC_BIT()s), in the
 * order subscribers were registered. 0, -ENOSPC. */
int egr_bus_subscribe(struct egr_bus *b, unsigned kinds, egr_bus_fn fn, void *ctx);
/* Number (event kinds) and hand r to its subscribers. r's seq and, when
 * 0, unix_ns are filled in. b may be NULL (nothing happens). */
void egr_bus_publish(struct egr_bus *b, struct egr_rec *r);

/* Realtime now in ns. */
uint64_t egr_now_ns(void);

/* Names of the stream (docs/events.md), for renderers and subscribers. */
const char *egr_life_name(enum egr_life what);
const char *egr_dns_verdict_event_name(int verdict); /* "allow", "deny", ... */

#endif /* EGR_BUS_H */
