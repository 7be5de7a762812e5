// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The floor of the connect benchmark (tools/bench_floor.py): a program that
 * does nothing but allow, at every cgroup hook egressd attaches per
 * sandbox. Their bpf_stats per connect/close, and the connect rate of a
 * cgroup they are attached to, are what running that many programs costs
 * on this machine before any of them looks at a map: the part of egressd's
 * figures that no data layout can take away, only fewer program runs.
 * Names: flr_ + the name of egressd's program at that hook.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#define ALLOW_SOCK_ADDR(name, sec)                                                         \
	SEC(sec) int name(struct bpf_sock_addr *ctx) { return 1; }

ALLOW_SOCK_ADDR(flr_connect4, "cgroup/connect4")
ALLOW_SOCK_ADDR(flr_connect6, "cgroup/connect6")
ALLOW_SOCK_ADDR(flr_sendmsg4, "cgroup/sendmsg4")
ALLOW_SOCK_ADDR(flr_sendmsg6, "cgroup/sendmsg6")
ALLOW_SOCK_ADDR(flr_recvmsg4, "cgroup/recvmsg4")
ALLOW_SOCK_ADDR(flr_recvmsg6, "cgroup/recvmsg6")
ALLOW_SOCK_ADDR(flr_getpeername4, "cgroup/getpeername4")
ALLOW_SOCK_ADDR(flr_getpeername6, "cgroup/getpeername6")
ALLOW_SOCK_ADDR(flr_bind4, "cgroup/bind4")
ALLOW_SOCK_ADDR(flr_bind6, "cgroup/bind6")

SEC("cgroup/post_bind4") int flr_post_bind4(struct bpf_sock *sk) { return 1; }
SEC("cgroup/post_bind6") int flr_post_bind6(struct bpf_sock *sk) { return 1; }
SEC("cgroup/sock_create") int flr_sock_create(struct bpf_sock *sk) { return 1; }
SEC("cgroup/sock_release") int flr_sock_release(struct bpf_sock *sk) { return 1; }
SEC("cgroup/setsockopt") int flr_setsockopt(struct bpf_sockopt *ctx) { return 1; }
SEC("cgroup_skb/egress") int flr_skb_egress(struct __sk_buff *skb) { return 1; }
SEC("cgroup_skb/ingress") int flr_skb_ingress(struct __sk_buff *skb) { return 1; }

char LICENSE[] SEC("license") = "Dual BSD/GPL";
