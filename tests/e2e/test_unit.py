# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""The installed unit under a real systemd (PID 1): Type=notify readiness,
the watchdog, reload by SIGHUP, the sysusers group on the socket and
systemd-analyze security of the installed unit (issue 29).

They need systemd as PID 1 and our package installed (@test(needs=
("systemd",))): make test-kernels runs them in its guests (dpkg -i of our
.deb); make test leaves them out (--without systemd). The unit runs with
its own configuration file (a drop-in in /run points --config at it):
a socket, bpffs dir and state dir of this run, and the run's dnsmasq as
the only DNS upstream; the drop-in goes and the unit stops at the end."""

import copy
import grp
import json
import os
import re
import shutil
import signal
import time

from harness import (CLEANUP, DNS_REBIND_LO, RAND, RUN_ID, TIME_SCALE, Sandbox, TestFailure, check,
                     find_cgroup2, free_tcp_port, log, need_dnsmasq, run, test, wait_until)

UNIT = "egressd.service"
DROPIN_DIR = "/run/systemd/system/egressd.service.d"
DROPIN = os.path.join(DROPIN_DIR, "50-%s.conf" % RUN_ID)
CONFIG = "/run/%s.json" % RUN_ID
SOCK = "/run/egressd/%s.sock" % RUN_ID
BPFFS = "/sys/fs/bpf/%s-unit" % RUN_ID   # the harness's own egressd has /sys/fs/bpf/RUN_ID
STATE = "/var/lib/egressd/%s-unit" % RUN_ID
# The watchdog the test gives the unit (the package's is 30 s): twice that on
# an emulated guest, where a ping can be late.
WATCHDOG_S = int(10 * min(TIME_SCALE, 2))
START_S = int(90 * TIME_SCALE)
# systemd-analyze security of the installed unit (252, online); the offline
# score of the built unit is test_ops's OPS_EXPOSURE_MAX.
UNIT_EXPOSURE_MAX = 3.7
_STATE = {}


def systemctl(*args, timeout=60):
    return run(["systemctl", "--no-pager"] + list(args), timeout=timeout)


def unit_show(*props):
    r = systemctl("show", UNIT, "-p", ",".join(props))
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


def unit_exec_start():
    """The installed unit's ExecStartPre, ExecStart and ExecStop command
    lines, with this run's configuration file in place of the package's
    (the rest, e.g. --user egressd, as shipped: without it egressd is not
    the unit's)."""
    path = unit_show("FragmentPath")["FragmentPath"]
    with open(path) as f:
        text = f.read()
    out = []
    for key in ("ExecStartPre", "ExecStart", "ExecStop"):
        m = re.search(r"^%s=(.*--config )(\S+)(.*)$" % key, text, re.M)
        check(m, "%s has no %s with --config" % (path, key))
        out.append(m.group(1) + CONFIG + m.group(3))
    return out


def unit_cleanup():
    systemctl("stop", UNIT, timeout=START_S)
    for p in (DROPIN, CONFIG):
        if os.path.exists(p):
            os.unlink(p)
    systemctl("daemon-reload")
    systemctl("reset-failed", UNIT)
    shutil.rmtree(BPFFS, ignore_errors=True)
    shutil.rmtree(STATE, ignore_errors=True)


def unit_prepare(c):
    """The drop-in and configuration of this run, once."""
    if _STATE.get("prepared"):
        return
    if unit_show("ActiveState")["ActiveState"] in ("active", "activating", "reloading"):
        raise TestFailure("%s is already running on this host: these tests restart it" % UNIT)
    _STATE["exec"] = unit_exec_start()
    port = re.search(r"127\.0\.0\.1:(\d+)", " ".join(c.dns_args)).group(1)
    with open(CONFIG, "w") as f:
        json.dump({"socket": SOCK, "bpffs-dir": BPFFS, "state-dir": STATE, "group": "egressd",
                   "log-level": "info", "dns-upstream": ["127.0.0.1:%s" % port],
                   # The upstream (the run's dnsmasq) is starved too while a
                   # TCG guest's egressd starts: its bound stretches as the
                   # harness's do (the stub's, 5 s x E2E_TIME_SCALE).
                   "dns-upstream-timeout": int(2000 * min(TIME_SCALE, 3)),
                   "metrics-addr": "127.0.0.1:%d" % free_tcp_port()}, f)
    os.makedirs(DROPIN_DIR, exist_ok=True)
    CLEANUP.push("the unit's drop-in", unit_cleanup)
    _STATE["prepared"] = True
    unit_dropin()


def unit_dropin(start_extra=""):
    """This run's drop-in; start_extra: more ExecStart= options (an egressd
    as an earlier release ran it). daemon-reload."""
    pre, start, stop = _STATE["exec"]
    with open(DROPIN, "w") as f:
        f.write("[Service]\nExecStartPre=\nExecStartPre=%s\nExecStart=\nExecStart=%s%s\n"
                "ExecStop=\nExecStop=%s\nWatchdogSec=%ds\nTimeoutStartSec=%ds\n" %
                (pre, start, start_extra, stop, WATCHDOG_S, START_S))
    r = systemctl("daemon-reload")
    check(r.returncode == 0, "daemon-reload: %s" % r.stderr)


def unit_status(uid=None, gid=None):
    argv = ["egressctl", "--socket", SOCK, "status", "--json"]
    if uid is not None:
        argv = ["setpriv", "--reuid", str(uid), "--regid", str(gid), "--clear-groups"] + argv
    return run(argv, timeout=30 * TIME_SCALE)


def unit_started(c):
    """The unit active with this run's drop-in; its MainPID."""
    unit_prepare(c)
    st = unit_show("ActiveState", "MainPID")
    if st["ActiveState"] != "active":
        t0 = time.monotonic()
        r = systemctl("start", UNIT, timeout=START_S + 30)
        if r.returncode != 0:
            journal = unit_journal(60)
            systemctl("stop", UNIT, timeout=START_S)   # no restart loop behind us
            raise TestFailure("systemctl start %s: %s\n%s" % (UNIT, r.stderr.strip(), journal))
        log("systemctl start returned after %.1f s" % (time.monotonic() - t0))
        st = unit_show("ActiveState", "MainPID")
    check(st["ActiveState"] == "active" and int(st["MainPID"]) > 0, "unit state: %r" % st)
    return int(st["MainPID"])


def unit_journal(lines=40):
    r = run(["journalctl", "-u", UNIT, "-o", "cat", "--no-pager", "-n", str(lines)], timeout=60)
    return r.stdout


@test(needs=("systemd",))
def unit_notify_readiness(c):
    # Type=notify: `systemctl start` returns once egressd said READY=1, which
    # it does only with the control socket listening: status answers at once.
    props = unit_show("Type", "NotifyAccess", "WatchdogUSec")
    check(props.get("Type") == "notify" and props.get("NotifyAccess") == "main",
          "installed unit: %r" % props)
    unit_started(c)
    r = unit_status()
    check(r.returncode in (0, 5), "status right after `systemctl start`: %d %s" %
          (r.returncode, r.stderr))
    st = json.loads(r.stdout)
    check(st.get("pid") == int(unit_show("MainPID")["MainPID"]),
          "the socket is not the unit's main process's: %r" % st.get("pid"))
    layers = st.get("layers", {})
    log("layers under the unit: %r" % layers)
    check(layers.get("sock_addr") is True, "layers: %r" % layers)
    # systemd saw the STATUS= text, not only READY=1.
    check(unit_show("StatusText")["StatusText"] != "", "no STATUS= from egressd")


@test(needs=("systemd",))
def unit_socket_group_from_sysusers(c):
    # The package's sysusers.d file made the group; egressd hands it the socket.
    unit_started(c)
    try:
        gid = grp.getgrnam("egressd").gr_gid
    except KeyError:
        raise TestFailure("no group egressd: systemd-sysusers did not create it")
    st = os.stat(SOCK)
    check(st.st_gid == gid and st.st_mode & 0o777 == 0o660,
          "socket %s: gid %d mode %o, want gid %d (egressd) 0660" %
          (SOCK, st.st_gid, st.st_mode & 0o777, gid))
    # A member of the group may ask; nobody else (uid 65534, its own group) may.
    r = unit_status(65534, gid)
    check(r.returncode in (0, 5), "uid 65534 in group egressd: %d %s" % (r.returncode, r.stderr))
    r = unit_status(65534, 65534)
    check(r.returncode not in (0, 5), "uid 65534 outside group egressd got status: %r" %
          r.stdout[:200])


@test(needs=("systemd",))
def unit_reload_is_sighup(c):
    pid = unit_started(c)
    r = systemctl("reload", UNIT, timeout=60 * TIME_SCALE)
    check(r.returncode == 0, "systemctl reload: %s" % r.stderr)
    check(wait_until(lambda: "reload: " in unit_journal(20), 10),
          "egressd logged no reload after `systemctl reload`:\n%s" % unit_journal(20))
    st = unit_show("MainPID", "ActiveState")
    check(int(st["MainPID"]) == pid and st["ActiveState"] == "active",
          "reload restarted the unit: %r (was pid %d)" % (st, pid))
    check(unit_status().returncode in (0, 5), "status after reload failed")


@test(needs=("systemd",))
def unit_analyze_security(c):
    unit_started(c)
    r = run(["systemd-analyze", "security", "--no-pager", UNIT], timeout=120)
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout)
    check(m, "systemd-analyze security printed no score: %d %s" % (r.returncode, r.stderr))
    log("systemd-analyze security (installed, running): %s" % m.group(1))
    check(float(m.group(1)) <= UNIT_EXPOSURE_MAX, "exposure %s over %.1f:\n%s" %
          (m.group(1), UNIT_EXPOSURE_MAX, r.stdout[-3000:]))


