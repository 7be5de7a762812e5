# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Metering, quotas, /metrics, billing and inbound traffic (docs/metering.md)."""

import json
import os
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


@test
def metering_tcp_udp_bytes(c):
    sink = SinkServer()
    u = c.udp("meter")
    t1, t2 = "m1-" + RAND, "m2-" + RAND
    allow = ["tcp/127.0.0.1:%d" % sink.port, "udp/127.0.0.1:%d" % u.port]
    with c.sandbox(allow, name="meter1", tenant=t1) as s1, \
         c.sandbox(allow, name="meter2", tenant=t2) as s2:
        b0 = sb_stats(c, s1)
        n = 1 << 20
        out = in_sandbox(s1.cg, SENDER, "tcp", "127.0.0.1", sink.port, n)
        check(out[:2] == ["ok", str(n)] and out[-1] == "pong", "TCP sender: %r" % out)
        check(wait_until(lambda: sink.received >= n, 5), "sink got %d of %d" % (sink.received, n))
        b1 = sb_stats(c, s1)
        d = diff(b1, b0)
        retrans = int(out[2])
        over = d["bytes_out"] - n - retrans
        check(d["connections_allowed"] == 1, "connections_allowed +%d, expected 1" %
              d["connections_allowed"])
        check(d["packets_out"] > 0 and
              TCP4_MIN * d["packets_out"] <= over <= TCP4_MAX * d["packets_out"],
              "TCP: %d payload bytes (+%d retransmitted) metered as %d bytes in %d packets "
              "(overhead %d, bounds %d..%d)" % (n, retrans, d["bytes_out"], d["packets_out"], over,
                           TCP4_MIN * d["packets_out"], TCP4_MAX * d["packets_out"]))
        FIGURES["tcp"] = (n, d["bytes_out"], d["packets_out"], over / d["packets_out"])
        log("TCP: %d payload -> %d bytes, %d packets, %.1f bytes overhead/packet; in: %d bytes "
            "%d packets" % (n, d["bytes_out"], d["packets_out"], over / d["packets_out"],
                            d["bytes_in"], d["packets_in"]))
        check(d["bytes_in"] > 0 and d["packets_in"] > 0, "no ingress metered: %r" % d)

        before_u = u.received
        out = in_sandbox(s1.cg, SENDER, "udp", "127.0.0.1", u.port, 100, 1000)
        check(out[:2] == ["ok", "100"], "UDP sender: %r" % out)
        u.wait_for(before_u + 100, 5)
        b2 = sb_stats(c, s1)
        d = diff(b2, b1)
        check(d["packets_out"] == 100 and d["bytes_out"] == 100 * (1000 + UDP4),
              "UDP: 100 x 1000 bytes metered as %d bytes in %d packets, expected %d in 100" %
              (d["bytes_out"], d["packets_out"], 100 * (1000 + UDP4)))
        check(d["datagrams_allowed"] == 100, "datagrams_allowed +%d" % d["datagrams_allowed"])
        FIGURES["udp"] = (100000, d["bytes_out"], d["packets_out"], 28.0)

        # Two tenants stay apart: m2's traffic is m2's only.
        ta0, tb0 = tenant_stats(c, t1), tenant_stats(c, t2)
        check(ta0 is not None and ta0["bytes_out"] == b2["bytes_out"],
              "tenant %s bytes_out %r, its only sandbox %d" %
              (t1, ta0 and ta0["bytes_out"], b2["bytes_out"]))
        out = in_sandbox(s2.cg, SENDER, "tcp", "127.0.0.1", sink.port, 300000)
        check(out and out[0] == "ok", "TCP sender in %s: %r" % (t2, out))
        ta1, tb1 = tenant_stats(c, t1), tenant_stats(c, t2)
        s2row = sb_stats(c, s2)
        check(diff(ta1, ta0) == {k: 0 for k in FIELDS},
              "tenant %s counted %s's traffic: %r" % (t1, t2, diff(ta1, ta0)))
        tb0 = tb0 or {k: 0 for k in FIELDS}
        check(tb1["bytes_out"] - tb0["bytes_out"] == s2row["bytes_out"] and
              s2row["bytes_out"] > 300000, "tenant %s: %r, sandbox %r" % (t2, tb1, s2row))
        check(all(r["tenant"] == t2 for r in stats(c, t2)["sandboxes"]),
              "`stats --tenant` shows other tenants' sandboxes")
        # The table form works too.
        r = c.ctl_ok("stats", "--tenant", t1)
        check(t1 in r.stdout and "BYTES_OUT" in r.stdout, "`stats` table: %r" % r.stdout[:300])


