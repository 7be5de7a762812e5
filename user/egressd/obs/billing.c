// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Billing export. The order of writes is what makes it exact:
 *
 *   1. the interval's lines (each with its delta, its seq and the cumulative
 *      values exported so far) are appended and fsynced; a failure truncates
 *      the file back to where it was and nothing is exported;
 *   2. then billing.state (the cumulative values and the last seq) is
 *      replaced atomically.
 *
 * A crash between 1 and 2 leaves lines whose seq is beyond the state: the
 * next start takes the cumulative values from them. A crash during 1 leaves
 * at most a torn last line without its newline: the next start cuts it off
 * (it was never a complete record). So every counted byte is exported once.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "clock.h"
#include "billing.h"
#include "fileio.h"
#include "log.h"
#include "auditlog.h"
#include "macfile.h"

/* What is exported, in line order. The first six come from the kernel
 * tenant meter; the DNS counts from the proxy (in memory). */
enum { F_BYTES_OUT, F_BYTES_IN, F_PKTS_OUT, F_PKTS_IN, F_CONN_OK, F_CONN_DENY, F_DNS_OK,
       F_DNS_REFUSED, NF };
#define NKERNEL F_DNS_OK
static const char *const fnames[NF] = {
	"bytes_out",	      "bytes_in",	    "packets_out",	   "packets_in",
	"connections_allowed", "connections_denied", "dns_queries_allowed", "dns_queries_refused",
};

struct tenant_state {
	char *name;
	uint64_t exported[NF]; /* cumulative values exported so far */
	uint64_t dns_seen[2];  /* the proxy's in-memory counts at the last export */
	uint64_t last_end_ms;  /* end of the last exported interval (unix ms) */
};

struct egr_billing {
	struct egr_registry *reg;
	struct egr_metrics *m;
	char file[PATH_MAX], state[PATH_MAX];
	uint64_t seq;
	uint64_t offset; /* size of the file when the state was written */
	uint64_t started_ms;
	struct tenant_state *t;
	size_t nt;
	uint64_t lines, exports, failures, last_ok_ms;
	bool failing;         /* the last export failed: health reports it */
	char last_error[512]; /* what failed, for that report */
	uint8_t *key;         /* billing.state's MAC (macfile.h); NULL: none */
	size_t keylen;
	bool legacy_ok;       /* take a state without a MAC (its key was just made) */
	char tampered[256];   /* why the state was not trusted ("": it was) */
};

static void iso_ms(uint64_t ms, char *buf, size_t len)
{
	time_t s = (time_t)(ms / 1000);
	struct tm tm;
	char base[32];

	gmtime_r(&s, &tm);
	strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, len, "%s.%03uZ", base, (unsigned)(ms % 1000));
}

static struct tenant_state *tenant(struct egr_billing *b, const char *name, bool create)
{
	struct tenant_state *t;

	for (size_t i = 0; i < b->nt; i++)
		if (!strcmp(b->t[i].name, name))
			return &b->t[i];
	if (!create)
		return NULL;
	t = realloc(b->t, (b->nt + 1) * sizeof(*t));
	if (!t)
		return NULL;
	b->t = t;
	t = &b->t[b->nt];
	memset(t, 0, sizeof(*t));
	t->name = strdup(name);
	if (!t->name)
		return NULL;
	t->last_end_ms = b->started_ms;
	b->nt++;
	return t;
}

/* --- state -------------------------------------------------------------------------- */


static int save_state(struct egr_billing *b)
{
	json_t *o = json_pack("{s:i, s:I, s:I, s:{}}", "v", 1, "seq", (json_int_t)b->seq, "offset",
			      (json_int_t)b->offset, "tenants");
	json_t *ts = json_object_get(o, "tenants");
	int err;

	if (!o)
		return -ENOMEM;
	for (size_t i = 0; i < b->nt; i++) {
		json_t *t = json_pack("{s:I}", "last_end_ms", (json_int_t)b->t[i].last_end_ms);

		for (int f = 0; t && f < NF; f++)
			json_object_set_new(t, fnames[f], json_integer((json_int_t)b->t[i].exported[f]));
		json_object_set_new(ts, b->t[i].name, t);
	}
	if (b->key) {
		int aerr = 0;

		err = egr_macfile_write(b->state, o, b->key, b->keylen, &aerr);
		if (aerr)
			log_debug("billing: %s not append-only: %s", b->state, strerror(-aerr));
	} else {
		err = egr_replace_file_json(b->state, o, JSON_COMPACT | JSON_SORT_KEYS, 0600);
	}
	json_decref(o);
	return err;
}

