// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <poll.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "obs/alerting.h"
#include "obs/auditlog.h"
#include "breaker.h"
#include "dns/dnsfair.h"
#include "obs/events.h"
#include "inspect.h"
#include "log.h"
#include "obs/metrics.h"
#include "guard.h"
#include "lifetime.h"
#include "proto.h"
#include "ptree.h"
#include "server.h"
#include "control/approval_ops.h"
#include "control/peer.h"
#include "control/sandbox_ops.h"

int egr_server_listen(const char *path, gid_t group, int *out_fd)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	char dir[PATH_MAX], *slash;
	int fd, err;

	if (strlen(path) >= sizeof(sun.sun_path))
		return -ENAMETOOLONG;
	strcpy(sun.sun_path, path);
	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			return -errno;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* A socket file left by a killed egressd is stale: we own this path. */
	unlink(path);
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 ||
	    chmod(path, 0660) < 0 || (group != (gid_t)-1 && chown(path, 0, group) < 0) ||
	    listen(fd, 64) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	*out_fd = fd;
	return 0;
}

/* The one place a reply's error code becomes its wire string. */
static json_t *error_reply(enum egr_err code, const char *field, const char *msg)
{
	json_t *o = json_pack("{s:b, s:s, s:s}", "ok", 0, "code", egr_err_code(code), "error", msg);

	if (o && field && field[0])
		json_object_set_new(o, "field", json_string(field));
	return o;
}

static json_t *fail_reply(const struct egr_fail *f)
{
	enum egr_err code = egr_err_parse(egr_reg_code_name(f->code));

	/* A domain code the protocol does not have is not sent as is. */
	if (code == EGR_ERR_NONE || code == EGR_ERR_UNKNOWN)
		code = EGR_ERR_INTERNAL;
	return error_reply(code, f->e.field, f->e.message);
}


/* A device sandbox named by "netdev" (and "netns"). */
static struct egr_sb *target_netdev(struct egr_server *s, const json_t *req, json_t **reply)
{
	json_t *nd = json_object_get(req, "netdev"), *ns = json_object_get(req, "netns");
	struct egr_sb *sb;

	if (!json_is_string(nd) || (ns && !json_is_string(ns))) {
		*reply = error_reply(EGR_ERR_BAD_REQUEST, json_is_string(nd) ? "netns" : "netdev",
				     "netdev (a device name) and netns (a path) must be strings");
		return NULL;
	}
	sb = egr_reg_find_netdev(s->reg, json_string_value(nd), json_string_value(ns));
	if (!sb)
		*reply = error_reply(EGR_ERR_NOT_FOUND, "netdev", "no such device sandbox");
	return sb;
}

/* The sandbox a request names by "cgroup", "id" or "netdev". */
static struct egr_sb *target(struct egr_server *s, const json_t *req, json_t **reply)
{
	json_t *cg = json_object_get(req, "cgroup"), *id = json_object_get(req, "id");
	json_t *nd = json_object_get(req, "netdev");
	struct egr_sb *sb;

	if (!!cg + !!id + !!nd != 1) {
		*reply = error_reply(EGR_ERR_BAD_REQUEST, "cgroup",
				     "give exactly one of cgroup, id or netdev");
		return NULL;
	}
	if (nd)
		return target_netdev(s, req, reply);
	if (cg && !json_is_string(cg)) {
		*reply = error_reply(EGR_ERR_BAD_REQUEST, "cgroup", "cgroup must be a string");
		return NULL;
	}
	if (id && (!json_is_integer(id) || json_integer_value(id) <= 0 ||
		   json_integer_value(id) > UINT32_MAX)) {
		*reply = error_reply(EGR_ERR_BAD_REQUEST, "id", "id must be a positive integer");
		return NULL;
	}
	sb = egr_reg_find(s->reg, cg ? json_string_value(cg) : NULL,
			  id ? (uint32_t)json_integer_value(id) : 0);
	if (!sb)
		*reply = error_reply(EGR_ERR_NOT_FOUND, cg ? "cgroup" : "id", "no such sandbox");
	return sb;
}

