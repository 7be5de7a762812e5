// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Request framing on an HTTP/1.x connection (user/lib/httpframe.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "httpframe.h"

/* Feed s in pieces of step bytes as a relay would: the hosts of the heads
 * found, space-separated, into hosts; 0 or the framer's error. */
static int walk(const char *s, size_t step, char *hosts, size_t hsz)
{
	struct egr_http_framer f = { 0 };
	size_t len = strlen(s), have = 0, done = 0;

	hosts[0] = '\0';
	while (done < len) {
		struct egr_http_head h;
		size_t pass;
		int r;

		if (have < len)
			have = have + step < len ? have + step : len;
		r = egr_http_framer_next(&f, (const uint8_t *)s + done, have - done, &pass, &h);
		if (r < 0)
			return r;
		if (r == 1) {
			strncat(hosts, h.host, hsz - strlen(hosts) - 2);
			strcat(hosts, " ");
			egr_http_framer_body(&f, &h);
			done += h.head_len;
			continue;
		}
		done += pass;
		if (!pass && have == len)
			return -EAGAIN; /* stuck: a partial head at the end */
	}
	return 0;
}

static void test_requests_found(void **state)
{
	static const char *s =
		"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"
		"POST /x HTTP/1.1\r\nHost: b.example\r\nContent-Length: 12\r\n\r\n"
		"GET / HTTP/1.1" /* body bytes that look like a request */
		"POST /y HTTP/1.1\r\nHost: c.example\r\nTransfer-Encoding: chunked\r\n\r\n"
		"5;name=\"v\"\r\nHost:\r\n10\r\n0123456789abcdef\r\n0\r\nX-Trailer: 1\r\n\r\n"
		"GET / HTTP/1.0\r\nHost: d.example\r\n\r\n";
	char hosts[256];

	for (size_t step = 1; step <= strlen(s); step = step * 2 + 1) {
		assert_int_equal(walk(s, step, hosts, sizeof(hosts)), 0);
		assert_string_equal(hosts, "a.example b.example c.example d.example ");
	}
}

static void test_unframeable(void **state)
{
	static const char *bad[] = {
		/* a smuggled head behind Content-Length: 0 is a head; these are not */
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nx\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n 5\r\nhello\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
		"1000000000000000\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;a\x01\r\nhello\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nbad trailer\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET / HTTP/1.1\n",
		"GET / HTTP/1.1\r\nHost: a\r\n\r\nSSH-2.0-x\r\n",
	};
	char hosts[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int err = walk(bad[i], strlen(bad[i]), hosts, sizeof(hosts));

		if (err != -EBADMSG && err != -EPROTO)
			fail_msg("case %zu: %d", i, err);
	}
}

static void test_opaque_skip(void **state)
{
	static const char *s = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n";
	struct egr_http_framer f = { 0 };
	struct egr_http_head h;
	size_t pass;

	assert_int_equal(egr_http_framer_next(&f, (const uint8_t *)s, strlen(s), &pass, &h), 1);
	egr_http_framer_body(&f, &h);
	assert_int_equal(egr_http_framer_opaque(&f), 10);
	egr_http_framer_skip(&f, 4);
	assert_int_equal(egr_http_framer_opaque(&f), 6);
	egr_http_framer_skip(&f, 100); /* never past the body */
	assert_int_equal(egr_http_framer_opaque(&f), 0);
	assert_int_equal(f.state, EGR_HF_HEAD);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_requests_found),
		cmocka_unit_test(test_unframeable),
		cmocka_unit_test(test_opaque_skip),
	};

	return cmocka_run_group_tests_name("httpframe", tests, NULL, NULL);
}
