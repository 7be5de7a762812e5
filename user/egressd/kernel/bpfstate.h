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

#include "compile.h"
#include "egressd.h"

struct egressd_bpf;

/* Cgroup programs a sandbox gets one link each of, at most. */
#define EGR_MAX_CGROUP_PROGS 16

/* The loaded object, its pins, the links egressd holds and the map fds
 * (kernel/kernel_priv.h): opaque outside kernel/. */
struct egr_bpf;

/* Load-time knobs: read-only data of the programs, set between open and
 * load (programs already attached keep the values they were loaded with). */
struct egr_bpf_knobs {
	uint64_t deny_events_per_s;  /* per sandbox, reported one by one; 0: no budget */
	uint64_t deny_events_burst;
	uint64_t allow_events_per_s; /* sampled allow events per CPU (burst the same); 0: none */
};
#define EGR_BPF_KNOBS_DEFAULT { .deny_events_per_s = 100, .deny_events_burst = 200, \
				.allow_events_per_s = 20 }

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
};

/* The layers as a JSON object (status, logs): {"sock_addr": true, ...}. */
json_t *egr_features_layers(const struct egr_features *f);

/* Mount bpffs at /sys/fs/bpf if nothing is there, create dir, load the
 * programs with knobs (NULL: EGR_BPF_KNOBS_DEFAULT), reusing pinned maps or
 * upgrading an older ABI version's pins in place, and pin the maps. feat
 * gets what the host was probed to have (also on failure). 0 and *out, or
 * -errno. */
int egr_bpf_open(struct egr_bpf **out, const char *dir, const struct egr_bpf_knobs *knobs,
		 struct egr_features *feat);
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

struct ring_buffer;
/* A libbpf ring buffer on egr_events calling fn(ctx, data, size) per record
 * (ring_buffer_sample_fn). NULL and errno on error. */
struct ring_buffer *egr_bpf_ring_new(struct egr_bpf *b, int (*fn)(void *, void *, size_t),
				     void *ctx);
/* Call fn for every map of the object whose pin is missing. The count. */
int egr_bpf_missing_map_pins(struct egr_bpf *b,
			     void (*fn)(void *ctx, const char *map, const char *path), void *ctx);

/* Attach every cgroup program to the cgroup as links, pin them under
 * links/<sandbox_id>/ and keep an fd of each. On error nothing stays
 * attached. */
int egr_bpf_attach(struct egr_bpf *b, uint32_t sandbox_id, const char *cgroup_path);
/* Attach the programs the sandbox has no link of (its pins were removed
 * while no egressd held them), pin and keep them. 0 or -errno. */
int egr_bpf_attach_missing(struct egr_bpf *b, uint32_t sandbox_id, const char *cgroup_path);
/* Detach, unpin and close the links of sandbox_id (idempotent). */
int egr_bpf_detach(struct egr_bpf *b, uint32_t sandbox_id);
/* Are all of the sandbox's links pinned? */
bool egr_bpf_links_complete(struct egr_bpf *b, uint32_t sandbox_id);
/* Open the sandbox's pinned links and keep their fds (adoption). Each must
 * be a cgroup link of the program its pin is named after (attach type and
 * program name): one that is not has its pin removed and counts as missing.
 * 0 when every program has one, -ENOENT when some are missing (those found
 * are kept), -EXDEV when they are attached to different cgroups (kept),
 * another -errno on error. */
int egr_bpf_adopt_links(struct egr_bpf *b, uint32_t sandbox_id);
/* The cgroup id the sandbox's links are attached to, from the kernel
 * (bpf_link_get_info_by_fd): 0 once the cgroup was released and the links
 * went defunct. -ENOENT when egressd holds no link of it. */
int egr_bpf_links_cgroup_id(struct egr_bpf *b, uint32_t sandbox_id, uint64_t *cgroup_id);

/* What egr_bpf_check_pins() found removed (or, for a link, replaced by
 * another object: EGR_PIN_LINK_REPLACED) and pinned again. */
enum egr_pin_kind { EGR_PIN_MAP, EGR_PIN_LINK, EGR_PIN_LINK_REPLACED };
typedef void (*egr_pin_fn)(void *ctx, enum egr_pin_kind kind, uint32_t sandbox_id,
			   const char *path, int err);
/* Make every pin egressd holds an fd of exist again: the bpffs directories,
 * each map, each link of each sandbox; a link pin naming another link than
 * egressd's fd (a rename over it) is unlinked and pinned from the fd. Calls
 * report() for every pin that was missing or replaced (err: 0 pinned again,
 * or why not). Returns how many were. */
int egr_bpf_check_pins(struct egr_bpf *b, egr_pin_fn report, void *ctx);
/* An inotify fd that becomes readable when something is removed from a pin
 * directory (-1 when inotify is unavailable: then only periodic checks);
 * egr_bpf_pin_events() drains it and says whether anything happened. The
 * watches follow egr_bpf_check_pins (directories made again are watched). */
int egr_bpf_pin_watch_fd(const struct egr_bpf *b);
bool egr_bpf_pin_events(struct egr_bpf *b);
/* Sandbox ids with a links/<id> directory. Caller frees *ids. */
int egr_bpf_pinned_sandboxes(struct egr_bpf *b, uint32_t **ids, size_t *n);

/* The typed map operations on the handle. */
#include "maps.h"

#endif /* EGR_BPFSTATE_H */
