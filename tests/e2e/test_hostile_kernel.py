# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Hostile tools against the kernel side (issue 8, docs/security.md rows 1 in
# attach mode, 7 and 10): the unspecified address, connected UDP with
# ancillary data, and leaving the sandbox cgroup. Run by run.py
# (harness.runner).

import glob
import os
import signal
import socket
import subprocess
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


import struct as _struct


def hk_rule_value(ranges, expires_ns=0):
    """struct egr_rule: expires_ns, nranges, pad, 8 x (lo, hi, protos), pad2."""
    vals = []
    for lo, hi, protos in ranges:
        vals += [lo, hi, protos]
    vals += [0, 0, 0] * (8 - len(ranges))
    return _struct.pack("<QIH" + "HHH" * 8 + "H", expires_ns, len(ranges), 0, *vals, 0)


def hk_put_rule(c, sb, addr, ranges, expires_ns=0):
    """Write one allowlist prefix straight into the sandbox's kernel rules, as
    the DNS proxy does for a learned answer (a sinkhole's 0.0.0.0, an expired
    TTL): the kernel's verdict must not depend on how the entry got there."""
    s = c.find_sandbox(sb.cg)
    check(s is not None and s.get("policy_id"), "sandbox %s has no policy_id" % sb.cg)
    pid = int(s["policy_id"])
    if ":" in addr:
        key = _struct.pack("<II", 32 + 128, pid) + socket.inet_pton(socket.AF_INET6, addr)
        name = "egr_allow6"
    else:
        key = _struct.pack("<II", 32 + 32, pid) + socket.inet_pton(socket.AF_INET, addr)
        name = "egr_allow4"
    # <bpffs>/maps/ or, with versioned pins, <bpffs>/v<ABI>/maps/
    found = sorted(glob.glob(os.path.join(c.bpffs, "maps", name)) +
                   glob.glob(os.path.join(c.bpffs, "v[0-9]*", "maps", name)))
    check(len(found) >= 1, "no pinned %s under %s" % (name, c.bpffs))
    mp = found[-1]
    must(["bpftool", "map", "update", "pinned", mp, "key", "hex"] +
         ["%02x" % x for x in key] + ["value", "hex"] +
         ["%02x" % x for x in hk_rule_value(ranges, expires_ns)])


HK_ANY = 0x3  # EGR_PROTO_TCP | EGR_PROTO_UDP


@test
def unspecified_literal_refused(c):
    """0.0.0.0 and :: in outbound_allow: a clear error naming the entry."""
    for entry, msg in (("0.0.0.0:8080", "0.0.0.0 is not a destination"),
                       ("[::]:8080", "[::] is not a destination"),
                       ("[::ffff:0.0.0.0]:8080", "0.0.0.0 is not a destination")):
        cg = c.mkcgroup("unspec-lit")
        CLEANUP.push("cgroup", cgroup_remove_tree, cg)
        r = c.ctl("attach", "--cgroup", cg, "--policy", c.policy(["127.0.0.9:1", entry]))
        out = r.stdout + r.stderr
        check(r.returncode != 0, "a policy allowing %s was accepted" % entry)
        check("outbound_allow[1]" in out and msg in out,
              "the error for %s does not name the entry: %r" % (entry, out))
        check(c.find_sandbox(cg) is None, "a refused policy left sandbox %s" % cg)
    # Sanity twin: the loopback itself and a prefix holding 0.0.0.0 are fine.
    with c.sandbox(["127.0.0.1:8080", "[::1]:8080", "0.0.0.0/0:9"]):
        pass


