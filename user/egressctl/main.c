// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * egressctl: the command line of egressd. Global options, command dispatch and
 * the commands that are one request each (status, attach, update, detach,
 * list). `run` lives in run.c.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "ctl.h"
#include "proto.h"

static const char top_help[] =
	"Usage: egressctl [--socket PATH] [--timeout SEC] COMMAND [ARGS...]\n"
	"Drive egressd, which confines the network egress of sandbox cgroups.\n"
	"\n"
	"Commands:\n"
	"  status                       the daemon's version, features and counters\n"
	"  attach                       make a cgroup or a network device a sandbox\n"
	"  update                       replace a sandbox's policy (atomically)\n"
	"  detach                       stop confining a sandbox\n"
	"  list                         the sandboxes\n"
	"  release                      lift a sandbox's circuit-breaker quarantine\n"
	"  approvals                    the names sandboxes wait on for approval\n"
	"  approve                      allow a name a sandbox asked for\n"
	"  deny                         refuse it\n"
	"  suggest                      a policy for what an execution did\n"
	"  run                          run a command in a transient sandbox\n"
	"  stats                        bytes, packets, connections per tenant and sandbox\n"
	"  events                       the event stream (denies, DNS, lifecycle)\n"
	"  audit verify                 verify a tamper-evident audit log\n"
	"  seccomp-profile              print run's seccomp filter as an OCI profile\n"
	"  oci-hook STAGE               OCI runtime hook (createRuntime, poststop)\n"
	"  version                      egressctl's version and egressd's\n"
	"  cleanup                      remove egressd's pins, state and hooks after an\n"
	"                               uninstall (refused while egressd runs)\n"
	"\n"
	"Options:\n"
	"  --socket PATH    egressd's control socket (default: $EGRESSD_SOCKET, else\n"
	"                   " EGR_DEFAULT_SOCKET ")\n"
	"  --timeout SEC    how long to wait for an answer (default 120, 0 = forever)\n"
	"  --help           this text; `egressctl COMMAND --help` for a command\n"
	"  --version        print the version\n"
	"\n"
	"Exit status: 0 ok; 1 egressd answered with an error; 2 usage error;\n"
	"3 egressd is not running (nothing serves the socket); 4 invalid policy;\n"
	"5 (status) egressd is unhealthy; 6 no permission on the socket (not root and\n"
	"not in egressd's group).\n"
	"`run` exits with the command's status (128+N when killed by signal N), 125\n"
	"when it could not start it.\n";

static const char status_help[] =
	"Usage: egressctl status [--json] [--live]\n"
	"Show egressd's version, pid, number of sandboxes, its health, the kernel\n"
	"features it found and its counters. Exits 5 when egressd answers but is not\n"
	"healthy (the problems are listed), 3 when it does not answer: a readiness\n"
	"probe. --live: exit 0 whenever egressd answers (a liveness probe).\n";

static const char attach_help[] =
	"Usage: egressctl attach (--cgroup PATH | --netdev IFACE) --policy FILE\n"
	"                        [--netns PATH] [--json]\n"
	"Make the cgroup v2 directory PATH a sandbox confined by the policy in FILE\n"
	"(\"-\" reads it from stdin). The policy is validated locally first.\n"
	"--netns PATH: the sandbox runs in that network namespace (e.g.\n"
	"/run/netns/NAME); egressd opens its DNS proxy listeners inside it.\n"
	"--netdev IFACE: a device sandbox (gVisor, a microVM): IFACE is the host side\n"
	"of its link (a veth peer, a tap), in the namespace --netns names (default:\n"
	"egressd's); every packet it sends is judged on that device.\n";

static const char update_help[] =
	"Usage: egressctl update (--cgroup PATH | --id N | --netdev IFACE [--netns PATH])\n"
	"                        --policy FILE [--json]\n"
	"Replace a sandbox's policy with the one in FILE (\"-\" is stdin). The change\n"
	"is atomic: a rejected policy leaves the previous one in force.\n";

static const char detach_help[] =
	"Usage: egressctl detach (--cgroup PATH | --id N | --netdev IFACE [--netns PATH])\n"
	"                        [--json]\n"
	"Stop confining a sandbox. Its processes (a device sandbox: its device) are no\n"
	"longer restricted.\n";

