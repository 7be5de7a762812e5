// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The upgrade's second half (migrate.h, the order in migrate.c): reuse the
 * shared maps, carry the old maps' entries into the new ones, add the links
 * of programs new since the old version, switch every link to its new
 * program and retire the old version.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "egr_abi_v1.h"
#include "egressd.h"
#include "kernel_priv.h"
#include "log.h"
#include "migrate.h"
#include "migrate_priv.h"

/* The pinned maps of this version that version 1 did not have, and why
 * starting them empty is right. A pinned map in neither table refuses the
 * upgrade (check_new_maps): a map added later must be thought about here. */
static const struct {
	const char *name, *why;
} new_maps[] = {
	{ "egr_sb_dests", "filled from egr_dests (carry_dests)" },
	{ "egr_dests_n", "filled from egr_dests (carry_dests)" },
	{ "egr_dns_senders", "filled lazily: the new egr_skb_egress records a socket at its "
			     "next packet to the proxy, old sockets included" },
	{ "egr_dns_clients_n", "counts egr_dns_senders" },
	{ "egr_dns_sender_sk", "socket storage written with egr_dns_senders" },
	{ "egr_dns_budget", "no bound for each sandbox carried (seed_dns_budgets), then written "
			    "by the DNS proxy when it adopts it" },
	{ "egr_deny_budget", "budgets start full, no suppressed or lost events yet" },
	{ "egr_inspect_orig", "version 1 inspected nothing" },
	{ "egr_sandbox_cgroups", "rebuilt when the sandboxes are adopted" },
	{ "egr_proc_home", "rebuilt when the sandboxes are adopted" },
	{ "egr_sock_counts", "counts only what it sees from now on: a detach skips its socket "
			     "walk only for a sandbox this egressd made fresh, never an adopted one" },
	{ "egr_listen_ports", "version 1 reserved no listener port: the adoption claims every "
			      "listener it opens (kernel/listen.h)" },
	{ "egr_listen_sk", "socket storage written when a listener is claimed" },
};

/* The programs version 1 attached to every sandbox: a sandbox that lacks one
 * of these is an attach a crash interrupted (adoption rolls it back), one
 * that lacks any other program lacks a hook that is new since. */
static const char *const v1_programs[] = {
	"egr_connect4",     "egr_connect6",     "egr_sendmsg4",     "egr_sendmsg6",
	"egr_recvmsg4",     "egr_recvmsg6",     "egr_getpeername4", "egr_getpeername6",
	"egr_sock_create",  "egr_setsockopt",   "egr_lsm_socket_create",
	"egr_skb_egress",   "egr_skb_ingress",
};

int egr_mig_reuse_maps(struct egr_mig *m, struct bpf_object *obj)
{
	for (size_t i = 0; i < NMAPS; i++) {
		struct bpf_map *map;
		int err;

		if (egr_mig_v1_maps[i].kind != CARRY_SHARE || m->fd[i] < 0)
			continue;
		map = bpf_object__find_map_by_name(obj, egr_mig_v1_maps[i].name);
		if (!map) {
			log_error("upgrade: this egressd has no map %s to share", egr_mig_v1_maps[i].name);
			return -EPROTO;
		}
		/* A pin of this version left by an interrupted upgrade must not
		 * win over the map the attachments really use. */
		if (bpf_map__pin_path(map) && unlink(bpf_map__pin_path(map)) < 0 && errno != ENOENT)
			return -errno;
		err = bpf_map__reuse_fd(map, m->fd[i]);
		if (err) {
			log_error("upgrade: reuse %s: %s", egr_mig_v1_maps[i].name, strerror(-err));
			return err;
		}
	}
	return 0;
}

