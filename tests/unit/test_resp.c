/* test_resp.c: unit tests of the RESP codec (src/server/resp.c): request
 * parsing (multibulk, inline, every protocol error, limits, any split of the
 * input), a random-input fuzz loop, and the exact bytes of every reply. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/resp.h"

/* Deterministic pseudo-random numbers (xorshift64*), state passed in. */
static uint64_t rnd_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * UINT64_C(2685821657736338717);
}

static size_t rnd_below(uint64_t *s, size_t n)
{
	assert_true(n > 0);
	return (size_t)(rnd_next(s) % n);
}

/* ---- helpers ------------------------------------------------------------- */

/* A growable byte string, for wire input and for parsed output. */
typedef struct bytes {
	char *d;
	size_t len;
	size_t cap;
} bytes;

static void bytes_add(bytes *b, const void *p, size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->len + n) cap *= 2;
		b->d = realloc(b->d, cap);
		assert_non_null(b->d);
		b->cap = cap;
	}
	if (n) memcpy(b->d + b->len, p, n);
	b->len += n;
}

static void bytes_str(bytes *b, const char *s)
{
	bytes_add(b, s, strlen(s));
}

/* A command as "argc|len:bytes|len:bytes|...\n", to compare streams. */
static void bytes_cmd(bytes *b, const resp_cmd *cmd)
{
	char num[32];
	snprintf(num, sizeof(num), "%zu", cmd->argc);
	bytes_str(b, num);
	for (size_t i = 0; i < cmd->argc; i++) {
		/* Every argument is NUL-terminated in place. */
		assert_int_equal(cmd->argv[i][cmd->lens[i]], '\0');
		snprintf(num, sizeof(num), "|%zu:", cmd->lens[i]);
		bytes_str(b, num);
		bytes_add(b, cmd->argv[i], cmd->lens[i]);
	}
	bytes_str(b, "\n");
}

static resp_parser *parser_with(size_t bulk_max, size_t args_max,
                                size_t inline_max, size_t request_max)
{
	resp_limits lim = {bulk_max, args_max, inline_max, request_max};
	resp_parser *p = resp_parser_create(&lim);
	assert_non_null(p);
	return p;
}

/* Take every command now parseable into out; returns the last status. */
static int drain(resp_parser *p, bytes *out)
{
	resp_cmd cmd;
	int rc;
	while ((rc = resp_parser_next(p, &cmd)) == RESP_OK) bytes_cmd(out, &cmd);
	return rc;
}

/* Feed `in` in chunks of the sizes `step` returns, draining after each. */
static int feed_split(resp_parser *p, const char *in, size_t n, bytes *out,
                      uint64_t *seed, size_t chunk_max)
{
	size_t off = 0;
	int rc = RESP_AGAIN;
	while (off < n) {
		size_t k = chunk_max == 1 ? 1 : 1 + rnd_below(seed, chunk_max);
		if (k > n - off) k = n - off;
		size_t avail;
		char *dst = resp_parser_space(p, k, &avail);
		assert_non_null(dst);
		assert_true(avail >= k);
		memcpy(dst, in + off, k);
		resp_parser_commit(p, k);
		off += k;
		rc = drain(p, out);
		if (rc != RESP_AGAIN) break;
	}
	return rc;
}

/* Parse `in` whole and one byte at a time: both must end in RESP_ERR with
 * `msg`, and stay there (errors are sticky). */
static void expect_error(const resp_limits *lim, const char *in, size_t n,
                         const char *msg)
{
	for (int bytewise = 0; bytewise < 2; bytewise++) {
		resp_parser *p = resp_parser_create(lim);
		bytes out = {0};
		uint64_t seed = 1;
		assert_non_null(p);
		int rc = feed_split(p, in, n, &out, &seed, bytewise ? 1 : n);
		assert_int_equal(rc, RESP_ERR);
		assert_string_equal(resp_parser_error(p), msg);
		resp_cmd cmd;
		assert_int_equal(resp_parser_feed(p, "*1\r\n$4\r\nPING\r\n", 14),
		                 RESP_OK);
		assert_int_equal(resp_parser_next(p, &cmd), RESP_ERR);
		assert_string_equal(resp_parser_error(p), msg);
		free(out.d);
		resp_parser_free(p);
	}
}

static void expect_error_str(const resp_limits *lim, const char *in,
                             const char *msg)
{
	expect_error(lim, in, strlen(in), msg);
}

/* Parse `in` (whole) and compare the commands with `want`. */
static void expect_cmds(const resp_limits *lim, const char *in, size_t n,
                        const char *want)
{
	resp_parser *p = resp_parser_create(lim);
	bytes out = {0};
	assert_non_null(p);
	assert_int_equal(resp_parser_feed(p, in, n), RESP_OK);
	assert_int_equal(drain(p, &out), RESP_AGAIN);
	bytes_add(&out, "", 1);
	assert_string_equal(out.d, want);
	assert_int_equal(resp_parser_pending(p), 0);
	free(out.d);
	resp_parser_free(p);
}

/* ---- parser: well-formed input ------------------------------------------ */

