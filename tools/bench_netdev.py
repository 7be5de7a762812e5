#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Device sandboxes (issue 25): packets/s and bulk TCP through a device
sandbox vs the same device with no programs, and the device programs' ns per
packet (docs/benchmarks.md, "Device sandboxes").

The topology of tests/e2e/test_netdev.py, in three network namespaces this
script creates:

    G (the guest)  vg 10.79.0.2 --veth-- vh 10.79.0.1 (H, forwards)
    H              hs 10.80.0.1 --veth-- sh 10.80.0.2 (S, the iperf3 server)

vh is the device `egressctl attach --netdev vh --netns /run/netns/H` confines.
Each round runs, on that one device, a bare pair (nothing attached) and a
sandbox pair (attached over the control socket, as `egressctl attach
--netdev` does, with a policy of --entries entries shaped as the other
benchmarks' are: /32 fillers over 10.0.0.0/8 plus the server's two ports),
the order swapped every round (ABBA), and detaches at the end of its
sandbox pair. A pair is one UDP run (iperf3 -u, 64-byte datagrams, as fast as
one sender can: packets/s the server received) and one TCP run (iperf3, bulk
bits/s). Ratios are of the same round's bare figure; the verdict is on their
medians. The programs' time is bpf_stats (kernel.bpf_stats_enabled=1,
restored on exit): run_time_ns and run_cnt of the two programs on vh, read
by their ids (the sandbox's pinned TCX links, or vh's tc filters) before and
after each sandbox run.

Needs root and iperf3 (tools/install-deps --bench). Every loop and wait is
bounded, all traffic stays on the veths it creates, and on exit (also on
failure or Ctrl-C) it detaches, stops what it started, removes its
namespaces and directories and restores the sysctl.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as B  # noqa: E402  (policies, control socket, bpftool, docs sections)
import bench_common as common  # noqa: E402  (egressd, dnsmasq: the e2e harness)

PID = os.getpid()
# What tc's object loader creates on the bpffs (iproute2), in the order
# they can be removed.
TC_PINS = ("/sys/fs/bpf/ip", "/sys/fs/bpf/xdp", "/sys/fs/bpf/tc/globals", "/sys/fs/bpf/tc")
TAG = f"egrnd-{PID}"
G_IP, H_IP, HS_IP, S_IP = "10.79.0.2", "10.79.0.1", "10.80.0.1", "10.80.0.2"
PORT = 18100          # iperf3 in S: UDP and TCP runs one after the other
UDP_LEN = 64          # datagram payload: small packets
CASES = ["bare", "floor", "sandbox"]
CASE_LABELS = {"bare": "bare device", "floor": "empty program (floor)",
               "sandbox": "device sandbox"}


def log(msg):
    print(f"bench-netdev: {msg}", file=sys.stderr, flush=True)


def run(cmd, timeout=60, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])}...: exit {r.returncode}: "
                           f"{(r.stderr or r.stdout).strip()[:400]}")
    return r


def policy(n, name):
    """n entries: bench.py's /32 fillers over 10.0.0.0/8 and the server's
    UDP and TCP port (iperf3's control connection and data)."""
    allow = B.make_policy(max(1, n - 1), PORT, 10, "x")["network"]["outbound_allow"]
    allow = [e for e in allow if not e.endswith(f"127.0.0.1:{PORT}")]
    allow += [f"tcp/{S_IP}:{PORT}", f"udp/{S_IP}:{PORT}"]
    return {"tenant": "bench", "execution_id": name, "principal": "bench:netdev",
            "tool": "bench", "version": "0",
            "network": {"default": "deny", "outbound_allow": allow, "inbound": "deny"}}


