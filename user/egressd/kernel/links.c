// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The per-sandbox links (attach, adopt, detach), egressd's own reference of
 * each, and every pin: checked, watched and made again when removed
 * (links.h). Adoption of pinned links is links_adopt.c. */
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
#include <linux/mount.h>
#include <sys/syscall.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "kernel_priv.h"
#include "cgroup.h"
#include "egressd.skel.h"
#include "log.h"
#include "migrate.h"
/* IN_MOVED_TO too: a rename over a pin replaces it without removing a name. */
#define PIN_WATCH_MASK                                                                     \
	(IN_DELETE | IN_DELETE_SELF | IN_MOVED_FROM | IN_MOVED_TO | IN_MOVE_SELF | IN_ONLYDIR)

int egr_kern_mkdir(const char *path, mode_t mode)
{
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/*
 * egressd's own reference of each link. A pin in the shared bpffs is not
 * enough: unlinking it would release the link and detach the sandbox's
 * programs at once. The reference must also not be an open file, or 13 of
 * them per sandbox run into egressd's file limit (20,000 here: ~1,500
 * sandboxes). So the references are pins too, in a bpffs instance of
 * egressd's own made with fsmount and attached to no mount point: no path
 * leads there but /proc/<egressd>/fd/<hold_fd>, and when egressd exits
 * (or dies) the instance goes with its last fd and drops every reference,
 * as closing the fds did; the shared pins keep the links attached.
 * SCM_RIGHTS in a socket queue would hold them too, but its in-flight
 * count is charged to uid 0 and would make other root processes' fd
 * passing fail (ETOOMANYREFS).
 */
int egr_kern_hold_open(struct egr_bpf *b)
{
	int fs, mnt, err;

	fs = (int)syscall(SYS_fsopen, "bpf", FSOPEN_CLOEXEC);
	if (fs < 0) {
		err = -errno;
		log_error("create egressd's own bpffs instance (fsopen): %s", strerror(-err));
		return err;
	}
	if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "mode", "0700", NULL, 0) < 0 ||
	    syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) {
		err = -errno;
		close(fs);
		log_error("create egressd's own bpffs instance (fsconfig): %s", strerror(-err));
		return err;
	}
	mnt = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
			   MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
	err = mnt < 0 ? -errno : 0;
	close(fs);
	if (err) {
		log_error("create egressd's own bpffs instance (fsmount): %s", strerror(-err));
		return err;
	}
	b->hold_fd = mnt;
	return 0;
}

