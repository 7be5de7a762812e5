// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* DNS wire format: user/lib/dnswire.c. Every packet here is built by hand. */
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

static void test_query_simple(void **state)
{
	struct egr_dns_query q;
	struct pkt p;

	hdr(&p, 0x1234, RD, 1, 0, 0, 0);
	question(&p, "api.example.com", EGR_DNS_T_A);
	assert_int_equal(egr_dns_parse_query(p.b, p.n, &q), 0);
	assert_int_equal(q.id, 0x1234);
	assert_int_equal(q.flags, RD);
	assert_string_equal(q.qname, "api.example.com");
	assert_int_equal(q.qtype, EGR_DNS_T_A);
	assert_int_equal(q.qclass, EGR_DNS_C_IN);
	assert_false(q.edns);
	assert_int_equal(q.question_end, p.n);

	/* Trailing garbage after the counted sections is ignored. */
	u32(&p, 0xdeadbeef);
	assert_int_equal(egr_dns_parse_query(p.b, p.n, &q), 0);
	assert_string_equal(q.qname, "api.example.com");
}

static void test_query_edns(void **state)
{
	struct egr_dns_query q;
	struct pkt p;

	hdr(&p, 7, RD, 1, 0, 0, 1);
	question(&p, "example.org", EGR_DNS_T_AAAA);
	opt(&p, 4096, EGR_DNS_EDNS_DO);
	assert_int_equal(egr_dns_parse_query(p.b, p.n, &q), 0);
	assert_true(q.edns);
	assert_true(q.edns_do);
	assert_int_equal(q.edns_udp_size, 4096);
	assert_int_equal(q.edns_version, 0);
	assert_int_equal(q.qtype, EGR_DNS_T_AAAA);

	/* With an option (a cookie, 8 bytes) and a non-OPT record before it. */
	hdr(&p, 7, RD, 1, 0, 0, 2);
	question(&p, "example.org", EGR_DNS_T_A);
	rr_a(&p, "x", 1, 1, 2, 3, 4);
	u8(&p, 0);
	rrfix(&p, EGR_DNS_T_OPT, 1232, 0x00010000, 12);
	u16(&p, 10);
	u16(&p, 8);
	bytes(&p, "\1\2\3\4\5\6\7\x8", 8);
	assert_int_equal(egr_dns_parse_query(p.b, p.n, &q), 0);
	assert_true(q.edns);
	assert_false(q.edns_do);
	assert_int_equal(q.edns_version, 1);
	assert_int_equal(q.edns_udp_size, 1232);

	/* An option overrunning the OPT rdata. */
	p.b[p.n - 10] = 9; /* option length 8 -> 9 */
	assert_int_equal(parse_q(&p), -EBADMSG);

	/* Two OPT RRs. */
	hdr(&p, 7, RD, 1, 0, 0, 2);
	question(&p, "example.org", EGR_DNS_T_A);
	opt(&p, 1232, 0);
	opt(&p, 1232, 0);
	assert_int_equal(parse_q(&p), -EINVAL);

	/* OPT with a non-root owner. */
	hdr(&p, 7, RD, 1, 0, 0, 1);
	question(&p, "example.org", EGR_DNS_T_A);
	name(&p, "x");
	rrfix(&p, EGR_DNS_T_OPT, 1232, 0, 0);
	assert_int_equal(parse_q(&p), -EBADMSG);

	/* arcount says 1, nothing there. */
	hdr(&p, 7, RD, 1, 0, 0, 1);
	question(&p, "example.org", EGR_DNS_T_A);
	assert_int_equal(parse_q(&p), -EBADMSG);
}

static void test_query_case(void **state)
{
	struct egr_dns_query q;
	struct pkt p;

	hdr(&p, 1, RD, 1, 0, 0, 0);
	question(&p, "ApI.ExAmPlE.CoM", EGR_DNS_T_A);
	assert_int_equal(egr_dns_parse_query(p.b, p.n, &q), 0);
	assert_string_equal(q.qname, "api.example.com");
}

static void test_query_root(void **state)
{
	struct egr_dns_query q;
	struct pkt p;

	hdr(&p, 1, RD, 1, 0, 0, 0);
	question(&p, "", EGR_DNS_T_NS);
	assert_int_equal(egr_dns_parse_query(p.b, p.n, &q), 0);
	assert_string_equal(q.qname, "");
	assert_int_equal(q.qtype, EGR_DNS_T_NS);
	assert_int_equal(q.question_end, 17);
}

