// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Adopting the pinned links an earlier egressd made (links.h): whose links
 * they are, and moving each to this egressd's program of its name. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "kernel_priv.h"
#include "egressd.skel.h"
#include "log.h"

/* The id of the cgroup storage map program fd uses, 0 when it uses none. */
static int prog_storage_id(int prog_fd, __u32 *id)
{
	struct bpf_prog_info info;
	__u32 ids[64], len = sizeof(info);

	memset(&info, 0, sizeof(info));
	info.nr_map_ids = 64;
	info.map_ids = (__u64)(unsigned long)ids;
	if (bpf_obj_get_info_by_fd(prog_fd, &info, &len) < 0)
		return -errno;
	*id = 0;
	for (__u32 k = 0; k < info.nr_map_ids && k < 64; k++) {
		struct bpf_map_info mi;
		__u32 mlen = sizeof(mi);
		int fd = bpf_map_get_fd_by_id(ids[k]);

		if (fd < 0)
			continue;
		memset(&mi, 0, sizeof(mi));
		if (bpf_obj_get_info_by_fd(fd, &mi, &mlen) == 0 &&
		    (mi.type == BPF_MAP_TYPE_CGROUP_STORAGE ||
		     mi.type == BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE))
			*id = mi.id;
		close(fd);
	}
	return 0;
}

int egr_kern_same_storage(int old_prog_fd, int new_prog_fd)
{
	__u32 old_id, new_id;
	int err;

	if ((err = prog_storage_id(old_prog_fd, &old_id)) ||
	    (err = prog_storage_id(new_prog_fd, &new_id)))
		return err;
	return old_id == new_id ? 0 : -ESTALE;
}

/* Is fd the cgroup link of program p (link type, attach type, program
 * name)? A hostile tool can rename one pin over another while egressd is
 * down: the name alone proves nothing. *cg: the link's cgroup id. */
static bool link_is_prog(struct egr_bpf *b, size_t p, int fd, __u64 *cg)
{
	struct bpf_program *prog = bpf_object__find_program_by_name(b->skel->obj,
								     b->prog_names[p]);
	struct bpf_link_info info;
	struct bpf_prog_info pinfo;
	__u32 len = sizeof(info), plen = sizeof(pinfo);
	bool ok;
	int pfd;

	memset(&info, 0, sizeof(info));
	memset(&pinfo, 0, sizeof(pinfo));
	if (!prog || bpf_obj_get_info_by_fd(fd, &info, &len) < 0 ||
	    info.type != BPF_LINK_TYPE_CGROUP ||
	    info.cgroup.attach_type != bpf_program__expected_attach_type(prog))
		return false;
	pfd = bpf_prog_get_fd_by_id(info.prog_id);
	if (pfd < 0)
		return false;
	/* The kernel keeps BPF_OBJ_NAME_LEN - 1 characters of the name. */
	ok = bpf_obj_get_info_by_fd(pfd, &pinfo, &plen) == 0 &&
	     strncmp(pinfo.name, b->prog_names[p], sizeof(pinfo.name) - 1) == 0;
	close(pfd);
	*cg = info.cgroup.cgroup_id;
	return ok;
}

/*
 * The adopted link runs the program an earlier egressd of this ABI version
 * loaded: its code, its rodata knobs (--events-allow-rate), its fixes or
 * bugs. Move it to this egressd's program of the same name, in place
 * (BPF_F_REPLACE: a link that changed under us fails instead), as an
 * upgrade does (migrate.c step 4): the pinned maps, the cgroup storage
 * among them, are the same ones, so nothing of the attachment changes but
 * the code. On failure the old program keeps enforcing, and we say so.
 * 1 moved, 0 not moved, -ESTALE the new program has another cgroup storage.
 */
