/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The kernel side of egressd: the BPF object loaded once, its maps pinned
 * under <bpffs-dir>/maps (reused by the next egressd), and the per-sandbox
 * links pinned under <bpffs-dir>/links/<sandbox-id>/<program>. Destroying
 * this state never detaches a sandbox: only egr_bpf_detach() does.
 */
#ifndef EGR_BPFSTATE_H
#define EGR_BPFSTATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "compile.h"
#include "egressd.h"

struct egressd_bpf;

struct egr_bpf {
	struct egressd_bpf *skel;
	char dir[256];       /* --bpffs-dir */
	int fd_storage, fd_sandboxes, fd_allow4, fd_allow6, fd_counters;
	int fd_meter_sb, fd_meter_tenant, fd_quota_sb, fd_quota_tenant, fd_events, fd_dests;
	int fd_dns_clients, fd_dns_clients_n; /* who may ask each DNS proxy (dns.md) */
	int fd_dests_n; /* per-sandbox entries and drops of fd_dests */
	int fd_deny_budget; /* per-sandbox deny-event budgets and losses */
	bool reused_maps;    /* pinned maps from an earlier egressd were adopted */
};

/* What the host can do, probed once at start (egressctl status shows it). */
struct egr_features {
	bool btf;
	bool cgroup2;
	bool bpffs;
	bool cgroup_sock_addr;
	bool cgroup_sock;
	bool bpf_link;
	/* Layers (docs/security.md): what confines a sandbox on this host. */
	bool setsockopt;  /* cgroup/setsockopt loaded and attached with the rest */
	bool skb;         /* cgroup_skb backstop and inbound deny */
	bool seccomp;     /* the kernel filters syscalls (egressctl run, OCI profile) */
	bool lsm_cgroup;  /* lsm_cgroup/socket_create would load (needs trampolines) */
};

/* The layers as a JSON object (status, logs): {"sock_addr": true, ...}. */
json_t *egr_features_layers(const struct egr_features *f);

/* Mount bpffs at /sys/fs/bpf if nothing is there, create dir, load the
 * programs (reusing pinned maps) and pin the maps. 0 or -errno. */
/* Deny events per second and sandbox the kernel reports one by one, and
 * the burst (set before egr_bpf_open; rate 0: no budget). Programs already
 * attached keep the values they were loaded with. */
extern uint64_t egr_bpf_deny_rate, egr_bpf_deny_burst;

int egr_bpf_open(struct egr_bpf *b, const char *dir, struct egr_features *feat);
void egr_bpf_close(struct egr_bpf *b);

/* Attach every program to the cgroup as links and pin them under
 * links/<sandbox_id>/. On error nothing stays attached. */
int egr_bpf_attach(struct egr_bpf *b, uint32_t sandbox_id, const char *cgroup_path);
/* Detach and unpin the links of sandbox_id (idempotent). */
int egr_bpf_detach(struct egr_bpf *b, uint32_t sandbox_id);
/* Are all of the sandbox's links pinned? */
bool egr_bpf_links_complete(struct egr_bpf *b, uint32_t sandbox_id);
/* Sandbox ids with a links/<id> directory. Caller frees *ids. */
int egr_bpf_pinned_sandboxes(struct egr_bpf *b, uint32_t **ids, size_t *n);

/* Name the sandbox in the cgroup's storage (exists once a link is attached). */
int egr_bpf_set_cgroup_sandbox(struct egr_bpf *b, uint64_t cgroup_id, uint32_t sandbox_id);

int egr_bpf_put_sandbox(struct egr_bpf *b, uint32_t sandbox_id, const struct egr_sandbox *sb);
int egr_bpf_get_sandbox(struct egr_bpf *b, uint32_t sandbox_id, struct egr_sandbox *sb);
int egr_bpf_del_sandbox(struct egr_bpf *b, uint32_t sandbox_id);

/* Insert every compiled rule under policy_id; on error the ones inserted are
 * removed again and -ENOSPC (map full) or -errno returned. */
int egr_bpf_put_rules(struct egr_bpf *b, uint32_t policy_id, const struct egr_compiled *c);
/* Remove the rules of policy_id (best effort, counts failures). */
int egr_bpf_del_rules(struct egr_bpf *b, uint32_t policy_id, const struct egr_compiled *c);
/* Remove every rule whose policy id is not in live[0..n). Returns the number
 * removed or -errno. Used at start to reclaim what a crash left behind. */
int egr_bpf_gc_rules(struct egr_bpf *b, const uint32_t *live, size_t n);
/* Every sandbox id in egr_sandboxes. Caller frees *ids. */
int egr_bpf_list_sandbox_ids(struct egr_bpf *b, uint32_t **ids, size_t *n);

/* A sandbox's or a tenant's meter, summed over CPUs; -ENOENT if it has
 * none yet (nothing counted). */
int egr_bpf_meter_sandbox(struct egr_bpf *b, uint32_t sandbox_id, struct egr_meter *out);
int egr_bpf_meter_tenant(struct egr_bpf *b, uint32_t tenant_id, struct egr_meter *out);
struct egr_dest {
	struct egr_dest_key key;
	struct egr_dest_val val;
};

/* The destinations sandbox_id sent to (up to max into out), and with
 * remove, forget them all. 0 or -errno. */
int egr_bpf_sandbox_dests(struct egr_bpf *b, uint32_t sandbox_id, bool remove,
			  struct egr_dest *out, size_t max, size_t *n);
/* Destinations of the sandbox that found no room in the map (its cap of
 * EGR_DESTS_PER_SB, or the map full). 0 or -errno. */
int egr_bpf_sandbox_dests_dropped(struct egr_bpf *b, uint32_t sandbox_id, uint64_t *dropped);

/* Drop a detached sandbox's meter, quota and destination state. */
int egr_bpf_forget_sandbox_stats(struct egr_bpf *b, uint32_t sandbox_id);

/* Sum of the per-CPU counters. */
int egr_bpf_counters(struct egr_bpf *b, uint64_t out[EGR_CNT_MAX]);
extern const char *const egr_counter_names[EGR_CNT_MAX];

#endif /* EGR_BPFSTATE_H */
