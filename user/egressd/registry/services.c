// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * What a sandbox has outside the policy maps: the checks of its cgroup, its
 * DNS and inspecting proxies, its sockets, its processes' escape-guard
 * marks, and the deny-all entry of a held cgroup.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include "cgroup.h"
#include "compile.h"
#include "dns/dnsproxy.h"
#include "egr_decide.h"
#include "inspect.h"
#include "dns/learned.h"
#include "log.h"
#include "sockdiag.h"
#include "registry/registry_impl.h"

/* Every hook denies: policy id 0 is never given out, so no rule exists
 * under it; no DNS port, no special sockets, no inbound. */
int reg_deny_all(struct egr_registry *r, uint32_t id, uint32_t tenant_id)
{
	struct egr_sandbox ksb = { .policy_id = EGR_ID_NONE, .tenant_id = tenant_id };
	int err = egr_bpf_put_sandbox(r->bpf, id, &ksb);

	if (err) {
		/* No entry at all denies everything too (fail closed). */
		log_error("sandbox %u: write its deny-all entry: %s; removing the entry instead",
			  id, strerror(-err));
		egr_bpf_del_sandbox(r->bpf, id);
	}
	return err;
}

/* End every TCP and UDP socket of the cgroup (and the cgroups below it),
 * in egressd's network namespace and in the sandbox's: a socket handed out
 * of the sandbox keeps the sandbox's cgroup, so nothing it held may live
 * on with a connection the sandbox's policy once allowed. */
unsigned reg_destroy_sockets(uint32_t id, const char *cgroup, uint64_t cgroup_id,
				const char *netns)
{
	uint64_t *ids = NULL, one = cgroup_id;
	unsigned here = 0, there = 0;
	size_t n = 0;
	int err = 0, fd;

	if (!cgroup || egr_cgroup_subtree_ids(cgroup, &ids, &n) || !n) {
		free(ids);
		ids = NULL;
		n = 1; /* removed already: its sockets still carry its id */
	}
	err = egr_sockdiag_destroy_all(-1, ids ? ids : &one, n, &here);
	if (netns) {
		fd = open(netns, O_RDONLY | O_CLOEXEC);
		if (fd < 0 && (errno == ENOENT || errno == ENOTDIR)) {
			/* Gone with its last process (a container that exited):
			 * no socket can be left in it. Nothing is wrong. */
			log_info("sandbox %u: its network namespace %s is gone already; no socket "
				 "left there", id, netns);
		} else if (fd < 0) {
			log_error("sandbox %u: open its network namespace %s: %m", id, netns);
			err = err ? err : -errno;
		} else {
			int e = egr_sockdiag_destroy_all(fd, ids ? ids : &one, n, &there);

			err = err ? err : e;
			close(fd);
		}
	}
	if (err)
		log_error("sandbox %u: destroying its sockets: %s (%u destroyed)", id,
			  strerror(-err), here + there);
	else if (here + there)
		log_info("sandbox %u: destroyed %u socket(s)%s", id, here + there,
			 netns ? " (its network namespace included)" : "");
	free(ids);
	return here + there;
}

int reg_check_cgroup(struct egr_registry *r, const char *cgroup, char *real,
			struct egr_fail *f)
{
	char mnt[PATH_MAX];
	size_t len;
	int err;

	if (!cgroup || cgroup[0] != '/') {
		reg_fail(f, EGR_REG_BAD_CGROUP, "cgroup", "cgroup must be an absolute path");
		return -EINVAL;
	}
	if (!realpath(cgroup, real)) {
		err = -errno;
		reg_fail(f, EGR_REG_BAD_CGROUP, "cgroup", "%s: %s", cgroup, strerror(-err));
		return err;
	}
	err = egr_cgroup_check(real);
	if (err) {
		reg_fail(f, EGR_REG_BAD_CGROUP, "cgroup", "%s is not a cgroup v2 directory", real);
		return -EINVAL;
	}
	if (egr_cgroup2_mount(mnt, sizeof(mnt)) == 0 && strcmp(mnt, real) == 0) {
		reg_fail(f, EGR_REG_BAD_CGROUP, "cgroup", "refusing to sandbox the root cgroup");
		return -EINVAL;
	}
	/* Confining egressd itself would cut it off from what it serves. */
	len = strlen(real);
	if (r->self_cgroup[0] && strncmp(r->self_cgroup, real, len) == 0 &&
	    (r->self_cgroup[len] == '\0' || r->self_cgroup[len] == '/')) {
		reg_fail(f, EGR_REG_BAD_CGROUP, "cgroup", "%s contains egressd itself", real);
		return -EINVAL;
	}
	return 0;
}

/*
 * Open the sandbox's DNS proxy listeners (in its network namespace when it
 * has one) and hand the proxy its DNS policy. want4/want6: the ports it had
 * before a restart, so sockets the sandbox keeps keep working.
 */
