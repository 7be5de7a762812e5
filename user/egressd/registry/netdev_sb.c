// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Device sandboxes in the registry (issue 25; docs/architecture.md "Device
 * sandboxes"): a sandbox whose network stack the socket hooks cannot see
 * (gVisor, a microVM) is the host side of its network device plus a policy.
 * Its policy goes into the same rule maps and sandbox entry as a cgroup
 * sandbox's; kernel/netdev.c puts the device programs on the device. The
 * record's cgroup is the key "netdev:IFACE[@NETNS]" (the set's by-path
 * lookup), its cgroup_id 0. Its DNS, and under network.inspect its TCP, go
 * to listeners of its own, bound to the device's addresses (docs/dns.md and
 * docs/inspect.md, "Device sandboxes").
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "clock.h"
#include "compile.h"
#include "dns/dnsproxy.h"
#include "inspect.h"
#include "kernel/netdev.h"
#include "log.h"
#include "registry/registry_impl.h"

/* How often the registry looks for devices that went (egr_reg_reclaim). */
#define ND_CHECK_NS 1000000000ull

int reg_netdev_key(const char *ifname, const char *netns, char *buf, size_t len)
{
	int n = netns ? snprintf(buf, len, "netdev:%s@%s", ifname, netns)
		      : snprintf(buf, len, "netdev:%s", ifname);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* A device name as the kernel takes it (dev_valid_name) and without '@',
 * which the key uses. */
static bool valid_ifname(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (!n || n >= IFNAMSIZ || !strcmp(s, ".") || !strcmp(s, ".."))
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] == '/' || s[i] == ':' || s[i] == '@' || s[i] <= ' ' || s[i] > '~')
			return false;
	return true;
}

struct egr_sb *egr_reg_find_netdev(struct egr_registry *r, const char *ifname, const char *netns)
{
	char key[PATH_MAX + 32];
	struct egr_reg_iter it = { 0 };

	if (!ifname || reg_netdev_key(ifname, netns, key, sizeof(key)))
		return NULL;
	for (struct egr_sb *sb; (sb = egr_reg_next(r, &it));)
		if (sb->netdev && strcmp(sb->cgroup, key) == 0)
			return sb;
	return NULL;
}

/* The namespace at path (NULL: egressd's) as the kernel names it. */
static int netns_ino(const char *path, struct stat *st)
{
	return stat(path ? path : "/proc/self/ns/net", st) < 0 ? -errno : 0;
}

/* A device sandbox already on this device under another spelling of its
 * namespace's path (/run/netns/X and /proc/PID/ns/net): two sandboxes on
 * one device would share its tc filter slot, and the detach of one would
 * open the device under the other. */
static struct egr_sb *same_device(struct egr_registry *r, const char *netns, int ifindex)
{
	struct egr_reg_iter it = { 0 };
	struct stat want, have;

	if (netns_ino(netns, &want))
		return NULL;
	for (struct egr_sb *sb; (sb = egr_reg_next(r, &it));)
		if (sb->netdev && sb->ifindex == ifindex && netns_ino(sb->netns, &have) == 0 &&
		    have.st_dev == want.st_dev && have.st_ino == want.st_ino)
			return sb;
	return NULL;
}

/*
 * The sandbox's DNS and inspecting listeners, bound to the device's
 * addresses in its namespace (want*: the ports of its state, at adoption);
 * *a gets the addresses the device programs rewrite its DNS (and its
 * inspected TCP) to. A family without an address (or without a proxy at
 * all) gets no listener: its DNS (and inspected TCP) is dropped, as the
 * log says; the attach goes on; a family whose listener could not be
 * opened (a tentative address) has port 0 in the entry, which the
 * programs drop the same way. Errors: the namespace or the listeners (f
 * says which).
 */
