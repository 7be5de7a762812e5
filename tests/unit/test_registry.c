// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The registry's set (user/egressd/registry/registry.c): hashed lookups by
 * sandbox id and by cgroup id through growth and removal, iteration, and
 * removal of the sandbox in hand while iterating.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "registry/registry_impl.h"

static struct egr_sb *mk(uint32_t id, uint64_t cgid)
{
	struct egr_sb *sb = calloc(1, sizeof(*sb));
	char path[64];

	assert_non_null(sb);
	snprintf(path, sizeof(path), "/sys/fs/cgroup/t/%u", id);
	sb->cgroup = strdup(path);
	assert_non_null(sb->cgroup);
	sb->id = id;
	sb->cgroup_id = cgid;
	return sb;
}

/* Cgroup ids far from sandbox ids, and sharing low bits (one bucket if
 * the hash were the identity). */
static uint64_t cg_of(uint32_t id)
{
	return ((uint64_t)id << 32) | 0x1000;
}

static void test_lookup_by_id_and_cgroup_id(void **state)
{
	struct egr_registry *r = egr_reg_alloc();
	const uint32_t n = 1000; /* past several rehashes */

	assert_non_null(r);
	for (uint32_t id = 1; id <= n; id++)
		assert_int_equal(egr_reg_add(r, mk(id, cg_of(id))), 0);
	assert_int_equal(egr_reg_count(r), n);
	for (uint32_t id = 1; id <= n; id++) {
		struct egr_sb *sb = egr_reg_by_id(r, id);

		assert_non_null(sb);
		assert_int_equal(sb->id, id);
		assert_ptr_equal(egr_reg_by_cgroup_id(r, cg_of(id)), sb);
		assert_ptr_equal(egr_reg_find(r, NULL, id), sb);
	}
	assert_null(egr_reg_by_id(r, n + 1));
	assert_null(egr_reg_by_id(r, 0));
	assert_null(egr_reg_by_cgroup_id(r, cg_of(n + 1)));
	assert_null(egr_reg_by_cgroup_id(r, 0x1000));
	/* By path: the cgroup string (no such path: compared as given). */
	assert_ptr_equal(egr_reg_find(r, "/sys/fs/cgroup/t/7", 0), egr_reg_by_id(r, 7));
	assert_null(egr_reg_find(r, "/sys/fs/cgroup/t/7/child", 0));
	assert_true(egr_reg_confines(r, "/sys/fs/cgroup/t/7/child"));
	assert_false(egr_reg_confines(r, "/sys/fs/cgroup/t/70000"));
	/* Every path through growth: the path table is rehashed with the others. */
	for (uint32_t id = 1; id <= n; id++) {
		char path[64];

		snprintf(path, sizeof(path), "/sys/fs/cgroup/t/%u", id);
		assert_ptr_equal(egr_reg_find(r, path, 0), egr_reg_by_id(r, id));
	}
	/* Confined: the cgroup and what lies below it at a '/'; not its parent,
	 * nor a sibling whose name starts with its name. */
	assert_true(egr_reg_confines(r, "/sys/fs/cgroup/t/7"));
	assert_true(egr_reg_confines(r, "/sys/fs/cgroup/t/7/a/b/c"));
	assert_false(egr_reg_confines(r, "/sys/fs/cgroup/t"));
	assert_false(egr_reg_confines(r, "/sys/fs/cgroup/t/7x"));
	assert_false(egr_reg_confines(r, "/sys/fs/cgroup/t/"));
	assert_false(egr_reg_confines(r, ""));
	/* Removed: neither found by path nor confining. */
	{
		struct egr_sb *sb = egr_reg_by_id(r, 7);

		egr_reg_remove(r, sb);
		egr_sb_free(sb);
	}
	assert_null(egr_reg_find(r, "/sys/fs/cgroup/t/7", 0));
	assert_false(egr_reg_confines(r, "/sys/fs/cgroup/t/7/child"));
	assert_ptr_equal(egr_reg_find(r, "/sys/fs/cgroup/t/8", 0), egr_reg_by_id(r, 8));
	egr_reg_free(r);
}