@test(needs=("systemd",))
def unit_watchdog_restarts_a_hung_egressd(c):
    pid = unit_started(c)
    restarts = int(unit_show("NRestarts")["NRestarts"])
    # Twin: a live egressd pings the watchdog; one and a half periods pass
    # with the same process.
    time.sleep(WATCHDOG_S * 1.5)
    check(int(unit_show("MainPID")["MainPID"]) == pid, "the unit restarted a live egressd")
    os.kill(pid, 19)   # SIGSTOP: hung, as far as systemd can tell
    try:
        def restarted():
            st = unit_show("MainPID", "ActiveState", "NRestarts")
            return (int(st["MainPID"]) not in (0, pid) and st["ActiveState"] == "active" and
                    int(st["NRestarts"]) > restarts)
        check(wait_until(restarted, (WATCHDOG_S + START_S + 10) / TIME_SCALE, 0.5),
              "a stopped egressd was not restarted by the watchdog: %r\n%s" %
              (unit_show("MainPID", "ActiveState", "NRestarts", "Result"), unit_journal()))
    finally:
        try:
            os.kill(pid, 18)   # SIGCONT, should it still be there
        except ProcessLookupError:
            pass
    check("watchdog" in run(["journalctl", "-u", UNIT, "--no-pager", "-n", "200"],
                            timeout=60).stdout.lower(),
          "the journal does not say the watchdog fired")
    check(unit_status().returncode in (0, 5), "the restarted egressd does not answer")


