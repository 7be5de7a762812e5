# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# e2e tests of `egressctl run`'s fast path, second round (issue 10):
# - the detach skips its sock_diag walk only for a sandbox egressd made fresh
#   (attach "create") whose cgroup/sock_create let no inet socket through
#   (egr_sock_counts). The attacker: a tool that hands a connected socket
#   out by SCM_RIGHTS and exits; that socket must die at the end of the run
#   (the walk ran). The twin: `run -- /bin/true` gets no walk.
# - the seccomp filter is built once by egressctl and installed by pid 1
#   and the command: both run under it (one filter each).

import errno as errno_mod
import json
import os
import socket
import subprocess
import threading

from harness import *  # noqa: F401,F403 (Ctx, check, adv_run, ...: harness/__init__.py)


def rf_status(c):
    reply = ctl_request(c.sock, {"op": "status"})
    check(reply and reply.get("ok"), "status: %r" % reply)
    return reply


def rf_detach_walks(c):
    """(detaches that walked the sandbox's sockets, detaches that skipped it)."""
    d = rf_status(c).get("detach")
    check(isinstance(d, dict), "status has no \"detach\" figures")
    return d["socket_walks"], d["no_socket_no_walk"]


def rf_errno(fn):
    try:
        fn()
        return None
    except OSError as e:
        return errno_mod.errorcode.get(e.errno, str(e.errno))


def rf_tcp_listener():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    CLEANUP.push("runfast listener", s.close)
    return s.getsockname()[1]


class FdCatcher:
    """A unix listener (made before the run) that takes one SCM_RIGHTS fd."""

    def __init__(self):
        self.name = "egr-runfast-%s-%d" % (RUN_ID, id(self))
        self.lis = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.lis.bind("\0" + self.name)
        self.lis.listen(1)
        self.lis.settimeout(PROBE_TIMEOUT_S)
        self.fds, self.err = [], None
        self.t = threading.Thread(target=self._take, daemon=True)
        self.t.start()
        CLEANUP.push("runfast catcher", self.close)

    def _take(self):
        try:
            conn, _ = self.lis.accept()
            with conn:
                _, fds, _, _ = socket.recv_fds(conn, 16, 1)
                self.fds.extend(fds)
        except OSError as e:
            self.err = e

    def close(self):
        self.lis.close()
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = []


RF_SMUGGLE_TCP = r"""
import socket, sys
est = socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=2)
u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
u.connect("\0" + sys.argv[1])
socket.send_fds(u, [b"fd"], [est.fileno()])
print("sent", flush=True)
"""

RF_SMUGGLE_UDP = r"""
import socket, sys
d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
d.connect(("127.0.0.1", int(sys.argv[2])))
d.send(b"inside")
u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
u.connect("\0" + sys.argv[1])
socket.send_fds(u, [b"fd"], [d.fileno()])
print("sent", flush=True)
"""

RF_REFUSED_SOCKET = r"""
import errno, socket
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM, 136).close()  # UDP-Lite
    print("made")
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))
"""

RF_SECCOMP_STATUS = r"""
import json
def fields(pid):
    out = {}
    with open("/proc/%s/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("Seccomp", "Seccomp_filters", "NoNewPrivs"):
                out[k] = v.strip()
    return out
print(json.dumps({"self": fields("self"), "init": fields(1)}))
"""


@test
def runfast_true_gets_no_detach_walk(c):
    """Twin: `run -- /bin/true` makes no inet socket, so its detach skips the
    walk (status "detach" "no_socket_no_walk" +1, "socket_walks" +0); its
    attach skipped its walk too (fresh)."""
    pol = c.policy(["127.0.0.1:9"])
    walked0, skipped0 = rf_detach_walks(c)
    r = adv_run(c, pol, "/bin/true")
    check(r.returncode == 0, "run -- /bin/true: %d %r" % (r.returncode, r.stderr[-300:]))
    walked1, skipped1 = rf_detach_walks(c)
    check((walked1 - walked0, skipped1 - skipped0) == (0, 1),
          "run -- /bin/true: detach walks %d -> %d, skipped %d -> %d (want 0, +1)" %
          (walked0, walked1, skipped0, skipped1))


