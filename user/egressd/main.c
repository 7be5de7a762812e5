// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * egressd: loads the programs once, adopts what is pinned, serves the
 * control socket. Stopping it (or killing it) leaves every sandbox enforced.
 */
#include <arpa/inet.h>
#include <errno.h>
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

#include "clock.h"
#include "obs/alerting.h"
#include "obs/auditlog.h"
#include "kernel/bpfstate.h"
#include "cgroup.h"
#include "confine.h"
#include "ctlconn.h"
#include "fileio.h"
#include "dns/dnsfair.h"
#include "dns/dnsproxy.h"
#include "inspect.h"
#include "obs/events.h"
#include "approvals.h"
#include "kernel/escape.h"
#include "kernel/listen.h"
#include "guard.h"
#include "lifetime.h"
#include "harden.h"
#include "obs/health.h"
#include "hostns.h"
#include "dns/learned.h"
#include "log.h"
#include "loop.h"
#include "obs/metrics.h"
#include "notify.h"
#include "hold/hold_proto.h"
#include "hold/handover.h"
#include "hold/lhold.h"
#include "options.h"
#include "ptree.h"
#include "obs/billing.h"
#include "audit_read.h"
#include "breaker.h"
#include "proto.h"
#include "sandbox.h"
#include "server.h"

struct dns_ctx {
	struct egr_registry *reg;
	struct egr_learned *learned;
	struct egr_bus *bus; /* NULL once the subscribers are gone */
	struct egr_approvals *approvals;
};

/* Approvals (docs/dns.md "Approvals"): is the name approved for it? */
static bool on_dns_grant(void *ctx, uint32_t sandbox_id, const char *qname,
			 struct egr_dns_ports *ports)
{
	struct dns_ctx *d = ctx;

	return egr_approvals_grant(d->approvals, sandbox_id, qname, ports);
}

static void on_dns_ask(void *ctx, const struct egr_dns_ask *ask)
{
	struct dns_ctx *d = ctx;

	egr_approvals_on_ask(d->approvals, ask);
}

/* The proxy learned addresses: into the sandbox's current policy. */
static int on_dns_learn(void *ctx, uint32_t sandbox_id, const struct egr_dns_learned *a, size_t n)
{
	struct dns_ctx *d = ctx;
	struct egr_sb *sb = egr_reg_find(d->reg, NULL, sandbox_id);

	if (!sb)
		return -ENOENT;
	return egr_learned_add(d->learned, sandbox_id, sb->policy_id, a, n);
}

/* Every DNS verdict onto the bus: the stream shows it (exfil verdicts
 * become dns_exfiltration_suspected alerts), the audit log keeps it for the
 * execution record, metrics count it. */
static void on_dns_event(void *ctx, const struct egr_dns_event *ev)
{
	struct dns_ctx *d = ctx;
	struct egr_rec r = { .kind = EGR_REC_DNS, .sandbox = ev->sandbox_id, .dns = ev };

	egr_bus_publish(d->bus, &r);
	log_debug("dns: sandbox %u tenant %s %s type %u: %s (%s), %zu address(es)", ev->sandbox_id,
		 ev->tenant ? ev->tenant : "?", ev->qname ? ev->qname : "?", ev->qtype,
		 egr_dns_verdict_name(ev->verdict), ev->reason, ev->naddrs);
}

/* Inspecting proxy verdicts join the event stream (docs/events.md). */
static void on_inspect_event(void *ctx, const struct egr_inspect_event *ev)
{
	struct dns_ctx *d = ctx;
	struct egr_rec r = { .kind = EGR_REC_INSPECT, .sandbox = ev->sandbox_id, .inspect = ev };

	if (ev->closed)
		return; /* ends of connections feed the audit record only */
	egr_bus_publish(d->bus, &r);
}

/* The sweep runs every second: a name due within KEEP_HORIZON is kept
 * KEEP_EXTEND longer while its sandbox is connected to its address, so it
 * is looked at again only every ~10 s (docs/dns.md "Learned addresses and
 * client caches"). */
