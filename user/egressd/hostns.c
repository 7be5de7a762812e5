// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "hostns.h"
#include "log.h"

/* The host's network namespace: pid 1's, or when that is unreadable (pid 1
 * holding capabilities egressd lacks), kthreadd's: kernel threads always
 * run in the initial namespace. 0 or -errno. */
static int host_netns(struct stat *st, int *ref_pid)
{
	char comm[32] = "";
	FILE *f;
	int err;

	*ref_pid = 1;
	if (stat("/proc/1/ns/net", st) == 0)
		return 0;
	err = -errno;
	f = fopen("/proc/2/comm", "re");
	if (f) {
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = '\0';
		fclose(f);
	}
	if (strcmp(comm, "kthreadd\n") != 0)
		return err;
	*ref_pid = 2;
	return stat("/proc/2/ns/net", st) == 0 ? 0 : -errno;
}

int egr_hostns_check(void)
{
	struct stat self, host;
	int err, ref;

	if (stat("/proc/self/ns/net", &self) < 0) {
		err = -errno;
		log_warn("cannot tell whether egressd runs in the host's network namespace "
			 "(/proc/self/ns/net: %s)", strerror(-err));
		return err;
	}
	err = host_netns(&host, &ref);
	if (err) {
		log_warn("cannot tell whether egressd runs in the host's network namespace "
			 "(/proc/%d/ns/net: %s; without the host's pids, e.g. no hostPID, "
			 "nothing to compare with)", ref, strerror(-err));
		return err;
	}
	if (self.st_dev == host.st_dev && self.st_ino == host.st_ino)
		return 0;
	log_error("egressd runs in network namespace net:[%llu], not the host's (net:[%llu] of "
		  "pid %d): sandboxes in the host's namespace cannot reach its DNS proxy (their "
		  "queries fail) and /metrics is not reachable from the host; run it in the "
		  "host's network namespace (Kubernetes: hostNetwork: true), or attach only "
		  "sandboxes with --netns",
		  (unsigned long long)self.st_ino, (unsigned long long)host.st_ino, ref);
	return -EXDEV;
}
