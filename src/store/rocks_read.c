/* rocks_read.c: the RocksDB store's queries. They run on callers' threads,
 * concurrently with the committer; every write batch is atomic, so a read
 * sees a batch whole or not at all. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "core/varint.h"
#include "store/rocks_int.h"

int rocks_get_i64(rocks *r, int cf, const uint8_t *key, size_t len,
                  int64_t *out)
{
	char *err = NULL;
	size_t vlen = 0;
	char *val = rocksdb_get_cf(r->db, r->ro, r->cf[cf], (const char *)key,
	                           len, &vlen, &err);
	int rc = TALLY_OK;

	*out = 0;
	if (err)
		return rocks_err(err);
	if (val == NULL)
		return TALLY_ENOTFOUND;
	if (val_i64_decode((const uint8_t *)val, vlen, out))
		rc = TALLY_ECORRUPT;
	rocksdb_free(val);
	return rc;
}

int rocks_token_decode(const uint8_t *v, size_t vlen, int64_t *result,
                       int64_t *expiry_ms)
{
	size_t u1, u2;

	if (varint_get_i64(v, vlen, result, &u1) ||
	    varint_get_i64(v + u1, vlen - u1, expiry_ms, &u2) ||
	    u1 + u2 != vlen)
		return -1;
	return 0;
}

int rocks_token_get(store *s, const uint8_t *tok, size_t len, int64_t *result,
                    int64_t *expiry_ms)
{
	rocks *r = (rocks *)s;
	uint8_t key[1 + TALLY_ID_MAX];
	char *err = NULL, *val;
	size_t vlen = 0;
	int rc = TALLY_OK;

	assert(len > 0 && len <= TALLY_ID_MAX);
	rocks_counters_off();
	key[0] = META_TOKEN;
	memcpy(key + 1, tok, len);
	val = rocksdb_get_cf(r->db, r->ro, r->cf[CF_META], (const char *)key,
	                     len + 1, &vlen, &err);
	if (err)
		return rocks_err(err);
	if (val == NULL)
		return TALLY_ENOTFOUND;
	if (rocks_token_decode((const uint8_t *)val, vlen, result, expiry_ms))
		rc = TALLY_ECORRUPT;
	rocksdb_free(val);
	return rc;
}

int rocks_tokens_sweep(store *s, int64_t now_ms, size_t max, size_t *deleted,
                       int *wrapped)
{
	rocks *r = (rocks *)s;
	rocksdb_iterator_t *it;
	rocksdb_writebatch_t *wb;
	uint8_t first = META_TOKEN;
	char *err = NULL;
	size_t seen = 0;
	int rc = TALLY_OK;

	*wrapped = 0;
	*deleted = 0;
	if (r->failed)
		return r->failed;
	rocks_counters_off();
	it = rocksdb_create_iterator_cf(r->db, r->ro, r->cf[CF_META]);
	wb = rocksdb_writebatch_create();
	if (it == NULL || wb == NULL) {
		if (it != NULL)
			rocksdb_iter_destroy(it);
		if (wb != NULL)
			rocksdb_writebatch_destroy(wb);
		return TALLY_ENOMEM;
	}
	if (r->sweep_len > 0)
		rocksdb_iter_seek(it, (const char *)r->sweep_key, r->sweep_len);
	else
		rocksdb_iter_seek(it, (const char *)&first, 1);
	for (; seen < max && rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
		size_t klen, vlen;
		const char *k = rocksdb_iter_key(it, &klen);
		const uint8_t *v =
			(const uint8_t *)rocksdb_iter_value(it, &vlen);
		int64_t result, expiry;

		if (klen < 2 || k[0] != META_TOKEN)
			break;
		/* The open refuses a longer one; a key written since is
		 * damage, and would not fit where the sweep goes on from. */
		if (klen + 1 > sizeof r->sweep_key) {
			rc = TALLY_ECORRUPT;
			break;
		}
		seen++;
		if (rocks_token_decode(v, vlen, &result, &expiry)) {
			rc = TALLY_ECORRUPT;
			break;
		}
		if (expiry <= now_ms)
			rocksdb_writebatch_delete_cf(wb, r->cf[CF_META], k, klen);
		/* Next time from the key after this one. */
		memcpy(r->sweep_key, k, klen);
		r->sweep_key[klen] = 0;
		r->sweep_len = klen + 1;
	}
	if (rc == TALLY_OK && seen < max) {
		/* Past the last token: the next call starts from the first. */
		rocksdb_iter_get_error(it, &err);
		if (err == NULL) {
			*wrapped = 1;
			r->sweep_len = 0;
		}
	}
	rocksdb_iter_destroy(it);
	if (err != NULL) {
		rc = rocks_err(err);
	} else if (rc == TALLY_OK && rocksdb_writebatch_count(wb) > 0) {
		/* Unsynced: a delete lost in a crash leaves an expired token,
		 * which answers nothing and the next sweep deletes. */
		rocksdb_write(r->db, r->wo_nosync, wb, &err);
		if (err != NULL) /* as batch_write(): nothing on top of it */
			rc = r->failed = rocks_logs_fail(r,
			                                 rocks_write_err(err));
		else
			*deleted = (size_t)rocksdb_writebatch_count(wb);
	}
	rocksdb_writebatch_destroy(wb);
	return rc;
}

