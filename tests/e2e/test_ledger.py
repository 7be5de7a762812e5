# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# The ledger files egressd trusts after a restart (issue 23, findings 4
# and 5): the audit chain's tail (audit.state, anchors, append-only files)
# and billing.state. Each attack is done as the red team did it, while
# egressd is down, and has a twin doing the clean thing the same way.

import json
import os
import subprocess
import time

from harness import *  # noqa: F401,F403 (Ctx, check, ...: harness/__init__.py)


def ledger_restart(c, extra, kill=False):
    """Stop (SIGKILL with kill) and start egressd with extra args."""
    if kill:
        c.daemon.kill9()
    else:
        c.daemon.stop()
    c.daemon.extra_args = list(extra)
    c.daemon.start()


def ledger_lines(path):
    with open(path) as f:
        return [l for l in f.read().splitlines() if l.strip()]


def no_caps(argv):
    """argv as uid 0 without any capability (an attach-mode tool's root)."""
    return subprocess.run(["setpriv", "--bounding-set=-all", "--inh-caps=-all",
                           "--ambient-caps=-all", "--"] + argv,
                          capture_output=True, text=True, timeout=30)


@test
def ledger_audit_tail_cut_is_caught(c):
    # Finding 4: kill -9 egressd, cut the log's tail, write audit.state with
    # the seq/hash of the last record kept, restart. Before: egressd went on
    # at that seq and `audit verify` said ok.
    anchors = os.path.join(c.work, "audit-anchors.log")
    log_path, state = os.path.join(c.state, "audit.log"), os.path.join(c.state, "audit.state")
    args = ["--audit-anchor", anchors, "--audit-anchor-every", "1"]
    t = c.tcp("ledger-a")
    try:
        ledger_restart(c, args)
        with c.sandbox(["127.0.0.1:%d" % t.port], name="ledger-audit") as sb:
            sb.update(c.policy(["127.0.0.1:%d" % t.port, "127.0.0.1:9"]))  # the record to hide
            # Twin: the untouched log verifies against its anchors.
            r = audit_verify(c, log_path, "--anchors", anchors)
            check(r.returncode == 0 and "anchors:" in r.stdout,
                  "untouched log against its anchors: %d %r" % (r.returncode, r.stdout))
            lines = ledger_lines(log_path)
            keep = [json.loads(l) for l in lines[:-1]]
            check(lines and json.loads(lines[-1]).get("type") == "policy_change",
                  "the last record is not the update: %r" % lines[-1:])
            c.daemon.kill9()
            # Without CAP_LINUX_IMMUTABLE the files cannot be rewritten at all.
            for argv in (["sh", "-c", "head -n %d %s > %s.t && mv %s.t %s" %
                          (len(keep), log_path, log_path, log_path, log_path)],
                         ["truncate", "-s", "0", log_path],
                         ["sh", "-c", "echo '{}' > %s" % state]):
                r = no_caps(argv)
                check(r.returncode != 0, "%r as capability-less root: it worked" % argv)
            check(ledger_lines(log_path) == lines, "the log changed")
            # With it (or on a file system without the flag): the red team's cut.
            subprocess.run(["chattr", "-a", log_path, state], check=True)
            with open(log_path, "w") as f:
                f.write("".join(l + "\n" for l in lines[:-1]))
            with open(state, "w") as f:
                json.dump({"seq": keep[-1]["seq"], "hash": keep[-1]["hash"]}, f)
            before = len(obs_alerts(c, "audit_state_tampered"))
            c.daemon.start()
            check(wait_until(lambda: len(obs_alerts(c, "audit_state_tampered")) > before, 5,
                             0.1), "no audit_state_tampered alert after the state was rewritten")
            gaps = [r for r in obs_audit(c) if r.get("type") == "audit_gap" and
                    "MAC" in (r.get("reason") or "")]
            check(gaps, "no audit_gap record about the state's MAC")
            # The chain itself is whole again (a gap record says what was
            # found), so only the anchors show what was cut.
            r = audit_verify(c, log_path, "--anchors", anchors)
            check(r.returncode != 0 and "anchor" in r.stdout,
                  "a cut log verified against its anchors: %d %r" % (r.returncode, r.stdout))
            log("verify --anchors after the cut: %s" % r.stdout.strip())
            # The files are append-only again after the restart.
            r = no_caps(["truncate", "-s", "0", log_path])
            check(r.returncode != 0, "the log is rewritable after the restart")
    finally:
        ledger_restart(c, [])


