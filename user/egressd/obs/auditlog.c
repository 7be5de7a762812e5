// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Audit records of sandbox executions and policy changes; lifecycle events. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


#include "clock.h"
#include "alerts.h"
#include "audit.h"
#include "auditlog.h"
#include "egr_decide.h"
#include "dns/dnsproxy.h"
#include "budgets.h"
#include "render.h"
#include "inspect.h"
#include "dns/learned.h"
#include "execobs.h"
#include "fileio.h"
#include "log.h"
#include "macfile.h"
#include <limits.h>
#include <unistd.h>

/* Destinations listed per execution record at most. */
#define MAX_DESTS (EGR_DESTS_PER_SB + 8) /* a few over the cap when CPUs race */

struct egr_auditlog {
	struct egr_audit *a;      /* NULL: events only */
	struct egr_bpf *bpf;
	struct egr_bus *bus;      /* lifecycle and tamper records out */
	struct egr_reg_hooks next;
	struct egr_learned *learned; /* host names of learned addresses */
	struct egr_inspect *inspect; /* host names the proxy saw */
	char path[512];
	struct ucred actor;
	bool have_actor;
	uint64_t records, failures;
	struct egr_execobs *obs; /* names and denied destinations per execution */
};

static json_t *time_json(uint64_t unix_ns)
{
	char buf[40];

	egr_rfc3339_ns(unix_ns, buf, sizeof(buf));
	return json_string(buf);
}

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

static void on_rec(void *ctx, const struct egr_rec *r);

int egr_auditlog_open(struct egr_auditlog **out, const struct egr_auditlog_opts *o,
		      struct egr_bpf *bpf, struct egr_bus *bus)
{
	struct egr_auditlog *al = calloc(1, sizeof(*al));
	uint8_t *key = NULL;
	size_t keylen = 0;
	int err;

	if (!al)
		return -ENOMEM;
	if (egr_execobs_new(&al->obs)) {
		free(al);
		return -ENOMEM;
	}
	al->bpf = bpf;
	al->bus = bus;
	if (o && o->path) {
		snprintf(al->path, sizeof(al->path), "%s", o->path);
		if (o->key_file && (err = egr_audit_load_key(o->key_file, &key, &keylen))) {
			log_error("audit: key %s: %s", o->key_file,
				  err == -EPERM ? "group or other can access it (chmod 600)" :
						  strerror(-err));
			egr_execobs_free(al->obs);
			free(al);
			return err;
		}
		uint8_t *skey = NULL;
		size_t skeylen = 0;
		bool created = false;

		err = egr_ledger_key_load(o->key_file, o->state_dir, &skey, &skeylen, &created);
		if (err)
			log_error("audit: the state key: %s", strerror(-err));
		if (!err)
			err = egr_audit_open_opts(&al->a, o->path, o->state,
						  &(struct egr_audit_opts){
							  .key = key, .keylen = keylen,
							  .state_key = skey, .state_keylen = skeylen,
							  .state_legacy_ok = created,
							  .anchor = o->anchor,
							  .anchor_every = o->anchor_every,
							  .append_only = true,
							  .rotate_bytes = o->rotate_bytes });
		if (key)
			egr_audit_free_key(key, keylen);
		if (skey)
			egr_audit_free_key(skey, skeylen);
		if (err) {
			egr_execobs_free(al->obs);
			free(al);
			return err;
		}
		/* Records share the loop's fsync; replies wait for it (ctlconn.c). */
		if ((err = egr_audit_set_commit(al->a, egr_commitq_default())))
			log_warn("audit: no group commit (%s): one fsync per record", strerror(-err));
	}
	/* What execution records keep (DNS verdicts, denied destinations) and
	 * the gaps of lost events. */
	err = egr_bus_subscribe(bus, EGR_REC_BIT(EGR_REC_KERNEL) | EGR_REC_BIT(EGR_REC_DNS) |
				EGR_REC_BIT(EGR_REC_LOSS), on_rec, al);
	if (err) {
		egr_audit_close(al->a);
		egr_execobs_free(al->obs);
		free(al);
		return err;
	}
	*out = al;
	return 0;
}

