/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * <state-dir>: what lets a restarted egressd manage its sandboxes again.
 * sandboxes/<id>.json, one per sandbox or held cgroup, authenticated
 * (HMAC-SHA-256 with state.key, docs/security.md); tenants.json, the name
 * of every tenant id ever given out. Every write replaces the file
 * atomically (write a .tmp, rename it over). Joined to a commit queue
 * (egr_state_set_commit), a sandbox file's fdatasync and its directory's
 * fsync wait for the queue's next flush, which every request that wrote one
 * waits for before its reply: requests served together share one directory
 * fsync. Without a queue each write is durable before it returns.
 */
#ifndef EGR_STATEFILE_H
#define EGR_STATEFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "registry/records.h"

struct egr_commitq;
struct egr_commit_member;

/* A sandbox file renamed into place whose data and name are not durable yet. */
struct egr_state_pending {
	uint32_t id;
	int fd; /* the file, open for fdatasync */
};

struct egr_statedir {
	char dir[256];
	struct egr_commit_member *cm; /* NULL: every write durable at once */
	int sbdir_fd;                 /* sandboxes/, for its fsync; -1 without a queue */
	struct egr_state_pending *pend;
	size_t npend, cap;
	bool dir_dirty;               /* a rename in sandboxes/ since its last fsync */
	int sync_err;                 /* a failed inline sync, for the next batch */
	uint8_t *key;   /* <state-dir>/state.key: HMAC key of the state files */
	size_t keylen;
	bool key_new;   /* made at this start */
	/* <state-dir>/upgrade.unsigned exists: the files may be an earlier
	 * egressd's, written before state files were signed (docs/security.md
	 * "Adopting unsigned state once"). */
	bool legacy_ok;
};

/* Make the directories and load (or make) the key. unsigned_pins: the
 * pins this start took over were of an egressd that wrote no MAC (ABI
 * version 1). Either that or a new key opens the one-time window for
 * unsigned files (upgrade.unsigned, made durable before the key). 0 or
 * -errno. */
int egr_state_open(struct egr_statedir *st, const char *dir, bool unsigned_pins);
/* Adoption is complete: every unsigned file was re-signed or held. Closes
 * the window (removes upgrade.unsigned). 0 or -errno. */
int egr_state_upgrade_done(struct egr_statedir *st);
/* Sandbox files' syncs go with q's batches from now on. 0 or -errno. */
int egr_state_set_commit(struct egr_statedir *st, struct egr_commitq *q);
/* Makes what is pending durable and leaves the queue. */
void egr_state_close(struct egr_statedir *st);

/* The state of sandbox id, authenticated; NULL with why on failure
 * (-ENOENT in *errp when there is no file). With legacy non-NULL, a file
 * without a MAC is returned too (*legacy set) while the upgrade window is
 * open (legacy_ok): an earlier egressd wrote it, only the kernel can
 * confirm it. */
json_t *egr_state_read(const struct egr_statedir *st, uint32_t id, char *why, size_t whylen,
		       int *errp, bool *legacy);
/* Just its "policy" (logged when unreadable); NULL then. */
json_t *egr_state_load_policy(const struct egr_statedir *st, uint32_t id);
/* "attached" with policy, or held ("detached"/"tampered"). 0 or -errno. */
int egr_state_save_sb(struct egr_statedir *st, const struct egr_sb *sb, const json_t *policy);
int egr_state_save_held(struct egr_statedir *st, const struct egr_held *h);
void egr_state_drop(struct egr_statedir *st, uint32_t id);
/* Keep a file that failed its check, for whoever investigates. */
void egr_state_move_aside(const struct egr_statedir *st, uint32_t id);
/* "<digits>.json" in sandboxes/ and nothing else: its id, else 0. */
uint32_t egr_state_file_id(const char *name);
const char *egr_held_state_name(enum egr_held_state s);

/* tenants.json: names[i] is tenant id i + 1. load: nothing on first start. */
int egr_state_tenants_save(const struct egr_statedir *st, char *const *names, size_t n);
void egr_state_tenants_load(const struct egr_statedir *st, char ***names, size_t *n);

#endif /* EGR_STATEFILE_H */
