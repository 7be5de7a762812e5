// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "approvals.h"
#include "alerts.h" /* egr_rfc3339_ns */
#include "clock.h"
#include "dns/dnsproxy.h"
#include "log.h"
#include "obs/auditlog.h"
#include "obs/bus.h"
#include "registry/registry.h"
#include "sandbox.h"

struct grant {
	char name[EGR_DNS_NAME_BUF];
	enum egr_approval_scope scope;
	uint32_t origin;          /* the sandbox that asked ... */
	uint64_t origin_cgroup;   /* ... and its cgroup: ids are reused */
	char *key;                /* the origin's tenant or execution id (scope) */
	struct egr_dns_ports ports;
	uint64_t expires_ns;      /* egr_mono_ns(); 0: the origin's life */
};

struct egr_approvals {
	struct egr_registry *reg;
	struct egr_bus *bus;
	struct egr_auditlog *al;
	struct grant *g;
	size_t n;
};

static const char *const state_names[] = {
	[EGR_ASK_PENDING] = "pending", [EGR_ASK_APPROVED] = "approved",
	[EGR_ASK_DENIED] = "denied",   [EGR_ASK_TIMEOUT] = "timeout",
	[EGR_ASK_FULL] = "refused",    [EGR_ASK_GONE] = "gone",
};

const char *egr_approval_scope_name(enum egr_approval_scope s)
{
	return s == EGR_SCOPE_TENANT ? "tenant" : s == EGR_SCOPE_EXECUTION ? "execution" : "sandbox";
}

int egr_approvals_new(struct egr_registry *reg, struct egr_approvals **out)
{
	*out = calloc(1, sizeof(**out));
	if (!*out)
		return -ENOMEM;
	(*out)->reg = reg;
	return 0;
}

void egr_approvals_free(struct egr_approvals *ap)
{
	if (!ap)
		return;
	for (size_t i = 0; i < ap->n; i++)
		free(ap->g[i].key);
	free(ap->g);
	free(ap);
}

void egr_approvals_set_obs(struct egr_approvals *ap, struct egr_bus *bus, struct egr_auditlog *al)
{
	ap->bus = bus;
	ap->al = al;
}

void egr_approvals_ports_text(const struct egr_dns_ports *ports, char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = '\0';
	for (uint32_t i = 0; i < ports->nranges && off < len; i++) {
		const struct egr_port_range *r = &ports->ranges[i];

		for (int pr = 0; pr < 2; pr++) {
			uint16_t bit = pr ? EGR_PROTO_UDP : EGR_PROTO_TCP;
			int n;

			if (!(r->protos & bit))
				continue;
			if (r->lo == r->hi)
				n = snprintf(buf + off, len - off, "%s%s/%u", off ? "," : "",
					     pr ? "udp" : "tcp", r->lo);
			else if (r->lo == 0 && r->hi == 65535)
				n = snprintf(buf + off, len - off, "%s%s/*", off ? "," : "",
					     pr ? "udp" : "tcp");
			else
				n = snprintf(buf + off, len - off, "%s%s/%u-%u", off ? "," : "",
					     pr ? "udp" : "tcp", r->lo, r->hi);
			if (n < 0 || (size_t)n >= len - off)
				return;
			off += (size_t)n;
		}
	}
}

/* Still the sandbox the grant was made for (alive, same cgroup)? */
static bool origin_alive(struct egr_approvals *ap, const struct grant *g)
{
	const struct egr_sb *o = egr_reg_by_id(ap->reg, g->origin);

	return o && o->cgroup_id == g->origin_cgroup;
}

/* Grants whose TTL passed or whose origin is gone. */
static void sweep(struct egr_approvals *ap)
{
	uint64_t now = egr_mono_ns();

	for (size_t i = 0; i < ap->n;) {
		struct grant *g = &ap->g[i];

		if ((!g->expires_ns || g->expires_ns > now) && origin_alive(ap, g)) {
			i++;
			continue;
		}
		log_info("approvals: %s (scope %s, from sandbox %u) expired", g->name,
			 egr_approval_scope_name(g->scope), g->origin);
		free(g->key);
		ap->g[i] = ap->g[--ap->n];
	}
}

static bool covers(const struct grant *g, const struct egr_sb *sb)
{
	switch (g->scope) {
	case EGR_SCOPE_SANDBOX:
		return sb->id == g->origin && sb->cgroup_id == g->origin_cgroup;
	case EGR_SCOPE_EXECUTION:
		return sb->execution_id && !strcmp(sb->execution_id, g->key);
	case EGR_SCOPE_TENANT:
		return sb->tenant && !strcmp(sb->tenant, g->key);
	}
	return false;
}

