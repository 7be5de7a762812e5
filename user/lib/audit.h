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
