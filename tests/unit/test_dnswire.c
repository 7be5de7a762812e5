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

/* --- a tiny packet writer ---------------------------------------------- */

struct pkt {
	uint8_t b[8192];
	size_t n;
};

static void u8(struct pkt *p, uint8_t v)
{
	assert_true(p->n < sizeof(p->b));
	p->b[p->n++] = v;
}

static void u16(struct pkt *p, uint16_t v)
{
	u8(p, (uint8_t)(v >> 8));
	u8(p, (uint8_t)v);
}

static void u32(struct pkt *p, uint32_t v)
{
	u16(p, (uint16_t)(v >> 16));
	u16(p, (uint16_t)v);
}

static void bytes(struct pkt *p, const void *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		u8(p, ((const uint8_t *)v)[i]);
}

static void hdr(struct pkt *p, uint16_t id, uint16_t flags, uint16_t qd, uint16_t an, uint16_t ns,
		uint16_t ar)
{
	p->n = 0;
	u16(p, id);
	u16(p, flags);
	u16(p, qd);
	u16(p, an);
	u16(p, ns);
	u16(p, ar);
}

/* Write a dotted name as labels (no compression), "" is the root. */
static void name(struct pkt *p, const char *s)
{
	while (*s) {
		const char *dot = strchr(s, '.');
		size_t l = dot ? (size_t)(dot - s) : strlen(s);

		u8(p, (uint8_t)l);
		bytes(p, s, l);
		s += l;
		if (*s == '.')
			s++;
	}
	u8(p, 0);
}

static void ptr(struct pkt *p, uint16_t off)
{
	u16(p, (uint16_t)(0xc000 | off));
}

static void question(struct pkt *p, const char *qname, uint16_t qtype)
{
	name(p, qname);
	u16(p, qtype);
	u16(p, EGR_DNS_C_IN);
}

/* Fixed part of an RR after its owner. */
static void rrfix(struct pkt *p, uint16_t type, uint16_t cls, uint32_t ttl, uint16_t rdlen)
{
	u16(p, type);
	u16(p, cls);
	u32(p, ttl);
	u16(p, rdlen);
}

static void rr_a(struct pkt *p, const char *owner, uint32_t ttl, uint8_t a, uint8_t b, uint8_t c,
		 uint8_t d)
{
	name(p, owner);
	rrfix(p, EGR_DNS_T_A, EGR_DNS_C_IN, ttl, 4);
	u8(p, a);
	u8(p, b);
	u8(p, c);
	u8(p, d);
}

static size_t name_wire_len(const char *s)
{
	return *s ? strlen(s) + 2 : 1;
}

static void rr_cname(struct pkt *p, const char *owner, uint32_t ttl, const char *target)
{
	name(p, owner);
	rrfix(p, EGR_DNS_T_CNAME, EGR_DNS_C_IN, ttl, (uint16_t)name_wire_len(target));
	name(p, target);
}

static void opt(struct pkt *p, uint16_t udp, uint32_t ttl)
{
	u8(p, 0);
	rrfix(p, EGR_DNS_T_OPT, udp, ttl, 0);
}

#define RD   EGR_DNS_F_RD
#define RESP (EGR_DNS_F_QR | EGR_DNS_F_RD | EGR_DNS_F_RA)

static struct egr_dns_response *resp_alloc(void)
{
	struct egr_dns_response *r = malloc(sizeof(*r));

	assert_non_null(r);
	return r;
}

static int parse_r(const struct pkt *p)
{
	struct egr_dns_response *r = resp_alloc();
	int err = egr_dns_parse_response(p->b, p->n, r);

	free(r);
	return err;
}

static int parse_q(const struct pkt *p)
{
	struct egr_dns_query q;

	return egr_dns_parse_query(p->b, p->n, &q);
}

/* --- queries ------------------------------------------------------------ */

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
	    cmocka_unit_test(test_builders),
	    cmocka_unit_test(test_denial_builder),
	    cmocka_unit_test(test_filter_mixed),
	    cmocka_unit_test(test_filter_svcb_hints),
	    cmocka_unit_test(test_filter_svcb_malformed),
	    cmocka_unit_test(test_filter_none_and_all),
	    cmocka_unit_test(test_filter_tc_and_many),
	    cmocka_unit_test(test_filter_errors),
	    cmocka_unit_test(test_build_truncated),
	    cmocka_unit_test(test_entropy),
	    cmocka_unit_test(test_longest_label),
	    cmocka_unit_test(test_names),
	};

	return cmocka_run_group_tests_name("dnswire", tests, NULL, NULL);
}