static int netdev_listeners(struct egr_registry *r, struct egr_sb *sb, const struct egr_policy *p,
			    const uint16_t want[4], struct egr_nd_dns *a, struct egr_fail *f)
{
	struct egr_dnsproxy_device dev = { .ifindex = sb->ifindex };
	struct stat st;
	int err;

	memset(a, 0, sizeof(*a));
	if (!r->dns && !(r->inspect && p->inspect))
		return 0;
	err = egr_nd_dns_addrs(sb->netns, sb->ifindex, a);
	if (err) {
		reg_fail(f, EGR_REG_BAD_REQUEST, "netdev", "the addresses of %s: %s", sb->cgroup,
			 strerror(-err));
		return err;
	}
	if (!a->has4 || !a->has6)
		log_warn("sandbox %u: device %s has no %s%s%s address: that DNS%s is dropped",
			 sb->id, sb->cgroup, a->has4 ? "" : "IPv4",
			 !a->has4 && !a->has6 ? " or " : "",
			 a->has6 ? "" : "IPv6 (wider than link-local)",
			 p->inspect ? " and inspected TCP" : "");
	sb->nd_has4 = a->has4;
	sb->nd_has6 = a->has6;
	memcpy(sb->nd_addr4, &a->addr4, 4);
	memcpy(sb->nd_addr6, &a->addr6, 16);
	dev.has4 = a->has4;
	dev.has6 = a->has6;
	dev.addr4 = a->addr4;
	dev.addr6 = a->addr6;
	err = reg_start_dns(r, sb, p, r->dns ? &dev : NULL, want[0], want[1], f);
	if (!err)
		err = reg_start_inspect(r, sb, p, want[2], want[3], f);
	if (err)
		return err;
	/* Which namespace they keep alive (netdev_dns_orphaned()). */
	if (sb->netns && netns_ino(sb->netns, &st) == 0) {
		sb->nd_ns_dev = st.st_dev;
		sb->nd_ns_ino = st.st_ino;
	}
	return 0;
}

/* The device's programs off, then its listeners, entry, rules and state. */
static void netdev_teardown(struct egr_registry *r, const struct egr_sb *sb, const json_t *policy)
{
	egr_nd_detach(r->bpf, sb->id, sb->netns, sb->netdev);
	if (r->dns)
		egr_dnsproxy_remove_sandbox(r->dns, sb->id);
	if (r->inspect)
		egr_inspect_remove_sandbox(r->inspect, sb->id);
	egr_bpf_del_sandbox(r->bpf, sb->id);
	egr_bpf_forget_sandbox_stats(r->bpf, sb->id);
	egr_bpf_quota_del(r->bpf, EGR_QUOTA_SANDBOX, sb->id);
	if (policy)
		reg_delete_policy_rules(r, sb->id, sb->policy_id, policy);
	egr_state_drop(&r->st, sb->id);
}

/*
 * The steps, each undone in reverse when a later one fails:
 *   1 the record  2 its DNS listeners  3 the rules  4 the sandbox entry
 *   5 the state file  6 the device programs (both or neither)  7 into the set
 * The programs go on last: from that moment every packet is judged by an
 * entry already in place.
 */
