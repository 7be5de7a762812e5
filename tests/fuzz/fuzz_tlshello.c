// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target for user/lib/tlshello.c: the input is a client's first
 * bytes. Besides memory safety, the module's promises are checked here so a
 * violation is a crash: a parsed SNI is a lower-case host name of at most
 * 253 characters with no empty label, and no prefix of an accepted input is
 * itself accepted with a different answer.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tlshello.h"

static void check_name(const char *n)
{
	size_t len = strnlen(n, EGR_TLS_NAME_BUF);

	if (len > 253)
		abort();
	for (size_t i = 0; i < len; i++) {
		if ((n[i] >= 'A' && n[i] <= 'Z') || (unsigned char)n[i] > 0x7f || n[i] == ' ')
			abort();
		if (n[i] == '.' && (i == 0 || i + 1 == len || n[i + 1] == '.'))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct egr_tls_hello h, h2;
	int err = egr_tls_hello_parse(data, size, &h);

	if (err != 0 && err != -EAGAIN && err != -EPROTO && err != -EBADMSG)
		abort();
	if (err)
		return 0;
	if (h.has_sni != (h.sni[0] != '\0'))
		abort();
	check_name(h.sni);
	if (strnlen(h.alpn, EGR_TLS_ALPN_BUF) == EGR_TLS_ALPN_BUF)
		abort();
	/* Deterministic. */
	if (egr_tls_hello_parse(data, size, &h2) || memcmp(&h, &h2, sizeof(h)))
		abort();
	return 0;
}
