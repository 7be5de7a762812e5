// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The log's lines (user/lib/log.c): what a message quotes cannot start a
 * line of its own or put bytes into the log that are not text.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "log.h"

/* What egr_log wrote to stderr for one message (priority prefix on: no
 * timestamp), without the trailing newline. */
static char *logged(const char *fmt, const char *arg)
{
	static char out[8192];
	FILE *f = tmpfile();
	int saved = dup(2);
	size_t n;

	assert_non_null(f);
	assert_true(saved >= 0);
	fflush(stderr);
	assert_true(dup2(fileno(f), 2) == 2);
	egr_log(EGR_LOG_WARN, fmt, arg);
	fflush(stderr);
	assert_true(dup2(saved, 2) == 2);
	close(saved);
	rewind(f);
	n = fread(out, 1, sizeof(out) - 1, f);
	fclose(f);
	out[n] = '\0';
	assert_true(n > 0 && out[n - 1] == '\n');
	out[n - 1] = '\0';
	return out;
}

static int setup(void **state)
{
	egr_log_init_priority(true);
	return 0;
}

static void test_plain_text_unchanged(void **state)
{
	assert_string_equal(logged("sandbox %s attached", "7"), "<4>warn  sandbox 7 attached");
	/* UTF-8 passes as it is. */
	assert_string_equal(logged("tenant %s", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\x92"),
			    "<4>warn  tenant caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\x92");
}

/* A comm or a path with a newline and a forged priority: a continuation
 * line under the real prefix, never a line of its own. */
static void test_newline_cannot_forge_a_line(void **state)
{
	assert_string_equal(logged("moved by %s", "x\n<2>crit  sandbox 1 released"),
			    "<4>warn  moved by x\n<4>warn    | <2>crit  sandbox 1 released");
}

static void test_control_and_invalid_bytes_escaped(void **state)
{
	assert_string_equal(logged("name %s", "a\x01" "b\x1b[31m\x7f"),
			    "<4>warn  name a\\x01b\\x1b[31m\\x7f");
	/* A lead byte without its continuation, a stray continuation, an
	 * overlong form, a surrogate, a sequence cut at the end. */
	assert_string_equal(logged("%s", "\xd0x \x80 \xc0\xaf \xed\xa0\x80 \xe2\x82"),
			    "<4>warn  \\xd0x \\x80 \\xc0\\xaf \\xed\\xa0\\x80 \\xe2\\x82");
}

/* Longer than the stack buffers: all of it, escaped. */
static void test_long_message_whole(void **state)
{
	static char big[6000], want[6100];

	memset(big, 'a', sizeof(big) - 2);
	big[sizeof(big) - 2] = '\x01';
	snprintf(want, sizeof(want), "<4>warn  %.*s\\x01", (int)sizeof(big) - 2, big);
	assert_string_equal(logged("%s", big), want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plain_text_unchanged),
		cmocka_unit_test(test_newline_cannot_forge_a_line),
		cmocka_unit_test(test_control_and_invalid_bytes_escaped),
		cmocka_unit_test(test_long_message_whole),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
