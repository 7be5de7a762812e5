// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Upgrade in place from an older ABI version (migrate.h).
 *
 * Version 1 pinned its maps at <dir>/maps; version N >= 2 pins them at
 * <dir>/v<N>/maps. Links are not versioned: a link is an attachment of a
 * cgroup, and bpf_link_update changes its program in place, so
 * <dir>/links/<sandbox-id>/<program> keeps its path across versions.
 *
 * The order, so that no instant is unenforced:
 *  1. prepare: every pinned map of the old version has a row in the table
 *     below with the layout it must have; every link is a cgroup link.
 *     Anything else refuses, before anything is loaded. After the load, every
 *     link must have a new program of its name attached at its hook.
 *  2. reuse: egr_cg_storage is shared, never copied. Its storage belongs to
 *     the attachment: bpf_link_update (cgroup_bpf_replace) swaps the program
 *     and keeps the storage, so the new programs must be built against the
 *     very same map. The same for egr_dns_orig (socket storage of DNS
 *     queries in flight).
 *  3. carry: the new maps are filled from the old ones (sandboxes, rules and
 *     DNS-learned entries with their expiry, quotas, meters, destinations,
 *     counters), converted entry by entry. The old programs keep running on
 *     the old maps meanwhile; the old version is only read.
 *  4. switch: each link moves to its new program (BPF_F_REPLACE, so a link
 *     that changed under us fails instead of being overwritten). A failure
 *     puts the links already moved back on their old programs.
 *  5. drain: events the old ring buffer still holds are counted as lost
 *     (egr_counters events_lost), nobody reads that ring any more.
 *  6. retire: <dir>/maps is renamed to <dir>/v1-retired (bpffs refuses
 *     names with a dot). That is the commit point: a crash before it redoes
 *     the migration, which only overwrites; after it, the next start only
 *     finishes removing v1-retired.
 * Counts the old programs make between 3 and 4 (the time the switch takes)
 * are not carried; nor is the allow-event sampling bucket (egr_allow_bucket,
 * never pinned), which starts full.
 *
 * Adding a field to a struct or a map later: freeze the current layout in
 * include/egr_abi_v<N>.h, add its table (or extend this one) with a
 * conversion function per map, and bump EGR_ABI_VERSION.
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
#include "log.h"
#include "migrate.h"
#include "migrate_priv.h"

/* --- version 1 -> current: one conversion per map --------------------------- */

/* Convert one key / one (per-CPU slot of a) value. false: drop the entry. */

static bool conv_u32(const void *old, void *new)
{
	memcpy(new, old, sizeof(__u32));
	return true;
}

static bool conv_sandbox(const void *old, void *new)
{
	const struct egr_v1_sandbox *o = old;
	struct egr_sandbox *n = new;

	memset(n, 0, sizeof(*n));
	n->families = o->families;
	n->quota_bytes = o->quota_bytes;
	n->quota_window_ns = o->quota_window_ns;
	n->policy_id = o->policy_id;
	n->tenant_id = o->tenant_id;
	n->flags = o->flags;
	n->dns_port4 = o->dns_port4;
	n->dns_port6 = o->dns_port6;
	return true;
}

static bool conv_lpm4(const void *old, void *new)
{
	const struct egr_v1_lpm4_key *o = old;
	struct egr_lpm4_key *n = new;

	memset(n, 0, sizeof(*n));
	n->prefixlen = o->prefixlen;
	n->policy_id = o->policy_id;
	memcpy(n->addr, o->addr, sizeof(n->addr));
	return true;
}

static bool conv_lpm6(const void *old, void *new)
{
	const struct egr_v1_lpm6_key *o = old;
	struct egr_lpm6_key *n = new;

	memset(n, 0, sizeof(*n));
	n->prefixlen = o->prefixlen;
	n->policy_id = o->policy_id;
	memcpy(n->addr, o->addr, sizeof(n->addr));
	return true;
}