/* A counter or total: the dirty tables first, then its column family. The
 * read lock is held across both, so a checkpoint cannot move the value
 * from one to the other in between. */
static int get_val(rocks *r, int cf, const uint8_t *key, size_t len,
                   int64_t *out)
{
	rocks_val d;
	int rc;

	rocks_dirty_rdlock(r);
	if (len <= HMAP_KEY_MAX &&
	    rocks_dirty_find(r, cf, key, len, hash_bytes(key, len), &d)) {
		*out = d.v;
		rc = d.exists ? TALLY_OK : TALLY_ENOTFOUND;
	} else {
		rc = rocks_get_i64(r, cf, key, len, out);
	}
	rocks_dirty_unlock(r);
	return rc;
}

int rocks_get(store *s, const uint8_t *key, size_t len, int64_t *out)
{
	rocks_counters_off();
	return get_val((rocks *)s, CF_NAMED, key, len, out);
}

int rocks_total(store *s, const key_obj *o, int mode, int64_t *out)
{
	uint8_t key[KEY_OBJ_LEN];
	int rc;

	(void)mode; /* both modes' counts are the totals table's */
	rocks_counters_off();
	key_obj_encode(key, o);
	rc = get_val((rocks *)s, CF_TOTALS, key, sizeof key, out);
	return rc == TALLY_ENOTFOUND ? TALLY_OK : rc;
}

/* Up to this many values per RocksDB multi-get call, so the arrays live
 * on the stack. */
#define MULTI_CHUNK 64

/* n values of cf (CF_NAMED or CF_TOTALS): out[i] the value, 0 when absent;
 * found[i] (unless found is NULL) whether it exists. The dirty tables
 * first, then one multi-get for the rest, under the read lock throughout
 * (see get_val()). */
static int multi_chunk(rocks *r, int cf, const uint8_t *const *keys,
                       const size_t *lens, size_t n, int64_t *out,
                       int *found)
{
	const char *kp[MULTI_CHUNK];
	size_t klen[MULTI_CHUNK], vlen[MULTI_CHUNK];
	const rocksdb_column_family_handle_t *cfs[MULTI_CHUNK];
	char *vals[MULTI_CHUNK], *errs[MULTI_CHUNK];
	size_t idx[MULTI_CHUNK], m = 0;
	uint64_t h[MULTI_CHUNK];
	int rc = TALLY_OK;

	assert(n <= MULTI_CHUNK);
	for (size_t i = 0; i < n; i++) /* no map holds a longer key */
		h[i] = lens[i] <= HMAP_KEY_MAX ? hash_bytes(keys[i], lens[i])
		                               : 0;
	rocks_dirty_rdlock(r);
	/* Each lookup below is a cache miss or two in each of the dirty
	 * tables, taken one after another: start them all first (slots,
	 * then the entries they point to), as the committer does. */
	for (int deep = 0; deep < 2; deep++)
		for (size_t i = 0; i < n; i++)
			rocks_dirty_prefetch(r, cf, keys[i], lens[i], deep);
	for (size_t i = 0; i < n; i++) {
		rocks_val d;

		if (lens[i] <= HMAP_KEY_MAX &&
		    rocks_dirty_find(r, cf, keys[i], lens[i], h[i], &d)) {
			out[i] = d.exists ? d.v : 0;
			if (found != NULL)
				found[i] = d.exists;
			continue;
		}
		kp[m] = (const char *)keys[i];
		klen[m] = lens[i];
		cfs[m] = r->cf[cf];
		idx[m++] = i;
	}
	if (m > 0)
		rocksdb_multi_get_cf(r->db, r->ro, cfs, m, kp, klen, vals, vlen,
		                     errs);
	rocks_dirty_unlock(r);
	for (size_t j = 0; j < m; j++) {
		size_t i = idx[j];

		out[i] = 0;
		if (found != NULL)
			found[i] = 0;
		if (errs[j]) {
			rc = rocks_err(errs[j]);
		} else if (vals[j]) {
			if (val_i64_decode((uint8_t *)vals[j], vlen[j],
			                   &out[i]))
				rc = TALLY_ECORRUPT;
			else if (found != NULL)
				found[i] = 1;
		}
		if (vals[j])
			rocksdb_free(vals[j]);
	}
	return rc;
}

