// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * `egressctl oci-hook createRuntime|poststop`: an OCI runtime hook that makes
 * a container a sandbox before its first instruction and ends the sandbox
 * with the container (docs/containers.md).
 *
 * The runtime writes the container's state (OCI runtime spec: ociVersion,
 * id, status, pid, bundle, annotations) on stdin. The annotation
 * io.egressd.policy names a host policy file; without it the hook does
 * nothing. At createRuntime the container's init process exists (runc init,
 * blocked on its exec fifo) and sits in the container's cgroup: its
 * /proc/PID/cgroup is the truth, the bundle's config.json linux.cgroupsPath
 * the fallback. A gVisor container is a device sandbox instead
 * (ocihook_gvisor.c). Any failure exits non-zero with the reason on stderr,
 * so the runtime aborts the container instead of starting it unconfined.
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
#include "ocihook_gvisor.h"
#include "ocihook_ns.h"
#include "ocihook_util.h"
#include "ocimeta.h"

#define OCI_POLICY_ANNOTATION EGR_ANN_POLICY
#define OCI_STATE_MAX (1u << 20) /* a state document is a few hundred bytes */
#define OCI_POLICY_DIR_DEFAULT "/etc/egressd/policies"

#define OCI_WAIT_DEFAULT_S 10
#define OCI_WAIT_MAX_S 600

static const char ocihook_help[] =
	"Usage: egressctl oci-hook [--policy-dir DIR] [--require-annotation] [--wait SEC] "
	"createRuntime|poststop\n"
	"An OCI runtime hook (hooks.d: dist/oci/). Reads the container's state JSON on\n"
	"stdin and its bundle's config.json annotations. createRuntime attaches a\n"
	"policy to the container's cgroup before its process runs, and fails (exit\n"
	"non-zero) when it cannot, so the runtime aborts the container; poststop\n"
	"detaches it.\n"
	"A Kubernetes container (its runtime recorded a namespace: containerd's\n"
	"io.kubernetes.cri.sandbox-namespace, CRI-O's io.kubernetes.pod.namespace; two\n"
	"that differ are refused): " OCI_POLICY_ANNOTATION "=NAME selects NAME.json of\n"
	"its own namespace in egressd's --policy-dir tree, without it the namespace's\n"
	"default.json; a path, '..', a name starting with '.' or a missing policy fails\n"
	"its start. No default: it runs unconfined, unless egressd requires a policy\n"
	"for the namespace (its require-policy-namespaces, egressd(8)) or\n"
	"--require-annotation is given.\n"
	"Other containers: " OCI_POLICY_ANNOTATION "=FILE, an absolute host path that must\n"
	"resolve (realpath) to inside DIR (default " OCI_POLICY_DIR_DEFAULT "), a\n"
	"root-owned directory not writable by group or others, and be a regular\n"
	"root-owned file not writable by group or others; without it nothing is done\n"
	"(--require-annotation: refused).\n"
	"The policy gets a \"container\" object (id, pod, namespace, pod uid, image) and\n"
	"execution_id " EGR_ANN_EXECUTION_ID " or the container id. A gVisor container\n"
	"(runsc's sandbox process: /proc/PID/exe runsc, argv[0] runsc-sandbox) is a\n"
	"device sandbox on the host side of its namespace's one veth (a peer in the\n"
	"hook's namespace or a /run/netns/NAME; anything else is refused; not in a\n"
	"Kubernetes namespace). Attaching again\n"
	"with the same policy succeeds, so a retried hook is harmless. While egressd\n"
	"restarts, createRuntime waits for it up to --wait seconds (default 10; 0: not\n"
	"at all) and then fails, closed.\n";

