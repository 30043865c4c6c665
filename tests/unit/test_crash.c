/* test_crash.c: kill -9 under load, reopen, and check that every
 * acknowledged write is there and nothing else but a prefix of the writes
 * still in flight.
 *
 * Design
 *  - The parent runs rounds on one database folder. Each round it forks and
 *    execs this same program as a child (a fresh image: RocksDB's background
 *    threads do not survive fork). The child opens the database (sync
 *    durability, the default) and writes in a loop: tally_incrby on a few
 *    keys, like toggles (tally_add / tally_remove of members 1..200 on a few
 *    objects, so every like op changes something), and view adds with a
 *    delta (some anonymous). Even rounds use blocking calls, one op at a
 *    time; odd rounds pipeline up to W ops with tally_write_async, so group
 *    commit batches many ops per fsync.
 *  - Before issuing an op the child writes an INTENT record to a pipe; when
 *    the op is acknowledged it writes a DONE record with the result. Records
 *    are fixed-size and smaller than PIPE_BUF, so each write is atomic.
 *  - The parent keeps a model: the state after every op recovered so far.
 *    It applies intents in order to a speculative copy and checks each DONE
 *    result against it (INCRBY values and counts after reopen continue from
 *    the recovered state). After a random 5..300 ms (once a few ops are
 *    acknowledged) it SIGKILLs the child and reads the pipe to its end.
 *  - Writes of one thread apply in order and a batch is atomic, so the
 *    recovered database must equal the model after a prefix of this round's
 *    intents: at least every op up to the last acknowledged one, plus
 *    possibly some ops that were in flight. The parent reopens and compares
 *    counter values, unique membership (has() and its at_ms), counts, every
 *    recent list and every member's history (by seq) against the model after
 *    each candidate prefix; exactly one must match. count(like) must also
 *    equal the number of members has() reports. Lost acknowledged data, a
 *    torn batch, a phantom op or a count drifting from membership all fail.
 *  - Events carry explicit at_ms increasing with the op number, so count_at
 *    is checked exactly too.
 *  - A last round lets the child finish and close cleanly: then every op
 *    must be there.
 *
 *  - The same runs with async durability (fewer rounds): tally.h lets that
 *    mode lose writes on a crash of the machine, not of the process.
 *
 * Env: TALLY_CRASH_ROUNDS (default 20), TALLY_CRASH_SEED (default: time).
 * TALLY_CRASH_SELFTEST=early-ack checks this test itself: the child then
 * reports each op acknowledged before issuing it, and the test must fail
 * with "ACKNOWLEDGED WRITES LOST". */
#ifndef _XOPEN_SOURCE
#define _XOPEN_SOURCE 700 /* nftw */
#endif

#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tally.h"
#include "engine/engine.h"   /* the handle's store: a checkpoint held */
#include "store/rocks_int.h" /* by its hook in the spill test */

enum { NKEYS = 4, NOBJ = 4, NMEMBERS = 200 };

static const char *const key_name[NKEYS] = {"crash:a", "crash:b",
                                            "crash:c\0x", "crash:d"};
static const size_t key_len[NKEYS] = {7, 7, 9, 7};
static const char *const obj_ctype[NOBJ] = {"article", "article", "video",
                                            "video"};
static const uint64_t obj_content[NOBJ] = {1, UINT64_C(1) << 40, 0,
                                           UINT64_MAX};

/* Event times: base + op number, so they follow commit order. */
#define AT_BASE INT64_C(1700000000000)
#define MIN_ACKS 3
#define WINDOW_MAX 64
#define REC_MAGIC 0x7a11c4a5u

enum op_kind { OP_INCR = 1, OP_LIKE_ADD, OP_LIKE_REMOVE, OP_VIEW_ADD };
enum rec_type { REC_INTENT = 1, REC_DONE, REC_FAIL };

/* One pipe record, child to parent. */
struct rec {
	uint32_t magic;
	uint32_t type;   /* enum rec_type */
	uint32_t kind;   /* enum op_kind */
	uint32_t target; /* key index or object index */
	uint64_t op;     /* op number, from 1, increasing across rounds */
	uint64_t member;
	int64_t delta;
	int64_t at_ms;
	int64_t result; /* DONE: value or count after; FAIL: error code */
	uint32_t flags; /* REC_F_* */
	uint32_t pad;
};

/* DONE sent before the op ran (self-test only): result not checked. */
#define REC_F_EARLY 1u

_Static_assert(sizeof(struct rec) <= PIPE_BUF, "records must be atomic");

/* ------------------------------------------------------------------------
 * Small shared helpers
 * --------------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static uint64_t rng_below(uint64_t *s, uint64_t n)
{
	return rng_next(s) % n;
}

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static tally_event event_of(uint32_t kind, uint32_t o, uint64_t member,
                            int64_t delta, int64_t at_ms)
{
	tally_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.ctype = obj_ctype[o];
	ev.ktype = kind == OP_VIEW_ADD ? "view" : "like";
	ev.content = obj_content[o];
	ev.member = member;
	ev.delta = kind == OP_VIEW_ADD ? delta : 0;
	ev.at_ms = at_ms;
	return ev;
}

/* ------------------------------------------------------------------------
 * Child: runs in its own exec'd image; never returns into cmocka.
 * --------------------------------------------------------------------- */

static int child_fd = -1;
static pthread_mutex_t child_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t child_cv = PTHREAD_COND_INITIALIZER;
static int child_inflight;

static void child_send(const struct rec *r)
{
	const unsigned char *p = (const unsigned char *)r;
	size_t left = sizeof(*r);
	while (left > 0) {
		ssize_t w = write(child_fd, p, left);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			_exit(4); /* the parent is gone */
		p += w;
		left -= (size_t)w;
	}
}

static void child_fail(const struct rec *op, int rc)
{
	struct rec r = *op;
	r.type = REC_FAIL;
	r.result = rc;
	child_send(&r);
	_exit(3);
}

struct child_ctx {
	struct rec r;
};

static void child_cb(void *arg, int err, int64_t result)
{
	struct child_ctx *ctx = arg;
	if (err != TALLY_OK)
		child_fail(&ctx->r, err);
	ctx->r.type = REC_DONE;
	ctx->r.result = result;
	child_send(&ctx->r);
	free(ctx);
	pthread_mutex_lock(&child_mu);
	child_inflight--;
	pthread_cond_broadcast(&child_cv);
	pthread_mutex_unlock(&child_mu);
}

