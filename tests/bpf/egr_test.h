/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What tests/bpf/test_bpf.c hands tests/bpf/egr_test.bpf.c (egr_t_case,
 * index 0) and reads back (egr_t_out), one BPF_PROG_TEST_RUN at a time.
 */
#ifndef EGR_TEST_H
#define EGR_TEST_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

enum egr_t_op {
	EGR_T_BACKSTOP = 1, /* egr_parse_l3 on the test packet, then egr_backstop */
	EGR_T_ADDR = 2,     /* egr_addr_judge: what connect/sendmsg decide */
	EGR_T_QUOTA = 3,    /* egr_quota_egress at case.now */
	EGR_T_BUDGET = 4,   /* case.count deny-budget takes */
	/* Only bench_ops times these (the cost of each per-packet update). */
	EGR_T_METER = 5,    /* egr_meter_pkt of sandbox_id, tenant 1, out, case.len */
	EGR_T_DEST = 6,     /* egr_note_dest of sandbox_id to daddr:port (TCP) */
};

#define EGR_T_MAX_TAKES 400

struct egr_t_case {
	__u64 now;       /* EGR_T_QUOTA: the clock the charge sees */
	__u64 len;       /* EGR_T_QUOTA: bytes charged */
	__u32 op;        /* enum egr_t_op */
	__u32 sandbox_id;
	__u32 v6;        /* EGR_T_ADDR */
	__u32 protocol;  /* EGR_T_ADDR */
	__u32 daddr[4];  /* EGR_T_ADDR, EGR_T_BUDGET: network order */
	__u32 peer;      /* EGR_T_ADDR: a send without address, judged as its peer */
	__u32 peer_err;  /* EGR_T_ADDR: ... that has no peer */
	__u32 count;     /* EGR_T_BUDGET: takes, at most EGR_T_MAX_TAKES */
	__u16 port;      /* EGR_T_ADDR, EGR_T_BUDGET: host order */
	__u16 real_sk;   /* EGR_T_BACKSTOP: the test run's own socket, not the fields below */
	/* EGR_T_BACKSTOP: the packet's socket (struct egr_sock_view). */
	__u32 sk_dst[4];
	__u32 sk_kind;
	__u32 sk_family;
	__u32 sk_type;
	__u32 sk_protocol;
	__u32 sk_state;
	__u16 sk_dport;
	__u16 pad;
};

struct egr_t_out {
	__s32 reason;   /* enum egr_reason */
	__u32 taken;    /* EGR_T_BUDGET: takes that may report */
	__u32 parsed;   /* EGR_T_BACKSTOP: egr_parse_l3 took the packet */
	__u16 dport;    /* EGR_T_BACKSTOP: the port it parsed */
	__u16 has_ports;
	__u32 runs;     /* incremented by every run: the program did run */
};

#endif /* EGR_TEST_H */