static json_t *sandbox_reply(const struct egr_sb *sb)
{
	return json_pack("{s:b, s:o}", "ok", 1, "sandbox", egr_sb_json(sb));
}

static json_t *attach_with(struct egr_server *s, const json_t *req, json_t *cg, json_t *pol,
			   json_t *netns, json_t *lpid);

/* {"op":"attach","netdev":IFACE,"netns":PATH,"policy":{...}}: a device
 * sandbox (docs/control-protocol.md). */
static json_t *attach_netdev(struct egr_server *s, const json_t *req)
{
	json_t *nd = json_object_get(req, "netdev"), *ns = json_object_get(req, "netns");
	json_t *pol = json_object_get(req, "policy");
	static const char *const not_here[] = { "cgroup", "create", "launcher_pid", "policy_ref",
						"container", "execution_id" };
	struct egr_fail f;
	struct egr_sb *sb;

	for (size_t i = 0; i < sizeof(not_here) / sizeof(not_here[0]); i++)
		if (json_object_get(req, not_here[i]))
			return error_reply(EGR_ERR_BAD_REQUEST, not_here[i],
					   "not with netdev: a device sandbox has no cgroup, "
					   "launcher or policy tree (put identity in the policy)");
	if (!json_is_string(nd))
		return error_reply(EGR_ERR_BAD_REQUEST, "netdev", "netdev must be a device name");
	if (ns && !json_is_string(ns))
		return error_reply(EGR_ERR_BAD_REQUEST, "netns", "netns must be a path string");
	if (!json_is_object(pol))
		return error_reply(EGR_ERR_BAD_REQUEST, "policy", "policy (an object) is required");
	if (egr_reg_attach_netdev(s->reg, json_string_value(nd), json_string_value(ns), pol, &sb,
				  &f))
		return fail_reply(&f);
	return sandbox_reply(sb);
}

static json_t *do_attach(struct egr_server *s, const json_t *req)
{
	json_t *cg = json_object_get(req, "cgroup"), *pol = json_object_get(req, "policy");
	json_t *netns = json_object_get(req, "netns");
	json_t *lpid = json_object_get(req, "launcher_pid");
	json_t *tree_doc = NULL, *reply;

	if (json_object_get(req, "netdev"))
		return attach_netdev(s, req);
	if (!json_is_string(cg))
		return error_reply(EGR_ERR_BAD_REQUEST, "cgroup",
				   "cgroup (a path string) is required");
	if (json_object_get(req, "policy_ref")) {
		struct egr_ptree_err pe;

		/* The OCI hook's container of a Kubernetes namespace: its policy
		 * is the tree's (ptree.h). */
		if (!s->ptree)
			return error_reply(EGR_ERR_UNAVAILABLE, "policy_ref",
					   "this egressd has no policy tree");
		if (egr_ptree_attach_doc(s->ptree, req, &tree_doc, &pe))
			return error_reply(pe.code, pe.field, pe.message);
		if (!tree_doc)
			return json_pack("{s:b, s:n, s:s}", "ok", 1, "sandbox", "unconfined",
					 "the namespace has no default policy and does not require "
					 "one");
		pol = tree_doc;
	} else if (json_object_get(req, "container") || json_object_get(req, "execution_id")) {
		return error_reply(EGR_ERR_BAD_REQUEST, "container",
				   "container and execution_id go with policy_ref (with policy, "
				   "put them in the policy)");
	}
	reply = attach_with(s, req, cg, pol, netns, lpid);
	json_decref(tree_doc);
	return reply;
}

