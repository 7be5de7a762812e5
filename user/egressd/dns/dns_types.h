/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The DNS proxy's public types and limits (the contract is dnsproxy.h,
 * which includes this): its configuration, statistics, events and
 * verdicts. Below every file of dns/, so the proxy's lower layers use them
 * without depending on dnsproxy.c.
 */
#ifndef EGR_DNS_TYPES_H
#define EGR_DNS_TYPES_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dnspolicy.h"
#include "dnswire.h"
#include "egressd.h"
#include "../loop.h" /* the unit tests build this without -Iuser/egressd */

struct egr_bpf;

#define EGR_DNSPROXY_MAX_UPSTREAMS 8
#define EGR_DNSPROXY_EVENT_ADDRS   16 /* addresses carried in one event */
#define EGR_DNSPROXY_MAX_LEARN     64 /* addresses learned from one answer */
#define EGR_DNSPROXY_RATE          500  /* default queries per second, per sandbox */
#define EGR_DNSPROXY_BURST         1000 /* default bucket size, per sandbox */
/* Datagrams one sandbox's UDP listener takes per loop wake-up: a listener
 * still ready goes behind the others in epoll's ready list, so a flooding
 * sandbox gets this many turns' worth, never the loop. */
#define EGR_DNSPROXY_UDP_TURN      8

/* egressd's --dns-min-ttl and --dns-ttl-grace defaults (docs/dns.md
 * "Learned addresses and client caches"): a JVM caches an answer 30 s
 * whatever its TTL, and reconnects to it until then. */
#define EGR_DNSPROXY_DEFAULT_MIN_TTL_S   30
#define EGR_DNSPROXY_DEFAULT_TTL_GRACE_S 30

/* One address to add to a sandbox's allowlist. */
struct egr_dns_learned {
	int family;             /* AF_INET or AF_INET6 */
	uint8_t addr[16];       /* network order; AF_INET uses the first 4 */
	uint32_t ttl_s;         /* max(answer TTL along the CNAME chain, min_ttl_s) */
	uint64_t expires_ns;    /* CLOCK_BOOTTIME (bpf_ktime_get_boot_ns) deadline:
	                         * ttl_s plus the proxy's ttl_grace_s after the answer */
	struct egr_dns_ports ports; /* of the matching outbound_allow entries */
	const char *qname;      /* the allowed name asked (valid during the callback) */
};

enum egr_dns_verdict {
	EGR_DNS_V_ALLOWED = 0,  /* answered from upstream */
	EGR_DNS_V_REFUSED,      /* name or qtype not allowed: REFUSED, not forwarded */
	EGR_DNS_V_SERVFAIL,     /* timeout, upstream error, in-flight table full */
	EGR_DNS_V_EXFIL,        /* exfiltration signal past a limit: REFUSED */
	EGR_DNS_V_CAP,          /* learn() failed (cap hit, map full): SERVFAIL */
	EGR_DNS_V_REBIND,       /* answer addresses stripped (then an ALLOWED event) */
	EGR_DNS_V_AUDIT,        /* not allowed, forwarded anyway: the policy is in
				 * audit mode (its answer gets an ALLOWED event) */
};

/* An answer address removed as a rebinding target. */
struct egr_dns_stripped {
	int family;
	uint8_t addr[16];
	enum egr_rebind_class cls;
	enum egr_rebind_form form;
};

struct egr_dns_event {
	uint32_t sandbox_id;
	const char *tenant;
	const char *qname;
	uint16_t qtype;
	int transport;          /* IPPROTO_UDP or IPPROTO_TCP */
	enum egr_dns_verdict verdict;
	const char *reason;     /* short text, never NULL */
	int error;              /* -errno behind a CAP/SERVFAIL verdict, else 0 */
	uint16_t rcode;         /* rcode the client got (upstream's for ALLOWED) */
	size_t naddrs;          /* answer addresses (all of them) */
	uint64_t latency_ns;    /* forwarded answers: query in to answer out; else 0 */
	size_t naddrs_listed;   /* how many are in addrs[] */
	struct egr_dns_addr addrs[EGR_DNSPROXY_EVENT_ADDRS];
	size_t nstripped;       /* REBIND: records removed (all of them) */
	size_t nstripped_listed; /* how many are in stripped[] */
	struct egr_dns_stripped stripped[EGR_DNSPROXY_EVENT_ADDRS];
	/* addrs[i] went into the sandbox's allowlist (bit i). An answer that
	 * opens nothing, fails, or had an address withheld has it clear. */
	uint32_t learned_mask;
};

/* 0 or -errno; -ENOSPC means a cap was hit / the map is full. */
typedef int (*egr_dnsproxy_learn_fn)(void *ctx, uint32_t sandbox_id,
				     const struct egr_dns_learned *addrs, size_t n);
typedef void (*egr_dnsproxy_event_fn)(void *ctx, const struct egr_dns_event *ev);

/* A query held for a decision (docs/dns.md "Approvals"): network.unknown_names
 * "ask" and a name the policy does not allow. */
enum egr_dns_ask_state {
	EGR_ASK_PENDING,   /* held: waiting for egr_dnsproxy_ask_decide() */
	EGR_ASK_APPROVED,
	EGR_ASK_DENIED,
	EGR_ASK_TIMEOUT,   /* ask_timeout_s passed: refused */
	EGR_ASK_FULL,      /* the sandbox had ask_max_pending held: refused at once */
	EGR_ASK_GONE,      /* its sandbox was removed while held */
};

