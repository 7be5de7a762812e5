// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * A policy as the kernel sees it: parse and compile, the sandbox entry,
 * the quota maps, ids; the failure record every lifecycle step fills.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "compile.h"
#include "kernel/maps.h"
#include "log.h"
#include "registry/registry_impl.h"

void reg_fail(struct egr_fail *f, enum egr_reg_code code, const char *field, const char *fmt, ...)
{
	va_list ap;

	f->code = code;
	snprintf(f->e.field, sizeof(f->e.field), "%s", field ? field : "");
	va_start(ap, fmt);
	vsnprintf(f->e.message, sizeof(f->e.message), fmt, ap);
	va_end(ap);
}

void reg_fail_policy(struct egr_fail *f, const struct egr_error *e)
{
	f->code = EGR_REG_INVALID_POLICY;
	snprintf(f->e.field, sizeof(f->e.field), "policy%s%s", e->field[0] ? "." : "", e->field);
	snprintf(f->e.message, sizeof(f->e.message), "%s", e->message);
}

/* --- the policy as the kernel sees it ----------------------------------------- */

void reg_sb_set_meta(struct egr_sb *sb, struct egr_policy *p, const struct egr_compiled *c)
{
	free(sb->tenant);
	free(sb->execution_id);
	free(sb->principal);
	free(sb->tool);
	free(sb->version);
	/* Move the strings: the policy is freed right after. */
	sb->tenant = p->tenant;
	sb->execution_id = p->execution_id;
	sb->principal = p->principal;
	sb->tool = p->tool;
	sb->version = p->version;
	p->tenant = p->execution_id = p->principal = p->tool = p->version = NULL;
	json_decref(sb->container);
	sb->container = p->container;
	p->container = NULL;
	memcpy(sb->sha256, p->sha256, sizeof(sb->sha256));
	sb->n4 = c->n4;
	sb->n6 = c->n6;
	sb->nnames = 0;
	sb->audit_mode = p->audit_mode;
	sb->breaker_max_denies = p->breaker_max_denies;
	sb->breaker_window_s = p->breaker_window_s;
	for (size_t i = 0; i < p->nallow; i++)
		if (p->allow[i].kind == EGR_HOST_NAME)
			sb->nnames++;
}

/* The kernel's view of a policy's switches. */
static uint32_t sandbox_flags(const struct egr_policy *p)
{
	return p->sb_flags | (p->inbound_allow ? EGR_SB_INBOUND_ALLOW : 0) |
	       (p->inspect ? EGR_SB_INSPECT : 0) |
	       (p->escape_alert ? EGR_SB_ESCAPE_ALERT : 0) |
	       (p->audit_mode ? EGR_SB_AUDIT : 0);
}

/* --- egress quotas (docs/metering.md) ----------------------------------------- */

/* The egr_sandboxes copy of the sandbox's own limit. */
static void quota_fields(struct egr_sandbox *ksb, const struct egr_policy *p)
{
	ksb->quota_bytes = p->quota_bytes;
	ksb->quota_window_ns = p->quota_bytes ? p->quota_window_s * 1000000000ULL : 0;
}

/* The tenant's quota: the limit of prefer if it sets one, else that of the
 * most recently updated live sandbox of the tenant that sets one (last
 * writer wins), else none. */
int reg_quota_sync_tenant(struct egr_registry *r, uint32_t tid, const struct egr_sb *prefer)
{
	const struct egr_sb *src = prefer && prefer->tenant_quota_bytes ? prefer : NULL;

	struct egr_reg_iter it = { 0 };

	/* No scan when no sandbox sets one: attach is not O(sandboxes). */
	for (const struct egr_sb *o; !src && r->tenant_quota_sbs && (o = egr_reg_next(r, &it));) {

		if (o == prefer || o->tenant_id != tid || !o->tenant_quota_bytes)
			continue;
		if (!src || o->updated_at > src->updated_at)
			src = o;
	}
	if (!src)
		return egr_bpf_quota_del(r->bpf, EGR_QUOTA_TENANT, tid);
	return egr_bpf_quota_put(r->bpf, EGR_QUOTA_TENANT, tid, src->tenant_quota_bytes,
				 src->quota_window_ns, true, egr_boot_ns() /* bpf_ktime_get_boot_ns() */);
}

/* Write the quota maps for sb's policy p (attach: a fresh window; update and
 * adoption: the running window is kept). Failures are logged; the policy
 * stays in force, without its quota. */
void reg_quota_apply(struct egr_registry *r, struct egr_sb *sb, const struct egr_policy *p,
			bool fresh)
{
	int err;

	sb->quota_bytes = p->quota_bytes;
	if (egr_reg_by_id(r, sb->id) == sb && !sb->tenant_quota_bytes != !p->tenant_quota_bytes) {
		/* In the set: its count follows (egr_reg_add counts the others). */
		if (p->tenant_quota_bytes)
			r->tenant_quota_sbs++;
		else
			r->tenant_quota_sbs--;
	}
	sb->tenant_quota_bytes = p->tenant_quota_bytes;
	sb->quota_window_ns = p->quota_window_s * 1000000000ULL;
	if (sb->quota_bytes)
		err = egr_bpf_quota_put(r->bpf, EGR_QUOTA_SANDBOX, sb->id, sb->quota_bytes,
					sb->quota_window_ns, !fresh, egr_boot_ns());
	else
		err = egr_bpf_quota_del(r->bpf, EGR_QUOTA_SANDBOX, sb->id);
	if (err)
		log_error("sandbox %u: write its egress quota: %s", sb->id, strerror(-err));
	err = reg_quota_sync_tenant(r, sb->tenant_id, sb);
	if (err)
		log_error("sandbox %u: write tenant %u's egress quota: %s", sb->id, sb->tenant_id,
			  strerror(-err));
}

