// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Load for the inspecting-proxy benchmark (tools/bench_inspect.py).
 *
 *   inspect_load server HOST PORT        answer "1" once a request head
 *                                        arrived, then read and discard to EOF
 *   inspect_load bulk HOST PORT SECONDS  one connection: an HTTP head, then
 *                                        1 MiB writes for SECONDS; prints
 *                                        "bytes SECONDS_ELAPSED"
 *   inspect_load bulk HOST PORT SECONDS PROXY:PPORT
 *                                        the same through an HTTP CONNECT
 *                                        proxy (tools/bench_compare.py)
 *   inspect_load setup HOST PORT N       N connections one after another:
 *                                        connect, head, wait for "1", close;
 *                                        prints every setup time in ns
 *   inspect_load trickle HOST PORT N SECONDS
 *                                        N connections, a head each, then
 *                                        1-byte writes round-robin for
 *                                        SECONDS; prints the writes made
 *
 * Every loop is bounded by its count or its clock.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* A length no run reaches: the proxy frames every request (docs/inspect.md). */
static const char HEAD[] = "POST /bench HTTP/1.1\r\nHost: bench.test\r\n"
			   "Content-Length: 1000000000000000\r\n\r\n";

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int addr_of(const char *host, int port, struct sockaddr_in *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)port);
	return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -EINVAL;
}

static void *serve(void *arg)
{
	int fd = (int)(long)arg, seen = 0;
	static char buf[1 << 17];
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		if (!seen && memmem(buf, (size_t)n, "\r\n\r\n", 4)) {
			seen = 1;
			if (write(fd, "1", 1) != 1)
				break;
		}
	}
	close(fd);
	return NULL;
}

static int server(const char *host, int port)
{
	struct sockaddr_in sa;
	int one = 1, ls = socket(AF_INET, SOCK_STREAM, 0);

	if (ls < 0 || addr_of(host, port, &sa))
		return 2;
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(ls, 512) < 0) {
		perror("server");
		return 2;
	}
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		pthread_t t;
		int fd = accept(ls, NULL, NULL);

		if (fd < 0)
			continue;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (pthread_create(&t, NULL, serve, (void *)(long)fd)) {
			close(fd);
			continue;
		}
		pthread_detach(t);
	}
}

static int dial(const struct sockaddr_in *sa)
{
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* "CONNECT host:port" on fd and read the proxy's answer head: 0 on a 2xx. */
static int proxy_connect(int fd, const char *host, int port)
{
	char req[160], buf[1024];
	size_t have = 0;
	int n = snprintf(req, sizeof(req), "CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n", host,
			 port, host, port);

	if (write(fd, req, (size_t)n) != n)
		return -1;
	while (have < sizeof(buf) - 1) {
		ssize_t r = read(fd, buf + have, sizeof(buf) - 1 - have);

		if (r <= 0)
			return -1;
		have += (size_t)r;
		buf[have] = 0;
		if (strstr(buf, "\r\n\r\n"))
			return strncmp(buf, "HTTP/1.", 7) == 0 && have > 9 && buf[9] == '2' ? 0 : -1;
	}
	return -1;
}

static int bulk(const char *host, int port, double secs, const char *proxy)
{
	static char buf[1 << 20];
	struct sockaddr_in sa;
	unsigned long long bytes = 0;
	double t0, end;
	int fd;

	if (proxy) {
		char phost[64];
		const char *colon = strrchr(proxy, ':');

		if (!colon || (size_t)(colon - proxy) >= sizeof(phost))
			return 2;
		memcpy(phost, proxy, (size_t)(colon - proxy));
		phost[colon - proxy] = 0;
		if (addr_of(phost, atoi(colon + 1), &sa) || (fd = dial(&sa)) < 0) {
			perror("bulk connect to proxy");
			return 1;
		}
		if (proxy_connect(fd, host, port)) {
			fprintf(stderr, "bulk: the proxy refused CONNECT %s:%d\n", host, port);
			return 1;
		}
	} else if (addr_of(host, port, &sa) || (fd = dial(&sa)) < 0) {
		perror("bulk connect");
		return 1;
	}
	if (write(fd, HEAD, sizeof(HEAD) - 1) != (ssize_t)(sizeof(HEAD) - 1))
		return 1;
	t0 = now_s();
	end = t0 + secs;
	while (now_s() < end) {
		ssize_t n = write(fd, buf, sizeof(buf));

		if (n <= 0) {
			perror("bulk write");
			return 1;
		}
		bytes += (unsigned long long)n;
	}
	printf("%llu %.6f\n", bytes, now_s() - t0);
	close(fd);
	return 0;
}

static int setup(const char *host, int port, int count)
{
	struct sockaddr_in sa;

	if (addr_of(host, port, &sa))
		return 2;
	for (int i = 0; i < count; i++) {
		struct timespec a, b;
		char c;
		int fd;

		clock_gettime(CLOCK_MONOTONIC, &a);
		fd = dial(&sa);
		if (fd < 0 || write(fd, HEAD, sizeof(HEAD) - 1) != (ssize_t)(sizeof(HEAD) - 1) ||
		    read(fd, &c, 1) != 1) {
			perror("setup");
			return 1;
		}
		clock_gettime(CLOCK_MONOTONIC, &b);
		close(fd);
		printf("%lld\n", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL +
					 (b.tv_nsec - a.tv_nsec));
	}
	return 0;
}

/* Relay work at its most expensive per byte: many connections of 1-byte
 * writes (issue 23 finding 9: the neighbours' DNS through the shared loop). */
static int trickle(const char *host, int port, int n, double secs)
{
	struct sockaddr_in sa;
	unsigned long long writes = 0;
	int *fds;
	double end;

	if (n < 1 || n > 1000 || addr_of(host, port, &sa) || !(fds = calloc((size_t)n, sizeof(int))))
		return 2;
	for (int i = 0; i < n; i++) {
		fds[i] = dial(&sa);
		if (fds[i] < 0 || write(fds[i], HEAD, sizeof(HEAD) - 1) != (ssize_t)(sizeof(HEAD) - 1) ||
		    fcntl(fds[i], F_SETFL, O_NONBLOCK) < 0) {
			perror("trickle");
			return 1;
		}
	}
	end = now_s() + secs;
	while (now_s() < end)
		for (int i = 0; i < n; i++)
			if (write(fds[i], "x", 1) == 1)
				writes++;
	printf("%llu\n", writes);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	free(fds);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 6 && !strcmp(argv[1], "trickle"))
		return trickle(argv[2], atoi(argv[3]), atoi(argv[4]), atof(argv[5]));
	if (argc == 4 && !strcmp(argv[1], "server"))
		return server(argv[2], atoi(argv[3]));
	if ((argc == 5 || argc == 6) && !strcmp(argv[1], "bulk"))
		return bulk(argv[2], atoi(argv[3]), atof(argv[4]), argc == 6 ? argv[5] : NULL);
	if (argc == 5 && !strcmp(argv[1], "setup"))
		return setup(argv[2], atoi(argv[3]), atoi(argv[4]));
	fprintf(stderr, "usage: inspect_load server HOST PORT | bulk HOST PORT SECONDS [PROXY:PORT] | "
			"setup HOST PORT N | trickle HOST PORT N SECONDS\n");
	return 2;
}
