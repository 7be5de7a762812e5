// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * DNS wire format: see dnswire.h for the contract. Every read is bounds
 * checked against the packet length before it happens; every loop is bounded
 * by a header count (each record needs at least 11 bytes, so a count can
 * never make us do more work than the packet's length allows), a label
 * length, or EGR_DNS_MAX_JUMPS. This file reads names, records and whole
 * queries and responses; dnswire_filter.c rewrites answers, dnswire_build.c
 * builds replies and measures labels (no libm: the entropy has its own log2).
 */
#include <errno.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "dnswire.h"
#include "dnswire_int.h"

/* Label bytes we accept: printable ASCII except '.' and '\\' (see dnswire.h). */
static bool label_byte_ok(uint8_t b)
{
	return b >= 0x21 && b <= 0x7e && b != '.' && b != '\\';
}

/*
 * Decode the name at off into out (EGR_DNS_NAME_BUF bytes), lower-cased
 * presentation form. *next is the offset just past the name's bytes at off
 * (past its first compression pointer if it has one).
 *
 * seg is the start of the segment being read: the name itself, then each
 * pointer's target. A pointer must land after the header and strictly before
 * seg, so segment starts strictly decrease and no offset is read twice by
 * the same segment chain: no loops, even without the jump bound.
 */
int egr_dnsw_name_decode_case(const uint8_t *pkt, size_t len, size_t off, char *out, size_t *next,
			    bool fold)
{
	size_t pos = off, seg = off, end = 0, wire = 0, o = 0;
	unsigned int jumps = 0;
	bool jumped = false;

	for (;;) {
		uint8_t c;

		if (pos >= len)
			return -EBADMSG;
		c = pkt[pos];
		if ((c & 0xc0) == 0xc0) {
			size_t ptr;

			if (len - pos < 2)
				return -EBADMSG;
			ptr = ((size_t)(c & 0x3f) << 8) | pkt[pos + 1];
			if (!jumped) {
				end = pos + 2;
				jumped = true;
			}
			if (++jumps > EGR_DNS_MAX_JUMPS)
				return -EBADMSG;
			if (ptr < EGR_DNS_HDR_LEN || ptr >= seg)
				return -EBADMSG;
			pos = seg = ptr;
			continue;
		}
		if (c & 0xc0) /* 0x40 (extended, RFC 6891) and 0x80: reserved */
			return -EBADMSG;
		if (c == 0) {
			if (!jumped)
				end = pos + 1;
			break;
		}
		if ((size_t)c > len - pos - 1)
			return -EBADMSG;
		wire += 1 + (size_t)c;
		/* + 1 for the root label still to come */
		if (wire + 1 > EGR_DNS_WIRE_MAX)
			return -EBADMSG;
		/* o = wire - 1 <= 253 after this label: it fits out */
		if (o)
			out[o++] = '.';
		for (size_t i = 0; i < c; i++) {
			uint8_t b = pkt[pos + 1 + i];

			if (!label_byte_ok(b))
				return -EBADMSG;
			if (fold && b >= 'A' && b <= 'Z')
				b = (uint8_t)(b - 'A' + 'a');
			out[o++] = (char)b;
		}
		pos += 1 + (size_t)c;
	}
	out[o] = '\0';
	*next = end;
	return 0;
}

int egr_dnsw_name_decode(const uint8_t *pkt, size_t len, size_t off, char *out, size_t *next)
{
	return egr_dnsw_name_decode_case(pkt, len, off, out, next, true);
}

/* Read the record at *pos: owner (lower-cased if fold), fixed fields, rdata
 * bounds. */
int egr_dnsw_rr_read_case(const uint8_t *pkt, size_t len, size_t *pos, struct rr *rr, bool fold)
{
	size_t p;
	int err;

	err = egr_dnsw_name_decode_case(pkt, len, *pos, rr->owner, &p, fold);
	if (err)
		return err;
	if (len - p < 10)
		return -EBADMSG;
	rr->type = get16(pkt + p);
	rr->cls = get16(pkt + p + 2);
	rr->ttl = get32(pkt + p + 4);
	rr->rdlen = get16(pkt + p + 8);
	p += 10;
	if (rr->rdlen > len - p)
		return -EBADMSG;
	rr->rdata = p;
	*pos = p + rr->rdlen;
	return 0;
}

int egr_dnsw_rr_read(const uint8_t *pkt, size_t len, size_t *pos, struct rr *rr)
{
	return egr_dnsw_rr_read_case(pkt, len, pos, rr, true);
}

/* An OPT RR: root owner, options that tile its rdata exactly. */
int egr_dnsw_opt_check(const uint8_t *pkt, const struct rr *rr)
{
	size_t p = rr->rdata, end = rr->rdata + rr->rdlen;

	if (rr->owner[0] != '\0')
		return -EBADMSG;
	while (p < end) {
		uint16_t olen;

		if (end - p < 4)
			return -EBADMSG;
		olen = get16(pkt + p + 2);
		p += 4;
		if (olen > end - p)
			return -EBADMSG;
		p += olen;
	}
	return 0;
}

bool egr_dnsw_name_eq(const char *a, const char *b)
{
	for (;; a++, b++) {
		unsigned char x = (unsigned char)*a, y = (unsigned char)*b;

		if (x >= 'A' && x <= 'Z')
			x = (unsigned char)(x - 'A' + 'a');
		if (y >= 'A' && y <= 'Z')
			y = (unsigned char)(y - 'A' + 'a');
		if (x != y)
			return false;
		if (!x)
			return true;
	}
}

/* Header and question, shared by both directions. */
int egr_dnsw_parse_head(const uint8_t *pkt, size_t len, bool response, uint16_t *hdr, char *qname,
		      uint16_t *qtype, uint16_t *qclass, size_t *qend)
{
	size_t pos;
	int err;

	if (len < EGR_DNS_HDR_LEN)
		return -EBADMSG;
	for (int i = 0; i < 6; i++)
		hdr[i] = get16(pkt + 2 * i);
	if (!!(hdr[1] & EGR_DNS_F_QR) != response)
		return -EINVAL;
	if (EGR_DNS_OPCODE(hdr[1]) != 0)
		return -EOPNOTSUPP;
	if (hdr[2] != 1)
		return -EINVAL;
	err = egr_dnsw_name_decode(pkt, len, EGR_DNS_HDR_LEN, qname, &pos);
	if (err)
		return err;
	if (len - pos < 4)
		return -EBADMSG;
	*qtype = get16(pkt + pos);
	*qclass = get16(pkt + pos + 2);
	*qend = pos + 4;
	return 0;
}

int egr_dns_parse_query(const uint8_t *pkt, size_t len, struct egr_dns_query *q)
{
	uint16_t hdr[6];
	struct rr rr;
	size_t pos;
	int err;

	if (!q)
		return -EINVAL;
	memset(q, 0, sizeof(*q));
	if (!pkt)
		return -EINVAL;
	err = egr_dnsw_parse_head(pkt, len, false, hdr, q->qname, &q->qtype, &q->qclass, &pos);
	if (err)
		goto fail;
	/* A standard query carries nothing in the answer and authority sections. */
	if (hdr[3] || hdr[4]) {
		err = -EINVAL;
		goto fail;
	}
	q->id = hdr[0];
	q->flags = hdr[1];
	q->arcount = hdr[5];
	q->question_end = pos;
	for (unsigned int i = 0; i < hdr[5]; i++) {
		err = egr_dnsw_rr_read(pkt, len, &pos, &rr);
		if (err)
			goto fail;
		if (rr.type != EGR_DNS_T_OPT)
			continue;
		if (q->edns) {
			err = -EINVAL;
			goto fail;
		}
		err = egr_dnsw_opt_check(pkt, &rr);
		if (err)
			goto fail;
		q->edns = true;
		q->edns_udp_size = rr.cls;
		q->edns_version = (uint8_t)(rr.ttl >> 16);
		q->edns_do = !!(rr.ttl & EGR_DNS_EDNS_DO);
	}
	return 0;
fail:
	memset(q, 0, sizeof(*q));
	return err;
}

/* Keep an answer-section record if it is one we collect and there is room. */
static int answer_keep(const uint8_t *pkt, struct egr_dns_response *r, const struct rr *rr)
{
	uint32_t ttl = rr->ttl > INT32_MAX ? 0 : rr->ttl; /* RFC 2181 8 */
	size_t next;
	int err;

	if (rr->cls != EGR_DNS_C_IN)
		return 0;
	switch (rr->type) {
	case EGR_DNS_T_A:
	case EGR_DNS_T_AAAA: {
		size_t alen = rr->type == EGR_DNS_T_A ? 4 : 16;
		struct egr_dns_rr_addr *a;

		if (rr->rdlen != alen)
			return -EBADMSG;
		if (r->naddrs == EGR_DNS_MAX_ANSWERS) {
			r->dropped++;
			return 0;
		}
		a = &r->addrs[r->naddrs++];
		a->type = rr->type;
		a->ttl = ttl;
		memcpy(a->addr, pkt + rr->rdata, alen);
		memcpy(a->owner, rr->owner, sizeof(a->owner));
		return 0;
	}
	case EGR_DNS_T_CNAME: {
		char target[EGR_DNS_NAME_BUF];
		struct egr_dns_rr_cname *c;

		/* The target's bytes must fill the rdata exactly: a name that
		 * ends early or runs past it is malformed. */
		if (rr->rdlen == 0)
			return -EBADMSG;
		err = egr_dnsw_name_decode(pkt, rr->rdata + rr->rdlen, rr->rdata, target, &next);
		if (err)
			return err;
		if (next != rr->rdata + rr->rdlen)
			return -EBADMSG;
		if (r->ncnames == EGR_DNS_MAX_CNAMES) {
			r->dropped++;
			return 0;
		}
		c = &r->cnames[r->ncnames++];
		c->ttl = ttl;
		memcpy(c->owner, rr->owner, sizeof(c->owner));
		memcpy(c->target, target, sizeof(c->target));
		return 0;
	}
	default:
		return 0;
	}
}

int egr_dns_parse_response(const uint8_t *pkt, size_t len, struct egr_dns_response *r)
{
	uint16_t hdr[6];
	struct rr rr;
	size_t pos;
	int err;

	if (!r)
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	if (!pkt)
		return -EINVAL;
	err = egr_dnsw_parse_head(pkt, len, true, hdr, r->qname, &r->qtype, &r->qclass, &pos);
	if (err)
		goto fail;
	r->id = hdr[0];
	r->flags = hdr[1];
	r->rcode = hdr[1] & EGR_DNS_F_RCODE;
	r->tc = !!(hdr[1] & EGR_DNS_F_TC);
	r->ancount = hdr[3];
	r->nscount = hdr[4];
	r->arcount = hdr[5];
	for (int sec = 0; sec < 3; sec++) {
		for (unsigned int i = 0; i < hdr[3 + sec]; i++) {
			if (pos == len && r->tc) {
				/* A truncated response may stop at a record
				 * boundary short of its counts. */
				r->short_sections = true;
				return 0;
			}
			err = egr_dnsw_rr_read(pkt, len, &pos, &rr);
			if (err)
				goto fail;
			if (rr.type == EGR_DNS_T_OPT) {
				if (sec != 2) {
					err = -EBADMSG;
					goto fail;
				}
				if (r->edns) {
					err = -EINVAL;
					goto fail;
				}
				err = egr_dnsw_opt_check(pkt, &rr);
				if (err)
					goto fail;
				r->edns = true;
				r->rcode |= (uint16_t)((rr.ttl >> 24) << 4);
				continue;
			}
			if (sec == 0) {
				err = answer_keep(pkt, r, &rr);
				if (err)
					goto fail;
			}
		}
	}
	return 0;
fail:
	memset(r, 0, sizeof(*r));
	return err;
}

struct reach {
	const char *name;
	uint32_t ttl;
};

static const struct reach *reach_find(const struct reach *v, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (egr_dnsw_name_eq(v[i].name, name))
			return &v[i];
	return NULL;
}

int egr_dns_answer_addrs(const struct egr_dns_response *r, const char *qname,
			 struct egr_dns_addr *out, size_t max, size_t *n)
{
	/* Each CNAME adds at most one name (its target, once): 1 + ncnames. */
	struct reach reached[1 + EGR_DNS_MAX_CNAMES];
	size_t nreached = 1, head = 0, ncn, nad, cnt = 0;

	if (n)
		*n = 0;
	if (!r || !qname || !n || (!out && max))
		return -EINVAL;
	ncn = r->ncnames < EGR_DNS_MAX_CNAMES ? r->ncnames : EGR_DNS_MAX_CNAMES;
	nad = r->naddrs < EGR_DNS_MAX_ANSWERS ? r->naddrs : EGR_DNS_MAX_ANSWERS;

	reached[0].name = qname;
	reached[0].ttl = UINT32_MAX;
	/* Breadth first, one layer per hop. */
	for (unsigned int hop = 0; hop < EGR_DNS_MAX_CHAIN && head < nreached; hop++) {
		size_t layer_end = nreached;

		for (size_t i = head; i < layer_end; i++) {
			for (size_t c = 0; c < ncn; c++) {
				const struct egr_dns_rr_cname *cn = &r->cnames[c];
				uint32_t ttl;

				if (!egr_dnsw_name_eq(cn->owner, reached[i].name))
					continue;
				if (reach_find(reached, nreached, cn->target))
					continue;
				if (nreached == sizeof(reached) / sizeof(reached[0]))
					continue;
				ttl = cn->ttl < reached[i].ttl ? cn->ttl : reached[i].ttl;
				reached[nreached].name = cn->target;
				reached[nreached].ttl = ttl;
				nreached++;
			}
		}
		head = layer_end;
	}

	for (size_t i = 0; i < nad; i++) {
		const struct egr_dns_rr_addr *a = &r->addrs[i];
		const struct reach *via = reach_find(reached, nreached, a->owner);
		int family = a->type == EGR_DNS_T_A ? AF_INET : AF_INET6;
		size_t alen = a->type == EGR_DNS_T_A ? 4 : 16;
		uint32_t ttl;
		size_t j;

		if (!via)
			continue;
		ttl = a->ttl < via->ttl ? a->ttl : via->ttl;
		for (j = 0; j < cnt; j++)
			if (out[j].family == family && !memcmp(out[j].addr, a->addr, alen))
				break;
		if (j < cnt) {
			if (ttl < out[j].ttl)
				out[j].ttl = ttl;
			continue;
		}
		if (cnt == max) {
			*n = cnt;
			return -ENOSPC;
		}
		memset(&out[cnt], 0, sizeof(out[cnt]));
		out[cnt].family = family;
		out[cnt].ttl = ttl;
		memcpy(out[cnt].addr, a->addr, alen);
		cnt++;
	}
	*n = cnt;
	return 0;
}

bool egr_dns_response_matches(const struct egr_dns_query *q, const struct egr_dns_response *r)
{
	return q && r && q->id == r->id && q->qtype == r->qtype && q->qclass == r->qclass &&
	       egr_dnsw_name_eq(q->qname, r->qname);
}
