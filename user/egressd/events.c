// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The event stream: ring buffer consumer, userspace events, subscribers. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "clock.h"
#include "alerting.h"
#include "alerts.h"
#include "auditlog.h"
#include "dnsproxy.h"
#include "egr_decide.h"
#include "escape.h"
#include "events.h"
#include "fileio.h"
#include "log.h"
#include "netaddr.h"
#include "metrics.h"
#include "sandbox.h"

/* A --follow subscriber may fall this far behind; past it, events skip it
 * (counted per sandbox) until it is below half of that again, and then it
 * gets one aggregated "events_skipped" line instead of being cut off. */
#define SUB_MAX_PENDING (4u << 20)
#define SUB_SKIP_SBS 8
/* Detached sandboxes remembered for events still in the ring. */
#define GONE_MAX 256

struct sub {
	int fd;
	uint32_t sandbox;
	char *buf;          /* unsent bytes */
	size_t len, cap;
	bool partial;       /* part of buf's first line was already sent */
	bool closing;       /* dropped: flush the notice, then close */
	/* Events it was too far behind to take (publish), told in one
	 * aggregated line once it has caught up: per sandbox, the first
	 * SUB_SKIP_SBS sandboxes by id, the rest under 0. */
	uint64_t skipped;
	uint32_t skip_sb[8];
	uint64_t skip_n[8];
	unsigned closing_ticks;
	struct sub *next;
};

struct gone {
	uint32_t id;
	char *tenant, *execution_id;
};

/* Events handled per loop wake-up: a sandbox hammering denied connects
 * produces them faster than userspace turns them into JSON, and the loop
 * must still serve DNS and the control socket. The ring's epoll fd is
 * level-triggered, so the rest is handled on the next turn. */
#define EVENTS_PER_WAKEUP 1024

/* What egressd already reported of a sandbox's suppressed and lost kernel
 * events (egr_deny_budget), to report only the growth. */
struct budget_seen {
	uint32_t id;
	uint64_t suppressed, lost;
	struct budget_seen *next;
};

struct egr_events {
	struct budget_seen *budgets;
	uint64_t suppressed_reported; /* deny events reported in aggregate */
	unsigned int batch; /* events handled in the current consume call */
	unsigned int undrained_ticks; /* ticks in a row that left the ring non-empty */
	struct egr_bpf *bpf;
	struct egr_registry *reg;
	struct egr_loop *loop;
	struct ring_buffer *rb;
	struct egr_alerting *alerting;
	struct egr_auditlog *audit;
	char state_path[512];
	json_t **kept;
	size_t keep, head, nkept;
	uint64_t seq;
	uint64_t received, emitted, bad_version, lost_reported, lost_seen;
	uint64_t subs_total, subs_dropped;
	struct sub *subs;
	size_t nsubs;
	struct gone gone[GONE_MAX];
	size_t gone_next;
};

static void put_time(json_t *o, uint64_t unix_ns)
{
	char buf[40];

	egr_rfc3339_ns(unix_ns, buf, sizeof(buf));
	json_object_set_new(o, "time", json_string(buf));
}

static const char *type_name(uint32_t t)
{
	switch (t) {
	case EGR_EV_CONNECT:
		return "connect";
	case EGR_EV_SENDMSG:
		return "sendmsg";
	case EGR_EV_SOCK_CREATE:
		return "sock_create";
	case EGR_EV_SETSOCKOPT:
		return "setsockopt";
	case EGR_EV_BACKSTOP:
		return "backstop";
	case EGR_EV_INBOUND:
		return "inbound";
	case EGR_EV_QUOTA:
		return "quota";
	case EGR_EV_ESCAPE:
		return "escape";
	default:
		return NULL;
	}
}

static json_t *proto_json(uint32_t p)
{
	const char *name = egr_ipproto_name(p);

	return name ? json_string(name) : json_integer(p);
}

static json_t *sock_type_json(uint32_t t)
{
	switch (t) {
	case SOCK_STREAM:
		return json_string("stream");
	case SOCK_DGRAM:
		return json_string("dgram");
	case SOCK_RAW:
		return json_string("raw");
	case SOCK_SEQPACKET:
		return json_string("seqpacket");
	default:
		return json_integer(t);
	}
}

/* Tenant and execution id of a sandbox: the registry, else a recently
 * detached one. */
