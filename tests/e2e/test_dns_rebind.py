# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# DNS rebinding (issue 8, row 8; docs/dns.md "Rebinding"). Run by run.py
# (harness.runner) after the first round's tests.
#
# The tool is root inside its sandbox and its policy allows a name whose zone
# it controls (here: names the harness's dnsmasq serves from its addn-hosts
# file). It makes the name answer with loopback, unspecified, link-local,
# private or broadcast addresses, then tries to reach them. Connections are
# only ever made to loopback addresses (a listener on 127.0.0.1 / ::1, and
# 0.0.0.0, which the kernel delivers locally); for 169.254.169.254, 10.1.2.3
# and 255.255.255.255 the test checks the answer, the events and the alert,
# never the network.

import socket
import struct
import subprocess
import sys
import threading
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


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
    names = rebind_names(c, {"mix": ["93.184.216.34", "127.0.0.1", "151.101.1.69"],
                             "mix6": ["2606:4700::6810:84e5", "::1", "fd00::7"]})
    with c.sandbox(["%s:%d" % (names["mix"], lo.port),
                    "%s:%d" % (names["mix6"], lo.port)]) as sb:
        sid = sandbox_id(c, sb)
        for mode in ("udp", "tcp"):
            rc, addrs, _, line = dns_query(mode, "127.0.0.2", 53, names["mix"], "A", cg=sb.cg)
            check(rc == "NOERROR" and sorted(addrs) == ["151.101.1.69", "93.184.216.34"],
                  "%s A over %s: expected exactly the two public addresses, got %r" %
                  (names["mix"], mode, line))
        rc, addrs, _, line = dns_query("udp", "::1", 53, names["mix6"], "AAAA", cg=sb.cg)
        check(rc == "NOERROR" and addrs == ["2606:4700::6810:84e5"],
              "%s AAAA: expected only 2606:4700::6810:84e5, got %r" % (names["mix6"], line))
        rebind_expect_event(c, sid, names["mix"], "127.0.0.1", "loopback")
        e = rebind_expect_event(c, sid, names["mix6"], "fd00::7", "private")
        check(any(s.get("addr") == "::1" for s in e["stripped"]), "::1 not stripped: %r" % e)
        # What was learned is exactly what was released.
        e = rebind_allow_event(c, sid, names["mix"])
        check(e.get("reason") == "learned" and
              sorted(a["addr"] for a in e.get("addresses") or []) == ["151.101.1.69", "93.184.216.34"],
              "the learned addresses of %s: %r" % (names["mix"], e))
        e = rebind_allow_event(c, sid, names["mix6"])
        check([a["addr"] for a in e.get("addresses") or []] == ["2606:4700::6810:84e5"], "the learned addresses of %s: %r" %
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


# --- red team 1 findings F4, F5 (copied from branch red1's area_redteam1.py) ---

def rt1_local_addr(c, addr):
    """A veth of our own with addr/32 on it in the host's network namespace:
    a local address of the host outside loopback and private space (like the
    public address of eth0 on a cloud host; on this dev VM eth0 has 192.0.2.2)."""
    a, b = "rt1a" + IF_TAG, "rt1b" + IF_TAG
    must(["ip", "link", "add", a, "type", "veth", "peer", "name", b])
    CLEANUP.push("rt1 veth", run, ["ip", "link", "del", a])
    must(["ip", "addr", "add", addr + "/32", "dev", a])
    must(["ip", "link", "set", a, "up"])
    must(["ip", "link", "set", b, "up"])


@test
def redteam1_rebind_host_own_address(c):
    # Finding R3: the rebinding filter knows ranges, not the host. An allowed
    # name answering one of the host's own addresses (eth0's public address,
    # a bridge's address) is learned, and the tool reaches every host service
    # bound to the wildcard address: the classic rebind to "this machine".
    addr = "198.51.100.177"
    rt1_local_addr(c, addr)
    srv = c.tcp("rt1-host", addr)
    names = rebind_names(c, {"self": [addr]})
    name = names["self"]
    with c.sandbox(["%s:%d" % (name, srv.port)]) as sb:
        rc, addrs, _, line = dns_query("udp", "127.0.0.2", 53, name, "A", cg=sb.cg)
        before = srv.accepted
        r = c.probe(sb.cg, "tcp", addr, srv.port)
        time.sleep(0.3)
        check(r.rc == 1 and r.errno == "EPERM" and srv.accepted == before,
              "a DNS answer naming the host's own address %s was learned and the tool "
              "reached a host listener on it (answer %r, connect %s)" % (addr, line, r))
        check(rc == "NOERROR" and addrs == [],
              "the answer with the host's own address %s was released: %r" % (addr, line))


@test
def redteam1_rebind_special_purpose_v4(c):
    # Finding R4: special-purpose IPv4 space the classifier does not know is
    # learned: 240.0.0.0/4 (reserved), 198.18.0.0/15 (benchmarking, used for
    # internal networks), 192.0.0.0/24 (IETF protocol assignments, DS-Lite
    # 192.0.0.1-7). The answer is checked, never the network.
    cases = {"res": "240.0.0.1", "bench": "198.18.0.1", "ietf": "192.0.0.8"}
    names = rebind_names(c, {k: [v] for k, v in cases.items()})
    with c.sandbox(["%s:443" % n for n in names.values()]) as sb:
        bad = []
        for k, addr in cases.items():
            rc, addrs, _, line = dns_query("udp", "127.0.0.2", 53, names[k], "A", cg=sb.cg)
            if addr in addrs:
                bad.append(addr)
        check(not bad, "special-purpose IPv4 answers learned and released: %r" % bad)


# --- F4: the host's (and the sandbox namespace's) own addresses -------------
# Global addresses (no range matches them): only egressd's live set of local
# addresses can tell. Traffic goes only to them while they are local.
RB_OWN4, RB_OWN6, RB_NSOWN4 = "5.5.177.7", "2a00:5:177::7", "5.5.177.9"


def rb_own_veth(c):
    """A veth pair of our own in the host namespace with RB_OWN4/32 and
    RB_OWN6/128 on it; returns a function that removes both addresses."""
    a, b = "rbfa" + IF_TAG, "rbfb" + IF_TAG
    must(["ip", "link", "add", a, "type", "veth", "peer", "name", b])
    CLEANUP.push("rbf veth", run, ["ip", "link", "del", a])
    must(["ip", "link", "set", a, "up"])
    must(["ip", "link", "set", b, "up"])
    must(["ip", "addr", "add", RB_OWN4 + "/32", "dev", a])
    must(["ip", "-6", "addr", "add", RB_OWN6 + "/128", "dev", a, "nodad"])

    def remove():
        must(["ip", "addr", "del", RB_OWN4 + "/32", "dev", a])
        must(["ip", "-6", "addr", "del", RB_OWN6 + "/128", "dev", a])
    return remove


@test
def rebind_host_own_global_address(c):
    # The address is added after egressd started: the set follows changes.
    remove = rb_own_veth(c)
    try:
        rb_host_own_global_address(c, remove)
    finally:
        run(["ip", "link", "del", "rbfa" + IF_TAG])


def rb_host_own_global_address(c, remove):
    srv4 = c.tcp("rbf-own", RB_OWN4)
    names = rebind_names(c, {"own": [RB_OWN4], "own6": [RB_OWN6],
                             "ownmapped": ["::ffff:" + RB_OWN4],
                             "ownmix": [RB_OWN4, "93.184.216.34"]})
    allow = ["%s:%d" % (names[k], srv4.port) for k in names]
    with c.sandbox(allow) as sb:
        sid = sandbox_id(c, sb)
        for key, qtype, addr in (("own", "A", RB_OWN4), ("own6", "AAAA", RB_OWN6),
                                 ("ownmapped", "AAAA", "::ffff:" + RB_OWN4)):
            for mode, server in (("udp", "127.0.0.2"), ("tcp", "127.0.0.53")):
                rc, addrs, _, line = dns_query(mode, server, 53, names[key], qtype, cg=sb.cg)
                check(rc == "NOERROR" and addrs == [],
                      "%s %s over %s: the host's own address %s was released: %r" %
                      (names[key], qtype, mode, addr, line))
            rebind_expect_event(c, sid, names[key], addr, "host-local")
        rc, addrs, _, line = dns_query("udp", "127.0.0.2", 53, names["ownmix"], "A", cg=sb.cg)
        check(rc == "NOERROR" and addrs == ["93.184.216.34"],
              "%s: expected only the global address, got %r" % (names["ownmix"], line))
        before = srv4.accepted
        sb.denied("tcp", RB_OWN4, srv4.port)
        time.sleep(0.2)
        check(srv4.accepted == before, "a stripped host address was reachable")
    # Twin: a policy that expects it lists it; the same name resolves, is
    # learned and reaches the listener the same way.
    with c.sandbox(allow, extra_network={"dns_rebind_allow": [RB_OWN4 + "/32"]}) as sb:
        dns_ok(c, sb, names["own"], want=RB_OWN4)
        before = srv4.accepted
        sb.allowed("tcp", RB_OWN4, srv4.port)
        check(wait_until(lambda: srv4.accepted > before, 2, 0.05),
              "the connection to the learned host address never arrived")
        # An update without the exception drops the learned host address
        # (no range names it: only the local set can tell).
        sb.update(c.policy(allow))
        before = srv4.accepted
        sb.denied("tcp", RB_OWN4, srv4.port)
        time.sleep(0.2)
        check(srv4.accepted == before, "a learned host address survived an update that no "
              "longer lets the name point to it")
    # Twin: once the addresses are gone from the host, they are global
    # again and resolve (answer only: no traffic to them now).
    remove()
    with c.sandbox(allow) as sb:
        for key, qtype, addr in (("own", "A", RB_OWN4), ("own6", "AAAA", RB_OWN6)):
            got = []

            def resolved():
                rc, addrs, _, line = dns_query("udp", "127.0.0.2", 53, names[key], qtype,
                                               cg=sb.cg)
                got[:] = [line]
                return rc == "NOERROR" and addrs == [addr]
            check(wait_until(resolved, 3, 0.2), "%s after its address left the host: %r" %
                  (names[key], got))


@test
def rebind_netns_own_address(c):
    # A sandbox in its own network namespace: that namespace's addresses
    # count as local too (egressd watches it from inside).
    ns = c.need_netns()
    nspath = "/run/netns/" + ns.name
    # A burst of 300 address changes (more than egressd reads per wake-up)
    # comes after the first check: its last address must be known by the
    # time the next answer naming it is judged.
    burst = ["5.5.%d.%d" % (178 + i // 250, 1 + i % 250) for i in range(300)]

    def ns_ip_batch(verb, addrs, check_rc):
        r = subprocess.run(["nsenter", "--net=" + nspath, "ip", "-force", "-batch", "-"],
                           input="".join("addr %s %s/32 dev lo\n" % (verb, a) for a in addrs),
                           text=True, capture_output=True, timeout=30)
        if check_rc:
            check(r.returncode == 0, "ip -batch addr %s: %s" % (verb, r.stderr.strip()))

    CLEANUP.push("rbf ns addrs", ns_ip_batch, "del", [RB_NSOWN4] + burst, False)
    try:
        ns_ip_batch("add", [RB_NSOWN4], True)
        names = rebind_names(c, {"nsown": [RB_NSOWN4], "nsburst": [burst[-1]]})
        pol = c.policy(["%s:443" % names["nsown"], "%s:443" % names["nsburst"]])
        with NsSandbox(c, pol, nspath) as sb:
            sid = sandbox_id(c, sb)
            rc, addrs, _, line = dns_query("udp", "127.0.0.2", 53, names["nsown"], "A",
                                           cg=sb.cg, netns=nspath)
            check(rc == "NOERROR" and addrs == [],
                  "the sandbox namespace's own address %s was released: %r" %
                  (RB_NSOWN4, line))
            rebind_expect_event(c, sid, names["nsown"], RB_NSOWN4, "host-local")
            ns_ip_batch("add", burst, True)
            rc, addrs, _, line = dns_query("udp", "127.0.0.2", 53, names["nsburst"], "A",
                                           cg=sb.cg, netns=nspath)
            check(rc == "NOERROR" and addrs == [],
                  "after a burst of address changes, %s was released: %r" % (burst[-1], line))
        # Twin: for a sandbox in the host namespace they are global addresses.
        with c.sandbox(["%s:443" % names["nsown"]]) as sb:
            dns_ok(c, sb, names["nsown"], want=RB_NSOWN4)
    finally:
        ns_ip_batch("del", [RB_NSOWN4] + burst, False)


RB_LISTENER = r"""
import socket, sys
s = socket.socket(socket.AF_INET6)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("::", 0)); s.listen(16)
print(s.getsockname()[1], flush=True)
while True:
    c, a = s.accept(); print("accept", a[0], flush=True); c.close()
"""


@test
def rebind_netns_local_route(c):
    # Issue 23, finding 7: a prefix delivered locally by a route, not by an
    # interface address (AnyIP: `ip route add local PREFIX dev lo`), in the
    # sandbox's own namespace, where its root can add one. An answer into
    # it is stripped (the FIB says RTN_LOCAL), so a 0.0.0.0 service of the
    # namespace is not reached through the name.
    ns = c.need_netns()
    nspath = "/run/netns/" + ns.name
    pfx4, pfx6 = "45.67.%d.0/24" % ns.x, "2a00:4567:%x::/64" % ns.x
    local4, prime4 = "45.67.%d.5" % ns.x, "45.67.%d.9" % ns.x
    local6, far4 = "2a00:4567:%x::5" % ns.x, "45.68.%d.5" % ns.x

    def route(verb, family, pfx, check_rc=True):
        r = subprocess.run(["nsenter", "--net=" + nspath, "ip", family, "route", verb, "local",
                            pfx, "dev", "lo"], capture_output=True, text=True, timeout=10)
        if check_rc:
            check(r.returncode == 0, "ip route %s local %s: %s" % (verb, pfx, r.stderr.strip()))

    CLEANUP.push("rbf local routes", lambda: (route("del", "-4", pfx4, False),
                                               route("del", "-6", pfx6, False)))
    srv = subprocess.Popen(["nsenter", "--net=" + nspath, sys.executable, "-c", RB_LISTENER],
                           stdout=subprocess.PIPE, text=True)
    CLEANUP.push("rbf listener", lambda: (srv.kill(), srv.wait()))
    port = int(srv.stdout.readline())
    names = rebind_names(c, {"anyip": [local4], "anyprime": [prime4], "anyip6": [local6],
                             "anyfar": [far4]})
    pol = c.policy(["%s:%d" % (names[k], port) for k in names])
    try:
        with NsSandbox(c, pol, nspath) as sb:
            sid = sandbox_id(c, sb)
            # Before the route the address is global: released (and the
            # proxy's cache now says "not local" for it).
            rc, addrs, _, line = dns_query("udp", "127.0.0.2", 53, names["anyprime"], "A",
                                           cg=sb.cg, netns=nspath)
            check(rc == "NOERROR" and addrs == [prime4], "%s before the route: %r" %
                  (names["anyprime"], line))
            route("add", "-4", pfx4)
            route("add", "-6", pfx6)
            # anyprime first: its cached "not local" must have been flushed
            # by the route's notification, well within the cache's 1 s TTL.
            for key, qtype, addr in (("anyprime", "A", prime4), ("anyip", "A", local4),
                                     ("anyip6", "AAAA", local6)):
                for mode, server in (("udp", "127.0.0.2"), ("tcp", "127.0.0.53")):
                    rc, addrs, _, line = dns_query(mode, server, 53, names[key], qtype,
                                                   cg=sb.cg, netns=nspath)
                    check(rc == "NOERROR" and addrs == [],
                          "%s %s over %s: %s, local by a route in the sandbox's namespace, "
                          "was released: %r" % (names[key], qtype, mode, addr, line))
                rebind_expect_event(c, sid, names[key], addr, "host-local")
            # The service on 0.0.0.0 answers on the prefix (the route works)...
            r = subprocess.run(["nsenter", "--net=" + nspath, c.netprobe, "tcp", local4,
                                str(port)], capture_output=True, text=True, timeout=10)
            check(r.stdout.split()[:1] == ["ok"], "outside the sandbox, %s:%d: %r" %
                  (local4, port, r.stdout))
            # ...but not for the sandbox: nothing was learned.
            sb.denied("tcp", local4, port)
            # Twin: an address no route of the namespace delivers locally is
            # released and learned.
            rc, addrs, _, line = dns_query("udp", "127.0.0.2", 53, names["anyfar"], "A",
                                           cg=sb.cg, netns=nspath)
            check(rc == "NOERROR" and addrs == [far4], "%s (global): %r" %
                  (names["anyfar"], line))
            e = rebind_allow_event(c, sid, names["anyfar"])
            check(e.get("reason") == "learned" and
                  [a["addr"] for a in e.get("addresses") or []] == [far4],
                  "the learned addresses of %s: %r" % (names["anyfar"], e))
            # Twin: once the route is gone the prefix is global again.
            route("del", "-4", pfx4)
            rc, addrs, _, line = dns_query("udp", "127.0.0.2", 53, names["anyip"], "A",
                                           cg=sb.cg, netns=nspath)
            check(rc == "NOERROR" and addrs == [local4], "%s after the route left: %r" %
                  (names["anyip"], line))
    finally:
        route("del", "-4", pfx4, False)
        route("del", "-6", pfx6, False)


# --- F9: SVCB/HTTPS hints and A/AAAA of other classes -----------------------
# A tiny upstream on loopback that answers two names itself and relays every
# other query to the harness's dnsmasq (which stays egressd's second
# upstream), so the daemon works as usual while it runs.

def rb_dns_name(data, off):
    labels = []
    jumps = 0
    end = None
    while True:
        n = data[off]
        if n & 0xc0 == 0xc0:
            if end is None:
                end = off + 2
            off = ((n & 0x3f) << 8) | data[off + 1]
            jumps += 1
            if jumps > 32:
                raise ValueError("pointer loop")
            continue
        if n == 0:
            return ".".join(labels), (end if end is not None else off + 1)
        labels.append(data[off + 1:off + 1 + n].decode("ascii", "replace"))
        off += 1 + n


def rb_dns_records(data):
    """(type, class, rdata bytes, rdata offset) of every record of a message."""
    qd, an, ns, ar = struct.unpack(">HHHH", data[4:12])
    off = 12
    for _ in range(qd):
        _, off = rb_dns_name(data, off)
        off += 4
    out = []
    for _ in range(an + ns + ar):
        _, off = rb_dns_name(data, off)
        t, cl, _, rdlen = struct.unpack(">HHIH", data[off:off + 10])
        off += 10
        out.append((t, cl, data[off:off + rdlen], off))
        off += rdlen
    return out


def rb_svc_hints(rdata):
    """{key: [address text]} of the ipv4hint/ipv6hint SvcParams, and the keys."""
    _, off = rb_dns_name(rdata, 2)
    hints, keys = {}, []
    while off < len(rdata):
        key, vlen = struct.unpack(">HH", rdata[off:off + 4])
        val = rdata[off + 4:off + 4 + vlen]
        keys.append(key)
        if key in (4, 6):
            fam, alen = (socket.AF_INET, 4) if key == 4 else (socket.AF_INET6, 16)
            hints[key] = [socket.inet_ntop(fam, val[i:i + alen]) for i in range(0, vlen, alen)]
        off += 4 + vlen
    return hints, keys


def rb_svcparam(key, value):
    return struct.pack(">HH", key, len(value)) + value


class RbUpstream:
    """UDP upstream on 127.0.0.1 (bounded: one thread, 2 s per relay)."""

    def __init__(self, relay_port, answers):
        self.answers = answers  # lower-case qname -> function(query id, question bytes)
        self.relay_port = relay_port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", free_udp_tcp_port("127.0.0.1")))
        self.port = self.sock.getsockname()[1]
        self.sock.settimeout(0.2)
        self.stopping = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stopping:
            try:
                q, peer = self.sock.recvfrom(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                name, qend = rb_dns_name(q, 12)
                fn = self.answers.get(name.lower())
                if fn:
                    self.sock.sendto(fn(q[:2], q[12:qend + 4]), peer)
                    continue
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as r:
                    r.settimeout(2)
                    r.sendto(q, ("127.0.0.1", self.relay_port))
                    self.sock.sendto(r.recv(65535), peer)
            except (OSError, ValueError, IndexError, struct.error):
                continue

    def stop(self):
        self.stopping = True
        self.thread.join(2)
        self.sock.close()


def rb_answer(qid, question, records):
    """A NOERROR response: records are (type, class, rdata), owner = the qname."""
    msg = qid + struct.pack(">HHHHH", 0x8180, 1, len(records), 0, 0) + question
    for t, cl, rdata in records:
        msg += b"\xc0\x0c" + struct.pack(">HHIH", t, cl, 300, len(rdata)) + rdata
    return msg


RB_RAW_QUERY = r"""
import os, socket, struct, sys
name, qtype = sys.argv[1], int(sys.argv[2])
q = os.urandom(2) + struct.pack(">HHHHH", 0x0100, 1, 0, 0, 0)
for l in name.split("."):
    q += bytes([len(l)]) + l.encode()
q += b"\0" + struct.pack(">HH", qtype, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
s.sendto(q, ("127.0.0.2", 53))
try:
    print(s.recv(65535).hex())
except OSError as e:
    print("err", e)
"""


def rb_raw_query(cg, name, qtype):
    line = run_in_sandbox(cg, [sys.executable, "-c", RB_RAW_QUERY, name, str(qtype)])
    check(line and not line.startswith("err"), "raw query %s/%d: %r" % (name, qtype, line))
    return bytes.fromhex(line)


@test
def rebind_svcb_hints_and_other_classes(c):
    z = need_dnsmasq(c)
    svc, chaos = "rb-svc-%s.test" % RAND, "rb-chaos-%s.test" % RAND
    lo4, lo6 = socket.inet_pton(socket.AF_INET, "127.0.0.1"), socket.inet_pton(socket.AF_INET6, "::1")
    g4 = socket.inet_pton(socket.AF_INET, "93.184.216.34")
    g6 = socket.inet_pton(socket.AF_INET6, "2606:4700::1111")
    https = (b"\x00\x01\x00" + rb_svcparam(1, b"\x02h2") + rb_svcparam(4, lo4 + g4) +
             rb_svcparam(6, lo6))
    up = RbUpstream(z.port, {
        svc: lambda qid, qn: rb_answer(qid, qn, [(65, 1, https)]),
        chaos: lambda qid, qn: rb_answer(qid, qn, [(1, 3, lo4), (1, 255, lo4), (28, 3, lo6),
                                                    (1, 1, g4)])})
    CLEANUP.push("rb upstream", up.stop)
    saved = list(c.dns_args)
    c.daemon.stop()
    c.dns_args = ["--dns-upstream", "127.0.0.1:%d" % up.port] + saved
    try:
        c.daemon.start()
        # The upstream really sends the loopback hints and records.
        raw = dns_query("udp", "127.0.0.1", up.port, chaos, "A")
        check(raw[0] == "NOERROR", "the test upstream does not answer: %r" % (raw,))
        allow = ["%s:443" % svc, "%s:443" % chaos]
        with c.sandbox(allow) as sb:
            sid = sandbox_id(c, sb)
            msg = rb_raw_query(sb.cg, svc, 65)
            recs = [r for r in rb_dns_records(msg) if r[0] == 65]
            check(len(recs) == 1, "%s: expected the HTTPS record, got %r" % (svc, msg.hex()))
            hints, keys = rb_svc_hints(recs[0][2])
            check(hints.get(4) == ["93.184.216.34"] and 6 not in hints and 1 in keys,
                  "%s: HTTPS hints after the filter: %r (keys %r); expected ipv4hint="
                  "93.184.216.34 only, no ipv6hint, alpn kept" % (svc, hints, keys))
            e = rebind_expect_event(c, sid, svc, "127.0.0.1", "loopback")
            check(any(s.get("addr") == "::1" for s in e["stripped"]), "::1 hint: %r" % e)
            msg = rb_raw_query(sb.cg, chaos, 1)
            recs = [(t, cl, rd) for t, cl, rd, _ in rb_dns_records(msg)]
            check(recs == [(1, 1, g4)], "%s: expected only the IN A 93.184.216.34, got %r" %
                  (chaos, recs))
            check(wait_until(lambda: rebind_events(c, sid, chaos, "rebind"), 3, 0.1) and
                  rebind_events(c, sid, chaos, "rebind")[-1].get("stripped_total") == 3,
                  "no rebind event counting the 3 non-IN records: %r" %
                  rebind_events(c, sid, chaos, "rebind"))
        # Twin: a policy that expects loopback keeps the same hints.
        with c.sandbox(allow, extra_network={"dns_rebind_allow": ["127.0.0.0/8",
                                                                  "[::1/128]"]}) as sb:
            msg = rb_raw_query(sb.cg, svc, 65)
            recs = [r for r in rb_dns_records(msg) if r[0] == 65]
            hints, _ = rb_svc_hints(recs[0][2]) if recs else ({}, [])
            check(hints.get(4) == ["127.0.0.1", "93.184.216.34"] and hints.get(6) == ["::1"],
                  "%s with dns_rebind_allow: hints %r" % (svc, hints))
    finally:
        c.daemon.stop()
        c.dns_args = saved
        c.daemon.start()
        up.stop()
