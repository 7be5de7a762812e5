// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The audit log's reading side (docs/audit.md): hashing, the line reader over
 * plain and gzip files, record parsing, the chain-state file, the rotated
 * files' names, the verifier and HMAC keys. The writer is audit.c; both
 * share audit_int.h.
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

#include "audit_read.h"
#include "fileio.h"
#include "log.h"
#include "audit_int.h"

const char egr_audit_zero_hash[EGR_AUDIT_HASH_HEX + 1] =
	"0000000000000000000000000000000000000000000000000000000000000000";

/* --- small helpers ----------------------------------------------------------- */

int egr_audit_hash_parts(const uint8_t *key, size_t keylen, const void *a, size_t alen,
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
	return egr_audit_hash_parts(key, keylen, data, len, "", 0, hex);
}

bool egr_audit_is_hash_hex(const char *s, size_t len)
{
	if (len != EGR_AUDIT_HASH_HEX)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

void egr_audit_rfc3339_now(char *buf, size_t len)
{
	struct timespec ts;
	struct tm tm;
	size_t n;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, len - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

char *egr_audit_strdup_printf(const char *fmt, ...)
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

int egr_audit_lr_open(struct lreader *r, const char *file)
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

void egr_audit_lr_close(struct lreader *r)
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
int egr_audit_lr_next(struct lreader *r, char **line, size_t *len, bool *nl)
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

/*
 * Parse and hash-check one line. On failure returns -EBADMSG with @why set.
 * @key NULL: the record must be unkeyed.
 */
int egr_audit_rec_parse(const char *line, size_t len, const uint8_t *key, size_t keylen,
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
	    !egr_audit_is_hash_hex(hx, EGR_AUDIT_HASH_HEX) || line[len - 2] != '"' || line[len - 1] != '}') {
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
	    !egr_audit_is_hash_hex(json_string_value(prev), json_string_length(prev))) {
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
	ret = egr_audit_hash_parts(key, keylen, line, len - SUFFIX_LEN, "}", 1, want);
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

int egr_audit_state_read(const char *path, uint64_t *seq, char hash[EGR_AUDIT_HASH_HEX + 1])
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
	/* egressd appends one line per update (macfile.h): the last is the
	 * state. (A file past this buffer was compacted long before.) */
	{
		size_t end = got, off = 0;
		const char *nl;

		if (end && buf[end - 1] == '\n')
			end--;
		nl = memrchr(buf, '\n', end);
		if (nl)
			off = (size_t)(nl + 1 - buf);
		o = json_loadb(buf + off, end - off, 0, &jerr);
	}
	s = json_object_get(o, "seq");
	h = json_object_get(o, "hash");
	if (json_is_integer(s) && json_integer_value(s) >= 0 && json_is_string(h) &&
	    egr_audit_is_hash_hex(json_string_value(h), json_string_length(h))) {
		*seq = (uint64_t)json_integer_value(s);
		memcpy(hash, json_string_value(h), EGR_AUDIT_HASH_HEX + 1);
		ret = 0;
	}
	json_decref(o);
	return ret;
}

/* --- rotated files ----------------------------------------------------------- */

static int cmp_rotated(const void *a, const void *b)
{
	const struct rotated *x = a, *y = b;

	return x->n < y->n ? -1 : x->n > y->n;
}

/* path.N and path.N.gz next to @path, ascending N, one entry per N. */
int egr_audit_scan_rotated(const char *path, struct rotated **out, size_t *nout)
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
	const struct egr_audit_anchor_rec *anchors; /* sorted by seq */
	size_t nanchors, next_anchor;
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
	ret = egr_audit_rec_parse(line, len, c->key, c->keylen, &r, &why);
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
		else if (strcmp(r.prev, egr_audit_zero_hash))
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
	/* Anchors of records before this one were passed by: checked already. */
	while (!ret && c->next_anchor < c->nanchors && c->anchors[c->next_anchor].seq <= r.seq) {
		const struct egr_audit_anchor_rec *an = &c->anchors[c->next_anchor++];

		if (an->seq == r.seq && strcmp(an->hash, r.hash))
			ret = vfail(res, -EBADMSG, file, lineno,
				    "record %" PRIu64 " differs from its anchor (log rewritten)",
				    r.seq);
		else if (an->seq < r.seq && !c->started && an->seq)
			ret = vfail(res, -EBADMSG, file, lineno,
				    "an anchor names seq %" PRIu64 ", before the chain's start",
				    an->seq);
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
	return egr_audit_verify_anchored(files, nfiles, key, keylen, state_path, NULL, 0, res);
}

static int anchor_cmp(const void *a, const void *b)
{
	const struct egr_audit_anchor_rec *x = a, *y = b;

	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int egr_audit_verify_anchored(const char *const *files, size_t nfiles, const uint8_t *key,
			      size_t keylen, const char *state_path,
			      struct egr_audit_anchor_rec *anchors, size_t nanchors,
			      struct egr_audit_verify_result *res)
{
	struct vctx c = { .key = key, .keylen = keylen, .res = res, .anchors = anchors,
			  .nanchors = nanchors };
	const char *last_file = nfiles ? files[nfiles - 1] : "";
	size_t lineno = 0;
	int ret;

	if (!res || (nfiles && !files) || (!key) != (!keylen))
		return -EINVAL;
	memset(res, 0, sizeof(*res));
	res->ok = true;
	if (nanchors)
		qsort(anchors, nanchors, sizeof(*anchors), anchor_cmp);
	/* The state first: a live writer only moves it forward after the log. */
	if (state_path) {
		ret = egr_audit_state_read(state_path, &c.st_seq, c.st_hash);
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

		ret = egr_audit_lr_open(&r, files[i]);
		if (ret)
			return vfail(res, ret, files[i], 0, "cannot open: %s", strerror(-ret));
		lineno = 0;
		while ((ret = egr_audit_lr_next(&r, &line, &len, &nl)) > 0) {
			lineno++;
			ret = verify_line(&c, files[i], lineno, line, len, nl);
			if (ret)
				break;
		}
		egr_audit_lr_close(&r);
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
	/* The anchors in order: the log must reach the newest (seq 0: an
	 * empty log's start, which any log reaches). */
	if (nanchors && c.seq < anchors[nanchors - 1].seq)
		return vfail(res, -EBADMSG, last_file, lineno + 1,
			     "log ends at seq %" PRIu64 " but an anchor names seq %" PRIu64
			     " (truncated)", c.seq, anchors[nanchors - 1].seq);
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
	ret = egr_audit_scan_rotated(path, &v, &nv);
	if (ret)
		return ret;
	out = calloc(nv + 1, sizeof(*out));
	if (!out) {
		free(v);
		return -ENOMEM;
	}
	for (size_t i = 0; i < nv; i++) {
		/* Both exist only between rename and unlink; the .gz is complete then. */
		out[k] = egr_audit_strdup_printf("%s.%" PRIu64 "%s", path, v[i].n, v[i].gz ? ".gz" : "");
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
