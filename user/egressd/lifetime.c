// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Sandboxes end with their cgroup, and run sandboxes with their launcher. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cgroup.h"
#include "lifetime.h"
#include "log.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* A killed launcher's cgroup is removed once its last task has exited:
 * tried every tick for this many ticks. */
#define RMDIR_TRIES 30

struct tie {
	uint32_t sb_id;
	uint64_t cgroup_id;
	struct egr_launcher l;
	int pidfd;
};

struct removal {
	char *path;
	uint64_t cgroup_id;
	unsigned tries;
};

struct egr_lifetime {
	struct egr_loop *loop;
	struct egr_registry *reg;
	struct tie *ties;
	size_t nties, capties;
	struct removal *rm;
	size_t nrm, caprm;
	size_t cursor; /* where the next tick's share of the cgroup checks starts */
};

/* Each tick checks every cgroup up to this many sandboxes, and a fifth of
 * them beyond (each within 5 s): a name_to_handle_at per sandbox per second
 * was ~5 % of a CPU with 10,000 attached. */
#define LIFETIME_CHECK_ALL_UPTO 1000
#define LIFETIME_CHECK_SPREAD 5

static int pidfd_open_(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* Has the process behind pidfd not exited yet? (A pidfd polls readable
 * once it has, zombie or not.) */
static bool pidfd_alive(int pidfd)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };

	return poll(&p, 1, 0) == 0;
}

/* /proc/<pid>/stat field 22 (starttime, clock ticks after boot). */
static int read_start(pid_t pid, uint64_t *start)
{
	char path[64], buf[1024], *p;
	ssize_t n;
	int fd, field;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* comm may hold spaces and parentheses */
	if (!p)
		return -EIO;
	/* p is in field 2; each space starts the next field */
	for (field = 2; *p && field < 22; p++)
		if (*p == ' ')
			field++;
	if (field != 22 || !*p)
		return -EIO;
	errno = 0;
	*start = strtoull(p, &p, 10);
	return errno ? -errno : 0;
}

/* "populated 0" in <cgroup>/cgroup.events: no process in it or below. */
static int cgroup_empty(const char *cgroup)
{
	char path[PATH_MAX], buf[256];
	ssize_t n;
	int fd;

	if ((size_t)snprintf(path, sizeof(path), "%s/cgroup.events", cgroup) >= sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	if (strstr(buf, "populated 0"))
		return 0;
	return strstr(buf, "populated 1") ? -EBUSY : -EIO;
}

int egr_lifetime_peer_launcher(int cfd, const struct ucred *peer, long long pid,
			       const char *cgroup, struct egr_launcher *l, int *pidfd,
			       const char **why)
{
	socklen_t len = sizeof(int);
	struct stat st;
	int fd = -1, err;

	*why = NULL;
	if (pid <= 0 || pid != (long long)peer->pid) {
		*why = "launcher_pid must be the pid of the process that sends the request (as "
		       "egressd sees it)";
		return -EPERM;
	}
	/* What the launcher's end kills must be the launcher's to kill: a
	 * cgroup it owns (root: any), with nothing running in it yet. */
	if (stat(cgroup, &st) < 0)
		return -errno;
	if (peer->uid != 0 && st.st_uid != peer->uid) {
		*why = "a launcher's cgroup must be owned by the launcher's uid";
		return -EPERM;
	}
	err = cgroup_empty(cgroup);
	if (err == -EBUSY)
		*why = "a launcher's cgroup must have no process in it at attach";
	if (err)
		return err;
	/* The peer itself, not whatever holds its pid by now. */
	if (getsockopt(cfd, SOL_SOCKET, SO_PEERPIDFD, &fd, &len) < 0) {
		if (errno != ENOPROTOOPT)
			return -errno;
		fd = pidfd_open_(peer->pid);
		if (fd < 0)
			return -errno;
	}
	err = read_start(peer->pid, &l->start);
	/* Still alive after the read: /proc/<pid> was the process of pidfd. */
	if (!err && !pidfd_alive(fd))
		err = -ESRCH;
	if (err) {
		close(fd);
		return err;
	}
	l->pid = (int)peer->pid;
	*pidfd = fd;
	return 0;
}

static struct tie *find_tie(struct egr_lifetime *lt, uint32_t sb_id)
{
	for (size_t i = 0; i < lt->nties; i++)
		if (lt->ties[i].sb_id == sb_id)
			return &lt->ties[i];
	return NULL;
}

static void drop_tie(struct egr_lifetime *lt, struct tie *t)
{
	egr_loop_del(lt->loop, t->pidfd);
	close(t->pidfd);
	*t = lt->ties[--lt->nties];
}

/* Is sb (by id) still the sandbox tie t was made for? */
static struct egr_sb *tied_sandbox(struct egr_lifetime *lt, const struct tie *t)
{
	struct egr_sb *sb = egr_reg_find(lt->reg, NULL, t->sb_id);

	if (!sb || sb->cgroup_id != t->cgroup_id || sb->launcher.pid != t->l.pid ||
	    sb->launcher.start != t->l.start)
		return NULL;
	return sb;
}

static void queue_removal(struct egr_lifetime *lt, const char *path, uint64_t cgroup_id)
{
	struct removal *n;

	for (size_t i = 0; i < lt->nrm; i++)
		if (lt->rm[i].cgroup_id == cgroup_id)
			return; /* a detach retried */
	if (lt->nrm == lt->caprm) {
		size_t cap = lt->caprm ? lt->caprm * 2 : 4;

		n = realloc(lt->rm, cap * sizeof(*n));
		if (!n)
			goto oom;
		lt->rm = n;
		lt->caprm = cap;
	}
	n = &lt->rm[lt->nrm];
	n->path = strdup(path);
	if (!n->path)
		goto oom;
	n->cgroup_id = cgroup_id;
	n->tries = 0;
	lt->nrm++;
	return;
oom:
	log_error("lifetime: out of memory; cgroup %s is left in place (empty)", path);
}

/* rmdir the cgroup tree at dir, children first: rmdir removes only empty
 * cgroups, so nothing a task still uses goes. 0 or the first -errno. */
static int remove_tree(const char *dir)
{
	char path[PATH_MAX];
	struct dirent *de;
	int err = 0, e;
	DIR *d = opendir(dir);

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
		e = remove_tree(path);
		err = err ?: e;
	}
	closedir(d);
	if (rmdir(dir) == 0 || errno == ENOENT)
		return err;
	return err ?: -errno;
}

