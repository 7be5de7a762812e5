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
 *                                       seqpacket|packet, tcp|udp|icmp|icmpv6|udplite|sctp|
 *                                       mptcp|raw|N)
 *   netprobe ping-sendto HOST           ICMP ping socket, sendto an echo request
 *   netprobe raw-sendto HOST            raw ICMP socket, sendto an echo request
 *   netprobe ping-echo HOST             ping socket: echo request, wait for the reply
 *   netprobe raw-echo HOST              raw ICMP socket: the same ("err ETIMEDOUT" when
 *                                       the request went out but no reply came)
 *   netprobe udplite-sendto HOST PORT   UDP-Lite socket, unconnected sendto
 *   netprobe udplite-connect HOST PORT  UDP-Lite socket, connect + send
 *   netprobe mptcp HOST PORT            IPPROTO_MPTCP stream: connect, send, reply or EOF
 *   netprobe setsockopt-rthdr HOST PORT IPv6 UDP socket, IPV6_RTHDR (a segment routing
 *                                       header, type 4, first hop HOST; the only type
 *                                       this kernel takes without MIP6), then sendto
 *                                       HOST PORT; reports the first failure
 *   netprobe cmsg-rthdr FIRSTHOP FINAL PORT  sendmsg to FINAL:PORT with an IPV6_RTHDR
 *                                       control message naming FIRSTHOP (type 2, then
 *                                       type 4): the hooks see FINAL, the packet goes
 *                                       to FIRSTHOP
 *   netprobe ip-options HOST PORT       UDP socket, IP_OPTIONS with a loose source route
 *                                       via HOST, then sendto HOST PORT
 *   netprobe bpf-obj-get PATH        bpf(BPF_OBJ_GET) of a pinned object
 *   netprobe raw-udp-connected HOST PORT  connected SOCK_RAW/IPPROTO_UDP send
 *   netprobe legacy-detach CGROUP TYPE  bpf(BPF_PROG_DETACH) of cgroup dir CGROUP with no
 *                                       program fd; TYPE is connect4, connect6, sendmsg4,
 *                                       sendmsg6, sock_create, setsockopt, egress,
 *                                       ingress or a number
 *   netprobe io-uring-setup             io_uring_setup(1 entry), closed at once
 *   netprobe packet-socket              socket(AF_PACKET, SOCK_RAW, ETH_P_ALL) only
 *   netprobe xdp-socket                 socket(AF_XDP, SOCK_RAW, 0) only
 *   netprobe vsock-socket               socket(AF_VSOCK, SOCK_STREAM, 0) only: NEVER
 *                                       connected (the peer is the VM's host)
 *   netprobe tcp-bound SRC HOST PORT    bind SRC (port 0) first, then connect HOST PORT
 *                                       (SRC and HOST of one family)
 *   netprobe udp-connect-cmsg HOST PORT WAIT  connect, then sendmsg with no address and an
 *                                       IP_TOS (IPv4) or IPV6_TCLASS (IPv6) control
 *                                       message; with WAIT > 0 seconds, that first send
 *                                       must work, then after WAIT s a second one is
 *                                       what is reported
 *   netprobe cgroup-move PROCS HOST PORT  write this process's pid into the cgroup.procs
 *                                       file PROCS (moving itself), then tcp HOST PORT
 *   netprobe clone-into CGDIR HOST PORT  clone3(CLONE_INTO_CGROUP) a child into cgroup
 *                                       directory CGDIR; the child tries tcp HOST PORT
 *                                       and exits; "ok" once the child is reaped
 *   netprobe i386-packet-socket         socket(AF_PACKET, SOCK_RAW, ETH_P_ALL) through the
 *                                       i386 ABI (int $0x80, x86_64 only): socketcall(2)
 *                                       and the direct socket call; "ok" when either made
 *                                       a socket
 *   netprobe fds                        the descriptors open in this process besides
 *                                       0, 1 and 2: "ok" when none, else "err OPENFDS N"
 *                                       and the list on stderr
 *
 * HOST is a numeric IPv4 or IPv6 address. A sendmmsg that sends only some
 * datagrams prints "err PARTIAL <number sent>" (exit 1).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <sys/mman.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/io_uring.h>
#include <linux/sched.h>
#include <netinet/ip6.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h> /* after socket.h: keeps clear of the includes egressctl run's tests added */
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/prctl.h>
#include <unistd.h>

#ifndef AF_XDP
#define AF_XDP 44
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef IPV6_RTHDR
#define IPV6_RTHDR 57
#endif

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
	E(E2BIG),
	E(ENOTDIR),
	E(ESRCH),
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
		"       netprobe connect-loop HOST PORT N\n"
		"       netprobe ping-sendto|raw-sendto|ping-echo|raw-echo HOST\n"
		"       netprobe udplite-sendto|udplite-connect|mptcp|setsockopt-rthdr|ip-options HOST PORT\n"
		"       netprobe cmsg-rthdr FIRSTHOP FINAL PORT\n"
		"       netprobe tcp-bound SRC HOST PORT\n"
		"       netprobe udp-connect-cmsg HOST PORT WAIT\n"
		"       netprobe cgroup-move PROCS HOST PORT\n"
		"       netprobe clone-into CGDIR HOST PORT\n"
		"       netprobe legacy-detach CGROUP TYPE\n"
		"       netprobe io-uring-setup|packet-socket|xdp-socket|vsock-socket|fds|\n"
		"               i386-packet-socket\n");
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

