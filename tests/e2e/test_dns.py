# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""DNS filtering (docs/dns.md)."""

import os
import random
import socket
import subprocess
import sys
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


@test
def dns_resolve_then_connect(c):
    need_dnsmasq(c)
    a = srv(c, "dns-api", "api.test")
    a6 = srv(c, "dns-api6", "api6.test")
    other = c.tcp("dns-api-other", DNS_ZONE["api.test"])
    with c.sandbox(["api.test:%d" % a.port, "tcp/api6.test:%d" % a6.port],
                   extra_network=DNS_REBIND_LO) as sb:
        s = c.find_sandbox(sb.cg)
        dns = (s or {}).get("dns") or {}
        check(dns.get("port4") and dns.get("port6"), "`list --json` shows no DNS listener "
              "ports: %r" % s)
        # Sanity twin first: before resolving, the name entry opens nothing.
        sb.denied("tcp", DNS_ZONE["api.test"], a.port)
        sb.denied("tcp6", "::1", a6.port)
        dns_ok(c, sb, "api.test", want=DNS_ZONE["api.test"])
        before = a.accepted
        sb.allowed("tcp", DNS_ZONE["api.test"], a.port)
        check(a.accepted > before, "the connection to the learned address never arrived")
        sb.denied("tcp", DNS_ZONE["api.test"], other.port)     # only the entry's port
        sb.allowed("udp-sendto", DNS_ZONE["api.test"], a.port)  # no prefix: both protocols
        # IPv6: AAAA through an IPv6 resolver (::1), to the IPv6 listener.
        dns_ok(c, sb, "api6.test", "AAAA", server="::1", want="::1")
        sb.allowed("tcp6", "::1", a6.port)
        sb.denied("udp-sendto", "::1", a6.port)                 # tcp/ only
        # A connected UDP socket and TCP resolve the same way.
        dns_ok(c, sb, "api.test", mode="udp-connect", want=DNS_ZONE["api.test"])
        dns_ok(c, sb, "api.test", mode="tcp", want=DNS_ZONE["api.test"])


@test
def dns_refused_not_forwarded(c):
    z = need_dnsmasq(c)
    a = srv(c, "dns-api", "api.test")
    tag = RAND
    names = ["denied-gai-%s.test" % tag, "denied-udp-%s.test" % tag,
             "denied-tcp-%s.test" % tag, "denied-v6-%s.test" % tag]
    # The upstream would answer: the refusal is egressd's.
    rc, addrs, _, line = dns_query("udp", "127.0.0.1", z.port, "denied.test", "A")
    check(rc == "NOERROR" and DNS_ZONE["denied.test"] in addrs,
          "dnsmasq does not serve denied.test itself: %r" % line)
    resolv = os.path.join(c.work, "resolv-53.conf")
    with open(resolv, "w") as f:
        f.write("nameserver 127.0.0.53\noptions timeout:2 attempts:1\n")
    marker = "mark-%s.example.test" % tag
    with c.sandbox(["api.test:%d" % a.port],
                   extra_network=dict(DNS_REBIND_LO, dns_allow=["*.example.test"])) as sb:
        # (a) the resolver of resolv.conf, through the C library.
        r, addrs, _, line = dns_query("gai", None, None, "api.test", None, cg=sb.cg,
                                      resolv=resolv)
        check(r == "ok" and addrs == [DNS_ZONE["api.test"]],
              "getaddrinfo(api.test) through resolv.conf's 127.0.0.53: %r" % line)
        sb.allowed("tcp", DNS_ZONE["api.test"], a.port)
        r, _, _, line = dns_query("gai", None, None, names[0], None, cg=sb.cg, resolv=resolv)
        check(r == "gaierror", "getaddrinfo(%s) through resolv.conf: %r" % (names[0], line))
        r, _, _, line = dns_query("gai", None, None, "denied.test", None, cg=sb.cg,
                                  resolv=resolv)
        check(r == "gaierror", "getaddrinfo(denied.test): %r" % line)
        # (b) a literal resolver address, UDP; (c) DNS over TCP; and over IPv6.
        dns_refused(c, sb, names[1])
        dns_refused(c, sb, "denied.test", server="127.0.0.53")
        dns_refused(c, sb, names[2], mode="tcp")
        dns_refused(c, sb, names[3], "AAAA", server="::1")
        sb.denied("tcp", DNS_ZONE["denied.test"], a.port)
        # Only port 53 is redirected: DoT and DNS to other ports stay denied.
        sb.denied("tcp", "127.0.0.2", 853)
        sb.denied("udp-sendto", "127.0.0.53", 5353)
        sb.denied("udp-sendto", "127.0.0.1", z.port)   # the upstream itself
        dns_ok(c, sb, marker, mode="tcp", want=DNS_WILDCARD_ADDR)
    dns_not_upstream(c, marker, names)


