// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Compiled DNS policy and exfiltration tracker: see dnspolicy.h.
 * Exact names and wildcard apexes are kept in two sorted arrays; a lookup
 * is one binary search for the name and one per parent suffix for the
 * wildcards, so it costs O(labels * log n).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "dnspolicy.h"
#include "dnswire.h"
#include "netaddr.h"

struct name_ent {
	char *name;
	struct egr_dns_ports ports;
};

struct egr_dnspolicy {
	struct name_ent *exact; /* sorted by name */
	size_t nexact;
	char **wild;            /* apexes of "*." entries, sorted */
	size_t nwild;
	uint16_t qtypes[EGR_DNSPOL_MAX_QTYPES];
	size_t nqtypes;
	struct egr_cidr *rebind; /* network.dns_rebind_allow */
	size_t nrebind;
	bool audit;
	bool reject_refused; /* network.dns_reject "refused" */
	bool ask;            /* network.unknown_names "ask" */
	uint32_t ask_timeout_s;
	struct egr_dns_ports ask_ports;
};

bool egr_dnspolicy_audit(const struct egr_dnspolicy *pol)
{
	return pol && pol->audit;
}

bool egr_dnspolicy_ask(const struct egr_dnspolicy *pol, uint32_t *timeout_s,
		       struct egr_dns_ports *ports)
{
	/* Audit mode forwards unknown names anyway: nothing to ask. */
	if (!pol || !pol->ask || pol->audit)
		return false;
	if (timeout_s)
		*timeout_s = pol->ask_timeout_s;
	if (ports)
		*ports = pol->ask_ports;
	return true;
}

uint16_t egr_dnspolicy_reject_rcode(const struct egr_dnspolicy *pol)
{
	return pol && pol->reject_refused ? EGR_DNS_R_REFUSED : EGR_DNS_R_NXDOMAIN;
}

static const uint16_t default_qtypes[] = {
	EGR_DNS_T_A, EGR_DNS_T_AAAA, EGR_DNS_T_CNAME, EGR_DNS_T_HTTPS, EGR_DNS_T_SVCB,
};

static void set_err(struct egr_error *err, const char *field, const char *fmt, const char *arg)
{
	if (!err)
		return;
	snprintf(err->field, sizeof(err->field), "%s", field);
	snprintf(err->message, sizeof(err->message), fmt, arg);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_ent(const void *a, const void *b)
{
	return strcmp(((const struct name_ent *)a)->name, ((const struct name_ent *)b)->name);
}

/* --- port ranges ----------------------------------------------------------- */

struct span {
	uint32_t lo, hi;
};

static int cmp_span(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo ? 1 : 0;
}

/* Sort and merge overlapping or adjacent spans in place; returns the count. */
static size_t merge_spans(struct span *s, size_t n)
{
	size_t o = 0;

	if (!n)
		return 0;
	qsort(s, n, sizeof(*s), cmp_span);
	for (size_t i = 1; i < n; i++) {
		if (s[i].lo <= s[o].hi + 1) {
			if (s[i].hi > s[o].hi)
				s[o].hi = s[i].hi;
		} else {
			s[++o] = s[i];
		}
	}
	return o + 1;
}

/*
 * The ports of name: the union of every outbound_allow name entry equal to
 * it, merged per protocol; a range both protocols have identically becomes
 * one EGR_PROTO_ANY range. -E2BIG past EGR_MAX_PORT_RANGES.
 */
static int name_ports(const struct egr_policy *p, const char *name, struct egr_dns_ports *out,
		      uint32_t *first_index)
{
	struct span *tcp, *udp;
	size_t nt = 0, nu = 0, i = 0, j = 0, n = 0;
	int err = 0;

	memset(out, 0, sizeof(*out));
	tcp = calloc(p->nallow ? p->nallow : 1, sizeof(*tcp));
	udp = calloc(p->nallow ? p->nallow : 1, sizeof(*udp));
	if (!tcp || !udp) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t k = 0; k < p->nallow; k++) {
		const struct egr_allow *a = &p->allow[k];

		if (a->kind != EGR_HOST_NAME || !a->name || strcmp(a->name, name))
			continue;
		if (*first_index == UINT32_MAX)
			*first_index = a->index;
		if (a->protos & EGR_PROTO_TCP)
			tcp[nt++] = (struct span){ a->port_lo, a->port_hi };
		if (a->protos & EGR_PROTO_UDP)
			udp[nu++] = (struct span){ a->port_lo, a->port_hi };
	}
	nt = merge_spans(tcp, nt);
	nu = merge_spans(udp, nu);
	/* Walk both sorted lists; equal spans become ANY. */
	while (i < nt || j < nu) {
		struct egr_port_range r;

		if (i < nt && j < nu && tcp[i].lo == udp[j].lo && tcp[i].hi == udp[j].hi) {
			r = (struct egr_port_range){ (uint16_t)tcp[i].lo, (uint16_t)tcp[i].hi,
						     EGR_PROTO_ANY };
			i++;
			j++;
		} else if (j >= nu || (i < nt && tcp[i].lo <= udp[j].lo)) {
			r = (struct egr_port_range){ (uint16_t)tcp[i].lo, (uint16_t)tcp[i].hi,
						     EGR_PROTO_TCP };
			i++;
		} else {
			r = (struct egr_port_range){ (uint16_t)udp[j].lo, (uint16_t)udp[j].hi,
						     EGR_PROTO_UDP };
			j++;
		}
		if (n == EGR_MAX_PORT_RANGES) {
			err = -E2BIG;
			goto out;
		}
		out->ranges[n++] = r;
	}
	out->nranges = (uint32_t)n;
out:
	free(tcp);
	free(udp);
	return err;
}

