# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""The lsm_cgroup layer (bpf/egressd.bpf.c egr_lsm_socket_create) and
`"trust": "strict"` where the kernel loads lsm programs (BPF trampolines):
Debian 12's 6.1 and 6.12 (make test-kernels' guests). The sandboxes here
are attach-mode cgroups with no seccomp filter (not egressctl run), so the
kernel layer is the only thing between a root tool and AF_PACKET/AF_XDP.
On a host without lsm programs, test_adversarial's
adv_trust_strict_needs_lsm_cgroup checks the refusal instead (issue 29)."""

from harness import check, obs_status, test


def lsm_layer_on(c):
    layers = obs_status(c).get("layers") or {}
    check(layers.get("lsm_cgroup") is True,
          "the kernel loads lsm programs but egressd reports lsm_cgroup off: %r" % layers)


@test(needs=("lsm_cgroup",))
def lsm_cgroup_closes_families_in_attach_mode(c):
    lsm_layer_on(c)
    # Twin outside a sandbox, as root: the families exist and open.
    c.allowed(None, "packet-socket")
    c.allowed(None, "xdp-socket")
    with c.sandbox(["127.0.0.1:*"]) as sb:
        sb.denied("packet-socket")          # root in the cgroup, no seccomp
        sb.denied("xdp-socket")
        sb.allowed("socket", "inet", "stream", "tcp")
    # Named in allow_sockets: the layer lets that family, and only it, open.
    with c.sandbox(["127.0.0.1:*"], sockets=["packet"]) as sb:
        sb.allowed("packet-socket")
        sb.denied("xdp-socket")


@test(needs=("lsm_cgroup",))
def lsm_cgroup_trust_strict_attaches_and_holds(c):
    lsm_layer_on(c)
    with c.sandbox(["127.0.0.1:*"], extra_network={"trust": "strict"}) as sb:
        sb.denied("packet-socket")
        sb.denied("xdp-socket")
        sb.allowed("socket", "inet", "stream", "tcp")
    # Twin: standard trust attaches the same way on this host.
    with c.sandbox(["127.0.0.1:*"], extra_network={"trust": "standard"}) as sb:
        sb.allowed("socket", "inet", "stream", "tcp")
