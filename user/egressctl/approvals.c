// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * egressctl approvals / approve / deny (docs/dns.md "Approvals",
 * docs/control-protocol.md): the names sandboxes asked for and are
 * waiting on, and the decisions on them.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

static const char approvals_help[] =
	"Usage: egressctl approvals [--follow] [--json]\n"
	"The DNS queries held for approval (policies with \"unknown_names\": \"ask\"):\n"
	"ID, sandbox, tenant, execution id, name, the ports an approval gives by\n"
	"default and how long it still waits; then the approvals in force.\n"
	"--follow streams `approval` events (held, approved, denied, timed out)\n"
	"as they happen.\n";

static const char approve_help[] =
	"Usage: egressctl approve ID [--ttl SECONDS] [--scope sandbox|execution|tenant]\n"
	"                           [--ports SPEC[,SPEC...]] [--reason TEXT] [--json]\n"
	"Approve held request ID: the name becomes allowed on the ports of --ports\n"
	"(\"tcp/443,tcp/8443\"; default: the policy's ask_ports) for the sandbox that\n"
	"asked (--scope sandbox, the default), every sandbox of its execution, or\n"
	"of its tenant, for --ttl seconds (default: as long as that sandbox lives).\n"
	"The held query is then answered as for any allowed name. Audited.\n";

static const char deny_help[] =
	"Usage: egressctl deny ID [--reason TEXT] [--json]\n"
	"Deny held request ID: the tool gets the policy's refusal at once. Audited.\n";

enum { O_FOLLOW = 400, O_JSON, O_TTL, O_SCOPE, O_PORTS, O_REASON, O_SOCK, O_HELP };

static bool parse_u64(const char *s, unsigned long long max, unsigned long long *out)
{
	char *end;

	errno = 0;
	*out = strtoull(s, &end, 10);
	return !errno && end != s && !*end && s[0] != '-' && *out >= 1 && *out <= max;
}

static void print_json(const json_t *o)
{
	char *s = json_dumps(o, JSON_COMPACT);

	if (s)
		puts(s);
	free(s);
}

int ctl_cmd_approvals(struct ctl *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "follow", no_argument, NULL, O_FOLLOW }, { "json", no_argument, NULL, O_JSON },
		{ "socket", required_argument, NULL, O_SOCK }, { "help", no_argument, NULL, O_HELP },
		{ NULL, 0, NULL, 0 },
	};
	bool fol = false, json = false;
	json_t *req, *resp, *x;
	size_t i;
	int opt, rc;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case O_FOLLOW:
			fol = true;
			break;
		case O_JSON:
			json = true;
			break;
		case O_SOCK:
			c->socket = optarg;
			break;
		case O_HELP:
			fputs(approvals_help, stdout);
			return INT_MAX;
		default:
			fputs("Try 'egressctl approvals --help'.\n", stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (optind < argc)
		return ctl_usage_error("approvals", "approvals: unexpected argument '%s'",
				       argv[optind]);
	if (fol) {
		req = json_pack("{s:s, s:b}", "op", egr_op_desc(EGR_OP_EVENTS)->name, "follow", 1);
		if (!req)
			return CTL_EXIT_ERROR;
		rc = ctl_follow(c, req, json, "approval");
		json_decref(req);
		return rc;
	}
	req = json_pack("{s:s}", "op", egr_op_desc(EGR_OP_APPROVALS)->name);
	if (!req)
		return CTL_EXIT_ERROR;
	rc = ctl_request(c, req, &resp, NULL, 0);
	json_decref(req);
	if (rc)
		return rc;
	if (json) {
		print_json(resp);
		json_decref(resp);
		return CTL_EXIT_OK;
	}
	printf("%-6s %-7s %-12s %-28s %-5s %-7s %s\n", "ID", "SANDBOX", "TENANT", "NAME", "QTYPE",
	       "WAITS", "PORTS");
	json_array_foreach(json_object_get(resp, "pending"), i, x)
		printf("%-6lld %-7lld %-12s %-28s %-5lld %5llds  %s\n",
		       (long long)json_integer_value(json_object_get(x, "id")),
		       (long long)json_integer_value(json_object_get(x, "sandbox")),
		       json_string_value(json_object_get(x, "tenant")) ?: "-",
		       json_string_value(json_object_get(x, "name")) ?: "?",
		       (long long)json_integer_value(json_object_get(x, "qtype")),
		       (long long)json_integer_value(json_object_get(x, "timeout_in_s")),
		       json_string_value(json_object_get(x, "ports")) ?: "");
	if (json_array_size(json_object_get(resp, "grants")))
		printf("\n%-28s %-9s %-7s %-10s %s\n", "APPROVED NAME", "SCOPE", "SANDBOX",
		       "EXPIRES IN", "PORTS");
	json_array_foreach(json_object_get(resp, "grants"), i, x) {
		json_t *e = json_object_get(x, "expires_in_s");
		char exp[32];

		if (json_is_integer(e))
			snprintf(exp, sizeof(exp), "%llds", (long long)json_integer_value(e));
		else
			snprintf(exp, sizeof(exp), "its life");
		printf("%-28s %-9s %-7lld %-10s %s\n",
		       json_string_value(json_object_get(x, "name")) ?: "?",
		       json_string_value(json_object_get(x, "scope")) ?: "?",
		       (long long)json_integer_value(json_object_get(x, "sandbox")), exp,
		       json_string_value(json_object_get(x, "ports")) ?: "");
	}
	json_decref(resp);
	return CTL_EXIT_OK;
}

