/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The DNS proxy's private state, shared by its modules (dnsproxy.h is the
 * public contract). Everything here runs on the one egr_loop the proxy was
 * created with; no locking.
 *
 * Layered one way, each file calling only those listed after it
 * (tools/module-cycles); upcalls go through the loop's callbacks:
 *
 *   dnsproxy.c     the proxy and its sandboxes: create/free, add, update,
 *                  remove, limits, stats, the timer (timeouts, TCP idle)
 *   dns_tcp.c      client TCP connections: accept, framing, limits
 *   dns_listen.c   the listener sockets a network namespace's sandboxes
 *                  share, the UDP receive path; who asks (egr_dns_senders,
 *                  the kernel-recorded sender names the sandbox)
 *   dns_query.c    one query: rate, policy, exfiltration, a slot of the
 *                  in-flight table and fairness (eviction), forwarding
 *   dns_ask.c      queries held for approval (network.unknown_names "ask")
 *   dns_upstream.c resolver addresses, the upstream UDP socket and the TCP
 *                  exchanges; an answer is matched to its query here
 *   dns_answer.c   a matched answer: rebinding filter, learning, release
 *   dns_io.c       batched datagram I/O: recvmmsg() into rxbuf, and the
 *                  sendmmsg() queue every callback flushes before it returns
 *   dns_pend.c     a query in flight and the client it answers: freeing or
 *                  failing its slot, replies (UDP, buffered TCP), closing a
 *                  client connection, the verdict event
 *   dns_types.c    the public types' code (egr_dns_verdict_name)
 */
#ifndef EGR_DNS_INTERNAL_H
#define EGR_DNS_INTERNAL_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

#include "clock.h"
#include "dns_types.h"
#include "localaddr.h"

#define RX_BATCH      64
#define MSG_MAX       65535
#define TCP_BACKLOG   64
#define TCP_WBUF_MAX  (256 * 1024) /* unsent replies per client connection */
#define TCP_PER_CONN  64           /* queries in flight per client connection */
/* Datagrams one recvmmsg() takes (a listener's turn is smaller,
 * EGR_DNSPROXY_UDP_TURN), and datagrams queued for one sendmmsg(). */
#define DNS_RX_SLOTS  16
#define DNS_TX_SLOTS  32
/* Query bytes kept in the in-flight slot itself (longer ones: malloc). */
#define DNS_QUERY_INLINE 512

struct sb;
struct lgroup;

struct listener {
	struct lgroup *g;
	int fd;
	int family;
	bool tcp;
};

/*
 * The listeners of one network namespace, shared by its sandboxes (with
 * verify_clients; without it every sandbox has a group of its own): UDP
 * and TCP on 127.0.0.1:port4 and [::1]:port6. The kernel's record of the
 * sender (egr_dns_senders, keyed by the listener's port, which is why no
 * two groups have the same port) says which sandbox asks.
 */
struct lgroup {
	struct egr_dnsproxy *p;
	dev_t ns_dev;              /* its network namespace; own_ns: egressd's */
	ino_t ns_ino;
	bool own_ns;
	bool shared;               /* sandboxes join it (verify_clients) */
	bool device;               /* a device sandbox's own: dev says where */
	struct egr_dnsproxy_device dev;
	struct listener lis[4];    /* udp4, tcp4, udp6, tcp6; fd -1 if absent */
	uint16_t port4, port6;
	uint32_t nsb;              /* sandboxes using it */
	struct sb *only;           /* !shared: its one sandbox */
	uint64_t foreign;          /* dropped: no record, or a record of no sandbox here */
	struct lgroup *next;
};

/* Sandboxes by id (SB_HASH buckets, sb->hnext), for the sender lookup. */
#define SB_HASH 16384

struct tconn {
	struct sb *sb;
	int fd;
	uint8_t *rbuf;             /* 2 + MSG_MAX */
	size_t rlen;
	uint8_t *wbuf;
	size_t wlen, woff, wcap;
	uint64_t last_ns;
	uint32_t npending;
	bool eof;                  /* client shut down its side */
	bool dead;                 /* close when the current callback returns */
	bool in_cb;
	bool more;                 /* stopped at the per-wake-up bound: resume on tick */
	struct tconn *next;
};

