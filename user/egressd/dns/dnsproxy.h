/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The DNS proxy. The kernel redirects a sandbox's DNS (UDP and TCP port 53,
 * any address) to listeners that belong to that sandbox alone:
 * 127.0.0.1:port4 and [::1]:port6, UDP and TCP on the same port number,
 * opened in the host network namespace or inside the sandbox's own. The
 * listener a query arrives on names the sandbox, and the kernel vouches for
 * the sender: only a socket that cgroup_skb/egress saw send from that
 * sandbox to its proxy (egr_dns_clients) is served; nothing in the packet
 * is trusted.
 *
 * For each query: parse (malformed: dropped and counted), match the name
 * against the sandbox's compiled DNS policy, the qtype against its allowed
 * types, and the name against the exfiltration tracker. Anything refused
 * gets REFUSED and is never sent upstream. Allowed queries go to the
 * upstream resolvers (UDP with a fresh random id, or TCP for a query that
 * came over TCP). The answer must match the id and the question. Its A/AAAA
 * addresses (following CNAMEs from the asked name) are handed to learn()
 * BEFORE the answer is released; if learn() fails (or the answer holds more
 * addresses than the proxy can account for) the client gets SERVFAIL:
 * fail closed. Otherwise the upstream's bytes are relayed unchanged except
 * for the id (EDNS0, >512 bytes and the TC bit pass through; a client that
 * sees TC retries over TCP).
 *
 * Rebinding: before anything is learned, every A/AAAA record of the answer
 * whose address egr_dnspolicy_rebind_blocked_local() refuses (loopback,
 * private, link-local, reserved, or an address of the host or of the
 * sandbox's own network namespace, egr_localaddr; not covered by
 * network.dns_rebind_allow) is removed from
 * the message (egr_dns_filter_addrs()), and the rewritten message is what is
 * learned from and released; a REBIND event lists what was removed. A
 * rewrite that fails gets SERVFAIL; one too large for the client's UDP size
 * gets an empty TC reply (the client retries over TCP).
 *
 * Every verdict is reported through event(). Single-threaded: everything
 * runs on the egr_loop given at creation.
 */
#ifndef EGR_DNSPROXY_H
#define EGR_DNSPROXY_H

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

/* One address to add to a sandbox's allowlist. */
struct egr_dns_learned {
	int family;             /* AF_INET or AF_INET6 */
	uint8_t addr[16];       /* network order; AF_INET uses the first 4 */
	uint32_t ttl_s;         /* max(answer TTL along the CNAME chain, min_ttl_s) */
	uint64_t expires_ns;    /* CLOCK_BOOTTIME (bpf_ktime_get_boot_ns) deadline */
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

struct egr_dnsproxy_config {
	/* Upstream resolvers (port in the sockaddr). nupstreams 0: the
	 * nameservers of /etc/resolv.conf (egr_dnsproxy_resolv_conf()). */
	struct sockaddr_storage upstreams[EGR_DNSPROXY_MAX_UPSTREAMS];
	size_t nupstreams;
	uint32_t min_ttl_s;           /* learned expiry >= this (default 0) */
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
	/* Who asks (docs/dns.md "Who asks"): with verify_clients, a query is
	 * served only when egr_dns_clients (in bpf) has its sender for the
	 * listener's sandbox; anything else is dropped and counted `foreign`.
	 * The sandbox's entries and their count are purged when it goes. Off
	 * only for tests without BPF. */
	bool verify_clients;
	struct egr_bpf *bpf;
	struct egr_exfil_limits exfil; /* all zero: egr_exfil_limits_default() */
	egr_dnsproxy_learn_fn learn;  /* required */
	egr_dnsproxy_event_fn event;  /* optional */
	void *ctx;
};

struct egr_dnsproxy_stats {
	uint64_t allowed;       /* answered from upstream */
	uint64_t refused;       /* name/qtype not allowed */
	uint64_t servfail;      /* timeouts, upstream errors, table full, learn failures */
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
	uint64_t foreign;       /* dropped: sent to its listener by a socket the
				 * kernel did not redirect from this sandbox */
	uint32_t tcp_conns;     /* client TCP connections open now */
	uint32_t inflight;      /* queries upstream now */
};

struct egr_dnsproxy;

/* Parse "ADDR", "ADDR:PORT", "[V6]" or "[V6]:PORT" (default port 53).
 * 0 or -EINVAL. */
int egr_dnsproxy_parse_addr(const char *text, struct sockaddr_storage *out);
/* Fill cfg->upstreams from the nameserver lines of path (NULL:
 * /etc/resolv.conf), as many as fit. 0, -ENOENT (no nameserver) or -errno. */
int egr_dnsproxy_resolv_conf(const char *path, struct egr_dnsproxy_config *cfg);

/* cfg is copied. Creates the upstream sockets and the timer. */
int egr_dnsproxy_new(struct egr_loop *loop, const struct egr_dnsproxy_config *cfg,
		     struct egr_dnsproxy **out);
/* Removes every sandbox (closing its sockets, dropping its queries in
 * flight, no answers sent), unregisters everything from the loop and frees
 * p. Call it before egr_loop_free(). */
void egr_dnsproxy_free(struct egr_dnsproxy *p);

/*
 * Open sandbox_id's listeners. pol: the proxy takes ownership (also on
 * error). netns_fd: the sandbox's network namespace, or -1 for egressd's
 * own. want_port4/6: 0 for any free port, else that port (egressd restarts
 * re-open the ports stored in its state). *port4 and *port6 get the ports
 * (*port6 = 0 if IPv6 loopback is unavailable in that namespace; the kernel
 * side must then refuse the sandbox's IPv6 DNS). -EEXIST if the sandbox is
 * already there, -errno from socket/bind/setns.
 */
int egr_dnsproxy_add_sandbox(struct egr_dnsproxy *p, uint32_t sandbox_id, const char *tenant,
			     struct egr_dnspolicy *pol, int netns_fd, uint16_t want_port4,
			     uint16_t want_port6, uint16_t *port4, uint16_t *port6);
/* Replace its DNS policy (ownership of pol taken, also on error); queries
 * already upstream finish under the ports they were matched with.
 * -ENOENT if unknown. */
int egr_dnsproxy_update_sandbox(struct egr_dnsproxy *p, uint32_t sandbox_id,
				struct egr_dnspolicy *pol);
/* SIGHUP: new learned-address minimum TTL and exfiltration limits, for
 * every sandbox (their exfiltration windows restart empty). All or nothing:
 * -ENOMEM leaves the old limits. */
int egr_dnsproxy_set_limits(struct egr_dnsproxy *p, uint32_t min_ttl_s,
			    const struct egr_exfil_limits *exfil);
/* Close its sockets and TCP connections, drop its queries in flight. */
int egr_dnsproxy_remove_sandbox(struct egr_dnsproxy *p, uint32_t sandbox_id);
/* An egr_rebind_local_fn (dnspolicy.h) for one sandbox: does the host, or the
 * sandbox's own network namespace, deliver addr locally? ctx: a struct
 * egr_dnsproxy_local. True when it cannot tell. */
struct egr_dnsproxy_local {
	const struct egr_dnsproxy *p;
	uint32_t sandbox_id;
};
bool egr_dnsproxy_is_local(void *ctx, int family, const uint8_t *addr);

int egr_dnsproxy_stats(const struct egr_dnsproxy *p, uint32_t sandbox_id,
		       struct egr_dnsproxy_stats *out);

const char *egr_dns_verdict_name(enum egr_dns_verdict v);

#endif /* EGR_DNSPROXY_H */
