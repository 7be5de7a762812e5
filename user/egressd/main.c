// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * egressd: loads the programs once, adopts what is pinned, serves the
 * control socket. Stopping it (or killing it) leaves every sandbox enforced.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alerting.h"
#include "auditlog.h"
#include "bpfstate.h"
#include "cgroup.h"
#include "confine.h"
#include "ctlconn.h"
#include "fileio.h"
#include "dnsfair.h"
#include "dnsproxy.h"
#include "events.h"
#include "harden.h"
#include "learned.h"
#include "log.h"
#include "loop.h"
#include "metrics.h"
#include "billing.h"
#include "proto.h"
#include "sandbox.h"
#include "server.h"

struct options {
	const char *socket;
	const char *bpffs_dir;
	const char *state_dir;
	gid_t group;
	struct egr_dnsproxy_config dns; /* upstreams, min TTL */
	uint32_t dns_max_learned;
	bool no_harden;        /* --no-harden: keep capabilities, no seccomp */
	/* events, alerts, audit (docs/events.md, alerts.md, audit.md) */
	const char *audit_log, *audit_key;
	unsigned long long audit_rotate_bytes;
	size_t events_keep;
	struct egr_alerting_opts alerts;
	/* metering export (docs/metering.md) */
	const char *metrics_addr, *billing_file;
	unsigned metrics_max_sandboxes, billing_interval_s;
};

enum { OPT_METRICS_ADDR = 1100, OPT_METRICS_MAX, OPT_BILLING_INTERVAL, OPT_BILLING_FILE };
/* DNS proxy fairness (docs/dns.md "Fairness between sandboxes"). */
enum { OPT_DNS_RATE = 1200, OPT_DNS_BURST, OPT_DNS_INFLIGHT, OPT_DNS_INFLIGHT_SB };
/* Per-sandbox deny-event budget in the kernel (docs/events.md "Rates"). */
enum { OPT_EV_DENY_RATE = 1300, OPT_EV_DENY_BURST };

enum {
	OPT_AUDIT_LOG = 1000,
	OPT_AUDIT_KEY,
	OPT_AUDIT_ROTATE,
	OPT_ALERTS_FILE,
	OPT_ALERT_INTERVAL,
	OPT_ALERT_FLOOR,
	OPT_ALERT_DENY_BURST,
	OPT_ALERT_DEDUP,
	OPT_EVENTS_KEEP,
	OPT_NO_SYSLOG,
	OPT_NO_HARDEN,
	OPT_EXFIL_LABEL,
	OPT_EXFIL_NAME,
	OPT_EXFIL_ENTROPY,
	OPT_EXFIL_SUBDOMAINS,
	OPT_EXFIL_NXDOMAIN,
};

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: egressd [OPTIONS]\n"
		"Confine the network egress of sandbox cgroups with eBPF.\n\n"
		"  --socket PATH      control socket (default %s)\n"
		"  --bpffs-dir DIR    where maps and links are pinned (default /sys/fs/bpf/egressd)\n"
		"  --state-dir DIR    sandbox state (default /var/lib/egressd)\n"
		"  --group NAME       group allowed on the control socket besides root\n"
		"  --log-level LEVEL  error, warn, info (default) or debug\n"
		"  --dns-upstream ADDR[:PORT]  resolver the DNS proxy forwards to (repeatable;\n"
		"                     default: the nameservers of /etc/resolv.conf)\n"
		"  --dns-min-ttl SEC  learned addresses live at least this long (default 5)\n"
		"  --dns-max-learned N  learned addresses per sandbox (default 4096)\n"
		"  --dns-exfil-max-label N, --dns-exfil-max-name N, --dns-exfil-max-entropy BITS,\n"
		"  --dns-exfil-max-subdomains N (per allowed domain and minute),\n"
		"  --dns-exfil-max-nxdomain N (per minute): exfiltration limits; 0 turns one off\n"
		"  --events-deny-rate N  deny events per second per sandbox the kernel reports\n"
		"                     one by one (default 100; 0: all); the rest are counted\n"
		"                     and reported as one denies_suppressed event per second\n"
		"  --events-deny-burst N  and at once (default 200)\n"
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
		"  --alerts-file PATH alerts as JSON lines (\"-\" = stdout; default\n"
		"                     <state-dir>/alerts.jsonl); also to syslog\n"
		"  --alert-interval SEC  meter sampling for volume anomalies (default 10)\n"
		"  --alert-volume-floor BYTES  no volume alert below this per interval (default 1 MiB)\n"
		"  --alert-deny-burst N  denies of a sandbox within 10 s that alert (default 100)\n"
		"  --alert-dedup SEC  one alert per key per SEC (default 300)\n"
		"  --events-keep N    events kept for `egressctl events` (default 4096)\n"
		"  --no-syslog        alerts to the file only\n"
		"  --no-harden        keep every capability and no seccomp filter (debugging)\n"
		"  --metrics-addr ADDR:PORT  Prometheus /metrics (default " EGR_METRICS_DEFAULT_ADDR ";\n"
		"                     \"off\" disables it)\n"
		"  --metrics-max-sandboxes N  per-sandbox series at most; the rest fold into\n"
		"                     sandbox=\"_other\" (default 1000)\n"
		"  --billing-interval SEC  billing export interval (default 60)\n"
		"  --billing-file PATH  billing JSON lines (default <state-dir>/billing.jsonl)\n"
		"  --help             this text\n"
		"  --version          print the version\n",
		EGR_DEFAULT_SOCKET);
}

