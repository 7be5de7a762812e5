# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""DNS filtering helpers (docs/dns.md): the dnsmasq upstream, a DNS client
run inside a sandbox, sandboxes in a network namespace."""

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time

from .core import CLEANUP, PROBE_TIMEOUT_S, TestFailure, check, log, wait_until
from .servers import join_cgroup_fn
from .ctx import Sandbox

__all__ = ["DNSMASQ", "DNS_MIN_TTL", "DNS_SHORT_TTL", "DNS_LONG_TTL", "DNS_ZONE",
           "DNS_WILDCARD_ADDR", "DNS_ZONE6", "DNS_REBIND_LO", "Dnsmasq",
           "free_udp_tcp_port", "DNS_CLIENT", "dns_query", "run_in_sandbox",
           "need_dnsmasq", "start_dns_upstream", "NsSandbox", "dns_ok", "dns_refused",
           "dns_not_upstream", "srv", "spawn_forwarding_dnsmasq", "dns_stream_start",
           "dns_stream_wait", "dns_stream_end"]


# --- DNS filtering (docs/dns.md) ------------------------------------------------------
#
# A real dnsmasq on 127.0.0.1:<free port> is egressd's only upstream
# (--dns-upstream); it serves the test zone below and logs every query it
# receives, so a test can tell what reached the upstream. Every resolver a
# sandbox names is on loopback (127.0.0.2, 127.0.0.53, ::1) or inside the
# test's own netns: were a redirect ever missed, the packet stays on this host.

DNSMASQ = "/usr/sbin/dnsmasq"
DNS_MIN_TTL = 1                # egressd --dns-min-ttl
DNS_SHORT_TTL = 2              # TTL of short.test
DNS_LONG_TTL = 300             # every other name (--local-ttl)
# name -> address; the harness's servers for these tests listen there.
DNS_ZONE = {
    "api.test": "127.0.0.21",
    "short.test": "127.0.0.22",
    "target.test": "127.0.0.24",   # alias.test is a CNAME to it
    "keep.test": "127.0.0.25",
    "denied.test": "127.0.0.26",   # exists upstream, in no policy
}
DNS_WILDCARD_ADDR = "127.0.0.23"   # example.test and everything below it
DNS_ZONE6 = {"api6.test": "::1"}
# The zone answers with loopback addresses, which the proxy strips as DNS
# rebinding unless the policy expects them (docs/dns.md, "Rebinding").
DNS_REBIND_LO = {"dns_rebind_allow": ["127.0.0.0/8", "::1/128"]}


class Dnsmasq:
    """dnsmasq serving the test zone on 127.0.0.1:port, queries logged to a file."""

    def __init__(self, work):
        self.log = os.path.join(work, "dnsmasq.log")
        self.hosts = os.path.join(work, "dnsmasq.hosts")  # names added later (SIGHUP)
        with open(self.hosts, "w"):
            pass
        self.proc = None
        self.port = None
        for _ in range(20):
            port = free_udp_tcp_port("127.0.0.1")
            argv = [DNSMASQ, "--conf-file=/dev/null", "--no-daemon", "--bind-interfaces",
                    "--listen-address=127.0.0.1", "--port=%d" % port, "--no-resolv",
                    "--no-hosts", "--no-negcache", "--user=root",
                    "--pid-file=" + os.path.join(work, "dnsmasq.pid"),
                    "--log-queries", "--log-facility=" + self.log,
                    "--local-ttl=%d" % DNS_LONG_TTL, "--addn-hosts=" + self.hosts,
                    "--host-record=short.test,%s,%d" % (DNS_ZONE["short.test"], DNS_SHORT_TTL),
                    "--address=/example.test/" + DNS_WILDCARD_ADDR,
                    "--cname=alias.test,target.test",
                    "--txt-record=api.test,e2e-txt"]
            for name, addr in list(DNS_ZONE.items()) + list(DNS_ZONE6.items()):
                if name != "short.test":
                    argv.append("--host-record=%s,%s" % (name, addr))
            # stderr to a file, never a pipe: when its log file falls behind
            # (a burst of logged queries) dnsmasq echoes the log lines to
            # stderr, and a pipe nobody reads blocks it for good.
            errf = os.path.join(work, "dnsmasq.stderr")
            with open(errf, "w") as ef:
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL, stderr=ef)
            self.port = port
            if wait_until(lambda: self.proc.poll() is not None or
                          dns_query("udp", "127.0.0.1", port, "api.test", "A",
                                    timeout=0.5)[0] == "NOERROR",
                          5, 0.05) and self.proc.poll() is None:
                log("dnsmasq pid %d on 127.0.0.1:%d" % (self.proc.pid, port))
                return
            with open(errf) as ef:
                err = ef.read() if self.proc.poll() is not None else ""
            self.stop()
            if "in use" not in err:
                raise RuntimeError("dnsmasq did not start: %s" % err.strip())
        raise RuntimeError("dnsmasq: no free port")

    def add_host(self, name, addr):
        with open(self.hosts, "a") as f:
            f.write("%s %s\n" % (addr, name))
        self.proc.send_signal(signal.SIGHUP)   # rereads --addn-hosts
        if not wait_until(lambda: addr in dns_query("udp", "127.0.0.1", self.port, name,
                                                    "AAAA" if ":" in addr else "A")[1],
                          5, 0.1):
            raise TestFailure("dnsmasq does not serve %s -> %s after SIGHUP" % (name, addr))

    def logged(self, name):
        """Did a query for a name containing name reach dnsmasq? (case-insensitive)"""
        try:
            with open(self.log, errors="replace") as f:
                lines = f.read().lower().splitlines()
        except OSError:
            return False
        return any("query[" in l and name.lower().rstrip(".") in l for l in lines)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def free_udp_tcp_port(host):
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.bind((host, 0))
            port = u.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
                try:
                    t.bind((host, port))
                    return port
                except OSError:
                    continue
    raise RuntimeError("no port free for both UDP and TCP on %s" % host)


# A DNS client run inside a sandbox (python3 -c DNS_CLIENT MODE ...). One line:
#   RCODE ADDRS from SRC:PORT    (ADDRS comma-separated A/AAAA data, or -)
#   timeout | eof | err ERRNAME | badid      (no usable answer)
#   gai: ok ADDRS | gaierror N MSG
DNS_CLIENT = r"""
import errno, random, socket, struct, sys
RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}
TYPES = {"A": 1, "AAAA": 28, "CNAME": 5, "TXT": 16, "MX": 15, "ANY": 255}
def out(s):
    print(s, flush=True)
    sys.exit(0)
