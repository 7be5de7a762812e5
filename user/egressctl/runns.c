// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * egressctl run: what the command sees of the file system.
 *
 * The command's pid 1 runs this in its new mount, pid and cgroup namespaces,
 * still with every capability, before it starts the command:
 *
 *  - propagation of every mount is made private first (nothing done here
 *    reaches the host, and nothing fails open if that step fails: the
 *    command is not started);
 *  - every procfs, bpffs and cgroup (v1 and v2) mount is detached: the pins
 *    of egressd and of every other bpffs user are gone, and so are the
 *    cgroup trees of the host;
 *  - a fresh procfs of the new pid namespace goes on /proc (no /proc/<pid>
 *    of anything outside); its host-wide knobs are read-only and its
 *    kernel-internal files masked, as runc does (proc_ro, proc_masked);
 *  - a fresh cgroup2 goes on the cgroup2 mount point: mounted from inside
 *    the new cgroup namespace it shows only the command's own subtree;
 *  - /sys and every mount under it are made read-only (module parameters and
 *    other root-owned files need no capability to write);
 *  - /dev is a read-only tmpfs with null, zero, full, random, urandom and
 *    tty bound from the host's, a devpts and a /dev/shm of its own;
 *  - egressd's state, run and socket directories (and --hide ones) get an
 *    empty read-only tmpfs over them;
 *  - the result is read back from the new /proc/self/mountinfo and checked.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "ctl.h"

#define MAX_MOUNTS 4096

/* Host-wide settings in procfs that uid 0 writes without any capability
 * (IRQ affinity, PCI config space, sysctls, SysRq): read-only. */
static const char *const proc_ro[] = { "/proc/sys", "/proc/sysrq-trigger", "/proc/irq",
				       "/proc/bus", "/proc/fs" };
/* Kernel internals and host devices: an empty read-only tmpfs (directories)
 * or /dev/null (files) over them. */
static const char *const proc_masked[] = {
	"/proc/kcore",	     "/proc/keys",	    "/proc/key-users", "/proc/timer_list",
	"/proc/timer_stats", "/proc/sched_debug", "/proc/latency_stats", "/proc/kmsg",
	"/proc/acpi",	     "/proc/scsi",	    "/proc/asound",
};

struct mnt {
	char *point; /* decoded mount point */
	char *type;  /* file system type */
};

struct mnt_list {
	struct mnt *m;
	size_t n;
};

static void mnt_list_free(struct mnt_list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->m[i].point);
		free(l->m[i].type);
	}
	free(l->m);
	l->m = NULL;
	l->n = 0;
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *s)
{
	char *w = s;

	for (char *r = s; *r; r++) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
		    r[3] >= '0' && r[3] <= '7') {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
			r += 3;
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
}

/* The mounts of our mount namespace, in /proc/self/mountinfo order (a
 * mount comes after the one it is mounted on). 0 or -errno. */
static int read_mounts(struct mnt_list *l)
{
	char *line = NULL;
	size_t cap = 0;
	int err = 0;
	FILE *f;

	l->m = NULL;
	l->n = 0;
	f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		char *save = NULL, *tok, *point = NULL, *type = NULL;
		struct mnt *grown;
		bool after_sep = false;
		int field = 0;

		for (tok = strtok_r(line, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
			field++;
			if (field == 5)
				point = tok;
			else if (field > 6 && !after_sep && strcmp(tok, "-") == 0)
				after_sep = true;
			else if (after_sep) {
				type = tok;
				break;
			}
		}
		if (!point || !type) {
			err = -EINVAL;
			break;
		}
		if (l->n >= MAX_MOUNTS) {
			err = -E2BIG;
			break;
		}
		grown = realloc(l->m, (l->n + 1) * sizeof(*l->m));
		if (!grown) {
			err = -ENOMEM;
			break;
		}
		l->m = grown;
		l->m[l->n].point = strdup(point);
		l->m[l->n].type = strdup(type);
		if (!l->m[l->n].point || !l->m[l->n].type) {
			free(l->m[l->n].point);
			free(l->m[l->n].type);
			err = -ENOMEM;
			break;
		}
		unescape(l->m[l->n].point);
		l->n++;
	}
	free(line);
	fclose(f);
	if (err)
		mnt_list_free(l);
	return err;
}

static bool is_type(const struct mnt *m, const char *type)
{
	return strcmp(m->type, type) == 0;
}

/* procfs, bpffs and cgroup mounts: what the command must not see of the host. */
static bool detached_type(const struct mnt *m)
{
	return is_type(m, "proc") || is_type(m, "bpf") || is_type(m, "cgroup") ||
	       is_type(m, "cgroup2");
}

static bool under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	if (strcmp(dir, "/") == 0)
		return true;
	return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* Remount the mount at path read-only, keeping its other per-mount flags. */
