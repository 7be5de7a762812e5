# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Red team against device sandboxes (issue 25): what a hostile guest kernel
sends to get past the passes the device programs grant without the
allowlist (neighbour and router discovery) and past the meters (DNS).

The topology of test_netdev.py (G the guest, H the host side with the
confined device vh, S the servers behind H, which forwards). Frames are
crafted in G with AF_PACKET as a guest kernel can send them; what arrives is
checked in S on the wire (the capture of sh), or in H (its routes, a
protocol packet socket on vh). Every vector's frame is first sent with
nothing attached, and shown to arrive (or to act on H): the test can send
it; while attached, the link's own traffic still works (the twin).
"""
import subprocess
import sys
import time

from harness import *
from harness.metering import stats
from test_netdev import G_IP6, S_IP, S_IP6, Topo, nd_attach, nd_detach, nd_policy, nd_row
from test_netdev_dns import BURST, NAME, dns_policy, names

# In G: one ICMPv6 message of type argv[2] ("ns", "ra", "rs") from argv[3]
# to argv[4] with hop limit 255, marker argv[5] in it; Ethernet destination
# argv[1] (H's MAC, or the IPv6 multicast MAC of the destination).
ND = r"""
import socket, struct, sys
hmac, kind, src, dst, marker = sys.argv[1:6]
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b)); s = (s >> 16) + (s & 0xffff); s += s >> 16
    return (~s) & 0xffff
S, D = socket.inet_pton(socket.AF_INET6, src), socket.inet_pton(socket.AF_INET6, dst)
if kind == "ns":    # a target (S's address), then the data it smuggles
    body = struct.pack("!BBHI", 135, 0, 0, 0) + D
elif kind == "rs":
    body = struct.pack("!BBHI", 133, 0, 0, 0)
else:               # "I am a default router for 1800 s"
    body = struct.pack("!BBHBBHII", 134, 0, 0, 64, 0, 1800, 0, 0)
body += marker.encode() + b"." + b"x" * 16 if kind != "ra" else b""
ph = S + D + struct.pack("!IxxxB", len(body), 58)
body = body[:2] + struct.pack("!H", csum(ph + body)) + body[4:]
ip = struct.pack("!IHBB16s16s", 6 << 28, len(body), 58, 255, S, D) + body
if D[0] == 0xff:
    emac = b"\x33\x33" + D[12:]
else:
    emac = bytes.fromhex(hmac.replace(":", ""))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind(("vg", 0))
s.send(emac + s.getsockname()[4] + struct.pack("!H", 0x86dd) + ip)
print("sent")
"""

RA_SRC = "fe80::bad:1"


def nd_frame(topo, kind, src, dst, marker=""):
    r = run(["ip", "netns", "exec", topo.g, sys.executable, "-c", ND, topo.hmac, kind, src, dst,
             marker], timeout=int(20 * TIME_SCALE))
    check(r.returncode == 0 and "sent" in r.stdout, "ND frame %s: %s" % (kind, r.stderr[-300:]))


def at_host_nd(topo, kind, src, dst, marker):
    """Did H's IPv6 handler on vh get this ND frame (after tc ingress)?"""
    p = topo.host_socket(0x86dd, marker)
    nd_frame(topo, kind, src, dst, marker)
    got = p.stdout.readline().strip() == "got"
    p.wait(10)
    return got


