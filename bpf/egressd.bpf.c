// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * egressd's cgroup programs. They are loaded once and attached to every
 * sandbox cgroup through BPF links; each attachment learns which sandbox it
 * serves from cgroup storage (keyed by the cgroup it is attached to), never
 * from the current task: sock_addr hooks also run from kernel workers (MPTCP
 * subflows) and cgroup_skb hooks in softirq context.
 *
 * Every path that cannot prove an allow denies: no storage value, no sandbox
 * entry, no matching prefix, an expired prefix.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_tracing.h>

#include "egressd.h"
#include "egr_decide.h"
#include "egr_maps.bpf.h"

/* Large enough for two million-entry policies at once: an update builds the
 * new rule set beside the old one before it switches. LPM tries allocate per
 * entry (BPF_F_NO_PREALLOC is mandatory for them), so this costs nothing
 * until used. */
#define EGR_MAX_RULES (1u << 22)

#define ETH_P_IP   0x0800
#define ETH_P_IPV6 0x86DD
#define TCP_LISTEN 10

/* Sampled allow events: at most this many per second and CPU (burst the
 * same). Set by egressd between open and load. */
const volatile __u64 egr_allow_events_per_s = 20;
/* Deny events per second and sandbox (burst: egr_deny_events_burst); past
 * it a sandbox's denies are counted, not reported one by one. */
const volatile __u64 egr_deny_events_per_s = 100;
const volatile __u64 egr_deny_events_burst = 200;

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
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, EGR_MAX_SANDBOXES);
	__type(key, __u32);
	__type(value, struct egr_meter);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_meter_sb SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, EGR_MAX_SANDBOXES);
	__type(key, __u32);
	__type(value, struct egr_meter);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_meter_tenant SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_SANDBOXES);
	__type(key, __u32);
	__type(value, struct egr_quota);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_quota_sb SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_SANDBOXES);
	__type(key, __u32);
	__type(value, struct egr_quota);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_quota_tenant SEC(".maps");

/* Not an LRU: one sandbox spraying destinations must not evict another's.
 * Each holds at most EGR_DESTS_PER_SB (egr_dests_n); 256 sandboxes at their
 * cap fill it, and then a new destination of anyone is counted dropped. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 20);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_dest_key);
	__type(value, struct egr_dest_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_sb_dests SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_SANDBOXES);
	__type(key, __u32);
	__type(value, struct egr_dests_count);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_dests_n SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct egr_bucket);
} egr_allow_bucket SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct egr_dns_orig);
	/* Pinned so that an upgrade reuses it: a DNS query in flight keeps
	 * its original destination for the reply (user/egressd/migrate.c). */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_dns_orig SEC(".maps");

/* Who may ask each sandbox's DNS proxy (include/egressd.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 18);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct egr_dns_client_key);
	__type(value, struct egr_dns_client_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_dns_clients SEC(".maps");

/* Entries per sandbox in egr_dns_clients, for EGR_DNS_CLIENTS_PER_SB. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_SANDBOXES);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_dns_clients_n SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct egr_inspect_orig);
} egr_inspect_sk SEC(".maps");

/* Original destinations of inspected connections, for the proxy to take
 * (and delete) when it accepts them. LRU: an entry the proxy never took (the
 * client gave up before accept) is forgotten, never leaked. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, struct egr_inspect_key);
	__type(value, struct egr_inspect_orig);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_inspect_orig SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct egr_dns_client_rec);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_dns_client_sk SEC(".maps");

/* Per-sandbox deny-event budgets and losses (include/egressd.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EGR_MAX_SANDBOXES);
	__type(key, __u32);
	__type(value, struct egr_deny_budget);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} egr_deny_budget SEC(".maps");

#define EGR_LOOPBACK4 0x7f000001 /* host order */

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
static __always_inline const struct egr_sandbox *egr_current_sandbox(__u32 *sandbox_id)
{
	struct egr_cg_ref *ref = bpf_get_local_storage(&egr_cg_storage, 0);
	__u32 id;

	if (!ref)
		return NULL;
	id = ref->sandbox_id;
	if (id == EGR_ID_NONE)
		return NULL;
	*sandbox_id = id;
	return bpf_map_lookup_elem(&egr_sandboxes, &id);
}

/* The meter of a sandbox or tenant, created on first use. */
static __always_inline struct egr_meter *egr_meter(void *map, __u32 id)
{
	static const struct egr_meter zero;
	struct egr_meter *m = bpf_map_lookup_elem(map, &id);

	if (m)
		return m;
	/* EEXIST from a racing CPU is fine: look it up again. */
	bpf_map_update_elem(map, &id, &zero, BPF_NOEXIST);
	m = bpf_map_lookup_elem(map, &id);
	if (!m)
		egr_count(EGR_CNT_METER_FULL);
	return m;
}

/* Offsets of the struct egr_meter fields a verdict counts in. */
#define METER_FIELD(f) (__builtin_offsetof(struct egr_meter, f) / sizeof(__u64))

static __always_inline void egr_meter_add(__u32 sandbox_id, __u32 tenant_id, __u32 field, __u64 n)
{
	struct egr_meter *m;

	m = egr_meter(&egr_meter_sb, sandbox_id);
	if (m && field < sizeof(*m) / sizeof(__u64))
		((__u64 *)m)[field] += n;
	m = egr_meter(&egr_meter_tenant, tenant_id);
	if (m && field < sizeof(*m) / sizeof(__u64))
		((__u64 *)m)[field] += n;
}

/* Bytes and packets of one packet, in one lookup per meter. */
static __always_inline void egr_meter_pkt(__u32 sandbox_id, __u32 tenant_id, int out, __u64 len)
{
	struct egr_meter *m;

	m = egr_meter(&egr_meter_sb, sandbox_id);
	if (m) {
		if (out) {
			m->bytes_out += len;
			m->pkts_out++;
		} else {
			m->bytes_in += len;
			m->pkts_in++;
		}
	}
	m = egr_meter(&egr_meter_tenant, tenant_id);
	if (m) {
		if (out) {
			m->bytes_out += len;
			m->pkts_out++;
		} else {
			m->bytes_in += len;
			m->pkts_in++;
		}
	}
}

/* One event into the ring buffer; a full ring is counted, never silent. */
static __always_inline struct egr_deny_budget *egr_budget_of(__u32 sandbox_id, __u64 now)
{
	struct egr_deny_budget *b, init = {};

	if (sandbox_id == EGR_ID_NONE)
		return NULL;
	b = bpf_map_lookup_elem(&egr_deny_budget, &sandbox_id);
	if (b)
		return b;
	init.last_ns = now;
	init.tokens = (__s64)egr_deny_events_burst;
	bpf_map_update_elem(&egr_deny_budget, &sandbox_id, &init, BPF_NOEXIST);
	return bpf_map_lookup_elem(&egr_deny_budget, &sandbox_id);
}

/*
 * May this sandbox report one more deny? Its bucket refills at
 * egr_deny_events_per_s up to the burst (the refill is not atomic: racing
 * CPUs may lose a token, never create one); the take is atomic. Past it,
 * the deny is counted as suppressed and its destination noted, for the
 * aggregated event egressd emits. No budget entry (map full): report.
 */
