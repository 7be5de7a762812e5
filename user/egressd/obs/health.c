// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "billing.h"
#include "clock.h"
#include "kernel/bpfstate.h"
#include "health.h"
#include "metrics.h"
#include "sandbox.h"

void egr_health_init(struct egr_health *h)
{
	uint64_t cnt[EGR_CNT_MAX];

	h->lost_rise_ns = 0;
	h->lost_seen = 0;
	if (h->reg && egr_bpf_counters(egr_reg_bpf(h->reg), cnt) == 0)
		h->lost_seen = cnt[EGR_CNT_EVENTS_LOST];
}

static int add(json_t *arr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int add(json_t *arr, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return json_array_append_new(arr, json_string(msg));
}

static void missing_pin(void *ctx, const char *map, const char *path)
{
	add(ctx, "pins: map %s is not pinned at %s", map, path);
}

/* Each sandbox whose links are not all pinned. A visit of every sandbox
 * (~1 us each: 10,000 took status to 7-9 ms) only when something it
 * depends on changed since every one was found pinned; a sandbox whose
 * links egressd does not hold is judged by its pins on disk, which no
 * generation follows, so then the verdict is not kept. */
static void pins_of_sandboxes(struct egr_health *h, struct egr_bpf *b, json_t *arr)
{
	uint64_t lg = egr_bpf_links_gen(b), rg = egr_reg_gen(h->reg);
	struct egr_reg_iter it = { 0 };
	bool all_ok = true;

	if (h->pins_all_ok && h->pins_links_gen == lg && h->pins_reg_gen == rg)
		return;
	for (const struct egr_sb *sb; (sb = egr_reg_next(h->reg, &it));) {
		if (!egr_bpf_links_held(b, sb->id))
			all_ok = false;
		if (!egr_bpf_links_complete(b, sb->id)) {
			all_ok = false;
			add(arr, "pins: sandbox %u: not all of its links are pinned", sb->id);
		}
	}
	h->pins_all_ok = all_ok;
	h->pins_links_gen = lg;
	h->pins_reg_gen = rg;
}

json_t *egr_health_problems(struct egr_health *h)
{
	json_t *arr = json_array();
	uint64_t cnt[EGR_CNT_MAX], now = egr_mono_ns();
	struct egr_bpf *b = egr_reg_bpf(h->reg);
	char why[512];

	if (!arr)
		return NULL;
	if (h->metrics_wanted && !egr_metrics_serving(h->metrics))
		add(arr, "metrics: /metrics is not served (the address did not bind)");
	if (!egr_reg_dns(h->reg))
		add(arr, "dns: the DNS proxy is down; sandboxes get no DNS");
	if (egr_billing_failing(h->billing, why, sizeof(why)))
		add(arr, "billing: the last export failed (%s); the deltas are kept for the next",
		    why);
	if (egr_bpf_counters(b, cnt) == 0) {
		if (cnt[EGR_CNT_EVENTS_LOST] > h->lost_seen) {
			h->lost_seen = cnt[EGR_CNT_EVENTS_LOST];
			h->lost_rise_ns = now;
		}
		if (h->lost_rise_ns && now - h->lost_rise_ns < EGR_HEALTH_LOSS_WINDOW_NS)
			add(arr, "events: kernel events lost within the last minute (%llu in all)",
			    (unsigned long long)h->lost_seen);
	} else {
		add(arr, "events: the kernel counters cannot be read");
	}
	/* A pin removed by hand means the next egressd would not find that
	 * state: maps recreated empty, a sandbox's links not adopted. */
	egr_bpf_missing_map_pins(b, missing_pin, arr);
	pins_of_sandboxes(h, b, arr);
	return arr;
}
