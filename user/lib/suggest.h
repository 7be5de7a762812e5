/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Policy suggestion (`egressctl suggest`, docs/policy.md "Suggested
 * policies"): from one "execution" audit record (docs/audit.md), the
 * narrowest policy that allows what the execution did. Pure: no I/O.
 *
 * - a destination reached at an address a name it resolved answered with
 *   becomes "PROTO/NAME:PORT" (one entry per name, port and protocol);
 * - a destination reached without a name becomes "PROTO/ADDR:PORT";
 * - names it resolved but never reached go to dns_allow; when at least
 *   EGR_SUGGEST_WILDCARD_MIN distinct ones share a parent domain they become
 *   one "*.PARENT" (outbound_allow has no wildcards: reached names are
 *   always listed one by one);
 * - in audit mode, what was let through counts as reached; in enforce mode
 *   what was denied is not added but reported in *notes;
 * - the tenant, execution_id, principal, tool and version of the record.
 * Traffic to the sandbox's own DNS proxy (the record's dns_proxy ports on
 * loopback) is not a destination.
 */
#ifndef EGR_SUGGEST_H
#define EGR_SUGGEST_H

#include <jansson.h>

#include "policy.h"

#define EGR_SUGGEST_WILDCARD_MIN 5

/*
 * 0 and *policy (a policy object egr_policy_from_json() accepts) and
 * *notes (an array of strings: what was denied and left out, what was
 * incomplete); -EINVAL with err filled when the record is not an execution
 * record with a tenant; -ENOMEM.
 */
int egr_suggest_policy(const json_t *record, json_t **policy, json_t **notes,
		       struct egr_error *err);

#endif /* EGR_SUGGEST_H */
