# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Issue 26 item 5: the image `make image` builds, run with Podman the way
# dist/kubernetes/daemonset.yaml runs it, confines a container. Everything
# the pod does is read from the manifest (command, args, env, volume mounts
# and their propagation, privileged, capabilities, read-only root, SELinux
# and AppArmor, memory limit, probes); what differs is named in IMG_HOST:
# each hostPath is a directory of this test's own (never the node's
# /run/egressd, /var/lib/egressd or /etc/containers), the metrics port is a
# free one and egressd gets --dns-upstream to the suite's dnsmasq.
# The base image is a debootstrap rootfs cached in /var/tmp
# (tools/image-base); the image takes `make all`'s binaries
# (IMAGE_PREBUILT=1, Containerfile PREBUILT): its runtime stage is the one
# the manifest ships.
#
# Run by run.py (harness.runner).

import json
import os
import re
import shutil
import urllib.request

from harness import *  # noqa: F401,F403 (check, run, CLEANUP, ...: harness/__init__.py)
from test_container_ns import Tree, crio_annotations

IMG_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMG_BUILD_TIMEOUT_S = 900   # a cold cache: debootstrap, the runtime stage's apt-get
IMG_PODMAN_TIMEOUT_S = 120
# The node's host paths the manifest mounts, and what this test gives each
# (filled per run). /sys/fs/cgroup is the host's: sandboxes are host cgroups.
IMG_HOST = {}
IMG_POLICY_DIR = "/etc/egressd/policies"   # the hooks.d files' --policy-dir (dist/oci)
IMG_CONFIGMAPS = {}   # a configMap volume's name -> the test's kubelet-style directory of it
IMG_OUT = [None]     # the build tree the image takes its binaries from
IMG_NS = "default"    # the namespace of the manifest's example policy ConfigMap


IMG_CG_PARENT = "/%s-image" % RUN_ID   # every container's cgroup parent, removed at the end


IMG_STORAGE = []   # podman's storage options (tools/image-base --podman-args)


def img_podman():
    # runc: crun refuses a hybrid cgroup host; no events journal, no systemd.
    return ["podman"] + IMG_STORAGE + ["--runtime", "runc", "--cgroup-manager", "cgroupfs",
                                       "--events-backend", "none"]


def img_cg_remove():
    """The cgroup parent in every hierarchy podman made it in (v1 and v2)."""
    for h in os.listdir("/sys/fs/cgroup"):
        path = os.path.join("/sys/fs/cgroup", h) + IMG_CG_PARENT
        if os.path.isdir(path):
            cgroup_remove_tree(path)


def img_dangling():
    r = run(img_podman() + ["images", "-q", "--no-trunc", "--filter", "dangling=true"],
            timeout=IMG_PODMAN_TIMEOUT_S)
    return set(r.stdout.split())


def img_untag(image, before):
    """The test's tag and the build's stages it left untagged (not the
    base, not anything that was there before the build)."""
    run(img_podman() + ["rmi", "-f", image], timeout=IMG_PODMAN_TIMEOUT_S)
    for i in img_dangling() - before:
        run(img_podman() + ["rmi", i], timeout=IMG_PODMAN_TIMEOUT_S)


def img_pod():
    import yaml
    with open(os.path.join(IMG_REPO, "dist", "kubernetes", "daemonset.yaml")) as f:
        docs = {d["kind"]: d for d in yaml.safe_load_all(f) if d}
    return docs["DaemonSet"]["spec"]["template"]


def img_host_path(p):
    """A node path mapped to this test's own (the longest prefix in IMG_HOST)."""
    for k in sorted(IMG_HOST, key=len, reverse=True):
        if p == k or p.startswith(k + "/"):
            return IMG_HOST[k] + p[len(k):]
    raise TestFailure("node path %s is not one this test maps (IMG_HOST): a new "
                      "hostPath in the manifest needs one" % p)


