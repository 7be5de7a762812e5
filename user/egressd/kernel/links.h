/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The per-sandbox links pinned under <bpffs-dir>/links/<sandbox-id>/<program>
 * and every pin egressd holds an fd of (links.c). Part of the kernel/ API:
 * bpfstate.h includes this; links.c itself never includes bpfstate.h
 * (bpfstate.c calls into links.c, not the other way: tools/module-cycles).
 */
#ifndef EGR_LINKS_H
#define EGR_LINKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Cgroup programs a sandbox gets one link each of, at most. */
#define EGR_MAX_CGROUP_PROGS 24

struct egr_bpf;

/* Attach every cgroup program to the cgroup as links, pin them under
 * links/<sandbox_id>/ and keep an fd of each. On error nothing stays
 * attached. */
int egr_bpf_attach(struct egr_bpf *b, uint32_t sandbox_id, const char *cgroup_path);
/* Attach the programs the sandbox has no link of (its pins were removed
 * while no egressd held them), pin and keep them. 0 or -errno. */
int egr_bpf_attach_missing(struct egr_bpf *b, uint32_t sandbox_id, const char *cgroup_path);
/* Detach, unpin and close the links of sandbox_id (idempotent). */
int egr_bpf_detach(struct egr_bpf *b, uint32_t sandbox_id);
/* Are all of the sandbox's links pinned? For a sandbox egressd holds the
 * links of: as the last egr_bpf_check_pins found them (it runs on every
 * removal inotify reports and every 10 s), so health asks in O(1), not 13
 * path lookups per sandbox; otherwise: the pins on disk. */
bool egr_bpf_links_complete(struct egr_bpf *b, uint32_t sandbox_id);
/* Does egressd hold the sandbox's links (egr_bpf_links_complete then
 * answers from memory)? */
bool egr_bpf_links_held(struct egr_bpf *b, uint32_t sandbox_id);
/* Changes whenever egr_bpf_links_complete's answer for a held sandbox can:
 * while it and the registry's egr_reg_gen stand, an earlier answer for
 * every sandbox still holds. */
uint64_t egr_bpf_links_gen(const struct egr_bpf *b);
/* Open the sandbox's pinned links and hold egressd's reference (adoption). Each must
 * be a cgroup link of the program its pin is named after (attach type and
 * program name): one that is not has its pin removed and counts as missing.
 * 0 when every program has one, -ENOENT when some are missing (those found
 * are kept), -EXDEV when they are attached to different cgroups (kept),
 * -ESTALE when a link runs with another cgroup storage than this egressd's
 * programs (kept on its old program), another -errno on error. */
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

#endif /* EGR_LINKS_H */