static __always_inline int egr_deny_budget_take(__u32 sandbox_id, __u32 family, __u32 protocol,
						__u16 port, const __u32 addr[4])
{
	__u64 now = bpf_ktime_get_boot_ns(), step;
	struct egr_deny_budget *b = egr_budget_of(sandbox_id, now);
	struct egr_deny_top *t;
	__u32 slot, have[4];
	__s64 old;

	if (!b || !egr_deny_events_per_s)
		return 1; /* no entry (map full), or no budget configured: report */
	step = 1000000000ull / egr_deny_events_per_s;
	if (now > b->last_ns && now - b->last_ns >= step) {
		__s64 add = (__s64)((now - b->last_ns) / step), tok = b->tokens;

		b->tokens = tok + add > (__s64)egr_deny_events_burst ?
				    (__s64)egr_deny_events_burst : tok + add;
		b->last_ns = now;
	}
	old = __sync_fetch_and_add(&b->tokens, -1);
	if (old > 0)
		return 1;
	__sync_fetch_and_add(&b->tokens, 1);
	__sync_fetch_and_add(&b->suppressed, 1);
	if (!addr)
		return 0;
	slot = (addr[0] ^ addr[3] ^ port) & (EGR_DENY_TOP - 1);
	t = &b->top[slot];
	__builtin_memcpy(have, t->addr, sizeof(have));
	if (t->port == port && t->family == family && t->protocol == protocol &&
	    have[0] == addr[0] && have[1] == addr[1] && have[2] == addr[2] && have[3] == addr[3]) {
		__sync_fetch_and_add(&t->count, 1);
		return 0;
	}
	/* Replace the slot (racy between CPUs: "top" is approximate). */
	__builtin_memcpy(t->addr, addr, 16);
	t->port = port;
	t->family = (__u8)family;
	t->protocol = (__u8)protocol;
	t->count = 1;
	return 0;
}

