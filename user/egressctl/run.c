// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * egressctl run: a command in a transient sandbox.
 *
 * A fresh cgroup is created and attached before the command exists; the
 * command is born inside it (clone3 CLONE_INTO_CGROUP, or a fork child that
 * moves itself in before exec), so not one instruction of it runs
 * unconfined. Afterwards everything left in the cgroup is killed
 * (cgroup.kill), the sandbox detached and the cgroup tree removed.
 *
 * Before exec the child also drops the capabilities that go around egressd
 * and installs the seccomp family filter (user/lib/confine.c), so the
 * families no cgroup hook sees (AF_PACKET, AF_XDP, AF_VSOCK, ...) and
 * io_uring are closed too. If either fails the command is not run.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <linux/sched.h>
#include <signal.h>
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

#define KILL_WAIT_MS 2000
#define POLL_MS      10

static const char run_help[] =
	"Usage: egressctl run --policy FILE [--tenant T] [--cgroup-parent DIR] -- CMD [ARGS...]\n"
	"Run CMD in a new cgroup confined by the policy in FILE (\"-\" is stdin), then\n"
	"kill whatever it left behind, detach the sandbox and remove the cgroup.\n"
	"\n"
	"  --policy FILE        the sandbox policy (validated locally first)\n"
	"  --tenant T           use tenant T instead of the policy's\n"
	"  --cgroup-parent DIR  where to create the cgroup (default: egressd/ under the\n"
	"                       cgroup2 mount, created when missing)\n"
	"\n"
	"A policy without execution_id gets \"run-\" and 16 random hex digits. SIGINT,\n"
	"SIGTERM and SIGHUP are forwarded to CMD. CMD gets only descriptors 0, 1 and 2,\n"
	"runs without CAP_NET_RAW, CAP_NET_ADMIN, CAP_SYS_ADMIN, CAP_BPF (and a few\n"
	"more) and under a seccomp filter that refuses sockets of families other than\n"
	"inet, inet6 and unix (plus those the policy's allow_sockets names) and\n"
	"io_uring; see `egressctl seccomp-profile`. Exit status: CMD's, 128+N when it\n"
	"was killed by signal N; 125 when it could not be started (3 when egressd is\n"
	"not reachable, 4 for an invalid policy); 126/127 when CMD cannot be executed\n"
	"or is not found.\n";

struct run_opts {
	const char *policy;
	const char *tenant;
	const char *parent;
	char **cmd;
};

/* The child being waited for; signal handlers forward to it. Before it
 * exists, the first signal is remembered and the command is not started. */
static volatile pid_t child_pid;
static volatile sig_atomic_t early_signal;

static void forward_signal(int sig)
{
	int saved = errno;
	pid_t pid = child_pid;

	if (pid > 0)
		kill(pid, sig);
	else if (pid == 0 && !early_signal)
		early_signal = sig;
	errno = saved;
}

static const int forwarded[] = { SIGINT, SIGTERM, SIGHUP };

