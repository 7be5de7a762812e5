// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The DNS proxy (contract: dnsproxy.h; its modules: dns_internal.h): the
 * proxy and its sandboxes, created, updated and removed here, and the
 * timer. One listener set per sandbox (UDP and TCP on 127.0.0.1 and ::1),
 * one shared unconnected UDP socket per upstream family, one TCP
 * connection per query that arrived over TCP. Queries in flight live in a
 * fixed table indexed through a 65536-entry map from upstream id to slot,
 * so an answer finds its query in O(1).
 *
 * Client TCP connections and upstream TCP sockets are registered
 * edge-triggered (EPOLLIN | EPOLLOUT | EPOLLET) so no re-registration is
 * needed when switching between reading and writing; they are always
 * drained to EAGAIN. Listeners are level-triggered and handle a bounded
 * batch per callback.
 *
 * Lifetimes: a client TCP connection that fails while one of its own
 * callbacks runs is only marked dead and closed when that callback
 * returns; the loop skips events of fds removed earlier in the same batch.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "dns_internal.h"
#include "kernel/maps.h"
#include "dnsproxy.h"
#include "log.h"
#include "loop.h"

/* --- timer ------------------------------------------------------------------------ */

/* Ticks missed before the timer counts the proxy as stalled. */
#define STALL_TICKS 5

/*
 * The loop did not run for stall_ns (egressd blocked, starved of CPU,
 * stopped; its VM paused): that time was ours, not the upstream's. The
 * queries in flight get it back, and the UDP ones go again now (a datagram
 * may have been lost meanwhile) rather than expiring on this tick with
 * neither the upstream nor the proxy having had the chance to run.
 */
static void on_stall(struct egr_dnsproxy *p, uint64_t stall_ns, uint64_t now)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < p->npend; i++) {
		struct pending *q = &p->pend[i];

		if (!q->used)
			continue;
		q->deadline_ns += stall_ns;
		if (q->resend_ns)
			q->resend_ns = now;
		n++;
	}
	if (n)
		log_info("dns: the proxy did not run for %llu ms; its %u queries in flight get that "
			 "time back", (unsigned long long)(stall_ns / 1000000ULL), n);
}

static void on_tick(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_dnsproxy *p = ctx;
	uint64_t now = egr_mono_ns(), idle = (uint64_t)p->cfg.tcp_idle_ms * 1000000ULL, exp = 0;
	bool failover = false;
	uint32_t timeouts = 0;

	if (read(fd, &exp, sizeof(exp)) < 0 && errno != EAGAIN)
		log_debug("dns: timer read: %m");
	/* exp: the periods since the last read, 1 on time. */
	if (exp > STALL_TICKS)
		on_stall(p, (exp - 1) * (uint64_t)p->cfg.tick_ms * 1000000ULL, now);
	if (p->inflight)
		dnsp_upstream_read_waiting(p);
	for (uint32_t i = 0; i < p->npend; i++) {
		struct pending *q = &p->pend[i];

		if (!q->used)
			continue;
		if (q->deadline_ns > now) {
			if (q->resend_ns && q->resend_ns <= now)
				dnsp_upstream_resend(p, q, now);
			continue;
		}
		if (q->ufd >= 0) {
			/* What its connection holds is read first (the UDP
			 * sockets were, above). */
			dnsp_tcp_up_step(p, q, EPOLLIN);
			if (!q->used)
				continue;
		}
		if (q->up == p->cur_up)
			failover = true;
		if (!timeouts++)
			log_info("dns: sandbox %u: %s over %s unanswered by the upstream %llu ms "
				 "after it was read (sent %u times); SERVFAIL",
				 q->sb->id, q->qname, q->transport == IPPROTO_UDP ? "udp" : "tcp",
				 (unsigned long long)((now - q->received_ns) / 1000000ULL),
				 q->resent + 1);
		q->sb->st.timeouts++;
		dnsp_pend_fail(p, q, EGR_DNS_V_SERVFAIL, "upstream timeout", -ETIMEDOUT, NULL, 0);
	}
	if (timeouts > 1)
		log_info("dns: %u more queries timed out on this tick", timeouts - 1);
	if (failover && p->cfg.nupstreams > 1) {
		char b[80];

		p->cur_up = (p->cur_up + 1) % (uint32_t)p->cfg.nupstreams;
		log_warn("dns: upstream timed out, switching to %s",
			 dnsp_sa_str(&p->cfg.upstreams[p->cur_up], b, sizeof(b)));
	}
	if (p->nasks)
		dnsp_ask_expire(p, now);
	/* Every 100 ms: with 10,000 sandboxes and no TCP connection, the walk
	 * alone was ~2 % of a CPU. */
	for (struct sb *sb = p->tcp_conns ? p->sbs : NULL; sb; sb = sb->next) {
		struct tconn *c = sb->conns, *next;

		for (; c; c = next) {
			next = c->next;
			if (c->more) {
				/* Its turn again: what it pipelined is still
				 * buffered, and edge-triggered epoll will not
				 * say so. */
				dnsp_on_tcp_conn(loop, c->fd, EPOLLIN, c);
				continue;
			}
			if (!c->npending && c->last_ns + idle <= now)
				dnsp_conn_close(c);
		}
		if (sb->nparked)
			dnsp_tcp_unpark(sb, false);
	}
	if (p->ndeferred) {
		dnsp_run_deferred(p);
		dnsp_tx_flush(p);
	}
}