@test
def dns_wildcard_case_cname_txt(c):
    z = need_dnsmasq(c)
    t = srv(c, "dns-target", "target.test")
    a = srv(c, "dns-api", "api.test")
    with c.sandbox(["alias.test:%d" % t.port, "api.test:%d" % a.port],
                   extra_network=dict(DNS_REBIND_LO, dns_allow=["*.example.test"])) as sb:
        # Wildcards: any depth below, not the apex itself.
        dns_ok(c, sb, "a.example.test", want=DNS_WILDCARD_ADDR)
        dns_ok(c, sb, "a.b.example.test", want=DNS_WILDCARD_ADDR)
        dns_ok(c, sb, "A.B.Example.TEST", want=DNS_WILDCARD_ADDR)
        dns_refused(c, sb, "example.test")
        dns_refused(c, sb, "aexample.test")
        dns_refused(c, sb, "example.test.evil.test")
        # A dns_allow match opens nothing.
        sb.denied("tcp", DNS_WILDCARD_ADDR, a.port)
        # Case: the policy's api.test matches ApI.TeSt, and what it learns works.
        sb.denied("tcp", DNS_ZONE["api.test"], a.port)
        dns_ok(c, sb, "ApI.TeSt", want=DNS_ZONE["api.test"])
        sb.allowed("tcp", DNS_ZONE["api.test"], a.port)
        # CNAME: alias.test -> target.test; the target's address is learned
        # with alias.test's ports, though target.test itself is not allowed.
        sb.denied("tcp", DNS_ZONE["target.test"], t.port)
        dns_ok(c, sb, "alias.test", want=DNS_ZONE["target.test"])
        sb.allowed("tcp", DNS_ZONE["target.test"], t.port)
        sb.denied("tcp", DNS_ZONE["target.test"], a.port)
        dns_refused(c, sb, "target.test")
        # TXT is refused by default, even for an allowed name that has one.
        rc, addrs, _, line = dns_query("udp", "127.0.0.1", z.port, "api.test", "TXT")
        check(rc == "NOERROR" and addrs == ["txt"], "dnsmasq has no TXT for api.test: %r" % line)
        dns_refused(c, sb, "api.test", "TXT")
        dns_refused(c, sb, "api.test", "TXT", mode="tcp")
        dns_refused(c, sb, "api.test", "ANY")
    # A policy that lists TXT in dns_types gets it (and keeps A), still only
    # for its names; ANY stays refused.
    with c.sandbox(["api.test:%d" % a.port],
                   extra_network=dict(DNS_REBIND_LO, dns_types=["A", "TXT"])) as sb:
        rc, addrs, _, line = dns_query("udp", "127.0.0.2", 53, "api.test", "TXT", cg=sb.cg)
        check(rc == "NOERROR" and addrs == ["txt"], "TXT with dns_types: %r" % line)
        dns_ok(c, sb, "api.test", want=DNS_ZONE["api.test"])
        dns_refused(c, sb, "api.test", "AAAA")
        dns_refused(c, sb, "denied.test", "TXT")


