/* resp.c: tallyd's RESP codec. A zero-copy request parser (RESP2 multibulk
 * as in Redis's processMultibulkBuffer, inline commands split as by
 * sdssplitargs) and bounded reply builders for RESP2 and RESP3.
 *
 * Design note (parser). The buffer holds bytes [0, len) of which
 * [0, start) are consumed and may be compacted away by _space().
 * Invariants:
 *  1. start <= cur <= scan <= len <= cap.
 *  2. Between commands (mbulk_left == 0) cur == start; inside a multibulk,
 *     cur is past the bytes parsed so far and the arguments read are kept
 *     as offsets from start (offs[]), since compaction and growth move the
 *     buffer; they become pointers only when the command is complete.
 *  3. Bytes [cur, scan) are known to hold no line terminator, so a line fed
 *     one byte at a time is scanned once, not once per byte.
 *  4. Every line and every declared bulk is checked against its limit
 *     before it is waited for, so the buffer never has to hold more than
 *     request_max bytes of one command, and nothing is allocated for a size
 *     that is only declared.
 *  5. Arguments are NUL-terminated in place: the '\r' after a bulk, the
 *     separator after an inline token, or the line's own '\n'/'\r'.
 *  6. Once err[0] != 0 every call of next() returns RESP_ERR. */
#include "server/resp.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/parse.h"

/* Under ASan the buffer's unused tail [len, cap) is poisoned from commit()
 * to space(), so a parser read past the bytes received is reported even
 * though it stays inside the allocation. */
#if defined(__SANITIZE_ADDRESS__)
#define RESP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RESP_ASAN 1
#endif
#endif
#ifdef RESP_ASAN
#include <sanitizer/asan_interface.h>
#define RESP_POISON(a, n) ASAN_POISON_MEMORY_REGION((a), (n))
#define RESP_UNPOISON(a, n) ASAN_UNPOISON_MEMORY_REGION((a), (n))
#else
#define RESP_POISON(a, n) ((void)(a), (void)(n))
#define RESP_UNPOISON(a, n) ((void)(a), (void)(n))
#endif

/* Defaults of resp_limits (see resp.h). bulk_max 1 MiB: tally arguments are
 * names and numbers, not blobs. args_max: the cap Redis long put on any
 * multibulk count (1024*1024). inline_max and the count-line limit:
 * Redis's PROTO_INLINE_MAX_SIZE, a line a human could type. request_max
 * 64 MiB bounds what one command can make us buffer. */
#define RESP_BULK_MAX_DEFAULT ((size_t)1 << 20)
#define RESP_ARGS_MAX_DEFAULT ((size_t)1 << 20)
#define RESP_INLINE_MAX_DEFAULT ((size_t)64 << 10)
#define RESP_REQUEST_MAX_DEFAULT ((size_t)64 << 20)
/* A "*N" or "$N" line longer than this with no '\r' is refused, as in
 * Redis (which uses PROTO_INLINE_MAX_SIZE for it too). */
#define RESP_COUNT_LINE_MAX ((size_t)64 << 10)
/* First buffer: Redis's PROTO_IOBUF_LEN, one typical read. */
#define RESP_BUF_INIT ((size_t)16 << 10)
/* An idle buffer bigger than this is shrunk back, so one big request does
 * not pin its memory for the life of the connection. */
#define RESP_BUF_KEEP ((size_t)256 << 10)
/* The same for the argument table (24 bytes a slot). */
#define RESP_ARGS_KEEP ((size_t)1024)
/* Any limit is clamped to this, so that a length plus its framing can
 * never overflow a size_t. */
#define RESP_LIMIT_CAP (SIZE_MAX / 4)

_Static_assert(RESP_BUF_INIT <= RESP_BUF_KEEP, "shrink target too small");
_Static_assert(RESP_INLINE_MAX_DEFAULT <= RESP_REQUEST_MAX_DEFAULT,
               "an inline line must fit in one request");
_Static_assert(RESP_BULK_MAX_DEFAULT < RESP_REQUEST_MAX_DEFAULT,
               "one argument must fit in one request");

/* next()'s internal "nothing to return, go on" (an empty command). */
enum { RESP_SKIP = 2 };

