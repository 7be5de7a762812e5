// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <openssl/crypto.h>

#include "clock.h"
#include "audit.h"
#include "cgroup.h"
#include "compile.h"
#include "dnsproxy.h"
#include "egr_decide.h"
#include "fileio.h"
#include "inspect.h"
#include "learned.h"
#include "log.h"
#include "sandbox.h"
#include "sockdiag.h"

static void fail(struct egr_fail *f, const char *code, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void fail(struct egr_fail *f, const char *code, const char *field, const char *fmt, ...)
{
	va_list ap;

	f->code = code;
	snprintf(f->e.field, sizeof(f->e.field), "%s", field ? field : "");
	va_start(ap, fmt);
	vsnprintf(f->e.message, sizeof(f->e.message), fmt, ap);
	va_end(ap);
}

static void fail_policy(struct egr_fail *f, const struct egr_error *e)
{
	f->code = "invalid_policy";
	snprintf(f->e.field, sizeof(f->e.field), "policy%s%s", e->field[0] ? "." : "", e->field);
	snprintf(f->e.message, sizeof(f->e.message), "%s", e->message);
}

static void sb_free(struct egr_sb *sb)
{
	if (!sb)
		return;
	free(sb->cgroup);
	free(sb->tenant);
	free(sb->execution_id);
	free(sb->principal);
	free(sb->tool);
	free(sb->version);
	free(sb->netns);
	free(sb->end_status);
	free(sb);
}

/* --- persistence ------------------------------------------------------------ */

static void state_path(const struct egr_registry *r, uint32_t id, char *buf, size_t len)
{
	snprintf(buf, len, "%s/sandboxes/%u.json", r->state_dir, id);
}


/*
 * State files are authenticated: the file is the compact, key-sorted JSON
 * of the state with a last member "mac", the HMAC-SHA-256 (key:
 * <state-dir>/state.key, which only egressd can read) of the exact bytes of
 * the file without that member. A file that fails the check, or names
 * another sandbox than its file name, is never acted on (docs/security.md).
 */
#define MAC_MEMBER ",\"mac\":\""
#define MAC_SUFFIX_LEN (sizeof(MAC_MEMBER) - 1 + EGR_AUDIT_HASH_HEX + 2) /* ,"mac":"<hex>"} */
#define STATE_MAX_BYTES (512u << 20)

static int write_state_obj(struct egr_registry *r, uint32_t id, const json_t *o)
{
	char path[PATH_MAX], mac[EGR_AUDIT_HASH_HEX + 1];
	char *body = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS), *buf;
	size_t len;
	int err;

	if (!body)
		return -ENOMEM;
	len = strlen(body);
	err = egr_hmac_sha256_hex(r->state_key, r->state_keylen, body, len, mac);
	buf = err ? NULL : malloc(len + MAC_SUFFIX_LEN + 2);
	if (!err && !buf)
		err = -ENOMEM;
	if (!err) {
		memcpy(buf, body, len - 1); /* without the closing brace */
		snprintf(buf + len - 1, MAC_SUFFIX_LEN + 3, "%s%s\"}\n", MAC_MEMBER, mac);
		state_path(r, id, path, sizeof(path));
		err = egr_replace_file(path, buf, strlen(buf), 0600);
		if (err)
			log_error("write state %s: %s", path, strerror(-err));
	}
	free(buf);
	free(body);
	return err;
}

/* The state of sandbox id, authenticated; NULL with why on failure
 * (-ENOENT in *errp when there is no file). With legacy non-NULL, a file
 * without a MAC is returned too (*legacy set) when the key was made at this
 * start: an earlier egressd wrote it, and only the kernel can confirm it. */
static json_t *read_state_obj(struct egr_registry *r, uint32_t id, char *why, size_t whylen,
			      int *errp, bool *legacy)
{
	char path[PATH_MAX], mac[EGR_AUDIT_HASH_HEX + 1];
	json_error_t jerr;
	json_t *o = NULL;
	char *buf = NULL;
	struct stat st;
	size_t len = 0;
	int fd, err = 0;

	state_path(r, id, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		err = -errno;
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		goto out;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > STATE_MAX_BYTES) {
		err = -EINVAL;
		snprintf(why, whylen, "%s is not a regular file of at most %u bytes", path,
			 STATE_MAX_BYTES);
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		err = -ENOMEM;
		snprintf(why, whylen, "out of memory");
		goto out;
	}
	while (len < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);

		if (n <= 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	if (len && buf[len - 1] == '\n')
		buf[--len] = '\0';
	err = -EBADMSG;
	if (legacy)
		*legacy = false;
	if (len < MAC_SUFFIX_LEN + 2 ||
	    memcmp(buf + len - MAC_SUFFIX_LEN, MAC_MEMBER, sizeof(MAC_MEMBER) - 1) != 0 ||
	    memcmp(buf + len - 2, "\"}", 2) != 0) {
		if (legacy && r->state_key_new && !strstr(buf, MAC_MEMBER)) {
			*legacy = true;
			goto parse;
		}
		snprintf(why, whylen, "%s has no MAC (not written by this egressd)", path);
		goto out;
	}
	/* The body the MAC covers: everything before ,"mac":..., closed. */
	memcpy(mac, buf + len - MAC_SUFFIX_LEN + sizeof(MAC_MEMBER) - 1, EGR_AUDIT_HASH_HEX);
	mac[EGR_AUDIT_HASH_HEX] = '\0';
	buf[len - MAC_SUFFIX_LEN] = '}';
	{
		char want[EGR_AUDIT_HASH_HEX + 1];

		if (egr_hmac_sha256_hex(r->state_key, r->state_keylen, buf,
					len - MAC_SUFFIX_LEN + 1, want) ||
		    CRYPTO_memcmp(want, mac, EGR_AUDIT_HASH_HEX) != 0) {
			snprintf(why, whylen, "%s fails its MAC check (edited)", path);
			goto out;
		}
	}
	len = len - MAC_SUFFIX_LEN + 1;
parse:
	o = json_loadb(buf, len, 0, &jerr);
	if (!o || !json_is_object(o)) {
		snprintf(why, whylen, "%s: %s", path, o ? "not an object" : jerr.text);
		json_decref(o);
		o = NULL;
		goto out;
	}
	if (json_integer_value(json_object_get(o, "id")) != (json_int_t)id) {
		snprintf(why, whylen, "%s names sandbox %lld (moved from another file)", path,
			 (long long)json_integer_value(json_object_get(o, "id")));
		json_decref(o);
		o = NULL;
		goto out;
	}
	err = 0;
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	if (errp)
		*errp = err;
	return o;
}

static int save_state(struct egr_registry *r, const struct egr_sb *sb, const json_t *policy)
{
	json_t *o;
	int err;

	o = json_pack("{s:I, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:O}", "id", (json_int_t)sb->id,
		      "state", "attached", "cgroup", sb->cgroup, "cgroup_id",
		      (json_int_t)sb->cgroup_id, "policy_id", (json_int_t)sb->policy_id,
		      "tenant_id", (json_int_t)sb->tenant_id, "attached_at",
		      (json_int_t)sb->attached_at, "updated_at", (json_int_t)sb->updated_at,
		      "policy", policy);
	if (!o)
		return -ENOMEM;
	json_object_set_new(o, "dns_port4", json_integer(sb->dns_port4));
	json_object_set_new(o, "dns_port6", json_integer(sb->dns_port6));
	json_object_set_new(o, "inspect_port4", json_integer(sb->inspect_port4));
	json_object_set_new(o, "inspect_port6", json_integer(sb->inspect_port6));
	if (sb->netns)
		json_object_set_new(o, "netns", json_string(sb->netns));
	if (sb->launcher.pid)
		json_object_set_new(o, "launcher", json_pack("{s:i, s:I}", "pid", sb->launcher.pid,
							     "start",
							     (json_int_t)sb->launcher.start));
	err = write_state_obj(r, sb->id, o);
	json_decref(o);
	return err;
}

static const char *held_state_name(enum egr_held_state s)
{
	return s == EGR_HELD_DETACHED ? "detached" : "tampered";
}

static int save_held_state(struct egr_registry *r, const struct egr_held *h)
{
	json_t *o = json_pack("{s:I, s:s, s:o, s:I, s:I, s:I, s:s}", "id", (json_int_t)h->id,
			      "state", held_state_name(h->state), "cgroup",
			      h->cgroup ? json_string(h->cgroup) : json_null(), "cgroup_id",
			      (json_int_t)h->cgroup_id, "tenant_id", (json_int_t)h->tenant_id,
			      "since", (json_int_t)h->since, "reason", h->reason);
	int err;

	if (!o)
		return -ENOMEM;
	err = write_state_obj(r, h->id, o);
	json_decref(o);
	return err;
}

static void drop_state(struct egr_registry *r, uint32_t id)
{
	char path[PATH_MAX];

	state_path(r, id, path, sizeof(path));
	if (unlink(path) < 0 && errno != ENOENT)
		log_warn("remove %s: %m", path);
}

/* Keep a file that failed its check, for whoever investigates. */
static void move_state_aside(struct egr_registry *r, uint32_t id)
{
	char path[PATH_MAX], aside[PATH_MAX + 32];

	state_path(r, id, path, sizeof(path));
	snprintf(aside, sizeof(aside), "%s.tampered-%lld", path, (long long)time(NULL));
	if (rename(path, aside) == 0)
		log_warn("kept the untrusted state file as %s", aside);
	else if (errno != ENOENT)
		log_warn("move %s aside: %m", path);
}

static json_t *load_state_policy(struct egr_registry *r, uint32_t id)
{
	char why[PATH_MAX + 128];
	json_t *o, *p;

	o = read_state_obj(r, id, why, sizeof(why), NULL, NULL);
	if (!o) {
		log_error("sandbox %u: %s", id, why);
		return NULL;
	}
	p = json_incref(json_object_get(o, "policy"));
	json_decref(o);
	return p;
}

/* The state key: 32 random bytes made at first start, mode 0400. */
static int state_key_load(struct egr_registry *r)
{
	char path[PATH_MAX];
	uint8_t key[32];
	int fd, err;

	snprintf(path, sizeof(path), "%s/state.key", r->state_dir);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0400);
	if (fd >= 0) {
		err = getrandom(key, sizeof(key), 0) == (ssize_t)sizeof(key) ? 0 : -EIO;
		if (!err)
			err = egr_write_all(fd, key, sizeof(key));
		if (!err && fsync(fd) < 0)
			err = -errno;
		close(fd);
		explicit_bzero(key, sizeof(key));
		if (!err)
			err = egr_fsync_parent(path);
		if (err) {
			unlink(path);
			log_error("create %s: %s", path, strerror(-err));
			return err;
		}
		log_info("created the state files' HMAC key %s", path);
		r->state_key_new = true;
	} else if (errno != EEXIST) {
		err = -errno;
		log_error("create %s: %s", path, strerror(-err));
		return err;
	}
	err = egr_audit_load_key(path, &r->state_key, &r->state_keylen);
	if (err)
		log_error("state key %s: %s", path,
			  err == -EPERM ? "group or other can access it (it must be 0400)"
					: strerror(-err));
	return err;
}

