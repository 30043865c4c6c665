/* rocks_apply.c: the RocksDB store's write path. A logical batch is applied
 * in order against overlays (this batch's view of counters, totals and
 * memberships), recorded in one journal record, written atomically and, in
 * sync mode, fsynced; only then do the overlays become the cache.
 *
 * A batch's journal record holds every counter and object total it
 * changed and every event it logged (rocks_journal.c and rocks_events.c
 * write them to their column families later, once per checkpoint). The
 * record goes to the journal files unless the batch also writes meta
 * entries (types, request IDs), which go into one RocksDB write with it. */
#include <assert.h>
#include <string.h>

#include "core/varint.h"
#include "store/rocks_int.h"

/* Room for a meta key: tag byte + the longest token or name. */
#define META_KEY_MAX (1 + (TALLY_ID_MAX > TALLY_NAME_MAX ? TALLY_ID_MAX \
                                                         : TALLY_NAME_MAX))

static int add_overflows(int64_t a, int64_t b)
{
	return (b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b);
}

/* Wrapping add for merge operands: a batch's net delta can exceed int64
 * even when every intermediate value fits (from -2^63+1 to 2^63-1), and the
 * merge operator sums with the same wrap, so the stored result is exact. */
static int64_t wrap_add(int64_t a, int64_t b)
{
	return (int64_t)((uint64_t)a + (uint64_t)b);
}

/* An op's keys, encoded and hashed once for every lookup of its block:
 * the value's (a named counter's key, or the object's) and, for a unique
 * event, the membership's. The same key was hashed a dozen times over,
 * some 5% of an INCR's instructions. */
typedef struct opkey {
	const uint8_t *key;            /* NULL: the op reads no value */
	size_t len;
	uint64_t h;                    /* hash_bytes(key, len) */
	uint8_t okey[KEY_OBJ_LEN];     /* events: key points here */
	/* Unique events only: */
	uint8_t mkey[KEY_MEMBER_LEN];
	uint64_t mh;                   /* hash_bytes(mkey, KEY_MEMBER_LEN) */
} opkey;

/* Fill o, a batch's new entry for a value of cf, from the committer's
 * cache or the tables in memory; 0 when neither holds it (then only the
 * store can say). */
static int val_from_memory(rocks *r, int cf, const opkey *k, rocks_ov *o)
{
	hmap *cache = cf == CF_NAMED ? r->cache_named : r->cache_totals;
	const rocks_val *c = hmap_get_h(cache, k->key, k->len, k->h);
	rocks_val d;

	if (c != NULL) {
		o->val.v = c->v;
		o->val.exists = c->exists;
		o->cached = 1;
		return 1;
	}
	if (rocks_dirty_load(r, cf, k->key, k->len, k->h, &d, &o->home)) {
		o->val.v = d.v;
		o->val.exists = d.exists;
		return 1;
	}
	return 0;
}

/* The batch's slot for a value of cf (CF_NAMED or CF_TOTALS), loaded from
 * the cache or the store on first touch (most of a block's first touches
 * were loaded together before, by values_preload()). With overwrite (SET,
 * DEL), a stored value that is corrupt is taken as existing with value 0:
 * the op writes over it, which is how such a counter is mended. */
static int val_slot(rocks *r, int cf, const opkey *k, int overwrite,
                    rocks_val **out)
{
	hmap *ov = cf == CF_NAMED ? r->ov_named : r->ov_totals;
	int inserted;
	rocks_ov *o = hmap_put_h(ov, k->key, k->len, k->h, &inserted);
	rocks_val *v;

	if (o == NULL)
		return TALLY_ENOMEM;
	v = &o->val;
	if (inserted && !val_from_memory(r, cf, k, o)) {
		int rc = rocks_get_i64(r, cf, k->key, k->len, &v->v);

		if (rc == TALLY_ECORRUPT && overwrite) {
			v->v = 0;
			rc = TALLY_OK;
		}
		if (rc != TALLY_OK && rc != TALLY_ENOTFOUND) {
			hmap_del_h(ov, k->key, k->len, k->h);
			return rc;
		}
		v->exists = rc == TALLY_OK;
	}
	assert(v->exists || v->v == 0);
	*out = v;
	return TALLY_OK;
}