static __always_inline struct egr_event *egr_event_new(__u32 type, __u32 sandbox_id,
						       const struct egr_sandbox *sb, int task)
{
	struct egr_event *e = bpf_ringbuf_reserve(&egr_events, sizeof(*e), 0);

	if (!e) {
		struct egr_deny_budget *b = egr_budget_of(sandbox_id, bpf_ktime_get_boot_ns());

		egr_count(EGR_CNT_EVENTS_LOST);
		/* Whose event it was: attributed in the stream and the audit. */
		if (b)
			__sync_fetch_and_add(&b->lost, 1);
		return NULL;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ts_ns = bpf_ktime_get_boot_ns();
	e->version = EGR_EVENT_VERSION;
	e->type = type;
	e->sandbox_id = sandbox_id;
	if (sb) {
		e->tenant_id = sb->tenant_id;
		e->policy_id = sb->policy_id;
	}
	if (task) {
		e->pid = bpf_get_current_pid_tgid() >> 32;
		e->cgroup_id = bpf_get_current_cgroup_id();
		bpf_get_current_comm(e->comm, sizeof(e->comm));
	}
	return e;
}

/* Every deny is reported; allows only within the per-CPU sample budget. */
static __always_inline int egr_should_report(int verdict)
{
	__u32 zero = 0;
	struct egr_bucket *b;

	if (verdict != EGR_ALLOW)
		return 1;
	b = bpf_map_lookup_elem(&egr_allow_bucket, &zero);
	return b && egr_bucket_take(b, bpf_ktime_get_boot_ns(), egr_allow_events_per_s,
				    egr_allow_events_per_s);
}

static __always_inline int egr_judge_rule(const struct egr_rule *rule, __u16 port, __u32 protocol,
					  int *expired)
{
	/* The clock only for a rule that can expire (DNS-learned): static
	 * rules and misses, most lookups, skip a clock read. 0 is never past
	 * an expiry, and egr_rule_allows looks at the time only when expires_ns
	 * is set. */
	__u64 now = rule && rule->expires_ns ? bpf_ktime_get_boot_ns() : 0;
	int verdict = egr_rule_allows(rule, port, protocol, now, expired);

	if (*expired)
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

	int verdict, expired;

	/* 0.0.0.0 is judged as the loopback the kernel will use (the hooks
	 * rewrite it first); a rule for 0.0.0.0 itself never allows. */
	if (egr_ip4_is_unspec(daddr_be))
		return EGR_DENY;
	__builtin_memcpy(key.addr, &daddr_be, sizeof(key.addr));
	verdict = egr_judge_rule(bpf_map_lookup_elem(&egr_allow4, &key), port, protocol, &expired);
	if (expired) {
		/* An expired DNS-learned /32 must not hide a static prefix
		 * that covers the same address: ask the trie for one bit less. */
		key.prefixlen = EGR_LPM_POLICY_BITS + 31;
		verdict = egr_judge_rule(bpf_map_lookup_elem(&egr_allow4, &key), port, protocol,
					 &expired);
	}
	return verdict;
}

static __always_inline int egr_decide6(const struct egr_sandbox *sb, const __u32 daddr[4],
				       __u16 port, __u32 protocol)
{
	struct egr_lpm6_key key = {
		.prefixlen = EGR_LPM_POLICY_BITS + 128,
		.policy_id = sb->policy_id,
	};
	__u32 v4;
	int verdict, expired;

	/* ::ffff:a.b.c.d goes to an IPv4 host: the IPv4 rules decide. */
	if (egr_ip6_is_v4mapped(daddr, &v4))
		return egr_decide4(sb, v4, port, protocol);
	if (egr_ip6_is_unspec(daddr))
		return EGR_DENY;
	__builtin_memcpy(key.addr, daddr, sizeof(key.addr));
	verdict = egr_judge_rule(bpf_map_lookup_elem(&egr_allow6, &key), port, protocol, &expired);
	if (expired) {
		key.prefixlen = EGR_LPM_POLICY_BITS + 127;
		verdict = egr_judge_rule(bpf_map_lookup_elem(&egr_allow6, &key), port, protocol,
					 &expired);
	}
	return verdict;
}

/* --- sock_addr: connect and unconnected sendmsg ---------------------------------- */

static __always_inline int egr_is_proxy4(const struct egr_sandbox *sb, __u32 addr_be, __u16 port)
{
	return sb->dns_port4 && addr_be == bpf_htonl(EGR_LOOPBACK4) && port == sb->dns_port4;
}

static __always_inline int egr_is_proxy6(const struct egr_sandbox *sb, const __u32 a[4], __u16 port)
{
	return sb->dns_port6 && a[0] == 0 && a[1] == 0 && a[2] == 0 && a[3] == bpf_htonl(1) &&
	       port == sb->dns_port6;
}

/*
 * Point a DNS connect or datagram at the sandbox's proxy listener (its
 * identity: the proxy knows the sandbox by the port it was reached on) and
 * remember the resolver it named, for recvmsg to put back. A v4-mapped
 * resolver on a v6 socket goes to the IPv6 listener too.
 */
static __always_inline int egr_redirect_dns(struct bpf_sock_addr *ctx,
					    const struct egr_sandbox *sb, int v6,
					    const __u32 daddr[4])
{
	struct egr_dns_orig *orig;
	struct bpf_sock *sk = ctx->sk;

	if (v6 ? !sb->dns_port6 : !sb->dns_port4)
		return EGR_DENY;
	if (!sk)
		return EGR_DENY;
	orig = bpf_sk_storage_get(&egr_dns_orig, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!orig)
		return EGR_DENY;
	if (v6) {
		orig->addr6[0] = daddr[0];
		orig->addr6[1] = daddr[1];
		orig->addr6[2] = daddr[2];
		orig->addr6[3] = daddr[3];
		orig->port6 = (__u16)ctx->user_port;
		ctx->user_ip6[0] = 0;
		ctx->user_ip6[1] = 0;
		ctx->user_ip6[2] = 0;
		ctx->user_ip6[3] = bpf_htonl(1);
		ctx->user_port = bpf_htons(sb->dns_port6);
	} else {
		orig->addr4 = daddr[0];
		orig->port4 = (__u16)ctx->user_port;
		ctx->user_ip4 = bpf_htonl(EGR_LOOPBACK4);
		ctx->user_port = bpf_htons(sb->dns_port4);
	}
	return EGR_ALLOW;
}

static __always_inline int egr_is_inspect4(const struct egr_sandbox *sb, __u32 addr_be,
					   __u16 port)
{
	return sb->inspect_port4 && addr_be == bpf_htonl(EGR_LOOPBACK4) &&
	       port == sb->inspect_port4;
}

static __always_inline int egr_is_inspect6(const struct egr_sandbox *sb, const __u32 a[4],
					   __u16 port)
{
	__u32 v4;

	if (egr_ip6_is_v4mapped(a, &v4))
		return egr_is_inspect4(sb, v4, port);
	return sb->inspect_port6 && a[0] == 0 && a[1] == 0 && a[2] == 0 &&
	       a[3] == bpf_htonl(1) && port == sb->inspect_port6;
}

/*
 * Under network.inspect, an allowed TCP connect goes to the sandbox's
 * inspecting proxy instead, which lets it through only if its TLS SNI or
 * HTTP Host names a host the policy allows at that address. The original
 * destination is kept in socket storage until the SYN publishes it
 * (egr_inspect_publish). UDP 443 (QUIC, which the proxy cannot read) is
 * refused so clients fall back to TCP; other protocols are refused too.
 * Called only for destinations the allowlist already allowed.
 */
static __always_inline int egr_inspect_redirect(struct bpf_sock_addr *ctx,
						const struct egr_sandbox *sb, int v6,
						const __u32 daddr[4], __u16 port)
{
	struct egr_inspect_orig *orig;
	struct bpf_sock *sk = ctx->sk;
	__u32 v4;

	if (ctx->protocol == EGR_IPPROTO_UDP)
		return port == EGR_QUIC_PORT ? EGR_DENY : EGR_ALLOW;
	if (ctx->protocol != EGR_IPPROTO_TCP || ctx->type != EGR_SOCK_STREAM || !sk)
		return EGR_DENY;
	/* Its own listener: a loop that would serve the sandbox to itself. */
	if (v6 ? egr_is_inspect6(sb, daddr, port) : egr_is_inspect4(sb, daddr[0], port))
		return EGR_DENY;
	if (v6 ? !sb->inspect_port6 : !sb->inspect_port4)
		return EGR_DENY;
	orig = bpf_sk_storage_get(&egr_inspect_sk, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!orig)
		return EGR_DENY;
	__builtin_memset(orig, 0, sizeof(*orig));
	orig->port = port;
	if (v6 && egr_ip6_is_v4mapped(daddr, &v4)) {
		orig->family = EGR_AF_INET;
		__builtin_memcpy(orig->addr, &v4, 4);
	} else if (v6) {
		orig->family = EGR_AF_INET6;
		__builtin_memcpy(orig->addr, daddr, 16);
	} else {
		orig->family = EGR_AF_INET;
		__builtin_memcpy(orig->addr, daddr, 4);
	}
	if (v6) {
		ctx->user_ip6[0] = 0;
		ctx->user_ip6[1] = 0;
		ctx->user_ip6[2] = 0;
		ctx->user_ip6[3] = bpf_htonl(1);
		ctx->user_port = bpf_htons(sb->inspect_port6);
	} else {
		ctx->user_ip4 = bpf_htonl(EGR_LOOPBACK4);
		ctx->user_port = bpf_htons(sb->inspect_port4);
	}
	return EGR_ALLOW;
}

enum egr_hook { EGR_HOOK_CONNECT, EGR_HOOK_SENDMSG };

/*
 * The peer of a connected UDP socket. A send with no address but with
 * ancillary data (IP_TOS, IPV6_TCLASS, IP_PKTINFO, ...) leaves the kernel's
 * connected fast path and runs the sendmsg hook with 0.0.0.0:0 or [::]:0:
 * the kernel fills in the connected peer after the hook (and ignores any
 * rewrite). udp_sendmsg and udpv6_sendmsg refuse an explicit port 0 before
 * the hook, so port 0 here always means "no address". The datagram goes to
 * the peer (or, with a routing header cmsg, to a first hop the skb backstop
 * judges), so the peer is what is judged, now, against the current policy.
 * -1 when the socket has no peer: denied.
 */
static __always_inline int egr_connected_peer(struct bpf_sock_addr *ctx, int v6, __u32 daddr[4],
					      __u16 *port)
{
	struct bpf_sock *sk = ctx->sk;
	__u32 family, d4;

	if (!sk)
		return -1;
	/* Every field read outright, each its own load: the verifier
	 * refuses a pointer the compiler would compute into the socket. */
	family = sk->family;
	*port = bpf_ntohs(sk->dst_port);
	d4 = sk->dst_ip4;
	daddr[0] = sk->dst_ip6[0];
	daddr[1] = sk->dst_ip6[1];
	daddr[2] = sk->dst_ip6[2];
	daddr[3] = sk->dst_ip6[3];
	if (!*port)
		return -1;
	if (family == EGR_AF_INET) {
		if (v6)
			return -1;
		daddr[0] = d4;
		daddr[1] = daddr[2] = daddr[3] = 0;
		return 0;
	}
	/* sendmsg4 on an AF_INET6 socket: it is connected to ::ffff:a.b.c.d. */
	if (!v6 && !egr_ip6_is_v4mapped(daddr, &daddr[0]))
		return -1;
	return 0;
}

static __always_inline int egr_sock_addr(struct bpf_sock_addr *ctx, int v6, enum egr_hook hook)
{
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	const struct egr_sandbox *sb;
	__u32 sandbox_id = 0, daddr[4] = {};
	struct egr_event *e;
	int verdict, audited, auditable = 1, peer = 0, peer_err = 0;

	if (v6) {
		/* The context only allows 4-byte loads of user_ip6. */
		daddr[0] = ctx->user_ip6[0];
		daddr[1] = ctx->user_ip6[1];
		daddr[2] = ctx->user_ip6[2];
		daddr[3] = ctx->user_ip6[3];
	} else {
		daddr[0] = ctx->user_ip4;
	}

	if (hook == EGR_HOOK_SENDMSG && port == 0) {
		peer = 1;
		peer_err = egr_connected_peer(ctx, v6, daddr, &port);
	} else if (v6 ? egr_ip6_unspec_to_loopback(daddr) : egr_ip4_unspec_to_loopback(&daddr[0])) {
		/* 0.0.0.0 / :: : judge, and connect to, the loopback. */
		if (v6) {
			ctx->user_ip6[0] = daddr[0];
			ctx->user_ip6[1] = daddr[1];
			ctx->user_ip6[2] = daddr[2];
			ctx->user_ip6[3] = daddr[3];
		} else {
			ctx->user_ip4 = daddr[0];
		}
	}

	sb = egr_current_sandbox(&sandbox_id);
	if (!sb) {
		egr_count(EGR_CNT_NO_SANDBOX);
		verdict = EGR_DENY;
	} else if (peer) {
		/* Never redirected here: the kernel would not take the rewrite.
		 * A socket redirected at connect() has the proxy as its peer. */
		if (peer_err)
			verdict = EGR_DENY;
		else if (v6 ? egr_is_proxy6(sb, daddr, port) : egr_is_proxy4(sb, daddr[0], port))
			verdict = EGR_ALLOW;
		else if (v6)
			verdict = egr_decide6(sb, daddr, port, ctx->protocol);
		else
			verdict = egr_decide4(sb, daddr[0], port, ctx->protocol);
	} else if (port == EGR_DNS_PORT && egr_proto_bit(ctx->protocol)) {
		/* All DNS goes to the sandbox's own proxy, whatever resolver
		 * it named; no proxy (egressd down) means no DNS. */
		verdict = egr_redirect_dns(ctx, sb, v6, daddr);
		auditable = 0;
	} else {
		verdict = v6 ? egr_decide6(sb, daddr, port, ctx->protocol)
			     : egr_decide4(sb, daddr[0], port, ctx->protocol);
		if (verdict == EGR_ALLOW && (sb->flags & EGR_SB_INSPECT))
			verdict = egr_inspect_redirect(ctx, sb, v6, daddr, port);
	}
	verdict = egr_apply_mode(sb, verdict, auditable, &audited);

	if (hook == EGR_HOOK_CONNECT) {
		egr_count(verdict == EGR_ALLOW ? EGR_CNT_CONNECT_ALLOW : EGR_CNT_CONNECT_DENY);
		if (sb)
			egr_meter_add(sandbox_id, sb->tenant_id,
				      verdict == EGR_ALLOW ? METER_FIELD(conn_allowed)
							   : METER_FIELD(conn_denied), 1);
		if (sb && audited)
			egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(would_deny_conn), 1);
	} else {
		egr_count(verdict == EGR_ALLOW ? EGR_CNT_SENDMSG_ALLOW : EGR_CNT_SENDMSG_DENY);
		if (sb)
			egr_meter_add(sandbox_id, sb->tenant_id,
				      verdict == EGR_ALLOW ? METER_FIELD(dgram_allowed)
							   : METER_FIELD(dgram_denied), 1);
		if (sb && audited)
			egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(would_deny_dgram), 1);
	}

	/* A would-be deny is reported like a deny, within the deny budget. */
	if (verdict == EGR_ALLOW && !audited
		    ? egr_should_report(verdict)
		    : egr_deny_budget_take(sandbox_id, v6 ? EGR_AF_INET6 : EGR_AF_INET,
					   ctx->protocol, port, daddr)) {
		e = egr_event_new(hook == EGR_HOOK_CONNECT ? EGR_EV_CONNECT : EGR_EV_SENDMSG,
				  sandbox_id, sb, 1);
		if (e) {
			e->verdict = audited ? EGR_VERDICT_AUDIT : verdict;
			e->family = v6 ? EGR_AF_INET6 : EGR_AF_INET;
			e->protocol = ctx->protocol;
			e->sock_type = ctx->type;
			e->port = port;
			__builtin_memcpy(e->addr, daddr, v6 ? 16 : 4);
			bpf_ringbuf_submit(e, 0);
		}
	}
	return verdict;
}

