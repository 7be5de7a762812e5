// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The OCI runtime-spec "linux.seccomp" profile of egressd's process-side rules
 * (confine.c's tables): deny by default with an allow list, for this host's
 * ABIs only, or merged into a runtime's own default profile (--base) so that
 * passing it with `--security-opt seccomp=` never weakens a container.
 *
 * egressd owns a few syscalls outright and replaces whatever the base says of
 * them: socket and socketpair (allowed only for the families the policy
 * allows), socketcall (the i386 multiplexer hides the family in memory, so a
 * filter cannot judge it: refused) and confine.c's refused calls (io_uring,
 * bpf, perf_event_open, ...). Everything else is the base's.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "confine.h"
#include "seccomp_profile.h"

/*
 * The unconditional allow list of containers-common's default profile
 * (golang-github-containers-common 0.50, /usr/share/containers/seccomp.json,
 * itself Moby's), without socket, socketpair and socketcall, which egressd
 * decides. Syscalls this kernel or arch lacks are skipped by the runtimes.
 * confine.c's refused calls are dropped when the profile is built.
 */
static const char *const default_allow[] = {
	"_llseek", "_newselect", "accept", "accept4", "access", "adjtimex", "alarm", "bind",
	"brk", "capget", "capset", "chdir", "chmod", "chown", "chown32", "clock_adjtime",
	"clock_adjtime64", "clock_getres", "clock_getres_time64", "clock_gettime",
	"clock_gettime64", "clock_nanosleep", "clock_nanosleep_time64", "clone", "clone3",
	"close", "close_range", "connect", "copy_file_range", "creat", "dup", "dup2", "dup3",
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait",
	"epoll_pwait2", "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2", "execve",
	"execveat", "exit", "exit_group", "faccessat", "faccessat2", "fadvise64", "fadvise64_64",
	"fallocate", "fanotify_mark", "fchdir", "fchmod", "fchmodat", "fchown", "fchown32",
	"fchownat", "fcntl", "fcntl64", "fdatasync", "fgetxattr", "flistxattr", "flock", "fork",
	"fremovexattr", "fsconfig", "fsetxattr", "fsmount", "fsopen", "fspick", "fstat",
	"fstat64", "fstatat64", "fstatfs", "fstatfs64", "fsync", "ftruncate", "ftruncate64",
	"futex", "futex_time64", "futimesat", "get_mempolicy", "get_robust_list",
	"get_thread_area", "getcpu", "getcwd", "getdents", "getdents64", "getegid", "getegid32",
	"geteuid", "geteuid32", "getgid", "getgid32", "getgroups", "getgroups32", "getitimer",
	"getpeername", "getpgid", "getpgrp", "getpid", "getppid", "getpriority", "getrandom",
	"getresgid", "getresgid32", "getresuid", "getresuid32", "getrlimit", "getrusage",
	"getsid", "getsockname", "getsockopt", "gettid", "gettimeofday", "getuid", "getuid32",
	"getxattr", "inotify_add_watch", "inotify_init", "inotify_init1", "inotify_rm_watch",
	"io_cancel", "io_destroy", "io_getevents", "io_setup", "io_submit", "ioctl",
	"ioprio_get", "ioprio_set", "ipc", "keyctl", "kill", "landlock_add_rule",
	"landlock_create_ruleset", "landlock_restrict_self", "lchown", "lchown32", "lgetxattr",
	"link", "linkat", "listen", "listxattr", "llistxattr", "lremovexattr", "lseek",
	"lsetxattr", "lstat", "lstat64", "madvise", "mbind", "membarrier", "memfd_create",
	"memfd_secret", "mincore", "mkdir", "mkdirat", "mknod", "mknodat", "mlock", "mlock2",
	"mlockall", "mmap", "mmap2", "mount", "mount_setattr", "move_mount", "mprotect",
	"mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive", "mq_timedreceive_time64",
	"mq_timedsend", "mq_timedsend_time64", "mq_unlink", "mremap", "msgctl", "msgget",
	"msgrcv", "msgsnd", "msync", "munlock", "munlockall", "munmap", "name_to_handle_at",
	"nanosleep", "newfstatat", "open", "open_tree", "openat", "openat2", "pause",
	"pidfd_getfd", "pidfd_open", "pidfd_send_signal", "pipe", "pipe2", "pivot_root",
	"pkey_alloc", "pkey_free", "pkey_mprotect", "poll", "ppoll", "ppoll_time64", "prctl",
	"pread64", "preadv", "preadv2", "prlimit64", "process_mrelease", "process_vm_readv",
	"process_vm_writev", "pselect6", "pselect6_time64", "ptrace", "pwrite64", "pwritev",
	"pwritev2", "read", "readahead", "readdir", "readlink", "readlinkat", "readv", "reboot",
	"recv", "recvfrom", "recvmmsg", "recvmmsg_time64", "recvmsg", "remap_file_pages",
	"removexattr", "rename", "renameat", "renameat2", "restart_syscall", "rmdir", "rseq",
	"rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn",
	"rt_sigsuspend", "rt_sigtimedwait", "rt_sigtimedwait_time64", "rt_tgsigqueueinfo",
	"sched_get_priority_max", "sched_get_priority_min", "sched_getaffinity", "sched_getattr",
	"sched_getparam", "sched_getscheduler", "sched_rr_get_interval",
	"sched_rr_get_interval_time64", "sched_setaffinity", "sched_setattr", "sched_setparam",
	"sched_setscheduler", "sched_yield", "seccomp", "select", "semctl", "semget", "semop",
	"semtimedop", "semtimedop_time64", "send", "sendfile", "sendfile64", "sendmmsg",
	"sendmsg", "sendto", "set_mempolicy", "set_robust_list", "set_thread_area",
	"set_tid_address", "setfsgid", "setfsgid32", "setfsuid", "setfsuid32", "setgid",
	"setgid32", "setgroups", "setgroups32", "setitimer", "setns", "setpgid", "setpriority",
	"setregid", "setregid32", "setresgid", "setresgid32", "setresuid", "setresuid32",
	"setreuid", "setreuid32", "setrlimit", "setsid", "setsockopt", "setuid", "setuid32",
	"setxattr", "shmat", "shmctl", "shmdt", "shmget", "shutdown", "sigaction", "sigaltstack",
	"signal", "signalfd", "signalfd4", "sigpending", "sigprocmask", "sigreturn",
	"sigsuspend", "splice", "stat", "stat64", "statfs", "statfs64", "statx", "symlink",
	"symlinkat", "sync", "sync_file_range", "syncfs", "syscall", "sysinfo", "syslog", "tee",
	"tgkill", "time", "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime",
	"timer_gettime64", "timer_settime", "timer_settime64", "timerfd", "timerfd_create",
	"timerfd_gettime", "timerfd_gettime64", "timerfd_settime", "timerfd_settime64", "times",
	"tkill", "truncate", "truncate64", "ugetrlimit", "umask", "umount", "umount2", "uname",
	"unlink", "unlinkat", "unshare", "utime", "utimensat", "utimensat_time64", "utimes",
	"vfork", "wait4", "waitid", "waitpid", "write", "writev",
#if defined(__x86_64__) || defined(__i386__)
	"arch_prctl", "modify_ldt", /* x86 TLS setup of every libc */
#endif
#if defined(__aarch64__) || defined(__arm__)
	"arm_fadvise64_64", "arm_sync_file_range", "breakpoint", "cacheflush", "set_tls",
	"sync_file_range2",
#endif
};

