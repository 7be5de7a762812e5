// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netaddr.h"
#include "suggest.h"

static void set_err(struct egr_error *err, const char *field, const char *msg)
{
	if (!err)
		return;
	snprintf(err->field, sizeof(err->field), "%s", field);
	snprintf(err->message, sizeof(err->message), "%s", msg);
}

/* A set of strings as a JSON object used as a set (sorted on output). */
static int set_add(json_t *set, const char *s)
{
	return json_object_set_new(set, s, json_true()) ? -ENOMEM : 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The set's keys, sorted, as a JSON array. */
static json_t *set_sorted(const json_t *set)
{
	size_t n = json_object_size(set), i = 0;
	const char **keys = calloc(n ? n : 1, sizeof(*keys));
	json_t *arr = json_array();
	const char *k;
	json_t *v;

	if (!keys || !arr) {
		free(keys);
		json_decref(arr);
		return NULL;
	}
	json_object_foreach((json_t *)set, k, v)
		keys[i++] = k;
	qsort(keys, n, sizeof(*keys), cmp_str);
	for (i = 0; i < n; i++)
		json_array_append_new(arr, json_string(keys[i]));
	free(keys);
	return arr;
}

/* "1.2.3.4" or "2001:db8::1" in its canonical text form; false if neither. */
static bool canon_addr(const char *in, char *out, size_t len, bool *v6)
{
	unsigned char buf[16];

	if (inet_pton(AF_INET, in, buf) == 1) {
		*v6 = false;
		return inet_ntop(AF_INET, buf, out, (socklen_t)len) != NULL;
	}
	if (inet_pton(AF_INET6, in, buf) == 1) {
		*v6 = true;
		return inet_ntop(AF_INET6, buf, out, (socklen_t)len) != NULL;
	}
	return false;
}

static bool is_proxy(const json_t *rec, const char *addr, bool v6, long port, const char *proto)
{
	const json_t *px = json_object_get(rec, "dns_proxy");
	long p4 = (long)json_integer_value(json_object_get(px, "port4"));
	long p6 = (long)json_integer_value(json_object_get(px, "port6"));

	if (strcmp(proto, "udp") && strcmp(proto, "tcp"))
		return false;
	if (!v6)
		return p4 && port == p4 && !strcmp(addr, "127.0.0.1");
	return p6 && port == p6 && !strcmp(addr, "::1");
}

/* The names whose answers held addr (a JSON array of names, or NULL). */
static const json_t *names_of(const json_t *by_addr, const char *addr)
{
	return json_object_get(by_addr, addr);
}

/* One reached destination into the outbound set (and the names it used
 * into used). */
static int add_reached(const json_t *by_addr, json_t *outbound, json_t *used, const char *addr,
		       bool v6, long port, const char *proto)
{
	const json_t *names = names_of(by_addr, addr);
	char entry[EGR_DNS_NAME_MAX + 64];
	size_t i;
	json_t *n;

	if (json_array_size(names)) {
		json_array_foreach((json_t *)names, i, n) {
			snprintf(entry, sizeof(entry), "%s/%s:%ld", proto, json_string_value(n),
				 port);
			if (set_add(outbound, entry) || set_add(used, json_string_value(n)))
				return -ENOMEM;
		}
		return 0;
	}
	snprintf(entry, sizeof(entry), v6 ? "%s/[%s]:%ld" : "%s/%s:%ld", proto, addr, port);
	return set_add(outbound, entry);
}

static const char *parent_of(const char *name)
{
	const char *dot = strchr(name, '.');

	/* A parent needs a dot itself: no "*.com". */
	return dot && strchr(dot + 1, '.') ? dot + 1 : NULL;
}

/* DNS-only names, with siblings folded into wildcards. */
static int dns_only(const json_t *resolved, const json_t *used, json_t *dns)
{
	json_t *parents = json_object(), *v;
	const char *name;
	int err = 0;

	if (!parents)
		return -ENOMEM;
	json_object_foreach((json_t *)resolved, name, v) {
		const char *p = parent_of(name);

		if (json_object_get(used, name) || !p)
			continue;
		json_object_set_new(parents, p,
				    json_integer(json_integer_value(json_object_get(parents, p)) + 1));
	}
	json_object_foreach((json_t *)resolved, name, v) {
		const char *p = parent_of(name);
		char wild[EGR_DNS_NAME_MAX + 3];

		if (json_object_get(used, name))
			continue;
		if (p && json_integer_value(json_object_get(parents, p)) >= EGR_SUGGEST_WILDCARD_MIN) {
			snprintf(wild, sizeof(wild), "*.%s", p);
			err = set_add(dns, wild);
		} else {
			err = set_add(dns, name);
		}
		if (err)
			break;
	}
	json_decref(parents);
	return err;
}

static int note(json_t *notes, const char *text)
{
	return json_array_append_new(notes, json_string(text)) ? -ENOMEM : 0;
}

/* A dns_rebind_allow entry ("10.0.0.0/8", "fc00::/7", "[::1/128]") as a
 * prefix; false when it is not one. */
static bool range_parse(const char *text, struct egr_prefix *p)
{
	char buf[EGR_PREFIX_TEXT_MAX];
	size_t len = strlen(text);

	if (len >= sizeof(buf))
		return false;
	if (text[0] == '[' && len > 2 && text[len - 1] == ']')
		text++, len -= 2;
	memcpy(buf, text, len);
	buf[len] = '\0';
	return !egr_prefix_parse(buf, len, strchr(buf, ':') ? AF_INET6 : AF_INET, p);
}

static bool range_covers(const struct egr_prefix *p, const char *addr)
{
	uint8_t a[16];

	if (inet_pton(p->family, addr, a) != 1)
		return false;
	return egr_prefix_covers(p->addr, p->plen, a);
}

/*
 * dns_rebind_allow (docs/policy.md "Suggested policies"): the run's ranges
 * an answer it used falls in are kept; an address audit mode kept (enforce
 * mode strips it) is added as its own /32 or /128; one enforce mode stripped
 * is only named in the notes.
 */
static int rebind_suggest(const json_t *obs, const json_t *by_addr, json_t *out, json_t *nt)
{
	const json_t *r, *names;
	const char *addr;
	char buf[EGR_DNS_NAME_MAX + 256];
	size_t i;

	json_array_foreach(json_object_get(obs, "rebind_allow"), i, r) {
		struct egr_prefix p;

		if (!json_is_string(r) || !range_parse(json_string_value(r), &p))
			continue;
		json_object_foreach((json_t *)by_addr, addr, names) {
			if (!range_covers(&p, addr))
				continue;
			if (set_add(out, json_string_value(r)))
				return -ENOMEM;
			snprintf(buf, sizeof(buf), "dns_rebind_allow \"%s\" kept: the answer for %s "
				 "(%s) falls in it", json_string_value(r),
				 json_string_value(json_array_get(names, 0)) ?: "?", addr);
			if (note(nt, buf))
				return -ENOMEM;
			break;
		}
	}
	json_array_foreach(json_object_get(obs, "rebind"), i, r) {
		const char *name = json_string_value(json_object_get(r, "name")) ?: "?";
		const char *cls = json_string_value(json_object_get(r, "class")) ?: "?";
		const char *action = json_string_value(json_object_get(r, "action")) ?: "";
		char c[INET6_ADDRSTRLEN], entry[INET6_ADDRSTRLEN + 8];
		bool v6;

		addr = json_string_value(json_object_get(r, "addr"));
		if (!addr || !canon_addr(addr, c, sizeof(c), &v6))
			continue;
		snprintf(entry, sizeof(entry), "%s/%d", c, v6 ? 128 : 32);
		if (!strcmp(action, "kept")) {
			if (set_add(out, entry))
				return -ENOMEM;
			snprintf(buf, sizeof(buf), "dns_rebind_allow \"%s\" added: the answer for %s "
				 "pointed to it (%s); audit mode kept it, enforce mode strips it "
				 "without this range", entry, name, cls);
		} else {
			snprintf(buf, sizeof(buf), "the answer for %s pointed to %s (%s), stripped "
				 "(DNS rebinding protection) %" JSON_INTEGER_FORMAT " time(s) (not "
				 "added; add \"%s\" to dns_rebind_allow if it is yours)", name, c, cls,
				 json_integer_value(json_object_get(r, "count")), entry);
		}
		if (note(nt, buf))
			return -ENOMEM;
	}
	return 0;
}

int egr_suggest_policy(const json_t *rec, json_t **policy, json_t **notes, struct egr_error *err)
{
	static const char *const ids[] = { "execution_id", "principal", "tool", "version" };
	json_t *by_addr = json_object(), *resolved = json_object(), *outbound = json_object();
	json_t *used = json_object(), *dns = json_object(), *nt = json_array(), *pol = NULL;
	json_t *rebind = json_object();
	const json_t *obs = json_object_get(rec, "observed"), *e;
	const char *tenant = json_string_value(json_object_get(rec, "tenant"));
	int ret = -ENOMEM;
	size_t i;

	*policy = NULL;
	*notes = NULL;
	if (!by_addr || !resolved || !outbound || !used || !dns || !nt || !rebind)
		goto out;
	if (!json_is_object(rec) ||
	    strcmp(json_string_value(json_object_get(rec, "type")) ?: "", "execution")) {
		set_err(err, "type", "not an execution audit record");
		ret = -EINVAL;
		goto out;
	}
	if (!tenant || !*tenant) {
		set_err(err, "tenant", "the execution record has no tenant");
		ret = -EINVAL;
		goto out;
	}

	/* Names it resolved (allowed, or let through by audit mode), and
	 * which names each answered address belongs to. */
	json_array_foreach(json_object_get(obs, "dns"), i, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		const char *verdict = json_string_value(json_object_get(e, "verdict")) ?: "";
		char norm[EGR_DNS_NAME_MAX + 1];
		size_t k;
		json_t *a;

		if (!name || egr_dns_name_normalize(name, 0, norm, sizeof(norm)))
			continue;
		if (!strcmp(verdict, "deny")) {
			char buf[EGR_DNS_NAME_MAX + 64];

			snprintf(buf, sizeof(buf), "refused DNS name %s (not added)", norm);
			if (note(nt, buf))
				goto out;
			continue;
		}
		if (set_add(resolved, norm))
			goto out;
		json_array_foreach(json_object_get(e, "addrs"), k, a) {
			char c[INET6_ADDRSTRLEN];
			bool v6;
			json_t *list;

			if (!json_is_string(a) || !canon_addr(json_string_value(a), c, sizeof(c), &v6))
				continue;
			list = json_object_get(by_addr, c);
			if (!list) {
				list = json_array();
				if (!list || json_object_set_new(by_addr, c, list))
					goto out;
			}
			json_array_append_new(list, json_string(norm));
		}
	}

	/* Where packets went. */
	json_array_foreach(json_object_get(rec, "egress"), i, e) {
		const char *addr = json_string_value(json_object_get(e, "addr"));
		const char *proto = json_string_value(json_object_get(e, "proto"));
		long port = (long)json_integer_value(json_object_get(e, "port"));
		char c[INET6_ADDRSTRLEN];
		bool v6;

		if (!addr || !proto || !canon_addr(addr, c, sizeof(c), &v6))
			continue;
		if (strcmp(proto, "tcp") && strcmp(proto, "udp")) {
			char buf[256];

			snprintf(buf, sizeof(buf), "%s traffic to %s is not a port rule (not added; "
				 "see network.allow_sockets)", proto, c);
			if (note(nt, buf))
				goto out;
			continue;
		}
		if (is_proxy(rec, c, v6, port, proto))
			continue;
		if (add_reached(by_addr, outbound, used, c, v6, port, proto))
			goto out;
	}

	/* What was denied (enforce) or let through (audit). */
	json_array_foreach(json_object_get(obs, "denied"), i, e) {
		const char *addr = json_string_value(json_object_get(e, "addr"));
		const char *proto = json_string_value(json_object_get(e, "proto"));
		const char *verdict = json_string_value(json_object_get(e, "verdict")) ?: "";
		long port = (long)json_integer_value(json_object_get(e, "port"));
		long count = (long)json_integer_value(json_object_get(e, "count"));
		char c[INET6_ADDRSTRLEN], buf[256];
		bool v6;

		if (!addr || !proto || !canon_addr(addr, c, sizeof(c), &v6))
			continue;
		if (!strcmp(verdict, "audit") && (!strcmp(proto, "tcp") || !strcmp(proto, "udp"))) {
			if (add_reached(by_addr, outbound, used, c, v6, port, proto))
				goto out;
			continue;
		}
		snprintf(buf, sizeof(buf), "denied %s/%s%s%s:%ld, %ld time(s) (not added)", proto,
			 v6 ? "[" : "", c, v6 ? "]" : "", port, count);
		if (note(nt, buf))
			goto out;
	}
	if (dns_only(resolved, used, dns))
		goto out;
	if (rebind_suggest(obs, by_addr, rebind, nt))
		goto out;
	/* Names approved during the run (docs/dns.md "Approvals"): reached
	 * ones are in outbound_allow above; each is named as a candidate. */
	json_array_foreach(json_object_get(obs, "approved"), i, e) {
		char buf[EGR_DNS_NAME_MAX + 200];

		snprintf(buf, sizeof(buf), "approved during the run: %s on %s (scope %s, by uid %"
			 JSON_INTEGER_FORMAT "): a candidate for the policy file",
			 json_string_value(json_object_get(e, "name")) ?: "?",
			 json_string_value(json_object_get(e, "ports")) ?: "?",
			 json_string_value(json_object_get(e, "scope")) ?: "?",
			 json_integer_value(json_object_get(json_object_get(e, "approver"), "uid")));
		if (note(nt, buf))
			goto out;
	}
	if (json_is_false(json_object_get(rec, "egress_complete")) &&
	    note(nt, "the destination list of this execution is incomplete (destination map "
		 "pressure): the suggestion may miss some"))
		goto out;
	if (json_is_false(json_object_get(obs, "complete")) &&
	    note(nt, "the DNS names or denies kept for this execution hit their bound: the "
		 "suggestion may miss some"))
		goto out;
	if (!obs && note(nt, "the record has no DNS observations (written by an older egressd?): "
			 "every destination is listed by address"))
		goto out;

	pol = json_pack("{s:s, s:{s:s, s:o, s:o}}", "tenant", tenant, "network", "default", "deny",
			"outbound_allow", set_sorted(outbound), "dns_allow", set_sorted(dns));
	if (!pol)
		goto out;
	if (json_object_size(rebind) &&
	    json_object_set_new(json_object_get(pol, "network"), "dns_rebind_allow",
				set_sorted(rebind)))
		goto out;
	for (i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		const char *s = json_string_value(json_object_get(rec, ids[i]));

		if (s && *s && json_object_set_new(pol, ids[i], json_string(s)))
			goto out;
	}
	*policy = pol;
	*notes = nt;
	pol = nt = NULL;
	ret = 0;
out:
	json_decref(pol);
	json_decref(nt);
	json_decref(by_addr);
	json_decref(resolved);
	json_decref(outbound);
	json_decref(used);
	json_decref(dns);
	json_decref(rebind);
	return ret;
}
