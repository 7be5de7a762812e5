# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Red team 1 findings against `egressctl run` (issue 8 follow-up; the DNS
# rebinding ones live with the DNS proxy's tests). Run by run.py after
# test_hostile_run.py, whose helpers (hr_run, hr_findings, HR_PY, NOBODY, ...)
# it imports.
#
# Each test does what a hostile tool does and asserts the SECURE outcome, so
# it fails for as long as the hole is open. Traffic goes to loopback or to an
# address of a veth the test creates (delivered locally) only.

import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)
from test_hostile_run import (HR_PY, NOBODY, hr_findings, hr_no_leftovers, hr_parent, hr_is_root_uid,
                              hr_run, run_has_userns, run_range_root)


RT1_PRELUDE = r"""
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUSER = 0x00020000, 0x02000000, 0x10000000
def out(name, value):
    print("%s %s" % (name, value), flush=True)
def sys_err(ret):
    if ret >= 0:
        return "ok"
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
def err_of(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def write_file(path, data):
    with open(path, "w") as f:
        f.write(data)
"""

# argv: a scratch directory for mount points, the name of a v1 freezer
# cgroup below the v1 freezer root (the victim). A uid-0 tool makes a user
# namespace (full capabilities in it), then a mount and a cgroup namespace:
# its cgroup namespace root in every v1 hierarchy is where egressctl left
# it, the host's v1 root, and a v1 mount of its own shows the whole tree.
RT1_V1_FREEZE = RT1_PRELUDE + r"""
scratch, victim = sys.argv[1], sys.argv[2]
out("userns", sys_err(libc.unshare(CLONE_NEWUSER)))
out("mntcgns", sys_err(libc.unshare(CLONE_NEWNS | CLONE_NEWCGROUP)))
d = os.path.join(scratch, "v1freezer-%d" % os.getpid())
os.mkdir(d)
out("mount_v1", sys_err(libc.mount(b"none", d.encode(), b"cgroup", 0, b"freezer")))
out("freeze", err_of(lambda: write_file(os.path.join(d, victim, "freezer.state"), "FROZEN")))
libc.umount2(d.encode(), 2)
os.rmdir(d)
"""


def rt1_v1_freezer_root():
    """The host's cgroup v1 freezer mount point, or None."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if rfields and rfields[0] == "cgroup" and "freezer" in rfields[-1].split(",") and \
                    fields[3] == "/":
                return fields[4]
    return None


@test
def redteam1_run_userns_reaches_v1_cgroups(c):
    # Finding R1: seccomp does not refuse CLONE_NEWUSER; in a user namespace
    # of its own the uid-0 tool holds every capability over new mount and
    # cgroup namespaces, mounts the host's v1 hierarchies (its v1 cgroups are
    # the host's roots) and writes any root-owned control file there:
    # freezes another workload's cgroup, sets pids.max, cpu/memory limits.
    root = rt1_v1_freezer_root()
    scratch = tempfile.mkdtemp(prefix="rt1-")   # visible inside (not the work dir)
    CLEANUP.push("rt1 scratch", shutil.rmtree, scratch, True)
    os.chmod(scratch, 0o777)
    victim_proc = None
    victim_cg = None
    if root:
        victim = "rt1-victim-%s" % RAND
        victim_cg = os.path.join(root, victim)
        os.mkdir(victim_cg)
        victim_proc = subprocess.Popen(["sleep", "60"])

        def undo():
            try:
                write_file_quiet(os.path.join(victim_cg, "freezer.state"), "THAWED")
            finally:
                victim_proc.kill()
                victim_proc.wait(5)
                wait_until(lambda: not open(os.path.join(victim_cg, "cgroup.procs")).read(), 3)
                os.rmdir(victim_cg)
        CLEANUP.push("rt1 v1 victim", undo)
        with open(os.path.join(victim_cg, "cgroup.procs"), "w") as f:
            f.write(str(victim_proc.pid))
    else:
        victim = "no-v1-freezer-on-this-host"
    pol = c.policy(["127.0.0.1:1"])
    r = hr_run(c, pol, [HR_PY, "-c", RT1_V1_FREEZE, scratch, victim])
    f = hr_findings(r, "v1 freeze script under run")
    if root:
        with open(os.path.join(victim_cg, "freezer.state")) as fp:
            state = fp.read().strip()
        check(state == "THAWED", "a uid-0 tool under run froze a host v1 cgroup outside its "
              "sandbox (%s is %s): %r" % (victim_cg, state, f))
    # The door itself: no user namespace (and so no capability) for the tool.
    check(f.get("userns") == "EPERM",
          "unshare(CLONE_NEWUSER) under run gives the tool every capability in a new user "
          "namespace: %r" % f)


def write_file_quiet(path, data):
    try:
        with open(path, "w") as f:
            f.write(data)
    except OSError:
        pass


RT1_WRITE_ROOT_FILE = RT1_PRELUDE + r"""
path, newfile = sys.argv[1], sys.argv[2]
out("uid", os.getuid())
def append():
    with open(path, "a") as f:
        f.write("written from the sandbox\n")
