# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Issue 12: audit mode (network.mode "audit"), egressctl suggest, and the
# circuit breaker (network.breaker, --breaker) with quarantine and release.
# Run by run.py (harness.runner) after the first round's tests.

import json
import os
import socket
import subprocess
import sys
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


AUD_REBIND = {}   # "known": does this build's parser know network.dns_rebind_allow?


def aud_rebind_extra(c):
    """network.dns_rebind_allow for policies whose names resolve to loopback
    (the test zone is 127.0.0.x): a parallel change strips such answers unless
    the policy lists them. Older parsers reject the field: asked once."""
    if "known" not in AUD_REBIND:
        pol = c.policy([], extra_network={"dns_rebind_allow": ["127.0.0.0/8"]})
        cg = c.mkcgroup("aud-probe")
        try:
            r = c.ctl("attach", "--cgroup", cg, "--policy", pol)
            AUD_REBIND["known"] = r.returncode == 0
            if r.returncode == 0:
                c.ctl("detach", "--cgroup", cg)
            elif "dns_rebind_allow" not in (r.stderr + r.stdout):
                raise TestFailure("probe attach failed for another reason: %s" %
                                  (r.stderr + r.stdout).strip())
        finally:
            cgroup_remove_tree(cg)
    return {"dns_rebind_allow": ["127.0.0.0/8"]} if AUD_REBIND["known"] else {}


def aud_exec_id(policy_path):
    with open(policy_path) as f:
        return json.load(f)["execution_id"]


def aud_record(c, exec_id, type_="execution", sid=None):
    """The last record of type_ of an execution (or, with sid, of a sandbox:
    an update can change the execution_id)."""
    recs = [r for r in obs_audit(c) if r.get("type") == type_ and
            (r.get("sandbox") == sid if sid is not None else r.get("execution_id") == exec_id)]
    check(recs, "no %s audit record of execution %s / sandbox %s" % (type_, exec_id, sid))
    return recs[-1]


def aud_verify(c):
    r = audit_verify(c, os.path.join(c.state, "audit.log"))
    check(r.returncode == 0 and r.stdout.startswith("ok:"),
          "audit log does not verify: %s %s" % (r.stdout, r.stderr))


def aud_sb_events(c, sid):
    return [e for e in obs_events(c) if e.get("sandbox") == sid]


def aud_metric(c, name, sid):
    samples, _ = parse_exposition(scrape(c)[2])
    for (n, labels), v in samples.items():
        if n == name and dict(labels).get("sandbox") == str(sid):
            return v
    return None


def aud_workload(c, sb, srvs, expect_ok=True):
    """The tool's work: TCP to two loopback servers, a UDP datagram to a
    third, a name resolved and reached, a name only resolved."""
    b, c2, d, api = srvs
    probe = sb.allowed if expect_ok else sb.denied
    probe("tcp", "127.0.0.1", b.port)
    probe("tcp", "127.0.0.2", c2.port)
    before = d.received
    probe("udp-sendto", "127.0.0.1", d.port)
    if expect_ok:
        check(d.wait_for(before + 1), "the audited datagram never reached its server")
    dns_ok(c, sb, "api.test", want=DNS_ZONE["api.test"])
    probe("tcp", DNS_ZONE["api.test"], api.port)
    dns_ok(c, sb, "keep.test", want=DNS_ZONE["keep.test"])


def aud_servers(c):
    return (c.tcp("aud-b"), c.tcp("aud-c", "127.0.0.2"), c.udp("aud-d"),
            srv(c, "aud-api", "api.test"))


