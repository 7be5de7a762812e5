// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The observation bus: typed records to their subscribers. */
#include <errno.h>

#include "bus.h"
#include "clock.h"
#include "dns/dnsproxy.h"

uint64_t egr_now_ns(void)
{
	return egr_realtime_ns();
}

int egr_bus_subscribe(struct egr_bus *b, unsigned kinds, egr_bus_fn fn, void *ctx)
{
	if (!b || !fn)
		return -EINVAL;
	if (b->nsubs == EGR_BUS_MAX_SUBS)
		return -ENOSPC;
	b->subs[b->nsubs].kinds = kinds;
	b->subs[b->nsubs].fn = fn;
	b->subs[b->nsubs].ctx = ctx;
	b->nsubs++;
	return 0;
}

void egr_bus_publish(struct egr_bus *b, struct egr_rec *r)
{
	unsigned bit;

	if (!b || !r || (unsigned)r->kind >= EGR_REC_NKINDS)
		return;
	bit = EGR_REC_BIT(r->kind);
	b->published[r->kind]++;
	if (bit & EGR_REC_EVENTS) {
		r->seq = ++b->seq;
		if (!r->unix_ns)
			r->unix_ns = egr_now_ns();
	}
	for (size_t i = 0; i < b->nsubs; i++)
		if (b->subs[i].kinds & bit)
			b->subs[i].fn(b->subs[i].ctx, r);
}

const char *egr_life_name(enum egr_life what)
{
	switch (what) {
	case EGR_LIFE_ATTACH:
		return "attach";
	case EGR_LIFE_ADOPT:
		return "adopt";
	case EGR_LIFE_UPDATE:
		return "update";
	case EGR_LIFE_DETACH:
		return "detach";
	case EGR_LIFE_QUARANTINE:
		return "quarantine";
	case EGR_LIFE_RELEASE:
		return "release";
	}
	return "unknown";
}

const char *egr_dns_verdict_event_name(int verdict)
{
	static const char *const verdicts[] = {
		[EGR_DNS_V_ALLOWED] = "allow", [EGR_DNS_V_REFUSED] = "deny",
		[EGR_DNS_V_SERVFAIL] = "servfail", [EGR_DNS_V_EXFIL] = "exfil",
		[EGR_DNS_V_CAP] = "servfail", [EGR_DNS_V_REBIND] = "rebind", [EGR_DNS_V_AUDIT] = "audit",
	};

	if (verdict < 0 || (size_t)verdict >= sizeof(verdicts) / sizeof(verdicts[0]) ||
	    !verdicts[verdict])
		return "deny";
	return verdicts[verdict];
}