/* Static rules and DNS-learned entries alike: the expiry is a
 * bpf_ktime_get_boot_ns() deadline, the same clock for every version. */
bool egr_mig_conv_rule(const void *old, void *new)
{
	const struct egr_v1_rule *o = old;
	struct egr_rule *n = new;

	_Static_assert(EGR_MAX_PORT_RANGES >= EGR_V1_MAX_PORT_RANGES, "ranges would not fit");
	memset(n, 0, sizeof(*n));
	n->expires_ns = o->expires_ns;
	n->nranges = o->nranges > EGR_V1_MAX_PORT_RANGES ? EGR_V1_MAX_PORT_RANGES : o->nranges;
	for (__u32 i = 0; i < n->nranges; i++) {
		n->ranges[i].lo = o->ranges[i].lo;
		n->ranges[i].hi = o->ranges[i].hi;
		n->ranges[i].protos = o->ranges[i].protos;
	}
	return true;
}

static bool conv_meter(const void *old, void *new)
{
	const struct egr_v1_meter *o = old;
	struct egr_meter *n = new;

	memset(n, 0, sizeof(*n));
	n->bytes_out = o->bytes_out;
	n->pkts_out = o->pkts_out;
	n->bytes_in = o->bytes_in;
	n->pkts_in = o->pkts_in;
	n->conn_allowed = o->conn_allowed;
	n->conn_denied = o->conn_denied;
	n->dgram_allowed = o->dgram_allowed;
	n->dgram_denied = o->dgram_denied;
	n->sock_denied = o->sock_denied;
	n->backstop_drops = o->backstop_drops;
	n->inbound_drops = o->inbound_drops;
	n->quota_drops = o->quota_drops;
	return true;
}

static bool conv_quota(const void *old, void *new)
{
	const struct egr_v1_quota *o = old;
	struct egr_quota *n = new;

	memset(n, 0, sizeof(*n));
	n->limit_bytes = o->limit_bytes;
	n->window_ns = o->window_ns;
	n->window_start_ns = o->window_start_ns;
	n->bytes = o->bytes;
	n->exceeded = o->exceeded;
	return true;
}

static bool conv_dest_key(const void *old, void *new)
{
	const struct egr_v1_dest_key *o = old;
	struct egr_dest_key *n = new;

	memset(n, 0, sizeof(*n));
	n->sandbox_id = o->sandbox_id;
	n->port = o->port;
	n->family = o->family;
	n->protocol = o->protocol;
	memcpy(n->addr, o->addr, sizeof(n->addr));
	return true;
}

static bool conv_dest_val(const void *old, void *new)
{
	const struct egr_v1_dest_val *o = old;
	struct egr_dest_val *n = new;

	memset(n, 0, sizeof(*n));
	n->bytes_out = o->bytes_out;
	n->pkts_out = o->pkts_out;
	n->first_ns = o->first_ns;
	n->last_ns = o->last_ns;
	return true;
}

/* Counter index of version 1 -> current index; a retired counter would map
 * to EGR_CNT_MAX and be dropped. */