static void test_tenant_quota_count(void **state)
{
	struct egr_registry *r = egr_reg_alloc();
	struct egr_sb *a = mk(1, 10), *b = mk(2, 20);

	/* What reg_quota_sync_tenant skips its scan by: set before the add
	 * counts at the add, and the remove uncounts it. */
	a->tenant_quota_bytes = 1000;
	assert_int_equal(egr_reg_add(r, a), 0);
	assert_int_equal(egr_reg_add(r, b), 0);
	assert_int_equal(r->tenant_quota_sbs, 1);
	egr_reg_remove(r, a);
	assert_int_equal(r->tenant_quota_sbs, 0);
	egr_sb_free(a);
	egr_reg_remove(r, b);
	assert_int_equal(r->tenant_quota_sbs, 0);
	egr_sb_free(b);
	egr_reg_free(r);
}

static void test_duplicate_id_refused(void **state)
{
	struct egr_registry *r = egr_reg_alloc();
	struct egr_sb *a = mk(5, 50), *b = mk(5, 51);

	assert_int_equal(egr_reg_add(r, a), 0);
	assert_int_equal(egr_reg_add(r, b), -EEXIST);
	assert_ptr_equal(egr_reg_by_id(r, 5), a);
	assert_null(egr_reg_by_cgroup_id(r, 51));
	assert_int_equal(egr_reg_count(r), 1);
	egr_sb_free(b);
	egr_reg_free(r);
}

static void test_remove_keeps_others_found(void **state)
{
	struct egr_registry *r = egr_reg_alloc();
	const uint32_t n = 300;

	for (uint32_t id = 1; id <= n; id++)
		assert_int_equal(egr_reg_add(r, mk(id, cg_of(id))), 0);
	/* Remove every third one: the last fills each gap. */
	for (uint32_t id = 3; id <= n; id += 3) {
		struct egr_sb *sb = egr_reg_by_id(r, id);

		egr_reg_remove(r, sb);
		egr_sb_free(sb);
	}
	assert_int_equal(egr_reg_count(r), n - n / 3);
	for (uint32_t id = 1; id <= n; id++) {
		if (id % 3 == 0) {
			assert_null(egr_reg_by_id(r, id));
			assert_null(egr_reg_by_cgroup_id(r, cg_of(id)));
		} else {
			assert_non_null(egr_reg_by_id(r, id));
			assert_ptr_equal(egr_reg_by_cgroup_id(r, cg_of(id)), egr_reg_by_id(r, id));
		}
	}
	/* An id freed is free again. */
	assert_int_equal(egr_reg_add(r, mk(3, cg_of(3))), 0);
	assert_int_equal(egr_reg_by_id(r, 3)->cgroup_id, cg_of(3));
	egr_reg_free(r);
}

static void test_iteration_sees_each_once(void **state)
{
	struct egr_registry *r = egr_reg_alloc();
	struct egr_reg_iter it = { 0 };
	unsigned seen[65] = { 0 }, total = 0;

	assert_null(egr_reg_next(r, &it)); /* empty */
	for (uint32_t id = 1; id <= 64; id++)
		assert_int_equal(egr_reg_add(r, mk(id, cg_of(id))), 0);
	memset(&it, 0, sizeof(it));
	for (struct egr_sb *sb; (sb = egr_reg_next(r, &it));) {
		seen[sb->id]++;
		total++;
	}
	assert_int_equal(total, 64);
	for (uint32_t id = 1; id <= 64; id++)
		assert_int_equal(seen[id], 1);
	egr_reg_free(r);
}

/* What a detach from inside a loop does (lifetime, adoption). */
static void test_remove_current_while_iterating(void **state)
{
	struct egr_registry *r = egr_reg_alloc();
	struct egr_reg_iter it = { 0 };
	unsigned seen[41] = { 0 }, total = 0;

	for (uint32_t id = 1; id <= 40; id++)
		assert_int_equal(egr_reg_add(r, mk(id, cg_of(id))), 0);
	for (struct egr_sb *sb; (sb = egr_reg_next(r, &it));) {
		seen[sb->id]++;
		total++;
		if (sb->id % 2 == 0 || sb->id == 40 || sb->id == 1) {
			egr_reg_remove(r, sb);
			egr_sb_free(sb);
		}
	}
	/* Every sandbox seen exactly once, removed or not. */
	assert_int_equal(total, 40);
	for (uint32_t id = 1; id <= 40; id++)
		assert_int_equal(seen[id], 1);
	assert_int_equal(egr_reg_count(r), 19); /* odd ones but 1 */
	assert_null(egr_reg_by_id(r, 1));
	assert_non_null(egr_reg_by_id(r, 3));
	egr_reg_free(r);
}