int egr_reg_attach_netdev(struct egr_registry *r, const char *ifname, const char *netns,
			  const json_t *policy, struct egr_sb **out, struct egr_fail *f)
{
	char key[PATH_MAX + 32];
	struct egr_policy p = { 0 };
	struct egr_compiled c = { 0 };
	struct egr_sandbox ksb;
	struct egr_nd_dns dns;
	enum egr_nd_mode mode = 0;
	struct egr_sb *sb;
	char master[IFNAMSIZ + 16];
	int ifindex = 0, err;

	if (!valid_ifname(ifname)) {
		reg_fail(f, EGR_REG_BAD_REQUEST, "netdev",
			 "netdev must be a device name (1-15 characters, no '/', ':', '@' or space)");
		return -EINVAL;
	}
	if (netns && netns[0] != '/') {
		reg_fail(f, EGR_REG_BAD_REQUEST, "netns", "netns must be an absolute path");
		return -EINVAL;
	}
	if (reg_netdev_key(ifname, netns, key, sizeof(key))) {
		reg_fail(f, EGR_REG_BAD_REQUEST, "netns", "netns: path too long");
		return -ENAMETOOLONG;
	}
	err = reg_prepare(r, policy, &p, &c, f);
	if (err)
		return err;
	sb = egr_reg_find_netdev(r, ifname, netns);
	if (sb) {
		egr_compiled_free(&c);
		egr_policy_free(&p);
		if (strcmp(sb->sha256, p.sha256) != 0) {
			reg_fail(f, EGR_REG_EXISTS, "netdev",
				 "%s is already a sandbox with another policy; use update", key);
			return -EEXIST;
		}
		log_info("sandbox %u: attach of %s again with the same policy: nothing to do",
			 sb->id, key);
		*out = sb;
		return 0;
	}
	err = egr_nd_ifindex(netns, ifname, &ifindex);
	if (err) {
		if (err == -ENODEV)
			reg_fail(f, EGR_REG_BAD_REQUEST, "netdev", "no device %s in %s", ifname,
				 netns ? netns : "egressd's network namespace");
		else
			reg_fail(f, EGR_REG_BAD_REQUEST, "netns", "network namespace %s: %s",
				 netns ? netns : "(egressd's)", strerror(-err));
		goto undo_policy;
	}
	sb = same_device(r, netns, ifindex);
	if (sb) {
		reg_fail(f, EGR_REG_EXISTS, "netdev", "%s is already sandbox %u (attached as %s)", key,
			 sb->id, sb->cgroup);
		err = -EEXIST;
		goto undo_policy;
	}
	err = egr_nd_switch_port(netns, ifindex, master, sizeof(master));
	if (err > 0) {
		reg_fail(f, EGR_REG_BAD_REQUEST, "netdev",
			 "%s is a port of %s: its frames are switched there, not routed (ARP and "
			 "neighbour discovery would reach the other ports); attach the sandbox's "
			 "own device", key, master);
		err = -EOPNOTSUPP;
		goto undo_policy;
	}
	if (err) {
		reg_fail(f, EGR_REG_INTERNAL, "netdev", "%s: cannot read its master: %s", key,
			 strerror(-err));
		goto undo_policy;
	}

	/* 1 */
	sb = calloc(1, sizeof(*sb));
	if (!sb || !(sb->cgroup = strdup(key)) || !(sb->netdev = strdup(ifname)) ||
	    (netns && !(sb->netns = strdup(netns)))) {
		err = -ENOMEM;
		reg_fail(f, EGR_REG_INTERNAL, NULL, "out of memory");
		goto undo_record;
	}
	sb->ifindex = ifindex;
	sb->id = r->next_sandbox_id++;
	sb->policy_id = reg_alloc_policy_id(r);
	sb->tenant_id = reg_tenant_id(r, p.tenant);
	sb->attached_at = sb->updated_at = time(NULL);
	if (!sb->tenant_id) {
		err = -ENOMEM;
		reg_fail(f, EGR_REG_INTERNAL, NULL, "out of memory");
		goto undo_record;
	}
	/* 2: before the entry, which names their ports. */
	err = netdev_listeners(r, sb, &p, (const uint16_t[4]){ 0 }, &dns, f);
	if (err)
		goto undo_dns;
	/* 3, 4 */
	err = egr_bpf_put_rules(r->bpf, sb->policy_id, &c);
	if (err) {
		reg_fail_rules(f, err);
		goto undo_dns;
	}
	reg_kernel_entry(&ksb, sb, sb->policy_id, sb->tenant_id, &p);
	err = egr_bpf_put_sandbox(r->bpf, sb->id, &ksb);
	if (err) {
		reg_fail_rules(f, err);
		goto undo_rules;
	}
	/* 5: the state names the device before anything is on it, so that a
	 * crash from here on is found (and the programs attached or removed)
	 * at the next start. */
	sb->nd_mode = EGR_ND_TCX;
	err = egr_state_save_sb(&r->st, sb, policy);
	if (err) {
		reg_fail(f, EGR_REG_INTERNAL, NULL, "write state: %s", strerror(-err));
		goto undo_entry;
	}
	/* 6 */
	err = egr_nd_attach(r->bpf, sb->id, netns, ifname, &dns, &mode);
	if (err) {
		reg_fail(f, EGR_REG_INTERNAL, "netdev",
			 "attach the device programs to %s: %s; nothing was applied", key,
			 strerror(-err));
		goto undo_state;
	}
	if ((int)mode != sb->nd_mode) {
		sb->nd_mode = (int)mode;
		if (egr_state_save_sb(&r->st, sb, policy))
			log_warn("sandbox %u: its state says TCX links, the device has tc filters; "
				 "adoption attaches them again either way", sb->id);
	}
	/* 7 */
	err = egr_reg_add(r, sb);
	if (err) {
		reg_fail(f, EGR_REG_INTERNAL, NULL, "out of memory");
		egr_nd_detach(r->bpf, sb->id, netns, ifname);
		goto undo_state;
	}
	reg_sb_set_meta(sb, &p, &c);
	reg_quota_apply(r, sb, &p, true);
	log_info("sandbox %u attached to device %s (ifindex %d, %s; tenant %s, policy %u: %zu v4, "
		 "%zu v6 prefixes)", sb->id, key, ifindex, mode == EGR_ND_TCX ? "TCX links" :
		 "tc filters", sb->tenant, sb->policy_id, sb->n4, sb->n6);
	if (r->hooks.attached)
		r->hooks.attached(r->hooks.ctx, sb, policy);
	egr_compiled_free(&c);
	egr_policy_free(&p);
	*out = sb;
	return 0;

undo_state:
	egr_state_drop(&r->st, sb->id);
undo_entry:
	egr_bpf_del_sandbox(r->bpf, sb->id);
undo_rules:
	egr_bpf_del_rules(r->bpf, sb->policy_id, &c);
undo_dns:
	if (r->dns)
		egr_dnsproxy_remove_sandbox(r->dns, sb->id);
	if (r->inspect)
		egr_inspect_remove_sandbox(r->inspect, sb->id);
undo_record:
	egr_sb_free(sb);
undo_policy:
	egr_compiled_free(&c);
	egr_policy_free(&p);
	return err;
}

