// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The inspecting proxy past the first request (docs/inspect.md "What is
 * judged"): client bytes go to the destination through the connection's
 * hello buffer, not splice(), while they need judging.
 *
 * - HTTP/1.x: for the whole connection. Bodies are framed by their
 *   Content-Length or chunked coding (user/lib/httpframe.c), so the start
 *   of every later request head is known; each head is judged like the
 *   first (its Host on this destination, no Upgrade) before a byte of it
 *   passes. What cannot be framed is refused: the connection is reset.
 * - TLS: until the destination sent its first byte (the client's first
 *   flight), the records after the ClientHello are walked: a change cipher
 *   spec, an alert or application data (early data) pass, a handshake
 *   record (a second ClientHello the proxy would not judge) is refused.
 *   Then the relay splices.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>

#include "clock.h"
#include "httpframe.h"
#include "inspect_int.h"
#include "log.h"

#define TLS_REC_MAX (16384 + 256) /* TLSCiphertext.length limit */
/* Body bytes worth a splice rather than a copy through the buffer. */
#define SPLICE_MIN 4096

const char *egr_insp_head_verdict(struct conn *c, const struct egr_http_head *h)
{
	/* h2c: after a 101 the bytes are HTTP/2, which is not framed here. */
	if (h->upgrade)
		return "upgrade";
	return egr_insp_judge_name(c, h->host);
}

/* A later request passed: once relaying, a request to another allowed
 * host makes the connection's bytes that host's in the audit record from
 * now on; it gets its own (sampled) allow event. */
static void later_request(struct conn *c, const struct egr_http_head *h)
{
	char keep[EGR_TLS_NAME_BUF];

	if (c->state != S_HELLO && strcmp(c->name, h->host)) {
		egr_insp_note_dest(c);
		memcpy(c->name, h->host, sizeof(c->name));
		c->noted = false;
	}
	log_debug("inspect: sandbox %u: http request %llu to %s allowed", c->sb->id,
		  (unsigned long long)c->fr.requests + 1, h->host);
	if (!egr_insp_allow_sample(c->p))
		return;
	memcpy(keep, c->name, sizeof(keep));
	memcpy(c->name, h->host, sizeof(c->name));
	egr_insp_emit(c, true, false, "allowed");
	memcpy(c->name, keep, sizeof(c->name));
}

static const char *walk_http(struct conn *c, char *bad)
{
	for (;;) {
		struct egr_http_head h;
		size_t pass;
		const char *why;
		int r = egr_http_framer_next(&c->fr, c->hello + c->hclear, c->hlen - c->hclear,
					     &pass, &h);

		if (r < 0) {
			snprintf(bad, EGR_TLS_NAME_BUF, "%s", c->name);
			return r == -EPROTO ? "unknown_protocol" : "malformed_http";
		}
		if (r == 1) {
			if ((why = egr_insp_head_verdict(c, &h))) {
				memcpy(bad, h.host, EGR_TLS_NAME_BUF);
				return why;
			}
			later_request(c, &h);
			egr_http_framer_body(&c->fr, &h);
			c->hclear += h.head_len;
			continue;
		}
		if (!pass)
			return NULL;
		c->hclear += pass;
	}
}

static const char *walk_tls(struct conn *c, char *bad)
{
	while (c->hclear < c->hlen) {
		const uint8_t *r = c->hello + c->hclear;
		size_t left = c->hlen - c->hclear;

		if (c->trec) {
			size_t k = left < c->trec ? left : c->trec;

			c->trec -= (uint32_t)k;
			c->hclear += k;
			continue;
		}
		if (left < 5)
			return NULL;
		snprintf(bad, EGR_TLS_NAME_BUF, "%s", c->name);
		if (r[0] == 0x16)
			return "second_hello";
		if ((r[0] != 0x14 && r[0] != 0x15 && r[0] != 0x17) || r[1] != 3)
			return "malformed_tls";
		c->trec = (uint32_t)r[3] << 8 | r[4];
		if (!c->trec || c->trec > TLS_REC_MAX)
			return "malformed_tls";
		c->hclear += 5;
	}
	return NULL;
}

const char *egr_insp_filter_walk(struct conn *c, char *bad)
{
	if (c->proto && !strcmp(c->proto, "http"))
		return walk_http(c, bad);
	if (c->flight_done) {
		c->hclear = c->hlen;
		return NULL;
	}
	return walk_tls(c, bad);
}

/* A request or record after the first refused on a relayed connection:
 * counted and reported with what it named, and reset (the destination may
 * be half-way through a response: no 403 can be put in front of it). */
