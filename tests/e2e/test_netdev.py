# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Device sandboxes (issue 25, docs/architecture.md "Device sandboxes").

Three network namespaces of the test's own stand for a VM and its host:

    G (the guest: a microVM's kernel, gVisor's stack)   vg 10.77.0.2, fd77::2
      | veth
    H (the host side: the device vh egressd confines)  vh 10.77.0.1, fd77::1
      | veth, H forwards                                 hs 10.78.0.1, fd78::1
    S (the servers)                                      sh 10.78.0.2 + .3, fd78::2

`egressctl attach --netdev vh --netns /run/netns/H` makes vh a sandbox. Traffic
comes from inside G (plain sockets, or frames crafted with AF_PACKET as a
guest kernel could send them); what arrives is checked in S, on the wire
(an AF_PACKET capture of sh: what H forwarded), never by the sender's errors.
A frame's twin (the same frame while nothing is attached, or the clean frame
while attached) arrives, so that a vector's "never arrives" is not a frame
the test could not send.
"""
import json
import os
import select
import subprocess
import sys
import time

from harness import *
from harness.dns import dns_query, need_dnsmasq
from harness.metering import stats

G_IP, H_IP, S_IP, S_IP2 = "10.77.0.2", "10.77.0.1", "10.78.0.2", "10.78.0.3"
G_IP6, S_IP6 = "fd77::2", "fd78::2"

# In S: TCP and UDP servers, and a capture of sh. Commands on stdin, one
# JSON answer a line: "dump" (frames seen since the last dump), "tcp"
# (bytes each TCP server received), "quit".
SERVER = r"""
import json, socket, struct, sys, threading
seen, tcp_bytes, lock = [], {}, threading.Lock()
def tcp(host, port):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port)); s.listen(64)
    def conn(c):
        while True:
            b = c.recv(65536)
            if not b: break
            with lock: tcp_bytes["%s:%d" % (host, port)] = tcp_bytes.get("%s:%d" % (host, port), 0) + len(b)
        c.close()
    def loop():
        while True:
            c, _ = s.accept(); threading.Thread(target=conn, args=(c,), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()
def udp(host, port):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM); s.bind((host, port))
    def loop():
        while True:
            b, a = s.recvfrom(65536); s.sendto(b, a)
    threading.Thread(target=loop, daemon=True).start()
def parse(f, out):
    et = struct.unpack("!H", f[12:14])[0]; p = f[14:]
    r = {"out": out, "marker": None}
    i = f.find(b"ND-")
    if i >= 0: r["marker"] = f[i:i + 24].split(b".")[0].decode(errors="replace")
    if et == 0x0800 and len(p) >= 20:
        ihl = (p[0] & 15) * 4; r.update(v=4, proto=p[9], len=struct.unpack("!H", p[2:4])[0],
            src=socket.inet_ntop(socket.AF_INET, p[12:16]), dst=socket.inet_ntop(socket.AF_INET, p[16:20]))
        if p[9] in (6, 17) and len(p) >= ihl + 4 and not (struct.unpack("!H", p[6:8])[0] & 0x1fff):
            r["sport"], r["dport"] = struct.unpack("!HH", p[ihl:ihl + 4])
    elif et == 0x86dd and len(p) >= 40:
        r.update(v=6, proto=p[6], len=40 + struct.unpack("!H", p[4:6])[0],
            src=socket.inet_ntop(socket.AF_INET6, p[8:24]), dst=socket.inet_ntop(socket.AF_INET6, p[24:40]))
    else:
        r["ethertype"] = et
    return r
def cap():
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)); s.bind(("sh", 0))
    while True:
        f, a = s.recvfrom(70000)
        with lock: seen.append(parse(f, a[2] == 4))
for h in ("10.78.0.2", "fd78::2"):
    for p in (8000, 8001): tcp(h, p)
    for p in (8000, 9000, 9001): udp(h, p)
tcp("10.78.0.3", 8000); udp("10.78.0.3", 53); udp("10.78.0.3", 5353); tcp("10.78.0.3", 53)
threading.Thread(target=cap, daemon=True).start()
print("ready", flush=True)
for line in sys.stdin:
    cmd = line.strip()
    with lock:
        if cmd == "dump": print(json.dumps(seen), flush=True); del seen[:]
        elif cmd == "tcp": print(json.dumps(tcp_bytes), flush=True)
        else: break
"""

# In G: one action per run, its outcome on stdout. Frames go out of vg with
# the host side's MAC (argv[1]) as destination.
GUEST = r"""
import json, socket, struct, sys
act, hmac = sys.argv[1], bytes.fromhex(sys.argv[2].replace(":", ""))
args = sys.argv[3:]
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b)); s = (s >> 16) + (s & 0xffff); s += s >> 16
    return (~s) & 0xffff
def ip4(src, dst, proto, payload, opts=b"", frag=0, ident=4242):
    ihl = 5 + len(opts) // 4
    h = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, ihl * 4 + len(payload), ident, frag, 64, proto, 0,
                    socket.inet_aton(src), socket.inet_aton(dst)) + opts
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return h + payload
def udp4(src, dst, dport, data):
    u = struct.pack("!HHHH", 40000, dport, 8 + len(data), 0) + data
    return ip4(src, dst, 17, u)
def ip6(src, dst, nh, payload, ext=b""):
    return struct.pack("!IHBB16s16s", 6 << 28, len(ext) + len(payload), nh, 64,
                       socket.inet_pton(socket.AF_INET6, src), socket.inet_pton(socket.AF_INET6, dst)) + ext + payload
