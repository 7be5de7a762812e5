// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <dirent.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bpfstate.h"
#include "cgroup.h"
#include "egressd.skel.h"
#include "log.h"
#include "migrate.h"

#define BPFFS_ROOT "/sys/fs/bpf"

uint64_t egr_bpf_deny_rate = 100, egr_bpf_deny_burst = 200;

const char *const egr_counter_names[EGR_CNT_MAX] = {
	[EGR_CNT_CONNECT_ALLOW] = "connect_allowed",
	[EGR_CNT_CONNECT_DENY] = "connect_denied",
	[EGR_CNT_SENDMSG_ALLOW] = "sendmsg_allowed",
	[EGR_CNT_SENDMSG_DENY] = "sendmsg_denied",
	[EGR_CNT_SOCK_CREATE_ALLOW] = "sock_create_allowed",
	[EGR_CNT_SOCK_CREATE_DENY] = "sock_create_denied",
	[EGR_CNT_NO_SANDBOX] = "no_sandbox_denied",
	[EGR_CNT_EXPIRED] = "expired_denied",
	[EGR_CNT_SETSOCKOPT_DENY] = "setsockopt_denied",
	[EGR_CNT_BACKSTOP_DROP] = "backstop_dropped",
	[EGR_CNT_INBOUND_DROP] = "inbound_dropped",
	[EGR_CNT_QUOTA_DROP] = "quota_dropped",
	[EGR_CNT_EVENTS_LOST] = "events_lost",
	[EGR_CNT_METER_FULL] = "meter_full",
};

static int libbpf_log(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char buf[1024];
	size_t n;

	if (level == LIBBPF_DEBUG && egr_log_get_level() < EGR_LOG_DEBUG)
		return 0;
	vsnprintf(buf, sizeof(buf), fmt, ap);
	n = strlen(buf);
	if (n && buf[n - 1] == '\n')
		buf[n - 1] = '\0';
	egr_log(level == LIBBPF_WARN ? EGR_LOG_WARN : EGR_LOG_DEBUG, "libbpf: %s", buf);
	return 0;
}

static bool is_bpffs(const char *path)
{
	struct statfs sfs;

	return statfs(path, &sfs) == 0 && sfs.f_type == BPF_FS_MAGIC;
}

/* bpffs is where enforcement outlives egressd. If the host has not mounted
 * it at its usual place, do it (never remount or unmount an existing one). */
static int ensure_bpffs(const char *dir)
{
	char parent[PATH_MAX];
	char *slash;

	if (strlen(dir) >= sizeof(parent) || dir[0] != '/')
		return -EINVAL;
	strcpy(parent, dir);
	slash = strrchr(parent, '/');
	if (slash == parent)
		return -EINVAL;
	*slash = '\0';
	if (is_bpffs(parent))
		return 0;
	if (strcmp(parent, BPFFS_ROOT) != 0) {
		log_error("%s is not on a bpffs mount", dir);
		return -ENOTSUP;
	}
	if (mount("bpf", BPFFS_ROOT, "bpf", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700") < 0) {
		int err = -errno;

		log_error("mount bpffs at %s: %s", BPFFS_ROOT, strerror(-err));
		return err;
	}
	log_info("mounted bpffs at %s", BPFFS_ROOT);
	return 0;
}

static int mkdir_p1(const char *path, mode_t mode)
{
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static void probe_features(struct egr_features *f)
{
	char mnt[PATH_MAX];

	f->btf = access("/sys/kernel/btf/vmlinux", R_OK) == 0;
	f->cgroup2 = egr_cgroup2_mount(mnt, sizeof(mnt)) == 0;
	f->bpffs = is_bpffs(BPFFS_ROOT);
	f->cgroup_sock_addr = libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_CGROUP_SOCK_ADDR, NULL) > 0;
	f->cgroup_sock = libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_CGROUP_SOCK, NULL) > 0;
	/* Links for cgroup programs arrived together with BPF_LINK_CREATE
	 * support for them (5.7); the attach itself proves it below. */
	f->bpf_link = true;
	f->setsockopt = libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_CGROUP_SOCKOPT, NULL) > 0;
	f->skb = libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_CGROUP_SKB, NULL) > 0;
	/* Mode 2 is filter; PR_GET_SECCOMP answers 0 for "not confined" on a
	 * kernel that has seccomp at all, EINVAL where it has none. */
	f->seccomp = prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0;
	/* The LSM program type loads only where BPF trampolines exist: the
	 * probe says what `bpftool feature probe` says, whatever the LSM list
	 * in /sys/kernel/security/lsm claims. */
	f->lsm_cgroup = libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_LSM, NULL) > 0;
}

json_t *egr_features_layers(const struct egr_features *f)
{
	return json_pack("{s:b, s:b, s:b, s:b, s:b, s:b, s:b}", "sock_addr", f->cgroup_sock_addr,
			 "sock_create", f->cgroup_sock, "setsockopt", f->setsockopt, "skb_backstop",
			 f->skb, "seccomp", f->seccomp, "lsm_cgroup", f->lsm_cgroup,
			 "escape_guard", f->escape_guard);
}

/* Pins of this ABI version: <dir>/v<EGR_ABI_VERSION>/maps. */
static int maps_dir(const char *dir, char *buf, size_t len)
{
	if (snprintf(buf, len, "%s/v%d/maps", dir, EGR_ABI_VERSION) >= (int)len)
		return -ENAMETOOLONG;
	return 0;
}

/* IN_MOVED_TO too: a rename over a pin replaces it without removing a name. */
#define PIN_WATCH_MASK                                                                     \
	(IN_DELETE | IN_DELETE_SELF | IN_MOVED_FROM | IN_MOVED_TO | IN_MOVE_SELF | IN_ONLYDIR)

static void watch(struct egr_bpf *b, const char *dir)
{
	if (b->pin_watch_fd >= 0 && inotify_add_watch(b->pin_watch_fd, dir, PIN_WATCH_MASK) < 0 &&
	    errno != ENOENT)
		log_warn("inotify watch %s: %m", dir);
}

/* <dir>, the directories of the map pins, links/ and every links/<id>/
 * egressd holds links of. A watch on an inode already watched is the same
 * watch: cheap to repeat. */