def create():
    with open(newfile, "w") as f:
        f.write("/tmp/evil.so\n")
out("append", err_of(append))
out("create", err_of(create))
"""


@test
def redteam1_run_root_cannot_write_host_files(c):
    # Finding R2: uid 0 under run has no capability but still owns every
    # root-owned file it can name: /etc/passwd, /etc/crontab, /etc/cron.d,
    # /etc/ld.so.preload, /root/.ssh, egressd's own binary when it is not
    # running. That is host root (non-negotiable 7: may be root inside its
    # sandbox, nothing inside can leave it). Shown on a root-owned 0644 file
    # in a root-owned 0755 directory the test makes (the same modes /etc has).
    d = tempfile.mkdtemp(prefix="rt1-etc-")
    CLEANUP.push("rt1 etc", shutil.rmtree, d, True)
    os.chmod(d, 0o755)
    path = os.path.join(d, "passwd")
    with open(path, "w") as f:
        f.write("root:x:0:0:root:/root:/bin/sh\n")
    os.chmod(path, 0o644)
    newfile = os.path.join(d, "ld.so.preload")
    pol = c.policy(["127.0.0.1:1"])
    # Twin: as --user 65534 the same script is refused (the modes are right).
    r = hr_run(c, pol, [HR_PY, "-c", RT1_WRITE_ROOT_FILE, path, newfile],
               ["--user", str(NOBODY)])
    f = hr_findings(r, "write script as nobody")
    check(f.get("append") == "EACCES" and f.get("create") == "EACCES",
          "twin: uid 65534 could write the root-owned files: %r" % f)
    r = hr_run(c, pol, [HR_PY, "-c", RT1_WRITE_ROOT_FILE, path, newfile])
    f = hr_findings(r, "write script as uid 0")
    check(hr_is_root_uid(c, f.get("uid")), "not run's uid 0: %r" % f)
    with open(path) as fp:
        content = fp.read()
    check("sandbox" not in content and not os.path.exists(newfile),
          "uid 0 under run wrote a root-owned host file (append %s, create %s): host root "
          "files such as /etc/passwd, /etc/crontab and /etc/ld.so.preload are as open"
          % (f.get("append"), f.get("create")))


RT1_TIOCSTI = RT1_PRELUDE + r"""
import fcntl, termios
out("isatty", os.isatty(0))
def inject():
    for ch in "RT1-INJECTED\n":
        fcntl.ioctl(0, termios.TIOCSTI, ch.encode())
