/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * DNS policy of one sandbox, compiled from struct egr_policy for the DNS
 * proxy, and the per-sandbox DNS-exfiltration tracker. Pure logic: no I/O,
 * no clocks (callers pass the time), so everything here is unit-testable.
 *
 * Resolvable names are the union of
 *   - network.dns_allow: exact names and "*.domain" wildcards, and
 *   - the host names of network.outbound_allow name entries (exact).
 * Matching is case-insensitive and ignores one trailing dot. "*.example.org"
 * matches every name at any depth below example.org ("a.example.org",
 * "a.b.example.org") but not "example.org" itself.
 *
 * Ports of learned addresses: a resolvable name's addresses get the union of
 * the ports/protocols of every outbound_allow entry with exactly that host
 * name ("api.example.com:443" gives api.example.com's addresses port 443 for
 * TCP and UDP). A name that is resolvable only through dns_allow (including
 * every wildcard match) gets NO ports: the sandbox may resolve it, but the
 * answer opens no egress (the proxy does not call learn() for it); reaching
 * its addresses needs an address/CIDR entry in outbound_allow.
 *
 * Rebinding (docs/dns.md): an answer address in loopback, unspecified,
 * link-local, multicast, broadcast or private space, directly or in an IPv6
 * form that embeds such an IPv4 address, is neither learned nor released,
 * unless a network.dns_rebind_allow CIDR covers it. egr_rebind_classify()
 * says which range an address is in; egr_dnspolicy_rebind_blocked() applies
 * the policy's exceptions.
 *
 * Query types: by default A, AAAA, CNAME, HTTPS and SVCB; anything else
 * (TXT, NULL, ANY, MX, ...) is refused unless the compiled policy was given
 * an explicit qtype list.
 */
#ifndef EGR_DNSPOLICY_H
#define EGR_DNSPOLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egressd.h"
#include "policy.h"
#include "rebind_target.h"

#define EGR_DNSPOL_NAME_BUF   254 /* EGR_DNS_NAME_MAX + 1 */
#define EGR_DNSPOL_MAX_QTYPES 32

/* The ports learned addresses of a name get; nranges 0 = resolvable only. */
struct egr_dns_ports {
	uint32_t nranges;
	struct egr_port_range ranges[EGR_MAX_PORT_RANGES]; /* merged, sorted */
};

/* What egr_dnspolicy_match() found. */
struct egr_dnspolicy_match {
	struct egr_dns_ports ports;
	/* The policy entry the exfiltration tracker counts distinct names
	 * under: the apex of the broadest matching wildcard ("example.org" for
	 * "*.example.org"), else the exact name itself. */
	char domain[EGR_DNSPOL_NAME_BUF];
	bool wildcard;  /* a wildcard matched */
	bool exact;     /* an exact name (dns_allow or outbound_allow) matched */
};

struct egr_dnspolicy;

/*
 * Compile p's DNS view. qtypes/nqtypes: the allowed query types; NULL/0
 * for the default set (A, AAAA, CNAME, HTTPS, SVCB); at most
 * EGR_DNSPOL_MAX_QTYPES. Returns 0, -ENOMEM, or -EINVAL with *err filled
 * (err may be NULL) when a name's merged ports need more than
 * EGR_MAX_PORT_RANGES ranges or a qtype list is too long.
 */
int egr_dnspolicy_new(const struct egr_policy *p, const uint16_t *qtypes, size_t nqtypes,
		      struct egr_dnspolicy **out, struct egr_error *err);
void egr_dnspolicy_free(struct egr_dnspolicy *pol);

/* 1 if qname is resolvable (m filled, m may be NULL), 0 if not, -EINVAL for
 * NULL arguments or a name longer than 253 characters (no trailing dot). */
int egr_dnspolicy_match(const struct egr_dnspolicy *pol, const char *qname,
			struct egr_dnspolicy_match *m);
bool egr_dnspolicy_qtype_allowed(const struct egr_dnspolicy *pol, uint16_t qtype);
/* network.mode "audit": names and qtypes outside the policy are forwarded
 * anyway (and reported), docs/dns.md. */
bool egr_dnspolicy_audit(const struct egr_dnspolicy *pol);
/* network.unknown_names "ask" (and not audit mode): true, with how long a
 * held query waits and the ports an approved name gets by default. */
bool egr_dnspolicy_ask(const struct egr_dnspolicy *pol, uint32_t *timeout_s,
		       struct egr_dns_ports *ports);
/* The rcode a name this policy refuses gets: network.dns_reject,
 * EGR_DNS_R_NXDOMAIN (the default, and for pol NULL) or EGR_DNS_R_REFUSED. */
uint16_t egr_dnspolicy_reject_rcode(const struct egr_dnspolicy *pol);
/* Number of exact names / wildcards compiled (for logs and tests). */
size_t egr_dnspolicy_nexact(const struct egr_dnspolicy *pol);
size_t egr_dnspolicy_nwild(const struct egr_dnspolicy *pol);

