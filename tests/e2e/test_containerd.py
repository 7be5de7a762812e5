# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Issue 26 item 1: egressd's OCI hook under real containerd (Debian's
# package, 1.6: no NRI), driven through its CRI socket with the calls the
# kubelet makes, by our client (tests/e2e/cri/cri_client.py, stubs generated
# from tests/e2e/cri/cri_min.proto). The hook reaches the container through
# the CRI plugin's base_runtime_spec (hooks createRuntime and poststop in
# the spec runc gets), the node configuration docs/containers.md documents.
#
# containerd runs with a config, root, state and socket of its own under the
# test's work dir and is killed by pid at the end; images come from no
# registry: a busybox + netprobe rootfs packed as an OCI archive here and
# imported with `ctr images import`, the pause image too.
#
# Run by run.py (harness.runner).

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time

from harness import *  # noqa: F401,F403 (check, run, CLEANUP, ...: harness/__init__.py)

CD_HERE = os.path.dirname(os.path.abspath(__file__))
CD_CLIENT = os.path.join(CD_HERE, "cri", "cri_client.py")
CD_ENV = [None]


def oci_archive(rootfs, ref, cmd):
    """An OCI image archive (oci-layout, index.json, blobs) of rootfs."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as t:
        t.add(rootfs, arcname=".")
    layer = layer.getvalue()
    blobs = {}

    def blob(data, media):
        d = hashlib.sha256(data).hexdigest()
        blobs[d] = data
        return {"mediaType": media, "digest": "sha256:" + d, "size": len(data)}
    cfg = {"architecture": "amd64", "os": "linux",
           "config": {"Cmd": cmd, "Env": ["PATH=/bin"]},
           "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]}}
    man = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
           "config": blob(json.dumps(cfg).encode(), "application/vnd.oci.image.config.v1+json"),
           "layers": [blob(layer, "application/vnd.oci.image.layer.v1.tar")]}
    m = blob(json.dumps(man).encode(), "application/vnd.oci.image.manifest.v1+json")
    m["annotations"] = {"org.opencontainers.image.ref.name": ref,
                        "io.containerd.image.name": ref}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as t:
        def put(name, data):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
        put("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        put("index.json", json.dumps({"schemaVersion": 2, "manifests": [m]}).encode())
        for d, data in blobs.items():
            put("blobs/sha256/" + d, data)
    return out.getvalue()


class Containerd:
    """A containerd of the test's own (config, root, state, socket)."""

    def __init__(self, c):
        self.c = c
        self.dir = os.path.join(c.work, "containerd-" + RAND)
        self.sock = os.path.join(self.dir, "containerd.sock")
        self.pdir = os.path.join(self.dir, "policies")
        self.image = "localhost/egressd-e2e-probe:%s" % RAND
        self.pause = "localhost/egressd-e2e-pause:%s" % RAND
        self.proc = None
        self.seq = 0
        os.makedirs(self.pdir)
        CLEANUP.push("containerd", self.stop)

    def hook_args(self, stage):
        return [os.path.basename(self.c.egressctl), "--socket", self.c.sock, "--timeout", "10",
                "oci-hook", "--policy-dir", self.pdir, stage]

    def put_policy(self, namespace, name, src):
        """<policy-dir>/<namespace>/<name>.json, the layout the hook reads."""
        os.makedirs(os.path.join(self.pdir, namespace), exist_ok=True)
        shutil.copy(src, os.path.join(self.pdir, namespace, name + ".json"))

    def write_config(self):
        spec = json.loads(must(["ctr", "oci", "spec"]).stdout)
        # What the node-setup applies (docs/containers.md, "containerd").
        spec["hooks"] = {st: [{"path": self.c.egressctl, "args": self.hook_args(st),
                               "timeout": 25}] for st in ("createRuntime", "poststop")}
        with open(os.path.join(self.dir, "base-spec.json"), "w") as f:
            json.dump(spec, f)
        d = self.dir
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        cfg = """version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[{cri}]
  sandbox_image = "{pause}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # This test's shell lacks CAP_SYS_RESOURCE: the pause container's -998
  # would fail runc; clamped to containerd's own (test-only, not node config).
  restrict_oom_score_adj = true
  [{cri}.cni]
    bin_dir = "{d}/cni-bin"
    conf_dir = "{d}/cni-conf"
  [{cri}.containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      base_runtime_spec = "{d}/base-spec.json"
      pod_annotations = ["io.egressd.*"]
      container_annotations = ["io.egressd.*"]
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{d}/runc"
""".format(d=d, cri=cri, pause=self.pause)
        with open(os.path.join(d, "config.toml"), "w") as f:
            f.write(cfg)

    def rootfs(self):
        r = os.path.join(self.dir, "rootfs")
        for sub in ("bin", "tmp", "proc", "dev", "sys", "etc"):
            os.makedirs(os.path.join(r, sub), exist_ok=True)
        shutil.copy("/bin/busybox", os.path.join(r, "bin", "busybox"))
        for applet in ("sh", "sleep", "cat"):
            os.symlink("busybox", os.path.join(r, "bin", applet))
        shutil.copy(self.c.netprobe, os.path.join(r, "netprobe"))
        for line in run(["ldd", self.c.netprobe]).stdout.splitlines():
            parts = line.split()
            lib = parts[2] if len(parts) >= 3 and parts[1] == "=>" else parts[0]
            if lib.startswith("/"):
                os.makedirs(os.path.dirname(r + lib), exist_ok=True)
                shutil.copy(lib, r + lib)
        return r

    def start(self):
        self.write_config()
        self.logf = open(os.path.join(self.dir, "containerd.log"), "ab")
        self.proc = subprocess.Popen(["containerd", "--config",
                                      os.path.join(self.dir, "config.toml")],
                                     stdin=subprocess.DEVNULL, stdout=self.logf,
                                     stderr=self.logf, start_new_session=True)
        log("containerd pid %d in %s" % (self.proc.pid, self.dir))
        ok = wait_until(lambda: self.proc.poll() is not None or
                        self.cri("Version", {}, check_rc=False)[0] == 0, 30, 0.2)
        check(ok and self.proc.poll() is None, "containerd did not serve CRI:\n" + self.tail())
        rootfs = self.rootfs()
        for ref, cmd in ((self.image, ["/netprobe"]), (self.pause, ["/bin/sleep", "3600"])):
            arch = os.path.join(self.dir, ref.split(":")[0].rsplit("/", 1)[1] + ".tar")
            with open(arch, "wb") as f:
                f.write(oci_archive(rootfs, ref, cmd))
            must(["ctr", "--address", self.sock, "-n", "k8s.io", "images", "import",
                  "--no-unpack", arch], timeout=60)
        return self

    def tail(self):
        with open(os.path.join(self.dir, "containerd.log"), errors="replace") as f:
            return f.read()[-2000:]

    def cri(self, method, req, check_rc=True, timeout=60):
        env = dict(os.environ, CRI_GEN=os.path.join(self.dir, "gen"))
        r = subprocess.run(["/usr/bin/python3", CD_CLIENT, self.sock, method],
                           input=json.dumps(req), capture_output=True, text=True,
                           timeout=timeout, env=env)
        if check_rc:
            check(r.returncode == 0, "CRI %s: %s\ncontainerd log:\n%s" %
                  (method, r.stderr.strip()[-1500:], self.tail()[-1500:]))
        return r.returncode, (json.loads(r.stdout) if r.returncode == 0 else r.stderr)

    def pod(self, namespace, annotations):
        """RunPodSandbox as the kubelet does for a hostNetwork pod."""
        self.seq += 1
        name = "probe-%s-%d" % (RAND, self.seq)
        logdir = os.path.join(self.dir, "logs", name)
        os.makedirs(logdir)
        cfg = {"metadata": {"name": name, "namespace": namespace,
                            "uid": "uid-%s-%d" % (RAND, self.seq), "attempt": 0},
               "log_directory": logdir,  # no hostname: the node's UTS namespace
               "labels": {"io.kubernetes.pod.name": name},
               "annotations": annotations,
               "linux": {"cgroup_parent": "/egressd-e2e-cri-%s" % RAND,
                         "security_context": {"namespace_options": {"network": "NODE",
                                                                    "pid": "CONTAINER"}}}}
        _, resp = self.cri("RunPodSandbox", {"config": cfg})
        return resp["pod_sandbox_id"], cfg

    def container(self, pod_id, pod_cfg, args):
        req = {"pod_sandbox_id": pod_id, "sandbox_config": pod_cfg,
               "config": {"metadata": {"name": "probe", "attempt": 0},
                          "image": {"image": self.image}, "command": ["/netprobe"],
                          "args": args, "log_path": "probe.log",
                          "linux": {"security_context": {"namespace_options": {
                              "network": "NODE", "pid": "CONTAINER"}}}}}
        _, resp = self.cri("CreateContainer", req)
        return resp["container_id"]

    def exit_code(self, cid, timeout=20):
        st = {}

        def done():
            st.update(self.cri("ContainerStatus", {"container_id": cid})[1]["status"])
            return st.get("state") == "CONTAINER_EXITED"
        check(wait_until(done, timeout, 0.2), "container %s did not exit: %r" % (cid, st))
        return st.get("exit_code", 0)

    def remove_pod(self, pod_id):
        self.cri("StopPodSandbox", {"pod_sandbox_id": pod_id})
        self.cri("RemovePodSandbox", {"pod_sandbox_id": pod_id})

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        # The shims are in their own sessions: only ours, by the socket
        # path in their command line (never a system containerd's).
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and \
                    self.sock.encode() in argv:
                try:
                    os.kill(int(p), 9)
                except OSError:
                    pass
        for m in reversed(run(["findmnt", "-rn", "-o", "TARGET"]).stdout.split()):
            if m.startswith(self.dir):
                run(["umount", "-l", m])
        cg = os.path.join(self.c.cg_mount, "egressd-e2e-cri-%s" % RAND)
        if os.path.isdir(cg):
            cgroup_remove_tree(cg)


