// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "audit.h"
#include "fileio.h"
#include "log.h"
#include "registry/statefile.h"

static void state_path(const struct egr_statedir *st, uint32_t id, char *buf, size_t len)
{
	snprintf(buf, len, "%s/sandboxes/%u.json", st->dir, id);
}

/* --- group commit of the sandbox files ----------------------------------------
 *
 * Why the files need not be durable before the links: what a restarted
 * egressd reads after a crash of egressd alone is the page cache, which
 * holds every file renamed into place before the crash, durable or not;
 * what a crash of the kernel loses (the page cache) it loses with the
 * links, pins and cgroups the file describes. So the order that crash
 * repair needs, the file in place before the links exist, is the order of
 * the rename; the fsyncs only have to come before the reply, which is what
 * makes an acknowledged attach survive a power cut. (docs/operations.md,
 * "The state directory".)
 */
#define STATE_PENDING_MAX 64 /* files held open for one batch; past it, sync them now */

/* fdatasync every pending file, then one fsync of sandboxes/ for all their
 * renames. The first error (or one an inline sync kept) is returned; the
 * files stay as they are: a state file cannot be undone once its links
 * exist, the reply says it is not acknowledged. */
static int state_sync_pending(struct egr_statedir *st)
{
	int err = st->sync_err;

	st->sync_err = 0;
	for (size_t i = 0; i < st->npend; i++) {
		if (fdatasync(st->pend[i].fd) < 0 && !err) {
			err = -errno;
			log_error("state: fdatasync of %s/sandboxes/%u.json: %s", st->dir,
				  st->pend[i].id, strerror(-err));
		}
		close(st->pend[i].fd);
	}
	st->npend = 0;
	if (st->dir_dirty) {
		st->dir_dirty = false;
		if (fsync(st->sbdir_fd) < 0 && !err) {
			err = -errno;
			log_error("state: fsync of %s/sandboxes: %s", st->dir, strerror(-err));
		}
	}
	return err;
}

static int commit_sync(void *ctx)
{
	return state_sync_pending(ctx);
}

int egr_state_set_commit(struct egr_statedir *st, struct egr_commitq *q)
{
	char path[PATH_MAX];
	int fd, err;

	if (!st || !q || st->cm)
		return -EINVAL;
	snprintf(path, sizeof(path), "%s/sandboxes", st->dir);
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	err = egr_commit_join(q, commit_sync, NULL, st, &st->cm);
	if (err) {
		close(fd);
		return err;
	}
	st->sbdir_fd = fd;
	return 0;
}

static void pending_forget(struct egr_statedir *st, uint32_t id)
{
	for (size_t i = 0; i < st->npend; i++) {
		if (st->pend[i].id != id)
			continue;
		close(st->pend[i].fd);
		st->pend[i] = st->pend[--st->npend];
		return;
	}
}

/* Replace path (sandbox id's file) with buf now; its fdatasync and the
 * directory's fsync at the queue's next flush. 0 or -errno (path untouched). */
