/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The listener holder's protocol (docs/operations.md "Restarts"): one
 * SOCK_SEQPACKET message per request, text, at most HOLD_MSG_MAX bytes, a
 * descriptor only with PUT and each FD reply.
 *
 *   PUT <key>   + 1 fd   hold it under key (a key held already: replaced)  -> OK | ERR <errno>
 *   DEL <key>            let it go                                         -> OK | ERR <errno>
 *   TAKE                 every held one: one "FD <key>" + fd each, then      END <n>
 *   PING                                                                   -> OK <pid> <held>
 *   QUIT                 close everything and exit                         -> OK
 *
 * Kept stable across versions: a holder started by one egressd serves its
 * successor, which may be an upgrade.
 */
#ifndef EGR_HOLD_PROTO_H
#define EGR_HOLD_PROTO_H

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define HOLD_MSG_MAX 128
#define HOLD_KEY_MAX 96
#define HOLD_MAX_FDS 65536   /* held at once */
#define HOLD_MAX_CLIENTS 8

/* The holder's entry point (main.c, `egressd --run-listener-holder FD LINGER_S`):
 * lfd is its listening socket, linger_s how long it keeps the sockets with
 * no egressd connected. Returns the process's exit status. */
int egr_holder_main(int lfd, unsigned linger_s);

/* One message of the protocol on conn, with descriptor fd when fd >= 0
 * (SCM_RIGHTS), from either side. 0 or -errno. */
static inline int egr_hold_send(int conn, const char *msg, int fd)
{
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = strlen(msg) };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (fd >= 0) {
		struct cmsghdr *c;

		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof(u.buf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	return sendmsg(conn, &mh, MSG_NOSIGNAL) < 0 ? -errno : 0;
}

#endif /* EGR_HOLD_PROTO_H */
