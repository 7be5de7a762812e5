# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# One sandbox's relay work through the inspecting proxy must not slow a
# neighbour's DNS through the shared event loop (issue 23 finding 9): the
# proxy's work is bounded per sandbox and loop turn. A correctness bound
# here (the neighbour is answered, its p99 under the flood stays within a
# generous bound: 100 ms or 3x its own baseline); the figures are `make bench`'s
# (tools/bench_inspect.py --fair). Run by run.py (harness.runner).

import socket
import subprocess
import sys
import threading
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)
from test_inspect import INS_ADDR

# n connections through the proxy, each an HTTP head with a length no run
# reaches, then 1-byte writes round-robin for secs seconds.
FAIR_FLOOD = r"""
import socket, sys, time
host, port, n, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
head = b"POST /trickle HTTP/1.1\r\nHost: api.test\r\nContent-Length: 1000000000000\r\n\r\n"
socks = []
for _ in range(n):
    s = socket.create_connection((host, port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(head)
    s.setblocking(False)
    socks.append(s)
print("up", flush=True)
end, writes = time.monotonic() + secs, 0
while time.monotonic() < end:
    for s in socks:
        try:
            s.send(b"x")
            writes += 1
        except BlockingIOError:
            pass
print("writes", writes, flush=True)
"""

# n sequential A queries for name to server:53; prints "answered p50_ms p99_ms".
FAIR_DNS = r"""
import random, socket, struct, sys, time
server, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
lat, ok = [], 0
for i in range(n):
    qid = random.getrandbits(16)
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
    q += struct.pack(">HH", 1, 1)
    t = time.monotonic()
    s.sendto(q, (server, 53))
    try:
        while True:
            d = s.recv(512)
            if d[:2] == struct.pack(">H", qid):
                break
        ok += 1
    except socket.timeout:
        pass
    lat.append((time.monotonic() - t) * 1000)
    time.sleep(0.002)
lat.sort()
print(ok, "%.2f" % lat[len(lat) // 2], "%.2f" % lat[min(len(lat) - 1, int(len(lat) * 0.99))])
"""


class SinkServer:
    """Accepts and reads to EOF, answering nothing."""

    def __init__(self, host):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.loop, daemon=True).start()
        CLEANUP.push("sink server", self.sock.close)

    def loop(self):
        while True:
            try:
                s, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.drain, args=(s,), daemon=True).start()

    @staticmethod
    def drain(s):
        try:
            while s.recv(65536):
                pass
        except OSError:
            pass
        finally:
            s.close()


def fair_dns(sb, n):
    words = in_sandbox(sb.cg, FAIR_DNS, "127.0.0.2", "api.test", n, timeout=120)
    check(len(words) == 3, "the neighbour's DNS client printed %r" % words)
    return int(words[0]), float(words[1]), float(words[2])


def fair_policy(c, port):
    return c.policy(["tcp/api.test:%d" % port],
                    extra_network={"inspect": True, "dns_rebind_allow": ["127.0.0.0/8"]})


@test
def inspect_relay_flood_leaves_neighbour_dns_answered(c):
    need_dnsmasq(c)
    sink = SinkServer(INS_ADDR)
    n_q = 250
    with Sandbox(c, fair_policy(c, sink.port)) as noisy, \
            Sandbox(c, fair_policy(c, sink.port)) as victim:
        dns_ok(c, noisy, "api.test", want=INS_ADDR)
        # Baseline, in this run, on this machine.
        ok0, p50_0, p99_0 = fair_dns(victim, n_q)
        check(ok0 == n_q, "baseline: %d of %d queries answered" % (ok0, n_q))
        flood = subprocess.Popen([sys.executable, "-c", FAIR_FLOOD, INS_ADDR, str(sink.port),
                                  "100", "6"], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 preexec_fn=join_cgroup_fn(noisy.cg))
        CLEANUP.push("relay flood", lambda: flood.poll() is None and flood.kill())
        check(flood.stdout.readline().strip() == "up", "the flood did not connect: %r" %
              flood.stderr.read()[-300:] if flood.poll() is not None else "")
        time.sleep(0.5)
        ok1, p50_1, p99_1 = fair_dns(victim, n_q)
        out, err = flood.communicate(timeout=60)
        log("neighbour DNS p50/p99 ms: baseline %.2f/%.2f, under a 100-connection 1-byte "
            "relay flood %.2f/%.2f; flood: %s" % (p50_0, p99_0, p50_1, p99_1, out.strip()))
        writes = int(out.split()[-1]) if out.split() else 0
        check(writes > 10000, "the flood hardly wrote (%d writes): the test proves nothing" %
              writes)
        check(ok1 == n_q, "under the flood %d of %d of the neighbour's queries answered" %
              (ok1, n_q))
        # Generous: on the loaded 2-CPU dev VM the flood's own process and
        # dnsmasq compete for the CPUs whatever the loop does (without the
        # budget: 217-375 ms; with it 3-81 ms); the figures are the bench's.
        bound = max(100.0, 3 * p99_0)
        check(p99_1 < bound, "the neighbour's DNS p99 went from %.2f to %.2f ms under "
              "another sandbox's relay flood (bound %.0f ms)" % (p99_0, p99_1, bound))
