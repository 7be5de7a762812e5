/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The control socket (docs/control-protocol.md). */
#ifndef EGR_SERVER_H
#define EGR_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <jansson.h>

#include "kernel/bpfstate.h"
#include "harden.h"
#include "obs/health.h"
#include "proto.h"
#include "sandbox.h"

struct egr_events;
struct egr_alerting;
struct egr_auditlog;
struct egr_metrics;
struct egr_guard;
struct egr_breaker;
struct egr_lifetime;
struct egr_approvals;
struct egr_ptree;

struct egr_server {
	struct egr_registry *reg;
	const struct egr_features *features;
	gid_t group; /* (gid_t)-1: root only */
	char cgroup_root[4096]; /* cgroup2 mount, to resolve peers' cgroups */
	/* Observability (NULL when absent): the `events` op, status figures,
	 * the actor of audited policy changes. */
	struct egr_events *events;
	struct egr_alerting *alerting;
	struct egr_auditlog *audit;
	struct egr_metrics *metrics; /* the `stats` op (NULL: unavailable) */
	struct egr_breaker *breaker; /* the `release` op, status (NULL: unavailable) */
	struct egr_hardening hardening; /* what egressd gave up (status) */
	struct egr_guard *guard;        /* pin checks (status; NULL: none) */
	const char *cgroup_ns;          /* "host" or "joined host" (status) */
	struct egr_health *health; /* status "healthy"/"problems" (NULL: not judged) */
	struct egr_lifetime *lifetime; /* launcher ties (NULL: attach refuses launcher_pid) */
	struct egr_approvals *approvals; /* approvals/approve/deny (NULL: unavailable) */
	struct egr_ptree *ptree; /* attach "policy_ref" (NULL: unavailable) */
	/* The connection of the request being served (a launcher is its peer). */
	int peer_fd;
	struct ucred peer;
};

/* Create the socket (mode 0660, group `group`) and its directory. */
int egr_server_listen(const char *path, gid_t group, int *out_fd);
/* The pieces ctlconn.c serves a connection with (one request, one reply):
 * may this peer drive egressd (control/peer.h)? Judged at accept and again
 * when its request has arrived, just before it is served. *why: the
 * reason of a refusal. */
bool egr_server_admit(struct egr_server *s, int cfd, struct ucred *cred, const char **why);
/* Send a refused peer its answer without blocking; the caller closes. */
void egr_server_refuse(int cfd, const struct ucred *cred, const char *why);
/* The reply to one parsed request of an admitted peer; never NULL. */
json_t *egr_server_answer(struct egr_server *s, int cfd, const struct ucred *cred,
			  const json_t *req);
/* {"ok":false,"code":code,"error":msg} (NULL when out of memory). */
json_t *egr_server_error(enum egr_err code, const char *msg);
/* Does this exchange hand the connection to the event stream? */
bool egr_server_follows(const json_t *req, const json_t *reply, uint32_t *sandbox);

#endif /* EGR_SERVER_H */
