# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Issue 23, "nothing in a sandbox can signal, stop or trace egressd": with
# --user egressd is a system user of its own once set up (user/egressd/
# harden.c), so a tool that is uid 0 without capabilities in an attach-mode
# sandbox gets EPERM from kill() and ptrace(), and cannot read its /proc
# files. The rest of the suite runs egressd as root (tests/e2e/harness/ctx.py
# Daemon); this test starts its own egressd with --user.

import errno
import json
import os
import shutil
import signal
import subprocess
import sys

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)

CU_NOCAPS = ["setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--"]

# As the capability-less root, in the sandbox: SIGSTOP, SIGKILL(0), ptrace
# attach and /proc/<pid>/environ of egressd; one line per result.
CU_ATTACK = r"""
import ctypes, os, signal, sys
pid = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
for name, sig in (("stop", signal.SIGSTOP), ("probe", 0)):
    try:
        os.kill(pid, sig)
        print(name, "ok")
    except OSError as e:
        print(name, e.errno)
r = libc.ptrace(16, pid, 0, 0)  # PTRACE_ATTACH
print("ptrace", "ok" if r == 0 else ctypes.get_errno())
try:
    open("/proc/%d/environ" % pid).read()
    print("environ ok")
except OSError as e:
    print("environ", e.errno)
"""

# What --user keeps (harden.c): bpf, perfmon, net_admin, sys_admin, kill,
# dac_override, linux_immutable (the ledger files' append-only flag).
CU_CAPS = (1 << 39) | (1 << 38) | (1 << 12) | (1 << 21) | (1 << 5) | (1 << 1) | (1 << 9)


def cu_user(c, tag):
    """A system user of this run; removed at the end."""
    name = "egr%s%s" % (RUN_ID.rsplit("-", 1)[-1][:6], tag[-3:])
    check(shutil.which("useradd") is not None, "no useradd to create a system user with")
    r = subprocess.run(["useradd", "--system", "--no-create-home", "--user-group", "--shell",
                        "/usr/sbin/nologin", name], capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, "useradd %s: %s" % (name, r.stderr.strip()))
    CLEANUP.push("user " + name, lambda: subprocess.run(["userdel", name], capture_output=True,
                                                        timeout=30))
    import pwd
    return name, pwd.getpwnam(name).pw_uid


