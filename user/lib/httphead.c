// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* HTTP/1.x request head parsing (httphead.h). */
#include <errno.h>
#include <string.h>
#include <strings.h>

#include "httphead.h"

static bool is_tchar(uint8_t c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Host [":" port] of RFC 9110 7.2, into out (lower case) and *port.
 * IPv6 literals come in brackets and are returned without them. */
static int parse_authority(const uint8_t *s, size_t n, struct egr_http_head *out)
{
	size_t hlen, i = 0;
	const uint8_t *h = s;
	unsigned long port = 0;

	if (n == 0)
		return -EBADMSG;
	if (s[0] == '[') {
		const uint8_t *close = memchr(s, ']', n);

		if (!close)
			return -EBADMSG;
		h = s + 1;
		hlen = (size_t)(close - h);
		i = (size_t)(close - s) + 1;
		if (hlen == 0)
			return -EBADMSG;
		for (size_t k = 0; k < hlen; k++)
			if (!(strchr("0123456789abcdefABCDEF:.", h[k]) && h[k]))
				return -EBADMSG;
	} else {
		while (i < n && s[i] != ':')
			i++;
		hlen = i;
		if (hlen && h[hlen - 1] == '.')
			hlen--;
		if (hlen == 0)
			return -EBADMSG;
		for (size_t k = 0, label = 0; k < hlen; k++) {
			uint8_t c = h[k];

			if (c == '.') {
				if (!label)
					return -EBADMSG;
				label = 0;
				continue;
			}
			if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			      (c >= '0' && c <= '9') || c == '-' || c == '_'))
				return -EBADMSG;
			if (++label > 63)
				return -EBADMSG;
		}
	}
	if (hlen >= EGR_HTTP_HOST_BUF)
		return -EBADMSG;
	if (i < n) {
		if (s[i] != ':' || i + 1 == n || n - i - 1 > 5)
			return -EBADMSG;
		for (size_t k = i + 1; k < n; k++) {
			if (s[k] < '0' || s[k] > '9')
				return -EBADMSG;
			port = port * 10 + (s[k] - '0');
		}
		if (port == 0 || port > 65535)
			return -EBADMSG;
	}
	for (size_t k = 0; k < hlen; k++)
		out->host[k] = (char)(h[k] >= 'A' && h[k] <= 'Z' ? h[k] - 'A' + 'a' : h[k]);
	out->host[hlen] = '\0';
	out->port = (uint16_t)port;
	return 0;
}

/* A Content-Length value: 1 to 18 digits, nothing else (no sign, no
 * list: "5, 5" is refused too). */
static int parse_length(const uint8_t *s, size_t n, int64_t *out)
{
	int64_t v = 0;

	if (n == 0 || n > 18)
		return -EBADMSG;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EBADMSG;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return 0;
}

/* The next CRLF-terminated line starting at off: [off, *eol). */
static int line(const uint8_t *buf, size_t len, size_t off, size_t *eol)
{
	for (size_t i = off; i < len; i++) {
		if (buf[i] == '\n')
			return -EBADMSG; /* bare LF */
		if (buf[i] == '\r') {
			if (i + 1 == len)
				return -EAGAIN;
			if (buf[i + 1] != '\n')
				return -EBADMSG;
			*eol = i;
			return 0;
		}
		if (buf[i] == 0)
			return -EBADMSG;
	}
	return -EAGAIN;
}

static int request_line(const uint8_t *s, size_t n, struct egr_http_head *out,
			struct egr_http_head *target)
{
	size_t m = 0, t0, t1;

	while (m < n && is_tchar(s[m]))
		m++;
	if (m == 0 || m >= EGR_HTTP_METHOD_BUF || m == n || s[m] != ' ')
		return -EBADMSG;
	memcpy(out->method, s, m);
	out->method[m] = '\0';
	if (strcmp(out->method, "CONNECT") == 0)
		return -EBADMSG; /* a tunnel to a host the proxy never sees */
	t0 = m + 1;
	t1 = t0;
	while (t1 < n && s[t1] > ' ' && s[t1] < 0x7f)
		t1++;
	if (t1 == t0 || t1 == n || s[t1] != ' ')
		return -EBADMSG;
	if (n - t1 - 1 != 8 || memcmp(s + t1 + 1, "HTTP/1.", 7) ||
	    (s[n - 1] != '0' && s[n - 1] != '1'))
		return -EBADMSG;
	out->minor = s[n - 1] - '0';
	/* absolute-form: its authority names the host too. */
	if (t1 - t0 > 7 && strncasecmp((const char *)s + t0, "http://", 7) == 0) {
		size_t a0 = t0 + 7, a1 = a0;

		while (a1 < t1 && s[a1] != '/' && s[a1] != '?' && s[a1] != '#')
			a1++;
		if (memchr(s + a0, '@', a1 - a0))
			return -EBADMSG;
		if (parse_authority(s + a0, a1 - a0, target))
			return -EBADMSG;
	} else if (s[t0] != '/' && !(t1 - t0 == 1 && s[t0] == '*')) {
		return -EBADMSG; /* https:// or authority-form through a plain proxy */
	}
	return 0;
}

