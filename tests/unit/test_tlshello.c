// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The ClientHello reader of the inspecting proxy (user/lib/tlshello.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tlshello.h"

struct buf {
	uint8_t b[40000];
	size_t n;
};

static void put8(struct buf *b, unsigned v)
{
	b->b[b->n++] = (uint8_t)v;
}

static void put16(struct buf *b, unsigned v)
{
	put8(b, v >> 8);
	put8(b, v & 0xff);
}

static void putn(struct buf *b, const void *p, size_t n)
{
	memcpy(b->b + b->n, p, n);
	b->n += n;
}

static void ext_sni(struct buf *e, const char *name)
{
	size_t n = strlen(name);

	put16(e, EGR_TLS_EXT_SNI);
	put16(e, (unsigned)n + 5);
	put16(e, (unsigned)n + 3);
	put8(e, 0);
	put16(e, (unsigned)n);
	putn(e, name, n);
}

static void ext_alpn(struct buf *e, const char *p1, const char *p2)
{
	size_t n1 = strlen(p1), n2 = strlen(p2);

	put16(e, EGR_TLS_EXT_ALPN);
	put16(e, (unsigned)(2 + 1 + n1 + 1 + n2));
	put16(e, (unsigned)(1 + n1 + 1 + n2));
	put8(e, (unsigned)n1);
	putn(e, p1, n1);
	put8(e, (unsigned)n2);
	putn(e, p2, n2);
}

static void ext_raw(struct buf *e, unsigned type, size_t len)
{
	put16(e, type);
	put16(e, (unsigned)len);
	memset(e->b + e->n, 0xab, len);
	e->n += len;
}

/* A ClientHello with the given extensions block, in records of at most
 * recmax bytes of payload. */
static void hello(struct buf *out, const struct buf *exts, size_t recmax)
{
	static struct buf body, hs;
	size_t off = 0;

	body.n = hs.n = out->n = 0;
	put16(&body, 0x0303);
	memset(body.b + body.n, 0x11, 32);
	body.n += 32;
	put8(&body, 32);
	memset(body.b + body.n, 0x22, 32);
	body.n += 32;
	put16(&body, 4);
	put16(&body, 0x1301);
	put16(&body, 0x1302);
	put8(&body, 1);
	put8(&body, 0);
	if (exts) {
		put16(&body, (unsigned)exts->n);
		putn(&body, exts->b, exts->n);
	}
	put8(&hs, 1);
	put8(&hs, (unsigned)(body.n >> 16));
	put16(&hs, (unsigned)(body.n & 0xffff));
	putn(&hs, body.b, body.n);
	while (off < hs.n) {
		size_t k = hs.n - off < recmax ? hs.n - off : recmax;

		put8(out, 22);
		put16(out, 0x0301);
		put16(out, (unsigned)k);
		putn(out, hs.b + off, k);
		off += k;
	}
}

static void test_sni_alpn(void **state)
{
	static struct buf e, h;
	struct egr_tls_hello th;

	e.n = 0;
	ext_raw(&e, 0x000a, 8);
	ext_sni(&e, "API.Example.COM.");
	ext_alpn(&e, "h2", "http/1.1");
	hello(&h, &e, 16384);
	assert_int_equal(egr_tls_hello_parse(h.b, h.n, &th), 0);
	assert_true(th.has_sni);
	assert_false(th.has_ech);
	assert_string_equal(th.sni, "api.example.com");
	assert_string_equal(th.alpn, "h2");
	assert_int_equal(th.version, 0x0303);
	/* Every strict prefix asks for more, never fails or succeeds. */
	for (size_t n = 0; n < h.n; n++)
		assert_int_equal(egr_tls_hello_parse(h.b, n, &th), -EAGAIN);
}

static void test_fragmented_records(void **state)
{
	static struct buf e, h;
	struct egr_tls_hello th;

	e.n = 0;
	ext_raw(&e, 0x0015, 3000); /* padding: a big hello */
	ext_sni(&e, "cdn.example.org");
	/* Split over records of 100 bytes, the way a hostile or odd client
	 * may send it. */
	hello(&h, &e, 100);
	assert_int_equal(egr_tls_hello_parse(h.b, h.n, &th), 0);
	assert_string_equal(th.sni, "cdn.example.org");
	for (size_t n = 0; n < h.n; n += 37)
		assert_int_equal(egr_tls_hello_parse(h.b, n, &th), -EAGAIN);
}

static void test_no_sni_and_ech(void **state)
{
	static struct buf e, h;
	struct egr_tls_hello th;

	hello(&h, NULL, 16384); /* no extensions at all */
	assert_int_equal(egr_tls_hello_parse(h.b, h.n, &th), 0);
	assert_false(th.has_sni);
	assert_string_equal(th.sni, "");

	e.n = 0;
	ext_raw(&e, 0x002b, 3);
	hello(&h, &e, 16384);
	assert_int_equal(egr_tls_hello_parse(h.b, h.n, &th), 0);
	assert_false(th.has_sni);

	e.n = 0;
	ext_sni(&e, "public.example.com");
	ext_raw(&e, EGR_TLS_EXT_ECH, 64);
	hello(&h, &e, 16384);
	assert_int_equal(egr_tls_hello_parse(h.b, h.n, &th), 0);
	assert_true(th.has_ech);
	assert_string_equal(th.sni, "public.example.com");

	e.n = 0;
	ext_raw(&e, EGR_TLS_EXT_ESNI, 10);
	hello(&h, &e, 16384);
	assert_int_equal(egr_tls_hello_parse(h.b, h.n, &th), 0);
	assert_true(th.has_ech);
}