static int member_slot(rocks *r, const opkey *k, rocks_mem **out)
{
	int inserted;
	rocks_mem *m = hmap_put_h(r->ov_members, k->mkey, KEY_MEMBER_LEN,
	                          k->mh, &inserted);

	if (m == NULL)
		return TALLY_ENOMEM;
	if (inserted && !rocks_events_member(r, k->mkey, k->mh, m)) {
		int rc = rocks_get_i64(r, CF_MEMBERS, k->mkey, KEY_MEMBER_LEN,
		                       &m->at_ms);

		if (rc != TALLY_OK && rc != TALLY_ENOTFOUND) {
			hmap_del_h(r->ov_members, k->mkey, KEY_MEMBER_LEN,
			           k->mh);
			return rc;
		}
		m->in = rc == TALLY_OK;
	}
	*out = m;
	return TALLY_OK;
}

static int apply_counter(rocks *r, store_op *op, const opkey *k)
{
	rocks_val *v;
	int rc = val_slot(r, CF_NAMED, k, op->kind != STORE_OP_INCRBY, &v);

	if (rc != TALLY_OK)
		return rc;
	switch (op->kind) {
	case STORE_OP_INCRBY:
		if (add_overflows(v->v, op->value)) {
			op->err = TALLY_EOVERFLOW;
			return TALLY_OK;
		}
		/* A counter created here is written whole: a merge onto
		 * nothing would be right too, but INCRBY 0 must create it. */
		if (!v->exists) {
			v->put = 1;
			r->counters_delta++;
		}
		v->v += op->value;
		v->acc = wrap_add(v->acc, op->value);
		v->exists = 1;
		op->result = v->v;
		break;
	case STORE_OP_SET:
		r->counters_delta += !v->exists;
		v->v = op->value;
		v->exists = 1;
		v->put = 1;
		op->result = v->v;
		break;
	case STORE_OP_DEL:
		op->result = v->exists;
		r->counters_delta -= v->exists;
		v->v = 0;
		v->exists = 0;
		v->put = 1;
		break;
	default:
		assert(0 && "not a counter op");
	}
	return TALLY_OK;
}

/* Log the event: into this batch's record, and into the events held in
 * memory once the batch is written (rocks_journal_commit()). */
static int put_event(rocks *r, const store_op *op, int64_t d, int64_t total,
                     int unique)
{
	rocks_ev ev;

	memset(&ev, 0, sizeof ev);
	ev.obj = op->obj;
	ev.seq = ++r->seq;
	ev.member = op->member;
	ev.at_ms = op->at_ms;
	ev.d = d;
	ev.total = total;
	ev.unique = (uint8_t)unique;
	if (rocks_ev_push(&r->bev, &r->bev_n, &r->bev_cap, &ev))
		return TALLY_ENOMEM;
	return rocks_journal_event(r, &ev);
}

static int apply_event(rocks *r, store_op *op, const opkey *k)
{
	rocks_mem *m = NULL;
	rocks_val *tv;
	int64_t d;
	int rc;

	assert(op->mode == TALLY_MODE_UNIQUE || op->mode == TALLY_MODE_TOTAL);
	assert(op->delta > 0);
	rc = val_slot(r, CF_TOTALS, k, 0, &tv);
	if (rc != TALLY_OK)
		return rc;
	if (op->mode == TALLY_MODE_UNIQUE) {
		rc = member_slot(r, k, &m);
		if (rc != TALLY_OK)
			return rc;
		if (m->in == !op->remove) { /* like twice, unlike a non-member */
			op->result = tv->v;
			return TALLY_OK;
		}
		d = op->remove ? -1 : 1;
	} else {
		d = op->remove ? -op->delta : op->delta;
	}
	if (add_overflows(tv->v, d)) {
		op->err = TALLY_EOVERFLOW;
		return TALLY_OK;
	}
	if (m != NULL) {
		m->in = !op->remove;
		m->at_ms = op->at_ms;
	}
	tv->v += d;
	tv->acc = wrap_add(tv->acc, d);
	tv->exists = 1;
	op->result = tv->v;
	return put_event(r, op, d, tv->v, m != NULL);
}