static void test_query_header_checks(void **state)
{
	struct egr_dns_query q;
	struct pkt p;

	/* QR=1 is not a query. */
	hdr(&p, 1, EGR_DNS_F_QR | RD, 1, 0, 0, 0);
	question(&p, "a.com", EGR_DNS_T_A);
	assert_int_equal(egr_dns_parse_query(p.b, p.n, &q), -EINVAL);
	assert_string_equal(q.qname, ""); /* zeroed on error */
	assert_int_equal(q.id, 0);

	/* Opcodes STATUS(2), NOTIFY(4), UPDATE(5), IQUERY(1). */
	for (uint16_t op = 1; op < 16; op++) {
		hdr(&p, 1, (uint16_t)(op << 11), 1, 0, 0, 0);
		question(&p, "a.com", EGR_DNS_T_A);
		assert_int_equal(parse_q(&p), -EOPNOTSUPP);
	}

	/* qdcount 0 and 2. */
	hdr(&p, 1, RD, 0, 0, 0, 0);
	assert_int_equal(parse_q(&p), -EINVAL);
	hdr(&p, 1, RD, 2, 0, 0, 0);
	question(&p, "a.com", EGR_DNS_T_A);
	question(&p, "b.com", EGR_DNS_T_A);
	assert_int_equal(parse_q(&p), -EINVAL);

	/* Records in the answer or authority section of a query. */
	hdr(&p, 1, RD, 1, 1, 0, 0);
	question(&p, "a.com", EGR_DNS_T_A);
	rr_a(&p, "a.com", 1, 1, 2, 3, 4);
	assert_int_equal(parse_q(&p), -EINVAL);
	hdr(&p, 1, RD, 1, 0, 1, 0);
	question(&p, "a.com", EGR_DNS_T_A);
	rr_a(&p, "a.com", 1, 1, 2, 3, 4);
	assert_int_equal(parse_q(&p), -EINVAL);

	/* NULL arguments. */
	assert_int_equal(egr_dns_parse_query(NULL, 12, &q), -EINVAL);
	assert_int_equal(egr_dns_parse_query(p.b, p.n, NULL), -EINVAL);
}

static void test_truncated_query(void **state)
{
	struct egr_dns_query q;
	struct pkt p;
	size_t full;

	hdr(&p, 1, RD, 1, 0, 0, 1);
	question(&p, "www.example.com", EGR_DNS_T_A);
	opt(&p, 1232, 0);
	full = p.n;
	assert_int_equal(egr_dns_parse_query(p.b, full, &q), 0);
	/* Every proper prefix fails, none reads past its length (ASan). */
	for (size_t n = 0; n < full; n++) {
		uint8_t *copy = malloc(n ? n : 1);

		memcpy(copy, p.b, n);
		assert_int_equal(egr_dns_parse_query(copy, n, &q), -EBADMSG);
		free(copy);
	}
}

/* --- names -------------------------------------------------------------- */

