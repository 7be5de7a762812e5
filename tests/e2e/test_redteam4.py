# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Red team 4: the hostile tool against the afternoon's skipped steps
# (5ddeace..): the detach that skips its socket walk (egr_sock_counts), the
# seccomp filter built once in egressctl run, egressctl without a linked
# libcrypto, state files on the commit queue, DNS answers judged again
# after an update. Each test is an attack and its sanity twin; a test here
# that passes is a defence that held. The one defect found (an update reset
# the sandbox's connections to its DNS proxy) is fixed: test_redteam4_fixed.py.

import json
import os
import select
import shutil
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

class Rt4Parent:
    """A cgroup the test's sandboxes are made under; at the end of the test
    (the harness's CLEANUP runs only at the end of the run) every sandbox
    below it is detached and the tree removed."""

    def __init__(self, c, name):
        self.c = c
        self.path = c.mkcgroup(name)

    def __enter__(self):
        return self.path

    def __exit__(self, *exc):
        try:
            if self.c.daemon.alive():
                for sb in self.c.list_json():
                    cg = sb.get("cgroup") or ""
                    if cg.startswith(self.path + "/"):
                        self.c.ctl("detach", "--cgroup", cg)
        finally:
            cgroup_remove_tree(self.path)
        return False


def rt4_create(c, parent, name, pol):
    """attach "create" of parent/name (egressd makes it: fresh); its path."""
    cg = os.path.join(parent, name)
    rep = run2_request(c, run2_attach_req(cg, pol))
    check(rep.get("ok") is True, "attach create %s: %r" % (cg, rep))
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
    with Rt4Parent(c, "rt4-nest") as parent:
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
    with Rt4Parent(c, "rt4-mptcp") as parent:
        cg = rt4_create(c, parent, "sb", pol)
        catch = FdCatcher()
        r = rt4_smuggle(cg, RT4_SMUGGLE_MPTCP, catch.name, peer)
        catch.t.join(PROBE_TIMEOUT_S)
        check(r.returncode == 0 and "sent" in r.stdout,
              "MPTCP in the sandbox: %r %r (the host has MPTCP enabled: %s)" %
              (r.stdout, r.stderr[-300:], c.mptcp_errno))
        check(len(catch.fds) == 1, "no descriptor received: %r" % catch.err)
        rt4_handed_out_dies(c, cg, catch, peer, "an MPTCP socket")


# A TCP socket made by io_uring's IORING_OP_SOCKET (raw syscalls, no
# liburing), connected to argv[2] and handed out to the catcher argv[1].
RT4_SMUGGLE_URING = r"""
import ctypes, errno, mmap, socket, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
params = ctypes.create_string_buffer(120)
fd = libc.syscall(425, 4, params)  # io_uring_setup
if fd < 0:
    print("setup", errno.errorcode.get(ctypes.get_errno(), "?"), flush=True)
    sys.exit(0)
p = params.raw
sq_entries, cq_entries = struct.unpack_from("<2I", p, 0)
_, sq_tail, sq_mask, _, _, _, sq_array = struct.unpack_from("<7I", p, 40)
cq_head, _, cq_mask, _, _, cq_cqes = struct.unpack_from("<6I", p, 80)
size = max(sq_array + sq_entries * 4, cq_cqes + cq_entries * 16)
prot = mmap.PROT_READ | mmap.PROT_WRITE
ring = mmap.mmap(fd, size, mmap.MAP_SHARED, prot, offset=0)
sqes = mmap.mmap(fd, sq_entries * 64, mmap.MAP_SHARED, prot, offset=0x10000000)
sqe = struct.pack("<BBHiQQII", 45, 0, 0, socket.AF_INET, socket.SOCK_STREAM, 0, 0, 0)  # SOCKET
sqe += struct.pack("<Q", 7)
sqes[0:64] = sqe + b"\0" * (64 - len(sqe))
tail = struct.unpack_from("<I", ring, sq_tail)[0]
struct.pack_into("<I", ring, sq_array + 4 * (tail & sq_mask), 0)
struct.pack_into("<I", ring, sq_tail, tail + 1)
if libc.syscall(426, fd, 1, 1, 1, None, 0) < 0:  # io_uring_enter, GETEVENTS
    print("enter", errno.errorcode.get(ctypes.get_errno(), "?"), flush=True)
    sys.exit(0)
head = struct.unpack_from("<I", ring, cq_head)[0]
_, res, _ = struct.unpack_from("<QiI", ring, cq_cqes + 16 * (head & cq_mask))
if res < 0:
    print("socket", errno.errorcode.get(-res, str(-res)), flush=True)
    sys.exit(0)
est = socket.socket(fileno=res)
est.settimeout(2)
est.connect(("127.0.0.1", int(sys.argv[2])))
u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
u.connect("\0" + sys.argv[1])
socket.send_fds(u, [b"fd"], [est.fileno()])
print("sent", flush=True)
"""


