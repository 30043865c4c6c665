/* resp_client.c: RESP integration tests of a running tallyd through hiredis
 * (a real Redis client library) and raw sockets, as cmocka tests.
 *
 *   resp_client PORT        (tallyd on 127.0.0.1:PORT, fresh data folder)
 *
 * 1. 10,000 pipelined commands (INCRBY, GET, TALLY.ADD/REMOVE/COUNT/HAS)
 *    on one connection, answered in order, each equal to a model's value:
 *    a read after a write on the same connection sees the write.
 * 2. Redis's error texts, through hiredis.
 * 3. RESP3 after HELLO 3, as exact bytes over a raw socket (hiredis 0.14
 *    cannot parse RESP3's types: it predates them).
 * 4. Bad protocol input over raw sockets, each answered with an error
 *    reply or a closed connection, while a witness client keeps getting
 *    correct answers.
 * 5. 1000 connections sending random garbage, in bounded time; tallyd
 *    stays up and exact.
 * Randomness is seeded from TALLY_SEED (printed), so a failure can be
 * replayed. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

static int g_port;
static uint64_t g_rng = 88172645463325252ull;

static uint64_t rnd(void)
{
	g_rng ^= g_rng << 13;
	g_rng ^= g_rng >> 7;
	g_rng ^= g_rng << 17;
	return g_rng;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- hiredis helpers ------------------------------------------------------ */

static redisContext *connect_hiredis(void)
{
	struct timeval tv = { 10, 0 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", g_port, tv);

	assert_non_null(c);
	if (c->err)
		fail_msg("connect to 127.0.0.1:%d: %s", g_port, c->errstr);
	/* A hung server fails the test instead of hanging it. */
	assert_int_equal(redisSetTimeout(c, tv), REDIS_OK);
	return c;
}

/* A command from space-separated words (no binary arguments). */
static redisReply *cmd(redisContext *c, const char *line)
{
	char buf[1024];
	const char *argv[64];
	size_t lens[64];
	int argc = 0;
	char *save = NULL, *tok;
	redisReply *r;

	assert_true(strlen(line) < sizeof buf);
	strcpy(buf, line);
	for (tok = strtok_r(buf, " ", &save); tok && argc < 64;
	     tok = strtok_r(NULL, " ", &save)) {
		argv[argc] = tok;
		lens[argc] = strlen(tok);
		argc++;
	}
	r = redisCommandArgv(c, argc, argv, lens);
	if (r == NULL)
		fail_msg("'%s': no reply (%s)", line, c->errstr);
	return r;
}

static void expect_int(redisContext *c, const char *line, long long want)
{
	redisReply *r = cmd(c, line);

	if (r->type != REDIS_REPLY_INTEGER || r->integer != want)
		fail_msg("'%s': want :%lld, got type %d int %lld str '%s'", line,
		         want, r->type, r->integer, r->str ? r->str : "");
	freeReplyObject(r);
}

static void expect_status(redisContext *c, const char *line, const char *want)
{
	redisReply *r = cmd(c, line);

	if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, want) != 0)
		fail_msg("'%s': want +%s, got type %d '%s'", line, want, r->type,
		         r->str ? r->str : "");
	freeReplyObject(r);
}

static void expect_bulk(redisContext *c, const char *line, const char *want)
{
	redisReply *r = cmd(c, line);

	if (want == NULL) {
		if (r->type != REDIS_REPLY_NIL)
			fail_msg("'%s': want nil, got type %d '%s'", line,
			         r->type, r->str ? r->str : "");
	} else if (r->type != REDIS_REPLY_STRING || strcmp(r->str, want) != 0) {
		fail_msg("'%s': want \"%s\", got type %d '%s'", line, want,
		         r->type, r->str ? r->str : "");
	}
	freeReplyObject(r);
}

static void check_error_reply(const char *what, redisReply *r, const char *want)
{
	if (r->type != REDIS_REPLY_ERROR || strcmp(r->str, want) != 0)
		fail_msg("%s:\n  want error '%s'\n  got type %d '%s'", what, want,
		         r->type, r->str ? r->str : "");
}

