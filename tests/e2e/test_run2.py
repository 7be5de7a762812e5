# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# e2e tests of `egressctl run`'s start (issue 10): egressd creates the run's
# cgroup itself (attach "create"), and only an attach of a cgroup its own
# mkdir made, under ancestors whose cgroup.procs only host root may write,
# skips the walk of the sockets the cgroup already had. What a hostile
# tool could try: get a cgroup it already holds sockets in attached without
# that walk (an existing path, a parent it can clone3 into); what a run
# must still be: confined from its first instruction.

import json
import os
import shutil
import socket
import subprocess
import sys

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


def run2_request(c, req):
    """One request on egressd's control socket; its reply (a dict)."""
    reply = ctl_request(c.sock, req)
    check(reply, "egressd answered %r with nothing" % req.get("op"))
    return reply


def run2_walks(c):
    """(attaches that walked the cgroup's sockets, attaches that skipped it)."""
    rep = run2_request(c, {"op": "status"})
    a = rep.get("attach")
    check(isinstance(a, dict), "status has no \"attach\" figures: %r" % sorted(rep))
    return a["socket_walks"], a["fresh_no_walk"]


def run2_listener(host="127.0.0.1"):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((host, 0))
    s.listen(16)
    CLEANUP.push("listener", s.close)
    return s.getsockname()[1]


