/* engine.h: the engine's private state, shared by its files: engine.c (queue
 * and committer), schema.c (counting and content types), tokens.c
 * (idempotency), stripes.c (striped cells) and query.c (reads). */
#ifndef TALLY_ENGINE_H
#define TALLY_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/hmap.h"
#include "store/store.h"
#include "tally.h"

/* Bytes of key and token kept inside a queued write; longer ones are
 * allocated. Most keys and tokens fit. */
#define ENG_INLINE_MAX 64
/* Striped cells: stripes, cells per stripe, counters of queued writes
 * per stripe (by key hash), the most one cell may hold. */
#define STRIPES 16
#define STRIPE_CELLS_MAX 256
#define STRIPE_HOLD_SLOTS 4096
#define STRIPE_CELL_ABS_MAX (INT64_C(1) << 48)
/* A counter takes striped adds only while |value| <= this, so that
 * STRIPES full cells cannot carry it past the int64 limits. */
#define STRIPE_VALUE_ABS_MAX (INT64_C(1) << 62)
/* The fold's token (tally.fold_tok): "\0fold", 3 zero bytes, 8 random
 * bytes of this handle. */
#define FOLD_TOK_LEN 16
/* Most tokens kept in memory (tally_options.tokens_max): past it the
 * oldest leave memory early, and the store answers for them. */
#define TOKENS_MAX (16u << 20)
/* Most stored tokens the sweep looks at per second (tokens_purge()). */
#define TOKENS_SWEEP_MAX 65536u
/* Most expired tokens forgotten per batch, to bound a batch's extra work,
 * and most such batches a second (tokens_purge()). */
#define TOKENS_PURGE_MAX 1024u
#define TOKENS_PURGE_ROUNDS 64
/* After a store failure, how often the committer tries to reopen it. */
#define ENG_RECOVER_INTERVAL_NS 1000000000u

/* Caller commits: how often the committer thread looks for writes left
 * queued (a caller that never commits) and for tokens to purge. */
#define ENG_POLL_NS 100000000u

/* Caller commits: batches one tally_commit() applies before it hands
 * what is still queued to the committer thread. */
#define ENG_COMMIT_ROUNDS 4

/* A queued write: the store op plus what the engine needs to finish it. */
typedef struct eng_op {
	store_op op;
	tally_write_cb cb;
	void *arg;
	uint32_t group_pos;          /* index in its atomic group (0 alone) */
	uint32_t group_left;         /* ops of its group from it on (1 alone) */
	int32_t hold;                /* stripes_hold() answer, or -1 */
	uint8_t *heap;               /* key + token when they do not fit */
	uint8_t buf[ENG_INLINE_MAX]; /* key, then token */
} eng_op;

/* A counting type known to the engine. */
typedef struct eng_type {
	char name[TALLY_NAME_MAX + 1];
	uint16_t id;
	uint8_t mode;
} eng_type;

typedef struct schema {
	pthread_rwlock_t lock;       /* guards the tables below */
	pthread_mutex_t reg;         /* one registration at a time */
	/* Last read of a shared store's schema for an unknown content type
	 * (schema_ctype_read()), to space them out. Before types: not
	 * swapped by schema_replace(). */
	_Atomic uint64_t refreshed_ns;
	hmap *types;                 /* name -> uint16 index into type_list */
	eng_type type_list[TALLY_TYPES_MAX];
	size_t type_count;
	uint16_t type_next_id;
	hmap *ctypes;                /* name -> uint16 id */
	char (*ctype_names)[TALLY_NAME_MAX + 1]; /* id -> name */
	uint32_t ctype_next_id;
	uint32_t ctype_cap;          /* ids ctype_names has room for */
} schema;

/* Remembered idempotency tokens (committer-only after open). */
typedef struct tokens {
	hmap *map;                   /* token -> tok_val */
	uint8_t **fifo;              /* oldest first: len byte, expiry
	                                queued with, token (tokens.c) */
	size_t fifo_head, fifo_len, fifo_cap;
	uint32_t retention_ms;
	uint32_t max;                /* most kept (tally_options.tokens_max) */
	/* The latest expiry of a token let go before it (memory bound, or
	 * out of memory): until then, one not found here may be stored. */
	int64_t forgot_until_ms;
	/* Tokens on disk that memory does not hold (let go early, or
	 * loaded expired) are deleted by the store's sweep until a whole
	 * pass over the stored tokens has started after this time; 0: no
	 * sweep needed. */
	int64_t sweep_until_ms;
	int64_t sweep_pass_ms;       /* when the current pass started */
	/* The windows' clock (tokens_now()): clock_ms at the monotonic
	 * clock's clock_ns, running with the monotonic clock since. Where
	 * it is goes to the store with every token, and once a second while
	 * tokens are stored; an open resumes it there, so neither a step of
	 * the system clock nor the time the folder was closed ends a window
	 * early. Every expiry above is on it. */
	int64_t clock_ms;
	uint64_t clock_ns;
	int64_t loaded_max_ms;       /* latest expiry loaded; INT64_MIN: none */
	int64_t loaded_clock_ms;     /* the clock stored; INT64_MIN: none */
} tokens;

