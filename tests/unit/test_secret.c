/* test_secret.c: unit tests of server/secret.h, the password and token
 * check: only the exact bytes match (no prefix, no extension, no other
 * case, embedded NULs count), an unset secret matches nothing, and two
 * secrets of the same password have different keys and digests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "server/secret.h"

static int matches(const secret *s, const char *given)
{
	return secret_matches(s, given, strlen(given));
}

static void test_only_the_exact_password_matches(void **state)
{
	secret s;
	(void)state;
	assert_int_equal(secret_init(&s, "s3cret", 6), 0);
	assert_true(matches(&s, "s3cret"));
	assert_false(matches(&s, "s3cre"));
	assert_false(matches(&s, "s3cret2"));
	assert_false(matches(&s, "S3CRET"));
	assert_false(matches(&s, ""));
	assert_false(secret_matches(&s, "s3cret\0", 7));
	assert_false(secret_matches(&s, NULL, 3));
	secret_clear(&s);
}

static void test_bytes_past_a_nul_count(void **state)
{
	secret s;
	(void)state;
	assert_int_equal(secret_init(&s, "ab\0cd", 5), 0);
	assert_true(secret_matches(&s, "ab\0cd", 5));
	assert_false(secret_matches(&s, "ab\0ce", 5));
	assert_false(matches(&s, "ab"));
	secret_clear(&s);
}

static void test_long_passwords(void **state)
{
	static char pw[8192], other[8192];
	secret s;
	(void)state;
	memset(pw, 'x', sizeof pw);
	memcpy(other, pw, sizeof other);
	other[sizeof other - 1] = 'y';       /* differs in the last byte only */
	assert_int_equal(secret_init(&s, pw, sizeof pw), 0);
	assert_true(secret_matches(&s, pw, sizeof pw));
	assert_false(secret_matches(&s, other, sizeof other));
	assert_false(secret_matches(&s, pw, sizeof pw - 1));
	secret_clear(&s);
}

static void test_unset_or_cleared_matches_nothing(void **state)
{
	secret s;
	(void)state;
	memset(&s, 0, sizeof s);
	assert_false(matches(&s, ""));
	assert_false(matches(&s, "anything"));
	assert_int_equal(secret_init(&s, "pw", 2), 0);
	secret_clear(&s);
	assert_false(matches(&s, "pw"));
	secret_clear(NULL);                  /* safe, like free(NULL) */
}

static void test_each_secret_has_its_own_key(void **state)
{
	secret a, b;
	(void)state;
	assert_int_equal(secret_init(&a, "same", 4), 0);
	assert_int_equal(secret_init(&b, "same", 4), 0);
	assert_memory_not_equal(a.key, b.key, SECRET_KEY_BYTES);
	assert_memory_not_equal(a.digest, b.digest, SECRET_DIGEST_BYTES);
	assert_true(matches(&a, "same"));
	assert_true(matches(&b, "same"));
	secret_clear(&a);
	secret_clear(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_only_the_exact_password_matches),
		cmocka_unit_test(test_bytes_past_a_nul_count),
		cmocka_unit_test(test_long_passwords),
		cmocka_unit_test(test_unset_or_cleared_matches_nothing),
		cmocka_unit_test(test_each_secret_has_its_own_key),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