@test
def dns_learned_is_per_sandbox(c):
    need_dnsmasq(c)
    a = srv(c, "dns-api", "api.test")
    ip = DNS_ZONE["api.test"]
    pol = ["api.test:%d" % a.port]
    lo = DNS_REBIND_LO
    with c.sandbox(pol, name="first", tenant="t1", extra_network=lo) as s1, \
         c.sandbox(pol, name="same-tenant", tenant="t1", extra_network=lo) as s2, \
         c.sandbox(pol, name="other-tenant", tenant="t2", extra_network=lo) as s3:
        p1 = (c.find_sandbox(s1.cg) or {}).get("dns", {})
        p2 = (c.find_sandbox(s2.cg) or {}).get("dns", {})
        # One listener for the sandboxes of egressd's namespace (docs/dns.md):
        # the kernel's record of the asking socket names the sandbox.
        check(p1.get("port4") and p1.get("port4") == p2.get("port4"),
              "two sandboxes of one namespace do not share the DNS listener: %r %r" %
              (p1, p2))
        dns_ok(c, s1, "api.test", want=ip)
        s1.allowed("tcp", ip, a.port)
        # Same policy, same name, but they never resolved it.
        s2.denied("tcp", ip, a.port)
        s3.denied("tcp", ip, a.port)
        s2.denied("udp-sendto", ip, a.port)
        # The listener's port itself is not port 53, so the allowlist
        # judges a send straight to it.
        rc, addrs, _, line = dns_query("udp", "127.0.0.1", p1.get("port4", 1), "api.test", "A",
                                       timeout=1.0, cg=s2.cg)
        check(line.startswith("err EPERM"), "a query to another sandbox's listener: %r" % line)
        s2.denied("tcp", ip, a.port)
        # Sanity twin: each one opens it for itself by resolving.
        dns_ok(c, s3, "api.test", want=ip)
        s3.allowed("tcp", ip, a.port)
        s2.denied("tcp", ip, a.port)
        dns_ok(c, s2, "api.test", want=ip)
        s2.allowed("tcp", ip, a.port)


@test
def dns_ttl_expiry(c):
    need_dnsmasq(c)
    s = srv(c, "dns-short", "short.test")
    ip = DNS_ZONE["short.test"]
    with c.sandbox(["short.test:%d" % s.port], extra_network=DNS_REBIND_LO) as sb:
        sb.denied("tcp", ip, s.port)
        t0 = time.monotonic()
        dns_ok(c, sb, "short.test", want=ip)
        sb.allowed("tcp", ip, s.port)
        # expiry = max(TTL 2, --dns-min-ttl 1) after the answer
        time.sleep(max(0.0, DNS_SHORT_TTL + 0.5 - (time.monotonic() - t0)))
        sb.denied("tcp", ip, s.port)
        sb.denied("udp-sendto", ip, s.port)
        # Sanity twin: resolving again opens it again.
        dns_ok(c, sb, "short.test", want=ip)
        sb.allowed("tcp", ip, s.port)


