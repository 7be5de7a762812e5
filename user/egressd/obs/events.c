// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The event stream: ring buffer consumer, history, --follow subscribers. */
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

#include <bpf/libbpf.h>

#include "alerts.h"
#include "budgets.h"
#include "dns/dnsproxy.h"
#include "kernel/escape.h"
#include "clock.h"
#include "events.h"
#include "fileio.h"
#include "inspect.h"
#include "log.h"
#include "sandbox.h"

/* A --follow subscriber may fall this far behind; past it, events skip it
 * (counted per sandbox) until it is below half of that again, and then it
 * gets one aggregated "events_skipped" line instead of being cut off. */
#define SUB_MAX_PENDING (4u << 20)
#define SUB_SKIP_SBS 8

struct sub {
	int fd;
	uint32_t sandbox;
	char *buf;          /* unsent bytes */
	size_t len, cap;
	bool partial;       /* part of buf's first line was already sent */
	bool closing;       /* dropped: flush the notice, then close */
	bool out_armed;     /* watched for EPOLLOUT (only while buf is not empty) */
	bool rdhup;         /* the peer shut its side: no longer watched for input */
	/* Events it was too far behind to take (publish), told in one
	 * aggregated line once it has caught up: per sandbox, the first
	 * SUB_SKIP_SBS sandboxes by id, the rest under 0. */
	uint64_t skipped;
	uint32_t skip_sb[8];
	uint64_t skip_n[8];
	unsigned closing_ticks;
	struct sub *next;
};

/* Detached sandboxes remembered for events still in the ring. */
#define GONE_MAX 256

struct gone {
	uint32_t id;
	char *tenant, *execution_id;
	char *container; /* its "container", compact JSON; NULL: none */
};

/* Events handled per loop wake-up: a sandbox hammering denied connects
 * produces them faster than userspace handles them, and the loop must still
 * serve DNS and the control socket. The ring's epoll fd is level-triggered,
 * so the rest is handled on the next turn. */
#define EVENTS_PER_WAKEUP 1024

/*
 * A record of the history: the bus record copied with everything it points
 * to (one allocation), and the identity the stream resolved when it was
 * published. Rendered to JSON only when `egressctl events` asks: the
 * history costs a copy per event, not a JSON object (docs/architecture.md).
 */
struct kept {
	struct egr_rec rec;
	const char *tenant, *execution_id;
	const char *container; /* compact JSON of the sandbox's container, or NULL */
	union {
		struct egr_escape_event kernel;
		struct egr_dns_event dns;
		struct egr_inspect_event inspect;
		struct egr_sb sb; /* identity members only */
		struct egr_deny_budget budget;
		struct egr_approval_event approval;
	} u;
	char strings[];
};