/* Copy every entry of one map, converting keys and values. */
int egr_mig_carry_map(const struct map_spec *s, int old_fd, int new_fd)
{
	bool percpu = s->type == BPF_MAP_TYPE_PERCPU_HASH || s->type == BPF_MAP_TYPE_PERCPU_ARRAY;
	int ncpu = percpu ? libbpf_num_possible_cpus() : 1;
	size_t ostride = percpu ? (s->value_size + 7) / 8 * 8 : s->value_size;
	size_t nstride = percpu ? (s->new_value_size + 7) / 8 * 8 : s->new_value_size;
	void *okey = NULL, *prev = NULL, *nkey = NULL, *oval = NULL, *nval = NULL;
	bool first = true;
	int err = 0, n = 0;

	if (ncpu <= 0)
		return ncpu ? ncpu : -EINVAL;
	okey = calloc(1, s->key_size);
	prev = calloc(1, s->key_size);
	nkey = calloc(1, s->new_key_size);
	oval = calloc((size_t)ncpu, ostride);
	nval = calloc((size_t)ncpu, nstride);
	if (!okey || !prev || !nkey || !oval || !nval) {
		err = -ENOMEM;
		goto out;
	}
	while (bpf_map_get_next_key(old_fd, first ? NULL : prev, okey) == 0) {
		first = false;
		memcpy(prev, okey, s->key_size);
		if (bpf_map_lookup_elem(old_fd, okey, oval) < 0)
			continue; /* gone meanwhile (an LRU eviction) */
		if (!s->key(okey, nkey))
			continue;
		memset(nval, 0, (size_t)ncpu * nstride);
		for (int c = 0; c < ncpu; c++)
			s->val((char *)oval + (size_t)c * ostride, (char *)nval + (size_t)c * nstride);
		if (bpf_map_update_elem(new_fd, nkey, nval, BPF_ANY) < 0) {
			err = errno == E2BIG ? -ENOSPC : -errno;
			log_error("upgrade: copy an entry of %s: %s%s", s->name, strerror(-err),
				  err == -ENOSPC ? " (the new map is smaller than the old one)" : "");
			goto out;
		}
		n++;
	}
	log_info("upgrade: %s: %d entries carried over", s->name, n);
out:
	free(okey);
	free(prev);
	free(nkey);
	free(oval);
	free(nval);
	return err;
}

/* Per-sandbox figures of the destinations carried (egr_dests_n). */
struct dest_count {
	__u32 sandbox_id;
	struct egr_dests_count c;
};

static struct egr_dests_count *dest_count_of(struct dest_count **v, size_t *n, size_t *cap,
					     __u32 id)
{
	for (size_t i = 0; i < *n; i++)
		if ((*v)[i].sandbox_id == id)
			return &(*v)[i].c;
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 64;
		struct dest_count *nv = realloc(*v, nc * sizeof(*nv));

		if (!nv)
			return NULL;
		*v = nv;
		*cap = nc;
	}
	(*v)[*n] = (struct dest_count){ .sandbox_id = id };
	return &(*v)[(*n)++].c;
}

/*
 * Version 1 kept every sandbox's destinations in one LRU (egr_dests); this
 * version keeps at most EGR_DESTS_PER_SB per sandbox in egr_sb_dests and
 * counts them (and what found no room) in egr_dests_n. Entries past a
 * sandbox's cap, or past the new map's room, are counted dropped. An LRU
 * that was full may have forgotten anyone's destinations: then every
 * sandbox carried gets one dropped, so no audit record claims to be
 * complete.
 */