@test
def netdev_ndisc_never_leaves_the_link(c):
    """Neighbour discovery passes the device program without the allowlist
    (the link needs it). With hop limit 255 it is ND to the program, yet an
    address H forwards to takes it off the link: a neighbour solicitation
    from G to S, carrying whatever the guest likes, from any source, was
    forwarded to S and metered nowhere. Now only ND that stays on the link
    passes; G's own neighbour discovery still works (the twins)."""
    with Topo() as topo:
        topo.frames(0)
        nd_frame(topo, "ns", G_IP6, S_IP6, "ND-ns0")
        check(topo.arrived("ND-ns0", topo.frames()),
              "an NS from G to S does not arrive with nothing attached (H does not forward it: "
              "the test cannot show its drop)")
        sb = nd_attach(c, topo, nd_policy(c, ["udp/[%s]:9000" % S_IP6]))
        try:
            topo.frames(0)
            nd_frame(topo, "ns", G_IP6, S_IP6, "ND-ns1")
            nd_frame(topo, "ns", "fd77::9", S_IP6, "ND-ns2")   # spoofed too
            nd_frame(topo, "rs", G_IP6, S_IP6, "ND-ns3")
            fr = topo.frames()
            for m in ("ND-ns1", "ND-ns2", "ND-ns3"):
                check(not topo.arrived(m, fr), "%s: ICMPv6 ND from the guest reached S" % m)
            check(not [f for f in fr if f.get("v") == 6 and f.get("proto") == 58 and
                       f.get("dst") == S_IP6 and not f["out"]],
                  "ICMPv6 from G reached S: %r" % fr[:3])
            # The twins: ND of the link reaches H (multicast solicitation,
            # unicast to H's own address), and G's neighbour cache, flushed,
            # fills again: the allowed datagram is echoed.
            check(at_host_nd(topo, "ns", G_IP6, "ff02::1:ff00:1", "ND-tw1"),
                  "a multicast NS for H's address did not reach H")
            check(at_host_nd(topo, "ns", G_IP6, "fd77::1", "ND-tw2"),
                  "a unicast NS to H's own address (NUD) did not reach H")
            sh_ok("ip", "-n", topo.g, "-6", "neigh", "flush", "dev", "vg")
            check(topo.guest("udp", "ND-tw3", S_IP6, "9000") == "ok",
                  "IPv6 to S does not work after G's neighbour cache was flushed")
            row = nd_row(c, sb["id"])
            check(row["backstop_drops"] >= 3, "the ND frames off the link were not "
                  "counted as drops: %r" % row)
        finally:
            nd_detach(c, topo)


def h_routes_via_guest(topo):
    r = run(["ip", "-n", topo.h, "-6", "route", "show", "default"])
    return RA_SRC in r.stdout


@test
def netdev_guest_router_advertisement_never_routes_the_host(c):
    """A router advertisement from the guest: on a host side that accepts
    them (accept_ra 2, as a forwarding host that takes its own route from
    RAs sets), it made H route its IPv6 default through the guest, i.e.
    other traffic of the host into the hostile VM. A guest is no router:
    its RAs drop; its router solicitations still reach H (the twin)."""
    with Topo() as topo:
        sh_ok("ip", "netns", "exec", topo.h, "sysctl", "-qw", "net.ipv6.conf.vh.accept_ra=2")
        nd_frame(topo, "ra", RA_SRC, "ff02::1")
        check(wait_until(lambda: h_routes_via_guest(topo), 3, 0.2),
              "an RA from G does not give H a default route with nothing attached "
              "(the test cannot show its drop)")
        sh_ok("ip", "-n", topo.h, "-6", "route", "del", "default", "via", RA_SRC, "dev", "vh")
        nd_attach(c, topo, nd_policy(c, ["udp/[%s]:9000" % S_IP6]))
        try:
            nd_frame(topo, "ra", RA_SRC, "ff02::1")
            time.sleep(1.0)
            check(not h_routes_via_guest(topo), "the guest's RA became H's default route")
            check(at_host_nd(topo, "rs", "fe80::2", "ff02::2", "ND-rs1"),
                  "the guest's router solicitation did not reach H")
        finally:
            nd_detach(c, topo)


def sh_ok(*argv):
    must(list(argv))


def query_ip_len(name):
    """The IP length of BURST's query for name: IPv4, UDP, the DNS header,
    the name, type and class."""
    return 20 + 8 + 12 + sum(len(label) + 1 for label in name.split(".")) + 1 + 4


def burst(topo, n):
    r = run(["ip", "netns", "exec", topo.g, sys.executable, "-c", BURST, "10.78.0.3", NAME,
             str(n)], timeout=int(60 * TIME_SCALE))
    check(r.returncode == 0, "burst: %s" % r.stderr[-300:])
    return int(r.stdout.split()[0])


