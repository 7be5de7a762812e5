// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "execobs.h"

struct obs_addr {
	int family;
	uint8_t addr[16];
};

struct obs_name {
	char *name;
	char verdict[8];
	size_t naddrs;
	struct obs_addr addrs[EGR_EXECOBS_MAX_ADDRS];
};

struct obs_denied {
	char addr[INET6_ADDRSTRLEN];
	uint16_t port;
	char proto[12];
	char kind[12];
	bool audit;
	uint64_t count;
};

struct obs_rebind {
	char *name;
	char addr[INET6_ADDRSTRLEN];
	char cls[16];
	bool kept;
	uint64_t count;
};

struct obs_sb {
	uint32_t id;
	bool truncated; /* a bound was hit: the record says it is incomplete */
	uint64_t dns_audit; /* audit-mode DNS verdicts: names enforce mode refuses */
	struct obs_name *names;
	size_t nnames, cap_names;
	struct obs_denied *denied;
	size_t ndenied, cap_denied;
	struct obs_rebind *rebind;
	size_t nrebind, cap_rebind;
	json_t *rebind_allow; /* array of the ranges' strings, or NULL */
	json_t *approved;     /* array of approvals, or NULL */
	struct obs_sb *next;
};

struct egr_execobs {
	struct obs_sb *sbs;
};

