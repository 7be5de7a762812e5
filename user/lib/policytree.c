// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ocimeta.h"
#include "policytree.h"

static int openat2_beneath(int dirfd, const char *path, unsigned long flags)
{
	struct open_how how = {
		.flags = flags | O_CLOEXEC,
		/* Links inside the directory are fine (the kubelet's
		 * name.json -> ..data/name.json -> ..TIMESTAMP/name.json);
		 * nothing resolves above it, no /proc magic links. */
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));

	return fd < 0 ? -errno : (int)fd;
}

static bool root_tight(const struct stat *st)
{
	return st->st_uid == 0 && !(st->st_mode & (S_IWGRP | S_IWOTH));
}

int egr_ptree_open(const char *dir, const char *ns, const char *name, const char **rule)
{
	char file[EGR_NAME_MAX + 8];
	struct stat st;
	int dfd, nfd, fd, err;

	if (!egr_k8s_namespace_ok(ns)) {
		*rule = "the namespace is not a Kubernetes namespace name";
		return -EINVAL;
	}
	if (egr_policy_name_check(name, rule))
		return -EINVAL;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		err = -errno;
		*rule = "the policy directory cannot be opened";
		return err == -ENOENT ? -ENOENT : err;
	}
	if (fstat(dfd, &st) || !root_tight(&st)) {
		close(dfd);
		*rule = "the policy directory is not a root-owned directory unwritable by group "
			"and others";
		return -EPERM;
	}
	/* The namespace's directory: a plain name, so RESOLVE_BENEATH keeps
	 * a symlink there (to another namespace's directory is fine: it is
	 * still the admin's tree) inside the policy directory. */
	nfd = openat2_beneath(dfd, ns, O_RDONLY | O_DIRECTORY);
	close(dfd);
	if (nfd < 0) {
		*rule = nfd == -EXDEV ? "the namespace's directory resolves outside the policy "
					"directory"
				      : "the namespace has no policy directory";
		return nfd == -ENOENT ? -ENOENT : nfd == -EXDEV ? -EXDEV : nfd;
	}
	if (fstat(nfd, &st) || !root_tight(&st)) {
		close(nfd);
		*rule = "the namespace's directory is not root-owned, or group or others may "
			"write it";
		return -EPERM;
	}
	snprintf(file, sizeof(file), "%s.json", name);
	fd = openat2_beneath(nfd, file, O_RDONLY | O_NONBLOCK);
	close(nfd);
	if (fd < 0) {
		*rule = fd == -EXDEV ? "the policy file resolves outside its namespace's directory"
				     : "no such policy in the namespace";
		return fd;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		*rule = "the policy is not a regular file";
		return -EPERM;
	}
	if (!root_tight(&st)) {
		close(fd);
		*rule = "the policy file is not owned by root, or group or others may write it";
		return -EPERM;
	}
	return fd;
}

int egr_ptree_read_fd(int fd, json_t **doc, char *why, size_t whylen)
{
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	json_error_t jerr;

	*doc = NULL;
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	for (;;) {
		ssize_t n;

		if (len == cap) {
			char *nb;

			if (cap >= EGR_PTREE_MAX_FILE) {
				free(buf);
				close(fd);
				snprintf(why, whylen, "over %u bytes", EGR_PTREE_MAX_FILE);
				return -EFBIG;
			}
			nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				close(fd);
				return -ENOMEM;
			}
			buf = nb;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int err = -errno;

			free(buf);
			close(fd);
			snprintf(why, whylen, "read: %s", strerror(-err));
			return err;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	*doc = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	free(buf);
	if (!*doc || !json_is_object(*doc)) {
		if (*doc)
			snprintf(why, whylen, "not a JSON object");
		else
			snprintf(why, whylen, "not JSON: %s (line %d)", jerr.text, jerr.line);
		json_decref(*doc);
		*doc = NULL;
		return -EBADMSG;
	}
	return 0;
}

int egr_ptree_load(const char *dir, const char *ns, const char *name, json_t **doc,
		   const char **rule, char *why, size_t whylen)
{
	int fd = egr_ptree_open(dir, ns, name, rule);

	*doc = NULL;
	if (why && whylen)
		why[0] = '\0';
	if (fd < 0)
		return fd;
	return egr_ptree_read_fd(fd, doc, why, whylen);
}
