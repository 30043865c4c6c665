/* rc_hot.c: automatic shard growth of hot named counters on the
 * redis-cluster store. The committer tells how many increments each batch
 * applies to each counter; a counter that takes more than hot_ops per
 * second per shard for RC_HOT_SECONDS whole seconds in a row is grown (the
 * GROW script, sent in the batch's own pipeline by rc_apply.c).
 *
 * The table is fixed and small (set-associative, no allocation): a counter
 * that loses its entry to others only starts its streak again, and one
 * truly hot is the last of its set to go. Counters are told apart by a
 * 64-bit hash of their name: a clash would at worst grow a cold counter. */
#include <string.h>

#include "store/rc_int.h"

/* Increments seen lately: whichever of the current and the last whole
 * second is larger (an entry just rolled over still counts as busy). */
static uint32_t busy(const rc_hot *e, uint64_t now_s)
{
	if (e->sec == now_s)
		return e->cnt > e->last ? e->cnt : e->last;
	return e->sec + 1 == now_s ? e->cnt : 0;
}

/* The entry of hash h, taken over from the least busy one if absent. */
static rc_hot *entry(rcs *r, uint64_t h, uint64_t now_s)
{
	rc_hot *set = &r->hot[(h >> 32) % RC_HOT_SETS * RC_HOT_WAYS];
	rc_hot *victim = &set[0];

	for (int w = 0; w < RC_HOT_WAYS; w++) {
		if (set[w].h == h)
			return &set[w];
		if (busy(&set[w], now_s) < busy(victim, now_s))
			victim = &set[w];
	}
	*victim = (rc_hot){ .h = h, .sec = now_s };
	return victim;
}

/* The most shards growth may give now. */
static uint32_t cap(rcs *r)
{
	size_t m;

	if (r->hot_max > 0)
		return r->hot_max < RC_SHARDS_MAX ? r->hot_max : RC_SHARDS_MAX;
	m = cluster_master_count(r->cl);
	if (m == 0)
		return 2;
	return m >= RC_SHARDS_MAX / 2 ? RC_SHARDS_MAX : (uint32_t)(2 * m);
}

uint32_t rc_hot_note(rcs *r, const uint8_t *key, size_t len, uint32_t n,
                     uint64_t now_s)
{
	uint32_t shards, want = 0;
	uint64_t w;
	rc_hot *e;

	if (r->hot_ops == 0 || n == 0)
		return 0;
	e = entry(r, hash_bytes(key, len) | 1, now_s);
	if (e->sec != now_s) {
		/* A second ended: judge it once, against the shards known
		 * then (one mutex and lookup per counter per second). */
		shards = rc_shards_get(r, key, len);
		if (e->sec + 1 == now_s &&
		    (uint64_t)e->cnt > (uint64_t)r->hot_ops * shards)
			e->streak++;
		else
			e->streak = 0;
		e->last = e->sec + 1 == now_s ? e->cnt : 0;
		e->cnt = 0;
		e->sec = now_s;
		if (e->streak >= RC_HOT_SECONDS) {
			/* Enough shards for the last second's rate; the
			 * next growth needs a new streak above it. */
			e->streak = 0;
			w = ((uint64_t)e->last + r->hot_ops - 1) / r->hot_ops;
			if (w > cap(r))
				w = cap(r);
			if (w > shards)
				want = (uint32_t)w;
		}
	}
	e->cnt = e->cnt > UINT32_MAX - n ? UINT32_MAX : e->cnt + n;
	return want;
}

void rc_hot_grown(rcs *r, const uint8_t *key, size_t len,
                  const redisReply *rep)
{
	uint32_t known = rc_shards_get(r, key, len);
	int64_t v;
	int nil;

	if (rc_reply_i64(rep, &v, &nil) != TALLY_OK || nil || v < 1 ||
	    v > RC_SHARDS_MAX)
		return;
	rc_shards_seen(r, key, len, (uint32_t)v);
	if ((uint32_t)v > known)
		atomic_fetch_add(&r->st_shard_growths, 1);
}
