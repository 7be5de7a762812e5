// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "obs/billing.h"
#include "policy.h"
#include "obs/events.h"
#include "obs/metrics.h"
#include "options.h"
#include "ptree.h"
#include "proto.h"

enum {
	OPT_SOCKET = 1000,
	OPT_BPFFS_DIR,
	OPT_STATE_DIR,
	OPT_GROUP,
	OPT_USER,
	OPT_LOG_LEVEL,
	OPT_LOG_PRIORITY_PREFIX,
	OPT_DNS_UPSTREAM,
	OPT_DNS_MIN_TTL,
	OPT_DNS_UPSTREAM_TIMEOUT,
	OPT_DNS_TTL_GRACE,
	OPT_DNS_MAX_LEARNED,
	OPT_AUDIT_LOG,
	OPT_AUDIT_KEY,
	OPT_AUDIT_ROTATE,
	OPT_AUDIT_ANCHOR,
	OPT_AUDIT_ANCHOR_EVERY,
	OPT_ALERTS_FILE,
	OPT_ALERT_INTERVAL,
	OPT_ALERT_FLOOR,
	OPT_ALERT_DENY_BURST,
	OPT_ALERT_DEDUP,
	OPT_EVENTS_KEEP,
	OPT_NO_SYSLOG,
	OPT_NO_HARDEN,
	OPT_REQUIRE_ESCAPE_GUARD,
	OPT_EXFIL_LABEL,
	OPT_EXFIL_NAME,
	OPT_EXFIL_ENTROPY,
	OPT_EXFIL_SUBDOMAINS,
	OPT_EXFIL_NXDOMAIN,
	OPT_METRICS_ADDR,
	OPT_METRICS_MAX,
	OPT_BILLING_INTERVAL,
	OPT_BILLING_FILE,
	OPT_DNS_RATE,
	OPT_DNS_BURST,
	OPT_DNS_INFLIGHT,
	OPT_DNS_INFLIGHT_SB,
	OPT_EV_DENY_RATE,
	OPT_EV_DENY_BURST,
	OPT_EV_ALLOW_RATE,
	OPT_BREAKER,
	OPT_BREAKER_INTERVAL,
	OPT_LISTENER_HOLDER,
	OPT_LISTENER_HOLD,
	OPT_POLICY_DIR,
	OPT_REQUIRE_POLICY_NS,
	OPT_CONFIG,
	OPT_CHECK_CONFIG,
	OPT_HOLD_LISTENERS_OF,
	OPT_HELP,
	OPT_VERSION,
};

