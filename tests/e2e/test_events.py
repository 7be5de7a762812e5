# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Events, alerts and audit (docs/events.md, alerts.md, audit.md)."""

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


@test
def events_deny_visible(c):
    a, b = c.tcp("a"), c.tcp("b")
    with c.sandbox(["127.0.0.1:%d" % a.port]) as sb:
        sid = sandbox_id(c, sb)
        sb.denied("tcp", "127.0.0.1", b.port)
        found = []

        def seen():
            found[:] = [e for e in obs_events(c, "--sandbox", str(sid))
                        if e.get("type") == "connect" and e.get("verdict") == "deny" and
                        e.get("port") == b.port]
            return bool(found)

        check(wait_until(seen, 3, 0.1), "no deny event for port %d in `events --json`" % b.port)
        e = found[-1]
        for k, want in (("sandbox", sid), ("tenant", "e2e"), ("dst", "127.0.0.1"),
                        ("family", "ipv4"), ("protocol", "tcp"), ("comm", "netprobe"),
                        ("v", 1)):
            check(e.get(k) == want, "deny event %s is %r, expected %r: %r" % (k, e.get(k), want, e))
        check(isinstance(e.get("pid"), int) and e["pid"] > 0, "deny event without pid: %r" % e)
        check(str(e.get("execution_id", "")).startswith(RUN_ID), "execution_id: %r" % e)
        check(isinstance(e.get("time"), str) and e["time"].endswith("Z"), "time: %r" % e)
        # The time is the kernel's boot clock converted: within a minute of now.
        t = time.mktime(time.strptime(e["time"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        check(abs(t - time.time()) < 60, "event time %s is not now" % e["time"])
        # Lifecycle events are in the same stream.
        kinds = [x.get("type") for x in obs_events(c, "--sandbox", str(sid))]
        check("attach" in kinds, "no attach event for sandbox %d: %r" % (sid, kinds))
        human = c.ctl_ok("events", "--sandbox", str(sid)).stdout
        check(("dst=127.0.0.1:%d" % b.port) in human, "human `events` lacks the deny: %r" % human)


@test
def events_follow_streams(c):
    a, b = c.tcp("a"), c.tcp("b")
    with c.sandbox(["127.0.0.1:%d" % a.port]) as sb:
        sid = sandbox_id(c, sb)
        subs0 = obs_status(c)["events"]["subscribers"]
        p = subprocess.Popen([c.egressctl, "--socket", c.sock, "events", "--follow", "--json",
                              "--sandbox", str(sid)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            check(wait_until(lambda: obs_status(c)["events"]["subscribers"] > subs0, 3),
                  "the --follow subscriber never registered")
            lines = []
            t = threading.Thread(target=lambda: lines.append(p.stdout.readline()), daemon=True)
            t0 = time.monotonic()
            t.start()
            sb.denied("tcp", "127.0.0.1", b.port)
            t.join(2.5)
            took = time.monotonic() - t0
            check(lines and lines[0].strip(), "no event streamed within 2 s of a deny")
            e = json.loads(lines[0])
            check(e.get("sandbox") == sid and e.get("verdict") == "deny" and
                  e.get("port") == b.port, "streamed event is not the deny: %r" % e)
            check(took < 2.5, "the deny took %.1f s to stream" % took)
        finally:
            p.kill()
            p.wait(5)
        check(wait_until(lambda: obs_status(c)["events"]["subscribers"] == subs0, 3),
              "a closed subscriber was not removed")


@test
def lost_events_counted_exactly(c):
    # One sandbox fills the ring only without its per-sandbox deny budget
    # (tenant_events_* in test_tenant.py test the budget).
    saved = list(c.daemon.extra_args)
    restart_daemon(c, saved + ["--events-deny-rate", "0"])
    try:
        lost_events_counted_exactly_body(c)
    finally:
        restart_daemon(c, saved)


@test
def deny_burst_alert_once(c):
    b = c.tcp("b")
    with c.sandbox(["127.0.0.1:1"]) as sb:
        sid = sandbox_id(c, sb)
        for _ in range(3):
            r = c.probe(sb.cg, "connect-loop", "127.0.0.1", b.port, 300)
            check(r.line == "ok 0 300", "connect-loop: %s" % r)
        check(wait_until(lambda: obs_alerts(c, "deny_burst", sid), 3),
              "no deny_burst alert for sandbox %d" % sid)
        time.sleep(0.5)
        al = obs_alerts(c, "deny_burst", sid)
        check(len(al) == 1, "%d deny_burst alerts for one hammering sandbox: %r" % (len(al), al))
        a = al[0]
        for k in ("id", "time", "type", "severity", "tenant", "sandbox", "execution_id",
                  "summary", "evidence", "suppressed"):
            check(k in a, "alert lacks %r: %r" % (k, a))
        check(a["tenant"] == "e2e" and a["execution_id"].startswith(RUN_ID), "alert: %r" % a)
        st = obs_status(c)["alerts"]
        check(st["suppressed"] > 0, "suppressed alerts are not counted: %r" % st)


@test
def audit_records_and_tamper(c):
    a = c.tcp("a")
    log_path = os.path.join(c.state, "audit.log")
    with c.sandbox(["127.0.0.1:%d" % a.port]) as sb:
        sid = sandbox_id(c, sb)
        sb.allowed("tcp", "127.0.0.1", a.port)
        upd_policy = c.policy(["127.0.0.1:%d" % a.port, "127.0.0.1:9"])
        with open(upd_policy) as f:
            exec_id = json.load(f)["execution_id"]
        sb.update(upd_policy)
        sb.allowed("tcp", "127.0.0.1", a.port)
        sb.denied("tcp", "127.0.0.1", c.tcp("b").port)
        sb.detach()
    recs = [r for r in obs_audit(c) if r.get("sandbox") == sid]
    kinds = [(r.get("type"), r.get("change")) for r in recs]
    check(kinds == [("policy_change", "attach"), ("policy_change", "update"),
                    ("execution", None)], "audit records of sandbox %d: %r" % (sid, kinds))
    att, upd, ex = recs
    check(upd["previous_policy_sha256"] == att["policy_sha256"] and
          upd["policy_sha256"] != att["policy_sha256"], "update record hashes: %r" % upd)
    check(isinstance(upd.get("actor"), dict) and upd["actor"].get("uid") == 0,
          "update record actor: %r" % upd.get("actor"))
    for k in ("execution_id", "tenant", "principal", "tool", "version", "egress", "verdicts",
              "status", "start", "end", "policy_sha256", "seq", "prev", "hash"):
        check(k in ex, "execution record lacks %r: %r" % (k, ex))
    check(ex["execution_id"] == exec_id, "execution_id %r, not %r" % (ex["execution_id"], exec_id))
    check(ex["policy_sha256"] == upd["policy_sha256"], "execution policy_sha256")
    dests = [d for d in ex["egress"] if d.get("dest") == "127.0.0.1:%d" % a.port]
    check(dests and dests[0]["bytes_out"] > 0 and dests[0]["proto"] == "tcp",
          "execution egress lacks 127.0.0.1:%d: %r" % (a.port, ex["egress"]))
    check(ex["verdicts"]["connect_allowed"] == 2 and ex["verdicts"]["connect_denied"] == 1,
          "verdicts: %r" % ex["verdicts"])
    r = audit_verify(c, log_path)
    check(r.returncode == 0 and r.stdout.startswith("ok:"), "clean log does not verify: %s %s" %
          (r.stdout, r.stderr))

    # Tamper with copies. Line numbers are 1-based; k is the attach record.
    with open(log_path) as f:
        lines = f.readlines()
    k = next(i for i, line in enumerate(lines)
             if json.loads(line).get("sandbox") == sid) + 1
    check(len(lines) >= k + 2, "too few records to tamper with")

    def verify_copy(name, new_lines, want_line, want_text=None):
        d = tempfile.mkdtemp(prefix="audit-", dir=c.work)
        shutil.copy(os.path.join(c.state, "audit.state"), os.path.join(d, "audit.state"))
        p = os.path.join(d, "audit.log")
        with open(p, "w") as f:
            f.writelines(new_lines)
        r = audit_verify(c, p)
        check(r.returncode != 0, "%s: verify passed a tampered log: %s" % (name, r.stdout))
        check(("%s:%d:" % (p, want_line)) in r.stdout,
              "%s: not located at line %d: %s" % (name, want_line, r.stdout.strip()))
        if want_text:
            check(want_text in r.stdout, "%s: message lacks %r: %s" % (name, want_text,
                                                                       r.stdout.strip()))

    edited = list(lines)
    edited[k - 1] = edited[k - 1].replace('"tenant":"e2e"', '"tenant":"e2f"')
    check(edited[k - 1] != lines[k - 1], "nothing to edit in the attach record")
    verify_copy("edit", edited, k, "hash mismatch")
    verify_copy("delete", lines[:k - 1] + lines[k:], k)
    swapped = list(lines)
    swapped[k - 1], swapped[k] = swapped[k], swapped[k - 1]
    verify_copy("swap", swapped, k)
    verify_copy("truncate", lines[:-1], len(lines), "truncated")
    torn = list(lines)
    torn[-1] = torn[-1][:len(torn[-1]) // 2]
    verify_copy("torn", torn, len(lines))
