# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Upgrades from the release whose state files are unsigned (7cc0a42, ABI
# version 1): docs/security.md "Adopting unsigned state once",
# docs/operations.md "Upgrades". Each test runs its own egressd instances
# (test_upgrade.UpgDaemon) on their own socket, state and bpffs dirs.

import json
import os

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)
from test_upgrade import (UPG_ABI, UpgDaemon, upg_build_previous, upg_cgroup, upg_commits,
                          upg_start_loop, upg_stop_loop)

RELEASE = "7cc0a42d0d19015deb6aee509aacaea86a43378c"  # ABI version 1, no state.key


def uu_release(c):
    check(RELEASE in upg_commits(), "tests/upgrade-from does not name the release %s" % RELEASE)
    return upg_build_previous(c, RELEASE)


def uu_jsonl(path):
    try:
        with open(path) as f:
            return [json.loads(ln) for ln in f if ln.strip()]
    except FileNotFoundError:
        return []


def uu_alerts(d, type_):
    return [a for a in uu_jsonl(os.path.join(d.state, "alerts.jsonl")) if a.get("type") == type_]


def uu_audit(d, type_):
    return [r for r in uu_jsonl(os.path.join(d.state, "audit.log")) if r.get("type") == type_]


def uu_state_file(d, sid):
    return os.path.join(d.state, "sandboxes", "%d.json" % sid)


def uu_held(d):
    v = json.loads(d.ctl_ok("list", "--held", "--json").stdout)
    v = v.get("held", v) if isinstance(v, dict) else v
    return {h["id"]: h for h in v}


def uu_upgrade_keeps(c, tried_before):
    """The release runs a sandbox; this build replaces it while a process in
    the sandbox connects every few ms to an allowed and a denied port.
    tried_before: the operator had started this build on the same dirs once
    and rolled back to the release (so state.key exists, and the release
    wrote its files unsigned after it)."""
    old = uu_release(c)
    d = UpgDaemon(c, "uu%s" % ("roll" if tried_before else "first"))
    ok_srv, bad_srv, more_srv = c.tcp("uu-ok"), c.tcp("uu-bad"), c.tcp("uu-more")
    bad_udp = c.udp("uu-bad")
    bad_accepted = bad_srv.accepted
    if tried_before:
        d.start(c.build)
        d.stop()
        check(os.path.exists(os.path.join(d.state, "state.key")), "this build made no state.key")
        # Going back to a release before the append-only ledger files takes
        # `chattr -a` first (docs/audit.md), as an operator's rollback does.
        run(["chattr", "-R", "-f", "-a", d.state])
    d.start(old)
    cg = upg_cgroup(c, "uu-loop")
    d.attach(cg, c.policy(["127.0.0.1:%d" % ok_srv.port]))
    sid = d.listed()[os.path.realpath(cg)]["id"]
    with open(uu_state_file(d, sid)) as f:
        check('"mac"' not in f.read(), "the release signed its state file: not the case tested")
    loop = upg_start_loop(c, cg, ok_srv.port, bad_srv.port, bad_udp.port)
    try:
        check(wait_until(lambda: ok_srv.accepted > 50, 10), "the loop does not run")
        d.stop()
        d.start(c.build)
        text = d.log_since()
        at = ok_srv.accepted
        check(wait_until(lambda: ok_srv.accepted > at + 100, 10),
              "allowed connects stopped after the upgrade:\n%s" % text[-2000:])
    finally:
        res = upg_stop_loop(*loop)
    log("traffic loop across the upgrade: %r" % {k: v for k, v in res.items() if k != "failures"})
    check("upgrade from ABI version 1 to %d done" % UPG_ABI in text, "no upgrade:\n%s" %
          text[-3000:])
    # A connect every few ms throughout (5 ms at most between two), none
    # of them judged wrongly.
    check(res["rounds"] >= 200, "the loop ran only %d rounds" % res["rounds"])
    check(res["ok_failed"] == 0, "allowed connects were denied during the upgrade: %r" % res)
    check(res["bad_connected"] == 0 and bad_srv.accepted == bad_accepted and
          res["udp_sent"] == 0, "denied destinations were reached during the upgrade: %r" % res)
    # Managed as before: listed with its id, not held, no alert.
    check(d.listed().get(os.path.realpath(cg), {}).get("id") == sid,
          "the sandbox is not listed after the upgrade: %r\n%s" % (d.listed(), text[-3000:]))
    check(sid not in uu_held(d), "the sandbox is held: %r" % uu_held(d))
    check(not uu_alerts(d, "state_tampered"), "state_tampered alerts: %r" %
          uu_alerts(d, "state_tampered"))
    # The upgrade is in the audit chain, and the chain verifies.
    ups = [r for r in uu_audit(d, "state_upgrade") if r.get("sandbox") == sid]
    check(len(ups) == 1 and ups[0].get("cgroup_id") ==
          d.listed()[os.path.realpath(cg)]["cgroup_id"],
          "no state_upgrade audit record of sandbox %d: %r" % (sid, ups))
    r = d.ctl("audit", "verify", os.path.join(d.state, "audit.log"))
    check(r.returncode == 0, "audit verify after the upgrade: %s" % (r.stdout + r.stderr))
    with open(uu_state_file(d, sid)) as f:
        check('"mac":"' in f.read(), "the adopted file was not signed")
    check(not os.path.exists(os.path.join(d.state, "upgrade.unsigned")),
          "the window for unsigned files is still open after adoption")
    # update works (the issue's `not_found`), and enforces.
    c.denied(cg, "tcp", "127.0.0.1", more_srv.port)
    d.ctl_ok("update", "--cgroup", cg, "--policy",
             c.policy(["127.0.0.1:%d" % ok_srv.port, "127.0.0.1:%d" % more_srv.port]))
    c.allowed(cg, "tcp", "127.0.0.1", more_srv.port)
    c.denied(cg, "tcp", "127.0.0.1", bad_srv.port)
    return d, cg, sid, ok_srv


