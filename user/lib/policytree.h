/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The namespaced policy tree (docs/policy.md "Policies by namespace"):
 * <dir>/<namespace>/<name>.json, e.g. one Kubernetes ConfigMap volume per
 * namespace (the kubelet's ..data symlink layout). Opening a file resolves
 * every component beneath the namespace's directory (openat2
 * RESOLVE_BENEATH): a symlink or ".." out of it, a magic link, or a file
 * of another namespace is refused, whatever the tree's links say.
 */
#ifndef EGR_POLICYTREE_H
#define EGR_POLICYTREE_H

#include <stddef.h>
#include <jansson.h>

#define EGR_PTREE_DEFAULT "default" /* <ns>/default.json: unannotated containers */
#define EGR_PTREE_MAX_FILE (1u << 20)

/*
 * Open <dir>/<ns>/<name>.json for reading. ns and name are checked first
 * (egr_k8s_namespace_ok, egr_policy_name_check). The directory and the
 * namespace's directory must be root's and not writable by group or others;
 * the file a regular file of root's not writable by group or others. An fd,
 * or -ENOENT (no such policy), -EPERM / -EINVAL / -EXDEV with *rule naming
 * the rule broken, or another -errno.
 */
int egr_ptree_open(const char *dir, const char *ns, const char *name, const char **rule);
/* The same, read and parsed: the JSON object in *doc. -EBADMSG with why
 * holding the parser's words when the file is not a JSON object. */
int egr_ptree_load(const char *dir, const char *ns, const char *name, json_t **doc,
		   const char **rule, char *why, size_t whylen);
/* Read a whole file from fd (at most EGR_PTREE_MAX_FILE bytes) as a JSON
 * object; closes fd. 0, -EFBIG, -EBADMSG (why), -errno. */
int egr_ptree_read_fd(int fd, json_t **doc, char *why, size_t whylen);

#endif /* EGR_POLICYTREE_H */