int rocks_mtotal(store *s, const key_obj *objs, const uint8_t *modes,
                 size_t n, int64_t *out)
{
	uint8_t keys[MULTI_CHUNK][KEY_OBJ_LEN];
	const uint8_t *kp[MULTI_CHUNK];
	size_t lens[MULTI_CHUNK];

	(void)modes; /* both modes' counts are the totals table's */
	rocks_counters_off();
	for (size_t i = 0; i < n; i += MULTI_CHUNK) {
		size_t k = n - i < MULTI_CHUNK ? n - i : MULTI_CHUNK;
		int rc;

		for (size_t j = 0; j < k; j++) {
			key_obj_encode(keys[j], &objs[i + j]);
			kp[j] = keys[j];
			lens[j] = KEY_OBJ_LEN;
		}
		rc = multi_chunk((rocks *)s, CF_TOTALS, kp, lens, k, out + i,
		                 NULL);
		if (rc != TALLY_OK)
			return rc;
	}
	return TALLY_OK;
}

int rocks_mget(store *s, const uint8_t *const *keys, const size_t *lens,
               size_t n, int64_t *out, int *found)
{
	rocks_counters_off();
	for (size_t i = 0; i < n; i += MULTI_CHUNK) {
		size_t k = n - i < MULTI_CHUNK ? n - i : MULTI_CHUNK;
		int rc = multi_chunk((rocks *)s, CF_NAMED, keys + i, lens + i,
		                     k, out + i, found ? found + i : NULL);

		if (rc != TALLY_OK)
			return rc;
	}
	return TALLY_OK;
}

int rocks_has(store *s, const key_obj *o, uint64_t member, int64_t *at_ms)
{
	uint8_t key[KEY_MEMBER_LEN];
	int64_t at;
	int rc;

	rocks_mem m;
	rocks *r = (rocks *)s;

	rocks_counters_off();
	key_member_encode(key, o, member);
	/* Held across the column family's read: a checkpoint cannot move
	 * the membership from memory to the table in between. */
	rocks_dirty_rdlock(r);
	if (rocks_events_member(r, key, hash_bytes(key, sizeof key), &m)) {
		rc = m.in ? TALLY_OK : TALLY_ENOTFOUND;
		at = m.at_ms;
	} else {
		rc = rocks_get_i64(r, CF_MEMBERS, key, sizeof key, &at);
	}
	rocks_dirty_unlock(r);
	/* The membership's value is its time: one no write gives is
	 * damage. */
	if (rc == TALLY_OK && !ev_time_ok(at))
		rc = TALLY_ECORRUPT;
	if (rc == TALLY_OK && at_ms != NULL)
		*at_ms = at;
	return rc;
}

/* ---- scans -------------------------------------------------------------- */

/* An iterator over keys starting with prefix, positioned at seek. The upper
 * bound (prefix + 1) lets RocksDB stop at the prefix's end. */
typedef struct scan {
	rocksdb_iterator_t *it;
	rocksdb_readoptions_t *ro;
	ev_clock clk;        /* taken after the iterator: every chunk it
	                        sees had its samples before it was written */
	uint8_t upper[KEY_LOG_LEN];
} scan;

