# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Helpers for metering, quotas, /metrics, billing and inbound traffic
(docs/metering.md)."""

import json
import os
import socket
import subprocess
import sys
import threading

from .core import CLEANUP, TestFailure, check, log
from .servers import join_cgroup_fn

__all__ = ["SinkServer", "SENDER", "in_sandbox", "stats", "sb_stats", "tenant_stats",
           "status_json", "FIELDS", "diff", "TCP4_MIN", "TCP4_MAX", "UDP4", "FIGURES",
           "parse_exposition", "scrape", "billing_lines", "BILLED", "billing_matches",
           "LISTENER", "run_listener", "UdpEcho", "knock"]


class SinkServer:
    """TCP: reads everything until EOF and counts it, then answers "pong"."""

    def __init__(self, host="127.0.0.1"):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received = 0
        self.stop = False
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()
        CLEANUP.push("sink server", self.close)

    def loop(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        try:
            c.settimeout(10)
            while True:
                d = c.recv(65536)
                if not d:
                    break
                self.received += len(d)
            c.sendall(b"pong")
        except OSError:
            pass
        finally:
            c.close()

    def close(self):
        self.stop = True
        self.thread.join(2)
        self.sock.close()


# Run inside a sandbox: send a known amount and say how it went.
#   tcp HOST PORT NBYTES [TIMEOUT]   connect, sendall, shutdown, wait for "pong"
#   udp HOST PORT COUNT SIZE         COUNT unconnected datagrams of SIZE bytes
SENDER = r"""
import socket, sys
mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "tcp":
    n = int(sys.argv[4]); tmo = float(sys.argv[5]) if len(sys.argv) > 5 else 10
    s = socket.create_connection((host, port), timeout=tmo)
    sent = 0; buf = b"x" * 65536
    try:
        while sent < n:
            k = s.send(buf[:min(65536, n - sent)])
            sent += k
        s.shutdown(socket.SHUT_WR)
        r = b""
        while True:
            d = s.recv(64)
            if not d: break
            r += d
        # tcpi_bytes_retrans (struct tcp_info, offset 208): retransmitted
        # payload is metered again, as it is sent again.
        info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
        retrans = int.from_bytes(info[208:216], "little") if len(info) >= 216 else 0
        print("ok", sent, retrans, r.decode(errors="replace"), flush=True)
    except socket.timeout:
        print("stalled", sent, flush=True)
else:
    count, size = int(sys.argv[4]), int(sys.argv[5])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ok = err = 0
    for i in range(count):
        try:
            s.sendto(b"y" * size, (host, port)); ok += 1
        except OSError as e:
            err += 1; last = e.errno
    print("ok" if not err else "err", ok, err, flush=True)
"""


def in_sandbox(cg, script, *args, timeout=30):
    """Run python3 -c script inside cgroup cg; its stdout's words."""
    join_cgroup = join_cgroup_fn(cg)

    r = subprocess.run([sys.executable, "-c", script] + [str(a) for a in args],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout, preexec_fn=join_cgroup)
    log("in sandbox: %s -> %d %r %r" % (" ".join(str(a) for a in args), r.returncode,
                                          r.stdout.strip(), r.stderr.strip()[-300:]))
    return r.stdout.split()


def stats(c, tenant=None):
    args = ["stats", "--json"] + (["--tenant", tenant] if tenant else [])
    r = c.ctl_ok(*args)
    try:
        return json.loads(r.stdout)
    except ValueError:
        raise TestFailure("`stats --json` printed no JSON: %r" % r.stdout[:300])


def sb_stats(c, sb):
    s = c.find_sandbox(sb.cg)
    check(s is not None, "sandbox %s not listed" % sb.cg)
    for row in stats(c)["sandboxes"]:
        if row["id"] == s["id"]:
            return row
    raise TestFailure("`stats` has no row for sandbox %d" % s["id"])


def tenant_stats(c, tenant):
    for row in stats(c, tenant)["tenants"]:
        if row["tenant"] == tenant:
            return row
    return None


def status_json(c):
    return json.loads(c.ctl_ok("status", "--json").stdout)


FIELDS = ("bytes_out", "packets_out", "bytes_in", "packets_in", "connections_allowed",
          "connections_denied", "datagrams_allowed", "datagrams_denied")


def diff(after, before):
    return {k: after[k] - before[k] for k in FIELDS}


# Per-packet overhead bounds (docs/metering.md): IPv4 header 20-60 bytes,
# TCP header 20-60, UDP header 8.
TCP4_MIN, TCP4_MAX, UDP4 = 40, 120, 28
FIGURES = {}


