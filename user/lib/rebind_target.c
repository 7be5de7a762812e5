// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Rebinding targets (dnspolicy.h): the address classes an answer must not
 * point into (docs/dns.md "Rebinding"), pure functions of the address, and
 * how dangerous one is: it reaches the host itself or its cloud's instance
 * metadata, or it is in a range private mirrors and internal services
 * commonly use. Alerting takes its severity from that (docs/alerts.md
 * "dns_rebind").
 */
#include <string.h>
#include <sys/socket.h>

#include "rebind_target.h"

static bool all_zero(const uint8_t *a, size_t n);

static enum egr_rebind_class v4_class(const uint8_t *a)
{
	if (a[0] == 0)
		return EGR_REBIND_UNSPECIFIED;
	if (a[0] == 127)
		return EGR_REBIND_LOOPBACK;
	if (a[0] == 169 && a[1] == 254)
		return EGR_REBIND_LINK_LOCAL;
	if ((a[0] & 0xf0) == 224)
		return EGR_REBIND_MULTICAST;
	if (a[0] == 255 && a[1] == 255 && a[2] == 255 && a[3] == 255)
		return EGR_REBIND_BROADCAST;
	if (a[0] == 10 || (a[0] == 172 && (a[1] & 0xf0) == 16) || (a[0] == 192 && a[1] == 168) ||
	    (a[0] == 100 && (a[1] & 0xc0) == 64))
		return EGR_REBIND_PRIVATE;
	/* IANA IPv4 special-purpose registry, "Globally Reachable: False":
	 * 192.0.0.0/24 (IETF protocol assignments, DS-Lite 192.0.0.0/29; its
	 * 192.0.0.9 and .10 are global anycast), 192.0.2.0/24, 198.51.100.0/24,
	 * 203.0.113.0/24 (documentation: never routed, so whoever answers
	 * there is a network that borrowed them, like this dev VM's eth0),
	 * 198.18.0.0/15 (benchmarking) and 240.0.0.0/4 (reserved). */
	if ((a[0] == 192 && a[1] == 0 && a[2] == 0 && a[3] != 9 && a[3] != 10) ||
	    (a[0] == 192 && a[1] == 0 && a[2] == 2) || (a[0] == 198 && (a[1] & 0xfe) == 18) ||
	    (a[0] == 198 && a[1] == 51 && a[2] == 100) || (a[0] == 203 && a[1] == 0 && a[2] == 113) ||
	    (a[0] & 0xf0) == 240)
		return EGR_REBIND_RESERVED;
	return EGR_REBIND_NONE;
}

/*
 * IANA IPv6 special-purpose registry, "Globally Reachable: False", that the
 * classes above do not already name: 100::/64 (discard-only), 2001::/23
 * (IETF protocol assignments) except its global entries (2001:1::1-3/128,
 * 2001:3::/32 AMT, 2001:4:112::/48 AS112, 2001:20::/28 ORCHIDv2,
 * 2001:30::/28 DRIP), 2001:2::/48 (benchmarking) and 2001:10::/28 (ORCHID)
 * fall in it; 2001:db8::/32 and 3fff::/20 (documentation), 5f00::/16 (SRv6
 * SIDs). Teredo (2001::/32) is judged by the address it embeds, before.
 */
static bool v6_reserved(const uint8_t *a)
{
	static const uint8_t discard[8] = { 0x01, 0x00 };

	if (!memcmp(a, discard, 8))
		return true;
	if (a[0] == 0x20 && a[1] == 0x01 && (a[2] & 0xfe) == 0) {
		bool global = (a[2] == 0 && a[3] == 1 && all_zero(a + 4, 11) && a[15] >= 1 &&
			       a[15] <= 3) ||
			      (a[2] == 0 && a[3] == 3) ||
			      (a[2] == 0 && a[3] == 4 && a[4] == 0x01 && a[5] == 0x12) ||
			      (a[2] == 0 && (a[3] & 0xf0) == 0x20) ||
			      (a[2] == 0 && (a[3] & 0xf0) == 0x30);
		return !global;
	}
	if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x0d && a[3] == 0xb8)
		return true;
	if (a[0] == 0x3f && a[1] == 0xff && (a[2] & 0xf0) == 0)
		return true;
	return a[0] == 0x5f && a[1] == 0x00;
}