int reg_start_dns(struct egr_registry *r, struct egr_sb *sb, const struct egr_policy *p,
		  const struct egr_dnsproxy_device *dev, uint16_t want4, uint16_t want6,
		  struct egr_fail *f)
{
	struct egr_dnspolicy *dpol = NULL;
	struct egr_error e = { { 0 }, { 0 } };
	int netns_fd = -1, err;

	if (!r->dns)
		return 0;
	err = egr_dnspolicy_new(p, p->ndns_types ? p->dns_types : NULL, p->ndns_types, &dpol, &e);
	if (err) {
		if (err == -EINVAL)
			reg_fail_policy(f, &e);
		else
			reg_fail(f, EGR_REG_INTERNAL, NULL, "DNS policy: %s", strerror(-err));
		return err;
	}
	if (sb->netns) {
		netns_fd = open(sb->netns, O_RDONLY | O_CLOEXEC);
		if (netns_fd < 0) {
			err = -errno;
			egr_dnspolicy_free(dpol);
			reg_fail(f, EGR_REG_BAD_REQUEST, "netns", "%s: %s", sb->netns, strerror(-err));
			return err;
		}
	}
	/* The proxy owns dpol from here, even on error. */
	err = dev ? egr_dnsproxy_add_device(r->dns, sb->id, p->tenant, dpol, netns_fd, dev, want4,
					    want6, &sb->dns_port4, &sb->dns_port6) :
		    egr_dnsproxy_add_sandbox(r->dns, sb->id, p->tenant, dpol, netns_fd, want4,
					     want6, &sb->dns_port4, &sb->dns_port6);
	if (netns_fd >= 0)
		close(netns_fd);
	if (err)
		reg_fail(f, EGR_REG_INTERNAL, NULL, "DNS proxy listeners for sandbox %u: %s",
			 sb->id, strerror(-err));
	return err;
}

/*
 * The inspecting proxy's listeners and policy for a sandbox under
 * network.inspect (docs/inspect.md); removes them when the policy no
 * longer asks for inspection. Without a proxy the ports stay 0 and the
 * kernel refuses the sandbox's TCP: closed, not uninspected.
 */
int reg_start_inspect(struct egr_registry *r, struct egr_sb *sb, const struct egr_policy *p,
			 uint16_t want4, uint16_t want6, struct egr_fail *f)
{
	struct egr_dnspolicy *dpol = NULL;
	struct egr_error e = { { 0 }, { 0 } };
	int netns_fd = -1, err;

	if (!p->inspect || !r->inspect) {
		if (r->inspect)
			egr_inspect_remove_sandbox(r->inspect, sb->id);
		sb->inspect_port4 = sb->inspect_port6 = 0;
		if (p->inspect)
			log_error("sandbox %u: no inspecting proxy: its TCP is denied", sb->id);
		return 0;
	}
	err = egr_dnspolicy_new(p, NULL, 0, &dpol, &e);
	if (err) {
		if (err == -EINVAL)
			reg_fail_policy(f, &e);
		else
			reg_fail(f, EGR_REG_INTERNAL, NULL, "inspect policy: %s", strerror(-err));
		return err;
	}
	if (egr_inspect_has_sandbox(r->inspect, sb->id)) {
		err = egr_inspect_update_sandbox(r->inspect, sb->id, p, dpol);
		if (err)
			reg_fail(f, EGR_REG_INTERNAL, NULL, "inspecting proxy: %s", strerror(-err));
		return err;
	}
	if (sb->netns) {
		netns_fd = open(sb->netns, O_RDONLY | O_CLOEXEC);
		if (netns_fd < 0) {
			err = -errno;
			egr_dnspolicy_free(dpol);
			reg_fail(f, EGR_REG_BAD_REQUEST, "netns", "%s: %s", sb->netns, strerror(-err));
			return err;
		}
	}
	if (sb->netdev) {
		/* A device sandbox's: on the device's addresses, where its
		 * programs rewrite its TCP to (docs/inspect.md "Device
		 * sandboxes"). */
		struct egr_inspect_device dev = {
			.ifindex = sb->ifindex, .has4 = sb->nd_has4, .has6 = sb->nd_has6,
		};

		memcpy(dev.addr4, sb->nd_addr4, 4);
		memcpy(dev.addr6, sb->nd_addr6, 16);
		err = egr_inspect_add_device(r->inspect, sb->id, p->tenant, p, dpol, netns_fd, &dev,
					     want4, want6, &sb->inspect_port4,
					     &sb->inspect_port6);
	} else {
		err = egr_inspect_add_sandbox(r->inspect, sb->id, p->tenant, p, dpol, netns_fd,
					      want4, want6, &sb->inspect_port4,
					      &sb->inspect_port6);
	}
	if (netns_fd >= 0)
		close(netns_fd);
	if (err)
		reg_fail(f, EGR_REG_INTERNAL, NULL, "inspecting proxy listeners for sandbox %u: %s",
			 sb->id, strerror(-err));
	return err;
}


