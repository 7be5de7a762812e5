// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * egressctl run: a command in a transient sandbox.
 *
 * A fresh cgroup is created by egressd and attached in one request (attach
 * "create": made by egressd, it has no socket to look for) before the
 * command exists; the
 * command is born inside it (clone3 CLONE_INTO_CGROUP, or a fork child that
 * moves itself in before exec), so not one instruction of it runs
 * unconfined. Afterwards everything left in the cgroup is killed
 * (cgroup.kill), the sandbox detached and the cgroup tree removed. The
 * attach names us as the sandbox's launcher: if we are killed before that,
 * egressd does the same (user/egressd/lifetime.c).
 *
 * The sandbox cgroup S gets a leaf S/cmd, and the command's pid 1 is born
 * there in new cgroup, pid, mount and IPC namespaces: S/cmd is the root of
 * its cgroup namespace and the only cgroup2 mount it sees is made in that
 * namespace, so no path names a cgroup outside it (the kernel checks the
 * namespace on a move only under nsdelegate; uid 0 owns cgroup.procs and
 * needs no capability to write it) and the limits on S are out of its
 * reach; it sees no process outside; its mount namespace (runns.c) has no
 * bpffs, no host cgroup tree, a /proc of its own and egressd's directories
 * covered. That pid 1
 * starts a session of its own (no controlling terminal, no process group
 * shared with the caller), forks the command, maps the user namespace the
 * command makes (uid 0 inside is 65534 on the host; --user maps itself),
 * forwards SIGINT, SIGTERM and SIGHUP to it and hands its wait status back
 * through a pipe; when it ends, the kernel kills whatever else is left in
 * the pid namespace.
 *
 * Before exec the command gives up every capability (also as uid 0) and
 * installs the seccomp filter (user/lib/confine.c),
 * so the families no cgroup hook sees (AF_PACKET, AF_XDP, AF_VSOCK, ...),
 * io_uring, bpf() and ptrace-like calls are closed too. If any step fails
 * the command is not run.
 */
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

static const char run_help[] =
	"Usage: egressctl run --policy FILE [OPTIONS] -- CMD [ARGS...]\n"
	"Run CMD in a new cgroup confined by the policy in FILE (\"-\" is stdin), then\n"
	"kill whatever it left behind, detach the sandbox and remove the cgroup.\n"
	"\n"
	"  --policy FILE        the sandbox policy (validated locally first)\n"
	"  --tenant T           use tenant T instead of the policy's\n"
	"  --cgroup-parent DIR  where to create the cgroup (default: egressd/ under the\n"
	"                       cgroup2 mount, created when missing)\n"
	"  --user UID[:GID]     run CMD as this numeric uid and gid, inside and on the\n"
	"                       host (default gid: the uid's primary group, else UID);\n"
	"                       supplementary groups: GID. Without it CMD is uid 0 in a\n"
	"                       user namespace whose ids 0-65535 are a host range of\n"
	"                       its own (from 1879048192 on; setgroups and id changes\n"
	"                       work there)\n"
	"  --map-root-to UID[:GID]  map CMD's uid 0 alone to this host uid and gid\n"
	"                       instead (not --user; never 0)\n"
	"  --pids-max N         at most N tasks in the sandbox (cgroup2 pids.max)\n"
	"  --memory-max BYTES   memory limit of the sandbox (cgroup2 memory.max; K, M, G\n"
	"                       and T suffixes, 1024-based; at least 1M)\n"
	"  --hide PATH          also cover PATH in CMD's mount namespace (repeatable)\n"
	"\n"
	"A policy without execution_id gets \"run-\" and 16 random hex digits. SIGINT,\n"
	"SIGTERM and SIGHUP are forwarded to CMD. CMD runs in its own cgroup, pid,\n"
	"mount, IPC and user namespaces and its own session (no controlling terminal):\n"
	"it cannot move out of its cgroup, sees and signals no process outside, owns\n"
	"no host file as uid 0, sees no bpffs, a cgroup2 tree of only its own cgroup,\n"
	"a /proc of its own (host knobs read-only or masked), a minimal read-only /dev,\n"
	"read-only /sys, and egressd's state, run and socket directories empty. It\n"
	"gets only descriptors 0, 1 and 2, a private HOME and TMPDIR (removed at the\n"
	"end), no capability over the host (uid 0 of its own range keeps CHOWN,\n"
	"DAC_OVERRIDE, FOWNER, SETGID and SETUID over its own ids; otherwise none;\n"
	"no_new_privs) and a seccomp filter that refuses sockets of families other\n"
	"than inet, inet6 and unix (plus those the policy's allow_sockets names),\n"
	"io_uring, bpf, perf_event_open, ptrace, process_vm_readv/writev, pidfd_getfd,\n"
	"kcmp, the keyring calls, TIOCSTI/TIOCLINUX and new user namespaces; see\n"
	"`egressctl seccomp-profile`. It dies with egressctl.\n"
	"A limit whose controller cgroup2 does not offer is refused, never ignored.\n"
	"Exit status: CMD's, 128+N when it was killed by signal N; 125 when it could not\n"
	"be started (2 for a bad option, 3 when egressd is not reachable, 4 for an\n"
	"invalid policy); 126/127 when CMD cannot be executed or is not found.\n";