static int scan_open(rocks *r, int cf, scan *sc, const uint8_t *prefix,
                     size_t plen, const uint8_t *seek, size_t slen)
{
	size_t ulen = plen;

	assert(plen <= sizeof sc->upper && plen > 0);
	memcpy(sc->upper, prefix, plen);
	/* prefix + 1 as a big number; an all-0xff prefix has no bound. */
	while (ulen > 0 && sc->upper[ulen - 1] == 0xff)
		ulen--;
	if (ulen > 0)
		sc->upper[ulen - 1]++;
	sc->ro = rocksdb_readoptions_create();
	if (sc->ro == NULL)
		return TALLY_ENOMEM;
	if (ulen > 0)
		rocksdb_readoptions_set_iterate_upper_bound(
			sc->ro, (const char *)sc->upper, ulen);
	sc->it = rocksdb_create_iterator_cf(r->db, sc->ro, r->cf[cf]);
	if (sc->it == NULL) {
		rocksdb_readoptions_destroy(sc->ro);
		return TALLY_ENOMEM;
	}
	rocks_clock_get(r, &sc->clk);
	rocksdb_iter_seek(sc->it, (const char *)seek, slen);
	return TALLY_OK;
}

/* Close the scan; returns rc, or the iterator's error if it had one. */
static int scan_close(scan *sc, int rc)
{
	char *err = NULL;

	rocksdb_iter_get_error(sc->it, &err);
	rocksdb_iter_destroy(sc->it);
	rocksdb_readoptions_destroy(sc->ro);
	if (err)
		return rocks_err(err);
	return rc;
}

/* One entry's events, newest first: a chunk's, or a single event. */
typedef struct chunk {
	size_t n;
	uint64_t seq[EV_CHUNK_MAX];
	union {
		val_log log[EV_CHUNK_MAX];
		val_hist hist[EV_CHUNK_MAX];
	};
} chunk;

/* The log entry under the scan's iterator; 0, or -1 if corrupt (its
 * fields included: a reader answers with them). */
static int log_entry_at(const scan *sc, chunk *ck)
{
	size_t klen, vlen;
	const char *k = rocksdb_iter_key(sc->it, &klen);
	const char *v = rocksdb_iter_value(sc->it, &vlen);
	key_obj o;

	if (log_entry_decode((const uint8_t *)k, klen, (const uint8_t *)v,
	                     vlen, &sc->clk, &o, ck->seq, ck->log,
	                     &ck->n) != 0)
		return -1;
	return log_entry_sane(ck->seq, ck->log, ck->n) ? 0 : -1;
}

/* Seek target for "seq < before": seqs are stored inverted, so the first
 * key at or after ~(before - 1) is the newest entry whose oldest event is
 * older than before (a chunk may hold newer ones too: readers skip
 * them). */
static uint64_t seek_seq(uint64_t before)
{
	return before == 0 ? UINT64_MAX : before - 1;
}

/* The events in memory of one object or history (rocks_events_walk()),
 * then, below the lowest of them, the column family's. */
typedef struct walk_ctx {
	uint64_t before;     /* seq bound, 0: none */
	size_t limit, *n;
	tally_entry *recent;
	tally_history_entry *hist;
	uint16_t *ctype_ids;
	int64_t at_ms, *total; /* total_at */
	int found;
} walk_ctx;

/* Where the column family's scan starts: below before, and below the
 * events seen in memory (the table may hold them too, between a
 * checkpoint's write and its reaping). */
static uint64_t scan_before(uint64_t before, uint64_t low)
{
	if (low == UINT64_MAX)
		return before;
	return before == 0 || low < before ? low : before;
}

static int walk_total_at(void *arg, const rocks_ev *ev)
{
	walk_ctx *w = arg;

	if (ev->at_ms > w->at_ms)
		return 0;
	*w->total = ev->total;
	w->found = 1;
	return 1;
}

