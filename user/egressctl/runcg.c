// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* egressctl run: the sandbox's cgroups - creation, limits, emptying with
 * cgroup.kill, removal. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/sched.h>
#include <sched.h>
#include <pwd.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "clock.h"
#include "confine.h"
#include "ctl.h"
#include "policy.h"
#include "run_int.h"

int run_random_hex(char *buf, size_t nbytes)
{
	static const char digits[] = "0123456789abcdef";
	uint8_t raw[32];
	size_t got = 0;

	if (nbytes > sizeof(raw))
		return -EINVAL;
	while (got < nbytes) {
		ssize_t n = getrandom(raw + got, nbytes - got, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		got += (size_t)n;
	}
	for (size_t i = 0; i < nbytes; i++) {
		buf[2 * i] = digits[raw[i] >> 4];
		buf[2 * i + 1] = digits[raw[i] & 15];
	}
	buf[2 * nbytes] = '\0';
	return 0;
}

/* The parent directory: --cgroup-parent or <cgroup2 mount>/egressd, created
 * when missing (*created tells). 0 or -errno, with a message printed. */
int run_make_parent(const char *opt, char *parent, size_t len, bool *created)
{
	char mnt[PATH_MAX];
	int err;

	*created = false;
	if (opt) {
		err = ctl_abs_path(opt, parent, len);
		if (err) {
			fprintf(stderr, "egressctl: --cgroup-parent %s: %s\n", opt, strerror(-err));
			return err;
		}
	} else {
		err = egr_cgroup2_mount(mnt, sizeof(mnt));
		if (err) {
			fprintf(stderr, "egressctl: cannot find the cgroup2 mount: %s\n",
				err == -ENOENT ? "cgroup2 is not mounted" : strerror(-err));
			return err;
		}
		if ((size_t)snprintf(parent, len, "%s/egressd", mnt) >= len)
			return -ENAMETOOLONG;
	}
	if (mkdir(parent, 0755) == 0)
		*created = true;
	else if (errno != EEXIST) {
		err = -errno;
		fprintf(stderr, "egressctl: cannot create cgroup %s: %s\n", parent, strerror(errno));
		return err;
	}
	err = egr_cgroup_check(parent);
	if (err) {
		fprintf(stderr, "egressctl: %s is not a cgroup v2 directory: %s\n", parent,
			err == -EINVAL ? "not on cgroup2" : strerror(-err));
		return err;
	}
	return 0;
}

/* A name <parent>/run-<pid>-<8 hex> not in use, for egressd to create (the
 * attach's "create"). The default parent may have been removed by a
 * concurrent run's cleanup: made again. 0 or -errno, with a message printed. */
int run_name_cgroup(const char *parent, char *cg, size_t len, bool *parent_created)
{
	char hex[9];
	int err;

	if (mkdir(parent, 0755) == 0)
		*parent_created = true;
	for (int tries = 0; tries < 16; tries++) {
		err = run_random_hex(hex, 4);
		if (err)
			break;
		if ((size_t)snprintf(cg, len, "%s/run-%d-%s", parent, (int)getpid(), hex) >= len) {
			err = -ENAMETOOLONG;
			break;
		}
		if (access(cg, F_OK) < 0 && errno == ENOENT)
			return 0;
		err = -EEXIST;
	}
	fprintf(stderr, "egressctl: cannot name a cgroup under %s: %s\n", parent, strerror(-err));
	return err;
}

int run_write_file_at(int dfd, const char *name, const char *val)
{
	size_t len = strlen(val);
	ssize_t n;
	int fd, err = 0;

	fd = openat(dfd, name, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = write(fd, val, len);
	if (n < 0)
		err = -errno;
	else if ((size_t)n != len)
		err = -EIO;
	close(fd);
	return err;
}

/* --- cleanup -------------------------------------------------------------------- */

static void sleep_ms(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Reap what the command left to us (we are its subreaper). */
static void reap_orphans(void)
{
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

/* 1 populated, 0 not, -errno; from cgroup.events open at fd. */
static int populated(int fd)
{
	char buf[256];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	const char *p;

	if (n < 0)
		return -errno;
	buf[n] = '\0';
	p = strstr(buf, "populated ");
	return p ? atoi(p + 10) != 0 : -ENODATA;
}

/* For kernels without cgroup.kill (before 5.14): SIGKILL every process in
 * the tree, one pass. */
static void kill_tree_pids(const char *dir)
{
	char path[PATH_MAX];
	struct dirent *de;
	FILE *f;
	DIR *d;
	int pid;

	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	f = fopen(path, "re");
	if (f) {
		while (fscanf(f, "%d", &pid) == 1)
			if (pid > 0)
				kill(pid, SIGKILL);
		fclose(f);
	}
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0)
			continue;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) < sizeof(path))
			kill_tree_pids(path);
	}
	closedir(d);
}