#define KEEP_HORIZON_NS (3ULL * 1000000000ULL)
#define KEEP_EXTEND_NS  (13ULL * 1000000000ULL)

/* Expired learned addresses are already denied by the kernel; this frees
 * their entries, after keeping those still in use. */
static void on_reclaim(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct dns_ctx *d = ctx;
	unsigned int n;

	egr_reg_keep_connected(d->reg, d->learned, KEEP_HORIZON_NS, KEEP_EXTEND_NS);
	n = egr_learned_reclaim(d->learned, egr_boot_ns());

	if (n)
		log_debug("dns: reclaimed %u expired learned address(es)", n);
}

/* Every sandbox holds 13 link descriptors and, under load, DNS upstream
 * sockets: the usual 1024 soft limit would stop at ~70 sandboxes. */
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
		{ "escape_guard", f->escape_guard }, { "escape_root", f->escape_root },
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
		 "lsm_cgroup=%s escape_guard=%s escape_root=%s%s",
		 f->cgroup_sock_addr ? "yes" : "no", f->cgroup_sock ? "yes" : "no",
		 f->setsockopt ? "yes" : "no", f->skb ? "yes" : "no", f->seccomp ? "yes" : "no",
		 f->lsm_cgroup ? "yes" : "no", f->escape_guard ? "yes" : "no",
		 f->escape_root ? "yes" : "no",
		 f->lsm_cgroup ? "" : " (no BPF trampolines: AF_PACKET, AF_XDP and AF_VSOCK are "
				      "closed by seccomp only; trust \"strict\" policies are refused)");
	if (!f->escape_guard)
		log_warn("layers: no escape guard: a sandboxed process that can write a "
			 "cgroup.procs outside its sandbox leaves it unnoticed (docs/security.md)");
	else if (!f->escape_root)
		log_warn("layers: no escape guard programs at the cgroup2 root: a process moved out "
			 "of its sandbox has the network until egressd kills it, and for as long as "
			 "egressd is stopped or down (docs/security.md)");
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

/* SIGHUP: what the running modules can take without touching enforcement. */
struct reload_ctx {
	int argc;
	char **argv;
	struct egr_options *cur;
	struct egr_alerting *alerting;
	struct egr_dnsproxy *dns;
	struct egr_metrics *metrics;
	struct egr_registry *reg;
};

static void on_sighup(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct reload_ctx *r = ctx;
	struct egr_options next;
	char reload[1024], restart[1024];
	int err = 0;

	egr_notify("RELOADING=1\nSTATUS=reloading the configuration");
	if (egr_options_load(r->argc, r->argv, &next, true) >= 0) {
		log_error("reload: %s; nothing changed", next.err);
		goto out;
	}
	egr_options_diff(r->cur, &next, reload, sizeof(reload), restart, sizeof(restart));
	/* The ones that can fail first, so that a failure changes nothing. */
	if (r->dns)
		err = egr_dnsproxy_set_limits(r->dns, next.dns.min_ttl_s, next.dns.ttl_grace_s,
					      &next.dns.exfil);
	if (!err && r->alerting)
		err = egr_alerting_set_cfg(r->alerting, &next.alerts.cfg);
	if (err) {
		log_error("reload: %s; nothing changed", strerror(-err));
		goto out;
	}
	if (r->metrics)
		egr_metrics_set_max_sandboxes(r->metrics, next.metrics_max_sandboxes);
	egr_log_set_level(next.log_level);
	egr_options_take_reloadable(r->cur, &next);
	log_info("reload: %s%s", reload[0] ? "applied " : "no reloadable option changed",
		 reload);
	if (restart[0])
		log_warn("reload: changed, but only a restart applies them (still running with the "
			 "old values): %s", restart);
out:
	egr_options_free(&next);
	egr_notify("READY=1\nSTATUS=running: %zu sandbox(es)", egr_reg_count(r->reg));
}

/* The listener holder's socket: --listener-holder, else <socket>.hold.
 * -ENAMETOOLONG (logged) when that is too long a path. */
