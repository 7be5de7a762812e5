// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Device sandboxes, the kernel side (netdev.h). */
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <libmnl/libmnl.h>
#include <linux/rtnetlink.h>

#include "kernel_priv.h"
#include "netdev.h"
#include "netdev.skel.h"
#include "log.h"

/* One tc filter per direction and device is egressd's: this handle and
 * priority name it (the tc path). */
#define ND_TC_HANDLE 0xe9d
#define ND_TC_PRIO 1

/* This thread into the network namespace at path (NULL: stay); *self gets
 * the one to return to (-1: none). */
static int enter_netns(const char *path, int *self)
{
	int fd, err = 0;

	*self = -1;
	if (!path)
		return 0;
	*self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (*self < 0)
		return -errno;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET) < 0)
		err = -errno;
	if (fd >= 0)
		close(fd);
	if (err) {
		close(*self);
		*self = -1;
	}
	return err;
}

static void leave_netns(int self)
{
	if (self < 0)
		return;
	/* Back into egressd's own namespace; failing that, this thread must
	 * not go on in the sandbox's. */
	if (setns(self, CLONE_NEWNET) < 0) {
		log_error("netdev: cannot return to egressd's network namespace: %s",
			  strerror(errno));
		abort();
	}
	close(self);
}

/* The device's link-layer header length: 14 (Ethernet) or 0 (none: tun). */
static int l2_len_of(const char *ifname, unsigned *l2)
{
	struct ifreq ifr = { 0 };
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), err = 0;

	if (s < 0)
		return -errno;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	if (ioctl(s, SIOCGIFHWADDR, &ifr) < 0)
		err = errno == ENODEV ? -ENODEV : -errno;
	close(s);
	if (err)
		return err;
	if (ifr.ifr_hwaddr.sa_family == ARPHRD_ETHER)
		*l2 = 14;
	else if (ifr.ifr_hwaddr.sa_family == ARPHRD_NONE)
		*l2 = 0;
	else
		return -EOPNOTSUPP;
	return 0;
}

struct link_info {
	uint32_t master;       /* ifindex of its master, 0: none */
	char kind[16];         /* IFLA_INFO_KIND ("bridge", "veth", ...), "" if none */
};

static int linkinfo_attr(const struct nlattr *a, void *data)
{
	struct link_info *li = data;

	if (mnl_attr_get_type(a) == IFLA_INFO_KIND && mnl_attr_validate(a, MNL_TYPE_STRING) >= 0)
		snprintf(li->kind, sizeof(li->kind), "%s", mnl_attr_get_str(a));
	return MNL_CB_OK;
}

static int link_attr(const struct nlattr *a, void *data)
{
	struct link_info *li = data;

	if (mnl_attr_get_type(a) == IFLA_MASTER && mnl_attr_validate(a, MNL_TYPE_U32) >= 0)
		li->master = mnl_attr_get_u32(a);
	else if (mnl_attr_get_type(a) == IFLA_LINKINFO && mnl_attr_validate(a, MNL_TYPE_NESTED) >= 0)
		mnl_attr_parse_nested(a, linkinfo_attr, li);
	return MNL_CB_OK;
}

static int link_reply(const struct nlmsghdr *nlh, void *data)
{
	return mnl_attr_parse(nlh, sizeof(struct ifinfomsg), link_attr, data);
}

/* A device's master and kind: RTM_GETLINK in the current network namespace. */
static int link_info_of(int ifindex, struct link_info *li)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct mnl_socket *nl = mnl_socket_open(NETLINK_ROUTE);
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct ifinfomsg *ifm;
	uint32_t seq = 1;
	ssize_t n;
	int err = 0;

	memset(li, 0, sizeof(*li));
	if (!nl)
		return -errno;
	nlh->nlmsg_type = RTM_GETLINK;
	nlh->nlmsg_flags = NLM_F_REQUEST;
	nlh->nlmsg_seq = seq;
	ifm = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifm));
	ifm->ifi_family = AF_UNSPEC;
	ifm->ifi_index = ifindex;
	if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0 ||
	    mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0) {
		err = -errno;
		goto out;
	}
	errno = 0;
	n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
	if (n < 0 ||
	    mnl_cb_run(buf, (size_t)n, seq, mnl_socket_get_portid(nl), link_reply, li) < 0)
		err = errno ? -errno : -EPROTO;
