# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""The runner: finds the tests, sets up the run (work dir, cgroup root, dnsmasq,
egressd), runs the tests one by one with the suite's timeout and cleans up.

Tests live in tests/e2e/test_<area>.py modules that import what they use from
this package. The files of the first round of tests run first, in the order
they were written (CORE_MODULES), then every other test_*.py in file name
order, then the old-style tests/e2e/area_*.py files (see load_areas).
"""

import argparse
import atexit
import glob
import importlib
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback

from . import core
from .core import (CLEANUP, RUN_ID, SUITE_TIMEOUT_S, TestFailure, cgroup_remove_tree, find_cgroup2,
                   kill_descendants,
                   log, on_alarm, on_signal, prerequisite_missing, read_sysctl, set_sysctl_for_run)
from .ctx import Ctx, Daemon, quit_listener_holders
from .confine import outside_errno
from .dns import start_dns_upstream
from .registry import KERNEL_SUBSET, KNOWN_NEEDS, TESTS
from .needs import unmet_need

__all__ = ["CORE_MODULES", "E2E_DIR", "load_tests", "load_areas", "setup", "detach_leftovers",
           "main"]

E2E_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The tests that were run.py's own, in the order they ran there.
CORE_MODULES = ("test_confine", "test_events", "test_metering", "test_adversarial", "test_dns",
                "test_privilege")


# What the old run.py imported (an area_*.py file could use them unimported).
OLD_RUN_PY_MODULES = ("argparse", "atexit", "glob", "json", "os", "random", "shutil", "signal",
                      "socket", "subprocess", "sys", "tempfile", "threading", "time",
                      "traceback")


def load_tests(e2e_dir=E2E_DIR):
    """Import every test module (each registers its tests with @test)."""
    if e2e_dir not in sys.path:
        sys.path.insert(0, e2e_dir)
    names = list(CORE_MODULES)
    for path in sorted(glob.glob(os.path.join(e2e_dir, "test_*.py"))):
        name = os.path.basename(path)[:-3]
        if name not in names:
            names.append(name)
    modules = [importlib.import_module(name) for name in names]
    load_areas(e2e_dir, modules)
    return modules


def load_areas(e2e_dir, modules):
    """Compatibility with the old layout: a tests/e2e/area_<name>.py file is
    exec'd, in file name order, into one namespace that holds the harness's
    public names, the standard modules run.py used to import and the
    top-level names of every test module (the helpers area files used to
    see: one namespace held them all)."""
    paths = sorted(glob.glob(os.path.join(e2e_dir, "area_*.py")))
    if not paths:
        return
    import harness
    ns = {"__name__": "e2e_areas", "__file__": os.path.join(e2e_dir, "run.py")}
    for name in OLD_RUN_PY_MODULES:
        ns[name] = importlib.import_module(name)
    ns["errno_mod"] = importlib.import_module("errno")
    for mod in modules:
        ns.update({k: v for k, v in vars(mod).items() if not k.startswith("__")})
    ns.update({k: getattr(harness, k) for k in harness.__all__})
    for path in paths:
        log("loading old-style %s" % os.path.basename(path))
        with open(path) as f:
            code = compile(f.read(), path, "exec")
        exec(code, ns)


def setup(ctx):
    ctx.work = tempfile.mkdtemp(prefix=RUN_ID + ".")
    CLEANUP.push("work dir", shutil.rmtree, ctx.work, True)
    # egressd keeps its audit log, audit.state and billing.state append-only
    # (FS_APPEND_FL): lift it first, or rmtree cannot unlink them.
    CLEANUP.push("append-only flags", core.run, ["chattr", "-R", "-f", "-a", ctx.work])
    ctx.sock = os.path.join(ctx.work, "egressd.sock")
    ctx.state = os.path.join(ctx.work, "state")
    ctx.daemon_log = os.path.join(ctx.work, "egressd.log")
    ctx.cg_root = os.path.join(ctx.cg_mount, RUN_ID)
    os.mkdir(ctx.cg_root)
    CLEANUP.push("cgroups", cgroup_remove_tree, ctx.cg_root)
    # bpffs dir: removing the pins detaches whatever links are left.
    CLEANUP.push("bpffs dir", shutil.rmtree, ctx.bpffs, True)
    ctx.daemon = Daemon(ctx)
    # After egressd (the stack runs backwards): the listener holders it and
    # the tests' own egressd instances started keep their sockets for a
    # successor that will not come.
    CLEANUP.push("listener holders", quit_listener_holders, ctx.work)
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
    start_dns_upstream(ctx)  # before egressd: its --dns-upstream
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


def needs_arg(ap, opt, values):
    """The NEED names of a repeatable NEED[,NEED] option, each checked."""
    got = {n for v in values for n in v.split(",") if n}
    for n in got:
        if n not in KNOWN_NEEDS:
            ap.error("%s %s: not one of %s" % (opt, n, ", ".join(KNOWN_NEEDS)))
    return got


def main(description="egressd end-to-end tests", argv=None):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--build", default="build", help="build directory (default build)")
    ap.add_argument("-k", dest="pattern", help="run only tests whose name contains PATTERN")
    ap.add_argument("-m", "--module", action="append", default=[], metavar="MODULE[:PATTERN]",
                    help="run only the tests of tests/e2e/MODULE.py (repeatable); with "
                    ":PATTERN only those of its tests whose name contains PATTERN")
    ap.add_argument("--kernel-subset", action="store_true",
                    help="add the kernel-dependent subset to the selection (registry.py's "
                    "KERNEL_SUBSET: what make test-kernels runs in its guests)")
    ap.add_argument("--needing", action="append", default=[], metavar="NEED[,NEED]",
                    help="add the tests that need NEED to the selection; -m, --kernel-subset "
                    "and --needing add up, and without any of them every test is selected")
    ap.add_argument("--without", action="append", default=[], metavar="NEED[,NEED]",
                    help="leave out the tests that need NEED (%s); the run says how many" %
                    ", ".join(KNOWN_NEEDS))
    ap.add_argument("-v", "--verbose", action="store_true", help="show every probe")
    ap.add_argument("--suite-timeout", type=int, default=SUITE_TIMEOUT_S, metavar="S",
                    help="hard stop for the whole run in seconds (default %d)" % SUITE_TIMEOUT_S)
    ap.add_argument("--list", action="store_true",
                    help="print the names of the tests (those -k selects) and exit")
    args = ap.parse_args(argv)
    core.VERBOSE = args.verbose

    modules = load_tests()
    names = {m.__name__ for m in modules}
    specs = args.module + (list(KERNEL_SUBSET) if args.kernel_subset else [])
    sel = [m.partition(":")[::2] for m in specs]
    for m, _ in sel:
        if m not in names:
            ap.error("no test module %s (tests/e2e/%s.py)" % (m, m))
    without = needs_arg(ap, "--without", args.without)
    needing = needs_arg(ap, "--needing", args.needing)

    def selected(t):
        if not sel and not needing:
            return True
        return (any(t.__module__ == m and p in t.__name__ for m, p in sel) or
                bool(needing & set(t.needs)))
    tests = [t for t in TESTS if (not args.pattern or args.pattern in t.__name__) and selected(t)]
    for m, p in sel:
        if p and not any(t.__module__ == m and p in t.__name__ for t in tests):
            ap.error("-m %s:%s selects no test" % (m, p))   # never an empty selection
    left_out = [t for t in tests if without & set(t.needs)]
    tests = [t for t in tests if t not in left_out]
    if args.list:
        for t in tests:
            print(t.__name__)
        return 0
    if left_out:
        # Never silent: what is left out, and why.
        print("not selected (--without %s): %d test(s): %s" %
              (",".join(sorted(without)), len(left_out), " ".join(t.__name__ for t in left_out)),
              flush=True)

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

    CLEANUP.push("leftover processes", kill_descendants)  # pushed first: runs last
    atexit.register(CLEANUP.run)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    signal.signal(signal.SIGALRM, on_alarm)
    if args.suite_timeout <= 0:
        ap.error("--suite-timeout must be a positive number of seconds")
    core.SUITE_TIMEOUT_S = args.suite_timeout  # on_alarm's message names it
    signal.alarm(args.suite_timeout)

    print("e2e run %s: %d test(s)" % (RUN_ID, len(tests)), flush=True)
    passed = failed = skipped = 0
    start = time.monotonic()
    try:
        setup(ctx)
    except Exception as e:
        print("FAIL setup: %s" % e, flush=True)
        if core.VERBOSE:
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
        unmet = unmet_need(ctx, t)
        if unmet:
            if os.environ.get("CI", "").lower() == "true":
                failed += 1
                print("FAIL %s: cannot run here: needs %s (CI=true: a test that cannot run "
                      "fails)" % (t.__name__, unmet), flush=True)
            else:
                skipped += 1
                print("SKIP %s: needs %s" % (t.__name__, unmet), flush=True)
            continue
        mark = ctx.log_size()
        t0 = time.monotonic()
        cleanup_mark = len(CLEANUP.actions)
        try:
            ctx.ensure_daemon()
            t(ctx)
            if not ctx.daemon.alive():
                raise TestFailure("egressd exited during the test (status %s)" %
                                  ctx.daemon.proc.returncode)
            not_text = ctx.log_not_text(mark)
            if not_text:
                raise TestFailure("egressd's log is not text (UTF-8) %s" % not_text)
            passed += 1
            print("PASS %s (%.1fs)" % (t.__name__, time.monotonic() - t0), flush=True)
        except Exception as e:
            failed += 1
            timed_out = isinstance(e, TimeoutError)
            reason = str(e) if isinstance(e, TestFailure) else "%s: %s" % (type(e).__name__, e)
            print("FAIL %s: %s" % (t.__name__, reason), flush=True)
            if core.VERBOSE or not isinstance(e, TestFailure):
                traceback.print_exc(file=sys.stdout)
            tail = ctx.log_tail(mark)
            if tail:
                print("  egressd log during the test:\n%s" % tail, flush=True)
        if getattr(sys.modules.get(t.__module__), "E2E_CLEANUP_PER_TEST", False):
            CLEANUP.run_since(cleanup_mark)
    signal.alarm(0)
    log("total %.1fs" % (time.monotonic() - start))
    CLEANUP.run()  # before the summary, so that it is the last line
    print("%d passed, %d failed%s" % (passed, failed,
                                      ", %d skipped" % skipped if skipped else ""), flush=True)
    return 1 if failed else 0