@test
def audit_mode_reports_would_deny_then_suggest(c):
    need_dnsmasq(c)
    a = c.tcp("aud-a")
    unused = c.tcp("aud-unused")
    srvs = aud_servers(c)
    b, c2, d, api = srvs
    rebind = aud_rebind_extra(c)
    net = dict(rebind, mode="audit")
    with c.sandbox(["tcp/127.0.0.1:%d" % a.port], name="aud", extra_network=net) as sb:
        exec_id = aud_exec_id(sb.policy)
        sid = sandbox_id(c, sb)
        check(c.find_sandbox(sb.cg).get("mode") == "audit", "list does not say audit mode")
        # Sanity twin: the policy's own destination is a plain allow.
        sb.allowed("tcp", "127.0.0.1", a.port)
        # Everything enforce mode would deny goes through.
        aud_workload(c, sb, srvs)
        # A socket kind the policy does not name: created, and reported.
        sb.allowed("socket", "inet", "raw", "icmp")
        # A name refused by the upstream's absence of an answer still is an
        # answer: audit mode does not invent addresses.
        evs = []

        def have_events():
            evs[:] = aud_sb_events(c, sid)
            audited = [e for e in evs if e.get("verdict") == "audit"]
            return (any(e["type"] == "connect" and e.get("port") == b.port for e in audited) and
                    any(e["type"] == "connect" and e.get("port") == c2.port for e in audited) and
                    any(e["type"] == "sendmsg" and e.get("port") == d.port for e in audited) and
                    any(e["type"] == "dns" and e.get("qname") == "api.test" for e in audited) and
                    any(e["type"] == "sock_create" for e in audited))
        check(wait_until(have_events, 5), "not every would-be deny is an audit event: %r" %
              [(e.get("type"), e.get("verdict"), e.get("port"), e.get("qname")) for e in evs])
        check(not any(e.get("verdict") == "audit" and e.get("port") == a.port for e in evs),
              "the allowed destination was reported as a would-be deny")
        check(not any(e.get("verdict") == "deny" and e["type"] in ("connect", "sendmsg")
                      for e in evs), "audit mode denied something: %r" %
              [e for e in evs if e.get("verdict") == "deny"])
        st = sb_stats(c, sb)
        check(st.get("would_deny_connections", 0) >= 3 and st.get("would_deny_datagrams", 0) >= 1
              and st.get("would_deny_sockets", 0) >= 1 and st.get("connections_denied") == 0,
              "metering of would-be denies: %r" % st)
        m = aud_metric(c, "egressd_sandbox_would_deny_connections_total", sid)
        check(m is not None and m >= 3, "/metrics would_deny_connections_total: %r" % m)
        sb.detach()
    rec = aud_record(c, exec_id)
    wd = rec.get("would_deny") or {}
    check(rec.get("mode") == "audit" and wd.get("connect", 0) >= 3 and
          wd.get("datagram", 0) >= 1 and wd.get("socket", 0) >= 1 and wd.get("dns", 0) >= 2 and
          wd.get("total", 0) >= 7, "execution record's would_deny: %r" % wd)
    names = {n["name"]: n for n in rec["observed"]["dns"]}
    check(DNS_ZONE["api.test"] in names.get("api.test", {}).get("addrs", []) and
          names["api.test"]["verdict"] == "audit", "record's DNS observations: %r" % names)
    aud_verify(c)

    # suggest: a policy for exactly that; the same workload succeeds under
    # it, enforced, and a destination it did not use is denied.
    r = c.ctl("suggest", "--execution-id", exec_id)
    check(r.returncode == 0, "suggest: exit %d: %s" % (r.returncode, r.stderr))
    pol = json.loads(r.stdout)
    out = pol["network"]["outbound_allow"]
    for want in ("tcp/127.0.0.1:%d" % a.port, "tcp/127.0.0.1:%d" % b.port,
                 "tcp/127.0.0.2:%d" % c2.port, "udp/127.0.0.1:%d" % d.port,
                 "tcp/api.test:%d" % api.port):
        check(want in out, "suggested outbound_allow lacks %s: %r" % (want, out))
    check(pol["network"].get("dns_allow") == ["keep.test"], "suggested dns_allow: %r" %
          pol["network"].get("dns_allow"))
    check(pol.get("tenant") == "e2e" and pol.get("execution_id") == exec_id and
          pol.get("tool") == "netprobe" and "mode" not in pol["network"],
          "suggested identity/mode: %r" % pol)
    pol["execution_id"] = exec_id + "-enforced"
    pol["network"].update(rebind)   # the test zone is loopback (see aud_rebind_extra)
    with c.sandbox([], name="aud-sug", raw=pol) as sb2:
        aud_workload(c, sb2, srvs)
        sb2.allowed("tcp", "127.0.0.1", a.port)
        sb2.denied("tcp", "127.0.0.1", unused.port)
        sb2.denied("socket", "inet", "raw", "icmp")
        dns_refused(c, sb2, "denied.test")