/* --- compile --------------------------------------------------------------- */

void egr_dnspolicy_free(struct egr_dnspolicy *pol)
{
	if (!pol)
		return;
	for (size_t i = 0; i < pol->nexact; i++)
		free(pol->exact[i].name);
	for (size_t i = 0; i < pol->nwild; i++)
		free(pol->wild[i]);
	free(pol->exact);
	free(pol->wild);
	free(pol->rebind);
	free(pol);
}

static bool has_exact(const struct egr_dnspolicy *pol, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(pol->exact[i].name, name))
			return true;
	return false;
}

int egr_dnspolicy_new(const struct egr_policy *p, const uint16_t *qtypes, size_t nqtypes,
		      struct egr_dnspolicy **out, struct egr_error *err)
{
	struct egr_dnspolicy *pol;
	size_t maxn;
	int ret = -ENOMEM;

	if (!p || !out || (nqtypes && !qtypes))
		return -EINVAL;
	*out = NULL;
	if (nqtypes > EGR_DNSPOL_MAX_QTYPES) {
		set_err(err, "dns_qtypes", "%s", "too many query types (max 32)");
		return -EINVAL;
	}
	pol = calloc(1, sizeof(*pol));
	if (!pol)
		return -ENOMEM;
	if (!qtypes) {
		qtypes = default_qtypes;
		nqtypes = sizeof(default_qtypes) / sizeof(default_qtypes[0]);
	}
	memcpy(pol->qtypes, qtypes, nqtypes * sizeof(*qtypes));
	pol->nqtypes = nqtypes;
	if (p->nrebind) {
		pol->rebind = calloc(p->nrebind, sizeof(*pol->rebind));
		if (!pol->rebind)
			goto fail;
		memcpy(pol->rebind, p->rebind_allow, p->nrebind * sizeof(*pol->rebind));
		pol->nrebind = p->nrebind;
	}
	pol->audit = p->audit_mode != 0;
	pol->reject_refused = p->dns_reject_refused != 0;
	pol->ask = p->ask_unknown != 0;
	pol->ask_timeout_s = p->ask_timeout_s;
	pol->ask_ports.nranges = (uint32_t)p->nask_ports;
	memcpy(pol->ask_ports.ranges, p->ask_ports, p->nask_ports * sizeof(p->ask_ports[0]));

