/* engine.c: the write path of libtally: a bounded queue, group commit into
 * the store by one committer at a time, and the open/close lifecycle.
 *
 * Design note: invariants of the commit path
 *  1. Every write goes through one FIFO queue; the committer takes up to
 *     batch_ops_max of them at a time and hands them to the store as one
 *     logical batch, in queue order. Writes queued by one thread are
 *     therefore applied in that thread's order, and a unique check sees
 *     every earlier write, in the same batch or not. The committer is
 *     whoever holds commit_lock: the committer thread, or (caller commits)
 *     a thread in tally_commit(), which commits what it queued itself so
 *     that a server's batch costs no thread hand-off.
 *  2. A write's callback runs exactly once, after the store applied its
 *     batch atomically and, in sync mode, fsynced it; or with the batch's
 *     error, in which case none of the batch was acknowledged (but for the
 *     content types of a batch out of memory, written alone: see
 *     ctypes_alone()). A store failure (write or fsync) stops all writes:
 *     what reached the disk is unknown, and nothing may be written on top
 *     of it. The failed batch
 *     is never retried (a failed fsync cannot be redone: the kernel may
 *     have dropped the pages). Reads go on against the store as it is.
 *  3. A queue slot is reused only after its write completed: [head, head +
 *     busy) belong to the committer, producers append after them and block
 *     while the ring is full (backpressure, bounded memory).
 *  4. Idempotency tokens are resolved on the committer before the store
 *     sees the batch: a token remembered (or earlier in the same batch)
 *     answers with the first result and is not applied again; a new token
 *     is persisted by the store in the same atomic batch as its write.
 *  5. Content types are registered by queueing their persistence ahead of
 *     the first write that names them, so an event never reaches the disk
 *     before its content type.
 *  6. Async mode: callbacks run after the apply; the committer fsyncs at
 *     least every flush_interval_ms while there are unsynced writes, folds
 *     striped cells into the store at the same time, and folds them first
 *     whenever a batch touches a striped counter (so SET and INCRBY see
 *     every acknowledged add).
 *  7. Recovery (recover()): while failed, once the queue is empty, the
 *     committer checks every ENG_RECOVER_INTERVAL_NS that the disk takes
 *     a write and an fsync again, then closes the store and opens it anew,
 *     reloading the schema and tokens from it, exactly as tally_open does.
 *     What reached the disk is from then on the truth: a write answered
 *     with the error may be there or not, and its id, if stored, answers
 *     its retry. Readers hold st_lock, so the swap waits for them. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "core/keys.h"
#include "engine/engine.h"

#define DEF(v, d) ((v) ? (v) : (d))

int64_t eng_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t eng_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- the queue ------------------------------------------------------------ */

static int op_copy_bytes(eng_op *e, const store_op *op)
{
	size_t need = (size_t)op->key_len + op->token_len;
	uint8_t *p = e->buf;

	e->heap = NULL;
	if (need > sizeof e->buf) {
		e->heap = malloc(need);
		if (e->heap == NULL)
			return TALLY_ENOMEM;
		p = e->heap;
	}
	if (op->key_len)
		memcpy(p, op->key, op->key_len);
	if (op->token_len)
		memcpy(p + op->key_len, op->token, op->token_len);
	return TALLY_OK;
}

/* Point the op's key and token at the slot's own copy. */
static void op_bind(eng_op *e)
{
	uint8_t *p = e->heap ? e->heap : e->buf;

	e->op.key = e->op.key_len ? p : NULL;
	e->op.token = e->op.token_len ? p + e->op.key_len : NULL;
}

/* Caller commits: hand what waits to the committer thread (qlock held). */
static void kick_locked(tally *t)
{
	t->kick = 1;
	pthread_cond_signal(&t->not_empty);
}

/* Queue n ops as one group: contiguous in the ring, so no other write
 * falls between them, and never split across batches (batch_take), so the
 * store applies them in one atomic batch. wait: the caller will wait for
 * them without committing, so the committer thread must take them even
 * when callers commit. */
static int enqueue_group(tally *t, const store_op *ops, size_t n,
                         tally_write_cb cb, void *arg, int wait)
{
	size_t cap = t->opt.queue_ops_max;
	size_t i;
	int rc = TALLY_OK;
	int64_t stamp = 0;

	assert(cb != NULL);
	assert(n >= 1 && n <= t->opt.batch_ops_max && n <= cap);
	if (t->read_only)
		return TALLY_EREADONLY;
	/* The clock is read outside the lock, and only for events that take
	 * the default time; the floor below, under it, keeps their order. */
	for (i = 0; i < n; i++)
		if (ops[i].kind == STORE_OP_EVENT && ops[i].at_ms == 0) {
			stamp = eng_now_ms();
			break;
		}
	pthread_mutex_lock(&t->qlock);
	while (cap - t->count < n && !t->closing && !t->failed) {
		/* Nobody may be committing: the holder of the ring's writes
		 * could be this very thread, between two tally_commit(). */
		if (t->caller_commits)
			kick_locked(t);
		pthread_cond_wait(&t->not_full, &t->qlock);
	}
	if (t->closing || t->failed) {
		rc = t->closing ? TALLY_ECLOSED : t->fail_err;
		pthread_mutex_unlock(&t->qlock);
		return rc;
	}
	for (i = 0; i < n && rc == TALLY_OK; i++) {
		eng_op *e = &t->ring[(t->head + t->count + i) % cap];

		assert(ops[i].key_len <= TALLY_KEY_MAX &&
		       ops[i].token_len <= TALLY_ID_MAX);
		e->op = ops[i];
		/* An event's default time is never below the one before it
		 * in the queue, which is commit order: writers that waited
		 * for room wake in any order, and a clock can step back.
		 * count-at-time is exact for them. */
		if (e->op.kind == STORE_OP_EVENT && e->op.at_ms == 0) {
			if (stamp < t->last_at_ms)
				stamp = t->last_at_ms;
			e->op.at_ms = t->last_at_ms = stamp;
		}
		e->cb = cb;
		e->arg = arg;
		e->group_pos = (uint32_t)i;
		e->group_left = (uint32_t)(n - i);
		e->hold = -1;
		rc = op_copy_bytes(e, &ops[i]);
		if (rc == TALLY_OK)
			op_bind(e);
	}
	if (rc != TALLY_OK) {
		/* All or nothing: free what the group copied so far. */
		for (size_t j = 0; j + 1 < i; j++) {
			eng_op *e = &t->ring[(t->head + t->count + j) % cap];

			free(e->heap);
			e->heap = NULL;
		}
	} else {
		int was_idle = t->count == t->busy;

		/* A write waited for is applied before its thread adds
		 * again; one not waited for holds its counter's cell. */
		for (i = 0; i < n && !wait && atomic_load(&t->holds_on); i++) {
			eng_op *e = &t->ring[(t->head + t->count + i) % cap];

			if (op_writes_counter(&ops[i]))
				e->hold = stripes_hold(t, e->op.key,
				                       e->op.key_len);
		}
		t->count += n;
		t->queued_total += n;
		if (t->caller_commits) {
			if (wait)
				kick_locked(t);
		} else if (was_idle) {
			pthread_cond_signal(&t->not_empty);
		}
	}
	pthread_mutex_unlock(&t->qlock);
	return rc;
}

int eng_enqueue(tally *t, const store_op *op, tally_write_cb cb, void *arg)
{
	return enqueue_group(t, op, 1, cb, arg, 0);
}

/* A blocking caller's wait for its own write. */
typedef struct waiter {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done, err;
	int64_t result;
} waiter;

