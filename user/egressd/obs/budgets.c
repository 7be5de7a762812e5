// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Deny budgets: suppressed and lost kernel events per sandbox. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>

#include <bpf/bpf.h>

#include "budgets.h"

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
void egr_budgets_report(struct egr_budgets *b, struct egr_bpf *bpf, struct egr_bus *bus)
{
	uint32_t key, *prev = NULL;
	struct egr_deny_budget v;

	while (bpf_map_get_next_key(bpf->fd_deny_budget, prev, &key) == 0) {
		struct egr_budget_seen *s;

		prev = &key;
		if (bpf_map_lookup_elem(bpf->fd_deny_budget, &key, &v) || !(s = seen_of(b, key)))
			continue;
		if (v.suppressed > s->suppressed) {
			struct egr_rec r = { .kind = EGR_REC_SUPPRESSED, .sandbox = key,
					     .suppressed = { .n = v.suppressed - s->suppressed,
							     .total = v.suppressed,
							     .budget = &v } };

			s->suppressed = v.suppressed;
			egr_bus_publish(bus, &r);
		}
		if (v.lost > s->lost) {
			struct egr_rec r = { .kind = EGR_REC_LOSS, .sandbox = key,
					     .loss = { .lost = v.lost - s->lost, .total = v.lost,
						       .reason = "ring buffer full" } };

			s->lost = v.lost;
			egr_bus_publish(bus, &r);
		}
	}
	/* Forget sandboxes whose budget is gone (detached). */
	for (struct egr_budget_seen **ps = &b->seen; *ps;) {
		struct egr_budget_seen *s = *ps;

		if (bpf_map_lookup_elem(bpf->fd_deny_budget, &s->id, &v) < 0 && errno == ENOENT) {
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

	*suppressed = *lost = 0;
	if (!bpf)
		return -EINVAL;
	if (bpf_map_lookup_elem(bpf->fd_deny_budget, &sandbox_id, &v))
		return errno == ENOENT ? 0 : -errno;
	*suppressed = v.suppressed;
	*lost = v.lost;
	return 0;
}

static void budget_family(struct egr_bpf *bpf, struct egr_registry *reg, struct egr_mbuf *mb,
			  const char *name, const char *help, bool lost)
{
	uint32_t key, *prev = NULL;
	struct egr_deny_budget v;

	egr_mbuf_family(mb, name, "counter", help);
	while (bpf_map_get_next_key(bpf->fd_deny_budget, prev, &key) == 0) {
		const struct egr_sb *sb = egr_reg_find(reg, NULL, key);

		prev = &key;
		if (!sb || bpf_map_lookup_elem(bpf->fd_deny_budget, &key, &v))
			continue; /* a detached sandbox's figures are in its audit record */
		egr_mbuf_printf(mb, "%s{tenant=\"", name);
		egr_mbuf_label(mb, sb->tenant ? sb->tenant : "");
		egr_mbuf_printf(mb, "\",sandbox=\"%u\"} %" PRIu64 "\n", key,
				(uint64_t)(lost ? v.lost : v.suppressed));
	}
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