static void test_label_limits(void **state)
{
	char l63[64], l64[65], l61[62], want[254];
	struct egr_dns_query q;
	struct pkt p;

	memset(l63, 'a', 63);
	l63[63] = 0;
	memset(l64, 'b', 64);
	l64[64] = 0;
	memset(l61, 'c', 61);
	l61[61] = 0;

	hdr(&p, 1, RD, 1, 0, 0, 0);
	question(&p, l63, EGR_DNS_T_A);
	assert_int_equal(egr_dns_parse_query(p.b, p.n, &q), 0);
	assert_int_equal(strlen(q.qname), 63);

	/* A 64-byte label: its length byte is 0x40, a reserved label type. */
	hdr(&p, 1, RD, 1, 0, 0, 0);
	question(&p, l64, EGR_DNS_T_A);
	assert_int_equal(parse_q(&p), -EBADMSG);

	/* 63+63+63+61 labels: 255 wire bytes, 253 characters: the maximum. */
	hdr(&p, 1, RD, 1, 0, 0, 0);
	snprintf(want, sizeof(want), "%s.%s.%s.%s", l63, l63, l63, l61);
	question(&p, want, EGR_DNS_T_A);
	assert_int_equal(egr_dns_parse_query(p.b, p.n, &q), 0);
	assert_int_equal(strlen(q.qname), 253);
	assert_string_equal(q.qname, want);

	/* One byte more: 256 wire bytes. */
	hdr(&p, 1, RD, 1, 0, 0, 0);
	name(&p, l63);
	p.n--; /* drop the root, go on with more labels */
	name(&p, l63);
	p.n--;
	name(&p, l63);
	p.n--;
	u8(&p, 62);
	for (int i = 0; i < 62; i++)
		u8(&p, 'd');
	u8(&p, 0);
	u16(&p, 1);
	u16(&p, 1);
	assert_int_equal(parse_q(&p), -EBADMSG);

	/* Many short labels past 255 bytes. */
	hdr(&p, 1, RD, 1, 0, 0, 0);
	for (int i = 0; i < 128; i++) {
		u8(&p, 1);
		u8(&p, 'x');
	}
	u8(&p, 0);
	u16(&p, 1);
	u16(&p, 1);
	assert_int_equal(parse_q(&p), -EBADMSG);
}

static void test_label_types_and_bytes(void **state)
{
	static const uint8_t bad[] = {'.', 0, ' ', 0x7f, 0x80, 0xff, '\\', '\n'};
	struct egr_dns_query q;
	struct pkt p;

	/* Reserved label types 0x40 and 0x80. */
	for (int t = 0; t < 2; t++) {
		hdr(&p, 1, RD, 1, 0, 0, 0);
		u8(&p, t ? 0x80 : 0x41);
		u8(&p, 'a');
		u8(&p, 0);
		u16(&p, 1);
		u16(&p, 1);
		assert_int_equal(parse_q(&p), -EBADMSG);
	}

	for (size_t i = 0; i < sizeof(bad); i++) {
		hdr(&p, 1, RD, 1, 0, 0, 0);
		u8(&p, 3);
		u8(&p, 'a');
		u8(&p, bad[i]);
		u8(&p, 'b');
		name(&p, "com");
		u16(&p, 1);
		u16(&p, 1);
		assert_int_equal(parse_q(&p), -EBADMSG);
	}

	/* Service labels, wildcards and hyphens are fine. */
	hdr(&p, 1, RD, 1, 0, 0, 0);
	question(&p, "_sip._tcp.*.x-y.example", EGR_DNS_T_SRV);
	assert_int_equal(egr_dns_parse_query(p.b, p.n, &q), 0);
	assert_string_equal(q.qname, "_sip._tcp.*.x-y.example");
}

/* A question "a.com" then a bogus answer RR whose owner is made of raw. */
static int resp_with_owner(const uint8_t *raw, size_t n)
{
	struct pkt p;

	hdr(&p, 1, RESP, 1, 1, 0, 0);
	question(&p, "a.com", EGR_DNS_T_A); /* 12..22, ends at 23 */
	bytes(&p, raw, n);
	rrfix(&p, EGR_DNS_T_A, EGR_DNS_C_IN, 60, 4);
	u32(&p, 0x01020304);
	return parse_r(&p);
}

