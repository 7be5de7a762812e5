# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# A clean package and CLI (issue 27, item 5): lintian on `make deb`, the
# exit codes and hints of egressctl, `egressctl version`, URL-shaped
# destinations, and `egressctl cleanup` after an uninstall. (The install
# tree, the hooks and policy directory under the configured prefix, the unit
# and the bash completion of every command and option are checked by
# tests/install/check-install: ops_make_install_tree_and_man_pages.)

import json
import os
import subprocess
import time

from harness import *  # noqa: F401,F403

from test_ops import OPS_REPO, OpsDaemon


@test(needs=("plain_build",))
def package_deb_lintian_clean(c):
    """make deb's package and its -dbgsym: no lintian error or warning
    (before: unstripped binaries, uncompressed man pages, no copyright, no
    changelog, a localhost maintainer, a file:// homepage)."""
    out = os.path.join(c.work, "deb")
    r = run(["make", "--no-print-directory", "-s", "deb", "OUT=" + out], timeout=600,
            cwd=OPS_REPO)
    check(r.returncode == 0, "make deb: %d %s" % (r.returncode, (r.stdout + r.stderr)[-800:]))
    debs = sorted(f for f in os.listdir(out) if f.endswith(".deb"))
    check(len(debs) == 2 and debs[1].startswith("egressd_") and
          debs[0].startswith("egressd-dbgsym_"), "make deb made %r" % debs)
    r = run(["tools/check-deb", "--lint-only", os.path.join(out, debs[1])], timeout=300,
            cwd=OPS_REPO)
    log(r.stdout.strip())
    check(r.returncode == 0, "lintian: %d %s" % (r.returncode, (r.stdout + r.stderr)[-1500:]))
    # The binaries are stripped, and their debug symbols are where gdb looks.
    r = run(["sh", "-c", "dpkg-deb -c %s; dpkg-deb -c %s" % (os.path.join(out, debs[1]),
                                                            os.path.join(out, debs[0]))])
    check("./usr/share/man/man8/egressd.8.gz" in r.stdout and
          "./usr/share/doc/egressd/copyright" in r.stdout and
          "/usr/lib/debug/.build-id/" in r.stdout, "package contents: %r" % r.stdout[-800:])


@test
def cli_exit_codes_say_down_or_denied(c):
    """Exit 3 only when nothing serves the socket; a user the socket's
    permissions refuse gets 6 and a hint (before: 3, "is egressd
    running?", while it was). Twin: root is answered."""
    missing = os.path.join(c.work, "no-such.sock")
    r = run([c.egressctl, "--socket", missing, "status"])
    check(r.returncode == 3 and "is egressd running" in r.stderr,
          "status on a missing socket: %d %r" % (r.returncode, r.stderr))
    r = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", c.egressctl,
             "--socket", c.sock, "status"])
    check(r.returncode == 6 and "Permission denied" in r.stderr and "group" in r.stderr,
          "status as uid 65534: %d %r (want 6 with a hint)" % (r.returncode, r.stderr))
    r = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", c.egressctl,
             "--socket", c.sock, "list", "--json"])
    check(r.returncode == 6 and json.loads(r.stdout).get("code") == "permission_denied",
          "list --json as uid 65534: %d %r" % (r.returncode, r.stdout))
    check(c.ctl("status").returncode in (0, 5), "twin: root is not answered")


@test
def cli_version_and_url_destination(c):
    """`egressctl version` names both versions; a URL given as a
    destination is refused naming the entry meant (before: `bad port
    "//example.com"`). Twin: that entry is accepted."""
    r = c.ctl("version")
    check(r.returncode == 0 and r.stdout.startswith("egressctl ") and
          "\negressd " in r.stdout, "egressctl version: %d %r" % (r.returncode, r.stdout))
    r = run([c.egressctl, "--socket", os.path.join(c.work, "none.sock"), "version"])
    check(r.returncode == 0 and "not reachable" in r.stdout, "version, egressd down: %r" %
          r.stdout)
    cg = c.mkcgroup("url")
    try:
        r = c.ctl("attach", "--cgroup", cg, "--policy",
                  c.policy(["https://api.example.com/v1/x"]))
        check(r.returncode == 4 and "is a URL, not a destination" in r.stderr and
              '"api.example.com:443"' in r.stderr, "a URL destination: %d %r" %
              (r.returncode, r.stderr))
        r = c.ctl("attach", "--cgroup", cg, "--policy", c.policy(["api.example.com:443"]))
        check(r.returncode == 0, "twin: the entry it suggests: %d %r" % (r.returncode, r.stderr))
        c.ctl("detach", "--cgroup", cg)
    finally:
        cgroup_remove_tree(cg)


