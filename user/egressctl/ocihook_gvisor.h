/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* A gVisor (runsc) container confined at its veth's host side (ocihook_gvisor.c). */
#ifndef EGR_CTL_OCIHOOK_GVISOR_H
#define EGR_CTL_OCIHOOK_GVISOR_H

#include <stdint.h>
#include <jansson.h>

#include "ctl.h"
#include "ocihook_util.h"

/* 1 when pid is runsc's sandbox process (its exe the runsc binary, or its
 * argv[0] runsc-sandbox), 0 when it is not, -errno when it cannot tell. */
int oci_is_gvisor(long pid);
/* createRuntime: attach policy (consumed; its identity set) to the host
 * side of the one veth of the namespace pid is in. An exit status, said. */
int oci_gvisor_attach(struct ctl *c, const struct hook_opts *o, const char *id, long pid,
		      const char *bundle, json_t *policy, uint64_t deadline);
/* poststop: 1 when the bundle's namespace still leads to a device sandbox
 * of this container (*rc: the detach's exit status), else 0. */
int oci_gvisor_detach(struct ctl *c, const char *id, const char *bundle, int *rc);

#endif /* EGR_CTL_OCIHOOK_GVISOR_H */
