/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * egressd's policy tree (docs/policy.md "Policies by namespace"):
 * --policy-dir DIR holds <namespace>/<name>.json (one Kubernetes ConfigMap
 * volume per namespace, or any directories an admin writes). The OCI hook
 * asks for a container's policy by namespace and name (attach
 * "policy_ref"); this module resolves it (user/lib/policytree.c), and
 * watches the tree with inotify: a changed policy is applied to every
 * running sandbox attached from it (the atomic, audited update), an invalid
 * or removed one keeps the sandboxes on their last good policy and raises
 * an alert naming the file.
 */
#ifndef EGR_PTREE_H
#define EGR_PTREE_H

#include <stdbool.h>
#include <jansson.h>

#include "proto.h"

struct egr_ptree;
struct egr_registry;
struct egr_loop;
struct egr_alerting;

#define EGR_PTREE_DIR_DEFAULT "/etc/egressd/policies"

/* dir: the tree (NULL: the default); require: comma-separated namespaces
 * whose containers must have a policy (NULL or ""). Watching starts at
 * egr_ptree_watch. 0 or -errno (-EINVAL: a bad namespace in require). */
int egr_ptree_new(struct egr_ptree **out, const char *dir, const char *require);
void egr_ptree_free(struct egr_ptree *t);
/* inotify on the tree; the first pass applies what changed while egressd was
 * away. al may be NULL. A tree that does not exist (yet) is looked for again
 * every 2 s. 0 or -errno. */
int egr_ptree_watch(struct egr_ptree *t, struct egr_registry *reg, struct egr_loop *loop,
		    struct egr_alerting *al);

/* An attach error for the reply. */
struct egr_ptree_err {
	enum egr_err code;
	char field[64];
	char message[512];
};
/*
 * The policy document of an attach request with "policy_ref": the file
 * <dir>/<namespace>/<name>.json (name absent: default), with the request's
 * "container" and "execution_id" in it (container.namespace and
 * container.policy are the ref's). 0 with *doc, 0 with *doc NULL (no default
 * policy and the namespace is not in the require list: the container is not
 * confined), or -1 with e filled.
 */
int egr_ptree_attach_doc(struct egr_ptree *t, const json_t *req, json_t **doc,
			 struct egr_ptree_err *e);
/* Status: {"dir","require","watching","namespaces","applied","invalid","removed","failed"}. */
json_t *egr_ptree_status(const struct egr_ptree *t);

#endif /* EGR_PTREE_H */