/* hold/<id>/<program>, as a path bpf(2) resolves (through /proc/self/fd). */
static int hold_path(const struct egr_bpf *b, uint32_t sandbox_id, size_t p, char *buf,
		     size_t len)
{
	if (b->hold_fd < 0)
		return -EBADF;
	if (snprintf(buf, len, "/proc/self/fd/%d/%u/%s", b->hold_fd, sandbox_id,
		     b->prog_names[p]) >= (int)len)
		return -ENAMETOOLONG;
	return 0;
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

/* Take egressd's own reference of link fd, program p of the sandbox. */
int egr_kern_hold_link(struct egr_bpf *b, struct egr_link_set *ls, size_t p, int fd)
{
	char dir[16], path[PATH_MAX];
	__u32 id = link_id_of_fd(fd);
	int err;

	if (!id)
		return errno ? -errno : -EINVAL;
	snprintf(dir, sizeof(dir), "%u", ls->sandbox_id);
	if (mkdirat(b->hold_fd, dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	if ((err = hold_path(b, ls->sandbox_id, p, path, sizeof(path))))
		return err;
	if (bpf_obj_pin(fd, path) < 0)
		return -errno;
	ls->link_id[p] = id;
	b->links_gen++;
	return 0;
}

/* An fd of the held link of program p (the caller closes it), or -errno. */
static int held_fd(const struct egr_bpf *b, const struct egr_link_set *ls, size_t p)
{
	char path[PATH_MAX];
	int err, fd;

	if (!ls->link_id[p])
		return -ENOENT;
	if ((err = hold_path(b, ls->sandbox_id, p, path, sizeof(path))))
		return err;
	fd = bpf_obj_get(path);
	return fd < 0 ? -errno : fd;
}

/* Note the inode of the shared pin at path (0: unknown, the next check
 * asks the kernel). */
void egr_kern_note_pin(struct egr_link_set *ls, size_t p, const char *path)
{
	struct stat st;

	ls->pin_ino[p] = lstat(path, &st) == 0 && !S_ISLNK(st.st_mode) ? (uint64_t)st.st_ino : 0;
}

/* Note whether program p's shared pin is missing (health reads it). */
static void set_unpinned(struct egr_bpf *b, struct egr_link_set *ls, size_t p, bool missing)
{
	uint32_t was = ls->unpinned;

	if (missing)
		ls->unpinned |= 1u << p;
	else
		ls->unpinned &= ~(1u << p);
	if (ls->unpinned != was)
		b->links_gen++;
}

/* Drop egressd's reference of program p's link (after its detach, or when
 * it never was one of ours). */
static void unhold(struct egr_bpf *b, struct egr_link_set *ls, size_t p)
{
	char name[PATH_MAX];

	if (!ls->link_id[p])
		return;
	snprintf(name, sizeof(name), "%u/%s", ls->sandbox_id, b->prog_names[p]);
	if (unlinkat(b->hold_fd, name, 0) < 0 && errno != ENOENT)
		log_warn("drop egressd's reference of link %s of sandbox %u: %m",
			 b->prog_names[p], ls->sandbox_id);
	ls->link_id[p] = 0;
	ls->pin_ino[p] = 0;
	b->links_gen++;
}

static void unhold_all(struct egr_bpf *b, struct egr_link_set *ls)
{
	char dir[16];

	for (size_t p = 0; p < EGR_MAX_CGROUP_PROGS; p++)
		unhold(b, ls, p);
	snprintf(dir, sizeof(dir), "%u", ls->sandbox_id);
	if (b->hold_fd >= 0 && unlinkat(b->hold_fd, dir, AT_REMOVEDIR) < 0 && errno != ENOENT)
		log_warn("remove egressd's reference directory of sandbox %u: %m",
			 ls->sandbox_id);
}

/* The watch descriptor of dir; -1 when there is none. */
int egr_kern_watch(struct egr_bpf *b, const char *dir)
{
	int wd;

	if (b->pin_watch_fd < 0)
		return -1;
	wd = inotify_add_watch(b->pin_watch_fd, dir, PIN_WATCH_MASK);
	if (wd < 0 && errno != ENOENT)
		log_warn("inotify watch %s: %m", dir);
	return wd;
}

/* <dir>, the directories of the map pins, links/ and every links/<id>/
 * egressd holds links of. A watch on an inode already watched is the same
 * watch: cheap to repeat. */
void egr_kern_watch_dirs(struct egr_bpf *b)
{
	char path[PATH_MAX];
	struct bpf_map *map;

	if (b->pin_watch_fd < 0)
		return;
	egr_kern_watch(b, b->dir);
	bpf_object__for_each_map(map, b->skel->obj)
	{
		const char *pin = bpf_map__pin_path(map);
		char *slash;

		if (!pin || snprintf(path, sizeof(path), "%s", pin) >= (int)sizeof(path))
			continue;
		slash = strrchr(path, '/');
		if (slash)
			*slash = '\0';
		egr_kern_watch(b, path); /* the same directory for every map: one watch */
		if (slash && (slash = strrchr(path, '/')) && (size_t)(slash - path) > strlen(b->dir)) {
			*slash = '\0';
			egr_kern_watch(b, path); /* its parent (a versioned layout) */
		}
	}
	snprintf(path, sizeof(path), "%s/links", b->dir);
	b->links_wd = egr_kern_watch(b, path);
	for (size_t i = 0; i < b->nlinks; i++) {
		snprintf(path, sizeof(path), "%s/links/%u", b->dir, b->links[i]->sandbox_id);
		b->links[i]->wd = egr_kern_watch(b, path);
	}
}

int egr_bpf_pin_watch_fd(const struct egr_bpf *b)
{
	return b->pin_watch_fd;
}

/*
 * Does this event concern a pin egressd relies on? Not when it is about a
 * sandbox egressd no longer holds links of: its own detach drops the set
 * and its watch, then unpins and removes links/<id>, and a check
 * of every pin of every sandbox for each of those would make a burst of
 * detaches cost O(sandboxes) each. Anything else, and a queue overflow
 * (wd -1), does.
 */
static bool pin_event_matters(struct egr_bpf *b, const struct inotify_event *ev)
{
	char *end;
	unsigned long id;

	if (ev->mask & IN_IGNORED)
		return false; /* a watch we removed (or of a directory gone) */
	if (ev->wd >= 0 && ev->wd == b->links_wd && ev->len) {
		id = strtoul(ev->name, &end, 10);
		if (*end == '\0' && end != ev->name && id <= UINT32_MAX)
			return egr_kern_link_set(b, (uint32_t)id, false) != NULL;
		return true;
	}
	/* Any other watch is a map directory's or that of a sandbox whose
	 * links egressd holds: link_set_drop removes a sandbox's watch before
	 * its pins go. */
	return true;
}

bool egr_bpf_pin_events(struct egr_bpf *b)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	bool any = false;
	ssize_t n;

	if (b->pin_watch_fd < 0)
		return false;
	/* Bounded: the fd is non-blocking and a burst of events is one check. */
	for (int i = 0; i < 64 && (n = read(b->pin_watch_fd, buf, sizeof(buf))) > 0; i++) {
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;

			if (pin_event_matters(b, ev))
				any = true;
			p += sizeof(*ev) + ev->len;
		}
	}
	return any;
}

static int attach_one(struct egr_bpf *b, struct egr_link_set *ls, size_t p, int cg_fd,
		      const char *dir, const char *cgroup_path);
static int ensure_links_dir(struct egr_bpf *b, const char *dir);

static int prog_index(const struct egr_bpf *b, const char *name)
{
	for (size_t p = 0; p < b->nprogs; p++)
		if (strcmp(b->prog_names[p], name) == 0)
			return (int)p;
	return -1;
}

/* An upgrade adds the link of a program new since the old version
 * (migrate.h): attached like any other, egressd's reference held. */
int egr_kern_mig_attach(void *ctx, uint32_t sandbox_id, uint64_t cgroup_id, const char *prog)
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
	if ((err = egr_kern_links_dir(b, sandbox_id, dir, sizeof(dir))) ||
	    (err = ensure_links_dir(b, dir)))
		return err;
	ls = egr_kern_link_set(b, sandbox_id, true);
	if (!ls)
		return -ENOMEM;
	cg_fd = open(cg, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cg_fd < 0)
		return errno == ENOENT ? -ENOENT : -errno;
	err = attach_one(b, ls, (size_t)p, cg_fd, dir, cg);
	close(cg_fd);
	return err;
}

