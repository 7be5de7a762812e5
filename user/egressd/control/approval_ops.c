// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <string.h>

#include "approval_ops.h"
#include "approvals.h"
#include "policy_ask.h"
#include "proto.h"

#define APPROVAL_MAX_TTL_S (30ULL * 86400) /* a month: longer belongs in the policy file */
#define APPROVAL_MAX_REASON 512

static json_t *bad(enum egr_err code, const char *field, const char *msg)
{
	json_t *o = json_pack("{s:b, s:s, s:s}", "ok", 0, "code", egr_err_code(code), "error", msg);

	if (o && field)
		json_object_set_new(o, "field", json_string(field));
	return o;
}

json_t *egr_ctl_approvals(struct egr_approvals *ap, const json_t *req)
{
	json_t *body;

	(void)req;
	if (!ap)
		return bad(EGR_ERR_UNAVAILABLE, NULL, "approvals are not available");
	body = egr_approvals_json(ap);
	if (body)
		json_object_set_new(body, "ok", json_true());
	return body;
}

/* "id" (required) and "reason" (optional, printable, bounded). */
static json_t *id_and_reason(const json_t *req, struct egr_approval_decision *d)
{
	const json_t *id = json_object_get(req, "id"), *r = json_object_get(req, "reason");

	if (!json_is_integer(id) || json_integer_value(id) <= 0)
		return bad(EGR_ERR_BAD_REQUEST, "id", "id must be a request id (egressctl approvals)");
	d->id = (uint64_t)json_integer_value(id);
	if (r && (!json_is_string(r) || json_string_length(r) > APPROVAL_MAX_REASON ||
		  strlen(json_string_value(r)) != json_string_length(r)))
		return bad(EGR_ERR_BAD_REQUEST, "reason", "reason must be a string of at most 512 "
			   "bytes");
	d->reason = r ? json_string_value(r) : NULL;
	return NULL;
}

static json_t *decide(struct egr_approvals *ap, const struct ucred *peer,
		      struct egr_approval_decision *d)
{
	const char *why = NULL;
	int err;

	d->approver = *peer;
	err = egr_approvals_decide(ap, d, &why);
	if (err == -ENOENT)
		return bad(EGR_ERR_NOT_FOUND, "id", "no request with that id is waiting "
			   "(decided, timed out, or its sandbox is gone)");
	if (err == -EINVAL)
		return bad(EGR_ERR_BAD_REQUEST, "scope", why ? why : "invalid decision");
	if (err == -ENOSPC)
		return bad(EGR_ERR_NO_SPACE, NULL, "too many approvals in force");
	if (err)
		return bad(EGR_ERR_INTERNAL, NULL, strerror(-err));
	return json_pack("{s:b, s:I, s:s}", "ok", 1, "id", (json_int_t)d->id, "decision",
			 d->approve ? "approved" : "denied");
}

json_t *egr_ctl_approve(struct egr_approvals *ap, const struct ucred *peer, const json_t *req)
{
	const json_t *ttl = json_object_get(req, "ttl_s"), *scope = json_object_get(req, "scope");
	const json_t *ports = json_object_get(req, "ports");
	struct egr_approval_decision d = { .approve = true, .scope = EGR_SCOPE_SANDBOX };
	json_t *e;

	if (!ap)
		return bad(EGR_ERR_UNAVAILABLE, NULL, "approvals are not available");
	if ((e = id_and_reason(req, &d)))
		return e;
	if (ttl && (!json_is_integer(ttl) || json_integer_value(ttl) < 1 ||
		    (uint64_t)json_integer_value(ttl) > APPROVAL_MAX_TTL_S))
		return bad(EGR_ERR_BAD_REQUEST, "ttl_s", "ttl_s must be 1 to 2592000 seconds "
			   "(absent: the sandbox's life)");
	d.ttl_s = ttl ? (uint64_t)json_integer_value(ttl) : 0;
	if (scope) {
		const char *v = json_is_string(scope) ? json_string_value(scope) : "";

		if (!strcmp(v, "sandbox"))
			d.scope = EGR_SCOPE_SANDBOX;
		else if (!strcmp(v, "execution"))
			d.scope = EGR_SCOPE_EXECUTION;
		else if (!strcmp(v, "tenant"))
			d.scope = EGR_SCOPE_TENANT;
		else
			return bad(EGR_ERR_BAD_REQUEST, "scope", "scope must be \"sandbox\", "
				   "\"execution\" or \"tenant\"");
	}
	if (ports) {
		struct egr_error err;
		size_t n = 0;

		if (egr_policy_ask_ports(ports, "ports", d.ports.ranges, &n, &err))
			return bad(EGR_ERR_BAD_REQUEST, err.field, err.message);
		d.ports.nranges = (uint32_t)n;
		d.have_ports = true;
	}
	return decide(ap, peer, &d);
}

json_t *egr_ctl_deny(struct egr_approvals *ap, const struct ucred *peer, const json_t *req)
{
	struct egr_approval_decision d = { .approve = false };
	json_t *e;

	if (!ap)
		return bad(EGR_ERR_UNAVAILABLE, NULL, "approvals are not available");
	if ((e = id_and_reason(req, &d)))
		return e;
	return decide(ap, peer, &d);
}