def cu_status_line(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return line.split(":", 1)[1].split()
    return []


def cu_start(c, user, tag, wrap):
    sock = os.path.join(c.work, tag + ".sock")
    bpffs = "/sys/fs/bpf/%s-%s" % (RUN_ID, tag)
    logp = os.path.join(c.work, tag + ".log")
    CLEANUP.push("bpffs " + bpffs, shutil.rmtree, bpffs, True)
    logf = open(logp, "wb")
    proc = subprocess.Popen(
        wrap + [c.egressd, "--socket", sock, "--bpffs-dir", bpffs, "--state-dir",
         os.path.join(c.work, tag + "-state"), "--log-level", "debug", "--metrics-addr", "off",
         "--no-syslog", "--user", user] + list(getattr(c, "dns_args", [])),
        stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
    logf.close()

    def stop():
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
    CLEANUP.push("egressd " + tag, stop)

    def log_tail():
        with open(logp, errors="replace") as f:
            return "".join(line for line in f.readlines()[-30:] if "libbpf" not in line)
    ok = wait_until(lambda: proc.poll() is not None or run(
        [c.egressctl, "--socket", sock, "status"], timeout=5).returncode in (0, 5), 60, 0.2)
    check(ok and proc.poll() is None, "egressd --user did not come up:\n" + log_tail())
    return proc, sock, stop, log_tail


# The unit's way: started as the user with ambient capabilities (User=,
# AmbientCapabilities= of dist/egressd.service.in).
CU_AMBIENT = "+bpf,+perfmon,+net_admin,+sys_admin,+chown,+kill,+dac_override,+linux_immutable"


@test
def ctluser_capless_root_cannot_signal_or_trace(c):
    """egressd started as root with --user (the package's check-deb and a
    DaemonSet's way)."""
    cu_check(c, "user-root", [])


@test
def ctluser_started_as_user_with_ambient_caps(c):
    """egressd started as the user with the unit's ambient capabilities."""
    cu_check(c, "user-amb", None)


def cu_check(c, tag, wrap):
    user, uid = cu_user(c, tag)
    if wrap is None:
        wrap = ["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--init-groups",
                "--inh-caps=" + CU_AMBIENT, "--ambient-caps=" + CU_AMBIENT,
                "--bounding-set=-all," + CU_AMBIENT, "--"]
    proc, sock, stop, log_tail = cu_start(c, user, tag, wrap)
    pid = proc.pid
    ctl = [c.egressctl, "--socket", sock]
    # It is that user, all four uids, with exactly the kept capabilities.
    check(cu_status_line(pid, "Uid") == [str(uid)] * 4, "egressd's uids: %r" %
          cu_status_line(pid, "Uid"))
    eff = int(cu_status_line(pid, "CapEff")[0], 16)
    # The bounding set: exactly those after a start as root; started as the
    # user (no CAP_SETPCAP to drop from it) the unit's, CAP_CHOWN included.
    bnd = int(cu_status_line(pid, "CapBnd")[0], 16)
    check(eff == CU_CAPS and int(cu_status_line(pid, "CapPrm")[0], 16) == CU_CAPS and
          (bnd == CU_CAPS if tag == "user-root" else bnd == CU_CAPS | 1) and
          int(cu_status_line(pid, "CapAmb")[0], 16) == 0 and
          int(cu_status_line(pid, "CapInh")[0], 16) == 0,
          "egressd's capabilities: eff %x bnd %s amb %s (want %x)" % (
              eff, cu_status_line(pid, "CapBnd"), cu_status_line(pid, "CapAmb"), CU_CAPS))
    st = json.loads(run(ctl + ["status", "--json"]).stdout)
    check(st["hardening"]["uid"] == uid, "status hardening: %r" % st["hardening"])
    t = c.tcp("cu-open")
    cg = c.mkcgroup("cu-sb")
    CLEANUP.push("cgroup", cgroup_remove_tree, cg)
    pol = c.policy(["127.0.0.9:1"])
    r = run(ctl + ["attach", "--cgroup", cg, "--policy", pol])
    check(r.returncode == 0, "attach under --user: %s" % r.stderr)
    try:
        c.denied(cg, "tcp", "127.0.0.1", t.port)
        # Hostile: uid 0 without capabilities in the sandbox.
        r = subprocess.run(CU_NOCAPS + [sys.executable, "-c", CU_ATTACK, str(pid)],
                           capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                           preexec_fn=join_cgroup_fn(cg))
        got = dict(line.split() for line in r.stdout.splitlines() if line.strip())
        log("capless root against egressd --user: %r" % got)
        check(got.get("stop") == str(errno.EPERM), "kill(SIGSTOP): %r" % got)
        check(got.get("probe") == str(errno.EPERM), "kill(0): %r" % got)
        check(got.get("ptrace") == str(errno.EPERM), "ptrace(PTRACE_ATTACH): %r" % got)
        check(got.get("environ") == str(errno.EACCES), "/proc/<egressd>/environ: %r" % got)
        check(cu_status_line(pid, "State")[0] != "T", "egressd was stopped")
        # Sanity twin: an administrator with CAP_KILL stops and continues it.
        os.kill(pid, signal.SIGSTOP)
        check(wait_until(lambda: cu_status_line(pid, "State")[0] == "T", 5, 0.02),
              "the admin's SIGSTOP did not stop egressd")
        os.kill(pid, signal.SIGCONT)
        # And as that user it still does its job: update, enforce, detach.
        r = run(ctl + ["update", "--cgroup", cg, "--policy",
                       c.policy(["tcp/127.0.0.1:%d" % t.port])])
        check(r.returncode == 0, "update under --user: %s\n%s" % (r.stderr, log_tail()))
        c.allowed(cg, "tcp", "127.0.0.1", t.port)
    finally:
        r = run(ctl + ["detach", "--cgroup", cg])
    check(r.returncode == 0, "detach under --user: %s" % r.stderr)
    stop()
    # An ASan build's LeakSanitizer cannot stop the world in a hardened
    # egressd (seccomp refuses ptrace; root or not) and exits 1 after it.
    tail = log_tail()
    check(proc.returncode == 0 or (proc.returncode == 1 and "signal 15: exiting" in tail and
                                   "LeakSanitizer has encountered a fatal error" in tail),
          "egressd --user exited %s:\n%s" % (proc.returncode, tail))
