// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <poll.h>
#include <time.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "proto.h"

/* Milliseconds left until deadline (CLOCK_MONOTONIC), at least 0; -1 when
 * there is no deadline. */
static int remaining_ms(const struct timespec *deadline)
{
	struct timespec now;
	long long ms;

	if (!deadline)
		return -1;
	clock_gettime(CLOCK_MONOTONIC, &now);
	ms = (long long)(deadline->tv_sec - now.tv_sec) * 1000 +
	     (deadline->tv_nsec - now.tv_nsec) / 1000000;
	return ms < 0 ? 0 : (ms > 3600000 ? 3600000 : (int)ms);
}

/* Wait until fd is ready for events or the deadline passes. */
static int wait_ready(int fd, short events, const struct timespec *deadline)
{
	struct pollfd pfd = { .fd = fd, .events = events };
	int n;

	if (!deadline)
		return 0;
	do
		n = poll(&pfd, 1, remaining_ms(deadline));
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return n == 0 ? -ETIMEDOUT : 0;
}

void egr_proto_deadline(struct timespec *deadline, int timeout_ms)
{
	clock_gettime(CLOCK_MONOTONIC, deadline);
	deadline->tv_sec += timeout_ms / 1000;
	deadline->tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (deadline->tv_nsec >= 1000000000) {
		deadline->tv_sec++;
		deadline->tv_nsec -= 1000000000;
	}
}

int egr_proto_read(int fd, size_t max, json_t **out, char *errmsg, size_t errlen)
{
	return egr_proto_read_by(fd, max, NULL, out, errmsg, errlen);
}

int egr_proto_read_by(int fd, size_t max, const struct timespec *deadline, json_t **out,
		      char *errmsg, size_t errlen)
{
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	json_error_t jerr;
	json_t *obj;
	int err;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n;

		if (len == cap) {
			char *nb;

			if (cap >= max + 1) {
				err = -E2BIG;
				goto out;
			}
			cap = cap * 2 > max + 1 ? max + 1 : cap * 2;
			nb = realloc(buf, cap);
			if (!nb) {
				err = -ENOMEM;
				goto out;
			}
			buf = nb;
		}
		err = wait_ready(fd, POLLIN, deadline);
		if (err)
			goto out;
		n = read(fd, buf + len, cap - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			err = -errno;
			goto out;
		}
		if (n == 0) {
			err = -ECONNRESET;
			goto out;
		}
		/* Only a newline can end the object: JSON strings cannot hold a raw one. */
		if (memchr(buf + len, '\n', (size_t)n)) {
			len += (size_t)n;
			break;
		}
		len += (size_t)n;
		if (len > max) {
			err = -E2BIG;
			goto out;
		}
	}
	if (len > max + 1) {
		err = -E2BIG;
		goto out;
	}
	obj = json_loadb(buf, len, JSON_DISABLE_EOF_CHECK | JSON_REJECT_DUPLICATES, &jerr);
	if (!obj || !json_is_object(obj)) {
		if (errmsg)
			snprintf(errmsg, errlen, "%s",
				 obj ? "request is not a JSON object" : jerr.text);
		json_decref(obj);
		err = -EBADMSG;
		goto out;
	}
	*out = obj;
	err = 0;
out:
	free(buf);
	return err;
}

int egr_proto_write(int fd, const json_t *obj)
{
	return egr_proto_write_by(fd, obj, NULL);
}

int egr_proto_write_by(int fd, const json_t *obj, const struct timespec *deadline)
{
	char *s = json_dumps(obj, JSON_COMPACT);
	size_t len, off = 0;
	int err = 0;

	if (!s)
		return -ENOMEM;
	len = strlen(s);
	s[len++] = '\n'; /* overwrites the NUL; s is no longer a C string */
	while (off < len) {
		ssize_t n;

		err = wait_ready(fd, POLLOUT, deadline);
		if (err)
			break;
		n = send(fd, s + off, len - off, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			err = -errno;
			break;
		}
		off += (size_t)n;
	}
	free(s);
	return err;
}

int egr_proto_call(const char *sock_path, const json_t *req, json_t **resp)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd, err;

	if (strlen(sock_path) >= sizeof(sun.sun_path))
		return -ENAMETOOLONG;
	strcpy(sun.sun_path, sock_path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		err = -errno;
		goto out;
	}
	err = egr_proto_write(fd, req);
	/* A refused peer is answered and closed before its request is read:
	 * the write may then fail while the answer waits to be read. */
	if (err && err != -EPIPE && err != -ECONNRESET)
		goto out;
	{
		int rerr = egr_proto_read(fd, EGR_PROTO_MAX_REQUEST, resp, NULL, 0);

		err = rerr && err ? err : rerr;
	}
out:
	close(fd);
	return err;
}