static int remount_ro(const char *path)
{
	unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY;
	struct statvfs sv;

	if (statvfs(path, &sv) < 0)
		return -errno;
	if (sv.f_flag & ST_NOSUID)
		flags |= MS_NOSUID;
	if (sv.f_flag & ST_NODEV)
		flags |= MS_NODEV;
	if (sv.f_flag & ST_NOEXEC)
		flags |= MS_NOEXEC;
	if (sv.f_flag & ST_NOATIME)
		flags |= MS_NOATIME;
	if (sv.f_flag & ST_NODIRATIME)
		flags |= MS_NODIRATIME;
	if (sv.f_flag & ST_RELATIME)
		flags |= MS_RELATIME;
	if (mount(NULL, path, NULL, flags, NULL) < 0)
		return -errno;
	return 0;
}

/* Bind path onto itself and make that read-only. */
static int bind_ro(const char *path)
{
	if (mount(path, path, NULL, MS_BIND | MS_REC, NULL) < 0)
		return -errno;
	return remount_ro(path);
}

static int fail(const char *what, const char *path, int err)
{
	fprintf(stderr, "egressctl: run: %s %s: %s; not running the command\n", what, path,
		strerror(-err));
	return err;
}

/* An empty read-only tmpfs over a directory, /dev/null over anything else.
 * A path that does not exist needs nothing. */
static int hide_path(const char *path)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
	if (S_ISDIR(st.st_mode)) {
		if (mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
			  "size=4k,nr_inodes=1,mode=0555") < 0)
			return -errno;
		return 0;
	}
	if (S_ISLNK(st.st_mode))
		return -ELOOP; /* a mount would follow it: refuse rather than guess */
	if (mount("/dev/null", path, NULL, MS_BIND, NULL) < 0)
		return -errno;
	return 0;
}

/*
 * A /dev of a few harmless nodes, bound from the host's: uid 0 needs no
 * capability to open a root-owned block device or /dev/kmsg, and the
 * host's /dev/shm and /dev/mqueue are shared with every other sandbox.
 * A devpts instance and a /dev/shm of its own; read-only afterwards.
 */
static int make_dev(void)
{
	static const char *const nodes[] = { "null", "zero", "full", "random", "urandom", "tty" };
	static const char *const links[][2] = {
		{ "fd", "/proc/self/fd" },	    { "stdin", "/proc/self/fd/0" },
		{ "stdout", "/proc/self/fd/1" }, { "stderr", "/proc/self/fd/2" },
		{ "ptmx", "pts/ptmx" },
	};
	char src[PATH_MAX], dst[PATH_MAX];
	int old, fd, err = 0;

	old = open("/dev", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (old < 0)
		return fail("cannot open", "/dev", -errno);
	if (mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC,
		  "size=64k,nr_inodes=64,mode=0755") < 0) {
		err = fail("cannot mount a /dev of its own on", "/dev", -errno);
		goto out;
	}
	for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]) && !err; i++) {
		struct stat st;

		/* Through the descriptor: the host's /dev is covered now. */
		snprintf(src, sizeof(src), "/proc/self/fd/%d/%s", old, nodes[i]);
		snprintf(dst, sizeof(dst), "/dev/%s", nodes[i]);
		if (stat(src, &st) < 0 || !S_ISCHR(st.st_mode))
			continue; /* not on this host */
		fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (fd < 0 || close(fd) < 0 || mount(src, dst, NULL, MS_BIND, NULL) < 0)
			err = fail("cannot bind", dst, -errno);
	}
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]) && !err; i++) {
		snprintf(dst, sizeof(dst), "/dev/%s", links[i][0]);
		if (symlink(links[i][1], dst) < 0)
			err = fail("cannot make", dst, -errno);
	}
	if (!err && (mkdir("/dev/pts", 0755) < 0 ||
		     mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
			   "newinstance,ptmxmode=0666,mode=0620") < 0))
		err = fail("cannot mount a devpts of its own on", "/dev/pts", -errno);
	if (!err && (mkdir("/dev/shm", 01777) < 0 ||
		     mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
			   "size=64m,mode=01777") < 0))
		err = fail("cannot mount a /dev/shm of its own on", "/dev/shm", -errno);
	if (!err && mount(NULL, "/dev", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID |
			  MS_NOEXEC, NULL) < 0)
		err = fail("cannot make read-only:", "/dev", -errno);
out:
	close(old);
	return err;
}

/* A masked path is empty: a tmpfs with no entry, or the null device. */
static bool masked(const char *path)
{
	struct stat st;
	struct statvfs sv;
	bool empty = true;
	struct dirent *de;
	DIR *d;

	if (lstat(path, &st) < 0)
		return errno == ENOENT;
	if (S_ISCHR(st.st_mode))
		return st.st_rdev == makedev(1, 3);
	if (!S_ISDIR(st.st_mode) || statvfs(path, &sv) < 0 || !(sv.f_flag & ST_RDONLY))
		return false;
	d = opendir(path);
	if (!d)
		return false;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			empty = false;
	closedir(d);
	return empty;
}

