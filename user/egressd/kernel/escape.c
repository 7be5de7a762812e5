// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
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
#include "escape_root.skel.h"
#include "cgroup.h"
#include "log.h"

#define GUARD_DIR "guard"

/* Attach prog (to cgroup cgfd, or where its section says when cgfd < 0: a
 * raw tracepoint) and pin the link at <gdir>/<name>, replacing an older pin. The older link stays attached
 * until ours is pinned (we hold it open; bpffs cannot rename over a pin),
 * so for a moment both run and a move is reported twice, never missed.
 * 1 when the older link is kept because ours failed. */
static int attach_one(struct bpf_program *prog, const char *gdir, int cgfd,
		      struct bpf_link **out)
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
	link = cgfd >= 0 ? bpf_program__attach_cgroup(prog, cgfd) : bpf_program__attach(prog);
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
static int share_maps(struct bpf_object *obj, const struct egr_bpf *b)
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

	bpf_object__for_each_map(map, obj)
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

/* The test knob (escape.h): is this part to fail as if the kernel refused it? */
static bool broken_for_test(const char *knob, const char *part)
{
	const char *v = getenv("EGRESSD_TEST_BREAK_ESCAPE_GUARD");

	if (!v || (strcmp(v, knob) && strcmp(v, "all")))
		return false;
	log_warn("escape guard: EGRESSD_TEST_BREAK_ESCAPE_GUARD=%s: the %s are not loaded (a test "
		 "knob, never set it on a real host)", v, part);
	return true;
}

static int guard_dir(const struct egr_bpf *b, char *gdir, size_t len)
{
	int err;

	if (snprintf(gdir, len, "%s/" GUARD_DIR, b->dir) >= (int)len)
		return -ENAMETOOLONG;
	if (mkdir(gdir, 0700) < 0 && errno != EEXIST) {
		err = -errno;
		log_error("escape guard: create %s: %s", gdir, strerror(-err));
		return err;
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
	if (broken_for_test("tracepoints", "tracepoints"))
		return -EOPNOTSUPP;
	err = guard_dir(b, gdir, sizeof(gdir));
	if (err)
		return err;
	g->skel = escape_bpf__open();
	if (!g->skel) {
		err = -errno;
		log_error("escape guard: open BPF object: %s", strerror(-err));
		return err;
	}
	err = share_maps(g->skel->obj, b);
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
		err = attach_one(prog, gdir, -1, &g->links[n]);
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

/* The cgroup2 root, open: the mount egressd sees must be the whole
 * hierarchy's (its root cgroup has kernfs id 1 on 64-bit hosts). */
static int open_cgroup_root(char *path, size_t len)
{
	uint64_t id = 0;
	int fd, err;

	err = egr_cgroup2_mount(path, len);
	if (err) {
		log_error("escape guard: no cgroup2 mount: %s", strerror(-err));
		return err;
	}
	err = egr_cgroup_id(path, &id);
	if (err) {
		log_error("escape guard: cgroup id of %s: %s", path, strerror(-err));
		return err;
	}
	if (id != 1) {
		log_error("escape guard: the cgroup2 mount %s is a subtree (cgroup id %llu), not the "
			  "root: programs there would miss the cgroups outside it; mount the whole "
			  "hierarchy for egressd", path, (unsigned long long)id);
		return -EXDEV;
	}
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		log_error("escape guard: open %s: %s", path, strerror(-err));
		return err;
	}
	return fd;
}

/* Does a program of this type that calls helper (with 0) load? A real
 * load, not libbpf_probe_bpf_helper(): libbpf 1.1 (Debian 12) takes the
 * verifier's "program of this type cannot use helper" of kernels after 6.1
 * for "supported", and the root programs then fail to load (6.12). */
static bool helper_loads(enum bpf_prog_type type, enum bpf_attach_type at, int helper)
{
	const struct bpf_insn insns[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_1, .imm = 0 },
		{ .code = BPF_JMP | BPF_CALL, .imm = helper },
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 1 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = at);
	int fd = bpf_prog_load(type, NULL, "GPL", insns, sizeof(insns) / sizeof(insns[0]), &opts);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

static void root_close(struct egr_escape *g)
{
	for (size_t i = 0; i < EGR_ESCAPE_ROOT_LINKS; i++) {
		if (g->root_links[i])
			bpf_link__destroy(g->root_links[i]);
		g->root_links[i] = NULL;
	}
	if (g->root_skel)
		escape_root_bpf__destroy(g->root_skel);
	g->root_skel = NULL;
}

int egr_escape_root_start(struct egr_escape *g, const struct egr_bpf *b)
{
	char gdir[PATH_MAX], root[PATH_MAX];
	struct bpf_program *prog;
	size_t n = 0;
	int cgfd, err;

	if (broken_for_test("root", "cgroup2 root programs"))
		return -EOPNOTSUPP;
	err = guard_dir(b, gdir, sizeof(gdir));
	if (err)
		return err;
	g->root_skel = escape_root_bpf__open();
	if (!g->root_skel) {
		err = -errno;
		log_error("escape guard: open the root programs: %s", strerror(-err));
		return err;
	}
	/* Some kernels let cgroup programs signal (6.18 does, Debian 12's 6.1
	 * and 6.12 do not); elsewhere the call is dead code the verifier never
	 * sees. */
	g->root_kills = helper_loads(BPF_PROG_TYPE_CGROUP_SOCK_ADDR, BPF_CGROUP_INET4_CONNECT,
				     BPF_FUNC_send_signal) &&
			helper_loads(BPF_PROG_TYPE_CGROUP_SOCK, BPF_CGROUP_INET_SOCK_CREATE,
				     BPF_FUNC_send_signal);
	g->root_skel->rodata->egr_kill_in_hook = g->root_kills;
	err = share_maps(g->root_skel->obj, b);
	if (!err)
		err = escape_root_bpf__load(g->root_skel);
	if (err) {
		log_error("escape guard: load the root programs: %s", strerror(-err));
		root_close(g);
		return err;
	}
	cgfd = open_cgroup_root(root, sizeof(root));
	if (cgfd < 0) {
		root_close(g);
		return cgfd;
	}
	bpf_object__for_each_program(prog, g->root_skel->obj)
	{
		if (n >= EGR_ESCAPE_ROOT_LINKS) {
			err = -E2BIG;
			break;
		}
		err = attach_one(prog, gdir, cgfd, &g->root_links[n]);
		if (err < 0)
			break;
		g->root_adopted |= err > 0;
		err = 0;
		n++;
	}
	close(cgfd);
	if (err) {
		/* A root program that is not attached (another program there
		 * without BPF_F_ALLOW_MULTI refuses ours: EPERM) leaves moved
		 * processes that path; the pins stay (ours or older). */
		log_error("escape guard: root programs not in force at %s: %s", root,
			  strerror(-err));
		root_close(g);
		return err;
	}
	log_info("escape guard: sock_create, connect4/6 and sendmsg4/6 at the cgroup2 root %s "
		 "refuse a moved process%s, pinned under %s%s", root,
		 g->root_kills ? " and SIGKILL it" : " (egressd kills it: this kernel does not let "
						     "cgroup programs signal)",
		 gdir, g->root_adopted ? " (some kept from an earlier egressd)" : "");
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
	root_close(g);
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
