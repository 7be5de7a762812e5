#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""egressd tenant isolation benchmark (docs/benchmarks.md, "Tenant isolation").

A victim sandbox's DNS latency (LAT_CLIENT of bench_dns.py: one query in
flight on a fixed schedule, 400 q/s (under its own 500/s limit), inside the victim's cgroup, through
127.0.0.2:53 redirected to its proxy) alone and while four neighbour
sandboxes each send 3,000 q/s of a name the upstream never answers
(dnsmasq forwards blackhole.bench.test to a UDP socket nobody reads),
alternating, with egressd's default fairness limits. Then the control
socket's `status` round trip alone and while four sandboxed processes
trickle a byte every 100 ms into it. Bounded: every flood runs only for its
round, on loopback.
"""
import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common as common  # noqa: E402
from bench_dns import BenchDns, LAT_CLIENT, NAMES, RESOLVER, log  # noqa: E402

NOISY = 4
FLOOD_QPS = 3000

FLOODER = r"""
import os, random, socket, struct, sys, time
qps, duration = int(sys.argv[1]), float(sys.argv[2])
os.nice(10)
q = b""
for label in "x.blackhole.bench.test".split("."):
    q += bytes([len(label)]) + label.encode()
q += b"\0" + struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
sent, t0 = 0, time.monotonic()
while time.monotonic() - t0 < duration:
    while sent < (time.monotonic() - t0) * qps:
        try:
            s.sendto(struct.pack(">HHHHHH", random.getrandbits(16), 0x0100, 1, 0, 0, 0) + q,
                     ("127.0.0.2", 53))
        except BlockingIOError:
            pass
        sent += 1
    try:
        while s.recv(4096):
            pass
    except BlockingIOError:
        pass
    time.sleep(0.005)
"""

TRICKLER = r"""
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.setblocking(False)
t0 = time.monotonic()
while time.monotonic() - t0 < float(sys.argv[2]):
    try:
        s.send(b"{")
    except OSError:
        s.close()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sys.argv[1])
        s.setblocking(False)
    time.sleep(0.1)
