// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * DNS-learned allowlist entries (learned.h).
 *
 * One kernel entry per (sandbox, address): a /32 or /128 whose ranges are
 * the union of every live name that resolved to it plus the "base", the
 * static rule the trie gave for that address before we wrote ours. The
 * base matters twice: while our entry lives it is the longest match and
 * must not hide a static prefix's ports; when our last name expires the
 * base is written back (as a permanent /32 with the same ranges, which
 * means the same as the static prefix) instead of deleting a key that may
 * have been a static /32 of the policy itself.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>


#include "clock.h"
#include "egr_decide.h"
#include "learned.h"
#include "log.h"

#define NAME_BUF 254

struct name {
	char qname[NAME_BUF];
	struct egr_dns_ports ports;
	uint64_t expires_ns;
};

struct addr {
	int family;
	uint8_t addr[16];
	bool has_base;
	bool base_exact;  /* the base is a /32 or /128 of the policy itself */
	struct egr_rule base;
	struct name *names;
	size_t nnames;
};

struct stale {
	int family;
	uint8_t addr[16];
};

struct sbl {
	uint32_t id;
	struct addr *addrs;
	size_t n, cap;
	size_t nnames; /* for the cap */
	/* Keys of the previous policy id, removed once the switch is done. */
	struct stale *stale;
	size_t nstale;
	uint32_t stale_policy_id;
	struct sbl *next;
};

struct egr_learned {
	struct egr_bpf *bpf;
	uint32_t max_per_sb;
	struct sbl *sbs;
	egr_dnsproxy_grant_fn grant; /* approvals, for a rebase (NULL: none) */
	void *grant_ctx;
};

void egr_learned_set_grant(struct egr_learned *l, egr_dnsproxy_grant_fn fn, void *ctx)
{
	l->grant = fn;
	l->grant_ctx = ctx;
}

int egr_learned_new(struct egr_bpf *bpf, uint32_t max_per_sandbox, struct egr_learned **out)
{
	struct egr_learned *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->bpf = bpf;
	l->max_per_sb = max_per_sandbox ? max_per_sandbox : 4096;
	*out = l;
	return 0;
}

static void free_sbl(struct sbl *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->addrs[i].names);
	free(s->addrs);
	free(s->stale);
	free(s);
}

void egr_learned_free(struct egr_learned *l)
{
	struct sbl *s, *next;

	if (!l)
		return;
	for (s = l->sbs; s; s = next) {
		next = s->next;
		free_sbl(s);
	}
	free(l);
}

static struct sbl *find_sbl(struct egr_learned *l, uint32_t id, bool create)
{
	struct sbl *s;

	for (s = l->sbs; s; s = s->next)
		if (s->id == id)
			return s;
	if (!create)
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->id = id;
	s->next = l->sbs;
	l->sbs = s;
	return s;
}

static size_t alen(int family)
{
	return family == AF_INET6 ? 16 : 4;
}

static struct addr *find_addr(struct sbl *s, int family, const uint8_t *a)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->addrs[i].family == family && memcmp(s->addrs[i].addr, a, alen(family)) == 0)
			return &s->addrs[i];
	return NULL;
}

/* The kernel key of addr under policy_id, full length or one bit less. */
static int kernel_lookup(struct egr_learned *l, int family, const uint8_t *a, uint32_t policy_id,
			 int less, struct egr_rule *out)
{
	return egr_bpf_rule_get(l->bpf, family, a, policy_id, less, out);
}

static int kernel_put(struct egr_learned *l, int family, const uint8_t *a, uint32_t policy_id,
		      const struct egr_rule *r)
{
	return egr_bpf_rule_put(l->bpf, family, a, policy_id, r);
}

static void kernel_del(struct egr_learned *l, int family, const uint8_t *a, uint32_t policy_id)
{
	egr_bpf_rule_del(l->bpf, family, a, policy_id);
}

static int add_range(struct egr_rule *r, const struct egr_port_range *pr)
{
	for (uint32_t i = 0; i < r->nranges; i++)
		if (r->ranges[i].lo <= pr->lo && r->ranges[i].hi >= pr->hi &&
		    (r->ranges[i].protos & pr->protos) == pr->protos)
			return 0; /* already covered */
	if (r->nranges >= EGR_MAX_PORT_RANGES)
		return -ENOSPC;
	r->ranges[r->nranges++] = *pr;
	return 0;
}