static void test_compression(void **state)
{
	struct egr_dns_response *r = resp_alloc();
	struct pkt p;

	/* Legit: answers point at the question (0xc00c) and at a suffix. */
	hdr(&p, 1, RESP, 1, 2, 0, 0);
	question(&p, "www.example.com", EGR_DNS_T_A); /* "example.com" at 16 */
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_A, EGR_DNS_C_IN, 60, 4);
	u32(&p, 0x01020304);
	u8(&p, 3);
	bytes(&p, "API", 3);
	ptr(&p, 16);
	rrfix(&p, EGR_DNS_T_A, EGR_DNS_C_IN, 60, 4);
	u32(&p, 0x05060708);
	assert_int_equal(egr_dns_parse_response(p.b, p.n, r), 0);
	assert_int_equal(r->naddrs, 2);
	assert_string_equal(r->addrs[0].owner, "www.example.com");
	assert_string_equal(r->addrs[1].owner, "api.example.com");
	free(r);

	/* Pointer to itself (offset 23 is where the owner starts). */
	assert_int_equal(resp_with_owner((const uint8_t[]){0xc0, 23}, 2), -EBADMSG);
	/* Forward pointer. */
	assert_int_equal(resp_with_owner((const uint8_t[]){0xc0, 40}, 2), -EBADMSG);
	/* Pointer past the end of the packet. */
	assert_int_equal(resp_with_owner((const uint8_t[]){0xff, 0xff}, 2), -EBADMSG);
	/* Pointer into the header. */
	assert_int_equal(resp_with_owner((const uint8_t[]){0xc0, 4}, 2), -EBADMSG);
	assert_int_equal(resp_with_owner((const uint8_t[]){0xc0, 0}, 2), -EBADMSG);
	/* A label then a pointer back into the same name: re-reads forever
	 * under a "pointer < its own offset" rule; refused here. */
	assert_int_equal(resp_with_owner((const uint8_t[]){1, 'x', 0xc0, 23}, 4), -EBADMSG);
	/* Truncated pointer: 0xc0 is the last byte. */
	hdr(&p, 1, RESP, 1, 1, 0, 0);
	question(&p, "a.com", EGR_DNS_T_A);
	u8(&p, 0xc0);
	assert_int_equal(parse_r(&p), -EBADMSG);
	/* Pointer to the question's own first byte from the question: refused
	 * (a pointer at offset 12 can only go into the header). */
	hdr(&p, 1, RD, 1, 0, 0, 0);
	ptr(&p, 12);
	u16(&p, 1);
	u16(&p, 1);
	assert_int_equal(parse_q(&p), -EBADMSG);
}

static void test_pointer_loop_ab(void **state)
{
	struct pkt p;

	/* Answer 1's rdata (type NULL) holds B at 35: "b" -> ptr 39 (A).
	 * Answer 2's owner is A at 39: ptr -> 35 (B). A->B->A. */
	hdr(&p, 1, RESP, 1, 2, 0, 0);
	question(&p, "a.com", EGR_DNS_T_A);	       /* to 23 */
	ptr(&p, 12);				       /* 23 */
	rrfix(&p, EGR_DNS_T_NULL, EGR_DNS_C_IN, 0, 4); /* 25..34 */
	assert_int_equal(p.n, 35);
	u8(&p, 1);
	u8(&p, 'b');
	ptr(&p, 39);
	assert_int_equal(p.n, 39);
	ptr(&p, 35);
	rrfix(&p, EGR_DNS_T_A, EGR_DNS_C_IN, 0, 4);
	u32(&p, 0);
	assert_int_equal(parse_r(&p), -EBADMSG);
}

/* Answer 2's owner follows a chain of k pointers + the final one to 12. */
static int jump_chain(unsigned int k)
{
	struct pkt p;
	size_t base;

	hdr(&p, 1, RESP, 1, 2, 0, 0);
	question(&p, "a.com", EGR_DNS_T_A);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_NULL, EGR_DNS_C_IN, 0, (uint16_t)(2 * k));
	base = p.n;
	ptr(&p, 12);
	for (unsigned int i = 1; i < k; i++)
		ptr(&p, (uint16_t)(base + 2 * (i - 1)));
	ptr(&p, (uint16_t)(base + 2 * (k - 1)));
	rrfix(&p, EGR_DNS_T_A, EGR_DNS_C_IN, 0, 4);
	u32(&p, 0);
	return parse_r(&p);
}

static void test_too_many_jumps(void **state)
{
	/* k pointers in the rdata + the owner's own = k + 1 jumps. */
	assert_int_equal(jump_chain(EGR_DNS_MAX_JUMPS - 1), 0);
	assert_int_equal(jump_chain(EGR_DNS_MAX_JUMPS), -EBADMSG);
	assert_int_equal(jump_chain(200), -EBADMSG);
}

/* --- responses ---------------------------------------------------------- */