mode = sys.argv[1]
if mode == "gai":
    try:
        r = socket.getaddrinfo(sys.argv[2], 80, socket.AF_INET, socket.SOCK_STREAM)
        out("ok " + ",".join(sorted(set(a[4][0] for a in r))))
    except socket.gaierror as e:
        out("gaierror %d %s" % (e.errno, e.strerror))
server, port, name, qtype = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
timeout = float(sys.argv[6]) if len(sys.argv) > 6 else 2.0
qid = random.getrandbits(16)
q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
for label in name.rstrip(".").split("."):
    q += bytes([len(label)]) + label.encode()
q += b"\0" + struct.pack(">HH", TYPES[qtype], 1)
fam = socket.AF_INET6 if ":" in server else socket.AF_INET
try:
    if mode == "tcp":
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect((server, port))
        s.sendall(struct.pack(">H", len(q)) + q)
        buf = b""
        while len(buf) < 2 or len(buf) < 2 + struct.unpack(">H", buf[:2])[0]:
            d = s.recv(65535)
            if not d:
                out("eof")
            buf += d
        m = buf[2:2 + struct.unpack(">H", buf[:2])[0]]
        src = s.getpeername()
    else:
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.settimeout(timeout)
        if mode == "udp-connect":
            s.connect((server, port))
            s.send(q)
        else:
            s.sendto(q, (server, port))
        m, src = s.recvfrom(65535)
except socket.timeout:
    out("timeout")
except OSError as e:
    out("err %s" % errno.errorcode.get(e.errno, e.errno))
if len(m) < 12 or struct.unpack(">H", m[:2])[0] != qid:
    out("badid")
flags, qd, an = struct.unpack(">HHH", m[2:8])
def skip(i):
    while True:
        n = m[i]
        if n == 0:
            return i + 1
        if n & 0xc0 == 0xc0:
            return i + 2
        i += n + 1
i = 12
for _ in range(qd):
    i = skip(i) + 4
addrs = []
for _ in range(an):
    i = skip(i)
    t, _c, _ttl, rdlen = struct.unpack(">HHIH", m[i:i + 10])
    i += 10
    if t == 1:
        addrs.append(socket.inet_ntop(socket.AF_INET, m[i:i + 4]))
    elif t == 28:
        addrs.append(socket.inet_ntop(socket.AF_INET6, m[i:i + 16]))
    elif t == 16:
        addrs.append("txt")
    i += rdlen
