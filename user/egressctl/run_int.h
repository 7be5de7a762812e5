/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* egressctl run's parts, private to run.c (options, attach, waiting),
 * runchild.c (the command's pid 1 and the command) and runcg.c (its
 * cgroups: creation, limits, emptying, removal). */
#ifndef EGR_RUN_INT_H
#define EGR_RUN_INT_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "confine.h"
#include "ctl.h"

#define KILL_WAIT_MS 2000
#define POLL_MS      10

struct run_opts {
	const char *policy;
	const char *tenant;
	const char *parent;
	bool has_user;
	struct egr_run_user user;
	bool has_map_root;
	struct egr_run_user map_root; /* the host ids of uid 0 inside */
	uint64_t pids_max;   /* 0: no limit asked for */
	uint64_t memory_max; /* 0: no limit asked for */
	const char *hide[RUN_HIDE_MAX];
	size_t nhide;
	char **cmd;
};

/* What the clone child needs; set up by the caller before spawn(). */
struct run_child {
	char **cmd;
	int leaffd;     /* the command's cgroup (S/cmd) */
	int status_fd;  /* write end: pid 1 reports the command's wait status */
	/* The seccomp filter, built once by run.c; pid 1 and the command
	 * install it (confine.h egr_confine_seccomp_install). */
	const struct sock_fprog *filter;
	const struct run_view *view;
	/* The command's user namespace maps ns_id (its uid and gid inside) to
	 * host_id (what the host sees: file owners, peer credentials), or,
	 * with range, ids 0..range-1 to host_id's and on, and then the command
	 * keeps the capabilities that act on its own ids only. */
	struct egr_run_user ns_id, host_id;
	uint32_t range;
	const char *home;  /* HOME */
	const char *tmp;   /* TMPDIR */
};

/* The host uid and gid of a command that is uid 0 in its user namespace
 * with --map-root-to and no id: the kernel's overflow ids, "nobody". */
#define RUN_ROOT_HOST_ID 65534u

/* runids.c: the host id ranges of the commands' user namespaces (no --user,
 * no --map-root-to) and their private directories. */
#define RUN_ID_BASE  0x70000000u /* 1879048192 */
#define RUN_ID_COUNT 65536u      /* ids 0-65535 inside */
#define RUN_ID_SLOTS 4094u       /* up to 0x7FFE0000, systemd's foreign range */
#define RUN_IDS_DIR  "/run/egressctl-run-ids"
#define RUN_HOME_DIR "/var/lib/egressctl-run"

struct run_range {
	uint32_t base, count; /* host ids [base, base + count) are 0.. inside */
	int lockfd;           /* held for the run: the range is ours alone */
};

/* A free range, locked. 0 or -errno (printed). */
int run_range_take(struct run_range *r);
void run_range_release(struct run_range *r);
/* RUN_HOME_DIR/<random>, with home/ and tmp/, owned by host; dir gets its
 * path. 0 or -errno (printed). */
int run_home_make(const struct egr_run_user *host, char *dir, size_t len);
/* Remove it (nothing when dir is ""). 0 or -errno (printed). */
int run_home_remove(const char *dir);
/* Remove what the range's ids own at the top of /tmp and /var/tmp (the
 * world-writable places a command writes without TMPDIR) and of
 * RUN_HOME_DIR (a killed run's private directory), so the next run on the
 * range finds nothing of an earlier one there: at the end of a run and when
 * a run takes the range. */
void run_range_sweep(const struct run_range *r);

/* The child being waited for; signal handlers forward to it (run.c). In
 * pid 1 it is the command. */
extern volatile pid_t run_child_pid;

/* runchild.c: start the command's pid 1 in the leaf cgroup in new
 * namespaces. The caller blocks all signals first. pid 1's pid or -errno. */
pid_t run_spawn(const struct run_child *rc);

/* runcg.c. Those printing their own message say so. */
/* nbytes random bytes as 2*nbytes hex digits and a NUL. 0 or -errno. */
int run_random_hex(char *buf, size_t nbytes);
int run_write_file_at(int dfd, const char *name, const char *val);
/* The parent directory: --cgroup-parent or <cgroup2 mount>/egressd, created
 * when missing (*created tells). 0 or -errno, with a message printed. */
int run_make_parent(const char *opt, char *parent, size_t len, bool *created);
/* A free name under parent for a cgroup egressd creates; the parent made
 * again when gone (*parent_created). 0 or -errno, with a message printed. */
int run_name_cgroup(const char *parent, char *cg, size_t len, bool *parent_created);
/* Kill everything in the cgroup tree and wait (bounded) until it is empty.
 * 0, or -EBUSY when processes remain, or -errno. */
int run_empty_cgroup(const char *cg, int cgfd);
/* rmdir the cgroup tree at dir, children first. 0 or the first -errno. */
int run_remove_tree(const char *dir);
int run_limits_prepare(const struct run_opts *o, const char *mnt, const char *parent);
int run_limits_apply(const struct run_opts *o, const char *cg, int cgfd);

#endif /* EGR_RUN_INT_H */
