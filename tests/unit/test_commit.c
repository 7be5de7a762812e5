// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Group commit: the queue in user/lib/fileio.c and the audit log on it. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "audit.h"
#include "fileio.h"

/* --- the queue with members that count and fail on demand -------------------- */

struct counter {
	int syncs, afters;
	int fail; /* the next sync returns this */
};

static int counter_sync(void *ctx)
{
	struct counter *c = ctx;
	int e = c->fail;

	c->syncs++;
	c->fail = 0;
	return e;
}

static void counter_after(void *ctx)
{
	struct counter *c = ctx;

	c->afters++;
}

static bool fd_readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static void test_nothing_pending(void **state)
{
	struct egr_commitq *q;
	struct egr_commit_stats st;

	(void)state;
	assert_int_equal(egr_commitq_new(&q), 0);
	assert_true(egr_commitq_fd(q) >= 0);
	assert_false(fd_readable(egr_commitq_fd(q)));
	/* Nothing written: nothing to wait for, a flush syncs nothing. */
	assert_int_equal(egr_commit_ticket(q), 0);
	assert_int_equal(egr_commit_status(q, 0), 1);
	assert_int_equal(egr_commitq_flush(q), 0);
	egr_commitq_stats(q, &st);
	assert_int_equal(st.flushes, 0);
	assert_int_equal(st.syncs, 0);
	egr_commitq_free(q);
}

/* Many writes of several members before a flush: one sync each, and every
 * ticket taken in between resolves at that one flush. */
static void test_one_sync_per_batch(void **state)
{
	struct counter a = { 0 }, b = { 0 }, idle = { 0 };
	struct egr_commit_member *ma, *mb, *mi;
	struct egr_commitq *q;
	struct egr_commit_stats st;
	uint64_t t[10];

	(void)state;
	assert_int_equal(egr_commitq_new(&q), 0);
	assert_int_equal(egr_commit_join(q, counter_sync, counter_after, &a, &ma), 0);
	assert_int_equal(egr_commit_join(q, counter_sync, NULL, &b, &mb), 0);
	assert_int_equal(egr_commit_join(q, counter_sync, counter_after, &idle, &mi), 0);
	for (int i = 0; i < 10; i++) {
		egr_commit_dirty(i % 2 ? ma : mb);
		t[i] = egr_commit_ticket(q);
		assert_true(t[i] > 0);
		assert_int_equal(egr_commit_status(q, t[i]), 0); /* not yet */
	}
	assert_true(fd_readable(egr_commitq_fd(q)));
	assert_int_equal(egr_commitq_flush(q), 0);
	assert_false(fd_readable(egr_commitq_fd(q)));
	for (int i = 0; i < 10; i++)
		assert_int_equal(egr_commit_status(q, t[i]), 1);
	assert_int_equal(a.syncs, 1);
	assert_int_equal(b.syncs, 1);
	assert_int_equal(idle.syncs, 0); /* not dirty: not synced */
	assert_int_equal(a.afters, 1);
	assert_int_equal(idle.afters, 0);
	egr_commitq_stats(q, &st);
	assert_int_equal(st.flushes, 1);
	assert_int_equal(st.syncs, 2);
	assert_int_equal(st.failures, 0);
	/* Durable now: a new ticket waits for nothing. */
	assert_int_equal(egr_commit_ticket(q), 0);
	egr_commit_leave(ma);
	egr_commit_leave(mb);
	egr_commit_leave(mi);
	egr_commitq_free(q);
}

/* A failed sync fails exactly its batch's tickets (fail closed), runs no
 * after() for the failed member, and the next batch is judged on its own. */
static void test_failed_batch(void **state)
{
	struct counter a = { .fail = -EIO }, b = { 0 };
	struct egr_commit_member *ma, *mb;
	struct egr_commitq *q;
	uint64_t t1, t2;

	(void)state;
	assert_int_equal(egr_commitq_new(&q), 0);
	assert_int_equal(egr_commit_join(q, counter_sync, counter_after, &a, &ma), 0);
	assert_int_equal(egr_commit_join(q, counter_sync, counter_after, &b, &mb), 0);
	egr_commit_dirty(ma);
	egr_commit_dirty(mb);
	t1 = egr_commit_ticket(q);
	assert_int_equal(egr_commitq_flush(q), -EIO);
	assert_int_equal(egr_commit_status(q, t1), -EIO);
	assert_int_equal(b.syncs, 1); /* synced even though a failed */
	assert_int_equal(a.afters, 0);
	assert_int_equal(b.afters, 1);

	egr_commit_dirty(ma);
	t2 = egr_commit_ticket(q);
	assert_true(t2 > t1);
	assert_int_equal(egr_commitq_flush(q), 0);
	assert_int_equal(egr_commit_status(q, t2), 1);
	assert_int_equal(egr_commit_status(q, t1), -EIO); /* still failed */
	egr_commit_leave(ma);
	egr_commit_leave(mb);
	egr_commitq_free(q);
}

