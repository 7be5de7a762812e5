// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * ClientHello parsing (tlshello.h), RFC 8446 section 4.1.2 and RFC 6066.
 * Every length is checked against what remains before it is used.
 */
#include <errno.h>
#include <string.h>

#include "tlshello.h"

#define REC_HANDSHAKE 22
#define HS_CLIENT_HELLO 1
#define REC_HDR 5
#define REC_MAX 16384 /* TLSPlaintext.length limit */

struct rd {
	const uint8_t *p;
	size_t n;
};

static int take(struct rd *r, size_t k, const uint8_t **out)
{
	if (r->n < k)
		return -EBADMSG;
	*out = r->p;
	r->p += k;
	r->n -= k;
	return 0;
}

static int u8(struct rd *r, unsigned *v)
{
	const uint8_t *p;

	if (take(r, 1, &p))
		return -EBADMSG;
	*v = p[0];
	return 0;
}

static int u16(struct rd *r, unsigned *v)
{
	const uint8_t *p;

	if (take(r, 2, &p))
		return -EBADMSG;
	*v = (unsigned)p[0] << 8 | p[1];
	return 0;
}

/* A sub-reader over the next len-prefixed vector (prefix of lenbytes). */
static int vec(struct rd *r, int lenbytes, struct rd *sub)
{
	unsigned len;
	int err = lenbytes == 1 ? u8(r, &len) : u16(r, &len);

	if (err)
		return err;
	sub->p = r->p;
	sub->n = len;
	return take(r, len, &sub->p) ? -EBADMSG : 0;
}

/* A host name as RFC 6066 wants it: letters, digits, '-', '_' (seen in
 * the wild) and dots, no empty label, at most 63 per label. Lower-cased;
 * one trailing dot dropped. */
static int copy_host(const uint8_t *s, size_t n, char *out)
{
	size_t label = 0;

	if (n && s[n - 1] == '.')
		n--;
	if (n == 0 || n > EGR_TLS_NAME_BUF - 1)
		return -EBADMSG;
	for (size_t i = 0; i < n; i++) {
		uint8_t c = s[i];

		if (c == '.') {
			if (label == 0)
				return -EBADMSG;
			label = 0;
		} else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
			   c == '_') {
			label++;
		} else if (c >= 'A' && c <= 'Z') {
			c = (uint8_t)(c - 'A' + 'a');
			label++;
		} else {
			return -EBADMSG;
		}
		if (label > 63)
			return -EBADMSG;
		out[i] = (char)c;
	}
	if (label == 0)
		return -EBADMSG;
	out[n] = '\0';
	return 0;
}

static int parse_sni(struct rd ext, struct egr_tls_hello *h)
{
	struct rd list, name;
	unsigned type;

	if (vec(&ext, 2, &list) || ext.n)
		return -EBADMSG;
	/* One host_name entry; RFC 6066 forbids two of the same type, and a
	 * second name the proxy did not judge must not ride along. */
	if (u8(&list, &type) || type != 0 || vec(&list, 2, &name) || list.n)
		return -EBADMSG;
	if (copy_host(name.p, name.n, h->sni))
		return -EBADMSG;
	h->has_sni = true;
	return 0;
}

static int parse_alpn(struct rd ext, struct egr_tls_hello *h)
{
	struct rd list, proto;

	if (vec(&ext, 2, &list) || ext.n || list.n == 0)
		return -EBADMSG;
	while (list.n) {
		if (vec(&list, 1, &proto) || proto.n == 0)
			return -EBADMSG;
		if (h->alpn[0])
			continue;
		/* Only for the record: keep it printable, cut it short. */
		for (size_t i = 0; i < proto.n && i < EGR_TLS_ALPN_BUF - 1; i++)
			h->alpn[i] = proto.p[i] >= 0x21 && proto.p[i] < 0x7f ? (char)proto.p[i] : '?';
	}
	return 0;
}

