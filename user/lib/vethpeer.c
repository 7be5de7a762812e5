// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The host side of a namespace's one veth (vethpeer.h), by rtnetlink. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/net_namespace.h>
#include <linux/rtnetlink.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vethpeer.h"

#define VP_MAX_LINKS 64 /* a container's namespace has a handful */
#define VP_MAX_CANDIDATES 256

struct vp_link {
	int ifindex;
	unsigned flags;
	char name[IF_NAMESIZE];
	char kind[16];
	int link;      /* IFLA_LINK, 0 without */
	int nsid;      /* IFLA_LINK_NETNSID, -1 without */
};

struct vp_links {
	struct vp_link v[VP_MAX_LINKS];
	size_t n;
	int err;
};

/* A netlink socket of the namespace at nsfd (-1: the caller's). Sockets
 * stay in the namespace they were made in, so the caller returns at once.
 * Raw netlink, no libmnl: the static egressctl (the DaemonSet's hook)
 * links no libmnl (Debian ships no libmnl.a). */
static int nl_open_in(int nsfd, int *out)
{
	int self = -1, err = 0, fd;

	if (nsfd >= 0) {
		self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
		if (self < 0)
			return -errno;
		if (setns(nsfd, CLONE_NEWNET)) {
			err = -errno;
			close(self);
			return err;
		}
	}
	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (fd < 0)
		err = -errno;
	if (self >= 0) {
		/* Not back home: the caller must stop (a hook fails). */
		if (setns(self, CLONE_NEWNET))
			err = -ENOTRECOVERABLE;
		close(self);
	}
	if (err) {
		if (fd >= 0)
			close(fd);
		return err;
	}
	*out = fd;
	return 0;
}

typedef int (*nl_cb)(const struct nlmsghdr *nlh, void *data);

/* Send req and feed every answer to cb until the dump ends or the ack (or
 * the one answer of a plain request) comes. */
static int nl_talk(int fd, struct nlmsghdr *req, nl_cb cb, void *data)
{
	char buf[32768] __attribute__((aligned(NLMSG_ALIGNTO)));
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
	bool dump = req->nlmsg_flags & NLM_F_DUMP;
	ssize_t n;

	if (sendto(fd, req, req->nlmsg_len, 0, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	for (;;) {
		n = recv(fd, buf, sizeof(buf), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n);
		     h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_seq != req->nlmsg_seq)
				continue;
			if (h->nlmsg_type == NLMSG_DONE)
				return 0;
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);

				return h->nlmsg_len >= NLMSG_LENGTH(sizeof(*e)) ? e->error : -EIO;
			}
			cb(h, data);
			if (!dump && !(req->nlmsg_flags & NLM_F_ACK))
				return 0;
		}
	}
}

/* The attributes after a fixed header of hdrlen bytes, by type. */
static void parse_attrs(const struct rtattr *a, int len, const struct rtattr **tb, int max)
{
	for (; RTA_OK(a, len); a = RTA_NEXT(a, len))
		if (a->rta_type <= max)
			tb[a->rta_type] = a;
}

static int attr_u32(const struct rtattr *a, int dflt)
{
	uint32_t v;

	if (!a || RTA_PAYLOAD(a) < sizeof(v))
		return dflt;
	memcpy(&v, RTA_DATA(a), sizeof(v));
	return (int)v;
}

static void attr_str(const struct rtattr *a, char *buf, size_t len)
{
	if (a)
		snprintf(buf, len, "%.*s", (int)RTA_PAYLOAD(a), (const char *)RTA_DATA(a));
}

static int link_cb(const struct nlmsghdr *nlh, void *data)
{
	struct vp_links *ls = data;
	const struct ifinfomsg *ifm = NLMSG_DATA(nlh);
	const struct rtattr *tb[IFLA_MAX + 1] = { 0 }, *info[IFLA_INFO_MAX + 1] = { 0 };
	struct vp_link *l;

	if (nlh->nlmsg_type != RTM_NEWLINK || nlh->nlmsg_len < NLMSG_LENGTH(sizeof(*ifm)))
		return 0;
	if (ls->n == VP_MAX_LINKS) {
		ls->err = -E2BIG;
		return 0;
	}
	l = &ls->v[ls->n++];
	memset(l, 0, sizeof(*l));
	l->ifindex = ifm->ifi_index;
	l->flags = ifm->ifi_flags;
	parse_attrs(IFLA_RTA(ifm), (int)IFLA_PAYLOAD(nlh), tb, IFLA_MAX);
	attr_str(tb[IFLA_IFNAME], l->name, sizeof(l->name));
	l->link = attr_u32(tb[IFLA_LINK], 0);
	l->nsid = attr_u32(tb[IFLA_LINK_NETNSID], -1);
	if (tb[IFLA_LINKINFO]) {
		parse_attrs(RTA_DATA(tb[IFLA_LINKINFO]), (int)RTA_PAYLOAD(tb[IFLA_LINKINFO]), info,
			    IFLA_INFO_MAX);
		attr_str(info[IFLA_INFO_KIND], l->kind, sizeof(l->kind));
	}
	return 0;
}