/*
 * The ABIs of this host the profile lets in, native first (runc 1.1 knows
 * these); calls of any other ABI get the runtime's bad-arch action (killed,
 * SIGSYS). Not SCMP_ARCH_X86 on x86_64: i386 socket calls can go through
 * socketcall(2), whose family argument sits in memory, and libseccomp turns
 * a socket() rule with a family condition into a socketcall rule without one
 * (runc: "error adding seccomp rule for syscall socket: file exists"), so an
 * i386 family filter cannot be expressed; those calls are killed instead.
 */
static const char *const host_arches[] = {
#if defined(__x86_64__)
	"SCMP_ARCH_X86_64", "SCMP_ARCH_X32",
#elif defined(__i386__)
	"SCMP_ARCH_X86",
#elif defined(__aarch64__)
	"SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM",
#elif defined(__riscv) && __riscv_xlen == 64
	"SCMP_ARCH_RISCV64",
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	"SCMP_ARCH_PPC64LE",
#elif defined(__s390x__)
	"SCMP_ARCH_S390X", "SCMP_ARCH_S390",
#else
#error "seccomp_profile.c: add this architecture's SCMP_ARCH_* names"
#endif
};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Syscalls whose rules come from egressd only (an argument rule with mask
 * 0 refuses every call: clone3). */
