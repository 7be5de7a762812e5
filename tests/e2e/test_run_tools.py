# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# `egressctl run` that real tools accept (issue 27, item 3; docs/security.md
# "What egressctl run guarantees"): apt-get, pip, git and npm run under
# `run` against servers of this test on loopback (a Debian repository made
# with dpkg-scanpackages, a PEP 503 simple index, a `git daemon`, an npm
# registry-shaped server), each allowed once and refused once (a name the
# policy does not allow: the DNS proxy denies it, so the tool says it
# cannot resolve it). They need what run now gives: a user namespace whose
# ids 0-65535 map to a host range of the run's own (apt drops to _apt, uid
# 42, group nogroup 65534), a private HOME and /tmp, removed at the end.

import hashlib
import http.server
import io
import json
import os
import re
import shutil
import signal
import socket
import socketserver
import subprocess
import tarfile
import tempfile
import threading
import zipfile

from harness import *  # noqa: F401,F403

RT_PY = "/usr/bin/python3"   # one the run's host uid can run (sys.executable may be under /root)
NPM = shutil.which("npm", path="/usr/bin:/usr/local/bin") or "/usr/bin/npm"


def rt_need(*tools):
    for t in tools:
        if not (shutil.which(t) or os.access(t, os.X_OK)):
            raise TestFailure("%s is not installed (tools/install-deps installs it)" % t)


class RtHttp:
    """A threading HTTP server on 127.0.0.1 serving files under root, and
    counting the requests it answered."""

    def __init__(self, root, json_paths=()):
        outer = self
        self.requests = 0

        class H(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **kw):
                super().__init__(*a, directory=root, **kw)

            def send_head(self):
                outer.requests += 1
                return super().send_head()

            def guess_type(self, path):
                if any(path.endswith(p) for p in json_paths):
                    return "application/json"
                return super().guess_type(path)

            def log_message(self, *a):
                pass

        class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.srv = S(("127.0.0.1", 0), H)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        CLEANUP.push("run-tools http server", self.close)

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def rt_run(c, pol, script, timeout=120):
    """sh -c script under `egressctl run`, resolv.conf naming only 127.0.0.2
    (redirected to the sandbox's proxy). (exit status, output)."""
    resolv = os.path.join(c.work, "rt-resolv.conf")
    with open(resolv, "w") as f:
        f.write("nameserver 127.0.0.2\noptions attempts:1\n")
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$1" /etc/resolv.conf && shift && exec "$@"', "sh", resolv,
            c.egressctl, "--socket", c.sock, "run", "--policy", pol, "--",
            "/bin/sh", "-c", "cd \"$HOME\" && " + script]
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=timeout)
    log("run %s -> %d %r" % (script[:120], r.returncode, r.stdout[-800:]))
    return r.returncode, r.stdout


def rt_policy(c, port):
    return c.policy(["tcp/127.0.0.1:%d" % port])


# --- apt-get ------------------------------------------------------------------------


def rt_apt_repo(c):
    """A trusted flat repository with one package, egr-hello."""
    repo = os.path.join(c.work, "rt-apt")
    pkg = os.path.join(c.work, "rt-apt-pkg")
    os.makedirs(os.path.join(pkg, "DEBIAN"), exist_ok=True)
    os.makedirs(os.path.join(pkg, "usr/share/egr-hello"), exist_ok=True)
    os.makedirs(repo, exist_ok=True)
    with open(os.path.join(pkg, "DEBIAN/control"), "w") as f:
        f.write("Package: egr-hello\nVersion: 1.0\nArchitecture: all\n"
                "Maintainer: e2e <e2e@example.org>\nDescription: egressd e2e package\n")
    with open(os.path.join(pkg, "usr/share/egr-hello/hello"), "w") as f:
        f.write("hello\n")
    must(["dpkg-deb", "--root-owner-group", "-b", pkg, os.path.join(repo, "egr-hello_1.0_all.deb")])
    r = subprocess.run(["dpkg-scanpackages", "-m", "."], cwd=repo, stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, check=True)
    with open(os.path.join(repo, "Packages"), "wb") as f:
        f.write(r.stdout)
    return repo


