// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * For cmocka tests of things that cannot be undone (a seccomp filter, a
 * capability drop): in_child() runs a function in a forked child, which
 * reports its first failed check through a pipe (child_fail) and its exit
 * status. Included by one test file each (static functions).
 */
#ifndef EGR_TEST_IN_CHILD_H
#define EGR_TEST_IN_CHILD_H

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static int report_fd = -1;

/* In the child: report the first failed check and exit 1. */
static void __attribute__((noreturn, format(printf, 1, 2))) child_fail(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n > 0 && write(report_fd, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1) < 0)
		_exit(3);
	_exit(1);
}

/* socket() must fail with EPERM. A socket that is created anyway is closed
 * at once (never used: for AF_VSOCK the peer would be the VM's host). */
static inline void expect_socket_eperm(int family, int type, int proto, const char *what)
{
	int fd = socket(family, type | SOCK_CLOEXEC, proto);
	int e = errno;

	if (fd >= 0) {
		close(fd);
		child_fail("%s: socket() succeeded under the filter", what);
	}
	if (e != EPERM)
		child_fail("%s: socket() failed with %s, expected EPERM", what, strerror(e));
}

static inline void expect_socket_ok(int family, int type, int proto, const char *what)
{
	int fd = socket(family, type | SOCK_CLOEXEC, proto);

	if (fd < 0)
		child_fail("%s: socket() failed under the filter: %s", what, strerror(errno));
	close(fd);
}

/* Run fn in a forked child; fail with what the child reported. */
static inline void in_child(void (*fn)(void), const char *name)
{
	char buf[513];
	int pfd[2], status;
	ssize_t n;
	pid_t pid;

	assert_int_equal(pipe(pfd), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pfd[0]);
		report_fd = pfd[1];
		fn();
		_exit(0);
	}
	close(pfd[1]);
	n = read(pfd[0], buf, sizeof(buf) - 1);
	close(pfd[0]);
	buf[n > 0 ? n : 0] = '\0';
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("%s: child %s %d: %s", name,
			 WIFEXITED(status) ? "exited with" : "killed by signal",
			 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
			 buf[0] ? buf : "(no report)");
}

#endif
