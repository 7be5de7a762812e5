// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Alert detectors, de-duplication and the alert schema (docs/alerts.md). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alerts.h"

/* One tracked key: a tenant's baseline, a sandbox's deny window or an
 * alert key's dedup state. */
struct entry {
	char *key;
	struct entry *next;
	/* volume baseline */
	double mean, var;
	unsigned n;
	/* deny window */
	uint64_t win_start;
	unsigned count;
	/* dedup */
	uint64_t last_emit; /* 0: never */
	uint64_t suppressed;
};

struct egr_alerts {
	struct egr_alert_cfg cfg;
	egr_alert_sink sink;
	void *ctx;
	struct entry **buckets;
	size_t nbuckets, n;
	uint64_t raised, suppressed;
};

void egr_alert_cfg_default(struct egr_alert_cfg *c)
{
	c->ewma_alpha = 0.2;
	c->sigmas = 4.0;
	c->min_ratio = 3.0;
	c->burst_ratio = 10.0;
	c->floor_bytes = 1u << 20;
	c->warmup = 6;
	c->deny_burst = 100;
	c->deny_window_ns = 10ull * 1000000000;
	c->dedup_window_ns = 300ull * 1000000000;
}

const char *egr_alert_severity_name(enum egr_alert_severity s)
{
	switch (s) {
	case EGR_SEV_INFO:
		return "info";
	case EGR_SEV_WARNING:
		return "warning";
	default:
		return "critical";
	}
}

static uint64_t fnv1a(const char *s, uint64_t h)
{
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ull;
	}
	return h;
}

static struct entry *lookup(struct egr_alerts *a, const char *key, bool create)
{
	size_t b = fnv1a(key, 0xcbf29ce484222325ull) & (a->nbuckets - 1);
	struct entry *e;

