# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Red team 4: the hostile tool against the afternoon's skipped steps
# (5ddeace..): the detach that skips its socket walk (egr_sock_counts), the
# seccomp filter built once in egressctl run, egressctl without a linked
# libcrypto, state files on the commit queue, DNS answers judged again
# after an update. Each test is an attack and its sanity twin; a test here
# that passes is a defence that held. Holes found: holes_redteam4.py (not
# loaded by run.py).

import json
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time

from harness import *  # noqa: F401,F403 (Ctx, check, adv_run, ...: harness/__init__.py)
from test_run2 import run2_attach_req, run2_request
from test_runfast import FdCatcher, RF_SMUGGLE_TCP, rf_detach_walks, rf_errno, rf_tcp_listener


# --- 1. the detach's skipped socket walk ------------------------------------------------

def rt4_create(c, parent, name, pol):
    """attach "create" of parent/name (egressd makes it: fresh); its path."""
    cg = os.path.join(parent, name)
    rep = run2_request(c, run2_attach_req(cg, pol))
    check(rep.get("ok") is True, "attach create %s: %r" % (cg, rep))
    CLEANUP.push("rt4 detach", lambda: c.ctl("detach", "--cgroup", cg))
    return cg


def rt4_smuggle(cg, script, *args):
    """Run script with python in cgroup cg; its CompletedProcess."""
    return subprocess.run([sys.executable, "-c", script] + [str(a) for a in args],
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=PROBE_TIMEOUT_S,
                          preexec_fn=join_cgroup_fn(cg))


def rt4_handed_out_dies(c, cg, catch, peer, what):
    """Detach cg; the handed-out connected TCP socket must be reset and unable
    to reconnect; the detach must have walked."""
    walked0, skipped0 = rf_detach_walks(c)
    c.ctl_ok("detach", "--cgroup", cg)
    walked1, skipped1 = rf_detach_walks(c)
    check((walked1 - walked0, skipped1 - skipped0) == (1, 0),
          "%s: detach walks +%d, skipped +%d (want +1, +0): an uncounted socket" %
          (what, walked1 - walked0, skipped1 - skipped0))
    est = socket.socket(fileno=os.dup(catch.fds[0]))
    try:
        est.settimeout(2)
        e = rf_errno(lambda: (est.send(b"x"), est.send(b"y"), est.recv(1)))
        check(e in ("ECONNABORTED", "ECONNRESET", "EPIPE"),
              "%s: the handed-out connection survived the detach: %s" % (what, e))
        errs = [rf_errno(lambda: est.connect(("127.0.0.1", peer))) for _ in range(3)]
        check("EPERM" in errs and None not in errs,
              "%s: the handed-out socket reconnects after the detach: %r" % (what, errs))
    finally:
        est.close()


RT4_SMUGGLE_MPTCP = r"""
import errno, socket, sys
try:
    est = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)  # IPPROTO_MPTCP
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno), flush=True)
    sys.exit(0)
est.settimeout(2)
est.connect(("127.0.0.1", int(sys.argv[2])))
u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
u.connect("\0" + sys.argv[1])
socket.send_fds(u, [b"fd"], [est.fileno()])
print("sent", flush=True)
"""


@test
def redteam4_child_cgroup_socket_counted_for_the_sandbox(c):
    """The attack: in a sandbox egressd made fresh (attach "create"), root
    makes a child cgroup, and a process there connects to the allowed peer
    and hands the socket out by SCM_RIGHTS, hoping the count is keyed by the
    child (no entry for the sandbox: the detach skips its walk). The count
    is the sandbox's (cgroup storage of the attach point): the detach walks,
    the socket is reset and cannot reconnect. Twin: before the detach the
    handed-out socket sends to the peer; a sibling fresh sandbox that made no
    socket gets no walk."""
    peer = rf_tcp_listener()
    pol = c.policy(["127.0.0.1:%d" % peer])
    parent = c.mkcgroup("rt4-nest")
    CLEANUP.push("rt4 parent", cgroup_remove_tree, parent)
    cg = rt4_create(c, parent, "sb", pol)
    quiet = rt4_create(c, parent, "quiet", pol)
    child = os.path.join(cg, "child")
    os.mkdir(child)
    catch = FdCatcher()
    r = rt4_smuggle(child, RF_SMUGGLE_TCP, catch.name, peer)
    catch.t.join(PROBE_TIMEOUT_S)
    check(r.returncode == 0 and "sent" in r.stdout,
          "the child could not hand out its socket: %r %r" % (r.stdout, r.stderr[-300:]))
    check(len(catch.fds) == 1, "no descriptor received: %r" % catch.err)
    twin = socket.socket(fileno=os.dup(catch.fds[0]))
    try:
        check(twin.send(b"before") == 6, "twin: the handed-out socket cannot send before")
    finally:
        twin.close()
    c.denied(child, "tcp", "127.0.0.1", 9)
    rt4_handed_out_dies(c, cg, catch, peer, "a child cgroup's socket")
    walked0, skipped0 = rf_detach_walks(c)
    c.ctl_ok("detach", "--cgroup", quiet)
    walked1, skipped1 = rf_detach_walks(c)
    check((walked1 - walked0, skipped1 - skipped0) == (0, 1),
          "twin: a fresh sandbox without a socket walks +%d, skips +%d (want 0, +1)" %
          (walked1 - walked0, skipped1 - skipped0))


