# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Run identity, logging, prerequisites, the cleanup stack and small helpers
(check, wait_until, sysctls, subprocesses, cgroup removal)."""

import errno as errno_mod
import os
import random
import signal
import subprocess
import sys
import threading
import time

__all__ = ["TIME_SCALE", "SUITE_TIMEOUT_S", "DAEMON_READY_S", "PROBE_TIMEOUT_S", "CTL_TIMEOUT_S", "PID", "RAND",
           "RUN_ID", "IF_TAG", "log", "prerequisite_missing", "find_cgroup2", "Cleanup",
           "CLEANUP", "kill_descendants", "on_signal", "on_alarm", "TestFailure", "check", "wait_until",
           "read_sysctl", "write_sysctl", "set_sysctl_for_run", "run", "must",
           "cgroup_remove_tree", "fd_open_on"]


# E2E_TIME_SCALE (default 1) stretches the bounds below and every
# wait_until for an emulated machine (make test-kernels' TCG guests, where
# egressd takes a minute to load); it never shortens one.
TIME_SCALE = max(1.0, float(os.environ.get("E2E_TIME_SCALE", "1") or 1))
SUITE_TIMEOUT_S = 1500         # hard stop for the whole run (a hung test, not a slow machine)
DAEMON_READY_S = int(30 * TIME_SCALE)   # egressd must answer `status` within this (loading
                                        # and verifying its programs took 6 s at load 17)
PROBE_TIMEOUT_S = int(10 * TIME_SCALE)  # one netprobe run (its own calls are bounded by 2 s)
CTL_TIMEOUT_S = int(30 * TIME_SCALE)    # one egressctl call

PID = os.getpid()
RAND = "%06x" % random.SystemRandom().getrandbits(24)
RUN_ID = "egressd-e2e-%d-%s" % (PID, RAND)
# Interface names are at most 15 bytes: a tag derived from the pid and rand.
IF_TAG = ("%x" % (PID & 0xfffff))[-5:] + RAND[:4]

VERBOSE = False


def log(msg):
    if VERBOSE:
        print("  . " + msg, flush=True)


# --- prerequisites ------------------------------------------------------------


def prerequisite_missing(why):
    """Never a silent skip: fail under CI=true, exit 77 with SKIP otherwise."""
    if os.environ.get("CI", "").lower() == "true":
        print("FAIL e2e prerequisites: %s (CI=true: a missing prerequisite is a failure)" % why,
              flush=True)
        print("0 passed, 1 failed", flush=True)
        sys.exit(1)
    print("SKIP e2e: %s" % why, flush=True)
    sys.exit(77)


def find_cgroup2():
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[2] == "cgroup2":
                return parts[1]
    return None


# --- cleanup --------------------------------------------------------------------


class Cleanup:
    """A LIFO of cleanup actions run once, at exit or on a fatal signal."""

    def __init__(self):
        self.actions = []
        self.done = False
        self.lock = threading.Lock()

    def push(self, what, fn, *args):
        self.actions.append((what, fn, args))
        return len(self.actions) - 1

    def run_since(self, mark):
        """Run (LIFO) the actions pushed since len(actions) was mark: a
        test's own, at its end (a module's E2E_CLEANUP_PER_TEST)."""
        while len(self.actions) > mark:
            what, fn, args = self.actions.pop()
            try:
                fn(*args)
            except Exception as e:  # keep going: clean up everything else
                print("  cleanup %s: %s" % (what, e), file=sys.stderr, flush=True)

    def run(self):
        with self.lock:
            if self.done:
                return
            self.done = True
        while self.actions:
            what, fn, args = self.actions.pop()
            try:
                fn(*args)
            except Exception as e:  # keep going: clean up everything else
                print("  cleanup %s: %s" % (what, e), file=sys.stderr, flush=True)


CLEANUP = Cleanup()


def _children_of():
    """pid -> [child pids] of every process /proc lists now."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        kids.setdefault(ppid, []).append(int(d))
    return kids


def kill_descendants():
    """SIGKILL what is still running below this run (a server or tool a
    test forked without a cleanup of its own), the last cleanup action: only
    our own descendants, found by their parent chain, never anyone else's."""
    kids = _children_of()
    todo, found = list(kids.get(os.getpid(), [])), []
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(kids.get(pid, []))
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if found:
        print("  cleanup: killed %d leftover process(es) of this run: %s" %
              (len(found), " ".join(map(str, found))), file=sys.stderr, flush=True)


def on_signal(signum, frame):
    print("interrupted by signal %d, cleaning up" % signum, file=sys.stderr, flush=True)
    sys.exit(1)  # SystemExit: finally blocks and atexit run


def on_alarm(signum, frame):
    raise TimeoutError("the suite ran over %d s" % SUITE_TIMEOUT_S)


# --- small helpers ----------------------------------------------------------------


class TestFailure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise TestFailure(msg)


def wait_until(pred, timeout, step=0.05):
    end = time.monotonic() + timeout * TIME_SCALE
    while True:
        if pred():
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(step)


def read_sysctl(name):
    with open("/proc/sys/" + name.replace(".", "/")) as f:
        return f.read().strip()


def write_sysctl(name, value):
    with open("/proc/sys/" + name.replace(".", "/"), "w") as f:
        f.write(value)


def set_sysctl_for_run(name, value):
    """Set a sysctl for the run and restore the old value on exit."""
    try:
        old = read_sysctl(name)
    except OSError:
        return False
    if old.split() == value.split():
        return True
    write_sysctl(name, value)
    CLEANUP.push("sysctl " + name, write_sysctl, name, old)
    log("sysctl %s: %s -> %s" % (name, old, value))
    return True


def run(argv, timeout=CTL_TIMEOUT_S, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout, **kw)


def must(argv, timeout=CTL_TIMEOUT_S):
    r = run(argv, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(argv), r.returncode,
                                                 (r.stderr or r.stdout).strip()))
    return r


# --- cgroups ----------------------------------------------------------------------


def cgroup_remove_tree(path):
    """Kill everything in path and its descendants, then rmdir depth-first."""
    if not os.path.isdir(path):
        return
    dirs = []
    for root, subdirs, _ in os.walk(path):
        dirs.append(root)
    for d in dirs:
        try:
            with open(os.path.join(d, "cgroup.kill"), "w") as f:
                f.write("1")
        except OSError:
            # No cgroup.kill (kernel < 5.14): kill what is listed.
            try:
                with open(os.path.join(d, "cgroup.procs")) as f:
                    for pid in f.read().split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except OSError:
                            pass
            except OSError:
                pass
    for d in sorted(dirs, key=lambda p: p.count("/"), reverse=True):
        def empty(d=d):
            try:
                with open(os.path.join(d, "cgroup.procs")) as f:
                    return not f.read().strip()
            except OSError:
                return True
        wait_until(empty, 5)
        for _ in range(50):
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if e.errno != errno_mod.EBUSY:
                    raise
                time.sleep(0.05)
        else:
            raise RuntimeError("cannot remove cgroup %s: still busy" % d)


def fd_open_on(pid, path):
    """The number of an fd process pid holds open on path (a realpath), or
    None."""
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            if os.readlink("/proc/%d/fd/%s" % (pid, fd)) == path:
                return int(fd)
        except OSError:
            pass
    return None
