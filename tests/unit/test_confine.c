// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Unit tests of user/lib/confine.c and seccomp_profile.c: the OCI profiles'
 * rules, and the real filter (families, io_uring, the calls that reach into
 * another process), each applied in a forked child (it cannot be undone)
 * that reports its first failed check to the parent through a pipe and its
 * exit status (tests/common/in_child.h). The capability drops need root:
 * tests/integration/test_confine_caps.c.
 *
 * AF_VSOCK sockets are only ever created and closed at once: never
 * connected (the other end would be the VM's host).
 */
#include <errno.h>
#include <linux/capability.h>
#include <linux/keyctl.h>
#include <linux/sched.h>
#include <linux/io_uring.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <linux/filter.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sched.h>
#include <cmocka.h>
#include <jansson.h>
#include <linux/if_ether.h>
#include <linux/netlink.h>
#include <arpa/inet.h>

#include "confine.h"
#include "seccomp_profile.h"
#include "../common/in_child.h"

#ifndef AF_XDP
#define AF_XDP 44
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

/* --- the OCI profile ---------------------------------------------------------- */

/* Is there an ERRNO(EPERM) rule for syscall `name` with arg0 == value
 * (value < 0: a rule without args)? */
static int has_rule(const json_t *prof, const char *name, long value, const char *op)
{
	const json_t *rules = json_object_get(prof, "syscalls"), *r;
	size_t i;

	json_array_foreach(rules, i, r) {
		const json_t *names = json_object_get(r, "names"), *args = json_object_get(r, "args");
		const json_t *a0;

		if (!json_is_array(names) || json_array_size(names) != 1 ||
		    strcmp(json_string_value(json_array_get(names, 0)) ?: "", name))
			continue;
		if (strcmp(json_string_value(json_object_get(r, "action")) ?: "", "SCMP_ACT_ERRNO") ||
		    json_integer_value(json_object_get(r, "errnoRet")) != EPERM)
			continue;
		if (value < 0) {
			if (!args)
				return 1;
			continue;
		}
		if (!json_is_array(args) || json_array_size(args) != 1)
			continue;
		a0 = json_array_get(args, 0);
		if (json_integer_value(json_object_get(a0, "index")) == 0 &&
		    json_integer_value(json_object_get(a0, "value")) == value &&
		    !strcmp(json_string_value(json_object_get(a0, "op")) ?: "", op))
			return 1;
	}
	return 0;
}

/* Does an unconditional ALLOW rule name syscall name? */
static bool allows(const json_t *prof, const char *name)
{
	const json_t *r, *n;
	size_t i, j;

	json_array_foreach(json_object_get(prof, "syscalls"), i, r) {
		if (strcmp(json_string_value(json_object_get(r, "action")) ?: "", "SCMP_ACT_ALLOW") ||
		    json_object_get(r, "args"))
			continue;
		json_array_foreach(json_object_get(r, "names"), j, n)
			if (strcmp(json_string_value(n) ?: "", name) == 0)
				return true;
	}
	return false;
}

/* Is there an ALLOW of name conditioned on args[arg] >= 0 (always true)? */
static bool has_guarded_allow(const json_t *prof, const char *name, int arg)
{
	const json_t *r, *n;
	size_t i, j;

	json_array_foreach(json_object_get(prof, "syscalls"), i, r) {
		const json_t *a = json_array_get(json_object_get(r, "args"), 0);

		if (strcmp(json_string_value(json_object_get(r, "action")) ?: "", "SCMP_ACT_ALLOW") ||
		    json_integer_value(json_object_get(a, "index")) != arg ||
		    json_integer_value(json_object_get(a, "value")) != 0 ||
		    strcmp(json_string_value(json_object_get(a, "op")) ?: "", "SCMP_CMP_GE"))
			continue;
		json_array_foreach(json_object_get(r, "names"), j, n)
			if (strcmp(json_string_value(n) ?: "", name) == 0)
				return true;
	}
	return false;
}

/* Is there an ALLOW rule for name with arg0 == af? */
static bool has_allow_family(const json_t *prof, const char *name, int af)
{
	const json_t *r;
	size_t i;

	json_array_foreach(json_object_get(prof, "syscalls"), i, r) {
		const json_t *a0 = json_array_get(json_object_get(r, "args"), 0);

		if (!strcmp(json_string_value(json_object_get(r, "action")) ?: "", "SCMP_ACT_ALLOW") &&
		    !strcmp(json_string_value(json_array_get(json_object_get(r, "names"), 0)) ?: "",
			    name) &&
		    a0 && json_integer_value(json_object_get(a0, "value")) == af &&
		    !strcmp(json_string_value(json_object_get(a0, "op")) ?: "", "SCMP_CMP_EQ"))
			return true;
	}
	return false;
}

static void test_oci_profile_merge(void **state)
{
	struct egr_confine c = { 0 };
	json_t *base, *prof = NULL, *bad;
	char why[256] = "";

	base = json_loads("{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"defaultErrnoRet\": 38,"
			  " \"archMap\": [{\"architecture\": \"SCMP_ARCH_RISCV64\"}],"
			  " \"syscalls\": [{\"names\": [\"read\", \"socket\", \"bpf\", \"ioctl\"],"
			  " \"action\": \"SCMP_ACT_ALLOW\"}, {\"names\": [\"io_uring_setup\"],"
			  " \"action\": \"SCMP_ACT_ALLOW\"}, {\"names\": [\"chroot\"],"
			  " \"action\": \"SCMP_ACT_ALLOW\", \"includes\": {\"caps\":"
			  " [\"CAP_SYS_CHROOT\"]}}]}", 0, NULL);
	assert_non_null(base);
	assert_int_equal(egr_seccomp_profile_merge(&c, base, &prof, why, sizeof(why)), 0);
	/* the base's default, its own rules, its capability-gated ones */
	assert_int_equal(json_integer_value(json_object_get(prof, "defaultErrnoRet")), 38);
	assert_true(allows(prof, "read"));
	assert_true(allows(prof, "chroot"));
	/* egressd's syscalls are egressd's */
	assert_false(allows(prof, "socket"));
	assert_false(allows(prof, "bpf"));
	assert_false(allows(prof, "io_uring_setup"));
	assert_true(has_rule(prof, "bpf", -1, NULL));
	assert_true(has_rule(prof, "socket", AF_PACKET, "SCMP_CMP_EQ"));
	assert_true(has_allow_family(prof, "socket", AF_INET));
	/* the base's unconditional ioctl becomes a conditional one, so that the
	 * TIOCSTI refusal is not overridden */
	assert_false(allows(prof, "ioctl"));
	assert_true(has_guarded_allow(prof, "ioctl", 1));
	assert_null(json_object_get(prof, "archMap"));
	assert_true(json_is_array(json_object_get(prof, "architectures")));
	json_decref(prof);
	/* the base itself is untouched */
	assert_non_null(json_object_get(base, "archMap"));
	json_decref(base);

	bad = json_loads("{\"defaultAction\": \"SCMP_ACT_ALLOW\", \"syscalls\": [{\"names\":"
			 " [\"read\", 7], \"action\": \"SCMP_ACT_ERRNO\"}]}", 0, NULL);
	prof = NULL;
	assert_int_equal(egr_seccomp_profile_merge(&c, bad, &prof, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "syscalls[0].names[1]"));
	assert_null(prof);
	json_decref(bad);
	bad = json_loads("{\"syscalls\": []}", 0, NULL);
	assert_int_equal(egr_seccomp_profile_merge(&c, bad, &prof, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "defaultAction"));
	json_decref(bad);
}

static void test_oci_profile_default(void **state)
{
	struct egr_confine c = { 0 };
	json_t *prof = NULL;

	assert_int_equal(egr_confine_oci_profile(&c, &prof), 0);
	assert_non_null(prof);
	/* Deny by default, this host's ABIs only (runc 1.1 rejected RISCV64). */
	assert_string_equal(json_string_value(json_object_get(prof, "defaultAction")),
			    "SCMP_ACT_ERRNO");
	assert_true(json_is_array(json_object_get(prof, "architectures")));
	assert_true(json_array_size(json_object_get(prof, "architectures")) > 0);
#if defined(__x86_64__)
	assert_string_equal(json_string_value(json_array_get(json_object_get(prof, "architectures"),
							     0)), "SCMP_ARCH_X86_64");
	assert_int_equal(json_array_size(json_object_get(prof, "architectures")), 2);
#endif
	/* A normal program's calls are allowed; egressd's refused ones are not. */
	assert_true(allows(prof, "read"));
	assert_true(allows(prof, "execve"));
	/* clone3 gets ENOSYS (its flags are out of a filter's reach: libc falls
	 * back to clone); ioctl and clone are allowed only under a condition that
	 * always holds, so their argument rules are not overridden. */
	assert_false(allows(prof, "clone3"));
	assert_false(allows(prof, "ioctl"));
	assert_false(allows(prof, "clone"));
	assert_true(has_guarded_allow(prof, "ioctl", 1));
	assert_true(has_guarded_allow(prof, "clone", 0));
	assert_false(allows(prof, "bpf"));
	assert_false(allows(prof, "io_uring_setup"));
	assert_false(allows(prof, "socket"));
	assert_false(allows(prof, "socketcall"));
	assert_true(has_allow_family(prof, "socket", AF_INET));
	assert_true(has_allow_family(prof, "socket", AF_INET6));
	assert_true(has_allow_family(prof, "socket", AF_UNIX));
	assert_false(has_allow_family(prof, "socket", AF_PACKET));
	/* Every family but unix, inet and inet6 is refused for socket(). */
	for (int af = 0; af < 64; af++) {
		int want = !(af == AF_UNIX || af == AF_INET || af == AF_INET6);

		if (has_rule(prof, "socket", af, "SCMP_CMP_EQ") != want)
			fail_msg("socket(%d, ...): rule %s, expected %s", af, want ? "missing" : "present",
				 want ? "present" : "absent");
	}
	/* socketpair() follows socket() for the refused families. */
	assert_false(has_rule(prof, "socketpair", AF_UNIX, "SCMP_CMP_EQ"));
	assert_false(has_rule(prof, "socketpair", AF_INET, "SCMP_CMP_EQ"));
	assert_true(has_rule(prof, "socketpair", AF_PACKET, "SCMP_CMP_EQ"));
	assert_true(has_rule(prof, "socketpair", AF_VSOCK, "SCMP_CMP_EQ"));
	/* Families beyond the table. */
	assert_true(has_rule(prof, "socket", 64, "SCMP_CMP_GE"));
	/* io_uring ops skip seccomp: the ring itself is refused. */
	assert_true(has_rule(prof, "io_uring_setup", -1, NULL));
	assert_true(has_rule(prof, "io_uring_enter", -1, NULL));
	assert_true(has_rule(prof, "io_uring_register", -1, NULL));
	/* Reaching into another process of the same uid (issue 8, row 6). */
	assert_true(has_rule(prof, "ptrace", -1, NULL));
	assert_true(has_rule(prof, "process_vm_readv", -1, NULL));
	assert_true(has_rule(prof, "process_vm_writev", -1, NULL));
	assert_true(has_rule(prof, "pidfd_getfd", -1, NULL));
	assert_true(has_rule(prof, "kcmp", -1, NULL));
	assert_true(has_rule(prof, "bpf", -1, NULL));
	/* The keyrings a uid shares with the host (red team 1, F8). */
	assert_true(has_rule(prof, "add_key", -1, NULL));
	assert_true(has_rule(prof, "keyctl", -1, NULL));
	assert_true(has_rule(prof, "request_key", -1, NULL));
	/* Twin: a call nobody refuses has no rule. */
	assert_false(has_rule(prof, "read", -1, NULL));
	json_decref(prof);
}

/* Is there an ERRNO(errno_ret) rule for name with args[0] = {index, value
 * (the mask), valueTwo, SCMP_CMP_MASKED_EQ} (index < 0: no args)? */
static int has_masked_rule(const json_t *prof, const char *name, int index, json_int_t mask,
			   json_int_t value, int errno_ret)
{
	const json_t *rules = json_object_get(prof, "syscalls"), *r;
	size_t i;

	json_array_foreach(rules, i, r) {
		const json_t *names = json_object_get(r, "names"), *args = json_object_get(r, "args");
		const json_t *a0 = json_array_get(args, 0);

		if (strcmp(json_string_value(json_array_get(names, 0)) ?: "", name) ||
		    strcmp(json_string_value(json_object_get(r, "action")) ?: "", "SCMP_ACT_ERRNO") ||
		    json_integer_value(json_object_get(r, "errnoRet")) != errno_ret)
			continue;
		if (index < 0) {
			if (!args)
				return 1;
			continue;
		}
		if (json_array_size(args) == 1 &&
		    json_integer_value(json_object_get(a0, "index")) == index &&
		    json_integer_value(json_object_get(a0, "value")) == mask &&
		    json_integer_value(json_object_get(a0, "valueTwo")) == value &&
		    !strcmp(json_string_value(json_object_get(a0, "op")) ?: "", "SCMP_CMP_MASKED_EQ"))
			return 1;
	}
	return 0;
}

static void test_oci_profile_arg_rules(void **state)
{
	struct egr_confine c = { 0 };
	json_t *prof = NULL;

	assert_int_equal(egr_confine_oci_profile(&c, &prof), 0);
	/* ioctl: the low 32 bits of the request only (CVE-2019-10063). */
	assert_true(has_masked_rule(prof, "ioctl", 1, 0xffffffff, TIOCSTI, EPERM));
	assert_true(has_masked_rule(prof, "ioctl", 1, 0xffffffff, TIOCLINUX, EPERM));
	assert_true(has_masked_rule(prof, "unshare", 0, CLONE_NEWUSER, CLONE_NEWUSER, EPERM));
	assert_true(has_masked_rule(prof, "clone", 0, CLONE_NEWUSER, CLONE_NEWUSER, EPERM));
	assert_true(has_masked_rule(prof, "clone3", -1, 0, 0, ENOSYS));
	/* Twins: ioctl as a whole, and other unshare flags, are not refused. */
	assert_false(has_rule(prof, "ioctl", -1, NULL));
	assert_false(has_masked_rule(prof, "unshare", 0, CLONE_NEWNS, CLONE_NEWNS, EPERM));
	assert_false(has_masked_rule(prof, "clone3", -1, 0, 0, EPERM));
	json_decref(prof);
}

static void test_oci_profile_extra_families(void **state)
{
	struct egr_confine c = { .extra_families = (1ULL << AF_PACKET) | (1ULL << AF_VSOCK) };
	json_t *prof = NULL;

	assert_int_equal(egr_confine_oci_profile(&c, &prof), 0);
	assert_false(has_rule(prof, "socket", AF_PACKET, "SCMP_CMP_EQ"));
	assert_false(has_rule(prof, "socketpair", AF_PACKET, "SCMP_CMP_EQ"));
	assert_false(has_rule(prof, "socket", AF_VSOCK, "SCMP_CMP_EQ"));
	/* The others stay refused. */
	assert_true(has_rule(prof, "socket", AF_XDP, "SCMP_CMP_EQ"));
	assert_true(has_rule(prof, "socket", AF_NETLINK, "SCMP_CMP_EQ"));
	assert_false(has_rule(prof, "socket", AF_INET, "SCMP_CMP_EQ"));
	assert_true(has_rule(prof, "io_uring_setup", -1, NULL));
	json_decref(prof);
}

static void test_family_names(void **state)
{
	assert_int_equal(egr_confine_family("packet"), AF_PACKET);
	assert_int_equal(egr_confine_family("netlink"), AF_NETLINK);
	assert_int_equal(egr_confine_family("xdp"), AF_XDP);
	assert_int_equal(egr_confine_family("vsock"), AF_VSOCK);
	assert_int_equal(egr_confine_family("inet"), -EINVAL);
	assert_int_equal(egr_confine_family("unix"), -EINVAL);
	assert_int_equal(egr_confine_family("Packet"), -EINVAL);
	assert_int_equal(egr_confine_family(""), -EINVAL);
}

/* --- the real thing, in a child ------------------------------------------------- */

/* How the children install the filter: libseccomp's own load, or the
 * exported program `egressctl run` builds once and installs in pid 1 and
 * the command (egr_confine_seccomp_build + egr_confine_seccomp_install). */
static bool use_exported;

static int install_filter(const struct egr_confine *c)
{
	struct sock_fprog prog;
	int err;

	if (!use_exported)
		return egr_confine_seccomp(c);
	err = egr_confine_seccomp_build(c, &prog);
	if (err)
		return err;
	err = egr_confine_seccomp_install(&prog);
	egr_confine_seccomp_free(&prog);
	return err;
}

static long io_uring_setup_once(void)
{
	struct io_uring_params p;
	long fd;

	memset(&p, 0, sizeof(p));
	fd = syscall(__NR_io_uring_setup, 1, &p);
	if (fd >= 0)
		close((int)fd);
	return fd;
}

static void child_default_filter(void)
{
	struct egr_confine c = { 0 };
	int err, sv[2];

	err = install_filter(&c);
	if (err)
		child_fail("egr_confine_seccomp: %s", strerror(-err));
	if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1)
		child_fail("no_new_privs is not set");
	expect_socket_eperm(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL), "AF_PACKET");
	expect_socket_eperm(AF_PACKET, SOCK_DGRAM, 0, "AF_PACKET dgram");
	expect_socket_eperm(AF_VSOCK, SOCK_STREAM, 0, "AF_VSOCK");
	expect_socket_eperm(AF_XDP, SOCK_RAW, 0, "AF_XDP");
	expect_socket_eperm(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE, "AF_NETLINK");
	expect_socket_eperm(100, SOCK_STREAM, 0, "family 100 (beyond the table)");
	if (socketpair(AF_PACKET, SOCK_DGRAM, 0, sv) == 0 || errno != EPERM)
		child_fail("socketpair(AF_PACKET): not EPERM");
	if (io_uring_setup_once() >= 0 || errno != EPERM)
		child_fail("io_uring_setup: %s, expected EPERM", strerror(errno));
	expect_socket_ok(AF_INET, SOCK_STREAM, 0, "AF_INET stream");
	expect_socket_ok(AF_INET, SOCK_DGRAM, 0, "AF_INET dgram");
	expect_socket_ok(AF_INET6, SOCK_STREAM, 0, "AF_INET6 stream");
	expect_socket_ok(AF_INET6, SOCK_DGRAM, 0, "AF_INET6 dgram");
	expect_socket_ok(AF_UNIX, SOCK_STREAM, 0, "AF_UNIX stream");
	expect_socket_ok(AF_UNIX, SOCK_DGRAM, 0, "AF_UNIX dgram");
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		child_fail("socketpair(AF_UNIX): %s", strerror(errno));
	close(sv[0]);
	close(sv[1]);
}