@test
def runfast_passed_out_tcp_socket_dies(c):
    """The attacker: a tool connects to an allowed peer, hands the socket out
    by SCM_RIGHTS to a process outside (a unix listener made before the run)
    and exits. The sandbox made a socket, so its detach walks, and the
    handed-out connection is reset: a write on it fails and it cannot
    reconnect (deny-all). Twin: the same peer from a socket made outside."""
    peer = rf_tcp_listener()
    catch = FdCatcher()
    pol = c.policy(["127.0.0.1:%d" % peer])
    walked0, skipped0 = rf_detach_walks(c)
    r = adv_run(c, pol, RUN_PY, "-c", RF_SMUGGLE_TCP, catch.name, peer)
    catch.t.join(PROBE_TIMEOUT_S)
    check(r.returncode == 0 and "sent" in r.stdout,
          "the tool could not hand out its socket: %d %r %r" %
          (r.returncode, r.stdout, r.stderr[-300:]))
    check(len(catch.fds) == 1, "no descriptor received: %r" % catch.err)
    walked1, skipped1 = rf_detach_walks(c)
    check((walked1 - walked0, skipped1 - skipped0) == (1, 0),
          "a run that made a TCP socket: detach walks +%d, skipped +%d (want +1, +0)" %
          (walked1 - walked0, skipped1 - skipped0))
    est = socket.socket(fileno=os.dup(catch.fds[0]))
    try:
        est.settimeout(2)
        e = rf_errno(lambda: (est.send(b"x"), est.send(b"y"), est.recv(1)))
        check(e in ("ECONNABORTED", "ECONNRESET", "EPIPE"),
              "the handed-out connection survived the run's end: %s" % e)
        errs = [rf_errno(lambda: est.connect(("127.0.0.1", peer))) for _ in range(3)]
        check("EPERM" in errs and None not in errs,
              "the handed-out socket reconnects after the run: %r" % errs)
    finally:
        est.close()
    check(rf_errno(lambda: socket.create_connection(("127.0.0.1", peer), 2).close()) is None,
          "twin: the peer is unreachable from outside")


@test
def runfast_udp_only_tool_walks(c):
    """A tool that makes only a UDP socket (connected to an allowed peer) and
    hands it out: counted like any inet socket, so the detach walks, and the
    handed-out socket can no longer send (deny-all). Twin: the same send
    worked inside the run (the peer got "inside")."""
    peer = UdpServer("127.0.0.1")
    CLEANUP.push("runfast udp", peer.close)
    catch = FdCatcher()
    pol = c.policy(["udp/127.0.0.1:%d" % peer.port])
    walked0, skipped0 = rf_detach_walks(c)
    r = adv_run(c, pol, RUN_PY, "-c", RF_SMUGGLE_UDP, catch.name, peer.port)
    catch.t.join(PROBE_TIMEOUT_S)
    check(r.returncode == 0 and "sent" in r.stdout,
          "the tool could not hand out its UDP socket: %d %r %r" %
          (r.returncode, r.stdout, r.stderr[-300:]))
    check(len(catch.fds) == 1, "no descriptor received: %r" % catch.err)
    check(peer.wait_for(1, 3), "twin: the UDP send inside the run did not arrive")
    before = peer.received
    walked1, skipped1 = rf_detach_walks(c)
    check((walked1 - walked0, skipped1 - skipped0) == (1, 0),
          "a run that made a UDP socket: detach walks +%d, skipped +%d (want +1, +0)" %
          (walked1 - walked0, skipped1 - skipped0))
    d = socket.socket(fileno=os.dup(catch.fds[0]))
    try:
        errs = [rf_errno(lambda: d.send(b"outside")) for _ in range(3)]
        check(None not in errs, "the handed-out UDP socket still sends: %r" % errs)
    finally:
        d.close()
    check(not peer.wait_for(before + 1, 1), "a datagram from the handed-out socket arrived")


