// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The DNS wire format, second part (user/lib/dnswire_filter.c and the rest):
 * the reply builders, stripping answer addresses, the truncated reply,
 * exfiltration signals, names. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <cmocka.h>
#include "dnswire.h"

#include "dnswire_util.h"

static void check_reply(const struct pkt *q, uint16_t rcode, bool edns)
{
	struct egr_dns_response *r = resp_alloc();
	uint8_t out[512];
	size_t olen;
	int err;

	err = rcode == EGR_DNS_R_REFUSED
		  ? egr_dns_build_refused(q->b, q->n, out, sizeof(out), &olen)
		  : egr_dns_build_servfail(q->b, q->n, out, sizeof(out), &olen);
	assert_int_equal(err, 0);
	assert_int_equal(egr_dns_parse_response(out, olen, r), 0);
	assert_int_equal(r->id, (q->b[0] << 8) | q->b[1]);
	assert_int_equal(r->rcode, rcode);
	assert_true(r->flags & EGR_DNS_F_QR);
	assert_true(r->flags & EGR_DNS_F_RA);
	assert_int_equal(r->flags & EGR_DNS_F_RD, ((q->b[2] << 8) & EGR_DNS_F_RD));
	assert_false(r->flags & (EGR_DNS_F_AA | EGR_DNS_F_TC | EGR_DNS_F_AD));
	assert_int_equal(r->ancount, 0);
	assert_int_equal(r->nscount, 0);
	assert_int_equal(r->arcount, edns ? 1 : 0);
	assert_int_equal(r->edns, edns);
	/* The question is echoed byte for byte (0x20 case survives). */
	assert_memory_equal(out + 4, "\0\1", 2);
	free(r);
}

static void test_builders(void **state)
{
	struct egr_dns_query q;
	uint8_t out[512];
	struct pkt p;
	size_t olen;

	hdr(&p, 0xabcd, RD, 1, 0, 0, 0);
	question(&p, "BlOcKeD.example", EGR_DNS_T_A);
	check_reply(&p, EGR_DNS_R_REFUSED, false);
	check_reply(&p, EGR_DNS_R_SERVFAIL, false);
	assert_int_equal(egr_dns_build_refused(p.b, p.n, out, sizeof(out), &olen), 0);
	assert_int_equal(olen, p.n);
	assert_memory_equal(out + 12, p.b + 12, p.n - 12);

	/* With EDNS (DO set): a minimal OPT RR comes back, DO echoed. */
	hdr(&p, 0x0102, RD | EGR_DNS_F_CD, 1, 0, 0, 1);
	question(&p, "x.example", EGR_DNS_T_HTTPS);
	opt(&p, 4096, EGR_DNS_EDNS_DO);
	check_reply(&p, EGR_DNS_R_REFUSED, true);
	check_reply(&p, EGR_DNS_R_SERVFAIL, true);
	assert_int_equal(egr_dns_build_refused(p.b, p.n, out, sizeof(out), &olen), 0);
	assert_int_equal(egr_dns_parse_query(p.b, p.n, &q), 0);
	assert_int_equal(olen, q.question_end + 11);
	assert_true(out[3] & (EGR_DNS_F_CD & 0xff));
	assert_memory_equal(out + q.question_end, "\0\0\x29\x04\xd0\0\0\x80\0\0\0", 11);

	/* Without RD. */
	hdr(&p, 5, 0, 1, 0, 0, 0);
	question(&p, "x.example", EGR_DNS_T_A);
	check_reply(&p, EGR_DNS_R_REFUSED, false);

	/* Too small an output buffer. */
	assert_int_equal(egr_dns_build_refused(p.b, p.n, out, p.n - 1, &olen), -ENOSPC);
	assert_int_equal(olen, 0);
	assert_int_equal(egr_dns_build_refused(p.b, p.n, out, p.n, &olen), 0);
	/* In place. */
	assert_int_equal(egr_dns_build_servfail(p.b, p.n, p.b, sizeof(p.b), &olen), 0);
	assert_int_equal(p.b[3] & 0xf, EGR_DNS_R_SERVFAIL);

	/* Only from an acceptable query. */
	hdr(&p, 5, RESP, 1, 0, 0, 0);
	question(&p, "x.example", EGR_DNS_T_A);
	assert_int_equal(egr_dns_build_refused(p.b, p.n, out, sizeof(out), &olen), -EINVAL);
	assert_int_equal(egr_dns_build_servfail(p.b, 5, out, sizeof(out), &olen), -EBADMSG);
	hdr(&p, 5, 5 << 11, 1, 0, 0, 0);
	question(&p, "x.example", EGR_DNS_T_A);
	assert_int_equal(egr_dns_build_refused(p.b, p.n, out, sizeof(out), &olen), -EOPNOTSUPP);
	assert_int_equal(egr_dns_build_refused(p.b, p.n, NULL, 0, &olen), -EINVAL);
}

