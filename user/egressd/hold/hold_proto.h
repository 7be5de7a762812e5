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

#define HOLD_MSG_MAX 128
#define HOLD_KEY_MAX 96
#define HOLD_MAX_FDS 65536   /* held at once */
#define HOLD_MAX_CLIENTS 8

/* The holder's entry point (main.c, `egressd --run-listener-holder FD LINGER_S`):
 * lfd is its listening socket, linger_s how long it keeps the sockets with
 * no egressd connected. Returns the process's exit status. */
int egr_holder_main(int lfd, unsigned linger_s);

#endif /* EGR_HOLD_PROTO_H */
