// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Removed or replaced pins are pinned again and reported; released cgroups
 * reclaimed. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "guard.h"
#include "log.h"
#include "obs/metrics.h"

/* Reclaim in slices of this much work, the next slice this soon after:
 * replies waiting on the loop wait at most one slice. */
#define EGR_GUARD_RECLAIM_SLICE_NS (2ull * 1000000ull)
#define EGR_GUARD_RECLAIM_AGAIN_NS (5ull * 1000000ull)

struct egr_guard {
	struct egr_loop *loop;
	unsigned ticks;
	int again_fd;       /* one-shot timer: the next reclaim slice */
	struct egr_bpf *bpf;
	struct egr_registry *reg;
	struct egr_auditlog *audit;
	uint64_t restored, failures;
	json_t *found; /* this check's removed pins: {"<sandbox id>": [{path, error}]} */
};

static void on_pin(void *ctx, enum egr_pin_kind kind, uint32_t sandbox_id, const char *path,
		   int err)
{
	struct egr_guard *g = ctx;
	char key[16];
	json_t *arr;

	if (err)
		g->failures++;
	else
		g->restored++;
	snprintf(key, sizeof(key), "%" PRIu32, kind == EGR_PIN_MAP ? 0 : sandbox_id);
	arr = json_object_get(g->found, key);
	if (!arr) {
		arr = json_array();
		json_object_set_new(g->found, key, arr);
	}
	json_array_append_new(arr, json_pack("{s:s, s:s, s:o}", "path", path, "kind",
					     kind == EGR_PIN_MAP		? "map"
					     : kind == EGR_PIN_LINK_REPLACED ? "link_replaced"
									      : "link",
					     "error",
					     err ? json_string(strerror(-err)) : json_null()));
}

/* One record and alert per sandbox (and one for the maps) per check, however
 * many of its pins went: `rm -rf links/<id>` is one act. */
static void report(struct egr_guard *g)
{
	const char *key;
	json_t *arr;

	json_object_foreach(g->found, key, arr) {
		uint32_t id = (uint32_t)strtoul(key, NULL, 10);
		const struct egr_sb *sb = id ? egr_reg_find(g->reg, NULL, id) : NULL;
		bool ok = true;
		char summary[256];
		size_t i;
		json_t *v;

		json_array_foreach(arr, i, v)
			if (!json_is_null(json_object_get(v, "error")))
				ok = false;
		if (id)
			snprintf(summary, sizeof(summary),
				 "%zu link pin(s) of sandbox %" PRIu32
				 " were removed from bpffs or replaced; %s",
				 json_array_size(arr), id,
				 ok ? "pinned again from egressd's own link references (enforcement "
				      "never stopped)" : "some could not be pinned again");
		else
			snprintf(summary, sizeof(summary),
				 "%zu map pin(s) were removed from bpffs; %s", json_array_size(arr),
				 ok ? "pinned again from egressd's own map references"
				    : "some could not be pinned again");
		egr_auditlog_tamper(g->audit, "pin_removed", id, sb, summary,
				    json_pack("{s:O, s:b}", "pins", arr, "restored", ok));
	}
}

static void check_pins(struct egr_guard *g)
{
	g->found = json_object();
	if (!g->found)
		return;
	if (egr_bpf_check_pins(g->bpf, on_pin, g) > 0)
		report(g);
	json_decref(g->found);
	g->found = NULL;
}

/* A slice of reclaim; what is left goes in the next slice, soon, after
 * whatever the loop has waiting. */
static void reclaim(struct egr_guard *g)
{
	struct itimerspec its = { .it_value = { 0, (long)EGR_GUARD_RECLAIM_AGAIN_NS } };

	if (!egr_reg_reclaim(g->reg, g->again_fd >= 0 ? EGR_GUARD_RECLAIM_SLICE_NS : 0))
		return;
	if (timerfd_settime(g->again_fd, 0, &its, NULL) < 0)
		log_warn("guard: cannot arm the reclaim timer: %m; the rest waits for the next tick");
}

