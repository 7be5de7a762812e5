# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Servers that run outside every sandbox: loopback TCP/UDP servers and a
network namespace joined to the host by a veth pair."""

import json
import os
import socket
import subprocess
import sys
import threading

from .core import CLEANUP, IF_TAG, PID, RUN_ID, must, run, wait_until

__all__ = ["join_cgroup_fn", "TcpServer", "UdpServer", "tcp_udp_pair", "NETNS_SERVER", "NetNs",
           "free_tcp_port", "FakeControl"]


# --- servers (in this process, outside every sandbox) -------------------------------


def join_cgroup_fn(cg):
    """A preexec_fn that moves the child into cgroup cg before exec (a socket
    keeps the cgroup it was created in); None when cg is None."""
    if cg is None:
        return None
    procs = os.path.join(cg, "cgroup.procs")

    def join():
        fd = os.open(procs, os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)
    return join


class TcpServer:
    """Accepts, reads what comes within 2 s, answers "pong", closes."""

    def __init__(self, host, port=0):
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(fam, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if fam == socket.AF_INET6:
            self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, 23, 16)  # TCP_FASTOPEN queue
        except OSError:
            pass
        self.sock.bind((host, port))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.host = host
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.stop = False
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted += 1
            try:
                c.settimeout(2)
                c.recv(64)
                c.sendall(b"pong")
            except OSError:
                pass
            finally:
                c.close()

    def close(self):
        self.stop = True
        self.thread.join(2)
        self.sock.close()


class UdpServer:
    """Counts the datagrams it receives."""

    def __init__(self, host, port=0):
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(fam, socket.SOCK_DGRAM)
        if fam == socket.AF_INET6:
            self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        self.sock.bind((host, port))
        self.sock.settimeout(0.2)
        self.host = host
        self.port = self.sock.getsockname()[1]
        self.received = 0
        self.stop = False
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stop:
            try:
                self.sock.recvfrom(2048)
            except socket.timeout:
                continue
            except OSError:
                return
            self.received += 1

    def wait_for(self, n, timeout=2):
        return wait_until(lambda: self.received >= n, timeout)

    def close(self):
        self.stop = True
        self.thread.join(2)
        self.sock.close()


class FakeControl:
    """A control socket that is not egressd: what egressctl does with an
    egressd that answers otherwise (an older one, a broken one). answer(req)
    gives the reply (a dict) to each request; `requests` records them. At
    most max_requests are answered, so a client that loops cannot hang the
    test."""

    def __init__(self, path, answer, max_requests=1000):
        self.path, self.answer, self.requests = path, answer, []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.max_requests = max_requests
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        CLEANUP.push("fake control socket %s" % path, self.close)

    def _serve(self):
        while not self.stop.is_set() and len(self.requests) < self.max_requests:
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            with conn:
                conn.settimeout(5)
                buf = b""
                try:
                    while not buf.endswith(b"\n"):
                        d = conn.recv(65536)
                        if not d:
                            break
                        buf += d
                    req = json.loads(buf)
                    self.requests.append(req)
                    conn.sendall((json.dumps(self.answer(req)) + "\n").encode())
                except (OSError, ValueError):
                    pass

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


def tcp_udp_pair(host, tries=20):
    """A TCP listener and a UDP socket on the same port number."""
    for _ in range(tries):
        t = TcpServer(host)
        try:
            u = UdpServer(host, t.port)
            return t, u
        except OSError:
            t.close()
    raise RuntimeError("no port free for both TCP and UDP on %s" % host)


# The server run inside the network namespace (python3 -c). It listens on every
# (address, port) given as argv, TCP and UDP, answers TCP with "pong", prints
# "ready" once bound and exits after 300 s or when its stdin closes.
NETNS_SERVER = r"""
import select, socket, sys, threading, time
socks = []
for spec in sys.argv[1:]:
    host, port = spec.rsplit(":", 1)
    host = host.strip("[]")
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    t = socket.socket(fam, socket.SOCK_STREAM)
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.bind((host, int(port))); t.listen(64)
    u = socket.socket(fam, socket.SOCK_DGRAM); u.bind((host, int(port)))
    socks += [t, u]
print("ready", flush=True)
def stdin_watch():
    sys.stdin.read()
    import os; os._exit(0)
