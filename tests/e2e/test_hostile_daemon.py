# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# egressd defends sandboxes it did not launch (docs/security.md, rows "bpffs
# pins", "state files", "egressd in a cgroup namespace", "a socket outlives its
# sandbox"). Run by run.py (harness.runner).
# Each attack is done as the attacker would (uid 0 inside a sandbox), with a
# sanity twin doing the allowed thing the same way.

import errno as errno_mod
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


def hd_links_dir(c, sid):
    return os.path.join(c.bpffs, "links", str(sid))


def hd_pins(c, sid):
    try:
        return sorted(os.listdir(hd_links_dir(c, sid)))
    except FileNotFoundError:
        return []


def hd_map_pin(c, name):
    """Where the map is pinned under the bpffs dir (whatever the layout)."""
    for root, dirs, files in os.walk(c.bpffs):
        if "links" in root.split(os.sep)[len(c.bpffs.split(os.sep)):]:
            continue
        if name in files:
            return os.path.join(root, name)
    raise TestFailure("no pin of %s under %s" % (name, c.bpffs))


def hd_as_root_in(cg, *argv):
    """argv as uid 0 inside cgroup cg (the attacker); the CompletedProcess."""
    return subprocess.run(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=PROBE_TIMEOUT_S,
                          preexec_fn=join_cgroup_fn(cg))


def hd_held(c, sock=None):
    args = ["list", "--held", "--json"]
    r = run([c.egressctl, "--socket", sock or c.sock] + args)
    check(r.returncode == 0, "`list --held --json`: exit %d: %s" % (r.returncode, r.stderr))
    return json.loads(r.stdout)


def hd_held_ids(c):
    return {h["id"]: h for h in hd_held(c)}


def hd_audit_ok(c):
    r = audit_verify(c, os.path.join(c.state, "audit.log"))
    check(r.returncode == 0, "`audit verify` after the attack: exit %d: %s" %
          (r.returncode, (r.stdout + r.stderr).strip()))


@test
def hd_link_pins_removed_are_restored(c):
    # Row 2: uid 0 in sandbox A removes the link pins of its own sandbox and of
    # sandbox B. egressd holds its own link fds: nothing detaches, the pins come
    # back, a critical alert and an audit record say so.
    a, b = c.tcp("a"), c.tcp("b")
    with c.sandbox(["127.0.0.1:%d" % a.port], name="pinA") as sa, \
         c.sandbox(["127.0.0.1:%d" % b.port], name="pinB") as sb:
        ida, idb = sandbox_id(c, sa), sandbox_id(c, sb)
        pins_a, pins_b = hd_pins(c, ida), hd_pins(c, idb)
        check(len(pins_a) >= 6 and pins_a == pins_b, "pins before: %r %r" % (pins_a, pins_b))
        # Twin: before the attack, the allowed destination works, the other not.
        sa.allowed("tcp", "127.0.0.1", a.port)
        sa.denied("tcp", "127.0.0.1", b.port)
        # rm may lose the race with egressd pinning them again ("Directory not
        # empty"): what it removed is what the alerts below must report.
        r = hd_as_root_in(sa.cg, "rm", "-rf", hd_links_dir(c, ida), hd_links_dir(c, idb))
        check(r.returncode == 0 or "not empty" in r.stderr,
              "rm -rf of the link pins as root in the sandbox: %s" % r.stderr)
        # Enforcement never stopped, for either sandbox.
        sa.denied("tcp", "127.0.0.1", b.port)
        sb.denied("tcp", "127.0.0.1", a.port)
        sa.allowed("tcp", "127.0.0.1", a.port)
        check(wait_until(lambda: hd_pins(c, ida) == pins_a and hd_pins(c, idb) == pins_b, 5),
              "pins not restored within 5 s: %r %r" % (hd_pins(c, ida), hd_pins(c, idb)))
        for sid in (ida, idb):
            check(wait_until(lambda: obs_alerts(c, "pin_removed", sid), 5),
                  "no pin_removed alert for sandbox %d: %r" % (sid, obs_alerts(c)[-3:]))
            al = obs_alerts(c, "pin_removed", sid)[-1]
            check(al["severity"] == "critical", "pin_removed alert: %r" % al)
            recs = [x for x in obs_audit(c) if x.get("type") == "pin_removed" and
                    x.get("sandbox") == sid]
            check(recs and recs[-1].get("restored") is True and recs[-1].get("pins"),
                  "audit record of the removed pins of sandbox %d: %r" % (sid, recs))
        hd_audit_ok(c)
        # The restored pins are the same links: a restarted egressd adopts them.
        c.daemon.kill9()
        sa.denied("tcp", "127.0.0.1", b.port)
        c.daemon.start()
        check(c.find_sandbox(sa.cg) is not None and c.find_sandbox(sb.cg) is not None,
              "after a restart the sandboxes are not adopted: %r" % c.list_json())
        held = hd_held_ids(c)
        check(ida not in held and idb not in held,
              "a sandbox is held after its pins were restored: %r" % held)
        sa.allowed("tcp", "127.0.0.1", a.port)
        sa.denied("tcp", "127.0.0.1", b.port)
        sb.allowed("tcp", "127.0.0.1", b.port)