static void watch_dirs(struct egr_bpf *b)
{
	char path[PATH_MAX];
	struct bpf_map *map;

	if (b->pin_watch_fd < 0)
		return;
	watch(b, b->dir);
	bpf_object__for_each_map(map, b->skel->obj)
	{
		const char *pin = bpf_map__pin_path(map);
		char *slash;

		if (!pin || snprintf(path, sizeof(path), "%s", pin) >= (int)sizeof(path))
			continue;
		slash = strrchr(path, '/');
		if (slash)
			*slash = '\0';
		watch(b, path); /* the same directory for every map: one watch */
		if (slash && (slash = strrchr(path, '/')) && (size_t)(slash - path) > strlen(b->dir)) {
			*slash = '\0';
			watch(b, path); /* its parent (a versioned layout) */
		}
	}
	snprintf(path, sizeof(path), "%s/links", b->dir);
	watch(b, path);
	for (size_t i = 0; i < b->nlinks; i++) {
		snprintf(path, sizeof(path), "%s/links/%u", b->dir, b->links[i].sandbox_id);
		watch(b, path);
	}
}

int egr_bpf_pin_watch_fd(const struct egr_bpf *b)
{
	return b->pin_watch_fd;
}

bool egr_bpf_pin_events(struct egr_bpf *b)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	bool any = false;

	if (b->pin_watch_fd < 0)
		return false;
	/* Bounded: the fd is non-blocking and a burst of events is one check. */
	for (int i = 0; i < 64 && read(b->pin_watch_fd, buf, sizeof(buf)) > 0; i++)
		any = true;
	return any;
}

/* Programs attached per sandbox cgroup (a global tracing program is not). */
static bool is_cgroup_prog(const struct bpf_program *prog)
{
	switch (bpf_program__type(prog)) {
	case BPF_PROG_TYPE_CGROUP_SKB:
	case BPF_PROG_TYPE_CGROUP_SOCK:
	case BPF_PROG_TYPE_CGROUP_SOCK_ADDR:
	case BPF_PROG_TYPE_CGROUP_SOCKOPT:
	case BPF_PROG_TYPE_CGROUP_SYSCTL:
	case BPF_PROG_TYPE_CGROUP_DEVICE:
		return true;
	case BPF_PROG_TYPE_LSM:
		return bpf_program__expected_attach_type(prog) == BPF_LSM_CGROUP;
	default:
		return false;
	}
}

static int attach_one(struct egr_bpf *b, struct egr_link_set *ls, size_t p, int cg_fd,
		      const char *dir, const char *cgroup_path);
static struct egr_link_set *link_set(struct egr_bpf *b, uint32_t sandbox_id, bool create);
static int links_dir(struct egr_bpf *b, uint32_t sandbox_id, char *buf, size_t len);
static int ensure_links_dir(struct egr_bpf *b, const char *dir);

static int prog_index(const struct egr_bpf *b, const char *name)
{
	for (size_t p = 0; p < b->nprogs; p++)
		if (strcmp(b->prog_names[p], name) == 0)
			return (int)p;
	return -1;
}

/* An upgrade adds the link of a program new since the old version
 * (migrate.h): attached like any other, its fd kept in the sandbox's set. */
static int mig_attach(void *ctx, uint32_t sandbox_id, uint64_t cgroup_id, const char *prog)
{
	struct egr_bpf *b = ctx;
	char cg[PATH_MAX], dir[PATH_MAX];
	int p = prog_index(b, prog), cg_fd, err;
	struct egr_link_set *ls;

	if (p < 0)
		return -ENOENT;
	err = egr_cgroup_path_by_id(cgroup_id, cg, sizeof(cg));
	if (err)
		return err == -ESTALE ? -ENOENT : err;
	if ((err = links_dir(b, sandbox_id, dir, sizeof(dir))) || (err = ensure_links_dir(b, dir)))
		return err;
	ls = link_set(b, sandbox_id, true);
	if (!ls)
		return -ENOMEM;
	cg_fd = open(cg, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cg_fd < 0)
		return errno == ENOENT ? -ENOENT : -errno;
	err = attach_one(b, ls, (size_t)p, cg_fd, dir, cg);
	close(cg_fd);
	return err;
}

static void mig_detach(void *ctx, uint32_t sandbox_id, const char *prog)
{
	struct egr_bpf *b = ctx;
	struct egr_link_set *ls = link_set(b, sandbox_id, false);
	int p = prog_index(b, prog);
	char dir[PATH_MAX], path[PATH_MAX];

	if (!ls || p < 0 || ls->fd[p] < 0)
		return;
	if (bpf_link_detach(ls->fd[p]) < 0 && errno != ENOLINK)
		log_error("upgrade rollback: detach %s of sandbox %u: %m", prog, sandbox_id);
	close(ls->fd[p]);
	ls->fd[p] = -1;
	if (!links_dir(b, sandbox_id, dir, sizeof(dir))) {
		snprintf(path, sizeof(path), "%s/%s", dir, prog);
		if (unlink(path) < 0 && errno != ENOENT)
			log_warn("upgrade rollback: unpin %s: %m", path);
	}
}