out:
	mnl_socket_close(nl);
	return err;
}

int egr_nd_switch_port(const char *netns, int ifindex, char *what, size_t len)
{
	static const char *const switches[] = { "bridge", "bond", "team", "openvswitch" };
	struct link_info dev, master;
	char mname[IF_NAMESIZE] = "?";
	int self, err = enter_netns(netns, &self);

	if (err)
		return err;
	err = link_info_of(ifindex, &dev);
	if (!err && dev.master)
		err = link_info_of((int)dev.master, &master);
	if (!err && dev.master) {
		for (size_t i = 0; i < sizeof(switches) / sizeof(switches[0]); i++) {
			if (strcmp(master.kind, switches[i]) == 0) {
				if_indextoname(dev.master, mname);
				snprintf(what, len, "%s %s", master.kind, mname);
				err = 1;
				break;
			}
		}
	}
	leave_netns(self);
	return err;
}

static int pin_dir(const struct egr_bpf *b, uint32_t id, char *buf, size_t len, bool make)
{
	char top[PATH_MAX];

	if (snprintf(top, sizeof(top), "%s/netdev", b->dir) >= (int)sizeof(top) ||
	    snprintf(buf, len, "%s/%u", top, id) >= (int)len)
		return -ENAMETOOLONG;
	if (make && ((mkdir(top, 0700) < 0 && errno != EEXIST) ||
		     (mkdir(buf, 0700) < 0 && errno != EEXIST)))
		return -errno;
	return 0;
}

static bool force_tc(void)
{
	const char *v = getenv("EGRESSD_TEST_NETDEV_TC");

	return v && strcmp(v, "1") == 0;
}

static int tc_attach(struct bpf_program *prog, int ifindex, enum bpf_tc_attach_point where)
{
	LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = where);
	LIBBPF_OPTS(bpf_tc_opts, opts, .handle = ND_TC_HANDLE, .priority = ND_TC_PRIO,
		    .prog_fd = bpf_program__fd(prog), .flags = BPF_TC_F_REPLACE);
	int err = bpf_tc_hook_create(&hook);

	if (err && err != -EEXIST)
		return err;
	return bpf_tc_attach(&hook, &opts);
}

static void tc_detach(int ifindex, enum bpf_tc_attach_point where)
{
	LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = where);
	LIBBPF_OPTS(bpf_tc_opts, opts, .handle = ND_TC_HANDLE, .priority = ND_TC_PRIO);

	bpf_tc_detach(&hook, &opts);
}

/* TCX (6.6+), not in this libbpf's or these headers' names yet: the
 * kernel's values (include/uapi/linux/bpf.h). */
#define ND_BPF_TCX_INGRESS 46
#define ND_BPF_TCX_EGRESS 47
#define ND_BPF_F_BEFORE (1U << 3)

/* struct bpf_link_info of a TCX link (6.6+; not in these headers): its
 * type, and the device's ifindex first in the union (offset 16), 0 once
 * the device is gone (the link is then defunct). */
#define ND_BPF_LINK_TYPE_TCX 11

static int link_ifindex(int fd, int *ifindex)
{
	__u32 info[64] = { 0 }, len = sizeof(info);

	if (bpf_obj_get_info_by_fd(fd, info, &len) < 0)
		return -errno;
	if (info[0] != ND_BPF_LINK_TYPE_TCX)
		return -EOPNOTSUPP;
	*ifindex = (int)info[4];
	return 0;
}

/*
 * The pinned links of an earlier start on this very device: their
 * programs swapped for these, one step per link (bpf_link_update). New
 * links beside the old ones would run both programs until the old ones are
 * released, and the DNS rewrite is not idempotent: the old egress program
 * would drop the answer the new one rewrote. 0, or -errno for the caller
 * to make new links.
 */
static int tcx_update(struct netdev_bpf *skel, int ifindex, const char *pin_in,
		      const char *pin_out)
{
	int in = bpf_obj_get(pin_in), out = bpf_obj_get(pin_out), have = 0, err = -ENOENT;

	if (in >= 0 && out >= 0 && link_ifindex(in, &have) == 0 && have == ifindex &&
	    link_ifindex(out, &have) == 0 && have == ifindex) {
		err = bpf_link_update(in, bpf_program__fd(skel->progs.egr_nd_ingress), NULL) < 0 ||
		      bpf_link_update(out, bpf_program__fd(skel->progs.egr_nd_egress), NULL) < 0 ?
			      -errno : 0;
	}
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return err;
}

