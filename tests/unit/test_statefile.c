// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The sandbox state files on a commit queue (registry/statefile.c): in place
 * at once, durable at the queue's flush. */
#include <errno.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "fileio.h"
#include "registry/statefile.h"

struct fixture {
	char dir[64];
	struct egr_statedir st;
	struct egr_commitq *q;
};

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/egr-statefile-XXXXXX");
	if (!mkdtemp(f->dir) || egr_state_open(&f->st, f->dir, false) || egr_commitq_new(&f->q))
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	egr_state_close(&f->st);
	egr_commitq_free(f->q);
	nftw(f->dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

static int save(struct fixture *f, uint32_t id)
{
	struct egr_held h = { .id = id, .tenant_id = 1, .cgroup_id = 100 + id,
			      .cgroup = "/sys/fs/cgroup/x", .state = EGR_HELD_DETACHED,
			      .since = 1 };

	snprintf(h.reason, sizeof(h.reason), "test");
	return egr_state_save_held(&f->st, &h);
}

static bool file_exists(struct fixture *f, uint32_t id)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/sandboxes/%u.json", f->dir, id);
	return access(path, F_OK) == 0;
}

static void test_in_place_at_once_durable_at_flush(void **state)
{
	struct fixture *f = *state;
	char why[256];
	uint64_t ticket;
	json_t *o;

	assert_int_equal(egr_state_set_commit(&f->st, f->q), 0);
	assert_int_equal(save(f, 7), 0);
	/* A restart after egressd's own crash reads it now (the page cache). */
	o = egr_state_read(&f->st, 7, why, sizeof(why), NULL, NULL);
	assert_non_null(o);
	assert_string_equal(json_string_value(json_object_get(o, "state")), "detached");
	json_decref(o);
	/* Not durable yet: the reply must wait for a batch. */
	assert_int_equal(f->st.npend, 1);
	assert_true(f->st.dir_dirty);
	ticket = egr_commit_ticket(f->q);
	assert_true(ticket != 0);
	assert_int_equal(egr_commit_status(f->q, ticket), 0);
	assert_int_equal(egr_commitq_flush(f->q), 0);
	assert_int_equal(egr_commit_status(f->q, ticket), 1);
	assert_int_equal(f->st.npend, 0);
	assert_false(f->st.dir_dirty);
}

static void test_rewrite_and_drop_in_one_batch(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(egr_state_set_commit(&f->st, f->q), 0);
	assert_int_equal(save(f, 3), 0);
	assert_int_equal(save(f, 3), 0); /* the older version is no longer linked */
	assert_int_equal(f->st.npend, 1);
	assert_int_equal(save(f, 4), 0);
	egr_state_drop(&f->st, 4); /* gone: nothing of it to sync */
	assert_int_equal(f->st.npend, 1);
	assert_false(file_exists(f, 4));
	assert_true(file_exists(f, 3));
	assert_int_equal(egr_commitq_flush(f->q), 0);
	assert_int_equal(f->st.npend, 0);
}

static void test_many_files_synced_before_the_limit(void **state)
{
	struct fixture *f = *state;
	struct egr_commit_stats cs;

	assert_int_equal(egr_state_set_commit(&f->st, f->q), 0);
	for (uint32_t id = 1; id <= 65; id++)
		assert_int_equal(save(f, id), 0);
	/* 64 held open at most: the 65th write synced the first 64 itself. */
	assert_int_equal(f->st.npend, 1);
	for (uint32_t id = 1; id <= 65; id++)
		assert_true(file_exists(f, id));
	assert_int_equal(egr_commitq_flush(f->q), 0);
	egr_commitq_stats(f->q, &cs);
	assert_int_equal(cs.failures, 0);
	assert_int_equal(f->st.npend, 0);
}

static void test_without_a_queue_durable_at_once(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(save(f, 9), 0);
	assert_int_equal(f->st.npend, 0);
	assert_int_equal(f->st.sbdir_fd, -1);
	assert_int_equal(egr_commit_ticket(f->q), 0); /* nothing to wait for */
	assert_true(file_exists(f, 9));
}

static void test_close_syncs_and_leaves(void **state)
{
	struct fixture *f = *state;
	struct egr_commit_stats before, after;

	assert_int_equal(egr_state_set_commit(&f->st, f->q), 0);
	assert_int_equal(egr_state_set_commit(&f->st, f->q), -EINVAL); /* once */
	assert_int_equal(save(f, 5), 0);
	egr_state_close(&f->st);
	assert_int_equal(f->st.npend, 0);
	assert_null(f->st.cm);
	egr_commitq_stats(f->q, &before);
	assert_int_equal(egr_commitq_flush(f->q), 0); /* the pending batch: no member left */
	egr_commitq_stats(f->q, &after);
	assert_int_equal(after.syncs, before.syncs);
	assert_true(file_exists(f, 5));
	assert_int_equal(egr_state_open(&f->st, f->dir, false), 0); /* for teardown */
}

/* Write an unsigned (pre-state.key) file for id. */
static void write_unsigned(struct fixture *f, uint32_t id)
{
	char path[128], body[64];

	snprintf(path, sizeof(path), "%s/sandboxes/%u.json", f->dir, id);
	snprintf(body, sizeof(body), "{\"id\":%u,\"cgroup\":\"/x\"}\n", id);
	assert_int_equal(egr_replace_file(path, body, strlen(body), 0600), 0);
}

static bool reads_unsigned(struct fixture *f, uint32_t id)
{
	char why[512];
	bool legacy = false;
	int err;
	json_t *o = egr_state_read(&f->st, id, why, sizeof(why), &err, &legacy);
	bool ok = o && legacy;

	json_decref(o);
	return ok;
}

/* The window for unsigned files: open at the start that makes the key,
 * open again after a start that did not finish adoption, closed by
 * egr_state_upgrade_done; reopened by pins of an egressd that signs
 * nothing (ABI version 1), never by a key alone. */
static void test_unsigned_window(void **state)
{
	struct fixture *f = *state;

	write_unsigned(f, 9);
	assert_true(f->st.key_new && f->st.legacy_ok);
	assert_true(reads_unsigned(f, 9));
	/* A start that stops before adoption ends: still open. */
	egr_state_close(&f->st);
	assert_int_equal(egr_state_open(&f->st, f->dir, false), 0);
	assert_false(f->st.key_new);
	assert_true(f->st.legacy_ok && reads_unsigned(f, 9));
	assert_int_equal(egr_state_upgrade_done(&f->st), 0);
	assert_false(f->st.legacy_ok || reads_unsigned(f, 9));
	/* The next start with the key: a missing MAC is tampering. */
	egr_state_close(&f->st);
	assert_int_equal(egr_state_open(&f->st, f->dir, false), 0);
	assert_false(f->st.legacy_ok || reads_unsigned(f, 9));
	/* Pins of an ABI version 1 egressd (a rollback, then the upgrade
	 * again): its files are unsigned although the key exists. */
	egr_state_close(&f->st);
	assert_int_equal(egr_state_open(&f->st, f->dir, true), 0);
	assert_true(f->st.legacy_ok && reads_unsigned(f, 9));
	assert_int_equal(egr_state_upgrade_done(&f->st), 0);
	assert_int_equal(egr_state_upgrade_done(&f->st), 0); /* once is enough */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_in_place_at_once_durable_at_flush, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_rewrite_and_drop_in_one_batch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_files_synced_before_the_limit, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_without_a_queue_durable_at_once, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_close_syncs_and_leaves, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unsigned_window, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