/* --- proxy and sandboxes --------------------------------------------------------- */

static struct sb *sb_find(const struct egr_dnsproxy *p, uint32_t id)
{
	return dnsp_sb_find(p, id);
}

static void sb_unhash(struct egr_dnsproxy *p, struct sb *sb)
{
	for (struct sb **h = &p->by_sb[sb->id % SB_HASH]; *h; h = &(*h)->hnext)
		if (*h == sb) {
			*h = sb->hnext;
			return;
		}
}

static int upstream_socket(int family)
{
	int fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	return fd < 0 ? -errno : fd;
}

/* Answers free in-flight slots: deferred queries take them at once. */
static void on_upstream(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_dnsproxy *p = ctx;

	dnsp_on_upstream_udp(loop, fd, events, ctx);
	if (p->ndeferred) {
		dnsp_run_deferred(p);
		dnsp_tx_flush(p);
	}
}

int egr_dnsproxy_new(struct egr_loop *loop, const struct egr_dnsproxy_config *cfg,
		     struct egr_dnsproxy **out)
{
	struct itimerspec its = { 0 };
	struct egr_dnsproxy *p;
	struct stat nst;
	int err;

	if (!loop || !cfg || !out || !cfg->learn)
		return -EINVAL;
	*out = NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->loop = loop;
	p->cfg = *cfg;
	p->up4 = p->up6 = p->timer_fd = p->self_netns = -1;
	if (!p->cfg.nupstreams) {
		err = egr_dnsproxy_resolv_conf(NULL, &p->cfg);
		if (err) {
			log_error("dns: no upstream resolver given and none in /etc/resolv.conf");
			goto fail;
		}
	}
	if (p->cfg.nupstreams > EGR_DNSPROXY_MAX_UPSTREAMS) {
		err = -EINVAL;
		goto fail;
	}
	if (!p->cfg.timeout_ms)
		p->cfg.timeout_ms = 2000;
	if (!p->cfg.max_inflight)
		p->cfg.max_inflight = 1024;
	if (p->cfg.max_inflight > 16384)
		p->cfg.max_inflight = 16384;
	if (!p->cfg.max_inflight_per_sb)
		p->cfg.max_inflight_per_sb =
			p->cfg.max_inflight / 4 < 64 ? 64 : p->cfg.max_inflight / 4;
	if (!p->cfg.max_tcp_per_sb)
		p->cfg.max_tcp_per_sb = 16;
	if (!p->cfg.tcp_idle_ms)
		p->cfg.tcp_idle_ms = 10000;
	if (!p->cfg.tick_ms)
		p->cfg.tick_ms = 100;
	if (!p->cfg.rate_qps)
		p->cfg.rate_qps = EGR_DNSPROXY_RATE;
	if (!p->cfg.burst)
		p->cfg.burst = p->cfg.rate_qps > EGR_DNSPROXY_BURST ? p->cfg.rate_qps :
								      EGR_DNSPROXY_BURST;
	if (!p->cfg.exfil.window_ns && !p->cfg.exfil.max_label_len && !p->cfg.exfil.max_name_len &&
	    !p->cfg.exfil.max_subdomains && !p->cfg.exfil.max_nxdomain &&
	    p->cfg.exfil.max_entropy == 0)
		egr_exfil_limits_default(&p->cfg.exfil);