static json_t *attach_with(struct egr_server *s, const json_t *req, json_t *cg, json_t *pol,
			   json_t *netns, json_t *lpid)
{
	json_t *create = json_object_get(req, "create");
	struct egr_launcher l = { 0 };
	char real[PATH_MAX], made[PATH_MAX];
	const char *path;
	bool fresh = false;
	struct egr_fail f;
	struct egr_sb *sb;
	int pidfd = -1, err;
	bool made_here = false;

	if (!json_is_object(pol))
		return error_reply(EGR_ERR_BAD_REQUEST, "policy", "policy (an object) is required");
	if (netns && !json_is_string(netns))
		return error_reply(EGR_ERR_BAD_REQUEST, "netns", "netns must be a path string");
	if (lpid && (!json_is_integer(lpid) || json_integer_value(lpid) <= 0))
		return error_reply(EGR_ERR_BAD_REQUEST, "launcher_pid",
				   "launcher_pid must be a positive integer (a pid)");
	if (lpid && !s->lifetime)
		return error_reply(EGR_ERR_UNAVAILABLE, "launcher_pid",
				   "launcher ties are not available in this egressd");
	if (create && !json_is_boolean(create))
		return error_reply(EGR_ERR_BAD_REQUEST, "create", "create must be a boolean");
	path = json_string_value(cg);
	if (json_is_true(create)) {
		/* The directory is root's: a non-root peer could not use it. */
		if (s->peer.uid != 0)
			return error_reply(EGR_ERR_FORBIDDEN, "create",
					   "create is for root peers (the cgroup egressd makes "
					   "is root's)");
		if (egr_reg_create_cgroup(path, made, sizeof(made), &fresh, &f))
			return fail_reply(&f);
		made_here = true;
		path = made;
	}
	if (lpid) {
		const char *why = NULL;

		/* Resolved once: the cgroup checked is the cgroup attached. */
		err = realpath(path, real) ? 0 : -ENOENT;
		/* Only the connecting process can tie a sandbox to itself. */
		if (!err)
			err = egr_lifetime_peer_launcher(s->peer_fd, &s->peer,
							 json_integer_value(lpid), real, &l,
							 &pidfd, &why);
		if (err) {
			char msg[160];

			if (made_here)
				rmdir(made); /* nothing half-applied */
			if (err == -ENOENT)
				return error_reply(EGR_ERR_BAD_CGROUP, "cgroup",
						   "the cgroup does not exist");
			if (err == -EPERM)
				return error_reply(EGR_ERR_FORBIDDEN, "launcher_pid", why);
			if (err == -EBUSY)
				return error_reply(EGR_ERR_BAD_CGROUP, "cgroup", why);
			snprintf(msg, sizeof(msg), "cannot watch launcher %lld of %s: %s",
				 (long long)json_integer_value(lpid), real, strerror(-err));
			return error_reply(EGR_ERR_INTERNAL, "launcher_pid", msg);
		}
		path = real;
	}
	if (egr_reg_attach(s->reg, path, json_string_value(netns), pol, lpid ? &l : NULL, fresh,
			   &sb, &f)) {
		if (pidfd >= 0)
			close(pidfd);
		if (made_here)
			rmdir(made);
		return fail_reply(&f);
	}
	/* A tie that fails here is made by the next lifetime check. */
	if (pidfd >= 0 && (err = egr_lifetime_tie(s->lifetime, sb, pidfd)))
		log_warn("sandbox %u: watch launcher pid %d: %s; retried within a second", sb->id,
			 l.pid, strerror(-err));
	return sandbox_reply(sb);
}

static json_t *do_update(struct egr_server *s, const json_t *req)
{
	json_t *pol = json_object_get(req, "policy");
	json_t *reply = NULL;
	struct egr_fail f;
	struct egr_sb *sb;
	unsigned closed = 0;

	if (!json_is_object(pol))
		return error_reply(EGR_ERR_BAD_REQUEST, "policy", "policy (an object) is required");
	sb = target(s, req, &reply);
	if (!sb)
		return reply;
	/* A container stays that container: its identity is kept through an
	 * update whose policy does not name one. */
	if (sb->container && !json_object_get(pol, "container")) {
		json_t *np = json_deep_copy(pol);
		int rc;

		if (!np || json_object_set_new(np, "container", json_deep_copy(sb->container))) {
			json_decref(np);
			return error_reply(EGR_ERR_INTERNAL, NULL, "out of memory");
		}
		rc = egr_reg_update(s->reg, sb, np, &closed, &f);
		json_decref(np);
		if (rc)
			return fail_reply(&f);
	} else if (egr_reg_update(s->reg, sb, pol, &closed, &f)) {
		return fail_reply(&f);
	}
	reply = sandbox_reply(sb);
	if (reply)
		json_object_set_new(reply, "connections_closed", json_integer(closed));
	return reply;
}

