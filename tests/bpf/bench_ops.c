// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * ns per call of single bpf/lib/ decisions, for docs/benchmarks.md: the
 * test program of tests/bpf (egr_test.bpf.c, private unpinned maps) run
 * through BPF_PROG_TEST_RUN with a large repeat, which reports the mean ns
 * per run without bpf_stats' clock reads or the network stack around it.
 * A measurement, not a test: it asserts nothing but that each run gave the
 * reason the decision must give.
 *
 *   build/tests/bpf/bench_ops [repeat]     (root)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "egressd.h"
#include "egr_reasons.h"
#include "egr_test.h"
#include "egr_test.skel.h"

static struct egr_test_bpf *skel;

/* Mean ns per run of case c, repeat times; -errno, or -EPROTO when the
 * decision said something else than want. */
static int bench(const struct egr_t_case *c, unsigned int repeat, int want, double *ns)
{
	unsigned char pkt[64] = { [12] = 0x08, [14] = 0x45 };
	struct egr_t_out out;
	__u32 zero = 0;
	LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = pkt, .data_size_in = sizeof(pkt),
		    .repeat = repeat);

	if (bpf_map__update_elem(skel->maps.egr_t_cases, &zero, sizeof(zero), c, sizeof(*c),
				 BPF_ANY))
		return -errno;
	if (bpf_prog_test_run_opts(bpf_program__fd(skel->progs.egr_t_run), &opts))
		return -errno;
	if (bpf_map__lookup_elem(skel->maps.egr_t_out, &zero, sizeof(zero), &out, sizeof(out), 0))
		return -errno;
	if (want >= 0 && (int)out.reason != want)
		return -EPROTO;
	*ns = opts.duration;
	return 0;
}

static int put_sandbox(__u32 id, __u32 tenant, __u32 flags)
{
	struct egr_sandbox sb = { .policy_id = 1, .tenant_id = tenant, .flags = flags };

	return bpf_map__update_elem(skel->maps.egr_sandboxes, &id, sizeof(id), &sb, sizeof(sb),
				    BPF_ANY);
}

int main(int argc, char **argv)
{
	unsigned int repeat = argc > 1 ? (unsigned int)strtoul(argv[1], NULL, 10) : 1000000;
	const struct {
		const char *what;
		struct egr_t_case c;
		int want;
	} cases[] = {
		{ "the test program alone (two array lookups)", { .op = 0 }, EGR_R_NONE },
		{ "egr_quota_egress, tenant without quota, no flag (lookup misses)",
		  { .op = EGR_T_QUOTA, .sandbox_id = 1, .len = 60, .now = 1 }, EGR_R_ALLOW_QUOTA },
		{ "egr_quota_egress, EGR_SB_TENANT_NO_QUOTA (no lookup)",
		  { .op = EGR_T_QUOTA, .sandbox_id = 2, .len = 60, .now = 1 }, EGR_R_ALLOW_QUOTA },
		{ "egr_quota_egress, tenant quota charged (lookup hits, atomic add)",
		  { .op = EGR_T_QUOTA, .sandbox_id = 3, .len = 60, .now = 1 }, EGR_R_ALLOW_QUOTA },
		{ "egr_meter_pkt: the sandbox's and the tenant's per-CPU meter",
		  { .op = EGR_T_METER, .sandbox_id = 1, .len = 60 }, EGR_R_NONE },
		{ "egr_note_dest: egr_sb_dests lookup, two atomics, a store",
		  { .op = EGR_T_DEST, .sandbox_id = 1, .len = 60, .now = 1, .port = 443,
		    .daddr = { 0x0100007f } }, EGR_R_NONE },
	};
	struct egr_quota q = { .limit_bytes = ~0ull >> 1 };
	struct bpf_map *m;
	__u32 capped = 7;
	int err;

	skel = egr_test_bpf__open();
	if (!skel) {
		fprintf(stderr, "bench_ops: open: %s\n", strerror(errno));
		return 1;
	}
	/* Private copies, never a running egressd's pinned maps. */
	bpf_object__for_each_map(m, skel->obj)
		if (bpf_map__set_pin_path(m, NULL))
			return 1;
	err = egr_test_bpf__load(skel);
	if (err || put_sandbox(1, 5, 0) || put_sandbox(2, 5, EGR_SB_TENANT_NO_QUOTA) ||
	    put_sandbox(3, capped, 0) ||
	    bpf_map__update_elem(skel->maps.egr_quota_tenant, &capped, sizeof(capped), &q,
				 sizeof(q), BPF_ANY)) {
		fprintf(stderr, "bench_ops: load and fill (root needed): %s\n",
			strerror(err ? -err : errno));
		egr_test_bpf__destroy(skel);
		return 1;
	}
	printf("| decision | ns per run (BPF_PROG_TEST_RUN, repeat %u, 3 runs) |\n| --- | ---: |\n",
	       repeat);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		double ns[3];

		for (int k = 0; k < 3; k++) {
			err = bench(&cases[i].c, repeat, cases[i].want, &ns[k]);
			if (err) {
				fprintf(stderr, "bench_ops: %s: %s\n", cases[i].what, strerror(-err));
				egr_test_bpf__destroy(skel);
				return 1;
			}
		}
		printf("| %s | %.0f / %.0f / %.0f |\n", cases[i].what, ns[0], ns[1], ns[2]);
	}
	egr_test_bpf__destroy(skel);
	return 0;
}