/* A policy's denial: NXDOMAIN or REFUSED, with an RFC 8914 EDE only when
 * the query had EDNS; a longest-name query with the longest text still
 * fits 512 bytes. */
static void test_denial_builder(void **state)
{
	static const char text[] = "egressd policy refused this name (name not allowed)";
	struct egr_dns_response *r = resp_alloc();
	char longtext[EGR_DNS_EDE_TEXT_MAX + 2], longname[EGR_DNS_NAME_BUF];
	struct egr_dns_query q;
	uint8_t out[512], *o;
	struct pkt p;
	size_t olen, tl = strlen(text);

	/* No EDNS: plain NXDOMAIN, no OPT RR, nothing after the question. */
	hdr(&p, 0x4242, RD, 1, 0, 0, 0);
	question(&p, "Denied.example", EGR_DNS_T_A);
	assert_int_equal(egr_dns_build_denial(p.b, p.n, EGR_DNS_R_NXDOMAIN, EGR_DNS_EDE_BLOCKED,
					      text, out, sizeof(out), &olen), 0);
	assert_int_equal(olen, p.n);
	assert_int_equal(egr_dns_parse_response(out, olen, r), 0);
	assert_int_equal(r->rcode, EGR_DNS_R_NXDOMAIN);
	assert_int_equal(r->arcount, 0);
	assert_false(r->edns);
	assert_memory_equal(out + 12, p.b + 12, p.n - 12);

	/* EDNS: one OPT RR whose RDATA is exactly one EDE option. */
	hdr(&p, 0x4343, RD, 1, 0, 0, 1);
	question(&p, "denied.example", EGR_DNS_T_AAAA);
	opt(&p, 1232, 0);
	assert_int_equal(egr_dns_parse_query(p.b, p.n, &q), 0);
	for (int i = 0; i < 2; i++) {
		uint16_t rc = i ? EGR_DNS_R_REFUSED : EGR_DNS_R_NXDOMAIN;

		assert_int_equal(egr_dns_build_denial(p.b, p.n, rc, EGR_DNS_EDE_BLOCKED, text, out,
						      sizeof(out), &olen), 0);
		assert_int_equal(olen, q.question_end + 11 + 6 + tl);
		assert_int_equal(egr_dns_parse_response(out, olen, r), 0);
		assert_int_equal(r->rcode, rc);
		assert_int_equal(r->arcount, 1);
		assert_true(r->edns);
		o = out + q.question_end;
		assert_memory_equal(o, "\0\0\x29\x04\xd0\0\0\0\0", 9);
		assert_int_equal((o[9] << 8) | o[10], 6 + tl);   /* RDLENGTH */
		assert_int_equal((o[11] << 8) | o[12], 15);      /* OPTION-CODE EDE */
		assert_int_equal((o[13] << 8) | o[14], 2 + tl);  /* OPTION-LENGTH */
		assert_int_equal((o[15] << 8) | o[16], EGR_DNS_EDE_BLOCKED);
		assert_memory_equal(o + 17, text, tl);
	}

	/* The longest name and text fit the 512 bytes any UDP client takes. */
	memset(longtext, 'x', sizeof(longtext));
	longtext[EGR_DNS_EDE_TEXT_MAX] = 0;
	memset(longname, 'a', EGR_DNS_NAME_MAX);
	longname[63] = longname[127] = longname[191] = '.'; /* 63.63.63.61 */
	longname[EGR_DNS_NAME_MAX] = 0;
	hdr(&p, 1, RD, 1, 0, 0, 1);
	question(&p, longname, EGR_DNS_T_A);
	opt(&p, 512, 0);
	assert_int_equal(egr_dns_build_denial(p.b, p.n, EGR_DNS_R_NXDOMAIN, EGR_DNS_EDE_PROHIBITED,
					      longtext, out, sizeof(out), &olen), 0);
	assert_true(olen <= 512);
	assert_int_equal(egr_dns_parse_response(out, olen, r), 0);

	/* Refused: other rcodes, a text too long or not printable ASCII. */
	longtext[EGR_DNS_EDE_TEXT_MAX] = 'x';
	longtext[EGR_DNS_EDE_TEXT_MAX + 1] = 0;
	assert_int_equal(egr_dns_build_denial(p.b, p.n, EGR_DNS_R_NXDOMAIN, 15, longtext, out,
					      sizeof(out), &olen), -EINVAL);
	assert_int_equal(egr_dns_build_denial(p.b, p.n, EGR_DNS_R_NXDOMAIN, 15, "bad\nline", out,
					      sizeof(out), &olen), -EINVAL);
	assert_int_equal(egr_dns_build_denial(p.b, p.n, EGR_DNS_R_SERVFAIL, 15, text, out,
					      sizeof(out), &olen), -EINVAL);
	assert_int_equal(olen, 0);
	assert_int_equal(egr_dns_build_denial(p.b, p.n, EGR_DNS_R_NXDOMAIN, 15, text, out,
					      q.question_end, &olen), -ENOSPC);
	free(r);
}