/* Queries handled per wake-up of one client TCP connection: a client that
 * pipelines (cheap, refused) queries must not keep the loop to itself. The
 * socket is edge-triggered, so the rest is resumed on the next tick. */
#define TCP_QUERIES_PER_WAKEUP 32
/* Connections a sandbox may have waiting for one of its max_tcp_per_sb
 * slots (dns_tcp.c): a burst, a restart's backlog, is served in turn. */
#define TCP_PARKED_PER_SB 256

/* A held query's waiters: the first query and the retries that joined it
 * (docs/dns.md "Approvals"). */
#define ASK_WAITERS 8
struct ask_waiter {
	int transport;
	int lfd;                   /* UDP: listener to answer from */
	struct sockaddr_storage caddr;
	socklen_t calen;
	struct tconn *conn;        /* TCP: the client connection (npending held) */
	uint8_t *query;
	size_t qlen;
};

struct ask {
	struct egr_dns_ask pub;    /* pub.qname, pub.tenant point into qname, sb->tenant */
	char qname[EGR_DNS_NAME_BUF];
	uint64_t deadline_ns;      /* egr_mono_ns() */
	uint32_t nwait;
	struct ask_waiter w[ASK_WAITERS];
	struct ask *next;
};

struct sb {
	struct egr_dnsproxy *p;
	uint32_t id;
	char *tenant;
	struct egr_dnspolicy *pol;
	uint64_t pol_gen;          /* bumped by each policy update */
	struct egr_exfil *exfil;
	struct lgroup *g;          /* the listeners it is reached on */
	struct egr_localaddr *ns_la; /* its own network namespace's addresses, or NULL */
	uint16_t port4, port6;     /* g's */
	uint64_t la_batch;         /* ns_la refreshed in this upstream batch */
	struct tconn *conns;
	uint32_t nconns;
	/* Accepted past the connection limit: not read until one of its own
	 * closes (TCP_PARKED_PER_SB at most, in accept order). What queued on a
	 * held listener while no egressd ran arrives at once. */
	int *parked;
	uint32_t nparked;
	uint32_t ndeferred;        /* its UDP queries waiting in p->deferred */
	uint32_t inflight;
	double tokens;             /* query rate bucket (rate_take) */
	uint64_t tokens_ns;
	struct egr_dnsproxy_stats st;
	struct ask *asks;          /* held for a decision */
	uint32_t nasks;
	struct sb *next;
	struct sb *hnext;          /* in p->by_sb */
};

enum tstate { T_CONNECTING = 1, T_SENDING, T_READING };

struct pending {
	bool used;
	uint32_t idx;
	struct sb *sb;
	int transport;
	int lfd;                   /* UDP: listener to answer from */
	struct sockaddr_storage caddr;
	socklen_t calen;
	struct tconn *conn;        /* TCP: client connection */
	uint16_t client_id, up_id;
	uint16_t qtype, qclass;
	char qname[EGR_DNS_NAME_BUF];
	uint8_t *query;            /* the client's bytes, for SERVFAIL: qinline or malloc */
	size_t qlen;
	int32_t next_free;         /* free list of the table, -1 ends it */
	struct egr_dns_ports ports;
	uint64_t pol_gen;          /* sb->pol_gen it was matched under */
	uint64_t deadline_ns;
	uint64_t received_ns;      /* when the client's query arrived (latency) */
	uint64_t resend_ns;        /* UDP: when it goes to the upstream again (0: never) */
	uint32_t resent;           /* UDP: times it went again */
	uint32_t up;               /* upstream index */
	/* TCP upstream */
	int ufd;
	enum tstate tstate;
	uint8_t *ubuf;
	size_t ulen, uoff;
	uint8_t qinline[DNS_QUERY_INLINE];
};

