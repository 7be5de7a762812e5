// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * DNS-learned allowlist entries (user/egressd/learned.c) against real BPF
 * LPM tries created by the test (root): base merging, expiry write-back of
 * a static /32, re-basing to a new policy id, the cap.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <bpf/bpf.h>

#include "egr_decide.h"
#include "dns/learned.h"
#include "kernel/kernel_priv.h"
#include "compile.h"
#include "policy.h"

static struct egr_bpf B;

/* The test's own clock readings, the same clocks the daemon uses. */
static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int setup(void **state)
{
	LIBBPF_OPTS(bpf_map_create_opts, lpm, .map_flags = BPF_F_NO_PREALLOC);

	memset(&B, 0, sizeof(B));
	B.fd_allow4 = bpf_map_create(BPF_MAP_TYPE_LPM_TRIE, "t_allow4", sizeof(struct egr_lpm4_key),
				     sizeof(struct egr_rule), 1024, &lpm);
	B.fd_allow6 = bpf_map_create(BPF_MAP_TYPE_LPM_TRIE, "t_allow6", sizeof(struct egr_lpm6_key),
				     sizeof(struct egr_rule), 1024, &lpm);
	B.fd_sandboxes = bpf_map_create(BPF_MAP_TYPE_HASH, "t_sb", sizeof(uint32_t),
					sizeof(struct egr_sandbox), 16, NULL);
	if (B.fd_allow4 < 0 || B.fd_allow6 < 0 || B.fd_sandboxes < 0) {
		fprintf(stderr, "creating BPF maps needs root: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	close(B.fd_allow4);
	close(B.fd_allow6);
	close(B.fd_sandboxes);
	return 0;
}

static void put_static4(uint32_t policy_id, const char *addr, int plen, uint16_t lo, uint16_t hi)
{
	struct egr_lpm4_key k = { .prefixlen = EGR_LPM_POLICY_BITS + (uint32_t)plen,
				  .policy_id = policy_id };
	struct egr_rule r;

	memset(&r, 0, sizeof(r));
	r.nranges = 1;
	r.ranges[0] = (struct egr_port_range){ lo, hi, EGR_PROTO_ANY };
	inet_pton(AF_INET, addr, k.addr);
	assert_int_equal(bpf_map_update_elem(B.fd_allow4, &k, &r, BPF_ANY), 0);
}

/* What the kernel program would decide: longest match, and on expiry one
 * bit shorter (as egr_decide4 does). */
static int kernel_allows4(uint32_t policy_id, const char *addr, uint16_t port, uint64_t now)
{
	struct egr_lpm4_key k = { .prefixlen = EGR_LPM_POLICY_BITS + 32, .policy_id = policy_id };
	struct egr_rule r;
	int expired, v;

	inet_pton(AF_INET, addr, k.addr);
	if (bpf_map_lookup_elem(B.fd_allow4, &k, &r))
		return EGR_DENY;
	v = egr_rule_allows(&r, port, EGR_IPPROTO_TCP, now, &expired);
	if (!expired)
		return v;
	k.prefixlen--;
	if (bpf_map_lookup_elem(B.fd_allow4, &k, &r))
		return EGR_DENY;
	return egr_rule_allows(&r, port, EGR_IPPROTO_TCP, now, &expired);
}

static int count_keys4(uint32_t policy_id)
{
	struct egr_lpm4_key k, prev;
	int n = 0, first = 1;

	while (bpf_map_get_next_key(B.fd_allow4, first ? NULL : &prev, &k) == 0) {
		if (k.policy_id == policy_id)
			n++;
		prev = k;
		first = 0;
	}
	return n;
}

static struct egr_dns_learned learned4(const char *addr, const char *qname, uint16_t port,
				       uint64_t expires)
{
	struct egr_dns_learned a;

	memset(&a, 0, sizeof(a));
	a.family = AF_INET;
	inet_pton(AF_INET, addr, a.addr);
	a.expires_ns = expires;
	a.ports.nranges = 1;
	a.ports.ranges[0] = (struct egr_port_range){ port, port, EGR_PROTO_ANY };
	a.qname = qname;
	return a;
}

static void put_sandbox(uint32_t id, uint32_t policy_id)
{
	struct egr_sandbox sb = { .policy_id = policy_id };

	assert_int_equal(bpf_map_update_elem(B.fd_sandboxes, &id, &sb, BPF_ANY), 0);
}

static void test_learn_merges_covering_static(void **state)
{
	struct egr_learned *l = NULL;
	uint64_t now = clock_ns(CLOCK_BOOTTIME);
	struct egr_dns_learned a = learned4("10.9.0.7", "api.test", 443, now + 60000000000ull);

	put_static4(11, "10.9.0.0", 16, 8000, 8080);
	assert_int_equal(egr_learned_new(&B, 16, &l), 0);
	assert_int_equal(egr_learned_add(l, 1, 11, &a, 1), 0);
	/* The learned /32 is the longest match: it must still allow the
	 * static /16's ports as well as its own. */
	assert_int_equal(kernel_allows4(11, "10.9.0.7", 443, now), EGR_ALLOW);
	assert_int_equal(kernel_allows4(11, "10.9.0.7", 8001, now), EGR_ALLOW);
	assert_int_equal(kernel_allows4(11, "10.9.0.7", 22, now), EGR_DENY);
	assert_true(egr_learned_allows(l, 1, AF_INET, a.addr, 443, EGR_IPPROTO_TCP));
	/* After expiry, the kernel's shorter lookup still finds the /16. */
	assert_int_equal(kernel_allows4(11, "10.9.0.7", 443, now + 61000000000ull), EGR_DENY);
	assert_int_equal(kernel_allows4(11, "10.9.0.7", 8001, now + 61000000000ull), EGR_ALLOW);
	/* Reclaim removes the /32 rather than writing the /16's rule back as
	 * a permanent host key: such keys would pile up in the shared trie
	 * (found by review). Only the /16 of policy 11 is left. */
	put_sandbox(1, 11);
	assert_int_equal(egr_learned_reclaim(l, now + 61000000000ull), 1);
	assert_int_equal(count_keys4(11), 1);
	assert_int_equal(kernel_allows4(11, "10.9.0.7", 8001, now + 62000000000ull), EGR_ALLOW);
	egr_learned_forget(l, 1, 11);
	egr_learned_free(l);
}

static void test_expiry_restores_static_host(void **state)
{
	struct egr_learned *l = NULL;
	uint64_t now = clock_ns(CLOCK_BOOTTIME);
	struct egr_dns_learned a = learned4("10.8.0.1", "db.test", 5432, now + 1000000ull);

	/* The policy itself allows this very /32 on port 80. */
	put_static4(12, "10.8.0.1", 32, 80, 80);
	put_sandbox(2, 12);
	assert_int_equal(egr_learned_new(&B, 16, &l), 0);
	assert_int_equal(egr_learned_add(l, 2, 12, &a, 1), 0);
	assert_int_equal(kernel_allows4(12, "10.8.0.1", 5432, now), EGR_ALLOW);
	assert_int_equal(kernel_allows4(12, "10.8.0.1", 80, now), EGR_ALLOW);
	/* Reclaim after expiry writes the static rule back, not a hole. */
	assert_int_equal(egr_learned_reclaim(l, now + 2000000ull), 1);
	assert_int_equal(egr_learned_count(l, 2), 0);
	assert_int_equal(kernel_allows4(12, "10.8.0.1", 80, now + 3000000ull), EGR_ALLOW);
	assert_int_equal(kernel_allows4(12, "10.8.0.1", 5432, now + 3000000ull), EGR_DENY);
	egr_learned_free(l);
}

/* A live name due soon is kept (kernel entry too) while connected; an
 * expired one is never brought back, and a name not due is not listed. */
static void test_keep_extends_live_only(void **state)
{
	struct egr_learned *l = NULL;
	uint64_t now = clock_ns(CLOCK_BOOTTIME), s = 1000000000ull;
	struct egr_dns_learned a[2] = { learned4("10.7.0.1", "pool.test", 5432, now + 2 * s),
					learned4("10.7.0.2", "late.test", 5432, now + 600 * s) };
	uint32_t ids[4];

	put_sandbox(7, 18);
	assert_int_equal(egr_learned_new(&B, 16, &l), 0);
	assert_int_equal(egr_learned_add(l, 7, 18, a, 2), 0);
	assert_int_equal(egr_learned_expiring(l, now, now + 3 * s, ids, 4), 1);
	assert_int_equal(ids[0], 7);
	assert_int_equal(egr_learned_expiring(l, now, now + s, ids, 4), 0);
	assert_int_equal(egr_learned_keep(l, 7, AF_INET, a[0].addr, now + 20 * s), 0);
	assert_int_equal(kernel_allows4(18, "10.7.0.1", 5432, now + 10 * s), EGR_ALLOW);
	assert_int_equal(kernel_allows4(18, "10.7.0.1", 5432, now + 21 * s), EGR_DENY);
	assert_true(egr_learned_has_name(l, 7, AF_INET, a[0].addr, "pool.test"));
	/* Never shortened: the later expiry stays. */
	assert_int_equal(egr_learned_keep(l, 7, AF_INET, a[1].addr, now + 20 * s), 0);
	assert_int_equal(kernel_allows4(18, "10.7.0.2", 5432, now + 500 * s), EGR_ALLOW);
	/* An address never learned. */
	assert_int_equal(egr_learned_keep(l, 7, AF_INET, (const uint8_t *)"\x0a\x07\x00\x09",
					  now + 20 * s), -ENOENT);
	egr_learned_forget(l, 7, 18);
	/* Expired before the keep: stays expired. */
	a[0].expires_ns = clock_ns(CLOCK_BOOTTIME) + 1000000ull;
	assert_int_equal(egr_learned_add(l, 7, 18, a, 1), 0);
	usleep(5000);
	assert_int_equal(egr_learned_keep(l, 7, AF_INET, a[0].addr, now + 20 * s), 0);
	assert_int_equal(kernel_allows4(18, "10.7.0.1", 5432, clock_ns(CLOCK_BOOTTIME)), EGR_DENY);
	egr_learned_forget(l, 7, 18);
	egr_learned_free(l);
}

static void test_rebase_rejudges_names(void **state)
{
	static const char *const pol_json =
		"{\"tenant\":\"t\",\"network\":{\"default\":\"deny\","
		"\"outbound_allow\":[\"keep.test:8443\"],\"dns_rebind_allow\":[\"10.7.0.0/16\"]}}";
	struct egr_learned *l = NULL;
	struct egr_policy p = { 0 };
	struct egr_error e;
	struct egr_dnspolicy *dpol;
	uint64_t now = clock_ns(CLOCK_BOOTTIME);
	struct egr_dns_learned a[2] = {
		learned4("10.7.0.1", "keep.test", 443, now + 60000000000ull),
		learned4("10.7.0.2", "drop.test", 443, now + 60000000000ull),
	};

	assert_int_equal(egr_policy_parse(pol_json, strlen(pol_json), &p, &e), 0);
	assert_int_equal(egr_dnspolicy_new(&p, NULL, 0, &dpol, &e), 0);
	assert_int_equal(egr_learned_new(&B, 16, &l), 0);
	assert_int_equal(egr_learned_add(l, 3, 13, a, 2), 0);
	assert_int_equal(egr_learned_rebase(l, 3, 13, 14, dpol), 0);
	/* keep.test moved to policy 14 with the new policy's port. */
	assert_int_equal(kernel_allows4(14, "10.7.0.1", 8443, now), EGR_ALLOW);
	assert_int_equal(kernel_allows4(14, "10.7.0.1", 443, now), EGR_DENY);
	assert_int_equal(kernel_allows4(14, "10.7.0.2", 443, now), EGR_DENY);
	/* Until the switch, the old policy is whole (found by review: rebase
	 * used to delete its entries first). */
	assert_int_equal(kernel_allows4(13, "10.7.0.1", 443, now), EGR_ALLOW);
	assert_int_equal(kernel_allows4(13, "10.7.0.2", 443, now), EGR_ALLOW);
	egr_learned_drop_stale(l, 3);
	/* After it, nothing of policy 13 is left. */
	assert_int_equal(kernel_allows4(13, "10.7.0.1", 443, now), EGR_DENY);
	assert_int_equal(kernel_allows4(13, "10.7.0.2", 443, now), EGR_DENY);
	assert_int_equal(egr_learned_count(l, 3), 1);
	egr_learned_forget(l, 3, 14);
	assert_int_equal(kernel_allows4(14, "10.7.0.1", 8443, now), EGR_DENY);
	egr_dnspolicy_free(dpol);
	egr_policy_free(&p);
	egr_learned_free(l);
}

static void test_rebase_rebind_narrowed(void **state)
{
	/* keep.test still resolves under the new policy, but its 10.7.0.1 is
	 * no longer an expected rebinding target: it is dropped. */
	static const char *const pol_json =
		"{\"tenant\":\"t\",\"network\":{\"default\":\"deny\","
		"\"outbound_allow\":[\"keep.test:443\"],\"dns_rebind_allow\":[\"10.9.0.0/16\"]}}";
	struct egr_learned *l = NULL;
	struct egr_policy p = { 0 };
	struct egr_error e;
	struct egr_dnspolicy *dpol;
	uint64_t now = clock_ns(CLOCK_BOOTTIME);
	struct egr_dns_learned a[2] = {
		learned4("10.7.0.1", "keep.test", 443, now + 60000000000ull),
		learned4("10.9.0.1", "keep.test", 443, now + 60000000000ull),
	};

	assert_int_equal(egr_policy_parse(pol_json, strlen(pol_json), &p, &e), 0);
	assert_int_equal(egr_dnspolicy_new(&p, NULL, 0, &dpol, &e), 0);
	assert_int_equal(egr_learned_new(&B, 16, &l), 0);
	assert_int_equal(egr_learned_add(l, 6, 17, a, 2), 0);
	assert_int_equal(egr_learned_rebase(l, 6, 17, 18, dpol), 0);
	egr_learned_drop_stale(l, 6);
	assert_int_equal(kernel_allows4(18, "10.7.0.1", 443, now), EGR_DENY);
	assert_int_equal(kernel_allows4(18, "10.9.0.1", 443, now), EGR_ALLOW);
	assert_int_equal(egr_learned_count(l, 6), 1);
	egr_learned_forget(l, 6, 18);
	egr_dnspolicy_free(dpol);
	egr_policy_free(&p);
	egr_learned_free(l);
}

static void test_cap(void **state)
{
	struct egr_learned *l = NULL;
	uint64_t now = clock_ns(CLOCK_BOOTTIME);
	struct egr_dns_learned a[3] = {
		learned4("10.6.0.1", "a.test", 443, now + 60000000000ull),
		learned4("10.6.0.2", "b.test", 443, now + 60000000000ull),
		learned4("10.6.0.3", "c.test", 443, now + 60000000000ull),
	};

	assert_int_equal(egr_learned_new(&B, 2, &l), 0);
	assert_int_equal(egr_learned_add(l, 4, 15, a, 2), 0);
	assert_int_equal(egr_learned_add(l, 4, 15, &a[2], 1), -ENOSPC);
	assert_int_equal(kernel_allows4(15, "10.6.0.3", 443, now), EGR_DENY);
	/* Another sandbox has its own budget and its own entries. */
	assert_int_equal(egr_learned_add(l, 5, 16, &a[2], 1), 0);
	assert_false(egr_learned_allows(l, 4, AF_INET, a[2].addr, 443, EGR_IPPROTO_TCP));
	egr_learned_forget(l, 4, 15);
	egr_learned_forget(l, 5, 16);
	egr_learned_free(l);
}

/* The inspecting proxy asks which names an address was learned for. */
static void test_names_of_addresses(void **state)
{
	struct egr_learned *l = NULL;
	uint64_t now = clock_ns(CLOCK_BOOTTIME);
	struct egr_dns_learned a[3] = {
		learned4("10.5.0.1", "api.test", 443, now + 60000000000ull),
		learned4("10.5.0.1", "cdn.test", 443, now + 60000000000ull),
		learned4("10.5.0.2", "gone.test", 443, now + 1000ull),
	};

	put_sandbox(6, 17);
	assert_int_equal(egr_learned_new(&B, 16, &l), 0);
	assert_int_equal(egr_learned_add(l, 6, 17, a, 3), 0);
	assert_true(egr_learned_has_name(l, 6, AF_INET, a[0].addr, "api.test"));
	assert_true(egr_learned_has_name(l, 6, AF_INET, a[0].addr, "CDN.test"));
	assert_false(egr_learned_has_name(l, 6, AF_INET, a[0].addr, "gone.test"));
	assert_false(egr_learned_has_name(l, 6, AF_INET, a[0].addr, "api.tes"));
	assert_false(egr_learned_has_name(l, 6, AF_INET, a[0].addr, NULL));
	/* Another sandbox never sees this one's names. */
	assert_false(egr_learned_has_name(l, 7, AF_INET, a[0].addr, "api.test"));
	assert_null(egr_learned_name_of(l, 7, AF_INET, a[0].addr));
	assert_string_equal(egr_learned_name_of(l, 6, AF_INET, a[0].addr), "api.test");
	/* Expired: not a name of the address any more. */
	usleep(10);
	assert_false(egr_learned_has_name(l, 6, AF_INET, a[2].addr, "gone.test"));
	assert_null(egr_learned_name_of(l, 6, AF_INET, a[2].addr));
	assert_false(egr_learned_has_name(NULL, 6, AF_INET, a[0].addr, "api.test"));
	egr_learned_forget(l, 6, 17);
	egr_learned_free(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_learn_merges_covering_static),
		cmocka_unit_test(test_expiry_restores_static_host),
		cmocka_unit_test(test_keep_extends_live_only),
		cmocka_unit_test(test_rebase_rejudges_names),
		cmocka_unit_test(test_rebase_rebind_narrowed),
		cmocka_unit_test(test_cap),
		cmocka_unit_test(test_names_of_addresses),
	};

	return cmocka_run_group_tests_name("learned", tests, setup, teardown);
}