out("tiocsti", err_of(inject))
"""


@test
def redteam1_run_cannot_inject_into_the_terminal(c):
    # Finding R5: the command stays in the caller's session with the caller's
    # terminal as its controlling tty (no setsid, no pty of its own), and
    # dev.tty.legacy_tiocsti is 1 here: TIOCSTI pushes a line into the
    # terminal's input, which the operator's shell runs as soon as egressctl
    # returns: root outside the sandbox, also with --user 65534.
    import pty
    import fcntl
    import termios
    master, slave = pty.openpty()
    CLEANUP.push("rt1 pty", lambda: [os.close(fd) for fd in (master, slave)])

    def as_shell():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    pol = c.policy(["127.0.0.1:1"])
    argv = [c.egressctl, "--socket", c.sock, "run", "--policy", pol, "--user", str(NOBODY),
            "--", HR_PY, "-c", RT1_TIOCSTI]
    r = subprocess.run(argv, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=CTL_TIMEOUT_S, preexec_fn=as_shell)
    log("run tiocsti -> %d %r %r" % (r.returncode, r.stdout, r.stderr))
    f = hr_findings(r, "TIOCSTI script under run")
    check(f.get("isatty") == "True", "twin: the command's stdin is not the terminal: %r" % f)
    # What the operator's shell would read next from its terminal.
    os.set_blocking(slave, False)
    pending = b""
    end = time.time() + 1
    while time.time() < end:
        try:
            pending += os.read(slave, 4096)
        except BlockingIOError:
            time.sleep(0.05)
    check(b"RT1-INJECTED" not in pending and f.get("tiocsti") != "ok",
          "the sandboxed command (uid %d) pushed %r into the caller's terminal input "
          "(TIOCSTI %s): the operator's shell runs it outside the sandbox" %
          (NOBODY, pending, f.get("tiocsti")))


RT1_KILL_GROUP = RT1_PRELUDE + r"""
import signal, time
# kill(0) includes the caller itself: it handles the signal (and so shows
# that kill(0) does reach its own group, the twin).
signal.signal(signal.SIGUSR1, lambda *a: out("self_signalled", 1))
out("pgrp", os.getpgrp())
out("kill0", err_of(lambda: os.kill(0, signal.SIGUSR1)))
time.sleep(0.2)
"""


@test
def redteam1_run_cannot_signal_its_callers_group(c):
    # Finding R6: the command shares egressctl's process group; kill(0, sig)
    # reaches every member of it outside the pid namespace: egressctl and the
    # tool runtime that started it (same uid: uid 0 signals root ones).
    # egressctl dies of it too and leaves its sandbox cgroup attached: a
    # --cgroup-parent of the test's own keeps that inside the test's tree.
    pol = c.policy(["127.0.0.1:1"])
    parent = hr_parent(c)
    before = c.list_json()
    script = ("trap 'echo RT1-CALLER-SIGNALLED' USR1; "
              "%s --socket %s run --policy %s --cgroup-parent %s -- %s -c \"$1\"; "
              "echo rc=$?" % (c.egressctl, c.sock, pol, parent, HR_PY))
    r = subprocess.run(["sh", "-c", script, "sh", RT1_KILL_GROUP], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=CTL_TIMEOUT_S, start_new_session=True)
    log("run kill(0) -> %d %r %r" % (r.returncode, r.stdout, r.stderr))
    check("RT1-CALLER-SIGNALLED" not in r.stdout,
          "kill(0, SIGUSR1) from inside the sandbox reached its caller outside it: %r %r" %
          (r.stdout, r.stderr))
    for d in os.listdir(parent):      # what a killed egressctl left behind
        if os.path.isdir(os.path.join(parent, d)):
            c.ctl("detach", "--cgroup", os.path.join(parent, d))
    check("rc=0" in r.stdout, "egressctl itself was killed from inside its sandbox: %r" %
          r.stdout)
    check("self_signalled 1" in r.stdout and "kill0 ok" in r.stdout,
          "twin: kill(0, SIGUSR1) did not reach the command's own group: %r" % r.stdout)
    hr_no_leftovers(c, parent, before)


RT1_PROC_WRITE = RT1_PRELUDE + r"""
import glob
irqs = sorted(glob.glob("/proc/irq/*/smp_affinity"))
p = irqs[0] if irqs else "/proc/irq/default_smp_affinity"
cur = open(p).read().strip()
out("path", p)
# The value it already has: no change to the host, only whether it may.
out("irq_write", err_of(lambda: write_file(p, cur)))
out("pci_open", err_of(lambda: os.close(os.open(sorted(glob.glob("/proc/bus/pci/*/*"))[0],
                                                  os.O_WRONLY)))
    if glob.glob("/proc/bus/pci/*/*") else "none")