static const char release_help[] =
	"Usage: egressctl release (--cgroup PATH | --id N) [--json]\n"
	"Lift the quarantine the circuit breaker (network.breaker) put on a sandbox:\n"
	"its policy is enforced again. Audited (a \"release\" record).\n";

static const char list_help[] =
	"Usage: egressctl list [--json] [--held] [--page N]\n"
	"List the sandboxes. POLICY is the start of the policy's SHA-256, RULES are\n"
	"the IPv4, IPv6 and DNS-name rules it compiled to. --held lists instead the\n"
	"cgroups held under deny-all until the kernel releases them: detached\n"
	"sandboxes, and sandboxes whose state egressd could not trust at start.\n"
	"The list is asked for N sandboxes at a time (default 500): each request\n"
	"holds egressd's control loop, and the DNS proxy on it, while it is built.\n";

/* --- the one-request commands ----------------------------------------------- */

struct cmd_args {
	const char *cgroup;
	const char *policy;
	const char *netns;
	const char *netdev;
	unsigned long id;
	bool json;
	bool held;
	bool live; /* status --live */
	unsigned long page; /* list --page */
};

enum { OPT_SOCKET = 256, OPT_TIMEOUT, OPT_JSON, OPT_CGROUP, OPT_POLICY, OPT_ID, OPT_HELP,
       OPT_NETNS, OPT_HELD, OPT_LIVE, OPT_PAGE, OPT_NETDEV };

/* Options every command takes: --socket, --timeout, --help. */
#define COMMON_OPTS                                                   \
	{ "socket", required_argument, NULL, OPT_SOCKET },            \
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },          \
	{ "help", no_argument, NULL, OPT_HELP }

static int parse_timeout(const char *cmd, const char *s, unsigned int *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v > 86400)
		return ctl_usage_error(cmd, "--timeout: expected seconds (0-86400), got '%s'", s);
	*out = (unsigned int)v;
	return 0;
}

/* Handles the common options: 0 when opt was one of them, -1 when it is not,
 * or an exit status to end with (INT_MAX: exit 0 after --help). */
static int common_opt(struct ctl *c, const char *cmd, const char *help, int opt)
{
	switch (opt) {
	case OPT_SOCKET:
		c->socket = optarg;
		return 0;
	case OPT_TIMEOUT:
		return parse_timeout(cmd, optarg, &c->timeout);
	case OPT_HELP:
		fputs(help, stdout);
		return INT_MAX; /* "exit 0" */
	case '?':
		fprintf(stderr, "Try 'egressctl %s --help'.\n", cmd);
		return CTL_EXIT_USAGE;
	default:
		return -1;
	}
}

/*
 * Parse a command's options: want is a string of the options it takes
 * ('c' cgroup, 'i' id, 'p' policy, 'j' json, 'n' netns, 'd' netdev, 'N' netns
 * only with netdev). Returns -1 to go on, else the
 * exit status to end with (INT_MAX for 0 after --help).
 */
/* arg as an integer from 1 to max; 0 when it is not one. */
static unsigned long positive(const char *arg, unsigned long max)
{
	unsigned long v;
	char *end;

	errno = 0;
	v = strtoul(arg, &end, 10);
	return errno || end == arg || *end || arg[0] == '-' || v > max ? 0 : v;
}