static void waiter_done(void *arg, int err, int64_t result)
{
	waiter *w = arg;

	pthread_mutex_lock(&w->lock);
	w->err = err;
	w->result = result;
	w->done = 1;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

int eng_submit_wait(tally *t, const store_op *op, int64_t *result)
{
	waiter w = { .done = 0 };
	int rc;

	pthread_mutex_init(&w.lock, NULL);
	pthread_cond_init(&w.cond, NULL);
	rc = enqueue_group(t, op, 1, waiter_done, &w, 1);
	if (rc == TALLY_OK) {
		pthread_mutex_lock(&w.lock);
		while (!w.done)
			pthread_cond_wait(&w.cond, &w.lock);
		pthread_mutex_unlock(&w.lock);
		rc = w.err;
		if (result != NULL)
			*result = w.result;
	}
	pthread_cond_destroy(&w.cond);
	pthread_mutex_destroy(&w.lock);
	return rc;
}

/* ---- the committer ------------------------------------------------------- */

static int store_failure(int rc)
{
	return rc == TALLY_EIO || rc == TALLY_ENOSPC;
}

/* The store failed a write or sync: refuse writes with its error from now
 * on, until recover() succeeds. Committer only, qlock held. */
static void fail_mark_locked(tally *t, int rc)
{
	assert(store_failure(rc));
	if (t->failed)
		return;
	t->failed = 1;
	t->fail_err = rc;
	t->recover_at_ns = eng_now_ns() + ENG_RECOVER_INTERVAL_NS;
	atomic_fetch_add(&t->st_store_failures, 1);
	/* producers waiting for room answer their error now */
	pthread_cond_broadcast(&t->not_full);
}

static void fail_mark(tally *t, int rc)
{
	pthread_mutex_lock(&t->qlock);
	fail_mark_locked(t, rc);
	pthread_mutex_unlock(&t->qlock);
}

/* Forgetting expired tokens: collected into TOKEN_DEL ops and applied by
 * the committer itself, never through the queue (it could be full). */
typedef struct purge {
	store_op ops[TOKENS_PURGE_MAX];
	size_t n;
} purge;

static void purge_one(void *arg, const uint8_t *tok, size_t len)
{
	purge *p = arg;
	uint8_t *copy = malloc(len);

	if (copy == NULL || p->n == TOKENS_PURGE_MAX) {
		free(copy); /* best effort: it is dropped at the next load */
		return;
	}
	memcpy(copy, tok, len);
	p->ops[p->n++] = (store_op){ .kind = STORE_OP_TOKEN_DEL,
	                             .token = copy,
	                             .token_len = (uint32_t)len };
}

/* Tokens stored but not held in memory (let go early, or loaded expired)
 * are deleted by the store's sweep, a slice a second, until a whole pass
 * has started after the last of them expired. */
static int tokens_sweep(tally *t)
{
	tokens *k = &t->tok;
	int64_t now_ms = tokens_now(k);
	size_t deleted = 0;
	int wrapped = 0, rc;

	if (k->sweep_until_ms == 0 || t->st->vt->tokens_sweep == NULL)
		return TALLY_OK;
	if (k->sweep_pass_ms == 0)
		k->sweep_pass_ms = now_ms;
	rc = t->st->vt->tokens_sweep(t->st, now_ms, TOKENS_SWEEP_MAX, &deleted,
	                             &wrapped);
	atomic_fetch_add(&t->st_tokens_swept, deleted);
	if (rc != TALLY_OK || !wrapped)
		return rc;
	if (k->sweep_pass_ms > k->sweep_until_ms)
		k->sweep_until_ms = 0; /* every token let go has been swept */
	k->sweep_pass_ms = 0;
	return TALLY_OK;
}

/* Whether the tokens' clock is worth storing: tokens may be stored, in a
 * store that loads them back (token_get). Kept in tokens_held, for the
 * committer's wait to wake it once a second while they are. */
static int tokens_held_set(tally *t, int64_t now_ms)
{
	int held = t->st->vt->token_get != NULL &&
	           tokens_stored(&t->tok, now_ms);

	atomic_store(&t->tokens_held, held);
	return held;
}

/* Where the tokens' clock is, stored once a second while tokens are (an
 * open resumes it there), and at the close: a batch of its own, synced
 * in sync durability (one fsync a second while tokens are stored), so
 * that a machine's crash loses at most that second of it. Stores that
 * load no tokens (no token_get) keep none. Commit lock held. */
static int tokens_clock_store(tally *t)
{
	int64_t now_ms = tokens_now(&t->tok);
	store_batch b = { .sync = t->opt.durability == TALLY_DURABILITY_SYNC,
	                  .token_clock = 1, .token_clock_ms = now_ms };

	return tokens_held_set(t, now_ms) ? t->st->vt->apply(t->st, &b)
	                                  : TALLY_OK;
}

/* Committer thread. Each round, and the sweep, holds the commit lock on
 * its own: callers committing wait for one of them at most. */
static void tokens_purge(tally *t)
{
	purge *p;
	store_batch b;
	int rc = TALLY_OK;

	/* Expired tokens stay on a read-only folder: it is not written. */
	if (t->read_only ||
	    eng_now_ns() < t->last_purge_ns + 1000000000u)
		return;
	t->last_purge_ns = eng_now_ns();
	p = malloc(sizeof *p);
	if (p == NULL)
		return;
	/* Batches of TOKENS_PURGE_MAX, as many a second as the tokens that
	 * expire need, up to TOKENS_PURGE_ROUNDS: behind that, expired ones
	 * would fill memory up to tokens_max. */
	for (int round = 0; round < TOKENS_PURGE_ROUNDS; round++) {
		pthread_mutex_lock(&t->commit_lock);
		if (t->failed) {
			pthread_mutex_unlock(&t->commit_lock);
			rc = t->fail_err; /* no sweep either */
			break;
		}
		p->n = 0;
		tokens_expire(&t->tok, tokens_now(&t->tok), TOKENS_PURGE_MAX,
		              purge_one, p);
		b = (store_batch){ .ops = p->ops, .n = p->n };
		if (p->n > 0)
			rc = t->st->vt->apply(t->st, &b);
		if (store_failure(rc))
			fail_mark(t, rc);
		pthread_mutex_unlock(&t->commit_lock);
		for (size_t i = 0; i < p->n; i++)
			free((void *)(uintptr_t)p->ops[i].token);
		if (rc != TALLY_OK || p->n < TOKENS_PURGE_MAX)
			break;
	}
	free(p);
	if (rc != TALLY_OK)
		return;
	pthread_mutex_lock(&t->commit_lock);
	if (!t->failed) {
		rc = tokens_clock_store(t);
		if (rc == TALLY_OK)
			rc = tokens_sweep(t);
		if (store_failure(rc))
			fail_mark(t, rc);
	}
	pthread_mutex_unlock(&t->commit_lock);
}

/* A token memory let go of within its window (past tokens_max, or out
 * of memory) is answered from the store's copy: 1 when op is answered so
 * (or failed by the read), 0 when the token is new. */
static int token_stored(tally *t, store_op *op, int64_t now_ms)
{
	int64_t result, expiry_ms;
	int rc;

	if (t->st->vt->token_get == NULL || !tokens_forgotten(&t->tok, now_ms))
		return 0;
	rc = t->st->vt->token_get(t->st, op->token, op->token_len, &result,
	                          &expiry_ms);
	if (rc == TALLY_ENOTFOUND || (rc == TALLY_OK && expiry_ms <= now_ms))
		return 0;
	op->skip = 1;
	op->err = rc;
	op->result = rc == TALLY_OK ? result : 0;
	if (rc == TALLY_OK)
		atomic_fetch_add(&t->st_token_hits, 1);
	return 1;
}

/* Answer tokens that were seen before; mark new ones for persistence.
 * How many are to be stored. */
static size_t tokens_resolve(tally *t, size_t n, int64_t now_ms)
{
	size_t fresh = 0;

	hmap_clear(t->batch_tokens);
	for (size_t i = 0; i < n; i++) {
		store_op *op = &t->batch[i];
		const tok_val *tv;
		size_t *first;
		int inserted;

		if (op->token == NULL || op->kind == STORE_OP_TOKEN_DEL)
			continue;
		tv = tokens_find(&t->tok, op->token, op->token_len, now_ms);
		if (tv != NULL) {
			op->skip = 1;
			op->err = TALLY_OK;
			op->result = tv->result;
			atomic_fetch_add(&t->st_token_hits, 1);
			continue;
		}
		if (token_stored(t, op, now_ms))
			continue;
		first = hmap_put(t->batch_tokens, op->token, op->token_len,
		                 &inserted);
		if (first == NULL) {
			/* Out of memory: unlisted, a retry later in this
			 * batch would be taken for the first and applied
			 * again. Not applied; the error says retry. */
			op->skip = 1;
			op->err = TALLY_ENOMEM;
			continue;
		}
		if (!inserted) {
			op->skip = 2; /* answered like the first, after apply */
			op->result = (int64_t)*first;
			continue;
		}
		*first = i;
		op->token_expiry_ms = now_ms + t->tok.retention_ms;
		fresh++;
	}
	return fresh;
}

static void tokens_settle(tally *t, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		store_op *op = &t->batch[i];

		if (op->skip == 2) {
			const store_op *first = &t->batch[op->result];

			op->err = first->err;
			op->result = first->result;
		} else if (!op->skip && op->token != NULL &&
		           op->kind != STORE_OP_TOKEN_DEL &&
		           op->err == TALLY_OK) {
			tokens_remember(&t->tok, op->token, op->token_len,
			                op->result, op->token_expiry_ms);
		}
	}
}