/* Issues one op with a blocking call; returns the result. */
static int64_t child_blocking_quiet(tally *t, const struct rec *r)
{
	int64_t out = 0;
	int rc;
	if (r->kind == OP_INCR) {
		rc = tally_incrby(t, key_name[r->target], key_len[r->target],
		                  r->delta, &out);
	} else {
		tally_event ev = event_of(r->kind, r->target, r->member,
		                          r->delta, r->at_ms);
		rc = r->kind == OP_LIKE_REMOVE ? tally_remove(t, &ev, &out)
		                               : tally_add(t, &ev, &out);
	}
	if (rc != TALLY_OK)
		child_fail(r, rc);
	return out;
}

/* Issues one op with a blocking call and reports its result. */
static void child_blocking(tally *t, struct rec *r)
{
	int64_t out = child_blocking_quiet(t, r);
	r->type = REC_DONE;
	r->result = out;
	child_send(r);
}

/* Queues one op; its callback reports it. */
static void child_async(tally *t, const struct rec *r, int window)
{
	pthread_mutex_lock(&child_mu);
	while (child_inflight >= window)
		pthread_cond_wait(&child_cv, &child_mu);
	child_inflight++;
	pthread_mutex_unlock(&child_mu);

	struct child_ctx *ctx = malloc(sizeof(*ctx));
	if (ctx == NULL)
		child_fail(r, TALLY_ENOMEM);
	ctx->r = *r;
	tally_write w;
	memset(&w, 0, sizeof(w));
	if (r->kind == OP_INCR) {
		w.kind = TALLY_W_INCRBY;
		w.key = key_name[r->target];
		w.key_len = key_len[r->target];
		w.value = r->delta;
	} else {
		w.kind = r->kind == OP_LIKE_REMOVE ? TALLY_W_REMOVE
		                                   : TALLY_W_ADD;
		w.event = event_of(r->kind, r->target, r->member, r->delta,
		                   r->at_ms);
	}
	int rc = tally_write_async(t, &w, child_cb, ctx);
	if (rc != TALLY_OK)
		child_fail(r, rc);
}

/* --table-child DB: TC_FIRST likes of one article, then tally_compact(),
 * which writes them into the tables ahead of their checkpoint, then
 * TC_MORE more, then death without a close. The tables then hold part of
 * a generation whose journal records the next open replays. */
#define TC_FIRST 300
#define TC_MORE 10
#define TC_CONTENT 9
#define TC_AT0 1700000000000

static int table_child_main(char **argv)
{
	tally *t = NULL;

	if (tally_open(argv[2], NULL, &t) != TALLY_OK)
		return 2;
	for (uint64_t m = 1; m <= TC_FIRST + TC_MORE; m++) {
		tally_event ev = { .ctype = "article", .ktype = "like",
		                   .content = TC_CONTENT, .member = m,
		                   .at_ms = TC_AT0 + (int64_t)m };

		if (tally_add(t, &ev, NULL) != TALLY_OK)
			return 3;
		if (m == TC_FIRST && tally_compact(t) != TALLY_OK)
			return 4;
	}
	_exit(0);
}

/* --token-child DB: an increment with a token of a 3 s window, then 2.6 s
 * idle, then death without a close. The committer of an idle handle
 * wakes to store the tokens' clock each second while a token is stored,
 * so the next open resumes it 1.5 s or more after the token's start. */
#define TK_RETENTION_MS 3000
#define TK_ID "idle-then-killed"

static int token_child_main(char **argv)
{
	tally_options o = { .token_retention_ms = TK_RETENTION_MS };
	tally_write w = { .kind = TALLY_W_INCRBY, .key = "k", .key_len = 1,
	                  .value = 1, .id = TK_ID, .id_len = strlen(TK_ID) };
	tally *t = NULL;
	int64_t r = 0;

	if (tally_open(argv[2], &o, &t) != TALLY_OK)
		return 2;
	if (tally_write_sync(t, &w, &r) != TALLY_OK || r != 1)
		return 3;
	usleep(2600 * 1000);
	_exit(0);
}

/* --spill-child DB: likes of one article until a checkpoint starts, held
 * there by the store's hook; SC_MORE more, in the next generation; then
 * tally_compact() on a thread of its own, and death without a close while
 * the checkpoint is still held. Exit 0: the compaction was still waiting
 * for the checkpoint; 10: it had returned, the two generations spilled
 * apart. */
#define SC_MORE 200
#define SC_CONTENT 11

static atomic_int sc_held, sc_done;

static void sc_hold(void *arg)
{
	(void)arg;
	atomic_store(&sc_held, 1);
	for (;;)
		pause();
}

static void *sc_compact(void *arg)
{
	atomic_store(&sc_done, tally_compact(arg) == TALLY_OK ? 1 : 2);
	return NULL;
}

static int sc_like(tally *t, uint64_t m)
{
	tally_event ev = { .ctype = "article", .ktype = "like",
	                   .content = SC_CONTENT, .member = m,
	                   .at_ms = TC_AT0 + (int64_t)m };

	return tally_add(t, &ev, NULL);
}

static int spill_child_main(char **argv)
{
	tally_options o = { .checkpoint_kib = 4 };
	tally *t = NULL;
	pthread_t th;
	uint64_t m = 0;

	if (tally_open(argv[2], &o, &t) != TALLY_OK)
		return 2;
	((rocks *)t->st)->ck_hook = sc_hold;
	while (!atomic_load(&sc_held))
		if (++m > 100000 || sc_like(t, m) != TALLY_OK)
			return 3;
	for (int i = 0; i < SC_MORE; i++)
		if (sc_like(t, ++m) != TALLY_OK)
			return 4;
	if (pthread_create(&th, NULL, sc_compact, t) != 0)
		return 5;
	for (int i = 0; i < 100 && atomic_load(&sc_done) == 0; i++)
		usleep(10000);
	switch (atomic_load(&sc_done)) {
	case 0:
		_exit(0);
	case 1:
		_exit(10);
	default:
		_exit(6);
	}
}

/* argv: --crash-child DB FD SEED NEXT_OP WINDOW CLEAN_OPS DURABILITY
 *       SELFTEST */