class _UnitDaemon:
    """What Sandbox asks of a context's daemon, for the unit's egressd."""

    def alive(self):
        return unit_show("ActiveState")["ActiveState"] == "active"


def unit_dns_across(c, what, act):
    """A sandbox of the unit's egressd resolving a name every 20 ms over UDP
    and every 100 ms over TCP (both stretched by E2E_TIME_SCALE on an
    emulated guest, as is the stub's 5 s timeout) while act(marks) restarts
    it: every query answered at its first transmission, each after its
    address is learned. The latency report."""
    from test_restart import Resolver, Targets, judge
    need_dnsmasq(c)
    unit_started(c)
    udp_every, tcp_every = 0.02 * TIME_SCALE, 0.1 * TIME_SCALE
    # Names for 60 s of asking (three restarts of a TCG guest's egressd fit;
    # checked below); the resolver stops when told. One listener each.
    n_udp, n_tcp = int(60 / udp_every), int(60 / tcp_every)
    _STATE["dns_seq"] = _STATE.get("dns_seq", 0) + 1
    tg = Targets(c, "unit%d%s" % (_STATE["dns_seq"], RAND), n_udp + n_tcp)
    u = copy.copy(c)          # the harness's context, on the unit's socket
    u.sock, u.daemon = SOCK, _UnitDaemon()
    policy = c.policy(["%s:%d" % (name, tg.port) for name, _ in tg.names],
                      extra_network=DNS_REBIND_LO)
    marks = []
    try:
        with Sandbox(u, policy, "unit-dns") as sb:
            res = Resolver(c, sb, tg.names[:n_udp], tg.names[n_udp:], tg.port,
                           timeout=5.0 * TIME_SCALE, every=(udp_every, tcp_every))
            try:
                time.sleep(0.6 * TIME_SCALE)
                act(marks)
            finally:
                rows = res.finish()
    finally:
        tg.close()   # its listeners, one per name: the next test's would not fit
    check(rows and max(r["got"] for r in rows) - min(r["sent"] for r in rows) <
          n_udp * udp_every, "the restarts outlasted the names the resolver had")
    rep = judge(rows, lambda r: True, what)
    check(len([r for r in rows if r["tr"] == "udp"]) >= 50,
          "too few UDP queries were made: %d" % len(rows))
    return rep, marks


