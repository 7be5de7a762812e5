// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Policy parsing and validation (docs/policy.md). Everything is checked
 * before anything is returned: on error the output is zeroed and err names
 * the field, so a caller never sees half a policy.
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
#include "netaddr.h"
#include "policy.h"

/* Longest outbound_allow string: "tcp/" + a 253-byte name + ":65535-65535". */
#define ALLOW_TEXT_MAX 300
/* How much of an offending text an error message quotes. */
#define QUOTE_MAX 64

/* --- error helpers ------------------------------------------------------------ */

static void set_field(struct egr_error *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void set_msg(struct egr_error *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void set_field(struct egr_error *err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err->field, sizeof(err->field), fmt, ap);
	va_end(ap);
}

static void set_msg(struct egr_error *err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
}

/*
 * Quote len bytes of s for an error message: in double quotes, quotes and
 * backslashes escaped, anything not printable ASCII as \xNN, cut at
 * QUOTE_MAX bytes with "..." appended. dst must hold QUOTE_MAX * 4 + 8.
 */
#define QUOTE_BUF (QUOTE_MAX * 4 + 8)
static const char *quote_n(char *dst, const char *s, size_t len)
{
	size_t i, o = 0;

	dst[o++] = '"';
	for (i = 0; i < len && i < QUOTE_MAX; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\') {
			dst[o++] = '\\';
			dst[o++] = (char)c;
		} else if (c < 0x20 || c > 0x7e) {
			o += (size_t)snprintf(dst + o, 5, "\\x%02x", c);
		} else {
			dst[o++] = (char)c;
		}
	}
	dst[o++] = '"';
	if (len > QUOTE_MAX) {
		memcpy(dst + o, "...", 3);
		o += 3;
	}
	dst[o] = '\0';
	return dst;
}

static const char *quote(char *dst, const char *s)
{
	return quote_n(dst, s, strlen(s));
}

/* An object key as it may appear in a field path: printable, bounded. */
static const char *key_for_path(char *dst, size_t size, const char *key)
{
	size_t i;

	for (i = 0; key[i] && i + 1 < size && i < 64; i++) {
		unsigned char c = (unsigned char)key[i];

		dst[i] = (c < 0x20 || c > 0x7e) ? '?' : (char)c;
	}
	dst[i] = '\0';
	return dst;
}

/* --- small parsers -------------------------------------------------------------- */