out("%s %s from %s:%d" % (RCODES.get(flags & 15, str(flags & 15)), ",".join(addrs) or "-",
                         src[0], src[1]))
"""


def spawn_forwarding_dnsmasq(work, tag, extra):
    """A second dnsmasq on 127.0.0.1 (a free port) that serves api.test
    itself, with extra options (its forwarders: the harness's Dnsmasq cannot
    be given one). (proc, port) once it answers api.test; TestFailure if it
    never does. The caller stops proc."""
    for _ in range(20):
        port = free_udp_tcp_port("127.0.0.1")
        argv = [DNSMASQ, "--conf-file=/dev/null", "--no-daemon", "--bind-interfaces",
                "--listen-address=127.0.0.1", "--port=%d" % port, "--no-resolv",
                "--no-hosts", "--no-negcache", "--user=root", "--dns-forward-max=10000",
                "--pid-file=" + os.path.join(work, "dnsmasq-%s.pid" % tag),
                "--local-ttl=%d" % DNS_LONG_TTL,
                "--host-record=api.test,%s" % DNS_ZONE["api.test"]] + list(extra)
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        if wait_until(lambda: proc.poll() is not None or
                      dns_query("udp", "127.0.0.1", port, "api.test", "A",
                                timeout=0.5)[0] == "NOERROR", 5, 0.05) \
                and proc.poll() is None:
            return proc, port
        if proc.poll() is None:
            proc.kill()
        proc.wait(5)
    raise TestFailure("the %s dnsmasq did not start" % tag)


def dns_query(mode, server, port, name, qtype, timeout=2.0, cg=None, netns=None, resolv=None):
    """Run DNS_CLIENT (in cgroup cg, network namespace netns, with /etc/resolv.conf
    replaced by the file resolv in a private mount namespace). Returns
    (rcode or failure word, [addresses], source "addr:port", whole line)."""
    args = [mode] + ([name] if mode == "gai" else [server, str(port), name, qtype, str(timeout)])
    line = run_in_sandbox(cg, [sys.executable, "-c", DNS_CLIENT] + args, netns=netns,
                          resolv=resolv, timeout=timeout + 8)
    parts = line.split()
    if not parts:
        return ("", [], "", line)
    if parts[0] == "ok":
        return ("ok", parts[1].split(","), "", line)
    if len(parts) >= 4 and parts[2] == "from":
        return (parts[0], [] if parts[1] == "-" else parts[1].split(","), parts[3], line)
    return (parts[0], [], "", line)


def run_in_sandbox(cg, argv, netns=None, resolv=None, timeout=PROBE_TIMEOUT_S):
    """argv's first line of output; run inside cgroup cg (None: outside every
    sandbox), optionally in a network namespace (nsenter) and with a private
    mount namespace where resolv (a file) is /etc/resolv.conf and the hosts
    lookup is "files dns"."""
    if netns:
        argv = ["nsenter", "--net=" + netns] + argv
    if resolv:
        nss = resolv + ".nsswitch"
        with open(nss, "w") as f:
            f.write("hosts: files dns\n")
        # unshare(1) makes the new mount namespace's propagation private: the
        # bind mounts vanish with the process.
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount --bind "$1" /etc/resolv.conf && mount --bind "$2" /etc/nsswitch.conf '
                '&& shift 2 && exec "$@"', "sh", resolv, nss] + argv
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=timeout,
                           preexec_fn=join_cgroup_fn(cg))
    except subprocess.TimeoutExpired:
        raise TestFailure("`%s` did not finish within %d s" % (" ".join(argv[:6]), timeout))
    out = r.stdout.strip()
    log("%s -> %r%s" % (" ".join(a for a in argv if "\n" not in a)[-160:], out,
                        (" (%s)" % r.stderr.strip()) if r.stderr.strip() else ""))
    if not out:
        raise TestFailure("`%s` printed nothing (exit %d): %s" %
                          (" ".join(a for a in argv if "\n" not in a), r.returncode,
                           r.stderr.strip()[-500:]))
    return out.splitlines()[0]


def need_dnsmasq(c):
    if c.dnsmasq is None:
        raise TestFailure("no dnsmasq upstream: %s" % c.dnsmasq_error)
    return c.dnsmasq


def start_dns_upstream(ctx):
    """Before egressd starts: dnsmasq, and egressd's --dns-upstream pointing at
    it. Without dnsmasq the DNS tests fail (the others run), and egressd still
    gets a loopback upstream where nothing listens, never the host's resolver."""
    ctx.dnsmasq = None
    ctx.dnsmasq_error = None
    port = None
    if not os.access(DNSMASQ, os.X_OK):
        ctx.dnsmasq_error = "%s is not installed (Debian package dnsmasq-base)" % DNSMASQ
    else:
        try:
            ctx.dnsmasq = Dnsmasq(ctx.work)
            port = ctx.dnsmasq.port
        except Exception as e:
            ctx.dnsmasq_error = str(e)
        CLEANUP.push("dnsmasq", lambda: ctx.dnsmasq and ctx.dnsmasq.stop())
    if port is None:
        port = free_udp_tcp_port("127.0.0.1")
    ctx.dns_args = [
        "--dns-upstream", "127.0.0.1:%d" % port, "--dns-min-ttl", str(DNS_MIN_TTL)]


