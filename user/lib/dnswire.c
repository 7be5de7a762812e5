// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * DNS wire format: see dnswire.h for the contract. Every read is bounds
 * checked against the packet length before it happens; every loop is bounded
 * by a header count (each record needs at least 11 bytes, so a count can
 * never make us do more work than the packet's length allows), a label
 * length, or EGR_DNS_MAX_JUMPS. No libm: the entropy uses its own log2.
 */
#include <errno.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "dnswire.h"

/* One resource record's fixed part. */
struct rr {
	uint16_t type;
	uint16_t cls;
	uint32_t ttl;
	uint16_t rdlen;
	size_t rdata; /* offset of the rdata */
	char owner[EGR_DNS_NAME_BUF];
};

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}

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
static int name_decode_case(const uint8_t *pkt, size_t len, size_t off, char *out, size_t *next,
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

static int name_decode(const uint8_t *pkt, size_t len, size_t off, char *out, size_t *next)
{
	return name_decode_case(pkt, len, off, out, next, true);
}

/* Read the record at *pos: owner (lower-cased if fold), fixed fields, rdata
 * bounds. */
static int rr_read_case(const uint8_t *pkt, size_t len, size_t *pos, struct rr *rr, bool fold)
{
	size_t p;
	int err;

	err = name_decode_case(pkt, len, *pos, rr->owner, &p, fold);
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

static int rr_read(const uint8_t *pkt, size_t len, size_t *pos, struct rr *rr)
{
	return rr_read_case(pkt, len, pos, rr, true);
}

/* An OPT RR: root owner, options that tile its rdata exactly. */
static int opt_check(const uint8_t *pkt, const struct rr *rr)
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

static bool name_eq(const char *a, const char *b)
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
static int parse_head(const uint8_t *pkt, size_t len, bool response, uint16_t *hdr, char *qname,
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
	err = name_decode(pkt, len, EGR_DNS_HDR_LEN, qname, &pos);
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
	err = parse_head(pkt, len, false, hdr, q->qname, &q->qtype, &q->qclass, &pos);
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
		err = rr_read(pkt, len, &pos, &rr);
		if (err)
			goto fail;
		if (rr.type != EGR_DNS_T_OPT)
			continue;
		if (q->edns) {
			err = -EINVAL;
			goto fail;
		}
		err = opt_check(pkt, &rr);
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
		err = name_decode(pkt, rr->rdata + rr->rdlen, rr->rdata, target, &next);
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
	err = parse_head(pkt, len, true, hdr, r->qname, &r->qtype, &r->qclass, &pos);
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
			err = rr_read(pkt, len, &pos, &rr);
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
				err = opt_check(pkt, &rr);
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
		if (name_eq(v[i].name, name))
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

				if (!name_eq(cn->owner, reached[i].name))
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
	       name_eq(q->qname, r->qname);
}

/* --- answer rewriting (egr_dns_filter_addrs) ---------------------------------- */

/* Names the encoder can point back to: label starts it wrote, each with the
 * (presentation) suffix that starts there. Bounded; past the bound names are
 * still written, just less compressed. */
#define ENC_TAB 64

struct enc {
	uint8_t *out;
	size_t cap, o;
	size_t n;
	uint16_t off[ENC_TAB];
	char suffix[ENC_TAB][EGR_DNS_NAME_BUF];
};

static int enc_bytes(struct enc *e, const void *b, size_t n)
{
	if (n > e->cap - e->o)
		return -EMSGSIZE;
	memcpy(e->out + e->o, b, n);
	e->o += n;
	return 0;
}

static int enc_16(struct enc *e, uint16_t v)
{
	uint8_t b[2];

	put16(b, v);
	return enc_bytes(e, b, 2);
}

/*
 * Write the presentation name pres (labels cannot contain '.', see
 * label_byte_ok) in wire form. With compress, its longest suffix the table
 * knows becomes a pointer (every table entry is a label start this encoder
 * wrote before, so the pointer goes backwards to the same name).
 */
static int enc_name(struct enc *e, const char *pres, bool compress)
{
	size_t start[EGR_DNS_NAME_BUF / 2 + 1], nl = 0, len = strlen(pres);
	int err;

	for (size_t i = 0; i < len; i++)
		if (i == 0 || pres[i - 1] == '.')
			start[nl++] = i;
	for (size_t l = 0; l < nl; l++) {
		const char *suf = pres + start[l];
		size_t llen = (l + 1 < nl ? start[l + 1] - 1 : len) - start[l];
		uint8_t c = (uint8_t)llen;

		if (compress) {
			for (size_t t = 0; t < e->n; t++) {
				if (!name_eq(e->suffix[t], suf))
					continue;
				return enc_16(e, (uint16_t)(0xc000 | e->off[t]));
			}
		}
		if (e->o <= 0x3fff && e->n < ENC_TAB) {
			e->off[e->n] = (uint16_t)e->o;
			memcpy(e->suffix[e->n], suf, len - start[l] + 1);
			e->n++;
		}
		err = enc_bytes(e, &c, 1);
		if (!err)
			err = enc_bytes(e, suf, llen);
		if (err)
			return err;
	}
	return enc_bytes(e, "", 1);
}

/*
 * Layout of the rdata of the types whose rdata holds domain names (RFC 3597
 * 4 lists the ones a receiver must decompress): `pre` fixed bytes, `names`
 * names, then exactly `post` fixed bytes. Names of the RFC 1035 types may be
 * compressed again; the others are written uncompressed (RFC 2782, 3597).
 * NAPTR is special: its pre part is 4 bytes and three character-strings.
 */
struct rdata_layout {
	uint16_t pre, post;
	uint8_t names;
	bool compress;
	bool naptr;
};

static bool rdata_layout_of(uint16_t type, struct rdata_layout *l)
{
	memset(l, 0, sizeof(*l));
	switch (type) {
	case 2: case 3: case 4: case 5: case 7: case 8: case 9: case 12: /* NS MD MF CNAME MB MG MR PTR */
		l->names = 1;
		l->compress = true;
		return true;
	case 6: /* SOA */
		l->names = 2;
		l->post = 20;
		l->compress = true;
		return true;
	case 14: /* MINFO */
		l->names = 2;
		l->compress = true;
		return true;
	case 15: /* MX */
		l->pre = 2;
		l->names = 1;
		l->compress = true;
		return true;
	case 17: /* RP */
		l->names = 2;
		return true;
	case 18: case 21: case 36: /* AFSDB RT KX */
		l->pre = 2;
		l->names = 1;
		return true;
	case 26: /* PX */
		l->pre = 2;
		l->names = 2;
		return true;
	case 33: /* SRV */
		l->pre = 6;
		l->names = 1;
		return true;
	case 35: /* NAPTR */
		l->naptr = true;
		l->names = 1;
		return true;
	case 39: /* DNAME */
		l->names = 1;
		return true;
	default:
		return false;
	}
}

/* Write rr's rdata (its rdlength first): names decoded and re-encoded,
 * everything else copied. */
static int enc_rdata(struct enc *e, const uint8_t *pkt, const struct rr *rr)
{
	size_t end = rr->rdata + rr->rdlen, pos = rr->rdata, lenpos = e->o, pre;
	struct rdata_layout l;
	int err;

	err = enc_16(e, 0);
	if (err)
		return err;
	if (!rdata_layout_of(rr->type, &l)) {
		err = enc_bytes(e, pkt + rr->rdata, rr->rdlen);
		goto done;
	}
	pre = l.pre;
	if (l.naptr) {
		pre = 4;
		for (int i = 0; i < 3; i++) {
			if (pre >= rr->rdlen)
				return -EBADMSG;
			pre += 1 + (size_t)pkt[rr->rdata + pre];
		}
	}
	if (pre > rr->rdlen)
		return -EBADMSG;
	err = enc_bytes(e, pkt + pos, pre);
	if (err)
		return err;
	pos += pre;
	for (unsigned int i = 0; i < l.names; i++) {
		char name[EGR_DNS_NAME_BUF];
		size_t next;

		err = name_decode_case(pkt, end, pos, name, &next, false);
		if (err)
			return err;
		err = enc_name(e, name, l.compress);
		if (err)
			return err;
		pos = next;
	}
	if (end - pos != l.post)
		return -EBADMSG;
	err = enc_bytes(e, pkt + pos, l.post);
done:
	if (err)
		return err;
	if (e->o - lenpos - 2 > 0xffff)
		return -EMSGSIZE;
	put16(e->out + lenpos, (uint16_t)(e->o - lenpos - 2));
	return 0;
}

/* At most this many records fit in a 65535-byte message (each takes at
 * least 11 bytes after the 12-byte header and a 5-byte question). */
#define MAX_RRS ((65535 - EGR_DNS_HDR_LEN - 5) / 11 + 1)
/* At most this many SVCB/HTTPS hint addresses (4 bytes each, at least). */
#define MAX_HINTS (65536 / 4)

#define SVC_KEY_IPV4HINT 4
#define SVC_KEY_IPV6HINT 6

static bool is_svcb(const struct rr *rr)
{
	return rr->cls == EGR_DNS_C_IN && (rr->type == EGR_DNS_T_SVCB || rr->type == EGR_DNS_T_HTTPS);
}

/* The address length of a hint SvcParamKey, 0 for any other key. */
static size_t hint_alen(uint16_t key)
{
	return key == SVC_KEY_IPV4HINT ? 4 : key == SVC_KEY_IPV6HINT ? 16 : 0;
}

/*
 * Pass 1 of an SVCB/HTTPS record (RFC 9460 2.2): SvcPriority, TargetName,
 * then SvcParams (key, length, value). Asks drop() about every address of
 * its ipv4hint and ipv6hint; *hidx numbers them across the message.
 */
static int svcb_scan(const uint8_t *pkt, const struct rr *rr, egr_dns_addr_drop_fn drop,
		     void *ctx, uint8_t *hintbits, size_t *hidx, size_t *ndrop)
{
	size_t end = rr->rdata + rr->rdlen, p;
	char name[EGR_DNS_NAME_BUF];
	int err;

	if (rr->rdlen < 3)
		return -EBADMSG;
	err = name_decode_case(pkt, end, rr->rdata + 2, name, &p, false);
	if (err)
		return err;
	while (p < end) {
		uint16_t key, vlen;
		size_t alen;

		if (end - p < 4)
			return -EBADMSG;
		key = get16(pkt + p);
		vlen = get16(pkt + p + 2);
		p += 4;
		if (vlen > end - p)
			return -EBADMSG;
		alen = hint_alen(key);
		if (alen && (!vlen || vlen % alen))
			return -EBADMSG;
		for (size_t off = 0; alen && off < vlen; off += alen, (*hidx)++) {
			if (*hidx >= MAX_HINTS)
				return -EBADMSG;
			if (drop(ctx, alen == 4 ? AF_INET : AF_INET6, pkt + p + off)) {
				hintbits[*hidx / 8] |= (uint8_t)(1u << (*hidx % 8));
				(*ndrop)++;
			}
		}
		p += vlen;
	}
	return 0;
}

/* Pass 2 of an SVCB/HTTPS record: the TargetName written uncompressed (as
 * RFC 9460 wants), hint addresses pass 1 marked left out, a hint left empty
 * removed with its key; every other SvcParam copied as it is. */
static int enc_svcb(struct enc *e, const uint8_t *pkt, const struct rr *rr,
		    const uint8_t *hintbits, size_t *hidx)
{
	size_t end = rr->rdata + rr->rdlen, lenpos = e->o, p;
	char name[EGR_DNS_NAME_BUF];
	int err;

	err = enc_16(e, 0);
	if (!err)
		err = enc_bytes(e, pkt + rr->rdata, 2);
	if (!err)
		err = name_decode_case(pkt, end, rr->rdata + 2, name, &p, false);
	if (!err)
		err = enc_name(e, name, false);
	while (!err && p < end) {
		uint16_t key = get16(pkt + p), vlen = get16(pkt + p + 2);
		size_t alen = hint_alen(key), kept = 0, first = *hidx;

		p += 4;
		if (!alen) {
			err = enc_bytes(e, pkt + p - 4, 4 + (size_t)vlen);
			p += vlen;
			continue;
		}
		for (size_t off = 0; off < vlen; off += alen, (*hidx)++)
			if (!(hintbits[*hidx / 8] & (1u << (*hidx % 8))))
				kept++;
		if (kept) {
			err = enc_16(e, key);
			if (!err)
				err = enc_16(e, (uint16_t)(kept * alen));
			for (size_t i = first, off = 0; !err && off < vlen; off += alen, i++)
				if (!(hintbits[i / 8] & (1u << (i % 8))))
					err = enc_bytes(e, pkt + p + off, alen);
		}
		p += vlen;
	}
	if (err)
		return err;
	if (e->o - lenpos - 2 > 0xffff)
		return -EMSGSIZE;
	put16(e->out + lenpos, (uint16_t)(e->o - lenpos - 2));
	return 0;
}

int egr_dns_filter_addrs(const uint8_t *pkt, size_t len, egr_dns_addr_drop_fn drop, void *ctx,
			 uint8_t *out, size_t outlen, size_t *olen, size_t *ndropped)
{
	uint8_t dropbits[(MAX_RRS + 7) / 8], hintbits[(MAX_HINTS + 7) / 8];
	uint16_t hdr[6], qtype, qclass, counts[3] = { 0 };
	char qname[EGR_DNS_NAME_BUF];
	struct enc enc, *e = &enc; /* 16 KiB: fixed, whatever the input */
	size_t qend, pos, nrr = 0, ndrop = 0, nhint = 0, nhintdrop = 0;
	struct rr rr;
	int err;

	if (olen)
		*olen = 0;
	if (ndropped)
		*ndropped = 0;
	if (!pkt || !drop || !olen || !ndropped || (!out && outlen))
		return -EINVAL;
	if (len > 65535)
		return -EMSGSIZE;
	err = parse_head(pkt, len, true, hdr, qname, &qtype, &qclass, &qend);
	if (err)
		return err;

	/* Pass 1: validate every record, ask about each address once. */
	memset(dropbits, 0, sizeof(dropbits));
	memset(hintbits, 0, sizeof(hintbits));
	pos = qend;
	for (int sec = 0; sec < 3; sec++) {
		for (unsigned int i = 0; i < hdr[3 + sec]; i++, nrr++) {
			if (pos == len && (hdr[1] & EGR_DNS_F_TC))
				goto pass2;
			err = rr_read(pkt, len, &pos, &rr);
			if (err)
				return err;
			if (nrr >= MAX_RRS)
				return -EBADMSG; /* cannot happen: each record is >= 11 bytes */
			if (rr.type == EGR_DNS_T_OPT) {
				if (sec != 2)
					return -EBADMSG;
				err = opt_check(pkt, &rr);
				if (err)
					return err;
				continue;
			}
			if (is_svcb(&rr)) {
				err = svcb_scan(pkt, &rr, drop, ctx, hintbits, &nhint, &nhintdrop);
				if (err)
					return err;
				continue;
			}
			if (rr.type != EGR_DNS_T_A && rr.type != EGR_DNS_T_AAAA)
				continue;
			if (rr.cls != EGR_DNS_C_IN) {
				/* An address in CHAOS, Hesiod or ANY class: no
				 * client has a use for it that a rebinding
				 * filter should let through. */
				dropbits[nrr / 8] |= (uint8_t)(1u << (nrr % 8));
				ndrop++;
				continue;
			}
			if (rr.rdlen != (rr.type == EGR_DNS_T_A ? 4 : 16))
				return -EBADMSG;
			if (drop(ctx, rr.type == EGR_DNS_T_A ? AF_INET : AF_INET6, pkt + rr.rdata)) {
				dropbits[nrr / 8] |= (uint8_t)(1u << (nrr % 8));
				ndrop++;
			}
		}
	}
pass2:
	if (!ndrop && !nhintdrop)
		return 0;

	/* Pass 2: header, the question as it is, the records kept. */
	memset(e, 0, offsetof(struct enc, suffix));
	e->out = out;
	e->cap = outlen;
	if (qend > outlen)
		return -EMSGSIZE;
	/* No compression pointer can be in the question (name_decode() wants
	 * one to point after the header and before the name), so its bytes
	 * are all in place. */
	memmove(out + EGR_DNS_HDR_LEN, pkt + EGR_DNS_HDR_LEN, qend - EGR_DNS_HDR_LEN);
	e->o = EGR_DNS_HDR_LEN;
	err = enc_name(e, qname, false); /* fills the table; rewritten below */
	if (err)
		return err;
	memmove(out + EGR_DNS_HDR_LEN, pkt + EGR_DNS_HDR_LEN, qend - EGR_DNS_HDR_LEN);
	e->o = qend;
	pos = qend;
	nrr = 0;
	nhint = 0;
	for (int sec = 0; sec < 3; sec++) {
		for (unsigned int i = 0; i < hdr[3 + sec]; i++, nrr++) {
			uint8_t fixed[8];

			if (pos == len && (hdr[1] & EGR_DNS_F_TC))
				goto done;
			err = rr_read_case(pkt, len, &pos, &rr, false);
			if (err)
				return err;
			if (dropbits[nrr / 8] & (1u << (nrr % 8)))
				continue;
			err = enc_name(e, rr.owner, rr.type != EGR_DNS_T_OPT);
			if (err)
				return err;
			put16(fixed, rr.type);
			put16(fixed + 2, rr.cls);
			put32(fixed + 4, rr.ttl);
			err = enc_bytes(e, fixed, sizeof(fixed));
			if (!err)
				err = is_svcb(&rr) ? enc_svcb(e, pkt, &rr, hintbits, &nhint) :
						     enc_rdata(e, pkt, &rr);
			if (err)
				return err;
			counts[sec]++;
		}
	}
done:
	put16(out, hdr[0]);
	/* The data changed: nothing in it is authenticated any more. */
	put16(out + 2, (uint16_t)(hdr[1] & ~EGR_DNS_F_AD));
	put16(out + 4, 1);
	put16(out + 6, counts[0]);
	put16(out + 8, counts[1]);
	put16(out + 10, counts[2]);
	*olen = e->o;
	*ndropped = ndrop + nhintdrop;
	return 0;
}

#define OPT_RR_LEN 11

static int build_rcode(const uint8_t *query, size_t qlen, uint16_t rcode, uint16_t flags,
		       uint8_t *out, size_t outlen, size_t *olen)
{
	struct egr_dns_query q;
	size_t need;
	int err;

	if (olen)
		*olen = 0;
	if (!out || !olen)
		return -EINVAL;
	err = egr_dns_parse_query(query, qlen, &q);
	if (err)
		return err;
	/* The question starts right after the header and, as a compression
	 * pointer there could only point into the header, which name_decode()
	 * refuses, its bytes are all in place: copy them verbatim. */
	need = q.question_end + (q.edns ? OPT_RR_LEN : 0);
	if (need > outlen)
		return -ENOSPC;
	put16(out, q.id);
	put16(out + 2, (uint16_t)(EGR_DNS_F_QR | (q.flags & (EGR_DNS_F_RD | EGR_DNS_F_CD)) |
				  EGR_DNS_F_RA | flags | rcode));
	put16(out + 4, 1);
	put16(out + 6, 0);
	put16(out + 8, 0);
	put16(out + 10, q.edns ? 1 : 0);
	memmove(out + EGR_DNS_HDR_LEN, query + EGR_DNS_HDR_LEN, q.question_end - EGR_DNS_HDR_LEN);
	if (q.edns) {
		/* Minimal OPT RR (RFC 6891 7): root owner, our UDP size,
		 * extended rcode 0, version 0, DO echoed, no options. */
		uint8_t *p = out + q.question_end;

		p[0] = 0;
		put16(p + 1, EGR_DNS_T_OPT);
		put16(p + 3, EGR_DNS_EDNS_UDP_SIZE);
		put32(p + 5, q.edns_do ? EGR_DNS_EDNS_DO : 0);
		put16(p + 9, 0);
	}
	*olen = need;
	return 0;
}

int egr_dns_build_refused(const uint8_t *query, size_t qlen, uint8_t *out, size_t outlen,
			  size_t *olen)
{
	return build_rcode(query, qlen, EGR_DNS_R_REFUSED, 0, out, outlen, olen);
}

int egr_dns_build_servfail(const uint8_t *query, size_t qlen, uint8_t *out, size_t outlen,
			   size_t *olen)
{
	return build_rcode(query, qlen, EGR_DNS_R_SERVFAIL, 0, out, outlen, olen);
}

int egr_dns_build_truncated(const uint8_t *query, size_t qlen, uint8_t *out, size_t outlen,
			    size_t *olen)
{
	return build_rcode(query, qlen, EGR_DNS_R_NOERROR, EGR_DNS_F_TC, out, outlen, olen);
}

/* log2(x) for x >= 1 without libm: x = m * 2^e, m in [1, 2), and
 * ln(m) = 2 atanh((m - 1) / (m + 1)) with |y| < 1/3, a fast series. */
static double log2_pos(double x)
{
	const double ln2 = 0.69314718055994530942;
	double y, y2, term, sum = 0;
	int e = 0;

	if (x <= 0)
		return 0;
	while (x >= 2) {
		x /= 2;
		e++;
	}
	while (x < 1) {
		x *= 2;
		e--;
	}
	y = (x - 1) / (x + 1);
	y2 = y * y;
	term = y;
	for (int k = 1; k < 60 && term != 0; k += 2) {
		sum += term / k;
		term *= y2;
	}
	return e + 2 * sum / ln2;
}

double egr_dns_label_entropy(const char *label, size_t len)
{
	size_t counts[256] = {0};
	double sum = 0, h;

	if (!label || !len)
		return 0;
	for (size_t i = 0; i < len; i++)
		counts[(unsigned char)label[i]]++;
	/* H = log2(n) - (1/n) sum(c log2 c) */
	for (int i = 0; i < 256; i++)
		if (counts[i] > 1)
			sum += (double)counts[i] * log2_pos((double)counts[i]);
	h = log2_pos((double)len) - sum / (double)len;
	return h < 0 ? 0 : h;
}

size_t egr_dns_longest_label(const char *name)
{
	size_t best = 0, cur = 0;

	if (!name)
		return 0;
	for (; *name; name++) {
		if (*name == '.') {
			cur = 0;
			continue;
		}
		if (++cur > best)
			best = cur;
	}
	return best;
}

const char *egr_dns_type_name(uint16_t type)
{
	switch (type) {
	case EGR_DNS_T_A:
		return "A";
	case EGR_DNS_T_NS:
		return "NS";
	case EGR_DNS_T_CNAME:
		return "CNAME";
	case EGR_DNS_T_SOA:
		return "SOA";
	case EGR_DNS_T_NULL:
		return "NULL";
	case EGR_DNS_T_PTR:
		return "PTR";
	case EGR_DNS_T_MX:
		return "MX";
	case EGR_DNS_T_TXT:
		return "TXT";
	case EGR_DNS_T_AAAA:
		return "AAAA";
	case EGR_DNS_T_SRV:
		return "SRV";
	case EGR_DNS_T_OPT:
		return "OPT";
	case EGR_DNS_T_SVCB:
		return "SVCB";
	case EGR_DNS_T_HTTPS:
		return "HTTPS";
	case EGR_DNS_T_ANY:
		return "ANY";
	default:
		return NULL;
	}
}

const char *egr_dns_rcode_name(uint16_t rcode)
{
	switch (rcode) {
	case EGR_DNS_R_NOERROR:
		return "NOERROR";
	case EGR_DNS_R_FORMERR:
		return "FORMERR";
	case EGR_DNS_R_SERVFAIL:
		return "SERVFAIL";
	case EGR_DNS_R_NXDOMAIN:
		return "NXDOMAIN";
	case EGR_DNS_R_NOTIMP:
		return "NOTIMP";
	case EGR_DNS_R_REFUSED:
		return "REFUSED";
	case EGR_DNS_R_BADVERS:
		return "BADVERS";
	default:
		return NULL;
	}
}