@test
def audit_to_enforce_is_an_atomic_update(c):
    a, b = c.tcp("aud-a"), c.tcp("aud-b")
    with c.sandbox(["tcp/127.0.0.1:%d" % a.port], name="aud-upd",
                   extra_network={"mode": "audit"}) as sb:
        keep = socket.socket()
        try:
            keep.bind(("127.0.0.1", 0))
            keep.listen(8)
            holder = subprocess.Popen([sys.executable, "-c", HOLD_CONNECTION, "127.0.0.1",
                                       str(keep.getsockname()[1])], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      preexec_fn=join_cgroup_fn(sb.cg))
            try:
                check(holder.stdout.readline().strip() == "connected",
                      "audit mode did not let the holder connect")
                sb.allowed("tcp", "127.0.0.1", b.port)
                sb.update(c.policy(["tcp/127.0.0.1:%d" % a.port]))
                check(c.find_sandbox(sb.cg).get("mode") == "enforce", "mode after update")
                sb.denied("tcp", "127.0.0.1", b.port)
                sb.allowed("tcp", "127.0.0.1", a.port)
                out, _ = holder.communicate("go\n", timeout=PROBE_TIMEOUT_S)
                check(out.strip().startswith("dead"), "a connection only audit mode allowed "
                      "survived the update to enforce: %r" % out)
            finally:
                if holder.poll() is None:
                    holder.kill()
                    holder.wait(5)
        finally:
            keep.close()
        # And back: an update to audit lets it through again.
        sb.update(c.policy(["tcp/127.0.0.1:%d" % a.port], extra_network={"mode": "audit"}))
        sb.allowed("tcp", "127.0.0.1", b.port)


@test
def audit_mode_keeps_run_confinement(c):
    # Audit mode is about the allowlist: egressctl run's seccomp and
    # capability layers stay. Twin: the same socket() outside is allowed.
    c.allowed(None, "packet-socket")
    r = adv_run_probe(c, c.policy(["127.0.0.1:*"], extra_network={"mode": "audit"}),
                      "packet-socket")
    check(r.rc == 1 and r.errno == "EPERM", "egressctl run packet-socket in audit mode: %s" % r)
    b = c.tcp("aud-run-b")
    r = adv_run_probe(c, c.policy([], extra_network={"mode": "audit"}), "tcp", "127.0.0.1",
                      b.port)
    check(r.rc == 0 and r.line == "ok", "egressctl run tcp in audit mode: %s" % r)


@test
def suggest_from_enforced_run_and_missing_data(c):
    a, b = c.tcp("aud-a"), c.tcp("aud-b")
    with c.sandbox(["tcp/127.0.0.1:%d" % a.port], name="aud-enf") as sb:
        exec_id = aud_exec_id(sb.policy)
        sb.allowed("tcp", "127.0.0.1", a.port)
        sb.denied("tcp", "127.0.0.1", b.port)
        sb.denied("tcp", "127.0.0.1", b.port)
        # Still running: no execution record yet, and it says so.
        r = c.ctl("suggest", "--execution-id", exec_id)
        check(r.returncode == 1 and "has not ended" in r.stderr, "suggest on a running "
              "execution: %d %s" % (r.returncode, r.stderr))
        sid = sandbox_id(c, sb)
        check(wait_until(lambda: any(e.get("type") == "connect" and e.get("port") == b.port
                                     for e in aud_sb_events(c, sid)), 5), "no deny event")
        sb.detach()
    r = c.ctl("suggest", "--execution-id", exec_id)
    check(r.returncode == 0, "suggest: %d %s" % (r.returncode, r.stderr))
    pol = json.loads(r.stdout)
    check(pol["network"]["outbound_allow"] == ["tcp/127.0.0.1:%d" % a.port],
          "an enforced run's suggestion: %r" % pol)
    check("denied tcp/127.0.0.1:%d, 2 time(s) (not added)" % b.port in r.stderr,
          "the denied destination is not on stderr: %r" % r.stderr)
    # The suggestion is a policy egressd accepts as it is.
    with c.sandbox([], name="aud-enf2", raw=pol) as sb2:
        sb2.allowed("tcp", "127.0.0.1", a.port)
        sb2.denied("tcp", "127.0.0.1", b.port)
    r = c.ctl("suggest", "--execution-id", RUN_ID + "-never-ran")
    check(r.returncode == 1 and "aged out" in r.stderr, "suggest on unknown data: %d %s" %
          (r.returncode, r.stderr))
    # It reads the log itself: works with egressd's answer or without.
    r = c.ctl("suggest", "--execution-id", exec_id, "--audit-log",
              os.path.join(c.state, "audit.log"))
    check(r.returncode == 0 and json.loads(r.stdout) == pol, "suggest --audit-log: %s" % r.stderr)


