/* export.c: `tally export`: every event as a 24-byte reference record
 * (core/record.h), plus the OUT.types sidecar. Events that do not fit the
 * record's bits are skipped and counted: a truncated id would silently
 * attribute the event to someone else. Output goes to temporary names and
 * is renamed when complete, so a file named OUT is always whole, and its
 * OUT.types always the one written with it.
 *
 * Records hold no content type, and an import puts a file's records under
 * one. Without --ctype, a record's running total is therefore the
 * object's plus the last totals that the same counting type and content
 * reached under the content types scanned before it: the import then
 * counts their sum (a unique type's members once each), where the totals
 * of the second content type, read as changes of the first's, gave other
 * counts and events that never happened. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/record.h"
#include "json.h"
#include "objmap.h"
#include "offline.h"
#include "out.h"
#include "typesfile.h"

/* OUT plus the longest suffix must fit. */
#define EXPORT_PATH_MAX (CLI_ARG_LEN_MAX + 16)
/* stdio buffer of the records file: large writes, few syscalls. */
#define EXPORT_BUF_BYTES (1u << 20)

/* The scan's visitor stops with this when writing failed. */
#define EXPORT_STOP_IO 1
#define EXPORT_STOP_TYPE 2
#define EXPORT_STOP_NOMEM 3
#define EXPORT_STOP_SUM 4

typedef struct export_run {
	FILE *f;
	const char *ctype;            /* only this content type, or NULL */
	const tally_type_info *types;
	size_t ntypes;
	uint16_t last_id;             /* id of last_ktype: a one-entry cache */
	char last_ktype[TALLY_NAME_MAX + 1];
	char last_ctype[TALLY_NAME_MAX + 1];
	uint64_t ctypes;              /* content types written */
	uint64_t scanned, written;
	uint64_t skip_content, skip_member, skip_time;
	int io_errno;                 /* of the write that failed */
	out_progress prog;
	/* Without --ctype: (ktype, content) -> the sum of its last totals
	 * in the content types before (base), its last total written in
	 * this one (cur), and which one that is. */
	objmap base, cur;
	char cur_ctype[TALLY_NAME_MAX + 1];
	int cur_any;
} export_run;

typedef struct export_paths {
	char out[EXPORT_PATH_MAX], part[EXPORT_PATH_MAX];
	char types[EXPORT_PATH_MAX], types_part[EXPORT_PATH_MAX];
} export_paths;

static int ktype_id(export_run *x, const char *name, uint16_t *id)
{
	if (strcmp(name, x->last_ktype) == 0) {
		*id = x->last_id;
		return 0;
	}
	for (size_t i = 0; i < x->ntypes; i++) {
		if (strcmp(x->types[i].name, name) == 0) {
			x->last_id = x->types[i].id;
			strcpy(x->last_ktype, name);
			*id = x->last_id;
			return 0;
		}
	}
	return -1;
}

/* Encode one event with the running total given, or count why it cannot
 * be. 1 if w was filled. */
static int export_encode(export_run *x, const tally_event_rec *ev,
                         uint16_t id, int64_t total, int64_t w[3])
{
	record r = { .ktype = id, .increment = ev->delta > 0,
	             .at_ms = ev->at_ms, .content = ev->content,
	             .member = ev->member, .total = total };

	if (ev->content > UINT32_MAX) {
		x->skip_content++;
		return 0;
	}
	if (ev->member > UINT32_MAX) {
		x->skip_member++;
		return 0;
	}
	if (record_encode(&r, w) != RECORD_OK) {
		x->skip_time++; /* the only field left that can be out of range */
		return 0;
	}
	return 1;
}

/* A new content type (the scan gives each one's events together): the
 * last totals of the one before join the sums. 0, or a stop code. */
static int sums_next_ctype(export_run *x, const char *ctype)
{
	for (size_t i = 0; i < x->cur.cap; i++) {
		const objmap_slot *c = &x->cur.slots[i];
		objmap_slot *b;
		int fresh;

		if (c->key == OBJMAP_EMPTY)
			continue;
		b = objmap_put(&x->base, c->key, &fresh);
		if (b == NULL)
			return EXPORT_STOP_NOMEM;
		if (__builtin_add_overflow(b->total, c->total, &b->total))
			return EXPORT_STOP_SUM;
	}
	objmap_clear(&x->cur);
	snprintf(x->cur_ctype, sizeof x->cur_ctype, "%s", ctype);
	x->cur_any = 1;
	return 0;
}