	p->npend = p->cfg.max_inflight;
	p->pend = calloc(p->npend, sizeof(*p->pend));
	p->by_id = malloc(65536 * sizeof(*p->by_id));
	p->by_sb = calloc(SB_HASH, sizeof(*p->by_sb));
	if (!p->pend || !p->by_id || !p->by_sb) {
		err = -ENOMEM;
		goto fail;
	}
	p->free_head = -1;
	for (uint32_t i = p->npend; i-- > 0;) {
		p->pend[i].ufd = -1;
		p->pend[i].next_free = p->free_head;
		p->free_head = (int32_t)i;
	}
	err = dnsp_io_init(p);
	if (err)
		goto fail;
	for (int i = 0; i < 65536; i++)
		p->by_id[i] = -1;

	for (size_t i = 0; i < p->cfg.nupstreams; i++) {
		int fam = p->cfg.upstreams[i].ss_family;
		int *fd = fam == AF_INET ? &p->up4 : &p->up6;

		if (fam != AF_INET && fam != AF_INET6) {
			err = -EAFNOSUPPORT;
			goto fail;
		}
		if (*fd >= 0)
			continue;
		*fd = upstream_socket(fam);
		if (*fd < 0) {
			err = *fd;
			goto fail;
		}
		err = egr_loop_add(loop, *fd, EPOLLIN, on_upstream, p);
		if (err) {
			close(*fd);
			*fd = -1;
			goto fail;
		}
	}
	p->self_netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (p->self_netns >= 0 && fstat(p->self_netns, &nst) == 0) {
		p->self_ns_dev = nst.st_dev;
		p->self_ns_ino = nst.st_ino;
	}
	if (p->self_netns < 0)
		log_warn("dns: cannot open /proc/self/ns/net (%m): sandboxes with their own "
			 "network namespace are not supported");
	/* Without the host's addresses no answer could be judged: refuse to
	 * start rather than let "this machine" be learned. */
	err = egr_localaddr_open("host", &p->host_la);
	if (!err)
		err = egr_loop_add(loop, egr_localaddr_fd(p->host_la), EPOLLIN, dnsp_on_localaddr,
				   p->host_la);
	if (err) {
		log_error("dns: the host's local addresses (rtnetlink): %s", strerror(-err));
		goto fail;
	}

	p->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (p->timer_fd < 0) {
		err = -errno;
		goto fail;
	}
	its.it_interval.tv_sec = p->cfg.tick_ms / 1000;
	its.it_interval.tv_nsec = (long)(p->cfg.tick_ms % 1000) * 1000000L;
	its.it_value = its.it_interval;
	if (timerfd_settime(p->timer_fd, 0, &its, NULL) < 0) {
		err = -errno;
		goto fail;
	}
	err = egr_loop_add(loop, p->timer_fd, EPOLLIN, on_tick, p);
	if (err) {
		close(p->timer_fd);
		p->timer_fd = -1;
		goto fail;
	}
	for (size_t i = 0; i < p->cfg.nupstreams; i++) {
		char b[80];

		log_info("dns: upstream %s", dnsp_sa_str(&p->cfg.upstreams[i], b, sizeof(b)));
	}
	*out = p;
	return 0;
fail:
	egr_dnsproxy_free(p);
	return err;
}