static int parse_args(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "bpffs-dir", required_argument, NULL, 'b' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ "group", required_argument, NULL, 'g' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "dns-upstream", required_argument, NULL, 'u' },
		{ "dns-min-ttl", required_argument, NULL, 't' },
		{ "dns-max-learned", required_argument, NULL, 'm' },
		{ "audit-log", required_argument, NULL, OPT_AUDIT_LOG },
		{ "audit-key", required_argument, NULL, OPT_AUDIT_KEY },
		{ "audit-rotate-bytes", required_argument, NULL, OPT_AUDIT_ROTATE },
		{ "alerts-file", required_argument, NULL, OPT_ALERTS_FILE },
		{ "alert-interval", required_argument, NULL, OPT_ALERT_INTERVAL },
		{ "alert-volume-floor", required_argument, NULL, OPT_ALERT_FLOOR },
		{ "alert-deny-burst", required_argument, NULL, OPT_ALERT_DENY_BURST },
		{ "alert-dedup", required_argument, NULL, OPT_ALERT_DEDUP },
		{ "events-keep", required_argument, NULL, OPT_EVENTS_KEEP },
		{ "no-syslog", no_argument, NULL, OPT_NO_SYSLOG },
		{ "no-harden", no_argument, NULL, OPT_NO_HARDEN },
		{ "dns-exfil-max-label", required_argument, NULL, OPT_EXFIL_LABEL },
		{ "dns-exfil-max-name", required_argument, NULL, OPT_EXFIL_NAME },
		{ "dns-exfil-max-entropy", required_argument, NULL, OPT_EXFIL_ENTROPY },
		{ "dns-exfil-max-subdomains", required_argument, NULL, OPT_EXFIL_SUBDOMAINS },
		{ "dns-exfil-max-nxdomain", required_argument, NULL, OPT_EXFIL_NXDOMAIN },
		{ "metrics-addr", required_argument, NULL, OPT_METRICS_ADDR },
		{ "metrics-max-sandboxes", required_argument, NULL, OPT_METRICS_MAX },
		{ "billing-interval", required_argument, NULL, OPT_BILLING_INTERVAL },
		{ "billing-file", required_argument, NULL, OPT_BILLING_FILE },
		{ "events-deny-rate", required_argument, NULL, OPT_EV_DENY_RATE },
		{ "events-deny-burst", required_argument, NULL, OPT_EV_DENY_BURST },
		{ "dns-rate", required_argument, NULL, OPT_DNS_RATE },
		{ "dns-burst", required_argument, NULL, OPT_DNS_BURST },
		{ "dns-max-inflight", required_argument, NULL, OPT_DNS_INFLIGHT },
		{ "dns-max-inflight-per-sandbox", required_argument, NULL, OPT_DNS_INFLIGHT_SB },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	enum egr_log_level lvl;
	struct group *gr;
	int c;

	o->socket = EGR_DEFAULT_SOCKET;
	o->bpffs_dir = "/sys/fs/bpf/egressd";
	o->state_dir = "/var/lib/egressd";
	o->group = (gid_t)-1;
	o->metrics_addr = EGR_METRICS_DEFAULT_ADDR;
	o->metrics_max_sandboxes = EGR_METRICS_DEFAULT_MAX_SANDBOXES;
	o->billing_interval_s = EGR_BILLING_DEFAULT_INTERVAL_S;
	o->dns.min_ttl_s = 5;
	egr_exfil_limits_default(&o->dns.exfil);
	o->dns_max_learned = 4096;
	o->audit_rotate_bytes = 64ull << 20;
	o->events_keep = EGR_EVENTS_KEEP_DEFAULT;
	egr_alerting_opts_default(&o->alerts);
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (c >= OPT_AUDIT_ROTATE && c <= OPT_EVENTS_KEEP && c != OPT_ALERTS_FILE) {
			char *end;
			unsigned long long v = strtoull(optarg, &end, 10);

			if (*end || end == optarg || optarg[0] == '-' ||
			    (c == OPT_ALERT_INTERVAL && (v == 0 || v > 86400))) {
				fprintf(stderr, "egressd: bad number for an --audit-/--alert-/--events- "
						"option: %s\n", optarg);
				return 2;
			}
			if (c == OPT_AUDIT_ROTATE)
				o->audit_rotate_bytes = v;
			else if (c == OPT_ALERT_INTERVAL)
				o->alerts.interval_s = (unsigned)v;
			else if (c == OPT_ALERT_FLOOR)
				o->alerts.cfg.floor_bytes = v;
			else if (c == OPT_ALERT_DENY_BURST)
				o->alerts.cfg.deny_burst = (unsigned)v;
			else if (c == OPT_ALERT_DEDUP)
				o->alerts.cfg.dedup_window_ns = (v ? v : 1) * 1000000000ull;
			else
				o->events_keep = (size_t)v;
			continue;
		}
		if (c == OPT_EV_DENY_RATE || c == OPT_EV_DENY_BURST) {
			char *end;
			unsigned long long v = strtoull(optarg, &end, 10);

			if (*end || end == optarg || optarg[0] == '-' || v > 1000000 ||
			    (c == OPT_EV_DENY_BURST && v == 0)) {
				fprintf(stderr, "egressd: --%s: expected a number from %d to 1000000, "
						"got %s\n", c == OPT_EV_DENY_RATE ? "events-deny-rate"
										: "events-deny-burst",
					c == OPT_EV_DENY_RATE ? 0 : 1, optarg);
				return 2;
			}
			if (c == OPT_EV_DENY_RATE)
				egr_bpf_deny_rate = v;
			else
				egr_bpf_deny_burst = v;
			continue;
		}
		if (c >= OPT_DNS_RATE && c <= OPT_DNS_INFLIGHT_SB) {
			char *end;
			unsigned long long v = strtoull(optarg, &end, 10);

			if (*end || end == optarg || optarg[0] == '-' || v == 0 ||
			    v > (c == OPT_DNS_INFLIGHT || c == OPT_DNS_INFLIGHT_SB ? 16384 : 1000000)) {
				fprintf(stderr, "egressd: --%s: expected a number from 1 to %u, got %s\n",
					c == OPT_DNS_RATE ? "dns-rate" : c == OPT_DNS_BURST ? "dns-burst"
					: c == OPT_DNS_INFLIGHT ? "dns-max-inflight"
								: "dns-max-inflight-per-sandbox",
					c == OPT_DNS_INFLIGHT || c == OPT_DNS_INFLIGHT_SB ? 16384 : 1000000,
					optarg);
				return 2;
			}
			if (c == OPT_DNS_RATE)
				o->dns.rate_qps = (uint32_t)v;
			else if (c == OPT_DNS_BURST)
				o->dns.burst = (uint32_t)v;
			else if (c == OPT_DNS_INFLIGHT)
				o->dns.max_inflight = (uint32_t)v;
			else
				o->dns.max_inflight_per_sb = (uint32_t)v;
			continue;
		}
		switch (c) {
		case OPT_AUDIT_LOG:
			o->audit_log = optarg;
			break;
		case OPT_AUDIT_KEY:
			o->audit_key = optarg;
			break;
		case OPT_ALERTS_FILE:
			o->alerts.file = optarg;
			break;
		case OPT_NO_SYSLOG:
			o->alerts.syslog = false;
			break;
		case OPT_NO_HARDEN:
			o->no_harden = true;
			break;
		case OPT_EXFIL_LABEL:
		case OPT_EXFIL_NAME:
		case OPT_EXFIL_ENTROPY:
		case OPT_EXFIL_SUBDOMAINS:
		case OPT_EXFIL_NXDOMAIN: {
			/* 0 turns a check off (docs/dns.md). */
			char *end;
			double v = strtod(optarg, &end);

			if (*end || end == optarg || v < 0 || v > 100000) {
				fprintf(stderr, "egressd: --dns-exfil-*: expected a number >= 0, got "
						"%s\n", optarg);
				return 2;
			}
			if (c == OPT_EXFIL_LABEL)
				o->dns.exfil.max_label_len = (uint32_t)v;
			else if (c == OPT_EXFIL_NAME)
				o->dns.exfil.max_name_len = (uint32_t)v;
			else if (c == OPT_EXFIL_ENTROPY)
				o->dns.exfil.max_entropy = v;
			else if (c == OPT_EXFIL_SUBDOMAINS)
				o->dns.exfil.max_subdomains = (uint32_t)v;
			else
				o->dns.exfil.max_nxdomain = (uint32_t)v;
			break;
		}
		case 'u':
			if (o->dns.nupstreams == EGR_DNSPROXY_MAX_UPSTREAMS ||
			    egr_dnsproxy_parse_addr(optarg,
						    &o->dns.upstreams[o->dns.nupstreams]) < 0) {
				fprintf(stderr, "egressd: --dns-upstream: bad or too many: %s\n",
					optarg);
				return 2;
			}
			o->dns.nupstreams++;
			break;
		case 't':
		case 'm': {
			char *end;
			unsigned long v = strtoul(optarg, &end, 10);

			if (*end || end == optarg || v > 86400 * 365) {
				fprintf(stderr, "egressd: --%s: expected a number, got %s\n",
					c == 't' ? "dns-min-ttl" : "dns-max-learned", optarg);
				return 2;
			}
			if (c == 't')
				o->dns.min_ttl_s = (uint32_t)v;
			else
				o->dns_max_learned = (uint32_t)v;
			break;
		}
		case 's':
			o->socket = optarg;
			break;
		case 'b':
			o->bpffs_dir = optarg;
			break;
		case 'd':
			o->state_dir = optarg;
			break;
		case 'g':
			gr = getgrnam(optarg);
			if (!gr) {
				fprintf(stderr, "egressd: --group: no group named %s\n", optarg);
				return 2;
			}
			o->group = gr->gr_gid;
			break;
		case 'l':
			if (egr_log_parse_level(optarg, &lvl)) {
				fprintf(stderr, "egressd: --log-level: expected error, warn, info or "
						"debug, got %s\n", optarg);
				return 2;
			}
			egr_log_set_level(lvl);
			break;
		case OPT_METRICS_ADDR:
			o->metrics_addr = optarg;
			break;
		case OPT_BILLING_FILE:
			o->billing_file = optarg;
			break;
		case OPT_METRICS_MAX:
		case OPT_BILLING_INTERVAL: {
			char *end;
			unsigned long v = strtoul(optarg, &end, 10);

			if (*end || end == optarg || optarg[0] == '-' || v > 1000000 ||
			    (c == OPT_BILLING_INTERVAL && (v == 0 || v > 86400))) {
				fprintf(stderr, "egressd: --%s: bad number %s\n",
					c == OPT_METRICS_MAX ? "metrics-max-sandboxes"
							     : "billing-interval", optarg);
				return 2;
			}
			if (c == OPT_METRICS_MAX)
				o->metrics_max_sandboxes = (unsigned)v;
			else
				o->billing_interval_s = (unsigned)v;
			break;
		}
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("egressd %s\n", EGRESSD_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "egressd: unexpected argument %s\n", argv[optind]);
		return 2;
	}
	return -1;
}