static size_t meta_key(uint8_t *buf, uint8_t tag, const uint8_t *s,
                       size_t len)
{
	assert(len + 1 <= META_KEY_MAX);
	buf[0] = tag;
	memcpy(buf + 1, s, len);
	return len + 1;
}

static void apply_meta(rocks *r, const store_op *op)
{
	uint8_t key[META_KEY_MAX], val[3];
	size_t klen;

	switch (op->kind) {
	case STORE_OP_TYPE:
		r->wb_ordered = 1;
		klen = meta_key(key, META_TYPE, op->key, op->key_len);
		be16_put(val, op->obj.ktype);
		val[2] = op->mode;
		rocksdb_writebatch_put_cf(r->wb, r->cf[CF_META], (char *)key,
		                          klen, (char *)val, 3);
		break;
	case STORE_OP_CTYPE:
		r->wb_ordered = 1;
		klen = meta_key(key, META_CTYPE, op->key, op->key_len);
		be16_put(val, op->obj.ctype);
		rocksdb_writebatch_put_cf(r->wb, r->cf[CF_META], (char *)key,
		                          klen, (char *)val, 2);
		break;
	case STORE_OP_TOKEN_DEL:
		klen = meta_key(key, META_TOKEN, op->token, op->token_len);
		rocksdb_writebatch_delete_cf(r->wb, r->cf[CF_META], (char *)key,
		                             klen);
		break;
	default:
		assert(0 && "not a meta op");
	}
}

static void put_token(rocks *r, const store_op *op)
{
	uint8_t key[META_KEY_MAX], val[2 * VARINT_MAX];
	size_t klen = meta_key(key, META_TOKEN, op->token, op->token_len);
	size_t n = varint_put_i64(val, op->token_mark ? op->token_result
	                                              : op->result);

	n += varint_put_i64(val + n, op->token_expiry_ms);
	rocksdb_writebatch_put_cf(r->wb, r->cf[CF_META], (char *)key, klen,
	                          (char *)val, n);
	/* Kept in order with the journal records before it, even when the
	 * write changed nothing (a like again, say): its stored answer may
	 * rest on an earlier batch, and a retry is answered from it. */
	r->wb_ordered = 1;
}

static int apply_op(rocks *r, store_op *op, const opkey *k)
{
	int rc = TALLY_OK;

	op->err = TALLY_OK;
	switch (op->kind) {
	case STORE_OP_INCRBY:
	case STORE_OP_SET:
	case STORE_OP_DEL:
		rc = apply_counter(r, op, k);
		break;
	case STORE_OP_EVENT:
		rc = apply_event(r, op, k);
		break;
	case STORE_OP_TYPE:
	case STORE_OP_CTYPE:
	case STORE_OP_TOKEN_DEL:
		apply_meta(r, op);
		break;
	default:
		return TALLY_EINVAL;
	}
	/* A stored value that does not decode (or that RocksDB finds
	 * corrupt) fails the writes that read it, not the batch: the others
	 * go in, as on the redis-cluster store. val_slot() and
	 * member_slot() read before anything changes. */
	if (rc == TALLY_ECORRUPT) {
		op->err = rc;
		rc = TALLY_OK;
	}
	/* A write's token is stored with it; a purge's names what it deletes
	 * (stored again here, it was never deleted: every token ever used
	 * stayed in META). */
	if (rc == TALLY_OK && (op->err == TALLY_OK || op->token_mark) &&
	    op->token != NULL && op->kind != STORE_OP_TOKEN_DEL)
		put_token(r, op);
	return rc;
}

/* Journal ov's changed values; *n and *len_max: how many, and their
 * longest key (what the commit may add to the dirty table). */
static int journal_vals(rocks *r, int cf, hmap *ov, size_t *n,
                        size_t *len_max)
{
	size_t pos = 0, len;
	const void *key;
	void *val;
	int rc = TALLY_OK;

	*n = *len_max = 0;
	while (rc == TALLY_OK && hmap_next(ov, &pos, &key, &len, &val)) {
		const rocks_ov *o = val;

		if (!rocks_val_changed(&o->val))
			continue;
		rc = rocks_journal_add(r, cf, key, len, &o->val);
		(*n)++;
		if (len > *len_max)
			*len_max = len;
	}
	return rc;
}