def rt_apt(url):
    # Lists and caches of its own (the host's are root's), in a directory
    # _apt can reach (HOME is 0700, as root's is): apt-get update fetches as
    # _apt into lists/partial, which it chowns to it; download writes as
    # _apt into the working directory.
    return ("mkdir -m 0777 \"$TMPDIR/apt\" && cd \"$TMPDIR/apt\" && "
            "printf 'deb [trusted=yes] %s ./\\n' > sources.list && "
            "A=\"-o Dir::Etc::sourcelist=$PWD/sources.list -o Dir::Etc::sourceparts=- "
            "-o Dir::State::Lists=$PWD/lists -o Dir::Cache=$PWD/cache "
            "-o Debug::NoLocking=1 -o Acquire::Retries=0\" && "
            "mkdir -p lists/partial cache/archives/partial && "
            "apt-get $A update && apt-get $A download egr-hello && ls *.deb" % url)


@test
def run_tools_apt_get_download(c):
    """apt-get update and download under run from a local mirror: apt drops
    to _apt (setgroups 65534, setresuid 42), which failed with one id in
    the user namespace ("setgroups 65534 failed ... Method http has died").
    Refused: the same with a mirror name the policy does not allow."""
    need_dnsmasq(c)
    rt_need("apt-get", "dpkg-scanpackages", "dpkg-deb")
    srv = RtHttp(rt_apt_repo(c))
    pol = rt_policy(c, srv.port)
    rc, out = rt_run(c, pol, rt_apt("http://127.0.0.1:%d/" % srv.port))
    check(rc == 0 and "egr-hello_1.0_all.deb" in out, "apt-get download under run: %d %r" %
          (rc, out[-600:]))
    check("setgroups" not in out and "seteuid" not in out and "died" not in out and
          "unsandboxed" not in out, "apt could not drop to _apt under run: %r" % out[-600:])
    before = srv.requests
    rc, out = rt_run(c, pol, rt_apt("http://mirror-denied.test:%d/" % srv.port))
    check(rc != 0 and "mirror-denied.test" in out and "egr-hello_1.0_all.deb" not in out,
          "apt-get from a refused mirror name: %d %r" % (rc, out[-600:]))
    check(srv.requests == before, "the refused mirror was reached")


# --- pip ----------------------------------------------------------------------------


