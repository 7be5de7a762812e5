# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# egressd's own reference of each sandbox link is a pin in a bpffs instance
# mounted nowhere, not an open file (docs/security.md row "bpffs pins",
# docs/architecture.md "Links and pins"). Run by run.py (harness.runner).
# The attack removes a sandbox's shared pins while egressd cannot put them
# back (stopped): only egressd's references keep the links, so the sandbox
# must stay confined; the twin is the allowed connect the same way.

import contextlib
import json
import os
import signal
import subprocess

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


def hr_files(pid):
    """egressd's open files: BPF links and the total."""
    links = total = 0
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        total += 1
        links += target == "anon_inode:bpf_link"
    return {"bpf_link": links, "total": total}


def hr_links_dir(c, sid):
    return os.path.join(c.bpffs, "links", str(sid))


def hr_link_ids(c, sid):
    """{program: link id} of the sandbox's shared pins (bpftool)."""
    d = hr_links_dir(c, sid)
    ids = {}
    for name in sorted(os.listdir(d)):
        r = run(["bpftool", "-j", "link", "show", "pinned", os.path.join(d, name)])
        check(r.returncode == 0, "bpftool link show pinned %s: %s" % (name, r.stderr.strip()))
        ids[name] = json.loads(r.stdout)["id"]
    return ids


