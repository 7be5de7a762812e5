// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * createRuntime of a container of a Kubernetes namespace (docs/containers.md
 * "Policies by namespace"). The namespace is the one its runtime recorded
 * (ocimeta.c), never the pod's choice; io.egressd.policy names a policy of
 * that namespace only, a plain name, and egressd resolves it in its policy
 * tree (<policy-dir>/<namespace>/<name>.json, default.json without the
 * annotation), which it also watches for changes (user/egressd/ptwatch.c).
 * The hook reads no policy file here: the tree is egressd's (a ConfigMap
 * volume of its pod), so the policy it watches is the one it attached.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "ocihook_gvisor.h"
#include "ocihook_ns.h"
#include "ocihook_util.h"
#include "proto.h"

int oci_hook_attach_ns(struct ctl *c, const struct hook_opts *o, const char *id, long pid,
		       const char *bundle, const struct egr_oci_meta *m)
{
	char cg[PATH_MAX], ns[PATH_MAX], why[PATH_MAX + 128] = "";
	json_t *req, *ref, *ctr, *resp = NULL;
	const char *rule = "";
	uint64_t deadline;
	int rc;

	if (m->policy && egr_policy_name_check(m->policy, &rule)) {
		/* The annotation's own text: saying it back leaks nothing. */
		oci_hook_err("createRuntime", id, "policy '%.80s' (annotation " EGR_ANN_POLICY
			     ") refused in namespace %s: %s; not starting it", m->policy,
			     m->namespace, rule);
		return CTL_EXIT_USAGE;
	}
	/* A cgroup sandbox would not see gVisor's own network stack, and a
	 * device sandbox takes no policy of the tree (yet): refused. */
	rc = oci_is_gvisor(pid);
	if (rc) {
		oci_hook_err("createRuntime", id, rc > 0 ? "a gVisor container of a Kubernetes "
			     "namespace: its device sandbox cannot take namespace %s's policy "
			     "tree (only a policy file, outside Kubernetes); not starting it" :
			     "cannot tell whether its process is runsc's sandbox (namespace %s); "
			     "not starting it", m->namespace);
		return CTL_EXIT_USAGE;
	}
	if (oci_container_cgroup(pid, bundle, cg, sizeof(cg), why, sizeof(why))) {
		oci_hook_err("createRuntime", id, "cannot find its cgroup: %s", why);
		return CTL_EXIT_ERROR;
	}
	if (oci_container_netns(pid, bundle, ns, sizeof(ns))) {
		oci_hook_err("createRuntime", id, "it has a network namespace of its own that the "
			     "bundle's linux.namespaces names no path for; egressd cannot open its "
			     "DNS listeners there; not starting it");
		return CTL_EXIT_ERROR;
	}
	ref = json_pack("{s:s}", "namespace", m->namespace);
	if (ref && m->policy && json_object_set_new(ref, "name", json_string(m->policy))) {
		json_decref(ref);
		ref = NULL;
	}
	ctr = egr_container_json(id, m, NULL);
	req = json_pack("{s:s, s:s, s:o, s:o, s:s}", "op", egr_op_desc(EGR_OP_ATTACH)->name,
			"cgroup", cg, "policy_ref", ref, "container", ctr, "execution_id",
			m->execution_id ?: id);
	deadline = oci_mono_ms() + (uint64_t)o->wait_s * 1000;
	rc = oci_send_attach(c, o, id, req, ns, deadline, &resp);
	if (rc) {
		oci_hook_err("createRuntime", id, "egressd did not confine %s with policy %s of "
			     "namespace %s (see above); not starting it", cg,
			     m->policy ?: "default", m->namespace);
		return rc;
	}
	/* No default policy in a namespace that does not require one. */
	if (json_is_null(json_object_get(resp, "sandbox"))) {
		json_decref(resp);
		if (o->require_annotation) {
			oci_hook_err("createRuntime", id, "namespace %s has no default policy and "
				     "--require-annotation is set; not starting it", m->namespace);
			return CTL_EXIT_USAGE;
		}
		return CTL_EXIT_OK;
	}
	json_decref(resp);
	return CTL_EXIT_OK;
}