/* Add the changed counters and totals to the batch's journal record, with
 * the number of named counters when it changed (the events are in it
 * already; rocks_journal_write() writes it). */
static int overlays_flush(rocks *r)
{
	size_t n[2], len[2];
	int rc = journal_vals(r, CF_NAMED, r->ov_named, &n[0], &len[0]);

	if (rc == TALLY_OK)
		rc = journal_vals(r, CF_TOTALS, r->ov_totals, &n[1], &len[1]);
	/* Before the record is written: room for what its commit puts in
	 * memory, which must not fail once it is written. */
	if (rc == TALLY_OK)
		rc = rocks_journal_reserve(r, n, len);
	if (rc == TALLY_OK && r->counters_delta != 0) {
		/* Only a created or deleted named counter changes the
		 * number, and that counter is in the record. */
		assert(r->jlen > 0);
		rc = rocks_journal_counters(r, r->counters +
		                               (uint64_t)r->counters_delta);
	}
	return rc;
}

/* The batch is durable: the values it read but did not change become the
 * committer's cache (those it changed are in the dirty tables now). The
 * cache is bounded by dropping it whole when full; a miss costs one store
 * read. */
static void overlays_commit(rocks *r, hmap *ov, hmap *cache)
{
	size_t pos = 0, len;
	const void *key;
	void *val;
	uint64_t h;

	if (hmap_count(cache) + hmap_count(ov) > r->cache_max)
		hmap_clear(cache);
	while (hmap_next_h(ov, &pos, &key, &len, &val, &h)) {
		const rocks_val *v = &((const rocks_ov *)val)->val;
		rocks_val *c;

		if (rocks_val_changed(v))
			continue;
		c = hmap_put_h(cache, key, len, h, NULL);

		if (c == NULL) { /* out of memory: forget rather than lie */
			hmap_del_h(cache, key, len, h);
			continue;
		}
		c->v = v->v;
		c->exists = v->exists;
		c->acc = 0;
		c->put = 0;
	}
	hmap_clear(ov);
}

static void batch_reset(rocks *r)
{
	hmap_clear(r->ov_named);
	hmap_clear(r->ov_totals);
	hmap_clear(r->ov_members);
	r->bev_n = 0;
	rocksdb_writebatch_clear(r->wb);
	r->wb_ordered = 0;
	rocks_journal_discard(r);
}

static int batch_write(rocks *r, int sync)
{
	uint64_t t0 = rocks_now_ns();
	char *err = NULL;
	int rc;

	/* Async journal file records before this batch's record reach the
	 * disk first (as rocks_jfile_append() orders the other way): after a
	 * machine crash, the records that survive are a prefix of those
	 * written. (A batch without a record or a token put, tokens purged,
	 * needs no order.) */
	if (!sync && r->wb_ordered && (rc = rocks_jfile_sync(r)) != TALLY_OK) {
		r->failed = rc;
		return rc;
	}
	rocksdb_write(r->db, sync ? r->wo_sync : r->wo_nosync, r->wb, &err);
	if (err) {
		/* The write may or may not have reached the WAL; nothing can
		 * be acknowledged and nothing may be written on top of it. */
		r->failed = rocks_logs_fail(r, rocks_write_err(err));
		return r->failed;
	}
	if (sync) {
		rocks_sync_count(r, rocks_now_ns() - t0);
		r->wal_unsynced = 0; /* a synced write syncs the WAL before it */
	} else if (r->wb_ordered) {
		r->wal_unsynced = 1;
	}
	return TALLY_OK;
}

/* Most of a batch's time in memory is its lookups of the values it
 * changes in the dirty tables, a cache miss or two each (30% of the
 * committer's samples under random INCR, measured): start them all before
 * the first is needed, slots first, then the entries those slots point
 * to. */
static void ops_prefetch(rocks *r, const store_op *ops, const opkey *keys,
                         size_t n)
{
	for (int deep = 0; deep < 2; deep++) {
		for (size_t i = 0; i < n; i++) {
			const store_op *op = &ops[i];
			const opkey *k = &keys[i];

			if (op->skip || k->key == NULL)
				continue;
			rocks_dirty_prefetch(r, op->kind == STORE_OP_EVENT ?
			                     CF_TOTALS : CF_NAMED, k->key,
			                     k->len, deep);
			if (op->kind == STORE_OP_EVENT &&
			    op->mode == TALLY_MODE_UNIQUE)
				rocks_events_member_prefetch(r, k->mkey, deep);
		}
	}
}

