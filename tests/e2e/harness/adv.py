# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Helpers of the adversarial suite: paths around the sock_addr hooks
(docs/security.md)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import threading

from .core import CTL_TIMEOUT_S, PROBE_TIMEOUT_S, TestFailure, check, log, run
from .servers import UdpServer, join_cgroup_fn
from .ctx import ProbeResult

__all__ = ["adv_counters", "adv_counter", "adv_probe_as_nobody", "RUN_PY", "adv_run",
           "adv_run_probe", "UdpliteServer", "ADV_DETACH_TYPES", "adv_echo_pair",
           "SEND_ON_INHERITED", "adv_host_has_lsm_progs"]


# --- adversarial suite: paths around the sock_addr hooks (docs/security.md) -----------
#
# One test per row of the table in docs/security.md, each with a sanity twin
# that reaches an allowed destination (or shows the vector working outside a
# sandbox) the same way: a blocked vector proves nothing if everything is
# blocked. IPv4-mapped IPv6 is ipv4_mapped_ipv6 (test_confine.py).


def adv_counters(c):
    r = c.ctl_ok("status", "--json")
    try:
        st = json.loads(r.stdout)
    except ValueError:
        raise TestFailure("`status --json` printed no JSON: %r" % r.stdout[:300])
    cnt = st.get("counters")
    check(isinstance(cnt, dict), "`status --json` has no counters object: %r" % r.stdout[:300])
    return cnt


def adv_counter(c, name):
    cnt = adv_counters(c)
    check(name in cnt, "`status --json` counters lack %r: %r" % (name, sorted(cnt)))
    return cnt[name]


def adv_probe_as_nobody(c, cg, *action):
    """netprobe ACTION in cgroup cg as uid/gid 65534, no groups, no capabilities."""
    argv = [c.netprobe] + [str(a) for a in action]
    join = join_cgroup_fn(cg)

    def drop():
        if join:
            join()
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)  # from root to non-root: every capability set is cleared

    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=PROBE_TIMEOUT_S,
                           preexec_fn=drop)
    except subprocess.TimeoutExpired:
        raise TestFailure("`%s` as nobody did not finish" % " ".join(argv))
    res = ProbeResult(argv[1:], r.returncode, r.stdout, r.stderr)
    log("as nobody: %s" % res)
    if res.rc == 2:
        raise TestFailure("netprobe usage/setup error: %s" % res)
    return res


# A python the command under `egressctl run` can execute: uid 0 there is the
# unprivileged host uid 65534 (its own user namespace), and sys.executable
# may live under /root (0700).
RUN_PY = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def adv_run(c, policy, *cmd, pass_fds=()):
    """egressctl run --policy POLICY -- CMD; the CompletedProcess."""
    argv = [c.egressctl, "--socket", c.sock, "run", "--policy", policy, "--"] + \
        [str(a) for a in cmd]
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=CTL_TIMEOUT_S,
                              pass_fds=pass_fds)
    except subprocess.TimeoutExpired:
        raise TestFailure("`%s` did not finish" % " ".join(argv))


def adv_run_probe(c, policy, *action):
    r = adv_run(c, policy, c.netprobe, *action)
    res = ProbeResult(["run:"] + [str(a) for a in action], r.returncode, r.stdout, r.stderr)
    log(str(res))
    if res.rc == 125:
        raise TestFailure("egressctl run could not start netprobe: %s" % res)
    return res


class UdpliteServer(UdpServer):
    """A UdpServer on a UDP-Lite socket (IPPROTO_UDPLITE, 136)."""

    def __init__(self, host):
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(fam, socket.SOCK_DGRAM, 136)
        self.sock.bind((host, 0))
        self.sock.settimeout(0.2)
        self.host = host
        self.port = self.sock.getsockname()[1]
        self.received = 0
        self.stop = False
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()


ADV_DETACH_TYPES = ("connect4", "connect6", "sendmsg4", "sendmsg6", "sock_create",
                    "setsockopt", "egress", "ingress")


def adv_echo_pair(c, kind, sockets):
    """kind: "ping" or "raw". Allowed address answers, a denied one must not."""
    ns = c.need_netns()
    # Twin outside: both destinations answer.
    for host in ("127.0.0.1", "127.0.0.2", "::1", ns.ns6):
        c.allowed(None, kind + "-echo", host)
    with c.sandbox(["127.0.0.1:*", "[::1]:*"]) as sb:
        sb.denied(kind + "-echo", "127.0.0.1")                  # socket() refused
    with c.sandbox(["127.0.0.1:*", "[::1]:*"], sockets=sockets) as sb:
        sb.allowed(kind + "-echo", "127.0.0.1")
        sb.allowed(kind + "-echo", "::1")
        for host in ("127.0.0.2", ns.ns6):
            before = adv_counter(c, "backstop_dropped")
            r = c.probe(sb.cg, kind + "-echo", host)
            check(r.rc == 1, "%s echo to denied %s got a reply: %s" % (kind, host, r))
            check(r.errno in ("EPERM", "ETIMEDOUT"), "%s echo to %s: %s" % (kind, host, r))
            check(adv_counter(c, "backstop_dropped") > before,
                  "backstop_dropped did not increase for %s to %s" % (kind, host))


# Sends one datagram on an inherited socket (fd given as argv[1]).
SEND_ON_INHERITED = r"""
import socket, sys
s = socket.socket(fileno=int(sys.argv[1]))
s.sendto(b"inherited", ("127.0.0.1", int(sys.argv[2])))
print("sent", flush=True)
"""


def adv_host_has_lsm_progs():
    if not shutil.which("bpftool"):
        return None
    r = run(["bpftool", "feature", "probe", "kernel"], timeout=60)
    for line in r.stdout.splitlines():
        if "program_type lsm" in line:
            return "NOT available" not in line
    return None
