# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Red team 3: today's fast-path changes attacked as a hostile tool would
# (shared DNS listeners, attach "create", the tenant-quota skip, the pin
# guard's event filter). Each test passing is a defence that held;
# the raw-socket forgery it found is closed (redteam3_raw_forged_*). Run by run.py.

import os
import socket
import struct
import subprocess
import sys
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)
from test_dnsscale import dsc_hold, dsc_policy, dsc_port4, dsc_proxy
from test_fastbpf import (CAP, TENANT_NO_QUOTA, fb_check_bound, fb_check_free,
                          fb_kernel_flags, fb_policy)
from test_hostile_daemon import hd_as_root_in, hd_links_dir, hd_pins
from test_run2 import run2_attach_req, run2_request, run2_walks
from test_tenant import TnBlackholeUpstream, tn_with_upstream


def rt3_query(qid, name):
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\0" + struct.pack(">HH", 1, 1)


def rt3_host_ask(sport, lport, name):
    """From this (the test's, outside every sandbox) process: one query from
    127.0.0.1:sport straight to the shared listener 127.0.0.1:lport."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind(("127.0.0.1", sport))
        s.settimeout(1.0)
        s.sendto(rt3_query(0x3333, name), ("127.0.0.1", lport))
        try:
            return struct.unpack(">H", s.recv(4096)[2:4])[0] & 15
        except socket.timeout:
            return None
    finally:
        s.close()


@test
def redteam3_dns_closed_source_reused_is_not_the_old_sandbox(c):
    """Hostile: sandbox A (which may not resolve api.test) binds the very
    UDP source sandbox B asked from after B's socket closed, hoping for
    B's record (and B's policy). A process outside every sandbox tries the
    same source next. The kernel forgets B's record at sock_release: A is
    served as itself (refused), the outsider not at all (counted foreign).
    Twin: B is answered NOERROR from that source while it is open."""
    need_dnsmasq(c)
    with Sandbox(c, dsc_policy(c, ["api.test"], "rt3-b"), "rt3-reuse-b") as b, \
            Sandbox(c, dsc_policy(c, ["other-%s.test" % RAND], "rt3-a"), "rt3-reuse-a") as a:
        sport = free_udp_tcp_port("127.0.0.1")
        hb = dsc_hold(b.cg, sport, "api.test", 0)
        CLEANUP.push("rt3 holder", lambda: hb.poll() is None and hb.kill())
        out, err = hb.communicate(timeout=20)
        check(out.split() == ["0", "0"], "B from its own source: %r %r" % (out, err[-200:]))
        b0, a0 = dsc_proxy(c, b), dsc_proxy(c, a)
        ha = dsc_hold(a.cg, sport, "api.test", 0)
        CLEANUP.push("rt3 holder", lambda: ha.poll() is None and ha.kill())
        out, err = ha.communicate(timeout=20)
        check(out.split() == ["3", "3"], "A from B's former source, api.test: %r %r (want "
              "NXDOMAIN, the denial of A's own policy)" % (out, err[-200:]))
        rc = rt3_host_ask(sport, dsc_port4(c, b), "api.test")
        b1, a1 = dsc_proxy(c, b), dsc_proxy(c, a)
        check(rc is None, "a process outside every sandbox was answered (rcode %r) from a "
              "source sandboxes asked from" % rc)
        check(b1["allowed"] == b0["allowed"], "B was served queries it did not send: %r -> %r"
              % (b0, b1))
        check(a1["refused"] - a0["refused"] == 2, "A was not served as itself: %r -> %r"
              % (a0, a1))
        check(b1["foreign_dropped"] > b0["foreign_dropped"],
              "the outsider's query was not counted foreign: %r -> %r" % (b0, b1))


@test
def redteam3_dns_tcp_connection_reused_port_is_own(c):
    """Hostile: sandbox A, refused api.test, connects TCP to the resolver
    from the source port sandbox B's TCP query just used (B closed first;
    SO_REUSEADDR gets past TIME_WAIT). Served as A: refused. Twin: B's
    TCP query from that port is answered."""
    need_dnsmasq(c)
    script = r"""
