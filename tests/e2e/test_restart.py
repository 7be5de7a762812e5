# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""DNS across egressd restarts (docs/operations.md "Restarts", issue 24):
the listener holder keeps the sandboxes' DNS listeners, queries sent while
no egressd runs wait in their queues and the successor answers them, each
after its address is learned."""

import json
import os
import socket
import subprocess
import sys
import threading
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)

# A resolver inside the sandbox, as an application's stub behaves (glibc's
# defaults: 5 s per attempt, 2 attempts): one new socket per query, a UDP
# query every UDP_EVERY s and a TCP one every TCP_EVERY s, each in a thread
# of its own (a slow answer does not hold the next query back), each name
# asked once (its address learned by this very answer), and right after an
# answer a TCP connect to the answered address. Runs until the stop file
# exists; prints one JSON line per query.
RESOLVER = r"""
import errno, json, os, random, select, socket, struct, sys, threading, time
cfg = json.load(open(sys.argv[1]))
P, TMO, ATT = cfg["port"], cfg["timeout"], cfg["attempts"]
rows, lock = [], threading.Lock()
def build(name):
    qid = random.getrandbits(16)
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    return qid, q + b"\0" + struct.pack(">HH", 1, 1)
def parse(qid, m):
    if len(m) < 12 or struct.unpack(">H", m[:2])[0] != qid:
        return None, []
    flags, qd, an = struct.unpack(">HHH", m[2:8])
    def skip(i):
        while True:
            n = m[i]
            if n == 0:
                return i + 1
            if n & 0xc0 == 0xc0:
                return i + 2
            i += n + 1
    i = 12
    for _ in range(qd):
        i = skip(i) + 4
    addrs = []
    for _ in range(an):
        i = skip(i)
        t, _c, _ttl, rdlen = struct.unpack(">HHIH", m[i:i + 10])
        i += 10
        if t == 1:
            addrs.append(socket.inet_ntop(socket.AF_INET, m[i:i + 4]))
        i += rdlen
    return flags & 15, addrs
class Attempt:
    # One transmission: its own socket and id. A stub that retries keeps
    # listening on the earlier ones (glibc keeps its UDP socket): an answer
    # to the first transmission, late, is a slow query, not a lost one.
    def __init__(self, tr, name):
        self.tr, self.buf, self.dead = tr, b"", False
        self.qid, q = build(name)
        fam, typ = socket.AF_INET, (socket.SOCK_DGRAM if tr == "udp" else socket.SOCK_STREAM)
        self.s = socket.socket(fam, typ)
        self.s.setblocking(False)
        try:
            if tr == "udp":
                self.s.sendto(q, ("127.0.0.2", 53))
            else:
                self.s.settimeout(TMO)
                self.s.connect(("127.0.0.2", 53))
                self.s.sendall(struct.pack(">H", len(q)) + q)
                self.s.setblocking(False)
        except OSError as e:
            self.dead = errno.errorcode.get(e.errno, str(e.errno))
    def read(self):
        try:
            if self.tr == "udp":
                return parse(self.qid, self.s.recv(65535))
            d = self.s.recv(65535)
        except BlockingIOError:
            return None, []
        except OSError as e:
            self.dead = errno.errorcode.get(e.errno, str(e.errno))
            return None, []
        if not d:
            self.dead = "eof"
            return None, []
        self.buf += d
        b = self.buf
        if len(b) >= 2 and len(b) >= 2 + struct.unpack(">H", b[:2])[0]:
            return parse(self.qid, b[2:2 + struct.unpack(">H", b[:2])[0]])
        return None, []
