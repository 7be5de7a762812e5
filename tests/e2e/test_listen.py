# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Redirect targets nobody else can take (issue 23 finding 3; docs/security.md
# "Redirect targets nobody else can take"): run by run.py (harness.runner).
# A neighbour sandbox with inbound allow, and a process outside every
# sandbox, try to take a victim's inspecting-proxy and DNS listener ports,
# while egressd runs and while it is down; the victim's redirected HTTP
# request (with a bearer token) and DNS query must never reach them, and
# after a restart the victim's inspection works again on new ports. Sanity
# twins: an ordinary port binds, the victim's inspected request and DNS go
# through.

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)

LS_ADDR = DNS_ZONE["api.test"]  # 127.0.0.21
LS_SECRET = b"Bearer LISTEN-SECRET-23"

# The squatter: binds what argv names ("name:proto:addr:port" each), prints
# {name: "bound" or the errno name}, then for secs seconds accepts and reads
# everything that reaches what it bound, and prints {name: [connections or
# datagrams, bytes, saw the secret]}.
LS_SQUATTER = r'''
import errno, json, select, signal, socket, sys, time
secs = float(sys.argv[1])
end = time.monotonic() + secs
def tally(*_):
    global end
    end = 0
signal.signal(signal.SIGUSR1, tally)
res, socks = {}, {}
for spec in sys.argv[2:]:
    name, proto, addr, port = spec.split("|")
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    auto = proto.endswith("auto")  # no bind(): the port listen()/sendto() picks
    typ = socket.SOCK_STREAM if proto.startswith("tcp") else socket.SOCK_DGRAM
    s = socket.socket(fam, typ)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        if auto and typ == socket.SOCK_DGRAM:
            try:
                s.sendto(b"x", ("127.0.0.1", 9))
            except OSError:
                pass  # refused by the hook, but bound by then
        elif not auto:
            s.bind((addr, int(port)))
        if typ == socket.SOCK_STREAM:
            s.listen(64)
        s.setblocking(False)
        got_port = s.getsockname()[1]
        res[name] = "bound" if not auto and int(port) else "bound:%d" % got_port
        socks[s] = name
    except OSError as e:
        res[name] = errno.errorcode.get(e.errno, str(e.errno))
        s.close()
print(json.dumps(res), flush=True)
got = {n: [0, 0, False] for n in socks.values()}
conns = {}
while time.monotonic() < end:
    try:
        r, _, _ = select.select(list(socks) + list(conns), [], [], 0.1)
    except InterruptedError:
        continue
    for s in r:
        try:
            if s in conns:
                d = s.recv(65536)
                n = conns[s]
                if not d:
                    s.close(); del conns[s]; continue
            elif s.type == socket.SOCK_STREAM:
                a, _ = s.accept()
                a.setblocking(False)
                conns[a] = socks[s]
                got[socks[s]][0] += 1
                continue
            else:
                d = s.recv(65536)
                n = socks[s]
                got[n][0] += 1
        except OSError:
            continue
        got[n][1] += len(d)
        got[n][2] = got[n][2] or b"LISTEN-SECRET" in d
print(json.dumps(got), flush=True)
'''

# The victim's request: GET /private with a bearer token, to its allowed
# destination (redirected by the kernel to its inspecting proxy).
LS_VICTIM = r'''
import errno, socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=4)
    s.sendall(b"GET /private HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer "
              b"LISTEN-SECRET-23\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        d = s.recv(4096)
        if not d:
            break
        data += d
    print("ok" if b"200 OK" in data and b"listen-private" in data else "bad %r" % data[:80])
except socket.timeout:
    print("err timeout")
except OSError as e:
    print("err", errno.errorcode.get(e.errno, str(e.errno)))
'''


class LsHttp:
    """An HTTP/1.0 server on LS_ADDR answering 200 "listen-private"."""

    def __init__(self):
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind((LS_ADDR, 0))
        self.srv.listen(64)
        self.port = self.srv.getsockname()[1]
        self.stop = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()
        CLEANUP.push("listen http server", self.close)

    def serve(self):
        self.srv.settimeout(0.2)
        while not self.stop:
            try:
                a, _ = self.srv.accept()
            except OSError:
                continue
            try:
                a.settimeout(2)
                buf = b""
                while b"\r\n\r\n" not in buf:
                    d = a.recv(4096)
                    if not d:
                        break
                    buf += d
                a.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 14\r\n\r\nlisten-private")
            except OSError:
                pass
            finally:
                a.close()

    def close(self):
        self.stop = True
        self.thread.join(2)
        self.srv.close()


