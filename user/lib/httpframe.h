/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The request framing of one HTTP/1.x connection, client to server, for the
 * inspecting proxy: where each request head starts, so that every request,
 * not only the first, is judged (docs/inspect.md). After a head the body is
 * framed by its Content-Length or by chunked coding (RFC 9112 6, 7.1); a
 * request with neither has no body, and the next byte starts the next head.
 * Strict: a chunk size that is not 1-15 hex digits, an extension with a
 * control character, a bare LF, a chunk not ended by CRLF or a trailer
 * that is not a header line cannot be framed (-EBADMSG), since a server
 * that read it another way would see a request the proxy did not.
 * Pure: no I/O, no allocation; the caller keeps the bytes.
 */
#ifndef EGR_HTTPFRAME_H
#define EGR_HTTPFRAME_H

#include <stddef.h>
#include <stdint.h>

#include "httphead.h"

#define EGR_HTTP_CHUNK_LINE_MAX 4096 /* a chunk-size line with its extensions */
#define EGR_HTTP_TRAILER_MAX    EGR_HTTP_HEAD_MAX

enum egr_http_fstate {
	EGR_HF_HEAD,        /* a request head is next */
	EGR_HF_BODY,        /* remain bytes of a Content-Length body */
	EGR_HF_CHUNK_SIZE,  /* a chunk-size line */
	EGR_HF_CHUNK_DATA,  /* remain bytes of chunk data */
	EGR_HF_CHUNK_END,   /* the CRLF after chunk data */
	EGR_HF_TRAILER,     /* trailer lines until the blank one */
};

struct egr_http_framer {
	enum egr_http_fstate state;
	uint64_t remain;
	size_t trailer;     /* trailer bytes so far */
	uint64_t requests;  /* heads seen */
};

/* The body of the request whose head h the caller just passed on. */
void egr_http_framer_body(struct egr_http_framer *f, const struct egr_http_head *h);

/*
 * Walk buf[0, len), the bytes after those already passed. Returns
 *   1        a whole request head starts at buf (*h filled, nothing
 *            consumed): judge it, then egr_http_framer_body() and pass
 *            h->head_len bytes;
 *   0        *pass bytes (0: more are needed) are body or framing and may
 *            be forwarded;
 *   -EPROTO  the next head does not start like HTTP/1.x;
 *   -EBADMSG the bytes cannot be framed (a malformed head, see
 *            egr_http_head_parse(), or chunked coding).
 */
int egr_http_framer_next(struct egr_http_framer *f, const uint8_t *buf, size_t len,
			 size_t *pass, struct egr_http_head *h);

/* Bytes that may pass without being looked at (the rest of a body or of
 * chunk data; 0 otherwise), and passing n <= that many of them unseen
 * (the caller splices them). */
uint64_t egr_http_framer_opaque(const struct egr_http_framer *f);
void egr_http_framer_skip(struct egr_http_framer *f, uint64_t n);

#endif /* EGR_HTTPFRAME_H */