static void test_bad_names(void **state)
{
	static const char *bad[] = { "", ".", "a..b", "a b", "x/y", "é.com",
				     ".lead.com" };
	static struct buf e, h;
	struct egr_tls_hello th;
	char label64[80];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		e.n = 0;
		ext_sni(&e, bad[i]);
		hello(&h, &e, 16384);
		assert_int_equal(egr_tls_hello_parse(h.b, h.n, &th), -EBADMSG);
	}
	memset(label64, 'a', 64);
	strcpy(label64 + 64, ".com");
	e.n = 0;
	ext_sni(&e, label64);
	hello(&h, &e, 16384);
	assert_int_equal(egr_tls_hello_parse(h.b, h.n, &th), -EBADMSG);
	/* A NUL inside the name must not cut it short into an allowed one. */
	e.n = 0;
	put16(&e, 0);
	put16(&e, 5 + 13);
	put16(&e, 3 + 13);
	put8(&e, 0);
	put16(&e, 13);
	putn(&e, "ok.com\0evil.x", 13);
	hello(&h, &e, 16384);
	assert_int_equal(egr_tls_hello_parse(h.b, h.n, &th), -EBADMSG);
}

static void test_malformed(void **state)
{
	static struct buf e, h;
	struct egr_tls_hello th;
	uint8_t http[] = "GET / HTTP/1.1\r\n";
	uint8_t alert[] = { 21, 3, 3, 0, 2, 2, 40 };

	assert_int_equal(egr_tls_hello_parse(http, sizeof(http) - 1, &th), -EPROTO);
	assert_int_equal(egr_tls_hello_parse(alert, sizeof(alert), &th), -EPROTO);
	/* Two SNI extensions: which one would the server use? */
	e.n = 0;
	ext_sni(&e, "good.example.com");
	ext_sni(&e, "evil.example.com");
	hello(&h, &e, 16384);
	assert_int_equal(egr_tls_hello_parse(h.b, h.n, &th), -EBADMSG);
	/* Two names in one SNI list. */
	e.n = 0;
	put16(&e, 0);
	put16(&e, 2 + 3 + 4 + 3 + 4);
	put16(&e, 3 + 4 + 3 + 4);
	put8(&e, 0);
	put16(&e, 4);
	putn(&e, "a.io", 4);
	put8(&e, 0);
	put16(&e, 4);
	putn(&e, "b.io", 4);
	hello(&h, &e, 16384);
	assert_int_equal(egr_tls_hello_parse(h.b, h.n, &th), -EBADMSG);
	/* An extension length running past its block. */
	e.n = 0;
	ext_sni(&e, "good.example.com");
	hello(&h, &e, 16384);
	h.b[h.n - 23] = 0xff; /* the SNI extension's length, high byte */
	assert_int_equal(egr_tls_hello_parse(h.b, h.n, &th), -EBADMSG);
	/* Not a ClientHello (a ServerHello type). */
	hello(&h, NULL, 16384);
	h.b[5] = 2;
	assert_int_equal(egr_tls_hello_parse(h.b, h.n, &th), -EBADMSG);
	/* A hello claiming more than the bound. */
	hello(&h, NULL, 16384);
	h.b[6] = 0x01;
	assert_int_equal(egr_tls_hello_parse(h.b, h.n, &th), -EBADMSG);
	/* Too large once reassembled. */
	e.n = 0;
	ext_raw(&e, 0x0015, 17000);
	hello(&h, &e, 16384);
	assert_int_equal(egr_tls_hello_parse(h.b, h.n, &th), -EBADMSG);
	/* A record of another type in the middle of the hello. */
	e.n = 0;
	ext_raw(&e, 0x0015, 300);
	ext_sni(&e, "x.example.com");
	hello(&h, &e, 100);
	h.b[105] = 23;
	assert_int_equal(egr_tls_hello_parse(h.b, h.n, &th), -EBADMSG);
	/* A zero-length record. */
	uint8_t empty[] = { 22, 3, 1, 0, 0 };
	assert_int_equal(egr_tls_hello_parse(empty, sizeof(empty), &th), -EBADMSG);
}

/* Where the hello's records end, and a record longer than the hello. */
static void test_records_len(void **state)
{
	static struct buf e, h, two;
	struct egr_tls_hello th;
	size_t first;

	e.n = 0;
	ext_sni(&e, "a.example.com");
	hello(&h, &e, 100);
	assert_int_equal(egr_tls_hello_parse(h.b, h.n, &th), 0);
	assert_int_equal(th.records_len, h.n);
	/* A second hello behind it is the proxy's to refuse: the parser
	 * says where the first ends. */
	first = h.n;
	two.n = 0;
	putn(&two, h.b, h.n);
	e.n = 0;
	ext_sni(&e, "evil.example.com");
	hello(&h, &e, 16384);
	putn(&two, h.b, h.n);
	assert_int_equal(egr_tls_hello_parse(two.b, two.n, &th), 0);
	assert_string_equal(th.sni, "a.example.com");
	assert_int_equal(th.records_len, first);
	/* One record holding the hello and more: refused, also before the
	 * rest of the record has arrived. */
	e.n = 0;
	ext_sni(&e, "a.example.com");
	hello(&h, &e, 16384);
	first = h.n;
	h.b[3] = (uint8_t)((first - 5 + 40) >> 8);
	h.b[4] = (uint8_t)((first - 5 + 40) & 0xff);
	assert_int_equal(egr_tls_hello_parse(h.b, first, &th), -EBADMSG);
	memset(h.b + first, 1, 40);
	assert_int_equal(egr_tls_hello_parse(h.b, first + 40, &th), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sni_alpn),
		cmocka_unit_test(test_fragmented_records),
		cmocka_unit_test(test_no_sni_and_ech),
		cmocka_unit_test(test_bad_names),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_records_len),
	};

	return cmocka_run_group_tests_name("tlshello", tests, NULL, NULL);
}
