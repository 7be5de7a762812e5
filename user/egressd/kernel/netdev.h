/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Device sandboxes, the kernel side (bpf/netdev.bpf.c; issue 25): load the
 * two device programs for one sandbox on egressd's maps (its pinned maps by
 * name, plus egr_nd_flows and egr_nd_counters pinned beside them) and attach
 * them to a device of a network namespace: TCX links where the kernel has
 * them (6.6+), pinned under <bpffs-dir>/netdev/<sandbox-id>/{ingress,egress}
 * so that they keep enforcing while egressd is down; tc clsact filters
 * elsewhere (they stay on the device by themselves). Both programs or
 * neither: an attach that cannot put both in place leaves nothing.
 *
 * The registry's device sandboxes (registry/netdev_sb.c) call it.
 * Test only: EGRESSD_TEST_NETDEV_TC=1 takes the tc path on a kernel with
 * TCX, so that both paths are tested on one host.
 */
#ifndef EGR_KERNEL_NETDEV_H
#define EGR_KERNEL_NETDEV_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

struct egr_bpf;

/* How a device sandbox's programs are attached. */
enum egr_nd_mode { EGR_ND_TCX = 1, EGR_ND_TC = 2 };

/* The addresses of the device its DNS listeners are bound to (docs/dns.md
 * "Device sandboxes"): the programs rewrite the guest's port-53 packets to
 * them. has4/has6 false: none of that family (its DNS is dropped). */
struct egr_nd_dns {
	struct in6_addr addr6;
	struct in_addr addr4;
	bool has4, has6;
};

/* Attach sandbox_id's programs to device ifname of the network namespace
 * at netns (NULL: egressd's own); dns (NULL: none) where its DNS goes.
 * *mode says which path was taken. 0 or -errno (-ENODEV: no such device;
 * -EOPNOTSUPP: a link type the programs do not parse); on error nothing
 * of ours is on the device. */
int egr_nd_attach(struct egr_bpf *b, uint32_t sandbox_id, const char *netns, const char *ifname,
		  const struct egr_nd_dns *dns, enum egr_nd_mode *mode);
/* The device's addresses for its DNS listeners, in the network namespace
 * at netns: IPv4 its first address, IPv6 its first one of wider than
 * link-local scope (a link-local one would need the device as its scope,
 * which the programs' rewrite cannot carry). 0 or -errno; no address is
 * not an error. */
int egr_nd_dns_addrs(const char *netns, int ifindex, struct egr_nd_dns *out);
/* Is device ifindex of the namespace at netns a port of a switch (a bridge,
 * a bond or team, Open vSwitch)? Its frames are switched to the other
 * ports before any routing: what the programs pass for the link itself
 * (ARP, neighbour discovery) would reach them (another tenant's device, the
 * LAN), and its IP fails the reverse-path check (its routes are the
 * master's). 1 (what: "KIND NAME" of the master), 0 (not; a VRF's port is
 * routed) or -errno. */
int egr_nd_switch_port(const char *netns, int ifindex, char *what, size_t len);
/* The index of device ifname in the network namespace at netns (NULL:
 * egressd's). 0, -ENODEV (no such device) or -errno (the namespace). */
int egr_nd_ifindex(const char *netns, const char *ifname, int *ifindex);
/* The ifindex the sandbox's pinned TCX ingress link is on: 0 when its
 * device is gone (the kernel's word, whatever became of the namespace's
 * path). 0 or -errno (-ENOENT: no pin, the tc path). */
int egr_nd_link_ifindex(struct egr_bpf *b, uint32_t sandbox_id, int *ifindex);
/* Is there a device of that index in the namespace at netns? 0, -ENODEV
 * or -errno (the namespace). The programs are on the ifindex: a renamed
 * device is still the sandbox's, a new one of the old name is not. */
int egr_nd_has_ifindex(const char *netns, int ifindex);
/* Remove them (TCX links and their pins, or the tc filters): idempotent.
 * 0 or -errno. */
int egr_nd_detach(struct egr_bpf *b, uint32_t sandbox_id, const char *netns, const char *ifname);

#endif /* EGR_KERNEL_NETDEV_H */