@test
def dns_in_netns(c):
    z = need_dnsmasq(c)
    ns = c.need_netns()
    nspath = "/run/netns/" + ns.name
    check(os.path.exists(nspath), "no %s" % nspath)
    # The test server listens on the host end of the veth; the sandbox reaches
    # it from inside the namespace.
    hs = c.tcp("dns-nshost", ns.host4)
    name = "nshost-%s.test" % RAND
    z.add_host(name, ns.host4)
    # ns.host4 is private (10.254.X.1): the policy expects its name there.
    pol = c.policy(["%s:%d" % (name, hs.port)],
                   extra_network={"dns_rebind_allow": [ns.host4]})
    with NsSandbox(c, pol, nspath) as sb:
        s = c.find_sandbox(sb.cg) or {}
        check(s.get("netns") == nspath, "`list --json` netns: %r" % s.get("netns"))
        check((s.get("dns") or {}).get("port4"), "no DNS listener port: %r" % s)
        sb.denied("tcp", ns.host4, hs.port)
        # 127.0.0.2 is the netns's own loopback: the query is redirected to
        # the listener egressd opened inside the namespace.
        dns_ok(c, sb, name, want=ns.host4, netns=nspath)
        before = hs.accepted
        sb.allowed("tcp", ns.host4, hs.port)
        check(hs.accepted > before, "the connection over the veth never arrived")
        dns_ok(c, sb, name, mode="tcp", want=ns.host4, netns=nspath)
        dns_refused(c, sb, "denied.test", netns=nspath)
        dns_refused(c, sb, "denied-ns-%s.test" % RAND, mode="tcp", netns=nspath)
        if (s.get("dns") or {}).get("port6"):
            dns_refused(c, sb, "denied.test", "AAAA", server="::1", netns=nspath)
        sb.denied("tcp", ns.host4, c.tcp("dns-nshost2", ns.host4).port)
        # The same address and port from a sandbox in the host namespace that
        # did not resolve it.
        with c.sandbox(["%s:%d" % (name, hs.port)]) as host_sb:
            host_sb.denied("tcp", ns.host4, hs.port)
    dns_not_upstream(c, name, ["denied-ns-%s.test" % RAND])


@test
def dns_daemon_down_and_restart(c):
    need_dnsmasq(c)
    a = srv(c, "dns-api", "api.test")
    s = srv(c, "dns-short", "short.test")
    ip, sip = DNS_ZONE["api.test"], DNS_ZONE["short.test"]
    sb = Sandbox(c, c.policy(["api.test:%d" % a.port, "short.test:%d" % s.port],
                             extra_network=DNS_REBIND_LO), "dnsdown")
    try:
        sb.attach()
        before = (c.find_sandbox(sb.cg) or {}).get("dns", {})
        dns_ok(c, sb, "api.test", want=ip)
        t0 = time.monotonic()
        dns_ok(c, sb, "short.test", want=sip)
        c.daemon.kill9()
        # Learned addresses stay while egressd is down...
        sb.allowed("tcp", ip, a.port)
        sb.allowed("tcp", sip, s.port)
        # ...but DNS fails closed: no answer from anywhere.
        for mode, server in (("udp", "127.0.0.2"), ("udp-connect", "127.0.0.2"),
                             ("tcp", "127.0.0.2"), ("udp", "::1")):
            rc, addrs, _, line = dns_query(mode, server, 53, "api.test", "A", timeout=1.0,
                                           cg=sb.cg)
            check(rc in ("timeout", "err", "eof", "REFUSED", "SERVFAIL") and not addrs,
                  "egressd down, %s to %s: %r" % (mode, server, line))
        # ...until they expire, which the kernel checks by itself.
        time.sleep(max(0.0, DNS_SHORT_TTL + 0.5 - (time.monotonic() - t0)))
        sb.denied("tcp", sip, s.port)
        sb.allowed("tcp", ip, a.port)
        c.daemon.start()
        after = (c.find_sandbox(sb.cg) or {}).get("dns", {})
        check(after.get("port4") == before.get("port4") and
              after.get("port6") == before.get("port6"),
              "the restarted proxy did not reopen the same ports: %r -> %r" % (before, after))
        dns_ok(c, sb, "short.test", want=sip)
        sb.allowed("tcp", sip, s.port)
        dns_ok(c, sb, "api.test", mode="tcp", want=ip)
        dns_refused(c, sb, "denied.test")
    finally:
        c.ensure_daemon()
        sb.remove()