static void test_response_basic(void **state)
{
	struct egr_dns_response *r = resp_alloc();
	struct egr_dns_query q;
	struct pkt p;

	hdr(&p, 0xbeef, RESP | EGR_DNS_F_AA, 1, 2, 0, 0);
	question(&p, "Example.COM", EGR_DNS_T_AAAA);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_AAAA, EGR_DNS_C_IN, 300, 16);
	bytes(&p, "\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x01", 16);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_A, EGR_DNS_C_IN, 0x80000000u, 4); /* top bit: TTL 0 */
	u32(&p, 0xc0000201);
	assert_int_equal(egr_dns_parse_response(p.b, p.n, r), 0);
	assert_int_equal(r->id, 0xbeef);
	assert_int_equal(r->rcode, 0);
	assert_false(r->tc);
	assert_string_equal(r->qname, "example.com");
	assert_int_equal(r->qtype, EGR_DNS_T_AAAA);
	assert_int_equal(r->naddrs, 2);
	assert_int_equal(r->addrs[0].type, EGR_DNS_T_AAAA);
	assert_int_equal(r->addrs[0].ttl, 300);
	assert_memory_equal(r->addrs[0].addr, "\x20\x01\x0d\xb8", 4);
	assert_int_equal(r->addrs[0].addr[15], 1);
	assert_int_equal(r->addrs[1].type, EGR_DNS_T_A);
	assert_int_equal(r->addrs[1].ttl, 0);
	assert_memory_equal(r->addrs[1].addr, "\xc0\x00\x02\x01", 4);

	/* Matches the query it answers, not one with another id. */
	hdr(&p, 0xbeef, RD, 1, 0, 0, 0);
	question(&p, "example.com", EGR_DNS_T_AAAA);
	assert_int_equal(egr_dns_parse_query(p.b, p.n, &q), 0);
	assert_true(egr_dns_response_matches(&q, r));
	q.id++;
	assert_false(egr_dns_response_matches(&q, r));

	/* QR=0 is not a response. */
	hdr(&p, 1, RD, 1, 0, 0, 0);
	question(&p, "a.com", EGR_DNS_T_A);
	assert_int_equal(parse_r(&p), -EINVAL);
	free(r);
}

static void test_response_rcode_tc_edns(void **state)
{
	struct egr_dns_response *r = resp_alloc();
	struct pkt p;

	/* NXDOMAIN with an SOA in authority and an OPT. */
	hdr(&p, 3, RESP | EGR_DNS_R_NXDOMAIN, 1, 0, 1, 1);
	question(&p, "nx.example", EGR_DNS_T_A);
	name(&p, "example");
	rrfix(&p, EGR_DNS_T_SOA, EGR_DNS_C_IN, 60, 4);
	u32(&p, 0);
	opt(&p, 1232, 0);
	assert_int_equal(egr_dns_parse_response(p.b, p.n, r), 0);
	assert_int_equal(r->rcode, EGR_DNS_R_NXDOMAIN);
	assert_true(r->edns);
	assert_int_equal(r->naddrs, 0);

	/* Extended rcode 1 in the OPT TTL: BADVERS (16). */
	hdr(&p, 3, RESP, 1, 0, 0, 1);
	question(&p, "x.example", EGR_DNS_T_A);
	opt(&p, 1232, 0x01000000);
	assert_int_equal(egr_dns_parse_response(p.b, p.n, r), 0);
	assert_int_equal(r->rcode, EGR_DNS_R_BADVERS);

	/* OPT in the answer section. */
	hdr(&p, 3, RESP, 1, 1, 0, 0);
	question(&p, "x.example", EGR_DNS_T_A);
	opt(&p, 1232, 0);
	assert_int_equal(parse_r(&p), -EBADMSG);

	/* TC set, ends at a record boundary short of its counts: accepted. */
	hdr(&p, 3, RESP | EGR_DNS_F_TC, 1, 3, 0, 0);
	question(&p, "x.example", EGR_DNS_T_A);
	rr_a(&p, "x.example", 60, 10, 0, 0, 1);
	assert_int_equal(egr_dns_parse_response(p.b, p.n, r), 0);
	assert_true(r->tc);
	assert_true(r->short_sections);
	assert_int_equal(r->naddrs, 1);
	/* ... but not without TC. */
	p.b[2] &= (uint8_t) ~(EGR_DNS_F_TC >> 8);
	assert_int_equal(parse_r(&p), -EBADMSG);
	/* ... nor mid-record with TC. */
	p.b[2] |= EGR_DNS_F_TC >> 8;
	p.n -= 2;
	assert_int_equal(parse_r(&p), -EBADMSG);
	free(r);
}

