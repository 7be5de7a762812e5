# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Issue 15, the registry (user/egressd/registry/): many sandboxes in the
# hashed set, some detached from the middle of it (the last one moves into
# each gap), and every remaining one still found by its id on the
# ring-event path (its denies carry its own tenant and execution id, never
# a neighbour's), allowed what its policy allows, and listed; the detached
# ones' cgroups stay under deny-all.

import contextlib
import json
import os

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)

RG_SANDBOXES = 12


def rg_execution_id(sb):
    with open(sb.policy) as f:
        return json.load(f)["execution_id"]


@test
def registry_many_sandboxes_found_after_removals(c):
    a, b = c.tcp("rg-a"), c.tcp("rg-b")
    with contextlib.ExitStack() as stack:
        sbs = []
        for i in range(RG_SANDBOXES):
            sb = stack.enter_context(c.sandbox(["127.0.0.1:%d" % a.port], name="rg%d" % i,
                                               tenant="%s-rg%d" % (RUN_ID, i)))
            sbs.append((i, sb, sandbox_id(c, sb)))
        ids = [sid for _, _, sid in sbs]
        check(len(set(ids)) == len(ids), "sandbox ids repeat: %r" % ids)
        # Detach the first, then every third: each removal moves the last
        # record of the set into its slot.
        gone = [x for x in sbs if x[0] % 3 == 0]
        kept = [x for x in sbs if x[0] % 3 != 0]
        for _, sb, _ in gone:
            sb.detach()
        listed = sorted(s["id"] for s in c.list_json())
        check(listed == sorted(sid for _, _, sid in kept),
              "list shows %r, expected the kept %r" % (listed, sorted(x[2] for x in kept)))
        # A detached cgroup is held under deny-all: even what its policy
        # allowed is refused (no stale record answers for it).
        for _, sb, _ in gone[:2]:
            sb.denied("tcp", "127.0.0.1", a.port)
        # Every kept one: the allowed thing works (the sanity twin), the
        # denied thing is refused and its event names this sandbox only.
        for i, sb, sid in kept:
            sb.allowed("tcp", "127.0.0.1", a.port)
            sb.denied("tcp", "127.0.0.1", b.port)
        for i, sb, sid in kept:
            want_tenant, want_exec = "%s-rg%d" % (RUN_ID, i), rg_execution_id(sb)
            found = []

            def seen():
                found[:] = [e for e in obs_events(c, "--sandbox", str(sid))
                            if e.get("type") == "connect" and e.get("verdict") == "deny" and
                            e.get("port") == b.port]
                return bool(found)

            check(wait_until(seen, 5, 0.1), "sandbox %d: no deny event for port %d" %
                  (sid, b.port))
            for e in found:
                check(e.get("sandbox") == sid and e.get("tenant") == want_tenant and
                      e.get("execution_id") == want_exec,
                      "sandbox %d's deny is attributed to %r/%r/%r, expected %r/%r" %
                      (sid, e.get("sandbox"), e.get("tenant"), e.get("execution_id"),
                       want_tenant, want_exec))
        # Detached ones left the set for the held list (their cgroups still
        # exist): status counts only the kept ones.
        st = obs_status(c)
        check(st.get("sandboxes") == len(kept), "status counts %r sandboxes, expected %d" %
              (st.get("sandboxes"), len(kept)))
        held = json.loads(c.ctl_ok("list", "--json", "--held").stdout)
        held_ids = sorted(h.get("id") for h in held if h.get("state") == "detached")
        for _, _, sid in gone:
            check(sid in held_ids, "detached sandbox %d is not held: %r" % (sid, held))


def rg_list(c, **page):
    return ctl_request(c.sock, dict({"op": "list"}, **page), timeout=30)


