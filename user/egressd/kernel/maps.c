// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Typed operations on egressd's maps (maps.h): with proxymaps.c (the
 * proxies' maps) and sockcount.c, the only bpf_map_* calls of user/ outside
 * the upgrade (migrate.c). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "cgroup.h"
#include "kernel_priv.h"
#include "maps.h"
#include "log.h"

const char *const egr_counter_names[EGR_CNT_MAX] = {
	[EGR_CNT_CONNECT_ALLOW] = "connect_allowed",
	[EGR_CNT_CONNECT_DENY] = "connect_denied",
	[EGR_CNT_SENDMSG_ALLOW] = "sendmsg_allowed",
	[EGR_CNT_SENDMSG_DENY] = "sendmsg_denied",
	[EGR_CNT_SOCK_CREATE_ALLOW] = "sock_create_allowed",
	[EGR_CNT_SOCK_CREATE_DENY] = "sock_create_denied",
	[EGR_CNT_NO_SANDBOX] = "no_sandbox_denied",
	[EGR_CNT_EXPIRED] = "expired_denied",
	[EGR_CNT_SETSOCKOPT_DENY] = "setsockopt_denied",
	[EGR_CNT_BACKSTOP_DROP] = "backstop_dropped",
	[EGR_CNT_INBOUND_DROP] = "inbound_dropped",
	[EGR_CNT_QUOTA_DROP] = "quota_dropped",
	[EGR_CNT_EVENTS_LOST] = "events_lost",
	[EGR_CNT_METER_FULL] = "meter_full",
};


/* --- sandboxes and their cgroups -------------------------------------------- */

int egr_bpf_set_cgroup_sandbox(struct egr_bpf *b, uint64_t cgroup_id, uint32_t sandbox_id)
{
	struct egr_cg_ref ref = { .sandbox_id = sandbox_id };

	if (bpf_map_update_elem(b->fd_storage, &cgroup_id, &ref, BPF_ANY) < 0)
		return -errno;
	/* For the escape guard, which is not attached to the cgroup. */
	if (bpf_map_update_elem(b->fd_sb_cgroups, &cgroup_id, &sandbox_id, BPF_ANY) < 0)
		return errno == E2BIG ? -ENOSPC : -errno;
	return 0;
}

