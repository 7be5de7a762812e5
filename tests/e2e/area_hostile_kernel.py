# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Hostile tools against the kernel side (issue 8, docs/security.md rows 1 in
# attach mode, 7 and 10): the unspecified address, connected UDP with
# ancillary data, and leaving the sandbox cgroup. Exec'd by run.py in its
# namespace: every harness helper is in scope.

import struct as _struct


def hk_rule_value(ranges, expires_ns=0):
    """struct egr_rule: expires_ns, nranges, pad, 8 x (lo, hi, protos), pad2."""
    vals = []
    for lo, hi, protos in ranges:
        vals += [lo, hi, protos]
    vals += [0, 0, 0] * (8 - len(ranges))
    return _struct.pack("<QIH" + "HHH" * 8 + "H", expires_ns, len(ranges), 0, *vals, 0)


def hk_put_rule(c, sb, addr, ranges, expires_ns=0):
    """Write one allowlist prefix straight into the sandbox's kernel rules, as
    the DNS proxy does for a learned answer (a sinkhole's 0.0.0.0, an expired
    TTL): the kernel's verdict must not depend on how the entry got there."""
    s = c.find_sandbox(sb.cg)
    check(s is not None and s.get("policy_id"), "sandbox %s has no policy_id" % sb.cg)
    pid = int(s["policy_id"])
    if ":" in addr:
        key = _struct.pack("<II", 32 + 128, pid) + socket.inet_pton(socket.AF_INET6, addr)
        mp = os.path.join(c.bpffs, "maps", "egr_allow6")
    else:
        key = _struct.pack("<II", 32 + 32, pid) + socket.inet_pton(socket.AF_INET, addr)
        mp = os.path.join(c.bpffs, "maps", "egr_allow4")
    hexs = lambda b: ["0x%02x" % x for x in b]
    must(["bpftool", "map", "update", "pinned", mp, "key", "hex"] +
         [h[2:] for h in hexs(key)] + ["value", "hex"] +
         [h[2:] for h in hexs(hk_rule_value(ranges, expires_ns))])


HK_ANY = 0x3  # EGR_PROTO_TCP | EGR_PROTO_UDP


@test
def unspecified_literal_refused(c):
    """0.0.0.0 and :: in outbound_allow: a clear error naming the entry."""
    for entry, msg in (("0.0.0.0:8080", "0.0.0.0 is not a destination"),
                       ("[::]:8080", "[::] is not a destination"),
                       ("[::ffff:0.0.0.0]:8080", "0.0.0.0 is not a destination")):
        cg = c.mkcgroup("unspec-lit")
        CLEANUP.push("cgroup", cgroup_remove_tree, cg)
        r = c.ctl("attach", "--cgroup", cg, "--policy", c.policy(["127.0.0.9:1", entry]))
        out = r.stdout + r.stderr
        check(r.returncode != 0, "a policy allowing %s was accepted" % entry)
        check("outbound_allow[1]" in out and msg in out,
              "the error for %s does not name the entry: %r" % (entry, out))
        check(c.find_sandbox(cg) is None, "a refused policy left sandbox %s" % cg)
    # Sanity twin: the loopback itself and a prefix holding 0.0.0.0 are fine.
    with c.sandbox(["127.0.0.1:8080", "[::1]:8080", "0.0.0.0/0:9"]):
        pass


