// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The inspecting proxy (user/egressd/inspect.c) on real loopback sockets,
 * with a real BPF hash map standing in for the kernel's egr_inspect_orig
 * (the test writes the entry the SYN would have published; root needed for
 * the map). What the e2e tests cannot wait for: the first-bytes deadline
 * and the idle timeout, with short settings; plus the relay, half-close and
 * the identity check.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <bpf/bpf.h>

#include "loop.h"
#include "dns/learned.h"
#include "inspect.h"
#include "kernel/kernel_priv.h"

#define SBID 9

static struct egr_loop *loop;
static struct egr_inspect *ins;
static int map_fd = -1, server_fd = -1;
static struct egr_bpf kmaps; /* only its egr_inspect_orig */
static uint16_t server_port, port4;
static char last_reason[64];
static unsigned nevents;

/* Connections the proxy holds open now (its public stats). */
static uint32_t open_conns(void)
{
	struct egr_inspect_stats st;

	assert_int_equal(egr_inspect_stats(ins, &st), 0);
	return st.conns;
}

static void on_event(void *ctx, const struct egr_inspect_event *ev)
{
	if (ev->closed)
		return;
	nevents++;
	snprintf(last_reason, sizeof(last_reason), "%s", ev->reason);
}

static void spin(int ms)
{
	for (int i = 0; i < ms / 10 + 1; i++)
		egr_loop_run_once(loop, 10);
}

static int setup(void **state)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	struct egr_inspect_config cfg = {
		.hello_timeout_ms = 300, .idle_ms = 500, .max_conns_per_sb = 4, .event = on_event,
	};
	struct egr_policy pol;
	struct egr_error e;
	struct egr_dnspolicy *dpol = NULL;
	char text[512];
	uint16_t port6;

	map_fd = bpf_map_create(BPF_MAP_TYPE_LRU_HASH, "t_orig", sizeof(struct egr_inspect_key),
				sizeof(struct egr_inspect_orig), 1024, NULL);
	server_fd = socket(AF_INET, SOCK_STREAM, 0);
	if (map_fd < 0 || server_fd < 0 || bind(server_fd, (struct sockaddr *)&sa, sl) ||
	    listen(server_fd, 16) || getsockname(server_fd, (struct sockaddr *)&sa, &sl)) {
		fprintf(stderr, "test_inspect needs root (BPF map) and loopback\n");
		return -1;
	}
	server_port = ntohs(sa.sin_port);
	kmaps.fd_inspect_orig = map_fd;
	/* No listener reservations or marks here (kernel/listen.h). */
	kmaps.fd_listen_ports = kmaps.fd_listen_sk = -1;
	cfg.bpf = &kmaps;
	snprintf(text, sizeof(text),
		 "{\"tenant\":\"t\",\"network\":{\"default\":\"deny\",\"inspect\":true,"
		 "\"outbound_allow\":[\"tcp/127.0.0.1:%u\"],\"dns_allow\":[\"ok.test\"]}}",
		 server_port);
	if (egr_policy_parse(text, strlen(text), &pol, &e) ||
	    egr_dnspolicy_new(&pol, NULL, 0, &dpol, &e) || egr_loop_new(&loop) ||
	    egr_inspect_new(loop, &cfg, &ins) ||
	    egr_inspect_add_sandbox(ins, SBID, "t", &pol, dpol, -1, 0, 0, &port4, &port6))
		return -1;
	egr_policy_free(&pol);
	return 0;
}

static int teardown(void **state)
{
	egr_inspect_free(ins);
	egr_loop_free(loop);
	close(server_fd);
	close(map_fd);
	return 0;
}

/* A client connected to the proxy, with (publish) or without the entry the
 * kernel would have written for it. */
static int client(bool publish)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				  .sin_port = htons(port4) };
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	if (publish) {
		struct egr_inspect_key k = { .sandbox_id = SBID, .family = AF_INET };
		struct egr_inspect_orig o = { .port = server_port, .family = AF_INET };
		uint32_t lo = htonl(INADDR_LOOPBACK);

		assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
		k.port = ntohs(sa.sin_port);
		memcpy(k.addr, &sa.sin_addr, 4);
		memcpy(o.addr, &lo, 4);
		assert_int_equal(bpf_map_update_elem(map_fd, &k, &o, BPF_ANY), 0);
	}
	return fd;
}

/* What the client reads within ms: >0 bytes, 0 EOF, -ECONNRESET, -EAGAIN. */
static ssize_t client_read(int fd, char *buf, size_t len, int ms)
{
	for (int i = 0; i < ms / 10 + 1; i++) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		ssize_t n;

		egr_loop_run_once(loop, 5);
		if (poll(&pf, 1, 5) == 1) {
			n = recv(fd, buf, len, MSG_DONTWAIT);
			return n < 0 ? -errno : n;
		}
	}
	return -EAGAIN;
}

