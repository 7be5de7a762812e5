# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# The inspecting proxy under a hostile sandbox (issue 23): deny events have a
# per-sandbox budget (finding 10). Run by run.py (harness.runner).

import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)
from test_inspect import INS_ADDR, ins_get_servers

LIM_BUDGET_BURST = 200   # egressd's default --events-deny-burst (the harness keeps it)

# n requests with Host: argv[3], one connection each, 32 in flight; prints
# how many got the proxy's 403 and how many anything else.
LIM_FLOOD = r"""
import selectors, socket, sys
host, port, name, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
req = ("GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % name).encode()
sel = selectors.DefaultSelector()
started = refused = other = 0
def start():
    global started
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex((host, port))
    started += 1
    sel.register(s, selectors.EVENT_WRITE, [b"", False])
while started < min(32, n):
    start()
while sel.get_map():
    for key, ev in sel.select(10):
        s, st = key.fileobj, key.data
        done = False
        try:
            if ev & selectors.EVENT_WRITE and not st[1]:
                s.send(req)
                st[1] = True
                sel.modify(s, selectors.EVENT_READ, st)
                continue
            d = s.recv(4096)
            st[0] += d
            done = not d
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            done = True
        if done:
            sel.unregister(s)
            s.close()
            if st[0].startswith(b"HTTP/1.1 403"):
                refused += 1
            else:
                other += 1
            if started < n:
                start()
print(refused, other)
"""


def lim_policy(c, port):
    """api.test on a literal entry (no DNS needed), inspected."""
    return c.policy(["tcp/%s:%d" % (INS_ADDR, port)],
                    extra_network={"dns_allow": ["api.test"], "inspect": True,
                                   "dns_rebind_allow": ["127.0.0.0/8"]})


def lim_flood(sb, port, name, n):
    words = in_sandbox(sb.cg, LIM_FLOOD, INS_ADDR, port, name, n, timeout=120)
    check(words == [str(n), "0"], "%d requests with Host %s: %r refused/other (want all "
          "refused with a 403)" % (n, name, words))


def lim_denies(c, sid, kind="inspect"):
    return [e for e in obs_events(c, "--sandbox", str(sid))
            if e.get("type") == kind and e.get("verdict") == "deny"]


@test
def inspect_deny_events_budget_per_sandbox(c):
    _, web = ins_get_servers(c)
    victim_n, flood_n = 5, 5000
    with Sandbox(c, lim_policy(c, web.port)) as victim, \
            Sandbox(c, lim_policy(c, web.port)) as noisy:
        vid, nid = sandbox_id(c, victim), sandbox_id(c, noisy)
        lim_flood(victim, web.port, "victim-evil.rt", victim_n)
        check(len(lim_denies(c, vid)) == victim_n, "the victim's %d denies before the "
              "flood: %r" % (victim_n, lim_denies(c, vid)))
        # The attack: 5,000 refused requests from the neighbour.
        lim_flood(noisy, web.port, "evil.rt", flood_n)
        mine = lim_denies(c, vid)
        check(len(mine) == victim_n and all(e.get("name") == "victim-evil.rt" for e in mine),
              "after a neighbour's %d refused requests `events --sandbox %d` shows %d of "
              "the victim's %d denies" % (flood_n, vid, len(mine), victim_n))

        # Sanity twin: the neighbour's flood is accounted for, not lost: the
        # denies it got as events plus its summaries' count make 5,000.
        def settled():
            sums = lim_denies(c, nid, "denies_suppressed")
            total = max([e.get("suppressed_total", 0) for e in sums] or [0])
            return len(lim_denies(c, nid)) + total == flood_n
        check(wait_until(settled, 5, 0.2), "the neighbour's %d denies: %d events, summaries "
              "%r" % (flood_n, len(lim_denies(c, nid)),
                      lim_denies(c, nid, "denies_suppressed")[-3:]))
        sums = lim_denies(c, nid, "denies_suppressed")
        check(sums and all(e.get("origin") == "inspect" and
                           (e.get("last") or {}).get("name") == "evil.rt" and
                           (e.get("last") or {}).get("reason") == "name_not_allowed"
                           for e in sums),
              "the summaries do not name the refused host: %r" % sums[-2:])
        check(not lim_denies(c, vid, "denies_suppressed"), "the victim got a summary")


@test
def inspect_deny_events_below_budget_all_reported(c):
    _, web = ins_get_servers(c)
    n = LIM_BUDGET_BURST // 2
    with Sandbox(c, lim_policy(c, web.port)) as sb:
        sid = sandbox_id(c, sb)
        lim_flood(sb, web.port, "evil.rt", n)
        time.sleep(1.3)  # a summary would be out by now
        check(len(lim_denies(c, sid)) == n, "%d denies below the budget: %d events" %
              (n, len(lim_denies(c, sid))))
        check(not lim_denies(c, sid, "denies_suppressed"), "a summary below the budget: %r" %
              lim_denies(c, sid, "denies_suppressed"))