/* The calls that reach into another process, tried on our own parent (the
 * test runner: same uid) and on ourselves. */
static long try_ptrace_seize(pid_t pid)
{
	return syscall(SYS_ptrace, 0x4206 /* PTRACE_SEIZE */, pid, 0, 0);
}

static long try_vm_readv(pid_t pid, int write)
{
	char src[8] = "egressd", dst[8];
	struct iovec local = { .iov_base = dst, .iov_len = sizeof(dst) };
	struct iovec remote = { .iov_base = src, .iov_len = sizeof(src) };

	return syscall(write ? SYS_process_vm_writev : SYS_process_vm_readv, pid, &local, 1,
		       &remote, 1, 0);
}

static long try_pidfd_getfd(void)
{
	long pidfd = syscall(SYS_pidfd_open, getpid(), 0), fd;

	if (pidfd < 0)
		return -2; /* pidfd_open itself is not refused: a test error */
	fd = syscall(SYS_pidfd_getfd, (int)pidfd, 0, 0);
	if (fd >= 0)
		close((int)fd);
	close((int)pidfd);
	return fd;
}

static long try_kcmp(void)
{
	return syscall(SYS_kcmp, getpid(), getpid(), 0 /* KCMP_FILE */, 0, 0);
}

static void expect_eperm(long ret, const char *what)
{
	if (ret >= 0)
		child_fail("%s succeeded under the filter", what);
	if (ret == -2)
		child_fail("%s: pidfd_open failed: %s", what, strerror(errno));
	if (errno != EPERM)
		child_fail("%s failed with %s, expected EPERM", what, strerror(errno));
}