static void put_identity(struct egr_events *ev, json_t *o, uint32_t sandbox, uint32_t tenant_id)
{
	const char *tenant = NULL, *exec = NULL;
	struct egr_sb *sb = sandbox ? egr_reg_find(ev->reg, NULL, sandbox) : NULL;

	if (sb) {
		tenant = sb->tenant;
		exec = sb->execution_id;
	} else if (sandbox) {
		for (size_t i = 0; i < GONE_MAX; i++)
			if (ev->gone[i].id == sandbox) {
				tenant = ev->gone[i].tenant;
				exec = ev->gone[i].execution_id;
			}
	}
	if (!tenant && tenant_id && tenant_id <= ev->reg->ntenants)
		tenant = ev->reg->tenants[tenant_id - 1];
	if (!json_object_get(o, "tenant"))
		json_object_set_new(o, "tenant", tenant ? json_string(tenant) : json_null());
	if (!json_object_get(o, "execution_id"))
		json_object_set_new(o, "execution_id", exec ? json_string(exec) : json_null());
}

/* --- subscribers --------------------------------------------------------------- */

static void sub_close(struct egr_events *ev, struct sub *s)
{
	struct sub **ps;

	for (ps = &ev->subs; *ps; ps = &(*ps)->next) {
		if (*ps == s) {
			*ps = s->next;
			break;
		}
	}
	egr_loop_del(ev->loop, s->fd);
	close(s->fd);
	free(s->buf);
	free(s);
	ev->nsubs--;
}

/* Write what can be written. -1 when the subscriber is gone (closed). */
static int sub_flush(struct egr_events *ev, struct sub *s)
{
	size_t off = 0;

	while (off < s->len) {
		ssize_t n = send(s->fd, s->buf + off, s->len - off, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			sub_close(ev, s);
			return -1;
		}
		off += (size_t)n;
	}
	if (off) {
		/* partial: whether the new first byte continues a line. */
		s->partial = off < s->len && s->buf[off - 1] != '\n';
		memmove(s->buf, s->buf + off, s->len - off);
		s->len -= off;
	}
	if (s->closing && s->len == 0) {
		sub_close(ev, s);
		return -1;
	}
	return 0;
}

static int sub_append(struct sub *s, const char *data, size_t n)
{
	if (s->len + n > s->cap) {
		size_t cap = s->cap ? s->cap : 65536;
		char *nb;

		while (cap < s->len + n)
			cap *= 2;
		nb = realloc(s->buf, cap);
		if (!nb)
			return -ENOMEM;
		s->buf = nb;
		s->cap = cap;
	}
	memcpy(s->buf + s->len, data, n);
	s->len += n;
	return 0;
}

/* A subscriber too slow to keep up: keep the line in flight, replace the
 * backlog with a notice saying why, close once that is out. */
static void sub_drop(struct egr_events *ev, struct sub *s, const char *why)
{
	char notice[256];
	size_t keep = 0;

	if (s->partial) {
		char *nl = memchr(s->buf, '\n', s->len);

		keep = nl ? (size_t)(nl - s->buf) + 1 : s->len;
	}
	s->len = keep;
	snprintf(notice, sizeof(notice),
		 "{\"type\":\"subscriber_dropped\",\"reason\":\"%s\",\"v\":%d}\n", why,
		 EGR_EVENTS_SCHEMA);
	sub_append(s, notice, strlen(notice));
	s->closing = true;
	ev->subs_dropped++;
	log_warn("events: dropped a --follow subscriber: %s", why);
	sub_flush(ev, s);
}

/* Too far behind for this event: count it against its sandbox. */
static void sub_skip(struct sub *s, uint32_t sandbox)
{
	int i;

	s->skipped++;
	for (i = 1; i < SUB_SKIP_SBS; i++)
		if (s->skip_sb[i] == sandbox || (!s->skip_sb[i] && sandbox)) {
			s->skip_sb[i] = sandbox;
			s->skip_n[i]++;
			return;
		}
	s->skip_n[0]++; /* no sandbox, or past SUB_SKIP_SBS of them */
}

/* Caught up (below half the limit): one line says what it missed. */
static void sub_catch_up(struct egr_events *ev, struct sub *s)
{
	json_t *o, *by;
	char *line;
	size_t n;

	if (!s->skipped || s->closing || s->len > SUB_MAX_PENDING / 2)
		return;
	by = json_object();
	for (int i = 0; by && i < SUB_SKIP_SBS; i++) {
		char key[16];

		if (!s->skip_n[i])
			continue;
		snprintf(key, sizeof(key), "%u", i ? s->skip_sb[i] : 0);
		json_object_set_new(by, key, json_integer((json_int_t)s->skip_n[i]));
	}
	o = json_pack("{s:i, s:s, s:s, s:I, s:o}", "v", EGR_EVENTS_SCHEMA, "type",
		      "events_skipped", "reason", "subscriber too slow: over 4 MiB pending",
		      "skipped", (json_int_t)s->skipped, "by_sandbox", by ? by : json_null());
	put_time(o, egr_clock_ns(CLOCK_REALTIME));
	line = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (!line)
		return;
	log_warn("events: a --follow subscriber missed %" PRIu64 " events (too slow)", s->skipped);
	n = strlen(line);
	line[n++] = '\n'; /* overwrites the NUL: length is n */
	if (sub_append(s, line, n) == 0) {
		s->skipped = 0;
		memset(s->skip_sb, 0, sizeof(s->skip_sb));
		memset(s->skip_n, 0, sizeof(s->skip_n));
	}
	free(line);
	sub_flush(ev, s);
}

