// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Hash-chained audit log: user/lib/audit.c. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <zlib.h>

#include "audit.h"

#define MAXL 256

struct fx {
	char dir[64];
	char log[128];
	char state[128];
};

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(p);
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	strcpy(f->dir, "/tmp/egr-audit-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->log, sizeof(f->log), "%s/audit.log", f->dir);
	snprintf(f->state, sizeof(f->state), "%s/audit.state", f->dir);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	nftw(f->dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

/* --- helpers ----------------------------------------------------------------- */

static json_t *exec_record(int i)
{
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:[{s:s, s:i, s:i}],"
			      " s:{s:i, s:i}, s:s, s:s, s:s}",
			      "type", "execution", "execution_id", "exec_placeholder",
			      "tenant", "acme", "principal", "agent:order-assistant",
			      "tool", "http.request", "version", "1.2.0",
			      "policy_sha256", "ab12", "egress", "dest", "api.example.com:443",
			      "bytes_out", 100 * i, "bytes_in", 1000 * i,
			      "verdicts", "allowed", i, "denied", 1,
			      "status", "ok", "start", "2024-01-01T00:00:00.000Z",
			      "end", "2024-01-01T00:00:01.000Z");
	char id[32];

	assert_non_null(o);
	snprintf(id, sizeof(id), "exec_%d", i);
	json_object_set_new(o, "execution_id", json_string(id));
	return o;
}

static void write_n(struct fx *f, const uint8_t *key, size_t keylen, size_t rot, int from,
		    int n)
{
	struct egr_audit *a;

	assert_int_equal(egr_audit_open(&a, f->log, f->state, key, keylen, rot), 0);
	for (int i = from; i < from + n; i++) {
		json_t *o = exec_record(i);

		assert_int_equal(egr_audit_append(a, o), 0);
		json_decref(o);
	}
	assert_int_equal(egr_audit_failures(a), 0);
	egr_audit_close(a);
}

/* Lines of a plain or gzip file, each with its '\n'. */
static size_t read_lines(const char *file, char *lines[MAXL])
{
	gzFile gz = gzopen(file, "rb");
	char buf[65536];
	size_t n = 0;

	assert_non_null(gz);
	while (gzgets(gz, buf, sizeof(buf))) {
		assert_true(n < MAXL);
		lines[n++] = strdup(buf);
	}
	gzclose(gz);
	return n;
}

static void write_lines(const char *file, char *lines[], size_t n, bool gz)
{
	if (gz) {
		gzFile g = gzopen(file, "wb");

		assert_non_null(g);
		for (size_t i = 0; i < n; i++)
			assert_int_equal(gzputs(g, lines[i]), (int)strlen(lines[i]));
		assert_int_equal(gzclose(g), Z_OK);
	} else {
		FILE *fp = fopen(file, "w");

		assert_non_null(fp);
		for (size_t i = 0; i < n; i++)
			fputs(lines[i], fp);
		assert_int_equal(fclose(fp), 0);
	}
}

static void free_lines(char *lines[], size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(lines[i]);
}

/* Replace the first @from in @line with @to (same function as sed s///). */
static char *subst(char *line, const char *from, const char *to)
{
	char *p = strstr(line, from), *out;

	assert_non_null(p);
	assert_true(asprintf(&out, "%.*s%s%s", (int)(p - line), line, to, p + strlen(from)) > 0);
	free(line);
	return out;
}

static int verify(struct fx *f, const uint8_t *key, size_t keylen, bool with_state,
		  struct egr_audit_verify_result *res)
{
	char **files;
	size_t n;
	int ret;

	assert_int_equal(egr_audit_list_files(f->log, &files, &n), 0);
	ret = egr_audit_verify((const char *const *)files, n, key, keylen,
			       with_state ? f->state : NULL, res);
	if (ret)
		print_message("verify: %s:%zu: %s\n", res->file, res->line, res->message);
	egr_audit_free_files(files, n);
	return ret;
}

static void expect_fail(struct egr_audit_verify_result *res, int ret, const char *file,
			size_t line, const char *msg)
{
	assert_int_equal(ret, -EBADMSG);
	assert_false(res->ok);
	assert_string_equal(res->file, file);
	assert_int_equal(res->line, line);
	if (!strstr(res->message, msg))
		fail_msg("message \"%s\" lacks \"%s\"", res->message, msg);
}

/* --- tests ------------------------------------------------------------------- */

static void test_clean_plain(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	char *lines[MAXL];
	size_t n;

	write_n(f, NULL, 0, 0, 1, 5);
	assert_int_equal(verify(f, NULL, 0, true, &res), 0);
	assert_true(res.ok);
	assert_int_equal(res.records, 5);
	assert_int_equal(res.gaps, 0);
	assert_int_equal(res.last_seq, 5);

	n = read_lines(f->log, lines);
	assert_int_equal(n, 5);
	assert_non_null(strstr(lines[0], "\"prev\":\"0000000000000000000000000000000000000000"
					 "000000000000000000000000\""));
	assert_non_null(strstr(lines[0], "\"seq\":1,"));
	assert_non_null(strstr(lines[0], "\"alg\":\"sha256\""));
	assert_non_null(strstr(lines[4], "\"execution_id\":\"exec_5\""));
	/* "hash" is the last member, then a newline. */
	assert_int_equal(strlen(lines[4]) > 76, 1);
	assert_memory_equal(lines[4] + strlen(lines[4]) - 76, ",\"hash\":\"", 9);
	assert_non_null(strstr(lines[4], res.last_hash));
	free_lines(lines, n);
}

static void test_clean_hmac(void **state)
{
	static const uint8_t key[] = "correct horse battery staple";
	static const uint8_t bad[] = "correct horse battery stapler";
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	int ret;

	write_n(f, key, sizeof(key) - 1, 0, 1, 4);
	assert_int_equal(verify(f, key, sizeof(key) - 1, true, &res), 0);
	assert_int_equal(res.records, 4);

	ret = verify(f, bad, sizeof(bad) - 1, true, &res);
	expect_fail(&res, ret, f->log, 1, "hash mismatch");
	ret = verify(f, NULL, 0, true, &res);
	expect_fail(&res, ret, f->log, 1, "HMAC-keyed");
}

static void test_hmac_key_required_for_unkeyed(void **state)
{
	static const uint8_t key[] = "k";
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	int ret;

	/* An attacker who rewrites a keyed log as plain SHA-256 is caught. */
	write_n(f, NULL, 0, 0, 1, 2);
	ret = verify(f, key, 1, false, &res);
	expect_fail(&res, ret, f->log, 1, "not HMAC-keyed");
}

static void test_edit_field(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	char *lines[MAXL];
	size_t n;
	int ret;

	write_n(f, NULL, 0, 0, 1, 5);
	n = read_lines(f->log, lines);
	lines[2] = subst(lines[2], "\"bytes_out\":300", "\"bytes_out\":3");
	write_lines(f->log, lines, n, false);
	free_lines(lines, n);
	ret = verify(f, NULL, 0, true, &res);
	expect_fail(&res, ret, f->log, 3, "hash mismatch (record edited)");
	assert_int_equal(res.records, 2);
}

static void test_edit_whitespace(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	char *lines[MAXL];
	size_t n;
	int ret;

	/* Same JSON value, different bytes: still an edit. */
	write_n(f, NULL, 0, 0, 1, 3);
	n = read_lines(f->log, lines);
	lines[1] = subst(lines[1], "\"tenant\":", "\"tenant\": ");
	write_lines(f->log, lines, n, false);
	free_lines(lines, n);
	ret = verify(f, NULL, 0, true, &res);
	expect_fail(&res, ret, f->log, 2, "hash mismatch");
}

/* Recompute an unkeyed record's hash after editing it, as an attacker would. */
static char *rehash(char *line)
{
	size_t len = strlen(line) - 1;	/* without '\n' */
	unsigned char md[32];
	unsigned int mdlen;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	char *out;

	assert_non_null(ctx);
	assert_true(EVP_DigestInit_ex(ctx, EVP_sha256(), NULL));
	assert_true(EVP_DigestUpdate(ctx, line, len - 75));
	assert_true(EVP_DigestUpdate(ctx, "}", 1));
	assert_true(EVP_DigestFinal_ex(ctx, md, &mdlen));
	EVP_MD_CTX_free(ctx);
	out = malloc(len + 2);
	assert_non_null(out);
	memcpy(out, line, len - 75 + 9);
	for (int i = 0; i < 32; i++)
		sprintf(out + len - 75 + 9 + 2 * i, "%02x", md[i]);
	strcpy(out + len - 2, "\"}\n");
	free(line);
	return out;
}

static void test_edit_and_rehash(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	char *lines[MAXL];
	size_t n;
	int ret;

	write_n(f, NULL, 0, 0, 1, 5);
	n = read_lines(f->log, lines);
	lines[2] = rehash(subst(lines[2], "\"status\":\"ok\"", "\"status\":\"no\""));
	write_lines(f->log, lines, n, false);
	free_lines(lines, n);
	ret = verify(f, NULL, 0, true, &res);
	expect_fail(&res, ret, f->log, 4, "prev does not match previous record");
}

static void test_delete_record(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	char *lines[MAXL];
	size_t n;
	int ret;

	write_n(f, NULL, 0, 0, 1, 5);
	n = read_lines(f->log, lines);
	free(lines[2]);
	memmove(&lines[2], &lines[3], (n - 3) * sizeof(lines[0]));
	n--;
	write_lines(f->log, lines, n, false);
	free_lines(lines, n);
	ret = verify(f, NULL, 0, true, &res);
	expect_fail(&res, ret, f->log, 3, "seq jumps from 2 to 4");
}

static void test_insert_copy(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	char *lines[MAXL];
	size_t n;
	int ret;

	write_n(f, NULL, 0, 0, 1, 5);
	n = read_lines(f->log, lines);
	memmove(&lines[5], &lines[4], sizeof(lines[0]));
	lines[4] = strdup(lines[1]);
	n++;
	write_lines(f->log, lines, n, false);
	free_lines(lines, n);
	ret = verify(f, NULL, 0, true, &res);
	expect_fail(&res, ret, f->log, 5, "seq goes back from 4 to 2");

	/* A duplicate right after its original. */
	n = read_lines(f->log, lines);
	free(lines[4]);
	lines[4] = strdup(lines[3]);
	write_lines(f->log, lines, n, false);
	free_lines(lines, n);
	ret = verify(f, NULL, 0, true, &res);
	expect_fail(&res, ret, f->log, 5, "duplicate seq 4");
}

static void test_swap_records(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	char *lines[MAXL], *t;
	size_t n;
	int ret;

	write_n(f, NULL, 0, 0, 1, 5);
	n = read_lines(f->log, lines);
	t = lines[1];
	lines[1] = lines[2];
	lines[2] = t;
	write_lines(f->log, lines, n, false);
	free_lines(lines, n);
	ret = verify(f, NULL, 0, true, &res);
	expect_fail(&res, ret, f->log, 2, "seq jumps from 1 to 3");
}

static void test_not_json(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	char *lines[MAXL];
	size_t n;
	int ret;

	write_n(f, NULL, 0, 0, 1, 3);
	n = read_lines(f->log, lines);
	free(lines[1]);
	lines[1] = strdup("garbage\n");
	write_lines(f->log, lines, n, false);
	free_lines(lines, n);
	ret = verify(f, NULL, 0, true, &res);
	expect_fail(&res, ret, f->log, 2, "not JSON");
}

static void test_truncate_tail(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	char *lines[MAXL];
	size_t n;
	int ret;

	write_n(f, NULL, 0, 0, 1, 5);
	n = read_lines(f->log, lines);
	write_lines(f->log, lines, 3, false);
	free_lines(lines, n);
	/* Without the state, a clean truncation is undetectable... */
	assert_int_equal(verify(f, NULL, 0, false, &res), 0);
	assert_int_equal(res.records, 3);
	/* ...with it, it is. */
	ret = verify(f, NULL, 0, true, &res);
	expect_fail(&res, ret, f->log, 4, "log ends at seq 3 but state says 5 (truncated)");

	/* The whole log emptied. */
	write_lines(f->log, lines, 0, false);
	ret = verify(f, NULL, 0, true, &res);
	expect_fail(&res, ret, f->log, 1, "log ends at seq 0 but state says 5");
}

static void test_torn_write_repaired(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	struct egr_audit *a;
	char *lines[MAXL];
	size_t n;
	int ret, fd;
	const char torn[] = "{\"alg\":\"sha256\",\"egress\":[{\"bytes_in\":4";

	write_n(f, NULL, 0, 0, 1, 3);
	fd = open(f->log, O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, torn, sizeof(torn) - 1), (ssize_t)sizeof(torn) - 1);
	close(fd);
	ret = verify(f, NULL, 0, true, &res);
	expect_fail(&res, ret, f->log, 4, "incomplete last line");

	assert_int_equal(egr_audit_open(&a, f->log, f->state, NULL, 0, 0), 0);
	assert_int_equal(egr_audit_seq(a), 4);	/* the gap record */
	egr_audit_close(a);

	assert_int_equal(verify(f, NULL, 0, true, &res), 0);
	assert_int_equal(res.records, 4);
	assert_int_equal(res.gaps, 1);
	n = read_lines(f->log, lines);
	assert_int_equal(n, 4);
	assert_non_null(strstr(lines[3], "\"type\":\"audit_gap\""));
	assert_non_null(strstr(lines[3], "torn write recovered"));
	assert_non_null(strstr(lines[3], "\"lost\":1"));
	free_lines(lines, n);
}