/* Detach: the device is unconfined again (its programs off), the policy's
 * entry, rules and state go; the audit record closes (hooks.detaching). */
int reg_detach_netdev(struct egr_registry *r, struct egr_sb *sb)
{
	json_t *policy = egr_state_load_policy(&r->st, sb->id);

	if (r->hooks.detaching)
		r->hooks.detaching(r->hooks.ctx, sb);
	netdev_teardown(r, sb, policy);
	json_decref(policy);
	log_info("sandbox %u detached from device %s", sb->id, sb->cgroup);
	egr_reg_remove(r, sb);
	reg_quota_sync_tenant(r, sb->tenant_id, NULL);
	egr_sb_free(sb);
	return 0;
}

/* Is the device the programs were attached to still there? They are on
 * its ifindex: renamed, it is still the sandbox's (and still judged); a
 * namespace that went (the VM's, with its tap) or the device deleted is
 * the end of the sandbox. A new device of the old name is not it. Any
 * other error (say EMFILE) says yes: never detach on a doubt. */
static bool device_there(struct egr_registry *r, const struct egr_sb *sb)
{
	int ifindex = 0, err;

	/* TCX: the link knows its device, even where the namespace's path
	 * went while the namespace lives on (`ip netns del` under a VMM). */
	if (sb->nd_mode == EGR_ND_TCX && egr_nd_link_ifindex(r->bpf, sb->id, &ifindex) == 0)
		return ifindex != 0;
	err = egr_nd_has_ifindex(sb->netns, sb->ifindex);
	return !(err == -ENODEV || err == -ENOENT || err == -EINVAL);
}

/* Does a process live in the network namespace (dev, ino)? Yes when
 * /proc cannot be read: never close on a doubt. */