static void on_sub(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_events *ev = ctx;
	struct sub *s;
	char junk[512];

	for (s = ev->subs; s && s->fd != fd; s = s->next)
		;
	if (!s)
		return;
	/* Gone entirely (not just done writing: a half-closed peer may still
	 * read its stream). */
	if (events & (EPOLLHUP | EPOLLERR)) {
		sub_close(ev, s);
		return;
	}
	if ((events & EPOLLIN) && !(events & EPOLLRDHUP)) {
		/* Subscribers have nothing more to say: discard. */
		for (;;) {
			ssize_t n = recv(fd, junk, sizeof(junk), MSG_DONTWAIT);

			if (n <= 0)
				break;
		}
	}
	if (events & EPOLLOUT) {
		sub_flush(ev, s);
		sub_catch_up(ev, s);
	}
}

/* Follow subscribers at once: each may hold up to SUB_MAX_PENDING of
 * backlog and costs a dump and a send per event. */
#define EVENTS_MAX_SUBSCRIBERS 32

bool egr_events_subscriber_room(const struct egr_events *ev)
{
	return ev->nsubs < EVENTS_MAX_SUBSCRIBERS;
}

int egr_events_subscribe(struct egr_events *ev, int fd, uint32_t sandbox)
{
	struct sub *s;
	int nfd, err;

	if (!egr_events_subscriber_room(ev))
		return -EMFILE;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	nfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (nfd < 0) {
		err = -errno;
		free(s);
		return err;
	}
	fcntl(nfd, F_SETFL, fcntl(nfd, F_GETFL) | O_NONBLOCK);
	s->fd = nfd;
	s->sandbox = sandbox;
	err = egr_loop_add(ev->loop, nfd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, on_sub, ev);
	if (err) {
		close(nfd);
		free(s);
		return err;
	}
	s->next = ev->subs;
	ev->subs = s;
	ev->nsubs++;
	ev->subs_total++;
	return 0;
}

static void publish(struct egr_events *ev, json_t *o)
{
	uint32_t sandbox = (uint32_t)json_integer_value(json_object_get(o, "sandbox"));
	struct sub *s, *next;
	char *line = NULL;
	size_t n = 0;

	/* Keep it. */
	if (ev->keep) {
		json_decref(ev->kept[ev->head]);
		ev->kept[ev->head] = json_incref(o);
		ev->head = (ev->head + 1) % ev->keep;
		if (ev->nkept < ev->keep)
			ev->nkept++;
	}
	if (ev->alerting)
		egr_alerting_event(ev->alerting, o);
	for (s = ev->subs; s; s = next) {
		next = s->next;
		if (s->closing || (s->sandbox && s->sandbox != sandbox))
			continue;
		if (!line) {
			line = json_dumps(o, JSON_COMPACT);
			if (!line)
				return;
			n = strlen(line);
			line[n++] = '\n'; /* overwrites the NUL: length is n */
		}
		if (s->len + n > SUB_MAX_PENDING || (s->skipped && s->len > SUB_MAX_PENDING / 2)) {
			sub_skip(s, sandbox);
			continue;
		}
		if (sub_append(s, line, n)) {
			sub_drop(ev, s, "out of memory");
			continue;
		}
		sub_flush(ev, s);
	}
	free(line);
}

/* --- kernel events --------------------------------------------------------------- */

_Static_assert(sizeof(struct egr_escape_event) == sizeof(struct egr_event) + 24,
	       "struct egr_escape_event is struct egr_event and the move");

static const char *escape_action(uint32_t a)
{
	switch (a) {
	case EGR_ESCAPE_KILLED:
		return "killed";
	case EGR_ESCAPE_ALERTED:
		return "alerted";
	case EGR_ESCAPE_BY_OUTSIDER:
		return "moved_by_outsider";
	case EGR_ESCAPE_KILL_FAILED:
		return "kill_failed";
	default:
		return "unknown";
	}
}

/* A task left its sandbox cgroup (bpf/escape.bpf.c). The kernel killed the
 * mover when it was in the sandbox; a different process it moved out (or
 * forked out with CLONE_INTO_CGROUP, or forked by a marked process) is
 * killed here, at once, by its escaped mark wherever it has moved since: it
 * is outside every hook. */