class NsSandbox(Sandbox):
    """A sandbox whose processes run in the network namespace netns (a path):
    egressd opens its DNS listeners inside it."""

    def __init__(self, ctx, policy_path, netns, name="nssb"):
        super().__init__(ctx, policy_path, name)
        self.netns = netns

    def attach(self):
        r = self.ctx.ctl("attach", "--cgroup", self.cg, "--policy", self.policy,
                         "--netns", self.netns)
        if r.returncode != 0:
            raise TestFailure("attach %s --netns %s: exit %d: %s" %
                              (self.cg, self.netns, r.returncode, (r.stderr + r.stdout).strip()))
        self.attached = True

    def probe(self, *action):
        line = run_in_sandbox(self.cg, [self.ctx.netprobe] + [str(a) for a in action],
                              netns=self.netns)
        return line

    def allowed(self, *action):
        line = self.probe(*action)
        check(line == "ok", "expected allowed in netns: %s -> %r" % (action, line))

    def denied(self, *action, errno="EPERM"):
        line = self.probe(*action)
        check(line.startswith("err %s" % errno), "expected %s in netns: %s -> %r" %
              (errno, action, line))


def dns_ok(c, sb, name, qtype="A", mode="udp", server="127.0.0.2", want=None, netns=None):
    """sb resolves name through the resolver it names (redirected to its proxy):
    NOERROR, with want among the answers, and the reply appears to come from
    the resolver it asked (recvmsg rewrote the source)."""
    rc, addrs, src, line = dns_query(mode, server, 53, name, qtype, cg=sb.cg, netns=netns)
    check(rc == "NOERROR", "%s %s via %s/%s: expected NOERROR, got %r" %
          (name, qtype, mode, server, line))
    if want is not None:
        check(want in addrs, "%s %s: %s not in the answer %r" % (name, qtype, want, line))
    if mode != "tcp":
        want_src = ("[%s]" % server if ":" in server else server) + ":53"
        got_src = ("[%s]" % src.rsplit(":", 1)[0] if src.count(":") > 1 else
                   src.rsplit(":", 1)[0]) + ":" + src.rsplit(":", 1)[1]
        check(got_src == want_src, "%s: the reply's source is %s, not the resolver %s: "
              "recvmsg did not rewrite it" % (name, src, want_src))
    return addrs


def dns_refused(c, sb, name, qtype="A", mode="udp", server="127.0.0.2", netns=None):
    """The sandbox's policy denies name: NXDOMAIN (network.dns_reject's
    default) or REFUSED (dns_reject "refused", or a refused qtype)."""
    rc, addrs, src, line = dns_query(mode, server, 53, name, qtype, cg=sb.cg, netns=netns)
    check(rc in ("NXDOMAIN", "REFUSED") and not addrs,
          "%s %s via %s/%s: expected a denial (NXDOMAIN or REFUSED), got %r" %
          (name, qtype, mode, server, line))


def dns_not_upstream(c, marker, names):
    """marker (an allowed query) reached dnsmasq, none of names did."""
    z = need_dnsmasq(c)
    check(wait_until(lambda: z.logged(marker), 3), "the allowed marker query %s never "
          "appears in dnsmasq's log: the upstream log check proves nothing" % marker)
    for n in names:
        check(not z.logged(n), "the refused name %s reached the upstream (dnsmasq log)" % n)


def srv(c, key, name):
    """A TcpServer on the address name resolves to in the test zone."""
    return c.tcp(key, (DNS_ZONE.get(name) or DNS_ZONE6.get(name)))


