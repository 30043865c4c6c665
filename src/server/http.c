/* http.c: tallyd's HTTP/1.1 request reader over http-parser, with no I/O:
 * bytes in, whole requests out, one at a time (the parser pauses after each
 * message so pipelined bytes wait in the buffer), every size bounded. Also
 * the response framing (status line and headers). */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <http_parser.h>

#include "core/parse.h"
#include "server/http.h"

enum {
	HTTP_HEADER_MAX_DEFAULT = 16 * 1024,
	HTTP_BODY_MAX_DEFAULT = 1024 * 1024,
	/* Header names are matched only against "Authorization": longer
	 * names are kept as "too long", never as bytes. */
	HTTP_FIELD_NAME_MAX = 32,
	HTTP_METHOD_MAX = 16,
	/* An Expect value longer than this is not "100-continue" with spaces. */
	HTTP_EXPECT_MAX = 32,
	/* An empty buffer larger than this is let go: one large body would
	 * otherwise stay with its keep-alive connection for life. */
	HTTP_BUF_KEEP = 64 * 1024
};

/* A growable byte buffer with a hard cap; always NUL-terminated once
 * anything was appended. */
typedef struct http_buf {
	char *p;
	size_t len;
	size_t cap;
} http_buf;

/* Which header callback ran last: http-parser may split a name or a value
 * over several callbacks, and a new name starts after a value. */
enum { HDR_NONE, HDR_FIELD, HDR_VALUE };

struct http_conn {
	http_parser parser;
	http_limits lim;
	/* Fed bytes not yet parsed: [in_off, in.len). Bounded by
	 * header_max + body_max (the pipeline backlog of one client). */
	http_buf in;
	size_t in_off;
	/* The message being read. */
	http_buf url;
	http_buf body;
	http_buf auth;
	http_buf path;                  /* decoded at message completion */
	http_buf query;
	char field[HTTP_FIELD_NAME_MAX + 1];
	size_t field_len;               /* > HTTP_FIELD_NAME_MAX: too long */
	int hdr_last;                   /* HDR_* */
	int in_auth;                    /* the current value is Authorization */
	int has_auth;
	int in_expect;                  /* the current value is Expect */
	char expect[HTTP_EXPECT_MAX + 1];
	size_t expect_len;              /* > HTTP_EXPECT_MAX: not 100-continue */
	int in_te;                      /* the current value is Transfer-Encoding */
	int te_count;                   /* Transfer-Encoding fields seen */
	char te[HTTP_EXPECT_MAX + 1];
	size_t te_len;                  /* > HTTP_EXPECT_MAX: not "chunked" */
	int continue_due;               /* a 100 Continue is owed */
	int head_taken;                 /* http_conn_take_head() gave it */
	size_t head_bytes;              /* bytes consumed before headers end */
	int headers_done;
	int begun;                      /* a byte of the message has come */
	int ready;                      /* a whole request is parsed (paused) */
	int delivered;                  /* ... and handed out by next() */
	int keep_alive;
	int finished;                   /* a last request was delivered */
	/* Sticky error. */
	int err_status;
	const char *err_msg;
};

static int buf_append(http_buf *b, const char *at, size_t len, size_t max)
{
	if (len > max || b->len > max - len)
		return -1;
	if (b->len + len + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + len + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (p == NULL)
			return -2;
		b->p = p;
		b->cap = cap;
	}
	if (len > 0)
		memcpy(b->p + b->len, at, len);
	b->len += len;
	b->p[b->len] = '\0';
	return 0;
}