static void refuse_later(struct conn *c, const char *bad, const char *why)
{
	char keep[EGR_TLS_NAME_BUF];

	c->p->st.denied++;
	c->sb->denied++;
	log_debug("inspect: sandbox %u: %s %s refused on a relayed connection: %s", c->sb->id,
		  c->proto, bad[0] ? bad : "(no name)", why);
	memcpy(keep, c->name, sizeof(keep));
	memcpy(c->name, bad, sizeof(c->name));
	egr_insp_emit(c, false, false, why);
	memcpy(c->name, keep, sizeof(c->name));
	egr_insp_conn_free(c, true);
}

int egr_insp_filter_pump(struct conn *c)
{
	char bad[EGR_TLS_NAME_BUF] = "";
	const char *why;
	int moved = 0;
	ssize_t n;

	/* Body bytes spliced before go first, in order. */
	if (c->incu) {
		n = splice(c->pcu[0], NULL, c->up.fd, NULL, c->incu,
			   SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
		if (n > 0) {
			c->incu -= (size_t)n;
			c->bytes_out += (uint64_t)n;
			moved = 1;
		} else if (n < 0 && errno != EAGAIN) {
			egr_insp_conn_free(c, true);
			return -1;
		}
		if (c->incu)
			return moved;
	}
	/* A body the framer need not see (its length is known) is spliced
	 * as it would be unfiltered, once the buffer is empty. */
	if (c->hlen == 0 && !c->eof_c && c->proto[0] == 'h' &&
	    egr_http_framer_opaque(&c->fr) >= SPLICE_MIN) {
		uint64_t want = egr_http_framer_opaque(&c->fr);

		n = splice(c->cl.fd, NULL, c->pcu[1], NULL,
			   want < PIPE_CHUNK ? (size_t)want : PIPE_CHUNK,
			   SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
		if (n > 0) {
			egr_http_framer_skip(&c->fr, (uint64_t)n);
			c->incu += (size_t)n;
			return 1;
		}
		if (n == 0) {
			c->eof_c = true;
		} else if (errno != EAGAIN) {
			egr_insp_conn_free(c, true);
			return -1;
		} else {
			return moved;
		}
	}
	if (c->hsent < c->hclear) {
		n = send(c->up.fd, c->hello + c->hsent, c->hclear - c->hsent,
			 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			c->hsent += (size_t)n;
			c->bytes_out += (uint64_t)n;
			moved = 1;
		} else if (n < 0 && errno != EAGAIN) {
			egr_insp_conn_free(c, true);
			return -1;
		}
		if (c->hsent < c->hclear)
			return moved; /* the destination is not taking more yet */
	}
	if (c->hsent) {
		memmove(c->hello, c->hello + c->hsent, c->hlen - c->hsent);
		c->hlen -= c->hsent;
		c->hclear -= c->hsent;
		c->hsent = 0;
	}
	/* TLS: the destination spoke, the first flight is over. */
	if (c->proto[0] == 't' && (c->bytes_in || c->inuc))
		c->flight_done = true;
	if (c->flight_done && c->hlen == 0) {
		c->filter = false; /* splice from now on */
		free(c->hello);
		c->hello = NULL;
		return 1;
	}
	if (!c->eof_c && c->hlen < EGR_INSPECT_HELLO_MAX) {
		n = recv(c->cl.fd, c->hello + c->hlen, EGR_INSPECT_HELLO_MAX - c->hlen,
			 MSG_DONTWAIT);
		if (n > 0) {
			c->hlen += (size_t)n;
			moved = 1;
		} else if (n == 0) {
			c->eof_c = true;
		} else if (errno != EAGAIN) {
			egr_insp_conn_free(c, true);
			return -1;
		}
	}
	if (c->hclear < c->hlen && (why = egr_insp_filter_walk(c, bad))) {
		refuse_later(c, bad, why);
		return -1;
	}
	if (c->hclear > c->hsent)
		moved = 1;
	else if (c->hlen == EGR_INSPECT_HELLO_MAX) {
		/* Full of bytes nothing can frame (cannot happen with heads
		 * bounded by EGR_HTTP_HEAD_MAX; fail closed all the same). */
		refuse_later(c, c->name, "hello_too_large");
		return -1;
	}
	/* The client is done: what never framed (half a head) is dropped. */
	if (c->eof_c && c->hsent == c->hclear && !c->shut_u) {
		shutdown(c->up.fd, SHUT_WR);
		c->shut_u = true;
	}
	return moved;
}