void egr_kern_mig_detach(void *ctx, uint32_t sandbox_id, const char *prog)
{
	struct egr_bpf *b = ctx;
	struct egr_link_set *ls = egr_kern_link_set(b, sandbox_id, false);
	int p = prog_index(b, prog);
	char dir[PATH_MAX], path[PATH_MAX];

	int fd;

	if (!ls || p < 0 || !ls->link_id[p])
		return;
	fd = held_fd(b, ls, (size_t)p);
	if (fd < 0 || (bpf_link_detach(fd) < 0 && errno != ENOLINK))
		log_error("upgrade rollback: detach %s of sandbox %u: %s", prog, sandbox_id,
			  strerror(fd < 0 ? -fd : errno));
	if (fd >= 0)
		close(fd);
	unhold(b, ls, (size_t)p);
	if (!egr_kern_links_dir(b, sandbox_id, dir, sizeof(dir))) {
		snprintf(path, sizeof(path), "%s/%s", dir, prog);
		if (unlink(path) < 0 && errno != ENOENT)
			log_warn("upgrade rollback: unpin %s: %m", path);
	}
}

static size_t link_bucket(uint32_t sandbox_id, size_t nbuckets)
{
	return (size_t)((sandbox_id * 2654435761u) & (nbuckets - 1));
}

