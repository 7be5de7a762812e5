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
			snprintf(errmsg, errlen, "%s", obj ? "request is not a JSON object" : jerr.text);
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

/* Every operation and the fields it takes besides "op". */
static const struct {
	const char *op;
	const char *fields[5];
} known_ops[] = {
	{ "ping", { NULL } },
	{ "status", { NULL } },
	{ "list", { NULL } },
	{ "attach", { "cgroup", "policy", "netns", "launcher_pid", NULL } },
	{ "update", { "cgroup", "id", "policy", NULL } },
	{ "detach", { "cgroup", "id", "status", NULL } },
	{ "release", { "cgroup", "id", NULL } },
	{ "events", { "follow", "sandbox", "limit", NULL } },
	{ "stats", { "tenant", NULL } },
};

int egr_proto_check_request(const json_t *req, struct egr_proto_error *e)
{
	const char *op = json_string_value(json_object_get(req, "op"));
	const char *key;
	json_t *val;
	size_t i;

	if (!json_is_object(req) || !op) {
		snprintf(e->field, sizeof(e->field), "op");
		snprintf(e->message, sizeof(e->message), "op (a string) is required");
		return -EINVAL;
	}
	for (i = 0; i < sizeof(known_ops) / sizeof(known_ops[0]); i++)
		if (strcmp(known_ops[i].op, op) == 0)
			break;
	if (i == sizeof(known_ops) / sizeof(known_ops[0])) {
		snprintf(e->field, sizeof(e->field), "op");
		snprintf(e->message, sizeof(e->message), "unknown op");
		return -EINVAL;
	}
	json_object_foreach((json_t *)req, key, val)
	{
		bool known = strcmp(key, "op") == 0;

		for (const char *const *f = known_ops[i].fields; !known && *f; f++)
			known = strcmp(key, *f) == 0;
		if (!known) {
			/* An empty key still gets a field an operator can read. */
			snprintf(e->field, sizeof(e->field), "%.63s", key[0] ? key : "\"\"");
			snprintf(e->message, sizeof(e->message), "unknown field \"%.64s\"", key);
			return -EINVAL;
		}
	}
	return 0;
}
