/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The registry's own view of itself: only the files of user/egressd/registry/ include
 * this. Everyone else has registry.h (the set's accessors) and sandbox.h
 * (its lifecycle operations).
 */
#ifndef EGR_REGISTRY_IMPL_H
#define EGR_REGISTRY_IMPL_H

#include "registry/registry.h"
#include "registry/statefile.h"
#include "sandbox.h"

struct egr_dnsproxy_device;
struct egr_inspect;
struct egr_learned;
struct egr_sbnode;

/* The sandboxes: a dense array (iteration) and three chained hash tables
 * over the same nodes (by sandbox id, by cgroup id, by cgroup path). */
struct egr_sbset {
	struct egr_sbnode **v;
	size_t n, cap;
	struct egr_sbnode **by_id, **by_cg, **by_path;
	size_t nbuckets; /* a power of two, >= n */
};

struct egr_registry {
	struct egr_bpf *bpf;
	struct egr_reg_hooks hooks;
	struct egr_dnsproxy *dns;     /* NULL: no DNS proxy (DNS denied) */
	struct egr_inspect *inspect;  /* NULL: inspected sandboxes get no TCP */
	bool host_lsm_cgroup;         /* policies of trust "strict" need it */
	struct egr_learned *learned;
	struct egr_statedir st;       /* <state-dir>: state files, tenants, key */
	char self_cgroup[4096];       /* egressd's own cgroup: never sandboxed */
	struct egr_sbset set;
	size_t tenant_quota_sbs; /* of set, those whose policy sets a tenant quota */
	uint32_t next_sandbox_id;
	uint64_t gen; /* changes with every add and remove (egr_reg_gen) */
	uint32_t next_policy_id;
	char **tenants; /* tenant id = index + 1 */
	size_t ntenants;
	struct egr_held *held;
	size_t nheld, capheld;
	uint64_t attach_walked, attach_fresh; /* egr_reg_attach_walks() */
	uint64_t detach_walked, detach_skipped; /* egr_reg_detach_walks() */
};

/* An empty registry (no kernel, no state: egr_reg_init() fills those in);
 * NULL with errno set. */
struct egr_registry *egr_reg_alloc(void);
/* The set's own operations (registry.c); the caller keeps the kernel and
 * the state files in step. add: 0 or -ENOMEM (-EEXIST: the id is taken). */
int egr_reg_add(struct egr_registry *r, struct egr_sb *sb);
/* Takes sb out of the set; the caller frees it. */
void egr_reg_remove(struct egr_registry *r, struct egr_sb *sb);
void egr_sb_free(struct egr_sb *sb);
/* The id of tenant name, made if new (*added set: the caller persists the
 * table); 0 when out of memory. */
uint32_t egr_reg_tenant_intern(struct egr_registry *r, const char *name, bool *added);
struct egr_held *egr_reg_held_add(struct egr_registry *r, uint32_t id, uint32_t tenant_id,
				  uint64_t cgroup_id, const char *cgroup,
				  enum egr_held_state state, const char *reason, time_t since);
/* h is a pointer into the held array: it (and later ones) move. */
void egr_reg_held_remove(struct egr_registry *r, struct egr_held *h);

/* --- shared by the lifecycle operations (the files of registry/) ---------------------- */
struct egr_policy;
struct egr_compiled;
struct egr_sandbox;

/* prepare.c: failures, the policy as the kernel sees it, ids, quotas. */
void reg_fail(struct egr_fail *f, enum egr_reg_code code, const char *field, const char *fmt,
	      ...) __attribute__((format(printf, 4, 5)));
void reg_fail_policy(struct egr_fail *f, const struct egr_error *e);
void reg_fail_rules(struct egr_fail *f, int err);
int reg_prepare(struct egr_registry *r, const json_t *policy, struct egr_policy *p,
		struct egr_compiled *c, struct egr_fail *f);
void reg_kernel_entry(struct egr_sandbox *ksb, const struct egr_sb *sb, uint32_t policy_id,
		      uint32_t tenant_id, const struct egr_policy *p);
void reg_sb_set_meta(struct egr_sb *sb, struct egr_policy *p, const struct egr_compiled *c);
/* update.c: the stored policy in force again under a fresh id (adoption). */
void reg_reapply_stored(struct egr_registry *r, struct egr_sb *sb, const struct egr_policy *p,
			const struct egr_compiled *c, json_t *policy);
uint32_t reg_tenant_id(struct egr_registry *r, const char *tenant);
uint32_t reg_alloc_policy_id(struct egr_registry *r);
int reg_quota_sync_tenant(struct egr_registry *r, uint32_t tid, const struct egr_sb *prefer);
void reg_quota_apply(struct egr_registry *r, struct egr_sb *sb, const struct egr_policy *p,
		     bool fresh);
int reg_delete_policy_rules(struct egr_registry *r, uint32_t sandbox_id, uint32_t policy_id,
			    const json_t *policy);

/* services.c: what a sandbox has outside the maps (cgroup checks, DNS and
 * inspecting proxies, sockets, escape-guard marks). */
int reg_check_cgroup(struct egr_registry *r, const char *cgroup, char *real,
		     struct egr_fail *f);
int reg_deny_all(struct egr_registry *r, uint32_t id, uint32_t tenant_id);
unsigned reg_destroy_sockets(uint32_t id, const char *cgroup, uint64_t cgroup_id,
			     const char *netns);
/* dev: a device sandbox's listeners (bound to its device), NULL for a
 * cgroup sandbox's (its namespace's shared loopback listeners). */
int reg_start_dns(struct egr_registry *r, struct egr_sb *sb, const struct egr_policy *p,
		  const struct egr_dnsproxy_device *dev, uint16_t want4, uint16_t want6,
		  struct egr_fail *f);
int reg_start_inspect(struct egr_registry *r, struct egr_sb *sb, const struct egr_policy *p,
		      uint16_t want4, uint16_t want6, struct egr_fail *f);
void reg_home_procs(struct egr_registry *r, const struct egr_sb *sb, const char *cgroup);
void reg_close_refused(struct egr_registry *r, const struct egr_sb *sb,
		       const struct egr_compiled *c, bool inbound_allow, unsigned *closed);

/* update.c: the kernel entry's DNS and inspect ports as sb's (an adoption
 * that had to open its listeners on other ports), and the state with them. */
void reg_sync_ports(struct egr_registry *r, const struct egr_sb *sb, const json_t *policy);

/* detach.c: what detach, adoption and a re-attach of a held cgroup share. */
int reg_teardown(struct egr_registry *r, uint32_t id, uint32_t policy_id, const json_t *policy);
void reg_release_held(struct egr_registry *r, struct egr_held *h);

/* netdev_sb.c: device sandboxes (the record's cgroup is their key). */
int reg_netdev_key(const char *ifname, const char *netns, char *buf, size_t len);
int reg_detach_netdev(struct egr_registry *r, struct egr_sb *sb);
struct egr_sb *reg_adopt_netdev(struct egr_registry *r, uint32_t id, json_t *st);

#endif /* EGR_REGISTRY_IMPL_H */
