// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* What the DNS proxy's public types need in code (dns_types.h): the
 * verdict names. The bottom of dns/: it calls nothing there. */
#include "dns_types.h"

const char *egr_dns_verdict_name(enum egr_dns_verdict v)
{
	switch (v) {
	case EGR_DNS_V_ALLOWED:
		return "allowed";
	case EGR_DNS_V_REFUSED:
		return "refused";
	case EGR_DNS_V_SERVFAIL:
		return "servfail";
	case EGR_DNS_V_EXFIL:
		return "exfil";
	case EGR_DNS_V_CAP:
		return "cap";
	case EGR_DNS_V_REBIND:
		return "rebind";
	case EGR_DNS_V_AUDIT:
		return "audit";
	}
	return "?";
}