"""


@test
def redteam1_run_proc_host_knobs_read_only(c):
    # Finding R7: only /proc/sys and /proc/sysrq-trigger are made read-only in
    # the fresh procfs. uid 0 needs no capability to write the host's IRQ
    # affinities (/proc/irq/*/smp_affinity, default_smp_affinity) and opens
    # PCI config space (/proc/bus/pci/*/*) for writing. The test writes an
    # IRQ's current value back (no change) and only opens the PCI file.
    pol = c.policy(["127.0.0.1:1"])
    r = hr_run(c, pol, [HR_PY, "-c", RT1_PROC_WRITE])
    f = hr_findings(r, "procfs script under run")
    check(f.get("irq_write") in ("EROFS", "EACCES", "ENOENT"),
          "uid 0 under run may write host IRQ affinity %s: %r" % (f.get("path"), f))
    check(f.get("pci_open") in ("EROFS", "EACCES", "ENOENT", "none"),
          "uid 0 under run opens PCI config space for writing: %r" % f)


RT1_KEYRING = RT1_PRELUDE + r"""
KEY_SPEC_USER_KEYRING = -4
r = libc.syscall(248, b"user", sys.argv[1].encode(), b"from-the-sandbox", 16,
                 ctypes.c_long(KEY_SPEC_USER_KEYRING))      # add_key(2), x86_64
out("add_key", sys_err(r))
"""


@test
def redteam1_run_no_shared_root_keyring(c):
    # Finding R8: keyctl/add_key/request_key are not refused. uid 0 in every
    # sandbox shares one user keyring with host root (@u of uid 0): keys put
    # there outlive the run, are read by the next sandbox (another tenant's),
    # and the host root's own @u keys are readable and revocable from inside.
    if platform_machine() != "x86_64":
        return
    desc = "rt1-key-%s" % RAND
    pol = c.policy(["127.0.0.1:1"])
    r = hr_run(c, pol, [HR_PY, "-c", RT1_KEYRING, desc])
    f = hr_findings(r, "keyring script under run")
    left = subprocess.run(["sh", "-c", "grep -c ' %s: ' /proc/keys" % desc],
                          stdout=subprocess.PIPE, text=True).stdout.strip()
    # Tidy up what it left (revoke by the id /proc/keys shows).
    for line in open("/proc/keys"):
        if (" %s: " % desc) in line:
            libc_revoke(int(line.split()[0], 16))
    check(f.get("add_key") == "EPERM",
          "add_key(2) into uid 0's user keyring (shared with host root and every uid-0 "
          "sandbox) works under run: %r (left in /proc/keys: %s)" % (f, left))


def platform_machine():
    return os.uname().machine


def libc_revoke(key_id):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(250, 3, key_id)                        # keyctl(KEYCTL_REVOKE)
    libc.syscall(250, 9, key_id, ctypes.c_long(-4))     # keyctl(KEYCTL_UNLINK, @u)


RT1_TERMINAL = r"""
import errno, os, signal, sys, time
signal.signal(signal.SIGINT, lambda *a: (print("sigint", flush=True), os._exit(42)))
try:
    os.close(os.open("/dev/tty", os.O_RDWR))
    print("ctty yes", flush=True)
except OSError as e:
    print("ctty", errno.errorcode.get(e.errno, e.errno), flush=True)
# Its session and group are those of the sandbox's pid 1 (0: a leader outside).
print("sid", os.getsid(0), "pgrp", os.getpgrp(), flush=True)
print("ready", flush=True)
print("got", sys.stdin.readline().strip(), flush=True)
end = time.monotonic() + 10
while time.monotonic() < end:
    time.sleep(0.05)