static int refresh_prog(struct egr_bpf *b, uint32_t sandbox_id, size_t p, int link_fd)
{
	struct bpf_program *prog = bpf_object__find_program_by_name(b->skel->obj,
								     b->prog_names[p]);
	struct bpf_link_info info;
	struct bpf_prog_info pinfo;
	__u32 len = sizeof(info), plen = sizeof(pinfo);
	int new_fd = prog ? bpf_program__fd(prog) : -1, old_fd, err;
	bool moved;

	memset(&info, 0, sizeof(info));
	memset(&pinfo, 0, sizeof(pinfo));
	if (new_fd < 0 || bpf_obj_get_info_by_fd(link_fd, &info, &len) < 0 ||
	    bpf_obj_get_info_by_fd(new_fd, &pinfo, &plen) < 0) {
		log_warn("sandbox %u: link %s: cannot tell its program: %m; it keeps the one "
			 "it has", sandbox_id, b->prog_names[p]);
		return 0;
	}
	/* Up to date, or defunct (its cgroup released: nothing runs it, the
	 * reclaim drops it). */
	if (info.prog_id == pinfo.id || info.cgroup.cgroup_id == 0)
		return 0;
	old_fd = bpf_prog_get_fd_by_id(info.prog_id);
	if (old_fd < 0) {
		log_warn("sandbox %u: link %s: program %u: %m; it keeps it", sandbox_id,
			 b->prog_names[p], info.prog_id);
		return 0;
	}
	/* The attachment's storage stays with the link: a program of another
	 * egr_cg_storage would read a storage that has no entry for it (some
	 * kernels refuse the update, others accept it), so never offer one. */
	if ((err = egr_kern_same_storage(old_fd, new_fd))) {
		log_error("sandbox %u: link %s: its program %u uses another cgroup storage than "
			  "this egressd's %s/egr_cg_storage (a replaced map pin?): not moved; "
			  "the earlier program keeps enforcing", sandbox_id, b->prog_names[p],
			  info.prog_id, b->maps);
		close(old_fd);
		return err;
	}
	LIBBPF_OPTS(bpf_link_update_opts, opts, .flags = BPF_F_REPLACE, .old_prog_fd = old_fd);
	moved = bpf_link_update(link_fd, new_fd, &opts) == 0;
	if (!moved && errno != ENOLINK) /* ENOLINK: released meanwhile */
		log_error("sandbox %u: link %s: moving it to this egressd's program failed: %m; "
			  "the earlier egressd's program %u keeps enforcing", sandbox_id,
			  b->prog_names[p], info.prog_id);
	close(old_fd);
	return moved ? 1 : 0;
}

/* Programs added after released egressds had attached sandboxes: the bind
 * guard (bpf/lib/listen.bpf.h). A sandbox an earlier egressd attached has
 * no link of theirs; it is whole without them (they only refuse binds to
 * egressd's listener ports) and adoption attaches them (adopt.c). */
bool egr_kern_prog_is_late(const char *name)
{
	return strcmp(name, "egr_bind4") == 0 || strcmp(name, "egr_bind6") == 0 ||
	       strcmp(name, "egr_post_bind4") == 0 || strcmp(name, "egr_post_bind6") == 0;
}

int egr_bpf_adopt_links(struct egr_bpf *b, uint32_t sandbox_id)
{
	size_t moved = 0;
	bool split = false, stale = false;
	__u64 first_cg = 0;
	char dir[PATH_MAX], path[PATH_MAX];
	struct egr_link_set *ls;
	int err = 0;

	if ((err = egr_kern_links_dir(b, sandbox_id, dir, sizeof(dir))))
		return err;
	ls = egr_kern_link_set(b, sandbox_id, true);
	if (!ls)
		return -ENOMEM;
	for (size_t p = 0; p < b->nprogs; p++) {
		int fd;

		if (ls->link_id[p])
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, b->prog_names[p]);
		fd = bpf_obj_get(path);
		if (fd < 0) {
			if (errno != ENOENT)
				log_warn("open pinned link %s: %m", path);
			else if (egr_kern_prog_is_late(b->prog_names[p]))
				continue; /* attached by the adoption */
			err = -ENOENT;
			continue;
		}
		__u64 cg = 0;

		if (!link_is_prog(b, p, fd, &cg)) {
			/* Not this program's link: as if its pin were removed (the
			 * caller attaches the program again and holds the sandbox). */
			log_error("pinned link %s is not the link of program %s; removing the pin",
				  path, b->prog_names[p]);
			close(fd);
			if (unlink(path) < 0 && errno != ENOENT)
				log_warn("unlink %s: %m", path);
			err = -ENOENT;
			continue;
		}
		if (first_cg && cg && cg != first_cg)
			split = true;
		if (!first_cg)
			first_cg = cg;
		int herr = egr_kern_hold_link(b, ls, p, fd);

		if (herr) {
			/* Still attached through its pin, but a removed pin would
			 * detach it: not adopted, so the caller holds the sandbox. */
			log_error("hold link %s: %s", path, strerror(-herr));
			close(fd);
			err = herr;
			continue;
		}
		egr_kern_note_pin(ls, p, path);
		int moved_one = refresh_prog(b, sandbox_id, p, fd);

		if (moved_one > 0)
			moved++;
		else if (moved_one < 0)
			stale = true;
		close(fd);
	}
	ls->wd = egr_kern_watch(b, dir);
	b->refreshed_links += moved;
	if (moved)
		log_debug("sandbox %u: %zu adopted link(s) moved to this egressd's programs",
			  sandbox_id, moved);
	if (split) {
		log_error("links of sandbox %u are attached to different cgroups", sandbox_id);
		return -EXDEV;
	}
	return stale ? -ESTALE : err;
}