static int parse_cmd(struct ctl *c, const char *cmd, const char *help, const char *want,
		     int argc, char **argv, struct cmd_args *a)
{
	static const struct option opts[] = {
		COMMON_OPTS,
		{ "json", no_argument, NULL, OPT_JSON },
		{ "cgroup", required_argument, NULL, OPT_CGROUP },
		{ "policy", required_argument, NULL, OPT_POLICY },
		{ "id", required_argument, NULL, OPT_ID },
		{ "netns", required_argument, NULL, OPT_NETNS },
		{ "held", no_argument, NULL, OPT_HELD },
		{ "live", no_argument, NULL, OPT_LIVE },
		{ "page", required_argument, NULL, OPT_PAGE },
		{ "netdev", required_argument, NULL, OPT_NETDEV },
		{ NULL, 0, NULL, 0 },
	};
	int opt, rc, li = 0;

	memset(a, 0, sizeof(*a));
	optind = 0; /* a new argv: reinitialise getopt */
	while ((opt = getopt_long(argc, argv, "", opts, &li)) != -1) {
		rc = common_opt(c, cmd, help, opt);
		if (rc > 0)
			return rc;
		if (rc == 0)
			continue;
		switch (opt) {
		case OPT_JSON:
			if (!strchr(want, 'j'))
				goto unexpected;
			a->json = true;
			break;
		case OPT_HELD:
			if (!strchr(want, 'h'))
				goto unexpected;
			a->held = true;
			break;
		case OPT_CGROUP:
			if (!strchr(want, 'c'))
				goto unexpected;
			a->cgroup = optarg;
			break;
		case OPT_POLICY:
			if (!strchr(want, 'p'))
				goto unexpected;
			a->policy = optarg;
			break;
		case OPT_NETNS:
			if (!strchr(want, 'n') && !strchr(want, 'N'))
				goto unexpected;
			a->netns = optarg;
			break;
		case OPT_NETDEV:
			if (!strchr(want, 'd'))
				goto unexpected;
			a->netdev = optarg;
			break;
		case OPT_LIVE:
			if (!strchr(want, 'l'))
				goto unexpected;
			a->live = true;
			break;
		case OPT_ID:
			if (!strchr(want, 'i'))
				goto unexpected;
			if (!(a->id = positive(optarg, UINT32_MAX)))
				return ctl_usage_error(cmd, "--id: expected a sandbox id (a positive "
						       "integer), got '%s'", optarg);
			break;
		case OPT_PAGE:
			if (!strchr(want, 'P'))
				goto unexpected;
			if (!(a->page = positive(optarg, 1000000)))
				return ctl_usage_error(cmd, "--page: expected a number of sandboxes "
						       "(1 to 1000000), got '%s'", optarg);
			break;
		default:
			goto unexpected;
		}
	}
	if (optind < argc)
		return ctl_usage_error(cmd, "%s: unexpected argument '%s'", cmd, argv[optind]);
	if (a->netdev) {
		if (a->cgroup || a->id)
			return ctl_usage_error(cmd, "%s: --netdev names the sandbox; not with "
					       "--cgroup or --id", cmd);
	} else if (a->netns && strchr(want, 'N')) {
		return ctl_usage_error(cmd, "%s: --netns goes with --netdev", cmd);
	} else if (strchr(want, 'i')) {
		if (!a->cgroup == !a->id)
			return ctl_usage_error(cmd, "%s: give exactly one of --cgroup PATH or --id N",
					       cmd);
	} else if (strchr(want, 'c') && !a->cgroup) {
		return ctl_usage_error(cmd, strchr(want, 'd') ? "%s: --cgroup PATH or --netdev IFACE "
				       "is required" : "%s: --cgroup PATH is required", cmd);
	}
	if (strchr(want, 'p') && !a->policy)
		return ctl_usage_error(cmd, "%s: --policy FILE is required", cmd);
	return -1;
unexpected:
	return ctl_usage_error(cmd, "%s does not take --%s", cmd, opts[li].name);
}

/* Add "cgroup" (absolute) or "id" to req. An exit status. */
static int add_target(json_t *req, const struct cmd_args *a)
{
	char path[PATH_MAX];
	int err;

	if (a->netdev) {
		err = json_object_set_new(req, "netdev", json_string(a->netdev));
	} else if (a->cgroup) {
		err = ctl_abs_path(a->cgroup, path, sizeof(path));
		if (err) {
			fprintf(stderr, "egressctl: --cgroup %s: %s\n", a->cgroup, strerror(-err));
			return CTL_EXIT_USAGE;
		}
		err = json_object_set_new(req, "cgroup", json_string(path));
	} else {
		err = json_object_set_new(req, "id", json_integer((json_int_t)a->id));
	}
	if (err) {
		fprintf(stderr, "egressctl: out of memory\n");
		return CTL_EXIT_ERROR;
	}
	return CTL_EXIT_OK;
}