static void buf_free(http_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

static void buf_shrink(http_buf *b)
{
	if (b->len == 0 && b->cap > HTTP_BUF_KEEP)
		buf_free(b);
}

/* Record the first error; later ones would only hide its cause. */
static int conn_fail(http_conn *c, int status, const char *msg)
{
	if (c->err_status == 0) {
		c->err_status = status;
		c->err_msg = msg;
	}
	return -1;
}

static int fail_append(http_conn *c, int rc, int status, const char *msg)
{
	if (rc == -2)
		return conn_fail(c, 503, "out of memory");
	return conn_fail(c, status, msg);
}

static http_conn *conn_of(http_parser *p)
{
	return (http_conn *)p->data;
}

/* ---- parser callbacks: a non-zero return stops the parser --------------- */

static int on_url(http_parser *p, const char *at, size_t len)
{
	http_conn *c = conn_of(p);
	int rc = buf_append(&c->url, at, len, c->lim.header_max);
	return rc ? fail_append(c, rc, 414, "URI too long") : 0;
}

/* Over the header budget: 414 while the request line is still being read
 * (RFC 9110 section 15.5.15), 431 once the header fields are. */
static int head_too_large(http_conn *c)
{
	if (c->hdr_last == HDR_NONE)
		return conn_fail(c, 414, "URI too long");
	return conn_fail(c, 431, "request header fields too large");
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
	http_conn *c = conn_of(p);
	/* A chunked body's trailer fields are dropped: a credential there
	 * would pass by whatever checked the real header. */
	if (c->headers_done)
		return 0;
	if (c->hdr_last != HDR_FIELD)
		c->field_len = 0;
	c->hdr_last = HDR_FIELD;
	for (size_t i = 0; i < len && c->field_len <= HTTP_FIELD_NAME_MAX; i++)
		c->field[c->field_len++] = at[i];
	return 0;
}

/* Header names and the Expect value compare without case (RFC 9110). */
static int equal_nocase(const char *s, size_t len, const char *lower)
{
	size_t n = strlen(lower);
	if (len != n)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (ch >= 'A' && ch <= 'Z')
			ch = (char)(ch - 'A' + 'a');
		if (ch != lower[i])
			return 0;
	}
	return 1;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
	http_conn *c = conn_of(p);
	if (c->headers_done)
		return 0;
	if (c->hdr_last != HDR_VALUE) {
		c->in_auth = equal_nocase(c->field, c->field_len,
		                          "authorization");
		c->in_expect = equal_nocase(c->field, c->field_len, "expect");
		if (c->in_expect)
			c->expect_len = 0;
		c->in_te = equal_nocase(c->field, c->field_len,
		                        "transfer-encoding");
		c->te_count += c->in_te;
		/* Two credentials are ambiguous: refuse rather than pick. */
		if (c->in_auth && c->has_auth)
			return conn_fail(c, 400, "duplicate Authorization header");
		c->has_auth |= c->in_auth;
	}
	c->hdr_last = HDR_VALUE;
	if (c->in_expect) {
		for (size_t i = 0; i < len && c->expect_len <= HTTP_EXPECT_MAX;
		     i++)
			c->expect[c->expect_len++] = at[i];
		return 0;
	}
	if (c->in_te) {
		for (size_t i = 0; i < len && c->te_len <= HTTP_EXPECT_MAX; i++)
			c->te[c->te_len++] = at[i];
		return 0;
	}
	if (!c->in_auth)
		return 0;
	int rc = buf_append(&c->auth, at, len, c->lim.header_max);
	return rc ? fail_append(c, rc, 431, "request header fields too large")
	          : 0;
}

static int conn_split_url(http_conn *c);

static int on_headers_complete(http_parser *p)
{
	http_conn *c = conn_of(p);
	c->headers_done = 1;
	if (p->http_major != 1)
		return conn_fail(c, 505, "only HTTP/1.0 and HTTP/1.1 are "
		                 "served");
	/* The target is whole: split now, so the head of a request whose
	 * body is awaited can be checked (http_conn_take_head). */
	if (conn_split_url(c) != 0)
		return -1;
	/* Only chunked is a transfer coding this server decodes (RFC 9112
	 * section 6.1: anything else is 501), and HTTP/1.0 has none: its
	 * framing would be in doubt. */
	if (c->te_count > 0) {
		size_t tl = c->te_len <= HTTP_EXPECT_MAX ? c->te_len : 0;
		const char *te = parse_trim_ows(c->te, &tl);

		if (p->http_minor == 0)
			return conn_fail(c, 400, "Transfer-Encoding in an "
			                 "HTTP/1.0 request");
		if (c->te_count > 1 || !equal_nocase(te, tl, "chunked"))
			return conn_fail(c, 501, "only the chunked transfer "
			                 "coding is supported");
	}
	/* Refuse a declared oversize body before reading any of it. */
	if ((p->flags & F_CONTENTLENGTH) && p->content_length > c->lim.body_max)
		return conn_fail(c, 413, "request body too large");
	/* A client that waits for "100 Continue" before its body (RFC 9110
	 * section 10.1.1) would otherwise stall until its own timeout. Only
	 * HTTP/1.1 asks, and only a body still to come needs it; another
	 * expectation is ignored, which the RFC allows. */
	int body_follows = (p->flags & F_CHUNKED) ||
	                   ((p->flags & F_CONTENTLENGTH) &&
	                    p->content_length > 0);
	/* Too long a value is never 100-continue. */
	size_t len = c->expect_len <= HTTP_EXPECT_MAX ? c->expect_len : 0;
	const char *expect = parse_trim_ows(c->expect, &len);
	if (equal_nocase(expect, len, "100-continue") &&
	    body_follows && p->http_major == 1 && p->http_minor >= 1)
		c->continue_due = 1;
	return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
	http_conn *c = conn_of(p);
	int rc = buf_append(&c->body, at, len, c->lim.body_max);
	return rc ? fail_append(c, rc, 413, "request body too large") : 0;
}

