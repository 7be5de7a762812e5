// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * network.unknown_names, ask_timeout_s and ask_ports (docs/policy.md
 * "Approvals"): whether a DNS query for a name the policy does not allow is
 * refused (today's behaviour) or held until someone outside the sandbox
 * approves or denies it, for how long, and on which ports an approved name
 * may be dialled.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "policy_ask.h"
#include "policy_int.h"

/* "tcp/443", "udp/5000-5010", or a protocol with "*" (every port). */
static int ask_port(const char *s, size_t len, struct egr_port_range *out,
		    struct egr_error *err)
{
	char q[QUOTE_BUF];
	uint16_t protos;

	if (len > 4 && !strncmp(s, "tcp/", 4))
		protos = EGR_PROTO_TCP;
	else if (len > 4 && !strncmp(s, "udp/", 4))
		protos = EGR_PROTO_UDP;
	else {
		egr_pol_msg(err, "must be \"tcp/PORT\" or \"udp/PORT\" (a port, \"A-B\" or \"*\"), "
			    "not %s", egr_pol_quote_n(q, s, len));
		return -EINVAL;
	}
	out->protos = protos;
	return egr_pol_ports(s + 4, len - 4, &out->lo, &out->hi, err);
}

int egr_policy_ask_ports(const json_t *ports, const char *field, struct egr_port_range *out,
			 size_t *n, struct egr_error *err)
{
	const json_t *v;
	size_t i;
	int ret;

	egr_pol_field(err, "%s", field);
	if (!json_is_array(ports) || !json_array_size(ports) ||
	    json_array_size(ports) > EGR_MAX_PORT_RANGES) {
		egr_pol_msg(err, "must be an array of 1 to %d entries such as \"tcp/443\"",
			    EGR_MAX_PORT_RANGES);
		return -EINVAL;
	}
	json_array_foreach(ports, i, v) {
		egr_pol_field(err, "%s[%zu]", field, i);
		if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) {
			egr_pol_msg(err, "must be a string such as \"tcp/443\"");
			return -EINVAL;
		}
		ret = ask_port(json_string_value(v), json_string_length(v), &out[i], err);
		if (ret)
			return ret;
	}
	*n = json_array_size(ports);
	return 0;
}

int egr_pol_ask(const json_t *net, struct egr_policy *p, struct egr_error *err)
{
	const json_t *mode = json_object_get(net, "unknown_names");
	const json_t *t = json_object_get(net, "ask_timeout_s");
	const json_t *ports = json_object_get(net, "ask_ports");
	const char *s = json_is_string(mode) ? json_string_value(mode) : NULL;
	char q[QUOTE_BUF];

	p->ask_unknown = 0;
	p->ask_timeout_s = EGR_POLICY_ASK_TIMEOUT_DEFAULT;
	p->nask_ports = 2;
	p->ask_ports[0] = (struct egr_port_range){ .lo = 443, .hi = 443, .protos = EGR_PROTO_TCP };
	p->ask_ports[1] = (struct egr_port_range){ .lo = 80, .hi = 80, .protos = EGR_PROTO_TCP };
	if (mode) {
		egr_pol_field(err, "network.unknown_names");
		if (s && strlen(s) != json_string_length(mode))
			s = NULL;
		if (s && !strcmp(s, "deny")) {
			p->ask_unknown = 0;
		} else if (s && !strcmp(s, "ask")) {
			p->ask_unknown = 1;
		} else {
			egr_pol_msg(err, "must be \"deny\" or \"ask\"%s%s", s ? ", not " : "",
				    s ? egr_pol_quote(q, s) : "");
			return -EINVAL;
		}
	}
	if (t) {
		egr_pol_field(err, "network.ask_timeout_s");
		if (!json_is_integer(t) || json_integer_value(t) < 1 ||
		    json_integer_value(t) > EGR_POLICY_ASK_TIMEOUT_MAX) {
			egr_pol_msg(err, "must be an integer from 1 to %d (seconds a query waits "
				    "for a decision)", EGR_POLICY_ASK_TIMEOUT_MAX);
			return -EINVAL;
		}
		p->ask_timeout_s = (uint32_t)json_integer_value(t);
	}
	if (!ports)
		return 0;
	return egr_policy_ask_ports(ports, "network.ask_ports", p->ask_ports, &p->nask_ports, err);
}
