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
#include "fileio.h"
#include "log.h"

#define ALG_SHA256 "sha256"
#define ALG_HMAC   "hmac-sha256"
#define HASH_HDR   ",\"hash\":\""
#define HASH_HDR_LEN (sizeof(HASH_HDR) - 1)
/* `,"hash":"` + 64 hex + `"}` */
#define SUFFIX_LEN (HASH_HDR_LEN + EGR_AUDIT_HASH_HEX + 2)
#define STATE_MAX  4096
#define IO_CHUNK   65536

static const char zero_hash[EGR_AUDIT_HASH_HEX + 1] =
	"0000000000000000000000000000000000000000000000000000000000000000";

struct egr_audit {
	char *path;
	char *state_path;
	int fd;
	uint8_t *key;
	size_t keylen;
	size_t rotate_bytes;
	uint64_t seq;
	char prev[EGR_AUDIT_HASH_HEX + 1];
	uint64_t failures;
};

/* --- small helpers ----------------------------------------------------------- */

static int hash_parts(const uint8_t *key, size_t keylen, const void *a, size_t alen,
		      const void *b, size_t blen, char hex[EGR_AUDIT_HASH_HEX + 1])
{
	static const char digits[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	size_t mdlen = 0;
	int ok = 0;

	if (key) {
		EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
		EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
		OSSL_PARAM params[] = {
			OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
							 (char *)"SHA256", 0),
			OSSL_PARAM_construct_end(),
		};

		ok = ctx && EVP_MAC_init(ctx, key, keylen, params) &&
		     EVP_MAC_update(ctx, a, alen) && EVP_MAC_update(ctx, b, blen) &&
		     EVP_MAC_final(ctx, md, &mdlen, sizeof(md));
		EVP_MAC_CTX_free(ctx);
		EVP_MAC_free(mac);
	} else {
		EVP_MD_CTX *ctx = EVP_MD_CTX_new();
		unsigned int len = 0;

		ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) &&
		     EVP_DigestUpdate(ctx, a, alen) && EVP_DigestUpdate(ctx, b, blen) &&
		     EVP_DigestFinal_ex(ctx, md, &len);
		mdlen = len;
		EVP_MD_CTX_free(ctx);
	}
	if (!ok || mdlen != EGR_AUDIT_HASH_HEX / 2) {
		log_error("audit: OpenSSL %s failed", key ? "HMAC-SHA-256" : "SHA-256");
		return -EIO;
	}
	for (size_t i = 0; i < mdlen; i++) {
		hex[2 * i] = digits[md[i] >> 4];
		hex[2 * i + 1] = digits[md[i] & 15];
	}
	hex[EGR_AUDIT_HASH_HEX] = '\0';
	return 0;
}

int egr_hmac_sha256_hex(const uint8_t *key, size_t keylen, const void *data, size_t len,
			char hex[EGR_AUDIT_HASH_HEX + 1])
{
	if (!key || !keylen)
		return -EINVAL;
	return hash_parts(key, keylen, data, len, "", 0, hex);
}

