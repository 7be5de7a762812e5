// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * DNS answer rewriting (egr_dns_filter_addrs, dnswire.h): a response rebuilt
 * without the addresses a caller drops, A/AAAA records and SVCB/HTTPS
 * address hints alike, with names re-encoded and re-compressed. Every read
 * is bounds checked as in dnswire.c; the output never grows past the input.
 */
#include <errno.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "dnswire.h"
#include "dnswire_int.h"

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
				if (!egr_dnsw_name_eq(e->suffix[t], suf))
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

		err = egr_dnsw_name_decode_case(pkt, end, pos, name, &next, false);
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
	err = egr_dnsw_name_decode_case(pkt, end, rr->rdata + 2, name, &p, false);
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
		err = egr_dnsw_name_decode_case(pkt, end, rr->rdata + 2, name, &p, false);
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
	err = egr_dnsw_parse_head(pkt, len, true, hdr, qname, &qtype, &qclass, &qend);
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
			err = egr_dnsw_rr_read(pkt, len, &pos, &rr);
			if (err)
				return err;
			if (nrr >= MAX_RRS)
				return -EBADMSG; /* cannot happen: each record is >= 11 bytes */
			if (rr.type == EGR_DNS_T_OPT) {
				if (sec != 2)
					return -EBADMSG;
				err = egr_dnsw_opt_check(pkt, &rr);
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
	/* No compression pointer can be in the question (egr_dnsw_name_decode() wants
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
			err = egr_dnsw_rr_read_case(pkt, len, &pos, &rr, false);
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
