// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * netprobe: perform ONE network action and say how it went, for the
 * end-to-end tests (tests/e2e/run.py), which run it inside sandbox cgroups.
 *
 * Output is one line on stdout: "ok", or "err <ERRNO_NAME> <errno>" naming
 * the first call that failed. Exit status: 0 ok, 1 the action under test
 * failed, 2 usage or setup error. Every call is bounded (2 s timeouts).
 *
 *   netprobe tcp HOST PORT              connect, send "ping", wait for a reply or EOF
 *   netprobe tcp6 HOST PORT             the same on an AF_INET6 socket
 *   netprobe tcp-mapped IPV4 PORT       AF_INET6, IPV6_V6ONLY=0, to ::ffff:IPV4
 *   netprobe udp-connect HOST PORT      connect + send
 *   netprobe udp-sendto HOST PORT       unconnected sendto
 *   netprobe udp-sendmsg HOST PORT      unconnected sendmsg
 *   netprobe udp-sendmmsg HOST PORT     unconnected sendmmsg of 2 datagrams
 *   netprobe udp-mapped-sendto IPV4 PORT  AF_INET6 sendto ::ffff:IPV4
 *   netprobe tfo HOST PORT              sendto(MSG_FASTOPEN) without connect
 *   netprobe socket FAMILY TYPE PROTO   socket() only (inet|inet6, stream|dgram|raw|
 *                                       seqpacket, tcp|udp|icmp|icmpv6|udplite|sctp|
 *                                       mptcp|raw|N)
 *   netprobe ping-sendto HOST           ICMP ping socket, sendto an echo request
 *   netprobe raw-sendto HOST            raw ICMP socket, sendto an echo request
 *
 * HOST is a numeric IPv4 or IPv6 address. A sendmmsg that sends only some
 * datagrams prints "err PARTIAL <number sent>" (exit 1).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif
#ifndef IPPROTO_UDPLITE
#define IPPROTO_UDPLITE 136
#endif
#ifndef IPPROTO_SCTP
#define IPPROTO_SCTP 132
#endif
#ifndef MSG_FASTOPEN
#define MSG_FASTOPEN 0x20000000
#endif

#define EXIT_OK    0
#define EXIT_FAIL  1
#define EXIT_USAGE 2

#define TIMEOUT_S 2

struct errname {
	int num;
	const char *name;
};

#define E(x) { x, #x }
static const struct errname errnames[] = {
	E(EPERM),
	E(ENOENT),
	E(EINTR),
	E(EIO),
	E(EBADF),
	E(EAGAIN),
	E(ENOMEM),
	E(EACCES),
	E(EFAULT),
	E(EBUSY),
	E(EEXIST),
	E(EINVAL),
	E(ENFILE),
	E(EMFILE),
	E(ENOSPC),
	E(EPIPE),
	E(ENOSYS),
	E(ENOTSOCK),
	E(EDESTADDRREQ),
	E(EMSGSIZE),
	E(EPROTOTYPE),
	E(ENOPROTOOPT),
	E(EPROTONOSUPPORT),
	E(ESOCKTNOSUPPORT),
	E(EOPNOTSUPP),
	E(EPFNOSUPPORT),
	E(EAFNOSUPPORT),
	E(EADDRINUSE),
	E(EADDRNOTAVAIL),
	E(ENETDOWN),
	E(ENETUNREACH),
	E(ENETRESET),
	E(ECONNABORTED),
	E(ECONNRESET),
	E(ENOBUFS),
	E(EISCONN),
	E(ENOTCONN),
	E(ETIMEDOUT),
	E(ECONNREFUSED),
	E(EHOSTDOWN),
	E(EHOSTUNREACH),
	E(EALREADY),
	E(EINPROGRESS),
};
#undef E

static const char *errno_name(int e)
{
	size_t i;

	for (i = 0; i < sizeof(errnames) / sizeof(errnames[0]); i++)
		if (errnames[i].num == e)
			return errnames[i].name;
	return "EUNKNOWN";
}

/* Report the failure of `what` (errno e) and return the action's exit code. */
static int fail(const char *what, int e)
{
	printf("err %s %d\n", errno_name(e), e);
	fprintf(stderr, "netprobe: %s: %s\n", what, strerror(e));
	return EXIT_FAIL;
}

