// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target for user/lib/dnswire.c: the input is one packet, parsed
 * as a query and as a response. What parses must also satisfy the module's
 * own promises, checked here so a violation is a crash:
 *   - names are at most 253 characters, lower-case, no empty label;
 *   - answer_addrs never reports more than asked, and only A/AAAA;
 *   - a REFUSED / SERVFAIL reply built from an accepted query parses back
 *     as a response with that rcode, id and question, and so does a
 *     policy denial (NXDOMAIN with an EDE), which also fits 512 bytes
 *     and carries the EDE only when the query had EDNS;
 *   - egr_dns_filter_addrs() (dropping what egr_rebind_classify() calls a
 *     rebinding target, in A/AAAA records and in SVCB/HTTPS ipv4hint and
 *     ipv6hint entries, and every A/AAAA of a class other than IN) either
 *     fails with a documented error or writes a response that parses,
 *     answers the same question, and in which the same filter finds
 *     nothing left to drop (no record, no hint address).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "dnspolicy.h"
#include "dnswire.h"

static void check_name(const char *n)
{
	size_t len = strnlen(n, EGR_DNS_NAME_BUF);

	if (len > EGR_DNS_NAME_MAX)
		abort();
	for (size_t i = 0; i < len; i++) {
		if (n[i] >= 'A' && n[i] <= 'Z')
			abort();
		if (n[i] == '.' && (i == 0 || i + 1 == len || n[i + 1] == '.'))
			abort();
	}
	if (egr_dns_longest_label(n) > EGR_DNS_LABEL_MAX)
		abort();
	if (egr_dns_label_entropy(n, len) < 0)
		abort();
}

static void check_reply(const struct egr_dns_query *q, const uint8_t *out, size_t olen,
			uint16_t rcode)
{
	static struct egr_dns_response r; /* large; no state kept across runs */

	if (egr_dns_parse_response(out, olen, &r))
		abort();
	if (r.rcode != rcode || !egr_dns_response_matches(q, &r) || r.edns != q->edns)
		abort();
	if (r.ancount || r.nscount || r.naddrs)
		abort();
}

/* The longest EXTRA-TEXT: the denial must fit any UDP client's 512 bytes,
 * and hold the EDE (its last bytes) exactly when the query had EDNS. */
static void check_denial(const struct egr_dns_query *q, const uint8_t *data, size_t size)
{
	static char text[EGR_DNS_EDE_TEXT_MAX + 1];
	uint8_t reply[512];
	size_t olen;

	memset(text, 'e', EGR_DNS_EDE_TEXT_MAX);
	if (egr_dns_build_denial(data, size, EGR_DNS_R_NXDOMAIN, EGR_DNS_EDE_BLOCKED, text, reply,
				 sizeof(reply), &olen))
		abort();
	check_reply(q, reply, olen, EGR_DNS_R_NXDOMAIN);
	if (olen != q->question_end + (q->edns ? 11 + 6 + EGR_DNS_EDE_TEXT_MAX : 0))
		abort();
	if (q->edns && memcmp(reply + olen - EGR_DNS_EDE_TEXT_MAX, text, EGR_DNS_EDE_TEXT_MAX))
		abort();
}

static bool drop_rebind(void *ctx, int family, const uint8_t *addr)
{
	return egr_rebind_classify(family, addr, NULL) != EGR_REBIND_NONE;
}

static void check_filter(const uint8_t *data, size_t size, const struct egr_dns_response *in)
{
	static uint8_t out[65536], again[65536];
	static struct egr_dns_response r;
	size_t olen, nd, olen2, nd2;
	int err;

	err = egr_dns_filter_addrs(data, size, drop_rebind, NULL, out, sizeof(out), &olen, &nd);
	if (err) {
		if (err != -EBADMSG && err != -EMSGSIZE)
			abort();
		return;
	}
	if (!nd) {
		if (olen)
			abort();
		return;
	}
	if (olen > sizeof(out) || egr_dns_parse_response(out, olen, &r))
		abort();
	if (r.id != in->id || r.qtype != in->qtype || strcmp(r.qname, in->qname))
		abort();
	if (r.ancount > in->ancount || r.nscount > in->nscount || r.arcount > in->arcount)
		abort();
	err = egr_dns_filter_addrs(out, olen, drop_rebind, NULL, again, sizeof(again), &olen2,
				   &nd2);
	if (err || nd2 || olen2)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct egr_dns_response r;
	struct egr_dns_addr out[EGR_DNS_MAX_ANSWERS];
	struct egr_dns_query q;
	uint8_t reply[1024];
	size_t n, olen;
	int err;

	if (!egr_dns_parse_query(data, size, &q)) {
		check_name(q.qname);
		if (q.question_end > size)
			abort();
		err = egr_dns_build_refused(data, size, reply, sizeof(reply), &olen);
		if (!err)
			check_reply(&q, reply, olen, EGR_DNS_R_REFUSED);
		else if (err != -ENOSPC)
			abort();
		err = egr_dns_build_servfail(data, size, reply, sizeof(reply), &olen);
		if (!err)
			check_reply(&q, reply, olen, EGR_DNS_R_SERVFAIL);
		else if (err != -ENOSPC)
			abort();
		check_denial(&q, data, size);
	}

	if (!egr_dns_parse_response(data, size, &r)) {
		check_name(r.qname);
		if (r.naddrs > EGR_DNS_MAX_ANSWERS || r.ncnames > EGR_DNS_MAX_CNAMES)
			abort();
		for (size_t i = 0; i < r.naddrs; i++)
			check_name(r.addrs[i].owner);
		for (size_t i = 0; i < r.ncnames; i++) {
			check_name(r.cnames[i].owner);
			check_name(r.cnames[i].target);
		}
		err = egr_dns_answer_addrs(&r, r.qname, out, EGR_DNS_MAX_ANSWERS, &n);
		if (err || n > r.naddrs)
			abort();
		for (size_t i = 0; i < n; i++)
			if (out[i].family != AF_INET && out[i].family != AF_INET6)
				abort();
		err = egr_dns_answer_addrs(&r, r.qname, out, 2, &n);
		if ((err && err != -ENOSPC) || n > 2)
			abort();
		check_filter(data, size, &r);
	}
	return 0;
}
