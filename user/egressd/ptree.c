// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The policy tree: attach by reference, and the watch (ptree.h).
 *
 * The kubelet updates a ConfigMap volume atomically: it writes the new
 * files into a new directory "..TIMESTAMP", points a new symlink
 * "..data_tmp" at it, renames that over "..data", then adds or removes the
 * per-key links ("NAME.json -> ..data/NAME.json") and deletes the old
 * directory. Every step is an event on the namespace's directory (create,
 * move, delete), so a watch of each namespace's directory and of the tree
 * sees all of them; the work is done a short debounce after the last event
 * (the kubelet's steps come in one burst), by reading each file anew
 * through policytree.c: whatever the links say at that moment is what a
 * container starting then would get.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "loop.h"
#include "obs/alerting.h"
#include "ocimeta.h"
#include "policy.h"
#include "policytree.h"
#include "ptree.h"
#include "sandbox.h"

#define PT_DEBOUNCE_MS 300
#define PT_TICK_MS 250
#define PT_RETRY_MS 2000
/* Namespaces watched with inotify at most; more (or one whose watch the
 * kernel refuses: fs.inotify.max_user_watches) are polled every
 * PT_RETRY_MS instead, and an alert says so: never silently unwatched. */
#define PT_MAX_WATCHED 4096

struct pt_ns {
	char name[EGR_NAME_MAX + 1];
	int wd;          /* -1: not watched */
	bool dirty;
	bool polled;     /* exists, cannot be watched: polled */
	uint64_t due_ms; /* process at or after */
	uint64_t poll_ms;
};

struct egr_ptree {
	char dir[4096];
	char **require;
	size_t nrequire;
	struct egr_registry *reg;
	struct egr_loop *loop;
	struct egr_alerting *al;
	int ifd, top_wd;
	struct pt_ns *ns;
	size_t nns;
	bool all_dirty;
	uint64_t all_due_ms, retry_ms;
	uint64_t applied, invalid, removed, failed;
	size_t nwatched, npolled;
	bool top_polled;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int egr_ptree_new(struct egr_ptree **out, const char *dir, const char *require)
{
	struct egr_ptree *t = calloc(1, sizeof(*t));
	char *list, *tok, *save = NULL;

	*out = NULL;
	if (!t)
		return -ENOMEM;
	t->ifd = t->top_wd = -1;
	snprintf(t->dir, sizeof(t->dir), "%s", dir && dir[0] ? dir : EGR_PTREE_DIR_DEFAULT);
	list = strdup(require ? require : "");
	if (!list) {
		free(t);
		return -ENOMEM;
	}
	for (tok = strtok_r(list, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
		char **nr;

		if (!egr_k8s_namespace_ok(tok)) {
			free(list);
			egr_ptree_free(t);
			return -EINVAL;
		}
		nr = realloc(t->require, (t->nrequire + 1) * sizeof(*nr));
		if (!nr || !(nr[t->nrequire] = strdup(tok))) {
			t->require = nr ? nr : t->require;
			free(list);
			egr_ptree_free(t);
			return -ENOMEM;
		}
		t->require = nr;
		t->nrequire++;
	}
	free(list);
	*out = t;
	return 0;
}

void egr_ptree_free(struct egr_ptree *t)
{
	if (!t)
		return;
	if (t->ifd >= 0) {
		if (t->loop)
			egr_loop_del(t->loop, t->ifd);
		close(t->ifd);
	}
	for (size_t i = 0; i < t->nrequire; i++)
		free(t->require[i]);
	free(t->require);
	free(t->ns);
	free(t);
}

static bool required(const struct egr_ptree *t, const char *ns)
{
	for (size_t i = 0; i < t->nrequire; i++)
		if (!strcmp(t->require[i], ns))
			return true;
	return false;
}

static void set_err(struct egr_ptree_err *e, enum egr_err code, const char *field,
		    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void set_err(struct egr_ptree_err *e, enum egr_err code, const char *field,
		    const char *fmt, ...)
{
	va_list ap;

	e->code = code;
	snprintf(e->field, sizeof(e->field), "%s", field);
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
}

/* The container's identity into doc; container.namespace and .policy are
 * the tree's, and so is the tenant: it is the namespace. A namespace's
 * file is whoever writes its ConfigMap; a tenant it named would be another
 * namespace's (tenant_egress_bytes caps that tenant's sandboxes, approvals
 * of scope tenant reach it, billing goes to it; red team rt-k8s finding 1).
 * 0 or -ENOMEM. */
static int put_identity(json_t *doc, const json_t *ctr, const char *ns, const char *name,
			const char *exec_id)
{
	json_t *c = ctr ? json_deep_copy(ctr) : json_object();

	if (!c || json_object_set_new(doc, "tenant", json_string(ns)) ||
	    json_object_set_new(c, "namespace", json_string(ns)) ||
	    json_object_set_new(c, "policy", json_string(name)) ||
	    json_object_set_new(doc, "container", c))
		return -ENOMEM;
	if (exec_id && json_object_set_new(doc, "execution_id", json_string(exec_id)))
		return -ENOMEM;
	return 0;
}

int egr_ptree_attach_doc(struct egr_ptree *t, const json_t *req, json_t **doc,
			 struct egr_ptree_err *e)
{
	const json_t *ref = json_object_get(req, "policy_ref");
	const json_t *ctr = json_object_get(req, "container");
	const json_t *xid = json_object_get(req, "execution_id");
	const char *ns, *name, *rule = "", *key = NULL;
	char why[256];
	int err;

	*doc = NULL;
	if (json_object_get(req, "policy")) {
		set_err(e, EGR_ERR_BAD_REQUEST, "policy_ref", "give policy or policy_ref, not both");
		return -1;
	}
	if (!json_is_object(ref) || !json_is_string(json_object_get(ref, "namespace")) ||
	    (json_object_get(ref, "name") && !json_is_string(json_object_get(ref, "name"))) ||
	    json_object_size(ref) > 2 || (json_object_size(ref) == 2 && !json_object_get(ref, "name"))) {
		set_err(e, EGR_ERR_BAD_REQUEST, "policy_ref",
			"policy_ref is {\"namespace\": NS, \"name\": NAME (optional)}");
		return -1;
	}
	ns = json_string_value(json_object_get(ref, "namespace"));
	name = json_string_value(json_object_get(ref, "name"));
	if (!egr_k8s_namespace_ok(ns)) {
		set_err(e, EGR_ERR_BAD_REQUEST, "policy_ref.namespace",
			"not a Kubernetes namespace name (a DNS-1123 label)");
		return -1;
	}
	if (name && egr_policy_name_check(name, &rule)) {
		set_err(e, EGR_ERR_FORBIDDEN, "policy_ref.name", "policy '%.80s' refused in "
			"namespace %s: %s", name, ns, rule);
		return -1;
	}
	if (ctr && egr_container_check(ctr, &key, &rule)) {
		set_err(e, EGR_ERR_BAD_REQUEST, "container", "container%s%.40s: %s",
			key ? "." : "", key ? key : "", rule);
		return -1;
	}
	if (xid && (!json_is_string(xid) || !json_string_length(xid) ||
		    json_string_length(xid) > EGR_META_STR_MAX ||
		    strlen(json_string_value(xid)) != json_string_length(xid))) {
		set_err(e, EGR_ERR_BAD_REQUEST, "execution_id",
			"execution_id is a string of 1 to 255 bytes");
		return -1;
	}
	err = egr_ptree_load(t->dir, ns, name ?: EGR_PTREE_DEFAULT, doc, &rule, why, sizeof(why));
	if (err == -ENOENT && !name) {
		if (!required(t, ns))
			return 0; /* not confined: said in the reply */
		set_err(e, EGR_ERR_NOT_FOUND, "policy_ref",
			"namespace %s requires a policy (require-policy-namespaces) and has no "
			"default policy (%s/%s/" EGR_PTREE_DEFAULT ".json): give the pod the "
			"annotation " EGR_ANN_POLICY "=NAME", ns, t->dir, ns);
		return -1;
	}
	if (err == -ENOENT) {
		set_err(e, EGR_ERR_NOT_FOUND, "policy_ref.name", "no policy '%s' in namespace %s "
			"(%s/%s/%s.json)", name, ns, t->dir, ns, name);
		return -1;
	}
	if (err == -EBADMSG || err == -EFBIG) {
		set_err(e, EGR_ERR_INVALID_POLICY, "policy_ref", "policy %s/%s/%s.json: %s", t->dir,
			ns, name ?: EGR_PTREE_DEFAULT, why);
		return -1;
	}
	if (err) {
		set_err(e, err == -ENOMEM ? EGR_ERR_INTERNAL : EGR_ERR_FORBIDDEN, "policy_ref",
			"policy %s of namespace %s refused: %s", name ?: EGR_PTREE_DEFAULT, ns,
			err == -ENOMEM ? "out of memory" : rule);
		return -1;
	}
	if (put_identity(*doc, ctr, ns, name ?: EGR_PTREE_DEFAULT, json_string_value(xid))) {
		json_decref(*doc);
		*doc = NULL;
		set_err(e, EGR_ERR_INTERNAL, "", "out of memory");
		return -1;
	}
	return 0;
}

/* --- the watch -------------------------------------------------------------------- */

static void alert(struct egr_ptree *t, const struct egr_sb *sb, const char *type,
		  const char *file, const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void alert(struct egr_ptree *t, const struct egr_sb *sb, const char *type,
		  const char *file, const char *fmt, ...)
{
	char summary[768], key[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(summary, sizeof(summary), fmt, ap);
	va_end(ap);
	log_warn("policy tree: %s", summary);
	if (!t->al)
		return;
	snprintf(key, sizeof(key), "%s/%u", file, sb ? sb->id : 0);
	egr_alerting_raise(t->al, &(struct egr_alert_in){
					  .type = type,
					  .severity = EGR_SEV_WARNING,
					  .key = key,
					  .tenant = sb ? sb->tenant : NULL,
					  .sandbox = sb ? sb->id : 0,
					  .execution_id = sb ? sb->execution_id : NULL,
					  .summary = summary,
					  .evidence = json_pack("{s:s}", "file", file),
				  });
}

/* Every NAME.json of the namespace, checked as a policy: a bad one is
 * named in an alert even while no sandbox uses it. */
static void validate_all(struct egr_ptree *t, const char *ns)
{
	char path[4096 + 2 * EGR_NAME_MAX], why[256];
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "%s/%s", t->dir, ns);
	d = opendir(path);
	if (!d)
		return;
	while ((de = readdir(d))) {
		size_t n = strlen(de->d_name);
		char name[EGR_NAME_MAX + 1], file[sizeof(path) + 80];
		struct egr_policy p;
		struct egr_error pe;
		const char *rule = "";
		json_t *doc;
		int err;

		if (de->d_name[0] == '.' || n < 6 || n - 5 > EGR_NAME_MAX ||
		    strcmp(de->d_name + n - 5, ".json"))
			continue;
		snprintf(name, sizeof(name), "%.*s", (int)(n - 5), de->d_name);
		snprintf(file, sizeof(file), "%s/%s", path, de->d_name);
		err = egr_ptree_load(t->dir, ns, name, &doc, &rule, why, sizeof(why));
		if (err) {
			if (err != -ENOENT) {
				t->invalid++;
				alert(t, NULL, "policy_invalid", file, "%s is not usable: %s", file,
				      err == -EBADMSG || err == -EFBIG ? why : rule);
			}
			continue;
		}
		err = egr_policy_check_json(doc, &p, &pe);
		json_decref(doc);
		if (err) {
			t->invalid++;
			alert(t, NULL, "policy_invalid", file, "%s is not a valid policy: %s%s%s",
			      file, pe.field, pe.field[0] ? ": " : "", pe.message);
			continue;
		}
		egr_policy_free(&p);
	}
	closedir(d);
}

/* Apply the namespace's files to the sandboxes attached from them. */
static void apply_ns(struct egr_ptree *t, const char *ns)
{
	struct egr_reg_iter it = { 0 };

	validate_all(t, ns);
	for (struct egr_sb *sb; (sb = egr_reg_next(t->reg, &it));) {
		const char *sns = json_string_value(json_object_get(sb->container, "namespace"));
		const char *name = json_string_value(json_object_get(sb->container, "policy"));
		char file[4096 + 2 * EGR_NAME_MAX + 8], why[256];
		const char *rule = "";
		struct egr_policy p;
		struct egr_error pe;
		struct egr_fail f;
		unsigned closed = 0;
		json_t *doc, *ctr;
		int err;

		if (!sns || !name || strcmp(sns, ns))
			continue;
		snprintf(file, sizeof(file), "%s/%s/%s.json", t->dir, ns, name);
		err = egr_ptree_load(t->dir, ns, name, &doc, &rule, why, sizeof(why));
		if (err == -ENOENT) {
			t->removed++;
			alert(t, sb, "policy_removed", file, "%s was removed; sandbox %u keeps its "
			      "last policy (sha256 %.12s)", file, sb->id, sb->sha256);
			continue;
		}
		if (err) {
			t->invalid++;
			alert(t, sb, "policy_invalid", file, "%s is not usable (%s); sandbox %u keeps "
			      "its last good policy", file, err == -EBADMSG || err == -EFBIG ? why
										   : rule, sb->id);
			continue;
		}
		ctr = json_deep_copy(sb->container);
		if (!ctr || put_identity(doc, ctr, ns, name, sb->execution_id)) {
			json_decref(ctr);
			json_decref(doc);
			log_error("policy tree: %s: out of memory; sandbox %u unchanged", file, sb->id);
			continue;
		}
		json_decref(ctr);
		if (egr_policy_from_json(doc, &p, &pe)) {
			t->invalid++;
			alert(t, sb, "policy_invalid", file, "%s is not a valid policy (%s%s%s); "
			      "sandbox %u keeps its last good policy", file, pe.field,
			      pe.field[0] ? ": " : "", pe.message, sb->id);
			json_decref(doc);
			continue;
		}
		err = strcmp(p.sha256, sb->sha256) == 0;
		egr_policy_free(&p);
		if (err) {
			json_decref(doc);
			continue; /* the same policy */
		}
		if (egr_reg_update(t->reg, sb, doc, &closed, &f)) {
			t->failed++;
			alert(t, sb, "policy_update_failed", file, "%s: update of sandbox %u failed "
			      "(%s: %s); it keeps its last policy", file, sb->id, f.e.field,
			      f.e.message);
		} else {
			t->applied++;
			log_info("policy tree: %s applied to sandbox %u (%u connections closed)", file,
				 sb->id, closed);
		}
		json_decref(doc);
	}
}

static struct pt_ns *ns_find(struct egr_ptree *t, const char *name)
{
	for (size_t i = 0; i < t->nns; i++)
		if (!strcmp(t->ns[i].name, name))
			return &t->ns[i];
	return NULL;
}

/* Watch N's directory, or poll it when it cannot be watched (the first
 * time with an alert naming why). Re-adding a watched directory returns
 * its watch, so this is also how a retargeted ..data link is followed. */
static void watch_ns(struct egr_ptree *t, struct pt_ns *n)
{
	char path[sizeof(t->dir) + EGR_NAME_MAX + 2], why[128];
	bool was_polled = n->polled;
	int wd = -1, was_watched = n->wd >= 0;

	snprintf(path, sizeof(path), "%s/%s", t->dir, n->name);
	if (n->wd < 0 && t->nwatched >= PT_MAX_WATCHED) {
		snprintf(why, sizeof(why), "more than %d namespaces are watched", PT_MAX_WATCHED);
	} else {
		/* Follows a link: a tree that is itself a ConfigMap volume has
		 * NS -> ..data/NS; a swap re-targets it, and this call then
		 * watches the new directory. */
		wd = inotify_add_watch(t->ifd, path, IN_CREATE | IN_DELETE | IN_MOVED_TO |
						     IN_MOVED_FROM | IN_CLOSE_WRITE | IN_ATTRIB |
						     IN_ONLYDIR);
		if (wd < 0)
			snprintf(why, sizeof(why), "inotify_add_watch: %s%s", strerror(errno),
				 errno == ENOSPC ? " (fs.inotify.max_user_watches)" : "");
	}
	n->wd = wd;
	/* A directory that is gone is not polled: the tree's watch sees it back. */
	n->polled = wd < 0 && access(path, F_OK) == 0;
	if (n->polled && !was_polled) {
		n->poll_ms = 0;
		alert(t, NULL, "policy_watch_degraded", path, "%s is not watched (%s); its "
		      "changes are picked up by polling every %d ms", path, why, PT_RETRY_MS);
	} else if (!n->polled && was_polled && wd >= 0) {
		log_info("policy tree: %s is watched again", path);
	}
	/* Kept as counts, not recounted: a rescan calls this per namespace. */
	t->nwatched = t->nwatched + (wd >= 0) - was_watched;
	t->npolled = t->npolled + n->polled - was_polled;
}

/* (Re)watch every namespace directory of the tree; all due for a pass. */
static void rescan(struct egr_ptree *t, uint64_t due)
{
	struct dirent *de;
	DIR *d;

	if (t->top_wd < 0) {
		t->top_wd = inotify_add_watch(t->ifd, t->dir, IN_CREATE | IN_DELETE | IN_MOVED_TO |
							      IN_MOVED_FROM | IN_ONLYDIR |
							      IN_DELETE_SELF | IN_MOVE_SELF);
		if (t->top_wd < 0 && errno == ENOENT)
			return; /* not there yet: retried */
		if (t->top_wd < 0 && !t->top_polled) {
			/* Scanned every PT_RETRY_MS instead (on_tick). */
			t->top_polled = true;
			alert(t, NULL, "policy_watch_degraded", t->dir, "%s is not watched "
			      "(inotify_add_watch: %s); new namespaces are picked up by polling "
			      "every %d ms", t->dir, strerror(errno), PT_RETRY_MS);
		} else if (t->top_wd >= 0) {
			t->top_polled = false;
		}
	}
	d = opendir(t->dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		struct pt_ns *n;

		if (!egr_k8s_namespace_ok(de->d_name))
			continue;
		n = ns_find(t, de->d_name);
		if (!n) {
			struct pt_ns *nn = realloc(t->ns, (t->nns + 1) * sizeof(*nn));

			if (!nn) {
				log_error("policy tree: %s/%s: out of memory; retried", t->dir,
					  de->d_name);
				t->all_dirty = true;
				t->all_due_ms = due + PT_RETRY_MS;
				continue;
			}
			t->ns = nn;
			n = &t->ns[t->nns++];
			memset(n, 0, sizeof(*n));
			n->wd = -1;
			snprintf(n->name, sizeof(n->name), "%s", de->d_name);
		}
		watch_ns(t, n);
		n->dirty = true;
		n->due_ms = due;
	}
	closedir(d);
}

static void on_inotify(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_ptree *t = ctx;
	char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
	uint64_t due = now_ms() + PT_DEBOUNCE_MS;
	ssize_t n;

	(void)loop;
	(void)events;
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;

			p += sizeof(*ev) + ev->len;
			if (ev->mask & IN_Q_OVERFLOW || ev->wd == t->top_wd) {
				if (ev->wd == t->top_wd && ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF |
								       IN_IGNORED))
					t->top_wd = -1;
				t->all_dirty = true;
				t->all_due_ms = due;
				continue;
			}
			for (size_t i = 0; i < t->nns; i++) {
				if (t->ns[i].wd != ev->wd)
					continue;
				if (ev->mask & IN_IGNORED && t->ns[i].wd >= 0) {
					t->ns[i].wd = -1;
					t->nwatched--;
				}
				t->ns[i].dirty = true;
				t->ns[i].due_ms = due;
			}
		}
	}
}

static void on_tick(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_ptree *t = ctx;
	uint64_t now = now_ms();

	(void)loop;
	(void)fd;
	(void)events;
	if (t->top_wd < 0 && now >= t->retry_ms) {
		t->retry_ms = now + PT_RETRY_MS;
		t->all_dirty = true;
		t->all_due_ms = now;
	}
	if (t->all_dirty && now >= t->all_due_ms) {
		t->all_dirty = false;
		rescan(t, now);
	}
	for (size_t i = 0; i < t->nns; i++) {
		struct pt_ns *n = &t->ns[i];

		if (!n->polled || now < n->poll_ms)
			continue;
		n->poll_ms = now + PT_RETRY_MS;
		watch_ns(t, n); /* watched again once the kernel allows */
		n->dirty = true;
		n->due_ms = now;
	}
	for (size_t i = 0; i < t->nns; i++) {
		if (!t->ns[i].dirty || now < t->ns[i].due_ms)
			continue;
		t->ns[i].dirty = false;
		apply_ns(t, t->ns[i].name);
	}
}

int egr_ptree_watch(struct egr_ptree *t, struct egr_registry *reg, struct egr_loop *loop,
		    struct egr_alerting *al)
{
	int err;

	t->reg = reg;
	t->al = al;
	t->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (t->ifd < 0)
		return -errno;
	err = egr_loop_add(loop, t->ifd, EPOLLIN, on_inotify, t);
	if (err)
		return err;
	t->loop = loop;
	err = egr_loop_every(loop, PT_TICK_MS, on_tick, t);
	if (err)
		return err;
	/* The first pass: what changed while egressd was away. */
	t->all_dirty = true;
	t->all_due_ms = 0;
	return 0;
}

json_t *egr_ptree_status(const struct egr_ptree *t)
{
	json_t *req = json_array();

	for (size_t i = 0; req && i < t->nrequire; i++)
		json_array_append_new(req, json_string(t->require[i]));
	return json_pack("{s:s, s:o, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "dir", t->dir,
			 "require", req ?: json_null(), "watching", t->top_wd >= 0, "namespaces",
			 (json_int_t)t->nns, "watched", (json_int_t)t->nwatched, "polled",
			 (json_int_t)t->npolled, "applied", (json_int_t)t->applied, "invalid",
			 (json_int_t)t->invalid, "removed", (json_int_t)t->removed, "failed",
			 (json_int_t)t->failed);
}