	for (e = a->buckets[b]; e; e = e->next)
		if (strcmp(e->key, key) == 0)
			return e;
	if (!create)
		return NULL;
	if (a->n >= a->nbuckets * 2) {
		/* Grow: rehash everything. */
		size_t nb = a->nbuckets * 4;
		struct entry **nbk = calloc(nb, sizeof(*nbk));

		if (nbk) {
			for (size_t i = 0; i < a->nbuckets; i++) {
				struct entry *x, *next;

				for (x = a->buckets[i]; x; x = next) {
					size_t h = fnv1a(x->key, 0xcbf29ce484222325ull) & (nb - 1);

					next = x->next;
					x->next = nbk[h];
					nbk[h] = x;
				}
			}
			free(a->buckets);
			a->buckets = nbk;
			a->nbuckets = nb;
			b = fnv1a(key, 0xcbf29ce484222325ull) & (nb - 1);
		}
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->key = strdup(key);
	if (!e->key) {
		free(e);
		return NULL;
	}
	e->next = a->buckets[b];
	a->buckets[b] = e;
	a->n++;
	return e;
}

static void remove_key(struct egr_alerts *a, const char *key)
{
	size_t b = fnv1a(key, 0xcbf29ce484222325ull) & (a->nbuckets - 1);
	struct entry **pe;

	for (pe = &a->buckets[b]; *pe; pe = &(*pe)->next) {
		if (strcmp((*pe)->key, key) == 0) {
			struct entry *e = *pe;

			*pe = e->next;
			free(e->key);
			free(e);
			a->n--;
			return;
		}
	}
}

int egr_alerts_set_cfg(struct egr_alerts *a, const struct egr_alert_cfg *cfg)
{
	if (!(cfg->ewma_alpha > 0 && cfg->ewma_alpha <= 1) || !cfg->dedup_window_ns ||
	    !cfg->deny_window_ns)
		return -EINVAL;
	a->cfg = *cfg;
	return 0;
}

int egr_alerts_new(struct egr_alerts **out, const struct egr_alert_cfg *cfg, egr_alert_sink sink,
		   void *ctx)
{
	struct egr_alerts *a = calloc(1, sizeof(*a));

	if (!a)
		return -ENOMEM;
	if (cfg)
		a->cfg = *cfg;
	else
		egr_alert_cfg_default(&a->cfg);
	if (!(a->cfg.ewma_alpha > 0 && a->cfg.ewma_alpha <= 1) || !a->cfg.dedup_window_ns ||
	    !a->cfg.deny_window_ns) {
		free(a);
		return -EINVAL;
	}
	a->nbuckets = 64;
	a->buckets = calloc(a->nbuckets, sizeof(*a->buckets));
	if (!a->buckets) {
		free(a);
		return -ENOMEM;
	}
	a->sink = sink;
	a->ctx = ctx;
	*out = a;
	return 0;
}

void egr_alerts_free(struct egr_alerts *a)
{
	if (!a)
		return;
	for (size_t i = 0; i < a->nbuckets; i++) {
		struct entry *e, *next;

		for (e = a->buckets[i]; e; e = next) {
			next = e->next;
			free(e->key);
			free(e);
		}
	}
	free(a->buckets);
	free(a);
}

void egr_rfc3339_ns(uint64_t unix_ns, char *buf, size_t len)
{
	time_t s = (time_t)(unix_ns / 1000000000);
	unsigned ms = (unsigned)(unix_ns % 1000000000 / 1000000);
	struct tm tm;
	char tmp[32];

	gmtime_r(&s, &tm);
	strftime(tmp, sizeof(tmp), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, len, "%s.%03uZ", tmp, ms);
}

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

int egr_alerts_raise(struct egr_alerts *a, const struct egr_alert_in *in, uint64_t now_ns)
{
	char key[512], id[17], when[40];
	uint64_t window, h;
	struct entry *e;
	json_t *alert;

	if (in->key)
		snprintf(key, sizeof(key), "k/%s/%s", in->type, in->key);
	else
		snprintf(key, sizeof(key), "k/%s/%s/%" PRIu32, in->type, in->tenant ?: "",
			 in->sandbox);
	e = lookup(a, key, true);
	if (!e) {
		json_decref(in->evidence);
		return -ENOMEM;
	}
	if (e->last_emit && now_ns >= e->last_emit &&
	    now_ns - e->last_emit < a->cfg.dedup_window_ns) {
		e->suppressed++;
		a->suppressed++;
		json_decref(in->evidence);
		return 0;
	}
	/* Emissions are at least one window apart, so each lands in its own
	 * floor(time / window): the id is stable and unique per emission. */
	window = now_ns / a->cfg.dedup_window_ns;
	snprintf(when, sizeof(when), "/%" PRIu64, window);
	h = fnv1a(when, fnv1a(key, 0xcbf29ce484222325ull));
	snprintf(id, sizeof(id), "%016" PRIx64, h);
	egr_rfc3339_ns(now_ns, when, sizeof(when));
	alert = json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:s, s:o, s:I}", "id", id, "time",
			  when, "type", in->type, "severity",
			  egr_alert_severity_name(in->severity), "tenant", str_or_null(in->tenant),
			  "sandbox", in->sandbox ? json_integer(in->sandbox) : json_null(),
			  "execution_id", str_or_null(in->execution_id), "summary",
			  in->summary ?: in->type, "evidence",
			  in->evidence ? in->evidence : json_object(), "suppressed",
			  (json_int_t)e->suppressed);
	if (!alert)
		return -ENOMEM;
	e->last_emit = now_ns ? now_ns : 1;
	e->suppressed = 0;
	a->raised++;
	if (a->sink)
		a->sink(a->ctx, alert);
	else
		json_decref(alert);
	return 1;
}

