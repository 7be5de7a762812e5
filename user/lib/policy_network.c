// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The "network" block of a policy (docs/policy.md): outbound_allow in both
 * forms, dns_allow, dns_rebind_allow, allow_sockets, dns_types, the
 * breaker and the one-word choices. Everything is checked before anything
 * is kept; err names the field. Pure; fuzzed by fuzz_policy.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "confine.h"
#include "egressd.h"
#include "policy_int.h"

static int allow_push(struct egr_pol_allow_vec *a, const struct egr_allow *e)
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

static int port_value(const json_t *v, uint16_t *lo, uint16_t *hi, struct egr_error *err)
{
	if (json_is_integer(v)) {
		json_int_t n = json_integer_value(v);

		if (n < 0 || n > 0xffff) {
			egr_pol_msg(err, "port %lld out of range 0-65535", (long long)n);
			return -EINVAL;
		}
		*lo = *hi = (uint16_t)n;
		return 0;
	}
	if (json_is_string(v)) {
		if (json_string_length(v) != strlen(json_string_value(v))) {
			egr_pol_msg(err, "port contains a NUL byte");
			return -EINVAL;
		}
		return egr_pol_ports(json_string_value(v), json_string_length(v), lo, hi, err);
	}
	egr_pol_msg(err, "a port is a number, a range string \"A-B\" or \"*\"");
	return -EINVAL;
}

