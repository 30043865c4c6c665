/* rocks_clock.c: the event clock that format 5 codes times against
 * (core/keys.h): the time of one event in every EV_CLOCK_EVERY, kept in
 * memory for readers and in META for the next open.
 *
 * Why: each like's time was stored whole in the log and in the member's
 * history, about 2 bytes each after compression, and those times are
 * random in both tables' key order. Coded against the time of an event a
 * few hundred seqs before, they take a fraction of a byte.
 *
 * Invariants:
 * 1. A sample is written to META in the same write batch as the chunks
 *    of its generation, before any chunk of a later seq: the chunks on
 *    disk never need a sample that is not on disk.
 * 2. A slot below clk_n never changes once published: every seq has one
 *    event (a failed batch gives its seqs back before anything is
 *    written), so the event a slot holds never changes either; a slot
 *    passed over stays empty, since chunks of its block were written in
 *    format 4 without it (core/keys.c codes a chunk in format 5 only
 *    when every event has a sample).
 * 3. Blocks never move or shrink until close; readers read slots below
 *    the clk_n they loaded (acquire) without a lock. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "core/varint.h"
#include "store/rocks_int.h"

/* META key of sample k: the tag, then k big-endian. */
#define CLOCK_KEY_LEN 9

static void clock_key(uint8_t out[CLOCK_KEY_LEN], uint64_t k)
{
	out[0] = META_CLOCK;
	be64_put(out + 1, k);
}

int rocks_clock_init(rocks *r)
{
	r->clk_blocks = calloc(EV_CLOCK_BLOCKS_MAX, sizeof *r->clk_blocks);
	if (r->clk_blocks == NULL)
		return TALLY_ENOMEM;
	atomic_store(&r->clk_n, 0);
	if (pthread_mutex_init(&r->clk_mu, NULL) != 0)
		return TALLY_ENOMEM;
	r->clk_mu_ok = 1;
	return TALLY_OK;
}

void rocks_clock_free(rocks *r)
{
	if (r->clk_blocks != NULL) {
		for (size_t b = 0; b < EV_CLOCK_BLOCKS_MAX; b++)
			free(r->clk_blocks[b]);
		free(r->clk_blocks);
		r->clk_blocks = NULL;
	}
	if (r->clk_mu_ok)
		pthread_mutex_destroy(&r->clk_mu);
	r->clk_mu_ok = 0;
}

/* Set slot k (under clk_mu, or alone at open), growing the published
 * range over it; slots passed over hold EV_CLOCK_NONE, and blocks passed
 * over stay unallocated. Not published yet: *n is the caller's new
 * count. 0 when slot k holds at_ms, 1 when it is left as it was (a slot
 * published as none stays none: chunks may have been coded without
 * it), -1 out of memory. */
static int slot_set(rocks *r, uint64_t k, int64_t at_ms, uint64_t *n)
{
	int64_t **blk;
	size_t i;

	assert(k < EV_CLOCK_SAMPLES_MAX);
	assert(at_ms != EV_CLOCK_NONE);
	blk = &r->clk_blocks[k >> EV_CLOCK_BLOCK_SHIFT];
	i = (size_t)(k & (EV_CLOCK_BLOCK - 1));
	if (k < *n) {
		if (*blk == NULL || (*blk)[i] == EV_CLOCK_NONE)
			return 1;
		/* Written again (a spill, then its checkpoint): the same
		 * event, so the same time (invariant 2). */
		assert((*blk)[i] == at_ms);
		return 0;
	}
	if (*blk == NULL) {
		*blk = malloc(EV_CLOCK_BLOCK * sizeof **blk);
		if (*blk == NULL)
			return -1;
		for (size_t j = 0; j < EV_CLOCK_BLOCK; j++)
			(*blk)[j] = EV_CLOCK_NONE;
	}
	(*blk)[i] = at_ms;
	*n = k + 1;
	return 0;
}

int rocks_clock_load(rocks *r)
{
	const uint8_t first = META_CLOCK;
	rocksdb_iterator_t *it = rocksdb_create_iterator_cf(r->db, r->ro,
	                                                    r->cf[CF_META]);
	uint64_t n = 0;
	int rc = TALLY_OK;
	char *err = NULL;

	if (it == NULL)
		return TALLY_ENOMEM;
	for (rocksdb_iter_seek(it, (const char *)&first, 1);
	     rc == TALLY_OK && rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
		size_t klen, vlen;
		const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &klen);
		const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vlen);
		int64_t at_ms;
		uint64_t slot;

		if (klen == 0 || k[0] != META_CLOCK)
			break;
		if (klen != CLOCK_KEY_LEN || val_i64_decode(v, vlen, &at_ms) ||
		    at_ms == EV_CLOCK_NONE)
			rc = TALLY_ECORRUPT;
		else if ((slot = be64_get(k + 1)) >= EV_CLOCK_SAMPLES_MAX)
			rc = TALLY_ECORRUPT;
		else if (slot < n)
			rc = TALLY_ECORRUPT; /* keys come in order, once */
		else if (slot_set(r, slot, at_ms, &n) < 0)
			rc = TALLY_ENOMEM;
	}
	rocksdb_iter_get_error(it, &err);
	rocksdb_iter_destroy(it);
	if (err)
		return rocks_err(err);
	atomic_store_explicit(&r->clk_n, n, memory_order_release);
	return rc;
}

int rocks_clock_note(rocks *r, const rocks_evgen *g, rocksdb_writebatch_t *wb)
{
	uint64_t n;
	int rc = 0;

	if (g == NULL || g->n == 0)
		return 0;
	pthread_mutex_lock(&r->clk_mu);
	n = atomic_load_explicit(&r->clk_n, memory_order_relaxed);
	for (size_t i = 0; i < g->n && rc == 0; i++) {
		const rocks_ev *ev = &g->ev[i];
		uint8_t key[CLOCK_KEY_LEN], val[VARINT_MAX];
		uint64_t k;
		int set;

		assert(ev->seq >= 1);
		/* Times are 0..TALLY_AT_MS_MAX (the engine's bound, and
		 * the journal's on replay), so never EV_CLOCK_NONE. */
		if (((ev->seq - 1) & (EV_CLOCK_EVERY - 1)) != 0)
			continue;
		k = (ev->seq - 1) >> EV_CLOCK_SHIFT;
		if (k >= EV_CLOCK_SAMPLES_MAX)
			break; /* past capacity: chunks in format 4 */
		set = slot_set(r, k, ev->at_ms, &n);
		if (set < 0) {
			rc = -1;
			break;
		}
		if (set > 0)
			continue;
		clock_key(key, k);
		rocksdb_writebatch_put_cf(wb, r->cf[CF_META], (const char *)key,
		                          sizeof key, (const char *)val,
		                          val_i64_encode(val, ev->at_ms));
	}
	/* Published even after a failure: the slots set are right, and an
	 * unwritten batch leaves them unused until their events are
	 * written again. */
	atomic_store_explicit(&r->clk_n, n, memory_order_release);
	pthread_mutex_unlock(&r->clk_mu);
	return rc;
}

void rocks_clock_get(rocks *r, ev_clock *out)
{
	out->blocks = (int64_t *const *)r->clk_blocks;
	out->n = atomic_load_explicit(&r->clk_n, memory_order_acquire);
}
