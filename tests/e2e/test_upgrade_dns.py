# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""DNS across an upgrade from an egressd that has no listener holder (issue
24): every commit of tests/upgrade-from predates the holder, so its
listeners would close with it. The unit's ExecStop= runs `egressd
--hold-listeners-of $MAINPID` first (hold/handover.c): the old egressd's
listener sockets go to a holder, the queries sent while no egressd runs
wait in them, and the new egressd answers them. A sandbox asking every
20 ms over UDP and every 100 ms over TCP loses none. The twin: the same
upgrade without the handover fails queries (the test can see a loss)."""

import os
import signal
import sys
import subprocess
import time
import types

from harness import *
from test_restart import Resolver, judge
from test_upgrade import UpgDaemon, upg_build_previous, upg_cgroup, upg_list, upg_selected

E2E_CLEANUP_PER_TEST = True   # each egressd's pins hold ~200 MiB of kernel memory

# Global answer addresses (rebinding rules strip loopback and reserved ones,
# and the ABI 1 releases' policies cannot allow them): nothing connects to
# them (Resolver(connect=False)), no packet leaves the machine.
UD_NET = "93.184.216.%d"
UD_UDP, UD_TCP = 260, 52


def ud_names(c, tag):
    """UD_UDP + UD_TCP names the test zone serves, each asked once."""
    names = [("q%d.%s.test" % (i, tag), UD_NET % (i % 250 + 1)) for i in range(UD_UDP + UD_TCP)]
    with open(c.dnsmasq.hosts, "a") as f:
        for name, addr in names:
            f.write("%s %s\n" % (addr, name))
    c.dnsmasq.proc.send_signal(signal.SIGHUP)
    last, addr = names[-1]
    check(wait_until(lambda: addr in dns_query("udp", "127.0.0.1", c.dnsmasq.port, last, "A")[1],
                     5, 0.1), "dnsmasq does not serve %s" % last)
    return names[:UD_UDP], names[UD_UDP:]


def ud_handover(c, d):
    """What the unit's ExecStop= runs before systemd stops the old egressd."""
    rc, said = ud_run_handover(c, d.sock, d.proc.pid, d.tag)
    check(rc == 0, "egressd --hold-listeners-of %d: exit %d: %s" % (d.proc.pid, rc, said[-2000:]))
    return said


def ud_run_handover(c, sock, pid, tag, wrap=()):
    """egressd --hold-listeners-of pid (under wrap, e.g. strace): its exit
    status and output. The output goes to a file: the holder it starts
    keeps what it inherited."""
    out = os.path.join(c.work, "handover-%s-%s.log" % (tag, RAND))
    env = dict(os.environ)
    if wrap:
        # LeakSanitizer (the ASan build) cannot run under ptrace: its check
        # at exit would fail the traced run.
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    with open(out, "w") as f:
        rc = subprocess.run(list(wrap) + [c.egressd, "--socket", sock,
                                          "--hold-listeners-of", str(pid)], env=env,
                            stdin=subprocess.DEVNULL, stdout=f, stderr=f,
                            timeout=CTL_TIMEOUT_S).returncode
    with open(out) as f:
        return rc, f.read()


def ud_upgrade(c, commit, handover):
    """Upgrade from commit while the sandbox resolves: the resolver's rows
    and what the handover said."""
    d = UpgDaemon(c, "ud%s%s" % (commit[:7], "h" if handover else "n"))
    udp, tcp = ud_names(c, "ud%s%s%s" % (commit[:5], "h" if handover else "n", RAND))
    d.start(upg_build_previous(c, commit))
    cg = upg_cgroup(c, "ud")
    d.attach(cg, c.policy(["%s:443" % name for name, _ in udp + tcp], tenant="upgdns"))
    res = Resolver(c, types.SimpleNamespace(cg=cg), udp, tcp, 443, connect=False)
    said = ""
    try:
        time.sleep(1.0 * TIME_SCALE)
        if handover:
            said = ud_handover(c, d)
        d.stop()
        time.sleep(0.3)  # queries pile up with no egressd at all
        d.start(c.build)
        time.sleep(1.5 * TIME_SCALE)
    finally:
        rows = res.finish()
    check(os.path.realpath(cg) in d.listed(), "the upgraded egressd does not list the sandbox")
    d.stop()
    return rows, said


@test
def upgrade_dns_no_failed_query_from_holderless(c):
    # Every release: the ABI 1 ones converted, the ABI 2 ones adopted.
    for commit in upg_selected(upg_list(False) + upg_list(True)):
        rows, said = ud_upgrade(c, commit, True)
        check("held by the listener holder" in said,
              "the handover did not hand the listeners over:\n%s" % said[-1500:])
        rep = judge(rows, lambda r: False, "upgrade from %s" % commit[:7], connected=False)
        # An ABI 2 egressd's queued queries carry their sender's record: only
        # those it had read when it stopped are asked again. ABI 1 recorded
        # no sender, so the queries queued under it cannot be told apart on
        # the shared listener and are dropped unanswered: the stub asks again
        # (docs/operations.md "Upgrades").
        if commit in upg_list(True):
            check(rep["retried"] <= 5, "upgrade from %s: %d queries needed a second attempt" %
                  (commit[:7], rep["retried"]))
        check(len([r for r in rows if r["tr"] == "udp"]) >= 100,
              "too few UDP queries were made: %d" % len(rows))
        print("    upgrade from %s with the handover: udp %s; tcp %s; %d retried" %
              (commit[:7], rep["udp"], rep["tcp"], rep["retried"]), flush=True)


@test
def upgrade_dns_without_handover_fails_queries(c):
    # The twin: the same upgrade, the old egressd's listeners closing with
    # it. Queries fail while no egressd runs, so the test above can tell.
    commit = upg_list(True)[-1]
    rows, _ = ud_upgrade(c, commit, False)
    failed = [r for r in rows if r.get("rcode") != 0 or r["want"] not in r.get("addrs", [])]
    check(failed, "no query failed across an upgrade without the handover (%d asked): the "
          "test cannot see a loss" % len(rows))
    print("    upgrade from %s without the handover: %d of %d queries failed" %
          (commit[:7], len(failed), len(rows)), flush=True)


@test
def handover_takes_nothing_of_another_program(c):
    # An ExecStop= whose pid names another program (a stale $MAINPID, a pid
    # reused): its sockets are never taken, even one the holder would keep
    # (UDP on loopback), and no holder is started.
    sock = os.path.join(c.work, "ho-other-%s.sock" % RAND)
    p = subprocess.Popen([sys.executable, "-c", "import socket, sys, time\n"
                          "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                          "s.bind(('127.0.0.1', 0)); print('up', flush=True); time.sleep(60)"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    CLEANUP.push("udp squatter", lambda: p.poll() is None and p.kill())
    check(p.stdout.readline().strip() == "up", "the test's UDP process did not start")
    rc, said = ud_run_handover(c, sock, p.pid, "other")
    check(rc != 0 and "is no egressd" in said,
          "the handover of a non-egressd pid: exit %d: %s" % (rc, said[-800:]))
    check(not os.path.exists(sock + ".hold"), "a holder was started for another program")
    p.kill()
    p.wait(5)
    # Sanity twin: the harness's egressd has a holder: nothing to take, exit 0,
    # and not one of its sockets duplicated on the way (the holder is asked
    # first).
    trace = os.path.join(c.work, "handover-own-%s.strace" % RAND)
    rc, said = ud_run_handover(c, c.sock, c.daemon.proc.pid, "own",
                               ("strace", "-f", "-qq", "-e", "trace=pidfd_getfd", "-o", trace))
    check(rc == 0 and "a listener holder answers" in said,
          "the handover of an egressd with a holder: exit %d: %s" % (rc, said[-800:]))
    with open(trace) as f:
        taken = [ln for ln in f if "pidfd_getfd(" in ln]
    check(not taken, "the handover took %d socket(s) of an egressd whose holder answers: %s" %
          (len(taken), "".join(taken[:3])))
    # Bad input names what is wrong.
    rc, said = ud_run_handover(c, sock, "12x", "bad")
    check(rc != 0 and "--hold-listeners-of" in said and "12x" in said,
          "a bad pid: exit %d: %s" % (rc, said[-800:]))
