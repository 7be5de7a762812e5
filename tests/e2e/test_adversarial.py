# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""The adversarial suite: paths around the sock_addr hooks (docs/security.md)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

from harness import *  # noqa: F401,F403 (Ctx, Sandbox, check, ...: harness/__init__.py)


@test
def adv_legacy_detach_unprivileged(c):
    a, b = c.tcp("a"), c.tcp("b")
    with c.sandbox(["127.0.0.1:%d" % a.port]) as sb:
        # The prober really is unprivileged: no packet socket for it.
        r = adv_probe_as_nobody(c, sb.cg, "packet-socket")
        check(r.rc == 1 and r.errno == "EPERM", "nobody made a packet socket: %s" % r)
        for t in ADV_DETACH_TYPES:
            r = adv_probe_as_nobody(c, sb.cg, "legacy-detach", sb.cg, t)
            check(r.rc == 1, "BPF_PROG_DETACH %s as uid 65534 succeeded: %s" % (t, r))
            # From outside the sandbox too (its parent cgroup is no protection).
            r = adv_probe_as_nobody(c, None, "legacy-detach", sb.cg, t)
            check(r.rc == 1, "BPF_PROG_DETACH %s as uid 65534 (outside) succeeded: %s" % (t, r))
        # Still enforced, every hook.
        sb.allowed("tcp", "127.0.0.1", a.port)
        sb.denied("tcp", "127.0.0.1", b.port)
        sb.denied("udp-sendto", "127.0.0.1", b.port)
        sb.denied("socket", "inet", "raw", "icmp")
        sb.denied("setsockopt-rthdr", "::1", 9)
        # Twin: the programs are attached and visible (links, not legacy attachments).
        if shutil.which("bpftool"):
            r = run(["bpftool", "cgroup", "show", sb.cg])
            check(r.returncode == 0, "bpftool cgroup show: %s" % r.stderr.strip())
            for prog in ("egr_connect4", "egr_connect6", "egr_sendmsg4", "egr_sendmsg6",
                         "egr_sock_create", "egr_setsockopt", "egr_skb_egress"):
                check(prog[:15] in r.stdout, "bpftool cgroup show %s does not list %s:\n%s" %
                      (sb.cg, prog, r.stdout))


@test
def adv_udplite(c):
    ok_srv, deny_srv = UdpliteServer("127.0.0.1"), UdpliteServer("127.0.0.2")
    CLEANUP.push("udplite server", ok_srv.close)
    CLEANUP.push("udplite server", deny_srv.close)
    # Twin outside: the vector carries traffic.
    for srv in (ok_srv, deny_srv):
        n = srv.received
        c.allowed(None, "udplite-sendto", srv.host, srv.port)
        check(srv.wait_for(n + 1), "UDP-Lite outside a sandbox never arrived at %s" % srv.host)
    with c.sandbox(["127.0.0.1:*"]) as sb:
        n = ok_srv.received
        sb.denied("udplite-sendto", "127.0.0.1", ok_srv.port)   # socket() refused
        sb.denied("socket", "inet6", "dgram", "udplite")
        time.sleep(0.1)
        check(ok_srv.received == n, "a UDP-Lite datagram left a default sandbox")
    # UDP-Lite is not UDP: like other port-less kinds it needs an address allowed
    # on every port (docs/policy.md). No sendmsg hook: only the backstop judges.
    with c.sandbox(["127.0.0.1:*"], sockets=["udplite"]) as sb:
        n = ok_srv.received
        sb.allowed("udplite-sendto", "127.0.0.1", ok_srv.port)
        check(ok_srv.wait_for(n + 1), "allowed UDP-Lite datagram never arrived")
        n = ok_srv.received
        sb.allowed("udplite-connect", "127.0.0.1", ok_srv.port)
        check(ok_srv.wait_for(n + 1), "allowed connected UDP-Lite datagram never arrived")
        # Unconnected: udp_sendmsg runs the sendmsg4 hook (or the backstop drops).
        cnt = adv_counters(c)
        n2 = deny_srv.received
        r = c.probe(sb.cg, "udplite-sendto", "127.0.0.2", deny_srv.port)
        time.sleep(0.2)
        check(deny_srv.received == n2, "UDP-Lite sendto denied 127.0.0.2 arrived (%s)" % r)
        after = adv_counters(c)
        check(any(after.get(k, 0) > cnt.get(k, 0) for k in ("sendmsg_denied", "backstop_dropped")),
              "neither sendmsg_denied nor backstop_dropped counted a denied UDP-Lite datagram")
        # Connected: no pre_connect hook judged the connect, so the backstop
        # must not wave it through as "the address its connect() was judged for".
        before = adv_counter(c, "backstop_dropped")
        r = c.probe(sb.cg, "udplite-connect", "127.0.0.2", deny_srv.port)
        time.sleep(0.2)
        check(deny_srv.received == n2, "connected UDP-Lite to denied 127.0.0.2 arrived (%s): "
              "no hook judges a UDP-Lite connect and the backstop let it through" % r)
        check(adv_counter(c, "backstop_dropped") > before,
              "backstop_dropped did not increase for a connected UDP-Lite datagram (%s)" % r)


