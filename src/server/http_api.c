/* http_api.c: the JSON API of DESIGN.md's HTTP contract against the
 * engine: a table of routes (method, path pattern, handler), one short
 * handler per route, and one mapping of engine errors to HTTP statuses, so
 * bad input always gets a 4xx with {"error":"..."}. Reads answer at once;
 * writes are queued and answered when the engine completes them.
 *
 * Wire conventions (documented in the README's HTTP section):
 *  - ids (content, member) and seqs are u64. Out: a JSON number when
 *    <= 2^53 (exact in every JSON reader), a decimal string beyond. In: a
 *    non-negative JSON integer or a decimal string (needed above 2^63-1,
 *    which no JSON integer of jansson holds); digits only, no sign.
 *  - names in paths are percent-decoded; a counter name is the rest of the
 *    path, so it may hold '/' (send it as %2F or plain).
 *  - pages: limit 1..TALLY_PAGE_MAX, default API_PAGE_DEFAULT; next_before
 *    is the seq to pass as before for the next page, null on the last one.
 *  - POST /v1/events takes at most API_EVENTS_MAX events per request. */
#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "core/keys.h"
#include "core/parse.h"
#include "server/http.h"

enum {
	API_PAGE_DEFAULT = 20,    /* entries per page when limit is absent */
	API_EVENTS_MAX = 1000,    /* events per POST /v1/events; one request
	                             stays one bounded group commit */
	API_CAPS_MAX = 4,         /* path captures in the longest pattern */
	API_MSG_MAX = 256,        /* error message bytes */
	API_SHOW_MAX = 64,        /* bytes of user input quoted in a message */
	API_QVAL_MAX = 32,        /* bytes of one decoded query value */
	/* JSON values in a body: an event has at most 8 fields, so this
	 * leaves room for API_EVENTS_MAX of them, and no more. The parse
	 * takes a few hundred bytes per value: bounding them before it
	 * keeps a 1 MiB body of tiny values from costing 80 MiB. */
	API_JSON_VALUES_MAX = API_EVENTS_MAX * 24
};

/* Ids up to 2^53 are exact as JSON numbers in every reader (doubles). */
#define API_JSON_EXACT_MAX (UINT64_C(1) << 53)

#define API_JSON_TYPE "application/json"
#define API_METRICS_TYPE "text/plain; version=0.0.4"

typedef struct api_cap {
	const char *p;
	size_t len;
} api_cap;

/* One request in flight: what a handler needs. A handler that queues
 * writes leaves them in *pend instead of answering in rs. */
typedef struct api_ctx {
	const http_api *api;
	const http_request *rq;
	http_response *rs;
	api_cap cap[API_CAPS_MAX];
	size_t ncap;
	void (*done)(void *arg);
	void *done_arg;
	http_pending **pend;
} api_ctx;

/* What a request's queued writes are answered with. */
enum pend_kind {
	PEND_INCR,   /* {"name","value"} */
	PEND_EVENT,  /* {"count"} */
	PEND_EVENTS  /* {"counts":[...]} */
};

typedef struct pend_write {
	http_pending *p;
	int err;
	int64_t result;
} pend_write;

struct http_pending {
	_Atomic size_t left;     /* writes not complete, +1 while queuing */
	void (*done)(void *arg);
	void *done_arg;
	enum pend_kind kind;
	json_t *doc;             /* the body: the writes' strings point in it */
	size_t n;
	tally_write *ws;         /* n */
	pend_write res[];        /* n */
};

typedef void (*api_fn)(api_ctx *x);

/* ---- replies ------------------------------------------------------------ */

static void reply_oom(http_response *rs)
{
	static const char msg[] = "{\"error\":\"out of memory\"}";
	rs->status = 503;
	rs->content_type = API_JSON_TYPE;
	rs->body = malloc(sizeof msg);
	rs->body_len = rs->body ? sizeof msg - 1 : 0;
	if (rs->body != NULL)
		memcpy(rs->body, msg, sizeof msg);
}

/* Send o (its reference is taken; NULL means it could not be built). */
static void reply_json(http_response *rs, int status, json_t *o)
{
	char *s = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (s == NULL) {
		reply_oom(rs);
		return;
	}
	rs->status = status;
	rs->content_type = API_JSON_TYPE;
	rs->body = s;
	rs->body_len = strlen(s);
}

static void reply_msg(http_response *rs, int status, const char *msg)
{
	json_t *o = json_object();
	/* Messages are ASCII (user bytes pass through show()), so
	 * json_string cannot refuse them as bad UTF-8. */
	if (o != NULL && json_object_set_new(o, "error", json_string(msg)) != 0) {
		json_decref(o);
		o = NULL;
	}
	reply_json(rs, status, o);
}