static int parse_run(struct ctl *c, int argc, char **argv, struct run_opts *o)
{
	enum { O_SOCKET = 256, O_TIMEOUT, O_HELP, O_POLICY, O_TENANT, O_PARENT };
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, O_SOCKET },
		{ "timeout", required_argument, NULL, O_TIMEOUT },
		{ "help", no_argument, NULL, O_HELP },
		{ "policy", required_argument, NULL, O_POLICY },
		{ "tenant", required_argument, NULL, O_TENANT },
		{ "cgroup-parent", required_argument, NULL, O_PARENT },
		{ NULL, 0, NULL, 0 },
	};
	int opt;

	memset(o, 0, sizeof(*o));
	optind = 0;
	/* "+": the first non-option starts CMD, whose options are its own. */
	while ((opt = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		char *end;
		unsigned long v;

		switch (opt) {
		case O_SOCKET:
			c->socket = optarg;
			break;
		case O_TIMEOUT:
			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || optarg[0] == '-' || v > 86400)
				return ctl_usage_error("run", "--timeout: expected seconds (0-86400), "
						       "got '%s'", optarg);
			c->timeout = (unsigned int)v;
			break;
		case O_HELP:
			fputs(run_help, stdout);
			return INT_MAX;
		case O_POLICY:
			o->policy = optarg;
			break;
		case O_TENANT:
			o->tenant = optarg;
			break;
		case O_PARENT:
			o->parent = optarg;
			break;
		default:
			fputs("Try 'egressctl run --help'.\n", stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (!o->policy)
		return ctl_usage_error("run", "run: --policy FILE is required");
	if (optind >= argc)
		return ctl_usage_error("run", "run: no command given (egressctl run --policy FILE "
				       "-- CMD [ARGS...])");
	o->cmd = argv + optind;
	return -1;
}

static int random_hex(char *buf, size_t nbytes)
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

/* The process-side confinement the policy asks for. An exit status. */
static int confine_for(const json_t *policy, struct egr_confine *conf)
{
	struct egr_error perr = { 0 };
	struct egr_policy pol;
	int err;

	memset(conf, 0, sizeof(*conf));
	err = egr_policy_from_json(policy, &pol, &perr);
	if (err == -ENOMEM) {
		fprintf(stderr, "egressctl: out of memory\n");
		return CTL_EXIT_ERROR;
	}
	if (err) {
		fprintf(stderr, "egressctl: invalid policy: %s%s%s\n", perr.field,
			perr.field[0] ? ": " : "", perr.message);
		return CTL_EXIT_INVALID;
	}
	conf->extra_families = pol.families;
	egr_policy_free(&pol);
	return CTL_EXIT_OK;
}

/* Load the policy, apply --tenant and a default execution_id, validate. */
static int prepare_policy(const struct run_opts *o, json_t **out)
{
	char id[4 + 32 + 1] = "run-";
	json_t *policy;
	int rc, err;

	rc = ctl_policy_load(o->policy, &policy);
	if (rc)
		return rc;
	if (o->tenant && json_object_set_new(policy, "tenant", json_string(o->tenant))) {
		fprintf(stderr, "egressctl: invalid policy: tenant: --tenant is not valid UTF-8\n");
		json_decref(policy);
		return CTL_EXIT_INVALID;
	}
	if (!json_object_get(policy, "execution_id")) {
		err = random_hex(id + 4, 8);
		if (err || json_object_set_new(policy, "execution_id", json_string(id))) {
			fprintf(stderr, "egressctl: cannot make an execution id: %s\n",
				strerror(err ? -err : ENOMEM));
			json_decref(policy);
			return CTL_EXIT_RUN_FAILED;
		}
	}
	if (o->tenant) {
		rc = ctl_policy_check(policy);
		if (rc) {
			json_decref(policy);
			return rc;
		}
	}
	*out = policy;
	return CTL_EXIT_OK;
}

/* The parent directory: --cgroup-parent or <cgroup2 mount>/egressd, created
 * when missing (*created tells). 0 or -errno, with a message printed. */
static int make_parent(const char *opt, char *parent, size_t len, bool *created)
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

/* Create <parent>/run-<pid>-<8 hex>. 0 or -errno, with a message printed. */
static int make_cgroup(const char *parent, char *cg, size_t len, bool *parent_created)
{
	char hex[9];
	int err;

	for (int tries = 0; tries < 16; tries++) {
		err = random_hex(hex, 4);
		if (err)
			break;
		if ((size_t)snprintf(cg, len, "%s/run-%d-%s", parent, (int)getpid(), hex) >= len) {
			err = -ENAMETOOLONG;
			break;
		}
		if (mkdir(cg, 0755) == 0)
			return 0;
		err = -errno;
		/* A concurrent run may have removed the (empty) default parent. */
		if (err == -ENOENT && mkdir(parent, 0755) == 0) {
			*parent_created = true;
			continue;
		}
		if (err != -EEXIST)
			break;
	}
	fprintf(stderr, "egressctl: cannot create a cgroup under %s: %s\n", parent,
		strerror(-err));
	return err;
}

static int write_file_at(int dfd, const char *name, const char *val)
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

/* --- the child ------------------------------------------------------------------ */

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

/* In the child: never returns, and never runs CMD outside the cgroup or
 * without its capability drop and seccomp filter. */
static void __attribute__((noreturn)) child_exec(char **cmd, int cgfd, bool join,
						 const struct egr_confine *conf)
{
	int err;

	if (join) {
		/* fork fallback: move ourselves in before anything else. */
		err = write_file_at(cgfd, "cgroup.procs", "0");
		if (err) {
			dprintf(STDERR_FILENO, "egressctl: cannot move the command into its "
					       "cgroup: %s; not running it\n", strerror(-err));
			_exit(CTL_EXIT_RUN_FAILED);
		}
	}
	reset_signals();
	close_inherited_fds();
	/* Capabilities first: the filter sets no_new_privs, and dropping
	 * needs no syscall the filter refuses, but keep the order obvious. */
	err = egr_confine_drop_caps();
	if (err) {
		dprintf(STDERR_FILENO, "egressctl: cannot drop the command's capabilities: %s; "
				       "not running it\n", strerror(-err));
		_exit(CTL_EXIT_RUN_FAILED);
	}
	err = egr_confine_seccomp(conf);
	if (err) {
		dprintf(STDERR_FILENO, "egressctl: cannot install the seccomp filter: %s; "
				       "not running it\n", strerror(-err));
		_exit(CTL_EXIT_RUN_FAILED);
	}
	execvp(cmd[0], cmd);
	err = errno;
	dprintf(STDERR_FILENO, "egressctl: cannot run %s: %s\n", cmd[0], strerror(err));
	_exit(err == ENOENT ? 127 : 126);
}

/*
 * Start cmd inside the cgroup open at cgfd. The forwarded signals must be
 * blocked by the caller. Returns the child's pid or -errno.
 */
static pid_t spawn(char **cmd, int cgfd, const struct egr_confine *conf)
{
	struct clone_args args = {
		.flags = CLONE_INTO_CGROUP,
		.exit_signal = SIGCHLD,
		.cgroup = (uint64_t)cgfd,
	};
	long ret;
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	ret = syscall(SYS_clone3, &args, sizeof(args));
	if (ret == 0)
		child_exec(cmd, cgfd, false, conf);
	if (ret > 0)
		return (pid_t)ret;
	if (errno != ENOSYS && errno != EINVAL && errno != E2BIG)
		return -errno;
	/* Kernel without clone3 or CLONE_INTO_CGROUP. */
	pid = fork();
	if (pid == 0)
		child_exec(cmd, cgfd, true, conf);
	return pid < 0 ? -errno : pid;
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

/* 1 populated, 0 not, -errno. */
static int populated(const char *cg)
{
	char path[PATH_MAX], line[128];
	int ret = -ENODATA;
	FILE *f;

	snprintf(path, sizeof(path), "%s/cgroup.events", cg);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "populated ", 10) == 0) {
			ret = atoi(line + 10) != 0;
			break;
		}
	}
	fclose(f);
	return ret;
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
static int empty_cgroup(const char *cg, int cgfd)
{
	bool have_kill;
	int err, pop = 1;

	err = write_file_at(cgfd, "cgroup.kill", "1");
	have_kill = err != -ENOENT;
	if (err && have_kill)
		fprintf(stderr, "egressctl: WARNING: writing %s/cgroup.kill: %s\n", cg,
			strerror(-err));
	for (int waited = 0; waited <= KILL_WAIT_MS; waited += POLL_MS) {
		if (!have_kill || err)
			kill_tree_pids(cg);
		reap_orphans();
		pop = populated(cg);
		if (pop <= 0)
			break;
		sleep_ms(POLL_MS);
	}
	if (pop < 0) {
		fprintf(stderr, "egressctl: WARNING: reading %s/cgroup.events: %s\n", cg,
			strerror(-pop));
		return pop;
	}
	return pop ? -EBUSY : 0;
}

/* rmdir the cgroup tree at dir, children first. 0 or the first -errno. */
static int remove_tree(const char *dir)
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
		e = remove_tree(path);
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
static int request_cgroup(struct ctl *c, const char *op, const char *cg, json_t *policy,
			  const char *status, char *code, size_t codelen)
{
	json_t *req, *resp = NULL;
	int rc;

	req = json_pack("{s:s, s:s}", "op", op, "cgroup", cg);
	if (req && status)
		json_object_set_new(req, "status", json_string(status));
	if (!req || (policy && json_object_set(req, "policy", policy))) {
		json_decref(req);
		fprintf(stderr, "egressctl: out of memory\n");
		return CTL_EXIT_ERROR;
	}
	rc = ctl_request(c, req, &resp, code, codelen);
	json_decref(req);
	json_decref(resp);
	return rc;
}

/* --- run -------------------------------------------------------------------------- */

static int exit_status(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return CTL_EXIT_RUN_FAILED;
}

int ctl_cmd_run(struct ctl *c, int argc, char **argv)
{
	char parent[PATH_MAX], cg[PATH_MAX], code[64];
	struct sigaction sa = { .sa_handler = forward_signal };
	sigset_t block, old_mask;
	bool parent_created, attached = false, default_parent;
	json_t *policy = NULL;
	struct egr_confine conf;
	struct run_opts o;
	int rc, err, status = 0, cgfd = -1;
	char end[32];
	pid_t pid;

	rc = parse_run(c, argc, argv, &o);
	if (rc >= 0)
		return rc;
	rc = prepare_policy(&o, &policy);
	if (rc)
		return rc;
	rc = confine_for(policy, &conf);
	if (rc) {
		json_decref(policy);
		return rc;
	}
	/* From here on SIGINT, SIGTERM and SIGHUP never cut the setup or the
	 * cleanup short: they are forwarded to the command while it runs and
	 * otherwise only remembered. */
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < 3; i++)
		sigaction(forwarded[i], &sa, NULL);
	default_parent = !o.parent;
	parent[0] = '\0';
	parent_created = false;
	if (make_parent(o.parent, parent, sizeof(parent), &parent_created) ||
	    make_cgroup(parent, cg, sizeof(cg), &parent_created)) {
		rc = CTL_EXIT_RUN_FAILED;
		goto out_parent;
	}
	cgfd = open(cg, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cgfd < 0) {
		fprintf(stderr, "egressctl: cannot open cgroup %s: %s\n", cg, strerror(errno));
		rc = CTL_EXIT_RUN_FAILED;
		goto out_rmdir;
	}

	rc = request_cgroup(c, "attach", cg, policy, NULL, code, sizeof(code));
	if (rc) {
		fprintf(stderr, "egressctl: run: cannot attach %s; the command was not started\n",
			cg);
		if (rc == CTL_EXIT_ERROR && !code[0]) {
			/* No answer: the attach may have happened. Undo it quietly. */
			c->quiet = true;
			request_cgroup(c, "detach", cg, NULL, NULL, NULL, 0);
			c->quiet = false;
		}
		if (rc != CTL_EXIT_UNREACHABLE && rc != CTL_EXIT_INVALID)
			rc = CTL_EXIT_RUN_FAILED;
		goto out_rmdir;
	}
	attached = true;
	if (early_signal) {
		fprintf(stderr, "egressctl: run: %s received; not starting %s\n",
			strsignal(early_signal), o.cmd[0]);
		rc = 128 + early_signal;
		status = -1;
		goto cleanup;
	}

	/* Orphans of the command are reparented to us, so they can be reaped. */
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	/* Signals stay blocked until the child's pid is known: a signal handled
	 * in the child before it resets its handlers must not be forwarded. */
	sigfillset(&block);
	sigprocmask(SIG_BLOCK, &block, &old_mask);
	pid = spawn(o.cmd, cgfd, &conf);
	if (pid < 0) {
		fprintf(stderr, "egressctl: cannot start %s in %s: %s\n", o.cmd[0], cg,
			strerror(-pid));
		status = -1;
	} else {
		child_pid = pid;
	}
	sigprocmask(SIG_SETMASK, &old_mask, NULL);
	while (pid > 0 && waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			fprintf(stderr, "egressctl: waiting for %s: %s\n", o.cmd[0],
				strerror(errno));
			status = -1;
			break;
		}
	}
	child_pid = -1; /* signals from now on are dropped */
	rc = status < 0 ? CTL_EXIT_RUN_FAILED : exit_status(status);

