// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* netprobe: the actions a hostile tool tries beside plain sockets: cgroup moves,
 * IPv6 routing headers, IP options, bpf(2), io_uring, other families, the
 * i386 ABI and inherited descriptors. */
#include "netprobe.h"

/* Move this process by writing its pid to a cgroup.procs file, then try
 * a connection: a sandbox's guard kills it in between, or it is still
 * confined (a move within the sandbox). */
int do_cgroup_move(const char *procs, const char *host, const char *port)
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
int do_clone_into(const char *cgdir, const char *host, const char *port)
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

int do_setsockopt_rthdr(const char *host, const char *port)
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

int do_cmsg_rthdr(const char *firsthop, const char *final, const char *port)
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

int do_ip_options(const char *host, const char *port)
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

int do_legacy_detach(const char *cgroup, const char *type)
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
int do_bpf_obj_get(const char *path)
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
int do_raw_udp_connected(const char *host, const char *port)
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

int do_io_uring_setup(void)
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
int do_family_socket(int family, int type, int proto)
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

int do_i386_packet_socket(void)
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

int do_fds(void)
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
