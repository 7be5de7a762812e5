# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Issue 11, operating egressd: the config file and --check-config, the
# sd_notify protocol (READY=1, STATUS=, WATCHDOG=1, STOPPING=1) on a test
# NOTIFY_SOCKET, journald priorities, SIGHUP reload, `egressctl status` as a
# health probe, `make install` and the unit's systemd-analyze score.
#
# The daemon tests start egressd instances of their own (own socket, state
# and bpffs dirs, the run's dnsmasq as --dns-upstream, metrics off unless
# the test needs them) so that they can restart and tamper with them without
# touching the suite's egressd.
#
# Run by run.py (harness.runner).

import json
import os
import shutil
import signal
import socket
import subprocess
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


# __file__ is tests/e2e/test_ops.py: the tree is two levels up.
OPS_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPS_SEQ = [0]


class OpsDaemon:
    """An egressd of the test's own; stop() kills it and removes its pins."""

    def __init__(self, c, tag):
        OPS_SEQ[0] += 1
        self.c = c
        self.tag = "%s%d" % (tag, OPS_SEQ[0])
        self.dir = os.path.join(c.work, "ops-" + self.tag)
        os.makedirs(self.dir)
        self.sock = os.path.join(self.dir, "egressd.sock")
        self.state = os.path.join(self.dir, "state")
        self.bpffs = "/sys/fs/bpf/%s-ops-%s" % (RUN_ID, self.tag)
        self.log = os.path.join(self.dir, "egressd.log")
        self.proc = None
        self.logf = None
        CLEANUP.push("ops bpffs " + self.tag, shutil.rmtree, self.bpffs, True)
        CLEANUP.push("ops egressd " + self.tag, self.stop)

    def base_args(self):
        return [self.c.egressd, "--socket", self.sock, "--bpffs-dir", self.bpffs,
                "--state-dir", self.state, "--no-syslog"] + list(self.c.dns_args)

    def start(self, *extra, env=None, metrics="off", wait=True):
        argv = self.base_args() + (["--metrics-addr", metrics] if metrics else []) + list(extra)
        self.logf = open(self.log, "ab")
        e = dict(os.environ)
        for k in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM"):
            e.pop(k, None)
        e.update(env or {})
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.logf,
                                     stderr=self.logf, env=e)
        log("ops egressd %s pid %d: %s" % (self.tag, self.proc.pid, " ".join(argv[1:])))
        if wait and not wait_until(lambda: self.proc.poll() is not None or
                                   self.status()[0] in (0, 5), DAEMON_READY_S, 0.1):
            raise TestFailure("egressd %s did not answer `status`:\n%s" % (self.tag, self.tail()))
        if wait:
            check(self.proc.poll() is None, "egressd %s exited with %s at start:\n%s" %
                  (self.tag, self.proc.returncode, self.tail()))
        return self

    def ctl(self, *args):
        return run([self.c.egressctl, "--socket", self.sock] + list(args), timeout=CTL_TIMEOUT_S)

    def status(self):
        """(exit status, JSON or None)"""
        try:
            r = self.ctl("status", "--json")
        except subprocess.TimeoutExpired:
            return (None, None)
        try:
            return (r.returncode, json.loads(r.stdout))
        except ValueError:
            return (r.returncode, None)

    def text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def tail(self, n=40):
        return "\n".join("    | " + l for l in self.text().splitlines()[-n:])

    def wait_log(self, needle, since=0, timeout=5):
        return wait_until(lambda: needle in self.text()[since:], timeout, 0.05)

    def signal(self, sig):
        os.kill(self.proc.pid, sig)

    def terminate(self):
        """SIGTERM, as systemd stops it: the pins stay."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.logf:
            self.logf.close()
            self.logf = None

    def stop(self):
        self.terminate()
        shutil.rmtree(self.bpffs, True)


class NotifySocket:
    """The service manager's end: an AF_UNIX datagram socket, at a path or
    abstract ("@name")."""

    def __init__(self, path=None, abstract=None):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            self.s.bind("\0" + abstract)
            self.env = "@" + abstract
        else:
            self.s.bind(path)
            self.env = path
        self.msgs = []   # (monotonic time, {key: value}, raw)

    def drain(self, timeout):
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            self.s.settimeout(left)
            try:
                raw = self.s.recv(4096).decode()
            except socket.timeout:
                return
            kv = dict(l.split("=", 1) for l in raw.splitlines() if "=" in l)
            self.msgs.append((time.monotonic(), kv, raw))

    def wait_for(self, key, value=None, timeout=DAEMON_READY_S):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for m in self.msgs:
                if key in m[1] and (value is None or m[1][key] == value):
                    return m
            self.drain(0.1)
        return None

    def count(self, key):
        return len([m for m in self.msgs if key in m[1]])

    def close(self):
        self.s.close()


def ops_find_dir(root, name):
    """The directory called name under root: <bpffs-dir>/maps, or below a
    version directory (<bpffs-dir>/v<N>/maps) where pins are versioned."""
    for d, subdirs, _ in os.walk(root):
        if name in subdirs:
            return os.path.join(d, name)
    raise TestFailure("no %s/ under %s: %r" % (name, root, list(os.walk(root))[:5]))


def ops_cgroup(c, name):
    cg = c.mkcgroup(name)
    CLEANUP.push("ops cgroup", cgroup_remove_tree, cg)
    return cg


# --- --config and --check-config ---------------------------------------------------


def ops_write(c, name, text):
    path = os.path.join(c.work, "ops-%s.json" % name)
    with open(path, "w") as f:
        f.write(text if isinstance(text, str) else json.dumps(text))
    return path


@test
def ops_check_config(c):
    good = ops_write(c, "good", {
        "log-level": "debug", "dns-upstream": ["127.0.0.1:53", "[::1]:5353"],
        "no-syslog": True, "no-harden": False, "alert-dedup": 30,
        "dns-exfil-max-entropy": 3.5, "metrics-addr": "off", "group": "root"})
    r = run([c.egressd, "--config", good, "--check-config"])
    check(r.returncode == 0 and "configuration OK" in r.stdout,
          "a good config: exit %d: %s" % (r.returncode, r.stdout + r.stderr))
    # Flags alone, and a config file with flags.
    r = run([c.egressd, "--check-config", "--dns-min-ttl", "7"])
    check(r.returncode == 0, "flags only: exit %d: %s" % (r.returncode, r.stderr))
    r = run([c.egressd, "--config", good, "--check-config", "--log-level", "bogus"])
    check(r.returncode == 2 and "--log-level" in r.stderr and "bogus" in r.stderr,
          "a bad flag beside a good file: exit %d: %s" % (r.returncode, r.stderr))
    bad = [
        ({"log-levl": "debug"}, 'unknown key "log-levl"'),
        ({"dns-min-ttl": "abc"}, 'key "dns-min-ttl": expected a whole number'),
        ({"dns-min-ttl": -1}, 'key "dns-min-ttl"'),
        ({"alert-interval": 0}, 'key "alert-interval"'),
        ({"no-harden": 1}, 'key "no-harden": expected true or false'),
        ({"log-level": ["debug"]}, 'key "log-level": expected a string or a number'),
        ({"dns-upstream": ["127.0.0.1", {"x": 1}]}, 'key "dns-upstream"[1]'),
        ({"dns-upstream": "not an address"}, 'key "dns-upstream": expected ADDR'),
        ({"metrics-addr": "localhost"}, 'key "metrics-addr"'),
        ({"group": "no-such-group-" + RAND}, 'key "group": no group named'),
        ({"config": "/etc/other.json"}, 'command-line only key "config"'),
        ({"check-config": True}, 'command-line only key "check-config"'),
        ({"log-level": None}, 'key "log-level"'),
        ('{"log-level": "info", "log-level": "debug"}', "duplicate"),
        ('{"log-level": "info"', "line 1"),
        ('["log-level"]', "expected a JSON object"),
        ('{"socket": "a\\u0000b"}', "not allowed"),
    ]
    for i, (doc, want) in enumerate(bad):
        path = ops_write(c, "bad%d" % i, doc)
        r = run([c.egressd, "--config", path, "--check-config"])
        check(r.returncode == 2 and want in r.stderr and path in r.stderr,
              "config %r: want exit 2 and %r, got exit %d: %s" %
              (doc, want, r.returncode, (r.stderr + r.stdout).strip()))
    # An abbreviated --config would otherwise be parsed and the file ignored.
    for argv, want in ((["--conf", good], "spell it out"),
                       (["--config", good, "--config=" + good], "more than once")):
        r = run([c.egressd] + argv + ["--check-config"])
        check(r.returncode == 2 and want in r.stderr, "%r: exit %d: %s" %
              (argv, r.returncode, r.stderr))
    r = run([c.egressd, "--config", os.path.join(c.work, "no-such.json"), "--check-config"])
    check(r.returncode == 2 and "no-such.json" in r.stderr,
          "a missing config file: exit %d: %s" % (r.returncode, r.stderr))
    # A bad file stops a real start too, before anything is loaded.
    d = OpsDaemon(c, "badcfg")
    d.start("--config", ops_write(c, "badstart", {"alerts-fil": "x"}), wait=False)
    try:
        d.proc.wait(10)
    finally:
        d.stop()
    check(d.proc.returncode == 2 and 'unknown key "alerts-fil"' in d.text(),
          "egressd with a bad config: exit %s: %s" % (d.proc.returncode, d.tail()))
    check(not os.path.exists(d.bpffs), "egressd with a bad config created its bpffs dir")


# --- sd_notify, watchdog, journald priorities ---------------------------------------


@test
def ops_notify_ready_after_adoption_and_watchdog(c):
    d = OpsDaemon(c, "notify")
    t = c.tcp("ops-notify")
    cg = ops_cgroup(c, "ops-notify")
    pol = c.policy(["127.0.0.1:%d" % t.port])
    ns = NotifySocket(abstract="%s-notify-%d" % (RUN_ID, OPS_SEQ[0]))
    ns2 = NotifySocket(path=os.path.join(d.dir, "notify.sock"))
    try:
        # A first egressd attaches a sandbox; the second must adopt it
        # before it says READY=1.
        d.start()
        r = d.ctl("attach", "--cgroup", cg, "--policy", pol)
        check(r.returncode == 0, "attach: %s" % (r.stderr + r.stdout))
        d.terminate()
        d.start(env={"NOTIFY_SOCKET": ns.env, "WATCHDOG_USEC": "200000"}, wait=False)
        ready = ns.wait_for("READY", "1")
        check(ready is not None, "no READY=1 on the abstract socket; got %r:\n%s" %
              ([m[2] for m in ns.msgs], d.tail()))
        # At READY=1 the control socket listens and the pins are adopted.
        rc, st = d.status()
        check(rc == 0 and st and st.get("sandboxes") == 1,
              "right after READY=1: status exit %s, %r" % (rc, st))
        before = [m for m in ns.msgs if m[0] <= ready[0]]
        check(any("STATUS" in m[1] and "adopting" in m[1]["STATUS"] for m in before),
              "no STATUS= line about adoption before READY=1: %r" % [m[2] for m in before])
        check("STATUS" in ready[1] and "1 sandbox" in ready[1]["STATUS"],
              "READY=1 without a STATUS= naming the sandboxes: %r" % ready[2])
        check(not any("WATCHDOG" in m[1] for m in before),
              "WATCHDOG=1 before READY=1: %r" % [m[2] for m in before])
        # Every half of WATCHDOG_USEC (100 ms) from the loop: about 10 a second.
        n0 = ns.count("WATCHDOG")
        ns.drain(1.0)
        n = ns.count("WATCHDOG") - n0
        check(5 <= n <= 15, "%d WATCHDOG=1 in 1 s with WATCHDOG_USEC=200000" % n)
        # While the loop cannot run, no pings (systemd would restart it).
        d.signal(signal.SIGSTOP)
        try:
            ns.drain(0.2)
            n1 = ns.count("WATCHDOG")
            ns.drain(0.6)
            stalled = ns.count("WATCHDOG") - n1
        finally:
            d.signal(signal.SIGCONT)
        check(stalled == 0, "%d WATCHDOG=1 while egressd was stopped" % stalled)
        d.terminate()
        ns.drain(0.3)
        check(ns.wait_for("STOPPING", "1", timeout=1), "no STOPPING=1 on SIGTERM: %r" %
              [m[2] for m in ns.msgs[-5:]])
        # The sanity twin: a path socket, no watchdog asked (or one meant
        # for another pid): READY=1 but never WATCHDOG=1.
        d.start(env={"NOTIFY_SOCKET": ns2.env, "WATCHDOG_USEC": "200000",
                     "WATCHDOG_PID": "1"}, wait=False)
        check(ns2.wait_for("READY", "1"), "no READY=1 on the path socket:\n%s" % d.tail())
        ns2.drain(0.6)
        check(ns2.count("WATCHDOG") == 0, "WATCHDOG=1 although WATCHDOG_PID names pid 1")
        r = d.ctl("detach", "--cgroup", cg)
        check(r.returncode == 0, "detach: %s" % (r.stderr + r.stdout))
    finally:
        d.stop()
        ns.close()
        ns2.close()


def ops_log_lines(text):
    """egressd's own lines: not the sanitizer's ("==PID==...", ASan builds,
    whose leak check cannot run under egressd's seccomp filter at exit)."""
    return [l for l in text.splitlines() if l.strip() and not l.startswith("==")]


@test
def ops_journald_priorities(c):
    d = OpsDaemon(c, "journal")
    try:
        # JOURNAL_STREAM names stderr (the log file here): "<N>" prefixes.
        open(d.log, "ab").close()
        st = os.stat(d.log)
        d.start("--log-level", "debug", env={"JOURNAL_STREAM": "%d:%d" % (st.st_dev, st.st_ino)})
        d.ctl("status")
        check(d.wait_log("op status"), "no debug line for a status request:\n%s" % d.tail())
        d.terminate()
        lines = ops_log_lines(d.text())
        prio = {"error": "<3>", "warn": "<4>", "info": "<6>", "debug": "<7>"}
        seen = set()
        for l in lines:
            m = l.split(" ", 1)[0]
            check(m[:3] in prio.values() and prio.get(m[3:]) == m[:3],
                  "a line without its journald priority: %r" % l)
            seen.add(m)
        check("<6>info" in seen and "<7>debug" in seen, "priorities seen: %r" % seen)
        # Sanity twin: JOURNAL_STREAM of another file: timestamps, no prefix.
        other = os.stat(c.daemon_log)
        mark = len(d.text())
        d.start("--log-level", "debug", env={"JOURNAL_STREAM": "%d:%d" % (other.st_dev,
                                                                          other.st_ino)})
        d.terminate()
        new = ops_log_lines(d.text()[mark:])
        check(new and all(l[:1].isdigit() for l in new),
              "lines with a foreign JOURNAL_STREAM: %r" % new[:3])
        # A bad configuration is an error to the journal too (ExecStartPre=).
        bad = ops_write(c, "journal-bad", {"log-levl": "x"})
        errpath = os.path.join(d.dir, "check.err")
        with open(errpath, "w") as f:
            st = os.fstat(f.fileno())
            r = subprocess.run([c.egressd, "--config", bad, "--check-config"], stderr=f,
                               env=dict(os.environ, JOURNAL_STREAM="%d:%d" % (st.st_dev,
                                                                              st.st_ino)),
                               timeout=CTL_TIMEOUT_S)
        with open(errpath) as f:
            err = f.read()
        check(r.returncode == 2 and err.startswith("<3>egressd: config ") and "log-levl" in err,
              "--check-config under the journal: exit %d: %r" % (r.returncode, err))
        # --log-priority-prefix forces them.
        mark = len(d.text())
        d.start("--log-priority-prefix")
        d.terminate()
        new = ops_log_lines(d.text()[mark:])
        check(new and all(l.startswith("<") for l in new), "--log-priority-prefix: %r" % new[:3])
    finally:
        d.stop()


# --- SIGHUP --------------------------------------------------------------------------


@test
def ops_sighup_reload_log_level(c):
    cfg = os.path.join(c.work, "ops-reload.json")

    def write(doc):
        with open(cfg + ".tmp", "w") as f:
            json.dump(doc, f)
        os.rename(cfg + ".tmp", cfg)

    def debug_lines(since):
        return [l for l in d.text()[since:].splitlines() if "op status" in l]

    def hup_and_wait(needle):
        mark = len(d.text())
        d.signal(signal.SIGHUP)
        check(d.wait_log(needle, mark), "after SIGHUP, no %r in the log:\n%s" %
              (needle, d.tail()))
        return mark

    d = OpsDaemon(c, "reload")
    ns = NotifySocket(abstract="%s-reload-%d" % (RUN_ID, OPS_SEQ[0]))
    try:
        write({"log-level": "info", "alert-deny-burst": 100})
        d.start("--config", cfg, env={"NOTIFY_SOCKET": ns.env})
        mark = len(d.text())
        d.ctl("status")
        time.sleep(0.2)
        check(not debug_lines(mark), "debug lines at log-level info: %r" % debug_lines(mark))
        # info -> debug: debug lines appear.
        write({"log-level": "debug", "alert-deny-burst": 100})
        mark = hup_and_wait("reload: applied log-level")
        check(ns.wait_for("RELOADING", "1", timeout=2), "no RELOADING=1: %r" %
              [m[2] for m in ns.msgs])
        d.ctl("status")
        check(d.wait_log("op status", mark), "no debug line after the reload to debug:\n%s" %
              d.tail())
        # A bad file changes nothing: still debug.
        with open(cfg, "w") as f:
            f.write('{"log-level": "info", "log-levle": "x"}')
        mark = hup_and_wait("nothing changed")
        check('unknown key "log-levle"' in d.text()[mark:], "the bad key is not named:\n%s" %
              d.tail())
        d.ctl("status")
        check(d.wait_log("op status", mark), "a bad reload changed the log level")
        # debug -> info, plus options only a restart applies: logged as such,
        # the old values stay (the socket keeps answering where it was).
        # (--socket on the command line wins over the file's: not a change.)
        write({"log-level": "info", "alert-deny-burst": 7, "socket": d.sock + ".new",
               "events-keep": 10, "billing-interval": 5})
        mark = hup_and_wait("only a restart applies them")
        tail = d.text()[mark:]
        check("applied log-level, alert-deny-burst" in tail, "reload did not apply both:\n%s" %
              tail)
        check("events-keep, billing-interval" in tail and "socket" not in tail,
              "restart-only keys not named (or the overridden socket named):\n%s" % tail)
        mark = len(d.text())
        rc, st = d.status()
        check(rc == 0, "the old socket stopped answering after the reload: %s" % rc)
        time.sleep(0.2)
        check(not debug_lines(mark), "debug lines after the reload to info: %r" %
              debug_lines(mark))
        check(not os.path.exists(d.sock + ".new"), "a reload moved the control socket")
        # Command-line flags win over the file, on reload too.
        d.terminate()
        write({"log-level": "debug"})
        d.start("--config", cfg, "--log-level", "info")
        mark = len(d.text())
        d.ctl("status")
        hup_and_wait("reload: ")
        d.ctl("status")
        time.sleep(0.2)
        check(not debug_lines(mark), "the file's log-level beat --log-level: %r" %
              debug_lines(mark))
    finally:
        d.stop()
        ns.close()


# --- egressctl status as a probe -----------------------------------------------------


@test
def ops_status_health_probe(c):
    # Sanity twin: the suite's egressd is healthy and says so.
    r = c.ctl("status", "--json")
    st = json.loads(r.stdout)
    check(r.returncode == 0 and st.get("healthy") is True and st.get("problems") == [],
          "the suite's egressd: exit %d, healthy %r, problems %r" %
          (r.returncode, st.get("healthy"), st.get("problems")))
    r = c.ctl("status")
    check(r.returncode == 0 and "healthy:    yes" in r.stdout, "status text: %s" % r.stdout)
    # Metrics that cannot bind: unhealthy (exit 5), the problem named.
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    d = OpsDaemon(c, "health")
    t = c.tcp("ops-health")
    cg = ops_cgroup(c, "ops-health")
    try:
        d.start(metrics="127.0.0.1:%d" % holder.getsockname()[1])
        rc, st = d.status()
        check(rc == 5 and st and st.get("healthy") is False and
              any("metrics" in p for p in st.get("problems", [])),
              "metrics not bound: exit %s, %r" % (rc, st and st.get("problems")))
        r = d.ctl("status")
        check(r.returncode == 5 and "healthy:    no" in r.stdout and "metrics" in r.stdout,
              "status text when unhealthy: exit %d: %s" % (r.returncode, r.stdout))
        # --live (the liveness probe): it answers, so 0.
        r = d.ctl("status", "--live")
        check(r.returncode == 0, "status --live when unhealthy: exit %d" % r.returncode)
        d.terminate()
        # Metrics off and a sandbox attached: healthy. No per-sandbox deny
        # budget: the flood below must reach the ring, not be suppressed.
        d.start("--events-deny-rate", "0")
        r = d.ctl("attach", "--cgroup", cg, "--policy", c.policy(["127.0.0.1:%d" % t.port]))
        check(r.returncode == 0, "attach: %s" % (r.stderr + r.stdout))
        rc, st = d.status()
        check(rc == 0 and st.get("healthy") is True, "healthy instance: exit %s, %r" %
              (rc, st and st.get("problems")))
        # A hostile sandbox floods denied connects while egressd cannot
        # drain the ring: events are lost, status says so (exit 5), but the
        # liveness probe (--live) still passes, so the tenant cannot get
        # egressd restarted.
        denied = c.tcp("ops-health-denied")
        d.signal(signal.SIGSTOP)
        try:
            r = c.probe(cg, "connect-loop", "127.0.0.1", denied.port, LOST_CONNECTS, timeout=60)
        finally:
            d.signal(signal.SIGCONT)
        check(r.rc == 0 and r.line == "ok 0 %d" % LOST_CONNECTS, "connect-loop: %s" % r)
        got = {}

        def lost_reported():
            got["rc"], got["st"] = d.status()
            return got["rc"] == 5 and any(p.startswith("events:")
                                          for p in got["st"].get("problems", []))
        check(wait_until(lost_reported, 15, 0.2), "after a flood past the ring: exit %s, %r" %
              (got.get("rc"), got.get("st") and got["st"].get("problems")))
        check(got["st"]["counters"]["events_lost"] > 0, "nothing was lost")
        r = d.ctl("status", "--live")
        check(r.returncode == 0, "status --live while events are lost: exit %d" % r.returncode)
        # A hand-removed map pin or link pin: the pin guard (docs/security.md,
        # row 2) pins it again from egressd's own fd at once, so health
        # reports no pin missing for long; status counts the restore.
        maps = ops_find_dir(d.bpffs, "maps")
        victim = sorted(os.listdir(maps))[0]
        os.unlink(os.path.join(maps, victim))
        sid = [s for s in json.loads(d.ctl("list", "--json").stdout)
               if os.path.realpath(s.get("cgroup", "")) == os.path.realpath(cg)][0]["id"]
        ldir = os.path.join(ops_find_dir(d.bpffs, "links"), str(sid))
        lvictim = sorted(os.listdir(ldir))[0]
        os.unlink(os.path.join(ldir, lvictim))

        def pins_back():
            got["rc"], got["st"] = d.status()
            probs = got["st"].get("problems", []) if got["st"] else []
            return (os.path.exists(os.path.join(maps, victim)) and
                    os.path.exists(os.path.join(ldir, lvictim)) and
                    not any(victim in p or "sandbox %d" % sid in p for p in probs))
        check(wait_until(pins_back, 15, 0.2), "removed pins not restored or still reported: %r" %
              (got.get("st") and got["st"].get("problems")))
        check(got["st"].get("pins", {}).get("pins_restored", 0) >= 2,
              "status does not count the restored pins: %r" % got["st"].get("pins"))
        d.ctl("detach", "--cgroup", cg)
        # Not running at all: 3 (unreachable), never 0.
        d.terminate()
        r = d.ctl("status")
        check(r.returncode == 3, "status of a stopped egressd: exit %d" % r.returncode)
        r = d.ctl("status", "--live")
        check(r.returncode == 3, "status --live of a stopped egressd: exit %d" % r.returncode)
    finally:
        d.stop()
        holder.close()


# --- install, man pages, the unit -----------------------------------------------------


@test
def ops_make_install_tree_and_man_pages(c):
    # The default build (make test builds it first), whatever build the suite runs.
    out = os.path.join(OPS_REPO, "build")
    r = run([os.path.join(OPS_REPO, "tests", "install", "check-install"), out], timeout=300,
            cwd=OPS_REPO)
    log(r.stdout.strip())
    check(r.returncode == 0, "tests/install/check-install: exit %d:\n%s" %
          (r.returncode, (r.stdout + r.stderr).strip()))


OPS_EXPOSURE_MAX = 3.6   # systemd 252 offline: 6.4 before issue 11; 3.7 with CAP_KILL (escape guard); 3.6 as User=egressd (issue 23)


@test
def ops_unit_systemd_analyze_security(c):
    unit = os.path.join(c.work, "egressd.service")
    with open(os.path.join(OPS_REPO, "dist", "egressd.service.in")) as f:
        text = f.read()
    text = text.replace("@SBINDIR@", "/usr/sbin").replace("@SYSCONFDIR@", "/etc").replace(
        "@DOCDIR@", "/usr/share/doc/egressd")
    with open(unit, "w") as f:
        f.write(text)
    for want in ("Type=notify", "WatchdogSec=", "ExecReload=", "--check-config"):
        check(want in text, "the unit lacks %s" % want)
    if not shutil.which("systemd-analyze"):
        raise TestFailure("systemd-analyze is missing (Debian package systemd)")
    r = run(["systemd-analyze", "security", "--offline=true", "--no-pager", unit], timeout=60)
    m = [l for l in r.stdout.splitlines() if "Overall exposure level" in l]
    check(m, "systemd-analyze security printed no score: exit %d: %s" %
          (r.returncode, (r.stderr + r.stdout)[-500:]))
    score = float(m[0].split(":")[1].split()[0])
    log("systemd-analyze security: %s" % m[0].strip())
    check(score <= OPS_EXPOSURE_MAX, "exposure %.1f > %.1f: %s" % (score, OPS_EXPOSURE_MAX, m[0]))