__attribute__((format(printf, 3, 4)))
static void reply_err(http_response *rs, int status, const char *fmt, ...)
{
	char msg[API_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	reply_msg(rs, status, msg);
}

/* User bytes for a message: printable ASCII only, the rest as '?', cut at
 * API_SHOW_MAX bytes, so a message is always short and valid JSON text. */
static const char *show(const char *p, size_t len, char out[API_SHOW_MAX + 4])
{
	size_t n = len < API_SHOW_MAX ? len : API_SHOW_MAX;
	for (size_t i = 0; i < n; i++)
		out[i] = p[i] >= 0x20 && p[i] < 0x7f ? p[i] : '?';
	if (n < len)
		memcpy(out + n, "...", 3), n += 3;
	out[n] = '\0';
	return out;
}

/* The status of an engine error: bad input is 4xx, a store that cannot
 * serve is 503, what this store cannot do (ENOTSUP) is 501, stored data
 * failing validation is the server's fault. */
static int api_status(int err)
{
	switch (err) {
	case TALLY_EINVAL:
	case TALLY_EKEYSIZE:
	case TALLY_EOVERFLOW:
	case TALLY_EMODE:
		return 400;
	case TALLY_ENOTFOUND:
	case TALLY_ENOTYPE:
		return 404;
	case TALLY_ETYPEEXISTS:
	case TALLY_ELIMIT:
		return 409;
	case TALLY_ENOMEM:
	case TALLY_EIO:
	case TALLY_ENOSPC:
	case TALLY_ECLOSED:
	case TALLY_EBUSY:
		return 503;
	case TALLY_ENOTSUP:
		return 501;
	default:
		return 500;
	}
}

/* The message of an engine error; ktype names the type for ENOTYPE. */
static void api_errmsg(int err, const char *ktype, char msg[API_MSG_MAX])
{
	char s[API_SHOW_MAX + 4];
	if (err == TALLY_ENOTYPE && ktype != NULL)
		(void)snprintf(msg, API_MSG_MAX, "unknown counting type '%s'",
		               show(ktype, strlen(ktype), s));
	else if (err == TALLY_ELIMIT) /* only an event's new content type */
		(void)snprintf(msg, API_MSG_MAX, "limit reached: at most %d "
		               "content types", TALLY_CTYPES_MAX);
	else
		(void)snprintf(msg, API_MSG_MAX, "%s", tally_strerror(err));
}

static void reply_engine(http_response *rs, int err, const char *ktype)
{
	char msg[API_MSG_MAX];
	api_errmsg(err, ktype, msg);
	reply_msg(rs, api_status(err), msg);
}

/* ---- values ------------------------------------------------------------- */

/* An id or a query number: 1..20 digits, leading zeros allowed, no sign
 * or space, no overflow. Unlike RESP's ids (up to 64 bytes, for padded
 * ids from redis-benchmark), HTTP keeps the width of an unpadded u64. */
static int parse_u64(const char *p, size_t len, uint64_t *out)
{
	return parse_u64_digits(p, len, PARSE_U64_DIGITS, out);
}

static json_t *json_u64(uint64_t v)
{
	char s[24];
	if (v <= API_JSON_EXACT_MAX)
		return json_integer((json_int_t)v);
	(void)snprintf(s, sizeof s, "%" PRIu64, v);
	return json_string(s);
}

/* An id from JSON: a non-negative integer or a strict decimal string. */
static int json_get_u64(const json_t *v, uint64_t *out)
{
	if (json_is_integer(v)) {
		json_int_t i = json_integer_value(v);
		if (i < 0)
			return -1;
		*out = (uint64_t)i;
		return 0;
	}
	if (json_is_string(v))
		return parse_u64(json_string_value(v), json_string_length(v), out);
	return -1;
}

/* Set key to a new value; on failure the object is dropped, so a chain of
 * sets ends in NULL and reply_json answers 503. */
static json_t *jset(json_t *o, const char *key, json_t *v)
{
	if (o == NULL) {
		json_decref(v);
		return NULL;
	}
	if (json_object_set_new(o, key, v) != 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* Append v to the array a; on failure the array is dropped, as in jset. */
static json_t *jpush(json_t *a, json_t *v)
{
	if (a == NULL) {
		json_decref(v);
		return NULL;
	}
	if (json_array_append_new(a, v) != 0) { /* it dropped v */
		json_decref(a);
		return NULL;
	}
	return a;
}

/* A counter name as given when it is UTF-8; otherwise percent-encoded
 * (every byte outside printable ASCII, and '%'), flagged by
 * "name_encoding":"percent", since JSON text cannot carry raw bytes. */
static json_t *jset_name(json_t *o, const char *p, size_t len)
{
	json_t *s = json_stringn(p, len);
	if (s != NULL)
		return jset(o, "name", s);
	char *enc = malloc(len * 3 + 1);
	if (enc == NULL) {
		json_decref(o);
		return NULL;
	}
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)p[i];
		if (ch >= 0x20 && ch < 0x7f && ch != '%')
			enc[n++] = (char)ch;
		else
			n += (size_t)snprintf(enc + n, 4, "%%%02X", ch);
	}
	o = jset(o, "name", json_stringn(enc, n));
	free(enc);
	return jset(o, "name_encoding", json_string("percent"));
}

/* ---- path captures and the query string --------------------------------- */

static int cap_id(api_ctx *x, size_t i, const char *what, uint64_t *out)
{
	char s[API_SHOW_MAX + 4];
	assert(i < x->ncap);
	if (parse_u64(x->cap[i].p, x->cap[i].len, out) == 0)
		return 0;
	reply_err(x->rs, 400, "invalid %s id '%s': want a decimal u64", what,
	          show(x->cap[i].p, x->cap[i].len, s));
	return -1;
}

/* A type name capture, copied NUL-terminated for the engine. */
static int cap_name(api_ctx *x, size_t i, const char *what,
                    char out[TALLY_NAME_MAX + 1])
{
	assert(i < x->ncap);
	if (x->cap[i].len > 0 && x->cap[i].len <= TALLY_NAME_MAX) {
		memcpy(out, x->cap[i].p, x->cap[i].len);
		out[x->cap[i].len] = '\0';
		if (name_valid(out, x->cap[i].len))
			return 0;
	}
	reply_err(x->rs, 400, "%s must be 1..%d bytes of [A-Za-z0-9_.:-]", what,
	          TALLY_NAME_MAX);
	return -1;
}

/* Decode a query value ("+" is a space there) into val[API_QVAL_MAX]. */
static int query_decode(const char *p, size_t len, char *val)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++) {
		int ch = p[i] == '+' ? ' ' : p[i];
		if (p[i] == '%') {
			ch = parse_hex_byte(p + i + 1, len - i - 1);
			if (ch <= 0) /* malformed, or %00 */
				return -1;
			i += 2;
		}
		if (n + 1 >= API_QVAL_MAX)
			return -1;
		val[n++] = (char)ch;
	}
	val[n] = '\0';
	return 0;
}