/* Attach both programs with TCX links, first in each chain (our drop comes
 * before anyone's pass), and pin them (or update the links pinned by an
 * earlier start). A kernel without TCX answers EINVAL (an attach type it
 * does not know), for the caller to fall back. */
static int tcx_attach(struct netdev_bpf *skel, int ifindex, const char *dir)
{
	LIBBPF_OPTS(bpf_link_create_opts, first, .flags = ND_BPF_F_BEFORE);
	char pin_in[PATH_MAX], pin_out[PATH_MAX];
	int in, out = -1, err = 0;

	snprintf(pin_in, sizeof(pin_in), "%s/ingress", dir);
	snprintf(pin_out, sizeof(pin_out), "%s/egress", dir);
	if (tcx_update(skel, ifindex, pin_in, pin_out) == 0)
		return 0;
	in = bpf_link_create(bpf_program__fd(skel->progs.egr_nd_ingress), ifindex,
			     ND_BPF_TCX_INGRESS, &first);
	if (in < 0)
		return -errno;
	out = bpf_link_create(bpf_program__fd(skel->progs.egr_nd_egress), ifindex,
			      ND_BPF_TCX_EGRESS, &first);
	if (out < 0) {
		err = -errno;
		goto done;
	}
	unlink(pin_in);
	unlink(pin_out);
	if (bpf_obj_pin(in, pin_in) < 0 || bpf_obj_pin(out, pin_out) < 0) {
		err = -errno;
		unlink(pin_in);
		unlink(pin_out);
	}
done:
	/* Closing detaches what is not pinned; the pins hold the rest. */
	close(in);
	if (out >= 0)
		close(out);
	return err;
}

int egr_nd_dns_addrs(const char *netns, int ifindex, struct egr_nd_dns *out)
{
	struct ifaddrs *all = NULL;
	char name[IF_NAMESIZE];
	int self, err;

	memset(out, 0, sizeof(*out));
	err = enter_netns(netns, &self);
	if (err)
		return err;
	if (!if_indextoname((unsigned)ifindex, name) || getifaddrs(&all) < 0) {
		err = -errno;
		goto out;
	}
	for (struct ifaddrs *a = all; a; a = a->ifa_next) {
		if (!a->ifa_addr || strcmp(a->ifa_name, name) != 0)
			continue;
		if (a->ifa_addr->sa_family == AF_INET && !out->has4) {
			out->addr4 = ((struct sockaddr_in *)a->ifa_addr)->sin_addr;
			out->has4 = true;
		} else if (a->ifa_addr->sa_family == AF_INET6 && !out->has6) {
			const struct in6_addr *a6 = &((struct sockaddr_in6 *)a->ifa_addr)->sin6_addr;

			if (IN6_IS_ADDR_LINKLOCAL(a6))
				continue;
			out->addr6 = *a6;
			out->has6 = true;
		}
	}
out:
	if (all)
		freeifaddrs(all);
	leave_netns(self);
	return err;
}

