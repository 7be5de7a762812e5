// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The inspecting proxy's deny-event budget (docs/events.md "Rates"): the
 * same per-sandbox rate and burst as the kernel's (egr_deny_budget), so one
 * sandbox's flood of refused requests cannot push another sandbox's events
 * out of the kept history. Past the budget a deny is counted (the breaker
 * still sees every one: isb.denied) and summarised once a second in one
 * "denies_suppressed" event with origin "inspect".
 */
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "inspect_int.h"

#define NS_PER_S 1000000000ull
#define BURST_MAX 1000000ull /* keeps burst * cost far from overflow */

/* GCRA: one event costs 1/rate s; a burst of `burst` may come at once. */
static bool budget_take(struct isb *sb, uint64_t now)
{
	const struct egr_inspect_config *cfg = &sb->p->cfg;
	uint64_t cost, burst, tat;

	if (!cfg->deny_rate)
		return true;
	cost = cfg->deny_rate >= NS_PER_S ? 1 : NS_PER_S / cfg->deny_rate;
	burst = cfg->deny_burst ? cfg->deny_burst : 1;
	if (burst > BURST_MAX)
		burst = BURST_MAX;
	tat = sb->deny_tat_ns > now ? sb->deny_tat_ns : now;
	if (tat - now > (burst - 1) * cost)
		return false;
	sb->deny_tat_ns = tat + cost;
	return true;
}

void egr_insp_publish(struct isb *sb, const struct egr_inspect_event *ev)
{
	uint64_t now;

	if (!sb->p->cfg.event)
		return;
	if (ev->allowed || ev->closed) {
		sb->p->cfg.event(sb->p->cfg.ctx, ev);
		return;
	}
	now = egr_mono_ns();
	if (budget_take(sb, now)) {
		sb->p->cfg.event(sb->p->cfg.ctx, ev);
		return;
	}
	/* Held back: the summary names the last one. */
	if (!sb->sup_n && !sb->sup_report_ns)
		sb->sup_report_ns = now;
	sb->sup_n++;
	sb->sup_total++;
	sb->sup_last = *ev;
	snprintf(sb->sup_name, sizeof(sb->sup_name), "%s", ev->name ? ev->name : "");
}

void egr_insp_report_suppressed(struct isb *sb, uint64_t now_ns, bool force)
{
	struct egr_inspect_event ev;

	if (!sb->sup_n || (!force && now_ns - sb->sup_report_ns < NS_PER_S))
		return;
	ev = sb->sup_last;
	/* The strings of the last deny: its name was copied, the reason and
	 * protocol are static; nothing else of it is kept. */
	ev.name = sb->sup_name;
	ev.alpn = "";
	ev.tenant = sb->tenant;
	ev.suppressed = sb->sup_n;
	ev.suppressed_total = sb->sup_total;
	sb->sup_n = 0;
	sb->sup_report_ns = now_ns;
	if (sb->p->cfg.event)
		sb->p->cfg.event(sb->p->cfg.ctx, &ev);
}
