/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The control protocol's approvals, approve and deny operations
 * (docs/control-protocol.md "Approvals"). Peers are the control socket's
 * admitted ones (root or the control group, never a sandboxed process):
 * the server judges them before any of these runs.
 */
#ifndef EGR_CONTROL_APPROVAL_OPS_H
#define EGR_CONTROL_APPROVAL_OPS_H

#include <sys/socket.h>
#include <jansson.h>

struct egr_approvals;

/* Replies (never NULL unless out of memory); ap NULL: "unavailable".
 * peer: the admitted peer deciding, recorded as the approver. */
json_t *egr_ctl_approvals(struct egr_approvals *ap, const json_t *req);
json_t *egr_ctl_approve(struct egr_approvals *ap, const struct ucred *peer, const json_t *req);
json_t *egr_ctl_deny(struct egr_approvals *ap, const struct ucred *peer, const json_t *req);

#endif /* EGR_CONTROL_APPROVAL_OPS_H */