/* Take a tenant's exported values from a state entry or a line's "cumulative". */
static void take_values(struct tenant_state *t, const json_t *o)
{
	for (int f = 0; f < NF; f++) {
		json_t *v = json_object_get(o, fnames[f]);

		if (json_is_integer(v))
			t->exported[f] = (uint64_t)json_integer_value(v);
	}
}

/* Does the billing file hold any line? (A missing state is then no first
 * start.) */
static bool file_has_lines(const struct egr_billing *b)
{
	struct stat st;

	return stat(b->file, &st) == 0 && st.st_size > 0;
}

static int load_state(struct egr_billing *b)
{
	json_error_t jerr;
	json_t *o = NULL, *ts, *v;
	const char *name, *why = NULL;
	int err;

	if (b->key) {
		err = egr_macfile_read(b->state, b->key, b->keylen, &o, &why);
		if (err == -EBADMSG && b->legacy_ok && (o = json_load_file(b->state, 0, &jerr))) {
			log_info("billing: %s has no MAC yet (written before this version); taken",
				 b->state);
			err = 0;
		}
		if (err == -ENOENT && file_has_lines(b))
			why = "missing while the billing file has lines";
		else if (err == -ENOENT)
			return 0; /* first start */
		else if (err && err != -EBADMSG)
			return err;
		if (err) {
			/* Not trusted: what was exported is what the lines say. */
			snprintf(b->tampered, sizeof(b->tampered), "billing.state %s",
				 why ? why : "fails its MAC");
			log_error("billing: %s %s; the exported values are taken from %s",
				  b->state, why ? why : "fails its MAC", b->file);
			return 0;
		}
	} else {
		o = json_load_file(b->state, 0, &jerr);
	}
	if (!o) {
		if (access(b->state, F_OK) == 0) {
			log_error("billing: %s is unreadable (%s); refusing to guess what was "
				  "exported", b->state, jerr.text);
			return -EBADMSG;
		}
		return 0; /* first start */
	}
	b->seq = (uint64_t)json_integer_value(json_object_get(o, "seq"));
	b->offset = (uint64_t)json_integer_value(json_object_get(o, "offset"));
	ts = json_object_get(o, "tenants");
	json_object_foreach(ts, name, v) {
		struct tenant_state *t = tenant(b, name, true);

		if (!t) {
			json_decref(o);
			return -ENOMEM;
		}
		take_values(t, v);
		t->last_end_ms = (uint64_t)json_integer_value(json_object_get(v, "last_end_ms"));
	}
	json_decref(o);
	return 0;
}

/* Is a line's cumulative its tenant's exported values plus its deltas? */
static bool line_follows(const struct tenant_state *t, const json_t *line, const json_t *cum)
{
	for (int f = 0; f < NKERNEL; f++) {
		json_t *c = json_object_get(cum, fnames[f]), *d = json_object_get(line, fnames[f]);

		if (!json_is_integer(c) || !json_is_integer(d) ||
		    (uint64_t)json_integer_value(c) !=
			    t->exported[f] + (uint64_t)json_integer_value(d))
			return false;
	}
	return true;
}

