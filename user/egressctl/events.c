// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * egressctl events [--follow] [--sandbox ID] [--limit N] [--json]
 * egressctl audit verify [--key FILE] [--state FILE | --no-state] FILE...
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "audit.h"
#include "audit_anchor.h"
#include "ctl.h"
#include "dnswire.h"
#include "proto.h"

static const char events_help[] =
	"Usage: egressctl events [--follow] [--sandbox ID] [--limit N] [--json]\n"
	"Show egressd's event stream (docs/events.md): denies, sampled allows, DNS\n"
	"verdicts, sandbox lifecycle and lost-event reports. Without --follow, the\n"
	"events egressd keeps in memory (the newest N with --limit); with --follow,\n"
	"the new ones as they happen, until interrupted.\n"
	"  --json   one JSON object per line\n";

static const char audit_help[] =
	"Usage: egressctl audit verify [--key FILE] [--state FILE | --no-state]\n"
	"                              [--anchors FILE] FILE...\n"
	"Verify a hash-chained audit log (docs/audit.md). One FILE that is a log's\n"
	"current file also takes its rotated FILE.N.gz files, oldest first; several\n"
	"FILEs are one chain in the order given. --state (default: audit.state\n"
	"beside the log, when there is one) also catches a truncated tail; --anchors\n"
	"(the file egressd's audit-anchor option names, a syslog file or the output\n"
	"of `journalctl -t egressd -o cat`) catches one even when the state was\n"
	"rewritten to match. Prints\n"
	"`file:line: message` for the first bad record and exits 1; a log that\n"
	"verifies prints its record count and exits 0.\n";

enum { O_FOLLOW = 300, O_SANDBOX, O_LIMIT, O_JSON, O_KEY, O_STATE, O_NOSTATE, O_HELP, O_SOCK,
       O_ANCHORS };