static bool owned(const char *name)
{
	const struct egr_confine_arg_rule *args;
	const char *const *refused;
	size_t n = egr_confine_refused_calls(&refused), na = egr_confine_refused_args(&args);

	if (strcmp(name, "socket") == 0 || strcmp(name, "socketpair") == 0 ||
	    strcmp(name, "socketcall") == 0)
		return true;
	for (size_t i = 0; i < n; i++)
		if (strcmp(name, refused[i]) == 0)
			return true;
	for (size_t i = 0; i < na; i++)
		if (!args[i].mask && strcmp(name, args[i].name) == 0)
			return true;
	return false;
}

/*
 * Calls egressd refuses for some argument values only (ioctl TIOCSTI, unshare
 * and clone with CLONE_NEWUSER): *arg gets the argument the rules test.
 * libseccomp lets an unconditional ALLOW of a call override a conditional
 * ERRNO of the same call, so such an ALLOW is rewritten as a conditional one
 * that always holds (the argument >= 0), under which the ERRNO wins.
 */
static bool guarded(const char *name, unsigned int *arg)
{
	const struct egr_confine_arg_rule *args;
	size_t na = egr_confine_refused_args(&args);

	for (size_t i = 0; i < na; i++)
		if (args[i].mask && strcmp(name, args[i].name) == 0) {
			*arg = args[i].arg;
			return true;
		}
	return false;
}

static int append(json_t *arr, json_t *v)
{
	return v && json_array_append_new(arr, v) == 0 ? 0 : -ENOMEM;
}

static json_t *rule_ret(const char *name, const char *action, json_t *args, int errno_ret)
{
	json_t *r = json_pack("{s:[s], s:s}", "names", name, "action", action);

	if (r && strcmp(action, "SCMP_ACT_ERRNO") == 0 &&
	    json_object_set_new(r, "errnoRet", json_integer(errno_ret))) {
		json_decref(r);
		r = NULL;
	}
	if (r && args && json_object_set_new(r, "args", args)) {
		json_decref(r);
		return NULL;
	}
	if (!r)
		json_decref(args);
	return r;
}

static json_t *rule(const char *name, const char *action, json_t *args)
{
	return rule_ret(name, action, args, EPERM);
}

/* An ALLOW of name that always holds but is conditional (see guarded()). */
static json_t *guarded_allow(const char *name, unsigned int arg)
{
	return rule(name, "SCMP_ACT_ALLOW",
		    json_pack("[{s:i, s:I, s:s}]", "index", (int)arg, "value", (json_int_t)0, "op",
			      "SCMP_CMP_GE"));
}

static json_t *arg0(unsigned long value, const char *op)
{
	return json_pack("[{s:i, s:I, s:s}]", "index", 0, "value", (json_int_t)value, "op", op);
}

/* Would socket(af, type) (type < 0: any type) be rewritten by the kernel to
 * a family c does not allow (confine.c's table)? */
static bool rewritten(const struct egr_confine *c, int af, int type)
{
	const struct egr_confine_rewrite *rw;
	size_t n = egr_confine_rewrites(&rw);

	for (size_t i = 0; i < n; i++)
		if (rw[i].family == af && (type < 0 || rw[i].type == type) &&
		    !egr_confine_family_allowed(c, rw[i].to))
			return true;
	return false;
}

/* arg0 == af and (arg1 & SOCK_TYPE_MASK) == type. */
static json_t *family_type(int af, int type)
{
	return json_pack("[{s:i, s:I, s:s}, {s:i, s:I, s:I, s:s}]", "index", 0, "value",
			 (json_int_t)af, "op", "SCMP_CMP_EQ", "index", 1, "value",
			 (json_int_t)EGR_CONFINE_TYPE_MASK, "valueTwo", (json_int_t)type, "op",
			 "SCMP_CMP_MASKED_EQ");
}

/*
 * An allowed family some of whose types the kernel turns into a refused one
 * (AF_INET + SOCK_PACKET is a packet socket): one ALLOW per type that is
 * not rewritten and an EPERM for those that are. Not one ALLOW of the family
 * plus a narrower ERRNO: which of two overlapping rules with different
 * actions wins is the runtime's libseccomp's business; disjoint rules leave
 * it nothing to decide.
 */
