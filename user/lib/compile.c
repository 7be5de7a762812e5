// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Rule compilation (compile.h). Per address family:
 *  1. every address entry becomes an item (masked prefix, port range,
 *     protocols, entry index); items are sorted by (prefixlen, addr, ...);
 *  2. equal (prefixlen, addr) runs form one prefix;
 *  3. prefixes are visited shortest first; each one's rule is the merge of
 *     its own ranges and the finished rule of its longest covering prefix
 *     (which already holds the ranges of all of its own ancestors), found by
 *     binary search over only the prefix lengths the policy uses.
 * O(n log n) overall: a million distinct /32s compile in well under a second.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "compile.h"
#include "netaddr.h"

struct item {
	uint8_t addr[16];
	uint8_t plen;
	uint16_t lo, hi, protos;
	uint32_t index;
};

struct prefix {
	uint32_t first, n; /* items */
	uint32_t min_index;
};

struct ival {
	uint32_t lo, hi;
};

struct family {
	unsigned int alen; /* 4 or 16 */
	struct item *items;
	size_t nitems;
	struct prefix *pfx;
	size_t npfx;
	struct egr_c4 *out4; /* the result, one per prefix (alen 4) */
	struct egr_c6 *out6; /* (alen 16) */
	size_t start[130]; /* first prefix of each length; start[129] = npfx */
	uint8_t present[129];
};

struct scratch {
	struct ival *tcp, *udp;
	struct egr_port_range *out;
	size_t cap;
};

static uint8_t *pfx_addr(const struct family *f, size_t i)
{
	return f->out4 ? f->out4[i].addr : f->out6[i].addr;
}

static uint8_t pfx_len(const struct family *f, size_t i)
{
	return f->out4 ? f->out4[i].prefixlen : f->out6[i].prefixlen;
}

static struct egr_rule *pfx_rule(const struct family *f, size_t i)
{
	return f->out4 ? &f->out4[i].rule : &f->out6[i].rule;
}

static int cmp_item(const void *a, const void *b)
{
	const struct item *x = a, *y = b;
	int c;

	if (x->plen != y->plen)
		return x->plen < y->plen ? -1 : 1;
	c = memcmp(x->addr, y->addr, sizeof(x->addr)); /* unused bytes are zero */
	if (c)
		return c;
	if (x->lo != y->lo)
		return x->lo < y->lo ? -1 : 1;
	if (x->hi != y->hi)
		return x->hi < y->hi ? -1 : 1;
	if (x->protos != y->protos)
		return x->protos < y->protos ? -1 : 1;
	if (x->index != y->index)
		return x->index < y->index ? -1 : 1;
	return 0;
}

static int cmp_ival(const void *a, const void *b)
{
	const struct ival *x = a, *y = b;

	if (x->lo != y->lo)
		return x->lo < y->lo ? -1 : 1;
	if (x->hi != y->hi)
		return x->hi < y->hi ? -1 : 1;
	return 0;
}

/* Sort and union overlapping or adjacent intervals in place; new count. */
static size_t union_ivals(struct ival *v, size_t n)
{
	size_t i, o = 0;

	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_ival);
	for (i = 1; i < n; i++) {
		if (v[i].lo <= v[o].hi + 1) {
			if (v[i].hi > v[o].hi)
				v[o].hi = v[i].hi;
		} else {
			v[++o] = v[i];
		}
	}
	return o + 1;
}

static int scratch_reserve(struct scratch *s, size_t n)
{
	struct ival *t, *u;
	struct egr_port_range *o;

	if (n <= s->cap)
		return 0;
	t = realloc(s->tcp, n * sizeof(*t));
	if (!t)
		return -ENOMEM;
	s->tcp = t;
	u = realloc(s->udp, n * sizeof(*u));
	if (!u)
		return -ENOMEM;
	s->udp = u;
	o = realloc(s->out, 2 * n * sizeof(*o));
	if (!o)
		return -ENOMEM;
	s->out = o;
	s->cap = n;
	return 0;
}

static void add_range(struct scratch *s, size_t *nt, size_t *nu, uint16_t lo, uint16_t hi,
		      uint16_t protos)
{
	if (protos & EGR_PROTO_TCP)
		s->tcp[(*nt)++] = (struct ival){ lo, hi };
	if (protos & EGR_PROTO_UDP)
		s->udp[(*nu)++] = (struct ival){ lo, hi };
}

