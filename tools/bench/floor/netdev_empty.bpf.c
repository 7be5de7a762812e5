// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The floor of the device benchmark (tools/bench_netdev.py): a tc program
 * that only passes (TC_ACT_UNSPEC: the next program, or the stack), put on
 * both directions of the device as tc filters. Its packets/s, bulk and
 * bpf_stats are what a program at the device's hooks costs before it reads
 * a byte of the packet or a map.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

SEC("tc") int flr_nd_pass(struct __sk_buff *skb)
{
	return -1;
}

char _license[] SEC("license") = "GPL";
