// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* netprobe: reporting, numeric addresses and sockets with timeouts. */
#include "netprobe.h"

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
int fail(const char *what, int e)
{
	printf("err %s %d\n", errno_name(e), e);
	fprintf(stderr, "netprobe: %s: %s\n", what, strerror(e));
	return EXIT_FAIL;
}

int ok(void)
{
	printf("ok\n");
	return EXIT_OK;
}

/* A numeric address and port. mapped: an IPv4 address as ::ffff:a.b.c.d.
 * force6: an IPv4 address is not accepted (tcp6). 0 or -1. */
int make_addr(const char *host, const char *port, int mapped, int force6,
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

int set_timeouts(int fd)
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
int open_socket(int family, int type, int proto, int dualstack, int *rc)
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
void tcp_exchange(int fd)
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

int lookup(const char *s, const char *const names[], const int vals[], size_t n, int *out)
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

uint16_t inet_csum(const void *data, size_t len)
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