/* Whether the committer thread has work. When callers commit, only what
 * was handed to it: their own writes are theirs to commit. */
static int work_ready(const tally *t)
{
	if (t->closing || t->sync_req != t->sync_done)
		return 1;
	if (t->caller_commits)
		return t->kick;
	return t->count > 0;
}

/* Committer thread: wait for work, or until a flush, a reopen attempt or
 * (callers committing) a poll is due. */
static void work_wait(tally *t, int *stop)
{
	int async = t->opt.durability == TALLY_DURABILITY_ASYNC;

	pthread_mutex_lock(&t->qlock);
	while (!work_ready(t)) {
		uint64_t due = UINT64_MAX, now = eng_now_ns();

		if (async)
			due = t->last_flush_ns +
			      (uint64_t)t->opt.flush_interval_ms * 1000000u;
		if (t->failed && t->recover_at_ns < due)
			due = t->recover_at_ns;
		/* While tokens are stored, expired ones are purged and the
		 * clock stored once a second, idle or not. */
		if (atomic_load(&t->tokens_held) &&
		    t->last_purge_ns + 1000000000u < due)
			due = t->last_purge_ns + 1000000000u;
		if (t->caller_commits && now + ENG_POLL_NS < due)
			due = now + ENG_POLL_NS;
		if (due == UINT64_MAX) {
			pthread_cond_wait(&t->not_empty, &t->qlock);
			continue;
		}
		if (now >= due)
			break;
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t wait = due - now;
		ts.tv_sec += (time_t)(wait / 1000000000u);
		ts.tv_nsec += (long)(wait % 1000000000u);
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		/* A poll's timeout ends the wait: writes left queued (by a
		 * caller that did not commit) are taken then. */
		if (pthread_cond_timedwait(&t->not_empty, &t->qlock, &ts) ==
		    ETIMEDOUT && t->caller_commits)
			break;
	}
	*stop = t->count == 0 && t->closing;
	pthread_mutex_unlock(&t->qlock);
}

/* Take the waiting writes (up to batch_ops_max) as the next batch; 0 when
 * none wait, or when the first `until` writes ever queued are all taken.
 * commit_lock held, so no other batch is out. */
static size_t batch_take(tally *t, uint64_t until)
{
	size_t cap = t->opt.queue_ops_max, n;

	pthread_mutex_lock(&t->qlock);
	assert(t->busy == 0);
	n = t->count < t->opt.batch_ops_max ? t->count : t->opt.batch_ops_max;
	if (t->taken_total >= until)
		n = 0;
	if (n > 0) {
		/* Never cut a group: end the batch before the one cut. */
		const eng_op *last = &t->ring[(t->head + n - 1) % cap];

		if (last->group_left > 1)
			n -= last->group_pos + 1;
		/* a group is at most batch_ops_max long, so one fits whole */
		assert(n > 0);
	}
	if (n == t->count)
		t->kick = 0; /* all of it is taken */
	t->busy = n;
	t->taken_total += n;
	pthread_mutex_unlock(&t->qlock);
	for (size_t i = 0; i < n; i++) {
		eng_op *e = &t->ring[(t->head + i) % cap];

		t->batch_src[i] = e;
		t->batch[i] = e->op;
	}
	return n;
}

static void batch_complete(tally *t, size_t n, int batch_err)
{
	size_t cap = t->opt.queue_ops_max;
	int lost_ctype = 0;

	for (size_t i = 0; i < n; i++) {
		eng_op *e = t->batch_src[i];
		const store_op *op = &t->batch[i];
		int err = batch_err ? batch_err : op->err;

		lost_ctype |= op->kind == STORE_OP_CTYPE && err != TALLY_OK;
		atomic_fetch_add(err ? &t->st_write_errors : &t->st_writes, 1);
		e->cb(e->arg, err, err ? 0 : op->result);
		free(e->heap);
		e->heap = NULL;
	}
	pthread_mutex_lock(&t->qlock);
	t->head = (t->head + n) % cap;
	t->count -= n;
	t->busy = 0;
	if (store_failure(batch_err))
		fail_mark_locked(t, batch_err);
	else if (lost_ctype)
		/* A content type is published when its record is queued
		 * (schema_ctype_ensure()); a record that failed, for a reason
		 * that fails no store (its batch, or the fold before it, out of
		 * memory, and then its write alone, ctypes_alone(), as well),
		 * would leave its id in use with no name on disk, for the next
		 * open to give to another name. Failing the store makes the
		 * recovery reload the types from disk. */
		fail_mark_locked(t, TALLY_EIO);
	pthread_cond_broadcast(&t->not_full);
	pthread_mutex_unlock(&t->qlock);
}

static int store_sync(tally *t)
{
	int rc = t->st->vt->sync(t->st);

	t->last_flush_ns = eng_now_ns();
	if (store_failure(rc))
		fail_mark(t, rc);
	return rc;
}

/* The fold's mark (stores with token_get): the handle's token, written
 * in the fold's atomic batch with the fold's number as its result. */
static void fold_mark(tally *t, store_op *op)
{
	op->token = t->fold_tok;
	op->token_len = FOLD_TOK_LEN;
	op->token_expiry_ms = tokens_now(&t->tok) + t->tok.retention_ms;
	op->token_mark = 1;
	op->token_result = (int64_t)++t->fold_seq;
}

/* A fold whose outcome is unknown: its ops (and their keys) and stripes
 * leave fold_ops for the limbo, which fold_ops' arrays take in turn. */
static void limbo_take(tally *t, size_t n)
{
	store_op *ops = t->limbo_ops;
	uint8_t *src = t->limbo_src;

	assert(t->limbo_n == 0 && n > 0);
	t->limbo_ops = t->fold_ops;
	t->limbo_src = t->fold_src;
	t->fold_ops = ops;
	t->fold_src = src;
	t->limbo_n = n;
}

/* Fold ops done with: their keys freed; landed, their overflows counted. */
static void fold_ops_release(tally *t, const store_op *ops, size_t n,
                             int landed)
{
	for (size_t i = 0; i < n; i++) {
		if (landed && ops[i].err != TALLY_OK)
			atomic_fetch_add(&t->st_fold_overflow, 1);
		free((void *)(uintptr_t)ops[i].key);
	}
}

/* Async mode: fold the striped cells into the store (INCRBY ops ahead of
 * nothing else) when due or when ops of this batch need them folded.
 * mark: write the fold's mark (stores with token_get), so that a failure
 * of unknown outcome is resolved by the recovery, not dropped. Only the
 * folds that are due are marked: a mark takes the fold through RocksDB's
 * WAL, and a fold ahead of each batch of a counter that also takes
 * tally_counter_add() then switched files at every batch, an fsync each
 * (tally_incrby() mixed with tally_counter_add() on one key: 3k to 6k
 * calls/s marked, 64k to 81k unmarked). */
