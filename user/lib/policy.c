// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Policy parsing and validation (docs/policy.md): the document, its
 * identity strings, limits and hash. Everything is checked before anything
 * is returned: on error the output is zeroed and err names the field, so a
 * caller never sees half a policy. The network block is policy_network.c,
 * the text forms inside it policy_text.c.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "confine.h"
#include "egressd.h"
#include "policy.h"
#include "policy_int.h"
#include "ocimeta.h"

/* --- the policy --------------------------------------------------------------------- */

void egr_policy_free(struct egr_policy *p)
{
	size_t i;

	if (!p)
		return;
	free(p->tenant);
	free(p->execution_id);
	free(p->principal);
	free(p->tool);
	free(p->version);
	json_decref(p->container);
	for (i = 0; p->allow && i < p->nallow; i++)
		free(p->allow[i].name);
	free(p->allow);
	for (i = 0; p->dns_allow && i < p->ndns; i++)
		free(p->dns_allow[i]);
	free(p->dns_allow);
	free(p->rebind_allow);
	memset(p, 0, sizeof(*p));
}

/* A bounded printable-ASCII string; tenant_chars restricts it to a label. */
static int get_str(const json_t *v, const char *field, int tenant_chars, char **out,
		   struct egr_error *err)
{
	char q[QUOTE_BUF];
	const char *s;
	size_t len, i;

	egr_pol_field(err, "%s", field);
	if (!json_is_string(v)) {
		egr_pol_msg(err, "must be a string");
		return -EINVAL;
	}
	s = json_string_value(v);
	len = json_string_length(v);
	if (len == 0) {
		egr_pol_msg(err, "must not be empty");
		return -EINVAL;
	}
	if (len > EGR_POLICY_MAX_STR) {
		egr_pol_msg(err, "too long: %zu bytes, max %d", len, EGR_POLICY_MAX_STR);
		return -EINVAL;
	}
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x20 || c > 0x7e) {
			egr_pol_msg(err, "%s: only printable ASCII is allowed (byte 0x%02x at %zu)",
				egr_pol_quote_n(q, s, len), c, i);
			return -EINVAL;
		}
		if (tenant_chars && !isalnum(c) && c != '.' && c != '_' && c != ':' && c != '-') {
			egr_pol_msg(err, "%s: a tenant is letters, digits and \"._:-\" only "
				"(found '%c')", egr_pol_quote_n(q, s, len), c);
			return -EINVAL;
		}
	}
	*out = strdup(s);
	if (!*out)
		return -ENOMEM;
	err->field[0] = '\0';
	return 0;
}

/* A positive integer no larger than max, for limits.*. */
static int limit_value(const json_t *v, const char *field, uint64_t max, uint64_t *out,
		       struct egr_error *err)
{
	json_int_t n;

	egr_pol_field(err, "limits.%s", field);
	if (!json_is_integer(v)) {
		egr_pol_msg(err, "must be an integer");
		return -EINVAL;
	}
	n = json_integer_value(v);
	if (n <= 0 || (uint64_t)n > max) {
		egr_pol_msg(err, "%lld out of range 1-%llu", (long long)n, (unsigned long long)max);
		return -EINVAL;
	}
	*out = (uint64_t)n;
	return 0;
}

/* limits: egress quotas (docs/policy.md). Absent: no limits at all. */
static int parse_limits(const json_t *lim, struct egr_policy *p, struct egr_error *err)
{
	static const char *const known[] = { "egress_bytes", "window_seconds",
					     "tenant_egress_bytes", NULL };
	const json_t *v;
	int ret;

	if (!lim)
		return 0;
	egr_pol_field(err, "limits");
	if (!json_is_object(lim)) {
		egr_pol_msg(err, "must be an object");
		return -EINVAL;
	}
	ret = egr_pol_check_keys(lim, known, "limits.", err);
	if (ret)
		return ret;
	if ((v = json_object_get(lim, "egress_bytes")) &&
	    (ret = limit_value(v, "egress_bytes", EGR_POLICY_MAX_QUOTA, &p->quota_bytes, err)))
		return ret;
	if ((v = json_object_get(lim, "tenant_egress_bytes")) &&
	    (ret = limit_value(v, "tenant_egress_bytes", EGR_POLICY_MAX_QUOTA,
			       &p->tenant_quota_bytes, err)))
		return ret;
	p->quota_window_s = EGR_POLICY_DEFAULT_WINDOW_S;
	if ((v = json_object_get(lim, "window_seconds")) &&
	    (ret = limit_value(v, "window_seconds", EGR_POLICY_MAX_WINDOW_S, &p->quota_window_s,
			       err)))
		return ret;
	if (!p->quota_bytes && !p->tenant_quota_bytes) {
		egr_pol_field(err, "limits");
		egr_pol_msg(err, "give egress_bytes, tenant_egress_bytes or both");
		return -EINVAL;
	}
	return 0;
}

