/* stats.c: `tally stats --data DIR`: what a data folder holds. Events are
 * counted by scanning them all (the engine keeps no event count), so the
 * scan shows progress; per-type rows come for free because the scan
 * visits objects grouped by content type and counting type. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "offline.h"
#include "out.h"
#include "typesfile.h"

/* Rows of the per-type table kept; more are summed into the totals only. */
#define STATS_ROWS_MAX 1000

typedef struct stats_row {
	char ctype[TALLY_NAME_MAX + 1];
	char ktype[TALLY_NAME_MAX + 1];
	uint64_t objects, events;
} stats_row;

typedef struct stats_run {
	out_progress prog;
	uint64_t events, adds, removes, anonymous, objects;
	stats_row *rows;
	size_t nrows, rows_dropped;
	stats_row cur;        /* the group being scanned */
	uint64_t cur_content; /* the object being scanned */
	int in_group;
} stats_run;

static void group_flush(stats_run *s)
{
	if (!s->in_group)
		return;
	if (s->nrows < STATS_ROWS_MAX)
		s->rows[s->nrows++] = s->cur;
	else
		s->rows_dropped++;
}

static int stats_visit(void *arg, const tally_event_rec *ev)
{
	stats_run *s = arg;
	int new_group = !s->in_group || strcmp(ev->ctype, s->cur.ctype) ||
	                strcmp(ev->ktype, s->cur.ktype);

	if (new_group) {
		group_flush(s);
		memset(&s->cur, 0, sizeof s->cur);
		strcpy(s->cur.ctype, ev->ctype);
		strcpy(s->cur.ktype, ev->ktype);
		s->in_group = 1;
	}
	if (new_group || ev->content != s->cur_content) {
		s->cur.objects++;
		s->objects++;
		s->cur_content = ev->content;
	}
	s->cur.events++;
	s->events++;
	if (ev->delta > 0)
		s->adds++;
	else
		s->removes++;
	if (ev->member == 0)
		s->anonymous++;
	out_progress_tick(&s->prog, s->events);
	return 0;
}

static void row_cell(const void *data, size_t row, size_t col, char *buf,
                     size_t cap)
{
	const stats_row *r = &((const stats_row *)data)[row];

	if (col == 0)
		snprintf(buf, cap, "%s", r->ctype);
	else if (col == 1)
		snprintf(buf, cap, "%s", r->ktype);
	else
		snprintf(buf, cap, "%" PRIu64, col == 2 ? r->objects : r->events);
}

static void type_cell(const void *data, size_t row, size_t col, char *buf,
                      size_t cap)
{
	const tally_type_info *t = &((const tally_type_info *)data)[row];

	if (col == 0)
		snprintf(buf, cap, "%u", (unsigned)t->id);
	else
		snprintf(buf, cap, "%s", col == 1 ? t->name :
		         typesfile_mode_name(t->mode));
}

typedef struct stats_view {
	const char *dir;
	disk_use disk;
	tally_stats eng;
	const tally_type_info *types;
	size_t ntypes;
	const stats_run *run;
} stats_view;

static void stats_text(const stats_view *v)
{
	static const char *const thead[] = { "ID", "NAME", "MODE" };
	static const int tright[] = { 1, 0, 0 };
	static const char *const rhead[] = { "CTYPE", "KTYPE", "OBJECTS",
	                                     "EVENTS" };
	static const int rright[] = { 0, 0, 1, 1 };
	const stats_run *s = v->run;
	out_table types = { thead, tright, 3, v->ntypes, type_cell, v->types };
	out_table rows = { rhead, rright, 4, s->nrows, row_cell, s->rows };
	char size[32];

	out_bytes(v->disk.blocks_bytes, size, sizeof size);
	printf("data folder   %s\n", v->dir);
	printf("size on disk  %s (%" PRIu64 " bytes in %" PRIu64 " files; "
	       "%" PRIu64 " bytes apparent)\n", size, v->disk.blocks_bytes,
	       v->disk.files, v->disk.bytes);
	printf("newest event  seq %" PRIu64 "\n", v->eng.last_seq);
	printf("events        %" PRIu64 " (%" PRIu64 " adds, %" PRIu64
	       " removes; %" PRIu64 " anonymous)\n", s->events, s->adds,
	       s->removes, s->anonymous);
	printf("objects       %" PRIu64 " (summed over counting types: an "
	       "object with likes and views counts twice)\n", s->objects);
	printf("\ncounting types (%zu):\n", v->ntypes);
	out_table_print(stdout, &types);
	printf("\nevents by content type and counting type:\n");
	if (s->nrows == 0)
		puts("(no events)");
	else
		out_table_print(stdout, &rows);
	if (s->rows_dropped > 0)
		printf("(%zu more rows not shown)\n", s->rows_dropped);
}

