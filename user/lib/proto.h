/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The control protocol's framing (docs/control-protocol.md): one JSON object
 * and a newline each way per connection. */
#ifndef EGR_PROTO_H
#define EGR_PROTO_H

#include <stddef.h>
#include <time.h>
#include <jansson.h>

#define EGR_DEFAULT_SOCKET "/run/egressd/egressd.sock"
#define EGR_PROTO_MAX_REQUEST (64u << 20)

/* Read one newline-terminated JSON object of at most max bytes.
 * 0, -E2BIG (over max), -EBADMSG (not a JSON object; *errmsg says why, if
 * non-NULL), -ECONNRESET (EOF before newline) or -errno. Honors SO_RCVTIMEO. */
int egr_proto_read(int fd, size_t max, json_t **out, char *errmsg, size_t errlen);

/* Write obj compactly plus a newline. 0 or -errno. */
int egr_proto_write(int fd, const json_t *obj);

/* The same with a deadline for the whole message (CLOCK_MONOTONIC, from
 * egr_proto_deadline()), not per read or write: a peer that trickles bytes
 * cannot hold the caller past it. -ETIMEDOUT when it passes. */
void egr_proto_deadline(struct timespec *deadline, int timeout_ms);
int egr_proto_read_by(int fd, size_t max, const struct timespec *deadline, json_t **out,
		      char *errmsg, size_t errlen);
int egr_proto_write_by(int fd, const json_t *obj, const struct timespec *deadline);

/* Connect to the control socket, send req, read the answer.
 * 0, -ENOENT/-ECONNREFUSED (egressd not running), or -errno. */
int egr_proto_call(const char *sock_path, const json_t *req, json_t **resp);

struct egr_proto_error {
	char field[64];
	char message[160];
};

/* --- operations ----------------------------------------------------------- */

/* Every operation of the protocol, in one list: egressd dispatches on it
 * (server.c indexes its handlers by it) and egressctl builds its requests
 * from it, so an op cannot be known to one side only. Values are not on
 * the wire (the name is); append only. */
enum egr_op {
	EGR_OP_PING,
	EGR_OP_STATUS,
	EGR_OP_LIST,
	EGR_OP_ATTACH,
	EGR_OP_UPDATE,
	EGR_OP_DETACH,
	EGR_OP_RELEASE,
	EGR_OP_EVENTS,
	EGR_OP_STATS,
	EGR_OP_APPROVALS,
	EGR_OP_APPROVE,
	EGR_OP_DENY,
	EGR_OP_COUNT
};

/* What an operation does, for callers that treat kinds of op alike. */
#define EGR_OPF_STREAMS (1u << 0) /* may keep the connection ("follow": server.c) */

#define EGR_OP_MAX_FIELDS 10

struct egr_op_desc {
	const char *name;                           /* the wire "op" */
	enum egr_op op;
	unsigned int flags;                         /* EGR_OPF_* */
	const char *fields[EGR_OP_MAX_FIELDS + 1]; /* fields it takes besides "op"; NULL ends */
};

/* The description of op, or NULL when op is not one. */
const struct egr_op_desc *egr_op_desc(enum egr_op op);
/* The operation named name, or NULL. */
const struct egr_op_desc *egr_op_lookup(const char *name);
/* A new request {"op": NAME}, or NULL (no memory, or op is not one). */
json_t *egr_proto_request(enum egr_op op);

/* Is req a request egressd knows: an object with a string "op" naming one
 * of its operations and no field that operation does not take? The types
 * and meaning of the fields are the handlers' business. 0 (*op, if
 * non-NULL, says which) or -EINVAL (*e names the field). */
int egr_proto_check_request(const json_t *req, struct egr_proto_error *e);
int egr_proto_check_op(const json_t *req, enum egr_op *op, struct egr_proto_error *e);

/* --- error codes ---------------------------------------------------------- */

/* The "code" of an error reply (docs/control-protocol.md "Errors"). The
 * strings are the protocol and never change; the values are not on the
 * wire. */
enum egr_err {
	EGR_ERR_NONE,            /* "": not an error */
	EGR_ERR_BAD_REQUEST,     /* not JSON, not an object, unknown op or field, bad type */
	EGR_ERR_TOO_LARGE,       /* request over EGR_PROTO_MAX_REQUEST */
	EGR_ERR_INVALID_POLICY,  /* the policy was rejected; nothing was applied */
	EGR_ERR_NOT_FOUND,       /* no sandbox with that cgroup or id */
	EGR_ERR_NOT_QUARANTINED, /* release of a sandbox that is not quarantined */
	EGR_ERR_EXISTS,          /* the cgroup is a sandbox with another policy */
	EGR_ERR_BAD_CGROUP,      /* not a cgroup v2 directory, or not a usable one */
	EGR_ERR_NO_SPACE,        /* a BPF map is full */
	EGR_ERR_FORBIDDEN,       /* the peer may not do this */
	EGR_ERR_TOO_MANY,        /* too many event subscribers */
	EGR_ERR_UNAVAILABLE,     /* the part of egressd that would answer is not running */
	EGR_ERR_INTERNAL,        /* anything else */
	EGR_ERR_UNKNOWN,         /* a code this build does not know (a newer egressd's) */
	EGR_ERR_COUNT
};

/* The wire string of e ("bad_request"); "internal" for a value out of range,
 * "" for EGR_ERR_NONE ("unknown" for EGR_ERR_UNKNOWN, which egressd never
 * sends: server.c answers internal instead). */
const char *egr_err_code(enum egr_err e);
/* The code a wire string names: EGR_ERR_NONE for NULL or "",
 * EGR_ERR_UNKNOWN for a string this build does not know. */
enum egr_err egr_err_parse(const char *code);

#endif /* EGR_PROTO_H */
