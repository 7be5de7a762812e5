# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""A real microVM as a device sandbox (issue 25; docs/architecture.md
"Device sandboxes").

QEMU runs in H (the host side) with a tap, as a VMM does; its guest is
Debian 12's 6.1 kernel (tools/test-kernels fetches and caches it) with a
busybox initramfs whose /init does the steps of GUEST_INIT and prints one
"MV-RESULT step outcome" line each on the serial console:

    guest (QEMU, virtio-net)  eth0 10.79.0.2
      | tap
    H      tapmv 10.79.0.1 (the device egressd confines), H forwards
      | veth                                  hs 10.78.0.1
    S      the servers of test_netdev.py        sh 10.78.0.2 + .3

What arrived is checked in S (the servers' byte counts, the capture of sh)
and in dnsmasq's query log, never by the guest's report alone. The same
guest with nothing attached (the twin boot) reaches every server, so that
"never arrives" is not a guest that cannot send.
"""
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import time

from harness import *
from test_netdev import S_IP, S_IP2, Topo, nd_attach, nd_detach, nd_policy, nd_row, sh
from test_netdev_dns import REBIND_OK, TAG

VM_IP, TAP_IP, TAP = "10.79.0.2", "10.79.0.1", "tapmv"
NAME = "mvsrv-%s.test" % TAG          # S_IP2 (dnsmasq serves it: upstream())
REFUSED = "mvref-%s.test" % TAG       # in no dns_allow
RESOLVER = "192.0.2.53"               # any address: the device program redirects it
BOOT_S, RUN_S = 60, 90                # TCG boots this guest in ~10 s; its steps take ~15 s
TREE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNEL_CACHE = os.environ.get("KERNEL_CACHE", "/var/cache/egressd-test-kernels")

# Each TCP step sends a marker (ND-<tag>., what the capture in S looks for)
# and n zero bytes; the UDP step is a TFTP read request (busybox has no UDP
# nc) whose file name is the marker.
GUEST_INIT = r"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /modules/order); do insmod /modules/$m || echo "MV-INIT insmod $m failed"; done
i=0; while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
ip link set lo up
ip addr add @VM@ peer @TAP@ dev eth0 && ip link set eth0 up && ip route add default via @TAP@
echo "MV-BOOTED $(uname -r)"
res() { echo "MV-RESULT $1 $2"; }
tcp() { # tag host port n
	if { printf 'ND-%s.' $1; head -c $4 /dev/zero; } | nc -w 3 $2 $3 >/dev/null 2>&1
	then res $1 ok; else res $1 fail; fi
}
lookup() { # tag name: the first address of the answer, else "fail"
	a=$(nslookup -type=a $2 @RESOLVER@ 2>/dev/null | sed -n 's/^Address: *\([0-9.]*\)$/\1/p' |
		grep -v '^@RESOLVER@$' | head -n1)
	res $1 ${a:-fail}
}
tcp mvA @S@ 8000 5000
tcp mvD @S@ 8001 100
tcp mvP @S2@ 8000 100
lookup mvN @NAME@
lookup mvR @REFUSED@
tcp mvL @S2@ 8000 3000
if timeout 3 tftp -g -r ND-mvU.x -l /tmp/t @S@ 9001 >/dev/null 2>&1
then res mvU ok; else res mvU fail; fi
echo MV-DONE
poweroff -f
"""

_test_kernels = []
_initrd = []
_upstream = []


def upstream(c):
    """dnsmasq, serving NAME (added once per run)."""
    dm = need_dnsmasq(c)
    if not _upstream:
        dm.add_host(NAME, S_IP2)
        _upstream.append(dm)
    return dm


def test_kernels():
    """tools/test-kernels as a module (its kernel fetch and initramfs)."""
    if not _test_kernels:
        path = os.path.join(TREE, "tools", "test-kernels")
        loader = importlib.machinery.SourceFileLoader("test_kernels", path)
        spec = importlib.util.spec_from_loader("test_kernels", loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        _test_kernels.append(mod)
    return _test_kernels[0]


def guest_image(c):
    """(kernel, initrd) of the guest, made once per run."""
    if not _initrd:
        tk = test_kernels()
        try:   # test-kernels says why and exits: here that is this test's failure
            k = tk.cached_kernel("debian-6.1", KERNEL_CACHE)
            init = GUEST_INIT
            for key, val in (("VM", VM_IP), ("TAP", TAP_IP), ("S", S_IP), ("S2", S_IP2),
                             ("NAME", NAME), ("REFUSED", REFUSED), ("RESOLVER", RESOLVER)):
                init = init.replace("@%s@" % key, val)
            path = os.path.join(c.work, "microvm.initrd")
            tk.build_initrd(k, path, init, module_names=("virtio_net", "virtio_pci"))
        except SystemExit:
            raise TestFailure("the guest kernel or its initramfs could not be made (above)")
        _initrd.append((k, path))
    return _initrd[0]


class VmTopo(Topo):
    """H with the tap, S with test_netdev.py's servers; no G (the guest is QEMU's)."""

    def __init__(self):
        Topo.seq += 1
        t = IF_TAG[:7] + str(Topo.seq)
        self.g = None
        self.h, self.s = ("mv%s%d-%s" % (k, Topo.seq, RUN_ID) for k in "hs")
        self.dev, self.netns, self.proc = TAP, "/run/netns/" + self.h, None
        CLEANUP.push("microvm topology %d" % Topo.seq, self.destroy)
        for n in (self.h, self.s):
            sh("ip", "netns", "add", n)
            sh("ip", "-n", n, "link", "set", "lo", "up")
        H, S = (["ip", "-n", n] for n in (self.h, self.s))
        sh(*H, "tuntap", "add", "dev", TAP, "mode", "tap")
        sh(*H, "addr", "add", TAP_IP, "peer", VM_IP, "dev", TAP)
        sh(*H, "link", "set", TAP, "up")
        sh("ip", "link", "add", "mvx" + t, "type", "veth", "peer", "name", "mvy" + t)
        sh("ip", "link", "set", "mvx" + t, "netns", self.h, "name", "hs")
        sh("ip", "link", "set", "mvy" + t, "netns", self.s, "name", "sh")
        sh("ip", "netns", "exec", self.h, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        sh(*H, "addr", "add", "10.78.0.1/24", "dev", "hs")
        sh(*H, "-6", "addr", "add", "fd78::1/64", "dev", "hs", "nodad")
        sh(*H, "link", "set", "hs", "up")
        sh(*S, "addr", "add", S_IP + "/24", "dev", "sh")
        sh(*S, "addr", "add", S_IP2 + "/24", "dev", "sh")
        sh(*S, "-6", "addr", "add", "fd78::2/64", "dev", "sh", "nodad")   # SERVER's v6 ones
        sh(*S, "link", "set", "sh", "up")
        sh(*S, "route", "add", "default", "via", "10.78.0.1")
        self.start_servers()

    def boot(self, c, what):
        """Boots the guest in H; its MV-RESULT lines as a dict. QEMU is
        killed when it overruns (run_qemu), and by CLEANUP whatever happens."""
        tk = test_kernels()
        k, initrd = guest_image(c)
        serial = os.path.join(c.work, "microvm-%s.serial" % what)
        if os.path.exists(serial):
            os.unlink(serial)
        # TCG: nested KVM hangs on the dev machines (tools/test-kernels' probe).
        argv = ["nsenter", "--net=" + self.netns, "qemu-system-x86_64", "-nodefaults",
                "-no-reboot", "-display", "none", "-m", "256", "-smp", "1",
                "-accel", "tcg", "-cpu", "max", "-kernel", k.vmlinuz, "-initrd", initrd,
                "-append", "console=ttyS0 quiet loglevel=1 panic=-1 ipv6.disable=1",
                "-serial", "file:" + serial,
                "-netdev", "tap,id=n0,ifname=%s,script=no,downscript=no" % TAP,
                "-device", "virtio-net-pci,netdev=n0,mac=52:54:00:79:00:02"]
        CLEANUP.push("microvm qemu (%s)" % what, kill_qemus, tk)
        t0 = time.monotonic()
        rc, el = tk.run_qemu(argv, serial, RUN_S, marks=(("MV-BOOTED", BOOT_S),))
        text = tk.read_text(serial)
        log("microvm %s: QEMU exited %r after %.1f s" % (what, rc, time.monotonic() - t0))
        tail = "\n".join(text.splitlines()[-25:]) + tk.read_text(serial + ".qemu")[-600:]
        check(rc == 0 and "MV-DONE" in text, "the %s guest did not finish (QEMU: %r after %d s); "
              "its serial log ends:\n%s" % (what, rc, el, tail))
        return dict(line.split()[1:3] for line in text.splitlines()
                    if line.startswith("MV-RESULT ") and len(line.split()) == 3)


def kill_qemus(tk):
    for p in list(tk.QEMUS):
        if p.poll() is None:
            p.kill()
            p.wait(5)


def arrived_bytes(frames):
    """IP bytes the guest sent that S got, and that S sent to the guest."""
    out = sum(f["len"] for f in frames if not f["out"] and f.get("src") == VM_IP)
    inn = sum(f["len"] for f in frames if f["out"] and f.get("dst") == VM_IP)
    return out, inn


# In H: the IP bytes of the guest's DNS on the tap (a packet socket sees a
# frame from the guest before tc ingress, one to it after tc egress, so
# both as the guest has them); the sandbox meters them as its traffic.
DNS_TALLY = r"""
import json, socket, struct, sys, threading
tally = {"out": 0, "in": 0}
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)); s.bind((sys.argv[1], 0))
def cap():
    while True:
        f, a = s.recvfrom(70000)
        p = f[14:]
        if f[12:14] != b"\x08\x00" or len(p) < 24 or p[9] not in (6, 17):
            continue
        l4 = p[(p[0] & 15) * 4:]
        sport, dport = struct.unpack("!HH", l4[:4])
        if 53 in (sport, dport):
            tally["in" if a[2] == 4 else "out"] += struct.unpack("!H", p[2:4])[0]
threading.Thread(target=cap, daemon=True).start()
print("ready", flush=True)
sys.stdin.readline()
print(json.dumps(tally), flush=True)
"""


def dns_tally_start(topo):
    p = subprocess.Popen(["ip", "netns", "exec", topo.h, sys.executable, "-c", DNS_TALLY, TAP],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    CLEANUP.push("microvm DNS tally", lambda: p.poll() is None and p.kill())
    check(p.stdout.readline().strip() == "ready", "no DNS tally on the tap")
    return p


def dns_tally_end(p):
    time.sleep(0.5)
    out, _ = p.communicate("end\n", timeout=10)
    return json.loads(out.strip().splitlines()[-1])


def mv_policy(c):
    """S:8000 by address, S2:8000 by name (open once the guest looked it up)."""
    return nd_policy(c, ["tcp/%s:8000" % S_IP, "tcp/%s:8000" % NAME],
                     extra_network=dict(REBIND_OK, dns_allow=["*.mvok-%s.test" % TAG]))


@test(needs=("qemu",))
def microvm_unconfined_twin_reaches_every_server(c):
    with VmTopo() as topo:
        topo.frames(0)
        res = topo.boot(c, "twin")
        fr = topo.frames()
        for m in ("mvA", "mvD", "mvP", "mvL", "mvU"):
            check(topo.arrived("ND-" + m, fr), "with nothing attached, %s did not arrive in S "
                  "(guest: %r)" % (m, res))
        got = topo.ask("tcp")
        check(got.get("%s:8001" % S_IP, 0) >= 100, "the denied server got nothing: %r" % got)


@test(needs=("qemu",))
def microvm_confined_allowed_works_the_rest_never_arrives(c):
    dm = upstream(c)
    with VmTopo() as topo:
        sb = nd_attach(c, topo, mv_policy(c))
        try:
            check(sb["kind"] == "netdev" and sb["netdev"] == TAP, "attach reply: %r" % sb)
            topo.frames(0)
            tally = dns_tally_start(topo)
            res = topo.boot(c, "confined")
            fr = topo.frames(1.0)
            dns = dns_tally_end(tally)
            got = topo.ask("tcp")
            log("microvm: guest %r, servers %r" % (res, got))
            # Allowed: by address, and by name once looked up through an
            # address that is no resolver.
            check(res.get("mvA") == "ok" and topo.arrived("ND-mvA", fr), "allowed TCP: %r" % res)
            check(got.get("%s:8000" % S_IP, 0) >= 5000, "S:8000 got %r" % got)
            check(res.get("mvN") == S_IP2, "the allowed name via %s: %r" % (RESOLVER, res))
            check(dm.logged(NAME), "the allowed name never reached the upstream")
            check(res.get("mvL") == "ok" and topo.arrived("ND-mvL", fr),
                  "the looked-up address did not open S2:8000: %r" % res)
            check(got.get("%s:8000" % S_IP2, 0) >= 3000, "S2:8000 got %r" % got)
            # Denied: another port, the name's address before the lookup,
            # UDP to a port in no rule, a refused name.
            check(res.get("mvD") == "fail" and got.get("%s:8001" % S_IP, 0) == 0,
                  "the denied port: guest %r, server %r" % (res.get("mvD"), got))
            check(not topo.arrived("ND-mvP", fr), "S2:8000 reached before the lookup")
            check(not topo.arrived("ND-mvU", fr), "the UDP datagram to port 9001 arrived")
            bad = [f for f in fr if f.get("src") == VM_IP and f.get("dport") in (8001, 9001, 53)]
            check(not bad, "denied packets reached S: %r" % bad[:3])
            check(res.get("mvR") == "fail", "the refused name resolved: %r" % res)
            check(not dm.logged(REFUSED), "the refused name reached the upstream")
            # Meters: what S got from the guest and sent it, and the
            # guest's DNS with the proxy (its traffic, as a cgroup
            # sandbox's DNS is).
            out, inn = arrived_bytes(fr)
            row = nd_row(c, sb["id"])
            log("microvm meters: out %d (S saw %d, DNS %d), in %d (S sent %d, DNS %d)" %
                (row["bytes_out"], out, dns["out"], row["bytes_in"], inn, dns["in"]))
            check(dns["out"] > 0 and dns["in"] > 0, "no DNS on the tap: %r" % dns)
            check(row["bytes_out"] == out + dns["out"] and row["bytes_in"] == inn + dns["in"],
                  "meters %r, the wire in S: out %d, in %d; DNS out %d, in %d" %
                  (row, out, inn, dns["out"], dns["in"]))
            # Every deny is an event naming the sandbox: the two TCP ports,
            # the UDP datagram (all dropped on the tap) and the refused name.
            ev = [e for e in obs_events(c, "--sandbox", str(sb["id"]))
                  if e.get("verdict") == "deny"]
            check(ev and all(e.get("sandbox") == sb["id"] for e in ev),
                  "deny events of the sandbox: %r" % ev[-5:])
            seen = {(e.get("type"), e.get("dst") or e.get("qname"), e.get("port")) for e in ev}
            for want in (("backstop", S_IP, 8001), ("backstop", S_IP2, 8000),
                         ("backstop", S_IP, 9001), ("dns", REFUSED, None)):
                check(want in seen, "no deny event %r: %r" % (want, sorted(map(str, seen))))
        finally:
            nd_detach(c, topo)
        ex = [r for r in obs_audit(c) if r.get("sandbox") == sb["id"] and
              r.get("type") == "execution"]
        check(ex and ex[-1].get("netdev") == TAP and ex[-1].get("netns") == topo.netns,
              "the execution audit record: %r" % ex)
