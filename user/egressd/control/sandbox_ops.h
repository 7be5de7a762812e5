/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The control protocol's view of the registry (docs/control-protocol.md):
 * the JSON of a sandbox and of a held cgroup in list/attach/update/detach
 * replies, and the one mapping of the registry's failure codes to the
 * protocol's error strings.
 */
#ifndef EGR_CONTROL_SANDBOX_OPS_H
#define EGR_CONTROL_SANDBOX_OPS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "sandbox.h"

json_t *egr_sb_json(const struct egr_sb *sb);
json_t *egr_held_json(const struct egr_held *h);
/* One page of a list: the sandboxes with an id above after, at most limit
 * of them (0: all); paged is true for a page after the first (after > 0). */
struct egr_list_page {
	uint32_t after;
	size_t limit;
	bool paged;
};
/* The list reply, {"ok": true, "sandboxes": [...], "held": [...]}, in id
 * order, the DNS proxy's figures in each sandbox's "dns"; "next" (the last
 * id shown) when the limit left some out, "held" only on the first page.
 * NULL when out of memory. */
json_t *egr_sandbox_list_reply(struct egr_registry *r, const struct egr_list_page *pg);
/* The protocol's "code" for a failure of the registry. */
const char *egr_reg_code_name(enum egr_reg_code code);

#endif /* EGR_CONTROL_SANDBOX_OPS_H */
