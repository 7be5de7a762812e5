// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * A gVisor (runsc) container under the OCI hook (docs/containers.md
 * "gVisor (runsc)"). gVisor runs the tool on its own network stack and writes its
 * frames through a packet socket on the container's veth: no cgroup hook
 * sees them, and a cgroup sandbox would leave it open. So its sandbox is a
 * device sandbox on the host side of that veth (egressctl attach --netdev).
 *
 * What the kernel says decides, not the bundle (the caller's): the state's
 * pid is runsc's sandbox process (its /proc/PID/exe is the runsc binary, its
 * argv[0] runsc-sandbox), and its /proc/PID/ns/net is the namespace whose
 * veth is looked up (vethpeer.h). A bundle that names another namespace is
 * refused, as are zero or several veths and a peer egressd cannot be told.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"
#include "ocihook_gvisor.h"
#include "ocihook_util.h"
#include "vethpeer.h"

int oci_is_gvisor(long pid)
{
	char path[64], exe[PATH_MAX], argv0[64] = "";
	const char *base;
	ssize_t n;
	int fd, err;

	snprintf(path, sizeof(path), "/proc/%ld/exe", pid);
	n = readlink(path, exe, sizeof(exe) - 1);
	err = n < 0 ? -errno : 0;
	if (n >= 0) {
		exe[n] = '\0';
		base = strrchr(exe, '/');
		base = base ? base + 1 : exe;
		/* "runsc", or "runsc (deleted)" after an upgrade of the package */
		if (strncmp(base, "runsc", 5) == 0 && (!base[5] || base[5] == ' '))
			return 1;
	}
	snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return err ?: -errno;
	n = read(fd, argv0, sizeof(argv0) - 1);
	close(fd);
	if (n < 0)
		return err ?: -errno;
	argv0[n] = '\0';
	if (strcmp(argv0, "runsc-sandbox") == 0)
		return 1;
	return err;
}

/* The path of the network namespace the bundle's config.json names, ""
 * when none. 0, or -EBADMSG when it cannot be read. */
static int bundle_netns_path(const char *bundle, char *buf, size_t len)
{
	char path[PATH_MAX];
	json_t *cfg, *ns;
	size_t i;

	buf[0] = '\0';
	if (!bundle || bundle[0] != '/')
		return 0;
	snprintf(path, sizeof(path), "%s/config.json", bundle);
	cfg = json_load_file(path, 0, NULL);
	if (!cfg)
		return access(path, F_OK) && errno == ENOENT ? 0 : -EBADMSG;
	json_array_foreach(json_object_get(json_object_get(cfg, "linux"), "namespaces"), i, ns) {
		const char *type = json_string_value(json_object_get(ns, "type"));
		const char *p = json_string_value(json_object_get(ns, "path"));

		if (type && strcmp(type, "network") == 0 && p && strlen(p) < len)
			snprintf(buf, len, "%s", p);
	}
	json_decref(cfg);
	return 0;
}

