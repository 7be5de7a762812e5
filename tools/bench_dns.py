#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""egressd DNS proxy benchmark (docs/benchmarks.md, "DNS proxy").

dnsperf against a local dnsmasq directly, and against the same dnsmasq
through egressd's DNS proxy, alternating, in the same run:

- direct: dnsperf -s 127.0.0.1 -p PORT (dnsmasq), outside any sandbox;
- proxy:  dnsperf -s 127.0.0.2 -p 53 run INSIDE a sandbox cgroup: the
  kernel redirects its queries to the sandbox's proxy listener and rewrites
  the replies' source back (the path a sandboxed tool takes). The proxy
  forwards to dnsmasq and, since the names are outbound_allow names, writes
  each answer's address into the sandbox's allowlist before releasing it.

A third path, "proxy, no learning", is the same through a second sandbox
whose policy lists the names in dns_allow only (resolvable, nothing
learned): the difference to "proxy" is the cost of writing the allowlist.

Figures: queries/s at saturation (dnsperf -c C -q Q, no -Q) and the ratio
proxy/direct; p50/p99 latency at a fixed 1,000 queries/s; CPU of dnsmasq
and egressd during the saturation runs, to show what limits the proxy.
dnsperf 2.10 prints only the average latency and its deviation (no
percentiles), and the per-query latencies of `dnsperf -v` carry its own
~1 ms timer tail even against dnsmasq directly, so the percentiles come from
LAT_CLIENT below: one query in flight, sent on a fixed 1 ms schedule from an
unconnected UDP socket, timed from sendto() to the matching recv().

Needs root, dnsperf and dnsmasq. Everything it creates (dnsmasq, egressd,
cgroup, bpffs dir, state dir) is removed on exit, also on failure.
"""
import argparse
import datetime
import os
import platform
import re
import resource
import shutil
import statistics
import json
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Control, cgroup2_mount, must_ok, write_section, gnuplot_svg  # noqa: E402
import bench_common as common  # noqa: E402  (egressd, dnsmasq, cgroups: the e2e harness)

PID = os.getpid()
TAG = f"egressd-bench-dns-{PID}"
DNSMASQ = common.DNSMASQ
ZONE_ADDR = "127.0.0.31"       # every *.bench.test name
NAMES = 50                     # distinct query names (each its own outbound_allow entry)
RESOLVER = "127.0.0.2"         # what the sandboxed dnsperf names; redirected to the proxy

PATHS = ("direct", "proxy", "nolearn")

GOAL_RATIO = 0.5               # proxy/direct q/s at saturation
GOAL_ADDED_P99_US = 100.0      # at 1,000 q/s


# The latency client: argv SERVER PORT COUNT RATE; prints one JSON line.
LAT_CLIENT = r"""
import json, socket, struct, sys, time
server, port, nq, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
names = ["h%d.bench.test" % i for i in range(int(sys.argv[5]))]
def query(qid, name):
    b = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        b += bytes([len(label)]) + label.encode()
    return b + b"\0" + struct.pack(">HH", 1, 1)
pkts = [query(i & 0xffff, names[i % len(names)]) for i in range(nq)]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1.0)
lat, lost, bad = [], 0, 0
pc = time.perf_counter_ns
step = int(1e9 / rate)
start = pc()
for i in range(nq):
    due = start + i * step
    while True:
        now = pc()
        if now >= due:
            break
        if due - now > 200000:
            time.sleep((due - now - 100000) / 1e9)
    pkt = pkts[i]
    t0 = pc()
    s.sendto(pkt, (server, port))
    try:
        while True:
            m = s.recv(4096)
            if m[:2] == pkt[:2]:
                break
        lat.append(pc() - t0)
        if m[3] & 15:
            bad += 1
    except socket.timeout:
        lost += 1
