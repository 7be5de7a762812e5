/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The kernel side of egressd: the BPF object loaded once, its maps pinned
 * under <bpffs-dir>/v<EGR_ABI_VERSION>/maps (reused by the next egressd,
 * converted by user/egressd/kernel/migrate.c when they are of an older version),
 * and the per-sandbox links pinned under <bpffs-dir>/links/<sandbox-id>/
 * <program> (not versioned: an upgrade moves a link to the new program). Destroying
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

/* Cgroup programs a sandbox gets one link each of, at most. */
#define EGR_MAX_CGROUP_PROGS 16

/* One sandbox's links. egressd holds its own fd of every link, so a removed
 * pin never detaches anything while it runs, and the pin can be made again
 * from the fd (egr_bpf_check_pins). fd[i] is the link of cgroup program i
 * (egr_bpf.prog_names), -1 when it has none. */
struct egr_link_set {
	uint32_t sandbox_id;
	int fd[EGR_MAX_CGROUP_PROGS];
};

struct egr_bpf {
	struct egressd_bpf *skel;
	char dir[256];       /* --bpffs-dir */
	char maps[300];      /* <dir>/v<EGR_ABI_VERSION>/maps: pin maps only here */
	int fd_storage, fd_sandboxes, fd_allow4, fd_allow6, fd_counters;
	int fd_meter_sb, fd_meter_tenant, fd_quota_sb, fd_quota_tenant, fd_events, fd_dests;
	int fd_inspect_orig; /* original destinations of inspected connections */
	int fd_sb_cgroups, fd_proc_home; /* for the escape guard (escape.h) */
	int fd_dns_clients, fd_dns_clients_n; /* who may ask each DNS proxy (dns.md) */
	int fd_dests_n; /* per-sandbox entries and drops of fd_dests */
	int fd_deny_budget; /* per-sandbox deny-event budgets and losses */
	bool reused_maps;    /* pinned maps from an earlier egressd were adopted */
	int migrated_from;   /* ABI version upgraded from at start, 0 = none */
	/* The cgroup programs loaded on this host, in attach order. */
	const char *prog_names[EGR_MAX_CGROUP_PROGS];
	size_t nprogs;
	struct egr_link_set *links;
	size_t nlinks, caplinks;
	int pin_watch_fd; /* inotify on the pin directories; -1: none */
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
	bool escape_guard; /* the cgroup migration guard is in force (escape.h) */
};

/* The layers as a JSON object (status, logs): {"sock_addr": true, ...}. */
json_t *egr_features_layers(const struct egr_features *f);

/* Deny events per second and sandbox the kernel reports one by one, and
 * the burst (set before egr_bpf_open; rate 0: no budget). Programs already
 * attached keep the values they were loaded with. */
extern uint64_t egr_bpf_deny_rate, egr_bpf_deny_burst;

/* Mount bpffs at /sys/fs/bpf if nothing is there, create dir, load the
 * programs (reusing pinned maps, or upgrading an older ABI version's pins
 * in place) and pin the maps. 0 or -errno. */
int egr_bpf_open(struct egr_bpf *b, const char *dir, struct egr_features *feat);
void egr_bpf_close(struct egr_bpf *b);

/* Attach every cgroup program to the cgroup as links, pin them under
 * links/<sandbox_id>/ and keep an fd of each. On error nothing stays
 * attached. */
int egr_bpf_attach(struct egr_bpf *b, uint32_t sandbox_id, const char *cgroup_path);
/* Attach the programs the sandbox has no link of (its pins were removed
 * while no egressd held them), pin and keep them. 0 or -errno. */
int egr_bpf_attach_missing(struct egr_bpf *b, uint32_t sandbox_id, const char *cgroup_path);
/* Detach, unpin and close the links of sandbox_id (idempotent). */
int egr_bpf_detach(struct egr_bpf *b, uint32_t sandbox_id);
/* Are all of the sandbox's links pinned? */
bool egr_bpf_links_complete(struct egr_bpf *b, uint32_t sandbox_id);
/* Open the sandbox's pinned links and keep their fds (adoption). Each must
 * be a cgroup link of the program its pin is named after (attach type and
 * program name): one that is not has its pin removed and counts as missing.
 * 0 when every program has one, -ENOENT when some are missing (those found
 * are kept), -EXDEV when they are attached to different cgroups (kept),
 * another -errno on error. */
int egr_bpf_adopt_links(struct egr_bpf *b, uint32_t sandbox_id);
/* The cgroup id the sandbox's links are attached to, from the kernel
 * (bpf_link_get_info_by_fd): 0 once the cgroup was released and the links
 * went defunct. -ENOENT when egressd holds no link of it. */
int egr_bpf_links_cgroup_id(struct egr_bpf *b, uint32_t sandbox_id, uint64_t *cgroup_id);

/* What egr_bpf_check_pins() found removed (or, for a link, replaced by
 * another object: EGR_PIN_LINK_REPLACED) and pinned again. */
enum egr_pin_kind { EGR_PIN_MAP, EGR_PIN_LINK, EGR_PIN_LINK_REPLACED };
typedef void (*egr_pin_fn)(void *ctx, enum egr_pin_kind kind, uint32_t sandbox_id,
			   const char *path, int err);
/* Make every pin egressd holds an fd of exist again: the bpffs directories,
 * each map, each link of each sandbox; a link pin naming another link than
 * egressd's fd (a rename over it) is unlinked and pinned from the fd. Calls
 * report() for every pin that was missing or replaced (err: 0 pinned again,
 * or why not). Returns how many were. */
int egr_bpf_check_pins(struct egr_bpf *b, egr_pin_fn report, void *ctx);
/* An inotify fd that becomes readable when something is removed from a pin
 * directory (-1 when inotify is unavailable: then only periodic checks);
 * egr_bpf_pin_events() drains it and says whether anything happened. The
 * watches follow egr_bpf_check_pins (directories made again are watched). */
int egr_bpf_pin_watch_fd(const struct egr_bpf *b);
bool egr_bpf_pin_events(struct egr_bpf *b);
/* Sandbox ids with a links/<id> directory. Caller frees *ids. */
int egr_bpf_pinned_sandboxes(struct egr_bpf *b, uint32_t **ids, size_t *n);

/* Does the cgroup's storage name sandbox_id (it exists only while a link
 * of ours is attached, and is named after the attach completed)? */
bool egr_bpf_cgroup_names(struct egr_bpf *b, uint64_t cgroup_id, uint32_t sandbox_id);
/* Does the kernel hold every compiled rule under policy_id, with the same
 * value? (Learned addresses may be there too.) */
bool egr_bpf_rules_match(struct egr_bpf *b, uint32_t policy_id, const struct egr_compiled *c);

/* Name the sandbox in the cgroup's storage (exists once a link is attached)
 * and in egr_sandbox_cgroups (the escape guard's view). */
int egr_bpf_set_cgroup_sandbox(struct egr_bpf *b, uint64_t cgroup_id, uint32_t sandbox_id);
/* The cgroup is no sandbox's any more (detach): leaving it is no escape. */
int egr_bpf_forget_cgroup(struct egr_bpf *b, uint64_t cgroup_id);
/* Give every process now in the cgroup (and below) this sandbox as its home
 * (egr_proc_home), except below a nested sandbox (its own home); the guard's
 * tracepoints keep homes current from then on. *n: processes written. */
int egr_bpf_home_procs(struct egr_bpf *b, const char *cgroup_path, uint64_t cgroup_id,
		       uint32_t sandbox_id, size_t *n);

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