def rt_pip_index(c):
    root = os.path.join(c.work, "rt-pip")
    os.makedirs(os.path.join(root, "simple/egr-hello"), exist_ok=True)
    whl = "egr_hello-1.0-py3-none-any.whl"
    buf = io.BytesIO()
    files = {"egr_hello/__init__.py": b"",
             "egr_hello-1.0.dist-info/METADATA":
                 b"Metadata-Version: 2.1\nName: egr-hello\nVersion: 1.0\n",
             "egr_hello-1.0.dist-info/WHEEL":
                 b"Wheel-Version: 1.0\nGenerator: e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    with zipfile.ZipFile(buf, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
        z.writestr("egr_hello-1.0.dist-info/RECORD",
                   "".join("%s,,\n" % n for n in files) + "egr_hello-1.0.dist-info/RECORD,,\n")
    data = buf.getvalue()
    with open(os.path.join(root, "simple/egr-hello", whl), "wb") as f:
        f.write(data)
    with open(os.path.join(root, "simple/egr-hello/index.html"), "w") as f:
        f.write('<html><body><a href="%s#sha256=%s">%s</a></body></html>\n' %
                (whl, hashlib.sha256(data).hexdigest(), whl))
    return root


def rt_pip(url):
    return ("%s -m pip download --no-deps --disable-pip-version-check --retries 0 "
            "--timeout 5 --index-url %s -d dl egr-hello && ls dl" % (RT_PY, url))


@test
def run_tools_pip_download(c):
    """pip download under run from a local simple index (its cache in the
    private HOME). Refused: an index name the policy does not allow."""
    need_dnsmasq(c)
    srv = RtHttp(rt_pip_index(c))
    pol = rt_policy(c, srv.port)
    rc, out = rt_run(c, pol, rt_pip("http://127.0.0.1:%d/simple/" % srv.port))
    check(rc == 0 and "egr_hello-1.0-py3-none-any.whl" in out.split("\n")[-2],
          "pip download under run: %d %r" % (rc, out[-600:]))
    rc, out = rt_run(c, pol, rt_pip("http://pypi-denied.test:%d/simple/" % srv.port))
    check(rc != 0 and "egr_hello-1.0-py3-none-any.whl" not in out,
          "pip download from a refused index name: %d %r" % (rc, out[-600:]))


# --- git ----------------------------------------------------------------------------


def rt_git_daemon(c, name, subject):
    """A bare repository with one commit (subject) served by `git daemon`
    on 127.0.0.1; its port."""
    rt_need("git")
    base = os.path.join(c.work, name)
    src = os.path.join(base, "src")
    os.makedirs(src, exist_ok=True)
    env = dict(os.environ, GIT_AUTHOR_NAME="e2e", GIT_AUTHOR_EMAIL="e2e@example.org",
               GIT_COMMITTER_NAME="e2e", GIT_COMMITTER_EMAIL="e2e@example.org")
    for argv in (["git", "init", "-q", src], ["git", "-C", src, "commit", "-q", "--allow-empty",
                                              "-m", subject],
                 ["git", "clone", "-q", "--bare", src, os.path.join(base, "repo.git")]):
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    port = free_tcp_port()
    d = subprocess.Popen(["git", "daemon", "--reuseaddr", "--export-all", "--base-path=" + base,
                          "--listen=127.0.0.1", "--port=%d" % port, base],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)

    def stop():
        # `git daemon` runs git-daemon as its child: killing git alone left
        # git-daemon behind, re-parented to init, after every run.
        try:
            os.killpg(d.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        d.wait(5)
    CLEANUP.push("git daemon", stop)

    def up():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            return d.poll() is not None
    check(wait_until(up, 10) and d.poll() is None, "git daemon did not start")
    return port


@test
def run_tools_git_clone(c):
    """git clone under run from a local `git daemon`. Refused: a repository
    name the policy does not allow."""
    need_dnsmasq(c)
    port = rt_git_daemon(c, "rt-git", "egressd-e2e-commit")
    pol = rt_policy(c, port)
    rc, out = rt_run(c, pol, "git clone -q git://127.0.0.1:%d/repo.git r && git -C r log "
                     "--format=%%s" % port)
    check(rc == 0 and "egressd-e2e-commit" in out, "git clone under run: %d %r" % (rc, out[-600:]))
    rc, out = rt_run(c, pol, "git clone -q git://git-denied.test:%d/repo.git r" % port)
    check(rc != 0 and "git-denied.test" in out, "git clone of a refused name: %d %r" %
          (rc, out[-600:]))


# --- npm ----------------------------------------------------------------------------


def rt_npm_registry(c):
    """A registry as npm sees one: GET /egr-hello (the packument) and the
    tarball it names, with the tarball's sha512 integrity."""
    root = os.path.join(c.work, "rt-npm")
    os.makedirs(os.path.join(root, "egr-hello/-"), exist_ok=True)
    buf = io.BytesIO()
    pj = json.dumps({"name": "egr-hello", "version": "1.0.0"}).encode()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        ti = tarfile.TarInfo("package/package.json")
        ti.size = len(pj)
        t.addfile(ti, io.BytesIO(pj))
    tgz = buf.getvalue()
    with open(os.path.join(root, "egr-hello/-/egr-hello-1.0.0.tgz"), "wb") as f:
        f.write(tgz)
    return root, tgz


def rt_npm_packument(root, tgz, port):
    import base64
    doc = {"name": "egr-hello", "dist-tags": {"latest": "1.0.0"},
           "versions": {"1.0.0": {"name": "egr-hello", "version": "1.0.0", "dist": {
               "tarball": "http://127.0.0.1:%d/egr-hello/-/egr-hello-1.0.0.tgz" % port,
               "shasum": hashlib.sha1(tgz).hexdigest(),
               "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()}}}}
    os.makedirs(os.path.join(root, "egr-hello"), exist_ok=True)
    with open(os.path.join(root, "egr-hello", "index.html"), "w") as f:
        json.dump(doc, f)


def rt_npm(url):
    # npm writes its cache and logs under HOME (before: root's /root/.npm).
    return ("%s pack egr-hello --registry %s --fetch-retries 0 --fetch-timeout 5000 "
            "--no-update-notifier --no-audit --no-fund && ls *.tgz" % (NPM, url))


@test
def run_tools_npm_pack(c):
    """npm pack under run from a registry-shaped server (its cache and logs
    in the private HOME: without one npm failed on /root/.npm/_logs).
    Refused: a registry name the policy does not allow (ENOTFOUND)."""
    need_dnsmasq(c)
    rt_need(NPM)
    root, tgz = rt_npm_registry(c)
    srv = RtHttp(root, json_paths=("/index.html",))
    rt_npm_packument(root, tgz, srv.port)
    pol = rt_policy(c, srv.port)
    rc, out = rt_run(c, pol, rt_npm("http://127.0.0.1:%d/" % srv.port))
    check(rc == 0 and "egr-hello-1.0.0.tgz" in out, "npm pack under run: %d %r" %
          (rc, out[-600:]))
    rc, out = rt_run(c, pol, rt_npm("http://npm-denied.test:%d/" % srv.port))
    check(rc != 0 and "ENOTFOUND" in out, "npm pack from a refused registry name: %d %r" %
          (rc, out[-600:]))


@test
def run_private_home_and_ids_are_the_runs_own(c):
    """What run gives the command, checked from inside and after: uid 0 in
    a namespace whose ids 0-65535 are a host range of its own (a uid and
    gid it may switch to, setgroups allowed), no two concurrent runs on one
    range, HOME and TMPDIR writable and private, gone when it ends; an exec
    that fails names the host uid. Twin: --map-root-to keeps its one id
    and no capability."""
    a = c.tcp("rt-ids")
    pol = c.policy(["127.0.0.1:%d" % a.port])
    left = "/var/tmp/%s-rt-left" % RUN_ID
    script = ("cat /proc/self/uid_map; echo home=$HOME tmp=$TMPDIR; "
              "touch $HOME/f $TMPDIR/f && mktemp %s.XXXXXX && echo wrote; " % left +
              "%s -c 'import os; os.setgroups([65534]); os.setresgid(65534,65534,65534); "
              "os.setresuid(42,42,42); print(\"dropped\", os.getuid(), os.getgid())'; "
              "grep CapEff /proc/self/status; sleep 1" % RT_PY)
    procs = [subprocess.Popen([c.egressctl, "--socket", c.sock, "run", "--policy", pol, "--",
                               "/bin/sh", "-c", script], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    log("runs: %r" % outs)
    bases, homes = [], []
    for p, out in zip(procs, outs):
        words = out.split()
        m = re.search(r"no user namespace here .* host uid (\d+) gid (\d+)", out)
        if m:
            # A chroot (the kernel gives it no user namespace): the command
            # is its range's first id on the host, without a capability.
            check(p.returncode == 0 and int(m.group(1)) % 65536 == 0,
                  "run without a user namespace: %r" % out)
            bases.append(int(m.group(1)))
        else:
            check(p.returncode == 0 and words[:1] == ["0"] and words[2] == "65536",
                  "run's uid_map: %r" % out)
            bases.append(int(words[1]))
        home = [w for w in words if w.startswith("home=")][0][5:]
        homes.append(home)
        check("tmp=%s/tmp" % os.path.dirname(home) in out and "wrote" in out and
              (m or "dropped 42 65534" in out),
              "inside run: no private TMPDIR or no id change: %r" % out)
        caps = "0000000000000000" if m else "00000000000000cb"
        check(caps in out, "run's uid 0 capabilities: %r (want %s: CHOWN, DAC_OVERRIDE, "
              "FOWNER, SETGID, SETUID only in its own namespace, none without one)" %
              (out, caps))
    check(all(0x70000000 <= b < 0x7FFE0000 and b % 65536 == 0 for b in bases),
          "host ranges outside egressctl's block: %r" % bases)
    check(bases[0] != bases[1], "two concurrent runs got the same host range %r" % bases)
    for h in homes:
        check(not os.path.exists(os.path.dirname(h)), "the private directory %s outlived "
              "the run" % os.path.dirname(h))
    stale = [n for n in os.listdir("/var/tmp") if n.startswith(os.path.basename(left))]
    check(not stale, "files a run left in /var/tmp outlived it: %r" % stale)
    # (c.work is the control socket's directory: run covers it.)
    closed = tempfile.mkdtemp(prefix=RUN_ID + ".rt-closed.", dir="/var/tmp")
    CLEANUP.push("closed dir", shutil.rmtree, closed, True)
    shutil.copy("/bin/true", os.path.join(closed, "t"))
    os.chmod(closed, 0o700)
    r = run([c.egressctl, "--socket", c.sock, "run", "--policy", pol, "--",
             os.path.join(closed, "t")])
    check(r.returncode == 126 and "runs as host uid" in r.stderr,
          "an exec refused to the run's host uid: %d %r" % (r.returncode, r.stderr))
    r = run([c.egressctl, "--socket", c.sock, "run", "--policy", pol, "--map-root-to",
             "65534:65534", "--", "/bin/sh", "-c", "cat /proc/self/uid_map; grep CapEff "
             "/proc/self/status"])
    mapped = (r.stdout.split()[:3] == ["0", "65534", "1"] or
              "no user namespace here" in r.stderr and "host uid 65534 gid 65534" in r.stderr)
    check(r.returncode == 0 and mapped and "0000000000000000" in r.stdout,
          "twin --map-root-to: %d %r %r" % (r.returncode, r.stdout, r.stderr))
