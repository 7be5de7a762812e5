/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The audit log's reading side (audit_read.c): the verifier, the log's file
 * list, HMAC keys and the MAC itself, and the limits the writer (audit.h)
 * shares. It knows nothing of the writer.
 */
#ifndef EGR_AUDIT_READ_H
#define EGR_AUDIT_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EGR_AUDIT_HASH_HEX   64		/* hex chars of a SHA-256 / HMAC-SHA-256 */
#define EGR_AUDIT_MAX_KEY    4096	/* bytes */
#define EGR_AUDIT_MAX_LINE   (16u << 20) /* the verifier rejects longer lines */

struct egr_audit_verify_result {
	bool ok;
	uint64_t records;		/* records that passed every check */
	uint64_t gaps;			/* "audit_gap" records among them */
	uint64_t last_seq;		/* of the last good record */
	char last_hash[EGR_AUDIT_HASH_HEX + 1];
	/* On failure: where and why (line is 1-based; 0 if not about a line). */
	char file[4096];
	size_t line;
	char message[512];
};

/*
 * Verify @files (plain or gzip, oldest first: path.1.gz, path.2.gz, ...,
 * path) as one chain. With @state_path, also check that the chain reaches the
 * state's seq/hash (the state is read before the logs, so verifying a live
 * log is safe). Returns 0 when everything verifies, -EBADMSG when a record is
 * bad (see @res), another negative errno when a file cannot be read (also
 * described in @res).
 */
int egr_audit_verify(const char *const *files, size_t nfiles, const uint8_t *key, size_t keylen,
		     const char *state_path, struct egr_audit_verify_result *res);

/* The same, also against @anchors (audit_anchor.h; sorted in place): every
 * anchored record must be in the chain with the anchor's hash, and the chain
 * must reach the newest anchor's seq (a cut tail fails here even when the
 * state file was rewritten to match). */
/* One anchor of the chain head (audit_anchor.h writes and reads them). */
struct egr_audit_anchor_rec {
	uint64_t seq;
	char hash[EGR_AUDIT_HASH_HEX + 1];
};
int egr_audit_verify_anchored(const char *const *files, size_t nfiles, const uint8_t *key,
			      size_t keylen, const char *state_path,
			      struct egr_audit_anchor_rec *anchors, size_t nanchors,
			      struct egr_audit_verify_result *res);

/*
 * The files of the log at @path in chain order: path.N.gz (or path.N when
 * its compression has not finished) in ascending N, then @path if it exists.
 * Free with egr_audit_free_files().
 */
int egr_audit_list_files(const char *path, char ***files, size_t *n);
void egr_audit_free_files(char **files, size_t n);

/*
 * HMAC-SHA-256 of @data under @key, as 64 lowercase hex digits (the audit
 * chain's MAC, also used for egressd's state files).
 */
int egr_hmac_sha256_hex(const uint8_t *key, size_t keylen, const void *data, size_t len,
			char hex[EGR_AUDIT_HASH_HEX + 1]);

/*
 * Read an HMAC key: the file's exact bytes, 1..EGR_AUDIT_MAX_KEY of them.
 * Refuses (-EPERM) a file that group or other can access, and anything but a
 * regular file. Free with egr_audit_free_key() (wipes it).
 */
int egr_audit_load_key(const char *file, uint8_t **key, size_t *len);
void egr_audit_free_key(uint8_t *key, size_t len);

#endif /* EGR_AUDIT_READ_H */