threading.Thread(target=stdin_watch, daemon=True).start()
end = time.monotonic() + 300
while time.monotonic() < end:
    r, _, _ = select.select(socks, [], [], 1)
    for s in r:
        if s.type == socket.SOCK_STREAM:
            c, _ = s.accept(); c.settimeout(2)
            try:
                c.recv(64); c.sendall(b"pong")
            except OSError:
                pass
            c.close()
        else:
            s.recvfrom(2048)
"""


class NetNs:
    """A netns joined to the host by a veth pair.

    host side 10.254.X.1/30, namespace side 10.254.X.2/30 plus 10.254.X.5/32
    (routed from the host via .2), and fd00:e9e:X::1/64 <-> fd00:e9e:X::2/64.
    The namespace runs a python server on 8000, 8080 and 9000 of .2 and ::2,
    and on 8000 of .5.
    """

    PORTS = (8000, 8080, 9000)

    def __init__(self):
        self.name = RUN_ID
        self.host_if = "eh" + IF_TAG
        self.ns_if = "en" + IF_TAG
        self.proc = None
        x = None
        used = run(["ip", "-4", "addr", "show"]).stdout + run(["ip", "-4", "route", "show"]).stdout
        for i in range(256):
            cand = (PID + i) % 250 + 1
            if ("10.254.%d." % cand) not in used:
                x = cand
                break
        if x is None:
            raise RuntimeError("no free 10.254.x.0/29 block")
        self.x = x
        self.host4 = "10.254.%d.1" % x
        self.ns4 = "10.254.%d.2" % x
        self.ns4b = "10.254.%d.5" % x
        self.host6 = "fd00:e9e:%x::1" % x
        self.ns6 = "fd00:e9e:%x::2" % x
        CLEANUP.push("netns " + self.name, self.destroy)
        ns = ["ip", "netns", "exec", self.name]
        must(["ip", "netns", "add", self.name])
        must(["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if])
        must(["ip", "link", "set", "dev", self.host_if, "alias", RUN_ID])
        must(["ip", "link", "set", "dev", self.ns_if, "alias", RUN_ID])
        must(["ip", "link", "set", self.ns_if, "netns", self.name])
        must(["ip", "addr", "add", self.host4 + "/30", "dev", self.host_if])
        must(["ip", "-6", "addr", "add", self.host6 + "/64", "dev", self.host_if, "nodad"])
        must(["ip", "link", "set", self.host_if, "up"])
        must(ns + ["ip", "link", "set", "lo", "up"])
        must(ns + ["ip", "addr", "add", self.ns4 + "/30", "dev", self.ns_if])
        must(ns + ["ip", "addr", "add", self.ns4b + "/32", "dev", self.ns_if])
        must(ns + ["ip", "-6", "addr", "add", self.ns6 + "/64", "dev", self.ns_if, "nodad"])
        must(ns + ["ip", "link", "set", self.ns_if, "up"])
        must(["ip", "route", "add", "10.254.%d.4/30" % x, "via", self.ns4, "dev", self.host_if])
        specs = ["%s:%d" % (self.ns4, p) for p in self.PORTS]
        specs += ["[%s]:%d" % (self.ns6, p) for p in self.PORTS]
        specs += ["%s:8000" % self.ns4b]
        self.proc = subprocess.Popen(ns + [sys.executable, "-c", NETNS_SERVER] + specs,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        CLEANUP.push("netns server", self.stop_server)
        line = self._readline(10)
        if line.strip() != "ready":
            raise RuntimeError("netns server did not start: %r %s" % (line, self.server_err()))
        # The veth must pass traffic before a test relies on it.
        ok = wait_until(lambda: self._host_probe(self.ns4, 8000) and
                        self._host_probe(self.ns6, 8000) and
                        self._host_probe(self.ns4b, 8000), 10, 0.2)
        if not ok:
            raise RuntimeError("netns %s is not reachable over %s" % (self.name, self.host_if))

    def _readline(self, timeout):
        out = []
        t = threading.Thread(target=lambda: out.append(self.proc.stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        return out[0] if out else ""

    def server_err(self):
        if self.proc and self.proc.poll() is not None:
            return self.proc.stderr.read()
        return ""

    @staticmethod
    def _host_probe(host, port):
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            with socket.socket(fam, socket.SOCK_STREAM) as s:
                s.settimeout(1)
                s.connect((host, port))
                return True
        except OSError:
            return False

    def stop_server(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def destroy(self):
        self.stop_server()
        run(["ip", "link", "del", self.host_if])
        run(["ip", "netns", "del", self.name])


# --- metering, quotas, /metrics, billing, inbound (docs/metering.md) -----------------


def free_tcp_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