static void put_escape(struct egr_events *ev, json_t *o, const struct egr_escape_event *x)
{
	json_object_set_new(o, "action", json_string(escape_action(x->action)));
	json_object_set_new(o, "from_cgroup_id", json_integer((json_int_t)x->from_cgroup_id));
	json_object_set_new(o, "to_cgroup_id", json_integer((json_int_t)x->to_cgroup_id));
	json_object_set_new(o, "target_pid", json_integer(x->target_pid));
	if ((x->action == EGR_ESCAPE_KILLED || x->action == EGR_ESCAPE_KILL_FAILED) &&
	    x->target_pid && x->target_pid != x->ev.pid) {
		int err = egr_escape_kill_moved(ev->bpf->fd_proc_home, x->target_pid);

		json_object_set_new(o, "target_killed", json_boolean(!err));
		if (err)
			log_error("escape from sandbox %u: kill moved process %u: %s",
				  x->ev.sandbox_id, x->target_pid, strerror(-err));
		/* And whatever else is marked: a child the moved process forked
		 * whose event was lost, one moved again since. */
		egr_escape_kill_marked(ev->bpf->fd_proc_home);
	}
}

static int on_ring(void *ctx, void *data, size_t size)
{
	struct egr_events *ev = ctx;
	const struct egr_event *e = data;
	uint64_t off = egr_clock_ns(CLOCK_REALTIME) - egr_clock_ns(CLOCK_BOOTTIME);
	char addr[INET6_ADDRSTRLEN], comm[sizeof(e->comm) + 1];
	const char *tname;
	json_t *o;
	bool inbound;

	ev->received++;
	if (size < sizeof(*e) || e->version < 1 ||
	    (e->type == EGR_EV_ESCAPE && size < sizeof(struct egr_escape_event))) {
		/* An older layout than ours is not something we can read. */
		ev->bad_version++;
		return 0;
	}
	tname = type_name(e->type);
	o = json_object();
	if (!o)
		return 0;
	json_object_set_new(o, "v", json_integer(EGR_EVENTS_SCHEMA));
	json_object_set_new(o, "seq", json_integer((json_int_t)++ev->seq));
	json_object_set_new(o, "type", tname ? json_string(tname) : json_integer(e->type));
	json_object_set_new(o, "origin", json_string("kernel"));
	put_time(o, e->ts_ns + off);
	json_object_set_new(o, "sandbox", json_integer(e->sandbox_id));
	put_identity(ev, o, e->sandbox_id, e->tenant_id);
	json_object_set_new(o, "policy_id", json_integer(e->policy_id));
	json_object_set_new(o, "verdict", json_string(e->verdict == EGR_ALLOW		? "allow"
						     : e->verdict == EGR_VERDICT_AUDIT ? "audit"
											: "deny"));
	if (e->pid) {
		memcpy(comm, e->comm, sizeof(e->comm));
		comm[sizeof(e->comm)] = '\0';
		json_object_set_new(o, "pid", json_integer(e->pid));
		json_object_set_new(o, "comm", json_string(comm));
		json_object_set_new(o, "cgroup_id", json_integer((json_int_t)e->cgroup_id));
	}
	if (e->family == EGR_AF_INET || e->family == EGR_AF_INET6)
		json_object_set_new(o, "family",
				    json_string(e->family == EGR_AF_INET ? "ipv4" : "ipv6"));
	else if (e->family)
		json_object_set_new(o, "family", json_integer(e->family));
	if (e->protocol || (e->type != EGR_EV_SETSOCKOPT && e->type != EGR_EV_ESCAPE))
		json_object_set_new(o, "protocol", proto_json(e->protocol));
	if (e->sock_type)
		json_object_set_new(o, "sock_type", sock_type_json(e->sock_type));
	inbound = e->type == EGR_EV_INBOUND;
	switch (e->type) {
	case EGR_EV_CONNECT:
	case EGR_EV_SENDMSG:
	case EGR_EV_BACKSTOP:
	case EGR_EV_INBOUND:
	case EGR_EV_QUOTA:
		if (inet_ntop(e->family == EGR_AF_INET6 ? AF_INET6 : AF_INET, e->addr, addr,
			      sizeof(addr))) {
			json_object_set_new(o, inbound ? "src" : "dst", json_string(addr));
			json_object_set_new(o, inbound ? "src_port" : "port", json_integer(e->port));
		}
		break;
	case EGR_EV_SETSOCKOPT:
		json_object_set_new(o, "level", json_integer(e->level));
		json_object_set_new(o, "optname", json_integer(e->optname));
		break;
	case EGR_EV_ESCAPE:
		put_escape(ev, o, (const struct egr_escape_event *)data);
		break;
	default:
		break;
	}
	/* Denied and would-be denied destinations go into the execution's
	 * audit record (what `egressctl suggest` reads). */
	if (ev->audit && e->verdict != EGR_ALLOW)
		egr_auditlog_kernel_event(ev->audit, o);
	publish(ev, o);
	json_decref(o);
	/* Returning < 0 stops libbpf's consume loop after this sample (it
	 * is already consumed): the next wake-up takes the rest. */
	if (++ev->batch >= EVENTS_PER_WAKEUP)
		return -EAGAIN;
	return 0;
}