/* The first value of key: 0 found, 1 absent, -1 malformed. */
static int query_find(const char *q, const char *key, char *val)
{
	size_t klen = strlen(key);
	while (*q != '\0') {
		size_t pair = strcspn(q, "&");
		const char *eq = memchr(q, '=', pair);
		size_t name = eq ? (size_t)(eq - q) : pair;
		if (name == klen && memcmp(q, key, klen) == 0) {
			if (eq == NULL)
				return -1;
			return query_decode(eq + 1, pair - name - 1, val);
		}
		q += pair;
		q += *q == '&';
	}
	return 1;
}

/* A u64 query parameter in lo..hi, dflt when absent; replies 400 else. */
static int query_u64(api_ctx *x, const char *key, uint64_t dflt, uint64_t lo,
                     uint64_t hi, uint64_t *out)
{
	char val[API_QVAL_MAX];
	int rc = query_find(x->rq->query ? x->rq->query : "", key, val);
	*out = dflt;
	/* Absent or empty ("?limit=&before=", as README writes the route):
	 * the default. */
	if (rc == 1 || (rc == 0 && val[0] == '\0'))
		return 0;
	if (rc == 0 && parse_u64(val, strlen(val), out) == 0 && *out >= lo &&
	    *out <= hi)
		return 0;
	reply_err(x->rs, 400, "'%s' must be an integer in %" PRIu64 "..%" PRIu64,
	          key, lo, hi);
	return -1;
}

static int query_page(api_ctx *x, size_t *limit, uint64_t *before)
{
	uint64_t l;
	if (query_u64(x, "limit", API_PAGE_DEFAULT, 1, TALLY_PAGE_MAX, &l) != 0 ||
	    query_u64(x, "before", 0, 0, UINT64_MAX, before) != 0)
		return -1;
	*limit = (size_t)l;
	return 0;
}

/* ---- small routes ------------------------------------------------------- */

static void h_healthz(api_ctx *x)
{
	reply_json(x->rs, 200, jset(json_object(), "status", json_string("ok")));
}

static void h_metrics(api_ctx *x)
{
	size_t len = 0;
	if (x->api->metrics == NULL) {
		reply_msg(x->rs, 404, "metrics not enabled");
		return;
	}
	char *text = x->api->metrics(x->api->metrics_arg, &len);
	if (text == NULL) {
		reply_oom(x->rs);
		return;
	}
	x->rs->status = 200;
	x->rs->content_type = API_METRICS_TYPE;
	x->rs->body = text;
	x->rs->body_len = len;
}

static int counter_name_ok(api_ctx *x)
{
	if (x->cap[0].len >= 1 && x->cap[0].len <= TALLY_KEY_MAX)
		return 1;
	reply_err(x->rs, 400, "counter name must be 1..%d bytes", TALLY_KEY_MAX);
	return 0;
}

static void reply_counter(http_response *rs, const char *name, size_t len,
                          int64_t value)
{
	json_t *o = jset_name(json_object(), name, len);
	reply_json(rs, 200, jset(o, "value", json_integer(value)));
}

static void h_counter_get(api_ctx *x)
{
	int64_t v = 0;
	/* A name no counter can have names none, as RESP's GET says. */
	if (x->cap[0].len == 0 || x->cap[0].len > TALLY_KEY_MAX) {
		reply_msg(x->rs, 404, "no such counter");
		return;
	}
	int rc = tally_get(x->api->t, x->cap[0].p, x->cap[0].len, &v);
	if (rc == TALLY_ENOTFOUND)
		reply_msg(x->rs, 404, "no such counter");
	else if (rc != TALLY_OK)
		reply_engine(x->rs, rc, NULL);
	else
		reply_counter(x->rs, x->cap[0].p, x->cap[0].len, v);
}

/* ---- request bodies ----------------------------------------------------- */

/* Containers json_values_count() tells apart; deeper ones count as
 * arrays, which only counts more. */
#define API_JSON_DEPTH_TRACKED 64

/* The values of a JSON text, read without parsing (a text that is not
 * JSON gets some count, and then the parser's error): the root, each
 * object member's value (a ':'), each array element (the first of a
 * non-empty array, then one per ','). *top receives the elements of a
 * top-level array (0 for anything else). */
static size_t json_values_count(const char *p, size_t n, size_t *top)
{
	uint8_t is_array[API_JSON_DEPTH_TRACKED];
	size_t values = 1, depth = 0;
	int in_str = 0, opened = 0; /* an array just opened: is it empty? */

	*top = 0;
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		int array_here;

		if (in_str) {
			if (c == '\\')
				i++;
			else if (c == '"')
				in_str = 0;
			continue;
		}
		if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
			continue;
		if (opened && c != ']') {
			values++;
			*top += depth == 1 && is_array[0];
		}
		opened = 0;
		array_here = depth == 0 || depth > API_JSON_DEPTH_TRACKED ||
		             is_array[depth - 1];
		switch (c) {
		case '"':
			in_str = 1;
			break;
		case '[':
		case '{':
			if (depth < API_JSON_DEPTH_TRACKED)
				is_array[depth] = c == '[';
			depth++;
			opened = c == '[';
			break;
		case ']':
		case '}':
			if (depth > 0)
				depth--;
			break;
		case ',':
			if (array_here) {
				values++;
				*top += depth == 1 && is_array[0];
			}
			break;
		case ':':
			values++;
			break;
		default:
			break;
		}
	}
	return values;
}

/* The body as JSON; replies 400 (and returns NULL) when it is not, or
 * holds more values than any request needs, or (events_max not 0) is an
 * array of more than events_max elements: both told before the parse,
 * which takes a few hundred bytes per value. */
