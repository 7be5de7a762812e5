// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The listener holder (user/egressd/hold/) with real sockets (root:
 * SIOCGSKNS needs CAP_NET_ADMIN): a UDP socket and a TCP listener handed
 * to a holder keep queueing what is sent to them while no other process
 * holds them, and a successor claims exactly those sockets, by what the
 * kernel says of them, with what queued.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "hold/hold_proto.h"
#include "hold/lhold.h"
#include "loop.h"

static char path[108];
static pid_t holder = -1;
static struct stat self_ns;

/* A holder as egressd starts one, from this process (fork, no exec). */
static int setup(void **state)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int lfd;

	snprintf(path, sizeof(path), "/tmp/egr-test-lhold-%d.sock", (int)getpid());
	unlink(path);
	memcpy(sa.sun_path, path, strlen(path));
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 8) < 0 ||
	    stat("/proc/self/ns/net", &self_ns) < 0) {
		fprintf(stderr, "holder socket: %s\n", strerror(errno));
		return -1;
	}
	holder = fork();
	if (holder == 0)
		_exit(egr_holder_main(lfd, 30));
	close(lfd);
	return holder > 0 ? 0 : -1;
}

static int teardown(void **state)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0), status;

	memcpy(sa.sun_path, path, strlen(path));
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
		send(fd, "QUIT", 4, 0);
	if (fd >= 0)
		close(fd);
	if (holder > 0 && waitpid(holder, &status, 0) < 0)
		kill(holder, SIGKILL);
	unlink(path);
	return 0;
}

static uint16_t bound_port(int fd)
{
	struct sockaddr_in a;
	socklen_t l = sizeof(a);

	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	return ntohs(a.sin_port);
}