static void on_ring_ready(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_events *ev = ctx;
	int n;

	ev->batch = 0;
	n = ring_buffer__consume(ev->rb);
	if (n < 0 && n != -EAGAIN)
		log_debug("events: ring_buffer__consume: %s", strerror(-n));
}

/* --- userspace events ------------------------------------------------------------- */

static void remember_gone(struct egr_events *ev, const json_t *o)
{
	struct gone *g = &ev->gone[ev->gone_next];
	const char *t = json_string_value(json_object_get(o, "tenant"));
	const char *x = json_string_value(json_object_get(o, "execution_id"));

	free(g->tenant);
	free(g->execution_id);
	g->id = (uint32_t)json_integer_value(json_object_get(o, "sandbox"));
	g->tenant = t ? strdup(t) : NULL;
	g->execution_id = x ? strdup(x) : NULL;
	ev->gone_next = (ev->gone_next + 1) % GONE_MAX;
}

void egr_events_emit(struct egr_events *ev, json_t *obj)
{
	json_t *o, *sb;

	if (!ev || !json_is_object(obj))
		return;
	o = json_deep_copy(obj);
	if (!o)
		return;
	ev->emitted++;
	json_object_set_new(o, "v", json_integer(EGR_EVENTS_SCHEMA));
	json_object_set_new(o, "seq", json_integer((json_int_t)++ev->seq));
	if (!json_object_get(o, "origin"))
		json_object_set_new(o, "origin", json_string("egressd"));
	if (!json_is_string(json_object_get(o, "time")))
		put_time(o, egr_clock_ns(CLOCK_REALTIME));
	sb = json_object_get(o, "sandbox");
	if (json_is_integer(sb))
		put_identity(ev, o, (uint32_t)json_integer_value(sb), 0);
	if (json_is_integer(sb) &&
	    strcmp(json_string_value(json_object_get(o, "type")) ?: "", "detach") == 0)
		remember_gone(ev, o);
	publish(ev, o);
	json_decref(o);
}

/* The answer's first addresses, each with its TTL and whether it went into
 * the sandbox's allowlist. */
static json_t *dns_addresses(const struct egr_dns_event *d)
{
	json_t *arr = json_array();

	for (size_t i = 0; arr && i < d->naddrs_listed && i < EGR_DNSPROXY_EVENT_ADDRS; i++) {
		char text[INET6_ADDRSTRLEN];

		if (!inet_ntop(d->addrs[i].family, d->addrs[i].addr, text, sizeof(text)))
			continue;
		json_array_append_new(arr, json_pack("{s:s, s:I, s:b}", "addr", text, "ttl",
						     (json_int_t)d->addrs[i].ttl, "learned",
						     (d->learned_mask >> i) & 1));
	}
	return arr ? arr : json_null();
}

void egr_events_dns(struct egr_events *ev, const struct egr_dns_event *d)
{
	static const char *const verdicts[] = {
		[EGR_DNS_V_ALLOWED] = "allow", [EGR_DNS_V_REFUSED] = "deny",
		[EGR_DNS_V_SERVFAIL] = "servfail", [EGR_DNS_V_EXFIL] = "exfil",
		[EGR_DNS_V_CAP] = "servfail", [EGR_DNS_V_REBIND] = "rebind", [EGR_DNS_V_AUDIT] = "audit",
	};
	char a[INET6_ADDRSTRLEN];
	json_t *o, *arr;

	if (!ev || !d)
		return;
	o = json_pack("{s:s, s:I, s:s, s:o, s:i, s:s, s:i, s:s, s:I}", "type", "dns", "sandbox",
		      (json_int_t)d->sandbox_id, "verdict",
		      (unsigned)d->verdict < sizeof(verdicts) / sizeof(verdicts[0]) &&
				      verdicts[d->verdict] ? verdicts[d->verdict] : "deny",
		      "qname", d->qname ? json_string(d->qname) : json_null(), "qtype",
		      (int)d->qtype, "transport", d->transport == IPPROTO_TCP ? "tcp" : "udp",
		      "rcode", (int)d->rcode, "reason", d->reason ? d->reason : "", "answers",
		      (json_int_t)d->naddrs);
	if (o && d->tenant)
		json_object_set_new(o, "tenant", json_string(d->tenant));
	/* The answer's addresses (learned ones for reason "learned"), at most
	 * EGR_DNSPROXY_EVENT_ADDRS, each with its TTL and whether it went into
	 * the allowlist; "answers" counts all of them. */
	if (o)
		json_object_set_new(o, "addresses", dns_addresses(d));
	if (o && d->verdict == EGR_DNS_V_REBIND && (arr = json_array())) {
		for (size_t i = 0; i < d->nstripped_listed; i++) {
			const struct egr_dns_stripped *st = &d->stripped[i];

			if (!inet_ntop(st->family, st->addr, a, sizeof(a)))
				continue;
			json_array_append_new(arr, json_pack("{s:s, s:s, s:s}", "addr", a, "class",
							     egr_rebind_class_name(st->cls), "form",
							     egr_rebind_form_name(st->form)));
		}
		json_object_set_new(o, "stripped", arr);
		json_object_set_new(o, "stripped_total", json_integer((json_int_t)d->nstripped));
	}
	egr_events_emit(ev, o);
	json_decref(o);
}

