// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target for user/lib/netaddr.c: the input is prefix text, its
 * first byte choosing the family. Checked promises: only 0, -EDOM or
 * -EINVAL; a parsed prefix has its host bits cleared, covers its own
 * address, and formats to text that parses back to the same prefix.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "netaddr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct egr_prefix p, q, m;
	char buf[EGR_PREFIX_TEXT_MAX];
	int family, err, n;

	if (size < 1)
		return 0;
	family = data[0] & 1 ? AF_INET6 : AF_INET;
	err = egr_prefix_parse((const char *)data + 1, size - 1, family, &p);
	if (err != 0 && err != -EDOM && err != -EINVAL)
		abort();
	if (err)
		return 0;
	if (p.family != family || p.plen > 8 * egr_addr_len(family))
		abort();
	m = p;
	egr_prefix_mask(m.addr, (unsigned int)egr_addr_len(family), p.plen);
	if (memcmp(m.addr, p.addr, sizeof(p.addr)) || !egr_prefix_covers(p.addr, p.plen, p.addr))
		abort();
	n = egr_prefix_format(&p, false, buf, sizeof(buf));
	if (n <= 0 || (size_t)n != strlen(buf))
		abort();
	/* IPv6 comes back in brackets, for a port to follow. */
	if (family == AF_INET6) {
		char *close = strchr(buf, ']');

		if (buf[0] != '[' || !close)
			abort();
		memmove(close, close + 1, strlen(close));
		memmove(buf, buf + 1, strlen(buf));
	}
	if (egr_prefix_parse(buf, strlen(buf), family, &q) || memcmp(&p, &q, sizeof(p)))
		abort();
	if (egr_prefix_unmap(&q) && (q.family != AF_INET || q.plen > 32))
		abort();
	return 0;
}
