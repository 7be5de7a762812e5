# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Helpers of the confinement tests (test_confine.py)."""


__all__ = ["outside_errno", "NOT_BUILT", "HOLD_CONNECTION", "run_cgroup_of"]


def outside_errno(c, *sock_args):
    r = c.probe(None, "socket", *sock_args)
    return None if r.rc == 0 else r.errno


NOT_BUILT = ("EPROTONOSUPPORT", "ESOCKTNOSUPPORT", "EAFNOSUPPORT")


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


def run_cgroup_of(stdout):
    for line in stdout.splitlines():
        if line.startswith("0::/"):
            return line[3:]
    return None
