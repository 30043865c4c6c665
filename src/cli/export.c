/* export.c: `tally export`: every event as a 24-byte reference record
 * (core/record.h), plus the OUT.types sidecar. Events that do not fit the
 * record's bits are skipped and counted: a truncated id would silently
 * attribute the event to someone else. Output goes to temporary names and
 * is renamed when complete, so a file named OUT is always whole, and its
 * OUT.types always the one written with it.
 *
 * Records hold no content type, and an import puts a file's records under
 * one. Without --ctype, a record's running total is therefore the sum,
 * over every content type, of the last totals its counting type and
 * content reached so far in the scan: each event moves the sum by its
 * own change, so the import counts the sums of total types (and replays
 * a unique type's adds and removes in the file's order), where the totals
 * of a second content type, read as changes of the first's, gave other
 * counts and events that never happened. Events skipped for their bits
 * move the sum too, so their change goes into the next record, as within
 * one content type. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/hmap.h"
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
	uint64_t scanned, written;
	uint64_t skip_content, skip_member, skip_time;
	int io_errno;                 /* of the write that failed */
	out_progress prog;
	/* Without --ctype: (ktype, content) -> the sum over the content
	 * types (sums), and each content type's last total (in ct). */
	objmap sums;
	struct export_ctype *ct;
	size_t nct, capct, curct;     /* curct: the last one looked up */
	hmap *ct_index;               /* name -> index into ct */
} export_run;

typedef struct export_ctype {
	char name[TALLY_NAME_MAX + 1];
	objmap last;                  /* (ktype, content) -> its last total */
	int written;                  /* a record of it is in the file */
} export_ctype;

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

/* The content type's entry, added if new; NULL when out of memory. The
 * scan gives a content type's events together: the last one is looked at
 * first. */
static export_ctype *ctype_of(export_run *x, const char *name)
{
	size_t *idx;
	int fresh;

	if (x->nct > 0 && strcmp(x->ct[x->curct].name, name) == 0)
		return &x->ct[x->curct];
	if (x->ct_index == NULL &&
	    (x->ct_index = hmap_create(sizeof(size_t))) == NULL)
		return NULL;
	/* Room first: a name in the index always has its entry. */
	if (x->nct == x->capct) {
		size_t cap = x->capct ? x->capct * 2 : 8;
		export_ctype *n = realloc(x->ct, cap * sizeof *n);

		if (n == NULL)
			return NULL;
		x->ct = n;
		x->capct = cap;
	}
	idx = hmap_put(x->ct_index, name, strlen(name), &fresh);
	if (idx == NULL)
		return NULL;
	if (!fresh) {
		x->curct = *idx;
		return &x->ct[x->curct];
	}
	*idx = x->nct;
	memset(&x->ct[x->nct], 0, sizeof x->ct[x->nct]);
	snprintf(x->ct[x->nct].name, sizeof x->ct[x->nct].name, "%s", name);
	objmap_init(&x->ct[x->nct].last);
	x->curct = x->nct++;
	return &x->ct[x->curct];
}

/* The record's running total: the object's sum over the content types,
 * moved by this event's change. 0, or a stop code. */
static int sums_move(export_run *x, export_ctype *c, uint64_t key,
                     const tally_event_rec *ev, int64_t *total)
{
	objmap_slot *last, *sum;
	int64_t d;
	int fresh;

	last = objmap_put(&c->last, key, &fresh);
	if (last == NULL)
		return EXPORT_STOP_NOMEM;
	if (__builtin_sub_overflow(ev->total, last->total, &d))
		return EXPORT_STOP_SUM;
	last->total = ev->total;
	sum = objmap_put(&x->sums, key, &fresh);
	if (sum == NULL)
		return EXPORT_STOP_NOMEM;
	if (__builtin_add_overflow(sum->total, d, &sum->total))
		return EXPORT_STOP_SUM;
	*total = sum->total;
	return 0;
}

/* Content types with a record in the file. */
static uint64_t ctypes_written(const export_run *x)
{
	uint64_t n = 0;

	if (x->ctype != NULL)
		return x->written > 0;
	for (size_t i = 0; i < x->nct; i++)
		n += (uint64_t)x->ct[i].written;
	return n;
}

static void export_run_free(export_run *x)
{
	for (size_t i = 0; i < x->nct; i++)
		objmap_free(&x->ct[i].last);
	free(x->ct);
	objmap_free(&x->sums);
	if (x->ct_index != NULL)
		hmap_free(x->ct_index);
}

static int export_visit(void *arg, const tally_event_rec *ev)
{
	export_run *x = arg;
	uint8_t buf[RECORD_SIZE];
	int64_t w[3], total = ev->total;
	export_ctype *c = NULL;
	uint16_t id;
	int rc;

	out_progress_tick(&x->prog, ++x->scanned);
	if (x->ctype != NULL && strcmp(ev->ctype, x->ctype) != 0)
		return 0;
	if (ktype_id(x, ev->ktype, &id) != 0)
		return EXPORT_STOP_TYPE;
	/* Before the checks that may skip it: its change moves the sum. An
	 * id over 32 bits has no key (its object is never written). */
	if (x->ctype == NULL && ev->content <= UINT32_MAX) {
		c = ctype_of(x, ev->ctype);
		if (c == NULL)
			return EXPORT_STOP_NOMEM;
		rc = sums_move(x, c, objmap_key(id, ev->content), ev, &total);
		if (rc != 0)
			return rc;
	}
	if (!export_encode(x, ev, id, total, w))
		return 0;
	if (c != NULL)
		c->written = 1;
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
		json_kv_u64(&w, "content_types", ctypes_written(x));
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
	if (x->ctype == NULL && ctypes_written(x) > 1)
		fprintf(stderr, "tally: warning: %" PRIu64 " content types in "
		        "one file, and records do not hold the content type: "
		        "an import puts them all under one, with each object's "
		        "counts summed over them (a unique type's members as "
		        "the file's adds and removes leave them). Use --ctype "
		        "NAME to export one at a time.\n", ctypes_written(x));
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
	rc = offline_open_read(dir, &t);
	if (rc == CLI_OK)
		rc = offline_types(t, &types, &x.ntypes);
	x.types = types;
	if (rc == CLI_OK)
		rc = export_files(t, dir, &x, &p);
	tally_close(t);
	free(types);
	if (rc == CLI_OK) {
		export_report(ctx, &x, &p);
		export_warn(&x);
	}
	export_run_free(&x);
	return rc;
}