int egr_mig_carry_dests(const struct map_spec *s, int old_fd, int dests_fd, int n_fd)
{
	struct egr_v1_dest_key okey, prev;
	struct egr_v1_dest_val oval;
	struct egr_dest_key nkey;
	struct egr_dest_val nval;
	struct bpf_map_info info = { 0 };
	__u32 len = sizeof(info);
	struct dest_count *cnt = NULL;
	size_t ncnt = 0, capcnt = 0, total = 0;
	bool first = true, full;
	int err = 0, ncpu;

	while (bpf_map_get_next_key(old_fd, first ? NULL : &prev, &okey) == 0) {
		struct egr_dests_count *c;

		first = false;
		prev = okey;
		if (bpf_map_lookup_elem(old_fd, &okey, &oval) < 0)
			continue; /* gone meanwhile (an LRU eviction) */
		total++;
		if (!s->key(&okey, &nkey) || !s->val(&oval, &nval))
			continue;
		c = dest_count_of(&cnt, &ncnt, &capcnt, nkey.sandbox_id);
		if (!c) {
			err = -ENOMEM;
			goto out;
		}
		if (c->entries >= EGR_DESTS_PER_SB) {
			c->dropped++;
			continue;
		}
		if (bpf_map_update_elem(dests_fd, &nkey, &nval, BPF_NOEXIST) < 0) {
			if (errno != E2BIG && errno != ENOMEM) {
				err = -errno;
				log_error("upgrade: copy an entry of egr_dests: %s", strerror(-err));
				goto out;
			}
			c->dropped++;
			continue;
		}
		c->entries++;
	}
	/* An LRU evicts a little before it is full (each CPU keeps up to 128
	 * free nodes of its own): near full counts as full. */
	ncpu = libbpf_num_possible_cpus();
	full = bpf_obj_get_info_by_fd(old_fd, &info, &len) == 0 && info.max_entries &&
	       total + 128 * (size_t)(ncpu > 0 ? ncpu : 1) >= info.max_entries;
	for (size_t i = 0; i < ncnt; i++) {
		if (full && !cnt[i].c.dropped)
			cnt[i].c.dropped = 1;
		if (bpf_map_update_elem(n_fd, &cnt[i].sandbox_id, &cnt[i].c, BPF_ANY) <
		    0) {
			err = -errno;
			log_error("upgrade: count the destinations of sandbox %u: %s",
				  cnt[i].sandbox_id, strerror(-err));
			goto out;
		}
	}
	log_info("upgrade: egr_dests: %zu entries of %zu sandboxes carried into egr_sb_dests%s",
		 total, ncnt, full ? " (version 1's map was full: records say incomplete)" : "");
out:
	free(cnt);
	return err;
}

static int count_event(void *ctx, void *data, size_t size)
{
	(*(uint64_t *)ctx)++;
	return 0;
}

/* What the old ring still holds nobody will read: count it as lost. */
static void drain_ring(int old_fd, struct bpf_object *obj)
{
	struct bpf_map *cnt = bpf_object__find_map_by_name(obj, "egr_counters");
	int ncpu = libbpf_num_possible_cpus();
	struct ring_buffer *rb;
	uint64_t lost = 0, *vals;
	__u32 k = EGR_CNT_EVENTS_LOST;

	rb = ring_buffer__new(old_fd, count_event, &lost, NULL);
	if (!rb) {
		log_warn("upgrade: cannot read the old ring buffer: %s; its unread events are "
			 "lost uncounted",
			 strerror(errno));
		return;
	}
	ring_buffer__consume(rb);
	ring_buffer__free(rb);
	if (!lost)
		return;
	log_warn("upgrade: %" PRIu64 " events the previous egressd left unread are dropped "
		 "(counted in events_lost)",
		 lost);
	vals = ncpu > 0 ? calloc((size_t)ncpu, sizeof(*vals)) : NULL;
	if (!cnt || !vals || bpf_map_lookup_elem(bpf_map__fd(cnt), &k, vals) < 0) {
		free(vals);
		return;
	}
	vals[0] += lost;
	if (bpf_map_update_elem(bpf_map__fd(cnt), &k, vals, BPF_ANY) < 0)
		log_warn("upgrade: count the dropped events: %s", strerror(errno));
	free(vals);
}

static bool in_v1(const char *prog)
{
	for (size_t i = 0; i < sizeof(v1_programs) / sizeof(v1_programs[0]); i++)
		if (strcmp(v1_programs[i], prog) == 0)
			return true;
	return false;
}

static int add_planned(struct egr_mig *m, const struct mig_link *l, const char *prog)
{
	if (m->nadds == m->capadds) {
		size_t cap = m->capadds ? m->capadds * 2 : 64;
		struct mig_add *na = realloc(m->adds, cap * sizeof(*na));

		if (!na)
			return -ENOMEM;
		m->adds = na;
		m->capadds = cap;
	}
	m->adds[m->nadds++] = (struct mig_add){ .sandbox_id = l->sandbox_id,
						.cgroup_id = l->cgroup_id, .prog = prog };
	return 0;
}

/* Does sandbox links[i, end) have a link of prog? */
static bool has_link(const struct egr_mig *m, size_t i, size_t end, const char *prog)
{
	for (size_t k = i; k < end; k++)
		if (strcmp(m->links[k].prog, prog) == 0)
			return true;
	return false;
}

/* Every link has a program to move to. A sandbox with every version 1
 * program gets a link of each program new since (m->adds, attached by
 * add_links); one that lacks a version 1 program is an attach a crash
 * interrupted: adoption rolls it back, nothing is added to it. */