static void test_truncation_recorded_on_reopen(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	struct egr_audit *a;
	char *lines[MAXL];
	size_t n;
	int ret;

	write_n(f, NULL, 0, 0, 1, 5);
	n = read_lines(f->log, lines);
	write_lines(f->log, lines, 3, false);
	free_lines(lines, n);

	assert_int_equal(egr_audit_open(&a, f->log, f->state, NULL, 0, 0), 0);
	assert_int_equal(egr_audit_seq(a), 6);	/* continues the state's chain */
	egr_audit_close(a);

	n = read_lines(f->log, lines);
	assert_int_equal(n, 4);
	assert_non_null(strstr(lines[3], "log ends at seq 3 but state says 5 (truncated)"));
	assert_non_null(strstr(lines[3], "\"lost\":2"));
	free_lines(lines, n);
	/* The break stays visible, and names the gap record's reason. */
	ret = verify(f, NULL, 0, true, &res);
	expect_fail(&res, ret, f->log, 4, "seq jumps from 3 to 6");
	assert_non_null(strstr(res.message, "audit_gap"));
}

static void test_state_missing_on_reopen(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;

	write_n(f, NULL, 0, 0, 1, 3);
	assert_int_equal(unlink(f->state), 0);
	write_n(f, NULL, 0, 0, 4, 1);
	assert_int_equal(verify(f, NULL, 0, true, &res), 0);
	assert_int_equal(res.records, 5);	/* 3 + "state file missing" + 1 */
	assert_int_equal(res.gaps, 1);
}