/* The rebinding classes: rebind_target.h. */

/*
 * True when an answer address must be stripped: it is in one of the ranges
 * above and no dns_rebind_allow CIDR of pol covers it (an IPv6 CIDR covering
 * the address itself, or an IPv4 CIDR covering the IPv4 address it embeds).
 * A NULL pol blocks every such address. v (may be NULL) gets the class.
 */
bool egr_dnspolicy_rebind_blocked(const struct egr_dnspolicy *pol, int family,
				  const uint8_t *addr, struct egr_rebind_verdict *v);
/*
 * The same, and an address egr_rebind_classify() finds global is blocked too
 * (class EGR_REBIND_LOCAL) when is_local says the kernel delivers it (or the
 * IPv4 address its IPv6 form embeds) locally. is_local must answer true when
 * it cannot tell (fail closed). is_local NULL: ranges only.
 */
typedef bool (*egr_rebind_local_fn)(void *ctx, int family, const uint8_t *addr);
bool egr_dnspolicy_rebind_blocked_local(const struct egr_dnspolicy *pol, int family,
					const uint8_t *addr, egr_rebind_local_fn is_local,
					void *ctx, struct egr_rebind_verdict *v);
size_t egr_dnspolicy_nrebind(const struct egr_dnspolicy *pol);

/* ------------------------------------------------------------------------
 * Exfiltration tracker, one per sandbox.
 *
 * Signals (a limit of 0 disables its check):
 *   max_label_len    longest label of the query name        (default 52)
 *   max_name_len     the whole name, presentation form      (default 180)
 *   max_entropy      bits/char, for hyphen/underscore-free runs of at least
 *                    entropy_min_len (20) characters inside a label: a run
 *                    is suspicious if its Shannon entropy >= max_entropy
 *                    (4.0), or if it mixes letters and digits densely (at
 *                    least len/6 letter<->digit transitions) and its
 *                    entropy >= max_entropy - 1. The first catches
 *                    base32/base36/base64 blobs, the second hex (whose
 *                    entropy cannot exceed 4 bits/char). "api", "www",
 *                    "cdn-eu-west-1" or "kubernetes-dashboard-prod" pass.
 *   max_subdomains   distinct query names per policy domain (see
 *                    egr_dnspolicy_match.domain) in the last 60 s (50)
 *   max_nxdomain     NXDOMAIN answers in the last 60 s, whole sandbox (30);
 *                    once reached, every query is refused until the
 *                    window slides below it
 *
 * Memory is bounded: per domain a table of (64-bit name hash, last seen)
 * pairs with max_subdomains + 1 slots; at most max_domains (64) domains are
 * tracked, the least recently used one is forgotten to make room (its
 * history restarts: an approximation in the sandbox's favour, as are hash
 * collisions, 2^-64 per pair). Within those bounds the 60 s window is exact
 * (sliding, not bucketed). max_subdomains and max_nxdomain are capped at
 * 4096.
 * ------------------------------------------------------------------------ */

struct egr_exfil_limits {
	uint32_t max_label_len;
	uint32_t max_name_len;
	double max_entropy;
	uint32_t entropy_min_len;
	uint32_t max_subdomains;
	uint32_t max_nxdomain;
	uint32_t max_domains;
	uint64_t window_ns; /* 60 s */
};

enum egr_exfil_reason {
	EGR_EXFIL_OK = 0,
	EGR_EXFIL_LABEL_LEN,
	EGR_EXFIL_NAME_LEN,
	EGR_EXFIL_ENTROPY,
	EGR_EXFIL_SUBDOMAINS,
	EGR_EXFIL_NXDOMAIN,
};

struct egr_exfil;

void egr_exfil_limits_default(struct egr_exfil_limits *l);
/* "ok", "label length", "name length", "label entropy",
 * "distinct subdomains", "nxdomain rate". */
const char *egr_exfil_reason_name(enum egr_exfil_reason r);

int egr_exfil_new(const struct egr_exfil_limits *l, struct egr_exfil **out);
void egr_exfil_free(struct egr_exfil *t);

/*
 * Judge a query for qname (presentation form) that matched the policy under
 * domain (NULL: no distinct-subdomain accounting). 0 if allowed (and the
 * name is then counted for its domain), -EPERM with *reason set if it is an
 * exfiltration signal past a limit, -EINVAL for NULL arguments.
 */
int egr_exfil_check(struct egr_exfil *t, const char *qname, const char *domain,
		    uint64_t now_ns, enum egr_exfil_reason *reason);
/* Note an answer's rcode (only NXDOMAIN is counted). */
void egr_exfil_note_rcode(struct egr_exfil *t, const char *qname, uint16_t rcode,
			  uint64_t now_ns);
/* The label test alone, for tests and tuning. */
bool egr_exfil_label_suspicious(const struct egr_exfil_limits *l, const char *label,
				size_t len);

#endif /* EGR_DNSPOLICY_H */