int egr_nd_attach(struct egr_bpf *b, uint32_t sandbox_id, const char *netns, const char *ifname,
		  const struct egr_nd_dns *dns, enum egr_nd_mode *mode)
{
	LIBBPF_OPTS(bpf_object_open_opts, oopts, .pin_root_path = b->maps);
	struct netdev_bpf *skel = NULL;
	char dir[PATH_MAX];
	unsigned l2 = 14;
	int self, ifindex, err;

	if (!sandbox_id || !ifname || !*ifname || strlen(ifname) >= IFNAMSIZ)
		return -EINVAL;
	err = pin_dir(b, sandbox_id, dir, sizeof(dir), true);
	if (err)
		return err;
	err = enter_netns(netns, &self);
	if (err) {
		log_error("netdev: enter %s: %s", netns, strerror(-err));
		return err;
	}
	ifindex = (int)if_nametoindex(ifname);
	if (!ifindex) {
		err = -ENODEV;
		goto out;
	}
	err = l2_len_of(ifname, &l2);
	if (err)
		goto out;
	/* Pinned by name beside egressd's maps: the very same maps. */
	skel = netdev_bpf__open_opts(&oopts);
	if (!skel) {
		err = -errno;
		goto out;
	}
	skel->rodata->egr_nd_sandbox_id = sandbox_id;
	skel->rodata->egr_nd_l2_len = l2;
	if (dns && dns->has4)
		memcpy((void *)&skel->rodata->egr_nd_dns_addr4, &dns->addr4, 4);
	if (dns && dns->has6)
		memcpy((void *)skel->rodata->egr_nd_dns_addr6, &dns->addr6, 16);
	err = netdev_bpf__load(skel);
	if (err) {
		log_error("netdev: load the device programs for sandbox %u: %s", sandbox_id,
			  strerror(-err));
		goto out;
	}
	err = force_tc() ? -EOPNOTSUPP : tcx_attach(skel, ifindex, dir);
	if (!err) {
		*mode = EGR_ND_TCX;
		goto out;
	}
	if (err != -EINVAL && err != -EOPNOTSUPP && err != -ENOTSUP && err != -ENOSYS)
		goto out;
	err = tc_attach(skel->progs.egr_nd_ingress, ifindex, BPF_TC_INGRESS);
	if (!err) {
		err = tc_attach(skel->progs.egr_nd_egress, ifindex, BPF_TC_EGRESS);
		if (err)
			tc_detach(ifindex, BPF_TC_INGRESS);
	}
	if (!err)
		*mode = EGR_ND_TC;
out:
	if (err)
		log_error("netdev: attach sandbox %u to %s%s%s: %s", sandbox_id, ifname,
			  netns ? " in " : "", netns ? netns : "", strerror(-err));
	netdev_bpf__destroy(skel); /* links are pinned, filters hold their programs */
	leave_netns(self);
	if (err)
		rmdir(dir);
	return err;
}

int egr_nd_ifindex(const char *netns, const char *ifname, int *ifindex)
{
	int self, err;

	*ifindex = 0;
	if (!ifname || !*ifname || strlen(ifname) >= IFNAMSIZ)
		return -EINVAL;
	err = enter_netns(netns, &self);
	if (err)
		return err;
	*ifindex = (int)if_nametoindex(ifname);
	err = *ifindex ? 0 : -ENODEV;
	leave_netns(self);
	return err;
}

int egr_nd_link_ifindex(struct egr_bpf *b, uint32_t sandbox_id, int *ifindex)
{
	char dir[PATH_MAX], pin[PATH_MAX + 16];
	int fd, err;

	*ifindex = 0;
	err = pin_dir(b, sandbox_id, dir, sizeof(dir), false);
	if (err)
		return err;
	snprintf(pin, sizeof(pin), "%s/ingress", dir);
	fd = bpf_obj_get(pin);
	if (fd < 0)
		return -errno;
	err = link_ifindex(fd, ifindex);
	close(fd);
	return err;
}

int egr_nd_has_ifindex(const char *netns, int ifindex)
{
	char name[IF_NAMESIZE];
	int self, err;

	if (ifindex <= 0)
		return -EINVAL;
	err = enter_netns(netns, &self);
	if (err)
		return err;
	err = if_indextoname((unsigned)ifindex, name) ? 0 : -ENODEV;
	leave_netns(self);
	return err;
}

int egr_nd_detach(struct egr_bpf *b, uint32_t sandbox_id, const char *netns, const char *ifname)
{
	static const char *const names[] = { "ingress", "egress" };
	char dir[PATH_MAX], pin[PATH_MAX + 16];
	int self, ifindex, err;

	err = pin_dir(b, sandbox_id, dir, sizeof(dir), false);
	if (err)
		return err;
	for (size_t i = 0; i < 2; i++) {
		int fd;

		snprintf(pin, sizeof(pin), "%s/%s", dir, names[i]);
		fd = bpf_obj_get(pin);
		if (fd < 0)
			continue;
		bpf_link_detach(fd);
		close(fd);
		unlink(pin);
	}
	rmdir(dir);
	/* The tc path's filters, where there are any. */
	if (!ifname || enter_netns(netns, &self))
		return 0;
	ifindex = (int)if_nametoindex(ifname);
	if (ifindex) {
		tc_detach(ifindex, BPF_TC_INGRESS);
		tc_detach(ifindex, BPF_TC_EGRESS);
	}
	leave_netns(self);
	return 0;
}
