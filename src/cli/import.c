/* import.c: `tally import`: replay reference records into a data folder.
 *
 * Two passes over the file. The first checks everything (size, record
 * format, type ids, members, amounts) and writes nothing, so a bad file
 * leaves the folder untouched. The second replays the records through
 * tally_write_group_async() with a bounded window of writes in flight:
 * group commit then turns thousands of events into one store batch.
 * Writes of one thread are applied in order, so each object's events keep
 * theirs. Each group ends with the import's mark, a named counter holding
 * how many of the file's records are in, written atomically with them: a
 * crash or kill keeps a prefix of the groups, so a rerun resumes exactly
 * where the folder's mark says and nothing is counted twice.
 *
 * A record holds the object's running total, not the event's amount: for
 * total types the amount is the change from the object's previous record
 * (the first record: |total|, or 1 if 0). Totals are tracked per object
 * (objmap), so records of different objects may interleave. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/record.h"
#include "import.h"
#include "json.h"
#include "objmap.h"
#include "offline.h"
#include "out.h"
#include "typesfile.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#define IMPORT_WINDOW_DEFAULT 16384
#define IMPORT_WINDOW_MAX 65536
/* Records read per fread(). */
#define IMPORT_CHUNK 4096
/* Records per atomic group; with the mark, within batch_ops_max (8192). */
#define IMPORT_GROUP_MAX 1024
/* The mark's name: this prefix, the content type, ':' and 32 hex digits
 * of a hash of the records, their types and the content type. */
#define IMPORT_MARK_PREFIX "tally.import:"
#define IMPORT_MARK_MAX (sizeof IMPORT_MARK_PREFIX + TALLY_NAME_MAX + 1 + 32)

/* The input: the records file and its types. */
typedef struct import_src {
	const char *path;
	FILE *f;
	uint64_t nrec;
	typesfile *types;
	objmap objs;          /* object -> previous total */
	uint8_t used[65536 / 8]; /* type ids seen, as bits */
	XXH3_state_t *hash;   /* of the records, while the check pass reads */
	char mark[IMPORT_MARK_MAX];
	size_t mark_len;
} import_src;

/* What one record becomes. */
typedef struct plan {
	const tally_type_info *type;
	record r;
	int64_t delta;  /* 0 for unique types (the engine's "1") */
	int add;        /* 1 add, 0 remove */
	int write;      /* 0: a total-type record with no change: no write */
	int noop;       /* the record changes no count */
} plan;

typedef struct import_run import_run;

/* One group in flight: n records' writes, then the mark's. */
typedef struct import_group {
	import_run *run;
	size_t n;
	size_t done;          /* callbacks run so far */
	size_t failed;        /* records whose write failed */
	uint64_t mark;        /* the mark's value: records in after it */
	int64_t expect[IMPORT_GROUP_MAX]; /* the file's total after each */
	uint64_t index[IMPORT_GROUP_MAX];
} import_group;

/* The window of groups in flight, shared with the engine's committer
 * thread (the completion callback), hence the lock. */
struct import_run {
	pthread_mutex_t lock;
	pthread_cond_t freed;
	import_group *groups;
	uint32_t *free_ids;
	size_t nfree, ngroups;
	size_t group_max;   /* records per group: window in flight at most */
	int err;            /* first failed write, TALLY_OK if none */
	uint64_t err_index;
	uint64_t differ;    /* counts that came out other than the file's */
	uint64_t lost;      /* records failed, counted in by a mark written */
	uint64_t unmarked;  /* records failed, no mark written since */
	uint64_t marked;    /* the highest mark written: records in */
};

typedef struct import_sum {
	uint64_t writes, noops, differ;
	uint64_t resumed_at; /* records an earlier run had imported */
	double secs;
} import_sum;

/* ---- planning: shared by the check pass and the replay pass ------------- */

/* |total - prev| into *delta; -1 if it does not fit an int64. */
static int total_change(int64_t total, int64_t prev, int64_t *delta)
{
	uint64_t d = total >= prev ? (uint64_t)total - (uint64_t)prev
	                           : (uint64_t)prev - (uint64_t)total;

	if (d > (uint64_t)INT64_MAX)
		return -1;
	*delta = (int64_t)d;
	return 0;
}

