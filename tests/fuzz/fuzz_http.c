/* fuzz_http.c: libFuzzer harness of tallyd's HTTP side: the request reader
 * (server/http.c) and the JSON API (server/http_api.c) answering against a
 * real engine opened on a temporary folder. The input is a byte stream of
 * one connection. Properties: no crash or leak; the same requests and the
 * same error come out whether the bytes arrive one at a time, in chunks of
 * input-seeded sizes, or at once (with the server's limits and with tiny
 * ones); every request gets a well-formed response, never a 500 or 503,
 * JSON where it says JSON, with an "error" on every 4xx. */
#define _XOPEN_SOURCE 700 /* nftw, FTW_DEPTH, FTW_PHYS */
#include <ftw.h>
#include <string.h>

#include <jansson.h>

#include "fuzz.h"
#include "server/http.h"
#include "tally.h"

/* Requests of one input answered by the API: each may write to the
 * engine, so the count is bounded to keep executions fast. */
#define FUZZ_HTTP_CALLS_MAX 16

static const http_limits tiny_limits = { .header_max = 96, .body_max = 48 };

static char data_dir[64];
static tally *engine;
static http_api api_open;   /* no password */
static http_api api_locked; /* Bearer s3cret */

/* ---- the engine ---------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *sb, int flag,
                    struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void engine_close(void)
{
	tally_closep(&engine);
	if (data_dir[0] != '\0')
		(void)nftw(data_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static char *metrics_text(void *arg, size_t *len)
{
	static const char text[] = "tally_fuzz 1\n";
	(void)arg;
	char *s = malloc(sizeof text);
	if (s != NULL) {
		memcpy(s, text, sizeof text);
		*len = sizeof text - 1;
	}
	return s;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	const char *tmp = getenv("TMPDIR");
	int n = snprintf(data_dir, sizeof data_dir, "%s/tally-fuzz-http.XXXXXX",
	                 tmp != NULL && strlen(tmp) < 32 ? tmp : "/tmp");
	FUZZ_CHECK(n > 0 && (size_t)n < sizeof data_dir);
	FUZZ_CHECK(mkdtemp(data_dir) != NULL);
	/* Async: an acknowledged write does not wait for an fsync, so the
	 * fuzzer runs at thousands of requests a second. */
	tally_options o = { .durability = TALLY_DURABILITY_ASYNC,
	                    .flush_interval_ms = 1000, .block_cache_mb = 8 };
	FUZZ_CHECK(tally_open(data_dir, &o, &engine) == TALLY_OK);
	FUZZ_CHECK(atexit(engine_close) == 0);
	api_open = (http_api){ .t = engine, .metrics = metrics_text };
	api_locked = api_open;
	api_locked.password = "s3cret";
	return 0;
}

/* ---- answering ----------------------------------------------------------- */

/* Answer rq and check the response and its framing. */
static void answer(const http_request *rq)
{
	http_response rs;
	const http_api *api = rq->authorization ? &api_locked : &api_open;

	http_api_handle(api, rq, &rs);
	FUZZ_CHECK(rs.status >= 200 && rs.status < 600);
	/* Bad input is the client's fault (4xx); 500 and 503 would mean a
	 * bug or a failing store, neither of which fuzzing should cause. */
	FUZZ_CHECK(rs.status != 500 && rs.status != 503);
	FUZZ_CHECK(rs.content_type != NULL);
	FUZZ_CHECK(rs.body != NULL || rs.body_len == 0);
	if (strcmp(rs.content_type, "application/json") == 0) {
		json_error_t e;
		json_t *doc = json_loadb(rs.body, rs.body_len, 0, &e);
		FUZZ_CHECK(doc != NULL);
		if (rs.status >= 400)
			FUZZ_CHECK(json_is_string(json_object_get(doc, "error")));
		json_decref(doc);
	}
	size_t len = 0;
	char *wire = http_response_format(&rs, rq->keep_alive, &len);
	FUZZ_CHECK(wire != NULL);
	FUZZ_CHECK(strncmp(wire, "HTTP/1.1 ", 9) == 0);
	/* A HEAD's answer ends with its headers (its Content-Length says what
	 * the GET's body would be); any other, with its body. */
	FUZZ_CHECK(rs.head == (strcmp(rq->method, "HEAD") == 0));
	if (rs.head)
		FUZZ_CHECK(len >= 4 && memcmp(wire + len - 4, "\r\n\r\n", 4) == 0);
	else
		FUZZ_CHECK(len >= rs.body_len &&
		           memcmp(wire + len - rs.body_len, rs.body,
		                  rs.body_len) == 0);
	free(wire);
	http_response_free(&rs);
}

/* ---- reading ------------------------------------------------------------- */

