# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""A real gVisor container confined through the OCI hook (issue 25 item 4;
docs/containers.md "gVisor").

Debian's runsc runs an OCI bundle (a static busybox rootfs) with
`--network=sandbox` in G, a namespace of test_netdev.py's topology: its
netstack writes the container's frames through a packet socket on vg, so
the device the hook must find is vg's peer vh in H. The bundle's hooks are
dist/oci's (createRuntime and poststop, pointed at this build). One
container run makes every probe (nc to an allowed and two denied
destinations) and then waits, so that the test lists its sandbox while it
runs; what arrived is checked in S (the servers' byte counts, the capture of
sh), never by the container's word. The same container with no policy
reaches every destination (the twin). Refusals (two veths, a peer in a
namespace with no name, a bundle naming another namespace) start no
container and attach nothing.

runsc (20221219) takes a namespace for the host's when
/proc/sys/net/core/rmem_default exists, which on kernels that made it per
namespace is true of every one; it then refuses --network=sandbox. Each
run hides /proc/sys/net from runsc in a mount namespace of its own
(run_runsc()); safe here because the bundle always names G.
"""
import json
import os
import select
import shutil
import subprocess
import time

from harness import *
from test_netdev import G_IP, H_IP, S_IP, S_IP2, Topo, sh

RUN_S = 60   # one container's probes (two denied connects of 3 s each, one after the other:
             # busybox sh's `wait` for background probes once hung under gVisor)
PROBES = r"""
r() { if echo "ND-$1." | nc -w 3 $2 $3 >/dev/null 2>&1; then echo "RS-RESULT $1 ok"
      else echo "RS-RESULT $1 fail"; fi; }
