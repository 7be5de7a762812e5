// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target: policy JSON -> egr_policy_parse -> egr_policy_compile.
 * Checks the all-or-nothing contract on the way: a failed parse leaves the
 * output zeroed, a successful one is internally consistent, and compiling
 * it twice gives the same entries.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compile.h"
#include "policy.h"

static void check(int cond)
{
	if (!cond)
		abort();
}

static void check_zero(const void *p, size_t n)
{
	const unsigned char *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		check(b[i] == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct egr_policy p;
	struct egr_compiled c, c2;
	struct egr_error e;
	size_t i;
	int ret;

	ret = egr_policy_parse((const char *)data, size, &p, &e);
	check(memchr(e.field, 0, sizeof(e.field)) && memchr(e.message, 0, sizeof(e.message)));
	if (ret) {
		check(ret == -EINVAL || ret == -ENOMEM);
		check(ret != -EINVAL || e.message[0]);
		check_zero(&p, sizeof(p));
		return 0;
	}
	check(p.tenant && strlen(p.sha256) == 64);
	for (i = 0; i < p.nallow; i++) {
		const struct egr_allow *a = &p.allow[i];

		check(a->port_lo <= a->port_hi);
		check(a->protos && !(a->protos & ~EGR_PROTO_ANY));
		check(a->kind == EGR_HOST_NAME ? a->name != NULL : a->name == NULL);
		check(a->kind != EGR_HOST_V4 || a->prefixlen <= 32);
		check(a->kind != EGR_HOST_V6 || a->prefixlen <= 128);
	}
	for (i = 0; i < p.nrebind; i++) {
		const struct egr_cidr *r = &p.rebind_allow[i];

		check(r->kind == EGR_HOST_V4 || r->kind == EGR_HOST_V6);
		check(r->prefixlen <= (r->kind == EGR_HOST_V4 ? 32 : 128));
	}
	check(!p.nrebind == !p.rebind_allow);
	ret = egr_policy_compile(&p, &c, &e);
	if (ret == 0) {
		check(egr_policy_compile(&p, &c2, &e) == 0);
		check(c.n4 == c2.n4 && c.n6 == c2.n6);
		check(!c.n4 || !memcmp(c.v4, c2.v4, c.n4 * sizeof(*c.v4)));
		check(!c.n6 || !memcmp(c.v6, c2.v6, c.n6 * sizeof(*c.v6)));
		for (i = 0; i < c.n4; i++)
			check(c.v4[i].rule.nranges >= 1 &&
			      c.v4[i].rule.nranges <= EGR_MAX_PORT_RANGES);
		for (i = 0; i < c.n6; i++)
			check(c.v6[i].rule.nranges >= 1 &&
			      c.v6[i].rule.nranges <= EGR_MAX_PORT_RANGES);
		egr_compiled_free(&c2);
	} else {
		check(ret == -EINVAL || ret == -ENOMEM);
		check(c.v4 == NULL && c.v6 == NULL && c.n4 == 0 && c.n6 == 0);
	}
	egr_compiled_free(&c);
	egr_policy_free(&p);
	return 0;
}
