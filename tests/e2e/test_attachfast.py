# Attach p99 and the state files' group commit (issue 10): a sandbox's state
# file is in place before its links and durable before its reply, and
# requests served together share the state directory's fsync.
import json
import os
import re
import shutil
import subprocess
import threading

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)

AF_BURST = 8  # concurrent attaches of the batch tests


def af_request(sock, req, timeout=30):
    """One request on the control socket; the parsed reply, or None when
    the connection ended without one (egressd was killed)."""
    try:
        return ctl_request(sock, req, timeout=timeout) or None
    except (OSError, ValueError):  # refused, reset, or a reply cut short
        return None


def af_cgroup_progs(cg):
    """The BPF programs attached to cgroup cg itself (bpftool)."""
    r = subprocess.run(["bpftool", "-j", "cgroup", "show", cg], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, "bpftool cgroup show %s: %s" % (cg, r.stderr.strip()))
    return json.loads(r.stdout.strip() or "[]")  # nothing attached: an empty line


def af_attach_records(c, cg):
    return [r for r in obs_audit(c)
            if r.get("type") == "policy_change" and r.get("change") == "attach" and
            os.path.realpath(r.get("cgroup", "")) == os.path.realpath(cg)]


def af_burst(c, cgs, pols, on_reply=None):
    """Send one attach per cgroup at once, each on its own connection; the
    replies (None for one cut short), in cgs' order."""
    replies = [None] * len(cgs)

    def one(i):
        replies[i] = af_request(c.sock, {"op": "attach", "cgroup": cgs[i], "policy": pols[i]})
        if on_reply:
            on_reply(i, replies[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(cgs))]
    for t in threads:
        t.start()
    return threads, replies


@test
def attachfast_kill_mid_batch_acked_confined(c):
    """kill -9 egressd while a batch of concurrent attaches is in flight,
    right after the first reply: after a restart every acknowledged sandbox
    is confined (its refused connect fails, its allowed one works) with its
    one audit record in a chain that verifies; every unacknowledged one is
    either a confined sandbox or has no egressd program at all, never links
    that let a refused connect through."""
    srv_ok, srv_no = c.tcp("af-allowed"), c.tcp("af-refused")
    cgs = [c.mkcgroup("af-crash") for _ in range(AF_BURST)]
    pols = [json.load(open(c.policy(["127.0.0.1:%d" % srv_ok.port]))) for _ in cgs]
    acked = []
    lock = threading.Lock()
    first = threading.Event()

    def on_reply(i, r):
        if r and r.get("ok"):
            with lock:
                acked.append(i)
            first.set()

    sbdir = os.path.join(c.state, "sandboxes")
    before = set(os.listdir(sbdir))  # other tests' sandboxes and held cgroups

    def in_flight():
        """A state file written whose reply has not come: mid-batch."""
        n = sum(1 for f in os.listdir(sbdir) if f.endswith(".json") and f not in before)
        with lock:
            return bool(acked) and n > len(acked)

    try:
        threads, _ = af_burst(c, cgs, pols, on_reply)
        got = first.wait(60)
        # The worst point: after a reply, while another attach has its state
        # file in place and its links going in, before its batch's sync.
        mid = got and wait_until(in_flight, 5, 0.001)
        c.daemon.kill9()  # SIGKILL: nothing flushed at exit
        for t in threads:
            t.join(60)
        with lock:
            done = sorted(acked)
        check(got and done, "no attach of the burst was acknowledged before the kill")
        log("acknowledged before the kill: %d of %d; killed %s" %
            (len(done), len(cgs), "with an attach in flight past its state file" if mid else
             "after the first reply (no state file in flight seen)"))
        c.daemon.start()
        for i in range(len(cgs)):
            sb = c.find_sandbox(cgs[i])
            if i in done:
                check(sb is not None, "acknowledged attach of %s is not adopted after kill -9: "
                      "%r" % (cgs[i], c.list_json()))
                recs = af_attach_records(c, cgs[i])
                check(len(recs) == 1 and recs[0].get("execution_id") ==
                      pols[i]["execution_id"], "acknowledged attach of %s has audit records "
                      "%r" % (cgs[i], recs))
            if sb is not None:
                # Adopted (acknowledged or not): confined as its policy says.
                c.denied(cgs[i], "tcp", "127.0.0.1", srv_no.port)
                c.allowed(cgs[i], "tcp", "127.0.0.1", srv_ok.port)
            elif af_cgroup_progs(cgs[i]):
                # Links without a sandbox: held, and they must deny.
                c.denied(cgs[i], "tcp", "127.0.0.1", srv_no.port)
            else:
                # Not attached at all: nothing of egressd's is in its way
                # (the twin of the refusals above: the same connect works).
                c.allowed(cgs[i], "tcp", "127.0.0.1", srv_no.port)
        r = audit_verify(c, os.path.join(c.state, "audit.log"), "--state",
                         os.path.join(c.state, "audit.state"))
        check(r.returncode == 0 and r.stdout.startswith("ok:"),
              "audit chain does not verify after kill -9: %s %s" % (r.stdout, r.stderr))
    finally:
        c.ensure_daemon()
        for cg in cgs:
            try:
                c.ctl("detach", "--cgroup", cg)
            except Exception:
                pass
            cgroup_remove_tree(cg)


def af_fd(rest):
    """The fd argument of a traced call ("85) = 0", "85 <detached ...>"), or None."""
    m = re.match(r"(\d+)", rest)
    return int(m.group(1)) if m else None