/*
 * Rule of prefix i = its items merged with the parent's finished rule.
 * Returns how many ranges the result needs; the rule is filled only when
 * that fits EGR_MAX_PORT_RANGES.
 */
static int build_rule(const struct family *f, size_t pi, const struct egr_rule *parent,
		      struct scratch *s, size_t *needed)
{
	const struct prefix *p = &f->pfx[pi];
	struct egr_rule *rule = pfx_rule(f, pi);
	size_t n = p->n + (parent ? parent->nranges : 0);
	size_t nt = 0, nu = 0, i, j, o = 0;
	int ret;

	ret = scratch_reserve(s, n);
	if (ret)
		return ret;
	for (i = 0; i < p->n; i++) {
		const struct item *it = &f->items[p->first + i];

		add_range(s, &nt, &nu, it->lo, it->hi, it->protos);
	}
	if (parent)
		for (i = 0; i < parent->nranges; i++)
			add_range(s, &nt, &nu, parent->ranges[i].lo, parent->ranges[i].hi,
				  parent->ranges[i].protos);
	nt = union_ivals(s->tcp, nt);
	nu = union_ivals(s->udp, nu);
	/* Both lists are sorted by (lo, hi): identical intervals combine into ANY, and
	 * the result comes out sorted by (lo, hi, protos). */
	for (i = 0, j = 0; i < nt || j < nu;) {
		struct egr_port_range r;

		if (j == nu || (i < nt && cmp_ival(&s->tcp[i], &s->udp[j]) < 0)) {
			r = (struct egr_port_range){ (uint16_t)s->tcp[i].lo,
						     (uint16_t)s->tcp[i].hi, EGR_PROTO_TCP };
			i++;
		} else if (i == nt || cmp_ival(&s->tcp[i], &s->udp[j]) > 0) {
			r = (struct egr_port_range){ (uint16_t)s->udp[j].lo,
						     (uint16_t)s->udp[j].hi, EGR_PROTO_UDP };
			j++;
		} else {
			r = (struct egr_port_range){ (uint16_t)s->tcp[i].lo,
						     (uint16_t)s->tcp[i].hi, EGR_PROTO_ANY };
			i++;
			j++;
		}
		s->out[o++] = r;
	}
	*needed = o;
	if (o > EGR_MAX_PORT_RANGES)
		return 0;
	/* The output array was calloc'ed: padding and unused ranges stay zero. */
	rule->expires_ns = 0;
	rule->nranges = (uint32_t)o;
	for (i = 0; i < o; i++) {
		rule->ranges[i].lo = s->out[i].lo;
		rule->ranges[i].hi = s->out[i].hi;
		rule->ranges[i].protos = s->out[i].protos;
	}
	return 0;
}