static void expect_error(redisContext *c, const char *line, const char *want)
{
	redisReply *r = cmd(c, line);

	check_error_reply(line, r, want);
	freeReplyObject(r);
}

/* ---- raw sockets ------------------------------------------------------------ */

static int raw_connect(void)
{
	struct sockaddr_in a;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)g_port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
		fail_msg("raw connect: %s", strerror(errno));
	return fd;
}

/* Send everything, or stop quietly when the server has closed. */
static void raw_send(int fd, const void *p, size_t n)
{
	const char *s = p;

	while (n > 0) {
		ssize_t k = send(fd, s, n, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return;
		s += k;
		n -= (size_t)k;
	}
}

/* Read until the server closes, `want` bytes arrived (0: no such stop)
 * or ms pass. Returns bytes read; *closed tells whether it closed. */
static size_t raw_read(int fd, char *buf, size_t cap, size_t want, int ms,
                       int *closed)
{
	uint64_t end = now_ms() + (uint64_t)ms;
	size_t n = 0;

	*closed = 0;
	while (n < cap - 1 && (want == 0 || n < want)) {
		struct pollfd pf = { fd, POLLIN, 0 };
		uint64_t now = now_ms();
		int rc;

		if (now >= end)
			break;
		rc = poll(&pf, 1, (int)(end - now));
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc <= 0)
			break;
		ssize_t k = recv(fd, buf + n, cap - 1 - n, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			*closed = 1; /* EOF or reset */
			break;
		}
		n += (size_t)k;
	}
	buf[n] = '\0';
	return n;
}

/* Send bytes, then read the whole answer until close or a quiet ms. */
static size_t raw_exchange(const void *req, size_t len, char *buf, size_t cap,
                           int ms, int *closed)
{
	int fd = raw_connect();
	size_t n;

	raw_send(fd, req, len);
	n = raw_read(fd, buf, cap, 0, ms, closed);
	close(fd);
	return n;
}

/* ---- 1. 10k pipelined commands ----------------------------------------------- */

#define PIPE_N 10000
#define PIPE_KEYS 7
#define PIPE_OBJS 3
#define PIPE_MEMBERS 2000

enum { K_INT, K_BULK, K_NIL_OR_INT };

typedef struct expect {
	int kind;           /* K_INT: integer; K_BULK: bulk or nil */
	long long v;
	int nil;
	char line[96];
} expect;