const __u32 egr_mig_v1_counter_map[EGR_V1_CNT_MAX] = {
	[EGR_V1_CNT_CONNECT_ALLOW] = EGR_CNT_CONNECT_ALLOW,
	[EGR_V1_CNT_CONNECT_DENY] = EGR_CNT_CONNECT_DENY,
	[EGR_V1_CNT_SENDMSG_ALLOW] = EGR_CNT_SENDMSG_ALLOW,
	[EGR_V1_CNT_SENDMSG_DENY] = EGR_CNT_SENDMSG_DENY,
	[EGR_V1_CNT_SOCK_CREATE_ALLOW] = EGR_CNT_SOCK_CREATE_ALLOW,
	[EGR_V1_CNT_SOCK_CREATE_DENY] = EGR_CNT_SOCK_CREATE_DENY,
	[EGR_V1_CNT_NO_SANDBOX] = EGR_CNT_NO_SANDBOX,
	[EGR_V1_CNT_EXPIRED] = EGR_CNT_EXPIRED,
	[EGR_V1_CNT_SETSOCKOPT_DENY] = EGR_CNT_SETSOCKOPT_DENY,
	[EGR_V1_CNT_BACKSTOP_DROP] = EGR_CNT_BACKSTOP_DROP,
	[EGR_V1_CNT_INBOUND_DROP] = EGR_CNT_INBOUND_DROP,
	[EGR_V1_CNT_QUOTA_DROP] = EGR_CNT_QUOTA_DROP,
	[EGR_V1_CNT_EVENTS_LOST] = EGR_CNT_EVENTS_LOST,
	[EGR_V1_CNT_METER_FULL] = EGR_CNT_METER_FULL,
};

bool egr_mig_conv_counter_idx(const void *old, void *new)
{
	__u32 i;

	memcpy(&i, old, sizeof(i));
	if (i >= EGR_V1_CNT_MAX || egr_mig_v1_counter_map[i] >= EGR_CNT_MAX)
		return false;
	memcpy(new, &egr_mig_v1_counter_map[i], sizeof(__u32));
	return true;
}

static bool conv_u64(const void *old, void *new)
{
	memcpy(new, old, sizeof(__u64));
	return true;
}



#define COPY(n, t, ok, ov, fk, fv, nk, nv)                                               \
	{ .name = n, .type = t, .key_size = sizeof(ok), .value_size = sizeof(ov),        \
	  .kind = CARRY_COPY, .key = fk, .val = fv, .new_key_size = sizeof(nk),          \
	  .new_value_size = sizeof(nv) }

const struct map_spec egr_mig_v1_maps[] = {
	{ .name = "egr_cg_storage", .type = BPF_MAP_TYPE_CGROUP_STORAGE, .key_size = 8,
	  .value_size = sizeof(struct egr_v1_cg_ref), .kind = CARRY_SHARE },
	{ .name = "egr_dns_orig", .type = BPF_MAP_TYPE_SK_STORAGE, .key_size = 4,
	  .value_size = sizeof(struct egr_v1_dns_orig), .kind = CARRY_SHARE },
	COPY("egr_sandboxes", BPF_MAP_TYPE_HASH, __u32, struct egr_v1_sandbox, conv_u32,
	     conv_sandbox, __u32, struct egr_sandbox),
	COPY("egr_allow4", BPF_MAP_TYPE_LPM_TRIE, struct egr_v1_lpm4_key, struct egr_v1_rule,
	     conv_lpm4, egr_mig_conv_rule, struct egr_lpm4_key, struct egr_rule),
	COPY("egr_allow6", BPF_MAP_TYPE_LPM_TRIE, struct egr_v1_lpm6_key, struct egr_v1_rule,
	     conv_lpm6, egr_mig_conv_rule, struct egr_lpm6_key, struct egr_rule),
	COPY("egr_counters", BPF_MAP_TYPE_PERCPU_ARRAY, __u32, __u64, egr_mig_conv_counter_idx,
	     conv_u64, __u32, __u64),
	COPY("egr_meter_sb", BPF_MAP_TYPE_PERCPU_HASH, __u32, struct egr_v1_meter, conv_u32,
	     conv_meter, __u32, struct egr_meter),
	COPY("egr_meter_tenant", BPF_MAP_TYPE_PERCPU_HASH, __u32, struct egr_v1_meter,
	     conv_u32, conv_meter, __u32, struct egr_meter),
	COPY("egr_quota_sb", BPF_MAP_TYPE_HASH, __u32, struct egr_v1_quota, conv_u32,
	     conv_quota, __u32, struct egr_quota),
	COPY("egr_quota_tenant", BPF_MAP_TYPE_HASH, __u32, struct egr_v1_quota, conv_u32,
	     conv_quota, __u32, struct egr_quota),
	{ .name = "egr_dests", .type = BPF_MAP_TYPE_LRU_HASH,
	  .key_size = sizeof(struct egr_v1_dest_key), .value_size = sizeof(struct egr_v1_dest_val),
	  .kind = CARRY_DESTS, .key = conv_dest_key, .val = conv_dest_val,
	  .new_key_size = sizeof(struct egr_dest_key),
	  .new_value_size = sizeof(struct egr_dest_val) },
	{ .name = "egr_events", .type = BPF_MAP_TYPE_RINGBUF, .kind = CARRY_DRAIN },
};