static void test_multibulk_parse(void **state)
{
	(void)state;
	resp_parser *p = resp_parser_create(NULL);
	resp_cmd cmd;
	assert_non_null(p);
	assert_string_equal(resp_parser_error(p), "");
	assert_int_equal(resp_parser_next(p, &cmd), RESP_AGAIN);
	const char *in = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\n10\r\n";
	assert_int_equal(resp_parser_feed(p, in, strlen(in)), RESP_OK);
	assert_int_equal(resp_parser_next(p, &cmd), RESP_OK);
	assert_int_equal(cmd.argc, 3);
	assert_string_equal(cmd.argv[0], "SET");
	assert_string_equal(cmd.argv[1], "k");
	assert_string_equal(cmd.argv[2], "10");
	assert_int_equal(cmd.lens[0], 3);
	assert_int_equal(cmd.lens[1], 1);
	assert_int_equal(cmd.lens[2], 2);
	assert_int_equal(resp_parser_next(p, &cmd), RESP_AGAIN);
	assert_int_equal(resp_parser_pending(p), 0);
	resp_parser_free(p);
	resp_parser_free(NULL);
}

static void test_multibulk_empty_argument(void **state)
{
	(void)state;
	const char in[] = "*2\r\n$3\r\nGET\r\n$0\r\n\r\n";
	expect_cmds(NULL, in, sizeof(in) - 1, "2|3:GET|0:\n");
}

static void test_pending_counts_unparsed_bytes(void **state)
{
	(void)state;
	resp_parser *p = resp_parser_create(NULL);
	resp_cmd cmd;
	assert_non_null(p);
	assert_int_equal(resp_parser_feed(p, "*1\r\n$4\r\nPI", 10), RESP_OK);
	assert_int_equal(resp_parser_next(p, &cmd), RESP_AGAIN);
	assert_int_equal(resp_parser_pending(p), 10);
	assert_int_equal(resp_parser_feed(p, "NG\r\n", 4), RESP_OK);
	assert_int_equal(resp_parser_next(p, &cmd), RESP_OK);
	assert_string_equal(cmd.argv[0], "PING");
	assert_int_equal(resp_parser_pending(p), 0);
	resp_parser_free(p);
}

static void test_arguments_valid_until_space(void **state)
{
	(void)state;
	resp_parser *p = resp_parser_create(NULL);
	resp_cmd cmd;
	assert_non_null(p);
	const char *in = "*2\r\n$3\r\nGET\r\n$1\r\na\r\nSET b 1\r\n";
	assert_int_equal(resp_parser_feed(p, in, strlen(in)), RESP_OK);
	assert_int_equal(resp_parser_next(p, &cmd), RESP_OK);
	char *first = cmd.argv[0], *second = cmd.argv[1];
	assert_int_equal(resp_parser_next(p, &cmd), RESP_OK);
	assert_int_equal(cmd.argc, 3);
	assert_string_equal(cmd.argv[0], "SET");
	/* The earlier command's bytes are still there. */
	assert_string_equal(first, "GET");
	assert_string_equal(second, "a");
	resp_parser_free(p);
}

/* A random pipeline of n commands: multibulk with binary arguments, inline
 * with quotes and escapes, empty lines and empty multibulks. `want` gets
 * the commands as bytes_cmd() writes them. */
static void make_pipeline(uint64_t *seed, size_t n, bytes *wire, bytes *want)
{
	static const char bin[] = "ab\r\n\0\x01\xff$*\"' ";
	char num[32];
	for (size_t c = 0; c < n; c++) {
		size_t kind = rnd_below(seed, 10);
		if (kind == 0) {
			bytes_str(wire, rnd_below(seed, 2) ? "\r\n" : "*0\r\n");
			continue;
		}
		size_t argc = 1 + rnd_below(seed, 5);
		snprintf(num, sizeof(num), "%zu", argc);
		bytes_str(want, num);
		if (kind < 7) {
			snprintf(num, sizeof(num), "*%zu\r\n", argc);
			bytes_str(wire, num);
		}
		for (size_t a = 0; a < argc; a++) {
			char arg[64];
			size_t len = rnd_below(seed, 40);
			if (kind < 7) {
				for (size_t i = 0; i < len; i++) {
					arg[i] = bin[rnd_below(seed, sizeof(bin) - 1)];
				}
				snprintf(num, sizeof(num), "$%zu\r\n", len);
				bytes_str(wire, num);
				bytes_add(wire, arg, len);
				bytes_str(wire, "\r\n");
			} else {
				len = 1 + len % 12;
				for (size_t i = 0; i < len; i++) {
					arg[i] = (char)('a' + rnd_below(seed, 26));
				}
				if (kind == 9) arg[len / 2] = ' ';
				bytes_str(wire, a ? " " : "");
				bytes_str(wire, kind == 9 ? "\"" : "");
				bytes_add(wire, arg, len);
				bytes_str(wire, kind == 9 ? "\"" : "");
			}
			snprintf(num, sizeof(num), "|%zu:", len);
			bytes_str(want, num);
			bytes_add(want, arg, len);
		}
		if (kind >= 7) bytes_str(wire, rnd_below(seed, 2) ? "\r\n" : "\n");
		bytes_str(want, "\n");
	}
}