"""


class BenchTenant(BenchDns):
    def egressd_extra(self):
        return []   # the defaults are what is measured

    def dnsmasq_extra(self):
        self.hole = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.hole.bind(("127.0.0.1", 0))
        return [f"--server=/blackhole.bench.test/127.0.0.1#{self.hole.getsockname()[1]}",
                "--dns-forward-max=10000"]

    def sandboxes(self):
        names = [f"h{i}.bench.test" for i in range(NAMES)]
        # The zone answers a loopback address: expected here, not rebinding.
        self.victim = self.sandbox("victim", {"outbound_allow": [], "dns_allow": names,
                                              "dns_rebind_allow": ["127.0.0.0/8"]})
        self.noisy = [self.sandbox(f"noisy{i}", {"outbound_allow": [],
                                                 "dns_allow": ["*.blackhole.bench.test"]})
                      for i in range(NOISY)]

    def in_cg(self, cg, argv, **kw):
        def join():
            fd = os.open(os.path.join(cg, "cgroup.procs"), os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, preexec_fn=join, **kw)

    def victim_latency(self, seconds, qps):
        p = self.in_cg(self.victim, [sys.executable, "-c", LAT_CLIENT, RESOLVER, "53",
                                     str(seconds * qps), str(qps), str(NAMES)])
        out, err = p.communicate(timeout=seconds * 3 + 30)
        if p.returncode:
            raise RuntimeError(f"latency client: {err.strip()[-500:]}")
        return json.loads(out)

    def with_noise(self, argv_for, seconds, fn):
        procs = [self.in_cg(cg, argv_for(cg)) for cg in self.noisy]
        try:
            time.sleep(1.0)   # the table fills (256 per neighbour for 2 s each)
            return fn()
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait(10)

    def status_rtts(self, n):
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            if not self.ctl.call({"op": "status"}, timeout=10).get("ok"):
                raise RuntimeError("status failed")
            out.append(time.perf_counter() - t0)
            time.sleep(0.05)
        return out

    def run(self):
        a = self.args
        self.start()
        self.victim_latency(1, 200)   # warm-up
        alone, flood, st_alone, st_trickle = [], [], [], []
        for rnd in range(a.rounds):
            x = self.victim_latency(a.seconds, a.qps)
            alone.append(x)
            y = self.with_noise(lambda cg: [sys.executable, "-c", FLOODER, str(FLOOD_QPS),
                                            str(a.seconds + 3)],
                                a.seconds, lambda: self.victim_latency(a.seconds, a.qps))
            flood.append(y)
            log(f"round {rnd + 1}: victim alone p50/p99 {x['p50'] * 1e6:.0f}/"
                f"{x['p99'] * 1e6:.0f} us, lost {x['lost']}; under {NOISY} floods "
                f"{y['p50'] * 1e6:.0f}/{y['p99'] * 1e6:.0f} us, lost {y['lost']}, "
                f"not NOERROR {y['bad']}")
            st_alone += self.status_rtts(10)
            st_trickle += self.with_noise(lambda cg: [sys.executable, "-c", TRICKLER,
                                                      self.sock, "4"], 3,
                                          lambda: self.status_rtts(10))
        med = statistics.median
        sh = {}
        for cg in [self.victim] + self.noisy:
            for s in self.ctl.call({"op": "list"})["sandboxes"]:
                if s["cgroup"] == cg:
                    sh[cg] = s["dns"]["proxy"]
        vs = sh.get(self.victim, {})
        lines = []
        w = lines.append
        w(f"### Tenant isolation ({datetime.date.today().isoformat()}, {platform.node()}, "
          f"kernel {platform.release()}, {os.cpu_count()} CPUs)")
        w("")
        w(f"`python3 tools/bench_tenant.py --build {a.build} --seconds {a.seconds} --rounds "
          f"{a.rounds} --qps {a.qps}`: the victim's latency client inside its sandbox, "
          f"{a.qps} q/s for {a.seconds} s; {NOISY} neighbours at {FLOOD_QPS} q/s each of a "
          f"name the upstream never answers (nice 10); egressd's default limits. Medians of "
          f"{a.rounds} alternating rounds.")
        w("")
        w("| figure | victim alone | victim under the floods | ratio |")
        w("|---|---|---|---|")
        for k in ("p50", "p99", "max"):
            x, y = med([r[k] for r in alone]) * 1e6, med([r[k] for r in flood]) * 1e6
            w(f"| DNS {k} | {x:.0f} µs | {y:.0f} µs | {y / x:.2f} |")
        w(f"| victim queries failed or lost (all rounds) | "
          f"{sum(r['lost'] + r['bad'] for r in alone)} | "
          f"{sum(r['lost'] + r['bad'] for r in flood)} | |")
        w(f"| `status` round trip, median / max | {med(st_alone) * 1e3:.2f} / "
          f"{max(st_alone) * 1e3:.2f} ms | {med(st_trickle) * 1e3:.2f} / "
          f"{max(st_trickle) * 1e3:.2f} ms (4 sandboxed tricklers) | |")
        w("")
        w(f"- victim shed: rate {vs.get('shed_rate')}, in-flight {vs.get('shed_inflight')}, "
          f"evicted {vs.get('evicted')}")
        for i, cg in enumerate(self.noisy):
            n = sh.get(cg, {})
            w(f"- neighbour {i}: shed rate {n.get('shed_rate')}, in-flight "
              f"{n.get('shed_inflight')}, evicted {n.get('evicted')}, servfail "
              f"{n.get('servfail')}")
        w("- per round, victim p50/p99 µs alone | flood: " + ", ".join(
            f"{x['p50'] * 1e6:.0f}/{x['p99'] * 1e6:.0f} | {y['p50'] * 1e6:.0f}/"
            f"{y['p99'] * 1e6:.0f}" for x, y in zip(alone, flood)))
        text = "\n".join(lines) + "\n"
        print(text)
        with open(os.path.join(self.build, "bench-tenant-results.md"), "w") as f:
            f.write(text)
        return 0

    def cleanup(self):
        super().cleanup()
        if getattr(self, "hole", None):
            self.hole.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="build directory (default build)")
    ap.add_argument("--seconds", type=int, default=3, help="seconds per latency run (1-30)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (1-10)")
    ap.add_argument("--qps", type=int, default=400,
                    help="the victim's query rate (1-500: under its own default limit)")
    args = ap.parse_args()
    if not (1 <= args.seconds <= 30 and 1 <= args.rounds <= 10 and 1 <= args.qps <= 500):
        ap.error("an option is out of range")
    if os.geteuid() != 0:
        print("bench-tenant: needs root (BPF programs, cgroups)", file=sys.stderr)
        return 1

    return common.run_bench(lambda: BenchTenant(args), log)


if __name__ == "__main__":
    sys.exit(main())
