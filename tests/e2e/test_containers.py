# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Containers (issue 14): the OCI hook with real Podman and runc on a busybox
# rootfs, the OCI seccomp profile loaded into runc containers, promtool on
# /metrics, and the CLI for automation. Run by run.py (harness.runner).

import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


OCI_ANNOTATION = "io.egressd.policy"
PODMAN_TIMEOUT_S = 60


OCI_POLICY_DIR = [None]  # c.work, where c.policy() writes: the hooks' --policy-dir


def oci_hook_argv(c, stage, *opts):
    """egressctl oci-hook as a runtime runs it, with the tests' policy dir."""
    return [c.egressctl, "--socket", c.sock, "oci-hook", "--policy-dir", c.work] + \
        list(opts) + [stage]


def oci_need(c):
    """Podman and runc, or a failure (never a skip: install-deps installs them)."""
    missing = [b for b in ("podman", "runc") if not shutil.which(b)]
    if missing:
        raise TestFailure("%s not installed (tools/install-deps installs them)"
                          % ", ".join(missing))
    if not os.path.exists("/bin/busybox"):
        raise TestFailure("no /bin/busybox (busybox-static; tools/install-deps)")
    if getattr(c, "oci", None) is None:
        OCI_POLICY_DIR[0] = c.work
        c.oci = OciEnv(c)
    return c.oci


