# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# The inspecting proxy under a hostile sandbox (issue 23): deny events have a
# per-sandbox budget (finding 10); every HTTP/1.x request and a TLS client's
# whole first flight are judged (the "documented limits"). Run by run.py
# (harness.runner).

import json
import socket
import threading
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)
from test_inspect import INS_ADDR, ins_client_hello, ins_events, ins_get_servers, ins_policy, ins_resolve

LIM_BUDGET_BURST = 200   # egressd's default --events-deny-burst (the harness keeps it)

# n requests with Host: argv[3], one connection each, 32 in flight; prints
# how many got the proxy's 403 and how many anything else.
LIM_FLOOD = r"""
import selectors, socket, sys
host, port, name, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
req = ("GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % name).encode()
sel = selectors.DefaultSelector()
started = refused = other = 0
def start():
    global started
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex((host, port))
    started += 1
    sel.register(s, selectors.EVENT_WRITE, [b"", False])
while started < min(32, n):
    start()
while sel.get_map():
    for key, ev in sel.select(10):
        s, st = key.fileobj, key.data
        done = False
        try:
            if ev & selectors.EVENT_WRITE and not st[1]:
                s.send(req)
                st[1] = True
                sel.modify(s, selectors.EVENT_READ, st)
                continue
            d = s.recv(4096)
            st[0] += d
            done = not d
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            done = True
        if done:
            sel.unregister(s)
            s.close()
            if st[0].startswith(b"HTTP/1.1 403"):
                refused += 1
            else:
                other += 1
            if started < n:
                start()
print(refused, other)
"""


def lim_policy(c, port):
    """api.test on a literal entry (no DNS needed), inspected."""
    return c.policy(["tcp/%s:%d" % (INS_ADDR, port)],
                    extra_network={"dns_allow": ["api.test"], "inspect": True,
                                   "dns_rebind_allow": ["127.0.0.0/8"]})


def lim_flood(sb, port, name, n):
    words = in_sandbox(sb.cg, LIM_FLOOD, INS_ADDR, port, name, n, timeout=120)
    check(words == [str(n), "0"], "%d requests with Host %s: %r refused/other (want all "
          "refused with a 403)" % (n, name, words))


def lim_denies(c, sid, kind="inspect"):
    return [e for e in obs_events(c, "--sandbox", str(sid))
            if e.get("type") == kind and e.get("verdict") == "deny"]


@test
def inspect_deny_events_budget_per_sandbox(c):
    _, web = ins_get_servers(c)
    victim_n, flood_n = 5, 5000
    with Sandbox(c, lim_policy(c, web.port)) as victim, \
            Sandbox(c, lim_policy(c, web.port)) as noisy:
        vid, nid = sandbox_id(c, victim), sandbox_id(c, noisy)
        lim_flood(victim, web.port, "victim-evil.rt", victim_n)
        check(len(lim_denies(c, vid)) == victim_n, "the victim's %d denies before the "
              "flood: %r" % (victim_n, lim_denies(c, vid)))
        # The attack: 5,000 refused requests from the neighbour.
        lim_flood(noisy, web.port, "evil.rt", flood_n)
        mine = lim_denies(c, vid)
        check(len(mine) == victim_n and all(e.get("name") == "victim-evil.rt" for e in mine),
              "after a neighbour's %d refused requests `events --sandbox %d` shows %d of "
              "the victim's %d denies" % (flood_n, vid, len(mine), victim_n))

        # Sanity twin: the neighbour's flood is accounted for, not lost: the
        # denies it got as events plus its summaries' count make 5,000.
        def settled():
            sums = lim_denies(c, nid, "denies_suppressed")
            total = max([e.get("suppressed_total", 0) for e in sums] or [0])
            return len(lim_denies(c, nid)) + total == flood_n
        check(wait_until(settled, 5, 0.2), "the neighbour's %d denies: %d events, summaries "
              "%r" % (flood_n, len(lim_denies(c, nid)),
                      lim_denies(c, nid, "denies_suppressed")[-3:]))
        sums = lim_denies(c, nid, "denies_suppressed")
        check(sums and all(e.get("origin") == "inspect" and
                           (e.get("last") or {}).get("name") == "evil.rt" and
                           (e.get("last") or {}).get("reason") == "name_not_allowed"
                           for e in sums),
              "the summaries do not name the refused host: %r" % sums[-2:])
        check(not lim_denies(c, vid, "denies_suppressed"), "the victim got a summary")


