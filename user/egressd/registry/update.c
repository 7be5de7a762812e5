// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Update (an atomic switch to a new policy), quarantine (one switch of
 * the kernel entry) and adoption's re-apply of a stored policy;
 * docs/architecture.md, "The registry".
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compile.h"
#include "dns/dnsproxy.h"
#include "dns/learned.h"
#include "log.h"
#include "registry/registry_impl.h"

int egr_reg_update(struct egr_registry *r, struct egr_sb *sb, const json_t *policy,
		   unsigned *closed, struct egr_fail *f)
{
	struct egr_policy p = { 0 };
	struct egr_compiled c = { 0 };
	struct egr_sandbox ksb;
	struct egr_sb next;
	char old_sha[sizeof(sb->sha256)];
	uint32_t old_policy_id = sb->policy_id;
	struct egr_dnspolicy *dpol = NULL;
	struct egr_dnsproxy_local lc;
	struct egr_error e = { { 0 }, { 0 } };
	json_t *old_policy;
	int err;

	err = reg_prepare(r, policy, &p, &c, f);
	if (err)
		return err;
	if (r->dns) {
		err = egr_dnspolicy_new(&p, p.ndns_types ? p.dns_types : NULL, p.ndns_types, &dpol, &e);
		if (err) {
			if (err == -EINVAL)
				reg_fail_policy(f, &e);
			else
				reg_fail(f, EGR_REG_INTERNAL, NULL, "DNS policy: %s", strerror(-err));
			egr_compiled_free(&c);
			egr_policy_free(&p);
			return err;
		}
	}
	/* Before the switch: the listeners must exist when the kernel starts
	 * redirecting to them (a policy turning inspection on). */
	err = reg_start_inspect(r, sb, &p, sb->inspect_port4, sb->inspect_port6, f);
	if (err) {
		egr_dnspolicy_free(dpol);
		egr_compiled_free(&c);
		egr_policy_free(&p);
		return err;
	}
	old_policy = egr_state_load_policy(&r->st, sb->id);

	next = *sb;
	next.policy_id = reg_alloc_policy_id(r);
	next.tenant_id = reg_tenant_id(r, p.tenant);
	next.updated_at = time(NULL);
	if (!next.tenant_id) {
		err = -ENOMEM;
		reg_fail(f, EGR_REG_INTERNAL, NULL, "out of memory");
		goto out;
	}
	/* Build the new rule set under a new policy id, beside the old one. */
	err = egr_bpf_put_rules(r->bpf, next.policy_id, &c);
	if (err) {
		reg_fail_rules(f, err);
		goto out;
	}
	/* Persist first: a crash from here on is repaired at start by applying
	 * the stored (new) policy again. */
	err = egr_state_save_sb(&r->st, &next, policy);
	if (err) {
		reg_fail(f, EGR_REG_INTERNAL, NULL, "write state: %s", strerror(-err));
		egr_bpf_del_rules(r->bpf, next.policy_id, &c);
		goto out;
	}
	/* DNS-learned addresses the new policy still resolves move to the new
	 * id, with the new policy's ports; the rest are dropped. */
	lc.p = r->dns;
	lc.sandbox_id = sb->id;
	if (r->learned && egr_learned_rebase_local(r->learned, sb->id, old_policy_id,
						   next.policy_id, dpol,
						   r->dns ? egr_dnsproxy_is_local : NULL, &lc))
		log_warn("sandbox %u: some DNS-learned addresses did not fit the new policy's "
			 "rules; they need resolving again", sb->id);
	/* The switch: one map update, so every hook sees the old policy or the
	 * new one, never a mix. */
	/* A policy update does not lift a quarantine: only release does. */
	reg_kernel_entry(&ksb, sb, next.policy_id, next.tenant_id, &p);
	err = egr_bpf_put_sandbox(r->bpf, sb->id, &ksb);
	if (err) {
		reg_fail(f, EGR_REG_INTERNAL, NULL, "switch sandbox %u to the new policy: %s",
			 sb->id, strerror(-err));
		egr_bpf_del_rules(r->bpf, next.policy_id, &c);
		if (old_policy)
			egr_state_save_sb(&r->st, sb, old_policy);
		goto out;
	}
	if (r->learned)
		egr_learned_drop_stale(r->learned, sb->id);
	memcpy(old_sha, sb->sha256, sizeof(old_sha));
	sb->policy_id = next.policy_id;
	sb->tenant_id = next.tenant_id;
	sb->updated_at = next.updated_at;
	reg_sb_set_meta(sb, &p, &c);
	reg_quota_apply(r, sb, &p, false);
	if (r->dns) {
		/* The proxy owns dpol from here. */
		if (egr_dnsproxy_update_sandbox(r->dns, sb->id, dpol))
			log_error("sandbox %u: DNS proxy kept the old DNS policy", sb->id);
		dpol = NULL;
	}
	/* Audit mode refuses nothing; an update to enforce tears down. */
	*closed = 0;
	/* A device sandbox has no socket here: its flows' replies are judged
	 * against the entry in force, packet by packet (bpf/netdev.bpf.c). */
	if (!p.audit_mode && !sb->netdev)
		reg_close_refused(r, sb, &c, p.inbound_allow, closed);
	if (r->hooks.updated)
		r->hooks.updated(r->hooks.ctx, sb, old_sha, policy, *closed);
	/* Reclaim the old rule set; nothing refers to it any more. */
	if (old_policy)
		reg_delete_policy_rules(r, sb->id, old_policy_id, old_policy);
	else
		log_warn("sandbox %u: old policy %u not reclaimed (state unreadable); the next "
			 "start collects it", sb->id, old_policy_id);
	log_info("sandbox %u updated: policy %u -> %u (%zu v4, %zu v6 prefixes)", sb->id,
		 old_policy_id, sb->policy_id, sb->n4, sb->n6);
out:
	egr_dnspolicy_free(dpol);
	json_decref(old_policy);
	egr_compiled_free(&c);
	egr_policy_free(&p);
	return err;
}