static void test_response_malformed(void **state)
{
	struct pkt p;
	size_t full;

	/* ancount lies. */
	hdr(&p, 1, RESP, 1, 2, 0, 0);
	question(&p, "a.com", EGR_DNS_T_A);
	rr_a(&p, "a.com", 60, 1, 2, 3, 4);
	assert_int_equal(parse_r(&p), -EBADMSG);
	/* nscount / arcount lie. */
	hdr(&p, 1, RESP, 1, 1, 1, 0);
	question(&p, "a.com", EGR_DNS_T_A);
	rr_a(&p, "a.com", 60, 1, 2, 3, 4);
	assert_int_equal(parse_r(&p), -EBADMSG);
	hdr(&p, 1, RESP, 1, 1, 0, 65535);
	question(&p, "a.com", EGR_DNS_T_A);
	rr_a(&p, "a.com", 60, 1, 2, 3, 4);
	assert_int_equal(parse_r(&p), -EBADMSG);

	/* rdlength overruns the packet. */
	hdr(&p, 1, RESP, 1, 1, 0, 0);
	question(&p, "a.com", EGR_DNS_T_A);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_TXT, EGR_DNS_C_IN, 60, 100);
	u32(&p, 0x03616263);
	assert_int_equal(parse_r(&p), -EBADMSG);

	/* A with rdlength 5 (and 3), AAAA with 4. */
	hdr(&p, 1, RESP, 1, 1, 0, 0);
	question(&p, "a.com", EGR_DNS_T_A);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_A, EGR_DNS_C_IN, 60, 5);
	u32(&p, 0x01020304);
	u8(&p, 5);
	assert_int_equal(parse_r(&p), -EBADMSG);
	hdr(&p, 1, RESP, 1, 1, 0, 0);
	question(&p, "a.com", EGR_DNS_T_A);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_A, EGR_DNS_C_IN, 60, 3);
	bytes(&p, "\1\2\3", 3);
	assert_int_equal(parse_r(&p), -EBADMSG);
	hdr(&p, 1, RESP, 1, 1, 0, 0);
	question(&p, "a.com", EGR_DNS_T_AAAA);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_AAAA, EGR_DNS_C_IN, 60, 4);
	u32(&p, 0x01020304);
	assert_int_equal(parse_r(&p), -EBADMSG);

	/* CNAME whose name does not fill its rdata, or runs past it. */
	hdr(&p, 1, RESP, 1, 1, 0, 0);
	question(&p, "a.com", EGR_DNS_T_A);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_CNAME, EGR_DNS_C_IN, 60, 4);
	name(&p, "b"); /* 3 bytes */
	u8(&p, 0);
	assert_int_equal(parse_r(&p), -EBADMSG);
	hdr(&p, 1, RESP, 1, 1, 0, 0);
	question(&p, "a.com", EGR_DNS_T_A);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_CNAME, EGR_DNS_C_IN, 60, 2);
	name(&p, "b");
	assert_int_equal(parse_r(&p), -EBADMSG);

	/* Truncations of a full response at every length. */
	hdr(&p, 1, RESP, 1, 2, 0, 1);
	question(&p, "www.a.com", EGR_DNS_T_A);
	ptr(&p, 12);
	rrfix(&p, EGR_DNS_T_CNAME, EGR_DNS_C_IN, 60, 6);
	u8(&p, 3);
	bytes(&p, "cdn", 3);
	ptr(&p, 16);
	rr_a(&p, "cdn.a.com", 60, 1, 2, 3, 4);
	opt(&p, 1232, 0);
	full = p.n;
	assert_int_equal(parse_r(&p), 0);
	for (size_t n = 0; n < full; n++) {
		struct egr_dns_response *r = resp_alloc();
		uint8_t *copy = malloc(n ? n : 1);

		memcpy(copy, p.b, n);
		assert_int_equal(egr_dns_parse_response(copy, n, r), -EBADMSG);
		assert_int_equal(r->naddrs, 0); /* zeroed on error */
		free(copy);
		free(r);
	}
}