/* proc_ro read-only and proc_masked empty in the new procfs. */
static int check_proc(void)
{
	struct statvfs sv;

	for (size_t i = 0; i < sizeof(proc_ro) / sizeof(proc_ro[0]); i++) {
		if (statvfs(proc_ro[i], &sv) < 0 && errno == ENOENT)
			continue;
		if (statvfs(proc_ro[i], &sv) < 0 || !(sv.f_flag & ST_RDONLY)) {
			fprintf(stderr, "egressctl: run: %s is not read-only; not running the "
					"command\n", proc_ro[i]);
			return -EEXIST;
		}
	}
	for (size_t i = 0; i < sizeof(proc_masked) / sizeof(proc_masked[0]); i++) {
		if (!masked(proc_masked[i])) {
			fprintf(stderr, "egressctl: run: %s is not masked; not running the "
					"command\n", proc_masked[i]);
			return -EEXIST;
		}
	}
	return 0;
}

/* The result, read back: no host procfs, bpffs or cgroup mount is left. */
static int check_view(const struct run_view *v)
{
	struct mnt_list l;
	int err;

	err = check_proc();
	if (err)
		return err;

	err = read_mounts(&l);
	if (err)
		return fail("cannot read back", "/proc/self/mountinfo", err);
	for (size_t i = 0; i < l.n && !err; i++) {
		const struct mnt *m = &l.m[i];

		if (is_type(m, "bpf") || is_type(m, "cgroup"))
			err = -EEXIST;
		else if (is_type(m, "cgroup2") && strcmp(m->point, v->cgroup2) != 0)
			err = -EEXIST;
		else if (is_type(m, "proc") && !under(m->point, "/proc"))
			err = -EEXIST;
		if (err)
			fprintf(stderr, "egressctl: run: a %s mount is still visible at %s; not "
					"running the command\n", m->type, m->point);
	}
	mnt_list_free(&l);
	return err;
}

int run_view_add_hide(struct run_view *v, const char *path)
{
	char abs[PATH_MAX];
	int err;

	if (!path || !path[0])
		return 0;
	err = ctl_abs_path(path, abs, sizeof(abs));
	if (err)
		return err;
	if (strcmp(abs, "/") == 0)
		return -EINVAL;
	for (size_t i = 0; i < v->nhide; i++)
		if (strcmp(v->hide[i], abs) == 0)
			return 0;
	if (v->nhide >= RUN_HIDE_MAX)
		return -E2BIG;
	snprintf(v->hide[v->nhide++], PATH_MAX, "%s", abs);
	return 0;
}

int run_view_enter(const struct run_view *v)
{
	struct mnt_list l;
	int err;

	/* Before anything else: nothing below may propagate to the host. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return fail("cannot make the mounts private at", "/", -errno);
	err = read_mounts(&l);
	if (err)
		return fail("cannot read", "/proc/self/mountinfo", err);
	/* Last first: a mount goes before what is mounted on it. A mount that
	 * went with its parent answers EINVAL. */
	for (size_t i = l.n; i-- > 0;) {
		if (!detached_type(&l.m[i]))
			continue;
		if (umount2(l.m[i].point, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT) {
			err = fail("cannot unmount", l.m[i].point, -errno);
			break;
		}
	}
	if (!err) {
		/* sysfs and what is mounted under it: module parameters and
		 * other root-owned files are writable by uid 0 without any
		 * capability. */
		for (size_t i = 0; i < l.n && !err; i++) {
			if (!under(l.m[i].point, "/sys") || detached_type(&l.m[i]))
				continue;
			err = remount_ro(l.m[i].point);
			if (err == -EINVAL || err == -ENOENT)
				err = 0; /* not a mount point any more */
			if (err)
				fail("cannot make read-only:", l.m[i].point, err);
		}
	}
	mnt_list_free(&l);
	if (err)
		return err;
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return fail("cannot mount a procfs of its pid namespace on", "/proc", -errno);
	err = make_dev();
	if (err)
		return err;
	for (size_t i = 0; i < sizeof(proc_ro) / sizeof(proc_ro[0]); i++) {
		err = bind_ro(proc_ro[i]);
		if (err && err != -ENOENT)
			return fail("cannot make read-only:", proc_ro[i], err);
	}
	for (size_t i = 0; i < sizeof(proc_masked) / sizeof(proc_masked[0]); i++) {
		err = hide_path(proc_masked[i]);
		if (err)
			return fail("cannot mask", proc_masked[i], err);
	}
	/* Writable: the command may make child cgroups of its own (its
	 * namespace root is a leaf below the sandbox cgroup, whose limits and
	 * control files it cannot reach). */
	if (mount("cgroup2", v->cgroup2, "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return fail("cannot mount its cgroup2 view on", v->cgroup2, -errno);
	for (size_t i = 0; i < v->nhide; i++) {
		err = hide_path(v->hide[i]);
		if (err)
			return fail("cannot hide", v->hide[i], err);
	}
	err = check_view(v);
	if (err)
		return err;
	/* The old working directory may be hidden now, or be the dentry under
	 * a mount: look it up again, in the new view. */
	if (!v->cwd[0] || chdir(v->cwd) < 0) {
		if (v->cwd[0])
			fprintf(stderr, "egressctl: run: the working directory %s is not visible in "
					"the sandbox; starting in /\n", v->cwd);
		if (chdir("/") < 0)
			return fail("cannot change directory to", "/", -errno);
	}
	return 0;
}
