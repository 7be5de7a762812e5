// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * egressctl run: the command's host ids and its private directory.
 *
 * Ids. Without --user or --map-root-to the command's user namespace maps
 * its ids 0-65535 to a range of the host's of its own, so that real tools
 * can change ids in it (apt drops to _apt, 42; sshd-like privilege
 * separation; setgroups). The ranges are egressctl's: 4094 slots of 65536
 * ids from 0x70000000 (1879048192) up to 0x7FFE0000, the block systemd's
 * UIDS-GIDS.md leaves unused (below it: the container ranges systemd-nspawn
 * and systemd-nsresourced hand out, 0x80000-0x6FFFFFFF; above it the
 * foreign range and the ids many tools read as negative), far above what
 * useradd gives /etc/subuid (100000-600100000) and the ids of users. A slot
 * that /etc/subuid or /etc/subgid names for anyone is skipped. A run holds
 * its slot with an exclusive flock on RUN_IDS_DIR/<slot> for as long as the
 * command or anything it left can run, so no two runs on the host ever
 * share ids; the lock goes with egressctl, whose death kills the sandbox.
 * Nothing on the host is owned by these ids, and what a run leaves in its
 * private directory goes with it (below), so the next holder of a slot
 * inherits nothing.
 *
 * The private directory, RUN_HOME_DIR/<16 hex digits>, 0711 and owned by
 * the command's host uid (uid 0 inside), holds home/ (HOME, 0700) and tmp/
 * (TMPDIR, 1777: any id of the namespace may use it). It is removed,
 * without following a link, once the cgroup is empty; so is whatever the
 * range's ids own at the top of /tmp and /var/tmp (a tool that ignores
 * TMPDIR). What they left deeper in another world-writable directory
 * stays: the one residue a later run on the same slot could find.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"
#include "run_int.h"

/* Mode 0700 directories owned by root; made when missing, refused when
 * anything else (a link, another owner, looser modes). */
static int root_dir(const char *path, mode_t mode)
{
	struct stat st;

	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return -errno;
	if (lstat(path, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 07777) != mode)
		return -EPERM;
	return 0;
}

/* Does [lo, lo + n) meet a range of /etc/subuid or /etc/subgid (name:start:count)? */
static bool sub_ids_overlap(const char *file, uint64_t lo, uint64_t n)
{
	char line[512];
	bool hit = false;
	FILE *f = fopen(file, "re");

	if (!f)
		return false;
	while (!hit && fgets(line, sizeof(line), f)) {
		unsigned long long start, count;
		char *p = strchr(line, ':');

		if (!p || sscanf(p + 1, "%llu:%llu", &start, &count) != 2)
			continue;
		hit = start < lo + n && lo < start + count;
	}
	fclose(f);
	return hit;
}

int run_range_take(struct run_range *r)
{
	char path[64], hex[9];
	uint32_t first;
	int err;

	r->lockfd = -1;
	err = root_dir(RUN_IDS_DIR, 0700);
	if (err) {
		fprintf(stderr, "egressctl: run: %s: %s (root's 0700 directory of the id-range "
				"locks)\n", RUN_IDS_DIR, strerror(-err));
		return err;
	}
	err = run_random_hex(hex, 4);
	if (err)
		return err;
	first = (uint32_t)strtoul(hex, NULL, 16) % RUN_ID_SLOTS;
	for (uint32_t i = 0; i < RUN_ID_SLOTS; i++) {
		uint32_t slot = (first + i) % RUN_ID_SLOTS;
		uint64_t base = RUN_ID_BASE + (uint64_t)slot * RUN_ID_COUNT;
		int fd;

		if (sub_ids_overlap("/etc/subuid", base, RUN_ID_COUNT) ||
		    sub_ids_overlap("/etc/subgid", base, RUN_ID_COUNT))
			continue;
		snprintf(path, sizeof(path), "%s/%u", RUN_IDS_DIR, slot);
		fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
			return -errno;
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			r->lockfd = fd;
			r->base = (uint32_t)base;
			r->count = RUN_ID_COUNT;
			/* A run killed with the slot (SIGKILL: no clean-up) may have
			 * left files its ids own: they would be ours now. */
			run_range_sweep(r);
			return 0;
		}
		err = -errno;
		close(fd);
		if (err != -EWOULDBLOCK)
			return err;
	}
	fprintf(stderr, "egressctl: run: all %u id ranges are in use\n", RUN_ID_SLOTS);
	return -EBUSY;
}

void run_range_release(struct run_range *r)
{
	if (r->lockfd >= 0)
		close(r->lockfd);
	r->lockfd = -1;
}

int run_home_make(const struct egr_run_user *host, char *dir, size_t len)
{
	char hex[17], sub[PATH_MAX];
	int err = root_dir(RUN_HOME_DIR, 0711);

	dir[0] = '\0';
	if (err) {
		fprintf(stderr, "egressctl: run: %s: %s (root's 0711 directory of the private "
				"directories)\n", RUN_HOME_DIR, strerror(-err));
		return err;
	}
	err = run_random_hex(hex, 8);
	if (err)
		return err;
	snprintf(dir, len, "%s/%s", RUN_HOME_DIR, hex);
	/* Made by root in root's directory: no one else can have put a link
	 * or a directory there first. Owned by the command only then. */
	if (mkdir(dir, 0711) < 0) {
		err = -errno;
		dir[0] = '\0';
		return err;
	}
	snprintf(sub, sizeof(sub), "%s/home", dir);
	if (mkdir(sub, 0700) < 0 || chown(sub, host->uid, host->gid) < 0)
		err = -errno;
	snprintf(sub, sizeof(sub), "%s/tmp", dir);
	if (!err && (mkdir(sub, 0700) < 0 || chmod(sub, 01777) < 0 ||
		     chown(sub, host->uid, host->gid) < 0))
		err = -errno;
	if (!err && chown(dir, host->uid, host->gid) < 0)
		err = -errno;
	if (err) {
		fprintf(stderr, "egressctl: run: cannot make the private directory %s for host "
				"uid %u: %s\n", dir, host->uid, strerror(-err));
		run_home_remove(dir);
		dir[0] = '\0';
	}
	return err;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	if (flag == FTW_DP ? rmdir(path) : unlink(path))
		return -errno;
	return 0;
}

int run_home_remove(const char *dir)
{
	int rc;

	if (!dir[0])
		return 0;
	/* Depth first, links removed not followed, never past a mount. */
	rc = nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
	if (rc) {
		rc = rc < 0 ? -errno : rc;
		fprintf(stderr, "egressctl: warning: cannot remove the run's %s: %s\n",
			dir, strerror(-rc));
	}
	return rc;
}

void run_range_sweep(const struct run_range *r)
{
	static const char *const dirs[] = { "/tmp", "/var/tmp", RUN_HOME_DIR };
	char path[PATH_MAX];

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		DIR *d = opendir(dirs[i]);
		struct dirent *e;
		struct stat st;

		if (!d)
			continue;
		while ((e = readdir(d))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
			    st.st_uid < r->base || st.st_uid - r->base >= r->count)
				continue;
			snprintf(path, sizeof(path), "%s/%s", dirs[i], e->d_name);
			run_home_remove(path);
		}
		closedir(d);
	}
}
