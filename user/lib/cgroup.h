/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* cgroup v2 helpers shared by egressd and egressctl. */
#ifndef EGR_CGROUP_H
#define EGR_CGROUP_H

#include <stddef.h>
#include <stdint.h>

/* Mount point of the cgroup v2 hierarchy, from /proc/self/mounts.
 * 0, -ENOENT (no cgroup2 mounted) or -ENAMETOOLONG. */
int egr_cgroup2_mount(char *buf, size_t len);

/* Is path a directory on a cgroup2 filesystem? 0, or -ENOTDIR / -EINVAL
 * (not cgroup2) / -errno of stat/statfs. */
int egr_cgroup_check(const char *path);

/* The cgroup id the kernel uses as cgroup storage key and in
 * bpf_get_current_cgroup_id() (the kernfs inode number). 0 or -errno. */
int egr_cgroup_id(const char *path, uint64_t *id);

/* Ids of path and every cgroup below it (a sandbox may create children).
 * Caller frees *ids. 0 or -errno. */
int egr_cgroup_subtree_ids(const char *path, uint64_t **ids, size_t *n);

#endif /* EGR_CGROUP_H */