struct egr_events {
	struct egr_budgets budgets;
	unsigned int batch; /* events handled in the current consume call */
	unsigned int undrained_ticks; /* ticks in a row that left the ring non-empty */
	struct egr_bpf *bpf;
	struct egr_registry *reg;
	struct egr_loop *loop;
	struct egr_bus *bus;
	struct ring_buffer *rb;
	char state_path[512];
	struct kept **kept;
	size_t keep, head, nkept;
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

/* Tenant and execution id of a sandbox: the registry, else a recently
 * detached one, else (kernel events) the tenant the kernel named. */
static void identity_of(struct egr_events *ev, uint32_t sandbox, uint32_t tenant_id,
			const char **tenant, const char **exec, const json_t **ctr,
			const char **ctr_text)
{
	struct egr_sb *sb = sandbox ? egr_reg_find(ev->reg, NULL, sandbox) : NULL;

	*tenant = *exec = *ctr_text = NULL;
	*ctr = NULL;
	if (sb) {
		*tenant = sb->tenant;
		*exec = sb->execution_id;
		*ctr = sb->container;
	} else if (sandbox) {
		for (size_t i = 0; i < GONE_MAX; i++)
			if (ev->gone[i].id == sandbox) {
				*tenant = ev->gone[i].tenant;
				*exec = ev->gone[i].execution_id;
				*ctr_text = ev->gone[i].container;
			}
	}
	if (!*tenant && tenant_id)
		*tenant = egr_reg_tenant_name(ev->reg, tenant_id);
}

static void rec_identity(struct egr_events *ev, const struct egr_rec *r, const char **tenant,
			 const char **exec, const json_t **ctr, const char **ctr_text)
{
	identity_of(ev, r->sandbox, r->kind == EGR_REC_KERNEL ? r->kernel.e->tenant_id : 0,
		    tenant, exec, ctr, ctr_text);
}

/* The event with its sandbox's container (docs/events.md), from the
 * object or its text. */
static json_t *render_with(const struct egr_rec *r, const char *tenant, const char *exec,
			   const json_t *ctr, const char *ctr_text)
{
	json_t *o = egr_render_event(r, tenant, exec);
	json_t *c = ctr ? json_deep_copy(ctr) : ctr_text ? json_loads(ctr_text, 0, NULL) : NULL;

	if (o && c)
		json_object_set_new(o, "container", c);
	else
		json_decref(c);
	return o;
}

json_t *egr_events_render(struct egr_events *ev, const struct egr_rec *r)
{
	const char *tenant, *exec, *ctr_text;
	const json_t *ctr;

	if (!ev)
		return NULL;
	rec_identity(ev, r, &tenant, &exec, &ctr, &ctr_text);
	return render_with(r, tenant, exec, ctr, ctr_text);
}

/* --- the history ------------------------------------------------------------------- */

#define SLEN(s) ((s) ? strlen(s) + 1 : 0)

static const char *copy_str(char **p, const char *s)
{
	size_t n;
	const char *at = *p;

	if (!s)
		return NULL;
	n = strlen(s) + 1;
	memcpy(*p, s, n);
	*p += n;
	return at;
}

static size_t strings_len(const struct egr_rec *r)
{
	const struct egr_sb *sb;

	switch (r->kind) {
	case EGR_REC_DNS:
		return SLEN(r->dns->tenant) + SLEN(r->dns->qname) + SLEN(r->dns->reason);
	case EGR_REC_INSPECT:
		return SLEN(r->inspect->tenant) + SLEN(r->inspect->reason) +
		       SLEN(r->inspect->proto) + SLEN(r->inspect->name) + SLEN(r->inspect->alpn);
	case EGR_REC_LIFECYCLE:
		sb = r->life.sb;
		return SLEN(sb->cgroup) + SLEN(sb->tenant) + SLEN(sb->execution_id) +
		       SLEN(sb->principal) + SLEN(sb->tool) + SLEN(sb->version) +
		       SLEN(sb->netdev) + SLEN(sb->netns) + SLEN(r->life.old_sha256);
	case EGR_REC_LOSS:
		return SLEN(r->loss.reason);
	case EGR_REC_APPROVAL:
		return SLEN(r->approval->tenant) + SLEN(r->approval->execution_id) +
		       SLEN(r->approval->name) + SLEN(r->approval->ports) +
		       SLEN(r->approval->reason);
	default:
		return 0;
	}
}

/* r and what it points to in one allocation. NULL on OOM. */
static struct kept *kept_new(const struct egr_rec *r, const char *tenant, const char *exec,
			     const char *ctr_text)
{
	struct kept *k = malloc(sizeof(*k) + strings_len(r) + SLEN(tenant) + SLEN(exec) +
				SLEN(ctr_text));
	char *p;

	if (!k)
		return NULL;
	p = k->strings;
	k->rec = *r;
	k->tenant = copy_str(&p, tenant);
	k->execution_id = copy_str(&p, exec);
	k->container = copy_str(&p, ctr_text);
	switch (r->kind) {
	case EGR_REC_KERNEL:
		memcpy(&k->u.kernel, r->kernel.e, r->kernel.e->type == EGR_EV_ESCAPE
							  ? sizeof(struct egr_escape_event)
							  : sizeof(struct egr_event));
		k->rec.kernel.e = &k->u.kernel.ev;
		break;
	case EGR_REC_DNS:
		k->u.dns = *r->dns;
		k->u.dns.tenant = copy_str(&p, r->dns->tenant);
		k->u.dns.qname = copy_str(&p, r->dns->qname);
		k->u.dns.reason = copy_str(&p, r->dns->reason);
		k->rec.dns = &k->u.dns;
		break;
	case EGR_REC_INSPECT:
		k->u.inspect = *r->inspect;
		k->u.inspect.tenant = copy_str(&p, r->inspect->tenant);
		k->u.inspect.reason = copy_str(&p, r->inspect->reason);
		k->u.inspect.proto = copy_str(&p, r->inspect->proto);
		k->u.inspect.name = copy_str(&p, r->inspect->name);
		k->u.inspect.alpn = copy_str(&p, r->inspect->alpn);
		k->rec.inspect = &k->u.inspect;
		break;
	case EGR_REC_LIFECYCLE: {
		const struct egr_sb *sb = r->life.sb;

		memset(&k->u.sb, 0, sizeof(k->u.sb));
		k->u.sb.id = sb->id;
		k->u.sb.cgroup_id = sb->cgroup_id;
		memcpy(k->u.sb.sha256, sb->sha256, sizeof(sb->sha256));
		/* The copies are read only; egr_sb's members are not const. */
		k->u.sb.cgroup = (char *)copy_str(&p, sb->cgroup);
		k->u.sb.tenant = (char *)copy_str(&p, sb->tenant);
		k->u.sb.execution_id = (char *)copy_str(&p, sb->execution_id);
		k->u.sb.principal = (char *)copy_str(&p, sb->principal);
		k->u.sb.tool = (char *)copy_str(&p, sb->tool);
		k->u.sb.version = (char *)copy_str(&p, sb->version);
		k->u.sb.netdev = (char *)copy_str(&p, sb->netdev);
		k->u.sb.netns = (char *)copy_str(&p, sb->netns);
		k->rec.life.sb = &k->u.sb;
		k->rec.life.old_sha256 = copy_str(&p, r->life.old_sha256);
		break;
	}
	case EGR_REC_LOSS:
		k->rec.loss.reason = copy_str(&p, r->loss.reason);
		break;
	case EGR_REC_SUPPRESSED:
		k->u.budget = *r->suppressed.budget;
		k->rec.suppressed.budget = &k->u.budget;
		break;
	case EGR_REC_APPROVAL:
		/* state and scope are static strings. */
		k->u.approval = *r->approval;
		k->u.approval.tenant = copy_str(&p, r->approval->tenant);
		k->u.approval.execution_id = copy_str(&p, r->approval->execution_id);
		k->u.approval.name = copy_str(&p, r->approval->name);
		k->u.approval.ports = copy_str(&p, r->approval->ports);
		k->u.approval.reason = copy_str(&p, r->approval->reason);
		k->rec.approval = &k->u.approval;
		break;
	default:
		break;
	}
	return k;
}

static json_t *kept_json(const struct kept *k)
{
	return render_with(&k->rec, k->tenant, k->execution_id, NULL, k->container);
}

/* --- subscribers --------------------------------------------------------------- */

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

/*
 * The subscriber's watch is level-triggered, EPOLLOUT only while bytes are
 * waiting: a follower with a backlog is woken for as long as its socket
 * can take bytes, never by one edge only (with an edge-triggered watch a
 * backlog past 2 MiB was sent on nothing but EPOLLOUT edges). New events
 * and the 1 s tick send what the socket takes too.
 */
static void sub_arm(struct egr_events *ev, struct sub *s, bool force)
{
	bool want = s->len > 0;
	uint32_t events = (s->rdhup ? 0 : EPOLLIN | EPOLLRDHUP) | (want ? EPOLLOUT : 0);

	if (want == s->out_armed && !force)
		return;
	if (egr_loop_mod(ev->loop, s->fd, events) == 0)
		s->out_armed = want;
	else
		log_debug("events: re-arm a --follow subscriber: %m");
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
	sub_arm(ev, s, false);
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

/* Caught up (below half the limit): one line says what it missed, before
 * the events after it. -1 when the subscriber is gone (closed). */
static int sub_catch_up(struct egr_events *ev, struct sub *s)
{
	json_t *o, *by;
	char *line;
	size_t n;

	if (!s->skipped || s->closing || s->len > SUB_MAX_PENDING / 2)
		return 0;
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
	put_time(o, egr_now_ns());
	line = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (!line)
		return 0;
	log_warn("events: a --follow subscriber missed %" PRIu64 " events (too slow)", s->skipped);
	n = strlen(line);
	line[n++] = '\n'; /* overwrites the NUL: length is n */
	if (sub_append(s, line, n) == 0) {
		s->skipped = 0;
		memset(s->skip_sb, 0, sizeof(s->skip_sb));
		memset(s->skip_n, 0, sizeof(s->skip_n));
	}
	free(line);
	return sub_flush(ev, s);
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
	if (events & EPOLLRDHUP) {
		/* Half-closed: it may still read its stream. Level-triggered, the
		 * hang-up would wake the loop forever: stop watching input. */
		s->rdhup = true;
		sub_arm(ev, s, true);
	} else if (events & EPOLLIN) {
		/* Subscribers have nothing more to say: discard. */
		for (;;) {
			ssize_t n = recv(fd, junk, sizeof(junk), MSG_DONTWAIT);

			if (n <= 0)
				break;
		}
	}
	if (events & EPOLLOUT) {
		if (sub_flush(ev, s) == 0)
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
	err = egr_loop_add(ev->loop, nfd, EPOLLIN | EPOLLRDHUP, on_sub, ev);
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

/* A detached sandbox's identity, for its events still in the ring. */
static void remember_gone(struct egr_events *ev, const struct egr_sb *sb)
{
	struct gone *g = &ev->gone[ev->gone_next];

	free(g->tenant);
	free(g->execution_id);
	free(g->container);
	g->container = sb->container ? json_dumps(sb->container, JSON_COMPACT) : NULL;
	g->id = sb->id;
	g->tenant = sb->tenant ? strdup(sb->tenant) : NULL;
	g->execution_id = sb->execution_id ? strdup(sb->execution_id) : NULL;
	ev->gone_next = (ev->gone_next + 1) % GONE_MAX;
}

/* The stream's bus subscriber: every event into the history and to the
 * --follow subscribers of its sandbox, JSON only if one of them wants it. */
static void on_rec(void *ctx, const struct egr_rec *r)
{
	struct egr_events *ev = ctx;
	const char *tenant, *exec, *ctr_text;
	char *ctr_own = NULL;
	const json_t *ctr;
	struct sub *s, *next;
	char *line = NULL;
	size_t n = 0;

	if (r->kind != EGR_REC_KERNEL)
		ev->emitted++;
	rec_identity(ev, r, &tenant, &exec, &ctr, &ctr_text);
	if (ctr && ev->keep)
		ctr_text = ctr_own = json_dumps(ctr, JSON_COMPACT);
	if (r->kind == EGR_REC_LIFECYCLE && r->life.what == EGR_LIFE_DETACH)
		remember_gone(ev, r->life.sb);
	if (ev->keep) {
		struct kept *k = kept_new(r, tenant, exec, ctr_text);

		if (k) {
			free(ev->kept[ev->head]);
			ev->kept[ev->head] = k;
			ev->head = (ev->head + 1) % ev->keep;
			if (ev->nkept < ev->keep)
				ev->nkept++;
		}
	}
	for (s = ev->subs; s; s = next) {
		next = s->next;
		if (s->closing || (s->sandbox && s->sandbox != r->sandbox))
			continue;
		if (!line) {
			json_t *o = render_with(r, tenant, exec, ctr, ctr_text);

			line = o ? json_dumps(o, JSON_COMPACT) : NULL;
			json_decref(o);
			if (!line) {
				free(ctr_own);
				return;
			}
			n = strlen(line);
			line[n++] = '\n'; /* overwrites the NUL: length is n */
		}
		/* Behind: first send what the socket takes now, whatever woke
		 * the loop (never only an EPOLLOUT). */
		if (s->len + n > SUB_MAX_PENDING / 2 && sub_flush(ev, s))
			continue;
		if (s->len + n > SUB_MAX_PENDING || (s->skipped && s->len > SUB_MAX_PENDING / 2)) {
			sub_skip(s, r->sandbox);
			continue;
		}
		if (s->skipped && sub_catch_up(ev, s))
			continue;
		if (sub_append(s, line, n)) {
			sub_drop(ev, s, "out of memory");
			continue;
		}
		sub_flush(ev, s);
	}
	free(line);
	free(ctr_own);
}

/* --- kernel events --------------------------------------------------------------- */

_Static_assert(sizeof(struct egr_escape_event) == sizeof(struct egr_event) + 24,
	       "struct egr_escape_event is struct egr_event and the move");

/* A task left its sandbox cgroup (bpf/escape.bpf.c). The kernel killed the
 * mover when it was in the sandbox; a different process it moved out (or
 * forked out with CLONE_INTO_CGROUP, or forked by a marked process) is
 * killed here, at once, by its escaped mark wherever it has moved since: it
 * is outside every hook. Whether it was killed: 1, 0; -1 none was due. */
static int escape_kill(struct egr_events *ev, const struct egr_escape_event *x)
{
	int err;

	if ((x->action != EGR_ESCAPE_KILLED && x->action != EGR_ESCAPE_KILL_FAILED) ||
	    !x->target_pid || x->target_pid == x->ev.pid)
		return -1;
	err = egr_escape_kill_moved(ev->bpf, x->target_pid);
	if (err)
		log_error("escape from sandbox %u: kill moved process %u: %s", x->ev.sandbox_id,
			  x->target_pid, strerror(-err));
	/* And whatever else is marked: a child the moved process forked whose
	 * event was lost, one moved again since. */
	egr_escape_kill_marked(ev->bpf);
	return !err;
}

static int on_ring(void *ctx, void *data, size_t size)
{
	struct egr_events *ev = ctx;
	const struct egr_event *e = data;
	uint64_t off = egr_clock_ns(CLOCK_REALTIME) - egr_clock_ns(CLOCK_BOOTTIME);
	struct egr_rec r = { .kind = EGR_REC_KERNEL, .kernel = { .e = e, .target_killed = -1 } };

	ev->received++;
	if (size < sizeof(*e) || e->version < 1 ||
	    (e->type == EGR_EV_ESCAPE && size < sizeof(struct egr_escape_event))) {
		/* An older layout than ours is not something we can read. */
		ev->bad_version++;
		return 0;
	}
	r.sandbox = e->sandbox_id;
	r.unix_ns = e->ts_ns + off;
	/* The kill is due whoever reads the event. */
	if (e->type == EGR_EV_ESCAPE)
		r.kernel.target_killed = escape_kill(ev, data);
	egr_bus_publish(ev->bus, &r);
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

/* A loss record: the stream shows it, the audit log writes its gap, alerting
 * raises lost_events. */
static void report_lost(struct egr_events *ev, uint64_t lost, uint64_t total, const char *why)
{
	struct egr_rec r = { .kind = EGR_REC_LOSS,
			     .loss = { .lost = lost, .total = total, .reason = why } };

	ev->lost_reported += lost;
	log_warn("events: %" PRIu64 " kernel event(s) lost (%s; %" PRIu64 " in total)", lost, why,
		 total);
	egr_bus_publish(ev->bus, &r);
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


void egr_events_metrics(void *ctx, struct egr_mbuf *mb)
{
	struct egr_events *ev = ctx;

	egr_budgets_metrics(ev->bpf, ev->reg, mb);
}

static void on_tick(struct egr_loop *loop, int fd, uint32_t events, void *ctx)
{
	struct egr_events *ev = ctx;
	struct sub *s, *next;

	/* Drain first, so a loss is reported after the events that made it. */
	egr_events_poll(ev);
	egr_budgets_report(&ev->budgets, ev->bpf, ev->bus);
	for (s = ev->subs; s; s = next) {
		next = s->next;
		if (s->closing && ++s->closing_ticks > 5)
			sub_close(ev, s);
		else if (!s->len || sub_flush(ev, s) == 0)
			sub_catch_up(ev, s);
	}
}

/* --- life ------------------------------------------------------------------------------ */

int egr_events_new(struct egr_events **out, struct egr_bpf *bpf, struct egr_registry *reg,
		   struct egr_loop *loop, struct egr_bus *bus, size_t keep, const char *state_dir)
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
	ev->bus = bus;
	ev->keep = keep;
	if (keep && !(ev->kept = calloc(keep, sizeof(*ev->kept)))) {
		free(ev);
		return -ENOMEM;
	}
	snprintf(ev->state_path, sizeof(ev->state_path), "%s/events.state", state_dir);
	ev->rb = egr_bpf_ring_new(bpf, on_ring, ev);
	if (!ev->rb) {
		err = -errno;
		free(ev->kept);
		free(ev);
		return err ? err : -EINVAL;
	}
	err = egr_loop_add(loop, ring_buffer__epoll_fd(ev->rb), EPOLLIN, on_ring_ready, ev);
	if (!err)
		err = egr_loop_every(loop, 1000, on_tick, ev);
	/* The stream sees every event: the first subscriber of its kinds. */
	if (!err)
		err = egr_bus_subscribe(bus, EGR_REC_EVENTS, on_rec, ev);
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

void egr_events_free(struct egr_events *ev)
{
	if (!ev)
		return;
	while (ev->subs)
		sub_close(ev, ev->subs);
	egr_budgets_free(&ev->budgets);
	ring_buffer__free(ev->rb);
	for (size_t i = 0; i < ev->keep; i++)
		free(ev->kept[i]);
	for (size_t i = 0; i < GONE_MAX; i++) {
		free(ev->gone[i].tenant);
		free(ev->gone[i].execution_id);
		free(ev->gone[i].container);
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
		const struct kept *k = ev->kept[(start + i) % ev->keep];

		if (sandbox && k->rec.sandbox != sandbox)
			continue;
		if (json_array_insert_new(arr, 0, kept_json(k))) {
			json_decref(arr);
			return NULL;
		}
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
