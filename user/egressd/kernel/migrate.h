/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Upgrade in place across kernel/userspace ABI versions (EGR_ABI_VERSION,
 * docs/architecture.md "Pins and versions").
 *
 * egr_bpf_open() calls, in this order:
 *   egr_mig_prepare(dir, &m)    before the object is opened: find pins of an
 *                               older ABI version under dir and check that all
 *                               of it can be converted; refuse (-errno, with
 *                               a message naming what) otherwise, or when the
 *                               pins are newer than this egressd. m = NULL:
 *                               nothing to migrate.
 *   egr_mig_reuse_maps(m, obj)  between open and load: the maps every version
 *                               shares (egr_cg_storage, egr_dns_orig).
 *   egr_mig_commit(m, obj, ops) after load: carry the state into the new maps,
 *                               attach (ops) each sandbox's programs that are
 *                               new since the old version, move every sandbox
 *                               link to the new programs with bpf_link_update,
 *                               unpin the old version.
 *   egr_mig_free(m)
 * Nothing of the old version changes before the first link is switched; a
 * link update that fails rolls back the ones already switched and removes
 * the links added, so a refused migration leaves the old enforcement exactly
 * as it was.
 */
#ifndef EGR_MIGRATE_H
#define EGR_MIGRATE_H

#include <stdint.h>

struct bpf_object;
struct egr_mig;

/* How egr_mig_commit adds the link of a program that is new since the old
 * version to a sandbox (bpfstate.c owns the links). */
struct egr_mig_attach {
	/* Attach prog to the cgroup of that id as a link pinned at
	 * links/<sandbox_id>/<prog>. 0, -ENOENT (the cgroup is gone) or
	 * -errno (nothing left attached). */
	int (*attach)(void *ctx, uint32_t sandbox_id, uint64_t cgroup_id, const char *prog);
	/* Detach and unpin what attach made (a rollback). */
	void (*detach)(void *ctx, uint32_t sandbox_id, const char *prog);
	/* Last before the first link is switched, with the new maps loaded
	 * (may be NULL; what fails in it is logged, never refuses). */
	void (*before_switch)(void *ctx, struct bpf_object *obj);
	void *ctx;
};

int egr_mig_prepare(const char *dir, struct egr_mig **out);
int egr_mig_reuse_maps(struct egr_mig *m, struct bpf_object *obj);
int egr_mig_commit(struct egr_mig *m, struct bpf_object *obj, const struct egr_mig_attach *ops);
/* The ABI version migrated from. */
int egr_mig_from_version(const struct egr_mig *m);
void egr_mig_free(struct egr_mig *m);

#endif /* EGR_MIGRATE_H */
