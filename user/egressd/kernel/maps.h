/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Typed operations on egressd's BPF maps. Only kernel/ calls bpf_map_*:
 * maps.c and walk.c for everything the daemon does, migrate*.c for the
 * upgrade at start; escape.c hands the maps to the guard (bpf_map__*). Every function here
 * takes the opaque handle of bpfstate.h, returns 0 or a negative errno (a
 * full map is -ENOSPC), and never exposes an fd.
 *
 * Who writes which map from user space (the programs write the rest):
 *   egr_sandboxes, egr_cg_storage, egr_sandbox_cgroups   the registry (attach)
 *   egr_allow4/6                                         rules (registry), learned
 *                                                        addresses (learned.c)
 *   egr_quota_sb/_tenant                                 the registry (policy quotas)
 *   egr_proc_home                                        attach (home), escape guard
 *   egr_dns_clients/_n                                   the DNS proxy (purge)
 *   egr_inspect_orig                                     inspection (take once)
 *   egr_meter_*, egr_sb_dests, egr_dests_n,
 *   egr_deny_budget, egr_counters                        read (and forgotten at detach)
 */
#ifndef EGR_KERNEL_MAPS_H
#define EGR_KERNEL_MAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compile.h"
#include "egressd.h"

struct egr_bpf;

/* --- sandboxes and their cgroups -------------------------------------------- */

int egr_bpf_put_sandbox(struct egr_bpf *b, uint32_t sandbox_id, const struct egr_sandbox *sb);
int egr_bpf_get_sandbox(struct egr_bpf *b, uint32_t sandbox_id, struct egr_sandbox *sb);
/* Also drops the sandbox's socket count (sockcount.h). */
int egr_bpf_del_sandbox(struct egr_bpf *b, uint32_t sandbox_id);
/* Every sandbox id in egr_sandboxes. Caller frees *ids. */
int egr_bpf_list_sandbox_ids(struct egr_bpf *b, uint32_t **ids, size_t *n);

/* Does the cgroup's storage name sandbox_id (it exists only while a link
 * of ours is attached, and is named after the attach completed)? */
bool egr_bpf_cgroup_names(struct egr_bpf *b, uint64_t cgroup_id, uint32_t sandbox_id);
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
/* The escape guard's record of process pid (egr_proc_home). -ENOENT: none. */
int egr_bpf_proc_home(const struct egr_bpf *b, uint32_t pid, struct egr_proc_home *out);
/* Is process pid one of a sandbox's, as the guard recorded it (not as /proc
 * says where it is now)? EGR_PROC_ESCAPED: marked escaped; EGR_PROC_AT_HOME:
 * its home is a sandbox still managed; 0: neither (no record, or a home
 * detached since); -errno. The pid must be held (a pidfd checked alive
 * after the call) for the answer to be about the process meant. */
#define EGR_PROC_ESCAPED 1
#define EGR_PROC_AT_HOME 2
int egr_bpf_proc_held(const struct egr_bpf *b, uint32_t pid);
/* Call fn for every process egr_proc_home marks EGR_HOME_ESCAPED; a
 * non-zero return stops. 0, fn's value or -errno. */
int egr_bpf_each_escaped(const struct egr_bpf *b, int (*fn)(void *ctx, uint32_t pid), void *ctx);

/* --- rules and learned addresses --------------------------------------------- */

/* Insert every compiled rule under policy_id; on error the ones inserted are
 * removed again and -ENOSPC (map full) or -errno returned. */
int egr_bpf_put_rules(struct egr_bpf *b, uint32_t policy_id, const struct egr_compiled *c);
/* Remove the rules of policy_id (best effort, counts failures). */
int egr_bpf_del_rules(struct egr_bpf *b, uint32_t policy_id, const struct egr_compiled *c);
/* Does the kernel hold every compiled rule under policy_id, with the same
 * value? (Learned addresses may be there too.) */
bool egr_bpf_rules_match(struct egr_bpf *b, uint32_t policy_id, const struct egr_compiled *c);
/* Remove every rule whose policy id is not in live[0..n). Returns the number
 * removed or -errno. Used at start to reclaim what a crash left behind. */
int egr_bpf_gc_rules(struct egr_bpf *b, const uint32_t *live, size_t n);
/* One address's rule under policy_id (family AF_INET: 4 bytes at addr,
 * AF_INET6: 16), prefix length 32/128 less `less` bits: the exact entry
 * the lookup names, not the longest match. -ENOENT: none. */
int egr_bpf_rule_get(struct egr_bpf *b, int family, const uint8_t *addr, uint32_t policy_id,
		     int less, struct egr_rule *out);
/* Insert or replace the full-length rule of one address. */
int egr_bpf_rule_put(struct egr_bpf *b, int family, const uint8_t *addr, uint32_t policy_id,
		     const struct egr_rule *r);
/* Remove it (absent is no error). */
int egr_bpf_rule_del(struct egr_bpf *b, int family, const uint8_t *addr, uint32_t policy_id);
/* How many entries egr_allow4 (family AF_INET) or egr_allow6 can hold. */
uint64_t egr_bpf_rules_capacity(struct egr_bpf *b, int family);

/* --- quotas -------------------------------------------------------------------- */

enum egr_quota_scope { EGR_QUOTA_SANDBOX, EGR_QUOTA_TENANT };
/* Set one quota entry's limit and window. keep: an existing entry keeps its
 * running window and bytes (read-modify-write; what the kernel adds in
 * between is lost, a few packets at most); otherwise the window starts at
 * now_ns (CLOCK_BOOTTIME, the programs' clock). */
