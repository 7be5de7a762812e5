// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Container metadata from OCI annotations (ocimeta.h). Everything here may
 * have been written by a pod author: a string's length and bytes are
 * checked before anything uses it, and a namespace is believed only when no
 * other runtime's key contradicts it.
 */
#include <errno.h>
#include <string.h>

#include "ocimeta.h"

static bool clean_str(const char *s, size_t max)
{
	size_t n = 0;

	/* Printable ASCII only: Kubernetes names, uids and image references
	 * are ASCII, and `list` prints these raw; UTF-8 would let through C1
	 * controls (U+009B is CSI) and bidi overrides (U+202E). */
	for (; s[n]; n++)
		if ((unsigned char)s[n] < 0x20 || (unsigned char)s[n] > 0x7e || n >= max)
			return false;
	return true;
}

/* The string at key: 0 (absent: *out NULL), or -EINVAL. */
static int ann_str(const json_t *ann, const char *key, const char **out, const char **rule)
{
	const json_t *v = ann ? json_object_get(ann, key) : NULL;

	*out = NULL;
	if (!v)
		return 0;
	if (!json_is_string(v)) {
		*rule = "an annotation's value must be a string";
		return -EINVAL;
	}
	/* An embedded NUL would make the C string a different one. */
	if (strlen(json_string_value(v)) != json_string_length(v) ||
	    !clean_str(json_string_value(v), EGR_META_STR_MAX)) {
		*rule = "an annotation's value must be at most 255 bytes of printable ASCII";
		return -EINVAL;
	}
	*out = json_string_value(v);
	return 0;
}

bool egr_k8s_namespace_ok(const char *ns)
{
	size_t n = ns ? strlen(ns) : 0;

	if (n == 0 || n > EGR_NAME_MAX || ns[0] == '-' || ns[n - 1] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((ns[i] >= 'a' && ns[i] <= 'z') || (ns[i] >= '0' && ns[i] <= '9') ||
		      ns[i] == '-'))
			return false;
	return true;
}

int egr_policy_name_check(const char *name, const char **rule)
{
	size_t n = name ? strlen(name) : 0;

	if (name && strchr(name, '/')) {
		*rule = "a policy name is not a path: it selects a policy of the container's own "
			"namespace (no '/')";
		return -EINVAL;
	}
	if (n && name[0] == '.') {
		*rule = "a policy name does not start with '.' (no '..', no hidden files)";
		return -EINVAL;
	}
	if (n == 0 || n > EGR_NAME_MAX) {
		*rule = "a policy name is 1 to 63 characters";
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') ||
		      (name[i] >= '0' && name[i] <= '9') || name[i] == '.' || name[i] == '_' ||
		      name[i] == '-')) {
			*rule = "a policy name has only letters, digits, '.', '_' and '-'";
			return -EINVAL;
		}
	return 0;
}