static void test_pipeline_10k(void **state)
{
	static expect ex[PIPE_N];
	static unsigned char in[PIPE_OBJS][PIPE_MEMBERS + 1];
	long long ctr[PIPE_KEYS] = { 0 }, likes[PIPE_OBJS] = { 0 },
	          views[PIPE_OBJS] = { 0 };
	int set[PIPE_KEYS] = { 0 };
	redisContext *c = connect_hiredis();
	int i, bad = 0;

	(void)state;
	memset(in, 0, sizeof in);
	for (i = 0; i < PIPE_N; i++) {
		int k = (int)(rnd() % PIPE_KEYS), o = (int)(rnd() % PIPE_OBJS);
		int m = 1 + (int)(rnd() % PIPE_MEMBERS);
		long long d = 1 + (long long)(rnd() % 9);
		expect *e = &ex[i];
		const char *argv[8];
		size_t lens[8];
		int argc;

		switch (rnd() % 10) {
		case 0: case 1: case 2:
			snprintf(e->line, sizeof e->line, "INCRBY pipe:%d %lld", k, d);
			ctr[k] += d;
			set[k] = 1;
			e->kind = K_INT;
			e->v = ctr[k];
			break;
		case 3:
			snprintf(e->line, sizeof e->line, "GET pipe:%d", k);
			e->kind = K_BULK;
			e->v = ctr[k];
			e->nil = !set[k];
			break;
		case 4: case 5:
			snprintf(e->line, sizeof e->line,
			         "TALLY.ADD pipe like %d %d", 100 + o, m);
			if (!in[o][m]) {
				in[o][m] = 1;
				likes[o]++;
			}
			e->kind = K_INT;
			e->v = likes[o];
			break;
		case 6:
			snprintf(e->line, sizeof e->line,
			         "TALLY.COUNT pipe like %d", 100 + o);
			e->kind = K_INT;
			e->v = likes[o];
			break;
		case 7:
			snprintf(e->line, sizeof e->line,
			         "TALLY.REMOVE pipe like %d %d", 100 + o, m);
			if (in[o][m]) {
				in[o][m] = 0;
				likes[o]--;
			}
			e->kind = K_INT;
			e->v = likes[o];
			break;
		case 8:
			snprintf(e->line, sizeof e->line,
			         "TALLY.ADD pipe view %d 0 DELTA %lld", 100 + o, d);
			views[o] += d;
			e->kind = K_INT;
			e->v = views[o];
			break;
		default:
			snprintf(e->line, sizeof e->line,
			         "TALLY.HAS pipe like %d %d", 100 + o, m);
			e->kind = K_NIL_OR_INT;
			e->nil = !in[o][m];
			break;
		}
		/* split into argv (copies: e->line must stay intact) */
		{
			static char words[8][32];
			char tmp[96], *save = NULL, *tok;

			strcpy(tmp, e->line);
			argc = 0;
			for (tok = strtok_r(tmp, " ", &save); tok && argc < 8;
			     tok = strtok_r(NULL, " ", &save)) {
				strcpy(words[argc], tok);
				argv[argc] = words[argc];
				lens[argc] = strlen(tok);
				argc++;
			}
			assert_int_equal(redisAppendCommandArgv(c, argc, argv,
			                                        lens), REDIS_OK);
		}
	}
	for (i = 0; i < PIPE_N; i++) {
		void *vr = NULL;
		redisReply *r;
		expect *e = &ex[i];
		int ok;

		if (redisGetReply(c, &vr) != REDIS_OK || vr == NULL)
			fail_msg("reply %d ('%s'): none (%s)", i, e->line, c->errstr);
		r = vr;
		if (e->kind == K_INT)
			ok = r->type == REDIS_REPLY_INTEGER && r->integer == e->v;
		else if (e->kind == K_BULK && e->nil)
			ok = r->type == REDIS_REPLY_NIL;
		else if (e->kind == K_BULK)
			ok = r->type == REDIS_REPLY_STRING &&
			     strtoll(r->str, NULL, 10) == e->v;
		else if (e->nil)
			ok = r->type == REDIS_REPLY_NIL;
		else
			ok = r->type == REDIS_REPLY_INTEGER && r->integer > 0;
		if (!ok && bad++ < 10)
			print_error("reply %d to '%s': want %s%lld, got type %d "
			            "int %lld str '%s'\n", i, e->line,
			            e->nil ? "nil/" : "", e->v, r->type, r->integer,
			            r->str ? r->str : "");
		freeReplyObject(r);
	}
	if (bad)
		fail_msg("%d of %d pipelined replies were wrong", bad, PIPE_N);
	/* and the state after the pipeline, on a new connection */
	redisFree(c);
	c = connect_hiredis();
	for (i = 0; i < PIPE_KEYS; i++) {
		char line[64], want[32];

		snprintf(line, sizeof line, "GET pipe:%d", i);
		snprintf(want, sizeof want, "%lld", ctr[i]);
		expect_bulk(c, line, set[i] ? want : NULL);
	}
	for (i = 0; i < PIPE_OBJS; i++) {
		char line[64];

		snprintf(line, sizeof line, "TALLY.COUNT pipe like %d", 100 + i);
		expect_int(c, line, likes[i]);
		snprintf(line, sizeof line, "TALLY.COUNT pipe view %d", 100 + i);
		expect_int(c, line, views[i]);
	}
	redisFree(c);
}

/* ---- 2. error texts ------------------------------------------------------------- */

