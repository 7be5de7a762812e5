#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""End-to-end tests of egressd: real BPF programs on real cgroups, real sockets.

Run as root:  python3 tests/e2e/run.py --build build [-k PATTERN] [-v] [--list]

It starts its own egressd (private control socket, bpffs dir and state dir),
creates cgroups under the cgroup2 mount, attaches policies with egressctl and
runs build/tests/netprobe inside those cgroups against servers that this
process runs on loopback and in a network namespace it creates.

Every resource it makes carries the name egressd-e2e-<pid>-<rand> (network
interfaces, limited to 15 bytes, carry a short tag and the full name as their
alias) and is removed on exit, on failure too.

The harness is the package tests/e2e/harness/, the tests are the modules
tests/e2e/test_<area>.py (docs/testing.md).

Exit status: 0 all passed, 1 a test failed (or a prerequisite is missing and
CI=true), 77 skipped (not root, no cgroup2, nothing built) outside CI.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness.runner import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(__doc__.splitlines()[0]))