static bool netns_has_process(uint64_t dev, uint64_t ino)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	bool found = d == NULL;

	while (d && !found && (de = readdir(d))) {
		char path[64];
		struct stat st;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%.20s/ns/net", de->d_name);
		found = stat(path, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
	}
	if (d)
		closedir(d);
	return found;
}

/*
 * Its DNS listeners are sockets of the device's namespace, and a socket
 * keeps its namespace alive: once the namespace's path is gone and no
 * process lives in it (the VM exited), they would be all that keeps the
 * device there, and the sandbox would never end. They close then (its DNS
 * is dropped: no port in the entry); the namespace goes, the device with
 * it, and the next check detaches the sandbox. A namespace kept only by an
 * open descriptor loses its DNS this way: said in the log.
 */
static void netdev_dns_orphaned(struct egr_registry *r, struct egr_sb *sb)
{
	struct stat st;
	json_t *policy;

	if (!sb->nd_ns_ino || !sb->netns)
		return;
	if (netns_ino(sb->netns, &st) == 0 && st.st_dev == sb->nd_ns_dev &&
	    st.st_ino == sb->nd_ns_ino)
		return;
	if (netns_has_process(sb->nd_ns_dev, sb->nd_ns_ino))
		return;
	log_info("sandbox %u: the network namespace of %s has no path and no process left; "
		 "closing its DNS and inspecting listeners, which alone keep it (its DNS and "
		 "inspected TCP are dropped)", sb->id, sb->cgroup);
	if (r->dns)
		egr_dnsproxy_remove_sandbox(r->dns, sb->id);
	if (r->inspect)
		egr_inspect_remove_sandbox(r->inspect, sb->id);
	sb->dns_port4 = sb->dns_port6 = 0;
	sb->inspect_port4 = sb->inspect_port6 = 0;
	sb->nd_ns_dev = sb->nd_ns_ino = 0;
	policy = egr_state_load_policy(&r->st, sb->id);
	if (policy)
		reg_sync_ports(r, sb, policy);
	json_decref(policy);
}

unsigned egr_reg_netdev_check(struct egr_registry *r)
{
	static uint64_t last;
	struct egr_reg_iter it = { 0 };
	uint64_t now = egr_mono_ns();
	unsigned gone = 0;

	if (last && now - last < ND_CHECK_NS)
		return 0;
	last = now;
	for (struct egr_sb *sb; (sb = egr_reg_next(r, &it));) {
		if (!sb->netdev)
			continue;
		if (device_there(r, sb)) {
			netdev_dns_orphaned(r, sb);
			continue;
		}
		log_info("sandbox %u: device %s is gone; detaching it", sb->id, sb->cgroup);
		if (!sb->end_status)
			sb->end_status = strdup("device gone"); /* NULL: "detached" */
		reg_detach_netdev(r, sb);
		gone++;
	}
	return gone;
}

/*
 * Adoption of a device sandbox from its authenticated state: its entry and
 * rules as the state says (applied again under a new policy id when the
 * kernel's disagree: an interrupted update), its programs attached again
 * (the same sandbox id: this build's programs replace the pinned ones, and
 * a pin removed while egressd was away is repaired). Returns the sandbox
 * when its device went while egressd was away (the caller detaches it:
 * the record closes), else NULL.
 */
struct egr_sb *reg_adopt_netdev(struct egr_registry *r, uint32_t id, json_t *st)
{
	const char *ifname = json_string_value(json_object_get(st, "netdev"));
	const char *netns = json_string_value(json_object_get(st, "netns"));
	json_t *policy = json_object_get(st, "policy");
	struct egr_policy p = { 0 };
	struct egr_compiled c = { 0 };
	struct egr_sandbox ksb;
	struct egr_nd_dns dns = { 0 };
	enum egr_nd_mode mode = 0;
	struct egr_fail f;
	struct egr_sb *sb = NULL, *gone = NULL;
	char key[PATH_MAX + 32];
	int err;