import socket, struct, sys
sport, name = int(sys.argv[1]), sys.argv[2]
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", sport))
s.settimeout(3)
s.connect(("127.0.0.2", 53))
q = struct.pack(">HHHHHH", 0x4444, 0x0100, 1, 0, 0, 0)
for label in name.split("."):
    q += bytes([len(label)]) + label.encode()
q += b"\0" + struct.pack(">HH", 1, 1)
s.sendall(struct.pack(">H", len(q)) + q)
try:
    m = s.recv(4096)
    print(struct.unpack(">H", m[4:6])[0] & 15 if len(m) >= 6 else "short")
except socket.timeout:
    print("timeout")
s.close()
"""
    with Sandbox(c, dsc_policy(c, ["api.test"], "rt3-tb"), "rt3-tcp-b") as b, \
            Sandbox(c, dsc_policy(c, ["other-%s.test" % RAND], "rt3-ta"), "rt3-tcp-a") as a:
        sport = free_udp_tcp_port("127.0.0.1")
        rb = in_sandbox(b.cg, script, str(sport), "api.test")
        check(rb == ["0"], "B's TCP query: %r" % rb)
        b0 = dsc_proxy(c, b)
        ra = in_sandbox(a.cg, script, str(sport), "api.test")
        b1 = dsc_proxy(c, b)
        check(ra == ["3"], "A's TCP query from B's former port: %r (want NXDOMAIN, denied)" % ra)
        check(b1["allowed"] == b0["allowed"], "A's query was served as B: %r -> %r" % (b0, b1))


@test
def redteam3_tenant_changed_by_update_into_capped_tenant(c):
    """Hostile: a sandbox of a tenant with no quota (it skips the tenant
    quota lookup, EGR_SB_TENANT_NO_QUOTA) is updated into a tenant that
    has one (set by a sibling's policy; the update's own policy names no
    limit), and sends past the cap through the old skip. The update must
    take the mark off. Twin: before the update the same send goes
    through."""
    sink = SinkServer()
    free_t, capped_t = "rt3f-" + RAND, "rt3c-" + RAND
    plain = fb_policy(c, ["tcp/127.0.0.1:%d" % sink.port], free_t, None)
    setter = fb_policy(c, ["tcp/127.0.0.1:9"], capped_t, CAP)
    moved = fb_policy(c, ["tcp/127.0.0.1:%d" % sink.port], capped_t, None)
    with Sandbox(c, setter, "rt3-setter"), Sandbox(c, plain, "rt3-mover") as sb:
        check(fb_kernel_flags(c, sb) & TENANT_NO_QUOTA,
              "a sandbox of a tenant without a quota does not skip the lookup")
        fb_check_free(c, sb, sink, "the sandbox before its tenant changes")
        sb.update(moved)
        check(not fb_kernel_flags(c, sb) & TENANT_NO_QUOTA,
              "updated into a capped tenant, the sandbox still skips the tenant quota")
        fb_check_bound(c, sb, sink, "the sandbox moved into a capped tenant")


@test
def redteam3_tenant_quota_dropped_then_back_by_update(c):
    """Hostile: the capped tenant's only quota-setting sandbox updates to a
    policy without the limit (the quota goes, the siblings are marked to
    skip it), then back; a sibling sends past the cap through a mark left
    from the gap. Twin: in the gap (no quota anywhere) the sibling sends
    freely."""
    sink = SinkServer()
    t = "rt3g-" + RAND
    plain = fb_policy(c, ["tcp/127.0.0.1:%d" % sink.port], t, None)
    capped = fb_policy(c, ["tcp/127.0.0.1:9"], t, CAP)
    nocap = fb_policy(c, ["tcp/127.0.0.1:9"], t, None)
    with Sandbox(c, capped, "rt3-gset") as setter, Sandbox(c, plain, "rt3-gsib") as sib:
        check(not fb_kernel_flags(c, sib) & TENANT_NO_QUOTA, "capped tenant: sibling marked")
        setter.update(nocap)
        fb_check_free(c, sib, sink, "the sibling while no policy names a quota")
        setter.update(capped)
        check(not fb_kernel_flags(c, sib) & TENANT_NO_QUOTA,
              "the quota is back and the sibling still skips it")
        fb_check_bound(c, sib, sink, "the sibling after the quota came back")


def rt3_remove_pin_dir(d):
    if os.path.isdir(d):
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))
        os.rmdir(d)


@test
def redteam3_pin_dir_renamed_to_a_free_id(c):
    """Hostile: uid 0 with no capability in sandbox A renames A's whole pin
    directory links/<idA> to links/<an id no sandbox has> (the guard's
    event filter ignores events of ids egressd holds no links for), then
    kills egressd: A's links would be held by nothing. The rename's
    IN_MOVED_FROM names A: the guard must pin A's links again under
    links/<idA>. Twin: a sandbox not touched keeps its pins, and A still
    enforces both ways."""
    a, b = c.tcp("rt3-pa"), c.tcp("rt3-pb")
    with c.sandbox(["127.0.0.1:%d" % a.port], name="rt3-pin") as sa, \
            c.sandbox(["127.0.0.1:%d" % a.port], name="rt3-pin2") as other:
        ida, ido = sandbox_id(c, sa), sandbox_id(c, other)
        pins, opins = hd_pins(c, ida), hd_pins(c, ido)
        check("egr_connect4" in pins, "pins: %r" % pins)
        free = max(ida, ido) + 100000
        dst = hd_links_dir(c, free)
        CLEANUP.push("rt3 renamed pins", rt3_remove_pin_dir, dst)
        r = hd_as_root_in(sa.cg, "setpriv", "--inh-caps=-all", "--bounding-set=-all", "--",
                          "mv", hd_links_dir(c, ida), dst)
        check(r.returncode == 0, "rename of the pin directory: %s" % r.stderr)
        check(wait_until(lambda: hd_pins(c, ida) == pins, 5),
              "the renamed pin directory was not pinned again: %r" % hd_pins(c, ida))
        check(hd_pins(c, ido) == opins, "the untouched sandbox's pins changed")
        sa.allowed("tcp", "127.0.0.1", a.port)
        sa.denied("tcp", "127.0.0.1", b.port)
        c.daemon.kill9()
        try:
            sa.denied("tcp", "127.0.0.1", b.port)
            sa.allowed("tcp", "127.0.0.1", a.port)
        finally:
            c.ensure_daemon()


@test
def redteam3_create_path_with_dotdot_or_symlink(c):
    """Hostile peer input to attach "create": a parent with `..` that climbs
    out of cgroup2, a symlink outside cgroup2 whose target is a cgroup,
    and one that points out of it. Out of cgroup2: refused, nothing made.
    Twin: `..` that stays inside, and the symlink to a cgroup, create the
    cgroup at the resolved place, which confines."""
    ok, bad = c.tcp("rt3-cok"), c.tcp("rt3-cbad")
    pol = c.policy(["127.0.0.1:%d" % ok.port])
    parent = c.mkcgroup("rt3-create")
    CLEANUP.push("parent", cgroup_remove_tree, parent)
    depth = parent.count("/")
    esc = parent + "/.." * depth + "/tmp/rt3-esc-" + RUN_ID
    rep = run2_request(c, run2_attach_req(esc, pol))
    check(rep.get("ok") is False and not os.path.exists("/tmp/rt3-esc-" + RUN_ID),
          "create with .. out of cgroup2: %r" % rep)
    link_out = "/tmp/rt3-lnk-out-" + RUN_ID
    os.symlink("/tmp", link_out)
    CLEANUP.push("symlink", os.unlink, link_out)
    rep = run2_request(c, run2_attach_req(link_out + "/rt3-x-" + RUN_ID, pol))
    check(rep.get("ok") is False and not os.path.exists("/tmp/rt3-x-" + RUN_ID),
          "create through a symlink out of cgroup2: %r" % rep)
    # Twins.
    inside = parent + "/sub/../s1"
    os.mkdir(os.path.join(parent, "sub"))
    rep = run2_request(c, run2_attach_req(inside, pol))
    check(rep.get("ok") is True, "create with .. inside cgroup2: %r" % rep)
    cg1 = os.path.join(parent, "s1")
    try:
        check(os.path.isdir(cg1) and c.find_sandbox(cg1) is not None,
              "the resolved cgroup %s is not attached" % cg1)
        c.denied(cg1, "tcp", "127.0.0.1", bad.port)
        c.allowed(cg1, "tcp", "127.0.0.1", ok.port)
    finally:
        c.ctl("detach", "--cgroup", cg1)
    link_in = "/tmp/rt3-lnk-in-" + RUN_ID
    os.symlink(parent, link_in)
    CLEANUP.push("symlink", os.unlink, link_in)
    rep = run2_request(c, run2_attach_req(link_in + "/s2", pol))
    check(rep.get("ok") is True, "create through a symlink to a cgroup: %r" % rep)
    cg2 = os.path.join(parent, "s2")
    try:
        check(c.find_sandbox(cg2) is not None, "%s is not attached" % cg2)
        c.denied(cg2, "tcp", "127.0.0.1", bad.port)
    finally:
        c.ctl("detach", "--cgroup", cg2)


@test
def redteam3_dns_socket_kept_across_restart_is_still_its_own(c):
    """A resolver socket that asked before an egressd restart (its kernel
    record and the sandbox are adopted) asks again after it: answered under
    its own policy, not dropped as a stranger and not taken for anyone
    else. Hostile twin: a neighbour that binds the same source after the
    restart (SO_REUSEPORT) makes it nobody's: neither is served as B."""
    need_dnsmasq(c)
    with Sandbox(c, dsc_policy(c, ["api.test"], "rt3-rb"), "rt3-rst-b") as b, \
            Sandbox(c, dsc_policy(c, ["other-%s.test" % RAND], "rt3-ra"), "rt3-rst-a") as a:
        sport = free_udp_tcp_port("127.0.0.1")
        hb = dsc_hold(b.cg, sport, "api.test", 6)
        CLEANUP.push("rt3 holder", lambda: hb.poll() is None and hb.kill())
        first = hb.stdout.readline().strip()
        check(first == "0", "B before the restart: %r" % first)
        restart_daemon(c, c.daemon.extra_args)
        check(c.find_sandbox(b.cg) is not None, "B was not adopted")
        out, err = hb.communicate(timeout=20)
        check(out.strip() == "0", "B's socket, asking again after the restart: %r %r" %
              (out, err[-200:]))
        b0 = dsc_proxy(c, b)
        hb2 = dsc_hold(b.cg, sport, "api.test", 3)
        CLEANUP.push("rt3 holder", lambda: hb2.poll() is None and hb2.kill())
        check(hb2.stdout.readline().strip() == "0", "B's fresh socket after the restart")
        ha = dsc_hold(a.cg, sport, "api.test", 0)
        CLEANUP.push("rt3 holder", lambda: ha.poll() is None and ha.kill())
        a_out, _ = ha.communicate(timeout=20)
        b_out, _ = hb2.communicate(timeout=20)
        b1 = dsc_proxy(c, b)
        check(a_out.split() == ["timeout", "timeout"], "A on B's source: %r" % a_out)
        check(b_out.strip() == "timeout", "the shared source was served: %r" % b_out)
        check(b1["allowed"] - b0["allowed"] == 1, "B served %d, only 1 was its own" %
              (b1["allowed"] - b0["allowed"]))


