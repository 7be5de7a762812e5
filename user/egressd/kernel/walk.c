// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* One walker for every map (kernel_priv.h egr_kmap_walk): batched where the kernel
 * can, get_next_key where it cannot. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "kernel_priv.h"

/* Keys per batch: a hash bucket with more entries says ENOSPC and the
 * buffers grow (a bucket holds a handful; the cap is a bound, not a size). */
#define WALK_BATCH 256
#define WALK_BATCH_MAX (1u << 16)

static bool batch_unsupported(int err)
{
	/* LPM tries, ring buffers and kernels before 5.6 have no batch op;
	 * 524 is the kernel's ENOTSUPP, which libc does not name. */
	return err == -EINVAL || err == -ENOTSUP || err == -EOPNOTSUPP || err == -524;
}

static int walk_next_key(int fd, const struct bpf_map_info *info, size_t vsize,
			 egr_kmap_walk_fn fn, void *ctx)
{
	void *cur = malloc(info->key_size), *prev = malloc(info->key_size), *val = malloc(vsize);
	bool first = true;
	int ret = -EAGAIN; /* the bound ran out before the end: not complete */

	if (!cur || !prev || !val) {
		ret = -ENOMEM;
		goto out;
	}
	/* Bounded: an entry deleted under the walk restarts it at worst
	 * (get_next_key of a missing key is the first key). */
	for (uint64_t i = 0; i <= (uint64_t)info->max_entries * 2 + 1; i++) {
		if (bpf_map_get_next_key(fd, first ? NULL : prev, cur) < 0) {
			ret = errno == ENOENT ? 0 : -errno;
			break;
		}
		first = false;
		memcpy(prev, cur, info->key_size);
		if (bpf_map_lookup_elem(fd, cur, val) < 0) {
			if (errno == ENOENT)
				continue; /* deleted meanwhile */
			ret = -errno;
			break;
		}
		if ((ret = fn(ctx, cur, val)))
			break;
		ret = -EAGAIN;
	}
out:
	free(cur);
	free(prev);
	free(val);
	return ret;
}

/* 1: the map has no batch op (nothing was called back), else 0, fn's value
 * or -errno. */
static int walk_batch(int fd, const struct bpf_map_info *info, size_t vsize,
		      egr_kmap_walk_fn fn, void *ctx)
{
	/* The batch token is the kernel's (a bucket or an index): room for a
	 * key or a u64, whichever is larger. */
	size_t tsize = info->key_size > 8 ? info->key_size : 8;
	uint8_t *in = calloc(1, tsize), *outb = calloc(1, tsize), *keys = NULL, *vals = NULL;
	uint32_t cap = WALK_BATCH;
	bool started = false, done = false;
	int ret = 0;

	if (!in || !outb) {
		ret = -ENOMEM;
		goto out;
	}
	/* Bounded: entries the programs add and delete under the walk can
	 * make it see more than max_entries; twice that is not a walk. */
	for (uint64_t seen = 0; !done && seen <= (uint64_t)info->max_entries * 2 + WALK_BATCH;) {
		uint32_t count = cap;
		int err;

		if (!keys) {
			keys = malloc((size_t)cap * info->key_size);
			vals = malloc((size_t)cap * vsize);
			if (!keys || !vals) {
				ret = -ENOMEM;
				break;
			}
		}
		err = bpf_map_lookup_batch(fd, started ? in : NULL, outb, keys, vals, &count, NULL);
		if (err < 0)
			err = -errno;
		if (err == -ENOENT) {
			done = true; /* the last (maybe empty) batch */
		} else if (err == -ENOSPC && cap < WALK_BATCH_MAX && !count) {
			cap *= 2; /* one bucket is larger than the buffers */
			free(keys);
			free(vals);
			keys = vals = NULL;
			continue;
		} else if (err) {
			ret = !started && batch_unsupported(err) ? 1 : err;
			break;
		}
		started = true;
		for (uint32_t i = 0; i < count && !ret; i++)
			ret = fn(ctx, keys + (size_t)i * info->key_size, vals + (size_t)i * vsize);
		if (ret)
			break;
		seen += count;
		memcpy(in, outb, tsize);
	}
	if (!ret && !done)
		ret = -EAGAIN; /* the bound ran out: a caller must not take it as complete */
out:
	free(in);
	free(outb);
	free(keys);
	free(vals);
	return ret;
}

static bool percpu(enum bpf_map_type t)
{
	return t == BPF_MAP_TYPE_PERCPU_HASH || t == BPF_MAP_TYPE_PERCPU_ARRAY ||
	       t == BPF_MAP_TYPE_LRU_PERCPU_HASH || t == BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE;
}

int egr_kmap_walk(int fd, unsigned flags, egr_kmap_walk_fn fn, void *ctx)
{
	struct bpf_map_info info = { 0 };
	__u32 len = sizeof(info);
	size_t vsize;
	int ret;

	if (fd < 0 || bpf_obj_get_info_by_fd(fd, &info, &len) < 0)
		return fd < 0 ? -EBADF : -errno;
	if (!info.key_size)
		return -EINVAL;
	vsize = info.value_size;
	if (percpu(info.type)) {
		int ncpu = libbpf_num_possible_cpus();

		if (ncpu <= 0)
			return ncpu ? ncpu : -EINVAL;
		vsize = ((vsize + 7) & ~(size_t)7) * (size_t)ncpu;
	}
	if (!vsize)
		vsize = 1;
	if (!(flags & EGR_WALK_NO_BATCH)) {
		ret = walk_batch(fd, &info, vsize, fn, ctx);
		if (ret != 1)
			return ret;
	}
	return walk_next_key(fd, &info, vsize, fn, ctx);
}

