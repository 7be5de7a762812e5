# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Red team 2 findings 2, 3, 4: hostile tools against the escape guard (bpf/escape.bpf.c,
# user/egressd/escape.c). Each test asserts the SECURE behaviour: it fails
# while the finding is open. It imports
# test_hostile_kernel.py's hk_* helpers.

import os
import signal
import sys
import subprocess
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)
from test_hostile_kernel import hk_need_guard, hk_root_procs, hk_wait_escape


def rt2_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


# sh: is this shell's cgroup v2 path (the 0:: line; the host is hybrid)
# still the sandbox's? Builtins only: no fork while it spins.
RT2_INSIDE = ("inside() { while read l; do case $l in 0::*%s*) return 0;; esac; done "
              "< /proc/self/cgroup; return 1; }; ")


def rt2_victim(c, cg, script, name):
    """sh running script in cgroup cg; its pid."""
    p = subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         preexec_fn=join_cgroup_fn(cg))
    CLEANUP.push(name, lambda: p.poll() is None and p.kill())
    return p


@test
def redteam2_moved_sibling_forks_first(c):
    """A sandboxed shell moves its sandboxed sibling B to the cgroup2 root
    (the shell is killed in the kernel; B is left to egressd). B
    forks without pause (children born inside exit at once): a child
    born after the move is born outside every sandbox with no home (B's was cleared by the
    move), egressd kills B only. Secure: nothing B left behind runs."""
    hk_need_guard(c)
    t = c.tcp("rt2-esc")
    # A race with egressd's kill: won in most runs; three tries.
    for attempt in range(3):
        with c.sandbox(["127.0.0.9:1"], name="rt2-fork") as sb:
            sid = sandbox_id(c, sb)
            base = os.path.basename(sb.cg)
            pidfile = os.path.join(c.work, "rt2-fork-child-%d" % attempt)
            # B forks without pause; a child that finds itself in the sandbox
            # exits at once, one born after B's move (homeless) lives on.
            b_script = (RT2_INSIDE % base + "while :; do (inside && exit 0; echo out > %s; "
                        "sleep 1.5; exec %s tcp 127.0.0.1 %d); done"
                        % (pidfile, c.netprobe, t.port))
            b = rt2_victim(c, sb.cg, b_script, "rt2 B")
            time.sleep(0.3)
            before = t.accepted
            mover = subprocess.run(["sh", "-c", "echo %d > %s" % (b.pid, hk_root_procs(c))],
                                   stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                   timeout=PROBE_TIMEOUT_S, preexec_fn=join_cgroup_fn(sb.cg))
            check(mover.returncode == -signal.SIGKILL, "the sandboxed mover lived: %r" % mover)
            hk_wait_escape(c, sid, lambda e: e.get("target_pid") == b.pid, "sibling")
            time.sleep(2.5)
            log("B alive %s, a child outside %s, reached %s" % (
                rt2_alive(b.pid), os.path.exists(pidfile), t.accepted > before))
            check(t.accepted == before, "the child of a moved-out sibling outlived egressd's kill "
                  "and connected to a denied destination (try %d)" % (attempt + 1))


@test
def redteam2_other_sandbox_moves_you_out(c):
    """A process in sandbox S2 moves a process of sandbox S1 to the cgroup2
    root. The guard's 'inside' test only asks whether the writer is in (or
    at home in) S1: a writer from another sandbox counts as an outsider
    (an administrator), so nobody is killed: the moved process runs
    unconfined. Two sandboxes that collude (or one tenant's two tools) so
    let one leave. Secure: the writer (sandboxed) and the moved process die."""
    hk_need_guard(c)
    t = c.tcp("rt2-esc")
    with c.sandbox(["127.0.0.9:1"], name="rt2-s1") as s1, \
            c.sandbox(["127.0.0.9:1"], name="rt2-s2") as s2:
        sid1 = sandbox_id(c, s1)
        base = os.path.basename(s1.cg)
        v_script = (RT2_INSIDE % base + "while inside; do sleep 0.05; done; "
                    "sleep 1; exec %s tcp 127.0.0.1 %d"
                    % (c.netprobe, t.port))
        v = rt2_victim(c, s1.cg, v_script, "rt2 V")
        time.sleep(0.3)
        before = t.accepted
        mover = subprocess.run(["sh", "-c", "echo %d > %s; echo moved" % (v.pid, hk_root_procs(c))],
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=PROBE_TIMEOUT_S, preexec_fn=join_cgroup_fn(s2.cg))
        e = hk_wait_escape(c, sid1, lambda e: e.get("target_pid") == v.pid, "cross-sandbox")
        time.sleep(2)
        log("writer rc %r, event %r, V alive %s" % (mover.returncode, e, rt2_alive(v.pid)))
        check(t.accepted == before, "a process moved out of S1 by a process of S2 was not "
              "killed (event action %r) and reached a denied destination" % e.get("action"))
        check(mover.returncode == -signal.SIGKILL,
              "a sandboxed writer in another sandbox lived after moving S1's process out")