@test
def runfast_refused_socket_gets_no_walk(c):
    """A socket cgroup/sock_create refuses (UDP-Lite, which the policy does not
    name) never exists: it is not counted, and the detach may skip the walk
    (no_socket_no_walk +1). That the hook ran is the tool's EPERM."""
    pol = c.policy(["127.0.0.1:9"])
    walked0, skipped0 = rf_detach_walks(c)
    r = adv_run(c, pol, RUN_PY, "-c", RF_REFUSED_SOCKET)
    check(r.returncode == 0 and r.stdout.strip() == "EPERM",
          "UDP-Lite under run: %d %r %r (want EPERM)" % (r.returncode, r.stdout, r.stderr[-300:]))
    walked1, skipped1 = rf_detach_walks(c)
    check((walked1 - walked0, skipped1 - skipped0) == (0, 1),
          "a run whose only socket was refused: detach walks +%d, skipped +%d (want +0, +1)" %
          (walked1 - walked0, skipped1 - skipped0))


@test
def runfast_tool_and_pid1_under_the_filter(c):
    """The filter egressctl builds once is installed by the command and by the
    sandbox's pid 1: /proc/<pid>/status says Seccomp 2 (filter mode),
    NoNewPrivs 1 and one filter each (the command is forked before pid 1
    installs its own, so neither inherits the other's). A refused family
    fails in the command; pid 1 runs no code a test can drive, so its
    filter is shown by its status alone."""
    pol = c.policy(["127.0.0.1:9"])
    r = adv_run(c, pol, RUN_PY, "-c", RF_SECCOMP_STATUS)
    check(r.returncode == 0, "status under run: %d %r" % (r.returncode, r.stderr[-300:]))
    want = {"Seccomp": "2", "NoNewPrivs": "1", "Seccomp_filters": "1"}
    got = json.loads(r.stdout)
    for who in ("self", "init"):
        check(got.get(who) == want, "%s under run: %s (want %s)" % (who, got.get(who), want))
    r = adv_run_probe(c, pol, "packet-socket")
    check(r.rc != 0 and r.errno == "EPERM", "AF_PACKET under run: %s" % r)


@test
def runfast_run_does_not_load_libcrypto(c):
    """egressctl is not linked with libcrypto (user/egressctl/lazycrypto.c
    loads it for the audit commands): a running `egressctl run` has no
    libcrypto mapped. Twin: egressd, which links it, has (the check can see
    it), and `egressctl audit verify` still verifies egressd's log (HMAC
    through the same loading: tests/unit/test_lazycrypto.c)."""
    pol = c.policy(["127.0.0.1:9"])
    argv = [c.egressctl, "--socket", c.sock, "run", "--policy", pol, "--", "/bin/sleep", "1"]
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    CLEANUP.push("runfast run", lambda: p.poll() is None and p.kill())
    children = "/proc/%d/task/%d/children" % (p.pid, p.pid)
    try:
        # Once pid 1 exists, egressctl is past its exec and its loading.
        check(wait_until(lambda: open(children).read().strip() != "", 5),
              "egressctl run started no pid 1")
        with open("/proc/%d/maps" % p.pid) as f:
            maps = f.read()
    finally:
        out, err = p.communicate(timeout=CTL_TIMEOUT_S)
    check(p.returncode == 0, "run -- sleep 1: %d %r" % (p.returncode, err[-300:]))
    check("libcrypto" not in maps, "egressctl run has libcrypto mapped")
    check("libjansson" in maps, "the maps read are not egressctl's")
    with open("/proc/%d/maps" % c.daemon.proc.pid) as f:
        check("libcrypto" in f.read(), "twin: egressd has no libcrypto mapped")
    r = audit_verify(c, os.path.join(c.state, "audit.log"))
    check(r.returncode == 0 and r.stdout.startswith("ok:"),
          "audit verify without a linked libcrypto: %d %r %r" %
          (r.returncode, r.stdout, r.stderr[-300:]))


