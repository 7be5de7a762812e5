# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Issue 30: ask before a new destination (docs/dns.md "Approvals"). A
# sandbox whose policy says "unknown_names": "ask" asks for a name its
# policy does not allow: the query is held until someone outside every
# sandbox approves or denies it, or ask_timeout_s passes. The tool is root
# inside its sandbox; its names are served by the harness's dnsmasq (the
# test zone is loopback, hence dns_rebind_allow 127.0.0.0/8). Run by run.py
# (harness.runner).

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


def ap_names(c, *keys):
    z = need_dnsmasq(c)
    names = {}
    for k in keys:
        names[k] = "ap-%s-%s.test" % (k, RAND)
        z.add_host(names[k], "127.0.0.1")
    return names


def ap_net(port, **more):
    net = {"unknown_names": "ask", "ask_timeout_s": 20, "ask_ports": ["tcp/%d" % port],
           "dns_rebind_allow": ["127.0.0.0/8"]}
    net.update(more)
    return net


class Lookup:
    """dns_query of name from inside sb, in a thread: (rcode, addresses, seconds)."""

    def __init__(self, sb, name, timeout=25.0):
        self.result = None
        self.t0 = time.monotonic()

        def go():
            rc, addrs, _, _ = dns_query("udp", "127.0.0.2", 53, name, "A", cg=sb.cg,
                                        timeout=timeout)
            self.result = (rc, addrs, time.monotonic() - self.t0)
        self.th = threading.Thread(target=go, daemon=True)
        self.th.start()

    def wait(self, s=30):
        self.th.join(s)
        check(self.result is not None, "the lookup never returned")
        return self.result


def ap_list(c):
    r = c.ctl("approvals", "--json")
    check(r.returncode == 0, "approvals --json: %d %s" % (r.returncode, r.stderr))
    return json.loads(r.stdout)


def ap_pending(c, name, timeout=5):
    found = []

    def seen():
        found[:] = [p for p in ap_list(c)["pending"] if p["name"] == name]
        return bool(found)
    check(wait_until(seen, timeout, 0.1), "%s is not pending: %r" % (name, ap_list(c)))
    return found[0]


def ap_audit(c, name):
    return [r for r in obs_audit(c) if r.get("type") == "policy_change" and
            r.get("change") == "approval" and r.get("name") == name]


