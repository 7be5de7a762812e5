// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Metering export (docs/metering.md): the figures of every tenant and
 * sandbox, read from the kernel meters when asked, served as Prometheus text
 * on /metrics by libmicrohttpd in "external select" mode with epoll: its
 * epoll fd is one more fd of egressd's loop, and MHD_run() runs on egressd's
 * thread only, so nothing here needs a lock.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "log.h"
#include "metrics.h"
#include "dns/dnsproxy.h"
#include "kcounters.h"
#include "procmetrics.h"

#define TICK_MS 250           /* MHD_run for its timeouts */
#define CONN_LIMIT 32
#define CONN_TIMEOUT_S 10
#define SB_BUCKETS 1024

/* DNS proxy latency buckets, seconds. */
static const double dns_buckets[] = { 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
				      0.05,   0.1,   0.25,   0.5,   1,    2.5,   5 };
#define NBUCKETS (sizeof(dns_buckets) / sizeof(dns_buckets[0]))

struct dns_count {
	uint32_t sandbox_id;
	uint64_t allowed, refused;
	struct dns_count *next;
};

struct source {
	egr_metrics_source_fn fn;
	void *ctx;
};

struct egr_metrics {
	struct egr_registry *reg;
	unsigned max_sandboxes;
	struct MHD_Daemon *mhd;
	struct egr_loop *loop;
	int mhd_fd;
	/* DNS query counts: per tenant id (index) and per sandbox (hash). */
	uint64_t (*dns_tenant)[2];
	size_t ndns_tenant;
	struct dns_count *dns_sb[SB_BUCKETS];
	/* DNS latency histogram. */
	uint64_t lat_buckets[NBUCKETS];
	uint64_t lat_count;
	double lat_sum;
	/* Cardinality bound. */
	uint32_t *folded;   /* sandbox ids folded at the last render, sorted */
	size_t nfolded;
	uint64_t folded_total;
	uint64_t scrapes, scrape_errors;
	uint64_t read_failures; /* figures left out of scrapes */
	struct source *sources;
	size_t nsources;
};

/* --- the figures --------------------------------------------------------------------- */

static struct dns_count *dns_sb(struct egr_metrics *m, uint32_t id, bool create)
{
	struct dns_count **head = &m->dns_sb[id % SB_BUCKETS], *d;

	for (d = *head; d; d = d->next)
		if (d->sandbox_id == id)
			return d;
	if (!create || !(d = calloc(1, sizeof(*d))))
		return NULL;
	d->sandbox_id = id;
	d->next = *head;
	*head = d;
	return d;
}

void egr_metrics_count_dns(struct egr_metrics *m, uint32_t sandbox_id, uint32_t tenant_id,
			   bool allowed)
{
	struct dns_count *d;

	if (!m)
		return;
	if (tenant_id >= m->ndns_tenant) {
		size_t n = tenant_id + 16;
		uint64_t(*t)[2] = realloc(m->dns_tenant, n * sizeof(*t));

		if (t) {
			memset(t + m->ndns_tenant, 0, (n - m->ndns_tenant) * sizeof(*t));
			m->dns_tenant = t;
			m->ndns_tenant = n;
		}
	}
	if (tenant_id < m->ndns_tenant)
		m->dns_tenant[tenant_id][allowed ? 0 : 1]++;
	d = dns_sb(m, sandbox_id, true);
	if (d)
		(*(allowed ? &d->allowed : &d->refused))++;
}

void egr_metrics_observe_dns_latency(struct egr_metrics *m, double seconds)
{
	if (!m || seconds < 0)
		return;
	for (size_t i = 0; i < NBUCKETS; i++)
		if (seconds <= dns_buckets[i])
			m->lat_buckets[i]++;
	m->lat_count++;
	m->lat_sum += seconds;
}

int egr_metrics_tenant(struct egr_metrics *m, uint32_t tenant_id, struct egr_figures *out)
{
	int err;

	memset(out, 0, sizeof(*out));
	err = egr_bpf_meter_tenant(egr_reg_bpf(m->reg), tenant_id, &out->m);
	if (err)
		memset(&out->m, 0, sizeof(out->m));
	if (tenant_id < m->ndns_tenant) {
		out->dns_allowed = m->dns_tenant[tenant_id][0];
		out->dns_refused = m->dns_tenant[tenant_id][1];
	}
	if (err == -ENOENT && (out->dns_allowed || out->dns_refused))
		err = 0;
	return err;
}