os._exit(3)
"""


def rt1_read_until(fd, want, timeout=10):
    import select
    buf = b""
    end = time.time() + timeout
    while want not in buf and time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                buf += os.read(fd, 4096)
            except OSError:
                break
    return buf


@test
def hostile_run2_terminal_still_usable(c):
    # Twin of redteam1_run_cannot_inject_into_the_terminal: with its own
    # session and no controlling terminal the command still reads and writes
    # the caller's terminal, and Ctrl-C typed there reaches it (the terminal
    # signals egressctl's foreground group; egressctl forwards).
    import pty
    import fcntl
    import termios
    master, slave = pty.openpty()
    CLEANUP.push("rt1 pty", lambda: [os.close(fd) for fd in (master, slave)])

    def as_shell():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    pol = c.policy(["127.0.0.1:1"])
    p = subprocess.Popen([c.egressctl, "--socket", c.sock, "run", "--policy", pol, "--user",
                          str(NOBODY), "--", HR_PY, "-c", RT1_TERMINAL],
                         stdin=slave, stdout=slave, stderr=slave, preexec_fn=as_shell)
    CLEANUP.push("run", lambda: p.poll() is None and (p.kill(), p.wait(10)))
    out = rt1_read_until(master, b"ready")
    check(b"ready" in out, "the command under run did not start on the terminal: %r" % out)
    check(b"ctty ENXIO" in out, "the command has a controlling terminal: %r" % out)
    check(b"sid 1 pgrp 1" in out, "the command is not in a session of the sandbox's pid 1: "
          "%r" % out)
    os.write(master, b"hello-from-the-terminal\n")
    out = rt1_read_until(master, b"got hello-from-the-terminal")
    check(b"got hello-from-the-terminal" in out,
          "the command could not read a line typed on the terminal: %r" % out)
    os.write(master, b"\x03")   # Ctrl-C, as typed
    try:
        p.wait(15)
    except subprocess.TimeoutExpired:
        raise TestFailure("Ctrl-C on the terminal did not end the command under run")
    out += rt1_read_until(master, b"sigint", 2)
    check(p.returncode == 42 and b"sigint" in out,
          "Ctrl-C on the terminal: exit %d, expected the command's 42: %r" % (p.returncode, out))


RT1_IDENTITY = RT1_PRELUDE + r"""
import socket
secret, public, abstract = sys.argv[1], sys.argv[2], sys.argv[3]
out("uid", "%d:%d" % (os.getuid(), os.getgid()))
out("uid_map", " ".join(open("/proc/self/uid_map").read().split()))
out("gid_map", " ".join(open("/proc/self/gid_map").read().split()))
out("secret", err_of(lambda: open(secret).read()))
out("public", err_of(lambda: open(public).read()))
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("\0" + abstract)
s.sendall(b"x")
s.recv(1)
s.close()
out("connected", "yes")
"""


def rt1_peer_uids(name, n):
    """Accept n connections on abstract socket name; the SO_PEERCRED uid:gid of each."""
    import struct
    lis = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lis.bind("\0" + name)
    lis.listen(4)
    lis.settimeout(PROBE_TIMEOUT_S)
    got = []

    def serve():
        try:
            for _ in range(n):
                conn, _ = lis.accept()
                with conn:
                    cred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                           struct.calcsize("3i"))
                    _, uid, gid = struct.unpack("3i", cred)
                    got.append("%d:%d" % (uid, gid))
                    conn.recv(1)
                    conn.sendall(b"y")
        except OSError as e:
            got.append("error %s" % e)
        finally:
            lis.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t, got


@test
def hostile_run2_root_is_nobody_to_the_host(c):
    # F2 beyond file writes: uid 0 under run reads no root-only file (like
    # /etc/shadow) and is its range's first id to a unix socket peer (a root-only host
    # agent that trusts SO_PEERCRED uid 0). Twins: a 0644 file of the same
    # directory is readable, and a root process outside is uid 0 to the peer.
    d = tempfile.mkdtemp(prefix="rt1-id-")
    CLEANUP.push("rt1 id", shutil.rmtree, d, True)
    os.chmod(d, 0o755)
    secret, public = os.path.join(d, "shadow"), os.path.join(d, "motd")
    for p, mode in ((secret, 0o600), (public, 0o644)):
        with open(p, "w") as f:
            f.write("root-only\n" if mode == 0o600 else "public\n")
        os.chmod(p, mode)
    name = "egr-rt1-peer-%s" % RUN_ID
    t, got = rt1_peer_uids(name, 2)
    # Twin outside run: root is uid 0 to the peer.
    r = subprocess.run([sys.executable, "-c", "import socket; s = socket.socket(socket.AF_UNIX);"
                        "s.connect('\\0%s'); s.sendall(b'x'); s.recv(1)" % name],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=PROBE_TIMEOUT_S)
    check(r.returncode == 0, "twin: root outside could not connect: %r" % r.stderr)
    pol = c.policy(["127.0.0.1:1"])
    r = hr_run(c, pol, [HR_PY, "-c", RT1_IDENTITY, secret, public, name])
    t.join(PROBE_TIMEOUT_S)
    f = hr_findings(r, "identity script under run")
    um = (f.get("uid_map") or "").split()
    base = int(um[1]) if len(um) == 3 else -1
    if not run_has_userns(c):
        # No user namespace (a chroot): the host id is the uid itself.
        base = int((f.get("uid") or "-1:").split(":")[0] or -1)
    if run_has_userns(c):
        check(f.get("uid") == "0:0" and um[0::2] == ["0", "65536"] and run_range_root(base)
              and f.get("gid_map") == f.get("uid_map"),
              "uid 0 under run is not 0:0 of a host range of its own: %r" % f)
    else:
        check(run_range_root(int(f.get("uid", "0:0").split(":")[0])),
              "without a user namespace uid 0 under run is not its range's first id: %r" % f)
    check(f.get("secret") == "EACCES", "uid 0 under run read a root-only 0600 file: %r" % f)
    check(f.get("public") == "ok", "twin: a 0644 file was not readable under run: %r" % f)
    check(len(got) == 2 and got[0] == "0:0",
          "twin: root outside run is not uid 0 to the peer: %r" % got)
    check(len(got) > 1 and got[1] == "%d:%d" % (base, base),
          "uid 0 under run is %s to a unix socket peer, expected %d:%d" %
          (got[1] if len(got) > 1 else "nothing", base, base))


RT1_MAP_ROOT = r"""
import os, sys
print("uid", "%d:%d" % (os.getuid(), os.getgid()), flush=True)
print("uid_map", " ".join(open("/proc/self/uid_map").read().split()), flush=True)
with open(os.path.join(sys.argv[1], "made-as-root"), "w") as f:
    f.write("x")
