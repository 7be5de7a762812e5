// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* HTTP/1.x request framing (httpframe.h). */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "httpframe.h"

void egr_http_framer_body(struct egr_http_framer *f, const struct egr_http_head *h)
{
	f->requests++;
	f->trailer = 0;
	if (h->chunked) {
		f->state = EGR_HF_CHUNK_SIZE;
	} else if (h->content_length > 0) {
		f->state = EGR_HF_BODY;
		f->remain = (uint64_t)h->content_length;
	} else {
		f->state = EGR_HF_HEAD;
	}
}

/* A CRLF-ended line at buf within max bytes: 1 (*n = its length without
 * the CRLF), 0 (not yet whole), -EBADMSG (bare CR or LF, NUL, too long). */
static int line(const uint8_t *buf, size_t len, size_t max, size_t *n)
{
	for (size_t i = 0; i < len && i < max; i++) {
		if (buf[i] == '\n' || buf[i] == 0)
			return -EBADMSG;
		if (buf[i] == '\r') {
			if (i + 1 == len)
				return 0;
			if (buf[i + 1] != '\n')
				return -EBADMSG;
			*n = i;
			return 1;
		}
	}
	return len < max ? 0 : -EBADMSG;
}

static int hexval(uint8_t c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* chunk-size [ ";" extensions ]: 1-15 hex digits, then nothing or ';' and
 * visible characters, spaces and tabs only. */
static int chunk_size(const uint8_t *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	size_t i = 0;

	while (i < n && hexval(s[i]) >= 0) {
		if (i == 15)
			return -EBADMSG;
		v = v << 4 | (uint64_t)hexval(s[i]);
		i++;
	}
	if (i == 0 || (i < n && s[i] != ';'))
		return -EBADMSG;
	for (; i < n; i++)
		if ((s[i] < 0x20 && s[i] != '\t') || s[i] == 0x7f)
			return -EBADMSG;
	*out = v;
	return 0;
}

static bool is_tchar(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* A trailer field line: a token, ':', then no control but HTAB. */
static int trailer_line(const uint8_t *s, size_t n)
{
	size_t i = 0;

	while (i < n && is_tchar(s[i]))
		i++;
	if (i == 0 || i == n || s[i] != ':')
		return -EBADMSG;
	for (i++; i < n; i++)
		if ((s[i] < 0x20 && s[i] != '\t') || s[i] == 0x7f)
			return -EBADMSG;
	return 0;
}

int egr_http_framer_next(struct egr_http_framer *f, const uint8_t *buf, size_t len,
			 size_t *pass, struct egr_http_head *h)
{
	size_t n;
	int r;

	if (!f || !pass || !h || (!buf && len))
		return -EINVAL;
	*pass = 0;
	if (len == 0)
		return 0;
	switch (f->state) {
	case EGR_HF_HEAD:
		r = egr_http_head_parse(buf, len, h);
		if (r == -EAGAIN)
			return 0;
		return r == 0 ? 1 : r;
	case EGR_HF_BODY:
	case EGR_HF_CHUNK_DATA:
		*pass = len < f->remain ? len : (size_t)f->remain;
		f->remain -= *pass;
		if (!f->remain)
			f->state = f->state == EGR_HF_BODY ? EGR_HF_HEAD : EGR_HF_CHUNK_END;
		return 0;
	case EGR_HF_CHUNK_END:
		if (buf[0] != '\r' || (len > 1 && buf[1] != '\n'))
			return -EBADMSG;
		if (len < 2)
			return 0;
		*pass = 2;
		f->state = EGR_HF_CHUNK_SIZE;
		return 0;
	case EGR_HF_CHUNK_SIZE:
		r = line(buf, len, EGR_HTTP_CHUNK_LINE_MAX, &n);
		if (r <= 0)
			return r;
		if (chunk_size(buf, n, &f->remain))
			return -EBADMSG;
		*pass = n + 2;
		f->state = f->remain ? EGR_HF_CHUNK_DATA : EGR_HF_TRAILER;
		return 0;
	case EGR_HF_TRAILER:
		if (f->trailer >= EGR_HTTP_TRAILER_MAX)
			return -EBADMSG;
		r = line(buf, len, EGR_HTTP_TRAILER_MAX - f->trailer, &n);
		if (r <= 0)
			return r;
		if (n && trailer_line(buf, n))
			return -EBADMSG;
		*pass = n + 2;
		f->trailer += n + 2;
		if (!n)
			f->state = EGR_HF_HEAD;
		return 0;
	}
	return -EBADMSG;
}

uint64_t egr_http_framer_opaque(const struct egr_http_framer *f)
{
	return f->state == EGR_HF_BODY || f->state == EGR_HF_CHUNK_DATA ? f->remain : 0;
}

void egr_http_framer_skip(struct egr_http_framer *f, uint64_t n)
{
	if (n > egr_http_framer_opaque(f))
		n = egr_http_framer_opaque(f);
	f->remain -= n;
	if (!f->remain && f->state == EGR_HF_BODY)
		f->state = EGR_HF_HEAD;
	else if (!f->remain && f->state == EGR_HF_CHUNK_DATA)
		f->state = EGR_HF_CHUNK_END;
}