static void sb_free(struct sb *sb)
{
	struct egr_dnsproxy *p = sb->p;

	dnsp_tx_forget(p, -1, sb);
	dnsp_ask_drop_sb(sb); /* before its connections: they hold none then */
	dnsp_forget_deferred(p, sb);
	dnsp_tcp_unpark(sb, true);
	while (sb->conns)
		dnsp_conn_close(sb->conns);
	for (uint32_t i = 0; i < p->npend; i++)
		if (p->pend[i].used && p->pend[i].sb == sb)
			dnsp_pend_free(p, &p->pend[i]);
	dnsp_group_leave(sb);
	if (sb->ns_la) {
		egr_loop_del(p->loop, egr_localaddr_fd(sb->ns_la));
		egr_localaddr_free(sb->ns_la);
	}
	egr_dnspolicy_free(sb->pol);
	egr_exfil_free(sb->exfil);
	free(sb->tenant);
	free(sb);
}

/*
 * A graceful exit (SIGTERM: a restart, an upgrade): read nothing more from
 * the listeners, whose queues wait for the successor (the listener holder
 * keeps the sockets), and answer the queries already read, each after its
 * learned addresses are written as always, for up to the upstream timeout.
 */
void egr_dnsproxy_drain(struct egr_dnsproxy *p)
{
	uint64_t deadline;
	uint32_t before;

	if (!p)
		return;
	for (struct lgroup *g = p->groups; g; g = g->next)
		for (int i = 0; i < 4; i++)
			if (g->lis[i].fd >= 0)
				egr_loop_del(p->loop, g->lis[i].fd);
	before = p->inflight + p->ndeferred;
	deadline = egr_mono_ns() + ((uint64_t)p->cfg.timeout_ms + 200) * 1000000ull;
	while ((p->inflight || p->ndeferred) && egr_mono_ns() < deadline) {
		int n;

		dnsp_run_deferred(p);
		dnsp_tx_flush(p);
		n = egr_loop_run_once(p->loop, 20);

		if (n < 0 && n != -EINTR)
			break;
	}
	dnsp_tx_flush(p);
	if (before || p->inflight || p->ndeferred)
		log_info("dns: exiting: %u of %u queries read answered; queued ones wait for the "
			 "next egressd", before - p->inflight - p->ndeferred, before);
}

void egr_dnsproxy_free(struct egr_dnsproxy *p)
{
	if (!p)
		return;
	while (p->sbs) {
		struct sb *sb = p->sbs;

		p->sbs = sb->next;
		sb_unhash(p, sb);
		sb_free(sb);
	}
	if (p->up4 >= 0) {
		egr_loop_del(p->loop, p->up4);
		close(p->up4);
	}
	if (p->up6 >= 0) {
		egr_loop_del(p->loop, p->up6);
		close(p->up6);
	}
	if (p->timer_fd >= 0) {
		egr_loop_del(p->loop, p->timer_fd);
		close(p->timer_fd);
	}
	if (p->self_netns >= 0)
		close(p->self_netns);
	if (p->host_la) {
		egr_loop_del(p->loop, egr_localaddr_fd(p->host_la));
		egr_localaddr_free(p->host_la);
	}
	free(p->pend);
	free(p->by_id);
	free(p->by_sb);
	dnsp_io_free(p);
	free(p);
}

/* The kernel's bound (egr_dns_budget) is twice the proxy's own, so that
 * the proxy's rate limit is what a sandbox meets first (and counts, as
 * shed_rate), and the kernel's what keeps it from filling the shared
 * queues; none (rate 0) past what the map holds. */