static int plan_amount(plan *p, int64_t prev, int first, char *msg)
{
	p->add = p->r.increment;
	if (p->type->mode == TALLY_MODE_UNIQUE) {
		p->noop = p->r.total == prev;
		return 0;
	}
	/* A total type goes the way its total went, whatever the record's
	 * bit says: they disagree where an export folded an event it could
	 * not write (a time outside the record's range) into the next. */
	if (p->r.total != prev)
		p->add = p->r.total > prev;
	if (total_change(p->r.total, prev, &p->delta) != 0) {
		snprintf(msg, IMPORT_MSG_MAX, "the change of the running total "
		         "does not fit a 64-bit integer");
		return -1;
	}
	if (p->delta == 0 && first)
		p->delta = 1;
	p->noop = p->delta == 0;
	p->write = !p->noop;
	return 0;
}

/* Decode and check one record and work out its write. 0, or -1 with
 * msg filled. */
static int plan_record(import_src *s, const uint8_t raw[RECORD_SIZE],
                       plan *p, char *msg)
{
	int64_t w[3];
	int first;

	memset(p, 0, sizeof *p);
	p->write = 1;
	record_unpack(raw, w);
	if (record_decode(w, &p->r) != RECORD_OK) {
		snprintf(msg, IMPORT_MSG_MAX, "not a reference record (the top "
		         "6 bits of word 0 are set)");
		return -1;
	}
	p->type = typesfile_find(s->types, p->r.ktype);
	if (p->type == NULL) {
		snprintf(msg, IMPORT_MSG_MAX, "counting type id %u is not "
		         "listed in %s.types", (unsigned)p->r.ktype, s->path);
		return -1;
	}
	if (p->type->mode == TALLY_MODE_UNIQUE && p->r.member == 0) {
		snprintf(msg, IMPORT_MSG_MAX, "member 0 (anonymous) in unique "
		         "type '%s', which needs a member", p->type->name);
		return -1;
	}
	objmap_slot *o = objmap_put(&s->objs, objmap_key(p->r.ktype,
	                            p->r.content), &first);
	if (o == NULL) {
		snprintf(msg, IMPORT_MSG_MAX, "out of memory for the objects");
		return -1;
	}
	int64_t prev = o->total;
	o->total = p->r.total;
	s->used[p->r.ktype / 8] |= (uint8_t)(1u << (p->r.ktype % 8));
	return plan_amount(p, prev, first, msg);
}

int import_check_records(typesfile *types, const char *name,
                         const uint8_t *buf, size_t len, uint64_t *index,
                         char msg[IMPORT_MSG_MAX])
{
	import_src *s = calloc(1, sizeof *s);
	uint64_t n = len / RECORD_SIZE;
	plan p;
	int rc = 0;

	*index = n;
	if (s == NULL) {
		snprintf(msg, IMPORT_MSG_MAX, "out of memory");
		return -1;
	}
	if (len % RECORD_SIZE != 0) {
		snprintf(msg, IMPORT_MSG_MAX, "%zu bytes is not a whole number "
		         "of %d-byte records", len, RECORD_SIZE);
		free(s);
		return -1;
	}
	s->path = name;
	s->types = types;
	s->nrec = n;
	objmap_init(&s->objs);
	for (uint64_t i = 0; i < n && rc == 0; i++) {
		rc = plan_record(s, buf + i * RECORD_SIZE, &p, msg);
		if (rc != 0)
			*index = i;
	}
	objmap_free(&s->objs);
	free(s);
	return rc;
}

/* ---- reading --------------------------------------------------------------- */

static int src_open(import_src *s, const char *path)
{
	struct stat st;

	s->path = path;
	s->f = fopen(path, "rb");
	if (s->f == NULL || fstat(fileno(s->f), &st) != 0) {
		fprintf(stderr, "tally: cannot open %s: %s\n", path,
		        strerror(errno));
		return CLI_ERR;
	}
	if (!S_ISREG(st.st_mode)) {
		fprintf(stderr, "tally: %s is not a regular file\n", path);
		return CLI_ERR;
	}
	uint64_t size = (uint64_t)st.st_size;
	if (size % RECORD_SIZE != 0) {
		fprintf(stderr, "tally: %s: %" PRIu64 " bytes is not a whole "
		        "number of %d-byte records: the record at offset %"
		        PRIu64 " is cut short\n", path, size, RECORD_SIZE,
		        size - size % RECORD_SIZE);
		return CLI_ERR;
	}
	s->nrec = size / RECORD_SIZE;
	return CLI_OK;
}