def containerd_need(c):
    missing = [b for b in ("containerd", "ctr", "runc") if not shutil.which(b)]
    r = subprocess.run(["/usr/bin/python3", "-c", "import grpc, grpc_tools"],
                       capture_output=True)
    if r.returncode:
        missing.append("python3-grpcio/python3-grpc-tools")
    if missing:
        prerequisite_missing("containerd tests need %s (tools/install-deps)" % ", ".join(missing))
    if CD_ENV[0] is None:
        cd = Containerd(c)
        # egressd resolves namespaced names in its --policy-dir: use the
        # suite's tree when another test set one, else restart with ours.
        args = list(c.daemon.extra_args)
        if "--policy-dir" in args:
            cd.pdir = args[args.index("--policy-dir") + 1]
        else:
            restart_daemon(c, args + ["--policy-dir", cd.pdir])
        CD_ENV[0] = cd.start()
    return CD_ENV[0]


@test
def containerd_cri_pod_confined_before_first_instruction(c):
    """A pod-shaped container started through containerd's CRI socket: its
    first instruction dials a denied address (refused, EPERM); the same
    container dialling the allowed one connects; RemovePodSandbox leaves no
    sandbox."""
    cd = containerd_need(c)
    ok, bad = c.tcp("cd-ok"), c.tcp("cd-bad")
    cd.put_policy("team-a", "probe", c.policy(["127.0.0.1:%d" % ok.port], tenant="cd-" + RAND))
    before = {s["id"] for s in c.list_json()}
    for port, want in ((bad.port, 1), (ok.port, 0)):
        a0, b0 = ok.accepted, bad.accepted
        pod, cfg = cd.pod("team-a", {"io.egressd.policy": "probe"})
        try:
            cid = cd.container(pod, cfg, ["tcp", "127.0.0.1", str(port)])
            t0 = time.monotonic()
            cd.cri("StartContainer", {"container_id": cid})
            log("StartContainer took %.2f s" % (time.monotonic() - t0))
            check(cd.exit_code(cid) == want, "netprobe to %d exit %r, expected %d"
                  % (port, cd.exit_code(cid), want))
            if want:
                check(bad.accepted == b0, "the denied server accepted a connection")
            else:
                check(ok.accepted > a0, "the allowed server saw no connection")
            cd.cri("StopContainer", {"container_id": cid, "timeout": 1})
        finally:
            cd.remove_pod(pod)
        check(wait_until(lambda: not [s for s in c.list_json() if s["id"] not in before], 10),
              "sandboxes left after RemovePodSandbox: %r" %
              [s for s in c.list_json() if s["id"] not in before])


