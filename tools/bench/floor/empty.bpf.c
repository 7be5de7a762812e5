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
#ifndef FLOOR_SK
#define FLOOR_SK 0
#endif

#if FLOOR_SK
/*
 * Variants (docs/benchmarks.md "The floor, and what socket storage
 * costs"): the skb programs add each packet's bytes to socket storage,
 * creating it on a socket's first packet (FLOOR_SK 1, floor-skcreate.bpf.o)
 * or only looking it up, which never finds any (FLOOR_SK 2,
 * floor-sklookup.bpf.o): the price of per-socket counters, apart.
 */
struct flr_skm {
	__u64 bytes_out;
	__u64 pkts_out;
	__u64 bytes_in;
	__u64 pkts_in;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct flr_skm);
} flr_sk SEC(".maps");

static __always_inline int flr_add(struct __sk_buff *skb, int out)
{
	struct bpf_sock *sk = skb->sk;
	struct flr_skm *m;

	if (!sk)
		return 1;
	sk = bpf_sk_fullsock(sk);
	if (!sk)
		return 1;
	m = bpf_sk_storage_get(&flr_sk, sk, 0, FLOOR_SK == 1 ? BPF_SK_STORAGE_GET_F_CREATE : 0);
	if (!m)
		return 1;
	if (out) {
		__sync_fetch_and_add(&m->bytes_out, skb->len);
		__sync_fetch_and_add(&m->pkts_out, 1);
	} else {
		__sync_fetch_and_add(&m->bytes_in, skb->len);
		__sync_fetch_and_add(&m->pkts_in, 1);
	}
	return 1;
}

SEC("cgroup_skb/egress") int flr_skb_egress(struct __sk_buff *skb) { return flr_add(skb, 1); }
SEC("cgroup_skb/ingress") int flr_skb_ingress(struct __sk_buff *skb) { return flr_add(skb, 0); }
#else
SEC("cgroup_skb/egress") int flr_skb_egress(struct __sk_buff *skb) { return 1; }
SEC("cgroup_skb/ingress") int flr_skb_ingress(struct __sk_buff *skb) { return 1; }
#endif /* FLOOR_SK */

char LICENSE[] SEC("license") = "Dual BSD/GPL";
