#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Writes the seed corpus of fuzz_dnswire to tests/fuzz/corpus/dnswire/.
Deterministic: rerunning it rewrites the same files."""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "dnswire")
A, NS, CNAME, SOA, PTR, MX, TXT, AAAA, SRV, OPT, HTTPS, ANY = 1, 2, 5, 6, 12, 15, 16, 28, 33, 41, 65, 255
QR, AA, TC, RD, RA = 0x8000, 0x0400, 0x0200, 0x0100, 0x0080


def hdr(id_, flags, qd=1, an=0, ns=0, ar=0):
    return struct.pack(">HHHHHH", id_, flags, qd, an, ns, ar)


def name(s):
    out = b""
    for label in filter(None, s.split(".")):
        out += bytes([len(label)]) + label.encode()
    return out + b"\0"


def ptr(off):
    return struct.pack(">H", 0xC000 | off)


def q(n, t):
    return name(n) + struct.pack(">HH", t, 1)


def rr(owner, t, ttl, rdata, cls=1):
    return owner + struct.pack(">HHIH", t, cls, ttl, len(rdata)) + rdata


def opt(udp=1232, ttl=0, opts=b""):
    return b"\0" + struct.pack(">HHIH", OPT, udp, ttl, len(opts)) + opts


v4 = bytes([93, 184, 216, 34])
v6 = bytes.fromhex("20010db8000000000000000000000001")
cookie = struct.pack(">HH", 10, 8) + bytes(range(8))

seeds = {
    "q_a": hdr(0x1234, RD) + q("api.example.com", A),
    "q_aaaa_edns": hdr(0x2345, RD, ar=1) + q("example.org", AAAA) + opt(4096, 0x8000),
    "q_edns_cookie": hdr(0x3456, RD, ar=1) + q("www.example.org", HTTPS) + opt(1232, 0, cookie),
    "q_mixed_case": hdr(0x4567, RD) + q("WwW.ExAmPlE.CoM", A),
    "q_root_ns": hdr(1, RD) + q("", NS),
    "q_srv": hdr(2, RD) + q("_sip._tcp.example.com", SRV),
    "q_txt_exfil": hdr(3, RD) + q("aGVsbG8gd29ybGQgc2VjcmV0IGRhdGEgZXhmaWx0cmF0aW9u.t.example.org", TXT),
    "q_any": hdr(4, 0) + q("example.net", ANY),
    "q_qr_set": hdr(5, QR | RD) + q("example.com", A),
    "q_notify": hdr(6, 4 << 11) + q("example.com", SOA),
    "r_a_compressed": hdr(0x1234, QR | RD | RA, an=2) + q("api.example.com", A)
    + rr(ptr(12), A, 300, v4) + rr(ptr(12), A, 60, bytes([93, 184, 216, 35])),
    "r_aaaa_edns": hdr(0x2345, QR | RD | RA, an=1, ar=1) + q("example.org", AAAA)
    + rr(ptr(12), AAAA, 3600, v6) + opt(1232, 0x8000),
}

# CNAME chain www.example.com -> c1 (at 45) -> c2 -> A, AAAA, compressed.
m = hdr(0x5678, QR | RD | RA, an=4) + q("www.example.com", A)  # example.com at 16
c1 = rr(ptr(12), CNAME, 300, b"\x02c1\x03cdn" + ptr(16))
off_c1 = len(m) + len(c1) - 9
m += c1
c2 = rr(ptr(off_c1), CNAME, 30, b"\x02c2" + ptr(off_c1 + 3))
off_c2 = len(m) + len(c2) - 5
m += c2 + rr(ptr(off_c2), A, 600, v4) + rr(ptr(off_c2), AAAA, 10, v6)
seeds["r_cname_chain"] = m

seeds["r_cname_loop"] = (hdr(7, QR | RD | RA, an=3) + q("q.example", A)
                         + rr(name("q.example"), CNAME, 100, name("l1.example"))
                         + rr(name("l1.example"), CNAME, 100, name("q.example"))
                         + rr(name("l1.example"), A, 100, v4))
seeds["r_unrelated"] = (hdr(8, QR | RD | RA, an=2) + q("good.example", A)
                        + rr(name("evil.example"), A, 100, bytes([6, 6, 6, 6]))
                        + rr(ptr(12), A, 100, v4))
seeds["r_nxdomain_soa"] = (hdr(9, QR | RD | RA | 3, ns=1, ar=1) + q("nx.example.com", A)
                           + rr(ptr(15), SOA, 900, name("ns1.example.com") + name("hostmaster.example.com")
                                + struct.pack(">IIIII", 1, 7200, 3600, 1209600, 300))
                           + opt())
seeds["r_refused"] = hdr(10, QR | RD | RA | 5) + q("blocked.example", A)
seeds["r_truncated_tc"] = hdr(11, QR | RD | RA | TC, an=5) + q("big.example", A) + rr(ptr(12), A, 60, v4)
seeds["r_mx_ns_glue"] = (hdr(12, QR | RD | RA | AA, an=1, ns=1, ar=1) + q("example.com", MX)
                         + rr(ptr(12), MX, 300, struct.pack(">H", 10) + b"\x04mail" + ptr(12))
                         + rr(ptr(12), NS, 300, b"\x03ns1" + ptr(12))
                         + rr(name("ns1.example.com"), A, 300, bytes([192, 0, 2, 53])))
many = hdr(13, QR | RD | RA, an=70) + q("many.example", A)
for i in range(70):
    many += rr(ptr(12), A, 1000 - i, bytes([10, 0, 0, i]))
seeds["r_many_a"] = many
seeds["r_ptr_self_loop"] = hdr(14, QR | RD | RA, an=1) + q("a.com", A) + rr(ptr(23), A, 1, v4)
seeds["r_ptr_forward"] = hdr(15, QR | RD | RA, an=1) + q("a.com", A) + rr(ptr(60), A, 1, v4)
seeds["r_a_rdlen5"] = hdr(16, QR | RD | RA, an=1) + q("a.com", A) + rr(ptr(12), A, 1, v4 + b"\x05")
seeds["r_ancount_lies"] = hdr(17, QR | RD | RA, an=3) + q("a.com", A) + rr(ptr(12), A, 1, v4)
# 31 pointers in a NULL record's rdata, each to the previous; the A's owner
# points at the last: 32 jumps, the most a name may take.
chain = hdr(18, QR | RD | RA, an=2) + q("a.com", A)
chain += ptr(12) + struct.pack(">HHIH", 10, 1, 0, 62)
base = len(chain)
nul = b"".join(ptr(12 if i == 0 else base + 2 * (i - 1)) for i in range(31))
chain += nul + rr(ptr(base + 60), A, 5, v4)
seeds["r_jump_chain31"] = chain
seeds["r_https_txt"] = (hdr(19, QR | RD | RA, an=2) + q("svc.example", HTTPS)
                        + rr(ptr(12), HTTPS, 300, struct.pack(">H", 1) + b"\0" + struct.pack(">HH", 1, 3) + b"\x02h2")
                        + rr(ptr(12), TXT, 300, b"\x05hello"))

# Rebinding (egr_dns_filter_addrs): local addresses mixed with public ones,
# later names pointing into the owners of records that get dropped.
lo4, lo6 = bytes([127, 0, 0, 1]), bytes(15) + b"\x01"
m = hdr(20, QR | RD | RA | 0x20, an=4, ns=1, ar=3) + q("www.x.test", A)  # x.test at 16
m += rr(ptr(12), CNAME, 300, b"\x01c" + ptr(16))                          # c.x.test at 40
m += rr(name("C.x.TEST"), A, 60, lo4)                                      # C.x.TEST at 44
m += rr(ptr(44), A, 60, bytes([198, 51, 100, 7]))
m += rr(ptr(40), AAAA, 60, lo6)
m += rr(ptr(16), NS, 300, b"\x02ns" + ptr(46))
ns_at = len(m) - 5
m += rr(ptr(ns_at), A, 300, bytes([10, 0, 0, 1]))
m += rr(ptr(46), SRV, 300, struct.pack(">HHH", 1, 2, 443) + ptr(44)) + opt()
seeds["r_rebind_mixed"] = m
seeds["r_rebind_all"] = (hdr(21, QR | RD | RA, an=3) + q("meta.test", A)
                         + rr(ptr(12), A, 60, bytes([169, 254, 169, 254]))
                         + rr(ptr(12), A, 60, bytes([0, 0, 0, 0]))
                         + rr(ptr(12), A, 60, bytes([255, 255, 255, 255])))
seeds["r_rebind_v6_forms"] = (hdr(22, QR | RD | RA, an=5) + q("v6.test", AAAA)
                              + rr(ptr(12), AAAA, 60, bytes(10) + b"\xff\xff" + lo4)
                              + rr(ptr(12), AAAA, 60, bytes.fromhex("0064ff9b0000000000000000") + lo4)
                              + rr(ptr(12), AAAA, 60, bytes.fromhex("20027f000001") + bytes(10))
                              + rr(ptr(12), AAAA, 60, bytes.fromhex("fe800000000000000000000000000001"))
                              + rr(ptr(12), AAAA, 60, v6))
seeds["r_rebind_soa_mx"] = (hdr(23, QR | RD | RA, an=2, ns=1) + q("x.test", A)
                            + rr(name("x.test"), A, 60, bytes([10, 9, 8, 7]))
                            + rr(ptr(24), MX, 60, struct.pack(">H", 5) + b"\x02mx" + ptr(24))
                            + rr(ptr(24), SOA, 60, b"\x02ns" + ptr(24) + b"\x02hm" + ptr(24)
                                 + struct.pack(">IIIII", 1, 2, 3, 4, 5)))

# HTTPS/SVCB hints (ipv4hint key 4, ipv6hint key 6) mixing local and global
# addresses, a hint left empty by the filter, and A/AAAA of classes other
# than IN (CH, ANY), which the filter removes without asking.
SVCB = 64


def svcparam(key, value):
    return struct.pack(">HH", key, len(value)) + value


https = (struct.pack(">H", 1) + b"\0" + svcparam(1, b"\x02h2")
         + svcparam(4, lo4 + v4) + svcparam(6, lo6 + v6))
svcb = struct.pack(">H", 2) + ptr(12) + svcparam(4, bytes([10, 0, 0, 1]))
seeds["r_rebind_svcb_hints"] = (hdr(24, QR | RD | RA, an=3) + q("svc.test", HTTPS)
                                + rr(ptr(12), HTTPS, 60, https)
                                + rr(ptr(12), SVCB, 60, svcb)
                                + rr(ptr(12), HTTPS, 60, struct.pack(">H", 3) + b"\0"
                                     + svcparam(6, bytes.fromhex("fe80" + "00" * 13 + "01"))))
seeds["r_rebind_svcb_bad_hint"] = (hdr(25, QR | RD | RA, an=1) + q("svc.test", HTTPS)
                                   + rr(ptr(12), HTTPS, 60, struct.pack(">H", 1) + b"\0"
                                        + svcparam(4, lo4 + b"\x01")))
seeds["r_rebind_other_class"] = (hdr(26, QR | RD | RA, an=3) + q("ch.test", A)
                                 + rr(ptr(12), A, 60, lo4, cls=3)
                                 + rr(ptr(12), AAAA, 60, lo6, cls=255)
                                 + rr(ptr(12), A, 60, v4))

os.makedirs(OUT, exist_ok=True)
for k, v in seeds.items():
    with open(os.path.join(OUT, k), "wb") as f:
        f.write(v)
print(f"{len(seeds)} seeds in {OUT}")