/* A datagram queued for the next dnsp_tx_flush(). */
struct dns_tx {
	int fd;
	socklen_t tolen;
	struct sockaddr_storage to;
	const uint8_t *msg;        /* copy, or the caller's bytes (stable until the flush) */
	size_t len;
	struct pending *q;         /* a forwarded query, failed if its send fails */
	uint16_t up_id;            /* ... and still the one with this upstream id */
	uint32_t sandbox_id;       /* for the log */
	uint8_t copy[DNS_QUERY_INLINE];
};

/* A UDP query of a sandbox at its in-flight limit, waiting for a slot
 * (dns_query.c): a burst, a restart's queue, is answered rather than shed.
 * Its rate token is taken; policy and exfiltration are judged when it runs. */
struct deferred {
	struct deferred *next;
	struct sb *sb;
	int lfd;
	socklen_t calen;
	struct sockaddr_storage caddr;
	size_t len;
	uint8_t msg[];
};

/* Deferred queries at most, all sandboxes (~5 MiB), and per sandbox this
 * many times its in-flight limit. */
#define DNS_DEFER_MAX 8192
#define DNS_DEFER_PER_LIMIT 4

struct egr_dnsproxy {
	struct egr_loop *loop;
	struct deferred *deferred, **deferred_tail; /* FIFO */
	uint32_t ndeferred;
	uint64_t answer_latency_ns; /* of the answer being reported, for emit() */
	uint32_t answer_learned;    /* and which of its listed addresses were learned */
	struct egr_dnsproxy_config cfg;
	int up4, up6;
	int timer_fd;
	int self_netns;
	uint64_t self_ns_dev, self_ns_ino; /* its identity, for the listener holder */
	struct egr_localaddr *host_la; /* egressd's network namespace's addresses */
	struct sb *sbs;
	uint32_t tcp_conns;        /* of every sandbox: the tick walks them only when some */
	struct sb **by_sb;         /* SB_HASH buckets */
	struct lgroup *groups;
	struct pending *pend;
	uint32_t npend;
	uint32_t inflight;
	int32_t *by_id;            /* 65536: upstream id -> slot, -1 free */
	uint32_t cur_up;
	uint16_t rnd[256];
	uint32_t nrnd;
	uint64_t dropped_answers;  /* upstream packets that matched nothing */
	uint64_t next_ask_id;      /* last egr_dns_ask.id given */
	uint32_t nasks;            /* held, every sandbox's */
	int32_t free_head;         /* first free slot of pend, -1 none */
	/* Upstream answers read by one recvmmsg() are judged as one batch:
	 * the local-address sets are refreshed once per batch (rx_batch,
	 * non-zero while one is handled). */
	uint64_t rx_batch, rx_batches, host_la_batch;
	/* recvmmsg(): DNS_RX_SLOTS buffers of MSG_MAX + 1 in rxbuf */
	uint8_t *rxbuf;
	struct mmsghdr rxmsg[DNS_RX_SLOTS];
	struct iovec rxiov[DNS_RX_SLOTS];
	struct sockaddr_storage rxfrom[DNS_RX_SLOTS];
	/* sendmmsg(): what the current callback queued */
	unsigned int ntx;
	struct dns_tx tx[DNS_TX_SLOTS];
	struct mmsghdr txmsg[DNS_TX_SLOTS];
	struct iovec txiov[DNS_TX_SLOTS];
	uint8_t obuf[MSG_MAX + 1];
};

/* Where an answer goes: a UDP client (lfd + address) or a TCP connection. */
struct client {
	int transport;
	int lfd;
	const struct sockaddr_storage *caddr;
	socklen_t calen;
	struct tconn *conn;
};

static inline socklen_t sa_len(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}


/* dns_pend.c: the bottom layer. */
void dnsp_emit(struct sb *sb, const char *qname, uint16_t qtype, int transport,
	       enum egr_dns_verdict v, const char *reason, int error, uint16_t rcode,
	       const struct egr_dns_addr *addrs, size_t n);