/* --- lost events -------------------------------------------------------------------- */

static void save_lost(struct egr_events *ev)
{
	char buf[64];
	int len = snprintf(buf, sizeof(buf), "{\"events_lost_reported\":%" PRIu64 "}\n",
			   ev->lost_seen);
	int err = egr_replace_file(ev->state_path, buf, (size_t)len, 0600);

	if (err)
		log_warn("events: cannot write %s: %s", ev->state_path, strerror(-err));
}

static void report_lost(struct egr_events *ev, uint64_t lost, uint64_t total, const char *why)
{
	char summary[256];
	json_t *o;

	ev->lost_reported += lost;
	log_warn("events: %" PRIu64 " kernel event(s) lost (%s; %" PRIu64 " in total)", lost, why,
		 total);
	o = json_pack("{s:s, s:I, s:I, s:s}", "type", "lost_events", "lost", (json_int_t)lost,
		      "lost_total", (json_int_t)total, "reason", why);
	egr_events_emit(ev, o);
	json_decref(o);
	if (ev->audit && egr_auditlog_gap(ev->audit, "ring buffer overflow", lost))
		log_error("events: cannot write the audit gap record for %" PRIu64 " lost events",
			  lost);
	if (ev->alerting) {
		struct egr_alert_in in = {
			.type = "lost_events",
			.severity = EGR_SEV_CRITICAL,
			.summary = summary,
			.evidence = json_pack("{s:I, s:I, s:s}", "lost", (json_int_t)lost,
					      "lost_total", (json_int_t)total, "reason", why),
		};

		snprintf(summary, sizeof(summary),
			 "%" PRIu64 " kernel event(s) lost: the ring buffer was full (%s)", lost,
			 why);
		egr_alerting_raise(ev->alerting, &in);
	}
}

static void check_lost(struct egr_events *ev)
{
	uint64_t cnt[EGR_CNT_MAX];

	if (egr_bpf_counters(ev->bpf, cnt))
		return;
	if (cnt[EGR_CNT_EVENTS_LOST] > ev->lost_seen) {
		uint64_t lost = cnt[EGR_CNT_EVENTS_LOST] - ev->lost_seen;

		ev->lost_seen = cnt[EGR_CNT_EVENTS_LOST];
		report_lost(ev, lost, ev->lost_seen, "ring buffer full");
		save_lost(ev);
	} else if (cnt[EGR_CNT_EVENTS_LOST] < ev->lost_seen) {
		/* Maps recreated (fresh bpffs): start over. */
		ev->lost_seen = cnt[EGR_CNT_EVENTS_LOST];
		save_lost(ev);
	}
}

void egr_events_poll(struct egr_events *ev)
{
	ev->batch = 0;
	ring_buffer__consume(ev->rb);
	/* Losses happened when the ring was full, after everything still in
	 * it: report them once it is drained, so the stream keeps that order
	 * (and the report is not pushed out of the history by older events). */
	if (ev->batch < EVENTS_PER_WAKEUP || ++ev->undrained_ticks >= 5) {
		/* ... but under sustained overload, after 5 ticks anyway. */
		ev->undrained_ticks = 0;
		check_lost(ev);
	}
}

static struct budget_seen *budget_seen(struct egr_events *ev, uint32_t id)
{
	struct budget_seen *b;

	for (b = ev->budgets; b; b = b->next)
		if (b->id == id)
			return b;
	b = calloc(1, sizeof(*b));
	if (b) {
		b->id = id;
		b->next = ev->budgets;
		ev->budgets = b;
	}
	return b;
}

