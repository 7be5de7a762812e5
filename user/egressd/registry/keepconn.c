// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Learned addresses a sandbox still talks to (docs/dns.md "Learned
 * addresses and client caches"): a learned name due to expire soon lives on
 * while a socket of the sandbox is connected to its address, so a client
 * that keeps a connection (a pool, a JVM's cached address) may open another
 * one to the same place. The sockets are the kernel's word (sock_diag, by
 * the sandbox's cgroup ids), read once per network namespace per sweep, and
 * only for the sandboxes that have a name due.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cgroup.h"
#include "clock.h"
#include "dns/learned.h"
#include "log.h"
#include "sockdiag.h"
#include "registry/registry_impl.h"

/* Sandboxes looked at in one sweep; the rest wait for the next. */
#define KEEP_MAX_SANDBOXES 4096

struct owner {
	uint64_t cgid;
	uint32_t sandbox_id;
};

struct keep_scan {
	struct egr_learned *l;
	struct owner *own;
	size_t n;
	uint64_t until;
	unsigned kept;
};

static int cmp_owner(const void *a, const void *b)
{
	const struct owner *x = a, *y = b;

	return x->cgid < y->cgid ? -1 : x->cgid > y->cgid;
}

static int cmp_netns(const void *a, const void *b)
{
	const struct egr_sb *x = *(struct egr_sb *const *)a, *y = *(struct egr_sb *const *)b;

	if (!x->netns || !y->netns)
		return !!x->netns - !!y->netns;
	return strcmp(x->netns, y->netns);
}

static void on_peer(void *ctx, uint64_t cgid, int family, const uint8_t *daddr, uint16_t dport,
		    int protocol)
{
	static const uint8_t mapped[12] = { [10] = 0xff, [11] = 0xff };
	struct keep_scan *k = ctx;
	struct owner key = { .cgid = cgid }, *o;

	o = bsearch(&key, k->own, k->n, sizeof(*o), cmp_owner);
	if (!o)
		return;
	/* A dual-stack socket to ::ffff:a.b.c.d reaches the IPv4 entry. */
	if (family == AF_INET6 && !memcmp(daddr, mapped, sizeof(mapped))) {
		family = AF_INET;
		daddr += 12;
	}
	if (!egr_learned_keep(k->l, o->sandbox_id, family, daddr, k->until))
		k->kept++;
}

/* One dump for the sandboxes sbs[0..n) of one network namespace. */
static void keep_in_netns(struct keep_scan *k, struct egr_sb **sbs, size_t n)
{
	const char *netns = sbs[0]->netns;
	uint64_t *cgids = NULL;
	int fd = -1, err = 0;

	k->n = 0;
	for (size_t i = 0; i < n && !err; i++) {
		uint64_t *ids = NULL;
		size_t nids = 0;
		struct owner *no;

		if (egr_cgroup_subtree_ids(sbs[i]->cgroup, &ids, &nids) || !nids)
			continue; /* gone: its sockets go with it */
		no = realloc(k->own, (k->n + nids) * sizeof(*no));
		if (!no) {
			err = -ENOMEM;
		} else {
			k->own = no;
			for (size_t j = 0; j < nids; j++)
				k->own[k->n++] = (struct owner){ ids[j], sbs[i]->id };
		}
		free(ids);
	}
	if (err || !k->n)
		goto out;
	qsort(k->own, k->n, sizeof(*k->own), cmp_owner);
	cgids = malloc(k->n * sizeof(*cgids));
	if (!cgids) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < k->n; i++)
		cgids[i] = k->own[i].cgid;
	if (netns) {
		fd = open(netns, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			err = -errno;
			goto out;
		}
	}
	err = egr_sockdiag_connected(fd, cgids, k->n, on_peer, k);
out:
	/* Fail closed: what was not kept expires as its TTL says. */
	if (err == -ENOENT && netns)
		log_debug("learned addresses in use in %s: gone; they expire as due", netns);
	else if (err)
		log_warn("learned addresses in use%s%s: %s; they expire as due",
			 netns ? " in " : "", netns ? netns : "", strerror(-err));
	if (fd >= 0)
		close(fd);
	free(cgids);
}

unsigned egr_reg_keep_connected(struct egr_registry *r, struct egr_learned *l, uint64_t horizon_ns,
				uint64_t extend_ns)
{
	uint64_t now = egr_boot_ns();
	struct keep_scan k = { .l = l, .until = now + extend_ns };
	struct egr_sb **sbs = NULL;
	uint32_t *ids = NULL;
	size_t n, m = 0;

	if (!l)
		return 0;
	ids = malloc(KEEP_MAX_SANDBOXES * sizeof(*ids));
	n = ids ? egr_learned_expiring(l, now, now + horizon_ns, ids, KEEP_MAX_SANDBOXES) : 0;
	sbs = n ? calloc(n, sizeof(*sbs)) : NULL;
	for (size_t i = 0; sbs && i < n; i++) {
		struct egr_sb *sb = egr_reg_by_id(r, ids[i]);

		if (sb && sb->cgroup)
			sbs[m++] = sb;
	}
	if (m)
		qsort(sbs, m, sizeof(*sbs), cmp_netns);
	for (size_t i = 0, j; i < m; i = j) {
		for (j = i + 1; j < m && !cmp_netns(&sbs[i], &sbs[j]); j++)
			;
		keep_in_netns(&k, sbs + i, j - i);
	}
	if (k.kept)
		log_debug("dns: %u learned address(es) kept while connected", k.kept);
	free(k.own);
	free(sbs);
	free(ids);
	return k.kept;
}