cleanup:
	err = empty_cgroup(cg, cgfd);
	if (err) {
		/* Fail closed: never detach a cgroup that may still hold processes. */
		fprintf(stderr, "egressctl: ERROR: %s: %s; leaving it attached and in place "
				"(still confined)\n", cg,
			err == -EBUSY ? "processes are still running after cgroup.kill" :
					"cannot tell whether it is empty");
		goto out_close;
	}
	if (status < 0)
		snprintf(end, sizeof(end), "not-started");
	else if (WIFSIGNALED(status))
		snprintf(end, sizeof(end), "killed:%d", WTERMSIG(status));
	else
		snprintf(end, sizeof(end), "exited:%d", WEXITSTATUS(status));
	if (request_cgroup(c, "detach", cg, NULL, end, NULL, 0) == CTL_EXIT_OK)
		attached = false;
	else
		fprintf(stderr, "egressctl: warning: could not detach %s; it is empty and is "
				"removed anyway (egressd drops such a sandbox when it next starts)\n",
			cg);

out_rmdir:
	if (cgfd >= 0) {
		close(cgfd);
		cgfd = -1;
	}
	err = remove_tree(cg);
	if (err && attached)
		fprintf(stderr, "egressctl: ERROR: %s is still attached to egressd and could not be "
				"removed (%s); detach and remove it by hand\n",
			cg, strerror(-err));
	else if (err)
		fprintf(stderr, "egressctl: warning: cannot remove cgroup %s: %s\n", cg,
			strerror(-err));