/* --- rebinding rewrite ---------------------------------------------------- */


static unsigned int drop_calls;

/* Drops 127/8, 10/8 and ::1, keeps everything else. */
static bool drop_local(void *ctx, int family, const uint8_t *a)
{
	static const uint8_t lo6[16] = { [15] = 1 };

	drop_calls++;
	if (family == AF_INET)
		return a[0] == 127 || a[0] == 10;
	return family == AF_INET6 && !memcmp(a, lo6, 16);
}

static bool drop_all(void *ctx, int family, const uint8_t *a)
{
	return true;
}

static bool drop_none(void *ctx, int family, const uint8_t *a)
{
	drop_calls++;
	return false;
}

static bool contains(const uint8_t *hay, size_t n, const void *needle, size_t m)
{
	for (size_t i = 0; i + m <= n; i++)
		if (!memcmp(hay + i, needle, m))
			return true;
	return false;
}

/*
 * www.x.test: CNAME c.x.test; C.x.TEST A 127.0.0.1 (dropped; later names
 * point into its owner), A 198.51.100.7, AAAA ::1 (dropped); authority
 * x.test NS ns.x.TEST; additional ns A 10.0.0.1 (dropped), A 203.0.113.5,
 * MX and SRV whose names point into the dropped owner, OPT.
 */
static void mixed_response(struct pkt *p)
{
	static const uint8_t lo6[16] = { [15] = 1 };

	hdr(p, 0x5555, RESP | EGR_DNS_F_AD, 1, 4, 1, 5);
	question(p, "www.x.test", EGR_DNS_T_A);      /* www@12 x@16 test@18 */
	assert_int_equal(p->n, 28);
	ptr(p, 12);
	rrfix(p, EGR_DNS_T_CNAME, EGR_DNS_C_IN, 300, 4);
	u8(p, 1);                                    /* c@40 */
	u8(p, 'c');
	ptr(p, 16);
	assert_int_equal(p->n, 44);
	rr_a(p, "C.x.TEST", 60, 127, 0, 0, 1);       /* C@44 x@46 TEST@48 */
	assert_int_equal(p->n, 68);
	ptr(p, 44);
	rrfix(p, EGR_DNS_T_A, EGR_DNS_C_IN, 120, 4);
	bytes(p, "\xc6\x33\x64\x07", 4);
	ptr(p, 40);
	rrfix(p, EGR_DNS_T_AAAA, EGR_DNS_C_IN, 120, 16);
	bytes(p, lo6, 16);
	assert_int_equal(p->n, 112);
	ptr(p, 16);
	rrfix(p, EGR_DNS_T_NS, EGR_DNS_C_IN, 300, 5);
	u8(p, 2);                                    /* ns@124 */
	bytes(p, "ns", 2);
	ptr(p, 46);
	ptr(p, 124);
	rrfix(p, EGR_DNS_T_A, EGR_DNS_C_IN, 300, 4);
	bytes(p, "\x0a\0\0\x01", 4);
	ptr(p, 124);
	rrfix(p, EGR_DNS_T_A, EGR_DNS_C_IN, 300, 4);
	bytes(p, "\xcb\x00\x71\x05", 4);
	ptr(p, 46);
	rrfix(p, EGR_DNS_T_MX, EGR_DNS_C_IN, 300, 4);
	u16(p, 10);
	ptr(p, 44);
	ptr(p, 46);
	rrfix(p, EGR_DNS_T_SRV, EGR_DNS_C_IN, 300, 8);
	u16(p, 1);
	u16(p, 2);
	u16(p, 443);
	ptr(p, 44);
	opt(p, 1232, 0);
}