/* sync and after in two steps (replies go out between them); a ticket too
 * old to remember is a failure, never a success. */
static void test_two_steps_and_old_tickets(void **state)
{
	struct counter a = { 0 };
	struct egr_commit_member *ma;
	struct egr_commitq *q;
	uint64_t first;

	(void)state;
	assert_int_equal(egr_commitq_new(&q), 0);
	assert_int_equal(egr_commit_join(q, counter_sync, counter_after, &a, &ma), 0);
	egr_commit_dirty(ma);
	first = egr_commit_ticket(q);
	assert_int_equal(egr_commitq_sync(q), 0);
	assert_int_equal(egr_commit_status(q, first), 1);
	assert_int_equal(a.afters, 0);
	egr_commitq_after(q);
	assert_int_equal(a.afters, 1);
	egr_commitq_after(q); /* once per sync */
	assert_int_equal(a.afters, 1);
	for (int i = 0; i < 100; i++) {
		egr_commit_dirty(ma);
		assert_int_equal(egr_commitq_flush(q), 0);
	}
	assert_int_equal(egr_commit_status(q, first), -ETIMEDOUT);
	egr_commit_leave(ma);
	egr_commitq_free(q);
}

static void test_join_limits(void **state)
{
	struct egr_commit_member *m[9];
	struct counter c = { 0 };
	struct egr_commitq *q;

	(void)state;
	assert_int_equal(egr_commitq_new(&q), 0);
	assert_int_equal(egr_commit_join(q, NULL, NULL, &c, &m[0]), -EINVAL);
	for (int i = 0; i < 8; i++)
		assert_int_equal(egr_commit_join(q, counter_sync, NULL, &c, &m[i]), 0);
	assert_int_equal(egr_commit_join(q, counter_sync, NULL, &c, &m[8]), -ENOSPC);
	egr_commit_leave(m[3]);
	assert_int_equal(egr_commit_join(q, counter_sync, NULL, &c, &m[8]), 0);
	for (int i = 0; i < 9; i++)
		if (i != 3)
			egr_commit_leave(m[i]);
	egr_commitq_free(q);
}

/* --- the audit log on a queue ------------------------------------------------ */

