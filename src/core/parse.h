/* parse.h: integers and hex digits from text, by the exact rules each of
 * tally's front ends promises (RESP, HTTP, the CLI). Pure functions: no
 * I/O, no allocation, no locale, no errno.
 *
 * Input is (s, len): s need not be NUL-terminated, and a NUL byte in it is
 * just a byte that is not a digit. Every integer parser takes the whole of
 * s[0..len) or nothing: it returns 0 and stores the value, or -1 and leaves
 * *out untouched. None takes spaces, '+', a radix prefix or an exponent,
 * and none wraps on overflow.
 *
 * Which parser for which input:
 *   parse_i64_strict   Redis integers (string2ll): INCRBY, SETEX, RESP
 *                      lengths. "007", "-0" and "+1" are refused.
 *   parse_u64_digits   ids: digits only, leading zeros allowed, the caller
 *                      chooses the longest input it takes.
 *   parse_i64_digits   the CLI's signed numbers: like parse_u64_digits with
 *                      an optional '-', so "007" and "-0" are taken. */
#ifndef TALLY_CORE_PARSE_H
#define TALLY_CORE_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* Digits of UINT64_MAX, 18446744073709551615: the longest u64 written
 * without padding. A len_max for input that may not be padded. */
#define PARSE_U64_DIGITS 20
/* Longest input parse_i64_strict takes: "-9223372036854775808". Redis's
 * string2ll refuses LONG_STR_SIZE (21) bytes or more. */
#define PARSE_I64_LEN_MAX 20
/* A len_max of no limit, for input whose length its source bounds (a
 * NUL-terminated word of the command line). */
#define PARSE_LEN_ANY SIZE_MAX

/* An unsigned decimal: 1..len_max bytes, each '0'-'9'; leading zeros are
 * allowed ("007" is 7). -1 when len is 0 or above len_max, on any other
 * byte, or when the value exceeds UINT64_MAX. */
int parse_u64_digits(const char *s, size_t len, size_t len_max,
                     uint64_t *out);

/* A signed decimal by Redis's string2ll rules: an optional '-', then "0"
 * alone or a digit 1-9 and more digits; at most PARSE_I64_LEN_MAX bytes;
 * within [INT64_MIN, INT64_MAX]. Refused: "", "-", "-0", "007", "-01",
 * "+1", " 1", "1 ", and anything out of range. */
int parse_i64_strict(const char *s, size_t len, int64_t *out);

/* A signed decimal, lenient about form: an optional '-' and then what
 * parse_u64_digits takes (so "007", "-007" and "-0" are accepted), the
 * whole at most len_max bytes, within [INT64_MIN, INT64_MAX]. For input
 * that is checked and then re-sent in canonical form (the CLI), not for a
 * protocol that promises Redis's rules. */
int parse_i64_digits(const char *s, size_t len, size_t len_max,
                     int64_t *out);

/* The value of one hex digit ('0'-'9', 'a'-'f', 'A'-'F'), or -1. */
int parse_hex_digit(char c);

/* The byte that two hex digits s[0], s[1] spell (0..255), as in "%2F" or
 * "\x2f" after the prefix; -1 when len < 2 or either is not a hex digit.
 * Bytes after the two are not read. */
int parse_hex_byte(const char *s, size_t len);

/* s[0, *len) without the spaces and tabs around it, as an HTTP field
 * value is read (RFC 9110 section 5.5): returns the first byte kept and
 * sets *len to the bytes kept. */
const char *parse_trim_ows(const char *s, size_t *len);

#endif