static int ok(void)
{
	printf("ok\n");
	return EXIT_OK;
}

static int usage(void)
{
	fprintf(stderr,
		"usage: netprobe tcp|tcp6|udp-connect|udp-sendto|udp-sendmsg|udp-sendmmsg|tfo "
		"HOST PORT\n"
		"       netprobe tcp-mapped|udp-mapped-sendto IPV4 PORT\n"
		"       netprobe socket FAMILY TYPE PROTO\n"
		"       netprobe ping-sendto|raw-sendto HOST\n");
	return EXIT_USAGE;
}

/* A numeric address and port. mapped: an IPv4 address as ::ffff:a.b.c.d.
 * force6: an IPv4 address is not accepted (tcp6). 0 or -1. */
static int make_addr(const char *host, const char *port, int mapped, int force6,
		     struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	unsigned long p = 0;
	char *end = NULL;

	memset(ss, 0, sizeof(*ss));
	if (port) {
		errno = 0;
		p = strtoul(port, &end, 10);
		if (errno || !*port || *end || p > 65535) {
			fprintf(stderr, "netprobe: bad port %s\n", port);
			return -1;
		}
	}
	if (mapped) {
		struct in_addr a;

		if (inet_pton(AF_INET, host, &a) != 1) {
			fprintf(stderr, "netprobe: %s is not a numeric IPv4 address\n", host);
			return -1;
		}
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)p);
		in6->sin6_addr.s6_addr[10] = 0xff;
		in6->sin6_addr.s6_addr[11] = 0xff;
		memcpy(&in6->sin6_addr.s6_addr[12], &a, 4);
		*len = sizeof(*in6);
		return 0;
	}
	if (!force6 && inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)p);
		*len = sizeof(*in4);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)p);
		*len = sizeof(*in6);
		return 0;
	}
	fprintf(stderr, "netprobe: %s is not a numeric %saddress\n", host, force6 ? "IPv6 " : "");
	return -1;
}

static int set_timeouts(int fd)
{
	struct timeval tv = { .tv_sec = TIMEOUT_S, .tv_usec = 0 };

	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv))) {
		fprintf(stderr, "netprobe: timeouts: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

static int set_dualstack(int fd)
{
	int off = 0;

	if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off))) {
		fprintf(stderr, "netprobe: IPV6_V6ONLY: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

/* socket() with timeouts; on failure *rc is the exit code. */
static int open_socket(int family, int type, int proto, int dualstack, int *rc)
{
	int fd = socket(family, type | SOCK_CLOEXEC, proto);

	if (fd < 0) {
		*rc = fail("socket", errno);
		return -1;
	}
	if (set_timeouts(fd) || (dualstack && set_dualstack(fd))) {
		close(fd);
		*rc = EXIT_USAGE;
		return -1;
	}
	return fd;
}

/* After a successful TCP connect: send "ping", take a reply or EOF. The
 * connect decided the verdict; a server that stays silent is noted only. */
static void tcp_exchange(int fd)
{
	char buf[64];
	ssize_t n;

	if (send(fd, "ping", 4, MSG_NOSIGNAL) < 0) {
		fprintf(stderr, "netprobe: send after connect: %s\n", strerror(errno));
		return;
	}
	n = recv(fd, buf, sizeof(buf), 0);
	if (n < 0)
		fprintf(stderr, "netprobe: no reply after connect: %s\n", strerror(errno));
}

static int do_tcp(const char *host, const char *port, int mapped, int force6)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd, rc = EXIT_USAGE;

	if (make_addr(host, port, mapped, force6, &ss, &len))
		return EXIT_USAGE;
	fd = open_socket(ss.ss_family, SOCK_STREAM, IPPROTO_TCP, mapped, &rc);
	if (fd < 0)
		return rc;
	if (connect(fd, (struct sockaddr *)&ss, len)) {
		rc = fail("connect", errno);
	} else {
		tcp_exchange(fd);
		rc = ok();
	}
	close(fd);
	return rc;
}

static int do_tfo(const char *host, const char *port)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd, rc = EXIT_USAGE;

	if (make_addr(host, port, 0, 0, &ss, &len))
		return EXIT_USAGE;
	fd = open_socket(ss.ss_family, SOCK_STREAM, IPPROTO_TCP, 0, &rc);
	if (fd < 0)
		return rc;
	if (sendto(fd, "ping", 4, MSG_FASTOPEN | MSG_NOSIGNAL, (struct sockaddr *)&ss, len) < 0) {
		rc = fail("sendto(MSG_FASTOPEN)", errno);
	} else {
		char buf[64];

		if (recv(fd, buf, sizeof(buf), 0) < 0)
			fprintf(stderr, "netprobe: no reply after fast open: %s\n",
				strerror(errno));
		rc = ok();
	}
	close(fd);
	return rc;
}

