// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Alerting glue: meters, events and egressd's health into user/lib/alerts.c;
 * alerts out to a JSON-lines file and syslog. */
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
#include "log.h"

/* egr_sandboxes' size (bpf/egressd.bpf.c EGR_MAX_SANDBOXES). */
#define SANDBOX_MAP_MAX 65536
#define PRESSURE_PCT 80

struct tenant_prev {
	uint64_t bytes_out;
	bool seen;
};

struct egr_alerting {
	struct egr_alerting_opts o;
	char file[512];
	struct egr_registry *reg;
	struct egr_auditlog *audit;
	struct egr_alerts *alerts;
	int fd; /* -1: none */
	bool syslog;
	struct tenant_prev *prev;
	size_t nprev;
	uint64_t last_tick_ns;
	uint64_t audit_failures_seen;
	uint64_t write_failures;
};

uint64_t egr_now_ns(void)
{
	return egr_realtime_ns();
}

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

/* One alert about the sandbox an event names, the event as its evidence. */
static void raise_for_event(struct egr_alerting *al, const json_t *ev, const char *type,
			    enum egr_alert_severity severity, const char *summary)
{
	struct egr_alert_in in = {
		.type = type,
		.severity = severity,
		.tenant = json_string_value(json_object_get(ev, "tenant")),
		.sandbox = (uint32_t)json_integer_value(json_object_get(ev, "sandbox")),
		.execution_id = json_string_value(json_object_get(ev, "execution_id")),
		.summary = summary,
		.evidence = json_deep_copy(ev),
	};

	egr_alerting_raise(al, &in);
}

void egr_alerting_event(struct egr_alerting *al, const json_t *ev)
{
	const char *type = json_string_value(json_object_get(ev, "type")) ?: "";
	const char *verdict = json_string_value(json_object_get(ev, "verdict")) ?: "";
	const char *tenant = json_string_value(json_object_get(ev, "tenant"));
	const char *exec = json_string_value(json_object_get(ev, "execution_id"));
	uint32_t sandbox = (uint32_t)json_integer_value(json_object_get(ev, "sandbox"));
	char summary[512], dest[128];
	const char *dst;

	if (!al)
		return;
	if (strcmp(type, "quota") == 0) {
		snprintf(summary, sizeof(summary),
			 "sandbox %" PRIu32 " (tenant %s) is past its egress quota: packets dropped",
			 sandbox, tenant ?: "?");
		raise_for_event(al, ev, "quota_exceeded", EGR_SEV_WARNING, summary);
		return;
	}
	if (strcmp(type, "backstop") == 0 && strcmp(verdict, "audit") == 0)
		return; /* audit mode let it through: a would-be deny, not an attack */
	if (strcmp(type, "backstop") == 0) {
		/* The skb backstop stopped what no earlier hook did: a path
		 * around the sock_addr hooks is in use (docs/security.md). */
		const char *d = json_string_value(json_object_get(ev, "dst"));

		snprintf(summary, sizeof(summary),
			 "sandbox %" PRIu32 " (tenant %s) sent a packet to %s that no socket hook "
			 "judged; the backstop dropped it",
			 sandbox, tenant ?: "?", d ?: "?");
		raise_for_event(al, ev, "backstop_drop", EGR_SEV_CRITICAL, summary);
		return;
	}
	if (strcmp(type, "escape") == 0) {
		/* A task left its sandbox cgroup: outside every hook now. */
		const char *action = json_string_value(json_object_get(ev, "action")) ?: "?";
		const char *comm = json_string_value(json_object_get(ev, "comm")) ?: "?";
		int64_t target = (int64_t)json_integer_value(json_object_get(ev, "target_pid"));
		int64_t mover = (int64_t)json_integer_value(json_object_get(ev, "pid"));

		snprintf(summary, sizeof(summary),
			 "sandbox %" PRIu32 " (tenant %s): process %" PRId64 " was moved out of "
			 "the sandbox cgroup by %" PRId64 " (%s): %s",
			 sandbox, tenant ?: "?", target, mover, comm, action);
		raise_for_event(al, ev, "sandbox_escape", EGR_SEV_CRITICAL, summary);
		return;
	}
	if (strcmp(type, "dns") == 0 && strcmp(verdict, "exfil") == 0) {
		const char *q = json_string_value(json_object_get(ev, "qname"));

		snprintf(summary, sizeof(summary),
			 "sandbox %" PRIu32 " (tenant %s): DNS query %.200s looks like exfiltration",
			 sandbox, tenant ?: "?", q ?: "?");
		raise_for_event(al, ev, "dns_exfiltration_suspected", EGR_SEV_CRITICAL, summary);
	}
	if (strcmp(type, "dns") == 0 && strcmp(verdict, "rebind") == 0) {
		/* An allowed name answered with loopback, private, link-local, ...
		 * addresses: a rebinding attempt on local services (docs/dns.md). */
		const char *q = json_string_value(json_object_get(ev, "qname"));
		const json_t *first = json_array_get(json_object_get(ev, "stripped"), 0);
		const char *fa = json_string_value(json_object_get(first, "addr"));
		const char *fc = json_string_value(json_object_get(first, "class"));

		snprintf(summary, sizeof(summary),
			 "sandbox %" PRIu32 " (tenant %s): the answer for %.200s pointed to %s (%s); "
			 "%" JSON_INTEGER_FORMAT " address(es) stripped, none learned",
			 sandbox, tenant ?: "?", q ?: "?", fa ?: "?", fc ?: "?",
			 json_integer_value(json_object_get(ev, "stripped_total")));
		raise_for_event(al, ev, "dns_rebind", EGR_SEV_CRITICAL, summary);
		return;
	}
	if (strcmp(verdict, "deny") != 0 && strcmp(verdict, "exfil") != 0)
		return;
	if (!sandbox)
		return;
	dst = json_string_value(json_object_get(ev, "dst"));
	if (dst)
		snprintf(dest, sizeof(dest), "%s:%" PRId64, dst,
			 (int64_t)json_integer_value(json_object_get(ev, "port")));
	else
		snprintf(dest, sizeof(dest), "%s", json_string_value(json_object_get(ev, "qname")) ?: type);
	egr_alerts_deny(al->alerts, sandbox, tenant, exec, dest, egr_now_ns());
}

