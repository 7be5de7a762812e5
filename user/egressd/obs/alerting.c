// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Alerting glue: meters, events and egressd's health into user/lib/alerts.c;
 * alerts out to a JSON-lines file and syslog. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "alerting.h"
#include "auditlog.h"
#include "dns/dnsproxy.h"
#include "egr_decide.h"
#include "events.h"
#include "inspect.h"
#include "log.h"

/* egr_sandboxes' size (include/egressd.h). */
#define SANDBOX_MAP_MAX EGR_MAX_SANDBOXES
#define PRESSURE_PCT 80

struct tenant_prev {
	uint64_t bytes_out;
	bool seen;
};

struct egr_alerting {
	struct egr_alerting_opts o;
	char file[512];
	struct egr_registry *reg;
	const struct egr_auditlog *audit; /* its write failures (tick) */
	struct egr_events *events;        /* renders evidence */
	struct egr_alerts *alerts;
	int fd; /* -1: none */
	bool syslog;
	struct tenant_prev *prev;
	size_t nprev;
	uint64_t last_tick_ns;
	uint64_t audit_failures_seen;
	uint64_t write_failures;
};

void egr_alerting_opts_default(struct egr_alerting_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->interval_s = 10;
	o->syslog = true;
	egr_alert_cfg_default(&o->cfg);
}

static void sink(void *ctx, json_t *alert)
{
	struct egr_alerting *al = ctx;
	char *line = json_dumps(alert, JSON_COMPACT);

	if (line) {
		size_t n = strlen(line);
		const char *sev = json_string_value(json_object_get(alert, "severity")) ?: "";

		if (al->fd >= 0) {
			/* One write per line, O_APPEND: lines never interleave. */
			line[n] = '\n';
			if (write(al->fd, line, n + 1) != (ssize_t)(n + 1)) {
				al->write_failures++;
				log_error("alerts: write %s: %s", al->file, strerror(errno));
			}
			line[n] = '\0';
		}
		if (al->syslog)
			syslog(strcmp(sev, "critical") == 0  ? LOG_CRIT :
			       strcmp(sev, "warning") == 0 ? LOG_WARNING :
							      LOG_NOTICE,
			       "alert %s", line);
		log_info("alert: %s", line);
		free(line);
	}
	json_decref(alert);
}

int egr_alerting_raise(struct egr_alerting *al, const struct egr_alert_in *in)
{
	if (!al) {
		json_decref(in->evidence);
		return 0;
	}
	return egr_alerts_raise(al->alerts, in, egr_now_ns());
}

/* One alert about the sandbox a record names, its event as the evidence
 * (rendered only now that an alert is raised). */
/* key: the dedup key, NULL for per (type, tenant, sandbox). */
static void raise_keyed(struct egr_alerting *al, const struct egr_rec *r, const char *type,
			enum egr_alert_severity severity, const char *key, const char *summary)
{
	json_t *evidence = egr_events_render(al->events, r);
	struct egr_alert_in in = {
		.type = type,
		.key = key,
		.severity = severity,
		.tenant = json_string_value(json_object_get(evidence, "tenant")),
		.sandbox = r->sandbox,
		.execution_id = json_string_value(json_object_get(evidence, "execution_id")),
		.summary = summary,
		.evidence = evidence ? json_incref(evidence) : json_object(),
	};

	/* Our reference keeps in's tenant and execution id alive. */
	egr_alerting_raise(al, &in);
	json_decref(evidence);
}

static void raise_for(struct egr_alerting *al, const struct egr_rec *r, const char *type,
		      enum egr_alert_severity severity, const char *summary)
{
	raise_keyed(al, r, type, severity, NULL, summary);
}

/* The record's tenant: the DNS proxy's, the registry's, else the one the
 * kernel named; NULL when none is known. */