enum udp_mode { UDP_CONNECT, UDP_SENDTO, UDP_SENDMSG, UDP_SENDMMSG };

static int do_udp(const char *host, const char *port, int mapped, enum udp_mode mode)
{
	struct sockaddr_storage ss;
	char payload[] = "ping";
	struct iovec iov = { .iov_base = payload, .iov_len = 4 };
	socklen_t len;
	int fd, rc = EXIT_USAGE;

	if (make_addr(host, port, mapped, 0, &ss, &len))
		return EXIT_USAGE;
	fd = open_socket(ss.ss_family, SOCK_DGRAM, IPPROTO_UDP, mapped, &rc);
	if (fd < 0)
		return rc;
	switch (mode) {
	case UDP_CONNECT:
		if (connect(fd, (struct sockaddr *)&ss, len))
			rc = fail("connect", errno);
		else if (send(fd, payload, 4, 0) < 0)
			rc = fail("send", errno);
		else
			rc = ok();
		break;
	case UDP_SENDTO:
		if (sendto(fd, payload, 4, 0, (struct sockaddr *)&ss, len) < 0)
			rc = fail("sendto", errno);
		else
			rc = ok();
		break;
	case UDP_SENDMSG: {
		struct msghdr mh = { .msg_name = &ss, .msg_namelen = len,
				     .msg_iov = &iov, .msg_iovlen = 1 };

		if (sendmsg(fd, &mh, 0) < 0)
			rc = fail("sendmsg", errno);
		else
			rc = ok();
		break;
	}
	case UDP_SENDMMSG: {
		struct mmsghdr mm[2];
		int i, n;

		memset(mm, 0, sizeof(mm));
		for (i = 0; i < 2; i++) {
			mm[i].msg_hdr.msg_name = &ss;
			mm[i].msg_hdr.msg_namelen = len;
			mm[i].msg_hdr.msg_iov = &iov;
			mm[i].msg_hdr.msg_iovlen = 1;
		}
		n = sendmmsg(fd, mm, 2, 0);
		if (n < 0) {
			rc = fail("sendmmsg", errno);
		} else if (n != 2) {
			printf("err PARTIAL %d\n", n);
			fprintf(stderr, "netprobe: sendmmsg sent %d of 2 datagrams\n", n);
			rc = EXIT_FAIL;
		} else {
			rc = ok();
		}
		break;
	}
	}
	close(fd);
	return rc;
}

static int lookup(const char *s, const char *const names[], const int vals[], size_t n, int *out)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (!strcmp(s, names[i])) {
			*out = vals[i];
			return 0;
		}
	}
	return -1;
}

static int do_socket(const char *fam, const char *type, const char *proto)
{
	static const char *const fnames[] = { "inet", "inet6" };
	static const int fvals[] = { AF_INET, AF_INET6 };
	static const char *const tnames[] = { "stream", "dgram", "raw", "seqpacket" };
	static const int tvals[] = { SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_SEQPACKET };
	static const char *const pnames[] = { "0",	  "ip",	  "tcp",   "udp", "icmp",
					      "icmpv6", "udplite", "sctp", "mptcp", "raw" };
	static const int pvals[] = { 0,		    0,		    IPPROTO_TCP,
				     IPPROTO_UDP,   IPPROTO_ICMP,   IPPROTO_ICMPV6,
				     IPPROTO_UDPLITE, IPPROTO_SCTP, IPPROTO_MPTCP,
				     IPPROTO_RAW };
	int f, t, p, fd;

	if (lookup(fam, fnames, fvals, 2, &f) || lookup(type, tnames, tvals, 4, &t))
		return usage();
	if (lookup(proto, pnames, pvals, sizeof(pvals) / sizeof(pvals[0]), &p)) {
		char *end = NULL;
		long v = strtol(proto, &end, 10);

		if (!*proto || *end || v < 0 || v > 65535)
			return usage();
		p = (int)v;
	}
	fd = socket(f, t | SOCK_CLOEXEC, p);
	if (fd < 0)
		return fail("socket", errno);
	close(fd);
	return ok();
}

