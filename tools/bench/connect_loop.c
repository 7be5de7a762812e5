// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * connect_loop: socket()/connect()/close() to a TCP listener as fast as one
 * thread can, for a bounded number of seconds, and print how many connects
 * succeeded. tools/bench.py runs it inside a sandbox cgroup and outside any
 * sandbox, alternately, to measure what egressd's cgroup programs cost.
 *
 *   connect_loop [--listen] [--cgroup DIR] ADDR PORT SECONDS
 *
 * Output (one line on stdout):  connects=N seconds=S rate=R
 * Exit status: 0 when every connect succeeded, 1 when one failed (errno
 * printed on stderr; the loop stops at the first failure), 2 on bad usage.
 *
 * Design choices:
 *
 * - The listener. With --listen, connect_loop serves ADDR:PORT itself: a
 *   listening socket with a large backlog and one accept thread that accepts
 *   and closes (RST) every connection. A python listener would be the
 *   bottleneck; a second process would be one more thing to clean up. The
 *   listener and the accept thread are set up BEFORE the process joins the
 *   sandbox cgroup (--cgroup), so the listening socket - and every accepted
 *   socket, which inherits its cgroup from the listener - belongs to the
 *   cgroup the benchmark was started in, not to the sandbox: only the client
 *   side is confined, as for a sandbox talking to a service outside it, and
 *   an inbound-deny hook on the sandbox could not interfere. Joining the
 *   cgroup here (writing "0" to DIR/cgroup.procs, which moves all threads)
 *   rather than in the parent between fork and exec keeps that ordering
 *   explicit. The same listener setup is used with and without --cgroup, so
 *   the two runs differ only by the sandbox.
 *
 * - Ephemeral ports. Every client socket sets SO_LINGER {1, 0} before
 *   close(), so close() sends RST and leaves no TIME_WAIT socket behind on
 *   either side (the accept thread closes normally: its FIN is answered by
 *   the client's RST, or the client's RST came first). The loop can therefore reuse the
 *   ephemeral port range indefinitely instead of exhausting it in ~1 s.
 *
 * - Bounds. SECONDS is limited to 1..3600; each connect has a 2 s send
 *   timeout (a dropped SYN would otherwise block for minutes); the accept
 *   thread polls with a timeout and stops when the loop ends.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#define MAX_SECONDS 3600
#define BACKLOG 4096

static atomic_bool stop_accepting;
static atomic_ulong accepted;
static atomic_int accept_errno;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void rst_close(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

static void *accept_main(void *arg)
{
	int lfd = *(int *)arg;

	while (!atomic_load(&stop_accepting)) {
		struct pollfd pfd = { .fd = lfd, .events = POLLIN };
		int r = poll(&pfd, 1, 100);

		if (r < 0 && errno != EINTR) {
			atomic_store(&accept_errno, errno);
			return NULL;
		}
		if (r <= 0)
			continue;
		/* Drain everything queued; the socket is non-blocking. */
		for (;;) {
			int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

			if (cfd < 0) {
				if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
				    errno != ECONNABORTED)
					atomic_store(&accept_errno, errno);
				break;
			}
			/* A plain close: a server RST could reach the client
			 * before its connect() returns and fail it with
			 * ECONNRESET. The client's own RST removes this side. */
			close(cfd);
			atomic_fetch_add(&accepted, 1);
		}
	}
	return NULL;
}

static int start_listener(const struct sockaddr_in *sin, int *out_fd)
{
	int one = 1;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		return -errno;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (const struct sockaddr *)sin, sizeof(*sin)) < 0 || listen(fd, BACKLOG) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	*out_fd = fd;
	return 0;
}

static int join_cgroup(const char *dir)
{
	char path[4096];
	int fd, err = 0;

	if ((size_t)snprintf(path, sizeof(path), "%s/cgroup.procs", dir) >= sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, "0", 1) != 1)
		err = -errno;
	close(fd);
	return err;
}

