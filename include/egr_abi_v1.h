/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * FROZEN: the kernel/userspace ABI of version 1, the unversioned layout of
 * egressd up to commit c5034ba (maps pinned at <bpffs-dir>/maps/egr_*).
 * Only user/egressd/migrate.c uses it, to read what a version 1 egressd left
 * pinned and convert it. Never edit these structs: they describe maps that
 * exist in kernels out there. Version 2 has the same layouts; the copy is
 * here so that the next change to include/egressd.h cannot silently change
 * how version 1 is read.
 */
#ifndef EGR_ABI_V1_H
#define EGR_ABI_V1_H

#include <linux/types.h>

#define EGR_V1_MAX_PORT_RANGES 8

struct egr_v1_lpm4_key {
	__u32 prefixlen;
	__u32 policy_id;
	__u8 addr[4];
};

struct egr_v1_lpm6_key {
	__u32 prefixlen;
	__u32 policy_id;
	__u8 addr[16];
};

struct egr_v1_port_range {
	__u16 lo;
	__u16 hi;
	__u16 protos;
};

struct egr_v1_rule {
	__u64 expires_ns; /* bpf_ktime_get_boot_ns() deadline; 0 = never */
	__u32 nranges;
	__u16 pad;
	struct egr_v1_port_range ranges[EGR_V1_MAX_PORT_RANGES];
	__u16 pad2;
};

struct egr_v1_sandbox {
	__u64 families;
	__u64 quota_bytes;
	__u64 quota_window_ns;
	__u32 policy_id;
	__u32 tenant_id;
	__u32 flags;
	__u16 dns_port4;
	__u16 dns_port6;
};

struct egr_v1_dns_orig {
	__u32 addr6[4];
	__u32 addr4;
	__u16 port4;
	__u16 port6;
};

struct egr_v1_quota {
	__u64 limit_bytes;
	__u64 window_ns;
	__u64 window_start_ns;
	__u64 bytes;
	__u64 exceeded;
};

struct egr_v1_meter {
	__u64 bytes_out;
	__u64 pkts_out;
	__u64 bytes_in;
	__u64 pkts_in;
	__u64 conn_allowed;
	__u64 conn_denied;
	__u64 dgram_allowed;
	__u64 dgram_denied;
	__u64 sock_denied;
	__u64 backstop_drops;
	__u64 inbound_drops;
	__u64 quota_drops;
};

struct egr_v1_cg_ref {
	__u32 sandbox_id;
	__u32 pad;
};

struct egr_v1_dest_key {
	__u32 sandbox_id;
	__u16 port;
	__u8 family;
	__u8 protocol;
	__u8 addr[16];
};

struct egr_v1_dest_val {
	__u64 bytes_out;
	__u64 pkts_out;
	__u64 first_ns;
	__u64 last_ns;
};

/* Index of egr_counters in version 1 (the enum was implicit then). */
enum egr_v1_counter {
	EGR_V1_CNT_CONNECT_ALLOW = 0,
	EGR_V1_CNT_CONNECT_DENY = 1,
	EGR_V1_CNT_SENDMSG_ALLOW = 2,
	EGR_V1_CNT_SENDMSG_DENY = 3,
	EGR_V1_CNT_SOCK_CREATE_ALLOW = 4,
	EGR_V1_CNT_SOCK_CREATE_DENY = 5,
	EGR_V1_CNT_NO_SANDBOX = 6,
	EGR_V1_CNT_EXPIRED = 7,
	EGR_V1_CNT_SETSOCKOPT_DENY = 8,
	EGR_V1_CNT_BACKSTOP_DROP = 9,
	EGR_V1_CNT_INBOUND_DROP = 10,
	EGR_V1_CNT_QUOTA_DROP = 11,
	EGR_V1_CNT_EVENTS_LOST = 12,
	EGR_V1_CNT_METER_FULL = 13,
	EGR_V1_CNT_MAX = 14,
};

_Static_assert(sizeof(struct egr_v1_lpm4_key) == 12, "frozen");
_Static_assert(sizeof(struct egr_v1_lpm6_key) == 24, "frozen");
_Static_assert(sizeof(struct egr_v1_rule) == 64, "frozen");
_Static_assert(sizeof(struct egr_v1_sandbox) == 40, "frozen");
_Static_assert(sizeof(struct egr_v1_dns_orig) == 24, "frozen");
_Static_assert(sizeof(struct egr_v1_quota) == 40, "frozen");
_Static_assert(sizeof(struct egr_v1_meter) == 96, "frozen");
_Static_assert(sizeof(struct egr_v1_cg_ref) == 8, "frozen");
_Static_assert(sizeof(struct egr_v1_dest_key) == 24, "frozen");
_Static_assert(sizeof(struct egr_v1_dest_val) == 32, "frozen");

#endif /* EGR_ABI_V1_H */