static void child_process_calls_refused(void)
{
	struct egr_confine c = { 0 };
	int err;

	err = install_filter(&c);
	if (err)
		child_fail("egr_confine_seccomp: %s", strerror(-err));
	expect_eperm(try_ptrace_seize(getppid()), "ptrace(PTRACE_SEIZE, parent)");
	expect_eperm(try_vm_readv(getpid(), 0), "process_vm_readv(self)");
	expect_eperm(try_vm_readv(getpid(), 1), "process_vm_writev(self)");
	expect_eperm(try_pidfd_getfd(), "pidfd_getfd(self, 0)");
	expect_eperm(try_kcmp(), "kcmp(self, self)");
	/* Still allowed: seeing and signalling a process is the pid
	 * namespace's business, not the filter's. */
	if (syscall(SYS_pidfd_open, getpid(), 0) < 0)
		child_fail("pidfd_open(self) refused: %s", strerror(errno));
	if (kill(getppid(), 0) < 0)
		child_fail("kill(parent, 0) refused: %s", strerror(errno));
}

static void test_seccomp_process_calls(void **state)
{
	in_child(child_process_calls_refused, "process calls");
}

/* Sanity twin: the same calls without the filter are not refused (kcmp may
 * be compiled out: ENOSYS; ptrace of the parent may meet Yama: EPERM). */
