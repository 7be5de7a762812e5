/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * HTTP/1.x request head reader for the inspecting proxy: the method and
 * the host the request names (its Host header, or the authority of an
 * absolute-form target, which must then agree). Hostile input: reads only
 * inside the buffer, allocates nothing, accepts only a strict subset of
 * RFC 9112 (CRLF line ends, no obsolete line folding, exactly one Host),
 * because a head two parsers read differently is how smuggling starts.
 */
#ifndef EGR_HTTPHEAD_H
#define EGR_HTTPHEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EGR_HTTP_HEAD_MAX 16384 /* request line + headers, bytes */
#define EGR_HTTP_HOST_BUF 254
#define EGR_HTTP_METHOD_BUF 16

struct egr_http_head {
	char method[EGR_HTTP_METHOD_BUF];
	char host[EGR_HTTP_HOST_BUF]; /* lower case, no port, no brackets, no trailing dot */
	uint16_t port;                /* from Host; 0 if none given */
	int minor;                    /* HTTP/1.<minor> */
	size_t head_len;              /* bytes up to and including the blank line */
	/* The body's framing (RFC 9112 6): exactly one of none, a
	 * Content-Length, or Transfer-Encoding: chunked. */
	int64_t content_length;       /* -1: no Content-Length */
	bool chunked;
	bool upgrade;                 /* an Upgrade or HTTP2-Settings header (h2c) */
};

/*
 * Returns 0 (complete head, *out filled), -EAGAIN (a valid prefix, more
 * bytes needed), -EPROTO (does not start like an HTTP/1.x request),
 * -EBADMSG (malformed, no or several Host headers, a host that is not a
 * host name or IP literal, a CONNECT request, a head larger than
 * EGR_HTTP_HEAD_MAX, a body framing two parsers could read differently:
 * Content-Length and Transfer-Encoding together, more than one of either,
 * a Content-Length that is not 1-18 digits, a Transfer-Encoding other than
 * "chunked" alone, or one in an HTTP/1.0 request).
 */
int egr_http_head_parse(const uint8_t *buf, size_t len, struct egr_http_head *out);

#endif /* EGR_HTTPHEAD_H */
