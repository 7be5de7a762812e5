# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Red team 2 finding 1 (copied from branch red2, tests/e2e/area_redteam2.py):
# a link pin swapped by rename(2), then egressd killed. Asserts the SECURE
# behaviour. It imports test_hostile_daemon.py's hd_* helpers.

import os
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)
from test_hostile_daemon import (hd_as_root_in, hd_audit_ok, hd_held_ids, hd_links_dir, hd_pins)


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


@test
def redteam2_link_pins_swapped_while_egressd_down_held(c):
    """The same rename as above, done while egressd is down (no guard runs):
    the pin egr_connect4 then names the sendmsg4 link and the connect4 link
    is gone. At restart adoption checks each link's type, attach type and
    program against its pin name: the sandbox is held under deny-all with
    the missing programs attached again. Twin: an untouched sandbox is
    adopted as it was."""
    a, b = c.tcp("rt2-da"), c.tcp("rt2-db")
    sw = c.sandbox(["127.0.0.1:%d" % a.port], name="rt2-swap")
    same = c.sandbox(["127.0.0.1:%d" % a.port], name="rt2-same")
    sbs = (sw, same)
    try:
        for s in sbs:
            s.attach()
        swid, sameid = sandbox_id(c, sw), sandbox_id(c, same)
        d = hd_links_dir(c, swid)
        pins = hd_pins(c, swid)
        check("egr_connect4" in pins and "egr_sendmsg4" in pins, "pins: %r" % pins)
        sw.allowed("tcp", "127.0.0.1", a.port)
        sw.denied("tcp", "127.0.0.1", b.port)
        c.daemon.kill9()
        r = hd_as_root_in(sw.cg, *(RT2P_NOCAPS + ["mv", os.path.join(d, "egr_sendmsg4"),
                                                   os.path.join(d, "egr_connect4")]))
        check(r.returncode == 0, "rename of the pins as uid 0 without capabilities: %s" %
              r.stderr)
        c.daemon.start()
        held = hd_held_ids(c)
        check(swid in held, "the sandbox with swapped pins is not held: %r (%s)" %
              (held, c.log_tail(max_lines=20)))
        sw.denied("tcp", "127.0.0.1", b.port)
        sw.denied("tcp", "127.0.0.1", a.port)  # deny-all
        check(hd_pins(c, swid) == pins, "the programs were not attached again: %r" %
              hd_pins(c, swid))
        check(obs_alerts(c, "pin_removed", swid), "no pin_removed alert for %d" % swid)
        check(sameid not in held and c.find_sandbox(same.cg), "the untouched sandbox was not "
              "adopted: %r" % held)
        same.allowed("tcp", "127.0.0.1", a.port)
        same.denied("tcp", "127.0.0.1", b.port)
        hd_audit_ok(c)
    finally:
        c.ensure_daemon()
        for s in sbs:
            s.remove()