static const char *str(const json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

/* What an operator reads a DNS verdict by: the rcode the client got and,
 * for a rebinding rewrite, the addresses taken out of the answer. */
static void print_dns_fields(const json_t *e)
{
	const json_t *st = json_object_get(e, "stripped"), *x;
	const char *rc, *key = "stripped";
	size_t i;

	/* Audit mode keeps them: what enforce mode would strip. */
	if (!st && (st = json_object_get(e, "would_strip")))
		key = "would_strip";

	if ((x = json_object_get(e, "rcode")) && json_is_integer(x)) {
		rc = egr_dns_rcode_name((uint16_t)json_integer_value(x));
		rc ? printf(" rcode=%s", rc) : printf(" rcode=%" JSON_INTEGER_FORMAT,
						     json_integer_value(x));
	}
	if (!json_is_array(st))
		return;
	printf(" %s=", key);
	json_array_foreach(st, i, x)
		printf("%s%s(%s)", i ? "," : "", str(x, "addr") ?: "?", str(x, "class") ?: "?");
	if ((x = json_object_get(e, strcmp(key, "stripped") ? "would_strip_total"
							      : "stripped_total")) &&
	    (size_t)json_integer_value(x) > json_array_size(st))
		printf(",+%" JSON_INTEGER_FORMAT " more",
		       json_integer_value(x) - (json_int_t)json_array_size(st));
}

/* An inspected connection: the host it named, where it went, its ALPN. */
static void print_inspect_fields(const json_t *e)
{
	const char *addr = str(e, "addr");

	if (str(e, "name") && *str(e, "name"))
		printf(" host=%s", str(e, "name"));
	if (addr && *addr)
		printf(" dst=%s%s%s:%" JSON_INTEGER_FORMAT, strchr(addr, ':') ? "[" : "", addr,
		       strchr(addr, ':') ? "]" : "", json_integer_value(json_object_get(e, "port")));
	if (str(e, "alpn") && *str(e, "alpn"))
		printf(" alpn=%s", str(e, "alpn"));
}

/* One event as one human line. */
static void print_event(const json_t *e)
{
	const char *t = str(e, "type") ?: "?", *v = str(e, "verdict");
	json_t *x;

	printf("%s %-11s", str(e, "time") ?: "-", t);
	if (v)
		printf(" %-5s", v);
	if ((x = json_object_get(e, "sandbox")) && json_is_integer(x))
		printf(" sandbox=%" JSON_INTEGER_FORMAT, json_integer_value(x));
	if (str(e, "tenant"))
		printf(" tenant=%s", str(e, "tenant"));
	if ((x = json_object_get(e, "pid")))
		printf(" pid=%" JSON_INTEGER_FORMAT, json_integer_value(x));
	if (str(e, "comm"))
		printf(" comm=%s", str(e, "comm"));
	if (str(e, "dst"))
		printf(" dst=%s%s%s:%" JSON_INTEGER_FORMAT, strchr(str(e, "dst"), ':') ? "[" : "",
		       str(e, "dst"), strchr(str(e, "dst"), ':') ? "]" : "",
		       json_integer_value(json_object_get(e, "port")));
	if (str(e, "src"))
		printf(" src=%s:%" JSON_INTEGER_FORMAT, str(e, "src"),
		       json_integer_value(json_object_get(e, "src_port")));
	if ((x = json_object_get(e, "protocol")))
		json_is_string(x) ? printf(" proto=%s", json_string_value(x))
				  : printf(" proto=%" JSON_INTEGER_FORMAT, json_integer_value(x));
	if (strcmp(t, "setsockopt") == 0)
		printf(" level=%" JSON_INTEGER_FORMAT " optname=%" JSON_INTEGER_FORMAT,
		       json_integer_value(json_object_get(e, "level")),
		       json_integer_value(json_object_get(e, "optname")));
	if (str(e, "qname"))
		printf(" qname=%s", str(e, "qname"));
	if (strcmp(t, "dns") == 0)
		print_dns_fields(e);
	if (strcmp(t, "inspect") == 0)
		print_inspect_fields(e);
	if (strcmp(t, "approval") == 0) {
		printf(" id=%" JSON_INTEGER_FORMAT " state=%s name=%s ports=%s",
		       json_integer_value(json_object_get(e, "id")), str(e, "state") ?: "?",
		       str(e, "name") ?: "?", str(e, "ports") ?: "");
		if (str(e, "scope"))
			printf(" scope=%s", str(e, "scope"));
		if ((x = json_object_get(e, "approver")))
			printf(" approver_uid=%" JSON_INTEGER_FORMAT,
			       json_integer_value(json_object_get(x, "uid")));
	}
	if (strcmp(t, "escape") == 0)
		printf(" action=%s target_pid=%" JSON_INTEGER_FORMAT " from_cgroup=%"
		       JSON_INTEGER_FORMAT " to_cgroup=%" JSON_INTEGER_FORMAT,
		       str(e, "action") ?: "?",
		       json_integer_value(json_object_get(e, "target_pid")),
		       json_integer_value(json_object_get(e, "from_cgroup_id")),
		       json_integer_value(json_object_get(e, "to_cgroup_id")));
	if ((x = json_object_get(e, "suppressed")) && json_is_integer(x))
		printf(" suppressed=%" JSON_INTEGER_FORMAT, json_integer_value(x));
	if ((x = json_object_get(e, "lost")))
		printf(" lost=%" JSON_INTEGER_FORMAT, json_integer_value(x));
	if (str(e, "reason"))
		printf(" reason=\"%s\"", str(e, "reason"));
	if (str(e, "execution_id") && (!strcmp(t, "attach") || !strcmp(t, "detach") ||
				       !strcmp(t, "update") || !strcmp(t, "adopt")))
		printf(" execution_id=%s", str(e, "execution_id"));
	putchar('\n');
}

/* A stream record of egressctl's own (stream_gap, stream_resumed), printed
 * the way egressd's events are. */
static void print_stream_record(const char *type, const char *reason, double gap_s, bool json)
{
	char now[32];
	struct timespec ts;
	struct tm tm;
	json_t *o;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	snprintf(now, sizeof(now), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
	o = json_pack("{s:s, s:s, s:s}", "type", type, "time", now, "reason", reason);
	if (o && gap_s >= 0)
		json_object_set_new(o, "gap_seconds", json_real(gap_s));
	if (!o)
		return;
	if (json) {
		char *t = json_dumps(o, JSON_COMPACT);

		if (t)
			puts(t);
		free(t);
	} else {
		print_event(o);
	}
	json_decref(o);
}

/* Connect and send the follow request: the fd, or -errno. */
static int follow_connect(const struct ctl *c, const json_t *req)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd, err;

	strcpy(sun.sun_path, c->socket);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0)
		goto fail;
	/* A refused peer is answered and closed unread: its answer may still be
	 * there to read when the write fails. */
	if (egr_proto_write(fd, req) && errno != EPIPE && errno != ECONNRESET)
		goto fail;
	return fd;
fail:
	err = -errno;
	close(fd);
	return err ? err : -EIO;
}

