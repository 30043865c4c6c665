/* parse.c: decimal and hex parsing for every front end (see parse.h). One
 * digit loop, parse_u64_digits, does the overflow check for all of them;
 * parse_i64_digits adds the sign and int64's range, and parse_i64_strict
 * only Redis's rule on the first digit. */
#include "core/parse.h"

#include <assert.h>

_Static_assert(PARSE_U64_DIGITS == sizeof "18446744073709551615" - 1,
               "PARSE_U64_DIGITS is the width of UINT64_MAX");
_Static_assert(PARSE_I64_LEN_MAX == sizeof "-9223372036854775808" - 1,
               "PARSE_I64_LEN_MAX is the width of INT64_MIN");

int parse_u64_digits(const char *s, size_t len, size_t len_max,
                     uint64_t *out)
{
	uint64_t v = 0;

	assert(out != NULL);
	if (len == 0 || len > len_max)
		return -1;
	assert(s != NULL);
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		unsigned d = (unsigned)(s[i] - '0');
		/* Checked before the multiply, so v never wraps. Fewer digits
		 * than UINT64_MAX has stay below 10^19 and cannot wrap: the
		 * check (a division) is for the 20th digit on. */
		if (i >= PARSE_U64_DIGITS - 1 && v > (UINT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

/* Sign and magnitude to int64: -2^63 is the one magnitude that fits
 * negated but not positive. */
static int i64_from_magnitude(int neg, uint64_t mag, int64_t *out)
{
	if (!neg) {
		if (mag > (uint64_t)INT64_MAX)
			return -1;
		*out = (int64_t)mag;
		return 0;
	}
	if (mag > (uint64_t)INT64_MAX + 1)
		return -1;
	*out = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
	return 0;
}

int parse_i64_digits(const char *s, size_t len, size_t len_max,
                     int64_t *out)
{
	uint64_t mag;
	size_t neg;

	assert(out != NULL);
	if (len == 0 || len > len_max)
		return -1;
	assert(s != NULL);
	neg = s[0] == '-';
	if (parse_u64_digits(s + neg, len - neg, len_max, &mag) != 0)
		return -1;
	return i64_from_magnitude((int)neg, mag, out);
}

/* parse_i64_digits plus Redis's rule on form: after the sign, "0" alone or
 * a first digit 1-9. That refuses "007", "-0" and "-01"; parse_i64_digits
 * refuses the rest ("", "-", "+1", spaces, range, length). */
int parse_i64_strict(const char *s, size_t len, int64_t *out)
{
	if (len >= 2 && s[0] == '0')
		return -1;
	if (len >= 2 && s[0] == '-' && s[1] == '0')
		return -1;
	return parse_i64_digits(s, len, PARSE_I64_LEN_MAX, out);
}

int parse_hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int parse_hex_byte(const char *s, size_t len)
{
	int hi, lo;

	if (len < 2)
		return -1;
	assert(s != NULL);
	hi = parse_hex_digit(s[0]);
	lo = parse_hex_digit(s[1]);
	if (hi < 0 || lo < 0)
		return -1;
	assert(hi * 16 + lo <= 0xff);
	return hi * 16 + lo;
}

const char *parse_trim_ows(const char *s, size_t *len)
{
	assert(s != NULL || *len == 0);
	while (*len > 0 && (s[0] == ' ' || s[0] == '\t')) {
		s++;
		(*len)--;
	}
	while (*len > 0 && (s[*len - 1] == ' ' || s[*len - 1] == '\t'))
		(*len)--;
	return s;
}
