// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * What both createRuntime paths of the OCI hook use (ocihook.c: the flat
 * policy directory; ocihook_ns.c: containers of a Kubernetes namespace): the
 * hook's messages, the container's cgroup and network namespace, and the
 * attach request sent to egressd while it may be restarting.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "ctl.h"
#include "ocihook_util.h"

/* The hook's messages name the stage and the container. */
void oci_hook_err(const char *stage, const char *id, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "egressctl oci-hook %s: container %s: ", stage, id ?: "?");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* The cgroup v2 path (below the mount) of pid, from the "0::" line of
 * /proc/PID/cgroup. 0 or -errno. */
static int pid_cgroup(long pid, char *buf, size_t len)
{
	char path[64], line[PATH_MAX + 8];
	FILE *f;
	int err = -ENOENT;

	snprintf(path, sizeof(path), "/proc/%ld/cgroup", pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "0::", 3) != 0)
			continue;
		line[strcspn(line, "\n")] = '\0';
		err = snprintf(buf, len, "%s", line + 3) >= (int)len ? -ENAMETOOLONG : 0;
		break;
	}
	fclose(f);
	return err;
}

/*
 * linux.cgroupsPath of config.json in the cgroup v2 tree. Two spellings:
 * a path ("/libpod_parent/libpod-ID", cgroupfs driver) or systemd's
 * "SLICE:PREFIX:NAME" ("machine.slice:libpod:ID" is
 * /machine.slice/libpod-ID.scope; a slice "a-b.slice" nests in a.slice).
 */