/* Visit every record in order: fn(arg, index, raw) returns 0 to go on.
 * *done: how many records fn took (for the progress line's last word). */
typedef int (*record_fn)(void *arg, uint64_t index,
                         const uint8_t raw[RECORD_SIZE]);

static int src_each(import_src *s, uint8_t *buf, record_fn fn, void *arg,
                    uint64_t *done)
{
	uint64_t index = 0;

	*done = 0;
	rewind(s->f);
	while (index < s->nrec) {
		size_t got = fread(buf, RECORD_SIZE, IMPORT_CHUNK, s->f);
		if (got == 0) {
			fprintf(stderr, "tally: cannot read %s at offset %"
			        PRIu64 "%s\n", s->path, index * RECORD_SIZE,
			        ferror(s->f) ? "" : " (the file shrank)");
			return CLI_ERR;
		}
		if (s->hash != NULL) {
			uint64_t take = got < s->nrec - index ? got
			                                      : s->nrec - index;
			XXH3_128bits_update(s->hash, buf, take * RECORD_SIZE);
		}
		for (size_t i = 0; i < got && index < s->nrec; i++, index++) {
			int rc = fn(arg, index, buf + i * RECORD_SIZE);
			if (rc != CLI_OK)
				return rc;
			*done = index + 1;
		}
	}
	return CLI_OK;
}

/* ---- pass 1: check --------------------------------------------------------- */

typedef struct check_pass {
	import_src *s;
	out_progress prog;
} check_pass;

static int check_one(void *arg, uint64_t index,
                     const uint8_t raw[RECORD_SIZE])
{
	check_pass *c = arg;
	char msg[IMPORT_MSG_MAX];
	plan p;

	if (plan_record(c->s, raw, &p, msg) != 0) {
		fprintf(stderr, "tally: %s: record %" PRIu64 " (offset %" PRIu64
		        "): %s\n", c->s->path, index, index * RECORD_SIZE, msg);
		return CLI_ERR;
	}
	out_progress_tick(&c->prog, index + 1);
	return CLI_OK;
}

/* The import's identity, hashed with the records as pass 1 reads them:
 * the content type and every listed type (id, mode, name). */
static void hash_start(XXH3_state_t *h, const char *ctype,
                       const typesfile *types, uint64_t nrec)
{
	uint8_t counts[16];

	/* The counts frame the parts: no two inputs hash the same bytes. */
	for (int i = 0; i < 8; i++) {
		counts[i] = (uint8_t)(nrec >> (8 * i));
		counts[8 + i] = (uint8_t)((uint64_t)types->n >> (8 * i));
	}
	XXH3_128bits_reset(h);
	XXH3_128bits_update(h, counts, sizeof counts);
	XXH3_128bits_update(h, ctype, strlen(ctype) + 1);
	for (size_t i = 0; i < types->n; i++) {
		const tally_type_info *ti = &types->t[i];
		uint8_t head[3] = { (uint8_t)(ti->id >> 8), (uint8_t)ti->id,
		                    (uint8_t)ti->mode };

		XXH3_128bits_update(h, head, sizeof head);
		XXH3_128bits_update(h, ti->name, strlen(ti->name) + 1);
	}
}

/* Pass 1; on success s->mark names this import's mark. */
static int check_all(import_src *s, const char *ctype, uint8_t *buf,
                     int progress)
{
	check_pass c = { .s = s };
	uint64_t done = 0;
	int rc;

	s->hash = XXH3_createState();
	if (s->hash == NULL) {
		fprintf(stderr, "tally: out of memory\n");
		return CLI_ERR;
	}
	hash_start(s->hash, ctype, s->types, s->nrec);
	out_progress_init(&c.prog, "records checked", OFFLINE_PROGRESS_EVERY,
	                  progress);
	rc = src_each(s, buf, check_one, &c, &done);
	out_progress_done(&c.prog, done);
	if (rc == CLI_OK) {
		XXH128_hash_t d = XXH3_128bits_digest(s->hash);
		int n = snprintf(s->mark, sizeof s->mark, "%s%s:%016llx%016llx",
		                 IMPORT_MARK_PREFIX, ctype,
		                 (unsigned long long)d.high64,
		                 (unsigned long long)d.low64);

		assert(n > 0 && (size_t)n < sizeof s->mark);
		s->mark_len = (size_t)n;
	}
	XXH3_freeState(s->hash);
	s->hash = NULL;
	return rc;
}

