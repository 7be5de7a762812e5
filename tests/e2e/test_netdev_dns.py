# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""DNS of device sandboxes (issue 25 item 2; docs/dns.md "Device sandboxes").

The topology of test_netdev.py (G the guest, H the host side with the
confined device vh, S the servers). Every TCP and UDP packet to port 53 that
G sends, to any address, is rewritten by vh's program to the sandbox's own
DNS listener (bound to vh's address in H, 10.77.0.1 / fd77::1) and its
answer back to the address G asked; the proxy learns the answer's addresses
into this sandbox's allowlist before it releases it. What the guest reaches
is checked in S (the TCP server's byte counts, the capture of sh), what the
upstream saw in dnsmasq's query log.
"""
import contextlib
import re
import sys
import threading
import time

from harness import *
from harness.dns import dns_query
from test_netdev import G_IP, H_IP, S_IP, S_IP6, Topo, nd_attach, nd_detach, nd_policy, sh

# Names only these tests ask for (dnsmasq's log says whether one went upstream).
TAG = RUN_ID[-6:].lower()
NAME = "ndsrv-%s.test" % TAG       # -> S_IP
NAME6 = "ndsrv6-%s.test" % TAG     # -> S_IP6 (AAAA)
REBIND_OK = {"dns_rebind_allow": ["10.78.0.0/24", "fd78::/64"]}

# A raw UDP DNS query from G, source address argv[2] (G's own, or a spoofed
# one), to argv[3]:53, for name argv[4]: what a guest kernel can send.
RAWQ = r"""
import socket, struct, sys
hmac, src, dst, name = bytes.fromhex(sys.argv[1].replace(":", "")), sys.argv[2], sys.argv[3], sys.argv[4]
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b)); s = (s >> 16) + (s & 0xffff); s += s >> 16
    return (~s) & 0xffff
q = struct.pack(">HHHHHH", 4242, 0x0100, 1, 0, 0, 0)
for label in name.split("."):
    q += bytes([len(label)]) + label.encode()
q += b"\0" + struct.pack(">HH", 1, 1)
u = struct.pack("!HHHH", 40053, 53, 8 + len(q), 0) + q
ph = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 17, len(u))
u = u[:6] + struct.pack("!H", csum(ph + u) or 0xffff) + u[8:]
h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(u), 7, 0, 64, 17, 0, socket.inet_aton(src),
                socket.inet_aton(dst))