static int plan_switch(struct egr_mig *m, struct bpf_object *obj)
{
	struct bpf_program *prog;

	for (size_t i = 0; i < m->nlinks; i++) {
		struct mig_link *l = &m->links[i];

		prog = bpf_object__find_program_by_name(obj, l->prog);
		if (!prog || !bpf_program__autoload(prog)) {
			log_error("upgrade: link %s runs program %s, which ABI version %d %s", l->path,
				  l->prog, EGR_ABI_VERSION, prog ? "cannot load on this host" :
				  "does not have");
			return -EPROTO;
		}
		/* The kernel checks only the program type: a pin renamed by hand
		 * (egr_connect6's link under the name egr_connect4) would put a
		 * program on a hook it was not verified for. */
		if (bpf_program__expected_attach_type(prog) != l->attach_type) {
			log_error("upgrade: link %s is attached at hook %u, but %s attaches at %u: "
				  "the pin does not name its program",
				  l->path, l->attach_type, l->prog,
				  bpf_program__expected_attach_type(prog));
			return -EPROTO;
		}
		l->new_prog_fd = bpf_program__fd(prog);
		/* Never rely on the kernel refusing a program of another cgroup
		 * storage on a link: some kernels accept it (kernel_priv.h). */
		if (egr_kern_same_storage(l->old_prog_fd, l->new_prog_fd)) {
			log_error("upgrade: the new %s does not use the cgroup storage link %s "
				  "runs with: refusing before any link moves", l->prog, l->path);
			return -EPROTO;
		}
	}
	for (size_t i = 0; i < m->nlinks;) {
		size_t end = i;
		bool whole = true;
		int err;

		while (end < m->nlinks && m->links[end].sandbox_id == m->links[i].sandbox_id)
			end++;
		bpf_object__for_each_program(prog, obj)
		{
			const char *name = bpf_program__name(prog);

			if (bpf_program__autoload(prog) && egr_kern_is_cgroup_prog(prog) && in_v1(name) &&
			    !has_link(m, i, end, name))
				whole = false;
		}
		bpf_object__for_each_program(prog, obj)
		{
			const char *name = bpf_program__name(prog);

			if (!whole || !bpf_program__autoload(prog) || !egr_kern_is_cgroup_prog(prog) ||
			    in_v1(name) || has_link(m, i, end, name))
				continue;
			if ((err = add_planned(m, &m->links[i], name)))
				return err;
		}
		if (!whole)
			log_warn("upgrade: sandbox %u lacks a program of version 1 (an interrupted "
				 "attach): no new program is added to it; adoption rolls it back",
				 m->links[i].sandbox_id);
		i = end;
	}
	return 0;
}

/* Remove the links add_links made (a rollback). */
static void remove_added(struct egr_mig *m, const struct egr_mig_attach *ops)
{
	for (size_t i = 0; i < m->nadds; i++)
		if (m->adds[i].added) {
			ops->detach(ops->ctx, m->adds[i].sandbox_id, m->adds[i].prog);
			m->adds[i].added = false;
		}
}

/* Attach and pin (links/<id>/<prog>) the programs new since version 1.
 * Before the switch: they run on the new maps only, which nothing of the
 * old version reads. A failure removes the ones added. */
static int add_links(struct egr_mig *m, const struct egr_mig_attach *ops)
{
	size_t n = 0;

	for (size_t i = 0; i < m->nadds; i++) {
		struct mig_add *a = &m->adds[i];
		int err = ops->attach(ops->ctx, a->sandbox_id, a->cgroup_id, a->prog);

		if (err == -ENOENT) {
			/* Its cgroup went away since prepare. */
			log_info("upgrade: sandbox %u: cgroup removed meanwhile; %s not added",
				 a->sandbox_id, a->prog);
			continue;
		}
		if (err) {
			log_error("upgrade: sandbox %u: attach %s, new in ABI version %d: %s; "
				  "removing the %zu links already added",
				  a->sandbox_id, a->prog, EGR_ABI_VERSION, strerror(-err), n);
			remove_added(m, ops);
			return err;
		}
		a->added = true;
		n++;
	}
	if (m->nadds)
		log_info("upgrade: %zu links of programs new in ABI version %d added", n,
			 EGR_ABI_VERSION);
	return 0;
}