int egr_bpf_forget_cgroup(struct egr_bpf *b, uint64_t cgroup_id)
{
	if (bpf_map_delete_elem(b->fd_sb_cgroups, &cgroup_id) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

/* Every process in dir and below gets home, except in the subtree of a
 * nested sandbox (its own attach gave them its home: the innermost counts). */
static int home_procs_of(struct egr_bpf *b, const char *dir, const struct egr_proc_home *home,
			 size_t *n, int depth)
{
	char path[PATH_MAX];
	struct dirent *de;
	FILE *f;
	DIR *d;
	int err = 0;

	if (depth > EGR_MAX_CGROUP_LEVELS)
		return -ELOOP;
	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	for (unsigned long pid; fscanf(f, "%lu", &pid) == 1;) {
		uint32_t tgid = (uint32_t)pid;
		struct egr_proc_home old;

		/* One the guard marked escaped stays marked (to be killed),
		 * whatever cgroup it has moved to since. */
		if (bpf_map_lookup_elem(b->fd_proc_home, &tgid, &old) == 0 &&
		    (old.flags & EGR_HOME_ESCAPED))
			continue;
		if (bpf_map_update_elem(b->fd_proc_home, &tgid, home, BPF_ANY) < 0) {
			err = errno == E2BIG ? -ENOSPC : -errno;
			break;
		}
		(*n)++;
	}
	fclose(f);
	if (err)
		return err;
	d = opendir(dir);
	if (!d)
		return -errno;
	while ((de = readdir(d)) && !err) {
		uint64_t cgid;
		uint32_t id;

		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (egr_cgroup_id(path, &cgid) == 0 &&
		    bpf_map_lookup_elem(b->fd_sb_cgroups, &cgid, &id) == 0 &&
		    id != home->sandbox_id)
			continue; /* a nested sandbox */
		err = home_procs_of(b, path, home, n, depth + 1);
		if (err == -ENOENT)
			err = 0; /* removed meanwhile */
	}
	closedir(d);
	return err;
}

int egr_bpf_home_procs(struct egr_bpf *b, const char *cgroup_path, uint64_t cgroup_id,
		       uint32_t sandbox_id, size_t *n)
{
	struct egr_proc_home home = { .cgroup_id = cgroup_id, .sandbox_id = sandbox_id };

	*n = 0;
	return home_procs_of(b, cgroup_path, &home, n, 0);
}

bool egr_bpf_cgroup_names(struct egr_bpf *b, uint64_t cgroup_id, uint32_t sandbox_id)
{
	struct egr_cg_ref ref;

	return bpf_map_lookup_elem(b->fd_storage, &cgroup_id, &ref) == 0 &&
	       ref.sandbox_id == sandbox_id;
}

bool egr_bpf_rules_match(struct egr_bpf *b, uint32_t policy_id, const struct egr_compiled *c)
{
	struct egr_rule v;

	/* An exact key finds its own entry; were it missing, a shorter prefix
	 * of the same policy with an equal value allows no less. */
	for (size_t i = 0; i < c->n4; i++) {
		struct egr_lpm4_key k;

		egr_c4_key(&c->v4[i], policy_id, &k);
		if (bpf_map_lookup_elem(b->fd_allow4, &k, &v) < 0 ||
		    memcmp(&v, &c->v4[i].rule, sizeof(v)) != 0)
			return false;
	}
	for (size_t i = 0; i < c->n6; i++) {
		struct egr_lpm6_key k;

		egr_c6_key(&c->v6[i], policy_id, &k);
		if (bpf_map_lookup_elem(b->fd_allow6, &k, &v) < 0 ||
		    memcmp(&v, &c->v6[i].rule, sizeof(v)) != 0)
			return false;
	}
	return true;
}

/*
 * EGR_SB_TENANT_NO_QUOTA (include/egressd.h) is this file's cache, not a
 * policy switch: callers never see it (egr_bpf_get_sandbox strips it) and
 * never set it. The invariant: while egr_quota_tenant holds an entry for a
 * tenant, no egr_sandboxes entry of that tenant carries the flag. Writers
 * keep it in either order they run: a sandbox entry gets the flag only when
 * the tenant had no quota just before the write, and loses it again if one
 * is there just after; a tenant quota that did not exist clears the flag on
 * every entry of the tenant before it is written and once more after (an
 * entry written in between). Any doubt (a lookup error other than ENOENT)
 * means no flag and, for a quota write, the clears: the programs then look
 * the quota up, the old behaviour.
 */
enum tenant_quota { TQ_NONE, TQ_SET, TQ_UNKNOWN };

static enum tenant_quota tenant_quota_state(const struct egr_bpf *b, uint32_t tenant_id)
{
	struct egr_quota q;

	if (bpf_map_lookup_elem(b->fd_quota_tenant, &tenant_id, &q) == 0)
		return TQ_SET;
	return errno == ENOENT ? TQ_NONE : TQ_UNKNOWN;
}

static int write_sandbox(struct egr_bpf *b, uint32_t sandbox_id, const struct egr_sandbox *sb)
{
	if (bpf_map_update_elem(b->fd_sandboxes, &sandbox_id, sb, BPF_ANY) < 0)
		return errno == E2BIG ? -ENOSPC : -errno;
	return 0;
}

int egr_bpf_put_sandbox(struct egr_bpf *b, uint32_t sandbox_id, const struct egr_sandbox *sb)
{
	struct egr_sandbox k = *sb;
	int err;

	k.flags &= ~(uint32_t)EGR_SB_TENANT_NO_QUOTA;
	if (tenant_quota_state(b, k.tenant_id) == TQ_NONE)
		k.flags |= EGR_SB_TENANT_NO_QUOTA;
	err = write_sandbox(b, sandbox_id, &k);
	if (err || !(k.flags & EGR_SB_TENANT_NO_QUOTA) ||
	    tenant_quota_state(b, k.tenant_id) == TQ_NONE)
		return err;
	k.flags &= ~(uint32_t)EGR_SB_TENANT_NO_QUOTA;
	return write_sandbox(b, sandbox_id, &k);
}

int egr_bpf_get_sandbox(struct egr_bpf *b, uint32_t sandbox_id, struct egr_sandbox *sb)
{
	if (bpf_map_lookup_elem(b->fd_sandboxes, &sandbox_id, sb) < 0)
		return -errno;
	sb->flags &= ~(uint32_t)EGR_SB_TENANT_NO_QUOTA;
	return 0;
}

int egr_bpf_del_sandbox(struct egr_bpf *b, uint32_t sandbox_id)
{
	if (bpf_map_delete_elem(b->fd_sandboxes, &sandbox_id) < 0 && errno != ENOENT)
		return -errno;
	bpf_map_delete_elem(b->fd_sock_counts, &sandbox_id); /* sockcount.h */
	return 0;
}

static int del_rules_upto(struct egr_bpf *b, uint32_t policy_id, const struct egr_compiled *c,
			  size_t n4, size_t n6)
{
	int ret = 0;

	for (size_t i = 0; i < n4; i++) {
		struct egr_lpm4_key k;

		egr_c4_key(&c->v4[i], policy_id, &k);
		if (bpf_map_delete_elem(b->fd_allow4, &k) < 0 && errno != ENOENT)
			ret = -errno;
	}
	for (size_t i = 0; i < n6; i++) {
		struct egr_lpm6_key k;

		egr_c6_key(&c->v6[i], policy_id, &k);
		if (bpf_map_delete_elem(b->fd_allow6, &k) < 0 && errno != ENOENT)
			ret = -errno;
	}
	if (ret)
		log_warn("could not remove every rule of policy %u: %s", policy_id, strerror(-ret));
	return ret;
}

int egr_bpf_put_rules(struct egr_bpf *b, uint32_t policy_id, const struct egr_compiled *c)
{
	size_t i4, i6 = 0;
	int err = 0;

	for (i4 = 0; i4 < c->n4; i4++) {
		struct egr_lpm4_key k;

		egr_c4_key(&c->v4[i4], policy_id, &k);
		if (bpf_map_update_elem(b->fd_allow4, &k, &c->v4[i4].rule, BPF_NOEXIST) < 0) {
			err = -errno;
			goto fail;
		}
	}
	for (i6 = 0; i6 < c->n6; i6++) {
		struct egr_lpm6_key k;

		egr_c6_key(&c->v6[i6], policy_id, &k);
		if (bpf_map_update_elem(b->fd_allow6, &k, &c->v6[i6].rule, BPF_NOEXIST) < 0) {
			err = -errno;
			goto fail;
		}
	}
	return 0;
fail:
	/* The kernel says E2BIG when a map is at max_entries. */
	if (err == -E2BIG)
		err = -ENOSPC;
	log_warn("insert rules of policy %u: %s; rolling back", policy_id, strerror(-err));
	del_rules_upto(b, policy_id, c, i4, i6);
	return err;
}

int egr_bpf_del_rules(struct egr_bpf *b, uint32_t policy_id, const struct egr_compiled *c)
{
	return del_rules_upto(b, policy_id, c, c->n4, c->n6);
}

static bool is_live(uint32_t id, const uint32_t *live, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (live[i] == id)
			return true;
	return false;
}

int egr_key_list_add(struct egr_key_list *l, const void *key)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		uint8_t *nk = realloc(l->keys, cap * l->key_size);

		if (!nk)
			return -ENOMEM;
		l->keys = nk;
		l->cap = cap;
	}
	memcpy(l->keys + l->n++ * l->key_size, key, l->key_size);
	return 0;
}