@test
def unspecified_is_loopback(c):
    """A rule for 0.0.0.0:P / [::]:P (learned from a sinkhole's answer) does
    not open 127.0.0.1:P / [::1]:P, also after binding a local address."""
    a, u = c.tcp("hk-a"), c.udp("hk-u")
    a6 = c.tcp("hk-a6", "::1")
    b3 = c.tcp("hk-b3", "127.0.0.3")
    # The vector is real on this kernel: outside any sandbox, 0.0.0.0 and ::
    # reach the loopback listeners, and a bound source turns 0.0.0.0 into it.
    for action, srv_ in ((("tcp", "0.0.0.0", a.port), a), (("tcp6", "::", a6.port), a6),
                         (("tcp-bound", "127.0.0.3", "0.0.0.0", b3.port), b3)):
        before = srv_.accepted
        r = c.probe(None, *action)
        check(r.rc == 0 and r.line == "ok", "outside a sandbox: %s" % r)
        check(wait_until(lambda: srv_.accepted > before, 2), "no connection: %s" % r)
    with c.sandbox(["192.0.2.1:9"], name="unspec") as sb:
        for port in (a.port, u.port, b3.port):
            hk_put_rule(c, sb, "0.0.0.0", [(port, port, HK_ANY)])
        hk_put_rule(c, sb, "::", [(a6.port, a6.port, HK_ANY)])
        seen = (a.accepted, a6.accepted, b3.accepted, u.received)
        sb.denied("tcp", "0.0.0.0", a.port)
        sb.denied("tcp-mapped", "0.0.0.0", a.port)
        sb.denied("tcp6", "::", a6.port)
        sb.denied("tcp-bound", "127.0.0.3", "0.0.0.0", b3.port)
        sb.denied("tcp-bound", "127.0.0.1", "0.0.0.0", a.port)
        sb.denied("tfo", "0.0.0.0", a.port)
        sb.denied("udp-sendto", "0.0.0.0", u.port)
        sb.denied("udp-connect", "0.0.0.0", u.port)
        sb.denied("udp-mapped-sendto", "0.0.0.0", u.port)
        sb.denied("udp-connect-cmsg", "0.0.0.0", u.port, 0)
        time.sleep(0.3)
        check((a.accepted, a6.accepted, b3.accepted, u.received) == seen,
              "something reached a loopback listener: %r -> %r" %
              (seen, (a.accepted, a6.accepted, b3.accepted, u.received)))
        # The deny event names the loopback that was judged.
        sid = sandbox_id(c, sb)
        ev = []

        def judged():
            ev[:] = [e for e in obs_events(c, "--sandbox", str(sid))
                     if e.get("type") == "connect" and e.get("verdict") == "deny" and
                     e.get("port") == a.port]
            return bool(ev)

        check(wait_until(judged, 3, 0.1), "no deny event for port %d" % a.port)
        check(all(e.get("dst") in ("127.0.0.1", "::ffff:127.0.0.1") for e in ev),
              "deny events do not name 127.0.0.1: %r" % ev)
    # Sanity twin: with the loopback allowed, 0.0.0.0 and :: work as the
    # kernel would make them work, and go where was judged.
    with c.sandbox(["127.0.0.1:%d" % a.port, "[::1]:%d" % a6.port,
                    "udp/127.0.0.1:%d" % u.port], name="unspec-ok") as sb:
        for action, srv_ in ((("tcp", "0.0.0.0", a.port), a),
                             (("tcp", "127.0.0.1", a.port), a),
                             (("tcp-mapped", "0.0.0.0", a.port), a),
                             (("tcp6", "::", a6.port), a6),
                             (("tcp-bound", "127.0.0.3", "0.0.0.0", a.port), a)):
            before = srv_.accepted
            sb.allowed(*action)
            check(wait_until(lambda: srv_.accepted > before, 2),
                  "%r was allowed but never arrived" % (action,))
        before = u.received
        sb.allowed("udp-sendto", "0.0.0.0", u.port)
        sb.allowed("udp-connect", "0.0.0.0", u.port)
        check(u.wait_for(before + 2), "datagrams to 0.0.0.0 never reached 127.0.0.1")
        # Still only that port: 0.0.0.0 on another loopback port is denied.
        sb.denied("tcp", "0.0.0.0", b3.port)