/* The state document from stdin, at most OCI_STATE_MAX bytes. */
static int read_state(json_t **out, char *why, size_t whylen)
{
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	json_error_t jerr;

	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n;

		if (len == cap) {
			char *nb;

			if (cap >= OCI_STATE_MAX) {
				free(buf);
				snprintf(why, whylen, "state on stdin is over %u bytes",
					 OCI_STATE_MAX);
				return -E2BIG;
			}
			nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
			cap *= 2;
		}
		n = read(STDIN_FILENO, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int err = -errno;

			free(buf);
			snprintf(why, whylen, "reading the state on stdin: %s", strerror(-err));
			return err;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	*out = json_loadb(buf, len, 0, &jerr);
	free(buf);
	if (!*out || !json_is_object(*out)) {
		snprintf(why, whylen, "the state on stdin is not a JSON object%s%s",
			 *out ? "" : ": ", *out ? "" : jerr.text);
		json_decref(*out);
		*out = NULL;
		return -EINVAL;
	}
	return 0;
}

/*
 * Open the annotation's policy file only if it is one the host's admin put
 * in the policy directory: whoever sets annotations (a pod author) must not
 * pick any host file (another tenant's looser policy, /etc/shadow). *rule
 * names the rule a refused path broke, and nothing else: no parser text, and
 * the same words for a missing file and one outside the directory, so the
 * refusal tells nothing about the host's files. An fd or -errno.
 */
static int open_policy_in_dir(const char *dir, const char *path, const char **rule)
{
	char rdir[PATH_MAX], rfile[PATH_MAX];
	struct stat st;
	size_t n;
	int fd;

	if (!realpath(dir, rdir) || stat(rdir, &st) || !S_ISDIR(st.st_mode) || st.st_uid != 0 ||
	    (st.st_mode & (S_IWGRP | S_IWOTH))) {
		*rule = "the policy directory is not a root-owned directory unwritable by group "
			"and others";
		return -EPERM;
	}
	n = strlen(rdir);
	if (!realpath(path, rfile) || strncmp(rfile, rdir, n) != 0 ||
	    (rdir[n - 1] != '/' && rfile[n] != '/')) {
		*rule = "it is not a file inside the policy directory";
		return -EPERM;
	}
	/* O_NOFOLLOW: rfile has no link left; one put there since is refused. */
	fd = open(rfile, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		if (fd >= 0)
			close(fd);
		*rule = "it is not a regular file inside the policy directory";
		return -EPERM;
	}
	if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH))) {
		close(fd);
		*rule = "it is not owned by root, or group or others may write it";
		return -EPERM;
	}
	return fd;
}

/*
 * The container's identity in the policy it is attached with: "container"
 * (its id and what the runtime recorded) and execution_id, the annotation
 * io.egressd.execution-id or else the container id, so that audit records
 * and `suggest --execution-id` tell containers of one policy apart
 * (docs/containers.md "Identity"). 0 or -ENOMEM.
 */
static int set_identity(json_t *policy, const char *id, const struct egr_oci_meta *m,
			const char *policy_name)
{
	json_t *ctr = egr_container_json(id, m, policy_name);

	if (!ctr || json_object_set_new(policy, "container", ctr) ||
	    json_object_set_new(policy, "execution_id", json_string(m->execution_id ?: id)))
		return -ENOMEM;
	return 0;
}

