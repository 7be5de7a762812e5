# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""egressd (Daemon), the test context (Ctx: egressctl, policies, cgroups,
servers, netprobe) and Sandbox (a cgroup with a policy attached)."""

import json
import os
import socket
import stat
import subprocess
import time

from .core import (CLEANUP, CTL_TIMEOUT_S, DAEMON_READY_S, PROBE_TIMEOUT_S, RUN_ID, TestFailure,
                   cgroup_remove_tree, check, log, run, wait_until)
from .servers import (NetNs, TcpServer, UdpServer, free_tcp_port, join_cgroup_fn, tcp_udp_pair)

__all__ = ["Daemon", "ProbeResult", "Ctx", "Sandbox", "ctl_request", "holder_request",
           "quit_listener_holder", "quit_listener_holders"]


# --- egressd and egressctl ------------------------------------------------------------


def ctl_request(sock, req, timeout=CTL_TIMEOUT_S):
    """One request (a dict) on egressd's control socket, as egressctl sends
    it: connect, one line, the whole reply line. The reply as a dict ({}
    when egressd closed without one)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(sock)
        s.sendall((json.dumps(req) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            d = s.recv(65536)
            if not d:
                break
            buf += d
    finally:
        s.close()
    return json.loads(buf) if buf.strip() else {}


def holder_request(path, msg, timeout=5):
    """One request to egressd's listener holder (user/egressd/hold/hold_proto.h)
    and its one-line answer; None when nothing listens at path."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.send(msg.encode())
        return s.recv(256).decode()
    except OSError:
        return None
    finally:
        s.close()


def quit_listener_holder(path):
    """The holder egressd started lets go of its sockets and exits (it would
    linger for --listener-hold seconds, waiting for an egressd)."""
    holder_request(path, "QUIT")


def quit_listener_holders(top):
    """quit_listener_holder for every holder socket (<socket>.hold) under
    top: the harness's egressd's and those of the tests' own egressd
    instances, which otherwise outlive the run by --listener-hold."""
    for d, _, files in os.walk(top):
        for name in files:
            p = os.path.join(d, name)
            try:
                is_sock = name.endswith(".hold") and stat.S_ISSOCK(os.lstat(p).st_mode)
            except OSError:
                continue
            if is_sock:
                quit_listener_holder(p)


class Daemon:
    def __init__(self, ctx):
        self.ctx = ctx
        self.proc = None
        self.logf = None
        self.extra_args = []  # more egressd options (a test restarts it with them)
        self.env = None       # more environment (NOTIFY_SOCKET, WATCHDOG_USEC: a test's)

    def start(self):
        self.spawn()
        self.wait_ready()

    def spawn(self):
        """Start egressd without waiting for it (a test kills it mid-start)."""
        c = self.ctx
        self.logf = open(c.daemon_log, "ab")
        self.logf.write(("--- egressd start at %s ---\n" % time.strftime("%T")).encode())
        self.logf.flush()
        self.proc = subprocess.Popen(
            [c.egressd, "--socket", c.sock, "--bpffs-dir", c.bpffs, "--state-dir", c.state,
             "--log-level", "debug", "--metrics-addr", "127.0.0.1:%d" % c.metrics_port,
             "--billing-interval", "1",
             # No grace past a learned address's TTL: the tests time its
             # expiry (test_learned_grace sets its own).
             "--dns-ttl-grace", "0"] + list(getattr(c, "dns_args", [])) + self.extra_args,
            stdin=subprocess.DEVNULL, stdout=self.logf, stderr=self.logf,
            env=dict(os.environ, **self.env) if self.env else None)
        log("egressd pid %d" % self.proc.pid)

    def wait_ready(self):
        c = self.ctx

        def ready():
            if self.proc.poll() is not None:
                return True
            try:
                # 5: it answers but reports a problem (status is a health probe)
                return run([c.egressctl, "--socket", c.sock, "status"],
                           timeout=5).returncode in (0, 5)
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
            self.proc.wait(60)  # a loaded machine can take seconds to reap it
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
        self.metrics_port = free_tcp_port()  # egressd's /metrics
        self.mptcp_errno = None

    # egressctl ----------------------------------------------------------------------

    def ctl(self, *args, timeout=CTL_TIMEOUT_S):
        return run([self.egressctl, "--socket", self.sock] + list(args), timeout=timeout)

    def ctl_ok(self, *args):
        r = self.ctl(*args)
        # `status` exits 5 when egressd answers but reports a problem (lost
        # events, a pin gone): the answer itself is good (test_ops.py tests it).
        if r.returncode != 0 and not (args[:1] == ("status",) and r.returncode == 5):
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

    def log_not_text(self, since=0):
        """None when what egressd logged from offset since on is UTF-8 text
        (its logger escapes what is not), else where it is not."""
        try:
            with open(self.daemon_log, "rb") as f:
                f.seek(since)
                b = f.read()
        except OSError:
            return None
        try:
            b.decode("utf-8")
            return None
        except UnicodeDecodeError as e:
            return "at byte %d: %r" % (since + e.start, b[max(0, e.start - 80):e.start + 16])

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
            CLEANUP.push("tcp server", self._drop_server, key, s.close)
        return self.lo[key]

    def udp(self, name, host="127.0.0.1"):
        key = ("udp", name, host)
        if key not in self.lo:
            s = UdpServer(host)
            self.lo[key] = s
            CLEANUP.push("udp server", self._drop_server, key, s.close)
        return self.lo[key]

    def _drop_server(self, key, close):
        """A server's cleanup: closed and out of the cache (a test's own
        cleanup may run before the next test asks for the same name)."""
        self.lo.pop(key, None)
        close()

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
        try:
            r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=timeout,
                               preexec_fn=join_cgroup_fn(cg))
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