class OciEnv:
    """A busybox rootfs with netprobe, a private podman storage and hooks.d."""

    def __init__(self, c):
        self.c = c
        self.dir = os.path.join(c.work, "oci")
        self.rootfs = os.path.join(self.dir, "rootfs")
        self.root = os.path.join(self.dir, "storage")
        self.runroot = os.path.join(self.dir, "run")
        self.hooks = os.path.join(self.dir, "hooks.d")
        self.seq = 0
        for d in (self.rootfs, self.hooks, os.path.join(self.rootfs, "bin"),
                  os.path.join(self.rootfs, "tmp"), os.path.join(self.rootfs, "proc"),
                  os.path.join(self.rootfs, "dev"), os.path.join(self.rootfs, "sys")):
            os.makedirs(d, exist_ok=True)
        CLEANUP.push("podman storage", self.reset_storage)
        shutil.copy("/bin/busybox", os.path.join(self.rootfs, "bin", "busybox"))
        for applet in ("sh", "cat", "echo", "touch", "true", "sleep"):
            os.symlink("busybox", os.path.join(self.rootfs, "bin", applet))
        # netprobe and the libraries it links (ldd), at the same paths.
        shutil.copy(c.netprobe, os.path.join(self.rootfs, "netprobe"))
        for line in run(["ldd", c.netprobe]).stdout.splitlines():
            parts = line.split()
            lib = parts[2] if len(parts) >= 3 and parts[1] == "=>" else parts[0]
            if lib.startswith("/"):
                dst = self.rootfs + lib
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copy(lib, dst)
        # The shipped hooks.d files, pointed at this build and this egressd.
        here = os.path.dirname(os.path.abspath(__file__))
        dist = os.path.join(here, "..", "..", "dist", "oci")
        self.hook_files = sorted(glob.glob(os.path.join(dist, "*.json")))
        check(len(self.hook_files) == 2, "dist/oci has %d hooks.d files, expected 2" %
              len(self.hook_files))
        for path in self.hook_files:
            with open(path) as f:
                h = json.load(f)
            self.rewrite_hook(h, c.egressctl, c.sock)
            with open(os.path.join(self.hooks, os.path.basename(path)), "w") as f:
                json.dump(h, f)

    @staticmethod
    def rewrite_hook(h, egressctl, sock):
        h["hook"]["path"] = egressctl
        args = h["hook"]["args"]
        i = args.index("--socket")
        args[i + 1] = sock
        # The tests' policy files are written to c.work (root's, 0700).
        i = args.index("--policy-dir")
        args[i + 1] = OCI_POLICY_DIR[0]

    def reset_storage(self):
        if os.path.isdir(self.root):
            run(self.podman_base() + ["rm", "-af"], timeout=PODMAN_TIMEOUT_S)
            run(["umount", "-R", self.runroot])  # podman's own shm mounts, if any
        shutil.rmtree(self.root, True)
        shutil.rmtree(self.runroot, True)

    def podman_base(self, hooks=None):
        return ["podman", "--root", self.root, "--runroot", self.runroot,
                "--storage-driver", "vfs", "--runtime", "runc", "--cgroup-manager",
                "cgroupfs", "--events-backend", "none",
                "--hooks-dir", hooks or self.hooks]

    def run(self, script, policy=None, extra=(), hooks=None, timeout=PODMAN_TIMEOUT_S,
            rootfs=None):
        """podman run --rm a /bin/sh -c script container (on the busybox
        rootfs, or rootfs); the CompletedProcess."""
        self.seq += 1
        name = "%s-%d" % (RUN_ID, self.seq)
        argv = self.podman_base(hooks) + [
            "run", "--rm", "--name", name, "--network", "host",
            "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
        if policy:
            argv += ["--annotation", "%s=%s" % (OCI_ANNOTATION, policy)]
        argv += list(extra) + ["--rootfs", rootfs or self.rootfs, "/bin/sh", "-c", script]
        log("podman: %s" % " ".join(argv))
        try:
            r = run(argv, timeout=timeout)
        except subprocess.TimeoutExpired:
            run(self.podman_base() + ["rm", "-f", name])
            raise TestFailure("podman run %s did not finish within %d s" % (name, timeout))
        log("podman %s -> %d %r %r" % (name, r.returncode, r.stdout.strip()[-500:],
                                      r.stderr.strip()[-500:]))
        return r


def probe_lines(out):
    """netprobe result lines ("ok", "err EPERM") of a container's stdout."""
    return [" ".join(l.split()[:2]) for l in out.splitlines() if l.strip() and
            (l.startswith("ok") or l.startswith("err"))]


def our_sandboxes(c, before):
    return [s for s in c.list_json() if s["id"] not in before]


@test
def oci_hook_confines_before_first_connect(c):
    env = oci_need(c)
    allowed, denied = c.tcp("oci-allow"), c.tcp("oci-deny")
    pol = c.policy(["127.0.0.1:%d" % allowed.port], tenant="oci-" + RAND)
    before = {s["id"] for s in c.list_json()}
    a0, d0 = allowed.accepted, denied.accepted
    # The command's very first instruction is the denied connect.
    r = env.run("/netprobe tcp 127.0.0.1 %d; /netprobe tcp 127.0.0.1 %d; "
                "cat /proc/self/cgroup" % (denied.port, allowed.port), policy=pol)
    res = probe_lines(r.stdout)
    check(r.returncode in (0, 1) and len(res) == 2,
          "podman run: exit %d, out %r, err %r" % (r.returncode, r.stdout, r.stderr[-800:]))
    check(res[0] == "err EPERM", "the container's first connect, to a denied port: %r" % res[0])
    check(denied.accepted == d0, "the denied server accepted a connection")
    check(res[1] == "ok" and allowed.accepted > a0,
          "the allowed connect: %r (accepted %d -> %d)" % (res[1], a0, allowed.accepted))
    # poststop ran: the sandbox is gone with the container.
    check(wait_until(lambda: not our_sandboxes(c, before), 5),
          "the container's sandbox is still listed after exit: %r" % our_sandboxes(c, before))


@test
def oci_hook_unannotated_container_untouched(c):
    env = oci_need(c)
    a, b = c.tcp("oci-free-a"), c.tcp("oci-free-b")
    before = {s["id"] for s in c.list_json()}
    seen = []

    def watch():  # no sandbox appears while it runs
        end = time.monotonic() + 30
        while not stop and time.monotonic() < end:
            seen.extend(our_sandboxes(c, before))
            time.sleep(0.1)
    stop = False
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        r = env.run("/netprobe tcp 127.0.0.1 %d; /netprobe tcp 127.0.0.1 %d; sleep 0.5"
                    % (a.port, b.port))
    finally:
        stop = True
        t.join(5)
    check(probe_lines(r.stdout) == ["ok", "ok"],
          "an unannotated container: exit %d, %r %r" % (r.returncode, r.stdout, r.stderr[-500:]))
    check(not seen, "a sandbox appeared for an unannotated container: %r" % seen[:1])


@test
def oci_hook_fails_closed(c):
    env = oci_need(c)
    bad = c.policy(None, raw='{"tenant": "x", "network": {"default": "allow-all"}}')
    marker = os.path.join(env.rootfs, "tmp", "ran-%s" % RAND)
    before = {s["id"] for s in c.list_json()}
    cases = [("an invalid policy file", bad),
             ("a missing policy file", os.path.join(c.work, "no-such-policy.json")),
             ("a relative policy path", "policy.json")]
    for what, pol in cases:
        r = env.run("touch /tmp/%s" % os.path.basename(marker), policy=pol)
        check(r.returncode != 0, "podman run with %s succeeded: %r" % (what, r.stdout))
        check(not os.path.exists(marker), "the command ran despite %s" % what)
        check("oci-hook createRuntime" in r.stderr,
              "podman's error does not carry the hook's reason for %s: %r"
              % (what, r.stderr[-600:]))
    # egressd down: the same, fail closed.
    hooks = os.path.join(env.dir, "hooks-nosock")
    os.makedirs(hooks, exist_ok=True)
    for path in env.hook_files:
        with open(path) as f:
            h = json.load(f)
        env.rewrite_hook(h, c.egressctl, os.path.join(c.work, "nobody.sock"))
        with open(os.path.join(hooks, os.path.basename(path)), "w") as f:
            json.dump(h, f)
    good = c.policy(["127.0.0.1:1"])
    r = env.run("touch /tmp/%s" % os.path.basename(marker), policy=good, hooks=hooks)
    check(r.returncode != 0 and not os.path.exists(marker),
          "podman run with egressd unreachable: exit %d, marker %s" %
          (r.returncode, os.path.exists(marker)))
    check(not our_sandboxes(c, before), "a failed start left a sandbox: %r" %
          our_sandboxes(c, before))
    # Sanity twin: the same command with a good policy runs.
    r = env.run("touch /tmp/%s" % os.path.basename(marker), policy=good)
    check(r.returncode == 0 and os.path.exists(marker),
          "a good policy: exit %d, %r" % (r.returncode, r.stderr[-500:]))
    os.unlink(marker)


@test
def oci_hook_stdin_contract(c):
    """The hook alone, as a runtime calls it: state JSON on stdin."""
    cg = c.mkcgroup("ocistate")
    CLEANUP.push("cgroup", cgroup_remove_tree, cg)
    pol = c.policy(["127.0.0.1:1"])
    rel = cg[len(c.cg_mount):]
    bundle = os.path.join(c.work, "bundle-%s" % RAND)
    os.makedirs(bundle, exist_ok=True)
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump({"ociVersion": "1.0.2", "linux": {"cgroupsPath": rel}}, f)
    holder = subprocess.Popen(["sleep", "30"], preexec_fn=join_cgroup_fn(cg))
    CLEANUP.push("holder", lambda: (holder.kill(), holder.wait()))

    def hook(stage, state):
        return subprocess.run(oci_hook_argv(c, stage),
                              input=json.dumps(state) if isinstance(state, dict) else state,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=CTL_TIMEOUT_S)
    st = {"ociVersion": "1.0.2", "id": "c-" + RAND, "status": "created", "pid": holder.pid,
          "bundle": bundle, "annotations": {OCI_ANNOTATION: pol}}
    try:
        r = hook("createRuntime", st)
        check(r.returncode == 0, "createRuntime: %d %r" % (r.returncode, r.stderr))
        check(c.find_sandbox(cg) is not None, "createRuntime did not attach %s" % cg)
        # A retried hook is harmless.
        r = hook("createRuntime", st)
        check(r.returncode == 0, "createRuntime again: %d %r" % (r.returncode, r.stderr))
        c.denied(cg, "tcp", "127.0.0.1", c.tcp("oci-state").port)
        # poststop finds the cgroup from config.json (the process is gone).
        r = hook("poststop", dict(st, status="stopped", pid=0))
        check(r.returncode == 0, "poststop: %d %r" % (r.returncode, r.stderr))
        check(c.find_sandbox(cg) is None, "poststop did not detach %s" % cg)
        r = hook("poststop", dict(st, status="stopped", pid=0))
        check(r.returncode == 0, "poststop of a gone sandbox: %d %r" % (r.returncode, r.stderr))
        # No annotation: nothing, exit 0. Garbage: refused.
        r = hook("createRuntime", dict(st, annotations={}))
        check(r.returncode == 0 and c.find_sandbox(cg) is None,
              "unannotated createRuntime: %d %r" % (r.returncode, r.stderr))
        for bad in ("not json", json.dumps([1]), json.dumps(dict(st, pid=0)),
                    json.dumps(dict(st, annotations={OCI_ANNOTATION: 7}))):
            r = hook("createRuntime", bad)
            check(r.returncode != 0 and "oci-hook createRuntime" in r.stderr,
                  "createRuntime with state %r: %d %r" % (bad[:60], r.returncode, r.stderr))
        check(c.find_sandbox(cg) is None, "a refused state attached %s" % cg)
        r = run([c.egressctl, "oci-hook", "prestart"])
        check(r.returncode == 2, "an unknown stage: exit %d" % r.returncode)
    finally:
        sb = c.find_sandbox(cg)
        if sb:
            c.ctl("detach", "--id", str(sb["id"]))


def seccomp_profile_file(c, *args):
    r = c.ctl_ok("seccomp-profile", *args)
    prof = json.loads(r.stdout)
    path = os.path.join(c.work, "seccomp-%d.json" % len(os.listdir(c.work)))
    with open(path, "w") as f:
        json.dump(prof, f)
    return path, prof


@test
def oci_seccomp_profile_in_runc_container(c):
    env = oci_need(c)
    t = c.tcp("oci-seccomp")
    base = "/usr/share/containers/seccomp.json"
    check(os.path.exists(base), "no %s (golang-github-containers-common; tools/install-deps)"
          % base)
    own, prof = seccomp_profile_file(c)
    merged, mprof = seccomp_profile_file(c, "--base", base)
    for p in (prof, mprof):
        check(p.get("defaultAction") == "SCMP_ACT_ERRNO", "not deny-by-default: %r"
              % p.get("defaultAction"))
        # Not SCMP_ARCH_X86: i386 calls are killed (see seccomp_profile.c).
        check(p.get("architectures") == ["SCMP_ARCH_X86_64", "SCMP_ARCH_X32"]
              and "archMap" not in p, "architectures: %r" % p.get("architectures"))
    # The merge keeps the base's own rules (a capability-gated one, say).
    with open(base) as f:
        b = json.load(f)
    check(any(r.get("includes", {}).get("caps") == ["CAP_SYS_ADMIN"] for r in mprof["syscalls"])
          and len(mprof["syscalls"]) > len(b["syscalls"]) - 6,
          "the merged profile lost the base's rules")
    script = ("grep Seccomp: /proc/self/status; /netprobe packet-socket; "
              "/netprobe io-uring-setup; /netprobe tcp 127.0.0.1 %d; "
              "/netprobe i386-packet-socket; echo \"i386 $?\"; "
              # (AF_INET, SOCK_PACKET) is a packet socket (finding 6 of issue 23);
              # 768: htons(ETH_P_ALL). Twin: an ordinary AF_INET datagram socket.
              "/netprobe socket inet packet 768; /netprobe socket inet6 packet 768; "
              "/netprobe socket inet dgram 0; echo done" % t.port)
    caps = ["--cap-add", "NET_RAW"]  # so that only seccomp stands in the way
    # Sanity twin: unconfined, every call works.
    r = env.run(script, extra=caps + ["--security-opt", "seccomp=unconfined"])
    # (AF_INET6, SOCK_PACKET) is no socket on this kernel (EINVAL): refused
    # all the same, in case a kernel ever rewrites it too.
    check(probe_lines(r.stdout) == ["ok"] * 5 + ["err EINVAL", "ok"]
          and "i386 0" in r.stdout,
          "unconfined container: exit %d, %r %r" % (r.returncode, r.stdout, r.stderr[-400:]))
    for what, path in (("deny-by-default", own), ("merged with --base", merged)):
        r = env.run(script, extra=caps + ["--security-opt", "seccomp=" + path])
        lines = probe_lines(r.stdout)
        check("done" in r.stdout and "Seccomp:\t2" in r.stdout,
              "%s profile: the container did not run under a filter: exit %d, %r %r"
              % (what, r.returncode, r.stdout, r.stderr[-600:]))
        check(lines[:2] == ["err EPERM"] * 2,
              "%s profile: AF_PACKET, io_uring_setup: %r" % (what, lines))
        check(lines[2:3] == ["ok"], "%s profile: a normal connect: %r" % (what, lines[2:]))
        check(lines[3:5] == ["err EPERM"] * 2,
              "%s profile: socket(AF_INET/AF_INET6, SOCK_PACKET): %r" % (what, lines[3:5]))
        check(lines[5:] == ["ok"], "%s profile: socket(AF_INET, SOCK_DGRAM): %r"
              % (what, lines[5:]))
        # The i386 ABI (socketcall hides the family): killed by SIGSYS.
        check("i386 159" in r.stdout, "%s profile: an i386 AF_PACKET socket: %r"
              % (what, r.stdout))


# The reason values docs/metering.md promises, per family.
METRIC_REASONS = {
    "connections_total": {"connect", "policy"}, "datagrams_total": {"sendmsg", "policy"},
    "sockets_denied_total": {"socket"}, "dns_queries_total": {"dns_policy"},
    "packets_dropped_total": {"backstop", "inbound", "quota"},
}
KERNEL_REASONS = {
    "egressd_kernel_denied_total": {"connect", "sendmsg", "sock_create", "setsockopt",
                                    "no_sandbox", "expired"},
    "egressd_kernel_dropped_packets_total": {"backstop", "inbound", "quota"},
}


@test
def metrics_promtool_clean_and_process_metrics(c):
    promtool = shutil.which("promtool")
    check(promtool, "no promtool (the prometheus package; tools/install-deps)")
    t = c.tcp("prom-ok")
    with c.sandbox(["127.0.0.1:%d" % t.port], name="promtool", tenant="pt-" + RAND) as sb:
        sb.allowed("tcp", "127.0.0.1", t.port)
        sb.denied("tcp", "127.0.0.1", c.tcp("prom-no").port)
        sb.denied("udp-sendto", "127.0.0.1", c.udp("prom-no-u").port)
        code, _, text = scrape(c)
        check(code == 200, "GET /metrics: %d" % code)
        r = subprocess.run([promtool, "check", "metrics"], input=text, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=30)
        check(r.returncode == 0, "promtool check metrics: exit %d: %s" %
              (r.returncode, (r.stdout + r.stderr).strip()[:1500]))
        # Sanity twin: promtool does catch what used to be wrong here.
        bad = ("# HELP egressd_bpf_counter_total x\n# TYPE egressd_bpf_counter_total counter\n"
               "egressd_bpf_counter_total 1\n")
        r = subprocess.run([promtool, "check", "metrics"], input=bad, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=30)
        check(r.returncode != 0, "promtool accepts a type in a metric name: the check is void")
        samples, types = parse_exposition(text)
        check(not any("execution_id" in dict(l) for _, l in samples),
              "a series carries execution_id")
        for (name, labels), _ in samples.items():
            l = dict(labels)
            fam = name.replace("egressd_sandbox_", "").replace("egressd_", "")
            if name in KERNEL_REASONS:
                check(l.get("reason") in KERNEL_REASONS[name], "%s reason %r" % (name, l))
            elif fam in METRIC_REASONS:
                check(l.get("reason") in METRIC_REASONS[fam], "%s%r: reason not in %r" %
                      (name, l, METRIC_REASONS[fam]))
        sid = str(c.find_sandbox(sb.cg)["id"])
        den = samples.get(("egressd_sandbox_connections_total", frozenset(
            {"tenant": "pt-" + RAND, "sandbox": sid, "verdict": "denied",
             "reason": "connect"}.items())))
        check(den == 1, "the denied connect under reason=connect: %r" % den)
        dg = samples.get(("egressd_sandbox_datagrams_total", frozenset(
            {"tenant": "pt-" + RAND, "sandbox": sid, "verdict": "denied",
             "reason": "sendmsg"}.items())))
        check(dg == 1, "the denied datagram under reason=sendmsg: %r" % dg)
        kd = samples.get(("egressd_kernel_denied_total",
                          frozenset({"reason": "connect"}.items())))
        check(kd is not None and kd >= 1, "egressd_kernel_denied_total{reason=connect}: %r" % kd)
    # process_* of egressd itself, against /proc.
    pid = c.daemon.proc.pid
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                 "process_virtual_memory_bytes", "process_open_fds", "process_max_fds",
                 "process_start_time_seconds", "egressd_metrics_scrape_failures_total",
                 "egressd_metrics_read_failures_total"):
        check((name, frozenset()) in samples, "no %s" % name)
    v = lambda n: samples[(n, frozenset())]
    # egressd's fds come and go (the scrape's own connection, sockets of
    # sandboxes being reclaimed): the figure must lie within what /proc says
    # just before and just after a scrape that reports it.
    got = None
    for _ in range(5):
        before = len(os.listdir("/proc/%d/fd" % pid))
        code, _, text = scrape(c)
        after = len(os.listdir("/proc/%d/fd" % pid))
        got = parse_exposition(text)[0].get(("process_open_fds", frozenset()))
        if code == 200 and got is not None and \
           min(before, after) - 8 <= got <= max(before, after) + 8:
            break
    else:
        raise TestFailure("process_open_fds %r, /proc says %d then %d" % (got, before, after))
    with open("/proc/%d/status" % pid) as f:
        rss_kb = int([l for l in f if l.startswith("VmRSS:")][0].split()[1])
    check(0.5 * rss_kb * 1024 <= v("process_resident_memory_bytes") <= 2 * rss_kb * 1024,
          "process_resident_memory_bytes %r, VmRSS %d kB" % (v("process_resident_memory_bytes"),
                                                            rss_kb))
    # egressd started during this run (the suite is bounded to SUITE_TIMEOUT_S)
    now = time.time()
    check(now - SUITE_TIMEOUT_S - 60 <= v("process_start_time_seconds") <= now + 2,
          "process_start_time_seconds %r, now %r" % (v("process_start_time_seconds"), now))
    check(v("egressd_metrics_scrape_failures_total") == 0 and
          v("egressd_metrics_read_failures_total") == 0, "failures on a healthy host")