static int hook_attach(struct ctl *c, const struct hook_opts *o, const char *id, long pid,
		       const char *bundle, const struct egr_oci_meta *m)
{
	char cg[PATH_MAX], ns[PATH_MAX], why[PATH_MAX + 128] = "", fdpath[64];
	const char *policy_path = m->policy;
	json_t *policy = NULL, *req, *resp;
	const char *rule = "";
	uint64_t deadline;
	int rc, fd, err, gvisor;

	if (policy_path[0] != '/') {
		oci_hook_err("createRuntime", id, "annotation " OCI_POLICY_ANNOTATION
			 " is not an absolute host path; not starting it");
		return CTL_EXIT_USAGE;
	}
	fd = open_policy_in_dir(o->policy_dir, policy_path, &rule);
	if (fd < 0) {
		/* The path is the annotation's own text: saying it back leaks nothing. */
		oci_hook_err("createRuntime", id, "policy %s (annotation " OCI_POLICY_ANNOTATION
			 ") refused: %s (policy directory %s); not starting it", policy_path, rule,
			 o->policy_dir);
		return CTL_EXIT_USAGE;
	}
	/* Before its cgroup: a cgroup sandbox would not see gVisor's traffic. */
	gvisor = oci_is_gvisor(pid);
	if (gvisor < 0) {
		oci_hook_err("createRuntime", id, "cannot tell whether process %ld is runsc's "
			     "sandbox: %s; not starting it", pid, strerror(-gvisor));
		close(fd);
		return CTL_EXIT_ERROR;
	}
	if (!gvisor && oci_container_cgroup(pid, bundle, cg, sizeof(cg), why, sizeof(why))) {
		oci_hook_err("createRuntime", id, "cannot find its cgroup: %s", why);
		close(fd);
		return CTL_EXIT_ERROR;
	}
	deadline = oci_mono_ms() + (uint64_t)o->wait_s * 1000;
	err = oci_wait_for_egressd(c, deadline);
	if (err) {
		oci_hook_err("createRuntime", id, "egressd is not reachable at %s (%s%s); not "
			 "starting it unconfined", c->socket, strerror(-err),
			 o->wait_s ? ", waited --wait seconds" : "");
		close(fd);
		return CTL_EXIT_UNREACHABLE;
	}
	/* Read through the fd checked above (not the path again: no swap in
	 * between). Its validation messages are about an admin's own policy. */
	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", fd);
	rc = ctl_policy_load(fdpath, &policy);
	close(fd);
	if (rc) {
		oci_hook_err("createRuntime", id, "policy %s (annotation " OCI_POLICY_ANNOTATION
			 ") is not usable; not starting it", policy_path);
		return rc;
	}
	if (gvisor) {
		if (set_identity(policy, id, m, NULL)) {
			json_decref(policy);
			oci_hook_err("createRuntime", id, "out of memory");
			return CTL_EXIT_ERROR;
		}
		return oci_gvisor_attach(c, o, id, pid, bundle, policy, deadline);
	}
	if (oci_container_netns(pid, bundle, ns, sizeof(ns))) {
		oci_hook_err("createRuntime", id, "it has a network namespace of its own that the "
			 "bundle's linux.namespaces names no path for; egressd cannot open its DNS "
			 "listeners there; not starting it");
		json_decref(policy);
		return CTL_EXIT_ERROR;
	}
	if (set_identity(policy, id, m, NULL)) {
		json_decref(policy);
		oci_hook_err("createRuntime", id, "out of memory");
		return CTL_EXIT_ERROR;
	}
	req = json_pack("{s:s, s:s, s:o}", "op", egr_op_desc(EGR_OP_ATTACH)->name, "cgroup", cg,
			"policy", policy);
	rc = oci_send_attach(c, o, id, req, ns, deadline, &resp);
	if (rc) {
		oci_hook_err("createRuntime", id, "egressd did not confine %s (see above); not "
			 "starting it", cg);
		return rc;
	}
	json_decref(resp);
	return CTL_EXIT_OK;
}