static uint16_t inet_csum(const void *data, size_t len)
{
	const uint8_t *b = data;
	uint32_t sum = 0;
	size_t i;

	for (i = 0; i + 1 < len; i += 2)
		sum += (uint32_t)(b[i] << 8 | b[i + 1]);
	if (len & 1)
		sum += (uint32_t)(b[len - 1] << 8);
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return htons((uint16_t)~sum);
}

/* An ICMP or ICMPv6 echo request to host on a ping (SOCK_DGRAM) or raw socket. */
static int do_icmp(const char *host, int type)
{
	struct sockaddr_storage ss;
	uint8_t pkt[16];
	socklen_t len;
	int fd, rc = EXIT_USAGE, v6;

	if (make_addr(host, NULL, 0, 0, &ss, &len))
		return EXIT_USAGE;
	v6 = ss.ss_family == AF_INET6;
	fd = open_socket(ss.ss_family, type, v6 ? IPPROTO_ICMPV6 : IPPROTO_ICMP, 0, &rc);
	if (fd < 0)
		return rc;
	memset(pkt, 0, sizeof(pkt));
	pkt[0] = v6 ? 128 : 8; /* echo request */
	pkt[4] = 0x4e;	       /* identifier (a ping socket sets its own) */
	pkt[5] = 0x50;
	pkt[7] = 1; /* sequence 1 */
	memcpy(pkt + 8, "netprobe", 8);
	if (!v6) {
		/* ping sockets fill the checksum in, raw IPv4 ones do not; the
		 * kernel computes ICMPv6 checksums itself. */
		uint16_t c = inet_csum(pkt, sizeof(pkt));

		memcpy(pkt + 2, &c, 2);
	}
	if (sendto(fd, pkt, sizeof(pkt), 0, (struct sockaddr *)&ss, len) < 0)
		rc = fail("sendto", errno);
	else
		rc = ok();
	close(fd);
	return rc;
}

int main(int argc, char **argv)
{
	const char *a;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		return usage();
	a = argv[1];
	if (argc == 4) {
		if (!strcmp(a, "tcp"))
			return do_tcp(argv[2], argv[3], 0, 0);
		if (!strcmp(a, "tcp6"))
			return do_tcp(argv[2], argv[3], 0, 1);
		if (!strcmp(a, "tcp-mapped"))
			return do_tcp(argv[2], argv[3], 1, 0);
		if (!strcmp(a, "udp-connect"))
			return do_udp(argv[2], argv[3], 0, UDP_CONNECT);
		if (!strcmp(a, "udp-sendto"))
			return do_udp(argv[2], argv[3], 0, UDP_SENDTO);
		if (!strcmp(a, "udp-sendmsg"))
			return do_udp(argv[2], argv[3], 0, UDP_SENDMSG);
		if (!strcmp(a, "udp-sendmmsg"))
			return do_udp(argv[2], argv[3], 0, UDP_SENDMMSG);
		if (!strcmp(a, "udp-mapped-sendto"))
			return do_udp(argv[2], argv[3], 1, UDP_SENDTO);
		if (!strcmp(a, "tfo"))
			return do_tfo(argv[2], argv[3]);
	}
	if (argc == 5 && !strcmp(a, "socket"))
		return do_socket(argv[2], argv[3], argv[4]);
	if (argc == 3) {
		if (!strcmp(a, "ping-sendto"))
			return do_icmp(argv[2], SOCK_DGRAM);
		if (!strcmp(a, "raw-sendto"))
			return do_icmp(argv[2], SOCK_RAW);
	}
	return usage();
}