/* Write the kernel entry of one address from its live names and base. */
static int sync_addr(struct egr_learned *l, const struct addr *a, uint32_t policy_id,
		     uint64_t now)
{
	struct egr_rule r;
	bool live = false;
	int err = 0;

	memset(&r, 0, sizeof(r));
	for (size_t i = 0; i < a->nnames; i++) {
		if (a->names[i].expires_ns <= now)
			continue;
		live = true;
		if (a->names[i].expires_ns > r.expires_ns)
			r.expires_ns = a->names[i].expires_ns;
		for (uint32_t j = 0; j < a->names[i].ports.nranges && !err; j++)
			err = add_range(&r, &a->names[i].ports.ranges[j]);
	}
	if (!live) {
		/* A static /32 of the policy itself is restored; a base that
		 * came from a shorter prefix needs no key of its own (the
		 * prefix answers), so none is left behind to pile up. */
		if (a->has_base && a->base_exact)
			return kernel_put(l, a->family, a->addr, policy_id, &a->base);
		kernel_del(l, a->family, a->addr, policy_id);
		return 0;
	}
	for (uint32_t j = 0; a->has_base && j < a->base.nranges && !err; j++)
		err = add_range(&r, &a->base.ranges[j]);
	if (err)
		return err;
	return kernel_put(l, a->family, a->addr, policy_id, &r);
}

/* What the policy says of this address without us (static rules have no
 * expiry), and whether that is a host entry of the policy itself: if the
 * trie answers the same one bit shorter, the base is a covering prefix. */
static void find_base(struct egr_learned *l, struct addr *e, uint32_t policy_id)
{
	struct egr_rule shorter;

	e->has_base = kernel_lookup(l, e->family, e->addr, policy_id, 0, &e->base) == 0 &&
		      !e->base.expires_ns;
	e->base_exact = e->has_base &&
			(kernel_lookup(l, e->family, e->addr, policy_id, 1, &shorter) != 0 ||
			 memcmp(&shorter, &e->base, sizeof(shorter)) != 0);
}

static struct addr *new_addr(struct egr_learned *l, struct sbl *s, int family, const uint8_t *a,
			     uint32_t policy_id)
{
	struct addr *e;

	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		struct addr *na = realloc(s->addrs, cap * sizeof(*na));

		if (!na)
			return NULL;
		s->addrs = na;
		s->cap = cap;
	}
	e = &s->addrs[s->n++];
	memset(e, 0, sizeof(*e));
	e->family = family;
	memcpy(e->addr, a, alen(family));
	find_base(l, e, policy_id);
	return e;
}

static int add_name(struct addr *e, const char *qname, const struct egr_dns_ports *ports,
		    uint64_t expires, size_t *added)
{
	struct name *nn;

	*added = 0;
	for (size_t i = 0; i < e->nnames; i++) {
		if (strcmp(e->names[i].qname, qname) == 0) {
			e->names[i].ports = *ports;
			if (expires > e->names[i].expires_ns)
				e->names[i].expires_ns = expires;
			return 0;
		}
	}
	nn = realloc(e->names, (e->nnames + 1) * sizeof(*nn));
	if (!nn)
		return -ENOMEM;
	e->names = nn;
	nn = &e->names[e->nnames++];
	memset(nn, 0, sizeof(*nn));
	strncpy(nn->qname, qname, sizeof(nn->qname) - 1);
	nn->ports = *ports;
	nn->expires_ns = expires;
	*added = 1;
	return 0;
}

static void drop_addr(struct sbl *s, size_t i)
{
	free(s->addrs[i].names);
	s->addrs[i] = s->addrs[--s->n];
}

int egr_learned_add(struct egr_learned *l, uint32_t sandbox_id, uint32_t policy_id,
		    const struct egr_dns_learned *a, size_t n)
{
	struct sbl *s = find_sbl(l, sandbox_id, true);
	uint64_t now = egr_boot_ns();
	int err = 0;

	if (!s)
		return -ENOMEM;
	if (s->nnames + n > l->max_per_sb) {
		log_warn("sandbox %u: learned-address cap %u reached", sandbox_id, l->max_per_sb);
		return -ENOSPC;
	}
	for (size_t i = 0; i < n && !err; i++) {
		struct addr *e = find_addr(s, a[i].family, a[i].addr);
		size_t added;

		if (!e)
			e = new_addr(l, s, a[i].family, a[i].addr, policy_id);
		if (!e) {
			err = -ENOMEM;
			break;
		}
		err = add_name(e, a[i].qname ? a[i].qname : "", &a[i].ports, a[i].expires_ns,
			       &added);
		s->nnames += added;
		if (!err)
			err = sync_addr(l, e, policy_id, now);
	}
	/* All or none is what the proxy promises the client: on failure the
	 * answer becomes SERVFAIL; what did go in expires by itself. */
	return err;
}

