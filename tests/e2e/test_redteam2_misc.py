# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Red team 2 findings 5, 6, 7 (copied from branch red2, tests/e2e/area_redteam2.py):
# DNS-listener blame, inspect starvation, breaker blind to inspect refusals.
# Each test asserts the SECURE behaviour: it fails while the finding is open.
# It imports test_inspect.py's ins_* helpers.

import json
import re
import subprocess
import sys
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)
from test_inspect import (CURL, INS_ADDR, ins_events, ins_get_servers, ins_policy, ins_resolve,
                          ins_run, ins_tools)


@test
def redteam2_breaker_blame_via_dns_listener(c):
    """Anyone who can send to 127.0.0.1 on the host (an unsandboxed
    neighbour of any uid, or another sandbox whose policy allows loopback)
    sends refused queries straight to sandbox S1's own DNS listener (its
    port is in `ss -uln`): the proxy takes the listener as the asker's
    identity without checking who sent it, counts the refusals against S1
    and the breaker quarantines S1, which did nothing. Secure: queries the
    kernel did not redirect for S1 are not S1's (not answered, not counted)."""
    brk = {"breaker": {"max_denies": 5, "window_s": 30}}
    t = c.tcp("rt2-brk")
    with c.sandbox(["tcp/127.0.0.1:%d" % t.port], name="rt2-victim", extra_network=brk) as s1, \
            c.sandbox(["udp/127.0.0.1:*"], name="rt2-blamer") as s2:
        s = c.find_sandbox(s1.cg)
        port = int((s.get("dns") or {}).get("port4") or 0)
        check(port > 0, "no DNS listener port for S1: %r" % s)
        s1.allowed("tcp", "127.0.0.1", t.port)
        # From sandbox S2 (its policy allows UDP to loopback): 20 refused names.
        for i in range(20):
            dns_query("udp", "127.0.0.1", port, "rt2-%d.not-allowed.invalid" % i, "A",
                      timeout=0.5, cg=s2.cg)
        time.sleep(1)
        s = c.find_sandbox(s1.cg)
        check(not (s and s.get("quarantined")),
              "sandbox S1 was quarantined for queries another sandbox sent to its DNS listener")
        s1.allowed("tcp", "127.0.0.1", t.port)


@test
def redteam2_breaker_blind_to_inspect_refusals(c):
    """A sandbox under network.inspect and a breaker (max_denies 5) sends 30
    fronting attempts (Host: evil.test to the address learned for
    api.test): each is refused by the inspecting proxy (name_not_allowed),
    but the breaker counts only the kernel's connect/datagram/socket/backstop
    denies and DNS refusals, so a tool probes the proxy without end.
    Secure: the proxy's refusals count; the sandbox is quarantined."""
    need_dnsmasq(c)
    ins_tools()
    _, web = ins_get_servers(c)
    brk = {"breaker": {"max_denies": 5, "window_s": 30}}
    with Sandbox(c, ins_policy(c, [web.port], extra=brk)) as sb:
        sid = sandbox_id(c, sb)
        ins_resolve(c, sb)
        # The breaker may trip before the 30th attempt (its tick runs while
        # the client loops): from then on socket() is refused (EPERM), which
        # is the quarantine this test wants, not a client failure.
        code = ("import socket\n"
                "for i in range(30):\n"
                "    try:\n"
                "        s = socket.create_connection(('%s', %d), timeout=3)\n"
                "    except PermissionError:\n"
                "        print('refused after', i)\n"
                "        break\n"
                "    s.sendall(b'GET / HTTP/1.1\\r\\nHost: evil%%d.test\\r\\n\\r\\n' %% i)\n"
                "    try: s.recv(100)\n"
                "    except OSError: pass\n"
                "    s.close()\n"
                "print('sent')\n" % (INS_ADDR, web.port))
        rc, out = ins_run(sb, [sys.executable, "-c", code], timeout=60)
        check(rc == 0 and "sent" in out, "the sandboxed client failed: %d %r" % (rc, out))
        m = re.search(r"refused after (\d+)", out)
        check(not m or int(m.group(1)) >= 5,
              "socket() refused after %s attempts, before the breaker's 5" % (m and m.group(1)))
        ins_events(c, sid, {"verdict": "deny", "reason": "name_not_allowed", "proto": "http"})
        check(wait_until(lambda: bool((c.find_sandbox(sb.cg) or {}).get("quarantined")), 3),
              "30 refused fronting attempts against max_denies 5 did not quarantine the sandbox")