struct resp_parser {
	resp_limits lim;
	char *buf;
	size_t cap;
	size_t len;
	size_t start;      /* first byte of the command being parsed */
	size_t cur;        /* parse position */
	size_t scan;       /* [cur, scan) holds no line terminator */
	size_t mbulk_left; /* bulks still to read; 0 between commands */
	size_t bulk_len;   /* payload size of the bulk being read ... */
	int have_bulk_len; /* ... once its "$N" line was read */
	size_t argc;
	size_t args_cap;   /* slots in argv, lens and offs */
	char **argv;
	size_t *lens;
	size_t *offs;      /* argument offsets from start (invariant 2) */
	int unauth;        /* Redis's caps for a client not authenticated */
	char err[96];
};

/* ---- parser: helpers ----------------------------------------------------- */

static int fail(resp_parser *p, const char *msg)
{
	assert(msg[0] != '\0');
	snprintf(p->err, sizeof(p->err), "%s", msg);
	return RESP_ERR;
}

/* Move the parse position forward; a new line starts there (invariant 3). */
static void advance(resp_parser *p, size_t to)
{
	assert(to >= p->cur);
	assert(to <= p->len);
	p->cur = to;
	p->scan = to;
}

/* Would the command, spanning [start, from) plus `more` bytes, exceed
 * request_max? Written so that no sum can overflow. */
static int too_big(const resp_parser *p, size_t from, size_t more)
{
	size_t used = from - p->start;
	assert(from >= p->start);
	return used > p->lim.request_max || more > p->lim.request_max - used;
}

/* Make room for n arguments, never more than args_max. RESP_NOMEM leaves
 * the parser as it was, so next() can be called again. */
static int args_reserve(resp_parser *p, size_t n)
{
	size_t cap = p->args_cap ? p->args_cap : 16;
	assert(n <= p->lim.args_max);
	if (n <= p->args_cap) return RESP_OK;
	while (cap < n) cap = cap > SIZE_MAX / 2 ? n : cap * 2;
	if (cap > p->lim.args_max) cap = p->lim.args_max;
	if (cap > SIZE_MAX / sizeof(size_t)) return RESP_NOMEM;
	char **argv = realloc(p->argv, cap * sizeof(*argv));
	if (!argv) return RESP_NOMEM;
	p->argv = argv;
	size_t *lens = realloc(p->lens, cap * sizeof(*lens));
	if (!lens) return RESP_NOMEM;
	p->lens = lens;
	size_t *offs = realloc(p->offs, cap * sizeof(*offs));
	if (!offs) return RESP_NOMEM;
	p->offs = offs;
	p->args_cap = cap;
	return RESP_OK;
}

/* Find the byte `term` ending the line at cur, looking at most line_max
 * bytes in. RESP_OK with *eol its offset, RESP_AGAIN, or RESP_ERR with
 * `toobig` (no terminator within line_max bytes) or "too big request". */
static int find_line(resp_parser *p, char term, size_t line_max,
                     const char *toobig, size_t *eol)
{
	size_t avail = p->len - p->cur;
	size_t stop = avail > line_max ? p->cur + line_max + 1 : p->len;
	assert(p->scan >= p->cur);
	if (p->scan < stop) {
		const char *hit = memchr(p->buf + p->scan, term, stop - p->scan);
		if (hit) {
			*eol = (size_t)(hit - p->buf);
			p->scan = *eol;
			return RESP_OK;
		}
		p->scan = stop;
	}
	/* Bytes [cur, stop) belong to this command's unfinished line. The
	 * request limit is judged on them before the line's own limit, so
	 * the error does not depend on how the bytes were split. */
	if (too_big(p, stop, 0)) {
		return fail(p, "Protocol error: too big request");
	}
	if (avail > line_max) return fail(p, toobig);
	return RESP_AGAIN;
}

/* A "\r\n"-terminated line of a multibulk ("*N" or "$N"): RESP_OK with
 * *eol at its '\r' once the '\n' slot is buffered too. Like Redis, the
 * line ends at the first '\r'; unlike Redis, the byte after it must be
 * '\n' (Redis skips it unseen): bad_eol is the error otherwise. */
static int mbulk_line(resp_parser *p, const char *toobig, const char *bad_eol,
                      size_t *eol)
{
	int rc = find_line(p, '\r', RESP_COUNT_LINE_MAX, toobig, eol);
	if (rc != RESP_OK) return rc;
	/* Before the byte after '\r' is looked at: split elsewhere, these
	 * bytes would have been refused as too big before it arrived. */
	if (too_big(p, *eol, 2)) {
		return fail(p, "Protocol error: too big request");
	}
	if (*eol + 1 >= p->len) return RESP_AGAIN;
	if (p->buf[*eol + 1] != '\n') return fail(p, bad_eol);
	return RESP_OK;
}