/* --- ids and tenants ---------------------------------------------------------- */

/* Tenant ids index the kernel's tenant meters and quotas, which outlive
 * egressd: <state-dir>/tenants.json keeps the name of every id ever given
 * out, so a restarted egressd (and its billing export) maps them the same. */
static void tenants_path(const struct egr_registry *r, char *buf, size_t len)
{
	snprintf(buf, len, "%s/tenants.json", r->state_dir);
}

static int tenants_save(struct egr_registry *r)
{
	char path[PATH_MAX];
	json_t *o = json_object(), *arr = json_array();
	int err;

	if (!o || !arr) {
		json_decref(o);
		json_decref(arr);
		return -ENOMEM;
	}
	for (size_t i = 0; i < r->ntenants; i++)
		json_array_append_new(arr, json_string(r->tenants[i]));
	json_object_set_new(o, "tenants", arr);
	tenants_path(r, path, sizeof(path));
	err = egr_replace_file_json(path, o, JSON_COMPACT, 0600);
	json_decref(o);
	if (err)
		log_error("write %s: %s", path, strerror(-err));
	return err;
}

static void tenants_load(struct egr_registry *r)
{
	char path[PATH_MAX];
	json_error_t jerr;
	json_t *o, *arr, *v;
	size_t i;

	tenants_path(r, path, sizeof(path));
	o = json_load_file(path, 0, &jerr);
	if (!o)
		return; /* first start */
	arr = json_object_get(o, "tenants");
	r->tenants = calloc(json_array_size(arr) + 1, sizeof(*r->tenants));
	json_array_foreach(arr, i, v) {
		if (!r->tenants || !json_is_string(v))
			break;
		r->tenants[i] = strdup(json_string_value(v));
		if (!r->tenants[i])
			break;
		r->ntenants = i + 1;
	}
	json_decref(o);
}

static uint32_t tenant_id(struct egr_registry *r, const char *tenant)
{
	char **nt;

	for (size_t i = 0; i < r->ntenants; i++)
		if (strcmp(r->tenants[i], tenant) == 0)
			return (uint32_t)(i + 1);
	nt = realloc(r->tenants, (r->ntenants + 1) * sizeof(*nt));
	if (!nt)
		return 0;
	r->tenants = nt;
	nt[r->ntenants] = strdup(tenant);
	if (!nt[r->ntenants])
		return 0;
	++r->ntenants;
	tenants_save(r);
	return (uint32_t)r->ntenants;
}

static uint32_t alloc_policy_id(struct egr_registry *r)
{
	uint32_t id = r->next_policy_id++;

	if (r->next_policy_id == EGR_ID_NONE)
		r->next_policy_id = 1;
	return id;
}

static int reg_add(struct egr_registry *r, struct egr_sb *sb)
{
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 16;
		struct egr_sb **n = realloc(r->sbs, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		r->sbs = n;
		r->cap = cap;
	}
	r->sbs[r->n++] = sb;
	return 0;
}

static void reg_remove(struct egr_registry *r, struct egr_sb *sb)
{
	for (size_t i = 0; i < r->n; i++) {
		if (r->sbs[i] == sb) {
			r->sbs[i] = r->sbs[--r->n];
			return;
		}
	}
}

struct egr_sb *egr_reg_find(struct egr_registry *r, const char *cgroup, uint32_t id)
{
	char real[PATH_MAX];

	if (cgroup && !realpath(cgroup, real))
		snprintf(real, sizeof(real), "%s", cgroup);
	for (size_t i = 0; i < r->n; i++) {
		if (cgroup && strcmp(r->sbs[i]->cgroup, real) == 0)
			return r->sbs[i];
		if (!cgroup && r->sbs[i]->id == id)
			return r->sbs[i];
	}
	return NULL;
}

static bool path_within(const char *cgroup, const char *path)
{
	size_t len = strlen(cgroup);

	return strncmp(cgroup, path, len) == 0 && (path[len] == '\0' || path[len] == '/');
}

bool egr_reg_confines(struct egr_registry *r, const char *path)
{
	for (size_t i = 0; i < r->n; i++)
		if (path_within(r->sbs[i]->cgroup, path))
			return true;
	for (size_t i = 0; i < r->nheld; i++)
		if (r->held[i].cgroup && path_within(r->held[i].cgroup, path))
			return true;
	return false;
}

/* --- held sandboxes (deny-all, no policy of their own) ------------------------ */

struct egr_held *egr_reg_find_held(struct egr_registry *r, const char *cgroup, uint32_t id)
{
	char real[PATH_MAX];

	if (cgroup && !realpath(cgroup, real))
		snprintf(real, sizeof(real), "%s", cgroup);
	for (size_t i = 0; i < r->nheld; i++) {
		if (cgroup && r->held[i].cgroup && strcmp(r->held[i].cgroup, real) == 0)
			return &r->held[i];
		if (!cgroup && r->held[i].id == id)
			return &r->held[i];
	}
	return NULL;
}

size_t egr_reg_held_count(const struct egr_registry *r, enum egr_held_state state)
{
	size_t n = 0;

	for (size_t i = 0; i < r->nheld; i++)
		n += r->held[i].state == state;
	return n;
}

static struct egr_held *held_add(struct egr_registry *r, uint32_t id, uint32_t tenant_id,
				 uint64_t cgroup_id, const char *cgroup,
				 enum egr_held_state state, const char *reason, time_t since)
{
	struct egr_held *h;

	if (r->nheld == r->capheld) {
		size_t cap = r->capheld ? r->capheld * 2 : 16;
		struct egr_held *n = realloc(r->held, cap * sizeof(*n));

		if (!n)
			return NULL;
		r->held = n;
		r->capheld = cap;
	}
	h = &r->held[r->nheld];
	memset(h, 0, sizeof(*h));
	if (cgroup && !(h->cgroup = strdup(cgroup)))
		return NULL;
	h->id = id;
	h->tenant_id = tenant_id;
	h->cgroup_id = cgroup_id;
	h->state = state;
	h->since = since;
	snprintf(h->reason, sizeof(h->reason), "%s", reason ? reason : "");
	r->nheld++;
	return h;
}

static void held_remove(struct egr_registry *r, struct egr_held *h)
{
	free(h->cgroup);
	*h = r->held[--r->nheld];
}

/* Every hook denies: policy id 0 is never given out, so no rule exists
 * under it; no DNS port, no special sockets, no inbound. */
static int kernel_deny_all(struct egr_registry *r, uint32_t id, uint32_t tenant_id)
{
	struct egr_sandbox ksb = { .policy_id = EGR_ID_NONE, .tenant_id = tenant_id };
	int err = egr_bpf_put_sandbox(r->bpf, id, &ksb);

	if (err) {
		/* No entry at all denies everything too (fail closed). */
		log_error("sandbox %u: write its deny-all entry: %s; removing the entry instead",
			  id, strerror(-err));
		egr_bpf_del_sandbox(r->bpf, id);
	}
	return err;
}

/* End every TCP and UDP socket of the cgroup (and the cgroups below it),
 * in egressd's network namespace and in the sandbox's: a socket handed out
 * of the sandbox keeps the sandbox's cgroup, so nothing it held may live
 * on with a connection the sandbox's policy once allowed. */
static unsigned destroy_sockets(uint32_t id, const char *cgroup, uint64_t cgroup_id,
				const char *netns)
{
	uint64_t *ids = NULL, one = cgroup_id;
	unsigned here = 0, there = 0;
	size_t n = 0;
	int err = 0, fd;

	if (!cgroup || egr_cgroup_subtree_ids(cgroup, &ids, &n) || !n) {
		free(ids);
		ids = NULL;
		n = 1; /* removed already: its sockets still carry its id */
	}
	err = egr_sockdiag_destroy_all(-1, ids ? ids : &one, n, &here);
	if (netns) {
		fd = open(netns, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			log_error("sandbox %u: open its network namespace %s: %m", id, netns);
			err = err ? err : -errno;
		} else {
			int e = egr_sockdiag_destroy_all(fd, ids ? ids : &one, n, &there);

			err = err ? err : e;
			close(fd);
		}
	}
	if (err)
		log_error("sandbox %u: destroying its sockets: %s (%u destroyed)", id,
			  strerror(-err), here + there);
	else if (here + there)
		log_info("sandbox %u: destroyed %u socket(s)%s", id, here + there,
			 netns ? " (its network namespace included)" : "");
	free(ids);
	return here + there;
}

/* The kernel released the cgroup (its links are defunct): nothing of the
 * sandbox can run any more; drop links, entries and state. */
static void release_held(struct egr_registry *r, struct egr_held *h)
{
	uint32_t id = h->id;

	if (egr_bpf_detach(r->bpf, id)) {
		log_warn("sandbox %u: its links could not be released; retrying later", id);
		return;
	}
	egr_bpf_del_sandbox(r->bpf, id);
	egr_bpf_forget_sandbox_stats(r->bpf, id);
	drop_state(r, id);
	log_info("sandbox %u: cgroup %s released by the kernel; links and entries reclaimed", id,
		 h->cgroup ? h->cgroup : "(unknown)");
	held_remove(r, h);
}