/* A decimal number without sign or leading zeros, at most max; 0 or -EINVAL. */
static int parse_dec(const char *s, size_t len, unsigned int max, unsigned int *out)
{
	unsigned long v = 0;
	size_t i;

	if (len == 0 || len > 5 || (len > 1 && s[0] == '0'))
		return -EINVAL;
	for (i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	if (v > max)
		return -EINVAL;
	*out = (unsigned int)v;
	return 0;
}

/* PORT: "N", "A-B" with A <= B, or "*". */
static int parse_ports(const char *s, size_t len, uint16_t *lo, uint16_t *hi,
		       struct egr_error *err)
{
	char q[QUOTE_BUF];
	const char *dash;
	unsigned int a, b;

	if (len == 0) {
		set_msg(err, "empty port (use a number, a range \"A-B\" or \"*\")");
		return -EINVAL;
	}
	if (len == 1 && s[0] == '*') {
		*lo = 0;
		*hi = 0xffff;
		return 0;
	}
	dash = memchr(s, '-', len);
	if (!dash) {
		if (parse_dec(s, len, 0xffff, &a)) {
			set_msg(err, "bad port %s: a port is a decimal number 0-65535",
				quote_n(q, s, len));
			return -EINVAL;
		}
		*lo = *hi = (uint16_t)a;
		return 0;
	}
	if (parse_dec(s, (size_t)(dash - s), 0xffff, &a) ||
	    parse_dec(dash + 1, len - (size_t)(dash - s) - 1, 0xffff, &b)) {
		set_msg(err, "bad port range %s: a range is \"A-B\" with A and B in 0-65535",
			quote_n(q, s, len));
		return -EINVAL;
	}
	if (a > b) {
		set_msg(err, "bad port range %s: %u is greater than %u", quote_n(q, s, len), a, b);
		return -EINVAL;
	}
	*lo = (uint16_t)a;
	*hi = (uint16_t)b;
	return 0;
}

/* --- DNS names -------------------------------------------------------------------- */

/* NULL when name[0..len) is a valid name (or "*." wildcard), else why not. */
static const char *dns_name_problem(const char *name, size_t len, int allow_wildcard)
{
	size_t i, lstart, total = len;
	int all_digits = 1;

	if (len > 0 && name[len - 1] == '.') {
		len--;
		total--;
	}
	if (len == 0)
		return "empty name";
	if (total > EGR_DNS_NAME_MAX)
		return "longer than 253 characters";
	if (len >= 2 && name[0] == '*' && name[1] == '.') {
		if (!allow_wildcard)
			return "wildcards are not allowed here";
		name += 2;
		len -= 2;
		if (len == 0)
			return "a wildcard needs a name after \"*.\"";
	}
	lstart = 0;
	for (i = 0; i <= len; i++) {
		char c = i < len ? name[i] : '.';

		if (c == '.') {
			size_t llen = i - lstart;

			if (llen == 0)
				return "empty label";
			if (llen > 63)
				return "label longer than 63 characters";
			if (name[lstart] == '-' || name[i - 1] == '-')
				return "label starts or ends with '-'";
			if (i == len && all_digits)
				return "the last label is all digits (an IP address needs no name)";
			lstart = i + 1;
			all_digits = 1;
			continue;
		}
		if (c == '*')
			return allow_wildcard ? "'*' only as a leading \"*.\"" :
						"wildcards are not allowed here";
		if (!isascii((unsigned char)c) ||
		    !(isalnum((unsigned char)c) || c == '-' || c == '_'))
			return "invalid character (labels are letters, digits, '-' and '_')";
		if (!isdigit((unsigned char)c))
			all_digits = 0;
	}
	return NULL;
}

int egr_dns_name_normalize(const char *name, int allow_wildcard, char *norm, size_t normlen)
{
	size_t len, i;

	if (!name || !norm)
		return -EINVAL;
	len = strlen(name);
	if (dns_name_problem(name, len, allow_wildcard))
		return -EINVAL;
	if (name[len - 1] == '.')
		len--;
	if (normlen < len + 1)
		return -ENOSPC;
	for (i = 0; i < len; i++)
		norm[i] = (char)tolower((unsigned char)name[i]);
	norm[len] = '\0';
	return 0;
}

/* --- hosts ------------------------------------------------------------------------ */

/*
 * 0.0.0.0, :: and ::ffff:0.0.0.0 as a host: the kernel sends a connection
 * to them to a local address (127.0.0.1, ::1 or the socket's bound source),
 * and the hooks judge them as the loopback. An entry for them would read as
 * "some address" and mean "this host": refused, so that loopback is opened
 * only by saying so. Prefixes that merely contain them (0.0.0.0/0) are fine.
 */
static int refuse_unspecified(const struct egr_allow *a, struct egr_error *err)
{
	static const uint8_t zero[16];

	if (a->kind == EGR_HOST_V4 && a->prefixlen == 32 && !memcmp(a->addr, zero, 4)) {
		set_msg(err, "0.0.0.0 is not a destination: the kernel sends it to this host's "
			"loopback; allow 127.0.0.1 to reach loopback");
		return -EINVAL;
	}
	if (a->kind == EGR_HOST_V6 && a->prefixlen == 128 && !memcmp(a->addr, zero, 16)) {
		set_msg(err, "[::] is not a destination: the kernel sends it to this host's "
			"loopback; allow [::1] to reach loopback");
		return -EINVAL;
	}
	return 0;
}

/* Bytes of s[0..len) before the first c (len when there is none). */
static size_t strcspn_n(const char *s, size_t len, char c)
{
	const char *p = memchr(s, c, len);

	return p ? (size_t)(p - s) : len;
}

static int host_from_prefix(const struct egr_prefix *pfx, struct egr_allow *out,
			    struct egr_error *err)
{
	out->kind = pfx->family == AF_INET ? EGR_HOST_V4 : EGR_HOST_V6;
	out->prefixlen = pfx->plen;
	memcpy(out->addr, pfx->addr, sizeof(out->addr));
	return refuse_unspecified(out, err);
}

/*
 * HOST of an allow entry, without port: an IPv4 address or CIDR, "[IPv6]"
 * or "[IPv6/len]", or a DNS name. Fills kind, addr, prefixlen, name.
 */
static int parse_host(const char *h, size_t len, struct egr_allow *out, struct egr_error *err)
{
	char buf[ALLOW_TEXT_MAX + 1], norm[EGR_DNS_NAME_MAX + 1], q[QUOTE_BUF];
	struct egr_prefix pfx;
	const char *why;
	size_t i;
	int v4 = 1, ret;

	if (len == 0) {
		set_msg(err, "empty host");
		return -EINVAL;
	}
	if (len > ALLOW_TEXT_MAX) {
		set_msg(err, "host too long (%zu bytes)", len);
		return -EINVAL;
	}
	if (h[0] == '[') {
		if (h[len - 1] != ']') {
			set_msg(err, "bad IPv6 host %s: missing ']'", quote_n(q, h, len));
			return -EINVAL;
		}
		ret = egr_prefix_parse(h + 1, len - 2, AF_INET6, &pfx);
		if (ret == -EDOM) {
			set_msg(err, "bad IPv6 prefix length in %s: use 0-128", quote_n(q, h, len));
			return -EINVAL;
		}
		if (ret) {
			set_msg(err, "bad IPv6 address %s",
				quote_n(q, h + 1, strcspn_n(h + 1, len - 2, '/')));
			return -EINVAL;
		}
		/* The kernel judges mapped destinations by the IPv4 rules. */
		egr_prefix_unmap(&pfx);
		return host_from_prefix(&pfx, out, err);
	}
	for (i = 0; i < len; i++) {
		if (h[i] == ':') {
			set_msg(err, "bad host %s: a host has no \":PORT\" here and IPv6 addresses "
				"go in brackets", quote_n(q, h, len));
			return -EINVAL;
		}
		if (!isdigit((unsigned char)h[i]) && h[i] != '.' && h[i] != '/')
			v4 = 0;
	}
	if (v4 && isdigit((unsigned char)h[0])) {
		ret = egr_prefix_parse(h, len, AF_INET, &pfx);
		if (ret == -EDOM) {
			set_msg(err, "bad IPv4 prefix length in %s: use 0-32", quote_n(q, h, len));
			return -EINVAL;
		}
		if (ret) {
			set_msg(err, "bad IPv4 address %s", quote_n(q, h, strcspn_n(h, len, '/')));
			return -EINVAL;
		}
		return host_from_prefix(&pfx, out, err);
	}
	memcpy(buf, h, len);
	buf[len] = '\0';
	if (memchr(h, '/', len)) {
		set_msg(err, "bad host %s: only IP addresses take a /prefix length",
			quote_n(q, h, len));
		return -EINVAL;
	}
	why = dns_name_problem(buf, len, 0);
	if (why) {
		if (buf[0] == '*')
			set_msg(err, "wildcard %s not allowed in outbound_allow "
				"(wildcards belong in dns_allow)", quote(q, buf));
		else
			set_msg(err, "bad DNS name %s: %s", quote(q, buf), why);
		return -EINVAL;
	}
	if (egr_dns_name_normalize(buf, 0, norm, sizeof(norm)))
		return -EINVAL; /* not reached: checked above */
	out->name = strdup(norm);
	if (!out->name)
		return -ENOMEM;
	out->kind = EGR_HOST_NAME;
	out->prefixlen = 0;
	memset(out->addr, 0, sizeof(out->addr));
	return 0;
}

/* --- one outbound_allow string ---------------------------------------------------- */

int egr_allow_parse(const char *text, struct egr_allow *out, struct egr_error *err)
{
	struct egr_error scratch;
	const char *s, *colon, *slash, *host_end;
	char q[QUOTE_BUF];
	size_t len, i;
	uint16_t protos = EGR_PROTO_ANY;
	int ret;

	if (!err)
		err = &scratch;
	err->field[0] = '\0';
	err->message[0] = '\0';
	if (!out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	if (!text) {
		set_msg(err, "missing entry");
		return -EINVAL;
	}
	len = strlen(text);
	if (len == 0) {
		set_msg(err, "empty entry");
		return -EINVAL;
	}
	if (len > ALLOW_TEXT_MAX) {
		set_msg(err, "entry too long (%zu bytes, max %d): %s", len, ALLOW_TEXT_MAX,
			quote(q, text));
		return -EINVAL;
	}
	for (i = 0; i < len; i++) {
		if ((unsigned char)text[i] <= 0x20 || (unsigned char)text[i] > 0x7e) {
			set_msg(err, "invalid character in %s", quote(q, text));
			return -EINVAL;
		}
	}
	s = text;
	/* A protocol prefix is letters followed by '/'; no host starts that way. */
	slash = strchr(s, '/');
	if (slash && slash > s) {
		const char *p;

		for (p = s; p < slash && isalpha((unsigned char)*p); p++)
			;
		if (p == slash) {
			if (slash - s == 3 && !strncmp(s, "tcp", 3)) {
				protos = EGR_PROTO_TCP;
			} else if (slash - s == 3 && !strncmp(s, "udp", 3)) {
				protos = EGR_PROTO_UDP;
			} else {
				set_msg(err, "unknown protocol prefix %s (use \"tcp/\", \"udp/\" "
					"or none for both)",
					quote_n(q, s, (size_t)(slash - s + 1)));
				return -EINVAL;
			}
			s = slash + 1;
			len -= (size_t)(slash - text) + 1;
		}
	}
	if (s[0] == '[') {
		host_end = strchr(s, ']');
		if (!host_end) {
			set_msg(err, "missing ']' in %s", quote(q, text));
			return -EINVAL;
		}
		host_end++;
		if (*host_end != ':') {
			set_msg(err, "missing \":PORT\" after the IPv6 address in %s",
				quote(q, text));
			return -EINVAL;
		}
		colon = host_end;
	} else {
		colon = strrchr(s, ':');
		if (!colon) {
			set_msg(err, "missing \":PORT\" in %s (use \":*\" for every port)",
				quote(q, text));
			return -EINVAL;
		}
		if (memchr(s, ':', (size_t)(colon - s))) {
			set_msg(err, "IPv6 addresses must be in brackets: %s "
				"(write \"[ADDR]:PORT\")", quote(q, text));
			return -EINVAL;
		}
	}
	ret = parse_host(s, (size_t)(colon - s), out, err);
	if (ret)
		goto fail;
	ret = parse_ports(colon + 1, strlen(colon + 1), &out->port_lo, &out->port_hi, err);
	if (ret)
		goto fail;
	out->protos = protos;
	return 0;
fail:
	free(out->name);
	memset(out, 0, sizeof(*out));
	return ret;
}

/* --- the policy --------------------------------------------------------------------- */

struct allow_vec {
	struct egr_allow *v;
	size_t n, cap;
};

static int allow_push(struct allow_vec *a, const struct egr_allow *e)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 16;
		struct egr_allow *nv = realloc(a->v, cap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		a->v = nv;
		a->cap = cap;
	}
	a->v[a->n++] = *e;
	return 0;
}

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

	set_field(err, "%s", field);
	if (!json_is_string(v)) {
		set_msg(err, "must be a string");
		return -EINVAL;
	}
	s = json_string_value(v);
	len = json_string_length(v);
	if (len == 0) {
		set_msg(err, "must not be empty");
		return -EINVAL;
	}
	if (len > EGR_POLICY_MAX_STR) {
		set_msg(err, "too long: %zu bytes, max %d", len, EGR_POLICY_MAX_STR);
		return -EINVAL;
	}
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x20 || c > 0x7e) {
			set_msg(err, "%s: only printable ASCII is allowed (byte 0x%02x at %zu)",
				quote_n(q, s, len), c, i);
			return -EINVAL;
		}
		if (tenant_chars && !isalnum(c) && c != '.' && c != '_' && c != ':' && c != '-') {
			set_msg(err, "%s: a tenant is letters, digits and \"._:-\" only "
				"(found '%c')", quote_n(q, s, len), c);
			return -EINVAL;
		}
	}
	*out = strdup(s);
	if (!*out)
		return -ENOMEM;
	err->field[0] = '\0';
	return 0;
}

