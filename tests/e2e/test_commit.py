# Group commit (issue 10): egressd answers a request only once the audit
# records it wrote are on disk, and requests share that fsync.
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)

CM_ATTACHES = 6   # concurrent attaches of the crash test
CM_KILL_AFTER = 3  # kill -9 egressd once this many were acknowledged


def cm_request(sock, req, timeout=30):
    """One request on the control socket; the parsed reply, or None when
    the connection ended without one (egressd was killed)."""
    try:
        return ctl_request(sock, req, timeout=timeout) or None
    except (OSError, ValueError):  # refused, reset, or a reply cut short
        return None


def cm_attach_records(c, cg):
    return [r for r in obs_audit(c)
            if r.get("type") == "policy_change" and r.get("change") == "attach" and
            os.path.realpath(r.get("cgroup", "")) == os.path.realpath(cg)]


@test
def commit_crash_after_ack_keeps_record(c):
    """kill -9 egressd while concurrent attaches are in flight, right after
    some were acknowledged: after a restart every acknowledged attach has
    its audit record and its sandbox (state file adopted), and the chain
    verifies against the state file."""
    cgs = [c.mkcgroup("commit-crash") for _ in range(CM_ATTACHES)]
    pols = [json.load(open(c.policy(["127.0.0.1:9"]))) for _ in cgs]
    acked = []
    lock = threading.Lock()
    enough = threading.Event()

    def one(i):
        r = cm_request(c.sock, {"op": "attach", "cgroup": cgs[i], "policy": pols[i]})
        if r and r.get("ok"):
            with lock:
                acked.append(i)
                if len(acked) >= CM_KILL_AFTER:
                    enough.set()

    try:
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(cgs))]
        for t in threads:
            t.start()
        got = enough.wait(60)
        c.daemon.kill9()  # SIGKILL: no chance to flush anything at exit
        for t in threads:
            t.join(60)
        with lock:
            done = sorted(acked)
        check(got and len(done) >= CM_KILL_AFTER,
              "only %d of %d attaches were acknowledged before the kill" %
              (len(done), len(cgs)))
        c.daemon.start()
        for i in done:
            check(c.find_sandbox(cgs[i]) is not None,
                  "acknowledged attach of %s is not adopted after kill -9: %r" %
                  (cgs[i], c.list_json()))
            recs = cm_attach_records(c, cgs[i])
            check(len(recs) == 1, "acknowledged attach of %s has %d audit records: %r" %
                  (cgs[i], len(recs), recs))
            check(recs[0].get("execution_id") == pols[i]["execution_id"],
                  "audit record of %s names %r" % (cgs[i], recs[0].get("execution_id")))
        r = audit_verify(c, os.path.join(c.state, "audit.log"), "--state",
                         os.path.join(c.state, "audit.state"))
        check(r.returncode == 0 and r.stdout.startswith("ok:"),
              "audit chain does not verify after kill -9: %s %s" % (r.stdout, r.stderr))
        # The sanity twin: the sandboxes work as attached (allowed and denied).
        srv = c.tcp("commit-a")
        pol = c.policy(["127.0.0.1:%d" % srv.port])
        i = done[0]
        r = c.ctl("update", "--cgroup", cgs[i], "--policy", pol)
        check(r.returncode == 0, "update of an adopted sandbox: %s" % r.stderr.strip())
        c.allowed(cgs[i], "tcp", "127.0.0.1", srv.port)
        c.denied(cgs[i], "tcp", "127.0.0.1", c.tcp("commit-b").port)
    finally:
        c.ensure_daemon()
        for cg in cgs:
            try:
                c.ctl("detach", "--cgroup", cg)
            except Exception:
                pass
            cgroup_remove_tree(cg)


def cm_strace_events(path, audit_fd):
    """(kind, fd, text) of the traced calls in order: 'w' a write to the
    audit log, 's' an fsync of it, 'r' a reply sent to a client."""
    ev = []
    call = re.compile(r"^\d+\s+(?:<\.\.\. )?(write|fsync|fdatasync|sendto)\((\d+)(.*)$")
    with open(path) as f:
        for line in f:
            m = call.match(line.strip())
            if not m:
                continue
            name, fd, rest = m.group(1), int(m.group(2)), m.group(3)
            if name == "write" and fd == audit_fd:
                ev.append(("w", fd, rest))
            elif name in ("fsync", "fdatasync") and fd == audit_fd:
                ev.append(("s", fd, rest))
            elif name == "sendto" and rest.startswith(', "{\\"ok\\":true,\\"sandbox\\"'):
                ev.append(("r", fd, rest))
    return ev


@test
def commit_reply_follows_fsync(c):
    """Watched at the system-call level (strace on egressd): no attach or
    detach reply leaves egressd while an audit record written before it is
    not yet fsynced."""
    strace = shutil.which("strace")
    if not strace:
        raise TestFailure("strace is missing (tools/install-deps installs it)")
    pid = c.daemon.proc.pid
    log_path = os.path.realpath(os.path.join(c.state, "audit.log"))
    audit_fd = fd_open_on(pid, log_path)
    check(audit_fd is not None, "egressd has no fd open on %s" % log_path)
    out = os.path.join(c.work, "commit-strace-%d.txt" % pid)
    tr = subprocess.Popen([strace, "-f", "-qq", "-e", "trace=write,fsync,fdatasync,sendto",
                           "-s", "40", "-o", out, "-p", str(pid)],
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    cgs = []
    try:
        # strace prints nothing until attached: wait for a traced status.
        def traced():
            c.ctl("status")
            return os.path.exists(out) and os.path.getsize(out) > 0
        check(wait_until(traced, 20, 0.2), "strace did not attach to egressd")
        for i in range(3):
            cg = c.mkcgroup("commit-order")
            cgs.append(cg)
            c.ctl_ok("attach", "--cgroup", cg, "--policy", c.policy(["127.0.0.1:9"]))
            c.ctl_ok("detach", "--cgroup", cg)
    finally:
        tr.terminate()
        tr.wait(30)
        for cg in cgs:
            cgroup_remove_tree(cg)
    ev = cm_strace_events(out, audit_fd)
    writes = sum(1 for e in ev if e[0] == "w")
    replies = sum(1 for e in ev if e[0] == "r")
    # Not vacuous: six replies, each after at least one record.
    check(writes >= 6 and replies >= 6, "traced %d audit writes and %d replies, expected >= 6 "
          "each (trace in %s)" % (writes, replies, out))
    unsynced = False
    for kind, fd, rest in ev:
        if kind == "w":
            unsynced = True
        elif kind == "s":
            unsynced = False
        elif unsynced:
            raise TestFailure("a reply went out before the audit record written before it "
                              "was fsynced: sendto(%d%s (trace in %s)" % (fd, rest[:80], out))