static json_t *body_json(api_ctx *x, size_t events_max)
{
	json_error_t e;
	char s[API_SHOW_MAX + 4];
	size_t top, values = json_values_count(x->rq->body, x->rq->body_len,
	                                       &top);
	json_t *j;

	if (events_max > 0 && top > events_max) {
		reply_err(x->rs, 400, "at most %zu events per request",
		          events_max);
		return NULL;
	}
	if (values > API_JSON_VALUES_MAX) {
		reply_err(x->rs, 400, "the body holds more than %d JSON values",
		          API_JSON_VALUES_MAX);
		return NULL;
	}
	j = json_loadb(x->rq->body, x->rq->body_len,
	               JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &e);
	if (j == NULL)
		reply_err(x->rs, 400, "invalid JSON: %s (line %d, column %d)",
		          show(e.text, strlen(e.text), s), e.line, e.column);
	return j;
}

/* Refuse keys outside `known` (NULL-terminated): a typo such as "memebr"
 * would otherwise count silently for someone else. */
static int check_keys(json_t *o, const char *const *known, char *msg)
{
	const char *key;
	json_t *v;
	char s[API_SHOW_MAX + 4];
	json_object_foreach(o, key, v) {
		size_t i = 0;
		while (known[i] != NULL && strcmp(known[i], key) != 0)
			i++;
		if (known[i] == NULL) {
			(void)snprintf(msg, API_MSG_MAX, "unknown field '%s'",
			               show(key, strlen(key), s));
			return -1;
		}
	}
	return 0;
}

/* An optional idempotency token: a string of 1..TALLY_ID_MAX bytes. */
static int get_token(json_t *o, const void **id, size_t *id_len, char *msg)
{
	json_t *v = json_object_get(o, "id");
	*id = NULL;
	*id_len = 0;
	if (v == NULL)
		return 0;
	if (!json_is_string(v) || json_string_length(v) < 1 ||
	    json_string_length(v) > TALLY_ID_MAX) {
		(void)snprintf(msg, API_MSG_MAX,
		               "'id' must be a string of 1..%d bytes", TALLY_ID_MAX);
		return -1;
	}
	*id = json_string_value(v);
	*id_len = json_string_length(v);
	return 0;
}

/* An int64 field of a body object, or dflt when absent. */
static int get_i64(json_t *o, const char *key, int64_t dflt, int64_t *out,
                   char *msg)
{
	json_t *v = json_object_get(o, key);
	*out = dflt;
	if (v == NULL)
		return 0;
	if (json_is_integer(v)) {
		*out = (int64_t)json_integer_value(v);
		return 0;
	}
	(void)snprintf(msg, API_MSG_MAX, "'%s' must be an integer", key);
	return -1;
}

/* The body of POST .../incr: empty, or {"by":n,"id":"token"}. Replies
 * 400 and returns -1 when it is neither; *doc is NULL or the parsed body. */
static int incr_args(api_ctx *x, json_t **doc, tally_write *w)
{
	static const char *const keys[] = {"by", "id", NULL};
	char msg[API_MSG_MAX];
	w->value = 1;
	*doc = NULL;
	if (x->rq->body_len == 0)
		return 0;
	if ((*doc = body_json(x, 0)) == NULL)
		return -1;
	if (!json_is_object(*doc)) {
		reply_msg(x->rs, 400, "body must be a JSON object");
		return -1;
	}
	if (check_keys(*doc, keys, msg) != 0 ||
	    get_token(*doc, &w->id, &w->id_len, msg) != 0 ||
	    get_i64(*doc, "by", 1, &w->value, msg) != 0) {
		reply_msg(x->rs, 400, msg);
		return -1;
	}
	return 0;
}

/* ---- queued writes ------------------------------------------------------ */

/* A pending answer for n writes (0: an empty array, answered at once);
 * NULL (after a 503) when out of memory. */
static http_pending *pend_new(api_ctx *x, enum pend_kind kind, size_t n)
{
	http_pending *p = calloc(1, sizeof *p + n * sizeof p->res[0]);
	tally_write *ws = calloc(n ? n : 1, sizeof *ws);

	if (p == NULL || ws == NULL) {
		free(p);
		free(ws);
		reply_oom(x->rs);
		return NULL;
	}
	p->kind = kind;
	p->n = n;
	p->ws = ws;
	p->done = x->done;
	p->done_arg = x->done_arg;
	return p;
}

static void pend_free(http_pending *p)
{
	if (p == NULL)
		return;
	json_decref(p->doc);
	free(p->ws);
	free(p);
}

/* Whether every write of p failed with the same 503 error. */
static int pend_all_unavailable(const http_pending *p)
{
	for (size_t i = 0; i < p->n; i++)
		if (p->res[i].err != p->res[0].err ||
		    api_status(p->res[i].err) != 503)
			return 0;
	return p->n > 0;
}

static void pend_answer(http_pending *p, http_response *rs)
{
	const pend_write *r = p->res;
	const char *ktype = p->ws[0].event.ktype;

	if (p->kind == PEND_INCR && r->err == TALLY_OK)
		reply_counter(rs, p->ws[0].key, p->ws[0].key_len, r->result);
	else if (p->kind == PEND_EVENT && r->err == TALLY_OK)
		reply_json(rs, 200, jset(json_object(), "count",
		                         json_integer(r->result)));
	else if (p->kind != PEND_EVENTS)
		reply_engine(rs, r->err, p->kind == PEND_EVENT ? ktype : NULL);
	else {
		/* {"counts":[n | {"error":...}, ...]}: 207 (Multi-Status)
		 * when some failed in the engine. */
		json_t *counts = json_array();
		int failed = 0;

		for (size_t i = 0; i < p->n && counts; i++) {
			char msg[API_MSG_MAX];
			json_t *v;

			if (r[i].err == TALLY_OK) {
				v = json_integer(r[i].result);
			} else {
				failed = 1;
				api_errmsg(r[i].err, p->ws[i].event.ktype, msg);
				v = jset(json_object(), "error", json_string(msg));
			}
			counts = jpush(counts, v);
		}
		/* Every write refused because the store refuses writes (a
		 * disk fault, a shutdown): the request as a whole failed, as
		 * a single event's would (503), and can be retried whole. */
		if (failed && counts && pend_all_unavailable(p)) {
			json_decref(counts);
			reply_engine(rs, r[0].err, NULL);
			return;
		}
		reply_json(rs, failed ? 207 : 200,
		           counts ? jset(json_object(), "counts", counts)
		                  : NULL);
	}
}

