/* json.h: a small streaming JSON writer for `--json` output (the CLI links
 * hiredis only, no JSON library). Commas and nesting are tracked here, so
 * callers cannot produce a malformed document. */
#ifndef TALLY_CLI_JSON_H
#define TALLY_CLI_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Deepest nesting any command writes, with room to spare. */
#define JSON_DEPTH_MAX 8

typedef struct json_w {
	FILE *f;
	int depth;
	int after_key;                      /* a key was written: no comma */
	unsigned char used[JSON_DEPTH_MAX]; /* this level has an element */
} json_w;

void json_start(json_w *w, FILE *f);
/* Ends the document with a newline; the writer must be at depth 0. */
void json_finish(json_w *w);

void json_obj(json_w *w);
void json_obj_end(json_w *w);
void json_arr(json_w *w);
void json_arr_end(json_w *w);
/* A key inside an object; the next call writes its value. */
void json_key(json_w *w, const char *k);

/* Strings are escaped; bytes that are not valid UTF-8 become U+FFFD, so
 * the document stays valid JSON whatever bytes a key holds. */
void json_strn(json_w *w, const char *s, size_t len);
void json_str(json_w *w, const char *s);
void json_i64(json_w *w, int64_t v);
void json_u64(json_w *w, uint64_t v);
void json_bool(json_w *w, int v);
void json_null(json_w *w);

/* Shorthands for "key": value. */
void json_kv_str(json_w *w, const char *k, const char *v);
void json_kv_i64(json_w *w, const char *k, int64_t v);
void json_kv_u64(json_w *w, const char *k, uint64_t v);

#endif