static int child_main(char **argv)
{
	const char *db = argv[2];
	child_fd = atoi(argv[3]);
	uint64_t seed = strtoull(argv[4], NULL, 10);
	uint64_t next_op = strtoull(argv[5], NULL, 10);
	int window = atoi(argv[6]);
	long clean_ops = atol(argv[7]);
	tally_options opts;
	memset(&opts, 0, sizeof(opts));
	opts.durability = atoi(argv[8]);
	/* Every other seed checkpoints its counters every few batches, so
	 * kills land during checkpoints and between them. */
	opts.checkpoint_kib = (seed & 2) ? 4 : 0;
	const char *selftest = argv[9];
	struct rec base;
	memset(&base, 0, sizeof(base));
	base.magic = REC_MAGIC;

	tally *t = NULL;
	int rc = tally_open(db, &opts, &t);
	if (rc != TALLY_OK)
		child_fail(&base, rc);

	/* Membership, to choose toggles: the parent checks every choice
	 * against its model. */
	static unsigned char in[NOBJ][NMEMBERS + 1];
	for (uint32_t o = 0; o < NOBJ; o++) {
		for (uint64_t m = 1; m <= NMEMBERS; m++) {
			rc = tally_has(t, obj_ctype[o], "like", obj_content[o],
			               m, NULL);
			if (rc != TALLY_OK && rc != TALLY_ENOTFOUND)
				child_fail(&base, rc);
			in[o][m] = rc == TALLY_OK;
		}
	}

	for (long i = 0; clean_ops == 0 || i < clean_ops; i++) {
		struct rec r = base;
		r.type = REC_INTENT;
		r.op = next_op++;
		r.at_ms = AT_BASE + (int64_t)r.op;
		uint64_t pick = rng_below(&seed, 10);
		if (pick < 4) {
			r.kind = OP_INCR;
			r.target = (uint32_t)rng_below(&seed, NKEYS);
			r.delta = 1 + (int64_t)rng_below(&seed, 10);
		} else if (pick < 8) {
			r.target = (uint32_t)rng_below(&seed, NOBJ);
			r.member = 1 + rng_below(&seed, NMEMBERS);
			r.kind = in[r.target][r.member] ? OP_LIKE_REMOVE
			                                : OP_LIKE_ADD;
			in[r.target][r.member] = r.kind == OP_LIKE_ADD;
			r.delta = r.kind == OP_LIKE_ADD ? 1 : -1;
		} else {
			r.kind = OP_VIEW_ADD;
			r.target = (uint32_t)rng_below(&seed, NOBJ);
			r.member = rng_below(&seed, NMEMBERS + 1); /* 0: anon */
			r.delta = 1 + (int64_t)rng_below(&seed, 10);
		}
		child_send(&r);
		if (strcmp(selftest, "early-ack") == 0) {
			/* Self-test of this test: acknowledge before the op
			 * is durable. The parent must then report lost
			 * writes. */
			struct rec early = r;
			early.type = REC_DONE;
			early.flags = REC_F_EARLY;
			child_send(&early);
			child_blocking_quiet(t, &r);
			continue;
		}
		if (window == 0)
			child_blocking(t, &r);
		else
			child_async(t, &r, window);
	}
	pthread_mutex_lock(&child_mu);
	while (child_inflight > 0)
		pthread_cond_wait(&child_cv, &child_mu);
	pthread_mutex_unlock(&child_mu);
	tally_close(t);
	_exit(0);
}

/* ------------------------------------------------------------------------
 * Parent: model
 * --------------------------------------------------------------------- */

struct op {
	uint32_t kind;
	uint32_t target;
	uint64_t no;
	uint64_t member;
	int64_t delta; /* INCR and VIEW: the delta; LIKE: +1 or -1 */
	int64_t at_ms;
	int64_t expect; /* result the op must report */
	int acked;
};

struct model {
	int64_t ctr[NKEYS];
	int ctr_set[NKEYS];
	unsigned char in[NOBJ][NMEMBERS + 1];
	int64_t in_at[NOBJ][NMEMBERS + 1];
	int64_t likes[NOBJ];
	int64_t views[NOBJ];
};

static int64_t model_apply(struct model *m, const struct op *op)
{
	uint32_t o = op->target;
	switch (op->kind) {
	case OP_INCR:
		m->ctr[o] += op->delta;
		m->ctr_set[o] = 1;
		return m->ctr[o];
	case OP_LIKE_ADD:
		m->in[o][op->member] = 1;
		m->in_at[o][op->member] = op->at_ms;
		return ++m->likes[o];
	case OP_LIKE_REMOVE:
		m->in[o][op->member] = 0;
		m->in_at[o][op->member] = 0;
		return --m->likes[o];
	default:
		m->views[o] += op->delta;
		return m->views[o];
	}
}

/* What the reopened database shows. */
struct elist {
	tally_entry *v;
	size_t n;
};

struct hlist {
	tally_history_entry *v;
	size_t n;
};

struct obs {
	int64_t ctr[NKEYS];
	int ctr_set[NKEYS];
	unsigned char in[NOBJ][NMEMBERS + 1];
	int64_t in_at[NOBJ][NMEMBERS + 1];
	int64_t likes[NOBJ];
	int64_t views[NOBJ];
	struct elist like_recent[NOBJ];
	struct elist view_recent[NOBJ];
	struct hlist like_hist[NMEMBERS + 1];
	struct hlist view_hist[NMEMBERS + 1];
};

struct crash {
	char dir[128];
	char db[192];
	uint64_t seed;
	uint64_t rng;
	int durability;         /* of the child's handle */
	char selftest[32];      /* TALLY_CRASH_SELFTEST, or "none" */
	pid_t pid;     /* running child, or 0 */
	tally *t;      /* the parent's handle while it verifies */
	struct model committed; /* state after every recovered op */
	struct model spec;      /* committed + this round's intents */
	struct op *log;         /* every recovered op, in order */
	size_t nlog, caplog;
	struct op *rops;        /* this round's intents, in order */
	size_t nrops, caprops;
	uint64_t next_op;       /* first op number of the next child */
	uint64_t round_first;   /* op number of rops[0] */
	long acks;              /* DONE records this round */
	char err[1024];         /* first protocol error seen */
	struct obs *obs;
};

#define CRASH_ERR(c, ...)                                                   \
	do {                                                                \
		if ((c)->err[0] == '\0')                                    \
			snprintf((c)->err, sizeof((c)->err), __VA_ARGS__);  \
	} while (0)

static void *grow(void *p, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap)
		return p;
	size_t ncap = *cap == 0 ? 1024 : *cap;
	while (ncap < need)
		ncap *= 2;
	p = realloc(p, ncap * size);
	assert_non_null(p);
	*cap = ncap;
	return p;
}

static const char *kind_name(uint32_t kind)
{
	switch (kind) {
	case OP_INCR:
		return "incrby";
	case OP_LIKE_ADD:
		return "like add";
	case OP_LIKE_REMOVE:
		return "like remove";
	case OP_VIEW_ADD:
		return "view add";
	default:
		return "?";
	}
}

