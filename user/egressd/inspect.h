/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The inspecting proxy (docs/inspect.md). For a sandbox whose policy says
 * network.inspect, connect4/6 send every allowed TCP connection to a
 * listener of that sandbox alone (127.0.0.1:port4 and [::1]:port6, in its
 * network namespace when it has one, like the DNS proxy): the listener is
 * the sandbox's identity. The connection's original destination is taken
 * from egr_inspect_orig, where the kernel published it under the client's
 * address and port; an accepted connection without an entry is closed.
 *
 * The proxy reads the client's first bytes (at most EGR_INSPECT_HELLO_MAX,
 * within a deadline): a TLS ClientHello (SNI) or an HTTP/1.x request head
 * (Host). It dials the original destination itself only if that name is
 * resolvable under the sandbox's DNS policy AND the destination is an
 * address the sandbox learned for that very name, or is covered by a
 * literal address entry of outbound_allow (which has no name). Otherwise the
 * client gets a reset and a deny event names what was seen. Then it relays
 * both ways with splice() through a pipe per direction: non-blocking, in
 * egressd's event loop, with back-pressure (a full pipe stops reading),
 * half-close and idle timeouts.
 *
 * The outgoing socket is egressd's: it is in egressd's cgroup, not the
 * sandbox's, so the sandbox's programs never see it; it is created in the
 * sandbox's network namespace, so it goes where the sandbox's own would.
 */
#ifndef EGR_INSPECT_H
#define EGR_INSPECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "dnspolicy.h"
#include "loop.h"
#include "policy.h"

#include "inspect_types.h"

int egr_inspect_new(struct egr_loop *loop, const struct egr_inspect_config *cfg,
		    struct egr_inspect **out);
/* Closes every connection and listener. Before egr_loop_free(). */
void egr_inspect_free(struct egr_inspect *p);

/*
 * Open sandbox_id's listeners and take its policy: dpol (ownership taken,
 * also on error) for names, pol's literal address entries for addresses.
 * netns_fd: its network namespace or -1 (dup'ed: outgoing sockets are made
 * there). want_port4/6: ports to reuse after a restart, 0 for any. *port6 =
 * 0 when the namespace has no IPv6 loopback. -EEXIST, -EINVAL or -errno.
 */
int egr_inspect_add_sandbox(struct egr_inspect *p, uint32_t sandbox_id, const char *tenant,
			    const struct egr_policy *pol, struct egr_dnspolicy *dpol, int netns_fd,
			    uint16_t want_port4, uint16_t want_port6, uint16_t *port4,
			    uint16_t *port6);
/* The same for a device sandbox: its listeners bound to dev's addresses
 * and to the device (netns_fd: the device's namespace). A family without
 * an address gets port 0. */
int egr_inspect_add_device(struct egr_inspect *p, uint32_t sandbox_id, const char *tenant,
			   const struct egr_policy *pol, struct egr_dnspolicy *dpol, int netns_fd,
			   const struct egr_inspect_device *dev, uint16_t want_port4,
			   uint16_t want_port6, uint16_t *port4, uint16_t *port6);
/* New policy (dpol owned, also on error). Open connections stay: they were
 * judged by the old one, and the registry tears down refused ones. */
int egr_inspect_update_sandbox(struct egr_inspect *p, uint32_t sandbox_id,
			       const struct egr_policy *pol, struct egr_dnspolicy *dpol);
/* Close its listeners and connections; its destinations are forgotten. */
int egr_inspect_remove_sandbox(struct egr_inspect *p, uint32_t sandbox_id);
bool egr_inspect_has_sandbox(const struct egr_inspect *p, uint32_t sandbox_id);

/* The destinations the proxy relayed for the sandbox, as audit "egress"
 * entries with their host names (new reference; NULL if none). */
json_t *egr_inspect_dests_json(struct egr_inspect *p, uint32_t sandbox_id);
int egr_inspect_stats(const struct egr_inspect *p, struct egr_inspect_stats *out);
/* The proxy's policy refusals of one sandbox since it was added (not
 * conn_limit: other sandboxes can cause those). -ENOENT if not inspected. */
int egr_inspect_sandbox_denied(const struct egr_inspect *p, uint32_t sandbox_id, uint64_t *out);
/* The same as JSON for `egressctl status` (new reference). */
json_t *egr_inspect_status(const struct egr_inspect *p);

#endif /* EGR_INSPECT_H */