/* ---- parser: multibulk --------------------------------------------------- */

static const char err_mbulk_len[] = "Protocol error: invalid multibulk length";
static const char err_bulk_len[] = "Protocol error: invalid bulk length";

/* The "*N" line. N <= 0 is an empty command that Redis skips (RESP_SKIP);
 * N above args_max is refused before any argument is read. */
static int parse_count(resp_parser *p)
{
	size_t eol;
	int64_t n;
	assert(p->mbulk_left == 0);
	assert(p->buf[p->cur] == '*');
	int rc = mbulk_line(p, "Protocol error: too big mbulk count string",
	                    err_mbulk_len, &eol);
	if (rc != RESP_OK) return rc;
	if (parse_i64_strict(p->buf + p->cur + 1, eol - p->cur - 1, &n) != 0 ||
	    (n > 0 && (uint64_t)n > p->lim.args_max)) {
		return fail(p, err_mbulk_len);
	}
	if (p->unauth && n > RESP_UNAUTH_ARGS_MAX) {
		return fail(p, "Protocol error: unauthenticated multibulk length");
	}
	advance(p, eol + 2);
	if (n <= 0) {
		p->start = p->cur;
		return RESP_SKIP;
	}
	p->mbulk_left = (size_t)n;
	p->argc = 0;
	p->have_bulk_len = 0;
	return RESP_OK;
}

/* The "$N" line before each argument. */
static int parse_bulk_len(resp_parser *p)
{
	size_t eol;
	int64_t n;
	char msg[64];
	assert(!p->have_bulk_len);
	int rc = mbulk_line(p, "Protocol error: too big bulk count string",
	                    err_bulk_len, &eol);
	if (rc != RESP_OK) return rc;
	char c = p->buf[p->cur];
	if (c != '$') {
		/* Redis prints the byte with %c; its reply turns CR and LF into
		 * spaces, and a NUL would end our C string, so it does too. */
		if (c == '\r' || c == '\n' || c == '\0') c = ' ';
		snprintf(msg, sizeof(msg), "Protocol error: expected '$', got '%c'",
		         c);
		return fail(p, msg);
	}
	if (parse_i64_strict(p->buf + p->cur + 1, eol - p->cur - 1, &n) != 0 ||
	    n < 0 ||
	    (uint64_t)n > p->lim.bulk_max) {
		return fail(p, err_bulk_len);
	}
	if (p->unauth && n > RESP_UNAUTH_BULK_MAX) {
		return fail(p, "Protocol error: unauthenticated bulk length");
	}
	/* Refuse now what could never fit, rather than buffer up to it. No
	 * overflow: n <= bulk_max <= RESP_LIMIT_CAP. */
	if (too_big(p, eol + 2, (size_t)n + 2)) {
		return fail(p, "Protocol error: too big request");
	}
	advance(p, eol + 2);
	p->bulk_len = (size_t)n;
	p->have_bulk_len = 1;
	return RESP_OK;
}

/* The payload of one bulk and its CRLF, once all of it is buffered. */
static int parse_bulk(resp_parser *p)
{
	assert(p->have_bulk_len);
	assert(p->mbulk_left > 0);
	if (p->len - p->cur < p->bulk_len + 2) return RESP_AGAIN;
	char *arg = p->buf + p->cur;
	if (arg[p->bulk_len] != '\r' || arg[p->bulk_len + 1] != '\n') {
		return fail(p, "Protocol error: expected CRLF after bulk argument");
	}
	/* Grow before touching the buffer, so RESP_NOMEM can be retried. */
	if (p->argc == p->args_cap) {
		int rc = args_reserve(p, p->argc + 1);
		if (rc != RESP_OK) return rc;
	}
	assert(p->argc < p->args_cap);
	arg[p->bulk_len] = '\0';
	p->offs[p->argc] = p->cur - p->start;
	p->lens[p->argc] = p->bulk_len;
	p->argc++;
	advance(p, p->cur + p->bulk_len + 2);
	p->have_bulk_len = 0;
	p->mbulk_left--;
	return RESP_OK;
}