void dnsp_reply(struct sb *sb, const struct client *cl, const uint8_t *msg, size_t len);
void dnsp_reply_rcode(struct sb *sb, const struct client *cl, const uint8_t *q, size_t qlen,
		      uint16_t rcode);
/* A query the sandbox's policy refuses (docs/dns.md "Denials"): a refused
 * name (name_refused: not allowed, or an exfiltration signal) gets the
 * policy's network.dns_reject rcode, a refused class or type REFUSED
 * (NXDOMAIN would deny the name's other types too, RFC 8020); with EDNS
 * the reply says why in an RFC 8914 EDE "Blocked". Counted and reported
 * as verdict v (EGR_DNS_V_REFUSED or EGR_DNS_V_EXFIL). */
void dnsp_deny(struct sb *sb, const struct client *cl, const uint8_t *q, size_t qlen,
	       const char *qname, uint16_t qtype, enum egr_dns_verdict v, bool name_refused,
	       const char *why);
void dnsp_pend_free(struct egr_dnsproxy *p, struct pending *q);
void dnsp_pend_client(const struct pending *q, struct client *cl);
/* Answer SERVFAIL, count, report and free. */
void dnsp_pend_fail(struct egr_dnsproxy *p, struct pending *q, enum egr_dns_verdict v,
		    const char *reason, int error, const struct egr_dns_addr *addrs, size_t n);
/* Client TCP connections: write out what is buffered; close when done
 * (settle: after a reply or an error outside its own callback). */
void dnsp_conn_flush(struct tconn *c);
void dnsp_conn_close(struct tconn *c);
void dnsp_conn_settle(struct tconn *c);
void dnsp_conn_send(struct tconn *c, const uint8_t *msg, size_t len);

/* dns_io.c: batched datagram I/O. */
int dnsp_io_init(struct egr_dnsproxy *p);
void dnsp_io_free(struct egr_dnsproxy *p);
/* Up to want (<= DNS_RX_SLOTS) datagrams into rxbuf/rxmsg: how many, 0 when
 * none is queued, or -errno. */
int dnsp_rx(struct egr_dnsproxy *p, int fd, unsigned int want);
static inline uint8_t *dnsp_rx_buf(struct egr_dnsproxy *p, int i)
{
	return p->rxbuf + (size_t)i * (MSG_MAX + 1);
}
/* Queue msg for fd: a reply whose bytes stay valid until the flush (q
 * NULL), or a forwarded query (q: the slot it belongs to), copied. -E2BIG:
 * too long to copy, the caller sends it itself. */
int dnsp_tx_add(struct egr_dnsproxy *p, int fd, const uint8_t *msg, size_t len, bool copy,
		const struct sockaddr_storage *to, socklen_t tolen, struct pending *q,
		uint32_t sandbox_id);
/* Send what is queued; a forwarded query whose send fails gets SERVFAIL.
 * Every callback that queues flushes before it returns. */
void dnsp_tx_flush(struct egr_dnsproxy *p);
/* Drop what is queued for fd, or (sb non-NULL) forwarded for sb: a
 * sandbox removed from within a callback leaves nothing behind. */
void dnsp_tx_forget(struct egr_dnsproxy *p, int fd, const struct sb *sb);

/* dns_listen.c */
struct sb *dnsp_sb_find(const struct egr_dnsproxy *p, uint32_t id);
/* The sandbox of g the kernel recorded as the sender (UDP source, TCP
 * peer), or NULL: dropped, counted in g->foreign. */
struct sb *dnsp_client_sb(struct lgroup *g, const struct sockaddr_storage *from, int protocol);
void dnsp_purge_clients(struct egr_dnsproxy *p, uint32_t id);
void dnsp_on_udp_listener(struct egr_loop *loop, int fd, uint32_t events, void *ctx);
/* sb joins the listeners of its namespace (netns_fd, -1: egressd's own),
 * opened when it is the first (want4/want6: the ports to try first; on_tcp:
 * the TCP listeners' callback, dns_tcp.c, which sits above this file);
 * sb->g, port4 and port6 set. dev non-NULL: a device sandbox, a group of
 * its own bound to dev's addresses (a family without one: port 0). Called
 * in egressd's own namespace. */
