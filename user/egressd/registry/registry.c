// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The set of sandboxes and held cgroups, and the tenant names: no kernel,
 * no files here (the lifecycle operations keep those in step), so the unit
 * test links this alone (tests/unit/test_registry.c).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit.h"
#include "registry/registry_impl.h"

struct egr_sbnode {
	struct egr_sb *sb;
	size_t pos; /* its index in set.v */
	struct egr_sbnode *next_id, *next_cg, *next_path;
};

static size_t hash_id(uint32_t id, size_t nb)
{
	return (size_t)((id * 2654435761u) & (nb - 1));
}

static size_t hash_cg(uint64_t cg, size_t nb)
{
	cg ^= cg >> 33;
	cg *= 0xff51afd7ed558ccdULL;
	cg ^= cg >> 33;
	return (size_t)(cg & (nb - 1));
}

/* FNV-1a of the first len bytes of a cgroup path. */
static size_t hash_path(const char *path, size_t len, size_t nb)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)path[i]) * 0x100000001b3ULL;
	return (size_t)(h & (nb - 1));
}

static void link_node(struct egr_sbset *s, struct egr_sbnode *n)
{
	size_t i = hash_id(n->sb->id, s->nbuckets), c = hash_cg(n->sb->cgroup_id, s->nbuckets);
	size_t p = hash_path(n->sb->cgroup, strlen(n->sb->cgroup), s->nbuckets);

	n->next_id = s->by_id[i];
	s->by_id[i] = n;
	n->next_cg = s->by_cg[c];
	s->by_cg[c] = n;
	n->next_path = s->by_path[p];
	s->by_path[p] = n;
}

/* Keep the tables at least as wide as the set: chains stay short. */
static int rehash(struct egr_sbset *s, size_t want)
{
	struct egr_sbnode **bi, **bc, **bp;
	size_t nb = s->nbuckets ? s->nbuckets : 16;

	while (nb < want)
		nb *= 2;
	if (nb == s->nbuckets)
		return 0;
	bi = calloc(nb, sizeof(*bi));
	bc = calloc(nb, sizeof(*bc));
	bp = calloc(nb, sizeof(*bp));
	if (!bi || !bc || !bp) {
		free(bi);
		free(bc);
		free(bp);
		return -ENOMEM;
	}
	free(s->by_id);
	free(s->by_cg);
	free(s->by_path);
	s->by_id = bi;
	s->by_cg = bc;
	s->by_path = bp;
	s->nbuckets = nb;
	for (size_t k = 0; k < s->n; k++)
		link_node(s, s->v[k]);
	return 0;
}

struct egr_registry *egr_reg_alloc(void)
{
	struct egr_registry *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->next_sandbox_id = 1;
	r->next_policy_id = 1;
	if (rehash(&r->set, 16)) {
		free(r);
		errno = ENOMEM;
		return NULL;
	}
	return r;
}

