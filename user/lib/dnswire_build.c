// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * DNS replies egressd writes itself (REFUSED, SERVFAIL, truncated, and a
 * policy denial with its Extended DNS Error) from a parsed query, and the label measures the exfiltration checks use
 * (entropy without libm, the longest label), and type and rcode names.
 */
#include <errno.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "dnswire.h"
#include "dnswire_int.h"

#define OPT_RR_LEN 11
#define EDE_OPT_HDR 6 /* OPTION-CODE, OPTION-LENGTH, INFO-CODE (RFC 8914 2) */

/* An RFC 8914 Extended DNS Error for the OPT RR, or none (text NULL). */
struct ede {
	uint16_t code;
	const char *text;
	size_t len;
};

static int build_rcode(const uint8_t *query, size_t qlen, uint16_t rcode, uint16_t flags,
		       const struct ede *ede, uint8_t *out, size_t outlen, size_t *olen)
{
	struct egr_dns_query q;
	size_t need, opt_len = OPT_RR_LEN;
	int err;

	if (olen)
		*olen = 0;
	if (!out || !olen)
		return -EINVAL;
	err = egr_dns_parse_query(query, qlen, &q);
	if (err)
		return err;
	/* The question starts right after the header and, as a compression
	 * pointer there could only point into the header, which egr_dnsw_name_decode()
	 * refuses, its bytes are all in place: copy them verbatim. */
	if (ede)
		opt_len += EDE_OPT_HDR + ede->len;
	need = q.question_end + (q.edns ? opt_len : 0);
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
		 * extended rcode 0, version 0, DO echoed, no options but
		 * the EDE. A query without OPT gets none (RFC 6891 7: such a
		 * requestor implements none of EDNS), hence no EDE either. */
		uint8_t *p = out + q.question_end;

		p[0] = 0;
		put16(p + 1, EGR_DNS_T_OPT);
		put16(p + 3, EGR_DNS_EDNS_UDP_SIZE);
		put32(p + 5, q.edns_do ? EGR_DNS_EDNS_DO : 0);
		put16(p + 9, (uint16_t)(opt_len - OPT_RR_LEN));
		if (ede) {
			put16(p + 11, EGR_DNS_OPT_EDE);
			put16(p + 13, (uint16_t)(2 + ede->len));
			put16(p + 15, ede->code);
			memcpy(p + 17, ede->text, ede->len);
		}
	}
	*olen = need;
	return 0;
}

int egr_dns_build_refused(const uint8_t *query, size_t qlen, uint8_t *out, size_t outlen,
			  size_t *olen)
{
	return build_rcode(query, qlen, EGR_DNS_R_REFUSED, 0, NULL, out, outlen, olen);
}

int egr_dns_build_servfail(const uint8_t *query, size_t qlen, uint8_t *out, size_t outlen,
			   size_t *olen)
{
	return build_rcode(query, qlen, EGR_DNS_R_SERVFAIL, 0, NULL, out, outlen, olen);
}

int egr_dns_build_truncated(const uint8_t *query, size_t qlen, uint8_t *out, size_t outlen,
			    size_t *olen)
{
	return build_rcode(query, qlen, EGR_DNS_R_NOERROR, EGR_DNS_F_TC, NULL, out, outlen, olen);
}

int egr_dns_build_denial(const uint8_t *query, size_t qlen, uint16_t rcode, uint16_t ede_code,
			 const char *text, uint8_t *out, size_t outlen, size_t *olen)
{
	struct ede e = { .code = ede_code, .text = text ? text : "" };

	if (olen)
		*olen = 0;
	if (rcode != EGR_DNS_R_NXDOMAIN && rcode != EGR_DNS_R_REFUSED)
		return -EINVAL;
	e.len = strnlen(e.text, EGR_DNS_EDE_TEXT_MAX + 1);
	if (e.len > EGR_DNS_EDE_TEXT_MAX)
		return -EINVAL;
	/* EXTRA-TEXT is UTF-8 (RFC 8914 2); ours is printable ASCII only. */
	for (size_t i = 0; i < e.len; i++)
		if ((unsigned char)e.text[i] < 0x20 || (unsigned char)e.text[i] > 0x7e)
			return -EINVAL;
	return build_rcode(query, qlen, rcode, 0, &e, out, outlen, olen);
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
