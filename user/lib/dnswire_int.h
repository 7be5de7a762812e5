/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Internal to the DNS wire code (dnswire.c, dnswire_filter.c,
 * dnswire_build.c): the record reader and byte helpers its files share.
 * Not an API: dnswire.h is. */
#ifndef EGR_DNSWIRE_INT_H
#define EGR_DNSWIRE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dnswire.h"

/* One resource record's fixed part. */
struct rr {
	uint16_t type;
	uint16_t cls;
	uint32_t ttl;
	uint16_t rdlen;
	size_t rdata; /* offset of the rdata */
	char owner[EGR_DNS_NAME_BUF];
};

static inline uint16_t get16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static inline uint32_t get32(const uint8_t *p)
{
	return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}

/* The name at off in presentation form (lower-cased if fold) into
 * out[EGR_DNS_NAME_BUF]; *next: the offset just past its bytes at off.
 * 0 or -errno. */
int egr_dnsw_name_decode_case(const uint8_t *pkt, size_t len, size_t off, char *out,
			      size_t *next, bool fold);
int egr_dnsw_name_decode(const uint8_t *pkt, size_t len, size_t off, char *out, size_t *next);
/* The record at *pos (owner lower-cased if fold; *pos advanced past it).
 * 0 or -errno. */
int egr_dnsw_rr_read_case(const uint8_t *pkt, size_t len, size_t *pos, struct rr *rr,
			  bool fold);
int egr_dnsw_rr_read(const uint8_t *pkt, size_t len, size_t *pos, struct rr *rr);
/* An OPT RR: root owner, options that tile its rdata exactly. 0 or -EBADMSG. */
int egr_dnsw_opt_check(const uint8_t *pkt, const struct rr *rr);
/* Are two presentation names equal, ignoring ASCII case? */
bool egr_dnsw_name_eq(const char *a, const char *b);
/* Header (hdr[6]) and question, shared by both directions; *qend: the
 * offset after the question. 0 or -errno. */
int egr_dnsw_parse_head(const uint8_t *pkt, size_t len, bool response, uint16_t *hdr,
			char *qname, uint16_t *qtype, uint16_t *qclass, size_t *qend);

#endif /* EGR_DNSWIRE_INT_H */