static int server_accept(void)
{
	for (int i = 0; i < 100; i++) {
		struct pollfd pf = { .fd = server_fd, .events = POLLIN };

		egr_loop_run_once(loop, 5);
		if (poll(&pf, 1, 5) == 1)
			return accept(server_fd, NULL, NULL);
	}
	return -1;
}

static const char HEAD_OK[] = "GET / HTTP/1.1\r\nHost: ok.test\r\n\r\n";

static void test_relay_and_half_close(void **state)
{
	char buf[256];
	int c = client(true), s;
	ssize_t n;

	assert_int_equal(send(c, HEAD_OK, sizeof(HEAD_OK) - 1, 0), (ssize_t)sizeof(HEAD_OK) - 1);
	s = server_accept();
	assert_true(s >= 0);
	spin(50);
	n = recv(s, buf, sizeof(buf), MSG_DONTWAIT);
	assert_int_equal(n, (ssize_t)sizeof(HEAD_OK) - 1);
	assert_memory_equal(buf, HEAD_OK, sizeof(HEAD_OK) - 1);
	/* The client stops sending; the server still answers. */
	assert_int_equal(shutdown(c, SHUT_WR), 0);
	spin(50);
	assert_int_equal(recv(s, buf, sizeof(buf), MSG_DONTWAIT), 0); /* EOF passed on */
	assert_int_equal(send(s, "pong", 4, 0), 4);
	assert_int_equal(client_read(c, buf, sizeof(buf), 500), 4);
	assert_memory_equal(buf, "pong", 4);
	close(s);
	assert_int_equal(client_read(c, buf, sizeof(buf), 500), 0);
	close(c);
	spin(20);
	assert_int_equal(open_conns(), 0);
}

static void test_refusals(void **state)
{
	static const char bad[] = "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n";
	char buf[64];
	int c;

	/* Not redirected by the kernel: no entry. */
	c = client(false);
	assert_int_equal(client_read(c, buf, sizeof(buf), 500), -ECONNRESET);
	assert_string_equal(last_reason, "no_origin");
	close(c);
	/* A name the policy does not have: a 403 that says so, then the end. */
	c = client(true);
	assert_int_equal(send(c, bad, sizeof(bad) - 1, 0), (ssize_t)sizeof(bad) - 1);
	assert_true(client_read(c, buf, sizeof(buf), 500) > 12);
	assert_memory_equal(buf, "HTTP/1.1 403", 12);
	assert_string_equal(last_reason, "name_not_allowed");
	close(c);
	/* The entry is taken once: the same client port cannot be served twice. */
	spin(20);
	assert_int_equal(open_conns(), 0);
}

static void test_hello_deadline(void **state)
{
	char buf[64];
	int c = client(true);

	/* Says nothing: refused at the deadline (300 ms here), not before. */
	assert_int_equal(client_read(c, buf, sizeof(buf), 150), -EAGAIN);
	assert_int_equal(client_read(c, buf, sizeof(buf), 800), -ECONNRESET);
	assert_string_equal(last_reason, "no_data");
	close(c);
	/* Half a request head: hello_timeout. */
	c = client(true);
	assert_int_equal(send(c, "GET / HTTP/1.1\r\nHo", 18, 0), 18);
	assert_int_equal(client_read(c, buf, sizeof(buf), 800), -ECONNRESET);
	assert_string_equal(last_reason, "hello_timeout");
	close(c);
}

static void test_idle_timeout_and_bound(void **state)
{
	char buf[256];
	int c = client(true), s, extra[4];
	ssize_t n;

	assert_int_equal(send(c, HEAD_OK, sizeof(HEAD_OK) - 1, 0), (ssize_t)sizeof(HEAD_OK) - 1);
	s = server_accept();
	assert_true(s >= 0);
	/* Quiet both ways for longer than idle_ms (500): both ends are cut. */
	n = client_read(c, buf, sizeof(buf), 1500);
	assert_true(n == -ECONNRESET || n == 0);
	close(s);
	close(c);
	spin(20);
	/* The per-sandbox bound (4): the fifth is refused at once. */
	for (int i = 0; i < 4; i++)
		extra[i] = client(true);
	spin(50);
	c = client(true);
	assert_int_equal(client_read(c, buf, sizeof(buf), 200), -ECONNRESET);
	assert_string_equal(last_reason, "conn_limit");
	close(c);
	for (int i = 0; i < 4; i++)
		close(extra[i]);
	spin(50);
	assert_int_equal(open_conns(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_relay_and_half_close),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_hello_deadline),
		cmocka_unit_test(test_idle_timeout_and_bound),
	};

	return cmocka_run_group_tests_name("inspect", tests, setup, teardown);
}
