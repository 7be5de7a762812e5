# Sandboxes whose cgroup or launcher goes away (issue 14): egressd notices
# within a second and detaches them as a detach would, audit record included.
# Run by run.py (harness.runner).

import glob
import json
import os
import shutil
import subprocess
import sys
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


import re

# A control client that attaches a cgroup naming `launcher_pid` (argv[3]:
# "self" = its own pid, else that number), prints the reply, then waits for
# a line on stdin (or its end) and exits without detaching.
LT_CLIENT = r"""
import json, os, socket, sys
sock, cg, who, pol = sys.argv[1:5]
req = {"op": "attach", "cgroup": cg, "policy": json.load(open(pol)),
       "launcher_pid": os.getpid() if who == "self" else int(who)}
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sock)
s.sendall((json.dumps(req) + "\n").encode())
buf = b""
while not buf.endswith(b"\n"):
    d = s.recv(65536)
    if not d:
        break
    buf += d
s.close()
print(buf.decode().strip(), flush=True)
sys.stdin.readline()
"""

# The interpreter of commands under `run`: one every uid can execute (the
# test's own may be under /root).
LT_PY = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable

# Runs long under `egressctl run`: says it is ready, then sleeps.
LT_VICTIM = r"""
import os, time
print("ready", flush=True)
end = time.monotonic() + 60
while time.monotonic() < end:
    time.sleep(0.1)
os._exit(3)
"""


def lt_execution(c, pol, timeout=3):
    """The audit record of the execution of policy file pol (None: none yet)."""
    eid = json.load(open(pol))["execution_id"]
    found = []

    def look():
        found[:] = [r for r in obs_audit(c)
                    if r.get("type") == "execution" and r.get("execution_id") == eid]
        return found
    wait_until(look, timeout)
    return found[-1] if found else None


def lt_parent(c):
    p = c.mkcgroup("ltparent")
    CLEANUP.push("lifetime run parent", cgroup_remove_tree, p)
    return p


def lt_mine(c, parent):
    return [sb for sb in c.list_json()
            if os.path.realpath(sb.get("cgroup", "")).startswith(parent + "/")]