void egr_reg_reclaim(struct egr_registry *r)
{
	for (size_t i = 0; i < r->nheld;) {
		struct egr_held *h = &r->held[i];
		uint64_t cg = 0;
		int err = egr_bpf_links_cgroup_id(r->bpf, h->id, &cg);
		size_t before = r->nheld;

		if ((err == 0 && cg == 0) || err == -ENOENT)
			release_held(r, h);
		if (r->nheld == before)
			i++;
	}
}

json_t *egr_held_json(const struct egr_held *h)
{
	char buf[32];
	struct tm tm;

	gmtime_r(&h->since, &tm);
	strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
	return json_pack("{s:I, s:o, s:I, s:s, s:s, s:s, s:s}", "id", (json_int_t)h->id,
			 "cgroup", h->cgroup ? json_string(h->cgroup) : json_null(), "cgroup_id",
			 (json_int_t)h->cgroup_id, "state", held_state_name(h->state), "enforcing",
			 "deny-all until the cgroup is released", "since", buf, "reason", h->reason);
}

int egr_reg_detach_held(struct egr_registry *r, struct egr_held *h, struct egr_fail *f)
{
	struct egr_held next = *h;
	int err;

	if (h->state == EGR_HELD_DETACHED)
		return 0;
	next.state = EGR_HELD_DETACHED;
	snprintf(next.reason, sizeof(next.reason), "detached (was: %s)", h->reason);
	err = save_held_state(r, &next);
	if (err) {
		fail(f, "internal", NULL, "write state: %s", strerror(-err));
		return err;
	}
	h->state = EGR_HELD_DETACHED;
	memcpy(h->reason, next.reason, sizeof(h->reason));
	log_info("sandbox %u: held sandbox detached; deny-all until its cgroup is released",
		 h->id);
	return 0;
}

/* --- the policy as the kernel sees it ----------------------------------------- */

static void sb_set_meta(struct egr_sb *sb, struct egr_policy *p, const struct egr_compiled *c)
{
	free(sb->tenant);
	free(sb->execution_id);
	free(sb->principal);
	free(sb->tool);
	free(sb->version);
	/* Move the strings: the policy is freed right after. */
	sb->tenant = p->tenant;
	sb->execution_id = p->execution_id;
	sb->principal = p->principal;
	sb->tool = p->tool;
	sb->version = p->version;
	p->tenant = p->execution_id = p->principal = p->tool = p->version = NULL;
	memcpy(sb->sha256, p->sha256, sizeof(sb->sha256));
	sb->n4 = c->n4;
	sb->n6 = c->n6;
	sb->nnames = 0;
	sb->audit_mode = p->audit_mode;
	sb->breaker_max_denies = p->breaker_max_denies;
	sb->breaker_window_s = p->breaker_window_s;
	for (size_t i = 0; i < p->nallow; i++)
		if (p->allow[i].kind == EGR_HOST_NAME)
			sb->nnames++;
}

/* The kernel's view of a policy's switches. */
static uint32_t sandbox_flags(const struct egr_policy *p)
{
	return p->sb_flags | (p->inbound_allow ? EGR_SB_INBOUND_ALLOW : 0) |
	       (p->inspect ? EGR_SB_INSPECT : 0) |
	       (p->escape_alert ? EGR_SB_ESCAPE_ALERT : 0) |
	       (p->audit_mode ? EGR_SB_AUDIT : 0);
}

/* --- egress quotas (docs/metering.md) ----------------------------------------- */

/* The egr_sandboxes copy of the sandbox's own limit. */
static void quota_fields(struct egr_sandbox *ksb, const struct egr_policy *p)
{
	ksb->quota_bytes = p->quota_bytes;
	ksb->quota_window_ns = p->quota_bytes ? p->quota_window_s * 1000000000ULL : 0;
}

/* Set one egr_quota entry's limit and window. keep: an existing entry keeps
 * its running window and bytes (read-modify-write; what the kernel adds in
 * between the two calls is lost, a few packets at most). */
static int quota_put(int fd, uint32_t id, uint64_t limit, uint64_t window_ns, bool keep)
{
	struct egr_quota q = { 0 };

	if (!keep || bpf_map_lookup_elem(fd, &id, &q) < 0) {
		memset(&q, 0, sizeof(q));
		q.window_start_ns = egr_boot_ns();
	}
	q.limit_bytes = limit;
	q.window_ns = window_ns;
	return bpf_map_update_elem(fd, &id, &q, BPF_ANY) < 0 ? -errno : 0;
}

static int quota_del(int fd, uint32_t id)
{
	return bpf_map_delete_elem(fd, &id) < 0 && errno != ENOENT ? -errno : 0;
}

/* The tenant's quota: the limit of prefer if it sets one, else that of the
 * most recently updated live sandbox of the tenant that sets one (last
 * writer wins), else none. */
static int quota_sync_tenant(struct egr_registry *r, uint32_t tid, const struct egr_sb *prefer)
{
	const struct egr_sb *src = prefer && prefer->tenant_quota_bytes ? prefer : NULL;

	for (size_t i = 0; !src && i < r->n; i++) {
		const struct egr_sb *o = r->sbs[i];

		if (o == prefer || o->tenant_id != tid || !o->tenant_quota_bytes)
			continue;
		if (!src || o->updated_at > src->updated_at)
			src = o;
	}
	if (!src)
		return quota_del(r->bpf->fd_quota_tenant, tid);
	return quota_put(r->bpf->fd_quota_tenant, tid, src->tenant_quota_bytes,
			 src->quota_window_ns, true);
}

/* Write the quota maps for sb's policy p (attach: a fresh window; update and
 * adoption: the running window is kept). Failures are logged; the policy
 * stays in force, without its quota. */
static void quota_apply(struct egr_registry *r, struct egr_sb *sb, const struct egr_policy *p,
			bool fresh)
{
	int err;

	sb->quota_bytes = p->quota_bytes;
	sb->tenant_quota_bytes = p->tenant_quota_bytes;
	sb->quota_window_ns = p->quota_window_s * 1000000000ULL;
	if (sb->quota_bytes)
		err = quota_put(r->bpf->fd_quota_sb, sb->id, sb->quota_bytes, sb->quota_window_ns,
				!fresh);
	else
		err = quota_del(r->bpf->fd_quota_sb, sb->id);
	if (err)
		log_error("sandbox %u: write its egress quota: %s", sb->id, strerror(-err));
	err = quota_sync_tenant(r, sb->tenant_id, sb);
	if (err)
		log_error("sandbox %u: write tenant %u's egress quota: %s", sb->id, sb->tenant_id,
			  strerror(-err));
}

static int prepare_for(struct egr_registry *r, const json_t *policy, struct egr_policy *p,
		       struct egr_compiled *c, struct egr_fail *f);

/* Parse + compile; on error f says why. */
static int prepare(const json_t *policy, struct egr_policy *p, struct egr_compiled *c,
		   struct egr_fail *f)
{
	return prepare_for(NULL, policy, p, c, f);
}

/* The same, and refuse what this host cannot enforce (r non-NULL: a new
 * policy being applied, not one being adopted or reclaimed). */
static int prepare_for(struct egr_registry *r, const json_t *policy, struct egr_policy *p,
		       struct egr_compiled *c, struct egr_fail *f)
{
	struct egr_error e = { { 0 }, { 0 } };
	int err;

	err = egr_policy_from_json(policy, p, &e);
	if (err) {
		if (err == -EINVAL)
			fail_policy(f, &e);
		else
			fail(f, "internal", NULL, "parse policy: %s", strerror(-err));
		return err;
	}
	err = egr_policy_compile(p, c, &e);
	if (err) {
		if (err == -EINVAL)
			fail_policy(f, &e);
		else
			fail(f, "internal", NULL, "compile policy: %s", strerror(-err));
		egr_policy_free(p);
		return err;
	}
	if (r && p->trust_strict && !r->host_lsm_cgroup) {
		/* Without lsm_cgroup nothing in the kernel sees AF_PACKET, AF_XDP
		 * or AF_VSOCK sockets of a command not started by egressctl run
		 * (seccomp) or with the OCI profile: refuse rather than run it
		 * less confined than its trust class says. */
		f->code = "invalid_policy";
		snprintf(f->e.field, sizeof(f->e.field), "policy.network.trust");
		snprintf(f->e.message, sizeof(f->e.message),
			 "\"strict\" needs lsm_cgroup/socket_create to see every socket family, "
			 "and this host cannot load it (no BPF trampolines); use \"standard\" "
			 "with egressctl run or the OCI seccomp profile");
		egr_compiled_free(c);
		egr_policy_free(p);
		return -EINVAL;
	}
	return 0;
}

static void fail_rules(struct egr_fail *f, int err)
{
	if (err == -ENOSPC)
		fail(f, "no_space", NULL, "the allowlist maps are full; nothing was applied");
	else
		fail(f, "internal", NULL, "insert rules: %s; nothing was applied", strerror(-err));
}

/* Recompile a sandbox's stored policy to find the keys of its rules. */
static int delete_policy_rules(struct egr_registry *r, uint32_t sandbox_id, uint32_t policy_id,
			       const json_t *policy)
{
	struct egr_policy p = { 0 };
	struct egr_compiled c = { 0 };
	struct egr_fail f;
	int err;

	err = prepare(policy, &p, &c, &f);
	if (err) {
		log_warn("sandbox %u: cannot recompile its policy to reclaim rules of policy %u: %s",
			 sandbox_id, policy_id, f.e.message);
		return err;
	}
	err = egr_bpf_del_rules(r->bpf, policy_id, &c);
	egr_compiled_free(&c);
	egr_policy_free(&p);
	return err;
}

/* --- requests ----------------------------------------------------------------- */

static int check_cgroup(struct egr_registry *r, const char *cgroup, char *real,
			struct egr_fail *f)
{
	char mnt[PATH_MAX];
	size_t len;
	int err;