/* What a connection's bytes produced. */
typedef struct outcome {
	uint64_t digest;
	size_t nreq;
	int status;          /* the reader's error status, 0 if none */
	const char *msg;
} outcome;

static void digest_add(uint64_t *h, const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++) {
		*h ^= b[i];
		*h *= UINT64_C(1099511628211);
	}
}

static void digest_str(uint64_t *h, const char *s)
{
	digest_add(h, s, strlen(s) + 1);
}

static void record_request(outcome *o, const http_request *rq)
{
	FUZZ_CHECK(rq->method != NULL && rq->path != NULL);
	FUZZ_CHECK(rq->query != NULL && rq->body != NULL);
	FUZZ_CHECK(rq->body[rq->body_len] == '\0');
	o->nreq++;
	digest_str(&o->digest, rq->method);
	digest_str(&o->digest, rq->path);
	digest_str(&o->digest, rq->query);
	digest_add(&o->digest, &rq->body_len, sizeof rq->body_len);
	digest_add(&o->digest, rq->body, rq->body_len);
	digest_str(&o->digest, rq->authorization ? rq->authorization : "-");
	digest_add(&o->digest, &rq->keep_alive, sizeof rq->keep_alive);
}

/* Take every request now whole; 1 once the reader failed. */
static int drain(http_conn *c, int call, outcome *o)
{
	http_request rq;
	int rc;
	while ((rc = http_conn_next(c, &rq)) == 1) {
		record_request(o, &rq);
		if (call && o->nreq <= FUZZ_HTTP_CALLS_MAX)
			answer(&rq);
	}
	FUZZ_CHECK(rc == 0 || rc == -1);
	return rc == -1;
}

/* Feed d[0, n) in chunks: size 0 means all at once, 1 a byte at a time,
 * anything else chunks seeded by it. */
static void read_conn(const uint8_t *d, size_t n, const http_limits *lim,
                      uint64_t seed, int call, outcome *o)
{
	memset(o, 0, sizeof *o);
	o->digest = UINT64_C(14695981039346656037);
	http_conn *c = http_conn_create(lim);
	FUZZ_CHECK(c != NULL);
	int failed = 0;
	for (size_t off = 0; off < n && !failed;) {
		size_t k = seed == 0 ? n : seed == 1 ? 1 : fuzz_chunk(&seed);
		if (k > n - off)
			k = n - off;
		failed = http_conn_feed(c, (const char *)d + off, k) != 0;
		off += k;
		if (!failed)
			failed = drain(c, call, o);
	}
	if (failed) {
		o->status = http_conn_error(c, &o->msg);
		/* 501: a transfer coding other than chunked; 505: an HTTP
		 * version other than 1.x. */
		FUZZ_CHECK(o->status == 400 || o->status == 413 ||
		           o->status == 414 || o->status == 431 ||
		           o->status == 501 || o->status == 505);
		FUZZ_CHECK(o->msg != NULL && o->msg[0] != '\0');
		FUZZ_CHECK(http_conn_next(c, &(http_request){0}) == -1);
	}
	http_conn_free(c);
}

/* The backlog bound counts bytes fed and not yet parsed, so it depends on
 * how the bytes were fed: a run that hit it is not compared. */
static int backlog_hit(const outcome *o)
{
	return o->status == 413 && strcmp(o->msg, "too many pipelined bytes") == 0;
}

static void same(const outcome *ref, const outcome *o, const char *how)
{
	if (backlog_hit(o))
		return;
	/* Messages are not compared: where a stream has two faults,
	 * http-parser may meet either first depending on where a chunk
	 * ends (it calls back per chunk), and both are refused with 400. */
	if (ref->nreq == o->nreq && ref->digest == o->digest &&
	    ref->status == o->status)
		return;
	fprintf(stderr, "byte by byte: %zu requests, %d '%s'; %s: %zu "
	        "requests, %d '%s'\n", ref->nreq, ref->status,
	        ref->msg ? ref->msg : "", how, o->nreq, o->status,
	        o->msg ? o->msg : "");
	FUZZ_FAIL("the split of the input changed the requests");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	outcome ref, o;
	uint64_t seed = fuzz_hash(data, size) | 2; /* neither 0 nor 1 */

	read_conn(data, size, NULL, 1, 0, &ref);
	read_conn(data, size, NULL, 0, 1, &o);
	same(&ref, &o, "at once");
	read_conn(data, size, NULL, seed, 0, &o);
	same(&ref, &o, "in chunks");
	read_conn(data, size, &tiny_limits, 1, 0, &ref);
	read_conn(data, size, &tiny_limits, seed, 0, &o);
	same(&ref, &o, "in chunks, tiny limits");
	return 0;
}
