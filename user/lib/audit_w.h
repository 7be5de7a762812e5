/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Private to the audit writer: audit.c (the log) and audit_head.c (its
 * state file, append-only flag and anchors). */
#ifndef EGR_AUDIT_W_H
#define EGR_AUDIT_W_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "audit_read.h"

struct egr_commit_member;
struct egr_audit_anchor;

struct egr_audit {
	char *path;
	char *state_path;
	int fd;
	uint8_t *key;
	size_t keylen;
	size_t rotate_bytes;
	uint64_t seq;
	char prev[EGR_AUDIT_HASH_HEX + 1];
	uint64_t failures;
	/* Group commit (egr_audit_set_commit): appends are written but synced
	 * by the queue's flush; until then the last durable point is kept so
	 * a failed sync can cut the log back to it. */
	struct egr_commit_member *cm;
	off_t durable_size;
	uint64_t durable_seq;
	char durable_prev[EGR_AUDIT_HASH_HEX + 1];
	/* A writeback error an fsync outside commit_sync() saw (rotation, a
	 * cut-back): the kernel reports it once per file, so the next
	 * commit_sync() must fail on it rather than on its own fsync. */
	int sync_err;
	uint8_t *state_key; /* audit.state's MAC; NULL: unauthenticated */
	size_t state_keylen;
	bool state_tampered;
	bool append_only, append_warned;
	struct egr_audit_anchor *anchor;
	unsigned int anchor_every;
	uint64_t anchored_seq, anchors, anchor_failures;
};

void egr_audit_log_append_only(struct egr_audit *a, bool on);
/* ftruncate + fsync with the append-only flag lifted around it. 0 or -errno. */
int egr_audit_truncate(struct egr_audit *a, off_t size);
void egr_audit_anchor_now(struct egr_audit *a, uint64_t seq, const char *hash, const char *event);
/* After records up to seq are durable: an anchor when one is due. */
void egr_audit_anchor_due(struct egr_audit *a, uint64_t seq, const char *hash);
int egr_audit_state_write(struct egr_audit *a, uint64_t seq, const char *hash);
int egr_audit_state_read_mac(struct egr_audit *a, bool legacy_ok, uint64_t *seq,
			     char hash[EGR_AUDIT_HASH_HEX + 1]);

#endif
