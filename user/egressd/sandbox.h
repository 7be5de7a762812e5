/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The sandboxes egressd manages: attach, atomic policy update, detach, and
 * adoption of what an earlier egressd left pinned. The kernel maps are what
 * enforces; <state-dir>/sandboxes/<id>.json is what lets a restarted egressd
 * manage it again (the policy document, the cgroup, the ids).
 */
#ifndef EGR_SANDBOX_H
#define EGR_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <jansson.h>

#include "kernel/bpfstate.h"
#include "policy.h"

/* The process a sandbox lives as long as (docs/operations.md, "Lifetime"):
 * an `egressctl run` whose cgroup is the sandbox's own. pid 0: none. start:
 * its start time (/proc/<pid>/stat field 22), so a reused pid is not it. */
struct egr_launcher {
	int pid;
	uint64_t start;
};

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

/* A failed request: a protocol error code (docs/control-protocol.md) and
 * the field/message. */
struct egr_fail {
	const char *code;
	struct egr_error e;
};

/* What egressd's other modules (audit, events, metering export, the DNS
 * proxy) hear of a sandbox's life. Every callback may be NULL. */
struct egr_reg_hooks {
	void *ctx;
	/* After a successful attach; policy is the document now in force. */
	void (*attached)(void *ctx, const struct egr_sb *sb, const json_t *policy);
	/* Adopted from pinned state at start. */
	void (*adopted)(void *ctx, const struct egr_sb *sb, const json_t *policy);
	/* After a successful update; old_sha256 is the policy it replaced and
	 * closed the connections torn down. */
	void (*updated)(void *ctx, const struct egr_sb *sb, const char *old_sha256,
			const json_t *policy, unsigned closed);
	/* About to detach: links still in place, meters and destinations can
	 * still be read. */
	void (*detaching)(void *ctx, const struct egr_sb *sb);
	/* Adoption found state it cannot trust (type "state_tampered") or pins
	 * removed while egressd was away ("pin_removed"); held: sandbox id is
	 * now held under deny-all (false: the kernel has nothing of it). cgroup:
	 * its path, NULL when unknown. */
	void (*tampered)(void *ctx, const char *type, uint32_t id, const char *cgroup,
			 const char *reason, bool held);
};

struct egr_dnsproxy;
struct egr_inspect;
struct egr_learned;

struct egr_registry {
	struct egr_bpf *bpf;
	struct egr_reg_hooks hooks;
	struct egr_dnsproxy *dns;     /* NULL: no DNS proxy (DNS denied) */
	/* NULL: no inspecting proxy (inspected sandboxes get no TCP). Set by
	 * the caller before egr_reg_init(), which keeps it, for adoption. */
	struct egr_inspect *inspect;
	bool host_lsm_cgroup;         /* policies of trust "strict" need it */
	struct egr_learned *learned;
	char state_dir[256];
	char self_cgroup[4096]; /* egressd's own cgroup: never sandboxed */
	struct egr_sb **sbs;
	size_t n, cap;
	uint32_t next_sandbox_id;
	uint32_t next_policy_id;
	char **tenants; /* tenant id = index + 1 */
	size_t ntenants;
	struct egr_held *held;
	size_t nheld, capheld;
	uint8_t *state_key; /* <state-dir>/state.key: HMAC key of the state files */
	size_t state_keylen;
	bool state_key_new; /* made at this start: files of an earlier egressd have no MAC */
};

/* Load the state directory and adopt every pinned sandbox; repair what a
 * crash mid-operation left behind. 0 or -errno. */
int egr_reg_init(struct egr_registry *r, struct egr_bpf *bpf, const char *state_dir,
		 const struct egr_reg_hooks *hooks, struct egr_dnsproxy *dns,
		 struct egr_learned *learned);
void egr_reg_free(struct egr_registry *r);

/* netns: path of the sandbox's network namespace (its DNS proxy listens
 * there), or NULL when it shares egressd's. launcher: the process the
 * sandbox (and its cgroup, the launcher's own) lives as long as, kept in
 * its state; NULL: none (user/egressd/lifetime.c). */
int egr_reg_attach(struct egr_registry *r, const char *cgroup, const char *netns,
		   const json_t *policy, const struct egr_launcher *launcher,
		   struct egr_sb **out, struct egr_fail *f);
/* Atomic switch to a new policy; then connected sockets whose peer it
 * refuses are destroyed (*closed counts them). */
int egr_reg_update(struct egr_registry *r, struct egr_sb *sb, const json_t *policy,
		   unsigned *closed, struct egr_fail *f);
/* Ends the sandbox's policy: its cgroup is held under deny-all (every TCP
 * and UDP socket of it destroyed, in its netns too) until the kernel
 * releases it; removes sb from the registry and frees it; *snapshot gets
 * its JSON. */
int egr_reg_detach(struct egr_registry *r, struct egr_sb *sb, json_t **snapshot,
		   struct egr_fail *f);

/* A held cgroup by path or id; NULL when absent. */
struct egr_held *egr_reg_find_held(struct egr_registry *r, const char *cgroup, uint32_t id);
/* Detach of a held sandbox: a tampered one becomes detached (still deny-all
 * until released). 0 or -errno. */
int egr_reg_detach_held(struct egr_registry *r, struct egr_held *h, struct egr_fail *f);
json_t *egr_held_json(const struct egr_held *h);
/* Release what the kernel has released: held sandboxes whose links went
 * defunct lose their links, kernel entries and state. */
void egr_reg_reclaim(struct egr_registry *r);
size_t egr_reg_held_count(const struct egr_registry *r, enum egr_held_state state);
/* Quarantine (on) or release a sandbox: one update of its kernel entry;
 * quarantining then destroys every connected socket of its cgroups
 * (*closed counts them). 0 or -errno with f filled. */
int egr_reg_set_quarantine(struct egr_registry *r, struct egr_sb *sb, bool on, unsigned *closed,
			   struct egr_fail *f);

/* By cgroup path (compared after realpath) or id; NULL when absent. */
struct egr_sb *egr_reg_find(struct egr_registry *r, const char *cgroup, uint32_t id);
json_t *egr_sb_json(const struct egr_sb *sb);
/* Is the cgroup at path (absolute) a sandbox (or held) or inside one? */
bool egr_reg_confines(struct egr_registry *r, const char *path);

#endif /* EGR_SANDBOX_H */
