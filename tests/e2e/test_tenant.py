# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Issue 9, tenant isolation inside egressd: one sandbox cannot starve, blind
# or impersonate another through egressd's shared parts (the control
# socket, the DNS proxy's in-flight table, CPU and listeners). Each test has
# a victim and noisy neighbours, and asserts the victim's outcome; floods
# are bounded in time and stay on loopback.
#
# Run by run.py (harness.runner).

import json
import os
import socket
import subprocess
import sys
import threading
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


import re
import struct

TN_FIGURES = {}  # name -> figure, printed with -v (docs/benchmarks.md has the bench's)


def tn_record(name, value):
    TN_FIGURES[name] = value
    log("figure %s = %s" % (name, value))


def tn_status_rtt(c):
    """One `status` round trip on the control socket, from outside every
    sandbox, as egressctl does it: connect, request, whole reply. Seconds."""
    t0 = time.monotonic()
    reply = ctl_request(c.sock, {"op": "status"}, timeout=5)
    dt = time.monotonic() - t0
    check(reply.get("ok") is True, "status answered %r" % str(reply)[:200])
    return dt


# A sandboxed process that trickles a request into the control socket, one
# byte every 100 ms, for at most DURATION seconds. Prints
#   answer_ms N | noanswer ; sent N ; closed yes|no
TN_TRICKLER = r"""
import socket, sys, time
path, duration = sys.argv[1], float(sys.argv[2])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
s.setblocking(False)
t0 = time.monotonic()
req = b'{"op":"status"}'
sent, answer, closed = 0, None, False
while time.monotonic() - t0 < duration:
    try:
        s.send(req[sent % len(req):sent % len(req) + 1])
        sent += 1
    except OSError:
        closed = True
    try:
        d = s.recv(4096)
        if d and answer is None:
            answer = (time.monotonic() - t0, d)
        if not d:
            closed = True
    except BlockingIOError:
        pass
    except OSError:
        closed = True
    if closed and answer is not None:
        break
    time.sleep(0.1)
if answer:
    print("answer_ms %d %s" % (answer[0] * 1000, b"forbidden" in answer[1]))
else:
    print("noanswer")
print("sent %d" % sent)
print("closed %s" % ("yes" if closed else "no"))
"""


def tn_dns_policy(c, names, tenant="e2e"):
    # The test zone answers loopback addresses: expected, not DNS rebinding.
    return c.policy([], extra_network=dict(DNS_REBIND_LO, dns_allow=list(names)),
                    tenant=tenant)


@test
def tenant_control_trickle(c):
    need_dnsmasq(c)
    with Sandbox(c, tn_dns_policy(c, ["api.test"]), "tn-trickle") as noisy, \
            Sandbox(c, tn_dns_policy(c, ["api.test"]), "tn-victim") as victim:
        # Alone: the figures the trickle is measured against.
        alone = sorted(tn_status_rtt(c) for _ in range(5))
        tn_record("control status alone max ms", "%.1f" % (alone[-1] * 1000))
        # Hostile: four sandboxed tricklers (root, in an attached sandbox) ...
        procs = []
        for _ in range(4):
            p = subprocess.Popen([sys.executable, "-c", TN_TRICKLER, c.sock, "3"],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True,
                                 preexec_fn=join_cgroup_fn(noisy.cg))
            CLEANUP.push("trickler", lambda p=p: p.poll() is None and p.kill())
            procs.append(p)
        # ... and an allowed peer (root, outside every sandbox) that trickles
        # too: it is served, but must cost the loop nothing while it waits.
        slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        CLEANUP.push("slow control client", slow.close)
        slow.connect(c.sock)
        stop = threading.Event()

        def trickle():
            req, i = b'{"op":"status"', 0
            while not stop.is_set() and i < 40:
                try:
                    slow.send(req[i % len(req):i % len(req) + 1])
                except OSError:
                    return
                i += 1
                stop.wait(0.1)
        th = threading.Thread(target=trickle, daemon=True)
        th.start()
        time.sleep(0.3)
        rtts = []
        for _ in range(8):
            rtts.append(tn_status_rtt(c))
            time.sleep(0.1)
        r = c.ctl("status")
        check(r.returncode == 0, "egressctl status during the trickle: exit %d %s" %
              (r.returncode, r.stderr.strip()))
        rc, addrs, _, line = dns_query("udp", "127.0.0.2", 53, "api.test", "A", cg=victim.cg)
        check(rc == "NOERROR" and DNS_ZONE["api.test"] in addrs,
              "the victim's DNS during the trickle: %r" % line)
        # The allowed slow client is still being waited for (the state
        # machine holds it, it did not just get dropped), the sanity twin.
        slow.setblocking(False)
        try:
            got = slow.recv(4096)
            still_open = False if got == b"" else ("got %r" % got)
        except BlockingIOError:
            still_open = True
        stop.set()
        th.join(5)
        outs = [p.communicate(timeout=10)[0].split("\n") for p in procs]
    tn_record("control status under trickle max ms", "%.1f" % (max(rtts) * 1000))
    check(still_open is True, "the allowed trickling client was not being waited for: %s" %
          still_open)
    check(max(rtts) < 0.100, "status took up to %.1f ms during the trickle (alone %.1f ms): %r"
          % (max(rtts) * 1000, alone[-1] * 1000, ["%.1f" % (x * 1000) for x in rtts]))
    for o in outs:
        check(o[0].startswith("answer_ms ") and o[0].endswith("True"),
              "a sandboxed trickler got no refusal: %r" % o)
        check(int(o[0].split()[1]) < 1000,
              "a sandboxed trickler waited %s ms for its refusal" % o[0].split()[1])
        check("closed yes" in o, "a sandboxed trickler's connection stayed open: %r" % o)
    # Not read: a trickler got its answer before it had sent a whole request.
    slow.close()


