/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What a parsed policy is: its limits (docs/policy.md) and structures.
 * Definitions only, so every file of the parser (policy.c, policy_network.c,
 * policy_text.c) can include it without depending on policy.c; users of the
 * parser include policy.h, which includes this.
 */
#ifndef EGR_POLICY_TYPES_H
#define EGR_POLICY_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "egressd.h" /* struct egr_port_range, EGR_MAX_PORT_RANGES */

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
#define EGR_POLICY_ASK_TIMEOUT_DEFAULT 20       /* network.ask_timeout_s */
#define EGR_POLICY_ASK_TIMEOUT_MAX 300

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

struct json_t;

struct egr_policy {
	char *tenant;          /* required */
	char *execution_id;    /* optional, NULL when absent */
	char *principal;
	char *tool;
	char *version;
	struct json_t *container; /* "container": the OCI hook's identity (ocimeta.h); NULL */
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
	int dns_reject_refused; /* network.dns_reject: a refused name gets "nxdomain" (0,
	                         * default) or "refused" (1); docs/dns.md "Denials" */
	int ask_unknown;       /* network.unknown_names: "deny" (0, default) or "ask" (1) */
	uint32_t ask_timeout_s; /* network.ask_timeout_s: how long a held query waits */
	struct egr_port_range ask_ports[EGR_MAX_PORT_RANGES]; /* network.ask_ports: where an */
	size_t nask_ports;     /* approved name may be dialled (default tcp/443, tcp/80) */
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

#endif /* EGR_POLICY_TYPES_H */