/* TCP connect (and TCP Fast Open, which goes through the same path),
 * connected UDP, and connect on ping sockets. */
SEC("cgroup/connect4")
int egr_connect4(struct bpf_sock_addr *ctx)
{
	return egr_sock_addr(ctx, 0, EGR_HOOK_CONNECT);
}

SEC("cgroup/connect6")
int egr_connect6(struct bpf_sock_addr *ctx)
{
	return egr_sock_addr(ctx, 1, EGR_HOOK_CONNECT);
}

/* Unconnected UDP: every sendto/sendmsg/sendmmsg datagram. A v6 socket
 * sending to a mapped address runs sendmsg4, not sendmsg6. */
SEC("cgroup/sendmsg4")
int egr_sendmsg4(struct bpf_sock_addr *ctx)
{
	return egr_sock_addr(ctx, 0, EGR_HOOK_SENDMSG);
}

SEC("cgroup/sendmsg6")
int egr_sendmsg6(struct bpf_sock_addr *ctx)
{
	return egr_sock_addr(ctx, 1, EGR_HOOK_SENDMSG);
}

/* A reply from the proxy is shown as coming from the resolver the stub
 * asked, or it would drop it; getpeername() on a redirected TCP or
 * connected UDP socket names that resolver too. These hooks can change the
 * address but never refuse. */
static __always_inline int egr_restore_resolver4(struct bpf_sock_addr *ctx)
{
	__u32 sandbox_id = 0;
	const struct egr_sandbox *sb = egr_current_sandbox(&sandbox_id);
	struct egr_dns_orig *orig;
	struct bpf_sock *sk = ctx->sk;

	if (!sb || !sk || !egr_is_proxy4(sb, ctx->user_ip4, bpf_ntohs((__u16)ctx->user_port)))
		return 1;
	orig = bpf_sk_storage_get(&egr_dns_orig, sk, 0, 0);
	if (orig && orig->port4) {
		ctx->user_ip4 = orig->addr4;
		ctx->user_port = orig->port4;
	}
	return 1;
}

static __always_inline int egr_restore_resolver6(struct bpf_sock_addr *ctx)
{
	__u32 sandbox_id = 0, src[4];
	const struct egr_sandbox *sb = egr_current_sandbox(&sandbox_id);
	struct egr_dns_orig *orig;
	struct bpf_sock *sk = ctx->sk;

	if (!sb || !sk)
		return 1;
	src[0] = ctx->user_ip6[0];
	src[1] = ctx->user_ip6[1];
	src[2] = ctx->user_ip6[2];
	src[3] = ctx->user_ip6[3];
	if (!egr_is_proxy6(sb, src, bpf_ntohs((__u16)ctx->user_port)))
		return 1;
	orig = bpf_sk_storage_get(&egr_dns_orig, sk, 0, 0);
	if (orig && orig->port6) {
		ctx->user_ip6[0] = orig->addr6[0];
		ctx->user_ip6[1] = orig->addr6[1];
		ctx->user_ip6[2] = orig->addr6[2];
		ctx->user_ip6[3] = orig->addr6[3];
		ctx->user_port = orig->port6;
	}
	return 1;
}

SEC("cgroup/recvmsg4")
int egr_recvmsg4(struct bpf_sock_addr *ctx)
{
	return egr_restore_resolver4(ctx);
}

SEC("cgroup/recvmsg6")
int egr_recvmsg6(struct bpf_sock_addr *ctx)
{
	return egr_restore_resolver6(ctx);
}

/* getpeername() of an inspected socket names where it meant to go, not the
 * proxy. Never refuses. */