@test
def hd_links_dir_and_map_pins_removed(c):
    # Row 2: the whole links/ directory and a map pin go. Later attaches still
    # work; the map is pinned again (the same map: a restart adopts it).
    a, b = c.tcp("a"), c.tcp("b")
    with c.sandbox(["127.0.0.1:%d" % a.port], name="dirA") as sa:
        ida = sandbox_id(c, sa)
        mpin = hd_map_pin(c, "egr_sandboxes")
        r = hd_as_root_in(sa.cg, "rm", "-rf", mpin, os.path.join(c.bpffs, "links"))
        check(r.returncode == 0 or "not empty" in r.stderr,
              "rm -rf as root in the sandbox: %s" % r.stderr)
        check(wait_until(lambda: obs_alerts(c, "pin_removed", ida), 5),
              "no pin_removed alert for the links under the removed links/")
        with c.sandbox(["127.0.0.1:%d" % b.port], name="dirB") as sb:
            sb.allowed("tcp", "127.0.0.1", b.port)
            sb.denied("tcp", "127.0.0.1", a.port)
            sa.denied("tcp", "127.0.0.1", b.port)
            check(wait_until(lambda: os.path.exists(mpin) and len(hd_pins(c, ida)) >= 6, 5),
                  "map or link pins not restored")
            check(wait_until(lambda: [x for x in obs_audit(c) if x.get("type") == "pin_removed"
                                      and x.get("sandbox") is None], 5),
                  "no audit record of the removed map pin")
            c.daemon.kill9()
            c.daemon.start()
            # The libbpf debug lines of a start are many (the guard's
            # root programs too): look at all of this start's lines.
            log_txt = c.log_tail(max_lines=5000)
            check("maps adopted" in log_txt, "the restarted egressd did not reuse the pinned maps")
            check(c.find_sandbox(sa.cg) and c.find_sandbox(sb.cg),
                  "sandboxes not adopted after the map pin was restored: %r" % c.list_json())
            sa.allowed("tcp", "127.0.0.1", a.port)
            sb.denied("tcp", "127.0.0.1", a.port)
        hd_audit_ok(c)


def hd_edit_state(c, cg, sid, edit):
    """As uid 0 inside cg: rewrite <state>/sandboxes/<sid>.json with edit(obj)
    (the MAC member is kept as it was: the attacker has no key)."""
    path = os.path.join(c.state, "sandboxes", "%d.json" % sid)
    script = r"""
import json, sys
path, edit = sys.argv[1], sys.argv[2]
with open(path) as f:
    o = json.load(f)
exec(edit)
with open(path, "w") as f:
    json.dump(o, f)
print("edited")
"""
    r = subprocess.run([sys.executable, "-c", script, path, edit], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=PROBE_TIMEOUT_S, preexec_fn=join_cgroup_fn(cg))
    check(r.stdout.strip() == "edited", "editing %s as root in the sandbox: %s" %
          (path, r.stderr.strip()))


def hd_forge_state(c, sid, edit):
    """Rewrite a state file with edit(obj) and a valid MAC, as an attacker who
    stole <state>/state.key would (egressd must still trust the kernel)."""
    import hashlib
    import hmac
    path = os.path.join(c.state, "sandboxes", "%d.json" % sid)
    with open(path) as f:
        o = json.load(f)
    o.pop("mac", None)
    edit(o)
    body = json.dumps(o, separators=(",", ":"), sort_keys=True)
    with open(os.path.join(c.state, "state.key"), "rb") as f:
        key = f.read()
    mac = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
    with open(path, "w") as f:
        f.write(body[:-1] + ',"mac":"%s"}\n' % mac)