@test
def cli_cleanup_after_uninstall(c):
    """egressctl cleanup refuses while an egressd serves (on the socket; or,
    socket gone, holding its pinned maps), then removes its pins, state and
    hooks, keeping the audit log. Twins: --dry-run removes nothing; the
    hooks and audit log of the test's own layout are the ones touched."""
    d = OpsDaemon(c, "cleanup").start()
    hooks = os.path.join(d.dir, "hooks.d")
    os.makedirs(hooks)
    for h in ("10-egressd-create.json", "90-egressd-poststop.json", "99-other.json"):
        with open(os.path.join(hooks, h), "w") as f:
            f.write("{}\n")
    cg = c.mkcgroup("cleanup")
    try:
        r = d.ctl("attach", "--cgroup", cg, "--policy", c.policy([]))
        check(r.returncode == 0, "attach: %r" % r.stderr)
        args = [c.egressctl, "--socket", d.sock, "cleanup", "--bpffs-dir", d.bpffs,
                "--state-dir", d.state, "--hooks-dir", hooks, "--keep-run-dirs"]
        r = run(args)
        check(r.returncode == 1 and "answers" in r.stderr and os.path.isdir(d.bpffs),
              "cleanup with egressd serving: %d %r" % (r.returncode, r.stderr))
        os.rename(d.sock, d.sock + ".moved")   # it still runs, unreachable by its socket
        r = run(args)
        check(r.returncode == 1 and "stop it first" in r.stderr and os.path.isdir(d.bpffs),
              "cleanup with egressd holding its maps: %d %r" % (r.returncode, r.stderr))
        d.terminate()   # as systemd stops it: the pins stay
        r = run(args + ["--dry-run"])
        check(r.returncode == 0 and "would remove %s" % d.bpffs in r.stdout and
              os.path.isdir(d.bpffs), "cleanup --dry-run: %d %r" % (r.returncode, r.stdout[-300:]))
        r = run(args)
        log(r.stdout.strip())
        check(r.returncode == 0 and not os.path.exists(d.bpffs) and
              "sandbox link pin(s)" in r.stdout, "cleanup: %d %r %r" %
              (r.returncode, r.stdout, r.stderr))
        left = sorted(os.listdir(d.state)) if os.path.isdir(d.state) else []
        check(left == ["audit.log", "audit.state", "ledger.key"],
              "state left after cleanup: %r" % left)
        check(sorted(os.listdir(hooks)) == ["99-other.json"], "hooks left: %r" %
              os.listdir(hooks))
    finally:
        cgroup_remove_tree(cg)


@test
def metrics_one_label_set_per_family(c):
    """Every metric family of /metrics has one label set (before: the
    allowed rows of connections_total, datagrams_total and dns_queries_total
    had no reason label, the others had one), with series of every kind
    present: a sandbox that connected allowed and denied, sent a denied
    datagram and resolved an allowed and a refused name. promtool check
    metrics passes on the same text."""
    import shutil as _sh
    need_dnsmasq(c)
    t = c.tcp("mls-ok")
    with c.sandbox(["127.0.0.1:%d" % t.port], name="mls", tenant="mls-" + RAND,
                   extra_network=dict(DNS_REBIND_LO, dns_allow=["api.test"])) as sb:
        sb.allowed("tcp", "127.0.0.1", t.port)
        sb.denied("tcp", "127.0.0.1", c.tcp("mls-no").port)
        sb.denied("udp-sendto", "127.0.0.1", c.udp("mls-no-u").port)
        dns_ok(c, sb, "api.test")
        dns_refused(c, sb, "denied.test")
        code, _, text = scrape(c)
    check(code == 200, "GET /metrics: %d" % code)
    samples, types = parse_exposition(text)
    fams = {}
    for (name, labels), _ in samples.items():
        base = name
        for suf in ("_bucket", "_sum", "_count"):
            if name.endswith(suf) and name[:-len(suf)] in types:
                base = name[:-len(suf)]
        keys = frozenset(k for k, _ in labels if not (name.endswith("_bucket") and k == "le"))
        fams.setdefault(base, set()).add(keys)
    mixed = {f: sorted(sorted(k) for k in v) for f, v in fams.items() if len(v) > 1}
    check(not mixed, "families with more than one label set: %r" % mixed)
    for f in ("egressd_connections_total", "egressd_sandbox_dns_queries_total",
              "egressd_datagrams_total"):
        check(f in fams, "no %s in /metrics" % f)
    promtool = _sh.which("promtool")
    check(promtool, "no promtool (the prometheus package; tools/install-deps)")
    r = subprocess.run([promtool, "check", "metrics"], input=text, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=30)
    check(r.returncode == 0, "promtool check metrics: %s" % (r.stdout + r.stderr)[:800])