static void test_reopen_continues(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	struct egr_audit *a;

	write_n(f, NULL, 0, 0, 1, 3);
	assert_int_equal(egr_audit_open(&a, f->log, f->state, NULL, 0, 0), 0);
	assert_int_equal(egr_audit_seq(a), 3);
	egr_audit_close(a);
	write_n(f, NULL, 0, 0, 4, 2);
	assert_int_equal(verify(f, NULL, 0, true, &res), 0);
	assert_int_equal(res.records, 5);
	assert_int_equal(res.gaps, 0);
	assert_int_equal(res.last_seq, 5);
}

static void test_gap_record(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	struct egr_audit *a;
	char *lines[MAXL];
	size_t n;

	assert_int_equal(egr_audit_open(&a, f->log, f->state, NULL, 0, 0), 0);
	assert_int_equal(egr_audit_record_gap(a, "ring buffer overflow", 17), 0);
	egr_audit_close(a);
	assert_int_equal(verify(f, NULL, 0, true, &res), 0);
	assert_int_equal(res.gaps, 1);
	n = read_lines(f->log, lines);
	assert_non_null(strstr(lines[0], "\"lost\":17"));
	assert_non_null(strstr(lines[0], "\"reason\":\"ring buffer overflow\""));
	free_lines(lines, n);
}