	maxn = p->ndns + p->nallow;
	pol->exact = calloc(maxn ? maxn : 1, sizeof(*pol->exact));
	pol->wild = calloc(p->ndns ? p->ndns : 1, sizeof(*pol->wild));
	if (!pol->exact || !pol->wild)
		goto fail;

	for (size_t i = 0; i < p->ndns; i++) {
		const char *n = p->dns_allow[i];
		char norm[EGR_DNSPOL_NAME_BUF];
		bool wild = n[0] == '*' && n[1] == '.';
		size_t k;

		/* policy.c stores them normalised; normalise again for policies
		 * built by hand (tests, future callers). */
		if (egr_dns_name_normalize(n, 1, norm, sizeof(norm))) {
			char field[64];

			snprintf(field, sizeof(field), "network.dns_allow[%zu]", i);
			set_err(err, field, "bad DNS name \"%s\"", n);
			ret = -EINVAL;
			goto fail;
		}
		if (wild) {
			for (k = 0; k < pol->nwild; k++)
				if (!strcmp(pol->wild[k], norm + 2))
					break;
			if (k < pol->nwild)
				continue;
			pol->wild[pol->nwild] = strdup(norm + 2);
			if (!pol->wild[pol->nwild])
				goto fail;
			pol->nwild++;
		} else if (!has_exact(pol, pol->nexact, norm)) {
			pol->exact[pol->nexact].name = strdup(norm);
			if (!pol->exact[pol->nexact].name)
				goto fail;
			pol->nexact++;
		}
	}
	for (size_t i = 0; i < p->nallow; i++) {
		const struct egr_allow *a = &p->allow[i];
		char norm[EGR_DNSPOL_NAME_BUF];

		if (a->kind != EGR_HOST_NAME || !a->name)
			continue;
		if (egr_dns_name_normalize(a->name, 0, norm, sizeof(norm)))
			continue; /* cannot happen for parsed policies */
		if (has_exact(pol, pol->nexact, norm))
			continue;
		pol->exact[pol->nexact].name = strdup(norm);
		if (!pol->exact[pol->nexact].name)
			goto fail;
		pol->nexact++;
	}
	for (size_t i = 0; i < pol->nexact; i++) {
		uint32_t first = UINT32_MAX;
		int e = name_ports(p, pol->exact[i].name, &pol->exact[i].ports, &first);

		if (e == -E2BIG) {
			char field[64];

			snprintf(field, sizeof(field), "network.outbound_allow[%u]", first);
			set_err(err, field,
				"name %s needs more than 8 port ranges after merging",
				pol->exact[i].name);
			ret = -EINVAL;
			goto fail;
		}
		if (e) {
			ret = e;
			goto fail;
		}
	}
	qsort(pol->exact, pol->nexact, sizeof(*pol->exact), cmp_ent);
	qsort(pol->wild, pol->nwild, sizeof(*pol->wild), cmp_str);
	*out = pol;
	return 0;
fail:
	egr_dnspolicy_free(pol);
	return ret;
}

/* --- match ----------------------------------------------------------------- */

static const struct name_ent *find_exact(const struct egr_dnspolicy *pol, const char *name)
{
	struct name_ent key = { .name = (char *)name };

	return bsearch(&key, pol->exact, pol->nexact, sizeof(*pol->exact), cmp_ent);
}

static bool find_wild(const struct egr_dnspolicy *pol, const char *apex)
{
	return bsearch(&apex, pol->wild, pol->nwild, sizeof(*pol->wild), cmp_str) != NULL;
}

int egr_dnspolicy_match(const struct egr_dnspolicy *pol, const char *qname,
			struct egr_dnspolicy_match *m)
{
	char name[EGR_DNSPOL_NAME_BUF];
	const struct name_ent *e;
	const char *broadest = NULL;
	size_t len;

