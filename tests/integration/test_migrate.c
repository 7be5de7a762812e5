// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The version 1 -> current conversions of user/egressd/kernel/migrate.c: every
 * field of every struct reaches the new layout (a field forgotten in a
 * conversion function is the likeliest bug of the next ABI change), and
 * egr_mig_carry_map() copies real BPF maps of each kind (hash, per-CPU hash, LPM
 * trie, per-CPU array) created by the test (root), every CPU's value too.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "egr_abi_v1.h"
#include "egressd.h"
#include "kernel/migrate.h"
#include "kernel/migrate_priv.h"

/* Distinct non-zero bytes, so a field copied to the wrong place or not at
 * all differs. */
static void pattern(void *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		((uint8_t *)p)[i] = (uint8_t)(seed + i * 7 + 1) ? (uint8_t)(seed + i * 7 + 1) : 0x5a;
}

static const struct map_spec *spec(const char *name)
{
	int i = egr_mig_spec_index(name);

	assert_true(i >= 0);
	return &egr_mig_v1_maps[i];
}

/* Version 2 has the layouts of version 1, some with fields appended
 * (egr_sandbox.quarantined, egr_meter.would_deny_*): every conversion is the
 * identity on the old bytes (save explicit padding, which stays zero, and
 * nranges, which is clamped) and the appended fields get their default, 0. */
static void test_conversions_keep_every_field(void **state)
{
	for (size_t i = 0; i < NMAPS; i++) {
		const struct map_spec *s = &egr_mig_v1_maps[i];
		uint8_t okey[64], nkey[64], oval[128], nval[128];

		if (s->kind != CARRY_COPY && s->kind != CARRY_DESTS)
			continue;
		assert_true(s->key_size <= sizeof(okey) && s->value_size <= sizeof(oval));
		assert_int_equal(s->key_size, s->new_key_size);
		assert_true(s->value_size <= s->new_value_size && s->new_value_size <= sizeof(nval));
		pattern(okey, s->key_size, (uint8_t)i);
		pattern(oval, s->value_size, (uint8_t)(i + 100));
		if (s->key == egr_mig_conv_counter_idx)
			memset(okey, 0, 4), okey[0] = EGR_V1_CNT_EVENTS_LOST;
		if (s->val == egr_mig_conv_rule) {
			struct egr_v1_rule *r = (void *)oval;

			r->nranges = EGR_V1_MAX_PORT_RANGES;
			r->pad = r->pad2 = 0;
		}
		memset(nkey, 0xee, sizeof(nkey));
		memset(nval, 0xee, sizeof(nval));
		assert_true(s->key(okey, nkey));
		assert_true(s->val(oval, nval));
		if (memcmp(okey, nkey, s->key_size) || memcmp(oval, nval, s->value_size))
			fail_msg("%s: the conversion loses or moves a field", s->name);
		for (size_t b = s->value_size; b < s->new_value_size; b++)
			if (nval[b])
				fail_msg("%s: appended byte %zu is not zeroed", s->name, b);
	}
}

static void test_rule_ranges_clamped(void **state)
{
	struct egr_v1_rule o = { .expires_ns = 42, .nranges = 1000 };
	struct egr_rule n;

	egr_mig_conv_rule(&o, &n);
	assert_int_equal(n.nranges, EGR_V1_MAX_PORT_RANGES);
	assert_int_equal(n.expires_ns, 42);
}

static void test_counter_map_complete(void **state)
{
	/* Every version 1 counter lands on a distinct current one. */
	for (__u32 i = 0; i < EGR_V1_CNT_MAX; i++) {
		__u32 n = 0;

		assert_true(egr_mig_conv_counter_idx(&i, &n));
		for (__u32 j = 0; j < i; j++)
			assert_int_not_equal(egr_mig_v1_counter_map[j], n);
	}
	__u32 out = EGR_V1_CNT_MAX, n;
	assert_false(egr_mig_conv_counter_idx(&out, &n));
}