lat.sort()
def pct(p):
    return lat[max(0, min(len(lat) - 1, -(-p * len(lat) // 100) - 1))] / 1e9
print(json.dumps({"n": len(lat), "lost": lost, "bad": bad, "p50": pct(50), "p99": pct(99),
                  "max": lat[-1] / 1e9 if lat else None,
                  "us": [round(x / 1e3, 1) for x in lat]}))
"""


def log(msg):
    print(f"bench-dns: {msg}", file=sys.stderr, flush=True)


def free_port():
    """A port free for both UDP and TCP on 127.0.0.1 (dnsmasq binds both)."""
    return common.free_udp_tcp_port("127.0.0.1")


def cpu_s(pid):
    """utime+stime of a process, seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_busy():
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def parse_summary(out):
    def num(pattern):
        m = re.search(pattern, out)
        return float(m.group(1)) if m else None
    return {
        "qps": num(r"Queries per second:\s+([\d.]+)"),
        "sent": num(r"Queries sent:\s+(\d+)"),
        "completed": num(r"Queries completed:\s+(\d+)"),
        "lost": num(r"Queries lost:\s+(\d+)"),
        "avg_s": num(r"Average Latency \(s\):\s+([\d.]+)"),
        "noerror": num(r"NOERROR (\d+)"),
    }


class BenchDns:
    def __init__(self, args):
        self.args = args
        self.build = os.path.abspath(args.build)
        self.egressd_bin = os.path.join(self.build, "egressd")
        self.tmp = tempfile.mkdtemp(prefix=TAG + "-", dir="/var/tmp")
        self.sock = os.path.join(self.tmp, "egressd.sock")
        self.bpffs_dir = f"/sys/fs/bpf/{TAG}"
        self.ctl = Control(self.sock)
        self.cgroup = None        # outbound_allow names: every answer learned
        self.cgroup_nl = None     # dns_allow names only: nothing learned
        self.attached = []
        self.dnsmasq = None
        self.daemon = None
        self.daemon_log = None
        self.cgroups = []
        self.port = None
        self.qfile = os.path.join(self.tmp, "queries.txt")

    # -- lifecycle

    def egressd_extra(self):
        # Saturation measures the proxy, not the per-sandbox query rate
        # limit (500/s by default, docs/dns.md "Fairness"): lifted here.
        return ["--dns-rate", "1000000", "--dns-burst", "1000000"]

    def dnsmasq_extra(self):
        return []

    def start(self):
        for b, what in ((self.egressd_bin, "run `make all`"), (DNSMASQ, "dnsmasq-base"),
                        (shutil.which("dnsperf") or "/usr/bin/dnsperf", "dnsperf")):
            if not os.access(b, os.X_OK):
                raise RuntimeError(f"{b} is missing ({what})")
        with open(self.qfile, "w") as f:
            for i in range(NAMES):
                f.write(f"h{i}.bench.test A\n")
        self.port = free_port()
        self.dnsmasq = common.start_dnsmasq(
            self.port, f"{self.tmp}/dnsmasq.pid",
            [f"--address=/bench.test/{ZONE_ADDR}", "--local-ttl=300"] + self.dnsmasq_extra())
        self.daemon_log = open(os.path.join(self.build, "bench-dns-egressd.log"), "w")
        self.daemon = common.start_egressd(
            self.egressd_bin, self.sock, self.bpffs_dir, os.path.join(self.tmp, "state"),
            f"127.0.0.1:{self.port}", self.daemon_log,
            lambda: self.ctl.call({"op": "status"}, timeout=10).get("ok"),
            extra=self.egressd_extra(), watch=(self.dnsmasq,))
        log(f"dnsmasq on 127.0.0.1:{self.port}")
        self.sandboxes()

    def sandboxes(self):
        names = [f"h{i}.bench.test" for i in range(NAMES)]
        # The zone answers 127.0.0.31: expected here, not a rebinding attempt.
        lo = ["127.0.0.0/8"]
        self.cgroup = self.sandbox("learn", {"outbound_allow": [f"{n}:443" for n in names],
                                             "dns_rebind_allow": lo})
        self.cgroup_nl = self.sandbox("nolearn", {"outbound_allow": [], "dns_allow": names,
                                                  "dns_rebind_allow": lo})

    def sandbox(self, name, net):
        cg = os.path.join(cgroup2_mount(), f"{TAG}-{name}")
        os.mkdir(cg)
        self.cgroups.append(cg)
        policy = {"tenant": "bench", "execution_id": f"{TAG}-{name}",
                  "principal": "bench:dnsperf", "tool": "dnsperf", "version": "0",
                  "network": dict({"default": "deny", "inbound": "deny"}, **net)}
        must_ok(self.ctl.call({"op": "attach", "cgroup": cg, "policy": policy}), "attach")
        self.attached.append(cg)
        return cg

    def cleanup(self):
        if self.daemon and self.daemon.poll() is None:
            for cg in self.attached:
                try:
                    self.ctl.call({"op": "detach", "cgroup": cg}, timeout=30)
                except Exception as e:
                    log(f"cleanup: detach: {e}")
            common.stop_egressd(self.daemon)
        common.stop_process(self.dnsmasq)
        for cg in self.cgroups:
            common.remove_cgroup(cg, log)
        if os.path.isdir(self.bpffs_dir):
            shutil.rmtree(self.bpffs_dir, ignore_errors=True)
        common.remove_work_dir(self.tmp, self.sock, log)
        if self.daemon_log:
            self.daemon_log.close()

    # -- measurements

    def target(self, path):
        """(server, port, cgroup or None) for a path."""
        if path == "direct":
            return "127.0.0.1", self.port, None
        return RESOLVER, 53, self.cgroup if path == "proxy" else self.cgroup_nl

    def spawn(self, path, argv, timeout):
        """Run argv on a path; (stdout, cpu seconds used by dnsmasq, by egressd)."""
        cg = self.target(path)[2]

        def join():
            fd = os.open(os.path.join(cg, "cgroup.procs"), os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

        c0 = (cpu_s(self.dnsmasq.pid), cpu_s(self.daemon.pid))
        u0, m0 = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_busy()
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=timeout, preexec_fn=join if cg else None)
        c1 = (cpu_s(self.dnsmasq.pid), cpu_s(self.daemon.pid))
        u1, m1 = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_busy()
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:8])}: exit {r.returncode}: "
                               f"{r.stderr.strip()[-1000:]}")
        self.last_client_cpu = (u1.ru_utime + u1.ru_stime) - (u0.ru_utime + u0.ru_stime)
        self.last_machine_busy = (m1[0] - m0[0]) / max(1, m1[1] - m0[1])
        return r.stdout, c1[0] - c0[0], c1[1] - c0[1]

    def dnsperf(self, path, extra, seconds):
        server, port, _ = self.target(path)
        return self.spawn(path, ["dnsperf", "-s", server, "-p", str(port), "-d", self.qfile,
                                 "-l", str(seconds)] + extra, seconds + 30)

    def saturation(self, path):
        a = self.args
        out, dm_cpu, ed_cpu = self.dnsperf(path, ["-c", str(a.clients), "-q",
                                                  str(a.outstanding)], a.seconds)
        s = parse_summary(out)
        if s["qps"] is None:
            raise RuntimeError(f"no 'Queries per second' in dnsperf output:\n{out}")
        if not s["noerror"] or s["noerror"] < s["completed"]:
            raise RuntimeError(f"not every answer was NOERROR ({path}):\n{out}")
        s["dnsmasq_cpu"] = dm_cpu / a.seconds
        s["egressd_cpu"] = ed_cpu / a.seconds
        s["client_cpu"] = self.last_client_cpu / a.seconds
        s["busy"] = self.last_machine_busy
        return s

    def control_load(self, stop, done):
        """--control-load: `stats` requests on the control socket at that
        rate until stop is set (work for egressd's control loop while the
        latency run queries the proxy)."""
        gap, nxt = 1.0 / self.args.control_load, time.monotonic()
        while not stop.is_set():
            must_ok(self.ctl.call({"op": "stats"}, timeout=10), "stats")
            done[0] += 1
            nxt += gap
            stop.wait(max(0.0, nxt - time.monotonic()))

    def latency(self, path):
        a = self.args
        server, port, _ = self.target(path)
        n = a.qps * a.seconds
        stop, done, th = threading.Event(), [0], None
        if a.control_load:
            th = threading.Thread(target=self.control_load, args=(stop, done), daemon=True)
            th.start()
        try:
            out, _, _ = self.spawn(path, [sys.executable, "-c", LAT_CLIENT, server, str(port),
                                          str(n), str(a.qps), str(NAMES)], a.seconds * 3 + 30)
        finally:
            stop.set()
            if th:
                th.join(15)
        if a.control_load:
            log(f"{path}: {done[0]} control requests during the latency run")
        x = json.loads(out)
        if x["lost"] or x["bad"] or x["n"] != n:
            raise RuntimeError(f"latency run on {path}: {x}")
        return x

    def run(self):
        a = self.args
        self.start()
        # Warm up every path (and the learned entries).
        for path in PATHS:
            self.dnsperf(path, ["-Q", "1000"], 1)
        sat = {p: [] for p in PATHS}
        lat = {p: [] for p in PATHS}
        for rnd in range(a.rounds):
            for path in PATHS:
                s = self.saturation(path)
                sat[path].append(s)
                log(f"round {rnd + 1} {path:8} saturation: {s['qps']:.0f} q/s, lost "
                    f"{s['lost']:.0f}, cpu dnsmasq {s['dnsmasq_cpu']:.2f} egressd "
                    f"{s['egressd_cpu']:.2f} dnsperf {s['client_cpu']:.2f}, machine "
                    f"{s['busy'] * 100:.0f}% busy")
            for path in PATHS:
                x = self.latency(path)
                lat[path].append(x)
                log(f"round {rnd + 1} {path:8} at {a.qps} q/s: p50 {x['p50'] * 1e6:.0f} us, "
                    f"p99 {x['p99'] * 1e6:.0f} us, max {x['max'] * 1e6:.0f} us")
        return self.report(sat, lat)

    def plot_cdf(self, lat):
        """Latency CDF at the fixed rate, every sample of every round, for
        the three paths (an SVG next to docs/benchmarks.md)."""
        a = self.args
        dats = {}
        for p in PATHS:
            xs = sorted(u for x in lat[p] for u in x["us"])
            dats[p] = os.path.join(self.build, f"bench-dns-cdf-{p}.dat")
            with open(dats[p], "w") as f:
                # Every rank would make a ~0.7 MB SVG: 400 even ranks plus
                # every one of the top 1% (the tail is what differs).
                n = len(xs)
                ranks = sorted(set(range(0, n, max(1, n // 400))) |
                               set(range(max(0, n - n // 100 - 1), n)))
                for i in ranks:
                    f.write(f"{xs[i]} {(i + 1) / n:.5f}\n")
        svg = os.path.join(self.build if a.no_docs else a.docs, "bench-dns-cdf.svg")
        title = {"direct": "direct (dnsmasq)", "proxy": "sandbox proxy, learning",
                 "nolearn": "sandbox proxy, no learning"}
        gnuplot_svg(f"set terminal svg size 720,420 dynamic noenhanced font 'sans,11'\n"
                    f"set output '{svg}'\n"
                    f"set title 'DNS query latency at {a.qps:,} q/s (all rounds)'\n"
                    "set logscale x\nset xlabel 'latency (µs)'\nset ylabel 'fraction of queries'\n"
                    "set key bottom right\nset grid\nset yrange [0:1]\n"
                    "plot " + ", ".join(f"'{dats[p]}' using 1:2 with lines lw 2 title '{title[p]}'"
                                        for p in PATHS) + "\n")
        return svg

    def report(self, sat, lat):
        a = self.args
        med = statistics.median
        qps = {p: med([s["qps"] for s in sat[p]]) for p in PATHS}
        p50 = {p: med([x["p50"] for x in lat[p]]) * 1e6 for p in PATHS}
        p99 = {p: med([x["p99"] for x in lat[p]]) * 1e6 for p in PATHS}
        cpu = {p: tuple(med([s[k] for s in sat[p]])
                        for k in ("dnsmasq_cpu", "egressd_cpu", "client_cpu", "busy"))
               for p in PATHS}
        lost = {p: sum(s["lost"] or 0 for s in sat[p]) for p in PATHS}
        ratio = qps["proxy"] / qps["direct"]
        added = p99["proxy"] - p99["direct"]
        lines = []
        w = lines.append
        w(f"### DNS proxy ({datetime.date.today().isoformat()}, {platform.node()}, "
          f"kernel {platform.release()}, {os.cpu_count()} CPUs)")
        w("")
        w(f"`python3 tools/bench_dns.py --build {a.build} --seconds {a.seconds} --rounds "
          f"{a.rounds} --clients {a.clients} --outstanding {a.outstanding} --qps {a.qps}`: "
          f"{NAMES} A queries round robin; *proxy*: the names are `outbound_allow` entries, "
          f"every answer is learned; *proxy, no learning*: the same names in `dns_allow` "
          f"only. Both proxy paths run their client inside the sandbox cgroup, querying "
          f"{RESOLVER}:53 (redirected by the kernel). Medians of {a.rounds} alternating "
          f"rounds.")
        w("")
        w("| figure | direct (dnsmasq) | proxy | proxy, no learning | proxy / direct | goal |")
        w("|---|---|---|---|---|---|")
        w(f"| q/s at saturation (dnsperf -c {a.clients} -q {a.outstanding}) | "
          f"{qps['direct']:,.0f} | {qps['proxy']:,.0f} | {qps['nolearn']:,.0f} | "
          f"{ratio:.2f} | ≥ {GOAL_RATIO} {'met' if ratio >= GOAL_RATIO else 'NOT met'} |")
        w(f"| p50 latency at {a.qps:,} q/s | {p50['direct']:.0f} µs | {p50['proxy']:.0f} µs | "
          f"{p50['nolearn']:.0f} µs | +{p50['proxy'] - p50['direct']:.0f} µs | |")
        w(f"| p99 latency at {a.qps:,} q/s | {p99['direct']:.0f} µs | {p99['proxy']:.0f} µs | "
          f"{p99['nolearn']:.0f} µs | {added:+.0f} µs | < {GOAL_ADDED_P99_US:.0f} µs added "
          f"{'met' if added < GOAL_ADDED_P99_US else 'NOT met'} |")
        w("| CPU at saturation, dnsmasq / egressd / dnsperf (cores) | " +
          " | ".join(f"{cpu[p][0]:.2f} / {cpu[p][1]:.2f} / {cpu[p][2]:.2f}" for p in PATHS)
          + " | | |")
        w(f"| machine busy at saturation ({os.cpu_count()} CPUs, incl. softirq) | " +
          " | ".join(f"{cpu[p][3] * 100:.0f}%" for p in PATHS) + " | | |")
        w("| queries lost at saturation (all rounds) | " +
          " | ".join(f"{lost[p]:.0f}" for p in PATHS) + " | | |")
        w("")
        for p in PATHS:
            w(f"- {p}: q/s per round " + ", ".join(f"{s['qps']:.0f}" for s in sat[p]) +
              "; p50/p99 µs per round " +
              ", ".join(f"{x['p50'] * 1e6:.0f}/{x['p99'] * 1e6:.0f}" for x in lat[p]))
        svg = self.plot_cdf(lat)
        w("")
        w(f"![DNS latency CDF, direct vs proxy]({os.path.basename(svg)})")
        text = "\n".join(lines) + "\n"
        print(text)
        if not a.no_docs:
            write_section(os.path.join(a.docs, "benchmarks.md"), "bench-dns", text)
            log(f"wrote {a.docs}/benchmarks.md and {svg}")
        out = os.path.join(self.build, "bench-dns-results.md")
        with open(out, "w") as f:
            f.write(text)
        log(f"wrote {out}")
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="build directory (default build)")
    ap.add_argument("--seconds", type=int, default=5, help="seconds per dnsperf run (1-60)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (1-20)")
    ap.add_argument("--clients", type=int, default=1, help="dnsperf -c at saturation (1-64)")
    ap.add_argument("--outstanding", type=int, default=100,
                    help="dnsperf -q at saturation (1-200; the proxy's per-sandbox in-flight "
                         "bound is 256)")
    ap.add_argument("--qps", type=int, default=1000, help="rate for the latency runs")
    ap.add_argument("--docs", default=os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "docs"), help="where benchmarks.md and the SVG go")
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    ap.add_argument("--control-load", type=int, default=0,
                    help="`stats` requests per second on the control socket during the "
                         "latency runs (0-1000; 0: none): control work next to the proxy's")
    args = ap.parse_args()
    if not (1 <= args.seconds <= 60 and 1 <= args.rounds <= 20 and 1 <= args.clients <= 64
            and 1 <= args.outstanding <= 200 and 1 <= args.qps <= 100000
            and 0 <= args.control_load <= 1000):
        ap.error("an option is out of range")
    if os.geteuid() != 0:
        print("bench-dns: needs root (BPF programs, cgroups)", file=sys.stderr)
        return 1

    return common.run_bench(lambda: BenchDns(args), log)


if __name__ == "__main__":
    sys.exit(main())
