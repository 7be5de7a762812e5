// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The OCI hook's reading of runtime annotations and the policy tree's
 * name rules (user/lib/ocimeta.c, user/lib/policytree.c), with the names
 * and annotations a hostile pod author would try.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ocimeta.h"
#include "policytree.h"

static void test_policy_names(void **state)
{
	static const char *const bad[] = {
		"", "..", ".", "../b/wide", "/etc/egressd/policies/b/wide.json", "b/wide",
		"..data", ".hidden", "a b", "a\nb", "wide.json/..", "x%2f..", "na\\me",
		"0123456789012345678901234567890123456789012345678901234567890123", /* 64 */
		"ünï", "a*", NULL,
	};
	static const char *const good[] = { "default", "web", "web-2", "Web_2.v1", "a",
					    "012345678901234567890123456789012345678901234567890123456789012",
					    NULL };
	const char *rule = NULL;

	(void)state;
	for (size_t i = 0; bad[i]; i++) {
		rule = NULL;
		assert_int_equal(egr_policy_name_check(bad[i], &rule), -EINVAL);
		assert_non_null(rule);
	}
	assert_int_equal(egr_policy_name_check(NULL, &rule), -EINVAL);
	egr_policy_name_check("a/b", &rule);
	assert_non_null(strstr(rule, "not a path"));
	for (size_t i = 0; good[i]; i++)
		assert_int_equal(egr_policy_name_check(good[i], &rule), 0);
}

static void test_namespaces(void **state)
{
	(void)state;
	assert_true(egr_k8s_namespace_ok("default"));
	assert_true(egr_k8s_namespace_ok("team-a"));
	assert_true(egr_k8s_namespace_ok("a1"));
	assert_false(egr_k8s_namespace_ok(""));
	assert_false(egr_k8s_namespace_ok(NULL));
	assert_false(egr_k8s_namespace_ok("-a"));
	assert_false(egr_k8s_namespace_ok("a-"));
	assert_false(egr_k8s_namespace_ok("A"));
	assert_false(egr_k8s_namespace_ok(".."));
	assert_false(egr_k8s_namespace_ok("a/b"));
	assert_false(egr_k8s_namespace_ok("a.b"));
	assert_false(egr_k8s_namespace_ok(
	    "a123456789012345678901234567890123456789012345678901234567890123"));
}

static json_t *ann(const char *text)
{
	json_t *o = json_loads(text, JSON_ALLOW_NUL, NULL);

	assert_non_null(o);
	return o;
}

static void test_containerd(void **state)
{
	struct egr_oci_meta m;
	const char *rule = NULL;
	json_t *a = ann("{\"io.kubernetes.cri.sandbox-namespace\":\"team-a\","
			"\"io.kubernetes.cri.sandbox-name\":\"web-0\","
			"\"io.kubernetes.cri.sandbox-uid\":\"u-1\","
			"\"io.kubernetes.cri.container-name\":\"app\","
			"\"io.kubernetes.cri.image-name\":\"docker.io/library/busybox:1\","
			"\"io.kubernetes.cri.container-type\":\"container\","
			"\"io.egressd.policy\":\"web\",\"io.egressd.execution-id\":\"x1\"}");

	(void)state;
	assert_int_equal(egr_oci_meta_parse(a, &m, &rule), 0);
	assert_string_equal(m.namespace, "team-a");
	assert_string_equal(m.runtime, "containerd");
	assert_string_equal(m.pod, "web-0");
	assert_string_equal(m.pod_uid, "u-1");
	assert_string_equal(m.name, "app");
	assert_string_equal(m.image, "docker.io/library/busybox:1");
	assert_string_equal(m.policy, "web");
	assert_string_equal(m.execution_id, "x1");
	assert_false(m.pod_sandbox);
	json_decref(a);
}

