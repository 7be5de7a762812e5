// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The control socket's "has the peer begun to exit" from /proc/<pid>/stat
 * (control/peer.c): real lines, hostile comms, and text it must refuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>

#include <cmocka.h>

#include "control/peer.h"

#define TAIL " 1 1 1 0 -1 %s 115 0 0 0 0 0 0 0 20 0 1 0 12345 2375680 200 18446744073709551615\n"

static bool judged(const char *comm, char state, const char *flags)
{
	char line[512];

	snprintf(line, sizeof(line), "4242 (%s) %c" TAIL, comm, state, flags);
	return egr_peer_stat_exiting(line);
}

static void test_running_and_exiting(void **st)
{
	(void)st;
	assert_false(judged("egressctl", 'S', "4194560")); /* 0x400100: PF_FORKNOEXEC|PF_RANDOMIZE */
	assert_false(judged("egressctl", 'R', "0"));
	assert_true(judged("egressctl", 'R', "4194564")); /* | PF_EXITING */
	assert_true(judged("egressctl", 'D', "4"));
	assert_true(judged("egressctl", 'Z', "4194560")); /* a zombie, whatever its flags */
	assert_true(judged("egressctl", 'X', "0"));
}

static void test_hostile_comm(void **st)
{
	(void)st;
	/* The comm is the tool's to choose: only the last ')' ends it. */
	assert_false(judged(") Z 1 1 1 0 -1 4 (", 'S', "0"));
	assert_true(judged(") S 1 1 1 0 -1 0 (", 'S', "4"));
	assert_false(judged("a b\nc", 'S', "0"));
}

static void test_unparsable_is_exiting(void **st)
{
	(void)st;
	assert_true(egr_peer_stat_exiting(""));
	assert_true(egr_peer_stat_exiting("4242 (sh)"));
	assert_true(egr_peer_stat_exiting("4242 (sh) "));
	assert_true(egr_peer_stat_exiting("4242 (sh) S 1 1 1 0 -1"));
	assert_true(egr_peer_stat_exiting("4242 (sh) S 1 1 1 0 -1 "));
	assert_true(egr_peer_stat_exiting("4242 (sh) S 1 1 1 0 -1 x4 0"));
	assert_true(egr_peer_stat_exiting("4242 (sh) S 1 1 1 0 -1 -4 0"));
	assert_true(egr_peer_stat_exiting("4242 (sh) S 1 1 1 0 -1 12x 0"));
	assert_false(egr_peer_stat_exiting("4242 (sh) S 1 1 1 0 -1 0"));
}

/* This process's own line, as the kernel writes it: running, not exiting. */
static void test_own_stat(void **st)
{
	char buf[1024];
	size_t n;
	FILE *f = fopen("/proc/self/stat", "re");

	(void)st;
	assert_non_null(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	assert_false(egr_peer_stat_exiting(buf));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_running_and_exiting),
		cmocka_unit_test(test_hostile_comm),
		cmocka_unit_test(test_unparsable_is_exiting),
		cmocka_unit_test(test_own_stat),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