static __always_inline int egr_restore_inspected(struct bpf_sock_addr *ctx, int v6)
{
	__u32 sandbox_id = 0, peer[4] = {};
	const struct egr_sandbox *sb = egr_current_sandbox(&sandbox_id);
	struct egr_inspect_orig *orig;
	struct bpf_sock *sk = ctx->sk;
	__u16 port = bpf_ntohs((__u16)ctx->user_port);

	if (!sb || !sk || !(sb->flags & EGR_SB_INSPECT))
		return 0;
	if (v6) {
		peer[0] = ctx->user_ip6[0];
		peer[1] = ctx->user_ip6[1];
		peer[2] = ctx->user_ip6[2];
		peer[3] = ctx->user_ip6[3];
	} else {
		peer[0] = ctx->user_ip4;
	}
	if (v6 ? !egr_is_inspect6(sb, peer, port) : !egr_is_inspect4(sb, peer[0], port))
		return 0;
	orig = bpf_sk_storage_get(&egr_inspect_sk, sk, 0, 0);
	if (!orig || !orig->port)
		return 0;
	if (!v6) {
		if (orig->family != EGR_AF_INET)
			return 0;
		__builtin_memcpy(&ctx->user_ip4, orig->addr, 4);
	} else if (orig->family == EGR_AF_INET6) {
		__u32 a[4];

		__builtin_memcpy(a, orig->addr, 16);
		ctx->user_ip6[0] = a[0];
		ctx->user_ip6[1] = a[1];
		ctx->user_ip6[2] = a[2];
		ctx->user_ip6[3] = a[3];
	} else {
		__u32 a;

		__builtin_memcpy(&a, orig->addr, 4);
		ctx->user_ip6[0] = 0;
		ctx->user_ip6[1] = 0;
		ctx->user_ip6[2] = bpf_htonl(0xffff);
		ctx->user_ip6[3] = a;
	}
	ctx->user_port = bpf_htons(orig->port);
	return 1;
}

SEC("cgroup/getpeername4")
int egr_getpeername4(struct bpf_sock_addr *ctx)
{
	if (egr_restore_inspected(ctx, 0))
		return 1;
	return egr_restore_resolver4(ctx);
}

SEC("cgroup/getpeername6")
int egr_getpeername6(struct bpf_sock_addr *ctx)
{
	if (egr_restore_inspected(ctx, 1))
		return 1;
	return egr_restore_resolver6(ctx);
}

/* --- sock_create and setsockopt ------------------------------------------------ */

static __always_inline void egr_report_refusal(__u32 type, __u32 sandbox_id,
					       const struct egr_sandbox *sb, __u32 family,
					       __u32 sock_type, __u32 protocol, int level,
					       int optname, int audited)
{
	struct egr_event *e;

	if (sb)
		egr_meter_add(sandbox_id, sb->tenant_id,
			      audited ? METER_FIELD(would_deny_sock) : METER_FIELD(sock_denied), 1);
	if (!egr_deny_budget_take(sandbox_id, family, protocol, 0, NULL))
		return;
	e = egr_event_new(type, sandbox_id, sb, 1);
	if (!e)
		return;
	e->verdict = audited ? EGR_VERDICT_AUDIT : EGR_DENY;
	e->family = family;
	e->sock_type = sock_type;
	e->protocol = protocol;
	e->level = level;
	e->optname = optname;
	bpf_ringbuf_submit(e, 0);
}

/* Inet sockets the sock_addr hooks do not (fully) see: raw, UDP-Lite, SCTP,
 * ping. Only a policy that names them gets them. */
SEC("cgroup/sock_create")
int egr_sock_create(struct bpf_sock *sk)
{
	__u32 sandbox_id = 0, family = sk->family, type = sk->type, proto = sk->protocol;
	const struct egr_sandbox *sb = egr_current_sandbox(&sandbox_id);
	int verdict, audited = 0;

	if (!sb) {
		egr_count(EGR_CNT_NO_SANDBOX);
		verdict = EGR_DENY;
	} else {
		verdict = egr_sock_create_allows(sb->flags, family, type, proto);
		verdict = egr_apply_mode(sb, verdict, 1, &audited);
	}
	egr_count(verdict == EGR_ALLOW ? EGR_CNT_SOCK_CREATE_ALLOW : EGR_CNT_SOCK_CREATE_DENY);
	if (verdict != EGR_ALLOW || audited)
		egr_report_refusal(EGR_EV_SOCK_CREATE, sandbox_id, sb, family, type, proto, 0, 0,
				   audited);
	return verdict;
}

/* Source routing makes the packet go to a first hop the connect/sendmsg
 * hooks never judged (they see the final destination). Refuse the options
 * that set it; cmsg-borne routing headers are caught by the skb backstop. */
SEC("cgroup/setsockopt")
int egr_setsockopt(struct bpf_sockopt *ctx)
{
	int level = ctx->level, optname = ctx->optname, verdict, audited = 0;
	const struct egr_sandbox *sb;
	__u32 sandbox_id = 0;

	/* Leave optval and optlen alone: the kernel then uses the caller's
	 * buffer as is, whatever its size. The verdict depends on the option
	 * alone (a quarantine does not refuse options: its connects and
	 * packets are), so the sandbox is looked up only for a refused one:
	 * every socket sets a few options, and this keeps two map lookups off
	 * each. */
	if (egr_setsockopt_allows(level, optname) == EGR_ALLOW)
		return 1;
	sb = egr_current_sandbox(&sandbox_id);
	verdict = EGR_DENY;
	/* Options of sockets outside any sandbox entry stay refused; a
	 * sandbox's own go through its mode (audit lets them through). */
	if (sb)
		verdict = egr_apply_mode(sb, verdict, 1, &audited);
	if (verdict != EGR_ALLOW)
		egr_count(EGR_CNT_SETSOCKOPT_DENY);
	egr_report_refusal(EGR_EV_SETSOCKOPT, sandbox_id, sb, 0, 0, 0, level, optname, audited);
	return verdict == EGR_ALLOW ? 1 : 0;
}

/*
 * Every socket family, where the host can load it (BPF trampolines): the
 * layer that sees AF_PACKET, AF_XDP and AF_VSOCK for sandboxes whose
 * commands were not started by egressctl run (which applies seccomp).
 * egressd loads it only when its start-up probe says the host can
 * (bpfstate.c); elsewhere seccomp is the only layer for those families.
 */
SEC("lsm_cgroup/socket_create")
int BPF_PROG(egr_lsm_socket_create, int family, int type, int protocol, int kern)
{
	__u32 sandbox_id = 0;
	const struct egr_sandbox *sb = egr_current_sandbox(&sandbox_id);
	int verdict;

	if (!sb) {
		egr_count(EGR_CNT_NO_SANDBOX);
		return kern ? 1 : 0;
	}
	verdict = egr_family_allowed(sb->families, family, kern);
	if (verdict != EGR_ALLOW) {
		egr_count(EGR_CNT_SOCK_CREATE_DENY);
		egr_report_refusal(EGR_EV_SOCK_CREATE, sandbox_id, sb, (__u32)family, (__u32)type,
				   (__u32)protocol, 0, 0, 0);
	}
	return verdict;
}

/* --- cgroup_skb: metering, quotas, inbound deny, the backstop -------------------- */

struct egr_l3 {
	__u32 daddr[4];
	__u32 saddr[4];
	__u32 family;
	__u32 protocol;
	__u16 dport;
	__u16 sport;
	int has_ports;
};

