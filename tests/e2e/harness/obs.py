# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Helpers for events, alerts and audit (docs/events.md, alerts.md, audit.md)."""

import json
import os
import signal

from .core import TestFailure, cgroup_remove_tree, check, log, wait_until

__all__ = ["obs_status", "obs_events", "obs_jsonl", "obs_alerts", "obs_audit", "sandbox_id",
           "LOST_CONNECTS", "restart_daemon", "lost_events_counted_exactly_body",
           "audit_verify"]


# --- events, alerts, audit (docs/events.md, alerts.md, audit.md) -------------------


def obs_status(c):
    r = c.ctl_ok("status", "--json")
    try:
        return json.loads(r.stdout)
    except ValueError:
        raise TestFailure("`status --json` printed no JSON: %r" % r.stdout[:300])


def obs_events(c, *args):
    r = c.ctl_ok("events", "--json", *args)
    out = []
    for line in r.stdout.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            raise TestFailure("`events --json` printed a line that is not JSON: %r" % line)
    return out


def obs_jsonl(path):
    # egressd appends a line in one write(), but a reader of a regular file
    # can see that write half done: a last line without its newline is one
    # being written, not a torn record, and is read next time.
    out = []
    try:
        with open(path) as f:
            for line in f:
                if line.strip() and line.endswith("\n"):
                    out.append(json.loads(line))
    except FileNotFoundError:
        pass
    return out


def obs_alerts(c, type_=None, sandbox=None):
    return [a for a in obs_jsonl(os.path.join(c.state, "alerts.jsonl"))
            if (type_ is None or a.get("type") == type_) and
            (sandbox is None or a.get("sandbox") == sandbox)]


def obs_audit(c):
    return obs_jsonl(os.path.join(c.state, "audit.log"))


def sandbox_id(c, sb):
    s = c.find_sandbox(sb.cg)
    check(s is not None, "sandbox %s not listed" % sb.cg)
    return s["id"]


LOST_CONNECTS = 45000  # > 4 MiB / (sizeof(struct egr_event) + 8) = 37449


def restart_daemon(c, extra_args):
    """Restart egressd with extra_args (replacing the current extra ones).
    A placeholder sandbox lives across the restart: egressd numbers new
    sandboxes after the highest one it adopts, so ids stay unique in this
    run's alerts and audit log (tests look records up by sandbox id)."""
    cg = c.mkcgroup("restart-placeholder")
    try:
        r = c.ctl("attach", "--cgroup", cg, "--policy", c.policy([]))
        check(r.returncode == 0, "placeholder attach: %s" % r.stderr.strip())
        c.daemon.stop()
        c.daemon.extra_args = list(extra_args)
        c.daemon.start()
        c.ctl("detach", "--cgroup", cg)
    finally:
        cgroup_remove_tree(cg)


def lost_events_counted_exactly_body(c):
    b = c.tcp("b")
    with c.sandbox(["127.0.0.1:1"]) as sb:
        sid = sandbox_id(c, sb)
        st = obs_status(c)
        recv0, lost0 = st["events"]["received"], st["counters"]["events_lost"]
        rep0 = st["events"]["lost"]
        gaps0 = len([r for r in obs_audit(c) if r.get("type") == "audit_gap"])
        pid = c.daemon.proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            r = c.probe(sb.cg, "connect-loop", "127.0.0.1", b.port, LOST_CONNECTS, timeout=60)
        finally:
            os.kill(pid, signal.SIGCONT)
        check(r.rc == 0 and r.line == "ok 0 %d" % LOST_CONNECTS, "connect-loop: %s" % r)
        got = {}

        def settled():
            s = obs_status(c)
            got["recv"] = s["events"]["received"] - recv0
            got["lost"] = s["counters"]["events_lost"] - lost0
            got["reported"] = s["events"]["lost"] - rep0
            return got["recv"] + got["lost"] == LOST_CONNECTS and \
                got["reported"] == got["lost"]

        ok = wait_until(settled, 15, 0.2)
        check(ok, "received %d + lost %d != %d denied connects (lost reported: %d)" %
              (got["recv"], got["lost"], LOST_CONNECTS, got["reported"]))
        check(got["lost"] > 0, "nothing was lost: the ring holds more than expected")
        log("received %d, lost %d" % (got["recv"], got["lost"]))
        alerts = [a for a in obs_alerts(c, "lost_events")
                  if a["evidence"].get("lost") == got["lost"]]
        check(alerts, "no lost_events alert with lost=%d: %r" % (got["lost"],
                                                                  obs_alerts(c, "lost_events")))
        gaps = [g for g in obs_audit(c) if g.get("type") == "audit_gap"]
        check(len(gaps) == gaps0 + 1 and gaps[-1].get("lost") == got["lost"],
              "no audit gap record with lost=%d: %r" % (got["lost"], gaps[gaps0:]))
        lost_ev = [e for e in obs_events(c) if e.get("type") == "lost_events"]
        check(lost_ev and lost_ev[-1].get("lost") == got["lost"],
              "no lost_events event with lost=%d" % got["lost"])
        # The sandbox hammered denied destinations: one deny_burst alert.
        check(len(obs_alerts(c, "deny_burst", sid)) == 1,
              "deny_burst alerts for sandbox %d: %r" % (sid, obs_alerts(c, "deny_burst", sid)))


def audit_verify(c, path, *extra):
    return c.ctl("audit", "verify", *(list(extra) + [path]))