enum follow_end { FOLLOW_LOST, FOLLOW_REFUSED, FOLLOW_DROPPED };

/* Read one connection's stream to its end. *in_gap: a stream_gap is open;
 * egressd's answer closes it with a stream_resumed record. */
static enum follow_end follow_stream(int fd, bool json, bool *in_gap, double gap_start,
				     const char *only)
{
	bool answered = false;
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	FILE *f = fdopen(fd, "r");
	enum follow_end end = FOLLOW_LOST;

	if (!f) {
		close(fd);
		return FOLLOW_LOST;
	}
	while ((n = getline(&line, &cap, f)) > 0) {
		json_t *o = json_loads(line, 0, NULL);

		if (!answered) {
			if (!json_is_true(json_object_get(o, "ok"))) {
				fprintf(stderr, "egressctl: %s: %s\n", str(o, "code") ?: "error",
					str(o, "error") ?: "(no message)");
				ctl_note_error(str(o, "code") ?: "error", NULL, "%s",
					       str(o, "error") ?: "(no message)");
				json_decref(o);
				end = FOLLOW_REFUSED;
				break;
			}
			answered = true;
			json_decref(o);
			if (*in_gap) {
				print_stream_record("stream_resumed", "reconnected to egressd",
						    egr_mono_s() - gap_start, json);
				*in_gap = false;
			}
			continue;
		}
		/* only: events of that type, and what says the stream is not
		 * whole (losses, a dropped subscriber). */
		if (only && o && strcmp(str(o, "type") ?: "", only) &&
		    strcmp(str(o, "type") ?: "", "lost_events") &&
		    strcmp(str(o, "type") ?: "", "subscriber_dropped")) {
			json_decref(o);
			continue;
		}
		if (json)
			fputs(line, stdout);
		else if (o)
			print_event(o);
		if (o && strcmp(str(o, "type") ?: "", "subscriber_dropped") == 0) {
			fprintf(stderr, "egressctl: egressd dropped this stream: %s\n",
				str(o, "reason") ?: "?");
			json_decref(o);
			end = FOLLOW_DROPPED;
			break;
		}
		json_decref(o);
	}
	fclose(f);
	free(line);
	return end;
}

/*
 * --follow: a connection of our own that stays open. When egressd goes away
 * (a restart, a crash) the stream goes on: a {"type":"stream_gap"} record
 * says events may be missing from then on, egressctl reconnects every
 * FOLLOW_RETRY_MS, and a {"type":"stream_resumed","gap_seconds":S} record
 * marks where the stream is whole again. Events egressd produced in between
 * are not replayed (docs/events.md).
 */
#define FOLLOW_RETRY_MS 250
int ctl_follow(const struct ctl *c, const json_t *req, bool json, const char *only)
{
	struct sockaddr_un sun;
	bool in_gap = false;
	double gap_start = 0;
	int fd;

	if (strlen(c->socket) >= sizeof(sun.sun_path))
		return CTL_EXIT_USAGE;
	setvbuf(stdout, NULL, _IOLBF, 0);
	fd = follow_connect(c, req);
	if (fd < 0)
		return ctl_connect_failed(c, fd);
	for (;;) {
		enum follow_end end = follow_stream(fd, json, &in_gap, gap_start, only);

		if (end != FOLLOW_LOST)
			return CTL_EXIT_ERROR;
		if (!in_gap) {
			print_stream_record("stream_gap",
					    "connection to egressd lost; reconnecting", -1, json);
			fprintf(stderr,
				"egressctl: egressd closed the event stream; reconnecting\n");
			gap_start = egr_mono_s();
			in_gap = true;
		}
		do
			usleep(FOLLOW_RETRY_MS * 1000);
		while ((fd = follow_connect(c, req)) < 0);
	}
}