static int hook_detach(struct ctl *c, const char *id, long pid, const char *bundle)
{
	char cg[PATH_MAX], code[32], why[PATH_MAX + 128] = "";
	json_t *req, *resp;
	int rc;

	if (oci_gvisor_detach(c, id, bundle, &rc))
		return rc;
	if (oci_container_cgroup(pid, bundle, cg, sizeof(cg), why, sizeof(why))) {
		oci_hook_err("poststop", id, "cannot find its cgroup: %s", why);
		return CTL_EXIT_ERROR;
	}
	req = json_pack("{s:s, s:s, s:s}", "op", egr_op_desc(EGR_OP_DETACH)->name, "cgroup", cg,
			"status", "container stopped");
	if (!req) {
		oci_hook_err("poststop", id, "out of memory");
		return CTL_EXIT_ERROR;
	}
	c->quiet = true; /* not_found is fine: said below */
	rc = ctl_request(c, req, &resp, code, sizeof(code));
	json_decref(req);
	if (rc == CTL_EXIT_OK) {
		json_decref(resp);
		return rc;
	}
	/* Already gone (detached by hand, or egressd saw the cgroup go). */
	if (egr_err_parse(code) == EGR_ERR_NOT_FOUND)
		return CTL_EXIT_OK;
	oci_hook_err("poststop", id, "detach of %s failed (%s; exit %d)", cg,
		 code[0] ? code : rc == CTL_EXIT_UNREACHABLE ? "egressd not reachable" : "error",
		 rc);
	return rc;
}

/* BUNDLE/config.json into *out: 0, -ENOENT when the bundle has none (or
 * the state names no bundle), -EBADMSG (why filled) when it is there but not
 * a JSON object. */
static int bundle_config(const char *bundle, json_t **out, char *why, size_t whylen)
{
	char path[PATH_MAX];
	json_error_t je;

	*out = NULL;
	if (!bundle || bundle[0] != '/' ||
	    snprintf(path, sizeof(path), "%s/config.json", bundle) >= (int)sizeof(path))
		return -ENOENT;
	if (access(path, F_OK) && errno == ENOENT)
		return -ENOENT;
	*out = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	if (!json_is_object(*out)) {
		snprintf(why, whylen, "%s: %s", path, *out ? "not a JSON object" : je.text);
		json_decref(*out);
		*out = NULL;
		return -EBADMSG;
	}
	return 0;
}

