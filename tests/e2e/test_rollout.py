# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Issue 27 item 4: a rollout path that works on private mirrors. Audit mode
# reports rebinding answers instead of stripping them, `suggest` keeps (or
# adds) the dns_rebind_allow ranges the run needed, and a dns_rebind alert
# is critical only for addresses that reach the host or instance metadata
# (docs/policy.md "Suggested policies", docs/alerts.md). Run by run.py
# (harness.runner).
#
# Connections are only made to loopback; 10.1.2.3 is checked in the answer,
# the events and the alert, never on the network.

import json

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


def ro_names(c, spec):
    """name -> address in the upstream zone; returns {key: name}."""
    z = need_dnsmasq(c)
    names = {}
    for key, addr in spec.items():
        names[key] = "ro-%s-%s.test" % (key, RAND)
        z.add_host(names[key], addr)
    return names


def ro_exec_id(sb):
    with open(sb.policy) as f:
        return json.load(f)["execution_id"]


def ro_answer(sb, name):
    rc, addrs, _, line = dns_query("udp", "127.0.0.2", 53, name, "A", cg=sb.cg)
    check(rc == "NOERROR", "%s: %r" % (name, line))
    return addrs


def ro_events(c, sid, qname):
    return [e for e in obs_events(c, "--sandbox", str(sid))
            if e.get("type") == "dns" and e.get("qname") == qname]


def ro_suggest(c, exec_id):
    r = c.ctl("suggest", "--execution-id", exec_id)
    check(r.returncode == 0, "suggest: exit %d: %s" % (r.returncode, r.stderr))
    return json.loads(r.stdout), r.stderr


@test
def rollout_audit_mode_keeps_rebinding_answers_and_suggest_allows_them(c):
    lo = c.tcp("ro-lo", "127.0.0.1")
    n = ro_names(c, {"mirror": "127.0.0.1", "priv": "10.1.2.3"})
    allow = ["tcp/%s:%d" % (n["mirror"], lo.port), "tcp/%s:%d" % (n["priv"], lo.port)]

    # Sanity twin first: enforce mode, no range: the mirror's answer is
    # stripped and the listener stays out of reach.
    with c.sandbox(allow, name="ro-enf") as sb:
        check(ro_answer(sb, n["mirror"]) == [], "enforce mode did not strip 127.0.0.1")
        sb.denied("tcp", "127.0.0.1", lo.port)

    with c.sandbox(allow, name="ro-aud", extra_network={"mode": "audit"}) as sb:
        exec_id = ro_exec_id(sb)
        sid = sandbox_id(c, sb)
        check(ro_answer(sb, n["mirror"]) == ["127.0.0.1"],
              "audit mode stripped the private mirror's answer")
        before = lo.accepted
        sb.allowed("tcp", "127.0.0.1", lo.port)
        check(lo.accepted > before, "the connection to the mirror never arrived")
        check(ro_answer(sb, n["priv"]) == ["10.1.2.3"], "audit mode stripped 10.1.2.3")
        # Reported: an audit event listing what enforce mode would strip.
        for key, addr, cls in (("mirror", "127.0.0.1", "loopback"),
                               ("priv", "10.1.2.3", "private")):
            def reported():
                return [e for e in ro_events(c, sid, n[key])
                        if e.get("verdict") == "audit" and
                        any(w.get("addr") == addr and w.get("class") == cls
                            for w in e.get("would_strip") or [])]
            check(wait_until(reported, 3, 0.1), "no audit event with would_strip %s for %s: %r" %
                  (addr, n[key], ro_events(c, sid, n[key])))
            check(not any(e.get("verdict") == "rebind" for e in ro_events(c, sid, n[key])),
                  "audit mode raised a rebind (stripped) event for %s" % n[key])
        # Severity: loopback reaches the host (critical), a private range is
        # a mirror's (warning); one does not hold back the other.
        def sev():
            return sorted(a.get("severity") for a in obs_alerts(c, "dns_rebind", sid))
        check(wait_until(lambda: sev() == ["critical", "warning"], 3, 0.1),
              "dns_rebind alerts' severities: %r" % obs_alerts(c, "dns_rebind", sid))
        sb.detach()

    pol, notes = ro_suggest(c, exec_id)
    ranges = pol["network"].get("dns_rebind_allow")
    check(ranges == ["10.1.2.3/32", "127.0.0.1/32"], "suggested dns_rebind_allow: %r" % ranges)
    check("dns_rebind_allow \"127.0.0.1/32\" added" in notes, "suggest's notes: %r" % notes)
    # The suggestion does not fail the run it was made from, enforced.
    pol["execution_id"] = exec_id + "-enforced"
    with c.sandbox([], name="ro-sug", raw=pol) as sb:
        check(ro_answer(sb, n["mirror"]) == ["127.0.0.1"], "the suggested policy strips the mirror")
        sb.allowed("tcp", "127.0.0.1", lo.port)


@test
def rollout_suggest_keeps_the_ranges_the_run_used(c):
    lo = c.tcp("ro-lo", "127.0.0.1")
    n = ro_names(c, {"mirror": "127.0.0.1", "evil": "169.254.169.254"})
    allow = ["tcp/%s:%d" % (n["mirror"], lo.port), "tcp/%s:80" % n["evil"]]
    extra = {"dns_rebind_allow": ["127.0.0.0/8", "192.168.0.0/16"]}
    with c.sandbox(allow, name="ro-keep", extra_network=extra) as sb:
        exec_id = ro_exec_id(sb)
        sid = sandbox_id(c, sb)
        check(ro_answer(sb, n["mirror"]) == ["127.0.0.1"], "the covered answer was stripped")
        sb.allowed("tcp", "127.0.0.1", lo.port)
        # Enforce mode strips the metadata address: a critical alert.
        check(ro_answer(sb, n["evil"]) == [], "169.254.169.254 was not stripped")
        check(wait_until(lambda: [a for a in obs_alerts(c, "dns_rebind", sid)
                                  if a.get("severity") == "critical"], 3, 0.1),
              "no critical dns_rebind alert for the metadata address: %r" %
              obs_alerts(c, "dns_rebind", sid))
        sb.detach()
    pol, notes = ro_suggest(c, exec_id)
    check(pol["network"].get("dns_rebind_allow") == ["127.0.0.0/8"],
          "kept ranges: %r (192.168.0.0/16 was never used)" % pol["network"])
    check("pointed to 169.254.169.254 (link-local), stripped" in notes and
          "not added" in notes, "the stripped metadata answer is not in the notes: %r" % notes)
    pol["execution_id"] = exec_id + "-again"
    with c.sandbox([], name="ro-keep2", raw=pol) as sb:
        check(ro_answer(sb, n["mirror"]) == ["127.0.0.1"], "the kept range does not cover it")
        sb.allowed("tcp", "127.0.0.1", lo.port)
        check(ro_answer(sb, n["evil"]) == [], "the suggestion let the metadata address in")