/* One record from the child. */
static void on_record(struct crash *c, const struct rec *r)
{
	if (r->magic != REC_MAGIC) {
		CRASH_ERR(c, "bad record magic %08" PRIx32, r->magic);
		return;
	}
	if (r->type == REC_FAIL) {
		CRASH_ERR(c, "child: op %" PRIu64 " (%s) failed: %" PRId64
		          " (%s)", r->op, kind_name(r->kind), r->result,
		          tally_strerror((int)r->result));
		return;
	}
	if (r->type == REC_INTENT) {
		if (r->op != c->round_first + c->nrops) {
			CRASH_ERR(c, "intent for op %" PRIu64 ", want %" PRIu64,
			          r->op, c->round_first + c->nrops);
			return;
		}
		struct op op;
		memset(&op, 0, sizeof(op));
		op.kind = r->kind;
		op.target = r->target;
		op.no = r->op;
		op.member = r->member;
		op.delta = r->delta;
		op.at_ms = r->at_ms;
		if (op.kind == OP_LIKE_ADD && c->spec.in[op.target][op.member])
			CRASH_ERR(c, "op %" PRIu64 ": the child saw member %"
			          PRIu64 " of object %" PRIu32 " out, the model "
			          "has it in", op.no, op.member, op.target);
		if (op.kind == OP_LIKE_REMOVE &&
		    !c->spec.in[op.target][op.member])
			CRASH_ERR(c, "op %" PRIu64 ": the child saw member %"
			          PRIu64 " of object %" PRIu32 " in, the model "
			          "has it out", op.no, op.member, op.target);
		op.expect = model_apply(&c->spec, &op);
		c->rops = grow(c->rops, &c->caprops, c->nrops + 1,
		               sizeof(*c->rops));
		c->rops[c->nrops++] = op;
		return;
	}
	if (r->type != REC_DONE || r->op < c->round_first ||
	    r->op >= c->round_first + c->nrops) {
		CRASH_ERR(c, "unexpected record type %" PRIu32 " op %" PRIu64,
		          r->type, r->op);
		return;
	}
	struct op *op = &c->rops[r->op - c->round_first];
	if (op->acked)
		CRASH_ERR(c, "op %" PRIu64 " acknowledged twice", op->no);
	op->acked = 1;
	c->acks++;
	if ((r->flags & REC_F_EARLY) == 0 && r->result != op->expect)
		CRASH_ERR(c, "op %" PRIu64 " (%s, target %" PRIu32 ", member %"
		          PRIu64 ", delta %" PRId64 ") returned %" PRId64
		          ", the model says %" PRId64, op->no,
		          kind_name(op->kind), op->target, op->member,
		          op->delta, r->result, op->expect);
}

/* Pipe reader: handles partial reads; records are processed whole. */
struct reader {
	int fd;
	int eof;
	size_t have;
	unsigned char buf[sizeof(struct rec) * 512];
};

/* Waits up to timeout_ms for data, reads what is there, processes every
 * whole record. */
static void reader_step(struct crash *c, struct reader *rd, int timeout_ms)
{
	struct pollfd p = {.fd = rd->fd, .events = POLLIN};
	int n = poll(&p, 1, timeout_ms < 0 ? 0 : timeout_ms);
	if (n < 0 && errno != EINTR)
		fail_msg("poll: %s", strerror(errno));
	if (n <= 0)
		return;
	ssize_t got = read(rd->fd, rd->buf + rd->have,
	                   sizeof(rd->buf) - rd->have);
	if (got < 0) {
		if (errno == EINTR || errno == EAGAIN)
			return;
		fail_msg("read: %s", strerror(errno));
	}
	if (got == 0) {
		rd->eof = 1;
		return;
	}
	rd->have += (size_t)got;
	size_t off = 0;
	while (rd->have - off >= sizeof(struct rec)) {
		struct rec r;
		memcpy(&r, rd->buf + off, sizeof(r));
		on_record(c, &r);
		off += sizeof(r);
	}
	memmove(rd->buf, rd->buf + off, rd->have - off);
	rd->have -= off;
}

/* ------------------------------------------------------------------------
 * Parent: observing and comparing
 * --------------------------------------------------------------------- */

static void free_obs(struct obs *ob)
{
	for (int o = 0; o < NOBJ; o++) {
		free(ob->like_recent[o].v);
		free(ob->view_recent[o].v);
	}
	for (int m = 0; m <= NMEMBERS; m++) {
		free(ob->like_hist[m].v);
		free(ob->view_hist[m].v);
	}
	memset(ob, 0, sizeof(*ob));
}

static void read_recent(tally *t, uint32_t o, const char *ktype,
                        struct elist *out)
{
	size_t cap = 0;
	uint64_t before = 0;
	for (;;) {
		out->v = grow(out->v, &cap, out->n + TALLY_PAGE_MAX,
		              sizeof(*out->v));
		size_t got = 0;
		int rc = tally_recent(t, obj_ctype[o], ktype, obj_content[o],
		                      TALLY_PAGE_MAX, before, out->v + out->n,
		                      &got);
		if (rc != TALLY_OK)
			fail_msg("recent(%s, object %" PRIu32 "): %s", ktype, o,
			         tally_strerror(rc));
		for (size_t i = out->n; i < out->n + got; i++) {
			uint64_t prev = i == 0 ? UINT64_MAX : out->v[i - 1].seq;
			if (out->v[i].seq >= prev)
				fail_msg("recent(%s, object %" PRIu32 "): seq %"
				         PRIu64 " after %" PRIu64, ktype, o,
				         out->v[i].seq, prev);
		}
		out->n += got;
		if (got < TALLY_PAGE_MAX)
			return;
		before = out->v[out->n - 1].seq;
	}
}

static void read_history(tally *t, uint64_t m, const char *ktype,
                         struct hlist *out)
{
	size_t cap = 0;
	uint64_t before = 0;
	for (;;) {
		out->v = grow(out->v, &cap, out->n + TALLY_PAGE_MAX,
		              sizeof(*out->v));
		size_t got = 0;
		int rc = tally_history(t, m, ktype, TALLY_PAGE_MAX, before,
		                       out->v + out->n, &got);
		if (rc != TALLY_OK)
			fail_msg("history(%" PRIu64 ", %s): %s", m, ktype,
			         tally_strerror(rc));
		for (size_t i = out->n; i < out->n + got; i++) {
			uint64_t prev = i == 0 ? UINT64_MAX : out->v[i - 1].seq;
			if (out->v[i].seq >= prev)
				fail_msg("history(%" PRIu64 ", %s): seq %" PRIu64
				         " after %" PRIu64, m, ktype,
				         out->v[i].seq, prev);
		}
		out->n += got;
		if (got < TALLY_PAGE_MAX)
			return;
		before = out->v[out->n - 1].seq;
	}
}