@test
def netdev_dns_is_metered_and_within_the_quota(c):
    """The DNS of a device sandbox passed unmetered and past its quota
    (a cgroup sandbox's DNS to the proxy counts in both): a guest over its
    egress quota still pushed names out through the proxy. Now each query
    is bytes_out and charged to the quota, each answer bytes_in."""
    names(c)
    with Topo() as topo:
        raw = {"tenant": "ndh-" + RUN_ID[-8:], "execution_id": "ndh-" + RUN_ID,
               "network": dict(json_load(dns_policy(c))["network"]),
               "limits": {"egress_bytes": 800, "window_seconds": 3600}}
        sb = nd_attach(c, topo, c.policy([], raw=raw))
        try:
            qlen = query_ip_len(NAME)
            before = nd_row(c, sb["id"])
            # Within the quota (the twin): answered, and metered exactly.
            check(burst(topo, 5) == 5, "5 queries within the quota were not all answered")
            mid = nd_row(c, sb["id"])
            log("netdev DNS meters: 5 queries of %d IP bytes: bytes_out +%d, bytes_in +%d"
                % (qlen, mid["bytes_out"] - before["bytes_out"],
                   mid["bytes_in"] - before["bytes_in"]))
            check(mid["bytes_out"] - before["bytes_out"] == 5 * qlen,
                  "5 queries metered %d bytes out, sent %d" %
                  (mid["bytes_out"] - before["bytes_out"], 5 * qlen))
            check(mid["bytes_in"] - before["bytes_in"] > 5 * qlen, "answers not metered in")
            # Past it: 800 bytes are 800 / qlen queries in all (each one
            # unanswered waits 2 s).
            got = burst(topo, 12)
            after = nd_row(c, sb["id"])
            log("netdev DNS quota: %d of 12 more queries answered past an 800-byte quota" % got)
            check(got < 12 and (5 + got) * qlen <= 800, "%d queries of %d bytes answered "
                  "past an 800-byte quota" % (5 + got, qlen))
            check(after["bytes_out"] <= 800 and after["quota_drops"] > 0,
                  "meters past the quota: %r" % after)
        finally:
            nd_detach(c, topo)


def json_load(path):
    import json
    with open(path) as f:
        return json.load(f)


# In G: a UDP datagram from argv[2] to argv[3]:argv[4], marker argv[5], as a
# guest kernel can send it (any source), to H's MAC argv[1].
RAW4 = r"""
import socket, struct, sys
hmac, src, dst, dport, marker = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b)); s = (s >> 16) + (s & 0xffff); s += s >> 16
    return (~s) & 0xffff
data = marker.encode() + b"." + b"s" * 16
u = struct.pack("!HHHH", 40000, dport, 8 + len(data), 0) + data
h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(u), 4343, 0, 64, 17, 0, socket.inet_aton(src),
                socket.inet_aton(dst))
h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind(("vg", 0))
s.send(bytes.fromhex(hmac.replace(":", "")) + s.getsockname()[4] + struct.pack("!H", 0x0800) + h + u)
print("sent")
"""


def raw4(topo, src, marker):
    r = run(["ip", "netns", "exec", topo.g, sys.executable, "-c", RAW4, topo.hmac, src, S_IP,
             "9000", marker], timeout=int(20 * TIME_SCALE))
    check(r.returncode == 0 and "sent" in r.stdout, "raw datagram: %s" % r.stderr[-300:])


@test
def netdev_spoofed_source_of_a_narrower_route_elsewhere(c):
    """The reverse-path check asked whether any route of the source goes
    through the device (an output lookup with the device as oif, which
    IPv4 answers from a shorter prefix when the best route goes
    elsewhere): with 10.99.0.0/16 routed through vh and 10.99.5.0/24 (say,
    another sandbox's, carved out of it) through hs, G sent as 10.99.5.7
    and S got it. Now the host's best route to the source must be vh."""
    with Topo() as topo:
        sh_ok("ip", "-n", topo.h, "route", "add", "10.99.0.0/16", "dev", "vh")
        sh_ok("ip", "-n", topo.h, "route", "add", "10.99.5.0/24", "via", S_IP, "dev", "hs")
        topo.frames(0)
        raw4(topo, "10.99.5.7", "ND-rp0")
        check(topo.arrived("ND-rp0", topo.frames()), "the spoofed datagram does not arrive "
              "with nothing attached (the test cannot show its drop)")
        sb = nd_attach(c, topo, nd_policy(c, ["udp/%s:9000" % S_IP]))
        try:
            topo.frames(0)
            raw4(topo, "10.99.5.7", "ND-rp1")
            raw4(topo, "10.99.7.7", "ND-rp2")   # the twin: its best route is vh
            fr = topo.frames()
            check(not topo.arrived("ND-rp1", fr), "a source routed through hs got past vh's "
                  "reverse-path check")
            check(topo.arrived("ND-rp2", fr), "a source routed through vh did not arrive")
        finally:
            nd_detach(c, topo)