# --- DNS proxy fairness -------------------------------------------------------
#
# A second dnsmasq (the harness's one cannot be given a forwarder) serves
# api.test itself and forwards blackhole.test to a UDP socket of this
# process that never answers. egressd is restarted on it for the test and
# back on the harness's dnsmasq after.

class TnBlackholeUpstream:
    def __init__(self, c):
        self.hole = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.hole.bind(("127.0.0.1", 0))    # never read: never answers
        self.proc = None
        try:
            self.proc, self.port = spawn_forwarding_dnsmasq(
                c.work, "tn", ["--local=/nx.test/",    # NXDOMAIN for every name below it
                               "--server=/blackhole.test/127.0.0.1#%d" %
                               self.hole.getsockname()[1]])
        except TestFailure:
            self.stop()
            raise

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.hole.close()


def tn_with_upstream(c, upstream_port, extra, fn):
    """Run fn() with egressd restarted on 127.0.0.1:upstream_port (plus extra
    options), then restart it as it was."""
    saved_dns, saved_extra = c.dns_args, list(c.daemon.extra_args)
    c.dns_args = ["--dns-upstream", "127.0.0.1:%d" % upstream_port,
                  "--dns-min-ttl", str(DNS_MIN_TTL)]
    try:
        restart_daemon(c, saved_extra + list(extra))
        return fn()
    finally:
        c.dns_args = saved_dns
        restart_daemon(c, saved_extra)


# N sequential lookups of NAME through 127.0.0.2:53 (redirected to the
# sandbox's proxy), one socket. Prints "fail F p50 MS p99 MS max MS rcodes".
TN_VICTIM = r"""
import random, socket, struct, sys, time
name, n = sys.argv[1], int(sys.argv[2])
server = sys.argv[3] if len(sys.argv) > 3 else "127.0.0.2"
port = int(sys.argv[4]) if len(sys.argv) > 4 else 53
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2.0)
def query(qid):
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\0" + struct.pack(">HH", 1, 1)
rtts, fails, rcodes = [], 0, {}
# A query past its 2 s is failed, but whether its answer came later (slow)
# or never (lost) is what tells a stalled machine from a dropped query.
waiting, late, late_ms = {}, 0, 0.0
def take(m):
    global late, late_ms
    qid = struct.unpack(">H", m[:2])[0]
    if qid in waiting:
        # late: answered (NOERROR) after the wait; a late failure stays a failure
        if struct.unpack(">H", m[2:4])[0] & 15 == 0:
            late += 1
        late_ms = max(late_ms, (time.monotonic() - waiting.pop(qid)) * 1000)
    return qid
for i in range(n):
    qid = random.getrandbits(16)
    while qid in waiting:
        qid = random.getrandbits(16)
    t0 = time.monotonic()
    s.sendto(query(qid), (server, port))
    try:
        while True:
            m = s.recv(4096)
            if len(m) >= 12 and take(m) == qid:
                break
        rc = struct.unpack(">H", m[2:4])[0] & 15
    except socket.timeout:
        rc = "timeout"
        waiting[qid] = t0
    rtts.append(time.monotonic() - t0)
    rcodes[rc] = rcodes.get(rc, 0) + 1
    if rc != 0:
        fails += 1
if waiting:
    s.settimeout(3.0)
    try:
        while waiting:
            m = s.recv(4096)
            if len(m) >= 12:
                take(m)
    except socket.timeout:
        pass
if late or waiting:
    rcodes["late"] = late
    rcodes["late_max_ms"] = int(late_ms)
    rcodes["lost"] = len(waiting)
rtts.sort()
def pct(p):
    return rtts[min(len(rtts) - 1, int(len(rtts) * p))] * 1000
print("fail %d p50 %.3f p99 %.3f max %.3f %s" % (fails, pct(0.5), pct(0.99), rtts[-1] * 1000,
      ",".join("%s:%d" % kv for kv in sorted(rcodes.items(), key=str))))
"""