/* Cut a torn last line, then take over the lines beyond the state's seq. */
static int recover(struct egr_billing *b)
{
	struct stat st;
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	uint64_t start, taken = 0;
	FILE *f;
	int fd;

	fd = open(b->file, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return -errno;
	}
	if (st.st_size > 0) {
		/* Find the last newline; anything after it is a torn write. */
		off_t end = st.st_size, pos = end;
		char c = 0;

		while (pos > 0) {
			if (pread(fd, &c, 1, pos - 1) != 1)
				break;
			if (c == '\n')
				break;
			pos--;
		}
		if (pos != end) {
			log_warn("billing: %s ends in a torn line (%lld bytes); cutting it off",
				 b->file, (long long)(end - pos));
			if (ftruncate(fd, pos) < 0 || fsync(fd) < 0) {
				int err = -errno;

				close(fd);
				return err;
			}
			st.st_size = pos;
		}
	}
	/* Where the state was written; a rotated or truncated file is read whole. */
	start = b->offset;
	if ((uint64_t)st.st_size < start)
		start = 0;
	if (start > 0) {
		char c = 0;

		if (pread(fd, &c, 1, (off_t)start - 1) != 1 || c != '\n')
			start = 0;
	}
	f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		return -ENOMEM;
	}
	fseeko(f, (off_t)start, SEEK_SET);
	while ((n = getline(&line, &cap, f)) > 0) {
		json_t *o = json_loadb(line, (size_t)n, 0, NULL);
		const char *name = json_string_value(json_object_get(o, "tenant"));
		json_t *cum = json_object_get(o, "cumulative");
		uint64_t seq = (uint64_t)json_integer_value(json_object_get(o, "seq"));
		struct tenant_state *t;

		if (o && name && json_is_object(cum) && seq > b->seq) {
			t = tenant(b, name, true);
			if (t && !b->tampered[0] && !line_follows(t, o, cum)) {
				/* Lines beyond a trusted state come from a crash after
				 * their export: each follows from the state by its
				 * deltas. One that does not was written by hand. */
				snprintf(b->tampered, sizeof(b->tampered),
					 "line %llu of tenant %s does not follow from billing.state",
					 (unsigned long long)seq, name);
				log_error("billing: %s: %s; not taken", b->file, b->tampered);
				t = NULL;
			}
			if (t) {
				take_values(t, cum);
				t->last_end_ms = (uint64_t)json_integer_value(
					json_object_get(o, "interval_end_ms"));
				b->seq = seq;
				taken++;
			}
		}
		json_decref(o);
	}
	free(line);
	fclose(f);
	b->offset = (uint64_t)st.st_size;
	if (taken) {
		log_warn("billing: %llu line(s) of %s were beyond %s (a crash after the export); "
			 "state taken from them", (unsigned long long)taken, b->file, b->state);
		return save_state(b);
	}
	return 0;
}

/* --- export ------------------------------------------------------------------------- */

static void fail(struct egr_billing *b, const char *what, int err)
{
	char why[512];

	b->failures++;
	snprintf(why, sizeof(why), "%s %s: %s", what, b->file, strerror(-err));
	log_error("billing: export failed (%s); the deltas are kept for the next interval", why);
	b->failing = true;
	snprintf(b->last_error, sizeof(b->last_error), "%s", why);
}

struct pending {
	size_t t; /* index into b->t (which tenant() may move) */
	uint64_t cum[NF];
	uint64_t dns_now[2];
};

