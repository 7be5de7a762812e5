// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Alert detectors, de-duplication and the alert schema (user/lib/alerts.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "alerts.h"

#define S 1000000000ull
#define T0 (1700000000ull * S)

struct sink {
	json_t *alerts;
};

static void collect(void *ctx, json_t *alert)
{
	struct sink *s = ctx;

	json_array_append_new(s->alerts, alert);
}

static struct egr_alerts *mk(struct sink *s, struct egr_alert_cfg *cfg)
{
	struct egr_alerts *a = NULL;

	s->alerts = json_array();
	assert_int_equal(egr_alerts_new(&a, cfg, collect, s), 0);
	return a;
}

static void done(struct egr_alerts *a, struct sink *s)
{
	egr_alerts_free(a);
	json_decref(s->alerts);
}

static size_t count_type(const struct sink *s, const char *type)
{
	size_t n = 0, i;
	json_t *v;

	json_array_foreach(s->alerts, i, v)
		if (strcmp(json_string_value(json_object_get(v, "type")), type) == 0)
			n++;
	return n;
}

/* Deterministic jitter in [-pct, +pct] percent. */
static uint64_t jitter(uint64_t base, unsigned pct, unsigned i)
{
	uint32_t x = i * 2654435761u;
	int64_t off = (int64_t)(x % (2 * pct + 1)) - (int64_t)pct;

	return (uint64_t)((int64_t)base + (int64_t)base * off / 100);
}

static void steady_traffic_never_alerts(void **state)
{
	static const uint64_t levels[] = { 0, 1000, 2u << 20, 50u << 20, 1ull << 32 };
	struct sink s;
	struct egr_alerts *a = mk(&s, NULL);

	for (size_t l = 0; l < sizeof(levels) / sizeof(levels[0]); l++) {
		char tenant[32];

		snprintf(tenant, sizeof(tenant), "t%zu", l);
		/* Steady with +-30% jitter, for a day of 10 s intervals. */
		for (unsigned i = 0; i < 8640; i++)
			egr_alerts_volume(a, tenant, jitter(levels[l], 30, i), 10 * S,
					  T0 + i * 10 * S);
	}
	assert_int_equal(json_array_size(s.alerts), 0);
	done(a, &s);
}

static void burst_always_alerts(void **state)
{
	static const uint64_t levels[] = { 200u << 10, 2u << 20, 50u << 20, 1ull << 32 };
	struct sink s;
	struct egr_alerts *a = mk(&s, NULL);

	for (size_t l = 0; l < sizeof(levels) / sizeof(levels[0]); l++) {
		for (unsigned pct = 0; pct <= 60; pct += 30) {
			char tenant[32];
			size_t before = json_array_size(s.alerts);
			unsigned i;

			snprintf(tenant, sizeof(tenant), "t%zu-%u", l, pct);
			for (i = 0; i < 50; i++)
				egr_alerts_volume(a, tenant, jitter(levels[l], pct, i), 10 * S,
						  T0 + i * 10 * S);
			assert_int_equal(json_array_size(s.alerts), before);
			/* 10x: always, if it clears the floor (200 KiB*10 = 2 MiB). */
			assert_int_equal(egr_alerts_volume(a, tenant, levels[l] * 10, 10 * S,
							   T0 + i * 10 * S), 1);
			assert_int_equal(json_array_size(s.alerts), before + 1);
		}
	}
	done(a, &s);
}

static void floor_and_warmup(void **state)
{
	struct sink s;
	struct egr_alerts *a = mk(&s, NULL);
	unsigned i;

	/* Below the absolute floor: 100x of a tiny baseline does not alert. */
	for (i = 0; i < 20; i++)
		egr_alerts_volume(a, "tiny", 1000, 10 * S, T0 + i * 10 * S);
	assert_int_equal(egr_alerts_volume(a, "tiny", 100000, 10 * S, T0 + i * 10 * S), 0);
	/* Within the warm-up: nothing, however large. */
	egr_alerts_volume(a, "new", 1000, 10 * S, T0);
	assert_int_equal(egr_alerts_volume(a, "new", 1ull << 30, 10 * S, T0 + 10 * S), 0);
	assert_int_equal(json_array_size(s.alerts), 0);
	/* An idle tenant (baseline 0) that suddenly sends past the floor does. */
	for (i = 0; i < 10; i++)
		egr_alerts_volume(a, "idle", 0, 10 * S, T0 + i * 10 * S);
	assert_int_equal(egr_alerts_volume(a, "idle", 5u << 20, 10 * S, T0 + i * 10 * S), 1);
	done(a, &s);
}

