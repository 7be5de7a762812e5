# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# The DNS proxy's batched datagram I/O (docs/dns.md "How the proxy decides",
# user/egressd/dns/dns_io.c).
#
# One recvmmsg() now takes several datagrams of a listener at once, and one
# sendmmsg() sends the replies of a batch. The per-datagram checks must hold
# inside a batch: a stranger's datagrams that arrive between a sandbox's own
# (same listener, same recvmmsg) are dropped and counted as foreign, and
# every one of the sandbox's own is answered, none of them to the stranger.

import subprocess
import sys
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)

DNSB_BURST = r"""
import socket, struct, sys, time
host, port = sys.argv[1].rsplit(":", 1)
port, name, n, t0 = int(port), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 0))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
q = b""
for label in name.split("."):
    q += bytes([len(label)]) + label.encode()
q += b"\0" + struct.pack(">HH", 1, 1)
while time.time() < t0:          # both senders start together
    time.sleep(0.001)
for i in range(n):               # back to back: the listener reads them in batches
    s.sendto(struct.pack(">HHHHHH", 0x4000 + i, 0x0100, 1, 0, 0, 0) + q, (host, port))
ids, bad = set(), 0
s.settimeout(0.5)
deadline = time.time() + 5
while len(ids) < n and time.time() < deadline:
    try:
        m = s.recv(4096)
    except socket.timeout:
        break
    qid = struct.unpack(">H", m[:2])[0]
    if m[3] & 15 or not 0x4000 <= qid < 0x4000 + n:
        bad += 1
    else:
        ids.add(qid)
print("answered %d bad %d" % (len(ids), bad))
"""

DNSB_N = 64


def dnsb_burst(cg, host, port, name, t0):
    return subprocess.Popen([sys.executable, "-c", DNSB_BURST, "%s:%d" % (host, port), name,
                             str(DNSB_N), "%.3f" % t0],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=join_cgroup_fn(cg))


def dnsb_result(p, who):
    CLEANUP.push("dns burst %s" % who, lambda: p.poll() is None and p.kill())
    out, err = p.communicate(timeout=60)
    w = out.split()
    check(len(w) == 4 and w[0] == "answered",
          "the %s burst did not run: %r %r" % (who, out, err[-300:]))
    return int(w[1]), int(w[3])


def dnsb_proxy(c, sb):
    s = c.find_sandbox(sb.cg)
    check(s is not None, "sandbox %s not listed" % sb.cg)
    p = (s.get("dns") or {}).get("proxy")
    check(isinstance(p, dict), "`list --json` has no dns.proxy figures: %r" % s.get("dns"))
    return p


@test
def dns_batch_foreign_interleaved(c):
    need_dnsmasq(c)
    pol = c.policy([], extra_network=dict(DNS_REBIND_LO, dns_allow=["api.test"]),
                   tenant="dnsb")
    with Sandbox(c, pol, "dnsb-%s" % RAND) as sb:
        port = (c.find_sandbox(sb.cg).get("dns") or {}).get("port4")
        check(port, "no DNS listener port in `list --json`")
        before = dnsb_proxy(c, sb)
        # Hostile: root outside every sandbox sends the same query to the
        # sandbox's listener port while the sandbox sends its own burst, so
        # the two interleave in the listener's queue and its recvmmsg()
        # batches. Sanity twin: the sandbox's own burst, through the kernel
        # redirect, is answered in full at the same time.
        t0 = time.time() + 0.3
        own = dnsb_burst(sb.cg, "127.0.0.2", 53, "api.test", t0)
        stranger = dnsb_burst(None, "127.0.0.1", port, "api.test", t0)
        a_own, bad_own = dnsb_result(own, "sandbox")
        a_str, bad_str = dnsb_result(stranger, "stranger")
        after = dnsb_proxy(c, sb)
        check(a_own == DNSB_N and bad_own == 0,
              "the sandbox's own burst: %d of %d answered, %d bad" % (a_own, DNSB_N, bad_own))
        check(a_str == 0 and bad_str == 0,
              "the stranger got %d answers (%d bad) on the sandbox's listener" %
              (a_str, bad_str))
        foreign = after.get("foreign_dropped", 0) - before.get("foreign_dropped", 0)
        allowed = after.get("allowed", 0) - before.get("allowed", 0)
        check(foreign == DNSB_N, "foreign_dropped went up by %d, not %d" % (foreign, DNSB_N))
        check(allowed == DNSB_N, "allowed went up by %d, not %d" % (allowed, DNSB_N))