typedef struct tok_val {
	int64_t result;
	int64_t expiry_ms;
} tok_val;

typedef struct stripe {
	pthread_mutex_t lock;
	hmap *cells;                 /* key -> stripe_cell */
	uint64_t adds;               /* adds landed here (a shared counter
	                                would undo the striping) */
	/* Counter writes queued by this stripe's threads and not applied
	 * yet, counted by key hash: a cell whose slot is not 0 takes no
	 * adds, which wait in the queue behind them (per-thread order).
	 * Keys that share a slot only hold each other back a little. */
	uint32_t holds[STRIPE_HOLD_SLOTS];
} stripe;

/* stripes_settle()'s copy of one stripe's keys, to read their values in
 * one mget without the stripe's lock. */
typedef struct stripe_settle {
	uint8_t keys[STRIPE_CELLS_MAX][TALLY_KEY_MAX];
	const uint8_t *key_at[STRIPE_CELLS_MAX]; /* keys[i], for mget */
	size_t lens[STRIPE_CELLS_MAX];
	int64_t values[STRIPE_CELLS_MAX];
	uint8_t ok[STRIPE_CELLS_MAX];
} stripe_settle;

/* A write of a named counter's value: what a striped cell must not be
 * folded across. */
static inline int op_writes_counter(const store_op *op)
{
	return op->kind == STORE_OP_INCRBY || op->kind == STORE_OP_SET ||
	       op->kind == STORE_OP_DEL;
}

typedef struct stripe_cell {
	int64_t delta;
	uint8_t safe;                /* committer says fast adds may land */
	uint8_t idle;                /* folds without an add */
} stripe_cell;

/* Where the store's load hands schema entries and tokens: the live ones at
 * open, fresh ones when the store is reopened after a failure. */
typedef struct eng_loaded {
	schema *sch;
	tokens *tok;
} eng_loaded;

struct tally {
	/* The store. The committer replaces it when it recovers from a
	 * failure; any other thread uses it under st_lock (read), through
	 * eng_store_hold(). NULL while a reopen failed. */
	store *st;
	pthread_rwlock_t st_lock;
	char *path;                  /* the data folder, to reopen it */
	tally_options opt;           /* with defaults applied */
	int opt_owned;               /* opt's strings are copies to free */
	schema sch;
	tokens tok;

	/* The queue: a ring of queue_ops_max slots. [head, head + busy) are
	 * being committed, [head + busy, head + count) wait. */
	pthread_mutex_t qlock;
	pthread_cond_t not_full;
	pthread_cond_t not_empty;
	pthread_cond_t synced;
	eng_op *ring;
	size_t head, count, busy;
	/* Written under qlock (failed: and commit_lock, by the committer);
	 * atomic because tally_counter_add() reads both with no lock. */
	atomic_int closing;
	atomic_int failed;           /* store failed: refuse writes */
	int fail_err;                /* ... with this TALLY_EIO/ENOSPC */
	uint64_t sync_req, sync_done;
	int sync_err;
	int64_t last_at_ms;          /* the last default event time given
	                                (under qlock) */

	/* Caller commits (TALLY_OPEN_CALLER_COMMITS): a write queued with
	 * tally_write_async() does not wake the committer thread; its caller
	 * commits it in tally_commit(). kick (under qlock) hands what waits
	 * to the committer thread: a blocking write, a full ring, a caller
	 * that committed ENG_COMMIT_ROUNDS batches and left the rest. */
	int caller_commits;
	int read_only;     /* TALLY_OPEN_READ_ONLY: every write refused */
	int kick;
	uint64_t queued_total, taken_total; /* writes ever queued, taken */
	/* Counter writes hold cells back (stripes_hold()) from the first
	 * tally_counter_add() on: set, with holds_from = queued_total, under
	 * qlock (read without it by tally_counter_add()). Writes queued
	 * before it hold nothing, so no cell is made safe until every one
	 * of them is applied. */
	_Atomic int holds_on;
	uint64_t holds_from;
	stripe_settle *settle;       /* committer only */
	/* Held by whoever commits a batch: the committer thread or a caller
	 * in tally_commit(). Everything marked "committer" below belongs to
	 * the holder. Taken before qlock. */
	pthread_mutex_t commit_lock;

