#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""egressd side by side with nftables and tinyproxy (docs/benchmarks.md).

One run, alternating in every round, all on loopback in network namespaces
this script creates:

- unconfined: no filter at all (netns A);
- nftables: the same allowlist as nftables sets (`inet_proto . ipv4_addr .
  inet_service`: single ports in a hashed set, port ranges in an interval
  set) in the output hook of its own netns B, after `ct state
  established,related accept` (what an operator would write);
- egressd: the client in a sandbox cgroup whose policy is that allowlist
  (netns A; egressd's programs are per cgroup, not per netns);
- tinyproxy (Debian) as the userspace HTTP CONNECT proxy, its filter the
  allowlist's hosts (fnmatch, FilterDefaultDeny), ConnectPort the allowed
  ports (netns A); once with the full allowlist and once with 10 entries
  (its best case).

Figures: connects/s and connect latency p50/p99 (build/bench/connect_loop;
through tinyproxy a connect ends at its "200" answer), bulk TCP throughput
(iperf3 where it can run; build/bench/inspect_load bulk for all four, since
iperf3 cannot go through a CONNECT proxy), the per-program BPF time per
connect (kernel.bpf_stats_enabled=1, restored on exit), and the connect cost
against rule count for egressd and nftables (SVG plot with gnuplot).

Needs root, nft, iperf3, tinyproxy, gnuplot (tools/install-deps --bench).
Everything it creates is removed on exit, also on failure or Ctrl-C; every
loop and wait is bounded.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as B  # noqa: E402  (helpers: policies, control socket, bpftool)
import bench_common as common  # noqa: E402  (egressd, dnsmasq, cgroups: the e2e harness)

PID = os.getpid()
TAG = f"egrcmp-{PID}"
NS_A = f"{TAG}-a"
NS_NFT = f"{TAG}-nft"
ADDR = "127.0.0.1"
PORT = 18080          # connect_loop's listener
BULK_PORT = 18081     # inspect_load server
IPERF_PORT = 18082    # iperf3 server
PROXY_PORT = 18090    # tinyproxy, full allowlist
PROXY_SMALL_PORT = 18091  # tinyproxy, 10 entries
DNSMASQ = common.DNSMASQ

# Goals of issue 10.
GOAL_VS_NFT = 1.0       # egressd connects/s >= nftables
GOAL_VS_PROXY = 4.0     # egressd connects/s >= 4x tinyproxy
GOAL_BULK = 0.97        # egressd bulk / unconfined
GOAL_BULK_PROXY = 2.0   # egressd bulk / tinyproxy bulk
GOAL_BPF_NS = 1000.0    # BPF ns per connect, all programs


def log(msg):
    print(f"bench-compare: {msg}", file=sys.stderr, flush=True)


def run(cmd, timeout=60, check=True, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])}...: exit {r.returncode}: "
                           f"{(r.stderr or r.stdout).strip()[:400]}")
    return r


def in_ns(ns):
    # nsenter, not `ip netns exec`: the latter remounts /sys and the cgroup2
    # mount (which connect_loop --cgroup writes) would vanish.
    return ["nsenter", f"--net=/run/netns/{ns}"]


def allowlist(n):
    """n entries: the filler /32s of bench.py (10.0.0.0/8) plus the three
    listeners this script uses."""
    allow = B.make_policy(max(1, n - 2), PORT, 10, "x")["network"]["outbound_allow"]
    return allow + [f"tcp/{ADDR}:{BULK_PORT}", f"tcp/{ADDR}:{IPERF_PORT}"]


def policy(n, name):
    return {"tenant": "bench", "execution_id": name, "principal": "bench:compare",
            "tool": "bench", "version": "0",
            "network": {"default": "deny", "outbound_allow": allowlist(n), "inbound": "deny"}}