int egr_ledger_key_load(const char *key_file, const char *state_dir, uint8_t **key,
			size_t *keylen, bool *created)
{
	char path[PATH_MAX];

	*created = false;
	if (key_file)
		return egr_audit_load_key(key_file, key, keylen);
	if (!state_dir)
		return -EINVAL;
	static bool made_here; /* by this process: audit.state's open, then billing's */

	snprintf(path, sizeof(path), "%s/ledger.key", state_dir);
	made_here |= access(path, F_OK) != 0;
	*created = made_here;
	return egr_key_load_or_create(path, key, keylen);
}

void egr_auditlog_report_open(struct egr_auditlog *al)
{
	if (!al || !egr_audit_state_tampered(al->a))
		return;
	egr_auditlog_tamper(al, "audit_state_tampered", 0, NULL,
			    "audit.state fails its MAC (rewritten while egressd was down, or "
			    "another key): the chain goes on from the log's last record; check "
			    "the log against its anchors (egressctl audit verify --anchors)",
			    json_pack("{s:s, s:I}", "log", al->path,
				      "seq", (json_int_t)egr_audit_seq(al->a)));
}

void egr_auditlog_close(struct egr_auditlog *al)
{
	if (!al)
		return;
	egr_audit_close(al->a);
	egr_execobs_free(al->obs);
	free(al);
}

void egr_auditlog_set_names(struct egr_auditlog *al, struct egr_learned *learned,
			    struct egr_inspect *inspect)
{
	if (!al)
		return;
	al->learned = learned;
	al->inspect = inspect;
}

static void on_dns(struct egr_auditlog *al, const struct egr_dns_event *d)
{
	static const char *const v[] = {
		[EGR_DNS_V_ALLOWED] = "allow", [EGR_DNS_V_REFUSED] = "deny",
		[EGR_DNS_V_EXFIL] = "deny", [EGR_DNS_V_AUDIT] = "audit",
	};
	int fam[EGR_DNSPROXY_EVENT_ADDRS];
	uint8_t addr[EGR_DNSPROXY_EVENT_ADDRS][16];
	size_t n = 0;

	if (!al || !d)
		return;
	/* Rebinding addresses, stripped or (audit mode) kept: what a
	 * suggested policy's dns_rebind_allow needs (docs/policy.md). */
	if (d->verdict == EGR_DNS_V_REBIND || d->verdict == EGR_DNS_V_AUDIT)
		for (size_t i = 0; i < d->nstripped_listed && i < EGR_DNSPROXY_EVENT_ADDRS; i++)
			egr_execobs_rebind(al->obs, d->sandbox_id, d->qname, d->stripped[i].family,
					   d->stripped[i].addr,
					   egr_rebind_class_name(d->stripped[i].cls),
					   d->verdict == EGR_DNS_V_AUDIT);
	/* Servfails say nothing about what the tool needs. */
	if ((unsigned)d->verdict >= sizeof(v) / sizeof(v[0]) || !v[d->verdict])
		return;
	for (size_t i = 0; i < d->naddrs_listed && i < EGR_DNSPROXY_EVENT_ADDRS; i++, n++) {
		fam[n] = d->addrs[i].family;
		memcpy(addr[n], d->addrs[i].addr, 16);
	}
	egr_execobs_dns(al->obs, d->sandbox_id, d->qname, v[d->verdict], fam,
			(const uint8_t(*)[16])addr, n);
}

/* Denied and would-be denied destinations of connect, sendmsg and the
 * backstop: what `egressctl suggest` reads. */