@test
def redteam4_io_uring_socket_counted(c):
    """The attack, for a client other than `run` (whose filter refuses
    io_uring): a TCP socket made by io_uring's IORING_OP_SOCKET in a fresh
    sandbox, connected and handed out, hoping the io_uring path skips
    cgroup/sock_create and so the count. It goes through inet_create like
    socket(2): counted, the detach walks, the socket is reset. Twin: the
    same socket connected to the allowed peer before the detach."""
    peer = rf_tcp_listener()
    pol = c.policy(["127.0.0.1:%d" % peer])
    with Rt4Parent(c, "rt4-uring") as parent:
        cg = rt4_create(c, parent, "sb", pol)
        catch = FdCatcher()
        r = rt4_smuggle(cg, RT4_SMUGGLE_URING, catch.name, peer)
        catch.t.join(PROBE_TIMEOUT_S)
        check(r.returncode == 0 and "sent" in r.stdout,
              "io_uring socket in the sandbox: %r %r" % (r.stdout, r.stderr[-300:]))
        check(len(catch.fds) == 1, "no descriptor received: %r" % catch.err)
        rt4_handed_out_dies(c, cg, catch, peer, "an io_uring socket")


# Inherits an outside listener (fd argv[2]), accepts one connection on it and
# hands the accepted socket back out.
RT4_ACCEPT_OUTSIDE = r"""
import socket, sys
lis = socket.socket(fileno=int(sys.argv[2]))
lis.settimeout(5)
conn, _ = lis.accept()
u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
u.connect("\0" + sys.argv[1])
socket.send_fds(u, [b"fd"], [conn.fileno()])
print("sent", flush=True)
"""


def rt4_accept_outside(c, cg):
    """A process in cg accepts, on a listener made outside, a connection from
    the test and hands the accepted socket out; (accepted fd, our end)."""
    lis = socket.socket()
    lis.bind(("127.0.0.1", 0))
    lis.listen(4)
    CLEANUP.push("rt4 outside listener", lis.close)
    catch = FdCatcher()
    p = subprocess.Popen([sys.executable, "-c", RT4_ACCEPT_OUTSIDE, catch.name,
                          str(lis.fileno())], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, pass_fds=[lis.fileno()],
                         preexec_fn=join_cgroup_fn(cg))
    CLEANUP.push("rt4 acceptor", lambda: p.poll() is None and p.kill())
    peer = socket.create_connection(lis.getsockname(), timeout=2)
    CLEANUP.push("rt4 peer", peer.close)
    out, err = p.communicate(timeout=PROBE_TIMEOUT_S)
    catch.t.join(PROBE_TIMEOUT_S)
    check("sent" in out and len(catch.fds) == 1,
          "accept in the sandbox on an outside listener: %r %r" % (out, err[-300:]))
    return catch.fds[0], peer


