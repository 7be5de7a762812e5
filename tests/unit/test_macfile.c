// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The ledger files (user/lib/macfile.c) and the audit anchors' parser
 * (user/lib/audit_anchor.c): issue 23, findings 4 and 5. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "audit_anchor.h"
#include "macfile.h"

static const uint8_t key[] = "0123456789abcdef0123456789abcdef";
static const uint8_t other[] = "fedcba9876543210fedcba9876543210";

static char dir[64], path[128];

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/egr-macfile-XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/x.state", dir);
	return 0;
}

static int teardown(void **state)
{
	int fd = open(path, O_RDONLY);

	if (fd >= 0) {
		egr_file_set_append_only(fd, false);
		close(fd);
	}
	unlink(path);
	rmdir(dir);
	return 0;
}

static json_t *state_of(int seq)
{
	return json_pack("{s:i, s:s}", "seq", seq, "hash", "ab");
}

static void test_roundtrip_and_tamper(void **state)
{
	json_t *o = state_of(7), *got = NULL;
	const char *why;
	int aerr;
	FILE *f;

	assert_int_equal(egr_macfile_write(path, o, key, 32, &aerr), 0);
	assert_int_equal(egr_macfile_read(path, key, 32, &got, &why), 0);
	assert_int_equal(json_integer_value(json_object_get(got, "seq")), 7);
	assert_null(json_object_get(got, "mac"));
	json_decref(got);
	/* Another key: refused. */
	assert_int_equal(egr_macfile_read(path, other, 32, &got, &why), -EBADMSG);
	assert_non_null(why);
	json_decref(o);
	/* Updates append; the last line is the state. */
	o = state_of(8);
	assert_int_equal(egr_macfile_write(path, o, key, 32, &aerr), 0);
	assert_int_equal(egr_macfile_read(path, key, 32, &got, &why), 0);
	assert_int_equal(json_integer_value(json_object_get(got, "seq")), 8);
	json_decref(got);
	json_decref(o);
	/* A hand edit (the red team's: the value changed, the MAC kept). */
	{
		int fd = open(path, O_RDONLY);

		if (egr_file_is_append_only(fd) == 1)
			assert_int_equal(egr_file_set_append_only(fd, false), 0);
		close(fd);
	}
	f = fopen(path, "a");
	assert_non_null(f);
	fputs("{\"hash\":\"ab\",\"seq\":9,\"mac\":"
	      "\"0000000000000000000000000000000000000000000000000000000000000000\"}\n", f);
	fclose(f);
	assert_int_equal(egr_macfile_read(path, key, 32, &got, &why), -EBADMSG);
	/* A state without a MAC at all. */
	f = fopen(path, "w");
	fputs("{\"hash\":\"ab\",\"seq\":9}\n", f);
	fclose(f);
	assert_int_equal(egr_macfile_read(path, key, 32, &got, &why), -EBADMSG);
	assert_int_equal(egr_macfile_read("/nonexistent/x", key, 32, &got, &why), -ENOENT);
}

static void test_compaction(void **state)
{
	json_t *o, *got;
	const char *why;
	struct stat st;
	int aerr;

	for (int i = 0; i < 2000; i++) {
		o = state_of(i);
		assert_int_equal(egr_macfile_write(path, o, key, 32, &aerr), 0);
		json_decref(o);
	}
	assert_int_equal(stat(path, &st), 0);
	assert_true(st.st_size < 80 << 10); /* compacted along the way */
	assert_int_equal(egr_macfile_read(path, key, 32, &got, &why), 0);
	assert_int_equal(json_integer_value(json_object_get(got, "seq")), 1999);
	json_decref(got);
}

static void test_append_only(void **state)
{
	json_t *o = state_of(1);
	int aerr, fd;

	assert_int_equal(egr_macfile_write(path, o, key, 32, &aerr), 0);
	json_decref(o);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	if (aerr == -EOPNOTSUPP || geteuid() != 0) {
		close(fd);
		return; /* no flag here (or no CAP_LINUX_IMMUTABLE): nothing to test */
	}
	assert_int_equal(aerr, 0);
	assert_int_equal(egr_file_is_append_only(fd), 1);
	close(fd);
	/* Even root cannot truncate it while the flag is set. */
	assert_int_equal(truncate(path, 0), -1);
	assert_int_equal(errno, EPERM);
}

static void test_reject_bad_input(void **state)
{
	json_t *o = json_object(), *got;
	const char *why;

	assert_int_equal(egr_macfile_write(path, o, key, 32, NULL), -EINVAL); /* empty */
	json_object_set_new(o, "mac", json_string("x"));
	assert_int_equal(egr_macfile_write(path, o, key, 32, NULL), -EINVAL);
	json_decref(o);
	assert_int_equal(egr_macfile_parse("{}", 2, key, 32, &got, &why), -EBADMSG);
	assert_int_equal(egr_macfile_parse("", 0, key, 32, &got, &why), -EBADMSG);
}

static void test_anchor_parse(void **state)
{
	struct egr_audit_anchor_rec r;
	const char h[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	char line[512];

	snprintf(line, sizeof(line), "2026-12-02T17:00:00Z egressd audit anchor: seq=42 hash=%s "
				     "event=every log=/var/lib/egressd/audit.log", h);
	assert_int_equal(egr_audit_anchor_parse(line, strlen(line), &r), 1);
	assert_int_equal(r.seq, 42);
	assert_string_equal(r.hash, h);
	/* As syslog writes it. */
	snprintf(line, sizeof(line), "Dec  2 17:00:00 host egressd[12]: egressd audit anchor: "
				     "seq=0 hash=%s event=start log=-", h);
	assert_int_equal(egr_audit_anchor_parse(line, strlen(line), &r), 1);
	assert_int_equal(r.seq, 0);
	/* Not anchors. */
	assert_int_equal(egr_audit_anchor_parse("egressd: hello", 14, &r), 0);
	snprintf(line, sizeof(line), "egressd audit anchor: seq= hash=%s", h);
	assert_int_equal(egr_audit_anchor_parse(line, strlen(line), &r), 0);
	snprintf(line, sizeof(line), "egressd audit anchor: seq=1 hash=%.63s", h);
	assert_int_equal(egr_audit_anchor_parse(line, strlen(line), &r), 0);
	snprintf(line, sizeof(line), "egressd audit anchor: seq=99999999999999999999 hash=%s", h);
	assert_int_equal(egr_audit_anchor_parse(line, strlen(line), &r), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_roundtrip_and_tamper, setup, teardown),
		cmocka_unit_test_setup_teardown(test_compaction, setup, teardown),
		cmocka_unit_test_setup_teardown(test_append_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reject_bad_input, setup, teardown),
		cmocka_unit_test(test_anchor_parse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