static void test_error_texts(void **state)
{
	redisContext *c = connect_hiredis();
	const char *argv[6];
	size_t lens[6];
	redisReply *r;

	(void)state;
	expect_error(c, "DECRBY e1 -9223372036854775808",
	             "ERR decrement would overflow");
	expect_status(c, "SET e2 9223372036854775807", "OK");
	expect_error(c, "INCR e2", "ERR increment or decrement would overflow");
	expect_error(c, "INCRBY e2 1", "ERR increment or decrement would overflow");
	expect_bulk(c, "GET e2", "9223372036854775807");
	expect_status(c, "SET e3 -9223372036854775808", "OK");
	expect_error(c, "DECR e3", "ERR increment or decrement would overflow");
	expect_error(c, "INCRBY e4 abc", "ERR value is not an integer or out of range");
	expect_error(c, "INCRBY e4 99999999999999999999",
	             "ERR value is not an integer or out of range");
	expect_error(c, "DECRBY e4 1e3", "ERR value is not an integer or out of range");
	expect_error(c, "SET e4 12abc", "ERR value is not an integer or out of range");
	expect_bulk(c, "GET e4", NULL);
	expect_error(c, "INCR", "ERR wrong number of arguments for 'incr' command");
	expect_error(c, "INCR a b", "ERR wrong number of arguments for 'incr' command");
	expect_error(c, "DECRBY a", "ERR wrong number of arguments for 'decrby' command");
	expect_error(c, "ECHO", "ERR wrong number of arguments for 'echo' command");
	expect_error(c, "TALLY.HAS a like 1",
	             "ERR wrong number of arguments for 'tally.has' command");
	expect_error(c, "foo a b",
	             "ERR unknown command 'foo', with args beginning with: 'a' 'b' ");
	expect_error(c, "SELECT 1", "ERR DB index is out of range");
	expect_status(c, "SELECT 0", "OK");
	expect_error(c, "HELLO 4", "NOPROTO unsupported protocol version");
	expect_error(c, "AUTH x", "ERR AUTH <password> called without any password "
	             "configured for the default user. Are you sure your "
	             "configuration is correct?");
	expect_error(c, "TALLY.COUNT article nosuchtype 1",
	             "ERR unknown counting type 'nosuchtype'");
	expect_error(c, "TALLY.ADD article like x 1",
	             "ERR content is not an unsigned 64-bit integer");
	expect_error(c, "TALLY.ADD article like 1 18446744073709551616",
	             "ERR member is not an unsigned 64-bit integer");
	/* a key over 512 bytes is refused, not cut */
	{
		static char key[600];

		memset(key, 'k', sizeof key);
		argv[0] = "INCR";
		lens[0] = 4;
		argv[1] = key;
		lens[1] = sizeof key;
		r = redisCommandArgv(c, 2, argv, lens);
		assert_non_null(r);
		assert_int_equal(r->type, REDIS_REPLY_ERROR);
		freeReplyObject(r);
	}
	redisFree(c);
}

/* A name with a NUL byte must be refused (names are [A-Za-z0-9_.:-]), not
 * cut at the NUL into another name. */
static void test_names_with_nul(void **state)
{
	redisContext *c = connect_hiredis();
	const char *argv[6];
	size_t lens[6];
	redisReply *r;

	(void)state;
	expect_int(c, "TALLY.ADD nul like 1 1", 1);
	argv[0] = "TALLY.ADD";
	lens[0] = 9;
	argv[1] = "nul\0x";
	lens[1] = 5;
	argv[2] = "like";
	lens[2] = 4;
	argv[3] = "1";
	lens[3] = 1;
	argv[4] = "2";
	lens[4] = 1;
	r = redisCommandArgv(c, 5, argv, lens);
	assert_non_null(r);
	if (r->type != REDIS_REPLY_ERROR)
		print_error("TALLY.ADD with ctype \"nul\\0x\" answered type %d "
		            "(int %lld), not an error\n", r->type, r->integer);
	freeReplyObject(r);
	argv[1] = "nul";
	lens[1] = 3;
	argv[2] = "like\0zz";
	lens[2] = 7;
	argv[4] = "3";
	r = redisCommandArgv(c, 5, argv, lens);
	assert_non_null(r);
	if (r->type != REDIS_REPLY_ERROR)
		print_error("TALLY.ADD with ktype \"like\\0zz\" answered type %d "
		            "(int %lld), not an error\n", r->type, r->integer);
	freeReplyObject(r);
	/* The object "nul" like 1 has member 1 only. */
	r = cmd(c, "TALLY.COUNT nul like 1");
	{
		long long n = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;

		freeReplyObject(r);
		redisFree(c);
		if (n != 1)
			fail_msg("TALLY.COUNT nul like 1: want 1 (member 1 only), "
			         "got %lld: names were cut at the NUL", n);
	}
}

