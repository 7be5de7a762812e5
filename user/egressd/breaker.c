// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "obs/alerting.h"
#include "alerts.h"
#include "obs/auditlog.h"
#include "breaker.h"
#include "dns/dnsproxy.h"
#include "inspect.h"
#include "log.h"
#include "obs/metrics.h"

struct sample {
	uint64_t at_ns; /* CLOCK_MONOTONIC */
	uint64_t denies;
};

/* The window of one sandbox: a ring of samples, oldest first. */
struct track {
	uint32_t id;
	bool seen; /* touched in this pass (the rest are gone: dropped) */
	uint32_t window_s;
	size_t head, n;
	struct sample s[EGR_BREAKER_SAMPLES];
	struct track *next;
};

struct egr_breaker {
	struct egr_breaker_opts o;
	struct egr_registry *reg;
	struct egr_dnsproxy *dns;
	struct egr_alerting *alerting;
	struct egr_auditlog *audit;
	struct track *tracks;
	uint64_t trips;
	time_t started;
};

struct denies {
	uint64_t connect, datagram, socket, backstop, dns, inspect, total;
};

/* Everything the breaker counts as a deny of sb, since it was attached. */
static void read_denies(struct egr_breaker *b, const struct egr_sb *sb, struct denies *d)
{
	struct egr_dnsproxy_stats st;
	struct egr_meter m;

	memset(d, 0, sizeof(*d));
	if (egr_bpf_meter_sandbox(egr_reg_bpf(b->reg), sb->id, &m) == 0) {
		d->connect = m.conn_denied;
		d->datagram = m.dgram_denied;
		d->socket = m.sock_denied;
		d->backstop = m.backstop_drops;
	}
	if (b->dns && egr_dnsproxy_stats(b->dns, sb->id, &st) == 0)
		d->dns = st.refused + st.exfil;
	/* The inspecting proxy's refusals (fronting, names not allowed): a
	 * tool probing it is probing the policy. socket includes setsockopt
	 * refusals (the kernel meter counts both per sandbox). */
	if (egr_reg_inspect(b->reg) &&
	    egr_inspect_sandbox_denied(egr_reg_inspect(b->reg), sb->id, &d->inspect))
		d->inspect = 0;
	d->total = d->connect + d->datagram + d->socket + d->backstop + d->dns + d->inspect;
}

static struct track *track_get(struct egr_breaker *b, uint32_t id)
{
	struct track *t;

	for (t = b->tracks; t; t = t->next)
		if (t->id == id)
			return t;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->id = id;
	t->next = b->tracks;
	b->tracks = t;
	return t;
}

static void track_reset(struct track *t, uint64_t now, uint64_t denies)
{
	t->head = 0;
	t->n = 1;
	t->s[0].at_ns = now;
	t->s[0].denies = denies;
}

/* Denies in the window ending now, and record the sample when due. */
static uint64_t track_step(struct track *t, uint32_t window_s, uint64_t now, uint64_t denies)
{
	uint64_t win = (uint64_t)window_s * 1000000000ull, step = win / EGR_BREAKER_SAMPLES;
	struct sample *last;

	if (t->window_s != window_s) {
		/* A policy update changed the window: start it again. */
		t->window_s = window_s;
		track_reset(t, now, denies);
		return 0;
	}
	/* Samples older than the window no longer count, but keep the newest
	 * of them: it is the baseline of the window's start. */
	while (t->n > 1 && now - t->s[(t->head + 1) % EGR_BREAKER_SAMPLES].at_ns >= win) {
		t->head = (t->head + 1) % EGR_BREAKER_SAMPLES;
		t->n--;
	}
	last = &t->s[(t->head + t->n - 1) % EGR_BREAKER_SAMPLES];
	if (now - last->at_ns >= step) {
		if (t->n == EGR_BREAKER_SAMPLES) {
			t->head = (t->head + 1) % EGR_BREAKER_SAMPLES;
			t->n--;
		}
		t->s[(t->head + t->n) % EGR_BREAKER_SAMPLES] = (struct sample){ now, denies };
		t->n++;
	}
	return denies >= t->s[t->head].denies ? denies - t->s[t->head].denies : 0;
}

