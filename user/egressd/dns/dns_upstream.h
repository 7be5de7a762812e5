/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The resolver addresses of the DNS proxy (dns_upstream.c), public part;
 * dnsproxy.h includes this. */
#ifndef EGR_DNS_UPSTREAM_H
#define EGR_DNS_UPSTREAM_H

#include <sys/socket.h>

#include "dns_types.h"

/* Parse "ADDR", "ADDR:PORT", "[V6]" or "[V6]:PORT" (default port 53).
 * 0 or -EINVAL. */
int egr_dnsproxy_parse_addr(const char *text, struct sockaddr_storage *out);
/* Fill cfg->upstreams from the nameserver lines of path (NULL:
 * /etc/resolv.conf), as many as fit. 0, -ENOENT (no nameserver) or -errno. */
int egr_dnsproxy_resolv_conf(const char *path, struct egr_dnsproxy_config *cfg);

#endif /* EGR_DNS_UPSTREAM_H */
