// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Detach: a sandbox's policy ends, its cgroup is held under deny-all until
 * the kernel releases it (then reclaimed); docs/architecture.md, "The
 * registry".
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "dns/dnsproxy.h"
#include "inspect.h"
#include "dns/learned.h"
#include "kernel/sockcount.h"
#include "log.h"
#include "registry/registry_impl.h"

/* The kernel released the cgroup (its links are defunct): nothing of the
 * sandbox can run any more; drop links, entries and state. */
void reg_release_held(struct egr_registry *r, struct egr_held *h)
{
	uint32_t id = h->id;

	if (egr_bpf_detach(r->bpf, id)) {
		log_warn("sandbox %u: its links could not be released; retrying later", id);
		return;
	}
	egr_bpf_del_sandbox(r->bpf, id);
	egr_bpf_forget_sandbox_stats(r->bpf, id);
	egr_state_drop(&r->st, id);
	log_info("sandbox %u: cgroup %s released by the kernel; links and entries reclaimed", id,
		 h->cgroup ? h->cgroup : "(unknown)");
	egr_reg_held_remove(r, h);
}

bool egr_reg_reclaim(struct egr_registry *r, uint64_t budget_ns)
{
	uint64_t start = egr_mono_ns();

	egr_reg_netdev_check(r);
	for (size_t i = 0; i < r->nheld;) {
		struct egr_held *h = &r->held[i];
		uint64_t cg = 0;
		int err = egr_bpf_links_cgroup_id(r->bpf, h->id, &cg);
		size_t before = r->nheld;

		if ((err == 0 && cg == 0) || err == -ENOENT) {
			if (budget_ns && egr_mono_ns() - start >= budget_ns)
				return true;
			reg_release_held(r, h);
		}
		if (r->nheld == before)
			i++;
	}
	return false;
}

int egr_reg_detach_held(struct egr_registry *r, struct egr_held *h, struct egr_fail *f)
{
	struct egr_held next = *h;
	int err;

	if (h->state == EGR_HELD_DETACHED)
		return 0;
	next.state = EGR_HELD_DETACHED;
	snprintf(next.reason, sizeof(next.reason), "detached (was: %s)", h->reason);
	err = egr_state_save_held(&r->st, &next);
	if (err) {
		reg_fail(f, EGR_REG_INTERNAL, NULL, "write state: %s", strerror(-err));
		return err;
	}
	h->state = EGR_HELD_DETACHED;
	memcpy(h->reason, next.reason, sizeof(h->reason));
	log_info("sandbox %u: held sandbox detached; deny-all until its cgroup is released",
		 h->id);
	return 0;
}

/* Tear down everything of a sandbox, links first so that no program runs
 * against a half-removed policy. */
int reg_teardown(struct egr_registry *r, uint32_t id, uint32_t policy_id, const json_t *policy)
{
	int err, ret = 0;

	err = egr_bpf_detach(r->bpf, id);
	if (err) {
		log_error("sandbox %u: detach links: %s", id, strerror(-err));
		return err; /* keep the rest: still enforced, retry possible */
	}
	if ((err = egr_bpf_del_sandbox(r->bpf, id)))
		ret = err;
	egr_bpf_forget_sandbox_stats(r->bpf, id);
	if (r->dns)
		egr_dnsproxy_remove_sandbox(r->dns, id);
	if (r->inspect)
		egr_inspect_remove_sandbox(r->inspect, id);
	if (r->learned)
		egr_learned_forget(r->learned, id, policy_id);
	if (policy)
		reg_delete_policy_rules(r, id, policy_id, policy);
	egr_state_drop(&r->st, id);
	return ret;
}

/*
 * Can the sandbox own no TCP or UDP socket at all? Only when this process
 * made its cgroup with no process in it before the links (sb->fresh: no
 * socket predates egr_sock_create) and egr_sock_create counted none. Any
 * doubt (adopted, the count unreadable) says no: walk. The argument, and
 * what else could own a socket of the cgroup: docs/security.md, row 5 of
 * "Attacks on egressd's own state" (a socket handed out outlives detach).
 */