@test
def quota_drops_after_limit_and_alerts_once(c):
    sink = SinkServer()
    u = c.udp("quota")
    pol = c.policy(["tcp/127.0.0.1:%d" % sink.port, "udp/127.0.0.1:%d" % u.port],
                   tenant="q-" + RAND)
    with open(pol) as f:
        doc = json.load(f)
    doc["limits"] = {"egress_bytes": 200000, "window_seconds": 3600}
    with open(pol, "w") as f:
        json.dump(doc, f)
    cnt0 = status_json(c)["counters"]
    with Sandbox(c, pol, "quota") as sb:
        out = in_sandbox(sb.cg, SENDER, "tcp", "127.0.0.1", sink.port, 1 << 20, 3)
        check(out and out[0] == "stalled", "a 1 MiB send under a 200 kB quota: %r" % out)
        time.sleep(0.5)
        check(sink.received < 200000, "%d bytes got through a 200000-byte quota" % sink.received)
        row = sb_stats(c, sb)
        q = row.get("quota") or {}
        check(row["quota_drops"] > 0, "quota_drops %r" % row["quota_drops"])
        check(row["bytes_out"] <= 200000, "bytes_out %d past the quota" % row["bytes_out"])
        check(q.get("limit_bytes") == 200000 and q.get("window_seconds") == 3600,
              "quota in stats: %r" % q)
        cnt1 = status_json(c)["counters"]
        check(cnt1["quota_dropped"] > cnt0["quota_dropped"], "counter quota_dropped %r -> %r" %
              (cnt0["quota_dropped"], cnt1["quota_dropped"]))
        # More traffic in the same window: dropped (UDP fails), no second event.
        out = in_sandbox(sb.cg, SENDER, "udp", "127.0.0.1", u.port, 20, 500)
        check(out[:3] == ["err", "0", "20"], "UDP past the quota: %r" % out)
        row2 = sb_stats(c, sb)
        check(row2["quota"]["windows_exceeded"] == 1,
              "windows_exceeded %r, expected 1" % row2["quota"]["windows_exceeded"])
        check(row2["quota_drops"] >= row["quota_drops"] + 20, "quota_drops %r -> %r" %
              (row["quota_drops"], row2["quota_drops"]))
        # An update keeps the running window.
        sb.update(pol)
        check(sb_stats(c, sb)["quota"]["window_bytes"] >= row2["quota"]["window_bytes"] - 2000,
              "an update reset the quota window")
        # The event stream and the alert (when egressd has them): once.
        sid = c.find_sandbox(sb.cg)["id"]
        r = c.ctl("events", "--json", "--sandbox", str(sid))
        if r.returncode == 0:
            evs = [json.loads(l) for l in r.stdout.splitlines() if l.strip().startswith("{")]
            if not evs and r.stdout.strip().startswith("["):
                evs = json.loads(r.stdout)
            nq = sum(1 for e in evs if e.get("type") == "quota")
            check(nq == 1, "%d quota events for sandbox %d, expected 1" % (nq, sid))
        alerts = os.path.join(c.state, "alerts.jsonl")
        if os.path.exists(alerts):
            def nalerts():
                with open(alerts) as f:
                    return sum(1 for l in f if '"quota_exceeded"' in l and
                               json.loads(l).get("sandbox") in (sid, str(sid)))
            wait_until(lambda: nalerts() >= 1, 3)
            check(nalerts() == 1, "%d quota_exceeded alerts for sandbox %d, expected 1" %
                  (nalerts(), sid))


