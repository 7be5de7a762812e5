/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Address and prefix helpers shared by the policy parser, the compiler, the
 * DNS policy and the daemon. Addresses are raw bytes in network order: 4 for
 * IPv4, 16 for IPv6. Pure: no I/O, no allocation; fuzzed (tests/fuzz). */
#ifndef EGR_NETADDR_H
#define EGR_NETADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Longest text egr_prefix_format() writes: "[" IPv6 "]/128" and a NUL. */
#define EGR_PREFIX_TEXT_MAX (46 + 2 + 4 + 1)

struct egr_prefix {
	int family;       /* AF_INET or AF_INET6 */
	uint8_t addr[16]; /* network order; host bits cleared by egr_prefix_parse() */
	uint8_t plen;     /* 0-32 or 0-128 */
};

/* Bytes of an address of family: 16 for AF_INET6, 4 otherwise. */
static inline size_t egr_addr_len(int family)
{
	return family == AF_INET6 ? 16 : 4;
}

/* Clear the bits of addr (alen bytes) past the first plen. */
void egr_prefix_mask(uint8_t *addr, unsigned int alen, unsigned int plen);

/* Is a within net/plen? Both hold at least (plen + 7) / 8 bytes. */
bool egr_prefix_covers(const uint8_t *net, unsigned int plen, const uint8_t *a);

/* Is the IPv6 address a IPv4-mapped (::ffff:a.b.c.d)? */
bool egr_addr_is_v4mapped(const uint8_t a[16]);

/* An IPv4-mapped IPv6 prefix of length >= 96 as the IPv4 prefix it means
 * (the kernel judges mapped destinations by the IPv4 rules); true when p
 * was changed. Shorter mapped prefixes also cover non-mapped addresses and
 * stay IPv6. */
bool egr_prefix_unmap(struct egr_prefix *p);

/* Parse len bytes of text, an address of family (AF_INET: dotted quad,
 * AF_INET6: RFC 4291 text, no brackets) with an optional "/N", into out,
 * host bits cleared. 0; -EDOM when N is not a decimal 0-32 (0-128);
 * -EINVAL when the address is not one of family; out is then zeroed. */
int egr_prefix_parse(const char *text, size_t len, int family, struct egr_prefix *out);

/* The name events, audit records and metrics use for an IP protocol
 * number (EGR_IPPROTO_* of egr_decide.h: "tcp", "udp", "icmp", "icmpv6",
 * "udplite", "sctp", "mptcp"), or NULL for any other; callers print those
 * as the number. */
const char *egr_ipproto_name(uint32_t proto);

/* "a.b.c.d/N" or "[v6]/N" (brackets for IPv6, so a port may follow), or
 * without "/N" when bare and plen is the whole address. Bytes written
 * without the NUL, or -ENOSPC (buf holds "" then) or -EAFNOSUPPORT. */
int egr_prefix_format(const struct egr_prefix *p, bool bare, char *buf, size_t len);

#endif /* EGR_NETADDR_H */