@test
def connected_udp_cmsg(c):
    """Row 10: a send with no address and an IP_TOS / IPV6_TCLASS control
    message on a connected UDP socket is judged by the socket's peer."""
    u, u6, other = c.udp("hk-cu"), c.udp("hk-cu6", "::1"), c.udp("hk-cu-other")
    with c.sandbox(["udp/127.0.0.1:%d" % u.port, "udp/[::1]:%d" % u6.port],
                   name="cmsg") as sb:
        before, before6 = u.received, u6.received
        # The twin: the allowed peer, with a control message (EPERM before).
        sb.allowed("udp-connect-cmsg", "127.0.0.1", u.port, 0)
        sb.allowed("udp-connect-cmsg", "::1", u6.port, 0)
        check(u.wait_for(before + 1) and u6.wait_for(before6 + 1),
              "the datagrams with a control message never arrived")
        # Without the control message, as before.
        sb.allowed("udp-connect", "127.0.0.1", u.port)
        # A denied peer: connect() already refuses it.
        sb.denied("udp-connect-cmsg", "127.0.0.1", other.port, 0)
        # A peer the policy stopped allowing after connect(): the socket
        # stays connected (a DNS-learned rule expiring tears nothing down),
        # and the next send with a control message is judged against the
        # rules of now, not waved through as connected.
        argv = [c.netprobe, "udp-connect-cmsg", "127.0.0.1", str(u.port), "3"]
        # Counted before the probe starts: read after, its first datagram
        # may already be in, and the wait below would take the second one
        # (3 s later) for the first, racing the rule change against it.
        first = u.received
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             preexec_fn=join_cgroup_fn(sb.cg))
        CLEANUP.push("netprobe", lambda: p.poll() is None and p.kill())
        check(u.wait_for(first + 1, 8), "the first send of the connected socket never arrived")
        hk_put_rule(c, sb, "127.0.0.1", [(u.port, u.port, 0x2)], expires_ns=1)
        out, err = p.communicate(timeout=PROBE_TIMEOUT_S)
        res = ProbeResult(argv[1:], p.returncode, out, err)
        check(res.rc == 1 and res.errno == "EPERM",
              "a send to a peer no longer allowed: %s" % res)
        sb.denied("udp-sendto", "127.0.0.1", u.port)


# --- row 1 in attach mode: leaving the sandbox cgroup -----------------------------
#
# A uid-0 process inside an attached sandbox that can write the cgroup2
# root's cgroup.procs (this harness runs as root on the host: the sandbox's
# parent is not protected from it) moves itself out. The guard
# (bpf/escape.bpf.c) kills it before it runs another instruction.


def hk_root_procs(c):
    return os.path.join(c.cg_mount, "cgroup.procs")


def hk_escape_events(c, sid, since_seq=0):
    return [e for e in obs_events(c, "--sandbox", str(sid))
            if e.get("type") == "escape" and e.get("seq", 0) > since_seq]


def hk_need_guard(c):
    layers = obs_status(c).get("layers") or {}
    check(layers.get("escape_guard") is True,
          "the escape guard is not in force on this host: %r" % layers)


def hk_wait_escape(c, sid, pred, what):
    found = []

    def seen():
        found[:] = [e for e in hk_escape_events(c, sid) if pred(e)]
        return bool(found)

    check(wait_until(seen, 5, 0.1), "no escape event (%s) for sandbox %s: %r" %
          (what, sid, hk_escape_events(c, sid)))
    return found[-1]


