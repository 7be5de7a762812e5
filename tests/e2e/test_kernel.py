# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# The kernel side (user/egressd/kernel/): load-time knobs set before load
# (--events-allow-rate -> egr_allow_events_per_s) and the probed features.

import json
import os
import socket
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


def kn_allow_events(c, sid, port):
    return [e for e in obs_events(c, "--sandbox", str(sid))
            if e.get("type") == "connect" and e.get("verdict") == "allow" and
            e.get("port") == port]


def kn_link_prog_id(c, sid, prog="egr_connect4"):
    path = os.path.join(c.bpffs, "links", str(sid), prog)
    r = run(["bpftool", "-j", "link", "show", "pinned", path])
    check(r.returncode == 0, "bpftool link show pinned %s: %s" % (path, r.stderr.strip()))
    return json.loads(r.stdout)["prog_id"]


def kn_burst_in(c, sb, port, n):
    """n allowed connects from sb; (allow events seen, seconds)."""
    sid = sandbox_id(c, sb)
    before = len(kn_allow_events(c, sid, port))
    t0 = time.time()
    r = c.probe(sb.cg, "connect-loop", "127.0.0.1", port, n)
    took = time.time() - t0
    check(r.line == "ok %d 0" % n, "%d allowed connects: %s" % (n, r))
    seen = []

    def settled():
        now = len(kn_allow_events(c, sid, port)) - before
        done = seen and seen[-1] == now
        seen.append(now)
        return done
    wait_until(settled, 5, 0.3)
    return seen[-1], took


def kn_allowed_burst(c, name, n):
    """n allowed connects from a new sandbox, as fast as one socket makes
    them. Returns (allow events seen, connections_allowed counted, seconds)."""
    # A listener with room for every connect in its accept queue: nothing
    # needs to accept them for connect() to succeed on loopback.
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    CLEANUP.push("kn listener", lst.close)
    lst.bind(("127.0.0.1", 0))
    lst.listen(max(n * 2, 128))
    port = lst.getsockname()[1]
    with c.sandbox(["127.0.0.1:%d" % port], name="kn-" + name) as sb:
        before = sb_stats(c, sb)["connections_allowed"]
        events, took = kn_burst_in(c, sb, port, n)
        # Every allow is counted in the sandbox's meter, reported or not.
        counted = []

        def metered():
            counted[:] = [sb_stats(c, sb)["connections_allowed"] - before]
            return counted[0] >= n
        wait_until(metered, 5, 0.1)
    lst.close()
    return events, counted[0], took


@test
def kernel_allow_event_rate_is_set_at_load(c):
    # A tool that opens connections as fast as it can must not fill the ring
    # with allow events: egressd sets the programs' sample budget before
    # load. With --events-allow-rate 1 (one per second and CPU, burst one)
    # nearly all of 300 allowed connects go unreported but are still
    # counted in full; with the default (20, burst 20) 10 connects are
    # each reported (the twin: the knob really was what held them back).
    ncpu = os.cpu_count() or 1
    saved = list(c.daemon.extra_args)
    restart_daemon(c, saved + ["--events-allow-rate", "1"])
    try:
        n = 300
        events, counted, took = kn_allowed_burst(c, "low", n)
    finally:
        restart_daemon(c, saved)
    bound = ncpu * (2 + int(took))
    check(counted == n, "connections_allowed +%d, expected %d: allows must be counted "
          "whether or not they are reported" % (counted, n))
    check(1 <= events <= bound,
          "--events-allow-rate 1: %d allow events for %d connects in %.2fs (expected 1..%d)"
          % (events, n, took, bound))
    # The twin, with the default budget: every allow of a short burst is an event.
    events, counted, _ = kn_allowed_burst(c, "default", 10)
    check(counted == 10 and events == 10,
          "default budget: %d allow events and %d counted for 10 connects" % (events, counted))