/* ---- types ------------------------------------------------------------------- */

/* Add the types the records use (a no-op for those that exist). */
static int ensure_types(tally *t, const char *dir, const import_src *s)
{
	for (size_t i = 0; i < s->types->n; i++) {
		const tally_type_info *ti = &s->types->t[i];
		if (!(s->used[ti->id / 8] & (1u << (ti->id % 8))))
			continue;
		int rc = tally_type_add(t, ti->name, ti->mode);
		if (rc == TALLY_ETYPEEXISTS) {
			fprintf(stderr, "tally: %s: counting type '%s' exists "
			        "there as %s; %s.types says %s\n", dir, ti->name,
			        ti->mode == TALLY_MODE_UNIQUE ? "total" : "unique",
			        s->path, typesfile_mode_name(ti->mode));
			return CLI_ERR;
		}
		if (rc != TALLY_OK)
			return offline_fail(dir, "cannot add a counting type", rc);
	}
	return CLI_OK;
}

/* ---- pass 2: replay -------------------------------------------------------- */

static void write_done(void *arg, int err, int64_t result)
{
	import_group *g = arg;
	import_run *run = g->run;
	size_t i;

	pthread_mutex_lock(&run->lock);
	i = g->done++;
	if (err != TALLY_OK && run->err == TALLY_OK) {
		run->err = err;
		run->err_index = i < g->n ? g->index[i] : g->mark;
	}
	if (i < g->n) {
		if (err != TALLY_OK)
			g->failed++;
		else if (result != g->expect[i])
			run->differ++;
	} else { /* the mark, last of the group */
		/* Marks count every record before them: a group that failed
		 * whole (its mark too) is counted in by the next mark that
		 * is written, from a group queued before the failure. */
		run->unmarked += g->failed;
		if (err == TALLY_OK) {
			run->lost += run->unmarked;
			run->unmarked = 0;
			if (g->mark > run->marked)
				run->marked = g->mark;
		}
		run->free_ids[run->nfree++] = (uint32_t)(g - run->groups);
		pthread_cond_signal(&run->freed);
	}
	pthread_mutex_unlock(&run->lock);
}

/* Groups of up to IMPORT_GROUP_MAX records, as many as keep at most
 * window records in flight (one group at least). */
static int run_init(import_run *run, size_t window)
{
	memset(run, 0, sizeof *run);
	run->group_max = window < IMPORT_GROUP_MAX ? window : IMPORT_GROUP_MAX;
	run->ngroups = window / run->group_max;
	run->groups = calloc(run->ngroups, sizeof *run->groups);
	run->free_ids = calloc(run->ngroups, sizeof *run->free_ids);
	if (run->groups == NULL || run->free_ids == NULL)
		return -1;
	for (size_t i = 0; i < run->ngroups; i++) {
		run->groups[i].run = run;
		run->free_ids[i] = (uint32_t)i;
	}
	run->nfree = run->ngroups;
	pthread_mutex_init(&run->lock, NULL);
	pthread_cond_init(&run->freed, NULL);
	return 0;
}

static void run_free(import_run *run)
{
	if (run->groups != NULL && run->free_ids != NULL) {
		pthread_mutex_destroy(&run->lock);
		pthread_cond_destroy(&run->freed);
	}
	free(run->groups);
	free(run->free_ids);
}

/* A free group, emptied, waiting for one; NULL once a write has failed. */
static import_group *group_take(import_run *run)
{
	import_group *g = NULL;

	pthread_mutex_lock(&run->lock);
	while (run->nfree == 0 && run->err == TALLY_OK)
		pthread_cond_wait(&run->freed, &run->lock);
	if (run->err == TALLY_OK) {
		g = &run->groups[run->free_ids[--run->nfree]];
		g->n = g->done = g->failed = 0;
	}
	pthread_mutex_unlock(&run->lock);
	return g;
}

/* Give back a group taken but not queued. */
static void group_drop(import_run *run, import_group *g)
{
	pthread_mutex_lock(&run->lock);
	run->free_ids[run->nfree++] = (uint32_t)(g - run->groups);
	pthread_cond_signal(&run->freed);
	pthread_mutex_unlock(&run->lock);
}

/* Wait until every group in flight has completed. */
static void run_drain(import_run *run)
{
	pthread_mutex_lock(&run->lock);
	while (run->nfree < run->ngroups)
		pthread_cond_wait(&run->freed, &run->lock);
	pthread_mutex_unlock(&run->lock);
}