echo RS-START
r rsA%(n)d %(s)s 8000; r rsD%(n)d %(s)s 8001; r rsP%(n)d %(s2)s 8000
echo RS-DONE
sleep 300
"""
TREE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_seq = [0]


def need_runsc():
    for path in ("/bin/busybox",):
        if not os.path.exists(path):
            raise TestFailure("no %s (busybox-static; tools/install-deps)" % path)
    if not shutil.which("runsc"):
        raise TestFailure("no runsc (tools/install-deps --kernels installs it)")


class Bundle:
    """An OCI bundle: busybox rootfs, config.json from `runsc spec`."""

    def __init__(self, c, topo, policy=None, hook_pre=None, netns=None):
        _seq[0] += 1
        self.c, self.n = c, _seq[0]
        self.id = "rs%d-%s" % (self.n, RUN_ID)
        self.dir = os.path.join(c.work, "runsc-%d" % self.n)
        self.state = os.path.join(c.work, "runsc-state")
        root = os.path.join(self.dir, "rootfs")
        os.makedirs(os.path.join(root, "bin"))
        for d in ("proc", "dev", "sys", "tmp"):
            os.makedirs(os.path.join(root, d))
        shutil.copy("/bin/busybox", os.path.join(root, "bin", "busybox"))
        for a in ("sh", "nc", "echo", "sleep"):
            os.symlink("busybox", os.path.join(root, "bin", a))
        must(["runsc", "spec", "--bundle", self.dir, "--", "/bin/sh", "-c",
              PROBES % {"n": self.n, "s": S_IP, "s2": S_IP2}])
        with open(os.path.join(self.dir, "config.json")) as f:
            cfg = json.load(f)
        cfg["process"]["terminal"] = False
        cfg["root"] = {"path": "rootfs", "readonly": True}
        for ns in cfg["linux"]["namespaces"]:
            if ns["type"] == "network":
                ns["path"] = netns or "/run/netns/" + topo.g
        if policy:
            cfg["annotations"] = {"io.egressd.policy": policy}
        cfg["hooks"] = self.hooks(hook_pre)
        with open(os.path.join(self.dir, "config.json"), "w") as f:
            json.dump(cfg, f)
        CLEANUP.push("runsc container %s" % self.id, self.delete)

    def hooks(self, hook_pre):
        """dist/oci's hooks.d entries as the bundle's hooks, at this build."""
        out = {}
        for name in sorted(os.listdir(os.path.join(TREE, "dist", "oci"))):
            with open(os.path.join(TREE, "dist", "oci", name)) as f:
                h = json.load(f)
            args = h["hook"]["args"]
            args[args.index("--socket") + 1] = self.c.sock
            args[args.index("--policy-dir") + 1] = self.c.work
            hook = {"path": self.c.egressctl, "args": args, "timeout": h["hook"]["timeout"]}
            if hook_pre and "createRuntime" in h["stages"]:
                # A command before the hook, then the hook itself.
                hook = {"path": "/bin/sh", "args": ["sh", "-c", hook_pre + ' && exec "$@"',
                                                    "sh", self.c.egressctl] + args[1:]}
            for st in h["stages"]:
                out.setdefault(st, []).append(hook)
        return out

    def start(self):
        """`runsc run` with stdout piped (see the module's note on /proc/sys/net)."""
        cmd = ("mount -t tmpfs -o size=4k,mode=0555 none /proc/sys/net && exec runsc "
               "--root %s --network=sandbox run --bundle %s %s" % (self.state, self.dir,
                                                                   self.id))
        self.proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private",
                                      "sh", "-c", cmd], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        return self

    def lines_until(self, last, timeout):
        """The container's stdout lines up to last (or its exit, or timeout).
        os.read, not readline: a buffered reader keeps lines select() no
        longer sees."""
        got, end, fd = [], time.monotonic() + timeout * TIME_SCALE, self.proc.stdout.fileno()
        buf = b""
        while time.monotonic() < end:
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                got.append(line.decode(errors="replace").strip())
                if got[-1] == last:
                    return got
            r, _, _ = select.select([fd], [], [], max(0, end - time.monotonic()))
            if not r:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
        return got

    def results(self, lines):
        return dict(l.split()[1:3] for l in lines if l.startswith("RS-RESULT "))

    def stop(self):
        """Kill the container; `runsc run` deletes it (poststop runs)."""
        run(["runsc", "--root", self.state, "kill", self.id, "KILL"])
        try:
            self.proc.wait(30 * TIME_SCALE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        return self.proc.returncode

    def refused(self):
        """Run it expecting the hook to refuse it: runsc's exit and stderr."""
        self.start()
        out = self.lines_until("RS-DONE", RUN_S)
        try:
            self.proc.wait(30 * TIME_SCALE)
        except subprocess.TimeoutExpired:
            self.stop()
        err = self.proc.stderr.read()
        check("RS-START" not in out, "container %s ran although its hook must refuse it: %s"
              % (self.id, out))
        check(self.proc.returncode != 0, "runsc exited 0 for a refused container")
        # Nothing attached, not even for a moment (a poststop may have run).
        check(not sandboxes_of(self.c, self), "refused container %s has a sandbox" % self.id)
        check(not [r for r in obs_audit(self.c) if r.get("execution_id") == self.id],
              "refused container %s has an audit record: it was attached" % self.id)
        return err

    def delete(self):
        if getattr(self, "proc", None) and self.proc.poll() is None:
            self.stop()
        run(["runsc", "--root", self.state, "delete", "--force", self.id])


def restore_g(topo):
    """runsc takes vg's addresses and routes for its own stack (and cannot
    remove a point-to-point one, test_netdev.py's): a plain /24 for it."""
    G = ["ip", "-n", topo.g]
    run(G + ["addr", "del", G_IP, "peer", H_IP, "dev", "vg"])
    run(G + ["addr", "add", G_IP + "/24", "dev", "vg"])
    run(G + ["route", "replace", "default", "via", H_IP, "dev", "vg"])


def device_sandboxes(c):
    return [s for s in c.list_json() if s.get("kind") == "netdev"]


def sandboxes_of(c, b):
    """Every sandbox (device or cgroup) of container b."""
    return [s for s in c.list_json() if (s.get("container") or {}).get("id") == b.id]


def arrivals(topo, n):
    """What S saw of container n: markers that arrived, per tag."""
    frames = topo.frames()
    return {f["marker"] for f in frames if f.get("marker") and not f["out"] and
            f["marker"].endswith("%d" % n)}, frames


def syns_to(frames, dst, port):
    return [f for f in frames if f.get("src") == G_IP and f.get("dst") == dst and
            f.get("dport") == port and not f["out"]]


@test(needs=("runsc",))
def runsc_container_confined_at_its_veth(c):
    need_runsc()
    with Topo() as topo:
        restore_g(topo)
        topo.frames()
        pol = c.policy(["tcp/%s:8000" % S_IP], tenant="rs-" + RUN_ID[-8:])
        b = Bundle(c, topo, policy=pol).start()
        lines = b.lines_until("RS-DONE", RUN_S)
        if "RS-DONE" not in lines:
            b.stop()
            raise TestFailure("the gVisor container did not finish its probes: %s; runsc "
                              "(exit %s): %s" % (lines, b.proc.returncode,
                                                 b.proc.stderr.read()[-1500:]))
        res = b.results(lines)
        seen, frames = arrivals(topo, b.n)
        sbs = [s for s in sandboxes_of(c, b) if s.get("kind") == "netdev"]
        check(len(sbs) == 1, "no device sandbox for container %s while it runs: %s" %
              (b.id, device_sandboxes(c)))
        sb = sbs[0]
        check(sb["netdev"] == "vh" and sb["netns"] == topo.netns,
              "the sandbox is on %s@%s, not vg's peer vh@%s" % (sb["netdev"], sb["netns"],
                                                               topo.netns))
        check(sb["execution_id"] == b.id, "execution_id %r, not the container id" %
              sb["execution_id"])
        # Arrival at the server decides, not what the container printed.
        check("ND-rsA%d" % b.n in seen and res.get("rsA%d" % b.n) == "ok",
              "the allowed destination did not get the container's bytes (S saw %s; the "
              "container said %s)" % (sorted(seen), res))
        check("ND-rsD%d" % b.n not in seen and not syns_to(frames, S_IP, 8001),
              "a denied port (%s:8001) got the container's packets" % S_IP)
        check("ND-rsP%d" % b.n not in seen and not syns_to(frames, S_IP2, 8000),
              "a denied address (%s:8000) got the container's packets" % S_IP2)
        check(res.get("rsD%d" % b.n) == "fail" and res.get("rsP%d" % b.n) == "fail",
              "the container connected to a denied destination: %s" % res)
        b.stop()
        check(wait_until(lambda: not [s for s in device_sandboxes(c)
                                      if s["id"] == sb["id"]], 10),
              "sandbox %d still listed after the container was deleted" % sb["id"])
        recs = [r for r in obs_audit(c) if r.get("sandbox") == sb["id"] and
                r.get("type") == "execution"]
        check(recs and recs[-1].get("status") == "container stopped" and
              recs[-1].get("execution_id") == b.id and
              (recs[-1].get("container") or {}).get("id") == b.id,
              "no audit record of container %s closed by its poststop: %s" % (b.id, recs[-1:]))

        # The twin: the same container with no policy reaches all three.
        restore_g(topo)
        t = Bundle(c, topo).start()
        lines = t.lines_until("RS-DONE", RUN_S)
        seen, _ = arrivals(topo, t.n)
        t.stop()
        check({"ND-rsA%d" % t.n, "ND-rsD%d" % t.n, "ND-rsP%d" % t.n} <= seen,
              "unconfined, the container did not reach every server (S saw %s; it said %s): "
              "the confined run proves nothing" % (sorted(seen), t.results(lines)))
        check(not sandboxes_of(c, t), "a container with no policy got a sandbox")


class PairTopo:
    """G and H joined by vg/vh, nothing behind H: what the refusals need
    (Topo's servers and warm-up cost ~15 s under TCG)."""
    seq = 0

    def __init__(self):
        PairTopo.seq += 1
        t = IF_TAG[:7] + str(PairTopo.seq)
        self.g, self.h, self.s = ("rs%s%d-%s" % (k, PairTopo.seq, RUN_ID) for k in "ghs")
        self.netns = "/run/netns/" + self.h
        CLEANUP.push("runsc refusal topology %d" % PairTopo.seq, self.destroy)
        for n in (self.g, self.h, self.s):
            sh("ip", "netns", "add", n)
        sh("ip", "link", "add", "rsg" + t, "type", "veth", "peer", "name", "rsh" + t)
        sh("ip", "link", "set", "rsg" + t, "netns", self.g, "name", "vg")
        sh("ip", "link", "set", "rsh" + t, "netns", self.h, "name", "vh")
        sh("ip", "-n", self.g, "addr", "add", G_IP + "/24", "dev", "vg")
        sh("ip", "-n", self.h, "addr", "add", H_IP + "/24", "dev", "vh")
        for n, d in ((self.g, "vg"), (self.h, "vh")):
            sh("ip", "-n", n, "link", "set", d, "up")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def destroy(self):
        for n in (self.g, self.h, self.s):
            run(["ip", "netns", "del", n])


@test(needs=("runsc",))
def runsc_hook_refuses_what_it_cannot_confine(c):
    need_runsc()
    with PairTopo() as topo:
        pol = c.policy(["tcp/%s:8000" % S_IP], tenant="rs-" + RUN_ID[-8:])
        G, H = ["ip", "-n", topo.g], ["ip", "-n", topo.h]
        # A container of a Kubernetes namespace: no device sandbox from the
        # policy tree, and never a cgroup sandbox that would not see it.
        k = Bundle(c, topo, policy=pol)
        cfgp = os.path.join(k.dir, "config.json")
        with open(cfgp) as f:
            cfg = json.load(f)
        cfg["annotations"] = {"io.kubernetes.pod.namespace": "rsns", "io.egressd.policy": "p"}
        with open(cfgp, "w") as f:
            json.dump(cfg, f)
        err = k.refused()
        check("a gVisor container of a Kubernetes namespace" in err,
              "a gVisor container of a Kubernetes namespace: runsc said %r" % err[-600:])
        check(not sandboxes_of(c, k), "a refused container left a sandbox: %s" %
              sandboxes_of(c, k))
        # Two veths: gVisor would send through both, one unconfined.
        sh(*H, "link", "add", "vx2", "type", "veth", "peer", "name", "vg2", "netns", topo.g)
        b = Bundle(c, topo, policy=pol)
        err = b.refused()
        check("two veths" in err, "two veths: runsc said %r" % err[-600:])
        check(not sandboxes_of(c, b), "a refused container left a sandbox")
        # The second veth's peer in a namespace nobody can name.
        sh(*H, "link", "del", "vx2")
        holder = subprocess.Popen(["unshare", "--net", "sleep", "120"])
        CLEANUP.push("netns holder", lambda: (holder.kill(), holder.wait()))
        check(wait_until(lambda: os.readlink("/proc/%d/ns/net" % holder.pid) !=
                         os.readlink("/proc/self/ns/net"), 5), "unshare --net did not start")
        sh(*H, "link", "del", "vh")
        sh(*G, "link", "add", "vg", "type", "veth", "peer", "name", "vu", "netns",
           str(holder.pid))
        b = Bundle(c, topo, policy=pol)
        err = b.refused()
        check("neither the hook's nor one of /run/netns" in err,
              "a peer in an unnamed namespace: runsc said %r" % err[-600:])
        check(not sandboxes_of(c, b), "a refused container left a sandbox")
        # A bundle whose config.json names another namespace than the one its
        # sandbox runs in (rewritten after runsc read it).
        other = "/run/netns/" + topo.s
        pre = ("python3 -c 'import json,sys; p=sys.argv[1]+\"/config.json\"; c=json.load("
               "open(p)); [n.update(path=sys.argv[2]) for n in c[\"linux\"][\"namespaces\"] "
               "if n[\"type\"]==\"network\"]; json.dump(c,open(p,\"w\"))' %s %s")
        b2 = Bundle(c, topo, policy=pol, hook_pre=pre % ("BUNDLE", other))
        cfgp = os.path.join(b2.dir, "config.json")
        with open(cfgp) as f:
            cfg = json.load(f)
        for hk in cfg["hooks"]["createRuntime"]:
            hk["args"][2] = hk["args"][2].replace("BUNDLE", b2.dir)
        with open(cfgp, "w") as f:
            json.dump(cfg, f)
        err = b2.refused()
        check("the bundle names network namespace %s but its sandbox process is in another"
              % other in err, "a bundle naming another namespace: runsc said %r" % err[-600:])
        check(not sandboxes_of(c, b2), "a refused container left a sandbox")
