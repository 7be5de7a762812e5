// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* netprobe: the TCP, UDP, ICMP, UDP-Lite and MPTCP actions. */
#include "netprobe.h"

int do_tcp(const char *host, const char *port, int mapped, int force6)
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

int do_tfo(const char *host, const char *port)
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

int do_tcp_bound(const char *src, const char *host, const char *port)
{
	struct sockaddr_storage ss, bs;
	socklen_t len, blen;
	int fd, rc = EXIT_USAGE;

	if (make_addr(host, port, 0, 0, &ss, &len) || make_addr(src, NULL, 0, 0, &bs, &blen))
		return EXIT_USAGE;
	if (ss.ss_family != bs.ss_family) {
		fprintf(stderr, "netprobe: %s and %s are not of one family\n", src, host);
		return EXIT_USAGE;
	}
	fd = open_socket(ss.ss_family, SOCK_STREAM, IPPROTO_TCP, 0, &rc);
	if (fd < 0)
		return rc;
	if (bind(fd, (struct sockaddr *)&bs, blen)) {
		fprintf(stderr, "netprobe: bind %s: %s\n", src, strerror(errno));
		close(fd);
		return EXIT_USAGE;
	}
	if (connect(fd, (struct sockaddr *)&ss, len)) {
		rc = fail("connect", errno);
	} else {
		tcp_exchange(fd);
		rc = ok();
	}
	close(fd);
	return rc;
}

/* A send on a connected UDP socket with no address and one control
 * message: the kernel leaves its connected fast path for it. */
static ssize_t send_with_tos(int fd, int v6)
{
	char payload[] = "ping";
	struct iovec iov = { .iov_base = payload, .iov_len = 4 };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm;
	int tos = 0x10;

	memset(&u, 0, sizeof(u));
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = v6 ? IPPROTO_IPV6 : IPPROTO_IP;
	cm->cmsg_type = v6 ? IPV6_TCLASS : IP_TOS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &tos, sizeof(tos));
	return sendmsg(fd, &mh, 0);
}

int do_udp_connect_cmsg(const char *host, const char *port, const char *wait)
{
	struct sockaddr_storage ss;
	unsigned long w;
	socklen_t len;
	char *end;
	int fd, rc = EXIT_USAGE;

	errno = 0;
	w = strtoul(wait, &end, 10);
	if (errno || !*wait || *end || w > 30) {
		fprintf(stderr, "netprobe: bad WAIT %s (0-30 s)\n", wait);
		return EXIT_USAGE;
	}
	if (make_addr(host, port, 0, 0, &ss, &len))
		return EXIT_USAGE;
	fd = open_socket(ss.ss_family, SOCK_DGRAM, IPPROTO_UDP, 0, &rc);
	if (fd < 0)
		return rc;
	if (connect(fd, (struct sockaddr *)&ss, len)) {
		rc = fail("connect", errno);
	} else if (w && send_with_tos(fd, ss.ss_family == AF_INET6) < 0) {
		rc = fail("first sendmsg with a control message", errno);
	} else {
		if (w)
			sleep((unsigned int)w);
		if (send_with_tos(fd, ss.ss_family == AF_INET6) < 0)
			rc = fail("sendmsg with a control message", errno);
		else
			rc = ok();
	}
	close(fd);
	return rc;
}

int do_udp(const char *host, const char *port, int mapped, enum udp_mode mode)
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