typedef struct replay_pass {
	import_src *s;
	import_run run;
	tally *t;
	const char *ctype;
	out_progress prog;
	uint64_t resume;      /* records before it are in already */
	uint64_t next;        /* records planned: the next group's mark */
	uint64_t marked;      /* the last mark queued */
	import_group *cur;    /* the group being filled, NULL if none */
	uint64_t writes, noops;
	tally_write w[IMPORT_GROUP_MAX + 1];
} replay_pass;

/* Queue the group being filled (or, with none, one of the mark alone),
 * its mark saying rp->next records are in. */
static int group_send(replay_pass *rp)
{
	import_group *g = rp->cur != NULL ? rp->cur : group_take(&rp->run);
	int failed;
	int rc;

	rp->cur = NULL;
	if (g == NULL)
		return CLI_ERR; /* reported after the drain */
	/* After a failure no more marks: each would count the failed
	 * records in. */
	pthread_mutex_lock(&rp->run.lock);
	failed = rp->run.err != TALLY_OK;
	pthread_mutex_unlock(&rp->run.lock);
	if (failed) {
		group_drop(&rp->run, g);
		return CLI_ERR;
	}
	g->mark = rp->next;
	rp->w[g->n] = (tally_write){ .kind = TALLY_W_SET, .key = rp->s->mark,
	                             .key_len = rp->s->mark_len,
	                             .value = (int64_t)g->mark };
	rc = tally_write_group_async(rp->t, rp->w, g->n + 1, write_done, g);
	if (rc != TALLY_OK) {
		/* No callback will run: fail the group here, nothing of it
		 * written. */
		pthread_mutex_lock(&rp->run.lock);
		if (rp->run.err == TALLY_OK) {
			rp->run.err = rc;
			rp->run.err_index = g->n > 0 ? g->index[0] : g->mark;
		}
		pthread_mutex_unlock(&rp->run.lock);
		group_drop(&rp->run, g);
		return CLI_ERR;
	}
	rp->writes += g->n;
	rp->marked = g->mark;
	return CLI_OK;
}

static int replay_write(replay_pass *rp, const plan *p, uint64_t index)
{
	import_group *g = rp->cur;

	if (g == NULL && (g = rp->cur = group_take(&rp->run)) == NULL)
		return CLI_ERR; /* reported after the drain */
	assert(g->n < rp->run.group_max);
	g->expect[g->n] = p->r.total;
	g->index[g->n] = index;
	rp->w[g->n] = (tally_write){
		.kind = p->add ? TALLY_W_ADD : TALLY_W_REMOVE,
		.event = { .ctype = rp->ctype, .ktype = p->type->name,
		           .content = p->r.content, .member = p->r.member,
		           .delta = p->delta, .at_ms = p->r.at_ms } };
	g->n++;
	return CLI_OK;
}

static int replay_one(void *arg, uint64_t index,
                      const uint8_t raw[RECORD_SIZE])
{
	replay_pass *rp = arg;
	char msg[IMPORT_MSG_MAX];
	plan p;

	/* Checked in pass 1: the same file plans the same way again. Records
	 * an earlier run wrote are planned too: later ones' amounts are
	 * changes from theirs. */
	if (plan_record(rp->s, raw, &p, msg) != 0) {
		fprintf(stderr, "tally: %s: record %" PRIu64 ": %s (the file "
		        "changed during the import?)\n", rp->s->path, index, msg);
		return CLI_ERR;
	}
	/* Records an earlier run wrote are passed over, not sent. */
	if (index < rp->resume)
		return CLI_OK;
	out_progress_tick(&rp->prog, index + 1 - rp->resume);
	rp->noops += (uint64_t)p.noop;
	if (p.write && replay_write(rp, &p, index) != CLI_OK)
		return CLI_ERR;
	rp->next = index + 1;
	if (rp->cur != NULL && rp->cur->n == rp->run.group_max)
		return group_send(rp);
	return CLI_OK;
}