bool egr_approvals_grant(void *ctx, uint32_t sandbox_id, const char *qname,
			 struct egr_dns_ports *ports)
{
	struct egr_approvals *ap = ctx;
	const struct egr_sb *sb;
	bool found = false;

	if (!ap || !ap->n)
		return false;
	sb = egr_reg_by_id(ap->reg, sandbox_id);
	if (!sb)
		return false;
	sweep(ap);
	/* Several grants of one name (two scopes): the union of their ports,
	 * up to what a rule holds. */
	for (size_t i = 0; i < ap->n; i++) {
		const struct grant *g = &ap->g[i];

		if (strcasecmp(g->name, qname) || !covers(g, sb))
			continue;
		if (!found) {
			*ports = g->ports;
			found = true;
			continue;
		}
		for (uint32_t k = 0; k < g->ports.nranges && ports->nranges < EGR_MAX_PORT_RANGES; k++)
			ports->ranges[ports->nranges++] = g->ports.ranges[k];
	}
	return found;
}

static void publish(struct egr_approvals *ap, const struct egr_dns_ask *a, const char *state,
		    const struct egr_approval_decision *d, const struct egr_dns_ports *ports)
{
	const struct egr_sb *sb;
	char ptxt[256];

	if (!ap->bus)
		return; /* egressd is stopping: the subscribers are gone */
	sb = egr_reg_by_id(ap->reg, a->sandbox_id);
	struct egr_approval_event ev = {
		.id = a->id,
		.sandbox_id = a->sandbox_id,
		.tenant = a->tenant,
		.execution_id = sb ? sb->execution_id : NULL,
		.name = a->qname,
		.qtype = a->qtype,
		.state = state,
		.scope = d && d->approve ? egr_approval_scope_name(d->scope) : NULL,
		.ports = ptxt,
		.ttl_s = d ? d->ttl_s : 0,
		.approver_uid = d ? (int64_t)d->approver.uid : -1,
		.approver_pid = d ? (int64_t)d->approver.pid : -1,
		.reason = d ? d->reason : NULL,
		.deadline_unix_ns = a->deadline_unix_ns,
	};
	struct egr_rec r = { .kind = EGR_REC_APPROVAL, .sandbox = a->sandbox_id, .approval = &ev };

	egr_approvals_ports_text(ports ? ports : &a->ports, ptxt, sizeof(ptxt));
	egr_bus_publish(ap->bus, &r);
}

void egr_approvals_on_ask(void *ctx, const struct egr_dns_ask *a)
{
	struct egr_approvals *ap = ctx;

	/* Decisions are published by egr_approvals_decide(), with who made
	 * them; the proxy reports the rest (held, timed out, refused, gone). */
	if (!ap || a->state == EGR_ASK_APPROVED || a->state == EGR_ASK_DENIED)
		return;
	publish(ap, a, state_names[a->state], NULL, NULL);
}

/* The decision as a policy_change (change "approval") of the sandbox the
 * request came from; an approval also goes into its execution record. */
static void audit(struct egr_approvals *ap, const struct egr_sb *sb, const struct egr_dns_ask *a,
		  const struct egr_approval_decision *d, const struct egr_dns_ports *granted)
{
	char ptxt[256];
	json_t *detail;

	egr_approvals_ports_text(granted ? granted : &a->ports, ptxt, sizeof(ptxt));
	detail = json_pack("{s:I, s:s, s:i, s:s, s:s, s:s?, s:o, s:s, s:{s:I, s:I, s:I}}",
			   "request", (json_int_t)a->id, "name", a->qname, "qtype", (int)a->qtype,
			   "decision", d->approve ? "approved" : "denied", "ports", ptxt,
			   "scope", d->approve ? egr_approval_scope_name(d->scope) : NULL,
			   "ttl_s", d->approve && d->ttl_s ? json_integer((json_int_t)d->ttl_s)
							   : json_null(),
			   "reason", d->reason ? d->reason : "", "approver", "uid",
			   (json_int_t)d->approver.uid, "gid", (json_int_t)d->approver.gid, "pid",
			   (json_int_t)d->approver.pid);
	egr_auditlog_approval(ap->al, sb, detail);
}