@test
def redteam2_inspect_four_sandboxes_starve_the_rest(c):
    """Four sandboxes (one tenant's, or colluding tenants'), each within its
    own bound of 256 inspected connections, open 256 idle connections each
    (slowloris: no hello, re-opened within hello_timeout): the proxy's
    whole-host bound of 1024 is used up and every other sandbox's inspected
    TCP is reset (conn_limit). Secure: a sandbox within its own bound is
    never refused because of other sandboxes."""
    need_dnsmasq(c)
    ins_tools()
    # A proxy of its own: earlier tests' inspected sandboxes may still hold
    # reserves while their connections drain, and the pool must be full to
    # exercise the eviction.
    restart_daemon(c, c.daemon.extra_args)
    _, web = ins_get_servers(c)
    hogs = []
    code = ("import socket, sys, time\n"
            "ss = []\n"
            "for i in range(256):\n"
            "    for t in range(3):  # a loaded machine can drop a SYN\n"
            "        try:\n"
            "            ss.append(socket.create_connection(('%s', %d), timeout=3))\n"
            "            break\n"
            "        except OSError: time.sleep(0.05)\n"
            "print('held', len(ss), flush=True)\n"
            "time.sleep(4)\n" % (INS_ADDR, web.port))
    boxes = [Sandbox(c, ins_policy(c, [web.port]), "rt2-hog%d" % i) for i in range(4)]
    victim = Sandbox(c, ins_policy(c, [web.port]), "rt2-victim")
    try:
        for b in boxes + [victim]:
            b.__enter__()
            ins_resolve(c, b)
        # Sanity twin: the victim is served before the hogs start.
        rc, out = ins_run(victim, [CURL, "-sS", "--max-time", "8", "--resolve",
                                   "api.test:%d:%s" % (web.port, INS_ADDR),
                                   "http://api.test:%d/x" % web.port])
        check(rc == 0 and "inspected-ok" in out, "victim before the hogs: %d %r" % (rc, out))
        for b in boxes:
            p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                 preexec_fn=join_cgroup_fn(b.cg))
            CLEANUP.push("rt2 hog", lambda p=p: p.poll() is None and p.kill())
            hogs.append(p)
        for p in hogs:
            log("hog: %s" % p.stdout.readline().strip())
        rc, out = ins_run(victim, [CURL, "-sS", "--max-time", "8", "--resolve",
                                   "api.test:%d:%s" % (web.port, INS_ADDR),
                                   "http://api.test:%d/x" % web.port])
        check(rc == 0 and "inspected-ok" in out,
              "a sandbox with no connection of its own was refused while four others held "
              "their 256 each: %d %r" % (rc, out))
    finally:
        for p in hogs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for b in [victim] + boxes:
            try:
                b.__exit__(None, None, None)
            except Exception as e:
                log("cleanup %s: %s" % (b.cg, e))




@test
def inspect_newcomer_evicts_idle_hello_of_largest_holder(c):
    """The eviction half of the fair share (docs/inspect.md): four sandboxes
    fill the whole-host bound of 1024 with idle connections before a fifth
    sandbox exists; the newcomer, below its reserve, gets a slot by resetting
    the oldest connection still waiting for its hello of the largest holder.
    Twin: the hogs' connections were all admitted (the pool really was full)
    and a hog past its reserve gets no further slot while the pool is full."""
    need_dnsmasq(c)
    ins_tools()
    # A proxy of its own: earlier tests' inspected sandboxes may still hold
    # reserves while their connections drain, and the pool must be full to
    # exercise the eviction.
    restart_daemon(c, c.daemon.extra_args)
    _, web = ins_get_servers(c)
    hogs = []
    code = ("import socket, sys, time\n"
            "ss = []\n"
            "for i in range(256):\n"
            "    for t in range(3):  # a loaded machine can drop a SYN\n"
            "        try:\n"
            "            ss.append(socket.create_connection(('%s', %d), timeout=3))\n"
            "            break\n"
            "        except OSError: time.sleep(0.05)\n"
            "print('held', len(ss), flush=True)\n"
            "time.sleep(4)\n" % (INS_ADDR, web.port))
    boxes = [Sandbox(c, ins_policy(c, [web.port]), "ev-hog%d" % i) for i in range(4)]
    victim = None
    try:
        for b in boxes:
            b.__enter__()
            ins_resolve(c, b)
        ev0 = int((json.loads(c.ctl_ok("status", "--json").stdout).get("inspect") or {}).get("evicted") or 0)
        for b in boxes:
            p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                 preexec_fn=join_cgroup_fn(b.cg))
            CLEANUP.push("evict hog", lambda p=p: p.poll() is None and p.kill())
            hogs.append(p)
        held = [int(p.stdout.readline().split()[1]) for p in hogs]
        st = json.loads(c.ctl_ok("status", "--json").stdout).get("inspect") or {}
        log("hogs hold %r; proxy %r" % (held, st))
        check(sum(held) == 1024 and st.get("connections") == 1024,
              "the hogs did not fill the pool: %r, %r" % (held, st))
        # Twin: a hog, past its reserve, gets nothing more (reset at once).
        rc, out = ins_run(boxes[0], [CURL, "-sS", "--max-time", "3", "--resolve",
                                     "api.test:%d:%s" % (web.port, INS_ADDR),
                                     "http://api.test:%d/x" % web.port])
        check(rc != 0, "a hog got a slot past the full pool: %d %r" % (rc, out))
        victim = Sandbox(c, ins_policy(c, [web.port]), "ev-victim")
        victim.__enter__()
        ins_resolve(c, victim)
        check(all(p.poll() is None for p in hogs), "a hog ended before the victim asked")
        rc, out = ins_run(victim, [CURL, "-sS", "--max-time", "8", "--resolve",
                                   "api.test:%d:%s" % (web.port, INS_ADDR),
                                   "http://api.test:%d/x" % web.port])
        check(rc == 0 and "inspected-ok" in out,
              "a newcomer below its reserve was refused in a full pool: %d %r" % (rc, out))
        ev = int((json.loads(c.ctl_ok("status", "--json").stdout).get("inspect") or {}).get("evicted") or 0)
        check(ev > ev0, "no connection was evicted (%d -> %d)" % (ev0, ev))
    finally:
        for p in hogs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for b in ([victim] if victim else []) + boxes:
            try:
                b.__exit__(None, None, None)
            except Exception as e:
                log("cleanup %s: %s" % (b.cg, e))