/* The id table at least as wide as the sets: health asks of every sandbox,
 * a scan each would be O(sandboxes^2). */
static int link_rehash(struct egr_bpf *b, size_t want)
{
	size_t nb = b->link_buckets ? b->link_buckets : 16;
	struct egr_link_set **t;

	while (nb < want)
		nb *= 2;
	if (nb == b->link_buckets)
		return 0;
	t = calloc(nb, sizeof(*t));
	if (!t)
		return -ENOMEM;
	free(b->links_by_id);
	b->links_by_id = t;
	b->link_buckets = nb;
	for (size_t i = 0; i < b->nlinks; i++) {
		struct egr_link_set *ls = b->links[i];
		size_t k = link_bucket(ls->sandbox_id, nb);

		ls->hnext = t[k];
		t[k] = ls;
	}
	return 0;
}

struct egr_link_set *egr_kern_link_set(struct egr_bpf *b, uint32_t sandbox_id, bool create)
{
	struct egr_link_set *ls;
	size_t k;

	if (b->link_buckets)
		for (ls = b->links_by_id[link_bucket(sandbox_id, b->link_buckets)]; ls;
		     ls = ls->hnext)
			if (ls->sandbox_id == sandbox_id)
				return ls;
	if (!create)
		return NULL;
	if (b->nlinks == b->caplinks) {
		size_t cap = b->caplinks ? b->caplinks * 2 : 16;
		struct egr_link_set **n = realloc(b->links, cap * sizeof(*n));

		if (!n)
			return NULL;
		b->links = n;
		b->caplinks = cap;
	}
	if (link_rehash(b, b->nlinks + 1) || !(ls = calloc(1, sizeof(*ls))))
		return NULL;
	ls->sandbox_id = sandbox_id;
	ls->wd = -1;
	ls->pos = b->nlinks;
	b->links_gen++;
	b->links[b->nlinks++] = ls;
	k = link_bucket(sandbox_id, b->link_buckets);
	ls->hnext = b->links_by_id[k];
	b->links_by_id[k] = ls;
	return ls;
}

/* Drop our references of the sandbox's links (detach: after BPF_LINK_DETACH). */
static void link_set_drop(struct egr_bpf *b, uint32_t sandbox_id)
{
	struct egr_link_set *ls = egr_kern_link_set(b, sandbox_id, false);

	if (!ls)
		return;
	/* Its pins go next: not a removal the guard should check for. */
	if (ls->wd >= 0 && b->pin_watch_fd >= 0)
		inotify_rm_watch(b->pin_watch_fd, ls->wd);
	unhold_all(b, ls);
	b->links_gen++;
	for (struct egr_link_set **pp = &b->links_by_id[link_bucket(sandbox_id, b->link_buckets)];
	     *pp; pp = &(*pp)->hnext)
		if (*pp == ls) {
			*pp = ls->hnext;
			break;
		}
	/* The last one fills the gap. */
	b->links[ls->pos] = b->links[--b->nlinks];
	b->links[ls->pos]->pos = ls->pos;
	free(ls);
}

int egr_kern_links_dir(struct egr_bpf *b, uint32_t sandbox_id, char *buf, size_t len)
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
	if ((err = egr_kern_mkdir(b->dir, 0700)) || (err = egr_kern_mkdir(path, 0700)) ||
	    (err = egr_kern_mkdir(dir, 0700)))
		log_error("create %s: %s", dir, strerror(-err));
	return err;
}