static void child_process_calls_unfiltered(void)
{
	if (try_vm_readv(getpid(), 0) != 8)
		child_fail("process_vm_readv(self) without a filter: %s", strerror(errno));
	if (try_vm_readv(getpid(), 1) != 8)
		child_fail("process_vm_writev(self) without a filter: %s", strerror(errno));
	if (try_pidfd_getfd() < 0)
		child_fail("pidfd_getfd(self, 0) without a filter: %s", strerror(errno));
	if (try_kcmp() < 0 && errno != ENOSYS)
		child_fail("kcmp(self, self) without a filter: %s", strerror(errno));
}

static void test_process_calls_unfiltered(void **state)
{
	in_child(child_process_calls_unfiltered, "process calls, no filter");
}

static void test_seccomp_filter(void **state)
{
	in_child(child_default_filter, "default filter");
}

static long try_ioctl(int fd, unsigned long req)
{
	char c = 'x';

	return syscall(SYS_ioctl, fd, req, &c);
}

static long try_add_key(void)
{
	return syscall(SYS_add_key, "user", "egr-unit-test", "x", 1, KEY_SPEC_PROCESS_KEYRING);
}

static long try_keyctl(void)
{
	/* create: a process keyring lives and dies with this child */
	return syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_PROCESS_KEYRING, 1);
}