static json_t *top_json(const struct egr_deny_budget *v)
{
	json_t *arr = json_array();

	for (int i = 0; arr && i < EGR_DENY_TOP; i++) {
		const struct egr_deny_top *t = &v->top[i];
		char addr[INET6_ADDRSTRLEN];

		if (!t->count || !inet_ntop(t->family == EGR_AF_INET6 ? AF_INET6 : AF_INET,
					    t->addr, addr, sizeof(addr)))
			continue;
		json_array_append_new(arr, json_pack("{s:s, s:i, s:o, s:I}", "dst", addr, "port",
						     (int)t->port, "protocol",
						     proto_json(t->protocol), "count",
						     (json_int_t)t->count));
	}
	return arr ? arr : json_null();
}

/*
 * One aggregated event per sandbox and tick for what its deny budget held
 * back ("N denies suppressed, top destinations"), and one per sandbox for
 * its events the ring had no room for, so that losses are attributed.
 */
static void report_budgets(struct egr_events *ev)
{
	uint32_t key, *prev = NULL;
	struct egr_deny_budget v;

	while (bpf_map_get_next_key(ev->bpf->fd_deny_budget, prev, &key) == 0) {
		struct budget_seen *b;
		json_t *o;

		prev = &key;
		if (bpf_map_lookup_elem(ev->bpf->fd_deny_budget, &key, &v) ||
		    !(b = budget_seen(ev, key)))
			continue;
		if (v.suppressed > b->suppressed) {
			uint64_t n = v.suppressed - b->suppressed;

			b->suppressed = v.suppressed;
			ev->suppressed_reported += n;
			o = json_pack("{s:s, s:s, s:I, s:s, s:I, s:I, s:o}", "type",
				      "denies_suppressed", "origin", "kernel", "sandbox",
				      (json_int_t)key, "verdict", "deny", "suppressed", (json_int_t)n,
				      "suppressed_total", (json_int_t)v.suppressed, "top",
				      top_json(&v));
			egr_events_emit(ev, o);
			json_decref(o);
		}
		if (v.lost > b->lost) {
			uint64_t n = v.lost - b->lost;

			b->lost = v.lost;
			o = json_pack("{s:s, s:I, s:I, s:I, s:s}", "type", "lost_events", "sandbox",
				      (json_int_t)key, "lost", (json_int_t)n, "lost_total",
				      (json_int_t)v.lost, "reason", "ring buffer full");
			egr_events_emit(ev, o);
			json_decref(o);
		}
	}
	/* Forget sandboxes whose budget is gone (detached). */
	for (struct budget_seen **pb = &ev->budgets; *pb;) {
		struct budget_seen *b = *pb;

		if (bpf_map_lookup_elem(ev->bpf->fd_deny_budget, &b->id, &v) < 0 &&
		    errno == ENOENT) {
			*pb = b->next;
			free(b);
			continue;
		}
		pb = &b->next;
	}
}

int egr_events_sandbox_figures(struct egr_events *ev, uint32_t sandbox_id, uint64_t *suppressed,
			       uint64_t *lost)
{
	struct egr_deny_budget v;

	*suppressed = *lost = 0;
	if (!ev)
		return -EINVAL;
	if (bpf_map_lookup_elem(ev->bpf->fd_deny_budget, &sandbox_id, &v))
		return errno == ENOENT ? 0 : -errno;
	*suppressed = v.suppressed;
	*lost = v.lost;
	return 0;
}

/* One family of per-sandbox budget figures, labelled as the meter series
 * are (tenant, sandbox). */
static void budget_family(struct egr_events *ev, struct egr_mbuf *mb, const char *name,
			  const char *help, bool lost)
{
	uint32_t key, *prev = NULL;
	struct egr_deny_budget v;

	egr_mbuf_family(mb, name, "counter", help);
	while (bpf_map_get_next_key(ev->bpf->fd_deny_budget, prev, &key) == 0) {
		const struct egr_sb *sb = egr_reg_find(ev->reg, NULL, key);

		prev = &key;
		if (!sb || bpf_map_lookup_elem(ev->bpf->fd_deny_budget, &key, &v))
			continue; /* a detached sandbox's figures are in its audit record */
		egr_mbuf_printf(mb, "%s{tenant=\"", name);
		egr_mbuf_label(mb, sb->tenant ? sb->tenant : "");
		egr_mbuf_printf(mb, "\",sandbox=\"%u\"} %" PRIu64 "\n", key,
				(uint64_t)(lost ? v.lost : v.suppressed));
	}
}

void egr_events_metrics(void *ctx, struct egr_mbuf *mb)
{
	struct egr_events *ev = ctx;

	budget_family(ev, mb, "egressd_events_suppressed_total",
		      "Deny events past the sandbox's kernel budget, reported in aggregate "
		      "(docs/events.md).",
		      false);
	budget_family(ev, mb, "egressd_sandbox_events_lost_total",
		      "Events of the sandbox the ring buffer had no room for.", true);
}

