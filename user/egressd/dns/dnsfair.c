// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <inttypes.h>

#include "dnsfair.h"

json_t *egr_dnsfair_json(const struct egr_dnsproxy *p, uint32_t sandbox_id)
{
	struct egr_dnsproxy_stats st;
	uint64_t kshed = 0;

	if (!p || egr_dnsproxy_stats(p, sandbox_id, &st))
		return NULL;
	egr_dnsproxy_kernel_shed(p, sandbox_id, &kshed);
	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:i, "
			 "s:i}",
			 "allowed", (json_int_t)st.allowed, "refused", (json_int_t)st.refused,
			 "servfail", (json_int_t)st.servfail, "timeouts", (json_int_t)st.timeouts,
			 "resent", (json_int_t)st.resent, "exfil", (json_int_t)st.exfil,
			 "malformed", (json_int_t)st.malformed, "learned", (json_int_t)st.learned,
			 "shed_rate", (json_int_t)st.shed_rate, "shed_inflight",
			 (json_int_t)st.shed_inflight, "evicted", (json_int_t)st.evicted,
			 "foreign_dropped", (json_int_t)st.foreign, "shed_kernel", (json_int_t)kshed,
			 "inflight", (int)st.inflight,
			 "tcp_conns", (int)st.tcp_conns);
}

void egr_dnsfair_metrics(void *ctx, struct egr_mbuf *b)
{
	const struct egr_registry *reg = ctx;
	struct egr_dnsproxy *dns = egr_reg_dns(reg);
	struct egr_reg_iter it = { 0 };
	static const char *const reasons[] = { "rate", "inflight", "evicted", "foreign", "kernel" };

	egr_mbuf_family(b, "egressd_dns_shed_total", "counter",
			"DNS queries the proxy shed, per sandbox and reason: past the sandbox's "
			"rate, past its in-flight share, evicted for a sandbox with fewer in "
			"flight, dropped on the listener it shares from a socket of no sandbox "
			"there (the listener's count), or dropped in the kernel past its budget "
			"on the shared queues (docs/dns.md).");
	for (const struct egr_sb *sb; dns && (sb = egr_reg_next(reg, &it));) {
		struct egr_dnsproxy_stats st;
		uint64_t v[5];

		if (egr_dnsproxy_stats(dns, sb->id, &st))
			continue;
		v[0] = st.shed_rate;
		v[1] = st.shed_inflight;
		v[2] = st.evicted;
		v[3] = st.foreign;
		if (egr_dnsproxy_kernel_shed(dns, sb->id, &v[4]))
			v[4] = 0;
		for (int k = 0; k < 5; k++) {
			egr_mbuf_printf(b, "egressd_dns_shed_total{tenant=\"");
			egr_mbuf_label(b, sb->tenant ? sb->tenant : "");
			egr_mbuf_printf(b, "\",sandbox=\"%u\",reason=\"%s\"} %" PRIu64 "\n", sb->id,
					reasons[k], v[k]);
		}
	}
}