static int remove_all(struct egr_sb *sb, void *ctx)
{
	struct egr_registry *r = ctx;

	egr_reg_remove(r, sb);
	egr_sb_free(sb);
	return 0;
}

static int stop_at_5(struct egr_sb *sb, void *ctx)
{
	(*(unsigned *)ctx)++;
	return sb->id == 5 ? -EINTR : 0;
}

static void test_foreach(void **state)
{
	struct egr_registry *r = egr_reg_alloc();
	unsigned calls = 0;

	for (uint32_t id = 1; id <= 10; id++)
		assert_int_equal(egr_reg_add(r, mk(id, cg_of(id))), 0);
	assert_int_equal(egr_reg_foreach(r, stop_at_5, &calls), -EINTR);
	assert_int_equal(calls, 5); /* in the order added */
	assert_int_equal(egr_reg_foreach(r, remove_all, r), 0);
	assert_int_equal(egr_reg_count(r), 0);
	assert_null(egr_reg_by_id(r, 1));
	egr_reg_free(r);
}

/* The lifetime checks' sweep (a share of the set each second). */
#define SWEEP_N 2500
#define SWEEP_SHARE 500

static void test_sweep_visits_all_a_share_at_a_time(void **state)
{
	struct egr_registry *r = egr_reg_alloc();
	static unsigned seen[SWEEP_N + 1];
	uint32_t ids[SWEEP_N + 10];
	size_t cursor = 7;

	assert_int_equal(egr_reg_sweep(r, &cursor, SWEEP_SHARE, ids), 0);
	assert_int_equal(cursor, 0);
	for (uint32_t id = 1; id <= SWEEP_N; id++)
		assert_int_equal(egr_reg_add(r, mk(id, cg_of(id))), 0);
	memset(seen, 0, sizeof(seen));
	for (int turn = 0; turn < SWEEP_N / SWEEP_SHARE; turn++) {
		assert_int_equal(egr_reg_sweep(r, &cursor, SWEEP_SHARE, ids), SWEEP_SHARE);
		for (size_t i = 0; i < SWEEP_SHARE; i++)
			seen[ids[i]]++;
	}
	for (uint32_t id = 1; id <= SWEEP_N; id++)
		assert_int_equal(seen[id], 1);
	/* Round again from the start; a share above the count is all once. */
	assert_int_equal(egr_reg_sweep(r, &cursor, 1, ids), 1);
	assert_int_equal(ids[0], 1);
	assert_int_equal(egr_reg_sweep(r, &cursor, SWEEP_N + 10, ids), SWEEP_N);
	memset(seen, 0, sizeof(seen));
	for (size_t i = 0; i < SWEEP_N; i++)
		seen[ids[i]]++;
	for (uint32_t id = 1; id <= SWEEP_N; id++)
		assert_int_equal(seen[id], 1);
	/* A cursor past the end (the set shrank since) starts over. */
	cursor = SWEEP_N - 1;
	for (uint32_t id = SWEEP_N; id > SWEEP_N - 100; id--) {
		struct egr_sb *sb = egr_reg_by_id(r, id);

		egr_reg_remove(r, sb);
		egr_sb_free(sb);
	}
	assert_int_equal(egr_reg_sweep(r, &cursor, 3, ids), 3);
	assert_int_equal(ids[0], 1);
	assert_int_equal(cursor, 3);
	egr_reg_free(r);
}

/* Removals between shares (a detach moves the last one into its gap):
 * after them, every sandbox left is visited within a round and a share. */
