# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Issue 8, the `egressctl run` launcher: a tool that is root in its sandbox,
# or shares a uid with another sandbox, cannot leave its cgroup, reach into
# another sandbox, keep a capability, or reach egressd's pins, state or
# control socket. Each test does what a hostile tool would, under `run`,
# and has a sanity twin that does the allowed thing the same way.
#
# Run by run.py (harness.runner).

import errno as errno_mod
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


NOBODY = 65534
# uid 0 under run is this host uid (its own user namespace maps 0 to it).
RUN_ROOT_HOST_UID = NOBODY     # uid 0 under run --map-root-to 65534:65534
# Without --user or --map-root-to, uid 0 under run is the first id of a host
# range of its own (user/egressctl/runids.c): 65536 ids from a multiple of
# 65536 in [0x70000000, 0x7FFE0000).
RUN_RANGE_LO, RUN_RANGE_HI = 0x70000000, 0x7FFE0000
# The capabilities uid 0 keeps there (over its own ids only): CHOWN,
# DAC_OVERRIDE, FOWNER, SETGID, SETUID.
RUN_NS_CAPS = 0xcb


def run_range_root(uid):
    """Is uid the host id of uid 0 in a run's own range?"""
    return RUN_RANGE_LO <= uid < RUN_RANGE_HI and uid % 65536 == 0
# A python that uid 65534 can run (sys.executable may live under /root).
HR_PY = RUN_PY

# The attacker's scripts run as `python3 -c SCRIPT ARGS...` under run. Each
# prints one line per finding ("name value") and exits 0 when it could do
# all its steps; the test judges the findings.

HR_PRELUDE = r"""
import ctypes, errno, os, signal, socket, sys, time
libc = ctypes.CDLL(None, use_errno=True)
def out(name, value):
    print("%s %s" % (name, value), flush=True)
def err_of(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def sys_err(ret):
    if ret >= 0:
        return "ok"
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
def write_file(path, data):
    with open(path, "w") as f:
        f.write(data)
def connect(port):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", port))
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    finally:
        s.close()
def own_cgroup():
    for line in open("/proc/self/cgroup"):
        if line.startswith("0::"):
            return line[3:].strip()
    return "?"
"""

# argv: cgroup2 mount point, host path of a sibling cgroup, allowed port,
# denied port.
HR_ESCAPE = HR_PRELUDE + r"""
mnt, sibling, ok_port, deny_port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
out("uid", os.getuid())
out("cgroup_before", own_cgroup())
# The move the issue reproduced: our pid into the cgroup2 root's cgroup.procs.
out("root_write", err_of(lambda: write_file(os.path.join(mnt, "cgroup.procs"), str(os.getpid()))))
out("cgroup_after_root", own_cgroup())
# A sibling cgroup outside the sandbox, by its host path.
out("sibling_write", err_of(lambda: write_file(os.path.join(sibling, "cgroup.procs"),
                                               str(os.getpid()))))
# Another view of the hierarchy: a cgroup2 mount of our own.
d = "/tmp/hr-mnt-%d" % os.getpid()
os.mkdir(d)
try:
    out("mount_cgroup2", sys_err(libc.mount(b"cgroup2", d.encode(), b"cgroup2", 0, None)))
    libc.umount2(d.encode(), 2)
finally:
    os.rmdir(d)
out("cgroup_after", own_cgroup())
out("denied", connect(deny_port))
out("allowed", connect(ok_port))
"""

# Twin of HR_ESCAPE inside: a child cgroup of its own works and stays confined.
HR_CHILD_CGROUP = HR_PRELUDE + r"""
mnt, ok_port, deny_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
child = os.path.join(mnt, "tool-child")
out("mkdir", err_of(lambda: os.mkdir(child)))
out("move", err_of(lambda: write_file(os.path.join(child, "cgroup.procs"), str(os.getpid()))))
out("cgroup", own_cgroup())
out("denied", connect(deny_port))
out("allowed", connect(ok_port))
"""

# The same write where the whole tree is visible (no run): it moves.
HR_MOVE_VISIBLE = r"""
import os, sys
with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))
for line in open("/proc/self/cgroup"):
    if line.startswith("0::"):
        print("cgroup", line[3:].strip())
"""


HR_USERNS = {}


def run_has_userns(c):
    """Does `egressctl run` give the command a user namespace here? The kernel
    refuses one to a chrooted process (a test chroot): run then makes the
    command the host identity its uid 0 would have been mapped to (65534 or
    --map-root-to) and says so on stderr (docs/security.md). Tests of the uid
    0 inside expect that identity instead."""
    if "yes" not in HR_USERNS:
        r = hr_run(c, c.policy(["127.0.0.1:1"]), ["/bin/true"])
        check(r.returncode == 0, "egressctl run -- /bin/true: exit %d %r" %
              (r.returncode, r.stderr))
        HR_USERNS["yes"] = "no user namespace here" not in r.stderr
    return HR_USERNS["yes"]


def hr_is_root_uid(c, uid):
    """Is uid (text) the uid a command of uid 0 has under run: 0 in its user
    namespace; where the kernel gives it none, its run's range's first id on
    the host (never 0, never another run's)."""
    if run_has_userns(c):
        return uid == "0"
    return bool(uid) and uid.isdigit() and run_range_root(int(uid))


def hr_run(c, policy, cmd, opts=(), timeout=CTL_TIMEOUT_S, **kw):
    """egressctl run [opts] --policy POLICY -- CMD; the CompletedProcess."""
    argv = [c.egressctl, "--socket", c.sock, "run", "--policy", policy] + list(opts) + \
        ["--"] + [str(a) for a in cmd]
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired:
        raise TestFailure("`%s` did not finish within %d s" % (" ".join(argv), timeout))
    log("run %s -> %d %r %r" % (" ".join(str(a) for a in cmd)[:80], r.returncode,
                                r.stdout[-300:], r.stderr[-300:]))
    return r


