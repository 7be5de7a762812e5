// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Policy files: read, parse and validate locally with the same parser egressd
 * uses, so a bad policy is reported even when no daemon is running.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"
#include "policy.h"
#include "proto.h"

/* Read all of fd, at most max bytes. 0 or -errno (-E2BIG when larger). */
static int read_all(int fd, size_t max, char **out, size_t *outlen)
{
	size_t cap = 65536, len = 0;
	char *buf = malloc(cap);

	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n;

		if (len == cap) {
			char *nb;

			if (cap > max) {
				free(buf);
				return -E2BIG;
			}
			cap *= 2;
			nb = realloc(buf, cap);
			if (!nb) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			n = -errno;
			free(buf);
			return (int)n;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len > max) {
		free(buf);
		return -E2BIG;
	}
	*out = buf;
	*outlen = len;
	return 0;
}

static void print_invalid(const struct egr_error *e)
{
	ctl_note_error("invalid_policy", e->field[0] ? e->field : NULL, "%s", e->message);
	if (e->field[0])
		fprintf(stderr, "egressctl: invalid policy: %s: %s\n", e->field, e->message);
	else
		fprintf(stderr, "egressctl: invalid policy: %s\n", e->message);
}

int ctl_policy_load(const char *path, json_t **out)
{
	struct egr_error perr = { 0 };
	struct egr_policy pol;
	json_error_t jerr;
	size_t len = 0;
	char *text = NULL;
	json_t *root;
	int fd, err;

	fd = strcmp(path, "-") == 0 ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ctl_note_error("bad_policy_file", NULL, "cannot open policy %s: %s", path,
			       strerror(errno));
		fprintf(stderr, "egressctl: cannot open policy %s: %s\n", path, strerror(errno));
		return CTL_EXIT_USAGE;
	}
	err = read_all(fd, EGR_PROTO_MAX_REQUEST, &text, &len);
	if (fd != STDIN_FILENO)
		close(fd);
	if (err) {
		fprintf(stderr, "egressctl: cannot read policy %s: %s\n",
			strcmp(path, "-") ? path : "from stdin",
			err == -E2BIG ? "larger than the 64 MiB a request may carry" : strerror(-err));
		return err == -E2BIG ? CTL_EXIT_INVALID : CTL_EXIT_USAGE;
	}
	err = egr_policy_check_text(text, len, &pol, &perr);
	if (err == -ENOMEM) {
		free(text);
		fprintf(stderr, "egressctl: out of memory\n");
		return CTL_EXIT_ERROR;
	}
	if (err) {
		free(text);
		print_invalid(&perr);
		return CTL_EXIT_INVALID;
	}
	egr_policy_free(&pol);
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	free(text);
	if (!json_is_object(root)) {
		/* The parser accepted it, so this is only possible without memory. */
		json_decref(root);
		fprintf(stderr, "egressctl: cannot load policy %s: %s\n", path,
			root ? "not an object" : jerr.text);
		return CTL_EXIT_ERROR;
	}
	*out = root;
	return CTL_EXIT_OK;
}

int ctl_policy_check(const json_t *policy)
{
	struct egr_error perr = { 0 };
	struct egr_policy pol;
	int err;

	err = egr_policy_check_json(policy, &pol, &perr);
	if (err == -ENOMEM) {
		fprintf(stderr, "egressctl: out of memory\n");
		return CTL_EXIT_ERROR;
	}
	if (err) {
		print_invalid(&perr);
		return CTL_EXIT_INVALID;
	}
	egr_policy_free(&pol);
	return CTL_EXIT_OK;
}