"""


@test
def hostile_run2_map_root_to(c):
    # --map-root-to: the host identity of uid 0 inside is the operator's
    # choice (one uid per tenant); never host root. Twin: the default is a
    # host range of the run's own.
    d = tempfile.mkdtemp(prefix="rt1-map-")
    CLEANUP.push("rt1 map", shutil.rmtree, d, True)
    os.chmod(d, 0o777)
    pol = c.policy(["127.0.0.1:1"])
    uid = 40000 + random.randrange(20000)
    for opts, want in ((["--map-root-to", "%d:%d" % (uid, uid + 1)], (uid, uid + 1)),
                       ([], None)):
        made = os.path.join(d, "made-as-root")
        if os.path.exists(made):
            os.unlink(made)
        r = hr_run(c, pol, [HR_PY, "-c", RT1_MAP_ROOT, d], opts)
        f = hr_findings(r, "map-root script %r" % opts)
        if want is None and not run_has_userns(c):
            # No user namespace (a chroot): uid 0 is its range's first id.
            u = int((f.get("uid") or "-1:").split(":")[0] or -1)
            check(run_range_root(u), "default: uid 0 not its range's first id: %r" % f)
            want = (u, u)
        elif want is None:
            um = (f.get("uid_map") or "").split()
            check(len(um) == 3 and um[0::2] == ["0", "65536"] and run_range_root(int(um[1])),
                  "default: uid 0 not mapped to a range of its own: %r" % f)
            want = (int(um[1]), int(um[1]))
        elif run_has_userns(c):
            check(f.get("uid") == "0:0" and f.get("uid_map") == "0 %d 1" % want[0],
                  "%r: not uid 0 mapped to %d: %r" % (opts, want[0], f))
        else:
            check(f.get("uid") == "%d:%d" % want,
                  "%r: without a user namespace not host %d:%d: %r" % (opts, want[0],
                                                                     want[1], f))
        st = os.stat(made)
        check((st.st_uid, st.st_gid) == want, "%r: the file uid 0 made is %d:%d on the host, "
              "expected %d:%d" % (opts, st.st_uid, st.st_gid, want[0], want[1]))
    # Host root, or together with --user: refused before anything exists.
    before = c.list_json()
    for opts in (["--map-root-to", "0"], ["--map-root-to", "%d:0" % uid],
                 ["--map-root-to", "x"], ["--user", str(NOBODY), "--map-root-to", str(uid)]):
        r = hr_run(c, pol, ["/bin/echo", "started"], opts)
        check(r.returncode == 2 and "--map-root-to" in r.stderr and "started" not in r.stdout,
              "%r: exit %d %r %r (expected 2 naming --map-root-to)" %
              (opts, r.returncode, r.stdout, r.stderr))
    check(c.list_json() == before, "a refused --map-root-to left sandboxes: %r" % c.list_json())