def hr_findings(r, what):
    """The "name value" lines of a script's output as a dict."""
    if r.returncode != 0:
        raise TestFailure("%s: exit %d: %r %r" % (what, r.returncode, r.stdout, r.stderr))
    found = {}
    for line in r.stdout.splitlines():
        k, _, v = line.partition(" ")
        found[k] = v
    return found


def hr_delegate(c, ctrl):
    """The controller down to the run's cgroups (the cgroup2 root, then the
    run's own), as an operator delegates it to a runtime: egressctl run
    enables it only in its --cgroup-parent (issue 29: pure cgroup v2)."""
    for d in (c.cg_mount, c.cg_root):
        with open(os.path.join(d, "cgroup.subtree_control")) as f:
            if ctrl in f.read().split():
                continue
        try:
            with open(os.path.join(d, "cgroup.subtree_control"), "w") as f:
                f.write("+" + ctrl)
        except OSError as e:
            raise TestFailure("enabling %s in %s/cgroup.subtree_control: %s" % (ctrl, d, e))


def hr_parent(c):
    """A --cgroup-parent of our own, removed at the end."""
    for ctrl in ("pids", "memory"):
        if hr_cgroup2_offers(c, ctrl):
            hr_delegate(c, ctrl)
    p = c.mkcgroup("runparent")
    CLEANUP.push("run parent", cgroup_remove_tree, p)
    return p


def hr_no_leftovers(c, parent, before):
    left = [d for d in os.listdir(parent) if os.path.isdir(os.path.join(parent, d))]
    check(left == [], "run left cgroup(s) %r in %s" % (left, parent))
    check(c.list_json() == before, "run left sandboxes: %r" % c.list_json())


@test
def hostile_run_cgroup_escape(c):
    # Row 1: uid 0 under run moves itself to the cgroup2 root or a sibling.
    a, b = c.tcp("a"), c.tcp("b")
    pol = c.policy(["127.0.0.1:%d" % a.port])
    sibling = c.mkcgroup("sibling")
    CLEANUP.push("sibling cgroup", cgroup_remove_tree, sibling)
    parent = hr_parent(c)
    before = c.list_json()

    # Twin outside run: where the tree is visible the same write moves a
    # uid-0 process (from a plain cgroup; no sandbox is involved).
    start = c.mkcgroup("start")
    CLEANUP.push("start cgroup", cgroup_remove_tree, start)
    r = subprocess.run([sys.executable, "-c", HR_MOVE_VISIBLE, sibling], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=PROBE_TIMEOUT_S,
                       preexec_fn=join_cgroup_fn(start))
    want = sibling[len(c.cg_mount):]
    check(r.returncode == 0 and ("cgroup " + want) in r.stdout,
          "twin: a uid-0 write to a visible cgroup.procs did not move the process (%d %r %r): "
          "the test proves nothing" % (r.returncode, r.stdout, r.stderr))

    r = hr_run(c, pol, [HR_PY, "-c", HR_ESCAPE, c.cg_mount, sibling, a.port, b.port],
               ["--cgroup-parent", parent])
    f = hr_findings(r, "escape script under run")
    check(hr_is_root_uid(c, f.get("uid")), "the script did not run as run's uid 0: %r" % f)
    check(f.get("cgroup_before") == "/", "not the root of its cgroup namespace: %r" % f)
    # The only "root" it can name is its own namespace root: no move out.
    check(f.get("cgroup_after_root") == "/",
          "writing the cgroup2 root's cgroup.procs moved it: %r" % f)
    check(f.get("sibling_write") == "ENOENT",
          "the sibling cgroup %s is reachable from inside: %r" % (sibling, f))
    check(f.get("mount_cgroup2") == "EPERM", "a cgroup2 mount of its own: %r" % f)
    check(f.get("cgroup_after") == "/", "it left its cgroup: %r" % f)
    check(f.get("denied") == "EPERM", "the denied destination opened after the attempts: %r" % f)
    check(f.get("allowed") == "ok", "twin: the allowed destination failed: %r" % f)
    with open(os.path.join(sibling, "cgroup.procs")) as fp:
        check(fp.read().strip() == "", "something moved into the sibling cgroup")
    hr_no_leftovers(c, parent, before)

    # Twin inside run: a child cgroup of its own works, and stays confined.
    r = hr_run(c, pol, [HR_PY, "-c", HR_CHILD_CGROUP, c.cg_mount, a.port, b.port],
               ["--cgroup-parent", parent])
    f = hr_findings(r, "child cgroup script under run")
    check(f.get("mkdir") == "ok" and f.get("move") == "ok" and f.get("cgroup") == "/tool-child",
          "twin: moving into a child cgroup of its own sandbox failed: %r" % f)
    check(f.get("denied") == "EPERM", "a child cgroup of the sandbox is not confined: %r" % f)
    check(f.get("allowed") == "ok", "a child cgroup lost the allowed destination: %r" % f)
    hr_no_leftovers(c, parent, before)


# Sandbox B: holds a secret in its environment and waits (bounded) until
# SIGTERM; exits 42 on it, so the test sees the signal was forwarded.
HR_VICTIM = r"""
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: os._exit(42))
print("ready", os.getpid(), flush=True)
end = time.monotonic() + 60
while time.monotonic() < end:
    time.sleep(0.1)
os._exit(3)
"""