static void usage(FILE *out)
{
	fprintf(out, "Usage: connect_loop [--listen] [--cgroup DIR] ADDR PORT SECONDS\n"
		     "  --listen      serve ADDR:PORT from an accept thread in this process\n"
		     "  --cgroup DIR  join cgroup DIR (after the listener is up) before looping\n"
		     "  SECONDS       1-%d\n",
		MAX_SECONDS);
}

int main(int argc, char **argv)
{
	const char *cgroup = NULL, *addr_s, *port_s, *secs_s;
	struct timeval snd_to = { .tv_sec = 2 };
	struct sockaddr_in sin = { .sin_family = AF_INET };
	unsigned long long connects = 0;
	bool listen_self = false;
	pthread_t thr;
	double t0, t1, deadline, elapsed;
	long port, secs;
	char *end;
	int lfd = -1, i, err, rc = 0;

	for (i = 1; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
		if (strcmp(argv[i], "--listen") == 0) {
			listen_self = true;
		} else if (strcmp(argv[i], "--cgroup") == 0 && i + 1 < argc) {
			cgroup = argv[++i];
		} else if (strcmp(argv[i], "--help") == 0) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (argc - i != 3) {
		usage(stderr);
		return 2;
	}
	addr_s = argv[i];
	port_s = argv[i + 1];
	secs_s = argv[i + 2];
	if (inet_pton(AF_INET, addr_s, &sin.sin_addr) != 1) {
		fprintf(stderr, "connect_loop: ADDR must be an IPv4 address, got %s\n", addr_s);
		return 2;
	}
	errno = 0;
	port = strtol(port_s, &end, 10);
	if (errno || *end || end == port_s || port < 1 || port > 65535) {
		fprintf(stderr, "connect_loop: PORT must be 1-65535, got %s\n", port_s);
		return 2;
	}
	secs = strtol(secs_s, &end, 10);
	if (errno || *end || end == secs_s || secs < 1 || secs > MAX_SECONDS) {
		fprintf(stderr, "connect_loop: SECONDS must be 1-%d, got %s\n", MAX_SECONDS, secs_s);
		return 2;
	}
	sin.sin_port = htons((unsigned short)port);

	if (listen_self) {
		err = start_listener(&sin, &lfd);
		if (err) {
			fprintf(stderr, "connect_loop: listen on %s:%ld: %s\n", addr_s, port,
				strerror(-err));
			return 1;
		}
		err = pthread_create(&thr, NULL, accept_main, &lfd);
		if (err) {
			fprintf(stderr, "connect_loop: accept thread: %s\n", strerror(err));
			close(lfd);
			return 1;
		}
	}
	if (cgroup) {
		err = join_cgroup(cgroup);
		if (err) {
			fprintf(stderr, "connect_loop: join cgroup %s: %s\n", cgroup, strerror(-err));
			rc = 1;
			goto out;
		}
	}

	t0 = now_s();
	deadline = t0 + (double)secs;
	for (t1 = t0; t1 < deadline; t1 = now_s()) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (fd < 0) {
			fprintf(stderr, "connect_loop: socket after %llu connects: %s (errno %d)\n",
				connects, strerror(errno), errno);
			rc = 1;
			break;
		}
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &snd_to, sizeof(snd_to));
		if (connect(fd, (const struct sockaddr *)&sin, sizeof(sin)) < 0) {
			fprintf(stderr, "connect_loop: connect to %s:%ld after %llu connects: %s "
					"(errno %d)\n",
				addr_s, port, connects, strerror(errno), errno);
			close(fd);
			rc = 1;
			break;
		}
		connects++;
		rst_close(fd);
	}
	elapsed = t1 - t0;
	printf("connects=%llu seconds=%.3f rate=%.1f\n", connects, elapsed,
	       elapsed > 0 ? (double)connects / elapsed : 0.0);
	fflush(stdout);
out:
	if (listen_self) {
		atomic_store(&stop_accepting, true);
		pthread_join(thr, NULL);
		close(lfd);
		if (atomic_load(&accept_errno)) {
			fprintf(stderr, "connect_loop: accept: %s\n",
				strerror(atomic_load(&accept_errno)));
			rc = 1;
		}
	}
	return rc;
}