static void test_filter_mixed(void **state)
{
	struct egr_dns_response *r = resp_alloc();
	struct egr_dns_addr addrs[8];
	uint8_t out[1024], again[1024];
	size_t olen, nd, n, olen2;
	struct pkt p;

	mixed_response(&p);
	assert_int_equal(egr_dns_parse_response(p.b, p.n, r), 0);
	drop_calls = 0;
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_local, NULL, out, sizeof(out), &olen,
					      &nd), 0);
	assert_int_equal(drop_calls, 5); /* once per address record */
	assert_int_equal(nd, 3);
	assert_true(olen > 28);
	assert_int_equal(egr_dns_parse_response(out, olen, r), 0);
	assert_int_equal(r->id, 0x5555);
	assert_false(r->flags & EGR_DNS_F_AD);
	assert_true(r->flags & EGR_DNS_F_RA);
	assert_int_equal(r->ancount, 2);
	assert_int_equal(r->nscount, 1);
	assert_int_equal(r->arcount, 4);
	assert_true(r->edns);
	assert_int_equal(r->ncnames, 1);
	assert_string_equal(r->cnames[0].target, "c.x.test");
	assert_int_equal(r->cnames[0].ttl, 300);
	assert_int_equal(r->naddrs, 1);
	assert_string_equal(r->addrs[0].owner, "c.x.test");
	assert_memory_equal(r->addrs[0].addr, "\xc6\x33\x64\x07", 4);
	assert_int_equal(egr_dns_answer_addrs(r, "www.x.test", addrs, 8, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(addrs[0].ttl, 120);
	/* The question is kept byte for byte; the owner's case survives; the
	 * SRV target is written uncompressed (RFC 2782). */
	assert_memory_equal(out + 12, p.b + 12, 16);
	assert_true(contains(out, olen, "\x01" "C\x01x\x04TEST\x00", 10));
	/* The result is well-formed to the rdata names: filtering it again
	 * finds nothing to drop, or drops the rest. */
	assert_int_equal(egr_dns_filter_addrs(out, olen, drop_local, NULL, again, sizeof(again),
					      &olen2, &nd), 0);
	assert_int_equal(nd, 0);
	assert_int_equal(olen2, 0);
	assert_int_equal(egr_dns_filter_addrs(out, olen, drop_all, NULL, again, sizeof(again),
					      &olen2, &nd), 0);
	assert_int_equal(nd, 2);
	assert_int_equal(egr_dns_parse_response(again, olen2, r), 0);
	assert_int_equal(r->ancount, 1);
	assert_int_equal(r->arcount, 3);
	free(r);
}

static void test_filter_none_and_all(void **state)
{
	struct egr_dns_response *r = resp_alloc();
	uint8_t out[1024];
	size_t olen = 7, nd = 7;
	struct pkt p;

	/* Nothing to drop: nothing written. */
	hdr(&p, 1, RESP, 1, 1, 0, 0);
	question(&p, "a.test", EGR_DNS_T_A);
	rr_a(&p, "a.test", 60, 198, 51, 100, 1);
	memset(out, 0xee, sizeof(out));
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_local, NULL, out, sizeof(out), &olen,
					      &nd), 0);
	assert_int_equal(nd, 0);
	assert_int_equal(olen, 0);
	assert_int_equal(out[0], 0xee);
	/* Every address dropped: NOERROR, no records (NODATA). */
	hdr(&p, 2, RESP, 1, 2, 0, 0);
	question(&p, "a.test", EGR_DNS_T_A);
	rr_a(&p, "a.test", 60, 127, 0, 0, 1);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_A, EGR_DNS_C_IN, 60, 4);
	bytes(&p, "\x0a\x01\x02\x03", 4);
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_local, NULL, out, sizeof(out), &olen,
					      &nd), 0);
	assert_int_equal(nd, 2);
	assert_int_equal(egr_dns_parse_response(out, olen, r), 0);
	assert_int_equal(r->rcode, EGR_DNS_R_NOERROR);
	assert_int_equal(r->ancount, 0);
	assert_int_equal(olen, 24); /* header + question */
	/* A/AAAA of a class other than IN (CH, HS, ANY; any length, any
	 * address) are removed without asking; an IN one is asked. */
	hdr(&p, 3, RESP, 1, 5, 0, 0);
	question(&p, "a.test", EGR_DNS_T_A);
	name(&p, "a.test");
	rrfix(&p, EGR_DNS_T_A, 3 /* CH */, 60, 4);
	bytes(&p, "\x7f\0\0\1", 4);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_A, EGR_DNS_C_ANY, 60, 4);
	bytes(&p, "\x5d\xb8\xd8\x22", 4);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_A, 3 /* CH: a name and a 16-bit address */, 60, 9);
	bytes(&p, "\x01x\x01y\0\x00\x01\x00\x02", 9);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_AAAA, 4 /* HS */, 60, 16);
	bytes(&p, "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\1", 16);
	rr_a(&p, "a.test", 60, 93, 184, 216, 34);
	drop_calls = 0;
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_local, NULL, out, sizeof(out), &olen,
					      &nd), 0);
	assert_int_equal(drop_calls, 1);
	assert_int_equal(nd, 4);
	assert_int_equal(egr_dns_parse_response(out, olen, r), 0);
	assert_int_equal(r->ancount, 1);
	assert_int_equal(r->naddrs, 1);
	assert_memory_equal(r->addrs[0].addr, "\x5d\xb8\xd8\x22", 4);
	free(r);
}

