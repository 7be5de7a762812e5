// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * egressctl version and egressctl cleanup.
 *
 * cleanup decommissions a host after the package is gone: egressd's pins
 * (its maps, the links that confine sandboxes), its state directory (the
 * audit log and its chain state kept unless --purge-audit: they are
 * evidence), the OCI hooks.d files, and what `egressctl run` keeps for
 * itself (its id-range locks, private directories left by a killed run).
 * It refuses while an egressd serves: one answers on the socket, or a
 * process holds a file of the state directory or one of the pinned maps
 * open (the kernel's word: /proc/PID/fd, and the map ids of
 * /proc/PID/fdinfo against those of the pins). Removing a sandbox's link
 * pins ends its confinement: that is what decommissioning means, so the
 * count is printed, and --dry-run shows everything first.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <jansson.h>

#include "ctl.h"
#include "macfile.h"
#include "proto.h"
#include "run_int.h"

#define BPF_FS_MAGIC_NUM 0xcafe4a11

static const char version_help[] =
	"Usage: egressctl version [--socket PATH] [--timeout SEC]\n"
	"Print egressctl's version and, when it answers, egressd's. Exit 0 either way.\n";

int ctl_cmd_version(struct ctl *c, int argc, char **argv)
{
	enum { O_HELP = 256, O_SOCKET, O_TIMEOUT };
	static const struct option opts[] = {
		{ "help", no_argument, NULL, O_HELP },
		{ "socket", required_argument, NULL, O_SOCKET },
		{ "timeout", required_argument, NULL, O_TIMEOUT },
		{ NULL, 0, NULL, 0 },
	};
	json_t *req, *resp = NULL;
	int opt;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (opt == O_HELP) {
			fputs(version_help, stdout);
			return INT_MAX;
		} else if (opt == O_SOCKET) {
			c->socket = optarg;
		} else if (opt == O_TIMEOUT) {
			c->timeout = (unsigned int)strtoul(optarg, NULL, 10);
		} else {
			fputs("Try 'egressctl version --help'.\n", stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (optind < argc)
		return ctl_usage_error("version", "version: unexpected argument '%s'", argv[optind]);
	printf("egressctl %s\n", EGRESSD_VERSION);
	req = egr_proto_request(EGR_OP_PING);
	c->quiet = true;
	if (req && ctl_request(c, req, &resp, NULL, 0) == CTL_EXIT_OK)
		printf("egressd %s (%s)\n",
		       json_string_value(json_object_get(resp, "version")) ?: "?", c->socket);
	else
		printf("egressd: not reachable at %s\n", c->socket);
	c->quiet = false;
	json_decref(req);
	json_decref(resp);
	return CTL_EXIT_OK;
}

/* --- cleanup ---------------------------------------------------------------------- */

static const char cleanup_help[] =
	"Usage: egressctl cleanup [--bpffs-dir DIR] [--state-dir DIR] [--hooks-dir DIR]...\n"
	"                         [--purge-audit] [--keep-run-dirs] [--dry-run]\n"
	"Remove what egressd leaves on a host after it is uninstalled: its pins (maps and\n"
	"the links that confine sandboxes: their sandboxes are confined no more), its state\n"
	"directory (but the audit log, audit.state and ledger.key, unless --purge-audit), the OCI\n"
	"hooks.d files and egressctl run's id-range locks and private directories.\n"
	"Refused while an egressd serves (it answers on --socket, or holds a file of the\n"
	"state directory or a pinned map open).\n"
	"\n"
	"  --bpffs-dir DIR  egressd's pins (default /sys/fs/bpf/egressd)\n"
	"  --state-dir DIR  egressd's state (default /var/lib/egressd)\n"
	"  --hooks-dir DIR  where its hooks.d files are (repeatable; default\n"
	"                   /usr/share/containers/oci/hooks.d, /usr/local/share/containers/\n"
	"                   oci/hooks.d and /etc/containers/oci/hooks.d)\n"
	"  --purge-audit    remove the audit log and its chain state too\n"
	"  --keep-run-dirs  leave egressctl run's locks and private directories (another\n"
	"                   egressd of the host still runs sandboxes with run)\n"
	"  --dry-run        print what would be removed, remove nothing\n"
	"Exit status: 0 done (or nothing to do), 1 refused or a removal failed.\n";

static const char *const hook_files[] = { "10-egressd-create.json", "90-egressd-poststop.json" };

struct cleanup {
	const char *bpffs, *state;
	bool purge_audit, dry_run;
	unsigned removed, links, failed;
};

/* The ids of the maps pinned under the bpffs dir (at most max). */
static size_t pinned_map_ids(const char *dir, uint32_t *ids, size_t max);

/* Does a process other than us hold a file under dir open, or one of the
 * maps ids[0..n)? (/proc/PID/fd and the map_id of /proc/PID/fdinfo.) *pid:
 * the first found. */
static bool held_open(const char *dir, const uint32_t *ids, size_t n, pid_t *pid)
{
	size_t dl = strlen(dir);
	DIR *proc = opendir("/proc");
	struct dirent *p;
	bool found = false;

	if (!proc)
		return true; /* cannot tell: refuse */
	while (!found && (p = readdir(proc))) {
		char fdd[64], link[PATH_MAX + 1], path[PATH_MAX], line[128];
		struct dirent *f;
		DIR *fds;

		if (p->d_name[0] < '1' || p->d_name[0] > '9' || atoi(p->d_name) == getpid())
			continue;
		snprintf(fdd, sizeof(fdd), "/proc/%s/fd", p->d_name);
		fds = opendir(fdd);
		if (!fds)
			continue;
		while (!found && (f = readdir(fds))) {
			ssize_t k;
			FILE *info;

			snprintf(path, sizeof(path), "%s/%s", fdd, f->d_name);
			k = readlink(path, link, sizeof(link) - 1);
			if (k <= 0)
				continue;
			link[k] = '\0';
			if (!strncmp(link, dir, dl) && (link[dl] == '/' || !link[dl])) {
				found = true;
				break;
			}
			if (strcmp(link, "anon_inode:bpf-map") || !n)
				continue;
			snprintf(path, sizeof(path), "/proc/%s/fdinfo/%s", p->d_name, f->d_name);
			info = fopen(path, "re");
			while (info && !found && fgets(line, sizeof(line), info)) {
				unsigned long id;

				if (sscanf(line, "map_id: %lu", &id) != 1)
					continue;
				for (size_t i = 0; i < n && !found; i++)
					found = ids[i] == id;
			}
			if (info)
				fclose(info);
		}
		closedir(fds);
		if (found)
			*pid = (pid_t)atoi(p->d_name);
	}
	closedir(proc);
	return found;
}

static uint32_t *walk_ids;
static size_t walk_n, walk_max;

static int note_map(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	struct bpf_map_info info = { 0 };
	__u32 len = sizeof(info);
	int fd;

	if (flag != FTW_F || walk_n == walk_max)
		return 0;
	fd = bpf_obj_get(path);
	if (fd < 0)
		return 0;
	if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0)
		walk_ids[walk_n++] = info.id;
	close(fd);
	return 0;
}

static size_t pinned_map_ids(const char *dir, uint32_t *ids, size_t max)
{
	walk_ids = ids;
	walk_n = 0;
	walk_max = max;
	if (access(dir, F_OK) == 0)
		nftw(dir, note_map, 16, FTW_PHYS | FTW_MOUNT);
	return walk_n;
}

/* No `egressctl run` holds a range: every lock under RUN_IDS_DIR is free. */
static bool runs_idle(void)
{
	DIR *d = opendir(RUN_IDS_DIR);
	struct dirent *e;
	bool idle = true;

	if (!d)
		return true;
	while (idle && (e = readdir(d))) {
		int fd;

		if (e->d_name[0] == '.')
			continue;
		fd = openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		idle = flock(fd, LOCK_EX | LOCK_NB) == 0;
		close(fd);
	}
	closedir(d);
	return idle;
}

static struct cleanup *cur;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	const char *base = path + ftw->base;

	if (!cur->purge_audit && flag != FTW_DP && !strncmp(path, cur->state, strlen(cur->state)) &&
	    (!strncmp(base, "audit.log", 9) || !strcmp(base, "audit.state") ||
	     !strcmp(base, "ledger.key")))
		return 0; /* evidence, and the key its state is checked with: kept */
	if (cur->bpffs && !strncmp(path, cur->bpffs, strlen(cur->bpffs)) &&
	    strstr(path, "/links/") && flag != FTW_DP)
		cur->links++;
	if (cur->dry_run) {
		printf("would remove %s\n", path);
		return 0;
	}
	if (flag != FTW_DP && S_ISREG(st->st_mode)) {
		int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);

		/* An append-only file (the audit log, the ledger files) cannot be
		 * unlinked; the flag, not an error, when the file system has none. */
		if (fd >= 0) {
			(void)egr_file_set_append_only(fd, false);
			close(fd);
		}
	}
	if ((flag == FTW_DP ? rmdir(path) : unlink(path)) == 0) {
		cur->removed++;
	} else if (!(flag == FTW_DP && errno == ENOTEMPTY)) {
		fprintf(stderr, "egressctl: cleanup: cannot remove %s: %s\n", path, strerror(errno));
		cur->failed++;
	}
	return 0;
}