static void trip(struct egr_breaker *b, struct egr_sb *sb, const struct denies *d,
		 uint64_t in_window, uint32_t max, uint32_t window_s)
{
	struct egr_fail f = { 0 };
	unsigned closed = 0;
	char summary[256];
	json_t *ev;

	if (egr_reg_set_quarantine(b->reg, sb, true, &closed, &f)) {
		/* Nothing changed in the kernel; the next pass tries again. */
		log_error("breaker: sandbox %u: cannot quarantine: %s", sb->id, f.e.message);
		return;
	}
	b->trips++;
	log_warn("breaker: sandbox %u (tenant %s, execution %s) quarantined: %llu denies in %u s "
		 "(max %u); %u connection(s) destroyed",
		 sb->id, sb->tenant ? sb->tenant : "?", sb->execution_id ? sb->execution_id : "-",
		 (unsigned long long)in_window, window_s, max, closed);
	ev = json_pack("{s:I, s:i, s:i, s:{s:I, s:I, s:I, s:I, s:I, s:I}, s:i}", "denies",
		       (json_int_t)in_window, "max_denies", (int)max, "window_s", (int)window_s,
		       "total_by_kind", "connect", (json_int_t)d->connect, "datagram",
		       (json_int_t)d->datagram, "socket", (json_int_t)d->socket, "backstop",
		       (json_int_t)d->backstop, "dns", (json_int_t)d->dns, "inspect",
		       (json_int_t)d->inspect, "connections_destroyed",
		       (int)closed);
	if (b->audit && egr_auditlog_quarantine(b->audit, sb, true, ev ? json_deep_copy(ev) : NULL,
						closed))
		log_error("breaker: sandbox %u: quarantine audit record not written", sb->id);
	snprintf(summary, sizeof(summary),
		 "sandbox %u quarantined: %llu denies within %u s (max %u); release with "
		 "egressctl release --id %u",
		 sb->id, (unsigned long long)in_window, window_s, max, sb->id);
	if (b->alerting) {
		char key[32];

		/* One alert per trip: the key names the trip. */
		snprintf(key, sizeof(key), "%u/%llu", sb->id, (unsigned long long)b->trips);
		egr_alerting_raise(b->alerting,
				   &(struct egr_alert_in){ .type = "sandbox_quarantined",
							   .severity = EGR_SEV_CRITICAL,
							   .key = key,
							   .tenant = sb->tenant,
							   .sandbox = sb->id,
							   .execution_id = sb->execution_id,
							   .summary = summary,
							   .evidence = ev });
		ev = NULL;
	}
	json_decref(ev);
}

void egr_breaker_check(struct egr_breaker *b)
{
	uint64_t now = egr_mono_ns();
	struct track **pt;
	struct egr_reg_iter it = { 0 };

	for (struct track *t = b->tracks; t; t = t->next)
		t->seen = false;
	for (struct egr_sb *sb; (sb = egr_reg_next(b->reg, &it));) {
		uint32_t max = sb->breaker_max_denies ? sb->breaker_max_denies : b->o.max_denies;
		uint32_t win = sb->breaker_max_denies ? sb->breaker_window_s : b->o.window_s;
		struct track *t;
		struct denies d;
		uint64_t n;

		if (!max || !win)
			continue;
		t = track_get(b, sb->id);
		if (!t)
			continue;
		t->seen = true;
		if (sb->quarantined)
			continue;
		read_denies(b, sb, &d);
		if (!t->n) {
			/* First sight: a sandbox attached since egressd started
			 * began at zero; an adopted one starts its window now. */
			t->window_s = win;
			track_reset(t, now, sb->attached_at >= b->started ? 0 : d.total);
		}
		n = track_step(t, win, now, d.total);
		if (n > max)
			trip(b, sb, &d, n, max, win);
	}
	/* Forget detached sandboxes. */
	for (pt = &b->tracks; *pt;) {
		if (!(*pt)->seen) {
			struct track *gone = *pt;

			*pt = gone->next;
			free(gone);
		} else {
			pt = &(*pt)->next;
		}
	}
}

static void on_tick(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	(void)loop, (void)fd, (void)events;
	egr_breaker_check(ctx);
}