static void observe(tally *t, struct obs *ob)
{
	for (int k = 0; k < NKEYS; k++) {
		int rc = tally_get(t, key_name[k], key_len[k], &ob->ctr[k]);
		if (rc != TALLY_OK && rc != TALLY_ENOTFOUND)
			fail_msg("get(%s): %s", key_name[k], tally_strerror(rc));
		ob->ctr_set[k] = rc == TALLY_OK;
	}
	for (uint32_t o = 0; o < NOBJ; o++) {
		int rc = tally_count(t, obj_ctype[o], "like", obj_content[o],
		                     &ob->likes[o]);
		if (rc == TALLY_OK)
			rc = tally_count(t, obj_ctype[o], "view",
			                 obj_content[o], &ob->views[o]);
		if (rc != TALLY_OK)
			fail_msg("count(object %" PRIu32 "): %s", o,
			         tally_strerror(rc));
		int64_t in = 0;
		for (uint64_t m = 1; m <= NMEMBERS; m++) {
			rc = tally_has(t, obj_ctype[o], "like", obj_content[o],
			               m, &ob->in_at[o][m]);
			if (rc != TALLY_OK && rc != TALLY_ENOTFOUND)
				fail_msg("has(object %" PRIu32 ", %" PRIu64
				         "): %s", o, m, tally_strerror(rc));
			ob->in[o][m] = rc == TALLY_OK;
			if (rc != TALLY_OK)
				ob->in_at[o][m] = 0;
			in += ob->in[o][m];
		}
		/* The count can never drift from the membership. */
		if (ob->likes[o] != in)
			fail_msg("object %" PRIu32 ": count(like) = %" PRId64
			         " but has() finds %" PRId64 " members", o,
			         ob->likes[o], in);
		read_recent(t, o, "like", &ob->like_recent[o]);
		read_recent(t, o, "view", &ob->view_recent[o]);
	}
	for (uint64_t m = 1; m <= NMEMBERS; m++) {
		read_history(t, m, "like", &ob->like_hist[m]);
		read_history(t, m, "view", &ob->view_hist[m]);
	}
}

/* Counters, membership and counts: 1 if equal, else 0 and a reason. */
static int state_matches(const struct model *m, const struct obs *ob,
                         char *why, size_t why_len)
{
	for (int k = 0; k < NKEYS; k++) {
		if (m->ctr_set[k] != ob->ctr_set[k] ||
		    (m->ctr_set[k] && m->ctr[k] != ob->ctr[k])) {
			snprintf(why, why_len, "counter %d: model %" PRId64
			         "%s, db %" PRId64 "%s", k, m->ctr[k],
			         m->ctr_set[k] ? "" : " (missing)", ob->ctr[k],
			         ob->ctr_set[k] ? "" : " (missing)");
			return 0;
		}
	}
	for (int o = 0; o < NOBJ; o++) {
		if (m->likes[o] != ob->likes[o] ||
		    m->views[o] != ob->views[o]) {
			snprintf(why, why_len, "object %d: model likes %" PRId64
			         " views %" PRId64 ", db likes %" PRId64
			         " views %" PRId64, o, m->likes[o], m->views[o],
			         ob->likes[o], ob->views[o]);
			return 0;
		}
		for (int u = 1; u <= NMEMBERS; u++) {
			if (m->in[o][u] != ob->in[o][u] ||
			    m->in_at[o][u] != ob->in_at[o][u]) {
				snprintf(why, why_len, "object %d member %d: "
				         "model %s at %" PRId64 ", db %s at %"
				         PRId64, o, u, m->in[o][u] ? "in" : "out",
				         m->in_at[o][u],
				         ob->in[o][u] ? "in" : "out",
				         ob->in_at[o][u]);
				return 0;
			}
		}
	}
	return 1;
}

static const struct op *op_at(const struct crash *c, size_t i)
{
	return i < c->nlog ? &c->log[i] : &c->rops[i - c->nlog];
}

/* Every recent list and history against the recovered ops plus the first
 * p of this round, newest first: 1 if equal, else 0 and a reason. */
static int logs_match(const struct crash *c, size_t p, const struct obs *ob,
                      char *why, size_t why_len)
{
	size_t lr[NOBJ] = {0}, vr[NOBJ] = {0};
	static size_t lh[NMEMBERS + 1], vh[NMEMBERS + 1];
	memset(lh, 0, sizeof(lh));
	memset(vh, 0, sizeof(vh));
	for (size_t i = c->nlog + p; i-- > 0;) {
		const struct op *op = op_at(c, i);
		if (op->kind == OP_INCR)
			continue;
		int like = op->kind != OP_VIEW_ADD;
		uint32_t o = op->target;
		if (op->member == 0)
			continue; /* anonymous: counted, not listed */
		const struct elist *el = like ? &ob->like_recent[o]
		                              : &ob->view_recent[o];
		size_t *ei = like ? &lr[o] : &vr[o];
		if (*ei >= el->n) {
			snprintf(why, why_len, "op %" PRIu64 " (%s) missing "
			         "from recent of object %" PRIu32, op->no,
			         kind_name(op->kind), o);
			return 0;
		}
		const tally_entry *e = &el->v[(*ei)++];
		if (e->member != op->member || e->delta != op->delta ||
		    e->at_ms != op->at_ms) {
			snprintf(why, why_len, "recent of object %" PRIu32
			         ": op %" PRIu64 " (%s member %" PRIu64
			         " delta %" PRId64 " at %" PRId64 ") listed as "
			         "member %" PRIu64 " delta %" PRId64 " at %"
			         PRId64, o, op->no, kind_name(op->kind),
			         op->member, op->delta, op->at_ms, e->member,
			         e->delta, e->at_ms);
			return 0;
		}
		const struct hlist *hl = like ? &ob->like_hist[op->member]
		                              : &ob->view_hist[op->member];
		size_t *hi = like ? &lh[op->member] : &vh[op->member];
		if (*hi >= hl->n) {
			snprintf(why, why_len, "op %" PRIu64 " (%s) missing "
			         "from history of member %" PRIu64, op->no,
			         kind_name(op->kind), op->member);
			return 0;
		}
		const tally_history_entry *h = &hl->v[(*hi)++];
		if (strcmp(h->ctype, obj_ctype[o]) != 0 ||
		    h->content != obj_content[o] || h->delta != op->delta ||
		    h->at_ms != op->at_ms || h->seq != e->seq) {
			snprintf(why, why_len, "history of member %" PRIu64
			         ": op %" PRIu64 " (%s) listed as %s/%" PRIu64
			         " delta %" PRId64 " at %" PRId64 " seq %"
			         PRIu64 " (recent seq %" PRIu64 ")", op->member,
			         op->no, kind_name(op->kind), h->ctype,
			         h->content, h->delta, h->at_ms, h->seq,
			         e->seq);
			return 0;
		}
	}
	for (int o = 0; o < NOBJ; o++) {
		if (lr[o] != ob->like_recent[o].n ||
		    vr[o] != ob->view_recent[o].n) {
			snprintf(why, why_len, "object %d lists %zu likes and "
			         "%zu views, the model %zu and %zu", o,
			         ob->like_recent[o].n, ob->view_recent[o].n,
			         lr[o], vr[o]);
			return 0;
		}
	}
	for (int m = 1; m <= NMEMBERS; m++) {
		if (lh[m] != ob->like_hist[m].n ||
		    vh[m] != ob->view_hist[m].n) {
			snprintf(why, why_len, "member %d history lists %zu "
			         "likes and %zu views, the model %zu and %zu", m,
			         ob->like_hist[m].n, ob->view_hist[m].n, lh[m],
			         vh[m]);
			return 0;
		}
	}
	return 1;
}