def ls_http(c):
    if getattr(c, "ls_http", None) is None:
        c.ls_http = LsHttp()
    return c.ls_http


def ls_victim_policy(c, port):
    net = {"dns_allow": ["api.test"], "inspect": True}
    if b"dns_rebind_allow" in open(c.egressd, "rb").read():
        net["dns_rebind_allow"] = ["127.0.0.0/8"]
    return c.policy(["tcp/api.test:%d" % port], extra_network=net)


def ls_ports(c, sb):
    s = c.find_sandbox(sb.cg)
    check(s is not None, "sandbox %s not listed" % sb.cg)
    ins, dns = s.get("inspect") or {}, s.get("dns") or {}
    check(ins.get("port4") and dns.get("port4"), "no inspect or DNS listener ports listed: %r"
          % s)
    return ins, dns


def ls_specs(ins, dns):
    specs = ["ins4|tcp|127.0.0.1|%d" % ins["port4"], "ins4any|tcp|0.0.0.0|%d" % ins["port4"],
             "dns4|udp|127.0.0.1|%d" % dns["port4"], "dns4any|udp|0.0.0.0|%d" % dns["port4"],
             "dnstcp4|tcp|127.0.0.1|%d" % dns["port4"]]
    if ins.get("port6"):
        specs += ["ins6|tcp|::1|%d" % ins["port6"], "ins6any|tcp|::|%d" % ins["port6"]]
    if dns.get("port6"):
        specs += ["dns6|udp|::1|%d" % dns["port6"]]
    return specs