/* "tcp/443,tcp/8443" as the protocol's array. */
static json_t *ports_array(const char *spec)
{
	json_t *arr = json_array();
	char *copy = strdup(spec), *save = NULL, *tok;

	if (!arr || !copy) {
		json_decref(arr);
		free(copy);
		return NULL;
	}
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		json_array_append_new(arr, json_string(tok));
	free(copy);
	return arr;
}

static int decide(struct ctl *c, const char *cmd, int argc, char **argv, bool approve)
{
	static const struct option opts[] = {
		{ "ttl", required_argument, NULL, O_TTL },
		{ "scope", required_argument, NULL, O_SCOPE },
		{ "ports", required_argument, NULL, O_PORTS },
		{ "reason", required_argument, NULL, O_REASON },
		{ "json", no_argument, NULL, O_JSON },
		{ "socket", required_argument, NULL, O_SOCK },
		{ "help", no_argument, NULL, O_HELP },
		{ NULL, 0, NULL, 0 },
	};
	unsigned long long id, ttl = 0;
	const char *scope = NULL, *ports = NULL, *reason = NULL;
	json_t *req, *resp;
	bool json = false;
	int opt, rc;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (!approve && (opt == O_TTL || opt == O_SCOPE || opt == O_PORTS))
			opt = '?';
		switch (opt) {
		case O_TTL:
			if (!parse_u64(optarg, 2592000ULL, &ttl))
				return ctl_usage_error(cmd, "--ttl: expected 1 to 2592000 seconds, "
						       "got '%s'", optarg);
			break;
		case O_SCOPE:
			scope = optarg;
			break;
		case O_PORTS:
			ports = optarg;
			break;
		case O_REASON:
			reason = optarg;
			break;
		case O_JSON:
			json = true;
			ctl_json_errors(true);
			break;
		case O_SOCK:
			c->socket = optarg;
			break;
		case O_HELP:
			fputs(approve ? approve_help : deny_help, stdout);
			return INT_MAX;
		default:
			fprintf(stderr, "Try 'egressctl %s --help'.\n", cmd);
			return CTL_EXIT_USAGE;
		}
	}
	if (optind != argc - 1)
		return ctl_usage_error(cmd, "%s: expected one request ID (egressctl approvals)", cmd);
	if (!parse_u64(argv[optind], (1ULL << 53), &id))
		return ctl_usage_error(cmd, "%s: expected a request ID, got '%s'", cmd,
				       argv[optind]);
	req = json_pack("{s:s, s:I}", "op",
			egr_op_desc(approve ? EGR_OP_APPROVE : EGR_OP_DENY)->name, "id",
			(json_int_t)id);
	if (!req)
		return CTL_EXIT_ERROR;
	if (ttl)
		json_object_set_new(req, "ttl_s", json_integer((json_int_t)ttl));
	if (scope)
		json_object_set_new(req, "scope", json_string(scope));
	if (ports)
		json_object_set_new(req, "ports", ports_array(ports));
	if (reason)
		json_object_set_new(req, "reason", json_string(reason));
	rc = ctl_request(c, req, &resp, NULL, 0);
	json_decref(req);
	if (rc)
		return rc;
	if (json)
		print_json(resp);
	else
		printf("request %llu %s\n", id, approve ? "approved" : "denied");
	json_decref(resp);
	return CTL_EXIT_OK;
}

int ctl_cmd_approve(struct ctl *c, int argc, char **argv)
{
	return decide(c, "approve", argc, argv, true);
}

int ctl_cmd_deny(struct ctl *c, int argc, char **argv)
{
	return decide(c, "deny", argc, argv, false);
}