/* resp_parser_trim() between commands gives back a grown buffer and
 * argument table, and parsing goes on; with a command half read it
 * keeps everything. (ASan catches a use of what it freed.) */
static void test_trim_between_commands_then_parse_on(void **state)
{
	(void)state;
	resp_parser *p = resp_parser_create(NULL);
	resp_cmd cmd;
	char head[32];
	assert_non_null(p);
	int n = snprintf(head, sizeof head, "*%d\r\n", 2001);
	assert_int_equal(resp_parser_feed(p, head, (size_t)n), RESP_OK);
	for (int i = 0; i < 2001; i++)
		assert_int_equal(resp_parser_feed(p, "$1\r\nk\r\n", 7), RESP_OK);
	assert_int_equal(resp_parser_next(p, &cmd), RESP_OK);
	assert_int_equal(cmd.argc, 2001);
	resp_parser_trim(p);
	size_t big = 600000;
	char *arg = malloc(big);
	assert_non_null(arg);
	memset(arg, 'x', big);
	n = snprintf(head, sizeof head, "*2\r\n$4\r\nECHO\r\n$%zu\r\n", big);
	assert_int_equal(resp_parser_feed(p, head, (size_t)n), RESP_OK);
	assert_int_equal(resp_parser_feed(p, arg, big), RESP_OK);
	assert_int_equal(resp_parser_feed(p, "\r\n", 2), RESP_OK);
	assert_int_equal(resp_parser_next(p, &cmd), RESP_OK);
	assert_int_equal(cmd.argc, 2);
	assert_int_equal(cmd.lens[1], big);
	assert_int_equal(resp_parser_next(p, &cmd), RESP_AGAIN);
	resp_parser_trim(p);
	assert_int_equal(resp_parser_feed(p, "*1\r\n$4\r\nPING\r\n", 14),
	                 RESP_OK);
	assert_int_equal(resp_parser_next(p, &cmd), RESP_OK);
	assert_int_equal(cmd.argc, 1);
	assert_string_equal(cmd.argv[0], "PING");
	/* Half a command buffered: trim keeps it. */
	assert_int_equal(resp_parser_feed(p, head, (size_t)n), RESP_OK);
	assert_int_equal(resp_parser_feed(p, arg, big / 2), RESP_OK);
	assert_int_equal(resp_parser_next(p, &cmd), RESP_AGAIN);
	resp_parser_trim(p);
	assert_int_equal(resp_parser_feed(p, arg, big - big / 2), RESP_OK);
	assert_int_equal(resp_parser_feed(p, "\r\n", 2), RESP_OK);
	assert_int_equal(resp_parser_next(p, &cmd), RESP_OK);
	assert_int_equal(cmd.argc, 2);
	assert_string_equal(cmd.argv[0], "ECHO");
	assert_int_equal(cmd.lens[1], big);
	assert_int_equal(cmd.argv[1][big - 1], 'x');
	free(arg);
	resp_parser_free(p);
}

/* A client not authenticated: Redis's 10 arguments of 16 KiB. */
static void test_unauthenticated_caps(void **state)
{
	(void)state;
	resp_parser *p = resp_parser_create(NULL);
	resp_cmd cmd;
	const char *ten = "*10\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n"
	                  "$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n"
	                  "$1\r\na\r\n$1\r\na\r\n";
	assert_non_null(p);
	resp_parser_set_unauth(p, 1);
	assert_int_equal(resp_parser_feed(p, ten, strlen(ten)), RESP_OK);
	assert_int_equal(resp_parser_next(p, &cmd), RESP_OK);
	assert_int_equal(cmd.argc, 10);
	assert_int_equal(resp_parser_feed(p, "*11\r\n", 5), RESP_OK);
	assert_int_equal(resp_parser_next(p, &cmd), RESP_ERR);
	assert_string_equal(resp_parser_error(p),
	                    "Protocol error: unauthenticated multibulk length");
	resp_parser_free(p);

	p = resp_parser_create(NULL);
	assert_non_null(p);
	resp_parser_set_unauth(p, 1);
	assert_int_equal(resp_parser_feed(p, "*1\r\n$16385\r\n", 12), RESP_OK);
	assert_int_equal(resp_parser_next(p, &cmd), RESP_ERR);
	assert_string_equal(resp_parser_error(p),
	                    "Protocol error: unauthenticated bulk length");
	resp_parser_free(p);

	/* Authenticated (the default), the limits are the parser's own. */
	p = resp_parser_create(NULL);
	assert_non_null(p);
	resp_parser_set_unauth(p, 1);
	resp_parser_set_unauth(p, 0);
	assert_int_equal(resp_parser_feed(p, "*11\r\n", 5), RESP_OK);
	for (int i = 0; i < 11; i++)
		assert_int_equal(resp_parser_feed(p, "$1\r\na\r\n", 7), RESP_OK);
	assert_int_equal(resp_parser_next(p, &cmd), RESP_OK);
	assert_int_equal(cmd.argc, 11);
	resp_parser_free(p);
}

