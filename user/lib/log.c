// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "log.h"

static enum egr_log_level cur_level = EGR_LOG_INFO;
static const char *const level_names[] = { "error", "warn", "info", "debug" };
/* syslog priorities: LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG */
static const int level_prio[] = { 3, 4, 6, 7 };
static bool prio_prefix;

void egr_log_init_priority(bool force)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	prio_prefix = force;
	if (force || !js || sscanf(js, "%llu:%llu", &dev, &ino) != 2 || fstat(2, &st) < 0)
		return;
	prio_prefix = (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

bool egr_log_priority_prefix(void)
{
	return prio_prefix;
}

void egr_log_set_level(enum egr_log_level lvl)
{
	cur_level = lvl;
}

enum egr_log_level egr_log_get_level(void)
{
	return cur_level;
}

int egr_log_parse_level(const char *s, enum egr_log_level *out)
{
	for (unsigned i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*out = (enum egr_log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

void egr_log(enum egr_log_level lvl, const char *fmt, ...)
{
	char ts[32];
	struct timespec now;
	struct tm tm;
	va_list ap;

	if (lvl > cur_level)
		return;
	if (prio_prefix) {
		fprintf(stderr, "<%d>%-5s ", level_prio[lvl], level_names[lvl]);
	} else {
		clock_gettime(CLOCK_REALTIME, &now);
		gmtime_r(&now.tv_sec, &tm);
		strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
		fprintf(stderr, "%s.%03ldZ %-5s ", ts, now.tv_nsec / 1000000, level_names[lvl]);
	}
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}