static void test_writer_fields_win(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	struct egr_audit *a;
	json_t *o = json_pack("{s:s, s:i, s:s, s:s}", "type", "policy_change", "seq", 99,
			      "hash", "x", "prev", "y");

	assert_int_equal(egr_audit_open(&a, f->log, f->state, NULL, 0, 0), 0);
	assert_int_equal(egr_audit_append(a, o), 0);
	assert_int_equal(egr_audit_seq(a), 1);
	/* The caller's object is untouched. */
	assert_int_equal(json_integer_value(json_object_get(o, "seq")), 99);
	assert_int_equal(json_object_size(o), 4);
	json_decref(o);
	/* Not an object. */
	o = json_integer(1);
	assert_int_equal(egr_audit_append(a, o), -EINVAL);
	json_decref(o);
	egr_audit_close(a);
	assert_int_equal(verify(f, NULL, 0, true, &res), 0);
	assert_int_equal(res.records, 1);
}

static size_t count_suffix(struct fx *f, const char *suffix)
{
	char **files;
	size_t n, c = 0, sl = strlen(suffix);

	assert_int_equal(egr_audit_list_files(f->log, &files, &n), 0);
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(files[i]);

		if (l >= sl && !strcmp(files[i] + l - sl, suffix))
			c++;
	}
	egr_audit_free_files(files, n);
	return c;
}

