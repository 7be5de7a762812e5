# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Inspection of device sandboxes (issue 25 item 3; docs/inspect.md "Device sandboxes").

The topology of test_netdev.py (G the guest, H the host side with the
confined device vh, S the servers). Under network.inspect every TCP packet
the allowlist allows from G is rewritten by vh's program to the sandbox's
inspecting listener (bound to vh's address and to vh in H), which judges the
TLS SNI or HTTP Host against the names the guest resolved, dials the real
destination and relays; the listener's packets go back to G with the real
destination as their source. What reached S is what S's servers recorded
(every connection's first bytes), never the guest's own view; every refusal
has a twin doing the allowed thing the same way.
"""
import json
import os
import select
import struct
import subprocess
import sys
import time

from harness import *
from harness.dns import dns_query
from harness.metering import stats
from test_netdev import G_IP, H_IP, S_IP, S_IP2, S_IP6, Topo, nd_attach, nd_detach, nd_policy

TAG = RUN_ID[-6:].lower()
NAME_A = "ndia-%s.test" % TAG      # -> S_IP
NAME_B = "ndib-%s.test" % TAG      # -> S_IP2: allowed, at another address
NAME_A6 = "ndia6-%s.test" % TAG    # -> S_IP6 (AAAA)
REBIND_OK = {"dns_rebind_allow": ["10.78.0.0/24", "fd78::/64"]}

# In S: TCP servers that record each connection's peer and first bytes (up
# to a whole TLS record or HTTP head) and answer "S-REPLY" (an HTTP response
# for HTTP). "dump" prints and clears what they recorded.
SERVER = r"""
import json, socket, sys, threading
seen, lock = [], threading.Lock()
def whole(b):
    if b[:1] == b"\x16" and len(b) >= 5:
        return len(b) >= 5 + int.from_bytes(b[3:5], "big")
    return b"\r\n\r\n" in b
def serve(c, name, peer):
    c.settimeout(4); b = b""
    try:
        while not whole(b):
            d = c.recv(65536)
            if not d: break
            b += d
        if b[:1] == b"\x16":
            c.sendall(b"S-REPLY")
        else:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nS-REPLY")
    except OSError:
        pass
    with lock: seen.append({"dst": name, "peer": peer[0], "data": b.decode("latin-1")})
    c.close()
def tcp(host, port):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port)); s.listen(64)
    name = ("[%s]:%d" if ":" in host else "%s:%d") % (host, port)
    def loop():
        while True:
            c, a = s.accept(); threading.Thread(target=serve, args=(c, name, a), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()
for h, p in (("10.78.0.2", 443), ("10.78.0.2", 80), ("10.78.0.3", 443), ("fd78::2", 443)):
    tcp(h, p)
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() != "dump": break
    with lock: print(json.dumps(seen), flush=True); del seen[:]
"""

# In G: connect to argv[1]:argv[2], send the hex bytes argv[3] (in two TCP
# segments split at byte argv[4], 300 ms apart, when it is not 0), then
# print what came back: "reply:TEXT", "eof", "alert" (TLS access_denied),
# "reset", "timeout" or "error-NAME".
GUEST = r"""
import socket, sys, time
host, port, data, split = sys.argv[1], int(sys.argv[2]), bytes.fromhex(sys.argv[3]), int(sys.argv[4])
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
try:
    s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.connect((host, port))
    if split:
        s.sendall(data[:split]); time.sleep(0.3); s.sendall(data[split:])
    else:
        s.sendall(data)
    d = s.recv(4096)
    if not d: print("eof")
    elif d == bytes.fromhex("15030300020231"): print("alert")
    else: print("reply:" + d.decode("latin-1").replace("\r\n", "|"))
except (ConnectionResetError, BrokenPipeError):
    print("reset")
except socket.timeout:
    print("timeout")
except OSError as e:
    print("error-" + type(e).__name__)
"""


def client_hello(name, pad=0):
    """A TLS 1.3-shaped ClientHello with SNI name and pad bytes of padding
    extension (a large post-quantum key share's size, so that it spans
    segments)."""
    n = name.encode()
    exts = struct.pack("!HHHBH", 0, len(n) + 5, len(n) + 3, 0, len(n)) + n
    if pad:
        exts += struct.pack("!HH", 21, pad) + b"\0" * pad
    body = (b"\x03\x03" + b"\x11" * 32 + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00" +
            struct.pack("!H", len(exts)) + exts)
    hs = b"\x01" + struct.pack("!I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack("!H", len(hs)) + hs


def http_get(host):
    return ("GET /nd HTTP/1.1\r\nHost: %s\r\nUser-Agent: nd-%s\r\n\r\n" % (host, TAG)).encode()


class Servers:
    def __init__(self, topo):
        self.proc = subprocess.Popen(["ip", "netns", "exec", topo.s, sys.executable, "-c",
                                      SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        CLEANUP.push("netdev inspect servers", self.close)
        check(self._line(10) == "ready", "the TLS/HTTP servers in S did not start")

    def _line(self, timeout):
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return self.proc.stdout.readline().strip() if r else ""

    def dump(self, settle=0.3):
        time.sleep(settle)
        self.proc.stdin.write("dump\n")
        self.proc.stdin.flush()
        line = self._line(10)
        check(line, "the servers in S did not answer")
        return json.loads(line)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def send(topo, host, port, data, split=0):
    r = run(["ip", "netns", "exec", topo.g, sys.executable, "-c", GUEST, host, str(port),
             data.hex(), str(split)], timeout=30)
    if r.returncode:
        raise TestFailure("guest send: exit %d: %s" % (r.returncode, r.stderr[-400:]))
    return r.stdout.strip()


def reached(dump, dst, needle):
    return [d for d in dump if d["dst"] == dst and needle in d["data"]]


def resolve(c, topo, name, qtype="A"):
    """G asks any resolver address: the device's DNS proxy answers (and
    learns the address for the name)."""
    rc, addrs, _, line = dns_query("udp", "10.78.0.3" if qtype == "A" else "fd78::3", 53, name,
                                   qtype, timeout=3.0, netns="/run/netns/" + topo.g)
    check(rc == "NOERROR" and addrs, "G resolving %s %s: %s" % (name, qtype, line))


def inspect_port(c, sid):
    s = [x for x in c.list_json() if x["id"] == sid]
    check(s, "sandbox %d not listed" % sid)
    return (s[0].get("inspect") or {}).get("port4")


def events(c, sid, want, timeout=3):
    found = []

    def seen():
        found[:] = [e for e in obs_events(c, "--sandbox", str(sid))
                    if e.get("type") == "inspect" and all(e.get(k) == v for k, v in want.items())]
        return bool(found)

    check(wait_until(seen, timeout, 0.1), "no inspect event %r for sandbox %d: %r" %
          (want, sid, [e for e in obs_events(c, "--sandbox", str(sid))
                       if e.get("type") == "inspect"][-6:]))
    return found[-1]


_added = []


def names(c):
    dm = need_dnsmasq(c)
    if not _added:
        dm.add_host(NAME_A, S_IP)
        dm.add_host(NAME_B, S_IP2)
        dm.add_host(NAME_A6, S_IP6)
        _added.append(True)


def ins_policy(c):
    return nd_policy(c, ["tcp/%s:443" % NAME_A, "tcp/%s:80" % NAME_A, "tcp/%s:443" % NAME_B,
                         "tcp/%s:443" % NAME_A6],
                     extra_network=dict(REBIND_OK, inspect=True))


def sb_row(c, sid):
    for row in stats(c)["sandboxes"]:
        if row["id"] == sid:
            return row
    raise TestFailure("`stats` has no row for sandbox %d" % sid)


@test
def netdev_inspect_sni_host_split_and_fronting(c):
    names(c)
    with Topo() as topo:
        srv = Servers(topo)
        pol = ins_policy(c)
        sb = nd_attach(c, topo, pol)
        sid = sb["id"]
        try:
            port4 = inspect_port(c, sid)
            check(port4, "`list --json` shows no inspect listener for the device")
            # The allowlist judges first: before G resolved, nothing passes.
            check(send(topo, S_IP, 443, client_hello(NAME_A)) in ("timeout", "error-TimeoutError"),
                  "an unresolved address was reached")
            for n in (NAME_A, NAME_B):
                resolve(c, topo, n)
            resolve(c, topo, NAME_A6, "AAAA")
            before = sb_row(c, sid)
            # TLS: the allowed SNI reaches S (and S's answer comes back from
            # the address G dialled); the fronted ones never do.
            hello = client_hello(NAME_A)
            out = send(topo, S_IP, 443, hello)
            check(out == "reply:S-REPLY", "allowed SNI %s: %s" % (NAME_A, out))
            dump = srv.dump()
            check(reached(dump, "%s:443" % S_IP, NAME_A), "S did not see the allowed hello")
            ev = events(c, sid, {"verdict": "allow", "name": NAME_A, "proto": "tls",
                                 "addr": S_IP, "port": 443})
            check(ev.get("sandbox") == sid and ev.get("tenant") == json.load(open(pol))["tenant"],
                  "the allow event names another sandbox or tenant: %r" % ev)
            for bad, reason in ((NAME_B, "address_mismatch"), ("evil-%s.test" % TAG,
                                                               "name_not_allowed")):
                out = send(topo, S_IP, 443, client_hello(bad))
                check(out in ("alert", "reset", "eof"), "fronted SNI %s: %s" % (bad, out))
                events(c, sid, {"verdict": "deny", "name": bad, "reason": reason,
                                "addr": S_IP, "port": 443})
            check(not srv.dump(), "a fronted hello reached S")
            # The name allowed elsewhere, where it is allowed: passes.
            out = send(topo, S_IP2, 443, client_hello(NAME_B))
            check(out == "reply:S-REPLY" and reached(srv.dump(), "%s:443" % S_IP2, NAME_B),
                  "SNI %s to its own address: %s" % (NAME_B, out))
            # A ClientHello over two TCP segments (a post-quantum key share's
            # size): judged whole, allowed and refused alike.
            big = client_hello(NAME_A, pad=1400)
            out = send(topo, S_IP, 443, big, split=60)
            check(out == "reply:S-REPLY", "split hello, allowed SNI: %s" % out)
            got = reached(srv.dump(), "%s:443" % S_IP, NAME_A)
            check(got and len(got[0]["data"]) == len(big), "S got %r of %d bytes" %
                  ([len(g["data"]) for g in got], len(big)))
            out = send(topo, S_IP, 443, client_hello(NAME_B, pad=1400), split=60)
            check(out in ("alert", "reset", "eof"), "split hello, fronted SNI: %s" % out)
            check(not srv.dump(), "a split fronted hello reached S")
            # HTTP Host, the same.
            out = send(topo, S_IP, 80, http_get(NAME_A))
            check(out.startswith("reply:HTTP/1.1 200") and
                  reached(srv.dump(), "%s:80" % S_IP, "Host: %s" % NAME_A),
                  "allowed Host %s: %s" % (NAME_A, out))
            out = send(topo, S_IP, 80, http_get(NAME_B))
            check(out.startswith("reply:HTTP/1.1 403"), "fronted Host %s: %s" % (NAME_B, out))
            events(c, sid, {"verdict": "deny", "name": NAME_B, "proto": "http"})
            check(not srv.dump(), "a fronted HTTP request reached S")
            # IPv6, through [fd77::1]'s listener.
            out = send(topo, S_IP6, 443, client_hello(NAME_A6))
            check(out == "reply:S-REPLY" and reached(srv.dump(), "[%s]:443" % S_IP6, NAME_A6),
                  "IPv6 allowed SNI: %s" % out)
            out = send(topo, S_IP6, 443, client_hello(NAME_A))
            check(out in ("alert", "reset", "eof") and not srv.dump(),
                  "IPv6 fronted SNI: %s" % out)
            # The listener itself (it is there, listening on vh's address:
            # ss says so): a guest connecting to it straight is dropped on
            # vh. The twin is every allowed connection above, which the
            # rewrite brought to the same socket.
            r = run(["ip", "netns", "exec", topo.h, "ss", "-Hltn", "src",
                     "%s:%d" % (H_IP, port4)])
            check("%s%%vh:%d" % (H_IP, port4) in r.stdout, "no listener on %s:%d (vh) in H: %r" %
                  (H_IP, port4, r.stdout))
            out = send(topo, H_IP, port4, client_hello(NAME_A))
            check(out in ("timeout", "error-TimeoutError"), "G reached the listener: %s" % out)
            # Meters: the sandbox's packets to the proxy are its egress.
            after = sb_row(c, sid)
            check(after["bytes_out"] > before["bytes_out"] + len(big) and
                  after["bytes_in"] > before["bytes_in"], "meters: %r -> %r" % (before, after))
        finally:
            nd_detach(c, topo)
        rec = [r for r in obs_audit(c) if r.get("sandbox") == sid and
               r.get("type") == "execution"]
        check(rec, "no execution record for sandbox %d" % sid)
        dests = [e for e in rec[-1].get("egress") or [] if e.get("inspected")]
        check(any(e.get("host") == NAME_A and e.get("dest") == "%s:443" % S_IP and
                  e.get("bytes_out", 0) >= len(big) for e in dests),
              "the record's inspected egress: %r" % dests)
        check(not any(e.get("port") == port4 for e in rec[-1].get("egress") or []),
              "the listener shows as a destination")


@test
def netdev_inspect_quic_restart_and_update(c):
    names(c)
    with Topo() as topo:
        srv = Servers(topo)
        sb = nd_attach(c, topo, nd_policy(c, ["tcp/%s:443" % NAME_A, "udp/%s:443" % S_IP,
                                              "udp/%s:9000" % S_IP],
                                          extra_network=dict(REBIND_OK, inspect=True)))
        sid = sb["id"]
        try:
            resolve(c, topo, NAME_A)
            # QUIC (UDP 443) dropped under inspection, other UDP as allowed:
            # S's capture says which arrived.
            topo.frames(0)
            topo.guest("udp", "ND-q1", S_IP, "443")
            topo.guest("udp", "ND-q2", S_IP, "9000")
            fr = topo.frames()
            check(not topo.arrived("ND-q1", fr), "UDP 443 passed under inspection")
            check(topo.arrived("ND-q2", fr), "UDP 9000 (allowed, not QUIC) did not arrive")
            check(send(topo, S_IP, 443, client_hello(NAME_A)) == "reply:S-REPLY",
                  "inspected TLS before the restart")
            srv.dump()
            port4 = inspect_port(c, sid)
            c.daemon.stop()
            c.daemon.start()
            # The same listener (held across the restart) on the same port:
            # the pinned programs rewrite to it, and it still inspects. The
            # successor does not know which name the address was learned
            # for (docs/inspect.md): G resolves again first.
            check(inspect_port(c, sid) == port4, "the listener's port changed across a restart")
            resolve(c, topo, NAME_A)
            out = send(topo, S_IP, 443, client_hello(NAME_A))
            check(out == "reply:S-REPLY", "allowed SNI after the restart: %s" % out)
            out = send(topo, S_IP, 443, client_hello("evil-%s.test" % TAG))
            check(out in ("alert", "reset", "eof"), "fronted SNI after the restart: %s" % out)
            dump = srv.dump()
            check(reached(dump, "%s:443" % S_IP, NAME_A) and
                  not reached(dump, "%s:443" % S_IP, "evil-"), "S after the restart: %r" %
                  [d["data"][-40:] for d in dump])
            # The proxy dialled S from H (10.78.0.1), not the guest.
            check({d["peer"] for d in dump} == {"10.78.0.1"}, "peers: %r" % dump)
            # An update turning inspection off: the same fronted hello now
            # reaches S straight from G (the twin: inspection is what
            # refused it); on again: refused again, a listener again.
            pol = ["tcp/%s:443" % NAME_A, "udp/%s:443" % S_IP, "udp/%s:9000" % S_IP]
            c.ctl_ok("update", "--netdev", "vh", "--netns", topo.netns, "--policy",
                     nd_policy(c, pol, extra_network=REBIND_OK))
            check(not inspect_port(c, sid), "a listener after inspection was turned off")
            resolve(c, topo, NAME_A)
            out = send(topo, S_IP, 443, client_hello("evil-%s.test" % TAG))
            dump = srv.dump()
            check(out == "reply:S-REPLY" and [d for d in dump if d["peer"] == G_IP],
                  "uninspected after the update: %s %r" % (out, dump))
            c.ctl_ok("update", "--netdev", "vh", "--netns", topo.netns, "--policy",
                     nd_policy(c, pol, extra_network=dict(REBIND_OK, inspect=True)))
            check(inspect_port(c, sid), "no listener after inspection was turned on again")
            resolve(c, topo, NAME_A)
            out = send(topo, S_IP, 443, client_hello("evil-%s.test" % TAG))
            check(out in ("alert", "reset", "eof") and not srv.dump(),
                  "fronted SNI after inspection was turned on again: %s" % out)
            out = send(topo, S_IP, 443, client_hello(NAME_A))
            dump = srv.dump()
            check(out == "reply:S-REPLY" and [d for d in dump if d["peer"] == "10.78.0.1"],
                  "allowed SNI after inspection was turned on again: %s %r" % (out, dump))
        finally:
            nd_detach(c, topo)