/* Kill everything in the cgroup tree and wait (bounded) until it is empty.
 * 0, or -EBUSY when processes remain, or -errno. */
int run_empty_cgroup(const char *cg, int cgfd)
{
	uint64_t deadline = egr_mono_ns() / 1000000 + KILL_WAIT_MS;
	bool have_kill;
	int err, pop = 1, efd;

	/* The kernel signals a change of "populated" as POLLPRI on
	 * cgroup.events: wait for that instead of sleeping in steps. */
	efd = openat(cgfd, "cgroup.events", O_RDONLY | O_CLOEXEC);
	if (efd < 0) {
		pop = -errno;
		fprintf(stderr, "egressctl: WARNING: opening %s/cgroup.events: %s\n", cg,
			strerror(-pop));
		return pop;
	}
	err = run_write_file_at(cgfd, "cgroup.kill", "1");
	have_kill = err != -ENOENT;
	if (err && have_kill)
		fprintf(stderr, "egressctl: WARNING: writing %s/cgroup.kill: %s\n", cg,
			strerror(-err));
	for (;;) {
		struct pollfd pfd = { .fd = efd, .events = POLLPRI };
		uint64_t now;
		int left;

		/* Without cgroup.kill, a fork can race each pass: kill again
		 * every POLL_MS; with it, one wait for the event. */
		if (!have_kill || err)
			kill_tree_pids(cg);
		reap_orphans();
		pop = populated(efd);
		now = egr_mono_ns() / 1000000;
		if (pop <= 0 || now >= deadline)
			break;
		left = (int)(deadline - now);
		if (!have_kill || err)
			left = left < POLL_MS ? left : POLL_MS;
		if (poll(&pfd, 1, left) < 0 && errno != EINTR)
			break;
	}
	close(efd);
	if (pop < 0) {
		fprintf(stderr, "egressctl: WARNING: reading %s/cgroup.events: %s\n", cg,
			strerror(-pop));
		return pop;
	}
	return pop ? -EBUSY : 0;
}

/* rmdir the cgroup tree at dir, children first. 0 or the first -errno. */
int run_remove_tree(const char *dir)
{
	char path[PATH_MAX];
	struct dirent *de;
	int err = 0, e;
	DIR *d;

	d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d))) {
		if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0)
			continue;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= sizeof(path)) {
			err = err ?: -ENAMETOOLONG;
			continue;
		}
		e = run_remove_tree(path);
		err = err ?: e;
	}
	closedir(d);
	for (int tries = 0; tries < 50; tries++) {
		if (rmdir(dir) == 0 || errno == ENOENT)
			return err;
		if (errno != EBUSY)
			break;
		sleep_ms(POLL_MS); /* the last tasks may still be on their way out */
	}
	return err ?: -errno;
}

/* status: how the command ended, for the execution's audit record (detach
 * only; NULL when unknown). */

/* --- limits and the command's view ------------------------------------------- */