static void on_tick(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_events *ev = ctx;
	struct sub *s, *next;

	/* Drain first, so a loss is reported after the events that made it. */
	egr_events_poll(ev);
	report_budgets(ev);
	for (s = ev->subs; s; s = next) {
		next = s->next;
		if (s->closing && ++s->closing_ticks > 5)
			sub_close(ev, s);
		else
			sub_catch_up(ev, s);
	}
}

/* --- life ------------------------------------------------------------------------------ */

int egr_events_new(struct egr_events **out, struct egr_bpf *bpf, struct egr_registry *reg,
		   struct egr_loop *loop, size_t keep, const char *state_dir)
{
	struct egr_events *ev = calloc(1, sizeof(*ev));
	uint64_t cnt[EGR_CNT_MAX];
	json_t *st;
	int err;

	if (!ev)
		return -ENOMEM;
	ev->bpf = bpf;
	ev->reg = reg;
	ev->loop = loop;
	ev->keep = keep;
	if (keep && !(ev->kept = calloc(keep, sizeof(*ev->kept)))) {
		free(ev);
		return -ENOMEM;
	}
	snprintf(ev->state_path, sizeof(ev->state_path), "%s/events.state", state_dir);
	ev->rb = ring_buffer__new(bpf->fd_events, on_ring, ev, NULL);
	if (!ev->rb) {
		err = -errno;
		free(ev->kept);
		free(ev);
		return err ? err : -EINVAL;
	}
	err = egr_loop_add(loop, ring_buffer__epoll_fd(ev->rb), EPOLLIN, on_ring_ready, ev);
	if (!err)
		err = egr_loop_every(loop, 1000, on_tick, ev);
	if (err) {
		egr_loop_del(loop, ring_buffer__epoll_fd(ev->rb));
		ring_buffer__free(ev->rb);
		free(ev->kept);
		free(ev);
		return err;
	}
	/* What an earlier egressd already reported; losses since (while no
	 * egressd ran) are reported at the first tick. Without a state file,
	 * what the counter says now is taken as known. */
	st = json_load_file(ev->state_path, 0, NULL);
	if (egr_bpf_counters(bpf, cnt) == 0)
		ev->lost_seen = cnt[EGR_CNT_EVENTS_LOST];
	if (json_is_integer(json_object_get(st, "events_lost_reported")) &&
	    (uint64_t)json_integer_value(json_object_get(st, "events_lost_reported")) <=
		    ev->lost_seen)
		ev->lost_seen = (uint64_t)json_integer_value(
			json_object_get(st, "events_lost_reported"));
	json_decref(st);
	save_lost(ev);
	*out = ev;
	return 0;
}

void egr_events_set_sinks(struct egr_events *ev, struct egr_alerting *alerting,
			  struct egr_auditlog *audit)
{
	ev->alerting = alerting;
	ev->audit = audit;
}

void egr_events_free(struct egr_events *ev)
{
	if (!ev)
		return;
	while (ev->subs)
		sub_close(ev, ev->subs);
	while (ev->budgets) {
		struct budget_seen *b = ev->budgets;

		ev->budgets = b->next;
		free(b);
	}
	ring_buffer__free(ev->rb);
	for (size_t i = 0; i < ev->keep; i++)
		json_decref(ev->kept[i]);
	for (size_t i = 0; i < GONE_MAX; i++) {
		free(ev->gone[i].tenant);
		free(ev->gone[i].execution_id);
	}
	free(ev->kept);
	free(ev);
}

json_t *egr_events_query(struct egr_events *ev, uint32_t sandbox, size_t limit)
{
	json_t *arr = json_array();
	size_t start, n = 0;

	if (!arr)
		return NULL;
	/* Newest first to apply the limit, then reversed into oldest first. */
	start = (ev->head + ev->keep - ev->nkept) % (ev->keep ? ev->keep : 1);
	for (size_t i = ev->nkept; i-- > 0;) {
		json_t *o = ev->kept[(start + i) % ev->keep];

		if (sandbox &&
		    (uint32_t)json_integer_value(json_object_get(o, "sandbox")) != sandbox)
			continue;
		json_array_insert(arr, 0, o);
		if (limit && ++n >= limit)
			break;
	}
	return arr;
}

json_t *egr_events_status(struct egr_events *ev)
{
	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "received",
			 (json_int_t)ev->received, "emitted", (json_int_t)ev->emitted, "lost",
			 (json_int_t)ev->lost_reported, "lost_counter", (json_int_t)ev->lost_seen,
			 "bad_version", (json_int_t)ev->bad_version, "kept", (json_int_t)ev->nkept,
			 "subscribers", (json_int_t)ev->nsubs, "subscribers_total",
			 (json_int_t)ev->subs_total, "subscribers_dropped",
			 (json_int_t)ev->subs_dropped);
}