struct dns_ctx {
	struct egr_registry *reg;
	struct egr_learned *learned;
	struct egr_events *events; /* NULL until the event stream is up */
	struct egr_metrics *metrics;
};

/* The proxy learned addresses: into the sandbox's current policy. */
static int on_dns_learn(void *ctx, uint32_t sandbox_id, const struct egr_dns_learned *a, size_t n)
{
	struct dns_ctx *d = ctx;
	struct egr_sb *sb = egr_reg_find(d->reg, NULL, sandbox_id);

	if (!sb)
		return -ENOENT;
	return egr_learned_add(d->learned, sandbox_id, sb->policy_id, a, n);
}

static void on_dns_event(void *ctx, const struct egr_dns_event *ev)
{
	struct dns_ctx *d = ctx;

	/* Every DNS verdict joins the socket verdicts in one stream (exfil
	 * verdicts become dns_exfiltration_suspected alerts there). */
	struct egr_sb *sb = egr_reg_find(d->reg, NULL, ev->sandbox_id);

	if (d->events)
		egr_events_dns(d->events, ev);
	/* Counts for /metrics, stats and billing; refusals are counted with
	 * everything the proxy did not forward. */
	if (d->metrics && sb) {
		egr_metrics_count_dns(d->metrics, ev->sandbox_id, sb->tenant_id,
				      ev->verdict == EGR_DNS_V_ALLOWED);
		if (ev->latency_ns)
			egr_metrics_observe_dns_latency(d->metrics, (double)ev->latency_ns / 1e9);
	}
	log_debug("dns: sandbox %u tenant %s %s type %u: %s (%s), %zu address(es)", ev->sandbox_id,
		 ev->tenant ? ev->tenant : "?", ev->qname ? ev->qname : "?", ev->qtype,
		 egr_dns_verdict_name(ev->verdict), ev->reason, ev->naddrs);
}