static int check_keys(const json_t *obj, const char *const *known, const char *prefix,
		      struct egr_error *err)
{
	const char *key;
	json_t *v;

	json_object_foreach((json_t *)obj, key, v) {
		const char *const *k;
		char kb[80];

		for (k = known; *k; k++)
			if (!strcmp(*k, key))
				break;
		if (*k)
			continue;
		set_field(err, "%s%s", prefix, key_for_path(kb, sizeof(kb), key));
		set_msg(err, "unknown field");
		return -EINVAL;
	}
	return 0;
}

static int port_value(const json_t *v, uint16_t *lo, uint16_t *hi, struct egr_error *err)
{
	if (json_is_integer(v)) {
		json_int_t n = json_integer_value(v);

		if (n < 0 || n > 0xffff) {
			set_msg(err, "port %lld out of range 0-65535", (long long)n);
			return -EINVAL;
		}
		*lo = *hi = (uint16_t)n;
		return 0;
	}
	if (json_is_string(v)) {
		if (json_string_length(v) != strlen(json_string_value(v))) {
			set_msg(err, "port contains a NUL byte");
			return -EINVAL;
		}
		return parse_ports(json_string_value(v), json_string_length(v), lo, hi, err);
	}
	set_msg(err, "a port is a number, a range string \"A-B\" or \"*\"");
	return -EINVAL;
}

