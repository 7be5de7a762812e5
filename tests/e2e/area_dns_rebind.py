# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# DNS rebinding (issue 8, row 8; docs/dns.md "Rebinding"). Exec'd by run.py
# in its namespace after its own tests: every helper of run.py is in scope.
#
# The tool is root inside its sandbox and its policy allows a name whose zone
# it controls (here: names the harness's dnsmasq serves from its addn-hosts
# file). It makes the name answer with loopback, unspecified, link-local,
# private or broadcast addresses, then tries to reach them. Connections are
# only ever made to loopback addresses (a listener on 127.0.0.1 / ::1, and
# 0.0.0.0, which the kernel delivers locally); for 169.254.169.254, 10.1.2.3
# and 255.255.255.255 the test checks the answer, the events and the alert,
# never the network.


def rebind_names(c, spec):
    """Add name -> address(es) to the upstream zone; returns {key: name}."""
    z = need_dnsmasq(c)
    names = {}
    for key, addrs in spec.items():
        name = "rb-%s-%s.test" % (key, RAND)
        for a in addrs:
            z.add_host(name, a)
        names[key] = name
    return names


def rebind_events(c, sid, qname, verdict):
    return [e for e in obs_events(c, "--sandbox", str(sid))
            if e.get("type") == "dns" and e.get("verdict") == verdict and
            e.get("qname") == qname]


def rebind_expect_event(c, sid, qname, addr, cls):
    """A rebind event for qname listing addr with class cls, and the allow
    event of the same answer reporting the addresses that were left."""
    found = []

    def seen():
        found[:] = [e for e in rebind_events(c, sid, qname, "rebind")
                    if any(s.get("addr") == addr for s in e.get("stripped") or [])]
        return bool(found)

    check(wait_until(seen, 3, 0.1), "no rebind event for %s -> %s in `events --json`: %r" %
          (qname, addr, rebind_events(c, sid, qname, "rebind")))
    e = found[-1]
    s = [x for x in e["stripped"] if x.get("addr") == addr][0]
    check(s.get("class") == cls, "rebind event class for %s is %r, expected %r: %r" %
          (addr, s.get("class"), cls, e))
    check(e.get("stripped_total", 0) >= 1 and e.get("tenant") == "e2e",
          "rebind event fields: %r" % e)
    return e


def rebind_allow_event(c, sid, qname):
    found = []

    def seen():
        found[:] = rebind_events(c, sid, qname, "allow")
        return bool(found)

    check(wait_until(seen, 3, 0.1), "no allow event for %s" % qname)
    return found[-1]