/*
 * h.test HTTPS: 1 . alpn=h2 ipv4hint=127.0.0.1,93.184.216.34 ipv6hint=::1;
 * SVCB 2 h.test(compressed) ipv4hint=93.184.216.34; HTTPS 3 . alpn=h2
 * ipv4hint=10.0.0.1.
 */
static void svcb_response(struct pkt *p)
{
	static const uint8_t lo6[16] = { [15] = 1 };

	hdr(p, 0x6666, RESP, 1, 3, 0, 0);
	question(p, "h.test", EGR_DNS_T_HTTPS);
	ptr(p, 12);
	rrfix(p, EGR_DNS_T_HTTPS, EGR_DNS_C_IN, 60, 2 + 1 + 7 + 12 + 20);
	bytes(p, "\x00\x01\x00", 3);
	bytes(p, "\x00\x01\x00\x03\x02h2", 7);
	bytes(p, "\x00\x04\x00\x08\x7f\x00\x00\x01\x5d\xb8\xd8\x22", 12);
	bytes(p, "\x00\x06\x00\x10", 4);
	bytes(p, lo6, 16);
	ptr(p, 12);
	rrfix(p, EGR_DNS_T_SVCB, EGR_DNS_C_IN, 60, 2 + 2 + 8);
	bytes(p, "\x00\x02", 2);
	ptr(p, 12);
	bytes(p, "\x00\x04\x00\x04\x5d\xb8\xd8\x22", 8);
	ptr(p, 12);
	rrfix(p, EGR_DNS_T_HTTPS, EGR_DNS_C_IN, 60, 2 + 1 + 7 + 8);
	bytes(p, "\x00\x03\x00", 3);
	bytes(p, "\x00\x01\x00\x03\x02h2", 7);
	bytes(p, "\x00\x04\x00\x04\x0a\x00\x00\x01", 8);
}