/* Read bulks until the command is complete, then hand it out. */
static int parse_bulks(resp_parser *p, resp_cmd *cmd)
{
	while (p->mbulk_left > 0) {
		int rc = RESP_OK;
		if (!p->have_bulk_len) rc = parse_bulk_len(p);
		if (rc == RESP_OK) rc = parse_bulk(p);
		if (rc != RESP_OK) return rc;
	}
	assert(p->argc > 0);
	assert(p->argc <= p->args_cap);
	for (size_t i = 0; i < p->argc; i++) {
		p->argv[i] = p->buf + p->start + p->offs[i];
		assert(p->argv[i][p->lens[i]] == '\0');
	}
	cmd->argc = p->argc;
	cmd->argv = p->argv;
	cmd->lens = p->lens;
	p->start = p->cur;
	return RESP_OK;
}

/* ---- parser: inline commands --------------------------------------------- */

/* isspace() in the C locale, which sdssplitargs uses between tokens. */
static int is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
	       c == '\f';
}

/* sdssplitargs ends an unquoted token on these only. */
static int ends_token(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* One character inside double quotes at s[*r]: an escape or itself. */
static char dquote_char(const char *s, size_t n, size_t *r)
{
	size_t i = *r;
	if (s[i] != '\\' || i + 1 >= n) {
		*r = i + 1;
		return s[i];
	}
	int byte = s[i + 1] == 'x' ? parse_hex_byte(s + i + 2, n - i - 2) : -1;
	if (byte >= 0) {
		*r = i + 4;
		return (char)byte;
	}
	*r = i + 2;
	switch (s[i + 1]) {
	case 'n': return '\n';
	case 'r': return '\r';
	case 't': return '\t';
	case 'b': return '\b';
	case 'a': return '\a';
	default: return s[i + 1];
	}
}

/* One token of s[0, n) starting at *r (not a blank), as sdssplitargs reads
 * it. Its bytes go to s[*w...] when `write` (in place: the output never
 * overtakes the input, *w <= *r). Returns 0 on unbalanced quotes. */
static int split_token(char *s, size_t n, size_t *r, size_t *w, int write)
{
	size_t i = *r, o = *w;
	char quote = 0;
	assert(o <= i);
	while (i < n) {
		char c = s[i];
		if (quote && c == quote) {
			/* A closing quote must be followed by a blank or the end. */
			if (i + 1 < n && !is_blank(s[i + 1])) return 0;
			quote = 0;
			i++;
			break;
		}
		if (quote == '"') {
			c = dquote_char(s, n, &i);
		} else if (quote == '\'') {
			/* The one escape inside single quotes: \' */
			int esc = c == '\\' && i + 1 < n && s[i + 1] == '\'';
			if (esc) c = '\'';
			i += esc ? 2 : 1;
		} else if (ends_token(c)) {
			i++;
			break;
		} else if (c == '"' || c == '\'') {
			quote = c; /* a quote may open mid-token, as in Redis */
			i++;
			continue;
		} else {
			i++;
		}
		if (write) s[o] = c;
		o++;
		assert(o <= i);
	}
	if (quote) return 0;
	*r = i;
	*w = o;
	return 1;
}

/* Split s[0, n) into arguments. With argv NULL only count them (a dry run
 * that leaves s untouched); else write them in place, each followed by a
 * NUL, which may land on s[n], the line's terminator. Stops counting past
 * `most`. Returns 0 on unbalanced quotes. */
static int split_line(char *s, size_t n, size_t most, char **argv,
                      size_t *lens, size_t *argc)
{
	size_t r = 0, w = 0, k = 0;
	for (;;) {
		while (r < n && is_blank(s[r])) r++;
		if (r == n || k > most) break;
		size_t w0 = w;
		if (!split_token(s, n, &r, &w, argv != NULL)) return 0;
		assert(w <= r);
		if (argv) {
			assert(k < most);
			s[w] = '\0';
			argv[k] = s + w0;
			lens[k] = w - w0;
		}
		w++;
		k++;
	}
	*argc = k;
	return 1;
}

/* One inline command line. An empty line is RESP_SKIP. */
static int parse_inline(resp_parser *p, resp_cmd *cmd)
{
	size_t eol, argc;
	assert(p->mbulk_left == 0);
	int rc = find_line(p, '\n', p->lim.inline_max,
	                   "Protocol error: too big inline request", &eol);
	if (rc != RESP_OK) return rc;
	if (too_big(p, eol, 1)) return fail(p, "Protocol error: too big request");
	size_t end = eol;
	if (end > p->cur && p->buf[end - 1] == '\r') end--;
	char *line = p->buf + p->cur;
	size_t most = p->lim.args_max;
	if (!split_line(line, end - p->cur, most, NULL, NULL, &argc)) {
		return fail(p, "Protocol error: unbalanced quotes in request");
	}
	if (argc > most) return fail(p, "Protocol error: too many arguments");
	if (argc == 0) {
		advance(p, eol + 1);
		p->start = p->cur;
		return RESP_SKIP;
	}
	rc = args_reserve(p, argc);
	if (rc != RESP_OK) return rc;
	rc = split_line(line, end - p->cur, most, p->argv, p->lens, &argc);
	assert(rc == 1);
	advance(p, eol + 1);
	p->start = p->cur;
	cmd->argc = argc;
	cmd->argv = p->argv;
	cmd->lens = p->lens;
	return RESP_OK;
}

/* ---- parser: API --------------------------------------------------------- */

resp_parser *resp_parser_create(const resp_limits *lim)
{
	resp_parser *p = calloc(1, sizeof(*p));
	if (!p) return NULL;
	if (lim) p->lim = *lim;
	if (!p->lim.bulk_max) p->lim.bulk_max = RESP_BULK_MAX_DEFAULT;
	if (!p->lim.args_max) p->lim.args_max = RESP_ARGS_MAX_DEFAULT;
	if (!p->lim.inline_max) p->lim.inline_max = RESP_INLINE_MAX_DEFAULT;
	if (!p->lim.request_max) p->lim.request_max = RESP_REQUEST_MAX_DEFAULT;
	size_t *each[] = {&p->lim.bulk_max, &p->lim.args_max, &p->lim.inline_max,
	                  &p->lim.request_max};
	for (size_t i = 0; i < sizeof(each) / sizeof(each[0]); i++) {
		if (*each[i] > RESP_LIMIT_CAP) *each[i] = RESP_LIMIT_CAP;
	}
	return p;
}

void resp_parser_free(resp_parser *p)
{
	if (!p) return;
	if (p->buf) RESP_UNPOISON(p->buf, p->cap);
	free(p->buf);
	free(p->argv);
	free(p->lens);
	free(p->offs);
	free(p);
}

/* Drop the consumed bytes [0, start): offsets from start stay valid. */
static void compact(resp_parser *p)
{
	size_t keep = p->len - p->start;
	assert(p->start <= p->cur && p->cur <= p->scan && p->scan <= p->len);
	if (p->start == 0) return;
	if (keep) memmove(p->buf, p->buf + p->start, keep);
	p->cur -= p->start;
	p->scan -= p->start;
	p->len = keep;
	p->start = 0;
}

/* Capacity for len + want bytes: doubling, but bounded by request_max +
 * want unless the caller has buffered more than that unparsed. */
static int grow(resp_parser *p, size_t want)
{
	if (want > SIZE_MAX - p->len) return RESP_NOMEM;
	size_t need = p->len + want;
	size_t cap = p->cap ? p->cap : RESP_BUF_INIT;
	while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	size_t bound = p->lim.request_max > SIZE_MAX - want
	                       ? SIZE_MAX : p->lim.request_max + want;
	if (cap > bound) cap = bound > need ? bound : need;
	char *buf = realloc(p->buf, cap);
	if (!buf) return RESP_NOMEM;
	p->buf = buf;
	p->cap = cap;
	return RESP_OK;
}

/* Shrink an empty buffer to what a read of `want` needs, at least
 * RESP_BUF_INIT (realloc failing leaves it as it was). */
static void buf_shrink(resp_parser *p, size_t want)
{
	size_t to = want > RESP_BUF_INIT ? want : RESP_BUF_INIT;
	assert(p->start == p->len && p->len == 0 && to < p->cap);
	char *small = realloc(p->buf, to);
	if (small) {
		p->buf = small;
		p->cap = to;
	}
}

void resp_parser_set_unauth(resp_parser *p, int unauth)
{
	assert(p);
	p->unauth = unauth != 0;
}

void resp_parser_trim(resp_parser *p)
{
	assert(p);
	if (p->start != p->len || p->mbulk_left != 0) return;
	if (p->cap > RESP_BUF_KEEP) {
		RESP_UNPOISON(p->buf, p->cap);
		p->start = p->cur = p->scan = p->len = 0;
		buf_shrink(p, RESP_BUF_INIT);
		RESP_POISON(p->buf, p->cap);
	}
	if (p->args_cap > RESP_ARGS_KEEP) {
		/* Freed, not shrunk: three reallocs could fail apart and
		 * leave the slots counted wrong. args_reserve() starts over. */
		free(p->argv);
		free(p->lens);
		free(p->offs);
		p->argv = NULL;
		p->lens = p->offs = NULL;
		p->args_cap = 0;
		p->argc = 0;
	}
}

char *resp_parser_space(resp_parser *p, size_t want, size_t *avail)
{
	assert(p);
	if (want == 0) want = 1;
	if (p->buf) RESP_UNPOISON(p->buf, p->cap);
	if (p->start == p->len) {
		/* Everything is consumed: restart at 0 for free (invariant 2:
		 * no multibulk is in progress, its count line would be here). */
		assert(p->mbulk_left == 0);
		p->start = p->cur = p->scan = p->len = 0;
		if (p->cap > RESP_BUF_KEEP && want <= RESP_BUF_KEEP)
			buf_shrink(p, want);
	}
	if (p->cap - p->len < want) compact(p);
	if (p->cap - p->len < want && grow(p, want) != RESP_OK) return NULL;
	assert(p->cap - p->len >= want);
	if (avail) *avail = p->cap - p->len;
	return p->buf + p->len;
}

void resp_parser_commit(resp_parser *p, size_t n)
{
	assert(p);
	assert(n <= p->cap - p->len);
	p->len += n;
	RESP_POISON(p->buf + p->len, p->cap - p->len);
}

int resp_parser_feed(resp_parser *p, const char *buf, size_t len)
{
	size_t avail;
	if (len == 0) return RESP_OK;
	char *dst = resp_parser_space(p, len, &avail);
	if (!dst) return RESP_NOMEM;
	assert(avail >= len);
	memcpy(dst, buf, len);
	resp_parser_commit(p, len);
	return RESP_OK;
}

int resp_parser_next(resp_parser *p, resp_cmd *cmd)
{
	assert(p);
	assert(cmd);
	if (p->err[0]) return RESP_ERR;
	/* Bounded: every RESP_SKIP consumes at least one byte. */
	for (;;) {
		int rc;
		if (p->mbulk_left == 0) {
			assert(p->cur == p->start);
			if (p->cur == p->len) return RESP_AGAIN;
			if (p->buf[p->cur] != '*') rc = parse_inline(p, cmd);
			else rc = parse_count(p);
			if (rc == RESP_SKIP) continue;
			if (rc != RESP_OK || p->mbulk_left == 0) return rc;
		}
		return parse_bulks(p, cmd);
	}
}

const char *resp_parser_error(const resp_parser *p)
{
	assert(p);
	return p->err;
}

size_t resp_parser_pending(const resp_parser *p)
{
	assert(p);
	assert(p->start <= p->len);
	return p->len - p->start;
}

/* ---- reply builders ------------------------------------------------------ */

/* Longest error text reply_errorf() formats; longer ones are cut. Redis
 * itself bounds the user data it echoes in errors (to 128 bytes). */
#define RBUF_ERROR_MAX 1024
/* The smallest allocation of a reply buffer. */
#define RBUF_INIT 256
/* An emptied buffer larger than this is freed. */
#define RBUF_KEEP ((size_t)64 << 10)

void rbuf_init(rbuf *b, size_t max, int proto)
{
	assert(b);
	assert(proto == 2 || proto == 3);
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->max = max;
	b->overflow = 0;
	b->proto = proto;
}

void rbuf_free(rbuf *b)
{
	if (!b) return;
	free(b->data);
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

void rbuf_consume(rbuf *b, size_t n)
{
	assert(b);
	assert(n <= b->len);
	if (n < b->len) memmove(b->data, b->data + n, b->len - n);
	b->len -= n;
	/* Sent in full: a buffer a big reply grew is given back, so that it
	 * does not stay with the connection (rbuf_reserve() starts over). */
	if (b->len == 0 && b->cap > RBUF_KEEP) {
		free(b->data);
		b->data = NULL;
		b->cap = 0;
	}
}

/* Capacity for `need` bytes; 0 when it cannot be had (an allocation
 * failure counts as overflow: the connection is closed either way). */
static int rbuf_reserve(rbuf *b, size_t need)
{
	size_t cap = b->cap ? b->cap : RBUF_INIT;
	while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	if (b->max && cap > b->max) cap = b->max;
	assert(cap >= need);
	char *data = realloc(b->data, cap);
	if (!data) return 0;
	b->data = data;
	b->cap = cap;
	return 1;
}

void rbuf_append(rbuf *b, const void *p, size_t n)
{
	assert(b);
	assert(b->len <= b->cap);
	if (b->overflow || n == 0) return;
	if (n > SIZE_MAX - b->len || (b->max && b->len + n > b->max) ||
	    (b->cap - b->len < n && !rbuf_reserve(b, b->len + n))) {
		b->overflow = 1;
		return;
	}
	memcpy(b->data + b->len, p, n);
	b->len += n;
	assert(!b->max || b->len <= b->max);
}

/* Decimal digits of v, written backwards ending at `end`; returns the
 * first. No snprintf: this is on every integer reply's path. */
static char *u64_digits(char *end, uint64_t v)
{
	char *s = end;
	do {
		*--s = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	return s;
}

/* One "<type><number>\r\n" line: the header of most replies. */
static void reply_line(rbuf *b, char type, int neg, uint64_t v)
{
	char tmp[24]; /* type, '-', 20 digits, CRLF */
	char *end = tmp + sizeof(tmp) - 2;
	char *s = u64_digits(end, v);
	if (neg) *--s = '-';
	*--s = type;
	assert(s >= tmp);
	end[0] = '\r';
	end[1] = '\n';
	rbuf_append(b, s, (size_t)(end + 2 - s));
}

/* "<type><text>\r\n" with CR and LF in text turned into spaces, so text
 * can never break the protocol framing. */
static void reply_text_line(rbuf *b, char type, const char *s, size_t n)
{
	rbuf_append(b, &type, 1);
	while (n > 0) {
		size_t k = strcspn(s, "\r\n");
		if (k > n) k = n;
		rbuf_append(b, s, k);
		if (k == n) break;
		rbuf_append(b, " ", 1);
		s += k + 1;
		n -= k + 1;
	}
	rbuf_append(b, "\r\n", 2);
}

void reply_status(rbuf *b, const char *s)
{
	reply_text_line(b, '+', s, strlen(s));
}

void reply_error(rbuf *b, const char *msg)
{
	reply_text_line(b, '-', msg, strlen(msg));
}

void reply_errorf(rbuf *b, const char *fmt, ...)
{
	char msg[RBUF_ERROR_MAX];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0) msg[0] = '\0'; /* an encoding error: send an empty error */
	reply_error(b, msg);
}

void reply_int(rbuf *b, int64_t v)
{
	/* The magnitude in unsigned arithmetic, so INT64_MIN is exact. */
	uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
	reply_line(b, ':', v < 0, u);
}

void reply_bulk(rbuf *b, const void *p, size_t n)
{
	reply_line(b, '$', 0, n);
	rbuf_append(b, p, n);
	rbuf_append(b, "\r\n", 2);
}

void reply_cstr(rbuf *b, const char *s)
{
	reply_bulk(b, s, strlen(s));
}

void reply_nil(rbuf *b)
{
	if (b->proto == 3) rbuf_append(b, "_\r\n", 3);
	else rbuf_append(b, "$-1\r\n", 5);
}

void reply_nil_array(rbuf *b)
{
	if (b->proto == 3) rbuf_append(b, "_\r\n", 3);
	else rbuf_append(b, "*-1\r\n", 5);
}

void reply_array(rbuf *b, size_t n)
{
	reply_line(b, '*', 0, n);
}

void reply_map(rbuf *b, size_t n)
{
	assert(n <= SIZE_MAX / 2);
	if (b->proto == 3) reply_line(b, '%', 0, n);
	else reply_line(b, '*', 0, (uint64_t)n * 2);
}

void reply_bool(rbuf *b, int v)
{
	if (b->proto == 3) rbuf_append(b, v ? "#t\r\n" : "#f\r\n", 4);
	else rbuf_append(b, v ? ":1\r\n" : ":0\r\n", 4);
}

void reply_verbatim(rbuf *b, const char *text, size_t n)
{
	if (b->proto != 3) {
		reply_bulk(b, text, n);
		return;
	}
	assert(n <= SIZE_MAX - 4);
	reply_line(b, '=', 0, (uint64_t)n + 4); /* "txt:" counts */
	rbuf_append(b, "txt:", 4);
	rbuf_append(b, text, n);
	rbuf_append(b, "\r\n", 2);
}