@test
def registry_list_pages_in_id_order(c):
    """A list asked a page at a time (`after`, `limit`) shows every sandbox
    once, in id order, with `next` until the last page and `held` on the
    first only; egressctl's paged list equals one whole list."""
    a = c.tcp("rg-page")
    with contextlib.ExitStack() as stack:
        sbs = [stack.enter_context(c.sandbox(["127.0.0.1:%d" % a.port], name="rgp%d" % i))
               for i in range(5)]
        sbs[1].detach()  # one held cgroup, and a gap in the ids
        whole = rg_list(c)
        check(whole.get("ok") and "next" not in whole, "whole list: %r" % whole)
        ids = [s["id"] for s in whole["sandboxes"]]
        check(ids == sorted(ids) and len(ids) >= 4, "whole list not in id order: %r" % ids)
        pages, after, seen = [], None, []
        for _ in range(len(ids) + 2):  # bounded: each page must advance
            r = rg_list(c, limit=2, **({} if after is None else {"after": after}))
            check(r.get("ok"), "list page after %r: %r" % (after, r))
            check(("held" in r) == (after is None),
                  "held on page after %r: %r" % (after, "held" in r))
            pages.append([s["id"] for s in r["sandboxes"]])
            seen += pages[-1]
            if "next" not in r:
                break
            check(r["next"] == pages[-1][-1], "next %r is not the page's last id %r" %
                  (r["next"], pages[-1]))
            after = r["next"]
        check(seen == ids, "pages %r do not make the whole list %r" % (pages, ids))
        check(all(len(p) == 2 for p in pages[:-1]) and 1 <= len(pages[-1]) <= 2,
              "page sizes: %r" % pages)
        held = [h.get("cgroup") for h in rg_list(c, limit=1)["held"]]
        check(sbs[1].cg in held, "%s is not on the first page's held list: %r" %
              (sbs[1].cg, held))
        # egressctl pages too: one sandbox a request lists the same.
        for args in (("--page", "1"), ()):
            listed = [s["id"] for s in json.loads(c.ctl_ok("list", "--json", *args).stdout)]
            check(listed == ids, "egressctl list %s: %r, expected %r" % (args, listed, ids))
        # Bad pages are refused by name, nothing half-listed.
        for req, field in (({"limit": 0}, "limit"), ({"limit": "2"}, "limit"),
                           ({"after": -1}, "after"), ({"after": 1 << 33}, "after")):
            r = rg_list(c, **req)
            check(not r.get("ok") and r.get("code") == "bad_request" and
                  r.get("field") == field, "list %r: %r" % (req, r))
        r = c.ctl("list", "--page", "0")
        check(r.returncode == 2 and "--page" in r.stderr, "list --page 0: exit %d %r" %
              (r.returncode, r.stderr))



def rg_fake_list(c, name, answer):
    return FakeControl(os.path.join(c.work, "fake-%s.sock" % name), answer)


def rg_pages(ids):
    """A fake egressd that pages ids as egressd does."""
    def answer(req):
        after, limit = req.get("after", 0), req.get("limit") or len(ids)
        rest = [i for i in ids if i > after]
        r = {"ok": True, "sandboxes": [{"id": i} for i in rest[:limit]]}
        if len(rest) > limit:
            r["next"] = rest[limit - 1]
        if not after:
            r["held"] = []
        return r
    return answer


@test
def registry_list_pager_against_other_egressds(c):
    """egressctl list against egressds that answer otherwise: one from
    before pages (it refuses limit) is asked for the whole list; pages that
    do not follow (next not advancing, an empty page with next, ids going
    back) are an error, never an endless loop or a wrong list. Twin: a
    pager like egressd's gives every id once."""
    def old(req):
        if "limit" in req:
            return {"ok": False, "code": "bad_request", "field": "limit",
                    "error": "unknown field \"limit\""}
        return {"ok": True, "sandboxes": [{"id": 3}, {"id": 1}, {"id": 2}], "held": []}

    cases = [
        ("paged", rg_pages([1, 2, 5, 9, 10]), 0, [1, 2, 5, 9, 10], 3),
        ("old", old, 0, [3, 1, 2], 2),
        ("stuck", lambda req: {"ok": True, "sandboxes": [{"id": 1}], "next": 1}, 1, None, 2),
        ("empty", lambda req: {"ok": True, "sandboxes": [], "next": 5}, 1, None, 1),
        ("back", lambda req: {"ok": True, "sandboxes": [{"id": 4}, {"id": 2}], "next": 2}, 1,
         None, 1),
    ]
    for name, answer, want_rc, want_ids, want_reqs in cases:
        fake = rg_fake_list(c, name, answer)
        try:
            r = run([c.egressctl, "--socket", fake.path, "list", "--json", "--page", "2"],
                    timeout=30)
        finally:
            fake.close()
        if want_rc == 0:
            ids = [s["id"] for s in json.loads(r.stdout)] if r.returncode == 0 else None
            check(r.returncode == 0 and ids == want_ids, "%s: exit %d, ids %r, expected %r: %r" %
                  (name, r.returncode, ids, want_ids, r.stderr))
        else:
            # --json: the error as JSON on stdout, and no list.
            out = json.loads(r.stdout) if r.stdout.strip() else None
            check(r.returncode != 0 and "does not follow" in r.stderr and
                  isinstance(out, dict) and out.get("ok") is False,
                  "%s: exit %d %r %r" % (name, r.returncode, r.stdout[:200], r.stderr))
        check(len(fake.requests) == want_reqs, "%s: %d requests, expected %d: %r" %
              (name, len(fake.requests), want_reqs, fake.requests[:5]))