static void test_rotation(void **state)
{
	static const uint8_t key[] = "rotation-key";
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	char **files, name[160];
	size_t n;
	struct stat st;

	write_n(f, key, sizeof(key) - 1, 2000, 1, 50);
	assert_int_equal(egr_audit_list_files(f->log, &files, &n), 0);
	assert_true(n >= 5);
	for (size_t i = 0; i + 1 < n; i++) {
		snprintf(name, sizeof(name), "%s.%zu.gz", f->log, i + 1);
		assert_string_equal(files[i], name);
	}
	assert_string_equal(files[n - 1], f->log);
	egr_audit_free_files(files, n);
	/* No uncompressed or temporary rotated files left. */
	snprintf(name, sizeof(name), "%s.1", f->log);
	assert_int_equal(stat(name, &st), -1);
	snprintf(name, sizeof(name), "%s.1.gz.tmp", f->log);
	assert_int_equal(stat(name, &st), -1);
	assert_int_equal(stat(f->log, &st), 0);
	assert_true(st.st_size <= 2000);

	assert_int_equal(verify(f, key, sizeof(key) - 1, true, &res), 0);
	assert_int_equal(res.records, 50);

	/* Reopening continues the chain across files; rotation numbering goes on. */
	n = count_suffix(f, ".gz");
	write_n(f, key, sizeof(key) - 1, 2000, 51, 30);
	assert_true(count_suffix(f, ".gz") > n);
	assert_int_equal(verify(f, key, sizeof(key) - 1, true, &res), 0);
	assert_int_equal(res.records, 80);
	assert_int_equal(res.gaps, 0);
}

static void test_rotated_tamper(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	char *lines[MAXL], gz[160];
	size_t n;
	int ret;

	write_n(f, NULL, 0, 2000, 1, 50);
	snprintf(gz, sizeof(gz), "%s.2.gz", f->log);
	n = read_lines(gz, lines);
	assert_true(n >= 3);
	lines[1] = subst(lines[1], "\"tenant\":\"acme\"", "\"tenant\":\"evil\"");
	write_lines(gz, lines, n, true);
	free_lines(lines, n);
	ret = verify(f, NULL, 0, true, &res);
	expect_fail(&res, ret, gz, 2, "hash mismatch");
}

static void test_rotated_file_deleted(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	char gz[160], first[160];
	int ret;

	write_n(f, NULL, 0, 2000, 1, 50);
	/* A middle file gone: a jump at the next file's first line. */
	snprintf(gz, sizeof(gz), "%s.3.gz", f->log);
	assert_int_equal(unlink(gz), 0);
	snprintf(first, sizeof(first), "%s.4.gz", f->log);
	ret = verify(f, NULL, 0, true, &res);
	expect_fail(&res, ret, first, 1, "seq jumps");

	/* The oldest file gone: the chain no longer starts at seq 1. */
	snprintf(gz, sizeof(gz), "%s.1.gz", f->log);
	assert_int_equal(unlink(gz), 0);
	snprintf(first, sizeof(first), "%s.2.gz", f->log);
	ret = verify(f, NULL, 0, true, &res);
	expect_fail(&res, ret, first, 1, "missing prefix");
}

static void test_truncated_gzip(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	char gz[160];
	struct stat st;
	int ret;

	write_n(f, NULL, 0, 2000, 1, 30);
	snprintf(gz, sizeof(gz), "%s.1.gz", f->log);
	assert_int_equal(stat(gz, &st), 0);
	assert_int_equal(truncate(gz, st.st_size - 12), 0);
	ret = verify(f, NULL, 0, true, &res);
	assert_int_equal(ret, -EBADMSG);
	assert_string_equal(res.file, gz);
}

static void test_write_failure_leaves_nothing(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	struct egr_audit *a;
	struct rlimit old, lim;
	struct stat before, after;
	json_t *o = exec_record(9);

	write_n(f, NULL, 0, 0, 1, 2);
	assert_int_equal(egr_audit_open(&a, f->log, f->state, NULL, 0, 0), 0);
	assert_int_equal(stat(f->log, &before), 0);
	signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = (rlim_t)before.st_size + 40;	/* a short write, then EFBIG */
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	assert_int_equal(egr_audit_append(a, o), -EFBIG);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, SIG_DFL);
	assert_int_equal(egr_audit_failures(a), 1);
	assert_int_equal(egr_audit_seq(a), 2);
	assert_int_equal(stat(f->log, &after), 0);
	assert_int_equal(after.st_size, before.st_size);

	assert_int_equal(egr_audit_append(a, o), 0);
	assert_int_equal(egr_audit_seq(a), 3);
	json_decref(o);
	egr_audit_close(a);
	assert_int_equal(verify(f, NULL, 0, true, &res), 0);
	assert_int_equal(res.records, 3);
}