int egr_metrics_sandbox(struct egr_metrics *m, uint32_t sandbox_id, uint32_t tenant_id,
			struct egr_figures *out)
{
	struct dns_count *d = dns_sb(m, sandbox_id, false);
	int err;

	memset(out, 0, sizeof(*out));
	err = egr_bpf_meter_sandbox(egr_reg_bpf(m->reg), sandbox_id, &out->m);
	if (err)
		memset(&out->m, 0, sizeof(out->m));
	if (d) {
		out->dns_allowed = d->allowed;
		out->dns_refused = d->refused;
		if (err == -ENOENT)
			err = 0;
	}
	return err;
}

static void fig_add(struct egr_figures *a, const struct egr_figures *b)
{
	uint64_t *x = (uint64_t *)&a->m;
	const uint64_t *y = (const uint64_t *)&b->m;

	for (size_t i = 0; i < sizeof(a->m) / sizeof(uint64_t); i++)
		x[i] += y[i];
	a->dns_allowed += b->dns_allowed;
	a->dns_refused += b->dns_refused;
}

/* One row of figures: the JSON key, the metric family (without the scope
 * prefix), its verdict and reason labels if any (reasons: the fixed set of
 * docs/metering.md), and where the value is. */
struct field {
	const char *key;
	const char *family;
	const char *verdict;
	const char *reason;
	const char *help;
	size_t off;
};