static void test_crio(void **state)
{
	struct egr_oci_meta m;
	const char *rule = NULL;
	json_t *a = ann("{\"io.kubernetes.pod.namespace\":\"team-b\","
			"\"io.kubernetes.pod.name\":\"db-0\",\"io.kubernetes.pod.uid\":\"u-2\","
			"\"io.kubernetes.container.name\":\"pg\","
			"\"io.kubernetes.cri-o.ImageName\":\"quay.io/pg:16\","
			"\"io.kubernetes.cri-o.ContainerType\":\"container\"}");

	(void)state;
	assert_int_equal(egr_oci_meta_parse(a, &m, &rule), 0);
	assert_string_equal(m.namespace, "team-b");
	assert_string_equal(m.runtime, "cri-o");
	assert_string_equal(m.pod, "db-0");
	assert_string_equal(m.image, "quay.io/pg:16");
	assert_null(m.policy);
	assert_false(m.pod_sandbox);
	json_decref(a);
}

/* A pod author sets the other runtime's namespace key as a pod annotation. */
static void test_forged_namespace(void **state)
{
	struct egr_oci_meta m;
	const char *rule = NULL;
	/* CRI-O: its io.kubernetes.pod.namespace (the kubelet's label, added
	 * last) says team-a; the pod's annotation claims containerd's key. */
	json_t *a = ann("{\"io.kubernetes.pod.namespace\":\"team-a\","
			"\"io.kubernetes.cri.sandbox-namespace\":\"team-b\","
			"\"io.egressd.policy\":\"wide\"}");

	(void)state;
	assert_int_equal(egr_oci_meta_parse(a, &m, &rule), -EINVAL);
	assert_non_null(strstr(rule, "forgery"));
	json_decref(a);
	/* The same value twice is no forgery. */
	a = ann("{\"io.kubernetes.pod.namespace\":\"team-a\","
		"\"io.kubernetes.cri.sandbox-namespace\":\"team-a\"}");
	assert_int_equal(egr_oci_meta_parse(a, &m, &rule), 0);
	assert_string_equal(m.namespace, "team-a");
	json_decref(a);
	/* A namespace that is a path. */
	a = ann("{\"io.kubernetes.pod.namespace\":\"../team-b\"}");
	assert_int_equal(egr_oci_meta_parse(a, &m, &rule), -EINVAL);
	json_decref(a);
	/* Posing as the pause container to be skipped: the runtime's own type
	 * key says "container". */
	a = ann("{\"io.kubernetes.pod.namespace\":\"team-a\","
		"\"io.kubernetes.cri-o.ContainerType\":\"container\","
		"\"io.kubernetes.cri.container-type\":\"sandbox\"}");
	assert_int_equal(egr_oci_meta_parse(a, &m, &rule), 0);
	assert_false(m.pod_sandbox);
	json_decref(a);
	a = ann("{\"io.kubernetes.pod.namespace\":\"team-a\","
		"\"io.kubernetes.cri-o.ContainerType\":\"sandbox\"}");
	assert_int_equal(egr_oci_meta_parse(a, &m, &rule), 0);
	assert_true(m.pod_sandbox);
	json_decref(a);
}

/*
 * rt-k8s finding 2: with both runtimes' namespace keys agreeing, the other
 * runtime's identity keys are a pod's annotations too: on CRI-O a pod that
 * also sets io.kubernetes.cri.sandbox-namespace to its own namespace chose
 * its pod, uid, container name and image in audit and list. Two keys of one
 * field that disagree are refused like two namespaces; one present is taken.
 */
