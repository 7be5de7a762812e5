# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Red team 2 finding 1 (copied from branch red2, tests/e2e/area_redteam2.py):
# a link pin swapped by rename(2), then egressd killed. Asserts the SECURE
# behaviour. Exec'd by run.py after area_hostile_daemon.py (hd_* helpers).

RT2P_NOCAPS = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--"]


@test
def redteam2_link_pin_swapped_by_rename_then_egressd_killed(c):
    """uid 0 with no capability inside sandbox A, with bpffs in reach (docs
    row 2's setting), renames its sendmsg4 link pin over its connect4 pin:
    plain rename(2), no bpf() call (the OCI seccomp profile allows it).
    The guard (egr_bpf_check_pins) only asks whether each pin path exists:
    it re-pins the now missing sendmsg4 and never sees that egr_connect4
    names the wrong link. The real connect4 link is held only by egressd's
    fd; the tool then kills egressd (same uid): the kernel drops that link
    and the sandbox's connect() is judged by nothing while egressd is down.
    Secure: a swapped pin is noticed and re-pinned from egressd's own fd
    (identity, not only existence), so a crash leaves the hook attached."""
    a, b = c.tcp("rt2-pa"), c.tcp("rt2-pb")
    with c.sandbox(["127.0.0.1:%d" % a.port], name="rt2-pin") as sa:
        ida = sandbox_id(c, sa)
        d = hd_links_dir(c, ida)
        pins = hd_pins(c, ida)
        check("egr_connect4" in pins and "egr_sendmsg4" in pins, "pins: %r" % pins)
        sa.allowed("tcp", "127.0.0.1", a.port)
        sa.denied("tcp", "127.0.0.1", b.port)
        r = hd_as_root_in(sa.cg, *(RT2P_NOCAPS + ["mv", os.path.join(d, "egr_sendmsg4"),
                                                  os.path.join(d, "egr_connect4")]))
        check(r.returncode == 0, "rename of the pins as uid 0 without capabilities: %s" %
              r.stderr)
        check(wait_until(lambda: hd_pins(c, ida) == pins, 5),
              "the missing pin was not restored: %r" % hd_pins(c, ida))
        time.sleep(0.5)
        # Still enforced while egressd holds its fd.
        sa.denied("tcp", "127.0.0.1", b.port)
        # The tool kills egressd (same uid, no capability needed).
        pid = c.daemon.proc.pid
        r = hd_as_root_in(sa.cg, *(RT2P_NOCAPS + ["kill", "-9", str(pid)]))
        check(r.returncode == 0, "kill of egressd from the sandbox: %s" % r.stderr)
        check(wait_until(lambda: not c.daemon.alive(), 5), "egressd did not die")
        time.sleep(0.3)
        down = c.probe(sa.cg, "tcp", "127.0.0.1", b.port)
        c.daemon.start()
        s = c.find_sandbox(sa.cg)
        log("after restart: sandbox %r quarantined %r, held %r" % (
            s and s.get("id"), s and s.get("quarantined"), list(hd_held_ids(c))))
        up = c.probe(sa.cg, "tcp", "127.0.0.1", b.port)
        check(down.rc == 1 and down.errno == "EPERM",
              "with egressd down after a pin swap, the sandbox reached a denied "
              "destination: %s" % down)
        check(up.rc == 1 and up.errno == "EPERM",
              "after egressd restarted and adopted the swapped pins, the sandbox still "
              "reaches a denied destination: %s" % up)