/* Runs on the thread that committed the write: record, and hand the
 * answer to its caller once the last write is in. */
static void pend_write_done(void *arg, int err, int64_t result)
{
	pend_write *r = arg;
	http_pending *p = r->p;

	r->err = err;
	r->result = result;
	if (atomic_fetch_sub(&p->left, 1) == 1)
		p->done(p->done_arg);
}

/* Queue every write of p, then leave it in *x->pend, or answer at once
 * when every write was refused or done before the last was queued.
 * Queued together, the writes share the committer's group commits. */
static void pend_start(api_ctx *x, http_pending *p)
{
	atomic_store(&p->left, p->n + 1);
	for (size_t i = 0; i < p->n; i++) {
		int rc;

		p->res[i].p = p;
		rc = tally_write_async(x->api->t, &p->ws[i], pend_write_done,
		                       &p->res[i]);
		if (rc != TALLY_OK) {
			p->res[i].err = rc;
			atomic_fetch_sub(&p->left, 1);
		}
	}
	if (atomic_fetch_sub(&p->left, 1) == 1) {
		pend_answer(p, x->rs);
		pend_free(p);
		return;
	}
	*x->pend = p;
}

static void h_counter_incr(api_ctx *x)
{
	json_t *doc = NULL;
	tally_write w;
	http_pending *p;

	memset(&w, 0, sizeof w);
	if (!counter_name_ok(x) || incr_args(x, &doc, &w) != 0) {
		json_decref(doc);
		return;
	}
	p = pend_new(x, PEND_INCR, 1);
	if (p == NULL) {
		json_decref(doc);
		return;
	}
	w.kind = TALLY_W_INCRBY;
	w.key = x->cap[0].p;
	w.key_len = x->cap[0].len;
	p->ws[0] = w;
	p->doc = doc; /* w.id points into it */
	pend_start(x, p);
}

/* ---- events ------------------------------------------------------------- */

/* The counting types, for checking a whole batch before queuing any of it;
 * NULL (and *n 0) on failure, with *err the engine's error (TALLY_ENOMEM
 * when out of memory). */
static tally_type_info *types_load(tally *t, size_t *n, int *err)
{
	size_t total = 0;
	tally_type_info *ty;

	*n = 0;
	*err = tally_types(t, NULL, 0, &total);
	if (*err == TALLY_OK && total == 0)
		*err = TALLY_ENOTYPE; /* built-in types are always there */
	if (*err != TALLY_OK)
		return NULL;
	ty = calloc(total, sizeof *ty);
	*err = ty == NULL ? TALLY_ENOMEM : tally_types(t, ty, total, n);
	if (*err != TALLY_OK) {
		free(ty);
		return NULL;
	}
	*n = *n < total ? *n : total; /* types added meanwhile are not in */
	return ty;
}

static int get_id(json_t *o, const char *key, int required, uint64_t *out,
                  char *msg)
{
	json_t *v = json_object_get(o, key);
	*out = 0;
	if (v == NULL && !required)
		return 0;
	if (v != NULL && json_get_u64(v, out) == 0)
		return 0;
	(void)snprintf(msg, API_MSG_MAX,
	               "'%s' must be a u64 (integer or decimal string)", key);
	return -1;
}

static int get_str(json_t *o, const char *key, const char **out, char *msg)
{
	json_t *v = json_object_get(o, key);
	*out = json_string_value(v);
	if (*out != NULL)
		return 0;
	(void)snprintf(msg, API_MSG_MAX, "'%s' must be a string", key);
	return -1;
}

/* JSON shape of one event into w (its strings stay in o). */
static int event_parse(json_t *o, tally_write *w, char *msg)
{
	static const char *const keys[] = {"ctype", "ktype", "content", "member",
	                                   "op", "delta", "at", "id", NULL};
	tally_event *ev = &w->event;
	const char *op = "add";
	memset(w, 0, sizeof *w);
	if (!json_is_object(o)) {
		(void)snprintf(msg, API_MSG_MAX, "an event must be a JSON object");
		return -1;
	}
	if (check_keys(o, keys, msg) != 0 || get_str(o, "ctype", &ev->ctype, msg) ||
	    get_str(o, "ktype", &ev->ktype, msg) ||
	    get_id(o, "content", 1, &ev->content, msg) ||
	    get_id(o, "member", 0, &ev->member, msg) ||
	    (json_object_get(o, "op") && get_str(o, "op", &op, msg)) ||
	    get_i64(o, "delta", 0, &ev->delta, msg) ||
	    get_i64(o, "at", 0, &ev->at_ms, msg) ||
	    get_token(o, &w->id, &w->id_len, msg))
		return -1;
	if (strcmp(op, "add") != 0 && strcmp(op, "remove") != 0) {
		(void)snprintf(msg, API_MSG_MAX, "'op' must be \"add\" or \"remove\"");
		return -1;
	}
	w->kind = op[0] == 'a' ? TALLY_W_ADD : TALLY_W_REMOVE;
	return 0;
}

/* The engine's checks of an event, made before anything is queued so a
 * batch is refused whole. Returns 0 or an HTTP status. */
