/* resp.h: the RESP codec of tallyd, with no I/O: a request parser (RESP2
 * multibulk and inline commands, as typed in telnet) and reply builders that
 * know the protocol version (RESP2 or RESP3 after HELLO 3). */
#ifndef TALLY_SERVER_RESP_H
#define TALLY_SERVER_RESP_H

#include <stddef.h>
#include <stdint.h>

/* ---- request parser ------------------------------------------------------
 * Usage, like hiredis's reader: get room with resp_parser_space(), read
 * bytes into it, resp_parser_commit() them, then call resp_parser_next()
 * until it returns RESP_AGAIN. Incomplete input is not an error. Errors are
 * sticky: once next() returned RESP_ERR the stream is out of sync, the
 * message says why (Redis's exact texts), and the connection is to be
 * closed after the error reply. */

typedef struct resp_limits {
	size_t bulk_max;     /* largest argument in bytes; 0: 1 MiB */
	size_t args_max;     /* most arguments in one command; 0: 1048576 */
	size_t inline_max;   /* longest inline command line; 0: 64 KiB */
	size_t request_max;  /* most bytes one command may take in all
	                        (arguments and framing); 0: 64 MiB */
} resp_limits;

enum { RESP_OK = 0, RESP_AGAIN = 1, RESP_ERR = -1, RESP_NOMEM = -2 };

/* One parsed command: argc arguments, argv[i] of lens[i] bytes. The
 * arguments live in the parser's buffer and stay valid until the next
 * call of resp_parser_space(), _commit(), _trim() or _free(); each argv[i] is
 * followed by a NUL byte (not counted in lens[i]). */
typedef struct resp_cmd {
	size_t argc;
	char **argv;
	size_t *lens;
} resp_cmd;

typedef struct resp_parser resp_parser;

/* NULL limits mean every default. Returns NULL when out of memory. */
resp_parser *resp_parser_create(const resp_limits *lim);
void resp_parser_free(resp_parser *p);              /* NULL: no-op */

/* Room to read into: at least `want` bytes (grows the buffer, within
 * request_max plus want). Returns NULL when out of memory. */
char *resp_parser_space(resp_parser *p, size_t want, size_t *avail);
/* n bytes were written at the pointer resp_parser_space() returned. */
void resp_parser_commit(resp_parser *p, size_t n);
/* Copy bytes in (space + memcpy + commit). RESP_OK or RESP_NOMEM. */
int resp_parser_feed(resp_parser *p, const char *buf, size_t len);

/* RESP_OK (cmd filled; an empty inline line yields no command and is
 * skipped), RESP_AGAIN (need more bytes), RESP_ERR (sticky; see
 * resp_parser_error()). */
int resp_parser_next(resp_parser *p, resp_cmd *cmd);
/* The error message, e.g. "Protocol error: invalid multibulk length";
 * "" when there is none. */
const char *resp_parser_error(const resp_parser *p);
/* Bytes buffered and not yet parsed (for memory accounting). */
size_t resp_parser_pending(const resp_parser *p);
/* A client not yet authenticated gets Redis's caps whatever the limits:
 * at most RESP_UNAUTH_ARGS_MAX arguments of RESP_UNAUTH_BULK_MAX bytes
 * per command ("Protocol error: unauthenticated multibulk length" /
 * "... bulk length"), so that it cannot make the server buffer much
 * before its password is checked. Takes effect at the next command. */
#define RESP_UNAUTH_ARGS_MAX 10
#define RESP_UNAUTH_BULK_MAX 16384
void resp_parser_set_unauth(resp_parser *p, int unauth);
/* Between commands (nothing buffered), give back a buffer or argument
 * table grown past what a typical command needs, so that one big request
 * does not keep its memory for the connection's life. Invalidates the
 * last command's argv, as resp_parser_space() does. */
void resp_parser_trim(resp_parser *p);

/* ---- reply builders ------------------------------------------------------
 * Replies are appended to an output buffer with a hard size bound: past
 * `max` the buffer stops growing, `overflow` is set and the connection is
 * to be closed (the client does not read its replies). */

typedef struct rbuf {
	char *data;
	size_t len;
	size_t cap;
	size_t max;     /* 0: unbounded */
	int overflow;
	int proto;      /* 2 or 3 */
} rbuf;

void rbuf_init(rbuf *b, size_t max, int proto);
void rbuf_free(rbuf *b);
/* Drop the first n bytes (sent). */
/* Drop the first n bytes (sent). Emptied, a buffer grown past 64 KiB is
 * freed (data NULL, cap 0) and grows again from its first append. */
void rbuf_consume(rbuf *b, size_t n);
void rbuf_append(rbuf *b, const void *p, size_t n);

void reply_status(rbuf *b, const char *s);         /* +OK */
/* An error line; msg starts with its code ("ERR ...", "WRONGTYPE ...").
 * CR and LF in msg are replaced by spaces. */
void reply_error(rbuf *b, const char *msg);
void reply_errorf(rbuf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void reply_int(rbuf *b, int64_t v);                /* :42 */
void reply_bulk(rbuf *b, const void *p, size_t n); /* $3 foo */
void reply_cstr(rbuf *b, const char *s);           /* bulk of a C string */
void reply_nil(rbuf *b);          /* RESP2 $-1, RESP3 _ */
void reply_nil_array(rbuf *b);    /* RESP2 *-1, RESP3 _ */
void reply_array(rbuf *b, size_t n);
/* A map of n pairs: RESP3 %n, RESP2 an array of 2n. */
void reply_map(rbuf *b, size_t n);
/* RESP3 #t/#f, RESP2 :1/:0. */
void reply_bool(rbuf *b, int v);
/* RESP3 verbatim string (=), RESP2 bulk: for INFO-style text. */
void reply_verbatim(rbuf *b, const char *text, size_t n);

#endif