static void test_filter_svcb_hints(void **state)
{
	struct egr_dns_response *r = resp_alloc();
	uint8_t out[1024], again[1024];
	size_t olen, nd, olen2 = 7, nd2 = 7;
	struct pkt p;

	svcb_response(&p);
	drop_calls = 0;
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_local, NULL, out, sizeof(out), &olen,
					      &nd), 0);
	assert_int_equal(drop_calls, 5); /* every hint address, once */
	assert_int_equal(nd, 3);         /* 127.0.0.1, ::1, 10.0.0.1 */
	assert_int_equal(egr_dns_parse_response(out, olen, r), 0);
	assert_int_equal(r->ancount, 3);
	assert_string_equal(r->qname, "h.test");
	/* 1: the global hint kept, ipv6hint gone with its key, alpn as it was. */
	assert_true(contains(out, olen,
			     "\x00\x41\x00\x01\x00\x00\x00\x3c\x00\x12"
			     "\x00\x01\x00\x00\x01\x00\x03\x02h2\x00\x04\x00\x04\x5d\xb8\xd8\x22",
			     28));
	/* 2: unchanged but its TargetName written out (RFC 9460: uncompressed). */
	assert_true(contains(out, olen,
			     "\x00\x40\x00\x01\x00\x00\x00\x3c\x00\x12"
			     "\x00\x02\x01h\x04test\x00\x00\x04\x00\x04\x5d\xb8\xd8\x22",
			     28));
	/* 3: its only hint was dropped: the key goes, the record stays. */
	assert_true(olen > 20);
	assert_memory_equal(out + olen - 20,
			    "\x00\x41\x00\x01\x00\x00\x00\x3c\x00\x0a\x00\x03\x00\x00\x01\x00\x03"
			    "\x02h2",
			    20);
	assert_false(contains(out, olen, "\x7f\x00\x00\x01", 4));
	assert_false(contains(out, olen, "\x0a\x00\x00\x01", 4));
	/* Nothing left to strip. */
	assert_int_equal(egr_dns_filter_addrs(out, olen, drop_local, NULL, again, sizeof(again),
					      &olen2, &nd2), 0);
	assert_int_equal(nd2, 0);
	assert_int_equal(olen2, 0);
	/* Nothing to strip in the hints: nothing written. */
	drop_calls = 0;
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_none, NULL, out, sizeof(out), &olen,
					      &nd), 0);
	assert_int_equal(drop_calls, 5);
	assert_int_equal(nd, 0);
	assert_int_equal(olen, 0);
	free(r);
}

static void test_filter_svcb_malformed(void **state)
{
	uint8_t out[1024];
	size_t olen, nd;
	struct pkt p;

	/* ipv4hint of 5 bytes */
	hdr(&p, 1, RESP, 1, 1, 0, 0);
	question(&p, "h.test", EGR_DNS_T_HTTPS);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_HTTPS, EGR_DNS_C_IN, 60, 3 + 9);
	bytes(&p, "\x00\x01\x00\x00\x04\x00\x05\x5d\xb8\xd8\x22\x01", 12);
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_local, NULL, out, sizeof(out), &olen,
					      &nd), -EBADMSG);
	/* an empty ipv6hint */
	hdr(&p, 1, RESP, 1, 1, 0, 0);
	question(&p, "h.test", EGR_DNS_T_HTTPS);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_HTTPS, EGR_DNS_C_IN, 60, 3 + 4);
	bytes(&p, "\x00\x01\x00\x00\x06\x00\x00", 7);
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_local, NULL, out, sizeof(out), &olen,
					      &nd), -EBADMSG);
	/* a SvcParam longer than the rdata, a truncated key, no TargetName */
	hdr(&p, 1, RESP, 1, 1, 0, 0);
	question(&p, "h.test", EGR_DNS_T_HTTPS);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_HTTPS, EGR_DNS_C_IN, 60, 3 + 6);
	bytes(&p, "\x00\x01\x00\x00\x01\x00\x09\x02h", 9);
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_local, NULL, out, sizeof(out), &olen,
					      &nd), -EBADMSG);
	hdr(&p, 1, RESP, 1, 1, 0, 0);
	question(&p, "h.test", EGR_DNS_T_HTTPS);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_HTTPS, EGR_DNS_C_IN, 60, 3 + 2);
	bytes(&p, "\x00\x01\x00\x00\x01", 5);
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_local, NULL, out, sizeof(out), &olen,
					      &nd), -EBADMSG);
	hdr(&p, 1, RESP, 1, 1, 0, 0);
	question(&p, "h.test", EGR_DNS_T_HTTPS);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_HTTPS, EGR_DNS_C_IN, 60, 2);
	bytes(&p, "\x00\x01", 2);
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_local, NULL, out, sizeof(out), &olen,
					      &nd), -EBADMSG);
	/* A class other than IN: SvcParams not looked at. */
	hdr(&p, 1, RESP, 1, 1, 0, 0);
	question(&p, "h.test", EGR_DNS_T_HTTPS);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_HTTPS, 3, 60, 2);
	bytes(&p, "\x00\x01", 2);
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_local, NULL, out, sizeof(out), &olen,
					      &nd), 0);
	assert_int_equal(nd, 0);
}

