# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Confinement: TCP/UDP/ICMP/special sockets, policies, updates, nested
cgroups, adoption after a daemon restart, egressctl run."""

import json
import os
import socket
import subprocess
import sys
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


@test
def status_and_list(c):
    r = c.ctl_ok("status")
    check(r.stdout.strip() != "", "`status` printed nothing")
    check(c.list_json() == [], "sandboxes exist before any attach: %r" % c.list_json())
    t = c.tcp("a")
    with c.sandbox(["127.0.0.1:%d" % t.port]) as sb:
        s = c.find_sandbox(sb.cg)
        check(s is not None, "`list --json` does not show %s" % sb.cg)
        for field in ("id", "cgroup", "cgroup_id", "tenant", "policy_id", "policy_sha256",
                      "rules", "attached_at", "updated_at"):
            check(field in s, "sandbox object lacks %r: %r" % (field, s))
        check(s["tenant"] == "e2e", "tenant is %r" % s.get("tenant"))
        check(s["cgroup_id"] == os.stat(sb.cg).st_ino,
              "cgroup_id %r is not the cgroup's inode %d" % (s["cgroup_id"], os.stat(sb.cg).st_ino))
        # Again with the same policy: idempotent (a retried hook), the same sandbox.
        r = c.ctl("attach", "--json", "--cgroup", sb.cg, "--policy", sb.policy)
        check(r.returncode == 0 and json.loads(r.stdout).get("id") == s["id"],
              "a second attach with the same policy: exit %d, %r (expected the same sandbox)"
              % (r.returncode, (r.stdout + r.stderr).strip()))
        r = c.ctl("attach", "--cgroup", sb.cg, "--policy", c.policy(["127.0.0.1:1"]))
        check(r.returncode == 1, "a second attach with another policy: exit %d, expected 1 "
              "(exists)" % r.returncode)
    check(c.find_sandbox(sb.cg) is None, "detached sandbox still listed")


@test
def tcp4_allowed_and_denied(c):
    a, b = c.tcp("a"), c.tcp("b")
    other = c.tcp("a2", "127.0.0.2")
    with c.sandbox(["127.0.0.1:%d" % a.port]) as sb:
        before = a.accepted
        sb.allowed("tcp", "127.0.0.1", a.port)
        check(a.accepted > before, "allowed connect never reached the server")
        sb.denied("tcp", "127.0.0.1", b.port)               # other port
        sb.denied("tcp", "127.0.0.2", other.port)           # other address
        sb.denied("tcp", "127.0.0.2", a.port)               # same port, other address
        sb.denied("tcp6", "::1", c.tcp("a6", "::1").port)    # other family


@test
def tcp6_allowed_and_denied(c):
    a6, b6 = c.tcp("a6", "::1"), c.tcp("b6", "::1")
    with c.sandbox(["[::1]:%d" % a6.port]) as sb:
        sb.allowed("tcp6", "::1", a6.port)
        sb.denied("tcp6", "::1", b6.port)
        sb.denied("tcp", "127.0.0.1", c.tcp("a").port)
    ns = c.need_netns()
    with c.sandbox(["[%s]:8000" % ns.ns6]) as sb:
        sb.allowed("tcp6", ns.ns6, 8000)
        sb.denied("tcp6", ns.ns6, 9000)
        sb.denied("tcp6", "::1", a6.port)


@test
def udp_connected(c):
    u, u2 = c.udp("u"), c.udp("u2")
    u6 = c.udp("u6", "::1")
    with c.sandbox(["udp/127.0.0.1:%d" % u.port, "udp/[::1]:%d" % u6.port]) as sb:
        n = u.received
        sb.allowed("udp-connect", "127.0.0.1", u.port)
        check(u.wait_for(n + 1), "allowed datagram never arrived")
        sb.denied("udp-connect", "127.0.0.1", u2.port)
        sb.allowed("udp-connect", "::1", u6.port)
        sb.denied("udp-connect", "::1", c.udp("u6b", "::1").port)


@test
def udp_unconnected(c):
    u, u2 = c.udp("u"), c.udp("u2")
    u6, u6b = c.udp("u6", "::1"), c.udp("u6b", "::1")
    with c.sandbox(["udp/127.0.0.1:%d" % u.port, "udp/[::1]:%d" % u6.port]) as sb:
        for action in ("udp-sendto", "udp-sendmsg"):
            n = u.received
            sb.allowed(action, "127.0.0.1", u.port)
            check(u.wait_for(n + 1), "%s: allowed datagram never arrived" % action)
            n2 = u2.received
            sb.denied(action, "127.0.0.1", u2.port)
            sb.allowed(action, "::1", u6.port)
            sb.denied(action, "::1", u6b.port)
            time.sleep(0.1)
            check(u2.received == n2, "%s: a denied datagram arrived" % action)


@test
def udp_sendmmsg(c):
    u, u2 = c.udp("u"), c.udp("u2")
    with c.sandbox(["udp/127.0.0.1:%d" % u.port]) as sb:
        n = u.received
        sb.allowed("udp-sendmmsg", "127.0.0.1", u.port)
        check(u.wait_for(n + 2), "sendmmsg: %d of 2 datagrams arrived" % (u.received - n))
        n2 = u2.received
        sb.denied("udp-sendmmsg", "127.0.0.1", u2.port)
        time.sleep(0.1)
        check(u2.received == n2, "sendmmsg: a denied datagram arrived")


@test
def protocol_restriction(c):
    t, tu = c.pair("p1")      # TCP and UDP on port P
    ut, uu = c.pair("p2")     # TCP and UDP on port Q
    both_t, both_u = c.pair("p3")
    with c.sandbox(["tcp/127.0.0.1:%d" % t.port, "udp/127.0.0.1:%d" % uu.port,
                    "127.0.0.1:%d" % both_t.port]) as sb:
        sb.allowed("tcp", "127.0.0.1", t.port)
        sb.denied("udp-sendto", "127.0.0.1", t.port)      # tcp/ does not allow UDP
        sb.denied("udp-connect", "127.0.0.1", t.port)
        sb.allowed("udp-sendto", "127.0.0.1", uu.port)
        sb.allowed("udp-connect", "127.0.0.1", uu.port)
        sb.denied("tcp", "127.0.0.1", uu.port)            # udp/ does not allow TCP
        sb.denied("tfo", "127.0.0.1", uu.port)
        sb.allowed("tcp", "127.0.0.1", both_t.port)       # no prefix: both
        sb.allowed("udp-sendto", "127.0.0.1", both_t.port)


@test
def tcp_fast_open(c):
    a, b = c.tcp("a"), c.tcp("b")
    a6, b6 = c.tcp("a6", "::1"), c.tcp("b6", "::1")
    with c.sandbox(["127.0.0.1:%d" % a.port, "[::1]:%d" % a6.port]) as sb:
        before = a.accepted
        sb.allowed("tfo", "127.0.0.1", a.port)
        check(wait_until(lambda: a.accepted > before, 2), "fast open never reached the server")
        sb.denied("tfo", "127.0.0.1", b.port)
        sb.allowed("tfo", "::1", a6.port)
        sb.denied("tfo", "::1", b6.port)
        # A second fast open to the allowed server carries a cookie now: the
        # data-in-SYN path must be judged the same way.
        sb.allowed("tfo", "127.0.0.1", a.port)
        sb.denied("tfo", "127.0.0.1", b.port)


@test
def ipv4_mapped_ipv6(c):
    t, u = c.pair("m1")
    t2, u2 = c.pair("m2")
    with c.sandbox(["127.0.0.1:%d" % t.port]) as sb:
        sb.allowed("tcp-mapped", "127.0.0.1", t.port)
        sb.denied("tcp-mapped", "127.0.0.1", t2.port)
        sb.denied("tcp-mapped", "127.0.0.2", t.port)
        n = u.received
        sb.allowed("udp-mapped-sendto", "127.0.0.1", u.port)
        check(u.wait_for(n + 1), "mapped datagram never arrived")
        sb.denied("udp-mapped-sendto", "127.0.0.1", u2.port)
    # Every IPv6 destination allowed, no IPv4 one: a mapped address is an IPv4
    # destination and must be judged by the (empty) IPv4 rules.
    with c.sandbox(["[::/0]:*"]) as sb:
        sb.allowed("tcp6", "::1", c.tcp("a6", "::1").port)
        sb.denied("tcp-mapped", "127.0.0.1", t.port)
        sb.denied("udp-mapped-sendto", "127.0.0.1", u.port)
    # A mapped entry in the policy is an IPv4 rule.
    with c.sandbox(["[::ffff:127.0.0.1]:%d" % t.port]) as sb:
        sb.allowed("tcp", "127.0.0.1", t.port)
        sb.allowed("tcp-mapped", "127.0.0.1", t.port)
        sb.denied("tcp", "127.0.0.1", t2.port)


@test
def ranges_wildcards_cidrs_netns(c):
    ns = c.need_netns()
    blk = "10.254.%d" % ns.x
    with c.sandbox(["%s.0/30:8000-8080" % blk]) as sb:
        sb.allowed("tcp", ns.ns4, 8000)
        sb.allowed("tcp", ns.ns4, 8080)
        sb.denied("tcp", ns.ns4, 9000)          # outside the range
        sb.denied("tcp", ns.ns4b, 8000)         # outside the /30
        sb.allowed("udp-sendto", ns.ns4, 8000)
        sb.denied("udp-sendto", ns.ns4, 9000)
    with c.sandbox(["%s.0/29:*" % blk]) as sb:
        for port in ns.PORTS:
            sb.allowed("tcp", ns.ns4, port)
        sb.allowed("tcp", ns.ns4b, 8000)
        sb.denied("tcp", "127.0.0.1", c.tcp("a").port)
        sb.denied("tcp6", ns.ns6, 8000)
    # A wider prefix with a range and a narrower one with another port: the
    # longest match must still allow the wider prefix's ports.
    with c.sandbox(["%s.0/29:8000" % blk, "%s.2/32:9000" % blk]) as sb:
        sb.allowed("tcp", ns.ns4, 8000)
        sb.allowed("tcp", ns.ns4, 9000)
        sb.denied("tcp", ns.ns4, 8080)
        sb.allowed("tcp", ns.ns4b, 8000)
    with c.sandbox(["[fd00:e9e:%x::/64]:8000-8080" % ns.x]) as sb:
        sb.allowed("tcp6", ns.ns6, 8000)
        sb.allowed("tcp6", ns.ns6, 8080)
        sb.denied("tcp6", ns.ns6, 9000)
        sb.denied("tcp", ns.ns4, 8000)


@test
def loopback_cidr(c):
    a = c.tcp("a")
    a2 = c.tcp("a2", "127.0.0.2")
    a3 = c.tcp("a3", "127.0.0.3")
    with c.sandbox(["127.0.0.0/8:*"]) as sb:
        sb.allowed("tcp", "127.0.0.1", a.port)
        sb.allowed("tcp", "127.0.0.2", a2.port)
        sb.allowed("udp-sendto", "127.0.0.3", 9)
        sb.denied("tcp6", "::1", c.tcp("a6", "::1").port)
    with c.sandbox(["127.0.0.2/31:%d" % a3.port]) as sb:
        sb.allowed("tcp", "127.0.0.3", a3.port)
        if a2.port != a3.port:
            sb.denied("tcp", "127.0.0.2", a2.port)
        sb.denied("tcp", "127.0.0.1", a.port)


@test
def special_sockets_denied_by_default(c):
    with c.sandbox(["127.0.0.1:*", "[::1]:*"]) as sb:
        for args in (("inet", "raw", "icmp"), ("inet6", "raw", "icmpv6"),
                     ("inet", "raw", "udp"), ("inet", "raw", "raw"),
                     ("inet", "dgram", "udplite"), ("inet6", "dgram", "udplite"),
                     ("inet", "dgram", "icmp"), ("inet6", "dgram", "icmpv6")):
            sb.denied("socket", *args)
        sb.denied("ping-sendto", "127.0.0.1")
        sb.denied("ping-sendto", "::1")
        sb.denied("raw-sendto", "127.0.0.1")
        sb.denied("raw-sendto", "::1")
        for args, outside in ((("inet", "stream", "sctp"), c.sctp_errno),
                              (("inet6", "stream", "sctp"), c.sctp_errno),
                              (("inet", "seqpacket", "sctp"), c.sctp_errno),
                              (("inet", "stream", "mptcp"), c.mptcp_errno),
                              (("inet6", "stream", "mptcp"), c.mptcp_errno)):
            r = c.probe(sb.cg, "socket", *args)
            check(r.rc != 0, "denied socket created: %s" % r)
            if outside is None:   # the kernel has it: only the policy can refuse
                check(r.errno == "EPERM", "expected EPERM: %s" % r)
            else:
                check(r.errno in ("EPERM",) + NOT_BUILT, "unexpected errno: %s" % r)
        # TCP and UDP sockets are always allowed.
        sb.allowed("socket", "inet", "stream", "tcp")
        sb.allowed("socket", "inet6", "dgram", "udp")


@test
def special_sockets_allowed_by_policy(c):
    with c.sandbox(["127.0.0.1:*", "[::1]:*"],
                   sockets=["icmp", "raw", "udplite", "sctp", "mptcp"]) as sb:
        for args in (("inet", "raw", "icmp"), ("inet6", "raw", "icmpv6"),
                     ("inet", "dgram", "udplite"), ("inet6", "dgram", "udplite"),
                     ("inet", "dgram", "icmp"), ("inet6", "dgram", "icmpv6")):
            sb.allowed("socket", *args)
        sb.allowed("ping-sendto", "127.0.0.1")
        sb.allowed("ping-sendto", "::1")
        sb.allowed("raw-sendto", "127.0.0.1")
        sb.allowed("raw-sendto", "::1")
        for args, outside in ((("inet", "stream", "sctp"), c.sctp_errno),
                              (("inet", "stream", "mptcp"), c.mptcp_errno)):
            r = c.probe(sb.cg, "socket", *args)
            if outside is None:
                check(r.rc == 0, "allowed socket refused: %s" % r)
            else:
                check(r.errno == outside, "expected %s as outside a sandbox: %s" % (outside, r))
    # Only what is named: icmp allows ping sockets, not raw ones.
    with c.sandbox(["127.0.0.1:*"], sockets=["icmp"]) as sb:
        sb.allowed("socket", "inet", "dgram", "icmp")
        sb.denied("socket", "inet", "raw", "icmp")
        sb.denied("socket", "inet", "dgram", "udplite")
    with c.sandbox(["127.0.0.1:*"], sockets=["raw"]) as sb:
        sb.allowed("socket", "inet", "raw", "icmp")
        sb.denied("socket", "inet", "dgram", "icmp")


@test
def loopback_denied_unless_allowed(c):
    a, u = c.tcp("a"), c.udp("u")
    a6 = c.tcp("a6", "::1")
    with c.sandbox([]) as sb:
        sb.denied("tcp", "127.0.0.1", a.port)
        sb.denied("tcp6", "::1", a6.port)
        sb.denied("udp-sendto", "127.0.0.1", u.port)
        sb.denied("udp-connect", "127.0.0.1", u.port)
    ns = c.need_netns()
    with c.sandbox(["%s:8000" % ns.ns4, "[%s]:8000" % ns.ns6, "192.0.2.1:*"]) as sb:
        sb.allowed("tcp", ns.ns4, 8000)
        sb.allowed("tcp6", ns.ns6, 8000)
        sb.denied("tcp", "127.0.0.1", a.port)
        sb.denied("tcp6", "::1", a6.port)
        sb.denied("udp-sendto", "127.0.0.1", u.port)
        sb.denied("tcp-mapped", "127.0.0.1", a.port)


@test
def nested_cgroup_still_confined(c):
    a, b = c.tcp("a"), c.tcp("b")
    with c.sandbox(["127.0.0.1:%d" % a.port]) as sb:
        child = c.mkcgroup("child", sb.cg)
        grandchild = c.mkcgroup("grandchild", child)
        for cg in (child, grandchild):
            c.allowed(cg, "tcp", "127.0.0.1", a.port)
            c.denied(cg, "tcp", "127.0.0.1", b.port)
            c.denied(cg, "udp-sendto", "127.0.0.1", b.port)
            c.denied(cg, "socket", "inet", "raw", "icmp")
        # A process started in the sandbox and then moved into the child.
        join = join_cgroup_fn(sb.cg)

        p = subprocess.Popen(["/bin/sh", "-c", 'read _ && exec "$0" "$@"', c.netprobe, "tcp",
                              "127.0.0.1", str(b.port)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=join)
        try:
            with open(os.path.join(child, "cgroup.procs"), "w") as f:
                f.write(str(p.pid))
            out, err = p.communicate("go\n", timeout=PROBE_TIMEOUT_S)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(5)
        check(p.returncode == 1 and out.startswith("err EPERM"),
              "moved process: exit %d, %r %r" % (p.returncode, out.strip(), err.strip()))


@test
def update_narrows_and_bad_update_keeps_policy(c):
    a, b = c.tcp("a"), c.tcp("b")
    with c.sandbox(["127.0.0.1:%d" % a.port, "127.0.0.1:%d" % b.port]) as sb:
        sb.allowed("tcp", "127.0.0.1", a.port)
        sb.allowed("tcp", "127.0.0.1", b.port)
        before = c.find_sandbox(sb.cg)
        check(before is not None, "`list --json` does not show %s" % sb.cg)
        sb.update(c.policy(["127.0.0.1:%d" % a.port]))
        sb.allowed("tcp", "127.0.0.1", a.port)
        sb.denied("tcp", "127.0.0.1", b.port)
        sb.denied("udp-sendto", "127.0.0.1", b.port)
        mid = c.find_sandbox(sb.cg)
        check(mid is not None, "sandbox gone after update")
        check(before["id"] == mid["id"], "update changed the sandbox id")
        check(before.get("policy_sha256") != mid.get("policy_sha256"),
              "policy_sha256 unchanged by an update")
        # Invalid: a port out of range in the second entry, and it would
        # have widened access; nothing of it may apply.
        bad = c.policy(["127.0.0.1:%d" % b.port, "127.0.0.1:70000"])
        r = c.ctl("update", "--cgroup", sb.cg, "--policy", bad)
        check(r.returncode == 4, "invalid update: exit %d, expected 4: %s" %
              (r.returncode, (r.stderr + r.stdout).strip()))
        check("outbound_allow[1]" in r.stderr + r.stdout,
              "invalid update error does not name network.outbound_allow[1]: %r" %
              (r.stderr + r.stdout).strip())
        sb.allowed("tcp", "127.0.0.1", a.port)
        sb.denied("tcp", "127.0.0.1", b.port)
        after = c.find_sandbox(sb.cg)
        check(after.get("policy_sha256") == mid.get("policy_sha256") and
              after.get("policy_id") == mid.get("policy_id"),
              "a rejected update changed the sandbox: %r -> %r" % (mid, after))
        # Not JSON at all.
        r = c.ctl("update", "--cgroup", sb.cg, "--policy", c.policy(None, raw="{not json"))
        check(r.returncode == 4, "unparsable update: exit %d, expected 4: %s" %
              (r.returncode, (r.stderr + r.stdout).strip()))
        sb.denied("tcp", "127.0.0.1", b.port)
        sb.allowed("tcp", "127.0.0.1", a.port)


@test
def narrowing_update_tears_down_established(c):
    # DESIGN.md, non-negotiable 2: established connections to destinations a
    # new policy no longer allows are torn down (sock_diag SOCK_DESTROY).
    keep, drop = socket.socket(), socket.socket()
    try:
        for l in (keep, drop):
            l.bind(("127.0.0.1", 0))
            l.listen(8)  # never accepted: the handshake completes in the backlog
        kp, dp = keep.getsockname()[1], drop.getsockname()[1]
        with c.sandbox(["127.0.0.1:%d" % kp, "127.0.0.1:%d" % dp]) as sb:
            join = join_cgroup_fn(sb.cg)

            holders = []
            try:
                for port in (kp, dp):
                    p = subprocess.Popen([sys.executable, "-c", HOLD_CONNECTION, "127.0.0.1",
                                          str(port)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True, preexec_fn=join)
                    holders.append(p)
                    line = p.stdout.readline().strip()
                    check(line == "connected", "holder to :%d: %r" % (port, line))
                sb.update(c.policy(["127.0.0.1:%d" % kp]))
                outs = []
                for p in holders:
                    out, err = p.communicate("go\n", timeout=PROBE_TIMEOUT_S)
                    outs.append(out.strip())
                check(outs[0] == "alive", "a connection the new policy allows was cut: %r" %
                      outs[0])
                check(outs[1].startswith("dead"),
                      "a connection the narrowed policy denies is still established: %r" %
                      outs[1])
            finally:
                for p in holders:
                    if p.poll() is None:
                        p.kill()
                        p.wait(5)
    finally:
        keep.close()
        drop.close()


@test
def invalid_policy_at_attach(c):
    a = c.tcp("a")
    cases = [
        (["127.0.0.1:%d" % a.port, "127.0.0.1:70000"], None, "network.outbound_allow[1]"),
        (None, {"tenant": "e2e", "network": {"default": "allow", "outbound_allow": []}},
         "network.default"),
        (None, {"tenant": "e2e", "network": {"default": "deny", "outbound_allow": [],
                                             "bogus": 1}}, "bogus"),
        (None, {"network": {"default": "deny", "outbound_allow": []}}, "tenant"),
        (None, {"tenant": "e2e", "network": {"default": "deny", "outbound_allow": [],
                                             "allow_sockets": ["carrier-pigeon"]}},
         "network.allow_sockets[0]"),
    ]
    before = c.list_json()
    cg = c.mkcgroup("invalid")
    try:
        for allow, raw, field in cases:
            path = c.policy(allow, raw=raw)
            r = c.ctl("attach", "--cgroup", cg, "--policy", path)
            msg = (r.stderr + r.stdout).strip()
            check(r.returncode == 4, "invalid policy (%s): exit %d, expected 4: %s" %
                  (field, r.returncode, msg))
            check(field in msg, "error does not name %s: %r" % (field, msg))
            check(c.find_sandbox(cg) is None, "an invalid policy left a sandbox")
        check(c.list_json() == before, "`list --json` changed after rejected attaches")
        # Nothing attached: the cgroup is not confined at all.
        c.allowed(cg, "tcp", "127.0.0.1", a.port)
        c.allowed(cg, "socket", "inet", "dgram", "udplite")
    finally:
        cgroup_remove_tree(cg)


@test
def enforcement_survives_daemon_and_is_adopted(c):
    a, b, d = c.tcp("a"), c.tcp("b"), c.tcp("d")
    sb = Sandbox(c, c.policy(["127.0.0.1:%d" % a.port]), "adopt")
    try:
        sb.attach()
        sb.allowed("tcp", "127.0.0.1", a.port)
        sb.denied("tcp", "127.0.0.1", b.port)
        listed = c.find_sandbox(sb.cg)
        check(listed is not None, "`list --json` does not show %s" % sb.cg)
        c.daemon.kill9()
        # No daemon: enforcement stays exactly as it was.
        sb.allowed("tcp", "127.0.0.1", a.port)
        sb.denied("tcp", "127.0.0.1", b.port)
        sb.denied("udp-sendto", "127.0.0.1", b.port)
        sb.denied("socket", "inet", "raw", "icmp")
        r = c.ctl("status")
        check(r.returncode == 3, "`status` with egressd dead: exit %d, expected 3" %
              r.returncode)
        c.daemon.start()
        adopted = c.find_sandbox(sb.cg)
        check(adopted is not None, "restarted egressd does not list %s: %r" %
              (sb.cg, c.list_json()))
        for k in ("id", "cgroup_id", "policy_sha256", "tenant"):
            check(adopted.get(k) == listed.get(k), "adopted sandbox %s: %r, was %r" %
                  (k, adopted.get(k), listed.get(k)))
        sb.allowed("tcp", "127.0.0.1", a.port)
        sb.denied("tcp", "127.0.0.1", b.port)
        sb.update(c.policy(["127.0.0.1:%d" % a.port, "127.0.0.1:%d" % b.port]))
        sb.allowed("tcp", "127.0.0.1", b.port)
        sb.denied("tcp", "127.0.0.1", d.port)
        sb.detach()
        check(c.find_sandbox(sb.cg) is None, "detached sandbox still listed")
        # Detached, the cgroup is held under deny-all until the kernel
        # releases it (docs/security.md): nothing it runs gets out.
        c.denied(sb.cg, "tcp", "127.0.0.1", a.port)
        c.denied(sb.cg, "tcp", "127.0.0.1", d.port)
        c.denied(sb.cg, "socket", "inet", "raw", "icmp")
    finally:
        c.ensure_daemon()
        sb.remove()


@test
def sandboxes_are_isolated(c):
    a, b = c.pair("iso-a")
    b_t, b_u = c.pair("iso-b")
    with c.sandbox(["127.0.0.1:%d" % a.port], name="one", tenant="t1") as s1, \
         c.sandbox(["127.0.0.1:%d" % b_t.port], sockets=["raw"], name="two",
                   tenant="t2") as s2:
        s1.allowed("tcp", "127.0.0.1", a.port)
        s1.denied("tcp", "127.0.0.1", b_t.port)
        s1.denied("udp-sendto", "127.0.0.1", b_u.port)
        s1.denied("socket", "inet", "raw", "icmp")
        s2.allowed("tcp", "127.0.0.1", b_t.port)
        s2.denied("tcp", "127.0.0.1", a.port)
        s2.denied("udp-sendto", "127.0.0.1", b.port)
        s2.allowed("socket", "inet", "raw", "icmp")
        # An update of one leaves the other alone.
        s1.update(c.policy([], tenant="t1"))
        s1.denied("tcp", "127.0.0.1", a.port)
        s2.allowed("tcp", "127.0.0.1", b_t.port)


@test
def nested_sandbox_only_adds(c):
    a, b = c.tcp("a"), c.tcp("b")
    with c.sandbox(["127.0.0.1:%d" % a.port, "127.0.0.1:%d" % b.port], name="outer") as outer:
        # A sandbox inside a sandbox: both policies apply (multi-attach links),
        # the inner one can narrow, never widen.
        with Sandbox(c, c.policy(["127.0.0.1:%d" % a.port, "127.0.0.1:%d" % c.tcp("d").port],
                                 sockets=["raw"]), "inner", parent=outer.cg) as inner:
            inner.allowed("tcp", "127.0.0.1", a.port)
            inner.denied("tcp", "127.0.0.1", b.port)           # the inner policy denies
            inner.denied("tcp", "127.0.0.1", c.tcp("d").port)  # the outer policy denies
            inner.denied("socket", "inet", "raw", "icmp")      # the outer policy denies
            outer.allowed("tcp", "127.0.0.1", b.port)
        outer.allowed("tcp", "127.0.0.1", b.port)


@test
def egressctl_run(c):
    a, b = c.tcp("a"), c.tcp("b")
    pol = c.policy(["127.0.0.1:%d" % a.port])
    before = c.list_json()
    parent = c.mkcgroup("runparent")
    CLEANUP.push("run parent", cgroup_remove_tree, parent)
    for port, want_rc, want_line in ((a.port, 0, "ok"), (b.port, 1, "err EPERM")):
        # The command is the root of its own cgroup namespace ("0::/"); the
        # transient cgroup is a child of --cgroup-parent, gone afterwards.
        script = 'cat /proc/self/cgroup; exec "$0" "$@"'
        r = c.ctl("run", "--policy", pol, "--cgroup-parent", parent, "--", "/bin/sh", "-c",
                  script, c.netprobe, "tcp", "127.0.0.1", str(port))
        out = r.stdout
        check(r.returncode == want_rc, "run tcp :%d: exit %d, expected %d: %r %r" %
              (port, r.returncode, want_rc, out, r.stderr))
        check(want_line in out, "run tcp :%d printed %r" % (port, out))
        rel = run_cgroup_of(out)
        check(rel == "/", "the command is not the root of its cgroup namespace: %r" % out)
        left = [d for d in os.listdir(parent) if os.path.isdir(os.path.join(parent, d))]
        check(left == [], "transient cgroup(s) %r left behind in %s" % (left, parent))
    r = c.ctl("run", "--policy", pol, "--", c.netprobe, "socket", "inet", "raw", "icmp")
    check(r.returncode == 1 and "err EPERM" in r.stdout,
          "run raw socket: exit %d %r" % (r.returncode, r.stdout))
    r = c.ctl("run", "--policy", pol, "--", "/bin/sh", "-c", "exit 7")
    check(r.returncode == 7, "run `exit 7`: exit %d" % r.returncode)
    r = c.ctl("run", "--policy", c.policy(["127.0.0.1:70000"]), "--", "/bin/true")
    check(r.returncode == 4, "run with an invalid policy: exit %d, expected 4" % r.returncode)
    check(c.list_json() == before, "`run` left sandboxes behind: %r" % c.list_json())


@test
def sandboxed_peer_cannot_drive_egressd(c):
    # A confined process that reaches the control socket must not be able to
    # give itself a looser policy (or detach its own sandbox).
    a = c.tcp("a")
    pol = c.policy(["127.0.0.1:%d" % a.port])
    wide = c.policy(["127.0.0.0/8:*"])
    before = c.list_json()
    # Under `run` the control socket is not even there (its directory is
    # covered in the command's mount namespace) ...
    r = c.ctl("run", "--policy", pol, "--", c.egressctl, "--socket", c.sock, "status")
    check(r.returncode == 3 and "No such file" in r.stderr,
          "status from inside a run sandbox: exit %d %r" % (r.returncode, r.stderr))
    r = c.ctl("run", "--policy", pol, "--", c.egressctl, "--socket", c.sock, "run",
              "--policy", wide, "--", "/bin/true")
    check(r.returncode != 0, "a sandboxed egressctl run created a sandbox: exit %d" % r.returncode)
    check(c.list_json() == before, "sandboxes changed: %r" % c.list_json())
    # ... and a process of an attached sandbox that reaches it is refused.
    with c.sandbox(["127.0.0.1:%d" % a.port]) as sb:
        before = c.list_json()
        for args in (["status"], ["run", "--policy", wide, "--", "/bin/true"],
                     ["detach", "--cgroup", sb.cg]):
            r = subprocess.run([c.egressctl, "--socket", c.sock] + args, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=CTL_TIMEOUT_S,
                               preexec_fn=join_cgroup_fn(sb.cg))
            check(r.returncode != 0 and "forbidden" in r.stderr,
                  "%s from inside an attached sandbox: exit %d %r" %
                  (args[0], r.returncode, r.stderr))
        check(c.list_json() == before, "sandboxes changed: %r" % c.list_json())
    # The same command outside any sandbox is served.
    c.ctl_ok("status")