@test
def approvals_held_until_approved_outside_the_sandbox(c):
    lo = c.tcp("ap-lo", "127.0.0.1")
    n = ap_names(c, "new", "other")
    with c.sandbox([], name="ap-a", extra_network=ap_net(lo.port)) as sb, \
            c.sandbox([], name="ap-b", extra_network=ap_net(lo.port)) as sb2:
        sid = sandbox_id(c, sb)
        sb.denied("tcp", "127.0.0.1", lo.port)  # nothing learned yet
        look = Lookup(sb, n["new"])
        p = ap_pending(c, n["new"])
        check(p["sandbox"] == sid and p["tenant"] == "e2e" and p["qtype"] == 1 and
              p["ports"] == "tcp/%d" % lo.port and p.get("execution_id"),
              "the pending request: %r" % p)
        time.sleep(1)
        check(look.result is None, "the held lookup returned before any decision: %r" %
              (look.result,))
        sb.denied("tcp", "127.0.0.1", lo.port)  # still nothing while held
        # A process inside the sandbox cannot decide, however it asks.
        r = subprocess.run([c.egressctl, "--socket", c.sock, "approve", str(p["id"])],
                           preexec_fn=join_cgroup_fn(sb.cg), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=20)
        check(r.returncode != 0, "a sandboxed egressctl approve was accepted: %r" % r.stdout)
        check(look.result is None and ap_pending(c, n["new"]),
              "the sandboxed approve released the query")
        # Approved from outside: the lookup returns, the connect works.
        r = c.ctl("approve", str(p["id"]), "--reason", "e2e needs it")
        check(r.returncode == 0, "approve: %d %s" % (r.returncode, r.stderr))
        rc, addrs, secs = look.wait()
        check(rc == "NOERROR" and addrs == ["127.0.0.1"], "approved lookup: %s %r" % (rc, addrs))
        before = lo.accepted
        sb.allowed("tcp", "127.0.0.1", lo.port)
        check(lo.accepted > before, "the approved destination was not reached")
        # Scope sandbox: the other sandbox of the tenant still asks; deny it.
        look2 = Lookup(sb2, n["new"])
        p2 = ap_pending(c, n["new"])
        check(p2["sandbox"] == sandbox_id(c, sb2), "the second sandbox's request: %r" % p2)
        r = c.ctl("deny", str(p2["id"]), "--reason", "not for you")
        check(r.returncode == 0, "deny: %d %s" % (r.returncode, r.stderr))
        rc, addrs, secs = look2.wait()
        check(rc == "NXDOMAIN" and not addrs, "a denied lookup: %s %r" % (rc, addrs))
        sb2.denied("tcp", "127.0.0.1", lo.port)
        # Scope tenant: one approval answers both sandboxes.
        look = Lookup(sb, n["other"])
        p = ap_pending(c, n["other"])
        check(c.ctl("approve", str(p["id"]), "--scope", "tenant", "--ttl", "60").returncode == 0,
              "approve --scope tenant")
        check(look.wait()[0] == "NOERROR", "the tenant-scope approval's own lookup")
        rc, addrs, _, _ = dns_query("udp", "127.0.0.2", 53, n["other"], "A", cg=sb2.cg)
        check(rc == "NOERROR" and addrs == ["127.0.0.1"],
              "scope tenant: the tenant's other sandbox did not get it: %s %r" % (rc, addrs))
        grants = ap_list(c)["grants"]
        check(any(g["name"] == n["other"] and g["scope"] == "tenant" and
                  0 < (g["expires_in_s"] or 0) <= 60 for g in grants), "grants: %r" % grants)
        # The decisions are in the audit chain, with the approver.
        check(wait_until(lambda: len(ap_audit(c, n["new"])) == 2, 5),
              "audit records of %s: %r" % (n["new"], ap_audit(c, n["new"])))
        a = [x for x in ap_audit(c, n["new"]) if x["decision"] == "approved"][0]
        check(a["approver"]["uid"] == 0 and a["scope"] == "sandbox" and
              a["reason"] == "e2e needs it" and a["ports"] == "tcp/%d" % lo.port,
              "the approval's audit record: %r" % a)
        evs = [e for e in obs_events(c, "--sandbox", str(sid)) if e.get("type") == "approval"]
        check({"pending", "approved"} <= {e.get("state") for e in evs},
              "approval events: %r" % evs)
        exec_id = json.load(open(sb.policy)).get("execution_id")
        sb.detach()
    rec = [r for r in obs_audit(c) if r.get("type") == "execution" and
           r.get("execution_id") == exec_id]
    check(rec and [x["name"] for x in rec[-1]["observed"].get("approved", [])] ==
          [n["new"], n["other"]], "the execution record's approved names: %r" %
          (rec[-1]["observed"] if rec else None))
    verify = audit_verify(c, os.path.join(c.state, "audit.log"))
    check(verify.returncode == 0 and verify.stdout.startswith("ok:"),
          "audit verify: %s %s" % (verify.stdout, verify.stderr))


