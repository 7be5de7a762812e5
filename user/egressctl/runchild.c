// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* egressctl run: the command's pid 1 and the command itself (run.c's
 * header comment says what they do and why). */
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
#include "confine.h"
#include "ctl.h"
#include "policy.h"
#include "run_int.h"

/* --- the child ------------------------------------------------------------------ */

/* The child being waited for (pid 1 in run.c, the command in pid 1);
 * signal handlers forward to it. */
volatile pid_t run_child_pid;

static void close_inherited_fds(void)
{
	long max;

#ifdef SYS_close_range
	if (syscall(SYS_close_range, 3U, ~0U, 0U) == 0)
		return;
#endif
	max = sysconf(_SC_OPEN_MAX);
	if (max < 0 || max > 1 << 20)
		max = 1 << 20;
	for (long fd = 3; fd < max; fd++)
		close((int)fd);
}

static void reset_signals(void)
{
	struct sigaction sa = { .sa_handler = SIG_DFL };
	sigset_t none;

	sigemptyset(&sa.sa_mask);
	for (int sig = 1; sig < NSIG; sig++)
		sigaction(sig, &sa, NULL); /* fails harmlessly for SIGKILL, SIGSTOP, ... */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/* Sync bytes between pid 1 and the command over the user namespace setup. */
#define USERNS_MADE   'u'
#define USERNS_MAPPED 'm'
#define USERNS_NONE   'n' /* the kernel refused one: the host identity itself */

static void __attribute__((noreturn, format(printf, 1, 2))) die(const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	dprintf(STDERR_FILENO, "egressctl: %s; not running the command\n", buf);
	_exit(CTL_EXIT_RUN_FAILED);
}

/*
 * In the command, before anything else: a user namespace of its own in
 * which it is rc->ns_id and the host sees rc->host_id (pid 1 writes the
 * maps; a uid 0 without the namespace owns every root-owned file of the
 * host). The namespace is made while still host root, so only host root
 * holds capabilities over it; the supplementary groups are set first
 * (setgroups is denied inside). The mount, cgroup, pid and IPC namespaces
 * stay those pid 1 made and owns: the command can change none of them.
 */
static bool userns_enter(const struct run_child *rc, int to_init, int from_init)
{
	gid_t gid = rc->host_id.gid;
	char c = USERNS_MADE;

	/* Still host root: the one supplementary group first (setgroups is
	 * denied in the namespace). */
	if (setgroups(1, &gid) < 0)
		die("cannot set the command's groups: %s", strerror(errno));
	if (unshare(CLONE_NEWUSER) < 0) {
		/* The kernel refuses a user namespace to a chrooted process (a
		 * build root, a test chroot) and where a sysctl disables them.
		 * Then the command is the host identity its uid would have been
		 * mapped to (65534, --map-root-to, --user), set while dropping
		 * the capabilities: never host root unless --user 0 asked for
		 * it, only without the uid 0 it would see inside. */
		int why = errno;

		c = USERNS_NONE;
		if (write(to_init, &c, 1) != 1)
			die("cannot tell pid 1 there is no user namespace");
		dprintf(STDERR_FILENO, "egressctl: run: no user namespace here (%s; a chroot?): "
			"the command runs as host uid %u gid %u\n", strerror(why), rc->host_id.uid,
			rc->host_id.gid);
		return false;
	}
	if (write(to_init, &c, 1) != 1 || read(from_init, &c, 1) != 1 || c != USERNS_MAPPED)
		die("pid 1 did not map the command's user namespace");
	if (setresgid(rc->ns_id.gid, rc->ns_id.gid, rc->ns_id.gid) < 0 ||
	    setresuid(rc->ns_id.uid, rc->ns_id.uid, rc->ns_id.uid) < 0)
		die("cannot become %u:%u in the command's user namespace: %s", rc->ns_id.uid,
		    rc->ns_id.gid, strerror(errno));
	return true;
}

/* The command itself, forked by pid 1: never returns, and never runs CMD
 * with a capability or without its seccomp filter. */
static void __attribute__((noreturn)) command_exec(const struct run_child *rc, int to_init,
						   int from_init)
{
	bool in_userns;
	int err;

	reset_signals();
	in_userns = userns_enter(rc, to_init, from_init);
	close_inherited_fds();
	/* In its namespace the identity is set already; without one it
	 * becomes the host identity here. With a range of its own, uid 0
	 * keeps what acts on those ids only (apt's drop to _apt needs it). */
	if (in_userns && rc->range)
		err = egr_confine_keep_ns_caps();
	else
		err = egr_confine_drop_all_caps(in_userns ? NULL : &rc->host_id);
	if (err)
		die("cannot drop the command's capabilities: %s", strerror(-err));
	if (rc->home && (setenv("HOME", rc->home, 1) || setenv("TMPDIR", rc->tmp, 1)))
		die("cannot set HOME and TMPDIR: %s", strerror(errno));
	err = egr_confine_seccomp_install(rc->filter);
	if (err)
		die("cannot install the seccomp filter: %s", strerror(-err));
	execvp(rc->cmd[0], rc->cmd);
	err = errno;
	/* Who tried: a file root can run may be closed to the host uid the
	 * command really is (a python under /root). */
	dprintf(STDERR_FILENO, "egressctl: cannot run %s: %s (the command runs as host uid %u "
		"gid %u", rc->cmd[0], strerror(err), rc->host_id.uid, rc->host_id.gid);
	if (in_userns)
		dprintf(STDERR_FILENO, ", uid %u in its user namespace", rc->ns_id.uid);
	dprintf(STDERR_FILENO, "%s)\n", err == EACCES || err == EPERM ?
		"; the file or a directory on its path is not open to it" : "");
	_exit(err == ENOENT ? 127 : 126);
}

static int write_proc(pid_t pid, const char *name, const char *val)
{
	char path[64];
	int dfd, err;

	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	err = run_write_file_at(dfd, name, val);
	close(dfd);
	return err;
}

/* In pid 1 (still every capability): map the command's new user namespace,
 * one uid and one gid, setgroups denied; or, with a range of its own, ids
 * 0..range-1 to it, setgroups allowed (only ids of the range can be
 * dropped or taken). 0 or -errno (printed). */
static int userns_map(const struct run_child *rc, pid_t cmd, int from_cmd, int to_cmd)
{
	char map[64], c = 0;
	int err;

	if (read(from_cmd, &c, 1) != 1 || (c != USERNS_MADE && c != USERNS_NONE))
		return -ECHILD; /* it said why */
	if (c == USERNS_NONE)
		return 0; /* nothing to map: it became the host identity itself */
	err = rc->range ? 0 : write_proc(cmd, "setgroups", "deny");
	if (!err) {
		snprintf(map, sizeof(map), "%u %u %u\n", rc->range ? 0 : rc->ns_id.uid,
			 rc->host_id.uid, rc->range ? rc->range : 1);
		err = write_proc(cmd, "uid_map", map);
	}
	if (!err) {
		snprintf(map, sizeof(map), "%u %u %u\n", rc->range ? 0 : rc->ns_id.gid,
			 rc->host_id.gid, rc->range ? rc->range : 1);
		err = write_proc(cmd, "gid_map", map);
	}
	if (err) {
		dprintf(STDERR_FILENO, "egressctl: cannot map the command's user namespace (%u:%u "
			"as host %u:%u): %s; not running the command\n", rc->ns_id.uid,
			rc->ns_id.gid, rc->host_id.uid, rc->host_id.gid, strerror(-err));
		return err;
	}
	c = USERNS_MAPPED;
	return write(to_cmd, &c, 1) == 1 ? 0 : -errno;
}

static bool keep_kill(int cap, void *ctx)
{
	return cap == CAP_KILL; /* to forward signals to a --user command */
}

/*
 * pid 1 of the command's namespaces: never returns. All signals are blocked
 * on entry (the caller's mask) and the caller's handlers forward SIGINT,
 * SIGTERM and SIGHUP to run_child_pid, which is 0 here until the command exists.
 */
static void __attribute__((noreturn)) run_init(const struct run_child *rc, bool join)
{
	int err, status, to_init[2], to_cmd[2];
	sigset_t none;
	pid_t pid, cmd;

	/* The sandbox does not outlive egressctl: when it dies, so does this
	 * pid 1, and with it every process of the pid namespace. */
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	/* A session of its own: no controlling terminal (TIOCSTI into the
	 * caller's terminal needs CAP_SYS_ADMIN then) and no process group
	 * shared with egressctl or its caller (kill(0) reaches only the
	 * sandbox). */
	if (setsid() < 0)
		die("cannot start a session of its own: %s", strerror(errno));
	if (join) {
		/* fork fallback: we are pid 1 of the new pid namespace already;
		 * into the cgroup first, then a cgroup namespace rooted there. */
		err = run_write_file_at(rc->leaffd, "cgroup.procs", "0");
		if (err)
			die("cannot move the command into its cgroup: %s", strerror(-err));
		if (unshare(CLONE_NEWCGROUP | CLONE_NEWNS | CLONE_NEWIPC) < 0)
			die("cannot make its namespaces: %s", strerror(errno));
	}
	if (run_view_enter(rc->view))
		_exit(CTL_EXIT_RUN_FAILED);
	/* Only the status pipe (as 3) stays open in pid 1; the command gets 0-2. */
	if (dup2(rc->status_fd, 3) < 0)
		die("dup2: %s", strerror(errno));
#ifdef SYS_close_range
	syscall(SYS_close_range, 4U, ~0U, 0U);
#endif
	fflush(stderr);
	if (pipe2(to_init, O_CLOEXEC) < 0 || pipe2(to_cmd, O_CLOEXEC) < 0)
		die("pipe: %s", strerror(errno));
	cmd = fork();
	if (cmd < 0)
		die("cannot fork the command: %s", strerror(errno));
	if (cmd == 0) {
		close(to_init[0]);
		close(to_cmd[1]);
		command_exec(rc, to_init[1], to_cmd[0]);
	}
	run_child_pid = cmd;
	close(to_init[1]);
	close(to_cmd[0]);
	err = userns_map(rc, cmd, to_init[0], to_cmd[1]);
	close(to_init[0]);
	close(to_cmd[1]);
	if (err) {
		kill(cmd, SIGKILL);
		_exit(CTL_EXIT_RUN_FAILED);
	}
	/* Nothing in the sandbox may reach into pid 1: not dumpable (its /proc
	 * files are root's and ptrace-protected), no capability but CAP_KILL,
	 * the same seccomp filter. */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	err = egr_caps_restrict(keep_kill, NULL, NULL);
	if (!err)
		err = egr_confine_seccomp_install(rc->filter);
	if (err) {
		kill(cmd, SIGKILL);
		die("cannot confine the sandbox's pid 1: %s", strerror(-err));
	}
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (;;) {
		pid = waitpid(-1, &status, 0);
		if (pid < 0 && errno == EINTR)
			continue;
		if (pid < 0)
			_exit(CTL_EXIT_RUN_FAILED); /* ECHILD: cannot happen before cmd */
		if (pid != cmd)
			continue; /* an orphan reparented to us */
		if (write(3, &status, sizeof(status)) != (ssize_t)sizeof(status))
			_exit(CTL_EXIT_RUN_FAILED);
		_exit(0);
	}
}

/*
 * Start the command's pid 1 in the leaf cgroup in new namespaces. The
 * caller blocks all signals first. Returns pid 1's pid or -errno.
 */
pid_t run_spawn(const struct run_child *rc)
{
	struct clone_args args = {
		.flags = CLONE_INTO_CGROUP | CLONE_NEWCGROUP | CLONE_NEWPID | CLONE_NEWNS |
			 CLONE_NEWIPC,
		.exit_signal = SIGCHLD,
		.cgroup = (uint64_t)rc->leaffd,
	};
	long ret;
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	/* With CLONE_INTO_CGROUP the new cgroup namespace is rooted at the
	 * target cgroup (cgroup_post_fork). */
	ret = syscall(SYS_clone3, &args, sizeof(args));
	if (ret == 0)
		run_init(rc, false);
	if (ret > 0)
		return (pid_t)ret;
	if (errno != ENOSYS && errno != EINVAL && errno != E2BIG)
		return -errno;
	/* Kernel without clone3 or CLONE_INTO_CGROUP: our next child is pid 1
	 * of a new pid namespace (egressctl itself stays where it is). */
	if (unshare(CLONE_NEWPID) < 0)
		return -errno;
	pid = fork();
	if (pid == 0)
		run_init(rc, true);
	return pid < 0 ? -errno : pid;
}