@test
def events_text_shows_host_and_stripped(c):
    """The text form of `egressctl events` shows what an operator needs: an
    inspect event's host and destination, a DNS event's rcode and the
    addresses a rebinding rewrite stripped (before: neither host nor
    stripped addresses, only in --json). Twin: --json carries the same."""
    from test_inspect import INS_ADDR, ins_get_servers, ins_policy, ins_resolve, ins_run, CURL
    need_dnsmasq(c)
    tls, _ = ins_get_servers(c)
    with Sandbox(c, ins_policy(c, [tls.port]), "evtext-ins") as sb:
        ins_resolve(c, sb)
        ins_run(sb, [CURL, "-sS", "-k", "--max-time", "5", "--resolve",
                     "evil.test:%d:%s" % (tls.port, INS_ADDR), "https://evil.test:%d/" % tls.port])
        sid = str(sandbox_id(c, sb))
        ok = wait_until(lambda: "host=evil.test dst=%s:%d" % (INS_ADDR, tls.port) in
                        c.ctl("events", "--sandbox", sid).stdout, 3)
        check(ok, "no inspect line with host= and dst=: %r" %
              c.ctl("events", "--sandbox", sid).stdout[-600:])
    # No dns_rebind_allow: the zone's loopback answer is stripped.
    with c.sandbox([], extra_network={"dns_allow": ["api.test"]}, name="evtext-dns") as sb:
        dns_query("udp", "127.0.0.2", 53, "api.test", "A", cg=sb.cg)
        dns_refused(c, sb, "denied.test")
        sid = str(sandbox_id(c, sb))

        def lines():
            return c.ctl("events", "--sandbox", sid).stdout
        ok = wait_until(lambda: "stripped=%s(loopback)" % INS_ADDR in lines() and
                        "rcode=NXDOMAIN" in lines(), 3)
        check(ok, "no DNS lines with stripped= and rcode=: %r" % lines()[-800:])
        js = [json.loads(l) for l in c.ctl("events", "--sandbox", sid, "--json").stdout.split("\n")
              if l.strip()]
        check(any(any(a.get("addr") == INS_ADDR for a in e.get("stripped", [])) for e in js),
              "twin: --json has no stripped address")


@test
def detach_after_netns_gone_logs_no_error(c):
    """A container's network namespace is gone by the time its sandbox is
    detached (every bridge-network container exit): one info line, no
    error (before: two error lines per exit). Twin: a detach whose
    namespace still exists says nothing of it."""
    name = "%s-gone" % RUN_ID
    must(["ip", "netns", "add", name])
    CLEANUP.push("netns " + name, lambda: run(["ip", "netns", "del", name]))
    must(["ip", "-n", name, "link", "set", "lo", "up"])
    path = "/run/netns/" + name
    for gone in (False, True):
        sb = NsSandbox(c, c.policy([]), path, name="gone" if gone else "kept")
        try:
            sb.attach()
            with open(c.daemon_log, "rb") as f:
                f.seek(0, 2)
                start = f.tell()
            if gone:
                must(["ip", "netns", "del", name])
            r = c.ctl("detach", "--cgroup", sb.cg)
            check(r.returncode == 0, "detach: %r" % r.stderr)
            sb.attached = False
            time.sleep(0.2)
            with open(c.daemon_log, "rb") as f:
                f.seek(start)
                text = f.read().decode(errors="replace")
            errors = [l for l in text.splitlines() if " error " in l]
            check(not errors, "detach logged errors: %r" % errors)
            check(("is gone already" in text) == gone,
                  "netns %s: the info line %s: %r" % ("gone" if gone else "kept",
                                                      "missing" if gone else "logged",
                                                      text[-600:]))
        finally:
            sb.remove()