static int do_tcp_bound(const char *src, const char *host, const char *port)
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

static int do_udp_connect_cmsg(const char *host, const char *port, const char *wait)
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

/* Move this process by writing its pid to a cgroup.procs file, then try
 * a connection: a sandbox's guard kills it in between, or it is still
 * confined (a move within the sandbox). */
static int do_cgroup_move(const char *procs, const char *host, const char *port)
{
	char pid[32];
	int fd, n;

	fd = open(procs, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return fail("open cgroup.procs", errno);
	n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (write(fd, pid, (size_t)n) != n) {
		int e = errno;

		close(fd);
		return fail("write cgroup.procs", e);
	}
	close(fd);
	return do_tcp(host, port, 0, 0);
}

/* A child born in another cgroup: clone3(CLONE_INTO_CGROUP), which no
 * cgroup.procs write and no cgroup_attach_task() is involved in. */
static int do_clone_into(const char *cgdir, const char *host, const char *port)
{
	struct clone_args args;
	int cgfd, status;
	long child;

	cgfd = open(cgdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cgfd < 0)
		return fail("open cgroup", errno);
	memset(&args, 0, sizeof(args));
	args.flags = CLONE_INTO_CGROUP;
	args.exit_signal = SIGCHLD;
	args.cgroup = (uint64_t)cgfd;
	child = syscall(SYS_clone3, &args, sizeof(args));
	if (child < 0) {
		int e = errno;

		close(cgfd);
		return fail("clone3(CLONE_INTO_CGROUP)", e);
	}
	if (child == 0) {
		close(cgfd);
		_exit(do_tcp(host, port, 0, 0));
	}
	close(cgfd);
	if (waitpid((pid_t)child, &status, 0) < 0)
		return fail("waitpid", errno);
	return ok();
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

/* connect-loop HOST PORT N: N connect() attempts from one TCP socket as fast
 * as possible (denied ones leave the socket unconnected, so it is reused).
 * Prints "ok A D" (allowed, denied) and succeeds when all N were made. */
static int do_connect_loop(const char *host, const char *port, const char *count)
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
static int do_echo(const char *host, int type)
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

static int do_udplite(const char *host, const char *port, int connected)
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

static int do_mptcp(const char *host, const char *port)
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

/* A segment routing header (type 4) with one segment besides the final
 * destination: segments[1] = first hop, segments[0] = the final destination
 * (the kernel writes it there when it pushes the header). */
static size_t make_srh(uint8_t *buf, const struct in6_addr *first, const struct in6_addr *final)
{
	memset(buf, 0, 8 + 32);
	buf[0] = 0;    /* next header: the kernel fills it in */
	buf[1] = 4;    /* hdrlen: 2 segments * 2 */
	buf[2] = 4;    /* routing type 4: SRH */
	buf[3] = 1;    /* segments left */
	buf[4] = 1;    /* last entry */
	memcpy(buf + 8, final, 16);
	memcpy(buf + 24, first, 16);
	return 8 + 32;
}

/* A type 2 routing header (Mobile IPv6): exactly one address. */
static size_t make_rt2(uint8_t *buf, const struct in6_addr *first)
{
	memset(buf, 0, 8 + 16);
	buf[1] = 2; /* hdrlen */
	buf[2] = 2; /* type 2 */
	buf[3] = 1; /* segments left */
	memcpy(buf + 8, first, 16);
	return 8 + 16;
}

static int do_setsockopt_rthdr(const char *host, const char *port)
{
	struct sockaddr_storage ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
	uint8_t rh[64];
	socklen_t len;
	size_t rlen;
	int fd, rc = EXIT_USAGE;

	if (make_addr(host, port, 0, 1, &ss, &len))
		return EXIT_USAGE;
	fd = open_socket(AF_INET6, SOCK_DGRAM, IPPROTO_UDP, 0, &rc);
	if (fd < 0)
		return rc;
	rlen = make_srh(rh, &in6->sin6_addr, &in6->sin6_addr);
	if (setsockopt(fd, IPPROTO_IPV6, IPV6_RTHDR, rh, (socklen_t)rlen))
		rc = fail("setsockopt(IPV6_RTHDR)", errno);
	else if (sendto(fd, "ping", 4, 0, (struct sockaddr *)&ss, len) < 0)
		rc = fail("sendto", errno);
	else
		rc = ok();
	close(fd);
	return rc;
}

static int send_with_rthdr(int fd, const struct sockaddr_storage *dst, socklen_t len,
			   const uint8_t *rh, size_t rlen)
{
	union {
		char buf[CMSG_SPACE(64)];
		struct cmsghdr align;
	} u;
	char payload[] = "ping";
	struct iovec iov = { .iov_base = payload, .iov_len = 4 };
	struct msghdr mh = { .msg_name = (void *)dst, .msg_namelen = len,
			     .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = u.buf, .msg_controllen = CMSG_SPACE(rlen) };
	struct cmsghdr *cm;

	memset(&u, 0, sizeof(u));
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = IPPROTO_IPV6;
	cm->cmsg_type = IPV6_RTHDR;
	cm->cmsg_len = CMSG_LEN(rlen);
	memcpy(CMSG_DATA(cm), rh, rlen);
	return sendmsg(fd, &mh, 0) < 0 ? -1 : 0;
}

static int do_cmsg_rthdr(const char *firsthop, const char *final, const char *port)
{
	struct sockaddr_storage ss, fh;
	socklen_t len, fhlen;
	uint8_t rh[64];
	size_t rlen;
	int fd, rc = EXIT_USAGE;

	if (make_addr(final, port, 0, 1, &ss, &len) || make_addr(firsthop, NULL, 0, 1, &fh, &fhlen))
		return EXIT_USAGE;
	fd = open_socket(AF_INET6, SOCK_DGRAM, IPPROTO_UDP, 0, &rc);
	if (fd < 0)
		return rc;
	/* Type 2 needs CONFIG_IPV6_MIP6; the kernel refuses the rest with
	 * EINVAL before anything is sent. */
	rlen = make_rt2(rh, &((struct sockaddr_in6 *)&fh)->sin6_addr);
	if (send_with_rthdr(fd, &ss, len, rh, rlen) == 0) {
		fprintf(stderr, "netprobe: sent with a type 2 routing header\n");
		rc = ok();
	} else if (errno != EINVAL) {
		rc = fail("sendmsg(IPV6_RTHDR type 2)", errno);
	} else {
		rlen = make_srh(rh, &((struct sockaddr_in6 *)&fh)->sin6_addr,
				&((struct sockaddr_in6 *)&ss)->sin6_addr);
		if (send_with_rthdr(fd, &ss, len, rh, rlen) == 0) {
			fprintf(stderr, "netprobe: sent with a type 4 routing header\n");
			rc = ok();
		} else {
			rc = fail("sendmsg(IPV6_RTHDR)", errno);
		}
	}
	close(fd);
	return rc;
}

static int do_ip_options(const char *host, const char *port)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
	uint8_t opt[8];
	socklen_t len;
	int fd, rc = EXIT_USAGE;

	if (make_addr(host, port, 0, 0, &ss, &len) || ss.ss_family != AF_INET)
		return EXIT_USAGE;
	fd = open_socket(AF_INET, SOCK_DGRAM, IPPROTO_UDP, 0, &rc);
	if (fd < 0)
		return rc;
	/* NOP, then LSRR: type 131, length 7, pointer 4, one address. */
	opt[0] = 1;
	opt[1] = 131;
	opt[2] = 7;
	opt[3] = 4;
	memcpy(opt + 4, &in4->sin_addr, 4);
	if (setsockopt(fd, IPPROTO_IP, IP_OPTIONS, opt, sizeof(opt)))
		rc = fail("setsockopt(IP_OPTIONS)", errno);
	else if (sendto(fd, "ping", 4, 0, (struct sockaddr *)&ss, len) < 0)
		rc = fail("sendto", errno);
	else
		rc = ok();
	close(fd);
	return rc;
}

static int do_legacy_detach(const char *cgroup, const char *type)
{
	static const char *const names[] = { "connect4", "connect6", "sendmsg4", "sendmsg6",
					     "sock_create", "setsockopt", "egress", "ingress",
					     "recvmsg4", "recvmsg6" };
	static const int vals[] = { BPF_CGROUP_INET4_CONNECT, BPF_CGROUP_INET6_CONNECT,
				    BPF_CGROUP_UDP4_SENDMSG,  BPF_CGROUP_UDP6_SENDMSG,
				    BPF_CGROUP_INET_SOCK_CREATE, BPF_CGROUP_SETSOCKOPT,
				    BPF_CGROUP_INET_EGRESS,   BPF_CGROUP_INET_INGRESS,
				    BPF_CGROUP_UDP4_RECVMSG,  BPF_CGROUP_UDP6_RECVMSG };
	union bpf_attr attr;
	int t, cgfd;

	if (lookup(type, names, vals, sizeof(vals) / sizeof(vals[0]), &t)) {
		char *end = NULL;
		long v = strtol(type, &end, 10);

		if (!*type || *end || v < 0 || v > 1000)
			return usage();
		t = (int)v;
	}
	cgfd = open(cgroup, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cgfd < 0)
		return fail("open cgroup", errno);
	memset(&attr, 0, sizeof(attr));
	attr.target_fd = (__u32)cgfd;
	attr.attach_bpf_fd = 0;
	attr.attach_type = (__u32)t;
	if (syscall(SYS_bpf, BPF_PROG_DETACH, &attr, sizeof(attr)) < 0) {
		int e = errno;

		close(cgfd);
		return fail("bpf(BPF_PROG_DETACH)", e);
	}
	close(cgfd);
	return ok();
}

/* BPF_OBJ_GET on a pinned object (egressd's maps): refused by the seccomp
 * filter of egressctl run; the fd is closed at once. */
static int do_bpf_obj_get(const char *path)
{
	union bpf_attr attr;
	long fd;

	memset(&attr, 0, sizeof(attr));
	attr.pathname = (__u64)(unsigned long)path;
	fd = syscall(SYS_bpf, BPF_OBJ_GET, &attr, sizeof(attr));
	if (fd < 0)
		return fail("bpf(BPF_OBJ_GET)", errno);
	close((int)fd);
	return ok();
}

/*
 * A raw socket with protocol UDP, connected: no pre_connect hook judges it,
 * but it has a destination port like a UDP socket. Sends a UDP datagram
 * built by hand (checksum 0: allowed for IPv4) to HOST:PORT.
 */
static int do_raw_udp_connected(const char *host, const char *port)
{
	struct sockaddr_storage ss;
	unsigned char pkt[8 + 4];
	socklen_t len;
	int fd, rc = EXIT_USAGE;
	uint16_t dport;

	if (make_addr(host, port, 0, 0, &ss, &len) || ss.ss_family != AF_INET)
		return EXIT_USAGE;
	fd = open_socket(AF_INET, SOCK_RAW, IPPROTO_UDP, 0, &rc);
	if (fd < 0)
		return rc;
	dport = ((struct sockaddr_in *)&ss)->sin_port;
	memset(pkt, 0, sizeof(pkt));
	pkt[0] = 0x30; /* source port 12345 */
	pkt[1] = 0x39;
	memcpy(pkt + 2, &dport, 2);
	pkt[4] = 0;
	pkt[5] = sizeof(pkt);
	memcpy(pkt + 8, "ping", 4);
	if (connect(fd, (struct sockaddr *)&ss, len))
		rc = fail("connect", errno);
	else if (send(fd, pkt, sizeof(pkt), 0) < 0)
		rc = fail("send", errno);
	else
		rc = ok();
	close(fd);
	return rc;
}

static int do_io_uring_setup(void)
{
	struct io_uring_params p;
	long fd;

	memset(&p, 0, sizeof(p));
	fd = syscall(__NR_io_uring_setup, 1, &p);
	if (fd < 0)
		return fail("io_uring_setup", errno);
	close((int)fd);
	return ok();
}

/* socket() only; anything created is closed at once and never used. */
static int do_family_socket(int family, int type, int proto)
{
	int fd = socket(family, type | SOCK_CLOEXEC, proto);

	if (fd < 0)
		return fail("socket", errno);
	close(fd);
	return ok();
}

#if defined(__x86_64__)
/* An i386 system call from 64-bit code: what a 32-bit binary would do. */
static long int80(long nr, long a, long b, long c)
{
	long ret;

	__asm__ volatile("int $0x80"
			 : "=a"(ret)
			 : "a"(nr), "b"(a), "c"(b), "d"(c)
			 : "memory", "r8", "r9", "r10", "r11");
	return ret;
}

static int do_i386_packet_socket(void)
{
	enum { I386_SOCKETCALL = 102, I386_SOCKET = 359, I386_CLOSE = 6, SYS_SOCKET_CALL = 1 };
	/* socketcall reads its arguments from memory below 4 GiB */
	unsigned int *args = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
	long r1, r2;

	if (args == MAP_FAILED)
		return fail("mmap", errno);
	args[0] = AF_PACKET;
	args[1] = SOCK_RAW;
	args[2] = htons(ETH_P_ALL);
	r1 = int80(I386_SOCKETCALL, SYS_SOCKET_CALL, (long)(uintptr_t)args, 0);
	if (r1 >= 0)
		int80(I386_CLOSE, r1, 0, 0);
	r2 = int80(I386_SOCKET, AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
	if (r2 >= 0)
		int80(I386_CLOSE, r2, 0, 0);
	munmap(args, 4096);
	fprintf(stderr, "netprobe: i386 socketcall: %s, i386 socket: %s\n",
		r1 >= 0 ? "a socket" : strerror((int)-r1), r2 >= 0 ? "a socket" : strerror((int)-r2));
	if (r1 >= 0 || r2 >= 0)
		return ok();
	return fail("i386 socketcall", (int)-r1);
}
#else
static int do_i386_packet_socket(void)
{
	return fail("i386-packet-socket (x86_64 only)", ENOSYS);
}
#endif

static int do_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0, self;

	if (!d) {
		fprintf(stderr, "netprobe: /proc/self/fd: %s\n", strerror(errno));
		return EXIT_USAGE;
	}
	self = dirfd(d);
	while ((de = readdir(d))) {
		char path[64], target[256];
		ssize_t tl;
		int fd;

		if (de->d_name[0] == '.')
			continue;
		fd = atoi(de->d_name);
		if (fd <= 2 || fd == self)
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		tl = readlink(path, target, sizeof(target) - 1);
		target[tl > 0 ? tl : 0] = '\0';
		fprintf(stderr, "netprobe: open fd %d -> %s\n", fd, target);
		n++;
	}
	closedir(d);
	if (n) {
		printf("err OPENFDS %d\n", n);
		return EXIT_FAIL;
	}
	return ok();
}

/* LeakSanitizer stops the world with ptrace, which the seccomp filter of
 * `egressctl run` refuses: under a filter (this program run inside a
 * sandbox) the leak check would fail the exit, so it is off there. Only an
 * ASan build calls this. */
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void)
{
	return prctl(PR_GET_SECCOMP, 0, 0, 0, 0) == 2;
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
		if (!strcmp(a, "udplite-sendto"))
			return do_udplite(argv[2], argv[3], 0);
		if (!strcmp(a, "udplite-connect"))
			return do_udplite(argv[2], argv[3], 1);
		if (!strcmp(a, "mptcp"))
			return do_mptcp(argv[2], argv[3]);
		if (!strcmp(a, "setsockopt-rthdr"))
			return do_setsockopt_rthdr(argv[2], argv[3]);
		if (!strcmp(a, "ip-options"))
			return do_ip_options(argv[2], argv[3]);
		if (!strcmp(a, "legacy-detach"))
			return do_legacy_detach(argv[2], argv[3]);
		if (!strcmp(a, "raw-udp-connected"))
			return do_raw_udp_connected(argv[2], argv[3]);
	}
	if (argc == 5 && !strcmp(a, "cmsg-rthdr"))
		return do_cmsg_rthdr(argv[2], argv[3], argv[4]);
	if (argc == 5 && !strcmp(a, "tcp-bound"))
		return do_tcp_bound(argv[2], argv[3], argv[4]);
	if (argc == 5 && !strcmp(a, "udp-connect-cmsg"))
		return do_udp_connect_cmsg(argv[2], argv[3], argv[4]);
	if (argc == 5 && !strcmp(a, "cgroup-move"))
		return do_cgroup_move(argv[2], argv[3], argv[4]);
	if (argc == 5 && !strcmp(a, "clone-into"))
		return do_clone_into(argv[2], argv[3], argv[4]);
	if (argc == 2) {
		if (!strcmp(a, "io-uring-setup"))
			return do_io_uring_setup();
		if (!strcmp(a, "packet-socket"))
			return do_family_socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
		if (!strcmp(a, "xdp-socket"))
			return do_family_socket(AF_XDP, SOCK_RAW, 0);
		if (!strcmp(a, "vsock-socket"))
			return do_family_socket(AF_VSOCK, SOCK_STREAM, 0);
		if (!strcmp(a, "fds"))
			return do_fds();
		if (!strcmp(a, "i386-packet-socket"))
			return do_i386_packet_socket();
	}
	if (argc == 5 && !strcmp(a, "connect-loop"))
		return do_connect_loop(argv[2], argv[3], argv[4]);
	if (argc == 5 && !strcmp(a, "socket"))
		return do_socket(argv[2], argv[3], argv[4]);
	if (argc == 3) {
		if (!strcmp(a, "bpf-obj-get"))
			return do_bpf_obj_get(argv[2]);
		if (!strcmp(a, "ping-sendto"))
			return do_icmp(argv[2], SOCK_DGRAM);
		if (!strcmp(a, "raw-sendto"))
			return do_icmp(argv[2], SOCK_RAW);
		if (!strcmp(a, "ping-echo"))
			return do_echo(argv[2], SOCK_DGRAM);
		if (!strcmp(a, "raw-echo"))
			return do_echo(argv[2], SOCK_RAW);
	}
	return usage();
}