/* ---- 3. RESP3 over a raw socket ------------------------------------------------- */

static void expect_raw(const char *what, const char *req, const char *want,
                       int want_close)
{
	char buf[65536];
	int closed;
	size_t n = raw_exchange(req, strlen(req), buf, sizeof buf, 2000, &closed);

	if (n != strlen(want) || memcmp(buf, want, n) != 0 ||
	    (want_close && !closed))
		fail_msg("%s:\n  want '%s'%s\n  got  '%s'%s", what, want,
		         want_close ? " + close" : "", buf, closed ? " + close" : "");
}

static void test_resp3_raw(void **state)
{
	char hello3[256];
	redisContext *c = connect_hiredis();
	redisReply *r;

	(void)state;
	r = cmd(c, "CLIENT ID");
	assert_int_equal(r->type, REDIS_REPLY_INTEGER);
	freeReplyObject(r);
	/* hiredis 0.14 speaks RESP2 only: HELLO 2 is a flat array. */
	r = cmd(c, "HELLO 2");
	assert_int_equal(r->type, REDIS_REPLY_ARRAY);
	assert_int_equal(r->elements, 14);
	assert_string_equal(r->element[0]->str, "server");
	assert_string_equal(r->element[4]->str, "proto");
	assert_int_equal(r->element[5]->type, REDIS_REPLY_INTEGER);
	assert_int_equal(r->element[5]->integer, 2);
	freeReplyObject(r);
	redisFree(c);

	snprintf(hello3, sizeof hello3, "%s",
	         "%7\r\n$6\r\nserver\r\n$5\r\ntally\r\n$7\r\nversion\r\n");
	{
		char buf[4096];
		int closed;
		const char *req = "*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n"
		                  "*2\r\n$3\r\nGET\r\n$7\r\nmissing\r\n"
		                  "*1\r\n$4\r\nQUIT\r\n";
		size_t n = raw_exchange(req, strlen(req), buf, sizeof buf, 2000,
		                        &closed);

		assert_true(n > strlen(hello3));
		if (memcmp(buf, hello3, strlen(hello3)) != 0)
			fail_msg("HELLO 3 is not a map: '%s'", buf);
		if (strstr(buf, "$5\r\nproto\r\n:3\r\n") == NULL)
			fail_msg("HELLO 3 has no proto 3: '%s'", buf);
		if (n < 12 || strcmp(buf + n - 12, "*0\r\n_\r\n+OK\r\n") != 0)
			fail_msg("RESP3 nil is not '_': '%s'", buf);
		assert_true(closed);
	}
	expect_raw("RESP2 nil", "GET missing\r\nQUIT\r\n", "$-1\r\n+OK\r\n", 1);
	expect_raw("RESP2 nil in an array", "MGET missing missing\r\nQUIT\r\n",
	           "*2\r\n$-1\r\n$-1\r\n+OK\r\n", 1);
}