static void test_single_writer(void **state)
{
	struct fx *f = *state;
	struct egr_audit *a, *b;

	assert_int_equal(egr_audit_open(&a, f->log, f->state, NULL, 0, 0), 0);
	assert_int_equal(egr_audit_open(&b, f->log, f->state, NULL, 0, 0), -EBUSY);
	assert_null(b);
	egr_audit_close(a);
	assert_int_equal(egr_audit_open(&b, f->log, f->state, NULL, 0, 0), 0);
	egr_audit_close(b);
}

static void write_key(const char *file, const void *data, size_t len, mode_t mode)
{
	int fd;

	/* A fresh file: the last one may be 0400, which only root could reopen. */
	unlink(file);
	fd = open(file, O_WRONLY | O_CREAT | O_EXCL, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	close(fd);
	assert_int_equal(chmod(file, mode), 0);
}

static void test_load_key(void **state)
{
	struct fx *f = *state;
	char file[160];
	static char big[EGR_AUDIT_MAX_KEY + 1];
	uint8_t *key = NULL;
	size_t len = 0;

	snprintf(file, sizeof(file), "%s/key", f->dir);
	write_key(file, "s3cret\n", 7, 0600);
	assert_int_equal(egr_audit_load_key(file, &key, &len), 0);
	assert_int_equal(len, 7);
	assert_memory_equal(key, "s3cret\n", 7);
	egr_audit_free_key(key, len);

	write_key(file, "s3cret", 6, 0640);
	assert_int_equal(egr_audit_load_key(file, &key, &len), -EPERM);
	write_key(file, "s3cret", 6, 0604);
	assert_int_equal(egr_audit_load_key(file, &key, &len), -EPERM);
	write_key(file, "", 0, 0600);
	assert_int_equal(egr_audit_load_key(file, &key, &len), -EINVAL);
	memset(big, 'k', sizeof(big));
	write_key(file, big, sizeof(big), 0400);
	assert_int_equal(egr_audit_load_key(file, &key, &len), -EFBIG);
	write_key(file, big, sizeof(big) - 1, 0400);
	assert_int_equal(egr_audit_load_key(file, &key, &len), 0);
	assert_int_equal(len, EGR_AUDIT_MAX_KEY);
	egr_audit_free_key(key, len);
	assert_int_equal(egr_audit_load_key(f->dir, &key, &len), -EINVAL);
	snprintf(file, sizeof(file), "%s/nokey", f->dir);
	assert_int_equal(egr_audit_load_key(file, &key, &len), -ENOENT);
}

static void test_verify_needs_state(void **state)
{
	struct fx *f = *state;
	struct egr_audit_verify_result res;
	int ret;

	write_n(f, NULL, 0, 0, 1, 1);
	assert_int_equal(unlink(f->state), 0);
	ret = verify(f, NULL, 0, true, &res);
	assert_int_equal(ret, -ENOENT);
	assert_false(res.ok);
	assert_string_equal(res.file, f->state);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
		T(test_clean_plain),
		T(test_clean_hmac),
		T(test_hmac_key_required_for_unkeyed),
		T(test_edit_field),
		T(test_edit_whitespace),
		T(test_edit_and_rehash),
		T(test_delete_record),
		T(test_insert_copy),
		T(test_swap_records),
		T(test_not_json),
		T(test_truncate_tail),
		T(test_torn_write_repaired),
		T(test_truncation_recorded_on_reopen),
		T(test_state_missing_on_reopen),
		T(test_reopen_continues),
		T(test_gap_record),
		T(test_writer_fields_win),
		T(test_rotation),
		T(test_rotated_tamper),
		T(test_rotated_file_deleted),
		T(test_truncated_gzip),
		T(test_write_failure_leaves_nothing),
		T(test_single_writer),
		T(test_load_key),
		T(test_verify_needs_state),
#undef T
	};

	return cmocka_run_group_tests_name("audit", tests, NULL, NULL);
}
