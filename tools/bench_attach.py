#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Attach latency and its syncs (docs/benchmarks.md, "Attach: where the time
goes, and the state files' group commit").

Serial attach+detach cycles of tools/bench.py's 50-entry policy, then one
burst of concurrent attaches, each on its own control connection, against
one egressd (tools/bench.py's Bench: its egressd, dnsmasq, state dir and
cleanup). --create has egressd make each cgroup (the request's `create`:
no socket walk, as `egressctl run` does). --strace FILE traces egressd's
fsync/fdatasync and control-socket calls meanwhile and reports how many
syncs (and how long) lie between a lone attach's request and its reply,
and before the burst's last reply. --fsync-loop N first times the disk
itself: N x (append 1.7 KB + fdatasync) in --state-parent.

Needs root; everything it makes is undone on exit. Loops and waits bounded.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402
import bench_common as common  # noqa: E402

TRACE = ["-f", "-tt", "-T", "-e", "trace=fsync,fdatasync,recvfrom,sendto", "-s", "64"]


def fsync_loop(parent, n):
    """The disk's own fdatasync latency (ms): p50, p99, max."""
    d = tempfile.mkdtemp(prefix=bench.TAG + "-fsync-", dir=parent)
    path = os.path.join(d, "f")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    xs = []
    try:
        for _ in range(n):
            os.write(fd, b"x" * 1700)
            t = time.perf_counter()
            os.fdatasync(fd)
            xs.append((time.perf_counter() - t) * 1e3)
    finally:
        os.close(fd)
        os.unlink(path)
        os.rmdir(d)
    return bench.percentile(xs, 50), bench.percentile(xs, 99), max(xs)


def trace_syncs(path):
    """(syncs per lone attach, their ms p50, p99, syncs before the burst's
    last reply, their ms) from an strace of egressd."""
    ev = []
    line_re = re.compile(r"^\d+\s+[\d:.]+\s+(\w+)\((.*)<([\d.]+)>\s*$")
    with open(path) as f:
        for line in f:
            m = line_re.match(line.strip())
            if not m:
                continue
            name, rest, dur = m.group(1), m.group(2), float(m.group(3))
            if name == "recvfrom" and re.search(r"op.{0,6}attach", rest[:40]):
                ev.append(("A", 0.0))
            elif name == "recvfrom" and "op" in rest[:20]:
                ev.append(("Q", 0.0))
            elif name == "sendto" and '\\"ok\\"' in rest[:30]:
                ev.append(("R", 0.0))
            elif name in ("fsync", "fdatasync"):
                ev.append(("S", dur))
    lone, i = [], 0
    while i < len(ev):
        if ev[i][0] == "A" and i + 1 < len(ev) and ev[i + 1][0] != "A":
            j, n, t = i + 1, 0, 0.0
            while j < len(ev) and ev[j][0] == "S":
                n, t, j = n + 1, t + ev[j][1], j + 1
            if j < len(ev) and ev[j][0] == "R":
                lone.append((n, t * 1e3))
            i = j
        else:
            i += 1
    if not lone:
        raise RuntimeError(f"no lone attach found in {path}")
    return lone, ev


