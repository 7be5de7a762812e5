// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The profile `egressctl seccomp-profile` prints, with or without --base. */
#include <stdio.h>

#include "ctl.h"
#include "seccomp_profile.h"

int ctl_seccomp_profile(const struct egr_confine *conf, const char *base_path, json_t **out)
{
	char why[256] = "";
	json_error_t jerr;
	json_t *base;
	int err;

	if (!base_path) {
		if (egr_confine_oci_profile(conf, out) == 0)
			return CTL_EXIT_OK;
		fprintf(stderr, "egressctl: out of memory\n");
		return CTL_EXIT_ERROR;
	}
	base = json_load_file(base_path, JSON_REJECT_DUPLICATES, &jerr);
	if (!base) {
		fprintf(stderr, "egressctl: --base %s: %s (line %d)\n", base_path, jerr.text,
			jerr.line);
		return CTL_EXIT_USAGE;
	}
	err = egr_seccomp_profile_merge(conf, base, out, why, sizeof(why));
	json_decref(base);
	if (err) {
		fprintf(stderr, "egressctl: --base %s: %s\n", base_path, why);
		return CTL_EXIT_USAGE;
	}
	return CTL_EXIT_OK;
}