_Static_assert(sizeof(egr_mig_v1_maps) / sizeof(egr_mig_v1_maps[0]) == NMAPS,
	       "NMAPS is the number of rows of egr_mig_v1_maps");

/* --- state --------------------------------------------------------------------- */


int egr_mig_from_version(const struct egr_mig *m)
{
	return m ? m->from : 0;
}

void egr_mig_free(struct egr_mig *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < NMAPS; i++)
		if (m->fd[i] >= 0)
			close(m->fd[i]);
	for (size_t i = 0; i < m->nlinks; i++) {
		close(m->links[i].link_fd);
		close(m->links[i].old_prog_fd);
	}
	free(m->links);
	free(m->adds);
	free(m);
}

int egr_mig_spec_index(const char *name)
{
	for (size_t i = 0; i < NMAPS; i++)
		if (strcmp(egr_mig_v1_maps[i].name, name) == 0)
			return (int)i;
	return -1;
}

/* Remove a directory of pins (one level; links detach only when their last
 * reference goes, and nothing here holds links). */
int egr_mig_remove_pins(const char *dir)
{
	char path[PATH_MAX];
	struct dirent *de;
	int ret = 0;
	DIR *d = opendir(dir);

	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (unlink(path) < 0) {
			ret = -errno;
			log_error("unpin %s: %s", path, strerror(errno));
		}
	}
	closedir(d);
	if (rmdir(dir) < 0 && errno != ENOENT && !ret) {
		ret = -errno;
		log_error("remove %s: %s", dir, strerror(errno));
	}
	return ret;
}

/* Which ABI versions have pins under dir: 1 for <dir>/maps, N for <dir>/vN. */
static int scan_versions(const char *dir, int *older, int *newer, int *n_older)
{
	struct dirent *de;
	DIR *d = opendir(dir);

	*older = *newer = *n_older = 0;
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d))) {
		int v = 0;
		char *end;

		if (strcmp(de->d_name, "maps") == 0) {
			v = 1;
		} else if (de->d_name[0] == 'v' && de->d_name[1] >= '1' && de->d_name[1] <= '9') {
			long l = strtol(de->d_name + 1, &end, 10);

			/* v1-retired and the like; version 1 never had a v1/ */
			if (*end || l > INT_MAX || l == 1)
				continue;
			v = (int)l;
		} else {
			continue;
		}
		if (v > EGR_ABI_VERSION && v > *newer)
			*newer = v;
		if (v < EGR_ABI_VERSION) {
			(*n_older)++;
			*older = v;
		}
	}
	closedir(d);
	return 0;
}