@test
def redteam2_outer_sandbox_moves_child_out_via_nested(c):
    """One sandbox O with a nested sandbox I below it (docs: nested
    sandboxes are supported). A process of O moves its own child C into I
    (outer -> nested: allowed, not an escape), then moves C from I to the
    cgroup2 root. C's home is I; the writer is neither in I nor at home in
    I, so the guard takes it for an outsider: nobody is killed and C runs
    unconfined, though every process involved was O's. Secure: the writer
    (inside O, an ancestor sandbox) is killed and so is C."""
    hk_need_guard(c)
    t = c.tcp("rt2-esc")
    with c.sandbox(["127.0.0.9:1"], name="rt2-outer") as outer:
        inner = Sandbox(c, c.policy(["127.0.0.9:1"]), "rt2-inner", parent=outer.cg)
        with inner:
            oid, iid = sandbox_id(c, outer), sandbox_id(c, inner)
            base = os.path.basename(inner.cg)
            # C: waits until it is no longer in I (it starts in O), then waits
            # until it is outside I too, then connects to a denied listener.
            c_script = ("st=0; inner() { while read l; do case $l in 0::*%s*) return 0;; esac; "
                        "done < /proc/self/cgroup; return 1; }; "
                        "until inner; do sleep 0.05; done; while inner; do sleep 0.05; done; "
                        "sleep 1; exec %s tcp 127.0.0.1 %d" % (base, c.netprobe, t.port))
            child = rt2_victim(c, outer.cg, c_script, "rt2 C")
            time.sleep(0.2)
            before = t.accepted
            w = subprocess.run(["sh", "-c", "echo %d > %s/cgroup.procs; sleep 0.3; "
                                "echo %d > %s; echo moved" %
                                (child.pid, inner.cg, child.pid, hk_root_procs(c))],
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=PROBE_TIMEOUT_S, preexec_fn=join_cgroup_fn(outer.cg))
            e = hk_wait_escape(c, iid, lambda e: e.get("target_pid") == child.pid, "via nested")
            time.sleep(2)
            log("writer rc %r out %r, event %r" % (w.returncode, w.stdout, e))
            check(t.accepted == before, "O's child, moved O -> I -> root by O, was not killed "
                  "(action %r) and reached a denied destination" % e.get("action"))
            check(w.returncode == -signal.SIGKILL, "the writer in O lived")


RT2_NOCAPS = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--"]



def rt2_homes(c):
    """The tgids egr_proc_home has a home for (the guard's pinned map)."""
    path = os.path.join(c.bpffs, "v2", "maps", "egr_proc_home")
    r = run(["bpftool", "-j", "map", "dump", "pinned", path])
    check(r.returncode == 0, "bpftool map dump %s: %s" % (path, (r.stderr + r.stdout).strip()))
    import json
    import struct
    return {struct.unpack("=I", bytes(int(x, 16) for x in e["key"]))[0]
            for e in json.loads(r.stdout)}


@test
def escape_guard_home_goes_with_the_last_thread(c):
    """egr_task_exit reads only the tracepoint's first argument (the second,
    group_dead, is not there on 6.1 and 6.12, and reading it made the attach
    fail there): the home of a process goes when its last thread exits,
    not when one of its threads does (twin), so a reused pid inherits no
    sandbox and a living process keeps its own."""
    hk_need_guard(c)
    with c.sandbox(["127.0.0.9:1"], name="rt2-home") as sb:
        script = ("import threading, time, sys\n"
                  "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
                  "print('joined', flush=True); sys.stdin.readline()\n")
        p = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True,
                             preexec_fn=join_cgroup_fn(sb.cg))
        CLEANUP.push("rt2 home proc", lambda: p.poll() is None and p.kill())
        check(p.stdout.readline().strip() == "joined", "the threaded process did not start")
        check(p.pid in rt2_homes(c), "a process in a sandbox has no home, or lost it when one "
              "of its threads exited")
        p.stdin.write("\n")
        p.stdin.flush()
        p.wait(PROBE_TIMEOUT_S)
        check(wait_until(lambda: p.pid not in rt2_homes(c), 5, 0.05),
              "the home of an exited process stayed in egr_proc_home")
