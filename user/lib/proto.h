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

/* Is req a request egressd knows: an object with a string "op" naming one
 * of its operations and no field that operation does not take? The types
 * and meaning of the fields are the handlers' business. 0 or -EINVAL (*e
 * names the field). */
int egr_proto_check_request(const json_t *req, struct egr_proto_error *e);

#endif /* EGR_PROTO_H */
