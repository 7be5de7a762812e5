// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Adoption at start: every sandbox an earlier egressd left pinned is
 * managed again, repaired, or held under deny-all when its state cannot be
 * trusted; docs/architecture.md, "The registry", and docs/security.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>
#include <sys/stat.h>

#include "cgroup.h"
#include "compile.h"
#include "dns/dnsproxy.h"
#include "fileio.h"
#include "inspect.h"
#include "log.h"
#include "registry/registry_impl.h"

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

	egr_state_move_aside(&r->st, id);
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
	reg_deny_all(r, id, tenant);
	if (cg)
		egr_bpf_set_cgroup_sandbox(r->bpf, cg, id);
	if (path[0])
		reg_destroy_sockets(id, path, cg, NULL);
	snprintf(reason, sizeof(reason), "%s", why);
	h = egr_reg_held_add(r, id, tenant, cg, path[0] ? path : NULL, EGR_HELD_TAMPERED, reason,
			     time(NULL));
	if (h && egr_state_save_held(&r->st, h))
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
	reg_deny_all(r, id, tenant);
	if (!egr_reg_held_add(r, id, tenant, cg, cgroup, state,
			      json_string_value(json_object_get(st, "reason")),
			      (time_t)json_integer_value(json_object_get(st, "since"))))
		log_error("sandbox %u: out of memory; left under deny-all, unmanaged", id);
	else
		log_info("sandbox %u (%s): held under deny-all (%s)", id, cgroup ? cgroup : "?",
			 egr_held_state_name(state));
}