/* The real L3 destination and, when the first fragment carries it, the
 * transport ports. IPv6 extension headers are walked a bounded number of
 * times; a chain longer than that is not parsed and judged without ports. */
static __always_inline int egr_parse_l3(struct __sk_buff *skb, struct egr_l3 *l3)
{
	__u32 off;
	__u8 nexthdr;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		/* The header and, when it has no options, the ports in one
		 * load: one helper call per packet instead of two. */
		struct {
			struct iphdr ip;
			__be16 ports[2];
		} h;
		int ports_loaded = bpf_skb_load_bytes(skb, 0, &h, sizeof(h)) == 0;

		if (!ports_loaded && bpf_skb_load_bytes(skb, 0, &h.ip, sizeof(h.ip)))
			return -1;
		l3->family = EGR_AF_INET;
		l3->daddr[0] = h.ip.daddr;
		l3->saddr[0] = h.ip.saddr;
		l3->protocol = h.ip.protocol;
		/* Later fragments carry no ports. */
		if (h.ip.frag_off & bpf_htons(0x1fff))
			return 0;
		off = h.ip.ihl * 4;
		if (ports_loaded && off == sizeof(h.ip)) {
			if (l3->protocol == EGR_IPPROTO_TCP || l3->protocol == EGR_IPPROTO_UDP ||
			    l3->protocol == EGR_IPPROTO_UDPLITE) {
				l3->sport = bpf_ntohs(h.ports[0]);
				l3->dport = bpf_ntohs(h.ports[1]);
				l3->has_ports = 1;
			}
			return 0;
		}
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;

		if (bpf_skb_load_bytes(skb, 0, &ip6, sizeof(ip6)))
			return -1;
		l3->family = EGR_AF_INET6;
		__builtin_memcpy(l3->daddr, &ip6.daddr, 16);
		__builtin_memcpy(l3->saddr, &ip6.saddr, 16);
		nexthdr = ip6.nexthdr;
		off = sizeof(ip6);
#pragma unroll
		for (int i = 0; i < 6; i++) {
			struct ipv6_opt_hdr oh;

			if (nexthdr != 0 && nexthdr != 43 && nexthdr != 60 && nexthdr != 44)
				break;
			if (bpf_skb_load_bytes(skb, off, &oh, sizeof(oh)))
				return 0;
			if (nexthdr == 44) {
				__be16 frag_off;

				if (bpf_skb_load_bytes(skb, off + 2, &frag_off, sizeof(frag_off)))
					return 0;
				nexthdr = oh.nexthdr;
				off += 8;
				if (frag_off & bpf_htons(0xfff8))
					return 0;
				continue;
			}
			nexthdr = oh.nexthdr;
			off += (oh.hdrlen + 1) * 8;
		}
		l3->protocol = nexthdr;
	} else {
		return -1;
	}
	if (l3->protocol == EGR_IPPROTO_TCP || l3->protocol == EGR_IPPROTO_UDP ||
	    l3->protocol == EGR_IPPROTO_UDPLITE) {
		__be16 ports[2];

		if (bpf_skb_load_bytes(skb, off, ports, sizeof(ports)))
			return 0;
		l3->sport = bpf_ntohs(ports[0]);
		l3->dport = bpf_ntohs(ports[1]);
		l3->has_ports = 1;
	}
	return 0;
}

/* Was this socket's destination judged by connect4/6? Only TCP (and MPTCP,
 * TCP on the wire) stream sockets and UDP datagram sockets have the
 * pre_connect hook; a SOCK_RAW socket with protocol 17 connects without
 * one, and UDP-Lite has none either. */
static __always_inline int egr_connect_judged(const struct bpf_sock *sk)
{
	__u32 type = sk->type, proto = sk->protocol;

	if (type == EGR_SOCK_STREAM)
		return proto == EGR_IPPROTO_TCP || proto == EGR_IPPROTO_MPTCP;
	if (type == EGR_SOCK_DGRAM)
		return proto == EGR_IPPROTO_UDP;
	return 0;
}

