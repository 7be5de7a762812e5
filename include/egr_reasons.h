/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Why a BPF decision came out as it did. The inner functions of bpf/lib/
 * return one of these; the SEC() entry points of bpf/egressd.bpf.c map it
 * to the hook's verdict with egr_reason_verdict(), and tests/bpf/ asserts
 * the reason itself, so a test tells "denied because expired" from "denied
 * because no rule".
 *
 * Values are explicit and never renumbered (a retired one stays, unused):
 * test expectations and any later event field name them. Allow reasons lie
 * below EGR_R_DENY_BASE, deny reasons at or above it; 0 is no reason and
 * denies, like anything unknown (fail closed).
 */
#ifndef EGR_REASONS_H
#define EGR_REASONS_H

#include "egr_decide.h"

enum egr_reason {
	EGR_R_NONE = 0, /* never returned on purpose: denies */

	/* Allowed. */
	EGR_R_ALLOW_RULE = 1,         /* a prefix of the policy allows the port and protocol */
	EGR_R_ALLOW_CONNECTED = 2,    /* backstop: the connected peer connect() judged */
	EGR_R_ALLOW_LISTENER = 3,     /* backstop: a listener or accepted connection (inbound allow) */
	EGR_R_ALLOW_DNS_PROXY = 4,    /* to (or from) the sandbox's own DNS proxy */
	EGR_R_ALLOW_DNS_REDIRECT = 5, /* DNS, pointed at the sandbox's proxy */
	EGR_R_ALLOW_QUOTA = 6,        /* within every quota (or none set) */
	EGR_R_ALLOW_REPLY = 7,        /* ingress: a reply on a connection the sandbox opened */
	EGR_R_ALLOW_INSPECT = 8,      /* allowed, and pointed at the inspecting proxy */
	EGR_R_ALLOW_NO_INSPECT = 9,   /* UDP under inspection, not QUIC: allowed as is */
	EGR_R_ALLOW_LAST = EGR_R_ALLOW_NO_INSPECT, /* a new allow reason moves this */

	/* Denied. */
	EGR_R_DENY_BASE = 100,
	EGR_R_DENY_NO_SANDBOX = 100,  /* no cgroup storage value or no sandbox entry */
	EGR_R_DENY_NO_RULE = 101,     /* no prefix of the policy covers the address */
	EGR_R_DENY_PORT = 102,        /* a prefix covers it, not for this port or protocol */
	EGR_R_DENY_EXPIRED = 103,     /* the covering prefix (DNS-learned) has expired */
	EGR_R_DENY_UNSPEC = 104,      /* 0.0.0.0 or :: as a destination */
	EGR_R_DENY_NOT_IP = 105,      /* a packet that is neither IPv4 nor IPv6 */
	EGR_R_DENY_NO_DNS_PROXY = 106, /* DNS, and the sandbox has no proxy listener */
	EGR_R_DENY_NO_STORAGE = 107,  /* socket storage could not be had */
	EGR_R_DENY_QUOTA = 108,       /* past a quota, not the first packet of the window */
	EGR_R_DENY_QUOTA_FIRST = 109, /* the packet that crossed the quota: reported */
	EGR_R_DENY_NO_PEER = 110,     /* a send without address on a socket with no peer */
	EGR_R_DENY_INSPECT = 111,     /* inspection cannot take it (QUIC, a loop, no listener) */
	EGR_R_DENY_INBOUND = 112,     /* ingress: unsolicited (a SYN to a listener, a stranger's datagram) */
	EGR_R_DENY_NOT_OURS = 113,    /* the proxy port is held by a socket that is not egressd's listener */
};

/* The hook's verdict for a reason: only a known allow reason allows. */
static __always_inline int egr_reason_verdict(int reason)
{
	return reason > EGR_R_NONE && reason <= EGR_R_ALLOW_LAST ? EGR_ALLOW : EGR_DENY;
}

_Static_assert(EGR_R_ALLOW_LAST < EGR_R_DENY_BASE, "allow reasons stay below EGR_R_DENY_BASE");
_Static_assert(EGR_R_DENY_NO_SANDBOX == 100 && EGR_R_DENY_EXPIRED == 103 &&
		       EGR_R_DENY_QUOTA_FIRST == 109 && EGR_R_DENY_INBOUND == 112,
	       "reasons are never renumbered");
_Static_assert(EGR_R_ALLOW_RULE == 1 && EGR_R_ALLOW_CONNECTED == 2 &&
		       EGR_R_ALLOW_DNS_REDIRECT == 5 && EGR_R_ALLOW_NO_INSPECT == 9,
	       "reasons are never renumbered");

#endif /* EGR_REASONS_H */
