// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The text forms inside a policy (docs/policy.md): DNS names, hosts and
 * CIDRs, port ranges, one outbound_allow string, and the error helpers the
 * rest of the parser (policy.c, policy_network.c) shares through
 * policy_int.h. Pure: no I/O; fuzzed by fuzz_policy and fuzz_control.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "egressd.h"
#include "netaddr.h"
#include "policy_text.h"
#include "policy_int.h"

/* --- error helpers ------------------------------------------------------------ */

void egr_pol_field(struct egr_error *err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err->field, sizeof(err->field), fmt, ap);
	va_end(ap);
}

void egr_pol_msg(struct egr_error *err, const char *fmt, ...)
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
const char *egr_pol_quote_n(char *dst, const char *s, size_t len)
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

const char *egr_pol_quote(char *dst, const char *s)
{
	return egr_pol_quote_n(dst, s, strlen(s));
}

/* An object key as it may appear in a field path: printable, bounded. */
const char *egr_pol_key(char *dst, size_t size, const char *key)
{
	size_t i;

	for (i = 0; key[i] && i + 1 < size && i < 64; i++) {
		unsigned char c = (unsigned char)key[i];

		dst[i] = (c < 0x20 || c > 0x7e) ? '?' : (char)c;
	}
	dst[i] = '\0';
	return dst;
}

/* Refuse any key of obj not in known; prefix starts the field. */
int egr_pol_check_keys(const json_t *obj, const char *const *known, const char *prefix,
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
		egr_pol_field(err, "%s%s", prefix, egr_pol_key(kb, sizeof(kb), key));
		egr_pol_msg(err, "unknown field");
		return -EINVAL;
	}
	return 0;
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
int egr_pol_ports(const char *s, size_t len, uint16_t *lo, uint16_t *hi,
		       struct egr_error *err)
{
	char q[QUOTE_BUF];
	const char *dash;
	unsigned int a, b;

	if (len == 0) {
		egr_pol_msg(err, "empty port (use a number, a range \"A-B\" or \"*\")");
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
			egr_pol_msg(err, "bad port %s: a port is a decimal number 0-65535",
				egr_pol_quote_n(q, s, len));
			return -EINVAL;
		}
		*lo = *hi = (uint16_t)a;
		return 0;
	}
	if (parse_dec(s, (size_t)(dash - s), 0xffff, &a) ||
	    parse_dec(dash + 1, len - (size_t)(dash - s) - 1, 0xffff, &b)) {
		egr_pol_msg(err, "bad port range %s: a range is \"A-B\" with A and B in 0-65535",
			egr_pol_quote_n(q, s, len));
		return -EINVAL;
	}
	if (a > b) {
		egr_pol_msg(err, "bad port range %s: %u is greater than %u",
			    egr_pol_quote_n(q, s, len), a, b);
		return -EINVAL;
	}
	*lo = (uint16_t)a;
	*hi = (uint16_t)b;
	return 0;
}

/* --- DNS names -------------------------------------------------------------------- */

