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

/* The process a sandbox lives as long as (docs/operations.md, "Lifetime"):
 * an `egressctl run` whose cgroup is the sandbox's own. pid 0: none. start:
 * its start time (/proc/<pid>/stat field 22), so a reused pid is not it. */
struct egr_launcher {
	int pid;
	uint64_t start;
};

/* One sandbox, as the registry keeps it. Other modules read it; only the
 * registry's lifecycle operations write it. */
struct egr_sb {
	uint32_t id;
	uint32_t policy_id;
	uint32_t tenant_id;
	uint64_t cgroup_id;
	char *cgroup;
	char *tenant, *execution_id, *principal, *tool, *version;
	char sha256[65];
	size_t n4, n6, nnames;
	time_t attached_at, updated_at;
	char *netns;              /* network namespace path, NULL = egressd's own */
	uint16_t dns_port4, dns_port6; /* its DNS proxy listeners; 0 = none */
	uint16_t inspect_port4, inspect_port6; /* its inspecting proxy (network.inspect) */
	/* limits in force (docs/metering.md); 0 = none */
	uint64_t quota_bytes, tenant_quota_bytes, quota_window_ns;
	char *end_status;         /* how its command ended, as the detach request said */
	int audit_mode;           /* network.mode "audit" */
	uint32_t breaker_max_denies, breaker_window_s; /* network.breaker; 0 = none */
	bool quarantined;         /* mirrors egr_sandbox.quarantined in the kernel */
	time_t quarantined_at;    /* 0 when adopted quarantined (unknown) */
	struct egr_launcher launcher; /* pid 0: not tied to a launcher */
};

/* A cgroup egressd holds under deny-all without a policy of its own
 * (docs/architecture.md, "Held sandboxes"): a detached sandbox, until the
 * kernel releases its cgroup (its links go defunct), or a sandbox whose state
 * egressd could not trust at start. Its links stay, pointing at an entry
 * that denies everything; attaching its cgroup again replaces that. */
enum egr_held_state { EGR_HELD_DETACHED, EGR_HELD_TAMPERED };

struct egr_held {
	uint32_t id;
	uint32_t tenant_id;
	uint64_t cgroup_id; /* from its links (the kernel) */
	char *cgroup;       /* path; NULL: unknown */
	enum egr_held_state state;
	char reason[256];
	time_t since;
};

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
