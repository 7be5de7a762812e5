// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * `egressctl suggest --execution-id ID`: the narrowest policy that allows
 * what an execution did, from its "execution" audit record (written when
 * its sandbox is detached; user/lib/suggest.c builds the policy). It reads
 * the audit log itself (rotated files included), so it works after the
 * sandbox and even egressd are gone; the data lives as long as the log.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "audit.h"
#include "ctl.h"
#include "suggest.h"

#define DEFAULT_AUDIT_LOG "/var/lib/egressd/audit.log"

static const char suggest_help[] =
	"Usage: egressctl suggest --execution-id ID [--audit-log PATH]\n"
	"Print, as a policy `run` and `attach` accept, the narrowest policy that allows\n"
	"what execution ID did (docs/policy.md \"Suggested policies\"): names it resolved\n"
	"and reached as PROTO/NAME:PORT, addresses reached without a name, names only\n"
	"resolved in dns_allow (a \"*.\" wildcard from " "5" " siblings of one domain on),\n"
	"and its tenant and identity. From an enforced execution, what was denied is\n"
	"listed on stderr and not added. Reads the execution's audit record: the\n"
	"sandbox must have ended (been detached).\n"
	"  --audit-log PATH  the audit log (default: the one egressd reports, else\n"
	"                    " DEFAULT_AUDIT_LOG ")\n";

enum { O_SOCKET = 256, O_TIMEOUT, O_HELP, O_EXEC, O_LOG };

/* The audit log egressd writes, if it answers. */
static int audit_path(struct ctl *c, char *buf, size_t len)
{
	json_t *req = egr_proto_request(EGR_OP_STATUS), *resp = NULL;
	const char *p;
	int rc;

	if (!req)
		return -ENOMEM;
	rc = ctl_request(c, req, &resp, NULL, 0);
	json_decref(req);
	if (rc)
		return -ENOENT;
	p = json_string_value(json_object_get(json_object_get(resp, "audit"), "path"));
	if (p)
		snprintf(buf, len, "%s", p);
	json_decref(resp);
	return p ? 0 : -ENOENT;
}

struct found {
	json_t *exec;      /* the last execution record of the id */
	size_t nexec;      /* how many there were */
	bool attached;     /* a policy_change "attach" of the id */
	bool quarantined;  /* a "quarantine" record of the id */
};

/* One line of the log: keep what concerns id. */
static void scan_line(const char *line, size_t len, const char *id, struct found *f)
{
	json_t *rec;
	const char *type;

	/* Cheap filter first: most records are of other executions. */
	if (!memmem(line, len, id, strlen(id)))
		return;
	rec = json_loadb(line, len, 0, NULL);
	if (!rec)
		return;
	if (strcmp(json_string_value(json_object_get(rec, "execution_id")) ?: "", id)) {
		json_decref(rec);
		return;
	}
	type = json_string_value(json_object_get(rec, "type")) ?: "";
	if (!strcmp(type, "execution")) {
		json_decref(f->exec);
		f->exec = rec;
		f->nexec++;
		return;
	}
	if (!strcmp(type, "policy_change") &&
	    !strcmp(json_string_value(json_object_get(rec, "change")) ?: "", "attach"))
		f->attached = true;
	if (!strcmp(type, "quarantine"))
		f->quarantined = true;
	json_decref(rec);
}

/* Every line of one (plain or gzip) file. */
static int scan_file(const char *path, const char *id, struct found *f)
{
	gzFile gz = gzopen(path, "rb");
	size_t cap = 1 << 16, len = 0;
	char *line;

	if (!gz)
		return -errno ? -errno : -ENOMEM;
	line = malloc(cap);
	if (!line) {
		gzclose(gz);
		return -ENOMEM;
	}
	for (;;) {
		if (!gzgets(gz, line + len, (int)(cap - len))) {
			if (len)
				scan_line(line, len, id, f);
			break;
		}
		len += strlen(line + len);
		if (len && line[len - 1] == '\n') {
			scan_line(line, len - 1, id, f);
			len = 0;
			continue;
		}
		if (cap - len > 1)
			continue;
		if (cap >= EGR_AUDIT_MAX_LINE) {
			/* Longer than any record the writer makes: skip it. */
			len = 0;
			continue;
		}
		cap *= 2;
		{
			char *n = realloc(line, cap);

			if (!n) {
				free(line);
				gzclose(gz);
				return -ENOMEM;
			}
			line = n;
		}
	}
	free(line);
	gzclose(gz);
	return 0;
}