@test
def redteam4_accept_on_outside_listener_skip_equals_walk(c):
    """The attack: a listener made outside is handed into a fresh sandbox,
    which accepts on it (the accepted socket is not counted) and hands the
    connection out, hoping the skipped walk leaves alive what a walk would
    have ended. An accepted socket takes the listener's cgroup (outside): no
    count, no walk, and it is no socket of the sandbox either way. The twin
    proves the skip lost nothing: the same in a sandbox attached without
    create (the detach walks) leaves the same connection alive, and in both
    the connection carries data after the detach, as any outside socket.
    A socket handed into a sandbox is the outside's, under its creator's
    policy (docs/security.md, "a socket created outside and passed in")."""
    pol = c.policy(["127.0.0.1:9"])
    with Rt4Parent(c, "rt4-acc") as parent:
        fresh = rt4_create(c, parent, "fresh", pol)
        plain = Sandbox(c, pol, "plain", parent=parent)
        plain.__enter__()
        for cg, want in ((fresh, (0, 1)), (plain.cg, (1, 0))):
            fd, peer = rt4_accept_outside(c, cg)
            walked0, skipped0 = rf_detach_walks(c)
            c.ctl_ok("detach", "--cgroup", cg)
            walked1, skipped1 = rf_detach_walks(c)
            check((walked1 - walked0, skipped1 - skipped0) == want,
                  "%s: detach walks +%d, skips +%d (want %r)" %
                  (cg, walked1 - walked0, skipped1 - skipped0, want))
            acc = socket.socket(fileno=os.dup(fd))
            try:
                acc.settimeout(2)
                acc.sendall(b"ping")
                check(peer.recv(4) == b"ping", "%s: the accepted connection carries nothing" % cg)
            finally:
                acc.close()
        plain.attached = False


