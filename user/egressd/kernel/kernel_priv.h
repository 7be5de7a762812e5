/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Private to user/egressd/kernel/: the loaded object behind the opaque
 * struct egr_bpf. Nothing outside kernel/ includes this header (the unit
 * tests of kernel/ do, to check what the handle holds).
 *
 * Who owns what: bpfstate.c loads the object and probes the features,
 * links.c owns the per-sandbox links and every pin (links_adopt.c adopts
 * an earlier egressd's), maps.c is the only
 * code that reads or writes a map (migrate.c converts an older version's
 * pinned maps before any of them is in use). bpfstate.c is the top layer:
 * this header includes only what lies below it (links.h, bpf_knobs.h),
 * never bpfstate.h, so links.c, maps.c and walk.c do not depend on it.
 */
#ifndef EGR_KERNEL_PRIV_H
#define EGR_KERNEL_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf_knobs.h"
#include "links.h"

struct egressd_bpf;
struct bpf_object;
struct bpf_program;

/* One sandbox's links. egressd holds its own reference of every link, so a
 * removed pin never detaches anything while it runs, and the pin can be
 * made again from it (egr_bpf_check_pins). The references are pins in a
 * bpffs instance mounted nowhere (egr_bpf.hold_fd, links.c), not open
 * files: 13 fds per sandbox would cap egressd at ~1,500 sandboxes under a
 * 20,000-file limit. link_id[i] is the kernel id of the link of cgroup
 * program i (egr_bpf.prog_names), 0 when egressd holds none. */
struct egr_link_set {
	uint32_t sandbox_id;
	int wd; /* inotify watch of links/<id>; -1: none */
	uint32_t link_id[EGR_MAX_CGROUP_PROGS];
	uint32_t unpinned; /* bit i: the last pin check could not pin program i's again */
	/* The inode of each shared pin as egressd made or verified it: a pin
	 * check stats it (one syscall, no file) and asks the kernel for the
	 * link id only when the inode differs (a removal or a rename over). */
	uint64_t pin_ino[EGR_MAX_CGROUP_PROGS];
	size_t pos;                 /* its index in egr_bpf.links */
	struct egr_link_set *hnext; /* its chain in egr_bpf.links_by_id */
};

struct egr_bpf {
	struct egressd_bpf *skel; /* NULL for a maps-only handle (egr_bpf_open_private) */
	char dir[256];       /* --bpffs-dir */
	char maps[300];      /* <dir>/v<EGR_ABI_VERSION>/maps: pin maps only here */
	int fd_storage, fd_sandboxes, fd_allow4, fd_allow6, fd_counters;
	int fd_meter_sb, fd_meter_tenant, fd_quota_sb, fd_quota_tenant, fd_events, fd_dests;
	int fd_inspect_orig; /* original destinations of inspected connections */
	int fd_sb_cgroups, fd_proc_home; /* for the escape guard (escape.h) */
	int fd_dns_clients, fd_dns_clients_n; /* egr_dns_senders: who asks the DNS proxy (dns.md) */
	int fd_dns_budget; /* per-sandbox bound on the shared DNS listeners' queues */
	int fd_dests_n; /* per-sandbox entries and drops of fd_dests */
	int fd_deny_budget; /* per-sandbox deny-event budgets and losses */
	int fd_sock_counts; /* inet sockets each sandbox made (detach's walk) */
	int fd_listen_ports, fd_listen_sk; /* egressd's own listeners (listen.h) */
	uint64_t listen_gen; /* this start's claims (listen.c); 0 until the first */
	bool listen_frozen;  /* exiting: releases are no-ops (egr_bpf_listen_freeze) */
	bool reused_maps;    /* pinned maps from an earlier egressd were adopted */
	int migrated_from;   /* ABI version upgraded from at start, 0 = none */
	struct egr_bpf_knobs knobs; /* what the programs were loaded with */
	const struct egr_bpf_listeners *prior; /* egr_bpf_open's, while it runs */
	/* The cgroup programs loaded on this host, in attach order. */
	const char *prog_names[EGR_MAX_CGROUP_PROGS];
	size_t nprogs;
	struct egr_link_set **links;       /* dense: every sandbox egressd holds links of */
	size_t nlinks, caplinks;
	struct egr_link_set **links_by_id; /* chained by sandbox id, link_buckets wide */
	size_t link_buckets;
	int pin_watch_fd; /* inotify on the pin directories; -1: none */
	/* The detached bpffs instance (fsmount, attached to no mount point)
	 * holding egressd's own reference of each link as <id>/<program>;
	 * closing it drops them all. -1: none (a maps-only handle). */
	int hold_fd;
	int links_wd;     /* its watch of links/ (0 before egr_kern_watch_dirs) */
	uint64_t refreshed_links; /* adopted links moved to our programs */
	/* Changes with every change egr_bpf_links_complete can see for a
	 * held sandbox: a link held or dropped, a set made or dropped, a pin
	 * found missing or restored (set_unpinned). */
	uint64_t links_gen;
	/* The destination keys the last audit walk found (maps.c), for the
	 * removal at detach: then it needs no second walk. */
	struct {
		uint32_t sandbox_id;
		uint8_t *keys; /* n keys of sizeof(struct egr_dest_key) */
		size_t n;
	} dests_seen;
};

/* walk.c: the one walker. */
/* Called for each entry: the key and the value as the kernel returns it
 * (per-CPU maps: one value per possible CPU, each rounded up to 8 bytes).
 * Non-zero stops the walk and is returned by egr_kmap_walk. */
typedef int (*egr_kmap_walk_fn)(void *ctx, const void *key, const void *value);

/* Flags of egr_kmap_walk. */
#define EGR_WALK_NO_BATCH 1u /* get_next_key + lookup only (tests, old kernels) */

/* Walk every entry of the map fd: BPF_MAP_LOOKUP_BATCH where the map type
 * has it, else (an LPM trie, a kernel without it) get_next_key + lookup,
 * as bcc's map_helpers.c does. Entries deleted meanwhile are skipped; the
 * walk is bounded (twice the map's max_entries, plus one batch): -EAGAIN
 * when the bound ran out first. 0, fn's value, or -errno. Private to
 * kernel/ (it takes an fd): maps.h has the typed walkers. */
int egr_kmap_walk(int fd, unsigned flags, egr_kmap_walk_fn fn, void *ctx);

/* Keys collected by a walk (deleted after it: a walk must not delete). */
struct egr_key_list {
	uint8_t *keys;
	size_t key_size, n, cap;
};

/* Append a copy of key. 0 or -ENOMEM. */
int egr_key_list_add(struct egr_key_list *l, const void *key);

/* bpfstate.c (the top of kernel/: nothing below it calls it) */
void egr_kern_maps_bind(struct egr_bpf *b);

/* links.c */
/* links/<id> of a sandbox in buf: 0 or -ENAMETOOLONG. */
int egr_kern_links_dir(struct egr_bpf *b, uint32_t sandbox_id, char *buf, size_t len);
/* The link set of a sandbox; with create, a new empty one when there is
 * none (NULL: out of memory). */
struct egr_link_set *egr_kern_link_set(struct egr_bpf *b, uint32_t sandbox_id, bool create);
/* Take egressd's own reference of link fd, program p of the sandbox. */
int egr_kern_hold_link(struct egr_bpf *b, struct egr_link_set *ls, size_t p, int fd);
/* Note the inode of program p's shared pin at path (the pin check's stat). */
void egr_kern_note_pin(struct egr_link_set *ls, size_t p, const char *path);
/* The inotify watch descriptor of dir; -1 when there is none. */
int egr_kern_watch(struct egr_bpf *b, const char *dir);
/* links_adopt.c: 0 when both programs use the same cgroup storage map (or
 * neither uses one), -ESTALE when they differ, or -errno. A link keeps its
 * attachment's storage across bpf_link_update, whatever the new program
 * names: the upgrade and the adoption move a link only when this is 0. */
int egr_kern_same_storage(int old_prog_fd, int new_prog_fd);
/* A program attached per sandbox cgroup (a global tracing program is not);
 * the load and the upgrade count the same ones. */
bool egr_kern_is_cgroup_prog(const struct bpf_program *prog);
/* links_adopt.c: a program newer than sandboxes an earlier egressd
 * attached (the bind guard): its missing link is no removed pin. */
bool egr_kern_prog_is_late(const char *name);
/* mkdir that is fine with an existing directory: 0 or -errno. */
int egr_kern_mkdir(const char *path, mode_t mode);
void egr_kern_watch_dirs(struct egr_bpf *b);
/* Drop every link reference egressd holds (the pins stay) and forget them. */
/* Make the bpffs instance that holds egressd's own link references
 * (links.c); 0 or -errno. */
int egr_kern_hold_open(struct egr_bpf *b);
void egr_kern_links_release(struct egr_bpf *b);
/* maps.c: free what the maps' operations cache in b. */
void egr_kern_maps_release(struct egr_bpf *b);
/* The upgrade's hooks (migrate.h struct egr_mig_attach), ctx = b. */
int egr_kern_mig_attach(void *ctx, uint32_t sandbox_id, uint64_t cgroup_id, const char *prog);
void egr_kern_mig_detach(void *ctx, uint32_t sandbox_id, const char *prog);
/* listen.c: mark b->prior's sockets in obj's maps (before_switch). */
void egr_kern_mig_premark(void *ctx, struct bpf_object *obj);

#endif /* EGR_KERNEL_PRIV_H */