	pthread_t committer;
	int committer_started;
	store_op *batch;             /* committer: ops of the batch */
	eng_op **batch_src;          /* committer: their queue slots */
	hmap *batch_tokens;          /* committer: token -> index in batch */
	uint64_t last_flush_ns;
	uint64_t last_purge_ns;
	/* Tokens may be stored (tokens_stored()): the committer then wakes
	 * once a second to purge them and store the clock. */
	atomic_int tokens_held;
	uint64_t recover_at_ns;      /* committer: next reopen attempt (read
	                                by the committer thread alone) */

	/* Striped cells (async durability). */
	stripe stripes[STRIPES];
	pthread_rwlock_t fold_lock;  /* readers of cells vs. the fold */
	hmap *striped;               /* committer: keys with safe cells */
	store_op *fold_ops;
	uint8_t *fold_src;           /* the stripe of each fold op */
	size_t fold_cap;
	/* A fold whose outcome a store failure left unknown (stores with
	 * token_get): its ops (keys owned) and stripes, swapped out of
	 * fold_ops and fold_src, until the recovery tells whether it
	 * landed (limbo_resolve()). Committer only. */
	store_op *limbo_ops;
	uint8_t *limbo_src;
	size_t limbo_n;
	/* The token every fold writes, its result the fold's number (no
	 * fold runs while one is in limbo: the last is the limbo's). */
	uint8_t fold_tok[FOLD_TOK_LEN];
	uint64_t fold_seq;

	_Atomic uint64_t st_writes, st_write_errors, st_token_hits;
	_Atomic uint64_t st_tokens_swept;
	_Atomic uint64_t st_batches, st_batch_max;
	_Atomic uint64_t st_fold_overflow;
	_Atomic uint64_t st_batch_hist[TALLY_HIST_BUCKETS];
	_Atomic uint64_t st_store_failures, st_store_recoveries;
	/* Journal records the stores closed by recoveries dropped at their
	 * open (the open store's own count is added when read). */
	_Atomic uint64_t st_journal_dropped;
	/* The same for their retries of checkpoints short of memory. */
	_Atomic uint64_t st_ck_retries;
	/* A registration whose record was queued could not enter the schema
	 * in memory (out of memory), so its id would be given again: the
	 * next batch fails the store, whose recovery reloads the schema. */
	atomic_int schema_lost;
};

/* Take the store for reading on any thread but the committer: TALLY_OK
 * and the store held (release with eng_store_release()), or TALLY_EIO,
 * nothing held, while a reopen after a failure has not succeeded. */
static inline int eng_store_hold(tally *t)
{
	pthread_rwlock_rdlock(&t->st_lock);
	if (t->st != NULL)
		return TALLY_OK;
	pthread_rwlock_unlock(&t->st_lock);
	return TALLY_EIO;
}

static inline void eng_store_release(tally *t)
{
	pthread_rwlock_unlock(&t->st_lock);
}

/* engine.c */
int64_t eng_now_ms(void);
uint64_t eng_now_ns(void);
/* Queue one prepared store op (copied, key and token included). */
int eng_enqueue(tally *t, const store_op *op, tally_write_cb cb, void *arg);
/* Queue and wait. */
int eng_submit_wait(tally *t, const store_op *op, int64_t *result);

/* schema.c */
int schema_init(schema *s);
void schema_free(schema *s);
extern const store_loader schema_loader_proto;
int schema_load_type(void *arg, const char *name, size_t len, uint16_t id,
                     int mode);
int schema_load_ctype(void *arg, const char *name, size_t len, uint16_t id);
/* After loading: order the types by id. */
void schema_loaded(schema *s);
/* Publish fresh's tables in live (under live's locks) and give fresh the
 * old ones to free: the schema as reloaded from a reopened store. Clears
 * *lost (schema_lost) under the same locks. */