static void test_resp3_types(void **state)
{
	char buf[65536];
	int closed;
	const char *req = "HELLO 3\r\n"
	                  "SET r3 5\r\n"
	                  "MGET r3 missing\r\n"
	                  "TALLY.ADD r3 like 1 9\r\n"
	                  "TALLY.HAS r3 like 1 8\r\n"
	                  "TALLY.COUNTS r3 1\r\n"
	                  "QUIT\r\n";
	/* SET, MGET with a nil, ADD, HAS nil, then the COUNTS map */
	const char *want = "+OK\r\n*2\r\n$1\r\n5\r\n_\r\n:1\r\n_\r\n%";
	size_t n;
	char *p;

	(void)state;
	n = raw_exchange(req, strlen(req), buf, sizeof buf, 3000, &closed);
	assert_true(closed);
	assert_true(n > 0);
	/* skip the HELLO map: up to the end of "modules" => [] */
	p = strstr(buf, "$7\r\nmodules\r\n*0\r\n");
	if (p == NULL)
		fail_msg("no HELLO 3 reply: '%s'", buf);
	p += strlen("$7\r\nmodules\r\n*0\r\n");
	if (strncmp(p, want, strlen(want)) != 0)
		fail_msg("RESP3 replies: want '+OK *2 $1 5 _ :1 _ %%...', "
		         "got '%s'", p);
	p = strstr(p, "%");
	assert_non_null(p);
	if (strstr(p, "\r\n$4\r\nlike\r\n:1\r\n$8\r\nfavorite\r\n:0\r\n") == NULL)
		fail_msg("TALLY.COUNTS map: '%s'", p);
	if (n < 5 || strcmp(buf + n - 5, "+OK\r\n") != 0)
		fail_msg("QUIT: '%s'", buf + (n > 40 ? n - 40 : 0));
}

/* ---- 4. bad protocol input -------------------------------------------------------- */

typedef struct bad_case {
	const char *name;
	const char *bytes;      /* NULL: built by the test */
	size_t len;             /* 0: strlen */
	const char *want_prefix;/* the reply must start with this, or NULL:
	                           any error reply or a silent close */
	int must_close;
	int excess;             /* bytes follow the error: tallyd closes with
	                           them unread, so the kernel resets the
	                           connection and the reply may be lost */
} bad_case;

static long long g_witness;

static void witness_check(redisContext *w, const char *after)
{
	redisReply *r = redisCommand(w, "INCR witness");

	if (r == NULL)
		fail_msg("after %s: the witness client got no answer (%s)", after,
		         w->errstr);
	g_witness++;
	if (r->type != REDIS_REPLY_INTEGER || r->integer != g_witness)
		fail_msg("after %s: witness INCR want %lld, got type %d %lld",
		         after, g_witness, r->type, r->integer);
	freeReplyObject(r);
}

/* Run one bad input: the answer is an error reply (maybe after the replies
 * to valid commands before it) and/or a close; nothing else. */
static void run_bad(redisContext *w, const bad_case *bc)
{
	static char buf[1 << 20];
	size_t len = bc->len ? bc->len : strlen(bc->bytes);
	int closed, fd = raw_connect();
	size_t n;

	raw_send(fd, bc->bytes, len);
	n = raw_read(fd, buf, sizeof buf, 0, 1500, &closed);
	if (!closed) {
		/* Not closed: the connection must still be in sync. */
		raw_send(fd, "\r\nPING\r\n", 8);
		n += raw_read(fd, buf + n, sizeof buf - n, 0, 1000, &closed);
	}
	close(fd);
	if (bc->excess && n == 0 && closed) {
		print_message("    (closed; the reply was lost to the reset)\n");
		witness_check(w, bc->name);
		return;
	}
	if (bc->want_prefix != NULL &&
	    strncmp(buf, bc->want_prefix, strlen(bc->want_prefix)) != 0)
		fail_msg("%s: want a reply starting '%s', got '%.200s'%s",
		         bc->name, bc->want_prefix, buf, closed ? " + close" : "");
	if (bc->must_close && !closed)
		fail_msg("%s: the connection was not closed (got '%.200s')",
		         bc->name, buf);
	if (bc->want_prefix == NULL && n > 0 && buf[0] != '-' && buf[0] != '+')
		fail_msg("%s: want an error reply or a close, got '%.200s'",
		         bc->name, buf);
	witness_check(w, bc->name);
}