int do_socket(const char *fam, const char *type, const char *proto)
{
	static const char *const fnames[] = { "inet", "inet6" };
	static const int fvals[] = { AF_INET, AF_INET6 };
	static const char *const tnames[] = { "stream", "dgram", "raw", "seqpacket", "packet" };
	static const int tvals[] = { SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_SEQPACKET,
				     SOCK_PACKET };
	static const char *const pnames[] = { "0",	  "ip",	  "tcp",   "udp", "icmp",
					      "icmpv6", "udplite", "sctp", "mptcp", "raw" };
	static const int pvals[] = { 0,		    0,		    IPPROTO_TCP,
				     IPPROTO_UDP,   IPPROTO_ICMP,   IPPROTO_ICMPV6,
				     IPPROTO_UDPLITE, IPPROTO_SCTP, IPPROTO_MPTCP,
				     IPPROTO_RAW };
	int f, t, p, fd;

	if (lookup(fam, fnames, fvals, 2, &f) || lookup(type, tnames, tvals, 5, &t))
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

/* An ICMP or ICMPv6 echo request to host on a ping (SOCK_DGRAM) or raw socket. */
int do_icmp(const char *host, int type)
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

/* connect-loop HOST PORT N: N connect() attempts from one TCP socket as fast
 * as possible (denied ones leave the socket unconnected, so it is reused).
 * Prints "ok A D" (allowed, denied) and succeeds when all N were made. */
int do_connect_loop(const char *host, const char *port, const char *count)
{
	struct sockaddr_storage ss;
	socklen_t len;
	unsigned long n, allowed = 0, denied = 0;
	char *end = NULL;
	int fd = -1;

	n = strtoul(count, &end, 10);
	if (!*count || *end || make_addr(host, port, 0, 0, &ss, &len))
		return EXIT_USAGE;
	for (unsigned long i = 0; i < n; i++) {
		if (fd < 0 && (fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
			return fail("socket", errno);
		if (connect(fd, (struct sockaddr *)&ss, len) == 0) {
			allowed++;
			close(fd);
			fd = -1;
		} else if (errno == EPERM) {
			denied++;
		} else {
			close(fd);
			fd = -1;
			return fail("connect", errno);
		}
	}
	if (fd >= 0)
		close(fd);
	printf("ok %lu %lu\n", allowed, denied);
	return EXIT_OK;
}

/* Wait (bounded) for an echo reply from ss on fd. 0 when one came. */
static int wait_echo_reply(int fd, const struct sockaddr_storage *to, int v6, int raw)
{
	uint8_t buf[1500];
	struct sockaddr_storage from;
	socklen_t flen;
	ssize_t n;

	for (int tries = 0; tries < 64; tries++) {
		const uint8_t *icmp = buf;

		flen = sizeof(from);
		n = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&from, &flen);
		if (n < 0)
			return -1;
		if (raw && !v6) {
			/* raw IPv4 sockets get the IP header too */
			size_t ihl = (size_t)(buf[0] & 15) * 4;

			if ((size_t)n < ihl + 8)
				continue;
			icmp = buf + ihl;
		}
		if (icmp[0] != (v6 ? 129 : 0))
			continue; /* not an echo reply (e.g. our own request on a raw socket) */
		if (v6 ? !memcmp(&((struct sockaddr_in6 *)&from)->sin6_addr,
				 &((const struct sockaddr_in6 *)to)->sin6_addr, 16)
		       : ((struct sockaddr_in *)&from)->sin_addr.s_addr ==
				 ((const struct sockaddr_in *)to)->sin_addr.s_addr)
			return 0;
	}
	errno = ETIMEDOUT;
	return -1;
}

/* An echo request on a ping or raw socket, and the reply. */
int do_echo(const char *host, int type)
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
	pkt[0] = v6 ? 128 : 8;
	pkt[4] = 0x4e;
	pkt[5] = 0x50;
	pkt[7] = 2;
	memcpy(pkt + 8, "netprobe", 8);
	if (!v6) {
		uint16_t c = inet_csum(pkt, sizeof(pkt));

		memcpy(pkt + 2, &c, 2);
	}
	if (sendto(fd, pkt, sizeof(pkt), 0, (struct sockaddr *)&ss, len) < 0)
		rc = fail("sendto", errno);
	else if (wait_echo_reply(fd, &ss, v6, type == SOCK_RAW))
		rc = fail("echo reply", errno == EAGAIN || errno == EWOULDBLOCK ? ETIMEDOUT : errno);
	else
		rc = ok();
	close(fd);
	return rc;
}

int do_udplite(const char *host, const char *port, int connected)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd, rc = EXIT_USAGE;

	if (make_addr(host, port, 0, 0, &ss, &len))
		return EXIT_USAGE;
	fd = open_socket(ss.ss_family, SOCK_DGRAM, IPPROTO_UDPLITE, 0, &rc);
	if (fd < 0)
		return rc;
	/* UDP-Lite has no pre_connect: connect() is judged by no hook. */
	if (connected && connect(fd, (struct sockaddr *)&ss, len))
		rc = fail("connect", errno);
	else if (connected && send(fd, "ping", 4, 0) < 0)
		rc = fail("send", errno);
	else if (!connected && sendto(fd, "ping", 4, 0, (struct sockaddr *)&ss, len) < 0)
		rc = fail("sendto", errno);
	else
		rc = ok();
	close(fd);
	return rc;
}

int do_mptcp(const char *host, const char *port)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd, rc = EXIT_USAGE;

	if (make_addr(host, port, 0, 0, &ss, &len))
		return EXIT_USAGE;
	fd = open_socket(ss.ss_family, SOCK_STREAM, IPPROTO_MPTCP, 0, &rc);
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
