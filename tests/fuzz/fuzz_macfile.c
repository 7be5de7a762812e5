// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target for the ledger files' parser (user/lib/macfile.c) and the
 * audit anchor lines (user/lib/audit_anchor.c). Checked promises: the
 * parser answers 0 with an object (no "mac" in it) or -EBADMSG; an anchor
 * has a 64-hex hash.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "audit_anchor.h"
#include "macfile.h"

static const uint8_t key[] = "fuzz-key-fuzz-key-fuzz-key-fuzz!";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct egr_audit_anchor_rec r;
	const char *why;
	json_t *o = NULL;
	char *copy = malloc(size ? size : 1);
	int v;

	if (!copy)
		return 0;
	memcpy(copy, data, size);
	v = egr_macfile_parse(copy, size, key, 32, &o, &why);
	if (v == 0 && (!json_is_object(o) || json_object_get(o, "mac")))
		abort();
	if (v != 0 && (v != -EBADMSG || o || !why))
		abort();
	json_decref(o);
	if (egr_audit_anchor_parse(copy, size, &r) == 1 && strlen(r.hash) != 64)
		abort();
	free(copy);
	return 0;
}
