/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The inspecting proxy's public types and limits (inspect.h is its API):
 * what its lower files (inspect_int.h) need without depending on the
 * proxy's top (tools/module-cycles). */
#ifndef EGR_INSPECT_TYPES_H
#define EGR_INSPECT_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct egr_bpf;

#define EGR_INSPECT_HELLO_MAX 17408 /* 16 KiB hello + record headers */
#define EGR_INSPECT_MAX_DESTS 256   /* per sandbox, for its audit record */
/* Slots of the whole-host bound each inspected sandbox is guaranteed (at
 * most max_conns / sandboxes): others at their share cannot take them. */
#define EGR_INSPECT_RESERVE 16

struct egr_learned;
struct egr_lhold;

/* What an event reports: a verdict (at decision time) or the end of a
 * connection that was let through (closed = true, with its byte counts). */
struct egr_inspect_event {
	uint32_t sandbox_id;
	const char *tenant;
	bool allowed;
	bool closed;
	const char *reason;   /* "allowed" or a deny reason (docs/events.md) */
	const char *proto;    /* "tls", "http" or "unknown" */
	const char *name;     /* SNI or Host seen; "" if none */
	const char *alpn;     /* first ALPN protocol offered; "" if none */
	int family;           /* original destination; 0 when unknown */
	uint8_t addr[16];
	uint16_t port;
	uint64_t bytes_out;   /* client to destination (closed events) */
	uint64_t bytes_in;
	/* A summary of denies past the sandbox's deny budget (docs/events.md
	 * "denies_suppressed"): how many since the last one, and in all; the
	 * other fields describe the last of them. 0 for every other event. */
	uint64_t suppressed, suppressed_total;
};

typedef void (*egr_inspect_event_fn)(void *ctx, const struct egr_inspect_event *ev);

struct egr_inspect_config {
	struct egr_bpf *bpf;          /* its egr_inspect_orig */
	struct egr_learned *learned;  /* NULL: only literal entries can match */
	uint32_t max_conns;           /* whole proxy (0: 1024) */
	uint32_t max_conns_per_sb;    /* one sandbox (0: 256) */
	uint32_t hello_timeout_ms;    /* first bytes (0: 5000) */
	uint32_t connect_timeout_ms;  /* to the destination (0: 10000) */
	uint32_t idle_ms;             /* no byte either way (0: 300000) */
	/* Deny events per second and burst per sandbox reported one by one,
	 * as the kernel's budget (--events-deny-rate, --events-deny-burst);
	 * rate 0: every deny. The rest are counted and summarised. */
	uint64_t deny_rate, deny_burst;
	egr_inspect_event_fn event;   /* optional */
	void *ctx;
	/* The listener holder (hold/lhold.h; NULL: none): listeners outlive
	 * egressd, a restart's adoption takes them back. Not owned. */
	struct egr_lhold *hold;
};

struct egr_inspect_stats {
	uint64_t accepted, allowed, denied;
	uint64_t refused_full;        /* closed at accept: a connection limit */
	uint64_t evicted;             /* waiting for a hello, reset for a sandbox's reserve */
	uint64_t unidentified;        /* closed at accept: no original destination */
	uint64_t deferred;            /* relay work put off: its sandbox's turn was spent */
	uint32_t conns;               /* open now */
};

/* A device sandbox's listeners (docs/inspect.md "Device sandboxes"):
 * bound to these addresses of its device (has4/has6 false: none of that
 * family, whose TCP the device programs then drop) and to the device
 * itself, in the device's network namespace, instead of loopback. */
struct egr_inspect_device {
	uint8_t addr6[16];
	uint8_t addr4[4];
	int ifindex;
	bool has4, has6;
};

struct egr_inspect;

#endif /* EGR_INSPECT_TYPES_H */