@test
def hd_state_replayed_or_forged_with_key(c):
    # Row 3, beyond the MAC: an older state file replayed (valid MAC, a looser
    # policy the sandbox had before an update), and one forged with the stolen
    # key (a looser policy under the same policy_id). The kernel's policy id and
    # rules are the truth: both are held under deny-all. Twin: a file forged
    # with the key that says exactly what the kernel has is adopted.
    a, b = c.tcp("a"), c.tcp("b")
    wide = ["127.0.0.1:%d" % a.port, "127.0.0.1:%d" % b.port]
    narrow = ["127.0.0.1:%d" % a.port]
    replay = c.sandbox(wide, name="replay")
    forged = c.sandbox(narrow, name="forged")
    same = c.sandbox(narrow, name="same")
    sbs = (replay, forged, same)
    try:
        for s in sbs:
            s.attach()
        rid, fid, sid = (sandbox_id(c, s) for s in sbs)
        path = os.path.join(c.state, "sandboxes", "%d.json" % rid)
        with open(path, "rb") as f:
            old = f.read()
        replay.update(c.policy(narrow))
        replay.denied("tcp", "127.0.0.1", b.port)
        with open(path, "wb") as f:
            f.write(old)

        def loosen(o):
            o["policy"]["network"]["outbound_allow"].append("127.0.0.1:%d" % b.port)
        hd_forge_state(c, fid, loosen)
        hd_forge_state(c, sid, lambda o: None)
        c.daemon.kill9()
        c.daemon.start()
        held = hd_held_ids(c)
        for s, i in ((replay, rid), (forged, fid)):
            check(i in held and held[i]["state"] == "tampered", "sandbox %d not held: %r (%s)" %
                  (i, held, c.log_tail(max_lines=20)))
            s.denied("tcp", "127.0.0.1", b.port)
            s.denied("tcp", "127.0.0.1", a.port)
            check(obs_alerts(c, "state_tampered", i), "no state_tampered alert for %d" % i)
        check("older" in held[rid]["reason"] or "newer" in held[rid]["reason"],
              "replay reason: %r" % held[rid]["reason"])
        check("not the one the kernel enforces" in held[fid]["reason"],
              "forged reason: %r" % held[fid]["reason"])
        check(sid not in held and c.find_sandbox(same.cg), "the faithful file was not adopted")
        same.allowed("tcp", "127.0.0.1", a.port)
        same.denied("tcp", "127.0.0.1", b.port)
        hd_audit_ok(c)
    finally:
        c.ensure_daemon()
        for s in sbs:
            s.remove()


