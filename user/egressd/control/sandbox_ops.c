// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <stdlib.h>
#include <time.h>

#include "control/sandbox_ops.h"
#include "dns/dnsfair.h"
#include "registry/statefile.h"

const char *egr_reg_code_name(enum egr_reg_code code)
{
	switch (code) {
	case EGR_REG_BAD_REQUEST:
		return "bad_request";
	case EGR_REG_BAD_CGROUP:
		return "bad_cgroup";
	case EGR_REG_INVALID_POLICY:
		return "invalid_policy";
	case EGR_REG_EXISTS:
		return "exists";
	case EGR_REG_NO_SPACE:
		return "no_space";
	case EGR_REG_INTERNAL:
		break;
	}
	return "internal";
}

static json_t *sb_json_base(const struct egr_sb *sb);

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

static json_t *iso_time(time_t t)
{
	char buf[32];
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
	return json_string(buf);
}

json_t *egr_sb_json(const struct egr_sb *sb)
{
	json_t *o = sb_json_base(sb);

	if (o) {
		json_object_set_new(o, "kind", json_string(sb->netdev ? "netdev" : "cgroup"));
		if (sb->netdev) {
			json_object_set_new(o, "netdev", json_string(sb->netdev));
			json_object_set_new(o, "ifindex", json_integer(sb->ifindex));
			json_object_set_new(o, "attach_mode",
					    json_string(sb->nd_mode == 2 ? "tc" : "tcx"));
		}
		json_object_set_new(o, "mode", json_string(sb->audit_mode ? "audit" : "enforce"));
		json_object_set_new(o, "quarantined", json_boolean(sb->quarantined));
		if (sb->quarantined)
			json_object_set_new(o, "quarantined_at", iso_time(sb->quarantined_at));
		json_object_set_new(o, "netns", str_or_null(sb->netns));
		json_object_set_new(o, "container",
				    sb->container ? json_deep_copy(sb->container) : json_null());
		json_object_set_new(o, "launcher_pid", sb->launcher.pid
							       ? json_integer(sb->launcher.pid)
							       : json_null());
		json_object_set_new(o, "dns", json_pack("{s:i, s:i}", "port4", sb->dns_port4,
							 "port6", sb->dns_port6));
		if (sb->inspect_port4 || sb->inspect_port6)
			json_object_set_new(o, "inspect",
					    json_pack("{s:i, s:i}", "port4", sb->inspect_port4,
						      "port6", sb->inspect_port6));
	}
	return o;
}

static json_t *sb_json_base(const struct egr_sb *sb)
{
	return json_pack("{s:I, s:s, s:I, s:o, s:o, s:o, s:o, s:o, s:I, s:s, s:{s:I, s:I, s:I},"
			 " s:o, s:o}",
			 "id", (json_int_t)sb->id, "cgroup", sb->cgroup, "cgroup_id",
			 (json_int_t)sb->cgroup_id, "tenant", str_or_null(sb->tenant),
			 "execution_id", str_or_null(sb->execution_id), "principal",
			 str_or_null(sb->principal), "tool", str_or_null(sb->tool), "version",
			 str_or_null(sb->version), "policy_id", (json_int_t)sb->policy_id,
			 "policy_sha256", sb->sha256, "rules", "v4", (json_int_t)sb->n4, "v6",
			 (json_int_t)sb->n6, "names", (json_int_t)sb->nnames, "attached_at",
			 iso_time(sb->attached_at), "updated_at", iso_time(sb->updated_at));
}

json_t *egr_held_json(const struct egr_held *h)
{
	char buf[32];
	struct tm tm;

	gmtime_r(&h->since, &tm);
	strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
	return json_pack("{s:I, s:o, s:I, s:s, s:s, s:s, s:s}", "id", (json_int_t)h->id,
			 "cgroup", h->cgroup ? json_string(h->cgroup) : json_null(), "cgroup_id",
			 (json_int_t)h->cgroup_id, "state", egr_held_state_name(h->state), "enforcing",
			 "deny-all until the cgroup is released", "since", buf, "reason", h->reason);
}

static int by_id(const void *a, const void *b)
{
	uint32_t x = (*(const struct egr_sb *const *)a)->id;
	uint32_t y = (*(const struct egr_sb *const *)b)->id;

	return x < y ? -1 : x > y;
}

json_t *egr_sandbox_list_reply(struct egr_registry *r, const struct egr_list_page *pg)
{
	json_t *arr = json_array(), *reply;
	struct egr_reg_iter it = { 0 };
	struct egr_sb **sel = NULL;
	size_t n = 0, shown;

	if (!arr)
		return NULL;
	if (egr_reg_count(r)) {
		sel = malloc(egr_reg_count(r) * sizeof(*sel));
		if (!sel) {
			json_decref(arr);
			return NULL;
		}
	}
	for (struct egr_sb *sb; (sb = egr_reg_next(r, &it));)
		if (sb->id > pg->after)
			sel[n++] = sb;
	/* Id order, so that "after" is a cursor: a sandbox attached between
	 * pages has a higher id than any listed (new ids only grow; a held
	 * cgroup attached again keeps its id, and was on the first page's
	 * held list). */
	if (n > 1)
		qsort(sel, n, sizeof(*sel), by_id);
	shown = pg->limit && pg->limit < n ? pg->limit : n;
	for (size_t i = 0; i < shown; i++) {
		json_t *o = egr_sb_json(sel[i]);
		json_t *dns = json_object_get(o, "dns");

		/* What the proxy served and shed for it (docs/dns.md). */
		if (json_is_object(dns))
			json_object_set_new(dns, "proxy",
					    egr_dnsfair_json(egr_reg_dns(r), sel[i]->id) ?: json_null());
		/* A sandbox left out silently would be a short list. */
		if (!o || json_array_append_new(arr, o)) {
			json_decref(arr);
			free(sel);
			return NULL;
		}
	}
	reply = json_pack("{s:b, s:o}", "ok", 1, "sandboxes", arr);
	/* Without its next a page would read as the last: out of memory is
	 * no reply at all (the caller answers "internal"). */
	if (reply && shown < n &&
	    json_object_set_new(reply, "next", json_integer((json_int_t)sel[shown - 1]->id)))
		goto fail;
	/* Held cgroups are not sandboxes with a policy: their own list, given
	 * with the first page. */
	if (reply && !pg->paged) {
		json_t *held = json_array();

		for (size_t i = 0; held && i < egr_reg_held_total(r); i++)
			if (json_array_append_new(held, egr_held_json(egr_reg_held_at(r, i)))) {
				json_decref(held);
				held = NULL;
			}
		if (json_object_set_new(reply, "held", held))
			goto fail;
	}
	free(sel);
	return reply;
fail:
	json_decref(reply);
	free(sel);
	return NULL;
}