static int expand_cgroups_path(const char *cp, char *buf, size_t len)
{
	const char *c1 = strchr(cp, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
	char slice[256], prefix[256], name[256];
	size_t off = 0;
	int n;

	if (len)
		buf[0] = '\0';
	if (cp[0] == '/' || !c1) {
		n = snprintf(buf, len, "%s%s", cp[0] == '/' ? "" : "/", cp);
		return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
	}
	if (!c2 || strchr(c2 + 1, ':') || (size_t)(c1 - cp) >= sizeof(slice) ||
	    (size_t)(c2 - c1 - 1) >= sizeof(prefix) || strlen(c2 + 1) >= sizeof(name))
		return -EINVAL;
	snprintf(slice, sizeof(slice), "%.*s", (int)(c1 - cp), cp);
	snprintf(prefix, sizeof(prefix), "%.*s", (int)(c2 - c1 - 1), c1 + 1);
	snprintf(name, sizeof(name), "%s", c2 + 1);
	if (!slice[0])
		snprintf(slice, sizeof(slice), "system.slice");
	if (strcmp(slice, "-.slice") != 0) {
		/* "a-b-c.slice" is /a.slice/a-b.slice/a-b-c.slice. */
		size_t sl = strlen(slice);

		if (sl < 7 || strcmp(slice + sl - 6, ".slice") != 0)
			return -EINVAL;
		for (size_t i = 0; i <= sl - 6; i++) {
			if (i < sl - 6 && slice[i] != '-')
				continue;
			n = snprintf(buf + off, len - off, "/%.*s.slice", (int)i, slice);
			if (n < 0 || (size_t)n >= len - off)
				return -ENAMETOOLONG;
			off += (size_t)n;
		}
	}
	if (strlen(name) > 6 && strcmp(name + strlen(name) - 6, ".slice") == 0)
		n = snprintf(buf + off, len - off, "/%s", name);
	else
		n = snprintf(buf + off, len - off, "/%s%s%s.scope", prefix, prefix[0] ? "-" : "",
			     name);
	return n < 0 || (size_t)n >= len - off ? -ENAMETOOLONG : 0;
}

/* linux.cgroupsPath from BUNDLE/config.json, expanded. 0 or -errno. */
static int bundle_cgroup(const char *bundle, char *buf, size_t len, char *why, size_t whylen)
{
	char path[PATH_MAX];
	json_error_t jerr;
	json_t *cfg;
	const char *cp;
	int err;

	if (!bundle || bundle[0] != '/') {
		snprintf(why, whylen, "the state has no absolute bundle path");
		return -EINVAL;
	}
	snprintf(path, sizeof(path), "%s/config.json", bundle);
	cfg = json_load_file(path, 0, &jerr);
	if (!cfg) {
		snprintf(why, whylen, "%s: %s", path, jerr.text);
		return -EINVAL;
	}
	cp = json_string_value(json_object_get(json_object_get(cfg, "linux"), "cgroupsPath"));
	if (!cp || !cp[0]) {
		snprintf(why, whylen, "%s has no linux.cgroupsPath", path);
		json_decref(cfg);
		return -ENOENT;
	}
	err = expand_cgroups_path(cp, buf, len);
	if (err)
		snprintf(why, whylen, "%s: linux.cgroupsPath '%s': %s", path, cp,
			 err == -EINVAL ? "not a path nor SLICE:PREFIX:NAME" : strerror(-err));
	json_decref(cfg);
	return err;
}

/*
 * The container's cgroup as an absolute path under the cgroup2 mount: the
 * init process's own cgroup when pid is alive (createRuntime), else the
 * bundle's cgroupsPath (poststop: the process is gone).
 */
int oci_container_cgroup(long pid, const char *bundle, char *out, size_t len, char *why,
			    size_t whylen)
{
	char mnt[PATH_MAX], rel[PATH_MAX];
	int err = -ESRCH, n;

	if (egr_cgroup2_mount(mnt, sizeof(mnt))) {
		snprintf(why, whylen, "no cgroup2 mount on this host");
		return -ENOENT;
	}
	if (pid > 0)
		err = pid_cgroup(pid, rel, sizeof(rel));
	if (err) {
		err = bundle_cgroup(bundle, rel, sizeof(rel), why, whylen);
		if (err)
			return err;
	}
	if (strcmp(rel, "/") == 0 || rel[0] != '/' || strstr(rel, "/../") ||
	    (strlen(rel) >= 3 && strcmp(rel + strlen(rel) - 3, "/..") == 0)) {
		snprintf(why, whylen, "the container's cgroup '%s' is not a cgroup of its own",
			 rel);
		return -EINVAL;
	}
	n = snprintf(out, len, "%s%s", mnt, rel);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/*
 * The container's network namespace as a path egressd can open (its DNS
 * proxy listeners must be inside it): "" when it shares egressctl's, else
 * the bundle's linux.namespaces path (a runtime-made /run/netns/NAME) when
 * it is the very namespace the init process is in. 0, or -ENOENT when the
 * container has a namespace of its own that config.json names no path for:
 * egressd, without CAP_SYS_PTRACE once hardened, cannot open
 * /proc/PID/ns/net, and that path would name another process after a pid
 * reuse anyway.
 */
int oci_container_netns(long pid, const char *bundle, char *buf, size_t len)
{
	char path[PATH_MAX];
	struct stat ours, theirs;
	json_t *cfg, *ns;
	size_t i;

	buf[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%ld/ns/net", pid);
	if (pid <= 0 || stat("/proc/self/ns/net", &ours) || stat(path, &theirs))
		return 0; /* gone or unreadable: the attach finds out */
	if (ours.st_ino == theirs.st_ino && ours.st_dev == theirs.st_dev)
		return 0;
	if (!bundle || bundle[0] != '/')
		return -ENOENT;
	snprintf(path, sizeof(path), "%s/config.json", bundle);
	cfg = json_load_file(path, 0, NULL);
	json_array_foreach(json_object_get(json_object_get(cfg, "linux"), "namespaces"), i, ns) {
		const char *type = json_string_value(json_object_get(ns, "type"));
		const char *p = json_string_value(json_object_get(ns, "path"));
		struct stat st;

		if (type && strcmp(type, "network") == 0 && p && p[0] == '/' && stat(p, &st) == 0 &&
		    st.st_ino == theirs.st_ino && st.st_dev == theirs.st_dev && strlen(p) < len)
			snprintf(buf, len, "%s", p);
	}
	json_decref(cfg);
	return buf[0] ? 0 : -ENOENT;
}

uint64_t oci_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * egressd restarting: its socket is gone (the old one removed it at exit,
 * the new one binds it once it has adopted the sandboxes) or nobody
 * accepts on it (a crash). Wait for a connect to succeed until deadline
 * (monotonic ms), polling every 50 ms. 0, or the last -errno: a
 * permission error at once, it will not change.
 */
int oci_wait_for_egressd(const struct ctl *c, uint64_t deadline)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int err;

	if (strlen(c->socket) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, c->socket, strlen(c->socket));
	for (;;) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (fd < 0)
			return -errno;
		err = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
		close(fd);
		if (!err || (err != -ENOENT && err != -ECONNREFUSED && err != -EAGAIN))
			return err;
		if (oci_mono_ms() >= deadline)
			return err;
		usleep(50 * 1000);
	}
}

int oci_send_attach(struct ctl *c, const struct hook_opts *o, const char *id, json_t *req,
		    const char *netns, uint64_t deadline, json_t **resp)
{
	char code[32];
	int rc, err;

	if (req && netns && netns[0] && json_object_set_new(req, "netns", json_string(netns))) {
		json_decref(req);
		req = NULL;
	}
	if (!req) {
		oci_hook_err("createRuntime", id, "out of memory");
		return CTL_EXIT_ERROR;
	}
	/* egressd restarting: wait for it, bounded. A missing socket said in
	 * our own words first: Podman cuts a hook's stderr after a "No such
	 * file or directory". */
	err = oci_wait_for_egressd(c, deadline);
	if (err) {
		oci_hook_err("createRuntime", id, "egressd is not reachable at %s (%s%s); not "
			 "starting it unconfined", c->socket, strerror(-err),
			 o->wait_s ? ", waited --wait seconds" : "");
		json_decref(req);
		return CTL_EXIT_UNREACHABLE;
	}
	/* egressd gone between the wait and the request (no answer, no
	 * code): the attach is idempotent, ask again while the wait lasts. */
	for (;;) {
		code[0] = '\0';
		rc = ctl_request(c, req, resp, code, sizeof(code));
		if (rc == CTL_EXIT_OK || code[0] || oci_mono_ms() >= deadline ||
		    oci_wait_for_egressd(c, deadline))
			break;
	}
	json_decref(req);
	return rc;
}