static int parse_wait(const char *s, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (!*s || *end || s[0] == '-' || s[0] == '+' || errno || v > OCI_WAIT_MAX_S)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

int ctl_cmd_oci_hook(struct ctl *c, int argc, char **argv)
{
	char why[256] = "";
	const char *stage, *id, *bundle, *rule = "";
	json_t *state = NULL, *ann, *cfg = NULL;
	struct egr_oci_meta m;
	bool createrun;
	struct hook_opts o = { .policy_dir = OCI_POLICY_DIR_DEFAULT, .wait_s = OCI_WAIT_DEFAULT_S };
	json_int_t pid;
	int rc, i;

	if (argc == 2 && strcmp(argv[1], "--help") == 0) {
		fputs(ocihook_help, stdout);
		return INT_MAX;
	}
	for (i = 1; i < argc - 1; i++) {
		if (strcmp(argv[i], "--policy-dir") == 0 && i + 2 < argc && argv[i + 1][0] == '/')
			o.policy_dir = argv[++i];
		else if (strcmp(argv[i], "--require-annotation") == 0)
			o.require_annotation = true;
		else if (strcmp(argv[i], "--wait") == 0 && i + 2 < argc &&
			 parse_wait(argv[i + 1], &o.wait_s) == 0)
			i++;
		else
			return ctl_usage_error("oci-hook",
					       "oci-hook: unknown option %s (--policy-dir takes an "
					       "absolute directory, --wait whole seconds 0-%d)",
					       argv[i], OCI_WAIT_MAX_S);
	}
	if (i != argc - 1 ||
	    (strcmp(argv[i], "createRuntime") != 0 && strcmp(argv[i], "poststop") != 0))
		return ctl_usage_error("oci-hook", "oci-hook: give the stage, createRuntime or "
				       "poststop");
	stage = argv[i];
	rc = read_state(&state, why, sizeof(why));
	if (rc) {
		oci_hook_err(stage, NULL, "%s", rc == -ENOMEM ? "out of memory" : why);
		return CTL_EXIT_USAGE;
	}
	id = json_string_value(json_object_get(state, "id"));
	bundle = json_string_value(json_object_get(state, "bundle"));
	pid = json_integer_value(json_object_get(state, "pid"));
	ann = json_object_get(state, "annotations");
	if (ann && !json_is_object(ann)) {
		oci_hook_err(stage, id, "state: annotations is not an object");
		rc = CTL_EXIT_USAGE;
		goto out;
	}
	/* What the runtime wrote into the bundle is the record; the state's
	 * copy (runc's is the same map) only when there is no config.json. */
	/* One that is there but unreadable is refused at createRuntime: its
	 * annotations (the namespace, the policy) are unknown, and the
	 * state's copy is not the record (rt-k8s finding). poststop still
	 * detaches by the state's. */
	if (bundle_config(bundle, &cfg, why, sizeof(why)) == -EBADMSG &&
	    strcmp(stage, "createRuntime") == 0) {
		oci_hook_err(stage, id, "the bundle's config.json is not usable (%s); not "
			     "starting it", why);
		rc = CTL_EXIT_USAGE;
		goto out;
	}
	if (json_is_object(json_object_get(cfg, "annotations")))
		ann = json_object_get(cfg, "annotations");
	if (egr_oci_meta_parse(ann, &m, &rule)) {
		oci_hook_err(stage, id, "annotations refused: %s; not starting it", rule);
		rc = CTL_EXIT_USAGE;
		goto out;
	}
	if ((m.namespace || m.policy) && (!id || !id[0])) {
		oci_hook_err(stage, id, "state: no container id");
		rc = CTL_EXIT_USAGE;
		goto out;
	}
	createrun = strcmp(stage, "createRuntime") == 0;
	/* poststop ignores it (runsc's is -1: no process any more). */
	if ((m.namespace || m.policy) && createrun && (pid < 0 || pid > INT_MAX)) {
		oci_hook_err(stage, id, "state: pid %lld out of range", (long long)pid);
		rc = CTL_EXIT_USAGE;
		goto out;
	}
	if (createrun && (m.namespace || m.policy) && pid == 0) {
		/* No process: no cgroup we could check it is in. */
		oci_hook_err(stage, id, "state has no pid (is this hook at createRuntime?)");
		rc = CTL_EXIT_USAGE;
		goto out;
	}
	if (m.namespace && m.pod_sandbox && !o.require_annotation) {
		/* The pod's pause container runs no tool code; its pod's
		 * containers are each confined. Not with --require-annotation:
		 * on a host without a CRI runtime the type keys are whoever
		 * set annotations (podman --annotation), so "sandbox" would
		 * run any image unconfined (rt-k8s finding 4); a real pause
		 * container carries its pod's annotations, so it gets the
		 * pod's policy. */
		rc = CTL_EXIT_OK;
	} else if (m.namespace) {
		/* A Kubernetes container: a policy of its namespace or none. */
		rc = createrun ? oci_hook_attach_ns(c, &o, id, (long)pid, bundle, &m)
			       : hook_detach(c, id, 0, bundle);
	} else if (!m.policy) {
		if (o.require_annotation && createrun) {
			/* A host where every container must be confined. */
			oci_hook_err(stage, id, "no annotation " OCI_POLICY_ANNOTATION " and "
				 "--require-annotation is set; not starting it");
			rc = CTL_EXIT_USAGE;
		} else {
			rc = CTL_EXIT_OK; /* not ours to confine */
		}
	} else if (!m.policy[0]) {
		oci_hook_err(stage, id, "state: annotation " OCI_POLICY_ANNOTATION
			 " is not a path string");
		rc = CTL_EXIT_USAGE;
	} else if (createrun) {
		rc = hook_attach(c, &o, id, (long)pid, bundle, &m);
	} else {
		rc = hook_detach(c, id, 0, bundle);
	}
out:
	json_decref(cfg);
	json_decref(state);
	return rc;
}