@test
def hd_tampered_state_files_deny_all(c):
    # Row 3: uid 0 edits state files (a looser policy, the policy_id, the
    # cgroup_id), deletes another sandbox's, plants one for a sandbox the kernel
    # does not have, then egressd is killed and restarted. Each tampered sandbox
    # is held under deny-all with a state_tampered alert and audit record; the
    # untampered one is adopted as it was (twin).
    a, b = c.tcp("a"), c.tcp("b")
    allow = ["127.0.0.1:%d" % a.port]
    names = ("loose", "polid", "cgid", "deleted", "intact")
    sbs = [c.sandbox(allow, name=n) for n in names]
    try:
        for s in sbs:
            s.attach()
            s.allowed("tcp", "127.0.0.1", a.port)
        ids = [sandbox_id(c, s) for s in sbs]
        loose, polid, cgid, deleted, intact = sbs
        hd_edit_state(c, loose.cg, ids[0],
                      "o['policy']['network']['outbound_allow'].append('127.0.0.1:%d')" % b.port)
        hd_edit_state(c, polid.cg, ids[1], "o['policy_id'] = o['policy_id'] + 1000")
        hd_edit_state(c, cgid.cg, ids[2], "o['cgroup_id'] = o['cgroup_id'] + 1")
        r = hd_as_root_in(deleted.cg, "rm", "-f",
                          os.path.join(c.state, "sandboxes", "%d.json" % ids[3]))
        check(r.returncode == 0, "rm of a state file as root in the sandbox: %s" % r.stderr)
        ghost = 4000000 + random.randrange(1000)
        r = hd_as_root_in(intact.cg, "cp", os.path.join(c.state, "sandboxes", "%d.json" % ids[4]),
                          os.path.join(c.state, "sandboxes", "%d.json" % ghost))
        check(r.returncode == 0, "planting a state file: %s" % r.stderr)
        c.daemon.kill9()
        c.daemon.start()
        held = hd_held_ids(c)
        listed = {s["id"] for s in c.list_json()}
        for s, sid, n in zip(sbs[:4], ids[:4], names[:4]):
            check(sid in held and held[sid]["state"] == "tampered",
                  "%s: sandbox %d not held as tampered: %r" % (n, sid, held))
            check(os.path.realpath(held[sid]["cgroup"] or "") == os.path.realpath(s.cg),
                  "%s: held cgroup %r, not %s (from the kernel's links)" %
                  (n, held[sid]["cgroup"], s.cg))
            check(sid not in listed, "%s: a tampered sandbox is listed with a policy" % n)
            # Deny-all: neither the looser destination nor the one it had.
            s.denied("tcp", "127.0.0.1", b.port)
            s.denied("tcp", "127.0.0.1", a.port)
            s.denied("udp-sendto", "127.0.0.1", a.port)
            al = obs_alerts(c, "state_tampered", sid)
            check(al and al[-1]["severity"] == "critical",
                  "%s: no critical state_tampered alert for sandbox %d" % (n, sid))
            recs = [x for x in obs_audit(c) if x.get("type") == "state_tampered" and
                    x.get("sandbox") == sid]
            check(recs, "%s: no state_tampered audit record for sandbox %d" % (n, sid))
        check(obs_alerts(c, "state_tampered", ghost),
              "no alert for a state file of a sandbox the kernel does not have")
        check(ghost not in held and ghost not in listed, "the planted sandbox %d is managed" %
              ghost)
        # Twin: the untampered sandbox is adopted and works as before.
        check(ids[4] in listed and ids[4] not in held, "the intact sandbox was not adopted")
        intact.allowed("tcp", "127.0.0.1", a.port)
        intact.denied("tcp", "127.0.0.1", b.port)
        hd_audit_ok(c)
        # The kept evidence, and a second restart does not alert again.
        kept = [f for f in os.listdir(os.path.join(c.state, "sandboxes")) if ".tampered-" in f]
        check(len(kept) >= 4, "the tampered files were not kept aside: %r" % kept)
        n_alerts = len(obs_alerts(c, "state_tampered"))
        c.daemon.kill9()
        c.daemon.start()
        check(set(hd_held_ids(c)) >= set(ids[:4]), "held sandboxes lost at a restart")
        loose.denied("tcp", "127.0.0.1", b.port)
        check(len(obs_alerts(c, "state_tampered")) == n_alerts,
              "a restart raised the same state_tampered alerts again")
        # An administrator can attach a held cgroup again: deny-all is replaced.
        loose.attached = False
        r = c.ctl("attach", "--cgroup", loose.cg, "--policy", c.policy(allow))
        check(r.returncode == 0, "attach of a held cgroup: %s" % (r.stderr + r.stdout))
        loose.attached = True
        loose.allowed("tcp", "127.0.0.1", a.port)
        loose.denied("tcp", "127.0.0.1", b.port)
        check(sandbox_id(c, loose) == ids[0], "re-attach did not keep the cgroup's links")
        for s, sid in zip(sbs[1:4], ids[1:4]):
            r = c.ctl("detach", "--id", str(sid))
            check(r.returncode == 0, "detach of held sandbox %d: %s" % (sid, r.stderr))
            s.attached = False
    finally:
        c.ensure_daemon()
        for s in sbs:
            s.remove()


# A process inside the sandbox hands sockets it made to the test (outside every
# sandbox) over SCM_RIGHTS: a connected TCP socket, two unconnected TCP
# sockets and a UDP socket.
HD_SMUGGLE = r"""
import socket, sys
ctl = socket.socket(fileno=int(sys.argv[1]))
est = socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=2)
t1, t2 = socket.socket(), socket.socket()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
socket.send_fds(ctl, [b"fds"], [est.fileno(), t1.fileno(), t2.fileno(), u.fileno()])
print("sent", flush=True)
"""


def hd_errno(fn):
    try:
        fn()
        return None
    except OSError as e:
        return errno_mod.errorcode.get(e.errno, str(e.errno))


