// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * connect_loop: socket()/connect()/close() to a TCP listener as fast as one
 * thread can, for a bounded number of seconds, and print how many connects
 * succeeded. tools/bench.py runs it inside a sandbox cgroup and outside any
 * sandbox, alternately, to measure what egressd's cgroup programs cost.
 *
 *   connect_loop [--listen] [--cgroup DIR] [--proxy PADDR:PPORT] [--expect-deny]
 *                ADDR PORT SECONDS
 *
 * Output (one line on stdout):  connects=N seconds=S rate=R p50_us=X p99_us=Y
 * (p50/p99 of the time from socket() to an established connection; with
 * --proxy, to the proxy's "200" answer to "CONNECT ADDR:PORT", which is when
 * a client of an HTTP CONNECT proxy such as tinyproxy can send its first byte)
 * With --expect-deny every connect must fail with EPERM (a sandbox whose
 * policy refuses ADDR:PORT): the loop counts refusals instead, for the
 * deny-event rate of tools/bench_scale.py, and stops at anything else.
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
/* Latency samples kept (16 MiB); later connects still count in the rate. */
#define MAX_SAMPLES (4u << 20)

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

/* CONNECT ADDR:PORT through an HTTP proxy on fd; 0 once it answered 2xx.
 * The answer head is read to its end (bounded) so the next connection
 * starts clean; anything else is -EPROTO. */
static int proxy_connect(int fd, const char *addr_s, long port)
{
	char req[160], buf[1024];
	size_t have = 0;
	int n;

	n = snprintf(req, sizeof(req), "CONNECT %s:%ld HTTP/1.1\r\nHost: %s:%ld\r\n\r\n", addr_s,
		     port, addr_s, port);
	if (write(fd, req, (size_t)n) != n)
		return -errno;
	while (have < sizeof(buf) - 1) {
		ssize_t r = read(fd, buf + have, sizeof(buf) - 1 - have);

		if (r <= 0)
			return r < 0 ? -errno : -ECONNRESET;
		have += (size_t)r;
		buf[have] = 0;
		if (strstr(buf, "\r\n\r\n"))
			return (strncmp(buf, "HTTP/1.", 7) == 0 && have > 9 && buf[9] == '2')
				       ? 0
				       : -EPROTO;
	}
	return -EPROTO;
}

static int cmp_u32(const void *a, const void *b)
{
	unsigned int x = *(const unsigned int *)a, y = *(const unsigned int *)b;

	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile in microseconds of n sorted ns samples. */
static double pct_us(const unsigned int *v, size_t n, unsigned int p)
{
	size_t k;

	if (!n)
		return 0.0;
	k = (n * p + 99) / 100;
	k = k ? k - 1 : 0;
	return (double)v[k < n ? k : n - 1] / 1e3;
}

static void usage(FILE *out)
{
	fprintf(out, "Usage: connect_loop [--listen] [--cgroup DIR] [--proxy PADDR:PPORT] [--expect-deny] ADDR "
		     "PORT SECONDS\n"
		     "  --listen      serve ADDR:PORT from an accept thread in this process\n"
		     "  --cgroup DIR  join cgroup DIR (after the listener is up) before looping\n"
		     "  --proxy A:P   connect to the HTTP proxy A:P and CONNECT to ADDR:PORT\n"
		     "  --expect-deny every connect must fail with EPERM; count the refusals\n"
		     "  SECONDS       1-%d\n",
		MAX_SECONDS);
}

int main(int argc, char **argv)
{
	const char *cgroup = NULL, *proxy_s = NULL, *addr_s, *port_s, *secs_s;
	struct timeval snd_to = { .tv_sec = 2 };
	struct sockaddr_in sin = { .sin_family = AF_INET }, psin = { .sin_family = AF_INET };
	const struct sockaddr_in *dst = &sin;
	unsigned int *lat = NULL;
	size_t nlat = 0;
	unsigned long long connects = 0;
	bool listen_self = false, expect_deny = false;
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
		} else if (strcmp(argv[i], "--expect-deny") == 0) {
			expect_deny = true;
		} else if (strcmp(argv[i], "--proxy") == 0 && i + 1 < argc) {
			proxy_s = argv[++i];
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
	if (proxy_s) {
		char host[64];
		const char *colon = strrchr(proxy_s, ':');
		long pport;

		if (!colon || (size_t)(colon - proxy_s) >= sizeof(host)) {
			fprintf(stderr, "connect_loop: --proxy must be ADDR:PORT, got %s\n", proxy_s);
			return 2;
		}
		memcpy(host, proxy_s, (size_t)(colon - proxy_s));
		host[colon - proxy_s] = 0;
		pport = strtol(colon + 1, &end, 10);
		if (inet_pton(AF_INET, host, &psin.sin_addr) != 1 || *end || pport < 1 ||
		    pport > 65535) {
			fprintf(stderr, "connect_loop: --proxy must be ADDR:PORT, got %s\n", proxy_s);
			return 2;
		}
		psin.sin_port = htons((unsigned short)pport);
		dst = &psin;
	}
	lat = malloc(MAX_SAMPLES * sizeof(*lat));
	if (!lat) {
		fprintf(stderr, "connect_loop: no memory for latency samples\n");
		return 1;
	}

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
		double ts = t1;

		if (fd < 0) {
			fprintf(stderr, "connect_loop: socket after %llu connects: %s (errno %d)\n",
				connects, strerror(errno), errno);
			rc = 1;
			break;
		}
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &snd_to, sizeof(snd_to));
		/* Only for the proxy's answer: every setsockopt() of a sandboxed
		 * socket runs egr_setsockopt, which would add to its cost. */
		if (proxy_s)
			setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &snd_to, sizeof(snd_to));
		if (expect_deny) {
			bool allowed = connect(fd, (const struct sockaddr *)dst, sizeof(*dst)) == 0;

			if (allowed || errno != EPERM) {
				fprintf(stderr, "connect_loop: connect to %s:%ld after %llu refusals: "
						"%s, expected EPERM\n",
					addr_s, port, connects, allowed ? "allowed" : strerror(errno));
				close(fd);
				rc = 1;
				break;
			}
			close(fd);
			connects++;
			continue;
		}
		if (connect(fd, (const struct sockaddr *)dst, sizeof(*dst)) < 0) {
			fprintf(stderr, "connect_loop: connect to %s:%ld after %llu connects: %s "
					"(errno %d)\n",
				addr_s, port, connects, strerror(errno), errno);
			close(fd);
			rc = 1;
			break;
		}
		if (proxy_s) {
			err = proxy_connect(fd, addr_s, port);
			if (err) {
				fprintf(stderr, "connect_loop: CONNECT %s:%ld via %s after %llu "
						"connects: %s\n",
					addr_s, port, proxy_s, connects, strerror(-err));
				close(fd);
				rc = 1;
				break;
			}
		}
		if (nlat < MAX_SAMPLES)
			lat[nlat++] = (unsigned int)((now_s() - ts) * 1e9);
		connects++;
		rst_close(fd);
	}
	elapsed = t1 - t0;
	qsort(lat, nlat, sizeof(*lat), cmp_u32);
	printf("connects=%llu seconds=%.3f rate=%.1f p50_us=%.1f p99_us=%.1f\n", connects, elapsed,
	       elapsed > 0 ? (double)connects / elapsed : 0.0, pct_us(lat, nlat, 50),
	       pct_us(lat, nlat, 99));
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
	free(lat);
	return rc;
}