static void test_forged_identity(void **state)
{
	struct egr_oci_meta m;
	const char *rule = NULL;
	json_t *a = ann("{\"io.kubernetes.pod.namespace\":\"team-a\","
			"\"io.kubernetes.pod.name\":\"evil-0\","
			"\"io.kubernetes.pod.uid\":\"u-evil\","
			"\"io.kubernetes.container.name\":\"app\","
			"\"io.kubernetes.cri-o.ImageName\":\"evil.example/x:1\","
			"\"io.kubernetes.cri-o.ContainerType\":\"container\","
			"\"io.kubernetes.cri.sandbox-namespace\":\"team-a\","
			"\"io.kubernetes.cri.sandbox-name\":\"payments-0\"}");

	(void)state;
	assert_int_equal(egr_oci_meta_parse(a, &m, &rule), -EINVAL);
	assert_non_null(strstr(rule, "forgery"));
	json_decref(a);
	a = ann("{\"io.kubernetes.pod.namespace\":\"team-a\","
		"\"io.kubernetes.pod.name\":\"evil-0\","
		"\"io.kubernetes.cri-o.ImageName\":\"evil.example/x:1\","
		"\"io.kubernetes.cri.sandbox-namespace\":\"team-a\","
		"\"io.kubernetes.cri.image-name\":\"trusted.example/y:1\"}");
	assert_int_equal(egr_oci_meta_parse(a, &m, &rule), -EINVAL);
	json_decref(a);
	/* Twin: both namespace keys, the one runtime's identity only (or the
	 * same values twice): the identity is the one written. */
	a = ann("{\"io.kubernetes.pod.namespace\":\"team-a\","
		"\"io.kubernetes.pod.name\":\"evil-0\","
		"\"io.kubernetes.pod.uid\":\"u-evil\","
		"\"io.kubernetes.cri-o.ImageName\":\"evil.example/x:1\","
		"\"io.kubernetes.cri.sandbox-namespace\":\"team-a\","
		"\"io.kubernetes.cri.sandbox-name\":\"evil-0\"}");
	assert_int_equal(egr_oci_meta_parse(a, &m, &rule), 0);
	assert_string_equal(m.pod, "evil-0");
	assert_string_equal(m.pod_uid, "u-evil");
	assert_string_equal(m.image, "evil.example/x:1");
	json_decref(a);
}

/*
 * rt-k8s finding 3: identity values are printed raw by `list` and in
 * logs; C1 controls (U+009B is CSI to an 8-bit terminal) and bidi
 * overrides (U+202E) passed the C0/DEL check. Kubernetes names, uids and
 * image references are ASCII: anything else is refused.
 */
static void test_non_ascii_values(void **state)
{
	static const char *const bad[] = {
		"{\"io.kubernetes.pod.name\":\"a\\u009b2Jb\"}",
		"{\"io.kubernetes.pod.name\":\"payments\\u202e0-lave\"}",
		"{\"io.kubernetes.cri.image-name\":\"\\u0085x\"}",
		"{\"io.egressd.execution-id\":\"r\\u00e9sum\\u00e9\"}",
		NULL,
	};
	struct egr_oci_meta m;
	const char *rule = NULL, *key = NULL;
	json_t *a;

	(void)state;
	for (size_t i = 0; bad[i]; i++) {
		a = ann(bad[i]);
		assert_int_equal(egr_oci_meta_parse(a, &m, &rule), -EINVAL);
		json_decref(a);
	}
	a = ann("{\"pod\":\"x\\u009b31m\"}");
	assert_int_equal(egr_container_check(a, &key, &rule), -EINVAL);
	json_decref(a);
	/* Twin: printable ASCII, spaces included, passes. */
	a = ann("{\"io.kubernetes.pod.name\":\"web-7d9f\","
		"\"io.egressd.execution-id\":\"run 42: build #7\"}");
	assert_int_equal(egr_oci_meta_parse(a, &m, &rule), 0);
	json_decref(a);
}

