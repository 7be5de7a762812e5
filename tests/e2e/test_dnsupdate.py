# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# What the control side changes for a sandbox's DNS (a policy update, a
# detach) is in force the moment its reply is sent, for queries already
# upstream too (docs/dns.md; user/egressd/dns/dns_answer.c,
# refused_by_new_policy). A slow upstream keeps queries in flight; queries
# stay on loopback, every stream is bounded in time.
#
# Run by run.py (harness.runner).

import json
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)

TD_SLOW_MS = 400        # the slow upstream's delay: queries stay in flight that long
TD_SLOW_ADDR = "127.0.0.31"
TD_SLACK_S = 0.1        # a reply sent before t1 may be read by the client this much later


class TdSlowUpstream:
    """A dnsmasq (no cache) that serves api.test itself and forwards
    slow.test to a responder of this process answering after TD_SLOW_MS."""

    def __init__(self, c):
        self.hole = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.hole.bind(("127.0.0.1", 0))
        self.stop_ev = threading.Event()
        self.th = threading.Thread(target=self.answer_late, daemon=True)
        self.th.start()
        self.proc = None
        try:
            self.proc, self.port = spawn_forwarding_dnsmasq(
                c.work, "td", ["--cache-size=0", "--server=/slow.test/127.0.0.1#%d" %
                               self.hole.getsockname()[1]])
        except TestFailure:
            self.stop()
            raise

    def answer_late(self):
        due = []   # (time, peer, reply)
        while not self.stop_ev.is_set():
            wait = max(0.0, min([d[0] for d in due], default=time.monotonic() + 0.05) -
                       time.monotonic())
            r, _, _ = select.select([self.hole], [], [], min(wait, 0.05))
            if r:
                try:
                    q, peer = self.hole.recvfrom(4096)
                except OSError:
                    return
                if len(q) > 12:
                    end = q.index(b"\0", 12) + 5    # the question: name, type, class
                    reply = (q[:2] + struct.pack(">HHHHH", 0x8180, 1, 1, 0, 0) + q[12:end] +
                             struct.pack(">HHHIH", 0xc00c, 1, 1, 0, 4) +
                             socket.inet_aton(TD_SLOW_ADDR))
                    due.append((time.monotonic() + TD_SLOW_MS / 1000.0, peer, reply))
            now = time.monotonic()
            for d in [d for d in due if d[0] <= now]:
                due.remove(d)
                try:
                    self.hole.sendto(d[2], d[1])
                except OSError:
                    pass

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.stop_ev.set()
        self.th.join(5)
        self.hole.close()


def td_with_slow_upstream(c, fn):
    """fn(up) with egressd restarted on a TdSlowUpstream, then as it was."""
    need_dnsmasq(c)
    up = TdSlowUpstream(c)
    CLEANUP.push("slow dnsmasq", up.stop)
    saved = c.dns_args
    c.dns_args = ["--dns-upstream", "127.0.0.1:%d" % up.port, "--dns-min-ttl", str(DNS_MIN_TTL)]
    try:
        restart_daemon(c, list(c.daemon.extra_args))
        return fn(up)
    finally:
        c.dns_args = saved
        restart_daemon(c, list(c.daemon.extra_args))


def td_policy(c, names):
    # The zones answer loopback addresses: expected, not DNS rebinding.
    return c.policy([], extra_network=dict(DNS_REBIND_LO, dns_allow=list(names)))


# A dropped name is denied with the policy's dns_reject: NXDOMAIN by default.
NOERROR, NXDOMAIN = 0, 3