static void on_kernel(struct egr_auditlog *al, const struct egr_event *e)
{
	char addr[64], pbuf[16], tbuf[16];
	const char *type;

	if (e->verdict == EGR_ALLOW)
		return;
	if (e->type != EGR_EV_CONNECT && e->type != EGR_EV_SENDMSG && e->type != EGR_EV_BACKSTOP)
		return;
	if (!egr_render_kernel_addr(e, addr, sizeof(addr)))
		return;
	type = egr_render_type_name(e->type);
	snprintf(tbuf, sizeof(tbuf), "%s", type ? type : "");
	egr_execobs_denied(al->obs, e->sandbox_id, addr, e->port,
			   egr_render_proto_name(e->protocol, pbuf, sizeof(pbuf)), tbuf,
			   e->verdict == EGR_VERDICT_AUDIT);
}

static void on_rec(void *ctx, const struct egr_rec *r)
{
	struct egr_auditlog *al = ctx;

	if (r->kind == EGR_REC_KERNEL)
		on_kernel(al, r->kernel.e);
	else if (r->kind == EGR_REC_DNS)
		on_dns(al, r->dns);
	else if (r->kind == EGR_REC_LOSS && !r->sandbox &&
		 egr_auditlog_gap(al, "ring buffer overflow", r->loss.lost))
		log_error("events: cannot write the audit gap record for %" PRIu64 " lost events",
			  r->loss.lost);
}

void egr_auditlog_set_actor(struct egr_auditlog *al, const struct ucred *cred)
{
	if (!al)
		return;
	al->have_actor = cred != NULL;
	if (cred)
		al->actor = *cred;
}

uint64_t egr_auditlog_failures(const struct egr_auditlog *al)
{
	if (!al || !al->a)
		return 0;
	return egr_audit_failures(al->a) + al->failures;
}

json_t *egr_auditlog_status(const struct egr_auditlog *al)
{
	if (!al || !al->a)
		return json_pack("{s:b}", "enabled", 0);
	return json_pack("{s:b, s:s, s:I, s:I, s:I}", "enabled", 1, "path", al->path, "seq",
			 (json_int_t)egr_audit_seq(al->a), "records", (json_int_t)al->records,
			 "failures", (json_int_t)egr_auditlog_failures(al));
}

int egr_auditlog_gap(struct egr_auditlog *al, const char *reason, uint64_t lost)
{
	int err;

	if (!al || !al->a)
		return 0;
	err = egr_audit_record_gap(al->a, reason, lost);
	if (err)
		log_error("audit: gap record: %s", strerror(-err));
	else
		al->records++;
	return err;
}

static void append(struct egr_auditlog *al, json_t *rec)
{
	int err;

	if (!rec) {
		al->failures++;
		log_error("audit: out of memory building a record");
		return;
	}
	if (al->a) {
		err = egr_audit_append(al->a, rec);
		if (err)
			log_error("audit: %s record lost: %s",
				  json_string_value(json_object_get(rec, "type")), strerror(-err));
		else
			al->records++;
	}
	json_decref(rec);
}