int egr_approvals_decide(struct egr_approvals *ap, const struct egr_approval_decision *d,
			 const char **why)
{
	struct egr_dnsproxy *dns = egr_reg_dns(ap->reg);
	const struct egr_dns_ask *a = egr_dnsproxy_ask_find(dns, d->id);
	struct egr_dns_ask copy;
	const struct egr_sb *sb;
	char name[EGR_DNS_NAME_BUF];
	struct grant *g;
	int err;

	*why = NULL;
	if (!a)
		return -ENOENT;
	sb = egr_reg_by_id(ap->reg, a->sandbox_id);
	if (!sb)
		return -ENOENT;
	/* The proxy's copy goes when it is decided. */
	copy = *a;
	snprintf(name, sizeof(name), "%s", a->qname);
	copy.qname = name;
	copy.tenant = sb->tenant;
	if (d->approve) {
		const char *key = d->scope == EGR_SCOPE_TENANT ? sb->tenant : sb->execution_id;

		if (d->scope == EGR_SCOPE_EXECUTION && (!key || !*key)) {
			*why = "the sandbox has no execution_id: scope execution cannot apply";
			return -EINVAL;
		}
		sweep(ap);
		if (ap->n >= EGR_APPROVALS_MAX_GRANTS)
			return -ENOSPC;
		g = realloc(ap->g, (ap->n + 1) * sizeof(*g));
		if (!g)
			return -ENOMEM;
		ap->g = g;
		g = &ap->g[ap->n];
		memset(g, 0, sizeof(*g));
		snprintf(g->name, sizeof(g->name), "%s", name);
		g->scope = d->scope;
		g->origin = sb->id;
		g->origin_cgroup = sb->cgroup_id;
		g->key = d->scope == EGR_SCOPE_SANDBOX ? NULL : strdup(key);
		if (d->scope != EGR_SCOPE_SANDBOX && !g->key)
			return -ENOMEM;
		g->ports = d->have_ports ? d->ports : copy.ports;
		g->expires_ns = d->ttl_s ? egr_mono_ns() + d->ttl_s * 1000000000ULL : 0;
		ap->n++;
	}
	/* Audited before the tool gets its answer: nothing is reached
	 * without its decision in the chain. */
	if (ap->al)
		audit(ap, sb, &copy, d, d->approve ? &ap->g[ap->n - 1].ports : NULL);
	publish(ap, &copy, d->approve ? "approved" : "denied", d,
		d->approve ? &ap->g[ap->n - 1].ports : NULL);
	err = egr_dnsproxy_ask_decide(dns, d->id, d->approve,
				      d->approve ? NULL : "not approved");
	log_info("approvals: request %llu (%s, sandbox %u) %s by uid %u pid %d%s%s",
		 (unsigned long long)d->id, name, sb->id, d->approve ? "approved" : "denied",
		 d->approver.uid, d->approver.pid, d->reason ? ": " : "", d->reason ? d->reason : "");
	return err;
}

json_t *egr_approvals_json(struct egr_approvals *ap)
{
	const struct egr_dns_ask *list[256];
	size_t n = egr_dnsproxy_ask_list(egr_reg_dns(ap->reg), list, 256);
	json_t *pending = json_array(), *grants = json_array();
	uint64_t now = egr_mono_ns();
	char ptxt[256];

	if (!pending || !grants) {
		json_decref(pending);
		json_decref(grants);
		return NULL;
	}
	for (size_t i = 0; i < n && i < 256; i++) {
		const struct egr_dns_ask *a = list[i];
		const struct egr_sb *sb = egr_reg_by_id(ap->reg, a->sandbox_id);
		char since[40];

		egr_rfc3339_ns(a->since_unix_ns, since, sizeof(since));
		egr_approvals_ports_text(&a->ports, ptxt, sizeof(ptxt));
		json_array_append_new(
			pending,
			json_pack("{s:I, s:I, s:s, s:s?, s:s?, s:s, s:i, s:s, s:I, s:I, s:s}", "id",
				  (json_int_t)a->id, "sandbox", (json_int_t)a->sandbox_id, "tenant",
				  a->tenant, "execution_id", sb ? sb->execution_id : NULL, "cgroup",
				  sb ? sb->cgroup : NULL, "name", a->qname, "qtype", (int)a->qtype,
				  "since", since, "timeout_in_s",
				  (json_int_t)(a->deadline_unix_ns > egr_clock_ns(CLOCK_REALTIME)
						       ? (a->deadline_unix_ns -
							  egr_clock_ns(CLOCK_REALTIME)) / 1000000000ULL
						       : 0),
				  "waiting", (json_int_t)a->waiting, "ports", ptxt));
	}
	sweep(ap);
	for (size_t i = 0; i < ap->n; i++) {
		const struct grant *g = &ap->g[i];

		egr_approvals_ports_text(&g->ports, ptxt, sizeof(ptxt));
		json_array_append_new(
			grants, json_pack("{s:s, s:s, s:s?, s:I, s:s, s:o}", "name", g->name, "scope",
					  egr_approval_scope_name(g->scope), "key", g->key, "sandbox",
					  (json_int_t)g->origin, "ports", ptxt, "expires_in_s",
					  g->expires_ns ? json_integer((json_int_t)((g->expires_ns - now) /
										    1000000000ULL))
							: json_null()));
	}
	return json_pack("{s:o, s:o, s:I}", "pending", pending, "grants", grants, "pending_total",
			 (json_int_t)n);
}