static bool is_hash_hex(const char *s, size_t len)
{
	if (len != EGR_AUDIT_HASH_HEX)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

static void rfc3339_now(char *buf, size_t len)
{
	struct timespec ts;
	struct tm tm;
	size_t n;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, len - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

static char *strdup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *strdup_printf(const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	return s;
}



/* --- buffered line reader over plain or gzip files --------------------------- */

struct lreader {
	gzFile gz;
	char *buf;
	size_t pos, end;
	char *line;
	size_t cap;
	bool eof;
};

static int lr_open(struct lreader *r, const char *file)
{
	int fd;

	memset(r, 0, sizeof(*r));
	fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r->gz = gzdopen(fd, "rb");
	r->buf = malloc(IO_CHUNK);
	if (!r->gz || !r->buf) {
		if (r->gz)
			gzclose(r->gz);
		else
			close(fd);
		free(r->buf);
		return -ENOMEM;
	}
	gzbuffer(r->gz, IO_CHUNK);
	return 0;
}

static void lr_close(struct lreader *r)
{
	if (r->gz)
		gzclose(r->gz);
	free(r->buf);
	free(r->line);
	memset(r, 0, sizeof(*r));
}

/*
 * Next line (without its '\n'; *nl says whether it had one). Returns 1 for a
 * line, 0 at a clean end, -EBADMSG for corrupt or truncated gzip data,
 * -E2BIG for a line over EGR_AUDIT_MAX_LINE, another -errno on I/O errors.
 */
static int lr_next(struct lreader *r, char **line, size_t *len, bool *nl)
{
	size_t n = 0;

	for (;;) {
		if (r->pos == r->end && !r->eof) {
			int got = gzread(r->gz, r->buf, IO_CHUNK);
			int zerr;

			if (got < 0) {
				gzerror(r->gz, &zerr);
				return zerr == Z_ERRNO ? -EIO : -EBADMSG;
			}
			r->pos = 0;
			r->end = (size_t)got;
			if (got == 0) {
				r->eof = true;
				gzerror(r->gz, &zerr);
				if (zerr != Z_OK)
					return zerr == Z_ERRNO ? -EIO : -EBADMSG;
			}
		}
		if (r->pos == r->end) {
			if (!n)
				return 0;
			*nl = false;
			break;
		}
		char *start = r->buf + r->pos;
		char *e = memchr(start, '\n', r->end - r->pos);
		size_t take = e ? (size_t)(e - start) : r->end - r->pos;

		if (n + take + 1 > EGR_AUDIT_MAX_LINE)
			return -E2BIG;
		if (n + take + 1 > r->cap) {
			size_t cap = r->cap ? r->cap : 256;
			char *p;

			while (cap < n + take + 1)
				cap *= 2;
			p = realloc(r->line, cap);
			if (!p)
				return -ENOMEM;
			r->line = p;
			r->cap = cap;
		}
		memcpy(r->line + n, start, take);
		n += take;
		r->pos += take;
		if (e) {
			r->pos++;
			*nl = true;
			break;
		}
	}
	r->line[n] = '\0';
	*line = r->line;
	*len = n;
	return 1;
}

/* --- record parsing ---------------------------------------------------------- */

struct rec {
	uint64_t seq;
	char prev[EGR_AUDIT_HASH_HEX + 1];
	char hash[EGR_AUDIT_HASH_HEX + 1];
	const char *alg;		/* into obj */
	const char *type;		/* into obj; may be NULL */
	const char *reason;		/* into obj; may be NULL */
	json_t *obj;
};

/*
 * Parse and hash-check one line. On failure returns -EBADMSG with @why set.
 * @key NULL: the record must be unkeyed.
 */
static int rec_parse(const char *line, size_t len, const uint8_t *key, size_t keylen,
		     struct rec *r, const char **why)
{
	char want[EGR_AUDIT_HASH_HEX + 1];
	json_error_t jerr;
	json_t *seq, *prev, *hash, *alg, *type, *reason;
	const char *hx;
	int ret;

	memset(r, 0, sizeof(*r));
	if (len == 0) {
		*why = "empty line";
		return -EBADMSG;
	}
	r->obj = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!r->obj) {
		*why = "not JSON";
		return -EBADMSG;
	}
	if (!json_is_object(r->obj)) {
		*why = "not a JSON object";
		goto bad;
	}
	hx = line + len - SUFFIX_LEN + HASH_HDR_LEN;
	if (len < SUFFIX_LEN + 1 || memcmp(line + len - SUFFIX_LEN, HASH_HDR, HASH_HDR_LEN) ||
	    !is_hash_hex(hx, EGR_AUDIT_HASH_HEX) || line[len - 2] != '"' || line[len - 1] != '}') {
		*why = "\"hash\" missing or not the last member";
		goto bad;
	}
	hash = json_object_get(r->obj, "hash");
	seq = json_object_get(r->obj, "seq");
	prev = json_object_get(r->obj, "prev");
	alg = json_object_get(r->obj, "alg");
	type = json_object_get(r->obj, "type");
	reason = json_object_get(r->obj, "reason");
	if (!json_is_string(hash) || strncmp(json_string_value(hash), hx, EGR_AUDIT_HASH_HEX)) {
		*why = "\"hash\" member malformed";
		goto bad;
	}
	if (!json_is_integer(seq) || json_integer_value(seq) < 1) {
		*why = "\"seq\" missing or not a positive integer";
		goto bad;
	}
	if (!json_is_string(prev) ||
	    !is_hash_hex(json_string_value(prev), json_string_length(prev))) {
		*why = "\"prev\" missing or not 64 hex digits";
		goto bad;
	}
	if (!json_is_string(alg) || (strcmp(json_string_value(alg), ALG_SHA256) &&
				     strcmp(json_string_value(alg), ALG_HMAC))) {
		*why = "\"alg\" missing or unknown";
		goto bad;
	}
	r->seq = (uint64_t)json_integer_value(seq);
	memcpy(r->prev, json_string_value(prev), EGR_AUDIT_HASH_HEX + 1);
	memcpy(r->hash, hx, EGR_AUDIT_HASH_HEX);
	r->hash[EGR_AUDIT_HASH_HEX] = '\0';
	r->alg = json_string_value(alg);
	r->type = json_string_value(type);
	r->reason = json_string_value(reason);

	if (key && strcmp(r->alg, ALG_HMAC)) {
		*why = "record is not HMAC-keyed but a key was given (unkeyed or downgraded log)";
		goto bad;
	}
	if (!key && !strcmp(r->alg, ALG_HMAC)) {
		*why = "record is HMAC-keyed: verifying it needs the key (--audit-key)";
		goto bad;
	}
	ret = hash_parts(key, keylen, line, len - SUFFIX_LEN, "}", 1, want);
	if (ret) {
		*why = "hashing failed";
		json_decref(r->obj);
		r->obj = NULL;
		return ret;
	}
	if (CRYPTO_memcmp(want, r->hash, EGR_AUDIT_HASH_HEX)) {
		*why = key ? "hash mismatch (record edited, or wrong key)"
			   : "hash mismatch (record edited)";
		goto bad;
	}
	return 0;
bad:
	json_decref(r->obj);
	r->obj = NULL;
	return -EBADMSG;
}

/* --- state file -------------------------------------------------------------- */

static int state_read(const char *path, uint64_t *seq, char hash[EGR_AUDIT_HASH_HEX + 1])
{
	char buf[STATE_MAX];
	json_error_t jerr;
	json_t *o, *s, *h;
	ssize_t n;
	size_t got = 0;
	int fd, ret = -EBADMSG;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while (got < sizeof(buf)) {
		n = read(fd, buf + got, sizeof(buf) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			close(fd);
			return ret;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	o = json_loadb(buf, got, 0, &jerr);
	s = json_object_get(o, "seq");
	h = json_object_get(o, "hash");
	if (json_is_integer(s) && json_integer_value(s) >= 0 && json_is_string(h) &&
	    is_hash_hex(json_string_value(h), json_string_length(h))) {
		*seq = (uint64_t)json_integer_value(s);
		memcpy(hash, json_string_value(h), EGR_AUDIT_HASH_HEX + 1);
		ret = 0;
	}
	json_decref(o);
	return ret;
}

static int state_write(const char *path, uint64_t seq, const char *hash)
{
	char buf[160];
	int len, ret;

	len = snprintf(buf, sizeof(buf), "{\"seq\":%" PRIu64 ",\"hash\":\"%s\"}\n", seq, hash);
	ret = egr_replace_file(path, buf, (size_t)len, 0600);
	if (ret)
		log_error("audit: cannot write state file %s: %s", path, strerror(-ret));
	return ret;
}

/* --- rotated files ----------------------------------------------------------- */

struct rotated {
	uint64_t n;
	bool plain, gz;
};

static int cmp_rotated(const void *a, const void *b)
{
	const struct rotated *x = a, *y = b;

	return x->n < y->n ? -1 : x->n > y->n;
}

/* path.N and path.N.gz next to @path, ascending N, one entry per N. */
static int scan_rotated(const char *path, struct rotated **out, size_t *nout)
{
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	size_t blen = strlen(base), n = 0, cap = 0;
	struct rotated *v = NULL;
	struct dirent *de;
	char *dir;
	DIR *d;

	if (!slash)
		dir = strdup(".");
	else if (slash == path)
		dir = strdup("/");
	else
		dir = strndup(path, (size_t)(slash - path));
	if (!dir)
		return -ENOMEM;
	d = opendir(dir);
	free(dir);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		const char *p = de->d_name, *q;
		uint64_t num = 0;
		bool gz;
		size_t i;

		if (strncmp(p, base, blen) || p[blen] != '.')
			continue;
		p += blen + 1;
		for (q = p; *q >= '0' && *q <= '9'; q++) {
			if (num > (UINT64_MAX - 9) / 10)
				break;
			num = num * 10 + (uint64_t)(*q - '0');
		}
		if (q == p || *p == '0' || (*q && strcmp(q, ".gz")))
			continue;
		gz = *q != '\0';
		for (i = 0; i < n && v[i].n != num; i++)
			;
		if (i == n) {
			if (n == cap) {
				struct rotated *nv;

				cap = cap ? cap * 2 : 16;
				nv = realloc(v, cap * sizeof(*v));
				if (!nv) {
					free(v);
					closedir(d);
					return -ENOMEM;
				}
				v = nv;
			}
			v[n++] = (struct rotated){ .n = num };
		}
		if (gz)
			v[i].gz = true;
		else
			v[i].plain = true;
	}
	closedir(d);
	if (n)
		qsort(v, n, sizeof(*v), cmp_rotated);
	*out = v;
	*nout = n;
	return 0;
}

/* gzip @src into @dst (via dst.tmp, fsynced, renamed), then unlink @src. */
static int compress_file(const char *src, const char *dst)
{
	char *tmp = strdup_printf("%s.tmp", dst), *buf = malloc(IO_CHUNK);
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

	if (scan_rotated(a->path, &v, &n)) {
		a->failures++;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		char *plain, *gz;

		if (!v[i].plain)
			continue;
		plain = strdup_printf("%s.%" PRIu64, a->path, v[i].n);
		gz = strdup_printf("%s.%" PRIu64 ".gz", a->path, v[i].n);
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

	ret = scan_rotated(a->path, &v, &n);
	if (ret)
		return ret;
	next = n ? v[n - 1].n + 1 : 1;
	free(v);
	plain = strdup_printf("%s.%" PRIu64, a->path, next);
	gz = strdup_printf("%s.%" PRIu64 ".gz", a->path, next);
	if (!plain || !gz) {
		ret = -ENOMEM;
		goto out;
	}
	if (fsync(a->fd)) {
		ret = -errno;
		goto out;
	}
	if (renameat2(AT_FDCWD, a->path, AT_FDCWD, plain, RENAME_NOREPLACE)) {
		ret = -errno;
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
		goto out;
	}
	close(a->fd);
	a->fd = nfd;
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
	rfc3339_now(ts, sizeof(ts));
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
	ret = hash_parts(a->key, a->keylen, s, slen, "", 0, hex);
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
	if (!ret && fsync(a->fd))
		ret = -errno;
	if (ret) {
		/* No half (or unsynced) record stays behind. */
		if (ftruncate(a->fd, st.st_size) || fsync(a->fd))
			log_error("audit: cannot cut %s back to %lld bytes: %m", a->path,
				  (long long)st.st_size);
		goto fail;
	}
	a->seq++;
	memcpy(a->prev, hex, sizeof(hex));
	if (state_write(a->state_path, a->seq, a->prev))
		a->failures++;
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
	ret = scan_rotated(path, &v, &n);
	if (ret || !n) {
		free(v);
		return ret;
	}
	file = strdup_printf("%s.%" PRIu64 "%s", path, v[n - 1].n, v[n - 1].gz ? ".gz" : "");
	free(v);
	if (!file)
		return -ENOMEM;
	ret = lr_open(&r, file);
	free(file);
	if (ret)
		return ret;
	while ((ret = lr_next(&r, &line, &len, &nl)) > 0) {
		free(*out);
		*out = nl ? strndup(line, len) : NULL;
		*outlen = len;
		if (nl && !*out) {
			ret = -ENOMEM;
			break;
		}
	}
	lr_close(&r);
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
		  is_hash_hex(json_string_value(p), json_string_length(p)) && json_is_string(h) &&
		  is_hash_hex(json_string_value(h), json_string_length(h));

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

	if (!out || !path || !state_path || (!key) != (!keylen) || keylen > EGR_AUDIT_MAX_KEY)
		return -EINVAL;
	*out = NULL;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->fd = -1;
	a->rotate_bytes = rotate_bytes;
	memcpy(a->prev, zero_hash, sizeof(zero_hash));
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
			if (ftruncate(a->fd, nl + 1) || fsync(a->fd)) {
				ret = -errno;
				goto fail;
			}
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
		ret = rec_parse(tail, tail_len, a->key, a->keylen, &r, &why);
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

	st_ret = state_read(state_path, &st_seq, st_hash);
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
			reason = strdup_printf("record %" PRIu64 " differs from the state file "
					       "(rewritten)", st_seq);
		else if (tail && !have_tail)
			reason = strdup_printf("last log record unreadable; state says seq "
					       "%" PRIu64, st_seq);
		else
			reason = strdup_printf("log ends at seq %" PRIu64 " but state says %" PRIu64
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

	ret = state_write(state_path, a->seq, a->prev);
	if (ret)
		goto fail;
	for (size_t i = 0; i < json_array_size(gaps); i++) {
		ret = egr_audit_append(a, json_array_get(gaps, i));
		if (ret)
			goto fail;
	}
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

/* --- verifier ---------------------------------------------------------------- */

struct vctx {
	const uint8_t *key;
	size_t keylen;
	bool started;
	uint64_t seq;
	char hash[EGR_AUDIT_HASH_HEX + 1];
	bool have_state;
	uint64_t st_seq;
	char st_hash[EGR_AUDIT_HASH_HEX + 1];
	struct egr_audit_verify_result *res;
};

static int vfail(struct egr_audit_verify_result *res, int err, const char *file, size_t line,
		 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int vfail(struct egr_audit_verify_result *res, int err, const char *file, size_t line,
		 const char *fmt, ...)
{
	va_list ap;

	res->ok = false;
	snprintf(res->file, sizeof(res->file), "%s", file ? file : "");
	res->line = line;
	va_start(ap, fmt);
	vsnprintf(res->message, sizeof(res->message), fmt, ap);
	va_end(ap);
	return err;
}

static int verify_line(struct vctx *c, const char *file, size_t lineno, const char *line,
		       size_t len, bool nl)
{
	struct egr_audit_verify_result *res = c->res;
	char note[300] = "";
	const char *why;
	struct rec r;
	int ret;

	if (!nl)
		return vfail(res, -EBADMSG, file, lineno,
			     "incomplete last line (torn write or truncated file)");
	ret = rec_parse(line, len, c->key, c->keylen, &r, &why);
	if (ret == -EBADMSG)
		return vfail(res, ret, file, lineno, "%s", why);
	if (ret)
		return vfail(res, ret, file, lineno, "%s", why);
	if (r.type && !strcmp(r.type, "audit_gap"))
		snprintf(note, sizeof(note), "; it is an audit_gap record: %.250s",
			 r.reason ? r.reason : "(no reason)");

	if (!c->started) {
		if (r.seq != 1)
			ret = vfail(res, -EBADMSG, file, lineno,
				    "chain starts at seq %" PRIu64 ", not 1 (missing prefix: "
				    "earlier records or files deleted)%s", r.seq, note);
		else if (strcmp(r.prev, zero_hash))
			ret = vfail(res, -EBADMSG, file, lineno,
				    "first record's prev is not all zeros (missing prefix)%s",
				    note);
	} else if (r.seq == c->seq) {
		ret = vfail(res, -EBADMSG, file, lineno,
			    "duplicate seq %" PRIu64 " (inserted record)%s", r.seq, note);
	} else if (r.seq < c->seq) {
		ret = vfail(res, -EBADMSG, file, lineno,
			    "seq goes back from %" PRIu64 " to %" PRIu64
			    " (reordered or inserted record)%s", c->seq, r.seq, note);
	} else if (r.seq > c->seq + 1) {
		ret = vfail(res, -EBADMSG, file, lineno,
			    "seq jumps from %" PRIu64 " to %" PRIu64 " (deleted records)%s", c->seq,
			    r.seq, note);
	} else if (strcmp(r.prev, c->hash)) {
		ret = vfail(res, -EBADMSG, file, lineno,
			    "prev does not match previous record (deleted, inserted or reordered "
			    "record)%s", note);
	}
	if (!ret && c->have_state && r.seq == c->st_seq && strcmp(r.hash, c->st_hash))
		ret = vfail(res, -EBADMSG, file, lineno,
			    "record %" PRIu64 " differs from the state file's hash (log rewritten)",
			    r.seq);
	if (!ret) {
		c->started = true;
		c->seq = r.seq;
		memcpy(c->hash, r.hash, sizeof(c->hash));
		res->records++;
		res->last_seq = r.seq;
		memcpy(res->last_hash, r.hash, sizeof(res->last_hash));
		if (note[0])
			res->gaps++;
	}
	json_decref(r.obj);
	return ret;
}

int egr_audit_verify(const char *const *files, size_t nfiles, const uint8_t *key, size_t keylen,
		     const char *state_path, struct egr_audit_verify_result *res)
{
	struct vctx c = { .key = key, .keylen = keylen, .res = res };
	const char *last_file = nfiles ? files[nfiles - 1] : "";
	size_t lineno = 0;
	int ret;

	if (!res || (nfiles && !files) || (!key) != (!keylen))
		return -EINVAL;
	memset(res, 0, sizeof(*res));
	res->ok = true;
	/* The state first: a live writer only moves it forward after the log. */
	if (state_path) {
		ret = state_read(state_path, &c.st_seq, c.st_hash);
		if (ret)
			return vfail(res, ret, state_path, 0, "cannot read state file: %s",
				     ret == -EBADMSG ? "malformed" : strerror(-ret));
		c.have_state = true;
	}
	for (size_t i = 0; i < nfiles; i++) {
		struct lreader r;
		char *line;
		size_t len;
		bool nl;

		ret = lr_open(&r, files[i]);
		if (ret)
			return vfail(res, ret, files[i], 0, "cannot open: %s", strerror(-ret));
		lineno = 0;
		while ((ret = lr_next(&r, &line, &len, &nl)) > 0) {
			lineno++;
			ret = verify_line(&c, files[i], lineno, line, len, nl);
			if (ret)
				break;
		}
		lr_close(&r);
		if (ret == -EBADMSG && res->ok)
			return vfail(res, ret, files[i], lineno + 1,
				     "corrupt or truncated gzip data");
		if (ret == -E2BIG)
			return vfail(res, -EBADMSG, files[i], lineno + 1, "line too long");
		if (ret < 0 && res->ok)
			return vfail(res, ret, files[i], lineno + 1, "read error: %s",
				     strerror(-ret));
		if (ret < 0)
			return ret;
	}
	if (c.have_state && c.seq < c.st_seq)
		return vfail(res, -EBADMSG, last_file, lineno + 1,
			     "log ends at seq %" PRIu64 " but state says %" PRIu64 " (truncated)",
			     c.seq, c.st_seq);
	return 0;
}

/* --- file listing and keys --------------------------------------------------- */

void egr_audit_free_files(char **files, size_t n)
{
	if (!files)
		return;
	for (size_t i = 0; i < n; i++)
		free(files[i]);
	free(files);
}

int egr_audit_list_files(const char *path, char ***files, size_t *n)
{
	struct rotated *v = NULL;
	size_t nv = 0, k = 0;
	struct stat st;
	char **out;
	int ret;

	if (!path || !files || !n)
		return -EINVAL;
	ret = scan_rotated(path, &v, &nv);
	if (ret)
		return ret;
	out = calloc(nv + 1, sizeof(*out));
	if (!out) {
		free(v);
		return -ENOMEM;
	}
	for (size_t i = 0; i < nv; i++) {
		/* Both exist only between rename and unlink; the .gz is complete then. */
		out[k] = strdup_printf("%s.%" PRIu64 "%s", path, v[i].n, v[i].gz ? ".gz" : "");
		if (!out[k++])
			goto nomem;
	}
	if (!stat(path, &st)) {
		out[k] = strdup(path);
		if (!out[k++])
			goto nomem;
	}
	free(v);
	*files = out;
	*n = k;
	return 0;
nomem:
	free(v);
	egr_audit_free_files(out, k);
	return -ENOMEM;
}

void egr_audit_free_key(uint8_t *key, size_t len)
{
	if (!key)
		return;
	OPENSSL_cleanse(key, len);
	free(key);
}

int egr_audit_load_key(const char *file, uint8_t **key, size_t *len)
{
	struct stat st;
	uint8_t *buf = NULL;
	size_t got = 0;
	int fd, ret;

	if (!file || !key || !len)
		return -EINVAL;
	fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		ret = -errno;
		log_error("audit key %s: %m", file);
		return ret;
	}
	if (fstat(fd, &st)) {
		ret = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		log_error("audit key %s: not a regular file", file);
		ret = -EINVAL;
		goto out;
	}
	if (st.st_mode & 077) {
		log_error("audit key %s: group or other can access it (mode %04o); "
			  "chmod 600 it", file, (unsigned)(st.st_mode & 07777));
		ret = -EPERM;
		goto out;
	}
	if (st.st_size == 0 || st.st_size > EGR_AUDIT_MAX_KEY) {
		log_error("audit key %s: %s (1 to %d bytes required)", file,
			  st.st_size ? "too long" : "empty", EGR_AUDIT_MAX_KEY);
		ret = st.st_size ? -EFBIG : -EINVAL;
		goto out;
	}
	buf = malloc(EGR_AUDIT_MAX_KEY + 1);
	if (!buf) {
		ret = -ENOMEM;
		goto out;
	}
	for (;;) {
		ssize_t n = read(fd, buf + got, EGR_AUDIT_MAX_KEY + 1 - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			goto out;
		}
		if (n == 0)
			break;
		got += (size_t)n;
		if (got > EGR_AUDIT_MAX_KEY)
			break;
	}
	if (got == 0 || got > EGR_AUDIT_MAX_KEY) {
		log_error("audit key %s: changed while being read", file);
		ret = -EINVAL;
		goto out;
	}
	*key = buf;
	*len = got;
	buf = NULL;
	ret = 0;
out:
	if (buf) {
		OPENSSL_cleanse(buf, EGR_AUDIT_MAX_KEY + 1);
		free(buf);
	}
	if (ret && ret != -ENOMEM && ret != -EPERM && ret != -EINVAL && ret != -EFBIG)
		log_error("audit key %s: %s", file, strerror(-ret));
	close(fd);
	return ret;
}
