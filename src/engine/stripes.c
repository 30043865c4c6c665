/* stripes.c: striped cells for hot named counters in async mode, in the
 * manner of Linux's percpu_counter: an add lands in the calling thread's
 * stripe (a small locked map), and the committer folds every stripe into
 * the store at each flush. A read sums the store and the stripes under the
 * fold lock, so it is exact.
 *
 * Overflow stays an error without a read per add: a cell takes adds only
 * while the committer has marked it safe (the counter's value within
 * STRIPE_VALUE_ABS_MAX) and while its own sum stays within
 * STRIPE_CELL_ABS_MAX; everything else takes the exact queue path.
 *
 * Per-thread order: a cell is folded ahead of the batch it meets, so an
 * add must not land in it while its thread has a write of the counter
 * queued and not applied. Such a write holds the counter back in its
 * thread's stripe (a count by key hash) from its enqueue to its apply;
 * adds meanwhile take the queue, behind it. */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"

/* A token no other handle writes: a fold's, found after a recovery, is
 * this handle's (the store may hold those of processes before it). */
static void fold_tok_init(tally *t)
{
	uint8_t r[8];
	struct timespec ts;

	memset(t->fold_tok, 0, sizeof t->fold_tok);
	memcpy(t->fold_tok, "\0fold", 5);
	if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
		/* No entropy to be had: the clock, the process, the handle. */
		uint64_t x;

		clock_gettime(CLOCK_REALTIME, &ts);
		x = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
		x ^= (uint64_t)getpid() << 40 ^ (uint64_t)(uintptr_t)t;
		memcpy(r, &x, sizeof r);
	}
	memcpy(t->fold_tok + 8, r, sizeof r);
	_Static_assert(FOLD_TOK_LEN == 16, "prefix 8, random 8");
}

int stripes_init(tally *t)
{
	for (int i = 0; i < STRIPES; i++) {
		if (pthread_mutex_init(&t->stripes[i].lock, NULL))
			return TALLY_ENOMEM;
		t->stripes[i].cells = hmap_create(sizeof(stripe_cell));
		if (t->stripes[i].cells == NULL)
			return TALLY_ENOMEM;
	}
	t->striped = hmap_create(1);
	t->fold_cap = (size_t)STRIPES * STRIPE_CELLS_MAX;
	t->fold_ops = calloc(t->fold_cap, sizeof *t->fold_ops);
	t->fold_src = calloc(t->fold_cap, 1);
	t->limbo_ops = calloc(t->fold_cap, sizeof *t->limbo_ops);
	t->limbo_src = calloc(t->fold_cap, 1);
	fold_tok_init(t);
	t->settle = malloc(sizeof *t->settle);
	if (t->settle != NULL)
		for (size_t i = 0; i < STRIPE_CELLS_MAX; i++)
			t->settle->key_at[i] = t->settle->keys[i];
	return t->striped && t->fold_ops && t->fold_src && t->limbo_ops &&
	       t->limbo_src && t->settle
	       ? TALLY_OK
	       : TALLY_ENOMEM;
}

void stripes_free(tally *t)
{
	for (int i = 0; i < STRIPES; i++) {
		if (t->stripes[i].cells == NULL)
			continue;
		hmap_free(t->stripes[i].cells);
		t->stripes[i].cells = NULL;
		pthread_mutex_destroy(&t->stripes[i].lock);
	}
	hmap_free(t->striped);
	t->striped = NULL;
	free(t->fold_ops);
	t->fold_ops = NULL;
	free(t->fold_src);
	t->fold_src = NULL;
	/* A fold still in limbo at close (the store failed to the end) is
	 * lost, as the cells' adds are. */
	for (size_t i = 0; t->limbo_ops != NULL && i < t->limbo_n; i++)
		free((void *)(uintptr_t)t->limbo_ops[i].key);
	t->limbo_n = 0;
	free(t->limbo_ops);
	t->limbo_ops = NULL;
	free(t->limbo_src);
	t->limbo_src = NULL;
	free(t->settle);
	t->settle = NULL;
}

/* The calling thread's stripe: threads spread by their id, so a thread
 * keeps to one stripe and rarely meets another there. */
static stripe *stripe_of(tally *t)
{
	pthread_t self = pthread_self();
	uint64_t h = hash_bytes(&self, sizeof self);

	return &t->stripes[h % STRIPES];
}

static int64_t abs64(int64_t v)
{
	assert(v != INT64_MIN);
	return v < 0 ? -v : v;
}

/* Stripe index of s (a hold names its stripe). */
static int32_t stripe_index(const tally *t, const stripe *s)
{
	return (int32_t)(s - t->stripes);
}

