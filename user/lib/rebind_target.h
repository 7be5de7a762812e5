/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Rebinding targets (user/lib/rebind_target.c; docs/dns.md "Rebinding"):
 * the address classes a DNS answer must not point into unless a policy's
 * dns_rebind_allow covers them, as pure functions of the address.
 */
#ifndef EGR_REBIND_TARGET_H
#define EGR_REBIND_TARGET_H

#include <stdbool.h>
#include <stdint.h>

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

#endif /* EGR_REBIND_TARGET_H */