@test
def inspect_deny_events_below_budget_all_reported(c):
    _, web = ins_get_servers(c)
    n = LIM_BUDGET_BURST // 2
    with Sandbox(c, lim_policy(c, web.port)) as sb:
        sid = sandbox_id(c, sb)
        lim_flood(sb, web.port, "evil.rt", n)
        time.sleep(1.3)  # a summary would be out by now
        check(len(lim_denies(c, sid)) == n, "%d denies below the budget: %d events" %
              (n, len(lim_denies(c, sid))))
        check(not lim_denies(c, sid, "denies_suppressed"), "a summary below the budget: %r" %
              lim_denies(c, sid, "denies_suppressed"))


# --- every request head and the whole first flight are judged ---------------------
#
# The attacks of issue 23's "documented limits": a second request with a
# denied Host on a kept-alive connection, pipelined in the first segment,
# smuggled after Content-Length: 0 (or behind a framing two parsers read
# differently), an h2c upgrade, a second ClientHello in the first flight.
# A recording server on the allowed address says what reached it.

class RecServer:
    """Records what each connection sent. http: answers every request head
    (a blank line) with a 2-byte 200; else never answers."""

    def __init__(self, host, http):
        self.http, self.conns, self.lock = http, [], threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.loop, daemon=True).start()
        CLEANUP.push("recording server", self.sock.close)

    def loop(self):
        while True:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(s,), daemon=True).start()

    def serve(self, s):
        got = bytearray()
        with self.lock:
            self.conns.append(got)
        s.settimeout(5)
        answered = 0
        try:
            while True:
                d = s.recv(65536)
                if not d:
                    break
                got += d
                while self.http and got.count(b"\r\n\r\n") > answered:
                    answered += 1
                    s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        except OSError:
            pass
        finally:
            s.close()

    def seen(self):
        with self.lock:
            return b"".join(bytes(g) for g in self.conns)


# Steps (JSON): ["send", hex], ["recv"] (one response or what ended it),
# ["sleep", s]. Prints one word per recv: ok, 403, reset, eof, timeout.
LIM_STEPS = r"""
import json, socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
out, buf = [], b""
try:
    for st in json.loads(sys.argv[3]):
        if st[0] == "send":
            s.sendall(bytes.fromhex(st[1]))
        elif st[0] == "sleep":
            time.sleep(st[1])
        else:
            while not (b"\r\n\r\nok" in buf or b"refused" in buf or buf[:2] == b"\x15\x03"):
                x = s.recv(4096)
                if not x:
                    break
                buf += x
            if b"\r\n\r\nok" in buf:
                out.append("ok")
                buf = buf[buf.index(b"\r\n\r\nok") + 6:]
            else:
                out.append("403" if b" 403 " in buf else "alert" if buf[:2] == b"\x15\x03"
                           else "eof")
                buf = b""
except (ConnectionResetError, BrokenPipeError):
    out.append("reset")
except socket.timeout:
    out.append("timeout")
print(" ".join(out))
"""


def lim_steps(sb, port, steps):
    enc = [[st[0], st[1].hex() if isinstance(st[1], bytes) else st[1]] if len(st) > 1
           else list(st) for st in steps]
    return in_sandbox(sb.cg, LIM_STEPS, INS_ADDR, port, json.dumps(enc))