@test
def hd_detach_leaves_no_socket_unconfined(c):
    # Row 5: sockets made in a sandbox and handed out cannot reach anything
    # after detach: established TCP is reset, connect fails EPERM even to a
    # destination the policy allowed, sendto fails. Once the cgroup is removed
    # and the last socket closed, egressd reclaims the links and entries.
    a, b = c.tcp("a"), c.tcp("b")
    u = c.udp("u")
    hold = socket.socket()
    hold.bind(("127.0.0.1", 0))
    hold.listen(8)  # never accepted: the handshake completes in the backlog
    hp = hold.getsockname()[1]
    socks = []
    sb = c.sandbox(["127.0.0.1:%d" % a.port, "127.0.0.1:%d" % hp,
                    "udp/127.0.0.1:%d" % u.port], name="smuggle")
    try:
        sb.attach()
        sid = sandbox_id(c, sb)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            r = subprocess.run([sys.executable, "-c", HD_SMUGGLE, str(theirs.fileno()), str(hp)],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=PROBE_TIMEOUT_S,
                               pass_fds=(theirs.fileno(),), preexec_fn=join_cgroup_fn(sb.cg))
            check(r.stdout.strip() == "sent", "smuggler: %r %r" % (r.stdout, r.stderr))
            _, fds, _, _ = socket.recv_fds(mine, 16, 4)
        finally:
            mine.close()
            theirs.close()
        check(len(fds) == 4, "received %d descriptors" % len(fds))
        est = socket.socket(fileno=fds[0])
        t1, t2 = socket.socket(fileno=fds[1]), socket.socket(fileno=fds[2])
        us = socket.socket(fileno=fds[3])
        socks = [est, t1, t2, us]
        for s in socks:
            s.settimeout(2)
        # Twin: outside the sandbox, the handed-out sockets still obey its
        # policy: the allowed destinations work, a denied one does not.
        check(hd_errno(lambda: t1.connect(("127.0.0.1", a.port))) is None,
              "handed-out socket cannot reach the allowed destination before detach")
        before = u.received
        check(hd_errno(lambda: us.sendto(b"x", ("127.0.0.1", u.port))) is None and
              u.wait_for(before + 1), "handed-out UDP socket cannot send before detach")
        check(hd_errno(lambda: est.send(b"x")) is None, "established socket dead before detach")
        e = hd_errno(lambda: socket.socket().connect(("127.0.0.1", b.port)))
        check(e is None, "outside the sandbox a fresh socket reaches %d: %s" % (b.port, e))
        sb.detach()
        # Established TCP was destroyed (SOCK_DESTROY): the owner sees an error.
        e = hd_errno(lambda: (est.send(b"x"), est.recv(1)))
        check(e in ("ECONNABORTED", "ECONNRESET", "EPIPE"),
              "established connection of the sandbox survived detach: %s" % e)
        for port in (a.port, b.port):
            e = hd_errno(lambda: t2.connect(("127.0.0.1", port)))
            check(e == "EPERM", "after detach a handed-out socket connects to :%d: %s" %
                  (port, e))
        e = hd_errno(lambda: us.sendto(b"x", ("127.0.0.1", u.port)))
        check(e == "EPERM", "after detach a handed-out UDP socket sends: %s" % e)
        # Held, not listed as a sandbox; the cgroup itself denies everything.
        check(c.find_sandbox(sb.cg) is None, "a detached sandbox is listed")
        held = hd_held_ids(c)
        check(sid in held and held[sid]["state"] == "detached", "not held: %r" % held)
        sb.denied("tcp", "127.0.0.1", a.port)
        st = obs_status(c)
        check(st.get("held", {}).get("detached", 0) >= 1, "status does not count it: %r" %
              st.get("held"))
        code, _, body = scrape(c)
        check(code == 200 and 'egressd_sandboxes_held{state="detached"}' in body,
              "/metrics lacks egressd_sandboxes_held: %d" % code)
        # Removed cgroup, socket still open: still held, still denied.
        cgroup_remove_tree(sb.cg)
        check(os.path.exists(hd_links_dir(c, sid)), "links reclaimed while a socket lives")
        time.sleep(1.5)  # a reclaim tick passes
        check(sid in hd_held_ids(c), "reclaimed while a socket of the cgroup lives")
        e = hd_errno(lambda: us.sendto(b"x", ("127.0.0.1", u.port)))
        check(e == "EPERM", "after the cgroup's removal a handed-out socket sends: %s" % e)
        for s in socks:
            s.close()
        socks = []
        check(wait_until(lambda: sid not in hd_held_ids(c) and
                         not os.path.exists(hd_links_dir(c, sid)), 10, 0.2),
              "links and entries of the released cgroup not reclaimed within 10 s: %r" %
              hd_held(c))
        check(not os.path.exists(os.path.join(c.state, "sandboxes", "%d.json" % sid)),
              "state of a released sandbox left")
    finally:
        for s in socks:
            s.close()
        hold.close()
        sb.remove()


# Inside the sandbox and its network namespace: a connection over loopback
# there, checked on every line of stdin.
HD_NETNS_HOLD = r"""
import socket, sys
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(4)
s = socket.create_connection(l.getsockname(), timeout=2)
peer, _ = l.accept()
print("connected", flush=True)
for line in sys.stdin:
    try:
        s.sendall(b"x"); peer.recv(1)
        print("alive", flush=True)
    except OSError as e:
        print("dead", e.errno, flush=True)
"""


