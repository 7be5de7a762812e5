#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Sandbox start, scale and event-rate figures of egressd (docs/benchmarks.md).

- start: `egressctl run --policy P -- /bin/true` end to end, against
  `unshare --net /bin/true` (the cost of a new network namespace alone),
  alternating, p50/p95;
- scale: N sandboxes (default 10,000) attached one by one over the control
  socket, each on its own fresh cgroup with a 3-entry policy: attach and
  detach latency p50/p99, `list` and `status` latency with all of them
  attached, egressd's RSS, VmHWM and open files (sockets, BPF links, the
  rest) and the kernel's memory (Slab + Percpu from /proc/meminfo, and each
  map's bytes_memlock from bpftool) per sandbox. As many as egressd's file
  limit allows (measured per sandbox over the first 100) and at most
  --scale-seconds of attaching;
- events: the highest deny rate one thread reaches (connect_loop
  --expect-deny in a sandbox whose policy refuses the address), and whether
  every refusal arrived as an event, was counted by the sandbox's deny
  budget (reported in aggregate) or was counted lost; once with the default
  budget, once against a second egressd that reports every deny
  (--events-deny-rate 0), which is what fills the ring.

Needs root. Everything it creates is removed on exit, also on failure or
Ctrl-C; every loop and wait is bounded.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as B  # noqa: E402
import bench_common as common  # noqa: E402  (egressd, dnsmasq, cgroups: the e2e harness)

PID = os.getpid()
TAG = f"egrscale-{PID}"
IDLE_SECONDS = 20  # egressd's idle CPU is measured over this long
BARE_CGROUPS = 2000  # the cgroup's own kernel memory, measured without egressd
DNSMASQ = common.DNSMASQ

GOAL_START_X = 2.0        # egressctl run p95 <= 2x unshare --net p95
GOAL_START_P95_MS = 5.0   # the tool runtime's authorization budget
GOAL_ATTACH_P99_MS = 2.0
GOAL_KIB_PER_SB = 16.0
FD_PROBE = 100            # sandboxes attached before the files per sandbox are taken
FD_RESERVE = 512          # files left to egressd for everything else


def log(msg):
    print(f"bench-scale: {msg}", file=sys.stderr, flush=True)


def open_files(pid):
    """{"socket": n, "bpf_link": n, "other": n, "total": n} of pid's open files."""
    out = {"socket": 0, "bpf_link": 0, "other": 0}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            t = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        k = "socket" if t.startswith("socket:") else \
            "bpf_link" if t == "anon_inode:bpf_link" else "other"
        out[k] += 1
    out["total"] = sum(out.values())
    return out


def slab_bytes():
    """{cache: bytes of its active objects} from /proc/slabinfo."""
    out = {}
    with open("/proc/slabinfo") as f:
        for line in f.readlines()[2:]:
            v = line.split()
            out[v[0]] = int(v[1]) * int(v[3])
    return out


def meminfo():
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            out[k] = int(v.split()[0])
    return out


def pct(xs, p):
    return B.percentile(xs, p)