static void schema_and_stable_id(void **state)
{
	struct sink s;
	struct egr_alerts *a = mk(&s, NULL);
	json_t *al, *ev;
	unsigned i;

	for (i = 0; i < 10; i++)
		egr_alerts_volume(a, "acme", 1u << 20, 10 * S, T0 + i * 10 * S);
	egr_alerts_volume(a, "acme", 100u << 20, 10 * S, T0 + i * 10 * S);
	assert_int_equal(json_array_size(s.alerts), 1);
	al = json_array_get(s.alerts, 0);
	static const char *const fields[] = { "id",	      "time",	  "type",     "severity",
					      "tenant",	      "sandbox",  "execution_id",
					      "summary",      "evidence", "suppressed" };
	for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++)
		assert_non_null(json_object_get(al, fields[f]));
	assert_string_equal(json_string_value(json_object_get(al, "type")),
			    "egress_volume_anomaly");
	assert_string_equal(json_string_value(json_object_get(al, "tenant")), "acme");
	assert_true(json_is_null(json_object_get(al, "sandbox")));
	assert_string_equal(json_string_value(json_object_get(al, "severity")), "critical");
	assert_int_equal(strlen(json_string_value(json_object_get(al, "id"))), 16);
	ev = json_object_get(al, "evidence");
	assert_int_equal(json_integer_value(json_object_get(ev, "bytes")), 100 << 20);
	assert_true(json_real_value(json_object_get(ev, "baseline_bytes")) > 0);
	assert_string_equal(json_string_value(json_object_get(al, "time")),
			    "2023-11-14T22:15:00.000Z");

	/* The same alert at the same time from a fresh detector: same id. */
	{
		struct sink s2;
		struct egr_alerts *b = mk(&s2, NULL);

		for (i = 0; i < 10; i++)
			egr_alerts_volume(b, "acme", 1u << 20, 10 * S, T0 + i * 10 * S);
		egr_alerts_volume(b, "acme", 100u << 20, 10 * S, T0 + i * 10 * S);
		assert_string_equal(json_string_value(json_object_get(al, "id")),
				    json_string_value(json_object_get(
					    json_array_get(s2.alerts, 0), "id")));
		done(b, &s2);
	}
	done(a, &s);
}

static void dedup_counts_suppressed(void **state)
{
	struct egr_alert_cfg cfg;
	struct sink s;
	struct egr_alerts *a;
	struct egr_alerts_stats st;
	struct egr_alert_in in = { .type = "lost_events", .severity = EGR_SEV_CRITICAL };
	json_t *second;

	egr_alert_cfg_default(&cfg);
	cfg.dedup_window_ns = 60 * S;
	a = mk(&s, &cfg);
	assert_int_equal(egr_alerts_raise(a, &in, T0), 1);
	for (int i = 1; i <= 5; i++)
		assert_int_equal(egr_alerts_raise(a, &in, T0 + i * S), 0);
	/* Another key is independent. */
	in.tenant = "other";
	assert_int_equal(egr_alerts_raise(a, &in, T0 + 6 * S), 1);
	in.tenant = NULL;
	assert_int_equal(egr_alerts_raise(a, &in, T0 + 61 * S), 1);
	assert_int_equal(json_array_size(s.alerts), 3);
	second = json_array_get(s.alerts, 2);
	assert_int_equal(json_integer_value(json_object_get(second, "suppressed")), 5);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(s.alerts, 0),
							    "suppressed")), 0);
	assert_string_not_equal(json_string_value(json_object_get(second, "id")),
				json_string_value(json_object_get(json_array_get(s.alerts, 0), "id")));
	egr_alerts_stats(a, &st);
	assert_int_equal(st.raised, 3);
	assert_int_equal(st.suppressed, 5);
	done(a, &s);
}

static void deny_burst_once(void **state)
{
	struct egr_alert_cfg cfg;
	struct sink s;
	struct egr_alerts *a;
	unsigned i;

	egr_alert_cfg_default(&cfg);
	cfg.deny_burst = 10;
	cfg.deny_window_ns = 5 * S;
	a = mk(&s, &cfg);
	/* 9 in a window: nothing; spread-out denies never alert. */
	for (i = 0; i < 9; i++)
		egr_alerts_deny(a, 7, "acme", "exec1", "10.0.0.1:443", T0 + i * 100000000ull);
	for (i = 0; i < 100; i++)
		egr_alerts_deny(a, 8, "acme", "exec2", "10.0.0.1:443", T0 + i * 1 * S);
	assert_int_equal(json_array_size(s.alerts), 0);
	/* The 10th: one alert; hammering on: still one (suppressed counts). */
	egr_alerts_deny(a, 7, "acme", "exec1", "10.0.0.1:443", T0 + S);
	for (i = 0; i < 1000; i++)
		egr_alerts_deny(a, 7, "acme", "exec1", "10.0.0.1:443", T0 + S + i * 1000000ull);
	assert_int_equal(count_type(&s, "deny_burst"), 1);
	{
		struct egr_alerts_stats st;

		egr_alerts_stats(a, &st);
		assert_int_equal(st.suppressed, 100); /* 1000 more denies: 100 bursts */
	}
	assert_int_equal(json_integer_value(json_object_get(json_array_get(s.alerts, 0),
							    "sandbox")), 7);
	assert_string_equal(json_string_value(json_object_get(json_array_get(s.alerts, 0),
							      "execution_id")), "exec1");
	egr_alerts_forget_sandbox(a, 7);
	done(a, &s);
}

static void expire_bounds_memory(void **state)
{
	struct sink s;
	struct egr_alerts *a = mk(&s, NULL);
	struct egr_alerts_stats st;
	char key[32];

	for (int i = 0; i < 5000; i++) {
		struct egr_alert_in in = { .type = "map_pressure", .key = key };

		snprintf(key, sizeof(key), "k%d", i);
		egr_alerts_raise(a, &in, T0);
	}
	egr_alerts_stats(a, &st);
	assert_int_equal(st.tracked, 5000);
	egr_alerts_expire(a, T0 + 3600 * S);
	egr_alerts_stats(a, &st);
	assert_int_equal(st.tracked, 0);
	done(a, &s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(steady_traffic_never_alerts),
		cmocka_unit_test(burst_always_alerts),
		cmocka_unit_test(floor_and_warmup),
		cmocka_unit_test(schema_and_stable_id),
		cmocka_unit_test(dedup_counts_suppressed),
		cmocka_unit_test(deny_burst_once),
		cmocka_unit_test(expire_bounds_memory),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