static void remove_tree(struct cleanup *cl, const char *dir)
{
	cur = cl;
	if (access(dir, F_OK) == 0)
		nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

/* Only a directory on bpffs, and only a state directory that is egressd's. */
static int check_dirs(const struct cleanup *cl)
{
	struct statfs fs;

	if (access(cl->bpffs, F_OK) == 0 &&
	    (statfs(cl->bpffs, &fs) < 0 || (unsigned long)fs.f_type != BPF_FS_MAGIC_NUM)) {
		fprintf(stderr, "egressctl: cleanup: %s is not on a bpf file system; not touching "
				"it\n", cl->bpffs);
		return -EINVAL;
	}
	if (access(cl->state, F_OK) == 0) {
		char p1[PATH_MAX], p2[PATH_MAX];

		snprintf(p1, sizeof(p1), "%s/sandboxes", cl->state);
		snprintf(p2, sizeof(p2), "%s/audit.state", cl->state);
		if (access(p1, F_OK) && access(p2, F_OK)) {
			fprintf(stderr, "egressctl: cleanup: %s has neither sandboxes/ nor "
					"audit.state: not egressd's state directory; not touching it\n",
				cl->state);
			return -EINVAL;
		}
	}
	return 0;
}

int ctl_cmd_cleanup(struct ctl *c, int argc, char **argv)
{
	enum { O_HELP = 256, O_SOCKET, O_BPFFS, O_STATE, O_HOOKS, O_PURGE, O_DRY, O_KEEP_RUN };
	static const struct option opts[] = {
		{ "help", no_argument, NULL, O_HELP },
		{ "socket", required_argument, NULL, O_SOCKET },
		{ "bpffs-dir", required_argument, NULL, O_BPFFS },
		{ "state-dir", required_argument, NULL, O_STATE },
		{ "hooks-dir", required_argument, NULL, O_HOOKS },
		{ "purge-audit", no_argument, NULL, O_PURGE },
		{ "dry-run", no_argument, NULL, O_DRY },
		{ "keep-run-dirs", no_argument, NULL, O_KEEP_RUN },
		{ NULL, 0, NULL, 0 },
	};
	const char *hooks[8] = { "/usr/share/containers/oci/hooks.d",
				 "/usr/local/share/containers/oci/hooks.d",
				 "/etc/containers/oci/hooks.d" };
	struct cleanup cl = { .bpffs = "/sys/fs/bpf/egressd", .state = "/var/lib/egressd" };
	size_t nhooks = 3;
	bool hooks_given = false, keep_run = false;
	json_t *req, *resp = NULL;
	char path[PATH_MAX];
	uint32_t ids[256];
	size_t nids;
	pid_t pid = 0;
	int opt, rc;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (opt) {
		case O_HELP:
			fputs(cleanup_help, stdout);
			return INT_MAX;
		case O_SOCKET:
			c->socket = optarg;
			break;
		case O_BPFFS:
			cl.bpffs = optarg;
			break;
		case O_STATE:
			cl.state = optarg;
			break;
		case O_HOOKS:
			if (!hooks_given)
				nhooks = 0;
			hooks_given = true;
			if (nhooks == sizeof(hooks) / sizeof(hooks[0]))
				return ctl_usage_error("cleanup", "cleanup: at most %zu --hooks-dir",
						       sizeof(hooks) / sizeof(hooks[0]));
			hooks[nhooks++] = optarg;
			break;
		case O_PURGE:
			cl.purge_audit = true;
			break;
		case O_DRY:
			cl.dry_run = true;
			break;
		case O_KEEP_RUN:
			keep_run = true;
			break;
		default:
			fputs("Try 'egressctl cleanup --help'.\n", stderr);
			return CTL_EXIT_USAGE;
		}
	}
	if (optind < argc)
		return ctl_usage_error("cleanup", "cleanup: unexpected argument '%s'", argv[optind]);
	if (geteuid() != 0) {
		fprintf(stderr, "egressctl: cleanup: needs root (egressd's pins and state are "
				"root's)\n");
		return CTL_EXIT_DENIED;
	}
	/* Refuse while an egressd serves: on the socket, or holding its files. */
	req = egr_proto_request(EGR_OP_PING);
	c->quiet = true;
	rc = req ? ctl_request(c, req, &resp, NULL, 0) : CTL_EXIT_ERROR;
	c->quiet = false;
	json_decref(req);
	json_decref(resp);
	if (rc == CTL_EXIT_OK) {
		fprintf(stderr, "egressctl: cleanup: egressd answers at %s; stop it first (its "
				"pins keep sandboxes confined while it is down)\n", c->socket);
		return CTL_EXIT_ERROR;
	}
	nids = pinned_map_ids(cl.bpffs, ids, sizeof(ids) / sizeof(ids[0]));
	if (held_open(cl.state, ids, nids, &pid)) {
		fprintf(stderr, "egressctl: cleanup: pid %d holds %s or a BPF map open (a "
				"running egressd?); stop it first\n", (int)pid, cl.state);
		return CTL_EXIT_ERROR;
	}
	if (check_dirs(&cl))
		return CTL_EXIT_ERROR;
	remove_tree(&cl, cl.bpffs);
	remove_tree(&cl, cl.state);
	for (size_t i = 0; i < nhooks; i++)
		for (size_t j = 0; j < sizeof(hook_files) / sizeof(hook_files[0]); j++) {
			snprintf(path, sizeof(path), "%s/%s", hooks[i], hook_files[j]);
			remove_tree(&cl, path);
		}
	cl.bpffs = NULL; /* no links below */
	if (keep_run) {
		;
	} else if (runs_idle()) {
		remove_tree(&cl, RUN_IDS_DIR);
		remove_tree(&cl, RUN_HOME_DIR);
	} else {
		printf("egressctl: cleanup: an egressctl run is running: its %s and %s are kept\n",
		       RUN_IDS_DIR, RUN_HOME_DIR);
	}
	if (cl.dry_run)
		return CTL_EXIT_OK;
	printf("egressctl: cleanup: removed %u file(s) and directories, %u sandbox link pin(s) "
	       "among them%s\n", cl.removed, cl.links,
	       cl.purge_audit ? "" : "; the audit log and audit.state kept (--purge-audit)");
	return cl.failed ? CTL_EXIT_ERROR : CTL_EXIT_OK;
}
