// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * One request to egressd and the mapping of every way it can fail to an exit
 * status: the only place egressctl decides what an error code means.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl.h"
#include "proto.h"

int ctl_exit_for_code(const char *code)
{
	if (code && strcmp(code, "invalid_policy") == 0)
		return CTL_EXIT_INVALID;
	/* bad_request, too_large, not_found, exists, bad_cgroup, no_space,
	 * forbidden, internal and anything a newer egressd may add. */
	return CTL_EXIT_ERROR;
}

/* Is this connect() error "nobody is serving that socket"? */
static bool unreachable_errno(int err)
{
	return err == ENOENT || err == ECONNREFUSED || err == ENOTDIR || err == ENOTSOCK ||
	       err == EACCES || err == EPERM || err == ENAMETOOLONG;
}

static int call(const struct ctl *c, const json_t *req, json_t **resp, bool *connected)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = c->timeout };
	int fd, err;

	*connected = false;
	if (strlen(c->socket) >= sizeof(sun.sun_path))
		return -ENAMETOOLONG;
	strcpy(sun.sun_path, c->socket);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (c->timeout &&
	    (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
	     setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)) {
		err = -errno;
		goto out;
	}
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		err = -errno;
		goto out;
	}
	*connected = true;
	err = egr_proto_write(fd, req);
	/* A refused peer is answered and closed before its request is read:
	 * the write can then fail while the answer waits to be read. */
	if (!err || err == -EPIPE || err == -ECONNRESET) {
		int rerr = egr_proto_read(fd, EGR_PROTO_MAX_REQUEST, resp, NULL, 0);

		err = rerr && err ? err : rerr;
	}
out:
	close(fd);
	return err;
}

/* ctl_request's verdict without a word on stderr. */
static int quiet_status(int err, bool connected, json_t *ans, json_t **resp, char *code,
			size_t codelen)
{
	const char *ecode;

	if (err)
		return !connected && unreachable_errno(-err) ? CTL_EXIT_UNREACHABLE :
							       CTL_EXIT_ERROR;
	if (json_is_true(json_object_get(ans, "ok"))) {
		*resp = ans;
		return CTL_EXIT_OK;
	}
	ecode = json_string_value(json_object_get(ans, "code"));
	if (code && codelen)
		snprintf(code, codelen, "%s", ecode ?: "");
	err = ctl_exit_for_code(ecode);
	json_decref(ans);
	return err;
}

int ctl_request(const struct ctl *c, json_t *req, json_t **resp, char *code, size_t codelen)
{
	const char *ecode, *emsg, *efield;
	json_t *ans = NULL;
	bool connected;
	int err;

	if (code && codelen)
		code[0] = '\0';
	err = call(c, req, &ans, &connected);
	if (c->quiet)
		return quiet_status(err, connected, ans, resp, code, codelen);
	if (err == -ENOMEM) {
		fprintf(stderr, "egressctl: out of memory\n");
		return CTL_EXIT_ERROR;
	}
	if (err && !connected && unreachable_errno(-err)) {
		fprintf(stderr, "egressctl: cannot reach egressd at %s: %s%s\n", c->socket,
			strerror(-err),
			err == -ENOENT || err == -ECONNREFUSED ? " — is egressd running?" : "");
		return CTL_EXIT_UNREACHABLE;
	}
	if (err && !connected) {
		fprintf(stderr, "egressctl: cannot connect to egressd at %s: %s\n", c->socket,
			strerror(-err));
		return CTL_EXIT_UNREACHABLE;
	}
	if (err == -EAGAIN || err == -EWOULDBLOCK) {
		fprintf(stderr, "egressctl: egressd at %s did not answer within %u s\n",
			c->socket, c->timeout);
		return CTL_EXIT_ERROR;
	}
	if (err == -ECONNRESET || err == -EPIPE) {
		fprintf(stderr, "egressctl: egressd at %s closed the connection without an answer\n",
			c->socket);
		return CTL_EXIT_ERROR;
	}
	if (err) {
		fprintf(stderr, "egressctl: bad answer from egressd at %s: %s\n", c->socket,
			err == -EBADMSG ? "not a JSON object" : strerror(-err));
		return CTL_EXIT_ERROR;
	}
	if (json_is_true(json_object_get(ans, "ok"))) {
		*resp = ans;
		return CTL_EXIT_OK;
	}
	ecode = json_string_value(json_object_get(ans, "code"));
	emsg = json_string_value(json_object_get(ans, "error"));
	efield = json_string_value(json_object_get(ans, "field"));
	fprintf(stderr, "egressctl: %s: %s", ecode ?: "error", emsg ?: "(no message)");
	if (efield)
		fprintf(stderr, " (field: %s)", efield);
	fputc('\n', stderr);
	if (code && codelen)
		snprintf(code, codelen, "%s", ecode ?: "");
	err = ctl_exit_for_code(ecode);
	json_decref(ans);
	return err;
}
