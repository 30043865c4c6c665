/* secret.c: password and token checks in time independent of the secret:
 * HMAC-SHA-256 of both sides under a per-process random key, compared with
 * OpenSSL's constant-time CRYPTO_memcmp. */
#include <assert.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "server/secret.h"

/* A plain byte compare returns at the first difference, and even a
 * hand-written loop that ORs every byte may be shortened by the compiler,
 * and it walks the secret's length. Digests have one fixed length, and
 * CRYPTO_memcmp is written (in assembly on common targets) so that no
 * compiler can make it exit early. */
static int digest(const unsigned char *key, const char *data, size_t len,
                  unsigned char out[SECRET_DIGEST_BYTES])
{
	unsigned int n = 0;
	/* HMAC() wants a non-NULL data pointer even for zero bytes. */
	const unsigned char *d = len > 0 ? (const unsigned char *)data
	                                 : (const unsigned char *)"";

	if (HMAC(EVP_sha256(), key, SECRET_KEY_BYTES, d, len, out, &n) == NULL)
		return -1;
	return n == SECRET_DIGEST_BYTES ? 0 : -1;
}

int secret_init(secret *s, const char *pw, size_t len)
{
	assert(s != NULL);
	assert(pw != NULL || len == 0);
	memset(s, 0, sizeof *s);
	if (RAND_bytes(s->key, SECRET_KEY_BYTES) != 1)
		return -1;
	if (digest(s->key, pw, len, s->digest) != 0) {
		secret_clear(s);
		return -1;
	}
	s->ready = 1;
	return 0;
}

int secret_matches(const secret *s, const char *given, size_t len)
{
	unsigned char d[SECRET_DIGEST_BYTES];
	int same;

	assert(s != NULL);
	if (!s->ready || (given == NULL && len > 0))
		return 0;
	if (digest(s->key, given, len, d) != 0)
		return 0;
	same = CRYPTO_memcmp(d, s->digest, SECRET_DIGEST_BYTES) == 0;
	OPENSSL_cleanse(d, sizeof d);
	return same;
}

void secret_clear(secret *s)
{
	if (s == NULL)
		return;
	OPENSSL_cleanse(s, sizeof *s);
}
