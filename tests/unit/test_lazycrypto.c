// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Unit tests of user/egressctl/lazycrypto.c, linked as egressctl is: without
 * -lcrypto (Makefile). libcrypto is not mapped until the first OpenSSL call,
 * and the audit chain's hashes through it are right: SHA-256 (FIPS 180-2,
 * "abc") and HMAC-SHA-256 (RFC 4231, test case 2), through audit_read.c's
 * egr_audit_hash_parts as `egressctl audit verify` calls it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <openssl/crypto.h>

#include "audit_int.h"

static bool libcrypto_mapped(void)
{
	char line[512];
	bool found = false;
	FILE *f = fopen("/proc/self/maps", "re");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "libcrypto"))
			found = true;
	fclose(f);
	return found;
}

static void test_loaded_on_first_use(void **state)
{
	char hex[EGR_AUDIT_HASH_HEX + 1];

	assert_false(libcrypto_mapped());
	/* FIPS 180-2, appendix B.1: SHA-256("abc"), given in two parts. */
	assert_int_equal(egr_audit_hash_parts(NULL, 0, "a", 1, "bc", 2, hex), 0);
	assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	assert_true(libcrypto_mapped());
}

static void test_hmac(void **state)
{
	static const char data[] = "what do ya want for nothing?";
	char hex[EGR_AUDIT_HASH_HEX + 1];

	/* RFC 4231, test case 2. */
	assert_int_equal(egr_audit_hash_parts((const uint8_t *)"Jefe", 4, data, 10, data + 10,
					      strlen(data) - 10, hex),
			 0);
	assert_string_equal(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

static void test_memcmp_and_cleanse(void **state)
{
	char buf[8] = "secret!";

	assert_int_equal(CRYPTO_memcmp("abcd", "abcd", 4), 0);
	assert_int_not_equal(CRYPTO_memcmp("abcd", "abce", 4), 0);
	OPENSSL_cleanse(buf, sizeof(buf));
	for (size_t i = 0; i < sizeof(buf); i++)
		assert_int_equal(buf[i], 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_loaded_on_first_use),
		cmocka_unit_test(test_hmac),
		cmocka_unit_test(test_memcmp_and_cleanse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