static void test_socket_outlives_its_process_and_is_claimed(void **state)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct egr_lhold_stats st;
	struct egr_loop *loop;
	struct egr_lhold *h;
	char buf[16];
	uint16_t port;
	int u, t, cl, ct, fd;

	assert_int_equal(egr_loop_new(&loop), 0);
	assert_int_equal(egr_lhold_open(loop, path, "/nonexistent", 30, &h), 0);
	u = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	assert_int_equal(bind(u, (struct sockaddr *)&a, sizeof(a)), 0);
	port = bound_port(u);
	a.sin_port = htons(port);
	t = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	assert_int_equal(bind(t, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(t, 8), 0);
	assert_int_equal(egr_lhold_put(h, u), 0);
	assert_int_equal(egr_lhold_put(h, t), 0);
	egr_lhold_stats(h, &st);
	assert_int_equal(st.held, 2);
	/* egressd gone: only the holder has them. */
	egr_lhold_freeze(h);
	egr_lhold_free(h);
	close(u);
	close(t);

	/* Still bound: a connected sender gets no ECONNREFUSED, its datagram
	 * queues; a TCP connect completes into the backlog. */
	cl = socket(AF_INET, SOCK_DGRAM, 0);
	assert_int_equal(connect(cl, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(send(cl, "while-down", 10, 0), 10);
	usleep(50 * 1000);
	assert_int_equal(send(cl, "again", 5, 0), 5);
	ct = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(connect(ct, (struct sockaddr *)&a, sizeof(a)), 0);

	/* The successor. */
	assert_int_equal(egr_lhold_open(loop, path, "/nonexistent", 30, &h), 0);
	egr_lhold_stats(h, &st);
	assert_int_equal(st.handed_over, 2);
	assert_int_equal(egr_lhold_claim(h, self_ns.st_dev, self_ns.st_ino, AF_INET, SOCK_DGRAM,
					 (uint16_t)(port + 1)), -ENOENT);
	assert_int_equal(egr_lhold_claim(h, self_ns.st_dev, self_ns.st_ino + 1, AF_INET,
					 SOCK_DGRAM, port), -ENOENT);
	assert_int_equal(egr_lhold_claim(h, self_ns.st_dev, self_ns.st_ino, AF_INET6, SOCK_DGRAM,
					 port), -ENOENT);
	fd = egr_lhold_claim(h, self_ns.st_dev, self_ns.st_ino, AF_INET, SOCK_DGRAM, port);
	assert_true(fd >= 0);
	assert_int_equal(recv(fd, buf, sizeof(buf), 0), 10);
	assert_memory_equal(buf, "while-down", 10);
	assert_int_equal(recv(fd, buf, sizeof(buf), 0), 5);
	u = fd;
	fd = egr_lhold_claim(h, self_ns.st_dev, self_ns.st_ino, AF_INET, SOCK_STREAM, port);
	assert_true(fd >= 0);
	t = fd;
	fd = accept(t, NULL, NULL);
	assert_true(fd >= 0);
	close(fd);
	/* Claimed once only. */
	assert_int_equal(egr_lhold_claim(h, self_ns.st_dev, self_ns.st_ino, AF_INET, SOCK_DGRAM,
					 port), -ENOENT);
	egr_lhold_settle(h);
	egr_lhold_stats(h, &st);
	assert_int_equal(st.claimed, 2);
	assert_int_equal(st.released, 0);
	assert_int_equal(st.held, 2);

	/* Closed for good: the holder lets go, the port is free again. */
	egr_lhold_drop(h, u);
	egr_lhold_drop(h, t);
	close(u);
	close(t);
	egr_lhold_stats(h, &st);
	assert_int_equal(st.held, 0);
	egr_lhold_free(h);
	u = socket(AF_INET, SOCK_DGRAM, 0);
	assert_int_equal(bind(u, (struct sockaddr *)&a, sizeof(a)), 0);
	close(u);
	close(cl);
	close(ct);
	egr_loop_free(loop);
}

/* One answer of the holder at p to msg ("" when it closed without one). */
static void ask(const char *p, const char *msg, char *out, size_t len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	ssize_t n = -1;

	out[0] = '\0';
	memcpy(sa.sun_path, p, strlen(p));
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    send(fd, msg, strlen(msg), 0) == (ssize_t)strlen(msg))
		n = recv(fd, out, len - 1, 0);
	if (n > 0)
		out[n] = '\0';
	if (fd >= 0)
		close(fd);
}

/*
 * A holder killed while egressd runs is replaced, every time, with every
 * socket handed to the new one. The race this guards: the dying holder's
 * connection to egressd closes before its listening socket does, so
 * egressd's first connect() could reach the dying listener and be reset
 * ("cannot start another: Connection reset by peer", then no holder at
 * all). Many rounds: one lost race in them fails the test.
 */
static char repl_path[108];

/* Also when the test failed: the last holder quits, its socket goes. */
static int repl_teardown(void **state)
{
	char out[64];

	if (repl_path[0]) {
		ask(repl_path, "QUIT", out, sizeof(out));
		unlink(repl_path);
	}
	return 0;
}

static void test_killed_holder_replaced_every_time(void **state)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	char *p = repl_path, exe[256], out[256];
	struct egr_lhold_stats st;
	struct egr_loop *loop;
	struct egr_lhold *h;
	ssize_t n;
	int u;

	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	assert_true(n > 0);
	exe[n] = '\0';
	snprintf(p, sizeof(repl_path), "/tmp/egr-test-lhold-repl-%d.sock", (int)getpid());
	unlink(p);
	assert_int_equal(egr_loop_new(&loop), 0);
	assert_int_equal(egr_lhold_open(loop, p, exe, 30, &h), 0);
	u = socket(AF_INET, SOCK_DGRAM, 0);
	assert_int_equal(bind(u, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(egr_lhold_put(h, u), 0);
	for (int round = 0; round < 100; round++) {
		long old;

		egr_lhold_stats(h, &st);
		old = st.holder_pid;
		assert_true(old > 0);
		assert_int_equal(kill((pid_t)old, SIGKILL), 0);
		/* egressd's loop sees the connection go and starts another. */
		for (int i = 0; i < 100; i++) {
			egr_lhold_stats(h, &st);
			if (st.holder_pid != old)
				break;
			egr_loop_run_once(loop, 50);
		}
		egr_lhold_stats(h, &st);
		if (st.holder_pid <= 0 || st.holder_pid == old)
			fail_msg("round %d: holder %ld killed, none replaced it (pid %ld)", round, old,
				 st.holder_pid);
		ask(p, "PING", out, sizeof(out));
		if (strncmp(out, "OK ", 3) || strtol(out + 3, NULL, 10) != st.holder_pid ||
		    !strstr(out + 3, " 1"))
			fail_msg("round %d: the new holder answers %s", round, out);
	}
	egr_lhold_free(h);
	close(u);
	egr_loop_free(loop);
}

/* A successor lets go of what no adoption claims. */
static void test_unclaimed_released_at_settle(void **state)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct egr_lhold_stats st;
	struct egr_loop *loop;
	struct egr_lhold *h;
	int u;

	assert_int_equal(egr_loop_new(&loop), 0);
	assert_int_equal(egr_lhold_open(loop, path, "/nonexistent", 30, &h), 0);
	u = socket(AF_INET, SOCK_DGRAM, 0);
	assert_int_equal(bind(u, (struct sockaddr *)&a, sizeof(a)), 0);
	a.sin_port = htons(bound_port(u));
	assert_int_equal(egr_lhold_put(h, u), 0);
	egr_lhold_freeze(h);
	egr_lhold_free(h);
	close(u);
	assert_int_equal(egr_lhold_open(loop, path, "/nonexistent", 30, &h), 0);
	egr_lhold_settle(h);
	egr_lhold_stats(h, &st);
	assert_int_equal(st.handed_over, 1);
	assert_int_equal(st.released, 1);
	egr_lhold_free(h);
	/* Released: nobody holds the port any more. */
	u = socket(AF_INET, SOCK_DGRAM, 0);
	assert_int_equal(bind(u, (struct sockaddr *)&a, sizeof(a)), 0);
	close(u);
	egr_loop_free(loop);
}

/* What the upgrade's handover relies on: egr_lhold_answers tells a running
 * holder from none, egr_lhold_holdable keeps listeners only, and the
 * handed-over sockets are listed for the upgrade's marks. */
static void test_handover_helpers(void **state)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct egr_loop *loop;
	struct egr_lhold *h;
	int u, t, c, *fds = NULL;

	assert_true(egr_lhold_answers(path));
	assert_false(egr_lhold_answers("/tmp/egr-test-lhold-none.sock"));
	u = socket(AF_INET, SOCK_DGRAM, 0);
	assert_int_equal(bind(u, (struct sockaddr *)&a, sizeof(a)), 0);
	t = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(bind(t, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_true(egr_lhold_holdable(u));
	assert_false(egr_lhold_holdable(t)); /* not listening: no listener */
	assert_int_equal(listen(t, 4), 0);
	assert_true(egr_lhold_holdable(t));
	/* A connected UDP socket on loopback is a client's, never held. */
	c = socket(AF_INET, SOCK_DGRAM, 0);
	a.sin_port = htons(bound_port(u));
	assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_false(egr_lhold_holdable(c));
	close(c);

	assert_int_equal(egr_loop_new(&loop), 0);
	assert_int_equal(egr_lhold_open(loop, path, "/nonexistent", 30, &h), 0);
	assert_int_equal(egr_lhold_taken_fds(h, &fds), 0);
	assert_null(fds);
	assert_int_equal(egr_lhold_put(h, u), 0);
	assert_int_equal(egr_lhold_put(h, t), 0);
	egr_lhold_freeze(h);
	egr_lhold_free(h);
	assert_int_equal(egr_lhold_open(loop, path, "/nonexistent", 30, &h), 0);
	assert_int_equal(egr_lhold_taken_fds(h, &fds), 2);
	for (int i = 0; i < 2; i++)
		assert_true(egr_lhold_holdable(fds[i]));
	free(fds);
	assert_int_equal(egr_lhold_taken_fds(NULL, &fds), 0);
	egr_lhold_settle(h); /* nothing claimed: both let go */
	egr_lhold_free(h);
	close(u);
	close(t);
	egr_loop_free(loop);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_socket_outlives_its_process_and_is_claimed),
		cmocka_unit_test(test_unclaimed_released_at_settle),
		cmocka_unit_test(test_handover_helpers),
		cmocka_unit_test_teardown(test_killed_holder_replaced_every_time, repl_teardown),
	};

	/* The holders egr_lhold starts: this binary, as egressd's main does. */
	if (argc == 4 && !strcmp(argv[1], "--run-listener-holder"))
		return egr_holder_main(atoi(argv[2]), (unsigned)strtoul(argv[3], NULL, 10));

	return cmocka_run_group_tests_name("lhold", tests, setup, teardown);
}