def ask(tr, name, want):
    r = {"tr": tr, "name": name, "want": want, "sent": time.monotonic(), "errors": []}
    atts, nxt = [], 0.0
    end = r["sent"] + TMO * ATT
    while time.monotonic() < end and "rcode" not in r:
        now = time.monotonic()
        live = [a for a in atts if not a.dead]
        # The next attempt at its time, or at once when every earlier one
        # failed outright (refused, reset: as stubs do).
        if len(atts) < ATT and (now >= nxt or not live):
            a = Attempt(tr, name)
            atts.append(a)
            nxt = now + TMO
            if a.dead:
                r["errors"].append(a.dead)
                time.sleep(0.05)
            continue
        if not live:
            break
        rd, _, _ = select.select([a.s for a in live], [], [], max(0.0, min(nxt, end) - now))
        for i, a in enumerate(atts):
            if a.s in rd and "rcode" not in r:
                rc, addrs = a.read()
                if rc is not None:
                    r["rcode"], r["addrs"], r["answered"] = rc, addrs, i + 1
                elif a.dead:
                    r["errors"].append(a.dead)
    r["attempts"] = len(atts)
    r["got"] = time.monotonic()
    for a in atts:
        a.s.close()
    if cfg["connect"] and r.get("rcode") == 0 and want in r.get("addrs", []):
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.settimeout(2)
        try:
            c.connect((want, P))
            r["connect"] = "ok"
        except OSError as e:
            r["connect"] = errno.errorcode.get(e.errno, str(e.errno))
        finally:
            c.close()
    with lock:
        rows.append(r)
def stream(tr, every, names):
    threads, nxt = [], time.monotonic()
    for name, want in names:
        if os.path.exists(cfg["stop"]):
            break
        t = threading.Thread(target=ask, args=(tr, name, want))
        t.start()
        threads.append(t)
        nxt += every
        time.sleep(max(0.0, nxt - time.monotonic()))
    for t in threads:
        t.join()
print("start", flush=True)
ts = [threading.Thread(target=stream, args=("udp", cfg["udp_every"], cfg["udp"])),
      threading.Thread(target=stream, args=("tcp", cfg["tcp_every"], cfg["tcp"]))]
for t in ts:
    t.start()
for t in ts:
    t.join()
for r in rows:
    print(json.dumps(r))