@test
def unspecified_is_loopback(c):
    """A rule for 0.0.0.0:P / [::]:P (learned from a sinkhole's answer) does
    not open 127.0.0.1:P / [::1]:P, also after binding a local address."""
    a, u = c.tcp("hk-a"), c.udp("hk-u")
    a6 = c.tcp("hk-a6", "::1")
    b3 = c.tcp("hk-b3", "127.0.0.3")
    # The vector is real on this kernel: outside any sandbox, 0.0.0.0 and ::
    # reach the loopback listeners, and a bound source turns 0.0.0.0 into it.
    for action, srv_ in ((("tcp", "0.0.0.0", a.port), a), (("tcp6", "::", a6.port), a6),
                         (("tcp-bound", "127.0.0.3", "0.0.0.0", b3.port), b3)):
        before = srv_.accepted
        r = c.probe(None, *action)
        check(r.rc == 0 and r.line == "ok", "outside a sandbox: %s" % r)
        check(wait_until(lambda: srv_.accepted > before, 2), "no connection: %s" % r)
    with c.sandbox(["192.0.2.1:9"], name="unspec") as sb:
        for port in (a.port, u.port, b3.port):
            hk_put_rule(c, sb, "0.0.0.0", [(port, port, HK_ANY)])
        hk_put_rule(c, sb, "::", [(a6.port, a6.port, HK_ANY)])
        seen = (a.accepted, a6.accepted, b3.accepted, u.received)
        sb.denied("tcp", "0.0.0.0", a.port)
        sb.denied("tcp-mapped", "0.0.0.0", a.port)
        sb.denied("tcp6", "::", a6.port)
        sb.denied("tcp-bound", "127.0.0.3", "0.0.0.0", b3.port)
        sb.denied("tcp-bound", "127.0.0.1", "0.0.0.0", a.port)
        sb.denied("tfo", "0.0.0.0", a.port)
        sb.denied("udp-sendto", "0.0.0.0", u.port)
        sb.denied("udp-connect", "0.0.0.0", u.port)
        sb.denied("udp-mapped-sendto", "0.0.0.0", u.port)
        sb.denied("udp-connect-cmsg", "0.0.0.0", u.port, 0)
        time.sleep(0.3)
        check((a.accepted, a6.accepted, b3.accepted, u.received) == seen,
              "something reached a loopback listener: %r -> %r" %
              (seen, (a.accepted, a6.accepted, b3.accepted, u.received)))
        # The deny event names the loopback that was judged.
        sid = sandbox_id(c, sb)
        ev = []

        def judged():
            ev[:] = [e for e in obs_events(c, "--sandbox", str(sid))
                     if e.get("type") == "connect" and e.get("verdict") == "deny" and
                     e.get("port") == a.port]
            return bool(ev)

        check(wait_until(judged, 3, 0.1), "no deny event for port %d" % a.port)
        check(all(e.get("dst") in ("127.0.0.1", "::ffff:127.0.0.1") for e in ev),
              "deny events do not name 127.0.0.1: %r" % ev)
    # Sanity twin: with the loopback allowed, 0.0.0.0 and :: work as the
    # kernel would make them work, and go where was judged.
    with c.sandbox(["127.0.0.1:%d" % a.port, "[::1]:%d" % a6.port,
                    "udp/127.0.0.1:%d" % u.port], name="unspec-ok") as sb:
        for action, srv_ in ((("tcp", "0.0.0.0", a.port), a),
                             (("tcp", "127.0.0.1", a.port), a),
                             (("tcp-mapped", "0.0.0.0", a.port), a),
                             (("tcp6", "::", a6.port), a6),
                             (("tcp-bound", "127.0.0.3", "0.0.0.0", a.port), a)):
            before = srv_.accepted
            sb.allowed(*action)
            check(wait_until(lambda: srv_.accepted > before, 2),
                  "%r was allowed but never arrived" % (action,))
        before = u.received
        sb.allowed("udp-sendto", "0.0.0.0", u.port)
        sb.allowed("udp-connect", "0.0.0.0", u.port)
        check(u.wait_for(before + 2), "datagrams to 0.0.0.0 never reached 127.0.0.1")
        # Still only that port: 0.0.0.0 on another loopback port is denied.
        sb.denied("tcp", "0.0.0.0", b3.port)


@test
def connected_udp_cmsg(c):
    """Row 10: a send with no address and an IP_TOS / IPV6_TCLASS control
    message on a connected UDP socket is judged by the socket's peer."""
    u, u6, other = c.udp("hk-cu"), c.udp("hk-cu6", "::1"), c.udp("hk-cu-other")
    with c.sandbox(["udp/127.0.0.1:%d" % u.port, "udp/[::1]:%d" % u6.port],
                   name="cmsg") as sb:
        before, before6 = u.received, u6.received
        # The twin: the allowed peer, with a control message (EPERM before).
        sb.allowed("udp-connect-cmsg", "127.0.0.1", u.port, 0)
        sb.allowed("udp-connect-cmsg", "::1", u6.port, 0)
        check(u.wait_for(before + 1) and u6.wait_for(before6 + 1),
              "the datagrams with a control message never arrived")
        # Without the control message, as before.
        sb.allowed("udp-connect", "127.0.0.1", u.port)
        # A denied peer: connect() already refuses it.
        sb.denied("udp-connect-cmsg", "127.0.0.1", other.port, 0)
        # A peer the policy stopped allowing after connect(): the socket
        # stays connected (a DNS-learned rule expiring tears nothing down),
        # and the next send with a control message is judged against the
        # rules of now, not waved through as connected.
        argv = [c.netprobe, "udp-connect-cmsg", "127.0.0.1", str(u.port), "3"]
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             preexec_fn=join_cgroup_fn(sb.cg))
        CLEANUP.push("netprobe", lambda: p.poll() is None and p.kill())
        first = u.received
        check(u.wait_for(first + 1, 2), "the first send of the connected socket never arrived")
        hk_put_rule(c, sb, "127.0.0.1", [(u.port, u.port, 0x2)], expires_ns=1)
        out, err = p.communicate(timeout=PROBE_TIMEOUT_S)
        res = ProbeResult(argv[1:], p.returncode, out, err)
        check(res.rc == 1 and res.errno == "EPERM",
              "a send to a peer no longer allowed: %s" % res)
        sb.denied("udp-sendto", "127.0.0.1", u.port)