def parse_entry(e):
    """(protocols, addr, lo, hi) of an allowlist entry as bench.py writes them."""
    protos = ("tcp", "udp")
    if "/" in e.split(":")[0]:
        p, e = e.split("/", 1)
        protos = (p,)
    addr, ports = e.rsplit(":", 1)
    lo, _, hi = ports.partition("-")
    return protos, addr, int(lo), int(hi or lo)


def nft_elems(elems):
    """An nft element list, chunked over lines."""
    out = ["    elements = {"]
    for i in range(0, len(elems), 256):
        out.append("      " + ", ".join(elems[i:i + 256]) + ",")
    out[-1] = out[-1].rstrip(",")
    return out + ["    }"]


def nft_ruleset(n):
    """The allowlist as two sets, the way one would write it for speed:
    single-port entries in a hashed set (one lookup), port ranges in an
    interval set (pipapo), consulted only when the first set missed. A
    single interval set holding everything was measured too: at 100k
    entries its lookup alone made loopback connects ~15x slower."""
    exact, ranges = [], []
    for e in allowlist(n):
        protos, addr, lo, hi = parse_entry(e)
        for p in protos:
            if hi == lo:
                exact.append(f"{p} . {addr} . {lo}")
            else:
                ranges.append(f"{p} . {addr} . {lo}-{hi}")
    lines = ["flush ruleset", "table inet egrbench {",
             "  set exact { type inet_proto . ipv4_addr . inet_service; size 4194304;"]
    lines += nft_elems(exact) + ["  }"]
    lines += ["  set ranges { type inet_proto . ipv4_addr . inet_service; flags interval;"]
    lines += (nft_elems(ranges) if ranges else []) + ["  }"]
    lines += ["  chain out { type filter hook output priority 0; policy accept;",
              "    ct state established,related accept",
              "    meta l4proto { tcp, udp } meta l4proto . ip daddr . th dport @exact accept",
              "    meta l4proto { tcp, udp } meta l4proto . ip daddr . th dport @ranges accept",
              "    counter drop", "  }", "}"]
    return "\n".join(lines) + "\n"