int egr_reg_add(struct egr_registry *r, struct egr_sb *sb)
{
	struct egr_sbset *s = &r->set;
	struct egr_sbnode *n;

	if (egr_reg_by_id(r, sb->id))
		return -EEXIST;
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		struct egr_sbnode **v = realloc(s->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	if (rehash(s, s->n + 1))
		return -ENOMEM;
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->sb = sb;
	n->pos = s->n;
	s->v[s->n++] = n;
	link_node(s, n);
	if (sb->tenant_quota_bytes)
		r->tenant_quota_sbs++;
	r->gen++;
	return 0;
}

static void unlink_node(struct egr_sbset *s, struct egr_sbnode *n)
{
	struct egr_sbnode **p;

	for (p = &s->by_id[hash_id(n->sb->id, s->nbuckets)]; *p; p = &(*p)->next_id)
		if (*p == n) {
			*p = n->next_id;
			break;
		}
	for (p = &s->by_cg[hash_cg(n->sb->cgroup_id, s->nbuckets)]; *p; p = &(*p)->next_cg)
		if (*p == n) {
			*p = n->next_cg;
			break;
		}
	for (p = &s->by_path[hash_path(n->sb->cgroup, strlen(n->sb->cgroup), s->nbuckets)]; *p;
	     p = &(*p)->next_path)
		if (*p == n) {
			*p = n->next_path;
			break;
		}
}

static struct egr_sbnode *node_of(const struct egr_sbset *s, const struct egr_sb *sb)
{
	struct egr_sbnode *n;

	for (n = s->by_id[hash_id(sb->id, s->nbuckets)]; n; n = n->next_id)
		if (n->sb == sb)
			return n;
	return NULL;
}

void egr_reg_remove(struct egr_registry *r, struct egr_sb *sb)
{
	struct egr_sbset *s = &r->set;
	struct egr_sbnode *n = node_of(s, sb);

	if (!n)
		return;
	if (sb->tenant_quota_bytes)
		r->tenant_quota_sbs--;
	r->gen++;
	unlink_node(s, n);
	/* The last one fills the gap (egr_reg_next knows). */
	s->v[n->pos] = s->v[--s->n];
	s->v[n->pos]->pos = n->pos;
	free(n);
}

struct egr_sb *egr_reg_by_id(const struct egr_registry *r, uint32_t id)
{
	const struct egr_sbset *s = &r->set;

	for (struct egr_sbnode *n = s->by_id[hash_id(id, s->nbuckets)]; n; n = n->next_id)
		if (n->sb->id == id)
			return n->sb;
	return NULL;
}

struct egr_sb *egr_reg_by_cgroup_id(const struct egr_registry *r, uint64_t cgroup_id)
{
	const struct egr_sbset *s = &r->set;

	for (struct egr_sbnode *n = s->by_cg[hash_cg(cgroup_id, s->nbuckets)]; n; n = n->next_cg)
		if (n->sb->cgroup_id == cgroup_id)
			return n->sb;
	return NULL;
}

/* The sandbox whose cgroup is the first len bytes of path. */
static struct egr_sb *by_path(const struct egr_sbset *s, const char *path, size_t len)
{
	for (struct egr_sbnode *n = s->by_path[hash_path(path, len, s->nbuckets)]; n;
	     n = n->next_path)
		if (strncmp(n->sb->cgroup, path, len) == 0 && n->sb->cgroup[len] == '\0')
			return n->sb;
	return NULL;
}

struct egr_sb *egr_reg_find(struct egr_registry *r, const char *cgroup, uint32_t id)
{
	char real[PATH_MAX];

	if (!cgroup)
		return egr_reg_by_id(r, id);
	if (!realpath(cgroup, real))
		snprintf(real, sizeof(real), "%s", cgroup);
	return by_path(&r->set, real, strlen(real));
}

size_t egr_reg_count(const struct egr_registry *r)
{
	return r->set.n;
}

uint64_t egr_reg_gen(const struct egr_registry *r)
{
	return r->gen;
}

struct egr_sb *egr_reg_next(const struct egr_registry *r, struct egr_reg_iter *it)
{
	const struct egr_sbset *s = &r->set;

	/* The one handed out last was removed: its slot holds the next one. */
	if (it->last && it->pos && (it->pos > s->n || s->v[it->pos - 1]->sb != it->last))
		it->pos--;
	if (it->pos >= s->n) {
		it->last = NULL;
		return NULL;
	}
	it->last = s->v[it->pos++]->sb;
	return (struct egr_sb *)it->last;
}

int egr_reg_foreach(struct egr_registry *r, int (*fn)(struct egr_sb *sb, void *ctx), void *ctx)
{
	struct egr_reg_iter it = { 0 };
	int ret;

	for (struct egr_sb *sb; (sb = egr_reg_next(r, &it));)
		if ((ret = fn(sb, ctx)))
			return ret;
	return 0;
}

size_t egr_reg_sweep(const struct egr_registry *r, size_t *cursor, size_t max, uint32_t *ids)
{
	const struct egr_sbset *s = &r->set;
	size_t k = max < s->n ? max : s->n;

	if (!s->n) {
		*cursor = 0;
		return 0;
	}
	if (*cursor >= s->n)
		*cursor = 0;
	for (size_t i = 0; i < k; i++)
		ids[i] = s->v[(*cursor + i) % s->n]->sb->id;
	*cursor = (*cursor + k) % s->n;
	return k;
}

void egr_sb_free(struct egr_sb *sb)
{
	if (!sb)
		return;
	free(sb->cgroup);
	free(sb->tenant);
	free(sb->execution_id);
	free(sb->principal);
	free(sb->tool);
	free(sb->version);
	json_decref(sb->container);
	free(sb->netns);
	free(sb->netdev);
	free(sb->end_status);
	free(sb);
}

int egr_reg_set_end_status(struct egr_registry *r, struct egr_sb *sb, const char *status)
{
	char *s = status ? strdup(status) : NULL;

	(void)r;
	if (status && !s)
		return -ENOMEM;
	free(sb->end_status);
	sb->end_status = s;
	return 0;
}

/* --- tenants ------------------------------------------------------------------ */

size_t egr_reg_tenant_count(const struct egr_registry *r)
{
	return r->ntenants;
}

const char *egr_reg_tenant_name(const struct egr_registry *r, uint32_t tenant_id)
{
	return tenant_id >= 1 && tenant_id <= r->ntenants ? r->tenants[tenant_id - 1] : NULL;
}

uint32_t egr_reg_tenant_intern(struct egr_registry *r, const char *name, bool *added)
{
	char **nt;

	*added = false;
	for (size_t i = 0; i < r->ntenants; i++)
		if (r->tenants[i] && strcmp(r->tenants[i], name) == 0)
			return (uint32_t)(i + 1);
	nt = realloc(r->tenants, (r->ntenants + 1) * sizeof(*nt));
	if (!nt)
		return 0;
	r->tenants = nt;
	nt[r->ntenants] = strdup(name);
	if (!nt[r->ntenants])
		return 0;
	++r->ntenants;
	*added = true;
	return (uint32_t)r->ntenants;
}

/* --- held cgroups --------------------------------------------------------------- */

struct egr_held *egr_reg_find_held(struct egr_registry *r, const char *cgroup, uint32_t id)
{
	char real[PATH_MAX];

	if (cgroup && !realpath(cgroup, real))
		snprintf(real, sizeof(real), "%s", cgroup);
	for (size_t i = 0; i < r->nheld; i++) {
		if (cgroup && r->held[i].cgroup && strcmp(r->held[i].cgroup, real) == 0)
			return &r->held[i];
		if (!cgroup && r->held[i].id == id)
			return &r->held[i];
	}
	return NULL;
}

size_t egr_reg_held_count(const struct egr_registry *r, enum egr_held_state state)
{
	size_t n = 0;

	for (size_t i = 0; i < r->nheld; i++)
		n += r->held[i].state == state;
	return n;
}

size_t egr_reg_held_total(const struct egr_registry *r)
{
	return r->nheld;
}

const struct egr_held *egr_reg_held_at(const struct egr_registry *r, size_t i)
{
	return i < r->nheld ? &r->held[i] : NULL;
}

struct egr_held *egr_reg_held_add(struct egr_registry *r, uint32_t id, uint32_t tenant_id,
				  uint64_t cgroup_id, const char *cgroup, enum egr_held_state state,
				  const char *reason, time_t since)
{
	struct egr_held *h;

	if (r->nheld == r->capheld) {
		size_t cap = r->capheld ? r->capheld * 2 : 16;
		struct egr_held *n = realloc(r->held, cap * sizeof(*n));

		if (!n)
			return NULL;
		r->held = n;
		r->capheld = cap;
	}
	h = &r->held[r->nheld];
	memset(h, 0, sizeof(*h));
	if (cgroup && !(h->cgroup = strdup(cgroup)))
		return NULL;
	h->id = id;
	h->tenant_id = tenant_id;
	h->cgroup_id = cgroup_id;
	h->state = state;
	h->since = since;
	snprintf(h->reason, sizeof(h->reason), "%s", reason ? reason : "");
	r->nheld++;
	return h;
}

void egr_reg_held_remove(struct egr_registry *r, struct egr_held *h)
{
	free(h->cgroup);
	*h = r->held[--r->nheld];
}

static bool path_within(const char *cgroup, const char *path)
{
	size_t len = strlen(cgroup);

	return strncmp(cgroup, path, len) == 0 && (path[len] == '\0' || path[len] == '/');
}

bool egr_reg_confines(struct egr_registry *r, const char *path)
{
	size_t len = strlen(path);

	/* path itself and each of its ancestors (every control request asks:
	 * a lookup per level, not a scan of the sandboxes). */
	for (size_t i = 1; i <= len; i++)
		if ((i == len || path[i] == '/') && by_path(&r->set, path, i))
			return true;
	for (size_t i = 0; i < r->nheld; i++)
		if (r->held[i].cgroup && path_within(r->held[i].cgroup, path))
			return true;
	return false;
}

/* --- what it was started with ---------------------------------------------------- */

struct egr_bpf *egr_reg_bpf(const struct egr_registry *r)
{
	return r->bpf;
}

struct egr_dnsproxy *egr_reg_dns(const struct egr_registry *r)
{
	return r->dns;
}

struct egr_inspect *egr_reg_inspect(const struct egr_registry *r)
{
	return r->inspect;
}

const char *egr_reg_state_dir(const struct egr_registry *r)
{
	return r->st.dir;
}

void egr_reg_free(struct egr_registry *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->set.n; i++) {
		egr_sb_free(r->set.v[i]->sb);
		free(r->set.v[i]);
	}
	free(r->set.v);
	free(r->set.by_id);
	free(r->set.by_cg);
	free(r->set.by_path);
	for (size_t i = 0; i < r->ntenants; i++)
		free(r->tenants[i]);
	free(r->tenants);
	for (size_t i = 0; i < r->nheld; i++)
		free(r->held[i].cgroup);
	free(r->held);
	egr_state_close(&r->st);
	free(r);
}