class Scale:
    def __init__(self, args):
        self.a = args
        self.build = os.path.abspath(args.build)
        self.tmp = tempfile.mkdtemp(prefix=TAG + "-", dir=args.state_parent)
        self.sock = os.path.join(self.tmp, "egressd.sock")
        self.bpffs_dir = f"/sys/fs/bpf/{TAG}"
        self.ctl = B.Control(self.sock)
        self.cg_root = B.cgroup2_mount()
        self.cg_parent = os.path.join(self.cg_root, TAG)
        self.cgroups = []
        self.attached = []
        self.procs = []
        self.fd_limit = None
        self.daemon = None
        self.daemon_log = None
        self.dns_upstream = None

    def start(self):
        for b in ("egressd", "egressctl", "bench/connect_loop"):
            if not os.access(os.path.join(self.build, b), os.X_OK):
                raise RuntimeError(f"{self.build}/{b} is missing: run `make bench`")
        dport = B.free_port()
        self.procs.append(common.start_dnsmasq(dport, f"{self.tmp}/dnsmasq.pid"))
        self.dns_upstream = f"127.0.0.1:{dport}"
        self.daemon_log = open(os.path.join(self.build, "bench-scale-egressd.log"), "w")
        self.daemon = common.start_egressd(
            os.path.join(self.build, "egressd"), self.sock, self.bpffs_dir,
            os.path.join(self.tmp, "state"), self.dns_upstream, self.daemon_log,
            lambda: self.ctl.call({"op": "status"}, 10).get("ok"))
        os.mkdir(self.cg_parent)
        self.cgroups.append(self.cg_parent)

    def cleanup(self):
        if self.daemon and self.daemon.poll() is None:
            for cg in list(self.attached):
                try:
                    self.ctl.call({"op": "detach", "cgroup": cg}, timeout=60)
                except Exception as e:  # keep cleaning up
                    log(f"cleanup: detach {cg}: {e}")
            common.stop_egressd(self.daemon, 30)
        for p in self.procs:
            common.stop_process(p, signal.SIGTERM)
        # Children first (egressctl run's cgroups are its own, removed by it).
        for cg in sorted(self.cgroups, key=len, reverse=True):
            try:
                os.rmdir(cg)
            except OSError as e:
                log(f"cleanup: rmdir {cg}: {e}")
        if os.path.isdir(self.bpffs_dir):
            shutil.rmtree(self.bpffs_dir, ignore_errors=True)
        common.remove_work_dir(self.tmp, self.sock, log)
        if self.daemon_log:
            self.daemon_log.close()

    def policy(self, name, allow):
        return {"tenant": "bench", "execution_id": name, "principal": "bench:scale",
                "tool": "bench", "version": "0",
                "network": {"default": "deny", "outbound_allow": allow, "inbound": "deny"}}

    # -- start

    def start_latency(self):
        a = self.a
        pol = os.path.join(self.tmp, "run-policy.json")
        with open(pol, "w") as f:
            json.dump(self.policy("run", ["tcp/127.0.0.1:9"]), f)
        run_cmd = [os.path.join(self.build, "egressctl"), "--socket", self.sock, "run",
                   "--policy", pol, "--cgroup-parent", self.cg_parent, "--", "/bin/true"]
        unshare = ["unshare", "--net", "/bin/true"]
        t_run, t_uns = [], []
        for i in range(a.starts):
            for cmd, out in ((unshare, t_uns), (run_cmd, t_run)):
                t0 = time.perf_counter()
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
                out.append((time.perf_counter() - t0) * 1e3)
                if r.returncode != 0:
                    raise RuntimeError(f"{' '.join(cmd[:4])}: exit {r.returncode}: "
                                       f"{r.stderr.strip()[:300]}")
        # Where egressctl run spends it: one run under strace -c -f.
        summary = ""
        if shutil.which("strace"):
            r = subprocess.run(["strace", "-f", "-c", "-S", "time", "-o",
                                os.path.join(self.tmp, "strace.txt")] + run_cmd,
                               capture_output=True, text=True, timeout=60)
            if r.returncode == 0:
                with open(os.path.join(self.tmp, "strace.txt")) as f:
                    summary = "".join(f.readlines()[:10])
        return t_run, t_uns, summary

    # -- scale

    def kernel_map_bytes(self):
        """{map name: bytes_memlock} of this egressd's pinned maps (other
        egressds on the machine have maps of the same names)."""
        ids = {}
        for root, _dirs, files in os.walk(self.bpffs_dir):
            if os.path.basename(root) != "maps":
                continue
            for f in files:
                try:
                    m = B.bpftool_json(["map", "show", "pinned", os.path.join(root, f)])
                except Exception:  # an unpinned or odd file: not a map we count
                    continue
                ids[m["id"]] = m.get("name", f)
        out = {}
        for m in B.bpftool_json(["map", "show"]):
            if m.get("id") in ids:
                name = ids[m["id"]]
                out[name] = out.get(name, 0) + int(m.get("bytes_memlock", 0))
        return out

    def attach_one(self, i, att):
        cg = os.path.join(self.cg_parent, f"s{i}")
        os.mkdir(cg)
        self.cgroups.append(cg)
        req = {"op": "attach", "cgroup": cg, "policy": self.policy(
            f"{TAG}-{i}", [f"tcp/10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}:443",
                           "api.example.com:443", "udp/10.255.0.1:123"])}
        t0 = time.perf_counter()
        B.must_ok(self.ctl.call(req, timeout=60), f"attach {cg}")
        att.append((time.perf_counter() - t0) * 1e3)
        self.attached.append(cg)
        return cg

    def settle(self):
        """Until the kernel has freed the cgroups removed before (an earlier
        run's: their memory leaves Slab meanwhile), at most 60 s."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with open(os.path.join(self.cg_root, "cgroup.stat")) as f:
                st = dict(ln.split() for ln in f)
            if int(st.get("nr_dying_descendants", 0)) == 0:
                return
            time.sleep(0.5)
        log("scale: removed cgroups still dying after 60 s; the memory figures include them")

    def scale(self):
        a = self.a
        pid = self.daemon.pid
        want = a.sandboxes
        # egressd raises its own RLIMIT_NOFILE to 65536 where it may; a host
        # that forbids that (no CAP_SYS_RESOURCE) caps the sandboxes it can
        # hold at what each costs in open files, measured here.
        soft = int(open(f"/proc/{pid}/limits").read().split(
            "Max open files")[1].split()[0])
        # What a cgroup costs the kernel with no egressd on it: the runtime
        # makes one per sandbox anyway. They stay until the end, so their
        # release does not blur the sandboxes' figure.
        bare = min(BARE_CGROUPS, want)
        self.settle()
        memb = meminfo()
        for i in range(bare):
            cg = os.path.join(self.cg_parent, f"bare{i}")
            os.mkdir(cg)
            self.cgroups.append(cg)
        mem0, rss0, maps0 = meminfo(), B.rss_kib(pid), self.kernel_map_bytes()
        slab0 = slab_bytes()
        bare_kib = ((mem0["Slab"] + mem0.get("Percpu", 0)) -
                    (memb["Slab"] + memb.get("Percpu", 0))) / max(1, bare)
        fd0 = open_files(pid)
        att, det, cgs = [], [], []
        t_start = time.perf_counter()
        probe = min(FD_PROBE, want)
        for i in range(probe):
            cgs.append(self.attach_one(i, att))
        fd1 = open_files(pid)
        per_fd = (fd1["total"] - fd0["total"]) / probe
        fit = want if per_fd <= 0 else \
            probe + int((soft - fd1["total"] - FD_RESERVE) / per_fd)
        n = min(want, fit)
        self.fd_limit = (soft, fit, per_fd, fd1, fd0)
        if n < want:
            log(f"egressd may open {soft:,} files and holds {per_fd:.1f} per sandbox: "
                f"{fit:,} sandboxes fit, not {want:,}")
        deadline = t_start + a.scale_seconds
        self.timed_out = False
        for i in range(probe, n):
            if time.perf_counter() > deadline:
                self.timed_out = True
                log(f"scale: --scale-seconds {a.scale_seconds} reached at {i:,} sandboxes")
                break
            cgs.append(self.attach_one(i, att))
            if (i + 1) % 2000 == 0:
                log(f"{i + 1:,} sandboxes attached ({time.perf_counter() - t_start:.0f} s)")
        n = len(cgs)
        mem1, rss1, maps1 = meminfo(), B.rss_kib(pid), self.kernel_map_bytes()
        slab1 = slab_bytes()
        hwm = B.rss_kib(pid, "VmHWM")
        fdn = open_files(pid)
        idle = self.idle_cpu(pid)
        lst, sts = [], []
        for _ in range(5):
            t0 = time.perf_counter()
            r = B.must_ok(self.ctl.call({"op": "list"}, timeout=120), "list")
            lst.append((time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            B.must_ok(self.ctl.call({"op": "status"}, timeout=120), "status")
            sts.append((time.perf_counter() - t0) * 1e3)
        listed = len(r.get("sandboxes", []))
        # What a list costs everyone else: egressd's loop (control, DNS
        # proxy) serves nobody while it builds a reply. A whole list against
        # egressctl's paged one, with status asked back to back meanwhile.
        ctl_list = [os.path.join(self.build, "egressctl"), "--socket", self.sock,
                    "list", "--json"]
        stall = {"whole": self.stall_during(
                     lambda: B.must_ok(self.ctl.call({"op": "list"}, timeout=120), "list")),
                 "paged": self.stall_during(
                     lambda: subprocess.run(ctl_list, stdout=subprocess.DEVNULL, check=True,
                                            timeout=120))}
        pg = []
        for _ in range(5):
            t0 = time.perf_counter()
            B.must_ok(self.ctl.call({"op": "list", "limit": 500}, timeout=120), "list page")
            pg.append((time.perf_counter() - t0) * 1e3)
        for cg in cgs:
            t0 = time.perf_counter()
            B.must_ok(self.ctl.call({"op": "detach", "cgroup": cg}, timeout=60), "detach")
            det.append((time.perf_counter() - t0) * 1e3)
            self.attached.remove(cg)
            os.rmdir(cg)
            self.cgroups.remove(cg)
        kern = (mem1["Slab"] + mem1.get("Percpu", 0)) - (mem0["Slab"] + mem0.get("Percpu", 0))
        map_delta = {k: maps1.get(k, 0) - maps0.get(k, 0) for k in set(maps0) | set(maps1)}
        return {"n": n, "att": att, "det": det, "list": lst, "status": sts, "listed": listed,
                "page": pg, "stall": stall,
                "rss_kib": rss1 - rss0, "kern_kib": kern, "bare_kib": bare_kib, "bare": bare,
                "slab_delta": {k: slab1.get(k, 0) - slab0.get(k, 0)
                               for k in set(slab0) | set(slab1)},
                "maps_b": sum(map_delta.values()), "map_delta": map_delta,
                "rss_total": rss1, "hwm": hwm, "fd0": fd0, "fdn": fdn, "idle": idle}

    def stall_during(self, fn):
        """(seconds fn took, the longest a status request waited meanwhile
        in ms, how many were answered): status asked back to back in a
        thread while fn runs."""
        done, waits = threading.Event(), []

        def ask():
            while not done.is_set():
                t0 = time.perf_counter()
                B.must_ok(self.ctl.call({"op": "status"}, timeout=120), "status")
                waits.append((time.perf_counter() - t0) * 1e3)

        t = threading.Thread(target=ask)
        t.start()
        try:
            time.sleep(0.2)  # the asker under way
            t0 = time.perf_counter()
            fn()
            took = time.perf_counter() - t0
        finally:
            done.set()
            t.join(timeout=130)
        return took, max(waits, default=0.0), len(waits)

    @staticmethod
    def idle_cpu(pid, seconds=IDLE_SECONDS):
        """egressd's share of a CPU while nothing is asked of it (its timers:
        pin checks, cgroup checks, the DNS tick)."""
        def cpu():
            with open(f"/proc/{pid}/stat") as f:
                v = f.read().rsplit(")", 1)[1].split()
            return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")
        time.sleep(2)  # the last attach's aftermath
        c0, t0 = cpu(), time.monotonic()
        time.sleep(seconds)
        return 100 * (cpu() - c0) / (time.monotonic() - t0)

    # -- events

    def events(self):
        """The deny loop against this egressd (default budget), then against
        one of its own that reports every deny (--events-deny-rate 0), to
        see whether the ring itself loses any at this rate."""
        budgeted = self.deny_loop(self.ctl, os.path.join(self.tmp, "state"), "deny")
        sock = os.path.join(self.tmp, "all.sock")
        ctl = B.Control(sock)
        with open(os.path.join(self.build, "bench-scale-egressd-all.log"), "w") as logf:
            daemon = common.start_egressd(
                os.path.join(self.build, "egressd"), sock, self.bpffs_dir + "-all",
                os.path.join(self.tmp, "state-all"), self.dns_upstream, logf,
                lambda: ctl.call({"op": "status"}, 10).get("ok"),
                extra=["--events-deny-rate", "0"])
            try:
                every = self.deny_loop(ctl, os.path.join(self.tmp, "state-all"), "deny-all")
            finally:
                common.stop_egressd(daemon, 30)
                shutil.rmtree(self.bpffs_dir + "-all", ignore_errors=True)
        return {"budgeted": budgeted, "every": every}

    def deny_loop(self, ctl, state_dir, name):
        a = self.a
        cg = os.path.join(self.cg_parent, name)
        os.mkdir(cg)
        self.cgroups.append(cg)
        try:
            B.must_ok(ctl.call({"op": "attach", "cgroup": cg, "policy": self.policy(
                name, ["tcp/127.0.0.1:9"])}), "attach " + name)
            st0 = B.must_ok(ctl.call({"op": "status"}), "status")
            r = subprocess.run([os.path.join(self.build, "bench", "connect_loop"),
                                "--expect-deny", "--cgroup", cg, "127.0.0.1", "10",
                                str(a.seconds)],
                               capture_output=True, text=True, timeout=a.seconds + 30)
            if r.returncode != 0:
                raise RuntimeError(f"deny loop: {r.stderr.strip()}")
            f = dict(kv.split("=", 1) for kv in r.stdout.split())
            refused = int(f["connects"])
            # Let egressd drain the ring: until all are in or counted lost, or
            # nothing more came in a second (bounded).
            deadline, last, still = time.monotonic() + 30, -1, 0
            while True:
                st1 = B.must_ok(ctl.call({"op": "status"}), "status")
                got = st1["events"]["received"] - st0["events"]["received"]
                lost = st1["events"]["lost_counter"] - st0["events"]["lost_counter"]
                still = still + 1 if got == last else 0
                last = got
                if got + lost >= refused or still >= 5 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            cnt = (st1["counters"].get("connect_denied", 0) -
                   st0["counters"].get("connect_denied", 0))
            B.must_ok(ctl.call({"op": "detach", "cgroup": cg}), "detach " + name)
        finally:
            try:
                os.rmdir(cg)
                self.cgroups.remove(cg)
            except OSError as e:
                log(f"rmdir {cg}: {e}")
        # What the budget held back is counted, not lost: the sandbox's
        # execution record says how many (docs/events.md).
        sup = self.execution_events(state_dir, cg)["suppressed"]
        return {"rate": float(f["rate"]), "refused": refused, "counted": cnt,
                "received": got, "lost": lost, "suppressed": sup}

    @staticmethod
    def execution_events(state_dir, cg):
        """The events figures of cg's execution audit record (written at detach)."""
        with open(os.path.join(state_dir, "audit.log")) as f:
            recs = [json.loads(ln) for ln in f if ln.strip()]
        ex = [r for r in recs if r.get("type") == "execution" and r.get("cgroup") == cg]
        if not ex:
            raise RuntimeError(f"no execution record of {cg} in the audit log")
        return ex[-1]["events"]

    # -- report

    def run(self):
        a = self.a
        self.start()
        load0 = B.read_loadavg()
        log(f"start: {a.starts} x egressctl run -- /bin/true and unshare --net /bin/true")
        t_run, t_uns, strace = self.start_latency()
        log(f"start: run p50 {pct(t_run, 50):.1f} ms p95 {pct(t_run, 95):.1f} ms; unshare "
            f"p50 {pct(t_uns, 50):.1f} p95 {pct(t_uns, 95):.1f}")
        log("events: deny loop")
        ev = self.events()
        log(f"events: {ev}")
        log(f"scale: {a.sandboxes:,} sandboxes")
        sc = self.scale()
        load1 = B.read_loadavg()
        return self.report(t_run, t_uns, strace, sc, ev, load0, load1)

    def report(self, t_run, t_uns, strace, sc, ev, load0, load1):
        a = self.a
        n = sc["n"]
        lines = []
        w = lines.append
        now = datetime.datetime.now(datetime.timezone.utc)
        w(f"### Start, scale, events ({now:%Y-%m-%d %H:%M} UTC)")
        w("")
        w(f"Machine: {os.cpu_count()} CPUs, Linux {platform.release()}, state dir on "
          f"{B.fs_type(os.path.realpath(self.tmp))} ({a.state_parent}); load average {load0} "
          f"before, {load1} after. Command: `python3 tools/bench_scale.py --build {a.build} "
          f"--starts {a.starts} --sandboxes {a.sandboxes} --seconds {a.seconds} "
          f"--scale-seconds {a.scale_seconds}` (run by "
          f"`make bench`).")
        w("")
        r95, u95 = pct(t_run, 95), pct(t_uns, 95)
        w("| figure | p50 | p95 | p99 | goal | met |")
        w("| --- | ---: | ---: | ---: | --- | --- |")
        w(f"| `unshare --net /bin/true` ({len(t_uns)} runs) | {pct(t_uns, 50):.1f} ms "
          f"| {u95:.1f} ms | {pct(t_uns, 99):.1f} ms | — | — |")
        ok = r95 <= GOAL_START_X * u95 and r95 < GOAL_START_P95_MS
        w(f"| `egressctl run -- /bin/true` ({len(t_run)} runs) | {pct(t_run, 50):.1f} ms "
          f"| {r95:.1f} ms | {pct(t_run, 99):.1f} ms | p95 ≤ {GOAL_START_X:g}x unshare "
          f"and < {GOAL_START_P95_MS:g} ms | {'yes' if ok else '**no**'} "
          f"({r95 / u95:.1f}x) |")
        p99 = pct(sc["att"], 99)
        w(f"| attach, 3-entry policy, 1st to {n:,}th sandbox | {pct(sc['att'], 50):.2f} ms "
          f"| {pct(sc['att'], 95):.2f} ms | {p99:.2f} ms | p99 < {GOAL_ATTACH_P99_MS:g} ms "
          f"| {'yes' if p99 < GOAL_ATTACH_P99_MS else '**no**'} |")
        k = max(1, min(1000, n // 10))
        w(f"| attach, first {k:,} / last {k:,} sandboxes (p50) | {pct(sc['att'][:k], 50):.2f} / "
          f"{pct(sc['att'][-k:], 50):.2f} ms | — | — | — | — |")
        w(f"| detach, {n:,}th to 1st | {pct(sc['det'], 50):.2f} ms | {pct(sc['det'], 95):.2f} "
          f"ms | {pct(sc['det'], 99):.2f} ms | — | — |")
        soft, fit, per_fd, fd1, fd0 = self.fd_limit
        if n < a.sandboxes:
            why = (f"--scale-seconds {a.scale_seconds} reached" if self.timed_out else
                   f"egressd's file limit here is {soft:,} (this host's hard limit; egressd "
                   f"cannot raise it without CAP_SYS_RESOURCE) and each sandbox costs "
                   f"{per_fd:.1f} open files (the first {FD_PROBE}: sockets "
                   f"{(fd1['socket'] - fd0['socket']) / FD_PROBE:.2f}, BPF links "
                   f"{(fd1['bpf_link'] - fd0['bpf_link']) / FD_PROBE:.2f}, other "
                   f"{(fd1['other'] - fd0['other']) / FD_PROBE:.2f}), so {fit:,} fit")
            w(f"| **{a.sandboxes:,} sandboxes** | — | — | — | all attached | **no**: {why} |")
        w(f"| `list` with {n:,} attached ({sc['listed']:,} listed, 5 calls) "
          f"| {pct(sc['list'], 50):.1f} ms | — | {max(sc['list']):.1f} ms (max) | — | — |")
        w(f"| `list` page of 500 with {n:,} attached (5 calls) | {pct(sc['page'], 50):.1f} ms "
          f"| — | {max(sc['page']):.1f} ms (max) | — | — |")
        for key, what in (("whole", "one whole `list`"),
                          ("paged", "`egressctl list --json` (pages of 500)")):
            took, worst, asked = sc["stall"][key]
            w(f"| {what} with {n:,} attached: its time; the longest a `status` asked "
              f"meanwhile waited ({asked} asked) | {took * 1e3:.0f} ms | — | {worst:.1f} ms "
              f"(max) | — | — |")
        w(f"| `status` with {n:,} attached (5 calls) | {pct(sc['status'], 50):.1f} ms | — "
          f"| {max(sc['status']):.1f} ms (max) | — | — |")
        w(f"| egressd idle with {n:,} attached (% of a CPU over {IDLE_SECONDS} s) "
          f"| {sc['idle']:.2f} % | — | — | — | — |")
        w("")
        per_rss = sc["rss_kib"] / n
        per_kern = sc["kern_kib"] / n
        per_maps = sc["maps_b"] / 1024 / n
        w("| memory per sandbox (3-entry policy) | KiB | goal | met |")
        w("| --- | ---: | --- | --- |")
        w(f"| egressd RSS ({sc['rss_total'] / 1024:.0f} MiB with {n:,}, VmHWM "
          f"{sc['hwm'] / 1024:.0f} MiB) | {per_rss:.1f} | — | — |")
        w(f"| kernel Slab + Percpu (/proc/meminfo; the whole machine, noisy) | {per_kern:.1f} "
          f"| — | — |")
        w(f"| of which the cgroup itself ({sc['bare']:,} bare cgroups, no egressd: the "
          f"runtime makes it anyway) | {sc['bare_kib']:.1f} | — | — |")
        mine = per_rss + per_kern - sc["bare_kib"]
        w(f"| egressd + kernel, beyond the cgroup | {mine:.1f} | < {GOAL_KIB_PER_SB:g} "
          f"| {'yes' if mine < GOAL_KIB_PER_SB else '**no**'} |")
        top = sorted(((v, k) for k, v in sc["slab_delta"].items() if v > 0), reverse=True)[:8]
        w(f"| slab caches that grew most (/proc/slabinfo, active objects; KiB per sandbox) | "
          + ", ".join(f"{k} {v / 1024 / n:.1f}" for v, k in top) + " | — | — |")
        top = sorted(((v, k) for k, v in sc["map_delta"].items() if v > 0), reverse=True)[:4]
        w(f"| bpftool bytes_memlock of egr_* maps (grows only for maps that allocate "
          f"per entry: " + (", ".join(f"{k} {v / 1024 / n:.2f}" for v, k in top) or "none")
          + f") | {per_maps:.1f} | — | — |")
        w("")
        fa, fz = sc["fd0"], sc["fdn"]
        w(f"egressd's open files with {n:,} sandboxes: {fz['total']:,} (sockets "
          f"{fz['socket']:,}, BPF links {fz['bpf_link']:,}, other {fz['other']:,}); before "
          f"the first: {fa['total']:,} (sockets {fa['socket']}, links {fa['bpf_link']}); "
          f"limit {soft:,}.")
        w("")
        for key, what in (("budgeted", "the default deny budget (100/s, burst 200 per "
                                        "sandbox)"),
                          ("every", "`--events-deny-rate 0` (every deny reported)")):
            e = ev[key]
            missing = e["refused"] - e["received"] - e["suppressed"] - e["lost"]
            w(f"Deny events, {what}: one thread's connect() refused {e['refused']:,} times "
              f"in {a.seconds} s (**{e['rate']:,.0f} denies/s**); the kernel counted "
              f"{e['counted']:,} connect denials; egressd received {e['received']:,} events "
              f"one by one, the budget counted {e['suppressed']:,} (reported in aggregate as "
              f"`denies_suppressed`), {e['lost']:,} were counted lost (ring full) — "
              + ("none missing." if missing <= 0 else
                 f"**{missing:,} neither received nor counted**.") + " Default ring (4 MiB).")
            w("")
        if strace:
            w("")
            w("One `egressctl run -- /bin/true` under `strace -f -c -S time` (top rows):")
            w("")
            w("```")
            w(strace.rstrip())
            w("```")
        text = "\n".join(lines).rstrip() + "\n"
        print(text)
        with open(os.path.join(self.build, "bench-scale-results.md"), "w") as f:
            f.write(text)
        if not a.no_docs:
            B.write_section(os.path.join(a.docs, "benchmarks.md"), "bench-scale", text)
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--docs", default=os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "docs"))
    ap.add_argument("--no-docs", action="store_true")
    ap.add_argument("--starts", type=int, default=100, help="runs of each start (1-2000)")
    ap.add_argument("--sandboxes", type=int, default=10000, help="scale test size (1-60000)")
    ap.add_argument("--seconds", type=int, default=3, help="deny loop seconds (1-30)")
    ap.add_argument("--scale-seconds", type=int, default=420,
                    help="at most this long attaching for the scale part (10-3600)")
    # tmpfs by default: bench.py measures attach on disk (its fsyncs); this
    # one is about what grows with the number of sandboxes, and 10,000
    # attaches at ~10-40 ms of fsyncs each on a busy disk would take most
    # of make bench's time.
    ap.add_argument("--state-parent", default="/dev/shm",
                    help="parent of egressd's state dir (default /dev/shm)")
    args = ap.parse_args()
    if not (1 <= args.starts <= 2000 and 1 <= args.sandboxes <= 60000
            and 1 <= args.seconds <= 30 and 10 <= args.scale_seconds <= 3600):
        ap.error("an option is out of range")
    if os.geteuid() != 0:
        print("bench-scale: needs root", file=sys.stderr)
        return 1

    return common.run_bench(lambda: Scale(args), log)


if __name__ == "__main__":
    sys.exit(main())
