/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Private to the upgrade (migrate.h): migrate.c checks the old version's
 * pins (prepare), migrate_carry.c carries its maps and moves its links
 * (reuse, commit). The table of the old version's maps is shared.
 */
#ifndef EGR_MIGRATE_PRIV_H
#define EGR_MIGRATE_PRIV_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/types.h>

#include "egr_abi_v1.h"

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

/* Rows of egr_mig_v1_maps (checked where it is defined). */
#define NMAPS 12
extern const struct map_spec egr_mig_v1_maps[NMAPS];

/* --- state --------------------------------------------------------------------- */

struct mig_link {
	char path[PATH_MAX];
	char prog[64];      /* the pin's name: the program's full name */
	uint32_t sandbox_id;
	__u32 attach_type;  /* the hook, as the kernel says */
	__u64 cgroup_id;
	int link_fd;
	int old_prog_fd;    /* held: it keeps the old program alive for a rollback */
	int new_prog_fd;    /* borrowed from the object */
	bool switched;
};

/* A program new since version 1 that a sandbox gets a link of. */
struct mig_add {
	uint32_t sandbox_id;
	__u64 cgroup_id;
	const char *prog;
	bool added;
};

struct egr_mig {
	char dir[PATH_MAX];
	char old_maps[PATH_MAX]; /* <dir>/maps */
	int from;
	int fd[NMAPS];           /* the old version's maps, -1 where absent */
	struct mig_link *links;
	size_t nlinks, cap;
	struct mig_add *adds;
	size_t nadds, capadds;
};

/* Conversions of version 1's rule value and counter index (false: drop
 * the entry), and version 1's counter index -> the current one. */
bool egr_mig_conv_rule(const void *old, void *new);
bool egr_mig_conv_counter_idx(const void *old, void *new);
extern const __u32 egr_mig_v1_counter_map[EGR_V1_CNT_MAX];
/* Copy every entry of old_fd into new_fd through s's conversions. */
int egr_mig_carry_map(const struct map_spec *s, int old_fd, int new_fd);
/* egr_dests (old_fd) into egr_sb_dests (dests_fd) and egr_dests_n (n_fd). */
int egr_mig_carry_dests(const struct map_spec *s, int old_fd, int dests_fd, int n_fd);

/* The row of egr_mig_v1_maps named name, or -1. */
int egr_mig_spec_index(const char *name);
/* Remove every pin under dir and dir itself. */
int egr_mig_remove_pins(const char *dir);

#endif /* EGR_MIGRATE_PRIV_H */
