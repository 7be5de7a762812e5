#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""End-to-end tests of egressd: real BPF programs on real cgroups, real sockets.

Run as root:  python3 tests/e2e/run.py --build build [-k PATTERN] [-v]

It starts its own egressd (private control socket, bpffs dir and state dir),
creates cgroups under the cgroup2 mount, attaches policies with egressctl and
runs build/tests/netprobe inside those cgroups against servers that this
process runs on loopback and in a network namespace it creates.

Every resource it makes carries the name egressd-e2e-<pid>-<rand> (network
interfaces, limited to 15 bytes, carry a short tag and the full name as their
alias) and is removed on exit, on failure too.

Exit status: 0 all passed, 1 a test failed (or a prerequisite is missing and
CI=true), 77 skipped (not root, no cgroup2, nothing built) outside CI.
"""

import argparse
import atexit
import errno as errno_mod
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

SUITE_TIMEOUT_S = 240          # hard stop for the whole run
DAEMON_READY_S = 10            # egressd must answer `status` within this
PROBE_TIMEOUT_S = 10           # one netprobe run (its own calls are bounded by 2 s)
CTL_TIMEOUT_S = 30             # one egressctl call

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
    end = time.monotonic() + timeout
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


# --- servers (in this process, outside every sandbox) -------------------------------


class TcpServer:
    """Accepts, reads what comes within 2 s, answers "pong", closes."""

    def __init__(self, host, port=0):
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(fam, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if fam == socket.AF_INET6:
            self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, 23, 16)  # TCP_FASTOPEN queue
        except OSError:
            pass
        self.sock.bind((host, port))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.host = host
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.stop = False
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted += 1
            try:
                c.settimeout(2)
                c.recv(64)
                c.sendall(b"pong")
            except OSError:
                pass
            finally:
                c.close()

    def close(self):
        self.stop = True
        self.thread.join(2)
        self.sock.close()


class UdpServer:
    """Counts the datagrams it receives."""

    def __init__(self, host, port=0):
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(fam, socket.SOCK_DGRAM)
        if fam == socket.AF_INET6:
            self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        self.sock.bind((host, port))
        self.sock.settimeout(0.2)
        self.host = host
        self.port = self.sock.getsockname()[1]
        self.received = 0
        self.stop = False
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stop:
            try:
                self.sock.recvfrom(2048)
            except socket.timeout:
                continue
            except OSError:
                return
            self.received += 1

    def wait_for(self, n, timeout=2):
        return wait_until(lambda: self.received >= n, timeout)

    def close(self):
        self.stop = True
        self.thread.join(2)
        self.sock.close()


def tcp_udp_pair(host, tries=20):
    """A TCP listener and a UDP socket on the same port number."""
    for _ in range(tries):
        t = TcpServer(host)
        try:
            u = UdpServer(host, t.port)
            return t, u
        except OSError:
            t.close()
    raise RuntimeError("no port free for both TCP and UDP on %s" % host)


# The server run inside the network namespace (python3 -c). It listens on every
# (address, port) given as argv, TCP and UDP, answers TCP with "pong", prints
# "ready" once bound and exits after 300 s or when its stdin closes.
NETNS_SERVER = r"""
import select, socket, sys, threading, time
socks = []
for spec in sys.argv[1:]:
    host, port = spec.rsplit(":", 1)
    host = host.strip("[]")
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    t = socket.socket(fam, socket.SOCK_STREAM)
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.bind((host, int(port))); t.listen(64)
    u = socket.socket(fam, socket.SOCK_DGRAM); u.bind((host, int(port)))
    socks += [t, u]
print("ready", flush=True)
def stdin_watch():
    sys.stdin.read()
    import os; os._exit(0)
threading.Thread(target=stdin_watch, daemon=True).start()
end = time.monotonic() + 300
while time.monotonic() < end:
    r, _, _ = select.select(socks, [], [], 1)
    for s in r:
        if s.type == socket.SOCK_STREAM:
            c, _ = s.accept(); c.settimeout(2)
            try:
                c.recv(64); c.sendall(b"pong")
            except OSError:
                pass
            c.close()
        else:
            s.recvfrom(2048)