static json_t *new_request(enum egr_op op)
{
	json_t *req = egr_proto_request(op);

	if (!req)
		fprintf(stderr, "egressctl: out of memory\n");
	return req;
}

static int cmd_status(struct ctl *c, int argc, char **argv)
{
	struct cmd_args a;
	json_t *req, *resp;
	int rc;

	rc = parse_cmd(c, "status", status_help, "jl", argc, argv, &a);
	if (rc >= 0)
		return rc;
	req = new_request(EGR_OP_STATUS);
	if (!req)
		return CTL_EXIT_ERROR;
	rc = ctl_request(c, req, &resp, NULL, 0);
	json_decref(req);
	if (rc)
		return rc;
	if (a.json) {
		json_object_del(resp, "ok");
		ctl_print_json(resp);
	} else {
		ctl_print_status(resp);
	}
	/* A readiness probe: an egressd that cannot say it is healthy is not.
	 * --live: answering is enough (a liveness probe must not restart
	 * egressd over a problem a sandbox can cause, such as lost events). */
	rc = a.live || json_is_true(json_object_get(resp, "healthy")) ? CTL_EXIT_OK
								       : CTL_EXIT_UNHEALTHY;
	json_decref(resp);
	return rc;
}

/* attach, update and detach: one sandbox in the answer. */
static int cmd_sandbox(struct ctl *c, enum egr_op op, const char *help, const char *want,
		       const char *verb, int argc, char **argv)
{
	struct cmd_args a;
	json_t *req, *resp, *policy = NULL;
	int rc;

	rc = parse_cmd(c, egr_op_desc(op)->name, help, want, argc, argv, &a);
	if (rc >= 0)
		return rc;
	if (a.policy) {
		rc = ctl_policy_load(a.policy, &policy);
		if (rc)
			return rc;
	}
	req = new_request(op);
	if (!req) {
		json_decref(policy);
		return CTL_EXIT_ERROR;
	}
	rc = add_target(req, &a);
	if (!rc && policy && json_object_set_new(req, "policy", policy)) {
		fprintf(stderr, "egressctl: out of memory\n");
		rc = CTL_EXIT_ERROR;
	}
	if (!rc && a.netns) {
		char ns[PATH_MAX];

		if (ctl_abs_path(a.netns, ns, sizeof(ns)) ||
		    json_object_set_new(req, "netns", json_string(ns))) {
			fprintf(stderr, "egressctl: --netns %s: bad path\n", a.netns);
			rc = CTL_EXIT_USAGE;
		}
	}
	if (!rc)
		rc = ctl_request(c, req, &resp, NULL, 0);
	json_decref(req);
	if (rc)
		return rc;
	if (a.json)
		ctl_print_json(json_object_get(resp, "sandbox"));
	else
		ctl_print_sandbox(verb, json_object_get(resp, "sandbox"));
	json_decref(resp);
	return CTL_EXIT_OK;
}

static int cmd_attach(struct ctl *c, int argc, char **argv)
{
	return cmd_sandbox(c, EGR_OP_ATTACH, attach_help, "cpjnd", "attached", argc, argv);
}

static int cmd_update(struct ctl *c, int argc, char **argv)
{
	return cmd_sandbox(c, EGR_OP_UPDATE, update_help, "cipjdN", "updated", argc, argv);
}

static int cmd_detach(struct ctl *c, int argc, char **argv)
{
	return cmd_sandbox(c, EGR_OP_DETACH, detach_help, "cijdN", "detached", argc, argv);
}

static int cmd_release(struct ctl *c, int argc, char **argv)
{
	return cmd_sandbox(c, EGR_OP_RELEASE, release_help, "cij", "released", argc, argv);
}

/* Sandboxes per list request by default: each page holds egressd's loop
 * (and the DNS proxy on it) ~30 ms, where one list of 10,000 holds it
 * ~0.5-1 s. */
#define LIST_PAGE 500

/* One list request: a page of up to limit sandboxes after after (-1: the
 * first page; limit 0: the whole list, unpaged). An exit status. */