static void test_pipeline_any_split_same_commands(void **state)
{
	(void)state;
	uint64_t seed = 42;
	bytes wire = {0}, want = {0};
	make_pipeline(&seed, 1000, &wire, &want);
	/* chunk_max: all at once, one byte at a time, then random splits. */
	size_t chunk_max[] = {wire.len, 1, 2, 7, 64, 4096, 40000};
	for (size_t t = 0; t < sizeof(chunk_max) / sizeof(chunk_max[0]); t++) {
		resp_parser *p = resp_parser_create(NULL);
		bytes out = {0};
		assert_non_null(p);
		int rc = feed_split(p, wire.d, wire.len, &out, &seed, chunk_max[t]);
		assert_int_equal(rc, RESP_AGAIN);
		assert_int_equal(out.len, want.len);
		assert_memory_equal(out.d, want.d, want.len);
		assert_int_equal(resp_parser_pending(p), 0);
		free(out.d);
		resp_parser_free(p);
	}
	free(wire.d);
	free(want.d);
}

static void test_inline_quotes_and_escapes(void **state)
{
	(void)state;
	const char in[] =
	        "SET \"a b\" 'c\\'d' \"\\x41\\n\\\"\\\\\\q\" plain\r\n"
	        "\t  GET   k  \n"
	        "ab\"cd\" \"\" '' \"\\xZZ\\x4a\"\n"
	        "a\vb 'x\"y' \"it's\"\r\n";
	expect_cmds(NULL, in, sizeof(in) - 1,
	            "5|3:SET|3:a b|3:c'd|5:A\n\"\\q|5:plain\n"
	            "2|3:GET|1:k\n"
	            "4|4:abcd|0:|0:|4:xZZJ\n"
	            "3|3:a\vb|3:x\"y|4:it's\n");
}

static void test_inline_cr_kept_inside_line(void **state)
{
	(void)state;
	/* Only one '\r' before '\n' is the line end; another ends a token. */
	const char in[] = "a\rb\r\r\n";
	expect_cmds(NULL, in, sizeof(in) - 1, "2|1:a|1:b\n");
}

static void test_empty_multibulk_skipped(void **state)
{
	(void)state;
	/* Redis skips any count <= 0 (its "Negative multibulk length" test). */
	const char in[] = "*0\r\n*-1\r\n*-10\r\n*1\r\n$4\r\nPING\r\n*0\r\n";
	expect_cmds(NULL, in, sizeof(in) - 1, "1|4:PING\n");
}

static void test_empty_inline_line_skipped(void **state)
{
	(void)state;
	const char in[] = "\r\n\n   \r\n\t\nPING\r\n\r\n";
	expect_cmds(NULL, in, sizeof(in) - 1, "1|4:PING\n");
}

static void test_binary_safe_bulk_arguments(void **state)
{
	(void)state;
	const char in[] = "*2\r\n$7\r\na\0b\r\nc\0\r\n$2\r\n\r\n\r\n";
	resp_parser *p = resp_parser_create(NULL);
	resp_cmd cmd;
	assert_non_null(p);
	assert_int_equal(resp_parser_feed(p, in, sizeof(in) - 1), RESP_OK);
	assert_int_equal(resp_parser_next(p, &cmd), RESP_OK);
	assert_int_equal(cmd.argc, 2);
	assert_int_equal(cmd.lens[0], 7);
	assert_memory_equal(cmd.argv[0], "a\0b\r\nc\0", 8); /* and its NUL */
	assert_int_equal(cmd.lens[1], 2);
	assert_memory_equal(cmd.argv[1], "\r\n", 3);
	resp_parser_free(p);
}

/* ---- parser: errors ------------------------------------------------------ */

static void test_error_invalid_multibulk_length(void **state)
{
	(void)state;
	const char *msg = "Protocol error: invalid multibulk length";
	expect_error_str(NULL, "*abc\r\n", msg);
	expect_error_str(NULL, "*\r\n", msg);
	expect_error_str(NULL, "*+1\r\n", msg);
	expect_error_str(NULL, "*01\r\n", msg);
	expect_error_str(NULL, "*1 \r\n", msg);
	expect_error_str(NULL, "*-\r\n", msg);
	expect_error_str(NULL, "*2000000\r\n", msg); /* > args_max 1048576 */
	expect_error_str(NULL, "*99999999999999999999\r\n", msg);
	expect_error_str(NULL, "*-99999999999999999999\r\n", msg);
	/* Stricter than Redis: the byte after '\r' must be '\n'. */
	expect_error_str(NULL, "*1\rX", msg);
}

static void test_error_expected_dollar(void **state)
{
	(void)state;
	/* Redis's "Wrong multibulk payload header" test. */
	expect_error_str(NULL, "*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n",
	                 "Protocol error: expected '$', got 'f'");
	/* Nested arrays are not requests. */
	expect_error_str(NULL, "*1\r\n*1\r\n$1\r\na\r\n",
	                 "Protocol error: expected '$', got '*'");
	expect_error_str(NULL, "*1\r\n:1\r\n",
	                 "Protocol error: expected '$', got ':'");
	/* An empty line: the '\r' itself, shown as a space like Redis does. */
	expect_error_str(NULL, "*1\r\n\r\n",
	                 "Protocol error: expected '$', got ' '");
}