int egr_bpf_open(struct egr_bpf *b, const char *dir, struct egr_features *feat)
{
	struct bpf_program *prog;
	char path[PATH_MAX];
	struct egr_mig *mig = NULL;
	int err;

	memset(b, 0, sizeof(*b));
	b->pin_watch_fd = -1;
	libbpf_set_print(libbpf_log);
	if (snprintf(b->dir, sizeof(b->dir), "%s", dir) >= (int)sizeof(b->dir))
		return -ENAMETOOLONG;

	err = ensure_bpffs(dir);
	probe_features(feat);
	if (err)
		return err;
	if (!feat->cgroup2) {
		log_error("no cgroup v2 hierarchy is mounted");
		return -ENOTSUP;
	}
	if (!feat->cgroup_sock_addr || !feat->cgroup_sock) {
		log_error("kernel lacks cgroup sock_addr or sock programs");
		return -ENOTSUP;
	}
	if ((err = maps_dir(dir, b->maps, sizeof(b->maps))))
		return err;
	if ((err = mkdir_p1(dir, 0700))) {
		log_error("create %s: %s", dir, strerror(-err));
		return err;
	}
	/* Pins of another ABI version: convert them or refuse (migrate.h). */
	err = egr_mig_prepare(dir, &mig);
	if (err)
		return err;

	snprintf(path, sizeof(path), "%s/v%d", dir, EGR_ABI_VERSION);
	if ((err = mkdir_p1(path, 0700)) || (err = mkdir_p1(b->maps, 0700))) {
		log_error("create %s: %s", b->maps, strerror(-err));
		goto fail;
	}
	snprintf(path, sizeof(path), "%s/links", dir);
	if ((err = mkdir_p1(path, 0700))) {
		log_error("create %s: %s", path, strerror(-err));
		goto fail;
	}

	snprintf(path, sizeof(path), "%s/egr_sandboxes", b->maps);
	b->reused_maps = access(path, F_OK) == 0 && !mig;

	LIBBPF_OPTS(bpf_object_open_opts, opts, .pin_root_path = b->maps);
	b->skel = egressd_bpf__open_opts(&opts);
	if (!b->skel) {
		err = -errno;
		log_error("open BPF object: %s", strerror(-err));
		goto fail;
	}
	/* Per-sandbox deny-event budget (docs/events.md); 0 turns it off. */
	b->skel->rodata->egr_deny_events_per_s = egr_bpf_deny_rate;
	b->skel->rodata->egr_deny_events_burst = egr_bpf_deny_burst;
	/* The every-family layer exists only where the host can load it. */
	bpf_program__set_autoload(b->skel->progs.egr_lsm_socket_create, feat->lsm_cgroup);
	if (mig && (err = egr_mig_reuse_maps(mig, b->skel->obj)))
		goto fail;
	err = egressd_bpf__load(b->skel);
	if (err) {
		log_error("load BPF programs: %s%s", strerror(-err),
			  b->reused_maps ? " (pinned maps incompatible with this egressd?)" : "");
		goto fail;
	}
	bpf_object__for_each_program(prog, b->skel->obj)
	{
		if (!bpf_program__autoload(prog) || !is_cgroup_prog(prog))
			continue; /* a layer this host cannot load, or a global program */
		if (b->nprogs == EGR_MAX_CGROUP_PROGS) {
			log_error("more than %d cgroup programs", EGR_MAX_CGROUP_PROGS);
			err = -E2BIG;
			goto fail;
		}
		b->prog_names[b->nprogs++] = bpf_program__name(prog);
	}
	if (mig) {
		const struct egr_mig_attach ops = { .attach = mig_attach, .detach = mig_detach,
						    .ctx = b };

		err = egr_mig_commit(mig, b->skel->obj, &ops);
		if (err)
			goto fail;
		b->migrated_from = egr_mig_from_version(mig);
		egr_mig_free(mig);
		mig = NULL;
	}
	b->fd_storage = bpf_map__fd(b->skel->maps.egr_cg_storage);
	b->fd_sandboxes = bpf_map__fd(b->skel->maps.egr_sandboxes);
	b->fd_allow4 = bpf_map__fd(b->skel->maps.egr_allow4);
	b->fd_allow6 = bpf_map__fd(b->skel->maps.egr_allow6);
	b->fd_counters = bpf_map__fd(b->skel->maps.egr_counters);
	b->fd_meter_sb = bpf_map__fd(b->skel->maps.egr_meter_sb);
	b->fd_meter_tenant = bpf_map__fd(b->skel->maps.egr_meter_tenant);
	b->fd_quota_sb = bpf_map__fd(b->skel->maps.egr_quota_sb);
	b->fd_quota_tenant = bpf_map__fd(b->skel->maps.egr_quota_tenant);
	b->fd_events = bpf_map__fd(b->skel->maps.egr_events);
	b->fd_dests = bpf_map__fd(b->skel->maps.egr_sb_dests);
	b->fd_dests_n = bpf_map__fd(b->skel->maps.egr_dests_n);
	b->fd_deny_budget = bpf_map__fd(b->skel->maps.egr_deny_budget);
	b->fd_dns_clients = bpf_map__fd(b->skel->maps.egr_dns_clients);
	b->fd_dns_clients_n = bpf_map__fd(b->skel->maps.egr_dns_clients_n);
	b->fd_inspect_orig = bpf_map__fd(b->skel->maps.egr_inspect_orig);
	b->fd_sb_cgroups = bpf_map__fd(b->skel->maps.egr_sandbox_cgroups);
	b->fd_proc_home = bpf_map__fd(b->skel->maps.egr_proc_home);
	b->pin_watch_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (b->pin_watch_fd < 0)
		log_warn("inotify: %m; removed pins are noticed by the periodic check only");
	watch_dirs(b);
	log_info("BPF programs loaded (ABI version %d), maps %s under %s", EGR_ABI_VERSION,
		 b->migrated_from ? "migrated" : b->reused_maps ? "adopted" : "pinned", b->maps);
	return 0;
fail:
	for (size_t i = 0; i < b->nlinks; i++)
		for (size_t p = 0; p < EGR_MAX_CGROUP_PROGS; p++)
			if (b->links[i].fd[p] >= 0)
				close(b->links[i].fd[p]);
	free(b->links);
	b->links = NULL;
	b->nlinks = b->caplinks = 0;
	b->nprogs = 0;
	if (b->skel)
		egressd_bpf__destroy(b->skel);
	b->skel = NULL;
	if (mig) {
		/* A refused upgrade leaves no empty version directory behind. */
		rmdir(b->maps);
		snprintf(path, sizeof(path), "%s/v%d", dir, EGR_ABI_VERSION);
		rmdir(path);
	}
	egr_mig_free(mig);
	return err;
}

void egr_bpf_close(struct egr_bpf *b)
{
	/* Only our own references go: pinned maps and links stay. */
	for (size_t i = 0; i < b->nlinks; i++)
		for (size_t p = 0; p < EGR_MAX_CGROUP_PROGS; p++)
			if (b->links[i].fd[p] >= 0)
				close(b->links[i].fd[p]);
	free(b->links);
	b->links = NULL;
	b->nlinks = b->caplinks = 0;
	if (b->pin_watch_fd >= 0)
		close(b->pin_watch_fd);
	b->pin_watch_fd = -1;
	if (b->skel)
		egressd_bpf__destroy(b->skel);
	b->skel = NULL;
}