	if (m)
		memset(m, 0, sizeof(*m));
	if (!pol || !qname)
		return -EINVAL;
	len = strlen(qname);
	if (len && qname[len - 1] == '.')
		len--;
	if (len > EGR_DNS_NAME_MAX)
		return -EINVAL;
	if (!len)
		return 0; /* the root is never resolvable */
	for (size_t i = 0; i < len; i++) {
		char c = qname[i];

		name[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
	}
	name[len] = '\0';

	e = find_exact(pol, name);
	/* Wildcards: every proper parent suffix; the last hit is the broadest. */
	for (const char *s = strchr(name, '.'); s; s = strchr(s + 1, '.'))
		if (s[1] && find_wild(pol, s + 1))
			broadest = s + 1;
	if (!e && !broadest)
		return 0;
	if (m) {
		if (e)
			m->ports = e->ports;
		m->exact = e != NULL;
		m->wildcard = broadest != NULL;
		snprintf(m->domain, sizeof(m->domain), "%s", broadest ? broadest : name);
	}
	return 1;
}

bool egr_dnspolicy_qtype_allowed(const struct egr_dnspolicy *pol, uint16_t qtype)
{
	if (!pol)
		return false;
	for (size_t i = 0; i < pol->nqtypes; i++)
		if (pol->qtypes[i] == qtype)
			return true;
	return false;
}

size_t egr_dnspolicy_nexact(const struct egr_dnspolicy *pol)
{
	return pol ? pol->nexact : 0;
}

size_t egr_dnspolicy_nwild(const struct egr_dnspolicy *pol)
{
	return pol ? pol->nwild : 0;
}

/* --- rebinding (the classes: user/lib/rebind_target.c) --------------------- */

bool egr_dnspolicy_rebind_blocked(const struct egr_dnspolicy *pol, int family,
				  const uint8_t *addr, struct egr_rebind_verdict *v)
{
	return egr_dnspolicy_rebind_blocked_local(pol, family, addr, NULL, NULL, v);
}

bool egr_dnspolicy_rebind_blocked_local(const struct egr_dnspolicy *pol, int family,
					const uint8_t *addr, egr_rebind_local_fn is_local,
					void *ctx, struct egr_rebind_verdict *v)
{
	struct egr_rebind_verdict r;

	egr_rebind_classify(family, addr, &r);
	/* A global-looking address the kernel delivers locally: the address
	 * itself, or the IPv4 address an IPv6 form embeds. */
	if (r.cls == EGR_REBIND_NONE && is_local && addr &&
	    (family == AF_INET || family == AF_INET6) &&
	    (is_local(ctx, family, addr) ||
	     (family == AF_INET6 && r.form != EGR_REBIND_NATIVE && is_local(ctx, AF_INET, r.v4))))
		r.cls = EGR_REBIND_LOCAL;
	if (r.cls == EGR_REBIND_NONE) {
		if (v)
			*v = r;
		return false;
	}
	if (v)
		*v = r;
	for (size_t i = 0; pol && i < pol->nrebind; i++) {
		const struct egr_cidr *c = &pol->rebind[i];

		if (c->kind == EGR_HOST_V6 && family == AF_INET6 &&
		    egr_prefix_covers(c->addr, c->prefixlen, addr))
			return false;
		/* An IPv4 address, or the IPv4 address an IPv6 form embeds. */
		if (c->kind == EGR_HOST_V4 && (family == AF_INET || r.form != EGR_REBIND_NATIVE) &&
		    egr_prefix_covers(c->addr, c->prefixlen, r.v4))
			return false;
	}
	return true;
}

size_t egr_dnspolicy_nrebind(const struct egr_dnspolicy *pol)
{
	return pol ? pol->nrebind : 0;
}

/* --- exfiltration tracker --------------------------------------------------- */

#define EXFIL_CAP 4096

struct seen {
	uint64_t hash;
	uint64_t last_ns; /* 0 = empty */
};

struct dom {
	uint64_t hash;       /* of the domain name */
	uint64_t last_ns;    /* LRU */
	struct seen *seen;   /* nslots */
};

struct egr_exfil {
	struct egr_exfil_limits l;
	uint32_t nslots;     /* per domain: max_subdomains + 1 */
	struct dom *doms;    /* max_domains, allocated */
	uint32_t ndoms;
	uint64_t *nx;        /* ring of NXDOMAIN times, max_nxdomain */
	uint32_t nx_head;
};

void egr_exfil_limits_default(struct egr_exfil_limits *l)
{
	l->max_label_len = 52;
	l->max_name_len = 180;
	l->max_entropy = 4.0;
	l->entropy_min_len = 20;
	l->max_subdomains = 50;
	l->max_nxdomain = 30;
	l->max_domains = 64;
	l->window_ns = 60ULL * 1000000000ULL;
}

const char *egr_exfil_reason_name(enum egr_exfil_reason r)
{
	switch (r) {
	case EGR_EXFIL_OK:
		return "ok";
	case EGR_EXFIL_LABEL_LEN:
		return "label length";
	case EGR_EXFIL_NAME_LEN:
		return "name length";
	case EGR_EXFIL_ENTROPY:
		return "label entropy";
	case EGR_EXFIL_SUBDOMAINS:
		return "distinct subdomains";
	case EGR_EXFIL_NXDOMAIN:
		return "nxdomain rate";
	}
	return "?";
}

int egr_exfil_new(const struct egr_exfil_limits *l, struct egr_exfil **out)
{
	struct egr_exfil *t;

	if (!out)
		return -EINVAL;
	*out = NULL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	if (l)
		t->l = *l;
	else
		egr_exfil_limits_default(&t->l);
	if (t->l.max_subdomains > EXFIL_CAP)
		t->l.max_subdomains = EXFIL_CAP;
	if (t->l.max_nxdomain > EXFIL_CAP)
		t->l.max_nxdomain = EXFIL_CAP;
	if (!t->l.max_domains)
		t->l.max_domains = 64;
	if (!t->l.window_ns)
		t->l.window_ns = 60ULL * 1000000000ULL;
	t->nslots = t->l.max_subdomains + 1;
	if (t->l.max_subdomains) {
		t->doms = calloc(t->l.max_domains, sizeof(*t->doms));
		if (!t->doms)
			goto fail;
	}
	if (t->l.max_nxdomain) {
		t->nx = calloc(t->l.max_nxdomain, sizeof(*t->nx));
		if (!t->nx)
			goto fail;
	}
	*out = t;
	return 0;
fail:
	egr_exfil_free(t);
	return -ENOMEM;
}

void egr_exfil_free(struct egr_exfil *t)
{
	if (!t)
		return;
	for (uint32_t i = 0; i < t->ndoms; i++)
		free(t->doms[i].seen);
	free(t->doms);
	free(t->nx);
	free(t);
}

/* FNV-1a, then a final mix: only used to tell names apart. */
static uint64_t name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c >= 'A' && c <= 'Z')
			c = (unsigned char)(c - 'A' + 'a');
		h = (h ^ c) * 1099511628211ULL;
	}
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return h;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool run_suspicious(const struct egr_exfil_limits *l, const char *s, size_t n)
{
	size_t digits = 0, trans = 0;
	double h;

	if (n < l->entropy_min_len || n < 2)
		return false;
	h = egr_dns_label_entropy(s, n);
	if (h >= l->max_entropy)
		return true;
	for (size_t i = 0; i < n; i++) {
		digits += is_digit(s[i]);
		if (i && is_digit(s[i]) != is_digit(s[i - 1]))
			trans++;
	}
	return digits >= 2 && n - digits >= 2 && trans * 6 >= n && h >= l->max_entropy - 1.0;
}