@test
def rebind_local_answers_stripped(c):
    lo = c.tcp("rebind-lo", "127.0.0.1")
    lo6 = c.tcp("rebind-lo6", "::1")
    names = rebind_names(c, {
        "lo": ["127.0.0.1"], "any": ["0.0.0.0"], "lo6": ["::1"], "meta": ["169.254.169.254"],
        "priv": ["10.1.2.3"], "mapped": ["::ffff:127.0.0.1"], "bcast": ["255.255.255.255"]})
    # (name, qtype, stripped address as the event shows it, class)
    cases = [("lo", "A", "127.0.0.1", "loopback"), ("any", "A", "0.0.0.0", "unspecified"),
             ("lo6", "AAAA", "::1", "loopback"),
             ("meta", "A", "169.254.169.254", "link-local"),
             ("priv", "A", "10.1.2.3", "private"),
             ("mapped", "AAAA", "::ffff:127.0.0.1", "loopback"),
             ("bcast", "A", "255.255.255.255", "broadcast")]
    allow = ["%s:%d" % (names[k], lo.port) for k in names] + \
            ["tcp/%s:%d" % (names["lo6"], lo6.port)]
    with c.sandbox(allow) as sb:
        sid = sandbox_id(c, sb)
        for key, qtype, addr, cls in cases:
            # The upstream does answer it: the stripping is egressd's.
            rc, addrs, _, line = dns_query("udp", "127.0.0.1", need_dnsmasq(c).port,
                                           names[key], qtype)
            check(rc == "NOERROR" and addr in addrs, "dnsmasq does not serve %s -> %s: %r" %
                  (names[key], addr, line))
            # From inside: NOERROR, no address (NODATA), over UDP and TCP,
            # through any resolver address the tool names.
            for mode, server in (("udp", "127.0.0.2"), ("tcp", "127.0.0.53"),
                                 ("udp", "::1")):
                rc, addrs, _, line = dns_query(mode, server, 53, names[key], qtype, cg=sb.cg)
                check(rc == "NOERROR" and addrs == [],
                      "%s %s via %s/%s: expected NOERROR without addresses, got %r" %
                      (names[key], qtype, mode, server, line))
            rebind_expect_event(c, sid, names[key], addr, cls)
            e = rebind_allow_event(c, sid, names[key])
            check(e.get("answers") == 0 and not e.get("addresses"),
                  "%s: the released answer still reports addresses: %r" % (names[key], e))
        # Nothing was learned: the listeners behind the loopback answers stay
        # out of reach (the kernel would deliver 0.0.0.0 to 127.0.0.1 too).
        before, before6 = lo.accepted, lo6.accepted
        sb.denied("tcp", "127.0.0.1", lo.port)
        sb.denied("tcp", "0.0.0.0", lo.port)
        sb.denied("tcp-mapped", "127.0.0.1", lo.port)
        sb.denied("udp-sendto", "127.0.0.1", lo.port)
        sb.denied("tcp6", "::1", lo6.port)
        check(lo.accepted == before and lo6.accepted == before6,
              "a connection reached a listener behind a stripped answer")
        # One dns_rebind alert for the sandbox (de-duplicated per sandbox),
        # with the event as evidence.
        check(wait_until(lambda: obs_alerts(c, "dns_rebind", sid), 3, 0.1),
              "no dns_rebind alert for sandbox %d: %r" % (sid, obs_alerts(c, sandbox=sid)))
        a = obs_alerts(c, "dns_rebind", sid)[0]
        check(a.get("severity") == "critical" and a.get("tenant") == "e2e" and
              (a.get("evidence") or {}).get("stripped"), "dns_rebind alert: %r" % a)


@test
def rebind_mixed_answer_keeps_public(c):
    lo = c.tcp("rebind-lo", "127.0.0.1")
    names = rebind_names(c, {"mix": ["198.51.100.7", "127.0.0.1", "203.0.113.9"],
                             "mix6": ["2001:db8::7", "::1", "fd00::7"]})
    with c.sandbox(["%s:%d" % (names["mix"], lo.port),
                    "%s:%d" % (names["mix6"], lo.port)]) as sb:
        sid = sandbox_id(c, sb)
        for mode in ("udp", "tcp"):
            rc, addrs, _, line = dns_query(mode, "127.0.0.2", 53, names["mix"], "A", cg=sb.cg)
            check(rc == "NOERROR" and sorted(addrs) == ["198.51.100.7", "203.0.113.9"],
                  "%s A over %s: expected exactly the two public addresses, got %r" %
                  (names["mix"], mode, line))
        rc, addrs, _, line = dns_query("udp", "::1", 53, names["mix6"], "AAAA", cg=sb.cg)
        check(rc == "NOERROR" and addrs == ["2001:db8::7"],
              "%s AAAA: expected only 2001:db8::7, got %r" % (names["mix6"], line))
        rebind_expect_event(c, sid, names["mix"], "127.0.0.1", "loopback")
        e = rebind_expect_event(c, sid, names["mix6"], "fd00::7", "private")
        check(any(s.get("addr") == "::1" for s in e["stripped"]), "::1 not stripped: %r" % e)
        # What was learned is exactly what was released.
        e = rebind_allow_event(c, sid, names["mix"])
        check(e.get("reason") == "learned" and
              sorted(a["addr"] for a in e.get("addresses") or []) == ["198.51.100.7", "203.0.113.9"],
              "the learned addresses of %s: %r" % (names["mix"], e))
        e = rebind_allow_event(c, sid, names["mix6"])
        check([a["addr"] for a in e.get("addresses") or []] == ["2001:db8::7"], "the learned addresses of %s: %r" %
              (names["mix6"], e))
        before = lo.accepted
        sb.denied("tcp", "127.0.0.1", lo.port)
        check(lo.accepted == before, "the stripped 127.0.0.1 was reachable")