int rocks_total_at(store *s, const key_obj *o, int64_t at_ms, int64_t *out)
{
	rocks *r = (rocks *)s;
	uint8_t prefix[KEY_OBJ_LEN], seek[KEY_LOG_LEN];
	walk_ctx w = { .at_ms = at_ms, .total = out };
	uint64_t low, bound;
	chunk ck;
	scan sc;
	int rc;

	rocks_counters_off();
	*out = 0;
	key_obj_encode(prefix, o);
	rocks_dirty_rdlock(r);
	low = rocks_events_walk(r, 0, prefix, walk_total_at, &w);
	rocks_dirty_unlock(r);
	if (w.found)
		return TALLY_OK;
	bound = scan_before(0, low);
	key_log_encode(seek, o, seek_seq(bound));
	rc = scan_open(r, CF_LOG, &sc, prefix, sizeof prefix, seek, sizeof seek);
	if (rc != TALLY_OK)
		return rc;
	for (; !w.found && rocksdb_iter_valid(sc.it);
	     rocksdb_iter_next(sc.it)) {
		size_t n;

		if (log_entry_at(&sc, &ck) != 0) {
			rc = TALLY_ECORRUPT;
			break;
		}
		for (n = 0; n < ck.n; n++) {
			if ((bound != 0 && ck.seq[n] >= bound) ||
			    ck.log[n].at_ms > at_ms)
				continue;
			*out = ck.log[n].total;
			w.found = 1;
			break;
		}
	}
	return scan_close(&sc, rc);
}

static int walk_recent(void *arg, const rocks_ev *ev)
{
	walk_ctx *w = arg;

	if ((w->before != 0 && ev->seq >= w->before) || ev->member == 0)
		return 0;
	w->recent[*w->n] = (tally_entry){ ev->member, ev->at_ms, ev->d,
	                                  ev->seq };
	return ++*w->n == w->limit;
}

int rocks_recent(store *s, const key_obj *o, size_t limit, uint64_t before,
                 tally_entry *out, size_t *n)
{
	rocks *r = (rocks *)s;
	uint8_t prefix[KEY_OBJ_LEN], seek[KEY_LOG_LEN];
	scan sc;
	int rc;

	walk_ctx w = { .before = before, .limit = limit, .n = n, .recent = out };
	uint64_t low, bound;
	chunk ck;

	rocks_counters_off();
	*n = 0;
	if (limit == 0)
		return TALLY_OK;
	key_obj_encode(prefix, o);
	rocks_dirty_rdlock(r);
	low = rocks_events_walk(r, 0, prefix, walk_recent, &w);
	rocks_dirty_unlock(r);
	if (*n == limit)
		return TALLY_OK;
	bound = scan_before(before, low);
	key_log_encode(seek, o, seek_seq(bound));
	rc = scan_open(r, CF_LOG, &sc, prefix, sizeof prefix, seek, sizeof seek);
	if (rc != TALLY_OK)
		return rc;
	for (; *n < limit && rocksdb_iter_valid(sc.it);
	     rocksdb_iter_next(sc.it)) {
		if (log_entry_at(&sc, &ck) != 0) {
			rc = TALLY_ECORRUPT;
			break;
		}
		for (size_t i = 0; i < ck.n && *n < limit; i++) {
			const val_log *lv = &ck.log[i];

			if ((bound != 0 && ck.seq[i] >= bound) ||
			    lv->member == 0)
				continue;
			out[(*n)++] = (tally_entry){ lv->member, lv->at_ms,
			                             lv->delta, ck.seq[i] };
		}
	}
	return scan_close(&sc, rc);
}

static int walk_hist(void *arg, const rocks_ev *ev)
{
	walk_ctx *w = arg;
	tally_history_entry *e = &w->hist[*w->n];

	if (w->before != 0 && ev->seq >= w->before)
		return 0;
	memset(e, 0, sizeof *e);
	e->content = ev->obj.content;
	e->at_ms = ev->at_ms;
	e->delta = ev->d;
	e->seq = ev->seq;
	w->ctype_ids[*w->n] = ev->obj.ctype;
	return ++*w->n == w->limit;
}