def hk_starttime(pid):
    """Field 22 of /proc/PID/stat (start time), None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def hk_move_probe(c, cg, procs, host, port):
    """netprobe in cg moves itself into procs, then connects host:port."""
    argv = [c.netprobe, "cgroup-move", procs, host, str(port)]
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=PROBE_TIMEOUT_S,
                       preexec_fn=join_cgroup_fn(cg))
    res = ProbeResult(argv[1:], r.returncode, r.stdout, r.stderr)
    log(str(res))
    return res


@test
def escape_guard_layer(c):
    hk_need_guard(c)
    _, _, body = scrape(c)
    check('egressd_layer_active{layer="escape_guard"} 1' in body,
          "/metrics does not show the escape guard")
    pins = os.listdir(os.path.join(c.bpffs, "guard"))
    for p in ("egr_cgroup_attach", "egr_task_fork", "egr_task_exit"):
        check(p in pins, "guard link %s is not pinned: %r" % (p, pins))


@test
def escape_to_root_killed(c):
    hk_need_guard(c)
    t = c.tcp("hk-esc")
    # Sanity twin: from a cgroup that is no sandbox, the same move works and
    # the connection is made (the vector is real on this host).
    plain = c.mkcgroup("esc-plain")
    CLEANUP.push("cgroup", cgroup_remove_tree, plain)
    before = t.accepted
    r = hk_move_probe(c, plain, hk_root_procs(c), "127.0.0.1", t.port)
    check(r.rc == 0 and r.line == "ok", "move out of a plain cgroup: %s" % r)
    check(wait_until(lambda: t.accepted > before, 2), "no connection after a plain move")
    with c.sandbox(["127.0.0.9:1"], name="esc") as sb:
        sid = sandbox_id(c, sb)
        sb.denied("tcp", "127.0.0.1", t.port)
        before = t.accepted
        r = hk_move_probe(c, sb.cg, hk_root_procs(c), "127.0.0.1", t.port)
        check(r.rc == -signal.SIGKILL and r.line == "",
              "a sandboxed process that moved itself to the root cgroup was not killed: %s" % r)
        time.sleep(0.3)
        check(t.accepted == before, "the escaped process reached the denied listener")
        e = hk_wait_escape(c, sid, lambda e: e.get("action") == "killed", "killed")
        check(e.get("target_pid") == e.get("pid") and e.get("comm") == "netprobe" and
              e.get("verdict") == "deny" and e.get("tenant") == "e2e" and
              e.get("from_cgroup_id") == c.find_sandbox(sb.cg).get("cgroup_id"),
              "escape event: %r" % e)
        human = c.ctl_ok("events", "--sandbox", str(sid)).stdout
        check("escape" in human and "action=killed" in human,
              "human `events` lacks the escape: %r" % human)
        check(wait_until(lambda: obs_alerts(c, "sandbox_escape", sid), 3, 0.1),
              "no sandbox_escape alert for sandbox %d" % sid)
        al = obs_alerts(c, "sandbox_escape", sid)[-1]
        check(al.get("severity") == "critical", "sandbox_escape alert: %r" % al)
        # From a child cgroup of the sandbox to the root: the same.
        child = c.mkcgroup("esc-child", sb.cg)
        r = hk_move_probe(c, child, hk_root_procs(c), "127.0.0.1", t.port)
        check(r.rc == -signal.SIGKILL, "escape from a child cgroup: %s" % r)
        # To a sibling cgroup outside the sandbox: the same.
        sib = c.mkcgroup("esc-sibling")
        CLEANUP.push("cgroup", cgroup_remove_tree, sib)
        r = hk_move_probe(c, sb.cg, os.path.join(sib, "cgroup.procs"), "127.0.0.1", t.port)
        check(r.rc == -signal.SIGKILL, "escape to a sibling cgroup: %s" % r)
        check(t.accepted == before, "an escaped process reached the denied listener")


@test
def escape_within_and_into_not_flagged(c):
    """Twins: moves within the sandbox stay confined and unflagged; an admin
    moving a process into a sandbox is not flagged."""
    hk_need_guard(c)
    t = c.tcp("hk-esc")
    with c.sandbox(["127.0.0.9:1"], name="esc-in") as sb:
        sid = sandbox_id(c, sb)
        child = c.mkcgroup("esc-in-child", sb.cg)
        r = hk_move_probe(c, sb.cg, os.path.join(child, "cgroup.procs"), "127.0.0.1", t.port)
        check(r.rc == 1 and r.errno == "EPERM",
              "a move into a child cgroup was killed or left confinement: %s" % r)
        r = hk_move_probe(c, child, os.path.join(sb.cg, "cgroup.procs"), "127.0.0.1", t.port)
        check(r.rc == 1 and r.errno == "EPERM", "a move back up within the sandbox: %s" % r)
        # An administrator (this harness, outside) moves a process in.
        p = subprocess.Popen(["sleep", "30"], stdin=subprocess.DEVNULL)
        CLEANUP.push("sleep", lambda: p.poll() is None and p.kill())
        with open(os.path.join(sb.cg, "cgroup.procs"), "w") as f:
            f.write(str(p.pid))
        time.sleep(0.5)
        check(p.poll() is None, "a process an admin moved into the sandbox died")
        check(hk_escape_events(c, sid) == [], "moves into and within the sandbox were flagged: %r"
              % hk_escape_events(c, sid))
        check(obs_alerts(c, "sandbox_escape", sid) == [], "sandbox_escape alert for a move in")
        # The admin moves it out again: reported, not killed (the writer has
        # authority over both cgroups).
        with open(hk_root_procs(c), "w") as f:
            f.write(str(p.pid))
        e = hk_wait_escape(c, sid, lambda e: e.get("target_pid") == p.pid, "admin move out")
        check(e.get("action") == "moved_by_outsider" and p.poll() is None,
              "an admin's move out: %r, alive=%r" % (e, p.poll() is None))
        check(wait_until(lambda: obs_alerts(c, "sandbox_escape", sid), 3, 0.1),
              "no alert for a move out by an outsider")
        p.kill()
        p.wait(5)


@test
def escape_on_escape_alert(c):
    """network.on_escape "alert": the mover is not killed, the alert is raised."""
    hk_need_guard(c)
    t = c.tcp("hk-esc")
    with c.sandbox(["127.0.0.9:1"], name="esc-alert",
                   extra_network={"on_escape": "alert"}) as sb:
        sid = sandbox_id(c, sb)
        before = t.accepted
        r = hk_move_probe(c, sb.cg, hk_root_procs(c), "127.0.0.1", t.port)
        check(r.rc == 0 and r.line == "ok", "on_escape alert: the mover should live: %s" % r)
        check(wait_until(lambda: t.accepted > before, 2), "no connection after the move")
        e = hk_wait_escape(c, sid, lambda e: e.get("action") == "alerted", "alerted")
        check(e.get("verdict") == "allow", "escape event: %r" % e)
        check(wait_until(lambda: obs_alerts(c, "sandbox_escape", sid), 3, 0.1),
              "no sandbox_escape alert with on_escape alert")


@test
def escape_process_there_before_attach(c):
    """A process already in the cgroup when it is attached (attach mode: a
    running container) is just as confined to it."""
    hk_need_guard(c)
    cg = c.mkcgroup("esc-pre")
    CLEANUP.push("cgroup", cgroup_remove_tree, cg)
    script = "read x; echo $$ > %s; echo moved" % hk_root_procs(c)
    p = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=join_cgroup_fn(cg))
    CLEANUP.push("sh", lambda: p.poll() is None and p.kill())
    sb = Sandbox(c, c.policy(["127.0.0.9:1"]), "esc-pre")
    cgroup_remove_tree(sb.cg)
    sb.cg = cg
    sb.attach()
    CLEANUP.push("detach", lambda: sb.attached and c.ctl("detach", "--cgroup", cg))
    sid = sandbox_id(c, sb)
    out, err = p.communicate("go\n", timeout=PROBE_TIMEOUT_S)
    check(p.returncode == -signal.SIGKILL and "moved" not in out,
          "a process in the cgroup before attach moved out: rc %r out %r err %r" %
          (p.returncode, out, err))
    hk_wait_escape(c, sid, lambda e: e.get("action") == "killed", "killed")
    sb.detach()
    # After detach, leaving the cgroup is no escape: the twin.
    p = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=join_cgroup_fn(cg))
    out, err = p.communicate("go\n", timeout=PROBE_TIMEOUT_S)
    check(p.returncode == 0 and "moved" in out, "a move out of a detached cgroup: %r %r" %
          (p.returncode, err))


@test
def escape_guard_outlives_egressd(c):
    """The guard's links are pinned: with egressd down the mover still dies,
    and the restarted egressd replaces them and reports what happened."""
    hk_need_guard(c)
    t = c.tcp("hk-esc")
    with c.sandbox(["127.0.0.9:1"], name="esc-down") as sb:
        sid = sandbox_id(c, sb)
        c.daemon.kill9()
        try:
            r = hk_move_probe(c, sb.cg, hk_root_procs(c), "127.0.0.1", t.port)
            check(r.rc == -signal.SIGKILL, "with egressd down, the mover lived: %s" % r)
        finally:
            c.daemon.start()
        hk_need_guard(c)
        hk_wait_escape(c, sid, lambda e: e.get("action") == "killed", "killed while down")
        r = hk_move_probe(c, sb.cg, hk_root_procs(c), "127.0.0.1", t.port)
        check(r.rc == -signal.SIGKILL, "after the restart, the mover lived: %s" % r)


@test
def escape_sibling_moved_out(c):
    """A sandboxed shell moves another sandboxed process (its child) out: the
    shell dies in the kernel, the moved process is killed by egressd."""
    hk_need_guard(c)
    with c.sandbox(["127.0.0.9:1"], name="esc-sib") as sb:
        sid = sandbox_id(c, sb)
        script = "sleep 30 & echo $!; read x; echo $! > %s; echo moved" % hk_root_procs(c)
        p = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=join_cgroup_fn(sb.cg))
        CLEANUP.push("sh", lambda: p.poll() is None and p.kill())
        child = int(p.stdout.readline())
        started = hk_starttime(child)
        # Only that very process (same start time), never a reused pid.
        CLEANUP.push("sleep", lambda: started and hk_starttime(child) == started and
                     os.kill(child, signal.SIGKILL))
        out, err = p.communicate("go\n", timeout=PROBE_TIMEOUT_S)
        check(p.returncode == -signal.SIGKILL and "moved" not in out,
              "the sandboxed mover lived: rc %r out %r" % (p.returncode, out))
        e = hk_wait_escape(c, sid, lambda e: e.get("target_pid") == child, "sibling")
        check(e.get("action") == "killed" and e.get("target_killed") is True and
              e.get("pid") == p.pid, "escape event for a moved sibling: %r" % e)

        def gone():
            try:
                with open("/proc/%d/stat" % child) as f:
                    return f.read().split(")")[-1].split()[0] in ("Z", "X")
            except OSError:
                return True
        check(wait_until(gone, 3, 0.05), "the moved process %d is still alive" % child)


@test
def escape_nested_sandbox(c):
    """A nested sandbox is a sandbox too: moving from it up into the outer
    one (whose policy is looser) is an escape from the nested one; moving
    from the outer into the nested one is not."""
    hk_need_guard(c)
    t = c.tcp("hk-esc")
    with c.sandbox(["127.0.0.1:%d" % t.port], name="esc-outer") as outer:
        inner = Sandbox(c, c.policy(["127.0.0.9:1"]), "esc-inner", parent=outer.cg)
        with inner:
            oid, iid = sandbox_id(c, outer), sandbox_id(c, inner)
            r = hk_move_probe(c, outer.cg, os.path.join(inner.cg, "cgroup.procs"),
                              "127.0.0.1", t.port)
            check(r.rc == 1 and r.errno == "EPERM",
                  "outer -> nested: killed, or not confined by the nested policy: %s" % r)
            r = hk_move_probe(c, inner.cg, os.path.join(outer.cg, "cgroup.procs"),
                              "127.0.0.1", t.port)
            check(r.rc == -signal.SIGKILL, "nested -> outer was not stopped: %s" % r)
            hk_wait_escape(c, iid, lambda e: e.get("action") == "killed", "from nested")
            check(hk_escape_events(c, oid) == [], "the outer sandbox saw an escape: %r" %
                  hk_escape_events(c, oid))


@test
def escape_clone_into_cgroup(c):
    """clone3(CLONE_INTO_CGROUP) from a sandbox into a cgroup outside it: the
    parent dies in the kernel, the child is killed by egressd (it may run for
    the event's latency first: docs/security.md)."""
    hk_need_guard(c)
    t = c.tcp("hk-esc")
    # Sanity twin: from a plain cgroup the child is born at the root and connects.
    plain = c.mkcgroup("esc-clone-plain")
    CLEANUP.push("cgroup", cgroup_remove_tree, plain)
    before = t.accepted
    r = c.probe(plain, "clone-into", c.cg_mount, "127.0.0.1", t.port)
    check(r.rc == 0 and r.line == "ok", "clone into the root from a plain cgroup: %s" % r)
    check(wait_until(lambda: t.accepted > before, 2), "the child never connected")
    with c.sandbox(["127.0.0.9:1"], name="esc-clone") as sb:
        sid = sandbox_id(c, sb)
        r = c.probe(sb.cg, "clone-into", c.cg_mount, "127.0.0.1", t.port)
        check(r.rc == -signal.SIGKILL, "a sandboxed parent that cloned a child out lived: %s" % r)
        e = hk_wait_escape(c, sid, lambda e: e.get("action") == "killed", "clone3")
        check(e.get("target_pid") and e.get("target_pid") != e.get("pid") and
              e.get("target_killed") is True, "escape event for a cloned child: %r" % e)
        log("child %s connected before it was killed: %s" %
            (e.get("target_pid"), t.accepted > before + 1))
