/* http.h: tallyd's HTTP/1.1 side with no I/O: a per-connection request
 * reader over http-parser (keep-alive, pipelining one request at a time,
 * size limits) and the JSON API of DESIGN.md's HTTP contract against the
 * engine: reads answered at once, writes answered once the engine has
 * completed them, so the network layer runs both on its event loop. */
#ifndef TALLY_SERVER_HTTP_H
#define TALLY_SERVER_HTTP_H

#include <stddef.h>

#include "server/secret.h"
#include "tally.h"

/* ---- request reader ----------------------------------------------------- */

typedef struct http_limits {
	size_t header_max;   /* bytes of request line + headers; 0: 16 KiB */
	size_t body_max;     /* bytes of body; 0: 1 MiB */
} http_limits;

typedef struct http_request {
	const char *method;  /* "GET", "POST", ... */
	char *path;          /* percent-decoded path, no query; NUL-terminated */
	char *query;         /* raw query string without '?', or "" */
	char *body;          /* NUL-terminated (not counted in body_len) */
	size_t body_len;
	char *authorization; /* the Authorization header's value, or NULL */
	int keep_alive;      /* the connection stays open after the reply */
} http_request;

typedef struct http_conn http_conn;

/* NULL limits: every default. NULL when out of memory. */
http_conn *http_conn_create(const http_limits *lim);
void http_conn_free(http_conn *c);                   /* NULL: no-op */

/* Hand bytes to the reader; they are copied. Returns 0, or -1 on a
 * malformed or oversize request (see http_conn_error()). */
int http_conn_feed(http_conn *c, const char *buf, size_t len);
/* 1: a whole request is in rq (valid until the next feed or next call);
 * 0: more bytes needed; -1: error, sticky: answer with
 * http_conn_error() and close. */
int http_conn_next(http_conn *c, http_request *rq);
/* 1 once per request whose headers are read and whose body has not all
 * arrived, so that the caller can refuse it on its head alone (answer,
 * then close) before taking in a body; else 0. head (may be NULL) gets
 * the request's method, path, query and authorization, body NULL; valid
 * until the next feed or next call. *want_continue (may be NULL) is 1
 * when the headers asked "Expect: 100-continue" (HTTP/1.1, a body to
 * come): unless it refuses the request, the caller writes an interim
 * "HTTP/1.1 100 Continue" before any answer to it. */
int http_conn_take_head(http_conn *c, http_request *head, int *want_continue);
/* Bytes fed and not yet taken by http_conn_next(). */
size_t http_conn_pending(const http_conn *c);
/* 1 while part of a request has come and not the rest of it (not once a
 * whole request is in, nor between requests). */
int http_conn_midway(const http_conn *c);
/* 1 when the request under way is a HEAD (its method read): an error
 * answered to it has no body. */
int http_conn_head_method(const http_conn *c);
/* Status (400, 413, 414, 431, 501, 503, 505) and message of the reader's
 * error. */
int http_conn_error(const http_conn *c, const char **msg);

/* ---- the JSON API -------------------------------------------------------- */

typedef struct http_response {
	int status;
	char *body;              /* malloc'd, JSON unless content_type says */
	size_t body_len;
	const char *content_type;/* static string */
	const char *allow;       /* a 405's Allow header (static), or NULL */
	int head;                /* a HEAD: the headers of the GET alone */
} http_response;

typedef struct http_api {
	tally *t;
	const char *password;    /* NULL: no auth; else Bearer required */
	/* /metrics text (malloc'd, caller frees); NULL: 404 for /metrics */
	char *(*metrics)(void *arg, size_t *len);
	void *metrics_arg;
	/* The password's digest (secret.h), made once; NULL: one is made
	 * from `password` for each request. */
	const secret *pass;
} http_api;

/* A request's writes queued in the engine, waiting to be answered. */
typedef struct http_pending http_pending;

/* 1 when rq (its head is enough) passes the password check: no password,
 * a route served without one, or the right Bearer token. */
int http_api_admits(const http_api *api, const http_request *rq);
/* Answer one request, or begin to. Never fails: bad input gets a 4xx with
 * {"error":"..."}; an engine I/O failure a 503. Returns 0 when rs holds
 * the answer (every read, and a write refused or completed at once);
 * 1 when writes are queued: done(arg) then runs once, on the engine's
 * committer thread, after the last of them completed, and the caller
 * answers with http_api_finish(*pend, rs). rq must stay as it is until
 * then. Blocks only while the engine's queue is full (backpressure). */
int http_api_begin(const http_api *api, const http_request *rq,
                   http_response *rs, void (*done)(void *arg), void *arg,
                   http_pending **pend);
/* The answer of writes begun by http_api_begin() (after done ran): fills
 * rs and frees pend. */
void http_api_finish(http_pending *pend, http_response *rs);
/* http_api_begin(), then a wait for its writes and http_api_finish():
 * blocks until they are durable, so not on an event loop. */
void http_api_handle(const http_api *api, const http_request *rq,
                     http_response *rs);
void http_response_free(http_response *rs);

/* The full response bytes (status line, Content-Type, Content-Length,
 * Connection) into a malloc'd buffer; NULL when out of memory. */
char *http_response_format(const http_response *rs, int keep_alive,
                           size_t *len);

#endif