static void json_engine(json_w *w, const tally_stats *e)
{
	json_key(w, "engine");
	json_obj(w);
	json_kv_u64(w, "last_seq", e->last_seq);
	json_kv_u64(w, "writes", e->writes);
	json_kv_u64(w, "write_errors", e->write_errors);
	json_kv_u64(w, "batches", e->batches);
	json_kv_u64(w, "store_entries", e->store_entries);
	json_kv_u64(w, "syncs", e->syncs);
	json_kv_u64(w, "queue_depth", e->queue_depth);
	json_obj_end(w);
}

static void json_lists(json_w *w, const stats_view *v)
{
	const stats_run *s = v->run;

	json_key(w, "types");
	json_arr(w);
	for (size_t i = 0; i < v->ntypes; i++) {
		json_obj(w);
		json_kv_u64(w, "id", v->types[i].id);
		json_kv_str(w, "name", v->types[i].name);
		json_kv_str(w, "mode", typesfile_mode_name(v->types[i].mode));
		json_obj_end(w);
	}
	json_arr_end(w);
	json_key(w, "by_type");
	json_arr(w);
	for (size_t i = 0; i < s->nrows; i++) {
		json_obj(w);
		json_kv_str(w, "ctype", s->rows[i].ctype);
		json_kv_str(w, "ktype", s->rows[i].ktype);
		json_kv_u64(w, "objects", s->rows[i].objects);
		json_kv_u64(w, "events", s->rows[i].events);
		json_obj_end(w);
	}
	json_arr_end(w);
	json_kv_u64(w, "by_type_not_shown", s->rows_dropped);
}

static void stats_json(const stats_view *v)
{
	const stats_run *s = v->run;
	json_w w;

	json_start(&w, stdout);
	json_obj(&w);
	json_kv_str(&w, "data", v->dir);
	json_kv_u64(&w, "disk_bytes", v->disk.blocks_bytes);
	json_kv_u64(&w, "apparent_bytes", v->disk.bytes);
	json_kv_u64(&w, "files", v->disk.files);
	json_engine(&w, &v->eng);
	json_kv_u64(&w, "events", s->events);
	json_kv_u64(&w, "adds", s->adds);
	json_kv_u64(&w, "removes", s->removes);
	json_kv_u64(&w, "anonymous", s->anonymous);
	json_kv_u64(&w, "objects", s->objects);
	json_lists(&w, v);
	json_obj_end(&w);
	json_finish(&w);
}

/* Scan and gather; the handle is open. CLI_OK or CLI_ERR. */
static int stats_gather(tally *t, const char *dir, stats_view *v,
                        stats_run *s, tally_type_info **types)
{
	int rc = tally_stats_get(t, &v->eng);

	if (rc != TALLY_OK)
		return offline_fail(dir, "cannot read the statistics", rc);
	if (offline_types(t, types, &v->ntypes) != CLI_OK)
		return CLI_ERR;
	v->types = *types;
	rc = tally_events_scan(t, stats_visit, s);
	out_progress_done(&s->prog, s->events);
	if (rc != TALLY_OK)
		return offline_fail(dir, "cannot scan the events", rc);
	group_flush(s);
	return CLI_OK;
}

int cmd_stats(const cli_ctx *ctx, const cli_args *a)
{
	stats_run s = { 0 };
	stats_view v = { 0 };
	tally_type_info *types = NULL;
	tally *t = NULL;
	int rc = offline_data_dir(a, &v.dir);

	if (rc != CLI_OK)
		return rc;
	s.rows = calloc(STATS_ROWS_MAX, sizeof *s.rows);
	if (s.rows == NULL) {
		fprintf(stderr, "tally: out of memory\n");
		return CLI_ERR;
	}
	out_progress_init(&s.prog, "events scanned", OFFLINE_PROGRESS_EVERY,
	                  cli_opt(a, "progress") != NULL);
	rc = offline_open_read(v.dir, &t);
	if (rc == CLI_OK)
		rc = stats_gather(t, v.dir, &v, &s, &types);
	tally_close(t);
	if (rc == CLI_OK) {
		(void)offline_disk_use(v.dir, &v.disk);
		v.run = &s;
		if (ctx->json)
			stats_json(&v);
		else
			stats_text(&v);
	}
	free(types);
	free(s.rows);
	return rc;
}