"""


class NetNs:
    """A netns joined to the host by a veth pair.

    host side 10.254.X.1/30, namespace side 10.254.X.2/30 plus 10.254.X.5/32
    (routed from the host via .2), and fd00:e9e:X::1/64 <-> fd00:e9e:X::2/64.
    The namespace runs a python server on 8000, 8080 and 9000 of .2 and ::2,
    and on 8000 of .5.
    """

    PORTS = (8000, 8080, 9000)

    def __init__(self):
        self.name = RUN_ID
        self.host_if = "eh" + IF_TAG
        self.ns_if = "en" + IF_TAG
        self.proc = None
        x = None
        used = run(["ip", "-4", "addr", "show"]).stdout + run(["ip", "-4", "route", "show"]).stdout
        for i in range(256):
            cand = (PID + i) % 250 + 1
            if ("10.254.%d." % cand) not in used:
                x = cand
                break
        if x is None:
            raise RuntimeError("no free 10.254.x.0/29 block")
        self.x = x
        self.host4 = "10.254.%d.1" % x
        self.ns4 = "10.254.%d.2" % x
        self.ns4b = "10.254.%d.5" % x
        self.host6 = "fd00:e9e:%x::1" % x
        self.ns6 = "fd00:e9e:%x::2" % x
        CLEANUP.push("netns " + self.name, self.destroy)
        ns = ["ip", "netns", "exec", self.name]
        must(["ip", "netns", "add", self.name])
        must(["ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if])
        must(["ip", "link", "set", "dev", self.host_if, "alias", RUN_ID])
        must(["ip", "link", "set", "dev", self.ns_if, "alias", RUN_ID])
        must(["ip", "link", "set", self.ns_if, "netns", self.name])
        must(["ip", "addr", "add", self.host4 + "/30", "dev", self.host_if])
        must(["ip", "-6", "addr", "add", self.host6 + "/64", "dev", self.host_if, "nodad"])
        must(["ip", "link", "set", self.host_if, "up"])
        must(ns + ["ip", "link", "set", "lo", "up"])
        must(ns + ["ip", "addr", "add", self.ns4 + "/30", "dev", self.ns_if])
        must(ns + ["ip", "addr", "add", self.ns4b + "/32", "dev", self.ns_if])
        must(ns + ["ip", "-6", "addr", "add", self.ns6 + "/64", "dev", self.ns_if, "nodad"])
        must(ns + ["ip", "link", "set", self.ns_if, "up"])
        must(["ip", "route", "add", "10.254.%d.4/30" % x, "via", self.ns4, "dev", self.host_if])
        specs = ["%s:%d" % (self.ns4, p) for p in self.PORTS]
        specs += ["[%s]:%d" % (self.ns6, p) for p in self.PORTS]
        specs += ["%s:8000" % self.ns4b]
        self.proc = subprocess.Popen(ns + [sys.executable, "-c", NETNS_SERVER] + specs,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        CLEANUP.push("netns server", self.stop_server)
        line = self._readline(10)
        if line.strip() != "ready":
            raise RuntimeError("netns server did not start: %r %s" % (line, self.server_err()))
        # The veth must pass traffic before a test relies on it.
        ok = wait_until(lambda: self._host_probe(self.ns4, 8000) and
                        self._host_probe(self.ns6, 8000) and
                        self._host_probe(self.ns4b, 8000), 10, 0.2)
        if not ok:
            raise RuntimeError("netns %s is not reachable over %s" % (self.name, self.host_if))

    def _readline(self, timeout):
        out = []
        t = threading.Thread(target=lambda: out.append(self.proc.stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        return out[0] if out else ""

    def server_err(self):
        if self.proc and self.proc.poll() is not None:
            return self.proc.stderr.read()
        return ""

    @staticmethod
    def _host_probe(host, port):
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            with socket.socket(fam, socket.SOCK_STREAM) as s:
                s.settimeout(1)
                s.connect((host, port))
                return True
        except OSError:
            return False

    def stop_server(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def destroy(self):
        self.stop_server()
        run(["ip", "link", "del", self.host_if])
        run(["ip", "netns", "del", self.name])


# --- egressd and egressctl ------------------------------------------------------------


class Daemon:
    def __init__(self, ctx):
        self.ctx = ctx
        self.proc = None
        self.logf = None

    def start(self):
        c = self.ctx
        self.logf = open(c.daemon_log, "ab")
        self.logf.write(("--- egressd start at %s ---\n" % time.strftime("%T")).encode())
        self.logf.flush()
        self.proc = subprocess.Popen(
            [c.egressd, "--socket", c.sock, "--bpffs-dir", c.bpffs, "--state-dir", c.state,
             "--log-level", "debug"],
            stdin=subprocess.DEVNULL, stdout=self.logf, stderr=self.logf)
        log("egressd pid %d" % self.proc.pid)

        def ready():
            if self.proc.poll() is not None:
                return True
            try:
                return run([c.egressctl, "--socket", c.sock, "status"], timeout=5).returncode == 0
            except subprocess.TimeoutExpired:
                return False

        ok = wait_until(ready, DAEMON_READY_S, 0.1)
        if self.proc.poll() is not None:
            raise RuntimeError("egressd exited with status %d at start:\n%s" %
                               (self.proc.returncode, self.ctx.log_tail()))
        if not ok:
            raise RuntimeError("egressd did not answer `status` within %d s:\n%s" %
                               (DAEMON_READY_S, self.ctx.log_tail()))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait(10)
        if self.logf:
            self.logf.close()
            self.logf = None

    def stop(self):
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.logf:
            self.logf.close()
            self.logf = None


class ProbeResult:
    def __init__(self, argv, rc, out, err):
        self.argv = argv
        self.rc = rc
        self.line = out.strip().splitlines()[0] if out.strip() else ""
        self.stderr = err.strip()
        parts = self.line.split()
        self.errno = parts[1] if len(parts) >= 2 and parts[0] == "err" else None

    def __str__(self):
        return "`%s` -> exit %d, %r%s" % (" ".join(self.argv), self.rc, self.line,
                                           (" (%s)" % self.stderr) if self.stderr else "")


class Ctx:
    def __init__(self, build):
        self.build = build
        self.egressd = os.path.join(build, "egressd")
        self.egressctl = os.path.join(build, "egressctl")
        self.netprobe = os.path.join(build, "tests", "netprobe")
        self.cg_mount = None
        self.cg_root = None
        self.work = None
        self.sock = None
        self.state = None
        self.bpffs = "/sys/fs/bpf/" + RUN_ID
        self.daemon_log = None
        self.daemon = None
        self.netns = None
        self.netns_error = None
        self.lo = {}            # name -> server, created lazily
        self.policy_seq = 0
        self.cg_seq = 0
        self.sctp_errno = None  # socket(inet, stream, sctp) outside any sandbox
        self.mptcp_errno = None

    # egressctl ----------------------------------------------------------------------

    def ctl(self, *args, timeout=CTL_TIMEOUT_S):
        return run([self.egressctl, "--socket", self.sock] + list(args), timeout=timeout)

    def ctl_ok(self, *args):
        r = self.ctl(*args)
        if r.returncode != 0:
            raise TestFailure("egressctl %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                              (r.stderr + r.stdout).strip()))
        return r

    def list_json(self):
        r = self.ctl_ok("list", "--json")
        try:
            v = json.loads(r.stdout)
        except ValueError as e:
            raise TestFailure("`list --json` printed no JSON (%s): %r" % (e, r.stdout[:500]))
        if isinstance(v, dict) and "sandboxes" in v:
            v = v["sandboxes"]
        check(isinstance(v, list), "`list --json` is not an array: %r" % r.stdout[:500])
        return v

    def find_sandbox(self, cg):
        real = os.path.realpath(cg)
        for sb in self.list_json():
            if isinstance(sb, dict) and sb.get("cgroup") and \
               os.path.realpath(sb["cgroup"]) == real:
                return sb
        return None

    def log_tail(self, since=0, max_lines=60):
        try:
            with open(self.daemon_log, "rb") as f:
                f.seek(since)
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            return "(no egressd log)"
        if len(lines) > max_lines:
            lines = ["... (%d lines before)" % (len(lines) - max_lines)] + lines[-max_lines:]
        return "\n".join("    | " + line for line in lines)

    def log_size(self):
        try:
            return os.path.getsize(self.daemon_log)
        except OSError:
            return 0

    def ensure_daemon(self):
        if not self.daemon.alive():
            self.daemon.start()

    # policies and cgroups -------------------------------------------------------------

    def policy(self, allow, sockets=None, tenant="e2e", extra_network=None, raw=None):
        """Write a policy file; raw replaces the whole document."""
        self.policy_seq += 1
        if raw is None:
            net = {"default": "deny", "outbound_allow": list(allow)}
            if sockets is not None:
                net["allow_sockets"] = list(sockets)
            if extra_network:
                net.update(extra_network)
            raw = {"tenant": tenant, "execution_id": "%s-%d" % (RUN_ID, self.policy_seq),
                   "principal": "agent:e2e", "tool": "netprobe", "version": "1.0.0",
                   "network": net}
        path = os.path.join(self.work, "policy-%d.json" % self.policy_seq)
        with open(path, "w") as f:
            if isinstance(raw, str):
                f.write(raw)
            else:
                json.dump(raw, f, indent=1)
        return path

    def mkcgroup(self, name, parent=None):
        self.cg_seq += 1
        path = os.path.join(parent or self.cg_root, "%s-%d" % (name, self.cg_seq))
        os.mkdir(path)
        return path

    def sandbox(self, allow, sockets=None, name="sb", **kw):
        return Sandbox(self, self.policy(allow, sockets, **kw), name)

    # servers ---------------------------------------------------------------------------

    def tcp(self, name, host="127.0.0.1"):
        key = ("tcp", name, host)
        if key not in self.lo:
            s = TcpServer(host)
            self.lo[key] = s
            CLEANUP.push("tcp server", s.close)
        return self.lo[key]

    def udp(self, name, host="127.0.0.1"):
        key = ("udp", name, host)
        if key not in self.lo:
            s = UdpServer(host)
            self.lo[key] = s
            CLEANUP.push("udp server", s.close)
        return self.lo[key]

    def pair(self, name, host="127.0.0.1"):
        key = ("pair", name, host)
        if key not in self.lo:
            t, u = tcp_udp_pair(host)
            self.lo[key] = (t, u)
            CLEANUP.push("tcp server", t.close)
            CLEANUP.push("udp server", u.close)
        return self.lo[key]

    def need_netns(self):
        if self.netns is None and self.netns_error is None:
            try:
                self.netns = NetNs()
            except Exception as e:
                self.netns_error = str(e)
        if self.netns is None:
            raise TestFailure("network namespace setup failed: %s" % self.netns_error)
        return self.netns

    # probes ------------------------------------------------------------------------------

    def probe(self, cg, *action, timeout=PROBE_TIMEOUT_S):
        """Run netprobe ACTION inside cgroup cg (None: outside every sandbox)."""
        argv = [self.netprobe] + [str(a) for a in action]
        procs = None if cg is None else os.path.join(cg, "cgroup.procs")

        def join_cgroup():
            # The child joins before exec: every socket it creates is the cgroup's.
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

        try:
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=timeout,
                               preexec_fn=join_cgroup if procs else None)
        except subprocess.TimeoutExpired:
            raise TestFailure("`%s` did not finish within %d s" % (" ".join(argv), timeout))
        except subprocess.SubprocessError as e:
            raise TestFailure("`%s` could not start in %s: %s" % (" ".join(argv), cg, e))
        res = ProbeResult(argv[1:], r.returncode, r.stdout, r.stderr)
        log(str(res))
        if res.rc == 2:
            raise TestFailure("netprobe usage/setup error: %s" % res)
        return res

    def allowed(self, cg, *action):
        r = self.probe(cg, *action)
        check(r.rc == 0 and r.line == "ok", "expected allowed: %s" % r)
        return r

    def denied(self, cg, *action, errno="EPERM"):
        r = self.probe(cg, *action)
        check(r.rc == 1 and r.errno == errno, "expected %s: %s" % (errno, r))
        return r


class Sandbox:
    """A cgroup with a policy attached; detached and removed on exit."""

    def __init__(self, ctx, policy_path, name="sb", parent=None):
        self.ctx = ctx
        self.policy = policy_path
        self.cg = ctx.mkcgroup(name, parent)
        self.attached = False

    def __enter__(self):
        try:
            self.attach()
        except BaseException:
            self.remove()
            raise
        return self

    def attach(self):
        r = self.ctx.ctl("attach", "--cgroup", self.cg, "--policy", self.policy)
        if r.returncode != 0:
            raise TestFailure("attach %s: exit %d: %s" % (self.cg, r.returncode,
                                                           (r.stderr + r.stdout).strip()))
        self.attached = True

    def update(self, policy_path):
        r = self.ctx.ctl("update", "--cgroup", self.cg, "--policy", policy_path)
        if r.returncode != 0:
            raise TestFailure("update %s: exit %d: %s" % (self.cg, r.returncode,
                                                           (r.stderr + r.stdout).strip()))

    def detach(self):
        r = self.ctx.ctl("detach", "--cgroup", self.cg)
        if r.returncode != 0:
            raise TestFailure("detach %s: exit %d: %s" % (self.cg, r.returncode,
                                                           (r.stderr + r.stdout).strip()))
        self.attached = False

    def remove(self):
        try:
            if self.attached and self.ctx.daemon.alive():
                try:
                    self.ctx.ctl("detach", "--cgroup", self.cg)
                except Exception:
                    pass
                self.attached = False
        finally:
            cgroup_remove_tree(self.cg)

    def __exit__(self, *exc):
        self.remove()
        return False

    # shorthands
    def allowed(self, *action):
        return self.ctx.allowed(self.cg, *action)

    def denied(self, *action, errno="EPERM"):
        return self.ctx.denied(self.cg, *action, errno=errno)


# --- the tests ---------------------------------------------------------------------

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


@test
def status_and_list(c):
    r = c.ctl_ok("status")
    check(r.stdout.strip() != "", "`status` printed nothing")
    check(c.list_json() == [], "sandboxes exist before any attach: %r" % c.list_json())
    t = c.tcp("a")
    with c.sandbox(["127.0.0.1:%d" % t.port]) as sb:
        s = c.find_sandbox(sb.cg)
        check(s is not None, "`list --json` does not show %s" % sb.cg)
        for field in ("id", "cgroup", "cgroup_id", "tenant", "policy_id", "policy_sha256",
                      "rules", "attached_at", "updated_at"):
            check(field in s, "sandbox object lacks %r: %r" % (field, s))
        check(s["tenant"] == "e2e", "tenant is %r" % s.get("tenant"))
        check(s["cgroup_id"] == os.stat(sb.cg).st_ino,
              "cgroup_id %r is not the cgroup's inode %d" % (s["cgroup_id"], os.stat(sb.cg).st_ino))
        r = c.ctl("attach", "--cgroup", sb.cg, "--policy", sb.policy)
        check(r.returncode == 1, "a second attach of the same cgroup: exit %d, expected 1 (exists)"
              % r.returncode)
    check(c.find_sandbox(sb.cg) is None, "detached sandbox still listed")


@test
def tcp4_allowed_and_denied(c):
    a, b = c.tcp("a"), c.tcp("b")
    other = c.tcp("a2", "127.0.0.2")
    with c.sandbox(["127.0.0.1:%d" % a.port]) as sb:
        before = a.accepted
        sb.allowed("tcp", "127.0.0.1", a.port)
        check(a.accepted > before, "allowed connect never reached the server")
        sb.denied("tcp", "127.0.0.1", b.port)               # other port
        sb.denied("tcp", "127.0.0.2", other.port)           # other address
        sb.denied("tcp", "127.0.0.2", a.port)               # same port, other address
        sb.denied("tcp6", "::1", c.tcp("a6", "::1").port)    # other family


@test
def tcp6_allowed_and_denied(c):
    a6, b6 = c.tcp("a6", "::1"), c.tcp("b6", "::1")
    with c.sandbox(["[::1]:%d" % a6.port]) as sb:
        sb.allowed("tcp6", "::1", a6.port)
        sb.denied("tcp6", "::1", b6.port)
        sb.denied("tcp", "127.0.0.1", c.tcp("a").port)
    ns = c.need_netns()
    with c.sandbox(["[%s]:8000" % ns.ns6]) as sb:
        sb.allowed("tcp6", ns.ns6, 8000)
        sb.denied("tcp6", ns.ns6, 9000)
        sb.denied("tcp6", "::1", a6.port)


@test
def udp_connected(c):
    u, u2 = c.udp("u"), c.udp("u2")
    u6 = c.udp("u6", "::1")
    with c.sandbox(["udp/127.0.0.1:%d" % u.port, "udp/[::1]:%d" % u6.port]) as sb:
        n = u.received
        sb.allowed("udp-connect", "127.0.0.1", u.port)
        check(u.wait_for(n + 1), "allowed datagram never arrived")
        sb.denied("udp-connect", "127.0.0.1", u2.port)
        sb.allowed("udp-connect", "::1", u6.port)
        sb.denied("udp-connect", "::1", c.udp("u6b", "::1").port)


@test
def udp_unconnected(c):
    u, u2 = c.udp("u"), c.udp("u2")
    u6, u6b = c.udp("u6", "::1"), c.udp("u6b", "::1")
    with c.sandbox(["udp/127.0.0.1:%d" % u.port, "udp/[::1]:%d" % u6.port]) as sb:
        for action in ("udp-sendto", "udp-sendmsg"):
            n = u.received
            sb.allowed(action, "127.0.0.1", u.port)
            check(u.wait_for(n + 1), "%s: allowed datagram never arrived" % action)
            n2 = u2.received
            sb.denied(action, "127.0.0.1", u2.port)
            sb.allowed(action, "::1", u6.port)
            sb.denied(action, "::1", u6b.port)
            time.sleep(0.1)
            check(u2.received == n2, "%s: a denied datagram arrived" % action)


@test
def udp_sendmmsg(c):
    u, u2 = c.udp("u"), c.udp("u2")
    with c.sandbox(["udp/127.0.0.1:%d" % u.port]) as sb:
        n = u.received
        sb.allowed("udp-sendmmsg", "127.0.0.1", u.port)
        check(u.wait_for(n + 2), "sendmmsg: %d of 2 datagrams arrived" % (u.received - n))
        n2 = u2.received
        sb.denied("udp-sendmmsg", "127.0.0.1", u2.port)
        time.sleep(0.1)
        check(u2.received == n2, "sendmmsg: a denied datagram arrived")


@test
def protocol_restriction(c):
    t, tu = c.pair("p1")      # TCP and UDP on port P
    ut, uu = c.pair("p2")     # TCP and UDP on port Q
    both_t, both_u = c.pair("p3")
    with c.sandbox(["tcp/127.0.0.1:%d" % t.port, "udp/127.0.0.1:%d" % uu.port,
                    "127.0.0.1:%d" % both_t.port]) as sb:
        sb.allowed("tcp", "127.0.0.1", t.port)
        sb.denied("udp-sendto", "127.0.0.1", t.port)      # tcp/ does not allow UDP
        sb.denied("udp-connect", "127.0.0.1", t.port)
        sb.allowed("udp-sendto", "127.0.0.1", uu.port)
        sb.allowed("udp-connect", "127.0.0.1", uu.port)
        sb.denied("tcp", "127.0.0.1", uu.port)            # udp/ does not allow TCP
        sb.denied("tfo", "127.0.0.1", uu.port)
        sb.allowed("tcp", "127.0.0.1", both_t.port)       # no prefix: both
        sb.allowed("udp-sendto", "127.0.0.1", both_t.port)


@test
def tcp_fast_open(c):
    a, b = c.tcp("a"), c.tcp("b")
    a6, b6 = c.tcp("a6", "::1"), c.tcp("b6", "::1")
    with c.sandbox(["127.0.0.1:%d" % a.port, "[::1]:%d" % a6.port]) as sb:
        before = a.accepted
        sb.allowed("tfo", "127.0.0.1", a.port)
        check(wait_until(lambda: a.accepted > before, 2), "fast open never reached the server")
        sb.denied("tfo", "127.0.0.1", b.port)
        sb.allowed("tfo", "::1", a6.port)
        sb.denied("tfo", "::1", b6.port)
        # A second fast open to the allowed server carries a cookie now: the
        # data-in-SYN path must be judged the same way.
        sb.allowed("tfo", "127.0.0.1", a.port)
        sb.denied("tfo", "127.0.0.1", b.port)


@test
def ipv4_mapped_ipv6(c):
    t, u = c.pair("m1")
    t2, u2 = c.pair("m2")
    with c.sandbox(["127.0.0.1:%d" % t.port]) as sb:
        sb.allowed("tcp-mapped", "127.0.0.1", t.port)
        sb.denied("tcp-mapped", "127.0.0.1", t2.port)
        sb.denied("tcp-mapped", "127.0.0.2", t.port)
        n = u.received
        sb.allowed("udp-mapped-sendto", "127.0.0.1", u.port)
        check(u.wait_for(n + 1), "mapped datagram never arrived")
        sb.denied("udp-mapped-sendto", "127.0.0.1", u2.port)
    # Every IPv6 destination allowed, no IPv4 one: a mapped address is an IPv4
    # destination and must be judged by the (empty) IPv4 rules.
    with c.sandbox(["[::/0]:*"]) as sb:
        sb.allowed("tcp6", "::1", c.tcp("a6", "::1").port)
        sb.denied("tcp-mapped", "127.0.0.1", t.port)
        sb.denied("udp-mapped-sendto", "127.0.0.1", u.port)
    # A mapped entry in the policy is an IPv4 rule.
    with c.sandbox(["[::ffff:127.0.0.1]:%d" % t.port]) as sb:
        sb.allowed("tcp", "127.0.0.1", t.port)
        sb.allowed("tcp-mapped", "127.0.0.1", t.port)
        sb.denied("tcp", "127.0.0.1", t2.port)


@test
def ranges_wildcards_cidrs_netns(c):
    ns = c.need_netns()
    blk = "10.254.%d" % ns.x
    with c.sandbox(["%s.0/30:8000-8080" % blk]) as sb:
        sb.allowed("tcp", ns.ns4, 8000)
        sb.allowed("tcp", ns.ns4, 8080)
        sb.denied("tcp", ns.ns4, 9000)          # outside the range
        sb.denied("tcp", ns.ns4b, 8000)         # outside the /30
        sb.allowed("udp-sendto", ns.ns4, 8000)
        sb.denied("udp-sendto", ns.ns4, 9000)
    with c.sandbox(["%s.0/29:*" % blk]) as sb:
        for port in ns.PORTS:
            sb.allowed("tcp", ns.ns4, port)
        sb.allowed("tcp", ns.ns4b, 8000)
        sb.denied("tcp", "127.0.0.1", c.tcp("a").port)
        sb.denied("tcp6", ns.ns6, 8000)
    # A wider prefix with a range and a narrower one with another port: the
    # longest match must still allow the wider prefix's ports.
    with c.sandbox(["%s.0/29:8000" % blk, "%s.2/32:9000" % blk]) as sb:
        sb.allowed("tcp", ns.ns4, 8000)
        sb.allowed("tcp", ns.ns4, 9000)
        sb.denied("tcp", ns.ns4, 8080)
        sb.allowed("tcp", ns.ns4b, 8000)
    with c.sandbox(["[fd00:e9e:%x::/64]:8000-8080" % ns.x]) as sb:
        sb.allowed("tcp6", ns.ns6, 8000)
        sb.allowed("tcp6", ns.ns6, 8080)
        sb.denied("tcp6", ns.ns6, 9000)
        sb.denied("tcp", ns.ns4, 8000)


@test
def loopback_cidr(c):
    a = c.tcp("a")
    a2 = c.tcp("a2", "127.0.0.2")
    a3 = c.tcp("a3", "127.0.0.3")
    with c.sandbox(["127.0.0.0/8:*"]) as sb:
        sb.allowed("tcp", "127.0.0.1", a.port)
        sb.allowed("tcp", "127.0.0.2", a2.port)
        sb.allowed("udp-sendto", "127.0.0.3", 9)
        sb.denied("tcp6", "::1", c.tcp("a6", "::1").port)
    with c.sandbox(["127.0.0.2/31:%d" % a3.port]) as sb:
        sb.allowed("tcp", "127.0.0.3", a3.port)
        if a2.port != a3.port:
            sb.denied("tcp", "127.0.0.2", a2.port)
        sb.denied("tcp", "127.0.0.1", a.port)


def outside_errno(c, *sock_args):
    r = c.probe(None, "socket", *sock_args)
    return None if r.rc == 0 else r.errno


NOT_BUILT = ("EPROTONOSUPPORT", "ESOCKTNOSUPPORT", "EAFNOSUPPORT")


@test
def special_sockets_denied_by_default(c):
    with c.sandbox(["127.0.0.1:*", "[::1]:*"]) as sb:
        for args in (("inet", "raw", "icmp"), ("inet6", "raw", "icmpv6"),
                     ("inet", "raw", "udp"), ("inet", "raw", "raw"),
                     ("inet", "dgram", "udplite"), ("inet6", "dgram", "udplite"),
                     ("inet", "dgram", "icmp"), ("inet6", "dgram", "icmpv6")):
            sb.denied("socket", *args)
        sb.denied("ping-sendto", "127.0.0.1")
        sb.denied("ping-sendto", "::1")
        sb.denied("raw-sendto", "127.0.0.1")
        sb.denied("raw-sendto", "::1")
        for args, outside in ((("inet", "stream", "sctp"), c.sctp_errno),
                              (("inet6", "stream", "sctp"), c.sctp_errno),
                              (("inet", "seqpacket", "sctp"), c.sctp_errno),
                              (("inet", "stream", "mptcp"), c.mptcp_errno),
                              (("inet6", "stream", "mptcp"), c.mptcp_errno)):
            r = c.probe(sb.cg, "socket", *args)
            check(r.rc != 0, "denied socket created: %s" % r)
            if outside is None:   # the kernel has it: only the policy can refuse
                check(r.errno == "EPERM", "expected EPERM: %s" % r)
            else:
                check(r.errno in ("EPERM",) + NOT_BUILT, "unexpected errno: %s" % r)
        # TCP and UDP sockets are always allowed.
        sb.allowed("socket", "inet", "stream", "tcp")
        sb.allowed("socket", "inet6", "dgram", "udp")


@test
def special_sockets_allowed_by_policy(c):
    with c.sandbox(["127.0.0.1:*", "[::1]:*"],
                   sockets=["icmp", "raw", "udplite", "sctp", "mptcp"]) as sb:
        for args in (("inet", "raw", "icmp"), ("inet6", "raw", "icmpv6"),
                     ("inet", "dgram", "udplite"), ("inet6", "dgram", "udplite"),
                     ("inet", "dgram", "icmp"), ("inet6", "dgram", "icmpv6")):
            sb.allowed("socket", *args)
        sb.allowed("ping-sendto", "127.0.0.1")
        sb.allowed("ping-sendto", "::1")
        sb.allowed("raw-sendto", "127.0.0.1")
        sb.allowed("raw-sendto", "::1")
        for args, outside in ((("inet", "stream", "sctp"), c.sctp_errno),
                              (("inet", "stream", "mptcp"), c.mptcp_errno)):
            r = c.probe(sb.cg, "socket", *args)
            if outside is None:
                check(r.rc == 0, "allowed socket refused: %s" % r)
            else:
                check(r.errno == outside, "expected %s as outside a sandbox: %s" % (outside, r))
    # Only what is named: icmp allows ping sockets, not raw ones.
    with c.sandbox(["127.0.0.1:*"], sockets=["icmp"]) as sb:
        sb.allowed("socket", "inet", "dgram", "icmp")
        sb.denied("socket", "inet", "raw", "icmp")
        sb.denied("socket", "inet", "dgram", "udplite")
    with c.sandbox(["127.0.0.1:*"], sockets=["raw"]) as sb:
        sb.allowed("socket", "inet", "raw", "icmp")
        sb.denied("socket", "inet", "dgram", "icmp")


@test
def loopback_denied_unless_allowed(c):
    a, u = c.tcp("a"), c.udp("u")
    a6 = c.tcp("a6", "::1")
    with c.sandbox([]) as sb:
        sb.denied("tcp", "127.0.0.1", a.port)
        sb.denied("tcp6", "::1", a6.port)
        sb.denied("udp-sendto", "127.0.0.1", u.port)
        sb.denied("udp-connect", "127.0.0.1", u.port)
    ns = c.need_netns()
    with c.sandbox(["%s:8000" % ns.ns4, "[%s]:8000" % ns.ns6, "192.0.2.1:*"]) as sb:
        sb.allowed("tcp", ns.ns4, 8000)
        sb.allowed("tcp6", ns.ns6, 8000)
        sb.denied("tcp", "127.0.0.1", a.port)
        sb.denied("tcp6", "::1", a6.port)
        sb.denied("udp-sendto", "127.0.0.1", u.port)
        sb.denied("tcp-mapped", "127.0.0.1", a.port)


@test
def nested_cgroup_still_confined(c):
    a, b = c.tcp("a"), c.tcp("b")
    with c.sandbox(["127.0.0.1:%d" % a.port]) as sb:
        child = c.mkcgroup("child", sb.cg)
        grandchild = c.mkcgroup("grandchild", child)
        for cg in (child, grandchild):
            c.allowed(cg, "tcp", "127.0.0.1", a.port)
            c.denied(cg, "tcp", "127.0.0.1", b.port)
            c.denied(cg, "udp-sendto", "127.0.0.1", b.port)
            c.denied(cg, "socket", "inet", "raw", "icmp")
        # A process started in the sandbox and then moved into the child.
        procs = os.path.join(sb.cg, "cgroup.procs")

        def join():
            fd = os.open(procs, os.O_WRONLY)
            os.write(fd, b"0")
            os.close(fd)

        p = subprocess.Popen(["/bin/sh", "-c", 'read _ && exec "$0" "$@"', c.netprobe, "tcp",
                              "127.0.0.1", str(b.port)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=join)
        try:
            with open(os.path.join(child, "cgroup.procs"), "w") as f:
                f.write(str(p.pid))
            out, err = p.communicate("go\n", timeout=PROBE_TIMEOUT_S)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(5)
        check(p.returncode == 1 and out.startswith("err EPERM"),
              "moved process: exit %d, %r %r" % (p.returncode, out.strip(), err.strip()))


@test
def update_narrows_and_bad_update_keeps_policy(c):
    a, b = c.tcp("a"), c.tcp("b")
    with c.sandbox(["127.0.0.1:%d" % a.port, "127.0.0.1:%d" % b.port]) as sb:
        sb.allowed("tcp", "127.0.0.1", a.port)
        sb.allowed("tcp", "127.0.0.1", b.port)
        before = c.find_sandbox(sb.cg)
        check(before is not None, "`list --json` does not show %s" % sb.cg)
        sb.update(c.policy(["127.0.0.1:%d" % a.port]))
        sb.allowed("tcp", "127.0.0.1", a.port)
        sb.denied("tcp", "127.0.0.1", b.port)
        sb.denied("udp-sendto", "127.0.0.1", b.port)
        mid = c.find_sandbox(sb.cg)
        check(mid is not None, "sandbox gone after update")
        check(before["id"] == mid["id"], "update changed the sandbox id")
        check(before.get("policy_sha256") != mid.get("policy_sha256"),
              "policy_sha256 unchanged by an update")
        # Invalid: a port out of range in the second entry, and it would
        # have widened access; nothing of it may apply.
        bad = c.policy(["127.0.0.1:%d" % b.port, "127.0.0.1:70000"])
        r = c.ctl("update", "--cgroup", sb.cg, "--policy", bad)
        check(r.returncode == 4, "invalid update: exit %d, expected 4: %s" %
              (r.returncode, (r.stderr + r.stdout).strip()))
        check("outbound_allow[1]" in r.stderr + r.stdout,
              "invalid update error does not name network.outbound_allow[1]: %r" %
              (r.stderr + r.stdout).strip())
        sb.allowed("tcp", "127.0.0.1", a.port)
        sb.denied("tcp", "127.0.0.1", b.port)
        after = c.find_sandbox(sb.cg)
        check(after.get("policy_sha256") == mid.get("policy_sha256") and
              after.get("policy_id") == mid.get("policy_id"),
              "a rejected update changed the sandbox: %r -> %r" % (mid, after))
        # Not JSON at all.
        r = c.ctl("update", "--cgroup", sb.cg, "--policy", c.policy(None, raw="{not json"))
        check(r.returncode == 4, "unparsable update: exit %d, expected 4: %s" %
              (r.returncode, (r.stderr + r.stdout).strip()))
        sb.denied("tcp", "127.0.0.1", b.port)
        sb.allowed("tcp", "127.0.0.1", a.port)


# Held open inside a sandbox: connect, say so, wait for a line on stdin, then
# find out whether the connection still works (the listener never accepts, so
# a live connection just times out on recv).
HOLD_CONNECTION = r"""
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
fam = socket.AF_INET6 if ":" in host else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM)
s.settimeout(2)
try:
    s.connect((host, port))