class LsSquatter:
    """LS_SQUATTER running in cgroup cg (None: outside every sandbox)."""

    def __init__(self, cg, specs, secs, netns=None):
        pre = ["nsenter", "--net=" + netns] if netns else []
        self.p = subprocess.Popen(pre + [sys.executable, "-c", LS_SQUATTER, str(secs)] + specs,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True,
                                  preexec_fn=join_cgroup_fn(cg))
        CLEANUP.push("squatter", self.kill)
        line = self.p.stdout.readline()
        if not line.strip():
            raise TestFailure("the squatter printed nothing: %s" % self.p.stderr.read()[-300:])
        self.bound = json.loads(line)
        log("squatter (%s) binds: %r" % ("in a sandbox" if cg else "outside", self.bound))

    def received(self, timeout=30):
        """Stop it and take its tally."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGUSR1)
        out, err = self.p.communicate(timeout=timeout)
        check(out.strip(), "the squatter printed no tally: %s" % err[-300:])
        got = json.loads(out.strip().splitlines()[-1])
        log("squatter received: %r" % got)
        return got

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(5)


def ls_victim_request(c, sb, port):
    out = in_sandbox(sb.cg, LS_VICTIM, LS_ADDR, port, timeout=20)
    return " ".join(out)


def ls_victim_dns(sb):
    """One A query of the victim, whatever becomes of it (udp and tcp)."""
    for mode in ("udp", "tcp"):
        try:
            dns_query(mode, "127.0.0.2", 53, "api.test", "A", timeout=1.5, cg=sb.cg)
        except TestFailure as e:
            log("victim DNS (%s): %s" % (mode, e))


def ls_check_nothing_reached(got, what):
    for name, (n, nbytes, secret) in got.items():
        check(n == 0 and nbytes == 0 and not secret,
              "%s: the squatter's %s got %d connection(s)/datagram(s), %d byte(s)%s of the "
              "victim's redirected traffic" % (what, name, n, nbytes,
                                               ", the bearer token among them" if secret
                                               else ""))


def ls_neighbour(c):
    return Sandbox(c, c.policy([], extra_network={"inbound": "allow"}), "lssquat")


@test
def listen_neighbour_cannot_bind_proxy_ports_while_running(c):
    need_dnsmasq(c)
    http = ls_http(c)
    with Sandbox(c, ls_victim_policy(c, http.port), "lsvictim") as v, ls_neighbour(c) as n:
        ins, dns = ls_ports(c, v)
        sq = LsSquatter(n.cg, ls_specs(ins, dns), 0.1)
        sq.received()
        for name, r in sq.bound.items():
            check(r in ("EPERM", "EADDRINUSE"), "a neighbour bound the victim's %s port while "
                  "egressd runs: %r" % (name, sq.bound))
        # Sanity twins: an ordinary port (and port 0) binds fine in the
        # same sandbox, the same way.
        free, free2 = free_tcp_port(), free_tcp_port()
        ok = LsSquatter(n.cg, ["tcp|tcp|127.0.0.1|%d" % free, "any|tcp|0.0.0.0|%d" % free2,
                               "udp|udp|0.0.0.0|%d" % free, "zero|udp|127.0.0.1|0",
                               "zero6|tcp|::|0"], 0.1)
        ok.received()
        check(all(r.startswith("bound") for r in ok.bound.values()), "an ordinary bind in the "
              "neighbour sandbox was refused: %r" % ok.bound)
        # The victim's inspected request and DNS go through normally.
        dns_ok(c, v, "api.test", want=LS_ADDR)
        r = ls_victim_request(c, v, http.port)
        check(r == "ok", "the victim's inspected request failed: %r" % r)


@test
def listen_squatters_get_nothing_while_egressd_is_down(c):
    need_dnsmasq(c)
    http = ls_http(c)
    v = Sandbox(c, ls_victim_policy(c, http.port), "lsvictim")
    n = ls_neighbour(c)
    host = None
    try:
        v.attach()
        n.attach()
        dns_ok(c, v, "api.test", want=LS_ADDR)
        check(ls_victim_request(c, v, http.port) == "ok", "the victim's request failed "
              "before the test")
        ins, dns = ls_ports(c, v)
        specs = ls_specs(ins, dns)
        c.daemon.kill9()
        # And its listener holder (docs/operations.md "Restarts"), which
        # would keep the ports taken: the kernel's marks are what is tested.
        quit_listener_holder(c.sock + ".hold")
        # The neighbour (root in its sandbox, inbound allow): refused, also
        # now that the ports are free. A process outside every sandbox
        # (no hook of ours) takes them: then it must get nothing.
        sq = LsSquatter(n.cg, specs, 300)
        host = LsSquatter(None, [s for s in specs if "any" not in s], 300)
        r = ls_victim_request(c, v, http.port)
        ls_victim_dns(v)
        got_sq, got_host = sq.received(), host.received()
        ls_check_nothing_reached(got_host, "process outside every sandbox")
        ls_check_nothing_reached(got_sq, "neighbour sandbox")
        for name, b in sq.bound.items():
            check(b == "EPERM", "with egressd down a neighbour sandbox's bind of the victim's "
                  "%s port was not refused: %r" % (name, sq.bound))
        check(r.startswith("err"), "with egressd down the victim's request did: %r" % r)
        # What the outsider's squat proves: it held the ports (no hook of
        # ours runs outside the sandboxes) and still got nothing.
        check(host.bound.get("ins4") == "bound" and host.bound.get("dns4") == "bound",
              "the process outside every sandbox could not take the freed ports: %r"
              % host.bound)
    finally:
        if host:
            host.kill()
        c.ensure_daemon()
        n.remove()
        v.remove()


@test
def listen_taken_ports_reopened_elsewhere_after_restart(c):
    need_dnsmasq(c)
    http = ls_http(c)
    v = Sandbox(c, ls_victim_policy(c, http.port), "lsvictim")
    host = None
    try:
        v.attach()
        dns_ok(c, v, "api.test", want=LS_ADDR)
        ins, dns = ls_ports(c, v)
        specs = [s for s in ls_specs(ins, dns) if "any" not in s]
        c.daemon.kill9()
        # And its listener holder (docs/operations.md "Restarts"), which
        # would keep the ports taken: the kernel's marks are what is tested.
        quit_listener_holder(c.sock + ".hold")
        # Someone outside every sandbox holds the victim's ports across
        # the restart (and would log what reaches it).
        host = LsSquatter(None, specs, 300)
        check(host.bound.get("ins4") == "bound" and host.bound.get("dns4") == "bound",
              "could not take the victim's freed ports: %r" % host.bound)
        since = c.log_size()
        c.daemon.start()
        ins2, dns2 = ls_ports(c, v)
        check(ins2["port4"] != ins["port4"] and dns2["port4"] != dns["port4"],
              "the restarted egressd kept the taken ports: inspect %r -> %r, dns %r -> %r"
              % (ins, ins2, dns, dns2))
        check("no inspecting proxy" not in c.log_tail(since, 400),
              "the restarted egressd has no inspecting proxy for the victim:\n%s"
              % c.log_tail(since))
        # Its inspection works again (after resolving again: a restarted
        # egressd does not know what the learned entries were for).
        dns_ok(c, v, "api.test", want=LS_ADDR)
        r = ls_victim_request(c, v, http.port)
        check(r == "ok", "after the restart the victim's inspected request failed: %r" % r)
        ls_victim_dns(v)
        ls_check_nothing_reached(host.received(), "process outside every sandbox")
        v.detach()
    finally:
        if host:
            host.kill()
        c.ensure_daemon()
        v.remove()


def ls_sysctl(netns, key, value=None):
    argv = ["nsenter", "--net=" + netns, "sysctl", "-n"] + (["-w", "%s=%s" % (key, value)]
                                                            if value is not None else [key])
    r = run(argv)
    check(r.returncode == 0, "%s: %s" % (" ".join(argv), r.stderr.strip()))
    return r.stdout.strip()


@test
def listen_autobound_port_in_netns_gets_nothing(c):
    # The ports no bind hook sees: with egressd down and the namespace's
    # ephemeral range narrowed to the victim's DNS port, a neighbour's
    # bind(port 0) lands there (refused by post_bind), and listen() and
    # sendto() on unbound sockets take it (no hook runs): the victim's
    # redirected queries must still never reach them.
    need_dnsmasq(c)
    ns = c.need_netns()
    nspath = "/run/netns/" + ns.name
    v = NsSandbox(c, c.policy(["tcp/api.test:80"], extra_network={
        "dns_rebind_allow": ["127.0.0.0/8"]} if b"dns_rebind_allow" in
        open(c.egressd, "rb").read() else None), nspath, "lsnsvictim")
    n = NsSandbox(c, c.policy([], extra_network={"inbound": "allow"}), nspath, "lsnssquat")
    old_range, sq = None, None
    try:
        v.attach()
        n.attach()
        dns_ok(c, v, "api.test", want=LS_ADDR, netns=nspath)
        port = (c.find_sandbox(v.cg).get("dns") or {}).get("port4")
        check(port, "no DNS port listed for the victim")
        c.daemon.kill9()
        # And its listener holder (docs/operations.md "Restarts"), which
        # would keep the ports taken: the kernel's marks are what is tested.
        quit_listener_holder(c.sock + ".hold")
        old_range = ls_sysctl(nspath, "net.ipv4.ip_local_port_range")
        ls_sysctl(nspath, "net.ipv4.ip_local_port_range", "%d %d" % (port, port))
        sq = LsSquatter(n.cg, ["zero|udp|127.0.0.1|0", "tcpauto|tcpauto||0",
                               "udpauto|udpauto||0"], 300, netns=nspath)
        check(sq.bound.get("tcpauto") == "bound:%d" % port and
              sq.bound.get("udpauto") == "bound:%d" % port,
              "the autobinding squatter did not get the victim's port %d: %r (the attack "
              "did not happen)" % (port, sq.bound))
        # The range back, so that the victim's own sockets get source ports.
        ls_sysctl(nspath, "net.ipv4.ip_local_port_range", old_range.replace("\t", " "))
        old_range = None
        for mode in ("udp", "tcp"):
            try:
                dns_query(mode, "127.0.0.2", 53, "api.test", "A", timeout=1.5, cg=v.cg,
                          netns=nspath)
            except TestFailure as e:
                log("victim DNS (%s): %s" % (mode, e))
        got = sq.received()
        ls_check_nothing_reached(got, "neighbour sandbox (autobound)")
        check(sq.bound.get("zero") == "EPERM", "bind(port 0) in a sandbox landed on the "
              "victim's reserved port %d: %r" % (port, sq.bound))
        sq = None
        # Sanity twin: with egressd back the victim resolves again.
        c.daemon.start()
        dns_ok(c, v, "api.test", want=LS_ADDR, netns=nspath)
    finally:
        if sq:
            sq.kill()
        if old_range is not None:
            ls_sysctl(nspath, "net.ipv4.ip_local_port_range", old_range.replace("\t", " "))
        c.ensure_daemon()
        n.remove()
        v.remove()