class NetdevBench:
    def __init__(self, args):
        self.a = args
        self.build = os.path.abspath(args.build)
        self.tmp = tempfile.mkdtemp(prefix=TAG + "-", dir="/var/tmp")
        self.sock = os.path.join(self.tmp, "egressd.sock")
        self.bpffs_dir = f"/sys/fs/bpf/{TAG}"
        self.ctl = B.Control(self.sock)
        self.ns = {k: f"{TAG}-{k}" for k in "ghs"}
        self.netns_made = []
        self.procs = []
        self.daemon = None
        self.daemon_log = None
        self.attached = None      # the sandbox's id while vh is one
        self.stats_prev = None
        self.attach_s = []
        self.mode = None
        self.floor_obj = os.path.join(self.build, "bench", "floor-netdev.bpf.o")
        self.floor_qdisc = False
        self.tc_pins_made = None

    # -- lifecycle

    def in_ns(self, k):
        # nsenter, not `ip netns exec` (which remounts /sys).
        return ["nsenter", f"--net=/run/netns/{self.ns[k]}"]

    def topology(self):
        ns = self.ns
        for n in ns.values():
            run(["ip", "netns", "add", n])
            self.netns_made.append(n)
            run(["ip", "-n", n, "link", "set", "lo", "up"])
        # Made under unique names in this namespace, then moved and renamed.
        t = str(PID)[-7:]
        run(["ip", "link", "add", f"bndg{t}", "type", "veth", "peer", "name", f"bndh{t}"])
        run(["ip", "link", "set", f"bndg{t}", "netns", ns["g"], "name", "vg"])
        run(["ip", "link", "set", f"bndh{t}", "netns", ns["h"], "name", "vh"])
        run(["ip", "link", "add", f"bndx{t}", "type", "veth", "peer", "name", f"bndy{t}"])
        run(["ip", "link", "set", f"bndx{t}", "netns", ns["h"], "name", "hs"])
        run(["ip", "link", "set", f"bndy{t}", "netns", ns["s"], "name", "sh"])
        G, H, S = (["ip", "-n", ns[k]] for k in "ghs")
        # H's own sysctls (its namespace, gone with it): it forwards.
        run(self.in_ns("h") + ["sysctl", "-qw", "net.ipv4.ip_forward=1"])
        run(G + ["addr", "add", G_IP, "peer", H_IP, "dev", "vg"])
        run(G + ["link", "set", "vg", "up"])
        run(G + ["route", "add", "default", "via", H_IP, "dev", "vg"])
        run(H + ["addr", "add", H_IP, "peer", G_IP, "dev", "vh"])
        run(H + ["link", "set", "vh", "up"])
        run(H + ["addr", "add", HS_IP + "/24", "dev", "hs"])
        run(H + ["link", "set", "hs", "up"])
        run(S + ["addr", "add", S_IP + "/24", "dev", "sh"])
        run(S + ["link", "set", "sh", "up"])
        run(S + ["route", "add", "default", "via", HS_IP])

    def start(self):
        for b, what in ((os.path.join(self.build, "egressd"), "make all"),
                        (common.DNSMASQ, "dnsmasq-base")):
            if not os.access(b, os.X_OK):
                raise RuntimeError(f"{b} is missing ({what})")
        if not os.path.exists(self.floor_obj):
            raise RuntimeError(f"{self.floor_obj} is missing (make bench)")
        if not shutil.which("iperf3"):
            raise RuntimeError("iperf3 is missing: run tools/install-deps --bench")
        self.topology()
        dport = B.free_port()
        self.procs.append(common.start_dnsmasq(dport, f"{self.tmp}/dnsmasq.pid"))
        self.daemon_log = open(os.path.join(self.build, "bench-netdev-egressd.log"), "w")
        self.daemon = common.start_egressd(
            os.path.join(self.build, "egressd"), self.sock, self.bpffs_dir,
            os.path.join(self.tmp, "state"), f"127.0.0.1:{dport}", self.daemon_log,
            lambda: self.ctl.call({"op": "status"}, 10).get("ok"), watch=self.procs)
        with open(B.STATS_SYSCTL) as f:
            self.stats_prev = f.read().strip()
        with open(B.STATS_SYSCTL, "w") as f:
            f.write("1")
        self.procs.append(subprocess.Popen(
            self.in_ns("s") + ["iperf3", "-s", "-B", S_IP, "-p", str(PORT)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        # The server listens and G reaches it through H (bounded).
        deadline = time.monotonic() + 20
        probe = self.in_ns("g") + ["iperf3", "-c", S_IP, "-p", str(PORT), "-n", "1K",
                                   "--connect-timeout", "2000"]
        while run(probe, timeout=30, check=False).returncode:
            if time.monotonic() > deadline or self.procs[-1].poll() is not None:
                raise RuntimeError("G cannot reach iperf3 in S through H (topology)")
            time.sleep(0.3)

    def cleanup(self):
        if self.attached is not None and self.daemon and self.daemon.poll() is None:
            try:
                self.detach()
            except Exception as e:  # keep cleaning up
                log(f"cleanup: detach: {e}")
        if self.floor_qdisc:
            run(self.in_ns("h") + ["tc", "qdisc", "del", "dev", "vh", "clsact"], check=False)
        for p in reversed(self.procs):
            common.stop_process(p, sig=15)
        common.stop_egressd(self.daemon)
        if os.path.isdir(self.bpffs_dir):
            shutil.rmtree(self.bpffs_dir, ignore_errors=True)
        for n in self.netns_made:
            # vh's programs (if any were left) go with the device.
            subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=30)
        common.remove_work_dir(self.tmp, self.sock, log)
        for q in self.tc_pins_made or ():
            try:
                if os.path.islink(q):
                    os.unlink(q)
                elif os.path.isdir(q):
                    os.rmdir(q)       # tc pins nothing for the floor: empty
            except OSError as e:
                log(f"cleanup: tc's {q}: {e}")
        if self.stats_prev is not None:
            try:
                with open(B.STATS_SYSCTL, "w") as f:
                    f.write(self.stats_prev)
            except OSError as e:
                log(f"cleanup: restore {B.STATS_SYSCTL}: {e}")
        if self.daemon_log:
            self.daemon_log.close()

    # -- the sandbox on vh

    def attach(self):
        t0 = time.perf_counter()
        r = B.must_ok(self.ctl.call({"op": "attach", "netdev": "vh",
                                     "netns": f"/run/netns/{self.ns['h']}",
                                     "policy": policy(self.a.entries, f"{TAG}-vh")},
                                    timeout=600), "attach --netdev vh")
        self.attach_s.append(time.perf_counter() - t0)
        sb = r["sandbox"]
        self.attached = sb["id"]
        if self.mode and sb["attach_mode"] != self.mode:
            raise RuntimeError(f"attach path changed: {self.mode} -> {sb['attach_mode']}")
        self.mode = sb["attach_mode"]
        return self.prog_ids()

    def detach(self):
        B.must_ok(self.ctl.call({"op": "detach", "netdev": "vh",
                                 "netns": f"/run/netns/{self.ns['h']}"}), "detach")
        self.attached = None
        left = self.bare_progs()
        if left:
            raise RuntimeError(f"programs stayed on vh after detach: {left}")

    def prog_ids(self):
        """{program name: id} of the sandbox's programs on vh: its pinned
        TCX links' programs, or vh's tc filters."""
        ids = {}
        pins = os.path.join(self.bpffs_dir, "netdev", str(self.attached))
        for d in ("ingress", "egress"):
            p = os.path.join(pins, d)
            if os.path.exists(p):
                link = B.bpftool_json(["link", "show", "pinned", p])
                pid = link["prog_id"]
                ids[B.bpftool_json(["prog", "show", "id", str(pid)])["name"]] = pid
        if not ids:
            ids = self.tc_progs()
        if sorted(ids) != ["egr_nd_egress", "egr_nd_ingress"]:
            raise RuntimeError(f"the device programs on vh are not found: {ids}")
        return ids

    def tc_progs(self):
        ids = {}
        for d in ("ingress", "egress"):
            out = run(self.in_ns("h") + ["tc", "-j", "filter", "show", "dev", "vh", d],
                      check=False).stdout
            for f in json.loads(out) if out.strip() else []:
                o = f.get("options", {})
                if "prog" in o:
                    ids[o.get("bpf_name", "?").split(":")[0]] = o["prog"]["id"]
        return ids

    def bare_progs(self):
        """What runs on vh when nothing should: the sandbox's pins gone and
        no tc filter (a bare run measures a bare device)."""
        left = self.tc_progs()
        nd = os.path.join(self.bpffs_dir, "netdev")
        if os.path.isdir(nd) and os.listdir(nd):
            left["pins"] = os.listdir(nd)
        return left

    # -- one measurement each

    def iperf(self, udp, progs):
        secs = self.a.seconds
        cmd = self.in_ns("g") + ["iperf3", "-c", S_IP, "-p", str(PORT), "-t", str(secs), "-J"]
        if udp:
            cmd += ["-u", "-b", "0", "-l", str(UDP_LEN)]
        before = {n: B.prog_stats(i) for n, i in progs.items()}
        r = run(cmd, timeout=secs + 30)
        after = {n: B.prog_stats(i) for n, i in progs.items()}
        end = json.loads(r.stdout)["end"]
        if udp:
            s = end["sum"]
            got = s["packets"] - s["lost_packets"]
            res = {"rate": got / s["seconds"], "units": got, "sent": s["packets"],
                   "secs": s["seconds"]}
        else:
            s = end["sum_received"]
            # Data segments: the server's bytes over the path MSS (1448);
            # the programs see GSO super-packets, counted by run_cnt.
            res = {"rate": s["bits_per_second"], "units": s["bytes"] / 1448}
        res["bpf"] = {n: (after[n][0] - before[n][0], after[n][1] - before[n][1])
                      for n in progs}
        return res

    def floor_on(self):
        """The floor: the empty program on both directions of vh (tc
        filters on a clsact qdisc). {name/direction: id}."""
        H = self.in_ns("h")
        # tc's object loader makes its pin tree on the host's bpffs
        # (tc/globals, the ip and xdp links to it): what it made is ours.
        if self.tc_pins_made is None:
            self.tc_pins_made = [q for q in TC_PINS if not os.path.lexists(q)]
        run(H + ["tc", "qdisc", "add", "dev", "vh", "clsact"])
        self.floor_qdisc = True
        for d in ("ingress", "egress"):
            run(H + ["tc", "filter", "add", "dev", "vh", d, "bpf", "direct-action", "obj",
                     self.floor_obj, "sec", "tc"])
        ids = {}
        for d in ("ingress", "egress"):
            out = run(H + ["tc", "-j", "filter", "show", "dev", "vh", d]).stdout
            for f in json.loads(out) if out.strip() else []:
                if "prog" in f.get("options", {}):
                    ids[f"flr_nd_pass ({d})"] = f["options"]["prog"]["id"]
        if len(ids) != 2:
            raise RuntimeError(f"the floor's programs on vh are not found: {ids}")
        return ids

    def floor_off(self):
        run(self.in_ns("h") + ["tc", "qdisc", "del", "dev", "vh", "clsact"])
        self.floor_qdisc = False

    def pair(self, case):
        """One UDP and one TCP run of case: bare, floor or sandbox."""
        if case == "sandbox":
            progs = self.attach()
        elif case == "floor":
            progs = self.floor_on()
        else:
            progs = {}
            left = self.bare_progs()
            if left:
                raise RuntimeError(f"a bare run with programs on vh: {left}")
        try:
            return self.iperf(True, progs), self.iperf(False, progs)
        finally:
            if case == "sandbox":
                self.detach()
            elif case == "floor":
                self.floor_off()

    # -- the benchmark

    def run(self):
        a = self.a
        self.start()
        self.load_before = B.read_loadavg()
        self.pair("sandbox")   # warm-up: the first attach, neighbours, page cache
        rounds = []
        for i in range(a.rounds):
            # Each case first, second and third in turn, round by round.
            order = CASES[i % 3:] + CASES[:i % 3]
            got = {case: self.pair(case) for case in order}
            rounds.append(got)
            bare = got["bare"]
            log(f"round {i + 1} ({', '.join(order)}): UDP " + ", ".join(
                f"{k} {got[k][0]['rate']:,.0f}" for k in CASES) + " pkt/s; TCP " + ", ".join(
                f"{k} {got[k][1]['rate'] / 1e9:.2f}" for k in CASES) + " Gbit/s; sandbox/bare "
                f"{got['sandbox'][0]['rate'] / bare[0]['rate']:.3f}, "
                f"{got['sandbox'][1]['rate'] / bare[1]['rate']:.3f}")
        self.load_after = B.read_loadavg()
        return self.report(rounds)

    # -- report

    def report(self, rounds):
        a = self.a
        med = statistics.median
        lines = []
        w = lines.append
        w(f"### Device sandbox vs bare device "
          f"({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)")
        w("")
        w(f"Machine: {os.cpu_count()} CPUs, Linux {platform.release()}, attach path "
          f"{self.mode}, load average {self.load_before} before, {self.load_after} after. "
          f"Command: `python3 tools/bench_netdev.py --build {a.build} --entries {a.entries} "
          f"--rounds {a.rounds} --seconds {a.seconds}` (run by `make bench`). One device (vh, "
          f"G -> vh in H -> S over veths), {a.rounds} rounds of a bare pair, a floor pair (an "
          f"empty tc program on both directions) and a sandbox pair, each case first in "
          f"turn; a policy of {a.entries:,} entries, attached for each sandbox pair (p50 "
          f"{med(self.attach_s) * 1e3:.0f} ms) and detached after it. Ratios: each run over "
          f"the same round's bare run, then the median; medians of the figures beside them.")
        w("")
        w("| traffic | case | median | ratio vs bare (medians) | ratio (paired, median) "
          "| paired min-max | UDP sent/s, lost (medians) |")
        w("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
        for k, name, fmt in ((0, f"UDP {UDP_LEN} B, packets/s received", lambda v: f"{v:,.0f}"),
                             (1, "TCP bulk, Gbit/s", lambda v: f"{v / 1e9:.2f}")):
            b = [r["bare"][k]["rate"] for r in rounds]
            for case in CASES:
                x = [r[case][k]["rate"] for r in rounds]
                pr = [u / v for u, v in zip(x, b)]
                sent = "—"
                if k == 0:
                    rs = [r[case][0] for r in rounds]
                    sent = (f"{med(q['sent'] / q['secs'] for q in rs):,.0f}, "
                            f"{med(1 - q['units'] / q['sent'] for q in rs):.1%}")
                w(f"| {name} | {CASE_LABELS[case]} | {fmt(med(x))} | {med(x) / med(b):.3f} "
                  f"| {med(pr):.3f} | {min(pr):.3f}-{max(pr):.3f} | {sent} |")
            f = [r["floor"][k]["rate"] for r in rounds]
            x = [r["sandbox"][k]["rate"] for r in rounds]
            pr = [u / v for u, v in zip(x, f)]
            w(f"| {name} | device sandbox over the floor | | {med(x) / med(f):.3f} "
              f"| {med(pr):.3f} | {min(pr):.3f}-{max(pr):.3f} | |")
        w("")
        w("BPF time of the programs on vh in the floor and sandbox runs (bpf_stats: "
          "run_time_ns / run_cnt over all rounds; per packet = over the packets the server "
          "received, for TCP its bytes / 1448, the MSS; egr_nd_ingress judges what G sends, "
          "egr_nd_egress what comes back to G):")
        w("")
        w("| traffic | program | runs | ns per run | runs per packet | ns per packet |")
        w("| --- | --- | ---: | ---: | ---: | ---: |")
        for case in ("floor", "sandbox"):
            for k, name in ((0, "UDP 64 B"), (1, "TCP bulk")):
                units = sum(r[case][k]["units"] for r in rounds)
                tot = {}
                for r in rounds:
                    for n, (ns, cnt) in r[case][k]["bpf"].items():
                        x = tot.setdefault(n, [0, 0])
                        x[0] += ns
                        x[1] += cnt
                if k == 0:
                    sent = sum(r[case][0]["sent"] for r in rounds)
                    w(f"| {name} | ({case}: {sent:,} datagrams sent, {int(units):,} received) "
                      f"| | | | |")
                all_ns = 0
                for n, (ns, cnt) in sorted(tot.items(), key=lambda x: x[0], reverse=True):
                    all_ns += ns
                    w(f"| {name} | {n} | {cnt:,} | {ns / max(1, cnt):.0f} "
                      f"| {cnt / max(1, units):.3f} | {ns / max(1, units):.0f} |")
                w(f"| {name} | **{case}, both** | | | | **{all_ns / max(1, units):.0f}** |")
        w("")
        w("UDP: every datagram that reaches vh is one run of the ingress program, so its ns "
          "per run is the per-packet cost; more reach vh than the server receives (the sender "
          "outruns the path). TCP: the programs see GSO packets of many segments. The floor "
          f"is on vh as tc filters, egressd's programs as {self.mode} "
          f"({'the same path' if self.mode == 'tc' else 'TCX links'}).")
        w("")
        w("kernel.bpf_stats_enabled=1 adds two clock reads to every program run, in the "
          "floor and sandbox runs only (the bare runs have no program to time).")
        text = "\n".join(lines).rstrip() + "\n"
        print(text)
        with open(os.path.join(self.build, "bench-netdev-results.md"), "w") as f:
            f.write(text)
        if not a.no_docs:
            B.write_section(os.path.join(a.docs, "benchmarks.md"), "bench-netdev", text)
            log(f"wrote {a.docs}/benchmarks.md")
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--docs", default=os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "docs"), help="where benchmarks.md is")
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    ap.add_argument("--entries", type=B.parse_entries, default=[100_000],
                    help="the device sandbox's policy size (default 100k)")
    ap.add_argument("--seconds", type=int, default=3, help="seconds per iperf3 run (1-30)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (1-20)")
    args = ap.parse_args()
    args.entries = args.entries[0] if args.entries else 100_000
    if not (1 <= args.seconds <= 30 and 1 <= args.rounds <= 20 and args.entries >= 2):
        ap.error("--seconds 1-30, --rounds 1-20, --entries at least 2")
    if os.geteuid() != 0:
        print("bench-netdev: needs root (netns, BPF, sysctl)", file=sys.stderr)
        return 1
    return common.run_bench(lambda: NetdevBench(args), log)


if __name__ == "__main__":
    sys.exit(main())