static int fold(tally *t, int mark)
{
	size_t n = 0;
	int rc = stripes_drain(t, &n);
	store_batch b = { .ops = t->fold_ops, .n = n };
	int marked = mark && rc == TALLY_OK && n > 0 &&
	             t->st->vt->token_get != NULL;

	/* No fold runs while one is in limbo: the store is failed until the
	 * recovery resolves it. */
	assert(t->limbo_n == 0);
	if (marked) {
		fold_mark(t, &t->fold_ops[0]);
		b.token_clock = 1;
		b.token_clock_ms = tokens_now(&t->tok);
	}
	/* The cells let go of their adds once they are handed to the store,
	 * whatever it answers but out of memory: a failed batch may have
	 * been written (what reached the disk is the truth), and a fold
	 * again would count it twice; a store out of memory wrote nothing
	 * (store.h), nor a store that says so (a read error before its
	 * write), so the adds stay for the next fold. A drain that failed
	 * (out of memory) handed nothing over either. A marked fold whose
	 * outcome is unknown waits in limbo for the recovery, which reads
	 * its mark back (limbo_resolve()). */
	if (rc == TALLY_OK) {
		if (n > 0)
			rc = t->st->vt->apply(t->st, &b);
		if (rc == TALLY_OK || (rc != TALLY_ENOMEM && !b.unwritten))
			stripes_folded(t, n);
	}
	if (marked && rc != TALLY_OK && rc != TALLY_ENOMEM && !b.unwritten) {
		limbo_take(t, n);
		return rc;
	}
	fold_ops_release(t, t->fold_ops, n, rc == TALLY_OK);
	return rc;
}

static void sync_requests(tally *t, int async)
{
	uint64_t req;
	int rc = TALLY_OK;

	pthread_mutex_lock(&t->qlock);
	req = t->sync_req;
	pthread_mutex_unlock(&t->qlock);
	if (req == t->sync_done && !(async && eng_now_ns() >= t->last_flush_ns +
	    (uint64_t)t->opt.flush_interval_ms * 1000000u))
		return;
	if (t->failed) {
		/* Cells keep their adds for after the recovery: a fold now
		 * would drop them. */
		rc = t->fail_err;
		t->last_flush_ns = eng_now_ns();
	} else if (async) {
		pthread_rwlock_wrlock(&t->fold_lock);
		rc = fold(t, 1);
		stripes_settle(t);
		pthread_rwlock_unlock(&t->fold_lock);
		if (store_failure(rc))
			fail_mark(t, rc);
		/* Out of memory in the fold: its cells keep their adds, and
		 * the writes applied before are synced all the same. */
		if (!store_failure(rc)) {
			int src = store_sync(t);

			if (src != TALLY_OK)
				rc = src;
		}
	}
	pthread_mutex_lock(&t->qlock);
	t->sync_done = req;
	t->sync_err = rc;
	pthread_cond_broadcast(&t->synced);
	pthread_mutex_unlock(&t->qlock);
}

/* Bucket i holds batches of at most 2^i writes. */
static int hist_bucket(size_t n)
{
	int i = 0;

	while (i < TALLY_HIST_BUCKETS - 1 && n > ((size_t)1 << i))
		i++;
	return i;
}

/* The batch's writes are applied (or failed): adds of their threads may
 * land in cells again. */
static void holds_release(tally *t, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		eng_op *e = t->batch_src[i];

		if (e->hold >= 0)
			stripes_release(t, e->hold);
		e->hold = -1;
	}
}

/* Content types written per batch by ctypes_alone(). */
#define CTYPES_ALONE_MAX 16

/* The batch of n failed for memory, having written nothing (store.h).
 * A content type it names was published when its record was queued
 * (schema_ctype_ensure()), and writes after it may use the id already:
 * left unwritten, the store would have to fail so that its recovery
 * reloads the types. So the names are written alone, which takes little
 * memory. TALLY_OK when the batch named some and they are all written:
 * each op's err then says how it ended (its name written, or the rest out
 * of memory); else the error of their write, or TALLY_ENOMEM when it
 * named none. */
static int ctypes_alone(tally *t, size_t n)
{
	store_op ops[CTYPES_ALONE_MAX];
	size_t at[CTYPES_ALONE_MAX], i = 0, named = 0;
	int rc = TALLY_OK;

	while (i < n && rc == TALLY_OK) {
		store_batch b = {
			.ops = ops,
			.sync = t->opt.durability == TALLY_DURABILITY_SYNC,
		};

		for (; i < n && b.n < CTYPES_ALONE_MAX; i++)
			if (t->batch[i].kind == STORE_OP_CTYPE) {
				at[b.n] = i;
				ops[b.n++] = t->batch[i];
			}
		if (b.n == 0)
			break;
		rc = t->st->vt->apply(t->st, &b);
		for (size_t k = 0; k < b.n && rc == TALLY_OK; k++) {
			t->batch[at[k]].err = ops[k].err;
			t->batch[at[k]].result = ops[k].result;
		}
		named += b.n;
	}
	if (rc != TALLY_OK || named == 0)
		return rc != TALLY_OK ? rc : TALLY_ENOMEM;
	for (i = 0; i < n; i++)
		if (t->batch[i].kind != STORE_OP_CTYPE)
			t->batch[i].err = TALLY_ENOMEM;
	return TALLY_OK;
}

static void commit_batch(tally *t, size_t n)
{
	int async = t->opt.durability == TALLY_DURABILITY_ASYNC;
	store_batch b = { .ops = t->batch, .n = n, .sync = !async };
	int folding = async && !t->failed && stripes_touched(t, t->batch, n);
	int rc = TALLY_OK, alone = TALLY_ENOMEM;

	if (t->failed || atomic_exchange(&t->schema_lost, 0)) {
		/* Nothing is written on top of a failure (invariant 2), nor
		 * on a schema that lost an id it gave (engine.h). */
		holds_release(t, n);
		batch_complete(t, n, t->failed ? t->fail_err : TALLY_EIO);
		return;
	}
	/* A batch that stores tokens stores the clock they were stamped on
	 * with them: an open resumes it there or later, so no window is cut
	 * short by the time the folder was closed. */
	b.token_clock_ms = tokens_now(&t->tok);
	b.token_clock = tokens_resolve(t, n, b.token_clock_ms) > 0;
	if (b.token_clock)
		atomic_store(&t->tokens_held, 1);
	if (folding) {
		pthread_rwlock_wrlock(&t->fold_lock);
		rc = fold(t, 0);
	}
	if (rc == TALLY_OK)
		rc = t->st->vt->apply(t->st, &b);
	/* The fold's or the batch's: either wrote nothing (store.h). */
	if (rc == TALLY_ENOMEM) {
		alone = ctypes_alone(t, n);
		if (store_failure(alone))
			rc = alone;
	}
	/* Before the settle, so that it can make the cells safe again. */
	holds_release(t, n);
	if (folding) {
		stripes_settle(t);
		pthread_rwlock_unlock(&t->fold_lock);
	}
	if (rc == TALLY_OK)
		tokens_settle(t, n);
	atomic_fetch_add(&t->st_batches, 1);
	atomic_fetch_add(&t->st_batch_hist[hist_bucket(n)], 1);
	if (n > atomic_load(&t->st_batch_max))
		atomic_store(&t->st_batch_max, n);
	/* With its types written alone, each write says how it ended. */
	batch_complete(t, n, alone == TALLY_OK ? TALLY_OK : rc);
}

static void recover_maybe(tally *t);
static int recover_now(tally *t);

