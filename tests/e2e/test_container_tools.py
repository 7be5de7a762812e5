# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Real tools in a container (issue 27, "Done when": the real clients pass
# under run and in a container). The same apt-get, pip, git and npm runs as
# tests/e2e/test_run_tools.py, in a Podman + runc container confined by our
# OCI hook (an annotated policy), each allowed once and refused once (a name
# the policy does not allow: the tool says it cannot resolve it).
#
# The container's root is the host's own tree under an overlay (upper on a
# tmpfs of this test), so it has the host's apt, python3, git and npm, and
# nothing it writes reaches the host. Network: the host's (as the busybox
# container tests), resolv.conf naming 127.0.0.2, which the sandbox's hooks
# redirect to its DNS proxy.

import os

from harness import *  # noqa: F401,F403
from test_containers import oci_need
from test_run_tools import (NPM, RtHttp, rt_git_daemon, rt_apt, rt_apt_repo, rt_need, rt_npm,
                            rt_npm_packument, rt_npm_registry, rt_pip, rt_pip_index,
                            rt_policy)

CT_TIMEOUT_S = 120


def ct_rootfs(c):
    """The host's / under an overlay whose upper layer is a tmpfs of ours
    (an upper on / itself would overlap its lower layer)."""
    if getattr(c, "ct_rootfs", None):
        return c.ct_rootfs
    base = os.path.join(c.work, "ct-root")
    os.makedirs(base, exist_ok=True)
    must(["mount", "-t", "tmpfs", "-o", "size=512m,mode=0755", "ct-" + RAND, base])
    CLEANUP.push("container tools tmpfs", lambda: run(["umount", "-l", base]))
    for d in ("upper", "work", "merged"):
        os.makedirs(os.path.join(base, d))
    merged = os.path.join(base, "merged")
    must(["mount", "-t", "overlay", "ct-" + RAND, "-o",
          "lowerdir=/,upperdir=%s/upper,workdir=%s/work" % (base, base), merged])
    CLEANUP.push("container tools overlay", lambda: run(["umount", "-l", merged]))
    c.ct_rootfs = merged
    return merged


CT_PROBE = ("/usr/bin/python3 -c 'import socket, sys; s = socket.socket(); s.settimeout(2); "
            "print(\"denied-probe\", s.connect_ex((\"127.0.0.1\", int(sys.argv[1]))))' %d")


def ct_run(c, pol, script):
    """sh -c script in a container confined by pol: (exit status, output).
    HOME and TMPDIR are the container's own. After the tool, a connect to a
    port no policy names proves the container was confined (EPERM, 1): a
    refused name alone proves nothing, the resolver it names only exists
    in a sandbox."""
    env = oci_need(c)
    if not getattr(c, "ct_denied", None):
        c.ct_denied = c.tcp("ct-denied")
    script = "(%s); rc=$?; %s; exit $rc" % (script, CT_PROBE % c.ct_denied.port)
    r = env.run("mkdir -p /tmp/ct-home && cd /tmp/ct-home && " + script, policy=pol,
                rootfs=ct_rootfs(c), timeout=CT_TIMEOUT_S,
                extra=["--dns", "127.0.0.2", "--tmpfs", "/tmp:rw,notmpcopyup", "--env", "HOME=/tmp/ct-home",
                       "--env", "TMPDIR=/tmp"])
    check("denied-probe 1\n" in r.stdout, "the container was not confined (a connect to an "
          "unlisted port: %r)" % [l for l in r.stdout.splitlines() if "denied-probe" in l])
    check(c.ct_denied.accepted == 0, "the unlisted port accepted a connection")
    return r.returncode, r.stdout + r.stderr


@test
def container_tools_apt_get_download(c):
    need_dnsmasq(c)
    rt_need("apt-get", "dpkg-scanpackages", "dpkg-deb")
    srv = RtHttp(rt_apt_repo(c))
    pol = rt_policy(c, srv.port)
    rc, out = ct_run(c, pol, rt_apt("http://127.0.0.1:%d/" % srv.port))
    check(rc == 0 and "egr-hello_1.0_all.deb" in out, "apt-get download in a container: %d %r" %
          (rc, out[-600:]))
    before = srv.requests
    rc, out = ct_run(c, pol, rt_apt("http://mirror-denied.test:%d/" % srv.port))
    check(rc != 0 and "mirror-denied.test" in out and "egr-hello_1.0_all.deb" not in out,
          "apt-get from a refused mirror name in a container: %d %r" % (rc, out[-600:]))
    check(srv.requests == before, "the refused mirror was reached")


@test
def container_tools_pip_download(c):
    need_dnsmasq(c)
    srv = RtHttp(rt_pip_index(c))
    pol = rt_policy(c, srv.port)
    rc, out = ct_run(c, pol, rt_pip("http://127.0.0.1:%d/simple/" % srv.port))
    check(rc == 0 and "egr_hello-1.0-py3-none-any.whl" in out,
          "pip download in a container: %d %r" % (rc, out[-600:]))
    rc, out = ct_run(c, pol, rt_pip("http://pypi-denied.test:%d/simple/" % srv.port))
    check(rc != 0 and "egr_hello-1.0-py3-none-any.whl" not in out,
          "pip download from a refused index name in a container: %d %r" % (rc, out[-600:]))


@test
def container_tools_git_clone_and_npm_pack(c):
    need_dnsmasq(c)
    rt_need(NPM)
    port = rt_git_daemon(c, "ct-git", "egressd-ct-commit")
    pol = rt_policy(c, port)
    rc, out = ct_run(c, pol, "git clone -q git://127.0.0.1:%d/repo.git r && git -C r log "
                     "--format=%%s" % port)
    check(rc == 0 and "egressd-ct-commit" in out, "git clone in a container: %d %r" %
          (rc, out[-600:]))
    rc, out = ct_run(c, pol, "git clone -q git://git-denied.test:%d/repo.git r" % port)
    check(rc != 0 and "git-denied.test" in out, "git clone of a refused name in a container: "
          "%d %r" % (rc, out[-600:]))

    root, tgz = rt_npm_registry(c)
    srv = RtHttp(root, json_paths=("/index.html",))
    rt_npm_packument(root, tgz, srv.port)
    pol = rt_policy(c, srv.port)
    rc, out = ct_run(c, pol, rt_npm("http://127.0.0.1:%d/" % srv.port))
    check(rc == 0 and "egr-hello-1.0.0.tgz" in out, "npm pack in a container: %d %r" %
          (rc, out[-600:]))
    rc, out = ct_run(c, pol, rt_npm("http://npm-denied.test:%d/" % srv.port))
    check(rc != 0 and "ENOTFOUND" in out, "npm pack from a refused registry name in a "
          "container: %d %r" % (rc, out[-600:]))