# As many TCP connections to the resolver as it can for `seconds` (each
# held open, never a full query; a length prefix promising 64 KiB and a
# trickle on the first 16), at most `cap` sockets, errors ignored (EPERM:
# past its kernel budget; EMFILE).
RT3_TCP_FLOOD = r"""
import os, socket, sys, time
seconds, cap = float(sys.argv[1]), int(sys.argv[2])
os.nice(10)
socks, opened, failed = [], 0, 0
end = time.monotonic() + seconds
while time.monotonic() < end:
    if len(socks) < cap:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(("127.0.0.2", 53))
        except BlockingIOError:
            pass
        except OSError:
            failed += 1
            s.close()
            time.sleep(0.001)
            continue
        socks.append(s)
        opened += 1
    else:
        time.sleep(0.01)
    for s in socks[:16]:
        try:
            s.send(b"\xff\xff\x00" if opened % 64 == 0 else b"\x00")
        except OSError:
            pass
print("opened", opened, "failed", failed, flush=True)
"""


@test
def redteam3_dns_tcp_flood_does_not_starve_neighbour(c):
    """Hostile: sandbox A opens TCP connections to the shared resolver as
    fast as it can (thousands, held open, slow partial 64 KiB queries on
    some), to fill the shared accept backlog and the proxy's connection
    table. Victim B's TCP lookups on the same listener all succeed while
    it lasts (A's SYNs take A's kernel tokens; the proxy keeps at most
    max_tcp_per_sb of A's). Twin: B's TCP lookups before the flood."""
    need_dnsmasq(c)
    with Sandbox(c, dsc_policy(c, ["api.test"], "rt3-fb"), "rt3-flood-b") as b, \
            Sandbox(c, dsc_policy(c, ["api.test"], "rt3-fa"), "rt3-flood-a") as a:
        for _ in range(3):
            dns_ok(c, b, "api.test", mode="tcp", want=DNS_ZONE["api.test"])
        fl = subprocess.Popen([sys.executable, "-c", RT3_TCP_FLOOD, "8", "3000"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              preexec_fn=join_cgroup_fn(a.cg))
        CLEANUP.push("rt3 flooder", lambda: fl.poll() is None and fl.kill())
        time.sleep(2)
        fails = 0
        t_end = time.monotonic() + 4
        n = 0
        while time.monotonic() < t_end and n < 40:
            n += 1
            try:
                dns_ok(c, b, "api.test", mode="tcp", want=DNS_ZONE["api.test"])
            except TestFailure as e:
                fails += 1
                log("victim lookup failed: %s" % e)
        check(fl.poll() is None, "the flooder ended before the victim's lookups did")
        st = dsc_proxy(c, a)  # while the flood lasts
        out, err = fl.communicate(timeout=30)
        log("flooder: %r %r; its proxy figures %r" % (out.strip(), err[-200:], st))
        check(out.startswith("opened"), "the flooder did not run: %r" % err[-300:])
        check(fails == 0, "%d of the victim's %d TCP lookups failed under the flood" %
              (fails, n))
        check(st["tcp_conns"] <= 16, "the proxy holds %d of the flooder's connections" %
              st["tcp_conns"])


@test
def redteam3_quota_carried_into_another_tenant_by_update(c):
    """Hostile: the sandbox that sets tenant T2's quota is updated into
    tenant T1, carrying its limit; T1's other sandbox W was attached while
    T1 had no quota (it skips the lookup) and sends past the cap through
    the skip. The update must take W's mark off. Twin: before the update W
    sends the same bytes freely."""
    sink = SinkServer()
    t1, t2 = "rt3k1-" + RAND, "rt3k2-" + RAND
    w_pol = fb_policy(c, ["tcp/127.0.0.1:%d" % sink.port], t1, None)
    setter = fb_policy(c, ["tcp/127.0.0.1:9"], t2, CAP)
    carried = fb_policy(c, ["tcp/127.0.0.1:9"], t1, CAP)
    with Sandbox(c, setter, "rt3-carrier") as s, Sandbox(c, w_pol, "rt3-w") as w:
        check(fb_kernel_flags(c, w) & TENANT_NO_QUOTA, "W of a free tenant is not marked")
        fb_check_free(c, w, sink, "W before its tenant has a quota")
        s.update(carried)
        check(not fb_kernel_flags(c, w) & TENANT_NO_QUOTA,
              "a quota carried into W's tenant by an update left W skipping it")
        fb_check_bound(c, w, sink, "W after the quota was carried into its tenant")


@test
def redteam3_pin_removed_right_after_a_detach(c):
    """Hostile: sandbox X is detached (egressd's own unpins, which the
    guard's filter skips, are still queued) and Y attached at once; uid 0
    in Y removes Y's connect4 pin before egressd reads the queue. The
    filter must take it for a live sandbox's pin: it comes back. (Ids are
    not given again: egressd counts on, across restarts too, and only a
    held sandbox attached again keeps its id, with its links; so X's
    queued unpins never name Y.) Twin: Y enforces both ways after it."""
    a, b = c.tcp("rt3-ra"), c.tcp("rt3-rb")
    for _ in range(3):
        x = c.sandbox(["127.0.0.1:%d" % a.port], name="rt3-x")
        y = c.sandbox(["127.0.0.1:%d" % a.port], name="rt3-y")
        try:
            x.attach()
            xid = sandbox_id(c, x)
            x.remove()
            y.attach()
            yid = sandbox_id(c, y)
            check(yid != xid, "sandbox id %d given again at once" % xid)
            pin = os.path.join(hd_links_dir(c, yid), "egr_connect4")
            r = hd_as_root_in(y.cg, "setpriv", "--inh-caps=-all", "--bounding-set=-all",
                              "--", "rm", "-f", pin)
            check(r.returncode == 0, "rm of the pin: %s" % r.stderr)
            check(wait_until(lambda: os.path.exists(pin), 5),
                  "Y's removed pin (id %d, X had %d) was not pinned again" % (yid, xid))
            y.allowed("tcp", "127.0.0.1", a.port)
            y.denied("tcp", "127.0.0.1", b.port)
        finally:
            x.remove()
            y.remove()


@test
def redteam3_create_under_writable_grandparent_walks(c):
    """Hostile setting for attach "create": the parent's cgroup.procs is
    root's alone, but an ancestor above it lets uid 65534 write (by owner,
    and on another run by group-write mode): that uid can clone3 into the
    new cgroup through the common ancestor before the links, so it is not
    fresh and the attach walks. Twin: the same tree with every
    cgroup.procs root's only is not walked."""
    ok, bad = c.tcp("rt3-gok"), c.tcp("rt3-gbad")
    pol = c.policy(["127.0.0.1:%d" % ok.port])
    for how in ("owner", "mode", None):
        top = c.mkcgroup("rt3-gp")
        CLEANUP.push("grandparent", cgroup_remove_tree, top)
        mid = os.path.join(top, "mid")
        os.mkdir(mid)
        procs = os.path.join(top, "cgroup.procs")
        if how == "owner":
            os.chown(procs, 65534, 65534)
        elif how == "mode":
            os.chmod(procs, 0o664)
        cg = os.path.join(mid, "s")
        walked0, fresh0 = run2_walks(c)
        rep = run2_request(c, run2_attach_req(cg, pol))
        check(rep.get("ok") is True, "%s: attach with create: %r" % (how, rep))
        try:
            walked1, fresh1 = run2_walks(c)
            want = (walked0, fresh0 + 1) if how is None else (walked0 + 1, fresh0)
            check((walked1, fresh1) == want, "%s: walks %d -> %d, fresh %d -> %d; wanted %r" %
                  (how, walked0, walked1, fresh0, fresh1, want))
            c.denied(cg, "tcp", "127.0.0.1", bad.port)
            c.allowed(cg, "tcp", "127.0.0.1", ok.port)
        finally:
            c.ctl("detach", "--cgroup", cg)


# Sandbox A's process makes a UDP socket and hands it over a unix socket
# (SCM_RIGHTS) to sandbox B's process, which asks through it.
RT3_FD_GIVER = r"""
import socket, sys
path = sys.argv[1]
u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
u.connect(path)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
socket.send_fds(u, [b"x"], [s.fileno()])
u.recv(1)
print("given")
"""

RT3_FD_TAKER = r"""
import socket, struct, sys
path, name = sys.argv[1], sys.argv[2]
l = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
l.bind(path)
l.listen(1)
print("ready", flush=True)
u, _ = l.accept()
_, fds, _, _ = socket.recv_fds(u, 16, 1)
res = []
for s in (socket.socket(fileno=fds[0]), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)):
    s.settimeout(2)
    q = struct.pack(">HHHHHH", 0x6600, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    s.sendto(q + b"\0" + struct.pack(">HH", 1, 1), ("127.0.0.2", 53))
    try:
        res.append(str(struct.unpack(">H", s.recv(4096)[2:4])[0] & 15))
    except socket.timeout:
        res.append("timeout")
u.send(b"x")
print(" ".join(res), flush=True)
"""


@test
def redteam3_dns_socket_passed_by_scm_rights_keeps_its_creator(c):
    """A UDP socket made in sandbox A (allows api.test) and passed by
    SCM_RIGHTS to sandbox B (refused api.test): B's query through it is
    judged, and counted, as A's (the socket's cgroup and its kernel record
    are A's; docs/security.md "a socket created outside and passed in"),
    never as a third party's, and B's own socket is still refused under
    B's policy. So B gets nothing A's own policy does not give A."""
    need_dnsmasq(c)
    with Sandbox(c, dsc_policy(c, ["api.test"], "rt3-pa"), "rt3-pass-a") as a, \
            Sandbox(c, dsc_policy(c, ["other-%s.test" % RAND], "rt3-pb"), "rt3-pass-b") as b:
        path = os.path.join(c.work, "rt3-fd-%s.sock" % RUN_ID)
        a0, b0 = dsc_proxy(c, a), dsc_proxy(c, b)
        tk = subprocess.Popen([sys.executable, "-c", RT3_FD_TAKER, path, "api.test"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, preexec_fn=join_cgroup_fn(b.cg))
        CLEANUP.push("rt3 taker", lambda: tk.poll() is None and tk.kill())
        check(tk.stdout.readline().strip() == "ready", "the taker did not start")
        g = in_sandbox(a.cg, RT3_FD_GIVER, path)
        out, err = tk.communicate(timeout=20)
        a1, b1 = dsc_proxy(c, a), dsc_proxy(c, b)
        log("giver %r; taker %r %r; A %r -> %r; B %r -> %r" % (g, out, err[-200:], a0, a1,
                                                             b0, b1))
        check(g == ["given"], "the giver did not pass its socket: %r" % g)
        check(out.split() == ["0", "3"], "through A's socket / B's own: %r (want NOERROR as "
              "A, NXDOMAIN (denied) as B)" % out)
        check(a1["allowed"] - a0["allowed"] == 1 and b1["refused"] - b0["refused"] == 1 and
              b1["allowed"] == b0["allowed"], "not counted as A, then B: A %r -> %r, B %r -> %r"
              % (a0, a1, b0, b1))



# Sandbox A, with "raw" in allow_sockets and CAP_NET_RAW (root in an
# attach-mode sandbox), writes UDP datagrams whose header names B's
# recorded source port, straight to the shared DNS listener, and reads
# every UDP datagram of the namespace on the same raw socket (a raw
# IPPROTO_UDP socket gets a copy of each): the proxy's answers to B's port.
RT3_RAW_FORGE = r"""
import socket, struct, sys, time
sport, lport, name, n = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
s.settimeout(0.3)
got, rcodes, refused = 0, {}, 0
for i in range(n):
    q = struct.pack(">HHHHHH", 0x5500 + i, 0x0100, 1, 0, 0, 0)
    for label in name.replace("{i}", str(i)).split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", 1, 1)
    udp = struct.pack(">HHHH", sport, lport, 8 + len(q), 0) + q
    try:
        s.sendto(udp, ("127.0.0.1", 0))
    except PermissionError:
        refused += 1  # dropped by the sandbox's egress program
        continue
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        try:
            m = s.recv(4096)
        except socket.timeout:
            break
        ihl = (m[0] & 15) * 4
        src, dst = struct.unpack(">HH", m[ihl:ihl + 4])
        if src == lport and dst == sport and len(m) >= ihl + 12:
            qid, fl = struct.unpack(">HH", m[ihl + 8:ihl + 12])
            if qid == 0x5500 + i:
                got += 1
                rcodes[fl & 15] = rcodes.get(fl & 15, 0) + 1
                break
print("sent", n, "refused", refused, "answered", got, "rcodes", rcodes, flush=True)
"""


def rt3_forge(c, a, sport, lport, name, n, timeout):
    r = subprocess.run([sys.executable, "-c", RT3_RAW_FORGE, str(sport), str(lport), name,
                        str(n)], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=timeout, preexec_fn=join_cgroup_fn(a.cg))
    log("raw forger: rc %d %r %r" % (r.returncode, r.stdout, r.stderr[-300:]))
    check(r.returncode == 0, "the raw socket could not be made: %r" % r.stderr[-300:])
    words = r.stdout.split()
    return int(words[3]), int(words[5])  # refused, answered


@test
def redteam3_raw_forged_source_is_not_the_neighbour(c):
    """Sandbox A may open raw sockets (allow_sockets ["raw"], root with
    CAP_NET_RAW) but may not resolve api.test; B may. A forges UDP queries
    from B's recorded source 127.0.0.1:P to the shared listener, hoping to
    be served under B's policy and read the answers on its raw socket.
    cgroup_skb/egress drops a packet to the proxy from a full socket that
    is not a UDP or TCP socket bound to that source (the sender gets
    EPERM), counts it as a backstop drop of A and reports it: B's count
    does not move, A reads nothing. Twin: B's own query from that socket
    is answered."""
    need_dnsmasq(c)
    pb = c.policy([], tenant="rt3h-b", extra_network=dict(DNS_REBIND_LO,
                                                         dns_allow=["api.test"]))
    pa = c.policy([], sockets=["raw"], tenant="rt3h-a",
                  extra_network=dict(DNS_REBIND_LO, dns_allow=["other-%s.test" % RAND]))
    with Sandbox(c, pb, "rt3h-b") as b, Sandbox(c, pa, "rt3h-a") as a:
        sport = free_udp_tcp_port("127.0.0.1")
        hb = dsc_hold(b.cg, sport, "api.test", 6)
        CLEANUP.push("rt3 holder", lambda: hb.poll() is None and hb.kill())
        first = hb.stdout.readline().strip()
        check(first == "0", "B's own query (twin) was not answered NOERROR: %r" % first)
        b0, d0 = dsc_proxy(c, b), sb_stats(c, a)["backstop_drops"]
        refused, answered = rt3_forge(c, a, sport, dsc_port4(c, b), "api.test", 5, 30)
        b1, d1 = dsc_proxy(c, b), sb_stats(c, a)["backstop_drops"]
        hb.kill()
        check(b1["allowed"] == b0["allowed"],
              "A's forged queries from B's source were served as B: allowed %d -> %d" %
              (b0["allowed"], b1["allowed"]))
        check(answered == 0, "A read %d answers served under B's policy" % answered)
        check(refused == 5 and d1 - d0 >= 5,
              "forged datagrams: %d of 5 refused, A's backstop drops +%d" % (refused, d1 - d0))


@test
def redteam3_raw_forged_nxdomains_do_not_silence_the_neighbour(c):
    """The same forgery against B's availability: 40 queries for names
    under B's allowed *.nx.test that do not exist (an upstream answering
    NXDOMAIN below nx.test), from B's recorded source; were they served as
    B, each NXDOMAIN would count against B's exfiltration limit (30 a
    minute) and B's own lookups would then be REFUSED. B's own lookup of
    api.test after them is answered. Twin: it is answered before them."""
    need_dnsmasq(c)
    up = TnBlackholeUpstream(c)
    CLEANUP.push("nx dnsmasq", up.stop)

    def body():
        pb = c.policy([], tenant="rt3n-b", extra_network=dict(
            DNS_REBIND_LO, dns_allow=["api.test", "*.nx.test"]))
        pa = c.policy([], sockets=["raw"], tenant="rt3n-a",
                      extra_network=dict(DNS_REBIND_LO, dns_allow=["other-%s.test" % RAND]))
        with Sandbox(c, pb, "rt3n-b") as b, Sandbox(c, pa, "rt3n-a") as a:
            dns_ok(c, b, "api.test", want=DNS_ZONE["api.test"])
            sport = free_udp_tcp_port("127.0.0.1")
            hb = dsc_hold(b.cg, sport, "api.test", 15)
            CLEANUP.push("rt3 holder", lambda: hb.poll() is None and hb.kill())
            check(hb.stdout.readline().strip() == "0", "B's own query (twin) not answered")
            refused, answered = rt3_forge(c, a, sport, dsc_port4(c, b),
                                          "x{i}-%s.nx.test" % RAND, 40, 60)
            hb.kill()
            check(refused == 40 and answered == 0,
                  "forged NXDOMAIN queries: %d of 40 refused, %d answered" % (refused, answered))
            dns_ok(c, b, "api.test", want=DNS_ZONE["api.test"])

    tn_with_upstream(c, up.port, [], body)