int egr_billing_export(struct egr_billing *b)
{
	struct egr_registry *r = b->reg;
	uint64_t end = egr_realtime_ms(), seq = b->seq;
	struct pending *pend = NULL;
	size_t npend = 0;
	char *buf = NULL;
	size_t blen = 0;
	FILE *mem;
	struct stat st;
	int fd, err = 0;

	pend = calloc(egr_reg_tenant_count(r) + 1, sizeof(*pend));
	mem = open_memstream(&buf, &blen);
	if (!pend || !mem) {
		if (mem)
			fclose(mem);
		free(buf);
		free(pend);
		fail(b, "prepare", -ENOMEM);
		return -ENOMEM;
	}
	for (uint32_t tid = 1; tid <= egr_reg_tenant_count(r); tid++) {
		const char *name = egr_reg_tenant_name(r, tid);
		struct tenant_state *t = tenant(b, name, true);
		struct egr_figures fg;
		uint64_t now[NF], delta[NF], any = 0;
		char s[40], e[40];
		json_t *line, *cum;

		if (!t) {
			err = -ENOMEM;
			break;
		}
		egr_metrics_tenant(b->m, tid, &fg);
		now[F_BYTES_OUT] = fg.m.bytes_out;
		now[F_BYTES_IN] = fg.m.bytes_in;
		now[F_PKTS_OUT] = fg.m.pkts_out;
		now[F_PKTS_IN] = fg.m.pkts_in;
		now[F_CONN_OK] = fg.m.conn_allowed;
		now[F_CONN_DENY] = fg.m.conn_denied;
		for (int f = 0; f < NKERNEL; f++) {
			if (now[f] < t->exported[f]) {
				/* The kernel meter restarted (maps recreated, e.g. after
				 * a reboot): all it holds is new. */
				log_warn("billing: tenant %s: %s went back from %llu to %llu; "
					 "counting from zero", name, fnames[f],
					 (unsigned long long)t->exported[f],
					 (unsigned long long)now[f]);
				t->exported[f] = 0;
			}
			delta[f] = now[f] - t->exported[f];
		}
		/* DNS counts live in this egressd's memory: deltas since the last
		 * export of this process (a crash loses at most one interval of
		 * them, never counts one twice). */
		delta[F_DNS_OK] = fg.dns_allowed - t->dns_seen[0];
		delta[F_DNS_REFUSED] = fg.dns_refused - t->dns_seen[1];
		if (fg.dns_allowed < t->dns_seen[0] || fg.dns_refused < t->dns_seen[1])
			delta[F_DNS_OK] = delta[F_DNS_REFUSED] = 0;
		for (int f = 0; f < NF; f++)
			any |= delta[f];
		if (!any)
			continue; /* only tenants with something to bill */

		pend[npend].t = (size_t)(t - b->t);
		pend[npend].dns_now[0] = fg.dns_allowed;
		pend[npend].dns_now[1] = fg.dns_refused;
		for (int f = 0; f < NF; f++)
			pend[npend].cum[f] = t->exported[f] + delta[f];
		iso_ms(t->last_end_ms ? t->last_end_ms : b->started_ms, s, sizeof(s));
		iso_ms(end, e, sizeof(e));
		line = json_pack("{s:i, s:s, s:s, s:s, s:I, s:I, s:I}", "v", 1, "tenant", name,
				 "interval_start", s, "interval_end", e, "seq",
				 (json_int_t)(seq + 1), "interval_start_ms",
				 (json_int_t)(t->last_end_ms ? t->last_end_ms : b->started_ms),
				 "interval_end_ms", (json_int_t)end);
		cum = json_object();
		if (!line || !cum) {
			json_decref(line);
			json_decref(cum);
			err = -ENOMEM;
			break;
		}
		for (int f = 0; f < NF; f++) {
			json_object_set_new(line, fnames[f], json_integer((json_int_t)delta[f]));
			json_object_set_new(cum, fnames[f],
					    json_integer((json_int_t)pend[npend].cum[f]));
		}
		json_object_set_new(line, "cumulative", cum);
		{
			char *text = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER);

			if (!text) {
				json_decref(line);
				err = -ENOMEM;
				break;
			}
			fprintf(mem, "%s\n", text);
			free(text);
		}
		json_decref(line);
		seq++;
		npend++;
	}
	if (fclose(mem) != 0 && !err)
		err = -ENOMEM;
	mem = NULL;
	if (err) {
		fail(b, "prepare", err);
		goto out;
	}
	if (!npend)
		goto out; /* nothing counted: nothing to write */

	fd = open(b->file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
	if (fd < 0) {
		err = -errno;
		fail(b, "open", err);
		goto out;
	}
	if (fstat(fd, &st) < 0) {
		err = -errno;
		close(fd);
		fail(b, "stat", err);
		goto out;
	}
	err = egr_write_all(fd, buf, blen);
	if (!err && fsync(fd) < 0)
		err = -errno;
	if (err) {
		/* Not exported: take the file back to where it was. */
		if (ftruncate(fd, st.st_size) < 0 || fsync(fd) < 0)
			log_error("billing: cannot cut the failed export off %s: %m; the next "
				  "start cuts a torn line, complete lines stand", b->file);
		close(fd);
		fail(b, "write", err);
		goto out;
	}
	close(fd);
	/* The lines are durable: they are exported. */
	for (size_t i = 0; i < npend; i++) {
		struct tenant_state *t = &b->t[pend[i].t];

		memcpy(t->exported, pend[i].cum, sizeof(pend[i].cum));
		t->dns_seen[0] = pend[i].dns_now[0];
		t->dns_seen[1] = pend[i].dns_now[1];
		t->last_end_ms = end;
	}
	b->seq = seq;
	b->offset = (uint64_t)st.st_size + blen;
	b->lines += npend;
	b->exports++;
	b->last_ok_ms = end;
	b->failing = false;
	err = save_state(b);
	if (err) {
		/* The lines carry the state: the next start recovers it. */
		fail(b, "save state", err);
		log_error("billing: %s not updated; %s has the state", b->state, b->file);
	}
out:
	free(buf);
	free(pend);
	return err;
}

static void on_tick(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	egr_billing_export(ctx);
}

static void metrics_source(void *ctx, struct egr_mbuf *mb)
{
	struct egr_billing *b = ctx;

	egr_mbuf_family(mb, "egressd_billing_lines_total", "counter",
			"Billing lines exported (one per tenant and interval with traffic).");
	egr_mbuf_printf(mb, "egressd_billing_lines_total %llu\n", (unsigned long long)b->lines);
	egr_mbuf_family(mb, "egressd_billing_export_failures_total", "counter",
			"Billing exports that failed (retried with the accumulated delta).");
	egr_mbuf_printf(mb, "egressd_billing_export_failures_total %llu\n",
			(unsigned long long)b->failures);
	egr_mbuf_family(mb, "egressd_billing_last_success_timestamp_seconds", "gauge",
			"When the last billing export succeeded.");
	egr_mbuf_printf(mb, "egressd_billing_last_success_timestamp_seconds %.3f\n",
			(double)b->last_ok_ms / 1000.0);
}

