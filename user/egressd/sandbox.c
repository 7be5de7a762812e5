// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "cgroup.h"
#include "compile.h"
#include "dnsproxy.h"
#include "egr_decide.h"
#include "fileio.h"
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


static int save_state(struct egr_registry *r, const struct egr_sb *sb, const json_t *policy)
{
	char path[PATH_MAX];
	json_t *o;
	int err;

	o = json_pack("{s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:O}", "id", (json_int_t)sb->id,
		      "cgroup", sb->cgroup, "cgroup_id", (json_int_t)sb->cgroup_id, "policy_id",
		      (json_int_t)sb->policy_id, "tenant_id", (json_int_t)sb->tenant_id,
		      "attached_at", (json_int_t)sb->attached_at, "updated_at",
		      (json_int_t)sb->updated_at, "policy", policy);
	if (!o)
		return -ENOMEM;
	json_object_set_new(o, "dns_port4", json_integer(sb->dns_port4));
	json_object_set_new(o, "dns_port6", json_integer(sb->dns_port6));
	if (sb->netns)
		json_object_set_new(o, "netns", json_string(sb->netns));
	state_path(r, sb->id, path, sizeof(path));
	err = egr_replace_file_json(path, o, JSON_COMPACT, 0600);
	json_decref(o);
	if (err)
		log_error("write state %s: %s", path, strerror(-err));
	return err;
}

static void drop_state(struct egr_registry *r, uint32_t id)
{
	char path[PATH_MAX];

	state_path(r, id, path, sizeof(path));
	if (unlink(path) < 0 && errno != ENOENT)
		log_warn("remove %s: %m", path);
}

static json_t *load_state_policy(struct egr_registry *r, uint32_t id)
{
	char path[PATH_MAX];
	json_error_t jerr;
	json_t *o, *p;

	state_path(r, id, path, sizeof(path));
	o = json_load_file(path, 0, &jerr);
	if (!o) {
		log_error("read %s: %s", path, jerr.text);
		return NULL;
	}
	p = json_incref(json_object_get(o, "policy"));
	json_decref(o);
	return p;
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

bool egr_reg_confines(struct egr_registry *r, const char *path)
{
	for (size_t i = 0; i < r->n; i++) {
		size_t len = strlen(r->sbs[i]->cgroup);

		if (strncmp(r->sbs[i]->cgroup, path, len) == 0 &&
		    (path[len] == '\0' || path[len] == '/'))
			return true;
	}
	return false;
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
	       (p->audit_mode ? EGR_SB_AUDIT : 0);
}

/* --- egress quotas (docs/metering.md) ----------------------------------------- */

static uint64_t boottime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts); /* bpf_ktime_get_boot_ns() */
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

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
		q.window_start_ns = boottime_ns();
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

static void close_refused(struct egr_registry *r, const struct egr_sb *sb,
			  const struct egr_compiled *c, bool inbound_allow, unsigned *closed);

