# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Issue 9, tenant isolation inside egressd: one sandbox cannot starve, blind
# or impersonate another through egressd's shared parts (the control
# socket, the DNS proxy's in-flight table, CPU and listeners). Each test has
# a victim and noisy neighbours, and asserts the victim's outcome; floods
# are bounded in time and stay on loopback.
#
# exec'd by run.py in its namespace (see "tests by area" there).

TN_FIGURES = {}  # name -> figure, printed with -v (docs/benchmarks.md has the bench's)


def tn_record(name, value):
    TN_FIGURES[name] = value
    log("figure %s = %s" % (name, value))


def tn_status_rtt(c):
    """One `status` round trip on the control socket, from outside every
    sandbox, as egressctl does it: connect, request, whole reply. Seconds."""
    t0 = time.monotonic()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(c.sock)
        s.sendall(b'{"op":"status"}\n')
        buf = b""
        while not buf.endswith(b"\n"):
            d = s.recv(65536)
            if not d:
                break
            buf += d
    finally:
        s.close()
    dt = time.monotonic() - t0
    check(json.loads(buf or b"{}").get("ok") is True, "status answered %r" % buf[:200])
    return dt


# A sandboxed process that trickles a request into the control socket, one
# byte every 100 ms, for at most DURATION seconds. Prints
#   answer_ms N | noanswer ; sent N ; closed yes|no
TN_TRICKLER = r"""
import socket, sys, time
path, duration = sys.argv[1], float(sys.argv[2])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
s.setblocking(False)
t0 = time.monotonic()
req = b'{"op":"status"}'
sent, answer, closed = 0, None, False
while time.monotonic() - t0 < duration:
    try:
        s.send(req[sent % len(req):sent % len(req) + 1])
        sent += 1
    except OSError:
        closed = True
    try:
        d = s.recv(4096)
        if d and answer is None:
            answer = (time.monotonic() - t0, d)
        if not d:
            closed = True
    except BlockingIOError:
        pass
    except OSError:
        closed = True
    if closed and answer is not None:
        break
    time.sleep(0.1)
if answer:
    print("answer_ms %d %s" % (answer[0] * 1000, b"forbidden" in answer[1]))
else:
    print("noanswer")
print("sent %d" % sent)
print("closed %s" % ("yes" if closed else "no"))
"""


def tn_dns_policy(c, names, tenant="e2e"):
    return c.policy([], extra_network={"dns_allow": list(names)}, tenant=tenant)


@test
def tenant_control_trickle(c):
    need_dnsmasq(c)
    with Sandbox(c, tn_dns_policy(c, ["api.test"]), "tn-trickle") as noisy, \
            Sandbox(c, tn_dns_policy(c, ["api.test"]), "tn-victim") as victim:
        # Alone: the figures the trickle is measured against.
        alone = sorted(tn_status_rtt(c) for _ in range(5))
        tn_record("control status alone max ms", "%.1f" % (alone[-1] * 1000))
        # Hostile: four sandboxed tricklers (root, in an attached sandbox) ...
        procs = []
        for _ in range(4):
            p = subprocess.Popen([sys.executable, "-c", TN_TRICKLER, c.sock, "3"],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True,
                                 preexec_fn=join_cgroup_fn(noisy.cg))
            CLEANUP.push("trickler", lambda p=p: p.poll() is None and p.kill())
            procs.append(p)
        # ... and an allowed peer (root, outside every sandbox) that trickles
        # too: it is served, but must cost the loop nothing while it waits.
        slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        CLEANUP.push("slow control client", slow.close)
        slow.connect(c.sock)
        stop = threading.Event()

        def trickle():
            req, i = b'{"op":"status"', 0
            while not stop.is_set() and i < 40:
                try:
                    slow.send(req[i % len(req):i % len(req) + 1])
                except OSError:
                    return
                i += 1
                stop.wait(0.1)
        th = threading.Thread(target=trickle, daemon=True)
        th.start()
        time.sleep(0.3)
        rtts = []
        for _ in range(8):
            rtts.append(tn_status_rtt(c))
            time.sleep(0.1)
        r = c.ctl("status")
        check(r.returncode == 0, "egressctl status during the trickle: exit %d %s" %
              (r.returncode, r.stderr.strip()))
        rc, addrs, _, line = dns_query("udp", "127.0.0.2", 53, "api.test", "A", cg=victim.cg)
        check(rc == "NOERROR" and DNS_ZONE["api.test"] in addrs,
              "the victim's DNS during the trickle: %r" % line)
        # The allowed slow client is still being waited for (the state
        # machine holds it, it did not just get dropped), the sanity twin.
        slow.setblocking(False)
        try:
            got = slow.recv(4096)
            still_open = False if got == b"" else ("got %r" % got)
        except BlockingIOError:
            still_open = True
        stop.set()
        th.join(5)
        outs = [p.communicate(timeout=10)[0].split("\n") for p in procs]
    tn_record("control status under trickle max ms", "%.1f" % (max(rtts) * 1000))
    check(still_open is True, "the allowed trickling client was not being waited for: %s" %
          still_open)
    check(max(rtts) < 0.100, "status took up to %.1f ms during the trickle (alone %.1f ms): %r"
          % (max(rtts) * 1000, alone[-1] * 1000, ["%.1f" % (x * 1000) for x in rtts]))
    for o in outs:
        check(o[0].startswith("answer_ms ") and o[0].endswith("True"),
              "a sandboxed trickler got no refusal: %r" % o)
        check(int(o[0].split()[1]) < 1000,
              "a sandboxed trickler waited %s ms for its refusal" % o[0].split()[1])
        check("closed yes" in o, "a sandboxed trickler's connection stayed open: %r" % o)
    # Not read: a trickler got its answer before it had sent a whole request.
    slow.close()