static void on_again(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	uint64_t expirations;

	if (read(fd, &expirations, sizeof(expirations)) != sizeof(expirations))
		return;
	reclaim(ctx);
}

void egr_guard_check(struct egr_guard *g)
{
	check_pins(g);
	egr_reg_reclaim(g->reg, 0);
}

/* Something was removed from a pin directory: check now. */
static void on_watch(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_guard *g = ctx;

	if (egr_bpf_pin_events(g->bpf))
		check_pins(g);
}

/* Every second: reclaim released cgroups, and check every pin (all of
 * them only every EGR_GUARD_FULL_EVERY ticks when inotify tells us of
 * removals; each check stats every pin of every sandbox). */
static void on_tick(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_guard *g = ctx;

	if (egr_bpf_pin_watch_fd(g->bpf) < 0 || ++g->ticks % EGR_GUARD_FULL_EVERY == 0)
		check_pins(g);
	reclaim(g);
}

int egr_guard_start(struct egr_guard **out, struct egr_loop *loop, struct egr_bpf *bpf,
		    struct egr_registry *reg, struct egr_auditlog *audit)
{
	struct egr_guard *g = calloc(1, sizeof(*g));
	int err;

	if (!g)
		return -ENOMEM;
	g->bpf = bpf;
	g->reg = reg;
	g->audit = audit;
	g->loop = loop;
	g->again_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (g->again_fd < 0) {
		err = -errno;
		free(g);
		return err;
	}
	check_pins(g); /* what went while no egressd held the fds was seen at adoption */
	err = egr_loop_add(loop, g->again_fd, EPOLLIN, on_again, g);
	if (!err)
		err = egr_loop_every(loop, EGR_GUARD_INTERVAL_MS, on_tick, g);
	if (!err && egr_bpf_pin_watch_fd(bpf) >= 0)
		err = egr_loop_add(loop, egr_bpf_pin_watch_fd(bpf), EPOLLIN, on_watch, g);
	if (err) {
		egr_loop_del(loop, g->again_fd);
		close(g->again_fd);
		free(g);
		return err;
	}
	*out = g;
	return 0;
}

void egr_guard_free(struct egr_guard *g)
{
	if (!g)
		return;
	if (egr_bpf_pin_watch_fd(g->bpf) >= 0)
		egr_loop_del(g->loop, egr_bpf_pin_watch_fd(g->bpf));
	egr_loop_del(g->loop, g->again_fd);
	close(g->again_fd);
	free(g);
}

json_t *egr_guard_status(const struct egr_guard *g)
{
	return json_pack("{s:I, s:I}", "pins_restored", (json_int_t)g->restored,
			 "pin_restore_failures", (json_int_t)g->failures);
}

void egr_guard_metrics(void *ctx, struct egr_mbuf *mb)
{
	const struct egr_guard *g = ctx;

	egr_mbuf_family(mb, "egressd_sandboxes_held", "gauge",
			"Cgroups held under deny-all until the kernel releases them, by state "
			"(detached, tampered: state not trusted at start).");
	egr_mbuf_printf(mb, "egressd_sandboxes_held{state=\"detached\"} %zu\n",
			egr_reg_held_count(g->reg, EGR_HELD_DETACHED));
	egr_mbuf_printf(mb, "egressd_sandboxes_held{state=\"tampered\"} %zu\n",
			egr_reg_held_count(g->reg, EGR_HELD_TAMPERED));
	egr_mbuf_family(mb, "egressd_pins_restored_total", "counter",
			"Map and link pins found removed from bpffs and pinned again.");
	egr_mbuf_printf(mb, "egressd_pins_restored_total %llu\n",
			(unsigned long long)g->restored);
	egr_mbuf_family(mb, "egressd_pin_restore_failures_total", "counter",
			"Removed pins that could not be pinned again.");
	egr_mbuf_printf(mb, "egressd_pin_restore_failures_total %llu\n",
			(unsigned long long)g->failures);
}