@test
def egressd_logs_foreign_netns(c):
    """Started in another network namespace (a pod without hostNetwork),
    egressd says so; in the host's (the harness's egressd) it does not."""
    check("runs in network namespace" not in open(c.daemon_log).read(),
          "the harness's egressd, in the host namespace, logged the foreign-netns error")
    ns = RUN_ID[:40] + "-fns"
    must(["ip", "netns", "add", ns])
    CLEANUP.push("netns " + ns, run, ["ip", "netns", "del", ns])
    d = os.path.join(c.work, "foreign")
    os.makedirs(d, exist_ok=True)
    bpffs = c.bpffs + "-foreign"
    CLEANUP.push("bpffs dir", shutil.rmtree, bpffs, True)
    logp = os.path.join(d, "egressd.log")
    with open(logp, "wb") as logf:
        p = subprocess.Popen(["nsenter", "--net=/run/netns/" + ns, c.egressd,
                              "--socket", os.path.join(d, "s"), "--bpffs-dir", bpffs,
                              "--state-dir", os.path.join(d, "state"), "--metrics-addr", "off"]
                             + list(c.dns_args), stdin=subprocess.DEVNULL, stdout=logf,
                             stderr=logf)
    CLEANUP.push("foreign egressd", lambda: (p.poll() is None and p.kill(), p.wait(5)))

    def logged():
        with open(logp) as f:
            t = f.read()
        return "ready" in t or p.poll() is not None
    try:
        check(wait_until(logged, DAEMON_READY_S), "the foreign-netns egressd never got ready")
        with open(logp) as f:
            text = f.read()
        check("not the host's" in text and "hostNetwork" in text,
              "no foreign-netns error in its log:\n%s" % text[-1500:])
    finally:
        if p.poll() is None:
            p.terminate()
            p.wait(5)