static int export_visit(void *arg, const tally_event_rec *ev)
{
	export_run *x = arg;
	uint8_t buf[RECORD_SIZE];
	int64_t w[3], total = ev->total;
	uint64_t key = 0;
	uint16_t id;
	int rc;

	out_progress_tick(&x->prog, ++x->scanned);
	if (x->ctype != NULL && strcmp(ev->ctype, x->ctype) != 0)
		return 0;
	if (ktype_id(x, ev->ktype, &id) != 0)
		return EXPORT_STOP_TYPE;
	if (x->ctype == NULL && (!x->cur_any ||
	                         strcmp(ev->ctype, x->cur_ctype) != 0)) {
		rc = sums_next_ctype(x, ev->ctype);
		if (rc != 0)
			return rc;
	}
	/* An id over 32 bits is skipped below, and has no key. */
	if (x->ctype == NULL && ev->content <= UINT32_MAX) {
		const objmap_slot *b;

		key = objmap_key(id, ev->content);
		b = objmap_get(&x->base, key);
		if (b != NULL &&
		    __builtin_add_overflow(b->total, ev->total, &total))
			return EXPORT_STOP_SUM;
	}
	if (!export_encode(x, ev, id, total, w))
		return 0;
	if (x->ctype == NULL) {
		int fresh;
		objmap_slot *c = objmap_put(&x->cur, key, &fresh);

		if (c == NULL)
			return EXPORT_STOP_NOMEM;
		c->total = ev->total;
	}
	/* Events come grouped by content type: a change is a new one. */
	if (x->written == 0 || strcmp(ev->ctype, x->last_ctype) != 0) {
		strcpy(x->last_ctype, ev->ctype);
		x->ctypes++;
	}
	record_pack(w, buf);
	if (fwrite(buf, RECORD_SIZE, 1, x->f) != 1) {
		/* The scan may call more before it returns. */
		x->io_errno = errno;
		return EXPORT_STOP_IO;
	}
	x->written++;
	return 0;
}

static int export_paths_make(const char *out, export_paths *p)
{
	int n1 = snprintf(p->out, sizeof p->out, "%s", out);
	int n2 = snprintf(p->part, sizeof p->part, "%s.part", out);
	int n3 = snprintf(p->types, sizeof p->types, "%s.types", out);
	int n4 = snprintf(p->types_part, sizeof p->types_part,
	                  "%s.types.part", out);

	return n1 < 0 || n2 < 0 || n3 < 0 || n4 < 0 ? -1 : 0;
}

/* Scan into the open records file. CLI_OK or CLI_ERR. */
static int export_scan(tally *t, const char *dir, export_run *x,
                       const export_paths *p)
{
	int rc = tally_events_scan(t, export_visit, x);

	out_progress_done(&x->prog, x->scanned);
	if (rc == EXPORT_STOP_IO) {
		fprintf(stderr, "tally: cannot write %s: %s\n", p->part,
		        strerror(x->io_errno));
		return CLI_ERR;
	}
	if (rc == EXPORT_STOP_TYPE) {
		fprintf(stderr, "tally: %s: an event names a counting type "
		        "that is not listed\n", dir);
		return CLI_ERR;
	}
	if (rc == EXPORT_STOP_NOMEM) {
		fprintf(stderr, "tally: out of memory for the objects' totals "
		        "(export one content type at a time: --ctype NAME)\n");
		return CLI_ERR;
	}
	if (rc == EXPORT_STOP_SUM) {
		fprintf(stderr, "tally: %s: the totals of an object summed over "
		        "its content types do not fit a 64-bit integer (export "
		        "one content type at a time: --ctype NAME)\n", dir);
		return CLI_ERR;
	}
	if (rc != TALLY_OK)
		return offline_fail(dir, "cannot scan the events", rc);
	return CLI_OK;
}

/* Write both files under temporary names, then rename them. An OUT of
 * an earlier export goes first: a crash between the two renames must not
 * leave it beside the new OUT.types, whose ids could name other types. */
