# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Red team 4's holes, fixed: a policy update used to destroy the sandbox's
# connections to its own DNS proxy (peer_allowed knew no rule for the
# proxy's loopback listener), losing every answer in flight for names the
# new policy still allows. registry/services.c `to_own_proxy` now keeps
# them, as it kept the inspecting proxy's: the proxy judges every query,
# and every answer to one asked under an older policy, under the new one.
#
# Run by run.py (harness.runner).

import subprocess
import sys
import time

from harness import *  # noqa: F401,F403
from test_redteam4 import NOERROR, RT4_KEEP_ADDR, rt4_dns_policy, rt4_with_slow_upstream


@test
def redteam4_update_keeps_dns_tcp_connection(c):
    """A sandbox allowing keep.test pipelines A queries for it on one TCP
    connection to 127.0.0.2:53 (a 400 ms upstream) while an update that
    changes nothing for DNS (one more outbound rule) is applied: the
    connection must survive and every query on it be answered (it was reset
    at once before the fix, 46 of 67 queries lost). A new connection
    resolves after the update too. The update's refusals still apply to
    what the new policy drops: test_redteam4's
    redteam4_dns_narrowed_in_flight_qtype_tcp_reattach and
    test_dnsupdate's dnsupdate_races_queries_in_flight."""
    def body():
        with Sandbox(c, rt4_dns_policy(c, ["keep.test"]), "rt4h-tcp") as sb:
            p = dns_stream_start(sb.cg, "tcp", ["keep.test:A"], interval=0.03)
            time.sleep(1.0)
            t0 = time.monotonic()
            sb.update(c.policy(["127.0.0.1:9"], extra_network=dict(
                DNS_REBIND_LO, dns_allow=["keep.test"])))
            t1 = time.monotonic()
            qs, ended = dns_stream_end(p)
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
def redteam4_update_keeps_connected_dns_udp_socket(c):
    """A connected UDP resolver socket (glibc's stub resolver connect()s
    its UDP socket to the nameserver) must still send and get answers after
    an update that keeps its name (its next send failed with EDESTADDRREQ
    before the fix). Twin: a new socket resolves."""
    need_dnsmasq(c)
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