@test
def adv_ping_sendto(c):
    # connect() on a ping socket is hooked, sendto() is not: the backstop decides.
    adv_echo_pair(c, "ping", ["icmp"])


@test
def adv_raw_socket(c):
    # No sock_addr hook at all on raw sockets: sock_create, then the backstop.
    adv_echo_pair(c, "raw", ["raw"])
    # A backstop drop means a hook missed something: it raises an alert.
    check(wait_until(lambda: any(a.get("type") == "backstop_drop"
                                 for a in obs_jsonl(os.path.join(c.state, "alerts.jsonl"))), 5),
          "no backstop_drop alert after the backstop dropped a raw packet")


@test
def adv_packet_xdp_vsock_under_run(c):
    pol = c.policy(["127.0.0.1:*"])
    # Twin outside a sandbox, as root: the families exist and work.
    c.allowed(None, "packet-socket")
    c.allowed(None, "xdp-socket")
    for action in ("packet-socket", "xdp-socket", "vsock-socket"):   # socket() only
        r = adv_run_probe(c, pol, action)
        check(r.rc == 1 and r.errno == "EPERM", "egressctl run %s: %s" % (action, r))
    # Even with the family allowed, CAP_NET_RAW is gone from the bounding set.
    r = adv_run_probe(c, c.policy(["127.0.0.1:*"], sockets=["packet"]), "packet-socket")
    check(r.rc == 1 and r.errno == "EPERM", "egressctl run packet-socket, family allowed: %s" % r)
    r = adv_run(c, pol, "/bin/sh", "-c", "grep CapBnd /proc/self/status")
    check(r.returncode == 0, "egressctl run grep: %d %s" % (r.returncode, r.stderr))
    bnd = int(r.stdout.split()[1], 16)
    for cap, name in ((13, "CAP_NET_RAW"), (12, "CAP_NET_ADMIN"), (21, "CAP_SYS_ADMIN"),
                      (39, "CAP_BPF")):
        check(not bnd & (1 << cap), "%s is in the command's bounding set (%s)" %
              (name, r.stdout.strip()))
    # The policy's families reach the filter: netlink (`ip link`) only when named.
    if shutil.which("ip"):
        r = adv_run(c, pol, "ip", "-o", "link", "show", "lo")
        check(r.returncode != 0, "ip link worked under the default filter: %r" % r.stdout)
        r = adv_run(c, c.policy(["127.0.0.1:*"], sockets=["netlink"]), "ip", "-o", "link",
                    "show", "lo")
        check(r.returncode == 0 and "lo" in r.stdout,
              "ip link with allow_sockets netlink: exit %d %r %r" %
              (r.returncode, r.stdout, r.stderr))


@test
def adv_ipv6_rthdr_setsockopt(c):
    u6 = c.udp("u6", "::1")
    c.allowed(None, "setsockopt-rthdr", "::1", u6.port)          # twin: settable outside
    with c.sandbox(["[::1]:*"]) as sb:
        before = adv_counter(c, "setsockopt_denied")
        sb.denied("setsockopt-rthdr", "::1", u6.port)
        check(adv_counter(c, "setsockopt_denied") > before, "setsockopt_denied did not increase")
        n = u6.received
        sb.allowed("udp-sendto", "::1", u6.port)                 # twin in the sandbox
        check(u6.wait_for(n + 1), "plain datagram to the allowed ::1 never arrived")
    r = adv_run_probe(c, c.policy(["[::1]:*"]), "setsockopt-rthdr", "::1", u6.port)
    check(r.rc == 1 and r.errno == "EPERM", "egressctl run setsockopt-rthdr: %s" % r)