/* Encode and hash the keys of a block's ops: key NULL for an op that
 * reads no value (meta ops, skipped ones). */
static void ops_keys(const store_op *ops, opkey *keys, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const store_op *op = &ops[i];
		opkey *k = &keys[i];

		k->key = NULL;
		if (op->skip)
			continue;
		switch (op->kind) {
		case STORE_OP_INCRBY:
		case STORE_OP_SET:
		case STORE_OP_DEL:
			k->key = op->key;
			k->len = op->key_len;
			break;
		case STORE_OP_EVENT:
			key_obj_encode(k->okey, &op->obj);
			k->key = k->okey;
			k->len = KEY_OBJ_LEN;
			if (op->mode == TALLY_MODE_UNIQUE) {
				key_member_encode(k->mkey, &op->obj,
				                  op->member);
				k->mh = hash_bytes(k->mkey, KEY_MEMBER_LEN);
			}
			break;
		default:
			continue;
		}
		/* A key past the maps' bound is never in them (and its op
		 * fails on it): any hash will do. */
		k->h = k->len <= HMAP_KEY_MAX ? hash_bytes(k->key, k->len) : 0;
	}
}

/* Keys of one batched RocksDB read of cf, each with the entry of the
 * batch's overlay ov its value goes to. */
typedef struct preload {
	int cf;
	hmap *ov;
	const char *kp[ROCKS_BLOCK];
	size_t ks[ROCKS_BLOCK];
	void *slot[ROCKS_BLOCK];
	size_t n;
} preload;

static void preload_add(preload *p, const void *key, size_t len, void *slot)
{
	assert(p->n < ROCKS_BLOCK);
	p->kp[p->n] = key;
	p->ks[p->n] = len;
	p->slot[p->n++] = slot;
}

/* RocksDB's bytewise order: by the common bytes, then the shorter first. */
static int key_cmp(const char *a, size_t al, const char *b, size_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);

	return c != 0 ? c : (al > bl) - (al < bl);
}

/* Order p's keys as their table does, with their slots: a MultiGet told
 * its keys are sorted skips its own sort, which compared them through
 * RocksDB's comparator objects and cost more than the lookups of the keys
 * in its memtables (under random likes, about 1,000 instructions per
 * key). An insertion sort that finds each place by halving, so that
 * ROCKS_BLOCK random keys take some 6 compares each, not 16. */
static void preload_sort(preload *p)
{
	for (size_t i = 1; i < p->n; i++) {
		const char *k = p->kp[i];
		size_t kl = p->ks[i];
		void *sl = p->slot[i];
		size_t lo = 0, hi = i;

		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;

			if (key_cmp(p->kp[mid], p->ks[mid], k, kl) > 0)
				hi = mid;
			else
				lo = mid + 1;
		}
		memmove(&p->kp[lo + 1], &p->kp[lo], (i - lo) * sizeof p->kp[0]);
		memmove(&p->ks[lo + 1], &p->ks[lo], (i - lo) * sizeof p->ks[0]);
		memmove(&p->slot[lo + 1], &p->slot[lo],
		        (i - lo) * sizeof p->slot[0]);
		p->kp[lo] = k;
		p->ks[lo] = kl;
		p->slot[lo] = sl;
	}
#ifndef NDEBUG
	for (size_t i = 1; i < p->n; i++)
		assert(key_cmp(p->kp[i - 1], p->ks[i - 1], p->kp[i],
		               p->ks[i]) < 0);
#endif
}

/* Read p's keys in one batched RocksDB read and hand each result to
 * fill(slot, value, vlen): value NULL for a key not there; nonzero back
 * when the value does not decode. Such a key, and one whose read failed,
 * loses its overlay entry instead: the op's own lookup reads it again,
 * and reports. */