def aud_hold(c, sb, port):
    p = subprocess.Popen([sys.executable, "-c", HOLD_CONNECTION, "127.0.0.1", str(port)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=join_cgroup_fn(sb.cg))
    CLEANUP.push("holder", lambda: p.poll() is None and (p.kill(), p.wait(5)))
    line = p.stdout.readline().strip()
    check(line == "connected", "holder to :%d: %r" % (port, line))
    return p


def aud_quarantined(c, sb):
    s = c.find_sandbox(sb.cg)
    return bool(s and s.get("quarantined"))


@test
def breaker_quarantines_until_released(c):
    a, b = c.tcp("aud-a"), c.tcp("aud-b")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)   # never accepts: the holder's connection just stays
    CLEANUP.push("listener", listener.close)
    brk = {"breaker": {"max_denies": 5, "window_s": 30}}
    allow = ["tcp/127.0.0.1:%d" % a.port, "tcp/127.0.0.1:%d" % listener.getsockname()[1]]
    with c.sandbox(allow, name="aud-brk", extra_network=brk) as sb, \
         c.sandbox(allow, name="aud-twin", extra_network=brk) as twin:
        sid = sandbox_id(c, sb)
        exec_id = aud_exec_id(sb.policy)
        holder = aud_hold(c, sb, listener.getsockname()[1])
        sb.allowed("tcp", "127.0.0.1", a.port)
        # Sanity twin: as many allowed connects never trip it.
        r = c.probe(twin.cg, "connect-loop", "127.0.0.1", a.port, 30)
        check(r.line.startswith("ok 30 0"), "twin connect-loop: %s" % r)
        # Hostile: hammer a denied destination.
        r = c.probe(sb.cg, "connect-loop", "127.0.0.1", b.port, 30)
        check(r.line.startswith("ok 0 30"), "connect-loop: %s" % r)
        t0 = time.monotonic()
        check(wait_until(lambda: aud_quarantined(c, sb), 5),
              "30 denies against max_denies 5 did not quarantine the sandbox")
        log("quarantined %.0f ms after the flood ended" % ((time.monotonic() - t0) * 1000))
        check(not aud_quarantined(c, twin), "the twin with only allowed traffic was quarantined")
        # Even what its policy allows is denied now, and the established
        # connection was destroyed.
        sb.denied("tcp", "127.0.0.1", a.port)
        dns = c.probe(sb.cg, "udp-sendto", "127.0.0.2", 53)
        check(dns.rc == 1, "a quarantined sandbox still sends DNS: %s" % dns)
        out, _ = holder.communicate("go\n", timeout=PROBE_TIMEOUT_S)
        check(out.strip().startswith("dead"), "an established connection survived the "
              "quarantine: %r" % out)
        twin.allowed("tcp", "127.0.0.1", a.port)
        # Shown everywhere.
        check("quarantined" in c.ctl_ok("list").stdout, "`list` does not show the quarantine")
        st = obs_status(c).get("breaker") or {}
        check(st.get("quarantined") == 1 and st.get("trips", 0) >= 1, "status breaker: %r" % st)
        check(aud_metric(c, "egressd_sandbox_quarantined", sid) == 1,
              "/metrics egressd_sandbox_quarantined")
        check(wait_until(lambda: any(al.get("severity") == "critical"
                                     for al in obs_alerts(c, "sandbox_quarantined", sid)), 5),
              "no critical sandbox_quarantined alert: %r" % obs_alerts(c, None, sid))
        q = aud_record(c, exec_id, "quarantine")
        check(q.get("actor") == "breaker" and q["evidence"]["denies"] > 5 and
              q["evidence"]["max_denies"] == 5, "quarantine record: %r" % q)
        # Hostile: a policy update (even a wider one) does not lift it.
        sb.update(c.policy(allow + ["tcp/127.0.0.1:%d" % b.port], extra_network=brk))
        check(aud_quarantined(c, sb), "a policy update lifted the quarantine")
        sb.denied("tcp", "127.0.0.1", b.port)
        # Hostile: root inside the quarantined sandbox releases itself
        # (the control socket refuses sandboxed peers).
        r = subprocess.run([c.egressctl, "--socket", c.sock, "release", "--id", str(sid)],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=CTL_TIMEOUT_S,
                           preexec_fn=join_cgroup_fn(sb.cg))
        check(r.returncode != 0 and aud_quarantined(c, sb),
              "the sandbox released itself: %d %s" % (r.returncode, r.stderr))
        # Release restores its allowed destinations; it does not trip again
        # on the old denies.
        r = c.ctl("release", "--id", str(sid))
        check(r.returncode == 0, "release: %d %s" % (r.returncode, r.stderr))
        sb.allowed("tcp", "127.0.0.1", a.port)
        sb.allowed("tcp", "127.0.0.1", b.port)
        time.sleep(0.5)
        check(not aud_quarantined(c, sb), "re-quarantined on the denies before the release")
        rel = aud_record(c, None, "release", sid)
        check(isinstance(rel.get("actor"), dict) and rel["actor"].get("uid") == 0,
              "release record actor: %r" % rel.get("actor"))
        r = c.ctl("release", "--id", str(sid))
        check(r.returncode == 1 and "not quarantined" in r.stderr,
              "release of a sandbox that is not quarantined: %d %s" % (r.returncode, r.stderr))
        sb.detach()
    rec = aud_record(c, None, "execution", sid)
    check(rec.get("quarantined") is False, "execution record quarantined: %r" %
          rec.get("quarantined"))
    aud_verify(c)