static const char *tenant_or_null(struct egr_alerting *al, const struct egr_rec *r)
{
	const struct egr_sb *sb = r->sandbox ? egr_reg_find(al->reg, NULL, r->sandbox) : NULL;

	if (r->kind == EGR_REC_DNS && r->dns->tenant)
		return r->dns->tenant;
	if (sb && sb->tenant)
		return sb->tenant;
	if (r->kind == EGR_REC_KERNEL && r->kernel.e->tenant_id)
		return egr_reg_tenant_name(al->reg, r->kernel.e->tenant_id);
	return NULL;
}

static const char *tenant_of(struct egr_alerting *al, const struct egr_rec *r)
{
	return tenant_or_null(al, r) ?: "?";
}

/* A denied (or exfiltrating) record into the deny burst detector, by
 * destination: "addr:port" of a kernel event, the DNS name, else its type. */
static void count_deny(struct egr_alerting *al, const struct egr_rec *r, const char *type)
{
	const struct egr_sb *sb;
	char dest[128], addr[64];

	if (!r->sandbox)
		return;
	sb = egr_reg_find(al->reg, NULL, r->sandbox);
	if (r->kind == EGR_REC_KERNEL && r->kernel.e->type != EGR_EV_INBOUND &&
	    egr_render_kernel_addr(r->kernel.e, addr, sizeof(addr)))
		snprintf(dest, sizeof(dest), "%s:%u", addr, r->kernel.e->port);
	else if (r->kind == EGR_REC_DNS && r->dns->qname)
		snprintf(dest, sizeof(dest), "%s", r->dns->qname);
	else
		snprintf(dest, sizeof(dest), "%s", type);
	egr_alerts_deny(al->alerts, r->sandbox, tenant_or_null(al, r),
			sb ? sb->execution_id : NULL, dest, egr_now_ns());
}

static void on_kernel(struct egr_alerting *al, const struct egr_rec *r)
{
	const struct egr_event *e = r->kernel.e;
	const char *type = egr_render_type_name(e->type);
	char summary[512], addr[64];

	if (e->type == EGR_EV_QUOTA) {
		snprintf(summary, sizeof(summary),
			 "sandbox %" PRIu32 " (tenant %s) is past its egress quota: packets dropped",
			 r->sandbox, tenant_of(al, r));
		raise_for(al, r, "quota_exceeded", EGR_SEV_WARNING, summary);
		return;
	}
	if (e->type == EGR_EV_BACKSTOP && e->verdict == EGR_VERDICT_AUDIT)
		return; /* audit mode let it through: a would-be deny, not an attack */
	if (e->type == EGR_EV_BACKSTOP) {
		/* The skb backstop stopped what no earlier hook did: a path
		 * around the sock_addr hooks is in use (docs/security.md). */
		if (!egr_render_kernel_addr(e, addr, sizeof(addr)))
			snprintf(addr, sizeof(addr), "?");
		snprintf(summary, sizeof(summary),
			 "sandbox %" PRIu32 " (tenant %s) sent a packet to %s that no socket hook "
			 "judged; the backstop dropped it",
			 r->sandbox, tenant_of(al, r), addr);
		raise_for(al, r, "backstop_drop", EGR_SEV_CRITICAL, summary);
		return;
	}
	if (e->type == EGR_EV_ESCAPE) {
		/* A task left its sandbox cgroup: outside every hook now. */
		const struct egr_escape_event *x = (const struct egr_escape_event *)e;
		char comm[sizeof(e->comm) + 1];

		memcpy(comm, e->comm, sizeof(e->comm));
		comm[sizeof(e->comm)] = '\0';
		snprintf(summary, sizeof(summary),
			 "sandbox %" PRIu32 " (tenant %s): process %" PRIu32 " was moved out of "
			 "the sandbox cgroup by %" PRIu32 " (%s): %s",
			 r->sandbox, tenant_of(al, r), x->target_pid, e->pid,
			 e->pid ? comm : "?", egr_render_escape_action(x->action));
		raise_for(al, r, "sandbox_escape", EGR_SEV_CRITICAL, summary);
		return;
	}
	if (e->verdict != EGR_ALLOW && e->verdict != EGR_VERDICT_AUDIT)
		count_deny(al, r, type ? type : "");
}