# --- a stream of queries from inside a sandbox -------------------------------------------
#
# Queries (name:qtype, taken in turn) to 127.0.0.2:53 (the sandbox's proxy)
# over UDP or over one TCP connection (pipelined), one every INTERVAL s for
# DURATION s, several in flight, then MORE s of reading only. Prints
# "start", then at the end one JSON line per query: name, qtype, sent, got
# (CLOCK_MONOTONIC, comparable with the test's time.monotonic()), rcode
# (null: no answer); last {"closed": the TCP connection was closed}.
DNS_STREAM = r"""
import json, random, select, socket, struct, sys, time
mode, qs, interval, duration, more = (sys.argv[1], sys.argv[2].split(","), float(sys.argv[3]),
                                      float(sys.argv[4]), float(sys.argv[5]))
QT = {"A": 1, "AAAA": 28, "TXT": 16}
if mode == "udp":
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
else:
    s = socket.create_connection(("127.0.0.2", 53), timeout=2)
s.setblocking(False)
def query(qid, name, qt):
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\0" + struct.pack(">HH", QT[qt], 1)
sent, i, buf, closed, firsts = {}, 0, b"", False, set()
print("start", flush=True)
t0 = time.monotonic()
nxt = t0
def got(m):
    if len(m) >= 12:
        e = sent.get(struct.unpack(">H", m[:2])[0])
        if e is not None and e["got"] is None:
            e["got"] = time.monotonic()
            e["rcode"] = struct.unpack(">H", m[2:4])[0] & 15
            if e["name"] not in firsts:  # dns_stream_wait() reads these
                firsts.add(e["name"])
                print("first %s %d" % (e["name"], e["rcode"]), flush=True)
while True:
    now = time.monotonic()
    if now - t0 >= duration + more:
        break
    if now - t0 < duration and now >= nxt:
        qid = random.getrandbits(16)
        while qid in sent:
            qid = random.getrandbits(16)
        name, qt = qs[i % len(qs)].split(":")
        i += 1
        q = query(qid, name, qt)
        try:
            if mode == "udp":
                s.sendto(q, ("127.0.0.2", 53))
            else:
                s.setblocking(True)
                s.sendall(struct.pack(">H", len(q)) + q)
                s.setblocking(False)
        except OSError:
            pass
        sent[qid] = {"name": name, "qtype": qt, "sent": now, "got": None, "rcode": None}
        nxt += interval
    r, _, _ = select.select([s], [], [], 0.002)
    while r and not closed:
        try:
            m = s.recv(65536)
        except BlockingIOError:
            break
        except OSError:
            continue
        if mode == "udp":
            got(m)
            continue
        if not m:
            closed = True
            break
        buf += m
        while len(buf) >= 2 and len(buf) >= 2 + struct.unpack(">H", buf[:2])[0]:
            n = struct.unpack(">H", buf[:2])[0]
            got(buf[2:2 + n])
            buf = buf[2 + n:]
for e in sent.values():
    print(json.dumps(e))
print(json.dumps({"closed": closed}))
"""


def dns_stream_start(cg, mode, qs, interval=0.02, duration=2.0, more=1.0):
    """The stream, started in cgroup cg; mode "udp" or "tcp", qs
    ["name:A", ...]. Returns once it has started."""
    p = subprocess.Popen([sys.executable, "-c", DNS_STREAM, mode, ",".join(qs), str(interval),
                          str(duration), str(more)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=join_cgroup_fn(cg))
    CLEANUP.push("dns query stream", lambda: p.poll() is None and p.kill())
    check(p.stdout.readline().strip() == "start", "the query stream did not start")
    return p


def dns_stream_wait(p, name, timeout):
    """The rcode of the stream's first answer for name, once it came; None
    if none came within timeout (or the stream ended). Reads the pipe
    itself (only "first" lines come before the stream's end)."""
    end, buf, fd = time.monotonic() + timeout, b"", p.stdout.fileno()
    while time.monotonic() < end:
        r, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        if not r:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            w = line.decode(errors="replace").split()
            if len(w) == 3 and w[0] == "first" and w[1] == name:
                return int(w[2])
    return None


def dns_stream_end(p, timeout=30):
    """(the queries, was the TCP connection closed) once the stream ends."""
    out, err = p.communicate(timeout=timeout)
    check(p.returncode == 0, "the query stream failed: %r" % err[-400:])
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [r for r in rows if "name" in r], bool(rows and rows[-1].get("closed"))