@test
def rebind_cname_to_local(c):
    # alias.test is a CNAME to target.test (127.0.0.24) in the harness zone.
    t = srv(c, "dns-target", "target.test")
    ip = DNS_ZONE["target.test"]
    with c.sandbox(["alias.test:%d" % t.port]) as sb:
        sid = sandbox_id(c, sb)
        rc, addrs, _, line = dns_query("udp", "127.0.0.2", 53, "alias.test", "A", cg=sb.cg)
        check(rc == "NOERROR" and addrs == [], "alias.test: expected the CNAME without its "
              "127.0.0.24, got %r" % line)
        rebind_expect_event(c, sid, "alias.test", ip, "loopback")
        before = t.accepted
        sb.denied("tcp", ip, t.port)
        check(t.accepted == before, "the CNAME target's stripped address was reachable")
    # Twin: the policy expects loopback answers; the same chain is learned.
    with c.sandbox(["alias.test:%d" % t.port], extra_network=DNS_REBIND_LO) as sb:
        dns_ok(c, sb, "alias.test", want=ip)
        before = t.accepted
        sb.allowed("tcp", ip, t.port)
        check(t.accepted > before, "the connection to the learned CNAME target never arrived")


@test
def rebind_allow_lets_loopback_resolve(c):
    lo = c.tcp("rebind-lo", "127.0.0.1")
    lo6 = c.tcp("rebind-lo6", "::1")
    names = rebind_names(c, {"twin": ["127.0.0.1"], "twin6": ["::1"], "twinpriv": ["10.1.2.3"]})
    allow = ["%s:%d" % (names["twin"], lo.port), "tcp/%s:%d" % (names["twin6"], lo6.port),
             "%s:%d" % (names["twinpriv"], lo.port)]
    with c.sandbox(allow, extra_network={"dns_rebind_allow": ["127.0.0.0/8", "[::1/128]"]}) as sb:
        sid = sandbox_id(c, sb)
        sb.denied("tcp", "127.0.0.1", lo.port)  # before resolving: nothing open
        dns_ok(c, sb, names["twin"], want="127.0.0.1")
        before = lo.accepted
        sb.allowed("tcp", "127.0.0.1", lo.port)
        check(lo.accepted > before, "the connection to the learned 127.0.0.1 never arrived")
        dns_ok(c, sb, names["twin6"], "AAAA", server="::1", want="::1")
        before6 = lo6.accepted
        sb.allowed("tcp6", "::1", lo6.port)
        check(lo6.accepted > before6, "the connection to the learned ::1 never arrived")
        e = rebind_allow_event(c, sid, names["twin"])
        check([a["addr"] for a in e.get("addresses") or []] == ["127.0.0.1"] and e.get("reason") == "learned",
              "the allow event of %s: %r" % (names["twin"], e))
        # The exception covers only what it lists: 10.1.2.3 is still stripped.
        rc, addrs, _, line = dns_query("udp", "127.0.0.2", 53, names["twinpriv"], "A",
                                       cg=sb.cg)
        check(rc == "NOERROR" and addrs == [], "%s: 10.1.2.3 was not stripped: %r" %
              (names["twinpriv"], line))
        rebind_expect_event(c, sid, names["twinpriv"], "10.1.2.3", "private")
        check(not rebind_events(c, sid, names["twin"], "rebind"),
              "a rebind event for a covered answer")