struct egr_dns_ask {
	uint64_t id;            /* unique for egressd's life, never 0 */
	uint32_t sandbox_id;
	const char *tenant;
	const char *qname;
	uint16_t qtype;         /* of the first query held for it */
	uint64_t since_unix_ns; /* when it was first held */
	uint64_t deadline_unix_ns;
	uint32_t waiting;       /* queries (the first and the retries) held */
	struct egr_dns_ports ports; /* the policy's ask_ports */
	enum egr_dns_ask_state state;
};

/* Is qname approved for the sandbox (a grant at any scope, not expired)?
 * true with the ports it may be dialled on. */
typedef bool (*egr_dnsproxy_grant_fn)(void *ctx, uint32_t sandbox_id, const char *qname,
				      struct egr_dns_ports *ports);
/* A held query changed state (a new one is PENDING). */
typedef void (*egr_dnsproxy_ask_fn)(void *ctx, const struct egr_dns_ask *ask);

struct egr_dnsproxy_config {
	/* Upstream resolvers (port in the sockaddr). nupstreams 0: the
	 * nameservers of /etc/resolv.conf (egr_dnsproxy_resolv_conf()). */
	struct sockaddr_storage upstreams[EGR_DNSPROXY_MAX_UPSTREAMS];
	size_t nupstreams;
	uint32_t min_ttl_s;           /* learned expiry >= this (default 0) */
	uint32_t ttl_grace_s;         /* and this much past max(TTL, min_ttl_s) (default 0) */
	uint32_t timeout_ms;          /* upstream query timeout (0: 2000) */
	uint32_t max_inflight;        /* whole proxy (0: 1024, max 16384) */
	uint32_t max_inflight_per_sb; /* one sandbox (0: max_inflight / 4, at least 64) */
	uint32_t max_tcp_per_sb;      /* client TCP connections (0: 16) */
	uint32_t tcp_idle_ms;         /* client TCP idle timeout (0: 10000) */
	uint32_t tick_ms;             /* timer period (0: 100) */
	/* Per-sandbox query rate, a token bucket taken by every query before it
	 * is parsed (0: EGR_DNSPROXY_RATE / EGR_DNSPROXY_BURST). A UDP query
	 * past it is dropped unanswered, a TCP one gets SERVFAIL. */
	uint32_t rate_qps;
	uint32_t burst;
	/* Who asks (docs/dns.md "Who asks"): with verify_clients, the
	 * sandboxes of a network namespace share its listeners and a query is
	 * served as the sandbox egr_dns_senders (in bpf) records for its
	 * sender; anything else is dropped and counted `foreign` (the
	 * listener's). The sandbox's entries, count and kernel budget are
	 * purged when it goes. Off only for tests without BPF: then every
	 * sandbox has listeners of its own, which name it. */
	bool verify_clients;
	struct egr_bpf *bpf;
	/* The listener holder (hold/lhold.h; NULL: none): listeners are
	 * handed to it and a restart's adoption takes them back, with what
	 * queued on them meanwhile. Not owned. */
	struct egr_lhold *hold;
	struct egr_exfil_limits exfil; /* all zero: egr_exfil_limits_default() */
	egr_dnsproxy_learn_fn learn;  /* required */
	egr_dnsproxy_event_fn event;  /* optional */
	/* Approvals (optional; without grant every unknown name is refused
	 * as with unknown_names "deny"). */
	egr_dnsproxy_grant_fn grant;
	egr_dnsproxy_ask_fn ask;
	uint32_t ask_max_pending;     /* held names per sandbox (0: 16) */
	void *ctx;
};

struct egr_dnsproxy_stats {
	uint64_t allowed;       /* answered from upstream */
	uint64_t refused;       /* name/qtype not allowed */
	uint64_t servfail;      /* timeouts, upstream errors, table full, learn failures */
	uint64_t timeouts;      /* of those: no upstream answer within the timeout */
	uint64_t resent;        /* UDP queries sent to the upstream again, unanswered
				 * after a third of the timeout */
	uint64_t exfil;         /* refused as exfiltration */
	uint64_t cap;           /* learn() failures (also counted in servfail) */
	uint64_t malformed;     /* dropped: not a parseable query */
	uint64_t learned;       /* addresses handed to learn() successfully */
	uint64_t rebind;        /* answers with rebinding addresses stripped */
	uint64_t rebind_addrs;  /* address records stripped */
	uint64_t would_deny;    /* audit mode: names/qtypes forwarded that enforce
				 * mode refuses */
	/* Shed, per sandbox (docs/dns.md "Fairness"): */
	uint64_t shed_rate;     /* past its query rate */
	uint64_t shed_inflight; /* past its own in-flight limit, or the table full
				 * with it among the heaviest users */
	uint64_t evicted;       /* its oldest query failed (SERVFAIL) to make room
				 * for a sandbox with fewer in flight */
	uint64_t foreign;       /* dropped on the listeners it shares: a sender the
				 * kernel recorded for no sandbox there (the
				 * listeners' count, not the sandbox's) */
	uint32_t tcp_conns;     /* client TCP connections open now */
	uint32_t inflight;      /* queries upstream now */
};

struct egr_dnsproxy;

/* A device sandbox's listeners (docs/dns.md "Device sandboxes"): bound to
 * these addresses of its device (has4/has6 false: none of that family)
 * and to the device itself, in the device's network namespace. */
struct egr_dnsproxy_device {
	struct in6_addr addr6;
	struct in_addr addr4;
	int ifindex;
	bool has4, has6;
};

/* The verdict's name in events and logs (dns_types.c). */
const char *egr_dns_verdict_name(enum egr_dns_verdict v);

#endif /* EGR_DNS_TYPES_H */