# --- the CLI for automation ------------------------------------------------------


def json_error_of(r):
    try:
        o = json.loads(r.stdout)
    except ValueError:
        raise TestFailure("--json error is not JSON on stdout: exit %d, stdout %r, stderr %r"
                          % (r.returncode, r.stdout[:300], r.stderr[:300]))
    check(isinstance(o, dict) and o.get("ok") is False and o.get("exit") == r.returncode
          and o.get("code") and o.get("error"), "--json error object: %r" % o)
    return o


@test
def cli_json_errors_on_stdout(c):
    bad = c.policy(None, raw={"tenant": "x", "network": {"default": "deny",
                                                          "outbound_allow": ["1.2.3.4:99999"]}})
    cg = c.mkcgroup("jsonerr")
    CLEANUP.push("cgroup", cgroup_remove_tree, cg)
    r = c.ctl("attach", "--json", "--cgroup", cg, "--policy", bad)
    o = json_error_of(r)
    check(r.returncode == 4 and o["code"] == "invalid_policy" and
          o.get("field", "").startswith("network.outbound_allow"), "invalid policy: %r" % o)
    check("invalid policy" in r.stderr, "the text on stderr is gone: %r" % r.stderr)
    r = c.ctl("detach", "--json", "--id", "999999")
    o = json_error_of(r)
    check(r.returncode == 1 and o["code"] == "not_found", "detach of nothing: %r" % o)
    r = run([c.egressctl, "--socket", os.path.join(c.work, "none.sock"), "list", "--json"])
    o = json_error_of(r)
    check(r.returncode == 3 and o["code"] == "unreachable", "egressd unreachable: %r" % o)
    r = c.ctl("list", "--json", "--bogus")
    check(r.returncode == 2 and json_error_of(r)["code"] == "usage", "usage error: %r" % r.stdout)
    # Sanity twins: without --json stdout stays empty; with it, success is not an error.
    r = c.ctl("detach", "--id", "999999")
    check(r.returncode == 1 and r.stdout == "", "an error without --json printed %r" % r.stdout)
    r = c.ctl("list", "--json")
    check(r.returncode == 0 and isinstance(json.loads(r.stdout), list), "list --json: %r"
          % r.stdout[:200])


