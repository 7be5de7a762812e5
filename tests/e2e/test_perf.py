# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# e2e tests of the fast-path changes (issue 10): the lookups the BPF
# programs skip must never be ones a verdict depends on. Run by run.py
# (harness.runner); it uses the metering helpers (SinkServer, SENDER,
# in_sandbox, sb_stats, ...).

import errno as errno_mod
import json
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


def perf_quota_policy(c, allow, tenant, limits):
    pol = c.policy(allow, tenant=tenant)
    with open(pol) as f:
        doc = json.load(f)
    if limits:
        doc["limits"] = limits
    with open(pol, "w") as f:
        json.dump(doc, f)
    return pol


@test
def perf_tenant_quota_binds_a_sandbox_without_its_own(c):
    """skb_egress skips the sandbox-quota lookup when the sandbox has no
    limit of its own; a tenant limit set by another sandbox of the tenant
    must still stop it (the attack: a tool in a quota-less sandbox of a
    capped tenant sends past the tenant's cap). Sanity twin: a sandbox of
    another tenant, also without a quota, sends the same bytes freely."""
    sink = SinkServer()
    capped = "perfq-" + RAND
    setter = perf_quota_policy(c, ["tcp/127.0.0.1:9"], capped,
                               {"tenant_egress_bytes": 200000, "window_seconds": 3600})
    plain = perf_quota_policy(c, ["tcp/127.0.0.1:%d" % sink.port], capped, None)
    other = perf_quota_policy(c, ["tcp/127.0.0.1:%d" % sink.port], "perfo-" + RAND, None)
    with Sandbox(c, setter, "perf-qset"), Sandbox(c, plain, "perf-qplain") as sb, \
            Sandbox(c, other, "perf-qother") as twin:
        # Twin first: the same send, no limit anywhere in its tenant.
        out = in_sandbox(twin.cg, SENDER, "tcp", "127.0.0.1", sink.port, 1 << 20, 5)
        check(out and out[0] == "ok", "1 MiB from a sandbox of an uncapped tenant: %r" % out)
        got = sink.received
        check(got >= 1 << 20, "the sink got %d bytes of the twin's 1 MiB" % got)
        out = in_sandbox(sb.cg, SENDER, "tcp", "127.0.0.1", sink.port, 1 << 20, 3)
        check(out and out[0] == "stalled",
              "1 MiB from a quota-less sandbox of a tenant capped at 200 kB: %r" % out)
        time.sleep(0.5)
        check(sink.received - got < 200000, "%d bytes got past the tenant's 200000-byte cap" %
              (sink.received - got))
        row = sb_stats(c, sb)
        check(row["quota_drops"] > 0, "quota_drops of the capped sandbox: %r" %
              row["quota_drops"])
        check(sb_stats(c, twin)["quota_drops"] == 0, "the twin had quota drops")


@test
def perf_setsockopt_refusal_still_names_the_sandbox(c):
    """egr_setsockopt looks the sandbox up only to report a refusal: the
    refusal (IP_OPTIONS source routing, as a hostile tool would set it) must
    still fail with EPERM and be reported with the sandbox's id; the sanity
    twin sets an ordinary option (SO_KEEPALIVE) the same way."""
    script = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
print("keepalive-ok", flush=True)
try:
    # IPOPT_LSRR to 127.0.0.1: a first hop connect() never judged.
    s.setsockopt(socket.IPPROTO_IP, socket.IP_OPTIONS, bytes([131, 7, 4, 127, 0, 0, 1, 0]))
    print("options-set", flush=True)
except OSError as e:
    print("options-errno", e.errno, flush=True)
"""
    pol = c.policy(["tcp/127.0.0.1:9"])
    with Sandbox(c, pol, "perf-sso") as sb:
        sid = c.find_sandbox(sb.cg)["id"]
        out = in_sandbox(sb.cg, script)
        check(out[:1] == ["keepalive-ok"], "SO_KEEPALIVE in the sandbox: %r" % out)
        check(out[1:3] == ["options-errno", str(errno_mod.EPERM)],
              "IP_OPTIONS source route in the sandbox: %r" % out)

        def refusals():
            r = c.ctl("events", "--json", "--sandbox", str(sid))
            if r.returncode != 0:
                return []
            text = r.stdout.strip()
            evs = json.loads(text) if text.startswith("[") else \
                [json.loads(l) for l in text.splitlines() if l.strip().startswith("{")]
            return [e for e in evs if e.get("type") == "setsockopt"]
        wait_until(lambda: refusals(), 3)
        evs = refusals()
        check(len(evs) == 1, "setsockopt refusal events for sandbox %d: %r" % (sid, evs))
        check(evs[0].get("sandbox_id", evs[0].get("sandbox")) in (sid, str(sid)),
              "the refusal event names sandbox %r, expected %d" % (evs[0], sid))