@test
def metrics_endpoint_matches_stats(c):
    sink = SinkServer()
    tenant = "p-" + RAND
    with c.sandbox(["tcp/127.0.0.1:%d" % sink.port], name="prom", tenant=tenant) as sb:
        out = in_sandbox(sb.cg, SENDER, "tcp", "127.0.0.1", sink.port, 50000)
        check(out and out[0] == "ok", "sender: %r" % out)
        c.denied(sb.cg, "tcp", "127.0.0.1", c.tcp("prom-denied").port)
        time.sleep(0.3)
        st = stats(c, tenant)
        code, ctype, text = scrape(c)
        check(code == 200 and "text/plain" in ctype, "GET /metrics: %d %r" % (code, ctype))
        samples, types = parse_exposition(text)
        check(types.get("egressd_egress_bytes_total") == "counter",
              "TYPE of egressd_egress_bytes_total: %r" % types.get("egressd_egress_bytes_total"))
        trow, srow = st["tenants"][0], st["sandboxes"][0]
        sid, execid = str(srow["id"]), srow["execution_id"]
        want = [("egress_bytes_total", "bytes_out", None, None), ("egress_packets_total",
                 "packets_out", None, None), ("ingress_bytes_total", "bytes_in", None, None),
                ("ingress_packets_total", "packets_in", None, None),
                ("connections_total", "connections_allowed", "allowed", "policy"),
                ("connections_total", "connections_denied", "denied", "connect"),
                ("packets_dropped_total", "quota_drops", None, "quota")]
        check(execid and "execution_id" not in text,
              "/metrics carries execution_id labels (one series per execution)")
        for fam, key, verdict, reason in want:
            tl = {"tenant": tenant}
            sl = {"tenant": tenant, "sandbox": sid}
            if verdict:
                tl["verdict"] = sl["verdict"] = verdict
            if reason:
                tl["reason"] = sl["reason"] = reason
            tv = samples.get(("egressd_" + fam, frozenset(tl.items())))
            sv = samples.get(("egressd_sandbox_" + fam, frozenset(sl.items())))
            check(tv == trow[key], "egressd_%s%r = %r, stats says %r" % (fam, tl, tv, trow[key]))
            check(sv == srow[key], "egressd_sandbox_%s%r = %r, stats says %r" %
                  (fam, sl, sv, srow[key]))
        check(trow["connections_denied"] >= 1, "the denied connect was not counted")
        check(samples.get(("egressd_sandboxes", frozenset())) == len(c.list_json()),
              "egressd_sandboxes gauge")
        check(any(n == "egressd_info" for n, _ in samples), "no egressd_info")
        check(("egressd_dns_proxy_latency_seconds_bucket",
               frozenset({"le": "+Inf"}.items())) in samples, "no DNS latency histogram")
        check(any(n == "egressd_map_capacity" for n, _ in samples), "no map capacity")
        check(scrape(c, "/other")[0] == 404, "GET /other is not 404")
        check(scrape(c, "/metrics", "POST")[0] == 405, "POST /metrics is not 405")


@test
def metrics_cardinality_bound(c):
    sink = SinkServer()
    tenant = "card-" + RAND
    c.daemon.stop()
    c.daemon.extra_args = ["--metrics-max-sandboxes", "1"]
    try:
        c.daemon.start()
        with c.sandbox(["tcp/127.0.0.1:%d" % sink.port], name="card1", tenant=tenant) as s1, \
             c.sandbox(["tcp/127.0.0.1:%d" % sink.port], name="card2", tenant=tenant) as s2:
            for sb in (s1, s2):
                out = in_sandbox(sb.cg, SENDER, "tcp", "127.0.0.1", sink.port, 10000)
                check(out and out[0] == "ok", "sender: %r" % out)
            samples, _ = parse_exposition(scrape(c)[2])
            rows = [dict(l) for n, l in samples if n == "egressd_sandbox_egress_bytes_total"]
            check(len(rows) <= 2, "more series than the bound allows: %r" % rows)
            check(any(r.get("sandbox") == "_other" for r in rows), "no _other series: %r" % rows)
            folded = samples.get(("egressd_metrics_series_folded_total", frozenset()))
            check(folded is not None and folded >= 1, "series_folded_total %r" % folded)
            total = sum(v for (n, l), v in samples.items()
                        if n == "egressd_sandbox_egress_bytes_total" and
                        dict(l).get("tenant") == tenant)
            st = stats(c, tenant)
            check(total == sum(r["bytes_out"] for r in st["sandboxes"]),
                  "folded series lose bytes: %r vs %r" % (total, st["sandboxes"]))
    finally:
        c.daemon.stop()
        c.daemon.extra_args = []
        c.daemon.start()