static void *committer_main(void *arg)
{
	tally *t = arg;
	int async = t->opt.durability == TALLY_DURABILITY_ASYNC;
	int stop = 0;

	/* Named, so that top -H and perf tell the threads apart. */
	prctl(PR_SET_NAME, "tally-commit", 0, 0, 0);
	t->last_flush_ns = eng_now_ns();
	while (!stop) {
		size_t n;

		work_wait(t, &stop);
		pthread_mutex_lock(&t->commit_lock);
		n = batch_take(t, UINT64_MAX);
		if (n > 0)
			commit_batch(t, n);
		pthread_mutex_unlock(&t->commit_lock);
		tokens_purge(t);
		pthread_mutex_lock(&t->commit_lock);
		sync_requests(t, async);
		recover_maybe(t);
		pthread_mutex_unlock(&t->commit_lock);
	}
	/* The time since the last store of the tokens' clock counts too. */
	pthread_mutex_lock(&t->commit_lock);
	if (!t->failed && !t->read_only) {
		int rc = tokens_clock_store(t);

		if (store_failure(rc))
			fail_mark(t, rc);
	}
	pthread_mutex_unlock(&t->commit_lock);
	if (async) {
		pthread_mutex_lock(&t->commit_lock);
		/* The cells hold acknowledged adds, and a fold of unknown
		 * outcome may wait in limbo: closed on a failed store, they
		 * would die with the handle. One recovery first, whenever the
		 * last was tried; if it fails too, they are lost, as in a
		 * crash of the process. */
		if (t->failed)
			(void)recover_now(t);
		if (!t->failed) {
			pthread_rwlock_wrlock(&t->fold_lock);
			/* unmarked: a limbo now would die with the handle */
			(void)fold(t, 0);
			pthread_rwlock_unlock(&t->fold_lock);
			(void)store_sync(t);
		}
		pthread_mutex_unlock(&t->commit_lock);
	}
	return NULL;
}

/* ---- open and close ------------------------------------------------------- */

static int options_apply(const tally_options *in, tally_options *o)
{
	tally_options z = { 0 };

	if (in == NULL)
		in = &z;
	*o = *in;
	o->flush_interval_ms = DEF(in->flush_interval_ms, 100);
	o->queue_ops_max = DEF(in->queue_ops_max, 65536);
	o->batch_ops_max = DEF(in->batch_ops_max, 8192);
	o->token_retention_ms = DEF(in->token_retention_ms, 600000);
	o->cache_entries_max = DEF(in->cache_entries_max, 1u << 20);
	o->block_cache_mb = DEF(in->block_cache_mb, 64);
	o->hot_shard_ops = DEF(in->hot_shard_ops, 100000);
	o->checkpoint_kib = DEF(in->checkpoint_kib, 65536);
	o->tokens_max = DEF(in->tokens_max, TOKENS_MAX);
	o->open_files_max = DEF(in->open_files_max, 512);
	if (o->durability != TALLY_DURABILITY_SYNC &&
	    o->durability != TALLY_DURABILITY_ASYNC)
		return TALLY_EINVAL;
	if (o->flush_interval_ms > 60000 || o->queue_ops_max < 16 ||
	    o->queue_ops_max > (1u << 24) || o->batch_ops_max > (1u << 20) ||
	    o->token_retention_ms < 1000 ||
	    o->token_retention_ms > 604800000u ||
	    o->cache_entries_max < 1024 || o->cache_entries_max > (1u << 30) ||
	    o->block_cache_mb > (1u << 20) || o->checkpoint_kib < 4 ||
	    o->checkpoint_kib > (1u << 22) || o->tokens_max < 16 ||
	    o->tokens_max > TOKENS_MAX || o->open_files_max < 20 ||
	    o->open_files_max > (1u << 20) ||
	    (o->flags & ~(uint32_t)(TALLY_OPEN_NO_CREATE |
	                            TALLY_OPEN_CALLER_COMMITS |
	                            TALLY_OPEN_READ_ONLY)))
		return TALLY_EINVAL;
	if ((o->store != TALLY_STORE_ROCKSDB &&
	     o->store != TALLY_STORE_REDIS_CLUSTER) || o->redis_wait > 16 ||
	    (o->hot_shard_ops > 100000000 &&
	     o->hot_shard_ops != TALLY_HOT_SHARD_OFF) ||
	    o->hot_shards_max > 256 ||
	    (o->store == TALLY_STORE_REDIS_CLUSTER &&
	     (o->cluster_seeds == NULL || o->cluster_seeds[0] == '\0')))
		return TALLY_EINVAL;
	if (o->batch_ops_max > o->queue_ops_max)
		o->batch_ops_max = o->queue_ops_max;
	/* A cluster is shared: there is no folder to leave as it is. */
	if ((o->flags & TALLY_OPEN_READ_ONLY) &&
	    o->store == TALLY_STORE_REDIS_CLUSTER)
		return TALLY_ENOTSUP;
	if (o->flags & TALLY_OPEN_READ_ONLY)
		o->flags |= TALLY_OPEN_NO_CREATE;
	return TALLY_OK;
}

/* For a lock no thread takes twice for reading (a waiting writer would
 * then block the second take: a deadlock). */
