// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The control protocol's framing and request check (user/lib/proto.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "proto.h"

/* Feed text through a pipe into egr_proto_read. */
static int read_text(const char *text, size_t max, json_t **out)
{
	char msg[128];
	int fds[2], err;

	assert_int_equal(pipe(fds), 0);
	assert_int_equal(write(fds[1], text, strlen(text)), (ssize_t)strlen(text));
	close(fds[1]);
	*out = NULL;
	err = egr_proto_read(fds[0], max, out, msg, sizeof(msg));
	close(fds[0]);
	return err;
}

static void test_framing(void **state)
{
	json_t *o;

	assert_int_equal(read_text("{\"op\":\"ping\"}\n", 1024, &o), 0);
	assert_string_equal(json_string_value(json_object_get(o, "op")), "ping");
	json_decref(o);
	/* No newline before EOF: the request never ended. */
	assert_int_equal(read_text("{\"op\":\"ping\"}", 1024, &o), -ECONNRESET);
	assert_int_equal(read_text("[1,2]\n", 1024, &o), -EBADMSG);
	assert_int_equal(read_text("{\"op\":\n", 1024, &o), -EBADMSG);
	assert_int_equal(read_text("{\"op\":\"a\",\"op\":\"b\"}\n", 1024, &o), -EBADMSG);
	/* Over the limit, with or without a newline in sight. */
	assert_int_equal(read_text("{\"op\":\"ping\",\"pad\":\"xxxxxxxxxxxxxxxxxxxxxxxx\"}\n", 16, &o),
			 -E2BIG);
}

static void check(const char *text, int want, const char *field)
{
	struct egr_proto_error e = { { 0 }, { 0 } };
	json_t *o = json_loads(text, 0, NULL);

	assert_non_null(o);
	assert_int_equal(egr_proto_check_request(o, &e), want);
	if (field)
		assert_string_equal(e.field, field);
	json_decref(o);
}

static void test_check_request(void **state)
{
	check("{\"op\":\"ping\"}", 0, NULL);
	check("{\"op\":\"attach\",\"cgroup\":\"/x\",\"policy\":{},\"netns\":\"/n\"}", 0, NULL);
	check("{\"op\":\"detach\",\"id\":1,\"status\":\"exited:0\"}", 0, NULL);
	check("{\"op\":\"events\",\"follow\":true,\"sandbox\":2,\"limit\":3}", 0, NULL);
	check("{\"op\":\"release\",\"id\":4}", 0, NULL);
	check("{\"op\":\"release\",\"cgroup\":\"/x\"}", 0, NULL);
	check("{\"op\":\"release\",\"id\":4,\"policy\":{}}", -EINVAL, "policy");
	check("{}", -EINVAL, "op");
	check("{\"op\":7}", -EINVAL, "op");
	check("{\"op\":\"frob\"}", -EINVAL, "op");
	check("{\"op\":\"list\",\"verbose\":true}", -EINVAL, "verbose");
	check("{\"op\":\"attach\",\"cgroup\":\"/x\",\"policy\":{},\"id\":3}", -EINVAL, "id");
	/* Found by fuzz_control: an empty key was refused with an empty field. */
	check("{\"op\":\"list\",\"\":\"list\",\"extextra\":true}", -EINVAL, "\"\"");
}

/* The op table: every op once, by name and by value, and the request check
 * says which op a request is. */
static void test_op_table(void **state)
{
	struct egr_proto_error e;
	enum egr_op op;
	json_t *o;

	(void)state;
	for (int i = 0; i < EGR_OP_COUNT; i++) {
		const struct egr_op_desc *d = egr_op_desc((enum egr_op)i);

		assert_non_null(d);
		assert_int_equal(d->op, i);
		assert_ptr_equal(egr_op_lookup(d->name), d);
		for (int j = 0; j < i; j++)
			assert_string_not_equal(egr_op_desc((enum egr_op)j)->name, d->name);
		o = egr_proto_request((enum egr_op)i);
		assert_non_null(o);
		op = EGR_OP_COUNT;
		assert_int_equal(egr_proto_check_op(o, &op, &e), 0);
		assert_int_equal(op, i);
		json_decref(o);
	}
	assert_null(egr_op_desc(EGR_OP_COUNT));
	assert_null(egr_op_desc((enum egr_op)-1));
	assert_null(egr_proto_request(EGR_OP_COUNT));
	assert_null(egr_op_lookup("frob"));
	assert_null(egr_op_lookup(NULL));
	assert_null(egr_op_lookup("PING"));
	/* The wire names docs/control-protocol.md lists. */
	assert_string_equal(egr_op_desc(EGR_OP_ATTACH)->name, "attach");
	assert_string_equal(egr_op_desc(EGR_OP_EVENTS)->name, "events");
	/* Only events may keep its connection. */
	for (int i = 0; i < EGR_OP_COUNT; i++)
		assert_int_equal(!!(egr_op_desc((enum egr_op)i)->flags & EGR_OPF_STREAMS),
				 i == EGR_OP_EVENTS);
}

/* Error codes: the wire strings are the protocol and never change. */
static void test_err_codes(void **state)
{
	static const char *const wire[] = { "bad_request", "too_large", "invalid_policy",
					    "not_found", "not_quarantined", "exists",
					    "bad_cgroup", "no_space", "forbidden",
					    "too_many", "unavailable", "internal" };

	(void)state;
	assert_int_equal(sizeof(wire) / sizeof(wire[0]), EGR_ERR_INTERNAL);
	for (size_t i = 0; i < sizeof(wire) / sizeof(wire[0]); i++) {
		enum egr_err e = egr_err_parse(wire[i]);

		assert_int_equal(e, (int)i + 1);
		assert_string_equal(egr_err_code(e), wire[i]);
	}
	assert_int_equal(egr_err_parse(NULL), EGR_ERR_NONE);
	assert_int_equal(egr_err_parse(""), EGR_ERR_NONE);
	assert_string_equal(egr_err_code(EGR_ERR_NONE), "");
	/* A newer egressd's code, and our own "unknown", parse as unknown. */
	assert_int_equal(egr_err_parse("quota_exceeded"), EGR_ERR_UNKNOWN);
	assert_int_equal(egr_err_parse("unknown"), EGR_ERR_UNKNOWN);
	assert_int_equal(egr_err_parse("Internal"), EGR_ERR_UNKNOWN);
	/* Out of range never reads past the table. */
	assert_string_equal(egr_err_code(EGR_ERR_COUNT), "internal");
	assert_string_equal(egr_err_code((enum egr_err)-1), "internal");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_framing),
		cmocka_unit_test(test_check_request),
		cmocka_unit_test(test_op_table),
		cmocka_unit_test(test_err_codes),
	};

	return cmocka_run_group_tests_name("proto", tests, NULL, NULL);
}
