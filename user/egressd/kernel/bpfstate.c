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

#include "kernel_priv.h"
#include "bpfstate.h"
#include "cgroup.h"
#include "egressd.skel.h"
#include "log.h"
#include "migrate.h"

#define BPFFS_ROOT "/sys/fs/bpf"

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

/* Can cgroup programs be attached as BPF links (BPF_LINK_CREATE, 5.7)?
 * Like systemd's bpf_can_link_program(): a trivial cgroup_skb program is
 * linked to the invalid fd -1. A kernel that knows the command checks the
 * target and says EBADF; one that does not says EINVAL (unknown command)
 * before looking at it. Nothing is attached either way. */
static bool bpf_link_supported(void)
{
	const struct bpf_insn insns[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 1 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = BPF_CGROUP_INET_EGRESS);
	int prog, link;
	bool ok;

	prog = bpf_prog_load(BPF_PROG_TYPE_CGROUP_SKB, "egr_link_probe", "GPL", insns, 2, &opts);
	if (prog < 0)
		return false;
	link = bpf_link_create(prog, -1, BPF_CGROUP_INET_EGRESS, NULL);
	ok = link < 0 && errno == EBADF;
	if (link >= 0)
		close(link); /* cannot happen: -1 is no cgroup */
	close(prog);
	return ok;
}

static void probe_features(struct egr_features *f)
{
	char mnt[PATH_MAX];

	f->btf = access("/sys/kernel/btf/vmlinux", R_OK) == 0;
	f->cgroup2 = egr_cgroup2_mount(mnt, sizeof(mnt)) == 0;
	f->bpffs = is_bpffs(BPFFS_ROOT);
	f->cgroup_sock_addr = libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_CGROUP_SOCK_ADDR, NULL) > 0;
	f->cgroup_sock = libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_CGROUP_SOCK, NULL) > 0;
	f->bpf_link = bpf_link_supported();
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
	return json_pack("{s:b, s:b, s:b, s:b, s:b, s:b, s:b, s:b}", "sock_addr",
			 f->cgroup_sock_addr,
			 "sock_create", f->cgroup_sock, "setsockopt", f->setsockopt, "skb_backstop",
			 f->skb, "seccomp", f->seccomp, "lsm_cgroup", f->lsm_cgroup,
			 "escape_guard", f->escape_guard, "escape_root", f->escape_root);
}

/* Pins of this ABI version: <dir>/v<EGR_ABI_VERSION>/maps. */
static int maps_dir(const char *dir, char *buf, size_t len)
{
	if (snprintf(buf, len, "%s/v%d/maps", dir, EGR_ABI_VERSION) >= (int)len)
		return -ENAMETOOLONG;
	return 0;
}
/* The map fds maps.c works on (kernel_priv.h). */
void egr_kern_maps_bind(struct egr_bpf *b)
{
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
	b->fd_dns_clients = bpf_map__fd(b->skel->maps.egr_dns_senders);
	b->fd_dns_budget = bpf_map__fd(b->skel->maps.egr_dns_budget);
	b->fd_dns_clients_n = bpf_map__fd(b->skel->maps.egr_dns_clients_n);
	b->fd_inspect_orig = bpf_map__fd(b->skel->maps.egr_inspect_orig);
	b->fd_sb_cgroups = bpf_map__fd(b->skel->maps.egr_sandbox_cgroups);
	b->fd_proc_home = bpf_map__fd(b->skel->maps.egr_proc_home);
	b->fd_sock_counts = bpf_map__fd(b->skel->maps.egr_sock_counts);
	b->fd_listen_ports = bpf_map__fd(b->skel->maps.egr_listen_ports);
	b->fd_listen_sk = bpf_map__fd(b->skel->maps.egr_listen_sk);
}

/* The sizes of include/egressd.h, in force whatever the object says. */
static const struct {
	const char *map;
	uint32_t max_entries;
} map_sizes[] = {
	{ "egr_allow4", EGR_MAX_RULES },	     { "egr_allow6", EGR_MAX_RULES },
	{ "egr_sandboxes", EGR_MAX_SANDBOXES },	     { "egr_sandbox_cgroups", EGR_MAX_SANDBOXES },
	{ "egr_meter_sb", EGR_MAX_SANDBOXES },	     { "egr_meter_tenant", EGR_MAX_SANDBOXES },
	{ "egr_quota_sb", EGR_MAX_SANDBOXES },	     { "egr_quota_tenant", EGR_MAX_SANDBOXES },
	{ "egr_dests_n", EGR_MAX_SANDBOXES },	     { "egr_dns_clients_n", EGR_MAX_SANDBOXES },
	{ "egr_deny_budget", EGR_MAX_SANDBOXES },     { "egr_sb_dests", EGR_MAX_DESTS },
	{ "egr_dns_budget", EGR_MAX_SANDBOXES },     { "egr_sock_counts", EGR_MAX_SANDBOXES },
	{ "egr_proc_home", EGR_MAX_HOMED_PROCS },   { "egr_listen_ports", EGR_MAX_LISTENERS },
};