int egr_bpf_quota_put(struct egr_bpf *b, enum egr_quota_scope s, uint32_t id, uint64_t limit,
		      uint64_t window_ns, bool keep, uint64_t now_ns);
int egr_bpf_quota_del(struct egr_bpf *b, enum egr_quota_scope s, uint32_t id);
/* -ENOENT: no quota entry. */
int egr_bpf_quota_get(struct egr_bpf *b, enum egr_quota_scope s, uint32_t id,
		      struct egr_quota *out);

/* --- meters, destinations, budgets, counters ----------------------------------- */

/* A sandbox's or a tenant's meter, summed over CPUs; -ENOENT if it has
 * none yet (nothing counted). */
int egr_bpf_meter_sandbox(struct egr_bpf *b, uint32_t sandbox_id, struct egr_meter *out);
int egr_bpf_meter_tenant(struct egr_bpf *b, uint32_t tenant_id, struct egr_meter *out);

struct egr_dest {
	struct egr_dest_key key;
	struct egr_dest_val val;
};
/* The destinations sandbox_id sent to (up to max into out), and with
 * remove, forget them all. No walk of the map when the sandbox's count
 * says it added none; a removal right after a collecting walk of the same
 * sandbox deletes what that walk found and walks only when the count says
 * more came since. remove only once no program can add entries for the
 * sandbox (links gone, or its deny-all entry in place and its sockets
 * destroyed): the count it trusts is final then. 0 or -errno. */
int egr_bpf_sandbox_dests(struct egr_bpf *b, uint32_t sandbox_id, bool remove,
			  struct egr_dest *out, size_t max, size_t *n);
/* The sandbox's count in egr_dests_n: entries it added to egr_sb_dests and
 * destinations that found no room; both 0 without a count. 0 or -errno. */
int egr_bpf_sandbox_dests_count(struct egr_bpf *b, uint32_t sandbox_id, uint64_t *entries,
				uint64_t *dropped);
/* Destinations of the sandbox that found no room in the map (its cap of
 * EGR_DESTS_PER_SB, or the map full). 0 or -errno. */
int egr_bpf_sandbox_dests_dropped(struct egr_bpf *b, uint32_t sandbox_id, uint64_t *dropped);
/* Drop a detached sandbox's meter, quota and destination state. */
int egr_bpf_forget_sandbox_stats(struct egr_bpf *b, uint32_t sandbox_id);

/* A sandbox's deny-event budget (suppressed and lost figures). -ENOENT:
 * it has none (never denied, or detached). */
int egr_bpf_deny_budget(struct egr_bpf *b, uint32_t sandbox_id, struct egr_deny_budget *out);
/* Call fn for every sandbox's budget; non-zero from fn stops the walk. */
int egr_bpf_each_deny_budget(struct egr_bpf *b,
			     int (*fn)(void *ctx, uint32_t sandbox_id,
				       const struct egr_deny_budget *v),
			     void *ctx);

/* Sum of the per-CPU counters. */
int egr_bpf_counters(struct egr_bpf *b, uint64_t out[EGR_CNT_MAX]);
extern const char *const egr_counter_names[EGR_CNT_MAX];

/* The maps /metrics reports the size of (egressd_map_entries). */
enum egr_kmap_id {
	EGR_KMAP_SANDBOXES,
	EGR_KMAP_METER_SB,
	EGR_KMAP_METER_TENANT,
	EGR_KMAP_QUOTA_SB,
	EGR_KMAP_QUOTA_TENANT,
	EGR_KMAP_SB_DESTS,
	EGR_KMAP_REPORTED /* how many */
};
extern const char *const egr_kmap_names[EGR_KMAP_REPORTED];
/* Entries now in the map (a walk) and its max_entries. 0 or -errno. */
int egr_bpf_kmap_usage(struct egr_bpf *b, enum egr_kmap_id m, uint64_t *entries,
		      uint64_t *capacity);

/* --- the DNS proxy's and the inspection proxy's maps --------------------------- */

/* Who sent from key to a DNS proxy listener (egr_dns_senders): *val gets
 * the recorded socket's sandbox and flags. 1 recorded, 0 not, -errno when
 * the lookup failed. */
int egr_bpf_dns_client_lookup(struct egr_bpf *b, const struct egr_dns_client_key *key,
			      struct egr_dns_client_val *val);
/* Forget every socket recorded for sandbox id, its count and its queue
 * budget. *purged: how many sockets. No walk when its count
 * (egr_dns_clients_n) is absent or 0: the programs count an entry right
 * after adding it and uncount it when they delete it. Call it only when no
 * program can add one for the sandbox (before its links, or under
 * deny-all). 0 or -errno. */
int egr_bpf_dns_clients_purge(struct egr_bpf *b, uint32_t sandbox_id, unsigned *purged);
/* The sandbox's budget on the shared listeners' queues (egr_dns_budget):
 * full, rate per second and burst (rate 0: no bound). 0 or -errno. */
int egr_bpf_dns_budget_set(struct egr_bpf *b, uint32_t sandbox_id, uint32_t rate,
			   uint32_t burst);
/* Datagrams and connections the kernel refused the sandbox past its
 * budget. 0 or -errno (-ENOENT: no budget). */
int egr_bpf_dns_budget_dropped(struct egr_bpf *b, uint32_t sandbox_id, uint64_t *dropped);
/* Take (look up and delete) the original destination of an inspected
 * connection. -ENOENT: none recorded. */
int egr_bpf_inspect_take(struct egr_bpf *b, const struct egr_inspect_key *key,
			 struct egr_inspect_orig *out);

#endif /* EGR_KERNEL_MAPS_H */