int rocks_history(store *s, uint64_t member, uint16_t ktype, size_t limit,
                  uint64_t before, tally_history_entry *out,
                  uint16_t *ctype_ids, size_t *n)
{
	rocks *r = (rocks *)s;
	uint8_t prefix[KEY_HIST_PREFIX_LEN], seek[KEY_HIST_LEN];
	scan sc;
	int rc;

	walk_ctx w = { .before = before, .limit = limit, .n = n, .hist = out,
	               .ctype_ids = ctype_ids };
	uint64_t low, bound;
	chunk ck;

	rocks_counters_off();
	*n = 0;
	if (limit == 0)
		return TALLY_OK;
	key_hist_prefix_encode(prefix, member, ktype);
	rocks_dirty_rdlock(r);
	low = rocks_events_walk(r, 1, prefix, walk_hist, &w);
	rocks_dirty_unlock(r);
	if (*n == limit)
		return TALLY_OK;
	bound = scan_before(before, low);
	key_hist_encode(seek, member, ktype, seek_seq(bound));
	rc = scan_open(r, CF_HIST, &sc, prefix, sizeof prefix, seek, sizeof seek);
	if (rc != TALLY_OK)
		return rc;
	for (; *n < limit && rocksdb_iter_valid(sc.it);
	     rocksdb_iter_next(sc.it)) {
		size_t klen, vlen;
		const char *k = rocksdb_iter_key(sc.it, &klen);
		const char *v = rocksdb_iter_value(sc.it, &vlen);
		uint64_t m;
		uint16_t kt;

		if (hist_entry_decode((const uint8_t *)k, klen,
		                      (const uint8_t *)v, vlen, &sc.clk, &m,
		                      &kt, ck.seq, ck.hist, &ck.n) != 0 ||
		    !hist_entry_sane(ck.seq, ck.hist, ck.n)) {
			rc = TALLY_ECORRUPT;
			break;
		}
		assert(m == member && kt == ktype);
		for (size_t i = 0; i < ck.n && *n < limit; i++) {
			const val_hist *hv = &ck.hist[i];

			if (bound != 0 && ck.seq[i] >= bound)
				continue;
			memset(&out[*n], 0, sizeof out[*n]);
			out[*n].content = hv->content;
			out[*n].at_ms = hv->at_ms;
			out[*n].delta = hv->delta;
			out[*n].seq = ck.seq[i];
			ctype_ids[*n] = hv->ctype;
			(*n)++;
		}
	}
	return scan_close(&sc, rc);
}

/* The walk's order of objects: the log's keys, backwards. */
static int walk_before(const key_obj *a, const key_obj *b)
{
	if (a->ctype != b->ctype)
		return a->ctype > b->ctype;
	if (a->ktype != b->ktype)
		return a->ktype > b->ktype;
	return a->content > b->content;
}

/* Events in memory in the walk's order: by object, then oldest first. */
static int mem_cmp(const void *pa, const void *pb)
{
	const rocks_ev *a = pa, *b = pb;

	if (walk_before(&a->obj, &b->obj))
		return -1;
	if (walk_before(&b->obj, &a->obj))
		return 1;
	return a->seq < b->seq ? -1 : a->seq > b->seq;
}

typedef struct mem_walk {
	const rocks_ev *ev;
	size_t n, i;
	int (*fn)(void *arg, const key_obj *o, uint64_t seq, const val_log *v);
	void *arg;
} mem_walk;

/* Hands on the events in memory of the objects the walk visits before o
 * (every one left when o is NULL), and, with own set, those of o itself
 * above seq upto: the tables' events of o are listed up to upto, and a
 * checkpoint covers every event below some seq, so o's events in memory at
 * or below it are in the snapshot already (written, not yet reaped). */
static int mem_until(mem_walk *m, const key_obj *o, int own, uint64_t upto)
{
	int rc = TALLY_OK;

	while (rc == TALLY_OK && m->i < m->n) {
		const rocks_ev *ev = &m->ev[m->i];
		int before = o == NULL || walk_before(&ev->obj, o);
		int same = !before && !walk_before(o, &ev->obj);
		val_log lv = { ev->member, ev->at_ms, ev->d, ev->total };

		if (!before && !(same && own))
			break;
		m->i++;
		if (before || ev->seq > upto)
			rc = m->fn(m->arg, &ev->obj, ev->seq, &lv);
	}
	return rc;
}

/* Backwards over the whole log: keys are object | ~seq, so walking from the
 * end visits each object's events oldest first. A snapshot keeps the walk
 * consistent while the committer writes. The events still in memory join
 * their objects: sorted the walk's way, each object's are handed on after
 * its events in the tables, and objects with none there in their place, so
 * that every object's events come together, in seq order. */