@test
def cli_stats_sandbox_column(c):
    with c.sandbox(["127.0.0.1:1"], name="statscol", tenant="sc-" + RAND) as sb:
        sid = c.find_sandbox(sb.cg)["id"]
        r = c.ctl_ok("stats", "--tenant", "sc-" + RAND)
        lines = r.stdout.splitlines()
        hdr = [i for i, l in enumerate(lines) if l.startswith("SANDBOX")]
        check(hdr and len(lines) > hdr[0] + 1, "no sandbox table: %r" % r.stdout)
        row = lines[hdr[0] + 1].split()
        check(row and row[0] == str(sid) and row[1] == "sc-" + RAND,
              "the SANDBOX column is %r, expected %d (row %r)" % (row[:1], sid, row))


@test
def cli_metrics_port_in_use_names_eaddrinuse(c):
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    CLEANUP.push("port holder", holder.close)
    d = os.path.join(c.work, "inuse")
    os.makedirs(d, exist_ok=True)
    bpffs = c.bpffs + "-inuse"
    CLEANUP.push("bpffs dir", shutil.rmtree, bpffs, True)
    logp = os.path.join(d, "egressd.log")
    with open(logp, "wb") as logf:
        p = subprocess.Popen([c.egressd, "--socket", os.path.join(d, "s"), "--bpffs-dir", bpffs,
                              "--state-dir", os.path.join(d, "state"), "--metrics-addr",
                              "127.0.0.1:%d" % port] + list(c.dns_args),
                             stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
    CLEANUP.push("second egressd", lambda: (p.poll() is None and p.kill(), p.wait(5)))
    try:
        def done():
            with open(logp) as f:
                return "ready" in f.read() or p.poll() is not None
        check(wait_until(done, DAEMON_READY_S), "the second egressd never got ready")
        with open(logp) as f:
            text = f.read()
        line = [l for l in text.splitlines() if "metrics: cannot serve" in l]
        check(line and "Address already in use" in line[0],
              "the metrics bind error: %r" % (line or text[-800:]))
        # Twin: the harness's egressd serves its own port.
        check(scrape(c)[0] == 200, "the harness's /metrics does not answer")
    finally:
        if p.poll() is None:
            p.terminate()
            p.wait(5)


@test
def cli_events_follow_reconnects(c):
    argv = [c.egressctl, "--socket", c.sock, "events", "--follow", "--json"]
    f = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    CLEANUP.push("follower", lambda: (f.poll() is None and f.kill(), f.wait(5)))
    lines = []
    threading.Thread(target=lambda: [lines.append(l) for l in f.stdout], daemon=True).start()

    def records(kind):
        out = []
        for l in list(lines):
            try:
                o = json.loads(l)
            except ValueError:
                continue
            if o.get("type") == kind or (kind == "*" and o):
                out.append(o)
        return out
    try:
        t = c.tcp("follow-deny")
        with c.sandbox(["127.0.0.1:1"], name="follow1") as sb:
            sb.denied("tcp", "127.0.0.1", t.port)
            check(wait_until(lambda: any(o.get("type") == "connect" for o in records("*")), 5),
                  "the follower saw no deny before the restart: %r" % lines[-5:])
        c.daemon.stop()
        check(wait_until(lambda: records("stream_gap"), 5),
              "no stream_gap record when egressd went away: %r" % lines[-5:])
        if f.poll() is not None:
            raise TestFailure("events --follow exited (%d) when egressd stopped: %r"
                              % (f.returncode, f.stderr.read()[-300:]))
        c.daemon.start()
        ok = wait_until(lambda: records("stream_resumed"), 10)
        if not ok:
            if f.poll() is None:
                f.kill()
            raise TestFailure("no stream_resumed after the restart: %r; follower exit %r: %r"
                              % (lines[-2:], f.wait(5), f.stderr.read()[-500:]))
        n = len(lines)
        with c.sandbox(["127.0.0.1:1"], name="follow2") as sb:
            sb.denied("tcp", "127.0.0.1", t.port)
            check(wait_until(lambda: any(json.loads(l).get("type") == "connect"
                                         for l in lines[n:] if l.strip()), 5),
                  "the follower saw no deny after the restart: %r" % lines[n:])
        gap = records("stream_gap")
        res = records("stream_resumed")
        check(len(gap) == 1 and len(res) == 1 and res[0].get("gap_seconds", -1) >= 0,
              "one gap, one resume: %r %r" % (gap, res))
    finally:
        if f.poll() is None:
            f.kill()
            f.wait(5)
        c.ensure_daemon()


@test
def dist_kubernetes_manifests(c):
    """The DaemonSet has what a node agent needs (issue 14); a static check:
    no cluster here."""
    import yaml
    here = os.path.dirname(os.path.abspath(__file__))
    kdir = os.path.join(here, "..", "..", "dist", "kubernetes")
    with open(os.path.join(kdir, "daemonset.yaml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    kinds = {d["kind"]: d for d in docs}
    check(set(kinds) >= {"DaemonSet", "Service"}, "daemonset.yaml kinds: %r" % list(kinds))
    spec = kinds["DaemonSet"]["spec"]["template"]["spec"]
    check(spec.get("hostNetwork") is True and
          spec.get("dnsPolicy") == "ClusterFirstWithHostNet" and spec.get("hostPID") is True,
          "hostNetwork/dnsPolicy/hostPID: %r" % {k: spec.get(k) for k in
                                                 ("hostNetwork", "dnsPolicy", "hostPID")})
    check(spec.get("automountServiceAccountToken") is False, "service account token mounted")
    check({"operator": "Exists"} in spec.get("tolerations", []), "no Exists toleration")
    ctr = spec["containers"][0]
    for probe in ("startupProbe", "readinessProbe"):  # liveness: test_daemonset
        cmd = ctr.get(probe, {}).get("exec", {}).get("command", [])
        check(cmd[:1] == ["/usr/local/bin/egressctl"] and "status" in cmd,
              "%s: %r" % (probe, cmd))
    ports = {p["name"]: p for p in ctr.get("ports", [])}
    check("metrics" in ports and "--metrics-addr" in ctr["args"], "no metrics port/addr")
    svc = kinds["Service"]["spec"]
    check(svc["ports"][0]["targetPort"] == "metrics", "Service does not target metrics")
    with open(os.path.join(kdir, "servicemonitor.yaml")) as f:
        sm = yaml.safe_load(f)
    check(sm["kind"] == "ServiceMonitor" and sm["spec"]["endpoints"][0]["port"] == "metrics",
          "ServiceMonitor: %r" % sm)
    # The image the manifest runs is the one `make image` tags.
    with open(os.path.join(here, "..", "..", "Makefile")) as f:
        mk = f.read()
    check("localhost/egressd:$(VERSION)" in mk and ctr["image"].startswith("localhost/egressd:"),
          "image %r is not what make image builds" % ctr["image"])


@test
def oci_hook_container_netns(c):
    """A container in its own network namespace: the hook names it as the
    sandbox's netns (the runtime's /run/netns path from config.json), so its
    DNS proxy listens inside it; without such a path it is refused."""
    ns = RUN_ID[:40] + "-ons"
    must(["ip", "netns", "add", ns])
    CLEANUP.push("netns " + ns, run, ["ip", "netns", "del", ns])
    must(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"])
    cg = c.mkcgroup("ocins")
    CLEANUP.push("cgroup", cgroup_remove_tree, cg)
    holder = subprocess.Popen(["nsenter", "--net=/run/netns/" + ns, "sleep", "30"],
                              preexec_fn=join_cgroup_fn(cg))
    CLEANUP.push("holder", lambda: (holder.kill(), holder.wait()))
    # nsenter execs sleep once it is in the namespace
    check(wait_until(lambda: os.stat("/proc/%d/ns/net" % holder.pid).st_ino ==
                     os.stat("/run/netns/" + ns).st_ino, 5), "the holder never entered %s" % ns)
    pol = c.policy(["127.0.0.1:1"], extra_network={"dns_allow": ["api.test"]})
    bundle = os.path.join(c.work, "bundle-ns-%s" % RAND)
    os.makedirs(bundle, exist_ok=True)
    for with_path in (True, False):
        cfg = {"ociVersion": "1.0.2", "linux": {"cgroupsPath": cg[len(c.cg_mount):]}}
        if with_path:
            cfg["linux"]["namespaces"] = [{"type": "network", "path": "/run/netns/" + ns}]
        with open(os.path.join(bundle, "config.json"), "w") as f:
            json.dump(cfg, f)
        st = {"ociVersion": "1.0.2", "id": "n-" + RAND, "status": "created", "pid": holder.pid,
              "bundle": bundle, "annotations": {OCI_ANNOTATION: pol}}
        r = subprocess.run(oci_hook_argv(c, "createRuntime"),
                           input=json.dumps(st), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=CTL_TIMEOUT_S)
        try:
            if not with_path:
                # No path for its own namespace: refused, nothing attached.
                check(r.returncode != 0 and "names no path" in r.stderr,
                      "createRuntime without a netns path: %d %r" % (r.returncode, r.stderr))
                check(c.find_sandbox(cg) is None, "a refused container left a sandbox")
                continue
            check(r.returncode == 0, "createRuntime: %d %r" % (r.returncode, r.stderr))
            sb = c.find_sandbox(cg)
            want = "/run/netns/" + ns
            check(sb and sb.get("netns") == want, "the sandbox's netns is %r, expected %r"
                  % (sb and sb.get("netns"), want))
            # Its DNS listener is inside the container's namespace: it answers there.
            port = sb["dns"]["port4"]
            probe = run(["nsenter", "--net=/run/netns/" + ns, sys.executable, "-c",
                         "import socket; s=socket.socket(); s.settimeout(2); "
                         "s.connect(('127.0.0.1', %d)); print('ok')" % port])
            check(probe.stdout.strip() == "ok", "no DNS listener in the container's netns on "
                  "port %d: %r" % (port, probe.stderr.strip()[-200:]))
        finally:
            st["pid"] = 0
            subprocess.run(oci_hook_argv(c, "poststop"),
                           input=json.dumps(st), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=CTL_TIMEOUT_S)
        check(c.find_sandbox(cg) is None, "poststop left the sandbox")


@test
def oci_hook_systemd_cgroups_path(c):
    """poststop finds a systemd-driver container by its cgroupsPath
    SLICE:PREFIX:NAME (Podman/CRI-O with cgroup_manager=systemd)."""
    slice_name = "e2e%d%s.slice" % (PID, RAND)       # no '-': a top-level slice
    top = os.path.join(c.cg_mount, slice_name)
    os.mkdir(top)
    CLEANUP.push("cgroup", cgroup_remove_tree, top)
    cid = "c" + RAND
    scope = os.path.join(top, "oci-%s.scope" % cid)
    os.mkdir(scope)
    with c.sandbox(["127.0.0.1:1"], name="unused") as twin:  # a sandbox that must stay
        pol = c.policy(["127.0.0.1:1"])
        c.ctl_ok("attach", "--cgroup", scope, "--policy", pol)
        bundle = os.path.join(c.work, "bundle-sd-%s" % RAND)
        os.makedirs(bundle, exist_ok=True)
        with open(os.path.join(bundle, "config.json"), "w") as f:
            json.dump({"linux": {"cgroupsPath": "%s:oci:%s" % (slice_name, cid)}}, f)
        st = {"id": cid, "status": "stopped", "pid": 0, "bundle": bundle,
              "annotations": {OCI_ANNOTATION: pol}}
        r = subprocess.run(oci_hook_argv(c, "poststop"),
                           input=json.dumps(st), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=CTL_TIMEOUT_S)
        check(r.returncode == 0, "poststop: %d %r" % (r.returncode, r.stderr))
        check(c.find_sandbox(scope) is None, "poststop did not detach %s" % scope)
        check(c.find_sandbox(twin.cg) is not None, "poststop detached another sandbox")


@test
def oci_hook_policy_only_from_policy_dir(c):
    """Whoever sets annotations (a pod author) names the policy file: the
    hook takes only a root-owned, group/other-unwritable regular file inside
    --policy-dir, and a refusal says which rule broke, never the file's
    content (a root-only host file's first token) nor whether it exists.
    Twin: a good policy inside the directory attaches; --require-annotation
    refuses an unannotated container, without it that one is left alone."""
    cg = c.mkcgroup("ocidir")
    CLEANUP.push("cgroup", cgroup_remove_tree, cg)
    bundle = os.path.join(c.work, "bundle-dir-%s" % RAND)
    os.makedirs(bundle, exist_ok=True)
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump({"ociVersion": "1.0.2", "linux": {"cgroupsPath": cg[len(c.cg_mount):]}}, f)
    holder = subprocess.Popen(["sleep", "30"], preexec_fn=join_cgroup_fn(cg))
    CLEANUP.push("holder", lambda: (holder.kill(), holder.wait()))
    good = c.policy(["127.0.0.1:1"])
    os.chmod(good, 0o644)
    # A valid policy outside the directory, reached directly and by a symlink
    # and a '..' inside it.
    outside_dir = tempfile.mkdtemp(prefix="ocidir-out-", dir="/tmp")
    CLEANUP.push("outside dir", shutil.rmtree, outside_dir, True)
    outside = os.path.join(outside_dir, "loose.json")
    shutil.copy(good, outside)
    link = os.path.join(c.work, "link-%s.json" % RAND)
    os.symlink(outside, link)
    dotdot = os.path.join(c.work, "..", os.path.basename(outside_dir), "loose.json")
    secret = os.path.join(c.work, "secret-%s" % RAND)  # a root-only non-policy file
    with open(os.path.join(outside_dir, "secret"), "w") as f:
        f.write("rootsecret:x:0:0\n")
    os.chmod(os.path.join(outside_dir, "secret"), 0o600)
    ww = c.policy(["127.0.0.1:1"])
    os.chmod(ww, 0o646)                       # others may write it
    gw = c.policy(["127.0.0.1:1"])
    os.chmod(gw, 0o664)                       # the group may write it
    unowned = c.policy(["127.0.0.1:1"])
    os.chown(unowned, 65534, 65534)           # nobody's
    os.chmod(unowned, 0o644)
    subdir = os.path.join(c.work, "subdir-%s" % RAND)
    os.mkdir(subdir)
    st = {"ociVersion": "1.0.2", "id": "d-" + RAND, "status": "created", "pid": holder.pid,
          "bundle": bundle}

    def hook(policy, *opts, stage="createRuntime"):
        s = dict(st, annotations={OCI_ANNOTATION: policy} if policy else {})
        return subprocess.run(oci_hook_argv(c, stage, *opts), input=json.dumps(s),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=CTL_TIMEOUT_S)
    try:
        cases = [("a file outside the directory", outside, "not a file inside"),
                 ("a symlink out of it", link, "not a file inside"),
                 ("a '..' out of it", dotdot, "not a file inside"),
                 ("a root-only host file", os.path.join(outside_dir, "secret"),
                  "not a file inside"),
                 ("a missing file", secret, "not a file inside"),
                 ("/etc/shadow", "/etc/shadow", "not a file inside"),
                 ("a world-writable file", ww, "not owned by root, or group or others"),
                 ("a group-writable file", gw, "not owned by root, or group or others"),
                 ("a file owned by nobody", unowned, "not owned by root, or group or others"),
                 ("the directory itself", c.work, "not a file inside"),
                 ("a directory inside it", subdir, "not a regular file")]
        errs = {}
        for what, pol, rule in cases:
            r = hook(pol)
            check(r.returncode != 0 and rule in r.stderr,
                  "createRuntime with %s: exit %d %r" % (what, r.returncode, r.stderr))
            check("rootsecret" not in r.stderr and "expected near" not in r.stderr,
                  "the refusal of %s leaks the file's text: %r" % (what, r.stderr))
            check(c.find_sandbox(cg) is None, "%s attached %s" % (what, cg))
            errs[what] = r.stderr.replace(pol, "P")
        # A missing file and a host file are refused in the same words.
        check(errs["a missing file"] == errs["a root-only host file"],
              "the refusal tells a missing file from an existing one: %r vs %r"
              % (errs["a missing file"], errs["a root-only host file"]))
        # A policy dir group/other may write is refused as a whole.
        loose_dir = tempfile.mkdtemp(prefix="ocidir-loose-", dir="/tmp")
        CLEANUP.push("loose dir", shutil.rmtree, loose_dir, True)
        os.chmod(loose_dir, 0o777)
        shutil.copy(good, os.path.join(loose_dir, "p.json"))
        s = dict(st, annotations={OCI_ANNOTATION: os.path.join(loose_dir, "p.json")})
        r = subprocess.run([c.egressctl, "--socket", c.sock, "oci-hook", "--policy-dir",
                            loose_dir, "createRuntime"], input=json.dumps(s),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=CTL_TIMEOUT_S)
        check(r.returncode != 0 and "policy directory is not a root-owned" in r.stderr,
              "a world-writable policy dir: %d %r" % (r.returncode, r.stderr))
        # Without --policy-dir the default /etc/egressd/policies applies: a
        # file of the tests' dir is outside it.
        r = subprocess.run([c.egressctl, "--socket", c.sock, "oci-hook", "createRuntime"],
                           input=json.dumps(dict(st, annotations={OCI_ANNOTATION: good})),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=CTL_TIMEOUT_S)
        check(r.returncode != 0 and "/etc/egressd/policies" in r.stderr,
              "the default policy dir: %d %r" % (r.returncode, r.stderr))
        # --require-annotation: an unannotated container is refused; twin:
        # without it, it is left alone (exit 0, nothing attached).
        r = hook(None, "--require-annotation")
        check(r.returncode != 0 and "--require-annotation" in r.stderr,
              "unannotated with --require-annotation: %d %r" % (r.returncode, r.stderr))
        r = hook(None)
        check(r.returncode == 0 and c.find_sandbox(cg) is None,
              "unannotated without --require-annotation: %d %r" % (r.returncode, r.stderr))
        # Twin: the good policy inside the directory attaches and confines.
        r = hook(good, "--require-annotation")
        check(r.returncode == 0, "a good policy in the dir: %d %r" % (r.returncode, r.stderr))
        check(c.find_sandbox(cg) is not None, "a good policy did not attach %s" % cg)
        c.denied(cg, "tcp", "127.0.0.1", c.tcp("oci-dir").port)
        r = hook(good, stage="poststop")
        check(r.returncode == 0 and c.find_sandbox(cg) is None,
              "poststop: %d %r" % (r.returncode, r.stderr))
    finally:
        sb = c.find_sandbox(cg)
        if sb:
            c.ctl("detach", "--id", str(sb["id"]))