def af_trace_order(path, sbdir_fd):
    """Check, over an strace of egressd, that no attach reply left while a
    state file renamed before it was not fdatasynced or its directory not
    fsynced. Returns (state files written, attach replies, directory fsyncs)."""
    call = re.compile(r"^\d+\s+(?:<\.\.\. )?(openat|rename|fdatasync|fsync|sendto|close)"
                      r"\((.*?)(?: <unfinished \.\.\.>)?$")
    tmp_fds, unsynced = {}, set()
    dir_dirty = False
    files = replies = dir_syncs = 0
    with open(path) as f:
        for line in f:
            m = call.match(line.strip())
            if not m:
                continue
            name, rest = m.group(1), m.group(2)
            if name == "openat" and "/sandboxes/" in rest and ".json.tmp" in rest:
                fm = re.search(r"\) = (\d+)$", rest)
                if fm:
                    tmp_fds[int(fm.group(1))] = rest
            elif name == "rename" and "/sandboxes/" in rest and rest.endswith("= 0"):
                files += 1
                dir_dirty = True
                unsynced.update(tmp_fds)  # the file just renamed is open on one of them
                tmp_fds.clear()
            elif name in ("fdatasync", "fsync"):
                fd = af_fd(rest)
                if fd == sbdir_fd:
                    dir_dirty = False
                    dir_syncs += 1
                unsynced.discard(fd)
            elif name == "close":
                tmp_fds.pop(af_fd(rest), None)
            elif name == "sendto" and '{\\"ok\\":true,\\"sandbox\\"' in rest[:40]:
                replies += 1
                if unsynced or dir_dirty:
                    raise TestFailure("an attach reply went out before its state file was "
                                      "durable (unsynced fds %r, directory %s): sendto(%s "
                                      "(trace in %s)" % (sorted(unsynced), "not fsynced" if
                                                         dir_dirty else "fsynced", rest[:80],
                                                         path))
    return files, replies, dir_syncs


@test
def attachfast_reply_after_state_sync_and_batch_shares(c):
    """Watched at the system-call level (strace on egressd): no attach reply
    leaves egressd before the state file it wrote is fdatasynced and the
    sandboxes directory fsynced, serial or in a burst; and the burst's
    attaches share directory fsyncs (fewer than one each)."""
    strace = shutil.which("strace")
    if not strace:
        raise TestFailure("strace is missing (tools/install-deps installs it)")
    pid = c.daemon.proc.pid
    sbdir = os.path.realpath(os.path.join(c.state, "sandboxes"))
    sbdir_fd = fd_open_on(pid, sbdir)
    check(sbdir_fd is not None, "egressd holds no fd on %s (no group commit of the state "
          "files)" % sbdir)
    out_serial = os.path.join(c.work, "af-strace-serial-%d.txt" % pid)
    out_burst = os.path.join(c.work, "af-strace-burst-%d.txt" % pid)
    trace = ["-f", "-qq", "-e", "trace=openat,rename,fdatasync,fsync,sendto,close", "-s", "200"]
    cgs = []

    def traced(out):
        def f():
            c.ctl("status")
            return os.path.exists(out) and os.path.getsize(out) > 0
        return f

    tr = None
    try:
        tr = subprocess.Popen([strace] + trace + ["-o", out_serial, "-p", str(pid)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
        check(wait_until(traced(out_serial), 20, 0.2), "strace did not attach to egressd")
        for _ in range(3):
            cg = c.mkcgroup("af-order")
            cgs.append(cg)
            c.ctl_ok("attach", "--cgroup", cg, "--policy", c.policy(["127.0.0.1:9"]))
        tr.terminate()
        tr.wait(30)
        tr = subprocess.Popen([strace] + trace + ["-o", out_burst, "-p", str(pid)],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
        check(wait_until(traced(out_burst), 20, 0.2), "strace did not attach to egressd")
        burst = [c.mkcgroup("af-burst") for _ in range(AF_BURST)]
        cgs += burst
        pols = [json.load(open(c.policy(["127.0.0.1:9"]))) for _ in burst]
        threads, replies = af_burst(c, burst, pols)
        for t in threads:
            t.join(60)
        check(all(r and r.get("ok") for r in replies), "burst attaches failed: %r" % replies)
        c.ctl("status")  # the last batch's syncs are in the trace before it ends
    finally:
        if tr:
            tr.terminate()
            tr.wait(30)
        for cg in cgs:
            c.ctl("detach", "--cgroup", cg)
            cgroup_remove_tree(cg)
    files, nrep, dsync = af_trace_order(out_serial, sbdir_fd)
    # Not vacuous: three replies, each after its own state file.
    check(files >= 3 and nrep >= 3, "serial: traced %d state files and %d replies, expected "
          ">= 3 each (trace in %s)" % (files, nrep, out_serial))
    files, nrep, dsync = af_trace_order(out_burst, sbdir_fd)
    check(files >= AF_BURST and nrep >= AF_BURST, "burst: traced %d state files and %d "
          "replies, expected >= %d (trace in %s)" % (files, nrep, AF_BURST, out_burst))
    check(1 <= dsync < AF_BURST, "burst: %d attaches took %d fsyncs of the state directory, "
          "expected fewer than one each (trace in %s)" % (AF_BURST, dsync, out_burst))
    log("burst of %d attaches: %d directory fsyncs" % (AF_BURST, dsync))
