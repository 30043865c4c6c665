/* test_http.c: tests of tallyd's HTTP side without sockets (server/http.h):
 * the request reader (framing, pipelining, limits, decoding) and every
 * route of the JSON API against a real engine in a temporary folder. */
#ifndef _XOPEN_SOURCE
#define _XOPEN_SOURCE 700 /* nftw, FTW_DEPTH, FTW_PHYS */
#endif

#include <ftw.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "server/http.h"
#include "tally.h"

#define CHECK_STR(got, want)                                                \
	do {                                                                \
		const char *g_ = (got);                                     \
		const char *w_ = (want);                                    \
		if (g_ == NULL || strcmp(g_, w_) != 0)                      \
			fail_msg("%s:%d: %s = \"%s\", want \"%s\"", __FILE__, \
			         __LINE__, #got, g_ ? g_ : "(null)", w_);     \
	} while (0)

/* ---- reader ------------------------------------------------------------- */

static http_conn *conn_fed(const http_limits *lim, const char *bytes)
{
	http_conn *c = http_conn_create(lim);
	assert_non_null(c);
	assert_int_equal(http_conn_feed(c, bytes, strlen(bytes)), 0);
	return c;
}

static void expect_reader_error(const http_limits *lim, const char *bytes,
                                int status)
{
	http_conn *c = http_conn_create(lim);
	http_request rq;
	const char *msg = NULL;
	assert_non_null(c);
	int fed = http_conn_feed(c, bytes, strlen(bytes));
	int next = http_conn_next(c, &rq);
	assert_true(fed == -1 || next == -1);
	assert_int_equal(next, -1);
	assert_int_equal(http_conn_error(c, &msg), status);
	assert_non_null(msg);
	/* Sticky: more bytes change nothing. */
	assert_int_equal(http_conn_feed(c, "GET / HTTP/1.1\r\n\r\n", 18), -1);
	assert_int_equal(http_conn_next(c, &rq), -1);
	http_conn_free(c);
}

static void test_reader_simple_get(void **state)
{
	(void)state;
	http_request rq;
	http_conn *c = conn_fed(NULL, "GET /v1/counters/a%20b%2Fc?x=1&y=%41 "
	                              "HTTP/1.1\r\nHost: h\r\n"
	                              "authorization: Bearer pw\r\n\r\n");
	assert_int_equal(http_conn_next(c, &rq), 1);
	CHECK_STR(rq.method, "GET");
	CHECK_STR(rq.path, "/v1/counters/a b/c");
	CHECK_STR(rq.query, "x=1&y=%41");
	assert_int_equal(rq.body_len, 0);
	CHECK_STR(rq.body, "");
	CHECK_STR(rq.authorization, "Bearer pw");
	assert_int_equal(rq.keep_alive, 1);
	assert_int_equal(http_conn_next(c, &rq), 0);
	http_conn_free(c);
}

static void test_reader_no_authorization_is_null(void **state)
{
	(void)state;
	http_request rq;
	http_conn *c = conn_fed(NULL, "GET /healthz HTTP/1.1\r\n\r\n");
	assert_int_equal(http_conn_next(c, &rq), 1);
	assert_null(rq.authorization);
	CHECK_STR(rq.query, "");
	http_conn_free(c);
}

static void test_reader_pipelined_two_requests(void **state)
{
	(void)state;
	http_request rq;
	http_conn *c = conn_fed(NULL, "GET /one HTTP/1.1\r\n\r\n"
	                              "POST /two HTTP/1.1\r\nContent-Length: 3\r\n"
	                              "\r\nabc");
	assert_int_equal(http_conn_next(c, &rq), 1);
	CHECK_STR(rq.path, "/one");
	assert_int_equal(rq.body_len, 0);
	assert_int_equal(http_conn_next(c, &rq), 1);
	CHECK_STR(rq.method, "POST");
	CHECK_STR(rq.path, "/two");
	CHECK_STR(rq.body, "abc");
	assert_int_equal(http_conn_next(c, &rq), 0);
	http_conn_free(c);
}

/* A request handed out stays intact while later bytes are fed. */
static void test_reader_request_survives_feed(void **state)
{
	(void)state;
	http_request rq;
	http_conn *c = conn_fed(NULL, "POST /a HTTP/1.1\r\nContent-Length: 2\r\n"
	                              "\r\nhi");
	assert_int_equal(http_conn_next(c, &rq), 1);
	const char *more = "GET /b HTTP/1.1\r\n\r\n";
	assert_int_equal(http_conn_feed(c, more, strlen(more)), 0);
	CHECK_STR(rq.path, "/a");
	CHECK_STR(rq.body, "hi");
	assert_int_equal(http_conn_next(c, &rq), 1);
	CHECK_STR(rq.path, "/b");
	http_conn_free(c);
}

static void test_reader_byte_by_byte(void **state)
{
	(void)state;
	const char *req = "POST /v1/events HTTP/1.1\r\nHost: x\r\n"
	                  "Content-Length: 11\r\n\r\n{\"a\":\"b c\"}"
	                  "GET /next HTTP/1.1\r\n\r\n";
	size_t first = strlen(req) - strlen("GET /next HTTP/1.1\r\n\r\n");
	http_conn *c = http_conn_create(NULL);
	http_request rq;
	int got = 0;
	for (size_t i = 0; i < strlen(req); i++) {
		assert_int_equal(http_conn_feed(c, req + i, 1), 0);
		int rc = http_conn_next(c, &rq);
		if (i + 1 < first) {
			assert_int_equal(rc, 0);
		} else if (i + 1 == first) {
			assert_int_equal(rc, 1);
			CHECK_STR(rq.body, "{\"a\":\"b c\"}");
			assert_int_equal(rq.body_len, 11);
			got++;
		} else if (rc == 1) {
			CHECK_STR(rq.path, "/next");
			got++;
		}
	}
	assert_int_equal(got, 2);
	http_conn_free(c);
}

static void test_reader_post_body(void **state)
{
	(void)state;
	http_request rq;
	http_conn *c = conn_fed(NULL, "POST /v1/counters/x/incr HTTP/1.1\r\n"
	                              "Content-Type: application/json\r\n"
	                              "Content-Length: 8\r\n\r\n{\"by\":5}");
	assert_int_equal(http_conn_next(c, &rq), 1);
	CHECK_STR(rq.method, "POST");
	CHECK_STR(rq.body, "{\"by\":5}");
	assert_int_equal(rq.body_len, 8);
	http_conn_free(c);
}

static void test_reader_chunked_body(void **state)
{
	(void)state;
	http_request rq;
	http_conn *c = conn_fed(NULL, "POST /p HTTP/1.1\r\n"
	                              "Transfer-Encoding: chunked\r\n\r\n"
	                              "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
	assert_int_equal(http_conn_next(c, &rq), 1);
	CHECK_STR(rq.body, "abcde");
	assert_int_equal(rq.body_len, 5);
	http_conn_free(c);
}

/* The reader's refusals of framing it does not take, each with its
 * status and a message that names the cause. */
static void expect_reader_msg(const char *bytes, int status, const char *want)
{
	http_conn *c = http_conn_create(NULL);
	http_request rq;
	const char *msg = NULL;

	assert_non_null(c);
	(void)http_conn_feed(c, bytes, strlen(bytes));
	assert_int_equal(http_conn_next(c, &rq), -1);
	assert_int_equal(http_conn_error(c, &msg), status);
	assert_non_null(msg);
	if (strstr(msg, want) == NULL)
		fail_msg("message '%s', want '%s' in it", msg, want);
	http_conn_free(c);
}

static void test_reader_framing_refused(void **state)
{
	(void)state;
	expect_reader_msg("POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
	                  "\r\n1FFFFFFFFFFFFFFFF\r\n", 400, "chunk size");
	expect_reader_msg("POST /p HTTP/1.1\r\nContent-Length: "
	                  "99999999999999999999\r\n\r\n", 400,
	                  "Content-Length");
	expect_reader_msg("POST /p HTTP/1.1\r\nTransfer-Encoding: gzip, "
	                  "chunked\r\n\r\n0\r\n\r\n", 501, "chunked");
	expect_reader_msg("POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
	                  "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	                  501, "chunked");
	expect_reader_msg("POST /p HTTP/1.0\r\nTransfer-Encoding: chunked\r\n"
	                  "\r\n0\r\n\r\n", 400, "HTTP/1.0");
	expect_reader_msg("GET / HTTP/2.0\r\n\r\n", 505, "HTTP/1.1");
}

/* 1 when the head is given and asks for 100 Continue. */
static int take_continue(http_conn *c)
{
	int want = 0;

	return http_conn_take_head(c, NULL, &want) && want;
}

/* "Expect: 100-continue" owes one interim answer while the body is
 * still to come; not when it is all here, not for HTTP/1.0, not for an
 * empty body or another expectation, and not twice. */
static void test_reader_expect_continue(void **state)
{
	(void)state;
	http_request rq;
	http_conn *c = conn_fed(NULL, "POST /p HTTP/1.1\r\n"
	                              "EXPECT:  100-Continue \r\n"
	                              "Content-Length: 3\r\n\r\n");
	assert_int_equal(http_conn_next(c, &rq), 0);
	assert_int_equal(take_continue(c), 1);
	assert_int_equal(take_continue(c), 0);
	assert_int_equal(http_conn_feed(c, "abc", 3), 0);
	assert_int_equal(http_conn_next(c, &rq), 1);
	CHECK_STR(rq.body, "abc");
	/* The next request asks too, chunked: owed again. */
	static const char chunked[] = "POST /p HTTP/1.1\r\nExpect: "
	                              "100-continue\r\nTransfer-Encoding: "
	                              "chunked\r\n\r\n";
	assert_int_equal(http_conn_feed(c, chunked, sizeof chunked - 1), 0);
	assert_int_equal(http_conn_next(c, &rq), 0);
	assert_int_equal(take_continue(c), 1);
	http_conn_free(c);

	/* The head comes with it, for the password check before the body. */
	http_request head;
	c = conn_fed(NULL, "PUT /v1/a%20b?x=1 HTTP/1.1\r\n"
	                   "Authorization: Bearer t0k \r\n"
	                   "Expect: 100-continue\r\nContent-Length: 3\r\n\r\n");
	assert_int_equal(http_conn_next(c, &rq), 0);
	assert_int_equal(http_conn_take_head(c, &head, NULL), 1);
	CHECK_STR(head.method, "PUT");
	CHECK_STR(head.path, "/v1/a b");
	CHECK_STR(head.query, "x=1");
	assert_non_null(head.authorization);
	assert_non_null(strstr(head.authorization, "Bearer t0k"));
	assert_null(head.body);
	http_conn_free(c);
	c = conn_fed(NULL, "POST /p HTTP/1.1\r\nExpect: 100-continue\r\n"
	                   "Content-Length: 3\r\n\r\n");
	assert_int_equal(http_conn_next(c, &rq), 0);
	assert_int_equal(http_conn_take_head(c, &head, NULL), 1);
	assert_null(head.authorization);
	http_conn_free(c);

	static const char *const none[] = {
		/* The body came with the headers. */
		"POST /p HTTP/1.1\r\nExpect: 100-continue\r\n"
		"Content-Length: 2\r\n\r\nab",
		"POST /p HTTP/1.0\r\nExpect: 100-continue\r\n"
		"Content-Length: 2\r\n\r\n",
		"POST /p HTTP/1.1\r\nExpect: 100-continue\r\n"
		"Content-Length: 0\r\n\r\n",
		"POST /p HTTP/1.1\r\nExpect: 100-continue-later\r\n"
		"Content-Length: 2\r\n\r\n",
		"POST /p HTTP/1.1\r\nX-Expect: 100-continue\r\n"
		"Content-Length: 2\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
		int want = -1;

		c = conn_fed(NULL, none[i]);
		(void)http_conn_next(c, &rq);
		(void)http_conn_take_head(c, NULL, &want);
		assert_int_equal(want, 0);
		http_conn_free(c);
	}
	/* A body declared too large is refused, not invited. */
	http_limits lim = {.header_max = 0, .body_max = 4};
	c = http_conn_create(&lim);
	assert_non_null(c);
	static const char big[] = "POST /p HTTP/1.1\r\nExpect: 100-continue\r\n"
	                          "Content-Length: 5\r\n\r\n";
	assert_int_equal(http_conn_feed(c, big, sizeof big - 1), -1);
	assert_int_equal(take_continue(c), 0);
	assert_int_equal(http_conn_error(c, NULL), 413);
	http_conn_free(c);
}

static void test_reader_header_too_large_431_uri_414(void **state)
{
	(void)state;
	http_limits lim = {.header_max = 64, .body_max = 0};
	char req[256];
	(void)snprintf(req, sizeof req, "GET / HTTP/1.1\r\nX-Long: %0100d\r\n\r\n",
	               0);
	expect_reader_error(&lim, req, 431);
	/* A header field that never ends is caught at the limit too... */
	expect_reader_error(&lim, "GET / HTTP/1.1\r\nX-Long: aaaaaaaaaaaaaaaaaaaa"
	                          "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 431);
	/* ... and a request line that does: 414 URI Too Long. */
	expect_reader_error(&lim, "GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	                          "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 414);
}

static void test_reader_header_at_limit_ok(void **state)
{
	(void)state;
	const char *req = "GET /x HTTP/1.1\r\nA: b\r\n\r\n";
	http_limits lim = {.header_max = strlen(req), .body_max = 0};
	http_request rq;
	http_conn *c = conn_fed(&lim, req);
	assert_int_equal(http_conn_next(c, &rq), 1);
	http_conn_free(c);
	/* One byte over, ending on that byte: refused, fed whole or one
	 * byte at a time. */
	lim.header_max--;
	expect_reader_error(&lim, req, 431);
	c = http_conn_create(&lim);
	assert_non_null(c);
	int rc = 0;
	for (size_t i = 0; req[i] != '\0' && rc == 0; i++)
		rc = http_conn_feed(c, req + i, 1);
	assert_int_equal(rc, -1);
	assert_int_equal(http_conn_error(c, NULL), 431);
	http_conn_free(c);
}

static void test_reader_body_too_large_413(void **state)
{
	(void)state;
	http_limits lim = {.header_max = 0, .body_max = 8};
	expect_reader_error(&lim, "POST / HTTP/1.1\r\nContent-Length: 9\r\n\r\n",
	                    413);
	expect_reader_error(&lim, "POST / HTTP/1.1\r\nTransfer-Encoding: "
	                          "chunked\r\n\r\n5\r\nabcde\r\n5\r\nfghij\r\n",
	                    413);
	http_request rq;
	http_conn *c = conn_fed(&lim, "POST / HTTP/1.1\r\nContent-Length: 8\r\n"
	                              "\r\n12345678");
	assert_int_equal(http_conn_next(c, &rq), 1);
	http_conn_free(c);
}

static void test_reader_garbage_400(void **state)
{
	(void)state;
	expect_reader_error(NULL, "HELLO WORLD\r\n\r\n", 400);
	expect_reader_error(NULL, "GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
	                    400);
	expect_reader_error(NULL, "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03", 400);
}

static void test_reader_bad_percent_escape_400(void **state)
{
	(void)state;
	expect_reader_error(NULL, "GET /a%zz HTTP/1.1\r\n\r\n", 400);
	expect_reader_error(NULL, "GET /a%4 HTTP/1.1\r\n\r\n", 400);
	expect_reader_error(NULL, "GET /a%00b HTTP/1.1\r\n\r\n", 400);
}

static void test_reader_duplicate_authorization_400(void **state)
{
	(void)state;
	expect_reader_error(NULL, "GET / HTTP/1.1\r\nAuthorization: a\r\n"
	                          "Authorization: b\r\n\r\n", 400);
}

static int keep_alive_of(const char *req)
{
	http_request rq;
	http_conn *c = conn_fed(NULL, req);
	assert_int_equal(http_conn_next(c, &rq), 1);
	int ka = rq.keep_alive;
	http_conn_free(c);
	return ka;
}

static void test_reader_keep_alive_flag(void **state)
{
	(void)state;
	assert_int_equal(keep_alive_of("GET / HTTP/1.1\r\n\r\n"), 1);
	assert_int_equal(keep_alive_of("GET / HTTP/1.1\r\nConnection: close"
	                               "\r\n\r\n"), 0);
	assert_int_equal(keep_alive_of("GET / HTTP/1.0\r\n\r\n"), 0);
	assert_int_equal(keep_alive_of("GET / HTTP/1.0\r\nConnection: "
	                               "keep-alive\r\n\r\n"), 1);
}

/* After a request that closes the connection, later bytes are ignored. */
static void test_reader_nothing_after_close(void **state)
{
	(void)state;
	http_request rq;
	http_conn *c = conn_fed(NULL, "GET /a HTTP/1.1\r\nConnection: close\r\n"
	                              "\r\nGET /b HTTP/1.1\r\n\r\n");
	assert_int_equal(http_conn_next(c, &rq), 1);
	assert_int_equal(rq.keep_alive, 0);
	assert_int_equal(http_conn_next(c, &rq), 0);
	assert_int_equal(http_conn_feed(c, "x", 1), 0);
	assert_int_equal(http_conn_next(c, &rq), 0);
	http_conn_free(c);
}

static void test_reader_backlog_bounded_413(void **state)
{
	(void)state;
	http_limits lim = {.header_max = 32, .body_max = 32};
	char req[128];
	(void)snprintf(req, sizeof req, "%s", "GET / HTTP/1.1\r\n\r\n"
	                                      "GET / HTTP/1.1\r\n\r\n"
	                                      "GET / HTTP/1.1\r\n\r\n"
	                                      "GET / HTTP/1.1\r\n\r\n");
	http_conn *c = http_conn_create(&lim);
	http_request rq;
	assert_int_equal(http_conn_feed(c, req, strlen(req)), -1);
	assert_int_equal(http_conn_next(c, &rq), -1);
	assert_int_equal(http_conn_error(c, NULL), 413);
	http_conn_free(c);
}

static void test_response_format(void **state)
{
	(void)state;
	char body[] = "{\"a\":1}";
	http_response rs = {.status = 200, .body = body, .body_len = 7,
	                    .content_type = "application/json"};
	size_t len = 0;
	char *out = http_response_format(&rs, 1, &len);
	const char *want = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
	                   "Content-Length: 7\r\nConnection: keep-alive\r\n\r\n"
	                   "{\"a\":1}";
	assert_int_equal(len, strlen(want));
	assert_memory_equal(out, want, len);
	free(out);
	rs.status = 404;
	out = http_response_format(&rs, 0, &len);
	assert_non_null(strstr(out, "HTTP/1.1 404 Not Found\r\n"));
	assert_non_null(strstr(out, "Connection: close\r\n"));
	free(out);
	rs.status = 401;
	out = http_response_format(&rs, 1, &len);
	assert_non_null(strstr(out, "\r\nWWW-Authenticate: Bearer"));
	free(out);
	/* A 405 says what the path takes. */
	rs.status = 405;
	rs.allow = "GET, HEAD";
	out = http_response_format(&rs, 1, &len);
	assert_non_null(strstr(out, "\r\nAllow: GET, HEAD\r\n"));
	free(out);
	/* A HEAD: the GET's headers, its length included, and no body. */
	rs.status = 200;
	rs.allow = NULL;
	rs.head = 1;
	out = http_response_format(&rs, 1, &len);
	want = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
	       "Content-Length: 7\r\nConnection: keep-alive\r\n\r\n";
	assert_int_equal(len, strlen(want));
	assert_memory_equal(out, want, len);
	free(out);
}

/* ---- API fixture -------------------------------------------------------- */

typedef struct fixture {
	char dir[64];
	tally *t;
	http_api api;
	const char *auth;     /* Authorization header sent, or NULL */
} fixture;

typedef struct reply {
	int status;
	char *body;
	json_t *json;         /* the parsed body when it is JSON, else NULL */
	const char *content_type;
} reply;

static int rm_entry(const char *path, const struct stat *sb, int flag,
                    struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static int api_setup(void **state)
{
	fixture *f = calloc(1, sizeof *f);
	if (f == NULL)
		return -1;
	(void)snprintf(f->dir, sizeof f->dir, "/tmp/test_http.XXXXXX");
	if (mkdtemp(f->dir) == NULL || tally_open(f->dir, NULL, &f->t) != 0) {
		free(f);
		return -1;
	}
	f->api.t = f->t;
	*state = f;
	return 0;
}

static int api_teardown(void **state)
{
	fixture *f = *state;
	tally_closep(&f->t);
	(void)nftw(f->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

/* Send one request through a reader and the API, as tallyd does. */
static reply call(fixture *f, const char *method, const char *target,
                  const char *body)
{
	size_t blen = body ? strlen(body) : 0;
	size_t cap = strlen(target) + (f->auth ? strlen(f->auth) : 0) + blen + 256;
	char *raw = malloc(cap);
	assert_non_null(raw);
	int n = snprintf(raw, cap, "%s %s HTTP/1.1\r\nHost: t\r\n%s%s%s"
	                 "Content-Length: %zu\r\n\r\n", method, target,
	                 f->auth ? "Authorization: " : "", f->auth ? f->auth : "",
	                 f->auth ? "\r\n" : "", blen);
	assert_true(n > 0 && (size_t)n + blen < cap);
	memcpy(raw + n, body ? body : "", blen);
	http_conn *c = http_conn_create(NULL);
	http_request rq;
	http_response rs;
	assert_int_equal(http_conn_feed(c, raw, (size_t)n + blen), 0);
	assert_int_equal(http_conn_next(c, &rq), 1);
	http_api_handle(&f->api, &rq, &rs);
	reply r = {.status = rs.status, .content_type = rs.content_type};
	r.body = calloc(1, rs.body_len + 1);
	assert_non_null(r.body);
	memcpy(r.body, rs.body, rs.body_len);
	if (strcmp(rs.content_type, "application/json") == 0) {
		r.json = json_loadb(rs.body, rs.body_len, 0, NULL);
		assert_non_null(r.json);
	}
	http_response_free(&rs);
	http_conn_free(c);
	free(raw);
	return r;
}

static void reply_free(reply *r)
{
	free(r->body);
	json_decref(r->json);
}

static void check_status(const reply *r, int want, const char *file, int line)
{
	if (r->status != want)
		fail_msg("%s:%d: status %d, want %d; body %s", file, line,
		         r->status, want, r->body);
}
#define CHECK_STATUS(r, want) check_status(&(r), (want), __FILE__, __LINE__)

/* Expect status and an {"error"} holding `part`, then free the reply. */
static void expect_error(fixture *f, const char *method, const char *target,
                         const char *body, int status, const char *part)
{
	reply r = call(f, method, target, body);
	check_status(&r, status, method, 0);
	const char *err = json_string_value(json_object_get(r.json, "error"));
	if (err == NULL || strstr(err, part) == NULL)
		fail_msg("%s %s: error %s, want one holding '%s'", method, target,
		         r.body, part);
	reply_free(&r);
}

static json_int_t jint(const reply *r, const char *key)
{
	json_t *v = json_object_get(r->json, key);
	if (!json_is_integer(v))
		fail_msg("'%s' is not an integer in %s", key, r->body);
	return json_integer_value(v);
}

/* The count a single-event POST returns (expecting 200). */
static json_int_t post_event(fixture *f, const char *json)
{
	reply r = call(f, "POST", "/v1/events", json);
	CHECK_STATUS(r, 200);
	json_int_t n = jint(&r, "count");
	reply_free(&r);
	return n;
}

static json_int_t get_count(fixture *f, const char *target)
{
	reply r = call(f, "GET", target, NULL);
	CHECK_STATUS(r, 200);
	json_int_t n = jint(&r, "count");
	reply_free(&r);
	return n;
}

/* ---- counters ----------------------------------------------------------- */

static void test_api_healthz(void **state)
{
	reply r = call(*state, "GET", "/healthz", NULL);
	CHECK_STATUS(r, 200);
	CHECK_STR(r.body, "{\"status\":\"ok\"}");
	reply_free(&r);
}

static void test_api_counter_missing_404(void **state)
{
	expect_error(*state, "GET", "/v1/counters/nope", NULL, 404,
	             "no such counter");
}

static void test_api_counter_incr_and_get(void **state)
{
	fixture *f = *state;
	reply r = call(f, "POST", "/v1/counters/hits/incr", "{\"by\":5}");
	CHECK_STATUS(r, 200);
	CHECK_STR(r.body, "{\"name\":\"hits\",\"value\":5}");
	reply_free(&r);
	r = call(f, "POST", "/v1/counters/hits/incr", "");
	CHECK_STATUS(r, 200);
	assert_int_equal(jint(&r, "value"), 6);
	reply_free(&r);
	r = call(f, "POST", "/v1/counters/hits/incr", "{\"by\":-10}");
	assert_int_equal(jint(&r, "value"), -4);
	reply_free(&r);
	r = call(f, "GET", "/v1/counters/hits", NULL);
	CHECK_STATUS(r, 200);
	CHECK_STR(r.body, "{\"name\":\"hits\",\"value\":-4}");
	reply_free(&r);
}

/* A name is the percent-decoded rest of the path: '/' and spaces fit. */
static void test_api_counter_name_decoded(void **state)
{
	fixture *f = *state;
	reply r = call(f, "POST", "/v1/counters/a%2Fb%20c/incr", NULL);
	CHECK_STATUS(r, 200);
	CHECK_STR(json_string_value(json_object_get(r.json, "name")), "a/b c");
	reply_free(&r);
	r = call(f, "GET", "/v1/counters/a/b%20c", NULL);
	CHECK_STATUS(r, 200);
	assert_int_equal(jint(&r, "value"), 1);
	reply_free(&r);
	/* Not UTF-8: echoed percent-encoded, and flagged. */
	r = call(f, "POST", "/v1/counters/%FF%25x/incr", NULL);
	CHECK_STATUS(r, 200);
	CHECK_STR(json_string_value(json_object_get(r.json, "name")), "%FF%25x");
	CHECK_STR(json_string_value(json_object_get(r.json, "name_encoding")),
	          "percent");
	reply_free(&r);
}

/* A name no counter can have: a read finds none (404, as RESP's GET
 * answers nil); an increment is refused (400, as RESP's INCR). */
static void test_api_counter_name_too_long(void **state)
{
	char target[720];
	int n = snprintf(target, sizeof target, "/v1/counters/");
	memset(target + n, 'k', TALLY_KEY_MAX + 1);
	target[n + TALLY_KEY_MAX + 1] = '\0';
	expect_error(*state, "GET", target, NULL, 404, "no such counter");
	strcat(target, "/incr");
	expect_error(*state, "POST", target, "{\"by\":1}", 400, "1..512 bytes");
	target[n + TALLY_KEY_MAX] = '\0';
	expect_error(*state, "GET", target, NULL, 404, "no such counter");
}

static void test_api_counter_idempotent_retry(void **state)
{
	fixture *f = *state;
	const char *body = "{\"by\":3,\"id\":\"req-1\"}";
	for (int i = 0; i < 3; i++) {
		reply r = call(f, "POST", "/v1/counters/c/incr", body);
		CHECK_STATUS(r, 200);
		assert_int_equal(jint(&r, "value"), 3);
		reply_free(&r);
	}
	reply r = call(f, "POST", "/v1/counters/c/incr", "{\"id\":\"req-2\"}");
	assert_int_equal(jint(&r, "value"), 4);
	reply_free(&r);
}

static void test_api_counter_overflow_400(void **state)
{
	fixture *f = *state;
	reply r = call(f, "POST", "/v1/counters/big/incr",
	               "{\"by\":9223372036854775807}");
	CHECK_STATUS(r, 200);
	reply_free(&r);
	expect_error(f, "POST", "/v1/counters/big/incr", NULL, 400,
	             "would overflow");
	r = call(f, "GET", "/v1/counters/big", NULL);
	assert_int_equal(jint(&r, "value"), INT64_MAX);
	reply_free(&r);
}

static void test_api_counter_bad_body_400(void **state)
{
	fixture *f = *state;
	expect_error(f, "POST", "/v1/counters/x/incr", "{\"by\":", 400,
	             "invalid JSON");
	expect_error(f, "POST", "/v1/counters/x/incr", "[1]", 400,
	             "JSON object");
	expect_error(f, "POST", "/v1/counters/x/incr", "{\"by\":\"2\"}", 400,
	             "'by' must be an integer");
	expect_error(f, "POST", "/v1/counters/x/incr", "{\"by\":1.5}", 400,
	             "'by' must be an integer");
	expect_error(f, "POST", "/v1/counters/x/incr", "{\"bye\":1}", 400,
	             "unknown field 'bye'");
	expect_error(f, "POST", "/v1/counters/x/incr", "{\"id\":\"\"}", 400,
	             "'id' must be a string");
	expect_error(f, "POST", "/v1/counters/x/incr", "{\"by\":1,\"by\":2}", 400,
	             "invalid JSON");
	expect_error(f, "GET", "/v1/counters/x", NULL, 404, "no such counter");
}

static void test_api_wrong_method_405(void **state)
{
	fixture *f = *state;
	expect_error(f, "DELETE", "/v1/counters/x", NULL, 405, "not allowed");
	expect_error(f, "GET", "/v1/events", NULL, 405, "not allowed");
	expect_error(f, "POST", "/healthz", NULL, 405, "not allowed");
	expect_error(f, "HEAD", "/v1/events", NULL, 405, "not allowed");
}

static void test_api_unknown_route_404(void **state)
{
	fixture *f = *state;
	expect_error(f, "GET", "/", NULL, 404, "not found");
	expect_error(f, "GET", "/v2/counters/x", NULL, 404, "not found");
	expect_error(f, "GET", "/v1/objects/article", NULL, 404, "not found");
	expect_error(f, "GET", "/v1/events/", NULL, 404, "not found");
	expect_error(f, "GET", "/v1/objects/a/1/like/members", NULL, 404,
	             "not found");
}

/* ---- events and objects ------------------------------------------------- */

static void test_api_event_add_remove(void **state)
{
	fixture *f = *state;
	assert_int_equal(post_event(f, "{\"ctype\":\"article\",\"ktype\":\"like\","
	                               "\"content\":42,\"member\":7}"), 1);
	assert_int_equal(post_event(f, "{\"ctype\":\"article\",\"ktype\":\"like\","
	                               "\"content\":42,\"member\":\"8\","
	                               "\"op\":\"add\"}"), 2);
	assert_int_equal(post_event(f, "{\"ctype\":\"article\",\"ktype\":\"like\","
	                               "\"content\":42,\"member\":7,"
	                               "\"op\":\"remove\"}"), 1);
	assert_int_equal(post_event(f, "{\"ctype\":\"article\",\"ktype\":\"view\","
	                               "\"content\":42,\"delta\":5}"), 5);
	assert_int_equal(get_count(f, "/v1/objects/article/42/like"), 1);
	assert_int_equal(get_count(f, "/v1/objects/article/42/view"), 5);
}

static void test_api_event_idempotent_retry(void **state)
{
	fixture *f = *state;
	const char *ev = "{\"ctype\":\"video\",\"ktype\":\"view\",\"content\":1,"
	                 "\"delta\":2,\"id\":\"tok-1\"}";
	assert_int_equal(post_event(f, ev), 2);
	assert_int_equal(post_event(f, ev), 2);
	assert_int_equal(get_count(f, "/v1/objects/video/1/view"), 2);
}

static void test_api_event_bad_input_400(void **state)
{
	fixture *f = *state;
	const char *const bad[][2] = {
		{"{\"ctype\":\"a\",\"ktype\":\"like\",\"content\":\"abc\","
		 "\"member\":1}", "'content' must be a u64"},
		{"{\"ctype\":\"a\",\"ktype\":\"like\",\"content\":\"-1\","
		 "\"member\":1}", "'content' must be a u64"},
		{"{\"ctype\":\"a\",\"ktype\":\"like\",\"content\":-1,"
		 "\"member\":1}", "'content' must be a u64"},
		{"{\"ctype\":\"a\",\"ktype\":\"like\",\"content\":1.5,"
		 "\"member\":1}", "'content' must be a u64"},
		{"{\"ctype\":\"a\",\"ktype\":\"like\","
		 "\"content\":\"18446744073709551616\",\"member\":1}",
		 "'content' must be a u64"},
		{"{\"ctype\":\"a\",\"ktype\":\"like\",\"content\":1,"
		 "\"member\":\" 1\"}", "'member' must be a u64"},
		{"{\"ctype\":\"a\",\"ktype\":\"like\",\"member\":1}",
		 "'content' must be a u64"},
		{"{\"ktype\":\"like\",\"content\":1,\"member\":1}",
		 "'ctype' must be a string"},
		{"{\"ctype\":\"a\",\"ktype\":\"like\",\"content\":1}",
		 "'member' must be non-zero"},
		{"{\"ctype\":\"a\",\"ktype\":\"like\",\"content\":1,\"member\":1,"
		 "\"op\":\"toggle\"}", "'op' must be"},
		{"{\"ctype\":\"a\",\"ktype\":\"like\",\"content\":1,\"member\":1,"
		 "\"memebr\":1}", "unknown field 'memebr'"},
		{"{\"ctype\":\"a b\",\"ktype\":\"like\",\"content\":1,\"member\":1}",
		 "'ctype' must be"},
		{"{\"ctype\":\"a\",\"ktype\":\"view\",\"content\":1,\"delta\":-2}",
		 "'delta' must be positive"},
		{"{\"ctype\":\"a\",\"ktype\":\"view\",\"content\":1,"
		 "\"at\":9999999999999}", "'at' must be"},
		{"{\"ctype\":\"a\",\"ktype\":\"view\",\"content\":1,\"id\":5}",
		 "'id' must be a string"},
		{"{\"ctype\":\"a\",\"ktype\":\"view\",\"content\":"
		 "18446744073709551615}", "invalid JSON"},
		{"{\"ctype\":", "invalid JSON"},
		{"", "invalid JSON"},
		{"42", "must be a JSON object"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		expect_error(f, "POST", "/v1/events", bad[i][0], 400, bad[i][1]);
	assert_int_equal(get_count(f, "/v1/objects/a/1/view"), 0);
}

static void test_api_event_unknown_ktype_404(void **state)
{
	fixture *f = *state;
	expect_error(f, "POST", "/v1/events",
	             "{\"ctype\":\"a\",\"ktype\":\"zap\",\"content\":1,"
	             "\"member\":1}", 404, "unknown counting type 'zap'");
	expect_error(f, "GET", "/v1/objects/a/1/zap", NULL, 404,
	             "unknown counting type 'zap'");
	expect_error(f, "GET", "/v1/objects/a/1/zap/recent", NULL, 404,
	             "unknown counting type 'zap'");
	expect_error(f, "GET", "/v1/members/1/zap", NULL, 404,
	             "unknown counting type 'zap'");
}

static void test_api_events_batch(void **state)
{
	fixture *f = *state;
	reply r = call(f, "POST", "/v1/events",
	               "[{\"ctype\":\"post\",\"ktype\":\"like\",\"content\":1,"
	               "\"member\":1},"
	               "{\"ctype\":\"post\",\"ktype\":\"like\",\"content\":1,"
	               "\"member\":2},"
	               "{\"ctype\":\"post\",\"ktype\":\"view\",\"content\":1,"
	               "\"delta\":3}]");
	CHECK_STATUS(r, 200);
	CHECK_STR(r.body, "{\"counts\":[1,2,3]}");
	reply_free(&r);
	r = call(f, "POST", "/v1/events", "[]");
	CHECK_STATUS(r, 200);
	CHECK_STR(r.body, "{\"counts\":[]}");
	reply_free(&r);
}

/* One bad event refuses the whole batch: nothing is queued. */
static void test_api_events_batch_invalid_queues_nothing(void **state)
{
	fixture *f = *state;
	expect_error(f, "POST", "/v1/events",
	             "[{\"ctype\":\"post\",\"ktype\":\"view\",\"content\":9},"
	             "{\"ctype\":\"post\",\"ktype\":\"view\",\"content\":\"x\"}]",
	             400, "event 1: 'content' must be a u64");
	expect_error(f, "POST", "/v1/events",
	             "[{\"ctype\":\"post\",\"ktype\":\"view\",\"content\":9},"
	             "{\"ctype\":\"post\",\"ktype\":\"nope\",\"content\":9}]",
	             404, "event 1: unknown counting type 'nope'");
	assert_int_equal(get_count(f, "/v1/objects/post/9/view"), 0);
}

/* An engine error of one event is reported in its place (207). */
static void test_api_events_batch_engine_error_207(void **state)
{
	fixture *f = *state;
	reply r = call(f, "POST", "/v1/events",
	               "[{\"ctype\":\"p\",\"ktype\":\"view\",\"content\":1,"
	               "\"delta\":9223372036854775807},"
	               "{\"ctype\":\"p\",\"ktype\":\"view\",\"content\":1},"
	               "{\"ctype\":\"p\",\"ktype\":\"view\",\"content\":2}]");
	CHECK_STATUS(r, 207);
	json_t *counts = json_object_get(r.json, "counts");
	assert_int_equal(json_array_size(counts), 3);
	assert_int_equal(json_integer_value(json_array_get(counts, 0)), INT64_MAX);
	const char *err = json_string_value(
	    json_object_get(json_array_get(counts, 1), "error"));
	assert_non_null(err);
	assert_non_null(strstr(err, "overflow"));
	assert_int_equal(json_integer_value(json_array_get(counts, 2)), 1);
	reply_free(&r);
}

static void test_api_events_batch_too_many_400(void **state)
{
	fixture *f = *state;
	const char *one = "{\"ctype\":\"b\",\"ktype\":\"view\",\"content\":1},";
	size_t n = 1001, len = strlen(one);
	char *body = malloc(n * len + 3);
	assert_non_null(body);
	body[0] = '[';
	for (size_t i = 0; i < n; i++)
		memcpy(body + 1 + i * len, one, len);
	body[n * len] = ']'; /* over the last comma */
	body[n * len + 1] = '\0';
	expect_error(f, "POST", "/v1/events", body, 400, "at most 1000 events");
	/* 1000 is allowed, and they all count. */
	memcpy(body + (n - 1) * len, "]", 2);
	reply r = call(f, "POST", "/v1/events", body);
	CHECK_STATUS(r, 200);
	reply_free(&r);
	assert_int_equal(get_count(f, "/v1/objects/b/1/view"), 1000);
	free(body);
}

static void test_api_object_counts(void **state)
{
	fixture *f = *state;
	post_event(f, "{\"ctype\":\"article\",\"ktype\":\"like\",\"content\":5,"
	              "\"member\":1}");
	post_event(f, "{\"ctype\":\"article\",\"ktype\":\"share\",\"content\":5,"
	              "\"delta\":4}");
	reply r = call(f, "GET", "/v1/objects/article/5", NULL);
	CHECK_STATUS(r, 200);
	CHECK_STR(json_string_value(json_object_get(r.json, "ctype")), "article");
	assert_int_equal(jint(&r, "content"), 5);
	json_t *counts = json_object_get(r.json, "counts");
	assert_int_equal(json_integer_value(json_object_get(counts, "like")), 1);
	assert_int_equal(json_integer_value(json_object_get(counts, "share")), 4);
	assert_int_equal(json_integer_value(json_object_get(counts, "view")), 0);
	assert_int_equal(json_object_size(counts), 13);
	reply_free(&r);
}

static void test_api_object_count_at(void **state)
{
	fixture *f = *state;
	post_event(f, "{\"ctype\":\"a\",\"ktype\":\"view\",\"content\":3,"
	              "\"at\":1000}");
	post_event(f, "{\"ctype\":\"a\",\"ktype\":\"view\",\"content\":3,"
	              "\"at\":2000}");
	post_event(f, "{\"ctype\":\"a\",\"ktype\":\"view\",\"content\":3,"
	              "\"at\":3000}");
	assert_int_equal(get_count(f, "/v1/objects/a/3/view"), 3);
	assert_int_equal(get_count(f, "/v1/objects/a/3/view?at=2500"), 2);
	assert_int_equal(get_count(f, "/v1/objects/a/3/view?x=1&at=999"), 0);
	expect_error(f, "GET", "/v1/objects/a/3/view?at=0", NULL, 400, "'at'");
	expect_error(f, "GET", "/v1/objects/a/3/view?at=-5", NULL, 400, "'at'");
	/* An empty value is the parameter's default: no time, the count. */
	assert_int_equal(get_count(f, "/v1/objects/a/3/view?at="), 3);
	expect_error(f, "GET", "/v1/objects/a/3/view?at", NULL, 400, "'at'");
}

static void test_api_object_bad_ids_400(void **state)
{
	fixture *f = *state;
	const char *const bad[] = {"abc", "-1", "18446744073709551616", "1x",
	                           "%201", "+1", "0x10"};
	char target[128];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		(void)snprintf(target, sizeof target, "/v1/objects/a/%s/like", bad[i]);
		expect_error(f, "GET", target, NULL, 400, "invalid content id");
		(void)snprintf(target, sizeof target,
		               "/v1/objects/a/1/like/members/%s", bad[i]);
		expect_error(f, "GET", target, NULL, 400, "invalid member id");
		(void)snprintf(target, sizeof target, "/v1/members/%s/like", bad[i]);
		expect_error(f, "GET", target, NULL, 400, "invalid member id");
	}
	expect_error(f, "GET", "/v1/objects//1", NULL, 400, "ctype");
	expect_error(f, "GET", "/v1/objects/a/1/", NULL, 400, "ktype");
}

static void test_api_recent_pages(void **state)
{
	fixture *f = *state;
	char ev[160];
	for (int m = 1; m <= 5; m++) {
		(void)snprintf(ev, sizeof ev, "{\"ctype\":\"a\",\"ktype\":\"like\","
		               "\"content\":8,\"member\":%d,\"at\":%d}", m, m * 1000);
		post_event(f, ev);
	}
	post_event(f, "{\"ctype\":\"a\",\"ktype\":\"like\",\"content\":8,"
	              "\"member\":2,\"op\":\"remove\",\"at\":6000}");
	reply r = call(f, "GET", "/v1/objects/a/8/like/recent?limit=4", NULL);
	CHECK_STATUS(r, 200);
	json_t *e = json_object_get(r.json, "entries");
	assert_int_equal(json_array_size(e), 4);
	json_t *first = json_array_get(e, 0);
	assert_int_equal(json_integer_value(json_object_get(first, "member")), 2);
	CHECK_STR(json_string_value(json_object_get(first, "op")), "remove");
	assert_int_equal(json_integer_value(json_object_get(first, "delta")), 1);
	assert_int_equal(json_integer_value(json_object_get(first, "at")), 6000);
	json_t *last = json_array_get(e, 3);
	CHECK_STR(json_string_value(json_object_get(last, "op")), "add");
	json_int_t next = jint(&r, "next_before");
	assert_int_equal(next, json_integer_value(json_object_get(last, "seq")));
	reply_free(&r);
	char target[96];
	(void)snprintf(target, sizeof target,
	               "/v1/objects/a/8/like/recent?limit=4&before=%lld",
	               (long long)next);
	r = call(f, "GET", target, NULL);
	CHECK_STATUS(r, 200);
	assert_int_equal(json_array_size(json_object_get(r.json, "entries")), 2);
	assert_true(json_is_null(json_object_get(r.json, "next_before")));
	reply_free(&r);
	r = call(f, "GET", "/v1/objects/a/99/like/recent", NULL);
	CHECK_STR(r.body, "{\"entries\":[],\"next_before\":null}");
	reply_free(&r);
}

static void test_api_recent_bad_page_400(void **state)
{
	fixture *f = *state;
	expect_error(f, "GET", "/v1/objects/a/1/like/recent?limit=0", NULL, 400,
	             "'limit' must be an integer in 1..1000");
	expect_error(f, "GET", "/v1/objects/a/1/like/recent?limit=1001", NULL,
	             400, "'limit'");
	expect_error(f, "GET", "/v1/objects/a/1/like/recent?limit=abc", NULL,
	             400, "'limit'");
	expect_error(f, "GET", "/v1/objects/a/1/like/recent?before=-1", NULL,
	             400, "'before'");
	expect_error(f, "GET", "/v1/members/1/like?limit=99999999999999999999",
	             NULL, 400, "'limit'");
}

static void test_api_member_in_and_not_in(void **state)
{
	fixture *f = *state;
	post_event(f, "{\"ctype\":\"a\",\"ktype\":\"favorite\",\"content\":4,"
	              "\"member\":9,\"at\":1234}");
	reply r = call(f, "GET", "/v1/objects/a/4/favorite/members/9", NULL);
	CHECK_STATUS(r, 200);
	CHECK_STR(r.body, "{\"member\":9,\"at\":1234}");
	reply_free(&r);
	expect_error(f, "GET", "/v1/objects/a/4/favorite/members/10", NULL, 404,
	             "not in");
	expect_error(f, "GET", "/v1/objects/a/4/view/members/9", NULL, 400,
	             "total counting type");
}

static void test_api_member_history(void **state)
{
	fixture *f = *state;
	post_event(f, "{\"ctype\":\"article\",\"ktype\":\"like\",\"content\":1,"
	              "\"member\":77,\"at\":1000}");
	post_event(f, "{\"ctype\":\"video\",\"ktype\":\"like\",\"content\":2,"
	              "\"member\":77,\"at\":2000}");
	reply r = call(f, "GET", "/v1/members/77/like?limit=1", NULL);
	CHECK_STATUS(r, 200);
	json_t *e0 = json_array_get(json_object_get(r.json, "entries"), 0);
	CHECK_STR(json_string_value(json_object_get(e0, "ctype")), "video");
	assert_int_equal(json_integer_value(json_object_get(e0, "content")), 2);
	assert_int_equal(json_integer_value(json_object_get(e0, "at")), 2000);
	CHECK_STR(json_string_value(json_object_get(e0, "op")), "add");
	json_int_t next = jint(&r, "next_before");
	reply_free(&r);
	char target[96];
	(void)snprintf(target, sizeof target, "/v1/members/77/like?before=%lld",
	               (long long)next);
	r = call(f, "GET", target, NULL);
	json_t *e = json_object_get(r.json, "entries");
	assert_int_equal(json_array_size(e), 1);
	CHECK_STR(json_string_value(json_object_get(json_array_get(e, 0),
	                                            "ctype")), "article");
	assert_true(json_is_null(json_object_get(r.json, "next_before")));
	reply_free(&r);
	expect_error(f, "GET", "/v1/members/0/like", NULL, 400, "non-zero");
}

/* u64 ids beyond 2^53 travel as decimal strings, both ways. */
static void test_api_u64_max_ids_round_trip(void **state)
{
	fixture *f = *state;
	assert_int_equal(post_event(f, "{\"ctype\":\"a\",\"ktype\":\"like\","
	                               "\"content\":\"18446744073709551615\","
	                               "\"member\":\"18446744073709551615\"}"), 1);
	const char *obj = "/v1/objects/a/18446744073709551615";
	char target[128];
	(void)snprintf(target, sizeof target, "%s/like/members/"
	               "18446744073709551615", obj);
	reply r = call(f, "GET", target, NULL);
	CHECK_STATUS(r, 200);
	CHECK_STR(json_string_value(json_object_get(r.json, "member")),
	          "18446744073709551615");
	reply_free(&r);
	r = call(f, "GET", obj, NULL);
	CHECK_STR(json_string_value(json_object_get(r.json, "content")),
	          "18446744073709551615");
	reply_free(&r);
	(void)snprintf(target, sizeof target, "%s/like/recent", obj);
	r = call(f, "GET", target, NULL);
	json_t *e0 = json_array_get(json_object_get(r.json, "entries"), 0);
	CHECK_STR(json_string_value(json_object_get(e0, "member")),
	          "18446744073709551615");
	reply_free(&r);
	r = call(f, "GET", "/v1/members/18446744073709551615/like", NULL);
	e0 = json_array_get(json_object_get(r.json, "entries"), 0);
	CHECK_STR(json_string_value(json_object_get(e0, "content")),
	          "18446744073709551615");
	reply_free(&r);
	/* 2^53 is still a number, 2^53 + 1 a string. */
	r = call(f, "GET", "/v1/objects/a/9007199254740992", NULL);
	assert_int_equal(jint(&r, "content"), INT64_C(9007199254740992));
	reply_free(&r);
	r = call(f, "GET", "/v1/objects/a/9007199254740993", NULL);
	CHECK_STR(json_string_value(json_object_get(r.json, "content")),
	          "9007199254740993");
	reply_free(&r);
}

/* ---- metrics and auth --------------------------------------------------- */

static char *metrics_text(void *arg, size_t *len)
{
	const char *text = arg;
	char *s = malloc(strlen(text) + 1);
	if (s != NULL)
		memcpy(s, text, strlen(text) + 1);
	*len = strlen(text);
	return s;
}

static void test_api_metrics(void **state)
{
	fixture *f = *state;
	expect_error(f, "GET", "/metrics", NULL, 404, "metrics not enabled");
	f->api.metrics = metrics_text;
	f->api.metrics_arg = "tally_writes_total 3\n";
	reply r = call(f, "GET", "/metrics", NULL);
	CHECK_STATUS(r, 200);
	CHECK_STR(r.content_type, "text/plain; version=0.0.4");
	CHECK_STR(r.body, "tally_writes_total 3\n");
	reply_free(&r);
}

static void test_api_auth(void **state)
{
	fixture *f = *state;
	f->api.password = "s3cret";
	expect_error(f, "GET", "/v1/counters/x", NULL, 401,
	             "authentication required");
	expect_error(f, "GET", "/nowhere", NULL, 401, "authentication required");
	f->auth = "Bearer wrong";
	expect_error(f, "GET", "/v1/counters/x", NULL, 401, "authentication");
	f->auth = "Bearer s3cre";
	expect_error(f, "GET", "/v1/counters/x", NULL, 401, "authentication");
	f->auth = "Bearer s3cret2";
	expect_error(f, "GET", "/v1/counters/x", NULL, 401, "authentication");
	f->auth = "Basic czNjcmV0";
	expect_error(f, "GET", "/v1/counters/x", NULL, 401, "authentication");
	f->auth = "Bearer s3cret";
	expect_error(f, "GET", "/v1/counters/x", NULL, 404, "no such counter");
	f->auth = "bearer s3cret";
	reply r = call(f, "POST", "/v1/counters/x/incr", NULL);
	CHECK_STATUS(r, 200);
	reply_free(&r);
	/* /healthz is open: load balancers carry no password. */
	f->auth = NULL;
	r = call(f, "GET", "/healthz", NULL);
	CHECK_STATUS(r, 200);
	reply_free(&r);
}

#define API_TEST(fn) \
	cmocka_unit_test_setup_teardown(fn, api_setup, api_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reader_simple_get),
		cmocka_unit_test(test_reader_no_authorization_is_null),
		cmocka_unit_test(test_reader_pipelined_two_requests),
		cmocka_unit_test(test_reader_request_survives_feed),
		cmocka_unit_test(test_reader_byte_by_byte),
		cmocka_unit_test(test_reader_post_body),
		cmocka_unit_test(test_reader_framing_refused),
		cmocka_unit_test(test_reader_chunked_body),
		cmocka_unit_test(test_reader_expect_continue),
		cmocka_unit_test(test_reader_header_too_large_431_uri_414),
		cmocka_unit_test(test_reader_header_at_limit_ok),
		cmocka_unit_test(test_reader_body_too_large_413),
		cmocka_unit_test(test_reader_garbage_400),
		cmocka_unit_test(test_reader_bad_percent_escape_400),
		cmocka_unit_test(test_reader_duplicate_authorization_400),
		cmocka_unit_test(test_reader_keep_alive_flag),
		cmocka_unit_test(test_reader_nothing_after_close),
		cmocka_unit_test(test_reader_backlog_bounded_413),
		cmocka_unit_test(test_response_format),
		API_TEST(test_api_healthz),
		API_TEST(test_api_counter_missing_404),
		API_TEST(test_api_counter_incr_and_get),
		API_TEST(test_api_counter_name_decoded),
		API_TEST(test_api_counter_name_too_long),
		API_TEST(test_api_counter_idempotent_retry),
		API_TEST(test_api_counter_overflow_400),
		API_TEST(test_api_counter_bad_body_400),
		API_TEST(test_api_wrong_method_405),
		API_TEST(test_api_unknown_route_404),
		API_TEST(test_api_event_add_remove),
		API_TEST(test_api_event_idempotent_retry),
		API_TEST(test_api_event_bad_input_400),
		API_TEST(test_api_event_unknown_ktype_404),
		API_TEST(test_api_events_batch),
		API_TEST(test_api_events_batch_invalid_queues_nothing),
		API_TEST(test_api_events_batch_engine_error_207),
		API_TEST(test_api_events_batch_too_many_400),
		API_TEST(test_api_object_counts),
		API_TEST(test_api_object_count_at),
		API_TEST(test_api_object_bad_ids_400),
		API_TEST(test_api_recent_pages),
		API_TEST(test_api_recent_bad_page_400),
		API_TEST(test_api_member_in_and_not_in),
		API_TEST(test_api_member_history),
		API_TEST(test_api_u64_max_ids_round_trip),
		API_TEST(test_api_metrics),
		API_TEST(test_api_auth),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
