# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""The registry of tests: @test appends a test function, in load order.

@test(needs=("systemd",)) says what a test needs of the host beyond what
every e2e run has (root, cgroup2, bpffs): the runner checks each need
before the test (harness.needs) and a test whose need is unmet fails under
CI=true and is reported SKIP otherwise; never run silently on a host that
cannot run it. `run.py --without NEED` leaves such tests out, and says so
(make test on a host without systemd as PID 1; make test-kernels runs
them in its guests)."""

__all__ = ["TESTS", "test", "KNOWN_NEEDS", "KERNEL_SUBSET"]

TESTS = []
_NAMES = set()

# What a test may need (harness/needs.py probes each).
# plain_build: the test checks an artifact built from the plain tree (the
# .deb, the image); make test runs it on the release build (--needing) and
# leaves it out of the ASan pass (--without). qemu: test_microvm.py's VMM.
# runsc: runsc can run a networked sandbox here (test_runsc.py).
KNOWN_NEEDS = ("systemd", "lsm_cgroup", "no_lsm_cgroup", "cgroup_pids", "cgroup_memory",
               "plain_build", "qemu", "runsc")

# The kernel-dependent subset (issue 29), run.py --kernel-subset: the BPF
# decisions, the adversarial and hostile batteries, the escape guard (its
# tracepoints and its root programs), a detach's socket teardown (sock_diag
# SOCK_DESTROY, modules on Debian's kernels), the upgrade, the unit under
# systemd, the lsm_cgroup layer, and a device sandbox on the attach path
# that kernel takes (tc filters below 6.6, TCX from it): enforced across a
# SIGKILL of egressd, adopted on that path, its DNS rewritten to the
# sandbox's listener (one test: a topology costs ~20 s under TCG).
# MODULE or MODULE:PATTERN as run.py -m;
# each test's own needs decide where it may run. make test-kernels runs it
# in every guest, make test on this host's kernel with the release build.
KERNEL_SUBSET = ("test_unit", "test_lsm_cgroup", "test_hostile_kernel", "test_redteam2_escape",
                 "test_redteam5_escape", "test_hostile_daemon:hd_detach", "test_adversarial",
                 "test_hostile_run", "test_upgrade", "test_runsc",
                 "test_netdev:netdev_kernel_attach_path")


def _register(fn, needs):
    # -k selects by name and the reports name tests: a name is one test.
    if fn.__name__ in _NAMES:
        raise RuntimeError("two e2e tests are named %s (the second in %s)" %
                           (fn.__name__, fn.__code__.co_filename))
    for n in needs:
        if n not in KNOWN_NEEDS:
            raise RuntimeError("test %s needs %r, which is none of %s" %
                               (fn.__name__, n, ", ".join(KNOWN_NEEDS)))
    _NAMES.add(fn.__name__)
    fn.needs = tuple(needs)
    TESTS.append(fn)
    return fn


def test(fn=None, *, needs=()):
    """@test or @test(needs=(...))."""
    if fn is not None:
        return _register(fn, ())
    return lambda f: _register(f, tuple(needs))