@test
def redteam4_mptcp_socket_counted(c):
    """The attack: an MPTCP socket (IPPROTO_MPTCP: its TCP subflows are
    kernel sockets, which skip cgroup/sock_create) in a fresh sandbox, handed
    out: the MPTCP socket itself is counted, so the detach walks and the
    socket dies. Twin: the same script's connect before the detach reached
    the peer (it handed out a connected socket; the policy names "mptcp")."""
    peer = rf_tcp_listener()
    pol = c.policy(["127.0.0.1:%d" % peer], sockets=["mptcp"])
    parent = c.mkcgroup("rt4-mptcp")
    CLEANUP.push("rt4 parent", cgroup_remove_tree, parent)
    cg = rt4_create(c, parent, "sb", pol)
    catch = FdCatcher()
    r = rt4_smuggle(cg, RT4_SMUGGLE_MPTCP, catch.name, peer)
    catch.t.join(PROBE_TIMEOUT_S)
    check(r.returncode == 0 and "sent" in r.stdout,
          "MPTCP in the sandbox: %r %r (the host has MPTCP enabled: %s)" %
          (r.stdout, r.stderr[-300:], c.mptcp_errno))
    check(len(catch.fds) == 1, "no descriptor received: %r" % catch.err)
    rt4_handed_out_dies(c, cg, catch, peer, "an MPTCP socket")


RT4_FAMILIES = r"""
import errno, socket
def err(fn):
    try:
        fn().close()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
print(err(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)),
      err(lambda: socket.socket(43, socket.SOCK_STREAM, 0)),           # AF_SMC
      err(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 256)),  # IPPROTO_SMC
      err(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 0)))
"""


@test
def redteam4_run_filter_is_the_policys(c):
    """The filter egressctl builds once (while the attach is in flight) is
    the policy's: a policy without "netlink" refuses AF_NETLINK (EPERM, the
    filter: not the kernel's EAFNOSUPPORT), and AF_SMC, the one family whose
    kernel TCP socket the detach's count cannot see, is refused by the
    filter under every policy (this kernel has no SMC: the kernel alone
    would say EAFNOSUPPORT). Twin: a policy naming "netlink" gets its
    AF_NETLINK socket in the same script, and plain TCP works under both."""
    narrow = c.policy(["127.0.0.1:9"])
    wide = c.policy(["127.0.0.1:9"], sockets=["netlink"])
    r = adv_run(c, narrow, RUN_PY, "-c", RT4_FAMILIES)
    check(r.returncode == 0, "run (narrow): %d %r" % (r.returncode, r.stderr[-300:]))
    got = r.stdout.split()
    check(got == ["EPERM", "EPERM", got[2], "ok"] and got[2] != "ok",
          "a policy without netlink: netlink, AF_SMC, IPPROTO_SMC, TCP = %r "
          "(want EPERM EPERM <refused> ok)" % got)
    r = adv_run(c, wide, RUN_PY, "-c", RT4_FAMILIES)
    check(r.returncode == 0, "run (wide): %d %r" % (r.returncode, r.stderr[-300:]))
    got = r.stdout.split()
    check(got[0] == "ok" and got[1] == "EPERM" and got[3] == "ok",
          "twin: a policy naming netlink: netlink, AF_SMC, IPPROTO_SMC, TCP = %r "
          "(want ok EPERM * ok)" % got)


# --- 3. egressctl audit verify without a linked libcrypto -------------------------------