static void run_removals(struct egr_lifetime *lt)
{
	for (size_t i = 0; i < lt->nrm;) {
		struct removal *rm = &lt->rm[i];
		uint64_t id = 0;
		int err = egr_cgroup_id(rm->path, &id);

		/* Another cgroup at the path by now is not ours to remove. */
		if (!err && id == rm->cgroup_id)
			err = remove_tree(rm->path);
		else
			err = 0;
		if (err && ++rm->tries < RMDIR_TRIES) {
			i++;
			continue;
		}
		if (err)
			log_error("lifetime: cannot remove cgroup %s: %s; left in place", rm->path,
				  strerror(-err));
		else
			log_info("lifetime: removed cgroup %s", rm->path);
		free(rm->path);
		*rm = lt->rm[--lt->nrm];
	}
}

static void detach(struct egr_lifetime *lt, struct egr_sb *sb, const char *status)
{
	struct egr_fail f;
	uint32_t id = sb->id;

	if (egr_reg_set_end_status(lt->reg, sb, status))
		log_warn("sandbox %u: out of memory; its audit record says \"detached\"", id);
	if (egr_reg_detach(lt->reg, sb, &f))
		log_error("sandbox %u: detach (%s): %s; it stays enforced", id, status,
			  f.e.message);
}

/* The launcher exited without detaching: what it started dies with it. */
static void launcher_gone(struct egr_lifetime *lt, struct egr_sb *sb)
{
	char path[PATH_MAX];
	uint64_t now = 0;
	int fd, err = 0;

	log_warn("sandbox %u: its launcher (pid %d) is gone without detaching; killing cgroup %s",
		 sb->id, sb->launcher.pid, sb->cgroup);
	snprintf(path, sizeof(path), "%s/cgroup.kill", sb->cgroup);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, "1", 1) != 1)
		err = -errno;
	if (fd >= 0)
		close(fd);
	if (err && err != -ENOENT)
		/* Detached it stays under deny-all (held) all the same. */
		log_error("sandbox %u: cgroup.kill of %s: %s", sb->id, sb->cgroup, strerror(-err));
	/* The launcher made this cgroup for the run (the attach said so). */
	if (egr_cgroup_id(sb->cgroup, &now) == 0 && now == sb->cgroup_id)
		queue_removal(lt, sb->cgroup, sb->cgroup_id);
	detach(lt, sb, "launcher gone");
}

static void on_pidfd(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_lifetime *lt = ctx;

	for (size_t i = 0; i < lt->nties; i++) {
		struct tie *t = &lt->ties[i];
		struct egr_sb *sb;

		if (t->pidfd != fd)
			continue;
		sb = tied_sandbox(lt, t);
		drop_tie(lt, t);
		if (sb)
			launcher_gone(lt, sb);
		run_removals(lt); /* most often already empty */
		return;
	}
	egr_loop_del(loop, fd); /* not ours any more */
}

int egr_lifetime_tie(struct egr_lifetime *lt, const struct egr_sb *sb, int pidfd)
{
	struct tie *t = find_tie(lt, sb->id);
	int err;

	if (t && t->l.pid == sb->launcher.pid && t->l.start == sb->launcher.start) {
		close(pidfd); /* an attach again: already watched */
		return 0;
	}
	if (t)
		drop_tie(lt, t);
	if (lt->nties == lt->capties) {
		size_t cap = lt->capties ? lt->capties * 2 : 8;
		struct tie *n = realloc(lt->ties, cap * sizeof(*n));

		if (!n) {
			close(pidfd);
			return -ENOMEM;
		}
		lt->ties = n;
		lt->capties = cap;
	}
	err = egr_loop_add(lt->loop, pidfd, EPOLLIN, on_pidfd, lt);
	if (err) {
		close(pidfd);
		return err;
	}
	lt->ties[lt->nties++] = (struct tie){ .sb_id = sb->id, .cgroup_id = sb->cgroup_id,
					      .l = sb->launcher, .pidfd = pidfd };
	return 0;
}