/* NULL when name[0..len) is a valid name (or "*." wildcard), else why not. */
const char *egr_pol_dns_name_problem(const char *name, size_t len, int allow_wildcard)
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
	if (egr_pol_dns_name_problem(name, len, allow_wildcard))
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
		egr_pol_msg(err, "0.0.0.0 is not a destination: the kernel sends it to this host's "
			"loopback; allow 127.0.0.1 to reach loopback");
		return -EINVAL;
	}
	if (a->kind == EGR_HOST_V6 && a->prefixlen == 128 && !memcmp(a->addr, zero, 16)) {
		egr_pol_msg(err, "[::] is not a destination: the kernel sends it to this host's "
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
int egr_pol_host(const char *h, size_t len, struct egr_allow *out, struct egr_error *err)
{
	char buf[ALLOW_TEXT_MAX + 1], norm[EGR_DNS_NAME_MAX + 1], q[QUOTE_BUF];
	struct egr_prefix pfx;
	const char *why;
	size_t i;
	int v4 = 1, ret;

	if (len == 0) {
		egr_pol_msg(err, "empty host");
		return -EINVAL;
	}
	if (len > ALLOW_TEXT_MAX) {
		egr_pol_msg(err, "host too long (%zu bytes)", len);
		return -EINVAL;
	}
	if (h[0] == '[') {
		if (h[len - 1] != ']') {
			egr_pol_msg(err, "bad IPv6 host %s: missing ']'",
				    egr_pol_quote_n(q, h, len));
			return -EINVAL;
		}
		ret = egr_prefix_parse(h + 1, len - 2, AF_INET6, &pfx);
		if (ret == -EDOM) {
			egr_pol_msg(err, "bad IPv6 prefix length in %s: use 0-128",
				    egr_pol_quote_n(q, h, len));
			return -EINVAL;
		}
		if (ret) {
			egr_pol_msg(err, "bad IPv6 address %s",
				egr_pol_quote_n(q, h + 1, strcspn_n(h + 1, len - 2, '/')));
			return -EINVAL;
		}
		/* The kernel judges mapped destinations by the IPv4 rules. */
		egr_prefix_unmap(&pfx);
		return host_from_prefix(&pfx, out, err);
	}
	for (i = 0; i < len; i++) {
		if (h[i] == ':') {
			egr_pol_msg(err,
				    "bad host %s: a host has no \":PORT\" here and IPv6 addresses "
				    "go in brackets",
				    egr_pol_quote_n(q, h, len));
			return -EINVAL;
		}
		if (!isdigit((unsigned char)h[i]) && h[i] != '.' && h[i] != '/')
			v4 = 0;
	}
	if (v4 && isdigit((unsigned char)h[0])) {
		ret = egr_prefix_parse(h, len, AF_INET, &pfx);
		if (ret == -EDOM) {
			egr_pol_msg(err, "bad IPv4 prefix length in %s: use 0-32",
				    egr_pol_quote_n(q, h, len));
			return -EINVAL;
		}
		if (ret) {
			egr_pol_msg(err, "bad IPv4 address %s",
				    egr_pol_quote_n(q, h, strcspn_n(h, len, '/')));
			return -EINVAL;
		}
		return host_from_prefix(&pfx, out, err);
	}
	memcpy(buf, h, len);
	buf[len] = '\0';
	if (memchr(h, '/', len)) {
		egr_pol_msg(err, "bad host %s: only IP addresses take a /prefix length",
			egr_pol_quote_n(q, h, len));
		return -EINVAL;
	}
	why = egr_pol_dns_name_problem(buf, len, 0);
	if (why) {
		if (buf[0] == '*')
			egr_pol_msg(err, "wildcard %s not allowed in outbound_allow "
				"(wildcards belong in dns_allow)", egr_pol_quote(q, buf));
		else
			egr_pol_msg(err, "bad DNS name %s: %s", egr_pol_quote(q, buf), why);
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

/* "https://api.example.com/v1" is a URL, not a destination: refused with
 * the entry it most likely means (the scheme's port when it has a known
 * one). */
static int url_entry(const char *text, struct egr_error *err)
{
	static const struct {
		const char *scheme;
		unsigned port;
	} known[] = { { "https", 443 }, { "http", 80 }, { "wss", 443 }, { "ws", 80 },
		      { "ftp", 21 },    { "ssh", 22 },  { "git", 9418 } };
	const char *sep = strstr(text, "://"), *host = sep + 3;
	size_t hlen = strcspn(host, "/?#");
	unsigned port = 0;
	char q[QUOTE_BUF];

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if ((size_t)(sep - text) == strlen(known[i].scheme) &&
		    !strncasecmp(text, known[i].scheme, (size_t)(sep - text)))
			port = known[i].port;
	if (hlen && memchr(host, ':', hlen))
		egr_pol_msg(err, "%s is a URL, not a destination: write HOST:PORT, here \"%.*s\"",
			    egr_pol_quote(q, text), (int)hlen, host);
	else if (hlen && port)
		egr_pol_msg(err, "%s is a URL, not a destination: write HOST:PORT, here \"%.*s:%u\"",
			    egr_pol_quote(q, text), (int)hlen, host, port);
	else
		egr_pol_msg(err, "%s is a URL, not a destination: write HOST:PORT (e.g. "
			    "\"api.example.com:443\")", egr_pol_quote(q, text));
	return -EINVAL;
}

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
		egr_pol_msg(err, "missing entry");
		return -EINVAL;
	}
	len = strlen(text);
	if (len == 0) {
		egr_pol_msg(err, "empty entry");
		return -EINVAL;
	}
	if (len > ALLOW_TEXT_MAX) {
		egr_pol_msg(err, "entry too long (%zu bytes, max %d): %s", len, ALLOW_TEXT_MAX,
			egr_pol_quote(q, text));
		return -EINVAL;
	}
	for (i = 0; i < len; i++) {
		if ((unsigned char)text[i] <= 0x20 || (unsigned char)text[i] > 0x7e) {
			egr_pol_msg(err, "invalid character in %s", egr_pol_quote(q, text));
			return -EINVAL;
		}
	}
	s = text;
	/* A URL is the commonest slip: say what to write instead. */
	if (strstr(text, "://"))
		return url_entry(text, err);
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
				egr_pol_msg(err,
					    "unknown protocol prefix %s (use \"tcp/\", \"udp/\" "
					    "or none for both)",
					    egr_pol_quote_n(q, s, (size_t)(slash - s + 1)));
				return -EINVAL;
			}
			s = slash + 1;
			len -= (size_t)(slash - text) + 1;
		}
	}
	if (s[0] == '[') {
		host_end = strchr(s, ']');
		if (!host_end) {
			egr_pol_msg(err, "missing ']' in %s", egr_pol_quote(q, text));
			return -EINVAL;
		}
		host_end++;
		if (*host_end != ':') {
			egr_pol_msg(err, "missing \":PORT\" after the IPv6 address in %s",
				egr_pol_quote(q, text));
			return -EINVAL;
		}
		colon = host_end;
	} else {
		colon = strrchr(s, ':');
		if (!colon) {
			egr_pol_msg(err, "missing \":PORT\" in %s (use \":*\" for every port)",
				egr_pol_quote(q, text));
			return -EINVAL;
		}
		if (memchr(s, ':', (size_t)(colon - s))) {
			egr_pol_msg(err, "IPv6 addresses must be in brackets: %s "
				"(write \"[ADDR]:PORT\")", egr_pol_quote(q, text));
			return -EINVAL;
		}
	}
	ret = egr_pol_host(s, (size_t)(colon - s), out, err);
	if (ret)
		goto fail;
	ret = egr_pol_ports(colon + 1, strlen(colon + 1), &out->port_lo, &out->port_hi, err);
	if (ret)
		goto fail;
	out->protos = protos;
	return 0;
fail:
	free(out->name);
	memset(out, 0, sizeof(*out));
	return ret;
}
