// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* `egressctl stats`: the metering figures of tenants and sandboxes
 * (docs/metering.md), the same numbers egressd's /metrics shows. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

static const char stats_help[] =
	"Usage: egressctl stats [--tenant T] [--json]\n"
	"Show the metering figures per tenant and per sandbox: bytes and packets out\n"
	"and in (IP packets: IP header + transport header + payload), connections and\n"
	"datagrams allowed and denied, DNS queries, drops, and quotas. Tenant figures\n"
	"include sandboxes that are gone; sandbox figures last as long as the sandbox.\n"
	"  --tenant T   only tenant T and its sandboxes\n"
	"  --json       the answer as JSON\n";

enum { O_SOCKET = 256, O_TIMEOUT, O_HELP, O_TENANT, O_JSON };

/* Columns: heading, JSON key (NULL: computed). */
static const struct {
	const char *head, *key;
} cols[] = {
	{ "BYTES_OUT", "bytes_out" },	      { "PKTS_OUT", "packets_out" },
	{ "BYTES_IN", "bytes_in" },	      { "PKTS_IN", "packets_in" },
	{ "CONN_OK", "connections_allowed" }, { "CONN_DENY", "connections_denied" },
	{ "DGRAM_OK", "datagrams_allowed" },  { "DGRAM_DENY", "datagrams_denied" },
	{ "SOCK_DENY", "sockets_denied" },    { "DNS_OK", "dns_queries_allowed" },
	{ "DNS_REFUSED", "dns_queries_refused" }, { "QUOTA_DROP", "quota_drops" },
	{ "BACKSTOP_DROP", "backstop_drops" }, { "INBOUND_DROP", "inbound_drops" },
};
#define NCOLS (sizeof(cols) / sizeof(cols[0]))

static const char *s_or_dash(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s && *s ? s : "-";
}

static void quota_cell(const json_t *o, char *buf, size_t len)
{
	const json_t *q = json_object_get(o, "quota");

	if (!json_is_object(q)) {
		snprintf(buf, len, "-");
		return;
	}
	snprintf(buf, len, "%lld/%lld per %llds",
		 (long long)json_integer_value(json_object_get(q, "window_bytes")),
		 (long long)json_integer_value(json_object_get(q, "limit_bytes")),
		 (long long)json_integer_value(json_object_get(q, "window_seconds")));
}

/* lead: the identifying columns' headings; ident(row, i) their cells. */
static void table(const json_t *rows, int nlead, const char *const *lead,
		  const char *(*ident)(const json_t *row, int i, char *buf, size_t len))
{
	size_t n = json_array_size(rows), ncell = (size_t)nlead + NCOLS + 1;
	size_t *w = calloc(ncell, sizeof(*w));
	char (*cells)[64] = calloc(n * ncell + 1, sizeof(*cells));

	if (!w || !cells) {
		fprintf(stderr, "egressctl: out of memory\n");
		goto out;
	}
	for (int i = 0; i < nlead; i++)
		w[i] = strlen(lead[i]);
	for (size_t c = 0; c < NCOLS; c++)
		w[nlead + c] = strlen(cols[c].head);
	w[ncell - 1] = strlen("QUOTA");
	for (size_t r = 0; r < n; r++) {
		const json_t *row = json_array_get(rows, r);
		char (*cell)[64] = &cells[r * ncell];

		for (int i = 0; i < nlead; i++) {
			/* ident may write into its buffer: never the cell it is copied
			 * to (snprintf from a buffer into itself left SANDBOX blank). */
			char tmp[64];

			snprintf(cell[i], 64, "%s", ident(row, i, tmp, sizeof(tmp)));
		}
		for (size_t c = 0; c < NCOLS; c++)
			snprintf(cell[nlead + c], 64, "%lld",
				 (long long)json_integer_value(json_object_get(row, cols[c].key)));
		quota_cell(row, cell[ncell - 1], 64);
		for (size_t i = 0; i < ncell; i++)
			if (strlen(cell[i]) > w[i])
				w[i] = strlen(cell[i]);
	}
	for (int i = 0; i < nlead; i++)
		printf("%-*s  ", (int)w[i], lead[i]);
	for (size_t c = 0; c < NCOLS; c++)
		printf("%*s  ", (int)w[nlead + c], cols[c].head);
	printf("QUOTA\n");
	for (size_t r = 0; r < n; r++) {
		char (*cell)[64] = &cells[r * ncell];

		for (int i = 0; i < nlead; i++)
			printf("%-*s  ", (int)w[i], cell[i]);
		for (size_t c = 0; c < NCOLS; c++)
			printf("%*s  ", (int)w[nlead + c], cell[nlead + c]);
		printf("%s\n", cell[ncell - 1]);
	}
out:
	free(w);
	free(cells);
}

