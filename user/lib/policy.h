/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Sandbox policy: the JSON document of docs/policy.md, parsed and validated
 * with jansson into a plain C structure. Parsing is all or nothing: on error
 * nothing is returned but an egr_error naming the field and the entry.
 */
#ifndef EGR_POLICY_H
#define EGR_POLICY_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

/* The limits and structures (policy_types.h) and the text forms
 * (policy_text.h) sit below the parser: its lower files never include this
 * header (tools/module-cycles). */
#include "policy_types.h"
#include "policy_text.h"

/* Parse and validate; 0 or -EINVAL (bad policy, *err filled) / -ENOMEM.
 * On error *out is left zeroed and needs no egr_policy_free(). */
int egr_policy_from_json(const json_t *root, struct egr_policy *out, struct egr_error *err);
/* The same checks without the policy's SHA-256 (out->sha256 stays empty): for
 * egressctl, which never uses it, so that checking a policy needs no
 * libcrypto (egressd hashes what it is sent). */
int egr_policy_check_json(const json_t *root, struct egr_policy *out, struct egr_error *err);
int egr_policy_parse(const char *text, size_t len, struct egr_policy *out,
		     struct egr_error *err);
int egr_policy_check_text(const char *text, size_t len, struct egr_policy *out,
			  struct egr_error *err);
void egr_policy_free(struct egr_policy *p);


#endif /* EGR_POLICY_H */
