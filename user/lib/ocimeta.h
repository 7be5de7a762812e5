/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What a container runtime recorded about a container in its OCI
 * annotations (config.json), read as a hostile pod author may have
 * shaped it (docs/containers.md "Namespaces"): the Kubernetes namespace,
 * pod and image, the container's policy selection (io.egressd.policy) and
 * execution id, and the rules a policy name and a namespace name obey.
 * Pure functions: the OCI hook (egressctl) and egressd both use them.
 */
#ifndef EGR_OCIMETA_H
#define EGR_OCIMETA_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#define EGR_ANN_POLICY "io.egressd.policy"
#define EGR_ANN_EXECUTION_ID "io.egressd.execution-id"
/* containerd's CRI plugin (pkg/cri/annotations): written after the pod's
 * passed-through annotations, so they win. */
#define EGR_ANN_CD_NAMESPACE "io.kubernetes.cri.sandbox-namespace"
#define EGR_ANN_CD_POD "io.kubernetes.cri.sandbox-name"
#define EGR_ANN_CD_POD_UID "io.kubernetes.cri.sandbox-uid"
#define EGR_ANN_CD_NAME "io.kubernetes.cri.container-name"
#define EGR_ANN_CD_IMAGE "io.kubernetes.cri.image-name"
#define EGR_ANN_CD_TYPE "io.kubernetes.cri.container-type"
/* CRI-O: the kubelet's container labels, added last (after the pod's
 * annotations) by SpecAddAnnotations, and CRI-O's own keys. */
#define EGR_ANN_CRIO_NAMESPACE "io.kubernetes.pod.namespace"
#define EGR_ANN_CRIO_POD "io.kubernetes.pod.name"
#define EGR_ANN_CRIO_POD_UID "io.kubernetes.pod.uid"
#define EGR_ANN_CRIO_NAME "io.kubernetes.container.name"
#define EGR_ANN_CRIO_IMAGE "io.kubernetes.cri-o.ImageName"
#define EGR_ANN_CRIO_TYPE "io.kubernetes.cri-o.ContainerType"

#define EGR_NAME_MAX 63       /* a Kubernetes namespace, a policy name */
#define EGR_META_STR_MAX 255  /* pod, image, ids: longer is refused */

struct egr_oci_meta {
	/* Borrowed from the annotations object (valid while it is). NULL:
	 * absent. namespace non-NULL: a Kubernetes container. */
	const char *namespace, *pod, *pod_uid, *name, *image;
	const char *policy;       /* io.egressd.policy as given */
	const char *execution_id; /* io.egressd.execution-id */
	const char *runtime;      /* "containerd", "cri-o", or NULL (no Kubernetes keys) */
	bool pod_sandbox;         /* the pod's infra (pause) container */
};

/*
 * Read the annotations (an object, or NULL). 0, or -EINVAL with *rule
 * naming the rule a value broke: a value that is not a string, over
 * EGR_META_STR_MAX or with control characters; the two runtimes' namespace
 * keys both present and different (a pod author can set the other
 * runtime's key as a pod annotation; each runtime's own key wins over the
 * pod's, so a disagreement is a forgery); a namespace that is not a DNS-1123
 * label.
 */
int egr_oci_meta_parse(const json_t *ann, struct egr_oci_meta *m, const char **rule);

/* A Kubernetes namespace name: a DNS-1123 label (a-z, 0-9, '-', not at
 * either end, 1..63). */
bool egr_k8s_namespace_ok(const char *ns);
/*
 * A policy name as io.egressd.policy may give it in a namespace: 1..63 of
 * [A-Za-z0-9._-], not starting with '.' (no "..", no "..data", no hidden
 * file), no '/'. 0, or -EINVAL with *rule naming the rule.
 */
int egr_policy_name_check(const char *name, const char **rule);

/*
 * The policy's "container" object: keys id, name, pod, namespace, pod_uid,
 * image, runtime, policy; each a string of at most EGR_META_STR_MAX bytes
 * of printable ASCII (no control characters, no UTF-8). 0, or -EINVAL with *key the key at fault
 * (NULL: not an object) and *rule why.
 */
int egr_container_check(const json_t *c, const char **key, const char **rule);
/* That object for a container id and its meta (NULL fields left out);
 * policy: the name selected in its namespace, or NULL. */
json_t *egr_container_json(const char *id, const struct egr_oci_meta *m, const char *policy);

#endif /* EGR_OCIMETA_H */
