/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * egressd's own listeners, as the kernel knows them (bpf/lib/listen.bpf.h,
 * include/egressd.h "egressd's own listeners"; docs/security.md "Redirect
 * targets nobody else can take"). What this module offers whoever owns a
 * listener socket (the DNS proxy, the inspecting proxy; a listener handed
 * over from an earlier egressd, too):
 *
 * - egr_bpf_listen_claim(fd, kind, sandbox): the socket's (network
 *   namespace, port, protocol, family) into egr_listen_ports, so that no
 *   sandbox can bind that port, also while egressd is down; and the mark
 *   (egr_listen_sk socket storage) on the socket itself, without which the
 *   kernel never redirects a sandbox's DNS or inspected TCP to it. Claim
 *   after bind() (and listen()), before the port is given to the kernel's
 *   sandbox entry; claiming a socket again (handed over from an earlier
 *   egressd) is fine and renews it for this start.
 * - egr_bpf_listen_release(fd): before closing a listener for good: its
 *   port is free for the sandboxes again (the mark goes with the socket).
 *   Not on exit: the reservations stay for the next egressd.
 * - egr_bpf_listen_sweep(): once after adoption, drop the reservations no
 *   listener of this start claimed (ports an earlier egressd held that
 *   this one did not reopen: taken meanwhile, or sandboxes gone).
 *
 * A NULL b, or one without these two maps (a proxy run without the kernel
 * side: unit and integration tests), makes each a no-op that succeeds.
 */
#ifndef EGR_KERNEL_LISTEN_H
#define EGR_KERNEL_LISTEN_H

#include <stddef.h>
#include <stdint.h>

struct egr_bpf;

/* kind: EGR_LISTEN_DNS (sandbox_id 0: shared by a network namespace) or
 * EGR_LISTEN_INSPECT (the sandbox it serves). 0 or -errno; on error the
 * caller closes the socket (unmarked, the kernel would refuse to redirect
 * to it anyway: fail closed). */
int egr_bpf_listen_claim(struct egr_bpf *b, int fd, int kind, uint32_t sandbox_id);
/* Drop fd's reservation (call before close()). Never fails: a reservation
 * left behind only refuses binds to a port nobody uses, until the sweep of
 * the next start. */
void egr_bpf_listen_release(struct egr_bpf *b, int fd);
/* egressd is exiting: from now on release does nothing, so that closing
 * the proxies keeps every reservation and the marks of the sockets the
 * listener holder keeps (hold/lhold.h) for the next egressd. */
void egr_bpf_listen_freeze(struct egr_bpf *b);
/* Drop every reservation not claimed since this egressd started; *dropped
 * (may be NULL) counts them. 0 or -errno. */
int egr_bpf_listen_sweep(struct egr_bpf *b, size_t *dropped);
/* How many reservations egr_listen_ports holds (status, tests). */
int egr_bpf_listen_count(struct egr_bpf *b, size_t *n);

#endif /* EGR_KERNEL_LISTEN_H */
