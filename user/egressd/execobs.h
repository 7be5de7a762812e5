/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What an execution did that the kernel's destination map cannot tell:
 * the DNS names it resolved (and the addresses each answer gave), and the
 * destinations that were denied or, in audit mode, would have been. Kept
 * in memory per sandbox, bounded, and written into the execution's audit
 * record at detach (docs/audit.md "observed"); `egressctl suggest` builds a
 * policy from that record. Retention is the audit log's. The arrays grow
 * as used, up to the bounds below: at most about 75 KiB per sandbox.
 */
#ifndef EGR_EXECOBS_H
#define EGR_EXECOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#define EGR_EXECOBS_MAX_NAMES  256 /* names per execution */
#define EGR_EXECOBS_MAX_ADDRS  8   /* addresses kept per name */
#define EGR_EXECOBS_MAX_DENIED 256 /* distinct denied destinations per execution */
#define EGR_EXECOBS_MAX_REBIND 64  /* distinct rebinding (name, address) per execution */

struct egr_execobs;

int egr_execobs_new(struct egr_execobs **out);
void egr_execobs_free(struct egr_execobs *x);

/* A DNS verdict of sandbox: qname, "allow" / "audit" / "deny", and the
 * answer's addresses (family AF_INET/AF_INET6, network order; may be 0). */
void egr_execobs_dns(struct egr_execobs *x, uint32_t sandbox, const char *qname,
		     const char *verdict, const int *family, const uint8_t (*addr)[16], size_t n);
/* A kernel event of sandbox with verdict "deny" or "audit" to a destination
 * (connect, sendmsg, backstop). proto: "tcp", "udp", ... */
void egr_execobs_denied(struct egr_execobs *x, uint32_t sandbox, const char *dest_addr,
			uint16_t port, const char *proto, const char *kind, bool audit);

/* A rebinding address in the answer for qname (family, network order,
 * class name of egr_rebind_class_name()): stripped (enforce mode) or
 * kept (audit mode). */
void egr_execobs_rebind(struct egr_execobs *x, uint32_t sandbox, const char *qname, int family,
			const uint8_t *addr, const char *cls, bool kept);
/* The dns_rebind_allow ranges of a policy the sandbox ran under (attach,
 * adopt, update): the union is kept. ranges: a JSON array of strings or NULL. */
void egr_execobs_rebind_allow(struct egr_execobs *x, uint32_t sandbox, const json_t *ranges);

/* A name approved for it (docs/dns.md "Approvals"): detail's name, ports,
 * scope, ttl_s and approver are kept (at most EGR_EXECOBS_MAX_REBIND). */
void egr_execobs_approved(struct egr_execobs *x, uint32_t sandbox, const json_t *detail);

/* The sandbox's observations as {"dns":[{"name","verdict","addrs":[..]}],
 * "denied":[{"addr","port","proto","kind","verdict","count"}],
 * "rebind":[{"name","addr","class","action":"stripped"|"kept","count"}],
 * "rebind_allow":["CIDR",..], "approved":[{"name","ports","scope","ttl_s",
 * "approver"}], "complete":bool, "dns_would_deny":N}, and
 * forget them. Never NULL unless out of memory. */
json_t *egr_execobs_take(struct egr_execobs *x, uint32_t sandbox);
/* Forget without a record (sandbox id reused, tests). */
void egr_execobs_forget(struct egr_execobs *x, uint32_t sandbox);

#endif /* EGR_EXECOBS_H */