static struct egr_link_set *link_set(struct egr_bpf *b, uint32_t sandbox_id, bool create)
{
	struct egr_link_set *ls;

	for (size_t i = 0; i < b->nlinks; i++)
		if (b->links[i].sandbox_id == sandbox_id)
			return &b->links[i];
	if (!create)
		return NULL;
	if (b->nlinks == b->caplinks) {
		size_t cap = b->caplinks ? b->caplinks * 2 : 16;
		struct egr_link_set *n = realloc(b->links, cap * sizeof(*n));

		if (!n)
			return NULL;
		b->links = n;
		b->caplinks = cap;
	}
	ls = &b->links[b->nlinks++];
	ls->sandbox_id = sandbox_id;
	for (size_t p = 0; p < EGR_MAX_CGROUP_PROGS; p++)
		ls->fd[p] = -1;
	return ls;
}

/* Close our fds of the sandbox's links (detach: after BPF_LINK_DETACH). */
static void link_set_drop(struct egr_bpf *b, uint32_t sandbox_id)
{
	for (size_t i = 0; i < b->nlinks; i++) {
		if (b->links[i].sandbox_id != sandbox_id)
			continue;
		for (size_t p = 0; p < EGR_MAX_CGROUP_PROGS; p++)
			if (b->links[i].fd[p] >= 0)
				close(b->links[i].fd[p]);
		b->links[i] = b->links[--b->nlinks];
		return;
	}
}

static int links_dir(struct egr_bpf *b, uint32_t sandbox_id, char *buf, size_t len)
{
	if (snprintf(buf, len, "%s/links/%u", b->dir, sandbox_id) >= (int)len)
		return -ENAMETOOLONG;
	return 0;
}

/* <dir>/links/<id>, and <dir> and <dir>/links too: someone may have
 * removed them (docs/security.md); later attaches must keep working. */
static int ensure_links_dir(struct egr_bpf *b, const char *dir)
{
	char path[PATH_MAX];
	int err;

	snprintf(path, sizeof(path), "%s/links", b->dir);
	if ((err = mkdir_p1(b->dir, 0700)) || (err = mkdir_p1(path, 0700)) ||
	    (err = mkdir_p1(dir, 0700)))
		log_error("create %s: %s", dir, strerror(-err));
	return err;
}

/* Attach program p to cg_fd, pin the link and keep its fd. */
static int attach_one(struct egr_bpf *b, struct egr_link_set *ls, size_t p, int cg_fd,
		      const char *dir, const char *cgroup_path)
{
	struct bpf_program *prog = bpf_object__find_program_by_name(b->skel->obj,
								     b->prog_names[p]);
	char path[PATH_MAX];
	struct bpf_link *link;
	int err, fd;

	if (!prog)
		return -ENOENT;
	/* Links attach with multi semantics: a sandbox's own programs (or a
	 * nested sandbox's) add to these, never replace them, and an
	 * unprivileged process cannot detach them. */
	link = bpf_program__attach_cgroup(prog, cg_fd);
	if (!link) {
		err = -errno;
		log_error("attach %s to %s: %s", b->prog_names[p], cgroup_path, strerror(-err));
		return err;
	}
	snprintf(path, sizeof(path), "%s/%s", dir, b->prog_names[p]);
	fd = fcntl(bpf_link__fd(link), F_DUPFD_CLOEXEC, 3);
	err = fd < 0 ? -errno : bpf_obj_pin(fd, path) < 0 ? -errno : 0;
	if (err) {
		log_error("pin link %s: %s", path, strerror(-err));
		bpf_link__detach(link);
		if (fd >= 0)
			close(fd);
	} else {
		ls->fd[p] = fd; /* our own reference: a removed pin detaches nothing */
	}
	bpf_link__destroy(link);
	return err;
}

static int attach_programs(struct egr_bpf *b, uint32_t sandbox_id, const char *cgroup_path,
			   bool only_missing)
{
	char dir[PATH_MAX];
	struct egr_link_set *ls;
	int cg_fd, err;

	err = links_dir(b, sandbox_id, dir, sizeof(dir));
	if (err)
		return err;
	ls = link_set(b, sandbox_id, true);
	if (!ls)
		return -ENOMEM;
	cg_fd = open(cgroup_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cg_fd < 0)
		return -errno;
	err = ensure_links_dir(b, dir);
	if (!err)
		watch(b, dir);
	for (size_t p = 0; !err && p < b->nprogs; p++) {
		if (only_missing && ls->fd[p] >= 0)
			continue;
		err = attach_one(b, ls, p, cg_fd, dir, cgroup_path);
	}
	close(cg_fd);
	return err;
}

int egr_bpf_attach(struct egr_bpf *b, uint32_t sandbox_id, const char *cgroup_path)
{
	int err = attach_programs(b, sandbox_id, cgroup_path, false);

	if (err)
		egr_bpf_detach(b, sandbox_id);
	return err;
}

int egr_bpf_attach_missing(struct egr_bpf *b, uint32_t sandbox_id, const char *cgroup_path)
{
	return attach_programs(b, sandbox_id, cgroup_path, true);
}

