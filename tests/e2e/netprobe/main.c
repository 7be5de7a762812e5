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
#include "netprobe.h"

int usage(void)
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