static const struct option longopts[] = {
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "bpffs-dir", required_argument, NULL, OPT_BPFFS_DIR },
	{ "state-dir", required_argument, NULL, OPT_STATE_DIR },
	{ "group", required_argument, NULL, OPT_GROUP },
	{ "user", required_argument, NULL, OPT_USER },
	{ "log-level", required_argument, NULL, OPT_LOG_LEVEL },
	{ "log-priority-prefix", no_argument, NULL, OPT_LOG_PRIORITY_PREFIX },
	{ "dns-upstream", required_argument, NULL, OPT_DNS_UPSTREAM },
	{ "dns-min-ttl", required_argument, NULL, OPT_DNS_MIN_TTL },
	{ "dns-upstream-timeout", required_argument, NULL, OPT_DNS_UPSTREAM_TIMEOUT },
	{ "dns-ttl-grace", required_argument, NULL, OPT_DNS_TTL_GRACE },
	{ "dns-max-learned", required_argument, NULL, OPT_DNS_MAX_LEARNED },
	{ "audit-log", required_argument, NULL, OPT_AUDIT_LOG },
	{ "audit-key", required_argument, NULL, OPT_AUDIT_KEY },
	{ "audit-rotate-bytes", required_argument, NULL, OPT_AUDIT_ROTATE },
	{ "audit-anchor", required_argument, NULL, OPT_AUDIT_ANCHOR },
	{ "audit-anchor-every", required_argument, NULL, OPT_AUDIT_ANCHOR_EVERY },
	{ "alerts-file", required_argument, NULL, OPT_ALERTS_FILE },
	{ "alert-interval", required_argument, NULL, OPT_ALERT_INTERVAL },
	{ "alert-volume-floor", required_argument, NULL, OPT_ALERT_FLOOR },
	{ "alert-deny-burst", required_argument, NULL, OPT_ALERT_DENY_BURST },
	{ "alert-dedup", required_argument, NULL, OPT_ALERT_DEDUP },
	{ "events-keep", required_argument, NULL, OPT_EVENTS_KEEP },
	{ "no-syslog", no_argument, NULL, OPT_NO_SYSLOG },
	{ "no-harden", no_argument, NULL, OPT_NO_HARDEN },
	{ "require-escape-guard", no_argument, NULL, OPT_REQUIRE_ESCAPE_GUARD },
	{ "dns-exfil-max-label", required_argument, NULL, OPT_EXFIL_LABEL },
	{ "dns-exfil-max-name", required_argument, NULL, OPT_EXFIL_NAME },
	{ "dns-exfil-max-entropy", required_argument, NULL, OPT_EXFIL_ENTROPY },
	{ "dns-exfil-max-subdomains", required_argument, NULL, OPT_EXFIL_SUBDOMAINS },
	{ "dns-exfil-max-nxdomain", required_argument, NULL, OPT_EXFIL_NXDOMAIN },
	{ "metrics-addr", required_argument, NULL, OPT_METRICS_ADDR },
	{ "metrics-max-sandboxes", required_argument, NULL, OPT_METRICS_MAX },
	{ "billing-interval", required_argument, NULL, OPT_BILLING_INTERVAL },
	{ "billing-file", required_argument, NULL, OPT_BILLING_FILE },
	{ "dns-rate", required_argument, NULL, OPT_DNS_RATE },
	{ "dns-burst", required_argument, NULL, OPT_DNS_BURST },
	{ "dns-max-inflight", required_argument, NULL, OPT_DNS_INFLIGHT },
	{ "dns-max-inflight-per-sandbox", required_argument, NULL, OPT_DNS_INFLIGHT_SB },
	{ "events-deny-rate", required_argument, NULL, OPT_EV_DENY_RATE },
	{ "events-deny-burst", required_argument, NULL, OPT_EV_DENY_BURST },
	{ "events-allow-rate", required_argument, NULL, OPT_EV_ALLOW_RATE },
	{ "breaker", required_argument, NULL, OPT_BREAKER },
	{ "breaker-interval", required_argument, NULL, OPT_BREAKER_INTERVAL },
	{ "listener-holder", required_argument, NULL, OPT_LISTENER_HOLDER },
	{ "listener-hold", required_argument, NULL, OPT_LISTENER_HOLD },
	{ "policy-dir", required_argument, NULL, OPT_POLICY_DIR },
	{ "require-policy-namespaces", required_argument, NULL, OPT_REQUIRE_POLICY_NS },
	{ "config", required_argument, NULL, OPT_CONFIG },
	{ "check-config", no_argument, NULL, OPT_CHECK_CONFIG },
	{ "hold-listeners-of", required_argument, NULL, OPT_HOLD_LISTENERS_OF },
	{ "help", no_argument, NULL, OPT_HELP },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ NULL, 0, NULL, 0 },
};
_Static_assert(sizeof(longopts) / sizeof(longopts[0]) <= EGR_OPT_SLOTS, "EGR_OPT_SLOTS too small");

/* Only on the command line: they say how to read the configuration. */
static const char *const cli_only[] = { "config", "check-config", "hold-listeners-of", "help",
					 "version", NULL };
static const char *const repeatable[] = { "dns-upstream", NULL };

/*
 * What SIGHUP applies without touching enforcement (docs/operations.md).
 * Everything else is bound at start: sockets, pins, files, timers, the
 * upstream sockets, the learned-address map size, the hardening; the DNS
 * fairness limits (the proxy sizes its buckets and in-flight table at start)
 * and the deny-event budget (read-only data of the loaded programs).
 */
