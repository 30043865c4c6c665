/* fuzz_resp.c: libFuzzer harness of tallyd's RESP request parser
 * (server/resp.c). The input is fed as one block and again in chunks of
 * input-seeded sizes through space()/commit(), as the network layer does,
 * with the server's default limits and with tiny ones. Properties: no
 * crash or out-of-bounds read (ASan poisons the unreceived buffer tail);
 * every split yields the same commands and the same final state; each
 * command is well formed; and a command re-encoded with the reply builders
 * (an array of bulks, which is a RESP request) parses back to itself. */
#include <string.h>

#include "fuzz.h"
#include "server/resp.h"

/* tallyd's defaults (config.c: --max-bulk-bytes, --max-args,
 * --max-request-bytes; the inline line limit is the parser's). */
static const resp_limits server_limits = {
	.bulk_max = (size_t)1 << 20,
	.args_max = (size_t)1 << 20,
	.inline_max = 0,
	.request_max = (size_t)64 << 20,
};
/* Tiny limits, so that inputs of a few hundred bytes reach every limit. */
static const resp_limits tiny_limits = {
	.bulk_max = 32,
	.args_max = 8,
	.inline_max = 64,
	.request_max = 256,
};

/* What a parse produced: a digest of the commands and the final state. */
typedef struct outcome {
	uint64_t digest;
	size_t ncmd;
	int last;            /* RESP_AGAIN or RESP_ERR */
	char err[128];
} outcome;

static void digest_add(uint64_t *h, const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++) {
		*h ^= b[i];
		*h *= UINT64_C(1099511628211);
	}
}

/* A command is well formed: 1..args_max arguments, each NUL-terminated,
 * none longer than what a limit allows. */
static void check_cmd(const resp_cmd *cmd, const resp_limits *lim)
{
	size_t inl = lim->inline_max ? lim->inline_max : (size_t)64 << 10;
	size_t most = lim->bulk_max > inl ? lim->bulk_max : inl;
	FUZZ_CHECK(cmd->argc >= 1 && cmd->argc <= lim->args_max);
	for (size_t i = 0; i < cmd->argc; i++) {
		FUZZ_CHECK(cmd->lens[i] <= most);
		FUZZ_CHECK(cmd->argv[i][cmd->lens[i]] == '\0');
	}
}

/* Encode cmd as a client would (reply_array + reply_bulk make exactly a
 * RESP request) and parse it back with the server's limits. */
static void round_trip(const resp_cmd *cmd)
{
	rbuf b;
	resp_cmd back;

	rbuf_init(&b, 0, 2);
	reply_array(&b, cmd->argc);
	for (size_t i = 0; i < cmd->argc; i++)
		reply_bulk(&b, cmd->argv[i], cmd->lens[i]);
	FUZZ_CHECK(!b.overflow);
	resp_parser *p = resp_parser_create(&server_limits);
	FUZZ_CHECK(p != NULL);
	FUZZ_CHECK(resp_parser_feed(p, b.data, b.len) == RESP_OK);
	FUZZ_CHECK(resp_parser_next(p, &back) == RESP_OK);
	FUZZ_CHECK(back.argc == cmd->argc);
	for (size_t i = 0; i < cmd->argc; i++) {
		FUZZ_CHECK(back.lens[i] == cmd->lens[i]);
		FUZZ_CHECK(memcmp(back.argv[i], cmd->argv[i], cmd->lens[i]) == 0);
	}
	FUZZ_CHECK(resp_parser_next(p, &back) == RESP_AGAIN);
	FUZZ_CHECK(resp_parser_pending(p) == 0);
	resp_parser_free(p);
	rbuf_free(&b);
}

/* Take every command now available; 1 once the stream ended in error. */
static int drain(resp_parser *p, const resp_limits *lim, int check,
                 outcome *o)
{
	resp_cmd cmd;
	int rc;
	while ((rc = resp_parser_next(p, &cmd)) == RESP_OK) {
		check_cmd(&cmd, lim);
		if (check)
			round_trip(&cmd);
		o->ncmd++;
		digest_add(&o->digest, &cmd.argc, sizeof cmd.argc);
		for (size_t i = 0; i < cmd.argc; i++) {
			digest_add(&o->digest, &cmd.lens[i], sizeof cmd.lens[i]);
			digest_add(&o->digest, cmd.argv[i], cmd.lens[i]);
		}
	}
	FUZZ_CHECK(rc == RESP_AGAIN || rc == RESP_ERR);
	o->last = rc;
	if (rc == RESP_ERR) {
		const char *e = resp_parser_error(p);
		FUZZ_CHECK(e[0] != '\0');
		snprintf(o->err, sizeof o->err, "%s", e);
		/* Errors are sticky. */
		FUZZ_CHECK(resp_parser_next(p, &cmd) == RESP_ERR);
		return 1;
	}
	FUZZ_CHECK(resp_parser_error(p)[0] == '\0');
	return 0;
}

static void outcome_init(outcome *o)
{
	memset(o, 0, sizeof *o);
	o->digest = UINT64_C(14695981039346656037);
}

/* The whole input in one feed. */
static void parse_whole(const uint8_t *d, size_t n, const resp_limits *lim,
                        int check, outcome *o)
{
	outcome_init(o);
	resp_parser *p = resp_parser_create(lim);
	FUZZ_CHECK(p != NULL);
	FUZZ_CHECK(resp_parser_feed(p, (const char *)d, n) == RESP_OK);
	drain(p, lim, check, o);
	resp_parser_free(p);
}

/* The input in chunks, read into the parser's own buffer as the network
 * layer does, taking every command after each chunk and then trimming
 * the parser, which must change nothing of the parse. */
static void parse_chunked(const uint8_t *d, size_t n, const resp_limits *lim,
                          uint64_t seed, outcome *o)
{
	outcome_init(o);
	resp_parser *p = resp_parser_create(lim);
	FUZZ_CHECK(p != NULL);
	for (size_t off = 0; off < n;) {
		size_t k = fuzz_chunk(&seed), avail = 0;
		if (k > n - off)
			k = n - off;
		char *dst = resp_parser_space(p, k, &avail);
		FUZZ_CHECK(dst != NULL && avail >= k);
		memcpy(dst, d + off, k);
		resp_parser_commit(p, k);
		off += k;
		if (drain(p, lim, 0, o))
			break;
		resp_parser_trim(p);
	}
	if (n == 0)
		drain(p, lim, 0, o);
	resp_parser_free(p);
}

static void same(const outcome *a, const outcome *b)
{
	if (a->ncmd == b->ncmd && a->digest == b->digest &&
	    a->last == b->last && strcmp(a->err, b->err) == 0)
		return;
	fprintf(stderr, "whole: %zu commands, %s '%s'; chunked: %zu commands, "
	        "%s '%s'\n", a->ncmd, a->last == RESP_ERR ? "error" : "again",
	        a->err, b->ncmd, b->last == RESP_ERR ? "error" : "again",
	        b->err);
	FUZZ_FAIL("the split of the input changed the parse");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	outcome whole, chunked;
	uint64_t seed = fuzz_hash(data, size);

	parse_whole(data, size, &server_limits, 1, &whole);
	parse_chunked(data, size, &server_limits, seed, &chunked);
	same(&whole, &chunked);
	parse_whole(data, size, &tiny_limits, 0, &whole);
	parse_chunked(data, size, &tiny_limits, seed, &chunked);
	same(&whole, &chunked);
	return 0;
}