RT4_FAMILIES = r"""
import errno, socket
def err(fn):
    try:
        fn().close()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
fd = libc.syscall(425, 1, params)  # io_uring_setup: IORING_OP_SOCKET would follow
uring = "ok" if fd >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
print(uring, err(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)),
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
    would say EAFNOSUPPORT); io_uring (whose IORING_OP_SOCKET seccomp would
    not see) is refused under both; the OCI profile (`seccomp-profile`, for
    other clients of "create") refuses AF_SMC as well. Twin: a policy naming "netlink" gets its
    AF_NETLINK socket in the same script, and plain TCP works under both."""
    narrow = c.policy(["127.0.0.1:9"])
    wide = c.policy(["127.0.0.1:9"], sockets=["netlink"])
    r = adv_run(c, narrow, RUN_PY, "-c", RT4_FAMILIES)
    check(r.returncode == 0, "run (narrow): %d %r" % (r.returncode, r.stderr[-300:]))
    got = r.stdout.split()
    check(len(got) == 5 and got[:3] == ["EPERM", "EPERM", "EPERM"] and got[3] != "ok" and
          got[4] == "ok",
          "a policy without netlink: io_uring_setup, netlink, AF_SMC, IPPROTO_SMC, TCP = %r "
          "(want EPERM EPERM EPERM <refused> ok)" % got)
    r = adv_run(c, wide, RUN_PY, "-c", RT4_FAMILIES)
    check(r.returncode == 0, "run (wide): %d %r" % (r.returncode, r.stderr[-300:]))
    got = r.stdout.split()
    check(len(got) == 5 and got[0] == "EPERM" and got[1] == "ok" and got[2] == "EPERM" and
          got[4] == "ok",
          "twin: a policy naming netlink: io_uring_setup, netlink, AF_SMC, IPPROTO_SMC, TCP = "
          "%r (want EPERM ok EPERM * ok)" % got)
    # The OCI profile, for clients other than run that ask "create", refuses AF_SMC too.
    prof = json.loads(c.ctl_ok("seccomp-profile", "--policy", wide).stdout)
    check(any("socket" in r.get("names", []) and r.get("action") == "SCMP_ACT_ERRNO" and
              {"index": 0, "value": 43, "op": "SCMP_CMP_EQ"} in (r.get("args") or [])
              for r in prof.get("syscalls", [])), "the OCI profile does not refuse AF_SMC")


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
    in one batch the second renames over the first's pending file,
    pending_forget), and a
    detach are on the commit queue, right after the first reply; meanwhile a
    hand-truncated state file of another sandbox is planted. After the
    restart every acknowledged update refuses b and allows a, an
    acknowledged detach allows nothing, no sandbox reaches c (never
    allowed), and the truncated one is held under deny-all. Twin: before
    the burst every sandbox reached a and b; adopted untouched sandboxes
    still reach a."""
    a, b, cc = c.tcp("rt4-a"), c.tcp("rt4-b"), c.tcp("rt4-c")
    wide = c.policy(["127.0.0.1:%d" % a.port, "127.0.0.1:%d" % b.port])
    with Rt4Parent(c, "rt4-burst") as parent:
        rt4_burst_body(c, parent, a, b, cc, wide)


def rt4_burst_body(c, parent, a, b, cc, wide):
    sbs = [Sandbox(c, wide, "upd", parent=parent) for _ in range(RT4_BURST)]
    for sb in sbs:
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


def rt4_tracer_pid(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("TracerPid:"):
                return int(line.split()[1])
    return 0


@test
def redteam4_kill_between_rename_and_sync_of_update(c):
    """The worst moment, made certain: egressd's fdatasync is held 3 s
    (strace inject delay_enter) while an update narrowing {a, b} to {a} has
    its state file renamed into place and its reply not sent; then SIGKILL.
    No reply may have said ok (the reply follows the sync); after the
    restart the sandbox is adopted, not held, under the policy its file
    names (old or new, the kernel agreeing): if the new one, b is refused;
    never a peer neither policy allowed. Twin: a, and b before the update."""
    strace = shutil.which("strace")
    check(strace, "strace is missing (tools/install-deps installs it)")
    a, b, cc = c.tcp("rt4-sa"), c.tcp("rt4-sb"), c.tcp("rt4-sc")
    wide = c.policy(["127.0.0.1:%d" % a.port, "127.0.0.1:%d" % b.port])
    narrow = json.load(open(c.policy(["127.0.0.1:%d" % a.port])))
    with Rt4Parent(c, "rt4-sync") as parent:
        rt4_sync_body(c, parent, strace, a, b, cc, wide, narrow)


def rt4_sync_body(c, parent, strace, a, b, cc, wide, narrow):
    sb = Sandbox(c, wide, "sb", parent=parent)
    sb.__enter__()
    sb.allowed("tcp", "127.0.0.1", b.port)
    path = os.path.join(c.state, "sandboxes", "%d.json" % sandbox_id(c, sb))
    before = open(path).read()
    pid = c.daemon.proc.pid
    tr = subprocess.Popen([strace, "-qq", "-f", "-e", "trace=fdatasync,fsync", "-e",
                           "inject=fdatasync,fsync:delay_enter=3000000", "-o", "/dev/null",
                           "-p", str(pid)], stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    CLEANUP.push("rt4 strace", lambda: tr.poll() is None and (tr.kill(), tr.wait(5)))
    reply = {}
    try:
        check(wait_until(lambda: rt4_tracer_pid(pid) == tr.pid, 10),
              "strace did not attach to egressd")

        def send():
            try:
                reply["r"] = ctl_request(c.sock, {"op": "update", "cgroup": sb.cg,
                                                  "policy": narrow}, timeout=30)
            except (OSError, ValueError) as e:
                reply["e"] = e

        t = threading.Thread(target=send, daemon=True)
        t.start()
        # Every sync egressd makes is held 3 s, and the update may wait
        # behind a billing export's or the audit log's (one a second here).
        renamed = wait_until(lambda: open(path).read() != before, 20, 0.005)
        early = dict(reply)
        c.daemon.kill9()
        t.join(30)
    finally:
        if tr.poll() is None:
            tr.kill()
        tr.wait(10)
        c.ensure_daemon()
    check(renamed, "the update's state file was never renamed into place")
    check(not (early.get("r") or {}).get("ok"),
          "the update was acknowledged while its state file was not synced: %r" % early)
    with open(path) as f:
        on_disk = json.loads(f.read())
    new = json.dumps(on_disk).find(narrow["execution_id"]) >= 0
    log("after the kill the state file names the %s policy" % ("new" if new else "old"))
    listed = c.find_sandbox(sb.cg)
    check(listed is not None and listed.get("state", "attached") not in ("held", "tampered"),
          "the sandbox is not adopted after the kill: %r" % listed)
    sb.denied("tcp", "127.0.0.1", cc.port)
    sb.allowed("tcp", "127.0.0.1", a.port)
    if new:
        sb.denied("tcp", "127.0.0.1", b.port)
    else:
        sb.allowed("tcp", "127.0.0.1", b.port)


# --- 5. DNS answers judged again after an update ----------------------------------------

RT4_SLOW_S = 0.4
RT4_SLOW_ADDR = "127.0.0.32"   # slow.test's (and wide.test's) address
RT4_KEEP_ADDR = "127.0.0.33"   # keep.test's
RT4_SLACK_S = 0.1
# The policy's denial: NXDOMAIN for a dropped name, REFUSED for a dropped qtype.
NOERROR, NXDOMAIN, REFUSED = 0, 3, 5


def rt4_answer(q):
    """The reply to query q: A queries get RT4_KEEP_ADDR for keep.test and
    RT4_SLOW_ADDR for any other name (TTL 60 s: learned for the whole test),
    other types no record."""
    end = q.index(b"\0", 12) + 5
    qtype = struct.unpack(">H", q[end - 4:end - 2])[0]
    addr = RT4_KEEP_ADDR if b"\x04keep\x04test\x00" in q[12:end] else RT4_SLOW_ADDR
    if qtype == 1:
        return (q[:2] + struct.pack(">HHHHH", 0x8180, 1, 1, 0, 0) + q[12:end] +
                struct.pack(">HHHIH", 0xc00c, 1, 1, 60, 4) + socket.inet_aton(addr))
    return q[:2] + struct.pack(">HHHHH", 0x8180, 1, 0, 0, 0) + q[12:end]


class Rt4SlowUpstream:
    """egressd's upstream itself, on UDP and TCP: every answer RT4_SLOW_S late
    (TCP: pipelined queries on one connection answered in turn)."""

    def __init__(self):
        for _ in range(20):
            self.port = free_udp_tcp_port("127.0.0.1")
            try:
                self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                self.udp.bind(("127.0.0.1", self.port))
                self.tcp = socket.socket()
                self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                self.tcp.bind(("127.0.0.1", self.port))
                self.tcp.listen(64)
                break
            except OSError:
                self.udp.close()
                continue
        self.stop_ev = threading.Event()
        self.due = []      # (time, send function)
        self.lock = threading.Lock()
        self.th = threading.Thread(target=self.loop, daemon=True)
        self.th.start()

    def later(self, fn):
        with self.lock:
            self.due.append((time.monotonic() + RT4_SLOW_S, fn))

    def loop(self):
        conns = {}
        while not self.stop_ev.is_set():
            r, _, _ = select.select([self.udp, self.tcp] + list(conns), [], [], 0.01)
            for s in r:
                try:
                    if s is self.udp:
                        q, peer = s.recvfrom(4096)
                        if len(q) > 12:
                            rep = rt4_answer(q)
                            self.later(lambda rep=rep, peer=peer: self.udp.sendto(rep, peer))
                    elif s is self.tcp:
                        conn, _ = s.accept()
                        conns[conn] = b""
                    else:
                        d = s.recv(65536)
                        if not d:
                            del conns[s]
                            s.close()
                            continue
                        buf = conns[s] + d
                        while len(buf) >= 2 and len(buf) >= 2 + struct.unpack(">H", buf[:2])[0]:
                            n = struct.unpack(">H", buf[:2])[0]
                            rep = rt4_answer(buf[2:2 + n])
                            buf = buf[2 + n:]
                            self.later(lambda rep=rep, s=s: s.sendall(
                                struct.pack(">H", len(rep)) + rep))
                        conns[s] = buf
                except (OSError, ValueError):
                    pass
            now = time.monotonic()
            with self.lock:
                ready = [d for d in self.due if d[0] <= now]
                self.due = [d for d in self.due if d[0] > now]
            for _, fn in ready:
                try:
                    fn()
                except OSError:
                    pass
        for s in conns:
            s.close()

    def stop(self):
        self.stop_ev.set()
        self.th.join(5)
        self.udp.close()
        self.tcp.close()


def rt4_with_slow_upstream(c, fn):
    need_dnsmasq(c)
    up = Rt4SlowUpstream()
    saved = c.dns_args
    c.dns_args = ["--dns-upstream", "127.0.0.1:%d" % up.port, "--dns-min-ttl", str(DNS_MIN_TTL)]
    try:
        restart_daemon(c, list(c.daemon.extra_args))
        return fn()
    finally:
        c.dns_args = saved
        try:
            restart_daemon(c, list(c.daemon.extra_args))
        finally:
            up.stop()


def rt4_dns_policy(c, names, types=None, hosts=()):
    """names to resolve; hosts: "name:port" outbound entries (their answers
    are learned with that port)."""
    net = dict(DNS_REBIND_LO, dns_allow=list(names))
    if types is not None:
        net["dns_types"] = list(types)
    return c.policy(list(hosts), extra_network=net)


def rt4_judge(qs, drop, keep, t0, t1, what, denied=REFUSED):
    """drop: (name, qtype) the update refused; keep: the one it kept. Over
    TCP too the connection to the proxy survives the update
    (test_redteam4_fixed.py), so every query in flight gets its answer."""
    gone = [q for q in qs if (q["name"], q["qtype"]) == drop]
    kept = [q for q in qs if (q["name"], q["qtype"]) == keep]
    check(len(gone) > 20 and len(kept) > 20, "%s: the stream sent too little" % what)
    check(any(q["rcode"] == NOERROR and q["got"] < t0 for q in gone if q["got"]),
          "%s: %s never resolved before the update (proves nothing)" % (what, drop))
    late = [q for q in gone if q["rcode"] == NOERROR and q["got"] > t1 + RT4_SLACK_S]
    check(not late, "%s: %d NOERROR for %s after the update's reply, the last %.0f ms after: "
          "%r" % (what, len(late), drop, (max(q["got"] for q in late) - t1) * 1000
                  if late else 0, late[:2]))
    inflight = [q for q in gone if q["sent"] < t0 and (q["got"] is None or
                                                       q["got"] > t1 + RT4_SLACK_S)]
    check(inflight, "%s: nothing of %s in flight at the update" % (what, drop))
    check(all(q["rcode"] == denied for q in inflight),
          "%s: answers in flight at the update not denied (rcode %d): %r" %
          (what, denied, [q for q in inflight if q["rcode"] != denied][:3]))
    bad = [q for q in kept if q["rcode"] != NOERROR]
    check(not bad, "%s: twin %s failed %d times: %r" % (what, keep, len(bad), bad[:3]))


@test
def redteam4_dns_narrowed_in_flight_qtype_tcp_reattach(c):
    """The attacks, queries kept in flight by a 400 ms upstream: (1) over
    UDP, the update drops a qtype (A) rather than a name; (2) over one TCP
    connection with pipelined queries, the update drops the name; (3) the
    cgroup is detached and attached again with a policy without the name.
    No NOERROR for what was dropped after the reply; what was in flight is
    REFUSED (after the detach, never answered); nothing refused is
    learned (over TCP and after the re-attach, a connect to the dropped
    name's address, reachable before, is EPERM). Twins: the kept name/qtype
    answers throughout and its address is reachable; a widened policy (a
    name added) resolves the new name."""
    slow_srv = c.tcp("rt4-slow", host=RT4_SLOW_ADDR)
    keep_srv = c.tcp("rt4-keep", host=RT4_KEEP_ADDR)

    def body():
        out = {}
        with Sandbox(c, rt4_dns_policy(c, ["slow.test", "keep.test"], ["A", "AAAA"]),
                     "rt4-dnsq") as sb:
            p = dns_stream_start(sb.cg, "udp", ["slow.test:A", "slow.test:AAAA"])
            time.sleep(1.0)
            t0 = time.monotonic()
            sb.update(rt4_dns_policy(c, ["slow.test", "keep.test"], ["AAAA"]))
            t1 = time.monotonic()
            out["qtype"] = (dns_stream_end(p)[0], t0, t1)
            # Widened: a name added resolves at once.
            sb.update(rt4_dns_policy(c, ["slow.test", "keep.test", "wide.test"], ["A"]))
            dns_ok(c, sb, "wide.test", want=RT4_SLOW_ADDR)
        hosts = ["slow.test:%d" % slow_srv.port, "keep.test:%d" % keep_srv.port]
        with Sandbox(c, rt4_dns_policy(c, [], hosts=hosts), "rt4-dnst") as sb:
            p = dns_stream_start(sb.cg, "tcp", ["slow.test:A", "keep.test:A"], interval=0.03)
            time.sleep(1.0)
            # Twin: what the answers taught the kernel before the update.
            sb.allowed("tcp", RT4_SLOW_ADDR, slow_srv.port)
            t0 = time.monotonic()
            sb.update(rt4_dns_policy(c, [], hosts=hosts[1:]))
            t1 = time.monotonic()
            qs, closed = dns_stream_end(p)
            out["tcp"] = (qs, t0, t1, closed)
            # The answers in flight taught nothing: the dropped name's address
            # stays refused; the kept one's is reachable.
            sb.denied("tcp", RT4_SLOW_ADDR, slow_srv.port)
            sb.allowed("tcp", RT4_KEEP_ADDR, keep_srv.port)
            # Twin over a new connection: the kept name, and the dropped one refused.
            dns_ok(c, sb, "keep.test", mode="tcp", want=RT4_KEEP_ADDR)
            dns_refused(c, sb, "slow.test", mode="tcp")
        with Sandbox(c, rt4_dns_policy(c, [], hosts=hosts), "rt4-dnsr") as sb:
            p = dns_stream_start(sb.cg, "udp", ["slow.test:A", "keep.test:A"])
            time.sleep(1.0)
            sb.allowed("tcp", RT4_SLOW_ADDR, slow_srv.port)   # twin: learned before
            t0 = time.monotonic()
            sb.detach()
            t_det = time.monotonic()
            sb.policy = rt4_dns_policy(c, [], hosts=hosts[1:])
            sb.attach()
            t1 = time.monotonic()
            out["reattach"] = (dns_stream_end(p)[0], t0, t_det)
            sb.denied("tcp", RT4_SLOW_ADDR, slow_srv.port)
            # The stream's socket died with the detach's walk; new ones ask
            # under the new policy (the twin: the name kept resolves).
            dns_ok(c, sb, "keep.test", want=RT4_KEEP_ADDR)
            dns_refused(c, sb, "slow.test")
        return out

    out = rt4_with_slow_upstream(c, body)
    qs, t0, t1 = out["qtype"]
    rt4_judge(qs, ("slow.test", "A"), ("slow.test", "AAAA"), t0, t1, "UDP, qtype dropped")
    qs, t0, t1, closed = out["tcp"]
    check(not closed, "the update reset the sandbox's DNS TCP connection")
    rt4_judge(qs, ("slow.test", "A"), ("keep.test", "A"), t0, t1, "TCP pipelined, name dropped",
              NXDOMAIN)
    qs, t0, t1 = out["reattach"]
    gone = [q for q in qs if q["name"] == "slow.test"]
    # t1 here: the detach's reply; nothing for slow.test may come after it.
    late = [q for q in gone if q["rcode"] == NOERROR and q["got"] > t1 + RT4_SLACK_S]
    check(any(q["rcode"] == NOERROR and q["got"] < t0 for q in gone if q["got"]),
          "re-attach: slow.test never resolved before the detach (proves nothing)")
    check(not late, "re-attach: %d NOERROR for slow.test after the detach's reply: %r" %
          (len(late), late[:2]))