@test
def adv_cmsg_rthdr(c):
    # A routing header in a control message: the sendmsg hook judges FINAL, the
    # packet goes to FIRSTHOP. The backstop judges the real L3 destination.
    ns = c.need_netns()
    u6 = c.udp("u6", "::1")
    outside = c.probe(None, "cmsg-rthdr", ns.ns6, "::1", u6.port)
    with c.sandbox(["udp/[::1]:%d" % u6.port]) as sb:
        n = u6.received
        sb.allowed("udp-sendmsg", "::1", u6.port)                # twin: no cmsg, arrives
        check(u6.wait_for(n + 1), "datagram to the allowed final destination never arrived")
        before = adv_counter(c, "backstop_dropped")
        r = c.probe(sb.cg, "cmsg-rthdr", ns.ns6, "::1", u6.port)
        if outside.rc == 0:
            # The kernel takes the header: only the backstop can stop it.
            check(adv_counter(c, "backstop_dropped") > before or r.rc == 1,
                  "a datagram with a routing header to %s left the sandbox: %s" % (ns.ns6, r))
            check(adv_counter(c, "backstop_dropped") > before,
                  "backstop_dropped did not increase: %s" % r)
        else:
            # This kernel refuses cmsg routing headers itself (type 2 needs
            # CONFIG_IPV6_MIP6); the sandbox must not do better than that.
            log("cmsg routing header refused by the kernel outside a sandbox: %s" % outside)
            check(r.rc == 1, "cmsg-rthdr succeeded in a sandbox but not outside: %s" % r)


@test
def adv_ip_options(c):
    u = c.udp("u")
    c.allowed(None, "ip-options", "127.0.0.1", u.port)            # twin: root outside
    with c.sandbox(["127.0.0.1:*"]) as sb:
        before = adv_counter(c, "setsockopt_denied")
        sb.denied("ip-options", "127.0.0.1", u.port)
        check(adv_counter(c, "setsockopt_denied") > before, "setsockopt_denied did not increase")
        sb.allowed("udp-sendto", "127.0.0.1", u.port)
    r = adv_run_probe(c, c.policy(["127.0.0.1:*"]), "ip-options", "127.0.0.1", u.port)
    check(r.rc == 1 and r.errno == "EPERM", "egressctl run ip-options: %s" % r)


