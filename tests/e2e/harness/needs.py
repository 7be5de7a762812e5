# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""What a host offers a test (@test(needs=...), harness/registry.py): each
probe returns None when the host has it, else why not."""

import os
import shutil

from .adv import adv_host_has_lsm_progs

__all__ = ["unmet_need"]

_CACHE = {}


def _systemd(c):
    if not os.path.isdir("/run/systemd/system"):
        return "PID 1 is not systemd (/proc/1/comm: %s)" % _read("/proc/1/comm")
    if not shutil.which("systemctl"):
        return "no systemctl"
    for d in ("/lib/systemd/system", "/usr/local/lib/systemd/system", "/etc/systemd/system"):
        if os.path.exists(os.path.join(d, "egressd.service")):
            return None
    return "egressd.service is not installed (our .deb: make deb; dpkg -i)"


def _lsm(c):
    has = adv_host_has_lsm_progs()
    if has is None:
        return "cannot tell whether lsm programs load (bpftool feature probe)"
    return None if has else "this kernel does not load lsm programs (no BPF trampolines)"


def _no_lsm(c):
    has = adv_host_has_lsm_progs()
    if has is None:
        return "cannot tell whether lsm programs load (bpftool feature probe)"
    return "this kernel loads lsm programs" if has else None


def _controller(name):
    def probe(c):
        ctrls = _read(os.path.join(c.cg_mount, "cgroup.controllers")).split()
        return None if name in ctrls else "cgroup2 does not offer the %s controller" % name
    return probe


def _plain_build(c):
    """The build under test is no sanitizer build: a test of a shipped
    artifact (the .deb, the image) made from the plain tree checks the
    same bytes in make test-asan's pass as in make test's."""
    try:
        with open(c.egressd, "rb") as f:
            asan = b"libasan.so" in f.read()
    except OSError as e:
        return "cannot read %s: %s" % (c.egressd, e)
    return "%s is an ASan/UBSan build" % c.egressd if asan else None


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return "?"


def _qemu(c):
    """A VMM for test_microvm.py (tools/install-deps installs qemu-system-x86)."""
    return None if shutil.which("qemu-system-x86_64") else "no qemu-system-x86_64"


RUNSC_PROBE = ("mount -t tmpfs -o size=4k,mode=0555 none /proc/sys/net && exec runsc --root "
               "%(d)s/state --network=sandbox run --bundle %(d)s egr-runsc-probe-%(pid)d")


def _runsc(c):
    """runsc can run a networked sandbox here: a real one, `true` in a
    namespace of its own with a veth (test_runsc.py; tools/install-deps
    --kernels installs runsc). /proc/sys/net hidden as test_runsc.py hides it."""
    import json
    import subprocess
    import tempfile
    if not shutil.which("runsc"):
        return "no runsc"
    if not os.path.exists("/bin/busybox"):
        return "no /bin/busybox (busybox-static)"
    d = tempfile.mkdtemp(prefix="runsc-probe-", dir=c.work)
    ns = "egrrsprobe%d" % os.getpid()
    sh = lambda *a: subprocess.run(list(a), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, timeout=120)
    try:
        os.makedirs(os.path.join(d, "rootfs", "bin"))
        shutil.copy("/bin/busybox", os.path.join(d, "rootfs", "bin", "busybox"))
        r = sh("runsc", "spec", "--bundle", d, "--", "/bin/busybox", "true")
        if r.returncode:
            return "runsc spec: %s" % r.stdout.strip()[-200:]
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        cfg["process"]["terminal"] = False
        for n in cfg["linux"]["namespaces"]:
            if n["type"] == "network":
                n["path"] = "/run/netns/" + ns
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "add", "p0", "type", "veth", "peer", "name", "p1")
        sh("ip", "-n", ns, "addr", "add", "10.250.0.1/30", "dev", "p0")
        sh("ip", "-n", ns, "link", "set", "p0", "up")
        r = sh("unshare", "--mount", "--propagation", "private", "sh", "-c",
               RUNSC_PROBE % {"d": d, "pid": os.getpid()})
        return None if r.returncode == 0 else \
            "runsc cannot run a networked sandbox here: %s" % r.stdout.strip()[-300:]
    except (OSError, subprocess.SubprocessError) as e:
        return "runsc probe: %s" % e
    finally:
        sh("runsc", "--root", os.path.join(d, "state"), "delete", "--force",
           "egr-runsc-probe-%d" % os.getpid())
        sh("ip", "netns", "del", ns)
        shutil.rmtree(d, True)


PROBES = {"systemd": _systemd, "qemu": _qemu, "runsc": _runsc, "lsm_cgroup": _lsm, "no_lsm_cgroup": _no_lsm,
          "cgroup_pids": _controller("pids"), "cgroup_memory": _controller("memory"),
          "plain_build": _plain_build}


def unmet_need(c, fn):
    """None when the host has all fn needs, else "NEED: why"."""
    for n in getattr(fn, "needs", ()):
        if n not in _CACHE:
            _CACHE[n] = PROBES[n](c)
        if _CACHE[n]:
            return "%s: %s" % (n, _CACHE[n])
    return None