void schema_replace(schema *live, schema *fresh, atomic_int *lost);
/* Look a counting type up; TALLY_ENOTYPE if unknown. */
int schema_type(tally *t, const char *name, uint16_t *id, int *mode);
/* Look a content type up: TALLY_ENOTFOUND if it was never written. */
int schema_ctype(tally *t, const char *name, uint16_t *id);
/* Look up or register (queueing its persistence first). */
int schema_ctype_ensure(tally *t, const char *name, uint16_t *id);
/* schema_ctype() for a read: with a store shared by several instances,
 * a name not known here is looked for in the store's schema first (at
 * most every SCHEMA_REFRESH_MS), where another instance may have put it. */
#define SCHEMA_REFRESH_MS 100
int schema_ctype_read(tally *t, const char *name, uint16_t *id);
/* Name of a content type id, copied into out (TALLY_NAME_MAX + 1):
 * TALLY_OK, or TALLY_ECORRUPT for an id the schema never named (out
 * empty): stored data naming it is damaged. */
int schema_ctype_name(tally *t, uint16_t id, char *out);
int schema_type_add(tally *t, const char *name, int mode);
int schema_types(tally *t, tally_type_info *out, size_t cap, size_t *n);
/* Validate a name's length and characters. */
int schema_name_check(const char *name);

/* tokens.c */
int tokens_init(tokens *k, uint32_t retention_ms, uint32_t max);
void tokens_free(tokens *k);
int tokens_load(void *arg, const uint8_t *tok, size_t len, int64_t result,
                int64_t expiry_ms);
/* The loader's token_clock: where the clock was last stored. */
int tokens_load_clock(void *arg, int64_t ms);
/* After a load: with resume, the clock starts where it was stored (in a
 * folder whose tokens predate that, where the newest token loaded began
 * its window, and no later than the system clock); then the tokens are
 * ordered by expiry and those expired on the clock let go (the store's
 * sweep deletes them). */
void tokens_loaded(tokens *k, int resume);
/* Now on the windows' clock, in ms. */
int64_t tokens_now(const tokens *k);
/* Whether tokens may be stored: the clock's place is then worth
 * storing. */
int tokens_stored(const tokens *k, int64_t now_ms);
const tok_val *tokens_find(tokens *k, const uint8_t *tok, size_t len,
                           int64_t now_ms);
void tokens_remember(tokens *k, const uint8_t *tok, size_t len,
                     int64_t result, int64_t expiry_ms);
/* 1 while a token let go of memory within its window may be retried: a
 * token tokens_find() misses must then be looked for in the store. */
int tokens_forgotten(const tokens *k, int64_t now_ms);
/* Pop up to max expired tokens; each is handed to fn (which must copy it)
 * before it is freed. */
size_t tokens_expire(tokens *k, int64_t now_ms, size_t max,
                     void (*fn)(void *arg, const uint8_t *tok, size_t len),
                     void *arg);

/* stripes.c */
int stripes_init(tally *t);
void stripes_free(tally *t);
/* Fast path: 1 if the add landed in a cell, 0 if it must take the queue. */
int stripes_add(tally *t, const void *key, size_t len, int64_t delta);
/* Sum of the cells of key (caller holds fold_lock for reading). */
int64_t stripes_sum(tally *t, const void *key, size_t len);
/* Adds landed in cells so far. */
uint64_t stripes_adds(tally *t);
/* A counter write (SET, DEL, INCRBY) queued by the calling thread and not
 * waited for: later adds of its thread must not land in a cell before it
 * is applied. Returns what stripes_release() takes once it is. */
int32_t stripes_hold(tally *t, const void *key, size_t len);
void stripes_release(tally *t, int32_t hold);
/* Committer: whether any counter op of the batch touches a striped key. */
int stripes_touched(tally *t, const store_op *ops, size_t n);
/* Committer: every cell's adds as INCRBY ops (fold_ops, *n of them; on
 * error those made so far). The cells keep them until stripes_folded(). */
int stripes_drain(tally *t, size_t *n);
/* Committer: the n ops of stripes_drain() are in the store; take them out
 * of their cells (adds that landed since stay). */
void stripes_folded(tally *t, size_t n);
/* Committer, after the batch: recompute which cells are safe. */
void stripes_settle(tally *t);
/* Committer, fold_lock held for writing: a fold that did not land goes
 * back into its cells (ops and stripes as fold_ops and fold_src), and its
 * keys count as striped, so that queued writes of them fold it first.
 * *done: how many of the ops are back. TALLY_OK, or TALLY_ENOMEM (no
 * cell had room, or out of memory) with the rest not put back. */
int stripes_put_back(tally *t, const store_op *ops, const uint8_t *src,
                     size_t n, size_t *done);

#endif