def unit_restart(i, marks):
    pid = int(unit_show("MainPID")["MainPID"])
    t = time.monotonic()
    r = systemctl("restart", UNIT, timeout=START_S + 30)
    check(r.returncode == 0, "systemctl restart %d: %s\n%s" %
          (i + 1, r.stderr.strip(), unit_journal(40)))
    check(int(unit_show("MainPID")["MainPID"]) not in (0, pid),
          "restart %d kept pid %d" % (i + 1, pid))
    marks.append("restart %d: %.0f ms" % (i + 1, (time.monotonic() - t) * 1000))
    time.sleep(0.4 * TIME_SCALE)


@test(needs=("systemd",))
def unit_restart_three_times_loses_no_dns(c):
    """Issue 24 under a real systemd: `systemctl restart` three times while
    a sandbox resolves (unit_dns_across): KillMode=process keeps the
    listener holder across each restart."""
    def act(marks):
        for i in range(3):
            unit_restart(i, marks)
    rep, marks = unit_dns_across(c, "across 3 systemctl restarts", act)
    log("systemctl restart: udp %s; tcp %s; %s" % (rep["udp"], rep["tcp"], "; ".join(marks)))
    print("    unit_restart_three_times_loses_no_dns: udp %s; tcp %s; %s" %
          (rep["udp"], rep["tcp"], "; ".join(marks)), flush=True)


def unit_quit_holders():
    """SIGTERM the listener holders in the unit's cgroup (KillMode=process
    leaves them across a stop), so that the next egressd starts without
    one. The holder answers only its own uid and cgroup: no QUIT from us."""
    cg = unit_show("ControlGroup")["ControlGroup"]
    procs = os.path.join(find_cgroup2(), cg.lstrip("/"), "cgroup.procs")
    pids = []
    try:
        with open(procs) as f:
            pids = [int(x) for x in f.read().split()]
    except OSError:
        return
    for pid in pids:
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                if b"--run-listener-holder" not in f.read():
                    continue
            os.kill(pid, signal.SIGTERM)
        except OSError:
            continue
        check(wait_until(lambda: not os.path.exists("/proc/%d" % pid), 10 * TIME_SCALE),
              "the unit's listener holder %d did not exit on SIGTERM" % pid)


@test(needs=("systemd",))
def unit_upgrade_from_holderless_loses_no_dns(c):
    """An upgrade from an egressd without a listener holder, as a package
    upgrade makes it: the running egressd has none (--listener-holder off,
    as every release before the holder ran), the new unit is loaded
    (daemon-reload) and the service restarted. The unit's ExecStop= hands
    the old egressd's listeners to a holder before systemd stops it, so no
    query is lost (unit_dns_across)."""
    systemctl("stop", UNIT, timeout=START_S)
    unit_prepare(c)
    unit_quit_holders()   # the earlier tests' holder would answer the handover
    unit_dropin(" --listener-holder off")
    try:
        def act(marks):
            unit_dropin()   # the new package's unit
            unit_restart(0, marks)
        rep, marks = unit_dns_across(c, "across an upgrade from an egressd without a holder",
                                     act)
        journal = unit_journal(200)
        check("held by the listener holder" in journal,
              "the unit's ExecStop= did not hand the listeners over:\n%s" % journal[-3000:])
    finally:
        unit_dropin()
    print("    unit_upgrade_from_holderless_loses_no_dns: udp %s; tcp %s; %s" %
          (rep["udp"], rep["tcp"], "; ".join(marks)), flush=True)