	if (!cgroup || cgroup[0] != '/') {
		fail(f, "bad_cgroup", "cgroup", "cgroup must be an absolute path");
		return -EINVAL;
	}
	if (!realpath(cgroup, real)) {
		err = -errno;
		fail(f, "bad_cgroup", "cgroup", "%s: %s", cgroup, strerror(-err));
		return err;
	}
	err = egr_cgroup_check(real);
	if (err) {
		fail(f, "bad_cgroup", "cgroup", "%s is not a cgroup v2 directory", real);
		return -EINVAL;
	}
	if (egr_cgroup2_mount(mnt, sizeof(mnt)) == 0 && strcmp(mnt, real) == 0) {
		fail(f, "bad_cgroup", "cgroup", "refusing to sandbox the root cgroup");
		return -EINVAL;
	}
	/* Confining egressd itself would cut it off from what it serves. */
	len = strlen(real);
	if (r->self_cgroup[0] && strncmp(r->self_cgroup, real, len) == 0 &&
	    (r->self_cgroup[len] == '\0' || r->self_cgroup[len] == '/')) {
		fail(f, "bad_cgroup", "cgroup", "%s contains egressd itself", real);
		return -EINVAL;
	}
	return 0;
}

/*
 * Open the sandbox's DNS proxy listeners (in its network namespace when it
 * has one) and hand the proxy its DNS policy. want4/want6: the ports it had
 * before a restart, so sockets the sandbox keeps keep working.
 */
static int start_dns(struct egr_registry *r, struct egr_sb *sb, const struct egr_policy *p,
		     uint16_t want4, uint16_t want6, struct egr_fail *f)
{
	struct egr_dnspolicy *dpol = NULL;
	struct egr_error e = { { 0 }, { 0 } };
	int netns_fd = -1, err;

	if (!r->dns)
		return 0;
	err = egr_dnspolicy_new(p, p->ndns_types ? p->dns_types : NULL, p->ndns_types, &dpol, &e);
	if (err) {
		if (err == -EINVAL)
			fail_policy(f, &e);
		else
			fail(f, "internal", NULL, "DNS policy: %s", strerror(-err));
		return err;
	}
	if (sb->netns) {
		netns_fd = open(sb->netns, O_RDONLY | O_CLOEXEC);
		if (netns_fd < 0) {
			err = -errno;
			egr_dnspolicy_free(dpol);
			fail(f, "bad_request", "netns", "%s: %s", sb->netns, strerror(-err));
			return err;
		}
	}
	/* The proxy owns dpol from here, even on error. */
	err = egr_dnsproxy_add_sandbox(r->dns, sb->id, p->tenant, dpol, netns_fd, want4, want6,
				       &sb->dns_port4, &sb->dns_port6);
	if (netns_fd >= 0)
		close(netns_fd);
	if (err)
		fail(f, "internal", NULL, "DNS proxy listeners for sandbox %u: %s", sb->id,
		     strerror(-err));
	return err;
}

/*
 * The inspecting proxy's listeners and policy for a sandbox under
 * network.inspect (docs/inspect.md); removes them when the policy no
 * longer asks for inspection. Without a proxy the ports stay 0 and the
 * kernel refuses the sandbox's TCP: closed, not uninspected.
 */
static int start_inspect(struct egr_registry *r, struct egr_sb *sb, const struct egr_policy *p,
			 uint16_t want4, uint16_t want6, struct egr_fail *f)
{
	struct egr_dnspolicy *dpol = NULL;
	struct egr_error e = { { 0 }, { 0 } };
	int netns_fd = -1, err;

	if (!p->inspect || !r->inspect) {
		if (r->inspect)
			egr_inspect_remove_sandbox(r->inspect, sb->id);
		sb->inspect_port4 = sb->inspect_port6 = 0;
		if (p->inspect)
			log_error("sandbox %u: no inspecting proxy: its TCP is denied", sb->id);
		return 0;
	}
	err = egr_dnspolicy_new(p, NULL, 0, &dpol, &e);
	if (err) {
		if (err == -EINVAL)
			fail_policy(f, &e);
		else
			fail(f, "internal", NULL, "inspect policy: %s", strerror(-err));
		return err;
	}
	if (egr_inspect_has_sandbox(r->inspect, sb->id)) {
		err = egr_inspect_update_sandbox(r->inspect, sb->id, p, dpol);
		if (err)
			fail(f, "internal", NULL, "inspecting proxy: %s", strerror(-err));
		return err;
	}
	if (sb->netns) {
		netns_fd = open(sb->netns, O_RDONLY | O_CLOEXEC);
		if (netns_fd < 0) {
			err = -errno;
			egr_dnspolicy_free(dpol);
			fail(f, "bad_request", "netns", "%s: %s", sb->netns, strerror(-err));
			return err;
		}
	}
	err = egr_inspect_add_sandbox(r->inspect, sb->id, p->tenant, p, dpol, netns_fd, want4,
				      want6, &sb->inspect_port4, &sb->inspect_port6);
	if (netns_fd >= 0)
		close(netns_fd);
	if (err)
		fail(f, "internal", NULL, "inspecting proxy listeners for sandbox %u: %s", sb->id,
		     strerror(-err));
	return err;
}

static void close_refused(struct egr_registry *r, const struct egr_sb *sb,
			  const struct egr_compiled *c, bool inbound_allow, unsigned *closed);

/* The processes already in the cgroup get it as their home, for the escape
 * guard (bpf/escape.bpf.c). Enforcement does not depend on it, so a failure
 * is logged, not fatal: refusing the attach would leave the cgroup open. */
static void home_procs(struct egr_registry *r, const struct egr_sb *sb, const char *cgroup)
{
	size_t n = 0;
	int err = egr_bpf_home_procs(r->bpf, cgroup, sb->cgroup_id, sb->id, &n);

	if (err)
		log_warn("sandbox %u: escape guard: mark the processes in %s: %s (marked %zu)",
			 sb->id, cgroup, strerror(-err), n);
	else if (n)
		log_debug("sandbox %u: escape guard: %zu processes already in %s", sb->id, n,
			  cgroup);
}

int egr_reg_attach(struct egr_registry *r, const char *cgroup, const char *netns,
		   const json_t *policy, const struct egr_launcher *launcher,
		   struct egr_sb **out, struct egr_fail *f)
{
	char real[PATH_MAX];
	struct egr_policy p = { 0 };
	struct egr_compiled c = { 0 };
	struct egr_sandbox ksb = { 0 };
	struct egr_sb *sb;
	struct egr_held *held;
	uint32_t reuse_id = 0;
	int err;

	err = check_cgroup(r, cgroup, real, f);
	if (err)
		return err;
	err = prepare_for(r, policy, &p, &c, f);
	if (err)
		return err;
	sb = egr_reg_find(r, real, 0);
	if (sb) {
		/* The same cgroup with the same policy (and netns): a retried
		 * request (an OCI hook run twice) gets the sandbox in force. */
		bool same = strcmp(sb->sha256, p.sha256) == 0 &&
			    !sb->netns == !netns && (!netns || strcmp(sb->netns, netns) == 0) &&
			    sb->launcher.pid == (launcher ? launcher->pid : 0) &&
			    sb->launcher.start == (launcher ? launcher->start : 0);

		egr_compiled_free(&c);
		egr_policy_free(&p);
		if (!same) {
			fail(f, "exists", "cgroup",
			     "%s is already a sandbox with another policy; use update", real);
			return -EEXIST;
		}
		log_info("sandbox %u: attach of %s again with the same policy: nothing to do",
			 sb->id, real);
		*out = sb;
		return 0;
	}
	held = egr_reg_find_held(r, real, 0);
	if (held) {
		uint64_t now_cg = 0, link_cg = 0;

		/* A cgroup held under deny-all gets the new policy on its links
		 * in one switch; a new cgroup at an old path gets new links. */
		if (egr_cgroup_id(real, &now_cg) == 0 && now_cg == held->cgroup_id &&
		    egr_bpf_links_cgroup_id(r->bpf, held->id, &link_cg) == 0 && link_cg == now_cg)
			reuse_id = held->id;
		else
			release_held(r, held);
	}

	sb = calloc(1, sizeof(*sb));
	if (!sb || !(sb->cgroup = strdup(real))) {
		err = -ENOMEM;
		fail(f, "internal", NULL, "out of memory");
		goto err_free;
	}
	err = egr_cgroup_id(real, &sb->cgroup_id);
	if (err) {
		fail(f, "bad_cgroup", "cgroup", "cgroup id of %s: %s", real, strerror(-err));
		goto err_free;
	}
	sb->id = reuse_id ? reuse_id : r->next_sandbox_id++;
	sb->policy_id = alloc_policy_id(r);
	sb->tenant_id = tenant_id(r, p.tenant);
	sb->attached_at = sb->updated_at = time(NULL);
	if (launcher)
		sb->launcher = *launcher;
	if (!sb->tenant_id || (netns && !(sb->netns = strdup(netns)))) {
		err = -ENOMEM;
		fail(f, "internal", NULL, "out of memory");
		goto err_free;
	}
	err = start_dns(r, sb, &p, 0, 0, f);
	if (err)
		goto err_free;
	err = start_inspect(r, sb, &p, 0, 0, f);
	if (err)
		goto err_dns;