static int list_request(struct ctl *c, size_t limit, json_int_t after, json_t **resp,
			char *code, size_t codelen)
{
	json_t *req = new_request(EGR_OP_LIST);
	int rc;

	if (!req || (limit && json_object_set_new(req, "limit", json_integer((json_int_t)limit))) ||
	    (after >= 0 && json_object_set_new(req, "after", json_integer(after)))) {
		json_decref(req);
		fprintf(stderr, "egressctl: out of memory\n");
		return CTL_EXIT_ERROR;
	}
	rc = ctl_request(c, req, resp, code, codelen);
	json_decref(req);
	return rc;
}

/* Does a page follow from after? Ids rising above after, next (when
 * given) its last one: a reply that did not advance would loop forever. */
static bool page_advances(const json_t *page, const json_t *next, json_int_t after)
{
	json_int_t last = after;
	size_t i;
	json_t *sb;

	if (!json_is_array(page))
		return false;
	json_array_foreach(page, i, sb) {
		json_int_t id = json_integer_value(json_object_get(sb, "id"));

		if (id <= last || id > UINT32_MAX)
			return false;
		last = id;
	}
	return !next || (json_is_integer(next) && json_array_size(page) &&
			 json_integer_value(next) == last);
}

/* The whole list, a page at a time, as one reply: the first page's, with
 * every later page's sandboxes appended. */
static int list_pages(struct ctl *c, unsigned long page_size, bool first_only, json_t **out)
{
	json_t *first = NULL, *all = NULL;
	json_int_t after = -1;
	bool whole = false;
	char code[64];
	int rc;

	*out = NULL;
	/* Quietly first: an egressd from before pages refuses "limit"
	 * (bad_request), and then answers the whole list. */
	c->quiet = true;
	rc = list_request(c, page_size, -1, &first, code, sizeof(code));
	c->quiet = false;
	if (rc) {
		whole = strcmp(code, "bad_request") == 0;
		rc = list_request(c, whole ? 0 : page_size, -1, &first, NULL, 0);
	}
	if (rc)
		return rc;
	all = json_object_get(first, "sandboxes");
	for (json_t *resp = first;;) {
		json_t *page = json_object_get(resp, "sandboxes"), *next = json_object_get(resp, "next");

		/* A whole list (unpaged) is in no particular order. */
		if (whole ? !json_is_array(page) || next : !page_advances(page, next, after)) {
			fprintf(stderr, "egressctl: bad answer from egressd: %s\n",
				json_is_array(page) ? "a list page that does not follow the last"
						    : "no sandboxes array");
			if (resp != first)
				json_decref(resp);
			json_decref(first);
			return CTL_EXIT_ERROR;
		}
		bool more = next && !first_only;

		after = json_integer_value(next); /* read before resp goes */
		if (resp != first) {
			rc = json_array_extend(all, page) ? CTL_EXIT_ERROR : CTL_EXIT_OK;
			json_decref(resp);
			if (rc) {
				fprintf(stderr, "egressctl: out of memory\n");
				json_decref(first);
				return rc;
			}
		}
		if (!more)
			break;
		rc = list_request(c, page_size, after, &resp, NULL, 0);
		if (rc) {
			json_decref(first);
			return rc;
		}
	}
	json_object_del(first, "next");
	*out = first;
	return CTL_EXIT_OK;
}

static int cmd_list(struct ctl *c, int argc, char **argv)
{
	struct cmd_args a;
	json_t *resp, *sbs;
	int rc;

	rc = parse_cmd(c, "list", list_help, "jhP", argc, argv, &a);
	if (rc >= 0)
		return rc;
	/* Held cgroups come with the first page. */
	rc = list_pages(c, a.held ? 1 : a.page ? a.page : LIST_PAGE, a.held, &resp);
	if (rc)
		return rc;
	sbs = json_object_get(resp, a.held ? "held" : "sandboxes");
	if (!json_is_array(sbs)) {
		fprintf(stderr, "egressctl: bad answer from egressd: no %s array\n",
			a.held ? "held" : "sandboxes");
		json_decref(resp);
		return CTL_EXIT_ERROR;
	}
	if (a.json) {
		ctl_print_json(sbs);
	} else if (a.held) {
		size_t i;
		json_t *h;

		printf("%-6s %-9s %s\n", "ID", "STATE", "CGROUP (deny-all until released)");
		json_array_foreach(sbs, i, h)
			printf("%-6lld %-9s %s  %s\n",
			       (long long)json_integer_value(json_object_get(h, "id")),
			       json_string_value(json_object_get(h, "state")) ?: "?",
			       json_string_value(json_object_get(h, "cgroup")) ?: "(unknown)",
			       json_string_value(json_object_get(h, "reason")) ?: "");
	} else {
		ctl_print_list(sbs);
	}
	json_decref(resp);
	return CTL_EXIT_OK;
}

