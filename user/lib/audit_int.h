/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Private to the audit log's two halves: audit.c (writer) and audit_read.c
 * (reader, verifier). Not part of the library's interface. */
#ifndef EGR_AUDIT_INT_H
#define EGR_AUDIT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <zlib.h>

#include "audit_read.h"

#define ALG_SHA256 "sha256"
#define ALG_HMAC   "hmac-sha256"
#define HASH_HDR   ",\"hash\":\""
#define HASH_HDR_LEN (sizeof(HASH_HDR) - 1)
/* `,"hash":"` + 64 hex + `"}` */
#define SUFFIX_LEN (HASH_HDR_LEN + EGR_AUDIT_HASH_HEX + 2)
#define STATE_MAX  (128u << 10) /* an appended state file is compacted at ~64 KiB */
#define IO_CHUNK   65536

extern const char egr_audit_zero_hash[EGR_AUDIT_HASH_HEX + 1];

struct lreader {
	gzFile gz;
	char *buf;
	size_t pos, end;
	char *line;
	size_t cap;
	bool eof;
};

struct rec {
	uint64_t seq;
	char prev[EGR_AUDIT_HASH_HEX + 1];
	char hash[EGR_AUDIT_HASH_HEX + 1];
	const char *alg;		/* into obj */
	const char *type;		/* into obj; may be NULL */
	const char *reason;		/* into obj; may be NULL */
	json_t *obj;
};

struct rotated {
	uint64_t n;
	bool plain, gz;
};

/* SHA-256 (HMAC-SHA-256 with a key) of a then b, as lowercase hex. */
int egr_audit_hash_parts(const uint8_t *key, size_t keylen, const void *a, size_t alen,
			 const void *b, size_t blen, char hex[EGR_AUDIT_HASH_HEX + 1]);
bool egr_audit_is_hash_hex(const char *s, size_t len);
void egr_audit_rfc3339_now(char *buf, size_t len);
char *egr_audit_strdup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Lines of a plain or gzip file; lr_next: 1 a line, 0 end, <0 error. */
int egr_audit_lr_open(struct lreader *r, const char *file);
void egr_audit_lr_close(struct lreader *r);
int egr_audit_lr_next(struct lreader *r, char **line, size_t *len, bool *nl);

/* Parse and hash-check one line; -EBADMSG with *why on a bad one. */
int egr_audit_rec_parse(const char *line, size_t len, const uint8_t *key, size_t keylen,
			struct rec *r, const char **why);

int egr_audit_state_read(const char *path, uint64_t *seq, char hash[EGR_AUDIT_HASH_HEX + 1]);

/* path.N and path.N.gz next to path, ascending N, one entry per N. */
int egr_audit_scan_rotated(const char *path, struct rotated **out, size_t *nout);

#endif /* EGR_AUDIT_INT_H */