static void preload_read(rocks *r, preload *p,
                         int (*fill)(void *slot, const char *v, size_t vlen))
{
	rocksdb_pinnableslice_t *vals[ROCKS_BLOCK];
	char *errs[ROCKS_BLOCK];

	if (p->n == 0)
		return;
	preload_sort(p);
	rocksdb_batched_multi_get_cf(r->db, r->ro, r->cf[p->cf], p->n, p->kp,
	                             p->ks, vals, errs, 1);
	for (size_t i = 0; i < p->n; i++) {
		size_t vlen = 0;
		const char *v = vals[i] ? rocksdb_pinnableslice_value(vals[i],
		                                                      &vlen)
		                        : NULL;

		if (errs[i] != NULL || fill(p->slot[i], v, vlen))
			hmap_del(p->ov, p->kp[i], p->ks[i]);
		rocksdb_free(errs[i]);
		rocksdb_pinnableslice_destroy(vals[i]);
	}
}

static int member_fill(void *slot, const char *v, size_t vlen)
{
	rocks_mem *m = slot;

	m->in = v != NULL;
	m->at_ms = 0;
	return v != NULL &&
	       val_i64_decode((const uint8_t *)v, vlen, &m->at_ms);
}

/* Load, in one batched RocksDB read, the memberships a block of ops will
 * look up that neither this batch nor the events in memory hold: one Get
 * each was a sixth of the committer's CPU under random likes (most
 * members new, so a filter probe per table file, each behind RocksDB's
 * per-call setup). What this cannot load (an error) is left for
 * member_slot() to read again, and report. */
static void members_preload(rocks *r, const store_op *ops,
                            const opkey *keys, size_t n)
{
	preload p = { .cf = CF_MEMBERS, .ov = r->ov_members };

	assert(n <= ROCKS_BLOCK);
	for (size_t i = 0; i < n; i++) {
		const store_op *op = &ops[i];
		const opkey *k = &keys[i];
		rocks_mem *m;
		int inserted;

		if (op->skip || op->kind != STORE_OP_EVENT ||
		    op->mode != TALLY_MODE_UNIQUE)
			continue;
		m = hmap_put_h(r->ov_members, k->mkey, KEY_MEMBER_LEN, k->mh,
		               &inserted);
		if (m == NULL || !inserted)
			continue; /* member_slot() reports the memory */
		if (!rocks_events_member(r, k->mkey, k->mh, m))
			preload_add(&p, k->mkey, KEY_MEMBER_LEN, m);
	}
	preload_read(r, &p, member_fill);
}

static int val_fill(void *slot, const char *v, size_t vlen)
{
	rocks_ov *o = slot;

	o->val.exists = v != NULL;
	o->val.v = 0;
	return v != NULL &&
	       val_i64_decode((const uint8_t *)v, vlen, &o->val.v);
}

/* As members_preload(), for the counters and object totals a block of ops
 * changes that neither the cache nor the tables in memory hold: one Get
 * each was some 2,000 instructions, 30% of all under INCRs of random keys
 * many of which were new (callgrind); a batched read costs about half.
 * A value that does not decode is left for val_slot() too, which knows
 * whether its op writes over it. */
static void values_preload(rocks *r, const store_op *ops,
                           const opkey *keys, size_t n)
{
	preload pl[2] = { { .cf = CF_NAMED, .ov = r->ov_named },
	                  { .cf = CF_TOTALS, .ov = r->ov_totals } };

	assert(n <= ROCKS_BLOCK);
	for (size_t i = 0; i < n; i++) {
		const opkey *k = &keys[i];
		preload *p = &pl[ops[i].kind == STORE_OP_EVENT];
		int inserted;
		rocks_ov *o;

		if (k->key == NULL)
			continue;
		o = hmap_put_h(p->ov, k->key, k->len, k->h, &inserted);
		if (o == NULL || !inserted)
			continue; /* val_slot() reports the memory */
		if (!val_from_memory(r, p->cf, k, o))
			preload_add(p, k->key, k->len, o);
	}
	preload_read(r, &pl[0], val_fill);
	preload_read(r, &pl[1], val_fill);
}

int rocks_failed(rocks *r)
{
	if (r->failed == TALLY_OK)
		r->failed = atomic_load(&r->logs_failed);
	return r->failed;
}