class Compare:
    def __init__(self, args):
        self.a = args
        self.build = os.path.abspath(args.build)
        self.tmp = tempfile.mkdtemp(prefix=TAG + "-", dir="/var/tmp")
        self.sock = os.path.join(self.tmp, "egressd.sock")
        self.bpffs_dir = f"/sys/fs/bpf/{TAG}"
        self.ctl = B.Control(self.sock)
        self.cg_root = B.cgroup2_mount()
        self.loop_bin = os.path.join(self.build, "bench", "connect_loop")
        self.load_bin = os.path.join(self.build, "bench", "inspect_load")
        self.procs = []       # long-running helpers we started
        self.netns = []
        self.cgroups = []
        self.attached = []
        self.daemon = None
        self.daemon_log = None
        self.stats_prev = None
        self.nft_loaded = None
        self.notes = []

    # -- lifecycle

    def spawn(self, argv, **kw):
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, **kw)
        self.procs.append(p)
        return p

    def start(self):
        for b, what in ((os.path.join(self.build, "egressd"), "make all"),
                        (self.loop_bin, "make bench"), (self.load_bin, "make bench"),
                        (DNSMASQ, "dnsmasq-base"), ("/usr/sbin/nft", "nftables")):
            if not os.access(b, os.X_OK):
                raise RuntimeError(f"{b} is missing ({what})")
        for t in ("iperf3", "tinyproxy", "gnuplot"):
            if not shutil.which(t):
                raise RuntimeError(f"{t} is missing: run tools/install-deps --bench")
        for ns in (NS_A, NS_NFT):
            run(["ip", "netns", "add", ns])
            self.netns.append(ns)
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
        # egressd's DNS upstream (nothing in this benchmark resolves).
        dport = B.free_port()
        self.procs.append(common.start_dnsmasq(dport, f"{self.tmp}/dnsmasq.pid"))
        self.daemon_log = open(os.path.join(self.build, "bench-compare-egressd.log"), "w")
        self.daemon = common.start_egressd(
            os.path.join(self.build, "egressd"), self.sock, self.bpffs_dir,
            os.path.join(self.tmp, "state"), f"127.0.0.1:{dport}", self.daemon_log,
            lambda: self.ctl.call({"op": "status"}, 10).get("ok"))
        with open(B.STATS_SYSCTL) as f:
            self.stats_prev = f.read().strip()
        with open(B.STATS_SYSCTL, "w") as f:
            f.write("1")
        # Servers: one of each per netns, outside any sandbox.
        for ns in (NS_A, NS_NFT):
            self.spawn(in_ns(ns) + [self.load_bin, "server", ADDR, str(BULK_PORT)])
            self.spawn(in_ns(ns) + ["iperf3", "-s", "-B", ADDR, "-p", str(IPERF_PORT)])
        self.tinyproxy(PROXY_PORT, self.a.entries, "full")
        self.tinyproxy(PROXY_SMALL_PORT, 10, "small")
        time.sleep(0.5)
        for p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[2:4]} exited with {p.returncode}")

    def tinyproxy(self, port, n, name):
        filt = os.path.join(self.tmp, f"tinyproxy-{name}.filter")
        hosts = []
        for e in allowlist(n):
            h = parse_entry(e)[1]
            if h != ADDR:
                hosts.append(h)
        # The listener last: every CONNECT walks the whole list, as the
        # kernel's set lookups do not.
        with open(filt, "w") as f:
            f.write("\n".join(dict.fromkeys(hosts)) + f"\n{ADDR}\n")
        conf = os.path.join(self.tmp, f"tinyproxy-{name}.conf")
        with open(conf, "w") as f:
            f.write(f"Port {port}\nListen {ADDR}\nTimeout 10\nMaxClients 1024\n"
                    f"Allow {ADDR}\nConnectPort {PORT}\nConnectPort {BULK_PORT}\n"
                    f"Filter \"{filt}\"\nFilterType fnmatch\nFilterDefaultDeny Yes\n"
                    f"LogLevel Critical\nLogFile \"{self.tmp}/tinyproxy-{name}.log\"\n")
        self.spawn(in_ns(NS_A) + ["tinyproxy", "-d", "-c", conf])

    def sandbox(self, n):
        cg = os.path.join(self.cg_root, f"{TAG}-{B.human(n)}")
        os.mkdir(cg)
        self.cgroups.append(cg)
        t0 = time.perf_counter()
        B.must_ok(self.ctl.call({"op": "attach", "cgroup": cg, "policy": policy(n, cg)},
                                timeout=600), f"attach {n}")
        self.attached.append(cg)
        log(f"sandbox with {n:,} entries attached in {time.perf_counter() - t0:.2f} s")
        return cg

    def nft(self, n):
        if self.nft_loaded == n:
            return
        path = os.path.join(self.tmp, "ruleset.nft")
        with open(path, "w") as f:
            f.write(nft_ruleset(n))
        t0 = time.perf_counter()
        run(in_ns(NS_NFT) + ["nft", "-f", path], timeout=300)
        self.nft_loaded = n
        log(f"nftables set with {n:,} entries loaded in {time.perf_counter() - t0:.2f} s")

    def cleanup(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)
        if self.daemon and self.daemon.poll() is None:
            for cg in list(self.attached):
                try:
                    B.must_ok(self.ctl.call({"op": "detach", "cgroup": cg}), "detach")
                    self.attached.remove(cg)
                except Exception as e:  # keep cleaning up
                    log(f"cleanup: detach {cg}: {e}")
            common.stop_egressd(self.daemon)
        for cg in list(self.cgroups):
            common.remove_cgroup(cg, log)
        if os.path.isdir(self.bpffs_dir):
            shutil.rmtree(self.bpffs_dir, ignore_errors=True)
        for ns in self.netns:
            # The netns's nftables table and conntrack entries go with it.
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        common.remove_work_dir(self.tmp, self.sock, log)
        if self.stats_prev is not None:
            try:
                with open(B.STATS_SYSCTL, "w") as f:
                    f.write(self.stats_prev)
            except OSError as e:
                log(f"cleanup: restore {B.STATS_SYSCTL}: {e}")
        if self.daemon_log:
            self.daemon_log.close()

    # -- one measurement each

    def connect_run(self, ns, cgroup=None, proxy=None, seconds=None):
        secs = seconds or self.a.seconds
        cmd = in_ns(ns) + [self.loop_bin, "--listen"]
        if cgroup:
            cmd += ["--cgroup", cgroup]
        if proxy:
            cmd += ["--proxy", f"{ADDR}:{proxy}"]
        cmd += [ADDR, str(PORT), str(secs)]
        progs = B.cgroup_prog_ids(cgroup) if cgroup else {}
        before = {n: B.prog_stats(i) for n, i in progs.items()}
        r = run(cmd, timeout=secs + 30)
        after = {n: B.prog_stats(i) for n, i in progs.items()}
        f = dict(kv.split("=", 1) for kv in r.stdout.split())
        res = {"rate": float(f["rate"]), "p50": float(f["p50_us"]), "p99": float(f["p99_us"]),
               "connects": int(f["connects"])}
        res["bpf"] = {n: (after[n][0] - before[n][0], after[n][1] - before[n][1])
                      for n in progs}
        return res

    def iperf(self, ns, cgroup=None):
        cmd = ["iperf3", "-c", ADDR, "-p", str(IPERF_PORT), "-t", str(self.a.seconds), "-J"]
        if cgroup:
            # Join the sandbox, then become iperf3 (the client only).
            cmd = ["sh", "-c", 'echo 0 > "$1/cgroup.procs" && shift && exec "$@"', "sh",
                   cgroup] + cmd
        r = run(in_ns(ns) + cmd, timeout=self.a.seconds + 30)
        return json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"]

    def bulk(self, ns, cgroup=None, proxy=None):
        cmd = [self.load_bin, "bulk", ADDR, str(BULK_PORT), str(self.a.seconds)]
        if proxy:
            cmd.append(f"{ADDR}:{proxy}")
        if cgroup:
            cmd = ["sh", "-c", 'echo 0 > "$1/cgroup.procs" && shift && exec "$@"', "sh",
                   cgroup] + cmd
        r = run(in_ns(ns) + cmd, timeout=self.a.seconds + 30)
        nbytes, secs = r.stdout.split()
        return int(nbytes) * 8 / float(secs)

    # -- the benchmark

    def run(self):
        a = self.a
        self.start()
        self.load_before = B.read_loadavg()
        cg = self.sandbox(a.entries)
        self.nft(a.entries)
        cases = {
            "unconfined": lambda: self.connect_run(NS_A),
            "nftables": lambda: self.connect_run(NS_NFT),
            "egressd": lambda: self.connect_run(NS_A, cgroup=cg),
            "tinyproxy": lambda: self.connect_run(NS_A, proxy=PROXY_PORT),
            "tinyproxy10": lambda: self.connect_run(NS_A, proxy=PROXY_SMALL_PORT),
        }
        bulks = {
            "unconfined": (lambda: self.iperf(NS_A), lambda: self.bulk(NS_A)),
            "nftables": (lambda: self.iperf(NS_NFT), lambda: self.bulk(NS_NFT)),
            "egressd": (lambda: self.iperf(NS_A, cg), lambda: self.bulk(NS_A, cg)),
            "tinyproxy": (None, lambda: self.bulk(NS_A, proxy=PROXY_PORT)),
        }
        # Warm-up (tinyproxy's first connections, conntrack, page cache).
        self.connect_run(NS_A, seconds=1)
        self.connect_run(NS_A, proxy=PROXY_SMALL_PORT, seconds=1)
        conn = {k: [] for k in cases}
        ip = {k: [] for k in bulks}
        bk = {k: [] for k in bulks}
        for rnd in range(a.rounds):
            for name, fn in cases.items():
                r = fn()
                conn[name].append(r)
                log(f"round {rnd + 1} {name:12} {r['rate']:9,.0f} connects/s, p50 "
                    f"{r['p50']:.0f} us, p99 {r['p99']:.0f} us")
            for name, (fi, fb) in bulks.items():
                if fi:
                    ip[name].append(fi())
                bk[name].append(fb())
                log(f"round {rnd + 1} {name:12} bulk: iperf3 "
                    f"{ip[name][-1] / 1e9 if fi else 0:.1f} Gbit/s, inspect_load "
                    f"{bk[name][-1] / 1e9:.1f} Gbit/s")
        sweep = self.sweep(cg)
        self.load_after = B.read_loadavg()
        return self.report(conn, ip, bk, sweep)

    def sweep(self, big_cg):
        """Connect cost against rule count, egressd and nftables: per rule
        count, rounds of an unconfined, an egressd and an nftables run."""
        a = self.a
        pts = []
        secs = a.sweep_seconds
        for n in a.sweep:
            cg = big_cg if n == a.entries else self.sandbox(n)
            self.nft(n)
            # Rounds of unconfined, egressd, nftables: each added cost is
            # against the unconfined run just before it; medians over rounds.
            e_add, f_add, bpf, base = [], [], [], []
            for _ in range(a.sweep_rounds):
                b = self.connect_run(NS_A, seconds=secs)["rate"]
                e = self.connect_run(NS_A, cgroup=cg, seconds=secs)
                f = self.connect_run(NS_NFT, seconds=secs)["rate"]
                base.append(1e6 / b)
                e_add.append(1e6 / e["rate"] - 1e6 / b)
                f_add.append(1e6 / f - 1e6 / b)
                bpf.append(sum(d[0] for d in e["bpf"].values()) / max(1, e["connects"]))
            med = statistics.median
            bpf_ns = med(bpf)
            pts.append({"n": n, "egressd_us": med(e_add), "nft_us": med(f_add),
                        "bpf_ns": bpf_ns, "base_us": med(base)})
            base_us = pts[-1]["base_us"]
            log(f"sweep {n:>9,}: unconfined {base_us:.1f} us/connect, egressd "
                f"{pts[-1]['egressd_us']:+.2f} us (BPF {bpf_ns:.0f} ns), nftables "
                f"{pts[-1]['nft_us']:+.2f} us")
            if cg != big_cg:
                B.must_ok(self.ctl.call({"op": "detach", "cgroup": cg}), "detach")
                self.attached.remove(cg)
                os.rmdir(cg)
                self.cgroups.remove(cg)
        return pts

    # -- report

    def plot(self, pts, svg):
        dat = os.path.join(self.build, "bench-connect-cost.dat")
        with open(dat, "w") as f:
            f.write("# rules egressd_added_us nftables_added_us egressd_bpf_us\n")
            for p in pts:
                f.write(f"{p['n']} {p['egressd_us']:.3f} {p['nft_us']:.3f} "
                        f"{p['bpf_ns'] / 1e3:.3f}\n")
        gp = (f"set terminal svg size 720,420 dynamic noenhanced font 'sans,11'\n"
              f"set output '{svg}'\n"
              "set title 'Added cost per loopback connect vs allowlist size'\n"
              "set logscale x\nset xlabel 'allowlist entries'\n"
              "set ylabel 'µs per connect (vs unconfined, same run)'\n"
              "set key top left\nset grid\n"
              f"plot '{dat}' using 1:2 with linespoints title 'egressd (rate difference)', "
              f"'' using 1:3 with linespoints title 'nftables sets (rate difference)', "
              f"'' using 1:4 with linespoints title 'egressd BPF time (bpf_stats)'\n")
        B.gnuplot_svg(gp)

    def report(self, conn, ip, bk, sweep):
        a = self.a
        med = statistics.median
        rate = {k: med([r["rate"] for r in v]) for k, v in conn.items()}
        p50 = {k: med([r["p50"] for r in v]) for k, v in conn.items()}
        p99 = {k: med([r["p99"] for r in v]) for k, v in conn.items()}
        ipm = {k: med(v) for k, v in ip.items() if v}
        bkm = {k: med(v) for k, v in bk.items()}
        # Per-program BPF time per connect over all egressd runs.
        tot_conn = sum(r["connects"] for r in conn["egressd"])
        per_prog = {}
        for r in conn["egressd"]:
            for n, (ns, cnt) in r["bpf"].items():
                x = per_prog.setdefault(n, [0, 0])
                x[0] += ns
                x[1] += cnt
        bpf_total = sum(x[0] for x in per_prog.values()) / max(1, tot_conn)
        base = rate["unconfined"]
        labels = {"unconfined": "unconfined", "nftables": f"nftables sets, {B.human(a.entries)}",
                  "egressd": f"egressd, {B.human(a.entries)}",
                  "tinyproxy": f"tinyproxy CONNECT, {B.human(a.entries)} filter",
                  "tinyproxy10": "tinyproxy CONNECT, 10-entry filter"}
        lines = []
        w = lines.append
        w(f"### Side by side ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)")
        w("")
        w(f"Machine: {os.cpu_count()} CPUs ({cpu_model()}), Linux {platform.release()}, "
          f"load average {self.load_before} before, {self.load_after} after. Command: "
          f"`python3 tools/bench_compare.py --build {a.build} --entries {a.entries} "
          f"--rounds {a.rounds} --seconds {a.seconds}` (run by `make bench`). Medians of "
          f"{a.rounds} rounds, cases alternating in each round; ratios are to the same "
          f"run's unconfined figure.")
        w("")
        w("| case | connects/s | ratio | connect p50 µs | connect p99 µs "
          "| iperf3 Gbit/s | ratio | bulk (inspect_load) Gbit/s | ratio |")
        w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for k in conn:
            ipc = (f"{ipm[k] / 1e9:.1f} | {ipm[k] / ipm['unconfined']:.3f}"
                   if k in ipm else "— | —")
            bkc = (f"{bkm[k] / 1e9:.1f} | {bkm[k] / bkm['unconfined']:.3f}"
                   if k in bkm else "— | —")
            w(f"| {labels[k]} | {rate[k]:,.0f} | {rate[k] / base:.3f} | {p50[k]:.1f} "
              f"| {p99[k]:.1f} | {ipc} | {bkc} |")
        w("")
        goals = [
            ("egressd connects/s / nftables", rate["egressd"] / rate["nftables"],
             f"≥ {GOAL_VS_NFT:g}", rate["egressd"] >= GOAL_VS_NFT * rate["nftables"]),
            ("egressd connects/s / tinyproxy (10-entry filter)",
             rate["egressd"] / rate["tinyproxy10"], f"≥ {GOAL_VS_PROXY:g}",
             rate["egressd"] >= GOAL_VS_PROXY * rate["tinyproxy10"]),
            ("egressd iperf3 / unconfined", ipm["egressd"] / ipm["unconfined"],
             f"≥ {GOAL_BULK}", ipm["egressd"] >= GOAL_BULK * ipm["unconfined"]),
            ("egressd bulk / tinyproxy bulk", bkm["egressd"] / bkm["tinyproxy"],
             f"≥ {GOAL_BULK_PROXY:g}", bkm["egressd"] >= GOAL_BULK_PROXY * bkm["tinyproxy"]),
            ("BPF ns per connect, all programs", bpf_total, f"< {GOAL_BPF_NS:.0f}",
             bpf_total < GOAL_BPF_NS),
        ]
        w("| goal | figure | target | met |")
        w("| --- | ---: | --- | --- |")
        for name, v, tgt, ok in goals:
            w(f"| {name} | {v:,.2f} | {tgt} | {'yes' if ok else '**no**'} |")
        w("")
        w(f"Per-program BPF time per sandboxed connect/close (egressd rows, {tot_conn:,} "
          f"connects, bpf_stats run_time_ns / run_cnt; runs per connect = run_cnt / "
          f"connects):")
        w("")
        w("| program | runs per connect | ns per run | ns per connect |")
        w("| --- | ---: | ---: | ---: |")
        for n, (ns, cnt) in sorted(per_prog.items(), key=lambda x: -x[1][0]):
            if not cnt:
                continue
            w(f"| {n} | {cnt / max(1, tot_conn):.2f} | {ns / cnt:.0f} "
              f"| {ns / max(1, tot_conn):.0f} |")
        w(f"| **total** | | | **{bpf_total:.0f}** |")
        w("")
        w(f"Connect cost against rule count (each point: {a.sweep_rounds} rounds of "
          f"unconfined, egressd, nftables, {a.sweep_seconds} s each; added µs = 1/rate − "
          "1/rate of the unconfined run before it, median over the rounds; BPF µs is "
          "bpf_stats time per connect):")
        w("")
        w("| entries | unconfined µs/connect | egressd added µs | egressd BPF µs "
          "| nftables added µs |")
        w("| ---: | ---: | ---: | ---: | ---: |")
        for p in sweep:
            w(f"| {p['n']:,} | {p['base_us']:.1f} | {p['egressd_us']:+.2f} "
              f"| {p['bpf_ns'] / 1e3:.2f} | {p['nft_us']:+.2f} |")
        w("")
        svg = os.path.join(self.build if a.no_docs else a.docs, "bench-connect-cost.svg")
        self.plot(sweep, svg)
        w(f"![connect cost against rule count]({os.path.basename(svg)})")
        w("")
        for n in self.notes:
            w(f"Note: {n}")
        text = "\n".join(lines).rstrip() + "\n"
        print(text)
        with open(os.path.join(self.build, "bench-compare-results.md"), "w") as f:
            f.write(text)
        if not a.no_docs:
            B.write_section(os.path.join(a.docs, "benchmarks.md"), "bench-compare", text)
            log(f"wrote {a.docs}/benchmarks.md and {svg}")
        return 0


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return re.sub(r"\s+", " ", line.split(":", 1)[1].strip())
    except OSError:
        pass
    return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--docs", default=os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "docs"), help="where benchmarks.md and the SVGs go")
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    ap.add_argument("--entries", type=B.parse_entries, default=[100_000],
                    help="allowlist size of the side-by-side rows (default 100k)")
    ap.add_argument("--sweep", type=B.parse_entries, default=B.parse_entries("10,1k,10k,100k"),
                    help="allowlist sizes of the connect-cost plot")
    ap.add_argument("--seconds", type=int, default=3, help="seconds per run (1-30)")
    ap.add_argument("--sweep-seconds", type=int, default=2, help="seconds per sweep run (1-30)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (1-20)")
    ap.add_argument("--sweep-rounds", type=int, default=3, help="rounds per sweep point (1-20)")
    args = ap.parse_args()
    args.entries = args.entries[0] if args.entries else 100_000
    if not (1 <= args.seconds <= 30 and 1 <= args.sweep_seconds <= 30
            and 1 <= args.rounds <= 20 and 1 <= args.sweep_rounds <= 20):
        ap.error("--seconds/--sweep-seconds 1-30, --rounds 1-20")
    if os.geteuid() != 0:
        print("bench-compare: needs root (netns, nftables, BPF, cgroups, sysctl)",
              file=sys.stderr)
        return 1

    return common.run_bench(lambda: Compare(args), log)


if __name__ == "__main__":
    sys.exit(main())