@test
def dns_policy_update(c):
    need_dnsmasq(c)
    a = srv(c, "dns-api", "api.test")
    k = srv(c, "dns-keep", "keep.test")
    ip, kip = DNS_ZONE["api.test"], DNS_ZONE["keep.test"]
    hold_a, hold_k = socket.socket(), socket.socket()
    try:
        for l, addr in ((hold_a, ip), (hold_k, kip)):
            l.bind((addr, 0))
            l.listen(8)  # never accepted: the handshake completes in the backlog
        hap, hkp = hold_a.getsockname()[1], hold_k.getsockname()[1]
        keep = {"host": "keep.test", "ports": [k.port, hkp], "protocol": "tcp"}
        with c.sandbox([{"host": "api.test", "ports": [a.port, hap]}, keep],
                       extra_network=DNS_REBIND_LO) as sb:
            dns_ok(c, sb, "api.test", want=ip)
            dns_ok(c, sb, "keep.test", want=kip)
            sb.allowed("tcp", ip, a.port)
            sb.allowed("tcp", kip, k.port)
            join = join_cgroup_fn(sb.cg)

            holders = []
            try:
                for addr, port in ((ip, hap), (kip, hkp)):
                    p = subprocess.Popen([sys.executable, "-c", HOLD_CONNECTION, addr, str(port)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, preexec_fn=join)
                    holders.append(p)
                    line = p.stdout.readline().strip()
                    check(line == "connected", "holder to %s:%d: %r" % (addr, port, line))
                # Keeps keep.test (same ports), drops api.test.
                sb.update(c.policy([keep], extra_network=DNS_REBIND_LO))
                outs = []
                for p in holders:
                    out, err = p.communicate("go\n", timeout=PROBE_TIMEOUT_S)
                    outs.append(out.strip())
                check(outs[0].startswith("dead"), "an established connection to a learned "
                      "address the new policy no longer resolves survived: %r" % outs[0])
                check(outs[1] == "alive", "a connection to a learned address the new policy "
                      "keeps was cut: %r" % outs[1])
            finally:
                for p in holders:
                    if p.poll() is None:
                        p.kill()
                        p.wait(5)
            sb.denied("tcp", ip, a.port)
            sb.denied("udp-sendto", ip, a.port)
            dns_refused(c, sb, "api.test")
            # keep.test stays learned without a new query, with its ports.
            sb.allowed("tcp", kip, k.port)
            sb.denied("udp-sendto", kip, k.port)
            # An update that adds api.test back: it must be resolved again.
            sb.update(c.policy([{"host": "api.test", "ports": [a.port]}, keep],
                               extra_network=DNS_REBIND_LO))
            sb.denied("tcp", ip, a.port)
            sb.allowed("tcp", kip, k.port)
            dns_ok(c, sb, "api.test", want=ip)
            sb.allowed("tcp", ip, a.port)
    finally:
        hold_a.close()
        hold_k.close()


@test
def dns_exfil_label_refused(c):
    need_dnsmasq(c)
    rng = random.SystemRandom()
    alphabet = "abcdefghijklmnopqrstuvwxyz234567"
    blob = "".join(rng.choice(alphabet) for _ in range(60))
    # 40 characters, letters and digits densely mixed (base36-like)
    shorter = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") + rng.choice("0123456789")
                      for _ in range(20))
    with c.sandbox([], extra_network=dict(DNS_REBIND_LO, dns_allow=["*.example.test"])) as sb:
        marker = "mark-%s.example.test" % RAND
        dns_ok(c, sb, marker, want=DNS_WILDCARD_ADDR)
        for name in (blob + ".example.test", "x." + blob + ".example.test",
                     shorter + ".example.test"):
            dns_refused(c, sb, name)
        dns_refused(c, sb, blob + ".example.test", mode="tcp")
        # Ordinary names under the same wildcard still resolve.
        dns_ok(c, sb, "cdn-eu-west-1.example.test", want=DNS_WILDCARD_ADDR)
    dns_not_upstream(c, marker, [blob, shorter])