@test
def hd_detach_destroys_sockets_in_sandbox_netns(c):
    # Row 5: a sandbox attached with --netns: its sockets live in its network
    # namespace, and detach destroys them there too.
    ns = c.need_netns()
    path = "/run/netns/" + ns.name
    # Both ends in the sandbox: inbound allowed, so that loopback there works.
    sb = NsSandbox(c, c.policy(["127.0.0.1:*"], extra_network={"inbound": "allow"}), path,
                   "nsdet")
    p = None
    try:
        sb.attach()
        p = subprocess.Popen(["nsenter", "--net=" + path, sys.executable, "-c", HD_NETNS_HOLD],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             preexec_fn=join_cgroup_fn(sb.cg))
        line = p.stdout.readline().strip()
        check(line == "connected", "holder in the sandbox's netns: %r %s" %
              (line, p.stderr.read() if p.poll() is not None else ""))
        p.stdin.write("\n")
        p.stdin.flush()
        check(p.stdout.readline().strip() == "alive", "twin: the connection works before detach")
        sb.detach()
        p.stdin.write("\n")
        p.stdin.flush()
        line = p.stdout.readline().strip()
        check(line.startswith("dead"), "a connection in the sandbox's netns survived detach: %r"
              % line)
    finally:
        if p and p.poll() is None:
            p.kill()
            p.wait(5)
        sb.remove()


@test
def hd_reattach_detached_cgroup(c):
    # Row 5: a cgroup held under deny-all after detach can be attached again;
    # the new policy replaces deny-all atomically on the same links.
    a, b = c.tcp("a"), c.tcp("b")
    sb = c.sandbox(["127.0.0.1:%d" % a.port], name="reatt")
    try:
        sb.attach()
        sid = sandbox_id(c, sb)
        sb.detach()
        sb.denied("tcp", "127.0.0.1", a.port)
        sb.denied("tcp", "127.0.0.1", b.port)
        sb.policy = c.policy(["127.0.0.1:%d" % b.port])
        sb.attach()
        check(sandbox_id(c, sb) == sid, "re-attach made new links instead of switching")
        check(sid not in hd_held_ids(c), "still held after re-attach")
        sb.allowed("tcp", "127.0.0.1", b.port)
        sb.denied("tcp", "127.0.0.1", a.port)
    finally:
        sb.remove()


# --- row 4: egressd in a cgroup namespace ------------------------------------


def hd_start_nsd(c, tag, wrap):
    """A second egressd, started by `wrap + [egressd ...]` from a child cgroup
    of its own; (proc, sock, log path, its cgroup)."""
    base = "%s-%s" % (RUN_ID, tag)
    sock = os.path.join(c.work, tag + ".sock")
    state = os.path.join(c.work, tag + "-state")
    bpffs = "/sys/fs/bpf/" + base
    logp = os.path.join(c.work, tag + ".log")
    dcg = c.mkcgroup("daemon-" + tag)
    CLEANUP.push("cgroup " + dcg, cgroup_remove_tree, dcg)
    CLEANUP.push("bpffs " + bpffs, shutil.rmtree, bpffs, True)
    logf = open(logp, "wb")
    argv = wrap + [c.egressd, "--socket", sock, "--bpffs-dir", bpffs, "--state-dir", state,
                   "--log-level", "debug", "--metrics-addr", "off", "--no-syslog"] + \
        list(getattr(c, "dns_args", []))
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                            preexec_fn=join_cgroup_fn(dcg))
    logf.close()

    def stop():
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
    CLEANUP.push("egressd " + tag, stop)
    return proc, sock, logp, dcg, stop


@test
def hd_egressd_in_cgroup_namespace(c):
    # Row 4: egressd started under `unshare --cgroup` from a child cgroup (its
    # cgroup namespace root is that child) joins the host's namespace, so a
    # sandboxed root cannot detach its own sandbox or start a nested run; an
    # unsandboxed admin can (twin).
    a = c.tcp("a")
    proc, sock, logp, dcg, stop = hd_start_nsd(c, "cgns", ["unshare", "--cgroup"])
    sb_cg = c.mkcgroup("cgns-sb")
    attached = False
    try:
        ok = wait_until(lambda: proc.poll() is not None or
                        run([c.egressctl, "--socket", sock, "status"], timeout=5).returncode == 0,
                        DAEMON_READY_S, 0.1)
        with open(logp) as f:
            txt = f.read()
        check(ok and proc.poll() is None, "egressd under unshare --cgroup did not start: %s" %
              txt[-2000:])
        check("joined the host's cgroup namespace" in txt, "no join logged: %s" % txt[-1000:])
        st = json.loads(run([c.egressctl, "--socket", sock, "status", "--json"]).stdout)
        check(st.get("cgroup_namespace") == "joined host", "status: %r" %
              st.get("cgroup_namespace"))
        pol = c.policy(["127.0.0.1:%d" % a.port])
        wide = c.policy(["127.0.0.0/8:*"])
        r = run([c.egressctl, "--socket", sock, "attach", "--cgroup", sb_cg, "--policy", pol])
        check(r.returncode == 0, "attach: %s" % (r.stderr + r.stdout))
        attached = True
        ctl = [c.egressctl, "--socket", sock]
        r = hd_as_root_in(sb_cg, *(ctl + ["detach", "--cgroup", sb_cg]))
        check(r.returncode != 0 and "forbidden" in r.stderr,
              "a sandboxed root detached its own sandbox: exit %d %r" % (r.returncode, r.stderr))
        r = hd_as_root_in(sb_cg, *(ctl + ["run", "--policy", wide, "--", "/bin/true"]))
        check(r.returncode != 0, "a sandboxed root started a nested run: exit %d" % r.returncode)
        r = hd_as_root_in(sb_cg, *(ctl + ["status"]))
        check(r.returncode != 0 and "forbidden" in r.stderr, "status from inside: %r" % r.stderr)
        c.allowed(sb_cg, "tcp", "127.0.0.1", a.port)
        # Twin: the admin outside every sandbox is served.
        r = run(ctl + ["detach", "--cgroup", sb_cg])
        check(r.returncode == 0, "the admin cannot detach: %s" % r.stderr)
        attached = False
    finally:
        if attached and proc.poll() is None:
            run([c.egressctl, "--socket", sock, "detach", "--cgroup", sb_cg])
        stop()
        cgroup_remove_tree(sb_cg)