@test
def upgrade_from_release_keeps_sandbox(c):
    # Attack-free upgrade from the release operators run, two ways: straight,
    # and after a first try of this build and a rollback. The sandbox stays
    # managed (list, update), no verdict is wrong while the upgrade runs, it
    # is an audited upgrade and not a state_tampered alert.
    # The rollback flow first: on an egressd that opened the window only at
    # the start that makes state.key, it is held deny-all (issue 24).
    for tried_before in (True, False):
        d, cg, sid, ok_srv = uu_upgrade_keeps(c, tried_before)
        if tried_before:
            # Once only: with the window closed, stripping the MAC again is
            # tampering (held deny-all, alerted).
            d.stop()
            path = uu_state_file(d, sid)
            with open(path) as f:
                o = json.load(f)
            o.pop("mac")
            with open(path, "w") as f:
                json.dump(o, f)
            d.start(c.build)
            check(sid in uu_held(d), "a stripped MAC after the upgrade was accepted")
            check(uu_alerts(d, "state_tampered"), "no state_tampered alert for a stripped MAC")
            c.denied(cg, "tcp", "127.0.0.1", ok_srv.port)
        d.ctl_ok("detach", "--cgroup", cg)
        d.stop()


@test
def upgrade_unsigned_mismatch_held(c):
    # Attack: the release's unsigned state files edited by hand before the
    # upgrade, one to allow more than the kernel enforces, one to name
    # another cgroup. Both are held under deny-all with a state_tampered
    # alert; the untouched one (the sanity twin) is adopted and signed.
    old = uu_release(c)
    d = UpgDaemon(c, "uumis")
    ok_srv, bad_srv = c.tcp("uumis-ok"), c.tcp("uumis-bad")
    d.start(old)
    cgs = {n: upg_cgroup(c, "uumis-" + n) for n in ("ok", "loose", "cgid")}
    for cg in cgs.values():
        d.attach(cg, c.policy(["127.0.0.1:%d" % ok_srv.port]))
    listed = d.listed()
    ids = {n: listed[os.path.realpath(cg)]["id"] for n, cg in cgs.items()}
    d.stop()

    def edit(name, fn):
        path = uu_state_file(d, ids[name])
        with open(path) as f:
            o = json.load(f)
        fn(o)
        with open(path, "w") as f:
            json.dump(o, f)
    edit("loose", lambda o: o["policy"]["network"]["outbound_allow"].append(
        "127.0.0.1:%d" % bad_srv.port))
    edit("cgid", lambda o: o.update(cgroup_id=listed[os.path.realpath(cgs["ok"])]["cgroup_id"]))
    d.start(c.build)
    held = uu_held(d)
    alerted = {a.get("sandbox") for a in uu_alerts(d, "state_tampered")}
    for n in ("loose", "cgid"):
        check(ids[n] in held and held[ids[n]].get("state") == "tampered",
              "the edited (%s) unsigned file was not held: %r\n%s" %
              (n, held, d.log_since()[-2000:]))
        check(ids[n] in alerted, "no state_tampered alert for the %s file" % n)
        c.denied(cgs[n], "tcp", "127.0.0.1", bad_srv.port)
        c.denied(cgs[n], "tcp", "127.0.0.1", ok_srv.port)
    check(not [r for r in uu_audit(d, "state_upgrade") if r.get("sandbox") != ids["ok"]],
          "an edited file got a state_upgrade record")
    # Twin: the untouched file of the same release is adopted.
    check(ids["ok"] not in held and ids["ok"] not in alerted,
          "the untouched file was held or alerted: %r" % held)
    c.allowed(cgs["ok"], "tcp", "127.0.0.1", ok_srv.port)
    c.denied(cgs["ok"], "tcp", "127.0.0.1", bad_srv.port)
    d.ctl_ok("detach", "--cgroup", cgs["ok"])
    d.stop()