static int parse_allow_object(const json_t *o, uint32_t idx, struct egr_pol_allow_vec *av,
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
	ret = egr_pol_check_keys(o, known, prefix, err);
	if (ret)
		return ret;
	host = json_object_get(o, "host");
	ports = json_object_get(o, "ports");
	proto = json_object_get(o, "protocol");
	if (proto) {
		const char *ps = json_is_string(proto) ? json_string_value(proto) : NULL;

		egr_pol_field(err, "%sprotocol", prefix);
		if (ps && !strcmp(ps, "tcp")) {
			protos = EGR_PROTO_TCP;
		} else if (ps && !strcmp(ps, "udp")) {
			protos = EGR_PROTO_UDP;
		} else if (ps && !strcmp(ps, "any")) {
			protos = EGR_PROTO_ANY;
		} else {
			egr_pol_msg(err, "must be \"tcp\", \"udp\" or \"any\"%s%s",
				    ps ? ", not " : "", ps ? egr_pol_quote(q, ps) : "");
			return -EINVAL;
		}
	}
	egr_pol_field(err, "%shost", prefix);
	if (!host) {
		egr_pol_msg(err, "missing (required)");
		return -EINVAL;
	}
	if (!json_is_string(host)) {
		egr_pol_msg(err, "must be a string");
		return -EINVAL;
	}
	if (json_string_length(host) != strlen(json_string_value(host))) {
		egr_pol_msg(err, "contains a NUL byte");
		return -EINVAL;
	}
	ret = egr_pol_host(json_string_value(host), json_string_length(host), &base, err);
	if (ret)
		return ret;
	egr_pol_field(err, "%sports", prefix);
	if (!ports) {
		egr_pol_msg(err, "missing (required; [\"*\"] for every port)");
		ret = -EINVAL;
		goto out;
	}
	if (!json_is_array(ports) || json_array_size(ports) == 0 ||
	    json_array_size(ports) > EGR_POLICY_MAX_PORTS) {
		egr_pol_msg(err, "must be an array of 1 to %d ports", EGR_POLICY_MAX_PORTS);
		ret = -EINVAL;
		goto out;
	}
	json_array_foreach(ports, i, pv) {
		struct egr_allow e = base;

		egr_pol_field(err, "%sports[%zu]", prefix, i);
		ret = port_value(pv, &e.port_lo, &e.port_hi, err);
		if (ret)
			goto out;
		if (av->n >= EGR_POLICY_MAX_ALLOW) {
			egr_pol_msg(err, "more than %d allow rules in total", EGR_POLICY_MAX_ALLOW);
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

static int parse_outbound(const json_t *arr, struct egr_pol_allow_vec *av, struct egr_error *err)
{
	const json_t *v;
	size_t i;
	int ret;

	egr_pol_field(err, "network.outbound_allow");
	if (!arr) {
		egr_pol_msg(err, "missing (required; [] allows nothing)");
		return -EINVAL;
	}
	if (!json_is_array(arr)) {
		egr_pol_msg(err, "must be an array");
		return -EINVAL;
	}
	if (json_array_size(arr) > EGR_POLICY_MAX_ALLOW) {
		egr_pol_msg(err, "too many entries: %zu, max %d", json_array_size(arr),
			EGR_POLICY_MAX_ALLOW);
		return -EINVAL;
	}
	json_array_foreach(arr, i, v) {
		egr_pol_field(err, "network.outbound_allow[%zu]", i);
		if (json_is_object(v)) {
			ret = parse_allow_object(v, (uint32_t)i, av, err);
		} else if (json_is_string(v)) {
			struct egr_allow e;

			if (json_string_length(v) != strlen(json_string_value(v))) {
				egr_pol_msg(err, "contains a NUL byte");
				return -EINVAL;
			}
			if (av->n >= EGR_POLICY_MAX_ALLOW) {
				egr_pol_msg(err, "more than %d allow rules in total",
					EGR_POLICY_MAX_ALLOW);
				return -EINVAL;
			}
			ret = egr_allow_parse(json_string_value(v), &e, err);
			egr_pol_field(err, "network.outbound_allow[%zu]", i);
			if (!ret) {
				e.index = (uint32_t)i;
				ret = allow_push(av, &e);
				if (ret)
					free(e.name);
			}
		} else {
			egr_pol_msg(err, "must be a string \"HOST:PORT\" or an object");
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
	egr_pol_field(err, "network.dns_allow");
	if (!json_is_array(arr)) {
		egr_pol_msg(err, "must be an array");
		return -EINVAL;
	}
	if (json_array_size(arr) > EGR_POLICY_MAX_DNS) {
		egr_pol_msg(err, "too many entries: %zu, max %d", json_array_size(arr),
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

		egr_pol_field(err, "network.dns_allow[%zu]", i);
		if (!json_is_string(v)) {
			egr_pol_msg(err, "must be a string");
			return -EINVAL;
		}
		s = json_string_value(v);
		len = json_string_length(v);
		why =
		    len != strlen(s) ? "contains a NUL byte" : egr_pol_dns_name_problem(s, len, 1);
		if (why || egr_dns_name_normalize(s, 1, norm, sizeof(norm))) {
			egr_pol_msg(err, "bad DNS name %s: %s", egr_pol_quote_n(q, s, len),
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
	egr_pol_field(err, "network.dns_rebind_allow");
	if (!json_is_array(arr)) {
		egr_pol_msg(err,
			    "must be an array of IP addresses or CIDRs such as \"10.0.0.0/8\"");
		return -EINVAL;
	}
	if (json_array_size(arr) > EGR_POLICY_MAX_REBIND) {
		egr_pol_msg(err, "too many entries: %zu, max %d", json_array_size(arr),
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

		egr_pol_field(err, "network.dns_rebind_allow[%zu]", i);
		if (!json_is_string(v)) {
			egr_pol_msg(err, "must be a string: an IP address or CIDR");
			return -EINVAL;
		}
		s = json_string_value(v);
		len = json_string_length(v);
		if (len != strlen(s) || len == 0 || len > ALLOW_TEXT_MAX) {
			egr_pol_msg(err, "must be an IP address or CIDR such as \"10.0.0.0/8\" or "
				"\"fc00::/7\"");
			return -EINVAL;
		}
		/* egr_pol_host() takes IPv6 in brackets only. */
		if (s[0] != '[' && strchr(s, ':'))
			snprintf(buf, sizeof(buf), "[%s]", s);
		else
			snprintf(buf, sizeof(buf), "%s", s);
		ret = egr_pol_host(buf, strlen(buf), &a, err);
		if (ret == -ENOMEM)
			return ret;
		if (ret && (isdigit((unsigned char)s[0]) || buf[0] == '['))
			return ret; /* egr_pol_host() said what is wrong with the address */
		if (ret || a.kind == EGR_HOST_NAME) {
			free(a.name);
			egr_pol_msg(err, "must be an IP address or CIDR such as \"10.0.0.0/8\" or "
				"\"fc00::/7\", not %s", egr_pol_quote_n(q, s, len));
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
	egr_pol_field(err, "network.allow_sockets");
	if (!json_is_array(arr)) {
		egr_pol_msg(err, "must be an array");
		return -EINVAL;
	}
	json_array_foreach(arr, i, v) {
		const char *s = json_is_string(v) ? json_string_value(v) : NULL;
		int af;

		egr_pol_field(err, "network.allow_sockets[%zu]", i);
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
			egr_pol_msg(err,
				    "must be an inet socket kind (\"raw\", \"icmp\", \"udplite\", "
				    "\"sctp\", \"mptcp\") or an address family (\"netlink\", "
				    "\"packet\", \"xdp\", \"vsock\", ...; see docs/policy.md)%s%s",
				    s ? ", not " : "", s ? egr_pol_quote(q, s) : "");
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
	egr_pol_field(err, "network.dns_types");
	if (!json_is_array(arr) || !json_array_size(arr) ||
	    json_array_size(arr) > EGR_POLICY_MAX_DNS_TYPES) {
		egr_pol_msg(err, "must be an array of 1-%d query type names",
			    EGR_POLICY_MAX_DNS_TYPES);
		return -EINVAL;
	}
	json_array_foreach(arr, i, v) {
		const char *s = json_is_string(v) ? json_string_value(v) : NULL;

		egr_pol_field(err, "network.dns_types[%zu]", i);
		for (k = 0; s && k < sizeof(types) / sizeof(types[0]); k++)
			if (!strcasecmp(s, types[k].name))
				break;
		if (!s || k == sizeof(types) / sizeof(types[0])) {
			egr_pol_msg(err,
				    "must be a DNS query type such as \"A\", \"AAAA\", \"TXT\" "
				    "(see docs/dns.md)%s%s",
				    s ? ", not " : "", s ? egr_pol_quote(q, s) : "");
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
	egr_pol_field(err, "%s", field);
	if (s && strlen(s) != json_string_length(in))
		s = NULL; /* an embedded NUL */
	if (s && !strcmp(s, first)) {
		*out = 0;
	} else if (s && !strcmp(s, second)) {
		*out = 1;
	} else {
		egr_pol_msg(err, "must be \"%s\" or \"%s\"%s%s", first, second, s ? ", not " : "",
			s ? egr_pol_quote(q, s) : "");
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
	egr_pol_field(err, "network.breaker");
	if (!json_is_object(b)) {
		egr_pol_msg(err, "must be an object {\"max_denies\": N, \"window_s\": S}");
		return -EINVAL;
	}
	ret = egr_pol_check_keys(b, known, "network.breaker.", err);
	if (ret)
		return ret;
	for (i = 0; i < 2; i++) {
		const json_t *v = json_object_get(b, f[i].key);
		json_int_t n;

		egr_pol_field(err, "network.breaker.%s", f[i].key);
		if (!v) {
			egr_pol_msg(err, "missing (required)");
			return -EINVAL;
		}
		if (!json_is_integer(v)) {
			egr_pol_msg(err, "must be an integer");
			return -EINVAL;
		}
		n = json_integer_value(v);
		if (n < 1 || n > f[i].max) {
			egr_pol_msg(err, "%lld out of range 1-%lld", (long long)n,
				    (long long)f[i].max);
			return -EINVAL;
		}
		val[i] = (uint32_t)n;
	}
	p->breaker_max_denies = val[0];
	p->breaker_window_s = val[1];
	return 0;
}

int egr_pol_network(const json_t *net, struct egr_policy *p, struct egr_pol_allow_vec *av,
			 struct egr_error *err)
{
	static const char *const known[] = { "default",	  "outbound_allow", "dns_allow",
					     "inbound",	  "allow_sockets",  "trust",
					     "dns_types", "dns_rebind_allow", "inspect", "on_escape", "mode", "breaker",
					     "dns_reject", "unknown_names", "ask_timeout_s", "ask_ports",
					     NULL };
	const json_t *def, *in;
	char q[QUOTE_BUF];
	int ret;

	egr_pol_field(err, "network");
	if (!net) {
		egr_pol_msg(err, "missing (required)");
		return -EINVAL;
	}
	if (!json_is_object(net)) {
		egr_pol_msg(err, "must be an object");
		return -EINVAL;
	}
	ret = egr_pol_check_keys(net, known, "network.", err);
	if (ret)
		return ret;

	def = json_object_get(net, "default");
	egr_pol_field(err, "network.default");
	if (!def) {
		egr_pol_msg(err, "missing (required; must be \"deny\")");
		return -EINVAL;
	}
	if (!json_is_string(def) || strcmp(json_string_value(def), "deny") ||
	    json_string_length(def) != 4) {
		if (json_is_string(def) && !strcmp(json_string_value(def), "allow"))
			egr_pol_msg(err,
				    "\"allow\" is not supported: only default-deny policies are "
				    "enforced; list what is allowed in outbound_allow");
		else
			egr_pol_msg(
			    err, "must be \"deny\"%s%s", json_is_string(def) ? ", not " : "",
			    json_is_string(def) ? egr_pol_quote(q, json_string_value(def)) : "");
		return -EINVAL;
	}

	in = json_object_get(net, "inbound");
	if (in) {
		const char *s = json_is_string(in) ? json_string_value(in) : NULL;

		egr_pol_field(err, "network.inbound");
		if (s && !strcmp(s, "deny")) {
			p->inbound_allow = 0;
		} else if (s && !strcmp(s, "allow")) {
			p->inbound_allow = 1;
		} else {
			egr_pol_msg(err, "must be \"deny\" or \"allow\"%s%s", s ? ", not " : "",
				s ? egr_pol_quote(q, s) : "");
			return -EINVAL;
		}
	}
	in = json_object_get(net, "trust");
	if (in) {
		const char *s = json_is_string(in) ? json_string_value(in) : NULL;

		egr_pol_field(err, "network.trust");
		if (s && strlen(s) != json_string_length(in))
			s = NULL;
		if (s && !strcmp(s, "standard")) {
			p->trust_strict = 0;
		} else if (s && !strcmp(s, "strict")) {
			p->trust_strict = 1;
		} else {
			egr_pol_msg(err, "must be \"standard\" or \"strict\"%s%s",
				    s ? ", not " : "", s ? egr_pol_quote(q, s) : "");
			return -EINVAL;
		}
	}
	/* After trust: its default follows the trust class. */
	p->inspect = p->trust_strict;
	in = json_object_get(net, "inspect");
	if (in) {
		egr_pol_field(err, "network.inspect");
		if (!json_is_boolean(in)) {
			egr_pol_msg(err, "must be true or false");
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
	ret = parse_choice(json_object_get(net, "dns_reject"), "network.dns_reject", "nxdomain",
			   "refused", &p->dns_reject_refused, err);
	if (ret)
		return ret;
	ret = egr_pol_ask(net, p, err);
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