static void test_error_invalid_bulk_length(void **state)
{
	(void)state;
	const char *msg = "Protocol error: invalid bulk length";
	expect_error_str(NULL, "*1\r\n$-1\r\n", msg);
	expect_error_str(NULL, "*1\r\n$abc\r\n", msg);
	expect_error_str(NULL, "*1\r\n$\r\n", msg);
	expect_error_str(NULL, "*1\r\n$99999999999999999999\r\n", msg);
	expect_error_str(NULL, "*1\r\n$9223372036854775807\r\n", msg);
	expect_error_str(NULL, "*1\r\n$2000000\r\n", msg); /* > bulk_max 1 MiB */
	expect_error_str(NULL, "*1\r\n$1\rX", msg);
	resp_limits lim = {.bulk_max = 4};
	expect_error_str(&lim, "*1\r\n$5\r\n", msg);
	expect_cmds(&lim, "*1\r\n$4\r\nabcd\r\n", 14, "1|4:abcd\n");
}

static void test_error_bulk_not_followed_by_crlf(void **state)
{
	(void)state;
	const char *msg = "Protocol error: expected CRLF after bulk argument";
	expect_error_str(NULL, "*1\r\n$3\r\nfooXY", msg);
	expect_error_str(NULL, "*1\r\n$3\r\nfoo\rX", msg);
	expect_error_str(NULL, "*1\r\n$3\r\nfoo\n\r", msg);
}

/* n bytes: `head` then `fill` repeated. */
static char *make_long(const char *head, char fill, size_t n)
{
	char *s = malloc(n);
	assert_non_null(s);
	memset(s, fill, n);
	memcpy(s, head, strlen(head));
	return s;
}

static void test_error_too_big_count_strings(void **state)
{
	(void)state;
	char *s = make_long("*", '1', 70000);
	expect_error(NULL, s, 70000, "Protocol error: too big mbulk count string");
	free(s);
	s = make_long("*1\r\n$", '1', 70000);
	expect_error(NULL, s, 70000, "Protocol error: too big bulk count string");
	free(s);
	/* 64 KiB of line is still waited for. */
	resp_parser *p = resp_parser_create(NULL);
	resp_cmd cmd;
	s = make_long("*", '1', 65536);
	assert_non_null(p);
	assert_int_equal(resp_parser_feed(p, s, 65536), RESP_OK);
	assert_int_equal(resp_parser_next(p, &cmd), RESP_AGAIN);
	free(s);
	resp_parser_free(p);
}

static void test_error_too_big_inline_request(void **state)
{
	(void)state;
	const char *msg = "Protocol error: too big inline request";
	char *s = make_long("SET ", 'a', 70000);
	expect_error(NULL, s, 70000, msg);
	s[69999] = '\n'; /* a whole line, but too long */
	expect_error(NULL, s, 70000, msg);
	free(s);
	resp_limits lim = {.inline_max = 8};
	expect_error_str(&lim, "GET abcde\n", msg);
	expect_error_str(&lim, "GET abcdefgh", msg);
	expect_cmds(&lim, "GET abcd\nGET abc\r\n", 18,
	            "2|3:GET|4:abcd\n2|3:GET|3:abc\n");
}

static void test_error_unbalanced_quotes(void **state)
{
	(void)state;
	const char *msg = "Protocol error: unbalanced quotes in request";
	expect_error_str(NULL, "GET \"abc\r\n", msg);
	expect_error_str(NULL, "GET 'abc\n", msg);
	expect_error_str(NULL, "GET \"abc\"def\n", msg);
	expect_error_str(NULL, "GET 'a'b\n", msg);
	expect_error_str(NULL, "GET \"a\\\"\n", msg);
	expect_error_str(NULL, "GET \"a\\\n", msg);
}

static void test_error_args_max_exceeded(void **state)
{
	(void)state;
	resp_limits lim = {.args_max = 4};
	expect_error_str(&lim, "*5\r\n", "Protocol error: invalid multibulk length");
	expect_error_str(&lim, "a b c d e\n", "Protocol error: too many arguments");
	const char four[] = "*4\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n"
	                    "a b c d\n";
	expect_cmds(&lim, four, sizeof(four) - 1,
	            "4|1:a|1:b|1:c|1:d\n4|1:a|1:b|1:c|1:d\n");
}

static void test_many_arguments_grow_argv(void **state)
{
	(void)state;
	/* 5000 arguments: argv grows past its first allocation. */
	bytes wire = {0}, want = {0};
	bytes_str(&wire, "*5000\r\n");
	bytes_str(&want, "5000");
	for (int i = 0; i < 5000; i++) {
		char arg[16], line[48];
		int n = snprintf(arg, sizeof(arg), "%d", i);
		snprintf(line, sizeof(line), "$%d\r\n%s\r\n", n, arg);
		bytes_str(&wire, line);
		snprintf(line, sizeof(line), "|%d:%s", n, arg);
		bytes_str(&want, line);
	}
	bytes_add(&want, "\n", 2); /* and a NUL, to compare as a string */
	expect_cmds(NULL, wire.d, wire.len, want.d);
	free(wire.d);
	free(want.d);
}