static int make_map(const struct map_spec *s, bool new_side, __u32 max)
{
	LIBBPF_OPTS(bpf_map_create_opts, o);
	int fd;

	if (s->type == BPF_MAP_TYPE_LPM_TRIE)
		o.map_flags = BPF_F_NO_PREALLOC;
	fd = bpf_map_create(s->type, "t_mig", new_side ? s->new_key_size : s->key_size,
			    new_side ? s->new_value_size : s->value_size, max, &o);
	if (fd < 0)
		fail_msg("creating a %s map needs root: %s", s->name, strerror(errno));
	return fd;
}

/* Fill an old map with n entries, carry it, and read every one back. */
static void carry_and_compare(const char *name, int n, __u32 new_max, int want)
{
	const struct map_spec *s = spec(name);
	bool percpu = s->type == BPF_MAP_TYPE_PERCPU_HASH || s->type == BPF_MAP_TYPE_PERCPU_ARRAY;
	int ncpu = percpu ? libbpf_num_possible_cpus() : 1;
	size_t stride = percpu ? (s->value_size + 7) / 8 * 8 : s->value_size;
	size_t nstride = percpu ? (s->new_value_size + 7) / 8 * 8 : s->new_value_size;
	int ofd = make_map(s, false, 64), nfd = make_map(s, true, new_max);
	uint8_t key[64], val[64 * 128], got[64 * 128];

	assert_true(ncpu > 0 && (size_t)ncpu * nstride <= sizeof(val));
	for (int k = 0; k < n; k++) {
		memset(key, 0, sizeof(key));
		if (s->type == BPF_MAP_TYPE_LPM_TRIE) {
			struct egr_v1_lpm4_key *lk = (void *)key;

			lk->prefixlen = 32 + 24;
			lk->policy_id = (__u32)k + 1;
			lk->addr[0] = 10;
		} else {
			memcpy(key, &k, sizeof(k));
		}
		memset(val, 0, sizeof(val));
		for (int c = 0; c < ncpu; c++)
			pattern(val + (size_t)c * stride, s->value_size, (uint8_t)(k * 13 + c));
		if (s->val == egr_mig_conv_rule) {
			struct egr_v1_rule *r = (void *)val;

			r->nranges = EGR_V1_MAX_PORT_RANGES;
			r->pad = r->pad2 = 0;
		}
		assert_int_equal(bpf_map_update_elem(ofd, key, val, BPF_ANY), 0);
		if (k == 0) /* remembered to compare below */
			memcpy(got, val, sizeof(got));
	}
	assert_int_equal(egr_mig_carry_map(s, ofd, nfd), want);
	if (want == 0) {
		uint8_t back[64 * 128];
		int seen = 0;
		uint8_t cur[64], prev[64];
		bool first = true;

		while (bpf_map_get_next_key(nfd, first ? NULL : prev, cur) == 0) {
			first = false;
			memcpy(prev, cur, s->new_key_size);
			seen++;
		}
		if (s->type != BPF_MAP_TYPE_PERCPU_ARRAY)
			assert_int_equal(seen, n);
		memset(key, 0, sizeof(key));
		if (s->type == BPF_MAP_TYPE_LPM_TRIE) {
			struct egr_lpm4_key *lk = (void *)key;

			lk->prefixlen = 32 + 24;
			lk->policy_id = 1;
			lk->addr[0] = 10;
		}
		assert_int_equal(bpf_map_lookup_elem(nfd, key, back), 0);
		for (int c = 0; c < ncpu; c++) {
			if (memcmp(back + (size_t)c * nstride, got + (size_t)c * stride, s->value_size))
				fail_msg("%s: CPU %d's value not carried", s->name, c);
			for (size_t b = s->value_size; b < s->new_value_size; b++)
				if (back[(size_t)c * nstride + b])
					fail_msg("%s: CPU %d: appended byte %zu not zeroed", s->name,
						 c, b);
		}
	}
	close(ofd);
	close(nfd);
}

static void test_carry_hash(void **state)
{
	carry_and_compare("egr_sandboxes", 20, 64, 0);
	carry_and_compare("egr_quota_sb", 5, 64, 0);
}