static void on_dns(struct egr_alerting *al, const struct egr_rec *r)
{
	const struct egr_dns_event *d = r->dns;
	char summary[512];

	if (d->verdict == EGR_DNS_V_EXFIL) {
		snprintf(summary, sizeof(summary),
			 "sandbox %" PRIu32 " (tenant %s): DNS query %.200s looks like exfiltration",
			 r->sandbox, tenant_of(al, r), d->qname ?: "?");
		raise_for(al, r, "dns_exfiltration_suspected", EGR_SEV_CRITICAL, summary);
	}
	if (d->verdict == EGR_DNS_V_REBIND || (d->verdict == EGR_DNS_V_AUDIT && d->nstripped_listed)) {
		/* An allowed name answered with loopback, private, link-local, ...
		 * addresses: a rebinding attempt on local services (docs/dns.md),
		 * or a private mirror. Critical only when one reaches the host
		 * or instance metadata (docs/alerts.md). */
		const struct egr_dns_stripped *first = NULL;
		enum egr_alert_severity sev = EGR_SEV_WARNING;
		bool kept = d->verdict == EGR_DNS_V_AUDIT;
		char fa[64] = "?", key[320];
		const char *fc = "?";

		for (size_t i = 0; i < d->nstripped_listed; i++) {
			const struct egr_dns_stripped *st = &d->stripped[i];

			if (egr_rebind_targets_host(st->family, st->addr, st->cls)) {
				sev = EGR_SEV_CRITICAL;
				first = st;
				break;
			}
		}
		/* Records removed but none listed: nothing says what they were. */
		if (!d->nstripped_listed)
			sev = EGR_SEV_CRITICAL;
		if (!first && d->nstripped_listed)
			first = &d->stripped[0];
		if (first && inet_ntop(first->family, first->addr, fa, sizeof(fa)))
			fc = egr_rebind_class_name(first->cls);
		else
			snprintf(fa, sizeof(fa), "?");
		snprintf(summary, sizeof(summary),
			 "sandbox %" PRIu32 " (tenant %s): the answer for %.200s pointed to %s (%s); "
			 "%zu address(es) %s",
			 r->sandbox, tenant_of(al, r), d->qname ?: "?", fa, fc, d->nstripped,
			 kept ? "kept (audit mode; enforce mode strips them)"
			      : "stripped, none learned");
		/* A warning (a private mirror) must not hold back a critical
		 * of the same sandbox for the dedup window. */
		snprintf(key, sizeof(key), "%s/%" PRIu32 "/%s", tenant_of(al, r), r->sandbox,
			 sev == EGR_SEV_CRITICAL ? "critical" : "warning");
		raise_keyed(al, r, "dns_rebind", sev, key, summary);
		return;
	}
	/* The stream's "deny" and "exfil" verdicts (docs/events.md). */
	if (!strcmp(egr_dns_verdict_event_name(d->verdict), "deny") ||
	    d->verdict == EGR_DNS_V_EXFIL)
		count_deny(al, r, "dns");
}

static void on_loss(struct egr_alerting *al, const struct egr_rec *r)
{
	char summary[256];
	struct egr_alert_in in = {
		.type = "lost_events",
		.severity = EGR_SEV_CRITICAL,
		.summary = summary,
		.evidence = json_pack("{s:I, s:I, s:s}", "lost", (json_int_t)r->loss.lost,
				      "lost_total", (json_int_t)r->loss.total, "reason",
				      r->loss.reason),
	};

	snprintf(summary, sizeof(summary),
		 "%" PRIu64 " kernel event(s) lost: the ring buffer was full (%s)", r->loss.lost,
		 r->loss.reason);
	egr_alerting_raise(al, &in);
}