static void test_error_too_big_request(void **state)
{
	(void)state;
	const char *msg = "Protocol error: too big request";
	resp_limits lim = {.request_max = 64};
	/* 4 + 5 + 53 + 2 = 64 bytes: fits exactly. */
	char *ok = make_long("*1\r\n$53\r\n", 'x', 64);
	memcpy(ok + 62, "\r\n", 2);
	resp_parser *p = resp_parser_create(&lim);
	resp_cmd cmd;
	assert_non_null(p);
	assert_int_equal(resp_parser_feed(p, ok, 64), RESP_OK);
	assert_int_equal(resp_parser_next(p, &cmd), RESP_OK);
	assert_int_equal(cmd.lens[0], 53);
	resp_parser_free(p);
	free(ok);
	/* One byte more is refused as soon as it is declared. */
	expect_error_str(&lim, "*1\r\n$54\r\n", msg);
	expect_error_str(&lim,
	                 "*2\r\n$30\r\n012345678901234567890123456789\r\n$30\r\n",
	                 msg);
	char *s = make_long("SET ", 'a', 100);
	expect_error(&lim, s, 100, msg);
	s[99] = '\n';
	expect_error(&lim, s, 100, msg);
	free(s);
	/* The limit is per command: a pipeline may be longer. */
	bytes wire = {0}, want = {0};
	for (int i = 0; i < 20; i++) {
		bytes_str(&wire, "*2\r\n$3\r\nGET\r\n$1\r\nk\r\nGET k\n");
		bytes_str(&want, "2|3:GET|1:k\n2|3:GET|1:k\n");
	}
	bytes_add(&want, "", 1);
	expect_cmds(&lim, wire.d, wire.len, want.d);
	free(wire.d);
	free(want.d);
}

/* As expect_error(), with all of `in` in one feed (expect_error's "whole"
 * pass splits it at random). */
static void expect_error_at_once(const resp_limits *lim, const char *in,
                                 size_t n, const char *msg)
{
	resp_parser *p = resp_parser_create(lim);
	bytes out = {0};
	assert_non_null(p);
	assert_int_equal(resp_parser_feed(p, in, n), RESP_OK);
	assert_int_equal(drain(p, &out), RESP_ERR);
	assert_string_equal(resp_parser_error(p), msg);
	free(out.d);
	resp_parser_free(p);
	expect_error(lim, in, n, msg);
}

/* Found by fuzz_resp: a line longer than request_max got "too big
 * request" when its bytes came in pieces but the line's own error (a bad
 * terminator, an over-long count line) when they came at once. The error
 * must not depend on how the bytes were split. */
static void test_error_too_big_request_whatever_the_split(void **state)
{
	(void)state;
	const char *msg = "Protocol error: too big request";
	resp_limits lim = {.request_max = 64};
	char *s = make_long("*2\r\n$", '1', 100);
	memcpy(s + 98, "\rX", 2);
	expect_error_at_once(&lim, s, 100, msg);
	free(s);
	lim.request_max = 4096;
	s = make_long("*1\r\n$", '1', 70000);
	expect_error_at_once(&lim, s, 70000, msg);
	free(s);
	s = make_long("*", '1', 70000);
	expect_error_at_once(&lim, s, 70000, msg);
	free(s);
}

static void test_huge_declared_bulk_not_allocated(void **state)
{
	(void)state;
	/* Limits that allow it: the declaration alone must not allocate. */
	resp_limits lim = {.bulk_max = (size_t)512 << 20,
	                   .request_max = (size_t)1 << 30};
	resp_parser *p = resp_parser_create(&lim);
	resp_cmd cmd;
	size_t avail;
	assert_non_null(p);
	const char *in = "*1\r\n$500000000\r\n";
	assert_int_equal(resp_parser_feed(p, in, strlen(in)), RESP_OK);
	assert_int_equal(resp_parser_next(p, &cmd), RESP_AGAIN);
	assert_non_null(resp_parser_space(p, 1, &avail));
	assert_true(avail < ((size_t)64 << 10));
	/* The buffer grows with the bytes that arrive, not with the claim. */
	for (int i = 0; i < 25; i++) {
		char *dst = resp_parser_space(p, 4096, &avail);
		assert_non_null(dst);
		memset(dst, 'x', 4096);
		resp_parser_commit(p, 4096);
		assert_int_equal(resp_parser_next(p, &cmd), RESP_AGAIN);
	}
	size_t pending = resp_parser_pending(p);
	assert_int_equal(pending, strlen(in) + 25 * 4096);
	assert_non_null(resp_parser_space(p, 1, &avail));
	assert_true(pending + avail <= 2 * (pending + 4096));
	resp_parser_free(p);
}

/* Random bytes and protocol fragments, fed in random chunks with random
 * small limits: the parser must never crash or read outside its input
 * (run under ASan), and every command it returns must be well formed. */
