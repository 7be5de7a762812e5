// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* process_* self metrics: /proc/self/stat, /proc/self/fd, /proc/stat btime. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "procmetrics.h"

struct self_stat {
	unsigned long long utime, stime, starttime; /* clock ticks */
	unsigned long long vsize;                   /* bytes */
	long long rss;                              /* pages */
};

/* Fields 14, 15, 22, 23, 24 of /proc/self/stat (proc(5)); the command name
 * (field 2) may hold spaces and parentheses, so parse after its last ')'. */
static int read_self_stat(struct self_stat *s)
{
	char buf[1024], *p;
	unsigned long long v[24] = { 0 };
	size_t n;
	FILE *f = fopen("/proc/self/stat", "re");

	if (!f)
		return -errno;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');
	if (!p)
		return -EINVAL;
	p++;
	/* v[3] is field 3 (state, skipped as a word), v[i] is field i. */
	for (int field = 3; field <= 24; field++) {
		char *end;

		while (*p == ' ')
			p++;
		if (field == 3) {
			p = strchr(p, ' ');
			if (!p)
				return -EINVAL;
			continue;
		}
		errno = 0;
		v[field - 1] = strtoull(p, &end, 10);
		if (end == p || errno)
			return -EINVAL;
		p = end;
	}
	s->utime = v[13];
	s->stime = v[14];
	s->starttime = v[21];
	s->vsize = v[22];
	s->rss = (long long)v[23];
	return 0;
}

static int boot_time(unsigned long long *btime)
{
	char line[256];
	int err = -ENOENT;
	FILE *f = fopen("/proc/stat", "re");

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "btime %llu", btime) == 1) {
			err = 0;
			break;
		}
	fclose(f);
	return err;
}

static int open_fds(unsigned long *n)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;

	if (!d)
		return -errno;
	*n = 0;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			(*n)++;
	closedir(d);
	if (*n)
		(*n)--; /* the directory's own descriptor */
	return 0;
}

int egr_procmetrics_emit(struct egr_mbuf *b)
{
	long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
	struct self_stat s;
	struct rlimit rl;
	unsigned long long btime;
	unsigned long fds = 0;
	int missing = 0;

	if (tick > 0 && page > 0 && read_self_stat(&s) == 0) {
		egr_mbuf_family(b, "process_cpu_seconds_total", "counter",
				"Total user and system CPU time spent in seconds.");
		egr_mbuf_printf(b, "process_cpu_seconds_total %.2f\n",
				(double)(s.utime + s.stime) / (double)tick);
		egr_mbuf_family(b, "process_resident_memory_bytes", "gauge",
				"Resident memory size in bytes.");
		egr_mbuf_printf(b, "process_resident_memory_bytes %lld\n", s.rss * page);
		egr_mbuf_family(b, "process_virtual_memory_bytes", "gauge",
				"Virtual memory size in bytes.");
		egr_mbuf_printf(b, "process_virtual_memory_bytes %llu\n", s.vsize);
		if (boot_time(&btime) == 0) {
			egr_mbuf_family(b, "process_start_time_seconds", "gauge",
					"Start time of the process since unix epoch in seconds.");
			egr_mbuf_printf(b, "process_start_time_seconds %.2f\n",
					(double)btime + (double)s.starttime / (double)tick);
		} else {
			missing++;
		}
	} else {
		missing += 4;
	}
	if (open_fds(&fds) == 0) {
		egr_mbuf_family(b, "process_open_fds", "gauge", "Number of open file descriptors.");
		egr_mbuf_printf(b, "process_open_fds %lu\n", fds);
	} else {
		missing++;
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		egr_mbuf_family(b, "process_max_fds", "gauge",
				"Maximum number of open file descriptors.");
		if (rl.rlim_cur == RLIM_INFINITY)
			egr_mbuf_printf(b, "process_max_fds +Inf\n");
		else
			egr_mbuf_printf(b, "process_max_fds %llu\n",
					(unsigned long long)rl.rlim_cur);
	} else {
		missing++;
	}
	return missing;
}