static int set_map_sizes(struct bpf_object *obj)
{
	for (size_t i = 0; i < sizeof(map_sizes) / sizeof(map_sizes[0]); i++) {
		struct bpf_map *m = bpf_object__find_map_by_name(obj, map_sizes[i].map);
		int err = m ? bpf_map__set_max_entries(m, map_sizes[i].max_entries) : -ENOENT;

		if (err) {
			log_error("size map %s: %s", map_sizes[i].map, strerror(-err));
			return err;
		}
	}
	return 0;
}

static int load(struct egr_bpf *b, const char *dir, struct egr_features *feat)
{
	struct bpf_program *prog;
	char path[PATH_MAX];
	struct egr_mig *mig = NULL;
	int err;

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
	if (!feat->bpf_link) {
		/* Sandboxes are attached as links only (pinned, never overridden). */
		log_error("kernel lacks BPF links for cgroup programs (BPF_LINK_CREATE, 5.7)");
		return -ENOTSUP;
	}
	if ((err = maps_dir(dir, b->maps, sizeof(b->maps))))
		return err;
	/* Before anything attaches (an upgrade's new links among them). */
	if ((err = egr_kern_hold_open(b)))
		return err;
	if ((err = egr_kern_mkdir(dir, 0700))) {
		log_error("create %s: %s", dir, strerror(-err));
		return err;
	}
	/* Pins of another ABI version: convert them or refuse (migrate.h). */
	err = egr_mig_prepare(dir, &mig);
	if (err)
		return err;

	snprintf(path, sizeof(path), "%s/v%d", dir, EGR_ABI_VERSION);
	if ((err = egr_kern_mkdir(path, 0700)) || (err = egr_kern_mkdir(b->maps, 0700))) {
		log_error("create %s: %s", b->maps, strerror(-err));
		goto fail;
	}
	snprintf(path, sizeof(path), "%s/links", dir);
	if ((err = egr_kern_mkdir(path, 0700))) {
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
	/* Per-sandbox deny-event budget and the allow sample (docs/events.md). */
	b->skel->rodata->egr_deny_events_per_s = b->knobs.deny_events_per_s;
	b->skel->rodata->egr_deny_events_burst = b->knobs.deny_events_burst;
	b->skel->rodata->egr_allow_events_per_s = b->knobs.allow_events_per_s;
	if ((err = set_map_sizes(b->skel->obj)))
		goto fail;
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
		if (!bpf_program__autoload(prog) || !egr_kern_is_cgroup_prog(prog))
			continue; /* a layer this host cannot load, or a global program */
		if (b->nprogs == EGR_MAX_CGROUP_PROGS) {
			log_error("more than %d cgroup programs", EGR_MAX_CGROUP_PROGS);
			err = -E2BIG;
			goto fail;
		}
		b->prog_names[b->nprogs++] = bpf_program__name(prog);
	}
	if (mig) {
		const struct egr_mig_attach ops = { .attach = egr_kern_mig_attach,
						    .detach = egr_kern_mig_detach,
						    .before_switch = egr_kern_mig_premark, .ctx = b };

		err = egr_mig_commit(mig, b->skel->obj, &ops);
		if (err)
			goto fail;
		b->migrated_from = egr_mig_from_version(mig);
		egr_mig_free(mig);
		mig = NULL;
	}
	egr_kern_maps_bind(b);
	b->pin_watch_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (b->pin_watch_fd < 0)
		log_warn("inotify: %m; removed pins are noticed by the periodic check only");
	egr_kern_watch_dirs(b);
	log_info("BPF programs loaded (ABI version %d), maps %s under %s", EGR_ABI_VERSION,
		 b->migrated_from ? "migrated" : b->reused_maps ? "adopted" : "pinned", b->maps);
	return 0;
fail:
	egr_kern_links_release(b);
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

int egr_bpf_open(struct egr_bpf **out, const char *dir, const struct egr_bpf_knobs *knobs,
		 const struct egr_bpf_listeners *prior, struct egr_features *feat)
{
	static const struct egr_bpf_knobs defaults = EGR_BPF_KNOBS_DEFAULT;
	struct egr_bpf *b = calloc(1, sizeof(*b));
	int err;

	*out = NULL;
	if (!b)
		return -ENOMEM;
	b->pin_watch_fd = -1;
	b->hold_fd = -1;
	b->knobs = knobs ? *knobs : defaults;
	b->prior = prior;
	err = load(b, dir, feat);
	b->prior = NULL;
	if (err) {
		egr_kern_links_release(b); /* whatever an early return left */
		free(b);
		return err;
	}
	*out = b;
	return 0;
}

/* Hash-like maps get the cap; arrays, storage and the ring keep their size. */
static bool cappable(enum bpf_map_type t)
{
	switch (t) {
	case BPF_MAP_TYPE_HASH:
	case BPF_MAP_TYPE_PERCPU_HASH:
	case BPF_MAP_TYPE_LRU_HASH:
	case BPF_MAP_TYPE_LRU_PERCPU_HASH:
	case BPF_MAP_TYPE_LPM_TRIE:
		return true;
	default:
		return false;
	}
}

int egr_bpf_open_private(struct egr_bpf **out, uint32_t max_entries)
{
	struct egr_bpf *b = calloc(1, sizeof(*b));
	struct bpf_program *prog;
	struct bpf_map *map;
	int err;

	*out = NULL;
	if (!b)
		return -ENOMEM;
	b->pin_watch_fd = -1;
	b->hold_fd = -1;
	b->knobs = (struct egr_bpf_knobs)EGR_BPF_KNOBS_DEFAULT;
	libbpf_set_print(libbpf_log);
	b->skel = egressd_bpf__open();
	if (!b->skel) {
		err = -errno;
		goto fail;
	}
	bpf_object__for_each_program(prog, b->skel->obj)
		bpf_program__set_autoload(prog, false);
	bpf_object__for_each_map(map, b->skel->obj)
	{
		if (bpf_map__is_internal(map))
			continue;
		/* Never the pins of a running egressd. */
		if ((err = bpf_map__set_pin_path(map, NULL)))
			goto fail;
		if (max_entries && cappable(bpf_map__type(map)) &&
		    bpf_map__max_entries(map) > max_entries &&
		    (err = bpf_map__set_max_entries(map, max_entries)))
			goto fail;
	}
	if ((err = egressd_bpf__load(b->skel)))
		goto fail;
	egr_kern_maps_bind(b);
	*out = b;
	return 0;
fail:
	log_error("create private BPF maps: %s", strerror(-err));
	if (b->skel)
		egressd_bpf__destroy(b->skel);
	free(b);
	return err;
}

void egr_bpf_close(struct egr_bpf *b)
{
	if (!b)
		return;
	/* Only our own references go: pinned maps and links stay. */
	egr_kern_links_release(b);
	egr_kern_maps_release(b);
	if (b->pin_watch_fd >= 0)
		close(b->pin_watch_fd);
	b->pin_watch_fd = -1;
	if (b->skel)
		egressd_bpf__destroy(b->skel);
	free(b);
}

const char *egr_bpf_dir(const struct egr_bpf *b)
{
	return b->dir;
}

const struct egr_bpf_knobs *egr_bpf_knobs(const struct egr_bpf *b)
{
	return &b->knobs;
}

bool egr_bpf_reused_maps(const struct egr_bpf *b)
{
	return b->reused_maps;
}

uint64_t egr_bpf_links_refreshed(const struct egr_bpf *b)
{
	return b->refreshed_links;
}

int egr_bpf_migrated_from(const struct egr_bpf *b)
{
	return b->migrated_from;
}

struct ring_buffer *egr_bpf_ring_new(struct egr_bpf *b, int (*fn)(void *, void *, size_t),
				     void *ctx)
{
	return ring_buffer__new(b->fd_events, fn, ctx, NULL);
}

int egr_bpf_missing_map_pins(struct egr_bpf *b,
			     void (*fn)(void *ctx, const char *map, const char *path), void *ctx)
{
	struct bpf_map *map;
	struct stat st;
	int n = 0;

	if (!b->skel)
		return 0;
	bpf_object__for_each_map(map, b->skel->obj)
	{
		const char *path = bpf_map__pin_path(map);

		if (path && stat(path, &st) < 0) {
			fn(ctx, bpf_map__name(map), path);
			n++;
		}
	}
	return n;
}