@test
def approvals_timeout_and_bound_refuse_fast(c):
    lo = c.tcp("ap-lo", "127.0.0.1")
    n = ap_names(c, "slow")
    with c.sandbox([], name="ap-t", extra_network=ap_net(lo.port, ask_timeout_s=1)) as sb:
        look = Lookup(sb, n["slow"])
        ap_pending(c, n["slow"])
        rc, addrs, secs = look.wait()
        check(rc == "NXDOMAIN" and not addrs and 0.8 < secs < 6,
              "the timed-out lookup: %s %r after %.1f s" % (rc, addrs, secs))
        sb.denied("tcp", "127.0.0.1", lo.port)
    with c.sandbox([], name="ap-q", extra_network=ap_net(lo.port)) as sb:
        # 16 distinct names held, the 17th refused at once.
        script = (
            "import socket, struct, sys, time\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "def q(i, name):\n"
            "    h = struct.pack('>HHHHHH', i, 0x0100, 1, 0, 0, 0)\n"
            "    b = b''.join(bytes([len(l)]) + l.encode() for l in name.split('.')) + b'\\0'\n"
            "    return h + b + struct.pack('>HH', 1, 1)\n"
            "for i in range(17):\n"
            "    s.sendto(q(i + 1, 'ap-b%d-" + RAND + ".test' % i), ('127.0.0.2', 53))\n"
            "    time.sleep(0.02)\n"
            "s.settimeout(0.8)\n"
            "got = []\n"
            "try:\n"
            "    while True:\n"
            "        m = s.recv(512)\n"
            "        got.append((struct.unpack('>H', m[:2])[0], m[3] & 15))\n"
            "except socket.timeout:\n"
            "    pass\n"
            "print(sorted(got))\n")
        out = run_in_sandbox(sb.cg, [sys.executable, "-c", script], timeout=15)
        check(out == "[(17, 3)]", "of 17 distinct unknown names, what was answered at once "
              "(id, rcode): %s (want only the 17th, NXDOMAIN)" % out)
        pend = [p for p in ap_list(c)["pending"] if p["sandbox"] == sandbox_id(c, sb)]
        check(len(pend) == 16, "%d pending, want 16" % len(pend))
        check(wait_until(lambda: any(e.get("state") == "refused" for e in obs_events(c)
                                     if e.get("type") == "approval"), 3),
              "no `refused` approval event for the 17th")
        sb.denied("tcp", "127.0.0.1", lo.port)
    # Twin: a policy without "ask" refuses an unknown name at once, as ever.
    with c.sandbox([], name="ap-d", extra_network={"dns_rebind_allow": ["127.0.0.0/8"]}) as sb:
        t0 = time.monotonic()
        rc, addrs, _, _ = dns_query("udp", "127.0.0.2", 53, n["slow"], "A", cg=sb.cg)
        check(rc == "NXDOMAIN" and time.monotonic() - t0 < 2, "deny mode: %s" % rc)
        check(not [p for p in ap_list(c)["pending"] if p["sandbox"] == sandbox_id(c, sb)],
              "a deny-mode sandbox's query was held")


@test
def approvals_none_survive_a_crash_unasked(c):
    lo = c.tcp("ap-lo", "127.0.0.1")
    n = ap_names(c, "crash")
    with c.sandbox([], name="ap-k", extra_network=ap_net(lo.port)) as sb:
        look = Lookup(sb, n["crash"], timeout=4)
        ap_pending(c, n["crash"])
        c.daemon.kill9()
        c.daemon.start()
        rc, addrs, _ = look.wait()
        check(not addrs, "a query held by the killed egressd got addresses: %s %r" % (rc, addrs))
        sb.denied("tcp", "127.0.0.1", lo.port)
        # The successor asks again; nothing is allowed without its decision.
        look = Lookup(sb, n["crash"])
        p = ap_pending(c, n["crash"], timeout=10)
        sb.denied("tcp", "127.0.0.1", lo.port)
        check(c.ctl("approve", str(p["id"])).returncode == 0, "approve on the successor")
        rc, addrs, _ = look.wait()
        check(rc == "NOERROR" and addrs == ["127.0.0.1"], "after approval: %s %r" % (rc, addrs))
        sb.allowed("tcp", "127.0.0.1", lo.port)


@test
def approvals_survive_a_policy_update(c):
    lo, other = c.tcp("ap-lo", "127.0.0.1"), c.tcp("ap-other", "127.0.0.1")
    n = ap_names(c, "upd")
    with c.sandbox([], name="ap-u", extra_network=ap_net(lo.port)) as sb:
        look = Lookup(sb, n["upd"])
        check(c.ctl("approve", str(ap_pending(c, n["upd"])["id"])).returncode == 0, "approve")
        check(look.wait()[0] == "NOERROR", "the approved lookup")
        sb.allowed("tcp", "127.0.0.1", lo.port)
        # An update that adds a destination keeps what the approval opened.
        sb.update(c.policy(["tcp/127.0.0.1:%d" % other.port], extra_network=ap_net(lo.port)))
        sb.allowed("tcp", "127.0.0.1", other.port)
        sb.allowed("tcp", "127.0.0.1", lo.port)
    check(not [g for g in ap_list(c)["grants"] if g["name"] == n["upd"]],
          "the grant outlived its sandbox: %r" % ap_list(c)["grants"])
