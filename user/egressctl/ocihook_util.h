/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* What the OCI hook's createRuntime paths share (ocihook_util.c). */
#ifndef EGR_CTL_OCIHOOK_UTIL_H
#define EGR_CTL_OCIHOOK_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "ctl.h"

struct hook_opts {
	const char *policy_dir;   /* the annotation may name only files in it (flat) */
	bool require_annotation;  /* createRuntime refuses containers it cannot confine */
	unsigned wait_s;          /* createRuntime waits this long for egressd */
};

void oci_hook_err(const char *stage, const char *id, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
uint64_t oci_mono_ms(void);
int oci_wait_for_egressd(const struct ctl *c, uint64_t deadline);
int oci_container_cgroup(long pid, const char *bundle, char *out, size_t len, char *why,
			 size_t whylen);
int oci_container_netns(long pid, const char *bundle, char *buf, size_t len);
/* Send an attach request (consumed; NULL: out of memory, said), with
 * "netns" when netns is not empty, as createRuntime does: waits for
 * egressd up to the deadline, asks again while egressd restarts. */
int oci_send_attach(struct ctl *c, const struct hook_opts *o, const char *id, json_t *req,
		    const char *netns, uint64_t deadline, json_t **resp);

#endif /* EGR_CTL_OCIHOOK_UTIL_H */