/* Does the kernel's entry say what the stored policy says? */
static bool kernel_matches(struct egr_registry *r, const struct egr_sandbox *ksb,
			   const struct egr_policy *p, const struct egr_compiled *c)
{
	struct egr_sandbox want;

	reg_kernel_entry(&want, NULL, ksb->policy_id, ksb->tenant_id, p);
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

	if (json_is_string(json_object_get(st, "netdev"))) {
		/* Device sandboxes are newer than unsigned state files. */
		if (!legacy)
			return reg_adopt_netdev(r, id, st);
		quarantine(r, id, "state_tampered", "a device sandbox's state file has no MAC");
		return NULL;
	}
	if (!cgroup || !policy || reg_prepare(NULL, policy, &p, &c, &f)) {
		quarantine(r, id, "state_tampered", "its state file has no usable policy");
		goto out;
	}
	err = egr_bpf_adopt_links(r->bpf, id);
	if (err == -EXDEV) {
		quarantine(r, id, "state_tampered",
			   "its pinned links are attached to different cgroups");
		goto out;
	}
	if (err == -ESTALE) {
		quarantine(r, id, "state_tampered",
			   "its links run with another cgroup storage than the pinned "
			   "egr_cg_storage");
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
		reg_teardown(r, id, policy_id, policy);
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
	sb->tenant_id = reg_tenant_id(r, p.tenant);
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
	if (reg_start_dns(r, sb, &p, NULL,
			  (uint16_t)json_integer_value(json_object_get(st, "dns_port4")),
			  (uint16_t)json_integer_value(json_object_get(st, "dns_port6")), &f))
		log_error("sandbox %u: no DNS proxy (%s); its DNS is denied", id, f.e.message);
	if (reg_start_inspect(r, sb, &p,
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
		reg_reapply_stored(r, sb, &p, &c, policy);
	}
	reg_sync_ports(r, sb, policy);
	/* Programs newer than the egressd that attached it (the bind guard,
	 * kernel/listen.h): attached now. */
	if (!egr_bpf_links_complete(r->bpf, id) && egr_bpf_attach_missing(r->bpf, id, cgroup))
		log_error("sandbox %u: cannot attach the bind guard to %s: its neighbours' proxy "
			  "ports are not reserved against it", id, cgroup);
	err = egr_bpf_set_cgroup_sandbox(r->bpf, cgid, id);
	if (err && link_cg)
		log_warn("sandbox %u: rewrite cgroup storage: %s", id, strerror(-err));
	reg_home_procs(r, sb, cgroup);
	if (legacy) {
		err = egr_state_save_sb(&r->st, sb, policy);
		if (err) {
			/* Unsigned it would be held at the next start: hold it now,
			 * while the kernel still says what it is. */
			if (r->dns)
				egr_dnsproxy_remove_sandbox(r->dns, id);
			if (r->inspect)
				egr_inspect_remove_sandbox(r->inspect, id);
			egr_sb_free(sb);
			sb = NULL;
			quarantine(r, id, "state_tampered",
				   "the kernel confirmed its unsigned state file, but it cannot be "
				   "signed");
			goto out;
		}
		log_info("sandbox %u: the kernel confirmed its state file; now authenticated", id);
	}
	if (egr_reg_add(r, sb))
		goto oom;
	reg_sb_set_meta(sb, &p, &c);
	reg_quota_apply(r, sb, &p, false);
	log_info("sandbox %u adopted (%s, tenant %s, policy %u)", id, sb->cgroup, sb->tenant,
		 sb->policy_id);
	if (legacy && r->hooks.upgraded)
		r->hooks.upgraded(r->hooks.ctx, sb, policy);
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
	egr_sb_free(sb);
	egr_compiled_free(&c);
	egr_policy_free(&p);
	return gone;
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

	snprintf(dir, sizeof(dir), "%s/sandboxes", r->st.dir);
	d = opendir(dir);
	if (!d)
		return -errno;
	/* Policy and sandbox ids must not collide with anything in the maps;
	 * the (unauthenticated) numbers in the files can only raise them. */
	/* A walk that fails leaves ids unknown: refusing to start keeps the
	 * pinned links enforcing instead of reusing an id the kernel holds. */
	err = egr_bpf_list_sandbox_ids(r->bpf, &ids, &n);
	if (err) {
		log_error("adopt: cannot list the kernel's sandboxes: %s", strerror(-err));
		closedir(d);
		return err;
	}
	{
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
		uint32_t id = egr_state_file_id(de->d_name), pid;

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
		uint32_t id = egr_state_file_id(de->d_name);
		bool legacy = false;
		const char *state;
		json_t *st;
		int rerr;

		if (!id)
			continue;
		st = egr_state_read(&r->st, id, why, sizeof(why), &rerr, &legacy);
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

			snprintf(ldir, sizeof(ldir), "%s/links/%u", egr_bpf_dir(r->bpf), ids[i]);
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

		if (egr_reg_detach(r, gone[i], &f))
			log_error("sandbox %u: %s", gone[i]->id, f.e.message);
	}
	free(gone);
	return 0;
}

int egr_reg_new(struct egr_registry **out)
{
	*out = egr_reg_alloc();
	return *out ? 0 : -ENOMEM;
}

void egr_reg_set_host_lsm_cgroup(struct egr_registry *r, bool on)
{
	r->host_lsm_cgroup = on;
}

int egr_reg_init(struct egr_registry *r, struct egr_bpf *bpf, const char *state_dir,
		 const struct egr_reg_hooks *hooks, struct egr_dnsproxy *dns,
		 struct egr_inspect *inspect, struct egr_learned *learned)
{
	int err;

	r->bpf = bpf;
	r->dns = dns;
	r->inspect = inspect;
	r->learned = learned;
	if (hooks)
		r->hooks = *hooks;
	read_self_cgroup(r);
	/* ABI version 1 egressds signed no state file: after an upgrade from
	 * one, its files have no MAC whether or not a key exists already. */
	err = egr_state_open(&r->st, state_dir, egr_bpf_migrated_from(bpf) == 1);
	if (err)
		return err;
	egr_state_tenants_load(&r->st, &r->tenants, &r->ntenants);
	err = adopt_all(r);
	if (err)
		return err;
	/* Every file was looked at: re-signed, or held. A later file without
	 * a MAC is tampering. */
	err = egr_state_upgrade_done(&r->st);
	if (err)
		log_warn("upgrade: the window for unsigned state files stays open: %s",
			 strerror(-err));
	/* From here on requests answer only after their state files' batch is
	 * durable (statefile.c, "group commit"); adoption's own writes above
	 * were durable one by one. */
	if (egr_commitq_default() && (err = egr_state_set_commit(&r->st, egr_commitq_default())))
		log_warn("state files: no group commit (%s); each write is synced on its own",
			 strerror(-err));
	return 0;
}