int egr_http_head_parse(const uint8_t *buf, size_t len, struct egr_http_head *out)
{
	struct egr_http_head target = { 0 };
	size_t off = 0, eol, scan = len < EGR_HTTP_HEAD_MAX ? len : EGR_HTTP_HEAD_MAX;
	bool have_host = false, have_cl = false, have_te = false;
	int err;

	if (!buf || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	/* Does it start like a request at all: a token, then a space. */
	for (size_t i = 0; i < len && i < EGR_HTTP_METHOD_BUF; i++) {
		if (buf[i] == ' ') {
			if (i == 0)
				return -EPROTO;
			break;
		}
		if (!is_tchar(buf[i]))
			return -EPROTO;
		if (i + 1 == EGR_HTTP_METHOD_BUF)
			return -EPROTO;
	}
	err = line(buf, scan, 0, &eol);
	if (err)
		goto partial;
	err = request_line(buf, eol, out, &target);
	if (err)
		goto bad;
	off = eol + 2;
	for (;;) {
		const uint8_t *h;
		size_t colon, v0, v1;

		err = line(buf, scan, off, &eol);
		if (err)
			goto partial;
		if (eol == off)
			break; /* the blank line */
		h = buf + off;
		if (h[0] == ' ' || h[0] == '\t')
			goto bad; /* obsolete line folding */
		colon = 0;
		while (off + colon < eol && is_tchar(h[colon]))
			colon++;
		if (colon == 0 || off + colon == eol || h[colon] != ':')
			goto bad; /* also "Host :" with a space before the colon */
		v0 = colon + 1;
		v1 = eol - off;
		while (v0 < v1 && (h[v0] == ' ' || h[v0] == '\t'))
			v0++;
		while (v1 > v0 && (h[v1 - 1] == ' ' || h[v1 - 1] == '\t'))
			v1--;
		if (colon == 4 && strncasecmp((const char *)h, "host", 4) == 0) {
			if (have_host || parse_authority(h + v0, v1 - v0, out))
				goto bad;
			have_host = true;
		} else if (colon == 14 && strncasecmp((const char *)h, "content-length", 14) == 0) {
			if (have_cl || parse_length(h + v0, v1 - v0, &out->content_length))
				goto bad;
			have_cl = true;
		} else if (colon == 17 &&
			   strncasecmp((const char *)h, "transfer-encoding", 17) == 0) {
			/* Only "chunked" alone: anything else (gzip, a list, an
			 * unknown coding) the proxy cannot frame. */
			if (have_te || v1 - v0 != 7 || strncasecmp((const char *)h + v0, "chunked", 7))
				goto bad;
			have_te = true;
		} else if ((colon == 7 && strncasecmp((const char *)h, "upgrade", 7) == 0) ||
			   (colon == 14 && strncasecmp((const char *)h, "http2-settings", 14) == 0)) {
			out->upgrade = true;
		}
		off = eol + 2;
	}
	/* RFC 9112 6.1 and 6.3: both, or chunked in 1.0, is how smuggling
	 * starts; refuse rather than guess which the server will believe. */
	if ((have_cl && have_te) || (have_te && out->minor == 0))
		goto bad;
	out->chunked = have_te;
	if (!have_cl)
		out->content_length = -1;
	if (!have_host) {
		/* HTTP/1.1 requires Host; a 1.0 request may name the host in
		 * its target only. */
		if (!target.host[0] || out->minor == 1)
			goto bad;
		memcpy(out->host, target.host, sizeof(out->host));
		out->port = target.port;
	} else if (target.host[0] &&
		   (strcmp(target.host, out->host) || target.port != out->port)) {
		goto bad;
	}
	out->head_len = eol + 2;
	return 0;
partial:
	if (err == -EAGAIN && len >= EGR_HTTP_HEAD_MAX)
		err = -EBADMSG;
	if (err != -EAGAIN)
		goto bad;
	memset(out, 0, sizeof(*out));
	return -EAGAIN;
bad:
	memset(out, 0, sizeof(*out));
	return -EBADMSG;
}