static int policy_sha256(const json_t *root, char hex[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0, i;
	char *text;
	int ok;

	text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
	if (!text)
		return -ENOMEM;
	ok = EVP_Digest(text, strlen(text), md, &mdlen, EVP_sha256(), NULL);
	free(text);
	if (!ok || mdlen != 32)
		return -ENOMEM;
	for (i = 0; i < mdlen; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	hex[64] = '\0';
	return 0;
}

static int from_json(const json_t *root, struct egr_policy *out, struct egr_error *err,
		     bool hash)
{
	static const char *const known[] = { "tenant", "execution_id", "principal", "tool",
					     "version", "network", "limits", "container", NULL };
	static const struct {
		const char *key;
		size_t off;
	} optional[] = {
		{ "execution_id", offsetof(struct egr_policy, execution_id) },
		{ "principal", offsetof(struct egr_policy, principal) },
		{ "tool", offsetof(struct egr_policy, tool) },
		{ "version", offsetof(struct egr_policy, version) },
	};
	struct egr_policy p = { 0 };
	struct egr_pol_allow_vec av = { 0 };
	struct egr_error scratch;
	const json_t *v;
	size_t i;
	int ret;

	if (!err)
		err = &scratch;
	memset(err, 0, sizeof(*err));
	if (!out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	if (!json_is_object(root)) {
		egr_pol_msg(err, "a policy must be a JSON object");
		return -EINVAL;
	}
	ret = egr_pol_check_keys(root, known, "", err);
	if (ret)
		return ret;

	v = json_object_get(root, "tenant");
	if (!v) {
		egr_pol_field(err, "tenant");
		egr_pol_msg(err, "missing (required)");
		ret = -EINVAL;
		goto fail;
	}
	ret = get_str(v, "tenant", 1, &p.tenant, err);
	if (ret)
		goto fail;
	for (i = 0; i < sizeof(optional) / sizeof(optional[0]); i++) {
		v = json_object_get(root, optional[i].key);
		if (!v)
			continue;
		ret = get_str(v, optional[i].key, 0, (char **)((char *)&p + optional[i].off), err);
		if (ret)
			goto fail;
	}
	v = json_object_get(root, "container");
	if (v) {
		const char *key = NULL, *rule = "";

		if (egr_container_check(v, &key, &rule)) {
			egr_pol_field(err, "container%s%.64s", key ? "." : "", key ? key : "");
			egr_pol_msg(err, "%s", rule);
			ret = -EINVAL;
			goto fail;
		}
		p.container = json_deep_copy(v);
		if (!p.container) {
			ret = -ENOMEM;
			goto fail;
		}
	}
	ret = egr_pol_network(json_object_get(root, "network"), &p, &av, err);
	if (ret)
		goto fail;
	ret = parse_limits(json_object_get(root, "limits"), &p, err);
	if (ret)
		goto fail;
	p.allow = av.v;
	p.nallow = av.n;
	av.v = NULL;
	av.n = 0;
	ret = hash ? policy_sha256(root, p.sha256) : 0;
	if (ret)
		goto fail;
	memset(err, 0, sizeof(*err));
	*out = p;
	return 0;
fail:
	if (ret == -ENOMEM) {
		memset(err, 0, sizeof(*err));
		egr_pol_msg(err, "out of memory");
	}
	for (i = 0; i < av.n; i++)
		free(av.v[i].name);
	free(av.v);
	egr_policy_free(&p);
	return ret;
}

int egr_policy_from_json(const json_t *root, struct egr_policy *out, struct egr_error *err)
{
	return from_json(root, out, err, true);
}

int egr_policy_check_json(const json_t *root, struct egr_policy *out, struct egr_error *err)
{
	return from_json(root, out, err, false);
}

static int parse_text(const char *text, size_t len, struct egr_policy *out,
		      struct egr_error *err, bool hash)
{
	struct egr_error scratch;
	json_error_t jerr;
	json_t *root;
	int ret;

	if (!err)
		err = &scratch;
	memset(err, 0, sizeof(*err));
	if (!out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	if (!text) {
		egr_pol_msg(err, "no policy text");
		return -EINVAL;
	}
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		if (json_error_code(&jerr) == json_error_out_of_memory)
			return -ENOMEM;
		egr_pol_msg(err, "invalid JSON at line %d, column %d: %s", jerr.line, jerr.column,
			jerr.text);
		return -EINVAL;
	}
	ret = from_json(root, out, err, hash);
	json_decref(root);
	return ret;
}

int egr_policy_parse(const char *text, size_t len, struct egr_policy *out,
		     struct egr_error *err)
{
	return parse_text(text, len, out, err, true);
}

int egr_policy_check_text(const char *text, size_t len, struct egr_policy *out,
			  struct egr_error *err)
{
	return parse_text(text, len, out, err, false);
}
