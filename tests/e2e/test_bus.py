# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# The observation bus (docs/architecture.md "The observation bus",
# docs/events.md): its subscribers exist before adoption, so a restarted
# egressd's `adopt` events reach the stream; the stream renders its history
# from typed records, so what `events` prints and what `--follow` streamed
# must be the same objects.
import json
import os
import subprocess
import threading
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


def bus_follow(c, sid):
    """An `events --follow --json` of sandbox sid and the lines it printed."""
    subs0 = obs_status(c)["events"]["subscribers"]
    p = subprocess.Popen([c.egressctl, "--socket", c.sock, "events", "--follow", "--json",
                          "--sandbox", str(sid)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    CLEANUP.push("events --follow %d" % p.pid, lambda: (p.kill(), p.wait(5)))
    lines = []
    t = threading.Thread(target=lambda: [lines.append(ln) for ln in p.stdout], daemon=True)
    t.start()
    check(wait_until(lambda: obs_status(c)["events"]["subscribers"] > subs0, 3),
          "the --follow subscriber never registered")
    return p, lines


def bus_followed(lines):
    out = []
    for ln in list(lines):
        try:
            out.append(json.loads(ln))
        except ValueError:
            raise TestFailure("`events --follow --json` printed a line that is not JSON: %r" % ln)
    return out


@test
def bus_adopt_event_after_restart(c):
    # A sandbox attached before a restart is adopted by the new egressd: its
    # history shows an `adopt` event with the sandbox's identity (and no new
    # `attach`). Sanity twin: a sandbox attached after the restart has an
    # `attach` event and no `adopt`: adopt is not printed for everything.
    a = c.tcp("bus-adopt")
    sb = Sandbox(c, c.policy(["127.0.0.1:%d" % a.port]), "bus-adopt")
    try:
        sb.attach()
        listed = c.find_sandbox(sb.cg)
        check(listed is not None, "`list --json` does not show %s" % sb.cg)
        sid = listed["id"]
        restart_daemon(c, c.daemon.extra_args)
        with c.sandbox(["127.0.0.1:%d" % a.port], name="bus-fresh") as fresh:
            fid = sandbox_id(c, fresh)
            mine = obs_events(c, "--sandbox", str(sid))
            adopts = [e for e in mine if e.get("type") == "adopt"]
            check(len(adopts) == 1, "restarted egressd: %d adopt event(s) for sandbox %d, "
                  "expected 1: %r" % (len(adopts), sid, [e.get("type") for e in mine]))
            e = adopts[0]
            for k in ("cgroup_id", "policy_sha256", "tenant", "execution_id"):
                check(e.get(k) == listed.get(k), "adopt event %s is %r, the sandbox's is %r: %r"
                      % (k, e.get(k), listed.get(k), e))
            check(os.path.realpath(e.get("cgroup", "")) == os.path.realpath(sb.cg),
                  "adopt event cgroup %r, expected %s" % (e.get("cgroup"), sb.cg))
            for k, want in (("v", 1), ("origin", "egressd"), ("sandbox", sid)):
                check(e.get(k) == want, "adopt event %s is %r, expected %r" % (k, e.get(k), want))
            check(isinstance(e.get("seq"), int) and isinstance(e.get("time"), str),
                  "adopt event without seq/time: %r" % e)
            check(not [x for x in mine if x.get("type") == "attach"],
                  "the new egressd shows an attach of the adopted sandbox %d: %r" % (sid, mine))
            twin = [x.get("type") for x in obs_events(c, "--sandbox", str(fid))]
            check("attach" in twin and "adopt" not in twin,
                  "sandbox %d attached after the restart: events %r, expected an attach and "
                  "no adopt" % (fid, twin))
            # The adopted sandbox is still enforced, and its events still flow.
            sb.allowed("tcp", "127.0.0.1", a.port)
            sb.denied("tcp", "127.0.0.1", 1)
            check(wait_until(lambda: [x for x in obs_events(c, "--sandbox", str(sid))
                                      if x.get("type") == "connect" and
                                      x.get("verdict") == "deny" and x.get("port") == 1], 3,
                             0.1), "no deny event of the adopted sandbox %d" % sid)
        sb.detach()
    finally:
        c.ensure_daemon()
        sb.remove()


@test
def bus_history_renders_what_follow_streamed(c):
    # The history keeps typed records and renders them when asked; a
    # follower got the same records rendered at once. Every event it
    # streamed (lifecycle, kernel deny and allow-side DNS verdicts) must
    # come back from the history as the identical object.
    need_dnsmasq(c)
    a = srv(c, "bus-api", "api.test")
    with c.sandbox(["api.test:%d" % a.port], extra_network=DNS_REBIND_LO,
                   name="bus-render") as sb:
        sid = sandbox_id(c, sb)
        p, lines = bus_follow(c, sid)
        try:
            dns_ok(c, sb, "api.test", want=DNS_ZONE["api.test"])
            dns_refused(c, sb, "denied.test")
            sb.denied("tcp", "127.0.0.1", 1)
            sb.update(c.policy(["api.test:%d" % a.port, "127.0.0.1:2"],
                               extra_network=DNS_REBIND_LO))

            def streamed():
                kinds = [(e.get("type"), e.get("verdict")) for e in bus_followed(lines)]
                return (("dns", "allow") in kinds and ("dns", "deny") in kinds and
                        ("connect", "deny") in kinds and ("update", None) in kinds)

            check(wait_until(streamed, 5, 0.1), "the follower did not get the DNS allow, DNS "
                  "deny, connect deny and update events: %r" % bus_followed(lines))
        finally:
            p.kill()
            p.wait(5)
        got = bus_followed(lines)
        history = {e.get("seq"): e for e in obs_events(c, "--sandbox", str(sid))}
        for e in got:
            check(e.get("seq") in history, "streamed event seq %r is not in the history: %r" %
                  (e.get("seq"), e))
            check(history[e["seq"]] == e, "the history renders event %r differently:\n"
                  "  followed %r\n  history  %r" % (e.get("seq"), e, history[e["seq"]]))
        dnsallow = [e for e in got if e.get("type") == "dns" and e.get("verdict") == "allow"]
        check(dnsallow and dnsallow[0].get("addresses") and
              dnsallow[0]["addresses"][0].get("addr") == DNS_ZONE["api.test"],
              "the DNS allow event lacks its address: %r" % dnsallow)