# In G: a broadcast ARP request for argv[1], marker argv[2] in its padding:
# what a guest sends its link, carrying what it likes.
ARP = r"""
import socket, struct, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind(("vg", 0))
mac = s.getsockname()[4]
arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, mac, socket.inet_aton("10.77.0.2"),
                  b"\0" * 6, socket.inet_aton(sys.argv[1]))
s.send(b"\xff" * 6 + mac + struct.pack("!H", 0x0806) + arp + sys.argv[2].encode() + b"." + b"a" * 8)
print("sent")
"""


def arp_on_other_port(topo, marker):
    """Did G's ARP frame reach bpb, the far end of another port of br0?"""
    code = ("import socket,select,time\n"
            "s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW,socket.htons(0x0806))\n"
            "s.bind(('bpb',0));print('ready',flush=True);end=time.time()+%d;got=0\n"
            "while not got and time.time()<end:\n"
            " r,_,_=select.select([s],[],[],max(0,end-time.time()))\n"
            " got=bool(r) and %r in s.recv(2000)\n"
            "print('got' if got else 'none',flush=True)\n" %
            (int(3 * TIME_SCALE), marker.encode() + b"."))
    p = subprocess.Popen(["ip", "netns", "exec", topo.h, sys.executable, "-c", code],
                         stdout=subprocess.PIPE, text=True)
    check(p.stdout.readline().strip() == "ready", "no packet socket on bpb")
    r = run(["ip", "netns", "exec", topo.g, sys.executable, "-c", ARP, "10.77.0.1", marker])
    check(r.returncode == 0, "ARP frame: %s" % r.stderr[-300:])
    got = p.stdout.readline().strip() == "got"
    p.wait(10)
    return got


@test
def netdev_attach_refuses_a_bridge_port(c):
    """vh as a port of a bridge (whose other port, bpa, stands for another
    tenant's device or the LAN): the bridge switches its frames before any
    routing, so the ARP (and neighbour discovery) the programs pass for the
    link reached every other port, data and all, and its IP could only fail
    the reverse-path check. Attaching it was accepted; now it is refused,
    naming the bridge. The twin: the same device out of the bridge attaches."""
    with Topo() as topo:
        H = ["ip", "-n", topo.h]
        sh_ok(*H, "link", "add", "br0", "type", "bridge")
        sh_ok(*H, "link", "add", "bpa", "type", "veth", "peer", "name", "bpb")
        for d in ("br0", "bpa", "bpb"):
            sh_ok(*H, "link", "set", d, "up")
        sh_ok(*H, "link", "set", "bpa", "master", "br0")
        sh_ok(*H, "link", "set", "vh", "master", "br0")
        check(wait_until(lambda: arp_on_other_port(topo, "ND-br0"), 10, 0.5),
              "G's ARP does not cross the bridge with nothing attached (the test cannot "
              "show the vector)")
        r = c.ctl("attach", "--netdev", "vh", "--netns", topo.netns, "--policy",
                  nd_policy(c, ["udp/%s:9000" % S_IP]), "--json")
        if r.returncode == 0:
            crossed = arp_on_other_port(topo, "ND-br1")
            nd_detach(c, topo)
            raise TestFailure("a bridge port was attached as a device sandbox (and the guest's "
                              "ARP %s the bridge's other port)" %
                              ("reached" if crossed else "did not reach"))
        check("bridge br0" in r.stderr + r.stdout, "the refusal does not name the bridge: %s" %
              (r.stderr + r.stdout))
        check(not [s for s in c.list_json() if s.get("kind") == "netdev"], "a half-made sandbox")
        sh_ok(*H, "link", "set", "vh", "nomaster")
        sb = nd_attach(c, topo, nd_policy(c, ["udp/%s:9000" % S_IP]))
        check(sb["kind"] == "netdev", "the twin: %r" % sb)
        nd_detach(c, topo)