/* Read a small cgroup file into buf (NUL-terminated, newline stripped). */
static int read_small(const char *dir, const char *name, char *buf, size_t len)
{
	char path[PATH_MAX];
	ssize_t n;
	int fd;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

/* Is word one of the space-separated words of list? */
static bool has_word(const char *list, const char *word)
{
	size_t n = strlen(word);

	for (const char *p = list; (p = strstr(p, word)); p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
			return true;
	return false;
}

/*
 * Make controller ctrl available to the children of parent (its
 * cgroup.subtree_control), for option opt. 0, or -errno after saying
 * exactly what is missing: a limit is never silently not applied.
 */
static int enable_controller(const char *mnt, const char *parent, const char *ctrl,
			     const char *opt)
{
	char have[512], root[512], add[32];
	int fd, err;

	err = read_small(parent, "cgroup.controllers", have, sizeof(have));
	if (err) {
		fprintf(stderr, "egressctl: run: %s: cannot read %s/cgroup.controllers: %s\n", opt,
			parent, strerror(-err));
		return err;
	}
	if (!has_word(have, ctrl)) {
		if (read_small(mnt, "cgroup.controllers", root, sizeof(root)))
			snprintf(root, sizeof(root), "?");
		if (!has_word(root, ctrl))
			fprintf(stderr, "egressctl: run: %s needs the %s controller, which cgroup2 "
					"does not offer on this host (%s/cgroup.controllers: \"%s\"; "
					"it may be bound to a cgroup v1 hierarchy); not running the "
					"command\n", opt, ctrl, mnt, root);
		else
			fprintf(stderr, "egressctl: run: %s needs the %s controller, which is not "
					"enabled for %s (add it to the cgroup.subtree_control of its "
					"parent); not running the command\n", opt, ctrl, parent);
		return -EOPNOTSUPP;
	}
	err = read_small(parent, "cgroup.subtree_control", have, sizeof(have));
	if (!err && has_word(have, ctrl))
		return 0;
	fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
	} else {
		snprintf(add, sizeof(add), "+%s", ctrl);
		err = run_write_file_at(fd, "cgroup.subtree_control", add);
		close(fd);
	}
	if (err)
		fprintf(stderr, "egressctl: run: %s: cannot enable the %s controller in "
				"%s/cgroup.subtree_control: %s; not running the command\n", opt, ctrl,
			parent, strerror(-err));
	return err;
}

/* Enable what the limits need in parent. 0 or -errno (printed). */
int run_limits_prepare(const struct run_opts *o, const char *mnt, const char *parent)
{
	int err = 0;

	if (o->pids_max)
		err = enable_controller(mnt, parent, "pids", "--pids-max");
	if (!err && o->memory_max)
		err = enable_controller(mnt, parent, "memory", "--memory-max");
	return err;
}

/* Write the limits into the sandbox cgroup (above the command's cgroup
 * namespace root, out of its reach). 0 or -errno (printed). */
int run_limits_apply(const struct run_opts *o, const char *cg, int cgfd)
{
	char val[32];
	int err = 0;

	if (o->pids_max) {
		snprintf(val, sizeof(val), "%llu", (unsigned long long)o->pids_max);
		err = run_write_file_at(cgfd, "pids.max", val);
		if (err)
			fprintf(stderr, "egressctl: run: --pids-max: cannot write %s/pids.max: %s\n",
				cg, strerror(-err));
	}
	if (!err && o->memory_max) {
		snprintf(val, sizeof(val), "%llu", (unsigned long long)o->memory_max);
		err = run_write_file_at(cgfd, "memory.max", val);
		if (err)
			fprintf(stderr, "egressctl: run: --memory-max: cannot write %s/memory.max: "
					"%s\n", cg, strerror(-err));
		/* The limit is on memory, not on memory plus swap. No file: no
		 * swap accounting (or no swap), nothing to close. */
		if (!err) {
			err = run_write_file_at(cgfd, "memory.swap.max", "0");
			if (err == -ENOENT)
				err = 0;
			else if (err)
				fprintf(stderr, "egressctl: run: --memory-max: cannot write "
						"%s/memory.swap.max: %s\n", cg, strerror(-err));
		}
	}
	return err;
}