static const char *const reloadable[] = {
	"log-level", "alert-volume-floor", "alert-deny-burst", "alert-dedup", "dns-min-ttl",
	"dns-ttl-grace",
	"dns-exfil-max-label", "dns-exfil-max-name", "dns-exfil-max-entropy",
	"dns-exfil-max-subdomains", "dns-exfil-max-nxdomain", "metrics-max-sandboxes", NULL,
};

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: egressd [OPTIONS]\n"
		"Confine the network egress of sandbox cgroups with eBPF.\n\n"
		"  --config FILE      options as a JSON object of long option names (flags given\n"
		"                     here win); SIGHUP re-reads it\n"
		"  --check-config     validate the configuration (file and flags) and exit\n"
		"  --socket PATH      control socket (default %s)\n"
		"  --bpffs-dir DIR    where maps and links are pinned (default /sys/fs/bpf/egressd)\n"
		"  --state-dir DIR    sandbox state (default /var/lib/egressd)\n"
		"  --group NAME       group allowed on the control socket besides root\n"
		"  --user NAME        run as this system user once set up, with only the\n"
		"                     capabilities it needs (root cannot signal or trace it)\n"
		"  --log-level LEVEL  error, warn, info (default) or debug\n"
		"  --log-priority-prefix  \"<N>\" syslog priorities on log lines (automatic when\n"
		"                     stderr is the journal)\n"
		"  --dns-upstream ADDR[:PORT]  resolver the DNS proxy forwards to (repeatable;\n"
		"                     default: the nameservers of /etc/resolv.conf)\n"
		"  --dns-upstream-timeout MS  a query the upstreams do not answer in this long\n"
		"                     is answered SERVFAIL; a UDP one is sent again after a\n"
		"                     third of it (default 2000)\n"
		"  --dns-min-ttl SEC  learned addresses live at least this long (default 30, a\n"
		"                     JVM's DNS cache)\n"
		"  --dns-ttl-grace SEC  and this much past that (default 30); one the sandbox\n"
		"                     has a socket connected to lives on while it does\n"
		"  --dns-max-learned N  learned addresses per sandbox (default 4096)\n"
		"  --dns-exfil-max-label N, --dns-exfil-max-name N, --dns-exfil-max-entropy BITS,\n"
		"  --dns-exfil-max-subdomains N (per allowed domain and minute),\n"
		"  --dns-exfil-max-nxdomain N (per minute): exfiltration limits; 0 turns one off\n"
		"  --dns-rate QPS     queries per second per sandbox (default 500); a UDP query\n"
		"                     past it is dropped, a TCP one gets SERVFAIL\n"
		"  --dns-burst N      queries per sandbox above the rate at once (default 1000)\n"
		"  --dns-max-inflight N  queries upstream at once, all sandboxes (default 1024)\n"
		"  --dns-max-inflight-per-sandbox N  and per sandbox (default max-inflight/4,\n"
		"                     at least 64); a full table evicts the heaviest sandbox's\n"
		"                     oldest query for one with fewer\n"
		"  --audit-log PATH   audit log (default <state-dir>/audit.log; its chain\n"
		"                     state is <state-dir>/audit.state)\n"
		"  --audit-key FILE   HMAC-SHA-256 key for the audit chain (mode 0600)\n"
		"  --audit-rotate-bytes N  rotate the audit log past N bytes (default 64 MiB, 0 = never)\n"
		"  --audit-anchor syslog|FILE  write the chain head there at start, stop and every\n"
		"                     --audit-anchor-every N durable records (default 1: every\n"
		"                     batch); FILE absolute, made append-only (default: syslog)\n"
		"  --audit-anchor none  no anchors (a cut tail then goes unseen)\n"
		"  --alerts-file PATH alerts as JSON lines (\"-\" = stdout; default\n"
		"                     <state-dir>/alerts.jsonl); also to syslog\n"
		"  --alert-interval SEC  meter sampling for volume anomalies (default 10)\n"
		"  --alert-volume-floor BYTES  no volume alert below this per interval (default 1 MiB)\n"
		"  --alert-deny-burst N  denies of a sandbox within 10 s that alert (default 100)\n"
		"  --alert-dedup SEC  one alert per key per SEC (default 300)\n"
		"  --events-keep N    events kept for `egressctl events` (default 4096)\n"
		"  --events-deny-rate N  deny events per second per sandbox the kernel reports\n"
		"                     one by one (default 100; 0: all); the rest are counted\n"
		"                     and reported as one denies_suppressed event per second\n"
		"  --events-deny-burst N  and at once (default 200)\n"
		"  --events-allow-rate N  sampled allow events per second and CPU (default 20,\n"
		"                     burst the same; 0: none); every allow is still counted\n"
		"  --no-syslog        alerts to the file only\n"
		"  --no-harden        keep every capability and no seccomp filter (debugging)\n"
		"  --require-escape-guard  refuse to start unless the whole escape guard (its\n"
		"                     tracepoints and its cgroup2 root programs) is in force\n"
		"  --metrics-addr ADDR:PORT  Prometheus /metrics (default " EGR_METRICS_DEFAULT_ADDR ";\n"
		"                     \"off\" disables it)\n"
		"  --metrics-max-sandboxes N  per-sandbox series at most; the rest fold into\n"
		"                     sandbox=\"_other\" (default 1000)\n"
		"  --billing-interval SEC  billing export interval (default 60)\n"
		"  --billing-file PATH  billing JSON lines (default <state-dir>/billing.jsonl)\n"
		"  --breaker N/S      circuit breaker of policies without network.breaker:\n"
		"                     quarantine a sandbox past N denies within S seconds\n"
		"                     (default: none)\n"
		"  --breaker-interval MS  how often the breaker reads the counters (default 200)\n"
		"  --listener-holder PATH  the listener holder's socket, which keeps the DNS and\n"
		"                     inspecting listeners across restarts (default\n"
		"                     <socket>.hold; \"off\": they close with egressd)\n"
		"  --listener-hold SEC  a holder started by this egressd keeps them this long\n"
		"                     with no egressd running (default 300)\n"
		"  --policy-dir DIR   the policy tree, DIR/NAMESPACE/NAME.json (default\n"
		"                     /etc/egressd/policies): the OCI hook's containers of a\n"
		"                     Kubernetes namespace get their policy from it; watched,\n"
		"                     a changed file is applied to the sandboxes using it\n"
		"  --require-policy-namespaces LIST  comma-separated namespaces whose\n"
		"                     containers without io.egressd.policy and without a\n"
		"                     NAMESPACE/default.json are refused (default: none)\n"
		"  --hold-listeners-of PID  hand the DNS and inspecting listeners of the egressd\n"
		"                     PID, an older one without a listener holder, to a holder\n"
		"                     for its successor, then exit (the unit's ExecStop=)\n"
		"  --help             this text\n"
		"  --version          print the version\n",
		EGR_DEFAULT_SOCKET);
}