@test
def hd_egressd_refuses_foreign_cgroup_namespace(c):
    # Row 4: when it cannot join the host's cgroup namespace (no CAP_SYS_ADMIN
    # after unshare --cgroup), egressd refuses to start and says why.
    proc, sock, logp, dcg, stop = hd_start_nsd(
        c, "nocap", ["unshare", "--cgroup", "setpriv", "--inh-caps=-sys_admin",
                     "--bounding-set=-sys_admin"])
    try:
        try:
            proc.wait(DAEMON_READY_S)
        except subprocess.TimeoutExpired:
            raise TestFailure("egressd without CAP_SYS_ADMIN in a foreign cgroup namespace "
                              "kept running")
        with open(logp) as f:
            txt = f.read()
        check(proc.returncode != 0, "exit status %d" % proc.returncode)
        check("host's cgroup namespace" in txt and "refusing to start" in txt and
              "CAP_SYS_ADMIN" in txt, "no clear message: %r" % txt[-600:])
        check(not os.path.exists(sock), "a control socket was created")
    finally:
        stop()


# Run by `egressctl run`: connect (allowed) to the holding port, hand the
# socket over an abstract unix socket to the test, exit.
HD_RUN_SMUGGLE = r"""
import socket, sys
est = socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=2)
u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
u.connect("\0" + sys.argv[1])
socket.send_fds(u, [b"fd"], [est.fileno()])
print("sent", flush=True)
"""


@test
def hd_run_end_leaves_no_socket_unconfined(c):
    # Row 5, through `egressctl run`: when its command ends, run detaches, so a
    # socket the command handed out is reset and confined to deny-all.
    a = c.tcp("a")
    hold = socket.socket()
    hold.bind(("127.0.0.1", 0))
    hold.listen(8)
    hp = hold.getsockname()[1]
    name = "egr-hd-%s" % RUN_ID
    lis = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lis.bind("\0" + name)
    lis.listen(1)
    lis.settimeout(PROBE_TIMEOUT_S)
    got = []
    result = {}

    def take():
        try:
            conn, _ = lis.accept()
            with conn:
                _, fds, _, _ = socket.recv_fds(conn, 16, 1)
                got.extend(fds)
        except OSError as e:
            result["err"] = e

    t = threading.Thread(target=take, daemon=True)
    t.start()
    est = None
    try:
        pol = c.policy(["127.0.0.1:%d" % a.port, "127.0.0.1:%d" % hp])
        r = adv_run(c, pol, RUN_PY, "-c", HD_RUN_SMUGGLE, name, hp)
        t.join(PROBE_TIMEOUT_S)
        check(r.returncode == 0 and "sent" in r.stdout,
              "the command under run could not hand out a socket: exit %d %r %r" %
              (r.returncode, r.stdout, r.stderr[-300:]))
        check(len(got) == 1, "no descriptor received: %r" % result)
        est = socket.socket(fileno=got[0])
        est.settimeout(2)
        e = hd_errno(lambda: (est.send(b"x"), est.recv(1)))
        check(e in ("ECONNABORTED", "ECONNRESET", "EPIPE"),
              "a connection made under run survived its end: %s" % e)
        # The reset's error is reported once (ECONNABORTED); then the hook
        # judges the new connect: deny-all.
        errs = [hd_errno(lambda: est.connect(("127.0.0.1", a.port))) for _ in range(3)]
        check("EPERM" in errs and None not in errs,
              "the handed-out socket reconnects after run ended: %r" % errs)
        # Twin: the same destination from a fresh socket outside works.
        check(hd_errno(lambda: socket.create_connection(("127.0.0.1", a.port), 2).close())
              is None, "outside, the allowed destination is unreachable")
    finally:
        if est is not None:
            est.close()
        for fd in got[1:]:
            os.close(fd)
        lis.close()
        hold.close()