static int parse_allow_object(const json_t *o, uint32_t idx, struct allow_vec *av,
			      struct egr_error *err)
{
	static const char *const known[] = { "host", "ports", "protocol", NULL };
	char prefix[64], q[QUOTE_BUF];
	struct egr_allow base = { 0 };
	const json_t *host, *ports, *proto, *pv;
	uint16_t protos = EGR_PROTO_ANY;
	size_t i, first = av->n;
	int ret;

	snprintf(prefix, sizeof(prefix), "network.outbound_allow[%u].", idx);
	ret = check_keys(o, known, prefix, err);
	if (ret)
		return ret;
	host = json_object_get(o, "host");
	ports = json_object_get(o, "ports");
	proto = json_object_get(o, "protocol");
	if (proto) {
		const char *ps = json_is_string(proto) ? json_string_value(proto) : NULL;

		set_field(err, "%sprotocol", prefix);
		if (ps && !strcmp(ps, "tcp")) {
			protos = EGR_PROTO_TCP;
		} else if (ps && !strcmp(ps, "udp")) {
			protos = EGR_PROTO_UDP;
		} else if (ps && !strcmp(ps, "any")) {
			protos = EGR_PROTO_ANY;
		} else {
			set_msg(err, "must be \"tcp\", \"udp\" or \"any\"%s%s", ps ? ", not " : "",
				ps ? quote(q, ps) : "");
			return -EINVAL;
		}
	}
	set_field(err, "%shost", prefix);
	if (!host) {
		set_msg(err, "missing (required)");
		return -EINVAL;
	}
	if (!json_is_string(host)) {
		set_msg(err, "must be a string");
		return -EINVAL;
	}
	if (json_string_length(host) != strlen(json_string_value(host))) {
		set_msg(err, "contains a NUL byte");
		return -EINVAL;
	}
	ret = parse_host(json_string_value(host), json_string_length(host), &base, err);
	if (ret)
		return ret;
	set_field(err, "%sports", prefix);
	if (!ports) {
		set_msg(err, "missing (required; [\"*\"] for every port)");
		ret = -EINVAL;
		goto out;
	}
	if (!json_is_array(ports) || json_array_size(ports) == 0 ||
	    json_array_size(ports) > EGR_POLICY_MAX_PORTS) {
		set_msg(err, "must be an array of 1 to %d ports", EGR_POLICY_MAX_PORTS);
		ret = -EINVAL;
		goto out;
	}
	json_array_foreach(ports, i, pv) {
		struct egr_allow e = base;

		set_field(err, "%sports[%zu]", prefix, i);
		ret = port_value(pv, &e.port_lo, &e.port_hi, err);
		if (ret)
			goto out;
		if (av->n >= EGR_POLICY_MAX_ALLOW) {
			set_msg(err, "more than %d allow rules in total", EGR_POLICY_MAX_ALLOW);
			ret = -EINVAL;
			goto out;
		}
		e.protos = protos;
		e.index = idx;
		e.name = NULL;
		if (base.name) {
			e.name = strdup(base.name);
			if (!e.name) {
				ret = -ENOMEM;
				goto out;
			}
		}
		ret = allow_push(av, &e);
		if (ret) {
			free(e.name);
			goto out;
		}
	}
	ret = 0;
out:
	if (ret) {
		for (i = first; i < av->n; i++)
			free(av->v[i].name);
		av->n = first;
	}
	free(base.name);
	return ret;
}