static __always_inline int egr_addr_eq(const __u32 a[4], const __u32 b[4], int v6)
{
	if (!v6)
		return a[0] == b[0];
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

/*
 * The backstop: may this egress packet go where it really goes? A packet of
 * a connected TCP or UDP socket to the very address and port that connect()
 * judged passes (this also keeps accepted inbound connections, when allowed,
 * working). Anything else — unconnected datagrams, raw and ping sockets the
 * policy allowed, a first hop set by a routing header or IP options — must
 * be in the allowlist itself.
 */
static __always_inline int egr_backstop(struct __sk_buff *skb, const struct egr_sandbox *sb,
					const struct egr_l3 *l3)
{
	struct bpf_sock *sk = skb->sk;
	__u32 port = l3->has_ports ? l3->dport : 0;

	if (sk) {
		sk = bpf_sk_fullsock(sk);
		if (sk) {
			__u32 dst[4] = {}, fam = sk->family;
			__u16 dport = bpf_ntohs(sk->dst_port);

			if (fam == EGR_AF_INET) {
				dst[0] = sk->dst_ip4;
			} else {
				dst[0] = sk->dst_ip6[0];
				dst[1] = sk->dst_ip6[1];
				dst[2] = sk->dst_ip6[2];
				dst[3] = sk->dst_ip6[3];
				/* A dual-stack socket connected to ::ffff:a.b.c.d
				 * sends IPv4 packets. */
				if (l3->family == EGR_AF_INET && egr_ip6_is_v4mapped(dst, &dst[0]))
					fam = EGR_AF_INET;
			}
			/* Only where connect() is hooked: TCP, UDP (and MPTCP,
			 * TCP on the wire). UDP-Lite has no pre_connect, so a
			 * connected UDP-Lite socket was never judged. */
			if (dport && egr_connect_judged(sk) && fam == l3->family &&
			    egr_addr_eq(dst, l3->daddr, fam == EGR_AF_INET6) &&
			    (!l3->has_ports || dport == l3->dport))
				return EGR_ALLOW;
			/* A listener answering a SYN (syncookies and the like
			 * send from the listener itself). */
			if (sk->state == TCP_LISTEN && (sb->flags & EGR_SB_INBOUND_ALLOW))
				return EGR_ALLOW;
		} else if (sb->flags & EGR_SB_INBOUND_ALLOW) {
			/* Request and timewait sockets of accepted connections. */
			return EGR_ALLOW;
		}
	}
	/* Datagrams the sendmsg hook redirected to the sandbox's DNS proxy. */
	if (l3->has_ports && (l3->family == EGR_AF_INET ? egr_is_proxy4(sb, l3->daddr[0], l3->dport)
							 : egr_is_proxy6(sb, l3->daddr, l3->dport)))
		return EGR_ALLOW;
	if (l3->family == EGR_AF_INET)
		return egr_decide4(sb, l3->daddr[0], port, l3->protocol);
	return egr_decide6(sb, l3->daddr, port, l3->protocol);
}

static __always_inline int egr_charge_quota(void *map, __u32 id, __u64 len, __u64 now)
{
	struct egr_quota *q = bpf_map_lookup_elem(map, &id);
	__u64 before;
	int first_over, verdict;

	if (!q || !q->limit_bytes)
		return EGR_ALLOW;
	if (q->window_ns && now - q->window_start_ns >= q->window_ns) {
		/* Racy across CPUs by at most a few packets per window edge. */
		q->window_start_ns = now;
		q->bytes = 0;
	}
	before = __sync_fetch_and_add(&q->bytes, len);
	verdict = egr_quota_verdict(q->limit_bytes, before, len, &first_over);
	if (first_over)
		__sync_fetch_and_add(&q->exceeded, 1);
	return verdict == EGR_ALLOW ? EGR_ALLOW : (first_over ? -1 : EGR_DENY);
}

static __always_inline void egr_report_skb(__u32 type, __u32 sandbox_id,
					   const struct egr_sandbox *sb, const struct egr_l3 *l3,
					   int inbound, __u32 verdict)
{
	struct egr_event *e;

	/* Audited packets are already sampled (egr_should_report). */
	if (verdict == EGR_DENY &&
	    !egr_deny_budget_take(sandbox_id, l3->family, l3->protocol,
				  inbound ? l3->sport : l3->dport, inbound ? l3->saddr : l3->daddr))
		return;
	e = egr_event_new(type, sandbox_id, sb, 0);
	if (!e)
		return;
	e->verdict = verdict;
	e->family = l3->family;
	e->protocol = l3->protocol;
	e->port = inbound ? l3->sport : l3->dport;
	__builtin_memcpy(e->addr, inbound ? l3->saddr : l3->daddr, 16);
	bpf_ringbuf_submit(e, 0);
}

/*
 * The SYN of an inspected connection: its socket now has its source port,
 * so publish the original destination under the client's address and port
 * for the proxy to find when it accepts. Once per connect (published flag;
 * a new connect() resets it). Returns 1 for every packet to the sandbox's
 * proxy listener, whose bytes the proxy accounts to the real destination.
 */
static __always_inline int egr_inspect_publish(struct __sk_buff *skb, __u32 sandbox_id,
					       const struct egr_sandbox *sb,
					       const struct egr_l3 *l3)
{
	struct egr_inspect_key key = { .sandbox_id = sandbox_id };
	struct egr_inspect_orig *orig;
	struct bpf_sock *sk;

	if (!l3->has_ports || l3->protocol != EGR_IPPROTO_TCP)
		return 0;
	if (l3->family == EGR_AF_INET ? !egr_is_inspect4(sb, l3->daddr[0], l3->dport)
				      : !egr_is_inspect6(sb, l3->daddr, l3->dport))
		return 0;
	sk = skb->sk;
	if (sk)
		sk = bpf_sk_fullsock(sk);
	if (!sk)
		return 1;
	orig = bpf_sk_storage_get(&egr_inspect_sk, sk, 0, 0);
	if (!orig || orig->published)
		return 1;
	key.family = l3->family;
	key.port = l3->sport;
	__builtin_memcpy(key.addr, l3->saddr, sizeof(key.addr));
	/* Overwrites what an earlier, never-accepted connection from the same
	 * address and port left. */
	if (bpf_map_update_elem(&egr_inspect_orig, &key, orig, BPF_ANY) == 0)
		orig->published = 1;
	return 1;
}

/* Bytes per real destination, for the audit record of the execution. */
static __always_inline void egr_note_dest(__u32 sandbox_id, const struct egr_l3 *l3, __u32 len,
					  __u64 now)
{
	struct egr_dest_key key = {
		.sandbox_id = sandbox_id,
		.port = l3->has_ports ? l3->dport : 0,
		.family = l3->family,
		.protocol = l3->protocol,
	};
	struct egr_dest_val *v, init = { .first_ns = now };
	struct egr_dests_count *cnt, zero = {};
	long err;

	__builtin_memcpy(key.addr, l3->daddr, sizeof(key.addr));
	v = bpf_map_lookup_elem(&egr_sb_dests, &key);
	if (!v) {
		cnt = bpf_map_lookup_elem(&egr_dests_n, &sandbox_id);
		if (!cnt) {
			bpf_map_update_elem(&egr_dests_n, &sandbox_id, &zero, BPF_NOEXIST);
			cnt = bpf_map_lookup_elem(&egr_dests_n, &sandbox_id);
			if (!cnt)
				return; /* no room to count: egressd sees no count entry */
		}
		/* Racing CPUs may each pass the cap check once: a few over. */
		if (cnt->entries >= EGR_DESTS_PER_SB) {
			__sync_fetch_and_add(&cnt->dropped, 1);
			return;
		}
		err = bpf_map_update_elem(&egr_sb_dests, &key, &init, BPF_NOEXIST);
		if (err == 0)
			__sync_fetch_and_add(&cnt->entries, 1);
		v = bpf_map_lookup_elem(&egr_sb_dests, &key);
		if (!v) {
			__sync_fetch_and_add(&cnt->dropped, 1);
			return;
		}
	}
	__sync_fetch_and_add(&v->bytes_out, len);
	__sync_fetch_and_add(&v->pkts_out, 1);
	v->last_ns = now;
}

/*
 * A packet of this sandbox to its own DNS proxy: record its socket as one
 * that may ask the proxy as this sandbox (egr_dns_clients). Only the
 * socket's own packets count (a full TCP or UDP socket bound to the packet's
 * source port: a raw socket forging that source is not one), one source per
 * family per socket, at most EGR_DNS_CLIENTS_PER_SB per sandbox. This runs
 * before the packet is queued to the listener, so the entry is there when
 * the proxy reads it.
 */
static __always_inline void egr_note_dns_client(struct __sk_buff *skb, __u32 sandbox_id,
						const struct egr_sandbox *sb,
						const struct egr_l3 *l3)
{
	struct egr_dns_client_key key = {};
	struct egr_dns_client_val val = {};
	struct egr_dns_client_rec *rec;
	struct bpf_sock *sk = skb->sk;
	__u32 zero = 0, *n;
	int v6 = l3->family == EGR_AF_INET6;

	if (!l3->has_ports ||
	    (l3->protocol != EGR_IPPROTO_UDP && l3->protocol != EGR_IPPROTO_TCP))
		return;
	if (v6 ? !egr_is_proxy6(sb, l3->daddr, l3->dport)
	       : !egr_is_proxy4(sb, l3->daddr[0], l3->dport))
		return;
	if (!sk)
		return;
	sk = bpf_sk_fullsock(sk);
	if (!sk || !egr_connect_judged(sk) || sk->src_port != l3->sport)
		return;
	rec = bpf_sk_storage_get(&egr_dns_client_sk, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!rec || rec->has[v6 ? 1 : 0])
		return;
	key.sandbox_id = sandbox_id;
	key.port = l3->sport;
	key.family = l3->family;
	key.protocol = l3->protocol;
	__builtin_memcpy(key.addr, l3->saddr, sizeof(key.addr));
	n = bpf_map_lookup_elem(&egr_dns_clients_n, &sandbox_id);
	if (!n) {
		bpf_map_update_elem(&egr_dns_clients_n, &sandbox_id, &zero, BPF_NOEXIST);
		n = bpf_map_lookup_elem(&egr_dns_clients_n, &sandbox_id);
		if (!n)
			return;
	}
	if (*n >= EGR_DNS_CLIENTS_PER_SB)
		return;
	val.cookie = bpf_get_socket_cookie(skb);
	/* Taken already: a sibling of this sandbox on the same port
	 * (SO_REUSEPORT) recorded it; entries never cross sandboxes. */
	if (bpf_map_update_elem(&egr_dns_clients, &key, &val, BPF_NOEXIST))
		return;
	__sync_fetch_and_add(n, 1);
	if (v6) {
		rec->key[1] = key;
		rec->has[1] = 1;
	} else {
		rec->key[0] = key;
		rec->has[0] = 1;
	}
}

static __always_inline void egr_forget_dns_client(struct bpf_sock *sk,
						  const struct egr_dns_client_key *key,
						  __u64 cookie)
{
	struct egr_dns_client_val *v = bpf_map_lookup_elem(&egr_dns_clients, key);
	__u32 id = key->sandbox_id, *n;

	if (!v || v->cookie != cookie || bpf_map_delete_elem(&egr_dns_clients, key))
		return;
	n = bpf_map_lookup_elem(&egr_dns_clients_n, &id);
	if (n && *n)
		__sync_fetch_and_add(n, -1);
}

/* A socket that asked the DNS proxy closes: its source may be anyone's
 * next, so the proxy must stop taking it for this sandbox. */
SEC("cgroup/sock_release")
int egr_sock_release(struct bpf_sock *sk)
{
	struct egr_dns_client_rec *rec = bpf_sk_storage_get(&egr_dns_client_sk, sk, 0, 0);
	__u64 cookie;

	if (!rec)
		return 1;
	cookie = bpf_get_socket_cookie(sk);
	if (rec->has[0])
		egr_forget_dns_client(sk, &rec->key[0], cookie);
	if (rec->has[1])
		egr_forget_dns_client(sk, &rec->key[1], cookie);
	return 1;
}

SEC("cgroup_skb/egress")
int egr_skb_egress(struct __sk_buff *skb)
{
	struct egr_l3 l3 = {};
	const struct egr_sandbox *sb;
	__u32 sandbox_id = 0, len = skb->len;
	__u64 now;
	int q, ip, verdict, audited;

	sb = egr_current_sandbox(&sandbox_id);
	if (!sb) {
		egr_count(EGR_CNT_NO_SANDBOX);
		return EGR_DENY;
	}
	/* Not IP: nothing egressd allows. */
	ip = egr_parse_l3(skb, &l3) == 0;
	verdict = ip ? egr_backstop(skb, sb, &l3) : EGR_DENY;
	verdict = egr_apply_mode(sb, verdict, 1, &audited);
	if (verdict != EGR_ALLOW) {
		egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(backstop_drops), 1);
		egr_count(EGR_CNT_BACKSTOP_DROP);
		if (ip)
			egr_report_skb(EGR_EV_BACKSTOP, sandbox_id, sb, &l3, 0, EGR_DENY);
		return EGR_DENY;
	}
	if (audited) {
		egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(would_deny_backstop), 1);
		/* Every datagram of an audited sendmsg would come here again:
		 * counted in full, reported within the allow sample budget. */
		if (ip && egr_should_report(EGR_ALLOW))
			egr_report_skb(EGR_EV_BACKSTOP, sandbox_id, sb, &l3, 0, EGR_VERDICT_AUDIT);
	}
	egr_note_dns_client(skb, sandbox_id, sb, &l3);

	now = bpf_ktime_get_boot_ns();
	/* The sandbox's quota entry exists only when its policy sets one, and
	 * the sandbox entry carries that limit (sandbox.c writes both): no
	 * limit, no lookup. The tenant's quota can come from any sandbox of
	 * the tenant, so it is always looked up. */
	q = sb->quota_bytes ? egr_charge_quota(&egr_quota_sb, sandbox_id, len, now) : EGR_ALLOW;
	if (q == EGR_ALLOW)
		q = egr_charge_quota(&egr_quota_tenant, sb->tenant_id, len, now);
	if (q != EGR_ALLOW) {
		egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(quota_drops), 1);
		egr_count(EGR_CNT_QUOTA_DROP);
		if (q < 0)
			egr_report_skb(EGR_EV_QUOTA, sandbox_id, sb, &l3, 0, EGR_DENY);
		return EGR_DENY;
	}
	egr_meter_pkt(sandbox_id, sb->tenant_id, 1, len);
	if (!(sb->flags & EGR_SB_INSPECT) || !egr_inspect_publish(skb, sandbox_id, sb, &l3))
		egr_note_dest(sandbox_id, &l3, len, now);
	return EGR_ALLOW;
}