void egr_alerting_forget_sandbox(struct egr_alerting *al, uint32_t sandbox)
{
	if (al)
		egr_alerts_forget_sandbox(al->alerts, sandbox);
}

static void sample_volume(struct egr_alerting *al, uint64_t now, uint64_t interval_ns)
{
	struct egr_registry *r = al->reg;

	if (al->nprev < r->ntenants) {
		struct tenant_prev *np = realloc(al->prev, r->ntenants * sizeof(*np));

		if (!np)
			return;
		memset(np + al->nprev, 0, (r->ntenants - al->nprev) * sizeof(*np));
		al->prev = np;
		al->nprev = r->ntenants;
	}
	for (size_t i = 0; i < r->ntenants; i++) {
		struct egr_meter m;
		uint64_t delta;

		if (!r->tenants[i])
			continue;
		if (egr_bpf_meter_tenant(r->bpf, (uint32_t)(i + 1), &m))
			memset(&m, 0, sizeof(m));
		/* A meter that went backwards was recreated: count from zero. */
		delta = m.bytes_out >= al->prev[i].bytes_out ? m.bytes_out - al->prev[i].bytes_out
							     : m.bytes_out;
		if (al->prev[i].seen)
			egr_alerts_volume(al->alerts, r->tenants[i], delta, interval_ns, now);
		al->prev[i].bytes_out = m.bytes_out;
		al->prev[i].seen = true;
	}
}

static void check_health(struct egr_alerting *al)
{
	size_t n = al->reg->n;
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
		     struct egr_registry *reg, struct egr_loop *loop)
{
	struct egr_alerting *al = calloc(1, sizeof(*al));
	int err;

	if (!al)
		return -ENOMEM;
	al->o = *o;
	al->reg = reg;
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

void egr_alerting_set_audit(struct egr_alerting *al, struct egr_auditlog *audit)
{
	al->audit = audit;
	al->audit_failures_seen = audit ? egr_auditlog_failures(audit) : 0;
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