static int parse_outbound(const json_t *arr, struct allow_vec *av, struct egr_error *err)
{
	const json_t *v;
	size_t i;
	int ret;

	set_field(err, "network.outbound_allow");
	if (!arr) {
		set_msg(err, "missing (required; [] allows nothing)");
		return -EINVAL;
	}
	if (!json_is_array(arr)) {
		set_msg(err, "must be an array");
		return -EINVAL;
	}
	if (json_array_size(arr) > EGR_POLICY_MAX_ALLOW) {
		set_msg(err, "too many entries: %zu, max %d", json_array_size(arr),
			EGR_POLICY_MAX_ALLOW);
		return -EINVAL;
	}
	json_array_foreach(arr, i, v) {
		set_field(err, "network.outbound_allow[%zu]", i);
		if (json_is_object(v)) {
			ret = parse_allow_object(v, (uint32_t)i, av, err);
		} else if (json_is_string(v)) {
			struct egr_allow e;

			if (json_string_length(v) != strlen(json_string_value(v))) {
				set_msg(err, "contains a NUL byte");
				return -EINVAL;
			}
			if (av->n >= EGR_POLICY_MAX_ALLOW) {
				set_msg(err, "more than %d allow rules in total",
					EGR_POLICY_MAX_ALLOW);
				return -EINVAL;
			}
			ret = egr_allow_parse(json_string_value(v), &e, err);
			set_field(err, "network.outbound_allow[%zu]", i);
			if (!ret) {
				e.index = (uint32_t)i;
				ret = allow_push(av, &e);
				if (ret)
					free(e.name);
			}
		} else {
			set_msg(err, "must be a string \"HOST:PORT\" or an object");
			ret = -EINVAL;
		}
		if (ret)
			return ret;
	}
	return 0;
}

static int parse_dns(const json_t *arr, struct egr_policy *p, struct egr_error *err)
{
	char norm[EGR_DNS_NAME_MAX + 1], q[QUOTE_BUF];
	const json_t *v;
	size_t i;

	if (!arr)
		return 0;
	set_field(err, "network.dns_allow");
	if (!json_is_array(arr)) {
		set_msg(err, "must be an array");
		return -EINVAL;
	}
	if (json_array_size(arr) > EGR_POLICY_MAX_DNS) {
		set_msg(err, "too many entries: %zu, max %d", json_array_size(arr),
			EGR_POLICY_MAX_DNS);
		return -EINVAL;
	}
	if (json_array_size(arr) == 0)
		return 0;
	p->dns_allow = calloc(json_array_size(arr), sizeof(*p->dns_allow));
	if (!p->dns_allow)
		return -ENOMEM;
	json_array_foreach(arr, i, v) {
		const char *s, *why;
		size_t len;

		set_field(err, "network.dns_allow[%zu]", i);
		if (!json_is_string(v)) {
			set_msg(err, "must be a string");
			return -EINVAL;
		}
		s = json_string_value(v);
		len = json_string_length(v);
		why = len != strlen(s) ? "contains a NUL byte" : dns_name_problem(s, len, 1);
		if (why || egr_dns_name_normalize(s, 1, norm, sizeof(norm))) {
			set_msg(err, "bad DNS name %s: %s", quote_n(q, s, len),
				why ? why : "invalid");
			return -EINVAL;
		}
		p->dns_allow[i] = strdup(norm);
		if (!p->dns_allow[i])
			return -ENOMEM;
		p->ndns = i + 1;
	}
	return 0;
}

/*
 * dns_rebind_allow: address ranges DNS answers may point into although they
 * are loopback, private, link-local, ... (docs/dns.md). Each entry is an IPv4
 * or IPv6 address or CIDR; IPv6 bare ("fc00::/7") or in brackets as in
 * outbound_allow ("[fc00::/7]"). Host bits are cleared, as for outbound_allow.
 */