/* count_at of each object at a few times against the recovered ops. */
static void check_count_at(struct crash *c, tally *t)
{
	for (uint32_t o = 0; o < NOBJ; o++) {
		for (int like = 0; like < 2; like++) {
			for (int probe = 0; probe < 4; probe++) {
				int64_t at;
				if (probe == 0)
					at = AT_BASE; /* before every op */
				else if (probe == 1)
					at = AT_BASE + (int64_t)c->next_op + 1;
				else
					at = AT_BASE + 1 + (int64_t)rng_below(
					    &c->rng, c->next_op);
				int64_t want = 0;
				for (size_t i = 0; i < c->nlog; i++) {
					const struct op *op = &c->log[i];
					if (op->kind == OP_INCR ||
					    op->target != o || op->at_ms > at ||
					    (op->kind == OP_VIEW_ADD) == like)
						continue;
					want += op->delta;
				}
				int64_t got = INT64_MIN;
				int rc = tally_count_at(t, obj_ctype[o],
				                        like ? "like" : "view",
				                        obj_content[o], at, &got);
				if (rc != TALLY_OK || got != want)
					fail_msg("count_at(object %" PRIu32
					         ", %s, %" PRId64 ") = %" PRId64
					         " (%s), want %" PRId64, o,
					         like ? "like" : "view", at, got,
					         tally_strerror(rc), want);
			}
		}
	}
}

/* Reopens the database and finds the prefix of this round's ops that it
 * holds; fails unless exactly the acknowledged ones and maybe some that
 * followed them are there. */
static void verify(struct crash *c, int round)
{
	int rc = tally_open(c->db, NULL, &c->t);
	if (rc != TALLY_OK)
		fail_msg("round %d: reopen after the kill: %d (%s)", round, rc,
		         tally_strerror(rc));
	struct obs *ob = c->obs;
	free_obs(ob);
	observe(c->t, ob);

	size_t p_min = 0;
	for (size_t i = 0; i < c->nrops; i++)
		if (c->rops[i].acked)
			p_min = i + 1;
	struct model m = c->committed;
	for (size_t i = 0; i < p_min; i++)
		model_apply(&m, &c->rops[i]);

	char why[512] = "", first_why[512] = "";
	size_t found = SIZE_MAX;
	for (size_t p = p_min; p <= c->nrops; p++) {
		if (state_matches(&m, ob, why, sizeof(why)) &&
		    logs_match(c, p, ob, why, sizeof(why))) {
			found = p;
			break;
		}
		if (p == p_min)
			memcpy(first_why, why, sizeof(why));
		if (p < c->nrops)
			model_apply(&m, &c->rops[p]);
	}
	if (found == SIZE_MAX) {
		/* Say whether acknowledged ops were lost. */
		struct model e = c->committed;
		size_t lost_from = SIZE_MAX;
		for (size_t p = 0; p < p_min; p++) {
			if (lost_from == SIZE_MAX &&
			    state_matches(&e, ob, why, sizeof(why)) &&
			    logs_match(c, p, ob, why, sizeof(why)))
				lost_from = p;
			model_apply(&e, &c->rops[p]);
		}
		if (lost_from != SIZE_MAX)
			fail_msg("round %d: ACKNOWLEDGED WRITES LOST: the "
			         "database holds only the first %zu of this "
			         "round's ops, but %zu were acknowledged (op %"
			         PRIu64 " on); first difference against the "
			         "acknowledged state: %s", round, lost_from,
			         p_min, c->rops[lost_from].no, first_why);
		fail_msg("round %d: the database matches no prefix of the ops "
		         "(%zu acknowledged, %zu issued); against the "
		         "acknowledged state: %s", round, p_min, c->nrops,
		         first_why);
	}

	c->committed = m;
	c->log = grow(c->log, &c->caplog, c->nlog + found, sizeof(*c->log));
	memcpy(c->log + c->nlog, c->rops, found * sizeof(*c->rops));
	c->nlog += found;
	check_count_at(c, c->t);
	print_message("round %2d: %zu ops issued, %zu acknowledged, %zu "
	              "recovered, %zu events in all\n", round, c->nrops,
	              p_min, found, c->nlog);
	tally_closep(&c->t);
}

/* ------------------------------------------------------------------------
 * Parent: rounds
 * --------------------------------------------------------------------- */

static char self_exe[PATH_MAX];