int egr_execobs_new(struct egr_execobs **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

static void sb_free(struct obs_sb *s)
{
	for (size_t i = 0; i < s->nnames; i++)
		free(s->names[i].name);
	free(s->names);
	free(s->denied);
	for (size_t i = 0; i < s->nrebind; i++)
		free(s->rebind[i].name);
	free(s->rebind);
	json_decref(s->rebind_allow);
	json_decref(s->approved);
	free(s);
}

void egr_execobs_free(struct egr_execobs *x)
{
	struct obs_sb *s, *next;

	if (!x)
		return;
	for (s = x->sbs; s; s = next) {
		next = s->next;
		sb_free(s);
	}
	free(x);
}

/* Room for one more of n in *arr (cap elements of size), up to max: the
 * arrays grow as a sandbox uses them, so an idle one costs nothing. */
static bool grow(void **arr, size_t *cap, size_t n, size_t size, size_t max)
{
	size_t want;
	void *p;

	if (n < *cap)
		return true;
	if (n >= max)
		return false;
	want = *cap ? *cap * 2 : 8;
	if (want > max)
		want = max;
	p = realloc(*arr, want * size);
	if (!p)
		return false;
	*arr = p;
	*cap = want;
	return true;
}

static struct obs_sb *sb_get(struct egr_execobs *x, uint32_t id, bool create)
{
	struct obs_sb *s;

	for (s = x->sbs; s; s = s->next)
		if (s->id == id)
			return s;
	if (!create)
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->id = id;
	s->next = x->sbs;
	x->sbs = s;
	return s;
}

static int verdict_rank(const char *v)
{
	if (!strcmp(v, "audit"))
		return 3;
	if (!strcmp(v, "allow"))
		return 2;
	return *v ? 1 : 0;
}

void egr_execobs_dns(struct egr_execobs *x, uint32_t sandbox, const char *qname,
		     const char *verdict, const int *family, const uint8_t (*addr)[16], size_t n)
{
	struct obs_sb *s;
	struct obs_name *nm = NULL;

	if (!x || !qname || !*qname || !(s = sb_get(x, sandbox, true)))
		return;
	if (verdict && !strcmp(verdict, "audit"))
		s->dns_audit++;
	for (size_t i = 0; i < s->nnames; i++)
		if (!strcmp(s->names[i].name, qname)) {
			nm = &s->names[i];
			break;
		}
	if (!nm) {
		if (!grow((void **)&s->names, &s->cap_names, s->nnames, sizeof(*s->names),
			  EGR_EXECOBS_MAX_NAMES)) {
			s->truncated = true;
			return;
		}
		nm = &s->names[s->nnames];
		memset(nm, 0, sizeof(*nm));
		nm->name = strdup(qname);
		if (!nm->name) {
			s->truncated = true;
			return;
		}
		s->nnames++;
	}
	/* audit > allow > deny: the answer of an audited query comes as an
	 * "allow" after the "audit" (and it stays a name the policy lacks);
	 * a name refused once and allowed later (an update) was allowed. */
	if (verdict && verdict_rank(verdict) > verdict_rank(nm->verdict))
		snprintf(nm->verdict, sizeof(nm->verdict), "%s", verdict);
	for (size_t i = 0; i < n; i++) {
		int fam = family[i] == AF_INET6 ? AF_INET6 : AF_INET;
		size_t alen = fam == AF_INET6 ? 16 : 4;
		bool have = false;

		for (size_t k = 0; k < nm->naddrs && !have; k++)
			have = nm->addrs[k].family == fam && !memcmp(nm->addrs[k].addr, addr[i], alen);
		if (have)
			continue;
		if (nm->naddrs >= EGR_EXECOBS_MAX_ADDRS) {
			s->truncated = true;
			continue;
		}
		nm->addrs[nm->naddrs].family = fam;
		memset(nm->addrs[nm->naddrs].addr, 0, 16);
		memcpy(nm->addrs[nm->naddrs].addr, addr[i], alen);
		nm->naddrs++;
	}
}

void egr_execobs_denied(struct egr_execobs *x, uint32_t sandbox, const char *dest_addr,
			uint16_t port, const char *proto, const char *kind, bool audit)
{
	struct obs_sb *s;
	struct obs_denied *d;

	if (!x || !dest_addr || !(s = sb_get(x, sandbox, true)))
		return;
	for (size_t i = 0; i < s->ndenied; i++) {
		d = &s->denied[i];
		if (d->port == port && d->audit == audit && !strcmp(d->addr, dest_addr) &&
		    !strcmp(d->proto, proto ? proto : "") && !strcmp(d->kind, kind ? kind : "")) {
			d->count++;
			return;
		}
	}
	if (!grow((void **)&s->denied, &s->cap_denied, s->ndenied, sizeof(*s->denied),
		  EGR_EXECOBS_MAX_DENIED)) {
		s->truncated = true;
		return;
	}
	d = &s->denied[s->ndenied++];
	memset(d, 0, sizeof(*d));
	snprintf(d->addr, sizeof(d->addr), "%s", dest_addr);
	snprintf(d->proto, sizeof(d->proto), "%s", proto ? proto : "");
	snprintf(d->kind, sizeof(d->kind), "%s", kind ? kind : "");
	d->port = port;
	d->audit = audit;
	d->count = 1;
}

void egr_execobs_rebind(struct egr_execobs *x, uint32_t sandbox, const char *qname, int family,
			const uint8_t *addr, const char *cls, bool kept)
{
	char txt[INET6_ADDRSTRLEN];
	struct obs_rebind *rb;
	struct obs_sb *s;

	if (!x || !qname || !addr || !inet_ntop(family, addr, txt, sizeof(txt)) ||
	    !(s = sb_get(x, sandbox, true)))
		return;
	for (size_t i = 0; i < s->nrebind; i++) {
		rb = &s->rebind[i];
		if (rb->kept == kept && !strcmp(rb->addr, txt) && !strcmp(rb->name, qname)) {
			rb->count++;
			return;
		}
	}
	if (!grow((void **)&s->rebind, &s->cap_rebind, s->nrebind, sizeof(*s->rebind),
		  EGR_EXECOBS_MAX_REBIND)) {
		s->truncated = true;
		return;
	}
	rb = &s->rebind[s->nrebind];
	memset(rb, 0, sizeof(*rb));
	rb->name = strdup(qname);
	if (!rb->name) {
		s->truncated = true;
		return;
	}
	snprintf(rb->addr, sizeof(rb->addr), "%s", txt);
	snprintf(rb->cls, sizeof(rb->cls), "%s", cls ? cls : "");
	rb->kept = kept;
	rb->count = 1;
	s->nrebind++;
}

void egr_execobs_rebind_allow(struct egr_execobs *x, uint32_t sandbox, const json_t *ranges)
{
	const json_t *r, *have;
	struct obs_sb *s;
	size_t i, k;

	if (!x || !json_is_array(ranges) || !json_array_size(ranges) ||
	    !(s = sb_get(x, sandbox, true)))
		return;
	if (!s->rebind_allow && !(s->rebind_allow = json_array())) {
		s->truncated = true;
		return;
	}
	json_array_foreach(ranges, i, r) {
		bool seen = false;

		if (!json_is_string(r))
			continue;
		json_array_foreach(s->rebind_allow, k, have)
			seen = seen || json_equal(have, r);
		/* Bounded by the policy's own limit per update; updates add
		 * at most that many each: cap the union the same way. */
		if (!seen && json_array_size(s->rebind_allow) >= EGR_EXECOBS_MAX_REBIND)
			s->truncated = true;
		else if (!seen)
			json_array_append_new(s->rebind_allow, json_string(json_string_value(r)));
	}
}

void egr_execobs_approved(struct egr_execobs *x, uint32_t sandbox, const json_t *detail)
{
	struct obs_sb *s;

	if (!x || !detail || !(s = sb_get(x, sandbox, true)))
		return;
	if (!s->approved && !(s->approved = json_array())) {
		s->truncated = true;
		return;
	}
	if (json_array_size(s->approved) >= EGR_EXECOBS_MAX_REBIND) {
		s->truncated = true;
		return;
	}
	json_array_append_new(s->approved,
			      json_pack("{s:O?, s:O?, s:O?, s:O?, s:O?}", "name",
					json_object_get(detail, "name"), "ports",
					json_object_get(detail, "ports"), "scope",
					json_object_get(detail, "scope"), "ttl_s",
					json_object_get(detail, "ttl_s"), "approver",
					json_object_get(detail, "approver")));
}

static json_t *rebind_json(const struct obs_sb *s)
{
	json_t *arr = json_array();

	for (size_t i = 0; arr && s && i < s->nrebind; i++) {
		const struct obs_rebind *rb = &s->rebind[i];

		json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:s, s:I}", "name", rb->name,
						     "addr", rb->addr, "class", rb->cls, "action",
						     rb->kept ? "kept" : "stripped", "count",
						     (json_int_t)rb->count));
	}
	return arr ? arr : json_array();
}