static void test_filter_tc_and_many(void **state)
{
	struct egr_dns_response *r = resp_alloc();
	static uint8_t out[65536];
	static struct pkt big;
	size_t olen, nd;
	struct pkt p;

	/* TC: the counts say 3, the packet ends after 2. */
	hdr(&p, 4, RESP | EGR_DNS_F_TC, 1, 3, 0, 0);
	question(&p, "a.test", EGR_DNS_T_A);
	rr_a(&p, "a.test", 60, 127, 0, 0, 1);
	rr_a(&p, "a.test", 60, 198, 51, 100, 9);
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_local, NULL, out, sizeof(out), &olen,
					      &nd), 0);
	assert_int_equal(nd, 1);
	assert_int_equal(egr_dns_parse_response(out, olen, r), 0);
	assert_true(r->tc);
	assert_int_equal(r->ancount, 1);
	assert_int_equal(r->naddrs, 1);
	/* Hundreds of records, all pointer owners: all dropped, bounded work. */
	hdr(&big, 5, RESP, 1, 500, 0, 0);
	question(&big, "many.test", EGR_DNS_T_A);
	for (int i = 0; i < 500; i++) {
		ptr(&big, 12);
		rrfix(&big, EGR_DNS_T_A, EGR_DNS_C_IN, 60, 4);
		bytes(&big, "\x7f\0\0", 3);
		u8(&big, (uint8_t)i);
	}
	assert_int_equal(egr_dns_filter_addrs(big.b, big.n, drop_local, NULL, out, sizeof(out),
					      &olen, &nd), 0);
	assert_int_equal(nd, 500);
	assert_int_equal(olen, 12 + 11 + 4);
	free(r);
}

static void test_filter_errors(void **state)
{
	uint8_t out[1024];
	size_t olen, nd;
	struct pkt p;

	mixed_response(&p);
	/* Too small for the rewritten message. */
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_local, NULL, out, 60, &olen, &nd),
			 -EMSGSIZE);
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_local, NULL, out, 10, &olen, &nd),
			 -EMSGSIZE);
	/* Truncated in the middle of a record. */
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n - 3, drop_local, NULL, out, sizeof(out),
					      &olen, &nd), -EBADMSG);
	/* NULL arguments, a query, a bad opcode. */
	assert_int_equal(egr_dns_filter_addrs(NULL, 0, drop_local, NULL, out, sizeof(out), &olen,
					      &nd), -EINVAL);
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, NULL, NULL, out, sizeof(out), &olen, &nd),
			 -EINVAL);
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_local, NULL, out, sizeof(out), NULL,
					      &nd), -EINVAL);
	hdr(&p, 1, RD, 1, 0, 0, 0);
	question(&p, "a.test", EGR_DNS_T_A);
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_local, NULL, out, sizeof(out), &olen,
					      &nd), -EINVAL);
	/* A/AAAA with a wrong rdlength. */
	hdr(&p, 1, RESP, 1, 1, 0, 0);
	question(&p, "a.test", EGR_DNS_T_A);
	name(&p, "a.test");
	rrfix(&p, EGR_DNS_T_AAAA, EGR_DNS_C_IN, 60, 4);
	bytes(&p, "\x7f\0\0\1", 4);
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_local, NULL, out, sizeof(out), &olen,
					      &nd), -EBADMSG);
	/* An MX whose rdata does not hold its name, next to a dropped address. */
	hdr(&p, 1, RESP, 1, 2, 0, 0);
	question(&p, "a.test", EGR_DNS_T_A);
	rr_a(&p, "a.test", 60, 127, 0, 0, 1);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_MX, EGR_DNS_C_IN, 60, 5);
	u16(&p, 10);
	bytes(&p, "\x05x", 2);
	u8(&p, 0);
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_local, NULL, out, sizeof(out), &olen,
					      &nd), -EBADMSG);
	/* An OPT outside the additional section. */
	hdr(&p, 1, RESP, 1, 2, 0, 0);
	question(&p, "a.test", EGR_DNS_T_A);
	rr_a(&p, "a.test", 60, 127, 0, 0, 1);
	opt(&p, 512, 0);
	assert_int_equal(egr_dns_filter_addrs(p.b, p.n, drop_local, NULL, out, sizeof(out), &olen,
					      &nd), -EBADMSG);
	assert_int_equal(olen, 0);
	assert_int_equal(nd, 0);
}