static uint64_t boot_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Expired learned addresses are already denied by the kernel; this frees
 * their entries. */
static void on_reclaim(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct dns_ctx *d = ctx;
	unsigned int n = egr_learned_reclaim(d->learned, boot_ns());

	if (n)
		log_debug("dns: reclaimed %u expired learned address(es)", n);
}

/* Every sandbox holds DNS listeners and, under load, TCP upstream sockets:
 * the usual 1024 soft limit would let one busy sandbox starve the rest. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (rl.rlim_max < 65536) {
		struct rlimit want = { 65536, 65536 };

		if (setrlimit(RLIMIT_NOFILE, &want) == 0)
			return;
	}
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		log_warn("raise the file descriptor limit: %m");
}

/* /metrics: which enforcement layers this host gives a sandbox. */
static void layers_source(void *ctx, struct egr_mbuf *mb)
{
	const struct egr_features *f = ctx;
	const struct {
		const char *name;
		bool on;
	} layers[] = {
		{ "sock_addr", f->cgroup_sock_addr }, { "sock_create", f->cgroup_sock },
		{ "setsockopt", f->setsockopt },      { "skb_backstop", f->skb },
		{ "seccomp", f->seccomp },            { "lsm_cgroup", f->lsm_cgroup },
	};

	egr_mbuf_family(mb, "egressd_layer_active", "gauge",
			"Enforcement layers this host supports (1) or lacks (0); docs/security.md.");
	for (size_t i = 0; i < sizeof(layers) / sizeof(layers[0]); i++)
		egr_mbuf_printf(mb, "egressd_layer_active{layer=\"%s\"} %d\n", layers[i].name,
				layers[i].on ? 1 : 0);
}