static long try_request_key(void)
{
	return syscall(SYS_request_key, "user", "egr-unit-test-missing", NULL,
		       KEY_SPEC_PROCESS_KEYRING);
}

static long try_clone_newuser(void)
{
	long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);

	if (pid == 0)
		_exit(0);
	if (pid > 0)
		waitpid((pid_t)pid, NULL, 0);
	return pid;
}

static long try_clone3(void)
{
	struct clone_args args = { .exit_signal = SIGCHLD };
	long pid = syscall(SYS_clone3, &args, sizeof(args));

	if (pid == 0)
		_exit(0);
	if (pid > 0)
		waitpid((pid_t)pid, NULL, 0);
	return pid;
}

/* Terminal injection, new user namespaces, keyrings (red team 1). The
 * ioctls go to a pipe: without the filter they fail with ENOTTY, so EPERM
 * is the filter's. */
static void child_arg_rules(void)
{
	struct egr_confine c = { 0 };
	int err, pfd[2];
	pid_t pid;

	if (pipe(pfd))
		child_fail("pipe: %s", strerror(errno));
	err = install_filter(&c);
	if (err)
		child_fail("egr_confine_seccomp: %s", strerror(-err));
	expect_eperm(try_ioctl(pfd[0], TIOCSTI), "ioctl(TIOCSTI)");
	expect_eperm(try_ioctl(pfd[0], TIOCSTI | (1UL << 32)), "ioctl(TIOCSTI | 1 << 32)");
	expect_eperm(try_ioctl(pfd[0], TIOCLINUX), "ioctl(TIOCLINUX)");
	expect_eperm(unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)");
	expect_eperm(unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare(CLONE_NEWUSER|CLONE_NEWNS)");
	expect_eperm(try_clone_newuser(), "clone(CLONE_NEWUSER)");
	if (try_clone3() >= 0 || errno != ENOSYS)
		child_fail("clone3: %s, expected ENOSYS", strerror(errno));
	expect_eperm(try_add_key(), "add_key");
	expect_eperm(try_keyctl(), "keyctl(KEYCTL_GET_KEYRING_ID)");
	expect_eperm(try_request_key(), "request_key");
	/* Still allowed: other ioctls, unshare without CLONE_NEWUSER, fork
	 * (clone without it). */
	if (try_ioctl(pfd[0], FIONREAD) < 0)
		child_fail("ioctl(FIONREAD) refused: %s", strerror(errno));
	if (unshare(0) < 0)
		child_fail("unshare(0) refused: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		child_fail("fork refused: %s", strerror(errno));
	if (pid == 0)
		_exit(0);
	waitpid(pid, NULL, 0);
}

static void test_seccomp_arg_rules(void **state)
{
	in_child(child_arg_rules, "arg rules");
}

/* Sanity twin: the same calls without the filter are not refused. */
static void child_arg_rules_unfiltered(void)
{
	int pfd[2];

	if (pipe(pfd))
		child_fail("pipe: %s", strerror(errno));
	if (try_ioctl(pfd[0], TIOCSTI) >= 0 || errno != ENOTTY)
		child_fail("ioctl(TIOCSTI) on a pipe without a filter: %s, expected ENOTTY",
			   strerror(errno));
	if (try_keyctl() < 0)
		child_fail("keyctl(KEYCTL_GET_KEYRING_ID) without a filter: %s", strerror(errno));
	if (try_clone3() < 0)
		child_fail("clone3 without a filter: %s", strerror(errno));
	/* Last: it changes our user namespace (this child only). The kernel
	 * refuses one to a chrooted process (a test chroot: / is not the root
	 * of kthreadd, pid 2, which is the host's; pid 1's may be unreadable):
	 * only there is EPERM the kernel's, not a filter's. */
	if (unshare(CLONE_NEWUSER) < 0) {
		int why = errno;
		struct statx self, host;

		if (why == EPERM && statx(AT_FDCWD, "/", 0, STATX_INO | STATX_MNT_ID, &self) == 0 &&
		    statx(AT_FDCWD, "/proc/2/root/", 0, STATX_INO | STATX_MNT_ID, &host) == 0 &&
		    (self.stx_dev_major != host.stx_dev_major ||
		     self.stx_dev_minor != host.stx_dev_minor || self.stx_ino != host.stx_ino ||
		     self.stx_mnt_id != host.stx_mnt_id)) {
			fprintf(stderr, "note: chrooted: the kernel refuses user namespaces here; "
					"the unfiltered unshare(CLONE_NEWUSER) is not shown\n");
			return;
		}
		child_fail("unshare(CLONE_NEWUSER) without a filter: %s", strerror(why));
	}
}

static void test_arg_rules_unfiltered(void **state)
{
	in_child(child_arg_rules_unfiltered, "arg rules, no filter");
}

/* A family the policy names is left open; AF_NETLINK because it needs no
 * capability, so success proves the filter let it through. */
static void child_extra_family(void)
{
	struct egr_confine c = { .extra_families = 1ULL << AF_NETLINK };
	int err;

	err = install_filter(&c);
	if (err)
		child_fail("egr_confine_seccomp: %s", strerror(-err));
	expect_socket_ok(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE, "AF_NETLINK (allowed)");
	expect_socket_eperm(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL), "AF_PACKET");
	expect_socket_eperm(AF_VSOCK, SOCK_STREAM, 0, "AF_VSOCK");
	if (io_uring_setup_once() >= 0 || errno != EPERM)
		child_fail("io_uring_setup: %s, expected EPERM", strerror(errno));
	expect_socket_ok(AF_INET, SOCK_STREAM, 0, "AF_INET");
}

static void test_seccomp_extra_family(void **state)
{
	in_child(child_extra_family, "extra family");
}

/* Sanity twin: without the filter the same calls are not refused by it. */
static void child_no_filter(void)
{
	expect_socket_ok(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE, "AF_NETLINK without a filter");
	if (geteuid() == 0)
		expect_socket_ok(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL), "AF_PACKET as root");
}

