/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Durable file writes shared by the state files, the audit log and billing. */
#ifndef EGR_FILEIO_H
#define EGR_FILEIO_H

#include <stddef.h>
#include <sys/types.h>
#include <jansson.h>

/* write() until all of buf is written (EINTR retried). 0 or -errno. */
int egr_write_all(int fd, const void *buf, size_t len);

/* fsync the directory holding path, so a create, rename or unlink in it
 * survives a crash. 0 or -errno. */
int egr_fsync_parent(const char *path);

/* Replace path with buf: write path.tmp, fsync, rename over path, fsync the
 * directory. A reader (or a crash) sees the old content or the new, never a
 * mix. 0 or -errno; on error path is untouched and path.tmp removed. */
int egr_replace_file(const char *path, const void *buf, size_t len, mode_t mode);

/* The same for a JSON document (json_dumps flags) and a final newline. */
int egr_replace_file_json(const char *path, const json_t *obj, size_t flags, mode_t mode);

#endif /* EGR_FILEIO_H */
