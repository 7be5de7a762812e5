/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The --config file (docs/operations.md): a JSON object whose keys are
 * egressd's long option names. It is turned into "--key=value" arguments
 * that go through the same parser as the command line, placed before the
 * command line's so that flags given there win.
 */
#ifndef EGR_CONFIG_H
#define EGR_CONFIG_H

#include <getopt.h>
#include <stddef.h>

struct egr_config_args {
	int argc;
	char **argv; /* argc "--key=value" strings (not NULL-terminated) */
};

/*
 * Read path. Keys must be long options of opts that are not in forbidden
 * (NULL-terminated); options without an argument take true (given) or
 * false (not given); options with one take a string or a number, and the
 * ones in repeatable (NULL-terminated) also an array of them. On error
 * -errno and err says which key and why; out is left empty.
 */
int egr_config_load(const char *path, const struct option *opts, const char *const *forbidden,
		    const char *const *repeatable, struct egr_config_args *out, char *err,
		    size_t errlen);
void egr_config_args_free(struct egr_config_args *a);

#endif /* EGR_CONFIG_H */