static unsigned long parse_num(const char *s, bool *ok)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	*ok = !errno && end != s && !*end && s[0] != '-' && v <= UINT32_MAX;
	return v;
}

int ctl_cmd_events(struct ctl *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "follow", no_argument, NULL, O_FOLLOW },
		{ "sandbox", required_argument, NULL, O_SANDBOX },
		{ "limit", required_argument, NULL, O_LIMIT },
		{ "json", no_argument, NULL, O_JSON },
		{ "socket", required_argument, NULL, O_SOCK },
		{ "help", no_argument, NULL, O_HELP },
		{ NULL, 0, NULL, 0 },
	};
	unsigned long sandbox = 0, limit = 0;
	bool fol = false, json = false, ok;
	json_t *req, *resp, *evs, *e;
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
		case O_SANDBOX:
			sandbox = parse_num(optarg, &ok);
			if (!ok || !sandbox)
				return ctl_usage_error("events", "--sandbox: expected a sandbox id, "
						       "got '%s'", optarg);
			break;
		case O_LIMIT:
			limit = parse_num(optarg, &ok);
			if (!ok)
				return ctl_usage_error("events", "--limit: expected a number, got '%s'",
						       optarg);
			break;
		case O_HELP:
			fputs(events_help, stdout);
			return INT_MAX;
		default:
			fputs("Try 'egressctl events --help'.\n", stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (optind < argc)
		return ctl_usage_error("events", "events: unexpected argument '%s'", argv[optind]);
	req = json_pack("{s:s, s:b}", "op", egr_op_desc(EGR_OP_EVENTS)->name, "follow", fol);
	if (!req)
		return CTL_EXIT_ERROR;
	if (sandbox)
		json_object_set_new(req, "sandbox", json_integer((json_int_t)sandbox));
	if (limit)
		json_object_set_new(req, "limit", json_integer((json_int_t)limit));
	if (fol) {
		rc = ctl_follow(c, req, json, NULL);
		json_decref(req);
		return rc;
	}
	rc = ctl_request(c, req, &resp, NULL, 0);
	json_decref(req);
	if (rc)
		return rc;
	evs = json_object_get(resp, "events");
	json_array_foreach(evs, i, e) {
		if (json) {
			char *s = json_dumps(e, JSON_COMPACT);

			if (s)
				puts(s);
			free(s);
		} else {
			print_event(e);
		}
	}
	json_decref(resp);
	return CTL_EXIT_OK;
}

/* --- audit verify ------------------------------------------------------------------ */

static bool is_file(const char *p)
{
	return access(p, R_OK) == 0;
}

