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

/* Limits a policy must stay within (docs/policy.md). */
#define EGR_POLICY_MAX_ALLOW    1048576 /* outbound_allow entries, counted after the object
                                         * form expands to one entry per port */
#define EGR_POLICY_MAX_DNS      4096    /* dns_allow entries */
#define EGR_POLICY_MAX_PORTS    64      /* ports in one object-form entry */
#define EGR_POLICY_MAX_STR      256     /* tenant, principal, tool, ... */
#define EGR_DNS_NAME_MAX        253     /* presentation form, no trailing dot */
#define EGR_POLICY_MAX_DNS_TYPES 16     /* network.dns_types entries */
#define EGR_POLICY_MAX_REBIND   256     /* network.dns_rebind_allow entries */
#define EGR_POLICY_MAX_WINDOW_S 31622400 /* limits.window_seconds: 366 days */
#define EGR_POLICY_DEFAULT_WINDOW_S 3600
#define EGR_POLICY_MAX_QUOTA    (1ULL << 60) /* limits.*egress_bytes */
#define EGR_POLICY_MAX_BREAKER_DENIES 100000000 /* network.breaker.max_denies */
#define EGR_POLICY_MAX_BREAKER_WINDOW_S 86400   /* network.breaker.window_s: one day */

enum egr_host_kind {
	EGR_HOST_V4 = 1,   /* addr[0..3], prefixlen 0..32 */
	EGR_HOST_V6,       /* addr[0..15], prefixlen 0..128 */
	EGR_HOST_NAME,     /* name: a DNS name, resolved by the DNS proxy */
};

struct egr_allow {
	enum egr_host_kind kind;
	uint8_t addr[16];      /* network byte order */
	uint8_t prefixlen;
	uint16_t port_lo;      /* inclusive, host order; "*" is 0-65535 */
	uint16_t port_hi;
	uint16_t protos;       /* EGR_PROTO_* from include/egressd.h */
	char *name;            /* EGR_HOST_NAME only: lower case, no trailing dot */
	uint32_t index;        /* position in network.outbound_allow, for errors */
};

/* An address range: network.dns_rebind_allow entries. */
struct egr_cidr {
	enum egr_host_kind kind; /* EGR_HOST_V4 or EGR_HOST_V6 */
	uint8_t addr[16];        /* network byte order, host bits cleared */
	uint8_t prefixlen;
};

struct egr_policy {
	char *tenant;          /* required */
	char *execution_id;    /* optional, NULL when absent */
	char *principal;
	char *tool;
	char *version;
	int inbound_allow;     /* network.inbound: "deny" (0, default) or "allow" (1) */
	uint32_t sb_flags;     /* EGR_SB_ALLOW_* from network.allow_sockets */
	uint64_t families;     /* network.allow_sockets address families ("packet",
	                        * "netlink", ...): bit n allows AF n in the seccomp
	                        * family filter (egr_confine.extra_families) */
	int trust_strict;      /* network.trust: "standard" (0, default) or "strict" (1) */
	int inspect;           /* network.inspect: TCP goes through the inspecting proxy
	                        * (docs/inspect.md); default 1 for trust "strict", else 0 */
	int escape_alert;      /* network.on_escape: "kill" (0, default) or "alert" (1) */
	int audit_mode;        /* network.mode: "enforce" (0, default) or "audit" (1) */
	uint32_t breaker_max_denies; /* network.breaker.max_denies; 0 = no breaker in the
	                              * policy (egressd's --breaker default applies) */
	uint32_t breaker_window_s;   /* network.breaker.window_s */
	uint16_t dns_types[EGR_POLICY_MAX_DNS_TYPES]; /* network.dns_types; */
	size_t ndns_types;     /* 0: the proxy's default set */
	struct egr_allow *allow;
	size_t nallow;
	char **dns_allow;      /* lower case, no trailing dot; "*.x" kept as is */
	size_t ndns;
	/* network.dns_rebind_allow: DNS answers in loopback, private, link-local,
	 * ... ranges that these CIDRs cover are learned and released anyway
	 * (docs/dns.md "Rebinding"). IPv4-mapped IPv6 CIDRs are stored as IPv4. */
	struct egr_cidr *rebind_allow;
	size_t nrebind;
	/* limits (docs/policy.md, docs/metering.md); 0 = no limit */
	uint64_t quota_bytes;        /* limits.egress_bytes per window, this sandbox */
	uint64_t tenant_quota_bytes; /* limits.tenant_egress_bytes per window, the tenant */
	uint64_t quota_window_s;     /* limits.window_seconds (default 3600 when limits given) */
	char sha256[65];       /* hex SHA-256 of the canonical (sorted, compact) JSON */
};

/* What was wrong: field is a JSON path such as "network.outbound_allow[3]",
 * message says what is wrong with it. */
struct egr_error {
	char field[160];
	char message[320];
};

/* Parse and validate; 0 or -EINVAL (bad policy, *err filled) / -ENOMEM.
 * On error *out is left zeroed and needs no egr_policy_free(). */
int egr_policy_from_json(const json_t *root, struct egr_policy *out, struct egr_error *err);
int egr_policy_parse(const char *text, size_t len, struct egr_policy *out,
		     struct egr_error *err);
void egr_policy_free(struct egr_policy *p);

/* Parse one outbound_allow string ("tcp/10.0.0.0/8:80-90", "[::1]:*",
 * "api.example.com:443"); exposed for tests. 0 or -EINVAL with err->message.
 * A name entry's out->name is allocated: the caller frees it. */
int egr_allow_parse(const char *text, struct egr_allow *out, struct egr_error *err);

/* Is `name` a valid DNS name (or "*." wildcard when allow_wildcard)?
 * Writes the normalised form (lower case, no trailing dot) to norm. */
int egr_dns_name_normalize(const char *name, int allow_wildcard, char *norm, size_t normlen);

#endif /* EGR_POLICY_H */
