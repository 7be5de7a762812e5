/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Is egressd where it can serve the host's sandboxes? */
#ifndef EGR_HOSTNS_H
#define EGR_HOSTNS_H

/*
 * Compare egressd's network namespace with the one of pid 1 (the host's init
 * when egressd sees the host's pids: systemd, or a DaemonSet with hostPID).
 * In another namespace (a pod without hostNetwork) the DNS proxy listens where
 * no host-netns sandbox reaches it (its queries fail: connection refused)
 * and /metrics is unreachable from the node: log an error saying so.
 * Returns 0 (same namespace), -EXDEV (another one), or -errno when it cannot
 * tell (logged as a warning). Never fatal: the caller goes on.
 */
int egr_hostns_check(void);

#endif /* EGR_HOSTNS_H */