int ctl_cmd_audit(struct ctl *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "key", required_argument, NULL, O_KEY },
		{ "audit-key", required_argument, NULL, O_KEY },
		{ "state", required_argument, NULL, O_STATE },
		{ "no-state", no_argument, NULL, O_NOSTATE },
		{ "help", no_argument, NULL, O_HELP },
		{ "anchors", required_argument, NULL, O_ANCHORS },
		{ NULL, 0, NULL, 0 },
	};
	const char *keyfile = NULL, *state = NULL, *anchors_file = NULL;
	struct egr_audit_anchor_rec *anchors = NULL;
	size_t nanchors = 0;
	uint64_t newest = 0;
	bool nostate = false;
	char **files = NULL, statebuf[PATH_MAX];
	size_t nfiles = 0, keylen = 0;
	uint8_t *key = NULL;
	struct egr_audit_verify_result res;
	int opt, err, rc;

	if (argc < 2 || strcmp(argv[1], "verify") != 0) {
		if (argc >= 2 && strcmp(argv[1], "--help") == 0) {
			fputs(audit_help, stdout);
			return INT_MAX;
		}
		return ctl_usage_error("audit", "audit: expected the subcommand 'verify'");
	}
	argc--;
	argv++;
	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case O_KEY:
			keyfile = optarg;
			break;
		case O_STATE:
			state = optarg;
			break;
		case O_NOSTATE:
			nostate = true;
			break;
		case O_ANCHORS:
			anchors_file = optarg;
			break;
		case O_HELP:
			fputs(audit_help, stdout);
			return INT_MAX;
		default:
			fputs("Try 'egressctl audit --help'.\n", stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (optind >= argc)
		return ctl_usage_error("audit", "audit verify: give the log FILE(s)");
	if (state && nostate)
		return ctl_usage_error("audit", "audit verify: --state and --no-state conflict");
	if (argc - optind == 1 && !strstr(argv[optind], ".gz")) {
		err = egr_audit_list_files(argv[optind], &files, &nfiles);
		if (err) {
			fprintf(stderr, "egressctl: %s: %s\n", argv[optind], strerror(-err));
			return CTL_EXIT_ERROR;
		}
	} else {
		nfiles = (size_t)(argc - optind);
		files = calloc(nfiles, sizeof(*files));
		for (size_t i = 0; files && i < nfiles; i++)
			files[i] = strdup(argv[optind + i]);
	}
	if (!files || !nfiles) {
		fprintf(stderr, "egressctl: %s: no such log\n", argv[optind]);
		egr_audit_free_files(files, nfiles);
		return CTL_EXIT_ERROR;
	}
	if (!state && !nostate) {
		char tmp[PATH_MAX];

		snprintf(tmp, sizeof(tmp), "%s", files[nfiles - 1]);
		snprintf(statebuf, sizeof(statebuf), "%s/audit.state", dirname(tmp));
		if (is_file(statebuf))
			state = statebuf;
	}
	if (keyfile && (err = egr_audit_load_key(keyfile, &key, &keylen))) {
		fprintf(stderr, "egressctl: --key %s: %s\n", keyfile,
			err == -EPERM ? "group or other can access it (chmod 600), or not a file" :
					strerror(-err));
		egr_audit_free_files(files, nfiles);
		return CTL_EXIT_USAGE;
	}
	if (anchors_file && (err = egr_audit_anchors_read(anchors_file, &anchors, &nanchors))) {
		fprintf(stderr, "egressctl: --anchors %s: %s\n", anchors_file, strerror(-err));
		egr_audit_free_files(files, nfiles);
		if (key)
			egr_audit_free_key(key, keylen);
		return CTL_EXIT_ERROR;
	}
	if (anchors_file && !nanchors) {
		/* No anchor at all is no proof of anything: say so, fail. */
		printf("%s: no audit anchor in it\n", anchors_file);
		egr_audit_free_files(files, nfiles);
		if (key)
			egr_audit_free_key(key, keylen);
		return CTL_EXIT_ERROR;
	}
	memset(&res, 0, sizeof(res));
	err = egr_audit_verify_anchored((const char *const *)files, nfiles, key, keylen, state,
					anchors, nanchors, &res);
	newest = nanchors ? anchors[nanchors - 1].seq : 0; /* sorted by the verifier */
	free(anchors);
	if (err) {
		if (res.line)
			printf("%s:%zu: %s\n", res.file, res.line, res.message);
		else
			printf("%s: %s\n", res.file[0] ? res.file : files[0],
			       res.message[0] ? res.message : strerror(-err));
		printf("%" PRIu64 " record(s) verified before it\n", res.records);
		rc = CTL_EXIT_ERROR;
	} else {
		printf("ok: %" PRIu64 " record(s) in %zu file(s) verify, %" PRIu64
		       " gap record(s), last seq %" PRIu64 "%s%s\n",
		       res.records, nfiles, res.gaps, res.last_seq, state ? ", state " : "",
		       state ? state : " (no state file: a truncated tail is not detectable)");
		if (anchors_file)
			printf("anchors: %zu in %s, the newest at seq %" PRIu64 "\n", nanchors,
			       anchors_file, newest);
		rc = CTL_EXIT_OK;
	}
	if (key)
		egr_audit_free_key(key, keylen);
	egr_audit_free_files(files, nfiles);
	(void)c;
	return rc;
}
