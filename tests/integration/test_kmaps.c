// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The kernel module's map layer (user/egressd/kernel/walk.c, maps.c) against
 * real maps (root): the batched walker and its get_next_key fallback see
 * every entry once with its value, LPM tries fall back by themselves, a
 * callback stops the walk; and the typed operations on a private handle
 * (egressd's own map definitions, pinned nowhere).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <bpf/bpf.h>

#include "../../user/egressd/kernel/walk.c"
#include "../../user/egressd/kernel/maps.c"
#include "../../user/egressd/kernel/links.c"
#include "../../user/egressd/kernel/bpfstate.c"
#include "../../user/egressd/kernel/migrate.c"
#include "../../user/egressd/kernel/migrate_carry.c"
#include "../../user/egressd/kernel/listen.c"

#define NKEYS 1000

struct seen {
	uint8_t hit[NKEYS];
	unsigned calls, bad, stop_after;
	size_t value_words; /* per-CPU: how many u64 per entry */
};

static int record(void *ctx, const void *key, const void *value)
{
	struct seen *s = ctx;
	uint32_t k;
	uint64_t v = 0;

	memcpy(&k, key, sizeof(k));
	for (size_t i = 0; i < (s->value_words ? s->value_words : 1); i++) {
		uint64_t w;

		memcpy(&w, (const uint8_t *)value + i * 8, sizeof(w));
		v += w;
	}
	if (k >= NKEYS || v != (uint64_t)k * 3 * (s->value_words ? s->value_words : 1))
		s->bad++;
	else
		s->hit[k]++;
	s->calls++;
	return s->stop_after && s->calls == s->stop_after ? 7 : 0;
}

static int make_hash(enum bpf_map_type type, unsigned n)
{
	int fd = bpf_map_create(type, "t_walk", sizeof(uint32_t), sizeof(uint64_t), 4096, NULL);
	int ncpu = libbpf_num_possible_cpus();

	assert_true(fd >= 0);
	for (uint32_t k = 0; k < n; k++) {
		uint64_t vals[512];

		for (int c = 0; c < ncpu && c < 512; c++)
			vals[c] = (uint64_t)k * 3;
		assert_int_equal(bpf_map_update_elem(fd, &k, vals, BPF_ANY), 0);
	}
	return fd;
}

static void assert_each_once(const struct seen *s, unsigned n)
{
	assert_int_equal(s->bad, 0);
	assert_int_equal(s->calls, n);
	for (unsigned k = 0; k < n; k++)
		assert_int_equal(s->hit[k], 1);
}

static void test_walk_hash_batched_and_fallback(void **state)
{
	int fd = make_hash(BPF_MAP_TYPE_HASH, NKEYS);
	struct bpf_map_info info = { 0 };
	__u32 len = sizeof(info);
	struct seen s;

	/* The batched path itself runs on a hash map (1 would mean "no batch op"). */
	assert_int_equal(bpf_obj_get_info_by_fd(fd, &info, &len), 0);
	memset(&s, 0, sizeof(s));
	assert_int_equal(walk_batch(fd, &info, info.value_size, record, &s), 0);
	assert_each_once(&s, NKEYS);

	memset(&s, 0, sizeof(s));
	assert_int_equal(egr_kmap_walk(fd, 0, record, &s), 0);
	assert_each_once(&s, NKEYS);

	memset(&s, 0, sizeof(s));
	assert_int_equal(egr_kmap_walk(fd, EGR_WALK_NO_BATCH, record, &s), 0);
	assert_each_once(&s, NKEYS);
	close(fd);
}

static void test_walk_empty(void **state)
{
	int fd = make_hash(BPF_MAP_TYPE_HASH, 0);
	struct seen s;

	memset(&s, 0, sizeof(s));
	assert_int_equal(egr_kmap_walk(fd, 0, record, &s), 0);
	assert_int_equal(egr_kmap_walk(fd, EGR_WALK_NO_BATCH, record, &s), 0);
	assert_int_equal(s.calls, 0);
	close(fd);
}

static void test_walk_percpu_values(void **state)
{
	int fd = make_hash(BPF_MAP_TYPE_PERCPU_HASH, 100);
	struct seen s;

	for (unsigned flags = 0; flags <= EGR_WALK_NO_BATCH; flags++) {
		memset(&s, 0, sizeof(s));
		s.value_words = (size_t)libbpf_num_possible_cpus();
		assert_int_equal(egr_kmap_walk(fd, flags, record, &s), 0);
		assert_each_once(&s, 100);
	}
	close(fd);
}

static int lpm_record(void *ctx, const void *key, const void *value)
{
	struct seen *s = ctx;
	struct egr_lpm4_key k;

	memcpy(&k, key, sizeof(k));
	if (k.policy_id < NKEYS && k.prefixlen == EGR_LPM_POLICY_BITS + 32)
		s->hit[k.policy_id]++;
	else
		s->bad++;
	s->calls++;
	return 0;
}

static void test_walk_lpm_falls_back(void **state)
{
	LIBBPF_OPTS(bpf_map_create_opts, lpm, .map_flags = BPF_F_NO_PREALLOC);
	int fd = bpf_map_create(BPF_MAP_TYPE_LPM_TRIE, "t_lpm", sizeof(struct egr_lpm4_key),
				sizeof(struct egr_rule), 1024, &lpm);
	struct egr_rule r = { 0 };
	struct seen s;

	assert_true(fd >= 0);
	for (uint32_t i = 0; i < 200; i++) {
		struct egr_lpm4_key k = { .prefixlen = EGR_LPM_POLICY_BITS + 32, .policy_id = i,
					  .addr = { 10, 0, (uint8_t)(i >> 8), (uint8_t)i } };

		assert_int_equal(bpf_map_update_elem(fd, &k, &r, BPF_ANY), 0);
	}
	/* An LPM trie has no batch op: the walker says so and falls back. */
	memset(&s, 0, sizeof(s));
	assert_int_equal(egr_kmap_walk(fd, 0, lpm_record, &s), 0);
	assert_each_once(&s, 200);
	close(fd);
}

static void test_walk_stops_and_bad_fd(void **state)
{
	int fd = make_hash(BPF_MAP_TYPE_HASH, 50);
	struct seen s;

	for (unsigned flags = 0; flags <= EGR_WALK_NO_BATCH; flags++) {
		memset(&s, 0, sizeof(s));
		s.stop_after = 5;
		assert_int_equal(egr_kmap_walk(fd, flags, record, &s), 7);
		assert_int_equal(s.calls, 5);
	}
	close(fd);
	assert_int_equal(egr_kmap_walk(-1, 0, record, &s), -EBADF);
}

/* --- typed operations on egressd's own maps --------------------------------------- */

static struct egr_bpf *B;

static int setup_private(void **state)
{
	int err = egr_bpf_open_private(&B, 4096);

	if (err) {
		fprintf(stderr, "egr_bpf_open_private needs root: %s\n", strerror(-err));
		return -1;
	}
	return 0;
}

static int teardown_private(void **state)
{
	egr_bpf_close(B);
	B = NULL;
	return 0;
}

static void test_private_sandboxes(void **state)
{
	struct egr_sandbox sb = { .tenant_id = 4, .policy_id = 40 }, got;
	uint64_t entries, cap;
	uint32_t *ids = NULL;
	size_t n = 0;

	for (uint32_t id = 1; id <= 3; id++)
		assert_int_equal(egr_bpf_put_sandbox(B, id, &sb), 0);
	assert_int_equal(egr_bpf_get_sandbox(B, 2, &got), 0);
	assert_int_equal(got.policy_id, 40);
	assert_int_equal(egr_bpf_list_sandbox_ids(B, &ids, &n), 0);
	assert_int_equal(n, 3);
	free(ids);
	assert_int_equal(egr_bpf_kmap_usage(B, EGR_KMAP_SANDBOXES, &entries, &cap), 0);
	assert_int_equal(entries, 3);
	assert_int_equal(cap, 4096); /* the cap of egr_bpf_open_private */
	assert_int_equal(egr_bpf_del_sandbox(B, 2), 0);
	assert_int_equal(egr_bpf_del_sandbox(B, 2), 0); /* idempotent */
	assert_int_equal(egr_bpf_get_sandbox(B, 2, &got), -ENOENT);
}

static void test_private_rules_and_gc(void **state)
{
	const uint8_t a[4] = { 192, 0, 2, 7 };
	struct egr_rule r = { .nranges = 1 }, got;
	const uint32_t live[] = { 8 };

	r.ranges[0] = (struct egr_port_range){ 443, 443, EGR_PROTO_ANY };
	assert_int_equal(egr_bpf_rule_put(B, AF_INET, a, 7, &r), 0);
	assert_int_equal(egr_bpf_rule_put(B, AF_INET, a, 8, &r), 0);
	assert_int_equal(egr_bpf_rule_get(B, AF_INET, a, 7, 0, &got), 0);
	assert_memory_equal(&got, &r, sizeof(r));
	assert_int_equal(egr_bpf_rule_get(B, AF_INET, a, 7, 1, &got), -ENOENT);
	/* Policy 7 is dead: the batched-or-not walk of the trie finds it. */
	assert_int_equal(egr_bpf_gc_rules(B, live, 1), 1);
	assert_int_equal(egr_bpf_rule_get(B, AF_INET, a, 7, 0, &got), -ENOENT);
	assert_int_equal(egr_bpf_rule_get(B, AF_INET, a, 8, 0, &got), 0);
	assert_int_equal(egr_bpf_rule_del(B, AF_INET, a, 8), 0);
	assert_int_equal(egr_bpf_rule_del(B, AF_INET, a, 8), 0);
	assert_true(egr_bpf_rules_capacity(B, AF_INET) > 0);
}

static void test_private_quota_keep(void **state)
{
	struct egr_quota q;

	assert_int_equal(egr_bpf_quota_put(B, EGR_QUOTA_SANDBOX, 5, 1000, 60, false, 123), 0);
	assert_int_equal(egr_bpf_quota_get(B, EGR_QUOTA_SANDBOX, 5, &q), 0);
	assert_int_equal(q.window_start_ns, 123);
	/* keep: the running window stays, the limit changes. */
	assert_int_equal(egr_bpf_quota_put(B, EGR_QUOTA_SANDBOX, 5, 2000, 60, true, 999), 0);
	assert_int_equal(egr_bpf_quota_get(B, EGR_QUOTA_SANDBOX, 5, &q), 0);
	assert_int_equal(q.window_start_ns, 123);
	assert_int_equal(q.limit_bytes, 2000);
	assert_int_equal(egr_bpf_quota_get(B, EGR_QUOTA_TENANT, 5, &q), -ENOENT);
	assert_int_equal(egr_bpf_quota_del(B, EGR_QUOTA_SANDBOX, 5), 0);
	assert_int_equal(egr_bpf_quota_get(B, EGR_QUOTA_SANDBOX, 5, &q), -ENOENT);
}

/* A listener claimed is reserved (its port) and marked (its socket);
 * released, neither; the sweep keeps this start's claims only. */
static void test_private_listen_claim_release_sweep(void **state)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct egr_listen_mark m;
	struct egr_listen_key k;
	int t = socket(AF_INET, SOCK_STREAM, 0), u = socket(AF_INET, SOCK_DGRAM, 0);
	socklen_t sl = sizeof(sa);
	size_t n, dropped;

	(void)state;
	assert_true(t >= 0 && u >= 0);
	assert_int_equal(bind(t, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(t, 1), 0);
	assert_int_equal(bind(u, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(egr_bpf_listen_claim(B, t, EGR_LISTEN_INSPECT, 7), 0);
	assert_int_equal(egr_bpf_listen_claim(B, u, EGR_LISTEN_DNS, 0), 0);
	assert_int_equal(egr_bpf_listen_claim(B, t, EGR_LISTEN_INSPECT, 7), 0); /* again: fine */
	assert_int_equal(egr_bpf_listen_count(B, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(bpf_map_lookup_elem(B->fd_listen_sk, &t, &m), 0);
	assert_int_equal(m.kind, EGR_LISTEN_INSPECT);
	assert_int_equal(m.sandbox_id, 7);
	assert_int_equal(m.protocol, IPPROTO_TCP);
	assert_int_equal(getsockname(t, (struct sockaddr *)&sa, &sl), 0);
	assert_int_equal(m.port, ntohs(sa.sin_port));
	assert_int_equal(listen_key(t, &k), 0);
	assert_int_equal(bpf_map_lookup_elem(B->fd_listen_ports, &k, &m), 0);
	assert_int_equal(m.port, k.port);
	/* An unbound socket has no port to reserve: refused. */
	{
		int x = socket(AF_INET, SOCK_STREAM, 0);

		assert_int_equal(egr_bpf_listen_claim(B, x, EGR_LISTEN_DNS, 0), -EINVAL);
		close(x);
	}
	/* The sweep of this start keeps both; a later start's drops both. */
	assert_int_equal(egr_bpf_listen_sweep(B, &dropped), 0);
	assert_int_equal(dropped, 0);
	B->listen_gen += 2;
	assert_int_equal(egr_bpf_listen_claim(B, u, EGR_LISTEN_DNS, 0), 0); /* reclaimed */
	assert_int_equal(egr_bpf_listen_sweep(B, &dropped), 0);
	assert_int_equal(dropped, 1);
	assert_int_equal(egr_bpf_listen_count(B, &n), 0);
	assert_int_equal(n, 1);
	egr_bpf_listen_release(B, u);
	assert_int_equal(egr_bpf_listen_count(B, &n), 0);
	assert_int_equal(n, 0);
	assert_int_not_equal(bpf_map_lookup_elem(B->fd_listen_sk, &u, &m), 0); /* mark gone */
	close(t);
	close(u);
	/* Without the kernel side: a no-op. */
	assert_int_equal(egr_bpf_listen_claim(NULL, 0, EGR_LISTEN_DNS, 0), 0);
	assert_int_equal(egr_bpf_listen_sweep(NULL, NULL), 0);
}

int main(void)
{
	const struct CMUnitTest walk[] = {
		cmocka_unit_test(test_walk_hash_batched_and_fallback),
		cmocka_unit_test(test_walk_empty),
		cmocka_unit_test(test_walk_percpu_values),
		cmocka_unit_test(test_walk_lpm_falls_back),
		cmocka_unit_test(test_walk_stops_and_bad_fd),
	};
	const struct CMUnitTest typed[] = {
		cmocka_unit_test(test_private_sandboxes),
		cmocka_unit_test(test_private_rules_and_gc),
		cmocka_unit_test(test_private_quota_keep),
		cmocka_unit_test(test_private_listen_claim_release_sweep),
	};
	int rc = cmocka_run_group_tests(walk, NULL, NULL);

	return rc | cmocka_run_group_tests(typed, setup_private, teardown_private);
}