static int add_typed_allows(const struct egr_confine *c, json_t *rules, int af)
{
	static const char *const calls[] = { "socket", "socketpair" };
	int err = 0;

	for (size_t k = 0; k < ARRAY_LEN(calls) && !err; k++)
		for (int t = 0; t <= EGR_CONFINE_TYPE_MASK && !err; t++)
			err = append(rules, rule(calls[k],
						 rewritten(c, af, t) ? "SCMP_ACT_ERRNO" :
								       "SCMP_ACT_ALLOW",
						 family_type(af, t)));
	return err;
}

/* egressd's rules: socket/socketpair by family, the refused calls. */
static int add_owned_rules(const struct egr_confine *c, json_t *rules)
{
	const struct egr_confine_arg_rule *args;
	const char *const *refused;
	size_t n = egr_confine_refused_calls(&refused), na = egr_confine_refused_args(&args);
	int err = 0;

	for (int af = 0; af < EGR_CONFINE_AF_LIMIT && !err; af++) {
		const char *act = egr_confine_family_allowed(c, af) ? "SCMP_ACT_ALLOW" :
								       "SCMP_ACT_ERRNO";

		if (egr_confine_family_allowed(c, af) && rewritten(c, af, -1)) {
			err = add_typed_allows(c, rules, af);
			continue;
		}
		err = append(rules, rule("socket", act, arg0((unsigned)af, "SCMP_CMP_EQ")));
		if (!err)
			err = append(rules, rule("socketpair", act,
						 arg0((unsigned)af, "SCMP_CMP_EQ")));
	}
	if (!err)
		err = append(rules, rule("socket", "SCMP_ACT_ERRNO",
					 arg0(EGR_CONFINE_AF_LIMIT, "SCMP_CMP_GE")));
	if (!err)
		err = append(rules, rule("socketpair", "SCMP_ACT_ERRNO",
					 arg0(EGR_CONFINE_AF_LIMIT, "SCMP_CMP_GE")));
	if (!err)
		err = append(rules, rule("socketcall", "SCMP_ACT_ERRNO", NULL));
	for (size_t i = 0; i < n && !err; i++)
		err = append(rules, rule(refused[i], "SCMP_ACT_ERRNO", NULL));
	for (size_t i = 0; i < na && !err; i++) {
		const struct egr_confine_arg_rule *r = &args[i];
		json_t *cond = NULL;

		if (r->mask)
			cond = json_pack("[{s:i, s:I, s:I, s:s}]", "index", (int)r->arg, "value",
					 (json_int_t)r->mask, "valueTwo", (json_int_t)r->value, "op",
					 "SCMP_CMP_MASKED_EQ");
		err = append(rules, rule_ret(r->name, "SCMP_ACT_ERRNO", cond, r->errno_ret));
	}
	return err;
}

static int set_arches(json_t *prof)
{
	json_t *arr = json_array();

	for (size_t i = 0; arr && i < ARRAY_LEN(host_arches); i++)
		if (json_array_append_new(arr, json_string(host_arches[i]))) {
			json_decref(arr);
			arr = NULL;
		}
	/* archMap (containers-common's format) would bring other ABIs back. */
	json_object_del(prof, "archMap");
	return arr && json_object_set_new(prof, "architectures", arr) == 0 ? 0 : -ENOMEM;
}

int egr_confine_oci_profile(const struct egr_confine *c, json_t **out)
{
	json_t *prof, *names;
	int err;

	prof = json_pack("{s:s, s:i, s:[{s:[], s:s}]}", "defaultAction", "SCMP_ACT_ERRNO",
			 /* ENOSYS: libcs fall back (clone3 -> clone) on unknown calls */
			 "defaultErrnoRet", ENOSYS, "syscalls", "names", "action",
			 "SCMP_ACT_ALLOW");
	if (!prof)
		return -ENOMEM;
	names = json_object_get(json_array_get(json_object_get(prof, "syscalls"), 0), "names");
	err = set_arches(prof);
	for (size_t i = 0; i < ARRAY_LEN(default_allow) && !err; i++) {
		unsigned int arg;

		if (guarded(default_allow[i], &arg))
			err = append(json_object_get(prof, "syscalls"),
				     guarded_allow(default_allow[i], arg));
		else if (!owned(default_allow[i]))
			err = append(names, json_string(default_allow[i]));
	}
	if (!err)
		err = add_owned_rules(c, json_object_get(prof, "syscalls"));
	if (err) {
		json_decref(prof);
		return err;
	}
	*out = prof;
	return 0;
}