static void test_sweep_after_removals_leaves_none_out(void **state)
{
	struct egr_registry *r = egr_reg_alloc();
	static int last[SWEEP_N + 1];
	uint32_t ids[SWEEP_SHARE];
	size_t cursor = 0, left;
	int turns;

	for (uint32_t id = 1; id <= SWEEP_N; id++)
		assert_int_equal(egr_reg_add(r, mk(id, cg_of(id))), 0);
	assert_int_equal(egr_reg_sweep(r, &cursor, SWEEP_SHARE, ids), SWEEP_SHARE);
	assert_int_equal(egr_reg_sweep(r, &cursor, SWEEP_SHARE, ids), SWEEP_SHARE);
	/* Behind the cursor and ahead of it, and the last ones (which move). */
	for (uint32_t id = 1; id <= SWEEP_N; id++) {
		struct egr_sb *sb = egr_reg_by_id(r, id);

		if (id % 7 == 0 || id > SWEEP_N - 50) {
			egr_reg_remove(r, sb);
			egr_sb_free(sb);
		}
	}
	left = egr_reg_count(r);
	turns = (int)((left + SWEEP_SHARE - 1) / SWEEP_SHARE) + 1;
	memset(last, -1, sizeof(last));
	for (int turn = 0; turn < 3 * turns; turn++) {
		size_t k = egr_reg_sweep(r, &cursor, SWEEP_SHARE, ids);

		assert_int_equal(k, SWEEP_SHARE);
		for (size_t i = 0; i < k; i++) {
			assert_non_null(egr_reg_by_id(r, ids[i])); /* never a removed one */
			last[ids[i]] = turn;
		}
		if (turn < turns - 1)
			continue;
		/* Every one left was seen in the last `turns` shares. */
		for (uint32_t id = 1; id <= SWEEP_N; id++)
			if (egr_reg_by_id(r, id))
				assert_true(last[id] > turn - turns);
	}
	egr_reg_free(r);
}

static void test_tenants_and_held(void **state)
{
	struct egr_registry *r = egr_reg_alloc();
	bool added;

	assert_int_equal(egr_reg_tenant_intern(r, "acme", &added), 1);
	assert_true(added);
	assert_int_equal(egr_reg_tenant_intern(r, "globex", &added), 2);
	assert_int_equal(egr_reg_tenant_intern(r, "acme", &added), 1);
	assert_false(added);
	assert_int_equal(egr_reg_tenant_count(r), 2);
	assert_string_equal(egr_reg_tenant_name(r, 2), "globex");
	assert_null(egr_reg_tenant_name(r, 0));
	assert_null(egr_reg_tenant_name(r, 3));

	assert_non_null(egr_reg_held_add(r, 7, 1, 70, "/sys/fs/cgroup/h/7", EGR_HELD_DETACHED,
					 "detached", 1));
	assert_non_null(egr_reg_held_add(r, 8, 1, 80, NULL, EGR_HELD_TAMPERED, "x", 1));
	assert_int_equal(egr_reg_held_total(r), 2);
	assert_int_equal(egr_reg_held_count(r, EGR_HELD_TAMPERED), 1);
	assert_int_equal(egr_reg_find_held(r, NULL, 8)->cgroup_id, 80);
	assert_true(egr_reg_confines(r, "/sys/fs/cgroup/h/7/x"));
	egr_reg_held_remove(r, egr_reg_find_held(r, NULL, 7));
	assert_null(egr_reg_find_held(r, NULL, 7));
	assert_int_equal(egr_reg_held_at(r, 0)->id, 8);
	assert_false(egr_reg_confines(r, "/sys/fs/cgroup/h/7/x"));
	egr_reg_free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lookup_by_id_and_cgroup_id),
		cmocka_unit_test(test_tenant_quota_count),
		cmocka_unit_test(test_duplicate_id_refused),
		cmocka_unit_test(test_remove_keeps_others_found),
		cmocka_unit_test(test_iteration_sees_each_once),
		cmocka_unit_test(test_remove_current_while_iterating),
		cmocka_unit_test(test_foreach),
		cmocka_unit_test(test_sweep_visits_all_a_share_at_a_time),
		cmocka_unit_test(test_sweep_after_removals_leaves_none_out),
		cmocka_unit_test(test_tenants_and_held),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