@test
def containerd_cri_hook_failure_fails_start(c):
    """Fail closed: a policy the hook refuses (invalid JSON) or egressd's
    socket gone fails CreateContainer/StartContainer; the container's
    program never runs (the allowed server sees nothing)."""
    cd = containerd_need(c)
    ok = c.tcp("cd-ok2")
    cd.put_policy("team-a", "good", c.policy(["127.0.0.1:%d" % ok.port], tenant="cd-" + RAND))
    broken = os.path.join(cd.pdir, "team-a", "broken.json")
    with open(broken, "w") as f:
        f.write('{"tenant": "x", "network": ')
    for what, pol in (("bad policy", "broken"), ("missing policy", "nosuch"),
                      ("egressd down", "good")):
        a0 = ok.accepted
        pod, cfg = cd.pod("team-a", {"io.egressd.policy": pol})
        moved = None
        try:
            cid = cd.container(pod, cfg, ["tcp", "127.0.0.1", str(ok.port)])
            if what == "egressd down":
                moved = c.sock + ".away-" + RAND
                os.rename(c.sock, moved)
            rc, err = cd.cri("StartContainer", {"container_id": cid}, check_rc=False)
            check(rc != 0, "%s: StartContainer succeeded" % what)
            log("%s: %s" % (what, str(err).strip()[-300:]))
            time.sleep(0.5)
            check(ok.accepted == a0, "%s: the container ran and connected" % what)
        finally:
            if moved:
                os.rename(moved, c.sock)
            cd.remove_pod(pod)
