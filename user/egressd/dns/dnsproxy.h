/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The DNS proxy. The kernel redirects a sandbox's DNS (UDP and TCP port 53,
 * any address) to the listeners of its network namespace, shared by that
 * namespace's sandboxes: 127.0.0.1:port4 and [::1]:port6, UDP and TCP on
 * the same port number, opened in egressd's network namespace or inside
 * the sandbox's own. The kernel's record of the sender names the sandbox:
 * only a socket that cgroup_skb/egress saw send from a sandbox to the
 * proxy (egr_dns_senders) is served, and as that sandbox; nothing in the
 * packet is trusted.
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

/* The types and limits every file of dns/ shares (dns_types.h) and the
 * resolver addresses (dns_upstream.h) lie below dnsproxy.c: the proxy's
 * lower files include those, never this header (tools/module-cycles). */
#include "dns_types.h"
#include "dns_upstream.h"

/* Before egr_dnsproxy_free() at a graceful exit: stop reading the
 * listeners (the next egressd answers what queues on them) and answer the
 * queries in flight, bounded by the upstream timeout. */
void egr_dnsproxy_drain(struct egr_dnsproxy *p);
/* cfg is copied. Creates the upstream sockets and the timer. */
int egr_dnsproxy_new(struct egr_loop *loop, const struct egr_dnsproxy_config *cfg,
		     struct egr_dnsproxy **out);
/* Removes every sandbox (closing its sockets, dropping its queries in
 * flight, no answers sent), unregisters everything from the loop and frees
 * p. Call it before egr_loop_free(). */
void egr_dnsproxy_free(struct egr_dnsproxy *p);

/*
 * Serve sandbox_id on the listeners of its network namespace (opened if
 * it is the first), and set its kernel budget on their queues. pol: the
 * proxy takes ownership (also on error). netns_fd: the sandbox's network
 * namespace, or -1 for egressd's own. want_port4/6: 0 for a new sandbox,
 * else the ports stored in its state (an adoption: tried first when the
 * namespace's listeners are opened, and what the kernel recorded of it is
 * kept). *port4 and *port6 get the namespace's ports
 * (*port6 = 0 if IPv6 loopback is unavailable in that namespace; the kernel
 * side must then refuse the sandbox's IPv6 DNS). -EEXIST if the sandbox is
 * already there, -errno from socket/bind/setns.
 */
int egr_dnsproxy_add_sandbox(struct egr_dnsproxy *p, uint32_t sandbox_id, const char *tenant,
			     struct egr_dnspolicy *pol, int netns_fd, uint16_t want_port4,
			     uint16_t want_port6, uint16_t *port4, uint16_t *port6);
/*
 * A device sandbox (docs/dns.md "Device sandboxes"): listeners of its own,
 * never shared, bound to dev's addresses and to device dev->ifindex in the
 * network namespace netns_fd (-1: egressd's own), UDP and TCP on one port
 * per family; a family without an address gets none (its port 0: the
 * device program drops that family's DNS). Everything reaching them came
 * in through the device, so it is served as sandbox_id. The rest as
 * egr_dnsproxy_add_sandbox().
 */
int egr_dnsproxy_add_device(struct egr_dnsproxy *p, uint32_t sandbox_id, const char *tenant,
			    struct egr_dnspolicy *pol, int netns_fd,
			    const struct egr_dnsproxy_device *dev, uint16_t want_port4,
			    uint16_t want_port6, uint16_t *port4, uint16_t *port6);
/* Replace its DNS policy (ownership of pol taken, also on error); queries
 * already upstream finish under the ports they were matched with.
 * -ENOENT if unknown. */
int egr_dnsproxy_update_sandbox(struct egr_dnsproxy *p, uint32_t sandbox_id,
				struct egr_dnspolicy *pol);
/* SIGHUP: new learned-address minimum TTL, grace and exfiltration limits,
 * for every sandbox (their exfiltration windows restart empty). All or
 * nothing: -ENOMEM leaves the old limits. */
int egr_dnsproxy_set_limits(struct egr_dnsproxy *p, uint32_t min_ttl_s, uint32_t ttl_grace_s,
			    const struct egr_exfil_limits *exfil);
/*
 * Approvals (docs/dns.md "Approvals"): decide held request id. approve:
 * its queries are handled again (the cfg.grant callback must now say yes
 * for the name, or they are refused as any unknown name); else each gets
 * the policy's refusal with why. -ENOENT when no such request is held.
 */
int egr_dnsproxy_ask_decide(struct egr_dnsproxy *p, uint64_t id, bool approve, const char *why);
/* The held requests, at most max of them into out (valid until the loop
 * runs again); returns how many are held. */
size_t egr_dnsproxy_ask_list(const struct egr_dnsproxy *p, const struct egr_dns_ask **out,
			     size_t max);
const struct egr_dns_ask *egr_dnsproxy_ask_find(const struct egr_dnsproxy *p, uint64_t id);
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
/* Datagrams and TCP connections to the proxy the kernel dropped past the
 * sandbox's budget on the shared listeners' queues (egr_dns_budget; one
 * map lookup, so not part of the stats above, which the circuit breaker
 * reads every second). 0 or -errno. */
int egr_dnsproxy_kernel_shed(const struct egr_dnsproxy *p, uint32_t sandbox_id, uint64_t *out);

#endif /* EGR_DNSPROXY_H */
