/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Rule compilation: a policy's outbound_allow entries become the LPM trie
 * entries of one policy id. Entries with the same prefix are grouped; the
 * port ranges of every shorter prefix that covers a prefix are merged into
 * it, because an LPM lookup returns the longest match only (10.0.0.0/8:80
 * plus 10.1.0.0/16:443 must still allow 10.1.2.3:80). Ranges are merged
 * per protocol and must fit EGR_MAX_PORT_RANGES per prefix.
 * DNS-name entries compile to nothing: the DNS proxy learns their addresses.
 */
#ifndef EGR_COMPILE_H
#define EGR_COMPILE_H

#include <stddef.h>
#include <stdint.h>
#include "egressd.h"
#include "policy.h"

struct egr_c4 {
	uint8_t addr[4];       /* masked to prefixlen */
	uint8_t prefixlen;
	struct egr_rule rule;
};

struct egr_c6 {
	uint8_t addr[16];
	uint8_t prefixlen;
	struct egr_rule rule;
};

struct egr_compiled {
	struct egr_c4 *v4;
	size_t n4;
	struct egr_c6 *v6;
	size_t n6;
};

/* 0, -EINVAL (a prefix needs more than EGR_MAX_PORT_RANGES ranges; err
 * names the entry) or -ENOMEM. Output is sorted by (prefixlen, addr) and is
 * a pure function of the policy: the same policy gives the same entries. */
int egr_policy_compile(const struct egr_policy *p, struct egr_compiled *out,
		       struct egr_error *err);
void egr_compiled_free(struct egr_compiled *c);

/* The rule the kernel would find for addr (network order; 4 bytes, or 16
 * when v6): longest-prefix match over the compiled output. NULL if none. */
const struct egr_rule *egr_compiled_lookup(const struct egr_compiled *c, int v6,
					   const uint8_t *addr);

/* Fill LPM keys for policy_id. */
void egr_c4_key(const struct egr_c4 *e, uint32_t policy_id, struct egr_lpm4_key *k);
void egr_c6_key(const struct egr_c6 *e, uint32_t policy_id, struct egr_lpm6_key *k);

#endif /* EGR_COMPILE_H */
