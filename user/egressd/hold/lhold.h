/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Listener sockets that outlive egressd (docs/operations.md "Restarts").
 *
 * egressd hands every DNS and inspecting-proxy listener it opens to the
 * listener holder (hold/holder.c, a process of its own, started here when
 * none answers), and a starting egressd takes them back before adoption:
 * the sockets, their bound ports and whatever queued on them while no
 * egressd ran. A socket is named by what the kernel says of it, never by
 * what the holder says: its network namespace (SIOCGSKNS), family, type,
 * loopback address (or an address of the device it is bound to: a device
 * sandbox's) and port (and for TCP that it listens), so a successor
 * claims exactly the socket its adoption asks for.
 *
 * Every function takes h == NULL (holding off): claim finds nothing, the
 * rest do nothing. Single-threaded, on egressd's loop.
 */
#ifndef EGR_LHOLD_H
#define EGR_LHOLD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct egr_loop;
struct egr_lhold;

struct egr_lhold_stats {
	long holder_pid;      /* 0: none */
	uint32_t handed_over; /* sockets taken back at start */
	uint32_t claimed;     /* of those, reused by adoption */
	uint32_t released;    /* of those, nobody's any more: let go */
	uint32_t held;        /* ours the holder keeps now */
	uint64_t failures;    /* PUT/DEL the holder did not confirm, holder restarts */
};

/*
 * Connect to the holder at path, or start one (self_exe --run-listener-holder,
 * lingering linger_s without egressd), and take back what it holds. A
 * failure is logged and leaves *out NULL: egressd runs, its listeners die
 * with it as they did before the holder. loop: to notice the holder exit.
 */
int egr_lhold_open(struct egr_loop *loop, const char *path, const char *self_exe,
		   unsigned linger_s, struct egr_lhold **out);
/* At exit: stop talking to the holder without letting anything go (the
 * holder keeps every socket for the successor), then free. */
void egr_lhold_free(struct egr_lhold *h);

/* A held socket of the predecessor with this identity, or -ENOENT. The
 * caller owns the returned fd; it stays held (the caller drops it when it
 * closes it for good). ns_dev/ns_ino: fstat of its network namespace. */
int egr_lhold_claim(struct egr_lhold *h, dev_t ns_dev, ino_t ns_ino, int family, int type,
		    uint16_t port);
/* A listener just opened: held from now on. 0 or -errno (logged; egressd
 * runs on, a restart would lose this socket). */
int egr_lhold_put(struct egr_lhold *h, int fd);
/* Before fd is closed for good (its sandboxes gone): the holder lets go. */
void egr_lhold_drop(struct egr_lhold *h, int fd);
/* Adoption done: handed-over sockets nothing claimed are let go. */
void egr_lhold_settle(struct egr_lhold *h);
/* egressd is exiting: from now on closing a listener lets nothing go (the
 * proxies' teardown closes every fd; the holder keeps them all). */
void egr_lhold_freeze(struct egr_lhold *h);
void egr_lhold_stats(const struct egr_lhold *h, struct egr_lhold_stats *out);
/* The handed-over sockets not claimed yet, as a new array in *fds (the
 * caller frees it; the fds stay h's). Their count; 0 and NULL without. */
size_t egr_lhold_taken_fds(const struct egr_lhold *h, int **fds);
/* A socket the holder would keep (a UDP or listening TCP one, on loopback
 * or on an address of the device it is bound to): what the handover from
 * a predecessor without a holder takes (hold/handover.h). */
bool egr_lhold_holdable(int fd);
/* A holder answers at path (none is started). */
bool egr_lhold_answers(const char *path);
/* An egr_metrics_source_fn (obs/metrics.h); ctx: the egr_lhold (NULL: off). */
struct egr_mbuf;
void egr_lhold_metrics(void *ctx, struct egr_mbuf *mb);

#endif /* EGR_LHOLD_H */