static void test_bad_protocol(void **state)
{
	static char big[200000];
	static char nested[60000];
	redisContext *w = connect_hiredis();
	const bad_case cases[] = {
		{ "negative bulk length", "*1\r\n$-5\r\n", 0,
		  "-ERR Protocol error: invalid bulk length\r\n", 1, 0 },
		{ "null bulk as an argument", "*1\r\n$-1\r\n", 0,
		  "-ERR Protocol error: invalid bulk length\r\n", 1, 0 },
		{ "negative multibulk count", "*-5\r\nPING\r\n", 0, NULL, 0, 0 },
		{ "multibulk count not a number", "*1x\r\n$4\r\nPING\r\n", 0,
		  "-ERR Protocol error: invalid multibulk length\r\n", 1, 0 },
		{ "huge multibulk count", "*2147483648\r\n", 0,
		  "-ERR Protocol error: invalid multibulk length\r\n", 1, 0 },
		{ "multibulk count over max-args", "*1048577\r\n", 0,
		  "-ERR Protocol error: invalid multibulk length\r\n", 1, 0 },
		{ "huge declared bulk $2147483648", "*1\r\n$2147483648\r\n", 0,
		  "-ERR Protocol error: invalid bulk length\r\n", 1, 0 },
		{ "bulk over max-bulk-bytes", "*2\r\n$4\r\nECHO\r\n$1048577\r\n", 0,
		  "-ERR Protocol error: invalid bulk length\r\n", 1, 0 },
		{ "bulk longer than declared", "*1\r\n$4\r\nPINGXX\r\n", 0,
		  "-ERR Protocol error: expected CRLF after bulk argument\r\n", 1, 0 },
		{ "bulk shorter than declared, then close", "*2\r\n$4\r\nECHO\r\n$10\r\nab", 0,
		  NULL, 0, 0 },
		{ "non-bulk in a multibulk", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n:5\r\n", 0,
		  "-ERR Protocol error: expected '$', got ':'\r\n", 1, 0 },
		{ "deeply nested arrays", NULL, 0,
		  "-ERR Protocol error: expected '$', got '*'\r\n", 1, 1 },
		{ "unbalanced quotes", "SET a \"b\r\n", 0,
		  "-ERR Protocol error: unbalanced quotes in request\r\n", 1, 0 },
		{ "unbalanced single quotes", "ECHO 'abc\r\n", 0,
		  "-ERR Protocol error: unbalanced quotes in request\r\n", 1, 0 },
		{ "closing quote followed by a letter", "ECHO \"a\"b\r\n", 0,
		  "-ERR Protocol error: unbalanced quotes in request\r\n", 1, 0 },
		{ "unterminated inline line over 64 KiB", NULL, 0,
		  "-ERR Protocol error: too big inline request\r\n", 1, 1 },
		{ "unterminated count line over 64 KiB", NULL, 0,
		  "-ERR Protocol error: too big mbulk count string\r\n", 1, 1 },
		{ "binary garbage", "\x00\x01\x02\xff\xfe\x80garbage\x00\r\n\x1b[2J", 17,
		  NULL, 0, 0 },
		{ "valid commands, then garbage",
		  "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n*1\r\n$x\r\n", 0,
		  "+PONG\r\n$2\r\nhi\r\n-ERR Protocol error: invalid bulk length\r\n", 1, 0 },
		{ "empty lines and a lone LF are ignored", "\r\n\r\n\n*0\r\nPING\r\n", 0,
		  "+PONG\r\n", 0, 0 },
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		bad_case bc = cases[i];

		if (strcmp(bc.name, "deeply nested arrays") == 0) {
			for (size_t k = 0; k + 4 <= sizeof nested; k += 4)
				memcpy(nested + k, "*1\r\n", 4);
			bc.bytes = nested;
			bc.len = sizeof nested;
		} else if (strcmp(bc.name, "unterminated inline line over 64 KiB") == 0) {
			memcpy(big, "ECHO ", 5);
			memset(big + 5, 'a', sizeof big - 5);
			bc.bytes = big;
			bc.len = sizeof big;
		} else if (strcmp(bc.name, "unterminated count line over 64 KiB") == 0) {
			big[0] = '*';
			memset(big + 1, '1', sizeof big - 1);
			bc.bytes = big;
			bc.len = sizeof big;
		}
		print_message("  bad input: %s\n", bc.name);
		run_bad(w, &bc);
	}
	redisFree(w);
}

/* ---- 5. 1000 connections of random garbage ------------------------------------------ */

#define GARBAGE_CONNS 1000