/* Tampering found by the audit log's registry hooks or the pin guard. */
static void on_health(struct egr_alerting *al, const struct egr_rec *r)
{
	const struct egr_rec_health *h = &r->health;
	struct egr_alert_in in = {
		.type = h->type,
		.severity = EGR_SEV_CRITICAL,
		.tenant = h->sb ? h->sb->tenant : NULL,
		.sandbox = r->sandbox,
		.execution_id = h->sb ? h->sb->execution_id : NULL,
		.summary = h->summary,
		.evidence = h->detail ? json_deep_copy(h->detail) : json_object(),
	};

	egr_alerting_raise(al, &in);
}

static void on_rec(void *ctx, const struct egr_rec *r)
{
	struct egr_alerting *al = ctx;

	switch (r->kind) {
	case EGR_REC_KERNEL:
		on_kernel(al, r);
		break;
	case EGR_REC_DNS:
		on_dns(al, r);
		break;
	case EGR_REC_INSPECT:
		if (!r->inspect->allowed)
			count_deny(al, r, "inspect");
		break;
	case EGR_REC_SUPPRESSED:
		/* The stream shows it as one deny event: one deny here too. */
		count_deny(al, r, "denies_suppressed");
		break;
	case EGR_REC_LOSS:
		if (!r->sandbox) /* a sandbox's share of a loss already raised */
			on_loss(al, r);
		break;
	case EGR_REC_LIFECYCLE:
		if (r->life.what == EGR_LIFE_DETACH)
			egr_alerts_forget_sandbox(al->alerts, r->sandbox);
		break;
	case EGR_REC_HEALTH:
		on_health(al, r);
		break;
	default:
		break;
	}
}

static void sample_volume(struct egr_alerting *al, uint64_t now, uint64_t interval_ns)
{
	struct egr_registry *r = al->reg;
	size_t ntenants = egr_reg_tenant_count(r);

	if (al->nprev < ntenants) {
		struct tenant_prev *np = realloc(al->prev, ntenants * sizeof(*np));

		if (!np)
			return;
		memset(np + al->nprev, 0, (ntenants - al->nprev) * sizeof(*np));
		al->prev = np;
		al->nprev = ntenants;
	}
	for (size_t i = 0; i < ntenants; i++) {
		struct egr_meter m;
		uint64_t delta;

		if (!egr_reg_tenant_name(r, (uint32_t)(i + 1)))
			continue;
		if (egr_bpf_meter_tenant(egr_reg_bpf(r), (uint32_t)(i + 1), &m))
			memset(&m, 0, sizeof(m));
		/* A meter that went backwards was recreated: count from zero. */
		delta = m.bytes_out >= al->prev[i].bytes_out ? m.bytes_out - al->prev[i].bytes_out
							     : m.bytes_out;
		if (al->prev[i].seen)
			egr_alerts_volume(al->alerts, egr_reg_tenant_name(r, (uint32_t)(i + 1)),
					  delta, interval_ns, now);
		al->prev[i].bytes_out = m.bytes_out;
		al->prev[i].seen = true;
	}
}

static void check_health(struct egr_alerting *al)
{
	size_t n = egr_reg_count(al->reg);
	char summary[256];

	if (n * 100 >= (size_t)SANDBOX_MAP_MAX * PRESSURE_PCT) {
		struct egr_alert_in in = {
			.type = "map_pressure",
			.severity = EGR_SEV_WARNING,
			.key = "egr_sandboxes",
			.summary = summary,
			.evidence = json_pack("{s:s, s:I, s:I}", "map", "egr_sandboxes", "entries",
					      (json_int_t)n, "max_entries",
					      (json_int_t)SANDBOX_MAP_MAX),
		};

		snprintf(summary, sizeof(summary), "egr_sandboxes is %zu%% full (%zu of %d)",
			 n * 100 / SANDBOX_MAP_MAX, n, SANDBOX_MAP_MAX);
		egr_alerting_raise(al, &in);
	}
	if (al->audit) {
		uint64_t f = egr_auditlog_failures(al->audit);

		if (f > al->audit_failures_seen) {
			struct egr_alert_in in = {
				.type = "audit_write_failure",
				.severity = EGR_SEV_CRITICAL,
				.key = "audit",
				.summary = summary,
				.evidence = json_pack("{s:I, s:I}", "failures",
						      (json_int_t)(f - al->audit_failures_seen),
						      "failures_total", (json_int_t)f),
			};

			snprintf(summary, sizeof(summary),
				 "%" PRIu64 " audit log write failure(s) (%" PRIu64 " in total)",
				 f - al->audit_failures_seen, f);
			al->audit_failures_seen = f;
			egr_alerting_raise(al, &in);
		}
	}
}

