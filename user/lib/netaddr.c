// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "egr_decide.h"
#include "netaddr.h"

void egr_prefix_mask(uint8_t *addr, unsigned int alen, unsigned int plen)
{
	unsigned int i;

	for (i = 0; i < alen; i++) {
		if (plen >= 8 * (i + 1))
			continue;
		if (plen <= 8 * i)
			addr[i] = 0;
		else
			addr[i] &= (uint8_t)(0xff << (8 - (plen - 8 * i)));
	}
}

bool egr_prefix_covers(const uint8_t *net, unsigned int plen, const uint8_t *a)
{
	unsigned int full = plen / 8, rest = plen % 8;

	if (memcmp(net, a, full))
		return false;
	return !rest || ((net[full] ^ a[full]) & (uint8_t)(0xff << (8 - rest))) == 0;
}

bool egr_addr_is_v4mapped(const uint8_t a[16])
{
	static const uint8_t pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return memcmp(a, pfx, sizeof(pfx)) == 0;
}

bool egr_prefix_unmap(struct egr_prefix *p)
{
	if (p->family != AF_INET6 || p->plen < 96 || !egr_addr_is_v4mapped(p->addr))
		return false;
	memmove(p->addr, p->addr + 12, 4);
	memset(p->addr + 4, 0, 12);
	p->family = AF_INET;
	p->plen = (uint8_t)(p->plen - 96);
	egr_prefix_mask(p->addr, 4, p->plen);
	return true;
}

const char *egr_ipproto_name(uint32_t proto)
{
	switch (proto) {
	case EGR_IPPROTO_TCP:
		return "tcp";
	case EGR_IPPROTO_UDP:
		return "udp";
	case EGR_IPPROTO_ICMP:
		return "icmp";
	case EGR_IPPROTO_ICMPV6:
		return "icmpv6";
	case EGR_IPPROTO_UDPLITE:
		return "udplite";
	case EGR_IPPROTO_SCTP:
		return "sctp";
	case EGR_IPPROTO_MPTCP:
		return "mptcp";
	default:
		return NULL;
	}
}

/* Decimal 0..max without sign, spaces or leading zeros ("0" itself is fine). */
static int parse_plen(const char *s, size_t len, unsigned int max, unsigned int *out)
{
	unsigned int v = 0;
	size_t i;

	if (len == 0 || len > 3 || (len > 1 && s[0] == '0'))
		return -EDOM;
	for (i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EDOM;
		v = v * 10 + (unsigned int)(s[i] - '0');
	}
	if (v > max)
		return -EDOM;
	*out = v;
	return 0;
}

int egr_prefix_parse(const char *text, size_t len, int family, struct egr_prefix *out)
{
	char buf[INET6_ADDRSTRLEN];
	unsigned int max = family == AF_INET ? 32 : 128, plen = max;
	const char *slash;
	size_t alen = len;

	memset(out, 0, sizeof(*out));
	if (!text || (family != AF_INET && family != AF_INET6))
		return -EINVAL;
	slash = memchr(text, '/', len);
	if (slash) {
		alen = (size_t)(slash - text);
		if (parse_plen(slash + 1, len - alen - 1, max, &plen))
			return -EDOM;
	}
	if (alen >= sizeof(buf) || memchr(text, '\0', alen))
		return -EINVAL;
	memcpy(buf, text, alen);
	buf[alen] = '\0';
	if (inet_pton(family, buf, out->addr) != 1) {
		memset(out, 0, sizeof(*out));
		return -EINVAL;
	}
	out->family = family;
	out->plen = (uint8_t)plen;
	egr_prefix_mask(out->addr, (unsigned int)egr_addr_len(family), plen);
	return 0;
}

int egr_prefix_format(const struct egr_prefix *p, bool bare, char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN];
	unsigned int max;
	int n;

	if (len)
		buf[0] = '\0';
	if (p->family != AF_INET && p->family != AF_INET6)
		return -EAFNOSUPPORT;
	max = p->family == AF_INET ? 32 : 128;
	if (!inet_ntop(p->family, p->addr, a, sizeof(a)))
		return -errno;
	if (bare && p->plen == max)
		n = snprintf(buf, len, p->family == AF_INET ? "%s" : "[%s]", a);
	else
		n = snprintf(buf, len, p->family == AF_INET ? "%s/%u" : "[%s]/%u", a, p->plen);
	if (n < 0 || (size_t)n >= len) {
		if (len)
			buf[0] = '\0';
		return -ENOSPC;
	}
	return n;
}