static void fill_garbage(char *p, size_t n)
{
	static const char *const tok[] = { "*", "$", "\r\n", "-1", "0", "999999",
	                                   "\"", "'", "PING", "INCR", "\n",
	                                   "TALLY.ADD", "*3\r\n", "$3\r\n" };
	size_t i = 0;

	while (i < n) {
		if (rnd() % 3 == 0) {
			const char *t = tok[rnd() % (sizeof tok / sizeof tok[0])];
			size_t l = strlen(t);

			if (i + l > n)
				l = n - i;
			memcpy(p + i, t, l);
			i += l;
		} else {
			p[i++] = (char)(rnd() & 0xff);
		}
	}
}

static void test_garbage_connections(void **state)
{
	static int fds[GARBAGE_CONNS];
	static char junk[8192];
	struct rlimit rl;
	redisContext *w = connect_hiredis();
	size_t wave = GARBAGE_CONNS, done = 0;
	uint64_t start = now_ms();

	(void)state;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < GARBAGE_CONNS + 64)
		wave = rl.rlim_cur > 128 ? (size_t)rl.rlim_cur - 64 : 64;
	while (done < GARBAGE_CONNS) {
		size_t n = GARBAGE_CONNS - done < wave ? GARBAGE_CONNS - done : wave;

		for (size_t i = 0; i < n; i++) {
			struct sockaddr_in a;
			int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

			assert_true(fd >= 0);
			memset(&a, 0, sizeof a);
			a.sin_family = AF_INET;
			a.sin_port = htons((uint16_t)g_port);
			a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
			if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
				fail_msg("garbage connection %zu: connect: %s",
				         done + i, strerror(errno));
			fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
			fds[i] = fd;
		}
		/* A third start a well-formed command with a big bulk, so the
		 * garbage after it is buffered as its payload for a while. */
		for (size_t i = 0; i < n; i += 3) {
			char hdr[64];
			int l = snprintf(hdr, sizeof hdr, "*2\r\n$4\r\nECHO\r\n$%u\r\n",
			                 (unsigned)(1000 + rnd() % 30000));

			(void)send(fds[i], hdr, (size_t)l, MSG_NOSIGNAL);
		}
		/* everyone sends, in a few rounds, while the witness works */
		for (int round = 0; round < 3; round++) {
			for (size_t i = 0; i < n; i++) {
				size_t len = 1 + (size_t)(rnd() % sizeof junk);

				fill_garbage(junk, len);
				(void)send(fds[i], junk, len, MSG_NOSIGNAL);
			}
			witness_check(w, "a round of garbage");
		}
		/* drain what came back, without waiting long */
		for (size_t i = 0; i < n; i++) {
			char sink[4096];

			while (recv(fds[i], sink, sizeof sink, 0) > 0)
				;
			close(fds[i]);
		}
		done += n;
		if (now_ms() - start > 120000)
			fail_msg("1000 garbage connections took over 120 s");
	}
	print_message("  %d garbage connections in %" PRIu64 " ms\n",
	              GARBAGE_CONNS, now_ms() - start);
	witness_check(w, "all garbage connections");
	expect_status(w, "PING", "PONG");
	redisFree(w);
	/* a new client is served normally */
	w = connect_hiredis();
	{
		char want[32];

		snprintf(want, sizeof want, "%lld", g_witness);
		expect_bulk(w, "GET witness", want);
	}
	redisFree(w);
}

int main(int argc, char **argv)
{
	const char *seed = getenv("TALLY_SEED");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pipeline_10k),
		cmocka_unit_test(test_error_texts),
		cmocka_unit_test(test_names_with_nul),
		cmocka_unit_test(test_resp3_raw),
		cmocka_unit_test(test_resp3_types),
		cmocka_unit_test(test_bad_protocol),
		cmocka_unit_test(test_garbage_connections),
	};

	if (argc != 2 || (g_port = atoi(argv[1])) <= 0) {
		fprintf(stderr, "usage: %s PORT\n", argv[0]);
		return 2;
	}
	g_rng = seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL);
	if (g_rng == 0)
		g_rng = 1;
	printf("resp_client: tallyd on 127.0.0.1:%d, TALLY_SEED=%" PRIu64 "\n",
	       g_port, g_rng);
	fflush(stdout);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