static int event_check(const tally_write *w, const tally_type_info *ty,
                       size_t nty, char *msg)
{
	const tally_event *ev = &w->event;
	size_t i = 0;
	while (i < nty && strcmp(ty[i].name, ev->ktype) != 0)
		i++;
	if (i == nty) {
		api_errmsg(TALLY_ENOTYPE, ev->ktype, msg);
		return 404;
	}
	int unique = ty[i].mode == TALLY_MODE_UNIQUE;
	if (!name_valid(ev->ctype, strlen(ev->ctype)))
		(void)snprintf(msg, API_MSG_MAX, "'ctype' must be 1..%d bytes of "
		               "[A-Za-z0-9_.:-]", TALLY_NAME_MAX);
	else if (unique && ev->member == 0)
		(void)snprintf(msg, API_MSG_MAX, "'member' must be non-zero for "
		               "a unique counting type");
	else if (unique && (ev->delta < 0 || ev->delta > 1))
		(void)snprintf(msg, API_MSG_MAX, "'delta' must be 0 or 1 for a "
		               "unique counting type");
	else if (!unique && ev->delta < 0)
		(void)snprintf(msg, API_MSG_MAX, "'delta' must be positive (0 or "
		               "absent means 1)");
	else if (ev->at_ms < 0 || ev->at_ms > TALLY_AT_MS_MAX)
		(void)snprintf(msg, API_MSG_MAX, "'at' must be 0 (now) or "
		               "1..%" PRId64 " ms", (int64_t)TALLY_AT_MS_MAX);
	else
		return 0;
	return 400;
}

/* Parse and check every event of the body (an object or an array) into
 * ws[*n]; replies and returns -1 on the first bad one. */
static int events_load(api_ctx *x, json_t *doc, tally_write *ws, size_t *n)
{
	char msg[API_MSG_MAX];
	size_t nty;
	int arr = json_is_array(doc);
	*n = arr ? json_array_size(doc) : 1;
	int err;
	tally_type_info *ty = types_load(x->api->t, &nty, &err);
	if (ty == NULL) {
		if (err == TALLY_ENOMEM)
			reply_oom(x->rs);
		else
			reply_engine(x->rs, err, NULL);
		return -1;
	}
	for (size_t i = 0; i < *n; i++) {
		json_t *o = arr ? json_array_get(doc, i) : doc;
		int status = event_parse(o, &ws[i], msg) != 0
		                 ? 400
		                 : event_check(&ws[i], ty, nty, msg);
		if (status == 0)
			continue;
		free(ty);
		if (!arr)
			reply_msg(x->rs, status, msg);
		else
			reply_err(x->rs, status, "event %zu: %s", i, msg);
		return -1;
	}
	free(ty);
	return 0;
}

static void h_events(api_ctx *x)
{
	json_t *doc = body_json(x, API_EVENTS_MAX);
	http_pending *p;
	size_t n = 0;

	if (doc == NULL)
		return;
	if (json_is_array(doc) && json_array_size(doc) > API_EVENTS_MAX) {
		reply_err(x->rs, 400, "at most %d events per request",
		          API_EVENTS_MAX);
		json_decref(doc);
		return;
	}
	p = pend_new(x, json_is_array(doc) ? PEND_EVENTS : PEND_EVENT,
	             json_is_array(doc) ? json_array_size(doc) : 1);
	if (p == NULL) {
		json_decref(doc);
		return;
	}
	p->doc = doc; /* the writes' strings point into it */
	if (events_load(x, doc, p->ws, &n) != 0) {
		pend_free(p);
		return;
	}
	assert(n == p->n);
	pend_start(x, p);
}

/* ---- objects and members ------------------------------------------------ */

/* Captures ctype, content and (when ktype is not NULL) ktype. */
static int obj_args(api_ctx *x, char *ctype, uint64_t *content, char *ktype)
{
	if (cap_name(x, 0, "ctype", ctype) != 0 ||
	    cap_id(x, 1, "content", content) != 0)
		return -1;
	return ktype != NULL ? cap_name(x, 2, "ktype", ktype) : 0;
}

static void h_object_counts(api_ctx *x)
{
	char ctype[TALLY_NAME_MAX + 1];
	uint64_t content;
	size_t n = 0;
	if (obj_args(x, ctype, &content, NULL) != 0)
		return;
	/* Room for every type there can be: one call, no retry race. */
	tally_type_count *tc = calloc(TALLY_TYPES_MAX, sizeof *tc);
	if (tc == NULL) {
		reply_oom(x->rs);
		return;
	}
	int rc = tally_counts(x->api->t, ctype, content, tc, TALLY_TYPES_MAX, &n);
	if (rc != TALLY_OK) {
		free(tc);
		reply_engine(x->rs, rc, NULL);
		return;
	}
	json_t *counts = json_object();
	for (size_t i = 0; i < n && i < TALLY_TYPES_MAX && counts; i++)
		counts = jset(counts, tc[i].ktype, json_integer(tc[i].count));
	free(tc);
	json_t *o = jset(json_object(), "ctype", json_string(ctype));
	o = jset(o, "content", json_u64(content));
	reply_json(x->rs, 200, jset(o, "counts", counts));
}

static void h_object_count(api_ctx *x)
{
	char ctype[TALLY_NAME_MAX + 1], ktype[TALLY_NAME_MAX + 1];
	uint64_t content, at;
	int64_t count = 0;
	int rc;
	if (obj_args(x, ctype, &content, ktype) != 0 ||
	    query_u64(x, "at", 0, 1, (uint64_t)TALLY_AT_MS_MAX, &at) != 0)
		return;
	if (at != 0)
		rc = tally_count_at(x->api->t, ctype, ktype, content, (int64_t)at,
		                    &count);
	else
		rc = tally_count(x->api->t, ctype, ktype, content, &count);
	if (rc != TALLY_OK)
		reply_engine(x->rs, rc, ktype);
	else
		reply_json(x->rs, 200,
		           jset(json_object(), "count", json_integer(count)));
}