static int export_files(tally *t, const char *dir, export_run *x,
                        const export_paths *p)
{
	int rc;

	x->f = fopen(p->part, "wb");
	if (x->f == NULL) {
		fprintf(stderr, "tally: cannot create %s: %s\n", p->part,
		        strerror(errno));
		return CLI_ERR;
	}
	setvbuf(x->f, NULL, _IOFBF, EXPORT_BUF_BYTES);
	rc = export_scan(t, dir, x, p);
	if (offline_close_synced(x->f) != 0 && rc == CLI_OK) {
		fprintf(stderr, "tally: cannot write %s: %s\n", p->part,
		        strerror(errno));
		rc = CLI_ERR;
	}
	if (rc == CLI_OK && typesfile_write(p->types_part, x->types,
	                                    x->ntypes) != 0) {
		fprintf(stderr, "tally: cannot write %s: %s\n", p->types_part,
		        strerror(errno));
		rc = CLI_ERR;
	}
	if (rc == CLI_OK) {
		int gone = unlink(p->out) == 0;

		if (!gone && errno != ENOENT) {
			fprintf(stderr, "tally: cannot replace %s: %s\n",
			        p->out, strerror(errno));
			rc = CLI_ERR;
		} else if (gone && offline_dir_sync(p->out) != 0) {
			fprintf(stderr, "tally: cannot sync the folder of "
			        "%s: %s\n", p->out, strerror(errno));
			rc = CLI_ERR;
		}
	}
	/* OUT.types reaches the disk before OUT does: a new OUT never
	 * stands beside the old OUT.types after a machine crash. */
	if (rc == CLI_OK && (rename(p->types_part, p->types) != 0 ||
	                     offline_dir_sync(p->out) != 0 ||
	                     rename(p->part, p->out) != 0)) {
		fprintf(stderr, "tally: cannot rename into %s: %s\n", p->out,
		        strerror(errno));
		rc = CLI_ERR;
	}
	if (rc == CLI_OK && offline_dir_sync(p->out) != 0) {
		fprintf(stderr, "tally: cannot sync the folder of %s: %s\n",
		        p->out, strerror(errno));
		rc = CLI_ERR;
	}
	if (rc != CLI_OK) {
		unlink(p->part);
		unlink(p->types_part);
	}
	return rc;
}

static void export_report(const cli_ctx *ctx, const export_run *x,
                          const export_paths *p)
{
	uint64_t skipped = x->skip_content + x->skip_member + x->skip_time;
	json_w w;

	if (ctx->json) {
		json_start(&w, stdout);
		json_obj(&w);
		json_kv_str(&w, "out", p->out);
		json_kv_str(&w, "types_file", p->types);
		json_kv_u64(&w, "events_scanned", x->scanned);
		json_kv_u64(&w, "records", x->written);
		json_kv_u64(&w, "content_types", x->ctypes);
		json_key(&w, "skipped");
		json_obj(&w);
		json_kv_u64(&w, "content_over_32_bits", x->skip_content);
		json_kv_u64(&w, "member_over_32_bits", x->skip_member);
		json_kv_u64(&w, "time_outside_2020_2089", x->skip_time);
		json_obj_end(&w);
		json_obj_end(&w);
		json_finish(&w);
		return;
	}
	printf("exported %" PRIu64 " records (%" PRIu64 " bytes) to %s; "
	       "types in %s\n", x->written, x->written * RECORD_SIZE, p->out,
	       p->types);
	printf("skipped %" PRIu64 " events: %" PRIu64 " with a content id "
	       "over 32 bits, %" PRIu64 " with a member id over 32 bits, %"
	       PRIu64 " with a time outside 2020..2089\n", skipped,
	       x->skip_content, x->skip_member, x->skip_time);
}

static void export_warn(const export_run *x)
{
	if (x->ctype != NULL && x->written == 0 && x->skip_content +
	    x->skip_member + x->skip_time == 0)
		fprintf(stderr, "tally: warning: no events of content type "
		        "'%s'\n", x->ctype);
	if (x->ctype == NULL && x->ctypes > 1)
		fprintf(stderr, "tally: warning: %" PRIu64 " content types in "
		        "one file, and records do not hold the content type: "
		        "an import puts them all under one, with each object's "
		        "counts summed over them. Use --ctype NAME to export "
		        "one at a time.\n", x->ctypes);
}

int cmd_export(const cli_ctx *ctx, const cli_args *a)
{
	export_run x = { .ctype = cli_opt(a, "ctype") };
	export_paths p;
	tally_type_info *types = NULL;
	const char *dir;
	tally *t = NULL;
	int rc = offline_data_dir(a, &dir);

	if (rc == CLI_OK && x.ctype != NULL)
		rc = cli_arg_name("--ctype", x.ctype);
	if (rc != CLI_OK)
		return rc;
	if (a->pos[0][0] == '\0' || export_paths_make(a->pos[0], &p) != 0)
		return cli_usage_error(a->cmd, "OUT is not a usable path");
	out_progress_init(&x.prog, "events scanned", OFFLINE_PROGRESS_EVERY,
	                  cli_opt(a, "progress") != NULL);
	rc = offline_open_scan(dir, &t);
	if (rc == CLI_OK)
		rc = offline_types(t, &types, &x.ntypes);
	x.types = types;
	if (rc == CLI_OK)
		rc = export_files(t, dir, &x, &p);
	tally_close(t);
	free(types);
	objmap_free(&x.base);
	objmap_free(&x.cur);
	if (rc == CLI_OK) {
		export_report(ctx, &x, &p);
		export_warn(&x);
	}
	return rc;
}