/* A sandbox whose state names a launcher but that has no tie (adopted, or
 * the tie at attach failed): tie it now, or end it if the launcher is gone
 * (its pid gone, or held by a process that started at another time). */
static void tie_or_end(struct egr_lifetime *lt, struct egr_sb *sb)
{
	uint64_t start = 0;
	int fd, err;

	fd = pidfd_open_(sb->launcher.pid);
	err = fd < 0 ? -errno : read_start(sb->launcher.pid, &start);
	if (!err && (start != sb->launcher.start || !pidfd_alive(fd)))
		err = -ESRCH;
	if (err == -ESRCH || err == -ENOENT) {
		if (fd >= 0)
			close(fd);
		launcher_gone(lt, sb);
		return;
	}
	if (err) {
		log_warn("sandbox %u: cannot watch its launcher pid %d: %s; retrying", sb->id,
			 sb->launcher.pid, strerror(-err));
		if (fd >= 0)
			close(fd);
		return;
	}
	err = egr_lifetime_tie(lt, sb, fd);
	if (err)
		log_warn("sandbox %u: cannot watch its launcher pid %d: %s; retrying", sb->id,
			 sb->launcher.pid, strerror(-err));
}

static void check(struct egr_lifetime *lt, bool all)
{
	size_t n = egr_reg_count(lt->reg), k = 0, share = n;
	uint32_t *ids;

	if (!all && n > LIFETIME_CHECK_ALL_UPTO) {
		share = n / LIFETIME_CHECK_SPREAD;
		if (share < LIFETIME_CHECK_ALL_UPTO)
			share = LIFETIME_CHECK_ALL_UPTO;
	}

	/* Ties of sandboxes detached since. */
	for (size_t i = 0; i < lt->nties;) {
		if (!tied_sandbox(lt, &lt->ties[i]))
			drop_tie(lt, &lt->ties[i]);
		else
			i++;
	}
	/* This tick's share, by id: detaching changes the registry. */
	ids = n ? calloc(share, sizeof(*ids)) : NULL;
	if (ids)
		k = egr_reg_sweep(lt->reg, &lt->cursor, share, ids);
	for (size_t i = 0; ids && i < k; i++) {
		struct egr_sb *sb = egr_reg_find(lt->reg, NULL, ids[i]);
		uint64_t now = 0;
		int err;

		/* A device sandbox has no cgroup: its device is watched by the
		 * registry (egr_reg_netdev_check). */
		if (!sb || sb->netdev)
			continue;
		/* cgroup2 refuses rename (EPERM): a path that no longer names
		 * the cgroup means it was removed. Other errors: kept. */
		err = egr_cgroup_id(sb->cgroup, &now);
		if (err == -ENOENT || err == -ENOTDIR || (!err && now != sb->cgroup_id)) {
			log_info("sandbox %u: cgroup %s is gone; detaching it", sb->id,
				 sb->cgroup);
			detach(lt, sb, "cgroup gone");
			continue;
		}
		if (sb->launcher.pid && !find_tie(lt, sb->id))
			tie_or_end(lt, sb);
	}
	if (n && !ids)
		log_error("lifetime: out of memory; sandboxes not checked this second");
	free(ids);
	run_removals(lt);
}

void egr_lifetime_check(struct egr_lifetime *lt)
{
	check(lt, true);
}

static void on_tick(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	check(ctx, false);
}

int egr_lifetime_start(struct egr_lifetime **out, struct egr_loop *loop, struct egr_registry *reg)
{
	struct egr_lifetime *lt = calloc(1, sizeof(*lt));
	int err;

	if (!lt)
		return -ENOMEM;
	lt->loop = loop;
	lt->reg = reg;
	egr_lifetime_check(lt); /* adopted ties, launchers gone while egressd was away */
	err = egr_loop_every(loop, EGR_LIFETIME_INTERVAL_MS, on_tick, lt);
	if (err) {
		egr_lifetime_free(lt);
		return err;
	}
	*out = lt;
	return 0;
}

void egr_lifetime_free(struct egr_lifetime *lt)
{
	if (!lt)
		return;
	for (size_t i = 0; i < lt->nties; i++) {
		egr_loop_del(lt->loop, lt->ties[i].pidfd);
		close(lt->ties[i].pidfd);
	}
	for (size_t i = 0; i < lt->nrm; i++)
		free(lt->rm[i].path);
	free(lt->ties);
	free(lt->rm);
	free(lt);
}