static int parse_rebind(const json_t *arr, struct egr_policy *p, struct egr_error *err)
{
	char buf[ALLOW_TEXT_MAX + 3], q[QUOTE_BUF];
	const json_t *v;
	size_t i;

	if (!arr)
		return 0;
	set_field(err, "network.dns_rebind_allow");
	if (!json_is_array(arr)) {
		set_msg(err, "must be an array of IP addresses or CIDRs such as \"10.0.0.0/8\"");
		return -EINVAL;
	}
	if (json_array_size(arr) > EGR_POLICY_MAX_REBIND) {
		set_msg(err, "too many entries: %zu, max %d", json_array_size(arr),
			EGR_POLICY_MAX_REBIND);
		return -EINVAL;
	}
	if (json_array_size(arr) == 0)
		return 0;
	p->rebind_allow = calloc(json_array_size(arr), sizeof(*p->rebind_allow));
	if (!p->rebind_allow)
		return -ENOMEM;
	json_array_foreach(arr, i, v) {
		struct egr_allow a = { 0 };
		const char *s;
		size_t len;
		int ret;

		set_field(err, "network.dns_rebind_allow[%zu]", i);
		if (!json_is_string(v)) {
			set_msg(err, "must be a string: an IP address or CIDR");
			return -EINVAL;
		}
		s = json_string_value(v);
		len = json_string_length(v);
		if (len != strlen(s) || len == 0 || len > ALLOW_TEXT_MAX) {
			set_msg(err, "must be an IP address or CIDR such as \"10.0.0.0/8\" or "
				"\"fc00::/7\"");
			return -EINVAL;
		}
		/* parse_host() takes IPv6 in brackets only. */
		if (s[0] != '[' && strchr(s, ':'))
			snprintf(buf, sizeof(buf), "[%s]", s);
		else
			snprintf(buf, sizeof(buf), "%s", s);
		ret = parse_host(buf, strlen(buf), &a, err);
		if (ret == -ENOMEM)
			return ret;
		if (ret && (isdigit((unsigned char)s[0]) || buf[0] == '['))
			return ret; /* parse_host() said what is wrong with the address */
		if (ret || a.kind == EGR_HOST_NAME) {
			free(a.name);
			set_msg(err, "must be an IP address or CIDR such as \"10.0.0.0/8\" or "
				"\"fc00::/7\", not %s", quote_n(q, s, len));
			return -EINVAL;
		}
		p->rebind_allow[i].kind = a.kind;
		p->rebind_allow[i].prefixlen = a.prefixlen;
		memcpy(p->rebind_allow[i].addr, a.addr, sizeof(a.addr));
		p->nrebind = i + 1;
	}
	return 0;
}

/*
 * allow_sockets: inet socket kinds (EGR_SB_ALLOW_* for cgroup/sock_create)
 * and other address families (bit n = AF n, for the seccomp family filter;
 * the names of egr_confine_family()).
 */
static int parse_sockets(const json_t *arr, uint32_t *flags, uint64_t *families,
			 struct egr_error *err)
{
	static const struct {
		const char *name;
		uint32_t flag;
	} kinds[] = {
		{ "raw", EGR_SB_ALLOW_RAW },	     { "icmp", EGR_SB_ALLOW_ICMP },
		{ "udplite", EGR_SB_ALLOW_UDPLITE }, { "sctp", EGR_SB_ALLOW_SCTP },
		{ "mptcp", EGR_SB_ALLOW_MPTCP },
	};
	char q[QUOTE_BUF];
	const json_t *v;
	size_t i, k;

	*flags = 0;
	*families = 0;
	if (!arr)
		return 0;
	set_field(err, "network.allow_sockets");
	if (!json_is_array(arr)) {
		set_msg(err, "must be an array");
		return -EINVAL;
	}
	json_array_foreach(arr, i, v) {
		const char *s = json_is_string(v) ? json_string_value(v) : NULL;
		int af;

		set_field(err, "network.allow_sockets[%zu]", i);
		if (s && strlen(s) != json_string_length(v))
			s = NULL; /* an embedded NUL names nothing */
		for (k = 0; s && k < sizeof(kinds) / sizeof(kinds[0]); k++)
			if (!strcmp(s, kinds[k].name))
				break;
		if (s && k < sizeof(kinds) / sizeof(kinds[0])) {
			*flags |= kinds[k].flag;
			continue;
		}
		af = s ? egr_confine_family(s) : -EINVAL;
		if (af < 0 || af >= 64) {
			set_msg(err, "must be an inet socket kind (\"raw\", \"icmp\", \"udplite\", "
				"\"sctp\", \"mptcp\") or an address family (\"netlink\", "
				"\"packet\", \"xdp\", \"vsock\", ...; see docs/policy.md)%s%s",
				s ? ", not " : "", s ? quote(q, s) : "");
			return -EINVAL;
		}
		*families |= 1ULL << af;
	}
	return 0;
}

/*
 * dns_types: the query types the DNS proxy forwards for this sandbox. When
 * present it replaces the default (A, AAAA, CNAME, HTTPS, SVCB), so a policy
 * that wants TXT lists the others too (docs/dns.md).
 */