static void test_without_filter(void **state)
{
	in_child(child_no_filter, "no filter");
}

/* The same checks, with the exported program installed directly. */
static void test_exported_filter(void **state)
{
	use_exported = true;
	in_child(child_default_filter, "exported: default filter");
	in_child(child_extra_family, "exported: extra family");
	in_child(child_process_calls_refused, "exported: process calls");
	in_child(child_arg_rules, "exported: arg rules");
	use_exported = false;
}

static void test_exported_program_stable(void **state)
{
	struct egr_confine none = { 0 }, netlink = { .extra_families = 1ULL << AF_NETLINK };
	struct sock_fprog a, b, c;

	assert_int_equal(egr_confine_seccomp_build(&none, &a), 0);
	assert_int_equal(egr_confine_seccomp_build(&none, &b), 0);
	assert_int_equal(egr_confine_seccomp_build(&netlink, &c), 0);
	assert_true(a.len > 0 && a.len <= BPF_MAXINSNS);
	assert_int_equal(a.len, b.len);
	assert_memory_equal(a.filter, b.filter, a.len * sizeof(struct sock_filter));
	/* The policy's families are in it: a different program. */
	assert_true(c.len != a.len ||
		    memcmp(a.filter, c.filter, a.len * sizeof(struct sock_filter)) != 0);
	egr_confine_seccomp_free(&a);
	egr_confine_seccomp_free(&b);
	egr_confine_seccomp_free(&c);
	assert_null(a.filter);
	assert_int_equal(a.len, 0);
	/* Fail closed: an empty program is refused, never "no filter". */
	assert_int_equal(egr_confine_seccomp_install(&a), -EINVAL);
}