int rocks_apply(store *s, store_batch *b)
{
	rocks *r = (rocks *)s;
	uint64_t seq_start = r->seq;
	opkey keys[ROCKS_BLOCK];
	int rc = TALLY_OK;

	rocks_counters_off();
	assert(b != NULL && (b->n == 0 || b->ops != NULL));
	assert(hmap_count(r->ov_named) == 0 && hmap_count(r->ov_totals) == 0);
	b->unwritten = 1;
	if (rocks_failed(r))
		return r->failed;
	for (size_t i = 0; i < b->n && rc == TALLY_OK; i++) {
		if (i % ROCKS_BLOCK == 0) {
			size_t k = rocks_block_len(b->n, i);

			ops_keys(&b->ops[i], keys, k);
			ops_prefetch(r, &b->ops[i], keys, k);
			members_preload(r, &b->ops[i], keys, k);
			values_preload(r, &b->ops[i], keys, k);
		}
		if (!b->ops[i].skip)
			rc = apply_op(r, &b->ops[i], &keys[i % ROCKS_BLOCK]);
	}
	if (rc == TALLY_OK && b->token_clock) {
		uint8_t key = META_TOKEN_CLOCK, val[VARINT_MAX];

		rocksdb_writebatch_put_cf(r->wb, r->cf[CF_META], (char *)&key,
		                          1, (char *)val,
		                          varint_put_i64(val, b->token_clock_ms));
	}
	if (rc == TALLY_OK)
		rc = overlays_flush(r);
	if (rc == TALLY_OK) {
		/* From here a failure's outcome may be unknown. */
		b->unwritten = 0;
		rc = rocks_journal_write(r, b->sync);
		/* A failed write's outcome is unknown (as batch_write()). Out
		 * of memory comes before anything is written: this batch
		 * fails alone, and the store serves on. */
		if (rc != TALLY_OK && rc != TALLY_ENOMEM)
			r->failed = rc;
	}
	if (rc == TALLY_OK) {
		size_t entries = (size_t)rocksdb_writebatch_count(r->wb);

		if (entries > 0)
			rc = batch_write(r, b->sync);
		if (rc == TALLY_OK)
			atomic_fetch_add(&r->st_entries, entries);
	}
	if (rc != TALLY_OK) {
		r->seq = seq_start;
		r->counters_delta = 0;
		batch_reset(r);
		return rc;
	}
	r->counters += (uint64_t)r->counters_delta;
	r->counters_delta = 0;
	atomic_store(&r->st_counters, r->counters);
	rocks_journal_commit(r);
	overlays_commit(r, r->ov_named, r->cache_named);
	overlays_commit(r, r->ov_totals, r->cache_totals);
	batch_reset(r);
	atomic_store(&r->st_seq, r->seq);
	return TALLY_OK;
}

int rocks_logs_fail(rocks *r, int rc)
{
	int none = TALLY_OK;

	assert(rc != TALLY_OK);
	atomic_compare_exchange_strong(&r->logs_failed, &none, rc);
	return rc;
}

int rocks_wal_sync(rocks *r)
{
	char *err = NULL;
	int rc = atomic_load(&r->logs_failed);

	if (rc != TALLY_OK)
		return rc;
	rocksdb_flush_wal(r->db, 1, &err);
	return err ? rocks_logs_fail(r, rocks_write_err(err)) : TALLY_OK;
}

int rocks_sync_logs(rocks *r)
{
	uint64_t t0 = rocks_now_ns();
	int rc;

	/* Under jf.mu, as in order_before(): the committer's sync and
	 * tally_compact()'s spill never both sync the WAL, the second
	 * after the first failed. */
	pthread_mutex_lock(&r->jf.mu);
	rc = rocks_wal_sync(r);
	pthread_mutex_unlock(&r->jf.mu);
	if (rc == TALLY_OK)
		rc = rocks_jfile_sync(r);
	if (rc == TALLY_OK)
		rocks_sync_count(r, rocks_now_ns() - t0);
	else
		(void)rocks_logs_fail(r, rc);
	return rc;
}

int rocks_sync(store *s)
{
	rocks *r = (rocks *)s;

	if (rocks_failed(r))
		return r->failed;
	/* Never retried: after a failed fsync the kernel may have dropped
	 * the pages it could not write, so a second fsync that succeeds
	 * proves nothing. */
	r->failed = rocks_sync_logs(r);
	if (r->failed)
		return r->failed;
	r->wal_unsynced = 0;
	return TALLY_OK;
}