def img_expand(s, env):
    """Kubernetes' $(VAR) expansion of command and args."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), s)


def img_mem(q):
    m = re.fullmatch(r"(\d+)(Mi|Gi)", q)
    check(m, "memory quantity %r is not NMi/NGi" % q)
    return m.group(1) + ("m" if m.group(2) == "Mi" else "g")


def img_run_argv(pod, ctr, image, name, host_ip, extra_args=()):
    """podman run argv for container ctr of the pod as the kubelet would run it."""
    spec = pod["spec"]
    vols = {v["name"]: v for v in spec["volumes"]}
    argv = img_podman() + ["run", "-d", "--name", name, "--cgroup-parent", IMG_CG_PARENT,
                           "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
    if spec.get("hostNetwork"):
        argv += ["--network", "host"]
    if spec.get("hostPID"):
        argv += ["--pid", "host"]
    psc = spec.get("securityContext", {})
    sc = ctr.get("securityContext", {})
    se = sc.get("seLinuxOptions", psc.get("seLinuxOptions", {}))
    if se.get("type"):
        argv += ["--security-opt", "label=type:" + se["type"]]
    ann = pod["metadata"].get("annotations", {})
    aa = ann.get("container.apparmor.security.beta.kubernetes.io/" + ctr["name"])
    check(aa == "unconfined", "%s: AppArmor annotation %r" % (ctr["name"], aa))
    argv += ["--security-opt", "apparmor=unconfined"]
    # No seccompProfile: the kubelet's default (seccompDefault off) is Unconfined.
    sp = sc.get("seccompProfile", psc.get("seccompProfile", {"type": "Unconfined"}))
    check(sp.get("type") in ("Unconfined", "RuntimeDefault"), "seccompProfile %r" % sp)
    if sp["type"] == "Unconfined":
        argv += ["--security-opt", "seccomp=unconfined"]
    if sc.get("privileged"):
        argv += ["--privileged"]
    caps = sc.get("capabilities", {})
    for cap in caps.get("drop", []):
        argv += ["--cap-drop", cap]
    for cap in caps.get("add", []):
        argv += ["--cap-add", cap]
    if sc.get("readOnlyRootFilesystem"):
        argv += ["--read-only", "--read-only-tmpfs=false"]   # no tmpfs the kubelet does not add
    lim = ctr.get("resources", {}).get("limits", {})
    if lim.get("memory"):
        argv += ["--memory", img_mem(lim["memory"])]
    env = {}
    for e in ctr.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            ref = e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            check(ref == "status.hostIP", "env %s: only status.hostIP is mapped: %r" % (e["name"], e))
            env[e["name"]] = host_ip
        argv += ["--env", "%s=%s" % (e["name"], env[e["name"]])]
    for m in ctr.get("volumeMounts", []):
        v = vols[m["name"]]
        hp = v.get("hostPath")
        if "configMap" in v:
            src = IMG_CONFIGMAPS.get(v["configMap"]["name"])
            check(src, "configMap %s has no content in this test" % v["configMap"]["name"])
            check(m.get("readOnly"), "configMap %s mounted writable" % m["name"])
        else:
            check(hp, "volume %s is neither a hostPath nor a configMap: %r" % (m["name"], v))
            src = img_host_path(hp["path"])
        if hp and hp.get("type") == "DirectoryOrCreate":
            os.makedirs(src, exist_ok=True)
        check(os.path.isdir(src), "volume %s (%s) is not a directory" % (m["name"], src))
        prop = {"Bidirectional": "rshared", "HostToContainer": "rslave"}.get(
            m.get("mountPropagation", "None"), "rprivate")
        opts = [prop] + (["ro"] if m.get("readOnly") else [])
        argv += ["--volume", "%s:%s:%s" % (src, m["mountPath"], ",".join(opts))]
    if ctr.get("command"):
        argv += ["--entrypoint", json.dumps(ctr["command"])]
    argv += [image] + [img_expand(a, env) for a in ctr.get("args", [])] + list(extra_args)
    return argv


def img_base():
    tool = os.path.join(IMG_REPO, "tools", "image-base")
    r = run([tool, "--podman-args"])
    check(r.returncode == 0, "tools/image-base --podman-args: %s" % r.stderr)
    IMG_STORAGE[:] = r.stdout.split()
    r = run([tool], timeout=IMG_BUILD_TIMEOUT_S)
    check(r.returncode == 0, "tools/image-base: %d %s" % (r.returncode, r.stderr[-800:]))
    return r.stdout.strip()


def img_build(c, image):
    """make image, as the Makefile builds the image the manifest names."""
    pod = img_pod()
    names = {x["image"] for x in pod["spec"]["initContainers"] + pod["spec"]["containers"]}
    r = run(["make", "-s", "--no-print-directory", "-n", "image"], cwd=IMG_REPO,
            env={k: v for k, v in os.environ.items() if not k.startswith("MAKE")})
    check(r.returncode == 0 and len(names) == 1 and
          (" -t %s " % names.pop()) in r.stdout.replace("\n", " ") + " ",
          "`make image` does not build the image the manifest names: %r" % r.stdout[-400:])
    base = img_base()
    # The image ships plain binaries: under `make test-asan` (no static
    # egressctl, ASan's libraries) it takes the plain build tree, which
    # make test built first. A make of its own: not the caller's SAN=1/-j.
    build = os.path.abspath(c.build)
    if not os.path.exists(os.path.join(build, "egressctl-static")):
        build = os.path.join(IMG_REPO, "build")
    IMG_OUT[0] = build
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "SAN", "OUT")}
    before = img_dangling()
    CLEANUP.push("image tag", img_untag, image, before)
    r = run(["make", "--no-print-directory", "image", "OUT=" + build, "IMAGE=" + image,
             "IMAGE_PREBUILT=1", "PODMAN=" + " ".join(img_podman()),
             "IMAGE_BUILD_ARGS=--build-arg BASE=%s --build-arg RUNTIME_BASE=%s" % (base, base)],
            timeout=IMG_BUILD_TIMEOUT_S, cwd=IMG_REPO, env=env)
    check(r.returncode == 0, "make image: %d\n%s\n%s" % (r.returncode, r.stdout[-1500:],
                                                       r.stderr[-1500:]))
    return lambda: img_untag(image, before)


def img_logs(name):
    r = run(img_podman() + ["logs", name], timeout=IMG_PODMAN_TIMEOUT_S)
    return (r.stdout + r.stderr)[-1500:]


def img_rm(name):
    run(img_podman() + ["rm", "-f", "-t", "5", name], timeout=IMG_PODMAN_TIMEOUT_S)


IMG_EXEC_SIBLING = [None]   # the image, when `podman exec` cannot be used


def img_exec(name, argv):
    """argv in the container (the kubelet's exec probe). Where runc cannot
    exec into it (a fresh-machine chroot: "stat /usr/local/bin/egressctl:
    no such file or directory" though the container runs that image), the
    same command in a sibling container of the image with the container's
    mounts (--volumes-from), host network and pids: same binary, socket and
    view of the node, said in the log."""
    if IMG_EXEC_SIBLING[0] is None:
        r = run(img_podman() + ["exec", name] + list(argv), timeout=IMG_PODMAN_TIMEOUT_S)
        if "OCI runtime attempted to invoke a command that was not found" not in r.stderr:
            return r
        log("podman exec into %s fails here (%s): sibling containers from now on" %
            (name, r.stderr.strip()[-200:]))
        IMG_EXEC_SIBLING[0] = run(img_podman() + ["inspect", "-f", "{{.ImageName}}", name]
                                  ).stdout.strip()
    return run(img_podman() + ["run", "--rm", "--volumes-from", name, "--network", "host",
                               "--pid", "host", "--cgroup-parent", IMG_CG_PARENT,
                               "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
                               "--entrypoint", argv[0], IMG_EXEC_SIBLING[0]] + list(argv[1:]),
               timeout=IMG_PODMAN_TIMEOUT_S)


def img_probe_exec(name, probe):
    return img_exec(name, probe["exec"]["command"]).returncode == 0


def img_bpffs_dir(path):
    """The test's bpffs directory as a shared mount of its own: the pod's
    propagation (Bidirectional, HostToContainer) needs a shared source, as
    every mount on a systemd node is; this host's mounts are private."""
    os.makedirs(path)
    CLEANUP.push("image bpffs", shutil.rmtree, path, True)
    r = run(["mount", "--bind", path, path])
    check(r.returncode == 0, "bind mount %s: %s" % (path, r.stderr))
    CLEANUP.push("image bpffs mount", run, ["umount", "-l", path])
    r = run(["mount", "--make-shared", path])
    check(r.returncode == 0, "make-shared %s: %s" % (path, r.stderr))


def img_busybox(c, d):
    """A busybox rootfs with netprobe and the static egressctl (the hostile
    tool), like test_containers' OciEnv."""
    rootfs = os.path.join(d, "rootfs")
    for sub in ("bin", "tmp", "proc", "dev", "sys", "run/egressd"):
        os.makedirs(os.path.join(rootfs, sub))
    shutil.copy("/bin/busybox", os.path.join(rootfs, "bin", "busybox"))
    for applet in ("sh", "cat", "echo", "test", "head", "sleep", "["):
        os.symlink("busybox", os.path.join(rootfs, "bin", applet))
    shutil.copy(c.netprobe, os.path.join(rootfs, "netprobe"))
    for line in run(["ldd", c.netprobe]).stdout.splitlines():
        parts = line.split()
        lib = parts[2] if len(parts) >= 3 and parts[1] == "=>" else parts[0]
        if lib.startswith("/"):
            os.makedirs(os.path.dirname(rootfs + lib), exist_ok=True)
            shutil.copy(lib, rootfs + lib)
    shutil.copy(os.path.join(IMG_OUT[0], "egressctl-static"), os.path.join(rootfs, "egressctl"))
    return rootfs


def img_policy(ports):
    return {"tenant": "img-" + RAND, "execution_id": "img-" + RAND, "principal": "agent:e2e",
            "tool": "netprobe", "version": "1.0.0",
            "network": {"default": "deny",
                        "outbound_allow": ["127.0.0.1:%d" % p for p in ports]}}


def img_lines(out):
    return [" ".join(l.split()[:2]) for l in out.splitlines()
            if l.startswith("ok") or l.startswith("err") or l.startswith("ctl")]


@test(needs=("plain_build",))
def image_daemonset_under_podman_confines_a_container(c):
    """make image's image run as the DaemonSet runs it: node-setup installs
    the static hook and hooks.d files under the test's host paths, egressd
    passes its startup, readiness and liveness probes, and a Podman container
    with CRI-O's annotations started through the installed hook is confined
    by its namespace's policy (the manifest's ConfigMap volume): a denied
    loopback port fails before anything else runs, the allowed one connects
    (sanity twin), the sandbox is in the image's `egressctl list`. Hostile twin: root in
    the container, with the control socket's directory mounted in, cannot
    detach or loosen its sandbox; the same update from the host works."""
    for b in ("podman", "runc", "/bin/busybox"):
        check(shutil.which(b) or os.path.exists(b), "%s missing (tools/install-deps)" % b)
    d = os.path.join(c.work, "image-" + RAND)
    os.makedirs(d)
    image = "localhost/egressd-test:%s" % RUN_ID.lower()
    CLEANUP.push("image cgroups", img_cg_remove)
    untag = img_build(c, image)
    IMG_HOST.clear()
    IMG_HOST.update({"/sys/fs/bpf": "/sys/fs/bpf/%s-image" % RUN_ID,
                     "/sys/fs/cgroup": "/sys/fs/cgroup",
                     "/run/egressd": os.path.join(d, "run"),
                     "/var/lib/egressd": os.path.join(d, "state"),
                     "/etc/containers": os.path.join(d, "etc-containers"),
                     "/etc/crio": os.path.join(d, "etc-crio"),
                     IMG_POLICY_DIR: os.path.join(d, "policies")})
    img_bpffs_dir(IMG_HOST["/sys/fs/bpf"])
    # The hook's policy directory: root-owned, not group/other-writable.
    os.makedirs(IMG_HOST[IMG_POLICY_DIR], 0o755)
    pod = img_pod()
    init = {x["name"]: x for x in pod["spec"]["initContainers"]}["node-setup"]
    egr = {x["name"]: x for x in pod["spec"]["containers"]}["egressd"]
    setup, daemon = "%s-node-setup" % RUN_ID, "%s-egressd" % RUN_ID
    ctrs = [setup, daemon]
    for n in ctrs:
        CLEANUP.push("image container", img_rm, n)
    # 1. The init container, to completion.
    r = run(img_run_argv(pod, init, image, setup, "127.0.0.1"), timeout=IMG_PODMAN_TIMEOUT_S)
    check(r.returncode == 0, "podman run node-setup: %d %s" % (r.returncode, r.stderr[-800:]))
    w = run(img_podman() + ["wait", setup], timeout=IMG_PODMAN_TIMEOUT_S)
    check(w.stdout.strip() == "0", "node-setup exited %r:\n%s" % (w.stdout, img_logs(setup)))
    hook = os.path.join(IMG_HOST["/var/lib/egressd"], "bin", "egressctl")
    check(os.access(hook, os.X_OK), "node-setup installed no hook binary at %s" % hook)
    hd_node = os.path.join(IMG_HOST["/etc/containers"], "oci", "hooks.d")
    installed = sorted(os.listdir(hd_node)) if os.path.isdir(hd_node) else []
    check(installed == sorted(os.listdir(os.path.join(IMG_REPO, "dist", "oci"))),
          "hooks.d after node-setup: %r" % installed)
    # The installed hooks.d files, their node paths mapped to the test's.
    hd = os.path.join(d, "hooks.d")
    os.makedirs(hd)
    for f in installed:
        with open(os.path.join(hd_node, f)) as fh:
            h = json.load(fh)
        check(h["hook"]["path"] == "/var/lib/egressd/bin/egressctl", "%s: %r" % (f, h["hook"]))
        h["hook"]["path"] = img_host_path(h["hook"]["path"])
        h["hook"]["args"] = [img_host_path(a) if a.startswith(("/run/egressd", "/etc/egressd"))
                             else a for a in h["hook"]["args"]]
        with open(os.path.join(hd, f), "w") as fh:
            json.dump(h, fh)
    # 2. egressd, as the pod's container, until its probes pass; the
    # manifest's policy ConfigMap holds the pod's policy, img.json.
    ok, bad = c.tcp("imgok"), c.tcp("imgbad")
    cms = [v["configMap"]["name"] for v in pod["spec"]["volumes"] if "configMap" in v]
    check(cms == ["egressd-policies-" + IMG_NS], "the manifest's policy ConfigMaps: %r" % cms)
    tree = Tree(os.path.join(d, "configmaps"))
    tree.configmap(cms[0], {"img.json": img_policy([ok.port])})
    IMG_CONFIGMAPS[cms[0]] = os.path.join(d, "configmaps", cms[0])
    port = free_tcp_port()
    argv = img_run_argv(pod, egr, image, daemon, "127.0.0.1", list(c.dns_args))
    i = argv.index("--metrics-addr")
    check(argv[i + 1] == "[127.0.0.1]:9477", "--metrics-addr expanded to %r" % argv[i + 1])
    argv[i + 1] = "[127.0.0.1]:%d" % port
    r = run(argv, timeout=IMG_PODMAN_TIMEOUT_S)
    check(r.returncode == 0, "podman run egressd: %d %s" % (r.returncode, r.stderr[-800:]))

    # The startup probe's own budget: periodSeconds x failureThreshold.
    sp = egr["startupProbe"]
    last = [None]

    def started():
        st = run(img_podman() + ["inspect", "-f", "{{.State.Running}}", daemon])
        if st.stdout.strip() != "true":
            return True
        last[0] = img_exec(daemon, sp["exec"]["command"])
        return last[0].returncode == 0
    wait_until(started, sp.get("periodSeconds", 10) * sp.get("failureThreshold", 3), 0.5)
    check(last[0] is not None and last[0].returncode == 0,
          "egressd's startup probe does not pass (%s):\n%s" %
          (last[0] and (last[0].returncode, last[0].stdout[-300:], last[0].stderr[-300:]),
           img_logs(daemon)))
    check(img_probe_exec(daemon, egr["readinessProbe"]),
          "egressd's readiness probe fails:\n%s" % img_logs(daemon))
    live = egr["livenessProbe"]["httpGet"]
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, live["path"]), timeout=5) as u:
        check(u.status == 200, "liveness %s: %d" % (live["path"], u.status))
    # 3. A container through the installed hook.
    sock = os.path.join(IMG_HOST["/run/egressd"], "egressd.sock")
    check(os.path.exists(sock), "no control socket at %s" % sock)
    loose = os.path.join(IMG_HOST["/run/egressd"], "loose.json")
    with open(loose, "w") as f:
        json.dump(img_policy([ok.port, bad.port]), f)
    rootfs = img_busybox(c, d)
    box = "%s-box" % RUN_ID
    ctrs.append(box)
    CLEANUP.push("image container", img_rm, box)
    # The first instruction is the denied connect. Then the hostile tool
    # (root, the control socket's directory mounted in, its sandbox's id
    # written into its rootfs by the test) tries to detach and to loosen its
    # sandbox, and the denied port is tried again; then the same update from
    # the node (the sanity twin) opens it.
    ctl = ('out=$(/egressctl --timeout 5 %s --id "$id" %s 2>&1); '
           'echo "ctl-%s $? $out" | head -n 1; ')
    script = ("/netprobe tcp 127.0.0.1 {bad}; "
              "while [ ! -f /tmp/id ]; do sleep 0.1; done; id=$(cat /tmp/id); " +
              ctl % ("detach", "", "detach") +
              ctl % ("update", "--policy /run/egressd/loose.json", "update") +
              "/netprobe tcp 127.0.0.1 {bad}; /netprobe tcp 127.0.0.1 {ok}; "
              "while [ ! -f /tmp/go ]; do sleep 0.1; done; "
              "/netprobe tcp 127.0.0.1 {bad}").format(bad=bad.port, ok=ok.port)
    box_argv = img_podman() + [
        "--hooks-dir", hd, "run", "-d", "--name", box, "--network", "host",
        "--cgroup-parent", IMG_CG_PARENT,
        "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
        "--annotation", "io.egressd.policy=img"] + crio_annotations(IMG_NS, "img-" + RAND) + [
        "--volume", "%s:/run/egressd" % IMG_HOST["/run/egressd"],
        "--rootfs", rootfs, "/bin/sh", "-c", script]
    d0 = bad.accepted
    r = run(box_argv, timeout=IMG_PODMAN_TIMEOUT_S)
    check(r.returncode == 0, "podman run through the installed hook: %d %s" %
          (r.returncode, r.stderr[-800:]))

    def box_lines():
        return img_lines(run(img_podman() + ["logs", box], timeout=IMG_PODMAN_TIMEOUT_S).stdout)

    def box_out_full():
        return run(img_podman() + ["logs", box], timeout=IMG_PODMAN_TIMEOUT_S).stdout

    def image_list():
        lj = img_exec(daemon, ["/usr/local/bin/egressctl", "--socket",
                               "/run/egressd/egressd.sock", "list", "--json"])
        check(lj.returncode == 0, "the image's egressctl list: %d %s" % (lj.returncode, lj.stderr))
        v = json.loads(lj.stdout)
        return [s for s in (v["sandboxes"] if isinstance(v, dict) else v)
                if s.get("container", {}).get("pod") == "img-" + RAND]
    check(wait_until(lambda: len(box_lines()) >= 1, PROBE_TIMEOUT_S * 4, 0.2),
          "the container printed nothing: %r" % box_lines())
    res = box_lines()
    check(res[0] == "err EPERM" and bad.accepted == d0,
          "the container's first connect, to a denied port: %r" % res)
    mine = image_list()
    check(len(mine) == 1, "the image's egressd does not list the container's sandbox: %r" % mine)
    with open(os.path.join(rootfs, "tmp", "id.tmp"), "w") as f:
        f.write("%d\n" % mine[0]["id"])
    os.rename(os.path.join(rootfs, "tmp", "id.tmp"), os.path.join(rootfs, "tmp", "id"))
    check(wait_until(lambda: len(box_lines()) >= 5, PROBE_TIMEOUT_S * 4, 0.2),
          "the container printed %r" % box_lines())
    res = box_lines()
    log("image container: %r" % box_out_full())
    check(res[1] != "ctl-detach 0" and res[2] != "ctl-update 0",
          "root in the container changed its sandbox through the control socket: %r" % res)
    check(res[3] == "err EPERM" and bad.accepted == d0,
          "the denied port after the hostile tool: %r (accepted %d)" % (res, bad.accepted))
    check(res[4] == "ok" and ok.accepted > 0, "the allowed connect: %r" % res)
    check(len(image_list()) == 1, "the sandbox is gone after the hostile tool")
    # The sanity twin: the same update from the node, outside every sandbox.
    r = img_exec(daemon, ["/usr/local/bin/egressctl", "--socket", "/run/egressd/egressd.sock",
                          "update", "--id", str(mine[0]["id"]), "--policy",
                          "/run/egressd/loose.json"])
    check(r.returncode == 0, "update from outside the sandbox: %d %s" % (r.returncode, r.stderr))
    open(os.path.join(rootfs, "tmp", "go"), "w").close()
    w = run(img_podman() + ["wait", box], timeout=IMG_PODMAN_TIMEOUT_S)
    res = box_lines()
    check(w.returncode == 0 and len(res) == 6 and res[5] == "ok" and bad.accepted > d0,
          "the port the node's update allowed: %r" % res)
    img_rm(box)   # poststop: the sandbox goes with the container
    check(wait_until(lambda: not image_list(), 10, 0.2),
          "poststop left the sandbox in the image's egressd")
    log("egressd in the image:\n" + img_logs(daemon))
    for n in reversed(ctrs):
        img_rm(n)
    r = run(["umount", IMG_HOST["/sys/fs/bpf"]])
    check(r.returncode == 0, "umount %s: %s" % (IMG_HOST["/sys/fs/bpf"], r.stderr))
    shutil.rmtree(IMG_HOST["/sys/fs/bpf"], True)
    img_cg_remove()
    untag()