	/* Rules and the sandbox entry first, links last: the moment a link is
	 * in place its storage says "no sandbox" (deny) until we name it. */
	err = egr_bpf_put_rules(r->bpf, sb->policy_id, &c);
	if (err) {
		fail_rules(f, err);
		goto err_dns;
	}
	ksb.policy_id = sb->policy_id;
	ksb.tenant_id = sb->tenant_id;
	ksb.flags = sandbox_flags(&p);
	ksb.families = p.families;
	quota_fields(&ksb, &p);
	ksb.dns_port4 = sb->dns_port4;
	ksb.dns_port6 = sb->dns_port6;
	ksb.inspect_port4 = sb->inspect_port4;
	ksb.inspect_port6 = sb->inspect_port6;
	if (reuse_id) {
		/* Held: its links are in place. The switch from deny-all first,
		 * then the state: a crash in between leaves the state saying
		 * "detached", and the next start holds it under deny-all. */
		egr_bpf_forget_sandbox_stats(r->bpf, sb->id); /* a new execution */
		err = egr_bpf_put_sandbox(r->bpf, sb->id, &ksb);
		if (!err)
			err = save_state(r, sb, policy);
		if (err) {
			fail(f, "internal", NULL, "attach to held sandbox %u: %s", sb->id,
			     strerror(-err));
			kernel_deny_all(r, sb->id, held->tenant_id);
			goto err_rules;
		}
		held_remove(r, held);
		goto named;
	}
	err = egr_bpf_put_sandbox(r->bpf, sb->id, &ksb);
	if (err) {
		fail_rules(f, err);
		goto err_rules;
	}
	err = save_state(r, sb, policy);
	if (err) {
		fail(f, "internal", NULL, "write state: %s", strerror(-err));
		goto err_sandbox;
	}
	err = egr_bpf_attach(r->bpf, sb->id, real);
	if (err) {
		fail(f, "internal", NULL, "attach programs to %s: %s", real, strerror(-err));
		goto err_state;
	}
	err = egr_bpf_set_cgroup_sandbox(r->bpf, sb->cgroup_id, sb->id);
	if (err) {
		fail(f, "internal", NULL, "name sandbox in cgroup storage: %s", strerror(-err));
		goto err_links;
	}
named:
	if (reuse_id && egr_bpf_set_cgroup_sandbox(r->bpf, sb->cgroup_id, sb->id))
		log_warn("sandbox %u: cannot name it for the escape guard again", sb->id);
	home_procs(r, sb, real);
	err = reg_add(r, sb);
	if (err) {
		fail(f, "internal", NULL, "out of memory");
		if (reuse_id) {
			/* Back to held under deny-all; the next start finds it so. */
			struct egr_held h = { .id = sb->id, .tenant_id = sb->tenant_id,
					      .cgroup_id = sb->cgroup_id, .cgroup = sb->cgroup,
					      .state = EGR_HELD_DETACHED, .since = time(NULL) };

			save_held_state(r, &h);
			kernel_deny_all(r, sb->id, sb->tenant_id);
			goto err_rules;
		}
		goto err_links;
	}
	sb_set_meta(sb, &p, &c);
	quota_apply(r, sb, &p, true);
	log_info("sandbox %u attached to %s (tenant %s, policy %u: %zu v4, %zu v6 prefixes)",
		 sb->id, sb->cgroup, sb->tenant, sb->policy_id, sb->n4, sb->n6);
	{
		/* Sockets the cgroup already had were never judged (the
		 * backstop trusts connected ones): judge them now. */
		unsigned closed;

		if (!p.audit_mode)
			close_refused(r, sb, &c, p.inbound_allow, &closed);
	}
	if (r->hooks.attached)
		r->hooks.attached(r->hooks.ctx, sb, policy);
	egr_compiled_free(&c);
	egr_policy_free(&p);
	*out = sb;
	return 0;

err_links:
	egr_bpf_detach(r->bpf, sb->id);
	egr_bpf_forget_cgroup(r->bpf, sb->cgroup_id);
err_state:
	drop_state(r, sb->id);
err_sandbox:
	egr_bpf_del_sandbox(r->bpf, sb->id);
err_rules:
	egr_bpf_del_rules(r->bpf, sb->policy_id, &c);
err_dns:
	if (r->dns)
		egr_dnsproxy_remove_sandbox(r->dns, sb->id);
	if (r->inspect)
		egr_inspect_remove_sandbox(r->inspect, sb->id);
err_free:
	sb_free(sb);
	egr_compiled_free(&c);
	egr_policy_free(&p);
	return err;
}

struct peer_judge {
	const struct egr_compiled *c;
	struct egr_learned *learned;
	uint32_t sandbox_id;
	uint16_t inspect_port4, inspect_port6; /* its proxy re-judges those itself */
};

/* Would the new policy let a connected socket keep its peer: a static
 * rule, or an address its DNS policy still resolves? */
static bool peer_allowed(void *ctx, int family, const uint8_t *daddr, uint16_t dport, int protocol)
{
	const struct peer_judge *j = ctx;
	const struct egr_rule *rule;
	const uint8_t *a = daddr;
	uint32_t w[4], v4;
	int expired, v6 = family == AF_INET6;
	static const uint8_t lo4[4] = { 127, 0, 0, 1 }, lo6[16] = { [15] = 1 };

	/* A connection to the sandbox's inspecting proxy: the proxy knows its
	 * real destination and closes it if the new policy refuses it
	 * (egr_inspect_update_sandbox). */
	if (protocol == IPPROTO_TCP && dport &&
	    ((!v6 && dport == j->inspect_port4 && !memcmp(daddr, lo4, 4)) ||
	     (v6 && dport == j->inspect_port6 && !memcmp(daddr, lo6, 16))))
		return true;
	if (v6) {
		memcpy(w, daddr, sizeof(w));
		if (egr_ip6_is_v4mapped(w, &v4)) {
			a = (const uint8_t *)&v4;
			v6 = 0;
		}
	}
	rule = egr_compiled_lookup(j->c, v6, a);
	if (egr_rule_allows(rule, dport, (uint32_t)protocol, 0, &expired) == EGR_ALLOW)
		return true;
	return j->learned && egr_learned_allows(j->learned, j->sandbox_id, v6 ? AF_INET6 : AF_INET,
						a, dport, protocol);
}

/* End what the sandbox (and the cgroups it made) has open to peers the new
 * policy refuses: the hooks only judged them at connect time. */
static void close_refused(struct egr_registry *r, const struct egr_sb *sb,
			  const struct egr_compiled *c, bool inbound_allow, unsigned *closed)
{
	struct peer_judge j = { .c = c, .learned = r->learned, .sandbox_id = sb->id,
				.inspect_port4 = sb->inspect_port4,
				.inspect_port6 = sb->inspect_port6 };
	uint64_t *ids = NULL;
	size_t n = 0;
	int err;

	*closed = 0;
	err = egr_cgroup_subtree_ids(sb->cgroup, &ids, &n);
	if (!err)
		err = egr_sockdiag_destroy_refused(-1, ids, n, inbound_allow, peer_allowed, &j,
						   closed);
	if (!err && sb->netns) {
		/* Its sockets live in its own network namespace as well. */
		unsigned there = 0;
		int fd = open(sb->netns, O_RDONLY | O_CLOEXEC);

		err = fd < 0 ? -errno : egr_sockdiag_destroy_refused(fd, ids, n, inbound_allow,
								     peer_allowed, &j, &there);
		if (fd >= 0)
			close(fd);
		*closed += there;
	}
	if (err)
		log_error("sandbox %u: tearing down connections the new policy refuses: %s "
			  "(%u closed)", sb->id, strerror(-err), *closed);
	else if (*closed)
		log_info("sandbox %u: closed %u connection(s) the new policy refuses", sb->id,
			 *closed);
	free(ids);
}

int egr_reg_update(struct egr_registry *r, struct egr_sb *sb, const json_t *policy,
		   unsigned *closed, struct egr_fail *f)
{
	struct egr_policy p = { 0 };
	struct egr_compiled c = { 0 };
	struct egr_sandbox ksb = { 0 };
	struct egr_sb next;
	char old_sha[sizeof(sb->sha256)];
	uint32_t old_policy_id = sb->policy_id;
	struct egr_dnspolicy *dpol = NULL;
	struct egr_dnsproxy_local lc;
	struct egr_error e = { { 0 }, { 0 } };
	json_t *old_policy;
	int err;

	err = prepare_for(r, policy, &p, &c, f);
	if (err)
		return err;
	if (r->dns) {
		err = egr_dnspolicy_new(&p, p.ndns_types ? p.dns_types : NULL, p.ndns_types, &dpol, &e);
		if (err) {
			if (err == -EINVAL)
				fail_policy(f, &e);
			else
				fail(f, "internal", NULL, "DNS policy: %s", strerror(-err));
			egr_compiled_free(&c);
			egr_policy_free(&p);
			return err;
		}
	}
	/* Before the switch: the listeners must exist when the kernel starts
	 * redirecting to them (a policy turning inspection on). */
	err = start_inspect(r, sb, &p, sb->inspect_port4, sb->inspect_port6, f);
	if (err) {
		egr_dnspolicy_free(dpol);
		egr_compiled_free(&c);
		egr_policy_free(&p);
		return err;
	}
	old_policy = load_state_policy(r, sb->id);

	next = *sb;
	next.policy_id = alloc_policy_id(r);
	next.tenant_id = tenant_id(r, p.tenant);
	next.updated_at = time(NULL);
	if (!next.tenant_id) {
		err = -ENOMEM;
		fail(f, "internal", NULL, "out of memory");
		goto out;
	}
	/* Build the new rule set under a new policy id, beside the old one. */
	err = egr_bpf_put_rules(r->bpf, next.policy_id, &c);
	if (err) {
		fail_rules(f, err);
		goto out;
	}
	/* Persist first: a crash from here on is repaired at start by applying
	 * the stored (new) policy again. */
	err = save_state(r, &next, policy);
	if (err) {
		fail(f, "internal", NULL, "write state: %s", strerror(-err));
		egr_bpf_del_rules(r->bpf, next.policy_id, &c);
		goto out;
	}
	/* DNS-learned addresses the new policy still resolves move to the new
	 * id, with the new policy's ports; the rest are dropped. */
	lc.p = r->dns;
	lc.sandbox_id = sb->id;
	if (r->learned && egr_learned_rebase_local(r->learned, sb->id, old_policy_id,
						   next.policy_id, dpol,
						   r->dns ? egr_dnsproxy_is_local : NULL, &lc))
		log_warn("sandbox %u: some DNS-learned addresses did not fit the new policy's "
			 "rules; they need resolving again", sb->id);
	/* The switch: one map update, so every hook sees the old policy or the
	 * new one, never a mix. */
	ksb.policy_id = next.policy_id;
	ksb.tenant_id = next.tenant_id;
	ksb.flags = sandbox_flags(&p);
	ksb.families = p.families;
	quota_fields(&ksb, &p);
	ksb.dns_port4 = sb->dns_port4;
	ksb.dns_port6 = sb->dns_port6;
	ksb.inspect_port4 = sb->inspect_port4;
	ksb.inspect_port6 = sb->inspect_port6;
	/* A policy update does not lift a quarantine: only release does. */
	ksb.quarantined = sb->quarantined;
	err = egr_bpf_put_sandbox(r->bpf, sb->id, &ksb);
	if (err) {
		fail(f, "internal", NULL, "switch sandbox %u to the new policy: %s", sb->id,
		     strerror(-err));
		egr_bpf_del_rules(r->bpf, next.policy_id, &c);
		if (old_policy)
			save_state(r, sb, old_policy);
		goto out;
	}
	if (r->learned)
		egr_learned_drop_stale(r->learned, sb->id);
	memcpy(old_sha, sb->sha256, sizeof(old_sha));
	sb->policy_id = next.policy_id;
	sb->tenant_id = next.tenant_id;
	sb->updated_at = next.updated_at;
	sb_set_meta(sb, &p, &c);
	quota_apply(r, sb, &p, false);
	if (r->dns) {
		/* The proxy owns dpol from here. */
		if (egr_dnsproxy_update_sandbox(r->dns, sb->id, dpol))
			log_error("sandbox %u: DNS proxy kept the old DNS policy", sb->id);
		dpol = NULL;
	}
	/* Audit mode refuses nothing; an update to enforce tears down. */
	*closed = 0;
	if (!p.audit_mode)
		close_refused(r, sb, &c, p.inbound_allow, closed);
	if (r->hooks.updated)
		r->hooks.updated(r->hooks.ctx, sb, old_sha, policy, *closed);
	/* Reclaim the old rule set; nothing refers to it any more. */
	if (old_policy)
		delete_policy_rules(r, sb->id, old_policy_id, old_policy);
	else
		log_warn("sandbox %u: old policy %u not reclaimed (state unreadable); the next "
			 "start collects it", sb->id, old_policy_id);
	log_info("sandbox %u updated: policy %u -> %u (%zu v4, %zu v6 prefixes)", sb->id,
		 old_policy_id, sb->policy_id, sb->n4, sb->n6);
out:
	egr_dnspolicy_free(dpol);
	json_decref(old_policy);
	egr_compiled_free(&c);
	egr_policy_free(&p);
	return err;
}

