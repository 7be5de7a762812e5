// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Attach: a cgroup gets a policy (docs/architecture.md, "The registry",
 * for its steps and their undo).
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

#include "cgroup.h"
#include "compile.h"
#include "dns/dnsproxy.h"
#include "inspect.h"
#include "log.h"
#include "registry/registry_impl.h"

/*
 * The steps, each undone in reverse when a later one fails (the undo_*
 * labels; docs/architecture.md, "The registry"):
 *   1 the record (ids, tenant)            5 the state file, "attached"
 *   2 DNS and inspecting listeners         6 the links
 *   3 the rules under a new policy id      7 the cgroup storage naming it
 *   4 the kernel's sandbox entry           8 into the set
 * A held cgroup with its links in place does 4-7 as one switch of its
 * entry from deny-all, then the state; undone by deny-all again.
 */
int egr_reg_attach(struct egr_registry *r, const char *cgroup, const char *netns,
		   const json_t *policy, const struct egr_launcher *launcher, bool fresh,
		   struct egr_sb **out, struct egr_fail *f)
{
	char real[PATH_MAX];
	struct egr_policy p = { 0 };
	struct egr_compiled c = { 0 };
	struct egr_sandbox ksb;
	struct egr_sb *sb;
	struct egr_held *held;
	uint32_t reuse_id = 0;
	int err;

	err = reg_check_cgroup(r, cgroup, real, f);
	if (err)
		return err;
	err = reg_prepare(r, policy, &p, &c, f);
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
			reg_fail(f, EGR_REG_EXISTS, "cgroup",
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
			reg_release_held(r, held);
	}

	/* 1: the record. */
	sb = calloc(1, sizeof(*sb));
	if (!sb || !(sb->cgroup = strdup(real))) {
		err = -ENOMEM;
		reg_fail(f, EGR_REG_INTERNAL, NULL, "out of memory");
		goto undo_record;
	}
	err = egr_cgroup_id(real, &sb->cgroup_id);
	if (err) {
		reg_fail(f, EGR_REG_BAD_CGROUP, "cgroup", "cgroup id of %s: %s", real, strerror(-err));
		goto undo_record;
	}
	sb->id = reuse_id ? reuse_id : r->next_sandbox_id++;
	sb->policy_id = reg_alloc_policy_id(r);
	sb->tenant_id = reg_tenant_id(r, p.tenant);
	sb->attached_at = sb->updated_at = time(NULL);
	if (launcher)
		sb->launcher = *launcher;
	if (!sb->tenant_id || (netns && !(sb->netns = strdup(netns)))) {
		err = -ENOMEM;
		reg_fail(f, EGR_REG_INTERNAL, NULL, "out of memory");
		goto undo_record;
	}
	/* 2: its listeners. */
	err = reg_start_dns(r, sb, &p, NULL, 0, 0, f);
	if (err)
		goto undo_record;
	err = reg_start_inspect(r, sb, &p, 0, 0, f);
	if (err)
		goto undo_listeners;