@test
def hd_interrupted_update_still_repaired(c):
    # Crash repair stays: an authenticated state file one policy ahead of the
    # kernel is what an update interrupted between writing the state and the
    # switch leaves (written here with egressd's key, as egressd would have);
    # the restarted egressd applies it. Twin of the replay test, where the
    # file is one policy behind.
    a, b = c.tcp("a"), c.tcp("b")
    sb = c.sandbox(["127.0.0.1:%d" % a.port], name="repair")
    try:
        sb.attach()
        sid = sandbox_id(c, sb)

        def newer(o):
            o["policy_id"] += 1
            o["policy"]["network"]["outbound_allow"] = ["127.0.0.1:%d" % b.port]
        hd_forge_state(c, sid, newer)
        c.daemon.kill9()
        sb.allowed("tcp", "127.0.0.1", a.port)  # the kernel still has the old policy
        c.daemon.start()
        check(c.find_sandbox(sb.cg) is not None and sid not in hd_held_ids(c),
              "an interrupted update was not repaired: %r" % hd_held(c))
        sb.allowed("tcp", "127.0.0.1", b.port)
        sb.denied("tcp", "127.0.0.1", a.port)
        check(not obs_alerts(c, "state_tampered", sid), "a repair raised state_tampered")
    finally:
        c.ensure_daemon()
        sb.remove()


def hd_strip_to_legacy(c, sid, edit=None):
    """Make a state file look like an earlier egressd's: no MAC, no "state"."""
    path = os.path.join(c.state, "sandboxes", "%d.json" % sid)
    with open(path) as f:
        o = json.load(f)
    o.pop("mac", None)
    o.pop("state", None)
    if edit:
        edit(o)
    with open(path, "w") as f:
        json.dump(o, f)


@test
def hd_state_of_earlier_egressd_needs_the_kernel(c):
    # Upgrading from an egressd without authenticated state: at the start that
    # creates state.key, files without a MAC are adopted only when the kernel
    # confirms them exactly (then rewritten with a MAC); one that asks for more
    # is held. The same files without a new key are held (an attacker stripping
    # MACs gains nothing).
    a, b = c.tcp("a"), c.tcp("b")
    ok = c.sandbox(["127.0.0.1:%d" % a.port], name="legacy")
    loose = c.sandbox(["127.0.0.1:%d" % a.port], name="legloose")
    strip = c.sandbox(["127.0.0.1:%d" % a.port], name="legstrip")
    sbs = (ok, loose, strip)
    try:
        for s in sbs:
            s.attach()
        oid, lid, sid = (sandbox_id(c, s) for s in sbs)
        c.daemon.kill9()
        hd_strip_to_legacy(c, oid)
        hd_strip_to_legacy(c, lid, lambda o: o["policy"]["network"]["outbound_allow"].append(
            "127.0.0.1:%d" % b.port))
        os.unlink(os.path.join(c.state, "state.key"))
        c.daemon.start()
        held = hd_held_ids(c)
        check(c.find_sandbox(ok.cg) is not None and oid not in held,
              "the kernel-confirmed file of an earlier egressd was not adopted: %r" % held)
        ok.allowed("tcp", "127.0.0.1", a.port)
        ok.denied("tcp", "127.0.0.1", b.port)
        with open(os.path.join(c.state, "sandboxes", "%d.json" % oid)) as f:
            check('"mac":"' in f.read(), "the adopted file was not rewritten with a MAC")
        check(lid in held and held[lid]["state"] == "tampered", "the looser file was not held")
        loose.denied("tcp", "127.0.0.1", b.port)
        loose.denied("tcp", "127.0.0.1", a.port)
        # The still-authenticated one (its MAC under the old key) is held too:
        # its key was removed.
        check(sid in held, "a file under a removed key was adopted")
        # With the key in place, stripping the MAC is tampering.
        c.daemon.kill9()
        hd_strip_to_legacy(c, oid)
        c.daemon.start()
        check(oid in hd_held_ids(c), "a stripped MAC was accepted while the key exists")
        ok.denied("tcp", "127.0.0.1", a.port)
        hd_audit_ok(c)
    finally:
        c.ensure_daemon()
        for s in sbs:
            s.remove()