@test
def redteam4_audit_verify_without_libcrypto_fails(c):
    """egressctl loads libcrypto at the first hash (lazycrypto.c). An
    egressctl that finds no usable libcrypto (a file of that name that is
    not a library, first on its search path) must fail `audit verify`,
    never print ok; a hand-edited copy of the log must fail it too. Twin:
    the same command, clean environment, on the real log: ok."""
    log_path = os.path.join(c.state, "audit.log")
    r = audit_verify(c, log_path)
    check(r.returncode == 0 and r.stdout.startswith("ok:"),
          "twin: audit verify of egressd's log: %d %r %r" %
          (r.returncode, r.stdout, r.stderr[-300:]))
    bad = os.path.join(c.work, "rt4-badcrypto")
    os.makedirs(bad, exist_ok=True)
    with open(os.path.join(bad, "libcrypto.so.3"), "w") as f:
        f.write("not a library\n")
    env = dict(os.environ, LD_LIBRARY_PATH=bad)
    r = subprocess.run([c.egressctl, "--socket", c.sock, "audit", "verify", log_path],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=CTL_TIMEOUT_S, env=env)
    check(r.returncode != 0 and not r.stdout.startswith("ok"),
          "audit verify with no usable libcrypto said: %d %r %r" %
          (r.returncode, r.stdout, r.stderr[-300:]))
    check("libcrypto" in r.stderr, "no word about libcrypto: %r" % r.stderr[-300:])
    # A hand-edited copy: one record's field changed, the chain otherwise intact.
    with open(log_path) as f:
        lines = f.read().splitlines()
    check(len(lines) >= 2, "the audit log has %d records" % len(lines))
    edited = None
    for i, line in enumerate(lines):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("sandbox"), int):
            rec["sandbox"] += 1
            lines[i] = json.dumps(rec, separators=(",", ":"))
            edited = i
            break
    check(edited is not None, "no record with a sandbox id to edit")
    copy = os.path.join(c.work, "rt4-audit-edited.log")
    with open(copy, "w") as f:
        f.write("\n".join(lines) + "\n")
    r = audit_verify(c, copy)
    check(r.returncode != 0 and not r.stdout.startswith("ok"),
          "audit verify of a hand-edited log (record %d) said: %d %r" %
          (edited, r.returncode, r.stdout))


# --- 4. state files on the commit queue -------------------------------------------------

RT4_BURST = 6


@test
def redteam4_kill_mid_update_burst_keeps_acked_narrowing(c):
    """The attack: egressd is SIGKILLed while a burst of updates (each
    narrowing {a, b} to {a}), two updates of the same sandbox (both narrow:
    the second renames over the first's pending file, pending_forget), and a
    detach are on the commit queue, right after the first reply; meanwhile a
    hand-truncated state file of another sandbox is planted. After the
    restart every acknowledged update refuses b and allows a, an
    acknowledged detach allows nothing, no sandbox reaches c (never
    allowed), and the truncated one is held under deny-all. Twin: before
    the burst every sandbox reached a and b; adopted untouched sandboxes
    still reach a."""
    a, b, cc = c.tcp("rt4-a"), c.tcp("rt4-b"), c.tcp("rt4-c")
    wide = c.policy(["127.0.0.1:%d" % a.port, "127.0.0.1:%d" % b.port])
    sbs = [Sandbox(c, wide, "rt4-upd") for _ in range(RT4_BURST)]
    for sb in sbs:
        CLEANUP.push("rt4 sandbox", sb.remove)
        sb.__enter__()
    for sb in sbs:
        sb.allowed("tcp", "127.0.0.1", b.port)        # twin: b before the burst
    upd, dbl, det, cut = sbs[:3], sbs[3], sbs[4], sbs[5]
    cut_id = sandbox_id(c, cut)
    narrow = [json.load(open(c.policy(["127.0.0.1:%d" % a.port]))) for _ in range(5)]
    reqs = [(sb, {"op": "update", "cgroup": sb.cg, "policy": narrow[i]})
            for i, sb in enumerate(upd)]
    reqs += [(dbl, {"op": "update", "cgroup": dbl.cg, "policy": narrow[3]}),
             (dbl, {"op": "update", "cgroup": dbl.cg, "policy": narrow[4]}),
             (det, {"op": "detach", "cgroup": det.cg})]
    acked, lock, first = [], threading.Lock(), threading.Event()

    def send(i, req):
        try:
            r = ctl_request(c.sock, req, timeout=30)
        except (OSError, ValueError):
            r = None
        if r and r.get("ok"):
            with lock:
                acked.append(i)
            first.set()

    threads = [threading.Thread(target=send, args=(i, q), daemon=True)
               for i, (_, q) in enumerate(reqs)]
    try:
        for t in threads:
            t.start()
        # Planted while the batch is pending: a truncated file of `cut`.
        with open(os.path.join(c.state, "sandboxes", "%d.json" % cut_id), "r+") as f:
            f.truncate(17)
        got = first.wait(30)
        c.daemon.kill9()
        for t in threads:
            t.join(30)
        with lock:
            done = sorted(acked)
        check(got and done, "nothing of the burst was acknowledged before the kill")
        log("acknowledged before the kill: %r of %d" % (done, len(reqs)))
    finally:
        c.ensure_daemon()
    for i, (sb, q) in enumerate(reqs):
        sb.denied("tcp", "127.0.0.1", cc.port)
        if q["op"] == "detach":
            if i in done:
                sb.denied("tcp", "127.0.0.1", a.port)
            continue
        if i in done:
            sb.denied("tcp", "127.0.0.1", b.port)
        sb.allowed("tcp", "127.0.0.1", a.port)
    cut.denied("tcp", "127.0.0.1", cc.port)
    cut.denied("tcp", "127.0.0.1", a.port)   # held: deny-all
    det.attached = det.attached and (len(reqs) - 1) not in done
