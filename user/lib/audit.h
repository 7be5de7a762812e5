/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Tamper-evident audit log (docs/audit.md).
 *
 * One JSON object per line. The writer adds "seq", "ts", "prev", "alg" and
 * "hash" to the caller's record; "hash" is SHA-256 (HMAC-SHA-256 when a key is
 * given) over the exact bytes of the line without its trailing
 * `,"hash":"<hex>"` member, and "prev" is the previous record's "hash", so the
 * records form one chain across rotated (gzip) files. The last seq/hash are
 * also kept in a small state file so that truncation of the tail is visible.
 *
 * Every function returns 0 or a negative errno.
 */
#ifndef EGR_AUDIT_H
#define EGR_AUDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* The reading side (verifier, file list, keys, the MAC) and the limits
 * both sides share: audit_read.h, below the writer. */
#include "audit_read.h"

struct egr_audit;

/*
 * Open (create, mode 0600) the log at @path for appending and recover the
 * chain from @state_path (required) and the log's tail. A torn last line
 * (crash mid-write) is cut back to the last newline and an "audit_gap" record
 * is written; so is one when the state says the log had more records than it
 * has now. @key (may be NULL) selects HMAC-SHA-256; it is copied.
 * @rotate_bytes 0 disables rotation. The log is flock()ed: a second writer
 * gets -EBUSY.
 */
int egr_audit_open(struct egr_audit **out, const char *path, const char *state_path,
		   const uint8_t *key, size_t keylen, size_t rotate_bytes);

/* What egressd opens its log with (egr_audit_open: a chain key and
 * rotation only, an unauthenticated state file, no anchors). */
struct egr_audit_opts {
	const uint8_t *key;         /* the chain's HMAC key, NULL: SHA-256 */
	size_t keylen;
	const uint8_t *state_key;   /* audit.state's MAC (macfile.h), NULL: none */
	size_t state_keylen;
	bool state_legacy_ok;       /* take a state without a MAC (its key was just made) */
	const char *anchor;         /* "syslog", an anchor file's path, NULL: none */
	unsigned int anchor_every;  /* anchor after this many durable records (0: 1) */
	bool append_only;           /* FS_APPEND_FL on the log and the state */
	size_t rotate_bytes;
};

/* As egr_audit_open. A state file whose MAC fails (rewritten by hand, or
 * another key) is not trusted: the chain goes on from the log's last
 * record after an "audit_gap" record saying so, and
 * egr_audit_state_tampered() is true (egressd raises a critical alert). An
 * anchor is written after recovery (event "start"), on close ("stop") and
 * once anchor_every records are durable since the last ("every"), before
 * their writers are answered. */
int egr_audit_open_opts(struct egr_audit **out, const char *path, const char *state_path,
			const struct egr_audit_opts *o);
/* Did open find audit.state failing its MAC? */
bool egr_audit_state_tampered(const struct egr_audit *a);
/* Anchors written and anchor writes that failed. */
void egr_audit_anchor_stats(const struct egr_audit *a, uint64_t *written, uint64_t *failed);
void egr_audit_close(struct egr_audit *a);

/*
 * Append @record (a JSON object; not modified, not stolen). Its "seq", "ts",
 * "prev", "alg" and "hash" members, if any, are replaced by the writer's.
 * The line is written whole and fsynced before this returns 0 (with group
 * commit: written, and fsynced by the next flush); on failure
 * nothing of it stays in the log, the failure counter is bumped and a
 * negative errno is returned. A failure to update the state file or to
 * compress a rotated file after the record is durable is counted and logged
 * but returns 0 (the record is in the log; retrying would duplicate it).
 */
int egr_audit_append(struct egr_audit *a, json_t *record);

/*
 * Group commit: from now on egr_audit_append() writes the line but leaves
 * the fsync (and the state file) to @q's next egr_commitq_flush(), which
 * syncs every record appended since the last flush at once. A caller that
 * acknowledges a record to someone takes egr_commit_ticket(q) after the
 * append and answers only when egr_commit_status() says durable; a failed
 * sync cuts the unsynced records off again and their tickets fail.
 * egr_audit_close() syncs what is pending. -EINVAL if already set.
 */
struct egr_commitq;
int egr_audit_set_commit(struct egr_audit *a, struct egr_commitq *q);

/* Append {"type":"audit_gap","reason":@reason,"lost":@lost}. */
int egr_audit_record_gap(struct egr_audit *a, const char *reason, uint64_t lost);

/* Failed writes, fsyncs, state updates, rotations and compressions so far. */
uint64_t egr_audit_failures(const struct egr_audit *a);
/* Sequence number of the last record written (0 before the first). */
uint64_t egr_audit_seq(const struct egr_audit *a);

#endif /* EGR_AUDIT_H */
