# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Red team 4's holes: tests that FAIL on the code they were written against
# (b85cd69). run.py does not load this file (it loads test_*.py); run it on
# its own, as root, like run.py:
#   python3 tests/e2e/holes_redteam4.py --build build -k holes_redteam4 -v
# Each docstring says the mechanism and a suggested fix. Once fixed, move
# the test into test_redteam4.py.

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import *  # noqa: E402,F401,F403
from test_redteam4 import (NOERROR, RT4_KEEP_ADDR, rt4_dns_policy, rt4_stream,  # noqa: E402
                           rt4_stream_end, rt4_with_slow_upstream)


@test
def holes_redteam4_update_resets_dns_tcp_connection(c):
    """Not a bypass, a defect of the same claim ("a name still allowed takes
    the new policy's ports", dns.md): any policy update of a sandbox resets
    its DNS-over-TCP connections to the proxy, and every answer in flight
    on them (for names the new policy still allows) is lost.

    Reproduction: a sandbox allowing keep.test pipelines A queries for it on
    one TCP connection to 127.0.0.2:53 (a 400 ms upstream); an update that
    changes nothing for DNS (one more outbound rule) is applied; the
    connection is reset at once and the queries on it are never answered.

    Mechanism: egr_reg_update -> reg_close_refused (registry/services.c)
    walks the sandbox's connected TCP sockets with
    egr_sockdiag_destroy_refused and peer_allowed. A DNS connection's peer
    is the proxy's TCP listener (127.0.0.1:<port> or [::1]:<port>, where
    egr_connect4/6 redirected 127.0.0.2:53), which is no rule of the policy
    and no learned address, so it is destroyed. peer_allowed already spares
    the inspecting proxy's port in the same way.

    Suggested fix: in peer_allowed, keep a TCP connection whose peer is the
    sandbox's own DNS listener (the proxy re-judges each query under the
    new policy, refused_by_new_policy), e.g. pass the sandbox's TCP
    listener ports (egr_dnsproxy) into struct peer_judge as the inspect
    ports are."""
    def body():
        with Sandbox(c, rt4_dns_policy(c, ["keep.test"]), "rt4h-tcp") as sb:
            p = rt4_stream(c, sb.cg, "tcp", ["keep.test:A"], interval=0.03)
            time.sleep(1.0)
            t0 = time.monotonic()
            sb.update(c.policy(["127.0.0.1:9"], extra_network=dict(
                DNS_REBIND_LO, dns_allow=["keep.test"])))
            t1 = time.monotonic()
            qs, ended = rt4_stream_end(p)
            dns_ok(c, sb, "keep.test", mode="tcp", want=RT4_KEEP_ADDR)  # a new connection
        return qs, t0, t1, ended

    qs, t0, t1, ended = rt4_with_slow_upstream(c, body)
    check(any(q["rcode"] == NOERROR and q["got"] < t0 for q in qs if q["got"]),
          "keep.test never resolved before the update (proves nothing)")
    lost = [q for q in qs if q["rcode"] != NOERROR]
    check(not lost and not ended,
          "an update that keeps keep.test reset the sandbox's DNS TCP connection (ended: %s): "
          "%d of %d queries unanswered, the first sent %.0f ms before the update" %
          (ended, len(lost), len(qs), (t0 - min(q["sent"] for q in lost)) * 1000
           if lost else 0))


RT4H_CONNECTED_UDP = r"""
import errno, socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect(("127.0.0.2", 53))
s.settimeout(2)
def ask(qid):
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + b"\x03api\x04test\x00" + \
        struct.pack(">HH", 1, 1)
    try:
        s.send(q)
        m = s.recv(4096)
        return "rcode%d" % (struct.unpack(">H", m[2:4])[0] & 15)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno)) if e.errno else "timeout"
print(ask(1), flush=True)
sys.stdin.readline()
print(ask(2), flush=True)
"""


@test
def holes_redteam4_update_kills_connected_dns_udp_socket(c):
    """The same teardown for a connected UDP resolver socket (glibc's stub
    resolver connect()s its UDP socket to the nameserver): after any update
    the socket the sandbox keeps is destroyed (its next send fails), though
    the name stays allowed. Mechanism and fix as
    holes_redteam4_update_resets_dns_tcp_connection (peer_allowed does not
    know the sandbox's UDP listener either). Twin: a new socket resolves."""
    need_dnsmasq(c)
    import subprocess
    with Sandbox(c, c.policy([], extra_network=dict(DNS_REBIND_LO, dns_allow=["api.test"])),
                 "rt4h-udp") as sb:
        p = subprocess.Popen([sys.executable, "-c", RT4H_CONNECTED_UDP], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=join_cgroup_fn(sb.cg))
        CLEANUP.push("rt4h udp", lambda: p.poll() is None and p.kill())
        first = p.stdout.readline().strip()
        check(first == "rcode0", "the connected socket's first query: %r" % first)
        sb.update(c.policy(["127.0.0.1:9"], extra_network=dict(DNS_REBIND_LO,
                                                              dns_allow=["api.test"])))
        out, _ = p.communicate("go\n", timeout=10)
        dns_ok(c, sb, "api.test", want=DNS_ZONE["api.test"])
        check(out.strip() == "rcode0", "the same connected socket after an update that keeps "
              "api.test: %r (want rcode0)" % out.strip())


if __name__ == "__main__":
    from harness.runner import main
    sys.exit(main("red team 4 holes (tests that fail until fixed)"))