static json_t *do_detach(struct egr_server *s, const json_t *req)
{
	json_t *status = json_object_get(req, "status");
	json_t *reply = NULL, *snap = NULL;
	struct egr_fail f;
	struct egr_sb *sb;

	if (status && (!json_is_string(status) || json_string_length(status) > 32))
		return error_reply(EGR_ERR_BAD_REQUEST, "status", "status must be a short string");
	sb = target(s, req, &reply);
	if (!sb) {
		/* Held under deny-all (detached, or its state was not trusted):
		 * detaching it again leaves it so until its cgroup is released. */
		json_t *cg = json_object_get(req, "cgroup"), *id = json_object_get(req, "id");
		struct egr_held *h = egr_reg_find_held(s->reg, json_string_value(cg),
						       (uint32_t)json_integer_value(id));

		if (!h || (cg && !json_is_string(cg)))
			return reply;
		json_decref(reply);
		if (egr_reg_detach_held(s->reg, h, &f))
			return fail_reply(&f);
		return json_pack("{s:b, s:o}", "ok", 1, "sandbox", egr_held_json(h));
	}
	/* For the execution's audit record ("exited:0", "killed:9"). */
	if (status && egr_reg_set_end_status(s->reg, sb, json_string_value(status)))
		log_warn("sandbox %u: out of memory; its audit record says \"detached\"", sb->id);
	/* The reply shows the sandbox as it was: it is gone after. */
	snap = egr_sb_json(sb);
	if (egr_reg_detach(s->reg, sb, &f)) {
		json_decref(snap);
		return fail_reply(&f);
	}
	return json_pack("{s:b, s:o}", "ok", 1, "sandbox", snap ? snap : json_null());
}

/* {"op":"release","cgroup"|"id"}: lift a circuit-breaker quarantine. */
static json_t *do_release(struct egr_server *s, const json_t *req)
{
	json_t *reply = NULL;
	struct egr_fail f;
	struct egr_sb *sb;

	sb = target(s, req, &reply);
	if (!sb)
		return reply;
	if (!sb->quarantined)
		return error_reply(EGR_ERR_NOT_QUARANTINED,
				   json_object_get(req, "id") ? "id" : "cgroup",
				   "the sandbox is not quarantined");
	if (!s->breaker)
		return error_reply(EGR_ERR_UNAVAILABLE, NULL, "the circuit breaker is not running");
	if (egr_breaker_release(s->breaker, sb, &f))
		return fail_reply(&f);
	return sandbox_reply(sb);
}

/* {"op":"list","after":id,"limit":n}: the sandboxes, a page at a time when
 * asked (a whole list of 10,000 holds the loop for ~0.5 s). */
static json_t *do_list(struct egr_server *s, const json_t *req)
{
	json_t *after = json_object_get(req, "after"), *limit = json_object_get(req, "limit");
	struct egr_list_page pg = { 0 };

	if (after && (!json_is_integer(after) || json_integer_value(after) < 0 ||
		      json_integer_value(after) > UINT32_MAX))
		return error_reply(EGR_ERR_BAD_REQUEST, "after", "after must be a sandbox id");
	if (limit && (!json_is_integer(limit) || json_integer_value(limit) < 1))
		return error_reply(EGR_ERR_BAD_REQUEST, "limit", "limit must be a positive integer");
	pg.after = (uint32_t)json_integer_value(after);
	pg.paged = pg.after > 0; /* after 0 is the first page */
	pg.limit = (size_t)json_integer_value(limit);
	return egr_sandbox_list_reply(s->reg, &pg);
}