/* The fields every listed event has: when, which way, how much, seq. */
static json_t *jset_entry(json_t *o, int64_t at_ms, int64_t delta,
                          uint64_t seq)
{
	uint64_t amount = delta < 0 ? (uint64_t)0 - (uint64_t)delta
	                            : (uint64_t)delta;
	o = jset(o, "at", json_integer(at_ms));
	o = jset(o, "op", json_string(delta < 0 ? "remove" : "add"));
	o = jset(o, "delta", json_u64(amount));
	return jset(o, "seq", json_u64(seq));
}

/* {"entries":[...],"next_before":seq|null}: a full page may have more. */
static void reply_page(api_ctx *x, json_t *entries, size_t n, size_t limit,
                       uint64_t last_seq)
{
	json_t *next = n == limit && n > 0 ? json_u64(last_seq) : json_null();
	json_t *o = entries ? jset(json_object(), "entries", entries) : NULL;
	reply_json(x->rs, 200, jset(o, "next_before", next));
}

static void h_object_recent(api_ctx *x)
{
	char ctype[TALLY_NAME_MAX + 1], ktype[TALLY_NAME_MAX + 1];
	uint64_t content, before;
	size_t limit, n = 0;
	if (obj_args(x, ctype, &content, ktype) != 0 ||
	    query_page(x, &limit, &before) != 0)
		return;
	tally_entry *e = calloc(limit, sizeof *e);
	if (e == NULL) {
		reply_oom(x->rs);
		return;
	}
	int rc = tally_recent(x->api->t, ctype, ktype, content, limit, before, e,
	                      &n);
	if (rc != TALLY_OK) {
		free(e);
		reply_engine(x->rs, rc, ktype);
		return;
	}
	json_t *entries = json_array();
	for (size_t i = 0; i < n && entries; i++) {
		json_t *o = jset(json_object(), "member", json_u64(e[i].member));
		o = jset_entry(o, e[i].at_ms, e[i].delta, e[i].seq);
		entries = jpush(entries, o);
	}
	uint64_t last = n > 0 ? e[n - 1].seq : 0;
	free(e);
	reply_page(x, entries, n, limit, last);
}

static void h_object_member(api_ctx *x)
{
	char ctype[TALLY_NAME_MAX + 1], ktype[TALLY_NAME_MAX + 1];
	char s[API_SHOW_MAX + 4];
	uint64_t content, member;
	int64_t at = 0;
	if (obj_args(x, ctype, &content, ktype) != 0 ||
	    cap_id(x, 3, "member", &member) != 0)
		return;
	if (member == 0) {
		reply_msg(x->rs, 400, "member must be non-zero (0 is anonymous)");
		return;
	}
	int rc = tally_has(x->api->t, ctype, ktype, content, member, &at);
	if (rc == TALLY_ENOTFOUND)
		reply_msg(x->rs, 404, "not in");
	else if (rc == TALLY_EMODE)
		reply_err(x->rs, 400,
		          "'%s' is a total counting type: membership is kept for "
		          "unique types only", show(ktype, strlen(ktype), s));
	else if (rc != TALLY_OK)
		reply_engine(x->rs, rc, ktype);
	else
		reply_json(x->rs, 200,
		           jset(jset(json_object(), "member", json_u64(member)),
		                "at", json_integer(at)));
}

static void h_member_history(api_ctx *x)
{
	char ktype[TALLY_NAME_MAX + 1];
	uint64_t member, before;
	size_t limit, n = 0;
	if (cap_id(x, 0, "member", &member) != 0 ||
	    cap_name(x, 1, "ktype", ktype) != 0 || query_page(x, &limit, &before))
		return;
	if (member == 0) {
		reply_msg(x->rs, 400, "member must be non-zero (0 is anonymous)");
		return;
	}
	tally_history_entry *e = calloc(limit, sizeof *e);
	if (e == NULL) {
		reply_oom(x->rs);
		return;
	}
	int rc = tally_history(x->api->t, member, ktype, limit, before, e, &n);
	if (rc != TALLY_OK) {
		free(e);
		reply_engine(x->rs, rc, ktype);
		return;
	}
	json_t *entries = json_array();
	for (size_t i = 0; i < n && entries; i++) {
		json_t *o = jset(json_object(), "ctype", json_string(e[i].ctype));
		o = jset(o, "content", json_u64(e[i].content));
		o = jset_entry(o, e[i].at_ms, e[i].delta, e[i].seq);
		entries = jpush(entries, o);
	}
	uint64_t last = n > 0 ? e[n - 1].seq : 0;
	free(e);
	reply_page(x, entries, n, limit, last);
}

/* ---- routing ------------------------------------------------------------ */

/* Patterns: literal segments, "*" one segment (captured, may be empty),
 * "+" the rest of the path up to a literal suffix (captured, may hold '/',
 * at least one byte). */
typedef struct api_route {
	const char *method;
	const char *pattern;
	api_fn fn;
	int open;           /* served without a password */
} api_route;

static const api_route routes[] = {
	{"GET", "/healthz", h_healthz, 1},
	{"GET", "/metrics", h_metrics, 0},
	{"GET", "/v1/counters/+", h_counter_get, 0},
	{"POST", "/v1/counters/+/incr", h_counter_incr, 0},
	{"POST", "/v1/events", h_events, 0},
	{"GET", "/v1/objects/*/*", h_object_counts, 0},
	{"GET", "/v1/objects/*/*/*", h_object_count, 0},
	{"GET", "/v1/objects/*/*/*/recent", h_object_recent, 0},
	{"GET", "/v1/objects/*/*/*/members/*", h_object_member, 0},
	{"GET", "/v1/members/*/*", h_member_history, 0},
};