static void on_tick(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_alerting *al = ctx;
	uint64_t now = egr_now_ns();
	uint64_t interval = al->last_tick_ns && now > al->last_tick_ns ?
				    now - al->last_tick_ns :
				    (uint64_t)al->o.interval_s * 1000000000ull;

	al->last_tick_ns = now;
	sample_volume(al, now, interval);
	check_health(al);
	egr_alerts_expire(al->alerts, now);
}

int egr_alerting_new(struct egr_alerting **out, const struct egr_alerting_opts *o,
		     struct egr_registry *reg, struct egr_loop *loop, struct egr_bus *bus,
		     struct egr_events *events, const struct egr_auditlog *audit)
{
	struct egr_alerting *al = calloc(1, sizeof(*al));
	int err;

	if (!al)
		return -ENOMEM;
	al->o = *o;
	al->reg = reg;
	al->events = events;
	al->audit = audit;
	al->audit_failures_seen = audit ? egr_auditlog_failures(audit) : 0;
	al->fd = -1;
	al->syslog = o->syslog;
	snprintf(al->file, sizeof(al->file), "%s", o->file ? o->file : "");
	al->o.file = al->file;
	if (strcmp(al->file, "-") == 0) {
		al->fd = STDOUT_FILENO;
	} else if (al->file[0]) {
		al->fd = open(al->file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
		if (al->fd < 0) {
			err = -errno;
			free(al);
			return err;
		}
	}
	err = egr_alerts_new(&al->alerts, &o->cfg, sink, al);
	if (!err)
		err = egr_loop_every(loop, (o->interval_s ? o->interval_s : 10) * 1000, on_tick, al);
	if (!err)
		err = egr_bus_subscribe(bus, EGR_REC_ALL, on_rec, al);
	if (err) {
		egr_alerts_free(al->alerts);
		if (al->fd > STDOUT_FILENO)
			close(al->fd);
		free(al);
		return err;
	}
	if (al->syslog)
		openlog("egressd", LOG_PID, LOG_DAEMON);
	/* Baseline the tenant meters now, so the first interval is a real one. */
	al->last_tick_ns = egr_now_ns();
	sample_volume(al, al->last_tick_ns, 0);
	*out = al;
	return 0;
}

int egr_alerting_set_cfg(struct egr_alerting *al, const struct egr_alert_cfg *cfg)
{
	int err = egr_alerts_set_cfg(al->alerts, cfg);

	if (!err)
		al->o.cfg = *cfg;
	return err;
}

void egr_alerting_free(struct egr_alerting *al)
{
	if (!al)
		return;
	egr_alerts_free(al->alerts);
	if (al->fd > STDOUT_FILENO)
		close(al->fd);
	if (al->syslog)
		closelog();
	free(al->prev);
	free(al);
}

json_t *egr_alerting_status(struct egr_alerting *al)
{
	struct egr_alerts_stats st;

	egr_alerts_stats(al->alerts, &st);
	return json_pack("{s:I, s:I, s:I, s:I, s:s, s:i}", "raised", (json_int_t)st.raised,
			 "suppressed", (json_int_t)st.suppressed, "tracked_keys",
			 (json_int_t)st.tracked, "write_failures", (json_int_t)al->write_failures,
			 "file", al->file, "interval_s", (int)al->o.interval_s);
}