def lim_get(host, extra=""):
    return ("GET / HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (host, extra)).encode()


LIM_REFUSED = ("reset", "eof", "403", "alert")


def lim_refused(words, n_ok):
    """n_ok answers, then the refusal (a 403 before anything was relayed,
    else a reset or end)."""
    return (len(words) >= n_ok and all(w == "ok" for w in words[:n_ok]) and
            (len(words) == n_ok or words[n_ok] in LIM_REFUSED) and "ok" not in words[n_ok:])


def lim_http_case(c, sb, srv_, sid, label, steps, n_ok, reason, name="evil.test"):
    before = srv_.seen()
    words = lim_steps(sb, srv_.port, steps)
    got = srv_.seen()[len(before):]
    check(lim_refused(words, n_ok), "%s: the client saw %r (want %d answer(s), then a "
          "refusal)" % (label, words, n_ok))
    check(b"evil" not in got and b"h2c" not in got,
          "%s: the refused request reached the server: %r" % (label, got[-200:]))
    ins_events(c, sid, dict({"verdict": "deny", "reason": reason},
                            **({"name": name} if name is not None else {})))


@test
def inspect_every_http_request_judged(c):
    need_dnsmasq(c)
    srv_ = RecServer(INS_ADDR, http=True)
    with Sandbox(c, ins_policy(c, [srv_.port])) as sb:
        sid = sandbox_id(c, sb)
        ins_resolve(c, sb)
        ok, evil = lim_get("api.test"), lim_get("evil.test")
        # Sanity twins: what the attacks do, with allowed hosts, is relayed.
        twins = [
            ("keep-alive", [("send", ok), ("recv",), ("send", ok), ("recv",)]),
            ("pipelined", [("send", ok + ok), ("recv",), ("recv",)]),
            ("body then request", [("send", b"POST / HTTP/1.1\r\nHost: api.test\r\n"
                                    b"Content-Length: 5\r\n\r\nhello" + ok),
                                   ("recv",), ("recv",)]),
            ("chunked then request", [("send", b"POST / HTTP/1.1\r\nHost: api.test\r\n"
                                       b"Transfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n"
                                       b"0\r\nX-T: 1\r\n\r\n" + ok), ("recv",), ("recv",)]),
        ]
        for label, steps in twins:
            words = lim_steps(sb, srv_.port, steps)
            check(words == ["ok", "ok"], "twin %s: %r" % (label, words))
        check(srv_.seen().count(b"Host: api.test") == 2 * len(twins),
              "the twins' requests did not all reach the server")
        # The attacks.
        lim_http_case(c, sb, srv_, sid, "a second request on a kept-alive connection",
                      [("send", ok), ("recv",), ("send", evil), ("recv",)], 1,
                      "name_not_allowed")
        lim_http_case(c, sb, srv_, sid, "two pipelined requests in the first segment",
                      [("send", ok + evil), ("recv",)], 0, "name_not_allowed")
        lim_http_case(c, sb, srv_, sid, "a request smuggled after Content-Length: 0",
                      [("send", b"POST / HTTP/1.1\r\nHost: api.test\r\nContent-Length: 0"
                        b"\r\n\r\n" + evil), ("recv",)], 0, "name_not_allowed")
        lim_http_case(c, sb, srv_, sid, "a later smuggled request, after a chunked body",
                      [("send", ok), ("recv",),
                       ("send", b"POST / HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: "
                        b"chunked\r\n\r\n0\r\n\r\n" + evil), ("recv",), ("recv",)], 1,
                      "name_not_allowed")
        # Framings two parsers can read differently: refused whole.
        lim_http_case(c, sb, srv_, sid, "Content-Length with Transfer-Encoding",
                      [("send", b"POST / HTTP/1.1\r\nHost: api.test\r\nContent-Length: 4\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + evil), ("recv",)], 0,
                      "malformed_http", name="")
        lim_http_case(c, sb, srv_, sid, "an unknown Transfer-Encoding, later",
                      [("send", ok), ("recv",),
                       ("send", b"POST / HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: "
                        b"gzip, chunked\r\n\r\n0\r\n\r\n" + evil), ("recv",)], 1,
                      "malformed_http", name="api.test")
        lim_http_case(c, sb, srv_, sid, "an h2c upgrade",
                      [("send", lim_get("api.test", "Connection: Upgrade, HTTP2-Settings\r\n"
                                        "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAA"
                                        "\r\n")), ("recv",)], 0, "upgrade", name="api.test")
        lim_http_case(c, sb, srv_, sid, "an h2c upgrade as a later request",
                      [("send", ok), ("recv",),
                       ("send", lim_get("api.test", "Upgrade: h2c\r\n")), ("recv",)], 1,
                      "upgrade", name="api.test")


@test
def inspect_second_client_hello_refused(c):
    need_dnsmasq(c)
    srv_ = RecServer(INS_ADDR, http=False)
    with Sandbox(c, ins_policy(c, [srv_.port])) as sb:
        sid = sandbox_id(c, sb)
        ins_resolve(c, sb)
        ok, evil = ins_client_hello("api.test"), ins_client_hello("evil.test")
        ccs = b"\x14\x03\x03\x00\x01\x01"
        early = b"\x17\x03\x03\x00\x04abcd"
        # Sanity twin: a hello, a change cipher spec and early data pass.
        n = len(srv_.seen())
        words = lim_steps(sb, srv_.port, [("send", ok + ccs + early), ("sleep", 0.3)])
        check(wait_until(lambda: srv_.seen()[n:] == ok + ccs + early, 3),
              "the allowed first flight did not reach the server whole: %r %r" %
              (words, srv_.seen()[n:][-80:]))
        # The attack: a second ClientHello naming a denied host, in the same
        # segment, then in a later segment before the server spoke.
        for label, steps in (("same segment", [("send", ok + evil), ("recv",)]),
                             ("later segment", [("send", ok), ("sleep", 0.3),
                                                ("send", evil), ("recv",)])):
            n = len(srv_.seen())
            words = lim_steps(sb, srv_.port, steps)
            time.sleep(0.2)
            check(words and words[-1] in LIM_REFUSED, "%s: %r" % (label, words))
            check(b"evil" not in srv_.seen()[n:], "a second ClientHello (%s) reached the "
                  "server" % label)
            ins_events(c, sid, {"verdict": "deny", "reason": "second_hello",
                                "name": "api.test"})