int egr_reg_set_quarantine(struct egr_registry *r, struct egr_sb *sb, bool on, unsigned *closed,
			   struct egr_fail *f)
{
	struct egr_sandbox ksb;
	int err;

	*closed = 0;
	err = egr_bpf_get_sandbox(r->bpf, sb->id, &ksb);
	if (err) {
		fail(f, "internal", NULL, "read sandbox %u: %s", sb->id, strerror(-err));
		return err;
	}
	/* The one map update that switches every hook of the sandbox. */
	ksb.quarantined = on ? 1 : 0;
	err = egr_bpf_put_sandbox(r->bpf, sb->id, &ksb);
	if (err) {
		fail(f, "internal", NULL, "%s sandbox %u: %s", on ? "quarantine" : "release",
		     sb->id, strerror(-err));
		return err;
	}
	sb->quarantined = on;
	sb->quarantined_at = on ? time(NULL) : 0;
	if (!on)
		return 0;
	/* Established connections were judged at connect time: end them all,
	 * in its network namespace too (the backstop already drops their
	 * packets). */
	*closed = destroy_sockets(sb->id, sb->cgroup, sb->cgroup_id, sb->netns);
	return 0;
}

/* Tear down everything of a sandbox, links first so that no program runs
 * against a half-removed policy. */
static int teardown(struct egr_registry *r, uint32_t id, uint32_t policy_id, const json_t *policy)
{
	int err, ret = 0;

	err = egr_bpf_detach(r->bpf, id);
	if (err) {
		log_error("sandbox %u: detach links: %s", id, strerror(-err));
		return err; /* keep the rest: still enforced, retry possible */
	}
	if ((err = egr_bpf_del_sandbox(r->bpf, id)))
		ret = err;
	egr_bpf_forget_sandbox_stats(r->bpf, id);
	if (r->dns)
		egr_dnsproxy_remove_sandbox(r->dns, id);
	if (r->inspect)
		egr_inspect_remove_sandbox(r->inspect, id);
	if (r->learned)
		egr_learned_forget(r->learned, id, policy_id);
	if (policy)
		delete_policy_rules(r, id, policy_id, policy);
	drop_state(r, id);
	return ret;
}

/*
 * End the sandbox's policy but not its confinement: the state file says
 * "detached" first (a restart holds it under deny-all from there on), then
 * one map update switches the kernel entry to deny-all and every socket of
 * the cgroup is destroyed. The links stay until the kernel releases the
 * cgroup (egr_reg_reclaim). Then what belonged to the policy goes.
 */
static int retire(struct egr_registry *r, const struct egr_sb *sb, const json_t *policy,
		  struct egr_fail *f)
{
	struct egr_held h = { .id = sb->id, .tenant_id = sb->tenant_id,
			      .cgroup_id = sb->cgroup_id, .cgroup = sb->cgroup,
			      .state = EGR_HELD_DETACHED, .since = time(NULL) };
	int err;

	snprintf(h.reason, sizeof(h.reason), "detached");
	err = save_held_state(r, &h);
	if (err) {
		fail(f, "internal", NULL, "detach sandbox %u: write state: %s", sb->id,
		     strerror(-err));
		return err;
	}
	kernel_deny_all(r, sb->id, sb->tenant_id);
	destroy_sockets(sb->id, sb->cgroup, sb->cgroup_id, sb->netns);
	if (r->dns)
		egr_dnsproxy_remove_sandbox(r->dns, sb->id);
	if (r->learned)
		egr_learned_forget(r->learned, sb->id, sb->policy_id);
	if (policy)
		delete_policy_rules(r, sb->id, sb->policy_id, policy);
	egr_bpf_forget_sandbox_stats(r->bpf, sb->id);
	if (!held_add(r, sb->id, sb->tenant_id, sb->cgroup_id, sb->cgroup, EGR_HELD_DETACHED,
		      h.reason, h.since))
		log_error("sandbox %u: out of memory; held under deny-all, reclaimed at the next "
			  "start", sb->id);
	return 0;
}

int egr_reg_detach(struct egr_registry *r, struct egr_sb *sb, json_t **snapshot,
		   struct egr_fail *f)
{
	json_t *policy = load_state_policy(r, sb->id);
	int err;

	if (r->hooks.detaching)
		r->hooks.detaching(r->hooks.ctx, sb);
	err = retire(r, sb, policy, f);
	json_decref(policy);
	if (err)
		return err;
	/* Leaving a detached cgroup is no escape. */
	egr_bpf_forget_cgroup(r->bpf, sb->cgroup_id);
	log_info("sandbox %u detached from %s; deny-all until the kernel releases the cgroup",
		 sb->id, sb->cgroup);
	if (snapshot)
		*snapshot = egr_sb_json(sb);
	reg_remove(r, sb);
	quota_sync_tenant(r, sb->tenant_id, NULL); /* another sandbox's tenant limit, or none */
	sb_free(sb);
	return 0;
}

static json_t *sb_json_base(const struct egr_sb *sb);

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

static json_t *iso_time(time_t t)
{
	char buf[32];
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
	return json_string(buf);
}

json_t *egr_sb_json(const struct egr_sb *sb)
{
	json_t *o = sb_json_base(sb);

	if (o) {
		json_object_set_new(o, "mode", json_string(sb->audit_mode ? "audit" : "enforce"));
		json_object_set_new(o, "quarantined", json_boolean(sb->quarantined));
		if (sb->quarantined)
			json_object_set_new(o, "quarantined_at", iso_time(sb->quarantined_at));
		json_object_set_new(o, "netns", str_or_null(sb->netns));
		json_object_set_new(o, "launcher_pid", sb->launcher.pid
							       ? json_integer(sb->launcher.pid)
							       : json_null());
		json_object_set_new(o, "dns", json_pack("{s:i, s:i}", "port4", sb->dns_port4,
							 "port6", sb->dns_port6));
		if (sb->inspect_port4 || sb->inspect_port6)
			json_object_set_new(o, "inspect",
					    json_pack("{s:i, s:i}", "port4", sb->inspect_port4,
						      "port6", sb->inspect_port6));
	}
	return o;
}

static json_t *sb_json_base(const struct egr_sb *sb)
{
	return json_pack("{s:I, s:s, s:I, s:o, s:o, s:o, s:o, s:o, s:I, s:s, s:{s:I, s:I, s:I},"
			 " s:o, s:o}",
			 "id", (json_int_t)sb->id, "cgroup", sb->cgroup, "cgroup_id",
			 (json_int_t)sb->cgroup_id, "tenant", str_or_null(sb->tenant),
			 "execution_id", str_or_null(sb->execution_id), "principal",
			 str_or_null(sb->principal), "tool", str_or_null(sb->tool), "version",
			 str_or_null(sb->version), "policy_id", (json_int_t)sb->policy_id,
			 "policy_sha256", sb->sha256, "rules", "v4", (json_int_t)sb->n4, "v6",
			 (json_int_t)sb->n6, "names", (json_int_t)sb->nnames, "attached_at",
			 iso_time(sb->attached_at), "updated_at", iso_time(sb->updated_at));
}

/* --- adoption at start ------------------------------------------------------- */

static void read_self_cgroup(struct egr_registry *r)
{
	char mnt[PATH_MAX], line[4096];
	FILE *f = fopen("/proc/self/cgroup", "r");

	r->self_cgroup[0] = '\0';
	if (!f || egr_cgroup2_mount(mnt, sizeof(mnt)) < 0) {
		if (f)
			fclose(f);
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "0::", 3) == 0) {
			line[strcspn(line, "\n")] = '\0';
			snprintf(r->self_cgroup, sizeof(r->self_cgroup), "%s%s", mnt,
				 strcmp(line + 3, "/") ? line + 3 : "");
			break;
		}
	}
	fclose(f);
}

/*
 * Hold sandbox id under deny-all because what egressd found of it cannot be
 * trusted (type "state_tampered"), or its pins went while no egressd held
 * its links ("pin_removed"). The kernel is the truth: the links say which
 * cgroup; the state file (if any) is moved aside, never acted on.
 */