	/* 3, 4: rules and the sandbox entry first, links last: the moment a
	 * link is in place its storage says "no sandbox" (deny) until we name
	 * it. */
	err = egr_bpf_put_rules(r->bpf, sb->policy_id, &c);
	if (err) {
		reg_fail_rules(f, err);
		goto undo_listeners;
	}
	reg_kernel_entry(&ksb, sb, sb->policy_id, sb->tenant_id, &p);
	if (reuse_id) {
		/* Held: its links are in place (4-7 in one). The switch from
		 * deny-all first, then the state: a crash in between leaves
		 * the state saying "detached", and the next start holds it
		 * under deny-all. */
		egr_bpf_forget_sandbox_stats(r->bpf, sb->id); /* a new execution */
		err = egr_bpf_put_sandbox(r->bpf, sb->id, &ksb);
		if (!err)
			err = egr_state_save_sb(&r->st, sb, policy);
		if (err) {
			reg_fail(f, EGR_REG_INTERNAL, NULL, "attach to held sandbox %u: %s", sb->id,
				 strerror(-err));
			reg_deny_all(r, sb->id, held->tenant_id);
			goto undo_rules;
		}
		egr_reg_held_remove(r, held);
		goto named;
	}
	err = egr_bpf_put_sandbox(r->bpf, sb->id, &ksb);
	if (err) {
		reg_fail_rules(f, err);
		goto undo_rules;
	}
	/* 5, 6, 7 */
	err = egr_state_save_sb(&r->st, sb, policy);
	if (err) {
		reg_fail(f, EGR_REG_INTERNAL, NULL, "write state: %s", strerror(-err));
		goto undo_entry;
	}
	err = egr_bpf_attach(r->bpf, sb->id, real);
	if (err) {
		reg_fail(f, EGR_REG_INTERNAL, NULL, "attach programs to %s: %s", real, strerror(-err));
		goto undo_state;
	}
	err = egr_bpf_set_cgroup_sandbox(r->bpf, sb->cgroup_id, sb->id);
	if (err) {
		reg_fail(f, EGR_REG_INTERNAL, NULL, "name sandbox in cgroup storage: %s", strerror(-err));
		goto undo_links;
	}
named:
	if (reuse_id && egr_bpf_set_cgroup_sandbox(r->bpf, sb->cgroup_id, sb->id))
		log_warn("sandbox %u: cannot name it for the escape guard again", sb->id);
	reg_home_procs(r, sb, real);
	/* 8: the last step that can fail. */
	err = egr_reg_add(r, sb);
	if (err) {
		reg_fail(f, EGR_REG_INTERNAL, NULL, "out of memory");
		if (reuse_id) {
			/* Back to held under deny-all; the next start finds it so. */
			struct egr_held h = { .id = sb->id, .tenant_id = sb->tenant_id,
					      .cgroup_id = sb->cgroup_id, .cgroup = sb->cgroup,
					      .state = EGR_HELD_DETACHED, .since = time(NULL) };

			egr_state_save_held(&r->st, &h);
			reg_deny_all(r, sb->id, sb->tenant_id);
			goto undo_rules;
		}
		goto undo_links;
	}
	reg_sb_set_meta(sb, &p, &c);
	reg_quota_apply(r, sb, &p, true);
	log_info("sandbox %u attached to %s (tenant %s, policy %u: %zu v4, %zu v6 prefixes)",
		 sb->id, sb->cgroup, sb->tenant, sb->policy_id, sb->n4, sb->n6);
	if (fresh) {
		/* Made by egressd for this request, and no one but host root
		 * could have put a process in before the links: it has no
		 * socket of its own to judge (egr_reg_create_cgroup). */
		r->attach_fresh++;
		sb->fresh = true; /* the detach may skip its walk too (detach.c) */
	} else {
		/* Sockets the cgroup already had were never judged (the
		 * backstop trusts connected ones): judge them now. */
		unsigned closed;

		r->attach_walked++;
		if (!p.audit_mode)
			reg_close_refused(r, sb, &c, p.inbound_allow, &closed);
	}
	if (r->hooks.attached)
		r->hooks.attached(r->hooks.ctx, sb, policy);
	egr_compiled_free(&c);
	egr_policy_free(&p);
	*out = sb;
	return 0;

undo_links: /* 6, 7 */
	egr_bpf_detach(r->bpf, sb->id);
	egr_bpf_forget_cgroup(r->bpf, sb->cgroup_id);
undo_state: /* 5 */
	egr_state_drop(&r->st, sb->id);
undo_entry: /* 4 */
	egr_bpf_del_sandbox(r->bpf, sb->id);
undo_rules: /* 3 */
	egr_bpf_del_rules(r->bpf, sb->policy_id, &c);
undo_listeners: /* 2 */
	if (r->dns)
		egr_dnsproxy_remove_sandbox(r->dns, sb->id);
	if (r->inspect)
		egr_inspect_remove_sandbox(r->inspect, sb->id);
undo_record: /* 1 */
	egr_sb_free(sb);
	egr_compiled_free(&c);
	egr_policy_free(&p);
	return err;
}