int egr_alerts_volume(struct egr_alerts *a, const char *tenant, uint64_t bytes,
		      uint64_t interval_ns, uint64_t now_ns)
{
	const struct egr_alert_cfg *c = &a->cfg;
	char key[300], summary[512];
	double x = (double)bytes, mean, sd, diff;
	struct entry *e;
	int rc = 0;

	snprintf(key, sizeof(key), "v/%s", tenant);
	e = lookup(a, key, true);
	if (!e)
		return -ENOMEM;
	mean = e->mean;
	sd = sqrt(e->var);
	if (e->n >= c->warmup && bytes >= c->floor_bytes && x >= c->min_ratio * mean &&
	    (x > mean + c->sigmas * sd || x >= c->burst_ratio * mean)) {
		struct egr_alert_in in = {
			.type = "egress_volume_anomaly",
			.severity = x >= c->burst_ratio * mean ? EGR_SEV_CRITICAL : EGR_SEV_WARNING,
			.tenant = tenant,
			.summary = summary,
		};

		snprintf(summary, sizeof(summary),
			 "tenant %s sent %" PRIu64 " bytes in %.0f s, baseline %.0f (%.1fx)", tenant,
			 bytes, (double)interval_ns / 1e9, mean, mean > 0 ? x / mean : INFINITY);
		in.evidence = json_pack("{s:I, s:f, s:f, s:f, s:I, s:i, s:f, s:f}", "bytes",
					(json_int_t)bytes, "interval_s", (double)interval_ns / 1e9,
					"baseline_bytes", mean, "baseline_stddev", sd, "floor_bytes",
					(json_int_t)c->floor_bytes, "intervals_observed", (int)e->n,
					"sigmas", c->sigmas, "ratio",
					mean > 0 ? x / mean : (double)bytes);
		rc = egr_alerts_raise(a, &in, now_ns) == 1;
	}
	/* Exponentially weighted mean and variance (West's incremental form). */
	if (e->n == 0) {
		e->mean = x;
		e->var = 0;
	} else {
		diff = x - e->mean;
		e->mean += c->ewma_alpha * diff;
		e->var = (1 - c->ewma_alpha) * (e->var + c->ewma_alpha * diff * diff);
	}
	if (e->n < UINT32_MAX)
		e->n++;
	return rc;
}

int egr_alerts_deny(struct egr_alerts *a, uint32_t sandbox, const char *tenant,
		    const char *execution_id, const char *dest, uint64_t now_ns)
{
	const struct egr_alert_cfg *c = &a->cfg;
	char key[64], summary[256];
	struct entry *e;

	if (!c->deny_burst)
		return 0;
	snprintf(key, sizeof(key), "d/%" PRIu32, sandbox);
	e = lookup(a, key, true);
	if (!e)
		return -ENOMEM;
	if (e->count == 0 || now_ns < e->win_start || now_ns - e->win_start >= c->deny_window_ns) {
		e->win_start = now_ns;
		e->count = 0;
	}
	if (++e->count < c->deny_burst)
		return 0;
	/* A burst: count the next one afresh, so a sandbox that keeps
	 * hammering raises again (and de-duplication counts it suppressed). */
	e->count = 0;
	{
		struct egr_alert_in in = {
			.type = "deny_burst",
			.severity = EGR_SEV_WARNING,
			.tenant = tenant,
			.sandbox = sandbox,
			.execution_id = execution_id,
			.summary = summary,
		};

		snprintf(summary, sizeof(summary), "sandbox %" PRIu32 " had %u denials within %.0f s",
			 sandbox, c->deny_burst, (double)c->deny_window_ns / 1e9);
		in.evidence = json_pack("{s:i, s:f, s:o}", "denies", (int)c->deny_burst, "window_s",
					(double)c->deny_window_ns / 1e9, "last_destination",
					dest ? json_string(dest) : json_null());
		return egr_alerts_raise(a, &in, now_ns) == 1;
	}
}

void egr_alerts_forget_sandbox(struct egr_alerts *a, uint32_t sandbox)
{
	char key[64];

	snprintf(key, sizeof(key), "d/%" PRIu32, sandbox);
	remove_key(a, key);
}

void egr_alerts_expire(struct egr_alerts *a, uint64_t now_ns)
{
	for (size_t i = 0; i < a->nbuckets; i++) {
		struct entry **pe = &a->buckets[i];

		while (*pe) {
			struct entry *e = *pe;

			/* Dedup keys with nothing pending, a window or more past. */
			if (e->key[0] == 'k' && !e->suppressed && now_ns > e->last_emit &&
			    now_ns - e->last_emit > 2 * a->cfg.dedup_window_ns) {
				*pe = e->next;
				free(e->key);
				free(e);
				a->n--;
				continue;
			}
			pe = &e->next;
		}
	}
}

void egr_alerts_stats(const struct egr_alerts *a, struct egr_alerts_stats *out)
{
	out->raised = a->raised;
	out->suppressed = a->suppressed;
	out->tracked = a->n;
}

bool egr_alerts_baseline(const struct egr_alerts *a, const char *tenant, double *mean,
			 double *stddev, unsigned *intervals)
{
	char key[300];
	struct entry *e;

	snprintf(key, sizeof(key), "v/%s", tenant);
	e = lookup((struct egr_alerts *)a, key, false);
	*mean = e ? e->mean : 0;
	*stddev = e ? sqrt(e->var) : 0;
	*intervals = e ? e->n : 0;
	return e != NULL;
}