static void test_build_truncated(void **state)
{
	struct egr_dns_response *r = resp_alloc();
	uint8_t out[512];
	struct pkt p;
	size_t olen;

	hdr(&p, 0x77, RD, 1, 0, 0, 1);
	question(&p, "A.test", EGR_DNS_T_A);
	opt(&p, 4096, 0);
	assert_int_equal(egr_dns_build_truncated(p.b, p.n, out, sizeof(out), &olen), 0);
	assert_int_equal(egr_dns_parse_response(out, olen, r), 0);
	assert_true(r->tc);
	assert_int_equal(r->rcode, EGR_DNS_R_NOERROR);
	assert_int_equal(r->ancount, 0);
	assert_true(r->edns);
	assert_int_equal(r->id, 0x77);
	free(r);
}

/* --- signals ------------------------------------------------------------ */

static void test_entropy(void **state)
{
	const char *rnd = "x7k2q9zj4m8w1v5b3n6c0p";
	double h;

	assert_true(egr_dns_label_entropy("aaaa", 4) == 0.0);
	assert_true(egr_dns_label_entropy("", 0) == 0.0);
	assert_true(egr_dns_label_entropy(NULL, 5) == 0.0);
	assert_true(egr_dns_label_entropy("a", 1) == 0.0);
	h = egr_dns_label_entropy("ab", 2);
	assert_true(h > 0.999999 && h < 1.000001);
	h = egr_dns_label_entropy("abcdefghijklmnop", 16);
	assert_true(h > 3.999999 && h < 4.000001);
	/* "aab": -(2/3 log2 2/3 + 1/3 log2 1/3) = 0.918295834... */
	h = egr_dns_label_entropy("aab", 3);
	assert_true(h > 0.9182958 && h < 0.9182959);
	/* 22 distinct characters: log2(22) = 4.459... */
	h = egr_dns_label_entropy(rnd, strlen(rnd));
	assert_true(h > 4.45 && h < 4.46);
	assert_true(egr_dns_label_entropy("www", 3) < 1.0);
	/* Only len bytes count. */
	assert_true(egr_dns_label_entropy("aaaazzzz", 4) == 0.0);
}

static void test_longest_label(void **state)
{
	assert_int_equal(egr_dns_longest_label(NULL), 0);
	assert_int_equal(egr_dns_longest_label(""), 0);
	assert_int_equal(egr_dns_longest_label("com"), 3);
	assert_int_equal(egr_dns_longest_label("api.example.com"), 7);
	assert_int_equal(egr_dns_longest_label("aGVsbG8gd29ybGQgZXhmaWw.t.example.org"), 23);
	assert_int_equal(egr_dns_longest_label("a.bb.ccc"), 3);
}

static void test_names(void **state)
{
	assert_string_equal(egr_dns_type_name(EGR_DNS_T_AAAA), "AAAA");
	assert_string_equal(egr_dns_type_name(EGR_DNS_T_HTTPS), "HTTPS");
	assert_null(egr_dns_type_name(9999));
	assert_string_equal(egr_dns_rcode_name(EGR_DNS_R_REFUSED), "REFUSED");
	assert_null(egr_dns_rcode_name(99));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_builders),
		cmocka_unit_test(test_denial_builder),
		cmocka_unit_test(test_filter_mixed),
		cmocka_unit_test(test_filter_none_and_all),
		cmocka_unit_test(test_filter_svcb_hints),
		cmocka_unit_test(test_filter_svcb_malformed),
		cmocka_unit_test(test_filter_tc_and_many),
		cmocka_unit_test(test_filter_errors),
		cmocka_unit_test(test_build_truncated),
		cmocka_unit_test(test_entropy),
		cmocka_unit_test(test_longest_label),
		cmocka_unit_test(test_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
