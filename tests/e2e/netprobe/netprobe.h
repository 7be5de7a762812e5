/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* What netprobe's modules share: the includes, the exit codes, the
 * report helpers (common.c) and each action's entry for main.c. */
#ifndef EGR_NETPROBE_H
#define EGR_NETPROBE_H
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

enum udp_mode { UDP_CONNECT, UDP_SENDTO, UDP_SENDMSG, UDP_SENDMMSG };

/* main.c: the usage message; EXIT_USAGE. */
int usage(void);

/* common.c: reporting, addresses and sockets with timeouts. */
int fail(const char *what, int e);
int ok(void);
int make_addr(const char *host, const char *port, int mapped, int force6,
	      struct sockaddr_storage *ss, socklen_t *len);
int set_timeouts(int fd);
int open_socket(int family, int type, int proto, int dualstack, int *rc);
void tcp_exchange(int fd);
int lookup(const char *s, const char *const names[], const int vals[], size_t n, int *out);
uint16_t inet_csum(const void *data, size_t len);

/* inet.c: the TCP, UDP, ICMP, UDP-Lite and MPTCP actions. */
int do_tcp(const char *host, const char *port, int mapped, int force6);
int do_tfo(const char *host, const char *port);
int do_tcp_bound(const char *src, const char *host, const char *port);
int do_udp_connect_cmsg(const char *host, const char *port, const char *wait);
int do_udp(const char *host, const char *port, int mapped, enum udp_mode mode);
int do_socket(const char *fam, const char *type, const char *proto);
int do_icmp(const char *host, int type);
int do_connect_loop(const char *host, const char *port, const char *count);
int do_echo(const char *host, int type);
int do_udplite(const char *host, const char *port, int connected);
int do_mptcp(const char *host, const char *port);

/* exotic.c: cgroup moves, IPv6 routing headers, IP options, bpf(2),
 * io_uring, other families and the i386 ABI. */
int do_cgroup_move(const char *procs, const char *host, const char *port);
int do_clone_into(const char *cgdir, const char *host, const char *port);
int do_setsockopt_rthdr(const char *host, const char *port);
int do_cmsg_rthdr(const char *firsthop, const char *final, const char *port);
int do_ip_options(const char *host, const char *port);
int do_legacy_detach(const char *cgroup, const char *type);
int do_bpf_obj_get(const char *path);
int do_raw_udp_connected(const char *host, const char *port);
int do_io_uring_setup(void);
int do_family_socket(int family, int type, int proto);
int do_i386_packet_socket(void);
int do_fds(void);

#endif /* EGR_NETPROBE_H */
