/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* egressctl internals shared by its modules. */
#ifndef EGR_CTL_H
#define EGR_CTL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "proto.h"

/* Exit statuses (see `egressctl --help`). */
enum ctl_exit {
	CTL_EXIT_OK = 0,
	CTL_EXIT_ERROR = 1,       /* egressd answered with an error */
	CTL_EXIT_USAGE = 2,
	CTL_EXIT_UNREACHABLE = 3, /* cannot connect to egressd */
	CTL_EXIT_INVALID = 4,     /* invalid policy, found locally or by egressd */
	CTL_EXIT_UNHEALTHY = 5,   /* status: egressd answered but is not healthy */
	CTL_EXIT_DENIED = 6,      /* the control socket refused us (permissions) */
	CTL_EXIT_RUN_FAILED = 125, /* run: could not set up or start the command */
};

#define CTL_DEFAULT_TIMEOUT_S 120

struct ctl {
	const char *socket;  /* control socket path */
	unsigned int timeout; /* seconds to wait for an answer, 0 = forever */
	bool quiet;           /* ctl_request prints nothing */
};

/* --- client.c: talking to egressd ------------------------------------------ */

/*
 * --json: errors go to stdout as one JSON object too,
 * {"ok":false,"exit":N,"code":C,"error":MSG[,"field":F]}, besides the text
 * on stderr. ctl_note_error() records the first error of the run (its cause);
 * ctl_finish(rc), called once by main, prints it when json is on and rc says
 * failure, and returns rc.
 */
void ctl_json_errors(bool on);
void ctl_note_error(const char *code, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int ctl_finish(int rc);

/* The exit status a protocol error code maps to (the only place that decides). */
int ctl_exit_for_code(const char *code);

/*
 * Send req, read the answer. Returns an enum ctl_exit: CTL_EXIT_OK with *resp
 * set to the answer (ok:true), or an error status after printing the reason to
 * stderr (an error answer is printed as `egressctl: CODE: ERROR (field: F)`).
 * When code is non-NULL it receives the error answer's code ("" if none).
 */
int ctl_request(const struct ctl *c, json_t *req, json_t **resp, char *code, size_t codelen);
/* ctl_request in two halves, so the caller can work while egressd does:
 * send (connect and write; never fails by itself, finish says why), then
 * finish (read the answer, same result as ctl_request) or abandon. */
struct ctl_pending {
	int fd; /* connected, answer not read yet; or -errno of the send */
	int werr;
	bool connected;
};
void ctl_request_send(const struct ctl *c, const json_t *req, struct ctl_pending *p);
int ctl_request_finish(const struct ctl *c, struct ctl_pending *p, json_t **resp, char *code,
		       size_t codelen);
void ctl_request_abandon(struct ctl_pending *p);

/* --- policy.c: policy files ---------------------------------------------------- */

/*
 * Read a policy file ("-" is stdin), parse it and validate it with the
 * library's parser. CTL_EXIT_OK with *out set, or CTL_EXIT_INVALID /
 * CTL_EXIT_USAGE (unreadable file) after printing why.
 */
int ctl_policy_load(const char *path, json_t **out);

/* Validate a policy object (after it was edited). CTL_EXIT_OK or CTL_EXIT_INVALID. */
int ctl_policy_check(const json_t *policy);

/* --- table.c: output --------------------------------------------------------- */

void ctl_print_json(const json_t *v);
void ctl_print_status(const json_t *resp);
void ctl_print_sandbox(const char *verb, const json_t *sb);
void ctl_print_list(const json_t *sandboxes);

/* --- run.c ---------------------------------------------------------------------- */

int ctl_cmd_run(struct ctl *c, int argc, char **argv);

/* --- runns.c: the command's view of the file system -------------------------------- */

#define RUN_HIDE_MAX 16

struct run_view {
	char cgroup2[PATH_MAX]; /* the cgroup2 mount point, outside and inside */
	char cwd[PATH_MAX];     /* the caller's working directory ("" unknown) */
	char hide[RUN_HIDE_MAX][PATH_MAX]; /* absolute paths to cover */
	size_t nhide;
};

/* Add path (made absolute) to the paths to hide. 0, -EINVAL for "/",
 * -E2BIG when full, -errno. */
int run_view_add_hide(struct run_view *v, const char *path);

/* In the command's pid 1, in new mount, pid and cgroup namespaces and with
 * every capability: private propagation, no procfs, bpffs or cgroup mount
 * of the host, a fresh /proc (host knobs read-only, internals masked) and
 * cgroup2, a minimal read-only /dev, read-only /sys, v->hide covered,
 * checked, and the working
 * directory looked up again. 0 or -errno after printing why. */
int run_view_enter(const struct run_view *v);

/* --- events.c: events and audit verify -------------------------------------------- */

int ctl_cmd_events(struct ctl *c, int argc, char **argv);
/* Follow the event stream of req (an "events" request with follow) until
 * egressd ends it, reconnecting across restarts; only: print events of
 * that type alone (and loss records), NULL for all. */
int ctl_follow(const struct ctl *c, const json_t *req, bool json, const char *only);
/* approvals.c: approvals, approve, deny. */
int ctl_cmd_approvals(struct ctl *c, int argc, char **argv);
int ctl_cmd_approve(struct ctl *c, int argc, char **argv);
int ctl_cmd_deny(struct ctl *c, int argc, char **argv);
int ctl_cmd_audit(struct ctl *c, int argc, char **argv);
/* `egressctl seccomp-profile`: the OCI profile of the run filter. */
int ctl_cmd_seccomp_profile(struct ctl *c, int argc, char **argv);

/* --- maint.c: version, cleanup ---------------------------------------------------- */

int ctl_cmd_version(struct ctl *c, int argc, char **argv);
int ctl_cmd_cleanup(struct ctl *c, int argc, char **argv);

/* --- seccompprofile.c --------------------------------------------------------------- */

struct egr_confine;
/* The OCI profile of conf: deny-by-default, or merged into the profile in
 * the file base_path (NULL: none). An exit status, after saying why. */
int ctl_seccomp_profile(const struct egr_confine *conf, const char *base_path, json_t **out);

/* --- ocihook.c: `egressctl oci-hook createRuntime|poststop` ----------------------- */

int ctl_cmd_oci_hook(struct ctl *c, int argc, char **argv);

/* --- stats.c ---------------------------------------------------------------------- */

int ctl_cmd_stats(struct ctl *c, int argc, char **argv);
/* suggest.c: a policy from an execution's audit record. */
int ctl_cmd_suggest(struct ctl *c, int argc, char **argv);

/* --- main.c: shared helpers ---------------------------------------------------- */

/* Absolute form of a cgroup path (realpath when it exists). 0 or -errno. */
int ctl_abs_path(const char *path, char *buf, size_t len);

/* A connect to the control socket failed with err (-errno): say why, with
 * a hint, and return its exit status: CTL_EXIT_DENIED for a permission
 * error (egressd may well be running), CTL_EXIT_UNREACHABLE otherwise. */
int ctl_connect_failed(const struct ctl *c, int err);

/* Print `egressctl: MSG` and a pointer to --help for cmd; returns CTL_EXIT_USAGE. */
int ctl_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* EGR_CTL_H */