json_t *egr_execobs_take(struct egr_execobs *x, uint32_t sandbox)
{
	struct obs_sb *s = x ? sb_get(x, sandbox, false) : NULL;
	json_t *o, *dns, *den;

	o = json_object();
	dns = json_array();
	den = json_array();
	if (!o || !dns || !den) {
		json_decref(o);
		json_decref(dns);
		json_decref(den);
		return NULL;
	}
	for (size_t i = 0; s && i < s->nnames; i++) {
		json_t *addrs = json_array();

		for (size_t k = 0; addrs && k < s->names[i].naddrs; k++) {
			const struct obs_addr *a = &s->names[i].addrs[k];
			char txt[INET6_ADDRSTRLEN];

			if (inet_ntop(a->family, a->addr, txt, sizeof(txt)))
				json_array_append_new(addrs, json_string(txt));
		}
		json_array_append_new(dns, json_pack("{s:s, s:s, s:o}", "name", s->names[i].name,
						     "verdict",
						     s->names[i].verdict[0] ? s->names[i].verdict
									    : "allow",
						     "addrs", addrs ? addrs : json_array()));
	}
	for (size_t i = 0; s && i < s->ndenied; i++) {
		const struct obs_denied *d = &s->denied[i];

		json_array_append_new(den, json_pack("{s:s, s:i, s:s, s:s, s:s, s:I}", "addr",
						     d->addr, "port", (int)d->port, "proto",
						     d->proto, "kind", d->kind, "verdict",
						     d->audit ? "audit" : "deny", "count",
						     (json_int_t)d->count));
	}
	json_object_set_new(o, "dns", dns);
	json_object_set_new(o, "denied", den);
	json_object_set_new(o, "rebind", rebind_json(s));
	json_object_set_new(o, "rebind_allow",
			    s && s->rebind_allow ? json_incref(s->rebind_allow) : json_array());
	json_object_set_new(o, "approved",
			    s && s->approved ? json_incref(s->approved) : json_array());
	json_object_set_new(o, "complete", json_boolean(!s || !s->truncated));
	json_object_set_new(o, "dns_would_deny", json_integer(s ? (json_int_t)s->dns_audit : 0));
	egr_execobs_forget(x, sandbox);
	return o;
}

void egr_execobs_forget(struct egr_execobs *x, uint32_t sandbox)
{
	struct obs_sb **ps;

	if (!x)
		return;
	for (ps = &x->sbs; *ps; ps = &(*ps)->next)
		if ((*ps)->id == sandbox) {
			struct obs_sb *s = *ps;

			*ps = s->next;
			sb_free(s);
			return;
		}
}