static int route_match(const char *pat, const char *path, api_cap *cap,
                       size_t *ncap)
{
	size_t n = 0;
	while (*pat == '/' && *path == '/') {
		pat++;
		path++;
		size_t seg = strcspn(path, "/");
		if (pat[0] == '+') {
			size_t sl = strlen(pat + 1), pl = strlen(path);
			if (pl <= sl || strcmp(path + pl - sl, pat + 1) != 0)
				return 0;
			assert(n < API_CAPS_MAX);
			cap[n++] = (api_cap){path, pl - sl};
			*ncap = n;
			return 1;
		}
		if (pat[0] == '*') {
			assert(n < API_CAPS_MAX);
			cap[n++] = (api_cap){path, seg};
			pat++;
		} else {
			size_t pseg = strcspn(pat, "/");
			if (pseg != seg || memcmp(pat, path, seg) != 0)
				return 0;
			pat += pseg;
		}
		path += seg;
	}
	*ncap = n;
	return *pat == '\0' && *path == '\0';
}

/* The token is checked through secret.h: in time that depends on neither
 * the password's length nor where a guess differs from it. "Bearer" is
 * matched in any case (RFC 7235 auth schemes are case-insensitive). */
static int auth_ok(const http_api *api, const http_request *rq)
{
	const char *h = rq->authorization;
	secret once;
	int ok;
	size_t len;

	if (api->password == NULL)
		return 1;
	if (h == NULL || strncasecmp(h, "Bearer", 6) != 0 ||
	    (h[6] != ' ' && h[6] != '\t'))
		return 0;
	h += 7;
	/* The parser keeps the white space that trails a value. */
	len = strlen(h);
	h = parse_trim_ows(h, &len);
	if (api->pass != NULL)
		return secret_matches(api->pass, h, len);
	if (secret_init(&once, api->password, strlen(api->password)) != 0)
		return 0;
	ok = secret_matches(&once, h, len);
	secret_clear(&once);
	return ok;
}

/* What the routes say of a request: the one it hits (NULL: none, its
 * captures in x), whether its path is known, which methods the path
 * takes, and whether it is served without the password. */
typedef struct route_find {
	const api_route *hit;
	int path_known, allow_get, allow_post, no_auth;
} route_find;

static route_find route_lookup(const http_request *rq, api_ctx *x)
{
	/* HEAD is GET without the body: every GET route takes it. */
	const char *method = strcmp(rq->method, "HEAD") == 0 ? "GET"
	                                                     : rq->method;
	route_find f = { 0 };
	int path_open = 1;

	for (size_t i = 0; i < sizeof routes / sizeof routes[0] && !f.hit;
	     i++) {
		if (!route_match(routes[i].pattern, rq->path, x->cap, &x->ncap))
			continue;
		f.path_known = 1;
		path_open &= routes[i].open;
		if (strcmp(routes[i].method, "GET") == 0)
			f.allow_get = 1;
		else
			f.allow_post = 1;
		if (strcmp(routes[i].method, method) == 0)
			f.hit = &routes[i];
	}
	/* Everything but /healthz is behind the password, unknown paths too:
	 * they would otherwise tell which routes exist. Another method on
	 * /healthz gets its 405 without one. */
	f.no_auth = f.hit != NULL ? f.hit->open : f.path_known && path_open;
	return f;
}

int http_api_admits(const http_api *api, const http_request *rq)
{
	assert(api != NULL && rq != NULL);
	api_ctx x = {.api = api, .rq = rq};

	return route_lookup(rq, &x).no_auth || auth_ok(api, rq);
}

int http_api_begin(const http_api *api, const http_request *rq,
                   http_response *rs, void (*done)(void *arg), void *arg,
                   http_pending **pend)
{
	assert(api != NULL && rq != NULL && rs != NULL);
	assert(done != NULL && pend != NULL);
	api_ctx x = {.api = api, .rq = rq, .rs = rs, .done = done,
	             .done_arg = arg, .pend = pend};
	int head = strcmp(rq->method, "HEAD") == 0;

	*pend = NULL;
	memset(rs, 0, sizeof *rs);
	route_find f = route_lookup(rq, &x);

	if (!f.no_auth && !auth_ok(api, rq))
		reply_msg(rs, 401, "authentication required");
	else if (f.hit != NULL)
		f.hit->fn(&x);
	else if (f.path_known) {
		reply_msg(rs, 405, "method not allowed");
		/* RFC 9110 section 15.5.6: every method of every route
		 * the path matches (a counter named "x/incr" is read with
		 * GET where POST increments counter "x"). */
		rs->allow = f.allow_get && f.allow_post ? "GET, HEAD, POST"
		            : f.allow_get               ? "GET, HEAD"
		                                        : "POST";
	} else {
		reply_msg(rs, 404, "not found");
	}
	rs->head = head;
	/* every path replies, or leaves its writes pending */
	assert((*pend != NULL) != (rs->status >= 200 && rs->status < 600));
	return *pend != NULL;
}

void http_api_finish(http_pending *pend, http_response *rs)
{
	assert(pend != NULL && rs != NULL);
	assert(atomic_load(&pend->left) == 0);
	memset(rs, 0, sizeof *rs);
	pend_answer(pend, rs);
	pend_free(pend);
}

/* http_api_handle()'s wait for its writes. */
typedef struct api_wait {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done;
} api_wait;

static void api_wait_done(void *arg)
{
	api_wait *w = arg;

	pthread_mutex_lock(&w->mu);
	w->done = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

void http_api_handle(const http_api *api, const http_request *rq,
                     http_response *rs)
{
	api_wait w = { .done = 0 };
	http_pending *p = NULL;

	pthread_mutex_init(&w.mu, NULL);
	pthread_cond_init(&w.cv, NULL);
	if (http_api_begin(api, rq, rs, api_wait_done, &w, &p)) {
		pthread_mutex_lock(&w.mu);
		while (!w.done)
			pthread_cond_wait(&w.cv, &w.mu);
		pthread_mutex_unlock(&w.mu);
		http_api_finish(p, rs);
	}
	pthread_cond_destroy(&w.cv);
	pthread_mutex_destroy(&w.mu);
}

void http_response_free(http_response *rs)
{
	if (rs == NULL)
		return;
	free(rs->body);
	rs->body = NULL;
	rs->body_len = 0;
}