struct gc_walk {
	struct egr_key_list dead;
	const uint32_t *live;
	size_t nlive;
};

static int gc_one(void *ctx, const void *key, const void *value)
{
	struct gc_walk *w = ctx;
	uint32_t pid;

	memcpy(&pid, (const uint8_t *)key + offsetof(struct egr_lpm4_key, policy_id), sizeof(pid));
	return is_live(pid, w->live, w->nlive) ? 0 : egr_key_list_add(&w->dead, key);
}

/* Collect then delete: deleting while walking an LPM trie with
 * get_next_key would restart the walk. */
static int gc_map(int fd, size_t key_size, const uint32_t *live, size_t nlive)
{
	struct gc_walk w = { .dead = { .key_size = key_size }, .live = live, .nlive = nlive };
	int removed = 0, err;

	err = egr_kmap_walk(fd, 0, gc_one, &w);
	for (size_t i = 0; !err && i < w.dead.n; i++)
		if (bpf_map_delete_elem(fd, w.dead.keys + i * key_size) == 0)
			removed++;
	free(w.dead.keys);
	return err ? err : removed;
}

int egr_bpf_gc_rules(struct egr_bpf *b, const uint32_t *live, size_t n)
{
	int r4, r6;

	r4 = gc_map(b->fd_allow4, sizeof(struct egr_lpm4_key), live, n);
	if (r4 < 0)
		return r4;
	r6 = gc_map(b->fd_allow6, sizeof(struct egr_lpm6_key), live, n);
	if (r6 < 0)
		return r6;
	return r4 + r6;
}