#define MF(f) offsetof(struct egr_figures, m.f)
static const struct field fields[] = {
	{ "bytes_out", "egress_bytes_total", NULL, NULL,
	  "Bytes of the IP packets sent (IP header + transport header + payload).", MF(bytes_out) },
	{ "packets_out", "egress_packets_total", NULL, NULL, "IP packets sent.", MF(pkts_out) },
	{ "bytes_in", "ingress_bytes_total", NULL, NULL,
	  "Bytes of the IP packets received (IP header + transport header + payload).",
	  MF(bytes_in) },
	{ "packets_in", "ingress_packets_total", NULL, NULL, "IP packets received.", MF(pkts_in) },
	/* One label set per family: the allowed rows carry reason="policy". */
	{ "connections_allowed", "connections_total", "allowed", "policy",
	  "connect() calls (TCP, connected UDP, TCP Fast Open) by verdict and reason: allowed "
	  "ones reason=\"policy\", denied ones reason=\"connect\".", MF(conn_allowed) },
	{ "connections_denied", "connections_total", "denied", "connect", NULL, MF(conn_denied) },
	{ "datagrams_allowed", "datagrams_total", "allowed", "policy",
	  "Unconnected UDP datagrams by verdict and reason: allowed ones reason=\"policy\", "
	  "denied ones reason=\"sendmsg\".",
	  MF(dgram_allowed) },
	{ "datagrams_denied", "datagrams_total", "denied", "sendmsg", NULL, MF(dgram_denied) },
	{ "sockets_denied", "sockets_denied_total", NULL, "socket",
	  "socket() and setsockopt() calls refused (reason=\"socket\").", MF(sock_denied) },
	{ "backstop_drops", "packets_dropped_total", NULL, "backstop",
	  "Packets dropped, by reason: backstop (egress to a destination no earlier hook "
	  "allowed), inbound (unsolicited inbound), quota (egress past a quota).",
	  MF(backstop_drops) },
	{ "inbound_drops", "packets_dropped_total", NULL, "inbound", NULL, MF(inbound_drops) },
	{ "quota_drops", "packets_dropped_total", NULL, "quota", NULL, MF(quota_drops) },
	{ "dns_queries_allowed", "dns_queries_total", "allowed", "dns_policy",
	  "DNS queries answered by the proxy, by verdict (since egressd started), all "
	  "reason=\"dns_policy\".",
	  offsetof(struct egr_figures, dns_allowed) },
	{ "dns_queries_refused", "dns_queries_total", "refused", "dns_policy", NULL,
	  offsetof(struct egr_figures, dns_refused) },
	/* Audit mode (network.mode "audit"): let through, counted as allowed
	 * above, and here as what enforce mode would have denied. */
	{ "would_deny_connections", "would_deny_connections_total", NULL, NULL,
	  "connect() calls audit mode let through that enforce mode denies.",
	  MF(would_deny_conn) },
	{ "would_deny_datagrams", "would_deny_datagrams_total", NULL, NULL,
	  "Unconnected UDP datagrams audit mode let through that enforce mode denies.",
	  MF(would_deny_dgram) },
	{ "would_deny_sockets", "would_deny_sockets_total", NULL, NULL,
	  "socket() and setsockopt() calls audit mode let through that enforce mode refuses.",
	  MF(would_deny_sock) },
	{ "would_deny_backstop", "would_deny_backstop_total", NULL, NULL,
	  "Egress packets audit mode let through that the backstop drops in enforce mode.",
	  MF(would_deny_backstop) },
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

static uint64_t fig_val(const struct egr_figures *f, size_t i)
{
	return *(const uint64_t *)((const char *)f + fields[i].off);
}

static const char *tenant_name(struct egr_registry *r, uint32_t tid)
{
	return egr_reg_tenant_name(r, tid);
}

static json_t *quota_json(struct egr_bpf *bpf, enum egr_quota_scope scope, uint32_t id)
{
	struct egr_quota q;

	if (egr_bpf_quota_get(bpf, scope, id, &q) < 0 || !q.limit_bytes)
		return NULL;
	return json_pack("{s:I, s:I, s:I, s:I}", "limit_bytes", (json_int_t)q.limit_bytes,
			 "window_seconds", (json_int_t)(q.window_ns / 1000000000ULL), "window_bytes",
			 (json_int_t)q.bytes, "windows_exceeded", (json_int_t)q.exceeded);
}

static json_t *fig_json(const struct egr_figures *f)
{
	json_t *o = json_object();

	for (size_t i = 0; o && i < NFIELDS; i++)
		json_object_set_new(o, fields[i].key, json_integer((json_int_t)fig_val(f, i)));
	return o;
}

json_t *egr_metrics_stats_json(struct egr_metrics *m, const char *tenant)
{
	struct egr_registry *r = m->reg;
	json_t *tenants = json_array(), *sbs = json_array(), *o, *q;
	struct egr_figures f;
	struct egr_reg_iter it = { 0 };

	if (!tenants || !sbs)
		goto oom;
	for (uint32_t tid = 1; tid <= egr_reg_tenant_count(r); tid++) {
		const char *name = tenant_name(r, tid);

		if (tenant && strcmp(tenant, name))
			continue;
		egr_metrics_tenant(m, tid, &f);
		o = fig_json(&f);
		if (!o)
			goto oom;
		json_object_set_new(o, "tenant", json_string(name));
		json_object_set_new(o, "tenant_id", json_integer(tid));
		q = quota_json(egr_reg_bpf(r), EGR_QUOTA_TENANT, tid);
		if (q)
			json_object_set_new(o, "quota", q);
		json_array_append_new(tenants, o);
	}
	for (const struct egr_sb *sb; (sb = egr_reg_next(r, &it));) {
		if (tenant && (!sb->tenant || strcmp(tenant, sb->tenant)))
			continue;
		egr_metrics_sandbox(m, sb->id, sb->tenant_id, &f);
		o = fig_json(&f);
		if (!o)
			goto oom;
		json_object_set_new(o, "id", json_integer(sb->id));
		json_object_set_new(o, "tenant", sb->tenant ? json_string(sb->tenant) : json_null());
		json_object_set_new(o, "execution_id",
				    sb->execution_id ? json_string(sb->execution_id) : json_null());
		json_object_set_new(o, "cgroup", json_string(sb->cgroup));
		q = quota_json(egr_reg_bpf(r), EGR_QUOTA_SANDBOX, sb->id);
		if (q)
			json_object_set_new(o, "quota", q);
		json_array_append_new(sbs, o);
	}
	return json_pack("{s:o, s:o}", "tenants", tenants, "sandboxes", sbs);
oom:
	json_decref(tenants);
	json_decref(sbs);
	return NULL;
}

/* --- the exposition ---------------------------------------------------------------- */

static int cmp_sb_id(const void *a, const void *b)
{
	const struct egr_sb *x = *(const struct egr_sb *const *)a, *y = *(const struct egr_sb *const *)b;

	return x->id < y->id ? -1 : x->id > y->id;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* No execution_id label: one per execution would grow the series without
 * bound; the audit log and `egressctl stats` carry it. */
struct series {
	const char *tenant;
	const char *ns; /* the container's Kubernetes namespace; NULL: none (never the pod) */
	char sandbox[16];
	struct egr_figures f;
};

static void emit_rows(struct egr_mbuf *b, const char *prefix, const struct series *rows,
		      size_t n, bool sandbox_labels)
{
	const char *last_family = NULL;
	char name[128];

	for (size_t i = 0; i < NFIELDS; i++) {
		snprintf(name, sizeof(name), "%s%s", prefix, fields[i].family);
		if (!last_family || strcmp(last_family, fields[i].family)) {
			egr_mbuf_family(b, name, "counter", fields[i].help ? fields[i].help : "");
			last_family = fields[i].family;
		}
		for (size_t k = 0; k < n; k++) {
			egr_mbuf_printf(b, "%s{tenant=\"", name);
			egr_mbuf_label(b, rows[k].tenant);
			if (sandbox_labels) {
				egr_mbuf_printf(b, "\",sandbox=\"");
				egr_mbuf_label(b, rows[k].sandbox);
				if (rows[k].ns) {
					egr_mbuf_printf(b, "\",namespace=\"");
					egr_mbuf_label(b, rows[k].ns);
				}
			}
			egr_mbuf_printf(b, "\"");
			if (fields[i].verdict)
				egr_mbuf_printf(b, ",verdict=\"%s\"", fields[i].verdict);
			if (fields[i].reason)
				egr_mbuf_printf(b, ",reason=\"%s\"", fields[i].reason);
			egr_mbuf_printf(b, "} %llu\n", (unsigned long long)fig_val(&rows[k].f, i));
		}
	}
}

/* Per-sandbox series, the first max_sandboxes by id on their own and the
 * rest summed per tenant under sandbox="_other". */
static void emit_sandboxes(struct egr_metrics *m, struct egr_mbuf *b)
{
	struct egr_registry *r = m->reg;
	struct egr_sb **sorted = NULL;
	struct series *rows = NULL;
	uint32_t *folded = NULL;
	size_t nrows = 0, nfolded = 0, n = egr_reg_count(r);

	if (n) {
		struct egr_reg_iter it = { 0 };
		size_t k = 0;

		sorted = malloc(n * sizeof(*sorted));
		rows = calloc(n + egr_reg_tenant_count(r) + 1, sizeof(*rows));
		folded = malloc(n * sizeof(*folded));
		if (!sorted || !rows || !folded) {
			b->oom = true;
			goto out;
		}
		for (struct egr_sb *sb; k < n && (sb = egr_reg_next(r, &it));)
			sorted[k++] = sb;
		qsort(sorted, n, sizeof(*sorted), cmp_sb_id);
	}
	for (size_t i = 0; i < n; i++) {
		const struct egr_sb *sb = sorted[i];
		struct egr_figures f;
		size_t k;

		egr_metrics_sandbox(m, sb->id, sb->tenant_id, &f);
		if (i < m->max_sandboxes) {
			rows[nrows].tenant = sb->tenant;
			rows[nrows].ns =
			    json_string_value(json_object_get(sb->container, "namespace"));
			snprintf(rows[nrows].sandbox, sizeof(rows[nrows].sandbox), "%u", sb->id);
			rows[nrows++].f = f;
			continue;
		}
		folded[nfolded++] = sb->id;
		for (k = 0; k < nrows; k++)
			if (!strcmp(rows[k].sandbox, "_other") && !strcmp(rows[k].tenant, sb->tenant))
				break;
		if (k == nrows) {
			rows[k].tenant = sb->tenant;
			strcpy(rows[k].sandbox, "_other");
			nrows++;
		}
		fig_add(&rows[k].f, &f);
	}
	emit_rows(b, "egressd_sandbox_", rows, nrows, true);

	/* Count each sandbox once when it starts being folded. */
	for (size_t i = 0; i < nfolded; i++)
		if (!m->folded || !bsearch(&folded[i], m->folded, m->nfolded, sizeof(uint32_t), cmp_u32))
			m->folded_total++;
	if (nfolded)
		qsort(folded, nfolded, sizeof(*folded), cmp_u32);
	free(m->folded);
	m->folded = folded;
	m->nfolded = nfolded;
	folded = NULL;
	egr_mbuf_family(b, "egressd_metrics_series_folded_total", "counter",
			"Sandboxes whose series were folded into sandbox=\"_other\" "
			"(--metrics-max-sandboxes), counted when they start being folded.");
	egr_mbuf_printf(b, "egressd_metrics_series_folded_total %llu\n",
			(unsigned long long)m->folded_total);
	egr_mbuf_family(b, "egressd_metrics_sandboxes_folded", "gauge",
			"Sandboxes currently folded into sandbox=\"_other\".");
	egr_mbuf_printf(b, "egressd_metrics_sandboxes_folded %zu\n", m->nfolded);
out:
	free(sorted);
	free(rows);
	free(folded);
}

static void emit_tenants(struct egr_metrics *m, struct egr_mbuf *b)
{
	struct egr_registry *r = m->reg;
	struct series *rows = calloc(egr_reg_tenant_count(r) + 1, sizeof(*rows));
	size_t n = 0;

	if (!rows) {
		b->oom = true;
		return;
	}
	for (uint32_t tid = 1; tid <= egr_reg_tenant_count(r); tid++) {
		rows[n].tenant = tenant_name(r, tid);
		egr_metrics_tenant(m, tid, &rows[n].f);
		n++;
	}
	emit_rows(b, "egressd_", rows, n, false);
	free(rows);
}

static void emit_health(struct egr_metrics *m, struct egr_mbuf *b)
{
	struct egr_registry *r = m->reg;
	struct egr_bpf *bpf = egr_reg_bpf(r);
	uint64_t cnt[EGR_CNT_MAX], e, c, rules4 = 0, rules6 = 0;
	bool have_cnt = egr_bpf_counters(bpf, cnt) == 0;
	struct egr_reg_iter it = { 0 };

	egr_mbuf_family(b, "egressd_info", "gauge", "egressd's version.");
	egr_mbuf_printf(b, "egressd_info{version=\"");
	egr_mbuf_label(b, EGRESSD_VERSION);
	egr_mbuf_printf(b, "\"} 1\n");
	egr_mbuf_family(b, "egressd_sandboxes", "gauge", "Sandboxes egressd manages.");
	egr_mbuf_printf(b, "egressd_sandboxes %zu\n", egr_reg_count(r));
	egr_mbuf_family(b, "egressd_tenants", "gauge", "Tenants egressd has seen.");
	egr_mbuf_printf(b, "egressd_tenants %zu\n", egr_reg_tenant_count(r));
	egr_mbuf_family(b, "egressd_events_lost_total", "counter",
			"Events the kernel could not put in the ring buffer.");
	egr_mbuf_printf(b, "egressd_events_lost_total %llu\n",
			have_cnt ? (unsigned long long)cnt[EGR_CNT_EVENTS_LOST] : 0ULL);
	if (have_cnt)
		egr_kcounters_emit(b, cnt);
	else
		m->read_failures++;

	egr_mbuf_family(b, "egressd_map_entries", "gauge",
			"Entries in a BPF map (egr_allow4/6: the rules of the compiled "
			"policies, without DNS-learned addresses).");
	for (const struct egr_sb *sb; (sb = egr_reg_next(r, &it));) {
		rules4 += sb->n4;
		rules6 += sb->n6;
	}
	{
		uint64_t caps[EGR_KMAP_REPORTED];

		for (size_t i = 0; i < EGR_KMAP_REPORTED; i++) {
			egr_bpf_kmap_usage(bpf, (enum egr_kmap_id)i, &e, &c);
			caps[i] = c;
			egr_mbuf_printf(b, "egressd_map_entries{map=\"%s\"} %llu\n", egr_kmap_names[i],
					(unsigned long long)e);
		}
		egr_mbuf_printf(b, "egressd_map_entries{map=\"egr_allow4\"} %llu\n",
				(unsigned long long)rules4);
		egr_mbuf_printf(b, "egressd_map_entries{map=\"egr_allow6\"} %llu\n",
				(unsigned long long)rules6);
		egr_mbuf_family(b, "egressd_map_capacity", "gauge", "max_entries of a BPF map.");
		for (size_t i = 0; i < EGR_KMAP_REPORTED; i++)
			egr_mbuf_printf(b, "egressd_map_capacity{map=\"%s\"} %llu\n", egr_kmap_names[i],
					(unsigned long long)caps[i]);
		egr_mbuf_printf(b, "egressd_map_capacity{map=\"egr_allow4\"} %llu\n",
				(unsigned long long)egr_bpf_rules_capacity(bpf, AF_INET));
		egr_mbuf_printf(b, "egressd_map_capacity{map=\"egr_allow6\"} %llu\n",
				(unsigned long long)egr_bpf_rules_capacity(bpf, AF_INET6));
	}

	/* The DNS proxy's latency, fed through egr_metrics_observe_dns_latency(). */
	egr_mbuf_family(b, "egressd_dns_proxy_latency_seconds", "histogram",
			"Time from a DNS query reaching the proxy to its answer leaving it.");
	for (size_t i = 0; i < NBUCKETS; i++)
		egr_mbuf_printf(b, "egressd_dns_proxy_latency_seconds_bucket{le=\"%g\"} %llu\n",
				dns_buckets[i], (unsigned long long)m->lat_buckets[i]);
	egr_mbuf_printf(b, "egressd_dns_proxy_latency_seconds_bucket{le=\"+Inf\"} %llu\n",
			(unsigned long long)m->lat_count);
	egr_mbuf_printf(b, "egressd_dns_proxy_latency_seconds_sum %.9f\n", m->lat_sum);
	egr_mbuf_printf(b, "egressd_dns_proxy_latency_seconds_count %llu\n",
			(unsigned long long)m->lat_count);

	egr_mbuf_family(b, "egressd_metrics_scrapes_total", "counter", "/metrics requests served.");
	egr_mbuf_printf(b, "egressd_metrics_scrapes_total %llu\n", (unsigned long long)m->scrapes);
	m->read_failures += (uint64_t)egr_procmetrics_emit(b);
	/* Failures show on the next scrape that succeeds (a failed one is a 500). */
	egr_mbuf_family(b, "egressd_metrics_scrape_failures_total", "counter",
			"/metrics requests answered 500: the exposition could not be built.");
	egr_mbuf_printf(b, "egressd_metrics_scrape_failures_total %llu\n",
			(unsigned long long)m->scrape_errors);
	egr_mbuf_family(b, "egressd_metrics_read_failures_total", "counter",
			"Figures left out of a scrape because they could not be read (BPF "
			"counters, /proc).");
	egr_mbuf_printf(b, "egressd_metrics_read_failures_total %llu\n",
			(unsigned long long)m->read_failures);
}

/* Forget the DNS counts of sandboxes that are gone. */
static void prune_dns(struct egr_metrics *m)
{
	for (size_t i = 0; i < SB_BUCKETS; i++) {
		struct dns_count **pd = &m->dns_sb[i];

		while (*pd) {
			struct dns_count *d = *pd;

			if (!egr_reg_find(m->reg, NULL, d->sandbox_id)) {
				*pd = d->next;
				free(d);
			} else {
				pd = &d->next;
			}
		}
	}
}

char *egr_metrics_render(struct egr_metrics *m, size_t *len)
{
	struct egr_mbuf b = { 0 };

	prune_dns(m);
	emit_tenants(m, &b);
	emit_sandboxes(m, &b);
	emit_health(m, &b);
	for (size_t i = 0; i < m->nsources; i++)
		m->sources[i].fn(m->sources[i].ctx, &b);
	if (b.oom || !b.p) {
		free(b.p);
		return NULL;
	}
	*len = b.len;
	return b.p;
}

/* --- HTTP ------------------------------------------------------------------------------ */

static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned int status,
				  const char *text, const char *allow)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(
		strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
	enum MHD_Result ret;

	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
	if (allow)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
	ret = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **req_cls)
{
	struct egr_metrics *m = cls;
	struct MHD_Response *resp;
	enum MHD_Result ret;
	size_t len = 0;
	char *text;

	/* First call: headers only. Any request body is discarded. */
	if (!*req_cls) {
		*req_cls = m;
		return MHD_YES;
	}
	if (*upload_data_size) {
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0)
		return reply_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET\n", "GET");
	/* A liveness probe without an exec into egressd's container: MHD runs
	 * in egressd's event loop (on_mhd), so an answer means the loop runs. */
	if (!strcmp(url, "/livez"))
		return reply_text(conn, MHD_HTTP_OK, "ok\n", NULL);
	if (strcmp(url, "/metrics") != 0)
		return reply_text(conn, MHD_HTTP_NOT_FOUND, "not found; try /metrics\n", NULL);
	m->scrapes++;
	text = egr_metrics_render(m, &len);
	if (!text) {
		m->scrape_errors++;
		return reply_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n", NULL);
	}
	resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; version=0.0.4; charset=utf-8");
	ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return ret;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char buf[512];
	size_t n;

	vsnprintf(buf, sizeof(buf), fmt, ap);
	n = strlen(buf);
	if (n && buf[n - 1] == '\n')
		buf[n - 1] = '\0';
	log_warn("metrics: %s", buf);
}

static void on_mhd(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_metrics *m = ctx;

	if (m->mhd)
		MHD_run(m->mhd);
}

/* "127.0.0.1:9477", "[::1]:9477", "0.0.0.0:9477". */
static int parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *sslen)
{
	char host[128], *port;
	struct addrinfo hints = { .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
				  .ai_socktype = SOCK_STREAM },
			*ai;

	if (snprintf(host, sizeof(host), "%s", addr) >= (int)sizeof(host))
		return -EINVAL;
	port = strrchr(host, ':');
	if (!port || port == host || !port[1])
		return -EINVAL;
	*port++ = '\0';
	if (host[0] == '[') {
		size_t l = strlen(host);

		if (host[l - 1] != ']')
			return -EINVAL;
		host[l - 1] = '\0';
		memmove(host, host + 1, l - 1);
	} else if (strchr(host, ':')) {
		return -EINVAL; /* IPv6 needs brackets */
	}
	if (getaddrinfo(host, port, &hints, &ai) != 0)
		return -EINVAL;
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*sslen = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

int egr_metrics_check_addr(const char *addr)
{
	struct sockaddr_storage ss;
	socklen_t sslen;

	if (!addr)
		return -EINVAL;
	if (!strcmp(addr, "off"))
		return 0;
	return parse_addr(addr, &ss, &sslen) ? -EINVAL : 0;
}

bool egr_metrics_serving(const struct egr_metrics *m)
{
	return m && m->mhd;
}

void egr_metrics_set_max_sandboxes(struct egr_metrics *m, unsigned max_sandboxes)
{
	m->max_sandboxes = max_sandboxes;
}

/* A non-blocking listening TCP socket on ss (SO_REUSEADDR, as MHD would set).
 * The fd, or the -errno of the call that failed (-EADDRINUSE: port taken). */
static int listen_socket(const struct sockaddr_storage *ss, socklen_t sslen)
{
	int one = 1, fd, err;

	fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    (ss->ss_family == AF_INET6 &&
	     setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0) ||
	    bind(fd, (const struct sockaddr *)ss, sslen) < 0 || listen(fd, 64) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

int egr_metrics_listen(struct egr_metrics *m, const char *addr, struct egr_loop *loop)
{
	struct sockaddr_storage ss;
	socklen_t sslen;
	const union MHD_DaemonInfo *info;
	unsigned int flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
	int err, lfd;

	if (!addr || !strcmp(addr, "off"))
		return 0;
	if (parse_addr(addr, &ss, &sslen))
		return -EINVAL;
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* Our own listening socket: MHD_start_daemon() only says "failed", and
	 * the caller reported every bind error as EADDRNOTAVAIL (a port in use
	 * read "Cannot assign requested address"). No SO_REUSEPORT either: a
	 * second egressd must not share the port silently. */
	lfd = listen_socket(&ss, sslen);
	if (lfd < 0)
		return lfd;
	m->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, m, MHD_OPTION_EXTERNAL_LOGGER,
				  mhd_log, NULL, MHD_OPTION_LISTEN_SOCKET, lfd,
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned int)CONN_LIMIT,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)CONN_TIMEOUT_S,
				  MHD_OPTION_END);
	if (!m->mhd) {
		if (fcntl(lfd, F_GETFD) >= 0) /* MHD may or may not have closed it */
			close(lfd);
		return -ENOTSUP;
	}
	info = MHD_get_daemon_info(m->mhd, MHD_DAEMON_INFO_EPOLL_FD);
	if (!info || info->epoll_fd < 0) {
		MHD_stop_daemon(m->mhd);
		m->mhd = NULL;
		return -ENOTSUP;
	}
	m->mhd_fd = info->epoll_fd;
	err = egr_loop_add(loop, m->mhd_fd, EPOLLIN, on_mhd, m);
	if (!err)
		err = egr_loop_every(loop, TICK_MS, on_mhd, m);
	if (err) {
		egr_loop_del(loop, m->mhd_fd);
		MHD_stop_daemon(m->mhd);
		m->mhd = NULL;
		return err;
	}
	m->loop = loop;
	log_info("metrics: serving http://%s/metrics", addr);
	return 0;
}