static int on_message_begin(http_parser *p)
{
	conn_of(p)->begun = 1;
	return 0;
}

static int on_message_complete(http_parser *p)
{
	http_conn *c = conn_of(p);
	c->ready = 1;
	/* An Upgrade (or CONNECT) hands the stream to another protocol we do
	 * not speak: answer this request, then close. */
	c->keep_alive = http_should_keep_alive(p) && !p->upgrade;
	http_parser_pause(p, 1);
	return 0;
}

static const http_parser_settings settings = {
	.on_message_begin = on_message_begin,
	.on_url = on_url,
	.on_header_field = on_header_field,
	.on_header_value = on_header_value,
	.on_headers_complete = on_headers_complete,
	.on_body = on_body,
	.on_message_complete = on_message_complete,
};

/* ---- the connection ----------------------------------------------------- */

http_conn *http_conn_create(const http_limits *lim)
{
	http_conn *c = calloc(1, sizeof *c);
	if (c == NULL)
		return NULL;
	c->lim.header_max = lim && lim->header_max ? lim->header_max
	                                           : HTTP_HEADER_MAX_DEFAULT;
	c->lim.body_max = lim && lim->body_max ? lim->body_max
	                                       : HTTP_BODY_MAX_DEFAULT;
	http_parser_init(&c->parser, HTTP_REQUEST);
	c->parser.data = c;
	return c;
}

void http_conn_free(http_conn *c)
{
	if (c == NULL)
		return;
	buf_free(&c->in);
	buf_free(&c->url);
	buf_free(&c->body);
	buf_free(&c->auth);
	buf_free(&c->path);
	buf_free(&c->query);
	free(c);
}

/* Forget the delivered request and let the parser go on. */
static void conn_reset_message(http_conn *c)
{
	c->url.len = c->body.len = c->auth.len = 0;
	c->path.len = c->query.len = 0;
	buf_shrink(&c->body);
	c->field_len = 0;
	c->hdr_last = HDR_NONE;
	c->in_auth = c->has_auth = 0;
	c->in_expect = 0;
	c->expect_len = 0;
	c->in_te = c->te_count = 0;
	c->te_len = 0;
	c->continue_due = 0;
	c->head_taken = 0;
	c->head_bytes = 0;
	c->headers_done = 0;
	c->begun = 0;
	c->ready = c->delivered = 0;
	http_parser_pause(&c->parser, 0);
}

/* One part of the parsed URL (path, query) in c->url; "" when absent. */
static const char *url_field(const http_conn *c,
                             const struct http_parser_url *u,
                             enum http_parser_url_fields f, size_t *len)
{
	*len = 0;
	if (!(u->field_set & (1u << f)))
		return "";
	assert((size_t)u->field_data[f].off + u->field_data[f].len <=
	       c->url.len);
	*len = u->field_data[f].len;
	return c->url.p + u->field_data[f].off;
}

/* Percent-decode the URL's path into c->path, keep its query raw. A NUL
 * would cut the NUL-terminated path short: %00 is refused, so a counter
 * whose name holds one (RESP can make it) cannot be named here. */