@test
def ledger_audit_clean_restart_verifies(c):
    # Twin of the cut: kill -9 and a clean stop, nothing edited: no alert,
    # the chain and its anchors verify, every start and stop anchored (a
    # SIGKILL leaves no stop anchor: the batches before it are anchored).
    anchors = os.path.join(c.work, "audit-anchors-clean.log")
    log_path = os.path.join(c.state, "audit.log")
    args = ["--audit-anchor", anchors]
    t = c.tcp("ledger-b")
    before = len(obs_alerts(c, "audit_state_tampered"))
    try:
        ledger_restart(c, args)
        with c.sandbox(["127.0.0.1:%d" % t.port], name="ledger-clean") as sb:
            sb.update(c.policy(["127.0.0.1:%d" % t.port, "127.0.0.1:9"]))
            ledger_restart(c, args, kill=True)
            sb.update(c.policy(["127.0.0.1:%d" % t.port]))
        ledger_restart(c, args)
        r = audit_verify(c, log_path, "--anchors", anchors)
        check(r.returncode == 0, "clean restarts: %d %r" % (r.returncode, r.stdout))
        events = [l.split("event=")[1].split()[0] for l in ledger_lines(anchors)]
        check(events.count("start") == 3 and events.count("stop") == 1 and "every" in events,
              "anchors written: %r" % events)
        check(len(obs_alerts(c, "audit_state_tampered")) == before,
              "a clean restart raised audit_state_tampered")
        # An anchor file without anchors proves nothing: verify says so.
        empty = os.path.join(c.work, "no-anchors.log")
        open(empty, "w").close()
        r = audit_verify(c, log_path, "--anchors", empty)
        check(r.returncode != 0, "verify with an empty anchor file said ok: %r" % r.stdout)
    finally:
        ledger_restart(c, [])


def ledger_billing_restart(c, tenant, edit):
    """Bill some traffic, stop egressd, send more while it is down, edit
    billing.state with edit(state dict, tenant) (None: leave it), restart.
    Returns (alerts of billing_state_tampered raised by the restart)."""
    sink = SinkServer()
    before = len(obs_alerts(c, "billing_state_tampered"))
    with c.sandbox(["tcp/127.0.0.1:%d" % sink.port], name="ledger-bill", tenant=tenant) as sb:
        out = in_sandbox(sb.cg, SENDER, "tcp", "127.0.0.1", sink.port, 20000)
        check(out and out[0] == "ok", "sender: %r" % out)
        check(wait_until(lambda: billing_matches(c, tenant), 5, 0.2),
              "before the stop: lines %r, meter %r" %
              (billing_lines(c, tenant), tenant_stats(c, tenant)))
        c.daemon.stop()
        # While egressd is down the pinned programs still count.
        out = in_sandbox(sb.cg, SENDER, "tcp", "127.0.0.1", sink.port, 3000000)
        check(out and out[0] == "ok", "sender while egressd is down: %r" % out)
        if edit:
            path = os.path.join(c.state, "billing.state")
            subprocess.run(["chattr", "-a", path], check=True)
            with open(path) as f:
                last = [l for l in f.read().splitlines() if l.strip()][-1]
            st = json.loads(last)
            edit(st, tenant)
            with open(path, "w") as f:   # the red team's edit: the old MAC stays
                f.write(json.dumps(st, sort_keys=True, separators=(",", ":")) + "\n")
        c.daemon.start()
        check(wait_until(lambda: billing_matches(c, tenant), 6, 0.2),
              "after the restart the lines do not add up to the kernel meter: lines "
              "bytes_out %r, meter %r" % ([l["bytes_out"] for l in billing_lines(c, tenant)],
                                          tenant_stats(c, tenant)))
    return obs_alerts(c, "billing_state_tampered")[before:]


@test
def ledger_billing_state_edit_is_billed_from_kernel(c):
    # Finding 5: a tenant sends while egressd is down and raises its
    # exported bytes_out in billing.state just under the kernel meter. Before:
    # the lines summed to 29.5 MB where the kernel said 56.8 MB.
    tenant = "ledger-edit-" + RAND

    def raise_exported(st, tenant):
        t = st["tenants"][tenant]
        t["bytes_out"] += 2900000
        t["packets_out"] += 100

    alerts = ledger_billing_restart(c, tenant, raise_exported)
    check(alerts and alerts[-1].get("severity") == "critical",
          "no critical billing_state_tampered alert: %r" % alerts)
    log("alert: %s" % json.dumps(alerts[-1])[:400])


@test
def ledger_billing_clean_restart_bills_exactly(c):
    # Twin: the same stop, traffic while down and restart without an edit:
    # every byte billed once, no alert.
    alerts = ledger_billing_restart(c, "ledger-clean-" + RAND, None)
    check(not alerts, "a clean restart raised billing_state_tampered: %r" % alerts)
