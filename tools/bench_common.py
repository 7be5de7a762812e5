# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Setup and teardown the benchmarks share (tools/bench*.py), built on the
e2e harness (tests/e2e/harness/): the cgroup2 mount, free loopback ports,
the dnsmasq every egressd is pointed at (--dns-upstream: never the host's
resolver), egressd started and waited for, stopped, and cgroups removed
(their processes killed first)."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))

from harness.core import cgroup_remove_tree, find_cgroup2  # noqa: E402
from harness.dns import DNSMASQ, free_udp_tcp_port  # noqa: E402
from harness.servers import free_tcp_port  # noqa: E402

__all__ = ["DNSMASQ", "cgroup2_mount", "free_port", "free_udp_tcp_port", "start_dnsmasq",
           "start_egressd", "stop_egressd", "stop_process", "remove_cgroup"]


def cgroup2_mount():
    m = find_cgroup2()
    if not m:
        raise RuntimeError("no cgroup2 mount in /proc/mounts")
    return m


def free_port(host="127.0.0.1"):
    """A free TCP port on host (IPv4 loopback by default)."""
    if host == "127.0.0.1":
        return free_tcp_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start_dnsmasq(port, pid_file="", extra=(), listen="127.0.0.1", argv_prefix=()):
    """A dnsmasq bound to listen:port that reads no resolv.conf and no hosts
    file (it answers only what extra configures). argv_prefix runs it
    elsewhere, e.g. ("ip", "netns", "exec", NS)."""
    return subprocess.Popen(
        list(argv_prefix) +
        [DNSMASQ, "--conf-file=/dev/null", "--no-daemon", "--bind-interfaces",
         f"--listen-address={listen}", f"--port={port}", "--no-resolv", "--no-hosts",
         "--user=root", f"--pid-file={pid_file}"] + list(extra),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_egressd(egressd, sock, bpffs_dir, state_dir, dns_upstream, log_file, ready,
                  extra=(), watch=(), ready_s=30):
    """Start egressd (its log to the open file log_file) and wait until
    ready() is true. It fails when egressd or a process of watch exits first,
    or after ready_s seconds. Returns the Popen."""
    daemon = subprocess.Popen(
        [egressd, "--socket", sock, "--bpffs-dir", bpffs_dir, "--state-dir", state_dir,
         "--dns-upstream", dns_upstream] + list(extra),
        stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + ready_s
    last = ""
    while True:
        if daemon.poll() is not None:
            raise RuntimeError(f"egressd exited with {daemon.returncode}; see {log_file.name}")
        for p in watch:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[0]} exited with {p.returncode}")
        try:
            if os.path.exists(sock) and ready():
                return daemon
        except OSError as e:
            last = str(e)
        if time.monotonic() > deadline:
            raise RuntimeError(f"egressd not ready after {ready_s} s{': ' + last if last else ''}")
        time.sleep(0.1)


def stop_egressd(daemon, timeout=20, on_timeout=None):
    """SIGTERM, then SIGKILL after timeout seconds."""
    if daemon is None or daemon.poll() is not None:
        return
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        if on_timeout:
            on_timeout()
        daemon.kill()
        daemon.wait(timeout=10)


def stop_process(p, sig=signal.SIGKILL, timeout=10):
    if p is not None and p.poll() is None:
        p.send_signal(sig)
        p.wait(timeout=timeout)


def remove_work_dir(tmp, sock, log):
    """After egressd stopped: its listener holder told to quit (it would
    keep the listeners for --listener-hold, 300 s), the audit files'
    append-only flag (FS_APPEND_FL) lifted, or rmtree cannot unlink them,
    then the directory; what stays is logged."""
    from harness.ctx import quit_listener_holder
    quit_listener_holder(sock + ".hold")
    subprocess.run(["chattr", "-R", "-f", "-a", tmp], capture_output=True, timeout=30)
    shutil.rmtree(tmp, ignore_errors=True)
    if os.path.exists(tmp):
        log(f"cleanup: could not remove {tmp}")


def remove_cgroup(path, log):
    """Kill what is in path and below, then remove it depth-first (the
    harness's cgroup_remove_tree); a failure is logged, cleanup goes on."""
    try:
        cgroup_remove_tree(path)
    except (OSError, RuntimeError) as e:
        log(f"cleanup: could not remove {path}: {e}")


def run_bench(make, log):
    """Build a bench with make() and run it, SIGTERM taken as Ctrl-C, its
    cleanup() run whatever happens. 0 or run()'s status, 1 on a failure,
    130 when interrupted."""
    def on_signal(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_signal)
    b = make()
    try:
        return b.run()
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
        return 130
    except Exception as e:
        log(f"FAILED: {e}")
        return 1
    finally:
        b.cleanup()
