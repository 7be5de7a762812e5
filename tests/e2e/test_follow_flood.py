# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""The event feed never stalls (docs/events.md "Following the stream"): a
`events --follow` subscriber keeps getting events, or an explicit loss
marker, while a neighbour floods denied connects."""

import json
import os
import signal
import socket
import os
import signal
import subprocess
import threading
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)

FLOOD_S = 2.0        # the hostile sandbox's flood (the was 4 s)
VICTIM_DENIES = 100  # the victim's denied connects during the flood
LATE_DENIES = 3      # and after it
STREAM_WAIT_S = 10   # what the follower may take to show them


def follow_all(c):
    """`events --follow --json` of every sandbox and the lines it printed."""
    subs0 = obs_status(c)["events"]["subscribers"]
    p = subprocess.Popen([c.egressctl, "--socket", c.sock, "events", "--follow", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    CLEANUP.push("events --follow %d" % p.pid, lambda: (p.poll() is None and p.kill(), p.wait(5)))
    lines = []
    t = threading.Thread(target=lambda: [lines.append(ln) for ln in p.stdout], daemon=True)
    t.start()
    check(wait_until(lambda: obs_status(c)["events"]["subscribers"] > subs0, 5),
          "the --follow subscriber never registered")
    return p, lines


def parsed(lines):
    out = []
    for ln in list(lines):
        try:
            out.append(json.loads(ln))
        except ValueError:
            raise TestFailure("`events --follow --json` printed a line that is not JSON: %r" % ln)
    return out


def flood(c, cg, port, seconds):
    """Denied connects from cg as fast as netprobe makes them, for seconds."""
    stop = time.monotonic() + seconds
    procs = []

    def loop():
        while time.monotonic() < stop:
            r = c.probe(cg, "connect-loop", "127.0.0.1", port, 20000, timeout=60)
            procs.append(r)
    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return t, procs


def victim_seen(events, sid, port):
    """Denies of sandbox sid to port the follower showed, and what it was told
    it missed of sid (suppressed summaries, loss markers)."""
    denies = [e for e in events if e.get("sandbox") == sid and e.get("type") == "connect" and
              e.get("verdict") == "deny" and e.get("port") == port]
    told = 0
    for e in events:
        if e.get("type") == "denies_suppressed" and e.get("sandbox") == sid:
            told += int(e.get("suppressed", 0))
        if e.get("type") == "events_skipped":
            told += int((e.get("by_sandbox") or {}).get(str(sid), 0))
    return len(denies), told


@test
def follow_survives_neighbour_flood(c):
    # Attack: one sandbox floods denied connects (its deny budget holds most
    # of them back in the kernel); meanwhile its neighbour makes 100 denied
    # connects, and 3 more after the flood. A follower of the whole stream
    # must show the neighbour's denies (or say, with counts, which it missed)
    # and the 3 later ones: never go silent. Twin: the same follower before
    # the flood shows a single deny at once.
    bad, vbad = c.tcp("flood-bad"), c.tcp("flood-vbad")
    with c.sandbox(["127.0.0.1:1"], name="flooder") as fl, \
            c.sandbox(["127.0.0.1:1"], name="victim") as vi:
        fid, vid = sandbox_id(c, fl), sandbox_id(c, vi)
        p, lines = follow_all(c)
        # Twin: a quiet stream delivers at once.
        vi.denied("tcp", "127.0.0.1", vbad.port)
        check(wait_until(lambda: victim_seen(parsed(lines), vid, vbad.port)[0] == 1, 5, 0.05),
              "the follower did not show a single deny of a quiet stream: %r" % lines[-5:])
        # On a loaded host the follower may get no CPU while the flood runs:
        # stopped here, so that egressd's sends fill its socket and the
        # rest waits for the socket to become writable again.
        os.kill(p.pid, signal.SIGSTOP)
        CLEANUP.push("SIGCONT follower",
                     lambda: p.poll() is None and os.kill(p.pid, signal.SIGCONT))
        t, runs = flood(c, fl.cg, bad.port, FLOOD_S)
        time.sleep(0.3)
        r = c.probe(vi.cg, "connect-loop", "127.0.0.1", vbad.port, VICTIM_DENIES)
        check(r.rc == 0 and r.line == "ok 0 %d" % VICTIM_DENIES, "victim's denies: %s" % r)
        t.join(FLOOD_S + 60)
        flooded = sum(int(x.line.split()[2]) for x in runs if x.rc == 0 and x.line.startswith("ok"))
        check(flooded > 10000, "the flood made only %d denied connects" % flooded)
        log("flood: %d denied connects in %.1f s; follower has %d lines" %
            (flooded, FLOOD_S, len(lines)))
        os.kill(p.pid, signal.SIGCONT)
        time.sleep(1.0)
        r = c.probe(vi.cg, "connect-loop", "127.0.0.1", vbad.port, LATE_DENIES)
        check(r.rc == 0, "victim's late denies: %s" % r)
        want = 1 + VICTIM_DENIES + LATE_DENIES

        def complete():
            shown, told = victim_seen(parsed(lines), vid, vbad.port)
            return shown + told >= want and shown >= 1 + LATE_DENIES

        ok = wait_until(complete, STREAM_WAIT_S, 0.2)
        ev = parsed(lines)
        shown, told = victim_seen(ev, vid, vbad.port)
        log("follower: %d lines, victim shown %d told %d; types %r" %
            (len(ev), shown, told, sorted(set(e.get("type") for e in ev))))
        hist = [e for e in obs_events(c, "--sandbox", str(vid))
                if e.get("type") == "connect" and e.get("port") == vbad.port]
        check(ok, "the follower stalled: it shows %d of the victim's %d denies and was told of "
              "%d missed (history has %d; %d lines in all; last: %r)" %
              (shown, want, told, len(hist), len(ev), [e.get("type") for e in ev[-5:]]))
        check(p.poll() is None, "the follower exited with %r" % p.returncode)
        # Whatever the follower was not shown of the flood is counted in a
        # marker: no silent gap (its flood denies, its suppressed summaries,
        # or a skipped/loss marker all count).
        fl_shown = len([e for e in ev if e.get("sandbox") == fid and e.get("type") == "connect"])
        fl_told = sum(int(e.get("suppressed", 0)) for e in ev
                      if e.get("type") == "denies_suppressed" and e.get("sandbox") == fid)
        check(fl_shown > 0 and fl_told > 0, "the follower shows %d of the flood and %d "
              "suppressed: the flood's held-back denies are not accounted" % (fl_shown, fl_told))


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


@test
def follow_half_closed_still_streams(c):
    # A follower that shuts its writing side after the request (a hostile
    # or merely terse client) still gets its stream, and costs egressd no
    # busy loop: the subscriber's watch is level-triggered, and a hang-up
    # that stays asserted must not wake the loop for ever. Twin: the usual
    # follower (test above, events_follow_streams).
    b = c.tcp("hc-bad")
    with c.sandbox(["127.0.0.1:1"], name="halfclosed") as sb:
        sid = sandbox_id(c, sb)
        subs0 = obs_status(c)["events"]["subscribers"]
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        CLEANUP.push("half-closed follower", s.close)
        s.connect(c.sock)
        s.sendall(json.dumps({"op": "events", "follow": True, "sandbox": sid}).encode() + b"\n")
        s.shutdown(socket.SHUT_WR)
        s.settimeout(5)
        f = s.makefile("r")
        check(json.loads(f.readline()).get("ok") is True, "the follow request was refused")
        check(wait_until(lambda: obs_status(c)["events"]["subscribers"] > subs0, 5),
              "the half-closed follower never registered")
        pid = c.daemon.proc.pid
        t0 = cpu_s(pid)
        time.sleep(1.5)
        used = cpu_s(pid) - t0
        log("egressd cpu %.2f s" % used)
        check(used < 0.15, "egressd used %.2f s of CPU in 1.5 s with a half-closed follower" %
              used)
        sb.denied("tcp", "127.0.0.1", b.port)
        e = json.loads(f.readline())
        check(e.get("sandbox") == sid and e.get("verdict") == "deny" and e.get("port") == b.port,
              "the half-closed follower did not get the deny: %r" % e)
        s.close()
