// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* egressctl's output: JSON as is, or tables and key/value lines for people. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

void ctl_print_json(const json_t *v)
{
	json_dumpf(v, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
	fputc('\n', stdout);
}

/* A string field, or "-" when it is absent or null. */
static const char *str(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s && *s ? s : "-";
}

static long long num(const json_t *o, const char *key)
{
	return (long long)json_integer_value(json_object_get(o, key));
}

void ctl_print_status(const json_t *resp)
{
	const json_t *feat = json_object_get(resp, "features");
	const json_t *cnt = json_object_get(resp, "counters");
	const char *key;
	json_t *v;
	size_t w = 0, i;
	int missing = 0;

	printf("egressd %s, pid %lld\n", str(resp, "version"), num(resp, "pid"));
	printf("  bpffs dir:  %s\n", str(resp, "bpffs_dir"));
	printf("  state dir:  %s\n", str(resp, "state_dir"));
	printf("  sandboxes:  %lld\n", num(resp, "sandboxes"));
	if (json_is_object(json_object_get(resp, "held")))
		printf("  held:       %lld detached, %lld tampered (deny-all until released)\n",
		       num(json_object_get(resp, "held"), "detached"),
		       num(json_object_get(resp, "held"), "tampered"));
	printf("  healthy:    %s\n", json_is_true(json_object_get(resp, "healthy")) ? "yes" : "no");
	json_array_foreach(json_object_get(resp, "problems"), i, v)
		printf("    problem:  %s\n", json_string_value(v) ? json_string_value(v) : "?");
	printf("  features:  ");
	json_object_foreach((json_t *)feat, key, v) {
		if (json_is_true(v))
			printf(" %s", key);
		else
			missing++;
	}
	putchar('\n');
	if (missing) {
		printf("  missing:   ");
		json_object_foreach((json_t *)feat, key, v)
			if (!json_is_true(v))
				printf(" %s", key);
		putchar('\n');
	}
	if (json_is_object(json_object_get(resp, "breaker"))) {
		const json_t *b = json_object_get(resp, "breaker");
		const json_t *d = json_object_get(b, "default");

		printf("  breaker:    %lld quarantined now, %lld trip(s); default ",
		       num(b, "quarantined"), num(b, "trips"));
		if (json_is_object(d))
			printf("%lld denies / %lld s\n", num(d, "max_denies"), num(d, "window_s"));
		else
			printf("none\n");
	}
	if (!json_is_object(cnt) || json_object_size(cnt) == 0) {
		printf("  counters:   unavailable\n");
		return;
	}
	printf("  counters:\n");
	json_object_foreach((json_t *)cnt, key, v)
		if (strlen(key) > w)
			w = strlen(key);
	json_object_foreach((json_t *)cnt, key, v)
		printf("    %-*s %lld\n", (int)w, key, (long long)json_integer_value(v));
}

static void rules(const json_t *sb, char *buf, size_t len)
{
	const json_t *r = json_object_get(sb, "rules");

	snprintf(buf, len, "%lld/%lld/%lld", num(r, "v4"), num(r, "v6"), num(r, "names"));
}

void ctl_print_sandbox(const char *verb, const json_t *sb)
{
	char r[64];

	rules(sb, r, sizeof(r));
	printf("sandbox %lld %s\n", num(sb, "id"), verb);
	if (json_is_string(json_object_get(sb, "netdev"))) {
		printf("  netdev:        %s (ifindex %lld, %s)\n", str(sb, "netdev"),
		       num(sb, "ifindex"), str(sb, "attach_mode"));
		printf("  netns:         %s\n", json_is_string(json_object_get(sb, "netns"))
							? str(sb, "netns") : "egressd's");
	} else {
		printf("  cgroup:        %s\n", str(sb, "cgroup"));
	}
	printf("  tenant:        %s\n", str(sb, "tenant"));
	printf("  execution_id:  %s\n", str(sb, "execution_id"));
	printf("  principal:     %s\n", str(sb, "principal"));
	if (json_is_object(json_object_get(sb, "container"))) {
		const json_t *c = json_object_get(sb, "container");

		printf("  container:     %s", str(c, "id"));
		if (json_is_string(json_object_get(c, "namespace")))
			printf(" (namespace %s, pod %s uid %s, container %s, image %s, policy %s)",
			       str(c, "namespace"), str(c, "pod"), str(c, "pod_uid"), str(c, "name"),
			       str(c, "image"), str(c, "policy"));
		putchar('\n');
	}
	printf("  tool:          %s", str(sb, "tool"));
	if (json_is_string(json_object_get(sb, "version")))
		printf(" %s", str(sb, "version"));
	putchar('\n');
	printf("  policy sha256: %s\n", str(sb, "policy_sha256"));
	printf("  rules:         %s (v4/v6/names)\n", r);
	printf("  attached at:   %s\n", str(sb, "attached_at"));
	printf("  updated at:    %s\n", str(sb, "updated_at"));
	if (json_is_string(json_object_get(sb, "mode")))
		printf("  mode:          %s\n", str(sb, "mode"));
	if (json_is_true(json_object_get(sb, "quarantined")))
		printf("  QUARANTINED:   since %s (egressctl release --id %lld)\n",
		       json_is_string(json_object_get(sb, "quarantined_at"))
			       ? str(sb, "quarantined_at")
			       : "before egressd restarted",
		       num(sb, "id"));
}

enum {
	COL_ID,
	COL_KIND,
	COL_TENANT,
	COL_EXEC,
	COL_CGROUP,
	COL_CONTAINER,
	COL_POLICY,
	COL_RULES,
	COL_STATE,
	COL_ATTACHED,
	NCOLS
};

static const char *const heads[NCOLS] = {
	"ID", "KIND", "TENANT", "EXECUTION", "CGROUP", "CONTAINER", "POLICY", "RULES", "STATE", "ATTACHED",
};

/* One row's cells; long strings point into the JSON, short ones into bufs. */
struct row {
	const char *cell[NCOLS];
	char id[24], policy[13], rules[64], container[3 * 256 + 3];
};

/* namespace/pod/name of an OCI hook's container, its id otherwise, "-". */
static void container_cell(const json_t *sb, char *buf, size_t len)
{
	const json_t *c = json_object_get(sb, "container");
	const char *ns = json_string_value(json_object_get(c, "namespace"));
	const char *pod = json_string_value(json_object_get(c, "pod"));
	const char *name = json_string_value(json_object_get(c, "name"));
	const char *id = json_string_value(json_object_get(c, "id"));

	if (ns)
		snprintf(buf, len, "%s/%s/%s", ns, pod ?: "?", name ?: "?");
	else
		snprintf(buf, len, "%.12s", id ?: "-");
}

static void fill_row(const json_t *sb, struct row *r)
{
	snprintf(r->id, sizeof(r->id), "%lld", num(sb, "id"));
	snprintf(r->policy, sizeof(r->policy), "%s", str(sb, "policy_sha256"));
	rules(sb, r->rules, sizeof(r->rules));
	r->cell[COL_ID] = r->id;
	r->cell[COL_KIND] = str(sb, "kind");
	r->cell[COL_TENANT] = str(sb, "tenant");
	r->cell[COL_EXEC] = str(sb, "execution_id");
	r->cell[COL_CGROUP] = str(sb, "cgroup");
	container_cell(sb, r->container, sizeof(r->container));
	r->cell[COL_CONTAINER] = r->container;
	r->cell[COL_POLICY] = r->policy;
	r->cell[COL_RULES] = r->rules;
	/* enforce, audit, or quarantined (which trumps either). */
	r->cell[COL_STATE] = json_is_true(json_object_get(sb, "quarantined"))
				     ? "quarantined"
				     : (json_is_string(json_object_get(sb, "mode")) ? str(sb, "mode")
										   : "-");
	r->cell[COL_ATTACHED] = str(sb, "attached_at");
}

static void print_row(const char *const cell[NCOLS], const size_t w[NCOLS])
{
	for (int i = 0; i < NCOLS; i++) {
		if (i == NCOLS - 1)
			printf("%s\n", cell[i]);
		else if (i == COL_ID)
			printf("%*s  ", (int)w[i], cell[i]);
		else
			printf("%-*s  ", (int)w[i], cell[i]);
	}
}

void ctl_print_list(const json_t *sandboxes)
{
	size_t n = json_array_size(sandboxes), w[NCOLS];
	struct row *rows;

	if (n == 0) {
		printf("no sandboxes\n");
		return;
	}
	rows = calloc(n, sizeof(*rows));
	if (!rows) {
		fprintf(stderr, "egressctl: out of memory\n");
		return;
	}
	for (int i = 0; i < NCOLS; i++)
		w[i] = strlen(heads[i]);
	for (size_t j = 0; j < n; j++) {
		fill_row(json_array_get(sandboxes, j), &rows[j]);
		for (int i = 0; i < NCOLS; i++)
			if (strlen(rows[j].cell[i]) > w[i])
				w[i] = strlen(rows[j].cell[i]);
	}
	print_row(heads, w);
	for (size_t j = 0; j < n; j++)
		print_row(rows[j].cell, w);
	free(rows);
}
