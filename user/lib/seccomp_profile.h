/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * OCI seccomp profiles of egressd's process-side rules. The deny-by-default
 * profile itself is egr_confine_oci_profile() (confine.h), built here.
 */
#ifndef EGR_SECCOMP_PROFILE_H
#define EGR_SECCOMP_PROFILE_H

#include <stddef.h>
#include <jansson.h>

#include "confine.h"

/*
 * base (a runtime's default profile: OCI "linux.seccomp" or containers-common's
 * seccomp.json) with egressd's rules merged in: socket, socketpair, socketcall
 * and confine.c's refused calls are taken out of every base rule and replaced
 * by egressd's; the architectures become this host's ABIs. Everything else
 * stays the base's, its defaultAction included. *out is a new reference.
 * 0, -ENOMEM or -EINVAL with why naming the bad field.
 */
int egr_seccomp_profile_merge(const struct egr_confine *c, const json_t *base, json_t **out,
			      char *why, size_t whylen);

#endif /* EGR_SECCOMP_PROFILE_H */