/* Attach program p to cg_fd, pin the link and hold our reference. */
static int attach_one(struct egr_bpf *b, struct egr_link_set *ls, size_t p, int cg_fd,
		      const char *dir, const char *cgroup_path)
{
	struct bpf_program *prog = bpf_object__find_program_by_name(b->skel->obj,
								     b->prog_names[p]);
	char path[PATH_MAX];
	struct bpf_link *link;
	int err;

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
	err = bpf_obj_pin(bpf_link__fd(link), path) < 0 ? -errno : 0;
	if (err) {
		log_error("pin link %s: %s", path, strerror(-err));
	} else if ((err = egr_kern_hold_link(b, ls, p, bpf_link__fd(link)))) {
		/* our own reference: a removed pin detaches nothing */
		log_error("hold link %s: %s", path, strerror(-err));
		if (unlink(path) < 0 && errno != ENOENT)
			log_warn("unlink %s: %m", path);
	} else {
		egr_kern_note_pin(ls, p, path);
	}
	if (err)
		bpf_link__detach(link);
	bpf_link__destroy(link); /* closes libbpf's fd only: the pins hold the link */
	return err;
}

static int attach_programs(struct egr_bpf *b, uint32_t sandbox_id, const char *cgroup_path,
			   bool only_missing)
{
	char dir[PATH_MAX];
	struct egr_link_set *ls;
	int cg_fd, err;

	err = egr_kern_links_dir(b, sandbox_id, dir, sizeof(dir));
	if (err)
		return err;
	ls = egr_kern_link_set(b, sandbox_id, true);
	if (!ls)
		return -ENOMEM;
	cg_fd = open(cgroup_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cg_fd < 0)
		return -errno;
	err = ensure_links_dir(b, dir);
	if (!err)
		ls->wd = egr_kern_watch(b, dir);
	for (size_t p = 0; !err && p < b->nprogs; p++) {
		if (only_missing && ls->link_id[p])
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

	err = egr_kern_links_dir(b, sandbox_id, dir, sizeof(dir));
	if (err)
		return err;
	/* Our own references first: a link whose pin is gone is still attached
	 * through them. ENOLINK: the cgroup was released, the link with it. */
	struct egr_link_set *ls = egr_kern_link_set(b, sandbox_id, false);

	for (size_t p = 0; ls && p < EGR_MAX_CGROUP_PROGS; p++) {
		int fd;

		if (!ls->link_id[p])
			continue;
		err = fd = held_fd(b, ls, p);
		if (fd >= 0) {
			err = bpf_link_detach(fd) < 0 && errno != ENOLINK ? -errno : 0;
			close(fd);
		}
		if (err) {
			ret = err;
			log_warn("detach link %s of sandbox %u: %s", b->prog_names[p], sandbox_id,
				 strerror(-err));
		}
	}
	if (ret)
		return ret; /* keep the references: still enforced, retry possible */
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

uint64_t egr_bpf_links_gen(const struct egr_bpf *b)
{
	return b->links_gen;
}

bool egr_bpf_links_held(struct egr_bpf *b, uint32_t sandbox_id)
{
	return egr_kern_link_set(b, sandbox_id, false) != NULL;
}

bool egr_bpf_links_complete(struct egr_bpf *b, uint32_t sandbox_id)
{
	const struct egr_link_set *ls = egr_kern_link_set(b, sandbox_id, false);
	char dir[PATH_MAX], path[PATH_MAX];

	if (ls) {
		for (size_t p = 0; p < b->nprogs; p++)
			if (!ls->link_id[p])
				return false;
		return ls->unpinned == 0;
	}
	if (egr_kern_links_dir(b, sandbox_id, dir, sizeof(dir)))
		return false;
	for (size_t p = 0; p < b->nprogs; p++) {
		snprintf(path, sizeof(path), "%s/%s", dir, b->prog_names[p]);
		if (access(path, F_OK) != 0)
			return false;
	}
	return true;
}

int egr_bpf_links_cgroup_id(struct egr_bpf *b, uint32_t sandbox_id, uint64_t *cgroup_id)
{
	struct egr_link_set *ls = egr_kern_link_set(b, sandbox_id, false);

	for (size_t p = 0; ls && p < EGR_MAX_CGROUP_PROGS; p++) {
		struct bpf_link_info info;
		__u32 len = sizeof(info);
		int fd, err;

		if (!ls->link_id[p])
			continue;
		fd = held_fd(b, ls, p);
		if (fd < 0)
			return fd;
		memset(&info, 0, sizeof(info));
		err = bpf_obj_get_info_by_fd(fd, &info, &len) < 0 ? -errno : 0;
		close(fd);
		if (err)
			return err;
		*cgroup_id = info.cgroup.cgroup_id;
		return 0;
	}
	return -ENOENT;
}

static int repin(int fd, const char *path)
{
	return bpf_obj_pin(fd, path) < 0 ? -errno : 0;
}

/* Does the pin at path name the link of id want? Existence is not enough:
 * rename(2) of one link pin over another (no bpf() needed) leaves every
 * name in place while the overwritten link lives on only through our
 * reference. errno ENOENT (false) when there is no pin at path. */
static bool pin_names_link(const char *path, __u32 want)
{
	__u32 got;
	int pfd = bpf_obj_get(path);

	if (pfd < 0)
		return false;
	got = link_id_of_fd(pfd);
	close(pfd);
	errno = 0;
	return got == want;
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
	if ((err = egr_kern_mkdir(b->dir, 0700)))
		return err;
	for (char *p = path + base + 1; (p = strchr(p, '/')); p++) {
		*p = '\0';
		err = egr_kern_mkdir(path, 0700);
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
		struct egr_link_set *ls = b->links[i];

		if (egr_kern_links_dir(b, ls->sandbox_id, dir, sizeof(dir)))
			continue;
		/* The pins' names relative to their directory: one path walk
		 * per sandbox, not one per pin. */
		int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);

		for (size_t p = 0; p < b->nprogs; p++) {
			if (!ls->link_id[p])
				continue;
			enum egr_pin_kind kind = EGR_PIN_LINK;
			int fd;

			snprintf(path, sizeof(path), "%s/%s", dir, b->prog_names[p]);
			/* One stat when all is well: the inode egressd pinned is
			 * still there (removing or renaming over it changes it). */
			struct stat st;

			if (ls->pin_ino[p] && dfd >= 0 &&
			    fstatat(dfd, b->prog_names[p], &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    (uint64_t)st.st_ino == ls->pin_ino[p]) {
				set_unpinned(b, ls, p, false);
				continue;
			}
			/* Otherwise the kernel says whose link the pin names; a
			 * symlink there (bpf_obj_get would follow it) holds
			 * nothing and is replaced. */
			bool symlink = lstat(path, &st) == 0 && S_ISLNK(st.st_mode);

			if (!symlink && pin_names_link(path, ls->link_id[p])) {
				egr_kern_note_pin(ls, p, path);
				set_unpinned(b, ls, p, false);
				continue;
			}
			if (symlink || errno != ENOENT) {
				/* Something else sits at the name: ours goes there. */
				kind = EGR_PIN_LINK_REPLACED;
				if (unlink(path) < 0 && errno != ENOENT) {
					err = -errno;
					missing++;
					set_unpinned(b, ls, p, true);
					report(ctx, kind, ls->sandbox_id, path, err);
					continue;
				}
			}
			missing++;
			err = ensure_links_dir(b, dir);
			if (!err && (err = fd = held_fd(b, ls, p)) >= 0) {
				err = repin(fd, path);
				close(fd);
			}
			if (err) {
				set_unpinned(b, ls, p, true);
			} else {
				set_unpinned(b, ls, p, false);
				egr_kern_note_pin(ls, p, path);
			}
			report(ctx, kind, ls->sandbox_id, path, err);
		}
		if (dfd >= 0)
			close(dfd);
	}
	egr_kern_watch_dirs(b); /* directories made again need their watch again */
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

void egr_kern_links_release(struct egr_bpf *b)
{
	/* The instance goes with its fd, and every reference in it: the links
	 * stay attached through their shared pins. */
	if (b->hold_fd >= 0)
		close(b->hold_fd);
	b->hold_fd = -1;
	for (size_t i = 0; i < b->nlinks; i++)
		free(b->links[i]);
	free(b->links);
	free(b->links_by_id);
	b->links = NULL;
	b->links_by_id = NULL;
	b->nlinks = b->caplinks = b->link_buckets = 0;
}

/* Programs attached per sandbox cgroup (a global tracing program is not). */
bool egr_kern_is_cgroup_prog(const struct bpf_program *prog)
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
