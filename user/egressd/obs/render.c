// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Bus records as event JSON: kernel events, DNS and inspect verdicts,
 * lifecycle, losses and suppressed denies. Key order is the stream's. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "alerts.h"
#include "dns/dnsproxy.h"
#include "egr_decide.h"
#include "inspect.h"
#include "netaddr.h"
#include "render.h"
#include "sandbox.h"

static void put_time(json_t *o, uint64_t unix_ns)
{
	char buf[40];

	egr_rfc3339_ns(unix_ns, buf, sizeof(buf));
	json_object_set_new(o, "time", json_string(buf));
}

const char *egr_render_type_name(uint32_t t)
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
	case EGR_EV_BIND:
		return "bind";
	default:
		return NULL;
	}
}

const char *egr_render_proto_name(uint32_t p, char *buf, size_t len)
{
	const char *s = egr_ipproto_name(p);

	if (s)
		return s;
	snprintf(buf, len, "%u", p);
	return buf;
}

static json_t *proto_json(uint32_t p)
{
	const char *s = egr_ipproto_name(p);

	return s ? json_string(s) : json_integer(p);
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

const char *egr_render_escape_action(uint32_t a)
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

bool egr_render_kernel_addr(const struct egr_event *e, char *buf, size_t len)
{
	switch (e->type) {
	case EGR_EV_CONNECT:
	case EGR_EV_SENDMSG:
	case EGR_EV_BACKSTOP:
	case EGR_EV_INBOUND:
	case EGR_EV_QUOTA:
	case EGR_EV_BIND:
		return inet_ntop(e->family == EGR_AF_INET6 ? AF_INET6 : AF_INET, e->addr, buf,
				 (socklen_t)len) != NULL;
	default:
		return false;
	}
}

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

static json_t *kernel_json(const struct egr_rec *r, const char *tenant, const char *exec)
{
	const struct egr_event *e = r->kernel.e;
	const char *tname = egr_render_type_name(e->type);
	char addr[INET6_ADDRSTRLEN], comm[sizeof(e->comm) + 1];
	json_t *o = json_object();
	bool inbound;

	if (!o)
		return NULL;
	json_object_set_new(o, "v", json_integer(EGR_EVENTS_SCHEMA));
	json_object_set_new(o, "seq", json_integer((json_int_t)r->seq));
	json_object_set_new(o, "type", tname ? json_string(tname) : json_integer(e->type));
	json_object_set_new(o, "origin", json_string("kernel"));
	put_time(o, r->unix_ns);
	json_object_set_new(o, "sandbox", json_integer(e->sandbox_id));
	json_object_set_new(o, "tenant", str_or_null(tenant));
	json_object_set_new(o, "execution_id", str_or_null(exec));
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
	if (egr_render_kernel_addr(e, addr, sizeof(addr))) {
		json_object_set_new(o, inbound ? "src" : "dst", json_string(addr));
		json_object_set_new(o, inbound ? "src_port" : "port", json_integer(e->port));
	} else if (e->type == EGR_EV_SETSOCKOPT) {
		json_object_set_new(o, "level", json_integer(e->level));
		json_object_set_new(o, "optname", json_integer(e->optname));
	} else if (e->type == EGR_EV_ESCAPE) {
		const struct egr_escape_event *x = (const struct egr_escape_event *)e;

		json_object_set_new(o, "action", json_string(egr_render_escape_action(x->action)));
		json_object_set_new(o, "from_cgroup_id", json_integer((json_int_t)x->from_cgroup_id));
		json_object_set_new(o, "to_cgroup_id", json_integer((json_int_t)x->to_cgroup_id));
		json_object_set_new(o, "target_pid", json_integer(x->target_pid));
		if (r->kernel.target_killed >= 0)
			json_object_set_new(o, "target_killed",
					    json_boolean(r->kernel.target_killed));
	}
	return o;
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

static json_t *dns_json(const struct egr_dns_event *d)
{
	char a[INET6_ADDRSTRLEN];
	json_t *o, *arr;

	o = json_pack("{s:s, s:I, s:s, s:o, s:i, s:s, s:i, s:s, s:I}", "type", "dns", "sandbox",
		      (json_int_t)d->sandbox_id, "verdict", egr_dns_verdict_event_name(d->verdict),
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
	/* Rebinding addresses: stripped, or (audit mode) kept and listed as
	 * what enforce mode would strip. */
	if (o && (d->verdict == EGR_DNS_V_REBIND ||
		  (d->verdict == EGR_DNS_V_AUDIT && d->nstripped_listed)) &&
	    (arr = json_array())) {
		bool kept = d->verdict == EGR_DNS_V_AUDIT;

		for (size_t i = 0; i < d->nstripped_listed; i++) {
			const struct egr_dns_stripped *st = &d->stripped[i];

			if (!inet_ntop(st->family, st->addr, a, sizeof(a)))
				continue;
			json_array_append_new(arr, json_pack("{s:s, s:s, s:s}", "addr", a, "class",
							     egr_rebind_class_name(st->cls), "form",
							     egr_rebind_form_name(st->form)));
		}
		json_object_set_new(o, kept ? "would_strip" : "stripped", arr);
		json_object_set_new(o, kept ? "would_strip_total" : "stripped_total",
				    json_integer((json_int_t)d->nstripped));
	}
	return o;
}

static json_t *inspect_json(const struct egr_inspect_event *ev)
{
	char addr[INET6_ADDRSTRLEN] = "";

	if (ev->family)
		inet_ntop(ev->family, ev->addr, addr, sizeof(addr));
	if (ev->suppressed)
		/* The proxy's denies past the sandbox's budget, as the kernel's
		 * are reported; "last" is the last of them. */
		return json_pack("{s:s, s:s, s:I, s:s, s:s, s:I, s:I, s:{s:s, s:s, s:s, s:s, s:i}}",
				 "type", "denies_suppressed", "origin", "inspect", "sandbox",
				 (json_int_t)ev->sandbox_id, "tenant", ev->tenant ? ev->tenant : "",
				 "verdict", "deny", "suppressed", (json_int_t)ev->suppressed,
				 "suppressed_total", (json_int_t)ev->suppressed_total, "last",
				 "reason", ev->reason, "proto", ev->proto, "name", ev->name, "addr",
				 addr, "port", (int)ev->port);
	return json_pack("{s:s, s:I, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:i}", "type", "inspect",
			 "sandbox", (json_int_t)ev->sandbox_id, "tenant",
			 ev->tenant ? ev->tenant : "", "verdict", ev->allowed ? "allow" : "deny",
			 "reason", ev->reason, "proto", ev->proto, "name", ev->name, "alpn",
			 ev->alpn, "addr", addr, "port", (int)ev->port);
}

static json_t *lifecycle_json(const struct egr_rec_lifecycle *l)
{
	const struct egr_sb *sb = l->sb;
	json_t *o = json_pack("{s:I, s:s, s:I, s:o, s:o, s:o, s:o, s:o, s:s}", "sandbox",
			      (json_int_t)sb->id, "cgroup", sb->cgroup ?: "", "cgroup_id",
			      (json_int_t)sb->cgroup_id, "execution_id",
			      str_or_null(sb->execution_id), "tenant", str_or_null(sb->tenant),
			      "principal", str_or_null(sb->principal), "tool", str_or_null(sb->tool),
			      "version", str_or_null(sb->version), "policy_sha256", sb->sha256);

	if (!o)
		return NULL;
	if (sb->netdev) {
		json_object_set_new(o, "netdev", json_string(sb->netdev));
		json_object_set_new(o, "netns", sb->netns ? json_string(sb->netns) : json_null());
	}
	json_object_set_new(o, "type", json_string(egr_life_name(l->what)));
	if (l->old_sha256)
		json_object_set_new(o, "previous_policy_sha256", json_string(l->old_sha256));
	if (l->closed >= 0)
		json_object_set_new(o, "connections_closed", json_integer(l->closed));
	return o;
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

static json_t *approval_json(const struct egr_approval_event *a)
{
	json_t *o = json_pack("{s:s, s:I, s:I, s:s, s:s, s:i, s:s}", "type", "approval", "id",
			      (json_int_t)a->id, "sandbox", (json_int_t)a->sandbox_id, "state",
			      a->state, "name", a->name ? a->name : "", "qtype", (int)a->qtype,
			      "ports", a->ports ? a->ports : "");

	if (!o)
		return NULL;
	if (a->tenant)
		json_object_set_new(o, "tenant", json_string(a->tenant));
	if (a->scope) {
		json_object_set_new(o, "scope", json_string(a->scope));
		json_object_set_new(o, "ttl_s", a->ttl_s ? json_integer((json_int_t)a->ttl_s)
							 : json_null());
	}
	if (a->approver_uid >= 0)
		json_object_set_new(o, "approver", json_pack("{s:I, s:I}", "uid",
							     (json_int_t)a->approver_uid, "pid",
							     (json_int_t)a->approver_pid));
	if (a->reason)
		json_object_set_new(o, "reason", json_string(a->reason));
	return o;
}

static json_t *body_json(const struct egr_rec *r)
{
	switch (r->kind) {
	case EGR_REC_APPROVAL:
		return approval_json(r->approval);
	case EGR_REC_DNS:
		return dns_json(r->dns);
	case EGR_REC_INSPECT:
		return inspect_json(r->inspect);
	case EGR_REC_LIFECYCLE:
		return lifecycle_json(&r->life);
	case EGR_REC_LOSS:
		if (!r->sandbox)
			return json_pack("{s:s, s:I, s:I, s:s}", "type", "lost_events", "lost",
					 (json_int_t)r->loss.lost, "lost_total",
					 (json_int_t)r->loss.total, "reason", r->loss.reason);
		return json_pack("{s:s, s:I, s:I, s:I, s:s}", "type", "lost_events", "sandbox",
				 (json_int_t)r->sandbox, "lost", (json_int_t)r->loss.lost,
				 "lost_total", (json_int_t)r->loss.total, "reason", r->loss.reason);
	case EGR_REC_SUPPRESSED:
		return json_pack("{s:s, s:s, s:I, s:s, s:I, s:I, s:o}", "type", "denies_suppressed",
				 "origin", "kernel", "sandbox", (json_int_t)r->sandbox, "verdict",
				 "deny", "suppressed", (json_int_t)r->suppressed.n,
				 "suppressed_total", (json_int_t)r->suppressed.total, "top",
				 top_json(r->suppressed.budget));
	default:
		return NULL;
	}
}

json_t *egr_render_event(const struct egr_rec *r, const char *tenant, const char *exec)
{
	json_t *o;

	if (r->kind == EGR_REC_KERNEL)
		return kernel_json(r, tenant, exec);
	o = body_json(r);
	if (!o)
		return NULL;
	/* egressd's own events: the envelope after the body. */
	json_object_set_new(o, "v", json_integer(EGR_EVENTS_SCHEMA));
	json_object_set_new(o, "seq", json_integer((json_int_t)r->seq));
	if (!json_object_get(o, "origin"))
		json_object_set_new(o, "origin", json_string("egressd"));
	put_time(o, r->unix_ns);
	if (r->kind != EGR_REC_LOSS || r->sandbox) {
		if (!json_object_get(o, "tenant"))
			json_object_set_new(o, "tenant", str_or_null(tenant));
		if (!json_object_get(o, "execution_id"))
			json_object_set_new(o, "execution_id", str_or_null(exec));
	}
	return o;
}