int egr_metrics_add_source(struct egr_metrics *m, egr_metrics_source_fn fn, void *ctx)
{
	struct source *s = realloc(m->sources, (m->nsources + 1) * sizeof(*s));

	if (!s)
		return -ENOMEM;
	m->sources = s;
	s[m->nsources].fn = fn;
	s[m->nsources++].ctx = ctx;
	return 0;
}

/* DNS verdicts from the bus: counts for /metrics, stats and billing, and
 * the proxy's latency. Refusals are counted with everything the proxy did
 * not forward; a REBIND or AUDIT verdict accompanies the ALLOWED or
 * SERVFAIL one of the same answer, which counts it. */
static void on_rec(void *ctx, const struct egr_rec *r)
{
	struct egr_metrics *m = ctx;
	const struct egr_dns_event *d = r->dns;
	const struct egr_sb *sb = egr_reg_find(m->reg, NULL, d->sandbox_id);

	if (!sb || d->verdict == EGR_DNS_V_REBIND || d->verdict == EGR_DNS_V_AUDIT)
		return;
	egr_metrics_count_dns(m, d->sandbox_id, sb->tenant_id, d->verdict == EGR_DNS_V_ALLOWED);
	if (d->latency_ns)
		egr_metrics_observe_dns_latency(m, (double)d->latency_ns / 1e9);
}

int egr_metrics_new(struct egr_metrics **out, struct egr_registry *reg, struct egr_bus *bus,
		    unsigned max_sandboxes)
{
	struct egr_metrics *m = calloc(1, sizeof(*m));
	int err;

	if (!m)
		return -ENOMEM;
	m->reg = reg;
	m->max_sandboxes = max_sandboxes;
	m->mhd_fd = -1;
	err = egr_bus_subscribe(bus, EGR_REC_BIT(EGR_REC_DNS), on_rec, m);
	if (err) {
		free(m);
		return err;
	}
	*out = m;
	return 0;
}

void egr_metrics_free(struct egr_metrics *m)
{
	if (!m)
		return;
	if (m->mhd) {
		if (m->loop)
			egr_loop_del(m->loop, m->mhd_fd);
		MHD_stop_daemon(m->mhd);
	}
	for (size_t i = 0; i < SB_BUCKETS; i++) {
		struct dns_count *d = m->dns_sb[i], *n;

		for (; d; d = n) {
			n = d->next;
			free(d);
		}
	}
	free(m->dns_tenant);
	free(m->folded);
	free(m->sources);
	free(m);
}
