# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# e2e tests of the BPF fast path (issue 10, docs/benchmarks.md "BPF cost per
# connection"): every lookup cgroup_skb/egress skips must be one no verdict
# depends on. Each test attacks the skip as a hostile tool would and has a
# sanity twin that does the allowed thing the same way. Run by run.py.

import json
import os
import struct
import subprocess
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)
from test_hostile_daemon import hd_map_pin

TENANT_NO_QUOTA = 0x1000  # EGR_SB_TENANT_NO_QUOTA, include/egressd.h
FLAGS_OFFSET = 32         # struct egr_sandbox: families, quota_bytes, quota_window_ns,
                          # policy_id, tenant_id, then flags
CAP = 200000              # the tenants' cap, bytes (no window: it never resets)
MIB = 1 << 20


def fb_kernel_flags(c, sb):
    """The flags of sb's egr_sandboxes entry as the programs read them."""
    sid = sandbox_id(c, sb)
    key = ["0x%02x" % b for b in struct.pack("<I", sid)]
    r = subprocess.run(["bpftool", "-j", "map", "lookup", "pinned",
                        hd_map_pin(c, "egr_sandboxes"), "key"] + key,
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, "bpftool lookup of sandbox %d: %s" % (sid, r.stderr.strip()))
    raw = bytes(int(x, 16) for x in json.loads(r.stdout)["value"])
    return struct.unpack_from("<I", raw, FLAGS_OFFSET)[0]


def fb_policy(c, allow, tenant, tenant_cap):
    pol = c.policy(allow, tenant=tenant)
    if tenant_cap:
        with open(pol) as f:
            doc = json.load(f)
        doc["limits"] = {"tenant_egress_bytes": tenant_cap}
        with open(pol, "w") as f:
            json.dump(doc, f)
    return pol


def fb_send(sb, sink, n, seconds):
    """Send n bytes over TCP from sb to sink; ("ok" | "stalled", bytes sent)."""
    got = sink.received
    out = in_sandbox(sb.cg, SENDER, "tcp", "127.0.0.1", sink.port, n, seconds)
    time.sleep(0.5)
    return (out[0] if out else "?"), sink.received - got


def fb_check_bound(c, sb, sink, what):
    # "stalled" mid-send, or (the cap already spent) no handshake at all.
    res, sent = fb_send(sb, sink, MIB, 3)
    check(res != "ok", "1 MiB from %s (tenant capped at %d bytes): %s" % (what, CAP, res))
    check(sent < CAP, "%d bytes of %s got past its tenant's %d-byte cap" % (sent, what, CAP))
    check(sb_stats(c, sb)["quota_drops"] > 0, "%s: no quota drops counted" % what)


def fb_check_free(c, sb, sink, what):
    res, sent = fb_send(sb, sink, MIB, 10)
    check(res == "ok" and sent >= MIB, "1 MiB from %s (no cap anywhere): %s, %d bytes"
          % (what, res, sent))
    check(sb_stats(c, sb)["quota_drops"] == 0, "%s had quota drops" % what)


@test
def fastbpf_tenant_quota_set_after_attach_binds_the_skipping_sibling(c):
    """A sandbox attached while its tenant had no quota skips the tenant
    quota lookup (EGR_SB_TENANT_NO_QUOTA). The attack: a sibling of the same
    tenant then attaches with limits.tenant_egress_bytes, and the first tool
    sends past the cap through the skip. egressd must take the mark off
    every entry of the tenant before the quota is in force. Twin: a sandbox
    of another tenant, marked too, sends the same bytes freely."""
    sink = SinkServer()
    tenant, other = "fbq-" + RAND, "fbo-" + RAND
    early = fb_policy(c, ["tcp/127.0.0.1:%d" % sink.port], tenant, None)
    setter = fb_policy(c, ["tcp/127.0.0.1:9"], tenant, CAP)
    free = fb_policy(c, ["tcp/127.0.0.1:%d" % sink.port], other, None)
    with Sandbox(c, early, "fb-early") as sb, Sandbox(c, free, "fb-free") as twin:
        # The skip is live before the quota exists: the test attacks it.
        check(fb_kernel_flags(c, sb) & TENANT_NO_QUOTA,
              "a sandbox of a tenant without a quota does not skip the lookup")
        with Sandbox(c, setter, "fb-setter"):
            check(not fb_kernel_flags(c, sb) & TENANT_NO_QUOTA,
                  "the tenant got a quota and its earlier sandbox still skips it")
            fb_check_bound(c, sb, sink, "the earlier sandbox")
            check(fb_kernel_flags(c, twin) & TENANT_NO_QUOTA,
                  "another tenant's quota took the twin's mark off")
            fb_check_free(c, twin, sink, "another tenant's sandbox")


