// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Deny budgets: suppressed and lost kernel events per sandbox. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>

#include "budgets.h"
#include "kernel/maps.h"

struct egr_budget_seen {
	uint32_t id;
	uint64_t suppressed, lost;
	struct egr_budget_seen *next;
};

static struct egr_budget_seen *seen_of(struct egr_budgets *b, uint32_t id)
{
	struct egr_budget_seen *s;

	for (s = b->seen; s; s = s->next)
		if (s->id == id)
			return s;
	s = calloc(1, sizeof(*s));
	if (s) {
		s->id = id;
		s->next = b->seen;
		b->seen = s;
	}
	return s;
}

/*
 * One aggregated record per sandbox and tick for what its deny budget held
 * back ("N denies suppressed, top destinations"), and one per sandbox for
 * its events the ring had no room for, so that losses are attributed.
 */
struct report_walk {
	struct egr_budgets *b;
	struct egr_bus *bus;
};

static int report_one(void *ctx, uint32_t key, const struct egr_deny_budget *vp)
{
	struct report_walk *w = ctx;
	struct egr_deny_budget v = *vp;
	struct egr_budget_seen *s = seen_of(w->b, key);

	if (!s)
		return 0;
	if (v.suppressed > s->suppressed) {
		struct egr_rec r = { .kind = EGR_REC_SUPPRESSED, .sandbox = key,
				     .suppressed = { .n = v.suppressed - s->suppressed,
						     .total = v.suppressed,
						     .budget = &v } };

		s->suppressed = v.suppressed;
		egr_bus_publish(w->bus, &r);
	}
	if (v.lost > s->lost) {
		struct egr_rec r = { .kind = EGR_REC_LOSS, .sandbox = key,
				     .loss = { .lost = v.lost - s->lost, .total = v.lost,
					       .reason = "ring buffer full" } };

		s->lost = v.lost;
		egr_bus_publish(w->bus, &r);
	}
	return 0;
}

void egr_budgets_report(struct egr_budgets *b, struct egr_bpf *bpf, struct egr_bus *bus)
{
	struct report_walk w = { b, bus };
	struct egr_deny_budget v;

	egr_bpf_each_deny_budget(bpf, report_one, &w);
	/* Forget sandboxes whose budget is gone (detached). */
	for (struct egr_budget_seen **ps = &b->seen; *ps;) {
		struct egr_budget_seen *s = *ps;

		if (egr_bpf_deny_budget(bpf, s->id, &v) == -ENOENT) {
			*ps = s->next;
			free(s);
			continue;
		}
		ps = &s->next;
	}
}

void egr_budgets_free(struct egr_budgets *b)
{
	while (b->seen) {
		struct egr_budget_seen *s = b->seen;

		b->seen = s->next;
		free(s);
	}
}

int egr_budget_figures(struct egr_bpf *bpf, uint32_t sandbox_id, uint64_t *suppressed,
		       uint64_t *lost)
{
	struct egr_deny_budget v;
	int err;

	*suppressed = *lost = 0;
	if (!bpf)
		return -EINVAL;
	if ((err = egr_bpf_deny_budget(bpf, sandbox_id, &v)))
		return err == -ENOENT ? 0 : err;
	*suppressed = v.suppressed;
	*lost = v.lost;
	return 0;
}

struct budget_family {
	struct egr_registry *reg;
	struct egr_mbuf *mb;
	const char *name;
	bool lost;
};

static int budget_line(void *ctx, uint32_t key, const struct egr_deny_budget *v)
{
	struct budget_family *f = ctx;
	const struct egr_sb *sb = egr_reg_find(f->reg, NULL, key);

	if (!sb)
		return 0; /* a detached sandbox's figures are in its audit record */
	egr_mbuf_printf(f->mb, "%s{tenant=\"", f->name);
	egr_mbuf_label(f->mb, sb->tenant ? sb->tenant : "");
	egr_mbuf_printf(f->mb, "\",sandbox=\"%u\"} %" PRIu64 "\n", key,
			(uint64_t)(f->lost ? v->lost : v->suppressed));
	return 0;
}

static void budget_family(struct egr_bpf *bpf, struct egr_registry *reg, struct egr_mbuf *mb,
			  const char *name, const char *help, bool lost)
{
	struct budget_family f = { reg, mb, name, lost };

	egr_mbuf_family(mb, name, "counter", help);
	egr_bpf_each_deny_budget(bpf, budget_line, &f);
}

void egr_budgets_metrics(struct egr_bpf *bpf, struct egr_registry *reg, struct egr_mbuf *mb)
{
	budget_family(bpf, reg, mb, "egressd_events_suppressed_total",
		      "Deny events past the sandbox's kernel budget, reported in aggregate "
		      "(docs/events.md).",
		      false);
	budget_family(bpf, reg, mb, "egressd_sandbox_events_lost_total",
		      "Events of the sandbox the ring buffer had no room for.", true);
}