int egr_learned_rebase(struct egr_learned *l, uint32_t sandbox_id, uint32_t old_policy_id,
		       uint32_t new_policy_id, const struct egr_dnspolicy *pol)
{
	return egr_learned_rebase_local(l, sandbox_id, old_policy_id, new_policy_id, pol, NULL,
					NULL);
}

int egr_learned_rebase_local(struct egr_learned *l, uint32_t sandbox_id, uint32_t old_policy_id,
			     uint32_t new_policy_id, const struct egr_dnspolicy *pol,
			     egr_rebind_local_fn is_local, void *local_ctx)
{
	struct sbl *s = find_sbl(l, sandbox_id, false);
	uint64_t now = egr_boot_ns();
	int err = 0;

	if (!s)
		return 0;
	/* The old policy stays in force until the caller switches: its keys
	 * are only noted here and removed by egr_learned_drop_stale(). */
	free(s->stale);
	s->stale = calloc(s->n ? s->n : 1, sizeof(*s->stale));
	s->nstale = 0;
	s->stale_policy_id = old_policy_id;
	for (size_t i = 0; i < s->n;) {
		struct addr *e = &s->addrs[i];
		size_t keep = 0;

		if (s->stale) {
			s->stale[s->nstale].family = e->family;
			memcpy(s->stale[s->nstale].addr, e->addr, sizeof(e->addr));
			s->nstale++;
		}
		/* An address the new policy's dns_rebind_allow no longer
		 * covers would not be learned now: it goes, whatever names
		 * resolved to it. */
		bool rebind = pol && !egr_dnspolicy_audit(pol) &&
			      egr_dnspolicy_rebind_blocked_local(pol, e->family, e->addr,
								 is_local, local_ctx, NULL);

		for (size_t j = 0; j < e->nnames; j++) {
			struct egr_dnspolicy_match m;

			if (rebind || e->names[j].expires_ns <= now || !pol)
				continue;
			/* The new policy's name, or one an approval in force
			 * covers (docs/dns.md "Approvals"). */
			if ((egr_dnspolicy_match(pol, e->names[j].qname, &m) != 1 ||
			     !m.ports.nranges) &&
			    !(l->grant && l->grant(l->grant_ctx, sandbox_id, e->names[j].qname,
						   &m.ports) && m.ports.nranges))
				continue;
			e->names[j].ports = m.ports;
			e->names[keep++] = e->names[j];
		}
		s->nnames -= e->nnames - keep;
		e->nnames = keep;
		if (!keep) {
			drop_addr(s, i);
			continue;
		}
		/* The base is the new policy's static rule for the address. */
		find_base(l, e, new_policy_id);
		if (sync_addr(l, e, new_policy_id, now))
			err = -ENOSPC;
		i++;
	}
	return err;
}

void egr_learned_drop_stale(struct egr_learned *l, uint32_t sandbox_id)
{
	struct sbl *s = find_sbl(l, sandbox_id, false);

	if (!s)
		return;
	for (size_t i = 0; i < s->nstale; i++)
		kernel_del(l, s->stale[i].family, s->stale[i].addr, s->stale_policy_id);
	free(s->stale);
	s->stale = NULL;
	s->nstale = 0;
}

bool egr_learned_allows(struct egr_learned *l, uint32_t sandbox_id, int family,
			const uint8_t *addr, uint16_t port, int protocol)
{
	struct sbl *s = find_sbl(l, sandbox_id, false);
	struct addr *e = s ? find_addr(s, family, addr) : NULL;
	uint64_t now = egr_boot_ns();

	for (size_t i = 0; e && i < e->nnames; i++) {
		struct egr_rule r;
		int expired;

		if (e->names[i].expires_ns <= now)
			continue;
		memset(&r, 0, sizeof(r));
		r.nranges = e->names[i].ports.nranges;
		memcpy(r.ranges, e->names[i].ports.ranges, sizeof(r.ranges));
		if (egr_rule_allows(&r, port, (uint32_t)protocol, now, &expired) == EGR_ALLOW)
			return true;
	}
	return false;
}