static void run_round(struct crash *c, int round, int window, long clean_ops)
{
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	char fd_s[16], seed_s[32], op_s[32], win_s[16], clean_s[32], dur_s[8];
	snprintf(fd_s, sizeof(fd_s), "%d", fds[1]);
	snprintf(seed_s, sizeof(seed_s), "%" PRIu64, rng_next(&c->rng));
	snprintf(op_s, sizeof(op_s), "%" PRIu64, c->next_op);
	snprintf(win_s, sizeof(win_s), "%d", window);
	snprintf(clean_s, sizeof(clean_s), "%ld", clean_ops);
	snprintf(dur_s, sizeof(dur_s), "%d", c->durability);
	char *args[] = {self_exe, "--crash-child", c->db, fd_s, seed_s, op_s,
	                win_s, clean_s, dur_s, c->selftest, NULL};

	c->spec = c->committed;
	c->nrops = 0;
	c->acks = 0;
	c->round_first = c->next_op;
	c->err[0] = '\0';

	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		execv(self_exe, args);
		_exit(127);
	}
	c->pid = pid;
	close(fds[1]);

	struct reader *rd = calloc(1, sizeof(*rd));
	assert_non_null(rd);
	rd->fd = fds[0];
	int64_t start = mono_ms();
	/* Until a few ops are acknowledged (or the child stops). */
	while (!rd->eof && c->err[0] == '\0' && c->acks < MIN_ACKS &&
	       mono_ms() - start < 120000)
		reader_step(c, rd, 100);
	int early = rd->eof;
	int killed = 0;
	if (clean_ops == 0 && !rd->eof && c->err[0] == '\0' &&
	    c->acks >= MIN_ACKS) {
		int64_t until = mono_ms() + 5 + (int64_t)rng_below(&c->rng, 296);
		while (!rd->eof && c->err[0] == '\0' && mono_ms() < until)
			reader_step(c, rd, (int)(until - mono_ms()));
		early = rd->eof;
		kill(pid, SIGKILL);
		killed = 1;
	}
	if (clean_ops == 0 && !killed) {
		/* Something is wrong (error, early exit, no acks): stop it. */
		kill(pid, SIGKILL);
	}
	/* Everything the child wrote before it died is in the pipe. */
	int64_t drain_start = mono_ms();
	while (!rd->eof && mono_ms() - drain_start < 120000)
		reader_step(c, rd, 1000);
	if (!rd->eof)
		kill(pid, SIGKILL); /* a clean run that hangs */
	int status = 0;
	waitpid(pid, &status, 0);
	c->pid = 0;
	close(fds[0]);
	size_t leftover = rd->have;
	free(rd);

	if (c->err[0] != '\0')
		fail_msg("round %d: %s", round, c->err);
	if (leftover != 0)
		fail_msg("round %d: %zu bytes of a torn record", round,
		         leftover);
	if (clean_ops == 0) {
		if (early || !killed)
			fail_msg("round %d: the child stopped before the kill "
			         "(status %d, %ld acks)", round, status,
			         c->acks);
		if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
			fail_msg("round %d: child status %d", round, status);
	} else {
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			fail_msg("round %d (clean): child status %d", round,
			         status);
		if ((long)c->acks != clean_ops)
			fail_msg("round %d (clean): %ld of %ld ops "
			         "acknowledged", round, c->acks, clean_ops);
	}
	if (c->nrops > 0)
		c->next_op = c->rops[c->nrops - 1].no + 1;
	verify(c, round);
	if (clean_ops != 0 && c->nlog == 0)
		fail_msg("clean round recovered nothing");
}

static int rm_entry(const char *path, const struct stat *sb, int flag,
                    struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path) == 0 ? 0 : -1;
}

static int crash_setup(void **state)
{
	struct crash *c = calloc(1, sizeof(*c));
	if (c == NULL)
		return -1;
	c->obs = calloc(1, sizeof(*c->obs));
	if (c->obs == NULL) {
		free(c);
		return -1;
	}
	snprintf(c->dir, sizeof(c->dir), "/tmp/tally-crash-XXXXXX");
	if (mkdtemp(c->dir) == NULL) {
		free(c->obs);
		free(c);
		return -1;
	}
	snprintf(c->db, sizeof(c->db), "%s/db", c->dir);
	const char *seed = getenv("TALLY_CRASH_SEED");
	c->seed = seed != NULL ? strtoull(seed, NULL, 10)
	                       : (uint64_t)time(NULL) ^
	                             ((uint64_t)getpid() << 32);
	c->rng = c->seed;
	c->next_op = 1;
	const char *selftest = getenv("TALLY_CRASH_SELFTEST");
	snprintf(c->selftest, sizeof(c->selftest), "%s",
	         selftest != NULL && selftest[0] != '\0' ? selftest : "none");
	*state = c;
	return 0;
}

static int crash_teardown(void **state)
{
	struct crash *c = *state;
	if (c == NULL)
		return 0;
	if (c->pid > 0) {
		kill(c->pid, SIGKILL);
		waitpid(c->pid, NULL, 0);
	}
	tally_closep(&c->t);
	(void)nftw(c->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free_obs(c->obs);
	free(c->obs);
	free(c->log);
	free(c->rops);
	free(c);
	return 0;
}

static int crash_rounds(void)
{
	const char *env = getenv("TALLY_CRASH_ROUNDS");
	int rounds = env != NULL ? atoi(env) : 20;
	return rounds < 1 ? 1 : rounds;
}

static void run_rounds(struct crash *c, int rounds)
{
	print_message("crash test: %d rounds, durability %s, "
	              "TALLY_CRASH_SEED=%" PRIu64 "%s%s\n", rounds,
	              c->durability == TALLY_DURABILITY_SYNC ? "sync" : "async",
	              c->seed, strcmp(c->selftest, "none") == 0 ? "" :
	              ", self-test ", strcmp(c->selftest, "none") == 0 ? "" :
	              c->selftest);
	for (int round = 0; round < rounds; round++) {
		/* Even rounds: blocking calls, one op at a time. Odd rounds:
		 * pipelined async writes, so batches hold many ops. */
		int window = round % 2 == 0
		                 ? 0
		                 : 1 + (int)rng_below(&c->rng, WINDOW_MAX);
		run_round(c, round, window, 0);
	}
	/* Last, a child that closes cleanly: then every op is there. */
	run_round(c, rounds, 8, 500);
}

/* Sync durability: acknowledged means fsynced. */
static void test_kill9_under_load_keeps_every_acknowledged_write(
    void **state)
{
	struct crash *c = *state;
	c->durability = TALLY_DURABILITY_SYNC;
	run_rounds(c, crash_rounds());
}

/* Async durability may lose the last interval on a crash of the machine,
 * but tally.h promises nothing is lost when only the process dies. */
static void test_kill9_async_durability_keeps_acknowledged_writes(
    void **state)
{
	struct crash *c = *state;
	c->durability = TALLY_DURABILITY_ASYNC;
	run_rounds(c, (crash_rounds() + 1) / 2);
}

static int tc_scan(void *arg, const tally_event_rec *ev)
{
	uint64_t *seen = arg;

	/* Oldest first: each event once, in order. */
	if (ev->content != TC_CONTENT || ev->member != seen[0] + 1)
		return 1;
	seen[0]++;
	return 0;
}

/* The replay's first checkpoint writes the events again with the ones
 * logged after them: each must land on its earlier entry, so that every
 * event is listed once, before and after that checkpoint. */
static void check_table_child_events(struct crash *c)
{
	tally_entry e[TC_FIRST + TC_MORE + 1];
	uint64_t seen[1] = { 0 };
	size_t n = 0;

	/* c->t: a failed assert leaves it to the teardown to close. */
	assert_int_equal(tally_open(c->db, NULL, &c->t), TALLY_OK);
	assert_int_equal(tally_recent(c->t, "article", "like", TC_CONTENT,
	                              TC_FIRST + TC_MORE + 1, 0, e, &n),
	                 TALLY_OK);
	assert_int_equal(n, TC_FIRST + TC_MORE);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(e[i].member, TC_FIRST + TC_MORE - i);
		assert_int_equal(e[i].at_ms,
		                 TC_AT0 + (int64_t)(TC_FIRST + TC_MORE - i));
	}
	assert_int_equal(tally_events_scan(c->t, tc_scan, seen), 0);
	assert_int_equal(seen[0], TC_FIRST + TC_MORE);
	tally_closep(&c->t);
}