int egr_bpf_detach(struct egr_bpf *b, uint32_t sandbox_id)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct dirent *de;
	int err, ret = 0;
	DIR *d;

	err = links_dir(b, sandbox_id, dir, sizeof(dir));
	if (err)
		return err;
	/* Our own references first: a link whose pin is gone is still attached
	 * through them. ENOLINK: the cgroup was released, the link with it. */
	struct egr_link_set *ls = link_set(b, sandbox_id, false);

	for (size_t p = 0; ls && p < EGR_MAX_CGROUP_PROGS; p++)
		if (ls->fd[p] >= 0 && bpf_link_detach(ls->fd[p]) < 0 && errno != ENOLINK) {
			ret = -errno;
			log_warn("detach link %s of sandbox %u: %s", b->prog_names[p], sandbox_id,
				 strerror(-ret));
		}
	if (ret)
		return ret; /* keep the fds: still enforced, retry possible */
	link_set_drop(b, sandbox_id);
	d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d))) {
		struct bpf_link *link;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		link = bpf_link__open(path);
		if (!link) {
			ret = -errno;
			log_warn("open pinned link %s: %s", path, strerror(-ret));
			if (unlink(path) < 0)
				log_warn("unlink %s: %m", path);
			continue;
		}
		/* An explicit detach, so nobody else's reference keeps it in force.
		 * ENOLINK: the cgroup is already gone and the link with it. */
		err = bpf_link__detach(link);
		if (err && err != -ENOLINK)
			log_warn("detach %s: %s", path, strerror(-err));
		err = bpf_link__unpin(link);
		if (err) {
			ret = err;
			log_warn("unpin %s: %s", path, strerror(-err));
		}
		bpf_link__destroy(link);
	}
	closedir(d);
	if (rmdir(dir) < 0 && errno != ENOENT) {
		ret = -errno;
		log_warn("rmdir %s: %s", dir, strerror(-ret));
	}
	return ret;
}

bool egr_bpf_links_complete(struct egr_bpf *b, uint32_t sandbox_id)
{
	char dir[PATH_MAX], path[PATH_MAX];

	if (links_dir(b, sandbox_id, dir, sizeof(dir)))
		return false;
	for (size_t p = 0; p < b->nprogs; p++) {
		snprintf(path, sizeof(path), "%s/%s", dir, b->prog_names[p]);
		if (access(path, F_OK) != 0)
			return false;
	}
	return true;
}

/* Is fd the cgroup link of program p (link type, attach type, program
 * name)? A hostile tool can rename one pin over another while egressd is
 * down: the name alone proves nothing. *cg: the link's cgroup id. */
static bool link_is_prog(struct egr_bpf *b, size_t p, int fd, __u64 *cg)
{
	struct bpf_program *prog = bpf_object__find_program_by_name(b->skel->obj,
								     b->prog_names[p]);
	struct bpf_link_info info;
	struct bpf_prog_info pinfo;
	__u32 len = sizeof(info), plen = sizeof(pinfo);
	bool ok;
	int pfd;

	memset(&info, 0, sizeof(info));
	memset(&pinfo, 0, sizeof(pinfo));
	if (!prog || bpf_obj_get_info_by_fd(fd, &info, &len) < 0 ||
	    info.type != BPF_LINK_TYPE_CGROUP ||
	    info.cgroup.attach_type != bpf_program__expected_attach_type(prog))
		return false;
	pfd = bpf_prog_get_fd_by_id(info.prog_id);
	if (pfd < 0)
		return false;
	/* The kernel keeps BPF_OBJ_NAME_LEN - 1 characters of the name. */
	ok = bpf_obj_get_info_by_fd(pfd, &pinfo, &plen) == 0 &&
	     strncmp(pinfo.name, b->prog_names[p], sizeof(pinfo.name) - 1) == 0;
	close(pfd);
	*cg = info.cgroup.cgroup_id;
	return ok;
}

int egr_bpf_adopt_links(struct egr_bpf *b, uint32_t sandbox_id)
{
	bool split = false;
	__u64 first_cg = 0;
	char dir[PATH_MAX], path[PATH_MAX];
	struct egr_link_set *ls;
	int err = 0;

	if ((err = links_dir(b, sandbox_id, dir, sizeof(dir))))
		return err;
	ls = link_set(b, sandbox_id, true);
	if (!ls)
		return -ENOMEM;
	for (size_t p = 0; p < b->nprogs; p++) {
		int fd;

		if (ls->fd[p] >= 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, b->prog_names[p]);
		fd = bpf_obj_get(path);
		if (fd < 0) {
			if (errno != ENOENT)
				log_warn("open pinned link %s: %m", path);
			err = -ENOENT;
			continue;
		}
		__u64 cg = 0;

		if (!link_is_prog(b, p, fd, &cg)) {
			/* Not this program's link: as if its pin were removed (the
			 * caller attaches the program again and holds the sandbox). */
			log_error("pinned link %s is not the link of program %s; removing the pin",
				  path, b->prog_names[p]);
			close(fd);
			if (unlink(path) < 0 && errno != ENOENT)
				log_warn("unlink %s: %m", path);
			err = -ENOENT;
			continue;
		}
		if (first_cg && cg && cg != first_cg)
			split = true;
		if (!first_cg)
			first_cg = cg;
		ls->fd[p] = fd;
	}
	watch(b, dir);
	if (split) {
		log_error("links of sandbox %u are attached to different cgroups", sandbox_id);
		return -EXDEV;
	}
	return err;
}

int egr_bpf_links_cgroup_id(struct egr_bpf *b, uint32_t sandbox_id, uint64_t *cgroup_id)
{
	struct egr_link_set *ls = link_set(b, sandbox_id, false);

	for (size_t p = 0; ls && p < EGR_MAX_CGROUP_PROGS; p++) {
		struct bpf_link_info info;
		__u32 len = sizeof(info);

		if (ls->fd[p] < 0)
			continue;
		memset(&info, 0, sizeof(info));
		if (bpf_obj_get_info_by_fd(ls->fd[p], &info, &len) < 0)
			return -errno;
		*cgroup_id = info.cgroup.cgroup_id;
		return 0;
	}
	return -ENOENT;
}

static int repin(int fd, const char *path)
{
	return bpf_obj_pin(fd, path) < 0 ? -errno : 0;
}

/* The kernel's id of the link (or other bpf object) behind fd; 0 on error. */
static __u32 link_id_of_fd(int fd)
{
	struct bpf_link_info info;
	__u32 len = sizeof(info);

	memset(&info, 0, sizeof(info));
	if (bpf_obj_get_info_by_fd(fd, &info, &len) < 0)
		return 0;
	return info.id;
}

/* Does the pin at path name the link held as fd? Existence is not enough:
 * rename(2) of one link pin over another (no bpf() needed) leaves every
 * name in place while the overwritten link lives on only through our fd. */
