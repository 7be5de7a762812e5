// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * How dangerous a rebinding target is (dnspolicy.h): one that reaches the
 * host itself or its cloud's instance metadata, or one in a range private
 * mirrors and internal services commonly use. Alerting takes its severity
 * from it (docs/alerts.md "dns_rebind").
 */
#include <string.h>
#include <sys/socket.h>

#include "dnspolicy.h"

/* Instance metadata outside link-local: AWS's IPv6 endpoint and
 * Alibaba Cloud's (in 100.64.0.0/10). 169.254.169.254 is link-local. */
static const uint8_t aws_v6[16] = { 0xfd, 0x00, 0x0e, 0xc2, [14] = 0x02, [15] = 0x54 };
static const uint8_t alibaba_v4[4] = { 100, 100, 100, 200 };

bool egr_rebind_targets_host(int family, const uint8_t *addr, enum egr_rebind_class cls)
{
	struct egr_rebind_verdict v;

	switch (cls) {
	case EGR_REBIND_LOOPBACK:
	case EGR_REBIND_UNSPECIFIED: /* 0.0.0.0 connects to the host's own services */
	case EGR_REBIND_LINK_LOCAL:
	case EGR_REBIND_LOCAL:
		return true;
	default:
		break;
	}
	if (!addr)
		return false;
	if (family == AF_INET6 && !memcmp(addr, aws_v6, 16))
		return true;
	/* The IPv4 address judged: the address, or the one an IPv6 form embeds. */
	egr_rebind_classify(family, addr, &v);
	if (family == AF_INET || v.form != EGR_REBIND_NATIVE)
		return !memcmp(v.v4, alibaba_v4, 4);
	return false;
}