/* Say at start what confines sandboxes on this host, and write the seccomp
 * filter egressctl run applies as an OCI profile for container runtimes. */
static void announce_layers(const struct egr_features *f, const char *state_dir)
{
	struct egr_confine conf = { 0 };
	char path[4096];
	json_t *prof = NULL;
	int err;

	log_info("layers: sock_addr=%s sock_create=%s setsockopt=%s skb_backstop=%s seccomp=%s "
		 "lsm_cgroup=%s%s",
		 f->cgroup_sock_addr ? "yes" : "no", f->cgroup_sock ? "yes" : "no",
		 f->setsockopt ? "yes" : "no", f->skb ? "yes" : "no", f->seccomp ? "yes" : "no",
		 f->lsm_cgroup ? "yes" : "no",
		 f->lsm_cgroup ? "" : " (no BPF trampolines: AF_PACKET, AF_XDP and AF_VSOCK are "
				      "closed by seccomp only; trust \"strict\" policies are refused)");
	snprintf(path, sizeof(path), "%s/oci-seccomp.json", state_dir);
	err = egr_confine_oci_profile(&conf, &prof);
	if (!err)
		err = egr_replace_file_json(path, prof, JSON_INDENT(2), 0644);
	json_decref(prof);
	if (err)
		log_warn("write %s: %s", path, strerror(-err));
	else
		log_info("OCI seccomp profile for container runtimes: %s", path);
}

