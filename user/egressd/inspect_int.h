/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Internal to the inspecting proxy (inspect.c: decision and relay;
 * inspect_accept.c: accepting connections and the sandboxes): its state
 * and the functions its files share. Not an API: inspect.h is. */
#ifndef EGR_INSPECT_INT_H
#define EGR_INSPECT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include "dnspolicy.h"
#include "httpframe.h"
#include "inspect_types.h"
#include "loop.h"
#include "tlshello.h"

#define BACKLOG      256
/* Bytes in flight per direction. 256 KiB and 1 MiB pipes measured slower on
 * the dev VM than the default 64 KiB (docs/benchmarks.md). */
#define PIPE_SIZE    (1 << 16)
#define PIPE_CHUNK   PIPE_SIZE
#define PIPE_POOL    64 /* empty pipes kept for the next connections */
#define ALLOW_EVENTS_PER_S 20 /* sampled, like the kernel's allow events; denies all */
#define PUMP_ROUNDS  64
/* Relay rounds (a splice or send each way) one sandbox gets per loop turn
 * across all its connections: a sandbox trickling bytes through many
 * connections cannot hold the shared loop (DNS, other sandboxes) for
 * longer than this costs; the rest waits for the next turn. */
#define SB_ROUNDS_PER_TURN 16
#define TICK_MS      200

enum state { S_HELLO, S_CONNECTING, S_RELAY };

struct lit {
	int family;
	uint8_t addr[16];
	uint8_t plen;
	uint16_t lo, hi;
};

struct dest {
	char name[EGR_TLS_NAME_BUF];
	int family;
	uint8_t addr[16];
	uint16_t port;
	uint64_t bytes_out, bytes_in, conns;
	time_t first, last;
};

struct isb;

struct lsock {
	int fd;
	struct isb *sb;
};

struct isb {
	struct egr_inspect *p;
	uint32_t id;
	char *tenant;
	struct egr_dnspolicy *dpol;
	struct lit *lits;
	size_t nlits;
	int netns_fd;
	bool device;                    /* a device sandbox's: dev says where */
	struct egr_inspect_device dev;
	struct lsock l4, l6;
	uint16_t port4, port6;
	uint32_t nconns;
	uint64_t denied; /* policy refusals of this sandbox: its breaker counts them */
	/* Its deny-event budget (GCRA: the theoretical arrival time) and what
	 * it held back since the last summary (egr_insp_publish()). */
	uint64_t deny_tat_ns;
	uint64_t turn;   /* the loop turn its relay rounds are counted in */
	uint32_t rounds; /* rounds left in that turn */
	uint64_t sup_n, sup_total, sup_report_ns;
	struct egr_inspect_event sup_last;
	char sup_name[EGR_TLS_NAME_BUF];
	struct dest dests[EGR_INSPECT_MAX_DESTS];
	size_t ndests;
	bool dests_full;
	struct isb *next;
};

struct conn;

struct side {
	int fd;
	bool watched;
	struct conn *c;
};

struct conn {
	struct egr_inspect *p;
	struct isb *sb;
	enum state state;
	struct side cl, up;
	uint8_t *hello;
	size_t hlen, hsent;
	/* Client to upstream through hello[] while filtered (inspect_filter.c):
	 * every HTTP/1.x request head is judged, a TLS client's first flight
	 * is walked record by record. hsent <= hclear <= hlen. */
	bool filter, flight_done;
	size_t hclear;
	struct egr_http_framer fr;
	uint32_t trec; /* TLS: bytes left of the record being passed */
	int pcu[2], puc[2]; /* pipes: client->upstream, upstream->client */
	size_t incu, inuc;
	bool eof_c, eof_u, shut_u, shut_c;
	bool ready; /* on the ready list */
	uint64_t deadline_ns, last_ns;
	struct egr_inspect_orig orig;
	char name[EGR_TLS_NAME_BUF];
	char alpn[EGR_TLS_ALPN_BUF];
	const char *proto;
	uint64_t bytes_out, bytes_in;
	uint64_t noted_out, noted_in; /* already in the sandbox's dests */
	bool noted;
	struct conn *prev, *next, *ready_next;
};

struct egr_inspect {
	struct egr_loop *loop;
	struct egr_inspect_config cfg;
	int self_netns;
	int wake_fd;
	struct isb *sbs;
	struct conn *conns;
	struct conn *ready;
	struct egr_inspect_stats st;
	uint64_t allow_window, allow_sent;
	int pool[PIPE_POOL][2]; /* empty pipes, already sized */
	size_t npool;
};

/* inspect.c, for inspect_accept.c. */

/* The decision on a connection's first bytes: NULL (allowed) or why not. */
const char *egr_insp_judge(struct conn *c);
/* The same for another name on c's destination (a later request). */
const char *egr_insp_judge_name(struct conn *c, const char *name);
/* Hands ev to cfg.event; a deny only within its sandbox's deny budget,
 * else it is counted for the next summary. */
void egr_insp_publish(struct isb *sb, const struct egr_inspect_event *ev);
/* A summary of the denies held back, once a second at most (the tick);
 * force: now, whatever the time (the sandbox goes away). */
void egr_insp_report_suppressed(struct isb *sb, uint64_t now_ns, bool force);
/* Reports the connection to cfg.event (docs/inspect.md). */
void egr_insp_emit(struct conn *c, bool allowed, bool closed, const char *reason);
/* Adds the connection's bytes to its sandbox's destinations. */
void egr_insp_note_dest(struct conn *c);
void egr_insp_pipe_close(int fds[2]);
/* A pipe pair for splicing, from the proxy's spares or new (inspect_conn.c). */
int egr_insp_pipe_get(struct egr_inspect *p, int fds[2]);
/* Unlinks and frees c; reset: RST to the client instead of FIN. */
void egr_insp_conn_free(struct conn *c, bool reset);
/* Refuse c (counters, event) and free it with a reset. */
void egr_insp_deny(struct conn *c, const char *reason);
/* Registers a side's fd on the loop. 0 or -errno. */
int egr_insp_watch(struct conn *c, struct side *s);
/* Reads the client's first bytes that have arrived and decides on them. */
void egr_insp_read_hello(struct conn *c);
/* inspect_filter.c. Judge what hello[hclear, hlen) holds and advance
 * hclear over what may pass: NULL, or why not (bad: the name the refused
 * request or hello named, EGR_TLS_NAME_BUF bytes). */
const char *egr_insp_filter_walk(struct conn *c, char *bad);
/* A request head on c (the first one too): NULL if it may pass, else why. */
const char *egr_insp_head_verdict(struct conn *c, const struct egr_http_head *h);
/* One round of client to upstream while filtered: 1 moved, 0 blocked,
 * -1 c was freed. */
int egr_insp_filter_pump(struct conn *c);
/* Allow events within ALLOW_EVENTS_PER_S. */
bool egr_insp_allow_sample(struct egr_inspect *p);
/* The eventfd of the ready list: pumps the connections on it. */
void egr_insp_on_wake(struct egr_loop *loop, int fd, uint32_t events, void *ctx);

#endif /* EGR_INSPECT_INT_H */
