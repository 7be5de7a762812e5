// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * egressd's cgroup programs. They are loaded once and attached to every
 * sandbox cgroup through BPF links; each attachment learns which sandbox it
 * serves from cgroup storage (keyed by the cgroup it is attached to), never
 * from the current task: sock_addr hooks also run from kernel workers (MPTCP
 * subflows) and for sockets in descendant cgroups the sandbox created.
 *
 * Every path that cannot prove an allow denies: no storage value, no sandbox
 * entry, no matching prefix, an expired prefix.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "egressd.h"
#include "egr_decide.h"

/* Large enough for two million-entry policies at once: an update builds the
 * new rule set beside the old one before it switches. LPM tries allocate per
 * entry (BPF_F_NO_PREALLOC is mandatory for them), so this costs nothing
 * until used. */
#define EGR_MAX_RULES (1u << 22)
#define EGR_MAX_SANDBOXES 65536

struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_STORAGE);
	/* A plain cgroup id key (not bpf_cgroup_storage_key) makes the storage
	 * shared by every egressd program attached to the same cgroup, so one
	 * write names the sandbox for all hooks. */
	__type(key, __u64);
	__type(value, struct egr_cg_ref);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_cg_storage SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_SANDBOXES);
	__type(key, __u32);
	__type(value, struct egr_sandbox);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_sandboxes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, EGR_MAX_RULES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_lpm4_key);
	__type(value, struct egr_rule);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_allow4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, EGR_MAX_RULES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_lpm6_key);
	__type(value, struct egr_rule);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_allow6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EGR_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_counters SEC(".maps");

static __always_inline void egr_count(enum egr_counter c)
{
	__u32 key = c;
	__u64 *v = bpf_map_lookup_elem(&egr_counters, &key);

	if (v)
		*v += 1;
}

/* The sandbox of the cgroup this program instance is attached to. NULL when
 * egressd has not written the storage yet or the sandbox entry is gone: the
 * caller denies. */
static __always_inline const struct egr_sandbox *egr_current_sandbox(void)
{
	struct egr_cg_ref *ref = bpf_get_local_storage(&egr_cg_storage, 0);
	__u32 id;

	if (!ref)
		return NULL;
	id = ref->sandbox_id;
	if (id == EGR_ID_NONE)
		return NULL;
	return bpf_map_lookup_elem(&egr_sandboxes, &id);
}

static __always_inline int egr_judge_rule(const struct egr_rule *rule, __u16 port, __u32 protocol)
{
	int expired = 0;
	int verdict = egr_rule_allows(rule, port, protocol, bpf_ktime_get_boot_ns(), &expired);

	if (expired)
		egr_count(EGR_CNT_EXPIRED);
	return verdict;
}

static __always_inline int egr_decide4(const struct egr_sandbox *sb, __u32 daddr_be, __u16 port,
				       __u32 protocol)
{
	struct egr_lpm4_key key = {
		.prefixlen = EGR_LPM_POLICY_BITS + 32,
		.policy_id = sb->policy_id,
	};

	__builtin_memcpy(key.addr, &daddr_be, sizeof(key.addr));
	return egr_judge_rule(bpf_map_lookup_elem(&egr_allow4, &key), port, protocol);
}

static __always_inline int egr_decide6(const struct egr_sandbox *sb, const __u32 daddr[4],
				       __u16 port, __u32 protocol)
{
	struct egr_lpm6_key key = {
		.prefixlen = EGR_LPM_POLICY_BITS + 128,
		.policy_id = sb->policy_id,
	};
	__u32 v4;

	/* ::ffff:a.b.c.d goes to an IPv4 host: the IPv4 rules decide. */
	if (egr_ip6_is_v4mapped(daddr, &v4))
		return egr_decide4(sb, v4, port, protocol);
	__builtin_memcpy(key.addr, daddr, sizeof(key.addr));
	return egr_judge_rule(bpf_map_lookup_elem(&egr_allow6, &key), port, protocol);
}

static __always_inline int egr_sock_addr4(struct bpf_sock_addr *ctx)
{
	const struct egr_sandbox *sb = egr_current_sandbox();

	if (!sb) {
		egr_count(EGR_CNT_NO_SANDBOX);
		return EGR_DENY;
	}
	return egr_decide4(sb, ctx->user_ip4, bpf_ntohs((__u16)ctx->user_port), ctx->protocol);
}

static __always_inline int egr_sock_addr6(struct bpf_sock_addr *ctx)
{
	const struct egr_sandbox *sb = egr_current_sandbox();
	__u32 daddr[4];

	if (!sb) {
		egr_count(EGR_CNT_NO_SANDBOX);
		return EGR_DENY;
	}
	/* The context only allows 4-byte loads of user_ip6. */
	daddr[0] = ctx->user_ip6[0];
	daddr[1] = ctx->user_ip6[1];
	daddr[2] = ctx->user_ip6[2];
	daddr[3] = ctx->user_ip6[3];
	return egr_decide6(sb, daddr, bpf_ntohs((__u16)ctx->user_port), ctx->protocol);
}

static __always_inline int egr_counted(int verdict, enum egr_counter allow, enum egr_counter deny)
{
	egr_count(verdict == EGR_ALLOW ? allow : deny);
	return verdict;
}

/* TCP connect (and TCP Fast Open, which goes through the same path),
 * connected UDP, and connect on ping sockets. */
SEC("cgroup/connect4")
int egr_connect4(struct bpf_sock_addr *ctx)
{
	return egr_counted(egr_sock_addr4(ctx), EGR_CNT_CONNECT_ALLOW, EGR_CNT_CONNECT_DENY);
}

SEC("cgroup/connect6")
int egr_connect6(struct bpf_sock_addr *ctx)
{
	return egr_counted(egr_sock_addr6(ctx), EGR_CNT_CONNECT_ALLOW, EGR_CNT_CONNECT_DENY);
}

/* Unconnected UDP: every sendto/sendmsg/sendmmsg datagram. A v6 socket
 * sending to a mapped address runs sendmsg4, not sendmsg6. */
SEC("cgroup/sendmsg4")
int egr_sendmsg4(struct bpf_sock_addr *ctx)
{
	return egr_counted(egr_sock_addr4(ctx), EGR_CNT_SENDMSG_ALLOW, EGR_CNT_SENDMSG_DENY);
}

SEC("cgroup/sendmsg6")
int egr_sendmsg6(struct bpf_sock_addr *ctx)
{
	return egr_counted(egr_sock_addr6(ctx), EGR_CNT_SENDMSG_ALLOW, EGR_CNT_SENDMSG_DENY);
}

/* Inet sockets the sock_addr hooks do not (fully) see: raw, UDP-Lite, SCTP,
 * ping. Only a policy that names them gets them. */
SEC("cgroup/sock_create")
int egr_sock_create(struct bpf_sock *sk)
{
	const struct egr_sandbox *sb = egr_current_sandbox();

	if (!sb) {
		egr_count(EGR_CNT_NO_SANDBOX);
		return EGR_DENY;
	}
	return egr_counted(egr_sock_create_allows(sb->flags, sk->family, sk->type, sk->protocol),
			   EGR_CNT_SOCK_CREATE_ALLOW, EGR_CNT_SOCK_CREATE_DENY);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