static int replace_deferred(struct egr_statedir *st, uint32_t id, const char *path,
			    const char *buf, size_t len)
{
	char tmp[PATH_MAX];
	int fd, err;

	if (st->npend == STATE_PENDING_MAX) {
		int e = state_sync_pending(st);

		st->sync_err = st->sync_err ?: e; /* fails the batch these files are in */
	}
	if (st->npend == st->cap) {
		size_t cap = st->cap ? st->cap * 2 : 8;
		struct egr_state_pending *np = realloc(st->pend, cap * sizeof(*np));

		if (!np)
			return egr_replace_file(path, buf, len, 0600); /* durable at once */
		st->pend = np;
		st->cap = cap;
	}
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	err = egr_write_all(fd, buf, len);
	/* Start the write-back now: the flush's fdatasync then mostly waits,
	 * and a journalling filesystem allocates the blocks of every file of
	 * the batch in the transaction that the first sync commits. */
	if (!err)
		(void)sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
	if (!err && rename(tmp, path) < 0)
		err = -errno;
	if (err) {
		close(fd);
		unlink(tmp);
		return err;
	}
	pending_forget(st, id); /* an older version in this batch: no longer linked */
	st->pend[st->npend++] = (struct egr_state_pending){ .id = id, .fd = fd };
	st->dir_dirty = true;
	egr_commit_dirty(st->cm);
	return 0;
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

static int write_state_obj(struct egr_statedir *st, uint32_t id, const json_t *o)
{
	char path[PATH_MAX], mac[EGR_AUDIT_HASH_HEX + 1];
	char *body = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS), *buf;
	size_t len;
	int err;

	if (!body)
		return -ENOMEM;
	len = strlen(body);
	err = egr_hmac_sha256_hex(st->key, st->keylen, body, len, mac);
	buf = err ? NULL : malloc(len + MAC_SUFFIX_LEN + 2);
	if (!err && !buf)
		err = -ENOMEM;
	if (!err) {
		memcpy(buf, body, len - 1); /* without the closing brace */
		snprintf(buf + len - 1, MAC_SUFFIX_LEN + 3, "%s%s\"}\n", MAC_MEMBER, mac);
		state_path(st, id, path, sizeof(path));
		err = st->cm ? replace_deferred(st, id, path, buf, strlen(buf))
			     : egr_replace_file(path, buf, strlen(buf), 0600);
		if (err)
			log_error("write state %s: %s", path, strerror(-err));
	}
	free(buf);
	free(body);
	return err;
}

/* The state of sandbox id, authenticated; NULL with why on failure
 * (-ENOENT in *errp when there is no file). With legacy non-NULL, a file
 * without a MAC is returned too (*legacy set) while the upgrade window is
 * open (legacy_ok): an earlier egressd wrote it, only the kernel can
 * confirm it. */