static bool same_ns(int fd, const char *path)
{
	struct stat a, b;

	return !fstat(fd, &a) && !stat(path, &b) && a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

/* The host side of the container's veth: 0, or an exit status (said). */
static int find_device(const char *stage, const char *id, long pid, const char *bundle,
		       struct egr_veth_peer *peer)
{
	char path[64], bpath[PATH_MAX], why[PATH_MAX + 256] = "";
	int nsfd, err;

	snprintf(path, sizeof(path), "/proc/%ld/ns/net", pid);
	nsfd = open(path, O_RDONLY | O_CLOEXEC);
	if (nsfd < 0) {
		oci_hook_err(stage, id, "gVisor container: cannot open the network namespace of "
			     "its sandbox process %ld: %s; not starting it", pid, strerror(errno));
		return CTL_EXIT_ERROR;
	}
	if (same_ns(nsfd, "/proc/self/ns/net")) {
		oci_hook_err(stage, id, "gVisor container in the hook's own network namespace "
			     "(runsc --network=host?): it has no veth of its own to confine; not "
			     "starting it");
		close(nsfd);
		return CTL_EXIT_USAGE;
	}
	err = bundle_netns_path(bundle, bpath, sizeof(bpath));
	if (err || (bpath[0] && !same_ns(nsfd, bpath))) {
		oci_hook_err(stage, id, "gVisor container: %s%s%s; not starting it",
			     err ? "the bundle's config.json is not readable" :
				   "the bundle names network namespace ",
			     err ? "" : bpath, err ? "" : " but its sandbox process is in another");
		close(nsfd);
		return CTL_EXIT_USAGE;
	}
	err = egr_veth_peer_find_named(nsfd, peer, why, sizeof(why));
	close(nsfd);
	if (err) {
		oci_hook_err(stage, id, "gVisor container: %s; not starting it", why);
		return err == -ENOENT || err == -ENOTUNIQ || err == -ELOOP || err == -ESRCH
			       ? CTL_EXIT_USAGE
			       : CTL_EXIT_ERROR;
	}
	return 0;
}

int oci_gvisor_attach(struct ctl *c, const struct hook_opts *o, const char *id, long pid,
		      const char *bundle, json_t *policy, uint64_t deadline)
{
	struct egr_veth_peer peer;
	json_t *req, *resp;
	int rc;

	rc = find_device("createRuntime", id, pid, bundle, &peer);
	if (rc) {
		json_decref(policy);
		return rc;
	}
	req = json_pack("{s:s, s:s, s:o}", "op", egr_op_desc(EGR_OP_ATTACH)->name, "netdev",
			peer.ifname, "policy", policy);
	rc = oci_send_attach(c, o, id, req, peer.netns, deadline, &resp);
	if (rc) {
		oci_hook_err("createRuntime", id, "egressd did not confine gVisor container's "
			     "device %s (%s, the peer of its veth %s; see above); not starting it",
			     peer.ifname, peer.netns[0] ? peer.netns : "the hook's namespace",
			     peer.inner);
		return rc;
	}
	json_decref(resp);
	return CTL_EXIT_OK;
}

/* The id of the device sandbox of ifname@netns whose container is id, 0 if none. */
static long long find_sandbox(struct ctl *c, const char *id, const struct egr_veth_peer *peer)
{
	json_t *req = egr_proto_request(EGR_OP_LIST), *resp = NULL, *sb;
	long long found = 0;
	size_t i;

	if (!req)
		return -ENOMEM;
	if (ctl_request(c, req, &resp, NULL, 0) != CTL_EXIT_OK) {
		json_decref(req);
		return -EIO;
	}
	json_decref(req);
	json_array_foreach(json_object_get(resp, "sandboxes"), i, sb) {
		const char *nd = json_string_value(json_object_get(sb, "netdev"));
		const char *ns = json_string_value(json_object_get(sb, "netns"));
		const char *cid = json_string_value(
			json_object_get(json_object_get(sb, "container"), "id"));

		if (nd && strcmp(nd, peer->ifname) == 0 &&
		    strcmp(ns ?: "", peer->netns) == 0 && cid && strcmp(cid, id) == 0)
			found = json_integer_value(json_object_get(sb, "id"));
	}
	json_decref(resp);
	return found;
}

int oci_gvisor_detach(struct ctl *c, const char *id, const char *bundle, int *rc)
{
	char bpath[PATH_MAX], why[PATH_MAX + 256], code[32] = "";
	struct egr_veth_peer peer;
	json_t *req, *resp;
	long long sbid;
	int nsfd;

	/* The sandbox process is gone: the bundle's namespace, if it is still
	 * there, leads to the device; the sandbox must name this container.
	 * No namespace or no veth left: the device went with them and egressd
	 * detached it (status "device gone"). */
	if (bundle_netns_path(bundle, bpath, sizeof(bpath)) || !bpath[0])
		return 0;
	nsfd = open(bpath, O_RDONLY | O_CLOEXEC);
	if (nsfd < 0)
		return 0;
	if (egr_veth_peer_find_named(nsfd, &peer, why, sizeof(why))) {
		close(nsfd);
		return 0;
	}
	close(nsfd);
	sbid = find_sandbox(c, id, &peer);
	if (sbid <= 0)
		return 0;
	req = json_pack("{s:s, s:I, s:s}", "op", egr_op_desc(EGR_OP_DETACH)->name, "id",
			(json_int_t)sbid, "status", "container stopped");
	if (!req) {
		*rc = CTL_EXIT_ERROR;
		return 1;
	}
	c->quiet = true;
	*rc = ctl_request(c, req, &resp, code, sizeof(code));
	json_decref(req);
	if (*rc == CTL_EXIT_OK)
		json_decref(resp);
	else if (egr_err_parse(code) == EGR_ERR_NOT_FOUND)
		*rc = CTL_EXIT_OK; /* went meanwhile */
	else
		oci_hook_err("poststop", id, "detach of gVisor device sandbox %lld (%s) failed "
			     "(%s; exit %d)", sbid, peer.ifname, code[0] ? code : "error", *rc);
	return 1;
}
