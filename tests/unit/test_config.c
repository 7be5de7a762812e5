// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The --config file (user/egressd/config.c): a JSON object turned into
 * "--key=value" arguments, or an error naming the key, with nothing kept.
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

#include <errno.h>
#include <getopt.h>

#include "config.h"

static const struct option opts[] = {
	{ "socket", required_argument, NULL, 1 },
	{ "dns-upstream", required_argument, NULL, 2 },
	{ "dns-max-entropy", required_argument, NULL, 3 },
	{ "no-syslog", no_argument, NULL, 4 },
	{ "config", required_argument, NULL, 5 },
	{ NULL, 0, NULL, 0 },
};
static const char *const forbidden[] = { "config", NULL };
static const char *const repeatable[] = { "dns-upstream", NULL };

static char path[64];

/* Load doc; 0 or -errno, with err filled on error. */
static int load(const char *doc, struct egr_config_args *a, char *err, size_t len)
{
	FILE *f;

	snprintf(path, sizeof(path), "/tmp/egr-test-config-%d.json", (int)getpid());
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(doc, f);
	fclose(f);
	err[0] = '\0';
	int ret = egr_config_load(path, opts, forbidden, repeatable, a, err, len);
	unlink(path);
	return ret;
}

static void test_values_become_arguments(void **state)
{
	struct egr_config_args a;
	char err[256];

	assert_int_equal(load("{\"socket\": \"/run/x.sock\", \"dns-upstream\": [\"1.2.3.4\", "
			      "\"[::1]:53\"], \"dns-max-entropy\": 3.5, \"no-syslog\": true}",
			      &a, err, sizeof(err)), 0);
	assert_int_equal(a.argc, 5);
	assert_string_equal(a.argv[0], "--socket=/run/x.sock");
	assert_string_equal(a.argv[1], "--dns-upstream=1.2.3.4");
	assert_string_equal(a.argv[2], "--dns-upstream=[::1]:53");
	assert_string_equal(a.argv[3], "--dns-max-entropy=3.5");
	assert_string_equal(a.argv[4], "--no-syslog");
	egr_config_args_free(&a);

	/* false: the flag is not given; integers print as integers. */
	assert_int_equal(load("{\"no-syslog\": false, \"socket\": 42}", &a, err, sizeof(err)), 0);
	assert_int_equal(a.argc, 1);
	assert_string_equal(a.argv[0], "--socket=42");
	egr_config_args_free(&a);

	assert_int_equal(load("{}", &a, err, sizeof(err)), 0);
	assert_int_equal(a.argc, 0);
	egr_config_args_free(&a);
}

static void test_errors_name_the_key(void **state)
{
	static const struct {
		const char *doc, *want;
	} bad[] = {
		{ "{\"sockett\": \"x\"}", "unknown key \"sockett\"" },
		{ "{\"config\": \"x\"}", "command-line only key \"config\"" },
		{ "{\"no-syslog\": \"yes\"}", "key \"no-syslog\": expected true or false" },
		{ "{\"socket\": [\"a\"]}", "key \"socket\": expected a string or a number" },
		{ "{\"socket\": {\"a\": 1}}", "key \"socket\": expected a string or a number" },
		{ "{\"socket\": null}", "key \"socket\"" },
		{ "{\"socket\": true}", "key \"socket\"" },
		{ "{\"dns-upstream\": [\"a\", 1, null]}", "key \"dns-upstream\"[2]" },
		{ "{\"dns-upstream\": {}}", "or an array of them" },
		{ "{\"socket\": \"a\", \"socket\": \"b\"}", "duplicate" },
		{ "[\"socket\"]", "expected a JSON object" },
		{ "{\"socket\": ", "line 1" },
	};
	struct egr_config_args a;
	char err[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		a.argc = 99;
		assert_int_equal(load(bad[i].doc, &a, err, sizeof(err)), -EINVAL);
		if (!strstr(err, bad[i].want) || !strstr(err, path))
			fail_msg("%s: want \"%s\" and the path in \"%s\"", bad[i].doc, bad[i].want,
				 err);
		/* Nothing half-applied: no arguments come back. */
		assert_int_equal(a.argc, 0);
		assert_null(a.argv);
	}
}

static void test_missing_file(void **state)
{
	struct egr_config_args a;
	char err[256];

	assert_int_equal(egr_config_load("/nonexistent/egressd.json", opts, forbidden, repeatable,
					 &a, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "/nonexistent/egressd.json"));
	assert_int_equal(a.argc, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_values_become_arguments),
		cmocka_unit_test(test_errors_name_the_key),
		cmocka_unit_test(test_missing_file),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
