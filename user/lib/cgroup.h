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

/* The path (under the cgroup2 mount) of the cgroup with this id, by file
 * handle (needs CAP_DAC_READ_SEARCH). 0, -ESTALE (no such cgroup) or
 * -errno. */
int egr_cgroup_path_by_id(uint64_t id, char *buf, size_t len);

/* Make the calling process's cgroup namespace the host's (the initial one,
 * whose nsfs inode is fixed): when ours differs, join that of pid 1, or of
 * the first process found in the initial one (needs CAP_SYS_ADMIN and, in
 * a container, hostPID). Then /proc/<pid>/cgroup paths read by egressd are
 * paths from the root of the hierarchy. 0 (was in it), 1 (joined), or
 * -errno with why[] saying what is wrong. */
int egr_cgroup_join_host_ns(char *why, size_t len);

/* Ids of path and every cgroup below it (a sandbox may create children).
 * Caller frees *ids. 0 or -errno. */
int egr_cgroup_subtree_ids(const char *path, uint64_t **ids, size_t *n);

#endif /* EGR_CGROUP_H */