# A noisy neighbour: QPS queries per second of NAME (which the upstream
# never answers) until its stdin closes (DURATION seconds at most), at nice
# 10. Prints "sent N".
TN_FLOODER = r"""
import os, random, socket, struct, sys, time
import select
name, qps, duration = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
os.nice(10)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
base = struct.pack(">HHHH", 0x0100, 1, 0, 0)
q = b""
for label in name.split("."):
    q += bytes([len(label)]) + label.encode()
q += b"\0" + struct.pack(">HH", 1, 1)
sent, t0 = 0, time.monotonic()
while True:
    now = time.monotonic() - t0
    if now >= duration:
        break
    while sent < now * qps:
        try:
            s.sendto(struct.pack(">HH", random.getrandbits(16), 0x0100) +
                     struct.pack(">HHHH", 1, 0, 0, 0) + q, ("127.0.0.2", 53))
        except (BlockingIOError, PermissionError):
            pass  # EPERM: past its kernel budget for the shared listener
        sent += 1
    try:
        while s.recv(4096):
            pass
    except BlockingIOError:
        pass
    # Until the test closes our stdin (its rounds are done), DURATION at most.
    if select.select([sys.stdin], [], [], 0.005)[0] and not os.read(0, 1):
        break
print("sent %d" % sent)
"""


def tn_victim_run(c, cg, name="api.test", n=300, server="127.0.0.2", port=53):
    r = subprocess.run([sys.executable, "-c", TN_VICTIM, name, str(n), server, str(port)],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120,
                       preexec_fn=join_cgroup_fn(cg))
    w = r.stdout.split()
    check(r.returncode == 0 and len(w) >= 8 and w[0] == "fail",
          "the victim's lookups did not run: %r %r" % (r.stdout, r.stderr[-300:]))
    rcodes = w[8] if len(w) > 8 else ""
    counts = dict(kv.rsplit(":", 1) for kv in rcodes.split(",") if ":" in kv)
    return {"fail": int(w[1]), "p50": float(w[3]), "p99": float(w[5]), "max": float(w[7]),
            "rcodes": rcodes, "late": int(counts.get("late", 0))}


def egressd_sanitized(c):
    """Whether the running egressd is an ASan build (libasan mapped)."""
    try:
        with open("/proc/%d/maps" % c.daemon.proc.pid) as f:
            return "libasan" in f.read()
    except OSError:
        return False


def tn_proxy_stats(c, sb):
    s = c.find_sandbox(sb.cg)
    check(s is not None, "sandbox %s not listed" % sb.cg)
    p = (s.get("dns") or {}).get("proxy")
    check(isinstance(p, dict), "`list --json` has no dns.proxy figures: %r" % s.get("dns"))
    return p


TN_P99_FLOOR_MS = 1.0