/* Index of the prefix (plen, addr) if the policy has it, else -1. */
static ssize_t find_prefix(const struct family *f, unsigned int plen, const uint8_t *addr)
{
	size_t lo = f->start[plen], hi = f->start[plen + 1];

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = memcmp(pfx_addr(f, mid), addr, f->alen);

		if (!c)
			return (ssize_t)mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

static void fail_prefix(const struct family *f, size_t pi, size_t needed, struct egr_error *err)
{
	struct egr_prefix p = { .family = f->alen == 4 ? AF_INET : AF_INET6,
				.plen = (uint8_t)pfx_len(f, pi) };
	char a[EGR_PREFIX_TEXT_MAX];

	memcpy(p.addr, pfx_addr(f, pi), f->alen);
	if (egr_prefix_format(&p, false, a, sizeof(a)) < 0)
		snprintf(a, sizeof(a), "?");
	snprintf(err->field, sizeof(err->field), "network.outbound_allow[%u]",
		 f->pfx[pi].min_index);
	snprintf(err->message, sizeof(err->message),
		 "prefix %s needs %zu port ranges, max %d (ranges of covering prefixes "
		 "are merged into it; combine ports into ranges or use \"*\")",
		 a, needed, EGR_MAX_PORT_RANGES);
}

static int compile_family(struct family *f, struct scratch *s, struct egr_error *err)
{
	size_t i, k;
	unsigned int L;
	int ret;

	f->npfx = 0;
	if (!f->nitems)
		return 0;
	qsort(f->items, f->nitems, sizeof(*f->items), cmp_item);
	f->pfx = calloc(f->nitems, sizeof(*f->pfx));
	if (!f->pfx)
		return -ENOMEM;
	for (i = 0; i < f->nitems; i++) {
		const struct item *it = &f->items[i];
		struct prefix *p = f->npfx ? &f->pfx[f->npfx - 1] : NULL;

		if (p) {
			const struct item *head = &f->items[p->first];

			if (head->plen == it->plen && !memcmp(head->addr, it->addr, f->alen)) {
				p->n++;
				if (it->index < p->min_index)
					p->min_index = it->index;
				continue;
			}
		}
		p = &f->pfx[f->npfx++];
		p->first = (uint32_t)i;
		p->n = 1;
		p->min_index = it->index;
	}
	if (f->alen == 4)
		f->out4 = calloc(f->npfx, sizeof(*f->out4));
	else
		f->out6 = calloc(f->npfx, sizeof(*f->out6));
	if (!f->out4 && !f->out6)
		return -ENOMEM;
	for (i = 0; i < f->npfx; i++) {
		const struct item *it = &f->items[f->pfx[i].first];

		if (f->out4) {
			memcpy(f->out4[i].addr, it->addr, 4);
			f->out4[i].prefixlen = it->plen;
		} else {
			memcpy(f->out6[i].addr, it->addr, 16);
			f->out6[i].prefixlen = it->plen;
		}
	}
	memset(f->present, 0, sizeof(f->present));
	for (L = 0, k = 0; L <= 129; L++) {
		while (k < f->npfx && pfx_len(f, k) < L)
			k++;
		f->start[L] = k;
		if (L <= 128 && k < f->npfx && pfx_len(f, k) == L)
			f->present[L] = 1;
	}
	/* Shortest first, so a parent's rule is final before its children use it. */
	for (i = 0; i < f->npfx; i++) {
		const struct egr_rule *parent = NULL;
		unsigned int plen = pfx_len(f, i);
		size_t needed = 0;
		uint8_t a[16];
		int l;

		for (l = (int)plen - 1; l >= 0 && !parent; l--) {
			ssize_t pi;

			if (!f->present[l])
				continue;
			memcpy(a, pfx_addr(f, i), f->alen);
			egr_prefix_mask(a, f->alen, (unsigned int)l);
			pi = find_prefix(f, (unsigned int)l, a);
			if (pi >= 0)
				parent = pfx_rule(f, (size_t)pi);
		}
		ret = build_rule(f, i, parent, s, &needed);
		if (ret)
			return ret;
		if (needed > EGR_MAX_PORT_RANGES) {
			fail_prefix(f, i, needed, err);
			return -EINVAL;
		}
	}
	return 0;
}

void egr_compiled_free(struct egr_compiled *c)
{
	if (!c)
		return;
	free(c->v4);
	free(c->v6);
	memset(c, 0, sizeof(*c));
}

int egr_policy_compile(const struct egr_policy *p, struct egr_compiled *out,
		       struct egr_error *err)
{
	struct family f4 = { .alen = 4 }, f6 = { .alen = 16 };
	struct scratch s = { 0 };
	struct egr_error scratch_err;
	size_t i;
	int ret = 0;

	if (!err)
		err = &scratch_err;
	memset(err, 0, sizeof(*err));
	if (!out || !p)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	for (i = 0; i < p->nallow; i++) {
		const struct egr_allow *a = &p->allow[i];

		if (a->kind == EGR_HOST_V4 && a->prefixlen <= 32) {
			f4.nitems++;
		} else if (a->kind == EGR_HOST_V6 && a->prefixlen <= 128) {
			f6.nitems++;
		} else if (a->kind != EGR_HOST_NAME) {
			snprintf(err->field, sizeof(err->field), "network.outbound_allow[%u]",
				 a->index);
			snprintf(err->message, sizeof(err->message), "invalid entry");
			return -EINVAL;
		}
	}
	if ((f4.nitems && !(f4.items = calloc(f4.nitems, sizeof(*f4.items)))) ||
	    (f6.nitems && !(f6.items = calloc(f6.nitems, sizeof(*f6.items))))) {
		ret = -ENOMEM;
		goto out;
	}
	f4.nitems = f6.nitems = 0;
	for (i = 0; i < p->nallow; i++) {
		const struct egr_allow *a = &p->allow[i];
		struct family *f = a->kind == EGR_HOST_V4 ? &f4 : &f6;
		struct item *it;

		if (a->kind == EGR_HOST_NAME)
			continue;
		it = &f->items[f->nitems++];
		memcpy(it->addr, a->addr, f->alen);
		egr_prefix_mask(it->addr, f->alen, a->prefixlen);
		it->plen = a->prefixlen;
		it->lo = a->port_lo <= a->port_hi ? a->port_lo : a->port_hi;
		it->hi = a->port_lo <= a->port_hi ? a->port_hi : a->port_lo;
		it->protos = a->protos & EGR_PROTO_ANY;
		it->index = a->index;
	}
	ret = compile_family(&f4, &s, err);
	if (!ret)
		ret = compile_family(&f6, &s, err);
	if (ret)
		goto out;
	out->v4 = f4.out4;
	out->n4 = f4.npfx;
	out->v6 = f6.out6;
	out->n6 = f6.npfx;
	f4.out4 = NULL;
	f6.out6 = NULL;
out:
	if (ret == -ENOMEM) {
		memset(err, 0, sizeof(*err));
		snprintf(err->message, sizeof(err->message), "out of memory");
	}
	free(f4.items);
	free(f4.pfx);
	free(f4.out4);
	free(f6.items);
	free(f6.pfx);
	free(f6.out6);
	free(s.tcp);
	free(s.udp);
	free(s.out);
	return ret;
}

void egr_c4_key(const struct egr_c4 *e, uint32_t policy_id, struct egr_lpm4_key *k)
{
	memset(k, 0, sizeof(*k));
	k->prefixlen = EGR_LPM_POLICY_BITS + e->prefixlen;
	k->policy_id = policy_id;
	memcpy(k->addr, e->addr, sizeof(k->addr));
}

void egr_c6_key(const struct egr_c6 *e, uint32_t policy_id, struct egr_lpm6_key *k)
{
	memset(k, 0, sizeof(*k));
	k->prefixlen = EGR_LPM_POLICY_BITS + e->prefixlen;
	k->policy_id = policy_id;
	memcpy(k->addr, e->addr, sizeof(k->addr));
}

/* Longest-prefix match over one family's sorted (prefixlen, addr) output,
 * the way the kernel's LPM trie answers: try each length, longest first. */
static const struct egr_rule *lookup(const void *base, size_t n, size_t stride, size_t addr_off,
				     size_t plen_off, size_t rule_off, unsigned int alen,
				     const uint8_t *addr)
{
	for (int plen = (int)alen * 8; plen >= 0; plen--) {
		uint8_t want[16] = { 0 };
		size_t lo = 0, hi = n;

		memcpy(want, addr, (size_t)plen / 8);
		if (plen % 8)
			want[plen / 8] = addr[plen / 8] & (uint8_t)(0xff << (8 - plen % 8));
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			const uint8_t *e = (const uint8_t *)base + mid * stride;
			int c = (int)e[plen_off] - plen;

			if (!c)
				c = memcmp(e + addr_off, want, alen);
			if (!c)
				return (const struct egr_rule *)(e + rule_off);
			if (c < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
	}
	return NULL;
}

const struct egr_rule *egr_compiled_lookup(const struct egr_compiled *c, int v6,
					   const uint8_t *addr)
{
	if (v6)
		return lookup(c->v6, c->n6, sizeof(*c->v6), offsetof(struct egr_c6, addr),
			      offsetof(struct egr_c6, prefixlen), offsetof(struct egr_c6, rule), 16,
			      addr);
	return lookup(c->v4, c->n4, sizeof(*c->v4), offsetof(struct egr_c4, addr),
		      offsetof(struct egr_c4, prefixlen), offsetof(struct egr_c4, rule), 4, addr);
}
