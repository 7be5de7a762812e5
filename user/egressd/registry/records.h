/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The records the registry keeps: a sandbox and a held cgroup. Below both
 * the set (registry.h) and its state files (statefile.h), which read and
 * write them.
 */
#ifndef EGR_REG_RECORDS_H
#define EGR_REG_RECORDS_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* The process a sandbox lives as long as (docs/operations.md, "Lifetime"):
 * an `egressctl run` whose cgroup is the sandbox's own. pid 0: none. start:
 * its start time (/proc/<pid>/stat field 22), so a reused pid is not it. */
struct egr_launcher {
	int pid;
	uint64_t start;
};

/* One sandbox, as the registry keeps it. Other modules read it; only the
 * registry's lifecycle operations write it. */
struct egr_sb {
	uint32_t id;
	uint32_t policy_id;
	uint32_t tenant_id;
	uint64_t cgroup_id;
	char *cgroup;
	char *tenant, *execution_id, *principal, *tool, *version;
	struct json_t *container; /* the policy's "container" (OCI hook identity); NULL */
	char sha256[65];
	size_t n4, n6, nnames;
	time_t attached_at, updated_at;
	char *netns;              /* network namespace path, NULL = egressd's own */
	uint16_t dns_port4, dns_port6; /* its DNS proxy listeners; 0 = none */
	uint16_t inspect_port4, inspect_port6; /* its inspecting proxy (network.inspect) */
	/* limits in force (docs/metering.md); 0 = none */
	uint64_t quota_bytes, tenant_quota_bytes, quota_window_ns;
	char *end_status;         /* how its command ended, as the detach request said */
	int audit_mode;           /* network.mode "audit" */
	uint32_t breaker_max_denies, breaker_window_s; /* network.breaker; 0 = none */
	bool quarantined;         /* mirrors egr_sandbox.quarantined in the kernel */
	time_t quarantined_at;    /* 0 when adopted quarantined (unknown) */
	struct egr_launcher launcher; /* pid 0: not tied to a launcher */
	/* Attached by this process into a cgroup it made with no process
	 * before its links (attach "create"); never set when adopted. */
	bool fresh;
	/* A device sandbox (docs/architecture.md "Device sandboxes"): the
	 * host-side device its programs judge, in netns; NULL for a cgroup
	 * sandbox. Its cgroup is then the key "netdev:IFACE[@NETNS]" and
	 * cgroup_id 0. ifindex: the device's when attached (a device of the
	 * same name made later is not it). */
	char *netdev;
	int ifindex;
	int nd_mode; /* enum egr_nd_mode: 1 TCX links, 2 tc filters */
	/* The namespace its DNS listeners are open in (they keep it alive):
	 * st_dev and st_ino of netns when they were opened, 0 without. */
	uint64_t nd_ns_dev, nd_ns_ino;
	/* The device's addresses its programs rewrite DNS and inspected TCP
	 * to (the listeners' binding; kernel/netdev.h egr_nd_dns): network
	 * order, has4/has6 false for none. */
	uint8_t nd_addr4[4], nd_addr6[16];
	bool nd_has4, nd_has6;
};

/* A cgroup egressd holds under deny-all without a policy of its own
 * (docs/architecture.md, "Held sandboxes"): a detached sandbox, until the
 * kernel releases its cgroup (its links go defunct), or a sandbox whose state
 * egressd could not trust at start. Its links stay, pointing at an entry
 * that denies everything; attaching its cgroup again replaces that. */
enum egr_held_state { EGR_HELD_DETACHED, EGR_HELD_TAMPERED };

struct egr_held {
	uint32_t id;
	uint32_t tenant_id;
	uint64_t cgroup_id; /* from its links (the kernel) */
	char *cgroup;       /* path; NULL: unknown */
	enum egr_held_state state;
	char reason[256];
	time_t since;
};

#endif /* EGR_REG_RECORDS_H */