bool egr_learned_has_name(struct egr_learned *l, uint32_t sandbox_id, int family,
			  const uint8_t *addr, const char *name)
{
	struct sbl *s = l && name ? find_sbl(l, sandbox_id, false) : NULL;
	struct addr *e = s ? find_addr(s, family, addr) : NULL;
	uint64_t now = egr_boot_ns();

	for (size_t i = 0; e && i < e->nnames; i++)
		if (e->names[i].expires_ns > now && strcasecmp(e->names[i].qname, name) == 0)
			return true;
	return false;
}

const char *egr_learned_name_of(struct egr_learned *l, uint32_t sandbox_id, int family,
				const uint8_t *addr)
{
	struct sbl *s = l ? find_sbl(l, sandbox_id, false) : NULL;
	struct addr *e = s ? find_addr(s, family, addr) : NULL;
	uint64_t now = egr_boot_ns();

	for (size_t i = 0; e && i < e->nnames; i++)
		if (e->names[i].expires_ns > now)
			return e->names[i].qname;
	return NULL;
}

size_t egr_learned_expiring(struct egr_learned *l, uint64_t now_boot_ns, uint64_t until_boot_ns,
			    uint32_t *ids, size_t max)
{
	size_t n = 0;

	for (struct sbl *s = l->sbs; s && n < max; s = s->next) {
		bool due = false;

		for (size_t i = 0; i < s->n && !due; i++)
			for (size_t j = 0; j < s->addrs[i].nnames && !due; j++)
				due = s->addrs[i].names[j].expires_ns > now_boot_ns &&
				      s->addrs[i].names[j].expires_ns <= until_boot_ns;
		if (due)
			ids[n++] = s->id;
	}
	return n;
}

int egr_learned_keep(struct egr_learned *l, uint32_t sandbox_id, int family, const uint8_t *addr,
		     uint64_t until_boot_ns)
{
	struct sbl *s = find_sbl(l, sandbox_id, false);
	struct addr *e = s ? find_addr(s, family, addr) : NULL;
	uint64_t now = egr_boot_ns();
	struct egr_sandbox ksb;
	bool changed = false;
	int err;

	if (!e)
		return -ENOENT;
	for (size_t i = 0; i < e->nnames; i++) {
		if (e->names[i].expires_ns <= now || e->names[i].expires_ns >= until_boot_ns)
			continue;
		e->names[i].expires_ns = until_boot_ns;
		changed = true;
	}
	if (!changed)
		return 0;
	err = egr_bpf_get_sandbox(l->bpf, s->id, &ksb);
	return err ? err : sync_addr(l, e, ksb.policy_id, now);
}

unsigned int egr_learned_reclaim(struct egr_learned *l, uint64_t now_boot_ns)
{
	unsigned int reclaimed = 0;

	for (struct sbl *s = l->sbs; s; s = s->next) {
		struct egr_sandbox ksb;
		uint32_t policy_id;

		if (egr_bpf_get_sandbox(l->bpf, s->id, &ksb))
			continue;
		policy_id = ksb.policy_id;
		for (size_t i = 0; i < s->n;) {
			struct addr *e = &s->addrs[i];
			size_t keep = 0;

			for (size_t j = 0; j < e->nnames; j++)
				if (e->names[j].expires_ns > now_boot_ns)
					e->names[keep++] = e->names[j];
			if (keep == e->nnames) {
				i++;
				continue;
			}
			reclaimed += (unsigned int)(e->nnames - keep);
			s->nnames -= e->nnames - keep;
			e->nnames = keep;
			sync_addr(l, e, policy_id, now_boot_ns);
			if (!keep)
				drop_addr(s, i);
			else
				i++;
		}
	}
	return reclaimed;
}

void egr_learned_forget(struct egr_learned *l, uint32_t sandbox_id, uint32_t policy_id)
{
	struct sbl **ps, *s;

	for (ps = &l->sbs; (s = *ps); ps = &s->next) {
		if (s->id != sandbox_id)
			continue;
		for (size_t i = 0; i < s->n; i++)
			kernel_del(l, s->addrs[i].family, s->addrs[i].addr, policy_id);
		*ps = s->next;
		free_sbl(s);
		return;
	}
}

size_t egr_learned_count(struct egr_learned *l, uint32_t sandbox_id)
{
	struct sbl *s = find_sbl(l, sandbox_id, false);

	return s ? s->nnames : 0;
}