static void test_bad_values(void **state)
{
	static const char *const bad[] = {
		"{\"io.egressd.policy\":7}",
		"{\"io.kubernetes.pod.namespace\":[\"a\"]}",
		"{\"io.egressd.policy\":\"a\\u0000b\"}",
		"{\"io.egressd.policy\":\"a\\nb\"}",
		"{\"io.kubernetes.pod.name\":\"\\u001b[2J\"}",
		NULL,
	};
	struct egr_oci_meta m;
	const char *rule = NULL;
	char big[600];
	json_t *a;

	(void)state;
	for (size_t i = 0; bad[i]; i++) {
		a = ann(bad[i]);
		assert_int_equal(egr_oci_meta_parse(a, &m, &rule), -EINVAL);
		json_decref(a);
	}
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	a = json_pack("{s:s}", "io.kubernetes.cri.image-name", big);
	assert_int_equal(egr_oci_meta_parse(a, &m, &rule), -EINVAL);
	json_decref(a);
	/* The bound: 255 bytes pass, 256 do not (the fuzz target found the
	 * 256th let through). */
	big[255] = '\0';
	a = json_pack("{s:s}", "io.kubernetes.cri.image-name", big);
	assert_int_equal(egr_oci_meta_parse(a, &m, &rule), 0);
	json_decref(a);
	big[255] = 'a';
	big[256] = '\0';
	a = json_pack("{s:s}", "io.kubernetes.cri.image-name", big);
	assert_int_equal(egr_oci_meta_parse(a, &m, &rule), -EINVAL);
	json_decref(a);
	a = json_array();
	assert_int_equal(egr_oci_meta_parse(a, &m, &rule), -EINVAL);
	json_decref(a);
	/* No annotations at all: no Kubernetes, nothing selected. */
	assert_int_equal(egr_oci_meta_parse(NULL, &m, &rule), 0);
	assert_null(m.namespace);
	assert_null(m.policy);
}

static void test_container_object(void **state)
{
	struct egr_oci_meta m = { .namespace = "team-a", .pod = "web-0", .runtime = "containerd" };
	const char *key, *rule;
	json_t *c = egr_container_json("abc", &m, "web"), *bad;

	(void)state;
	assert_non_null(c);
	assert_string_equal(json_string_value(json_object_get(c, "id")), "abc");
	assert_string_equal(json_string_value(json_object_get(c, "policy")), "web");
	assert_null(json_object_get(c, "image"));
	assert_int_equal(egr_container_check(c, &key, &rule), 0);
	bad = json_pack("{s:s}", "uid", "x");
	assert_int_equal(egr_container_check(bad, &key, &rule), -EINVAL);
	assert_string_equal(key, "uid");
	json_decref(bad);
	bad = json_pack("{s:i}", "pod", 3);
	assert_int_equal(egr_container_check(bad, &key, &rule), -EINVAL);
	json_decref(bad);
	bad = json_string("x");
	assert_int_equal(egr_container_check(bad, &key, &rule), -EINVAL);
	json_decref(bad);
	json_decref(c);
}

/* --- the tree: real directories, links in and out of it ----------------------- */

static char tree[64];

static void put(const char *rel, const char *text)
{
	char p[256];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", tree, rel);
	f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	chmod(p, 0644);
}

static void sub(const char *rel, char *out, size_t len)
{
	snprintf(out, len, "%s/%s", tree, rel);
}