static void test_carry_percpu(void **state)
{
	carry_and_compare("egr_meter_sb", 7, 64, 0);
	carry_and_compare("egr_counters", EGR_V1_CNT_MAX, EGR_CNT_MAX, 0);
}

static void test_carry_lpm(void **state)
{
	carry_and_compare("egr_allow4", 30, 64, 0);
}

static void test_carry_into_smaller_map_fails(void **state)
{
	/* Refused with -ENOSPC, never half a map silently. */
	carry_and_compare("egr_sandboxes", 20, 8, -ENOSPC);
}

/* egr_dests (one LRU for all) -> egr_sb_dests + egr_dests_n: per-sandbox
 * counts, the cap, and an old map that was full. */
static int put_dests(int ofd, __u32 sandbox, int n)
{
	for (int k = 0; k < n; k++) {
		struct egr_v1_dest_key key = { .sandbox_id = sandbox, .port = (__u16)(k + 1),
					       .family = 2, .protocol = 6 };
		struct egr_v1_dest_val val = { .bytes_out = (__u64)k * 7 + 1, .pkts_out = 1 };

		if (bpf_map_update_elem(ofd, &key, &val, BPF_ANY))
			return -errno;
	}
	return 0;
}

static void dests_case(__u32 old_max, int n1, int n2, __u64 want_e1, __u64 want_d1,
		       __u64 want_e2, __u64 want_d2)
{
	const struct map_spec *s = spec("egr_dests");
	int ofd = bpf_map_create(BPF_MAP_TYPE_LRU_HASH, "t_mig", s->key_size, s->value_size,
				 old_max, NULL);
	int dfd = bpf_map_create(BPF_MAP_TYPE_HASH, "t_mig", s->new_key_size, s->new_value_size,
				 1 << 14, NULL);
	int nfd = bpf_map_create(BPF_MAP_TYPE_HASH, "t_mig", 4, sizeof(struct egr_dests_count),
				 64, NULL);
	struct egr_dests_count c;
	struct egr_dest_key k = { .sandbox_id = 1, .port = 1, .family = 2, .protocol = 6 };
	struct egr_dest_val v;
	__u32 id;

	if (ofd < 0 || dfd < 0 || nfd < 0)
		fail_msg("creating maps needs root: %s", strerror(errno));
	assert_int_equal(put_dests(ofd, 1, n1), 0);
	assert_int_equal(put_dests(ofd, 2, n2), 0);
	assert_int_equal(egr_mig_carry_dests(s, ofd, dfd, nfd), 0);
	id = 1;
	assert_int_equal(bpf_map_lookup_elem(nfd, &id, &c), 0);
	assert_int_equal(c.entries, want_e1);
	assert_int_equal(c.dropped, want_d1);
	id = 2;
	assert_int_equal(bpf_map_lookup_elem(nfd, &id, &c), 0);
	assert_int_equal(c.entries, want_e2);
	assert_int_equal(c.dropped, want_d2);
	/* The values are carried, not just counted. */
	assert_int_equal(bpf_map_lookup_elem(dfd, &k, &v), 0);
	assert_int_equal(v.bytes_out, 1);
	close(ofd);
	close(dfd);
	close(nfd);
}

static void test_carry_dests(void **state)
{
	/* Room for all: counted, nothing dropped. */
	dests_case(1 << 14, 5, 9, 5, 0, 9, 0);
	/* Sandbox 2 past its cap: the rest counted dropped, sandbox 1 untouched. */
	dests_case(1 << 14, 5, EGR_DESTS_PER_SB + 3, 5, 0, EGR_DESTS_PER_SB, 3);
	/* A full LRU may have forgotten anyone's: nobody is complete. */
	dests_case(16, 4, 4, 4, 1, 4, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_conversions_keep_every_field),
		cmocka_unit_test(test_rule_ranges_clamped),
		cmocka_unit_test(test_counter_map_complete),
		cmocka_unit_test(test_carry_hash),
		cmocka_unit_test(test_carry_percpu),
		cmocka_unit_test(test_carry_lpm),
		cmocka_unit_test(test_carry_into_smaller_map_fails),
		cmocka_unit_test(test_carry_dests),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
