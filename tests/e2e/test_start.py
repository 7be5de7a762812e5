# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# e2e tests of the start/attach/detach fast path (issue 10): attach judges
# the sockets a cgroup had before it in one TCP walk of both families;
# detach walks the destination map once, or not at all for a sandbox that
# sent nothing. What must not change: a pre-attach connection to a refused
# peer is closed, an allowed one kept; the audit record of a detached
# sandbox lists every destination it used, with bytes.

import glob
import json
import os
import socket
import subprocess
import sys

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


def start_listener(host):
    """A TCP listener on loopback that never accepts: the handshake
    completes in its backlog, so a held connection stays established."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.bind((host, 0))
    s.listen(16)
    CLEANUP.push("listener", s.close)
    return s, s.getsockname()[1]


def start_holders(cg, peers):
    """One HOLD_CONNECTION process per (host, port) in cgroup cg; each has
    said "connected" when this returns."""
    procs = []
    for host, port in peers:
        p = subprocess.Popen([sys.executable, "-c", HOLD_CONNECTION, host, str(port)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=join_cgroup_fn(cg))
        CLEANUP.push("holder", lambda p=p: (p.kill(), p.wait(5)) if p.poll() is None else None)
        procs.append(p)
        line = p.stdout.readline().strip()
        check(line == "connected", "holder to [%s]:%d before attach: %r %r" %
              (host, port, line, p.stderr.read() if p.poll() is not None else ""))
    return procs


def holder_fate(p):
    out, _ = p.communicate("go\n", timeout=PROBE_TIMEOUT_S)
    return out.strip()


@test
def start_preattach_tcp_both_families_refused_closed(c):
    """A tool that opened connections before its cgroup got a policy
    (root in the sandbox, racing the attach) keeps none the policy refuses:
    the single TCP dump of both families must find the IPv4 and the IPv6
    one alike and name each with its own family in SOCK_DESTROY. Sanity
    twin: the connections the policy allows, in both families, made the
    same way at the same time, stay up."""
    peers = {}
    for name, host in (("ok4", "127.0.0.1"), ("bad4", "127.0.0.1"), ("ok6", "::1"),
                       ("bad6", "::1")):
        peers[name] = (host, start_listener(host)[1])
    pol = c.policy(["127.0.0.1:%d" % peers["ok4"][1], "[::1]:%d" % peers["ok6"][1]])
    sb = Sandbox(c, pol, "start-pre")  # its cgroup, not attached yet
    try:
        names = ["ok4", "bad4", "ok6", "bad6"]
        procs = dict(zip(names, start_holders(sb.cg, [peers[n] for n in names])))
        sb.attach()
        fate = {n: holder_fate(p) for n, p in procs.items()}
        check(fate["ok4"] == "alive" and fate["ok6"] == "alive",
              "connections the policy allows were cut at attach: %r" % fate)
        check(fate["bad4"].startswith("dead") and fate["bad6"].startswith("dead"),
              "a pre-attach connection to a refused peer survived attach: %r" % fate)
        # New connections obey the policy too (the links are in place).
        sb.allowed("tcp", "::1", peers["ok6"][1])
        sb.denied("tcp", "::1", peers["bad6"][1])
    finally:
        sb.remove()


def start_dest_entries(c, sid):
    """The sandbox's entries in the pinned egr_sb_dests map (bpftool)."""
    paths = glob.glob(os.path.join(c.bpffs, "v*", "maps", "egr_sb_dests"))
    check(len(paths) == 1, "egr_sb_dests pin under %s: %r" % (c.bpffs, paths))
    r = subprocess.run(["bpftool", "-j", "map", "dump", "pinned", paths[0]],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    check(r.returncode == 0, "bpftool map dump: %s" % r.stderr.strip())
    n = 0
    for e in json.loads(r.stdout or "[]"):
        k = e.get("formatted", e).get("key")
        if isinstance(k, dict):
            owner = k.get("sandbox_id")
        else:
            owner = int.from_bytes(bytes(int(b, 16) for b in k[:4]), "little")
        n += owner == sid
    return n


def start_record(c, sid):
    recs = [r for r in obs_audit(c) if r.get("type") == "execution" and
            (r.get("sandbox") == sid or r.get("sandbox_id") == sid)]
    return recs[-1] if recs else None


@test
def start_detach_audit_lists_destinations_once_walked(c):
    """Detach reads the sandbox's destinations for its audit record and
    deletes them with one walk of egr_sb_dests (none for a sandbox that
    sent nothing). The record must still list all three destinations a
    tool used (TCP over IPv4 and IPv6, UDP) with their bytes, and the map
    must keep none of them (a leftover would be charged to the next
    sandbox with that id). Twin: a sandbox that sent nothing has an empty,
    complete list."""
    t4, t6 = c.tcp("start-d4"), c.tcp("start-d6", "::1")
    u = c.udp("start-du")
    busy = c.sandbox(["127.0.0.1:%d" % t4.port, "[::1]:%d" % t6.port,
                      "udp/127.0.0.1:%d" % u.port], name="start-busy")
    quiet = c.sandbox(["127.0.0.1:%d" % t4.port], name="start-quiet")
    with busy, quiet:
        bid, qid = sandbox_id(c, busy), sandbox_id(c, quiet)
        busy.allowed("tcp", "127.0.0.1", t4.port)
        busy.allowed("tcp", "::1", t6.port)
        busy.allowed("udp-sendto", "127.0.0.1", u.port)
        check(start_dest_entries(c, bid) == 3, "the busy sandbox has %d destinations in "
              "egr_sb_dests, expected 3" % start_dest_entries(c, bid))
        check(start_dest_entries(c, qid) == 0, "the quiet sandbox has destinations")
        busy.detach()
        quiet.detach()
    wait_until(lambda: start_record(c, bid) and start_record(c, qid), 5)
    b, q = start_record(c, bid), start_record(c, qid)
    check(b is not None and q is not None, "no execution records for %d and %d" % (bid, qid))
    got = {d.get("dest"): d for d in b.get("egress") or []}
    for dest in ("127.0.0.1:%d" % t4.port, "[::1]:%d" % t6.port, "127.0.0.1:%d" % u.port):
        check(dest in got, "destination %s missing from the record: %r" % (dest, b.get("egress")))
        check((got[dest].get("bytes_out") or 0) > 0, "destination %s without bytes: %r" %
              (dest, got[dest]))
    check(b.get("egress_complete") is True, "the busy record is incomplete: %r" % b)
    check(start_dest_entries(c, bid) == 0, "detach left %d destinations of sandbox %d in "
          "egr_sb_dests" % (start_dest_entries(c, bid), bid))
    check(q.get("egress") == [] and q.get("egress_complete") is True,
          "the quiet sandbox's record: egress %r complete %r" %
          (q.get("egress"), q.get("egress_complete")))


@test
def start_detach_burst_does_not_mask_a_pin_removal(c):
    """egressd's own detaches unpin links (and the kernel's release of a
    detached cgroup unpins more, later); the pin guard ignores those, so a
    burst of them costs no check of every pin of every sandbox. The
    attack: a pin of a live sandbox removed by hand in the middle of such a
    burst, hoping it is taken for one of egressd's own. It must be restored
    within 3 s (the inotify path: the full periodic check comes only every
    10 s) with a pin_removed alert. Sanity twin: the sandboxes egressd
    detached itself get no pin_removed alert and keep no pins."""
    t = c.tcp("pinburst")
    with c.sandbox(["127.0.0.1:%d" % t.port], name="pinkeep") as keep:
        kid = sandbox_id(c, keep)
        links = os.path.join(c.bpffs, "links", str(kid))
        pins = sorted(os.listdir(links))
        check(len(pins) >= 6, "pins of the kept sandbox: %r" % pins)
        gone = []
        for i in range(12):
            sb = c.sandbox(["127.0.0.1:%d" % t.port], name="pinburst%d" % i)
            with sb:
                gone.append(sandbox_id(c, sb))
            if i == 6:
                os.unlink(os.path.join(links, pins[0]))
        check(wait_until(lambda: sorted(os.listdir(links)) == pins, 3, 0.05),
              "pin %s of sandbox %d not restored within 3 s of a detach burst: %r" %
              (pins[0], kid, sorted(os.listdir(links))))
        check(wait_until(lambda: obs_alerts(c, "pin_removed", kid), 5),
              "no pin_removed alert for sandbox %d" % kid)
        keep.allowed("tcp", "127.0.0.1", t.port)
        for sid in gone:
            check(not obs_alerts(c, "pin_removed", sid),
                  "egressd's own detach of sandbox %d alerted as a removed pin: %r" %
                  (sid, obs_alerts(c, "pin_removed", sid)))
        check(wait_until(lambda: not any(os.path.exists(os.path.join(c.bpffs, "links", str(s)))
                                         for s in gone), 10, 0.2),
              "links of detached sandboxes left pinned: %r" %
              [s for s in gone if os.path.exists(os.path.join(c.bpffs, "links", str(s)))])
