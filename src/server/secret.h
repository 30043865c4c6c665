/* secret.h: checking a password or bearer token against the configured
 * one without telling, through timing, how long the secret is or how much
 * of a guess was right. */
#ifndef TALLY_SERVER_SECRET_H
#define TALLY_SERVER_SECRET_H

#include <stddef.h>

#define SECRET_KEY_BYTES 32
#define SECRET_DIGEST_BYTES 32   /* HMAC-SHA-256 */

/* The secret is kept only as a keyed digest under a key drawn at start:
 * a check hashes the guess with the same key and compares two digests of
 * fixed length, so the time of a check depends on the guess's length
 * alone, and the digest's bytes are worthless outside this process. */
typedef struct secret {
	int ready;
	unsigned char key[SECRET_KEY_BYTES];
	unsigned char digest[SECRET_DIGEST_BYTES];
} secret;

/* Draw a key and digest pw (len bytes). 0, or -1 when no random key or
 * digest could be made (s is left not ready, and matches nothing). */
int secret_init(secret *s, const char *pw, size_t len);

/* 1 when given (len bytes) is the secret; 0 otherwise, and always 0 for a
 * secret that is not ready (fail closed). */
int secret_matches(const secret *s, const char *given, size_t len);

/* Forget the key and digest. */
void secret_clear(secret *s);

#endif