@test
def dnsupdate_races_queries_in_flight(c):
    """The attack: a tool keeps queries for a name in flight (a slow
    upstream) while its policy is narrowed to drop that name, hoping the
    answers already on their way are released and learned under the old
    policy. After the update's reply, no answer for the dropped name may be
    NOERROR — in flight or new. Sanity twin: the name kept resolves across
    the update without a single failure, and the dropped one resolved
    before it."""
    def body(up):
        with Sandbox(c, td_policy(c, ["api.test", "slow.test"]), "td-update") as sb:
            dns_ok(c, sb, "slow.test", want=TD_SLOW_ADDR)
            p = dns_stream_start(sb.cg, "udp", ["slow.test:A", "api.test:A"], 0.01, 2.0, 1.0)
            time.sleep(1.0)
            t0 = time.monotonic()
            sb.update(td_policy(c, ["api.test"]))
            t1 = time.monotonic()
            qs = dns_stream_end(p)[0]
            st = c.find_sandbox(sb.cg)
        return qs, t0, t1, st

    qs, t0, t1, st = td_with_slow_upstream(c, body)
    slow = [q for q in qs if q["name"] == "slow.test"]
    api = [q for q in qs if q["name"] == "api.test"]
    log("update took %.1f ms; %d slow.test, %d api.test queries" %
        ((t1 - t0) * 1000, len(slow), len(api)))
    check(len(slow) > 50 and len(api) > 50, "the stream sent too little: %d/%d" %
          (len(slow), len(api)))
    # Sanity: the dropped name resolved before the update.
    before = [q for q in slow if q["got"] is not None and q["got"] < t0]
    check(any(q["rcode"] == NOERROR for q in before),
          "slow.test never resolved before the update (the test proves nothing): %r" %
          before[:3])
    late_ok = [q for q in slow if q["rcode"] == NOERROR and q["got"] > t1 + TD_SLACK_S]
    check(not late_ok, "%d answer(s) for the dropped name were released after the update's "
          "reply, the last %.1f ms after it: %r" %
          (len(late_ok), (max(q["got"] for q in late_ok) - t1) * 1000 if late_ok else 0,
           late_ok[:3]))
    # The queries that were upstream at the update were answered, denied
    # (NXDOMAIN): judged again, not dropped and not released.
    inflight = [q for q in slow if q["sent"] < t0 and (q["got"] is None or
                                                       q["got"] > t1 + TD_SLACK_S)]
    check(inflight, "no slow.test query was in flight at the update (the race was not run)")
    for q in inflight:
        check(q["rcode"] == NXDOMAIN, "a query in flight at the update got %r (want NXDOMAIN): "
              "%r" % (q["rcode"], q))
    after = [q for q in slow if q["sent"] > t1]
    check(after and all(q["rcode"] == NXDOMAIN for q in after),
          "slow.test queries sent after the update were not all NXDOMAIN: %r" %
          [q for q in after if q["rcode"] != NXDOMAIN][:3])
    # Twin: the name kept never failed, before, during or after.
    bad = [q for q in api if q["rcode"] != NOERROR]
    check(not bad, "%d api.test queries failed across the update: %r" % (len(bad), bad[:3]))
    check(any(q["sent"] > t1 for q in api), "no api.test query after the update")
    proxy = (st.get("dns") or {}).get("proxy") or {}
    check(proxy.get("refused", 0) >= len(inflight) + len(after),
          "the proxy's refused count %r is below the refusals seen (%d)" %
          (proxy.get("refused"), len(inflight) + len(after)))


@test
def dnsupdate_detach_with_queries_in_flight(c):
    """The attack: detach (or the sandbox's end) while its queries are in
    flight upstream, hoping for a use after free of its
    listener or queries, or an answer released after it is gone. egressd
    must stay up, send nothing after the detach's reply, and go on serving
    others. Sanity twin: the stream was answered before the detach, and a
    new sandbox resolves after it."""
    def body(up):
        sb = Sandbox(c, td_policy(c, ["api.test", "slow.test"]), "td-detach")
        with sb:
            # Detached once a slow.test answer came (TD_SLOW_MS after its
            # query; under ASan on a loaded machine once over a second),
            # with the stream's later slow.test queries then in flight.
            p = dns_stream_start(sb.cg, "udp", ["slow.test:A", "api.test:A"], 0.005,
                                 3.0 * TIME_SCALE, 1.0)
            first = dns_stream_wait(p, "slow.test", 2.4 * TIME_SCALE)
            check(first == NOERROR, "no slow.test answer before the detach within %.1f s: "
                  "%r (proves nothing)" % (2.4 * TIME_SCALE, first))
            time.sleep(TD_SLOW_MS / 2000.0)
            t0 = time.monotonic()
            sb.detach()
            t1 = time.monotonic()
            qs = dns_stream_end(p)[0]
        check(c.daemon.alive(), "egressd died after the detach with queries in flight")
        r = c.ctl("status")
        check(r.returncode in (0, 5), "status after the detach: exit %d %s" %
              (r.returncode, r.stderr.strip()))
        with Sandbox(c, td_policy(c, ["api.test", "slow.test"]), "td-after") as sb2:
            dns_ok(c, sb2, "api.test", want=DNS_ZONE["api.test"])
            dns_ok(c, sb2, "slow.test", want=TD_SLOW_ADDR)
        return qs, t0, t1

    qs, t0, t1 = td_with_slow_upstream(c, body)
    answered = [q for q in qs if q["got"] is not None]
    check(any(q["rcode"] == NOERROR and q["name"] == "slow.test" and q["got"] < t0
              for q in answered), "no slow.test answer before the detach (proves nothing)")
    inflight = [q for q in qs if q["name"] == "slow.test" and
                t0 - TD_SLOW_MS / 1000.0 + 0.05 < q["sent"] < t0]
    check(inflight, "no slow.test query was in flight at the detach")
    late = [q for q in answered if q["got"] > t1 + TD_SLACK_S]
    check(not late, "%d answer(s) reached the detached sandbox after the detach's reply: %r"
          % (len(late), late[:3]))
    check(c.daemon.alive(), "egressd is not running")