static int replay_report_err(const replay_pass *rp, const char *dir)
{
	const import_run *run = &rp->run;

	if (run->err == TALLY_OK)
		return CLI_OK;
	fprintf(stderr, "tally: %s: record %" PRIu64 " of %s could not be "
	        "written: %s\n", dir, run->err_index, rp->s->path,
	        tally_strerror(run->err));
	if (run->lost > 0)
		fprintf(stderr, "tally: %" PRIu64 " records that could not be "
		        "written are counted as imported by a mark written "
		        "after them (%s): a rerun does not retry them\n",
		        run->lost, rp->s->mark);
	if (run->marked < rp->s->nrec)
		fprintf(stderr, "tally: the records that are in are marked: "
		        "rerun the same import to write the rest (from record "
		        "%" PRIu64 ")\n", run->marked);
	else
		fprintf(stderr, "tally: every other record is in and marked: "
		        "a rerun writes nothing\n");
	return CLI_ERR;
}

static int replay_all(tally *t, const char *dir, const char *ctype,
                      import_src *s, uint8_t *buf, size_t window,
                      int progress, import_sum *sum)
{
	replay_pass *rp = calloc(1, sizeof *rp);
	uint64_t done = 0;
	int rc;

	if (rp == NULL || run_init(&rp->run, window) != 0) {
		if (rp != NULL)
			run_free(&rp->run);
		free(rp);
		fprintf(stderr, "tally: out of memory\n");
		return CLI_ERR;
	}
	rp->s = s;
	rp->t = t;
	rp->ctype = ctype;
	rp->resume = rp->next = rp->marked = sum->resumed_at;
	rp->run.marked = sum->resumed_at;
	objmap_clear(&s->objs);
	out_progress_init(&rp->prog, "records sent", OFFLINE_PROGRESS_EVERY,
	                  progress);
	rc = src_each(s, buf, replay_one, rp, &done);
	/* The last group, or the mark alone after trailing no-ops. */
	if (rc == CLI_OK && (rp->cur != NULL || rp->next > rp->marked))
		rc = group_send(rp);
	if (rp->cur != NULL) /* a pass stopped early: its group is not sent */
		group_drop(&rp->run, rp->cur);
	run_drain(&rp->run);
	out_progress_done(&rp->prog, done > rp->resume ? done - rp->resume : 0);
	if (replay_report_err(rp, dir) != CLI_OK)
		rc = CLI_ERR;
	sum->writes = rp->writes;
	sum->noops = rp->noops;
	sum->differ = rp->run.differ;
	run_free(&rp->run);
	free(rp);
	return rc;
}

/* ---- the command ------------------------------------------------------------- */

static void import_report(const cli_ctx *ctx, const char *dir,
                          const char *ctype, const import_src *s,
                          const import_sum *sum)
{
	json_w w;

	if (ctx->json) {
		json_start(&w, stdout);
		json_obj(&w);
		json_kv_str(&w, "data", dir);
		json_kv_str(&w, "ctype", ctype);
		json_kv_u64(&w, "records", s->nrec);
		json_kv_u64(&w, "resumed_at", sum->resumed_at);
		json_kv_u64(&w, "writes", sum->writes);
		json_kv_u64(&w, "noops", sum->noops);
		json_kv_u64(&w, "counts_differing", sum->differ);
		json_kv_str(&w, "mark", s->mark);
		json_obj_end(&w);
		json_finish(&w);
		return;
	}
	if (s->nrec > 0 && sum->resumed_at == s->nrec) {
		printf("%s was imported into %s before (content type %s; its "
		       "mark %s counts all %" PRIu64 " records): nothing "
		       "written\n", s->path, dir, ctype, s->mark, s->nrec);
		return;
	}
	printf("imported %" PRIu64 " records into %s (content type %s) in "
	       "%.1f s: %" PRIu64 " writes, %" PRIu64 " no-ops (records that "
	       "change no count; a unique type's are still sent)\n", s->nrec,
	       dir, ctype, sum->secs, sum->writes, sum->noops);
	if (sum->resumed_at > 0)
		printf("resumed at record %" PRIu64 ": an earlier run had "
		       "imported the records before it\n", sum->resumed_at);
	if (sum->differ > 0)
		printf("%" PRIu64 " counts differ from the file's running "
		       "totals: the folder held events of those objects "
		       "before, the export skipped some of their events (it "
		       "reports how many), or a unique type's member is in it "
		       "under several content types\n", sum->differ);
}

/* How many records of this file an earlier run imported (its mark), into
 * *resume: 0 if none. */
