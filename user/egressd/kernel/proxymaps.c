// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The DNS proxy's and the inspecting proxy's maps (maps.h): who sent a
 * query, each sandbox's DNS budget, the inspected connections' original
 * destinations. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include <bpf/bpf.h>

#include "kernel_priv.h"
#include "maps.h"

int egr_bpf_dns_client_lookup(struct egr_bpf *b, const struct egr_dns_client_key *key,
			      struct egr_dns_client_val *val)
{
	if (bpf_map_lookup_elem(b->fd_dns_clients, key, val) == 0)
		return 1;
	return errno == ENOENT ? 0 : -errno;
}

int egr_bpf_dns_budget_set(struct egr_bpf *b, uint32_t sandbox_id, uint32_t rate,
			   uint32_t burst)
{
	struct egr_dns_budget v = { .tokens = burst, .rate = rate, .burst = burst };
	struct timespec ts;

	/* bpf_ktime_get_ns() is CLOCK_MONOTONIC. */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	v.stamp_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	return bpf_map_update_elem(b->fd_dns_budget, &sandbox_id, &v, BPF_ANY) < 0 ? -errno : 0;
}

int egr_bpf_dns_budget_dropped(struct egr_bpf *b, uint32_t sandbox_id, uint64_t *dropped)
{
	struct egr_dns_budget v;

	if (bpf_map_lookup_elem(b->fd_dns_budget, &sandbox_id, &v) < 0)
		return -errno;
	*dropped = v.dropped;
	return 0;
}

struct purge_walk {
	uint32_t sandbox_id;
	struct egr_key_list keys;
};

static int purge_one(void *ctx, const void *key, const void *value)
{
	struct purge_walk *w = ctx;
	const struct egr_dns_client_val *v = value;

	return v->sandbox_id == w->sandbox_id ? egr_key_list_add(&w->keys, key) : 0;
}

int egr_bpf_dns_clients_purge(struct egr_bpf *b, uint32_t sandbox_id, unsigned *purged)
{
	struct purge_walk w = { .sandbox_id = sandbox_id,
				.keys = { .key_size = sizeof(struct egr_dns_client_key) } };
	uint32_t count = 0;
	int err;

	*purged = 0;
	/* The map's walk costs ~1 ms even when empty; none counted, none there. */
	if (bpf_map_lookup_elem(b->fd_dns_clients_n, &sandbox_id, &count) < 0 && errno != ENOENT)
		return -errno;
	if (!count) {
		bpf_map_delete_elem(b->fd_dns_clients_n, &sandbox_id);
		bpf_map_delete_elem(b->fd_dns_budget, &sandbox_id);
		return 0;
	}
	err = egr_kmap_walk(b->fd_dns_clients, 0, purge_one, &w);
	for (size_t i = 0; i < w.keys.n; i++)
		if (bpf_map_delete_elem(b->fd_dns_clients, w.keys.keys + i * w.keys.key_size) == 0)
			(*purged)++;
	free(w.keys.keys);
	bpf_map_delete_elem(b->fd_dns_clients_n, &sandbox_id);
	bpf_map_delete_elem(b->fd_dns_budget, &sandbox_id);
	return err;
}

int egr_bpf_inspect_take(struct egr_bpf *b, const struct egr_inspect_key *key,
			 struct egr_inspect_orig *out)
{
	return bpf_map_lookup_and_delete_elem(b->fd_inspect_orig, key, out) < 0 ? -errno : 0;
}