static int rwlock_init_writer_first(pthread_rwlock_t *l)
{
	pthread_rwlockattr_t a;
	int rc;

	if (pthread_rwlockattr_init(&a) != 0)
		return -1;
#ifdef __GLIBC__
	/* glibc lets new readers past a waiting writer by default: a
	 * stream of reads held the committer (and every write behind it)
	 * for seconds. */
	pthread_rwlockattr_setkind_np(&a,
	        PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
	rc = pthread_rwlock_init(l, &a);
	pthread_rwlockattr_destroy(&a);
	return rc;
}

/* The committer's timed wait runs on the monotonic clock: on the wall
 * clock, a step back by X delayed the flush (and the poll, and the
 * recovery's retry) by X. */
static int cond_init_monotonic(pthread_cond_t *c)
{
	pthread_condattr_t a;
	int rc;

	if (pthread_condattr_init(&a) != 0)
		return -1;
	rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	if (rc == 0)
		rc = pthread_cond_init(c, &a);
	pthread_condattr_destroy(&a);
	return rc;
}

static int sync_init(tally *t)
{
	if (pthread_mutex_init(&t->qlock, NULL) ||
	    pthread_mutex_init(&t->commit_lock, NULL) ||
	    pthread_cond_init(&t->not_full, NULL) ||
	    cond_init_monotonic(&t->not_empty) ||
	    pthread_cond_init(&t->synced, NULL) ||
	    rwlock_init_writer_first(&t->fold_lock) ||
	    pthread_rwlock_init(&t->st_lock, NULL))
		return TALLY_ENOMEM;
	return TALLY_OK;
}

static int tables_init(tally *t)
{
	size_t bmax = t->opt.batch_ops_max;

	t->ring = calloc(t->opt.queue_ops_max, sizeof *t->ring);
	t->batch = calloc(bmax, sizeof *t->batch);
	t->batch_src = calloc(bmax, sizeof *t->batch_src);
	t->batch_tokens = hmap_create(sizeof(size_t));
	if (!t->ring || !t->batch || !t->batch_src || !t->batch_tokens)
		return TALLY_ENOMEM;
	if (schema_init(&t->sch) != TALLY_OK ||
	    tokens_init(&t->tok, t->opt.token_retention_ms,
	                t->opt.tokens_max) != TALLY_OK ||
	    stripes_init(t) != TALLY_OK)
		return TALLY_ENOMEM;
	return TALLY_OK;
}

/* resume: an open, whose tokens' clock starts from the tokens loaded; a
 * reopen after a failure goes on with the clock it was given. */
static int state_load(store *st, eng_loaded *into, int resume)
{
	store_loader l = { into, schema_load_type, schema_load_ctype,
	                   tokens_load, tokens_load_clock };
	int rc = st->vt->load(st, &l);

	if (rc == TALLY_OK) {
		tokens_loaded(into->tok, resume);
		schema_loaded(into->sch);
	}
	return rc;
}

/* ---- recovery after a store failure (invariant 7) -------------------------- */

/* Load the schema and tokens of the reopened store and publish them. */
static int state_reload(tally *t)
{
	schema sch;
	tokens tok;
	int rc = schema_init(&sch);

	if (rc == TALLY_OK)
		rc = tokens_init(&tok, t->opt.token_retention_ms,
		                 t->opt.tokens_max);
	else
		memset(&tok, 0, sizeof tok);
	tok.clock_ms = t->tok.clock_ms;
	tok.clock_ns = t->tok.clock_ns;
	if (rc == TALLY_OK)
		rc = state_load(t->st, &(eng_loaded){ &sch, &tok }, 0);
	if (rc == TALLY_OK) {
		schema_replace(&t->sch, &sch, &t->schema_lost);
		tokens_free(&t->tok);
		t->tok = tok; /* committer-only: no lock */
		(void)tokens_held_set(t, tokens_now(&t->tok));
	} else {
		tokens_free(&tok);
	}
	schema_free(&sch);
	return rc;
}

/* The options the chosen store is opened with. */
static store_options store_opts(const tally *t, int create)
{
	return (store_options){
		.cache_entries_max = t->opt.cache_entries_max,
		.checkpoint_bytes = (uint64_t)t->opt.checkpoint_kib << 10,
		.block_cache_mb = t->opt.block_cache_mb,
		.open_files_max = t->opt.open_files_max,
		.create = create,
		.read_only = t->read_only,
		.seeds = t->opt.cluster_seeds,
		.redis_wait = (int)t->opt.redis_wait,
		.token_retention_ms = t->opt.token_retention_ms,
		.redis_password = t->opt.cluster_password,
		.hot_shard_ops = t->opt.hot_shard_ops == TALLY_HOT_SHARD_OFF
		                 ? 0 : t->opt.hot_shard_ops,
		.hot_shards_max = t->opt.hot_shards_max,
	};
}

static int store_open(const tally *t, int create, store **out)
{
	store_options so = store_opts(t, create);

	if (t->opt.store == TALLY_STORE_REDIS_CLUSTER)
		return redis_cluster_open(&so, out);
	return rocks_open(t->path, &so, out);
}

static int recover(tally *t)
{
	store_options so = store_opts(t, 0);
	store *st = NULL;
	int rc = t->opt.store == TALLY_STORE_REDIS_CLUSTER
	         ? redis_cluster_probe(&so) : rocks_probe(t->path);

	/* Closing a store that works for reads is only worth it when the
	 * new one is likely to open. */
	if (rc != TALLY_OK)
		return rc;
	pthread_rwlock_wrlock(&t->st_lock);
	if (t->st != NULL) {
		store_stats ss;

		memset(&ss, 0, sizeof ss);
		t->st->vt->stats(t->st, &ss);
		atomic_fetch_add(&t->st_journal_dropped, ss.journal_dropped);
		atomic_fetch_add(&t->st_ck_retries, ss.checkpoint_retries);
		t->st->vt->close(t->st);
	}
	/* the folder must still be there: no create */
	rc = store_open(t, 0, &st);
	t->st = rc == TALLY_OK ? st : NULL;
	pthread_rwlock_unlock(&t->st_lock);
	return rc == TALLY_OK ? state_reload(t) : rc;
}

/* After a recovery: the fold the failure left in limbo landed whole (the
 * store's batches are atomic) if the store holds its mark with its
 * number, whatever the mark's expiry (nothing swept while the store was
 * failed); else it goes back into the cells, to be folded again. TALLY_OK,
 * or what keeps the store failed: a read of the mark that failed, or out
 * of memory putting back (the rest stays for the next try). */
static int limbo_resolve(tally *t)
{
	int64_t result = 0, expiry_ms = 0;
	size_t done = 0;
	int landed, rc;

	if (t->limbo_n == 0)
		return TALLY_OK;
	rc = t->st->vt->token_get(t->st, t->fold_tok, FOLD_TOK_LEN, &result,
	                          &expiry_ms);
	if (rc != TALLY_OK && rc != TALLY_ENOTFOUND)
		return rc;
	/* No fold ran since: the last number given is the limbo's. */
	landed = rc == TALLY_OK && result == (int64_t)t->fold_seq;
	if (landed) {
		done = t->limbo_n;
	} else {
		pthread_rwlock_wrlock(&t->fold_lock);
		rc = stripes_put_back(t, t->limbo_ops, t->limbo_src,
		                      t->limbo_n, &done);
		pthread_rwlock_unlock(&t->fold_lock);
	}
	fold_ops_release(t, t->limbo_ops, done, landed);
	memmove(t->limbo_ops, t->limbo_ops + done,
	        (t->limbo_n - done) * sizeof *t->limbo_ops);
	memmove(t->limbo_src, t->limbo_src + done, t->limbo_n - done);
	t->limbo_n -= done;
	return rc == TALLY_ENOTFOUND ? TALLY_OK : rc;
}

/* Reopen the failed store and resolve a fold left in limbo; on success
 * writes are taken again. Committer, commit lock held, queue empty. */
static int recover_now(tally *t)
{
	int rc = recover(t);

	if (rc == TALLY_OK)
		rc = limbo_resolve(t);
	if (rc != TALLY_OK)
		return rc;
	pthread_mutex_lock(&t->qlock);
	t->failed = 0;
	t->fail_err = TALLY_OK;
	pthread_mutex_unlock(&t->qlock);
	atomic_fetch_add(&t->st_store_recoveries, 1);
	return TALLY_OK;
}

static void recover_maybe(tally *t)
{
	int idle;

	/* A read-only handle has no failure to recover from, and the probe
	 * would write in its folder. */
	if (!t->failed || t->read_only || eng_now_ns() < t->recover_at_ns)
		return;
	/* The writes queued before the failure are answered first (with
	 * the error); new ones are refused, so the queue empties. */
	pthread_mutex_lock(&t->qlock);
	idle = t->count == 0 && !t->closing;
	pthread_mutex_unlock(&t->qlock);
	if (!idle)
		return;
	t->recover_at_ns = eng_now_ns() + ENG_RECOVER_INTERVAL_NS;
	(void)recover_now(t);
}

static void tally_free(tally *t)
{
	if (t->st != NULL)
		t->st->vt->close(t->st);
	free(t->path);
	if (t->opt_owned) {
		free((char *)(uintptr_t)t->opt.cluster_seeds);
		free((char *)(uintptr_t)t->opt.cluster_password);
	}
	pthread_rwlock_destroy(&t->st_lock);
	schema_free(&t->sch);
	tokens_free(&t->tok);
	stripes_free(t);
	hmap_free(t->batch_tokens);
	free(t->batch_src);
	free(t->batch);
	free(t->ring);
	pthread_rwlock_destroy(&t->fold_lock);
	pthread_cond_destroy(&t->synced);
	pthread_cond_destroy(&t->not_empty);
	pthread_cond_destroy(&t->not_full);
	pthread_mutex_destroy(&t->qlock);
	pthread_mutex_destroy(&t->commit_lock);
	free(t);
}

/* The strings of the options are copied: recover() reopens with them. */
static int options_own(tally *t)
{
	const char *seeds = t->opt.cluster_seeds;
	const char *pass = t->opt.cluster_password;

	t->opt.cluster_seeds = seeds != NULL ? strdup(seeds) : NULL;
	t->opt.cluster_password = pass != NULL ? strdup(pass) : NULL;
	t->opt_owned = 1;
	if ((seeds != NULL && t->opt.cluster_seeds == NULL) ||
	    (pass != NULL && t->opt.cluster_password == NULL))
		return TALLY_ENOMEM;
	return TALLY_OK;
}

int tally_open(const char *path, const tally_options *opts, tally **out)
{
	tally *t;
	int rc;

	if (out == NULL)
		return TALLY_EINVAL;
	*out = NULL;
	if (path == NULL || path[0] == '\0')
		return TALLY_EINVAL;
	t = calloc(1, sizeof *t);
	if (t == NULL)
		return TALLY_ENOMEM;
	rc = options_apply(opts, &t->opt);
	if (rc == TALLY_OK)
		rc = sync_init(t);
	if (rc != TALLY_OK) {
		free(t);
		return rc;
	}
	rc = tables_init(t);
	t->path = strdup(path);
	if (rc == TALLY_OK && t->path == NULL)
		rc = TALLY_ENOMEM;
	if (rc == TALLY_OK)
		rc = options_own(t);
	t->caller_commits = !!(t->opt.flags & TALLY_OPEN_CALLER_COMMITS);
	t->read_only = !!(t->opt.flags & TALLY_OPEN_READ_ONLY);
	if (rc == TALLY_OK)
		rc = store_open(t, !(t->opt.flags & TALLY_OPEN_NO_CREATE),
		                &t->st);
	if (rc == TALLY_OK)
		rc = state_load(t->st, &(eng_loaded){ &t->sch, &t->tok }, 1);
	/* A read-only handle never purges (nor stores the clock). */
	if (rc == TALLY_OK && !t->read_only)
		(void)tokens_held_set(t, tokens_now(&t->tok));
	if (rc == TALLY_OK) {
		if (pthread_create(&t->committer, NULL, committer_main, t))
			rc = TALLY_ENOMEM;
		else
			t->committer_started = 1;
	}
	if (rc != TALLY_OK) {
		tally_free(t);
		return rc;
	}
	*out = t;
	return TALLY_OK;
}

void tally_close(tally *t)
{
	if (t == NULL)
		return;
	pthread_mutex_lock(&t->qlock);
	t->closing = 1;
	pthread_cond_broadcast(&t->not_empty);
	pthread_cond_broadcast(&t->not_full);
	pthread_mutex_unlock(&t->qlock);
	if (t->committer_started)
		pthread_join(t->committer, NULL);
	tally_free(t);
}

void tally_closep(tally **tp)
{
	if (tp == NULL)
		return;
	tally_close(*tp);
	*tp = NULL;
}

int tally_sync(tally *t)
{
	uint64_t mine;
	int rc;

	if (t == NULL)
		return TALLY_EINVAL;
	pthread_mutex_lock(&t->qlock);
	if (t->opt.durability == TALLY_DURABILITY_SYNC) {
		rc = t->failed ? t->fail_err : TALLY_OK;
		pthread_mutex_unlock(&t->qlock);
		return rc;
	}
	if (t->closing) {
		pthread_mutex_unlock(&t->qlock);
		return TALLY_ECLOSED;
	}
	mine = ++t->sync_req;
	pthread_cond_signal(&t->not_empty);
	while (t->sync_done < mine)
		pthread_cond_wait(&t->synced, &t->qlock);
	rc = t->sync_err;
	pthread_mutex_unlock(&t->qlock);
	return rc;
}

int tally_commit(tally *t)
{
	uint64_t mine;

	if (t == NULL)
		return TALLY_EINVAL;
	pthread_mutex_lock(&t->qlock);
	mine = t->queued_total; /* this thread's writes are all before it */
	pthread_mutex_unlock(&t->qlock);
	for (int round = 0; round < ENG_COMMIT_ROUNDS; round++) {
		size_t n;

		/* Waits while another commit runs: that one may take these
		 * writes (then n is 0), and a batch takes every write that
		 * waits, the other callers' too, as one group commit.
		 * Committing here rather than handing over keeps the
		 * callbacks on this thread. */
		pthread_mutex_lock(&t->commit_lock);
		n = batch_take(t, mine);
		if (n > 0)
			commit_batch(t, n);
		pthread_mutex_unlock(&t->commit_lock);
		if (n == 0)
			return TALLY_OK;
	}
	/* More than ENG_COMMIT_ROUNDS batches of writes: the committer
	 * thread takes the rest, this caller goes back to its clients. */
	pthread_mutex_lock(&t->qlock);
	if (t->taken_total < mine)
		kick_locked(t);
	pthread_mutex_unlock(&t->qlock);
	return TALLY_OK;
}

/* ---- writes -------------------------------------------------------------- */

static int key_check(const void *key, size_t len)
{
	if (key == NULL)
		return TALLY_EINVAL;
	if (len == 0 || len > TALLY_KEY_MAX)
		return TALLY_EKEYSIZE;
	return TALLY_OK;
}

static int id_check(const void *id, size_t len)
{
	if (id != NULL && (len == 0 || len > TALLY_ID_MAX))
		return TALLY_EKEYSIZE;
	return TALLY_OK;
}

static int event_prepare(tally *t, const tally_event *ev, int remove,
                         store_op *op)
{
	uint16_t ktype, ctype;
	int mode, rc;

	if (ev == NULL || ev->ctype == NULL || ev->ktype == NULL)
		return TALLY_EINVAL;
	rc = schema_name_check(ev->ctype);
	if (rc == TALLY_OK)
		rc = schema_type(t, ev->ktype, &ktype, &mode);
	if (rc != TALLY_OK)
		return rc;
	if (mode == TALLY_MODE_UNIQUE &&
	    (ev->member == 0 || ev->delta < 0 || ev->delta > 1))
		return TALLY_EINVAL;
	if (ev->delta < 0 || ev->at_ms < 0 || ev->at_ms > TALLY_AT_MS_MAX)
		return TALLY_EINVAL;
	rc = schema_ctype_ensure(t, ev->ctype, &ctype);
	if (rc != TALLY_OK)
		return rc;
	*op = (store_op){
		.kind = STORE_OP_EVENT, .mode = (uint8_t)mode,
		.remove = (uint8_t)remove,
		.obj = { ctype, ktype, ev->content },
		.member = ev->member,
		.delta = ev->delta ? ev->delta : 1,
		.at_ms = ev->at_ms, /* 0: stamped at enqueue_group() */
	};
	return TALLY_OK;
}

/* Turn a public write into a store op (validated, names resolved). */
static int write_prepare(tally *t, const tally_write *w, store_op *op)
{
	const void *id;
	size_t id_len;
	int rc;

	if (t == NULL || w == NULL)
		return TALLY_EINVAL;
	id = w->id;
	id_len = w->id_len;
	/* An event's own id counts too: one given there alone, as
	 * tally_add() takes it, was silently dropped. Two that differ are
	 * two requests in one: refused. */
	if ((w->kind == TALLY_W_ADD || w->kind == TALLY_W_REMOVE) &&
	    w->event.id != NULL) {
		if (id == NULL) {
			id = w->event.id;
			id_len = w->event.id_len;
		} else if (id_len != w->event.id_len ||
		           memcmp(id, w->event.id, id_len) != 0) {
			return TALLY_EINVAL;
		}
	}
	rc = id_check(id, id_len);
	if (rc != TALLY_OK)
		return rc;
	switch (w->kind) {
	case TALLY_W_INCRBY:
	case TALLY_W_SET:
	case TALLY_W_DEL:
		rc = key_check(w->key, w->key_len);
		if (rc != TALLY_OK)
			return rc;
		*op = (store_op){
			.kind = w->kind == TALLY_W_INCRBY ? STORE_OP_INCRBY :
			        w->kind == TALLY_W_SET ? STORE_OP_SET :
			        STORE_OP_DEL,
			.key = w->key, .key_len = (uint32_t)w->key_len,
			.value = w->value,
		};
		break;
	case TALLY_W_ADD:
	case TALLY_W_REMOVE:
		rc = event_prepare(t, &w->event, w->kind == TALLY_W_REMOVE, op);
		if (rc != TALLY_OK)
			return rc;
		break;
	default:
		return TALLY_EINVAL;
	}
	if (id != NULL && w->kind != TALLY_W_SET && w->kind != TALLY_W_DEL) {
		op->token = id;
		op->token_len = (uint32_t)id_len;
	}
	return TALLY_OK;
}

int tally_write_async(tally *t, const tally_write *w, tally_write_cb cb,
                      void *arg)
{
	store_op op;
	int rc;

	if (cb == NULL)
		return TALLY_EINVAL;
	rc = write_prepare(t, w, &op);
	return rc == TALLY_OK ? eng_enqueue(t, &op, cb, arg) : rc;
}

int tally_write_group_async(tally *t, const tally_write *ws, size_t n,
                            tally_write_cb cb, void *arg)
{
	store_op one, *ops;
	int rc = TALLY_OK;

	if (t == NULL || ws == NULL || cb == NULL || n == 0 ||
	    n > t->opt.batch_ops_max)
		return TALLY_EINVAL;
	ops = n == 1 ? &one : malloc(n * sizeof *ops);
	if (ops == NULL)
		return TALLY_ENOMEM;
	for (size_t i = 0; i < n && rc == TALLY_OK; i++)
		rc = write_prepare(t, &ws[i], &ops[i]);
	if (rc == TALLY_OK)
		rc = enqueue_group(t, ops, n, cb, arg, 0);
	if (ops != &one)
		free(ops);
	return rc;
}

int tally_write_sync(tally *t, const tally_write *w, int64_t *result)
{
	store_op op;
	int rc = write_prepare(t, w, &op);

	return rc == TALLY_OK ? eng_submit_wait(t, &op, result) : rc;
}

int tally_incrby(tally *t, const void *key, size_t key_len, int64_t delta,
                 int64_t *out)
{
	tally_write w = { .kind = TALLY_W_INCRBY, .key = key,
	                  .key_len = key_len, .value = delta };

	return tally_write_sync(t, &w, out);
}

int tally_set(tally *t, const void *key, size_t key_len, int64_t value)
{
	tally_write w = { .kind = TALLY_W_SET, .key = key, .key_len = key_len,
	                  .value = value };

	return tally_write_sync(t, &w, NULL);
}

int tally_del(tally *t, const void *key, size_t key_len, int *existed)
{
	tally_write w = { .kind = TALLY_W_DEL, .key = key, .key_len = key_len };
	int64_t r = 0;
	int rc = tally_write_sync(t, &w, &r);

	if (existed != NULL)
		*existed = rc == TALLY_OK && r != 0;
	return rc;
}

static int event_write(tally *t, const tally_event *ev, int kind,
                       int64_t *count)
{
	tally_write w = { .kind = kind };

	if (ev == NULL)
		return TALLY_EINVAL;
	w.event = *ev;
	w.id = ev->id;
	w.id_len = ev->id_len;
	return tally_write_sync(t, &w, count);
}

int tally_add(tally *t, const tally_event *ev, int64_t *count)
{
	return event_write(t, ev, TALLY_W_ADD, count);
}

int tally_remove(tally *t, const tally_event *ev, int64_t *count)
{
	return event_write(t, ev, TALLY_W_REMOVE, count);
}

int tally_counter_add(tally *t, const void *key, size_t key_len,
                      int64_t delta)
{
	int rc;

	if (t == NULL)
		return TALLY_EINVAL;
	rc = key_check(key, key_len);
	if (rc != TALLY_OK)
		return rc;
	if (delta > (INT64_C(1) << 32) || delta < -(INT64_C(1) << 32))
		return TALLY_EINVAL;
	if (t->read_only)
		return TALLY_EREADONLY;
	if (t->opt.durability == TALLY_DURABILITY_ASYNC && !t->failed &&
	    !t->closing) {
		if (!atomic_load(&t->holds_on)) {
			pthread_mutex_lock(&t->qlock);
			if (!atomic_load(&t->holds_on)) {
				t->holds_from = t->queued_total;
				atomic_store(&t->holds_on, 1);
			}
			pthread_mutex_unlock(&t->qlock);
		}
		if (stripes_add(t, key, key_len, delta))
			return TALLY_OK;
	}
	return tally_incrby(t, key, key_len, delta, NULL);
}

/* ---- stats, backup -------------------------------------------------------- */

int tally_stats_get(tally *t, tally_stats *out)
{
	store_stats ss;

	if (t == NULL || out == NULL)
		return TALLY_EINVAL;
	memset(&ss, 0, sizeof ss);
	if (eng_store_hold(t) == TALLY_OK) {
		t->st->vt->stats(t->st, &ss);
		eng_store_release(t);
	}
	*out = (tally_stats){
		.writes = atomic_load(&t->st_writes),
		.write_errors = atomic_load(&t->st_write_errors),
		.token_hits = atomic_load(&t->st_token_hits),
		.tokens_swept = atomic_load(&t->st_tokens_swept),
		.batches = atomic_load(&t->st_batches),
		.batch_ops_max = atomic_load(&t->st_batch_max),
		.store_entries = ss.entries,
		.syncs = ss.syncs,
		.sync_ns_total = ss.sync_ns,
		.striped_adds = stripes_adds(t),
		.fold_overflows = atomic_load(&t->st_fold_overflow),
		.last_seq = ss.last_seq,
		.counters = ss.counters,
		.store_failures = atomic_load(&t->st_store_failures),
		.store_recoveries = atomic_load(&t->st_store_recoveries),
		.shard_growths = ss.shard_growths,
		.store_dirty = ss.dirty,
		.store_clean = ss.clean,
		.store_checkpoints = ss.checkpoints,
		.store_checkpoint_entries = ss.checkpoint_entries,
		.journal_records_dropped =
			atomic_load(&t->st_journal_dropped) +
			ss.journal_dropped,
		.store_checkpoint_retries = atomic_load(&t->st_ck_retries) +
		                            ss.checkpoint_retries,
	};
	for (int i = 0; i < TALLY_HIST_BUCKETS; i++) {
		out->batch_hist[i] = atomic_load(&t->st_batch_hist[i]);
		out->sync_hist[i] = ss.sync_hist[i];
	}
	pthread_mutex_lock(&t->qlock);
	out->queue_depth = t->count;
	out->store_error = t->failed ? t->fail_err : TALLY_OK;
	pthread_mutex_unlock(&t->qlock);
	return TALLY_OK;
}

int tally_compact(tally *t)
{
	int rc;

	if (t == NULL)
		return TALLY_EINVAL;
	rc = eng_store_hold(t);
	if (rc != TALLY_OK)
		return rc;
	rc = t->st->vt->compact(t->st); /* read-only: refused there */
	eng_store_release(t);
	return rc;
}

int tally_disk_usage(tally *t, tally_disk_part *out, size_t cap, size_t *n)
{
	int rc;

	if (t == NULL || n == NULL || (out == NULL && cap > 0))
		return TALLY_EINVAL;
	rc = eng_store_hold(t);
	if (rc != TALLY_OK)
		return rc;
	rc = t->st->vt->disk_usage(t->st, out, cap, n);
	eng_store_release(t);
	return rc;
}

int tally_backup(tally *t, const char *dir)
{
	int rc;

	if (t == NULL || dir == NULL || dir[0] == '\0')
		return TALLY_EINVAL;
	/* Async mode: fold cells and flush first, so the copy holds every
	 * write acknowledged before the call. */
	rc = tally_sync(t);
	if (rc == TALLY_OK)
		rc = eng_store_hold(t);
	if (rc != TALLY_OK)
		return rc;
	rc = t->st->vt->backup(t->st, dir);
	eng_store_release(t);
	return rc;
}

int tally_shards(tally *t, const void *key, size_t key_len, uint32_t grow_to,
                 uint32_t *now)
{
	int rc;

	if (t == NULL || key == NULL || now == NULL)
		return TALLY_EINVAL;
	if (key_len == 0 || key_len > TALLY_KEY_MAX)
		return TALLY_EKEYSIZE;
	*now = 1;
	rc = eng_store_hold(t);
	if (rc != TALLY_OK)
		return rc;
	if (t->st->vt->shards != NULL)
		rc = t->st->vt->shards(t->st, key, key_len, grow_to, now);
	else if (grow_to > 1)
		rc = TALLY_ENOTSUP; /* one record per counter: nothing to grow */
	eng_store_release(t);
	return rc;
}