bool egr_exfil_label_suspicious(const struct egr_exfil_limits *l, const char *label, size_t len)
{
	size_t start = 0;

	if (!l || !label || l->max_entropy <= 0)
		return false;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && label[i] != '-' && label[i] != '_')
			continue;
		if (run_suspicious(l, label + start, i - start))
			return true;
		start = i + 1;
	}
	return false;
}

static uint32_t nx_count(const struct egr_exfil *t, uint64_t now_ns)
{
	uint32_t c = 0;

	for (uint32_t i = 0; i < t->l.max_nxdomain; i++)
		if (t->nx[i] && t->nx[i] + t->l.window_ns > now_ns)
			c++;
	return c;
}

static struct dom *dom_get(struct egr_exfil *t, const char *domain, uint64_t now_ns)
{
	uint64_t h = name_hash(domain);
	struct dom *d = NULL;

	for (uint32_t i = 0; i < t->ndoms; i++)
		if (t->doms[i].hash == h)
			return &t->doms[i];
	if (t->ndoms < t->l.max_domains) {
		d = &t->doms[t->ndoms];
		d->seen = calloc(t->nslots, sizeof(*d->seen));
		if (!d->seen)
			return NULL;
		t->ndoms++;
	} else {
		/* Forget the least recently used domain. */
		d = &t->doms[0];
		for (uint32_t i = 1; i < t->ndoms; i++)
			if (t->doms[i].last_ns < d->last_ns)
				d = &t->doms[i];
		memset(d->seen, 0, t->nslots * sizeof(*d->seen));
	}
	d->hash = h;
	d->last_ns = now_ns;
	return d;
}