static int parse_dns_types(const json_t *arr, struct egr_policy *p, struct egr_error *err)
{
	static const struct {
		const char *name;
		uint16_t type;
	} types[] = {
		{ "A", 1 },	 { "NS", 2 },	  { "CNAME", 5 }, { "SOA", 6 },	  { "NULL", 10 },
		{ "PTR", 12 },	 { "MX", 15 },	  { "TXT", 16 },  { "AAAA", 28 }, { "SRV", 33 },
		{ "NAPTR", 35 }, { "DS", 43 },	  { "DNSKEY", 48 }, { "SVCB", 64 }, { "HTTPS", 65 },
		{ "CAA", 257 },	 { "ANY", 255 },
	};
	char q[QUOTE_BUF];
	const json_t *v;
	size_t i, k;

	p->ndns_types = 0;
	if (!arr)
		return 0;
	set_field(err, "network.dns_types");
	if (!json_is_array(arr) || !json_array_size(arr) ||
	    json_array_size(arr) > EGR_POLICY_MAX_DNS_TYPES) {
		set_msg(err, "must be an array of 1-%d query type names", EGR_POLICY_MAX_DNS_TYPES);
		return -EINVAL;
	}
	json_array_foreach(arr, i, v) {
		const char *s = json_is_string(v) ? json_string_value(v) : NULL;

		set_field(err, "network.dns_types[%zu]", i);
		for (k = 0; s && k < sizeof(types) / sizeof(types[0]); k++)
			if (!strcasecmp(s, types[k].name))
				break;
		if (!s || k == sizeof(types) / sizeof(types[0])) {
			set_msg(err, "must be a DNS query type such as \"A\", \"AAAA\", \"TXT\" "
				"(see docs/dns.md)%s%s", s ? ", not " : "", s ? quote(q, s) : "");
			return -EINVAL;
		}
		p->dns_types[p->ndns_types++] = types[k].type;
	}
	return 0;
}

/* A string that is one of two words: *out is 0 for first (the default when
 * in is absent), 1 for second; anything else is an error naming field. */
static int parse_choice(const json_t *in, const char *field, const char *first,
			const char *second, int *out, struct egr_error *err)
{
	const char *s = json_is_string(in) ? json_string_value(in) : NULL;
	char q[QUOTE_BUF];

	if (!in)
		return 0;
	set_field(err, "%s", field);
	if (s && strlen(s) != json_string_length(in))
		s = NULL; /* an embedded NUL */
	if (s && !strcmp(s, first)) {
		*out = 0;
	} else if (s && !strcmp(s, second)) {
		*out = 1;
	} else {
		set_msg(err, "must be \"%s\" or \"%s\"%s%s", first, second, s ? ", not " : "",
			s ? quote(q, s) : "");
		return -EINVAL;
	}
	return 0;
}

/* network.breaker: {"max_denies": N, "window_s": S}, both required. */
static int parse_breaker(const json_t *b, struct egr_policy *p, struct egr_error *err)
{
	static const char *const known[] = { "max_denies", "window_s", NULL };
	static const struct {
		const char *key;
		json_int_t max;
	} f[] = {
		{ "max_denies", EGR_POLICY_MAX_BREAKER_DENIES },
		{ "window_s", EGR_POLICY_MAX_BREAKER_WINDOW_S },
	};
	uint32_t val[2];
	size_t i;
	int ret;

	if (!b)
		return 0;
	set_field(err, "network.breaker");
	if (!json_is_object(b)) {
		set_msg(err, "must be an object {\"max_denies\": N, \"window_s\": S}");
		return -EINVAL;
	}
	ret = check_keys(b, known, "network.breaker.", err);
	if (ret)
		return ret;
	for (i = 0; i < 2; i++) {
		const json_t *v = json_object_get(b, f[i].key);
		json_int_t n;

		set_field(err, "network.breaker.%s", f[i].key);
		if (!v) {
			set_msg(err, "missing (required)");
			return -EINVAL;
		}
		if (!json_is_integer(v)) {
			set_msg(err, "must be an integer");
			return -EINVAL;
		}
		n = json_integer_value(v);
		if (n < 1 || n > f[i].max) {
			set_msg(err, "%lld out of range 1-%lld", (long long)n, (long long)f[i].max);
			return -EINVAL;
		}
		val[i] = (uint32_t)n;
	}
	p->breaker_max_denies = val[0];
	p->breaker_window_s = val[1];
	return 0;
}

static int parse_network(const json_t *net, struct egr_policy *p, struct allow_vec *av,
			 struct egr_error *err)
{
	static const char *const known[] = { "default",	  "outbound_allow", "dns_allow",
					     "inbound",	  "allow_sockets",  "trust",
					     "dns_types", "dns_rebind_allow", "inspect", "on_escape", "mode", "breaker", NULL };
	const json_t *def, *in;
	char q[QUOTE_BUF];
	int ret;

	set_field(err, "network");
	if (!net) {
		set_msg(err, "missing (required)");
		return -EINVAL;
	}
	if (!json_is_object(net)) {
		set_msg(err, "must be an object");
		return -EINVAL;
	}
	ret = check_keys(net, known, "network.", err);
	if (ret)
		return ret;

	def = json_object_get(net, "default");
	set_field(err, "network.default");
	if (!def) {
		set_msg(err, "missing (required; must be \"deny\")");
		return -EINVAL;
	}
	if (!json_is_string(def) || strcmp(json_string_value(def), "deny") ||
	    json_string_length(def) != 4) {
		if (json_is_string(def) && !strcmp(json_string_value(def), "allow"))
			set_msg(err, "\"allow\" is not supported: only default-deny policies are "
				"enforced; list what is allowed in outbound_allow");
		else
			set_msg(err, "must be \"deny\"%s%s", json_is_string(def) ? ", not " : "",
				json_is_string(def) ? quote(q, json_string_value(def)) : "");
		return -EINVAL;
	}