static const char *tenant_ident(const json_t *row, int i, char *buf, size_t len)
{
	return s_or_dash(row, "tenant");
}

static const char *sandbox_ident(const json_t *row, int i, char *buf, size_t len)
{
	if (i == 0) {
		snprintf(buf, len, "%lld", (long long)json_integer_value(json_object_get(row, "id")));
		return buf;
	}
	return s_or_dash(row, i == 1 ? "tenant" : "execution_id");
}

static void print_stats(const json_t *resp)
{
	static const char *const tlead[] = { "TENANT" };
	static const char *const slead[] = { "SANDBOX", "TENANT", "EXECUTION" };
	const json_t *t = json_object_get(resp, "tenants"), *s = json_object_get(resp, "sandboxes");

	if (json_array_size(t) == 0) {
		printf("no tenants\n");
	} else {
		table(t, 1, tlead, tenant_ident);
	}
	putchar('\n');
	if (json_array_size(s) == 0)
		printf("no sandboxes\n");
	else
		table(s, 3, slead, sandbox_ident);
}

int ctl_cmd_stats(struct ctl *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, O_SOCKET },
		{ "timeout", required_argument, NULL, O_TIMEOUT },
		{ "help", no_argument, NULL, O_HELP },
		{ "tenant", required_argument, NULL, O_TENANT },
		{ "json", no_argument, NULL, O_JSON },
		{ NULL, 0, NULL, 0 },
	};
	const char *tenant = NULL;
	bool json = false;
	json_t *req, *resp;
	int opt, rc;

	optind = 0;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		char *end;
		unsigned long v;

		switch (opt) {
		case O_SOCKET:
			c->socket = optarg;
			break;
		case O_TIMEOUT:
			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || optarg[0] == '-' || v > 86400)
				return ctl_usage_error("stats", "--timeout: expected seconds "
						       "(0-86400), got '%s'", optarg);
			c->timeout = (unsigned int)v;
			break;
		case O_HELP:
			fputs(stats_help, stdout);
			return 0;
		case O_TENANT:
			tenant = optarg;
			break;
		case O_JSON:
			json = true;
			break;
		default:
			fprintf(stderr, "Try 'egressctl stats --help'.\n");
			return CTL_EXIT_USAGE;
		}
	}
	if (optind < argc)
		return ctl_usage_error("stats", "stats: unexpected argument '%s'", argv[optind]);
	req = egr_proto_request(EGR_OP_STATS);
	if (req && tenant)
		json_object_set_new(req, "tenant", json_string(tenant));
	if (!req) {
		fprintf(stderr, "egressctl: out of memory\n");
		return CTL_EXIT_ERROR;
	}
	rc = ctl_request(c, req, &resp, NULL, 0);
	json_decref(req);
	if (rc)
		return rc;
	json_object_del(resp, "ok");
	if (json)
		ctl_print_json(resp);
	else
		print_stats(resp);
	json_decref(resp);
	return CTL_EXIT_OK;
}