int egr_reg_attach(struct egr_registry *r, const char *cgroup, const char *netns,
		   const json_t *policy, struct egr_sb **out, struct egr_fail *f)
{
	char real[PATH_MAX];
	struct egr_policy p = { 0 };
	struct egr_compiled c = { 0 };
	struct egr_sandbox ksb = { 0 };
	struct egr_sb *sb;
	int err;

	err = check_cgroup(r, cgroup, real, f);
	if (err)
		return err;
	if (egr_reg_find(r, real, 0)) {
		fail(f, "exists", "cgroup", "%s is already a sandbox; use update", real);
		return -EEXIST;
	}
	err = prepare_for(r, policy, &p, &c, f);
	if (err)
		return err;

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
	sb->id = r->next_sandbox_id++;
	sb->policy_id = alloc_policy_id(r);
	sb->tenant_id = tenant_id(r, p.tenant);
	sb->attached_at = sb->updated_at = time(NULL);
	if (!sb->tenant_id || (netns && !(sb->netns = strdup(netns)))) {
		err = -ENOMEM;
		fail(f, "internal", NULL, "out of memory");
		goto err_free;
	}
	err = start_dns(r, sb, &p, 0, 0, f);
	if (err)
		goto err_free;

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
	err = reg_add(r, sb);
	if (err) {
		fail(f, "internal", NULL, "out of memory");
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
err_state:
	drop_state(r, sb->id);
err_sandbox:
	egr_bpf_del_sandbox(r->bpf, sb->id);
err_rules:
	egr_bpf_del_rules(r->bpf, sb->policy_id, &c);
err_dns:
	if (r->dns)
		egr_dnsproxy_remove_sandbox(r->dns, sb->id);
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
	struct peer_judge j = { .c = c, .learned = r->learned, .sandbox_id = sb->id };
	uint64_t *ids = NULL;
	size_t n = 0;
	int err;

	*closed = 0;
	err = egr_cgroup_subtree_ids(sb->cgroup, &ids, &n);
	if (!err)
		err = egr_sockdiag_destroy_refused(ids, n, inbound_allow, peer_allowed, &j, closed);
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
	if (r->learned && egr_learned_rebase(r->learned, sb->id, old_policy_id, next.policy_id,
					     dpol))
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

/* Every socket is refused while quarantined. */
static bool refuse_all(void *ctx, int family, const uint8_t *daddr, uint16_t dport, int protocol)
{
	(void)ctx, (void)family, (void)daddr, (void)dport, (void)protocol;
	return false;
}

int egr_reg_set_quarantine(struct egr_registry *r, struct egr_sb *sb, bool on, unsigned *closed,
			   struct egr_fail *f)
{
	struct egr_sandbox ksb;
	uint64_t *ids = NULL;
	size_t n = 0;
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
	/* Established connections were judged at connect time: end them all
	 * (the backstop already drops their packets). */
	err = egr_cgroup_subtree_ids(sb->cgroup, &ids, &n);
	if (!err)
		err = egr_sockdiag_destroy_refused(ids, n, false, refuse_all, NULL, closed);
	if (err)
		log_error("sandbox %u: destroying connections of the quarantine: %s (%u closed)",
			  sb->id, strerror(-err), *closed);
	free(ids);
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
	if (r->learned)
		egr_learned_forget(r->learned, id, policy_id);
	if (policy)
		delete_policy_rules(r, id, policy_id, policy);
	drop_state(r, id);
	return ret;
}

int egr_reg_detach(struct egr_registry *r, struct egr_sb *sb, json_t **snapshot,
		   struct egr_fail *f)
{
	json_t *policy = load_state_policy(r, sb->id);
	int err;

	if (r->hooks.detaching)
		r->hooks.detaching(r->hooks.ctx, sb);
	err = teardown(r, sb->id, sb->policy_id, policy);
	json_decref(policy);
	if (err && err != -ENOENT) {
		fail(f, "internal", NULL, "detach sandbox %u: %s", sb->id, strerror(-err));
		return err;
	}
	log_info("sandbox %u detached from %s", sb->id, sb->cgroup);
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
		json_object_set_new(o, "dns", json_pack("{s:i, s:i}", "port4", sb->dns_port4,
							 "port6", sb->dns_port6));
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

/* One state file: adopt its sandbox, repair it, or remove its remains. */
static void adopt_one(struct egr_registry *r, uint32_t id, json_t *st)
{
	const char *cgroup = json_string_value(json_object_get(st, "cgroup"));
	json_t *policy = json_object_get(st, "policy");
	uint32_t policy_id = (uint32_t)json_integer_value(json_object_get(st, "policy_id"));
	uint64_t cgid = (uint64_t)json_integer_value(json_object_get(st, "cgroup_id"));
	struct egr_policy p = { 0 };
	struct egr_compiled c = { 0 };
	struct egr_sandbox ksb;
	struct egr_fail f;
	struct egr_sb *sb = NULL;
	uint64_t now_cgid = 0;
	bool got;
	int err;

	if (!cgroup || !policy || prepare(policy, &p, &c, &f)) {
		log_error("sandbox %u: unusable state file; its links (if any) stay in force", id);
		return;
	}
	if (!egr_bpf_links_complete(r->bpf, id)) {
		/* A crash mid-attach: the command never ran confined by it. */
		log_warn("sandbox %u: attach to %s never completed; rolling it back", id, cgroup);
		teardown(r, id, policy_id, policy);
		goto out;
	}
	if (egr_cgroup_id(cgroup, &now_cgid) < 0 || now_cgid != cgid) {
		log_info("sandbox %u: cgroup %s is gone; removing its state", id, cgroup);
		teardown(r, id, policy_id, policy);
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
	/* Reopen the DNS listeners on the ports the sandbox knows; if they are
	 * taken, new ones (the kernel entry follows below). */
	if (start_dns(r, sb, &p, (uint16_t)json_integer_value(json_object_get(st, "dns_port4")),
		      (uint16_t)json_integer_value(json_object_get(st, "dns_port6")), &f))
		log_error("sandbox %u: no DNS proxy (%s); its DNS is denied", id, f.e.message);
	sb->attached_at = (time_t)json_integer_value(json_object_get(st, "attached_at"));
	sb->updated_at = (time_t)json_integer_value(json_object_get(st, "updated_at"));

	got = egr_bpf_get_sandbox(r->bpf, id, &ksb) == 0;
	/* A quarantine lives in the kernel entry: adoption keeps it. */
	sb->quarantined = got && ksb.quarantined;
	if (!got || ksb.policy_id != policy_id) {
		/* A crash mid-update (or a lost entry): apply the stored policy
		 * again under a fresh id; start-up GC reclaims the rest. */
		log_warn("sandbox %u: kernel policy does not match state; reapplying", id);
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
		if (egr_bpf_put_rules(r->bpf, sb->policy_id, &c) ||
		    egr_bpf_put_sandbox(r->bpf, id, &ksb) || save_state(r, sb, policy)) {
			log_error("sandbox %u: cannot reapply its policy; it stays denied", id);
			egr_bpf_del_sandbox(r->bpf, id); /* no entry: the hooks deny all */
		}
	}
	if (egr_bpf_get_sandbox(r->bpf, id, &ksb) == 0 &&
	    (ksb.dns_port4 != sb->dns_port4 || ksb.dns_port6 != sb->dns_port6)) {
		ksb.dns_port4 = sb->dns_port4;
		ksb.dns_port6 = sb->dns_port6;
		if (egr_bpf_put_sandbox(r->bpf, id, &ksb) || save_state(r, sb, policy))
			log_error("sandbox %u: cannot point DNS at the new proxy ports", id);
	}
	err = egr_bpf_set_cgroup_sandbox(r->bpf, cgid, id);
	if (err)
		log_warn("sandbox %u: rewrite cgroup storage: %s", id, strerror(-err));
	if (reg_add(r, sb))
		goto oom;
	sb_set_meta(sb, &p, &c);
	quota_apply(r, sb, &p, false);
	log_info("sandbox %u adopted (%s, tenant %s, policy %u)", id, sb->cgroup, sb->tenant,
		 sb->policy_id);
	if (r->hooks.adopted)
		r->hooks.adopted(r->hooks.ctx, sb, policy);
	sb = NULL;
	goto out;
oom:
	log_error("sandbox %u: out of memory while adopting; left enforced, unmanaged", id);
out:
	sb_free(sb);
	egr_compiled_free(&c);
	egr_policy_free(&p);
}

static int adopt_all(struct egr_registry *r)
{
	char dir[PATH_MAX], path[PATH_MAX];
	uint32_t *ids = NULL, *live = NULL;
	size_t n = 0, nlive = 0;
	uint32_t max_policy = 0, max_sb = 0;
	struct dirent *de;
	DIR *d;
	int err;

	snprintf(dir, sizeof(dir), "%s/sandboxes", r->state_dir);
	d = opendir(dir);
	if (!d)
		return -errno;
	/* Policy ids must not collide with anything still in the maps. */
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
	while ((de = readdir(d))) {
		json_error_t jerr;
		json_t *st;
		uint32_t id, pid;

		if (!strstr(de->d_name, ".json") || strstr(de->d_name, ".tmp"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		st = json_load_file(path, 0, &jerr);
		if (!st) {
			log_error("read %s: %s", path, jerr.text);
			continue;
		}
		id = (uint32_t)json_integer_value(json_object_get(st, "id"));
		pid = (uint32_t)json_integer_value(json_object_get(st, "policy_id"));
		if (id > max_sb)
			max_sb = id;
		if (pid > max_policy)
			max_policy = pid;
		json_decref(st);
	}
	r->next_sandbox_id = max_sb + 1;
	r->next_policy_id = max_policy + 1;

	rewinddir(d);
	while ((de = readdir(d))) {
		json_error_t jerr;
		json_t *st;

		if (!strstr(de->d_name, ".json") || strstr(de->d_name, ".tmp"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		st = json_load_file(path, 0, &jerr);
		if (!st)
			continue;
		adopt_one(r, (uint32_t)json_integer_value(json_object_get(st, "id")), st);
		json_decref(st);
	}
	closedir(d);

	/* Pinned links without a state file cannot be managed, but they still
	 * confine their cgroup: say so and leave them. */
	if (egr_bpf_pinned_sandboxes(r->bpf, &ids, &n) == 0) {
		for (size_t i = 0; i < n; i++)
			if (!egr_reg_find(r, NULL, ids[i]))
				log_error("sandbox %u: links pinned but no state; left enforced, "
					  "unmanaged (remove %s/links/%u to free it)",
					  ids[i], r->bpf->dir, ids[i]);
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
			if (!egr_reg_find(r, NULL, ids[i]) && access(ldir, F_OK) != 0) {
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
	return 0;
}

int egr_reg_init(struct egr_registry *r, struct egr_bpf *bpf, const char *state_dir,
		 const struct egr_reg_hooks *hooks, struct egr_dnsproxy *dns,
		 struct egr_learned *learned)
{
	char path[PATH_MAX];

	memset(r, 0, sizeof(*r));
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
	memset(r, 0, sizeof(*r));
}
