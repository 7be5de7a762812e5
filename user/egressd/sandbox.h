/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The sandboxes egressd manages: attach, atomic policy update, detach, and
 * adoption of what an earlier egressd left pinned (user/egressd/registry/,
 * docs/architecture.md "The registry"). The kernel maps are what enforces;
 * <state-dir>/sandboxes/<id>.json is what lets a restarted egressd manage
 * it again (the policy document, the cgroup, the ids). This header is the
 * lifecycle API; registry/registry.h has the set's accessors and
 * control/sandbox_ops.h their JSON for the control protocol.
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
#include "registry/registry.h"

/* Why a lifecycle operation failed. The control layer names each code
 * for the protocol (control/sandbox_ops.c, docs/control-protocol.md). */
enum egr_reg_code {
	EGR_REG_INTERNAL = 0,   /* "internal" */
	EGR_REG_BAD_REQUEST,    /* "bad_request" */
	EGR_REG_BAD_CGROUP,     /* "bad_cgroup" */
	EGR_REG_INVALID_POLICY, /* "invalid_policy" */
	EGR_REG_EXISTS,         /* "exists" */
	EGR_REG_NO_SPACE,       /* "no_space" */
};

/* A failed operation: its code and the field/message. */
struct egr_fail {
	enum egr_reg_code code;
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
	/* Before adopted: its state file was an earlier egressd's, unsigned;
	 * the kernel confirmed it (cgroup id, links, entry, rules) and it is
	 * signed now (docs/security.md "Adopting unsigned state once"). */
	void (*upgraded)(void *ctx, const struct egr_sb *sb, const json_t *policy);
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

/* An empty registry (then egr_reg_init); 0 or -ENOMEM. */
int egr_reg_new(struct egr_registry **out);
/* Load the state directory and adopt every pinned sandbox; repair what a
 * crash mid-operation left behind (registry/adopt.c). dns, inspect,
 * learned: NULL when egressd runs without them. 0 or -errno. */
int egr_reg_init(struct egr_registry *r, struct egr_bpf *bpf, const char *state_dir,
		 const struct egr_reg_hooks *hooks, struct egr_dnsproxy *dns,
		 struct egr_inspect *inspect, struct egr_learned *learned);
void egr_reg_free(struct egr_registry *r);
/* Policies of trust "strict" need lsm_cgroup (docs/policy.md). */
void egr_reg_set_host_lsm_cgroup(struct egr_registry *r, bool on);

/* netns: path of the sandbox's network namespace (its DNS proxy listens
 * there), or NULL when it shares egressd's. launcher: the process the
 * sandbox (and its cgroup, the launcher's own) lives as long as, kept in
 * its state; NULL: none (user/egressd/lifetime.c). */
int egr_reg_attach(struct egr_registry *r, const char *cgroup, const char *netns,
		   const json_t *policy, const struct egr_launcher *launcher, bool fresh,
		   struct egr_sb **out, struct egr_fail *f);
/* A device sandbox (issue 25): the host-side device ifname of the network
 * namespace at netns (NULL: egressd's) gets the policy, judged per packet
 * by the device programs (kernel/netdev.h). The same policy, rules, meters,
 * quotas, events and audit as a cgroup sandbox; no DNS proxy (port 53 is
 * dropped), no inspection (refused), no launcher. Nothing half-applied on
 * error. registry/netdev_sb.c. */
int egr_reg_attach_netdev(struct egr_registry *r, const char *ifname, const char *netns,
			  const json_t *policy, struct egr_sb **out, struct egr_fail *f);
/* The device sandbox of ifname in netns (the same path string as its
 * attach), or NULL. */
struct egr_sb *egr_reg_find_netdev(struct egr_registry *r, const char *ifname, const char *netns);
/* Device sandboxes whose device went (deleted, replaced, its namespace
 * gone) are detached, their audit records closed ("device gone"); at most
 * once a second (egr_reg_reclaim calls it). Returns how many. */
unsigned egr_reg_netdev_check(struct egr_registry *r);

/*
 * The attach request's "create" (root peers only: the caller checks): make
 * the cgroup directory at path; real gets the path as made (its parent
 * resolved). *fresh is true when this mkdir made it and only host
 * root can put a process into a child of its parent (every ancestor's
 * cgroup.procs is root's and writable by root alone): no process can have
 * been in it before its links, so an attach with fresh skips the walk of
 * the sockets it already has. An existing directory is refused (-EEXIST,
 * "exists"): only a directory this call made can be fresh. 0 or -errno
 * with f filled in.
 */
int egr_reg_create_cgroup(const char *path, char *real, size_t len, bool *fresh,
			  struct egr_fail *f);
/* Attaches that walked the cgroup's sockets, and those that skipped the
 * walk for a fresh cgroup (status "attach"). */
void egr_reg_attach_walks(const struct egr_registry *r, uint64_t *walked, uint64_t *skipped);
/* Detaches that walked the sandbox's sockets, and those that skipped the
 * walk: a sandbox attached fresh by this process whose cgroup/sock_create
 * never let an inet socket through (status "detach"). */
void egr_reg_detach_walks(const struct egr_registry *r, uint64_t *walked, uint64_t *skipped);
/* Atomic switch to a new policy; then connected sockets whose peer it
 * refuses are destroyed (*closed counts them). */
int egr_reg_update(struct egr_registry *r, struct egr_sb *sb, const json_t *policy,
		   unsigned *closed, struct egr_fail *f);
/* Ends the sandbox's policy: its cgroup is held under deny-all (every TCP
 * and UDP socket of it destroyed, in its netns too) until the kernel
 * releases it; removes sb from the registry and frees it. */
int egr_reg_detach(struct egr_registry *r, struct egr_sb *sb, struct egr_fail *f);

/* Detach of a held sandbox: a tampered one becomes detached (still deny-all
 * until released). 0 or -errno. */
int egr_reg_detach_held(struct egr_registry *r, struct egr_held *h, struct egr_fail *f);
/* Release what the kernel has released: held sandboxes whose links went
 * defunct lose their links, kernel entries and state. At most budget_ns
 * of that (0: no bound), so a burst of released cgroups never holds the
 * control loop (and the replies waiting on it) for long; true when it
 * stopped with released sandboxes left for the next call. */
bool egr_reg_reclaim(struct egr_registry *r, uint64_t budget_ns);
/* Learned names due within horizon_ns whose address a socket of their
 * sandbox is connected to (sock_diag, per network namespace) now live
 * extend_ns from now (registry/keepconn.c). Returns how many were kept. */
unsigned egr_reg_keep_connected(struct egr_registry *r, struct egr_learned *l, uint64_t horizon_ns,
				uint64_t extend_ns);
/* Quarantine (on) or release a sandbox: one update of its kernel entry;
 * quarantining then destroys every connected socket of its cgroups
 * (*closed counts them). 0 or -errno with f filled. */
int egr_reg_set_quarantine(struct egr_registry *r, struct egr_sb *sb, bool on, unsigned *closed,
			   struct egr_fail *f);


#endif /* EGR_SANDBOX_H */