static size_t hold_slot(const void *key, size_t len)
{
	return hash_bytes(key, len) % STRIPE_HOLD_SLOTS;
}

int stripes_add(tally *t, const void *key, size_t len, int64_t delta)
{
	stripe *s = stripe_of(t);
	stripe_cell *c;
	int landed = 0;

	assert(abs64(delta) <= (INT64_C(1) << 32));
	pthread_mutex_lock(&s->lock);
	c = hmap_get(s->cells, key, len);
	if (c != NULL && c->safe &&
	    abs64(c->delta + delta) <= STRIPE_CELL_ABS_MAX) {
		c->delta += delta;
		c->idle = 0;
		s->adds++;
		landed = 1;
	} else if (c == NULL && hmap_count(s->cells) < STRIPE_CELLS_MAX) {
		/* A candidate: the committer marks it safe at the next fold;
		 * until then this key takes the queue. */
		(void)hmap_put(s->cells, key, len, NULL);
	}
	pthread_mutex_unlock(&s->lock);
	return landed;
}

int32_t stripes_hold(tally *t, const void *key, size_t len)
{
	stripe *s = stripe_of(t);
	size_t slot = hold_slot(key, len);
	stripe_cell *c;

	pthread_mutex_lock(&s->lock);
	assert(s->holds[slot] < UINT32_MAX);
	s->holds[slot]++;
	c = hmap_get(s->cells, key, len);
	if (c != NULL)
		c->safe = 0;
	pthread_mutex_unlock(&s->lock);
	return stripe_index(t, s) * STRIPE_HOLD_SLOTS + (int32_t)slot;
}

void stripes_release(tally *t, int32_t hold)
{
	stripe *s;

	assert(hold >= 0 && hold < STRIPES * STRIPE_HOLD_SLOTS);
	s = &t->stripes[hold / STRIPE_HOLD_SLOTS];
	pthread_mutex_lock(&s->lock);
	assert(s->holds[hold % STRIPE_HOLD_SLOTS] > 0);
	s->holds[hold % STRIPE_HOLD_SLOTS]--;
	pthread_mutex_unlock(&s->lock);
}

int64_t stripes_sum(tally *t, const void *key, size_t len)
{
	int64_t sum = 0;

	for (int i = 0; i < STRIPES; i++) {
		stripe *s = &t->stripes[i];
		const stripe_cell *c;

		pthread_mutex_lock(&s->lock);
		c = hmap_get(s->cells, key, len);
		if (c != NULL)
			sum += c->delta;
		pthread_mutex_unlock(&s->lock);
	}
	return sum;
}

uint64_t stripes_adds(tally *t)
{
	uint64_t n = 0;

	for (int i = 0; i < STRIPES; i++) {
		pthread_mutex_lock(&t->stripes[i].lock);
		n += t->stripes[i].adds;
		pthread_mutex_unlock(&t->stripes[i].lock);
	}
	return n;
}

int stripes_touched(tally *t, const store_op *ops, size_t n)
{
	if (hmap_count(t->striped) == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		const store_op *op = &ops[i];

		if (op_writes_counter(op) &&
		    hmap_get(t->striped, op->key, op->key_len) != NULL)
			return 1;
	}
	return 0;
}

int stripes_drain(tally *t, size_t *n)
{
	*n = 0;
	for (int i = 0; i < STRIPES; i++) {
		stripe *s = &t->stripes[i];
		size_t pos = 0, len;
		const void *key;
		void *val;

		pthread_mutex_lock(&s->lock);
		while (hmap_next(s->cells, &pos, &key, &len, &val)) {
			stripe_cell *c = val;
			uint8_t *copy;

			if (c->delta == 0)
				continue;
			assert(*n < t->fold_cap);
			copy = malloc(len);
			if (copy == NULL) {
				pthread_mutex_unlock(&s->lock);
				return TALLY_ENOMEM;
			}
			memcpy(copy, key, len);
			t->fold_src[*n] = (uint8_t)i;
			t->fold_ops[(*n)++] = (store_op){
				.kind = STORE_OP_INCRBY, .key = copy,
				.key_len = (uint32_t)len, .value = c->delta };
		}
		pthread_mutex_unlock(&s->lock);
	}
	return TALLY_OK;
}

_Static_assert(STRIPES <= 256, "a fold op names its stripe in a byte");

void stripes_folded(tally *t, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const store_op *op = &t->fold_ops[i];
		stripe *s = &t->stripes[t->fold_src[i]];
		stripe_cell *c;

		pthread_mutex_lock(&s->lock);
		/* Cells go only in stripes_settle(), after the fold. */
		c = hmap_get(s->cells, op->key, op->key_len);
		assert(c != NULL);
		if (c != NULL)
			c->delta -= op->value;
		pthread_mutex_unlock(&s->lock);
	}
}

