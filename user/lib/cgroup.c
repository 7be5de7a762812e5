// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <ftw.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <mntent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>

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
