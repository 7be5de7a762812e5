// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Tamper-evident audit log (docs/audit.md): a SHA-256 / HMAC-SHA-256 hash
 * chain over JSON lines, fsynced, rotated into gzip files, with its last
 * seq/hash mirrored in an atomically replaced state file.
 *
 * Line format: the record serialized with JSON_COMPACT | JSON_SORT_KEYS
 * (including "seq", "ts", "prev", "alg"), whose closing '}' is replaced by
 * `,"hash":"<64 hex>"}`. The hash covers the exact bytes of the line without
 * that member (i.e. the serialization before the hash was added), so the
 * verifier hashes the bytes it reads and never depends on re-serializing
 * JSON the same way (which a jansson upgrade could change, and which would
 * miss byte-level edits such as added whitespace).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <zlib.h>

#include "audit.h"
#include "audit_anchor.h"
#include "fileio.h"
#include "macfile.h"
#include "log.h"
#include "audit_int.h"
#include "audit_w.h"



/* gzip @src into @dst (via dst.tmp, fsynced, renamed), then unlink @src. */
static int compress_file(const char *src, const char *dst)
{
	char *tmp = egr_audit_strdup_printf("%s.tmp", dst), *buf = malloc(IO_CHUNK);
	int in = -1, out = -1, ret = 0;
	gzFile gz = NULL;
	ssize_t n;

	if (!tmp || !buf) {
		ret = -ENOMEM;
		goto out;
	}
	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0) {
		ret = -errno;
		goto out;
	}
	out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out < 0) {
		ret = -errno;
		goto out;
	}
	int gfd = dup(out);

	if (gfd < 0 || !(gz = gzdopen(gfd, "wb"))) {
		ret = gfd < 0 ? -errno : -ENOMEM;
		if (gfd >= 0)
			close(gfd);
		goto out;
	}
	while ((n = read(in, buf, IO_CHUNK)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			ret = -errno;
			goto out;
		}
		if (gzwrite(gz, buf, (unsigned)n) != (int)n) {
			ret = -EIO;
			goto out;
		}
	}
	ret = gzclose(gz) == Z_OK ? 0 : -EIO;
	gz = NULL;
	if (!ret && fsync(out))
		ret = -errno;
	if (!ret && rename(tmp, dst))
		ret = -errno;
	if (!ret)
		ret = egr_fsync_parent(dst);
	if (!ret && unlink(src))
		ret = -errno;
	if (!ret)
		ret = egr_fsync_parent(src);
out:
	if (gz)
		gzclose(gz);
	if (out >= 0)
		close(out);
	if (in >= 0)
		close(in);
	if (ret && tmp)
		unlink(tmp);
	if (ret)
		log_error("audit: cannot compress %s: %s", src, strerror(-ret));
	free(tmp);
	free(buf);
	return ret;
}

/* Finish compressions a crash or an error left behind. */
static void finish_pending(struct egr_audit *a)
{
	struct rotated *v = NULL;
	size_t n = 0;

	if (egr_audit_scan_rotated(a->path, &v, &n)) {
		a->failures++;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		char *plain, *gz;

		if (!v[i].plain)
			continue;
		plain = egr_audit_strdup_printf("%s.%" PRIu64, a->path, v[i].n);
		gz = egr_audit_strdup_printf("%s.%" PRIu64 ".gz", a->path, v[i].n);
		if (!plain || !gz)
			a->failures++;
		else if (v[i].gz)	/* the .gz is complete: renamed after fsync */
			unlink(plain);
		else if (compress_file(plain, gz))
			a->failures++;
		free(plain);
		free(gz);
	}
	free(v);
}

