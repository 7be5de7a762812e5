/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The kernel side of egressd: the BPF object loaded once, its maps pinned
 * under <bpffs-dir>/v<EGR_ABI_VERSION>/maps (reused by the next egressd,
 * converted by kernel/migrate.c when they are of an older version),
 * and the per-sandbox links pinned under <bpffs-dir>/links/<sandbox-id>/
 * <program> (not versioned: an upgrade moves a link to the new program). Destroying
 * this state never detaches a sandbox: only egr_bpf_detach() does.
 */
#ifndef EGR_BPFSTATE_H
#define EGR_BPFSTATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "bpf_knobs.h"
#include "compile.h"
#include "egressd.h"

struct egressd_bpf;

/* The loaded object, its pins, the links egressd holds and the map fds
 * (kernel/kernel_priv.h): opaque outside kernel/. */
struct egr_bpf;

/* What the host can do, probed once at start (egressctl status shows it). */
struct egr_features {
	bool btf;
	bool cgroup2;
	bool bpffs;
	bool cgroup_sock_addr;
	bool cgroup_sock;
	bool bpf_link;    /* BPF_LINK_CREATE for cgroup programs (probed, 5.7+) */
	/* Layers (docs/security.md): what confines a sandbox on this host. */
	bool setsockopt;  /* cgroup/setsockopt loaded and attached with the rest */
	bool skb;         /* cgroup_skb backstop and inbound deny */
	bool seccomp;     /* the kernel filters syscalls (egressctl run, OCI profile) */
	bool lsm_cgroup;  /* lsm_cgroup/socket_create would load (needs trampolines) */
	bool escape_guard; /* the cgroup migration guard is in force (escape.h) */
	bool escape_root;  /* and its programs at the cgroup2 root (escape.h) */
};

/* The layers as a JSON object (status, logs): {"sock_addr": true, ...}. */
json_t *egr_features_layers(const struct egr_features *f);

/* Mount bpffs at /sys/fs/bpf if nothing is there, create dir, load the
 * programs with knobs (NULL: EGR_BPF_KNOBS_DEFAULT), reusing pinned maps or
 * upgrading an older ABI version's pins in place, and pin the maps. feat
 * gets what the host was probed to have (also on failure). 0 and *out, or
 * -errno. */
int egr_bpf_open(struct egr_bpf **out, const char *dir, const struct egr_bpf_knobs *knobs,
		 const struct egr_bpf_listeners *prior, struct egr_features *feat);
/* The maps of the object only, created fresh and pinned nowhere, no program
 * loaded; every hash and LPM map capped at max_entries (0: as defined).
 * For tests and tools that need egressd's real map types. */
int egr_bpf_open_private(struct egr_bpf **out, uint32_t max_entries);
/* Drop egressd's references and free b (NULL is fine): pinned maps and
 * links stay in force. */
void egr_bpf_close(struct egr_bpf *b);

/* --bpffs-dir: the pins are below it. */
const char *egr_bpf_dir(const struct egr_bpf *b);
/* What the programs were loaded with. */
const struct egr_bpf_knobs *egr_bpf_knobs(const struct egr_bpf *b);
/* Were pinned maps of an earlier egressd adopted? The ABI version migrated
 * from at start (0: none). */
bool egr_bpf_reused_maps(const struct egr_bpf *b);
int egr_bpf_migrated_from(const struct egr_bpf *b);
/* Adopted links moved from an earlier egressd's programs to this one's
 * (same ABI version; egr_bpf_adopt_links). */
uint64_t egr_bpf_links_refreshed(const struct egr_bpf *b);

struct ring_buffer;
/* A libbpf ring buffer on egr_events calling fn(ctx, data, size) per record
 * (ring_buffer_sample_fn). NULL and errno on error. */
struct ring_buffer *egr_bpf_ring_new(struct egr_bpf *b, int (*fn)(void *, void *, size_t),
				     void *ctx);
/* Call fn for every map of the object whose pin is missing. The count. */
int egr_bpf_missing_map_pins(struct egr_bpf *b,
			     void (*fn)(void *ctx, const char *map, const char *path), void *ctx);

/* The per-sandbox links and the pins (links.c). */
#include "links.h"

/* The typed map operations on the handle. */
#include "maps.h"

#endif /* EGR_BPFSTATE_H */