/* Remove owned syscalls from one base rule, and guarded ones from an
 * unconditional ALLOW (their conditional ALLOW goes to extra); *drop when
 * none is left. */
static int strip_rule(json_t *r, size_t idx, bool *drop, json_t *extra, char *why,
		      size_t whylen)
{
	json_t *names = json_object_get(r, "names"), *kept, *cond = json_object_get(r, "args");
	const char *one = json_string_value(json_object_get(r, "name"));
	const char *action = json_string_value(json_object_get(r, "action"));
	bool uncond_allow;
	unsigned int arg;
	size_t i;
	json_t *v;

	*drop = false;
	if (!json_is_object(r)) {
		snprintf(why, whylen, "syscalls[%zu]: not an object", idx);
		return -EINVAL;
	}
	if (!json_is_string(json_object_get(r, "action"))) {
		snprintf(why, whylen, "syscalls[%zu].action: not a string", idx);
		return -EINVAL;
	}
	uncond_allow = !strcmp(action, "SCMP_ACT_ALLOW") &&
		       (!cond || (json_is_array(cond) && json_array_size(cond) == 0));
	if (one) { /* Moby's older one-name form */
		if (uncond_allow && guarded(one, &arg)) {
			*drop = true;
			return append(extra, guarded_allow(one, arg));
		}
		*drop = owned(one);
		return 0;
	}
	if (!json_is_array(names)) {
		snprintf(why, whylen, "syscalls[%zu].names: not an array", idx);
		return -EINVAL;
	}
	kept = json_array();
	if (!kept)
		return -ENOMEM;
	json_array_foreach(names, i, v) {
		if (!json_is_string(v)) {
			json_decref(kept);
			snprintf(why, whylen, "syscalls[%zu].names[%zu]: not a string", idx, i);
			return -EINVAL;
		}
		if (uncond_allow && guarded(json_string_value(v), &arg)) {
			if (append(extra, guarded_allow(json_string_value(v), arg))) {
				json_decref(kept);
				return -ENOMEM;
			}
			continue;
		}
		if (!owned(json_string_value(v)) && json_array_append(kept, v)) {
			json_decref(kept);
			return -ENOMEM;
		}
	}
	*drop = json_array_size(kept) == 0;
	return json_object_set_new(r, "names", kept) ? -ENOMEM : 0;
}

int egr_seccomp_profile_merge(const struct egr_confine *c, const json_t *base, json_t **out,
			      char *why, size_t whylen)
{
	json_t *prof, *rules, *merged;
	const char *def;
	size_t i;
	json_t *r;
	int err = 0;

	if (!json_is_object(base)) {
		snprintf(why, whylen, "not a JSON object");
		return -EINVAL;
	}
	def = json_string_value(json_object_get(base, "defaultAction"));
	if (!def || strncmp(def, "SCMP_ACT_", 9) != 0) {
		snprintf(why, whylen, "defaultAction: missing or not an SCMP_ACT_* action");
		return -EINVAL;
	}
	rules = json_object_get(base, "syscalls");
	if (rules && !json_is_array(rules)) {
		snprintf(why, whylen, "syscalls: not an array");
		return -EINVAL;
	}
	prof = json_deep_copy(base);
	merged = json_array();
	if (!prof || !merged) {
		json_decref(prof);
		json_decref(merged);
		return -ENOMEM;
	}
	json_array_foreach(json_object_get(prof, "syscalls"), i, r) {
		bool drop;

		err = strip_rule(r, i, &drop, merged, why, whylen);
		if (err)
			break;
		if (!drop && json_array_append(merged, r)) {
			err = -ENOMEM;
			break;
		}
	}
	if (!err)
		err = add_owned_rules(c, merged);
	if (!err)
		err = json_object_set_new(prof, "syscalls", merged) ? -ENOMEM : 0;
	else
		json_decref(merged);
	if (!err)
		err = set_arches(prof);
	if (err) {
		if (err == -ENOMEM)
			snprintf(why, whylen, "out of memory");
		json_decref(prof);
		return err;
	}
	*out = prof;
	return 0;
}
