// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * One request to egressd and the mapping of every way it can fail to an exit
 * status: the only place egressctl decides what an error code means.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl.h"
#include "proto.h"

/* The first error of this run, for --json (ctl_error_json). */
static struct {
	bool json;
	bool noted;
	char code[64];
	char field[128];
	char msg[512];
} last_error;

void ctl_json_errors(bool on)
{
	last_error.json = on;
}

void ctl_note_error(const char *code, const char *field, const char *fmt, ...)
{
	va_list ap;

	if (last_error.noted)
		return; /* the first one is the cause */
	last_error.noted = true;
	snprintf(last_error.code, sizeof(last_error.code), "%s", code ?: "error");
	snprintf(last_error.field, sizeof(last_error.field), "%s", field ?: "");
	va_start(ap, fmt);
	vsnprintf(last_error.msg, sizeof(last_error.msg), fmt, ap);
	va_end(ap);
}

int ctl_finish(int rc)
{
	static const struct {
		int rc;
		const char *code, *msg;
	} generic[] = {
		{ CTL_EXIT_ERROR, "error", "the command failed (see stderr)" },
		{ CTL_EXIT_USAGE, "usage", "usage error (see stderr)" },
		{ CTL_EXIT_UNREACHABLE, "unreachable", "egressd is not reachable" },
		{ CTL_EXIT_DENIED, "permission_denied", "no permission on egressd's socket" },
		{ CTL_EXIT_INVALID, "invalid_policy", "invalid policy (see stderr)" },
		{ CTL_EXIT_RUN_FAILED, "run_failed", "could not start the command" },
	};
	json_t *o;

	if (!last_error.json || rc == 0 || rc == INT_MAX)
		return rc;
	if (!last_error.noted) {
		for (size_t i = 0; i < sizeof(generic) / sizeof(generic[0]); i++)
			if (generic[i].rc == rc)
				ctl_note_error(generic[i].code, NULL, "%s", generic[i].msg);
	}
	if (!last_error.noted) /* the command's own status (run: its command's) */
		return rc;
	o = json_pack("{s:b, s:i, s:s, s:s}", "ok", 0, "exit", rc, "code", last_error.code,
		      "error", last_error.msg);
	if (o && last_error.field[0])
		json_object_set_new(o, "field", json_string(last_error.field));
	if (o) {
		ctl_print_json(o);
		fflush(stdout);
	}
	json_decref(o);
	return rc;
}

int ctl_exit_for_code(const char *code)
{
	switch (egr_err_parse(code)) {
	case EGR_ERR_INVALID_POLICY:
		return CTL_EXIT_INVALID;
	default:
		/* bad_request, too_large, not_found, exists, bad_cgroup, no_space,
		 * forbidden, internal and anything a newer egressd may add. */
		return CTL_EXIT_ERROR;
	}
}

/* Is this connect() error "nobody is serving that socket"? (A permission
 * error is not: egressd may be running, we may not talk to it.) */
static bool unreachable_errno(int err)
{
	return err == ENOENT || err == ECONNREFUSED || err == ENOTDIR || err == ENOTSOCK ||
	       err == ENAMETOOLONG;
}

static bool denied_errno(int err)
{
	return err == EACCES || err == EPERM;
}

int ctl_connect_failed(const struct ctl *c, int err)
{
	if (denied_errno(-err)) {
		ctl_note_error("permission_denied", NULL, "no permission on egressd's socket %s: %s",
			       c->socket, strerror(-err));
		fprintf(stderr, "egressctl: cannot connect to egressd at %s: %s (the socket is "
				"root's and its group's: run as root, or as a member of the group "
				"egressd hands it to, --group / \"group\" in egressd.json)\n",
			c->socket, strerror(-err));
		return CTL_EXIT_DENIED;
	}
	if (unreachable_errno(-err)) {
		ctl_note_error("unreachable", NULL, "cannot reach egressd at %s: %s", c->socket,
			       strerror(-err));
		fprintf(stderr, "egressctl: cannot reach egressd at %s: %s%s\n", c->socket,
			strerror(-err),
			err == -ENOENT || err == -ECONNREFUSED ? " — is egressd running?" : "");
		return CTL_EXIT_UNREACHABLE;
	}
	ctl_note_error("unreachable", NULL, "cannot connect to egressd at %s: %s", c->socket,
		       strerror(-err));
	fprintf(stderr, "egressctl: cannot connect to egressd at %s: %s\n", c->socket,
		strerror(-err));
	return CTL_EXIT_UNREACHABLE;
}