/* --- dispatch ---------------------------------------------------------------- */

static const struct {
	const char *name;
	int (*fn)(struct ctl *c, int argc, char **argv);
} commands[] = {
	{ "status", cmd_status }, { "attach", cmd_attach }, { "update", cmd_update },
	{ "detach", cmd_detach }, { "list", cmd_list },     { "run", ctl_cmd_run },
	{ "stats", ctl_cmd_stats },       { "release", cmd_release },
	{ "suggest", ctl_cmd_suggest },
	{ "events", ctl_cmd_events }, { "audit", ctl_cmd_audit },
	{ "seccomp-profile", ctl_cmd_seccomp_profile },
	{ "oci-hook", ctl_cmd_oci_hook },
	{ "version", ctl_cmd_version },   { "cleanup", ctl_cmd_cleanup },
	{ "approvals", ctl_cmd_approvals }, { "approve", ctl_cmd_approve },
	{ "deny", ctl_cmd_deny },
};

/* LeakSanitizer stops the world with ptrace, which the seccomp filter of
 * `egressctl run` refuses: under a filter (this program run inside a
 * sandbox) the leak check would fail the exit, so it is off there. Only an
 * ASan build calls this. */
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void)
{
	return prctl(PR_GET_SECCOMP, 0, 0, 0, 0) == 2;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		COMMON_OPTS,
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct ctl c = { .timeout = CTL_DEFAULT_TIMEOUT_S };
	const char *env = getenv("EGRESSD_SOCKET");
	int opt, rc;

	c.socket = env && *env ? env : EGR_DEFAULT_SOCKET;
	signal(SIGPIPE, SIG_IGN);
	argv[0] = "egressctl"; /* for getopt's messages */
	/* "+": stop at the command name; its options are its own. */
	while ((opt = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		if (opt == 'V') {
			printf("egressctl %s\n", EGRESSD_VERSION);
			return 0;
		}
		if (opt == OPT_HELP) {
			fputs(top_help, stdout);
			return 0;
		}
		if (opt == '?') {
			fputs("Try 'egressctl --help'.\n", stderr);
			return CTL_EXIT_USAGE;
		}
		rc = common_opt(&c, NULL, top_help, opt);
		if (rc > 0)
			return rc == INT_MAX ? 0 : rc;
	}
	if (optind >= argc)
		return ctl_usage_error(NULL, "no command given");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (strcmp(argv[optind], commands[i].name) == 0) {
			char name[32];

			/* getopt's messages then read "egressctl CMD: ..." */
			snprintf(name, sizeof(name), "egressctl %s", commands[i].name);
			argv[optind] = name;
			/* --json anywhere in the command's options (not after "--"):
			 * its errors are JSON on stdout too. */
			for (int k = optind + 1; k < argc && strcmp(argv[k], "--"); k++)
				if (strcmp(argv[k], "--json") == 0)
					ctl_json_errors(true);
			rc = commands[i].fn(&c, argc - optind, argv + optind);
			if (fflush(stdout) != 0 && rc == 0) {
				fprintf(stderr, "egressctl: writing output: %s\n", strerror(errno));
				rc = CTL_EXIT_ERROR;
			}
			return rc == INT_MAX ? 0 : ctl_finish(rc);
		}
	}
	if (strcmp(argv[optind], "help") == 0) {
		fputs(top_help, stdout);
		return 0;
	}
	return ctl_usage_error(NULL, "unknown command '%s'", argv[optind]);
}