out_parent:
	/* The default parent is shared: remove it when it is empty. A parent
	 * given with --cgroup-parent is removed only if we created it. */
	if (parent[0] && (default_parent || parent_created) && rmdir(parent) < 0 && errno != EBUSY &&
	    errno != ENOTEMPTY && errno != ENOENT)
		fprintf(stderr, "egressctl: warning: cannot remove %s: %s\n", parent,
			strerror(errno));
out_close:
	if (cgfd >= 0)
		close(cgfd);
	json_decref(policy);
	return rc;
}

/* --- seccomp-profile ------------------------------------------------------------ */

static const char profile_help[] =
	"Usage: egressctl seccomp-profile [--policy FILE] [--base PROFILE]\n"
	"Print egressd's seccomp rules as an OCI runtime-spec \"linux.seccomp\" object\n"
	"(JSON) for container runtimes, for this host's ABIs only. Without --policy\n"
	"only inet, inet6 and unix sockets are allowed; with it, also the address\n"
	"families its network.allow_sockets names. socketcall and the calls `run`\n"
	"refuses (io_uring, bpf, ...) are refused. Without --base: deny-by-default, with\n"
	"containers-common's allow list; --base PROFILE merges the rules into a\n"
	"runtime's default profile (e.g. /usr/share/containers/seccomp.json) instead:\n"
	"egressd's syscalls are replaced, everything else is kept. Computed locally.\n";