static unsigned nl_seq;

/* Every link of fd's namespace (ifindex 0), or the one of ifindex. */
static int get_links(int fd, int ifindex, struct vp_links *ls)
{
	struct {
		struct nlmsghdr h;
		struct ifinfomsg i;
	} req = {
		.h = { .nlmsg_len = sizeof(req), .nlmsg_type = RTM_GETLINK,
		       .nlmsg_flags = NLM_F_REQUEST | (ifindex ? 0 : NLM_F_DUMP),
		       .nlmsg_seq = ++nl_seq },
		.i = { .ifi_family = AF_UNSPEC, .ifi_index = ifindex },
	};
	int err;

	ls->n = 0;
	ls->err = 0;
	err = nl_talk(fd, &req.h, link_cb, ls);
	return err ?: ls->err;
}

static int nsid_cb(const struct nlmsghdr *nlh, void *data)
{
	const struct rtattr *tb[NETNSA_MAX + 1] = { 0 };
	int *nsid = data;

	if (nlh->nlmsg_type != RTM_NEWNSID ||
	    nlh->nlmsg_len < NLMSG_LENGTH(sizeof(struct rtgenmsg)))
		return 0;
	parse_attrs((const struct rtattr *)((const char *)NLMSG_DATA(nlh) +
					    NLMSG_ALIGN(sizeof(struct rtgenmsg))),
		    (int)(nlh->nlmsg_len - NLMSG_LENGTH(NLMSG_ALIGN(sizeof(struct rtgenmsg)))), tb,
		    NETNSA_MAX);
	*nsid = attr_u32(tb[NETNSA_NSID], -1);
	return 0;
}

/* The id fd's namespace (the socket's) knows the namespace at nsfd by:
 * >= 0, or -1 when it has none (no link between them). 0 or -errno. */
static int get_nsid(int fd, int nsfd, int *nsid)
{
	struct {
		struct nlmsghdr h;
		struct rtgenmsg g;
		char pad[3];
		struct rtattr a;
		uint32_t fd;
	} req = {
		.h = { .nlmsg_len = sizeof(req), .nlmsg_type = RTM_GETNSID,
		       .nlmsg_flags = NLM_F_REQUEST, .nlmsg_seq = ++nl_seq },
		.g = { .rtgen_family = AF_UNSPEC },
		.a = { .rta_len = RTA_LENGTH(sizeof(uint32_t)), .rta_type = NETNSA_FD },
		.fd = (uint32_t)nsfd,
	};

	*nsid = -1;
	return nl_talk(fd, &req.h, nsid_cb, nsid);
}

static bool same_ns(int a, int b)
{
	struct stat sa, sb;

	return !fstat(a, &sa) && !fstat(b, &sb) && sa.st_ino == sb.st_ino &&
	       sa.st_dev == sb.st_dev;
}

/* The one veth of the inner namespace; nothing else up but loopback. */
static int pick_veth(const struct vp_links *ls, const struct vp_link **out, char *why,
		     size_t whylen)
{
	const struct vp_link *veth = NULL;

	for (size_t i = 0; i < ls->n; i++) {
		const struct vp_link *l = &ls->v[i];

		if (strcmp(l->kind, "veth") == 0) {
			if (veth) {
				snprintf(why, whylen, "its network namespace has two veths (%s and "
					 "%s); one is expected", veth->name, l->name);
				return -ENOTUNIQ;
			}
			veth = l;
		}
	}
	if (!veth) {
		snprintf(why, whylen, "its network namespace has no veth");
		return -ENOENT;
	}
	for (size_t i = 0; i < ls->n; i++) {
		const struct vp_link *l = &ls->v[i];

		if (l != veth && (l->flags & IFF_UP) && !(l->flags & IFF_LOOPBACK)) {
			snprintf(why, whylen, "its network namespace has interface %s (%s) up "
				 "besides veth %s: gVisor would send through it too", l->name,
				 l->kind[0] ? l->kind : "no kind", veth->name);
			return -ENOTUNIQ;
		}
	}
	if (veth->nsid < 0) {
		snprintf(why, whylen, "the peer of veth %s is in the same network namespace",
			 veth->name);
		return -ELOOP;
	}
	*out = veth;
	return 0;
}