except OSError as e:
    print("connect-failed", e.errno, flush=True)
    sys.exit(1)
print("connected", flush=True)
sys.stdin.readline()
s.settimeout(1)
try:
    s.sendall(b"x")
    s.recv(1)
    print("alive", flush=True)
except socket.timeout:
    print("alive", flush=True)
except OSError as e:
    print("dead", e.errno, flush=True)
"""


@test
def narrowing_update_tears_down_established(c):
    # DESIGN.md, non-negotiable 2: established connections to destinations a
    # new policy no longer allows are torn down (sock_diag SOCK_DESTROY).
    keep, drop = socket.socket(), socket.socket()
    try:
        for l in (keep, drop):
            l.bind(("127.0.0.1", 0))
            l.listen(8)  # never accepted: the handshake completes in the backlog
        kp, dp = keep.getsockname()[1], drop.getsockname()[1]
        with c.sandbox(["127.0.0.1:%d" % kp, "127.0.0.1:%d" % dp]) as sb:
            procs = os.path.join(sb.cg, "cgroup.procs")

            def join():
                fd = os.open(procs, os.O_WRONLY)
                os.write(fd, b"0")
                os.close(fd)

            holders = []
            try:
                for port in (kp, dp):
                    p = subprocess.Popen([sys.executable, "-c", HOLD_CONNECTION, "127.0.0.1",
                                          str(port)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True, preexec_fn=join)
                    holders.append(p)
                    line = p.stdout.readline().strip()
                    check(line == "connected", "holder to :%d: %r" % (port, line))
                sb.update(c.policy(["127.0.0.1:%d" % kp]))
                outs = []
                for p in holders:
                    out, err = p.communicate("go\n", timeout=PROBE_TIMEOUT_S)
                    outs.append(out.strip())
                check(outs[0] == "alive", "a connection the new policy allows was cut: %r" %
                      outs[0])
                check(outs[1].startswith("dead"),
                      "a connection the narrowed policy denies is still established: %r" %
                      outs[1])
            finally:
                for p in holders:
                    if p.poll() is None:
                        p.kill()
                        p.wait(5)
    finally:
        keep.close()
        drop.close()


@test
def invalid_policy_at_attach(c):
    a = c.tcp("a")
    cases = [
        (["127.0.0.1:%d" % a.port, "127.0.0.1:70000"], None, "network.outbound_allow[1]"),
        (None, {"tenant": "e2e", "network": {"default": "allow", "outbound_allow": []}},
         "network.default"),
        (None, {"tenant": "e2e", "network": {"default": "deny", "outbound_allow": [],
                                             "bogus": 1}}, "bogus"),
        (None, {"network": {"default": "deny", "outbound_allow": []}}, "tenant"),
        (None, {"tenant": "e2e", "network": {"default": "deny", "outbound_allow": [],
                                             "allow_sockets": ["packet"]}},
         "network.allow_sockets[0]"),
    ]
    before = c.list_json()
    cg = c.mkcgroup("invalid")
    try:
        for allow, raw, field in cases:
            path = c.policy(allow, raw=raw)
            r = c.ctl("attach", "--cgroup", cg, "--policy", path)
            msg = (r.stderr + r.stdout).strip()
            check(r.returncode == 4, "invalid policy (%s): exit %d, expected 4: %s" %
                  (field, r.returncode, msg))
            check(field in msg, "error does not name %s: %r" % (field, msg))
            check(c.find_sandbox(cg) is None, "an invalid policy left a sandbox")
        check(c.list_json() == before, "`list --json` changed after rejected attaches")
        # Nothing attached: the cgroup is not confined at all.
        c.allowed(cg, "tcp", "127.0.0.1", a.port)
        c.allowed(cg, "socket", "inet", "dgram", "udplite")
    finally:
        cgroup_remove_tree(cg)


@test
def enforcement_survives_daemon_and_is_adopted(c):
    a, b, d = c.tcp("a"), c.tcp("b"), c.tcp("d")
    sb = Sandbox(c, c.policy(["127.0.0.1:%d" % a.port]), "adopt")
    try:
        sb.attach()
        sb.allowed("tcp", "127.0.0.1", a.port)
        sb.denied("tcp", "127.0.0.1", b.port)
        listed = c.find_sandbox(sb.cg)
        check(listed is not None, "`list --json` does not show %s" % sb.cg)
        c.daemon.kill9()
        # No daemon: enforcement stays exactly as it was.
        sb.allowed("tcp", "127.0.0.1", a.port)
        sb.denied("tcp", "127.0.0.1", b.port)
        sb.denied("udp-sendto", "127.0.0.1", b.port)
        sb.denied("socket", "inet", "raw", "icmp")
        r = c.ctl("status")
        check(r.returncode == 3, "`status` with egressd dead: exit %d, expected 3" %
              r.returncode)
        c.daemon.start()
        adopted = c.find_sandbox(sb.cg)
        check(adopted is not None, "restarted egressd does not list %s: %r" %
              (sb.cg, c.list_json()))
        for k in ("id", "cgroup_id", "policy_sha256", "tenant"):
            check(adopted.get(k) == listed.get(k), "adopted sandbox %s: %r, was %r" %
                  (k, adopted.get(k), listed.get(k)))
        sb.allowed("tcp", "127.0.0.1", a.port)
        sb.denied("tcp", "127.0.0.1", b.port)
        sb.update(c.policy(["127.0.0.1:%d" % a.port, "127.0.0.1:%d" % b.port]))
        sb.allowed("tcp", "127.0.0.1", b.port)
        sb.denied("tcp", "127.0.0.1", d.port)
        sb.detach()
        check(c.find_sandbox(sb.cg) is None, "detached sandbox still listed")
        c.allowed(sb.cg, "tcp", "127.0.0.1", d.port)
        c.allowed(sb.cg, "socket", "inet", "raw", "icmp")
    finally:
        c.ensure_daemon()
        sb.remove()


@test
def sandboxes_are_isolated(c):
    a, b = c.pair("iso-a")
    b_t, b_u = c.pair("iso-b")
    with c.sandbox(["127.0.0.1:%d" % a.port], name="one", tenant="t1") as s1, \
         c.sandbox(["127.0.0.1:%d" % b_t.port], sockets=["raw"], name="two",
                   tenant="t2") as s2:
        s1.allowed("tcp", "127.0.0.1", a.port)
        s1.denied("tcp", "127.0.0.1", b_t.port)
        s1.denied("udp-sendto", "127.0.0.1", b_u.port)
        s1.denied("socket", "inet", "raw", "icmp")
        s2.allowed("tcp", "127.0.0.1", b_t.port)
        s2.denied("tcp", "127.0.0.1", a.port)
        s2.denied("udp-sendto", "127.0.0.1", b.port)
        s2.allowed("socket", "inet", "raw", "icmp")
        # An update of one leaves the other alone.
        s1.update(c.policy([], tenant="t1"))
        s1.denied("tcp", "127.0.0.1", a.port)
        s2.allowed("tcp", "127.0.0.1", b_t.port)


@test
def nested_sandbox_only_adds(c):
    a, b = c.tcp("a"), c.tcp("b")
    with c.sandbox(["127.0.0.1:%d" % a.port, "127.0.0.1:%d" % b.port], name="outer") as outer:
        # A sandbox inside a sandbox: both policies apply (multi-attach links),
        # the inner one can narrow, never widen.
        with Sandbox(c, c.policy(["127.0.0.1:%d" % a.port, "127.0.0.1:%d" % c.tcp("d").port],
                                 sockets=["raw"]), "inner", parent=outer.cg) as inner:
            inner.allowed("tcp", "127.0.0.1", a.port)
            inner.denied("tcp", "127.0.0.1", b.port)           # the inner policy denies
            inner.denied("tcp", "127.0.0.1", c.tcp("d").port)  # the outer policy denies
            inner.denied("socket", "inet", "raw", "icmp")      # the outer policy denies
            outer.allowed("tcp", "127.0.0.1", b.port)
        outer.allowed("tcp", "127.0.0.1", b.port)


def run_cgroup_of(stdout):
    for line in stdout.splitlines():
        if line.startswith("0::/"):
            return line[3:]
    return None


@test
def egressctl_run(c):
    a, b = c.tcp("a"), c.tcp("b")
    pol = c.policy(["127.0.0.1:%d" % a.port])
    before = c.list_json()
    for port, want_rc, want_line in ((a.port, 0, "ok"), (b.port, 1, "err EPERM")):
        script = 'cat /proc/self/cgroup; exec "$0" "$@"'
        r = c.ctl("run", "--policy", pol, "--", "/bin/sh", "-c", script, c.netprobe, "tcp",
                  "127.0.0.1", str(port))
        out = r.stdout
        check(r.returncode == want_rc, "run tcp :%d: exit %d, expected %d: %r %r" %
              (port, r.returncode, want_rc, out, r.stderr))
        check(want_line in out, "run tcp :%d printed %r" % (port, out))
        rel = run_cgroup_of(out)
        check(rel is not None and rel != "/", "the command ran in no transient cgroup: %r" % out)
        check(not os.path.exists(c.cg_mount + rel),
              "transient cgroup %s left behind" % (c.cg_mount + rel))
    r = c.ctl("run", "--policy", pol, "--", c.netprobe, "socket", "inet", "raw", "icmp")
    check(r.returncode == 1 and "err EPERM" in r.stdout,
          "run raw socket: exit %d %r" % (r.returncode, r.stdout))
    r = c.ctl("run", "--policy", pol, "--", "/bin/sh", "-c", "exit 7")
    check(r.returncode == 7, "run `exit 7`: exit %d" % r.returncode)
    r = c.ctl("run", "--policy", c.policy(["127.0.0.1:70000"]), "--", "/bin/true")
    check(r.returncode == 4, "run with an invalid policy: exit %d, expected 4" % r.returncode)
    check(c.list_json() == before, "`run` left sandboxes behind: %r" % c.list_json())


@test
def sandboxed_peer_cannot_drive_egressd(c):
    # A confined process that reaches the control socket must not be able to
    # give itself a looser policy (or detach its own sandbox).
    a = c.tcp("a")
    pol = c.policy(["127.0.0.1:%d" % a.port])
    wide = c.policy(["127.0.0.0/8:*"])
    before = c.list_json()
    r = c.ctl("run", "--policy", pol, "--", c.egressctl, "--socket", c.sock, "status")
    check(r.returncode == 1 and "forbidden" in r.stderr,
          "status from inside a sandbox: exit %d %r" % (r.returncode, r.stderr))
    r = c.ctl("run", "--policy", pol, "--", c.egressctl, "--socket", c.sock, "run",
              "--policy", wide, "--", "/bin/true")
    check(r.returncode != 0, "a sandboxed egressctl run created a sandbox: exit %d" % r.returncode)
    check(c.list_json() == before, "sandboxes changed: %r" % c.list_json())
    # The same command outside any sandbox is served.
    c.ctl_ok("status")


# --- main ---------------------------------------------------------------------------


def setup(ctx):
    ctx.work = tempfile.mkdtemp(prefix=RUN_ID + ".")
    CLEANUP.push("work dir", shutil.rmtree, ctx.work, True)
    ctx.sock = os.path.join(ctx.work, "egressd.sock")
    ctx.state = os.path.join(ctx.work, "state")
    ctx.daemon_log = os.path.join(ctx.work, "egressd.log")
    ctx.cg_root = os.path.join(ctx.cg_mount, RUN_ID)
    os.mkdir(ctx.cg_root)
    CLEANUP.push("cgroups", cgroup_remove_tree, ctx.cg_root)
    # bpffs dir: removing the pins detaches whatever links are left.
    CLEANUP.push("bpffs dir", shutil.rmtree, ctx.bpffs, True)
    ctx.daemon = Daemon(ctx)
    CLEANUP.push("egressd", ctx.daemon.stop)
    CLEANUP.push("sandboxes", detach_leftovers, ctx)
    # Ping sockets for root (gid 0) in this netns, fast open on the client.
    set_sysctl_for_run("net.ipv4.ping_group_range", "0 0")
    try:
        tfo = int(read_sysctl("net.ipv4.tcp_fastopen"))
        # client (1) and server (2): the second fast open carries data in the SYN
        set_sysctl_for_run("net.ipv4.tcp_fastopen", str(tfo | 3))
    except (OSError, ValueError):
        pass
    ctx.sctp_errno = outside_errno(ctx, "inet", "stream", "sctp")
    ctx.mptcp_errno = outside_errno(ctx, "inet", "stream", "mptcp")
    log("outside a sandbox: sctp %s, mptcp %s" % (ctx.sctp_errno or "ok",
                                                   ctx.mptcp_errno or "ok"))
    ctx.daemon.start()


def detach_leftovers(ctx):
    if not ctx.daemon or not ctx.daemon.alive():
        return
    try:
        for sb in ctx.list_json():
            if os.path.realpath(sb.get("cgroup", "")).startswith(ctx.cg_root + "/"):
                ctx.ctl("detach", "--id", str(sb["id"]))
    except Exception as e:
        print("  cleanup: detaching leftovers: %s" % e, file=sys.stderr)


def main():
    global VERBOSE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="build directory (default build)")
    ap.add_argument("-k", dest="pattern", help="run only tests whose name contains PATTERN")
    ap.add_argument("-v", "--verbose", action="store_true", help="show every probe")
    args = ap.parse_args()
    VERBOSE = args.verbose

    ctx = Ctx(os.path.abspath(args.build))
    if os.geteuid() != 0:
        prerequisite_missing("must run as root (BPF programs, cgroups, network namespaces)")
    ctx.cg_mount = find_cgroup2()
    if not ctx.cg_mount:
        prerequisite_missing("no cgroup2 file system in /proc/mounts")
    for b in (ctx.egressd, ctx.egressctl, ctx.netprobe):
        if not os.access(b, os.X_OK):
            prerequisite_missing("%s is not built (make all %s)" %
                                 (b, os.path.join(args.build, "tests", "netprobe")))
    if not shutil.which("ip"):
        prerequisite_missing("the `ip` command (iproute2) is missing")

    tests = [t for t in TESTS if not args.pattern or args.pattern in t.__name__]
    atexit.register(CLEANUP.run)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(SUITE_TIMEOUT_S)

    print("e2e run %s: %d test(s)" % (RUN_ID, len(tests)), flush=True)
    passed = failed = 0
    start = time.monotonic()
    try:
        setup(ctx)
    except Exception as e:
        print("FAIL setup: %s" % e, flush=True)
        if VERBOSE:
            traceback.print_exc()
        CLEANUP.run()
        print("0 passed, %d failed" % (len(tests) or 1), flush=True)
        return 1
    timed_out = False
    for t in tests:
        if timed_out:
            print("FAIL %s: not run, the suite timed out" % t.__name__, flush=True)
            failed += 1
            continue
        mark = ctx.log_size()
        t0 = time.monotonic()
        try:
            ctx.ensure_daemon()
            t(ctx)
            if not ctx.daemon.alive():
                raise TestFailure("egressd exited during the test (status %s)" %
                                  ctx.daemon.proc.returncode)
            passed += 1
            print("PASS %s (%.1fs)" % (t.__name__, time.monotonic() - t0), flush=True)
        except Exception as e:
            failed += 1
            timed_out = isinstance(e, TimeoutError)
            reason = str(e) if isinstance(e, TestFailure) else "%s: %s" % (type(e).__name__, e)
            print("FAIL %s: %s" % (t.__name__, reason), flush=True)
            if VERBOSE or not isinstance(e, TestFailure):
                traceback.print_exc(file=sys.stdout)
            tail = ctx.log_tail(mark)
            if tail:
                print("  egressd log during the test:\n%s" % tail, flush=True)
    signal.alarm(0)
    log("total %.1fs" % (time.monotonic() - start))
    CLEANUP.run()  # before the summary, so that it is the last line
    print("%d passed, %d failed" % (passed, failed), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