int dnsp_group_join(struct sb *sb, int netns_fd, const struct egr_dnsproxy_device *dev,
		    uint16_t want4, uint16_t want6,
		    void (*on_tcp)(struct egr_loop *, int, uint32_t, void *));
/* sb leaves; the last one closes the listeners. */
void dnsp_group_leave(struct sb *sb);

/* dns_query.c */
void dnsp_handle_query(struct sb *sb, const struct client *cl, const uint8_t *pkt, size_t len);
/* Deferred queries of sandboxes with room again, in arrival order; at
 * removal, every one of sb dropped. */
void dnsp_run_deferred(struct egr_dnsproxy *p);
void dnsp_forget_deferred(struct egr_dnsproxy *p, struct sb *sb);

/* dns_ask.c: queries held for approval (docs/dns.md "Approvals"). */
/* Hold (cl, pkt) for a decision on q->qname, or join the request already
 * held for it. 0; -EDQUOT: the sandbox holds ask_max_pending names
 * already; -ENOSPC: a TCP query past ASK_WAITERS; -ENOMEM. The caller
 * refuses on error. */
int dnsp_ask_hold(struct sb *sb, const struct client *cl, const uint8_t *pkt, size_t len,
		  const struct egr_dns_query *q, uint32_t timeout_s,
		  const struct egr_dns_ports *ports);
/* Take request id out of its sandbox (*sbp): NULL when unknown. */
struct ask *dnsp_ask_take(struct egr_dnsproxy *p, uint64_t id, struct sb **sbp);
void dnsp_ask_waiter_client(const struct ask_waiter *w, struct client *cl);
void dnsp_ask_report(struct sb *sb, struct ask *a);
/* Release the connections it held and free it (taken out already). */
void dnsp_ask_free(struct ask *a);
/* Report st, answer every waiter with the policy's refusal, free. */
void dnsp_ask_refuse(struct sb *sb, struct ask *a, enum egr_dns_ask_state st, const char *why);
void dnsp_ask_expire(struct egr_dnsproxy *p, uint64_t now);
void dnsp_ask_drop_sb(struct sb *sb);
/* The held requests, at most max into out; returns how many there are. */
size_t dnsp_ask_list(const struct egr_dnsproxy *p, const struct egr_dns_ask **out, size_t max);

/* dns_upstream.c */
const char *dnsp_sa_str(const struct sockaddr_storage *ss, char *buf, size_t len);
void dnsp_on_upstream_udp(struct egr_loop *loop, int fd, uint32_t events, void *ctx);
void dnsp_on_upstream_tcp(struct egr_loop *loop, int fd, uint32_t events, void *ctx);
void dnsp_upstream_read_waiting(struct egr_dnsproxy *p);
void dnsp_upstream_resend(struct egr_dnsproxy *p, struct pending *q, uint64_t now);
void dnsp_tcp_up_step(struct egr_dnsproxy *p, struct pending *q, uint32_t events);

/* dns_answer.c */
void dnsp_pend_answer(struct egr_dnsproxy *p, struct pending *q, uint8_t *pkt, size_t len,
		      const struct egr_dns_response *r);
bool dnsp_sb_is_local(void *ctx, int family, const uint8_t *addr);
void dnsp_localaddr_refresh(struct sb *sb);
void dnsp_on_localaddr(struct egr_loop *loop, int fd, uint32_t events, void *ctx);

/* dns_tcp.c */
void dnsp_on_tcp_conn(struct egr_loop *loop, int fd, uint32_t events, void *ctx);
void dnsp_on_tcp_listener(struct egr_loop *loop, int fd, uint32_t events, void *ctx);
/* Parked connections into the slots the sandbox has free; at removal
 * (free_all) every parked one closed. */
void dnsp_tcp_unpark(struct sb *sb, bool free_all);

#endif /* EGR_DNS_INTERNAL_H */