# Sandbox A, given B's pid on the host: every way to reach it.
HR_SIBLING = HR_PRELUDE + r"""
victim = int(sys.argv[1])
out("uid", os.getuid())
out("proc_dir", "yes" if os.path.exists("/proc/%d" % victim) else "no")
out("environ", err_of(lambda: open("/proc/%d/environ" % victim).read()))
pids = sorted(int(d) for d in os.listdir("/proc") if d.isdigit())
out("pids", ",".join(map(str, pids)))
secret = 0
for p in pids:
    try:
        if b"HR_SECRET" in open("/proc/%d/environ" % p, "rb").read() and p != os.getpid():
            secret += 1
    except OSError:
        pass
out("secret_seen", secret)
out("kill0", err_of(lambda: os.kill(victim, 0)))
out("kill", err_of(lambda: os.kill(victim, signal.SIGKILL)))
out("pidfd_open", err_of(lambda: os.close(os.pidfd_open(victim))))
out("ptrace", sys_err(libc.ptrace(0x4206, victim, None, None)))  # PTRACE_SEIZE
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(64)
lio, rio = iovec(ctypes.addressof(buf), 64), iovec(0x400000, 64)
out("vm_readv", sys_err(libc.process_vm_readv(victim, ctypes.byref(lio), 1, ctypes.byref(rio), 1, 0)))
# Its own child: what it may do (twin), and what the filter still refuses.
child = os.fork()
if child == 0:
    time.sleep(10)
    os._exit(0)
out("child_proc", "yes" if os.path.exists("/proc/%d/status" % child) else "no")
out("child_kill0", err_of(lambda: os.kill(child, 0)))
fd = os.pidfd_open(child)
out("child_pidfd_open", "ok")
out("child_pidfd_getfd", sys_err(libc.syscall(438, fd, 0, 0)))  # pidfd_getfd
out("child_ptrace", sys_err(libc.ptrace(0x4206, child, None, None)))
os.close(fd)
out("own_environ", "yes" if b"HR_MINE" in open("/proc/self/environ", "rb").read() else "no")
os.kill(child, signal.SIGTERM)
_, st = os.waitpid(child, 0)
out("child_signalled", os.WTERMSIG(st) if os.WIFSIGNALED(st) else "no")
"""

# Outside any run: what the pid namespace takes away. As root, because B is
# in a user namespace of its own: even its own host uid needs CAP_SYS_PTRACE
# over that namespace to read its /proc files (shown too; it may signal it).
HR_SIBLING_OUTSIDE = r"""
import os, sys
victim = int(sys.argv[1])
print("environ", "secret" if b"HR_SECRET" in open("/proc/%d/environ" % victim, "rb").read() else "none")
os.kill(victim, 0)
print("kill0 ok")
os.setgroups([]); os.setgid(65534); os.setuid(65534)
try:
    open("/proc/%d/environ" % victim, "rb").read()
    print("same_uid_environ ok")
except PermissionError:
    print("same_uid_environ EACCES")
"""


def hr_host_pid_of(parent, uid, timeout=10, cmd="python"):
    """The host pid of the process of uid running cmd under parent/run-*/cmd
    (not the sandbox's pid 1, whose command line is egressctl's)."""
    found = []

    def look():
        for d in glob.glob(os.path.join(parent, "run-*", "cmd", "cgroup.procs")):
            try:
                pids = open(d).read().split()
            except OSError:
                continue
            for p in pids:
                try:
                    with open("/proc/%s/cmdline" % p, "rb") as f:
                        if cmd.encode() not in f.read().split(b"\0")[0]:
                            continue
                    for line in open("/proc/%s/status" % p):
                        if line.startswith("Uid:") and (
                                uid(int(line.split()[1])) if callable(uid) else
                                int(line.split()[1]) == uid):
                            found.append(int(p))
                            return True
                except (OSError, ValueError):
                    pass
        return False
    wait_until(look, timeout)
    return found[0] if found else None