static void quarantine(struct egr_registry *r, uint32_t id, const char *type, const char *why)
{
	struct egr_sandbox ksb;
	bool in_kernel = egr_bpf_get_sandbox(r->bpf, id, &ksb) == 0;
	uint32_t tenant = in_kernel ? ksb.tenant_id : 0;
	char path[PATH_MAX] = "", reason[256];
	struct egr_held *h;
	uint64_t cg = 0;
	int links;

	move_state_aside(r, id);
	links = egr_bpf_adopt_links(r->bpf, id);
	if (egr_bpf_links_cgroup_id(r->bpf, id, &cg) != 0 && !in_kernel) {
		snprintf(reason, sizeof(reason), "%s; the kernel has no such sandbox, nothing to hold",
			 why);
		egr_bpf_detach(r->bpf, id); /* an empty links/<id>, if any */
		if (r->hooks.tampered)
			r->hooks.tampered(r->hooks.ctx, type, id, NULL, reason, false);
		return;
	}
	if (cg && egr_cgroup_path_by_id(cg, path, sizeof(path)) != 0)
		path[0] = '\0';
	/* Programs whose pins were removed while egressd was away are gone
	 * from the cgroup: attach them again (deny-all below). */
	if (links == -ENOENT && path[0] && egr_bpf_attach_missing(r->bpf, id, path))
		log_error("sandbox %u: cannot attach its missing programs to %s", id, path);
	kernel_deny_all(r, id, tenant);
	if (cg)
		egr_bpf_set_cgroup_sandbox(r->bpf, cg, id);
	if (path[0])
		destroy_sockets(id, path, cg, NULL);
	snprintf(reason, sizeof(reason), "%s", why);
	h = held_add(r, id, tenant, cg, path[0] ? path : NULL, EGR_HELD_TAMPERED, reason,
		     time(NULL));
	if (h && save_held_state(r, h))
		log_error("sandbox %u: cannot record it as held; the next start checks it again", id);
	log_error("sandbox %u (%s): %s; held under deny-all", id, path[0] ? path : "cgroup unknown",
		  why);
	if (r->hooks.tampered)
		r->hooks.tampered(r->hooks.ctx, type, id, path[0] ? path : NULL, reason, true);
}

/* An authenticated "detached" or "tampered" state: held under deny-all. */
static void adopt_held(struct egr_registry *r, uint32_t id, json_t *st, enum egr_held_state state)
{
	const char *cgroup = json_string_value(json_object_get(st, "cgroup"));
	uint32_t tenant = (uint32_t)json_integer_value(json_object_get(st, "tenant_id"));
	uint64_t cg = (uint64_t)json_integer_value(json_object_get(st, "cgroup_id"));

	egr_bpf_adopt_links(r->bpf, id);
	kernel_deny_all(r, id, tenant);
	if (!held_add(r, id, tenant, cg, cgroup, state,
		      json_string_value(json_object_get(st, "reason")),
		      (time_t)json_integer_value(json_object_get(st, "since"))))
		log_error("sandbox %u: out of memory; left under deny-all, unmanaged", id);
	else
		log_info("sandbox %u (%s): held under deny-all (%s)", id, cgroup ? cgroup : "?",
			 held_state_name(state));
}

/* Does the kernel's entry say what the stored policy says? */
static bool kernel_matches(struct egr_registry *r, const struct egr_sandbox *ksb,
			   const struct egr_policy *p, const struct egr_compiled *c)
{
	struct egr_sandbox want = { 0 };

	want.flags = sandbox_flags(p);
	want.families = p->families;
	quota_fields(&want, p);
	return ksb->flags == want.flags && ksb->families == want.families &&
	       ksb->quota_bytes == want.quota_bytes &&
	       ksb->quota_window_ns == want.quota_window_ns &&
	       egr_bpf_rules_match(r->bpf, ksb->policy_id, c);
}

/* One authenticated "attached" state file: adopt its sandbox, repair what an
 * interrupted operation left, or hold it under deny-all when it disagrees
 * with the kernel. Returns the sandbox to detach now (its cgroup was
 * removed while egressd was away), or NULL. */
static struct egr_sb *adopt_one(struct egr_registry *r, uint32_t id, json_t *st, bool legacy)
{
	const char *cgroup = json_string_value(json_object_get(st, "cgroup"));
	json_t *policy = json_object_get(st, "policy");
	uint32_t policy_id = (uint32_t)json_integer_value(json_object_get(st, "policy_id"));
	uint64_t cgid = (uint64_t)json_integer_value(json_object_get(st, "cgroup_id"));
	struct egr_policy p = { 0 };
	struct egr_compiled c = { 0 };
	struct egr_sandbox ksb;
	struct egr_fail f;
	struct egr_sb *sb = NULL, *gone = NULL;
	uint64_t now_cgid = 0, link_cg = 0;
	char why[256];
	int err;

	if (!cgroup || !policy || prepare(policy, &p, &c, &f)) {
		quarantine(r, id, "state_tampered", "its state file has no usable policy");
		goto out;
	}
	err = egr_bpf_adopt_links(r->bpf, id);
	if (err == -EXDEV) {
		quarantine(r, id, "state_tampered",
			   "its pinned links are attached to different cgroups");
		goto out;
	}
	if (err == -ENOENT) {
		/* The storage is named once the attach completed: then pins went
		 * while no egressd held the links. Otherwise a crash mid-attach:
		 * the command never ran confined by it. */
		if (egr_bpf_links_cgroup_id(r->bpf, id, &link_cg) == 0 && link_cg &&
		    egr_bpf_cgroup_names(r->bpf, link_cg, id)) {
			quarantine(r, id, "pin_removed",
				   "link pins were removed while egressd was not running");
			goto out;
		}
		log_warn("sandbox %u: attach to %s never completed; rolling it back", id, cgroup);
		teardown(r, id, policy_id, policy);
		goto out;
	}
	egr_bpf_links_cgroup_id(r->bpf, id, &link_cg);
	if (link_cg && link_cg != cgid) {
		snprintf(why, sizeof(why), "its state file names cgroup id %llu, its links are "
			 "attached to cgroup id %llu", (unsigned long long)cgid,
			 (unsigned long long)link_cg);
		quarantine(r, id, "state_tampered", why);
		goto out;
	}
	err = egr_bpf_get_sandbox(r->bpf, id, &ksb);
	if (!err && (ksb.policy_id == EGR_ID_NONE || ksb.policy_id > policy_id)) {
		/* Policy ids only grow: a state older than the kernel's policy, or
		 * "attached" while the kernel holds it under deny-all, is a
		 * replayed file. */
		snprintf(why, sizeof(why), "its state file names policy %u, the kernel enforces %s%u",
			 policy_id, ksb.policy_id ? "the newer " : "deny-all, policy ", ksb.policy_id);
		quarantine(r, id, "state_tampered", why);
		goto out;
	}
	if (!err && ksb.policy_id == policy_id && !kernel_matches(r, &ksb, &p, &c)) {
		quarantine(r, id, "state_tampered",
			   "the policy in its state file is not the one the kernel enforces");
		goto out;
	}
	/* Unauthenticated (an earlier egressd's, from before state.key): only
	 * what the kernel confirms exactly is adopted, nothing is repaired. */
	if (legacy && (err || ksb.policy_id != policy_id || link_cg != cgid)) {
		quarantine(r, id, "state_tampered",
			   "its state file has no MAC (an earlier egressd's) and the kernel does not "
			   "confirm it");
		goto out;
	}
	sb = calloc(1, sizeof(*sb));
	if (!sb || !(sb->cgroup = strdup(cgroup)))
		goto oom;
	sb->id = id;
	sb->cgroup_id = cgid;
	sb->policy_id = policy_id;
	sb->tenant_id = tenant_id(r, p.tenant);
	if (json_is_string(json_object_get(st, "netns")) &&
	    !(sb->netns = strdup(json_string_value(json_object_get(st, "netns")))))
		goto oom;
	{
		/* Authenticated with the rest of the file (lifetime.c checks it). */
		json_t *l = json_object_get(st, "launcher");
		json_int_t pid = json_integer_value(json_object_get(l, "pid"));

		if (pid > 0 && pid <= INT32_MAX) {
			sb->launcher.pid = (int)pid;
			sb->launcher.start =
				(uint64_t)json_integer_value(json_object_get(l, "start"));
		}
	}
	/* Reopen the DNS listeners on the ports the sandbox knows; if they are
	 * taken, new ones (the kernel entry follows below). */
	if (start_dns(r, sb, &p, (uint16_t)json_integer_value(json_object_get(st, "dns_port4")),
		      (uint16_t)json_integer_value(json_object_get(st, "dns_port6")), &f))
		log_error("sandbox %u: no DNS proxy (%s); its DNS is denied", id, f.e.message);
	if (start_inspect(r, sb, &p,
			  (uint16_t)json_integer_value(json_object_get(st, "inspect_port4")),
			  (uint16_t)json_integer_value(json_object_get(st, "inspect_port6")), &f))
		log_error("sandbox %u: no inspecting proxy (%s); its TCP is denied", id,
			  f.e.message);
	sb->attached_at = (time_t)json_integer_value(json_object_get(st, "attached_at"));
	sb->updated_at = (time_t)json_integer_value(json_object_get(st, "updated_at"));