def lt_start_run(c, pol, parent):
    """egressctl run of LT_VICTIM under parent; returns (Popen, run cgroup, host pids in its cmd cgroup)."""
    p = subprocess.Popen([c.egressctl, "--socket", c.sock, "run", "--policy", pol,
                          "--cgroup-parent", parent, "--", LT_PY, "-c", LT_VICTIM],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    CLEANUP.push("lifetime run", lambda: p.poll() is None and (p.kill(), p.wait(10)))
    check(p.stdout.readline().startswith("ready"),
          "the command did not start: %s" % (p.poll() is not None and p.stderr.read()))
    runs = glob.glob(os.path.join(parent, "run-*"))
    check(len(runs) == 1, "not one run cgroup under %s: %r" % (parent, runs))
    procs = []
    wait_until(lambda: procs.extend(open(os.path.join(runs[0], "cmd", "cgroup.procs"))
                                    .read().split()) or procs, 5)
    check(procs, "no process in %s/cmd" % runs[0])
    return p, runs[0], [int(x) for x in procs]


def lt_client(c, cg, who, pol, preexec_fn=None, python=sys.executable):
    """LT_CLIENT attaching cg; returns (Popen, its reply)."""
    q = subprocess.Popen([python, "-c", LT_CLIENT, c.sock, cg, who, pol],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         preexec_fn=preexec_fn)
    CLEANUP.push("client", lambda: q.poll() is None and (q.kill(), q.wait(5)))
    line = q.stdout.readline()
    check(line.strip(), "the client printed no reply")
    return q, json.loads(line)


def lt_alive(pid):
    """Running (not a zombie) on the host."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@test
def lifetime_cgroup_removed_is_detached(c):
    # rmdir of an attached sandbox's cgroup (an OCI runtime without poststop,
    # an operator's cleanup): egressd detaches it within a second or two,
    # audit record "cgroup gone". Twin: an attached live cgroup stays.
    a = c.tcp("a")
    pol_gone, pol_live = c.policy(["127.0.0.1:%d" % a.port]), c.policy(["127.0.0.1:%d" % a.port])
    with Sandbox(c, pol_gone, "ltgone") as gone, Sandbox(c, pol_live, "ltlive") as live:
        gone.allowed("tcp", "127.0.0.1", a.port)
        live.allowed("tcp", "127.0.0.1", a.port)
        check(c.find_sandbox(gone.cg) is not None, "twin: the sandbox is not listed")
        os.rmdir(gone.cg)
        t0 = time.monotonic()
        check(wait_until(lambda: c.find_sandbox(gone.cg) is None, 3),
              "the sandbox of the removed cgroup %s is still listed" % gone.cg)
        log("removed cgroup noticed after %.2f s" % (time.monotonic() - t0))
        gone.attached = False
        rec = lt_execution(c, pol_gone)
        check(rec is not None, "no execution audit record for the removed cgroup")
        check(rec.get("status") == "cgroup gone", "audit status %r, expected \"cgroup gone\"" %
              rec.get("status"))
        # The twin: two more ticks, still attached and still confining.
        time.sleep(2)
        check(c.find_sandbox(live.cg) is not None, "twin: the live cgroup's sandbox went")
        live.allowed("tcp", "127.0.0.1", a.port)
        live.denied("tcp", "127.0.0.1", c.tcp("b").port)
        check(lt_execution(c, pol_live, timeout=0) is None,
              "twin: the live sandbox has an execution record")


@test
def lifetime_run_killed_launcher_cleaned_up(c):
    # SIGKILL of `egressctl run` (a runtime's timeout): the command dies, the
    # sandbox is detached with audit "launcher gone" and its cgroup removed.
    # Twin: a run that ends normally is audited "exited:N".
    a = c.tcp("a")
    parent = lt_parent(c)
    pol = c.policy(["127.0.0.1:%d" % a.port])
    r = c.ctl("run", "--policy", pol, "--cgroup-parent", parent, "--", "/bin/sh", "-c", "exit 3")
    check(r.returncode == 3, "twin: run `exit 3`: exit %d %r" % (r.returncode, r.stderr))
    rec = lt_execution(c, pol)
    check(rec is not None and rec.get("status") == "exited:3",
          "twin: audit record of a normal run: %r" % rec)

    pol = c.policy(["127.0.0.1:%d" % a.port])
    p, cg, procs = lt_start_run(c, pol, parent)
    try:
        sbs = lt_mine(c, parent)
        check(len(sbs) == 1 and sbs[0].get("launcher_pid") == p.pid,
              "the run's sandbox is not tied to egressctl (pid %d): %r" % (p.pid, sbs))
        p.kill()
        p.wait(10)
        t0 = time.monotonic()
        check(wait_until(lambda: not any(lt_alive(x) for x in procs), 5),
              "the command %r outlived egressctl run" % procs)
        check(wait_until(lambda: not lt_mine(c, parent), 3),
              "the killed run's sandbox is still attached: %r" % lt_mine(c, parent))
        log("killed launcher noticed after %.2f s" % (time.monotonic() - t0))
        rec = lt_execution(c, pol)
        check(rec is not None and rec.get("status") == "launcher gone",
              "audit record of the killed run: %r" % rec)
        check(wait_until(lambda: not os.path.exists(cg), 5),
              "the killed run's cgroup %s is still there" % cg)
    finally:
        for sb in lt_mine(c, parent):
            c.ctl("detach", "--id", str(sb["id"]))


@test
def lifetime_launcher_pid_must_be_the_peer(c):
    # A client cannot tie a sandbox to another process (which would kill the
    # cgroup when that one exits, or keep it alive past its own end). Twin:
    # naming itself works, and its exit ends the sandbox.
    a = c.tcp("a")
    pol = c.policy(["127.0.0.1:%d" % a.port])
    other = subprocess.Popen(["sleep", "30"])
    CLEANUP.push("sleep", lambda: other.poll() is None and (other.kill(), other.wait(5)))
    cg = c.mkcgroup("ltforge")
    CLEANUP.push("forge cgroup", cgroup_remove_tree, cg)

    def client(who):
        return lt_client(c, cg, who, pol)
    try:
        for who in (str(other.pid), str(os.getpid()), "1"):
            q, rep = client(who)
            q.stdin.close()
            q.wait(5)
            check(rep.get("ok") is False and rep.get("code") == "forbidden" and
                  rep.get("field") == "launcher_pid",
                  "attach naming pid %s as launcher was not refused: %r" % (who, rep))
            check(c.find_sandbox(cg) is None, "a refused attach left a sandbox: %s" % who)
        # A cgroup with processes in it is not a launcher's to kill.
        busy = subprocess.Popen(["sleep", "30"], preexec_fn=join_cgroup_fn(cg))
        CLEANUP.push("sleep", lambda: busy.poll() is None and (busy.kill(), busy.wait(5)))
        q, rep = client("self")
        q.stdin.close()
        q.wait(5)
        check(rep.get("ok") is False and rep.get("code") == "bad_cgroup",
              "a populated cgroup was tied to a launcher: %r" % rep)
        check(c.find_sandbox(cg) is None, "a refused attach left a sandbox (populated)")
        busy.kill()
        busy.wait(5)
        check(wait_until(lambda: "populated 0" in open(os.path.join(cg, "cgroup.events")).read(),
                         5), "the cgroup did not empty")
        q, rep = client("self")
        check(rep.get("ok") is True, "twin: attach naming itself refused: %r" % rep)
        sb = c.find_sandbox(cg)
        check(sb is not None and sb.get("launcher_pid") == q.pid,
              "twin: not tied to the client (pid %d): %r" % (q.pid, sb))
        time.sleep(1.5)
        check(c.find_sandbox(cg) is not None, "twin: the sandbox went while its launcher lives")
        q.stdin.close()
        q.wait(5)
        check(wait_until(lambda: c.find_sandbox(cg) is None, 3),
              "the sandbox outlived its launcher")
        rec = lt_execution(c, pol)
        check(rec is not None and rec.get("status") == "launcher gone", "audit record: %r" % rec)
        # Its cgroup was the launcher's: removed (it was empty).
        check(wait_until(lambda: not os.path.exists(cg), 5), "the cgroup %s is still there" % cg)
    finally:
        if c.find_sandbox(cg):
            c.ctl("detach", "--cgroup", cg)


@test
def lifetime_tie_survives_restart(c):
    # The tie is in the (authenticated) state file: an egressd restarted
    # while a run is active still ends it when the launcher is killed; a
    # launcher killed while egressd was down is handled at start.
    a = c.tcp("a")
    parent = lt_parent(c)
    pols = [c.policy(["127.0.0.1:%d" % a.port]) for _ in range(2)]
    p, cg, procs = lt_start_run(c, pols[0], parent)
    q, cg2, procs2 = None, None, None
    try:
        c.daemon.stop()
        c.daemon.start()
        sbs = [sb for sb in lt_mine(c, parent) if sb.get("launcher_pid") == p.pid]
        check(len(sbs) == 1, "after a restart the run's tie is lost: %r" % lt_mine(c, parent))
        time.sleep(1.5)
        check(len(lt_mine(c, parent)) == 1 and all(lt_alive(x) for x in procs),
              "twin: the adopted run was ended while its launcher lives")
        p.kill()
        p.wait(10)
        check(wait_until(lambda: not lt_mine(c, parent), 3),
              "after a restart, the killed run's sandbox is still attached")
        rec = lt_execution(c, pols[0])
        check(rec is not None and rec.get("status") == "launcher gone", "audit record: %r" % rec)
        check(wait_until(lambda: not os.path.exists(cg), 5), "the cgroup %s stayed" % cg)

        # Killed while egressd is down.
        q, cg2, procs2 = lt_start_run(c, pols[1], parent)
        c.daemon.stop()
        q.kill()
        q.wait(10)
        c.daemon.start()
        check(not lt_mine(c, parent), "a launcher gone while egressd was down: still attached")
        rec = lt_execution(c, pols[1])
        check(rec is not None and rec.get("status") == "launcher gone",
              "audit record (launcher gone while egressd was down): %r" % rec)
        check(wait_until(lambda: not os.path.exists(cg2), 5), "the cgroup %s stayed" % cg2)
    finally:
        c.ensure_daemon()
        for sb in lt_mine(c, parent):
            c.ctl("detach", "--id", str(sb["id"]))


@test
def lifetime_edited_launcher_in_state_not_trusted(c):
    # A hand-edited tie (another launcher pid in the state file, to keep a
    # run's sandbox alive past its end or have it killed at will) fails the
    # state file's MAC: held under deny-all with a state_tampered alert, the
    # run's command untouched. Twin: the unedited file is adopted with its tie.
    a = c.tcp("a")
    parent = lt_parent(c)
    pol = c.policy(["127.0.0.1:%d" % a.port])
    p, cg, procs = lt_start_run(c, pol, parent)
    try:
        sid = lt_mine(c, parent)[0]["id"]
        path = os.path.join(c.state, "sandboxes", "%d.json" % sid)
        c.daemon.stop()
        c.daemon.start()
        sbs = lt_mine(c, parent)
        check(len(sbs) == 1 and sbs[0].get("launcher_pid") == p.pid,
              "twin: the unedited tie was not adopted: %r" % sbs)
        c.daemon.stop()
        text = open(path).read()
        edited = re.sub(r'("launcher":\s*\{\s*"pid":\s*)\d+', r"\g<1>1", text)
        check(edited != text, "no launcher tie in the state file: %s" % text[:300])
        with open(path, "w") as f:
            f.write(edited)
        c.daemon.start()
        check(not lt_mine(c, parent), "an edited tie was adopted: %r" % lt_mine(c, parent))
        held = {h["id"]: h for h in json.loads(c.ctl_ok("list", "--held", "--json").stdout)}
        check(sid in held and held[sid].get("state") == "tampered",
              "the sandbox with an edited tie is not held as tampered: %r" % held)
        check(wait_until(lambda: obs_alerts(c, "state_tampered", sid), 3),
              "no state_tampered alert for sandbox %d" % sid)
        check(all(lt_alive(x) for x in procs), "the run's command was killed")
    finally:
        c.ensure_daemon()
        if p.poll() is None:
            p.kill()
            p.wait(10)
        for sb in lt_mine(c, parent):
            c.ctl("detach", "--id", str(sb["id"]))
        c.ctl("detach", "--cgroup", cg)


@test
def lifetime_member_cannot_tie_others_cgroup(c):
    # A non-root member of the control group (--group) must not get egressd
    # (root) to kill and remove a cgroup that is not its own by naming
    # itself launcher of it. Twin: a cgroup delegated to it (its uid owns it)
    # is tied, and ended when it exits.
    a = c.tcp("a")
    pol = c.policy(["127.0.0.1:%d" % a.port])
    mode = os.stat(c.work).st_mode & 0o7777
    theirs = c.mkcgroup("ltroot")
    CLEANUP.push("root cgroup", cgroup_remove_tree, theirs)
    mine = c.mkcgroup("ltdelegated")
    CLEANUP.push("delegated cgroup", cgroup_remove_tree, mine)
    os.chown(mine, 65534, 65534)
    os.chmod(pol, 0o644)

    # The test's own interpreter may be under /root: the system one for uid 65534.
    py = shutil.which("python3", path="/usr/bin:/bin")
    check(py is not None, "no /usr/bin/python3 for uid 65534")

    def nobody():
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
    try:
        c.daemon.stop()
        c.daemon.extra_args = ["--group", "nogroup"]
        c.daemon.start()
        os.chmod(c.work, 0o711)  # the socket's directory, for uid 65534
        q, rep = lt_client(c, theirs, "self", pol, nobody, py)
        q.stdin.close()
        q.wait(5)
        check(rep.get("ok") is False and rep.get("code") == "forbidden" and
              rep.get("field") == "launcher_pid",
              "uid 65534 tied root's cgroup to itself: %r" % rep)
        check(c.find_sandbox(theirs) is None, "a refused attach left a sandbox")
        q, rep = lt_client(c, mine, "self", pol, nobody, py)
        check(rep.get("ok") is True, "twin: uid 65534 cannot tie its own cgroup: %r" % rep)
        q.stdin.close()
        q.wait(5)
        check(wait_until(lambda: c.find_sandbox(mine) is None, 3),
              "twin: the delegated cgroup's sandbox outlived its launcher")
        rec = lt_execution(c, pol)
        check(rec is not None and rec.get("status") == "launcher gone", "audit record: %r" % rec)
        check(os.path.isdir(theirs), "root's cgroup was removed")
    finally:
        os.chmod(c.work, mode)
        c.daemon.stop()
        c.daemon.extra_args = []
        c.daemon.start()
        for cg in (theirs, mine):
            if c.find_sandbox(cg):
                c.ctl("detach", "--cgroup", cg)