static int fuzz_one(uint64_t *seed, bytes *in, size_t *cmds)
{
	static const char *frag[] = {
		"*", "$", "\r\n", "\r", "\n", "*1\r\n", "*2\r\n", "*-1\r\n", "*0\r\n",
		"$3\r\nfoo\r\n", "$0\r\n\r\n", "$-1\r\n", "-", "0", "1", "9",
		"99999999999999999999", "\"", "'", "\\", "\\x4", "\\x41", " ", "\t",
		"GET k\n", "\0", "PING\r\n", "$1\r\n", "*3\r\n$3\r\nSET\r\n",
	};
	const size_t nfrag = sizeof(frag) / sizeof(frag[0]);
	in->len = 0;
	size_t parts = rnd_below(seed, 12);
	for (size_t i = 0; i < parts; i++) {
		if (rnd_below(seed, 4) == 0) {
			char c = (char)rnd_next(seed);
			bytes_add(in, &c, 1);
		} else {
			size_t f = rnd_below(seed, nfrag);
			/* "\0" is one byte long, not zero. */
			bytes_add(in, frag[f], frag[f][0] ? strlen(frag[f]) : 1);
		}
	}
	resp_parser *p = parser_with(rnd_below(seed, 2) ? 0 : rnd_below(seed, 16),
	                             rnd_below(seed, 2) ? 0 : rnd_below(seed, 6),
	                             rnd_below(seed, 2) ? 0 : rnd_below(seed, 32),
	                             rnd_below(seed, 2) ? 0 : rnd_below(seed, 64));
	bytes out = {0};
	int rc = feed_split(p, in->d, in->len, &out, seed, 1 + rnd_below(seed, 16));
	resp_cmd cmd;
	if (rc == RESP_ERR) {
		assert_true(resp_parser_error(p)[0] != '\0');
		assert_int_equal(resp_parser_next(p, &cmd), RESP_ERR);
	} else {
		assert_int_equal(rc, RESP_AGAIN);
		assert_string_equal(resp_parser_error(p), "");
		assert_true(resp_parser_pending(p) <= in->len);
	}
	for (size_t i = 0; i < out.len; i++) *cmds += out.d[i] == '\n';
	free(out.d);
	resp_parser_free(p);
	return rc;
}

static void test_fuzz_random_input_never_crashes(void **state)
{
	(void)state;
	uint64_t seed = 0x9e3779b97f4a7c15u;
	bytes in = {0};
	size_t cmds = 0, errors = 0;
	for (int i = 0; i < 200000; i++) {
		errors += fuzz_one(&seed, &in, &cmds) == RESP_ERR;
	}
	free(in.d);
	/* The mix reaches both outcomes often, or the loop tests little. */
	assert_true(cmds > 20000);
	assert_true(errors > 20000);
	print_message("fuzz: %zu commands, %zu errors\n", cmds, errors);
}

/* ---- reply builders ------------------------------------------------------ */

static void expect_bytes(const rbuf *b, const char *want, size_t n)
{
	assert_int_equal(b->len, n);
	assert_memory_equal(b->data, want, n);
	assert_int_equal(b->overflow, 0);
}

/* The replies whose encoding does not depend on the protocol version. */
static void append_common(rbuf *b)
{
	reply_status(b, "OK");
	reply_error(b, "ERR bad\r\nthing");
	reply_errorf(b, "ERR unknown command '%s'", "foo");
	reply_int(b, 42);
	reply_int(b, -7);
	reply_int(b, 0);
	reply_bulk(b, "foo", 3);
	reply_bulk(b, "a\0\r\n", 4);
	reply_bulk(b, "", 0);
	reply_cstr(b, "bar");
	reply_array(b, 3);
}

static const char common_bytes[] =
        "+OK\r\n-ERR bad  thing\r\n-ERR unknown command 'foo'\r\n:42\r\n"
        ":-7\r\n:0\r\n$3\r\nfoo\r\n$4\r\na\0\r\n\r\n$0\r\n\r\n$3\r\nbar\r\n"
        "*3\r\n";

static void test_reply_bytes_resp2(void **state)
{
	(void)state;
	rbuf b;
	rbuf_init(&b, 0, 2);
	append_common(&b);
	reply_nil(&b);
	reply_nil_array(&b);
	reply_map(&b, 2);
	reply_bool(&b, 1);
	reply_bool(&b, 0);
	reply_verbatim(&b, "hi", 2);
	const char want[] = "$-1\r\n*-1\r\n*4\r\n:1\r\n:0\r\n$2\r\nhi\r\n";
	bytes all = {0};
	bytes_add(&all, common_bytes, sizeof(common_bytes) - 1);
	bytes_add(&all, want, sizeof(want) - 1);
	expect_bytes(&b, all.d, all.len);
	free(all.d);
	rbuf_free(&b);
	rbuf_free(&b); /* twice is fine */
}

static void test_reply_bytes_resp3(void **state)
{
	(void)state;
	rbuf b;
	rbuf_init(&b, 0, 3);
	append_common(&b);
	reply_nil(&b);
	reply_nil_array(&b);
	reply_map(&b, 2);
	reply_bool(&b, 1);
	reply_bool(&b, 0);
	reply_verbatim(&b, "hi", 2);
	const char want[] = "_\r\n_\r\n%2\r\n#t\r\n#f\r\n=6\r\ntxt:hi\r\n";
	bytes all = {0};
	bytes_add(&all, common_bytes, sizeof(common_bytes) - 1);
	bytes_add(&all, want, sizeof(want) - 1);
	expect_bytes(&b, all.d, all.len);
	free(all.d);
	rbuf_free(&b);
}