void egr_reg_attach_walks(const struct egr_registry *r, uint64_t *walked, uint64_t *skipped)
{
	*walked = r->attach_walked;
	*skipped = r->attach_fresh;
}

/*
 * Can only host root put a process into a new child of parent? A process
 * joins a cgroup by writing its cgroup.procs (a new cgroup's files are its
 * creator's, root's here) or by clone3(CLONE_INTO_CGROUP), which the kernel
 * allows when the caller may write the cgroup.procs of the common ancestor
 * of its cgroup and the target (cgroup_attach_permissions): that ancestor is
 * parent or above, up to the mount's root.
 */
static bool only_root_moves_into(const char *parent, size_t mnt_len)
{
	char dir[PATH_MAX], procs[PATH_MAX + 16];
	struct stat st;
	char *slash;

	if ((size_t)snprintf(dir, sizeof(dir), "%s", parent) >= sizeof(dir))
		return false;
	for (;;) {
		if ((size_t)snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir) >= sizeof(procs) ||
		    stat(procs, &st) < 0 || st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)))
			return false;
		slash = strrchr(dir, '/');
		if (strlen(dir) <= mnt_len || !slash || (size_t)(slash - dir) < mnt_len)
			return true;
		*slash = '\0';
	}
}

int egr_reg_create_cgroup(const char *path, char *real, size_t len, bool *fresh,
			  struct egr_fail *f)
{
	char given[PATH_MAX], parent[PATH_MAX], mnt[PATH_MAX];
	const char *name, *slash;
	size_t mlen;
	int err;

	*fresh = false;
	slash = path ? strrchr(path, '/') : NULL;
	if (!path || path[0] != '/' || !slash || slash == path) {
		reg_fail(f, EGR_REG_BAD_CGROUP, "cgroup",
			 "create needs an absolute path below an existing cgroup");
		return -EINVAL;
	}
	name = slash + 1;
	if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
	    (size_t)(slash - path) >= sizeof(given)) {
		reg_fail(f, EGR_REG_BAD_CGROUP, "cgroup", "create: %s names no new directory", path);
		return -EINVAL;
	}
	memcpy(given, path, (size_t)(slash - path));
	given[slash - path] = '\0';
	err = egr_cgroup2_mount(mnt, sizeof(mnt));
	if (!err && !realpath(given, parent))
		err = -errno;
	if (!err)
		err = egr_cgroup_check(parent);
	mlen = err ? 0 : strlen(mnt);
	if (!err && (strncmp(parent, mnt, mlen) != 0 || (parent[mlen] && parent[mlen] != '/')))
		err = -EINVAL;
	if (err) {
		reg_fail(f, EGR_REG_BAD_CGROUP, "cgroup", "create: the parent of %s: %s", path,
			 err == -EINVAL ? "not a cgroup v2 directory" : strerror(-err));
		return err;
	}
	if ((size_t)snprintf(real, len, "%s/%s", parent, name) >= len) {
		reg_fail(f, EGR_REG_BAD_CGROUP, "cgroup", "create: %s: path too long", path);
		return -ENAMETOOLONG;
	}
	if (mkdir(real, 0755) < 0) {
		err = -errno;
		/* Not made by us: whatever ran in it, nothing here is fresh. */
		if (err == -EEXIST)
			reg_fail(f, EGR_REG_EXISTS, "create",
				 "%s exists; create makes a new cgroup (attach without create "
				 "to confine an existing one)", real);
		else
			reg_fail(f, EGR_REG_BAD_CGROUP, "cgroup", "create %s: %s", real,
				 strerror(-err));
		return err;
	}
	*fresh = only_root_moves_into(parent, mlen);
	if (!*fresh)
		log_info("created %s; a non-root writer of an ancestor's cgroup.procs could have "
			 "put a process in before the links: its sockets are walked", real);
	return 0;
}