static void kernel_bound(const struct egr_dnsproxy_config *cfg, uint32_t *rate, uint32_t *burst)
{
	if (cfg->rate_qps > UINT32_MAX / 2 || cfg->burst > UINT32_MAX / 2) {
		*rate = *burst = 0;
		return;
	}
	*rate = 2 * cfg->rate_qps;
	*burst = 2 * cfg->burst;
}

static int add_sandbox(struct egr_dnsproxy *p, uint32_t sandbox_id, const char *tenant,
		       struct egr_dnspolicy *pol, int netns_fd,
		       const struct egr_dnsproxy_device *dev, uint16_t want_port4,
		       uint16_t want_port6, uint16_t *port4, uint16_t *port6)
{
	struct sb *sb;
	int err;

	if (!p || !pol || sandbox_id == EGR_ID_NONE) {
		egr_dnspolicy_free(pol);
		return -EINVAL;
	}
	if (sb_find(p, sandbox_id)) {
		egr_dnspolicy_free(pol);
		return -EEXIST;
	}
	if (netns_fd >= 0 && p->self_netns < 0) {
		egr_dnspolicy_free(pol);
		return -EOPNOTSUPP;
	}
	sb = calloc(1, sizeof(*sb));
	if (!sb) {
		egr_dnspolicy_free(pol);
		return -ENOMEM;
	}
	sb->p = p;
	sb->id = sandbox_id;
	sb->pol = pol;
	sb->tokens = p->cfg.burst;
	sb->tokens_ns = egr_mono_ns();
	/* A new sandbox (adoption re-opens stored ports and keeps what the
	 * kernel recorded): nothing of an earlier one with this id may ask. */
	if (!want_port4 && !want_port6)
		dnsp_purge_clients(p, sandbox_id);
	sb->tenant = strdup(tenant ? tenant : "");
	err = sb->tenant ? egr_exfil_new(&p->cfg.exfil, &sb->exfil) : -ENOMEM;
	if (err)
		goto fail;
	/* Its kernel budget on the shared queues before it can send there
	 * (a device sandbox has its own). */
	if (p->cfg.verify_clients && !dev) {
		uint32_t krate, kburst;

		kernel_bound(&p->cfg, &krate, &kburst);
		err = egr_bpf_dns_budget_set(p->cfg.bpf, sandbox_id, krate, kburst);
		if (err) {
			log_error("dns: sandbox %u: its queue budget (egr_dns_budget): %s",
				  sandbox_id, strerror(-err));
			goto fail;
		}
	}
	if (netns_fd >= 0) {
		/* Its own addresses too: the netlink sockets belong to the
		 * namespace they are opened in. */
		char what[32];

		snprintf(what, sizeof(what), "sandbox %u", sandbox_id);
		if (setns(netns_fd, CLONE_NEWNET) < 0) {
			err = -errno;
			log_error("dns: sandbox %u: setns into its network namespace: %m",
				  sandbox_id);
			goto fail;
		}
		err = egr_localaddr_open(what, &sb->ns_la);
		if (setns(p->self_netns, CLONE_NEWNET) < 0) {
			log_error("dns: cannot return to egressd's network namespace: %m");
			err = err ? err : -errno;
		}
		if (err) {
			log_error("dns: sandbox %u: the local addresses of its network namespace: %s",
				  sandbox_id, strerror(-err));
			goto fail;
		}
	}
	err = dnsp_group_join(sb, netns_fd, dev, want_port4, want_port6, dnsp_on_tcp_listener);
	if (err)
		goto fail;
	if (sb->ns_la) {
		err = egr_loop_add(p->loop, egr_localaddr_fd(sb->ns_la), EPOLLIN, dnsp_on_localaddr,
				   sb->ns_la);
		if (err) {
			dnsp_group_leave(sb);
			goto fail;
		}
	}
	sb->next = p->sbs;
	p->sbs = sb;
	sb->hnext = p->by_sb[sandbox_id % SB_HASH];
	p->by_sb[sandbox_id % SB_HASH] = sb;
	if (port4)
		*port4 = sb->port4;
	if (port6)
		*port6 = sb->port6;
	log_debug("dns: sandbox %u (tenant %s): served on ports %u and %u%s", sandbox_id,
		  sb->tenant, sb->port4, sb->port6,
		  dev ? " of its device" : netns_fd >= 0 ? " in its network namespace" : "");
	return 0;
fail:
	if (p->cfg.verify_clients)
		dnsp_purge_clients(p, sandbox_id);
	egr_localaddr_free(sb->ns_la);
	egr_dnspolicy_free(sb->pol);
	egr_exfil_free(sb->exfil);
	free(sb->tenant);
	free(sb);
	return err;
}

