# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# The inspecting proxy (docs/inspect.md, issue 13): run by run.py
# (harness.runner). Real TLS servers
# (openssl s_server, a self-signed certificate made here) and a real HTTP
# server on loopback; curl, openssl s_client and python as the sandboxed
# clients. Every refusal has a sanity twin that does the allowed thing the
# same way.

import json
import os
import socket
import subprocess
import sys
import threading
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


import http.server
import shutil
import socketserver
import struct

OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"
CURL = shutil.which("curl") or "/usr/bin/curl"
INS_ADDR = DNS_ZONE["api.test"]        # 127.0.0.21: api.test in the test zone
INS_OTHER = "keep.test"                # resolves to 127.0.0.25, allowed on the same port


def ins_tools():
    for tool in (OPENSSL, CURL):
        if not os.access(tool, os.X_OK):
            raise TestFailure("%s is not installed (tools/install-deps installs it)" % tool)


def ins_free_port(host):
    s = socket.socket()
    s.bind((host, 0))
    port = s.getsockname()[1]
    s.close()
    return port


class TlsServer:
    """openssl s_server -www on host:port with a self-signed certificate."""

    def __init__(self, c, host):
        self.cert = os.path.join(c.work, "ins-cert.pem")
        self.key = os.path.join(c.work, "ins-key.pem")
        if not os.path.exists(self.cert):
            must([OPENSSL, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                  "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", self.key, "-out",
                  self.cert, "-subj", "/CN=api.test", "-days", "2"])
        self.host = host
        for _ in range(10):
            self.port = ins_free_port(host)
            self.proc = subprocess.Popen(
                [OPENSSL, "s_server", "-accept", "%s:%d" % (host, self.port), "-cert",
                 self.cert, "-key", self.key, "-www", "-quiet"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            CLEANUP.push("openssl s_server", self.close)

            def up():
                try:
                    socket.create_connection((host, self.port), timeout=0.5).close()
                    return True
                except OSError:
                    return self.proc.poll() is not None

            if wait_until(up, 5, 0.05) and self.proc.poll() is None:
                return
        raise TestFailure("openssl s_server did not start on %s" % host)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


class HttpServer:
    """A python http.server on host:port that counts the requests it answered."""

    def __init__(self, host):
        outer = self
        self.requests = 0

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests += 1
                body = b"inspected-ok\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.srv = S((host, 0), H)
        self.port = self.srv.server_address[1]
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()
        CLEANUP.push("http server", self.close)

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def ins_get_servers(c):
    if getattr(c, "ins_servers", None) is None:
        c.ins_servers = (TlsServer(c, INS_ADDR), HttpServer(INS_ADDR))
    return c.ins_servers


def ins_policy(c, ports, inspect=True, extra=None):
    """api.test and keep.test on the given TCP ports; DNS rebinding protection
    (another change) must let the test zone's loopback answers through."""
    net = {"dns_allow": ["api.test", INS_OTHER]}
    if b"dns_rebind_allow" in open(c.egressd, "rb").read():
        net["dns_rebind_allow"] = ["127.0.0.0/8"]
    if inspect is not None:
        net["inspect"] = inspect
    net.update(extra or {})
    allow = []
    for p in ports:
        allow += ["tcp/api.test:%d" % p, "tcp/%s:%d" % (INS_OTHER, p)]
    return c.policy(allow + list(net.pop("allow_more", [])), extra_network=net)


def ins_run(sb, argv, timeout=20):
    """Run argv in sandbox sb; (returncode, stdout+stderr)."""
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=timeout,
                       preexec_fn=join_cgroup_fn(sb.cg if sb else None))
    out = (r.stdout + r.stderr).strip()
    log("%s: %s -> %d %r" % ("in sandbox" if sb else "outside", " ".join(argv), r.returncode,
                             out[-300:]))
    return r.returncode, out


def ins_curl_tls(sb, name, port, addr=INS_ADDR):
    return ins_run(sb, [CURL, "-sS", "-k", "--max-time", "8", "--resolve",
                        "%s:%d:%s" % (name, port, addr), "https://%s:%d/" % (name, port)])


def ins_events(c, sid, want):
    found = []

    def seen():
        found[:] = [e for e in obs_events(c, "--sandbox", str(sid))
                    if e.get("type") == "inspect" and all(e.get(k) == v for k, v in want.items())]
        return bool(found)

    check(wait_until(seen, 3, 0.1), "no inspect event %r for sandbox %d: %r" %
          (want, sid, [e for e in obs_events(c, "--sandbox", str(sid))
                       if e.get("type") == "inspect"][-6:]))
    return found[-1]


def ins_resolve(c, sb):
    dns_ok(c, sb, "api.test", want=INS_ADDR)
    dns_ok(c, sb, INS_OTHER, want=DNS_ZONE[INS_OTHER])


@test
def inspect_tls_sni_must_name_the_learned_host(c):
    need_dnsmasq(c)
    ins_tools()
    tls, _ = ins_get_servers(c)
    with Sandbox(c, ins_policy(c, [tls.port])) as sb:
        sid = sandbox_id(c, sb)
        s = c.find_sandbox(sb.cg)
        check((s.get("inspect") or {}).get("port4"), "`list --json` shows no inspect "
              "listener for an inspected sandbox: %r" % s)
        # The kernel still judges first: before resolving, nothing is allowed.
        sb.denied("tcp", INS_ADDR, tls.port)
        ins_resolve(c, sb)
        # Allowed: the SNI names the host whose answer opened the address.
        rc, out = ins_curl_tls(sb, "api.test", tls.port)
        check(rc == 0 and "s_server" in out, "curl https://api.test through the proxy "
              "failed: %d %r" % (rc, out[-300:]))
        ins_events(c, sid, {"verdict": "allow", "name": "api.test", "proto": "tls",
                            "addr": INS_ADDR, "port": tls.port})
        rc, out = ins_run(sb, [OPENSSL, "s_client", "-brief", "-connect",
                               "%s:%d" % (INS_ADDR, tls.port), "-servername", "api.test"])
        check("CONNECTION ESTABLISHED" in out, "openssl s_client with SNI api.test failed: %r"
              % out[-300:])
        # The same allowed address with an SNI the policy does not name.
        rc, out = ins_curl_tls(sb, "evil.test", tls.port)
        check(rc != 0 and "s_server" not in out, "SNI evil.test reached the server: %r" % out)
        ins_events(c, sid, {"verdict": "deny", "name": "evil.test",
                            "reason": "name_not_allowed"})
        # A name the policy allows, but learned for another address.
        rc, out = ins_curl_tls(sb, INS_OTHER, tls.port)
        check(rc != 0 and "s_server" not in out, "SNI %s to %s (learned for api.test) got "
              "through: %r" % (INS_OTHER, INS_ADDR, out))
        ins_events(c, sid, {"verdict": "deny", "name": INS_OTHER,
                            "reason": "address_mismatch"})
        # No SNI at all.
        rc, out = ins_run(sb, [OPENSSL, "s_client", "-brief", "-connect",
                               "%s:%d" % (INS_ADDR, tls.port), "-noservername"])
        check("CONNECTION ESTABLISHED" not in out, "a ClientHello without SNI got through: %r"
              % out[-300:])
        ins_events(c, sid, {"verdict": "deny", "reason": "no_sni", "proto": "tls"})
        # getpeername() names the destination the tool asked for, not the proxy.
        words = in_sandbox(sb.cg, "import socket,sys\n"
                           "s=socket.create_connection((sys.argv[1],int(sys.argv[2])))\n"
                           "print('%s:%d' % s.getpeername())", INS_ADDR, tls.port)
        check(words == ["%s:%d" % (INS_ADDR, tls.port)], "getpeername of an inspected "
              "socket: %r" % words)


# A ClientHello built here: SNI name (None: none), plus ECH when ech.
def ins_client_hello(name, ech=False):
    exts = b""
    if name is not None:
        n = name.encode()
        exts += struct.pack("!HHHBH", 0, len(n) + 5, len(n) + 3, 0, len(n)) + n
    if ech:
        exts += struct.pack("!HH", 0xfe0d, 8) + b"\0" * 8
    body = (b"\x03\x03" + b"\x11" * 32 + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00" +
            struct.pack("!H", len(exts)) + exts)
    hs = b"\x01" + struct.pack("!I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack("!H", len(hs)) + hs


INS_SEND = ("import socket,sys\n"
            "try:\n"
            "    s=socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=5)\n"
            "    s.sendall(bytes.fromhex(sys.argv[3]))\n"
            "    d=s.recv(100)\n"
            "    print('eof' if not d else 'alert' if d == bytes.fromhex('15030300020231') "
            "else 'data')\n"
            "except (ConnectionResetError, BrokenPipeError):\n"
            "    print('reset')\n"
            "except socket.timeout:\n"
            "    print('timeout')\n"
            "except OSError as e:\n"
            "    print('error-' + type(e).__name__)\n")
# A refused TLS hello gets a fatal access_denied alert ('alert' above).
INS_REFUSED = (["reset"], ["eof"], ["alert"])


@test
def inspect_ech_and_unknown_protocols_refused(c):
    need_dnsmasq(c)
    ins_tools()
    tls, _ = ins_get_servers(c)
    raw = c.tcp("ins-raw", INS_ADDR)  # accepts and counts, never answers
    with Sandbox(c, ins_policy(c, [tls.port, raw.port])) as sb:
        sid = sandbox_id(c, sb)
        ins_resolve(c, sb)
        # Sanity twin: a hand-made hello naming api.test reaches the server,
        # which answers with its ServerHello.
        before = raw.accepted
        words = in_sandbox(sb.cg, INS_SEND, INS_ADDR, raw.port,
                           ins_client_hello("api.test").hex())
        check(wait_until(lambda: raw.accepted > before, 3), "the allowed hand-made hello "
              "never reached the server")
        words = in_sandbox(sb.cg, INS_SEND, INS_ADDR, tls.port,
                           ins_client_hello("api.test").hex())
        check(words == ["data"], "the TLS server did not answer an allowed hello: %r" % words)
        # ECH: the outer SNI is allowed, the inner one nobody can read.
        before = raw.accepted
        words = in_sandbox(sb.cg, INS_SEND, INS_ADDR, raw.port,
                           ins_client_hello("api.test", ech=True).hex())
        check(words in INS_REFUSED, "a hello with ECH was not refused: %r" % words)
        ins_events(c, sid, {"verdict": "deny", "reason": "ech", "name": "api.test"})
        # A protocol the proxy cannot read.
        words = in_sandbox(sb.cg, INS_SEND, INS_ADDR, raw.port, b"SSH-2.0-x\r\n".hex())
        check(words in (["reset"], ["eof"]), "SSH was not refused: %r" % words)
        ins_events(c, sid, {"verdict": "deny", "reason": "unknown_protocol"})
        time.sleep(0.2)
        check(raw.accepted == before, "a refused connection reached the server (%d -> %d)" %
              (before, raw.accepted))


@test
def inspect_http_host_must_match(c):
    need_dnsmasq(c)
    ins_tools()
    _, web = ins_get_servers(c)
    with Sandbox(c, ins_policy(c, [web.port])) as sb:
        sid = sandbox_id(c, sb)
        ins_resolve(c, sb)
        before = web.requests
        rc, out = ins_run(sb, [CURL, "-sS", "--max-time", "8", "--resolve",
                               "api.test:%d:%s" % (web.port, INS_ADDR),
                               "http://api.test:%d/x" % web.port])
        check(rc == 0 and "inspected-ok" in out, "plain HTTP with Host api.test failed: "
              "%d %r" % (rc, out))
        ins_events(c, sid, {"verdict": "allow", "name": "api.test", "proto": "http"})
        n = web.requests
        check(n == before + 1, "the server saw %d requests, expected 1" % (n - before))
        rc, out = ins_run(sb, [CURL, "-sS", "--max-time", "8", "-H", "Host: evil.test",
                               "http://%s:%d/x" % (INS_ADDR, web.port)])
        # Refused with a 403 that says why (curl exits 0 without -f).
        check("inspected-ok" not in out and "egressd policy refused evil.test" in out,
              "Host: evil.test got through, or no 403: %r" % out)
        ins_events(c, sid, {"verdict": "deny", "name": "evil.test",
                            "reason": "name_not_allowed", "proto": "http"})
        check(web.requests == n, "the refused request reached the server")


@test
def inspect_off_unaffected_and_quic_refused(c):
    need_dnsmasq(c)
    ins_tools()
    tls, _ = ins_get_servers(c)
    udp = "udp/%s:443-444" % INS_ADDR
    # Without inspection the allowed address takes any SNI (what inspection
    # is for), and UDP 443 is not touched.
    with Sandbox(c, ins_policy(c, [tls.port], inspect=False,
                               extra={"allow_more": [udp]})) as plain:
        check(not (c.find_sandbox(plain.cg) or {}).get("inspect"),
              "an uninspected sandbox has an inspect listener")
        ins_resolve(c, plain)
        rc, out = ins_curl_tls(plain, "evil.test", tls.port)
        check(rc == 0 and "s_server" in out, "uninspected sandbox: curl failed: %r" % out)
        plain.allowed("udp-sendto", INS_ADDR, 443)
    with Sandbox(c, ins_policy(c, [tls.port], extra={"allow_more": [udp]})) as sb:
        sb.denied("udp-sendto", INS_ADDR, 443)
        sb.denied("udp-connect", INS_ADDR, 443)  # connected UDP too
        sb.allowed("udp-sendto", INS_ADDR, 444)  # sanity twin: another UDP port


@test
def inspect_listener_serves_only_redirected(c):
    need_dnsmasq(c)
    ins_tools()
    tls, _ = ins_get_servers(c)
    raw = c.tcp("ins-raw2", INS_ADDR)
    with Sandbox(c, ins_policy(c, [tls.port, raw.port])) as sb:
        sid = sandbox_id(c, sb)
        port = (c.find_sandbox(sb.cg).get("inspect") or {}).get("port4")
        check(port, "no inspect listener port")
        ins_resolve(c, sb)
        # A process outside the sandbox connects to the listener directly
        # and names an allowed host: the kernel published no destination
        # for it, so it is not served.
        before = raw.accepted
        words = in_sandbox(None, INS_SEND, "127.0.0.1", port, ins_client_hello("api.test").hex())
        check(words in INS_REFUSED, "a connection the kernel did not redirect was "
              "served: %r" % words)
        ins_events(c, sid, {"verdict": "deny", "reason": "no_origin"})
        # The sandbox itself cannot dial its listener (not in its allowlist,
        # and inspected connections to it are refused as a loop).
        sb.denied("tcp", "127.0.0.1", port)
        # Sanity twin: the same bytes through the redirect are served.
        words = in_sandbox(sb.cg, INS_SEND, INS_ADDR, raw.port,
                           ins_client_hello("api.test").hex())
        check(wait_until(lambda: raw.accepted > before, 3), "the redirected hello was not "
              "relayed: %r" % words)


@test
def inspect_audit_names_hosts(c):
    need_dnsmasq(c)
    ins_tools()
    tls, _ = ins_get_servers(c)
    sb = Sandbox(c, ins_policy(c, [tls.port]))
    with sb:
        ins_resolve(c, sb)
        rc, out = ins_curl_tls(sb, "api.test", tls.port)
        check(rc == 0, "curl through the proxy failed: %r" % out)
        exec_id = json.load(open(sb.policy))["execution_id"]
        sb.detach()
    recs = [r for r in obs_audit(c) if r.get("type") == "execution" and
            r.get("execution_id") == exec_id]
    check(recs, "no execution record for %s" % exec_id)
    rec = recs[-1]
    check("api.test" in (rec.get("hosts") or []), "the record's hosts lack api.test: %r" %
          rec.get("hosts"))
    dests = [e for e in rec.get("egress") or [] if e.get("host") == "api.test"]
    check(dests and dests[0].get("dest") == "%s:%d" % (INS_ADDR, tls.port) and
          dests[0].get("bytes_out", 0) > 0 and dests[0].get("bytes_in", 0) > 0,
          "egress entry for api.test: %r" % rec.get("egress"))
    check(not any(e.get("port") == (rec.get("inspect") or {}).get("port4", -1)
                  for e in rec.get("egress") or []), "the proxy listener shows as a destination")
    audit_verify(c, os.path.join(c.state, "audit.log"))


@test
def inspect_literal_entry_needs_an_allowed_name(c):
    ins_tools()
    tls, _ = ins_get_servers(c)
    # A literal address entry has no name: any name the policy resolves may
    # be used there (no DNS needed), and no other.
    net = {"dns_allow": ["api.test"], "inspect": True}
    if b"dns_rebind_allow" in open(c.egressd, "rb").read():
        net["dns_rebind_allow"] = ["127.0.0.0/8"]
    with Sandbox(c, c.policy(["tcp/%s:%d" % (INS_ADDR, tls.port)], extra_network=net)) as sb:
        sid = sandbox_id(c, sb)
        rc, out = ins_curl_tls(sb, "api.test", tls.port)
        check(rc == 0 and "s_server" in out, "SNI api.test to an allowed literal address "
              "failed: %r" % out[-300:])
        rc, out = ins_curl_tls(sb, "evil.test", tls.port)
        check(rc != 0 and "s_server" not in out, "SNI evil.test to the literal got through")
        ins_events(c, sid, {"verdict": "deny", "name": "evil.test",
                            "reason": "name_not_allowed"})


class CountServer:
    """Reads until EOF (slowly at first: back-pressure), then answers with the
    byte count and SHA-256 of what it read, and closes."""

    def __init__(self, host):
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()
        CLEANUP.push("count server", self.sock.close)

    def loop(self):
        import hashlib
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with c:
                c.settimeout(20)
                time.sleep(0.5)  # let every buffer on the way fill up
                h, n = hashlib.sha256(), 0
                try:
                    while True:
                        d = c.recv(1 << 16)
                        if not d:
                            break
                        h.update(d)
                        n += len(d)
                    c.sendall(("%d %s\n" % (n, h.hexdigest())).encode())
                except OSError:
                    pass


INS_BULK = ("import hashlib,os,socket,sys\n"
            "s=socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=20)\n"
            "body=os.urandom(8<<20)\n"
            "head=b'POST /up HTTP/1.1\\r\\nHost: api.test\\r\\nContent-Length: %d\\r\\n"
            "\\r\\n' % len(body)\n"
            "s.sendall(head+body)\n"
            "s.shutdown(socket.SHUT_WR)\n"
            "r=b''\n"
            "while True:\n"
            "    d=s.recv(4096)\n"
            "    if not d: break\n"
            "    r+=d\n"
            "print(r.decode().strip(), len(head+body), hashlib.sha256(head+body).hexdigest())\n")


@test
def inspect_relay_bulk_half_close(c):
    need_dnsmasq(c)
    srv_ = CountServer(INS_ADDR)
    with Sandbox(c, ins_policy(c, [srv_.port])) as sb:
        ins_resolve(c, sb)
        words = in_sandbox(sb.cg, INS_BULK, INS_ADDR, srv_.port, timeout=60)
        check(len(words) == 4 and words[0] == words[2] and words[1] == words[3],
              "8 MiB then SHUT_WR through the proxy: server saw %r, client sent %r" %
              (words[:2], words[2:]))


INS_HOLD = ("import socket,sys\n"
            "s=socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=float(sys.argv[3]))\n"
            "s.sendall(b'POST /hold HTTP/1.1\\r\\nHost: api.test\\r\\n\\r\\n')\n"
            "print('up', flush=True)\n"
            "try:\n"
            "    d=s.recv(100)\n"
            "    print('eof' if not d else 'data')\n"
            "except ConnectionResetError:\n"
            "    print('reset')\n"
            "except socket.timeout:\n"
            "    print('open')\n")


def ins_hold(sb, port, secs):
    p = subprocess.Popen([sys.executable, "-c", INS_HOLD, INS_ADDR, str(port), str(secs)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=join_cgroup_fn(sb.cg))
    CLEANUP.push("hold client", lambda: p.poll() is None and p.kill())
    if p.stdout.readline().strip() != "up":
        raise TestFailure("the holding client did not connect: %r" % p.stderr.read()[-300:])
    return p


@test
def inspect_update_closes_refused_connections(c):
    need_dnsmasq(c)
    srv_ = CountServer(INS_ADDR)
    with Sandbox(c, ins_policy(c, [srv_.port])) as sb:
        ins_resolve(c, sb)
        # Sanity twin: an update that still allows api.test keeps it open.
        p = ins_hold(sb, srv_.port, 3)
        sb.update(ins_policy(c, [srv_.port]))
        out = p.communicate(timeout=20)[0].strip()
        check(out == "open", "an update that still allows api.test ended its connection: "
              "%r" % out)
        # Narrowing: api.test is no longer a name of the policy.
        p = ins_hold(sb, srv_.port, 10)
        net = {"dns_allow": [INS_OTHER], "inspect": True}
        if b"dns_rebind_allow" in open(c.egressd, "rb").read():
            net["dns_rebind_allow"] = ["127.0.0.0/8"]
        sb.update(c.policy(["tcp/%s:%d" % (INS_OTHER, srv_.port)], extra_network=net))
        out = p.communicate(timeout=20)[0].strip()
        check(out in ("reset", "eof"), "a connection to api.test survived the update that "
              "removed it: %r" % out)


@test
def inspect_ipv6(c):
    need_dnsmasq(c)
    a6 = DNS_ZONE6["api6.test"]  # ::1
    srv6 = c.tcp("ins-v6", a6)
    net = {"dns_allow": ["api6.test"], "inspect": True}
    if b"dns_rebind_allow" in open(c.egressd, "rb").read():
        net["dns_rebind_allow"] = ["127.0.0.0/8", "::1/128"]
    with Sandbox(c, c.policy(["tcp/api6.test:%d" % srv6.port], extra_network=net)) as sb:
        sid = sandbox_id(c, sb)
        check((c.find_sandbox(sb.cg).get("inspect") or {}).get("port6"),
              "no IPv6 inspect listener")
        dns_ok(c, sb, "api6.test", "AAAA", server="::1", want=a6)
        before = srv6.accepted
        words = in_sandbox(sb.cg, INS_SEND, a6, srv6.port, ins_client_hello("api6.test").hex())
        check(words == ["data"] and srv6.accepted > before, "IPv6 hello naming api6.test "
              "through the proxy: %r" % words)
        words = in_sandbox(sb.cg, INS_SEND, a6, srv6.port, ins_client_hello("evil.test").hex())
        check(words in INS_REFUSED, "IPv6 hello naming evil.test: %r" % words)
        ins_events(c, sid, {"verdict": "deny", "name": "evil.test", "addr": a6,
                            "reason": "name_not_allowed"})


INS_FLOOD = ("import socket,sys,time\n"
             "host,port,n,hello=sys.argv[1],int(sys.argv[2]),int(sys.argv[3]),bytes.fromhex(sys.argv[4])\n"
             "held=[socket.create_connection((host,port),timeout=5) for _ in range(n)]\n"
             "time.sleep(0.5)\n"
             "def one():\n"
             "    try:\n"
             "        s=socket.create_connection((host,port),timeout=5)\n"
             "        s.sendall(hello)\n"
             "        d=s.recv(100)\n"
             "        return 'data' if d else 'eof'\n"
             "    except (ConnectionResetError, BrokenPipeError):\n"
             "        return 'reset'\n"
             "    except socket.timeout:\n"
             "        return 'timeout'\n"
             "full=one()\n"
             "for s in held: s.close()\n"
             "time.sleep(0.5)\n"
             "print(full, one())\n")


@test
def inspect_connection_bound_fails_closed(c):
    need_dnsmasq(c)
    raw = c.tcp("ins-raw3", INS_ADDR)
    with Sandbox(c, ins_policy(c, [raw.port])) as sb:
        sid = sandbox_id(c, sb)
        ins_resolve(c, sb)
        # 256 connections that never say anything fill the sandbox's bound
        # (they wait in the proxy for their first bytes); the next one is
        # refused, and once they are gone the same hello is served.
        words = in_sandbox(sb.cg, INS_FLOOD, INS_ADDR, raw.port, 256,
                           ins_client_hello("api.test").hex(), timeout=60)
        check(words == ["reset", "data"], "past the per-sandbox bound: %r (want the 257th "
              "refused, then served once the others closed)" % words)
        ins_events(c, sid, {"verdict": "deny", "reason": "conn_limit", "addr": INS_ADDR})
        st = json.loads(c.ctl_ok("status", "--json").stdout).get("inspect") or {}
        check(st.get("refused_full", 0) >= 1 and st.get("max_connections") == 1024,
              "`status --json` does not count the refusal: %r" % st)


@test
def inspect_survives_restart_closed_while_down(c):
    need_dnsmasq(c)
    ins_tools()
    tls, _ = ins_get_servers(c)
    sb = Sandbox(c, ins_policy(c, [tls.port]), "insadopt")
    try:
        sb.attach()
        ins_resolve(c, sb)
        rc, out = ins_curl_tls(sb, "api.test", tls.port)
        check(rc == 0, "before the restart: %r" % out)
        ports = c.find_sandbox(sb.cg).get("inspect")
        c.daemon.kill9()
        # No proxy: the kernel still redirects, so TCP fails, never goes
        # around the inspection.
        rc, out = ins_curl_tls(sb, "api.test", tls.port)
        check(rc != 0 and "s_server" not in out, "with egressd down the connection got "
              "through: %r" % out)
        c.daemon.start()
        check(c.find_sandbox(sb.cg).get("inspect") == ports, "the adopted sandbox's inspect "
              "listeners moved: %r -> %r" % (ports, c.find_sandbox(sb.cg).get("inspect")))
        # The restarted egressd does not know which names the kernel's
        # learned entries were for: until the tool resolves again, the
        # address is not the name's (refused, not opened).
        rc, out = ins_curl_tls(sb, "api.test", tls.port)
        check(rc != 0, "a name the new egressd never saw resolved was let through: %r" % out)
        ins_resolve(c, sb)
        rc, out = ins_curl_tls(sb, "api.test", tls.port)
        check(rc == 0 and "s_server" in out, "after resolving again: %r" % out)
        sb.detach()
    finally:
        c.ensure_daemon()
        sb.remove()
