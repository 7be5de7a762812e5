/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Addresses the DNS proxy learned for each sandbox, and their allowlist
 * entries in the kernel: a /32 or /128 under the sandbox's current policy
 * id, with the ports of the name that resolved to it and an expiry the
 * kernel checks itself. This module is the only writer of such entries, so
 * it can reclaim them, carry them over to a new policy id when the policy
 * changes (re-judged by the new policy) and never touch a static rule.
 */
#ifndef EGR_LEARNED_H
#define EGR_LEARNED_H

#include <stdbool.h>
#include <stdint.h>

#include "kernel/bpfstate.h"
#include "dnspolicy.h"
#include "dnsproxy.h"

struct egr_learned;

/* max_per_sandbox: the cap; past it egr_learned_add() fails -ENOSPC. */
int egr_learned_new(struct egr_bpf *bpf, uint32_t max_per_sandbox, struct egr_learned **out);
void egr_learned_free(struct egr_learned *l);

/* Write the answer's addresses into the sandbox's allowlist (policy_id):
 * all or none. 0, -ENOSPC (cap or map full) or -errno. */
int egr_learned_add(struct egr_learned *l, uint32_t sandbox_id, uint32_t policy_id,
		    const struct egr_dns_learned *a, size_t n);

/* The sandbox is about to switch from old_policy_id to new_policy_id:
 * insert what the new DNS policy still resolves (with its ports) and, for a
 * rebinding address, its dns_rebind_allow still covers, under the new id. The old id's entries stay (the old policy is still in force)
 * until egr_learned_drop_stale(), after the switch. pol NULL drops all. */
int egr_learned_rebase(struct egr_learned *l, uint32_t sandbox_id, uint32_t old_policy_id,
		       uint32_t new_policy_id, const struct egr_dnspolicy *pol);
/* The same, with is_local (egr_dnsproxy_is_local) telling which addresses the
 * host or the sandbox's namespace delivers locally: those need
 * dns_rebind_allow too (docs/dns.md "Rebinding"). */
int egr_learned_rebase_local(struct egr_learned *l, uint32_t sandbox_id, uint32_t old_policy_id,
			     uint32_t new_policy_id, const struct egr_dnspolicy *pol,
			     egr_rebind_local_fn is_local, void *local_ctx);
/* Approvals in force (docs/dns.md "Approvals"): a rebase keeps a name one
 * covers, with its ports, as it keeps the new policy's names. */
void egr_learned_set_grant(struct egr_learned *l, egr_dnsproxy_grant_fn fn, void *ctx);
/* The switch is done: remove the old id's learned entries. */
void egr_learned_drop_stale(struct egr_learned *l, uint32_t sandbox_id);

/* Does a live learned entry let the sandbox reach addr:port? (network-order
 * address, 4 or 16 bytes by family) */
bool egr_learned_allows(struct egr_learned *l, uint32_t sandbox_id, int family,
			const uint8_t *addr, uint16_t port, int protocol);

/* Is addr (network order, by family) live in the sandbox's table as an
 * answer for exactly name (case-insensitive)? For the inspecting proxy:
 * the host a connection names must be the host its address was learned
 * for. */
bool egr_learned_has_name(struct egr_learned *l, uint32_t sandbox_id, int family,
			  const uint8_t *addr, const char *name);
/* The first live (unexpired) name addr was learned for, or NULL (valid
 * until the next call that changes the table). */
const char *egr_learned_name_of(struct egr_learned *l, uint32_t sandbox_id, int family,
				const uint8_t *addr);

/* Sandboxes with a live name expiring by until_boot_ns, into ids (at most
 * max of them; a sandbox once). Returns how many. */
size_t egr_learned_expiring(struct egr_learned *l, uint64_t now_boot_ns, uint64_t until_boot_ns,
			    uint32_t *ids, size_t max);
/* A socket of the sandbox is connected to addr (network order, by family):
 * its live names that would expire before until_boot_ns now expire then, in
 * the kernel too, so the sandbox may reconnect to it (docs/dns.md "Learned
 * addresses and client caches"). An expired name stays expired. 0, -ENOENT
 * (addr never learned) or -errno. */
int egr_learned_keep(struct egr_learned *l, uint32_t sandbox_id, int family, const uint8_t *addr,
		     uint64_t until_boot_ns);

/* Remove expired entries (kernel and table). Returns how many. */
unsigned int egr_learned_reclaim(struct egr_learned *l, uint64_t now_boot_ns);

/* Detach: remove every entry of the sandbox. */
void egr_learned_forget(struct egr_learned *l, uint32_t sandbox_id, uint32_t policy_id);

/* Entries the sandbox holds now. */
size_t egr_learned_count(struct egr_learned *l, uint32_t sandbox_id);

#endif /* EGR_LEARNED_H */
