// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target for user/lib/httphead.c: the input is a client's first
 * bytes. Checked promises: a parsed host is lower case with no space,
 * colon-free unless an IPv6 literal, and the head length lies within the
 * input; a strict prefix of the head is never complete; a body framing is
 * one of none, a length or chunked.
 *
 * The same input is then a whole client stream for user/lib/httpframe.c,
 * fed in pieces whose size the first byte picks: the framer never passes
 * more than it was given, never stalls with a whole buffer it cannot judge
 * (beyond its bounds it refuses), and finds the same heads however the
 * stream is cut.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "httpframe.h"
#include "httphead.h"

/* Walk the stream in pieces of step bytes; the heads found (up to 64,
 * their offsets) and the end state. */
struct walk {
	size_t heads[64], nheads, done;
	int err;
};

static void frame(const uint8_t *data, size_t size, size_t step, struct walk *w)
{
	struct egr_http_framer f = { 0 };
	size_t have = 0;

	memset(w, 0, sizeof(*w));
	while (w->done < size) {
		struct egr_http_head h;
		size_t pass;
		int r;

		have = have + step < size ? have + step : size;
		for (;;) {
			r = egr_http_framer_next(&f, data + w->done, have - w->done, &pass, &h);
			if (r < 0) {
				if (r != -EBADMSG && r != -EPROTO)
					abort();
				w->err = r;
				return;
			}
			if (r == 1) {
				if (!h.head_len || h.head_len > have - w->done)
					abort();
				if (w->nheads < 64)
					w->heads[w->nheads++] = w->done;
				egr_http_framer_body(&f, &h);
				w->done += h.head_len;
				continue;
			}
			if (pass > have - w->done)
				abort();
			if (!pass)
				break;
			w->done += pass;
		}
		if (have == size)
			break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct egr_http_head h, p;
	int err = egr_http_head_parse(data, size, &h);
	struct walk whole, cut;
	size_t len;

	frame(data, size, size ? size : 1, &whole);
	frame(data, size, size ? (size_t)data[0] % 31 + 1 : 1, &cut);
	/* Where the cut walk got, it saw the heads the whole one saw. */
	for (size_t i = 0; i < cut.nheads; i++)
		if (i >= whole.nheads || cut.heads[i] != whole.heads[i])
			abort();
	if (!cut.err && cut.nheads != whole.nheads)
		abort();

	if (err != 0 && err != -EAGAIN && err != -EPROTO && err != -EBADMSG)
		abort();
	if (err)
		return 0;
	len = strnlen(h.host, EGR_HTTP_HOST_BUF);
	if (len == 0 || len == EGR_HTTP_HOST_BUF)
		abort();
	for (size_t i = 0; i < len; i++)
		if ((h.host[i] >= 'A' && h.host[i] <= 'Z') || h.host[i] == ' ' ||
		    (unsigned char)h.host[i] > 0x7f)
			abort();
	if (h.head_len < 18 || h.head_len > size || h.head_len > EGR_HTTP_HEAD_MAX)
		abort();
	if (memcmp(data + h.head_len - 4, "\r\n\r\n", 4))
		abort();
	if (egr_http_head_parse(data, h.head_len - 1, &p) != -EAGAIN)
		abort();
	if ((h.chunked && h.content_length != -1) || h.content_length < -1)
		abort();
	return 0;
}
