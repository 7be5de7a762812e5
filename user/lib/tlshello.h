/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * TLS ClientHello reader for the inspecting proxy: the server name (SNI),
 * the first ALPN protocol and whether the hello carries Encrypted Client
 * Hello. Hostile input: the parser only reads inside the buffer it is
 * given, allocates nothing, and reassembles a hello spread over several
 * TLS records into a fixed buffer of EGR_TLS_HELLO_MAX bytes.
 */
#ifndef EGR_TLSHELLO_H
#define EGR_TLSHELLO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The largest ClientHello (handshake header included) accepted; the proxy
 * reads at most this many bytes plus record headers before it decides. */
#define EGR_TLS_HELLO_MAX 16384
#define EGR_TLS_NAME_BUF  254 /* 253 characters + NUL */
#define EGR_TLS_ALPN_BUF  33

#define EGR_TLS_EXT_SNI       0x0000
#define EGR_TLS_EXT_ALPN      0x0010
#define EGR_TLS_EXT_ECH       0xfe0d /* encrypted_client_hello */
#define EGR_TLS_EXT_ESNI      0xffce /* the draft before ECH */

struct egr_tls_hello {
	char sni[EGR_TLS_NAME_BUF];   /* lower case, no trailing dot; "" if none */
	char alpn[EGR_TLS_ALPN_BUF];  /* first protocol offered; "" if none */
	bool has_sni;
	bool has_ech;                 /* ECH or ESNI extension present */
	uint16_t version;             /* legacy_version of the hello */
	size_t records_len;           /* bytes of the input its records span */
};

/*
 * Parse the first bytes a client sent. Returns
 *   0         a complete ClientHello, *out filled;
 *   -EAGAIN   a valid prefix: more bytes are needed;
 *   -EPROTO   not a TLS handshake record (another protocol);
 *   -EBADMSG  malformed, an SNI that is not a valid host name, or a hello
 *             larger than EGR_TLS_HELLO_MAX.
 */
int egr_tls_hello_parse(const uint8_t *buf, size_t len, struct egr_tls_hello *out);

#endif /* EGR_TLSHELLO_H */