static int add_id(void *ctx, const void *key, const void *value)
{
	return egr_key_list_add(ctx, key);
}

int egr_bpf_list_sandbox_ids(struct egr_bpf *b, uint32_t **ids, size_t *n)
{
	struct egr_key_list l = { .key_size = sizeof(uint32_t) };
	int err = egr_kmap_walk(b->fd_sandboxes, 0, add_id, &l);

	if (err) {
		free(l.keys);
		return err;
	}
	*ids = (uint32_t *)l.keys;
	*n = l.n;
	return 0;
}

/* Sum a per-CPU egr_meter over the CPUs. */
static int read_meter(int fd, uint32_t id, struct egr_meter *out)
{
	int ncpu = libbpf_num_possible_cpus();
	struct egr_meter *vals;
	int err = 0;

	memset(out, 0, sizeof(*out));
	if (ncpu <= 0)
		return ncpu ? ncpu : -EINVAL;
	vals = calloc((size_t)ncpu, sizeof(*vals));
	if (!vals)
		return -ENOMEM;
	if (bpf_map_lookup_elem(fd, &id, vals) < 0) {
		err = -errno;
	} else {
		for (int c = 0; c < ncpu; c++) {
			const uint64_t *src = (const uint64_t *)&vals[c];
			uint64_t *dst = (uint64_t *)out;

			for (size_t f = 0; f < sizeof(*out) / sizeof(uint64_t); f++)
				dst[f] += src[f];
		}
	}
	free(vals);
	return err;
}

int egr_bpf_meter_sandbox(struct egr_bpf *b, uint32_t sandbox_id, struct egr_meter *out)
{
	return read_meter(b->fd_meter_sb, sandbox_id, out);
}

int egr_bpf_meter_tenant(struct egr_bpf *b, uint32_t tenant_id, struct egr_meter *out)
{
	return read_meter(b->fd_meter_tenant, tenant_id, out);
}

struct dests_walk {
	uint32_t sandbox_id;
	struct egr_dest *out;
	size_t max, n;
	struct egr_key_list keys; /* every key of the sandbox (out may hold fewer) */
};

static int dest_one(void *ctx, const void *key, const void *value)
{
	struct dests_walk *w = ctx;
	const struct egr_dest_key *k = key;

	if (k->sandbox_id != w->sandbox_id)
		return 0;
	if (w->n < w->max) {
		w->out[w->n].key = *k;
		memcpy(&w->out[w->n].val, value, sizeof(w->out[w->n].val));
		w->n++;
	}
	return egr_key_list_add(&w->keys, key);
}

int egr_bpf_sandbox_dests_count(struct egr_bpf *b, uint32_t sandbox_id, uint64_t *entries,
				uint64_t *dropped)
{
	struct egr_dests_count c;

	*entries = *dropped = 0;
	if (bpf_map_lookup_elem(b->fd_dests_n, &sandbox_id, &c) < 0)
		return errno == ENOENT ? 0 : -errno;
	*entries = c.entries;
	*dropped = c.dropped;
	return 0;
}