struct fx {
	char dir[64];
	char log[128];
	char state[128];
};

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	strcpy(f->dir, "/tmp/egr-commit-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->log, sizeof(f->log), "%s/audit.log", f->dir);
	snprintf(f->state, sizeof(f->state), "%s/audit.state", f->dir);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	nftw(f->dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

static json_t *rec(int i)
{
	json_t *o = json_pack("{s:s, s:i}", "type", "test", "i", i);

	assert_non_null(o);
	return o;
}

static void append(struct egr_audit *a, int i)
{
	json_t *o = rec(i);

	assert_int_equal(egr_audit_append(a, o), 0);
	json_decref(o);
}

static int verify(struct fx *f, struct egr_audit_verify_result *res)
{
	char **files;
	size_t n;
	int ret;

	assert_int_equal(egr_audit_list_files(f->log, &files, &n), 0);
	ret = egr_audit_verify((const char *const *)files, n, NULL, 0, f->state, res);
	if (ret)
		print_message("verify: %s:%zu: %s\n", res->file, res->line, res->message);
	egr_audit_free_files(files, n);
	return ret;
}

static uint64_t state_seq(struct fx *f)
{
	char buf[256] = { 0 };
	json_t *o;
	uint64_t s;
	int fd = open(f->state, O_RDONLY);

	assert_true(fd >= 0);
	assert_true(read(fd, buf, sizeof(buf) - 1) > 0);
	close(fd);
	o = json_loads(buf, 0, NULL);
	assert_non_null(o);
	s = (uint64_t)json_integer_value(json_object_get(o, "seq"));
	json_decref(o);
	return s;
}

/* Records appended on a queue are in the log at once, the state file names
 * only flushed ones, one flush covers them all and the chain verifies. */
static void test_audit_group_commit(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	struct egr_commit_stats st;
	struct egr_commitq *q;
	struct egr_audit *a;
	uint64_t t;

	assert_int_equal(egr_commitq_new(&q), 0);
	assert_int_equal(egr_audit_open(&a, f->log, f->state, NULL, 0, 0), 0);
	append(a, 0); /* before the queue: synced and in the state at once */
	assert_int_equal(state_seq(f), 1);
	assert_int_equal(egr_audit_set_commit(a, q), 0);
	assert_int_equal(egr_audit_set_commit(a, q), -EINVAL);
	for (int i = 1; i <= 20; i++)
		append(a, i);
	assert_int_equal(egr_audit_seq(a), 21);
	t = egr_commit_ticket(q);
	assert_true(t > 0);
	assert_int_equal(egr_commit_status(q, t), 0);
	assert_int_equal(state_seq(f), 1); /* names only durable records */
	assert_int_equal(egr_commitq_flush(q), 0);
	assert_int_equal(egr_commit_status(q, t), 1);
	assert_int_equal(state_seq(f), 21);
	egr_commitq_stats(q, &st);
	assert_int_equal(st.syncs, 1); /* twenty records, one fsync */
	assert_int_equal(verify(f, &res), 0);
	assert_int_equal(res.records, 21);

	/* Pending records at close are synced by it. */
	append(a, 22);
	egr_audit_close(a);
	assert_int_equal(state_seq(f), 22);
	assert_int_equal(verify(f, &res), 0);
	assert_int_equal(res.records, 22);
	egr_commitq_free(q);
}

/* Rotation in the middle of a batch: the old file is fsynced by the
 * rotation, the chain runs on across files. */
static void test_audit_group_commit_rotation(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	struct egr_commitq *q;
	struct egr_audit *a;

	assert_int_equal(egr_commitq_new(&q), 0);
	assert_int_equal(egr_audit_open(&a, f->log, f->state, NULL, 0, 600), 0);
	assert_int_equal(egr_audit_set_commit(a, q), 0);
	for (int i = 0; i < 30; i++) {
		append(a, i);
		if (i % 7 == 6)
			assert_int_equal(egr_commitq_flush(q), 0);
	}
	assert_int_equal(egr_commitq_flush(q), 0);
	assert_int_equal(egr_audit_failures(a), 0);
	egr_audit_close(a);
	assert_int_equal(verify(f, &res), 0);
	assert_int_equal(res.records, 30);
	egr_commitq_free(q);
}

/* A batch that fails anywhere is acknowledged to no one, even though the
 * audit member's own fsync succeeded: its records stay (durable, never
 * acknowledged), the chain goes on and verifies, the state follows. (An
 * fsync of the log itself failing, which cuts the batch off again, cannot
 * be provoked on a healthy file system without a fault-injecting device.) */
static void test_audit_batch_failure_not_acknowledged(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	struct counter bad = { .fail = -EIO };
	struct egr_commit_member *mb;
	struct egr_commitq *q;
	struct egr_audit *a;
	uint64_t t;

	assert_int_equal(egr_commitq_new(&q), 0);
	assert_int_equal(egr_audit_open(&a, f->log, f->state, NULL, 0, 0), 0);
	assert_int_equal(egr_audit_set_commit(a, q), 0);
	append(a, 1);
	assert_int_equal(egr_commitq_flush(q), 0);
	assert_int_equal(egr_commit_join(q, counter_sync, NULL, &bad, &mb), 0);
	append(a, 2);
	append(a, 3);
	egr_commit_dirty(mb);
	t = egr_commit_ticket(q);
	assert_int_equal(egr_commitq_flush(q), -EIO);
	assert_int_equal(egr_commit_status(q, t), -EIO);
	egr_commit_leave(mb);
	assert_int_equal(egr_audit_seq(a), 3);
	assert_int_equal(state_seq(f), 3);
	append(a, 4);
	assert_int_equal(egr_commitq_flush(q), 0);
	egr_audit_close(a);
	assert_int_equal(verify(f, &res), 0);
	assert_int_equal(res.records, 4);
	egr_commitq_free(q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nothing_pending),
		cmocka_unit_test(test_one_sync_per_batch),
		cmocka_unit_test(test_failed_batch),
		cmocka_unit_test(test_two_steps_and_old_tickets),
		cmocka_unit_test(test_join_limits),
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
		T(test_audit_group_commit),
		T(test_audit_group_commit_rotation),
		T(test_audit_batch_failure_not_acknowledged),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