@test
def hostile_run_same_uid_sibling(c):
    # Row 6: two run sandboxes of uid 65534; A goes after B.
    a = c.tcp("a")
    pol = c.policy(["127.0.0.1:%d" % a.port])
    parent_b, parent_a = hr_parent(c), hr_parent(c)
    env = dict(os.environ, HR_SECRET="hunter2")
    argv = [c.egressctl, "--socket", c.sock, "run", "--policy", pol, "--user", str(NOBODY),
            "--cgroup-parent", parent_b, "--", HR_PY, "-c", HR_VICTIM]
    b = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)

    def stop_b():
        if b.poll() is None:
            b.kill()
            b.wait(10)
    CLEANUP.push("sandbox B", stop_b)
    try:
        victim = hr_host_pid_of(parent_b, NOBODY)
        check(victim is not None, "sandbox B's process (uid %d) never showed up" % NOBODY)
        # Twin: outside run, the same uid reads B's environment and signals it.
        r = subprocess.run([sys.executable, "-c", HR_SIBLING_OUTSIDE, str(victim)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=PROBE_TIMEOUT_S)
        check(r.returncode == 0 and "environ secret" in r.stdout and "kill0 ok" in r.stdout,
              "twin: root outside run cannot reach B (%d %r %r): the test proves nothing" %
              (r.returncode, r.stdout, r.stderr))
        # Without a user namespace (a chroot) B is host uid 65534 like any
        # other process of that uid outside every sandbox: only processes
        # of other sandboxes (their own pid namespaces) cannot reach it.
        check(not run_has_userns(c) or "same_uid_environ EACCES" in r.stdout,
              "uid %d outside run reads B's environment (B has no user namespace of its "
              "own?): %r" % (NOBODY, r.stdout))
        r = hr_run(c, pol, [HR_PY, "-c", HR_SIBLING, victim],
                   ["--user", str(NOBODY), "--cgroup-parent", parent_a],
                   env=dict(os.environ, HR_MINE="1"))
        f = hr_findings(r, "sibling script under run")
        check(f.get("uid") == str(NOBODY), "A did not run as uid %d: %r" % (NOBODY, f))
        check(f.get("proc_dir") == "no" and f.get("environ") == "ENOENT",
              "A sees B in /proc: %r" % f)
        check(f.get("secret_seen") == "0", "A read B's environment: %r" % f)
        pids = [int(p) for p in f.get("pids", "").split(",") if p]
        check(victim not in pids and pids and max(pids) < 100,
              "A's /proc lists processes outside its pid namespace: %r" % pids)
        for k in ("kill0", "kill", "pidfd_open"):
            check(f.get(k) == "ESRCH", "A %s B: %r (expected ESRCH)" % (k, f.get(k)))
        check(f.get("ptrace") == "EPERM", "A ptrace(PTRACE_SEIZE) B: %r" % f.get("ptrace"))
        check(f.get("vm_readv") in ("EPERM", "ESRCH"), "A process_vm_readv B: %r" % f)
        # Twin inside: its own child is there to see and signal ...
        check(f.get("child_proc") == "yes" and f.get("child_kill0") == "ok" and
              f.get("child_pidfd_open") == "ok" and f.get("child_signalled") == "15" and
              f.get("own_environ") == "yes",
              "twin: A cannot see or signal its own child or read its own environ: %r" % f)
        # ... but not to take a descriptor of or trace (seccomp).
        check(f.get("child_pidfd_getfd") == "EPERM" and f.get("child_ptrace") == "EPERM",
              "pidfd_getfd/ptrace of its own child are not refused: %r" % f)
        check(b.poll() is None, "sandbox B died during A's attempts: exit %r" % b.poll())
        # SIGTERM to egressctl reaches B's command through its pid 1.
        b.terminate()
        out, err = b.communicate(timeout=15)
        check(b.returncode == 42, "B after SIGTERM: exit %d, expected 42 (the command's "
              "handler): %r %r" % (b.returncode, out, err))
    finally:
        stop_b()


# uid 0 under run: what its capabilities would give it. argv: a scratch
# directory, allowed port.
HR_CAPS = HR_PRELUDE + r"""
scratch, ok_port = sys.argv[1], int(sys.argv[2])
out("uid", os.getuid())
status = {}
for line in open("/proc/self/status"):
    k, _, v = line.partition(":")
    status[k] = v.strip()
for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"):
    out(k, status.get(k, "?"))
node = os.path.join(scratch, "hr-null")
out("mknod", err_of(lambda: os.mknod(node, 0o600 | 0o020000, os.makedev(1, 3))))
class timeval(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("usec", ctypes.c_long)]
now = time.time()  # setting the clock to what it reads: no harm if it worked
tv = timeval(int(now), int((now % 1) * 1e6))
out("settimeofday", sys_err(libc.settimeofday(ctypes.byref(tv), None)))
# The scratch dir is host root's, an id its user namespace does not map:
# CAP_CHOWN there is over its own ids only.
out("chown", err_of(lambda: os.chown(scratch, 0, 0)))
out("raw_socket", err_of(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 1).close()))
# The sandbox's pid 1 is root's and not dumpable: not a way around any of it.
out("init_environ", err_of(lambda: open("/proc/1/environ").read()))
out("init_mem", err_of(lambda: open("/proc/1/mem", "rb").close()))
out("allowed", connect(ok_port))
# Last: ids of its own range (the drop apt makes), then no capability.
out("setgid", err_of(lambda: os.setgid(1000)))
out("setuid", err_of(lambda: os.setuid(1000)))
out("CapEff_after", [l.split()[1] for l in open("/proc/self/status")
                     if l.startswith("CapEff:")][0])
"""

# The same steps as root outside run (no clock change there).
HR_CAPS_OUTSIDE = r"""
import os, sys
scratch = sys.argv[1]
node = os.path.join(scratch, "hr-null-outside")
os.mknod(node, 0o600 | 0o020000, os.makedev(1, 3)); os.unlink(node)
os.chown(scratch, 1000, 1000); os.chown(scratch, 0, 0)
eff = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff:")][0]
os.setuid(1000)
print("ok", eff)
"""


@test
def hostile_run_root_has_no_capabilities(c):
    # Row 9: uid 0 under run keeps no capability over anything of the host:
    # in its own range (the default) only CHOWN, DAC_OVERRIDE, FOWNER,
    # SETGID and SETUID, which act on its own ids alone; with --user none.
    a = c.tcp("a")
    pol = c.policy(["127.0.0.1:%d" % a.port])
    scratch = tempfile.mkdtemp(prefix=RUN_ID + ".caps.", dir="/var/tmp")
    CLEANUP.push("scratch dir", shutil.rmtree, scratch, True)
    os.chmod(scratch, 0o777)   # so mknod meets the capability check, not the mode
    r = subprocess.run([sys.executable, "-c", HR_CAPS_OUTSIDE, scratch], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=PROBE_TIMEOUT_S)
    check(r.returncode == 0 and r.stdout.startswith("ok ") and
          int(r.stdout.split()[1], 16) != 0,
          "twin: root outside run cannot mknod/chown/setuid (%d %r %r): the test proves "
          "nothing" % (r.returncode, r.stdout, r.stderr))
    r = hr_run(c, pol, [HR_PY, "-c", HR_CAPS, scratch, a.port])
    f = hr_findings(r, "capability script under run")
    check(hr_is_root_uid(c, f.get("uid")), "the script did not run as run's uid 0: %r" % f)
    ns = run_has_userns(c)
    for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        want = RUN_NS_CAPS if ns and k in ("CapPrm", "CapEff", "CapBnd") else 0
        check(f.get(k) is not None and int(f[k], 16) == want, "%s is %r under run (want %x)" %
              (k, f.get(k), want))
    check(f.get("NoNewPrivs") == "1", "NoNewPrivs is %r" % f.get("NoNewPrivs"))
    check(f.get("Seccomp") == "2", "no seccomp filter: Seccomp %r" % f.get("Seccomp"))
    for k in ("mknod", "settimeofday", "chown", "raw_socket"):
        check(f.get(k) == "EPERM", "%s as uid 0 under run: %r (expected EPERM)" % (k, f.get(k)))
    # Uid 1000 is one of its own range's: the change works (host id base +
    # 1000) and takes every capability with it.
    for k in ("setuid", "setgid"):
        check(f.get(k) == ("ok" if ns else "EPERM"), "%s(1000) as uid 0 under run: %r" %
              (k, f.get(k)))
    check(not ns or int(f.get("CapEff_after", "1"), 16) == 0,
          "capabilities left after the change to uid 1000: %r" % f.get("CapEff_after"))
    check(f.get("init_environ") == "EACCES" and f.get("init_mem") == "EACCES",
          "the sandbox's pid 1 is reachable: %r" % f)
    check(not os.path.exists(os.path.join(scratch, "hr-null")), "a device node was made")
    check(f.get("allowed") == "ok", "twin: the allowed connect failed under run: %r" % f)
    # --user: the same drop, as that uid.
    r = hr_run(c, pol, [HR_PY, "-c", HR_CAPS, scratch, a.port], ["--user", "%d:%d" % (NOBODY, NOBODY)])
    f = hr_findings(r, "capability script under run --user")
    check(f.get("uid") == str(NOBODY), "--user %d: ran as %r" % (NOBODY, f.get("uid")))
    for k in ("CapPrm", "CapEff", "CapBnd", "CapAmb"):
        check(int(f.get(k, "1"), 16) == 0, "--user: %s is %r" % (k, f.get(k)))
    check(f.get("allowed") == "ok", "twin: the allowed connect failed under run --user: %r" % f)


# uid 0 under run looks for egressd. argv: bpffs dir, socket, state dir,
# cgroup2 mount, the e2e cgroup root, a root-writable sysfs file and a block
# device of the host (or "").
HR_LOOK = HR_PRELUDE + r"""
bpffs, sock, state, mnt, cg_root, sysfile, blockdev = sys.argv[1:8]
out("dev", ",".join(sorted(os.listdir("/dev"))))
out("blockdev", err_of(lambda: os.lstat(blockdev)) if blockdev else "none")
out("dev_create", err_of(lambda: write_file("/dev/hr-new", "x")))
out("dev_null", err_of(lambda: write_file("/dev/null", "x")))
out("urandom", len(open("/dev/urandom", "rb").read(16)))
out("bpf_root", ",".join(sorted(os.listdir("/sys/fs/bpf"))) or "-")
out("bpffs_dir", "yes" if os.path.exists(bpffs) else "no")
out("socket", "yes" if os.path.exists(sock) else "no")
out("socket_connect", err_of(lambda: socket.socket(socket.AF_UNIX).connect(sock)))
out("state", ",".join(sorted(os.listdir(state))) or "-" if os.path.isdir(state) else "absent")
types = sorted(set(l.split()[2] for l in open("/proc/self/mounts")))
out("mount_types", ",".join(types))
out("cg_root_visible", "yes" if os.path.exists(cg_root) else "no")
out("cg_entries", ",".join(sorted(d for d in os.listdir(mnt)
                                   if os.path.isdir(os.path.join(mnt, d)))) or "-")
out("proc_sys", err_of(lambda: os.close(os.open("/proc/sys/net/ipv4/ping_group_range",
                                                os.O_WRONLY))))
out("sysfs", err_of(lambda: os.close(os.open(sysfile, os.O_WRONLY))) if sysfile else "none")
out("remount_bpf", sys_err(libc.mount(b"bpf", b"/sys/fs/bpf", b"bpf", 0, None)))
# The command's own files: its working directory and /tmp.
out("cwd", os.getcwd())
write_file("own-file", "mine")
out("cwd_file", open("own-file").read())
t = "/tmp/hr-own-%d" % os.getpid()
write_file(t, "tmp")
out("tmp_file", open(t).read())
os.unlink(t)
"""

# Started in a hidden directory: its old dentry must not stay reachable.
HR_CWD = r"""
import os
print("cwd", os.getcwd())
print("entries", ",".join(sorted(os.listdir("."))) or "-")
"""


def hr_sysfs_writable_file():
    for p in ("/sys/kernel/mm/transparent_hugepage/enabled", "/sys/module/printk/parameters/time",
              "/sys/kernel/profiling", "/sys/kernel/uevent_helper"):
        try:
            st = os.stat(p)
        except OSError:
            continue
        if st.st_mode & 0o200 and st.st_uid == 0:
            return p
    return ""


def hr_block_device():
    """A block device node of the host (its disk), or ""."""
    for name in sorted(os.listdir("/sys/block")):
        p = "/dev/" + name
        if not name.startswith(("loop", "ram")) and os.path.exists(p):
            return p
    return ""


@test
def hostile_run_cannot_reach_egressd(c):
    # uid 0 under run: egressd's pins, state and control socket.
    check(os.listdir(c.bpffs) and os.path.exists(c.sock) and os.listdir(c.state),
          "twin: egressd's bpffs dir, socket or state dir is empty outside: the test proves "
          "nothing")
    # What run hides comes from ping (status costs egressd a visit of every
    # sandbox): the same paths as status's.
    ping, st = ctl_request(c.sock, {"op": "ping"}), ctl_request(c.sock, {"op": "status"})
    check(ping.get("state_dir") and ping.get("bpffs_dir") and
          (ping.get("state_dir"), ping.get("bpffs_dir")) ==
          (st.get("state_dir"), st.get("bpffs_dir")),
          "ping says %r, status %r" % (ping, {k: st.get(k) for k in ("state_dir", "bpffs_dir")}))
    pol = c.policy(["127.0.0.1:%d" % c.tcp("a").port])
    sysfile = hr_sysfs_writable_file()
    if sysfile:  # twin: root outside may open it for writing (nothing is written)
        os.close(os.open(sysfile, os.O_WRONLY))
    os.close(os.open("/proc/sys/net/ipv4/ping_group_range", os.O_WRONLY))
    blockdev = hr_block_device()
    # (twin: the node is there outside; it is never opened here)
    check(not blockdev or os.path.exists(blockdev), "%s vanished" % blockdev)
    cwd = tempfile.mkdtemp(prefix=RUN_ID + ".cwd.", dir="/var/tmp")
    CLEANUP.push("cwd dir", shutil.rmtree, cwd, True)
    os.chmod(cwd, 0o1777)   # a directory given to the sandbox (its host uid is the run's own)
    r = hr_run(c, pol, [HR_PY, "-c", HR_LOOK, c.bpffs, c.sock, c.state, c.cg_mount,
                        c.cg_root, sysfile, blockdev], cwd=cwd)
    f = hr_findings(r, "look-around script under run")
    dev = set(f.get("dev", "").split(","))
    check(dev <= {"null", "zero", "full", "random", "urandom", "tty", "fd", "stdin", "stdout",
                  "stderr", "ptmx", "pts", "shm"}, "/dev under run lists %r" % sorted(dev))
    check(f.get("blockdev") in ("ENOENT", "none"), "the host's disk %s under run: %r" %
          (blockdev, f.get("blockdev")))
    check(f.get("dev_create") == "EROFS", "a new file in /dev: %r" % f.get("dev_create"))
    check(f.get("dev_null") == "ok" and f.get("urandom") == "16",
          "twin: /dev/null or /dev/urandom do not work under run: %r" % f)
    check(f.get("bpf_root") == "-", "/sys/fs/bpf lists %r under run" % f.get("bpf_root"))
    check(f.get("bpffs_dir") == "no", "egressd's bpffs dir %s is visible" % c.bpffs)
    check(f.get("socket") == "no" and f.get("socket_connect") == "ENOENT",
          "the control socket is reachable: %r" % f)
    check(f.get("state") in ("absent", "-"), "the state dir shows %r" % f.get("state"))
    types = f.get("mount_types", "").split(",")
    check("bpf" not in types and "cgroup" not in types and types.count("cgroup2") == 1,
          "mounts under run: %r" % types)
    check(f.get("cg_root_visible") == "no" and f.get("cg_entries") == "-",
          "the cgroup2 mount shows more than its own subtree: %r" % f)
    # Read-only, and root's on the host: either refusal holds.
    check(f.get("proc_sys") in ("EROFS", "EACCES"), "/proc/sys writable: %r" % f.get("proc_sys"))
    check(f.get("sysfs") in ("EROFS", "EACCES", "none"), "%s writable: %r" %
          (sysfile, f.get("sysfs")))
    check(f.get("remount_bpf") == "EPERM", "a bpffs mount of its own: %r" % f.get("remount_bpf"))
    # Twin: its own files work, and they are real files on the host.
    check(f.get("cwd") == cwd and f.get("cwd_file") == "mine" and f.get("tmp_file") == "tmp",
          "twin: the command's own cwd or /tmp files failed: %r" % f)
    with open(os.path.join(cwd, "own-file")) as fp:
        check(fp.read() == "mine", "the file written in the cwd is not on the host")
    st = os.stat(os.path.join(cwd, "own-file"))
    check(run_range_root(st.st_uid) or (not run_has_userns(c) and
                                        st.st_uid == RUN_ROOT_HOST_UID),
          "the file uid 0 wrote under run is host uid %d's, expected the first of a range "
          "of the run's own" % st.st_uid)
    # Started from inside egressd's work directory (hidden): the old
    # directory under the cover must not stay reachable as ".".
    r = hr_run(c, pol, [HR_PY, "-c", HR_CWD], cwd=c.work)
    check(r.returncode == 0 and "entries -\n" in r.stdout,
          "started in a hidden directory, it sees: %d %r %r" % (r.returncode, r.stdout, r.stderr))
    # --hide covers a path of the operator's choice.
    r = hr_run(c, pol, [HR_PY, "-c", HR_CWD], ["--hide", cwd], cwd=cwd)
    check(r.returncode == 0 and "entries -\n" in r.stdout, "--hide %s: %d %r %r" %
          (cwd, r.returncode, r.stdout, r.stderr))
    # A path that cannot be covered stops the run before the command exists.
    r = hr_run(c, pol, ["/bin/echo", "started"], ["--hide", "/"])
    check(r.returncode == 2 and "started" not in r.stdout and "cannot hide /" in r.stderr,
          "--hide /: %d %r %r" % (r.returncode, r.stdout, r.stderr))


# Prints the mount points covering each path given (its own mount
# namespace's /proc/self/mountinfo): what run hid there, if anything.
HR_COVERED = r"""
import sys
mounts = [l.split()[4] for l in open("/proc/self/mountinfo")]
for p in sys.argv[1:]:
    cover = [m for m in mounts if m not in ("/", "/tmp") and (p == m or p.startswith(m + "/"))]
    print(p, ",".join(cover) or "-")
"""


@test
def hostile_run_hides_what_ping_names(c):
    # The state dir is hidden because egressd's ping names it, not because it
    # sits beside the socket: through a hard link of the socket in another
    # directory, the state dir is still covered in the command's mount
    # namespace (the work dir's mode alone would keep uid 0 under run out,
    # so this looks at what run mounted). Twin: a directory nobody named
    # stays as it is. And an egressd whose ping names no state dir gets no
    # command started at all.
    alias = tempfile.mkdtemp(prefix=RUN_ID + ".sock-alias.", dir=os.path.dirname(c.work))
    CLEANUP.push("socket alias dir", shutil.rmtree, alias, True)
    link = os.path.join(alias, "egressd.sock")
    os.link(c.sock, link)  # the same socket; realpath keeps it in alias/
    plain = tempfile.mkdtemp(prefix=RUN_ID + ".plain.", dir=os.path.dirname(c.work))
    CLEANUP.push("plain dir", shutil.rmtree, plain, True)
    state = os.path.realpath(c.state)
    pol = c.policy(["127.0.0.1:%d" % c.tcp("a").port])
    r = subprocess.run([c.egressctl, "--socket", link, "run", "--policy", pol, "--", HR_PY,
                        "-c", HR_COVERED, state, alias, plain], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=CTL_TIMEOUT_S)
    cover = dict(ln.split() for ln in r.stdout.splitlines() if len(ln.split()) == 2)
    check(r.returncode == 0 and cover.get(state, "-") != "-",
          "the state dir %s is not covered under run via %s: %d %r %r" %
          (state, link, r.returncode, r.stdout, r.stderr))
    check(cover.get(alias, "-") != "-", "the socket's directory is not covered: %r" % cover)
    check(cover.get(plain) == "-", "twin: an unnamed directory is covered: %r" % cover)
    marker = os.path.join(alias, "started")
    fake = FakeControl(os.path.join(alias, "fake.sock"),
                       lambda req: {"ok": True, "version": "0.0.1"})
    try:
        r = subprocess.run([c.egressctl, "--socket", fake.path, "run", "--policy", pol, "--",
                            "/bin/sh", "-c", "echo > %s" % marker], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=CTL_TIMEOUT_S)
    finally:
        fake.close()
    check(r.returncode == 125 and "ping does not say where its state is" in r.stderr and
          not os.path.exists(marker), "a ping without paths: exit %d %r, started: %s" %
          (r.returncode, r.stderr, os.path.exists(marker)))
    check([q.get("op") for q in fake.requests] == ["ping"],
          "requests to the fake egressd: %r" % fake.requests)


# Forks up to argv[1] children that wait (bounded) and counts refusals.
HR_FORKS = r"""
import os, sys, time
kids, refused = [], 0
for _ in range(int(sys.argv[1])):
    try:
        pid = os.fork()
    except OSError:
        refused += 1
        continue
    if pid == 0:
        time.sleep(5)
        os._exit(0)
    kids.append(pid)
for k in kids:
    os.kill(k, 9)
    os.waitpid(k, 0)
print("forked", len(kids), "refused", refused)
"""

# Touches argv[1] MiB.
HR_ALLOC = r"""
import sys
blocks = [bytearray(1 << 20) for _ in range(int(sys.argv[1]))]
print("allocated", len(blocks))
"""


def hr_cgroup2_offers(c, ctrl):
    with open(os.path.join(c.cg_mount, "cgroup.controllers")) as f:
        return ctrl in f.read().split()


@test
def hostile_run_limits(c):
    # --pids-max and --memory-max: applied where cgroup2 has the controller,
    # refused with the controller named where it does not; never ignored.
    pol = c.policy(["127.0.0.1:%d" % c.tcp("a").port])
    parent = hr_parent(c)
    before = c.list_json()
    for opt, val, ctrl, script, arg in (("--pids-max", "8", "pids", HR_FORKS, 20),
                                        ("--memory-max", "32M", "memory", HR_ALLOC, 128)):
        r = hr_run(c, pol, [HR_PY, "-c", script, arg], [opt, val, "--cgroup-parent", parent])
        if not hr_cgroup2_offers(c, ctrl):
            check(r.returncode == 125 and ("%s needs the %s controller" % (opt, ctrl)) in r.stderr
                  and "cgroup2 does not offer" in r.stderr and r.stdout == "",
                  "%s on a host whose cgroup2 lacks %s: exit %d %r %r" %
                  (opt, ctrl, r.returncode, r.stdout, r.stderr))
        elif ctrl == "pids":
            check(r.returncode == 0 and "refused 0" not in r.stdout,
                  "--pids-max 8 did not stop 20 forks: %d %r %r" % (r.returncode, r.stdout,
                                                                  r.stderr))
        else:
            check(r.returncode != 0 and "allocated" not in r.stdout,
                  "--memory-max 32M let 128 MiB be touched: %d %r" % (r.returncode, r.stdout))
        hr_no_leftovers(c, parent, before)
        # Twin: the same script without the limit runs to the end.
        r = hr_run(c, pol, [HR_PY, "-c", script, arg], ["--cgroup-parent", parent])
        check(r.returncode == 0 and ("refused 0" in r.stdout or "allocated %d" % arg in r.stdout),
              "twin: %s without %s: %d %r %r" % (script.split()[1], opt, r.returncode, r.stdout,
                                                r.stderr))
    # Bad values name the option; nothing is created or attached.
    for opts, name in ((["--pids-max", "0"], "--pids-max"), (["--pids-max", "-1"], "--pids-max"),
                       (["--pids-max", "12x"], "--pids-max"),
                       (["--pids-max", "99999999"], "--pids-max"),
                       (["--memory-max", "0"], "--memory-max"),
                       (["--memory-max", "512K"], "--memory-max"),
                       (["--memory-max", "10Q"], "--memory-max"),
                       (["--memory-max", ""], "--memory-max"),
                       (["--memory-max", "99999999999T"], "--memory-max"),
                       (["--user", "nobody"], "--user"), (["--user", "1:x"], "--user"),
                       (["--user", "4294967295"], "--user"), (["--user", "-1"], "--user"),
                       (["--hide", ""], "--hide")):
        r = hr_run(c, pol, ["/bin/true"], opts + ["--cgroup-parent", parent])
        check(r.returncode == 2 and name in r.stderr,
              "%r: exit %d %r (expected 2 naming %s)" % (opts, r.returncode, r.stderr, name))
    hr_no_leftovers(c, parent, before)


@test
def hostile_run_status_and_signals(c):
    # The launcher's pid 1 passes the command's end through unchanged.
    pol = c.policy(["127.0.0.1:%d" % c.tcp("a").port])
    r = hr_run(c, pol, ["/bin/sh", "-c", "exit 7"])
    check(r.returncode == 7, "exit 7: %d %r" % (r.returncode, r.stderr))
    r = hr_run(c, pol, ["/bin/sh", "-c", "kill -KILL $$"])
    check(r.returncode == 128 + 9, "killed by SIGKILL: %d %r" % (r.returncode, r.stderr))
    r = hr_run(c, pol, ["/nonexistent-%s" % RUN_ID])
    check(r.returncode == 127, "a missing command: %d %r" % (r.returncode, r.stderr))
    # A background child left behind does not outlive the run.
    parent = hr_parent(c)
    r = hr_run(c, pol, ["/bin/sh", "-c", "sleep 30 & echo $!"], ["--cgroup-parent", parent],
               timeout=15)
    check(r.returncode == 0, "background child: %d %r" % (r.returncode, r.stderr))
    check(os.listdir(parent) == [] or all(not os.path.isdir(os.path.join(parent, d))
                                          for d in os.listdir(parent)),
          "the sandbox of a command with a background child was left behind")
    # SIGINT and SIGHUP reach the command (SIGTERM: hostile_run_same_uid_sibling).
    for sig in (signal.SIGINT, signal.SIGHUP):
        p = subprocess.Popen([c.egressctl, "--socket", c.sock, "run", "--policy", pol, "--",
                              HR_PY, "-c", HR_VICTIM.replace("SIGTERM", sig.name)],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        CLEANUP.push("run", lambda p=p: p.poll() is None and (p.kill(), p.wait(10)))
        line = p.stdout.readline()
        check(line.startswith("ready"), "the command did not start: %r" % line)
        p.send_signal(sig)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            raise TestFailure("%s to egressctl run did not end the command" % sig.name)
        check(p.returncode == 42, "%s: exit %d, expected the command's 42: %r" %
              (sig.name, p.returncode, p.stderr.read()))


@test
def hostile_run_dies_with_egressctl(c):
    # The command cannot outlive its launcher: SIGKILL to egressctl (which
    # cannot forward it) takes the sandbox's pid 1, and the pid namespace
    # with it; egressd, tied to the launcher, then detaches the sandbox
    # (test_lifetime.py checks the audit record and the cgroup).
    pol = c.policy(["127.0.0.1:%d" % c.tcp("a").port])
    parent = hr_parent(c)
    p = subprocess.Popen([c.egressctl, "--socket", c.sock, "run", "--policy", pol,
                          "--cgroup-parent", parent, "--", HR_PY, "-c", HR_VICTIM],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    CLEANUP.push("run", lambda: p.poll() is None and (p.kill(), p.wait(10)))

    def mine():
        return [sb for sb in c.list_json()
                if os.path.realpath(sb.get("cgroup", "")).startswith(parent + "/")]
    try:
        check(p.stdout.readline().startswith("ready"), "the command did not start")
        victim = hr_host_pid_of(parent, run_range_root)
        check(victim is not None, "no process of the command under %s" % parent)
        check(os.path.exists("/proc/%d" % victim), "twin: the command is not running")
        check(len(mine()) == 1, "twin: the running command's sandbox is not attached")
        p.kill()
        p.wait(10)
        check(wait_until(lambda: not os.path.exists("/proc/%d" % victim), 5),
              "the command (pid %d) outlived egressctl run" % victim)
        check(wait_until(lambda: not mine(), 3),
              "the sandbox of the killed run is still attached: %r" % mine())
    finally:
        for sb in mine():
            c.ctl("detach", "--id", str(sb["id"]))


@test
def hostile_run_seccomp_profile_matches(c):
    # The OCI profile for container runtimes refuses what run's filter does.
    r = c.ctl_ok("seccomp-profile")
    prof = json.loads(r.stdout)
    with open(os.path.join(c.state, "oci-seccomp.json")) as f:
        written = json.load(f)
    for p, what in ((prof, "egressctl seccomp-profile"), (written, "oci-seccomp.json")):
        refused = {r["names"][0] for r in p.get("syscalls", [])
                   if r.get("action") == "SCMP_ACT_ERRNO" and r.get("errnoRet") == errno_mod.EPERM
                   and not r.get("args")}
        for name in ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
                     "bpf", "io_uring_setup", "add_key", "keyctl", "request_key"):
            check(name in refused, "%s does not refuse %s: %r" % (what, name, sorted(refused)))
