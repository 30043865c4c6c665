/* test_parse.c: unit tests of core/parse.h, the one place that turns text
 * into integers for RESP, HTTP and the CLI. Each front end promises its
 * own accepted set, so both sides of every rule are checked: what is taken
 * and what is refused, at the boundaries of the range and of the length. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/parse.h"

/* Deterministic pseudo-random numbers (xorshift64*). */
static uint64_t rnd_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * UINT64_C(2685821657736338717);
}

/* The NUL-terminated string s through each parser; -1 or 0 as they say. */
static int u64_of(const char *s, size_t len_max, uint64_t *out)
{
	return parse_u64_digits(s, strlen(s), len_max, out);
}

static int strict_of(const char *s, int64_t *out)
{
	return parse_i64_strict(s, strlen(s), out);
}

static int lenient_of(const char *s, int64_t *out)
{
	return parse_i64_digits(s, strlen(s), PARSE_LEN_ANY, out);
}

/* ---- parse_u64_digits ---------------------------------------------------- */

static void test_u64_digits_takes_digits_and_leading_zeros(void **state)
{
	(void)state;
	uint64_t v = 1;
	assert_int_equal(u64_of("0", 20, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(u64_of("42", 20, &v), 0);
	assert_int_equal(v, 42);
	assert_int_equal(u64_of("007", 20, &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(u64_of("00000000000000000000", 20, &v), 0);
	assert_int_equal(v, 0);
}

static void test_u64_digits_range_boundaries(void **state)
{
	(void)state;
	uint64_t v = 0;
	assert_int_equal(u64_of("18446744073709551615", 20, &v), 0);
	assert_true(v == UINT64_MAX);
	assert_int_equal(u64_of("018446744073709551615", 64, &v), 0);
	assert_true(v == UINT64_MAX);
	v = 5;
	assert_int_equal(u64_of("18446744073709551616", 20, &v), -1);
	assert_int_equal(u64_of("99999999999999999999", 20, &v), -1);
	assert_int_equal(u64_of("100000000000000000000", 64, &v), -1);
	/* Leading zeros do not let a wrap past the 20th digit's check. */
	assert_int_equal(u64_of("000000000000000000000018446744073709551616",
	                        64, &v), -1);
	assert_int_equal(u64_of("0000000000000000000000999999999999999999990",
	                        64, &v), -1);
	assert_int_equal(v, 5); /* untouched on failure */
	/* 19 digits, the most that are never checked, at their largest. */
	assert_int_equal(u64_of("9999999999999999999", 20, &v), 0);
	assert_true(v == UINT64_C(9999999999999999999));
	assert_int_equal(u64_of("0000000000000000000000018446744073709551615",
	                        64, &v), 0);
	assert_true(v == UINT64_MAX);
}

static void test_u64_digits_refuses_anything_but_digits(void **state)
{
	(void)state;
	static const char *const bad[] = { "", "-1", "-0", "+1", " 1", "1 ",
		"1a", "0x10", "1e3", "1.0", "\xd9\xa1" };
	uint64_t v = 9;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(u64_of(bad[i], 64, &v), -1);
	assert_int_equal(parse_u64_digits("1\0" "2", 3, 64, &v), -1);
	assert_int_equal(v, 9);
}

/* len_max bounds the input, padding included: RESP's ids take 64 bytes,
 * HTTP's PARSE_U64_DIGITS. */
static void test_u64_digits_len_max(void **state)
{
	(void)state;
	char s[80];
	uint64_t v = 0;
	memset(s, '0', sizeof s);
	s[63] = '7';
	assert_int_equal(parse_u64_digits(s + 44, 20, PARSE_U64_DIGITS, &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(parse_u64_digits(s + 43, 21, PARSE_U64_DIGITS, &v), -1);
	assert_int_equal(parse_u64_digits(s, 64, 64, &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(parse_u64_digits(s, 64, PARSE_U64_DIGITS, &v), -1);
	assert_int_equal(parse_u64_digits(s + 63, 2, 64, &v), 0);
	assert_int_equal(v, 70);
	assert_int_equal(parse_u64_digits(s, 65, 64, &v), -1);
	/* No limit of its own: only the value's range. */
	assert_int_equal(parse_u64_digits(s, 80, PARSE_LEN_ANY, &v), 0);
	assert_true(v == UINT64_C(70000000000000000));
	assert_int_equal(parse_u64_digits("", 0, PARSE_LEN_ANY, &v), -1);
}

/* Input is (s, len): what follows s[len) is never read. */
static void test_u64_digits_reads_only_len_bytes(void **state)
{
	(void)state;
	uint64_t v = 0;
	assert_int_equal(parse_u64_digits("123abc", 3, 20, &v), 0);
	assert_int_equal(v, 123);
}

static void test_u64_digits_round_trips_random_values(void **state)
{
	(void)state;
	uint64_t seed = 0x9e3779b97f4a7c15u;
	for (int i = 0; i < 100000; i++) {
		uint64_t shift = rnd_next(&seed) % 64;
		uint64_t x = rnd_next(&seed) >> shift;
		char s[24];
		uint64_t v = 0;
		int n = snprintf(s, sizeof s, "%" PRIu64, x);
		assert_int_equal(parse_u64_digits(s, (size_t)n, 20, &v), 0);
		assert_true(v == x);
	}
}

/* ---- parse_i64_strict ---------------------------------------------------- */

static void test_i64_strict_takes_redis_integers(void **state)
{
	(void)state;
	int64_t v = 1;
	assert_int_equal(strict_of("0", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(strict_of("10", &v), 0);
	assert_int_equal(v, 10);
	assert_int_equal(strict_of("-10", &v), 0);
	assert_int_equal(v, -10);
	assert_int_equal(strict_of("9223372036854775807", &v), 0);
	assert_true(v == INT64_MAX);
	assert_int_equal(strict_of("-9223372036854775808", &v), 0);
	assert_true(v == INT64_MIN);
}

static void test_i64_strict_refuses_what_string2ll_refuses(void **state)
{
	(void)state;
	static const char *const bad[] = { "", "-", "-0", "00", "007", "-01",
		"+1", " 1", "1 ", "--1", "1-", "1.0", "1e3", "0x1", "abc",
		"9223372036854775808", "-9223372036854775809",
		"99999999999999999999", "-99999999999999999999",
		"100000000000000000000" };
	int64_t v = 3;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(strict_of(bad[i], &v), -1);
	assert_int_equal(parse_i64_strict("1\0", 2, &v), -1);
	assert_int_equal(v, 3); /* untouched on failure */
}

/* The accepted set is exactly the canonical printings of int64: a string
 * is taken iff printing its value gives it back. */
static void test_i64_strict_takes_exactly_canonical_form(void **state)
{
	(void)state;
	static const char alphabet[] = "0123456789-+ ";
	uint64_t seed = 42;
	for (int i = 0; i < 200000; i++) {
		char s[24], back[24];
		size_t len = (size_t)(rnd_next(&seed) % 22);
		int64_t v = 0;
		for (size_t k = 0; k < len; k++) {
			uint64_t r = rnd_next(&seed);
			/* Mostly digits, so that long valid numbers occur. */
			s[k] = alphabet[r % 16 < 10 ? r % 10 : 10 + r % 3];
		}
		s[len] = '\0';
		if (parse_i64_strict(s, len, &v) == 0) {
			snprintf(back, sizeof back, "%" PRId64, v);
			assert_string_equal(back, s);
		}
		int64_t x = (int64_t)rnd_next(&seed);
		int n = snprintf(back, sizeof back, "%" PRId64, x);
		assert_int_equal(parse_i64_strict(back, (size_t)n, &v), 0);
		assert_true(v == x);
	}
}

/* ---- parse_i64_digits ---------------------------------------------------- */

/* The CLI re-prints what it sends, so it takes forms Redis refuses. */
static void test_i64_digits_takes_leading_zeros_and_minus_zero(void **state)
{
	(void)state;
	int64_t v = 1;
	assert_int_equal(lenient_of("007", &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(lenient_of("-007", &v), 0);
	assert_int_equal(v, -7);
	assert_int_equal(lenient_of("-0", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(lenient_of("-09223372036854775808", &v), 0);
	assert_true(v == INT64_MIN);
	assert_int_equal(lenient_of("0009223372036854775807", &v), 0);
	assert_true(v == INT64_MAX);
}

static void test_i64_digits_refuses_bad_form_and_range(void **state)
{
	(void)state;
	static const char *const bad[] = { "", "-", "--1", "+1", " 1", "1 ",
		"-+1", "1-", "1.5", "9223372036854775808",
		"-9223372036854775809", "18446744073709551616" };
	int64_t v = 4;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		assert_int_equal(lenient_of(bad[i], &v), -1);
	assert_int_equal(v, 4);
}

static void test_i64_digits_len_max_counts_the_sign(void **state)
{
	(void)state;
	int64_t v = 0;
	assert_int_equal(parse_i64_digits("-12", 3, 3, &v), 0);
	assert_int_equal(v, -12);
	assert_int_equal(parse_i64_digits("-123", 4, 3, &v), -1);
	assert_int_equal(parse_i64_digits("123", 3, 2, &v), -1);
}

/* ---- hex ----------------------------------------------------------------- */

static void test_hex_digit_values(void **state)
{
	(void)state;
	assert_int_equal(parse_hex_digit('0'), 0);
	assert_int_equal(parse_hex_digit('9'), 9);
	assert_int_equal(parse_hex_digit('a'), 10);
	assert_int_equal(parse_hex_digit('F'), 15);
	int valid = 0;
	for (int c = -128; c < 128; c++)
		valid += parse_hex_digit((char)c) >= 0;
	assert_int_equal(valid, 22);
	assert_int_equal(parse_hex_digit('g'), -1);
	assert_int_equal(parse_hex_digit('/'), -1);
	assert_int_equal(parse_hex_digit('\0'), -1);
}

static void test_hex_byte_two_digits_only(void **state)
{
	(void)state;
	assert_int_equal(parse_hex_byte("2F", 2), 0x2f);
	assert_int_equal(parse_hex_byte("ff", 2), 0xff);
	assert_int_equal(parse_hex_byte("00", 2), 0);
	assert_int_equal(parse_hex_byte("41zz", 4), 0x41); /* reads two */
	assert_int_equal(parse_hex_byte("4", 1), -1);
	assert_int_equal(parse_hex_byte("41", 1), -1);   /* len is the end */
	assert_int_equal(parse_hex_byte("", 0), -1);
	assert_int_equal(parse_hex_byte("g1", 2), -1);
	assert_int_equal(parse_hex_byte("1g", 2), -1);
	assert_int_equal(parse_hex_byte("-1", 2), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_u64_digits_takes_digits_and_leading_zeros),
		cmocka_unit_test(test_u64_digits_range_boundaries),
		cmocka_unit_test(test_u64_digits_refuses_anything_but_digits),
		cmocka_unit_test(test_u64_digits_len_max),
		cmocka_unit_test(test_u64_digits_reads_only_len_bytes),
		cmocka_unit_test(test_u64_digits_round_trips_random_values),
		cmocka_unit_test(test_i64_strict_takes_redis_integers),
		cmocka_unit_test(test_i64_strict_refuses_what_string2ll_refuses),
		cmocka_unit_test(test_i64_strict_takes_exactly_canonical_form),
		cmocka_unit_test(test_i64_digits_takes_leading_zeros_and_minus_zero),
		cmocka_unit_test(test_i64_digits_refuses_bad_form_and_range),
		cmocka_unit_test(test_i64_digits_len_max_counts_the_sign),
		cmocka_unit_test(test_hex_digit_values),
		cmocka_unit_test(test_hex_byte_two_digits_only),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