def udp6(src, dst, dport, data):
    l = 8 + len(data)
    ph = socket.inet_pton(socket.AF_INET6, src) + socket.inet_pton(socket.AF_INET6, dst) + struct.pack("!IxxxB", l, 17)
    u = struct.pack("!HHHH", 40000, dport, l, 0) + data
    c = csum(ph + u) or 0xffff
    return u[:6] + struct.pack("!H", c) + u[8:]
def send(frame_body, ethertype, dev="vg", tag=None):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind((dev, 0))
    gmac = s.getsockname()[4]
    if tag is not None:
        hdr = hmac + gmac + struct.pack("!HH", 0x8100, tag) + struct.pack("!H", ethertype)
    else:
        hdr = hmac + gmac + struct.pack("!H", ethertype)
    s.send(hdr + frame_body); s.close()
m = args[0].encode() + b"." if args else b""
G, S, S2, G6, S6 = "10.77.0.2", "10.78.0.2", "10.78.0.3", "fd77::2", "fd78::2"
if act == "tcp":          # host port nbytes: connect, send, the outcome
    host, port, n = args[1], int(args[2]), int(args[3])
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(3)
    try:
        s.connect((host, port)); s.sendall(m + b"x" * n); s.shutdown(socket.SHUT_WR)
        s.recv(1); print("ok")
    except OSError as e:
        print("err", e.__class__.__name__)
elif act == "udp":        # host port: a datagram, and its echo
    host, port = args[1], int(args[2])
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(2)
    try:
        s.sendto(m + b"u" * 100, (host, port)); s.recvfrom(2000); print("ok")
    except OSError as e:
        print("err", e.__class__.__name__)
elif act == "raw_clean":  send(udp4(G, S, 9000, m), 0x0800)
elif act == "raw_spoof":  send(udp4("10.77.0.9", S, 9000, m), 0x0800)
elif act == "raw_spoof_host": send(udp4("10.78.0.1", S, 9000, m), 0x0800)
elif act == "raw_options":
    u = struct.pack("!HHHH", 40000, 9000, 8 + len(m), 0) + m
    send(ip4(G, S, 17, u, opts=b"\x01\x01\x01\x00"), 0x0800)
elif act == "raw_frag":
    data = m + b"f" * 40
    u = struct.pack("!HHHH", 40000, 9000, 8 + len(data), 0) + data
    send(ip4(G, S, 17, u[:24], frag=0x2000, ident=777), 0x0800)
    send(ip4(G, S, 17, u[24:], frag=3, ident=777), 0x0800)
elif act == "raw_proto":  send(ip4(G, S, 47, m + b"\0" * 8), 0x0800)
elif act == "raw_vlan":   send(udp4(G, S, 9000, m), 0x0800, tag=100)
elif act == "raw_ethertype": send(m + b"\0" * 40, 0x88b5)
elif act == "raw6_clean": send(ip6(G6, S6, 17, udp6(G6, S6, 9000, m)), 0x86dd)
elif act == "raw6_spoof": send(ip6("fd77::9", S6, 17, udp6("fd77::9", S6, 9000, m)), 0x86dd)
elif act == "raw6_frag":  # one datagram in two fragments (fragment header, 44)
    u = udp6(G6, S6, 9000, m + b"f" * 40)
    send(ip6(G6, S6, 44, u[:24], ext=struct.pack("!BBHI", 17, 0, 0x0001, 999)), 0x86dd)
    send(ip6(G6, S6, 44, u[24:], ext=struct.pack("!BBHI", 17, 0, 3 << 3, 999)), 0x86dd)
elif act == "raw6_hbh":
    send(ip6(G6, S6, 0, udp6(G6, S6, 9000, m), ext=b"\x11\x00\x01\x04\0\0\0\0"), 0x86dd)
elif act == "raw6_dstopt":
    send(ip6(G6, S6, 60, udp6(G6, S6, 9000, m), ext=b"\x11\x00\x01\x04\0\0\0\0"), 0x86dd)
elif act == "listen":     # port: accept one connection within 3 s
    s = socket.socket(); s.bind(("0.0.0.0", int(args[1]))); s.listen(1); s.settimeout(4)
    print("ready", flush=True)
    try:
        s.accept(); print("accepted")
    except OSError:
        print("none")
