// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The HTTP/1.x request head reader of the inspecting proxy (user/lib/httphead.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "httphead.h"

static int parse(const char *s, struct egr_http_head *h)
{
	return egr_http_head_parse((const uint8_t *)s, strlen(s), h);
}

static void test_host(void **state)
{
	struct egr_http_head h;
	const char *req = "GET /x?y=1 HTTP/1.1\r\nUser-Agent: curl\r\nHost:  API.Example.com:8080 \r\n"
			  "Accept: */*\r\n\r\nbody";

	assert_int_equal(parse(req, &h), 0);
	assert_string_equal(h.method, "GET");
	assert_string_equal(h.host, "api.example.com");
	assert_int_equal(h.port, 8080);
	assert_int_equal(h.minor, 1);
	assert_int_equal(h.head_len, strlen(req) - 4);
	for (size_t n = 0; n < strlen(req) - 4; n++)
		assert_int_equal(egr_http_head_parse((const uint8_t *)req, n, &h), -EAGAIN);

	assert_int_equal(parse("POST / HTTP/1.0\r\nhost: [::1]:80\r\n\r\n", &h), 0);
	assert_string_equal(h.host, "::1");
	assert_int_equal(h.port, 80);
	assert_int_equal(parse("GET http://a.example/p HTTP/1.0\r\n\r\n", &h), 0);
	assert_string_equal(h.host, "a.example");
	assert_int_equal(parse("GET http://a.example/p HTTP/1.1\r\nHost: a.example\r\n\r\n", &h), 0);
	assert_int_equal(parse("OPTIONS * HTTP/1.1\r\nHost: b.example.\r\n\r\n", &h), 0);
	assert_string_equal(h.host, "b.example");
}

static void test_refused(void **state)
{
	static const char *bad[] = {
		"GET / HTTP/1.1\r\n\r\n",                                    /* no Host */
		"GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n", /* two */
		"GET / HTTP/1.1\r\nHost : a.example\r\n\r\n",                /* space before colon */
		"GET / HTTP/1.1\r\nX: y\r\n Host: a.example\r\n\r\n",        /* folding */
		"GET / HTTP/1.1\nHost: a.example\n\n",                        /* bare LF */
		"GET / HTTP/1.1\r\nHost: a.example\rX\r\n\r\n",
		"GET / HTTP/2.0\r\nHost: a.example\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a exam\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.example:99999\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.example:\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: user@a.example\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: \r\n\r\n",
		"GET http://b.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n", /* disagree */
		"GET http://u@a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
		"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n",
		"GET a.example HTTP/1.1\r\nHost: a.example\r\n\r\n",
		"GET  / HTTP/1.1\r\nHost: a.example\r\n\r\n",
	};
	struct egr_http_head h;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int err = parse(bad[i], &h);

		if (err != -EBADMSG)
			fail_msg("case %zu: %d", i, err);
	}
	{
		/* A NUL in the Host must not end the name early. */
		static const char nul[] = "GET / HTTP/1.1\r\nHost: a.example\0.evil\r\n\r\n";

		assert_int_equal(egr_http_head_parse((const uint8_t *)nul, sizeof(nul) - 1, &h),
				 -EBADMSG);
	}
	assert_int_equal(parse("\x16\x03\x01", &h), -EPROTO);
	assert_int_equal(parse(" GET /", &h), -EPROTO);
	assert_int_equal(parse("SSH-2.0-OpenSSH\r\n", &h), -EPROTO);
}

static void test_bounded(void **state)
{
	static char big[EGR_HTTP_HEAD_MAX + 100];
	struct egr_http_head h;
	size_t n;

	strcpy(big, "GET / HTTP/1.1\r\nX: ");
	n = strlen(big);
	memset(big + n, 'a', sizeof(big) - n - 1);
	/* Never ends within the bound: refused, not "more". */
	assert_int_equal(egr_http_head_parse((uint8_t *)big, sizeof(big) - 1, &h), -EBADMSG);
	assert_int_equal(egr_http_head_parse((uint8_t *)big, 1000, &h), -EAGAIN);
}

/* The body's framing, and framings two parsers could read differently. */
static void test_framing(void **state)
{
	static const char *bad[] = {
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1234567890123456789\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST / HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
	};
	struct egr_http_head h;

	assert_int_equal(parse("GET / HTTP/1.1\r\nHost: a\r\n\r\n", &h), 0);
	assert_int_equal(h.content_length, -1);
	assert_false(h.chunked);
	assert_false(h.upgrade);
	assert_int_equal(parse("POST / HTTP/1.1\r\nHost: a\r\ncontent-length:  007 \r\n\r\n", &h), 0);
	assert_int_equal(h.content_length, 7);
	assert_int_equal(parse("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n", &h), 0);
	assert_true(h.chunked);
	assert_int_equal(h.content_length, -1);
	assert_int_equal(parse("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\n\r\n", &h), 0);
	assert_true(h.upgrade);
	assert_int_equal(parse("GET / HTTP/1.1\r\nHost: a\r\nHTTP2-Settings: AAA\r\n\r\n", &h), 0);
	assert_true(h.upgrade);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int err = parse(bad[i], &h);

		if (err != -EBADMSG)
			fail_msg("framing case %zu: %d", i, err);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_host),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_bounded),
		cmocka_unit_test(test_framing),
	};

	return cmocka_run_group_tests_name("httphead", tests, NULL, NULL);
}