def parse_exposition(text):
    """Prometheus text format -> {(name, frozenset(labels)): value}, and the TYPEs."""
    samples, types = {}, {}
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3]
            continue
        i, labels = 0, {}
        while i < len(line) and line[i] not in "{ ":
            i += 1
        name = line[:i]
        if i < len(line) and line[i] == "{":
            i += 1
            while line[i] != "}":
                j = line.index("=", i)
                key = line[i:j].strip().lstrip(",").strip()
                check(line[j + 1] == '"', "bad label in %r" % line)
                k, val = j + 2, []
                while line[k] != '"':
                    if line[k] == "\\":
                        val.append({"n": "\n", "\\": "\\", '"': '"'}[line[k + 1]])
                        k += 2
                    else:
                        val.append(line[k])
                        k += 1
                labels[key] = "".join(val)
                i = k + 1
                while line[i] in ", ":
                    i += 1
            i += 1
        value = line[i:].split()[0]
        samples[(name, frozenset(labels.items()))] = float(value)
    return samples, types


def scrape(c, path="/metrics", method="GET"):
    import urllib.request
    import urllib.error
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (c.metrics_port, path), method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, "", ""


def billing_lines(c, tenant):
    path = os.path.join(c.state, "billing.jsonl")
    lines = []
    try:
        with open(path) as f:
            for l in f:
                o = json.loads(l)
                if o.get("tenant") == tenant:
                    lines.append(o)
    except FileNotFoundError:
        pass
    return lines


BILLED = ("bytes_out", "bytes_in", "packets_out", "packets_in", "connections_allowed",
          "connections_denied")


def billing_matches(c, tenant):
    lines = billing_lines(c, tenant)
    trow = tenant_stats(c, tenant)
    if not trow or not lines:
        return False
    return all(sum(l[k] for l in lines) == trow[k] for k in BILLED)


# Run inside a sandbox: listen on TCP and UDP, print the ports, count what
# arrives for ARGV[1] seconds; also talk to an outside echo (ARGV[2] TCP, ARGV[3]
# UDP) and report whether the replies came back.
LISTENER = r"""
import select, socket, sys, time
t = socket.socket(); t.bind(("127.0.0.1", 0)); t.listen(8); t.setblocking(False)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("127.0.0.1", 0))
print(t.getsockname()[1], u.getsockname()[1], flush=True)
end = time.time() + float(sys.argv[1]); acc = dg = 0
while time.time() < end:
    r, _, _ = select.select([t, u], [], [], 0.05)
    for s in r:
        if s is t:
            c, _ = t.accept(); acc += 1; c.close()
        else:
            u.recvfrom(2048); dg += 1
# our own connections get their replies
c = socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=3)
c.sendall(b"ping"); rep = c.recv(16)
e = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); e.settimeout(3)
e.sendto(b"ping", ("127.0.0.1", int(sys.argv[3])))
try:
    ur = e.recvfrom(64)[0]
except socket.timeout:
    ur = b"none"
print(acc, dg, rep.decode(errors="replace") or "eof", ur.decode(errors="replace"), flush=True)
"""


def run_listener(c, cg, tcp_port, udp_echo_port, seconds=2.0):
    join_cgroup = join_cgroup_fn(cg)

    p = subprocess.Popen([sys.executable, "-c", LISTENER, str(seconds), str(tcp_port),
                          str(udp_echo_port)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=join_cgroup)
    CLEANUP.push("listener", lambda: p.poll() is None and p.kill())
    first = p.stdout.readline().split()
    check(len(first) == 2, "listener in sandbox did not start: %r %s" % (first, p.stderr.read()
                                                                         if p.poll() else ""))
    return p, int(first[0]), int(first[1])


class UdpEcho:
    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stop = False
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()
        CLEANUP.push("udp echo", self.close)

    def loop(self):
        while not self.stop:
            try:
                d, a = self.sock.recvfrom(2048)
                self.sock.sendto(b"pong", a)
            except socket.timeout:
                continue
            except OSError:
                return

    def close(self):
        self.stop = True
        self.thread.join(2)
        self.sock.close()


def knock(tport, uport):
    """From outside every sandbox: a TCP connect and a UDP datagram."""
    tcp_ok = False
    try:
        with socket.create_connection(("127.0.0.1", tport), timeout=1.0):
            tcp_ok = True
    except OSError:
        pass
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"knock", ("127.0.0.1", uport))
    return tcp_ok