@test
def kernel_allow_event_rate_validated(c):
    for args, want in ((["--events-allow-rate", "-1"], "--events-allow-rate"),
                       (["--events-allow-rate", "1000001"], "--events-allow-rate"),
                       (["--events-allow-rate", "x"], "--events-allow-rate")):
        r = run([c.egressd, "--check-config"] + args)
        check(r.returncode == 2 and want in r.stderr,
              "%r: want exit 2 naming %s, got exit %d: %s" %
              (args, want, r.returncode, (r.stderr + r.stdout).strip()))
    path = os.path.join(c.work, "kn-bad.json")
    with open(path, "w") as f:
        json.dump({"events-allow-rate": "many"}, f)
    r = run([c.egressd, "--config", path, "--check-config"])
    check(r.returncode == 2 and 'key "events-allow-rate"' in r.stderr and path in r.stderr,
          "a config with a bad events-allow-rate: exit %d: %s" % (r.returncode, r.stderr))
    # The sanity twin: good values pass, 0 (no allow events) included.
    for v in ("0", "20", "1000000"):
        r = run([c.egressd, "--check-config", "--events-allow-rate", v])
        check(r.returncode == 0, "--events-allow-rate %s refused: %s" % (v, r.stderr))


@test
def kernel_bpf_link_is_probed(c):
    # Sandboxes are attached only as BPF links; status reports the probe's
    # answer (this host has BPF_LINK_CREATE), and the attached programs
    # are links the kernel lists for the sandbox's cgroup.
    st = json.loads(c.ctl_ok("status", "--json").stdout)
    check(st.get("features", {}).get("bpf_link") is True,
          "status features: %r" % st.get("features"))
    with c.sandbox([]) as sb:
        links = os.listdir(os.path.join(c.bpffs, "links", str(sandbox_id(c, sb))))
        check(len(links) >= 8, "links of the sandbox: %r" % links)


@test
def kernel_adopted_links_run_the_new_programs(c):
    """A restarted egressd adopts the links of sandboxes attached before it;
    they must run its programs, not the earlier egressd's: a BPF fix or a
    tightened knob shipped by a restart has to reach them. The attack: a
    sandbox attached under a generous allow-event budget floods allowed
    connects after egressd was restarted with --events-allow-rate 1, hoping
    to keep the old budget (and fill the ring). Its links must have moved
    to new programs (a new prog id, counted in status) and the new budget
    must bind it. Sanity twin: restarted back to the default, the same
    adopted sandbox reports each connect of a short burst again."""
    ncpu = os.cpu_count() or 1
    saved = list(c.daemon.extra_args)
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    CLEANUP.push("kn listener", lst.close)
    lst.bind(("127.0.0.1", 0))
    lst.listen(1024)
    port = lst.getsockname()[1]
    try:
        with c.sandbox(["127.0.0.1:%d" % port], name="kn-adopt") as sb:
            sid = sandbox_id(c, sb)
            before = kn_link_prog_id(c, sid)
            restart_daemon(c, saved + ["--events-allow-rate", "1"])
            check(c.find_sandbox(sb.cg) is not None, "not adopted: %r" % c.list_json())
            after = kn_link_prog_id(c, sid)
            check(after != before, "the adopted link still runs program %d" % before)
            st = json.loads(c.ctl_ok("status", "--json").stdout)
            check(st.get("adopted_links_refreshed", 0) >= 6,
                  "status adopted_links_refreshed: %r" % st.get("adopted_links_refreshed"))
            n = 300
            events, took = kn_burst_in(c, sb, port, n)
            bound = ncpu * (2 + int(took))
            check(events <= bound, "adopted sandbox after a restart with --events-allow-rate 1: "
                  "%d allow events for %d connects in %.2fs (at most %d)" %
                  (events, n, took, bound))
            restart_daemon(c, saved)
            events, _ = kn_burst_in(c, sb, port, 10)
            check(events == 10, "default budget after the second restart: %d allow events "
                  "for 10 connects" % events)
    finally:
        if c.daemon.extra_args != saved:
            restart_daemon(c, saved)
        lst.close()
