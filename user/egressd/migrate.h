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
 *   egr_mig_commit(m, obj)      after load: carry the state into the new maps,
 *                               move every sandbox link to the new programs
 *                               with bpf_link_update, unpin the old version.
 *   egr_mig_free(m)
 * Nothing of the old version changes before the first link is switched; a
 * link update that fails rolls back the ones already switched, so a refused
 * migration leaves the old enforcement exactly as it was.
 */
#ifndef EGR_MIGRATE_H
#define EGR_MIGRATE_H

struct bpf_object;
struct egr_mig;

int egr_mig_prepare(const char *dir, struct egr_mig **out);
int egr_mig_reuse_maps(struct egr_mig *m, struct bpf_object *obj);
int egr_mig_commit(struct egr_mig *m, struct bpf_object *obj);
/* The ABI version migrated from. */
int egr_mig_from_version(const struct egr_mig *m);
void egr_mig_free(struct egr_mig *m);

#endif /* EGR_MIGRATE_H */