/* The state's policy in force again under a fresh policy id (the kernel's
 * entry disagrees with the authenticated state): rules, state, entry, in
 * that order; any failure leaves the sandbox denied. Both kinds' adoption. */
void reg_reapply_stored(struct egr_registry *r, struct egr_sb *sb, const struct egr_policy *p,
			const struct egr_compiled *c, json_t *policy)
{
	struct egr_sandbox ksb;

	sb->policy_id = reg_alloc_policy_id(r);
	reg_kernel_entry(&ksb, sb, sb->policy_id, sb->tenant_id, p);
	if (egr_bpf_put_rules(r->bpf, sb->policy_id, c) ||
	    egr_state_save_sb(&r->st, sb, policy) || egr_bpf_put_sandbox(r->bpf, sb->id, &ksb)) {
		log_error("sandbox %u: cannot reapply its policy; it stays denied", sb->id);
		reg_deny_all(r, sb->id, sb->tenant_id);
	}
}

void reg_sync_ports(struct egr_registry *r, const struct egr_sb *sb, const json_t *policy)
{
	struct egr_sandbox ksb;

	if (egr_bpf_get_sandbox(r->bpf, sb->id, &ksb) || ksb.policy_id != sb->policy_id ||
	    (ksb.dns_port4 == sb->dns_port4 && ksb.dns_port6 == sb->dns_port6 &&
	     ksb.inspect_port4 == sb->inspect_port4 && ksb.inspect_port6 == sb->inspect_port6))
		return;
	ksb.dns_port4 = sb->dns_port4;
	ksb.dns_port6 = sb->dns_port6;
	ksb.inspect_port4 = sb->inspect_port4;
	ksb.inspect_port6 = sb->inspect_port6;
	if (egr_bpf_put_sandbox(r->bpf, sb->id, &ksb) || egr_state_save_sb(&r->st, sb, policy))
		log_error("sandbox %u: cannot point DNS at the new proxy ports", sb->id);
}

int egr_reg_set_quarantine(struct egr_registry *r, struct egr_sb *sb, bool on, unsigned *closed,
			   struct egr_fail *f)
{
	struct egr_sandbox ksb;
	int err;

	*closed = 0;
	err = egr_bpf_get_sandbox(r->bpf, sb->id, &ksb);
	if (err) {
		reg_fail(f, EGR_REG_INTERNAL, NULL, "read sandbox %u: %s", sb->id, strerror(-err));
		return err;
	}
	/* The one map update that switches every hook of the sandbox. */
	ksb.quarantined = on ? 1 : 0;
	err = egr_bpf_put_sandbox(r->bpf, sb->id, &ksb);
	if (err) {
		reg_fail(f, EGR_REG_INTERNAL, NULL, "%s sandbox %u: %s",
			 on ? "quarantine" : "release", sb->id, strerror(-err));
		return err;
	}
	sb->quarantined = on;
	sb->quarantined_at = on ? time(NULL) : 0;
	if (!on || sb->netdev)
		return 0;
	/* Established connections were judged at connect time: end them all,
	 * in its network namespace too (the backstop already drops their
	 * packets). */
	*closed = reg_destroy_sockets(sb->id, sb->cgroup, sb->cgroup_id, sb->netns);
	return 0;
}
