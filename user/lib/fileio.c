// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "fileio.h"

int egr_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int egr_fsync_parent(const char *path)
{
	char dir[PATH_MAX];
	char *slash;
	int fd, err = 0;

	if (snprintf(dir, sizeof(dir), "%s", path) >= (int)sizeof(dir))
		return -ENAMETOOLONG;
	slash = strrchr(dir, '/');
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		err = -errno;
	close(fd);
	return err;
}

int egr_replace_file(const char *path, const void *buf, size_t len, mode_t mode)
{
	char tmp[PATH_MAX];
	int fd, err;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	err = egr_write_all(fd, buf, len);
	if (!err && fsync(fd) < 0)
		err = -errno;
	close(fd);
	if (!err && rename(tmp, path) < 0)
		err = -errno;
	if (err) {
		unlink(tmp);
		return err;
	}
	return egr_fsync_parent(path);
}

int egr_replace_file_json(const char *path, const json_t *obj, size_t flags, mode_t mode)
{
	char *text = json_dumps(obj, flags);
	size_t len;
	int err;

	if (!text)
		return -ENOMEM;
	len = strlen(text);
	text[len++] = '\n'; /* overwrites the NUL: text is a buffer from here */
	err = egr_replace_file(path, text, len, mode);
	free(text);
	return err;
}

/* --- group commit ------------------------------------------------------------ */

#define COMMIT_MEMBERS 8
#define COMMIT_RING    64 /* batches whose outcome is remembered */

struct egr_commit_member {
	struct egr_commitq *q;
	egr_commit_sync_fn sync;
	egr_commit_after_fn after;
	void *ctx;
	bool used, dirty, after_due;
};

struct egr_commitq {
	struct egr_commit_member m[COMMIT_MEMBERS];
	uint64_t open;          /* the batch new writes go into (from 1) */
	uint64_t done;          /* the last batch flushed */
	bool pending;           /* something was written into batch open */
	int res[COMMIT_RING];   /* outcome of batch b at res[b % COMMIT_RING] */
	int efd;
	struct egr_commit_stats st;
};

int egr_commitq_new(struct egr_commitq **out)
{
	struct egr_commitq *q = calloc(1, sizeof(*q));

	if (!q)
		return -ENOMEM;
	q->open = 1;
	q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	*out = q;
	return 0;
}

void egr_commitq_free(struct egr_commitq *q)
{
	if (!q)
		return;
	egr_commitq_flush(q);
	if (q->efd >= 0)
		close(q->efd);
	free(q);
}

static struct egr_commitq *default_q;

struct egr_commitq *egr_commitq_default(void)
{
	if (!default_q && egr_commitq_new(&default_q))
		default_q = NULL;
	return default_q;
}

int egr_commit_join(struct egr_commitq *q, egr_commit_sync_fn sync, egr_commit_after_fn after,
		    void *ctx, struct egr_commit_member **out)
{
	if (!q || !sync || !out)
		return -EINVAL;
	for (int i = 0; i < COMMIT_MEMBERS; i++) {
		struct egr_commit_member *m = &q->m[i];

		if (m->used)
			continue;
		*m = (struct egr_commit_member){ .q = q, .sync = sync, .after = after, .ctx = ctx,
						 .used = true };
		*out = m;
		return 0;
	}
	return -ENOSPC;
}

void egr_commit_leave(struct egr_commit_member *m)
{
	if (m)
		*m = (struct egr_commit_member){ 0 };
}

void egr_commit_dirty(struct egr_commit_member *m)
{
	struct egr_commitq *q = m->q;
	uint64_t one = 1;

	m->dirty = true;
	if (q->pending)
		return;
	q->pending = true;
	/* A failed write is EAGAIN: the counter is non-zero, the fd readable. */
	if (q->efd >= 0 && write(q->efd, &one, sizeof(one)) < 0)
		return;
}

uint64_t egr_commit_ticket(struct egr_commitq *q)
{
	if (!q || !q->pending)
		return 0;
	q->st.tickets++;
	return q->open;
}

int egr_commit_status(const struct egr_commitq *q, uint64_t ticket)
{
	if (!ticket)
		return 1;
	if (ticket > q->done)
		return 0;
	if (q->done - ticket >= COMMIT_RING)
		return -ETIMEDOUT;
	return q->res[ticket % COMMIT_RING] ? q->res[ticket % COMMIT_RING] : 1;
}

int egr_commitq_sync(struct egr_commitq *q)
{
	uint64_t batch, cnt;
	int err = 0;

	if (!q)
		return 0;
	if (q->efd >= 0 && read(q->efd, &cnt, sizeof(cnt)) < 0)
		cnt = 0; /* EAGAIN: nothing to clear */
	if (!q->pending)
		return 0;
	batch = q->open++;
	q->pending = false;
	/* Every dirty member is synced even when one fails: their writes are
	 * in the same batch and must each be made durable or undone. */
	for (int i = 0; i < COMMIT_MEMBERS; i++) {
		struct egr_commit_member *m = &q->m[i];
		int e;

		if (!m->used || !m->dirty)
			continue;
		m->dirty = false;
		e = m->sync(m->ctx);
		q->st.syncs++;
		m->after_due = !e && m->after;
		err = err ?: e;
	}
	q->res[batch % COMMIT_RING] = err;
	q->done = batch;
	q->st.flushes++;
	if (err)
		q->st.failures++;
	return err;
}

void egr_commitq_after(struct egr_commitq *q)
{
	for (int i = 0; q && i < COMMIT_MEMBERS; i++) {
		struct egr_commit_member *m = &q->m[i];

		if (m->used && m->after_due) {
			m->after_due = false;
			m->after(m->ctx);
		}
	}
}

int egr_commitq_flush(struct egr_commitq *q)
{
	int err = egr_commitq_sync(q);

	egr_commitq_after(q);
	return err;
}

int egr_commitq_fd(const struct egr_commitq *q)
{
	return q ? q->efd : -1;
}

void egr_commitq_stats(const struct egr_commitq *q, struct egr_commit_stats *out)
{
	*out = q->st;
}