int egr_dnsproxy_add_sandbox(struct egr_dnsproxy *p, uint32_t sandbox_id, const char *tenant,
			     struct egr_dnspolicy *pol, int netns_fd, uint16_t want_port4,
			     uint16_t want_port6, uint16_t *port4, uint16_t *port6)
{
	return add_sandbox(p, sandbox_id, tenant, pol, netns_fd, NULL, want_port4, want_port6,
			   port4, port6);
}

int egr_dnsproxy_add_device(struct egr_dnsproxy *p, uint32_t sandbox_id, const char *tenant,
			    struct egr_dnspolicy *pol, int netns_fd,
			    const struct egr_dnsproxy_device *dev, uint16_t want_port4,
			    uint16_t want_port6, uint16_t *port4, uint16_t *port6)
{
	if (!dev || dev->ifindex <= 0) {
		egr_dnspolicy_free(pol);
		return -EINVAL;
	}
	return add_sandbox(p, sandbox_id, tenant, pol, netns_fd, dev, want_port4, want_port6,
			   port4, port6);
}

int egr_dnsproxy_update_sandbox(struct egr_dnsproxy *p, uint32_t sandbox_id,
				struct egr_dnspolicy *pol)
{
	struct sb *sb = p ? sb_find(p, sandbox_id) : NULL;

	if (!pol)
		return -EINVAL;
	if (!sb) {
		egr_dnspolicy_free(pol);
		return -ENOENT;
	}
	egr_dnspolicy_free(sb->pol);
	sb->pol = pol;
	/* Answers to queries already upstream are judged again
	 * (dns_answer.c): nothing is released under the old policy once the
	 * update has returned. */
	sb->pol_gen++;
	return 0;
}

int egr_dnsproxy_set_limits(struct egr_dnsproxy *p, uint32_t min_ttl_s, uint32_t ttl_grace_s,
			    const struct egr_exfil_limits *exfil)
{
	struct egr_exfil **fresh;
	size_t n = 0, i = 0;
	int err = 0;

	for (struct sb *sb = p->sbs; sb; sb = sb->next)
		n++;
	fresh = calloc(n ? n : 1, sizeof(*fresh));
	if (!fresh)
		return -ENOMEM;
	/* New trackers for every sandbox first, so that a failure changes
	 * nothing; their windows start empty. */
	for (struct sb *sb = p->sbs; sb && !err; sb = sb->next)
		err = egr_exfil_new(exfil, &fresh[i++]);
	if (err) {
		for (i = 0; i < n; i++)
			egr_exfil_free(fresh[i]);
		free(fresh);
		return err;
	}
	i = 0;
	for (struct sb *sb = p->sbs; sb; sb = sb->next) {
		egr_exfil_free(sb->exfil);
		sb->exfil = fresh[i++];
	}
	free(fresh);
	p->cfg.exfil = *exfil;
	p->cfg.min_ttl_s = min_ttl_s;
	p->cfg.ttl_grace_s = ttl_grace_s;
	return 0;
}

int egr_dnsproxy_remove_sandbox(struct egr_dnsproxy *p, uint32_t sandbox_id)
{
	struct sb **psb;

	if (!p)
		return -EINVAL;
	for (psb = &p->sbs; *psb; psb = &(*psb)->next) {
		struct sb *sb = *psb;

		if (sb->id != sandbox_id)
			continue;
		*psb = sb->next;
		sb_unhash(p, sb);
		sb_free(sb);
		dnsp_purge_clients(p, sandbox_id);
		log_debug("dns: sandbox %u: removed", sandbox_id);
		return 0;
	}
	return -ENOENT;
}

