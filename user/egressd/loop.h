/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * egressd's single-threaded event loop: modules register file descriptors
 * (the control socket, the ring buffer, DNS proxy sockets) and periodic
 * timers, and get called back when they are ready.
 */
#ifndef EGR_LOOP_H
#define EGR_LOOP_H

#include <stdbool.h>
#include <stdint.h>

struct egr_loop;

/* events: the EPOLL* bits that fired. */
typedef void (*egr_loop_fn)(struct egr_loop *loop, int fd, uint32_t events, void *ctx);

int egr_loop_new(struct egr_loop **out);
void egr_loop_free(struct egr_loop *loop);

/* Watch fd for events (EPOLLIN, ...). 0 or -errno. */
int egr_loop_add(struct egr_loop *loop, int fd, uint32_t events, egr_loop_fn fn, void *ctx);
int egr_loop_del(struct egr_loop *loop, int fd);
/* Change the events fd is watched for. 0, -ENOENT (not watched), -errno. */
int egr_loop_mod(struct egr_loop *loop, int fd, uint32_t events);
/* Call fn every interval_ms (a timerfd the loop owns). */
int egr_loop_every(struct egr_loop *loop, uint32_t interval_ms, egr_loop_fn fn, void *ctx);

/* Run until egr_loop_stop() or SIGINT/SIGTERM. 0 or -errno. */
int egr_loop_run(struct egr_loop *loop);
void egr_loop_stop(struct egr_loop *loop);
/* Call fn from the loop when SIGHUP arrives (one handler; NULL: ignore). */
void egr_loop_on_sighup(struct egr_loop *loop, egr_loop_fn fn, void *ctx);
/* Wait up to timeout_ms (-1: forever) for one batch of events and handle
 * it. Returns the number of events handled, or -errno (-EINTR included). */
int egr_loop_run_once(struct egr_loop *loop, int timeout_ms);
/* Which turn (epoll_wait() call) the loop is in: work budgets that are
 * per turn reset when it changes. */
uint64_t egr_loop_turn(const struct egr_loop *loop);

#endif /* EGR_LOOP_H */
