# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Issue 26 item 5: what an operator relies on in dist/kubernetes/daemonset.yaml
# on mainstream nodes (SELinux, AppArmor, bpffs, a writable hooks path, a
# hook binary without host libraries, IPv6 node addresses, probes). The
# manifest is read with python3-yaml; what it runs (egressd's arguments as
# Kubernetes expands them, the hook binary it copies) is run for real.
#
# Run by run.py (harness.runner).

import json
import os
import re
import shutil
import struct
import subprocess
import urllib.request

from harness import *  # noqa: F401,F403 (check, run, CLEANUP, ...: harness/__init__.py)

DS_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ds_docs():
    import yaml
    with open(os.path.join(DS_REPO, "dist", "kubernetes", "daemonset.yaml")) as f:
        return {d["kind"]: d for d in yaml.safe_load_all(f) if d}


def ds_pod():
    return ds_docs()["DaemonSet"]["spec"]["template"]


def k8s_expand(s, env):
    """Kubernetes' $(VAR) expansion of command/args (a missing one stays)."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), s)


def elf_interp(path):
    """True when the ELF file asks for a program interpreter (dynamic)."""
    with open(path, "rb") as f:
        h = f.read(64)
        check(h[:4] == b"\x7fELF" and h[4] == 2, "%s is not a 64-bit ELF" % path)
        phoff, = struct.unpack_from("<Q", h, 32)
        phentsize, phnum = struct.unpack_from("<HH", h, 54)
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            if struct.unpack("<I", f.read(4))[0] == 3:  # PT_INTERP
                return True
    return False


@test
def daemonset_mainstream_node_security(c):
    """spc_t, AppArmor unconfined for every container, the init container
    that mounts bpffs with Bidirectional propagation, nothing under /usr/share
    written on the host, resources on every container."""
    pod = ds_pod()
    spec = pod["spec"]
    sc = spec.get("securityContext", {})
    check(sc.get("seLinuxOptions", {}).get("type") == "spc_t", "no spc_t: %r" % sc)
    check(sc.get("appArmorProfile", {}).get("type") == "Unconfined", "no AppArmor: %r" % sc)
    ann = pod["metadata"].get("annotations", {})
    every = spec["initContainers"] + spec["containers"]
    for ctr in every:
        key = "container.apparmor.security.beta.kubernetes.io/" + ctr["name"]
        check(ann.get(key) == "unconfined", "%s: annotation %r" % (ctr["name"], ann.get(key)))
        res = ctr.get("resources", {})
        check(res.get("requests", {}).get("cpu") and res.get("limits", {}).get("memory"),
              "%s has no cpu request / memory limit: %r" % (ctr["name"], res))
    vols = {v["name"]: v for v in spec["volumes"]}
    for v in vols.values():
        p = v.get("hostPath", {}).get("path", "")
        check(not p.startswith("/usr"), "a hostPath under /usr (read-only on RHCOS, "
              "Flatcar, Bottlerocket, Talos): %r" % v)
    init = {i["name"]: i for i in spec["initContainers"]}["node-setup"]
    mounts = {m["mountPath"]: m for m in init["volumeMounts"]}
    bpf = mounts.get("/host/sys/fs/bpf")
    check(bpf and bpf.get("mountPropagation") == "Bidirectional" and
          vols[bpf["name"]]["hostPath"]["path"] == "/sys/fs/bpf",
          "bpffs not mounted Bidirectional from the host: %r" % bpf)
    # Kubernetes refuses Bidirectional outside a privileged container.
    check(init.get("securityContext", {}).get("privileged") is True, "node-setup not privileged")
    script = init["args"][0]
    check("mount -t bpf bpf /host/sys/fs/bpf" in script and "/proc/self/mounts" in script,
          "node-setup does not mount a missing bpffs: %r" % script)
    egressd = {x["name"]: x for x in spec["containers"]}["egressd"]
    em = {m["mountPath"]: m for m in egressd["volumeMounts"]}
    check(em["/sys/fs/bpf"].get("mountPropagation") == "HostToContainer",
          "egressd sees a bpffs mounted after it started only with HostToContainer")


@test
def daemonset_node_setup_installs_static_hook(c):
    """node-setup's script, run as written against a scratch host root:
    the hook binary it installs is static, the hooks.d files it writes name
    it, and that binary runs as the OCI hook against the suite's egressd."""
    init = {i["name"]: i for i in ds_pod()["spec"]["initContainers"]}["node-setup"]
    check(init["command"] == ["/bin/sh", "-ec"], "command %r" % init["command"])
    script = init["args"][0]
    host = os.path.join(c.work, "ds-host-" + RAND)
    img = os.path.join(c.work, "ds-img-" + RAND)
    for d in ("sys/fs/bpf", "etc/crio"):
        os.makedirs(os.path.join(host, d))
    static = os.path.join(os.path.dirname(c.egressctl), "egressctl-static")
    if not os.path.exists(static):
        # An ASan build links no static binary (Makefile STATIC_CTL): under
        # make test-asan the plain tree make test built first has it.
        static = os.path.join(DS_REPO, "build", "egressctl-static")
    check(os.path.exists(static), "%s missing (make all builds it)" % static)
    check(not elf_interp(static), "egressctl-static is dynamically linked")
    # The image's paths (Containerfile) mapped into a scratch tree.
    os.makedirs(os.path.join(img, "oci"))
    for f in os.listdir(os.path.join(DS_REPO, "dist", "oci")):
        shutil.copy(os.path.join(DS_REPO, "dist", "oci", f), os.path.join(img, "oci", f))
    s = (script.replace("/tmp/", img + "/").replace("/host/", host + "/")
         .replace("/usr/local/bin/egressctl-hook", static)
         .replace("/usr/share/egressd/oci", os.path.join(img, "oci")))
    # Twice in a private mount namespace: the first run mounts the missing
    # bpffs, the second sees it and mounts nothing more.
    count = "grep -c '^[^ ]* %s/sys/fs/bpf bpf ' /proc/self/mounts" % host
    r = run(["unshare", "-m", "--propagation", "private", "/bin/sh", "-ec",
             "(%s)\n(%s)\n%s" % (s, s, count)])
    check(r.returncode == 0 and r.stdout.strip() == "1",
          "node-setup: %d %r %r" % (r.returncode, r.stdout, r.stderr[-500:]))
    hook = os.path.join(host, "var/lib/egressd/bin/egressctl")
    check(os.access(hook, os.X_OK) and not elf_interp(hook), "the installed hook is not static")
    hd = os.path.join(host, "etc/containers/oci/hooks.d")
    files = sorted(os.listdir(hd))
    check(files == sorted(os.listdir(os.path.join(DS_REPO, "dist", "oci"))), "hooks.d %r" % files)
    for f in files:
        with open(os.path.join(hd, f)) as fh:
            h = json.load(fh)
        check(h["hook"]["path"] == "/var/lib/egressd/bin/egressctl", "%s: %r" % (f, h["hook"]))
    with open(os.path.join(host, "etc/crio/crio.conf.d/50-egressd-hooks.conf")) as fh:
        check('"/etc/containers/oci/hooks.d"' in fh.read(), "CRI-O drop-in lacks the hooks dir")
    # The static binary is the OCI hook: it attaches a policy to a cgroup.
    cg = c.mkcgroup("dshook")
    CLEANUP.push("cgroup", cgroup_remove_tree, cg)
    bundle = os.path.join(c.work, "ds-bundle-" + RAND)
    os.makedirs(bundle)
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump({"ociVersion": "1.0.2", "linux": {"cgroupsPath": cg[len(c.cg_mount):]}}, f)
    holder = subprocess.Popen(["sleep", "30"], preexec_fn=join_cgroup_fn(cg))
    CLEANUP.push("holder", lambda: (holder.kill(), holder.wait()))
    ok, bad = c.tcp("dsok"), c.tcp("dsbad")
    pol = c.policy(["127.0.0.1:%d" % ok.port])
    st = {"ociVersion": "1.0.2", "id": "ds-" + RAND, "status": "created", "pid": holder.pid,
          "bundle": bundle, "annotations": {"io.egressd.policy": pol}}
    pdir = os.path.dirname(pol)
    for stage in ("createRuntime", "poststop"):
        r = subprocess.run([hook, "--socket", c.sock, "oci-hook", "--policy-dir", pdir, stage],
                           input=json.dumps(st), capture_output=True, text=True,
                           timeout=CTL_TIMEOUT_S)
        check(r.returncode == 0, "static hook %s: %d %r" % (stage, r.returncode, r.stderr))
        if stage == "createRuntime":
            check(c.find_sandbox(cg) is not None, "the static hook attached nothing")
            # Confined: the holder's cgroup denies what the policy does not allow.
            c.denied(cg, "tcp", "127.0.0.1", bad.port)
            c.allowed(cg, "tcp", "127.0.0.1", ok.port)
            holder.kill()
            holder.wait()
            st["pid"] = 0
    check(c.find_sandbox(cg) is None, "poststop left the sandbox")