/* Every pinned map of this version is carried from version 1 or known to
 * start empty (new_maps). */
static int check_new_maps(struct bpf_object *obj)
{
	struct bpf_map *map;

	bpf_object__for_each_map(map, obj)
	{
		const char *name = bpf_map__name(map);
		bool known = false;

		if (!bpf_map__pin_path(map))
			continue;
		for (size_t i = 0; i < NMAPS && !known; i++)
			known = strcmp(egr_mig_v1_maps[i].name, name) == 0 && egr_mig_v1_maps[i].kind != CARRY_DESTS;
		for (size_t i = 0; i < sizeof(new_maps) / sizeof(new_maps[0]) && !known; i++)
			known = strcmp(new_maps[i].name, name) == 0;
		if (!known) {
			log_error("upgrade: map %s of ABI version %d has no conversion from version "
				  "1 and is not known to start empty (user/egressd/kernel/migrate.c)",
				  name, EGR_ABI_VERSION);
			return -EPROTO;
		}
	}
	return 0;
}

static void rollback_links(struct egr_mig *m)
{
	for (size_t i = 0; i < m->nlinks; i++) {
		struct mig_link *l = &m->links[i];
		LIBBPF_OPTS(bpf_link_update_opts, opts, .flags = BPF_F_REPLACE,
			    .old_prog_fd = l->new_prog_fd);

		if (!l->switched)
			continue;
		if (bpf_link_update(l->link_fd, l->old_prog_fd, &opts) < 0)
			log_error("upgrade: put %s back on its old program: %s; it stays on the "
				  "new one (enforcing the carried-over state)",
				  l->path, strerror(errno));
		else
			l->switched = false;
	}
}

static int switch_links(struct egr_mig *m)
{
	size_t moved = 0;

	for (size_t i = 0; i < m->nlinks; i++) {
		struct mig_link *l = &m->links[i];
		LIBBPF_OPTS(bpf_link_update_opts, opts, .flags = BPF_F_REPLACE,
			    .old_prog_fd = l->old_prog_fd);

		if (bpf_link_update(l->link_fd, l->new_prog_fd, &opts) < 0) {
			int err = -errno;

			if (err == -ENOLINK) {
				/* Its cgroup went away since prepare. */
				log_info("upgrade: %s: cgroup removed meanwhile", l->path);
				continue;
			}
			log_error("upgrade: move %s to the new %s: %s; moving the %zu links "
				  "already moved back",
				  l->path, l->prog, strerror(-err), moved);
			rollback_links(m);
			return err;
		}
		l->switched = true;
		moved++;
	}
	log_info("upgrade: %zu sandbox links moved to the ABI version %d programs", moved,
		 EGR_ABI_VERSION);
	return 0;
}

/* The commit point: once <dir>/maps is renamed, the old version is gone. */
static int retire_old(struct egr_mig *m)
{
	char retired[PATH_MAX];

	snprintf(retired, sizeof(retired), "%s/v1-retired", m->dir);
	if (rename(m->old_maps, retired) < 0) {
		int err = -errno;

		log_error("upgrade: rename %s to %s: %s; the next start redoes the upgrade",
			  m->old_maps, retired, strerror(-err));
		return err;
	}
	/* Past the commit point nothing reads v1-retired: what cannot be
	 * removed now is removed at the next start. */
	if (egr_mig_remove_pins(retired))
		log_warn("upgrade: %s is left; the next start removes it", retired);
	return 0;
}

/*
 * Version 1 bounded no sandbox's DNS in the kernel. The new programs refuse
 * a sandbox with no egr_dns_budget entry, and the DNS proxy writes each one
 * only when it adopts that sandbox, after the switch: every query sent in
 * between was refused (EPERM). A carried sandbox keeps no bound (rate 0)
 * until then, as under version 1.
 */