int egr_breaker_release(struct egr_breaker *b, struct egr_sb *sb, struct egr_fail *f)
{
	unsigned closed = 0;
	struct track *t;
	struct denies d;
	int err;

	err = egr_reg_set_quarantine(b->reg, sb, false, &closed, f);
	if (err)
		return err;
	read_denies(b, sb, &d);
	t = track_get(b, sb->id);
	if (t) {
		t->window_s = sb->breaker_max_denies ? sb->breaker_window_s : b->o.window_s;
		track_reset(t, egr_mono_ns(), d.total);
	}
	log_info("breaker: sandbox %u released", sb->id);
	if (b->audit && egr_auditlog_quarantine(b->audit, sb, false, NULL, 0))
		log_error("breaker: sandbox %u: release audit record not written", sb->id);
	return 0;
}

static void metrics_source(void *ctx, struct egr_mbuf *mb)
{
	struct egr_breaker *b = ctx;
	size_t n = 0;
	struct egr_reg_iter it = { 0 };

	egr_mbuf_family(mb, "egressd_sandbox_quarantined", "gauge",
			"1 for a sandbox its circuit breaker quarantined (network.breaker).");
	for (const struct egr_sb *sb; (sb = egr_reg_next(b->reg, &it));) {
		if (!sb->quarantined)
			continue;
		n++;
		egr_mbuf_printf(mb, "egressd_sandbox_quarantined{tenant=\"");
		egr_mbuf_label(mb, sb->tenant ? sb->tenant : "");
		/* No execution_id label: series must not grow with executions. */
		egr_mbuf_printf(mb, "\",sandbox=\"%u\"} 1\n", sb->id);
	}
	egr_mbuf_family(mb, "egressd_sandboxes_quarantined", "gauge",
			"Sandboxes quarantined now.");
	egr_mbuf_printf(mb, "egressd_sandboxes_quarantined %zu\n", n);
	egr_mbuf_family(mb, "egressd_breaker_trips_total", "counter",
			"Quarantines the circuit breaker started (since egressd started).");
	egr_mbuf_printf(mb, "egressd_breaker_trips_total %llu\n", (unsigned long long)b->trips);
}

int egr_breaker_add_metrics(struct egr_breaker *b, struct egr_metrics *m)
{
	return egr_metrics_add_source(m, metrics_source, b);
}

json_t *egr_breaker_status(const struct egr_breaker *b)
{
	size_t n = 0;
	struct egr_reg_iter it = { 0 };

	for (const struct egr_sb *sb; (sb = egr_reg_next(b->reg, &it));)
		n += sb->quarantined;
	return json_pack("{s:o, s:i, s:I, s:I}", "default",
			 b->o.max_denies ? json_pack("{s:i, s:i}", "max_denies",
						     (int)b->o.max_denies, "window_s",
						     (int)b->o.window_s)
					 : json_null(),
			 "interval_ms", (int)b->o.interval_ms, "trips", (json_int_t)b->trips,
			 "quarantined", (json_int_t)n);
}

int egr_breaker_new(struct egr_breaker **out, const struct egr_breaker_opts *o,
		    struct egr_registry *reg, struct egr_dnsproxy *dns, struct egr_loop *loop)
{
	struct egr_breaker *b = calloc(1, sizeof(*b));
	int err;

	if (!b)
		return -ENOMEM;
	if (o)
		b->o = *o;
	if (!b->o.interval_ms)
		b->o.interval_ms = EGR_BREAKER_DEFAULT_INTERVAL_MS;
	b->reg = reg;
	b->dns = dns;
	b->started = time(NULL);
	err = egr_loop_every(loop, b->o.interval_ms, on_tick, b);
	if (err) {
		free(b);
		return err;
	}
	*out = b;
	return 0;
}

void egr_breaker_free(struct egr_breaker *b)
{
	struct track *t, *next;

	if (!b)
		return;
	for (t = b->tracks; t; t = next) {
		next = t->next;
		free(t);
	}
	free(b);
}

void egr_breaker_set_sinks(struct egr_breaker *b, struct egr_alerting *alerting,
			   struct egr_auditlog *audit)
{
	b->alerting = alerting;
	b->audit = audit;
}