static json_t *do_status(struct egr_server *s, const json_t *req)
{
	json_t *reply = NULL, *counters;
	uint64_t cnt[EGR_CNT_MAX], walked, skipped;
	const struct egr_features *ft = s->features;

	counters = json_object();
	if (counters && egr_bpf_counters(egr_reg_bpf(s->reg), cnt) == 0)
		for (int i = 0; i < EGR_CNT_MAX; i++)
			json_object_set_new(counters, egr_counter_names[i],
					    json_integer((json_int_t)cnt[i]));
	reply = json_pack("{s:b, s:s, s:i, s:s, s:s, s:I, s:{s:b, s:b, s:b, s:b, s:b, s:b}, s:o}",
			  "ok", 1, "version", EGRESSD_VERSION, "pid", (int)getpid(), "bpffs_dir",
			  egr_bpf_dir(egr_reg_bpf(s->reg)), "state_dir", egr_reg_state_dir(s->reg),
			  "sandboxes", (json_int_t)egr_reg_count(s->reg), "features", "btf", ft->btf,
			  "cgroup2",
			  ft->cgroup2, "bpffs", ft->bpffs, "cgroup_sock_addr",
			  ft->cgroup_sock_addr, "cgroup_sock", ft->cgroup_sock, "bpf_link",
			  ft->bpf_link, "counters", counters);
	if (reply) {
		json_object_set_new(reply, "layers", egr_features_layers(ft));
		json_object_set_new(reply, "held",
				    json_pack("{s:I, s:I}", "detached",
					      (json_int_t)egr_reg_held_count(s->reg,
									  EGR_HELD_DETACHED),
					      "tampered",
					      (json_int_t)egr_reg_held_count(s->reg,
									  EGR_HELD_TAMPERED)));
		if (s->guard)
			json_object_set_new(reply, "pins", egr_guard_status(s->guard));
		egr_reg_attach_walks(s->reg, &walked, &skipped);
		json_object_set_new(reply, "attach",
				    json_pack("{s:I, s:I}", "socket_walks", (json_int_t)walked,
					      "fresh_no_walk", (json_int_t)skipped));
		egr_reg_detach_walks(s->reg, &walked, &skipped);
		json_object_set_new(reply, "detach",
				    json_pack("{s:I, s:I}", "socket_walks", (json_int_t)walked,
					      "no_socket_no_walk", (json_int_t)skipped));
		json_object_set_new(reply, "adopted_links_refreshed",
				    json_integer((json_int_t)egr_bpf_links_refreshed(
					    egr_reg_bpf(s->reg))));
		json_object_set_new(reply, "cgroup_namespace", json_string(s->cgroup_ns));
		if (s->ptree)
			json_object_set_new(reply, "policy_tree", egr_ptree_status(s->ptree));
		json_object_set_new(reply, "hardening",
				    json_pack("{s:b, s:b, s:i, s:i, s:I, s:b}", "capabilities",
					      s->hardening.caps, "seccomp", s->hardening.seccomp,
					      "capabilities_dropped", s->hardening.caps_dropped,
					      "syscalls_denied", s->hardening.syscalls_denied, "uid",
					      (json_int_t)getuid(), "peer_pidfd",
					      egr_peer_pidfd_supported()));
	}
	return reply;
}

/* do_status plus the event stream, alerting and audit figures. */
static json_t *do_status_obs(struct egr_server *s, const json_t *req)
{
	json_t *reply = do_status(s, req);

	if (!json_is_true(json_object_get(reply, "ok")))
		return reply;
	if (s->health) {
		/* Unjudgeable counts as unhealthy (a probe must not pass by default). */
		json_t *problems = egr_health_problems(s->health);

		json_object_set_new(reply, "healthy",
				    json_boolean(problems && json_array_size(problems) == 0));
		json_object_set_new(reply, "problems",
				    problems ? problems
					     : json_pack("[s]", "health: out of memory"));
	}
	if (s->events)
		json_object_set_new(reply, "events", egr_events_status(s->events));
	if (s->alerting)
		json_object_set_new(reply, "alerts", egr_alerting_status(s->alerting));
	if (s->audit)
		json_object_set_new(reply, "audit", egr_auditlog_status(s->audit));
	if (egr_reg_inspect(s->reg))
		json_object_set_new(reply, "inspect", egr_inspect_status(egr_reg_inspect(s->reg)));
	if (s->breaker)
		json_object_set_new(reply, "breaker", egr_breaker_status(s->breaker));
	return reply;
}

/* {"op":"events","follow":bool,"sandbox":id,"limit":n}: the kept events;
 * with follow, just {"ok":true} here and egr_server_handle hands the
 * connection to the event stream. */
