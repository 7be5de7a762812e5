// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * egressd: loads the programs once, adopts what is pinned, serves the
 * control socket. Stopping it (or killing it) leaves every sandbox enforced.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bpfstate.h"
#include "cgroup.h"
#include "log.h"
#include "loop.h"
#include "proto.h"
#include "sandbox.h"
#include "server.h"

struct options {
	const char *socket;
	const char *bpffs_dir;
	const char *state_dir;
	gid_t group;
};

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: egressd [OPTIONS]\n"
		"Confine the network egress of sandbox cgroups with eBPF.\n\n"
		"  --socket PATH      control socket (default %s)\n"
		"  --bpffs-dir DIR    where maps and links are pinned (default /sys/fs/bpf/egressd)\n"
		"  --state-dir DIR    sandbox state (default /var/lib/egressd)\n"
		"  --group NAME       group allowed on the control socket besides root\n"
		"  --log-level LEVEL  error, warn, info (default) or debug\n"
		"  --help             this text\n"
		"  --version          print the version\n",
		EGR_DEFAULT_SOCKET);
}

static int parse_args(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "bpffs-dir", required_argument, NULL, 'b' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ "group", required_argument, NULL, 'g' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	enum egr_log_level lvl;
	struct group *gr;
	int c;

	o->socket = EGR_DEFAULT_SOCKET;
	o->bpffs_dir = "/sys/fs/bpf/egressd";
	o->state_dir = "/var/lib/egressd";
	o->group = (gid_t)-1;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			o->socket = optarg;
			break;
		case 'b':
			o->bpffs_dir = optarg;
			break;
		case 'd':
			o->state_dir = optarg;
			break;
		case 'g':
			gr = getgrnam(optarg);
			if (!gr) {
				fprintf(stderr, "egressd: --group: no group named %s\n", optarg);
				return 2;
			}
			o->group = gr->gr_gid;
			break;
		case 'l':
			if (egr_log_parse_level(optarg, &lvl)) {
				fprintf(stderr, "egressd: --log-level: expected error, warn, info or "
						"debug, got %s\n", optarg);
				return 2;
			}
			egr_log_set_level(lvl);
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("egressd %s\n", EGRESSD_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "egressd: unexpected argument %s\n", argv[optind]);
		return 2;
	}
	return -1;
}

static void on_control(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_server *srv = ctx;

	/* One request per connection, served to completion (bounded by the
	 * per-client timeouts in server.c). */
	for (;;) {
		int cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC);

		if (cfd < 0)
			break;
		egr_server_handle(srv, cfd);
		close(cfd);
	}
}

int main(int argc, char **argv)
{
	struct egr_features feat = { 0 };
	struct egr_registry reg;
	struct egr_bpf bpf;
	struct options o;
	struct egr_server srv;
	struct egr_loop *loop = NULL;
	int lfd = -1, rc, err;

	rc = parse_args(argc, argv, &o);
	if (rc >= 0)
		return rc;
	signal(SIGPIPE, SIG_IGN);
	umask(077);

	err = egr_bpf_open(&bpf, o.bpffs_dir, &feat);
	if (err) {
		log_error("cannot load the BPF side: %s", strerror(-err));
		return 1;
	}
	err = egr_reg_init(&reg, &bpf, o.state_dir, NULL);
	if (err) {
		log_error("state dir %s: %s", o.state_dir, strerror(-err));
		egr_bpf_close(&bpf);
		return 1;
	}
	err = egr_server_listen(o.socket, o.group, &lfd);
	if (err) {
		log_error("control socket %s: %s", o.socket, strerror(-err));
		rc = 1;
		goto out;
	}
	srv.reg = &reg;
	srv.features = &feat;
	srv.group = o.group;
	if (egr_cgroup2_mount(srv.cgroup_root, sizeof(srv.cgroup_root)) < 0)
		srv.cgroup_root[0] = '\0';
	err = egr_loop_new(&loop);
	if (!err)
		err = egr_loop_add(loop, lfd, EPOLLIN, on_control, &srv);
	if (err) {
		log_error("event loop: %s", strerror(-err));
		rc = 1;
		goto out_sock;
	}
	log_info("egressd %s ready: %zu sandbox(es), control socket %s", EGRESSD_VERSION, reg.n,
		 o.socket);
	err = egr_loop_run(loop);
	rc = err ? 1 : 0;
	if (err)
		log_error("event loop: %s", strerror(-err));
out_sock:
	egr_loop_free(loop);
	close(lfd);
	unlink(o.socket);
out:
	egr_reg_free(&reg);
	egr_bpf_close(&bpf);
	return rc;
}