@test
def daemonset_metrics_addr_ipv6_host(c):
    """--metrics-addr as Kubernetes expands it for an IPv4 and an IPv6
    HOST_IP: egressd starts and serves /livez (the liveness probe) and
    /metrics there. Before issue 26 `$(HOST_IP):9477` became `::1:9477` and
    egressd exited."""
    egressd = {x["name"]: x for x in ds_pod()["spec"]["containers"]}["egressd"]
    args = egressd["args"]
    raw = args[args.index("--metrics-addr") + 1]
    live = egressd["livenessProbe"]
    check("exec" not in live and live.get("httpGet", {}).get("path") == "/livez" and
          live["httpGet"]["port"] == "metrics", "liveness execs into egressd: %r" % live)
    check(egressd["readinessProbe"].get("periodSeconds", 10) >= 30,
          "readiness execs more often than every 30 s")
    for ip in ("127.0.0.1", "::1"):
        port = free_tcp_port()
        addr = k8s_expand(raw, {"HOST_IP": ip}).replace(":9477", ":%d" % port)
        d = os.path.join(c.work, "ds-metrics-%s-%d" % (RAND, port))
        os.makedirs(d)
        bpffs = "/sys/fs/bpf/%s-ds%d" % (RUN_ID, port)
        CLEANUP.push("ds bpffs", shutil.rmtree, bpffs, True)
        logf = open(os.path.join(d, "egressd.log"), "wb")
        p = subprocess.Popen([c.egressd, "--socket", os.path.join(d, "s"), "--bpffs-dir", bpffs,
                              "--state-dir", os.path.join(d, "state"), "--no-syslog",
                              "--metrics-addr", addr] + list(c.dns_args),
                             stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
        host = "[%s]" % ip if ":" in ip else ip

        def get(path):
            with urllib.request.urlopen("http://%s:%d%s" % (host, port, path), timeout=5) as r:
                return r.status, r.read()
        try:
            def up():
                try:
                    return get("/livez") == (200, b"ok\n")
                except OSError:
                    return p.poll() is not None
            ok = wait_until(up, DAEMON_READY_S, 0.1)
            with open(os.path.join(d, "egressd.log"), errors="replace") as f:
                tail = f.read()[-800:]
            check(ok and p.poll() is None, "egressd with --metrics-addr %s (HOST_IP=%s): "
                  "exit %r\n%s" % (addr, ip, p.poll(), tail))
            code, body = get("/metrics")
            check(code == 200 and b"egressd_" in body, "/metrics on %s: %d" % (addr, code))
        finally:
            if p.poll() is None:
                p.terminate()
                p.wait(10)
            logf.close()
            shutil.rmtree(bpffs, True)


@test
def daemonset_policy_tree_from_configmaps(c):
    """egressd's policy tree (--policy-dir, default /etc/egressd/policies) is
    in the pod: one read-only ConfigMap volume per namespace directory. Before,
    nothing was mounted there and every Kubernetes container's policy
    reference failed (test_image runs the pod with one)."""
    egressd = {x["name"]: x for x in ds_pod()["spec"]["containers"]}["egressd"]
    args = egressd["args"]
    tree = args[args.index("--policy-dir") + 1] if "--policy-dir" in args else "/etc/egressd/policies"
    vols = {v["name"]: v for v in ds_pod()["spec"]["volumes"]}
    under = [m for m in egressd["volumeMounts"] if m["mountPath"].startswith(tree + "/")]
    check(under, "nothing mounted under the policy tree %s" % tree)
    for m in under:
        ns = m["mountPath"][len(tree) + 1:]
        check(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", ns), "%s is not a namespace" % ns)
        cm = vols[m["name"]].get("configMap")
        check(cm and cm["name"] == "egressd-policies-" + ns and m.get("readOnly") is True,
              "%s: not the read-only ConfigMap egressd-policies-%s: %r" % (m["mountPath"], ns,
                                                                          vols[m["name"]]))