/* The exported program is the one libseccomp's own load installs: read
 * back from a child that called egr_confine_seccomp (PTRACE_SECCOMP_GET_FILTER
 * needs CAP_SYS_ADMIN: root; under CI=true a non-root run fails). */
static void compare_installed(const struct egr_confine *c)
{
	struct sock_fprog want;
	struct sock_filter *got;
	int status;
	long n;
	pid_t pid;

	if (geteuid() != 0) {
		if (getenv("CI") && strcmp(getenv("CI"), "true") == 0)
			fail_msg("reading an installed filter back needs root");
		fprintf(stderr, "note: not root: the installed filter is not read back\n");
		return;
	}
	assert_int_equal(egr_confine_seccomp_build(c, &want), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) < 0 || egr_confine_seccomp(c))
			_exit(2);
		raise(SIGSTOP);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSTOPPED(status));
	n = ptrace(PTRACE_SECCOMP_GET_FILTER, pid, (void *)0, NULL);
	assert_int_equal(n, want.len);
	got = calloc((size_t)n, sizeof(*got));
	assert_non_null(got);
	assert_int_equal(ptrace(PTRACE_SECCOMP_GET_FILTER, pid, (void *)0, got), n);
	assert_memory_equal(got, want.filter, (size_t)n * sizeof(*got));
	free(got);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	egr_confine_seccomp_free(&want);
}

static void test_exported_is_libseccomps(void **state)
{
	struct egr_confine none = { 0 }, extra = { .extra_families = 1ULL << AF_NETLINK |
								   1ULL << AF_PACKET };

	compare_installed(&none);
	compare_installed(&extra);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_oci_profile_default),
		cmocka_unit_test(test_oci_profile_extra_families),
		cmocka_unit_test(test_oci_profile_merge),
		cmocka_unit_test(test_oci_profile_arg_rules),
		cmocka_unit_test(test_family_names),
		cmocka_unit_test(test_without_filter),
		cmocka_unit_test(test_seccomp_filter),
		cmocka_unit_test(test_seccomp_extra_family),
		cmocka_unit_test(test_process_calls_unfiltered),
		cmocka_unit_test(test_seccomp_process_calls),
		cmocka_unit_test(test_arg_rules_unfiltered),
		cmocka_unit_test(test_seccomp_arg_rules),
		cmocka_unit_test(test_exported_filter),
		cmocka_unit_test(test_exported_program_stable),
		cmocka_unit_test(test_exported_is_libseccomps),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