int main(int argc, char **argv)
{
	struct egr_features feat = { 0 };
	struct egr_registry reg;
	struct egr_bpf bpf;
	struct options o;
	struct egr_server srv = { 0 };
	struct egr_ctl *ctl = NULL;
	struct egr_metrics *metrics = NULL;
	struct egr_billing *billing = NULL;
	char billing_path[512], billing_state[512];
	struct egr_loop *loop = NULL;
	struct egr_auditlog *audit = NULL;
	struct egr_alerting *alerting = NULL;
	struct egr_events *events = NULL;
	struct egr_reg_hooks hooks;
	char audit_path[512], audit_state[512], alerts_path[512];
	struct egr_dnsproxy *dns = NULL;
	struct egr_learned *learned = NULL;
	struct dns_ctx dctx = { .reg = &reg };
	int lfd = -1, rc, err;

	rc = parse_args(argc, argv, &o);
	if (rc >= 0)
		return rc;
	signal(SIGPIPE, SIG_IGN);
	umask(077);
	raise_fd_limit();

	err = egr_bpf_open(&bpf, o.bpffs_dir, &feat);
	if (err) {
		log_error("cannot load the BPF side: %s", strerror(-err));
		return 1;
	}
	err = egr_loop_new(&loop);
	if (err) {
		log_error("event loop: %s", strerror(-err));
		egr_bpf_close(&bpf);
		return 1;
	}
	/* The DNS proxy exists before adoption, which reopens the listeners of
	 * every adopted sandbox. Without it sandboxes get no DNS (closed). */
	memset(&reg, 0, sizeof(reg));
	err = egr_learned_new(&bpf, o.dns_max_learned, &learned);
	if (!err && !o.dns.nupstreams)
		err = egr_dnsproxy_resolv_conf("/etc/resolv.conf", &o.dns);
	if (!err) {
		dctx.learned = learned;
		o.dns.learn = on_dns_learn;
		o.dns.event = on_dns_event;
		o.dns.ctx = &dctx;
		/* The proxy serves only sockets the kernel saw redirected from
		 * the listener's own sandbox (docs/dns.md "Who asks"). */
		o.dns.verify_clients = true;
		o.dns.clients_fd = bpf.fd_dns_clients;
		o.dns.clients_n_fd = bpf.fd_dns_clients_n;
		err = egr_dnsproxy_new(loop, &o.dns, &dns);
	}
	if (!err)
		err = egr_loop_every(loop, 1000, on_reclaim, &dctx);
	if (err)
		log_error("DNS proxy: %s; sandboxes will have no DNS", strerror(-err));
	/* The audit log before adoption: its hooks see every sandbox. */
	if (mkdir(o.state_dir, 0700) < 0 && errno != EEXIST)
		log_warn("state dir %s: %s", o.state_dir, strerror(errno));
	snprintf(audit_path, sizeof(audit_path), "%s/audit.log", o.state_dir);
	snprintf(audit_state, sizeof(audit_state), "%s/audit.state", o.state_dir);
	err = egr_auditlog_open(&audit, &(struct egr_auditlog_opts){
		.path = o.audit_log ? o.audit_log : audit_path, .state = audit_state,
		.key_file = o.audit_key, .rotate_bytes = (size_t)o.audit_rotate_bytes }, &bpf);
	if (err) {
		log_error("audit log %s: %s", o.audit_log ? o.audit_log : audit_path,
			  err == -EBUSY ? "another egressd writes it" : strerror(-err));
		rc = 1;
		goto out;
	}
	egr_auditlog_hooks(audit, &hooks, NULL);
	err = egr_reg_init(&reg, &bpf, o.state_dir, &hooks, dns, learned);
	reg.host_lsm_cgroup = feat.lsm_cgroup;
	if (err) {
		log_error("state dir %s: %s", o.state_dir, strerror(-err));
		rc = 1;
		goto out;
	}
	snprintf(alerts_path, sizeof(alerts_path), "%s/alerts.jsonl", o.state_dir);
	if (!o.alerts.file)
		o.alerts.file = alerts_path;
	err = egr_alerting_new(&alerting, &o.alerts, &reg, loop);
	if (err) {
		log_error("alerts %s: %s", o.alerts.file, strerror(-err));
		rc = 1;
		goto out;
	}
	err = egr_events_new(&events, &bpf, &reg, loop, o.events_keep, o.state_dir);
	if (!err)
		dctx.events = events;
	if (err) {
		log_error("event stream (ring buffer): %s", strerror(-err));
		rc = 1;
		goto out;
	}
	egr_events_set_sinks(events, alerting, audit);
	egr_alerting_set_audit(alerting, audit);
	egr_auditlog_set_sinks(audit, events, alerting);
	err = egr_server_listen(o.socket, o.group, &lfd);
	if (err) {
		log_error("control socket %s: %s", o.socket, strerror(-err));
		rc = 1;
		goto out;
	}
	srv.reg = &reg;
	srv.features = &feat;
	srv.group = o.group;
	srv.events = events;
	srv.alerting = alerting;
	srv.audit = audit;
	/* Metering export: /metrics and the billing lines (docs/metering.md). */
	err = egr_metrics_new(&metrics, &reg, o.metrics_max_sandboxes);
	if (!err) {
		dctx.metrics = metrics;
		err = egr_metrics_add_source(metrics, layers_source, &feat);
		if (!err)
			err = egr_metrics_add_source(metrics, egr_dnsfair_metrics, &reg);
		if (!err)
			err = egr_metrics_add_source(metrics, egr_events_metrics, events);
	}
	if (err) {
		log_error("metrics: %s", strerror(-err));
		rc = 1;
		goto out;
	}
	srv.metrics = metrics;
	err = egr_metrics_listen(metrics, o.metrics_addr, loop);
	if (err)
		log_error("metrics: cannot serve on %s: %s; /metrics is unavailable", o.metrics_addr,
			  strerror(-err));
	snprintf(billing_path, sizeof(billing_path), "%s/billing.jsonl", o.state_dir);
	snprintf(billing_state, sizeof(billing_state), "%s/billing.state", o.state_dir);
	err = egr_billing_new(&billing, &reg, metrics, o.billing_file ? o.billing_file : billing_path,
			      billing_state);
	if (!err)
		err = egr_billing_start(billing, loop, o.billing_interval_s);
	if (err) {
		log_error("billing export %s: %s", o.billing_file ? o.billing_file : billing_path,
			  strerror(-err));
		rc = 1;
		goto out;
	}
	if (egr_cgroup2_mount(srv.cgroup_root, sizeof(srv.cgroup_root)) < 0)
		srv.cgroup_root[0] = '\0';
	/* Non-blocking connections, judged at accept (ctlconn.c). */
	err = egr_ctl_start(loop, lfd, &srv, &ctl);
	if (err) {
		log_error("event loop: %s", strerror(-err));
		rc = 1;
		goto out_sock;
	}
	announce_layers(&feat, o.state_dir);
	/* Everything is loaded, mounted and bound: give up the rest. */
	if (!o.no_harden && egr_harden(&srv.hardening)) {
		rc = 1;
		goto out_sock;
	}
	log_info("egressd %s ready: %zu sandbox(es), control socket %s", EGRESSD_VERSION, reg.n,
		 o.socket);
	err = egr_loop_run(loop);
	rc = err ? 1 : 0;
	if (err)
		log_error("event loop: %s", strerror(-err));
out_sock:
	egr_ctl_free(ctl);
	close(lfd);
	unlink(o.socket);
out:
	/* The proxy outlives the stream and the metrics: unhook them first. */
	dctx.events = NULL;
	dctx.metrics = NULL;
	egr_billing_free(billing);
	egr_metrics_free(metrics);
	egr_events_free(events);
	egr_reg_free(&reg);
	egr_alerting_free(alerting);
	egr_auditlog_close(audit);
	egr_dnsproxy_free(dns);
	egr_learned_free(learned);
	egr_loop_free(loop);
	egr_bpf_close(&bpf);
	return rc;
}