static int holder_path(const struct egr_options *o, char *buf, size_t len)
{
	if ((size_t)snprintf(buf, len, "%s%s", o->holder ? o->holder : o->socket,
			     o->holder ? "" : ".hold") < len)
		return 0;
	log_error("listener holder: %s%s is too long a path; listeners will not outlive this "
		  "egressd", o->holder ? o->holder : o->socket, o->holder ? "" : ".hold");
	return -ENAMETOOLONG;
}

/* --hold-listeners-of PID (hold/handover.h): the unit's ExecStop=. */
static int hand_over_listeners(const struct egr_options *o)
{
	struct egr_handover h = { .pid = o->hold_listeners_of, .linger_s = o->holder_linger_s,
				  .user = o->user, .uid = o->user_uid, .gid = o->user_gid };
	char hpath[128];

	if (o->holder && !strcmp(o->holder, "off")) {
		log_info("handover: --listener-holder off; the listeners close with egressd %d",
			 (int)o->hold_listeners_of);
		return 0;
	}
	if (holder_path(o, hpath, sizeof(hpath)))
		return 1;
	h.holder = hpath;
	return egr_handover_run(&h) ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct egr_features feat = { 0 };
	struct egr_escape escape = { 0 };
	struct egr_registry *reg = NULL;
	struct egr_bpf *bpf = NULL;
	struct egr_options o;
	struct egr_health health = { 0 };
	struct reload_ctx rctx = { .argc = argc, .argv = argv };
	sigset_t hup;
	struct egr_server srv = { 0 };
	struct egr_ctl *ctl = NULL;
	struct egr_metrics *metrics = NULL;
	struct egr_billing *billing = NULL;
	struct egr_breaker *breaker = NULL;
	char billing_path[512], billing_state[512];
	struct egr_loop *loop = NULL;
	struct egr_auditlog *audit = NULL;
	struct egr_alerting *alerting = NULL;
	struct egr_events *events = NULL;
	struct egr_reg_hooks hooks;
	struct egr_bus bus = { 0 };
	char audit_path[512], audit_state[512], alerts_path[512];
	struct egr_dnsproxy *dns = NULL;
	struct egr_learned *learned = NULL;
	struct egr_approvals *approvals = NULL;
	struct egr_ptree *ptree = NULL;
	struct dns_ctx dctx = { .bus = &bus };
	struct egr_inspect *inspect = NULL;
	struct egr_lhold *hold = NULL;
	struct egr_guard *guard = NULL;
	struct egr_lifetime *lifetime = NULL;
	char why[512];
	int lfd = -1, rc, err;

	/* The listener holder egressd starts (hold/lhold.c): a process of its
	 * own from the same binary, nothing of egressd's state in it. */
	if (argc == 4 && !strcmp(argv[1], "--run-listener-holder"))
		return egr_holder_main(atoi(argv[2]), (unsigned)strtoul(argv[3], NULL, 10));
	rc = egr_options_load(argc, argv, &o, false);
	if (rc >= 0 || o.check_config) {
		/* Under systemd (ExecStartPre= --check-config too) the journal
		 * files a bad configuration as an error. */
		egr_log_init_priority(false);
		if (rc > 0 && o.err[0])
			fprintf(stderr, "%segressd: %s\n", egr_log_priority_prefix() ? "<3>" : "",
				o.err);
		else if (rc < 0)
			printf("egressd: configuration OK%s%s\n", o.config ? ": " : "",
			       o.config ? o.config : "");
		egr_options_free(&o);
		return rc > 0 ? rc : 0;
	}
	/* A reload request during the start must not kill us (SIGHUP's default
	 * action); the loop's signalfd picks it up once it runs. */
	sigemptyset(&hup);
	sigaddset(&hup, SIGHUP);
	sigprocmask(SIG_BLOCK, &hup, NULL);
	egr_log_set_level(o.log_level);
	egr_log_init_priority(o.log_priority_prefix);
	if (o.hold_listeners) {
		rc = hand_over_listeners(&o);
		egr_options_free(&o);
		return rc;
	}
	if (egr_notify_init()) {
		egr_options_free(&o);
		return 1;
	}
	if (o.user && o.no_harden) {
		log_error("--user needs the hardening it is part of; drop --no-harden");
		egr_options_free(&o);
		return 1;
	}
	egr_notify("STATUS=loading the BPF programs");
	signal(SIGPIPE, SIG_IGN);
	umask(077);
	raise_fd_limit();

	/* Before anything reads a cgroup path: in a private cgroup namespace
	 * (a container's) peers' paths would be relative to its root, and the
	 * "peer is sandboxed" check would miss sandboxed peers. */
	rc = egr_cgroup_join_host_ns(why, sizeof(why));
	if (rc < 0) {
		log_error("egressd must run in the host's cgroup namespace and cannot: %s; refusing "
			  "to start", why);
		return 1;
	}
	srv.cgroup_ns = rc ? "joined host" : "host";
	if (rc)
		log_info("joined the host's cgroup namespace (the initial one)");

	err = egr_loop_new(&loop);
	if (err) {
		log_error("event loop: %s", strerror(-err));
		egr_options_free(&o);
		return 1;
	}
	/* The predecessor's listeners, with what queued on them while no
	 * egressd ran: adoption below takes them over (docs/operations.md
	 * "Restarts"), and an upgrade marks them as egressd's before it
	 * switches the programs. Without a holder they are opened anew. */
	if (!o.holder || strcmp(o.holder, "off")) {
		char hpath[128];

		egr_notify("STATUS=taking over the listeners of the previous egressd");
		if (!holder_path(&o, hpath, sizeof(hpath)))
			egr_lhold_open(loop, hpath, "/proc/self/exe", o.holder_linger_s, &hold);
	}

	const struct egr_bpf_knobs knobs = { .deny_events_per_s = o.events_deny_rate,
					     .deny_events_burst = o.events_deny_burst,
					     .allow_events_per_s = o.events_allow_rate };
	int *prior_fds = NULL;
	size_t nprior = egr_lhold_taken_fds(hold, &prior_fds);
	const struct egr_bpf_listeners prior = { .fd = prior_fds, .n = nprior };

	err = egr_bpf_open(&bpf, o.bpffs_dir, &knobs, &prior, &feat);
	free(prior_fds);
	if (err) {
		log_error("cannot load the BPF side: %s", strerror(-err));
		egr_notify("STATUS=failed: cannot load the BPF side: %s", strerror(-err));
		egr_lhold_free(hold);
		egr_loop_free(loop);
		egr_options_free(&o);
		return 1;
	}
	/* Before any sandbox is adopted: adoption gives their processes homes.
	 * The root programs refuse what a marked process does; without the
	 * tracepoints nothing is marked, so they come only with them. */
	feat.escape_guard = egr_escape_start(&escape, bpf) == 0;
	feat.escape_root = feat.escape_guard && egr_escape_root_start(&escape, bpf) == 0;
	if (o.require_escape_guard && !feat.escape_root) {
		log_error("--require-escape-guard: the escape guard is not in force on this host "
			  "(%s; see the errors above); refusing to start",
			  feat.escape_guard ? "its cgroup2 root programs did not load or attach"
					    : "its tracepoints did not load or attach");
		egr_notify("STATUS=failed: the escape guard is required and not in force");
		egr_escape_close(&escape);
		egr_bpf_close(bpf);
		egr_lhold_free(hold);
		egr_loop_free(loop);
		egr_options_free(&o);
		return 1;
	}
	/* Whatever the guard marked while no egressd ran has been refused every
	 * socket since; it dies now (its events may be lost or long gone). */
	if (feat.escape_guard && (err = egr_escape_kill_marked(bpf)) > 0)
		log_warn("escape guard: killed %d process(es) marked escaped while egressd was down",
			 err);
	/* The DNS proxy exists before adoption, which reopens the listeners of
	 * every adopted sandbox. Without it sandboxes get no DNS (closed). */
	if (egr_reg_new(&reg)) {
		log_error("registry: out of memory");
		rc = 1;
		goto out;
	}
	dctx.reg = reg;
	err = egr_approvals_new(reg, &approvals);
	if (err) {
		log_error("approvals: %s", strerror(-err));
		rc = 1;
		goto out;
	}
	dctx.approvals = approvals;
	err = egr_learned_new(bpf, o.dns_max_learned, &learned);
	if (!err && !o.dns.nupstreams)
		err = egr_dnsproxy_resolv_conf("/etc/resolv.conf", &o.dns);
	if (!err) {
		dctx.learned = learned;
		egr_learned_set_grant(learned, on_dns_grant, &dctx);
		o.dns.learn = on_dns_learn;
		o.dns.event = on_dns_event;
		o.dns.grant = on_dns_grant;
		o.dns.ask = on_dns_ask;
		o.dns.ctx = &dctx;
		/* The proxy serves only sockets the kernel saw redirected from
		 * the listener's own sandbox (docs/dns.md "Who asks"). */
		o.dns.verify_clients = true;
		o.dns.bpf = bpf;
		o.dns.hold = hold;
		err = egr_dnsproxy_new(loop, &o.dns, &dns);
	}
	if (!err)
		err = egr_loop_every(loop, 1000, on_reclaim, &dctx);
	if (err)
		log_error("DNS proxy: %s; sandboxes will have no DNS", strerror(-err));
	/* The inspecting proxy too: adoption reopens its listeners. Without
	 * it, sandboxes under network.inspect get no TCP (closed). */
	err = egr_inspect_new(loop, &(struct egr_inspect_config){
		.bpf = bpf, .learned = learned,
		.deny_rate = o.events_deny_rate, .deny_burst = o.events_deny_burst,
		.event = on_inspect_event, .ctx = &dctx, .hold = hold }, &inspect);
	if (err)
		log_error("inspecting proxy: %s; inspected sandboxes will have no TCP",
			  strerror(-err));
	/* Every subscriber of the observation bus before adoption, whose
	 * lifecycle records ("adopt") and tampering findings reach them all:
	 * the stream first, then the audit log, alerting and metrics. */
	egr_notify("STATUS=opening the event stream and the audit log, adopting the pinned "
		   "sandboxes");
	if (mkdir(o.state_dir, 0700) < 0 && errno != EEXIST)
		log_warn("state dir %s: %s", o.state_dir, strerror(errno));
	err = egr_events_new(&events, bpf, reg, loop, &bus, o.events_keep, o.state_dir);
	if (err) {
		log_error("event stream (ring buffer): %s", strerror(-err));
		rc = 1;
		goto out;
	}
	snprintf(audit_path, sizeof(audit_path), "%s/audit.log", o.state_dir);
	snprintf(audit_state, sizeof(audit_state), "%s/audit.state", o.state_dir);
	err = egr_auditlog_open(&audit, &(struct egr_auditlog_opts){
		.path = o.audit_log ? o.audit_log : audit_path, .state = audit_state,
		.key_file = o.audit_key, .rotate_bytes = (size_t)o.audit_rotate_bytes,
		.state_dir = o.state_dir, .anchor = o.audit_anchor,
		.anchor_every = o.audit_anchor_every }, bpf,
		&bus);
	if (err) {
		log_error("audit log %s: %s", o.audit_log ? o.audit_log : audit_path,
			  err == -EBUSY ? "another egressd writes it" : strerror(-err));
		rc = 1;
		goto out;
	}
	egr_auditlog_hooks(audit, &hooks, NULL);
	egr_approvals_set_obs(approvals, &bus, audit);
	egr_auditlog_set_names(audit, learned, inspect);
	snprintf(alerts_path, sizeof(alerts_path), "%s/alerts.jsonl", o.state_dir);
	if (!o.alerts.file)
		o.alerts.file = alerts_path;
	err = egr_alerting_new(&alerting, &o.alerts, reg, loop, &bus, events, audit);
	if (err) {
		log_error("alerts %s: %s", o.alerts.file, strerror(-err));
		rc = 1;
		goto out;
	}
	egr_auditlog_report_open(audit); /* now that alerting hears it */
	/* Metering export: /metrics and the billing lines (docs/metering.md). */
	err = egr_metrics_new(&metrics, reg, &bus, o.metrics_max_sandboxes);
	if (err) {
		log_error("metrics: %s", strerror(-err));
		rc = 1;
		goto out;
	}
	err = egr_reg_init(reg, bpf, o.state_dir, &hooks, dns, inspect, learned);
	egr_reg_set_host_lsm_cgroup(reg, feat.lsm_cgroup);
	if (err) {
		log_error("state dir %s: %s", o.state_dir, strerror(-err));
		rc = 1;
		goto out;
	}
	/* Adoption reopened (and claimed) every listener it could: the ports
	 * an earlier egressd held and this one did not take again are the
	 * sandboxes' to bind from now on (kernel/listen.h). Every adopted
	 * sandbox serves on its old sockets now; the rest of what the
	 * predecessor held belongs to nobody. */
	err = egr_bpf_listen_sweep(bpf, NULL);
	if (err)
		log_warn("listener port reservations: sweep: %s", strerror(-err));
	egr_lhold_settle(hold);
	/* Pins removed from now on are pinned again within a second. */
	err = egr_guard_start(&guard, loop, bpf, reg, audit);
	if (err) {
		log_error("pin guard: %s", strerror(-err));
		rc = 1;
		goto out;
	}
	srv.guard = guard;
	/* Cgroups removed and launchers gone are noticed within a second. */
	err = egr_lifetime_start(&lifetime, loop, reg);
	if (err) {
		log_error("sandbox lifetime watch: %s", strerror(-err));
		rc = 1;
		goto out;
	}
	srv.lifetime = lifetime;
	err = egr_server_listen(o.socket, o.group, &lfd);
	if (err) {
		log_error("control socket %s: %s", o.socket, strerror(-err));
		rc = 1;
		goto out;
	}
	srv.reg = reg;
	srv.features = &feat;
	srv.group = o.group;
	srv.events = events;
	srv.alerting = alerting;
	srv.audit = audit;
	srv.approvals = approvals;
	/* The policy tree (ptree.h): attach by reference, and its watch. */
	err = egr_ptree_new(&ptree, o.policy_dir, o.require_policy_ns);
	if (!err)
		err = egr_ptree_watch(ptree, reg, loop, alerting);
	if (err) {
		log_error("policy tree %s: %s", o.policy_dir ?: EGR_PTREE_DIR_DEFAULT,
			  strerror(-err));
		rc = 1;
		goto out;
	}
	srv.ptree = ptree;
	err = egr_metrics_add_source(metrics, layers_source, &feat);
	if (!err)
		err = egr_metrics_add_source(metrics, egr_dnsfair_metrics, reg);
	if (!err)
		err = egr_metrics_add_source(metrics, egr_events_metrics, events);
	if (!err)
		err = egr_metrics_add_source(metrics, egr_guard_metrics, guard);
	if (!err)
		err = egr_metrics_add_source(metrics, egr_lhold_metrics, hold);
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
	{
		uint8_t *lkey = NULL;
		size_t lkeylen = 0;
		bool created = false;

		err = egr_ledger_key_load(o.audit_key, o.state_dir, &lkey, &lkeylen, &created);
		if (!err)
			err = egr_billing_new(&billing, reg, metrics,
					      o.billing_file ? o.billing_file : billing_path,
					      billing_state, lkey, lkeylen, created);
		if (lkey)
			egr_audit_free_key(lkey, lkeylen);
	}
	if (!err)
		egr_billing_report_open(billing, audit);
	if (!err)
		err = egr_billing_start(billing, loop, o.billing_interval_s);
	if (err) {
		log_error("billing export %s: %s", o.billing_file ? o.billing_file : billing_path,
			  strerror(-err));
		rc = 1;
		goto out;
	}
	err = egr_breaker_new(&breaker, &o.breaker, reg, dns, loop);
	if (!err)
		err = egr_breaker_add_metrics(breaker, metrics);
	if (err) {
		log_error("circuit breaker: %s", strerror(-err));
		rc = 1;
		goto out;
	}
	egr_breaker_set_sinks(breaker, alerting, audit);
	srv.breaker = breaker;
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
	egr_hostns_check(); /* logs why a pod without hostNetwork serves nobody */
	/* Everything is loaded, mounted and bound: give up the rest. */
	if (!o.no_harden && egr_harden(&srv.hardening, &(struct egr_run_as){ .name = o.user,
							.uid = o.user_uid,
							.gid = o.user_gid })) {
		rc = 1;
		goto out_sock;
	}
	/* SIGHUP and the watchdog from here on; READY=1 only now that the
	 * programs are loaded, the pins adopted and the socket listens. */
	rctx.cur = &o;
	rctx.alerting = alerting;
	rctx.dns = dns;
	rctx.metrics = metrics;
	rctx.reg = reg;
	egr_loop_on_sighup(loop, on_sighup, &rctx);
	health.reg = reg;
	health.metrics = metrics;
	health.metrics_wanted = strcmp(o.metrics_addr, "off") != 0;
	health.billing = billing;
	egr_health_init(&health);
	srv.health = &health;
	err = egr_notify_watchdog_start(loop);
	if (err) {
		log_error("watchdog timer: %s", strerror(-err));
		rc = 1;
		goto out_sock;
	}
	log_info("egressd %s ready: %zu sandbox(es), control socket %s", EGRESSD_VERSION,
		 egr_reg_count(reg), o.socket);
	egr_notify("READY=1\nSTATUS=running: %zu sandbox(es)", egr_reg_count(reg));
	err = egr_loop_run(loop);
	egr_notify("STOPPING=1\nSTATUS=stopping; sandboxes stay enforced");
	rc = err ? 1 : 0;
	if (err)
		log_error("event loop: %s", strerror(-err));
	/* A graceful exit: no more requests, then the DNS queries already read
	 * are answered; what queues meanwhile waits in the held sockets for
	 * the next egressd. */
	egr_lhold_freeze(hold);
	egr_bpf_listen_freeze(bpf);
	egr_ctl_free(ctl);
	ctl = NULL;
	egr_dnsproxy_drain(dns);
out_sock:
	egr_ctl_free(ctl);
	close(lfd);
	unlink(o.socket);
out:
	/* Tearing the proxies down closes their listeners, which the holder
	 * keeps for the next egressd: nothing is let go from here on, and
	 * the kernel keeps their reservations and marks (kernel/listen.h). */
	egr_lhold_freeze(hold);
	egr_bpf_listen_freeze(bpf);
	/* The proxy, the breaker and the registry's hooks outlive the
	 * subscribers: nothing is published to them once they go. */
	dctx.bus = NULL;
	/* Held queries dropped from here on are no decision of anyone's. */
	if (approvals)
		egr_approvals_set_obs(approvals, NULL, NULL);
	bus.nsubs = 0;
	egr_billing_free(billing);
	egr_metrics_free(metrics);
	egr_breaker_free(breaker);
	egr_events_free(events);
	egr_lifetime_free(lifetime);
	egr_guard_free(guard);
	egr_ptree_free(ptree);
	egr_reg_free(reg);
	egr_alerting_free(alerting);
	egr_auditlog_close(audit);
	egr_dnsproxy_free(dns);
	egr_approvals_free(approvals);
	egr_inspect_free(inspect);
	egr_learned_free(learned);
	egr_lhold_free(hold);
	egr_loop_free(loop);
	egr_escape_close(&escape);
	egr_bpf_close(bpf);
	if (rc)
		egr_notify("STATUS=failed (see the log)");
	egr_notify_close();
	egr_options_free(&o);
	return rc;
}