static int conn_split_url(http_conn *c)
{
	struct http_parser_url u;
	http_parser_url_init(&u);
	if (c->url.len == 0 ||
	    http_parser_parse_url(c->url.p, c->url.len, 0, &u) != 0)
		return conn_fail(c, 400, "malformed request target");
	size_t path_len, q_len;
	const char *path = url_field(c, &u, UF_PATH, &path_len);
	const char *q = url_field(c, &u, UF_QUERY, &q_len);
	if (buf_append(&c->path, "", 0, c->lim.header_max) != 0)
		return conn_fail(c, 503, "out of memory");
	for (size_t i = 0; i < path_len; i++) {
		char ch = path[i];
		if (ch == '%') {
			int byte = parse_hex_byte(path + i + 1,
			                          path_len - i - 1);
			if (byte < 0)
				return conn_fail(c, 400, "invalid percent-escape in path");
			if (byte == 0)
				return conn_fail(c, 400, "%00 in path");
			ch = (char)byte;
			i += 2;
		}
		/* The decoded path is never longer than the URL: no cap hit. */
		if (buf_append(&c->path, &ch, 1, c->lim.header_max) != 0)
			return conn_fail(c, 503, "out of memory");
	}
	if (buf_append(&c->query, q, q_len, c->lim.header_max) != 0)
		return conn_fail(c, 503, "out of memory");
	return 0;
}

/* The parser's own error, as a status: header overflow is 414 or 431, a callback's
 * refusal keeps the status it chose, anything else is malformed. */
static int conn_parser_error(http_conn *c)
{
	enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
	if (c->err_status != 0)
		return -1;
	if (e == HPE_HEADER_OVERFLOW)
		return head_too_large(c);
	/* http-parser says so of a chunk size past 2^64 too. */
	if (e == HPE_INVALID_CONTENT_LENGTH)
		return conn_fail(c, 400, c->headers_done &&
		                 (c->parser.flags & F_CHUNKED)
		                 ? "invalid chunk size"
		                 : "invalid Content-Length");
	return conn_fail(c, 400, http_errno_description(e));
}

/* Run the parser over buffered bytes until a request is whole, the bytes
 * run out, or an error. While the headers are incomplete it is given no
 * more than the rest of the header budget, so a head that has not ended
 * when the budget is spent is over it: caught at header_max + 1 bytes,
 * exactly, and never let through by ending on the byte past it. */
static int conn_parse(http_conn *c)
{
	while (!c->ready && c->err_status == 0 && c->in_off < c->in.len) {
		size_t avail = c->in.len - c->in_off;
		int in_head = !c->headers_done;
		if (in_head) {
			assert(c->head_bytes < c->lim.header_max);
			size_t room = c->lim.header_max - c->head_bytes;
			if (avail > room)
				avail = room;
		}
		size_t n = http_parser_execute(&c->parser, &settings,
		                               c->in.p + c->in_off, avail);
		c->in_off += n;
		if (in_head)
			c->head_bytes += n;
		enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
		if (e != HPE_OK && e != HPE_PAUSED)
			return conn_parser_error(c);
		if (!c->headers_done && c->head_bytes >= c->lim.header_max)
			return head_too_large(c);
	}
	return c->err_status != 0 ? -1 : 0;
}

/* Drop parsed bytes from the front so the buffer holds only what waits. */
static void conn_compact(http_conn *c)
{
	if (c->in_off == 0)
		return;
	memmove(c->in.p, c->in.p + c->in_off, c->in.len - c->in_off);
	c->in.len -= c->in_off;
	c->in_off = 0;
	buf_shrink(&c->in);
}

int http_conn_feed(http_conn *c, const char *buf, size_t len)
{
	assert(c != NULL);
	if (c->err_status != 0)
		return -1;
	if (c->finished)
		return 0; /* bytes after a last request are ignored */
	conn_compact(c);
	size_t backlog_max = c->lim.header_max + c->lim.body_max;
	int rc = buf_append(&c->in, buf, len, backlog_max);
	if (rc != 0)
		return fail_append(c, rc, 413, "too many pipelined bytes");
	return conn_parse(c) == 0 ? 0 : -1;
}