	if (!valid_ifname(ifname) || !policy || reg_netdev_key(ifname, netns, key, sizeof(key)) ||
	    reg_prepare(NULL, policy, &p, &c, &f)) {
		/* Nothing to judge its packets by: every packet dropped. */
		log_error("sandbox %u: device sandbox state without a usable device or policy; "
			  "held under deny-all", id);
		reg_deny_all(r, id, (uint32_t)json_integer_value(json_object_get(st, "tenant_id")));
		return NULL;
	}
	sb = calloc(1, sizeof(*sb));
	if (!sb || !(sb->cgroup = strdup(key)) || !(sb->netdev = strdup(ifname)) ||
	    (netns && !(sb->netns = strdup(netns))))
		goto oom;
	sb->id = id;
	sb->ifindex = (int)json_integer_value(json_object_get(st, "ifindex"));
	sb->nd_mode = (int)json_integer_value(json_object_get(st, "nd_mode"));
	sb->policy_id = (uint32_t)json_integer_value(json_object_get(st, "policy_id"));
	sb->tenant_id = reg_tenant_id(r, p.tenant);
	sb->attached_at = (time_t)json_integer_value(json_object_get(st, "attached_at"));
	sb->updated_at = (time_t)json_integer_value(json_object_get(st, "updated_at"));
	/* Its listeners again on the ports its guest knows (the very sockets,
	 * where the listener holder kept them), before the entry is checked:
	 * it names their ports. */
	if (device_there(r, sb) &&
	    netdev_listeners(r, sb, &p,
			     (const uint16_t[4]){
				     (uint16_t)json_integer_value(json_object_get(st, "dns_port4")),
				     (uint16_t)json_integer_value(json_object_get(st, "dns_port6")),
				     (uint16_t)json_integer_value(json_object_get(st, "inspect_port4")),
				     (uint16_t)json_integer_value(json_object_get(st, "inspect_port6")) },
			     &dns, &f))
		log_error("sandbox %u: no DNS or inspecting proxy (%s); its DNS (and inspected TCP) "
			  "is dropped", id, f.e.message);
	err = egr_bpf_get_sandbox(r->bpf, id, &ksb);
	sb->quarantined = !err && ksb.quarantined;
	if (err || ksb.policy_id != sb->policy_id || ksb.tenant_id != sb->tenant_id) {
		log_warn("sandbox %u: kernel policy %u, state policy %u: applying the stored policy",
			 id, err ? 0 : ksb.policy_id, sb->policy_id);
		reg_reapply_stored(r, sb, &p, &c, policy);
	}
	reg_sync_ports(r, sb, policy);
	if (!device_there(r, sb)) {
		gone = sb;
	} else if (egr_nd_attach(r->bpf, id, netns, ifname, &dns, &mode)) {
		/* The pinned links (or tc filters) of the earlier egressd stay. */
		log_error("sandbox %u: cannot attach the device programs to %s again; the ones in "
			  "place keep enforcing", id, key);
	} else if ((int)mode != sb->nd_mode) {
		sb->nd_mode = (int)mode;
		egr_state_save_sb(&r->st, sb, policy);
	}
	if (egr_reg_add(r, sb))
		goto oom;
	reg_sb_set_meta(sb, &p, &c);
	reg_quota_apply(r, sb, &p, false);
	log_info("sandbox %u adopted (device %s, tenant %s, policy %u)", id, key, sb->tenant,
		 sb->policy_id);
	if (r->hooks.adopted)
		r->hooks.adopted(r->hooks.ctx, sb, policy);
	if (gone) {
		log_info("sandbox %u: device %s went while egressd was away; detaching it", id, key);
		free(sb->end_status);
		sb->end_status = strdup("device gone");
	}
	egr_compiled_free(&c);
	egr_policy_free(&p);
	return gone;
oom:
	log_error("sandbox %u: out of memory while adopting; left enforced, unmanaged", id);
	if (r->dns)
		egr_dnsproxy_remove_sandbox(r->dns, id);
	if (r->inspect)
		egr_inspect_remove_sandbox(r->inspect, id);
	egr_sb_free(sb);
	egr_compiled_free(&c);
	egr_policy_free(&p);
	return NULL;
}
