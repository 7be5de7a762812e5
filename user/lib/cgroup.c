// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <ftw.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <mntent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "cgroup.h"

int egr_cgroup2_mount(char *buf, size_t len)
{
	struct mntent *m;
	FILE *f;
	int err = -ENOENT;

	f = setmntent("/proc/self/mounts", "r");
	if (!f)
		return -errno;
	while ((m = getmntent(f))) {
		if (strcmp(m->mnt_type, "cgroup2") != 0)
			continue;
		if (strlen(m->mnt_dir) >= len) {
			err = -ENAMETOOLONG;
			break;
		}
		strcpy(buf, m->mnt_dir);
		err = 0;
		break;
	}
	endmntent(f);
	return err;
}

int egr_cgroup_check(const char *path)
{
	struct statfs sfs;
	struct stat st;

	if (stat(path, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	if (statfs(path, &sfs) < 0)
		return -errno;
	if (sfs.f_type != CGROUP2_SUPER_MAGIC)
		return -EINVAL;
	return 0;
}

int egr_cgroup_id(const char *path, uint64_t *id)
{
	struct {
		struct file_handle fh;
		uint64_t cgid;
	} h;
	int mount_id;

	/* The file handle of a kernfs node is its 64-bit id, which is what
	 * cgroup storage is keyed by; st_ino is the same number on 64-bit
	 * hosts, the handle is right everywhere. */
	h.fh.handle_bytes = sizeof(h.cgid);
	if (name_to_handle_at(AT_FDCWD, path, &h.fh, &mount_id, 0) < 0)
		return -errno;
	if (h.fh.handle_bytes != sizeof(h.cgid))
		return -EINVAL;
	memcpy(id, h.fh.f_handle, sizeof(*id));
	return 0;
}

int egr_cgroup_path_by_id(uint64_t id, char *buf, size_t len)
{
	struct {
		struct file_handle fh;
		uint64_t cgid;
	} h;
	char mnt[4096], link[64];
	int mount_id, mfd, fd, err = 0;
	ssize_t n;

	if ((err = egr_cgroup2_mount(mnt, sizeof(mnt))))
		return err;
	/* The handle type kernfs uses, taken from the mount's own handle. */
	h.fh.handle_bytes = sizeof(h.cgid);
	if (name_to_handle_at(AT_FDCWD, mnt, &h.fh, &mount_id, 0) < 0)
		return -errno;
	memcpy(h.fh.f_handle, &id, sizeof(id));
	mfd = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (mfd < 0)
		return -errno;
	fd = open_by_handle_at(mfd, &h.fh, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		err = -errno;
	close(mfd);
	if (err)
		return err;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, buf, len - 1);
	if (n < 0)
		err = -errno;
	else if ((size_t)n >= len - 1)
		err = -ENAMETOOLONG;
	else
		buf[n] = '\0';
	close(fd);
	/* A removed (dying) cgroup reads back as "... (deleted)". */
	if (!err && strstr(buf, " (deleted)"))
		err = -ESTALE;
	return err;
}

/* The inode of the initial cgroup namespace (include/linux/proc_ns.h). */
#define PROC_CGROUP_INIT_INO 0xEFFFFFFBU

/* An fd of the initial cgroup namespace, through pid 1 or else the first
 * process found in it (the DaemonSet's hostPID shows the host's). */
static int open_init_cgroup_ns(dev_t nsfs_dev)
{
	char path[64];
	struct dirent *de;
	struct stat st;
	int fd;
	DIR *d;

	fd = open("/proc/1/ns/cgroup", O_RDONLY | O_CLOEXEC);
	if (fd >= 0 && fstat(fd, &st) == 0 && st.st_ino == PROC_CGROUP_INIT_INO &&
	    st.st_dev == nsfs_dev)
		return fd;
	if (fd >= 0)
		close(fd);
	d = opendir("/proc");
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%.20s/ns/cgroup", de->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) == 0 && st.st_ino == PROC_CGROUP_INIT_INO &&
		    st.st_dev == nsfs_dev) {
			closedir(d);
			return fd;
		}
		close(fd);
	}
	closedir(d);
	return -ENOENT;
}

int egr_cgroup_join_host_ns(char *why, size_t len)
{
	struct stat self;
	int fd, err = 0;

	if (stat("/proc/self/ns/cgroup", &self) < 0) {
		err = -errno;
		snprintf(why, len, "/proc/self/ns/cgroup: %s", strerror(errno));
		return err;
	}
	if (self.st_ino == PROC_CGROUP_INIT_INO)
		return 0;
	fd = open_init_cgroup_ns(self.st_dev);
	if (fd < 0) {
		snprintf(why, len, "no process of the host's cgroup namespace is visible (pid 1's "
			 "is not it; run with the host's pid namespace: hostPID)");
		return fd;
	}
	if (setns(fd, CLONE_NEWCGROUP) < 0) {
		err = -errno;
		snprintf(why, len, "setns into the host's cgroup namespace: %s (needs CAP_SYS_ADMIN)",
			 strerror(errno));
	}
	close(fd);
	if (!err && (stat("/proc/self/ns/cgroup", &self) < 0 ||
		     self.st_ino != PROC_CGROUP_INIT_INO)) {
		snprintf(why, len, "still not in the initial cgroup namespace after setns");
		err = -EIO;
	}
	return err ? err : 1;
}

struct subtree {
	uint64_t *ids;
	size_t n, cap;
	int err;
};

/* nftw has no context argument; egressd is single-threaded. */
static struct subtree *walk_ctx;

static int walk_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	struct subtree *s = walk_ctx;
	uint64_t id;

	if (type != FTW_D)
		return 0;
	if (egr_cgroup_id(path, &id) < 0)
		return 0; /* removed while we walked */
	if (s->n == s->cap) {
		uint64_t *n = realloc(s->ids, (s->cap ? s->cap * 2 : 16) * sizeof(*n));

		if (!n) {
			s->err = -ENOMEM;
			return 1;
		}
		s->ids = n;
		s->cap = s->cap ? s->cap * 2 : 16;
	}
	s->ids[s->n++] = id;
	return 0;
}

int egr_cgroup_subtree_ids(const char *path, uint64_t **ids, size_t *n)
{
	struct subtree s = { 0 };

	walk_ctx = &s;
	if (nftw(path, walk_one, 16, FTW_PHYS | FTW_MOUNT) < 0 && !s.err)
		s.err = -errno;
	walk_ctx = NULL;
	if (s.err) {
		free(s.ids);
		return s.err;
	}
	*ids = s.ids;
	*n = s.n;
	return 0;
}