/* The one list of operations (enum egr_op is its index). */
static const struct egr_op_desc ops[EGR_OP_COUNT] = {
	[EGR_OP_PING] = { "ping", EGR_OP_PING, 0, { NULL } },
	[EGR_OP_STATUS] = { "status", EGR_OP_STATUS, 0, { NULL } },
	[EGR_OP_LIST] = { "list", EGR_OP_LIST, 0, { "after", "limit", NULL } },
	[EGR_OP_ATTACH] = { "attach", EGR_OP_ATTACH, 0,
			    { "cgroup", "policy", "netns", "launcher_pid", "create", "policy_ref",
			      "container", "execution_id", "netdev", NULL } },
	[EGR_OP_UPDATE] = { "update", EGR_OP_UPDATE, 0,
			    { "cgroup", "id", "policy", "netdev", "netns", NULL } },
	[EGR_OP_DETACH] = { "detach", EGR_OP_DETACH, 0,
			    { "cgroup", "id", "status", "netdev", "netns", NULL } },
	[EGR_OP_RELEASE] = { "release", EGR_OP_RELEASE, 0, { "cgroup", "id", NULL } },
	[EGR_OP_EVENTS] = { "events", EGR_OP_EVENTS, EGR_OPF_STREAMS,
			    { "follow", "sandbox", "limit", NULL } },
	[EGR_OP_STATS] = { "stats", EGR_OP_STATS, 0, { "tenant", NULL } },
	[EGR_OP_APPROVALS] = { "approvals", EGR_OP_APPROVALS, 0, { NULL } },
	[EGR_OP_APPROVE] = { "approve", EGR_OP_APPROVE, 0,
			     { "id", "ttl_s", "scope", "ports", "reason", NULL } },
	[EGR_OP_DENY] = { "deny", EGR_OP_DENY, 0, { "id", "reason", NULL } },
};

const struct egr_op_desc *egr_op_desc(enum egr_op op)
{
	if ((unsigned int)op >= EGR_OP_COUNT || !ops[op].name)
		return NULL;
	return &ops[op];
}

const struct egr_op_desc *egr_op_lookup(const char *name)
{
	if (!name)
		return NULL;
	for (size_t i = 0; i < EGR_OP_COUNT; i++)
		if (ops[i].name && strcmp(ops[i].name, name) == 0)
			return &ops[i];
	return NULL;
}

json_t *egr_proto_request(enum egr_op op)
{
	const struct egr_op_desc *d = egr_op_desc(op);

	return d ? json_pack("{s:s}", "op", d->name) : NULL;
}

int egr_proto_check_request(const json_t *req, struct egr_proto_error *e)
{
	return egr_proto_check_op(req, NULL, e);
}

int egr_proto_check_op(const json_t *req, enum egr_op *op, struct egr_proto_error *e)
{
	const char *name = json_string_value(json_object_get(req, "op"));
	const struct egr_op_desc *d;
	const char *key;
	json_t *val;

	if (!json_is_object(req) || !name) {
		snprintf(e->field, sizeof(e->field), "op");
		snprintf(e->message, sizeof(e->message), "op (a string) is required");
		return -EINVAL;
	}
	d = egr_op_lookup(name);
	if (!d) {
		snprintf(e->field, sizeof(e->field), "op");
		snprintf(e->message, sizeof(e->message), "unknown op");
		return -EINVAL;
	}
	json_object_foreach((json_t *)req, key, val)
	{
		bool known = strcmp(key, "op") == 0;

		for (const char *const *f = d->fields; !known && *f; f++)
			known = strcmp(key, *f) == 0;
		if (!known) {
			/* An empty key still gets a field an operator can read. */
			snprintf(e->field, sizeof(e->field), "%.63s", key[0] ? key : "\"\"");
			snprintf(e->message, sizeof(e->message), "unknown field \"%.64s\"", key);
			return -EINVAL;
		}
	}
	if (op)
		*op = d->op;
	return 0;
}

/* The wire strings of enum egr_err; the protocol, never renamed. */
static const char *const err_codes[EGR_ERR_COUNT] = {
	[EGR_ERR_NONE] = "",
	[EGR_ERR_BAD_REQUEST] = "bad_request",
	[EGR_ERR_TOO_LARGE] = "too_large",
	[EGR_ERR_INVALID_POLICY] = "invalid_policy",
	[EGR_ERR_NOT_FOUND] = "not_found",
	[EGR_ERR_NOT_QUARANTINED] = "not_quarantined",
	[EGR_ERR_EXISTS] = "exists",
	[EGR_ERR_BAD_CGROUP] = "bad_cgroup",
	[EGR_ERR_NO_SPACE] = "no_space",
	[EGR_ERR_FORBIDDEN] = "forbidden",
	[EGR_ERR_TOO_MANY] = "too_many",
	[EGR_ERR_UNAVAILABLE] = "unavailable",
	[EGR_ERR_INTERNAL] = "internal",
	[EGR_ERR_UNKNOWN] = "unknown",
};

const char *egr_err_code(enum egr_err e)
{
	if ((unsigned int)e >= EGR_ERR_COUNT || !err_codes[e])
		return err_codes[EGR_ERR_INTERNAL];
	return err_codes[e];
}

enum egr_err egr_err_parse(const char *code)
{
	if (!code || !code[0])
		return EGR_ERR_NONE;
	for (size_t i = 1; i < EGR_ERR_COUNT; i++)
		if (i != EGR_ERR_UNKNOWN && strcmp(err_codes[i], code) == 0)
			return (enum egr_err)i;
	return EGR_ERR_UNKNOWN;
}
