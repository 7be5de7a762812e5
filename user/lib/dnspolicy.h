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
/* The rcode a name this policy refuses gets: network.dns_reject,
 * EGR_DNS_R_NXDOMAIN (the default, and for pol NULL) or EGR_DNS_R_REFUSED. */
uint16_t egr_dnspolicy_reject_rcode(const struct egr_dnspolicy *pol);
/* Number of exact names / wildcards compiled (for logs and tests). */
size_t egr_dnspolicy_nexact(const struct egr_dnspolicy *pol);
size_t egr_dnspolicy_nwild(const struct egr_dnspolicy *pol);

/* The range that makes an answer address a rebinding target. */
enum egr_rebind_class {
	EGR_REBIND_NONE = 0,     /* a global address: learned as usual */
	EGR_REBIND_LOOPBACK,     /* 127.0.0.0/8, ::1 */
	EGR_REBIND_UNSPECIFIED,  /* 0.0.0.0/8, :: */
	EGR_REBIND_LINK_LOCAL,   /* 169.254.0.0/16, fe80::/10 */
	EGR_REBIND_MULTICAST,    /* 224.0.0.0/4, ff00::/8 */
	EGR_REBIND_BROADCAST,    /* 255.255.255.255 */
	EGR_REBIND_PRIVATE,      /* 10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7,
				  * fec0::/10 (site-local), 64:ff9b:1::/48 (local NAT64) */
	EGR_REBIND_RESERVED,     /* IANA special-purpose, not globally reachable:
				  * 192.0.0.0/24 (but .9, .10), 192.0.2.0/24,
				  * 198.18.0.0/15, 198.51.100.0/24, 203.0.113.0/24,
				  * 240.0.0.0/4; 100::/64, 2001::/23 (but its global
				  * entries), 2001:db8::/32, 3fff::/20, 5f00::/16 */
	EGR_REBIND_LOCAL,        /* an address of the host (or of the sandbox's
				  * network namespace): egr_localaddr, never from
				  * egr_rebind_classify() */
};

/* How an IPv6 address carries the IPv4 address it was judged by. */
enum egr_rebind_form {
	EGR_REBIND_NATIVE = 0,   /* judged as it is */
	EGR_REBIND_V4MAPPED,     /* ::ffff:a.b.c.d */
	EGR_REBIND_V4COMPAT,     /* ::a.b.c.d (deprecated; sit tunnels it to a.b.c.d) */
	EGR_REBIND_V4TRANSLATED, /* ::ffff:0:a.b.c.d (SIIT, RFC 2765) */
	EGR_REBIND_NAT64,        /* 64:ff9b::a.b.c.d (RFC 6052 well-known prefix) */
	EGR_REBIND_6TO4,         /* 2002:AABB:CCDD::/48 (RFC 3056) */
	EGR_REBIND_TEREDO,       /* 2001:0::/32, client address inverted in the last 32 bits */
};

struct egr_rebind_verdict {
	enum egr_rebind_class cls;
	enum egr_rebind_form form;
	uint8_t v4[4];           /* the embedded IPv4 address judged (form != NATIVE,
				  * or an AF_INET address) */
};

/* Classify an answer address (AF_INET: addr[0..3]; AF_INET6: addr[0..15]).
 * Returns v->cls (EGR_REBIND_NONE for a global address or a bad family). */
enum egr_rebind_class egr_rebind_classify(int family, const uint8_t *addr,
					  struct egr_rebind_verdict *v);
/* "loopback", "unspecified", "link-local", "multicast", "broadcast", "private",
 * "reserved", "host-local", "" for NONE. */
const char *egr_rebind_class_name(enum egr_rebind_class c);
/* True when a rebinding target (class cls, from egr_rebind_classify() or
 * EGR_REBIND_LOCAL) reaches the host itself or cloud instance metadata:
 * loopback, unspecified, link-local, an address of the host, fd00:ec2::254,
 * 100.100.100.200 (also embedded in an IPv6 form). Private and reserved
 * ranges (a private mirror's) are not. user/lib/rebind_target.c. */
bool egr_rebind_targets_host(int family, const uint8_t *addr, enum egr_rebind_class cls);
/* "native", "ipv4-mapped", "ipv4-compatible", "ipv4-translated", "nat64",
 * "6to4", "teredo". */
const char *egr_rebind_form_name(enum egr_rebind_form f);

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