def run2_holder(cg, port):
    """A HOLD_CONNECTION process in cg, connected to 127.0.0.1:port."""
    p = subprocess.Popen([sys.executable, "-c", HOLD_CONNECTION, "127.0.0.1", str(port)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=join_cgroup_fn(cg))
    CLEANUP.push("holder", lambda: (p.kill(), p.wait(5)) if p.poll() is None else None)
    line = p.stdout.readline().strip()
    check(line == "connected", "holder before attach: %r" % line)
    return p


def run2_fate(p):
    out, _ = p.communicate("go\n", timeout=PROBE_TIMEOUT_S)
    return out.strip()


def run2_attach_req(cg, pol, create=True):
    req = {"op": "attach", "cgroup": cg, "policy": json.load(open(pol))}
    if create:
        req["create"] = True
    return req


@test
def run2_create_of_existing_cgroup_is_refused_and_walked(c):
    """A tool that already holds a connection to a refused peer from a
    cgroup (root in it, racing its attach) must not get that cgroup
    attached without the look for its sockets: an attach with "create" of
    an existing path is refused (`exists`, field `create`, nothing
    attached, nothing removed), and the attach that follows walks and
    closes the refused connection. Twin: the allowed one, made the same
    way, stays up."""
    ok, bad = run2_listener(), run2_listener()
    pol = c.policy(["127.0.0.1:%d" % ok])
    cg = c.mkcgroup("run2-existing")
    CLEANUP.push("cgroup", cgroup_remove_tree, cg)
    try:
        hold_ok, hold_bad = run2_holder(cg, ok), run2_holder(cg, bad)
        walked0, fresh0 = run2_walks(c)
        rep = run2_request(c, run2_attach_req(cg, pol))
        check(rep.get("ok") is False and rep.get("code") == "exists" and
              rep.get("field") == "create",
              "attach with create of an existing cgroup: %r" % rep)
        check(c.find_sandbox(cg) is None, "a refused create left a sandbox")
        check(os.path.isdir(cg), "a refused create removed the existing cgroup")
        rep = run2_request(c, run2_attach_req(cg, pol, create=False))
        check(rep.get("ok") is True, "attach of the existing cgroup: %r" % rep)
        walked1, fresh1 = run2_walks(c)
        check(walked1 == walked0 + 1 and fresh1 == fresh0,
              "the existing cgroup's attach did not walk its sockets: walks %d -> %d, "
              "fresh %d -> %d" % (walked0, walked1, fresh0, fresh1))
        fate_bad, fate_ok = run2_fate(hold_bad), run2_fate(hold_ok)
        check(fate_bad.startswith("dead"), "the refused connection survived: %r" % fate_bad)
        check(fate_ok == "alive", "twin: the allowed connection was cut: %r" % fate_ok)
    finally:
        if c.find_sandbox(cg):
            c.ctl("detach", "--cgroup", cg)


@test
def run2_create_under_writable_parent_still_walks(c):
    """A parent whose cgroup.procs a non-root uid may write lets that uid
    clone3(CLONE_INTO_CGROUP) a process into a new child before its links
    exist (the kernel checks the common ancestor): egressd's cgroup there is
    not fresh and its attach walks. Twin: the same request under a parent
    only root may write skips the walk. Both get a cgroup that confines
    (a refused connect is EPERM, an allowed one connects), and a cgroup
    made for a failed attach is removed again."""
    ok, bad = run2_listener(), run2_listener()
    pol = c.policy(["127.0.0.1:%d" % ok])
    for name, delegated in (("run2-deleg", True), ("run2-rootonly", False)):
        parent = c.mkcgroup(name)
        CLEANUP.push("parent", cgroup_remove_tree, parent)
        if delegated:
            os.chown(os.path.join(parent, "cgroup.procs"), 65534, 65534)
        cg = os.path.join(parent, "s")
        walked0, fresh0 = run2_walks(c)
        rep = run2_request(c, run2_attach_req(cg, pol))
        check(rep.get("ok") is True, "%s: attach with create: %r" % (name, rep))
        try:
            walked1, fresh1 = run2_walks(c)
            want = (walked0 + 1, fresh0) if delegated else (walked0, fresh0 + 1)
            check((walked1, fresh1) == want,
                  "%s: walks %d -> %d, fresh %d -> %d; wanted %r" %
                  (name, walked0, walked1, fresh0, fresh1, want))
            check(os.stat(cg).st_uid == 0, "%s: the created cgroup is not root's" % name)
            c.denied(cg, "tcp", "127.0.0.1", bad)
            c.allowed(cg, "tcp", "127.0.0.1", ok)
        finally:
            c.ctl("detach", "--cgroup", cg)
    # Nothing half-applied: a bad policy leaves no directory behind.
    parent = c.mkcgroup("run2-badpol")
    CLEANUP.push("parent", cgroup_remove_tree, parent)
    cg = os.path.join(parent, "s")
    req = run2_attach_req(cg, pol)
    req["policy"]["network"]["outbound_allow"] = ["not a destination"]
    rep = run2_request(c, req)
    check(rep.get("ok") is False and rep.get("code") == "invalid_policy",
          "attach with create of a bad policy: %r" % rep)
    check(not os.path.exists(cg), "a failed attach left the cgroup it created")
    rep = run2_request(c, dict(run2_attach_req(cg, pol), create="yes"))
    check(rep.get("ok") is False and rep.get("code") == "bad_request" and
          rep.get("field") == "create", "create that is not a boolean: %r" % rep)
    out = "/tmp/egressd-run2-%s" % RUN_ID
    rep = run2_request(c, run2_attach_req(out, pol))
    check(rep.get("ok") is False and rep.get("code") == "bad_cgroup" and not os.path.exists(out),
          "create outside cgroup2: %r (exists: %s)" % (rep, os.path.exists(out)))


@test
def run2_run_is_fresh_and_confined(c):
    """`egressctl run` has egressd create its cgroup: its attach skips the
    socket walk (status "attach" "fresh_no_walk" counts it, "socket_walks"
    does not move) and the command is still confined from its first
    instruction: a refused connect is EPERM, an allowed one connects (the
    twin), and the run's cgroup is gone afterwards."""
    ok, bad = run2_listener(), run2_listener()
    pol = c.policy(["127.0.0.1:%d" % ok])
    walked0, fresh0 = run2_walks(c)
    r = adv_run_probe(c, pol, "tcp", "127.0.0.1", bad)
    check(r.rc == 1 and r.errno == "EPERM", "a refused connect under run: %s" % r)
    r = adv_run_probe(c, pol, "tcp", "127.0.0.1", ok)
    check(r.rc == 0, "twin: an allowed connect under run: %s" % r)
    walked1, fresh1 = run2_walks(c)
    check(walked1 == walked0 and fresh1 == fresh0 + 2,
          "two runs: walks %d -> %d, fresh %d -> %d" % (walked0, walked1, fresh0, fresh1))
    left = [sb for sb in c.list_json() if "/run-" in sb.get("cgroup", "")]
    check(not left, "a run's sandbox outlived it: %r" % left)


# A control client that sends one request (argv[2], JSON) and prints the reply.
RUN2_CLIENT = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall((sys.argv[2] + "\n").encode())
buf = b""
while not buf.endswith(b"\n"):
    d = s.recv(65536)
    if not d:
        break
    buf += d
print(buf.decode().strip(), flush=True)
"""


@test
def run2_member_cannot_create(c):
    """A non-root member of the control group (--group) must not get
    egressd (root) to make root's cgroup directories, nor a cgroup whose
    attach skips the socket walk: `create` is `forbidden` (field
    `create`), no directory appears, nothing is attached. Twin: the same
    member attaching a cgroup delegated to it, without `create`, works."""
    pol = c.policy(["127.0.0.1:9"])
    parent = c.mkcgroup("run2-member")
    CLEANUP.push("parent", cgroup_remove_tree, parent)
    mine = c.mkcgroup("run2-member-own")
    CLEANUP.push("delegated cgroup", cgroup_remove_tree, mine)
    os.chown(mine, 65534, 65534)
    cg = os.path.join(parent, "s")
    py = shutil.which("python3", path="/usr/bin:/bin")
    check(py is not None, "no /usr/bin/python3 for uid 65534")
    mode = os.stat(c.work).st_mode & 0o7777

    def nobody():
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)

    def as_nobody(req):
        r = subprocess.run([py, "-c", RUN2_CLIENT, c.sock, json.dumps(req)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=CTL_TIMEOUT_S, preexec_fn=nobody)
        check(r.stdout.strip(), "the client printed no reply: %s" % r.stderr.strip())
        return json.loads(r.stdout)
    try:
        c.daemon.stop()
        c.daemon.extra_args = ["--group", "nogroup"]
        c.daemon.start()
        os.chmod(c.work, 0o711)  # the socket's directory, for uid 65534
        rep = as_nobody(run2_attach_req(cg, pol))
        check(rep.get("ok") is False and rep.get("code") == "forbidden" and
              rep.get("field") == "create", "uid 65534 asked egressd to create: %r" % rep)
        check(not os.path.exists(cg), "a refused create made %s" % cg)
        check(c.find_sandbox(cg) is None, "a refused create attached something")
        rep = as_nobody(run2_attach_req(mine, pol, create=False))
        check(rep.get("ok") is True, "twin: uid 65534 cannot attach its own cgroup: %r" % rep)
    finally:
        os.chmod(c.work, mode)
        if c.find_sandbox(mine):
            c.ctl("detach", "--cgroup", mine)
        c.daemon.stop()
        c.daemon.extra_args = []
        c.daemon.start()