#define PIDS_MAX_LIMIT  4194304ULL /* the kernel's PID_MAX_LIMIT */
#define MEMORY_MAX_MIN  (1ULL << 20)
#define MEMORY_MAX_MAX  (1ULL << 62)

/* Before the child (run_child_pid, runchild.c) exists, the first signal is
 * remembered and the command is not started. */
static volatile sig_atomic_t early_signal;

static void forward_signal(int sig)
{
	int saved = errno;
	pid_t pid = run_child_pid;

	if (pid > 0)
		kill(pid, sig);
	else if (pid == 0 && !early_signal)
		early_signal = sig;
	errno = saved;
}

static const int forwarded[] = { SIGINT, SIGTERM, SIGHUP };

/* A decimal number without sign, spaces or suffix. 0 or -EINVAL. */
static int parse_u64(const char *s, uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (s[0] < '0' || s[0] > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

/* BYTES with an optional K, M, G or T (1024-based) suffix. 0 or -EINVAL. */
static int parse_bytes(const char *s, uint64_t *out)
{
	static const char units[] = "KMGT";
	char num[32];
	size_t len = strlen(s);
	const char *u;
	unsigned int shift = 0;
	uint64_t v;

	if (len == 0 || len >= sizeof(num))
		return -EINVAL;
	memcpy(num, s, len + 1);
	u = strchr(units, num[len - 1]); /* never the terminator: len > 0 */
	if (u) {
		shift = 10 * (unsigned int)(u - units + 1);
		num[len - 1] = '\0';
	}
	if (parse_u64(num, &v) || (shift && v > (UINT64_MAX >> shift)))
		return -EINVAL;
	*out = v << shift;
	return 0;
}

/* UID[:GID], numeric; GID defaults to the uid's primary group, else UID. */
static int parse_user(const char *s, struct egr_run_user *u)
{
	char buf[32], *colon;
	uint64_t uid, gid;
	struct passwd *pw;

	if (strlen(s) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, s);
	colon = strchr(buf, ':');
	if (colon)
		*colon = '\0';
	/* (uid_t)-1 means "unchanged" to setresuid: not a uid. */
	if (parse_u64(buf, &uid) || uid >= UINT32_MAX)
		return -EINVAL;
	if (colon) {
		if (parse_u64(colon + 1, &gid) || gid >= UINT32_MAX)
			return -EINVAL;
	} else {
		pw = getpwuid((uid_t)uid);
		gid = pw ? pw->pw_gid : uid;
	}
	u->uid = (uint32_t)uid;
	u->gid = (uint32_t)gid;
	return 0;
}

static int parse_run(struct ctl *c, int argc, char **argv, struct run_opts *o)
{
	enum { O_SOCKET = 256, O_TIMEOUT, O_HELP, O_POLICY, O_TENANT, O_PARENT, O_USER,
	       O_PIDS_MAX, O_MEMORY_MAX, O_HIDE, O_MAP_ROOT };
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, O_SOCKET },
		{ "timeout", required_argument, NULL, O_TIMEOUT },
		{ "help", no_argument, NULL, O_HELP },
		{ "policy", required_argument, NULL, O_POLICY },
		{ "tenant", required_argument, NULL, O_TENANT },
		{ "cgroup-parent", required_argument, NULL, O_PARENT },
		{ "user", required_argument, NULL, O_USER },
		{ "pids-max", required_argument, NULL, O_PIDS_MAX },
		{ "memory-max", required_argument, NULL, O_MEMORY_MAX },
		{ "hide", required_argument, NULL, O_HIDE },
		{ "map-root-to", required_argument, NULL, O_MAP_ROOT },
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
		case O_USER:
			if (parse_user(optarg, &o->user))
				return ctl_usage_error("run", "--user: expected UID or UID:GID (numbers "
						       "below 4294967295), got '%s'", optarg);
			o->has_user = true;
			break;
		case O_MAP_ROOT:
			/* uid 0 outside would be host root again: the whole point. */
			if (parse_user(optarg, &o->map_root) || o->map_root.uid == 0 ||
			    o->map_root.gid == 0)
				return ctl_usage_error("run", "--map-root-to: expected UID or UID:GID "
						       "(numbers from 1 to 4294967294), got '%s'",
						       optarg);
			o->has_map_root = true;
			break;
		case O_PIDS_MAX:
			if (parse_u64(optarg, &o->pids_max) || o->pids_max < 1 ||
			    o->pids_max > PIDS_MAX_LIMIT)
				return ctl_usage_error("run", "--pids-max: expected a number of tasks "
						       "(1-%llu), got '%s'", PIDS_MAX_LIMIT, optarg);
			break;
		case O_MEMORY_MAX:
			if (parse_bytes(optarg, &o->memory_max) || o->memory_max < MEMORY_MAX_MIN ||
			    o->memory_max > MEMORY_MAX_MAX)
				return ctl_usage_error("run", "--memory-max: expected bytes, at least "
						       "1M (e.g. 268435456 or 256M), got '%s'", optarg);
			break;
		case O_HIDE:
			if (!optarg[0] || o->nhide >= RUN_HIDE_MAX - 8)
				return ctl_usage_error("run", "--hide: expected a path (at most %d)%s",
						       RUN_HIDE_MAX - 8, optarg[0] ? "" : ", got ''");
			o->hide[o->nhide++] = optarg;
			break;
		default:
			fputs("Try 'egressctl run --help'.\n", stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (!o->policy)
		return ctl_usage_error("run", "run: --policy FILE is required");
	if (o->has_user && o->has_map_root)
		return ctl_usage_error("run", "--map-root-to: not with --user (CMD is not uid 0 "
				       "then)");
	if (optind >= argc)
		return ctl_usage_error("run", "run: no command given (egressctl run --policy FILE "
				       "-- CMD [ARGS...])");
	o->cmd = argv + optind;
	return -1;
}

/* The process-side confinement the policy asks for. An exit status. */
static int confine_for(const json_t *policy, struct egr_confine *conf)
{
	struct egr_error perr = { 0 };
	struct egr_policy pol;
	int err;

	memset(conf, 0, sizeof(*conf));
	err = egr_policy_check_json(policy, &pol, &perr);
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
		err = run_random_hex(id + 4, 8);
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

/* The seccomp filter pid 1 and the command install, built once while the
 * attach is in flight (request_cgroup's in_flight). */
struct filter_build {
	const struct egr_confine *conf;
	struct sock_fprog prog;
	int err; /* 0 once built */
};

static void build_filter(struct filter_build *fb)
{
	if (fb->prog.len)
		return; /* an attach tried again: built already */
	fb->err = egr_confine_seccomp_build(fb->conf, &fb->prog);
}

static int request_cgroup(struct ctl *c, const char *op, const char *cg, json_t *policy,
			  const char *status, char *code, size_t codelen,
			  struct filter_build *in_flight)
{
	struct ctl_pending p;
	json_t *req, *resp = NULL;
	int rc;

	req = json_pack("{s:s, s:s}", "op", op, "cgroup", cg);
	if (req && status)
		json_object_set_new(req, "status", json_string(status));
	/* The sandbox (and the cgroup egressd makes for it) lives as long as
	 * we do: killed, egressd kills the cgroup, detaches and removes it.
	 * egressd creates the cgroup itself: one no process can have been in
	 * before its links needs no look for sockets it already has. */
	if (req && strcmp(op, "attach") == 0) {
		json_object_set_new(req, "launcher_pid", json_integer(getpid()));
		json_object_set_new(req, "create", json_true());
	}
	if (!req || (policy && json_object_set(req, "policy", policy))) {
		json_decref(req);
		fprintf(stderr, "egressctl: out of memory\n");
		return CTL_EXIT_ERROR;
	}
	ctl_request_send(c, req, &p);
	json_decref(req);
	if (in_flight)
		build_filter(in_flight);
	rc = ctl_request_finish(c, &p, &resp, code, codelen);
	json_decref(resp);
	return rc;
}

/* Shared directories are never covered whole; a socket in one of them is
 * covered by itself. */
static bool shared_dir(const char *dir)
{
	static const char *const shared[] = { "/", "/tmp", "/var/tmp", "/run", "/var/run",
					      "/dev", "/dev/shm" };

	for (size_t i = 0; i < sizeof(shared) / sizeof(shared[0]); i++)
		if (strcmp(dir, shared[i]) == 0)
			return true;
	return false;
}

static bool abs_path(const json_t *v)
{
	return json_is_string(v) && json_string_value(v)[0] == '/';
}

/*
 * What the command must not see: egressd's bpffs and state directories (it
 * says where they are: the answer to the ping asked, sent earlier), its
 * socket's directory, the default run and state directories
 * and --hide paths. An exit status.
 */
static int view_prepare(struct ctl *c, const struct run_opts *o, struct run_view *v,
			struct ctl_pending *asked)
{
	static const char *const fixed[] = { "/run/egressd", "/var/lib/egressd",
					     "/sys/fs/bpf" };
	char sock[PATH_MAX], *slash;
	json_t *resp = NULL;
	const char *path = NULL;
	int rc, err = 0;

	memset(v, 0, sizeof(*v));
	err = egr_cgroup2_mount(v->cgroup2, sizeof(v->cgroup2));
	if (err) {
		ctl_request_abandon(asked);
		fprintf(stderr, "egressctl: cannot find the cgroup2 mount: %s\n",
			err == -ENOENT ? "cgroup2 is not mounted" : strerror(-err));
		return CTL_EXIT_RUN_FAILED;
	}
	if (!getcwd(v->cwd, sizeof(v->cwd)))
		v->cwd[0] = '\0';
	rc = ctl_request_finish(c, asked, &resp, NULL, 0);
	if (!rc && (!abs_path(json_object_get(resp, "state_dir")) ||
		    !abs_path(json_object_get(resp, "bpffs_dir")))) {
		/* Nothing to hide is no reason to hide nothing. */
		fprintf(stderr, "egressctl: run: egressd's ping does not say where its state is "
				"(an egressd older than this egressctl?)\n");
		json_decref(resp);
		rc = CTL_EXIT_RUN_FAILED;
	}
	if (rc) {
		fprintf(stderr, "egressctl: run: cannot ask egressd where its state is; the "
				"command was not started\n");
		return rc;
	}
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]) && !err; i++)
		err = run_view_add_hide(v, path = fixed[i]);
	if (!err)
		err = run_view_add_hide(v, path = json_string_value(json_object_get(resp,
										     "state_dir")));
	if (!err)
		err = run_view_add_hide(v, path = json_string_value(json_object_get(resp,
										     "bpffs_dir")));
	if (!err) {
		/* The socket's directory, or the socket alone in a shared one. */
		path = c->socket;
		err = ctl_abs_path(c->socket, sock, sizeof(sock));
		slash = err ? NULL : strrchr(sock, '/');
		if (slash && slash != sock) {
			*slash = '\0';
			if (shared_dir(sock))
				*slash = '/';
		}
		if (!err)
			err = run_view_add_hide(v, sock);
	}
	for (size_t i = 0; i < o->nhide && !err; i++)
		err = run_view_add_hide(v, path = o->hide[i]);
	json_decref(resp);
	if (err) {
		fprintf(stderr, "egressctl: run: cannot hide %s: %s; the command was not started\n",
			path ? path : "?", err == -EINVAL ? "not a path that can be covered" :
			strerror(-err));
		return err == -EINVAL ? CTL_EXIT_USAGE : CTL_EXIT_RUN_FAILED;
	}
	return CTL_EXIT_OK;
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

/* The command's ids in its user namespace and on the host: --user UID:GID
 * is itself on both sides (its files are UID's, as asked); --map-root-to
 * makes it 0:0 inside and those ids outside; without either it is 0:0 in
 * a namespace whose ids 0-65535 are a host range of its own (runids.c),
 * taken and locked here. 0 or -errno (printed). */
struct run_ids {
	struct egr_run_user ns, host;
	struct run_range range; /* count 0: one id mapped */
};

static int run_ids(const struct run_opts *o, struct run_ids *ids)
{
	ids->range = (struct run_range){ .lockfd = -1 };
	ids->ns = (struct egr_run_user){ .uid = 0, .gid = 0 };
	if (o->has_user) {
		ids->ns = o->user;
		ids->host = o->user;
	} else if (o->has_map_root) {
		ids->host = o->map_root;
	} else {
		int err = run_range_take(&ids->range);

		if (err)
			return err;
		ids->host = (struct egr_run_user){ .uid = ids->range.base, .gid = ids->range.base };
	}
	return 0;
}

/* HOME: a --user uid's own home when it has one, else the private one. */
static const char *run_home(const struct run_opts *o, const char *priv, char *buf, size_t len)
{
	struct passwd *pw = o->has_user ? getpwuid(o->user.uid) : NULL;
	struct stat st;

	if (pw && pw->pw_dir && stat(pw->pw_dir, &st) == 0 && S_ISDIR(st.st_mode) &&
	    st.st_uid == o->user.uid)
		return pw->pw_dir;
	snprintf(buf, len, "%s/home", priv);
	return buf;
}

/* The command's cgroup is its own to subdivide (cgroup v2 delegation: the
 * directory and its cgroup.procs, cgroup.threads and cgroup.subtree_control
 * go to the command's host uid; the limits stay on S, root's). 0 or -errno. */
static int delegate_leaf(int leaffd, const struct egr_run_user *host)
{
	static const char *const files[] = { "cgroup.procs", "cgroup.threads",
					     "cgroup.subtree_control" };

	if (fchown(leaffd, host->uid, host->gid) < 0)
		return -errno;
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		if (fchownat(leaffd, files[i], host->uid, host->gid, 0) < 0 && errno != ENOENT)
			return -errno;
	return 0;
}

/* Big (RUN_HIDE_MAX paths); one run per process. */
static struct run_view view;

int ctl_cmd_run(struct ctl *c, int argc, char **argv)
{
	char parent[PATH_MAX], cg[PATH_MAX], leaf[PATH_MAX], code[64], priv[PATH_MAX] = "";
	char homebuf[PATH_MAX], tmpbuf[PATH_MAX + 8];
	struct sigaction sa = { .sa_handler = forward_signal };
	sigset_t block, old_mask;
	bool parent_created, attached = false, default_parent;
	json_t *policy = NULL, *asked_req;
	struct ctl_pending asked;
	struct egr_confine conf;
	struct filter_build filter = { .conf = &conf };
	struct run_child child;
	struct run_ids ids = { .range = { .lockfd = -1 } };
	struct run_opts o;
	int rc, err, status = 0, cgfd = -1, leaffd = -1, spipe[2] = { -1, -1 };
	int cmd_status;
	char end[32];
	pid_t pid;

	rc = parse_run(c, argc, argv, &o);
	if (rc >= 0)
		return rc;
	/* egressd answers where its state is while the policy is read and
	 * checked (ping: status costs egressd ~1 µs per sandbox). */
	asked_req = json_pack("{s:s}", "op", "ping");
	if (!asked_req) {
		fprintf(stderr, "egressctl: out of memory\n");
		return CTL_EXIT_ERROR;
	}
	ctl_request_send(c, asked_req, &asked);
	json_decref(asked_req);
	rc = prepare_policy(&o, &policy);
	if (rc) {
		ctl_request_abandon(&asked);
		return rc;
	}
	rc = confine_for(policy, &conf);
	if (rc)
		ctl_request_abandon(&asked);
	else
		rc = view_prepare(c, &o, &view, &asked);
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
	if (run_make_parent(o.parent, parent, sizeof(parent), &parent_created) ||
	    run_limits_prepare(&o, view.cgroup2, parent)) {
		rc = CTL_EXIT_RUN_FAILED;
		goto out_parent;
	}
	/* egressd makes the cgroup and attaches it in one request. A name
	 * taken since we chose it, or a default parent a concurrent run's
	 * cleanup removed, is tried again. */
	for (int tries = 0;; tries++) {
		if (run_name_cgroup(parent, cg, sizeof(cg), &parent_created)) {
			rc = CTL_EXIT_RUN_FAILED;
			goto out_parent;
		}
		rc = request_cgroup(c, "attach", cg, policy, NULL, code, sizeof(code), &filter);
		if (rc == CTL_EXIT_OK || tries == 2 ||
		    !(strcmp(code, "exists") == 0 ||
		      (strcmp(code, "bad_cgroup") == 0 && access(parent, F_OK) < 0)))
			break;
	}
	if (rc) {
		fprintf(stderr, "egressctl: run: cannot attach %s; the command was not started\n",
			cg);
		if (rc == CTL_EXIT_ERROR && !code[0]) {
			/* No answer: the attach may have happened. Undo it quietly. */
			c->quiet = true;
			request_cgroup(c, "detach", cg, NULL, NULL, NULL, 0, NULL);
			c->quiet = false;
		}
		if (rc != CTL_EXIT_UNREACHABLE && rc != CTL_EXIT_INVALID)
			rc = CTL_EXIT_RUN_FAILED;
		if (strcmp(code, "exists") == 0)
			goto out_parent; /* not ours to remove */
		goto out_rmdir;
	}
	attached = true;
	if (filter.err) {
		fprintf(stderr, "egressctl: cannot build the seccomp filter: %s; not starting %s\n",
			strerror(-filter.err), o.cmd[0]);
		rc = CTL_EXIT_RUN_FAILED;
		status = -1;
		goto cleanup;
	}
	/* Under its links now, and empty: the rest of its set-up. */
	status = -1; /* a failure here: the command never started */
	cgfd = open(cg, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cgfd < 0) {
		fprintf(stderr, "egressctl: cannot open cgroup %s: %s\n", cg, strerror(errno));
		rc = CTL_EXIT_RUN_FAILED;
		goto cleanup;
	}
	if (run_limits_apply(&o, cg, cgfd)) {
		rc = CTL_EXIT_RUN_FAILED;
		goto cleanup;
	}
	/* The command's own cgroup, the root of its cgroup namespace. */
	snprintf(leaf, sizeof(leaf), "%s/cmd", cg);
	if (mkdirat(cgfd, "cmd", 0755) < 0 ||
	    (leaffd = openat(cgfd, "cmd", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		fprintf(stderr, "egressctl: cannot create cgroup %s: %s\n", leaf, strerror(errno));
		rc = CTL_EXIT_RUN_FAILED;
		goto cleanup;
	}
	if (run_ids(&o, &ids) || run_home_make(&ids.host, priv, sizeof(priv))) {
		rc = CTL_EXIT_RUN_FAILED;
		goto cleanup;
	}
	snprintf(tmpbuf, sizeof(tmpbuf), "%s/tmp", priv);
	err = delegate_leaf(leaffd, &ids.host);
	if (err) {
		fprintf(stderr, "egressctl: cannot delegate cgroup %s to uid %u: %s\n", leaf,
			ids.host.uid, strerror(-err));
		rc = CTL_EXIT_RUN_FAILED;
		goto cleanup;
	}
	if (pipe2(spipe, O_CLOEXEC) < 0) {
		fprintf(stderr, "egressctl: pipe: %s\n", strerror(errno));
		rc = CTL_EXIT_RUN_FAILED;
		goto cleanup;
	}
	status = 0;
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
	child = (struct run_child){ .cmd = o.cmd, .leaffd = leaffd, .status_fd = spipe[1],
				    .filter = &filter.prog, .view = &view, .ns_id = ids.ns,
				    .host_id = ids.host, .range = ids.range.count,
				    .home = run_home(&o, priv, homebuf, sizeof(homebuf)),
				    .tmp = tmpbuf };
	pid = run_spawn(&child);
	close(spipe[1]);
	spipe[1] = -1;
	if (pid < 0) {
		fprintf(stderr, "egressctl: cannot start %s in %s: %s\n", o.cmd[0], cg,
			strerror(-pid));
		status = -1;
	} else {
		run_child_pid = pid;
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
	run_child_pid = -1; /* signals from now on are dropped */
	/* pid 1 passes the command's own wait status on; without it (pid 1
	 * failed to set up, or was killed) pid 1's status is the answer. */
	if (pid > 0 && status >= 0) {
		if (read(spipe[0], &cmd_status, sizeof(cmd_status)) == (ssize_t)sizeof(cmd_status))
			status = cmd_status;
		else if (WIFEXITED(status) && WEXITSTATUS(status) == CTL_EXIT_RUN_FAILED)
			status = -1; /* pid 1 said why; the command never started */
	}
	rc = status < 0 ? CTL_EXIT_RUN_FAILED : exit_status(status);

cleanup:
	if (cgfd < 0)
		cgfd = open(cg, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	err = cgfd < 0 ? -errno : run_empty_cgroup(cg, cgfd);
	if (err) {
		/* Fail closed: never detach a cgroup that may still hold processes. */
		fprintf(stderr, "egressctl: ERROR: %s: %s; leaving it attached and in place "
				"(still confined)\n", cg,
			err == -EBUSY ? "processes are still running after cgroup.kill" :
					"cannot tell whether it is empty");
		goto out_close;
	}
	/* Empty: nothing can use the private directory or the ids any more. */
	run_home_remove(priv);
	if (ids.range.count)
		run_range_sweep(&ids.range);
	run_range_release(&ids.range);
	if (status < 0)
		snprintf(end, sizeof(end), "not-started");
	else if (WIFSIGNALED(status))
		snprintf(end, sizeof(end), "killed:%d", WTERMSIG(status));
	else
		snprintf(end, sizeof(end), "exited:%d", WEXITSTATUS(status));
	if (request_cgroup(c, "detach", cg, NULL, end, NULL, 0, NULL) == CTL_EXIT_OK)
		attached = false;
	else
		fprintf(stderr, "egressctl: warning: could not detach %s; it is empty and is "
				"removed anyway (egressd drops such a sandbox when it next starts)\n",
			cg);

out_rmdir:
	for (int i = 0; i < 2; i++)
		if (spipe[i] >= 0)
			close(spipe[i]);
	spipe[0] = spipe[1] = -1;
	if (leaffd >= 0) {
		close(leaffd);
		leaffd = -1;
	}
	if (cgfd >= 0) {
		close(cgfd);
		cgfd = -1;
	}
	err = run_remove_tree(cg);
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
	for (int i = 0; i < 2; i++)
		if (spipe[i] >= 0)
			close(spipe[i]);
	if (leaffd >= 0)
		close(leaffd);
	if (cgfd >= 0)
		close(cgfd);
	json_decref(policy);
	egr_confine_seccomp_free(&filter.prog);
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