/* --- approvals (docs/dns.md "Approvals") ------------------------------------------ */

int egr_dnsproxy_ask_decide(struct egr_dnsproxy *p, uint64_t id, bool approve, const char *why)
{
	struct tconn *conns[ASK_WAITERS];
	size_t nconns = 0;
	struct sb *sb;
	struct ask *a;

	if (!p)
		return -EINVAL;
	a = dnsp_ask_take(p, id, &sb);
	if (!a)
		return -ENOENT;
	if (!approve) {
		dnsp_ask_refuse(sb, a, EGR_ASK_DENIED, why ? why : "not approved");
		dnsp_tx_flush(p);
		return 0;
	}
	a->pub.state = EGR_ASK_APPROVED;
	dnsp_ask_report(sb, a);
	/* Each held query goes the ordinary way: the grant now makes its name
	 * an allowed one; exfiltration and rebinding rules apply as ever. */
	for (uint32_t i = 0; i < a->nwait; i++) {
		struct client cl;
		bool seen = false;

		dnsp_ask_waiter_client(&a->w[i], &cl);
		dnsp_handle_query(sb, &cl, a->w[i].query, a->w[i].qlen);
		for (size_t k = 0; k < nconns; k++)
			seen = seen || conns[k] == a->w[i].conn;
		if (a->w[i].conn && !seen)
			conns[nconns++] = a->w[i].conn;
	}
	dnsp_ask_free(a);
	for (size_t k = 0; k < nconns; k++)
		dnsp_conn_settle(conns[k]);
	dnsp_tx_flush(p);
	return 0;
}

size_t egr_dnsproxy_ask_list(const struct egr_dnsproxy *p, const struct egr_dns_ask **out,
			     size_t max)
{
	return p ? dnsp_ask_list(p, out, max) : 0;
}

const struct egr_dns_ask *egr_dnsproxy_ask_find(const struct egr_dnsproxy *p, uint64_t id)
{
	for (const struct sb *sb = p && p->nasks ? p->sbs : NULL; sb; sb = sb->next)
		for (const struct ask *a = sb->asks; a; a = a->next)
			if (a->pub.id == id)
				return &a->pub;
	return NULL;
}

bool egr_dnsproxy_is_local(void *ctx, int family, const uint8_t *addr)
{
	const struct egr_dnsproxy_local *lc = ctx;
	const struct sb *sb;

	if (!lc || !lc->p)
		return true; /* cannot tell: fail closed */
	sb = sb_find(lc->p, lc->sandbox_id);
	if (sb)
		return dnsp_sb_is_local((void *)sb, family, addr);
	return egr_localaddr_is_local(lc->p->host_la, family, addr);
}

int egr_dnsproxy_stats(const struct egr_dnsproxy *p, uint32_t sandbox_id,
		       struct egr_dnsproxy_stats *out)
{
	const struct sb *sb = p ? sb_find(p, sandbox_id) : NULL;

	if (!out)
		return -EINVAL;
	if (!sb)
		return -ENOENT;
	*out = sb->st;
	/* What the listeners it shares dropped: a stranger's datagram names
	 * no sandbox to count it against. */
	out->foreign = sb->g ? sb->g->foreign : 0;
	out->tcp_conns = sb->nconns;
	out->inflight = sb->inflight;
	return 0;
}

int egr_dnsproxy_kernel_shed(const struct egr_dnsproxy *p, uint32_t sandbox_id, uint64_t *out)
{
	*out = 0;
	if (!p || !sb_find(p, sandbox_id))
		return -ENOENT;
	if (!p->cfg.verify_clients)
		return 0;
	return egr_bpf_dns_budget_dropped(p->cfg.bpf, sandbox_id, out);
}