/* Parse + compile; on error f says why. r non-NULL: a new policy being
 * applied (not one being adopted or reclaimed), so also refuse what this
 * host cannot enforce. */
int reg_prepare(struct egr_registry *r, const json_t *policy, struct egr_policy *p,
		struct egr_compiled *c, struct egr_fail *f)
{
	struct egr_error e = { { 0 }, { 0 } };
	int err;

	err = egr_policy_from_json(policy, p, &e);
	if (err) {
		if (err == -EINVAL)
			reg_fail_policy(f, &e);
		else
			reg_fail(f, EGR_REG_INTERNAL, NULL, "parse policy: %s", strerror(-err));
		return err;
	}
	err = egr_policy_compile(p, c, &e);
	if (err) {
		if (err == -EINVAL)
			reg_fail_policy(f, &e);
		else
			reg_fail(f, EGR_REG_INTERNAL, NULL, "compile policy: %s", strerror(-err));
		egr_policy_free(p);
		return err;
	}
	if (r && p->trust_strict && !r->host_lsm_cgroup) {
		/* Without lsm_cgroup nothing in the kernel sees AF_PACKET, AF_XDP
		 * or AF_VSOCK sockets of a command not started by egressctl run
		 * (seccomp) or with the OCI profile: refuse rather than run it
		 * less confined than its trust class says. */
		f->code = EGR_REG_INVALID_POLICY;
		snprintf(f->e.field, sizeof(f->e.field), "policy.network.trust");
		snprintf(f->e.message, sizeof(f->e.message),
			 "\"strict\" needs lsm_cgroup/socket_create to see every socket family, "
			 "and this host cannot load it (no BPF trampolines); use \"standard\" "
			 "with egressctl run or the OCI seccomp profile");
		egr_compiled_free(c);
		egr_policy_free(p);
		return -EINVAL;
	}
	return 0;
}

void reg_fail_rules(struct egr_fail *f, int err)
{
	if (err == -ENOSPC)
		reg_fail(f, EGR_REG_NO_SPACE, NULL, "the allowlist maps are full; nothing was applied");
	else
		reg_fail(f, EGR_REG_INTERNAL, NULL, "insert rules: %s; nothing was applied", strerror(-err));
}

/* Recompile a sandbox's stored policy to find the keys of its rules. */
int reg_delete_policy_rules(struct egr_registry *r, uint32_t sandbox_id, uint32_t policy_id,
			       const json_t *policy)
{
	struct egr_policy p = { 0 };
	struct egr_compiled c = { 0 };
	struct egr_fail f;
	int err;

	err = reg_prepare(NULL, policy, &p, &c, &f);
	if (err) {
		log_warn("sandbox %u: cannot recompile its policy to reclaim rules of policy %u: %s",
			 sandbox_id, policy_id, f.e.message);
		return err;
	}
	err = egr_bpf_del_rules(r->bpf, policy_id, &c);
	egr_compiled_free(&c);
	egr_policy_free(&p);
	return err;
}

/* The kernel's entry of sandbox sb under policy p, with policy and tenant
 * ids: the one place every field of it is filled (attach, update, adoption
 * and adoption's check of what the kernel holds; sb NULL: no ports, not
 * quarantined). A policy update does not lift a quarantine: only release
 * does, so the entry carries sb's. */
void reg_kernel_entry(struct egr_sandbox *ksb, const struct egr_sb *sb, uint32_t policy_id,
		      uint32_t tenant_id, const struct egr_policy *p)
{
	memset(ksb, 0, sizeof(*ksb));
	ksb->policy_id = policy_id;
	ksb->tenant_id = tenant_id;
	ksb->flags = sandbox_flags(p);
	ksb->families = p->families;
	quota_fields(ksb, p);
	if (!sb)
		return;
	ksb->dns_port4 = sb->dns_port4;
	ksb->dns_port6 = sb->dns_port6;
	ksb->inspect_port4 = sb->inspect_port4;
	ksb->inspect_port6 = sb->inspect_port6;
	ksb->quarantined = sb->quarantined;
}

/* Tenant ids index the kernel's tenant meters and quotas, which outlive
 * egressd: tenants.json keeps the name of every id ever given out, so a
 * restarted egressd (and its billing export) maps them the same. */
uint32_t reg_tenant_id(struct egr_registry *r, const char *tenant)
{
	bool added;
	uint32_t id = egr_reg_tenant_intern(r, tenant, &added);

	if (added)
		egr_state_tenants_save(&r->st, r->tenants, r->ntenants);
	return id;
}

uint32_t reg_alloc_policy_id(struct egr_registry *r)
{
	uint32_t id = r->next_policy_id++;

	if (r->next_policy_id == EGR_ID_NONE)
		r->next_policy_id = 1;
	return id;
}
