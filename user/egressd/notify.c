// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "notify.h"

static int notify_fd = -1;
static struct sockaddr_un notify_addr;
static socklen_t notify_len;
static uint64_t watchdog_usec;
static bool send_failing;

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (!*s || *end || s[0] == '-' || errno)
		return -EINVAL;
	*out = v;
	return 0;
}

int egr_notify_init(void)
{
	const char *path = getenv("NOTIFY_SOCKET");
	const char *wd = getenv("WATCHDOG_USEC"), *wd_pid = getenv("WATCHDOG_PID");
	size_t len;
	uint64_t pid;

	if (wd) {
		/* WATCHDOG_PID names the process the manager watches: a child
		 * that inherited the environment must not ping for it. */
		if (parse_u64(wd, &watchdog_usec) || !watchdog_usec) {
			log_error("WATCHDOG_USEC: not a positive number: %s", wd);
			return -EINVAL;
		}
		if (wd_pid && (parse_u64(wd_pid, &pid) || pid != (uint64_t)getpid()))
			watchdog_usec = 0;
	}
	if (!path || !*path)
		return 0;
	len = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || len >= sizeof(notify_addr.sun_path) ||
	    len < 2) {
		log_error("NOTIFY_SOCKET: neither an absolute path nor @abstract: %s", path);
		return -EINVAL;
	}
	memset(&notify_addr, 0, sizeof(notify_addr));
	notify_addr.sun_family = AF_UNIX;
	memcpy(notify_addr.sun_path, path, len);
	if (path[0] == '@')
		notify_addr.sun_path[0] = '\0'; /* abstract: no trailing NUL counted */
	notify_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len +
				 (path[0] == '@' ? 0 : 1));
	notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (notify_fd < 0)
		return -errno;
	return 0;
}

void egr_notify_close(void)
{
	if (notify_fd >= 0)
		close(notify_fd);
	notify_fd = -1;
}

int egr_notify(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	int n;

	if (notify_fd < 0)
		return 0;
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(msg))
		return -EMSGSIZE;
	if (sendto(notify_fd, msg, (size_t)n, MSG_NOSIGNAL, (struct sockaddr *)&notify_addr,
		   notify_len) < 0) {
		int err = -errno;

		/* Once per outage: the watchdog would repeat it every period. */
		if (!send_failing)
			log_warn("notify %s: %s (logged once until it works again)",
				 notify_addr.sun_path[0] ? notify_addr.sun_path : "(abstract socket)",
				 strerror(-err));
		send_failing = true;
		return err;
	}
	if (send_failing)
		log_info("notify: the service manager's socket works again");
	send_failing = false;
	return 0;
}

uint64_t egr_notify_watchdog_usec(void)
{
	return watchdog_usec;
}

static void on_watchdog(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	egr_notify("WATCHDOG=1");
}

int egr_notify_watchdog_start(struct egr_loop *loop)
{
	uint64_t ms = watchdog_usec / 2000;

	if (!watchdog_usec || notify_fd < 0)
		return 0;
	/* The timer runs in the same loop as DNS and the control socket: if
	 * the loop stalls, the pings stop and the manager restarts egressd. */
	if (ms == 0)
		ms = 1;
	if (ms > UINT32_MAX)
		ms = UINT32_MAX;
	log_info("watchdog: WATCHDOG=1 every %llu ms", (unsigned long long)ms);
	return egr_loop_every(loop, (uint32_t)ms, on_watchdog, NULL);
}