int ctl_cmd_seccomp_profile(struct ctl *c, int argc, char **argv)
{
	enum { O_HELP = 256, O_POLICY, O_BASE };
	static const struct option opts[] = {
		{ "help", no_argument, NULL, O_HELP },
		{ "policy", required_argument, NULL, O_POLICY },
		{ "base", required_argument, NULL, O_BASE },
		{ NULL, 0, NULL, 0 },
	};
	struct egr_confine conf = { 0 };
	const char *path = NULL, *base = NULL;
	json_t *policy, *prof = NULL;
	int opt, rc;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case O_HELP:
			fputs(profile_help, stdout);
			return INT_MAX;
		case O_POLICY:
			path = optarg;
			break;
		case O_BASE:
			base = optarg;
			break;
		default:
			fputs("Try 'egressctl seccomp-profile --help'.\n", stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (optind < argc)
		return ctl_usage_error("seccomp-profile", "seccomp-profile: unexpected argument "
				       "'%s'", argv[optind]);
	if (path) {
		rc = ctl_policy_load(path, &policy);
		if (rc)
			return rc;
		rc = confine_for(policy, &conf);
		json_decref(policy);
		if (rc)
			return rc;
	}
	rc = ctl_seccomp_profile(&conf, base, &prof);
	if (rc)
		return rc;
	ctl_print_json(prof);
	json_decref(prof);
	return CTL_EXIT_OK;
}