/* Run this program as a child in MODE on the test's folder, to its end;
 * its exit status. */
static int run_child(struct crash *c, const char *mode)
{
	char *args[] = { self_exe, (char *)mode, c->db, NULL };
	int64_t until = mono_ms() + 120000;
	int status = 0;
	pid_t w;

	fflush(NULL);
	c->pid = fork();
	assert_true(c->pid >= 0);
	if (c->pid == 0) {
		execv(self_exe, args);
		_exit(127);
	}
	/* Bounded: a child that hangs is the teardown's to kill. */
	while ((w = waitpid(c->pid, &status, WNOHANG)) == 0 &&
	       mono_ms() < until)
		usleep(10000);
	assert_int_equal(w, c->pid);
	c->pid = 0;
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static void test_kill_after_tables_written_ahead_lists_events_once(
    void **state)
{
	struct crash *c = *state;

	assert_int_equal(run_child(c, "--table-child"), 0);
	/* The first open replays the journal: RECENT reads memory, the scan
	 * the tables the compaction wrote. Its close checkpoints; the second
	 * open reads the tables alone. */
	check_table_child_events(c);
	check_table_child_events(c);
}

static int sc_scan(void *arg, const tally_event_rec *ev)
{
	uint64_t *seen = arg;

	if (ev->content != SC_CONTENT)
		return 0;
	if (ev->member != seen[0] + 1)
		return 1;
	seen[0]++;
	return 0;
}

/* Every like once, newest first in RECENT, oldest first in the scan. */
static void check_spill_child_events(struct crash *c)
{
	enum { CAP = TALLY_PAGE_MAX };
	static tally_entry e[CAP];
	uint64_t seen[1] = { 0 };
	int64_t count = 0;
	size_t n = 0;

	assert_int_equal(tally_open(c->db, NULL, &c->t), TALLY_OK);
	assert_int_equal(tally_count(c->t, "article", "like", SC_CONTENT,
	                             &count), TALLY_OK);
	assert_true(count > SC_MORE && count < CAP);
	assert_int_equal(tally_recent(c->t, "article", "like", SC_CONTENT,
	                              CAP, 0, e, &n), TALLY_OK);
	assert_int_equal(n, (size_t)count);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(e[i].member, (uint64_t)count - i);
	assert_int_equal(tally_events_scan(c->t, sc_scan, seen), 0);
	assert_int_equal(seen[0], (uint64_t)count);
	tally_closep(&c->t);
}

/* tally_compact() while a checkpoint runs waits for it: spilled apart,
 * the newer generation's chunks would start from its own first event,
 * and the replay after a crash (the checkpoint never landed) chunks both
 * generations from the older one's, leaving the newer chunks beside its
 * own: RECENT listed their events twice, out of order. */
static void test_kill_during_checkpoint_after_compact_lists_events_once(
    void **state)
{
	struct crash *c = *state;
	int status = run_child(c, "--spill-child");

	check_spill_child_events(c);
	check_spill_child_events(c);
	/* 10: the compaction did not wait for the running checkpoint. */
	assert_int_equal(status, 0);
}

/* A token's window counts the time an idle handle was open before a
 * crash: 2 s after the reopen it has passed (by 0.5 s or more), and the
 * retry applies anew. Resumed where the token began (an idle committer
 * that never woke to store the clock), 1 s of the window would be left
 * and the retry answered. */
static void test_kill_of_idle_handle_keeps_token_clock(void **state)
{
	struct crash *c = *state;
	tally_options o = { .token_retention_ms = TK_RETENTION_MS };
	tally_write w = { .kind = TALLY_W_INCRBY, .key = "k", .key_len = 1,
	                  .value = 1, .id = TK_ID, .id_len = strlen(TK_ID) };
	int64_t r = 0;

	assert_int_equal(run_child(c, "--token-child"), 0);
	assert_int_equal(tally_open(c->db, &o, &c->t), TALLY_OK);
	usleep(2000 * 1000);
	assert_int_equal(tally_write_sync(c->t, &w, &r), TALLY_OK);
	assert_int_equal(r, 2);
	tally_closep(&c->t);
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--table-child") == 0)
		return table_child_main(argv);
	if (argc == 3 && strcmp(argv[1], "--spill-child") == 0)
		return spill_child_main(argv);
	if (argc == 3 && strcmp(argv[1], "--token-child") == 0)
		return token_child_main(argv);
	if (argc == 10 && strcmp(argv[1], "--crash-child") == 0)
		return child_main(argv);
	ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
	if (n <= 0) {
		snprintf(self_exe, sizeof(self_exe), "%s", argv[0]);
	} else {
		self_exe[n] = '\0';
	}
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(
	        test_kill9_under_load_keeps_every_acknowledged_write,
	        crash_setup, crash_teardown),
	    cmocka_unit_test_setup_teardown(
	        test_kill9_async_durability_keeps_acknowledged_writes,
	        crash_setup, crash_teardown),
	    cmocka_unit_test_setup_teardown(
	        test_kill_after_tables_written_ahead_lists_events_once,
	        crash_setup, crash_teardown),
	    cmocka_unit_test_setup_teardown(
	        test_kill_during_checkpoint_after_compact_lists_events_once,
	        crash_setup, crash_teardown),
	    cmocka_unit_test_setup_teardown(
	        test_kill_of_idle_handle_keeps_token_clock,
	        crash_setup, crash_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