static bool never_had_sockets(struct egr_registry *r, const struct egr_sb *sb)
{
	uint64_t n = 0;
	int err;

	if (!sb->fresh)
		return false;
	err = egr_bpf_sock_count(r->bpf, sb->id, &n);
	if (err) {
		log_warn("sandbox %u: socket count: %s; walking its sockets", sb->id,
			 strerror(-err));
		return false;
	}
	return n == 0;
}

void egr_reg_detach_walks(const struct egr_registry *r, uint64_t *walked, uint64_t *skipped)
{
	*walked = r->detach_walked;
	*skipped = r->detach_skipped;
}

/*
 * End the sandbox's policy but not its confinement: the state file says
 * "detached" first (a restart holds it under deny-all from there on), then
 * one map update switches the kernel entry to deny-all and every socket of
 * the cgroup is destroyed. The links stay until the kernel releases the
 * cgroup (egr_reg_reclaim). Then what belonged to the policy goes.
 */
static int retire(struct egr_registry *r, const struct egr_sb *sb, const json_t *policy,
		  struct egr_fail *f)
{
	struct egr_held h = { .id = sb->id, .tenant_id = sb->tenant_id,
			      .cgroup_id = sb->cgroup_id, .cgroup = sb->cgroup,
			      .state = EGR_HELD_DETACHED, .since = time(NULL) };
	int err;

	snprintf(h.reason, sizeof(h.reason), "detached");
	err = egr_state_save_held(&r->st, &h);
	if (err) {
		reg_fail(f, EGR_REG_INTERNAL, NULL, "detach sandbox %u: write state: %s", sb->id,
			 strerror(-err));
		return err;
	}
	/* After deny-all: a socket counted after this read was made under it.
	 * A failed deny-all entry removed the sandbox's entry, and its count
	 * with it (egr_bpf_del_sandbox): walk. */
	if (!reg_deny_all(r, sb->id, sb->tenant_id) && never_had_sockets(r, sb)) {
		r->detach_skipped++;
	} else {
		r->detach_walked++;
		reg_destroy_sockets(sb->id, sb->cgroup, sb->cgroup_id, sb->netns);
	}
	if (r->dns)
		egr_dnsproxy_remove_sandbox(r->dns, sb->id);
	if (r->learned)
		egr_learned_forget(r->learned, sb->id, sb->policy_id);
	if (policy)
		reg_delete_policy_rules(r, sb->id, sb->policy_id, policy);
	egr_bpf_forget_sandbox_stats(r->bpf, sb->id);
	if (!egr_reg_held_add(r, sb->id, sb->tenant_id, sb->cgroup_id, sb->cgroup,
			      EGR_HELD_DETACHED, h.reason, h.since))
		log_error("sandbox %u: out of memory; held under deny-all, reclaimed at the next "
			  "start", sb->id);
	return 0;
}

int egr_reg_detach(struct egr_registry *r, struct egr_sb *sb, struct egr_fail *f)
{
	json_t *policy;
	int err;

	if (sb->netdev)
		return reg_detach_netdev(r, sb);
	policy = egr_state_load_policy(&r->st, sb->id);
	if (r->hooks.detaching)
		r->hooks.detaching(r->hooks.ctx, sb);
	err = retire(r, sb, policy, f);
	json_decref(policy);
	if (err)
		return err;
	/* Leaving a detached cgroup is no escape. */
	egr_bpf_forget_cgroup(r->bpf, sb->cgroup_id);
	log_info("sandbox %u detached from %s; deny-all until the kernel releases the cgroup",
		 sb->id, sb->cgroup);
	egr_reg_remove(r, sb);
	reg_quota_sync_tenant(r, sb->tenant_id, NULL); /* another sandbox's tenant limit, or none */
	egr_sb_free(sb);
	return 0;
}