int rocks_scan_log(store *s, int (*fn)(void *arg, const key_obj *o,
                                       uint64_t seq, const val_log *v),
                   void *arg)
{
	rocks *r = (rocks *)s;
	const rocksdb_snapshot_t *snap;
	rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
	rocksdb_iterator_t *it;
	rocks_ev *evs = NULL;
	size_t nev = 0;
	uint64_t last_seq = 0;
	key_obj last_obj;
	mem_walk mem;
	int have_last = 0;
	chunk ck;
	ev_clock clk;
	char *err = NULL;
	int rc;

	rocks_counters_off();
	if (ro == NULL)
		return TALLY_ENOMEM;
	/* Both under the lock: no freeze in between, so every event is in
	 * the copy or the snapshot. */
	rocks_dirty_rdlock(r);
	rc = rocks_events_copy(r, &evs, &nev);
	snap = rc == TALLY_OK ? rocksdb_create_snapshot(r->db) : NULL;
	rocks_dirty_unlock(r);
	if (snap == NULL) {
		free(evs);
		rocksdb_readoptions_destroy(ro);
		return TALLY_ENOMEM;
	}
	if (nev > 1)
		qsort(evs, nev, sizeof *evs, mem_cmp);
	mem = (mem_walk){ evs, nev, 0, fn, arg };
	rocksdb_readoptions_set_snapshot(ro, snap);
	rocksdb_readoptions_set_fill_cache(ro, 0);
	/* The log's table has a prefix extractor: a walk across objects
	 * must ask for total order. */
	rocksdb_readoptions_set_total_order_seek(ro, 1);
	it = rocksdb_create_iterator_cf(r->db, ro, r->cf[CF_LOG]);
	rocks_clock_get(r, &clk);
	for (rocksdb_iter_seek_to_last(it); rc == TALLY_OK &&
	     rocksdb_iter_valid(it); rocksdb_iter_prev(it)) {
		size_t klen, vlen;
		const char *k = rocksdb_iter_key(it, &klen);
		const char *v = rocksdb_iter_value(it, &vlen);
		key_obj o;

		if (log_entry_decode((const uint8_t *)k, klen,
		                     (const uint8_t *)v, vlen, &clk, &o, ck.seq,
		                     ck.log, &ck.n) != 0) {
			rc = TALLY_ECORRUPT;
			break;
		}
		if (!have_last || o.content != last_obj.content ||
		    o.ktype != last_obj.ktype || o.ctype != last_obj.ctype) {
			if (have_last)
				rc = mem_until(&mem, &last_obj, 1, last_seq);
			if (rc == TALLY_OK)
				rc = mem_until(&mem, &o, 0, 0);
			if (rc != TALLY_OK)
				break;
			last_obj = o;
			last_seq = 0;
			have_last = 1;
		}
		/* A chunk holds its events newest first; each object's are
		 * listed oldest first, and an event only above the last one
		 * listed. Two chunks hold the same event in folders of builds
		 * whose compaction wrote a running checkpoint's events apart
		 * from the newer ones, if the process died before that
		 * checkpoint landed:
		 * the replay chunks the two together, from the older one's
		 * first event, so its chunks (visited first, by their oldest
		 * event) hold every event the compaction's newer ones do
		 * (docs/RELIABILITY.md). */
		for (size_t i = ck.n; rc == TALLY_OK && i-- > 0;) {
			if (ck.seq[i] <= last_seq)
				continue;
			last_seq = ck.seq[i];
			rc = fn(arg, &o, ck.seq[i], &ck.log[i]);
		}
	}
	rocksdb_iter_get_error(it, &err);
	rocksdb_iter_destroy(it);
	rocksdb_readoptions_destroy(ro);
	rocksdb_release_snapshot(r->db, snap);
	if (rc == TALLY_OK && err == NULL && have_last)
		rc = mem_until(&mem, &last_obj, 1, last_seq);
	if (rc == TALLY_OK && err == NULL)
		rc = mem_until(&mem, NULL, 0, 0);
	free(evs);
	if (err)
		return rocks_err(err);
	return rc;
}
