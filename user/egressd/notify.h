/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The service manager's notification protocol (sd_notify(3)) without
 * libsystemd: one datagram per message on $NOTIFY_SOCKET (a path, or an
 * abstract socket when it starts with '@'), and WATCHDOG=1 from the event
 * loop every half of $WATCHDOG_USEC, so a stuck loop gets egressd restarted.
 * Without $NOTIFY_SOCKET every call is a no-op.
 */
#ifndef EGR_NOTIFY_H
#define EGR_NOTIFY_H

#include <stdint.h>

#include "loop.h"

/* Read the environment and open the socket (before hardening). 0 or -errno
 * (a malformed $NOTIFY_SOCKET or $WATCHDOG_USEC). */
int egr_notify_init(void);
void egr_notify_close(void);
/* Send one message ("READY=1\nSTATUS=..."). 0, or -errno from sendto. */
int egr_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* $WATCHDOG_USEC for this process (0: no watchdog). */
uint64_t egr_notify_watchdog_usec(void);
/* Send WATCHDOG=1 from the loop every half watchdog period (no-op without
 * one). 0 or -errno. */
int egr_notify_watchdog_start(struct egr_loop *loop);

#endif /* EGR_NOTIFY_H */