static bool in_list(const char *const *list, const char *s)
{
	for (; *list; list++)
		if (!strcmp(*list, s))
			return true;
	return false;
}

/* The option being parsed, named as the user wrote it. */
struct cursor {
	const char *name;
	bool from_config;
};

static int bad(struct egr_options *o, const struct cursor *at, const char *fmt, ...)
{
	char msg[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (at->from_config)
		snprintf(o->err, sizeof(o->err), "config %s: key \"%s\": %s", o->config, at->name,
			 msg);
	else
		snprintf(o->err, sizeof(o->err), "--%s: %s", at->name, msg);
	return 2;
}

/* A whole decimal number in [min, max]. */
static int num(struct egr_options *o, const struct cursor *at, const char *s,
	       unsigned long long min, unsigned long long max, unsigned long long *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (!*s || *end || s[0] == '-' || s[0] == '+' || errno || v < min || v > max)
		return bad(o, at, "expected a whole number from %llu to %llu, got \"%s\"", min, max,
			   s);
	*out = v;
	return 0;
}

static void defaults(struct egr_options *o)
{
	memset(o, 0, sizeof(*o));
	o->socket = EGR_DEFAULT_SOCKET;
	o->bpffs_dir = "/sys/fs/bpf/egressd";
	o->state_dir = "/var/lib/egressd";
	o->group = (gid_t)-1;
	o->log_level = EGR_LOG_INFO;
	o->metrics_addr = EGR_METRICS_DEFAULT_ADDR;
	o->metrics_max_sandboxes = EGR_METRICS_DEFAULT_MAX_SANDBOXES;
	o->billing_interval_s = EGR_BILLING_DEFAULT_INTERVAL_S;
	o->dns.min_ttl_s = EGR_DNSPROXY_DEFAULT_MIN_TTL_S;
	o->dns.ttl_grace_s = EGR_DNSPROXY_DEFAULT_TTL_GRACE_S;
	egr_exfil_limits_default(&o->dns.exfil);
	o->dns_max_learned = 4096;
	o->holder_linger_s = 300;
	o->audit_rotate_bytes = 64ull << 20;
	o->audit_anchor = "syslog";
	o->events_keep = EGR_EVENTS_KEEP_DEFAULT;
	o->events_deny_rate = EGR_EVENTS_DENY_RATE_DEFAULT;
	o->events_deny_burst = EGR_EVENTS_DENY_BURST_DEFAULT;
	o->events_allow_rate = EGR_EVENTS_ALLOW_RATE_DEFAULT;
	egr_alerting_opts_default(&o->alerts);
}

/* One option's value into o. 0, or 2 with o->err set. */
static int apply(struct egr_options *o, int c, const struct cursor *at, const char *arg)
{
	unsigned long long v;
	enum egr_log_level lvl;
	struct passwd *pw;
	struct group *gr;
	int rc = 0;

	switch (c) {
	case OPT_SOCKET:
		if (!*arg)
			return bad(o, at, "expected a path");
		o->socket = arg;
		break;
	case OPT_BPFFS_DIR:
		if (!*arg)
			return bad(o, at, "expected a directory");
		o->bpffs_dir = arg;
		break;
	case OPT_STATE_DIR:
		if (!*arg)
			return bad(o, at, "expected a directory");
		o->state_dir = arg;
		break;
	case OPT_GROUP:
		gr = getgrnam(arg);
		if (!gr)
			return bad(o, at, "no group named \"%s\"", arg);
		o->group = gr->gr_gid;
		break;
	case OPT_USER:
		pw = getpwnam(arg);
		if (!pw)
			return bad(o, at, "no user named \"%s\"", arg);
		if (pw->pw_uid == 0)
			return bad(o, at, "\"%s\" is root: give a system user of its own", arg);
		o->user = arg;
		o->user_uid = pw->pw_uid;
		o->user_gid = pw->pw_gid;
		break;
	case OPT_LOG_LEVEL:
		if (egr_log_parse_level(arg, &lvl))
			return bad(o, at, "expected error, warn, info or debug, got \"%s\"", arg);
		o->log_level = lvl;
		break;
	case OPT_LOG_PRIORITY_PREFIX:
		o->log_priority_prefix = true;
		break;
	case OPT_DNS_UPSTREAM:
		if (o->dns.nupstreams == EGR_DNSPROXY_MAX_UPSTREAMS)
			return bad(o, at, "more than %d upstreams", EGR_DNSPROXY_MAX_UPSTREAMS);
		if (egr_dnsproxy_parse_addr(arg, &o->dns.upstreams[o->dns.nupstreams]) < 0)
			return bad(o, at, "expected ADDR[:PORT], got \"%s\"", arg);
		o->dns.nupstreams++;
		break;
	case OPT_DNS_UPSTREAM_TIMEOUT:
		rc = num(o, at, arg, 100, 60000, &v);
		if (!rc)
			o->dns.timeout_ms = (uint32_t)v;
		break;
	case OPT_DNS_MIN_TTL:
	case OPT_DNS_TTL_GRACE:
	case OPT_DNS_MAX_LEARNED:
		rc = num(o, at, arg, 0, 86400ull * 365, &v);
		if (!rc && c == OPT_DNS_MIN_TTL)
			o->dns.min_ttl_s = (uint32_t)v;
		else if (!rc && c == OPT_DNS_TTL_GRACE)
			o->dns.ttl_grace_s = (uint32_t)v;
		else if (!rc)
			o->dns_max_learned = (uint32_t)v;
		break;
	case OPT_AUDIT_LOG:
		o->audit_log = arg;
		break;
	case OPT_AUDIT_KEY:
		o->audit_key = arg;
		break;
	case OPT_AUDIT_ANCHOR:
		if (strcmp(arg, "syslog") && strcmp(arg, "none") && arg[0] != '/') {
			fprintf(stderr, "egressd: --audit-anchor: syslog, none or an absolute path\n");
			rc = -EINVAL;
			break;
		}
		o->audit_anchor = strcmp(arg, "none") ? arg : NULL;
		break;
	case OPT_AUDIT_ANCHOR_EVERY:
		rc = num(o, at, arg, 1, 1000000, &v);
		if (!rc)
			o->audit_anchor_every = (unsigned int)v;
		break;
	case OPT_AUDIT_ROTATE:
		rc = num(o, at, arg, 0, ~0ull, &v);
		if (!rc)
			o->audit_rotate_bytes = v;
		break;
	case OPT_ALERTS_FILE:
		o->alerts.file = arg;
		break;
	case OPT_ALERT_INTERVAL:
		rc = num(o, at, arg, 1, 86400, &v);
		if (!rc)
			o->alerts.interval_s = (unsigned)v;
		break;
	case OPT_ALERT_FLOOR:
		rc = num(o, at, arg, 0, ~0ull, &v);
		if (!rc)
			o->alerts.cfg.floor_bytes = v;
		break;
	case OPT_ALERT_DENY_BURST:
		rc = num(o, at, arg, 0, 0xffffffffull, &v);
		if (!rc)
			o->alerts.cfg.deny_burst = (unsigned)v;
		break;
	case OPT_ALERT_DEDUP:
		rc = num(o, at, arg, 0, 86400ull * 365, &v);
		if (!rc)
			o->alerts.cfg.dedup_window_ns = (v ? v : 1) * 1000000000ull;
		break;
	case OPT_EVENTS_KEEP:
		rc = num(o, at, arg, 0, 1ull << 24, &v);
		if (!rc)
			o->events_keep = (size_t)v;
		break;
	case OPT_NO_SYSLOG:
		o->alerts.syslog = false;
		break;
	case OPT_NO_HARDEN:
		o->no_harden = true;
		break;
	case OPT_REQUIRE_ESCAPE_GUARD:
		o->require_escape_guard = true;
		break;
	case OPT_EXFIL_LABEL:
	case OPT_EXFIL_NAME:
	case OPT_EXFIL_ENTROPY:
	case OPT_EXFIL_SUBDOMAINS:
	case OPT_EXFIL_NXDOMAIN: {
		/* 0 turns a check off (docs/dns.md). */
		char *end;
		double d = strtod(arg, &end);

		if (*end || end == arg || !(d >= 0 && d <= 100000))
			return bad(o, at, "expected a number from 0 to 100000, got \"%s\"", arg);
		if (c == OPT_EXFIL_LABEL)
			o->dns.exfil.max_label_len = (uint32_t)d;
		else if (c == OPT_EXFIL_NAME)
			o->dns.exfil.max_name_len = (uint32_t)d;
		else if (c == OPT_EXFIL_ENTROPY)
			o->dns.exfil.max_entropy = d;
		else if (c == OPT_EXFIL_SUBDOMAINS)
			o->dns.exfil.max_subdomains = (uint32_t)d;
		else
			o->dns.exfil.max_nxdomain = (uint32_t)d;
		break;
	}
	case OPT_METRICS_ADDR:
		if (egr_metrics_check_addr(arg))
			return bad(o, at, "expected IPv4:PORT, [IPv6]:PORT or \"off\", got \"%s\"",
				   arg);
		o->metrics_addr = arg;
		break;
	case OPT_METRICS_MAX:
		rc = num(o, at, arg, 0, 1000000, &v);
		if (!rc)
			o->metrics_max_sandboxes = (unsigned)v;
		break;
	case OPT_BILLING_INTERVAL:
		rc = num(o, at, arg, 1, 86400, &v);
		if (!rc)
			o->billing_interval_s = (unsigned)v;
		break;
	case OPT_BILLING_FILE:
		o->billing_file = arg;
		break;
	case OPT_DNS_RATE:
	case OPT_DNS_BURST:
		rc = num(o, at, arg, 1, 1000000, &v);
		if (!rc && c == OPT_DNS_RATE)
			o->dns.rate_qps = (uint32_t)v;
		else if (!rc)
			o->dns.burst = (uint32_t)v;
		break;
	case OPT_DNS_INFLIGHT:
	case OPT_DNS_INFLIGHT_SB:
		rc = num(o, at, arg, 1, 16384, &v);
		if (!rc && c == OPT_DNS_INFLIGHT)
			o->dns.max_inflight = (uint32_t)v;
		else if (!rc)
			o->dns.max_inflight_per_sb = (uint32_t)v;
		break;
	case OPT_EV_DENY_RATE:
		rc = num(o, at, arg, 0, 1000000, &v);
		if (!rc)
			o->events_deny_rate = v;
		break;
	case OPT_EV_DENY_BURST:
		rc = num(o, at, arg, 1, 1000000, &v);
		if (!rc)
			o->events_deny_burst = v;
		break;
	case OPT_EV_ALLOW_RATE:
		rc = num(o, at, arg, 0, 1000000, &v);
		if (!rc)
			o->events_allow_rate = v;
		break;
	case OPT_BREAKER: {
		char *end;
		unsigned long n = strtoul(arg, &end, 10), sec = 0;

		if (end != arg && *end == '/' && arg[0] != '-') {
			const char *w = end + 1;

			sec = strtoul(w, &end, 10);
			if (end == w || *w == '-')
				sec = 0;
		}
		if (*end || !n || n > EGR_POLICY_MAX_BREAKER_DENIES || !sec ||
		    sec > EGR_POLICY_MAX_BREAKER_WINDOW_S)
			return bad(o, at, "expected MAX_DENIES/WINDOW_S (1-%u/1-%u), got \"%s\"",
				   EGR_POLICY_MAX_BREAKER_DENIES, EGR_POLICY_MAX_BREAKER_WINDOW_S, arg);
		o->breaker.max_denies = (uint32_t)n;
		o->breaker.window_s = (uint32_t)sec;
		break;
	}
	case OPT_BREAKER_INTERVAL:
		rc = num(o, at, arg, 10, 60000, &v);
		if (!rc)
			o->breaker.interval_ms = (uint32_t)v;
		break;
	case OPT_POLICY_DIR:
		if (arg[0] != '/' || strlen(arg) >= 4000)
			return bad(o, at, "expected an absolute directory path, got \"%s\"", arg);
		o->policy_dir = arg;
		break;
	case OPT_REQUIRE_POLICY_NS: {
		struct egr_ptree *t;
		int e = egr_ptree_new(&t, NULL, arg);

		egr_ptree_free(t);
		if (e == -EINVAL)
			return bad(o, at, "expected comma-separated Kubernetes namespace names, got "
				   "\"%s\"", arg);
		if (e)
			return bad(o, at, "out of memory");
		o->require_policy_ns = arg;
		break;
	}
	case OPT_LISTENER_HOLDER:
		if (strcmp(arg, "off") && arg[0] != '/')
			return bad(o, at, "expected an absolute path or \"off\", got \"%s\"", arg);
		if (strlen(arg) >= 100)
			return bad(o, at, "a socket path of at most 99 bytes");
		o->holder = arg;
		break;
	case OPT_LISTENER_HOLD:
		rc = num(o, at, arg, 1, 86400, &v);
		if (!rc)
			o->holder_linger_s = (unsigned)v;
		break;
	case OPT_CHECK_CONFIG:
		o->check_config = true;
		break;
	case OPT_HOLD_LISTENERS_OF:
		/* "" is the unit's ExecStop= with no main process left: the
		 * handover has nothing to take (hold/handover.h). */
		v = 0;
		if (*arg && (rc = num(o, at, arg, 1, INT32_MAX, &v)))
			return rc;
		o->hold_listeners_of = (pid_t)v;
		o->hold_listeners = true;
		break;
	case OPT_CONFIG:
		/* Read before everything else by find_config(), which only
		 * knows the full spelling. */
		if (at->from_config || arg != o->config)
			return bad(o, at, "spell it out: --config FILE or --config=FILE");
		break;
	}
	return rc;
}

/* Record the option's effective value (repeatable ones accumulate). */
static int remember(struct egr_options *o, int idx, const char *arg, bool append)
{
	char *v;

	if (append && o->vals[idx]) {
		if (asprintf(&v, "%s,%s", o->vals[idx], arg) < 0)
			return -ENOMEM;
	} else {
		v = strdup(arg ? arg : "true");
		if (!v)
			return -ENOMEM;
	}
	free(o->vals[idx]);
	o->vals[idx] = v;
	return 0;
}

/* Find --config (and nothing else) on the command line: the file is read
 * before the flags are parsed. Once at most, spelled out (the parser checks
 * that no abbreviation of it went past this scan). */
static int find_config(int argc, char **argv, struct egr_options *o)
{
	for (int i = 1; i < argc; i++) {
		const char *path = NULL;

		if (!strcmp(argv[i], "--"))
			break;
		if (!strncmp(argv[i], "--config=", 9)) {
			path = argv[i] + 9;
		} else if (!strcmp(argv[i], "--config")) {
			if (i + 1 == argc) {
				snprintf(o->err, sizeof(o->err), "--config: expected a file");
				return 2;
			}
			path = argv[++i];
		} else {
			continue;
		}
		if (o->config) {
			snprintf(o->err, sizeof(o->err), "--config: given more than once");
			return 2;
		}
		o->config = path;
	}
	if (o->config && !*o->config) {
		snprintf(o->err, sizeof(o->err), "--config: expected a file");
		return 2;
	}
	return -1;
}

int egr_options_load(int argc, char **argv, struct egr_options *o, bool reload)
{
	bool cli_upstreams = false;
	int n, c, idx, rc;

	defaults(o);
	rc = find_config(argc, argv, o);
	if (rc >= 0)
		return rc;
	if (o->config && egr_config_load(o->config, longopts, cli_only, repeatable, &o->cfg, o->err,
					 sizeof(o->err)))
		return 2;
	/* argv[0], the file's "--key=value"s, then the command line. */
	n = 1 + o->cfg.argc + (argc - 1);
	o->args = calloc((size_t)n + 1, sizeof(*o->args));
	if (!o->args) {
		snprintf(o->err, sizeof(o->err), "out of memory");
		return 2;
	}
	o->args[0] = argv[0];
	for (int i = 0; i < o->cfg.argc; i++)
		o->args[1 + i] = o->cfg.argv[i];
	for (int i = 1; i < argc; i++)
		o->args[o->cfg.argc + i] = argv[i];

	optind = 0; /* glibc: start over (SIGHUP parses again) */
	opterr = !reload;
	for (;;) {
		int at = optind ? optind : 1;
		struct cursor cur;

		idx = -1;
		c = getopt_long(n, o->args, "+", longopts, &idx);
		if (c == -1)
			break;
		if (c == '?' || idx < 0) {
			snprintf(o->err, sizeof(o->err), "bad option %s (see --help)",
				 at < n ? o->args[at] : "");
			return 2;
		}
		cur.name = longopts[idx].name;
		cur.from_config = at <= o->cfg.argc;
		if (c == OPT_HELP || c == OPT_VERSION) {
			if (reload)
				continue;
			if (c == OPT_HELP)
				usage(stdout);
			else
				printf("egressd %s\n", EGRESSD_VERSION);
			return 0;
		}
		/* The command line's upstreams replace the file's, not add to them. */
		if (c == OPT_DNS_UPSTREAM && !cur.from_config && !cli_upstreams) {
			cli_upstreams = true;
			o->dns.nupstreams = 0;
			free(o->vals[idx]);
			o->vals[idx] = NULL;
		}
		rc = apply(o, c, &cur, optarg);
		if (rc)
			return rc;
		if (remember(o, idx, optarg, c == OPT_DNS_UPSTREAM)) {
			snprintf(o->err, sizeof(o->err), "out of memory");
			return 2;
		}
	}
	if (optind < n) {
		snprintf(o->err, sizeof(o->err), "unexpected argument %s", o->args[optind]);
		return 2;
	}
	return -1;
}

void egr_options_free(struct egr_options *o)
{
	for (int i = 0; i < EGR_OPT_SLOTS; i++) {
		free(o->vals[i]);
		o->vals[i] = NULL;
	}
	free(o->args);
	o->args = NULL;
	egr_config_args_free(&o->cfg);
}

static void add_name(char *buf, size_t len, const char *name)
{
	size_t used = strlen(buf);

	snprintf(buf + used, len - used, "%s%s", used ? ", " : "", name);
}

void egr_options_diff(const struct egr_options *cur, const struct egr_options *next, char *reload,
		      size_t reload_len, char *restart, size_t restart_len)
{
	reload[0] = restart[0] = '\0';
	for (int i = 0; longopts[i].name; i++) {
		const char *a = cur->vals[i], *b = next->vals[i];

		if (in_list(cli_only, longopts[i].name) || (!a && !b) || (a && b && !strcmp(a, b)))
			continue;
		if (in_list(reloadable, longopts[i].name))
			add_name(reload, reload_len, longopts[i].name);
		else
			add_name(restart, restart_len, longopts[i].name);
	}
}

void egr_options_take_reloadable(struct egr_options *cur, const struct egr_options *next)
{
	cur->log_level = next->log_level;
	cur->alerts.cfg = next->alerts.cfg;
	cur->dns.min_ttl_s = next->dns.min_ttl_s;
	cur->dns.ttl_grace_s = next->dns.ttl_grace_s;
	cur->dns.exfil = next->dns.exfil;
	cur->metrics_max_sandboxes = next->metrics_max_sandboxes;
	for (int i = 0; longopts[i].name; i++) {
		if (!in_list(reloadable, longopts[i].name))
			continue;
		free(cur->vals[i]);
		cur->vals[i] = next->vals[i] ? strdup(next->vals[i]) : NULL;
	}
}
