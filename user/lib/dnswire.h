/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * DNS wire format (RFC 1035, 2181, 3596, 6891) for the DNS proxy: parse a
 * sandbox's query, parse the upstream's response, pick the addresses that
 * answer the question, build REFUSED / SERVFAIL / denial replies, and compute the
 * label signals used for exfiltration detection.
 *
 * Every packet is hostile input. The parsers never read outside [pkt, pkt+len),
 * never loop without a bound, and return 0 or a negative errno:
 *   -EBADMSG     malformed: truncated header/question/RR/rdata, counts larger
 *                than the records present, bad compression pointer, label or
 *                name too long, reserved label type, a label byte outside
 *                the accepted set (below), wrong rdlength for A/AAAA, ...
 *   -EINVAL      well-formed but not acceptable: QR bit wrong for the
 *                direction, qdcount != 1, records in a query's answer or
 *                authority section, more than one OPT RR
 *   -EOPNOTSUPP  opcode other than QUERY
 *
 * Names are returned in presentation form: ASCII lower-cased, labels joined
 * by '.', no trailing dot, the root name is "". Label bytes must be printable
 * ASCII 0x21..0x7e other than '.' and '\\'; anything else (NUL, space,
 * control, 8-bit bytes, an embedded dot, a backslash) makes the packet
 * -EBADMSG. We reject rather than escape so that the string a policy is
 * matched against is exactly the name that gets resolved: "a.b" can only
 * ever mean the two labels a and b, never one label "a.b" under another
 * zone. Real host names (LDH, '_' and '*') all pass.
 *
 * Compression pointers must point into the packet after the 12-byte header
 * and strictly before the start of the name segment being read (the first
 * label of the name or the previous pointer's target), so every jump goes
 * strictly backwards and loops are impossible; at most EGR_DNS_MAX_JUMPS
 * jumps are followed in one name. Wire names are at most 255 bytes, labels at
 * most 63, so presentation names are at most 253 characters.
 */
#ifndef EGR_DNSWIRE_H
#define EGR_DNSWIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EGR_DNS_HDR_LEN	  12
#define EGR_DNS_LABEL_MAX 63
#define EGR_DNS_WIRE_MAX  255 /* wire bytes of a name, root byte included */
#define EGR_DNS_NAME_MAX  253 /* presentation characters */
#define EGR_DNS_NAME_BUF  (EGR_DNS_NAME_MAX + 1)
#define EGR_DNS_MAX_JUMPS 32 /* compression pointers followed per name */

/* Caps on what egr_dns_parse_response() keeps of the answer section. Records
 * past a cap are still validated, then counted in ->dropped. */
#define EGR_DNS_MAX_ANSWERS 64 /* A and AAAA records */
#define EGR_DNS_MAX_CNAMES  32 /* CNAME records */
#define EGR_DNS_MAX_CHAIN   16 /* CNAME hops egr_dns_answer_addrs() follows */

/* RR types (qtypes). */
#define EGR_DNS_T_A	1
#define EGR_DNS_T_NS	2
#define EGR_DNS_T_CNAME 5
#define EGR_DNS_T_SOA	6
#define EGR_DNS_T_NULL	10
#define EGR_DNS_T_PTR	12
#define EGR_DNS_T_MX	15
#define EGR_DNS_T_TXT	16
#define EGR_DNS_T_AAAA	28
#define EGR_DNS_T_SRV	33
#define EGR_DNS_T_OPT	41
#define EGR_DNS_T_SVCB	64
#define EGR_DNS_T_HTTPS 65
#define EGR_DNS_T_ANY	255

#define EGR_DNS_C_IN  1
#define EGR_DNS_C_ANY 255

/* RCODEs (4-bit header values; with EDNS the response's rcode is 12 bits). */
#define EGR_DNS_R_NOERROR  0
#define EGR_DNS_R_FORMERR  1
#define EGR_DNS_R_SERVFAIL 2
#define EGR_DNS_R_NXDOMAIN 3
#define EGR_DNS_R_NOTIMP   4
#define EGR_DNS_R_REFUSED  5
#define EGR_DNS_R_BADVERS  16 /* EDNS extended */

/* Header flag bits (second 16-bit word). */
#define EGR_DNS_F_QR	  0x8000
#define EGR_DNS_F_OPCODE  0x7800
#define EGR_DNS_F_AA	  0x0400
#define EGR_DNS_F_TC	  0x0200
#define EGR_DNS_F_RD	  0x0100
#define EGR_DNS_F_RA	  0x0080
#define EGR_DNS_F_AD	  0x0020
#define EGR_DNS_F_CD	  0x0010
#define EGR_DNS_F_RCODE	  0x000f
#define EGR_DNS_OPCODE(f) (((f) >> 11) & 0xf)
#define EGR_DNS_EDNS_DO	  0x8000 /* in the OPT RR's TTL field, low 16 bits */

/* The UDP payload size our own replies advertise in their OPT RR. */
#define EGR_DNS_EDNS_UDP_SIZE 1232

/* RFC 8914 Extended DNS Errors: the EDNS option and the codes we send. */
#define EGR_DNS_OPT_EDE	       15
#define EGR_DNS_EDE_BLOCKED    15 /* "Blocked": an operator's policy */
#define EGR_DNS_EDE_PROHIBITED 18 /* "Prohibited": this client may not ask */
/* Our EXTRA-TEXT is at most this long, so a denial of the longest name
 * (12 + 259 question bytes + 11 OPT + 6 EDE + text) fits the 512 bytes
 * every UDP client takes, whatever it advertised. */
#define EGR_DNS_EDE_TEXT_MAX 160

struct egr_dns_query {
	uint16_t id;
	uint16_t flags; /* raw header flags */
	uint16_t qtype;
	uint16_t qclass;
	uint16_t arcount;
	bool edns;    /* an OPT RR is in the additional section */
	bool edns_do; /* its DO bit */
	uint8_t edns_version;
	uint16_t edns_udp_size; /* as sent; RFC 6891 says treat < 512 as 512 */
	size_t question_end;	/* offset just past the question */
	char qname[EGR_DNS_NAME_BUF];
};

/* An A or AAAA record of the answer section (class IN only). */
struct egr_dns_rr_addr {
	uint16_t type;	  /* EGR_DNS_T_A or EGR_DNS_T_AAAA */
	uint32_t ttl;	  /* RFC 2181 8: a TTL with the top bit set is 0 */
	uint8_t addr[16]; /* network order; A uses the first 4 bytes */
	char owner[EGR_DNS_NAME_BUF];
};

struct egr_dns_rr_cname {
	uint32_t ttl;
	char owner[EGR_DNS_NAME_BUF];
	char target[EGR_DNS_NAME_BUF];
};

struct egr_dns_response {
	uint16_t id;
	uint16_t flags;
	uint16_t rcode;	     /* 4-bit header rcode, extended by OPT if any */
	bool tc;	     /* truncated: TC bit set */
	bool short_sections; /* TC set and the packet ended at an RR boundary
			      * before the counts were satisfied */
	bool edns;
	uint16_t qtype;
	uint16_t qclass;
	uint16_t ancount, nscount, arcount;
	size_t naddrs;
	size_t ncnames;
	size_t dropped; /* A/AAAA/CNAME records past the caps */
	char qname[EGR_DNS_NAME_BUF];
	struct egr_dns_rr_addr addrs[EGR_DNS_MAX_ANSWERS];
	struct egr_dns_rr_cname cnames[EGR_DNS_MAX_CNAMES];
};

/* One address egr_dns_answer_addrs() selected. */
struct egr_dns_addr {
	int family;	  /* AF_INET or AF_INET6 */
	uint32_t ttl;	  /* minimum TTL along its CNAME chain */
	uint8_t addr[16]; /* network order; AF_INET uses the first 4 */
};

/*
 * Parse a query: QR must be 0 (-EINVAL), opcode QUERY (-EOPNOTSUPP),
 * qdcount 1 and ancount = nscount = 0 (-EINVAL). The additional section is
 * walked for an OPT RR (owner must be the root, at most one, options must
 * fit its rdata); other additional records are skipped. Bytes after the
 * last counted record are ignored. On error *q is zeroed.
 */
int egr_dns_parse_query(const uint8_t *pkt, size_t len, struct egr_dns_query *q);

/*
 * Parse a response: QR must be 1 (-EINVAL), opcode QUERY (-EOPNOTSUPP),
 * qdcount 1 (-EINVAL). Every record of the answer, authority and additional
 * sections is walked and checked (a count larger than the records present
 * is -EBADMSG, except that a response with TC set may end early at a record
 * boundary: then short_sections is set). From the answer section, class IN
 * A (rdlength must be 4), AAAA (16) and CNAME (the name must fill the rdata
 * exactly) records are kept up to the caps; the rest is counted in
 * ->dropped. OPT is accepted only in the additional section, once. Trailing
 * bytes are ignored. On error *r is zeroed.
 */
int egr_dns_parse_response(const uint8_t *pkt, size_t len, struct egr_dns_response *r);

/*
 * The A/AAAA addresses of r's answer section whose owner is qname or is
 * reachable from qname through the answer's CNAME records, following at
 * most EGR_DNS_MAX_CHAIN hops (breadth first; each name is visited once, so
 * loops end). qname is compared case-insensitively and has no trailing dot.
 * An address's TTL is the minimum of its own and of the CNAMEs on the
 * (shortest) chain to it; an address that appears more than once is
 * reported once, with the smallest TTL. Fills out[0..*n). Returns 0, or
 * -ENOSPC when more than max addresses qualified (out holds the first max,
 * *n = max), or -EINVAL for NULL arguments.
 */
int egr_dns_answer_addrs(const struct egr_dns_response *r, const char *qname,
			 struct egr_dns_addr *out, size_t max, size_t *n);

/* True if r answers q: same id, qtype, qclass and (case-insensitively) name. */
bool egr_dns_response_matches(const struct egr_dns_query *q, const struct egr_dns_response *r);

/*
 * Build a REFUSED (RCODE 5) / SERVFAIL (RCODE 2) reply to a query that
 * egr_dns_parse_query() accepts (its error is returned otherwise). The reply
 * echoes the id, the question bytes verbatim (so a client's 0x20 case
 * randomisation survives), RD and CD, and sets QR and RA; AA, TC, AD and Z
 * are 0 and ancount = nscount = 0. If the query carried an OPT RR the reply
 * carries a minimal one (root owner, UDP size EGR_DNS_EDNS_UDP_SIZE, version
 * 0, the query's DO bit, no options) and arcount = 1, as RFC 6891 7 asks of
 * an EDNS-aware responder; otherwise arcount = 0. -ENOSPC if outlen is too
 * small. *olen is the reply's length.
 */
int egr_dns_build_refused(const uint8_t *query, size_t qlen, uint8_t *out, size_t outlen,
			  size_t *olen);
int egr_dns_build_servfail(const uint8_t *query, size_t qlen, uint8_t *out, size_t outlen,
			   size_t *olen);

/*
 * A policy's denial, built like the above with rcode EGR_DNS_R_NXDOMAIN or
 * EGR_DNS_R_REFUSED (-EINVAL otherwise): when the query had an OPT RR, the
 * reply's OPT RR carries one Extended DNS Error option (RFC 8914) with
 * INFO-CODE ede_code and EXTRA-TEXT text (printable ASCII, at most
 * EGR_DNS_EDE_TEXT_MAX bytes, else -EINVAL); without one, no OPT RR and so
 * no EDE (RFC 6891 7). No SOA in the authority section: the denial is not
 * negatively cached beyond what the resolver does by default, so a policy
 * update that allows the name works at once.
 */
int egr_dns_build_denial(const uint8_t *query, size_t qlen, uint16_t rcode, uint16_t ede_code,
			 const char *text, uint8_t *out, size_t outlen, size_t *olen);

/* A NOERROR reply with TC set and no records, built like the above: it
 * sends the client to TCP. */
int egr_dns_build_truncated(const uint8_t *query, size_t qlen, uint8_t *out, size_t outlen,
			    size_t *olen);

/* Should the A/AAAA record with this address (AF_INET: 4 bytes, AF_INET6: 16)
 * be removed? */
typedef bool (*egr_dns_addr_drop_fn)(void *ctx, int family, const uint8_t *addr);

/*
 * Remove address records from a response (DNS rebinding, docs/dns.md).
 * drop() is asked once about every class IN A and AAAA record of every
 * section and every address of the ipv4hint / ipv6hint SvcParams of class
 * IN SVCB and HTTPS records, in packet order; A and AAAA records of any
 * other class are removed without asking. If nothing is to be removed
 * nothing is written, *olen = 0 and pkt can be relayed as it is. Otherwise
 * out gets the response without those records and hint addresses (a hint
 * left empty goes with its key; the SVCB TargetName is written
 * uncompressed): the same id and flags except AD (cleared: the data
 * changed), the question bytes verbatim, every other record in its order
 * with ANCOUNT/NSCOUNT/ARCOUNT recounted; owner names and the domain names
 * in the rdata of the types RFC 3597 4 lists (NS, CNAME, SOA, PTR, MX, SRV,
 * NAPTR, ..., and DNAME) are decoded and encoded again, compressed (owners
 * and the RFC 1035 types only) against names written before; any other rdata
 * is copied as it is. Case is kept. A response with TC set may end early at
 * a record boundary, as egr_dns_parse_response() allows; trailing bytes are
 * dropped. Fixed memory (about 19 KiB of stack), two linear passes; each
 * name written is compared with at most 64 earlier name suffixes.
 *
 * Returns 0 (*ndropped records and hint addresses removed, *olen bytes in
 * out), -EBADMSG (also for SVCB/HTTPS rdata whose SvcParams or hint lengths
 * do not add up) /
 * -EINVAL / -EOPNOTSUPP for a response egr_dns_parse_response() would refuse
 * or a known type whose rdata does not hold its names, -EMSGSIZE if the
 * result does not fit outlen (or len > 65535). out must not overlap pkt.
 */
int egr_dns_filter_addrs(const uint8_t *pkt, size_t len, egr_dns_addr_drop_fn drop, void *ctx,
			 uint8_t *out, size_t outlen, size_t *olen, size_t *ndropped);

/*
 * Exfiltration signals; pure functions of their arguments.
 * egr_dns_label_entropy: Shannon entropy of the bytes label[0..len) in bits
 * per character (0 for len 0; "aaaa" is 0, 16 distinct bytes are 4).
 * egr_dns_longest_label: length of the longest '.'-separated label of a
 * presentation name (0 for NULL or "").
 */
double egr_dns_label_entropy(const char *label, size_t len);
size_t egr_dns_longest_label(const char *name);

/* "A", "AAAA", ... or NULL for a type without a name here. */
const char *egr_dns_type_name(uint16_t type);
/* "NOERROR", "REFUSED", ... or NULL. */
const char *egr_dns_rcode_name(uint16_t rcode);

#endif /* EGR_DNSWIRE_H */
