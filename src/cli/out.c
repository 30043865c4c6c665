/* out.c: readable output helpers. Whatever came from the server or a file
 * passes through out_safe() before it reaches a terminal, so a hostile or
 * broken peer cannot send escape sequences to the user's screen. */
#include "out.h"

#include <assert.h>
#include <inttypes.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void out_safe(char *dst, size_t cap, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	assert(cap >= 8);
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];
		int plain = ch >= 0x20 && ch < 0x7f && ch != '\\';
		size_t need = plain ? 1 : (ch == '\\' ? 2 : 4);

		/* Keep room for "..." and the NUL. */
		if (o + need + 4 > cap) {
			memcpy(dst + o, "...", 3);
			o += 3;
			break;
		}
		if (plain) {
			dst[o++] = (char)ch;
		} else if (ch == '\\') {
			dst[o++] = '\\';
			dst[o++] = '\\';
		} else {
			dst[o++] = '\\';
			dst[o++] = 'x';
			dst[o++] = hex[ch >> 4];
			dst[o++] = hex[ch & 15];
		}
	}
	dst[o] = '\0';
}

void out_quote(char *dst, size_t cap, const char *s, size_t len)
{
	size_t n;

	assert(cap >= 10);
	dst[0] = '\'';
	out_safe(dst + 1, cap - 2, s, len);
	n = strlen(dst);
	dst[n] = '\'';
	dst[n + 1] = '\0';
}

void out_time(int64_t ms, char buf[OUT_TIME_LEN])
{
	/* Year 0..9999 keeps the format fixed-width and gmtime_r defined. */
	const int64_t max_ms = INT64_C(253402300799999);
	struct tm tm;
	time_t secs;
	int64_t frac;

	if (ms < 0 || ms > max_ms) {
		strcpy(buf, "-");
		return;
	}
	secs = (time_t)(ms / 1000);
	frac = ms % 1000;
	if (gmtime_r(&secs, &tm) == NULL ||
	    strftime(buf, OUT_TIME_LEN, "%Y-%m-%dT%H:%M:%S", &tm) == 0) {
		strcpy(buf, "-");
		return;
	}
	snprintf(buf + strlen(buf), OUT_TIME_LEN - strlen(buf), ".%03dZ",
	         (int)frac);
}

static void table_widths(const out_table *t, size_t w[OUT_COLS_MAX])
{
	char cell[OUT_CELL_MAX];

	for (size_t c = 0; c < t->ncols; c++)
		w[c] = strlen(t->head[c]);
	for (size_t r = 0; r < t->nrows; r++) {
		for (size_t c = 0; c < t->ncols; c++) {
			t->cell(t->data, r, c, cell, sizeof cell);
			size_t n = strlen(cell);
			if (n > w[c])
				w[c] = n;
		}
	}
}

static void table_row(FILE *f, const out_table *t, const size_t *w,
                      const char *const *cells)
{
	for (size_t c = 0; c < t->ncols; c++) {
		int right = t->right != NULL && t->right[c];
		int width = (int)w[c];
		int last = c + 1 == t->ncols;

		if (right)
			fprintf(f, "%*s", width, cells[c]);
		else if (last) /* no trailing blanks */
			fputs(cells[c], f);
		else
			fprintf(f, "%-*s", width, cells[c]);
		fputs(last ? "\n" : "  ", f);
	}
}

void out_table_print(FILE *f, const out_table *t)
{
	size_t w[OUT_COLS_MAX];
	char cells[OUT_COLS_MAX][OUT_CELL_MAX];
	const char *ptr[OUT_COLS_MAX];

	assert(t->ncols >= 1 && t->ncols <= OUT_COLS_MAX);
	table_widths(t, w);
	table_row(f, t, w, t->head);
	for (size_t c = 0; c < t->ncols; c++)
		ptr[c] = cells[c];
	for (size_t r = 0; r < t->nrows; r++) {
		for (size_t c = 0; c < t->ncols; c++)
			t->cell(t->data, r, c, cells[c], OUT_CELL_MAX);
		table_row(f, t, w, ptr);
	}
}

void out_bytes(uint64_t n, char *buf, size_t cap)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB",
	                                     "PiB", "EiB" };
	double v = (double)n;
	size_t u = 0;

	while (v >= 1024.0 && u + 1 < sizeof unit / sizeof unit[0]) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, cap, "%" PRIu64 " B", n);
	else
		snprintf(buf, cap, "%.1f %s", v, unit[u]);
}

void out_progress_init(out_progress *p, const char *what, uint64_t every,
                       int force)
{
	assert(every > 0);
	p->what = what;
	p->every = every;
	p->next = every;
	p->tty = isatty(STDERR_FILENO);
	p->on = force || p->tty;
}

void out_progress_tick(out_progress *p, uint64_t done)
{
	if (!p->on || done < p->next)
		return;
	p->next = done + p->every - done % p->every;
	fprintf(stderr, p->tty ? "\rtally: %" PRIu64 " %s" :
	        "tally: %" PRIu64 " %s\n", done, p->what);
	fflush(stderr);
}

void out_progress_done(out_progress *p, uint64_t done)
{
	/* The line is drawn only once the first mark was passed. */
	if (p->on && p->tty && p->next > p->every)
		fprintf(stderr, "\rtally: %" PRIu64 " %s\n", done, p->what);
}
