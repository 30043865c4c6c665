/* json.c: the JSON writer. Escaping follows RFC 8259: quote, backslash and
 * control characters are escaped, valid UTF-8 passes through, and any
 * invalid byte is replaced (U+FFFD) rather than emitted raw. */
#include "json.h"

#include <assert.h>
#include <inttypes.h>
#include <string.h>

void json_start(json_w *w, FILE *f)
{
	w->f = f;
	w->depth = 0;
	w->after_key = 0;
	w->used[0] = 0;
}

void json_finish(json_w *w)
{
	assert(w->depth == 0);
	fputc('\n', w->f);
}

/* Before any value: the comma that separates it from the previous one. */
static void value_sep(json_w *w)
{
	if (w->after_key) {
		w->after_key = 0;
		return;
	}
	if (w->used[w->depth])
		fputc(',', w->f);
	w->used[w->depth] = 1;
}

static void open_level(json_w *w, int ch)
{
	value_sep(w);
	assert(w->depth + 1 < JSON_DEPTH_MAX);
	fputc(ch, w->f);
	w->depth++;
	w->used[w->depth] = 0;
}

static void close_level(json_w *w, int ch)
{
	assert(w->depth > 0);
	assert(!w->after_key);
	w->depth--;
	fputc(ch, w->f);
}

void json_obj(json_w *w) { open_level(w, '{'); }
void json_obj_end(json_w *w) { close_level(w, '}'); }
void json_arr(json_w *w) { open_level(w, '['); }
void json_arr_end(json_w *w) { close_level(w, ']'); }

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid:
 * overlong forms, surrogates and code points past U+10FFFF are refused. */
static size_t utf8_len(const unsigned char *s, size_t left)
{
	unsigned c = s[0];
	size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
	uint32_t cp;

	if (c < 0x80)
		return 1;
	if (n == 0 || n > left || c >= 0xf5)
		return 0;
	cp = c & (0x3fu >> (n - 1));
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3fu);
	}
	if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) ||
	    (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

static void put_escaped(FILE *f, const unsigned char *s, size_t len)
{
	for (size_t i = 0; i < len;) {
		unsigned c = s[i];
		size_t n = utf8_len(s + i, len - i);

		if (c == '"' || c == '\\') {
			fputc('\\', f);
			fputc((int)c, f);
		} else if (c == '\n') {
			fputs("\\n", f);
		} else if (c == '\t') {
			fputs("\\t", f);
		} else if (c == '\r') {
			fputs("\\r", f);
		} else if (c < 0x20) {
			fprintf(f, "\\u%04x", c);
		} else if (n == 0) {
			fputs("\\ufffd", f);
			n = 1;
		} else {
			fwrite(s + i, 1, n, f);
		}
		i += n == 0 ? 1 : n;
	}
}

void json_strn(json_w *w, const char *s, size_t len)
{
	value_sep(w);
	fputc('"', w->f);
	put_escaped(w->f, (const unsigned char *)s, len);
	fputc('"', w->f);
}

void json_str(json_w *w, const char *s)
{
	json_strn(w, s, strlen(s));
}

void json_key(json_w *w, const char *k)
{
	json_str(w, k);
	fputc(':', w->f);
	w->after_key = 1;
}

void json_i64(json_w *w, int64_t v)
{
	value_sep(w);
	fprintf(w->f, "%" PRId64, v);
}

void json_u64(json_w *w, uint64_t v)
{
	value_sep(w);
	fprintf(w->f, "%" PRIu64, v);
}

void json_bool(json_w *w, int v)
{
	value_sep(w);
	fputs(v ? "true" : "false", w->f);
}

void json_null(json_w *w)
{
	value_sep(w);
	fputs("null", w->f);
}

void json_kv_str(json_w *w, const char *k, const char *v)
{
	json_key(w, k);
	json_str(w, v);
}

void json_kv_i64(json_w *w, const char *k, int64_t v)
{
	json_key(w, k);
	json_i64(w, v);
}

void json_kv_u64(json_w *w, const char *k, uint64_t v)
{
	json_key(w, k);
	json_u64(w, v);
}