static int check_map(struct egr_mig *m, const char *name)
{
	struct bpf_map_info info = { 0 };
	__u32 len = sizeof(info);
	char path[PATH_MAX];
	int idx = egr_mig_spec_index(name), fd;
	const struct map_spec *s;

	if (idx < 0) {
		log_error("upgrade: %s/%s is no map version 1 had: cannot carry it over", m->old_maps,
			  name);
		return -EPROTO;
	}
	s = &egr_mig_v1_maps[idx];
	snprintf(path, sizeof(path), "%s/%s", m->old_maps, name);
	fd = bpf_obj_get(path);
	if (fd < 0) {
		int err = -errno;

		log_error("upgrade: open %s: %s", path, strerror(-err));
		return err;
	}
	if (bpf_obj_get_info_by_fd(fd, &info, &len) < 0) {
		int err = -errno;

		log_error("upgrade: %s is not a map: %s", path, strerror(-err));
		close(fd);
		return err == -EINVAL ? -EPROTO : err;
	}
	if (info.type != s->type || info.key_size != s->key_size ||
	    info.value_size != s->value_size) {
		log_error("upgrade: map %s of version 1 has type %u, key %u, value %u bytes; "
			  "version 1 defines type %u, key %u, value %u: cannot convert it",
			  path, info.type, info.key_size, info.value_size, s->type, s->key_size,
			  s->value_size);
		close(fd);
		return -EPROTO;
	}
	m->fd[idx] = fd;
	return 0;
}