@test
def tenant_dns_fairness(c):
    need_dnsmasq(c)
    up = TnBlackholeUpstream(c)
    CLEANUP.push("black-hole dnsmasq", up.stop)

    def body():
        victim_pol = tn_dns_policy(c, ["api.test"], tenant="tn-victim")
        noisy_pol = tn_dns_policy(c, ["blackhole.test"], tenant="tn-noisy")
        with Sandbox(c, victim_pol, "tn-dns-victim") as victim:
            tn_victim_run(c, victim.cg, n=30)    # warm-up: caches, first-packet costs
            # Three rounds of 300 each way; the median round's p99 is the
            # figure (this 2-core VM is shared: one round's tail is noise).
            alone = [tn_victim_run(c, victim.cg) for _ in range(3)]
            noisy = []
            try:
                for i in range(4):
                    sb = Sandbox(c, noisy_pol, "tn-dns-noisy%d" % i)
                    sb.__enter__()
                    noisy.append(sb)
                procs = []
                for sb in noisy:
                    p = subprocess.Popen([sys.executable, "-c", TN_FLOODER, "blackhole.test",
                                          "3000", "120"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True, preexec_fn=join_cgroup_fn(sb.cg))
                    CLEANUP.push("flooder", lambda p=p: p.poll() is None and p.kill())
                    procs.append(p)
                time.sleep(1.5)   # the table fills: 4 x 256 in flight for 2 s each
                flood = [tn_victim_run(c, victim.cg) for _ in range(3)]
                for p in procs:
                    check(p.poll() is None, "a flooder ended before the victim's rounds did")
                # They flood until told (a fixed length ran out under ASan on
                # a loaded machine before the rounds did).
                for p in procs:
                    p.communicate(timeout=30)
                vst = tn_proxy_stats(c, victim)
                nst = [tn_proxy_stats(c, sb) for sb in noisy]
                code, _, m = scrape(c)
                check(code == 200, "GET /metrics: %d" % code)
                st = stats(c)
                srow = [r for r in st["sandboxes"] if r["id"] == c.find_sandbox(noisy[0].cg)["id"]]
                check(srow and srow[0].get("dns_proxy", {}).get("shed_rate") ==
                      nst[0]["shed_rate"], "`stats` does not show the shed counts: %r" % srow)
                nid = c.find_sandbox(noisy[0].cg)["id"]
                vid = c.find_sandbox(victim.cg)["id"]
            finally:
                for sb in noisy:
                    sb.remove()
        return alone, flood, vst, nst, m, nid, vid

    def median_round(runs):
        return dict(sorted(runs, key=lambda r: r["p99"])[1],
                    fail=sum(r["fail"] for r in runs), late=sum(r["late"] for r in runs),
                    rcodes=" ".join(r["rcodes"] for r in runs))

    # 3x the alone p99, with that p99 taken as at least TN_P99_FLOOR_MS: on two
    # cores the four flooders' own processes take CPU from the victim and from
    # egressd whatever egressd shares, and a sub-millisecond p99 then moves by
    # scheduler quanta (0.17 -> 0.55 ms seen with the fairness in place; the
    # unfair proxy gave 5.2 ms and 90 SERVFAILs).
    def measure():
        alone_runs, flood_runs, *rest = tn_with_upstream(c, up.port, [], body)
        alone, flood = median_round(alone_runs), median_round(flood_runs)
        return (alone, flood, 3 * max(alone["p99"], TN_P99_FLOOR_MS)) + tuple(rest)

    alone, flood, bound, vst, nst, m, nid, vid = measure()
    if flood["p99"] > bound and flood["fail"] == 0:
        # A burst of the machine's other work between the alone and the
        # flood rounds (seen under ASan with another suite running): one more
        # pass, which must hold. The unfair proxy fails both, and SERVFAILs.
        log("victim p99 %.3f ms alone, %.3f under the flood (> %.3f): measuring again" %
            (alone["p99"], flood["p99"], bound))
        alone, flood, bound, vst, nst, m, nid, vid = measure()
    want = 'egressd_dns_shed_total{tenant="tn-noisy",sandbox="%d",reason="rate"} %d' % (
        nid, nst[0]["shed_rate"])
    check(want in m, "/metrics lacks %r" % want)
    check('egressd_dns_shed_total{tenant="tn-victim",sandbox="%d",reason="evicted"} 0' % vid
          in m, "/metrics has no (zero) shed series for the victim")
    tn_record("dns victim alone p50/p99/max ms", "%.3f/%.3f/%.3f" %
              (alone["p50"], alone["p99"], alone["max"]))
    tn_record("dns victim under 4 black-hole floods p50/p99/max ms", "%.3f/%.3f/%.3f" %
              (flood["p50"], flood["p99"], flood["max"]))
    tn_record("dns neighbours shed", nst)
    check(alone["fail"] == 0, "the victim's lookups failed alone: %r" % alone)
    # Sanity twin: the neighbours really flooded and were shed for it.
    for st in nst:
        check(st["shed_rate"] > 0 and st["shed_inflight"] + st["evicted"] > 0,
              "a neighbour was not shed (the flood proves nothing): %r" % st)
    # Under ASan only, an answer that came after the victim's 2 s (NOERROR,
    # late) is the machine's, not the neighbours': in the failures seen there
    # egressd's own log stopped for 1.8-5 s in the middle of a loop turn (not
    # scheduled), the victim was never shed or evicted, and every timed-out
    # query was answered later (lost 0). At most 1 %; a lost query, a
    # SERVFAIL or a shed victim fails as in the plain build.
    late_ok = flood["late"] if egressd_sanitized(c) and flood["late"] <= 9 else 0
    if late_ok:
        log("under ASan: %d of the victim's 900 lookups answered after 2 s (%s)" %
            (late_ok, flood["rcodes"]))
    check(flood["fail"] - late_ok == 0, "%d of the victim's 900 lookups failed during the "
          "flood (%s; egressd's figures for the victim: %r)" % (flood["fail"], flood["rcodes"],
                                                                vst))
    check(vst["shed_rate"] == 0 and vst["shed_inflight"] == 0 and vst["evicted"] == 0,
          "the victim was shed for its neighbours: %r" % vst)
    check(flood["p99"] <= bound,
          "the victim's p99 went from %.3f ms alone to %.3f ms under the flood (> %.3f)" %
          (alone["p99"], flood["p99"], bound))


# --- who asks the proxy ---------------------------------------------------------

# Queries sent to HOST:PORT (a sandbox's listener on 127.0.0.1, or
# 127.0.0.2:53 that the kernel redirects there) from a socket bound to
# 127.0.0.1:SPORT (0: any). Prints "answered N timeout M rcodes R,...".
TN_DIRECT = r"""
import random, socket, struct, sys
host, port = sys.argv[1].rsplit(":", 1)
port, names, sport = int(port), sys.argv[2].split(","), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", sport))
s.settimeout(float(sys.argv[4]))
answered = timeout = 0
rcodes = []
for name in names:
    qid = random.getrandbits(16)
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    s.sendto(q + b"\0" + struct.pack(">HH", 1, 1), (host, port))
    try:
        m = s.recv(4096)
        answered += 1
        rcodes.append(str(struct.unpack(">H", m[2:4])[0] & 15))
    except socket.timeout:
        timeout += 1
print("answered %d timeout %d rcodes %s" % (answered, timeout, ",".join(rcodes) or "-"))
"""


def tn_direct(cg, port, names, sport=0, host="127.0.0.1", timeout=0.15):
    """Answers get timeout s each: ours come in well under 1 ms."""
    r = subprocess.run([sys.executable, "-c", TN_DIRECT, "%s:%d" % (host, port), ",".join(names),
                        str(sport), str(timeout)],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120, preexec_fn=join_cgroup_fn(cg))
    w = r.stdout.split()
    check(len(w) >= 6 and w[0] == "answered",
          "direct queries did not run: %r %r" % (r.stdout, r.stderr[-300:]))
    return int(w[1]), int(w[3]), w[5]


@test
def tenant_dns_listener_identity(c):
    need_dnsmasq(c)
    up = TnBlackholeUpstream(c)
    CLEANUP.push("black-hole dnsmasq", up.stop)

    def body():
        vpol = tn_dns_policy(c, ["api.test", "*.nx.test"], tenant="tn-victim")
        with Sandbox(c, vpol, "tn-id-victim") as victim:
            port = (c.find_sandbox(victim.cg).get("dns") or {}).get("port4")
            check(port, "no DNS listener port for the victim in `list --json`")
            # Sanity twins: the client reaches a resolver from outside (the
            # upstream itself answers it), and the victim's own socket is
            # served the same way through the redirect.
            a, t, _ = tn_direct(None, up.port, ["api.test"])
            check(a == 1, "the direct client gets no answer even from dnsmasq itself")
            a, t, rc = tn_direct(victim.cg, 53, ["api.test"], host="127.0.0.2")
            check(a == 1 and rc == "0", "the victim's own direct query was not served: "
                  "answered %d rcodes %s" % (a, rc))
            # Hostile, outside every sandbox: 40 NXDOMAIN-bound names (past
            # the per-minute NXDOMAIN limit of 30) sent to the victim's listener.
            nx = ["x%d-%s.nx.test" % (i, RAND) for i in range(40)]
            before = tn_proxy_stats(c, victim)
            a, t, _ = tn_direct(None, port, nx)
            check(a == 0, "%d of 40 queries from outside every sandbox were answered on the "
                  "victim's listener" % a)
            # Hostile, another sandbox allowed to reach that port on loopback.
            # The listener is shared by the sandboxes of egressd's namespace:
            # the neighbour is served, but as itself (the kernel's record of
            # its socket names it), under its own policy, which resolves
            # none of these names; nothing counts against the victim.
            # dns_reject "refused": its denials (5) stay apart from the
            # upstream's NXDOMAIN (3) these names would get if forwarded.
            npol = c.policy(["udp/127.0.0.1:%d" % port, "tcp/127.0.0.1:%d" % port],
                            tenant="tn-noisy", extra_network={"dns_reject": "refused"})
            with Sandbox(c, npol, "tn-id-noisy") as noisy:
                nbefore = tn_proxy_stats(c, noisy)
                a2, t2, rc2 = tn_direct(noisy.cg, port, nx[:20])
                check(a2 == 20 and set(rc2.split(",")) == {"5"},
                      "a neighbour's 20 queries on the shared listener were not refused "
                      "under its own policy: answered %d rcodes %s" % (a2, rc2))
                nafter = tn_proxy_stats(c, noisy)
                check(nafter["refused"] - nbefore["refused"] == 20,
                      "the neighbour's queries were not counted as its own: %r -> %r" %
                      (nbefore, nafter))
                # TCP from outside: accepted by the kernel, closed unread.
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
                try:
                    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" \
                        b"\x03api\x04test\x00\x00\x01\x00\x01"
                    s.sendall(struct.pack(">H", len(q)) + q)
                    try:
                        got = s.recv(4096)
                    except OSError:
                        got = b""
                finally:
                    s.close()
                check(got == b"", "a TCP query from outside was answered: %r" % got)
                after = tn_proxy_stats(c, victim)
            # A stale source: the victim's socket on a fixed port closes; an
            # outsider binds that port and asks. Then the victim asks again
            # from it (twin).
            sport = free_udp_tcp_port("127.0.0.1")
            a, _, rc = tn_direct(victim.cg, 53, ["api.test"], sport=sport, host="127.0.0.2")
            check(a == 1 and rc == "0", "the victim's query from port %d: %d %s" %
                  (sport, a, rc))
            a, _, _ = tn_direct(None, port, ["api.test"], sport=sport)
            check(a == 0, "an outsider reusing the victim's closed source port was served")
            a, _, rc = tn_direct(victim.cg, 53, ["api.test"], sport=sport, host="127.0.0.2")
            check(a == 1 and rc == "0", "the victim's query from port %d again: %d %s" %
                  (sport, a, rc))
            # The victim is unharmed: its lookups work, nothing of the
            # strangers' was counted against it, only as foreign.
            for _ in range(3):
                dns_ok(c, victim, "api.test", want=DNS_ZONE["api.test"])
            dns_ok(c, victim, "api.test", mode="tcp", want=DNS_ZONE["api.test"])
            rc, _, _, line = dns_query("udp", "127.0.0.2", 53, "own-%s.nx.test" % RAND, "A",
                                       cg=victim.cg)
            check(rc == "NXDOMAIN", "the victim's own NXDOMAIN lookup: %r" % line)
            final = tn_proxy_stats(c, victim)
        return before, after, final

    before, after, final = tn_with_upstream(c, up.port, [], body)
    tn_record("dns foreign dropped on the victim's listener",
              after["foreign_dropped"] - before["foreign_dropped"])
    check(after["foreign_dropped"] - before["foreign_dropped"] >= 40 + 1,
          "the strangers' queries were not counted as foreign: %r -> %r" % (before, after))
    for k in ("exfil", "refused", "servfail", "malformed"):
        check(final[k] == before[k], "the strangers' queries counted against the victim (%s: "
              "%d -> %d)" % (k, before[k], final[k]))


# --- DNS events carry the addresses -------------------------------------------


@test
def tenant_dns_events_addresses(c):
    need_dnsmasq(c)
    a = srv(c, "dns-api", "api.test")
    # The victim's name opens a port (its addresses are learned); the
    # neighbour may only resolve it (nothing learned: the sanity twin of the
    # learned flag).
    with c.sandbox(["api.test:%d" % a.port], tenant="tn-victim",
                   extra_network=DNS_REBIND_LO) as victim, \
            Sandbox(c, tn_dns_policy(c, ["api.test"], tenant="tn-noisy"), "tn-ev-noisy") as noisy:
        vid, nid = sandbox_id(c, victim), sandbox_id(c, noisy)
        dns_ok(c, victim, "api.test", want=DNS_ZONE["api.test"])
        dns_ok(c, noisy, "api.test", want=DNS_ZONE["api.test"])

        def dns_event(sid):
            evs = [e for e in obs_events(c, "--sandbox", str(sid))
                   if e.get("type") == "dns" and e.get("qname", "").rstrip(".") == "api.test"
                   and e.get("verdict") == "allow"]
            return evs[-1] if evs else None
        wait_until(lambda: dns_event(vid) and dns_event(nid), 3)
        ve, ne = dns_event(vid), dns_event(nid)
    check(ve is not None and ne is not None, "no allowed dns event for api.test: %r %r" %
          (ve, ne))
    check(ve.get("sandbox") == vid and ne.get("sandbox") == nid,
          "the events name the wrong sandboxes: %r %r" % (ve, ne))
    want = DNS_ZONE["api.test"]
    check(ve.get("answers") == 1 and ve.get("addresses") and
          ve["addresses"][0].get("addr") == want and ve["addresses"][0].get("learned") is True,
          "the victim's dns event does not list %s as learned: %r" % (want, ve))
    check(isinstance(ve["addresses"][0].get("ttl"), int), "no ttl: %r" % ve)
    check(ne.get("addresses") and ne["addresses"][0].get("addr") == want and
          ne["addresses"][0].get("learned") is False,
          "the neighbour's resolve-only answer is not listed as not learned: %r" % ne)


# --- audit destinations are accounted per sandbox ------------------------------

TN_SPRAY = r"""
import socket, sys
addr, first, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sent = 0
for port in range(first, first + n):
    try:
        s.sendto(b"x", (addr, port))
        sent += 1
    except OSError:
        pass
print("sent %d" % sent)
"""


def tn_execution_record(c, sid):
    recs = [r for r in obs_audit(c) if r.get("type") == "execution" and r.get("sandbox") == sid]
    if not recs:
        recs = [r for r in obs_audit(c) if r.get("type") == "execution" and
                r.get("sandbox_id") == sid]
    return recs[-1] if recs else None


@test
def tenant_audit_destinations(c):
    t = c.tcp("tn-audit")
    victim = c.sandbox(["127.0.0.1:%d" % t.port], name="tn-audit-victim", tenant="tn-victim")
    noisy = c.sandbox(["udp/127.0.0.98/32:*"], name="tn-audit-noisy", tenant="tn-noisy")
    with victim, noisy:
        vid, nid = sandbox_id(c, victim), sandbox_id(c, noisy)
        victim.allowed("tcp", "127.0.0.1", t.port)
        # The neighbour sprays more distinct destinations than its cap
        # (4096) and than the victim's one could ever compete with.
        r = subprocess.run([sys.executable, "-c", TN_SPRAY, "127.0.0.98", "20000", "5000"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60,
                           preexec_fn=join_cgroup_fn(noisy.cg))
        check(r.stdout.strip() == "sent 5000", "the neighbour's spray: %r %r" %
              (r.stdout, r.stderr[-300:]))
        victim.allowed("tcp", "127.0.0.1", t.port)   # after the spray, too
    wait_until(lambda: tn_execution_record(c, vid) and tn_execution_record(c, nid), 5)
    v, n = tn_execution_record(c, vid), tn_execution_record(c, nid)
    check(v is not None and n is not None, "no execution records for %d and %d" % (vid, nid))
    dest = "127.0.0.1:%d" % t.port
    check(any(d.get("dest") == dest for d in v.get("egress") or []),
          "the victim's destination %s is not in its record: %r" % (dest, v.get("egress")))
    check(v.get("egress_complete") is True and v.get("egress_dropped") == 0,
          "the victim's record is marked incomplete for its neighbour's spray: complete %r, "
          "dropped %r" % (v.get("egress_complete"), v.get("egress_dropped")))
    # Sanity twin: the spray really overflowed, and the record says so.
    tn_record("audit neighbour destinations listed/dropped",
              "%d/%s" % (len(n.get("egress") or []), n.get("egress_dropped")))
    check(n.get("egress_complete") is False and (n.get("egress_dropped") or 0) >= 5000 - 4096,
          "the neighbour's record does not say it lost destinations: complete %r, dropped %r, "
          "listed %d" % (n.get("egress_complete"), n.get("egress_dropped"),
                         len(n.get("egress") or [])))


# --- the event stream -----------------------------------------------------------


class TnFollower:
    """`egressctl events --follow --json` from outside every sandbox, its
    lines collected by a thread. read=False: it does not read until
    start_reading() (a subscriber that falls behind)."""

    def __init__(self, c, read=True):
        self.lines = []
        self.proc = subprocess.Popen([c.egressctl, "--socket", c.sock, "events", "--follow",
                                      "--json"], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        CLEANUP.push("follower", self.stop)
        self.go = threading.Event()
        if read:
            self.go.set()
        self.th = threading.Thread(target=self._read, daemon=True)
        self.th.start()

    def _read(self):
        self.go.wait(120)
        for line in self.proc.stdout:
            try:
                self.lines.append(json.loads(line))
            except ValueError:
                self.lines.append({"unparsed": line})

    def start_reading(self):
        self.go.set()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.go.set()
        self.th.join(5)

    def of(self, sid, type_=None):
        return [e for e in self.lines if e.get("sandbox") == sid and
                (type_ is None or e.get("type") == type_)]


def tn_flood_accounting(f, sid, kind="connect"):
    """(denies delivered one by one, suppressed in aggregate, lost) of sid."""
    delivered = len([e for e in f.of(sid, kind) if e.get("verdict") == "deny"])
    suppressed = sum(e.get("suppressed", 0) for e in f.of(sid, "denies_suppressed"))
    lost = sum(e.get("lost", 0) for e in f.of(sid, "lost_events"))
    return delivered, suppressed, lost


@test
def tenant_events_deny_flood(c):
    b = c.tcp("b")
    flood_n, victim_n = 50000, 100
    with c.sandbox(["127.0.0.1:1"], name="tn-ev-victim", tenant="tn-victim") as victim, \
            c.sandbox(["127.0.0.1:1"], name="tn-ev-noisy", tenant="tn-noisy") as noisy:
        vid, nid = sandbox_id(c, victim), sandbox_id(c, noisy)
        f = TnFollower(c)
        time.sleep(0.3)
        flood = subprocess.Popen([c.netprobe, "connect-loop", "127.0.0.1", str(b.port),
                                  str(flood_n)], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 preexec_fn=join_cgroup_fn(noisy.cg))
        CLEANUP.push("deny flood", lambda: flood.poll() is None and flood.kill())
        time.sleep(0.05)
        r = c.probe(victim.cg, "connect-loop", "127.0.0.1", b.port, victim_n)
        check(r.line == "ok 0 %d" % victim_n, "the victim's denies: %s" % r)
        out, _ = flood.communicate(timeout=120)
        check(out.strip() == "ok 0 %d" % flood_n, "the neighbour's flood: %r" % out)

        def settled():
            d, s, l = tn_flood_accounting(f, nid)
            return d + s + l == flood_n and sum(tn_flood_accounting(f, vid)) == victim_n
        ok = wait_until(settled, 10, 0.2)
        vd, vs, vl = tn_flood_accounting(f, vid)
        nd, ns, nl = tn_flood_accounting(f, nid)
        code, _, m = scrape(c)
    f.stop()
    tn_record("events victim delivered/suppressed/lost", "%d/%d/%d" % (vd, vs, vl))
    tn_record("events neighbour delivered/suppressed/lost", "%d/%d/%d" % (nd, ns, nl))
    check(not [e for e in f.lines if e.get("type") == "subscriber_dropped"],
          "the follower was cut off during the flood")
    check(ok, "not every deny is accounted for: victim %d+%d+%d of %d, neighbour %d+%d+%d of "
          "%d" % (vd, vs, vl, victim_n, nd, ns, nl, flood_n))
    # The victim's denies: every one delivered, or counted as its own loss.
    check(vd + vl == victim_n and vs == 0,
          "the victim's %d denies: %d delivered, %d lost, %d suppressed" %
          (victim_n, vd, vl, vs))
    # Sanity twin: the neighbour's flood really was past its budget, and
    # the aggregate names where it went.
    check(ns > 0, "nothing of the neighbour's flood was suppressed (the test proves nothing)")
    tops = [t for e in f.of(nid, "denies_suppressed") for t in e.get("top", [])]
    check(any(t.get("dst") == "127.0.0.1" and t.get("port") == b.port for t in tops),
          "the aggregated events do not name the flood's destination: %r" % tops[:4])
    check(code == 200 and re.search(r'egressd_events_suppressed_total\{tenant="[^"]*",sandbox="%d"\} %d\n' % (nid, ns), m),
          "/metrics does not attribute %d suppressed events to sandbox %d" % (ns, nid))
    recs = {r.get("sandbox"): r for r in obs_audit(c) if r.get("type") == "execution"}
    check(recs.get(nid, {}).get("events", {}).get("suppressed") == ns and
          recs.get(vid, {}).get("events", {}).get("suppressed") == 0,
          "the execution records do not attribute suppressed events: %r %r" %
          (recs.get(nid, {}).get("events"), recs.get(vid, {}).get("events")))


@test
def tenant_events_slow_follower(c):
    # Without the budget (so that the ring carries enough to fall 4 MiB
    # behind), a follower that does not read is not cut off: it is told
    # what it missed, per sandbox, and goes on.
    b = c.tcp("b")
    n = 60000
    saved = list(c.daemon.extra_args)
    restart_daemon(c, saved + ["--events-deny-rate", "0"])
    try:
        with c.sandbox(["127.0.0.1:1"], name="tn-slow", tenant="tn-noisy") as sb:
            sid = sandbox_id(c, sb)
            slow = TnFollower(c, read=False)
            quick = TnFollower(c)
            time.sleep(0.3)
            r = c.probe(sb.cg, "connect-loop", "127.0.0.1", b.port, n, timeout=60)
            check(r.line == "ok 0 %d" % n, "connect-loop: %s" % r)
            wait_until(lambda: sum(tn_flood_accounting(quick, sid)) >= n, 15, 0.2)
            slow.start_reading()
            check(wait_until(lambda: any(e.get("type") == "events_skipped"
                                         for e in slow.lines), 15, 0.2),
                  "the slow follower was never told what it missed")
            marker = c.tcp("tn-slow-marker").port
            sb.denied("tcp", "127.0.0.1", marker)   # after it caught up

            def has_marker(f):
                return any(e.get("port") == marker for e in f.of(sid, "connect"))
            wait_until(lambda: has_marker(slow) and has_marker(quick), 10, 0.2)
            slow.stop()
            quick.stop()
    finally:
        restart_daemon(c, saved)
    dropped = [e for e in slow.lines if e.get("type") == "subscriber_dropped"]
    skipped = [e for e in slow.lines if e.get("type") == "events_skipped"]
    check(not dropped, "the slow follower was cut off: %r" % dropped)
    check(skipped, "the slow follower was not told what it missed")
    # Every event of the sandbox, of any type, either reached it or was
    # counted as missed for that sandbox: the same total as the reading one
    # (which may itself have fallen behind for a moment: it is Python).
    def total(f):
        return len(f.of(sid)) + sum(e.get("by_sandbox", {}).get(str(sid), 0)
                                    for e in f.lines if e.get("type") == "events_skipped")
    missed = sum(e.get("by_sandbox", {}).get(str(sid), 0) for e in skipped)
    got = len(slow.of(sid))
    tn_record("events slow follower got/missed", "%d/%d" % (got, missed))
    check(missed > 0 and total(slow) == total(quick),
          "the slow follower got %d and was told of %d missed: %d events, the reading one "
          "%d" % (got, missed, total(slow), total(quick)))
    # It goes on: the deny made after it caught up reached it.
    check(any(e.get("port") == marker for e in slow.of(sid, "connect")),
          "the deny made after the slow follower caught up never reached it")
