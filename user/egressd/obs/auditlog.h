/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * egressd's audit records (docs/audit.md) on top of user/lib/audit.c: one
 * "policy_change" record per attach and update, one "execution" record per
 * sandbox at detach (destinations, bytes, verdict counts), and "audit_gap"
 * records for lost events. It implements the registry hooks and publishes
 * what they see as lifecycle records on the bus (egr_auditlog_quarantine
 * and egr_auditlog_tamper too). It calls neither the stream nor alerting.
 */
#ifndef EGR_AUDITLOG_H
#define EGR_AUDITLOG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "kernel/bpfstate.h"
#include "bus.h"
#include "sandbox.h"

struct egr_auditlog;

struct egr_auditlog_opts {
	const char *path;        /* the log */
	const char *state;       /* its chain state */
	const char *key_file;    /* HMAC key, NULL: plain SHA-256 */
	size_t rotate_bytes;     /* 0: no rotation */
	const char *state_dir;   /* its ledger.key: the state's MAC without key_file */
	const char *anchor;      /* --audit-anchor: "syslog", a file, NULL: none */
	unsigned int anchor_every; /* records between anchors (0: every batch) */
};

/* The key audit.state and billing.state are authenticated with: the audit
 * key file if one is given, else <state_dir>/ledger.key (made at first
 * start; *created then). Free with egr_audit_free_key(). 0 or -errno. */
int egr_ledger_key_load(const char *key_file, const char *state_dir, uint8_t **key,
			size_t *keylen, bool *created);

/* What open found that needs an alert (audit.state failing its MAC: the
 * critical audit_state_tampered), raised once alerting subscribed. */
void egr_auditlog_report_open(struct egr_auditlog *al);

/* Subscribes to bus (DNS verdicts and denied kernel events for the
 * execution records, losses for gap records) and publishes the lifecycle
 * records its registry hooks see and the tampering it records. */
int egr_auditlog_open(struct egr_auditlog **out, const struct egr_auditlog_opts *o,
		      struct egr_bpf *bpf, struct egr_bus *bus);
void egr_auditlog_close(struct egr_auditlog *al);

/* Registry hooks that write the audit records and lifecycle events, then
 * call next's (may be NULL: lets other modules chain theirs). al may be NULL
 * (events only). */
void egr_auditlog_hooks(struct egr_auditlog *al, struct egr_reg_hooks *h,
			const struct egr_reg_hooks *next);

/* Where execution records find host names (docs/audit.md): the name
 * each learned address was learned for, and the inspecting proxy's
 * destinations. Either may be NULL. */
struct egr_learned;
struct egr_inspect;
void egr_auditlog_set_names(struct egr_auditlog *al, struct egr_learned *learned,
			    struct egr_inspect *inspect);

/* Who is making the current control request (NULL: nobody). */
void egr_auditlog_set_actor(struct egr_auditlog *al, const struct ucred *cred);

/* Something was done to egressd's own state from outside (docs/audit.md,
 * "Tampering"): type "pin_removed" or "state_tampered". Writes an audit
 * record of that type (sb's identity when sb is not NULL, else just the
 * sandbox id, 0 for none) with detail's members, and publishes it as a
 * health record (alerting raises the critical alert of the same type).
 * detail is stolen (may be NULL). */
void egr_auditlog_tamper(struct egr_auditlog *al, const char *type, uint32_t sandbox,
			 const struct egr_sb *sb, const char *summary, json_t *detail);

/* An explicit gap record. 0 or -errno. */
int egr_auditlog_gap(struct egr_auditlog *al, const char *reason, uint64_t lost);
uint64_t egr_auditlog_failures(const struct egr_auditlog *al);

/* A "quarantine" record (on: the breaker tripped; evidence says why) or a
 * "release" record (actor: the current control request). 0 or -errno. */
int egr_auditlog_quarantine(struct egr_auditlog *al, const struct egr_sb *sb, bool on,
			    json_t *evidence, unsigned closed);
json_t *egr_auditlog_status(const struct egr_auditlog *al);
/* A decision on a name held for approval (docs/audit.md "policy_change"):
 * {"type":"policy_change","change":"approval", sb's identity, detail's
 * members}; an approved name (detail "decision" "approved") is also listed
 * in sb's execution record. Takes detail. */
void egr_auditlog_approval(struct egr_auditlog *al, const struct egr_sb *sb, json_t *detail);

#endif /* EGR_AUDITLOG_H */