int http_conn_next(http_conn *c, http_request *rq)
{
	assert(c != NULL);
	assert(rq != NULL);
	if (c->err_status != 0)
		return -1;
	if (c->finished)
		return 0;
	if (c->ready && c->delivered) {
		conn_reset_message(c);
		if (conn_parse(c) != 0)
			return -1;
	}
	if (!c->ready)
		return 0;
	/* Empty buffers get their NUL terminator here. */
	if (buf_append(&c->body, "", 0, c->lim.body_max) != 0 ||
	    buf_append(&c->auth, "", 0, c->lim.header_max) != 0)
		return conn_fail(c, 503, "out of memory");
	c->delivered = 1;
	c->finished = !c->keep_alive;
	rq->method = http_method_str((enum http_method)c->parser.method);
	rq->path = c->path.p;
	rq->query = c->query.p;
	rq->body = c->body.p;
	rq->body_len = c->body.len;
	rq->authorization = c->has_auth ? c->auth.p : NULL;
	rq->keep_alive = c->keep_alive;
	return 1;
}

int http_conn_take_head(http_conn *c, http_request *head, int *want_continue)
{
	assert(c != NULL);
	if (want_continue != NULL)
		*want_continue = 0;
	/* Once the body is all here the client has stopped waiting. */
	if (!c->headers_done || c->head_taken || c->ready ||
	    c->err_status != 0)
		return 0;
	assert(c->path.p != NULL && c->query.p != NULL);
	c->head_taken = 1;
	if (want_continue != NULL)
		*want_continue = c->continue_due;
	if (head != NULL) {
		head->method = http_method_str(
			(enum http_method)c->parser.method);
		head->path = c->path.p;
		head->query = c->query.p;
		head->body = NULL;
		head->body_len = 0;
		/* A value's bytes always end with a NUL (buf_append). */
		head->authorization = !c->has_auth ? NULL
		                      : c->auth.p != NULL ? c->auth.p : "";
		head->keep_alive = http_should_keep_alive(&c->parser);
	}
	return 1;
}

size_t http_conn_pending(const http_conn *c)
{
	assert(c != NULL && c->in_off <= c->in.len);
	return c->in.len - c->in_off;
}

int http_conn_head_method(const http_conn *c)
{
	assert(c != NULL);
	return c->begun && c->parser.method == HTTP_HEAD;
}

int http_conn_midway(const http_conn *c)
{
	assert(c != NULL);
	if (c->err_status != 0 || c->finished)
		return 0;
	/* A delivered request's bytes are behind it: what is left over
	 * belongs to the next one, not yet parsed. */
	if (c->ready)
		return c->delivered && http_conn_pending(c) > 0;
	return c->begun || http_conn_pending(c) > 0;
}

int http_conn_error(const http_conn *c, const char **msg)
{
	assert(c != NULL);
	if (msg != NULL)
		*msg = c->err_msg ? c->err_msg : "";
	return c->err_status;
}

/* ---- response framing --------------------------------------------------- */

char *http_response_format(const http_response *rs, int keep_alive,
                           size_t *len)
{
	assert(rs != NULL);
	assert(len != NULL);
	char head[512];
	const char *reason = http_status_str((enum http_status)rs->status);
	const char *ctype = rs->content_type ? rs->content_type
	                                     : "application/json";
	/* A 401 names the scheme it wants (RFC 9110 section 11.6.1). */
	const char *auth = rs->status == 401
	                       ? "WWW-Authenticate: Bearer realm=\"tally\"\r\n"
	                       : "";
	size_t body_len = rs->body ? rs->body_len : 0;
	int n = snprintf(head, sizeof head,
	                 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
	                 "Content-Length: %zu\r\n%s%s%s%sConnection: %s\r\n\r\n",
	                 rs->status, reason, ctype, body_len, auth,
	                 rs->allow ? "Allow: " : "", rs->allow ? rs->allow : "",
	                 rs->allow ? "\r\n" : "",
	                 keep_alive ? "keep-alive" : "close");
	if (n < 0 || (size_t)n >= sizeof head)
		return NULL;
	/* A HEAD's answer is the GET's headers, its length included, and no
	 * body (RFC 9110 section 9.3.2). */
	if (rs->head)
		body_len = 0;
	char *out = malloc((size_t)n + body_len + 1);
	if (out == NULL)
		return NULL;
	memcpy(out, head, (size_t)n);
	if (body_len > 0)
		memcpy(out + n, rs->body, body_len);
	out[(size_t)n + body_len] = '\0';
	*len = (size_t)n + body_len;
	return out;
}