static int mark_read(tally *t, const char *dir, const import_src *s,
                     uint64_t *resume)
{
	int64_t v = 0;
	int rc = tally_get(t, s->mark, s->mark_len, &v);

	*resume = 0;
	if (rc == TALLY_ENOTFOUND)
		return CLI_OK;
	if (rc != TALLY_OK)
		return offline_fail(dir, "cannot read the import's mark", rc);
	if (v < 0 || (uint64_t)v > s->nrec) {
		fprintf(stderr, "tally: %s: the counter %s holds %" PRId64
		        ", not a count of the %" PRIu64 " records of %s: it is "
		        "not this import's mark\n", dir, s->mark, v, s->nrec,
		        s->path);
		return CLI_ERR;
	}
	*resume = (uint64_t)v;
	return CLI_OK;
}

static double now_secs(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Open the folder, add the types, replay, make it durable. */
static int import_into(const char *dir, const char *ctype, import_src *s,
                       uint8_t *buf, size_t window, int progress,
                       import_sum *sum)
{
	/* Async durability: one fsync at the end instead of one per batch.
	 * An import that dies half-way loses a suffix of its groups, marks
	 * included, and its rerun resumes after the last mark kept. */
	tally_options o = { .durability = TALLY_DURABILITY_ASYNC };
	double t0 = now_secs();
	tally *t = NULL;
	int rc = offline_open(dir, 1, &o, &t, NULL);

	if (rc == CLI_OK)
		rc = ensure_types(t, dir, s);
	if (rc == CLI_OK)
		rc = mark_read(t, dir, s, &sum->resumed_at);
	if (rc == CLI_OK && !(s->nrec > 0 && sum->resumed_at == s->nrec))
		rc = replay_all(t, dir, ctype, s, buf, window, progress, sum);
	if (rc == CLI_OK) {
		int err = tally_sync(t);
		if (err != TALLY_OK)
			rc = offline_fail(dir, "cannot make the import durable",
			                  err);
	}
	tally_close(t);
	sum->secs = now_secs() - t0;
	return rc;
}

/* Parse the options; CLI_OK or CLI_USAGE. */
static int import_args(const cli_args *a, const char **dir,
                       const char **ctype, size_t *window)
{
	const char *wv = cli_opt(a, "window");
	uint64_t v = IMPORT_WINDOW_DEFAULT;
	int rc = offline_data_dir(a, dir);

	*ctype = cli_opt(a, "ctype");
	if (rc == CLI_OK && *ctype == NULL)
		rc = cli_usage_error(a->cmd, "--ctype NAME is required: records "
		                     "do not hold the content type");
	if (rc == CLI_OK)
		rc = cli_arg_name("--ctype", *ctype);
	if (rc == CLI_OK && wv != NULL)
		rc = cli_arg_u64("--window", wv, 1, IMPORT_WINDOW_MAX, &v);
	*window = (size_t)v;
	return rc;
}

int cmd_import(const cli_ctx *ctx, const cli_args *a)
{
	char types_path[CLI_ARG_LEN_MAX + 16];
	const char *dir, *ctype;
	size_t window;
	import_sum sum = { 0 };
	import_src *s = NULL;
	uint8_t *buf = NULL;
	int progress = cli_opt(a, "progress") != NULL;
	int rc = import_args(a, &dir, &ctype, &window);

	if (rc != CLI_OK)
		return rc;
	s = calloc(1, sizeof *s);
	buf = malloc((size_t)IMPORT_CHUNK * RECORD_SIZE);
	if (s == NULL || buf == NULL || (s->types = malloc(sizeof *s->types))
	    == NULL) {
		fprintf(stderr, "tally: out of memory\n");
		rc = CLI_ERR;
		goto done;
	}
	objmap_init(&s->objs);
	snprintf(types_path, sizeof types_path, "%s.types", a->pos[0]);
	rc = src_open(s, a->pos[0]);
	if (rc == CLI_OK && typesfile_read(types_path, s->types) != 0)
		rc = CLI_ERR;
	if (rc == CLI_OK)
		rc = check_all(s, ctype, buf, progress);
	if (rc == CLI_OK)
		rc = import_into(dir, ctype, s, buf, window, progress, &sum);
	if (rc == CLI_OK)
		import_report(ctx, dir, ctype, s, &sum);
done:
	if (s != NULL) {
		if (s->f != NULL)
			fclose(s->f);
		objmap_free(&s->objs);
		free(s->types);
	}
	free(s);
	free(buf);
	return rc;
}