json_t *egr_state_read(const struct egr_statedir *st, uint32_t id, char *why, size_t whylen,
		       int *errp, bool *legacy)
{
	char path[PATH_MAX], mac[EGR_AUDIT_HASH_HEX + 1];
	json_error_t jerr;
	json_t *o = NULL;
	char *buf = NULL;
	struct stat sst;
	size_t len = 0;
	int fd, err = 0;

	state_path(st, id, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		err = -errno;
		snprintf(why, whylen, "%s: %s", path, strerror(errno));
		goto out;
	}
	if (fstat(fd, &sst) < 0 || !S_ISREG(sst.st_mode) || sst.st_size > STATE_MAX_BYTES) {
		err = -EINVAL;
		snprintf(why, whylen, "%s is not a regular file of at most %u bytes", path,
			 STATE_MAX_BYTES);
		goto out;
	}
	buf = malloc((size_t)sst.st_size + 1);
	if (!buf) {
		err = -ENOMEM;
		snprintf(why, whylen, "out of memory");
		goto out;
	}
	while (len < (size_t)sst.st_size) {
		ssize_t n = read(fd, buf + len, (size_t)sst.st_size - len);

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
		if (legacy && st->legacy_ok && !strstr(buf, MAC_MEMBER)) {
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

		if (egr_hmac_sha256_hex(st->key, st->keylen, buf,
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

int egr_state_save_sb(struct egr_statedir *st, const struct egr_sb *sb, const json_t *policy)
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
	if (sb->netdev) {
		/* A device sandbox: adoption attaches its programs again there. */
		json_object_set_new(o, "kind", json_string("netdev"));
		json_object_set_new(o, "netdev", json_string(sb->netdev));
		json_object_set_new(o, "ifindex", json_integer(sb->ifindex));
		json_object_set_new(o, "nd_mode", json_integer(sb->nd_mode));
	}
	if (sb->launcher.pid)
		json_object_set_new(o, "launcher", json_pack("{s:i, s:I}", "pid", sb->launcher.pid,
							     "start",
							     (json_int_t)sb->launcher.start));
	err = write_state_obj(st, sb->id, o);
	json_decref(o);
	return err;
}

const char *egr_held_state_name(enum egr_held_state s)
{
	return s == EGR_HELD_DETACHED ? "detached" : "tampered";
}

int egr_state_save_held(struct egr_statedir *st, const struct egr_held *h)
{
	json_t *o = json_pack("{s:I, s:s, s:o, s:I, s:I, s:I, s:s}", "id", (json_int_t)h->id,
			      "state", egr_held_state_name(h->state), "cgroup",
			      h->cgroup ? json_string(h->cgroup) : json_null(), "cgroup_id",
			      (json_int_t)h->cgroup_id, "tenant_id", (json_int_t)h->tenant_id,
			      "since", (json_int_t)h->since, "reason", h->reason);
	int err;

	if (!o)
		return -ENOMEM;
	err = write_state_obj(st, h->id, o);
	json_decref(o);
	return err;
}

void egr_state_drop(struct egr_statedir *st, uint32_t id)
{
	char path[PATH_MAX];

	state_path(st, id, path, sizeof(path));
	if (unlink(path) < 0 && errno != ENOENT)
		log_warn("remove %s: %m", path);
	/* Gone: nothing of it to make durable. (A stale file a power cut brings
	 * back names links the cut removed too: adoption drops it.) */
	if (st->cm)
		pending_forget(st, id);
}

/* Keep a file that failed its check, for whoever investigates. */
void egr_state_move_aside(const struct egr_statedir *st, uint32_t id)
{
	char path[PATH_MAX], aside[PATH_MAX + 32];

	state_path(st, id, path, sizeof(path));
	snprintf(aside, sizeof(aside), "%s.tampered-%lld", path, (long long)time(NULL));
	if (rename(path, aside) == 0)
		log_warn("kept the untrusted state file as %s", aside);
	else if (errno != ENOENT)
		log_warn("move %s aside: %m", path);
}

json_t *egr_state_load_policy(const struct egr_statedir *st, uint32_t id)
{
	char why[PATH_MAX + 128];
	json_t *o, *p;

	o = egr_state_read(st, id, why, sizeof(why), NULL, NULL);
	if (!o) {
		log_error("sandbox %u: %s", id, why);
		return NULL;
	}
	p = json_incref(json_object_get(o, "policy"));
	json_decref(o);
	return p;
}

/* The state key: 32 random bytes made at first start, mode 0400. */
static int state_key_load(struct egr_statedir *st)
{
	char path[PATH_MAX];
	uint8_t key[32];
	int fd, err;

	snprintf(path, sizeof(path), "%s/state.key", st->dir);
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
		st->key_new = true;
	} else if (errno != EEXIST) {
		err = -errno;
		log_error("create %s: %s", path, strerror(-err));
		return err;
	}
	err = egr_audit_load_key(path, &st->key, &st->keylen);
	if (err)
		log_error("state key %s: %s", path,
			  err == -EPERM ? "group or other can access it (it must be 0400)"
					: strerror(-err));
	return err;
}


static void tenants_path(const struct egr_statedir *st, char *buf, size_t len)
{
	snprintf(buf, len, "%s/tenants.json", st->dir);
}

int egr_state_tenants_save(const struct egr_statedir *st, char *const *names, size_t n)
{
	char path[PATH_MAX];
	json_t *o = json_object(), *arr = json_array();
	int err;

	if (!o || !arr) {
		json_decref(o);
		json_decref(arr);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, json_string(names[i]));
	json_object_set_new(o, "tenants", arr);
	tenants_path(st, path, sizeof(path));
	err = egr_replace_file_json(path, o, JSON_COMPACT, 0600);
	json_decref(o);
	if (err)
		log_error("write %s: %s", path, strerror(-err));
	return err;
}

void egr_state_tenants_load(const struct egr_statedir *st, char ***names, size_t *n)
{
	char path[PATH_MAX];
	json_error_t jerr;
	json_t *o, *arr, *v;
	size_t i;

	tenants_path(st, path, sizeof(path));
	o = json_load_file(path, 0, &jerr);
	if (!o)
		return; /* first start */
	arr = json_object_get(o, "tenants");
	*names = calloc(json_array_size(arr) + 1, sizeof(**names));
	json_array_foreach(arr, i, v) {
		if (!*names || !json_is_string(v))
			break;
		(*names)[i] = strdup(json_string_value(v));
		if (!(*names)[i])
			break;
		*n = i + 1;
	}
	json_decref(o);
}

/* "<digits>.json" and nothing else (not a .tmp, not a kept tampered one). */
uint32_t egr_state_file_id(const char *name)
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

static void upgrade_marker_path(const struct egr_statedir *st, char *buf, size_t len)
{
	snprintf(buf, len, "%s/upgrade.unsigned", st->dir);
}

/*
 * The one-time window for unsigned state files. It opens when this start
 * makes the key or took over the pins of an egressd that signed nothing
 * (ABI version 1), and it stays open, across crashes and refused starts,
 * until one adoption pass has run to its end: the marker is durable before
 * the key is made, and only egr_state_upgrade_done() removes it. A state
 * directory whose key exists and whose pins are this version's has no
 * window: a missing MAC there is tampering.
 */
static int upgrade_marker_make(struct egr_statedir *st)
{
	static const char text[] = "state files of an egressd without state.key may be adopted "
				   "where the kernel confirms them (docs/security.md)\n";
	char path[PATH_MAX];
	int err;

	upgrade_marker_path(st, path, sizeof(path));
	err = egr_replace_file(path, text, sizeof(text) - 1, 0600);
	if (err)
		log_error("create %s: %s", path, strerror(-err));
	return err;
}

int egr_state_upgrade_done(struct egr_statedir *st)
{
	char path[PATH_MAX];
	int err;

	if (!st->legacy_ok)
		return 0;
	upgrade_marker_path(st, path, sizeof(path));
	if (unlink(path) < 0 && errno != ENOENT) {
		err = -errno;
		log_error("remove %s: %s", path, strerror(-err));
		return err;
	}
	st->legacy_ok = false;
	err = egr_fsync_parent(path);
	log_info("upgrade: every unsigned state file is signed or held; a missing MAC is "
		 "tampering from now on");
	return err;
}

int egr_state_open(struct egr_statedir *st, const char *dir, bool unsigned_pins)
{
	char path[PATH_MAX];
	int err;

	memset(st, 0, sizeof(*st));
	st->sbdir_fd = -1;
	if (snprintf(st->dir, sizeof(st->dir), "%s", dir) >= (int)sizeof(st->dir))
		return -ENAMETOOLONG;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	snprintf(path, sizeof(path), "%s/sandboxes", dir);
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return -errno;
	snprintf(path, sizeof(path), "%s/state.key", dir);
	if (unsigned_pins || access(path, F_OK) != 0) {
		err = upgrade_marker_make(st);
		if (err)
			return err;
	}
	upgrade_marker_path(st, path, sizeof(path));
	st->legacy_ok = access(path, F_OK) == 0;
	if (st->legacy_ok)
		log_info("upgrade: state files without a MAC (an egressd from before state.key) "
			 "are adopted once, where the kernel confirms them");
	return state_key_load(st);
}

void egr_state_close(struct egr_statedir *st)
{
	if (st->cm) {
		if (state_sync_pending(st))
			log_error("state: the last state files may not be durable");
		egr_commit_leave(st->cm);
		st->cm = NULL;
	}
	if (st->sbdir_fd >= 0)
		close(st->sbdir_fd);
	st->sbdir_fd = -1;
	free(st->pend);
	st->pend = NULL;
	st->npend = st->cap = 0;
	if (st->key)
		egr_audit_free_key(st->key, st->keylen);
	st->key = NULL;
	st->keylen = 0;
}