static json_t *do_events(struct egr_server *s, const json_t *req)
{
	json_t *follow = json_object_get(req, "follow");
	json_t *sb = json_object_get(req, "sandbox"), *limit = json_object_get(req, "limit");

	if (!s->events)
		return error_reply(EGR_ERR_UNAVAILABLE, NULL, "the event stream is not running");
	if (follow && !json_is_boolean(follow))
		return error_reply(EGR_ERR_BAD_REQUEST, "follow", "follow must be a boolean");
	if (sb && (!json_is_integer(sb) || json_integer_value(sb) < 0 ||
		   json_integer_value(sb) > UINT32_MAX))
		return error_reply(EGR_ERR_BAD_REQUEST, "sandbox", "sandbox must be a sandbox id");
	if (limit && (!json_is_integer(limit) || json_integer_value(limit) < 0))
		return error_reply(EGR_ERR_BAD_REQUEST, "limit",
				   "limit must be a non-negative integer");
	if (json_is_true(follow)) {
		if (!egr_events_subscriber_room(s->events))
			return error_reply(EGR_ERR_TOO_MANY, "follow",
					   "too many event subscribers; try again later");
		return json_pack("{s:b}", "ok", 1);
	}
	return json_pack("{s:b, s:o}", "ok", 1, "events",
			 egr_events_query(s->events, (uint32_t)json_integer_value(sb),
					  (size_t)json_integer_value(limit)));
}

/* {"op":"stats","tenant":T?}: per-tenant and per-sandbox figures, the
 * numbers /metrics shows (docs/metering.md). */
static json_t *do_stats(struct egr_server *s, const json_t *req)
{
	json_t *tenant = json_object_get(req, "tenant"), *body;

	if (tenant && !json_is_string(tenant))
		return error_reply(EGR_ERR_BAD_REQUEST, "tenant", "tenant must be a string");
	if (!s->metrics)
		return error_reply(EGR_ERR_INTERNAL, NULL, "metering is not available");
	body = egr_metrics_stats_json(s->metrics, json_string_value(tenant));
	if (!body)
		return NULL;
	/* Each sandbox row gets what the DNS proxy shed for it. */
	for (size_t i = 0; i < json_array_size(json_object_get(body, "sandboxes")); i++) {
		json_t *row = json_array_get(json_object_get(body, "sandboxes"), i);
		json_int_t id = json_integer_value(json_object_get(row, "id"));
		json_t *dns = id > 0 ? egr_dnsfair_json(egr_reg_dns(s->reg), (uint32_t)id) : NULL;

		if (dns)
			json_object_set_new(row, "dns_proxy", dns);
	}
	json_object_set_new(body, "ok", json_true());
	return body;
}

/* {"op":"ping"}: alive, and where its state is (what `egressctl run` hides
 * from the command), in O(1): status does far more. */
static json_t *do_ping(struct egr_server *s, const json_t *req)
{
	(void)req;
	return json_pack("{s:b, s:s, s:s, s:s}", "ok", 1, "version", EGRESSD_VERSION,
			 "state_dir", egr_reg_state_dir(s->reg), "bpffs_dir",
			 egr_bpf_dir(egr_reg_bpf(s->reg)));
}

/* Approvals (control/approval_ops.c): the peer deciding is the approver. */
static json_t *do_approvals(struct egr_server *s, const json_t *req)
{
	return egr_ctl_approvals(s->approvals, req);
}

static json_t *do_approve(struct egr_server *s, const json_t *req)
{
	return egr_ctl_approve(s->approvals, &s->peer, req);
}

static json_t *do_deny(struct egr_server *s, const json_t *req)
{
	return egr_ctl_deny(s->approvals, &s->peer, req);
}

typedef json_t *op_handler(struct egr_server *s, const json_t *req);