int egr_oci_meta_parse(const json_t *ann, struct egr_oci_meta *m, const char **rule)
{
	const char *cd_ns, *crio_ns, *cd_pod, *crio_pod, *cd_uid, *crio_uid, *cd_name, *crio_name;
	const char *cd_img, *crio_img, *cd_type, *crio_type;
	const char *dummy;
	int err = 0;

	memset(m, 0, sizeof(*m));
	if (!rule)
		rule = &dummy;
	if (ann && !json_is_object(ann)) {
		*rule = "annotations must be an object";
		return -EINVAL;
	}
	err = err ?: ann_str(ann, EGR_ANN_CD_NAMESPACE, &cd_ns, rule);
	err = err ?: ann_str(ann, EGR_ANN_CRIO_NAMESPACE, &crio_ns, rule);
	err = err ?: ann_str(ann, EGR_ANN_CD_POD, &cd_pod, rule);
	err = err ?: ann_str(ann, EGR_ANN_CRIO_POD, &crio_pod, rule);
	err = err ?: ann_str(ann, EGR_ANN_CD_POD_UID, &cd_uid, rule);
	err = err ?: ann_str(ann, EGR_ANN_CRIO_POD_UID, &crio_uid, rule);
	err = err ?: ann_str(ann, EGR_ANN_CD_NAME, &cd_name, rule);
	err = err ?: ann_str(ann, EGR_ANN_CRIO_NAME, &crio_name, rule);
	err = err ?: ann_str(ann, EGR_ANN_CD_IMAGE, &cd_img, rule);
	err = err ?: ann_str(ann, EGR_ANN_CRIO_IMAGE, &crio_img, rule);
	err = err ?: ann_str(ann, EGR_ANN_CD_TYPE, &cd_type, rule);
	err = err ?: ann_str(ann, EGR_ANN_CRIO_TYPE, &crio_type, rule);
	err = err ?: ann_str(ann, EGR_ANN_POLICY, &m->policy, rule);
	err = err ?: ann_str(ann, EGR_ANN_EXECUTION_ID, &m->execution_id, rule);
	if (err)
		return err;
	/*
	 * Each runtime writes its own namespace key after the pod's
	 * annotations, so a pod author cannot change it; but the *other*
	 * runtime's key is just a pod annotation to this one (CRI-O copies
	 * every pod annotation; containerd those its pod_annotations list
	 * names). Two keys that disagree: one is forged, and we cannot tell
	 * which without trusting a key the pod could also have set.
	 */
	if (cd_ns && crio_ns && strcmp(cd_ns, crio_ns) != 0) {
		*rule = "the annotations " EGR_ANN_CD_NAMESPACE " and " EGR_ANN_CRIO_NAMESPACE
			" name different namespaces (one is a pod's forgery)";
		return -EINVAL;
	}
	/* Both namespace keys (equal): either runtime's identity keys may be
	 * the pod's, so the same test for each field (rt-k8s finding 2). */
	if (cd_ns && crio_ns &&
	    ((cd_pod && crio_pod && strcmp(cd_pod, crio_pod)) ||
	     (cd_uid && crio_uid && strcmp(cd_uid, crio_uid)) ||
	     (cd_name && crio_name && strcmp(cd_name, crio_name)) ||
	     (cd_img && crio_img && strcmp(cd_img, crio_img)))) {
		*rule = "both runtimes' annotations are present and name a different pod, uid, "
			"container or image (one is a pod's forgery)";
		return -EINVAL;
	}
	m->namespace = cd_ns ?: crio_ns;
	if (m->namespace && !egr_k8s_namespace_ok(m->namespace)) {
		*rule = "the container's namespace is not a Kubernetes namespace name (DNS-1123 "
			"label)";
		return -EINVAL;
	}
	if (cd_ns && crio_ns) {
		/* Which runtime wrote which cannot be told: none is named. */
		m->pod = cd_pod ?: crio_pod;
		m->pod_uid = cd_uid ?: crio_uid;
		m->name = cd_name ?: crio_name;
		m->image = cd_img ?: crio_img;
	} else if (cd_ns) {
		m->runtime = "containerd";
		m->pod = cd_pod;
		m->pod_uid = cd_uid;
		m->name = cd_name;
		m->image = cd_img;
	} else if (crio_ns) {
		m->runtime = "cri-o";
		m->pod = crio_pod;
		m->pod_uid = crio_uid;
		m->name = crio_name;
		m->image = crio_img;
	}
	/* The infra container: only when no type key says otherwise (each
	 * runtime sets its own to "container" for a pod's containers, after
	 * the pod's annotations). */
	m->pod_sandbox = (cd_type || crio_type) && (!cd_type || !strcmp(cd_type, "sandbox")) &&
			 (!crio_type || !strcmp(crio_type, "sandbox"));
	return 0;
}

static const char *const container_keys[] = { "id",    "name",    "pod",    "namespace",
					       "pod_uid", "image", "runtime", "policy", NULL };

int egr_container_check(const json_t *c, const char **key, const char **rule)
{
	const char *k;
	json_t *v;

	*key = NULL;
	if (!json_is_object(c)) {
		*rule = "must be an object";
		return -EINVAL;
	}
	json_object_foreach((json_t *)c, k, v) {
		size_t i;

		*key = k;
		for (i = 0; container_keys[i] && strcmp(container_keys[i], k); i++)
			;
		if (!container_keys[i]) {
			*rule = "unknown key (id, name, pod, namespace, pod_uid, image, runtime, "
				"policy)";
			return -EINVAL;
		}
		if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v) ||
		    !clean_str(json_string_value(v), EGR_META_STR_MAX)) {
			*rule = "must be a string of at most 255 bytes of printable ASCII";
			return -EINVAL;
		}
	}
	*key = NULL;
	return 0;
}

json_t *egr_container_json(const char *id, const struct egr_oci_meta *m, const char *policy)
{
	const char *vals[] = { id, m->name, m->pod, m->namespace, m->pod_uid, m->image, m->runtime,
			       policy };
	json_t *o = json_object();

	for (size_t i = 0; o && container_keys[i]; i++)
		if (vals[i] && json_object_set_new(o, container_keys[i], json_string(vals[i]))) {
			json_decref(o);
			return NULL;
		}
	return o;
}
