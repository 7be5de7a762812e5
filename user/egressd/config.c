// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "config.h"

static bool in_list(const char *const *list, const char *s)
{
	for (; list && *list; list++)
		if (!strcmp(*list, s))
			return true;
	return false;
}

static const struct option *find_opt(const struct option *opts, const char *name)
{
	for (; opts->name; opts++)
		if (!strcmp(opts->name, name))
			return opts;
	return NULL;
}

static int push(struct egr_config_args *a, const char *key, const char *val)
{
	char **argv = realloc(a->argv, (size_t)(a->argc + 1) * sizeof(*argv));
	int n;

	if (!argv)
		return -ENOMEM;
	a->argv = argv;
	n = val ? asprintf(&argv[a->argc], "--%s=%s", key, val) : asprintf(&argv[a->argc], "--%s", key);
	if (n < 0)
		return -ENOMEM;
	a->argc++;
	return 0;
}

/* One scalar value as the command line would spell it. */
static int scalar(const json_t *v, char *buf, size_t len)
{
	if (json_is_string(v)) {
		/* (jansson refuses "\u0000" in strings unless JSON_ALLOW_NUL.) */
		if (json_string_length(v) >= len)
			return -EINVAL;
		snprintf(buf, len, "%s", json_string_value(v));
	} else if (json_is_integer(v)) {
		snprintf(buf, len, "%lld", (long long)json_integer_value(v));
	} else if (json_is_real(v)) {
		snprintf(buf, len, "%.17g", json_real_value(v));
	} else {
		return -EINVAL;
	}
	return 0;
}

int egr_config_load(const char *path, const struct option *opts, const char *const *forbidden,
		    const char *const *repeatable, struct egr_config_args *out, char *err,
		    size_t errlen)
{
	struct egr_config_args a = { 0 };
	json_error_t jerr;
	const char *key;
	json_t *root, *v;
	char buf[4096];
	int ret = 0;

	memset(out, 0, sizeof(*out));
	root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		if (jerr.line > 0)
			snprintf(err, errlen, "config %s: line %d: %s", path, jerr.line, jerr.text);
		else
			snprintf(err, errlen, "config %s: %s", path, jerr.text);
		return -EINVAL;
	}
	if (!json_is_object(root)) {
		snprintf(err, errlen, "config %s: expected a JSON object of option names", path);
		json_decref(root);
		return -EINVAL;
	}
	json_object_foreach(root, key, v) {
		const struct option *o = find_opt(opts, key);

		if (!o || in_list(forbidden, key)) {
			snprintf(err, errlen, "config %s: %s key \"%s\"", path,
				 o ? "command-line only" : "unknown", key);
			ret = -EINVAL;
			break;
		}
		if (o->has_arg == no_argument) {
			if (!json_is_boolean(v)) {
				snprintf(err, errlen, "config %s: key \"%s\": expected true or false",
					 path, key);
				ret = -EINVAL;
				break;
			}
			if (json_is_true(v))
				ret = push(&a, key, NULL);
		} else if (json_is_array(v) && in_list(repeatable, key)) {
			size_t i;
			json_t *e;

			json_array_foreach(v, i, e) {
				if (scalar(e, buf, sizeof(buf))) {
					snprintf(err, errlen, "config %s: key \"%s\"[%zu]: expected a "
							      "string or a number", path, key, i);
					ret = -EINVAL;
					break;
				}
				ret = push(&a, key, buf);
				if (ret)
					break;
			}
		} else if (scalar(v, buf, sizeof(buf))) {
			snprintf(err, errlen, "config %s: key \"%s\": expected a string or a number%s",
				 path, key, in_list(repeatable, key) ? " or an array of them" : "");
			ret = -EINVAL;
		} else {
			ret = push(&a, key, buf);
		}
		if (ret) {
			if (ret == -ENOMEM)
				snprintf(err, errlen, "config %s: out of memory", path);
			break;
		}
	}
	json_decref(root);
	if (ret) {
		egr_config_args_free(&a);
		return ret;
	}
	*out = a;
	return 0;
}

void egr_config_args_free(struct egr_config_args *a)
{
	for (int i = 0; i < a->argc; i++)
		free(a->argv[i]);
	free(a->argv);
	a->argv = NULL;
	a->argc = 0;
}