@contextlib.contextmanager
def hr_stopped(pid):
    """egressd stopped for the block: its guard cannot put pins back."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def hr_bpf_mounts(pid):
    with open("/proc/%d/mountinfo" % pid) as f:
        return [ln for ln in f if " - bpf " in ln]


@contextlib.contextmanager
def hr_pinned_sandbox(c, name):
    """A sandbox allowed one server and not another: (sandbox, its id, its
    link ids, its links directory, allowed server, denied server)."""
    a, b = c.tcp(name), c.tcp(name + "-other")
    with c.sandbox(["127.0.0.1:%d" % a.port], name=name) as sa:
        sid = sandbox_id(c, sa)
        yield sa, sid, hr_link_ids(c, sid), hr_links_dir(c, sid), a, b


@test
def links_held_without_a_file_per_link(c):
    pid = c.daemon.proc.pid
    a = c.tcp("held")
    before = hr_files(pid)
    n = 24
    with contextlib.ExitStack() as stack:
        sbs = [stack.enter_context(c.sandbox(["127.0.0.1:%d" % a.port], name="held%d" % i))
               for i in range(n)]
        after = hr_files(pid)
        pins = len(os.listdir(hr_links_dir(c, sandbox_id(c, sbs[0]))))
        check(pins >= 6, "sandbox has %d link pins" % pins)
        # 13 link files per sandbox capped egressd at ~1,500 sandboxes.
        check(after["bpf_link"] == before["bpf_link"],
              "egressd holds %d more BPF link files with %d sandboxes" %
              (after["bpf_link"] - before["bpf_link"], n))
        # At most the DNS listeners of the namespace (4, made for the first
        # sandbox there) and a control connection in flight: nothing per sandbox.
        check(after["total"] - before["total"] <= 8,
              "egressd holds %d more files with %d sandboxes: %r -> %r" %
              (after["total"] - before["total"], n, before, after))
        # Mounted nowhere: egressd's mount table has no bpffs the host lacks.
        check(len(hr_bpf_mounts(pid)) == len(hr_bpf_mounts(os.getpid())),
              "egressd's mount table shows another bpffs: %r" % hr_bpf_mounts(pid))
        sbs[-1].allowed("tcp", "127.0.0.1", a.port)


@test
def shared_pins_removed_while_egressd_stopped_still_confine(c):
    pid = c.daemon.proc.pid
    with hr_pinned_sandbox(c, "holdA") as (sa, sid, ids, links_dir, a, b):
        check(len(ids) >= 6, "link pins: %r" % ids)
        with hr_stopped(pid):
            # uid 0 in the sandbox removes every shared pin of its sandbox;
            # egressd cannot pin them again while it is stopped.
            r = subprocess.run(["rm", "-rf", links_dir], stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                               preexec_fn=join_cgroup_fn(sa.cg))
            check(r.returncode == 0 and not os.path.exists(links_dir),
                  "rm -rf %s as root in the sandbox: %s" % (links_dir, r.stderr.strip()))
            # Only egressd's own references hold the links now.
            sa.denied("tcp", "127.0.0.1", b.port)
            sa.allowed("tcp", "127.0.0.1", a.port)
        check(wait_until(lambda: os.path.isdir(links_dir) and
                         len(os.listdir(links_dir)) == len(ids), 5),
              "pins not restored within 5 s")
        check(hr_link_ids(c, sid) == ids,
              "the restored pins are not the same links: %r -> %r" % (ids, hr_link_ids(c, sid)))
        check(wait_until(lambda: obs_alerts(c, "pin_removed", sid), 5),
              "no pin_removed alert for sandbox %d" % sid)
        sa.denied("tcp", "127.0.0.1", b.port)
        sa.allowed("tcp", "127.0.0.1", a.port)


def hr_problems(c):
    r = c.ctl("status", "--json")
    return json.loads(r.stdout).get("problems", []) if r.stdout.strip() else None


@test
def unrestorable_pin_is_a_health_problem_until_restored(c):
    # A directory planted where a link pin was (while egressd is stopped, so
    # the guard cannot win the race) cannot be pinned over: health names the
    # sandbox, from the guard's last check, until the name is free again.
    pid = c.daemon.proc.pid
    with hr_pinned_sandbox(c, "plant") as (sa, sid, _ids, ldir, a, b):
        victim = os.path.join(ldir, sorted(os.listdir(ldir))[0])
        want = "pins: sandbox %d: not all of its links are pinned" % sid
        # Twin: healthy before, with the same probe.
        check(want not in (hr_problems(c) or []), "reported before the attack")
        with hr_stopped(pid):
            os.unlink(victim)
            os.mkdir(victim)
        try:
            check(wait_until(lambda: want in (hr_problems(c) or []), 15, 0.2),
                  "an unrestorable pin is not a health problem: %r" % hr_problems(c))
            # Still enforced through egressd's reference.
            sa.denied("tcp", "127.0.0.1", b.port)
            sa.allowed("tcp", "127.0.0.1", a.port)
        finally:
            os.rmdir(victim)
        check(wait_until(lambda: os.path.exists(victim) and
                         want not in (hr_problems(c) or []), 15, 0.2),
              "pin not restored or still reported once the name is free: %r" %
              hr_problems(c))
        sa.allowed("tcp", "127.0.0.1", a.port)


@test
def pin_swapped_for_a_symlink_is_pinned_again(c):
    # The pin moved aside and a symlink left at its name (bpf_obj_get would
    # follow it to the same link, so a check by link id alone passes): the
    # guard replaces the symlink with a real pin of egressd's link. Twin: an
    # untouched pin of the same sandbox keeps its inode.
    pid = c.daemon.proc.pid
    with hr_pinned_sandbox(c, "symlink") as (sa, sid, ids, ldir, a, b):
        names = sorted(os.listdir(ldir))
        victim, twin = os.path.join(ldir, names[0]), os.path.join(ldir, names[1])
        twin_ino = os.lstat(twin).st_ino
        aside = os.path.join(c.bpffs, "aside-%d" % sid)
        with hr_stopped(pid):
            os.rename(victim, aside)
            os.symlink(aside, victim)
        try:
            check(wait_until(lambda: os.path.exists(victim) and not os.path.islink(victim), 5),
                  "the symlink at %s was not replaced by a pin" % victim)
            check(hr_link_ids(c, sid) == ids, "the pins name other links: %r -> %r" %
                  (ids, hr_link_ids(c, sid)))
            check(os.lstat(twin).st_ino == twin_ino, "the untouched pin was pinned again")
            sa.denied("tcp", "127.0.0.1", b.port)
            sa.allowed("tcp", "127.0.0.1", a.port)
        finally:
            os.unlink(aside)