@test
def billing_export_no_double_count(c):
    sink = SinkServer()
    tenant = "bill-" + RAND
    with c.sandbox(["tcp/127.0.0.1:%d" % sink.port], name="bill", tenant=tenant) as sb:
        out = in_sandbox(sb.cg, SENDER, "tcp", "127.0.0.1", sink.port, 100000)
        check(out and out[0] == "ok", "sender: %r" % out)
        check(wait_until(lambda: billing_matches(c, tenant), 5, 0.2),
              "billing lines %r do not add up to the meter %r" %
              (billing_lines(c, tenant), tenant_stats(c, tenant)))
        n1 = len(billing_lines(c, tenant))
        out = in_sandbox(sb.cg, SENDER, "tcp", "127.0.0.1", sink.port, 50000)
        check(out and out[0] == "ok", "sender: %r" % out)
        check(wait_until(lambda: billing_matches(c, tenant) and
                         len(billing_lines(c, tenant)) > n1, 5, 0.2),
              "second interval: %r vs %r" % (billing_lines(c, tenant), tenant_stats(c, tenant)))
        lines = billing_lines(c, tenant)
        for l in lines:
            for k in ("v", "tenant", "interval_start", "interval_end", "seq", "bytes_out",
                      "bytes_in", "packets_out", "packets_in", "connections_allowed",
                      "connections_denied", "dns_queries_allowed", "dns_queries_refused"):
                check(k in l, "billing line lacks %r: %r" % (k, l))
            check(l["bytes_out"] + l["packets_out"] + l["bytes_in"] > 0, "empty line %r" % l)
        check(lines[-1]["bytes_out"] > 50000, "second interval's delta %r" % lines[-1])
        # kill -9, traffic while egressd is away, restart: nothing twice, nothing lost.
        c.daemon.kill9()
        out = in_sandbox(sb.cg, SENDER, "tcp", "127.0.0.1", sink.port, 70000)
        check(out and out[0] == "ok", "sender while egressd is dead: %r" % out)
        c.daemon.start()
        check(wait_until(lambda: billing_matches(c, tenant), 6, 0.2),
              "after kill -9 and restart: lines %r, meter %r" %
              (billing_lines(c, tenant), tenant_stats(c, tenant)))
        time.sleep(2.5)  # a few more (idle) intervals: still no double count
        check(billing_matches(c, tenant), "idle intervals changed the sum: %r vs %r" %
              (billing_lines(c, tenant), tenant_stats(c, tenant)))
        with open(os.path.join(c.state, "billing.jsonl")) as f:
            seqs = [json.loads(l)["seq"] for l in f]
        check(seqs == sorted(set(seqs)), "billing seqs repeat or go back: %r" % seqs)



def billing_problems(c):
    return [p for p in status_json(c).get("problems", []) if p.startswith("billing:")]


