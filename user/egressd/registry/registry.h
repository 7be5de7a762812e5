/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The set of sandboxes egressd manages (docs/architecture.md, "The
 * registry"). The registry owns every sandbox record and held cgroup; other
 * modules get them through these accessors, never through the set itself.
 * Lookups by sandbox id and by cgroup id are hashed: the ring-event and
 * DNS-answer paths run one per event. The lifecycle operations that change
 * the set (attach, update, detach, adopt) are declared in sandbox.h.
 */
#ifndef EGR_REGISTRY_H
#define EGR_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "registry/records.h"

struct egr_registry;
struct egr_bpf;
struct egr_dnsproxy;
struct egr_inspect;

/* O(1): by sandbox id, by cgroup id; NULL when absent. */
struct egr_sb *egr_reg_by_id(const struct egr_registry *r, uint32_t id);
struct egr_sb *egr_reg_by_cgroup_id(const struct egr_registry *r, uint64_t cgroup_id);
/* By cgroup path (compared after realpath) or, path NULL, by id. */
struct egr_sb *egr_reg_find(struct egr_registry *r, const char *cgroup, uint32_t id);
size_t egr_reg_count(const struct egr_registry *r);
/* Changes with every sandbox added or removed. */
uint64_t egr_reg_gen(const struct egr_registry *r);

/*
 * Iteration, in the order sandboxes were added (a removal moves the last
 * one into the gap):
 *	struct egr_reg_iter it = { 0 };
 *	for (struct egr_sb *sb; (sb = egr_reg_next(r, &it));)
 * The loop body may detach the sandbox it was given (and only that one).
 */
struct egr_reg_iter {
	size_t pos;
	const struct egr_sb *last;
};
struct egr_sb *egr_reg_next(const struct egr_registry *r, struct egr_reg_iter *it);
/* The same as a callback; a non-zero return stops it and is returned. */
int egr_reg_foreach(struct egr_registry *r, int (*fn)(struct egr_sb *sb, void *ctx), void *ctx);
/*
 * A sweep through the set a share at a time: the ids of the next up to max
 * sandboxes from *cursor on, wrapping, and *cursor moved past them; ids has
 * room for max. Returns how many. A removal moves the last sandbox into the
 * gap, so one may be visited twice or a sweep late, none left out.
 */
size_t egr_reg_sweep(const struct egr_registry *r, size_t *cursor, size_t max, uint32_t *ids);

/* Tenant ids are 1..egr_reg_tenant_count(); a name, or NULL. */
size_t egr_reg_tenant_count(const struct egr_registry *r);
const char *egr_reg_tenant_name(const struct egr_registry *r, uint32_t tenant_id);

/* Held cgroups: by path or id (NULL when absent), counted, iterated
 * (index 0..egr_reg_held_total()-1, valid until the set changes). */
struct egr_held *egr_reg_find_held(struct egr_registry *r, const char *cgroup, uint32_t id);
size_t egr_reg_held_count(const struct egr_registry *r, enum egr_held_state state);
size_t egr_reg_held_total(const struct egr_registry *r);
const struct egr_held *egr_reg_held_at(const struct egr_registry *r, size_t i);

/* Is the cgroup at path (absolute) a sandbox (or held) or inside one? */
bool egr_reg_confines(struct egr_registry *r, const char *path);

/* What the registry was started with. */
struct egr_bpf *egr_reg_bpf(const struct egr_registry *r);
struct egr_dnsproxy *egr_reg_dns(const struct egr_registry *r); /* NULL: no DNS proxy */
struct egr_inspect *egr_reg_inspect(const struct egr_registry *r); /* NULL: none */
const char *egr_reg_state_dir(const struct egr_registry *r);

/* The detach request's "status" (or the lifetime watcher's), for the
 * execution's audit record. 0 or -ENOMEM. */
int egr_reg_set_end_status(struct egr_registry *r, struct egr_sb *sb, const char *status);

#endif /* EGR_REGISTRY_H */