static bool all_zero(const uint8_t *a, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (a[i])
			return false;
	return true;
}

enum egr_rebind_class egr_rebind_classify(int family, const uint8_t *a,
					  struct egr_rebind_verdict *v)
{
	static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b };
	struct egr_rebind_verdict r = { 0 };
	const uint8_t *v4 = NULL;

	if (!a)
		goto out;
	if (family == AF_INET) {
		v4 = a;
		goto judge_v4;
	}
	if (family != AF_INET6)
		goto out;
	if (all_zero(a, 16)) {
		r.cls = EGR_REBIND_UNSPECIFIED;
		goto out;
	}
	if (all_zero(a, 15) && a[15] == 1) {
		r.cls = EGR_REBIND_LOOPBACK;
		goto out;
	}
	if (a[0] == 0xff) {
		r.cls = EGR_REBIND_MULTICAST;
		goto out;
	}
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80) {
		r.cls = EGR_REBIND_LINK_LOCAL;
		goto out;
	}
	if ((a[0] == 0xfe && (a[1] & 0xc0) == 0xc0) || (a[0] & 0xfe) == 0xfc ||
	    (!memcmp(a, nat64, 4) && a[4] == 0 && a[5] == 1)) {
		r.cls = EGR_REBIND_PRIVATE;
		goto out;
	}
	/* IPv6 forms that deliver to (or via) the IPv4 address they embed. */
	if (all_zero(a, 10) && a[10] == 0xff && a[11] == 0xff) {
		r.form = EGR_REBIND_V4MAPPED;
		v4 = a + 12;
	} else if (all_zero(a, 12)) {
		r.form = EGR_REBIND_V4COMPAT;
		v4 = a + 12;
	} else if (all_zero(a, 8) && a[8] == 0xff && a[9] == 0xff && !a[10] && !a[11]) {
		r.form = EGR_REBIND_V4TRANSLATED;
		v4 = a + 12;
	} else if (!memcmp(a, nat64, 12)) {
		r.form = EGR_REBIND_NAT64;
		v4 = a + 12;
	} else if (a[0] == 0x20 && a[1] == 0x02) {
		r.form = EGR_REBIND_6TO4;
		v4 = a + 2;
	} else if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0 && a[3] == 0) {
		/* Teredo's client address is stored inverted. */
		for (int i = 0; i < 4; i++)
			r.v4[i] = (uint8_t)~a[12 + i];
		r.form = EGR_REBIND_TEREDO;
		r.cls = v4_class(r.v4);
		goto out;
	}
	if (!v4 && v6_reserved(a)) {
		r.cls = EGR_REBIND_RESERVED;
		goto out;
	}
	if (!v4)
		goto out;
judge_v4:
	memcpy(r.v4, v4, 4);
	r.cls = v4_class(r.v4);
out:
	if (v)
		*v = r;
	return r.cls;
}

const char *egr_rebind_class_name(enum egr_rebind_class c)
{
	switch (c) {
	case EGR_REBIND_NONE:
		return "";
	case EGR_REBIND_LOOPBACK:
		return "loopback";
	case EGR_REBIND_UNSPECIFIED:
		return "unspecified";
	case EGR_REBIND_LINK_LOCAL:
		return "link-local";
	case EGR_REBIND_MULTICAST:
		return "multicast";
	case EGR_REBIND_BROADCAST:
		return "broadcast";
	case EGR_REBIND_PRIVATE:
		return "private";
	case EGR_REBIND_RESERVED:
		return "reserved";
	case EGR_REBIND_LOCAL:
		return "host-local";
	}
	return "?";
}

const char *egr_rebind_form_name(enum egr_rebind_form f)
{
	switch (f) {
	case EGR_REBIND_NATIVE:
		return "native";
	case EGR_REBIND_V4MAPPED:
		return "ipv4-mapped";
	case EGR_REBIND_V4COMPAT:
		return "ipv4-compatible";
	case EGR_REBIND_V4TRANSLATED:
		return "ipv4-translated";
	case EGR_REBIND_NAT64:
		return "nat64";
	case EGR_REBIND_6TO4:
		return "6to4";
	case EGR_REBIND_TEREDO:
		return "teredo";
	}
	return "?";
}

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
