/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * egressd's options: defaults, then the --config file, then the command
 * line (which wins). The same parser checks both; SIGHUP re-reads them and
 * applies what can change without touching enforcement.
 */
#ifndef EGR_OPTIONS_H
#define EGR_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "obs/alerting.h"
#include "breaker.h"
#include "config.h"
#include "dns/dnsproxy.h"
#include "log.h"

#define EGR_OPT_SLOTS 64

#define EGR_EVENTS_DENY_RATE_DEFAULT  100
#define EGR_EVENTS_DENY_BURST_DEFAULT 200
#define EGR_EVENTS_ALLOW_RATE_DEFAULT 20 /* the programs' egr_allow_events_per_s */

struct egr_options {
	const char *socket;
	const char *bpffs_dir;
	const char *state_dir;
	gid_t group;
	/* --user: the system user egressd becomes once set up (NULL: stays root) */
	const char *user;
	uid_t user_uid;
	gid_t user_gid;
	enum egr_log_level log_level;
	bool log_priority_prefix; /* "<N>" journald priorities even off the journal */
	struct egr_dnsproxy_config dns; /* upstreams, min TTL, exfiltration limits */
	uint32_t dns_max_learned;
	bool no_harden;        /* --no-harden: keep capabilities, no seccomp */
	/* --require-escape-guard: no start without the whole guard (escape.h) */
	bool require_escape_guard;
	/* events, alerts, audit (docs/events.md, alerts.md, audit.md) */
	const char *audit_log, *audit_key;
	unsigned long long audit_rotate_bytes;
	const char *audit_anchor; /* "syslog" (default), a file, NULL: none */
	unsigned int audit_anchor_every;
	size_t events_keep;
	/* --events-deny-rate/-burst: the kernel's per-sandbox deny-event budget */
	uint64_t events_deny_rate, events_deny_burst;
	/* --events-allow-rate: sampled allow events per second and CPU */
	uint64_t events_allow_rate;
	struct egr_alerting_opts alerts;
	/* metering export (docs/metering.md) */
	const char *metrics_addr, *billing_file;
	unsigned metrics_max_sandboxes, billing_interval_s;
	struct egr_breaker_opts breaker; /* --breaker, --breaker-interval */
	/* --listener-holder (NULL: <socket>.hold; "off") and --listener-hold */
	const char *holder;
	unsigned holder_linger_s;
	/* --policy-dir, --require-policy-namespaces (ptree.h; NULL: defaults) */
	const char *policy_dir, *require_policy_ns;
	const char *config;    /* --config FILE (NULL: none) */
	bool check_config;     /* --check-config: validate and exit */
	/* --hold-listeners-of PID: hand them to a holder and exit (0: no pid) */
	bool hold_listeners;
	pid_t hold_listeners_of;

	/* Owned: the config file's arguments (the strings above point into
	 * them or into argv), the merged argument vector, and each option's
	 * effective value as text, for the SIGHUP comparison. */
	struct egr_config_args cfg;
	char **args;
	char *vals[EGR_OPT_SLOTS];
	char err[1024];        /* why loading failed */
};

/*
 * Defaults, --config, command line. Returns -1 to go on, or an exit status:
 * 0 after --help or --version, 2 on a bad option or config file (o->err
 * says which key and why; on a reload nothing is printed). Free o after any
 * return.
 */
int egr_options_load(int argc, char **argv, struct egr_options *o, bool reload);
void egr_options_free(struct egr_options *o);

/* The options whose effective values differ between cur and next, as
 * comma-separated names: the ones SIGHUP applies into reload, the rest into
 * restart (empty strings when none). */
void egr_options_diff(const struct egr_options *cur, const struct egr_options *next, char *reload,
		      size_t reload_len, char *restart, size_t restart_len);
/* After they were applied: cur takes next's reloadable values. */
void egr_options_take_reloadable(struct egr_options *cur, const struct egr_options *next);

#endif /* EGR_OPTIONS_H */
