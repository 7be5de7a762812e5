/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Small state files egressd must be able to trust after a restart
 * (audit.state, billing.state): lines of a JSON object whose last member
 * "mac" is the HMAC-SHA-256 of the exact bytes before it (as the sandbox
 * state files). The last line is the state: an update is one appended,
 * fdatasynced line, and the file is kept append-only on disk (FS_APPEND_FL,
 * which only CAP_LINUX_IMMUTABLE can set or clear: a same-uid process
 * without it can neither rewrite, truncate, rename nor unlink the file, and
 * a line it appends fails the MAC). Once appends make the file 4 times the
 * state plus 64 KiB it is replaced whole (the flag lifted around it).
 *
 * A key: the audit key (--audit-key) when one is configured, else
 * <state-dir>/ledger.key, 32 random bytes made at first start, mode 0400.
 */
#ifndef EGR_MACFILE_H
#define EGR_MACFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define EGR_MACFILE_MAX (16u << 20) /* bytes: a file past this is refused */

/*
 * Make obj (not modified; a non-empty object without "mac") and its MAC
 * path's state: appended, or the file replaced when it is due for
 * compaction. FS_APPEND_FL is set (*append_err: 0, or why the flag could
 * not be set or cleared: -EOPNOTSUPP where the file system has no such flag, -EPERM
 * without CAP_LINUX_IMMUTABLE; the write itself goes on). 0 or -errno.
 */
int egr_macfile_write(const char *path, const json_t *obj, const uint8_t *key, size_t keylen,
		      int *append_err);

/*
 * Read and check path: *out is the object without "mac". -ENOENT when
 * missing; -EBADMSG when it is not such a file or the MAC does not match
 * (edited, or another key: *why says which); other -errno.
 */
int egr_macfile_read(const char *path, const uint8_t *key, size_t keylen, json_t **out,
		     const char **why);
/* The same for the bytes of a file (tests, fuzz). */
int egr_macfile_parse(const char *buf, size_t len, const uint8_t *key, size_t keylen,
		      json_t **out, const char **why);

/* Set or clear FS_APPEND_FL on fd. 0, -EOPNOTSUPP (no such flag on this
 * file system), -EPERM (no CAP_LINUX_IMMUTABLE) or another -errno. */
int egr_file_set_append_only(int fd, bool on);
/* Is FS_APPEND_FL set on fd? 1, 0 or -errno. */
int egr_file_is_append_only(int fd);

/* Load path's key, creating it (32 random bytes, 0400) if it does not
 * exist. Free with egr_audit_free_key(). 0 or -errno. */
int egr_key_load_or_create(const char *path, uint8_t **key, size_t *keylen);

#endif