@test
def fastbpf_tenant_quota_by_policy_update_binds_every_sibling(c):
    """The tenant quota arrives by a policy update of a running sibling (not
    an attach), after the tenant's quota had come and gone (a detach deletes
    it, later attaches skip again): both earlier sandboxes are bound. Twin:
    before the update the same send of the same sandbox goes through."""
    sink = SinkServer()
    tenant = "fbu-" + RAND
    plain = fb_policy(c, ["tcp/127.0.0.1:%d" % sink.port], tenant, None)
    capped = fb_policy(c, ["tcp/127.0.0.1:9"], tenant, CAP)
    with Sandbox(c, capped, "fb-gone"):
        pass  # the tenant's quota existed and was deleted at its detach
    with Sandbox(c, plain, "fb-a") as a, Sandbox(c, plain, "fb-b") as b, \
            Sandbox(c, plain, "fb-upd") as upd:
        check(fb_kernel_flags(c, a) & TENANT_NO_QUOTA and fb_kernel_flags(c, b) &
              TENANT_NO_QUOTA, "the tenant's quota is gone, yet its sandboxes look it up")
        fb_check_free(c, a, sink, "a sandbox before the tenant has a quota")
        upd.update(capped)
        for s, what in ((a, "sandbox a"), (b, "sandbox b")):
            check(not fb_kernel_flags(c, s) & TENANT_NO_QUOTA,
                  "%s still skips the tenant quota an update set" % what)
        fb_check_bound(c, b, sink, "sandbox b")
        # a sent 1 MiB before the cap existed: the quota counts from its
        # start, so a's next bytes are bound too.
        fb_check_bound(c, a, sink, "sandbox a")


@test
def fastbpf_marked_entries_adopted_and_bound_after_restart(c):
    """A restarted egressd reads its entries back with the mark (which is not
    policy: adoption must not take it for a disagreement and hold the
    sandbox under deny-all), and a tenant quota set after the restart still
    binds the adopted sandbox. Twin: the adopted sandbox's allowed connect
    works after the restart."""
    sink = SinkServer()
    tenant = "fbr-" + RAND
    plain = fb_policy(c, ["tcp/127.0.0.1:%d" % sink.port], tenant, None)
    capped = fb_policy(c, ["tcp/127.0.0.1:9"], tenant, CAP)
    with Sandbox(c, plain, "fb-adopt") as sb:
        check(fb_kernel_flags(c, sb) & TENANT_NO_QUOTA, "no mark before the restart")
        restart_daemon(c, c.daemon.extra_args)
        check(c.find_sandbox(sb.cg) is not None, "the marked sandbox was not adopted")
        # Held under deny-all (a disagreement with the kernel) would deny it.
        sb.allowed("tcp", "127.0.0.1", sink.port)
        with Sandbox(c, capped, "fb-after"):
            check(not fb_kernel_flags(c, sb) & TENANT_NO_QUOTA,
                  "the adopted sandbox still skips the tenant's new quota")
            fb_check_bound(c, sb, sink, "the adopted sandbox")