static int rotate(struct egr_audit *a)
{
	struct rotated *v = NULL;
	size_t n = 0;
	uint64_t next;
	char *plain = NULL, *gz = NULL;
	int nfd, ret;

	ret = egr_audit_scan_rotated(a->path, &v, &n);
	if (ret)
		return ret;
	next = n ? v[n - 1].n + 1 : 1;
	free(v);
	plain = egr_audit_strdup_printf("%s.%" PRIu64, a->path, next);
	gz = egr_audit_strdup_printf("%s.%" PRIu64 ".gz", a->path, next);
	if (!plain || !gz) {
		ret = -ENOMEM;
		goto out;
	}
	if (fsync(a->fd)) {
		ret = -errno;
		if (a->cm)
			a->sync_err = ret;
		goto out;
	}
	egr_audit_log_append_only(a, false); /* an append-only file cannot be renamed */
	if (renameat2(AT_FDCWD, a->path, AT_FDCWD, plain, RENAME_NOREPLACE)) {
		ret = -errno;
		egr_audit_log_append_only(a, true);
		goto out;
	}
	nfd = open(a->path, O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (nfd < 0 || flock(nfd, LOCK_EX | LOCK_NB)) {
		ret = -errno;
		if (nfd >= 0) {
			close(nfd);
			unlink(a->path);
		}
		/* Put the old file back; a->fd still refers to it. */
		if (rename(plain, a->path))
			log_error("audit: cannot undo rotation of %s: %m", a->path);
		egr_audit_log_append_only(a, true);
		goto out;
	}
	close(a->fd);
	a->fd = nfd;
	egr_audit_log_append_only(a, true);
	/* Everything so far was fsynced above, in the old file. */
	a->durable_size = 0;
	a->durable_seq = a->seq;
	memcpy(a->durable_prev, a->prev, sizeof(a->prev));
	ret = egr_fsync_parent(a->path);
	if (ret)
		goto out;
	/* The log goes on in the new file whatever happens to the old one. */
	if (compress_file(plain, gz))
		a->failures++;
out:
	if (ret)
		log_error("audit: cannot rotate %s: %s", a->path, strerror(-ret));
	free(plain);
	free(gz);
	return ret;
}

/* --- group commit ------------------------------------------------------------ */

/* The queue's sync: one fsync for every record appended since the last. On
 * failure the unsynced records are cut off again (the kernel may have
 * dropped them; their callers get an error, never an acknowledgement) and
 * the chain goes on from the last durable record. */
static int commit_sync(void *ctx)
{
	struct egr_audit *a = ctx;
	struct stat st;
	int ret = a->sync_err;

	a->sync_err = 0;
	if (!ret && (fsync(a->fd) || fstat(a->fd, &st)))
		ret = -errno;
	if (!ret) {
		a->durable_size = st.st_size;
		a->durable_seq = a->seq;
		memcpy(a->durable_prev, a->prev, sizeof(a->prev));
		/* Before the replies go out: an acknowledged record is anchored. */
		egr_audit_anchor_due(a, a->durable_seq, a->durable_prev);
		return 0;
	}
	a->failures++;
	log_error("audit: cannot sync %s: %s; dropping records %" PRIu64 "-%" PRIu64, a->path,
		  strerror(-ret), a->durable_seq + 1, a->seq);
	if (egr_audit_truncate(a, a->durable_size))
		log_error("audit: cannot cut %s back to %lld bytes: %m", a->path,
			  (long long)a->durable_size);
	a->seq = a->durable_seq;
	memcpy(a->prev, a->durable_prev, sizeof(a->prev));
	return ret;
}

/* The state file names only durable records: written after the sync. */
static void commit_after(void *ctx)
{
	struct egr_audit *a = ctx;

	if (egr_audit_state_write(a, a->durable_seq, a->durable_prev))
		a->failures++;
}

int egr_audit_set_commit(struct egr_audit *a, struct egr_commitq *q)
{
	struct stat st;
	int ret;

	if (!a || !q || a->cm)
		return -EINVAL;
	/* open() left everything durable: its records were fsynced one by one. */
	if (fstat(a->fd, &st))
		return -errno;
	ret = egr_commit_join(q, commit_sync, commit_after, a, &a->cm);
	if (ret)
		return ret;
	a->durable_size = st.st_size;
	a->durable_seq = a->seq;
	memcpy(a->durable_prev, a->prev, sizeof(a->prev));
	return 0;
}

/* --- writer ------------------------------------------------------------------ */

uint64_t egr_audit_failures(const struct egr_audit *a)
{
	return a->failures;
}

uint64_t egr_audit_seq(const struct egr_audit *a)
{
	return a->seq;
}

int egr_audit_append(struct egr_audit *a, json_t *record)
{
	char ts[40], hex[EGR_AUDIT_HASH_HEX + 1];
	char *s = NULL, *line = NULL;
	json_t *o = NULL;
	size_t slen, len;
	struct stat st;
	int ret;

	if (!a || !json_is_object(record))
		return -EINVAL;
	if (a->seq >= (uint64_t)INT64_MAX)
		return -EOVERFLOW;
	egr_audit_rfc3339_now(ts, sizeof(ts));
	o = json_copy(record);	/* shallow: only top-level members change */
	if (!o) {
		ret = -ENOMEM;
		goto fail;
	}
	json_object_del(o, "hash");
	if (json_object_set_new(o, "seq", json_integer((json_int_t)(a->seq + 1))) ||
	    json_object_set_new(o, "ts", json_string(ts)) ||
	    json_object_set_new(o, "prev", json_string(a->prev)) ||
	    json_object_set_new(o, "alg", json_string(a->key ? ALG_HMAC : ALG_SHA256))) {
		ret = -ENOMEM;
		goto fail;
	}
	s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	if (!s) {
		ret = -EINVAL;	/* e.g. invalid UTF-8 or NaN in the caller's record */
		goto fail;
	}
	slen = strlen(s);
	ret = egr_audit_hash_parts(a->key, a->keylen, s, slen, "", 0, hex);
	if (ret)
		goto fail;
	/* s ends with '}': replace it by the hash member, then newline. */
	len = slen - 1 + SUFFIX_LEN + 1;
	if (len > EGR_AUDIT_MAX_LINE) {
		ret = -E2BIG;
		goto fail;
	}
	line = malloc(len + 1);
	if (!line) {
		ret = -ENOMEM;
		goto fail;
	}
	snprintf(line, len + 1, "%.*s" HASH_HDR "%s\"}\n", (int)(slen - 1), s, hex);

	if (fstat(a->fd, &st)) {
		ret = -errno;
		goto fail;
	}
	if (a->rotate_bytes && st.st_size > 0 && (size_t)st.st_size + len > a->rotate_bytes) {
		if (rotate(a))
			a->failures++;	/* keep appending to the current file */
		if (fstat(a->fd, &st)) {
			ret = -errno;
			goto fail;
		}
	}
	ret = egr_write_all(a->fd, line, len);
	if (!ret && !a->cm && fsync(a->fd))
		ret = -errno;
	if (ret) {
		/* No half (or unsynced) record stays behind. */
		if (egr_audit_truncate(a, st.st_size)) {
			log_error("audit: cannot cut %s back to %lld bytes: %m", a->path,
				  (long long)st.st_size);
			if (a->cm)
				a->sync_err = -EIO; /* the pending batch is not durable */
		}
		goto fail;
	}
	a->seq++;
	memcpy(a->prev, hex, sizeof(hex));
	if (a->cm)
		egr_commit_dirty(a->cm); /* fsync and state file: at the flush */
	else if (egr_audit_state_write(a, a->seq, a->prev))
		a->failures++;
	if (!a->cm)
		egr_audit_anchor_due(a, a->seq, a->prev);
	ret = 0;
	goto out;
fail:
	a->failures++;
	log_error("audit: cannot append record %" PRIu64 " to %s: %s", a->seq + 1, a->path,
		  strerror(-ret));
out:
	json_decref(o);
	free(s);
	free(line);
	return ret;
}

int egr_audit_record_gap(struct egr_audit *a, const char *reason, uint64_t lost)
{
	json_t *o;
	int ret;

	if (!a || !reason)
		return -EINVAL;
	o = json_pack("{s:s, s:s, s:I}", "type", "audit_gap", "reason", reason, "lost",
		      (json_int_t)(lost > (uint64_t)INT64_MAX ? INT64_MAX : lost));
	if (!o) {
		a->failures++;
		return -ENOMEM;
	}
	ret = egr_audit_append(a, o);
	json_decref(o);
	return ret;
}

/* Offset of the last '\n' in the first @end bytes of @fd, or -1. */
static int find_nl_back(int fd, off_t end, off_t *pos)
{
	char buf[4096];

	while (end > 0) {
		size_t chunk = end > (off_t)sizeof(buf) ? sizeof(buf) : (size_t)end;
		ssize_t n = pread(fd, buf, chunk, end - (off_t)chunk);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if ((size_t)n != chunk)
			return -EIO;
		for (size_t i = chunk; i > 0; i--) {
			if (buf[i - 1] == '\n') {
				*pos = end - (off_t)chunk + (off_t)(i - 1);
				return 0;
			}
		}
		end -= (off_t)chunk;
	}
	*pos = -1;
	return 0;
}

/* The last complete line of the plain file @fd of @size bytes (NULL if none). */
static int tail_plain(int fd, off_t size, char **line, size_t *len)
{
	off_t last, prev;
	int ret;

	*line = NULL;
	ret = find_nl_back(fd, size, &last);
	if (ret || last < 0)
		return ret;
	ret = find_nl_back(fd, last, &prev);
	if (ret)
		return ret;
	*len = (size_t)(last - prev - 1);
	if (*len > EGR_AUDIT_MAX_LINE)
		return -E2BIG;
	*line = malloc(*len + 1);
	if (!*line)
		return -ENOMEM;
	if (pread(fd, *line, *len, prev + 1) != (ssize_t)*len) {
		free(*line);
		*line = NULL;
		return -EIO;
	}
	(*line)[*len] = '\0';
	return 0;
}

/* The last line of the newest rotated file (NULL if none). */
static int tail_rotated(const char *path, char **out, size_t *outlen)
{
	struct rotated *v = NULL;
	struct lreader r;
	char *file, *line;
	size_t n = 0, len;
	bool nl;
	int ret;

	*out = NULL;
	ret = egr_audit_scan_rotated(path, &v, &n);
	if (ret || !n) {
		free(v);
		return ret;
	}
	file = egr_audit_strdup_printf("%s.%" PRIu64 "%s", path, v[n - 1].n, v[n - 1].gz ? ".gz" : "");
	free(v);
	if (!file)
		return -ENOMEM;
	ret = egr_audit_lr_open(&r, file);
	free(file);
	if (ret)
		return ret;
	while ((ret = egr_audit_lr_next(&r, &line, &len, &nl)) > 0) {
		free(*out);
		*out = nl ? strndup(line, len) : NULL;
		*outlen = len;
		if (nl && !*out) {
			ret = -ENOMEM;
			break;
		}
	}
	egr_audit_lr_close(&r);
	if (ret < 0) {
		free(*out);
		*out = NULL;
	}
	return ret;
}

/* seq/prev/hash of a record that parses but does not verify. */
static bool lenient_tail(const char *line, size_t len, struct rec *r)
{
	json_t *o = json_loadb(line, len, 0, NULL);
	json_t *s = json_object_get(o, "seq"), *p = json_object_get(o, "prev");
	json_t *h = json_object_get(o, "hash");
	bool ok = json_is_integer(s) && json_integer_value(s) > 0 && json_is_string(p) &&
		  egr_audit_is_hash_hex(json_string_value(p), json_string_length(p)) && json_is_string(h) &&
		  egr_audit_is_hash_hex(json_string_value(h), json_string_length(h));

	memset(r, 0, sizeof(*r));
	if (ok) {
		r->seq = (uint64_t)json_integer_value(s);
		memcpy(r->prev, json_string_value(p), sizeof(r->prev));
		memcpy(r->hash, json_string_value(h), sizeof(r->hash));
	}
	json_decref(o);
	return ok;
}

static int add_gap(json_t *gaps, json_t *rec)
{
	if (!rec || json_array_append_new(gaps, rec))
		return -ENOMEM;
	return 0;
}

int egr_audit_open(struct egr_audit **out, const char *path, const char *state_path,
		   const uint8_t *key, size_t keylen, size_t rotate_bytes)
{
	struct egr_audit_opts o = { .key = key, .keylen = keylen, .rotate_bytes = rotate_bytes };

	return egr_audit_open_opts(out, path, state_path, &o);
}

int egr_audit_open_opts(struct egr_audit **out, const char *path, const char *state_path,
			const struct egr_audit_opts *o)
{
	const uint8_t *key = o ? o->key : NULL;
	size_t keylen = o ? o->keylen : 0, rotate_bytes = o ? o->rotate_bytes : 0;
	char st_hash[EGR_AUDIT_HASH_HEX + 1], *tail = NULL;
	uint64_t st_seq = 0, torn = 0;
	struct egr_audit *a;
	json_t *gaps = NULL;
	size_t tail_len = 0;
	struct stat st;
	struct rec r = { 0 };
	bool have_tail = false;
	const char *why = NULL;
	int ret, st_ret;

	if (!out || !o || !path || !state_path || (!key) != (!keylen) ||
	    keylen > EGR_AUDIT_MAX_KEY || (!o->state_key) != (!o->state_keylen))
		return -EINVAL;
	*out = NULL;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->fd = -1;
	a->rotate_bytes = rotate_bytes;
	memcpy(a->prev, egr_audit_zero_hash, sizeof(egr_audit_zero_hash));
	a->path = strdup(path);
	a->state_path = strdup(state_path);
	gaps = json_array();
	if (!a->path || !a->state_path || !gaps) {
		ret = -ENOMEM;
		goto fail;
	}
	if (key) {
		a->key = malloc(keylen);
		if (!a->key) {
			ret = -ENOMEM;
			goto fail;
		}
		memcpy(a->key, key, keylen);
		a->keylen = keylen;
	}
	if (o->state_key) {
		a->state_key = malloc(o->state_keylen);
		if (!a->state_key) {
			ret = -ENOMEM;
			goto fail;
		}
		memcpy(a->state_key, o->state_key, o->state_keylen);
		a->state_keylen = o->state_keylen;
	}
	a->append_only = o->append_only;
	a->anchor_every = o->anchor_every ? o->anchor_every : 1;
	if (o->anchor && (ret = egr_audit_anchor_open(o->anchor, &a->anchor))) {
		log_error("audit: anchor sink %s: %s", o->anchor, strerror(-ret));
		goto fail;
	}

	a->fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (a->fd < 0) {
		ret = -errno;
		log_error("audit: cannot open %s: %m", path);
		goto fail;
	}
	if (flock(a->fd, LOCK_EX | LOCK_NB)) {
		ret = errno == EWOULDBLOCK ? -EBUSY : -errno;
		log_error("audit: %s is in use by another writer", path);
		goto fail;
	}
	ret = egr_fsync_parent(path);
	if (ret)
		goto fail;
	finish_pending(a);
	egr_audit_log_append_only(a, true);

	/* A torn last line: cut back to the last newline. */
	if (fstat(a->fd, &st)) {
		ret = -errno;
		goto fail;
	}
	if (st.st_size > 0) {
		char c;
		off_t nl;

		if (pread(a->fd, &c, 1, st.st_size - 1) != 1) {
			ret = -EIO;
			goto fail;
		}
		if (c != '\n') {
			ret = find_nl_back(a->fd, st.st_size, &nl);
			if (ret)
				goto fail;
			ret = egr_audit_truncate(a, nl + 1);
			if (ret)
				goto fail;
			torn = (uint64_t)(st.st_size - (nl + 1));
			log_warn("audit: %s ended in a torn record (%" PRIu64 " bytes); cut it off",
				 path, torn);
			st.st_size = nl + 1;
		}
	}

	/* The chain's tail: the current file's last line, else the newest rotated file's. */
	ret = st.st_size > 0 ? tail_plain(a->fd, st.st_size, &tail, &tail_len)
			     : tail_rotated(path, &tail, &tail_len);
	if (ret) {
		log_error("audit: cannot read the end of %s: %s", path, strerror(-ret));
		goto fail;
	}
	if (tail) {
		ret = egr_audit_rec_parse(tail, tail_len, a->key, a->keylen, &r, &why);
		if (!ret) {
			have_tail = true;
		} else if (ret == -EBADMSG && lenient_tail(tail, tail_len, &r)) {
			/* Well-formed but does not verify: edited, or another key. */
			have_tail = true;
			log_warn("audit: the last record of %s does not verify (%s)", path, why);
			ret = add_gap(gaps, json_pack("{s:s,s:s,s:I}", "type", "audit_gap",
						      "reason", "last record before restart does "
						      "not verify with the current key (edited, or "
						      "key changed)", "lost", (json_int_t)0));
			if (ret)
				goto fail;
		} else if (ret == -EBADMSG) {
			log_warn("audit: the last line of %s is unreadable (%s)", path, why);
		} else {
			goto fail;
		}
		json_decref(r.obj);
		r.obj = NULL;
	}

	st_ret = egr_audit_state_read_mac(a, o->state_legacy_ok, &st_seq, st_hash);
	a->state_tampered = st_ret == -EKEYREJECTED;
	if (st_ret && st_ret != -ENOENT)
		log_warn("audit: cannot read state file %s: %s", state_path, strerror(-st_ret));

	if (torn && add_gap(gaps, json_pack("{s:s,s:s,s:I,s:I}", "type", "audit_gap", "reason",
					    "torn write recovered", "lost", (json_int_t)1,
					    "bytes", (json_int_t)torn))) {
		ret = -ENOMEM;
		goto fail;
	}

	if (st_ret == 0 && (have_tail ? r.seq < st_seq ||
					(r.seq == st_seq && strcmp(r.hash, st_hash))
				      : st_seq > 0 || tail)) {
		/*
		 * The log lost records the state says were written (or the
		 * last one changed). Continue the state's chain so the break
		 * stays visible to a verifier, and say what happened.
		 */
		uint64_t have = have_tail ? r.seq : 0;
		char *reason;

		if (have == st_seq)
			reason = egr_audit_strdup_printf("record %" PRIu64 " differs from the state file "
					       "(rewritten)", st_seq);
		else if (tail && !have_tail)
			reason = egr_audit_strdup_printf("last log record unreadable; state says seq "
					       "%" PRIu64, st_seq);
		else
			reason = egr_audit_strdup_printf("log ends at seq %" PRIu64 " but state says %" PRIu64
					       " (truncated)", have, st_seq);
		log_error("audit: %s: %s", path, reason ? reason : "state mismatch");
		ret = reason ? add_gap(gaps, json_pack("{s:s,s:s,s:I,s:I,s:I}", "type",
						       "audit_gap", "reason", reason, "lost",
						       (json_int_t)(st_seq - have), "log_seq",
						       (json_int_t)have, "state_seq",
						       (json_int_t)st_seq))
			     : -ENOMEM;
		free(reason);
		if (ret)
			goto fail;
		a->seq = st_seq;
		memcpy(a->prev, st_hash, sizeof(st_hash));
	} else if (have_tail) {
		const char *reason = NULL;

		if (st_ret == -ENOENT)
			reason = "state file missing; continuing from the log's last record";
		else if (st_ret == -EKEYREJECTED)
			reason = "state file fails its MAC (rewritten, or another key); continuing "
				 "from the log's last record";
		else if (st_ret)
			reason = "state file unreadable; continuing from the log's last record";
		else if (r.seq > st_seq + 1 || (r.seq == st_seq + 1 && strcmp(r.prev, st_hash)))
			reason = "state file behind the log; continuing from the log's last record";
		/* r.seq == st_seq + 1 with matching prev: crash before the state update. */
		if (reason) {
			log_warn("audit: %s: %s", path, reason);
			ret = add_gap(gaps, json_pack("{s:s,s:s,s:I}", "type", "audit_gap",
						      "reason", reason, "lost", (json_int_t)0));
			if (ret)
				goto fail;
		}
		a->seq = r.seq;
		memcpy(a->prev, r.hash, sizeof(r.hash));
	} else if (tail) {
		/* Unreadable tail and no state: nothing to chain to. */
		ret = add_gap(gaps, json_pack("{s:s,s:s,s:I}", "type", "audit_gap", "reason",
					      "last log record unreadable and no state; "
					      "starting a new chain", "lost", (json_int_t)0));
		if (ret)
			goto fail;
	} else if (st_ret && st_ret != -ENOENT) {
		ret = add_gap(gaps, json_pack("{s:s,s:s,s:I}", "type", "audit_gap", "reason",
					      "state file unreadable and log empty; starting a "
					      "new chain", "lost", (json_int_t)0));
		if (ret)
			goto fail;
	}
	/* else: a new log (or an empty one with an empty state). */

	ret = egr_audit_state_write(a, a->seq, a->prev);
	if (ret)
		goto fail;
	for (size_t i = 0; i < json_array_size(gaps); i++) {
		ret = egr_audit_append(a, json_array_get(gaps, i));
		if (ret)
			goto fail;
	}
	/* Every start, whatever the recovery found: the head it goes on from. */
	egr_audit_anchor_now(a, a->seq, a->prev, "start");
	json_decref(gaps);
	free(tail);
	*out = a;
	return 0;
fail:
	json_decref(gaps);
	free(tail);
	egr_audit_close(a);
	return ret;
}

void egr_audit_close(struct egr_audit *a)
{
	if (!a)
		return;
	if (a->cm) {
		if (a->seq != a->durable_seq && !commit_sync(a))
			commit_after(a);
		egr_commit_leave(a->cm);
	}
	if (a->anchor && a->fd >= 0)
		egr_audit_anchor_now(a, a->cm ? a->durable_seq : a->seq, a->cm ? a->durable_prev : a->prev,
		       "stop");
	egr_audit_anchor_free(a->anchor);
	if (a->state_key) {
		OPENSSL_cleanse(a->state_key, a->state_keylen);
		free(a->state_key);
	}
	if (a->fd >= 0)
		close(a->fd);
	if (a->key) {
		OPENSSL_cleanse(a->key, a->keylen);
		free(a->key);
	}
	free(a->path);
	free(a->state_path);
	free(a);
}

/* The chain head's state (audit_head.c keeps it). */
bool egr_audit_state_tampered(const struct egr_audit *a)
{
	return a && a->state_tampered;
}

void egr_audit_anchor_stats(const struct egr_audit *a, uint64_t *written, uint64_t *failed)
{
	*written = a ? a->anchors : 0;
	*failed = a ? a->anchor_failures : 0;
}
