// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Least privilege for egressd itself (DESIGN non-negotiable 5): once the
 * programs are loaded, bpffs is mounted and every socket is bound, keep
 * only the capabilities the running daemon uses and refuse the syscalls
 * it never makes.
 *
 * Kept: CAP_BPF and CAP_PERFMON (map updates, links), CAP_NET_ADMIN
 * (cgroup program attach, SOCK_DESTROY), CAP_SYS_ADMIN (setns into a
 * sandbox's network namespace for its DNS listeners; BPF on kernels before
 * CAP_BPF), CAP_KILL (a process moved out of its sandbox by another one,
 * escape.bpf.c), CAP_LINUX_IMMUTABLE (FS_APPEND_FL on the audit log, its
 * state and billing.state, lifted for a cut-back or a rotation: issue 23,
 * finding 4). Everything else goes from the effective, permitted, inheritable
 * and bounding sets.
 *
 * The seccomp filter is a deny list, not an allow list: libbpf, jansson,
 * OpenSSL, zlib and libmicrohttpd make many syscalls, and an allow list
 * that misses one would take enforcement management down with it. What it
 * refuses is what an attacker in egressd would want and egressd never
 * does: loading kernel modules, kexec, ptrace and process_vm_*, mounts
 * after start-up, new user namespaces, io_uring, perf, keyrings, reboot.
 */
#include <errno.h>
#include <linux/capability.h>
#include <stdint.h>
#include <seccomp.h>
#include <stdbool.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "confine.h"
#include "harden.h"
#include "log.h"

static const int kept_caps[] = { CAP_BPF,      CAP_PERFMON, CAP_NET_ADMIN,
				 CAP_SYS_ADMIN, CAP_KILL,    CAP_LINUX_IMMUTABLE };

static const char *const denied_syscalls[] = {
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root",
	"chroot", "swapon", "swapoff", "reboot", "unshare", "io_uring_setup", "io_uring_enter",
	"io_uring_register", "perf_event_open", "add_key", "request_key", "keyctl",
	"userfaultfd", "personality", "acct", "settimeofday", "clock_settime", "iopl",
	"ioperm", "open_by_handle_at", "fsopen", "fsmount",
	"move_mount", "open_tree",
};

static bool kept(int cap, void *ctx)
{
	for (size_t i = 0; i < sizeof(kept_caps) / sizeof(kept_caps[0]); i++)
		if (kept_caps[i] == cap)
			return true;
	return false;
}

static int deny_syscalls(struct egr_hardening *h)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	int err = 0;

	if (!ctx)
		return -ENOMEM;
	for (size_t i = 0; i < sizeof(denied_syscalls) / sizeof(denied_syscalls[0]) && !err; i++) {
		int nr = seccomp_syscall_resolve_name(denied_syscalls[i]);

		if (nr == __NR_SCMP_ERROR)
			continue; /* not on this architecture */
		err = seccomp_rule_add_exact(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
		if (!err)
			h->syscalls_denied++;
	}
	if (!err)
		err = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1);
	if (!err)
		err = seccomp_load(ctx);
	seccomp_release(ctx);
	return err;
}

int egr_harden(struct egr_hardening *h)
{
	int err;

	memset(h, 0, sizeof(*h));
	err = egr_caps_restrict(kept, NULL, &h->caps_dropped);
	if (err) {
		log_error("harden: dropping capabilities: %s", strerror(-err));
		return err;
	}
	h->caps = true;
	err = deny_syscalls(h);
	if (err) {
		log_error("harden: seccomp filter: %s", strerror(-err));
		return err;
	}
	h->seccomp = true;
	log_info("hardened: %u capabilities dropped (kept bpf, perfmon, net_admin, sys_admin), "
		 "%u syscalls refused by seccomp", h->caps_dropped, h->syscalls_denied);
	return 0;
}
