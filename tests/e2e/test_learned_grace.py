# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Learned addresses that match client behaviour (issue 27, item 2;
# docs/dns.md "Learned addresses and client caches"): a learned address
# lives max(TTL, --dns-min-ttl) + --dns-ttl-grace, and on while a socket of
# the sandbox is connected to it. Clients that cache an answer (a JVM: 30
# s, whatever the TTL) or keep a connection (a pool) and reconnect to the
# same address must never see EPERM for it; an address the sandbox never
# resolved, or one whose grace ran out with nothing connected, stays denied.
#
# Scaled down: egressd runs with --dns-min-ttl 3 --dns-ttl-grace 2 (the
# defaults are 30 and 30) against short.test's 2 s TTL, the JVM-like
# client caches 4 s (a JVM caches 30 s) and every client reconnects every
# 0.5 s for 12 s: the same logic as 60 s of reconnects every 3 s, past
# several expiries, in a fifth of the time.

import json
import subprocess
import sys
import time

from harness import *  # noqa: F401,F403

LG_MIN_TTL, LG_GRACE = 3, 2     # egressd flags for this test
# The JVM-like client's cache (networkaddress.cache.ttl), a little longer
# than --dns-min-ttl: the grace covers what the floor alone would not.
LG_CACHE_S = 4.0
LG_PERIOD_S, LG_RUN_S = 0.5, 12.0

# A client in a sandbox (python3 -c LG_CLIENT MODE NAME PORT ...): resolves
# with raw A queries to 127.0.0.2:53 (redirected to its proxy), then
#   jvm  CACHE PERIOD RUN   re-resolves when its cache is CACHE s old,
#                           connects (and closes) every PERIOD s for RUN s
#   pool PERIOD RUN         resolves once, holds one connection the whole
#                           time, opens (and closes) another every PERIOD s
#   once WAIT               resolves once, connects, closes, waits WAIT s
#                           with nothing open, connects again
#   addr ADDR               connects to ADDR, which it never resolved
# Prints one JSON line: ok, eperm, other (connect results), resolves.
LG_CLIENT = r"""
import errno, json, random, socket, struct, sys, time
mode, name, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
res = {"ok": 0, "eperm": 0, "other": [], "resolves": 0, "last": None}
def resolve():
    qid = random.getrandbits(16)
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", 1, 1)
    # As glibc's stub does: 5 s per attempt, 2 attempts (what is judged
    # here is EPERM, not how fast a loaded machine answers).
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    for attempt in (1, 2):
        s.sendto(q, ("127.0.0.2", 53))
        try:
            m = s.recv(4096)
            break
        except socket.timeout:
            if attempt == 2:
                raise
    s.close()
    an, i = struct.unpack(">H", m[6:8])[0], 12
    while m[i]:
        i += 1 + m[i]
    i += 5
    for _ in range(an):
        i += 2 if m[i] & 0xc0 == 0xc0 else m.index(b"\0", i) + 1 - i
        t, _c, _ttl, rdlen = struct.unpack(">HHIH", m[i:i + 10])
        i += 10
        if t == 1:
            res["resolves"] += 1
            return socket.inet_ntoa(m[i:i + 4])
        i += rdlen
    raise SystemExit("no A record for " + name)
def connect(addr, keep=False):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((addr, port))
        res["ok"] += 1
        res["last"] = "ok"
    except OSError as e:
        s.close()
        res["last"] = errno.errorcode.get(e.errno, str(e.errno))
        if e.errno == errno.EPERM:
            res["eperm"] += 1
        else:
            res["other"].append(res["last"])
        return None
    if keep:
        return s
    s.close()
if mode == "jvm":
    cache, period, run = map(float, sys.argv[4:7])
    end, at, addr = time.monotonic() + run, 0, None
    while time.monotonic() < end:
        if addr is None or time.monotonic() - at >= cache:
            addr, at = resolve(), time.monotonic()
        connect(addr)
        time.sleep(period)
elif mode == "pool":
    period, run = map(float, sys.argv[4:6])
    addr = resolve()
    held = connect(addr, keep=True)
    end = time.monotonic() + run
    while time.monotonic() < end:
        time.sleep(period)
        connect(addr)
    if held:
        held.close()
elif mode == "once":
    addr = resolve()
    connect(addr)
    time.sleep(float(sys.argv[4]))
    connect(addr)
elif mode == "addr":
    connect(sys.argv[4])
print(json.dumps(res), flush=True)
"""


def lg_start(sb, *args):
    p = subprocess.Popen([sys.executable, "-c", LG_CLIENT] + [str(a) for a in args],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=join_cgroup_fn(sb.cg))
    CLEANUP.push("learned-grace client", lambda: p.poll() is None and p.kill())
    return p