/* Connect and write req: the connected fd (its answer still to read), or
 * -errno (*connected: whether the connect itself worked). A write cut
 * short by a refused peer still leaves its answer to read (*werr). */
static int call_send(const struct ctl *c, const json_t *req, bool *connected, int *werr)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = c->timeout };
	int fd, err;

	*connected = false;
	*werr = 0;
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
		goto fail;
	}
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		err = -errno;
		goto fail;
	}
	*connected = true;
	err = egr_proto_write(fd, req);
	/* A refused peer is answered and closed before its request is read:
	 * the write can then fail while the answer waits to be read. */
	if (!err || err == -EPIPE || err == -ECONNRESET) {
		*werr = err;
		return fd;
	}
fail:
	close(fd);
	return err;
}

/* The answer on fd from call_send; closes fd. 0 or -errno. */
static int call_recv(int fd, int werr, json_t **resp)
{
	int rerr = egr_proto_read(fd, EGR_PROTO_MAX_REQUEST, resp, NULL, 0);

	close(fd);
	return rerr && werr ? werr : rerr;
}

/* ctl_request's verdict without a word on stderr. */
static int quiet_status(int err, bool connected, json_t *ans, json_t **resp, char *code,
			size_t codelen)
{
	const char *ecode;

	if (err)
		return connected ? CTL_EXIT_ERROR :
		       denied_errno(-err) ? CTL_EXIT_DENIED :
		       unreachable_errno(-err) ? CTL_EXIT_UNREACHABLE : CTL_EXIT_ERROR;
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

void ctl_request_send(const struct ctl *c, const json_t *req, struct ctl_pending *p)
{
	p->fd = call_send(c, req, &p->connected, &p->werr);
}

void ctl_request_abandon(struct ctl_pending *p)
{
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
}

int ctl_request(const struct ctl *c, json_t *req, json_t **resp, char *code, size_t codelen)
{
	struct ctl_pending p;

	ctl_request_send(c, req, &p);
	return ctl_request_finish(c, &p, resp, code, codelen);
}

int ctl_request_finish(const struct ctl *c, struct ctl_pending *p, json_t **resp, char *code,
		       size_t codelen)
{
	const char *ecode, *emsg, *efield;
	json_t *ans = NULL;
	bool connected = p->connected;
	int err;

	if (code && codelen)
		code[0] = '\0';
	err = p->fd < 0 ? p->fd : call_recv(p->fd, p->werr, &ans);
	p->fd = -1;
	if (c->quiet)
		return quiet_status(err, connected, ans, resp, code, codelen);
	if (err == -ENOMEM) {
		fprintf(stderr, "egressctl: out of memory\n");
		ctl_note_error("internal", NULL, "out of memory");
		return CTL_EXIT_ERROR;
	}
	if (err && !connected)
		return ctl_connect_failed(c, err);
	if (err == -EAGAIN || err == -EWOULDBLOCK) {
		ctl_note_error("timeout", NULL, "egressd at %s did not answer within %u s",
			       c->socket, c->timeout);
		fprintf(stderr, "egressctl: egressd at %s did not answer within %u s\n",
			c->socket, c->timeout);
		return CTL_EXIT_ERROR;
	}
	if (err == -ECONNRESET || err == -EPIPE) {
		ctl_note_error("connection_closed", NULL,
			       "egressd at %s closed the connection without an answer", c->socket);
		fprintf(stderr, "egressctl: egressd at %s closed the connection without an answer\n",
			c->socket);
		return CTL_EXIT_ERROR;
	}
	if (err) {
		ctl_note_error("bad_answer", NULL, "bad answer from egressd at %s: %s", c->socket,
			       err == -EBADMSG ? "not a JSON object" : strerror(-err));
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
	ctl_note_error(ecode ?: "error", efield, "%s", emsg ?: "(no message)");
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