/* The keys the last collecting walk found, for the removal that follows
 * it at detach (egr_bpf_forget_sandbox_stats). One sandbox at a time. */
static void dests_seen_drop(struct egr_bpf *b)
{
	free(b->dests_seen.keys);
	memset(&b->dests_seen, 0, sizeof(b->dests_seen));
}

void egr_kern_maps_release(struct egr_bpf *b)
{
	dests_seen_drop(b);
}

/*
 * Delete the keys the last walk of sandbox_id found; 1 when that was all
 * of them: the programs count each entry they add (egr_dests_n.entries,
 * bpf/lib/meter.bpf.h) and never remove one, so with no program adding
 * (the removal's precondition, maps.h) as many deletions as entries leave
 * nothing behind.
 * 0: the walk is needed.
 */
static int dests_delete_seen(struct egr_bpf *b, uint32_t sandbox_id, uint64_t entries)
{
	uint64_t gone = 0;
	int ok;

	if (b->dests_seen.sandbox_id != sandbox_id || !b->dests_seen.n)
		return 0;
	for (size_t i = 0; i < b->dests_seen.n; i++)
		if (bpf_map_delete_elem(b->fd_dests, b->dests_seen.keys +
							     i * sizeof(struct egr_dest_key)) == 0)
			gone++;
	ok = gone == entries;
	dests_seen_drop(b);
	return ok;
}

/*
 * One walk of the map, batched: the key and the value come together. The
 * walk of the whole map (1M buckets, ~3 ms even when empty) is skipped
 * when the sandbox's count says it never added a destination: the
 * programs create the count before they add an entry, and give up (add
 * nothing) when they cannot (meter.bpf.h).
 */
int egr_bpf_sandbox_dests(struct egr_bpf *b, uint32_t sandbox_id, bool remove,
			  struct egr_dest *out, size_t max, size_t *n)
{
	struct dests_walk w = { .sandbox_id = sandbox_id, .out = out, .max = out ? max : 0,
				.keys = { .key_size = sizeof(struct egr_dest_key) } };
	uint64_t entries, dropped;
	int err;

	*n = 0;
	err = egr_bpf_sandbox_dests_count(b, sandbox_id, &entries, &dropped);
	if (err)
		return err;
	if (remove && dests_delete_seen(b, sandbox_id, entries)) {
		bpf_map_delete_elem(b->fd_dests_n, &sandbox_id);
		return 0;
	}
	if (!entries) {
		if (remove)
			bpf_map_delete_elem(b->fd_dests_n, &sandbox_id);
		return 0;
	}
	err = egr_kmap_walk(b->fd_dests, 0, dest_one, &w);
	*n = w.n;
	if (remove) {
		for (size_t i = 0; i < w.keys.n; i++)
			bpf_map_delete_elem(b->fd_dests, w.keys.keys + i * w.keys.key_size);
		free(w.keys.keys);
		if (!err)
			bpf_map_delete_elem(b->fd_dests_n, &sandbox_id);
		return err;
	}
	/* Kept for the removal at detach, which then needs no walk. */
	dests_seen_drop(b);
	if (!err) {
		b->dests_seen.sandbox_id = sandbox_id;
		b->dests_seen.keys = w.keys.keys;
		b->dests_seen.n = w.keys.n;
	} else {
		free(w.keys.keys);
	}
	return err;
}

int egr_bpf_sandbox_dests_dropped(struct egr_bpf *b, uint32_t sandbox_id, uint64_t *dropped)
{
	struct egr_dests_count c;

	*dropped = 0;
	if (bpf_map_lookup_elem(b->fd_dests_n, &sandbox_id, &c) < 0)
		return errno == ENOENT ? 0 : -errno;
	*dropped = c.dropped;
	return 0;
}

