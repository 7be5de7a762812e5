// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The sockets a sandbox made (sockcount.h). */
#include <errno.h>
#include <stdint.h>

#include <bpf/bpf.h>

#include "kernel_priv.h"
#include "sockcount.h"

int egr_bpf_sock_count(struct egr_bpf *b, uint32_t sandbox_id, uint64_t *n)
{
	*n = 0;
	if (b->fd_sock_counts < 0)
		return -EBADF;
	if (bpf_map_lookup_elem(b->fd_sock_counts, &sandbox_id, n) == 0)
		return 0;
	/* No entry: egr_sock_create never let a socket through for it. */
	return errno == ENOENT ? 0 : -errno;
}