h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind(("vg", 0))
s.send(hmac + s.getsockname()[4] + struct.pack("!H", 0x0800) + h + u)
print("sent")
"""


# In G: n sequential UDP A queries for argv[2] to argv[1]:53, each on a
# fresh socket as a stub does; prints how many got an answer with records,
# and their p50 and p99 in microseconds.
BURST = r"""
import socket, struct, sys, time
server, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
lat, ok = [], 0
for i in range(n):
    q = struct.pack(">HHHHHH", i, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
    t = time.perf_counter()
    try:
        s.sendto(q, (server, 53))
        m, _ = s.recvfrom(4096)
        # its id, NOERROR, at least one answer record
        if m[:2] == q[:2] and m[3] & 15 == 0 and m[6:8] != b"\0\0":
            ok += 1
            lat.append((time.perf_counter() - t) * 1e6)
    except OSError:
        pass
    s.close()
lat.sort()
print(ok, int(lat[len(lat) // 2]) if lat else -1, int(lat[len(lat) * 99 // 100]) if lat else -1)
"""


_added = []


def names(c):
    """dnsmasq serves NAME and NAME6 (added once per run)."""
    dm = need_dnsmasq(c)
    if not _added:
        dm.add_host(NAME, S_IP)
        dm.add_host(NAME6, S_IP6)
        _added.append(True)
    return dm


def dns_policy(c, extra=None):
    net = dict(REBIND_OK)
    net["dns_allow"] = ["*.ndok-%s.test" % TAG]
    if extra:
        net.update(extra)
    return nd_policy(c, ["tcp/%s:8000" % NAME, "tcp/%s:8000" % NAME6], extra_network=net)


@contextlib.contextmanager
def attached(c, before=None):
    """A topology whose vh is a device sandbox under dns_policy(); before(topo)
    runs ahead of the attach."""
    with Topo() as topo:
        if before:
            before(topo)
        sb = nd_attach(c, topo, dns_policy(c))
        try:
            yield topo, sb
        finally:
            nd_detach(c, topo)


def ask(topo, server, name, qtype="A", mode="udp", port=53, timeout=2.0):
    return dns_query(mode, server, port, name, qtype, timeout=timeout, netns=topo_ns(topo))


def ask_across_kill9(c, topo, name):
    """egressd killed (-9), a query for name sent from G while none runs,
    egressd started again: what the query got (it waits on the held
    listener for the successor)."""
    c.daemon.kill9()
    res = []
    t = threading.Thread(target=lambda: res.append(ask(topo, "10.78.0.3", name, timeout=15)))
    t.start()
    time.sleep(1.0)
    try:
        c.daemon.start()
    finally:
        t.join(30)
    return res[0] if res else ("", [], "", "no answer at all")


def topo_ns(topo):
    return "/run/netns/" + topo.g


def tcp_bytes(topo, host):
    return topo.ask("tcp").get("%s:8000" % host, 0)


def listener_port(topo, family):
    """The port of the sandbox's UDP DNS listener in H (vh's address)."""
    addr = "10.77.0.1" if family == 4 else "[fd77::1]"
    out = run(["ip", "netns", "exec", topo.h, "ss", "-Hnlu"]).stdout
    for line in out.splitlines():
        m = re.search(r"%s(?:%%\S+)?:(\d+)\s" % re.escape(addr), line + " ")
        if m:
            return int(m.group(1))
    raise TestFailure("no DNS listener on %s in H: %s" % (addr, out))


@test
def netdev_dns_udp_to_any_resolver_learns_for_this_sandbox(c):
    dm = names(c)
    with attached(c) as (topo, sb):
        # The twin first: before any lookup, the name's address is closed.
        check(topo.guest("tcp", "ND-pre", S_IP, "8000", "10") != "ok",
              "S reached before the name was resolved")
        before = tcp_bytes(topo, S_IP)
        for server in ("10.78.0.3", "192.0.2.53"):
            rc, addrs, src, line = ask(topo, server, NAME)
            check(rc == "NOERROR" and addrs == [S_IP], "A %s via %s: %s" % (NAME, server, line))
            check(src == "%s:53" % server, "the answer came from %r, not %s:53" % (src, server))
        check(dm.logged(NAME), "the allowed query never reached the upstream")
        check(topo.guest("tcp", "ND-post", S_IP, "8000", "300") == "ok",
              "the learned address did not open S:8000")
        check(tcp_bytes(topo, S_IP) >= before + 300, "S's server did not get the bytes")
        fr = topo.frames()
        check(topo.arrived("ND-post", fr) and not topo.arrived("ND-pre", fr),
              "arrivals before/after the lookup")
        # Only port 8000 of it (the rule's port), and nothing went to a
        # resolver: every port-53 packet was the proxy's.
        check(topo.guest("tcp", "ND-p", S_IP, "8001", "10") != "ok", "8001 opened too")
        check(not [f for f in fr if f.get("dport") == 53], "a port-53 packet reached S")
        # Learned for this sandbox only: a second device sandbox with the
        # same policy that never asked stays closed.
        with attached(c) as (other, sb2):
            check(other.guest("tcp", "ND-x", S_IP, "8000", "10") != "ok",
                  "another sandbox reached the address this one learned")
            rc, addrs, _, line = ask(other, "10.78.0.3", NAME)
            check(rc == "NOERROR", "the second sandbox's own lookup: %s" % line)
            check(other.guest("tcp", "ND-y", S_IP, "8000", "10") == "ok",
                  "the second sandbox's own lookup did not open it")
        check(sb2["id"] != sb["id"], "one id for two sandboxes")
        # A stub's burst: 200 sequential queries, each on a new socket (a
        # new entry in egr_nd_dns_nat), all answered.
        r = run(["ip", "netns", "exec", topo.g, sys.executable, "-c", BURST, "10.78.0.3", NAME,
                 "200"], timeout=120)
        ok, p50, p99 = (int(x) for x in r.stdout.split())
        log("netdev dns: %d of 200 sequential queries answered, p50 %d us, p99 %d us" %
            (ok, p50, p99))
        check(ok == 200, "%d of 200 sequential queries answered" % ok)


@test
def netdev_dns_refused_name_never_goes_upstream(c):
    dm = names(c)
    with attached(c) as (topo, _):
        bad = "ndref-%s.test" % TAG
        # What a cgroup sandbox gets: network.dns_reject, NXDOMAIN by default.
        rc, addrs, src, line = ask(topo, "10.78.0.3", bad)
        check(rc == "NXDOMAIN" and not addrs and src == "10.78.0.3:53",
              "a refused name: %s" % line)
        rc, addrs, _, line = ask(topo, "10.78.0.3", bad, mode="tcp")
        check(rc == "NXDOMAIN" and not addrs, "a refused name over TCP: %s" % line)
        # Its twin: an allowed name under dns_allow goes upstream.
        ok = "x.ndok-%s.test" % TAG
        rc, _, _, line = ask(topo, "10.78.0.3", ok)
        check(rc not in ("timeout", "eof", "badid", ""), "an allowed name: %s" % line)
        check(wait_until(lambda: dm.logged(ok), 5, 0.2),
              "the allowed name did not reach the upstream")
        check(not dm.logged(bad), "the refused name reached the upstream")


@test
def netdev_dns_over_tcp_to_any_resolver(c):
    names(c)
    with attached(c) as (topo, _):
        check(topo.guest("tcp", "ND-tpre", S_IP, "8000", "10") != "ok", "open before")
        for server in ("10.78.0.3", "198.51.100.53"):
            rc, addrs, src, line = ask(topo, server, NAME, mode="tcp")
            check(rc == "NOERROR" and addrs == [S_IP], "TCP A via %s: %s" % (server, line))
            check(src == "%s:53" % server, "TCP answer from %r" % src)
        check(topo.guest("tcp", "ND-tpost", S_IP, "8000", "10") == "ok",
              "the address learned over TCP did not open S:8000")
        fr = topo.frames()
        check(not [f for f in fr if f.get("dport") == 53], "a port-53 packet reached S")


@test
def netdev_dns_hostile_direct_listener_and_spoofed_source(c):
    dm = names(c)
    with attached(c) as (topo, _):
        p4, p6 = listener_port(topo, 4), listener_port(topo, 6)
        # Straight to the listener's address and port: not port 53, so
        # the allowlist judges it, and H's address is in no policy.
        direct = "nddirect-%s.ndok-%s.test" % (TAG, TAG)
        rc, _, _, line = ask(topo, H_IP, direct, port=p4, timeout=1.5)
        check(rc == "timeout", "the listener answered a direct query: %s" % line)
        rc, _, _, line = ask(topo, H_IP, direct, port=p4, mode="tcp", timeout=1.5)
        check(rc in ("timeout", "err"), "a TCP connection to the listener: %s" % line)
        rc, _, _, line = ask(topo, "fd77::1", direct, port=p6, timeout=1.5)
        check(rc == "timeout", "the IPv6 listener answered a direct query: %s" % line)
        # From behind H (S: in through hs) and from H itself (through lo):
        # the listeners are bound to vh, so neither can ask as the sandbox.
        for ns in ("/run/netns/" + topo.s, topo.netns):
            rc, _, _, line = dns_query("udp", H_IP, p4, direct, "A", timeout=1.5, netns=ns)
            check(rc == "timeout" or rc == "err", "the listener answered %s: %s" % (ns, line))
        time.sleep(0.3)
        check(not dm.logged(direct), "a direct query to the listener went upstream")
        # Its twin: port 53 of the same address is the proxy's.
        rc, _, src, line = ask(topo, H_IP, NAME)
        check(rc == "NOERROR" and src == "%s:53" % H_IP, "port 53 of H: %s" % line)
        # A spoofed source (an address not routed back through vh): never
        # reaches the proxy; the clean twin does.
        spoofed, clean = ("ndspoof-%s.ndok-%s.test" % (TAG, TAG),
                          "ndclean-%s.ndok-%s.test" % (TAG, TAG))
        for src_ip, name in (("10.77.0.9", spoofed), ("10.78.0.1", spoofed), (G_IP, clean)):
            r = run(["ip", "netns", "exec", topo.g, sys.executable, "-c", RAWQ, topo.hmac,
                     src_ip, "10.78.0.3", name])
            check(r.stdout.strip() == "sent", "raw query: %s" % r.stderr[-300:])
        check(wait_until(lambda: dm.logged(clean), 5, 0.2),
              "the clean raw query (the spoofed one's twin) did not reach the upstream")
        check(not dm.logged(spoofed), "a query with a spoofed source reached the upstream")
        # IPv6: any address, answered from it, and what it learns opens S.
        check(topo.guest("tcp", "ND-6pre", S_IP6, "8000", "10") != "ok", "v6 open before")
        rc, addrs, src, line = ask(topo, "2001:db8::53", NAME6, qtype="AAAA")
        check(rc == "NOERROR" and addrs == [S_IP6], "AAAA via 2001:db8::53: %s" % line)
        check(src == "2001:db8::53:53", "the v6 answer came from %r" % src)
        rc, addrs, _, line = ask(topo, "fd78::3", NAME6, qtype="AAAA", mode="tcp")
        check(rc == "NOERROR" and addrs == [S_IP6], "AAAA over TCP: %s" % line)
        check(topo.guest("tcp", "ND-6post", S_IP6, "8000", "10") == "ok",
              "the learned v6 address did not open S")


@test
def netdev_dns_device_without_ipv6_address_drops_ipv6_dns(c):
    names(c)
    # vh without its IPv6 address: no IPv6 listener, so no IPv6 DNS; the
    # attach works and IPv4 DNS is served.
    def no_v6(topo):
        sh("ip", "-n", topo.h, "-6", "addr", "del", "fd77::1/128", "dev", "vh")

    with attached(c, no_v6) as (topo, _):
        rc, _, _, line = ask(topo, "2001:db8::53", NAME6, qtype="AAAA", timeout=1.5)
        check(rc in ("timeout", "err"), "IPv6 DNS answered without a listener: %s" % line)
        rc, addrs, _, line = ask(topo, "10.78.0.3", NAME)
        check(rc == "NOERROR" and addrs == [S_IP], "IPv4 DNS (the twin): %s" % line)
        fr = topo.frames()
        check(not [f for f in fr if f.get("dport") == 53], "a port-53 packet reached S")
        with open(c.daemon_log, errors="replace") as f:
            check(re.search(r"device netdev:vh@%s has no IPv6" % re.escape(topo.netns),
                            f.read()), "the log does not say IPv6 DNS is dropped")


@test
def netdev_dns_survives_restart_and_update_on_the_same_port(c):
    names(c)
    with attached(c) as (topo, _):
        p4 = listener_port(topo, 4)
        rc, _, _, line = ask(topo, "10.78.0.3", NAME)
        check(rc == "NOERROR", "before the restart: %s" % line)
        # A query sent while no egressd runs waits on the held listener
        # and is answered by the successor (no failed query).
        rc, _, src, line = ask_across_kill9(c, topo, "ndheld-%s.ndok-%s.test" % (TAG, TAG))
        check(rc not in ("timeout", "eof", "badid", "") and src == "10.78.0.3:53",
              "the query sent while egressd was down: %s" % line)
        check(listener_port(topo, 4) == p4, "the listener's port changed across a restart")
        rc, addrs, src, line = ask(topo, "10.78.0.3", NAME)
        check(rc == "NOERROR" and addrs == [S_IP] and src == "10.78.0.3:53",
              "after the restart: %s" % line)
        check(topo.guest("tcp", "ND-r", S_IP, "8000", "10") == "ok", "learned after restart")
        # An update keeps the listeners (and their port); the new policy
        # decides at once: a name it no longer allows is refused.
        c.ctl_ok("update", "--netdev", "vh", "--netns", topo.netns, "--policy",
                 nd_policy(c, ["tcp/%s:8000" % NAME], extra_network=REBIND_OK))
        check(listener_port(topo, 4) == p4, "an update moved the listener")
        rc, addrs, _, line = ask(topo, "10.78.0.3", NAME)
        check(rc == "NOERROR" and addrs == [S_IP], "after the update: %s" % line)
        rc, addrs, _, line = ask(topo, "fd78::3", NAME6, qtype="AAAA")
        check(rc == "NXDOMAIN" and not addrs, "a name the update removed: %s" % line)


@test
def netdev_dns_on_the_tc_path(c):
    """Kernels without TCX: the tc clsact filters rewrite DNS the same way,
    and adoption's replaced filters (BPF_TC_F_REPLACE, one step each) answer
    a query queued across a restart."""
    names(c)
    old_env = c.daemon.env
    c.daemon.stop()
    c.daemon.env = dict(old_env or {}, EGRESSD_TEST_NETDEV_TC="1")
    try:
        c.daemon.start()
        with attached(c) as (topo, sb):
            check(sb["attach_mode"] == "tc", "not the tc path: %r" % sb)
            check(topo.guest("tcp", "ND-cpre", S_IP, "8000", "10") != "ok", "open before (tc)")
            for mode in ("udp", "tcp"):
                rc, addrs, src, line = ask(topo, "192.0.2.53", NAME, mode=mode)
                check(rc == "NOERROR" and addrs == [S_IP] and src == "192.0.2.53:53",
                      "%s DNS on the tc path: %s" % (mode, line))
            check(topo.guest("tcp", "ND-cpost", S_IP, "8000", "10") == "ok", "learned (tc)")
            rc, _, _, line = ask_across_kill9(c, topo, "ndtc-%s.ndok-%s.test" % (TAG, TAG))
            check(rc not in ("timeout", "eof", "badid", ""),
                  "a query queued across the restart (tc): %s" % line)
    finally:
        c.daemon.stop()
        c.daemon.env = old_env
        c.daemon.start()
