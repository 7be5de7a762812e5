/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The port lists of approvals (user/lib/policy_ask.c; docs/policy.md
 * "Approvals"). */
#ifndef EGR_POLICY_ASK_H
#define EGR_POLICY_ASK_H

#include <stddef.h>
#include <jansson.h>

#include "policy_types.h"

/* An array of "tcp/443"-style entries (network.ask_ports, an approval's
 * ports) into out[EGR_MAX_PORT_RANGES], *n of them. 0 or -EINVAL with err
 * naming field[i]. */
int egr_policy_ask_ports(const json_t *ports, const char *field, struct egr_port_range *out,
			 size_t *n, struct egr_error *err);

#endif /* EGR_POLICY_ASK_H */