/*
 * Inbound deny: a packet to a listening TCP socket is a connection attempt
 * (SYN, or the ACK of a syncookie handshake): dropped. An unconnected UDP
 * socket accepts datagrams only from what its allowlist lets it talk to;
 * a connected one only ever gets its peer's. Replies on connections the
 * sandbox opened pass.
 */
SEC("cgroup_skb/ingress")
int egr_skb_ingress(struct __sk_buff *skb)
{
	struct egr_l3 l3 = {};
	const struct egr_sandbox *sb;
	struct bpf_sock *sk;
	__u32 sandbox_id = 0, len = skb->len;
	int verdict = EGR_ALLOW, audited;

	sb = egr_current_sandbox(&sandbox_id);
	if (!sb) {
		egr_count(EGR_CNT_NO_SANDBOX);
		return EGR_DENY;
	}
	sk = skb->sk;
	if (sk)
		sk = bpf_sk_fullsock(sk);
	/* The common case first, without parsing the packet: a reply on a TCP
	 * connection (not a listener) or on a connected UDP socket passes, as
	 * below; only listeners and unconnected UDP sockets need the headers. */
	if (sk && ((sk->protocol == EGR_IPPROTO_TCP && sk->state != TCP_LISTEN) ||
		   (sk->protocol == EGR_IPPROTO_UDP && sk->dst_port)))
		goto pass;
	if (!(sb->flags & EGR_SB_INBOUND_ALLOW) && egr_parse_l3(skb, &l3) == 0) {
		if (sk && sk->protocol == EGR_IPPROTO_TCP && sk->state == TCP_LISTEN) {
			verdict = EGR_DENY;
		} else if (sk && sk->protocol == EGR_IPPROTO_UDP && !sk->dst_port) {
			__u32 src[4];

			__builtin_memcpy(src, l3.saddr, sizeof(src));
			if (l3.family == EGR_AF_INET)
				verdict = egr_is_proxy4(sb, src[0], l3.sport)
						  ? EGR_ALLOW
						  : egr_decide4(sb, src[0], l3.sport, l3.protocol);
			else
				verdict = egr_is_proxy6(sb, src, l3.sport)
						  ? EGR_ALLOW
						  : egr_decide6(sb, src, l3.sport, l3.protocol);
		}
	}
	/* Inbound deny is not the egress allowlist: audit mode does not
	 * open it; a quarantine drops every inbound packet. */
	verdict = egr_apply_mode(sb, verdict, 0, &audited);
	if (verdict != EGR_ALLOW) {
		egr_meter_add(sandbox_id, sb->tenant_id, METER_FIELD(inbound_drops), 1);
		egr_count(EGR_CNT_INBOUND_DROP);
		egr_report_skb(EGR_EV_INBOUND, sandbox_id, sb, &l3, 1, EGR_DENY);
		return EGR_DENY;
	}
pass:
	egr_meter_pkt(sandbox_id, sb->tenant_id, 0, len);
	return EGR_ALLOW;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
