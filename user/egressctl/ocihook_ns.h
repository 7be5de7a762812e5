/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The OCI hook for containers of a Kubernetes namespace (ocihook_ns.c). */
#ifndef EGR_CTL_OCIHOOK_NS_H
#define EGR_CTL_OCIHOOK_NS_H

#include "ctl.h"
#include "ocihook_util.h"
#include "ocimeta.h"

/* createRuntime of a container of a Kubernetes namespace (m->namespace):
 * egressd picks the policy in its policy tree. */
int oci_hook_attach_ns(struct ctl *c, const struct hook_opts *o, const char *id, long pid,
		       const char *bundle, const struct egr_oci_meta *m);

#endif /* EGR_CTL_OCIHOOK_NS_H */