static json_t *identity(const struct egr_sb *sb)
{
	json_t *o = json_pack("{s:I, s:s, s:I, s:o, s:o, s:o, s:o, s:o, s:s}", "sandbox",
			      (json_int_t)sb->id, "cgroup", sb->cgroup ?: "", "cgroup_id",
			      (json_int_t)sb->cgroup_id, "execution_id",
			      str_or_null(sb->execution_id), "tenant", str_or_null(sb->tenant),
			      "principal", str_or_null(sb->principal), "tool",
			      str_or_null(sb->tool), "version", str_or_null(sb->version),
			      "policy_sha256", sb->sha256);

	/* A device sandbox names its device and namespace (docs/audit.md). */
	if (o && sb->netdev &&
	    (json_object_set_new(o, "netdev", json_string(sb->netdev)) ||
	     json_object_set_new(o, "netns", sb->netns ? json_string(sb->netns) : json_null()))) {
		json_decref(o);
		return NULL;
	}
	/* The OCI hook's container (docs/audit.md "container"); absent for
	 * sandboxes that are no container. */
	if (o && sb->container &&
	    json_object_set_new(o, "container", json_deep_copy(sb->container))) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* The registry's hooks are where lifecycle is seen: its record onto the
 * bus (the stream shows it, alerting forgets a detached sandbox). */
static void lifecycle_event(struct egr_auditlog *al, enum egr_life what, const struct egr_sb *sb,
			    const char *old_sha, int closed)
{
	struct egr_rec r = { .kind = EGR_REC_LIFECYCLE, .sandbox = sb->id,
			     .life = { .what = what, .sb = sb, .old_sha256 = old_sha,
				       .closed = closed } };

	egr_bus_publish(al->bus, &r);
}

static void policy_change(struct egr_auditlog *al, const char *change, const struct egr_sb *sb,
			  const char *old_sha, unsigned closed)
{
	json_t *rec = identity(sb);

	if (!rec) {
		append(al, NULL);
		return;
	}
	json_object_set_new(rec, "type", json_string("policy_change"));
	json_object_set_new(rec, "change", json_string(change));
	json_object_set_new(rec, "previous_policy_sha256", str_or_null(old_sha));
	json_object_set_new(rec, "torn_down", json_integer(closed));
	json_object_set_new(rec, "actor",
			    al->have_actor ? json_pack("{s:i, s:i, s:i}", "pid", (int)al->actor.pid,
						       "uid", (int)al->actor.uid, "gid",
						       (int)al->actor.gid)
					   : json_null());
	append(al, rec);
}

void egr_auditlog_approval(struct egr_auditlog *al, const struct egr_sb *sb, json_t *detail)
{
	json_t *rec = identity(sb), *v;
	const char *k;

	if (!rec || !detail) {
		json_decref(rec);
		json_decref(detail);
		append(al, NULL);
		return;
	}
	json_object_foreach(detail, k, v)
		json_object_set(rec, k, v);
	json_object_set_new(rec, "type", json_string("policy_change"));
	json_object_set_new(rec, "change", json_string("approval"));
	if (!strcmp(json_string_value(json_object_get(detail, "decision")) ?: "", "approved"))
		egr_execobs_approved(al->obs, sb->id, detail);
	json_decref(detail);
	append(al, rec);
}

void egr_auditlog_tamper(struct egr_auditlog *al, const char *type, uint32_t sandbox,
			 const struct egr_sb *sb, const char *summary, json_t *detail)
{
	json_t *rec = sb ? identity(sb) : json_pack("{s:o}", "sandbox",
						     sandbox ? json_integer(sandbox) : json_null());
	const char *k;
	json_t *v;

	log_error("%s: %s", type, summary);
	if (!al) {
		json_decref(rec);
		json_decref(detail);
		return;
	}
	if (rec) {
		json_object_foreach(detail, k, v)
			json_object_set(rec, k, v);
		json_object_set_new(rec, "type", json_string(type));
		json_object_set_new(rec, "summary", json_string(summary));
	}
	append(al, rec);
	/* Alerting raises the critical alert of the same type. */
	struct egr_rec r = { .kind = EGR_REC_HEALTH, .sandbox = sandbox,
			     .health = { .type = type, .sb = sb, .summary = summary,
					 .detail = detail } };
	egr_bus_publish(al->bus, &r);
	json_decref(detail);
}

/* The ranges its DNS answers could point into (the execution record's
 * observed.rebind_allow, what `suggest` keeps). */
static void rebind_ranges(struct egr_auditlog *al, const struct egr_sb *sb, const json_t *policy)
{
	egr_execobs_rebind_allow(al->obs, sb->id,
				 json_object_get(json_object_get(policy, "network"),
						 "dns_rebind_allow"));
}

static void h_attached(void *ctx, const struct egr_sb *sb, const json_t *policy)
{
	struct egr_auditlog *al = ctx;

	egr_execobs_forget(al->obs, sb->id);
	rebind_ranges(al, sb, policy);
	policy_change(al, "attach", sb, NULL, 0);
	lifecycle_event(al, EGR_LIFE_ATTACH, sb, NULL, -1);
	if (al->next.attached)
		al->next.attached(al->next.ctx, sb, policy);
}

static void h_adopted(void *ctx, const struct egr_sb *sb, const json_t *policy)
{
	struct egr_auditlog *al = ctx;

	rebind_ranges(al, sb, policy);
	lifecycle_event(al, EGR_LIFE_ADOPT, sb, NULL, -1);
	if (al->next.adopted)
		al->next.adopted(al->next.ctx, sb, policy);
}

/* An earlier egressd's unsigned state file, confirmed by the kernel and
 * signed: an upgrade, in the chain, not an alert. */
static void h_upgraded(void *ctx, const struct egr_sb *sb, const json_t *policy)
{
	struct egr_auditlog *al = ctx;
	json_t *rec = identity(sb);

	if (rec) {
		json_object_set_new(rec, "type", json_string("state_upgrade"));
		json_object_set_new(rec, "from", json_string("unsigned state file of an earlier "
							    "egressd"));
		json_object_set_new(rec, "confirmed_by_kernel",
				    json_pack("[s,s,s,s]", "cgroup_id", "links", "sandbox_entry",
					      "rules"));
		json_object_set_new(rec, "policy_id", json_integer((json_int_t)sb->policy_id));
	}
	append(al, rec);
	if (al->next.upgraded)
		al->next.upgraded(al->next.ctx, sb, policy);
}

static void h_updated(void *ctx, const struct egr_sb *sb, const char *old_sha256,
		      const json_t *policy, unsigned closed)
{
	struct egr_auditlog *al = ctx;

	rebind_ranges(al, sb, policy);
	policy_change(al, "update", sb, old_sha256, closed);
	lifecycle_event(al, EGR_LIFE_UPDATE, sb, old_sha256, (int)closed);
	if (al->next.updated)
		al->next.updated(al->next.ctx, sb, old_sha256, policy, closed);
}

/* The sandbox's destinations; *complete only when the kernel dropped none
 * of them (its own cap or a full map: never another sandbox's doing). */
static json_t *egress_json(struct egr_auditlog *al, const struct egr_sb *sb, bool *complete,
			   uint64_t *dropped, uint64_t boot_off)
{
	struct egr_dest *d = calloc(MAX_DESTS, sizeof(*d));
	json_t *arr = json_array();
	size_t n = 0;

	*complete = false;
	*dropped = 0;
	if (!d || !arr) {
		free(d);
		json_decref(arr);
		return NULL;
	}
	if (egr_bpf_sandbox_dests(al->bpf, sb->id, false, d, MAX_DESTS, &n) == 0 &&
	    egr_bpf_sandbox_dests_dropped(al->bpf, sb->id, dropped) == 0)
		*complete = n < MAX_DESTS && !*dropped;
	for (size_t i = 0; i < n; i++) {
		char addr[INET6_ADDRSTRLEN], dest[INET6_ADDRSTRLEN + 16], pbuf[8];
		int v6 = d[i].key.family == EGR_AF_INET6;
		const char *host;
		json_t *e;

		if (!inet_ntop(v6 ? AF_INET6 : AF_INET, d[i].key.addr, addr, sizeof(addr)))
			continue;
		snprintf(dest, sizeof(dest), v6 ? "[%s]:%u" : "%s:%u", addr, d[i].key.port);
		e = json_pack("{s:s, s:s, s:s, s:i, s:I, s:I, s:o, s:o}", "dest", dest, "proto",
			      egr_render_proto_name(d[i].key.protocol, pbuf, sizeof(pbuf)), "addr", addr,
			      "port", (int)d[i].key.port, "bytes_out",
			      (json_int_t)d[i].val.bytes_out, "packets_out",
			      (json_int_t)d[i].val.pkts_out, "first",
			      time_json(d[i].val.first_ns + boot_off), "last",
			      time_json(d[i].val.last_ns + boot_off));
		/* Not inspected: the name the address was learned for, if any. */
		host = egr_learned_name_of(al->learned, sb->id, v6 ? AF_INET6 : AF_INET,
					   d[i].key.addr);
		if (e && host && host[0])
			json_object_set_new(e, "host", json_string(host));
		json_array_append_new(arr, e);
	}
	free(d);
	/* Inspected connections: the name the client sent, first. */
	if (al->inspect) {
		json_t *ins = egr_inspect_dests_json(al->inspect, sb->id);

		if (ins)
			json_array_extend(arr, ins);
		json_decref(ins);
	}
	return arr;
}

/* The distinct host names of the egress entries, in order of appearance. */
static json_t *hosts_json(const json_t *egress)
{
	json_t *hosts = json_array(), *e, *h;
	size_t i, j;

	json_array_foreach(egress, i, e) {
		const char *name = json_string_value(json_object_get(e, "host"));
		bool seen = false;

		if (!name || !name[0])
			continue;
		json_array_foreach(hosts, j, h)
			if (!strcmp(json_string_value(h), name))
				seen = true;
		if (!seen)
			json_array_append_new(hosts, json_string(name));
	}
	return hosts;
}

static void h_detaching(void *ctx, const struct egr_sb *sb)
{
	struct egr_auditlog *al = ctx;
	uint64_t boot_off = egr_clock_ns(CLOCK_REALTIME) - egr_clock_ns(CLOCK_BOOTTIME);
	struct egr_meter m;
	bool complete = false;
	uint64_t dropped = 0;
	json_t *rec, *egress, *obs;
	json_int_t dns_wd;

	obs = egr_execobs_take(al->obs, sb->id);
	if (al->a) {
		if (egr_bpf_meter_sandbox(al->bpf, sb->id, &m))
			memset(&m, 0, sizeof(m));
		egress = egress_json(al, sb, &complete, &dropped, boot_off);
		dns_wd = json_integer_value(json_object_get(obs, "dns_would_deny"));
		if (obs)
			json_object_del(obs, "dns_would_deny");
		rec = identity(sb);
		if (rec) {
			json_object_set_new(rec, "type", json_string("execution"));
			json_object_set_new(rec, "status",
					    json_string(sb->end_status ? sb->end_status : "detached"));
			json_object_set_new(rec, "start",
					    time_json((uint64_t)sb->attached_at * 1000000000ull));
			json_object_set_new(rec, "policy_updated",
					    time_json((uint64_t)sb->updated_at * 1000000000ull));
			json_object_set_new(rec, "end", time_json(egr_clock_ns(CLOCK_REALTIME)));
			json_object_set_new(rec, "hosts", hosts_json(egress));
			json_object_set_new(rec, "egress", egress ? egress : json_null());
			json_object_set_new(rec, "egress_complete", json_boolean(complete));
			json_object_set_new(rec, "egress_dropped", json_integer((json_int_t)dropped));
			{
				uint64_t sup = 0, lost = 0;

				/* Its kernel events held back or lost (docs/events.md). */
				egr_budget_figures(al->bpf, sb->id, &sup, &lost);
				json_object_set_new(rec, "events",
						    json_pack("{s:I, s:I}", "suppressed",
							      (json_int_t)sup, "lost",
							      (json_int_t)lost));
			}
			json_object_set_new(
				rec, "traffic",
				json_pack("{s:I, s:I, s:I, s:I}", "bytes_out",
					  (json_int_t)m.bytes_out, "packets_out",
					  (json_int_t)m.pkts_out, "bytes_in", (json_int_t)m.bytes_in,
					  "packets_in", (json_int_t)m.pkts_in));
			json_object_set_new(
				rec, "verdicts",
				json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
					  "connect_allowed", (json_int_t)m.conn_allowed,
					  "connect_denied", (json_int_t)m.conn_denied,
					  "datagram_allowed", (json_int_t)m.dgram_allowed,
					  "datagram_denied", (json_int_t)m.dgram_denied,
					  "socket_denied", (json_int_t)m.sock_denied,
					  "backstop_drops", (json_int_t)m.backstop_drops,
					  "inbound_drops", (json_int_t)m.inbound_drops,
					  "quota_drops", (json_int_t)m.quota_drops));
			json_object_set_new(rec, "mode",
					    json_string(sb->audit_mode ? "audit" : "enforce"));
			json_object_set_new(
				rec, "would_deny",
				json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "connect",
					  (json_int_t)m.would_deny_conn, "datagram",
					  (json_int_t)m.would_deny_dgram, "socket",
					  (json_int_t)m.would_deny_sock, "backstop",
					  (json_int_t)m.would_deny_backstop, "dns", dns_wd, "total",
					  (json_int_t)(m.would_deny_conn + m.would_deny_dgram +
						       m.would_deny_sock + m.would_deny_backstop) +
						  dns_wd));
			json_object_set_new(rec, "quarantined", json_boolean(sb->quarantined));
			/* Its own DNS proxy is not a destination it chose. */
			json_object_set_new(rec, "dns_proxy",
					    json_pack("{s:i, s:i}", "port4", (int)sb->dns_port4,
						      "port6", (int)sb->dns_port6));
			json_object_set_new(rec, "observed", obs ? obs : json_null());
			obs = NULL;
		} else {
			json_decref(egress);
		}
		append(al, rec);
	}
	json_decref(obs);
	lifecycle_event(al, EGR_LIFE_DETACH, sb, NULL, -1);
	if (al->next.detaching)
		al->next.detaching(al->next.ctx, sb);
}