static int tree_setup(void **state)
{
	char p[256];

	(void)state;
	if (geteuid() != 0) {
		/* The tree's rules want root's files. */
		fprintf(stderr, "test_ocimeta: the tree tests need root\n");
		return getenv("CI") && !strcmp(getenv("CI"), "true") ? -1 : 0;
	}
	snprintf(tree, sizeof(tree), "/tmp/egr-ptree-XXXXXX");
	assert_non_null(mkdtemp(tree));
	chmod(tree, 0755);
	sub("team-a", p, sizeof(p));
	assert_int_equal(mkdir(p, 0755), 0);
	sub("team-b", p, sizeof(p));
	assert_int_equal(mkdir(p, 0755), 0);
	/* The kubelet's ConfigMap layout in team-a. */
	sub("team-a/..2026_01_01_00_00_00.1", p, sizeof(p));
	assert_int_equal(mkdir(p, 0755), 0);
	put("team-a/..2026_01_01_00_00_00.1/web.json", "{\"tenant\":\"a\"}");
	sub("team-a/..data", p, sizeof(p));
	assert_int_equal(symlink("..2026_01_01_00_00_00.1", p), 0);
	sub("team-a/web.json", p, sizeof(p));
	assert_int_equal(symlink("..data/web.json", p), 0);
	put("team-b/wide.json", "{\"tenant\":\"b\"}");
	put("team-a/bad.json", "{\"tenant\":");
	/* Links out of the namespace's directory. */
	sub("team-a/steal.json", p, sizeof(p));
	assert_int_equal(symlink("../team-b/wide.json", p), 0);
	sub("team-a/abs.json", p, sizeof(p));
	assert_int_equal(symlink("/etc/passwd", p), 0);
	sub("team-a/proc.json", p, sizeof(p));
	assert_int_equal(symlink("/proc/self/fd/0", p), 0);
	put("team-a/loose.json", "{\"tenant\":\"a\"}");
	sub("team-a/loose.json", p, sizeof(p));
	chmod(p, 0666);
	return 0;
}

static int tree_teardown(void **state)
{
	char cmd[128];

	(void)state;
	if (tree[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tree);
		if (system(cmd) != 0)
			fprintf(stderr, "test_ocimeta: could not remove %s\n", tree);
	}
	return 0;
}

static void test_tree(void **state)
{
	const char *rule = "";
	char why[256];
	json_t *doc;
	int fd;

	(void)state;
	if (!tree[0])
		skip();
	/* Through the kubelet's two links: allowed. */
	assert_int_equal(egr_ptree_load(tree, "team-a", "web", &doc, &rule, why, sizeof(why)), 0);
	assert_string_equal(json_string_value(json_object_get(doc, "tenant")), "a");
	json_decref(doc);
	/* Another namespace's file through a link, an absolute link, a magic
	 * link: all resolve outside team-a/. */
	assert_int_equal(egr_ptree_open(tree, "team-a", "steal", &rule), -EXDEV);
	assert_non_null(strstr(rule, "outside"));
	assert_int_equal(egr_ptree_open(tree, "team-a", "abs", &rule), -EXDEV);
	fd = egr_ptree_open(tree, "team-a", "proc", &rule);
	assert_true(fd == -EXDEV || fd == -ELOOP);
	/* Names that try to leave: refused before any open. */
	assert_int_equal(egr_ptree_open(tree, "team-a", "../team-b/wide", &rule), -EINVAL);
	assert_int_equal(egr_ptree_open(tree, "team-a", "..data/web", &rule), -EINVAL);
	assert_int_equal(egr_ptree_open(tree, "..", "team-b", &rule), -EINVAL);
	/* Missing, loose, broken. */
	assert_int_equal(egr_ptree_open(tree, "team-a", "none", &rule), -ENOENT);
	assert_int_equal(egr_ptree_open(tree, "team-c", "web", &rule), -ENOENT);
	assert_int_equal(egr_ptree_open(tree, "team-a", "loose", &rule), -EPERM);
	assert_int_equal(egr_ptree_load(tree, "team-a", "bad", &doc, &rule, why, sizeof(why)),
			 -EBADMSG);
	assert_null(doc);
	/* Its own namespace's file: allowed. */
	fd = egr_ptree_open(tree, "team-b", "wide", &rule);
	assert_true(fd >= 0);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_policy_names),
		cmocka_unit_test(test_namespaces),
		cmocka_unit_test(test_containerd),
		cmocka_unit_test(test_crio),
		cmocka_unit_test(test_forged_namespace),
		cmocka_unit_test(test_forged_identity),
		cmocka_unit_test(test_non_ascii_values),
		cmocka_unit_test(test_bad_values),
		cmocka_unit_test(test_container_object),
		cmocka_unit_test_setup_teardown(test_tree, tree_setup, tree_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