int stripes_put_back(tally *t, const store_op *ops, const uint8_t *src,
                     size_t n, size_t *done)
{
	*done = 0;
	for (size_t i = 0; i < n; i++) {
		const store_op *op = &ops[i];
		int put = 0;

		/* Striped first: a queued write of the key must fold the adds
		 * put back ahead of it (a SET after them would be undone). */
		if (hmap_put(t->striped, op->key, op->key_len, NULL) == NULL)
			return TALLY_ENOMEM;
		/* Its own stripe first (its cell is likely still there), then
		 * any with the key or with room: a read sums them all. */
		for (int k = 0; !put && k < STRIPES; k++) {
			stripe *s = &t->stripes[(src[i] + k) % STRIPES];
			stripe_cell *c;

			pthread_mutex_lock(&s->lock);
			c = hmap_get(s->cells, op->key, op->key_len);
			if (c == NULL &&
			    hmap_count(s->cells) < STRIPE_CELLS_MAX)
				c = hmap_put(s->cells, op->key, op->key_len,
				             NULL);
			if (c != NULL) {
				c->delta += op->value;
				c->idle = 0;
				put = 1;
			}
			pthread_mutex_unlock(&s->lock);
		}
		if (!put)
			return TALLY_ENOMEM;
		(*done)++;
	}
	return TALLY_OK;
}

/* Whether each of the n counters of t->settle has a stored value that
 * leaves room for STRIPES full cells, into its ok[]: one read for all of
 * them (a round trip, with the Redis Cluster store, made under the fold
 * lock, which readers wait on). A failed read makes none safe. */
static void values_safe(tally *t, size_t n)
{
	stripe_settle *b = t->settle;
	int rc;

	assert(n <= STRIPE_CELLS_MAX);
	if (n == 0)
		return;
	rc = t->st->vt->mget(t->st, b->key_at, b->lens, n, b->values, NULL);
	for (size_t i = 0; i < n; i++)
		b->ok[i] = (uint8_t)(rc == TALLY_OK &&
		                     b->values[i] != INT64_MIN &&
		                     abs64(b->values[i]) <= STRIPE_VALUE_ABS_MAX);
}

/* One stripe: its cells' keys are copied under its lock, their stored
 * values read without it (a read can be a round trip, with the Redis
 * Cluster store, and writers take stripe locks), and the cells marked
 * under the lock again. Adds landed meanwhile went to safe cells only,
 * which the marking keeps in t->striped. */
static void settle_stripe(tally *t, stripe *s, int unheld)
{
	stripe_settle *b = t->settle;
	size_t pos = 0, len, n = 0;
	const void *key;
	void *val;

	pthread_mutex_lock(&s->lock);
	while (hmap_next(s->cells, &pos, &key, &len, &val)) {
		stripe_cell *c = val;

		/* Cells idle for long are dropped to bound memory. */
		if (c->delta == 0 && ++c->idle > 50) {
			hmap_del(s->cells, key, len);
			continue;
		}
		assert(n < STRIPE_CELLS_MAX && len <= TALLY_KEY_MAX);
		memcpy(b->keys[n], key, len);
		b->lens[n++] = len;
	}
	pthread_mutex_unlock(&s->lock);
	values_safe(t, n);
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < n; i++) {
		stripe_cell *c = hmap_get(s->cells, b->keys[i], b->lens[i]);

		if (c == NULL)
			continue;
		/* Not while a write of it is queued (or may be: writes
		 * queued before holds began); a cell safe already stays so
		 * unless a hold came, which cleared it. */
		c->safe = (uint8_t)(b->ok[i] &&
		                    s->holds[hold_slot(b->keys[i], b->lens[i])] ==
		                            0 &&
		                    (c->safe || !unheld));
		/* Every cell that may hold adds counts as striped: queued
		 * writes must see its adds. */
		if (c->safe || c->delta != 0)
			(void)hmap_put(t->striped, b->keys[i], b->lens[i], NULL);
	}
	pthread_mutex_unlock(&s->lock);
}

void stripes_settle(tally *t)
{
	int unheld;

	/* Writes queued before holds were on may still wait behind this
	 * batch. */
	pthread_mutex_lock(&t->qlock);
	unheld = t->taken_total < t->holds_from;
	pthread_mutex_unlock(&t->qlock);
	hmap_clear(t->striped);
	for (int i = 0; i < STRIPES; i++)
		settle_stripe(t, &t->stripes[i], unheld);
}
