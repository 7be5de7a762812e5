/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * migrate.c's version 1 conversion table and carry functions, internal to
 * it; declared here for tests/integration/test_migrate.c, which checks every
 * conversion and carries real maps (it links the daemon's objects).
 */
#ifndef EGR_MIGRATE_INTERNAL_H
#define EGR_MIGRATE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <linux/types.h>

#include "egr_abi_v1.h"

/* Convert one key / one (per-CPU slot of a) value. false: drop the entry. */
typedef bool (*conv_fn)(const void *old, void *new);

enum carry_kind {
	CARRY_COPY,  /* convert every entry into the new map */
	CARRY_SHARE, /* the new object reuses the old map itself */
	CARRY_DRAIN, /* ring buffer: count what is left as lost */
	CARRY_DESTS, /* egr_dests (one LRU) -> egr_sb_dests + egr_dests_n (carry_dests) */
};

/* One row per pinned map of the old version: the layout it must have and
 * how it reaches the new version. */
struct map_spec {
	const char *name;
	__u32 type, key_size, value_size;
	enum carry_kind kind;
	conv_fn key, val;
	__u32 new_key_size, new_value_size;
};

/* One row per pinned map of version 1 (the definition must have NMAPS
 * rows: a different count is a conflicting declaration). */
#define NMAPS 12
extern const struct map_spec v1_maps[NMAPS];
/* The version 1 counter index -> the current one. */
extern const __u32 v1_counter_map[EGR_V1_CNT_MAX];

bool conv_rule(const void *old, void *new);
bool conv_counter_idx(const void *old, void *new);
/* The row of v1_maps named name, or -1. */
int spec_index(const char *name);
/* Copy every entry of old_fd into new_fd through s's conversions. */
int carry_map(const struct map_spec *s, int old_fd, int new_fd);
/* egr_dests (old_fd) into egr_sb_dests (dests_fd) and egr_dests_n (n_fd). */
int carry_dests(const struct map_spec *s, int old_fd, int dests_fd, int n_fd);

#endif
