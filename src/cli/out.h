/* out.h: readable output for the command line: terminal-safe quoting of
 * untrusted bytes, ISO-8601 times, aligned tables and progress lines. */
#ifndef TALLY_CLI_OUT_H
#define TALLY_CLI_OUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Room for a quoted argument in a message: long inputs are cut, marked. */
#define OUT_QUOTE_MAX 80
/* "2024-05-01T12:00:00.000Z" plus NUL, with room to spare. */
#define OUT_TIME_LEN 32
/* Widest table cell in bytes (names are 64, a u64 is 20 digits). */
#define OUT_CELL_MAX 96
#define OUT_COLS_MAX 8

/* Copy len bytes of s into dst (cap bytes, NUL-terminated) with every byte
 * a terminal could act on (controls, DEL, non-ASCII) as \xNN; cut with
 * "..." when it does not fit. out_quote adds single quotes around. */
void out_safe(char *dst, size_t cap, const char *s, size_t len);
void out_quote(char *dst, size_t cap, const char *s, size_t len);

/* ms since the epoch as "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC); "-" when the
 * time is not a representable date. */
void out_time(int64_t ms, char buf[OUT_TIME_LEN]);

/* A table printed in two passes (widths, then rows) so it needs no
 * storage: cell(data, row, col, buf, cap) writes one cell. Columns whose
 * right[col] is set are right-aligned (numbers). */
typedef void (*out_cell_fn)(const void *data, size_t row, size_t col,
                            char *buf, size_t cap);
typedef struct out_table {
	const char *const *head; /* ncols column titles */
	const int *right;        /* ncols flags, or NULL */
	size_t ncols, nrows;
	out_cell_fn cell;
	const void *data;
} out_table;
void out_table_print(FILE *f, const out_table *t);

/* Bytes as "12.3 MiB". */
void out_bytes(uint64_t n, char *buf, size_t cap);

/* Progress on stderr every `every` units: shown when stderr is a terminal
 * (rewriting one line) or when forced (one line each, for logs). */
typedef struct out_progress {
	const char *what;  /* e.g. "events scanned" */
	uint64_t every;
	uint64_t next;
	int on, tty;
} out_progress;
void out_progress_init(out_progress *p, const char *what, uint64_t every,
                       int force);
/* Called with the running count; prints when it passes the next mark. */
void out_progress_tick(out_progress *p, uint64_t done);
/* Ends the progress line (if one was drawn). */
void out_progress_done(out_progress *p, uint64_t done);

#endif
