// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target for the OCI hook's annotation reader and name rules
 * (user/lib/ocimeta.c): the input is a config.json "annotations" object.
 * Checked promises: a parse answers 0 or -EINVAL with a rule; a namespace it
 * returns is a DNS-1123 label; every value it returns is a clean string of
 * at most 255 bytes; a policy name the rule accepts has no '/' and does not
 * start with '.'; the container object it builds passes its own check.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ocimeta.h"

static void clean(const char *s)
{
	if (!s)
		return;
	if (strlen(s) > EGR_META_STR_MAX)
		abort();
	for (; *s; s++)
		if ((unsigned char)*s < 0x20)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *a = json_loadb((const char *)data, size, JSON_ALLOW_NUL, NULL);
	struct egr_oci_meta m;
	const char *rule = NULL, *key;
	int v;

	if (!a)
		return 0;
	v = egr_oci_meta_parse(a, &m, &rule);
	if (v && (v != -EINVAL || !rule))
		abort();
	if (!v) {
		json_t *c;

		if (m.namespace && !egr_k8s_namespace_ok(m.namespace))
			abort();
		clean(m.namespace);
		clean(m.pod);
		clean(m.pod_uid);
		clean(m.name);
		clean(m.image);
		clean(m.policy);
		clean(m.execution_id);
		if (m.policy && egr_policy_name_check(m.policy, &rule) == 0 &&
		    (strchr(m.policy, '/') || m.policy[0] == '.'))
			abort();
		c = egr_container_json("id", &m, m.policy);
		if (c && egr_container_check(c, &key, &rule))
			abort();
		json_decref(c);
	}
	json_decref(a);
	return 0;
}