def lg_start_run(c, pol, *args):
    """The same client under `egressctl run` (a python its host uid can run)."""
    p = subprocess.Popen([c.egressctl, "--socket", c.sock, "run", "--policy", pol, "--",
                          "/usr/bin/python3", "-c", LG_CLIENT] + [str(a) for a in args],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    CLEANUP.push("learned-grace run", lambda: p.poll() is None and p.kill())
    return p


def lg_end(p, what):
    out, err = p.communicate(timeout=LG_RUN_S + 30)
    log("%s: %s %s" % (what, out.strip(), err.strip()[-300:]))
    check(p.returncode == 0 and out.strip(), "%s: exit %d: %s" % (what, p.returncode,
                                                               err.strip()[-300:]))
    return json.loads(out)


@test
def learned_cached_and_pooled_clients_never_see_eperm(c):
    """Clients that keep an address past its TTL: a JVM-like one that
    re-resolves only when its 4 s cache runs out, and a pool that resolves
    once and holds a connection while it opens others for 12 s. Before:
    the entry lived max(TTL, --dns-min-ttl) only, and both got EPERM once
    it passed. Now: 0 EPERM for both, and for the JVM-like one under
    `egressctl run`.
    Twins, at the same time in other sandboxes: an address of the same
    policy that the sandbox never resolved is denied, and an address whose
    TTL and grace ran out with no socket connected is denied again."""
    need_dnsmasq(c)
    s = srv(c, "lg-short", "short.test")
    a = srv(c, "lg-api", "api.test")
    ip, api_ip = DNS_ZONE["short.test"], DNS_ZONE["api.test"]
    pol = c.policy(["short.test:%d" % s.port, "api.test:%d" % a.port],
                   extra_network=DNS_REBIND_LO)
    old = list(c.daemon.extra_args)
    restart_daemon(c, old + ["--dns-min-ttl", str(LG_MIN_TTL),
                             "--dns-ttl-grace", str(LG_GRACE)])
    try:
        with Sandbox(c, pol, "lg-jvm") as jvm, Sandbox(c, pol, "lg-pool") as pool, \
                Sandbox(c, pol, "lg-once") as once:
            pj = lg_start(jvm, "jvm", "short.test", s.port, LG_CACHE_S, LG_PERIOD_S, LG_RUN_S)
            # The JVM-like client under `egressctl run` too (its own sandbox).
            pr = lg_start_run(c, pol, "jvm", "short.test", s.port, LG_CACHE_S, LG_PERIOD_S,
                              LG_RUN_S)
            pp = lg_start(pool, "pool", "short.test", s.port, LG_PERIOD_S, LG_RUN_S)
            # Past TTL 2 / min-ttl 3, grace 2 and the 1 s sweep: expired.
            wait = LG_MIN_TTL + LG_GRACE + 2.0
            po = lg_start(once, "once", "short.test", s.port, wait)
            never = lg_end(lg_start(once, "addr", "short.test", a.port, api_ip), "never resolved")
            never_run = lg_end(lg_start_run(c, pol, "addr", "short.test", a.port, api_ip),
                               "never resolved, under run")
            rj, rp, ro, rr = (lg_end(pj, "jvm-like"), lg_end(pp, "pool"),
                              lg_end(po, "grace ran out"), lg_end(pr, "jvm-like under run"))
        n = int(LG_RUN_S / LG_PERIOD_S)
        check(rj["eperm"] == 0 and not rj["other"] and rj["ok"] >= n * 0.8 and
              rj["resolves"] >= 3, "the JVM-like client: %r (want %d+ connects, 0 EPERM, "
              "a re-resolve every %.0f s)" % (rj, n * 0.8, LG_CACHE_S))
        check(rp["eperm"] == 0 and not rp["other"] and rp["ok"] >= n * 0.8 and
              rp["resolves"] == 1, "the pool, resolved once, holding a connection: %r (want "
              "%d+ connects, 0 EPERM)" % (rp, n * 0.8))
        check(rr["eperm"] == 0 and not rr["other"] and rr["ok"] >= n * 0.8,
              "the JVM-like client under run: %r" % rr)
        check(never["last"] == "EPERM", "an address the sandbox never resolved: %r" % never)
        check(never_run["last"] == "EPERM", "under run, an address never resolved: %r" %
              never_run)
        check(ro["ok"] == 1 and ro["last"] == "EPERM", "an address whose grace ran out with "
              "nothing connected: %r (want ok, then EPERM)" % ro)
    finally:
        restart_daemon(c, old)
