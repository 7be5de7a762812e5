/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Internal to the policy parser (policy.c, policy_network.c, policy_text.c):
 * the error helpers and text readers its files share, all in policy_text.c
 * but egr_pol_network() (policy_network.c, called by policy.c only). Not an
 * API. It includes no policy.h: the lower files must not depend on policy.c. */
#ifndef EGR_POLICY_INT_H
#define EGR_POLICY_INT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "policy_text.h"
#include "policy_types.h"

/* Longest outbound_allow string: "tcp/" + a 253-byte name + ":65535-65535". */
#define ALLOW_TEXT_MAX 300
/* How much of an offending text an error message quotes. */
#define QUOTE_MAX 64
/* What egr_pol_quote_n() needs. */
#define QUOTE_BUF (QUOTE_MAX * 4 + 8)

void egr_pol_field(struct egr_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void egr_pol_msg(struct egr_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* len bytes of s quoted and escaped for a message, into dst[QUOTE_BUF]. */
const char *egr_pol_quote_n(char *dst, const char *s, size_t len);
const char *egr_pol_quote(char *dst, const char *s);
/* An object key as it may appear in a field path: printable, bounded. */
const char *egr_pol_key(char *dst, size_t size, const char *key);
/* PORT: "N", "A-B" with A <= B, or "*". 0 or -EINVAL (err says why). */
int egr_pol_ports(const char *s, size_t len, uint16_t *lo, uint16_t *hi, struct egr_error *err);
/* Why name is not a DNS name (NULL: it is one). */
const char *egr_pol_dns_name_problem(const char *name, size_t len, int allow_wildcard);
/* HOST of an allow entry, without port: kind, addr, prefixlen, name. */
int egr_pol_host(const char *h, size_t len, struct egr_allow *out, struct egr_error *err);
/* network.unknown_names, ask_timeout_s, ask_ports (policy_ask.c): defaults
 * filled in when absent. */
int egr_pol_ask(const json_t *net, struct egr_policy *p, struct egr_error *err);
/* Refuse any key of obj not in known (NULL-terminated); prefix starts the field. */
int egr_pol_check_keys(const json_t *obj, const char *const *known, const char *prefix,
		       struct egr_error *err);

/* The outbound_allow entries while they are parsed. */
struct egr_pol_allow_vec {
	struct egr_allow *v;
	size_t n, cap;
};

/* policy.network into p and av (its outbound_allow entries). */
int egr_pol_network(const json_t *net, struct egr_policy *p, struct egr_pol_allow_vec *av,
		    struct egr_error *err);

#endif /* EGR_POLICY_INT_H */
