// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "kernel_priv.h"
#include "maps.h"
#include "escape.h"
#include "escape.skel.h"
#include "log.h"

#define GUARD_DIR "guard"

/* Attach prog (its section names the raw tracepoint) and pin the link at
 * <gdir>/<name>, replacing an older pin. The older link stays attached
 * until ours is pinned (we hold it open; bpffs cannot rename over a pin),
 * so for a moment both run and a move is reported twice, never missed.
 * 1 when the older link is kept because ours failed. */
static int attach_one(struct bpf_program *prog, const char *gdir, struct bpf_link **out)
{
	const char *name = bpf_program__name(prog);
	struct bpf_link *link, *old = NULL;
	char pin[PATH_MAX];
	int err;

	if (snprintf(pin, sizeof(pin), "%s/%s", gdir, name) >= (int)sizeof(pin))
		return -ENAMETOOLONG;
	if (access(pin, F_OK) == 0) {
		old = bpf_link__open(pin);
		if (!old)
			log_warn("escape guard: open pinned %s: %s", pin, strerror(errno));
	}
	link = bpf_program__attach(prog);
	if (!link) {
		err = -errno;
		log_error("escape guard: attach %s (%s): %s", name, bpf_program__section_name(prog),
			  strerror(-err));
		goto keep_old;
	}
	if (unlink(pin) < 0 && errno != ENOENT) {
		err = -errno;
		log_error("escape guard: replace %s: %s", pin, strerror(-err));
		bpf_link__destroy(link);
		goto keep_old;
	}
	err = bpf_link__pin(link, pin);
	if (err) {
		log_error("escape guard: pin %s: %s", pin, strerror(-err));
		bpf_link__destroy(link);
		if (old && bpf_link__pin(old, pin))
			log_error("escape guard: re-pin the earlier %s: %s", name, strerror(errno));
		goto keep_old;
	}
	/* Opened from its pin, a plain fd: closing it drops the last reference
	 * now that the pin names ours. */
	if (old)
		bpf_link__destroy(old);
	*out = link;
	return 0;
keep_old:
	if (old) {
		log_warn("escape guard: keeping the pinned %s of an earlier egressd", name);
		*out = old;
		return 1;
	}
	return err;
}

/* The guard shares the cgroup programs' maps: the very fds egr_bpf_open()
 * holds, whatever the pin layout, and pins none of its own. */
static int share_maps(struct escape_bpf *skel, const struct egr_bpf *b)
{
	const struct {
		const char *name;
		int fd;
	} shared[] = {
		{ "egr_sandboxes", b->fd_sandboxes },	    { "egr_counters", b->fd_counters },
		{ "egr_events", b->fd_events },		    { "egr_sandbox_cgroups", b->fd_sb_cgroups },
		{ "egr_proc_home", b->fd_proc_home },
	};
	struct bpf_map *map;
	int err;

	bpf_object__for_each_map(map, skel->obj)
	{
		const char *name = bpf_map__name(map);
		size_t i;

		if (bpf_map__is_internal(map))
			continue;
		for (i = 0; i < sizeof(shared) / sizeof(shared[0]); i++)
			if (!strcmp(name, shared[i].name))
				break;
		if (i == sizeof(shared) / sizeof(shared[0])) {
			log_error("escape guard: map %s is not one egressd shares", name);
			return -EINVAL;
		}
		if ((err = bpf_map__set_pin_path(map, NULL)) ||
		    (err = bpf_map__reuse_fd(map, shared[i].fd))) {
			log_error("escape guard: share map %s: %s", name, strerror(-err));
			return err;
		}
	}
	return 0;
}

int egr_escape_start(struct egr_escape *g, const struct egr_bpf *b)
{
	char gdir[PATH_MAX];
	struct bpf_program *prog;
	size_t n = 0;
	int err;

	memset(g, 0, sizeof(*g));
	if (snprintf(gdir, sizeof(gdir), "%s/" GUARD_DIR, b->dir) >= (int)sizeof(gdir))
		return -ENAMETOOLONG;
	if (mkdir(gdir, 0700) < 0 && errno != EEXIST) {
		err = -errno;
		log_error("escape guard: create %s: %s", gdir, strerror(-err));
		return err;
	}
	g->skel = escape_bpf__open();
	if (!g->skel) {
		err = -errno;
		log_error("escape guard: open BPF object: %s", strerror(-err));
		return err;
	}
	err = share_maps(g->skel, b);
	if (!err)
		err = escape_bpf__load(g->skel);
	if (err) {
		log_error("escape guard: load: %s", strerror(-err));
		escape_bpf__destroy(g->skel);
		g->skel = NULL;
		/* Whatever an earlier egressd pinned stays in force. */
		return err;
	}
	bpf_object__for_each_program(prog, g->skel->obj)
	{
		if (n >= EGR_ESCAPE_LINKS) {
			err = -E2BIG;
			break;
		}
		err = attach_one(prog, gdir, &g->links[n]);
		if (err < 0)
			break;
		g->adopted |= err > 0;
		err = 0;
		n++;
	}
	if (err) {
		/* Half a guard is none: a fork or exit it does not see leaves
		 * a process without its home. The pins stay (ours or older). */
		log_error("escape guard: not in force: %s", strerror(-err));
		egr_escape_close(g);
		return err;
	}
	log_info("escape guard: cgroup_attach_task, sched_process_fork and sched_process_exit "
		 "raw tracepoints attached, pinned under %s%s", gdir,
		 g->adopted ? " (some kept from an earlier egressd)" : "");
	return 0;
}

void egr_escape_close(struct egr_escape *g)
{
	/* Closing our fds leaves the pinned links in force. */
	for (size_t i = 0; i < EGR_ESCAPE_LINKS; i++) {
		if (g->links[i])
			bpf_link__destroy(g->links[i]);
		g->links[i] = NULL;
	}
	if (g->skel)
		escape_bpf__destroy(g->skel);
	g->skel = NULL;
}

int egr_escape_kill_moved(const struct egr_bpf *b, uint32_t pid)
{
	struct egr_proc_home home;
	int pfd, err = 0;

	pfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
	if (pfd < 0)
		return errno == ESRCH ? 0 : -errno;
	/* The pidfd holds the process: if it died and the pid was reused
	 * after this check, the signal goes nowhere (ESRCH). Its mark is
	 * deleted at exit (egr_task_exit), so a new process on the pid is
	 * unmarked (or marked itself, as a marked parent's child). */
	if ((err = egr_bpf_proc_home(b, pid, &home)) < 0)
		err = err == -ENOENT ? 0 : err;
	else if ((home.flags & EGR_HOME_ESCAPED) &&
		 syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0) < 0 && errno != ESRCH)
		err = -errno;
	close(pfd);
	return err;
}

struct kill_walk {
	const struct egr_bpf *b;
	int n;
};

static int kill_one(void *ctx, uint32_t pid)
{
	struct kill_walk *w = ctx;

	if (egr_escape_kill_moved(w->b, pid) == 0)
		w->n++;
	return 0;
}

int egr_escape_kill_marked(const struct egr_bpf *b)
{
	struct kill_walk w = { b, 0 };

	/* Killing does not delete entries while we walk (exit does, later);
	 * the walk is bounded by the map's size. */
	egr_bpf_each_escaped(b, kill_one, &w);
	return w.n;
}