static void test_reply_int_extremes(void **state)
{
	(void)state;
	rbuf b;
	rbuf_init(&b, 0, 2);
	reply_int(&b, INT64_MIN);
	reply_int(&b, INT64_MAX);
	reply_int(&b, -1);
	reply_int(&b, 10);
	const char want[] = ":-9223372036854775808\r\n:9223372036854775807\r\n"
	                    ":-1\r\n:10\r\n";
	expect_bytes(&b, want, sizeof(want) - 1);
	rbuf_free(&b);
}

static void test_reply_error_replaces_crlf(void **state)
{
	(void)state;
	rbuf b;
	rbuf_init(&b, 0, 2);
	reply_error(&b, "\r\nERR\n\r");
	reply_errorf(&b, "ERR %s", "a\r\nb");
	reply_status(&b, "O\nK");
	const char want[] = "-  ERR  \r\n-ERR a  b\r\n+O K\r\n";
	expect_bytes(&b, want, sizeof(want) - 1);
	rbuf_free(&b);
}

static void test_rbuf_overflow_bound(void **state)
{
	(void)state;
	rbuf b;
	rbuf_init(&b, 10, 2);
	rbuf_append(&b, "12345", 5);
	rbuf_append(&b, "12345", 5); /* exactly max: still fine */
	assert_int_equal(b.len, 10);
	assert_int_equal(b.overflow, 0);
	rbuf_append(&b, "x", 1);
	assert_int_equal(b.overflow, 1);
	assert_int_equal(b.len, 10);
	assert_memory_equal(b.data, "1234512345", 10);
	rbuf_consume(&b, 10);
	reply_bulk(&b, "abc", 3); /* overflow is sticky */
	assert_int_equal(b.len, 0);
	rbuf_free(&b);
	/* A reply that does not fit stops at the bound. */
	rbuf_init(&b, 16, 3);
	for (int i = 0; i < 100; i++) reply_int(&b, 123456789);
	assert_int_equal(b.overflow, 1);
	assert_true(b.len <= 16);
	assert_true(b.cap <= 16);
	rbuf_free(&b);
}

static void test_rbuf_consume_and_grow(void **state)
{
	(void)state;
	rbuf b;
	rbuf_init(&b, 0, 2);
	rbuf_append(&b, "abcdef", 6);
	rbuf_consume(&b, 2);
	expect_bytes(&b, "cdef", 4);
	rbuf_consume(&b, 4);
	assert_int_equal(b.len, 0);
	char big[4096];
	memset(big, 'z', sizeof(big));
	for (int i = 0; i < 256; i++) rbuf_append(&b, big, sizeof(big));
	assert_int_equal(b.len, 256 * sizeof(big));
	assert_int_equal(b.overflow, 0);
	/* Sent in part, it keeps its room; sent in full, a big one goes,
	 * and the buffer takes replies again. */
	rbuf_consume(&b, sizeof(big));
	assert_true(b.cap >= 255 * sizeof(big));
	rbuf_consume(&b, b.len);
	assert_int_equal(b.cap, 0);
	rbuf_append(&b, "+OK\r\n", 5);
	expect_bytes(&b, "+OK\r\n", 5);
	rbuf_consume(&b, 5);
	assert_true(b.cap > 0);
	rbuf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_multibulk_parse),
		cmocka_unit_test(test_multibulk_empty_argument),
		cmocka_unit_test(test_pending_counts_unparsed_bytes),
		cmocka_unit_test(test_arguments_valid_until_space),
		cmocka_unit_test(test_trim_between_commands_then_parse_on),
		cmocka_unit_test(test_unauthenticated_caps),
		cmocka_unit_test(test_pipeline_any_split_same_commands),
		cmocka_unit_test(test_inline_quotes_and_escapes),
		cmocka_unit_test(test_inline_cr_kept_inside_line),
		cmocka_unit_test(test_empty_multibulk_skipped),
		cmocka_unit_test(test_empty_inline_line_skipped),
		cmocka_unit_test(test_binary_safe_bulk_arguments),
		cmocka_unit_test(test_error_invalid_multibulk_length),
		cmocka_unit_test(test_error_expected_dollar),
		cmocka_unit_test(test_error_invalid_bulk_length),
		cmocka_unit_test(test_error_bulk_not_followed_by_crlf),
		cmocka_unit_test(test_error_too_big_count_strings),
		cmocka_unit_test(test_error_too_big_inline_request),
		cmocka_unit_test(test_error_unbalanced_quotes),
		cmocka_unit_test(test_error_args_max_exceeded),
		cmocka_unit_test(test_many_arguments_grow_argv),
		cmocka_unit_test(test_error_too_big_request),
		cmocka_unit_test(test_error_too_big_request_whatever_the_split),
		cmocka_unit_test(test_huge_declared_bulk_not_allocated),
		cmocka_unit_test(test_fuzz_random_input_never_crashes),
		cmocka_unit_test(test_reply_bytes_resp2),
		cmocka_unit_test(test_reply_bytes_resp3),
		cmocka_unit_test(test_reply_int_extremes),
		cmocka_unit_test(test_reply_error_replaces_crlf),
		cmocka_unit_test(test_rbuf_overflow_bound),
		cmocka_unit_test(test_rbuf_consume_and_grow),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