static int parse_body(struct rd r, struct egr_tls_hello *h)
{
	struct rd sid, suites, comp, exts;
	const uint8_t *rnd;
	/* Extension types seen, to refuse duplicates (RFC 8446 4.2): a bitmap
	 * of the types that matter, a duplicate of another type is harmless. */
	bool seen_sni = false, seen_alpn = false;
	unsigned ver;

	if (u16(&r, &ver) || take(&r, 32, &rnd))
		return -EBADMSG;
	h->version = (uint16_t)ver;
	if (vec(&r, 1, &sid) || sid.n > 32)
		return -EBADMSG;
	if (vec(&r, 2, &suites) || suites.n < 2 || suites.n % 2)
		return -EBADMSG;
	if (vec(&r, 1, &comp) || comp.n < 1)
		return -EBADMSG;
	if (r.n == 0)
		return 0; /* no extensions at all: no SNI */
	if (vec(&r, 2, &exts) || r.n)
		return -EBADMSG;
	while (exts.n) {
		struct rd data;
		unsigned type;
		int err = 0;

		if (u16(&exts, &type) || vec(&exts, 2, &data))
			return -EBADMSG;
		switch (type) {
		case EGR_TLS_EXT_SNI:
			if (seen_sni)
				return -EBADMSG;
			seen_sni = true;
			err = parse_sni(data, h);
			break;
		case EGR_TLS_EXT_ALPN:
			if (seen_alpn)
				return -EBADMSG;
			seen_alpn = true;
			err = parse_alpn(data, h);
			break;
		case EGR_TLS_EXT_ECH:
		case EGR_TLS_EXT_ESNI:
			h->has_ech = true;
			break;
		default:
			break;
		}
		if (err)
			return err;
	}
	return 0;
}

int egr_tls_hello_parse(const uint8_t *buf, size_t len, struct egr_tls_hello *out)
{
	/* The handshake message, reassembled from consecutive records. */
	uint8_t hs[EGR_TLS_HELLO_MAX];
	size_t hslen = 0, off = 0, need = 0;
	struct rd body;

	if (!buf || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	if (len == 0)
		return -EAGAIN;
	if (buf[0] != REC_HANDSHAKE)
		return -EPROTO;
	for (;;) {
		size_t rlen, k;

		if (len - off < REC_HDR) {
			/* The record header so far must still look like TLS. */
			if ((len - off >= 1 && buf[off] != REC_HANDSHAKE) ||
			    (len - off >= 2 && buf[off + 1] != 3))
				return off ? -EBADMSG : -EPROTO;
			return -EAGAIN;
		}
		if (buf[off] != REC_HANDSHAKE || buf[off + 1] != 3)
			return off ? -EBADMSG : -EPROTO;
		rlen = (size_t)buf[off + 3] << 8 | buf[off + 4];
		if (rlen == 0 || rlen > REC_MAX)
			return -EBADMSG;
		off += REC_HDR;
		k = len - off < rlen ? len - off : rlen;
		if (hslen + k > sizeof(hs))
			return -EBADMSG;
		memcpy(hs + hslen, buf + off, k);
		hslen += k;
		off += k;
		if (!need && hslen >= 4) {
			if (hs[0] != HS_CLIENT_HELLO)
				return -EBADMSG;
			need = 4 + ((size_t)hs[1] << 16 | (size_t)hs[2] << 8 | hs[3]);
			if (need > sizeof(hs) || need < 4 + 2 + 32 + 1 + 2 + 2 + 1 + 1)
				return -EBADMSG;
		}
		if (need && hslen >= need) {
			/* The record that ends the hello must end with it: the
			 * rest of a longer one is another handshake message,
			 * whether or not its bytes have arrived yet. */
			if (hslen > need || k < rlen)
				return -EBADMSG;
			break;
		}
		if (k < rlen)
			return -EAGAIN; /* this record is not complete yet */
		if (off == len)
			return -EAGAIN;
	}
	body.p = hs + 4;
	body.n = need - 4;
	if (parse_body(body, out)) {
		memset(out, 0, sizeof(*out));
		return -EBADMSG;
	}
	out->records_len = off;
	return 0;
}