static void h_tampered(void *ctx, const char *type, uint32_t id, const char *cgroup,
		       const char *reason, bool held)
{
	struct egr_auditlog *al = ctx;
	char summary[512];

	snprintf(summary, sizeof(summary), "sandbox %u (%s): %s%s", id,
		 cgroup ? cgroup : "cgroup unknown", reason, held ? "; held under deny-all" : "");
	egr_auditlog_tamper(al, type, id, NULL, summary,
			    json_pack("{s:o, s:s, s:o}", "cgroup",
				      cgroup ? json_string(cgroup) : json_null(), "reason", reason,
				      "enforcing", held ? json_string("deny-all") : json_null()));
	if (al->next.tampered)
		al->next.tampered(al->next.ctx, type, id, cgroup, reason, held);
}

int egr_auditlog_quarantine(struct egr_auditlog *al, const struct egr_sb *sb, bool on,
			    json_t *evidence, unsigned closed)
{
	json_t *rec;

	if (!al) {
		json_decref(evidence);
		return -EINVAL;
	}
	rec = identity(sb);
	if (!rec) {
		json_decref(evidence);
		append(al, NULL);
		return -ENOMEM;
	}
	json_object_set_new(rec, "type", json_string(on ? "quarantine" : "release"));
	json_object_set_new(rec, "evidence", evidence ? evidence : json_null());
	json_object_set_new(rec, "torn_down", json_integer(closed));
	/* The breaker acts alone; a release is somebody's request. */
	json_object_set_new(rec, "actor",
			    !on && al->have_actor
				    ? json_pack("{s:i, s:i, s:i}", "pid", (int)al->actor.pid, "uid",
						(int)al->actor.uid, "gid", (int)al->actor.gid)
				    : json_string(on ? "breaker" : "unknown"));
	append(al, rec);
	lifecycle_event(al, on ? EGR_LIFE_QUARANTINE : EGR_LIFE_RELEASE, sb, NULL, (int)closed);
	return 0;
}

void egr_auditlog_hooks(struct egr_auditlog *al, struct egr_reg_hooks *h,
			const struct egr_reg_hooks *next)
{
	memset(h, 0, sizeof(*h));
	if (!al) {
		if (next)
			*h = *next;
		return;
	}
	if (next)
		al->next = *next;
	h->ctx = al;
	h->attached = h_attached;
	h->adopted = h_adopted;
	h->upgraded = h_upgraded;
	h->updated = h_updated;
	h->detaching = h_detaching;
	h->tampered = h_tampered;
}
