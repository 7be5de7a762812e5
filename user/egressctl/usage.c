// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* What every subcommand shares below main.c's dispatch: the usage error
 * (stderr, the JSON error of --json, exit status) and absolute paths. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ctl.h"

int ctl_usage_error(const char *cmd, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "egressctl: %s", msg);
	ctl_note_error("usage", NULL, "%s", msg);
	fprintf(stderr, "\nTry 'egressctl %s%s--help'.\n", cmd ?: "", cmd ? " " : "");
	return CTL_EXIT_USAGE;
}

int ctl_abs_path(const char *path, char *buf, size_t len)
{
	char real[PATH_MAX], cwd[PATH_MAX];
	int n;

	if (realpath(path, real))
		n = snprintf(buf, len, "%s", real);
	else if (path[0] == '/')
		n = snprintf(buf, len, "%s", path);
	else if (getcwd(cwd, sizeof(cwd)))
		n = snprintf(buf, len, "%s/%s", cwd, path);
	else
		return -errno;
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}