@test
def breaker_default_flag_and_restart_keep_quarantine(c):
    a, b = c.tcp("aud-a"), c.tcp("aud-b")
    since = c.log_size()
    c.daemon.stop()
    c.daemon.extra_args = ["--breaker", "3/60"]
    try:
        c.daemon.start()
        check((obs_status(c).get("breaker") or {}).get("default") ==
              {"max_denies": 3, "window_s": 60}, "status does not show --breaker")
        # A policy's own breaker wins over the default (twin).
        with c.sandbox(["tcp/127.0.0.1:%d" % a.port], name="aud-dflt") as sb, \
             c.sandbox(["tcp/127.0.0.1:%d" % a.port], name="aud-own",
                       extra_network={"breaker": {"max_denies": 1000, "window_s": 60}}) as own:
            sid = sandbox_id(c, sb)
            for s in (sb, own):
                r = c.probe(s.cg, "connect-loop", "127.0.0.1", b.port, 10)
                check(r.line.startswith("ok 0 10"), "connect-loop: %s" % r)
            check(wait_until(lambda: aud_quarantined(c, sb), 5), "--breaker 3/60 did not trip")
            time.sleep(0.5)
            check(not aud_quarantined(c, own), "the policy's own breaker did not win")
            sb.denied("tcp", "127.0.0.1", a.port)
            # egressd exits: the quarantine stays in the kernel (the hook
            # still denies), and a restarted egressd adopts it.
            c.daemon.stop()
            sb.denied("tcp", "127.0.0.1", a.port)
            own.allowed("tcp", "127.0.0.1", a.port)
            c.daemon.start()
            check(aud_quarantined(c, sb), "a restart lost the quarantine")
            sb.denied("tcp", "127.0.0.1", a.port)
            c.ctl_ok("release", "--cgroup", sb.cg)
            sb.allowed("tcp", "127.0.0.1", a.port)
            check(aud_metric(c, "egressd_sandbox_quarantined", sid) is None,
                  "/metrics still shows the released sandbox quarantined")
        aud_verify(c)
    finally:
        c.daemon.stop()
        c.daemon.extra_args = []
        c.daemon.start()
    # Under the ASan/UBSan build (--build build-asan), the egressd runs this
    # test started and stopped (breaker state, quarantine, release) must not
    # have reported a memory error or undefined behaviour. (LeakSanitizer
    # cannot run in a hardened egressd: its seccomp filter refuses ptrace.)
    tail = c.log_tail(since, 100000)
    bad = [l for l in tail.splitlines()
           if "ERROR: AddressSanitizer" in l or "runtime error:" in l]
    check(not bad, "egressd reported a sanitizer error: %s" % "\n".join(bad)[:4000])