print("sent", flush=True)
"""


def sh(*argv):
    must(list(argv))


class Topo:
    seq = 0

    def __init__(self):
        Topo.seq += 1
        t = IF_TAG[:7] + str(Topo.seq)
        self.g, self.h, self.s = ("nd%s%d-%s" % (k, Topo.seq, RUN_ID) for k in "ghs")
        self.dev = "vh"
        self.netns = "/run/netns/" + self.h
        self.proc = None
        CLEANUP.push("netdev topology %d" % Topo.seq, self.destroy)
        for n in (self.g, self.h, self.s):
            sh("ip", "netns", "add", n)
            sh("ip", "-n", n, "link", "set", "lo", "up")
        # Made in the host namespace under unique names, moved and renamed.
        sh("ip", "link", "add", "ndg" + t, "type", "veth", "peer", "name", "ndh" + t)
        sh("ip", "link", "set", "ndg" + t, "netns", self.g, "name", "vg")
        sh("ip", "link", "set", "ndh" + t, "netns", self.h, "name", "vh")
        sh("ip", "link", "add", "ndx" + t, "type", "veth", "peer", "name", "ndy" + t)
        sh("ip", "link", "set", "ndx" + t, "netns", self.h, "name", "hs")
        sh("ip", "link", "set", "ndy" + t, "netns", self.s, "name", "sh")
        G, H, S = (["ip", "-n", n] for n in (self.g, self.h, self.s))
        for n in (self.g, self.h, self.s):
            for k in ("net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"):
                sh("ip", "netns", "exec", n, "sysctl", "-qw", k)
        sh("ip", "netns", "exec", self.h, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        # H forwards what vh passes, spoofed or not (rp_filter off in H, our
        # own namespace): a drop is the device program's, never H's.
        for k in ("all", "default", "vh"):
            sh("ip", "netns", "exec", self.h, "sysctl", "-qw", "net.ipv4.conf.%s.rp_filter=0" % k)
        sh("ip", "netns", "exec", self.h, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
        # Only G's own address routes back through vh (strict reverse path).
        sh(*G, "addr", "add", G_IP, "peer", H_IP, "dev", "vg")
        sh(*G, "-6", "addr", "add", G_IP6 + "/128", "dev", "vg", "nodad")
        sh(*G, "link", "set", "vg", "up")
        sh(*G, "route", "add", "default", "via", H_IP, "dev", "vg")
        sh(*H, "addr", "add", H_IP, "peer", G_IP, "dev", "vh")
        sh(*H, "-6", "addr", "add", "fd77::1/128", "dev", "vh", "nodad")
        sh(*H, "link", "set", "vh", "up")
        sh(*H, "-6", "route", "add", G_IP6 + "/128", "dev", "vh")
        sh(*G, "-6", "route", "add", "fd77::1/128", "dev", "vg")
        sh(*G, "-6", "route", "add", "default", "via", "fd77::1", "dev", "vg")
        sh(*H, "addr", "add", "10.78.0.1/24", "dev", "hs")
        sh(*H, "-6", "addr", "add", "fd78::1/64", "dev", "hs", "nodad")
        sh(*H, "link", "set", "hs", "up")
        sh(*S, "addr", "add", S_IP + "/24", "dev", "sh")
        sh(*S, "addr", "add", S_IP2 + "/24", "dev", "sh")
        sh(*S, "-6", "addr", "add", S_IP6 + "/64", "dev", "sh", "nodad")
        sh(*S, "link", "set", "sh", "up")
        sh(*S, "route", "add", "default", "via", "10.78.0.1")
        sh(*S, "-6", "route", "add", "default", "via", "fd78::1")
        self.hmac = run(["ip", "netns", "exec", self.h, "cat",
                         "/sys/class/net/vh/address"]).stdout.strip()
        self.start_servers()
        check(wait_until(lambda: self.guest("tcp", "warm", S_IP, "8000", "1") == "ok", 20, 0.3),
              "G cannot reach S with nothing attached (the topology is broken)")
        # IPv6 too: H's neighbour entry of S (link-local addresses past
        # DAD), so that a first v6 frame is not left in a queue.
        check(wait_until(lambda: self.guest("udp", "warm6", S_IP6, "9000") == "ok", 20, 0.3),
              "G cannot reach S over IPv6 with nothing attached (the topology is broken)")

    def start_servers(self):
        """SERVER in S, on sh (10.78.0.2, .3, fd78::2); test_microvm.py's too."""
        self.proc = subprocess.Popen(["ip", "netns", "exec", self.s, sys.executable, "-c",
                                      SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        check(self._line(10) == "ready", "the servers in S did not start: %s" %
              (self.proc.stderr.read() if self.proc.poll() is not None else "no answer"))

    def _line(self, timeout):
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return self.proc.stdout.readline().strip() if r else ""

    def ask(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        line = self._line(10)
        check(line, "the servers in S did not answer %r" % cmd)
        return json.loads(line)

    def guest(self, act, marker="", *args):
        r = run(["ip", "netns", "exec", self.g, sys.executable, "-c", GUEST, act, self.hmac,
                 marker] + list(args), timeout=30)
        out = r.stdout.split("\n")[0].strip()
        if r.returncode:
            raise TestFailure("guest %s: exit %d: %s" % (act, r.returncode, r.stderr[-400:]))
        return out

    def frames(self, settle=0.5):
        time.sleep(settle)
        return self.ask("dump")

    def arrived(self, marker, frames):
        return [f for f in frames if f.get("marker") == marker and not f["out"]]

    def host_socket(self, ethertype, marker):
        """A socket in H for one ethertype on vh: a protocol handler, which
        the kernel runs after tc ingress (unlike an ETH_P_ALL tap), for the
        frames H does not forward (non-IP, a VLAN vh has no device for).
        Prints "got" when a frame with marker came within 3 s, else "none"."""
        code = ("import socket,select,time\n"
                "s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW,socket.htons(%d))\n"
                "s.bind(('vh',0));print('ready',flush=True);end=time.time()+3;got=0\n"
                "while not got and time.time()<end:\n"
                " r,_,_=select.select([s],[],[],max(0,end-time.time()))\n"
                " got=bool(r) and %r in s.recv(2000)\n"
                "print('got' if got else 'none',flush=True)\n" % (ethertype, marker.encode() + b"."))
        p = subprocess.Popen(["ip", "netns", "exec", self.h, sys.executable, "-c", code],
                             stdout=subprocess.PIPE, text=True)
        check(p.stdout.readline().strip() == "ready", "no packet socket in H")
        return p

    def at_host(self, ethertype, act, marker):
        p = self.host_socket(ethertype, marker)
        self.guest(act, marker)
        got = p.stdout.readline().strip() == "got"
        p.wait(10)
        return got

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def destroy(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        for n in (self.g, self.h, self.s):
            if n:   # a microVM's topology has no G (test_microvm.py)
                run(["ip", "netns", "del", n])


def nd_policy(c, allow, **kw):
    return c.policy(allow, tenant="nd-" + RUN_ID[-8:], **kw)


def nd_attach(c, topo, policy, *extra):
    r = c.ctl("attach", "--netdev", topo.dev, "--netns", topo.netns, "--policy", policy,
              "--json", *extra)
    check(r.returncode == 0, "attach --netdev: exit %d: %s" % (r.returncode, r.stderr + r.stdout))
    return json.loads(r.stdout)


def nd_detach(c, topo):
    c.ctl_ok("detach", "--netdev", topo.dev, "--netns", topo.netns)


def nd_row(c, sid):
    for row in stats(c)["sandboxes"]:
        if row["id"] == sid:
            return row
    raise TestFailure("`stats` has no row for sandbox %d" % sid)


ALLOW = ["tcp/%s:8000" % S_IP, "udp/%s:9000" % S_IP, "udp/%s:53" % S_IP2,
         "udp/%s:5353" % S_IP2, "tcp/[%s]:8000" % S_IP6, "udp/[%s]:9000" % S_IP6]


@test
def netdev_allowed_reaches_denied_never_arrives(c):
    with Topo() as topo:
        sb = nd_attach(c, topo, nd_policy(c, ALLOW))
        try:
            check(sb["kind"] == "netdev" and sb["netdev"] == "vh" and sb["netns"] == topo.netns,
                  "attach reply: %r" % sb)
            check(sb["attach_mode"] == kernel_attach_mode(), "attached with %s on Linux %s" %
                  (sb["attach_mode"], os.uname().release))
            listed = [s for s in c.list_json() if s["id"] == sb["id"]]
            check(listed and listed[0]["kind"] == "netdev", "list: %r" % listed)
            check("netdev" in c.ctl_ok("list").stdout, "`list` does not show the kind")
            topo.frames(0)
            # The sanity twins: allowed TCP and UDP, v4 and v6, with their replies.
            for args in (("tcp", "ND-t4", S_IP, "8000", "5000"), ("udp", "ND-u4", S_IP, "9000"),
                         ("tcp", "ND-t6", S_IP6, "8000", "100"), ("udp", "ND-u6", S_IP6, "9000")):
                check(topo.guest(*args) == "ok", "allowed %r did not work" % (args,))
            # Denied: another address, another port, another protocol.
            for args in (("tcp", "ND-da", S_IP2, "8000", "10"), ("tcp", "ND-dp", S_IP, "8001", "10"),
                         ("udp", "ND-dq", S_IP, "8000"), ("udp", "ND-dp6", S_IP6, "9001")):
                check(topo.guest(*args) != "ok", "denied %r worked" % (args,))
            fr = topo.frames()
            for m in ("ND-t4", "ND-u4", "ND-t6", "ND-u6"):
                check(topo.arrived(m, fr), "%s did not arrive in S" % m)
            for m in ("ND-da", "ND-dp", "ND-dq", "ND-dp6"):
                check(not topo.arrived(m, fr), "%s arrived in S" % m)
            # A denied SYN carries no marker: nothing from G to those at all.
            bad = [f for f in fr if f.get("src") == G_IP and
                   (f.get("dst") == S_IP2 and f.get("dport") == 8000 or f.get("dport") == 8001)]
            check(not bad, "denied packets reached S: %r" % bad[:3])
            # Inbound: S connecting to a listener in G never gets in.
            p = subprocess.Popen(["ip", "netns", "exec", topo.g, sys.executable, "-c", GUEST,
                                  "listen", topo.hmac, "", "7000"], stdout=subprocess.PIPE, text=True)
            check(p.stdout.readline().strip() == "ready", "no listener in G")
            r = run(["ip", "netns", "exec", topo.s, sys.executable, "-c",
                     "import socket;s=socket.socket();s.settimeout(2)\n"
                     "try:\n s.connect(('%s',7000));print('connected')\n"
                     "except OSError as e:\n print('refused',e)" % G_IP])
            check("connected" not in r.stdout, "a connection into the device sandbox: %s" % r.stdout)
            check(p.stdout.readline().strip() == "none", "G's listener accepted a connection")
            p.wait(10)
            # Events and meters name the sandbox.
            ev = obs_events(c, "--sandbox", str(sb["id"]))
            check(any(e.get("verdict") == "deny" for e in ev), "no deny event: %r" % ev[-5:])
            row = nd_row(c, sb["id"])
            check(row["bytes_out"] > 5000 and row["bytes_in"] > 0, "meters: %r" % row)
        finally:
            nd_detach(c, topo)
        # Detach restores: the denied port arrives now.
        check(topo.guest("tcp", "ND-after", S_IP, "8001", "10") == "ok", "detach did not restore")
        check(topo.arrived("ND-after", topo.frames()), "after detach, nothing arrived")
        recs = [r for r in obs_audit(c) if r.get("sandbox") == sb["id"]]
        ex = [r for r in recs if r.get("type") == "execution"]
        check(ex and ex[-1].get("netdev") == "vh" and ex[-1].get("netns") == topo.netns,
              "execution audit record: %r" % (ex or recs))


@test
def netdev_meters_match_the_wire(c):
    with Topo() as topo:
        sb = nd_attach(c, topo, nd_policy(c, ALLOW))
        try:
            topo.frames(0)
            before = nd_row(c, sb["id"])
            for i in range(3):
                check(topo.guest("tcp", "ND-m%d" % i, S_IP, "8000", "20000") == "ok", "tcp")
                check(topo.guest("udp", "ND-n%d" % i, S_IP, "9000") == "ok", "udp")
            fr = topo.frames(1.0)
            after = nd_row(c, sb["id"])
            out = sum(f["len"] for f in fr if not f["out"] and f.get("src") == G_IP)
            inn = sum(f["len"] for f in fr if f["out"] and f.get("dst") == G_IP)
            d_out = after["bytes_out"] - before["bytes_out"]
            d_in = after["bytes_in"] - before["bytes_in"]
            log("netdev meters: out %d (wire %d), in %d (wire %d)" % (d_out, out, d_in, inn))
            check(d_out == out, "bytes_out %d, the server's wire saw %d" % (d_out, out))
            check(d_in == inn, "bytes_in %d, the server's wire sent %d" % (d_in, inn))
            check(topo.ask("tcp").get("%s:8000" % S_IP, 0) >= 60000, "TCP server bytes")
        finally:
            nd_detach(c, topo)


# vector, its frame while attached, its twin, whether the twin is the same
# frame with nothing attached (True) or the clean frame while attached.
VECTORS = [
    ("spoofed source", "raw_spoof", "raw_clean"),
    ("IPv4 options", "raw_options", "raw_clean"),
    ("IPv4 fragments", "raw_frag", "raw_clean"),
    ("another IP protocol (GRE)", "raw_proto", "raw_clean"),
    ("spoofed IPv6 source", "raw6_spoof", "raw6_clean"),
    ("IPv6 fragments", "raw6_frag", "raw6_clean"),
    ("IPv6 hop-by-hop header", "raw6_hbh", "raw6_clean"),
    ("IPv6 destination options", "raw6_dstopt", "raw6_clean"),
]


@test
def netdev_guest_kernel_vectors(c):
    with Topo() as topo:
        n = [0]

        def mk():
            n[0] += 1
            return "ND-v%d" % n[0]

        # Every vector frame arrives with nothing attached: the test can send it.
        pre = {}
        for name, act, _ in VECTORS:
            pre[act] = mk()
            topo.guest(act, pre[act])
        fr = topo.frames()
        for name, act, _ in VECTORS:
            check(topo.arrived(pre[act], fr), "%s: the frame does not arrive even with nothing "
                  "attached (the test cannot show its drop)" % name)
        # Frames H does not forward: seen by a protocol handler in H.
        check(topo.at_host(0x88b5, "raw_ethertype", "ND-eth0"),
              "a non-IP frame does not reach H with nothing attached")
        check(topo.at_host(0x0800, "raw_vlan", "ND-vlan0"),
              "a VLAN-tagged frame does not reach H with nothing attached")
        # UDP 53 to another address works unattached too.
        check(topo.guest("udp", "ND-dns0", S_IP2, "53") == "ok", "udp 53 unattached")

        sb = nd_attach(c, topo, nd_policy(c, ALLOW))
        try:
            topo.frames(0)
            for name, act, twin in VECTORS:
                m, t = mk(), mk()
                topo.guest(act, m)
                topo.guest(twin, t)
                fr = topo.frames()
                check(not topo.arrived(m, fr), "%s arrived in S through the device sandbox" % name)
                check(topo.arrived(t, fr), "%s: its twin (%s) did not arrive" % (name, twin))
            check(not topo.at_host(0x88b5, "raw_ethertype", "ND-eth1"),
                  "a non-IP ethertype got through the device sandbox")
            check(not topo.at_host(0x0800, "raw_vlan", "ND-vlan1"),
                  "a VLAN-tagged frame got through the device sandbox")
            check(topo.at_host(0x0800, "raw_clean", "ND-vlan2"),
                  "the clean frame (the VLAN frame's twin) did not reach H")
            # DNS to another address, although the policy allows udp 53 there:
            # port 53 is the sandbox's DNS proxy's (test_netdev_dns.py), which
            # drops a datagram that is no DNS query; S never sees either.
            check(topo.guest("udp", "ND-dns1", S_IP2, "53") != "ok", "udp 53 echoed")
            topo.guest("tcp", "ND-dnst", S_IP2, "53", "10")
            check(topo.ask("tcp").get("%s:53" % S_IP2, 0) == 0, "tcp 53 reached S's server")
            check(topo.guest("udp", "ND-dns2", S_IP2, "5353") == "ok", "its twin (udp 5353)")
            fr = topo.frames()
            check(not topo.arrived("ND-dns1", fr) and topo.arrived("ND-dns2", fr),
                  "port 53 of another address: %r" % [f for f in fr if f.get("dst") == S_IP2][:4])
            check(not [f for f in fr if f.get("dport") == 53], "a port-53 packet arrived in S")
        finally:
            nd_detach(c, topo)


@test
def netdev_survives_egressd_restart_and_device_loss(c):
    with Topo() as topo:
        sb = nd_attach(c, topo, nd_policy(c, ALLOW))
        gone = False
        try:
            c.daemon.kill9()
            try:
                # egressd is down: the pinned links keep enforcing.
                check(topo.guest("tcp", "ND-k1", S_IP, "8001", "10") != "ok", "denied while down")
                check(topo.guest("tcp", "ND-k2", S_IP, "8000", "10") == "ok", "allowed while down")
                fr = topo.frames()
                check(not topo.arrived("ND-k1", fr) and topo.arrived("ND-k2", fr),
                      "enforcement while egressd was down")
            finally:
                c.daemon.start()
            listed = [s for s in c.list_json() if s["id"] == sb["id"]]
            check(listed and listed[0]["kind"] == "netdev", "not adopted: %r" % c.list_json())
            check(topo.guest("tcp", "ND-k3", S_IP, "8001", "10") != "ok", "denied after adoption")
            # The update path on the adopted sandbox: 8001 allowed now, 8000 not.
            c.ctl_ok("update", "--netdev", "vh", "--netns", topo.netns, "--policy",
                     nd_policy(c, ["tcp/%s:8001" % S_IP]))
            check(topo.guest("tcp", "ND-k4", S_IP, "8001", "10") == "ok", "update did not apply")
            check(topo.guest("tcp", "ND-k5", S_IP, "8000", "10") != "ok", "update kept 8000")
            # Renamed, the device is still the sandbox's (the programs are on
            # its ifindex): listed and enforcing past a few checks.
            sh("ip", "-n", topo.h, "link", "set", "vh", "down")
            sh("ip", "-n", topo.h, "link", "set", "vh", "name", "vhr")
            sh("ip", "-n", topo.h, "link", "set", "vhr", "up")
            time.sleep(2.5)
            check([s for s in c.list_json() if s["id"] == sb["id"]], "renamed device: detached")
            check(wait_until(lambda: topo.guest("tcp", "ND-k6", S_IP, "8001", "1") == "ok", 10,
                             0.5), "the renamed device does not pass the allowed port")
            check(topo.guest("tcp", "ND-k7", S_IP, "8000", "10") != "ok", "renamed: 8000")
            # The namespace's path goes while a process keeps it alive (a
            # VMM after `ip netns del`): the TCX link still names the device.
            keep = subprocess.Popen(["ip", "netns", "exec", topo.h, "sleep", "120"])
            try:
                time.sleep(0.5)
                sh("ip", "netns", "del", topo.h)
                time.sleep(2.5)
                check([s for s in c.list_json() if s["id"] == sb["id"]],
                      "detached while its namespace (and device) lived on")
                check(topo.guest("tcp", "ND-k8", S_IP, "8000", "10") != "ok",
                      "8000 passed after the namespace's path went")
                fr = topo.frames()
                check(topo.arrived("ND-k6", fr) and not topo.arrived("ND-k7", fr) and
                      not topo.arrived("ND-k8", fr), "renamed/unnamed namespace arrivals")
            finally:
                # The VM exits: its namespace, and the device with it, go;
                # egressd detaches it and closes the record.
                keep.kill()
                keep.wait(10)
            gone = True
            check(wait_until(lambda: not [s for s in c.list_json() if s["id"] == sb["id"]], 15, 0.3),
                  "the device sandbox outlived its device")
            ex = [r for r in obs_audit(c) if r.get("sandbox") == sb["id"] and
                  r.get("type") == "execution"]
            check(ex and ex[-1].get("status") == "device gone", "audit: %r" % ex)
        finally:
            if not gone:
                nd_detach(c, topo)


@test
def netdev_attach_fails_closed(c):
    with Topo() as topo:
        pol = nd_policy(c, ALLOW)
        r = c.ctl("attach", "--netdev", "nosuchdev0", "--netns", topo.netns, "--policy", pol)
        check(r.returncode != 0 and "nosuchdev0" in r.stderr + r.stdout, "no such device: %s" %
              (r.stderr + r.stdout))
        r = c.ctl("attach", "--netdev", "vh", "--netns", "/run/netns/none-" + RUN_ID, "--policy", pol)
        check(r.returncode != 0, "a namespace that does not exist was accepted")
        # network.inspect is accepted now (test_netdev_inspect.py): its
        # listeners open before the programs, and a detach takes both back.
        sb = nd_attach(c, topo, nd_policy(c, ALLOW, extra_network={"inspect": True}))
        check((sb.get("inspect") or {}).get("port4"), "an inspected device without a listener: "
              "%r" % sb)
        nd_detach(c, topo)
        # A device the programs cannot be put on (loopback: no Ethernet
        # header to parse): refused after its entry and state were written,
        # which the attach then takes back.
        states = set(os.listdir(os.path.join(c.state, "sandboxes")))
        r = c.ctl("attach", "--netdev", "lo", "--netns", topo.netns, "--policy", pol)
        check(r.returncode != 0 and "device programs" in r.stderr + r.stdout,
              "attach to lo: %s" % (r.stderr + r.stdout))
        check(set(os.listdir(os.path.join(c.state, "sandboxes"))) == states,
              "a failed attach left a state file")
        # None of that left a sandbox or a program behind.
        check(not [s for s in c.list_json() if s.get("kind") == "netdev"], "a half-made sandbox")
        check(topo.guest("tcp", "ND-f1", S_IP, "8001", "10") == "ok", "something stayed on vh")
        out = run(["ip", "netns", "exec", topo.h, "tc", "filter", "show", "dev", "vh",
                   "ingress"]).stdout
        check("egr_nd" not in out, "a tc filter stayed: %s" % out)
        # The same device twice with another policy: exists; the first stays.
        sb = nd_attach(c, topo, pol)
        try:
            r = c.ctl("attach", "--netdev", "vh", "--netns", topo.netns, "--policy",
                      nd_policy(c, ["tcp/%s:8001" % S_IP]))
            check(r.returncode != 0 and "update" in r.stderr + r.stdout, "second attach: %s" %
                  (r.stderr + r.stdout))
            check(topo.guest("tcp", "ND-f2", S_IP, "8001", "10") != "ok", "the first policy went")
            # The same device through another path of its namespace: exists.
            # (egressd cannot open /proc/PID/ns/net without CAP_SYS_PTRACE:
            # a second name of it under /run/netns, as `ip netns attach` makes.)
            alias = "nda-" + RUN_ID
            keep = subprocess.Popen(["ip", "netns", "exec", topo.h, "sleep", "60"])
            try:
                time.sleep(0.5)
                sh("ip", "netns", "attach", alias, str(keep.pid))
                r = c.ctl("attach", "--netdev", "vh", "--netns", "/run/netns/" + alias,
                          "--policy", nd_policy(c, ["tcp/%s:8001" % S_IP]))
            finally:
                run(["ip", "netns", "del", alias])
                keep.kill()
                keep.wait(10)
            check(r.returncode != 0 and "already sandbox %d" % sb["id"] in r.stderr + r.stdout,
                  "the same device under another namespace path: %s" % (r.stderr + r.stdout))
            check(topo.guest("tcp", "ND-f3", S_IP, "8001", "10") != "ok", "the first policy went")
            r = c.ctl("detach", "--netdev", "vh")
            check(r.returncode != 0, "detach without its --netns found the sandbox")
            r = c.ctl("detach", "--netns", topo.netns, "--id", str(sb["id"]))
            check(r.returncode == 2, "--netns without --netdev: %d" % r.returncode)
        finally:
            nd_detach(c, topo)


def kernel_attach_mode():
    """The path egressd must take on this kernel: TCX links from 6.6 on
    (Debian 12's 6.12), tc clsact filters below (its 6.1)."""
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    return "tcx" if (major, minor) >= (6, 6) else "tc"


def check_attach_path(c, topo, sid, mode):
    """What the kernel holds for the sandbox is that path's and only it:
    a tc filter named egr_nd_ingress on vh, or the two pinned TCX links."""
    out = run(["ip", "netns", "exec", topo.h, "tc", "filter", "show", "dev", "vh",
               "ingress"]).stdout
    pins = [os.path.exists(os.path.join(c.bpffs, "netdev", str(sid), d))
            for d in ("ingress", "egress")]
    if mode == "tc":
        check("egr_nd_ingress" in out and not any(pins),
              "tc path: filter %r, TCX link pins %r" % (out, pins))
    else:
        check("egr_nd" not in out and all(pins),
              "TCX path: a tc filter %r, link pins %r" % (out, pins))


_names_added = set()   # dnsmasq's extra hosts, added once per run


def path_enforces_and_adopts(c, topo, mode):
    """Attach on the path mode names, enforce, SIGKILL egressd, enforce
    while it is down, adopt (on the same path), resolve through the adopted
    programs' DNS rewrite, detach: nothing stays. 8001 is allowed only by
    name (a name only this run's dnsmasq serves), so it opens only once
    the sandbox's proxy learned the answer."""
    name = "ndpath-%s.test" % RUN_ID[-6:].lower()
    dm = need_dnsmasq(c)
    if name not in _names_added:
        dm.add_host(name, S_IP)
        _names_added.add(name)
    sb = nd_attach(c, topo, nd_policy(c, ALLOW + ["tcp/%s:8001" % name], extra_network={
        "dns_rebind_allow": ["10.78.0.0/24"]}))
    check(sb["attach_mode"] == mode, "not the %s path: %r" % (mode, sb))
    check_attach_path(c, topo, sb["id"], mode)
    log("netdev: attach path %s on Linux %s" % (mode, os.uname().release))
    check(topo.guest("tcp", "ND-c1", S_IP, "8000", "10") == "ok", "allowed (%s)" % mode)
    check(topo.guest("tcp", "ND-c2", S_IP, "8001", "10") != "ok", "denied (%s)" % mode)
    c.daemon.kill9()
    check(topo.guest("tcp", "ND-c3", S_IP, "8001", "10") != "ok", "denied while down")
    check(topo.guest("tcp", "ND-c4", S_IP, "8000", "10") == "ok", "allowed while down")
    c.daemon.start()
    listed = [s for s in c.list_json() if s["id"] == sb["id"]]
    check(listed and listed[0].get("attach_mode") == mode,
          "%s sandbox not adopted on its path: %r" % (mode, listed))
    check_attach_path(c, topo, sb["id"], mode)
    check(topo.guest("tcp", "ND-c6", S_IP, "8001", "10") != "ok", "denied after adoption")
    # DNS to an address where no resolver is: answered, as from that
    # address, by the sandbox's proxy (the rewrite), which went upstream
    # and learned the name's address for 8001.
    rc, addrs, src, line = dns_query("udp", "192.0.2.53", 53, name, "A",
                                     netns="/run/netns/" + topo.g)
    check(rc == "NOERROR" and addrs == [S_IP] and src == "192.0.2.53:53",
          "DNS through the %s path after adoption: %s" % (mode, line))
    check(dm.logged(name), "the query never reached the upstream")
    check(topo.guest("tcp", "ND-c7", S_IP, "8001", "10") == "ok",
          "the learned address did not open 8001 (%s)" % mode)
    fr = topo.frames()
    check(not topo.arrived("ND-c2", fr) and not topo.arrived("ND-c3", fr) and
          not topo.arrived("ND-c6", fr) and topo.arrived("ND-c1", fr) and
          topo.arrived("ND-c4", fr) and topo.arrived("ND-c7", fr), "%s path arrivals" % mode)
    check(not [f for f in fr if f.get("dport") == 53], "a port-53 packet reached S")
    nd_detach(c, topo)
    out = run(["ip", "netns", "exec", topo.h, "tc", "filter", "show", "dev", "vh",
               "ingress"]).stdout
    check("egr_nd" not in out, "the tc filter stayed after detach: %s" % out)
    check(not os.path.exists(os.path.join(c.bpffs, "netdev", str(sb["id"]))),
          "the sandbox's pin directory stayed after detach")
    check(topo.guest("tcp", "ND-c8", S_IP2, "8000", "10") == "ok", "detach (%s)" % mode)


@test
def netdev_kernel_attach_path_enforces_and_adopts(c):
    """The path this kernel takes without being told (TCX on >= 6.6, tc
    filters below; the kernel matrix runs it on Debian 12's 6.1 and 6.12)
    enforces, survives a SIGKILL of egressd, is adopted on that same path
    and rewrites DNS to the sandbox's listener."""
    with Topo() as topo:
        path_enforces_and_adopts(c, topo, kernel_attach_mode())


@test
def netdev_programs_lost_while_down_are_attached_again(c):
    """A state file whose device lost its programs while egressd was away
    (the TCX link pins removed from bpffs, or the tc filters deleted): the
    start attaches them again from the state, on the same path. The twin:
    before the restart the device really was open."""
    with Topo() as topo:
        sb = nd_attach(c, topo, nd_policy(c, ALLOW))
        mode = sb["attach_mode"]
        log("netdev: programs removed on the %s path while egressd is down" % mode)
        try:
            check(topo.guest("tcp", "ND-r1", S_IP, "8001", "10") != "ok", "denied while attached")
            c.daemon.kill9()
            try:
                for d in ("ingress", "egress"):
                    if mode == "tcx":   # the pins were the links' only holders
                        os.unlink(os.path.join(c.bpffs, "netdev", str(sb["id"]), d))
                    else:
                        sh("ip", "netns", "exec", topo.h, "tc", "filter", "del", "dev", "vh", d)
                check(wait_until(lambda: topo.guest("tcp", "ND-r2", S_IP, "8001", "1") == "ok",
                                 10, 0.5), "the device stayed closed without its programs")
            finally:
                c.daemon.start()
            listed = [s for s in c.list_json() if s["id"] == sb["id"]]
            check(listed and listed[0].get("attach_mode") == mode,
                  "not adopted on its %s path: %r" % (mode, listed))
            check_attach_path(c, topo, sb["id"], mode)
            check(topo.guest("tcp", "ND-r3", S_IP, "8001", "10") != "ok", "denied after the start")
            check(topo.guest("tcp", "ND-r4", S_IP, "8000", "10") == "ok", "allowed after the start")
            fr = topo.frames()
            check(topo.arrived("ND-r2", fr) and not topo.arrived("ND-r3", fr) and
                  topo.arrived("ND-r4", fr), "arrivals around the start")
        finally:
            nd_detach(c, topo)


@test
def netdev_tc_filters_enforce_and_adopt(c):
    """Kernels without TCX (Debian 12's 6.1): the tc clsact path, forced on
    this kernel (EGRESSD_TEST_NETDEV_TC=1, test only)."""
    with Topo() as topo:
        old_env = c.daemon.env
        c.daemon.stop()
        c.daemon.env = dict(old_env or {}, EGRESSD_TEST_NETDEV_TC="1")
        try:
            c.daemon.start()
            path_enforces_and_adopts(c, topo, "tc")
        finally:
            c.daemon.stop()
            c.daemon.env = old_env
            c.daemon.start()


@test
def netdev_quota_and_tenant_meters(c):
    """A device sandbox's egress quota stops what it sends past it (the same
    quota maps as cgroup sandboxes), and its bytes are its tenant's."""
    with Topo() as topo:
        tenant = "ndq-" + RUN_ID[-8:]
        raw = {"tenant": tenant, "execution_id": "ndq-" + RUN_ID,
               "network": {"default": "deny", "outbound_allow": ALLOW},
               "limits": {"egress_bytes": 30000, "window_seconds": 3600}}
        sb = nd_attach(c, topo, c.policy([], raw=raw))
        try:
            base = topo.ask("tcp").get("%s:8000" % S_IP, 0)
            check(topo.guest("tcp", "ND-q1", S_IP, "8000", "20000") == "ok", "within the quota")
            check(topo.guest("tcp", "ND-q2", S_IP, "8000", "40000") != "ok",
                  "40 kB more went through a 30 kB quota")
            got = topo.ask("tcp").get("%s:8000" % S_IP, 0) - base
            log("netdev quota: the server got %d bytes of 60012 sent past a 30000-byte quota"
                % got)
            check(20006 <= got < 30000, "the server got %d bytes" % got)
            row = nd_row(c, sb["id"])
            check(row["bytes_out"] <= 30000, "metered past the quota: %r" % row)
            ten = [t for t in stats(c, tenant)["tenants"] if t["tenant"] == tenant]
            check(ten and ten[0]["bytes_out"] == row["bytes_out"],
                  "tenant %s meters %r, its one sandbox %d" % (tenant, ten, row["bytes_out"]))
            ev = obs_events(c, "--sandbox", str(sb["id"]))
            check(any(e.get("type") == "quota" for e in ev), "no quota event: %r" % ev[-5:])
        finally:
            nd_detach(c, topo)