int egr_bpf_forget_sandbox_stats(struct egr_bpf *b, uint32_t sandbox_id)
{
	size_t n;

	egr_bpf_sandbox_dests(b, sandbox_id, true, NULL, 0, &n);
	bpf_map_delete_elem(b->fd_deny_budget, &sandbox_id);
	if (bpf_map_delete_elem(b->fd_meter_sb, &sandbox_id) < 0 && errno != ENOENT)
		return -errno;
	if (bpf_map_delete_elem(b->fd_quota_sb, &sandbox_id) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

int egr_bpf_counters(struct egr_bpf *b, uint64_t out[EGR_CNT_MAX])
{
	int ncpu = libbpf_num_possible_cpus();
	uint64_t *vals;

	if (ncpu <= 0)
		return ncpu ? ncpu : -EINVAL;
	vals = calloc((size_t)ncpu, sizeof(*vals));
	if (!vals)
		return -ENOMEM;
	for (uint32_t k = 0; k < EGR_CNT_MAX; k++) {
		out[k] = 0;
		if (bpf_map_lookup_elem(b->fd_counters, &k, vals) < 0)
			continue;
		for (int c = 0; c < ncpu; c++)
			out[k] += vals[c];
	}
	free(vals);
	return 0;
}

/* --- one address's rule (learned.c) --------------------------------------------- */

int egr_bpf_rule_get(struct egr_bpf *b, int family, const uint8_t *addr, uint32_t policy_id,
		     int less, struct egr_rule *out)
{
	if (family == AF_INET) {
		struct egr_lpm4_key k = { .prefixlen = EGR_LPM_POLICY_BITS + 32 - less,
					  .policy_id = policy_id };

		memcpy(k.addr, addr, 4);
		return bpf_map_lookup_elem(b->fd_allow4, &k, out) ? -errno : 0;
	}
	struct egr_lpm6_key k = { .prefixlen = EGR_LPM_POLICY_BITS + 128 - less,
				  .policy_id = policy_id };

	memcpy(k.addr, addr, 16);
	return bpf_map_lookup_elem(b->fd_allow6, &k, out) ? -errno : 0;
}

int egr_bpf_rule_put(struct egr_bpf *b, int family, const uint8_t *addr, uint32_t policy_id,
		     const struct egr_rule *r)
{
	int err;

	if (family == AF_INET) {
		struct egr_lpm4_key k = { .prefixlen = EGR_LPM_POLICY_BITS + 32,
					  .policy_id = policy_id };

		memcpy(k.addr, addr, 4);
		err = bpf_map_update_elem(b->fd_allow4, &k, r, BPF_ANY);
	} else {
		struct egr_lpm6_key k = { .prefixlen = EGR_LPM_POLICY_BITS + 128,
					  .policy_id = policy_id };

		memcpy(k.addr, addr, 16);
		err = bpf_map_update_elem(b->fd_allow6, &k, r, BPF_ANY);
	}
	if (err)
		return errno == E2BIG ? -ENOSPC : -errno;
	return 0;
}

int egr_bpf_rule_del(struct egr_bpf *b, int family, const uint8_t *addr, uint32_t policy_id)
{
	int err;

	if (family == AF_INET) {
		struct egr_lpm4_key k = { .prefixlen = EGR_LPM_POLICY_BITS + 32,
					  .policy_id = policy_id };

		memcpy(k.addr, addr, 4);
		err = bpf_map_delete_elem(b->fd_allow4, &k);
	} else {
		struct egr_lpm6_key k = { .prefixlen = EGR_LPM_POLICY_BITS + 128,
					  .policy_id = policy_id };

		memcpy(k.addr, addr, 16);
		err = bpf_map_delete_elem(b->fd_allow6, &k);
	}
	return err < 0 && errno != ENOENT ? -errno : 0;
}

static uint64_t capacity_of(int fd)
{
	struct bpf_map_info info = { 0 };
	__u32 len = sizeof(info);

	return fd >= 0 && bpf_obj_get_info_by_fd(fd, &info, &len) == 0 ? info.max_entries : 0;
}

uint64_t egr_bpf_rules_capacity(struct egr_bpf *b, int family)
{
	return capacity_of(family == AF_INET ? b->fd_allow4 : b->fd_allow6);
}

/* --- quotas -------------------------------------------------------------------- */

struct tenant_flagged {
	uint32_t tenant_id;
	struct egr_key_list ids;
};

static int add_if_flagged(void *ctx, const void *key, const void *value)
{
	struct tenant_flagged *t = ctx;
	const struct egr_sandbox *sb = value;

	if (sb->tenant_id != t->tenant_id || !(sb->flags & EGR_SB_TENANT_NO_QUOTA))
		return 0;
	return egr_key_list_add(&t->ids, key);
}

/* Take EGR_SB_TENANT_NO_QUOTA off every entry of the tenant: its packets
 * look the tenant's quota up again from the next one on. */
static int clear_tenant_no_quota(struct egr_bpf *b, uint32_t tenant_id)
{
	struct tenant_flagged t = { tenant_id, { .key_size = sizeof(uint32_t) } };
	int err = egr_kmap_walk(b->fd_sandboxes, 0, add_if_flagged, &t);

	for (size_t i = 0; !err && i < t.ids.n; i++) {
		uint32_t id = ((uint32_t *)t.ids.keys)[i];
		struct egr_sandbox sb;

		if (bpf_map_lookup_elem(b->fd_sandboxes, &id, &sb) < 0) {
			err = errno == ENOENT ? 0 : -errno; /* gone: nothing to clear */
			continue;
		}
		sb.flags &= ~(uint32_t)EGR_SB_TENANT_NO_QUOTA;
		if (bpf_map_update_elem(b->fd_sandboxes, &id, &sb, BPF_EXIST) < 0 &&
		    errno != ENOENT)
			err = -errno;
	}
	free(t.ids.keys);
	if (err)
		log_error("tenant %u: clear the no-quota mark of its sandboxes: %s", tenant_id,
			  strerror(-err));
	return err;
}

static int quota_fd(const struct egr_bpf *b, enum egr_quota_scope s)
{
	return s == EGR_QUOTA_TENANT ? b->fd_quota_tenant : b->fd_quota_sb;
}

int egr_bpf_quota_put(struct egr_bpf *b, enum egr_quota_scope s, uint32_t id, uint64_t limit,
		      uint64_t window_ns, bool keep, uint64_t now_ns)
{
	struct egr_quota q = { 0 };
	int fd = quota_fd(b, s), err;
	bool first = s == EGR_QUOTA_TENANT && tenant_quota_state(b, id) != TQ_SET;

	/* A tenant's first quota: no entry of the tenant may skip it
	 * (EGR_SB_TENANT_NO_QUOTA) once it is there. Not written if that
	 * cannot be made so: the registry logs it, as any quota failure. */
	if (first && (err = clear_tenant_no_quota(b, id)))
		return err;
	if (!keep || bpf_map_lookup_elem(fd, &id, &q) < 0) {
		memset(&q, 0, sizeof(q));
		q.window_start_ns = now_ns;
	}
	q.limit_bytes = limit;
	q.window_ns = window_ns;
	if (bpf_map_update_elem(fd, &id, &q, BPF_ANY) < 0)
		return errno == E2BIG ? -ENOSPC : -errno;
	return first ? clear_tenant_no_quota(b, id) : 0;
}

int egr_bpf_quota_del(struct egr_bpf *b, enum egr_quota_scope s, uint32_t id)
{
	return bpf_map_delete_elem(quota_fd(b, s), &id) < 0 && errno != ENOENT ? -errno : 0;
}

int egr_bpf_quota_get(struct egr_bpf *b, enum egr_quota_scope s, uint32_t id,
		      struct egr_quota *out)
{
	return bpf_map_lookup_elem(quota_fd(b, s), &id, out) < 0 ? -errno : 0;
}

/* --- deny budgets ------------------------------------------------------------- */

int egr_bpf_deny_budget(struct egr_bpf *b, uint32_t sandbox_id, struct egr_deny_budget *out)
{
	return bpf_map_lookup_elem(b->fd_deny_budget, &sandbox_id, out) < 0 ? -errno : 0;
}

struct budget_walk {
	int (*fn)(void *ctx, uint32_t sandbox_id, const struct egr_deny_budget *v);
	void *ctx;
};

static int budget_one(void *ctx, const void *key, const void *value)
{
	struct budget_walk *w = ctx;
	struct egr_deny_budget v;
	uint32_t id;

	memcpy(&id, key, sizeof(id));
	memcpy(&v, value, sizeof(v)); /* the walker's buffer has no alignment promise */
	return w->fn(w->ctx, id, &v);
}

int egr_bpf_each_deny_budget(struct egr_bpf *b,
			     int (*fn)(void *ctx, uint32_t sandbox_id,
				       const struct egr_deny_budget *v),
			     void *ctx)
{
	struct budget_walk w = { fn, ctx };

	return egr_kmap_walk(b->fd_deny_budget, 0, budget_one, &w);
}

/* --- map sizes (/metrics) ------------------------------------------------------ */

const char *const egr_kmap_names[EGR_KMAP_REPORTED] = {
	[EGR_KMAP_SANDBOXES] = "egr_sandboxes",	    [EGR_KMAP_METER_SB] = "egr_meter_sb",
	[EGR_KMAP_METER_TENANT] = "egr_meter_tenant", [EGR_KMAP_QUOTA_SB] = "egr_quota_sb",
	[EGR_KMAP_QUOTA_TENANT] = "egr_quota_tenant", [EGR_KMAP_SB_DESTS] = "egr_sb_dests",
};

static int count_one(void *ctx, const void *key, const void *value)
{
	(*(uint64_t *)ctx)++;
	return 0;
}

int egr_bpf_kmap_usage(struct egr_bpf *b, enum egr_kmap_id m, uint64_t *entries,
		      uint64_t *capacity)
{
	int fd;

	*entries = *capacity = 0;
	switch (m) {
	case EGR_KMAP_SANDBOXES: fd = b->fd_sandboxes; break;
	case EGR_KMAP_METER_SB: fd = b->fd_meter_sb; break;
	case EGR_KMAP_METER_TENANT: fd = b->fd_meter_tenant; break;
	case EGR_KMAP_QUOTA_SB: fd = b->fd_quota_sb; break;
	case EGR_KMAP_QUOTA_TENANT: fd = b->fd_quota_tenant; break;
	case EGR_KMAP_SB_DESTS: fd = b->fd_dests; break;
	default: return -EINVAL;
	}
	*capacity = capacity_of(fd);
	return egr_kmap_walk(fd, 0, count_one, entries);
}

/* --- the escape guard's homes -------------------------------------------------- */

int egr_bpf_proc_home(const struct egr_bpf *b, uint32_t pid, struct egr_proc_home *out)
{
	return bpf_map_lookup_elem(b->fd_proc_home, &pid, out) < 0 ? -errno : 0;
}

int egr_bpf_proc_held(const struct egr_bpf *b, uint32_t pid)
{
	struct egr_proc_home h;
	uint32_t id;
	int err = egr_bpf_proc_home(b, pid, &h);

	if (err == -ENOENT)
		return 0;
	if (err)
		return err;
	if (h.flags & EGR_HOME_ESCAPED)
		return EGR_PROC_ESCAPED;
	/* A home whose sandbox was detached since is no sandbox any more. */
	if (!h.sandbox_id)
		return 0;
	if (bpf_map_lookup_elem(b->fd_sb_cgroups, &h.cgroup_id, &id) < 0)
		return errno == ENOENT ? 0 : -errno;
	return id == h.sandbox_id ? EGR_PROC_AT_HOME : 0;
}

struct escaped_walk {
	int (*fn)(void *ctx, uint32_t pid);
	void *ctx;
};

static int escaped_one(void *ctx, const void *key, const void *value)
{
	struct escaped_walk *w = ctx;
	struct egr_proc_home home;
	uint32_t pid;

	memcpy(&pid, key, sizeof(pid));
	memcpy(&home, value, sizeof(home));
	return home.flags & EGR_HOME_ESCAPED ? w->fn(w->ctx, pid) : 0;
}

int egr_bpf_each_escaped(const struct egr_bpf *b, int (*fn)(void *ctx, uint32_t pid), void *ctx)
{
	struct escaped_walk w = { fn, ctx };

	return egr_kmap_walk(b->fd_proc_home, 0, escaped_one, &w);
}
