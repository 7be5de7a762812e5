/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Approvals (docs/dns.md "Approvals", docs/control-protocol.md): the
 * grants someone outside every sandbox made for a name a sandbox's policy
 * does not allow, at the scope of that sandbox, its execution or its
 * tenant, for a TTL that never outlives the sandbox the request came from.
 * The DNS proxy holds the queries (dns/dns_ask.c) and asks this module,
 * through its grant callback, whether a name is approved; a decision is
 * audited as a policy_change and published as an `approval` event.
 */
#ifndef EGR_APPROVALS_H
#define EGR_APPROVALS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <jansson.h>

#include "dns/dns_types.h"

#define EGR_APPROVALS_MAX_GRANTS 4096

struct egr_registry;
struct egr_bus;
struct egr_auditlog;
struct egr_approvals;

enum egr_approval_scope {
	EGR_SCOPE_SANDBOX,
	EGR_SCOPE_EXECUTION,
	EGR_SCOPE_TENANT,
};

struct egr_approval_decision {
	uint64_t id;                 /* the held request */
	bool approve;
	enum egr_approval_scope scope;
	uint64_t ttl_s;              /* 0: the requesting sandbox's life */
	bool have_ports;             /* else the policy's ask_ports */
	struct egr_dns_ports ports;
	const char *reason;          /* may be NULL */
	struct ucred approver;
};

int egr_approvals_new(struct egr_registry *reg, struct egr_approvals **out);
void egr_approvals_free(struct egr_approvals *ap);
/* Where decisions go: the event stream's bus and the audit log (either may
 * be NULL). */
void egr_approvals_set_obs(struct egr_approvals *ap, struct egr_bus *bus, struct egr_auditlog *al);

/* The DNS proxy's callbacks (ctx: the egr_approvals). */
bool egr_approvals_grant(void *ctx, uint32_t sandbox_id, const char *qname,
			 struct egr_dns_ports *ports);
void egr_approvals_on_ask(void *ctx, const struct egr_dns_ask *ask);

/* Decide a held request: 0; -ENOENT (no such request), -EINVAL (*why
 * names what is wrong: an execution scope for a sandbox without one),
 * -ENOSPC (too many grants), -ENOMEM. */
int egr_approvals_decide(struct egr_approvals *ap, const struct egr_approval_decision *d,
			 const char **why);
/* {"pending":[...], "grants":[...]}; NULL when out of memory. */
json_t *egr_approvals_json(struct egr_approvals *ap);
/* "tcp/443" style text of ports into buf. */
void egr_approvals_ports_text(const struct egr_dns_ports *ports, char *buf, size_t len);
const char *egr_approval_scope_name(enum egr_approval_scope s);

#endif /* EGR_APPROVALS_H */
