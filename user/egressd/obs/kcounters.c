// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The kernel's global counters as exposition families (docs/metering.md). */
#include <stddef.h>

#include "egressd.h"
#include "kcounters.h"

/*
 * The kernel's global counters (egressctl status), by kind: what the hooks
 * allowed, what they denied and why, what they dropped and why. The reason
 * values are the fixed set of docs/metering.md.
 */
void egr_kcounters_emit(struct egr_mbuf *b, const uint64_t *cnt)
{
	static const struct {
		int idx;
		const char *label;
	} allowed[] = {
		{ EGR_CNT_CONNECT_ALLOW, "connect" },
		{ EGR_CNT_SENDMSG_ALLOW, "sendmsg" },
		{ EGR_CNT_SOCK_CREATE_ALLOW, "sock_create" },
	}, denied[] = {
		{ EGR_CNT_CONNECT_DENY, "connect" },
		{ EGR_CNT_SENDMSG_DENY, "sendmsg" },
		{ EGR_CNT_SOCK_CREATE_DENY, "sock_create" },
		{ EGR_CNT_SETSOCKOPT_DENY, "setsockopt" },
		{ EGR_CNT_NO_SANDBOX, "no_sandbox" },
		{ EGR_CNT_EXPIRED, "expired" },
	}, dropped[] = {
		{ EGR_CNT_BACKSTOP_DROP, "backstop" },
		{ EGR_CNT_INBOUND_DROP, "inbound" },
		{ EGR_CNT_QUOTA_DROP, "quota" },
	};

	egr_mbuf_family(b, "egressd_kernel_allowed_total", "counter",
			"Calls the kernel hooks allowed, all sandboxes, by hook.");
	for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
		egr_mbuf_printf(b, "egressd_kernel_allowed_total{hook=\"%s\"} %llu\n",
				allowed[i].label, (unsigned long long)cnt[allowed[i].idx]);
	egr_mbuf_family(b, "egressd_kernel_denied_total", "counter",
			"Calls the kernel hooks denied, all sandboxes, by reason.");
	for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]); i++)
		egr_mbuf_printf(b, "egressd_kernel_denied_total{reason=\"%s\"} %llu\n",
				denied[i].label, (unsigned long long)cnt[denied[i].idx]);
	egr_mbuf_family(b, "egressd_kernel_dropped_packets_total", "counter",
			"Packets the kernel hooks dropped, all sandboxes, by reason.");
	for (size_t i = 0; i < sizeof(dropped) / sizeof(dropped[0]); i++)
		egr_mbuf_printf(b, "egressd_kernel_dropped_packets_total{reason=\"%s\"} %llu\n",
				dropped[i].label, (unsigned long long)cnt[dropped[i].idx]);
	egr_mbuf_family(b, "egressd_kernel_meter_full_total", "counter",
			"Meter updates lost because a meter map was full.");
	egr_mbuf_printf(b, "egressd_kernel_meter_full_total %llu\n",
			(unsigned long long)cnt[EGR_CNT_METER_FULL]);
}