/* From the peer's side: a veth whose IFLA_LINK is the inner end and whose
 * peer namespace is the inner one. */
static int check_peer(int peerfd, int nsfd, const struct vp_link *veth, struct egr_veth_peer *out,
		      char *why, size_t whylen)
{
	struct vp_links *ls = calloc(1, sizeof(*ls));
	int err, back = -1, nl;

	if (!ls)
		return -ENOMEM;
	err = nl_open_in(peerfd, &nl);
	if (!err) {
		err = get_links(nl, veth->link, ls);
		if (!err)
			err = get_nsid(nl, nsfd, &back);
		close(nl);
	}
	if (err) {
		snprintf(why, whylen, "cannot read the peer (ifindex %d) of veth %s: %s",
			 veth->link, veth->name, strerror(-err));
	} else if (ls->n != 1 || strcmp(ls->v[0].kind, "veth") != 0 ||
		   ls->v[0].link != veth->ifindex || back < 0 || ls->v[0].nsid != back) {
		snprintf(why, whylen, "ifindex %d of %s is not the peer of veth %s",
			 veth->link, out->netns[0] ? out->netns : "the hook's namespace",
			 veth->name);
		err = -ESRCH;
	} else {
		snprintf(out->ifname, sizeof(out->ifname), "%s", ls->v[0].name);
		out->ifindex = ls->v[0].ifindex;
	}
	free(ls);
	return err;
}

int egr_veth_peer_find(int nsfd, const char *const *candidates, struct egr_veth_peer *out,
		       char *why, size_t whylen)
{
	struct vp_links *ls = calloc(1, sizeof(*ls));
	const struct vp_link *veth = NULL;
	int err, peerfd = -1, nl = -1;

	memset(out, 0, sizeof(*out));
	if (!ls)
		return -ENOMEM;
	err = nl_open_in(nsfd, &nl);
	if (err) {
		snprintf(why, whylen, "cannot enter its network namespace: %s", strerror(-err));
		goto out;
	}
	err = get_links(nl, 0, ls);
	if (err) {
		snprintf(why, whylen, "cannot list the interfaces of its network namespace: %s",
			 err == -E2BIG ? "over 64 interfaces" : strerror(-err));
		goto out;
	}
	err = pick_veth(ls, &veth, why, whylen);
	if (err)
		goto out;
	snprintf(out->inner, sizeof(out->inner), "%s", veth->name);
	out->inner_ifindex = veth->ifindex;
	err = -ESRCH;
	for (size_t i = 0; candidates[i]; i++) {
		const char *p = candidates[i][0] ? candidates[i] : "/proc/thread-self/ns/net";
		int fd = open(p, O_RDONLY | O_CLOEXEC), id;

		if (fd < 0)
			continue; /* gone since it was listed: not this one */
		if (!same_ns(fd, nsfd) && !get_nsid(nl, fd, &id) && id == veth->nsid) {
			peerfd = fd;
			snprintf(out->netns, sizeof(out->netns), "%s", candidates[i]);
			err = 0;
			break;
		}
		close(fd);
	}
	if (err) {
		snprintf(why, whylen, "the peer of veth %s is in a network namespace (id %d of "
			 "the container's) that is neither the hook's nor one of /run/netns: "
			 "egressd could not be told where it is", veth->name, veth->nsid);
		goto out;
	}
	err = check_peer(peerfd, nsfd, veth, out, why, whylen);
out:
	if (peerfd >= 0)
		close(peerfd);
	if (nl >= 0)
		close(nl);
	free(ls);
	return err;
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int egr_veth_peer_find_named(int nsfd, struct egr_veth_peer *out, char *why, size_t whylen)
{
	const char *cands[VP_MAX_CANDIDATES + 2] = { "" };
	char *names[VP_MAX_CANDIDATES];
	size_t n = 0;
	struct dirent *de;
	DIR *d = opendir("/run/netns");
	int err;

	while (d && (de = readdir(d)) && n < VP_MAX_CANDIDATES) {
		if (de->d_name[0] == '.' || asprintf(&names[n], "/run/netns/%s", de->d_name) < 0)
			continue;
		n++;
	}
	if (d)
		closedir(d);
	qsort(names, n, sizeof(names[0]), name_cmp);
	for (size_t i = 0; i < n; i++)
		cands[i + 1] = names[i];
	cands[n + 1] = NULL;
	err = egr_veth_peer_find(nsfd, cands, out, why, whylen);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	return err;
}
