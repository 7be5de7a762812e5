/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Alert logic (docs/alerts.md), pure: no clock, no I/O. The caller feeds
 * observations with the time they belong to; alerts come out through a sink
 * as JSON objects of one schema:
 *
 *   {"id","time","type","severity","tenant","sandbox","execution_id",
 *    "summary","evidence":{...},"suppressed":N}
 *
 * Detectors:
 *  - egress volume anomaly per tenant: an EWMA of bytes per interval and of
 *    its variance; after a warm-up, an interval alerts when it is at least
 *    `floor_bytes`, at least `min_ratio` times the baseline, and either more
 *    than `sigmas` standard deviations above it or `burst_ratio` times it;
 *  - deny burst per sandbox: `deny_burst` denies within `deny_window_ns`;
 *  - anything else the caller raises (egr_alerts_raise).
 *
 * Every alert goes through de-duplication: per key (type + tenant/sandbox or
 * the caller's key), at most one alert per `dedup_window_ns`; the ones held
 * back are counted and reported as "suppressed" by the next alert of that
 * key. Ids are stable: a hash of type, key and the dedup window the alert
 * falls in (floor(time / dedup_window)).
 */
#ifndef EGR_ALERTS_H
#define EGR_ALERTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

struct egr_alert_cfg {
	double ewma_alpha;        /* weight of the newest interval, 0 < a <= 1 */
	double sigmas;            /* deviation threshold, in standard deviations */
	double min_ratio;         /* never alert below this multiple of the baseline */
	double burst_ratio;       /* always alert at this multiple (past floor, warm-up) */
	uint64_t floor_bytes;     /* never alert on an interval smaller than this */
	unsigned warmup;          /* intervals observed before alerting */
	unsigned deny_burst;      /* denies ... */
	uint64_t deny_window_ns;  /* ... within this window */
	uint64_t dedup_window_ns; /* one alert per key per window */
};

void egr_alert_cfg_default(struct egr_alert_cfg *c);

enum egr_alert_severity { EGR_SEV_INFO, EGR_SEV_WARNING, EGR_SEV_CRITICAL };
const char *egr_alert_severity_name(enum egr_alert_severity s);

/* The sink owns the alert it gets (json_decref it). */
typedef void (*egr_alert_sink)(void *ctx, json_t *alert);

struct egr_alerts;

int egr_alerts_new(struct egr_alerts **out, const struct egr_alert_cfg *cfg, egr_alert_sink sink,
		   void *ctx);
void egr_alerts_free(struct egr_alerts *a);
/* New thresholds (SIGHUP); baselines and de-duplication state stay.
 * -EINVAL (nothing changed) for a configuration egr_alerts_new refuses. */
int egr_alerts_set_cfg(struct egr_alerts *a, const struct egr_alert_cfg *cfg);

/* One alert to raise (all strings may be NULL; sandbox 0 = none). */
struct egr_alert_in {
	const char *type;
	enum egr_alert_severity severity;
	const char *key;          /* dedup key beyond the type; NULL: tenant/sandbox */
	const char *tenant;
	uint32_t sandbox;
	const char *execution_id;
	const char *summary;
	json_t *evidence;         /* stolen (may be NULL) */
};

/* Raise an alert at now_ns (Unix time in ns). 1 when emitted, 0 when
 * suppressed, -errno. */
int egr_alerts_raise(struct egr_alerts *a, const struct egr_alert_in *in, uint64_t now_ns);

/* One interval's egress bytes of a tenant (interval_ns long, ending at
 * now_ns). 1 when it alerted, 0 otherwise. */
int egr_alerts_volume(struct egr_alerts *a, const char *tenant, uint64_t bytes,
		      uint64_t interval_ns, uint64_t now_ns);

/* A denied action of a sandbox at now_ns. 1 when it alerted. */
int egr_alerts_deny(struct egr_alerts *a, uint32_t sandbox, const char *tenant,
		    const char *execution_id, const char *dest, uint64_t now_ns);

/* Forget a detached sandbox's deny window. */
void egr_alerts_forget_sandbox(struct egr_alerts *a, uint32_t sandbox);
/* Drop dedup entries whose window ended long ago (bounded memory). */
void egr_alerts_expire(struct egr_alerts *a, uint64_t now_ns);

struct egr_alerts_stats {
	uint64_t raised;      /* emitted */
	uint64_t suppressed;  /* held back by de-duplication */
	uint64_t tracked;     /* keys in memory */
};
void egr_alerts_stats(const struct egr_alerts *a, struct egr_alerts_stats *out);

/* The baseline of a tenant (tests, metrics): 0 and false when unknown. */
bool egr_alerts_baseline(const struct egr_alerts *a, const char *tenant, double *mean,
			 double *stddev, unsigned *intervals);

/* "2024-05-01T12:00:00.123Z" for Unix ns. buf >= 32 bytes. */
void egr_rfc3339_ns(uint64_t unix_ns, char *buf, size_t len);

#endif /* EGR_ALERTS_H */