int ctl_cmd_suggest(struct ctl *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, O_SOCKET },
		{ "timeout", required_argument, NULL, O_TIMEOUT },
		{ "help", no_argument, NULL, O_HELP },
		{ "execution-id", required_argument, NULL, O_EXEC },
		{ "audit-log", required_argument, NULL, O_LOG },
		{ NULL, 0, NULL, 0 },
	};
	const char *id = NULL, *log = NULL;
	char path[4096], **files = NULL;
	struct found f = { 0 };
	struct egr_error e = { { 0 }, { 0 } };
	json_t *policy = NULL, *notes = NULL, *n;
	size_t nfiles = 0, i;
	int opt, err, rc = CTL_EXIT_ERROR;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case O_SOCKET:
			c->socket = optarg;
			break;
		case O_TIMEOUT:
			c->timeout = (unsigned int)strtoul(optarg, NULL, 10);
			break;
		case O_HELP:
			fputs(suggest_help, stdout);
			return 0;
		case O_EXEC:
			id = optarg;
			break;
		case O_LOG:
			log = optarg;
			break;
		default:
			fprintf(stderr, "Try 'egressctl suggest --help'.\n");
			return CTL_EXIT_USAGE;
		}
	}
	if (optind < argc)
		return ctl_usage_error("suggest", "suggest: unexpected argument '%s'", argv[optind]);
	if (!id || !*id)
		return ctl_usage_error("suggest", "suggest: --execution-id ID is required");
	if (log) {
		snprintf(path, sizeof(path), "%s", log);
	} else if (audit_path(c, path, sizeof(path))) {
		snprintf(path, sizeof(path), "%s", DEFAULT_AUDIT_LOG);
		fprintf(stderr, "egressctl: suggest: egressd did not name its audit log; reading %s\n",
			path);
	}
	err = egr_audit_list_files(path, &files, &nfiles);
	if (err || !nfiles) {
		fprintf(stderr, "egressctl: suggest: no audit log at %s%s%s\n", path,
			err ? ": " : "", err ? strerror(-err) : "");
		egr_audit_free_files(files, nfiles);
		return CTL_EXIT_ERROR;
	}
	for (i = 0; i < nfiles; i++) {
		err = scan_file(files[i], id, &f);
		if (err)
			fprintf(stderr, "egressctl: suggest: read %s: %s\n", files[i], strerror(-err));
	}
	if (!f.exec) {
		if (f.attached)
			fprintf(stderr, "egressctl: suggest: execution %s has not ended: its record is "
				"written when its sandbox is detached (egressctl detach, or the end of "
				"egressctl run)\n", id);
		else
			fprintf(stderr, "egressctl: suggest: no record of execution %s in %s (%zu "
				"file(s)): it aged out of the audit log (rotation), or it never ran "
				"under this egressd\n", id, path, nfiles);
		goto out;
	}
	if (f.nexec > 1)
		fprintf(stderr, "egressctl: suggest: %zu executions are called %s; using the last\n",
			f.nexec, id);
	err = egr_suggest_policy(f.exec, &policy, &notes, &e);
	if (err) {
		fprintf(stderr, "egressctl: suggest: %s%s%s\n", e.field, e.field[0] ? ": " : "",
			err == -ENOMEM ? "out of memory" : e.message);
		goto out;
	}
	json_array_foreach(notes, i, n)
		fprintf(stderr, "egressctl: suggest: %s\n", json_string_value(n));
	if (f.quarantined)
		fprintf(stderr, "egressctl: suggest: the circuit breaker quarantined this execution; "
			"what it did after that was denied\n");
	ctl_print_json(policy);
	rc = CTL_EXIT_OK;
out:
	json_decref(policy);
	json_decref(notes);
	json_decref(f.exec);
	egr_audit_free_files(files, nfiles);
	return rc;
}