/* The processes already in the cgroup get it as their home, for the escape
 * guard (bpf/escape.bpf.c). Enforcement does not depend on it, so a failure
 * is logged, not fatal: refusing the attach would leave the cgroup open. */
void reg_home_procs(struct egr_registry *r, const struct egr_sb *sb, const char *cgroup)
{
	size_t n = 0;
	int err = egr_bpf_home_procs(r->bpf, cgroup, sb->cgroup_id, sb->id, &n);

	if (err)
		log_warn("sandbox %u: escape guard: mark the processes in %s: %s (marked %zu)",
			 sb->id, cgroup, strerror(-err), n);
	else if (n)
		log_debug("sandbox %u: escape guard: %zu processes already in %s", sb->id, n,
			  cgroup);
}

struct peer_judge {
	const struct egr_compiled *c;
	struct egr_learned *learned;
	uint32_t sandbox_id;
	uint16_t inspect_port4, inspect_port6; /* its proxies re-judge those themselves */
	uint16_t dns_port4, dns_port6;
};

/* A socket of the sandbox connected to one of its own proxies on loopback
 * (where the hooks sent it): the inspecting proxy knows the real destination
 * and closes it if the new policy refuses it (egr_inspect_update_sandbox);
 * the DNS proxy judges every query, and every answer to one asked under an
 * older policy, under the new one (dns_answer.c). */
static bool to_own_proxy(const struct peer_judge *j, bool v6, const uint8_t *daddr,
			 uint16_t dport, int protocol)
{
	static const uint8_t lo4[4] = { 127, 0, 0, 1 }, lo6[16] = { [15] = 1 };

	if (!dport || (v6 ? memcmp(daddr, lo6, 16) : memcmp(daddr, lo4, 4)))
		return false;
	if (protocol == IPPROTO_TCP && dport == (v6 ? j->inspect_port6 : j->inspect_port4))
		return true;
	return (protocol == IPPROTO_TCP || protocol == IPPROTO_UDP) &&
	       dport == (v6 ? j->dns_port6 : j->dns_port4);
}

/* Would the new policy let a connected socket keep its peer: a static
 * rule, or an address its DNS policy still resolves? */
static bool peer_allowed(void *ctx, int family, const uint8_t *daddr, uint16_t dport, int protocol)
{
	const struct peer_judge *j = ctx;
	const struct egr_rule *rule;
	const uint8_t *a = daddr;
	uint32_t w[4], v4;
	int expired, v6 = family == AF_INET6;

	if (to_own_proxy(j, v6, daddr, dport, protocol))
		return true;
	if (v6) {
		memcpy(w, daddr, sizeof(w));
		if (egr_ip6_is_v4mapped(w, &v4)) {
			a = (const uint8_t *)&v4;
			v6 = 0;
		}
	}
	rule = egr_compiled_lookup(j->c, v6, a);
	if (egr_rule_allows(rule, dport, (uint32_t)protocol, 0, &expired) == EGR_ALLOW)
		return true;
	return j->learned && egr_learned_allows(j->learned, j->sandbox_id, v6 ? AF_INET6 : AF_INET,
						a, dport, protocol);
}

/* End what the sandbox (and the cgroups it made) has open to peers the new
 * policy refuses: the hooks only judged them at connect time. */
void reg_close_refused(struct egr_registry *r, const struct egr_sb *sb,
			  const struct egr_compiled *c, bool inbound_allow, unsigned *closed)
{
	struct peer_judge j = { .c = c, .learned = r->learned, .sandbox_id = sb->id,
				.inspect_port4 = sb->inspect_port4,
				.inspect_port6 = sb->inspect_port6,
				.dns_port4 = sb->dns_port4,
				.dns_port6 = sb->dns_port6 };
	uint64_t *ids = NULL;
	size_t n = 0;
	int err;

	*closed = 0;
	err = egr_cgroup_subtree_ids(sb->cgroup, &ids, &n);
	if (!err)
		err = egr_sockdiag_destroy_refused(-1, ids, n, inbound_allow, peer_allowed, &j,
						   closed);
	if (!err && sb->netns) {
		/* Its sockets live in its own network namespace as well. */
		unsigned there = 0;
		int fd = open(sb->netns, O_RDONLY | O_CLOEXEC);

		err = fd < 0 ? -errno : egr_sockdiag_destroy_refused(fd, ids, n, inbound_allow,
								     peer_allowed, &j, &there);
		if (fd >= 0)
			close(fd);
		*closed += there;
	}
	if (err)
		log_error("sandbox %u: tearing down connections the new policy refuses: %s "
			  "(%u closed)", sb->id, strerror(-err), *closed);
	else if (*closed)
		log_info("sandbox %u: closed %u connection(s) the new policy refuses", sb->id,
			 *closed);
	free(ids);
}
