/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The text forms inside a policy (policy_text.c), public part: one
 * outbound_allow string and DNS names. policy.h includes this; the parser's
 * shared helpers are in policy_int.h.
 */
#ifndef EGR_POLICY_TEXT_H
#define EGR_POLICY_TEXT_H

#include <stddef.h>

#include "policy_types.h"

/* Parse one outbound_allow string ("tcp/10.0.0.0/8:80-90", "[::1]:*",
 * "api.example.com:443"); exposed for tests. 0 or -EINVAL with err->message.
 * A name entry's out->name is allocated: the caller frees it. */
int egr_allow_parse(const char *text, struct egr_allow *out, struct egr_error *err);

/* Is `name` a valid DNS name (or "*." wildcard when allow_wildcard)?
 * Writes the normalised form (lower case, no trailing dot) to norm. */
int egr_dns_name_normalize(const char *name, int allow_wildcard, char *norm, size_t normlen);

#endif /* EGR_POLICY_TEXT_H */