static bool pin_names_link(const char *path, int fd)
{
	__u32 want = link_id_of_fd(fd), got;
	int pfd = bpf_obj_get(path);

	if (pfd < 0)
		return false;
	got = link_id_of_fd(pfd);
	close(pfd);
	return want && got == want;
}

/* The directories from <dir> down to the one holding pin, made again
 * (whatever layout the map pins have under <dir>). */
static int mkdir_parents(struct egr_bpf *b, const char *pin)
{
	size_t base = strlen(b->dir);
	char path[PATH_MAX];
	int err;

	if (strncmp(pin, b->dir, base) != 0 || pin[base] != '/' ||
	    snprintf(path, sizeof(path), "%s", pin) >= (int)sizeof(path))
		return -EINVAL;
	if ((err = mkdir_p1(b->dir, 0700)))
		return err;
	for (char *p = path + base + 1; (p = strchr(p, '/')); p++) {
		*p = '\0';
		err = mkdir_p1(path, 0700);
		*p = '/';
		if (err)
			return err;
	}
	return 0;
}

int egr_bpf_check_pins(struct egr_bpf *b, egr_pin_fn report, void *ctx)
{
	char dir[PATH_MAX], path[PATH_MAX];
	struct bpf_map *map;
	int missing = 0, err;

	bpf_object__for_each_map(map, b->skel->obj)
	{
		const char *pin = bpf_map__pin_path(map);

		if (!pin || access(pin, F_OK) == 0 || errno != ENOENT)
			continue;
		missing++;
		/* The map lives on through our fd: the same object, pinned again. */
		err = mkdir_parents(b, pin);
		if (!err)
			err = repin(bpf_map__fd(map), pin);
		report(ctx, EGR_PIN_MAP, 0, pin, err);
	}
	for (size_t i = 0; i < b->nlinks; i++) {
		struct egr_link_set *ls = &b->links[i];

		if (links_dir(b, ls->sandbox_id, dir, sizeof(dir)))
			continue;
		for (size_t p = 0; p < b->nprogs; p++) {
			if (ls->fd[p] < 0)
				continue;
			enum egr_pin_kind kind = EGR_PIN_LINK;

			snprintf(path, sizeof(path), "%s/%s", dir, b->prog_names[p]);
			if (access(path, F_OK) == 0) {
				if (pin_names_link(path, ls->fd[p]))
					continue;
				/* Something else sits at the name: ours goes there. */
				kind = EGR_PIN_LINK_REPLACED;
				if (unlink(path) < 0 && errno != ENOENT) {
					err = -errno;
					missing++;
					report(ctx, kind, ls->sandbox_id, path, err);
					continue;
				}
			} else if (errno != ENOENT) {
				continue;
			}
			missing++;
			err = ensure_links_dir(b, dir);
			if (!err)
				err = repin(ls->fd[p], path);
			report(ctx, kind, ls->sandbox_id, path, err);
		}
	}
	watch_dirs(b); /* directories made again need their watch again */
	return missing;
}

int egr_bpf_pinned_sandboxes(struct egr_bpf *b, uint32_t **ids, size_t *n)
{
	char dir[PATH_MAX];
	struct dirent *de;
	uint32_t *out = NULL;
	size_t cnt = 0, cap = 0;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/links", b->dir);
	d = opendir(dir);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char *end;
		unsigned long v;

		if (de->d_name[0] == '.')
			continue;
		errno = 0;
		v = strtoul(de->d_name, &end, 10);
		if (errno || *end || v == 0 || v > UINT32_MAX) {
			log_warn("ignoring unexpected entry %s/%s", dir, de->d_name);
			continue;
		}
		if (cnt == cap) {
			uint32_t *nb = realloc(out, (cap ? cap * 2 : 16) * sizeof(*out));

			if (!nb) {
				free(out);
				closedir(d);
				return -ENOMEM;
			}
			out = nb;
			cap = cap ? cap * 2 : 16;
		}
		out[cnt++] = (uint32_t)v;
	}
	closedir(d);
	*ids = out;
	*n = cnt;
	return 0;
}

int egr_bpf_set_cgroup_sandbox(struct egr_bpf *b, uint64_t cgroup_id, uint32_t sandbox_id)
{
	struct egr_cg_ref ref = { .sandbox_id = sandbox_id };

	if (bpf_map_update_elem(b->fd_storage, &cgroup_id, &ref, BPF_ANY) < 0)
		return -errno;
	/* For the escape guard, which is not attached to the cgroup. */
	if (bpf_map_update_elem(b->fd_sb_cgroups, &cgroup_id, &sandbox_id, BPF_ANY) < 0)
		return errno == E2BIG ? -ENOSPC : -errno;
	return 0;
}