static int seed_dns_budgets(const struct egr_mig *m, struct bpf_object *obj)
{
	struct bpf_map *map = bpf_object__find_map_by_name(obj, "egr_dns_budget");
	struct egr_dns_budget none = { 0 };

	if (!map || bpf_map__key_size(map) != sizeof(__u32) ||
	    bpf_map__value_size(map) != sizeof(none)) {
		log_error("upgrade: this egressd's egr_dns_budget does not have the layout the "
			  "upgrade seeds");
		return -EPROTO;
	}
	for (size_t i = 0; i < m->nlinks; i++) {
		__u32 id = m->links[i].sandbox_id;

		if (bpf_map_update_elem(bpf_map__fd(map), &id, &none, BPF_NOEXIST) < 0 &&
		    errno != EEXIST) {
			int err = -errno;

			log_error("upgrade: sandbox %u: seed its DNS budget: %s", id,
				  strerror(-err));
			return err;
		}
	}
	return 0;
}

int egr_mig_commit(struct egr_mig *m, struct bpf_object *obj, const struct egr_mig_attach *ops)
{
	int err;

	err = check_new_maps(obj);
	if (!err)
		err = plan_switch(m, obj);
	for (size_t i = 0; !err && i < NMAPS; i++) {
		const struct map_spec *s = &egr_mig_v1_maps[i];
		struct bpf_map *map;

		if (s->kind == CARRY_DESTS && m->fd[i] >= 0) {
			struct bpf_map *dm = bpf_object__find_map_by_name(obj, "egr_sb_dests");
			struct bpf_map *nm = bpf_object__find_map_by_name(obj, "egr_dests_n");

			if (!dm || !nm || bpf_map__key_size(dm) != s->new_key_size ||
			    bpf_map__value_size(dm) != s->new_value_size ||
			    bpf_map__key_size(nm) != sizeof(__u32) ||
			    bpf_map__value_size(nm) != sizeof(struct egr_dests_count)) {
				log_error("upgrade: this egressd's egr_sb_dests / egr_dests_n do "
					  "not have the layout the conversion of egr_dests writes");
				err = -EPROTO;
				break;
			}
			err = egr_mig_carry_dests(s, m->fd[i], bpf_map__fd(dm), bpf_map__fd(nm));
			continue;
		}
		if (s->kind != CARRY_COPY || m->fd[i] < 0)
			continue;
		map = bpf_object__find_map_by_name(obj, s->name);
		if (!map || bpf_map__key_size(map) != s->new_key_size ||
		    bpf_map__value_size(map) != s->new_value_size) {
			log_error("upgrade: this egressd's map %s does not have the layout the "
				  "conversion writes",
				  s->name);
			err = -EPROTO;
			break;
		}
		err = egr_mig_carry_map(s, m->fd[i], bpf_map__fd(map));
	}
	if (!err)
		err = seed_dns_budgets(m, obj);
	if (err) {
		/* Nothing switched: drop what was staged, the old version rules on. */
		bpf_object__unpin_maps(obj, NULL);
		log_error("upgrade from ABI version %d refused; the version %d programs keep "
			  "enforcing every sandbox",
			  m->from, m->from);
		return err;
	}
	err = add_links(m, ops);
	if (err) {
		bpf_object__unpin_maps(obj, NULL);
		log_error("upgrade from ABI version %d refused; the version %d programs keep "
			  "enforcing every sandbox",
			  m->from, m->from);
		return err;
	}
	if (ops->before_switch)
		ops->before_switch(ops->ctx, obj);
	err = switch_links(m);
	if (err) {
		remove_added(m, ops);
		bpf_object__unpin_maps(obj, NULL);
		log_error("upgrade from ABI version %d refused; the version %d programs keep "
			  "enforcing every sandbox",
			  m->from, m->from);
		return err;
	}
	if (m->fd[egr_mig_spec_index("egr_events")] >= 0)
		drain_ring(m->fd[egr_mig_spec_index("egr_events")], obj);
	err = retire_old(m);
	if (err)
		return err;
	/*
	 * HOOK for MAC'd state files: version 1 wrote <state-dir>/sandboxes/
	 * <id>.json without a MAC. After an upgrade from version 1
	 * (egr_bpf.migrated_from == 1), adoption may accept such a file when
	 * the kernel agrees with it: its sandbox id has links, and
	 * egr_sandboxes[id].policy_id equals the file's policy_id (the same
	 * test adopt_one() makes already); then it rewrites the file with a
	 * MAC. Any other MAC-less file is treated as tampered.
	 */
	log_info("upgrade from ABI version %d to %d done; %s unpinned", m->from, EGR_ABI_VERSION,
		 m->old_maps);
	return 0;
}
