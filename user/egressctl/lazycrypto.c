// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libcrypto, loaded on first use: egressctl is not linked with -lcrypto
 * (Makefile), so `run` and every other command that hashes nothing never
 * pay for loading and relocating it (~1.7-2 ms of every process start
 * here; docs/benchmarks.md). The audit commands (audit_read.c: SHA-256 and
 * HMAC of the chain) call the OpenSSL functions below, which dlopen
 * libcrypto.so.3 once and forward to the real ones.
 *
 * Fail closed: without libcrypto every call answers as OpenSSL does on an
 * error (NULL, 0; CRYPTO_memcmp "different"), so a verification fails, it
 * never passes. Each definition has the prototype of OpenSSL's header, which
 * the compiler checks; a function egressctl starts to use that is not here
 * fails the link.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#define LIBCRYPTO	  "libcrypto.so.3"
#define LIBCRYPTO_VERSION "OPENSSL_3.0.0"

static void *crypto_sym(const char *name)
{
	static void *lib;
	static int failed;
	void *fn;

	if (!lib && !failed) {
		lib = dlopen(LIBCRYPTO, RTLD_NOW | RTLD_LOCAL);
		if (!lib) {
			failed = 1;
			fprintf(stderr, "egressctl: cannot load %s: %s\n", LIBCRYPTO, dlerror());
		}
	}
	if (!lib)
		return NULL;
	fn = dlvsym(lib, name, LIBCRYPTO_VERSION);
	if (!fn)
		fprintf(stderr, "egressctl: %s has no %s@%s\n", LIBCRYPTO, name, LIBCRYPTO_VERSION);
	return fn;
}

/* ret name(params) forwarding to libcrypto's, `fail` when it is missing. */
#define LAZY(ret, name, fail, params, args)                                     \
	ret name params                                                         \
	{                                                                       \
		static ret(*fn) params;                                         \
		if (!fn)                                                        \
			fn = (ret(*) params)crypto_sym(#name);                  \
		return fn ? fn args : fail;                                     \
	}

#define LAZY_VOID(name, params, args, fallback)                                 \
	void name params                                                        \
	{                                                                       \
		static void(*fn) params;                                        \
		if (!fn)                                                        \
			fn = (void(*) params)crypto_sym(#name);                 \
		if (fn)                                                         \
			fn args;                                                \
		else                                                            \
			fallback;                                               \
	}

static const OSSL_PARAM param_end; /* all zero: OSSL_PARAM_END */

LAZY(int, OPENSSL_init_crypto, 0, (uint64_t opts, const OPENSSL_INIT_SETTINGS *settings),
     (opts, settings))
LAZY(int, CRYPTO_memcmp, 1, (const void *a, const void *b, size_t len), (a, b, len))
LAZY_VOID(OPENSSL_cleanse, (void *ptr, size_t len), (ptr, len), explicit_bzero(ptr, len))

LAZY(const EVP_MD *, EVP_sha256, NULL, (void), ())
LAZY(int, EVP_Digest, 0,
     (const void *data, size_t count, unsigned char *md, unsigned int *size, const EVP_MD *type,
      ENGINE *impl),
     (data, count, md, size, type, impl))
LAZY(EVP_MD_CTX *, EVP_MD_CTX_new, NULL, (void), ())
LAZY_VOID(EVP_MD_CTX_free, (EVP_MD_CTX *ctx), (ctx), (void)0)
LAZY(int, EVP_DigestInit_ex, 0, (EVP_MD_CTX *ctx, const EVP_MD *type, ENGINE *impl),
     (ctx, type, impl))
LAZY(int, EVP_DigestUpdate, 0, (EVP_MD_CTX *ctx, const void *d, size_t cnt), (ctx, d, cnt))
LAZY(int, EVP_DigestFinal_ex, 0, (EVP_MD_CTX *ctx, unsigned char *md, unsigned int *s),
     (ctx, md, s))

LAZY(EVP_MAC *, EVP_MAC_fetch, NULL,
     (OSSL_LIB_CTX *libctx, const char *algorithm, const char *properties),
     (libctx, algorithm, properties))
LAZY_VOID(EVP_MAC_free, (EVP_MAC *mac), (mac), (void)0)
LAZY(EVP_MAC_CTX *, EVP_MAC_CTX_new, NULL, (EVP_MAC *mac), (mac))
LAZY_VOID(EVP_MAC_CTX_free, (EVP_MAC_CTX *ctx), (ctx), (void)0)
LAZY(int, EVP_MAC_init, 0,
     (EVP_MAC_CTX *ctx, const unsigned char *key, size_t keylen, const OSSL_PARAM params[]),
     (ctx, key, keylen, params))
LAZY(int, EVP_MAC_update, 0, (EVP_MAC_CTX *ctx, const unsigned char *data, size_t datalen),
     (ctx, data, datalen))
LAZY(int, EVP_MAC_final, 0,
     (EVP_MAC_CTX *ctx, unsigned char *out, size_t *outl, size_t outsize),
     (ctx, out, outl, outsize))

LAZY(OSSL_PARAM, OSSL_PARAM_construct_utf8_string, param_end,
     (const char *key, char *buf, size_t bsize), (key, buf, bsize))
LAZY(OSSL_PARAM, OSSL_PARAM_construct_end, param_end, (void), ())