int egr_bpf_forget_cgroup(struct egr_bpf *b, uint64_t cgroup_id)
{
	if (bpf_map_delete_elem(b->fd_sb_cgroups, &cgroup_id) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

/* Every process in dir and below gets home, except in the subtree of a
 * nested sandbox (its own attach gave them its home: the innermost counts). */
static int home_procs_of(struct egr_bpf *b, const char *dir, const struct egr_proc_home *home,
			 size_t *n, int depth)
{
	char path[PATH_MAX];
	struct dirent *de;
	FILE *f;
	DIR *d;
	int err = 0;

	if (depth > EGR_MAX_CGROUP_LEVELS)
		return -ELOOP;
	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	for (unsigned long pid; fscanf(f, "%lu", &pid) == 1;) {
		uint32_t tgid = (uint32_t)pid;
		struct egr_proc_home old;

		/* One the guard marked escaped stays marked (to be killed),
		 * whatever cgroup it has moved to since. */
		if (bpf_map_lookup_elem(b->fd_proc_home, &tgid, &old) == 0 &&
		    (old.flags & EGR_HOME_ESCAPED))
			continue;
		if (bpf_map_update_elem(b->fd_proc_home, &tgid, home, BPF_ANY) < 0) {
			err = errno == E2BIG ? -ENOSPC : -errno;
			break;
		}
		(*n)++;
	}
	fclose(f);
	if (err)
		return err;
	d = opendir(dir);
	if (!d)
		return -errno;
	while ((de = readdir(d)) && !err) {
		uint64_t cgid;
		uint32_t id;

		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (egr_cgroup_id(path, &cgid) == 0 &&
		    bpf_map_lookup_elem(b->fd_sb_cgroups, &cgid, &id) == 0 &&
		    id != home->sandbox_id)
			continue; /* a nested sandbox */
		err = home_procs_of(b, path, home, n, depth + 1);
		if (err == -ENOENT)
			err = 0; /* removed meanwhile */
	}
	closedir(d);
	return err;
}

int egr_bpf_home_procs(struct egr_bpf *b, const char *cgroup_path, uint64_t cgroup_id,
		       uint32_t sandbox_id, size_t *n)
{
	struct egr_proc_home home = { .cgroup_id = cgroup_id, .sandbox_id = sandbox_id };

	*n = 0;
	return home_procs_of(b, cgroup_path, &home, n, 0);
}

bool egr_bpf_cgroup_names(struct egr_bpf *b, uint64_t cgroup_id, uint32_t sandbox_id)
{
	struct egr_cg_ref ref;

	return bpf_map_lookup_elem(b->fd_storage, &cgroup_id, &ref) == 0 &&
	       ref.sandbox_id == sandbox_id;
}

bool egr_bpf_rules_match(struct egr_bpf *b, uint32_t policy_id, const struct egr_compiled *c)
{
	struct egr_rule v;

	/* An exact key finds its own entry; were it missing, a shorter prefix
	 * of the same policy with an equal value allows no less. */
	for (size_t i = 0; i < c->n4; i++) {
		struct egr_lpm4_key k;

		egr_c4_key(&c->v4[i], policy_id, &k);
		if (bpf_map_lookup_elem(b->fd_allow4, &k, &v) < 0 ||
		    memcmp(&v, &c->v4[i].rule, sizeof(v)) != 0)
			return false;
	}
	for (size_t i = 0; i < c->n6; i++) {
		struct egr_lpm6_key k;

		egr_c6_key(&c->v6[i], policy_id, &k);
		if (bpf_map_lookup_elem(b->fd_allow6, &k, &v) < 0 ||
		    memcmp(&v, &c->v6[i].rule, sizeof(v)) != 0)
			return false;
	}
	return true;
}

int egr_bpf_put_sandbox(struct egr_bpf *b, uint32_t sandbox_id, const struct egr_sandbox *sb)
{
	if (bpf_map_update_elem(b->fd_sandboxes, &sandbox_id, sb, BPF_ANY) < 0)
		return errno == E2BIG ? -ENOSPC : -errno;
	return 0;
}

int egr_bpf_get_sandbox(struct egr_bpf *b, uint32_t sandbox_id, struct egr_sandbox *sb)
{
	if (bpf_map_lookup_elem(b->fd_sandboxes, &sandbox_id, sb) < 0)
		return -errno;
	return 0;
}

int egr_bpf_del_sandbox(struct egr_bpf *b, uint32_t sandbox_id)
{
	if (bpf_map_delete_elem(b->fd_sandboxes, &sandbox_id) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

static int del_rules_upto(struct egr_bpf *b, uint32_t policy_id, const struct egr_compiled *c,
			  size_t n4, size_t n6)
{
	int ret = 0;

	for (size_t i = 0; i < n4; i++) {
		struct egr_lpm4_key k;

		egr_c4_key(&c->v4[i], policy_id, &k);
		if (bpf_map_delete_elem(b->fd_allow4, &k) < 0 && errno != ENOENT)
			ret = -errno;
	}
	for (size_t i = 0; i < n6; i++) {
		struct egr_lpm6_key k;

		egr_c6_key(&c->v6[i], policy_id, &k);
		if (bpf_map_delete_elem(b->fd_allow6, &k) < 0 && errno != ENOENT)
			ret = -errno;
	}
	if (ret)
		log_warn("could not remove every rule of policy %u: %s", policy_id, strerror(-ret));
	return ret;
}

int egr_bpf_put_rules(struct egr_bpf *b, uint32_t policy_id, const struct egr_compiled *c)
{
	size_t i4, i6 = 0;
	int err = 0;

	for (i4 = 0; i4 < c->n4; i4++) {
		struct egr_lpm4_key k;

		egr_c4_key(&c->v4[i4], policy_id, &k);
		if (bpf_map_update_elem(b->fd_allow4, &k, &c->v4[i4].rule, BPF_NOEXIST) < 0) {
			err = -errno;
			goto fail;
		}
	}
	for (i6 = 0; i6 < c->n6; i6++) {
		struct egr_lpm6_key k;

		egr_c6_key(&c->v6[i6], policy_id, &k);
		if (bpf_map_update_elem(b->fd_allow6, &k, &c->v6[i6].rule, BPF_NOEXIST) < 0) {
			err = -errno;
			goto fail;
		}
	}
	return 0;
fail:
	/* The kernel says E2BIG when a map is at max_entries. */
	if (err == -E2BIG)
		err = -ENOSPC;
	log_warn("insert rules of policy %u: %s; rolling back", policy_id, strerror(-err));
	del_rules_upto(b, policy_id, c, i4, i6);
	return err;
}

int egr_bpf_del_rules(struct egr_bpf *b, uint32_t policy_id, const struct egr_compiled *c)
{
	return del_rules_upto(b, policy_id, c, c->n4, c->n6);
}

static bool is_live(uint32_t id, const uint32_t *live, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (live[i] == id)
			return true;
	return false;
}

/* Collect then delete: deleting while walking an LPM trie with
 * get_next_key would restart the walk. */
static int gc_map(int fd, size_t key_size, const uint32_t *live, size_t nlive)
{
	uint8_t cur[sizeof(struct egr_lpm6_key)], prev[sizeof(struct egr_lpm6_key)];
	size_t cap = 1024, cnt = 0;
	uint8_t *keys = malloc(cap * key_size);
	bool first = true;
	int removed = 0;

	if (!keys)
		return -ENOMEM;
	while (bpf_map_get_next_key(fd, first ? NULL : prev, cur) == 0) {
		uint32_t pid;

		memcpy(&pid, cur + offsetof(struct egr_lpm4_key, policy_id), sizeof(pid));
		if (!is_live(pid, live, nlive)) {
			if (cnt == cap) {
				uint8_t *nk = realloc(keys, cap * 2 * key_size);

				if (!nk) {
					free(keys);
					return -ENOMEM;
				}
				keys = nk;
				cap *= 2;
			}
			memcpy(keys + cnt * key_size, cur, key_size);
			cnt++;
		}
		memcpy(prev, cur, key_size);
		first = false;
	}
	for (size_t i = 0; i < cnt; i++)
		if (bpf_map_delete_elem(fd, keys + i * key_size) == 0)
			removed++;
	free(keys);
	return removed;
}

int egr_bpf_gc_rules(struct egr_bpf *b, const uint32_t *live, size_t n)
{
	int r4, r6;

	r4 = gc_map(b->fd_allow4, sizeof(struct egr_lpm4_key), live, n);
	if (r4 < 0)
		return r4;
	r6 = gc_map(b->fd_allow6, sizeof(struct egr_lpm6_key), live, n);
	if (r6 < 0)
		return r6;
	return r4 + r6;
}

int egr_bpf_list_sandbox_ids(struct egr_bpf *b, uint32_t **ids, size_t *n)
{
	uint32_t key, *prev = NULL, *out = NULL;
	size_t cnt = 0, cap = 0;

	while (bpf_map_get_next_key(b->fd_sandboxes, prev, &key) == 0) {
		if (cnt == cap) {
			uint32_t *nb = realloc(out, (cap ? cap * 2 : 16) * sizeof(*out));

			if (!nb) {
				free(out);
				return -ENOMEM;
			}
			out = nb;
			cap = cap ? cap * 2 : 16;
		}
		out[cnt] = key;
		prev = &out[cnt];
		cnt++;
	}
	*ids = out;
	*n = cnt;
	return 0;
}

/* Sum a per-CPU egr_meter over the CPUs. */
static int read_meter(int fd, uint32_t id, struct egr_meter *out)
{
	int ncpu = libbpf_num_possible_cpus();
	struct egr_meter *vals;
	int err = 0;

	memset(out, 0, sizeof(*out));
	if (ncpu <= 0)
		return ncpu ? ncpu : -EINVAL;
	vals = calloc((size_t)ncpu, sizeof(*vals));
	if (!vals)
		return -ENOMEM;
	if (bpf_map_lookup_elem(fd, &id, vals) < 0) {
		err = -errno;
	} else {
		for (int c = 0; c < ncpu; c++) {
			const uint64_t *src = (const uint64_t *)&vals[c];
			uint64_t *dst = (uint64_t *)out;

			for (size_t f = 0; f < sizeof(*out) / sizeof(uint64_t); f++)
				dst[f] += src[f];
		}
	}
	free(vals);
	return err;
}

int egr_bpf_meter_sandbox(struct egr_bpf *b, uint32_t sandbox_id, struct egr_meter *out)
{
	return read_meter(b->fd_meter_sb, sandbox_id, out);
}

int egr_bpf_meter_tenant(struct egr_bpf *b, uint32_t tenant_id, struct egr_meter *out)
{
	return read_meter(b->fd_meter_tenant, tenant_id, out);
}

int egr_bpf_sandbox_dests(struct egr_bpf *b, uint32_t sandbox_id, bool remove,
			  struct egr_dest *out, size_t max, size_t *n)
{
	struct egr_dest_key cur, prev;
	struct egr_dest_key *dels = NULL;
	size_t ndel = 0, cap = 0;
	bool first = true;
	int err = 0;

	*n = 0;
	while (bpf_map_get_next_key(b->fd_dests, first ? NULL : &prev, &cur) == 0) {
		first = false;
		prev = cur;
		if (cur.sandbox_id != sandbox_id)
			continue;
		if (*n < max) {
			out[*n].key = cur;
			if (bpf_map_lookup_elem(b->fd_dests, &cur, &out[*n].val) == 0)
				(*n)++;
		}
		if (remove) {
			if (ndel == cap) {
				struct egr_dest_key *nd = realloc(dels, (cap ? cap * 2 : 64) *
								    sizeof(*nd));

				if (!nd) {
					err = -ENOMEM;
					break;
				}
				dels = nd;
				cap = cap ? cap * 2 : 64;
			}
			dels[ndel++] = cur;
		}
	}
	for (size_t i = 0; i < ndel; i++)
		bpf_map_delete_elem(b->fd_dests, &dels[i]);
	free(dels);
	if (remove && !err)
		bpf_map_delete_elem(b->fd_dests_n, &sandbox_id);
	return err;
}

int egr_bpf_sandbox_dests_dropped(struct egr_bpf *b, uint32_t sandbox_id, uint64_t *dropped)
{
	struct egr_dests_count c;

	*dropped = 0;
	if (bpf_map_lookup_elem(b->fd_dests_n, &sandbox_id, &c) < 0)
		return errno == ENOENT ? 0 : -errno;
	*dropped = c.dropped;
	return 0;
}

int egr_bpf_forget_sandbox_stats(struct egr_bpf *b, uint32_t sandbox_id)
{
	size_t n;

	egr_bpf_sandbox_dests(b, sandbox_id, true, NULL, 0, &n);
	bpf_map_delete_elem(b->fd_deny_budget, &sandbox_id);
	if (bpf_map_delete_elem(b->fd_meter_sb, &sandbox_id) < 0 && errno != ENOENT)
		return -errno;
	if (bpf_map_delete_elem(b->fd_quota_sb, &sandbox_id) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

int egr_bpf_counters(struct egr_bpf *b, uint64_t out[EGR_CNT_MAX])
{
	int ncpu = libbpf_num_possible_cpus();
	uint64_t *vals;

	if (ncpu <= 0)
		return ncpu ? ncpu : -EINVAL;
	vals = calloc((size_t)ncpu, sizeof(*vals));
	if (!vals)
		return -ENOMEM;
	for (uint32_t k = 0; k < EGR_CNT_MAX; k++) {
		out[k] = 0;
		if (bpf_map_lookup_elem(b->fd_counters, &k, vals) < 0)
			continue;
		for (int c = 0; c < ncpu; c++)
			out[k] += vals[c];
	}
	free(vals);
	return 0;
}
