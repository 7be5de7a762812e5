# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# The inspecting proxy with two names at one address (issue 23 finding 8):
# a name is accepted on a connection only on a port its own outbound_allow
# entries give. Run by run.py (harness.runner).

import socket

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)
from harness.servers import TcpServer
from test_inspect import ins_client_hello, ins_events

SH_ADDR = "127.0.0.41"       # api.rt and shared.rt both answer this
SH_PORTS = (8080, 9443)      # the attacker's ports; free ones if these are taken


def sh_servers():
    """TcpServers on SH_ADDR: the finding's ports if free, else any two."""
    try:
        servers = [TcpServer(SH_ADDR, p) for p in SH_PORTS]
    except OSError as e:
        log("ports %r on %s taken (%s): free ports instead" % (SH_PORTS, SH_ADDR, e))
        servers = [TcpServer(SH_ADDR, 0), TcpServer(SH_ADDR, 0)]
    for s in servers:
        CLEANUP.push("tcp server", s.close)
    return servers


# Sends hex bytes, prints what came back: pong (the server), 403, alert,
# eof or reset (the proxy refused).
SH_SEND = ("import socket,sys\n"
           "try:\n"
           "    s=socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=5)\n"
           "    s.sendall(bytes.fromhex(sys.argv[3]))\n"
           "    d=s.recv(100)\n"
           "    print('eof' if not d else 'pong' if d == b'pong' else '403' if "
           "d.startswith(b'HTTP/1.1 403') else 'alert' if d == bytes.fromhex('15030300020231') "
           "else 'other')\n"
           "except (ConnectionResetError, BrokenPipeError):\n"
           "    print('reset')\n"
           "except socket.timeout:\n"
           "    print('timeout')\n")
SH_REFUSED = (["reset"], ["eof"], ["alert"], ["403"])


def sh_http(name):
    return ("GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % name).encode()


@test
def inspect_name_port_confusion_on_shared_address(c):
    z = need_dnsmasq(c)
    api, shared = "api-%s.rt" % RAND, "shared-%s.rt" % RAND
    z.add_host(api, SH_ADDR)
    z.add_host(shared, SH_ADDR)
    s8080, s9443 = sh_servers()
    net = {"dns_allow": [api, shared], "inspect": True,
           "dns_rebind_allow": ["127.0.0.0/8"]}
    pol = c.policy(["tcp/%s:%d" % (api, s8080.port), "tcp/%s:%d" % (shared, s9443.port)],
                   extra_network=net)
    with Sandbox(c, pol) as sb:
        sid = sandbox_id(c, sb)
        dns_ok(c, sb, api, want=SH_ADDR)
        dns_ok(c, sb, shared, want=SH_ADDR)
        # Sanity twins: each name on its own port is relayed, TLS and HTTP.
        for name, srv_ in ((api, s8080), (shared, s9443)):
            for hello in (ins_client_hello(name), sh_http(name)):
                before = srv_.accepted
                words = in_sandbox(sb.cg, SH_SEND, SH_ADDR, srv_.port, hello.hex())
                check(words == ["pong"] and srv_.accepted > before,
                      "%s on its own port %d was not relayed: %r" % (name, srv_.port, words))
        # The attack: each name on the other name's port (the kernel allows
        # the address:port, for the other name).
        for name, srv_ in ((api, s9443), (shared, s8080)):
            for hello in (ins_client_hello(name), sh_http(name)):
                before = srv_.accepted
                words = in_sandbox(sb.cg, SH_SEND, SH_ADDR, srv_.port, hello.hex())
                check(words in SH_REFUSED and srv_.accepted == before,
                      "%s to port %d (the other name's) was relayed: %r" %
                      (name, srv_.port, words))
                ins_events(c, sid, {"verdict": "deny", "name": name, "port": srv_.port,
                                    "reason": "port_not_allowed"})