	in = json_object_get(net, "inbound");
	if (in) {
		const char *s = json_is_string(in) ? json_string_value(in) : NULL;

		set_field(err, "network.inbound");
		if (s && !strcmp(s, "deny")) {
			p->inbound_allow = 0;
		} else if (s && !strcmp(s, "allow")) {
			p->inbound_allow = 1;
		} else {
			set_msg(err, "must be \"deny\" or \"allow\"%s%s", s ? ", not " : "",
				s ? quote(q, s) : "");
			return -EINVAL;
		}
	}
	in = json_object_get(net, "trust");
	if (in) {
		const char *s = json_is_string(in) ? json_string_value(in) : NULL;

		set_field(err, "network.trust");
		if (s && strlen(s) != json_string_length(in))
			s = NULL;
		if (s && !strcmp(s, "standard")) {
			p->trust_strict = 0;
		} else if (s && !strcmp(s, "strict")) {
			p->trust_strict = 1;
		} else {
			set_msg(err, "must be \"standard\" or \"strict\"%s%s", s ? ", not " : "",
				s ? quote(q, s) : "");
			return -EINVAL;
		}
	}
	/* After trust: its default follows the trust class. */
	p->inspect = p->trust_strict;
	in = json_object_get(net, "inspect");
	if (in) {
		set_field(err, "network.inspect");
		if (!json_is_boolean(in)) {
			set_msg(err, "must be true or false");
			return -EINVAL;
		}
		p->inspect = json_is_true(in);
	}
	ret = parse_choice(json_object_get(net, "on_escape"), "network.on_escape", "kill",
			   "alert", &p->escape_alert, err);
	if (ret)
		return ret;
	ret = parse_choice(json_object_get(net, "mode"), "network.mode", "enforce", "audit",
			   &p->audit_mode, err);
	if (ret)
		return ret;
	ret = parse_breaker(json_object_get(net, "breaker"), p, err);
	if (ret)
		return ret;
	ret = parse_sockets(json_object_get(net, "allow_sockets"), &p->sb_flags, &p->families,
			    err);
	if (ret)
		return ret;
	ret = parse_dns_types(json_object_get(net, "dns_types"), p, err);
	if (ret)
		return ret;
	ret = parse_rebind(json_object_get(net, "dns_rebind_allow"), p, err);
	if (ret)
		return ret;
	ret = parse_outbound(json_object_get(net, "outbound_allow"), av, err);
	if (ret)
		return ret;
	return parse_dns(json_object_get(net, "dns_allow"), p, err);
}

/* A positive integer no larger than max, for limits.*. */
static int limit_value(const json_t *v, const char *field, uint64_t max, uint64_t *out,
		       struct egr_error *err)
{
	json_int_t n;

	set_field(err, "limits.%s", field);
	if (!json_is_integer(v)) {
		set_msg(err, "must be an integer");
		return -EINVAL;
	}
	n = json_integer_value(v);
	if (n <= 0 || (uint64_t)n > max) {
		set_msg(err, "%lld out of range 1-%llu", (long long)n, (unsigned long long)max);
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
	set_field(err, "limits");
	if (!json_is_object(lim)) {
		set_msg(err, "must be an object");
		return -EINVAL;
	}
	ret = check_keys(lim, known, "limits.", err);
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
		set_field(err, "limits");
		set_msg(err, "give egress_bytes, tenant_egress_bytes or both");
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

int egr_policy_from_json(const json_t *root, struct egr_policy *out, struct egr_error *err)
{
	static const char *const known[] = { "tenant", "execution_id", "principal", "tool",
					     "version", "network", "limits", NULL };
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
	struct allow_vec av = { 0 };
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
		set_msg(err, "a policy must be a JSON object");
		return -EINVAL;
	}
	ret = check_keys(root, known, "", err);
	if (ret)
		return ret;

	v = json_object_get(root, "tenant");
	if (!v) {
		set_field(err, "tenant");
		set_msg(err, "missing (required)");
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
	ret = parse_network(json_object_get(root, "network"), &p, &av, err);
	if (ret)
		goto fail;
	ret = parse_limits(json_object_get(root, "limits"), &p, err);
	if (ret)
		goto fail;
	p.allow = av.v;
	p.nallow = av.n;
	av.v = NULL;
	av.n = 0;
	ret = policy_sha256(root, p.sha256);
	if (ret)
		goto fail;
	memset(err, 0, sizeof(*err));
	*out = p;
	return 0;
fail:
	if (ret == -ENOMEM) {
		memset(err, 0, sizeof(*err));
		set_msg(err, "out of memory");
	}
	for (i = 0; i < av.n; i++)
		free(av.v[i].name);
	free(av.v);
	egr_policy_free(&p);
	return ret;
}

int egr_policy_parse(const char *text, size_t len, struct egr_policy *out,
		     struct egr_error *err)
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
		set_msg(err, "no policy text");
		return -EINVAL;
	}
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		if (json_error_code(&jerr) == json_error_out_of_memory)
			return -ENOMEM;
		set_msg(err, "invalid JSON at line %d, column %d: %s", jerr.line, jerr.column,
			jerr.text);
		return -EINVAL;
	}
	ret = egr_policy_from_json(root, out, err);
	json_decref(root);
	return ret;
}