int egr_exfil_check(struct egr_exfil *t, const char *qname, const char *domain,
		    uint64_t now_ns, enum egr_exfil_reason *reason)
{
	enum egr_exfil_reason r = EGR_EXFIL_OK;
	size_t len, start = 0;

	if (reason)
		*reason = EGR_EXFIL_OK;
	if (!t || !qname)
		return -EINVAL;
	if (!now_ns)
		now_ns = 1; /* 0 marks an empty slot */
	len = strlen(qname);
	if (len && qname[len - 1] == '.')
		len--;
	if (t->l.max_name_len && len > t->l.max_name_len) {
		r = EGR_EXFIL_NAME_LEN;
		goto refuse;
	}
	for (size_t i = 0; i <= len; i++) {
		if (i < len && qname[i] != '.')
			continue;
		if (t->l.max_label_len && i - start > t->l.max_label_len) {
			r = EGR_EXFIL_LABEL_LEN;
			goto refuse;
		}
		if (egr_exfil_label_suspicious(&t->l, qname + start, i - start)) {
			r = EGR_EXFIL_ENTROPY;
			goto refuse;
		}
		start = i + 1;
	}
	if (t->l.max_nxdomain && nx_count(t, now_ns) >= t->l.max_nxdomain) {
		r = EGR_EXFIL_NXDOMAIN;
		goto refuse;
	}
	if (t->l.max_subdomains && domain) {
		struct dom *d = dom_get(t, domain, now_ns);
		uint64_t h = name_hash(qname);
		struct seen *hit = NULL, *free_slot = NULL;
		uint32_t live = 0;

		if (!d)
			return -ENOMEM;
		d->last_ns = now_ns;
		for (uint32_t i = 0; i < t->nslots; i++) {
			struct seen *s = &d->seen[i];
			bool alive = s->last_ns && s->last_ns + t->l.window_ns > now_ns;

			if (alive && s->hash == h)
				hit = s;
			else if (!alive && !free_slot)
				free_slot = s;
			live += alive;
		}
		if (hit) {
			hit->last_ns = now_ns;
		} else {
			if (live >= t->l.max_subdomains || !free_slot) {
				r = EGR_EXFIL_SUBDOMAINS;
				goto refuse;
			}
			free_slot->hash = h;
			free_slot->last_ns = now_ns;
		}
	}
	return 0;
refuse:
	if (reason)
		*reason = r;
	return -EPERM;
}

void egr_exfil_note_rcode(struct egr_exfil *t, const char *qname, uint16_t rcode,
			  uint64_t now_ns)
{
	if (!t || rcode != EGR_DNS_R_NXDOMAIN || !t->l.max_nxdomain)
		return;
	t->nx[t->nx_head] = now_ns ? now_ns : 1;
	t->nx_head = (t->nx_head + 1) % t->l.max_nxdomain;
}
