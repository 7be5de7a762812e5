/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Durable file writes shared by the state files, the audit log and billing. */
#ifndef EGR_FILEIO_H
#define EGR_FILEIO_H

#include <stddef.h>
#include <stdint.h>
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

/*
 * Group commit: many writes, one sync, and no acknowledgement before it.
 *
 * A member (the audit log, say) writes without waiting for the disk and
 * calls egr_commit_dirty(); egr_commitq_flush() then calls each dirty
 * member's sync once - one fsync covers every record written since the last
 * - and after that each member's after() (e.g. a state file that must only
 * ever name durable records, and may lag them). Whoever must not answer before its writes are
 * on disk takes a ticket after writing and waits until egr_commit_status()
 * says 1 (durable) or <0 (its batch failed: the member undid it; answer with
 * an error). egressd flushes from its loop (the queue's fd is readable while
 * something is pending), so requests served in the same loop iteration
 * share one fsync.
 */
struct egr_commitq;
struct egr_commit_member;

/* Make ctx's writes so far durable, or undo them. 0 or -errno. */
typedef int (*egr_commit_sync_fn)(void *ctx);
/* After a successful sync of ctx. */
typedef void (*egr_commit_after_fn)(void *ctx);

struct egr_commit_stats {
	uint64_t flushes;  /* batches made durable or failed */
	uint64_t syncs;    /* member syncs (fsyncs) they took */
	uint64_t failures; /* batches that failed */
	uint64_t tickets;  /* egr_commit_ticket() calls that had to wait */
};

int egr_commitq_new(struct egr_commitq **out);
/* Flushes what is pending first. Members must have left. */
void egr_commitq_free(struct egr_commitq *q);
/* The process's queue (egressd has one loop): created on first use; NULL
 * when out of memory. */
struct egr_commitq *egr_commitq_default(void);

/* Join q; @after may be NULL. 0 or -errno (-ENOSPC past 8 members). */
int egr_commit_join(struct egr_commitq *q, egr_commit_sync_fn sync, egr_commit_after_fn after,
		    void *ctx, struct egr_commit_member **out);
/* Leave: the caller makes its own writes durable first (close does). */
void egr_commit_leave(struct egr_commit_member *m);
/* m wrote something that the next flush must make durable. */
void egr_commit_dirty(struct egr_commit_member *m);

/* The batch that covers everything written so far: 0 when nothing is
 * pending (already durable). */
uint64_t egr_commit_ticket(struct egr_commitq *q);
/* 1 durable, 0 pending, -errno when its batch failed (or is too old to
 * tell: fail closed). */
int egr_commit_status(const struct egr_commitq *q, uint64_t ticket);
/* Sync every dirty member (one batch), then run their after()s. 0, or the
 * first member's -errno. */
int egr_commitq_flush(struct egr_commitq *q);
/* The same in two steps, so that replies waiting for the batch can go out
 * between them: sync (tickets resolved), then after(). */
int egr_commitq_sync(struct egr_commitq *q);
void egr_commitq_after(struct egr_commitq *q);
/* Readable (an eventfd) while something is pending; -1 if none could be
 * made (then flush after every request). */
int egr_commitq_fd(const struct egr_commitq *q);
void egr_commitq_stats(const struct egr_commitq *q, struct egr_commit_stats *out);

#endif /* EGR_FILEIO_H */
