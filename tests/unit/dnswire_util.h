/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* What the DNS wire format's unit tests share (test_dnswire.c,
 * test_dnswire_filter.c): a packet builder and the parse wrappers. Include
 * it after cmocka.h and dnswire.h. */
#ifndef EGR_TEST_DNSWIRE_UTIL_H
#define EGR_TEST_DNSWIRE_UTIL_H

/* --- a tiny packet writer ---------------------------------------------- */

struct pkt {
	uint8_t b[8192];
	size_t n;
};

__attribute__((unused)) static void u8(struct pkt *p, uint8_t v)
{
	assert_true(p->n < sizeof(p->b));
	p->b[p->n++] = v;
}

__attribute__((unused)) static void u16(struct pkt *p, uint16_t v)
{
	u8(p, (uint8_t)(v >> 8));
	u8(p, (uint8_t)v);
}

__attribute__((unused)) static void u32(struct pkt *p, uint32_t v)
{
	u16(p, (uint16_t)(v >> 16));
	u16(p, (uint16_t)v);
}

__attribute__((unused)) static void bytes(struct pkt *p, const void *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		u8(p, ((const uint8_t *)v)[i]);
}

__attribute__((unused)) static void hdr(struct pkt *p, uint16_t id, uint16_t flags, uint16_t qd, uint16_t an, uint16_t ns,
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
__attribute__((unused)) static void name(struct pkt *p, const char *s)
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

__attribute__((unused)) static void ptr(struct pkt *p, uint16_t off)
{
	u16(p, (uint16_t)(0xc000 | off));
}

__attribute__((unused)) static void question(struct pkt *p, const char *qname, uint16_t qtype)
{
	name(p, qname);
	u16(p, qtype);
	u16(p, EGR_DNS_C_IN);
}

/* Fixed part of an RR after its owner. */
__attribute__((unused)) static void rrfix(struct pkt *p, uint16_t type, uint16_t cls, uint32_t ttl, uint16_t rdlen)
{
	u16(p, type);
	u16(p, cls);
	u32(p, ttl);
	u16(p, rdlen);
}

__attribute__((unused)) static void rr_a(struct pkt *p, const char *owner, uint32_t ttl, uint8_t a, uint8_t b, uint8_t c,
		 uint8_t d)
{
	name(p, owner);
	rrfix(p, EGR_DNS_T_A, EGR_DNS_C_IN, ttl, 4);
	u8(p, a);
	u8(p, b);
	u8(p, c);
	u8(p, d);
}

__attribute__((unused)) static size_t name_wire_len(const char *s)
{
	return *s ? strlen(s) + 2 : 1;
}

__attribute__((unused)) static void rr_cname(struct pkt *p, const char *owner, uint32_t ttl, const char *target)
{
	name(p, owner);
	rrfix(p, EGR_DNS_T_CNAME, EGR_DNS_C_IN, ttl, (uint16_t)name_wire_len(target));
	name(p, target);
}

__attribute__((unused)) static void opt(struct pkt *p, uint16_t udp, uint32_t ttl)
{
	u8(p, 0);
	rrfix(p, EGR_DNS_T_OPT, udp, ttl, 0);
}

#define RD   EGR_DNS_F_RD
#define RESP (EGR_DNS_F_QR | EGR_DNS_F_RD | EGR_DNS_F_RA)

__attribute__((unused)) static struct egr_dns_response *resp_alloc(void)
{
	struct egr_dns_response *r = malloc(sizeof(*r));

	assert_non_null(r);
	return r;
}

__attribute__((unused)) static int parse_r(const struct pkt *p)
{
	struct egr_dns_response *r = resp_alloc();
	int err = egr_dns_parse_response(p->b, p->n, r);

	free(r);
	return err;
}

__attribute__((unused)) static int parse_q(const struct pkt *p)
{
	struct egr_dns_query q;

	return egr_dns_parse_query(p->b, p->n, &q);
}

/* --- queries ------------------------------------------------------------ */

#endif /* EGR_TEST_DNSWIRE_UTIL_H */