static int check_maps(struct egr_mig *m)
{
	struct dirent *de;
	DIR *d = opendir(m->old_maps);
	int err = 0;

	if (!d) {
		err = -errno;
		log_error("upgrade: read %s: %s", m->old_maps, strerror(-err));
		return err;
	}
	while (!err && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			err = check_map(m, de->d_name);
	closedir(d);
	return err;
}

static int add_link(struct egr_mig *m, uint32_t sandbox_id, const char *path, const char *prog)
{
	struct bpf_link_info info = { 0 };
	__u32 len = sizeof(info);
	struct mig_link *l;
	int fd, pfd;

	fd = bpf_obj_get(path);
	if (fd < 0) {
		int err = -errno;

		log_error("upgrade: open link %s: %s", path, strerror(-err));
		return err;
	}
	if (bpf_obj_get_info_by_fd(fd, &info, &len) < 0 || info.type != BPF_LINK_TYPE_CGROUP) {
		log_error("upgrade: %s is not a cgroup link", path);
		close(fd);
		return -EPROTO;
	}
	if (info.cgroup.cgroup_id == 0) {
		/* The cgroup is gone and the link with it: nothing to move;
		 * adoption removes the sandbox's remains. */
		log_info("upgrade: %s belongs to a removed cgroup; not moved", path);
		close(fd);
		return 0;
	}
	pfd = bpf_prog_get_fd_by_id(info.prog_id);
	if (pfd < 0) {
		int err = -errno;

		log_error("upgrade: program %u of link %s: %s", info.prog_id, path, strerror(-err));
		close(fd);
		return err;
	}
	if (m->nlinks == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 64;
		struct mig_link *nl = realloc(m->links, cap * sizeof(*nl));

		if (!nl) {
			close(fd);
			close(pfd);
			return -ENOMEM;
		}
		m->links = nl;
		m->cap = cap;
	}
	l = &m->links[m->nlinks++];
	memset(l, 0, sizeof(*l));
	snprintf(l->path, sizeof(l->path), "%s", path);
	snprintf(l->prog, sizeof(l->prog), "%s", prog);
	l->sandbox_id = sandbox_id;
	l->attach_type = info.cgroup.attach_type;
	l->cgroup_id = info.cgroup.cgroup_id;
	l->link_fd = fd;
	l->old_prog_fd = pfd;
	l->new_prog_fd = -1;
	return 0;
}

/* Every <dir>/links/<id>/<program>, sandbox by sandbox (adjacent). */
static int collect_links(struct egr_mig *m)
{
	char ldir[PATH_MAX], sdir[PATH_MAX], path[PATH_MAX];
	struct dirent *de, *le;
	int err = 0;
	DIR *d, *s;

	snprintf(ldir, sizeof(ldir), "%s/links", m->dir);
	d = opendir(ldir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while (!err && (de = readdir(d))) {
		char *end;
		unsigned long id = strtoul(de->d_name, &end, 10);

		if (de->d_name[0] == '.' || *end || id == 0 || id > UINT32_MAX)
			continue;
		snprintf(sdir, sizeof(sdir), "%s/%s", ldir, de->d_name);
		s = opendir(sdir);
		if (!s)
			continue;
		while (!err && (le = readdir(s))) {
			if (le->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s", sdir, le->d_name);
			err = add_link(m, (uint32_t)id, path, le->d_name);
		}
		closedir(s);
	}
	closedir(d);
	return err;
}

static __u32 map_id_of(int fd)
{
	struct bpf_map_info info = { 0 };
	__u32 len = sizeof(info);

	return bpf_obj_get_info_by_fd(fd, &info, &len) == 0 ? info.id : 0;
}

/* Look at the maps the running programs use: the pinned egr_cg_storage
 * must be theirs (the attachments' storage lives in it, a look-alike pinned
 * in its place would share nothing), and egr_dns_orig, which version 1
 * never pinned, is taken from them. */
static int check_programs(struct egr_mig *m)
{
	int sidx = egr_mig_spec_index("egr_cg_storage"), didx = egr_mig_spec_index("egr_dns_orig");
	__u32 storage_id = m->fd[sidx] >= 0 ? map_id_of(m->fd[sidx]) : 0;

	for (size_t i = 0; i < m->nlinks; i++) {
		struct bpf_prog_info info = { 0 };
		__u32 ids[64], len = sizeof(info);
		bool uses_storage = false;
		int err;

		info.nr_map_ids = 64;
		info.map_ids = (__u64)(unsigned long)ids;
		if (bpf_obj_get_info_by_fd(m->links[i].old_prog_fd, &info, &len) < 0) {
			err = -errno;
			log_error("upgrade: program of %s: %s", m->links[i].path, strerror(-err));
			return err;
		}
		for (__u32 k = 0; k < info.nr_map_ids && k < 64; k++) {
			struct bpf_map_info mi = { 0 };
			__u32 mlen = sizeof(mi);
			int fd;

			if (ids[k] == storage_id) {
				uses_storage = true;
				continue;
			}
			if (m->fd[didx] >= 0)
				continue;
			fd = bpf_map_get_fd_by_id(ids[k]);
			if (fd < 0)
				continue;
			if (bpf_obj_get_info_by_fd(fd, &mi, &mlen) == 0 &&
			    strcmp(mi.name, "egr_dns_orig") == 0) {
				if (mi.type != egr_mig_v1_maps[didx].type ||
				    mi.key_size != egr_mig_v1_maps[didx].key_size ||
				    mi.value_size != egr_mig_v1_maps[didx].value_size) {
					log_error("upgrade: egr_dns_orig of the running programs has "
						  "type %u, value %u bytes: cannot share it",
						  mi.type, mi.value_size);
					close(fd);
					return -EPROTO;
				}
				m->fd[didx] = fd;
				continue;
			}
			close(fd);
		}
		if (!uses_storage) {
			log_error("upgrade: the program of link %s does not use %s/egr_cg_storage: "
				  "that pin is not the cgroup storage of the sandboxes",
				  m->links[i].path, m->old_maps);
			return -EPROTO;
		}
	}
	return 0;
}

/* The pid of another process holding the map of id map_id open, or 0. The
 * old egressd keeps every map of its version open while it runs: upgrading
 * under it would leave it writing policies into maps nothing reads. */
static pid_t map_holder(__u32 map_id)
{
	char path[PATH_MAX], target[64], line[128];
	pid_t self = getpid(), found = 0;
	struct dirent *pe, *fe;
	DIR *proc = opendir("/proc");

	if (!proc)
		return 0;
	while (!found && (pe = readdir(proc))) {
		char *end;
		long pid = strtol(pe->d_name, &end, 10);
		DIR *fds;

		if (*end || pid <= 0 || pid == self)
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/fd", pid);
		fds = opendir(path);
		if (!fds)
			continue; /* gone, or a kernel thread */
		while (!found && (fe = readdir(fds))) {
			ssize_t n;
			FILE *f;

			if (fe->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "/proc/%ld/fd/%s", pid, fe->d_name);
			n = readlink(path, target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = '\0';
			if (strcmp(target, "anon_inode:bpf-map") != 0)
				continue;
			snprintf(path, sizeof(path), "/proc/%ld/fdinfo/%s", pid, fe->d_name);
			f = fopen(path, "r");
			if (!f)
				continue;
			while (fgets(line, sizeof(line), f)) {
				unsigned int id;

				if (sscanf(line, "map_id: %u", &id) == 1) {
					if (id == map_id)
						found = (pid_t)pid;
					break;
				}
			}
			fclose(f);
		}
		closedir(fds);
	}
	closedir(proc);
	return found;
}

int egr_mig_prepare(const char *dir, struct egr_mig **out)
{
	char retired[PATH_MAX];
	int older, newer, n_older, err;
	struct egr_mig *m;

	*out = NULL;
	snprintf(retired, sizeof(retired), "%s/v1-retired", dir);
	if (access(retired, F_OK) == 0) {
		log_info("upgrade: removing %s, left by an upgrade that stopped after its "
			 "commit point", retired);
		if (egr_mig_remove_pins(retired))
			log_warn("upgrade: %s is left (it is never read)", retired);
	}
	err = scan_versions(dir, &older, &newer, &n_older);
	if (err) {
		log_error("upgrade: read %s: %s", dir, strerror(-err));
		return err;
	}
	if (newer) {
		log_error("upgrade: %s/v%d holds pins of ABI version %d, newer than this egressd's "
			  "%d: refusing to start (downgrades are not supported); the pinned "
			  "enforcement stays as it is",
			  dir, newer, newer, EGR_ABI_VERSION);
		return -EPROTONOSUPPORT;
	}
	if (!n_older)
		return 0;
	if (n_older > 1 || older != 1) {
		log_error("upgrade: %s holds pins of ABI version %d%s; this egressd (version %d) "
			  "converts only version 1: refusing to start, the pinned enforcement "
			  "stays as it is",
			  dir, older, n_older > 1 ? " and others" : "", EGR_ABI_VERSION);
		return -EPROTONOSUPPORT;
	}

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	for (size_t i = 0; i < NMAPS; i++)
		m->fd[i] = -1;
	m->from = older;
	snprintf(m->dir, sizeof(m->dir), "%s", dir);
	snprintf(m->old_maps, sizeof(m->old_maps), "%s/maps", dir);
	err = check_maps(m);
	if (!err)
		err = collect_links(m);
	if (!err && m->nlinks && m->fd[egr_mig_spec_index("egr_cg_storage")] < 0) {
		log_error("upgrade: sandboxes are attached but %s/egr_cg_storage is missing: the "
			  "new programs could not tell them apart", m->old_maps);
		err = -EPROTO;
	}
	if (!err)
		err = check_programs(m);
	if (!err && m->fd[egr_mig_spec_index("egr_sandboxes")] >= 0) {
		pid_t pid = map_holder(map_id_of(m->fd[egr_mig_spec_index("egr_sandboxes")]));

		if (pid) {
			log_error("upgrade: process %d holds the version %d maps open (the old "
				  "egressd still running?): stop it first",
				  (int)pid, m->from);
			err = -EBUSY;
		}
	}
	if (err) {
		log_error("upgrade from ABI version %d refused; the version %d programs keep "
			  "enforcing every sandbox", m->from, m->from);
		egr_mig_free(m);
		return err;
	}
	log_info("upgrade: pins of ABI version %d under %s (%zu sandbox links): migrating to "
		 "version %d",
		 m->from, m->old_maps, m->nlinks, EGR_ABI_VERSION);
	*out = m;
	return 0;
}