	/* A quarantine lives in the kernel entry: adoption keeps it. */
	sb->quarantined = !err && ksb.quarantined;
	if (err || ksb.policy_id != policy_id) {
		/* A crash mid-update (the authenticated state is the newer one):
		 * apply the stored policy again under a fresh id; start-up GC
		 * reclaims the rest. */
		log_warn("sandbox %u: kernel policy %u, state policy %u: an interrupted update; "
			 "applying the stored policy", id, err ? 0 : ksb.policy_id, policy_id);
		sb->policy_id = alloc_policy_id(r);
		memset(&ksb, 0, sizeof(ksb));
		ksb.quarantined = sb->quarantined;
		ksb.policy_id = sb->policy_id;
		ksb.tenant_id = sb->tenant_id;
		ksb.flags = sandbox_flags(&p);
		ksb.families = p.families;
		quota_fields(&ksb, &p);
		ksb.dns_port4 = sb->dns_port4;
		ksb.dns_port6 = sb->dns_port6;
		ksb.inspect_port4 = sb->inspect_port4;
		ksb.inspect_port6 = sb->inspect_port6;
		if (egr_bpf_put_rules(r->bpf, sb->policy_id, &c) ||
		    save_state(r, sb, policy) || egr_bpf_put_sandbox(r->bpf, id, &ksb)) {
			log_error("sandbox %u: cannot reapply its policy; it stays denied", id);
			kernel_deny_all(r, id, sb->tenant_id);
		}
	}
	if (egr_bpf_get_sandbox(r->bpf, id, &ksb) == 0 && ksb.policy_id == sb->policy_id &&
	    (ksb.dns_port4 != sb->dns_port4 || ksb.dns_port6 != sb->dns_port6 ||
	     ksb.inspect_port4 != sb->inspect_port4 || ksb.inspect_port6 != sb->inspect_port6)) {
		ksb.dns_port4 = sb->dns_port4;
		ksb.dns_port6 = sb->dns_port6;
		ksb.inspect_port4 = sb->inspect_port4;
		ksb.inspect_port6 = sb->inspect_port6;
		if (egr_bpf_put_sandbox(r->bpf, id, &ksb) || save_state(r, sb, policy))
			log_error("sandbox %u: cannot point DNS at the new proxy ports", id);
	}
	err = egr_bpf_set_cgroup_sandbox(r->bpf, cgid, id);
	if (err && link_cg)
		log_warn("sandbox %u: rewrite cgroup storage: %s", id, strerror(-err));
	home_procs(r, sb, cgroup);
	if (legacy && save_state(r, sb, policy) == 0)
		log_info("sandbox %u: the kernel confirmed its state file; now authenticated", id);
	if (reg_add(r, sb))
		goto oom;
	sb_set_meta(sb, &p, &c);
	quota_apply(r, sb, &p, false);
	log_info("sandbox %u adopted (%s, tenant %s, policy %u)", id, sb->cgroup, sb->tenant,
		 sb->policy_id);
	if (r->hooks.adopted)
		r->hooks.adopted(r->hooks.ctx, sb, policy);
	/* The cgroup was removed while egressd was away (the kernel released
	 * it, or it is dying and only sockets hold it): the execution ended. */
	if (!link_cg || egr_cgroup_id(cgroup, &now_cgid) < 0 || now_cgid != cgid) {
		log_info("sandbox %u: cgroup %s is gone; detaching it", id, cgroup);
		free(sb->end_status);
		sb->end_status = strdup("cgroup gone"); /* NULL: "detached" */
		gone = sb;
	}
	sb = NULL;
	goto out;
oom:
	log_error("sandbox %u: out of memory while adopting; left enforced, unmanaged", id);
out:
	sb_free(sb);
	egr_compiled_free(&c);
	egr_policy_free(&p);
	return gone;
}

/* "<digits>.json" and nothing else (not a .tmp, not a kept tampered one). */
static uint32_t state_file_id(const char *name)
{
	unsigned long v;
	char *end;

	if (name[0] < '0' || name[0] > '9')
		return 0;
	errno = 0;
	v = strtoul(name, &end, 10);
	if (errno || strcmp(end, ".json") != 0 || v > UINT32_MAX)
		return 0;
	return (uint32_t)v;
}

static bool known(struct egr_registry *r, uint32_t id)
{
	return egr_reg_find(r, NULL, id) || egr_reg_find_held(r, NULL, id);
}

static int adopt_all(struct egr_registry *r)
{
	char dir[PATH_MAX], path[PATH_MAX];
	uint32_t *ids = NULL, *live = NULL;
	size_t n = 0, nlive = 0, ngone = 0;
	uint32_t max_policy = 0, max_sb = 0;
	struct egr_sb **gone = NULL;
	struct dirent *de;
	DIR *d;
	int err;

	snprintf(dir, sizeof(dir), "%s/sandboxes", r->state_dir);
	d = opendir(dir);
	if (!d)
		return -errno;
	/* Policy and sandbox ids must not collide with anything in the maps;
	 * the (unauthenticated) numbers in the files can only raise them. */
	if (egr_bpf_list_sandbox_ids(r->bpf, &ids, &n) == 0) {
		for (size_t i = 0; i < n; i++) {
			struct egr_sandbox ksb;

			if (ids[i] > max_sb)
				max_sb = ids[i];
			if (egr_bpf_get_sandbox(r->bpf, ids[i], &ksb) == 0 && ksb.policy_id > max_policy)
				max_policy = ksb.policy_id;
		}
		free(ids);
	}
	if (egr_bpf_pinned_sandboxes(r->bpf, &ids, &n) == 0) {
		for (size_t i = 0; i < n; i++)
			if (ids[i] > max_sb)
				max_sb = ids[i];
		free(ids);
	}
	while ((de = readdir(d))) {
		json_error_t jerr;
		json_t *st;
		uint32_t id = state_file_id(de->d_name), pid;

		if (!id)
			continue;
		if (id > max_sb)
			max_sb = id;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		st = json_load_file(path, 0, &jerr);
		if (!st)
			continue;
		pid = (uint32_t)json_integer_value(json_object_get(st, "policy_id"));
		if (pid > max_policy && pid < UINT32_MAX - 1)
			max_policy = pid;
		json_decref(st);
	}
	r->next_sandbox_id = max_sb + 1;
	r->next_policy_id = max_policy + 1;

	rewinddir(d);
	while ((de = readdir(d))) {
		char why[PATH_MAX + 128];
		uint32_t id = state_file_id(de->d_name);
		bool legacy = false;
		const char *state;
		json_t *st;
		int rerr;

		if (!id)
			continue;
		st = read_state_obj(r, id, why, sizeof(why), &rerr, &legacy);
		if (!st) {
			if (rerr != -ENOENT)
				quarantine(r, id, "state_tampered", why);
			continue;
		}
		/* An earlier egressd wrote no "state": only attached sandboxes. */
		state = json_string_value(json_object_get(st, "state")) ?: (legacy ? "attached" : "");
		if (legacy && strcmp(state, "attached") != 0) {
			quarantine(r, id, "state_tampered",
				   "its state file has no MAC and is not an earlier egressd's");
		} else if (strcmp(state, "attached") == 0) {
			struct egr_sb *g = adopt_one(r, id, st, legacy);

			if (g) {
				struct egr_sb **ng = realloc(gone, (ngone + 1) * sizeof(*ng));

				if (ng) {
					gone = ng;
					gone[ngone++] = g;
				}
			}
		} else if (strcmp(state, "detached") == 0) {
			adopt_held(r, id, st, EGR_HELD_DETACHED);
		} else if (strcmp(state, "tampered") == 0) {
			adopt_held(r, id, st, EGR_HELD_TAMPERED);
		} else {
			quarantine(r, id, "state_tampered", "its state file has an unknown state");
		}
		json_decref(st);
	}
	closedir(d);

	/* Pinned links without a state file: the kernel says a sandbox is
	 * there, nothing says which policy. */
	if (egr_bpf_pinned_sandboxes(r->bpf, &ids, &n) == 0) {
		for (size_t i = 0; i < n; i++)
			if (!known(r, ids[i]))
				quarantine(r, ids[i], "state_tampered",
					   "its links are pinned but it has no state file");
		free(ids);
	}
	/* Sandbox entries that nothing attaches any more are remains of a crash
	 * before links existed; the rules of every policy no entry names are
	 * remains of a crash mid-update. */
	if (egr_bpf_list_sandbox_ids(r->bpf, &ids, &n) == 0) {
		live = calloc(n ? n : 1, sizeof(*live));
		for (size_t i = 0; live && i < n; i++) {
			struct egr_sandbox ksb;
			char ldir[PATH_MAX];

			snprintf(ldir, sizeof(ldir), "%s/links/%u", r->bpf->dir, ids[i]);
			if (!known(r, ids[i]) && access(ldir, F_OK) != 0) {
				egr_bpf_del_sandbox(r->bpf, ids[i]);
				continue;
			}
			if (egr_bpf_get_sandbox(r->bpf, ids[i], &ksb) == 0)
				live[nlive++] = ksb.policy_id;
		}
		free(ids);
		if (live) {
			err = egr_bpf_gc_rules(r->bpf, live, nlive);
			if (err > 0)
				log_info("reclaimed %d rules of abandoned policies", err);
			free(live);
		}
	}
	/* Executions whose cgroup went while egressd was away end like any
	 * other: their record, deny-all until the kernel releases the cgroup. */
	for (size_t i = 0; i < ngone; i++) {
		struct egr_fail f;

		if (egr_reg_detach(r, gone[i], NULL, &f))
			log_error("sandbox %u: %s", gone[i]->id, f.e.message);
	}
	free(gone);
	return 0;
}

int egr_reg_init(struct egr_registry *r, struct egr_bpf *bpf, const char *state_dir,
		 const struct egr_reg_hooks *hooks, struct egr_dnsproxy *dns,
		 struct egr_learned *learned)
{
	char path[PATH_MAX];

	struct egr_inspect *inspect = r->inspect;
	int err;

	memset(r, 0, sizeof(*r));
	r->inspect = inspect;
	r->bpf = bpf;
	r->dns = dns;
	r->learned = learned;
	if (hooks)
		r->hooks = *hooks;
	r->next_sandbox_id = 1;
	r->next_policy_id = 1;
	if (snprintf(r->state_dir, sizeof(r->state_dir), "%s", state_dir) >=
	    (int)sizeof(r->state_dir))
		return -ENAMETOOLONG;
	read_self_cgroup(r);
	if (mkdir(state_dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	snprintf(path, sizeof(path), "%s/sandboxes", state_dir);
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return -errno;
	tenants_load(r);
	err = state_key_load(r);
	if (err)
		return err;
	return adopt_all(r);
}

void egr_reg_free(struct egr_registry *r)
{
	for (size_t i = 0; i < r->n; i++)
		sb_free(r->sbs[i]);
	free(r->sbs);
	for (size_t i = 0; i < r->ntenants; i++)
		free(r->tenants[i]);
	free(r->tenants);
	for (size_t i = 0; i < r->nheld; i++)
		free(r->held[i].cgroup);
	free(r->held);
	if (r->state_key)
		egr_audit_free_key(r->state_key, r->state_keylen);
	memset(r, 0, sizeof(*r));
}