@test
def adv_inherited_socket(c):
    a, deny = c.udp("a"), c.udp("inh-deny")
    pol = c.policy(["udp/127.0.0.1:%d" % a.port])
    outside = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)   # created outside
    f = open(os.devnull)
    try:
        fds = (outside.fileno(), f.fileno())
        # Twin: the vector. A socket made outside and handed to a process in the
        # sandbox cgroup keeps its creator's cgroup: nothing of ours judges it.
        with c.sandbox(["udp/127.0.0.1:%d" % a.port]) as sb:
            join = join_cgroup_fn(sb.cg)

            n = deny.received
            r = subprocess.run([sys.executable, "-c", SEND_ON_INHERITED,
                                str(outside.fileno()), str(deny.port)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=PROBE_TIMEOUT_S, preexec_fn=join, pass_fds=fds)
            check(r.returncode == 0 and deny.wait_for(n + 1),
                  "twin: an inherited outside socket could not send from the sandbox "
                  "cgroup (%d %r %r): the test proves nothing" %
                  (r.returncode, r.stdout, r.stderr))
        # netprobe started directly with the fds sees them ...
        p = subprocess.run([c.netprobe, "fds"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=PROBE_TIMEOUT_S, pass_fds=fds)
        check(p.returncode == 1 and "OPENFDS" in p.stdout,
              "twin: netprobe fds did not see passed descriptors: %r %r" % (p.stdout, p.stderr))
        # ... egressctl run passes only 0, 1 and 2.
        r = adv_run(c, pol, c.netprobe, "fds", pass_fds=fds)
        check(r.returncode == 0 and r.stdout.strip() == "ok",
              "egressctl run passed descriptors to the command: exit %d %r %r" %
              (r.returncode, r.stdout, r.stderr))
        n = deny.received
        r = adv_run(c, pol, RUN_PY, "-c", SEND_ON_INHERITED, str(outside.fileno()),
                    str(deny.port), pass_fds=fds)
        time.sleep(0.1)
        check(r.returncode != 0 and deny.received == n,
              "an outside socket reached the command under egressctl run: exit %d %r" %
              (r.returncode, r.stderr))
    finally:
        outside.close()
        f.close()


@test
def adv_io_uring_under_run(c):
    c.allowed(None, "io-uring-setup")                             # twin: works outside
    r = adv_run_probe(c, c.policy(["127.0.0.1:*"]), "io-uring-setup")
    check(r.rc == 1 and r.errno == "EPERM", "egressctl run io-uring-setup: %s" % r)


@test
def adv_mptcp(c):
    a, b = c.tcp("a"), c.tcp("b")
    if c.mptcp_errno is not None:
        raise TestFailure("MPTCP sockets fail outside a sandbox (%s): enable "
                          "net.mptcp.enabled to test this row" % c.mptcp_errno)
    c.allowed(None, "mptcp", "127.0.0.1", b.port)                 # twin outside
    with c.sandbox(["127.0.0.1:%d" % a.port]) as sb:
        sb.denied("mptcp", "127.0.0.1", a.port)                  # socket() refused
    with c.sandbox(["127.0.0.1:%d" % a.port], sockets=["mptcp"]) as sb:
        before = a.accepted
        sb.allowed("mptcp", "127.0.0.1", a.port)
        check(wait_until(lambda: a.accepted > before, 2), "allowed MPTCP never reached the server")
        sb.denied("mptcp", "127.0.0.1", b.port)
        sb.denied("mptcp", "127.0.0.2", a.port)


@test
def adv_status_layers(c):
    r = c.ctl_ok("status", "--json")
    st = json.loads(r.stdout)
    layers = st.get("layers")
    check(isinstance(layers, dict), "`status --json` has no layers object: %r" % r.stdout[:500])
    for k in ("sock_addr", "sock_create", "setsockopt", "skb_backstop", "seccomp",
              "lsm_cgroup"):
        check(isinstance(layers.get(k), bool), "layers.%s is not a boolean: %r" % (k, layers))
    for k in ("sock_addr", "sock_create", "setsockopt", "skb_backstop", "seccomp"):
        check(layers[k] is True, "layer %s is not active: %r" % (k, layers))
    if adv_host_has_lsm_progs() is False:
        check(layers["lsm_cgroup"] is False,
              "lsm_cgroup reported active on a host without lsm programs: %r" % layers)
    for k in ("setsockopt_denied", "backstop_dropped", "inbound_dropped"):
        check(k in st.get("counters", {}), "counters lack %s" % k)
    # The same in /metrics, and the seccomp filter as an OCI profile.
    _, _, body = scrape(c)
    for k, v in layers.items():
        want = 'egressd_layer_active{layer="%s"} %d' % (k, 1 if v else 0)
        check(want in body, "/metrics lacks %r" % want)
    with open(os.path.join(c.state, "oci-seccomp.json")) as f:
        prof = json.load(f)
    check(prof.get("defaultAction") == "SCMP_ACT_ERRNO" and
          any(r.get("names") == ["io_uring_setup"] for r in prof.get("syscalls", [])),
          "oci-seccomp.json: %r" % str(prof)[:300])


@test(needs=("no_lsm_cgroup",))
def adv_trust_strict_needs_lsm_cgroup(c):
    # Where lsm programs load, test_lsm_cgroup's strict test runs instead.
    if adv_host_has_lsm_progs() is not False:
        raise TestFailure("cannot tell whether this host loads lsm programs (bpftool)")
    cg = c.mkcgroup("strict")
    try:
        r = c.ctl("attach", "--cgroup", cg, "--policy",
                  c.policy(["127.0.0.1:*"], extra_network={"trust": "strict"}))
        msg = (r.stderr + r.stdout).strip()
        check(r.returncode != 0, "a trust=strict policy attached on a host without "
              "lsm_cgroup: %s" % msg)
        check("trust" in msg, "the refusal does not name network.trust: %r" % msg)
        check(c.find_sandbox(cg) is None, "a refused strict policy left a sandbox")
    finally:
        cgroup_remove_tree(cg)
    # Twin: the same policy with the standard trust class attaches.
    with c.sandbox(["127.0.0.1:*"], extra_network={"trust": "standard"}) as sb:
        sb.allowed("socket", "inet", "stream", "tcp")