"""

UDP_EVERY, TCP_EVERY = 0.02, 0.1


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))] if xs else 0.0


class Targets:
    """n names r<i>.<tag>.test, each on an address of its own in
    127.77.0.0/16 that the test zone serves, and a TCP listener on each (the
    handshake completes in the backlog: a connect succeeds when the address
    was learned)."""

    def __init__(self, c, tag, n):
        self.names, self.socks = [], []
        CLEANUP.push("restart test listeners", self.close)
        for i in range(n):
            self.names.append(("r%d.%s.test" % (i, tag), "127.77.%d.%d" % (i // 200, i % 200 + 1)))
        self.port = None
        for _ in range(20):
            try:
                self._listen(free_tcp_port())
                break
            except OSError:
                self.close()
        check(self.port, "no port free on every 127.77.x.y")
        with open(c.dnsmasq.hosts, "a") as f:
            for name, addr in self.names:
                f.write("%s %s\n" % (addr, name))
        c.dnsmasq.proc.send_signal(__import__("signal").SIGHUP)
        last, addr = self.names[-1]
        check(wait_until(lambda: addr in dns_query("udp", "127.0.0.1", c.dnsmasq.port, last,
                                                   "A")[1], 5, 0.1),
              "dnsmasq does not serve %s" % last)

    def _listen(self, port):
        self.socks = []
        for _, addr in self.names:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, port))
            s.listen(16)
            self.socks.append(s)
        self.port = port

    def close(self):
        for s in self.socks:
            s.close()
        self.socks = []


class Resolver:
    seq = 0

    def __init__(self, c, sb, udp, tcp, port, attempts=2, timeout=5.0, every=None,
                 connect=True):
        Resolver.seq += 1
        self.stop_file = os.path.join(c.work, "resolver-%s-%d.stop" % (RAND, Resolver.seq))
        cfgf = os.path.join(c.work, "resolver-%s-%d.json" % (RAND, Resolver.seq))
        with open(cfgf, "w") as f:
            json.dump({"port": port, "timeout": timeout, "attempts": attempts, "connect": connect,
                       "stop": self.stop_file, "udp_every": (every or (UDP_EVERY, TCP_EVERY))[0],
                       "tcp_every": (every or (UDP_EVERY, TCP_EVERY))[1],
                       "udp": udp, "tcp": tcp}, f)
        self.p = subprocess.Popen([sys.executable, "-c", RESOLVER, cfgf],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True,
                                  preexec_fn=join_cgroup_fn(sb.cg))
        CLEANUP.push("resolver", lambda: self.p.poll() is None and self.p.kill())
        check(self.p.stdout.readline().strip() == "start", "the resolver did not start")
        self.t0 = time.monotonic()

    def finish(self):
        open(self.stop_file, "w").close()
        out, err = self.p.communicate(timeout=40)
        check(self.p.returncode == 0, "the resolver failed: %r" % err[-600:])
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def judge(rows, strict, what, connected=True):
    """Every query answered with its address and (connected) connectable;
    those strict(row) says needed no second attempt (nothing lost). Returns
    the latency report."""
    bad = [r for r in rows if r.get("rcode") != 0 or r["want"] not in r.get("addrs", [])]
    check(not bad, "%s: %d of %d queries failed, e.g. %s" % (what, len(bad), len(rows),
                                                           json.dumps(bad[:3])))
    unlearned = [r for r in rows if connected and r.get("connect") != "ok"]
    check(not unlearned, "%s: %d answers whose address did not connect right after "
          "(answered before it was learned?), e.g. %s" % (what, len(unlearned),
                                                           json.dumps(unlearned[:3])))
    lost = [r for r in rows if r.get("answered") != 1 and strict(r)]
    check(not lost, "%s: %d queries were lost (their first transmission never answered), "
          "e.g. %s" % (what, len(lost), json.dumps(lost[:3])))
    rep = {}
    for tr in ("udp", "tcp"):
        lat = [(r["got"] - r["sent"]) * 1000 for r in rows if r["tr"] == tr]
        rep[tr] = "n=%d p50=%.1f p99=%.1f max=%.1f ms" % (len(lat), pct(lat, 50), pct(lat, 99),
                                                          max(lat) if lat else 0)
    rep["retried"] = sum(1 for r in rows if r["attempts"] > 1)
    rep["lost"] = sum(1 for r in rows if r.get("answered") != 1)
    return rep


def restart_sandbox(c, tag, n_udp, n_tcp):
    need_dnsmasq(c)
    tg = Targets(c, tag, n_udp + n_tcp)
    sb = c.sandbox(["%s:%d" % (name, tg.port) for name, _ in tg.names],
                   extra_network=DNS_REBIND_LO)
    return tg, sb


@test
def restart_dns_no_failed_query(c):
    """Three restarts (SIGTERM, start), then one whose successor is killed
    -9 mid-start, while the sandbox asks every 20 ms over UDP and every
    100 ms over TCP: every query answered, none needing a second attempt,
    every answered address connectable at once."""
    tg, sbctx = restart_sandbox(c, "rst%s" % RAND, 700, 140)
    with sbctx as sb:
        udp, tcp = tg.names[:700], tg.names[700:]
        res = Resolver(c, sb, udp, tcp, tg.port)
        marks = []
        try:
            time.sleep(0.6)
            for i in range(3):
                t = time.monotonic()
                c.daemon.stop()
                time.sleep(0.3)  # queries pile up with no egressd at all
                c.daemon.start()
                marks.append("restart %d: %.0f ms" % (i + 1, (time.monotonic() - t) * 1000))
                time.sleep(0.4)
            # kill -9 during the handover: the successor dies mid-start.
            c.daemon.stop()
            c.daemon.spawn()
            time.sleep(0.25)
            c.daemon.kill9()
            c.daemon.start()
            time.sleep(0.6)
        finally:
            c.ensure_daemon()
            rows = res.finish()
        rep = judge(rows, lambda r: True, "across 3 restarts and a kill -9 mid-start")
        check(len([r for r in rows if r["tr"] == "udp"]) >= 150,
              "too few UDP queries were made: %d" % len(rows))
        log("restart latency: udp %s; tcp %s; %s" % (rep["udp"], rep["tcp"], "; ".join(marks)))
        print("    restart_dns_no_failed_query: udp %s; tcp %s; %d retried" %
              (rep["udp"], rep["tcp"], rep["retried"]), flush=True)


@test
def restart_dns_kill9_serving(c):
    """kill -9 of an egressd that is serving: the queries it had read die
    with it (a stub's second attempt answers them); every other one, those
    sent while no egressd ran among them, is answered at the first attempt
    by the successor. None fails, none is answered before its address is
    learned."""
    tg, sbctx = restart_sandbox(c, "rsk%s" % RAND, 300, 60)
    with sbctx as sb:
        res = Resolver(c, sb, tg.names[:300], tg.names[300:], tg.port)
        try:
            time.sleep(0.5)
            c.daemon.kill9()
            time.sleep(0.3)
            c.daemon.start()
            time.sleep(0.5)
        finally:
            c.ensure_daemon()
            rows = res.finish()
        rep = judge(rows, lambda r: False, "across a kill -9")
        # At most what was in flight at the kill: a few queries.
        check(rep["lost"] <= 10, "%d queries lost: more than were in flight" % rep["lost"])
        print("    restart_dns_kill9_serving: udp %s; tcp %s; %d lost (in flight at the kill), "
              "%d retried" % (rep["udp"], rep["tcp"], rep["lost"], rep["retried"]), flush=True)


@test
def restart_holder_gone_is_replaced(c):
    """Killing the listener holder while egressd runs: egressd starts
    another and hands it every listener again, so the next restart still
    loses nothing."""
    path = c.sock + ".hold"
    a = holder_request(path, "PING")
    check(a and a.startswith("OK "), "no listener holder answers at %s: %r" % (path, a))
    pid = int(a.split()[1])
    with c.sandbox(["api.test:1"], extra_network=DNS_REBIND_LO) as sb:
        held = int(holder_request(path, "PING").split()[2])
        check(held >= 2, "the holder holds %d sockets with a sandbox attached" % held)
        os.kill(pid, 9)
        check(wait_until(lambda: (holder_request(path, "PING") or "").startswith("OK ") and
                         int(holder_request(path, "PING").split()[1]) != pid and
                         int(holder_request(path, "PING").split()[2]) >= held, 5, 0.1),
              "no new holder with the listeners after the old one was killed: %r" %
              holder_request(path, "PING"))
        body = scrape(c)[2]
        check("egressd_listener_holder_up 1" in body and
              "egressd_listener_holder_failures_total 0" not in body,
              "/metrics does not say the holder is up again after a failure: %r" %
              [l for l in body.splitlines() if "listener" in l])
        c.daemon.stop()
        got = []
        # Asked while no egressd runs: the new holder's socket queues it.
        t = threading.Thread(target=lambda: got.append(
            dns_query("udp", "127.0.0.2", 53, "api.test", "A", timeout=8, cg=sb.cg)))
        t.start()
        try:
            time.sleep(0.3)
            c.daemon.start()
        finally:
            t.join()
        check(got and got[0][0] == "NOERROR" and DNS_ZONE["api.test"] in got[0][1],
              "a query sent while egressd was down, after the holder was replaced: %r" %
              (got[0][3] if got else None,))


# Root inside a sandbox that reaches the holder's socket path (the harness's
# sandboxes share the host's mount namespace) asks for every listener, then
# tries to make the holder let go of them.
HOLDER_THIEF = r"""
import array, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.settimeout(3)
try:
    s.connect(sys.argv[1])
    s.send(sys.argv[2].encode())
    fds = array.array("i")
    msg, anc, _, _ = s.recvmsg(256, socket.CMSG_SPACE(64 * fds.itemsize))
    for level, typ, data in anc:
        if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    print("answer %r fds %d" % (msg.decode(errors="replace") or "(closed)", len(fds)))
except OSError as e:
    print("refused %s" % e.__class__.__name__)
"""


@test
def restart_holder_refuses_sandboxed_root(c):
    """The listener holder serves egressd only: root in a sandbox that can
    reach its socket gets no listener (TAKE) and cannot make it drop one
    (DEL); egressd itself (the sanity twin, from its cgroup) is served."""
    path = c.sock + ".hold"
    with c.sandbox(["api.test:1"], extra_network=DNS_REBIND_LO) as sb:
        before = holder_request(path, "PING")
        check(before and before.startswith("OK "), "egressd's own cgroup: PING got %r" % before)
        held = int(before.split()[2])
        check(held >= 2, "the holder holds %d sockets with a sandbox attached" % held)
        took = run_in_sandbox(sb.cg, [sys.executable, "-c", HOLDER_THIEF, path, "TAKE"])
        check(took.startswith("refused") or " fds 0" in took and "END" not in took,
              "root in a sandbox asked the holder for the listeners: %s" % took)
        s = (c.find_sandbox(sb.cg) or {}).get("dns") or {}
        ns = os.stat("/proc/self/ns/net")  # egressd's, where the listeners are
        key = "ip4/udp/%x/%x/%s" % (ns.st_dev, ns.st_ino, s.get("port4"))
        dropped = run_in_sandbox(sb.cg, [sys.executable, "-c", HOLDER_THIEF, path,
                                         "DEL " + key])
        check(not dropped.startswith("answer 'OK"), "DEL from a sandbox: %s" % dropped)
        after = holder_request(path, "PING")
        check(after and int(after.split()[2]) == held,
              "the holder's sockets changed after the sandbox's requests: %r -> %r" %
              (before, after))
        # The sanity twin: the same TAKE from egressd's cgroup is served.
        mine = subprocess.run([sys.executable, "-c", HOLDER_THIEF, path, "TAKE"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        check(mine.startswith("answer 'FD "), "TAKE from egressd's cgroup: %r" % mine)
        dns_ok(c, sb, "api.test", want=DNS_ZONE["api.test"])


def oci_state(c, tag):
    """A cgroup with a process in it (the container's init) and the state a
    runtime hands its createRuntime hook, annotated with a policy."""
    cg = c.mkcgroup(tag)
    CLEANUP.push("cgroup", cgroup_remove_tree, cg)
    bundle = os.path.join(c.work, "bundle-%s-%s" % (tag, RAND))
    os.makedirs(bundle, exist_ok=True)
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump({"ociVersion": "1.0.2", "linux": {"cgroupsPath": cg[len(c.cg_mount):]}}, f)
    init = subprocess.Popen(["sleep", "60"], preexec_fn=join_cgroup_fn(cg))
    CLEANUP.push("container init", lambda: (init.kill(), init.wait()))
    st = {"ociVersion": "1.0.2", "id": "c-%s-%s" % (tag, RAND), "status": "created",
          "pid": init.pid, "bundle": bundle,
          "annotations": {"io.egressd.policy": c.policy(["127.0.0.1:1"])}}
    return cg, st


def oci_hook(c, st, *opts):
    return subprocess.Popen([c.egressctl, "--socket", c.sock, "oci-hook", "--policy-dir", c.work]
                            + list(opts) + ["createRuntime"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@test
def restart_oci_hook_waits_for_egressd(c):
    """createRuntime during a restart waits for the new egressd (bounded, 10 s
    by default) and confines the container then, instead of failing its
    start; a hook started while egressd is down for longer than --wait
    fails, closed, and attaches nothing."""
    cg, st = oci_state(c, "ociwait")
    try:
        c.daemon.stop()
        t0 = time.monotonic()
        h = oci_hook(c, st)
        h.stdin.write(json.dumps(st))
        h.stdin.close()
        time.sleep(1.5)
        check(h.poll() is None, "createRuntime did not wait for egressd: exit %s %r" %
              (h.returncode, h.stderr.read()[-400:] if h.returncode is not None else ""))
        c.daemon.start()
        rc = h.wait(30)
        err = h.stderr.read()
        took = time.monotonic() - t0
        check(rc == 0, "createRuntime across the restart: exit %d %r" % (rc, err[-400:]))
        check(took < 10.5, "createRuntime took %.1f s: longer than its bound" % took)
        check(c.find_sandbox(cg) is not None, "createRuntime returned 0 but %s is not a "
              "sandbox" % cg)
        c.denied(cg, "tcp", "127.0.0.1", c.tcp("oci-wait").port)
        sb = c.find_sandbox(cg)
        c.ctl_ok("detach", "--id", str(sb["id"]))
        # Past the bound: fails closed, and says why.
        cg2, st2 = oci_state(c, "ociwait2")
        c.daemon.stop()
        t0 = time.monotonic()
        h = oci_hook(c, st2, "--wait", "1")
        out, err = h.communicate(json.dumps(st2), timeout=30)
        took = time.monotonic() - t0
        check(h.returncode != 0 and "not reachable" in err,
              "createRuntime past --wait 1: exit %d %r" % (h.returncode, err[-400:]))
        check(0.9 <= took < 5, "createRuntime --wait 1 gave up after %.1f s" % took)
        c.daemon.start()
        check(c.find_sandbox(cg2) is None, "a createRuntime that failed left %s attached" % cg2)
    finally:
        c.ensure_daemon()
        for g in (cg,):
            sb = c.find_sandbox(g)
            if sb:
                c.ctl("detach", "--id", str(sb["id"]))


class Manager:
    """The service manager's side of sd_notify (what systemd does with
    Type=notify and WatchdogSec=): a datagram socket egressd reports to,
    every message kept with its time and sender."""

    def __init__(self, c):
        self.path = os.path.join(c.work, "notify-%s.sock" % RAND)
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.s.bind(self.path)
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.s.settimeout(0.2)
        self.msgs, self.stop = [], False
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()
        CLEANUP.push("notify socket", self.close)

    def loop(self):
        import struct
        while not self.stop:
            try:
                msg, anc, _, _ = self.s.recvmsg(4096, socket.CMSG_SPACE(12))
            except socket.timeout:
                continue
            except OSError:
                return
            pid = 0
            for level, typ, data in anc:
                if level == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("iII", data[:12])[0]
            self.msgs.append((time.monotonic(), pid, msg.decode(errors="replace")))

    def saw(self, pid, what, since=0.0):
        return [t for t, p, m in self.msgs if p == pid and t >= since and what in m.split("\n")]

    def close(self):
        self.stop = True
        self.s.close()


@test
def restart_watchdog_hung_loop_loses_no_query(c):
    """READY=1 only once the previous egressd's listeners are in use again;
    WATCHDOG=1 from the loop stops when the loop hangs (SIGSTOP), the
    manager kills and restarts egressd as systemd's watchdog does, and no
    query sent since the hang began is lost or answered before its address
    is learned."""
    mgr = Manager(c)
    tg, sbctx = restart_sandbox(c, "rwd%s" % RAND, 250, 50)
    c.daemon.stop()
    c.daemon.env = {"NOTIFY_SOCKET": mgr.path, "WATCHDOG_USEC": "1000000"}
    try:
        c.daemon.start()
        pid = c.daemon.proc.pid
        check(wait_until(lambda: mgr.saw(pid, "READY=1"), 5, 0.05), "no READY=1 from %d" % pid)
        with sbctx as sb:
            res = Resolver(c, sb, tg.names[:250], tg.names[250:], tg.port)
            try:
                time.sleep(1.2)
                check(len(mgr.saw(pid, "WATCHDOG=1")) >= 2, "no WATCHDOG=1 every 500 ms: %r"
                      % mgr.msgs[-5:])
                hang = time.monotonic()
                os.kill(pid, __import__("signal").SIGSTOP)  # the loop hangs
                # The manager: no WATCHDOG=1 for WATCHDOG_USEC, then abort
                # (SIGABRT, then SIGKILL: a stopped process takes only that).
                check(wait_until(lambda: time.monotonic() - max(
                    [t for t in mgr.saw(pid, "WATCHDOG=1")] or [hang]) > 1.0, 5, 0.02),
                    "WATCHDOG=1 went on while the loop hung")
                late = mgr.saw(pid, "WATCHDOG=1", since=hang + 0.05)
                check(not late, "WATCHDOG=1 from a hung loop at %r" % late)
                mark = c.log_size()
                os.kill(pid, __import__("signal").SIGABRT)
                c.daemon.kill9()
                c.daemon.start()
                npid = c.daemon.proc.pid
                check(wait_until(lambda: mgr.saw(npid, "READY=1"), 5, 0.05),
                      "no READY=1 from the restarted egressd")
                time.sleep(0.6)
            finally:
                rows = res.finish()
            with open(c.daemon_log, "rb") as f:
                f.seek(mark)
                text = f.read().decode(errors="replace")
            used = [l for l in text.splitlines() if "handed-over socket(s) in use" in l]
            ready = text.find(" ready: ")
            check(used and 0 <= text.find(used[0]) < ready,
                  "the handed-over listeners were not in use before READY=1: %r" % used)
            check(int(used[0].split(":")[-1].split()[0]) >= 2,
                  "the restarted egressd reused none of the held listeners: %r" % used[0])
        # What the hung egressd had read dies with it (a second attempt
        # answers it); nothing sent since the hang began may be lost.
        rep = judge(rows, lambda r: r["sent"] >= hang, "across a watchdog restart")
        print("    restart_watchdog_hung_loop_loses_no_query: udp %s; tcp %s; %d lost (in "
              "flight at the hang), %d retried" % (rep["udp"], rep["tcp"], rep["lost"],
                                                  rep["retried"]), flush=True)
    finally:
        c.daemon.env = None
        c.daemon.stop()
        c.daemon.start()


@test
def restart_queued_queries_judged_by_policy(c):
    """Queries sent while no egressd runs are answered by the successor
    under the sandbox's policy: a name it allows resolves (and connects at
    once), a name it does not is refused and never reaches the upstream,
    over UDP and TCP alike."""
    need_dnsmasq(c)
    a = srv(c, "rst-api", "api.test")
    denied = "rstq-%s.denied.test" % RAND
    with c.sandbox(["api.test:%d" % a.port], extra_network=DNS_REBIND_LO) as sb:
        dns_ok(c, sb, "api.test", want=DNS_ZONE["api.test"])
        c.daemon.stop()
        got = {}

        def ask(key, mode, name):
            got[key] = dns_query(mode, "127.0.0.2", 53, name, "A", timeout=15, cg=sb.cg)
        ts = [threading.Thread(target=ask, args=(k, m, n)) for k, m, n in
              (("ok-udp", "udp", "api.test"), ("ok-tcp", "tcp", "api.test"),
               ("no-udp", "udp", denied), ("no-tcp", "tcp", "tcp-" + denied))]
        for t in ts:
            t.start()
        try:
            time.sleep(0.5)
            check(not got, "answers while no egressd ran: %r" % got)
            c.daemon.start()
        finally:
            for t in ts:
                t.join()
        for k in ("ok-udp", "ok-tcp"):
            check(got[k][0] == "NOERROR" and DNS_ZONE["api.test"] in got[k][1],
                  "%s queued during the restart: %r" % (k, got[k][3]))
        for k in ("no-udp", "no-tcp"):
            check(got[k][0] in ("NXDOMAIN", "REFUSED") and not got[k][1],
                  "%s (a name the policy refuses) queued during the restart: %r" %
                  (k, got[k][3]))
        sb.allowed("tcp", DNS_ZONE["api.test"], a.port)
    dns_not_upstream(c, "api.test", [denied, "tcp-" + denied])