static void test_cname_chain(void **state)
{
	struct egr_dns_response *r = resp_alloc();
	struct egr_dns_addr out[8];
	struct pkt p;
	size_t n;

	/* www -> c1 (TTL 300) -> c2 (TTL 30) -> A (TTL 600) + AAAA (TTL 10),
	 * plus an A for an unrelated owner and one for a name only reachable
	 * against a CNAME's direction. */
	hdr(&p, 9, RESP, 1, 7, 0, 0);
	question(&p, "www.example.com", EGR_DNS_T_A);
	rr_cname(&p, "www.example.com", 300, "c1.cdn.net");
	rr_cname(&p, "C1.cdn.net", 30, "c2.cdn.net");
	rr_a(&p, "c2.cdn.net", 600, 198, 51, 100, 7);
	name(&p, "c2.cdn.net");
	rrfix(&p, EGR_DNS_T_AAAA, EGR_DNS_C_IN, 10, 16);
	bytes(&p, "\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x07", 16);
	rr_a(&p, "evil.example", 600, 6, 6, 6, 6);
	rr_cname(&p, "back.example", 600, "www.example.com");
	rr_a(&p, "back.example", 600, 7, 7, 7, 7);
	assert_int_equal(egr_dns_parse_response(p.b, p.n, r), 0);
	assert_int_equal(r->ncnames, 3);
	assert_int_equal(r->naddrs, 4);
	assert_string_equal(r->cnames[1].owner, "c1.cdn.net");

	assert_int_equal(egr_dns_answer_addrs(r, "www.example.com", out, 8, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(out[0].family, AF_INET);
	assert_memory_equal(out[0].addr, "\xc6\x33\x64\x07", 4);
	assert_int_equal(out[0].ttl, 30);
	assert_int_equal(out[1].family, AF_INET6);
	assert_int_equal(out[1].ttl, 10);
	assert_int_equal(out[1].addr[15], 7);

	/* The question name is compared case-insensitively. */
	assert_int_equal(egr_dns_answer_addrs(r, "WWW.Example.com", out, 8, &n), 0);
	assert_int_equal(n, 2);
	/* A name in the middle of the chain sees only what follows it. */
	assert_int_equal(egr_dns_answer_addrs(r, "c2.cdn.net", out, 8, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(out[0].ttl, 600);
	/* An unrelated name gets nothing. */
	assert_int_equal(egr_dns_answer_addrs(r, "other.example", out, 8, &n), 0);
	assert_int_equal(n, 0);
	/* Argument checks. */
	assert_int_equal(egr_dns_answer_addrs(r, NULL, out, 8, &n), -EINVAL);
	assert_int_equal(egr_dns_answer_addrs(NULL, "x", out, 8, &n), -EINVAL);
	free(r);
}

static void test_cname_loop_and_length(void **state)
{
	struct egr_dns_response *r = resp_alloc();
	struct egr_dns_addr out[8];
	char a[32], b[32];
	struct pkt p;
	size_t n;

	/* q -> l1 -> l2 -> l1 (loop), q -> q (self loop), A on l2. */
	hdr(&p, 9, RESP, 1, 5, 0, 0);
	question(&p, "q.example", EGR_DNS_T_A);
	rr_cname(&p, "q.example", 100, "l1.example");
	rr_cname(&p, "l1.example", 100, "l2.example");
	rr_cname(&p, "l2.example", 5, "l1.example");
	rr_cname(&p, "q.example", 100, "q.example");
	rr_a(&p, "l2.example", 100, 1, 1, 1, 1);
	assert_int_equal(egr_dns_parse_response(p.b, p.n, r), 0);
	assert_int_equal(egr_dns_answer_addrs(r, "q.example", out, 8, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(out[0].ttl, 100);

	/* A chain of 20 CNAMEs: the address at the end of hop 16 is in, the
	 * one at hop 17 and beyond is not. */
	hdr(&p, 9, RESP, 1, 22, 0, 0);
	question(&p, "n0.example", EGR_DNS_T_A);
	for (int i = 0; i < 20; i++) {
		snprintf(a, sizeof(a), "n%d.example", i);
		snprintf(b, sizeof(b), "n%d.example", i + 1);
		rr_cname(&p, a, 100, b);
	}
	rr_a(&p, "n16.example", 100, 16, 16, 16, 16);
	rr_a(&p, "n17.example", 100, 17, 17, 17, 17);
	assert_int_equal(egr_dns_parse_response(p.b, p.n, r), 0);
	assert_int_equal(egr_dns_answer_addrs(r, "n0.example", out, 8, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(out[0].addr[0], 16);
	free(r);
}

static void test_answer_caps(void **state)
{
	struct egr_dns_response *r = resp_alloc();
	struct egr_dns_addr out[EGR_DNS_MAX_ANSWERS];
	struct pkt p;
	size_t n;

	/* 70 distinct A records + 40 CNAMEs: kept up to the caps, the rest
	 * counted as dropped, the whole packet still validated. */
	hdr(&p, 9, RESP, 1, 110, 0, 0);
	question(&p, "many.example", EGR_DNS_T_A);
	for (int i = 0; i < 70; i++) {
		ptr(&p, 12);
		rrfix(&p, EGR_DNS_T_A, EGR_DNS_C_IN, (uint32_t)(1000 - i), 4);
		u32(&p, 0x0a000000u + (uint32_t)i);
	}
	for (int i = 0; i < 40; i++) {
		ptr(&p, 12);
		rrfix(&p, EGR_DNS_T_CNAME, EGR_DNS_C_IN, 60, 2);
		ptr(&p, 12);
	}
	assert_int_equal(egr_dns_parse_response(p.b, p.n, r), 0);
	assert_int_equal(r->naddrs, EGR_DNS_MAX_ANSWERS);
	assert_int_equal(r->ncnames, EGR_DNS_MAX_CNAMES);
	assert_int_equal(r->dropped, 70 - EGR_DNS_MAX_ANSWERS + 40 - EGR_DNS_MAX_CNAMES);

	assert_int_equal(egr_dns_answer_addrs(r, "many.example", out, EGR_DNS_MAX_ANSWERS, &n), 0);
	assert_int_equal(n, EGR_DNS_MAX_ANSWERS);
	assert_int_equal(out[63].ttl, 1000 - 63);
	/* A smaller output: -ENOSPC, filled up to max. */
	assert_int_equal(egr_dns_answer_addrs(r, "many.example", out, 10, &n), -ENOSPC);
	assert_int_equal(n, 10);
	assert_int_equal(out[9].addr[3], 9);
	/* Duplicates are reported once with the smallest TTL. */
	hdr(&p, 9, RESP, 1, 3, 0, 0);
	question(&p, "d.example", EGR_DNS_T_A);
	rr_a(&p, "d.example", 500, 1, 2, 3, 4);
	rr_a(&p, "d.example", 50, 1, 2, 3, 4);
	rr_a(&p, "d.example", 5000, 1, 2, 3, 4);
	assert_int_equal(egr_dns_parse_response(p.b, p.n, r), 0);
	assert_int_equal(egr_dns_answer_addrs(r, "d.example", out, 1, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(out[0].ttl, 50);
	/* Non-IN classes are not collected. */
	hdr(&p, 9, RESP, 1, 1, 0, 0);
	question(&p, "d.example", EGR_DNS_T_A);
	name(&p, "d.example");
	rrfix(&p, EGR_DNS_T_A, 3 /* CH */, 60, 5);
	bytes(&p, "\1\2\3\4\5", 5);
	assert_int_equal(egr_dns_parse_response(p.b, p.n, r), 0);
	assert_int_equal(r->naddrs, 0);
	free(r);
}

/* --- builders ----------------------------------------------------------- */

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_query_simple),
	    cmocka_unit_test(test_query_edns),
	    cmocka_unit_test(test_query_case),
	    cmocka_unit_test(test_query_root),
	    cmocka_unit_test(test_query_header_checks),
	    cmocka_unit_test(test_truncated_query),
	    cmocka_unit_test(test_label_limits),
	    cmocka_unit_test(test_label_types_and_bytes),
	    cmocka_unit_test(test_compression),
	    cmocka_unit_test(test_pointer_loop_ab),
	    cmocka_unit_test(test_too_many_jumps),
	    cmocka_unit_test(test_response_basic),
	    cmocka_unit_test(test_response_rcode_tc_edns),
	    cmocka_unit_test(test_response_malformed),
	    cmocka_unit_test(test_cname_chain),
	    cmocka_unit_test(test_cname_loop_and_length),
	    cmocka_unit_test(test_answer_caps),
	};

	return cmocka_run_group_tests_name("dnswire", tests, NULL, NULL);
}