class AttachBench(bench.Bench):
    def __init__(self, args):
        args.attach_cycles = args.cycles
        super().__init__(args)

    def attach_one(self, cg, policy, create):
        req = {"op": "attach", "cgroup": cg, "policy": policy}
        if create:
            req["create"] = True
        data = (json.dumps(req, separators=(",", ":")) + "\n").encode()
        t0 = time.perf_counter()
        reply = bench.Control(self.sock).call_raw(data)
        dt = time.perf_counter() - t0
        bench.must_ok(reply, f"attach {cg}")
        if create:
            self.cgroups.insert(0, cg)  # removed before its parent
        self.attached.append(cg)
        return dt * 1e3

    def new_cg(self, parent, name):
        return os.path.join(parent, name) if self.args.create else self.new_cgroup(name)

    def run(self):
        a = self.args
        if a.fsync_loop:
            p50, p99, mx = fsync_loop(a.state_parent, a.fsync_loop)
            print(f"disk: {a.fsync_loop} x append+fdatasync in {self.state_fs}: "
                  f"p50 {p50:.2f} p99 {p99:.2f} max {mx:.2f} ms", flush=True)
        self.start_daemon()
        pid = self.status().get("pid", self.daemon.pid)
        tracer = None
        if a.strace:
            tracer = subprocess.Popen(["strace"] + TRACE + ["-o", a.strace, "-p", str(pid)],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
            # strace writes nothing until it is attached: status until it has.
            for _ in range(100):
                self.status()
                if os.path.exists(a.strace) and os.path.getsize(a.strace) > 0:
                    break
                time.sleep(0.2)
            else:
                raise RuntimeError("strace did not attach to egressd")
        parent = self.new_cgroup("attach-parent") if a.create else None
        policy = bench.make_policy(50, 9, 10, "attach-latency")
        att, det = [], []
        for i in range(a.cycles):
            cg = self.new_cg(parent, f"cycle-{i}")
            att.append(self.attach_one(cg, policy, a.create))
            det.append(self.detach(cg) * 1e3)
            self.rm_cgroup(cg)
        cgs = [self.new_cg(parent, f"burst-{i}") for i in range(a.burst)]
        times = [None] * a.burst
        errors = []

        def one(i):
            try:
                times[i] = self.attach_one(cgs[i], policy, a.create)
            except Exception as e:  # reported below
                errors.append(str(e))
        threads = [threading.Thread(target=one, args=(i,)) for i in range(a.burst)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        wall = (time.perf_counter() - t0) * 1e3
        if errors:
            raise RuntimeError(f"burst: {errors[0]}")
        for cg in cgs:
            self.detach(cg)
            self.rm_cgroup(cg)
        if tracer:
            self.status()
            tracer.terminate()
            tracer.wait(30)
        pct = bench.percentile
        print(f"attach ({'create' if a.create else 'existing cgroup'}, {a.cycles} cycles, "
              f"state on {self.state_fs}): p50 {pct(att, 50):.2f} p99 {pct(att, 99):.2f} "
              f"max {max(att):.2f} ms; detach p50 {pct(det, 50):.2f} p99 {pct(det, 99):.2f} ms; "
              f"burst of {a.burst}: {wall:.1f} ms", flush=True)
        if tracer:
            lone, ev = trace_syncs(a.strace)
            ts = [t for _, t in lone]
            starts = [k for k, e in enumerate(ev) if e[0] == "A"]
            b0 = starts[-a.burst] if len(starts) >= a.burst else 0
            replies = [k for k, e in enumerate(ev) if e[0] == "R" and k > b0]
            end = replies[a.burst - 1] if len(replies) >= a.burst else len(ev) - 1
            bs = [d for kind, d in ev[b0:end + 1] if kind == "S"]
            ns = sorted(n for n, _ in lone)
            print(f"syncs (strace): lone attach {ns[len(ns) // 2]} (median; mean "
                  f"{sum(ns) / len(ns):.2f}, the first also writes tenants.json) "
                  f"between request and reply, {pct(ts, 50):.2f} / {pct(ts, 99):.2f} ms "
                  f"p50 / p99 in them (n={len(lone)}); burst of {a.burst}: {len(bs)} before "
                  f"its last reply, {sum(bs) * 1e3:.2f} ms in them", flush=True)
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="build directory (default build)")
    ap.add_argument("--state-parent", default="/var/tmp",
                    help="where egressd's state dir goes (default /var/tmp; /dev/shm: tmpfs)")
    ap.add_argument("--cycles", type=int, default=100, help="serial attach+detach cycles")
    ap.add_argument("--burst", type=int, default=8, help="concurrent attaches after them")
    ap.add_argument("--create", action="store_true",
                    help="egressd makes each cgroup (the request's create: no socket walk)")
    ap.add_argument("--strace", metavar="FILE",
                    help="trace egressd's syncs and control socket into FILE and count them")
    ap.add_argument("--fsync-loop", type=int, default=0, metavar="N",
                    help="first time N x (append + fdatasync) in --state-parent")
    a = ap.parse_args()
    if not 1 <= a.cycles <= 10000 or not 1 <= a.burst <= 64 or not 0 <= a.fsync_loop <= 100000:
        ap.error("--cycles 1-10000, --burst 1-64, --fsync-loop 0-100000")
    if os.geteuid() != 0:
        print("bench_attach: needs root (BPF programs, cgroups, bpffs)", file=sys.stderr)
        return 1
    # Bench's other settings, unused here.
    a.seconds, a.rounds, a.entries, a.deep_entries = 1, 1, [], []
    a.socket_attach_min, a.no_docs = 1_000_000, True
    return common.run_bench(lambda: AttachBench(a), bench.log)


if __name__ == "__main__":
    sys.exit(main())