int egr_billing_start(struct egr_billing *b, struct egr_loop *loop, unsigned interval_s)
{
	int err;

	if (!interval_s)
		return -EINVAL;
	err = egr_loop_every(loop, interval_s * 1000u, on_tick, b);
	if (!err && b->m)
		err = egr_metrics_add_source(b->m, metrics_source, b);
	if (!err)
		log_info("billing: exporting every %u s to %s", interval_s, b->file);
	return err;
}

bool egr_billing_failing(const struct egr_billing *b, char *why, size_t len)
{
	if (!b || !b->failing)
		return false;
	snprintf(why, len, "%s", b->last_error);
	return true;
}

int egr_billing_new(struct egr_billing **out, struct egr_registry *reg, struct egr_metrics *m,
		    const char *file, const char *state_path, const uint8_t *key, size_t keylen,
		    bool legacy_ok)
{
	struct egr_billing *b = calloc(1, sizeof(*b));
	int err;

	if (!b)
		return -ENOMEM;
	if (key && keylen) {
		b->key = malloc(keylen);
		if (!b->key) {
			free(b);
			return -ENOMEM;
		}
		memcpy(b->key, key, keylen);
		b->keylen = keylen;
	}
	b->legacy_ok = legacy_ok;
	b->reg = reg;
	b->m = m;
	b->started_ms = egr_realtime_ms();
	if (snprintf(b->file, sizeof(b->file), "%s", file) >= (int)sizeof(b->file) ||
	    snprintf(b->state, sizeof(b->state), "%s", state_path) >= (int)sizeof(b->state)) {
		free(b);
		return -ENAMETOOLONG;
	}
	err = load_state(b);
	if (!err)
		err = recover(b);
	if (err) {
		egr_billing_free(b);
		return err;
	}
	*out = b;
	return 0;
}

void egr_billing_report_open(struct egr_billing *b, struct egr_auditlog *al)
{
	json_t *mism = json_array(), *detail;
	struct egr_registry *r;

	if (!b || !mism)
		goto out;
	r = b->reg;
	/* The kernel's meters against what the state says was exported: the
	 * kernel counts every byte since its maps were made, so an export can
	 * never be ahead of it. (Behind is normal: traffic while egressd was
	 * down, billed by the next export.) */
	for (uint32_t tid = 1; r && tid <= egr_reg_tenant_count(r); tid++) {
		const char *name = egr_reg_tenant_name(r, tid);
		struct tenant_state *t = name ? tenant(b, name, false) : NULL;
		struct egr_figures fg;
		uint64_t now[NKERNEL];

		if (!t)
			continue;
		egr_metrics_tenant(b->m, tid, &fg);
		now[F_BYTES_OUT] = fg.m.bytes_out;
		now[F_BYTES_IN] = fg.m.bytes_in;
		now[F_PKTS_OUT] = fg.m.pkts_out;
		now[F_PKTS_IN] = fg.m.pkts_in;
		now[F_CONN_OK] = fg.m.conn_allowed;
		now[F_CONN_DENY] = fg.m.conn_denied;
		for (int f = 0; f < NKERNEL; f++)
			if (t->exported[f] > now[f])
				json_array_append_new(
					mism, json_pack("{s:s, s:s, s:I, s:I}", "tenant", name, "field",
							fnames[f], "exported", (json_int_t)t->exported[f],
							"kernel", (json_int_t)now[f]));
	}
	if (!b->tampered[0] && !json_array_size(mism))
		goto out;
	detail = json_pack("{s:s, s:s, s:O}", "state", b->state, "reason",
			   b->tampered[0] ? b->tampered : "exported values ahead of the kernel meter",
			   "ahead_of_kernel", mism);
	egr_auditlog_tamper(al, "billing_state_tampered", 0, NULL,
			    "billing state not trusted: the next export bills from the kernel's "
			    "meters (docs/metering.md)",
			    detail);
out:
	json_decref(mism);
}

void egr_billing_free(struct egr_billing *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->nt; i++)
		free(b->t[i].name);
	free(b->t);
	if (b->key) {
		explicit_bzero(b->key, b->keylen);
		free(b->key);
	}
	free(b);
}