@test
def billing_export_failure_is_a_health_problem(c):
    """A billing export that cannot be written must not be silent: the
    pipeline that bills tenants reads the file, and a probe reads status.
    The attack: the billing file replaced by a directory (a hand edit, a
    full or broken volume) while traffic flows. egressd keeps the delta,
    reports "billing:" in status (exit 5), and once the file is back bills
    every byte exactly once. Sanity twin: before the break, and after the
    repair, status has no billing problem."""
    sink = SinkServer()
    tenant = "billf-" + RAND
    path = os.path.join(c.state, "billing.jsonl")
    aside = path + ".aside-" + RAND
    moved = []

    def restore():
        if os.path.isdir(path) and not os.path.islink(path):
            os.rmdir(path)
        if moved and os.path.exists(aside):
            os.rename(aside, path)
            moved.clear()
    CLEANUP.push("billing file " + path, restore)  # a fatal signal
    try:
        with c.sandbox(["tcp/127.0.0.1:%d" % sink.port], name="billf", tenant=tenant) as sb:
            out = in_sandbox(sb.cg, SENDER, "tcp", "127.0.0.1", sink.port, 20000)
            check(out and out[0] == "ok", "sender: %r" % out)
            check(wait_until(lambda: billing_matches(c, tenant), 5, 0.2),
                  "before the break: lines %r, meter %r" %
                  (billing_lines(c, tenant), tenant_stats(c, tenant)))
            check(not billing_problems(c), "healthy export reported as a problem: %r" %
                  billing_problems(c))
            if os.path.exists(path):
                os.rename(path, aside)
                moved.append(True)
            os.mkdir(path, 0o700)
            out = in_sandbox(sb.cg, SENDER, "tcp", "127.0.0.1", sink.port, 30000)
            check(out and out[0] == "ok", "sender during the break: %r" % out)
            check(wait_until(lambda: billing_problems(c), 5, 0.2),
                  "a failing export is not in status: %r" % status_json(c).get("problems"))
            r = c.ctl("status")
            check(r.returncode == 5, "status exits %d with a failing export, not 5" % r.returncode)
            restore()
            check(wait_until(lambda: not billing_problems(c) and billing_matches(c, tenant), 6, 0.2),
                  "after the repair: problems %r, lines %r, meter %r" %
                  (billing_problems(c), billing_lines(c, tenant), tenant_stats(c, tenant)))
    finally:
        restore()  # the next tests bill to it


@test
def inbound_denied_replies_pass(c):
    t = c.tcp("inbound")
    echo = UdpEcho()
    allow = ["tcp/127.0.0.1:%d" % t.port, "udp/127.0.0.1:%d" % echo.port]
    with c.sandbox(allow, name="inb") as sb:
        d0 = sb_stats(c, sb)["inbound_drops"]
        p, tport, uport = run_listener(c, sb.cg, t.port, echo.port)
        tcp_ok = knock(tport, uport)
        out, err = p.communicate(timeout=15)
        words = out.split()
        check(not tcp_ok, "a connection from outside reached the sandbox's listener")
        check(len(words) == 4, "listener output %r %r" % (out, err[-300:]))
        check(words[0] == "0", "the sandbox accepted %s inbound connection(s)" % words[0])
        check(words[1] == "0", "the sandbox received %s unsolicited datagram(s)" % words[1])
        check(words[2] == "pong", "the sandbox's own TCP connection got %r, not its reply" %
              words[2])
        check(words[3] == "pong", "the sandbox's own UDP exchange got %r, not its reply" %
              words[3])
        check(sb_stats(c, sb)["inbound_drops"] > d0, "inbound_drops did not grow")


@test
def inbound_allow_lets_connections_in(c):
    t = c.tcp("inbound-allow")
    echo = UdpEcho()
    allow = ["tcp/127.0.0.1:%d" % t.port, "udp/127.0.0.1:%d" % echo.port]
    with c.sandbox(allow, name="inba", extra_network={"inbound": "allow"}) as sb:
        p, tport, uport = run_listener(c, sb.cg, t.port, echo.port)
        tcp_ok = knock(tport, uport)
        out, err = p.communicate(timeout=15)
        words = out.split()
        check(tcp_ok, "inbound: allow, yet the connection into the sandbox failed (sandbox "
              "stats %r)" % {k: v for k, v in sb_stats(c, sb).items() if k.endswith("drops")})
        check(len(words) == 4 and words[0] == "1" and words[1] == "1",
              "listener saw %r (expected 1 connection, 1 datagram) %r" % (out, err[-300:]))
        check(words[2] == "pong" and words[3] == "pong", "replies: %r" % words)