/* A handler for every operation of proto's op table, indexed by it. */
static op_handler *const handlers[EGR_OP_COUNT] = {
	[EGR_OP_PING] = do_ping,	 [EGR_OP_STATUS] = do_status_obs,
	[EGR_OP_LIST] = do_list,	 [EGR_OP_ATTACH] = do_attach,
	[EGR_OP_UPDATE] = do_update,	 [EGR_OP_DETACH] = do_detach,
	[EGR_OP_RELEASE] = do_release, [EGR_OP_EVENTS] = do_events,
	[EGR_OP_STATS] = do_stats,	 [EGR_OP_APPROVALS] = do_approvals,
	[EGR_OP_APPROVE] = do_approve, [EGR_OP_DENY] = do_deny,
};

static json_t *dispatch(struct egr_server *s, const json_t *req)
{
	struct egr_proto_error pe;
	enum egr_op op;

	/* Op and field names, checked once for every request
	 * (user/lib/proto.c; fuzzed by tests/fuzz/fuzz_control.c). */
	if (egr_proto_check_op(req, &op, &pe))
		return error_reply(EGR_ERR_BAD_REQUEST, pe.field, pe.message);
	if (!handlers[op]) /* an op proto knows and this egressd does not serve */
		return error_reply(EGR_ERR_BAD_REQUEST, "op", "unknown op");
	return handlers[op](s, req);
}

/*
 * Answer a refused peer at once and let the caller close it, never reading
 * what it sent: a refused peer gets no time at all. The short reply fits in
 * an empty socket buffer; unix stream sockets deliver what was queued before
 * the close ahead of the reset, so the peer still reads it.
 */
void egr_server_refuse(int cfd, const struct ucred *cred, const char *why)
{
	json_t *reply = error_reply(EGR_ERR_FORBIDDEN, NULL,
				    "peer is sandboxed, or neither root nor in the control group");
	char *text = reply ? json_dumps(reply, JSON_COMPACT) : NULL;

	log_warn("control: refused peer pid %d uid %u gid %u: %s", cred->pid, cred->uid,
		 cred->gid, why ?: "refused");
	if (text) {
		size_t len = strlen(text);

		text[len++] = '\n'; /* overwrites the NUL */
		if (send(cfd, text, len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
			log_debug("control: refusal to pid %d: %m", cred->pid);
	}
	free(text);
	json_decref(reply);
}

bool egr_server_admit(struct egr_server *s, int cfd, struct ucred *cred, const char **why)
{
	const struct egr_peer_rules r = {
		.cgroup_root = s->cgroup_root,
		.reg = s->reg,
		.bpf = s->reg ? egr_reg_bpf(s->reg) : NULL,
		.group = s->group,
	};

	return egr_peer_judge(&r, cfd, cred, why) == 0;
}

json_t *egr_server_answer(struct egr_server *s, int cfd, const struct ucred *cred,
			  const json_t *req)
{
	json_t *reply;

	egr_auditlog_set_actor(s->audit, cred);
	/* The peer's fd and credentials, for ops that tie a sandbox to it
	 * (attach's launcher_pid: SO_PEERPIDFD). */
	s->peer_fd = cfd;
	s->peer = *cred;
	reply = dispatch(s, req);
	s->peer_fd = -1;
	memset(&s->peer, 0, sizeof(s->peer));
	egr_auditlog_set_actor(s->audit, NULL);
	log_debug("control: pid %d uid %u op %s -> %s", cred->pid, cred->uid,
		  json_string_value(json_object_get(req, "op")) ?: "?",
		  json_is_true(json_object_get(reply, "ok")) ? "ok" : "error");
	if (!reply)
		reply = error_reply(EGR_ERR_INTERNAL, NULL, "out of memory");
	return reply;
}

json_t *egr_server_error(enum egr_err code, const char *msg)
{
	return error_reply(code, NULL, msg);
}

bool egr_server_follows(const json_t *req, const json_t *reply, uint32_t *sandbox)
{
	const struct egr_op_desc *d =
		req ? egr_op_lookup(json_string_value(json_object_get(req, "op"))) : NULL;

	if (!d || !(d->flags & EGR_OPF_STREAMS) || !json_is_true(json_object_get(reply, "ok")) ||
	    !json_is_true(json_object_get(req, "follow")))
		return false;
	*sandbox = (uint32_t)json_integer_value(json_object_get(req, "sandbox"));
	return true;
}