@test
def rebind_allow_invalid_rejected(c):
    lo = c.tcp("rebind-lo", "127.0.0.1")
    names = rebind_names(c, {"upd": ["127.0.0.1"]})
    for bad, why in ((["localhost"], "network.dns_rebind_allow[0]"),
                     (["127.0.0.0/8", "10.0.0.0/40"], "network.dns_rebind_allow[1]"),
                     ("127.0.0.0/8", "network.dns_rebind_allow")):
        pol = c.policy(["%s:%d" % (names["upd"], lo.port)],
                       extra_network={"dns_rebind_allow": bad})
        cg = c.mkcgroup("rebind-bad")
        try:
            r = c.ctl("attach", "--cgroup", cg, "--policy", pol)
            out = r.stdout + r.stderr
            check(r.returncode != 0 and why in out,
                  "attach with dns_rebind_allow %r: exit %d, %r (expected an error naming %s)"
                  % (bad, r.returncode, out.strip(), why))
            check(c.find_sandbox(cg) is None, "a rejected policy left a sandbox behind")
        finally:
            if c.find_sandbox(cg) is not None:
                c.ctl("detach", "--cgroup", cg)
            cgroup_remove_tree(cg)
    # A bad update keeps the previous policy: the name is still stripped.
    with c.sandbox(["%s:%d" % (names["upd"], lo.port)]) as sb:
        r = c.ctl("update", "--cgroup", sb.cg, "--policy",
                  c.policy(["%s:%d" % (names["upd"], lo.port)],
                           extra_network={"dns_rebind_allow": ["127.0.0.0/8", 8]}))
        check(r.returncode != 0 and "network.dns_rebind_allow[1]" in r.stdout + r.stderr,
              "bad update: exit %d, %r" % (r.returncode, (r.stdout + r.stderr).strip()))
        rc, addrs, _, line = dns_query("udp", "127.0.0.2", 53, names["upd"], "A", cg=sb.cg)
        check(rc == "NOERROR" and addrs == [], "after a rejected update: %r" % line)
        sb.denied("tcp", "127.0.0.1", lo.port)
        # Sanity twin: a good update that adds the exception takes effect.
        sb.update(c.policy(["%s:%d" % (names["upd"], lo.port)], extra_network=DNS_REBIND_LO))
        dns_ok(c, sb, names["upd"], want="127.0.0.1")
        sb.allowed("tcp", "127.0.0.1", lo.port)


@test
def rebind_allow_removed_drops_learned(c):
    # A learned loopback address lives only as long as the policy expects it:
    # an update without the exception drops it and cuts what uses it.
    names = rebind_names(c, {"narrow": ["127.0.0.1"]})
    hold = socket.socket()
    try:
        hold.bind(("127.0.0.1", 0))
        hold.listen(8)  # never accepted: the handshake completes in the backlog
        port = hold.getsockname()[1]
        allow = ["tcp/%s:%d" % (names["narrow"], port)]
        with c.sandbox(allow, extra_network=DNS_REBIND_LO) as sb:
            dns_ok(c, sb, names["narrow"], want="127.0.0.1")
            sb.allowed("tcp", "127.0.0.1", port)
            join = join_cgroup_fn(sb.cg)

            def holder():
                p = subprocess.Popen([sys.executable, "-c", HOLD_CONNECTION, "127.0.0.1",
                                      str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, preexec_fn=join)
                CLEANUP.push("rebind holder", lambda: p.poll() is None and p.kill())
                line = p.stdout.readline().strip()
                check(line == "connected", "holder: %r" % line)
                return p

            # Sanity twin: an update that keeps the exception keeps both.
            p = holder()
            sb.update(c.policy(allow, extra_network=DNS_REBIND_LO))
            out, _ = p.communicate("go\n", timeout=PROBE_TIMEOUT_S)
            check(out.strip() == "alive", "an update that keeps dns_rebind_allow cut the "
                  "connection: %r" % out)
            sb.allowed("tcp", "127.0.0.1", port)
            # Without it: the learned 127.0.0.1 goes, with the connection.
            p = holder()
            sb.update(c.policy(allow))
            out, _ = p.communicate("go\n", timeout=PROBE_TIMEOUT_S)
            check(out.strip().startswith("dead"), "a connection to a learned address the new "
                  "policy no longer expects survived: %r" % out)
            sb.denied("tcp", "127.0.0.1", port)
            rc, addrs, _, line = dns_query("udp", "127.0.0.2", 53, names["narrow"], "A",
                                           cg=sb.cg)
            check(rc == "NOERROR" and addrs == [], "after the update: %r" % line)
    finally:
        hold.close()
