/* rocks_journal.c: named counters, object totals and events kept in memory
 * and written to their column families behind the committer. A batch
 * writes one journal record (the absolute values it changed, the events it
 * logged) instead of one RocksDB entry per value or event; the values live
 * on in the dirty tables and the events in rocks_events.c's generations,
 * which reads consult first.
 *
 * Why: a random-key INCR load spent most of its time inserting into
 * RocksDB's memtable skiplist, one descent per counter per batch. A
 * journal record is one insert per batch, and a value written many times
 * between checkpoints reaches its column family once.
 *
 * A record goes into the journal files (rocks_jfile.c) when the batch
 * writes nothing else, else into the batch's own RocksDB write.
 *
 * When the dirty tables or events pass a bound they are frozen and the
 * checkpoint thread writes them out as puts and deletes, deleting the RocksDB records
 * they cover and noting the last number covered (META_JCKPT) in the same
 * synced atomic write. At open, the records above that number, from
 * RocksDB and the files, are replayed in number order (later ones win:
 * they hold absolute values). A crash at any point leaves column family
 * values of some checkpoint plus every record after it. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "core/varint.h"
#include "store/rocks_int.h"

/* Journal record key: META_JOURNAL, then the record's number, big-endian,
 * so records sort in the order they were written. */
#define JKEY_LEN 9

/* Record entry tag: bit 0 the value exists (else deleted), bit 1 totals
 * (else a named counter); or JT_COUNTERS alone: the number of named
 * counters after the batch, a varint; or JT_EVENT, with JT_UNIQUE when it
 * sets a membership: an event (object key, then varints seq, member, at_ms,
 * delta, total). */
#define JT_EXISTS 1u
#define JT_TOTALS 2u
#define JT_COUNTERS 4u
#define JT_EVENT 8u
#define JT_UNIQUE 16u

/* A checkpoint that fails for memory is tried again (ck_retry_wait()):
 * the first wait, the longest, and how long in all before the store
 * fails. */
#define CK_RETRY_FIRST_MS 10u
#define CK_RETRY_MAX_MS 1000u
#define CK_RETRY_FOR_MS 30000u

static void jkey(uint8_t *k, uint64_t n)
{
	k[0] = META_JOURNAL;
	be64_put(k + 1, n);
}

static int jlist_add(rocks_jlist *l, uint64_t jseq)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		uint64_t *v = realloc(l->v, cap * sizeof *v);

		if (v == NULL)
			return TALLY_ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = jseq;
	return TALLY_OK;
}

static int tab_of(int cf)
{
	assert(cf == CF_NAMED || cf == CF_TOTALS);
	return cf == CF_TOTALS;
}

static int jbuf_reserve(rocks *r, size_t more)
{
	size_t want = ROCKS_JF_HDR + r->jlen + more;

	if (want <= r->jcap)
		return 0;
	size_t cap = r->jcap ? r->jcap : 4096;

	while (cap < want)
		cap *= 2;
	uint8_t *p = realloc(r->jbuf, cap);

	if (p == NULL)
		return -1;
	r->jbuf = p;
	r->jcap = cap;
	return 0;
}

int rocks_journal_add(rocks *r, int cf, const void *key, size_t len,
                      const rocks_val *v)
{
	uint8_t *p;

	if (jbuf_reserve(r, 1 + 2 * VARINT_MAX + len))
		return TALLY_ENOMEM;
	p = r->jbuf + ROCKS_JF_HDR + r->jlen;
	*p++ = (uint8_t)((v->exists ? JT_EXISTS : 0) |
	                 (tab_of(cf) ? JT_TOTALS : 0));
	p += varint_put_u64(p, len);
	memcpy(p, key, len);
	p += len;
	if (v->exists)
		p += varint_put_i64(p, v->v);
	r->jlen = (size_t)(p - r->jbuf) - ROCKS_JF_HDR;
	return TALLY_OK;
}

int rocks_journal_counters(rocks *r, uint64_t counters)
{
	uint8_t *p;

	if (jbuf_reserve(r, 1 + VARINT_MAX))
		return TALLY_ENOMEM;
	p = r->jbuf + ROCKS_JF_HDR + r->jlen;
	*p++ = JT_COUNTERS;
	p += varint_put_u64(p, counters);
	r->jlen = (size_t)(p - r->jbuf) - ROCKS_JF_HDR;
	return TALLY_OK;
}

int rocks_journal_event(rocks *r, const rocks_ev *ev)
{
	uint8_t *p;

	if (jbuf_reserve(r, 1 + KEY_OBJ_LEN + 5 * VARINT_MAX))
		return TALLY_ENOMEM;
	p = r->jbuf + ROCKS_JF_HDR + r->jlen;
	*p++ = (uint8_t)(JT_EVENT | (ev->unique ? JT_UNIQUE : 0));
	key_obj_encode(p, &ev->obj);
	p += KEY_OBJ_LEN;
	p += varint_put_u64(p, ev->seq);
	p += varint_put_u64(p, ev->member);
	p += varint_put_i64(p, ev->at_ms);
	p += varint_put_i64(p, ev->d);
	p += varint_put_i64(p, ev->total);
	r->jlen = (size_t)(p - r->jbuf) - ROCKS_JF_HDR;
	return TALLY_OK;
}

static int event_decode(const uint8_t *p, size_t n, uint8_t tag, rocks_ev *ev,
                        size_t *used)
{
	uint64_t v[5];
	size_t off = KEY_OBJ_LEN, u;

	if (tag & ~(JT_EVENT | JT_UNIQUE) || n < KEY_OBJ_LEN)
		return -1;
	memset(ev, 0, sizeof *ev);
	key_obj_decode(p, &ev->obj);
	for (int i = 0; i < 5; i++) {
		int bad = i < 2 ? varint_get_u64(p + off, n - off, &v[i], &u)
		                : varint_get_i64(p + off, n - off,
		                                 (int64_t *)&v[i], &u);
		if (bad)
			return -1;
		off += u;
	}
	ev->seq = v[0];
	ev->member = v[1];
	ev->at_ms = (int64_t)v[2];
	ev->d = (int64_t)v[3];
	ev->total = (int64_t)v[4];
	ev->unique = (tag & JT_UNIQUE) != 0;
	/* The engine takes times of 0..TALLY_AT_MS_MAX only; one outside
	 * is damage, and would reach the clock's samples. */
	if (ev->seq == 0 || ev->d == 0 || ev->at_ms < 0 ||
	    ev->at_ms > TALLY_AT_MS_MAX ||
	    (ev->unique && (ev->member == 0 || (ev->d != 1 && ev->d != -1))))
		return -1;
	*used = off;
	return 0;
}

int rocks_journal_write(rocks *r, int sync)
{
	uint8_t k[JKEY_LEN];

	if (r->jlen == 0)
		return TALLY_OK;
	if (rocksdb_writebatch_count(r->wb) == 0) {
		int rc = rocks_jfile_append(r, r->jseq + 1, sync);

		if (rc != ROCKS_JF_FULL)
			return rc;
	}
	/* Listed before it is written: a batch that then fails leaves a
	 * number whose delete finds nothing. */
	if (jlist_add(&r->jm, r->jseq + 1) != TALLY_OK)
		return TALLY_ENOMEM;
	jkey(k, r->jseq + 1);
	rocksdb_writebatch_put_cf(r->wb, r->cf[CF_META], (const char *)k,
	                          sizeof k,
	                          (const char *)r->jbuf + ROCKS_JF_HDR, r->jlen);
	r->wb_ordered = 1;
	return TALLY_OK;
}

void rocks_journal_discard(rocks *r)
{
	r->jlen = 0;
}

/* ---- lookups -------------------------------------------------------------- */

int rocks_dirty_load(rocks *r, int cf, const void *key, size_t len,
                     uint64_t h, rocks_val *out, rocks_val **home)
{
	int t = tab_of(cf);
	rocks_val *v = hmap_get_h(r->dirty[t], key, len, h);

	*home = v;
	if (v == NULL && r->frozen[t] != NULL)
		v = hmap_get_h(r->frozen[t], key, len, h);
	if (v == NULL)
		v = hmap_get_h(r->clean[t], key, len, h);
	if (v == NULL)
		return 0;
	*out = *v;
	return 1;
}

int rocks_dirty_find(rocks *r, int cf, const void *key, size_t len,
                     uint64_t h, rocks_val *out)
{
	rocks_val *home;

	return rocks_dirty_load(r, cf, key, len, h, out, &home);
}

void rocks_dirty_prefetch(rocks *r, int cf, const void *key, size_t len,
                          int deep)
{
	int t = tab_of(cf);

	hmap_prefetch(r->dirty[t], key, len, deep);
	if (r->frozen[t] != NULL)
		hmap_prefetch(r->frozen[t], key, len, deep);
	hmap_prefetch(r->clean[t], key, len, deep);
}

void rocks_dirty_rdlock(rocks *r)
{
	pthread_rwlock_rdlock(&r->dirty_lock);
}

void rocks_dirty_unlock(rocks *r)
{
	pthread_rwlock_unlock(&r->dirty_lock);
}

/* ---- commit, freeze, checkpoint ------------------------------------------ */

/* An event in memory costs about as much as this many dirty values (the
 * event, and its entries in three maps): the freeze bound on events is
 * cache_max divided by it. */
#define EVENTS_PER_VALUE 4

static void val_set(rocks_val *d, const rocks_val *v)
{
	d->v = v->exists ? v->v : 0;
	d->exists = v->exists;
	d->acc = 0;
	d->put = 0;
}

static int tabs_put(hmap *tab, const void *key, size_t len, uint64_t h,
                    const rocks_val *v)
{
	rocks_val *d = hmap_put_h(tab, key, len, h, NULL);

	if (d == NULL)
		return -1;
	val_set(d, v);
	return 0;
}

/* Build carry[t], the next clean table: frozen's values, which the
 * checkpoint just wrote, then the clean table's that frozen does not
 * replace (unchanged since the checkpoint before, so still what the
 * column family holds), up to cache_max / 2 values, so that both tables
 * hold cache_max at most. A frozen table of that many values or more
 * becomes the clean table itself, as before. Which older values are
 * dropped at the bound follows the table's slot order, not their age.
 * Checkpoint thread: the frozen and clean tables do not change while a
 * checkpoint runs, so they are read here without the lock. */
static void carry_build(rocks *r, hmap *const tab[2])
{
	for (int t = 0; t < 2; t++) {
		hmap *c = r->carry[t];
		size_t pos = 0, len;
		const void *key;
		void *val;
		uint64_t h;
		int ok = 1;

		r->carried[t] = 0;
		if (hmap_count(c) > 0)
			hmap_clear(c); /* the clean table the last reap replaced */
		if (hmap_count(r->clean[t]) == 0 ||
		    hmap_count(tab[t]) >= r->cache_max / 2)
			continue;
		/* Deletions count too: they answer "absent" without a
		 * RocksDB lookup. */
		while (ok && hmap_next_h(tab[t], &pos, &key, &len, &val, &h))
			ok = tabs_put(c, key, len, h, val) == 0;
		pos = 0;
		while (ok && hmap_count(c) < r->cache_max / 2 &&
		       hmap_next_h(r->clean[t], &pos, &key, &len, &val, &h)) {
			int inserted;
			rocks_val *d = hmap_put_h(c, key, len, h, &inserted);

			ok = d != NULL;
			if (ok && inserted)
				val_set(d, val);
		}
		/* Out of memory: the frozen table becomes the clean one, as
		 * before; what this copied is cleared at the next build. */
		r->carried[t] = (uint8_t)ok;
	}
}

static void freeze(rocks *r)
{
	pthread_mutex_lock(&r->ck_mu);
	pthread_rwlock_wrlock(&r->dirty_lock);
	for (int t = 0; t < 2; t++) {
		r->frozen[t] = r->dirty[t];
		r->dirty[t] = r->spare[t];
		r->spare[t] = NULL;
	}
	r->ev_frozen = r->ev_dirty;
	r->ev_dirty = r->ev_spare;
	r->ev_spare = NULL;
	pthread_rwlock_unlock(&r->dirty_lock);
	r->ck_upto = r->jseq;
	/* The two lists trade places; the checkpoint empties its own once
	 * written. (A failed one's records stay in META: the store is
	 * reopened after it, and the load lists them again.) */
	rocks_jlist jl = r->ck_jm;

	r->ck_jm = r->jm;
	r->jm = jl;
	r->jm.n = 0;
	r->ck_seq = r->seq;
	r->ck_counters = r->counters;
	r->ck_state = CK_RUNNING;
	r->journal_bytes = 0;
	pthread_cond_signal(&r->ck_cv);
	pthread_mutex_unlock(&r->ck_mu);
}

/* The checkpoint thread is done with the frozen tables: they become the
 * spare ones. Committer only. Returns the checkpoint's error, if any. */
static int reap(rocks *r)
{
	int err;

	pthread_mutex_lock(&r->ck_mu);
	if (r->ck_state != CK_DONE) {
		pthread_mutex_unlock(&r->ck_mu);
		return TALLY_OK;
	}
	err = r->ck_err;
	r->ck_state = CK_IDLE;
	pthread_mutex_unlock(&r->ck_mu);
	if (err != TALLY_OK)
		return err; /* the frozen tables stay: reads still need them */
	pthread_rwlock_wrlock(&r->dirty_lock);
	/* The values just written (and, carried, older ones) stay readable
	 * from memory; newer ones shadow them from the dirty and frozen
	 * tables, and nothing else writes values to the store. */
	for (int t = 0; t < 2; t++) {
		hmap *old = r->clean[t];

		if (r->carried[t]) {
			r->clean[t] = r->carry[t];
			r->carry[t] = old; /* cleared by the next build */
			r->spare[t] = r->frozen[t];
		} else {
			r->clean[t] = r->frozen[t];
			r->spare[t] = old;
		}
		r->frozen[t] = NULL;
	}
	r->ev_spare = r->ev_frozen;
	r->ev_frozen = NULL;
	pthread_rwlock_unlock(&r->dirty_lock);
	atomic_store(&r->st_clean, hmap_count(r->clean[0]) +
	                           hmap_count(r->clean[1]));
	/* No reader can reach them any more: emptied outside the lock. */
	for (int t = 0; t < 2; t++)
		hmap_clear(r->spare[t]);
	rocks_evgen_clear(r->ev_spare);
	atomic_fetch_add(&r->st_checkpoints, 1);
	/* Every record in the other file is older than the freeze, so
	 * covered by this checkpoint, which is synced. */
	rocks_jfile_turn(r);
	return TALLY_OK;
}

static void evs_prefetch(const rocks_evgen *g, const rocks_ev *ev, size_t n)
{
	for (int deep = 0; deep < 2; deep++)
		for (size_t i = 0; i < n; i++)
			rocks_evgen_prefetch(g, &ev[i], deep);
}

int rocks_journal_reserve(rocks *r, const size_t n[2],
                          const size_t len[2])
{
	int fail = 0;

	pthread_rwlock_wrlock(&r->dirty_lock);
	for (int t = 0; t < 2 && !fail; t++)
		fail = hmap_reserve(r->dirty[t], n[t], len[t]);
	if (!fail)
		fail = rocks_evgen_reserve(r->ev_dirty, r->bev_n);
	pthread_rwlock_unlock(&r->dirty_lock);
	return fail ? TALLY_ENOMEM : TALLY_OK;
}

void rocks_journal_commit(rocks *r)
{
	size_t pos, len;
	const void *key;
	void *val;
	uint64_t h;
	int rc = TALLY_OK;

	if (r->jlen > 0) {
		pthread_rwlock_wrlock(&r->dirty_lock);
		for (int t = 0; t < 2; t++) {
			hmap *ov = t ? r->ov_totals : r->ov_named;
			hmap *cache = t ? r->cache_totals : r->cache_named;

			pos = 0;
			while (hmap_next_h(ov, &pos, &key, &len, &val, &h)) {
				const rocks_ov *o = val;

				if (!rocks_val_changed(&o->val))
					continue;
				/* The cache holds values that agree with
				 * the store only: drop the old one. Only a
				 * value loaded from it can be in it. */
				if (o->cached)
					hmap_del_h(cache, key, len, h);
				if (o->home != NULL)
					val_set(o->home, &o->val);
				else if (tabs_put(r->dirty[t], key, len, h,
				                  &o->val))
					rc = TALLY_EIO;
			}
		}
		for (size_t i = 0; i < r->bev_n; i++) {
			/* Each event is three map updates, mostly cache
			 * misses: start a block of them at once. */
			if (i % ROCKS_BLOCK == 0)
				evs_prefetch(r->ev_dirty, &r->bev[i],
				             rocks_block_len(r->bev_n, i));
			if (rocks_evgen_add(r->ev_dirty, &r->bev[i]))
				rc = TALLY_EIO;
		}
		pthread_rwlock_unlock(&r->dirty_lock);
		r->bev_n = 0;
		r->jseq++;
		/* With its header: the journal files are bounded in real
		 * bytes (twice journal_max, and 1 MiB), and records of one
		 * hot counter are smaller than their headers; counted without
		 * them, such records filled the files before a checkpoint was
		 * due, and the rest went to RocksDB's WAL. */
		r->journal_bytes += ROCKS_JF_HDR + r->jlen;
		r->jlen = 0;
		atomic_store(&r->st_dirty, hmap_count(r->dirty[0]) +
		                           hmap_count(r->dirty[1]));
	}
	if (rc == TALLY_OK)
		rc = reap(r);
	if (rc != TALLY_OK) {
		/* The batch is written and its answers stand, but reads could
		 * miss a value (a put that failed, which the room made by
		 * rocks_journal_reserve() before the write rules out for
		 * memory) or the journal can no longer be checkpointed (the
		 * checkpoint failed): refuse further writes, so that the
		 * engine reopens the store, which replays the journal. */
		r->failed = rc == TALLY_ENOSPC ? TALLY_ENOSPC : TALLY_EIO;
		return;
	}
	if (r->frozen[0] == NULL &&
	    (hmap_count(r->dirty[0]) + hmap_count(r->dirty[1]) >= r->cache_max ||
	     r->ev_dirty->n >= r->cache_max / EVENTS_PER_VALUE ||
	     r->journal_bytes >= r->journal_max))
		freeze(r);
}

/* Put one generation's values and events into wb, sorted (through s). */
static int mem_entries(rocks *r, sorted *s, rocksdb_writebatch_t *wb,
                       hmap *const tab[2], const rocks_evgen *evs)
{
	size_t pos, len;
	const void *key;
	void *val;
	int rc = 0;

	for (int t = 0; t < 2 && rc == 0; t++) {
		int cf = t ? CF_TOTALS : CF_NAMED;

		pos = 0;
		while (rc == 0 && hmap_next(tab[t], &pos, &key, &len, &val)) {
			const rocks_val *v = val;
			uint8_t buf[VARINT_MAX];

			if (v->exists)
				rc = sorted_add(s, cf, SORTED_PUT, key, len, buf,
				                varint_put_i64(buf, v->v));
			else
				rc = sorted_add(s, cf, SORTED_DELETE, key, len,
				                NULL, 0);
		}
	}
	if (rc == 0)
		rc = sorted_flush(s, wb, r->cf);
	/* The generation's samples first: its chunks are coded against
	 * them, and they land in the same write (rocks_clock.c). */
	if (rc == 0)
		rc = rocks_clock_note(r, evs, wb);
	if (rc == 0) {
		ev_clock clk;

		rocks_clock_get(r, &clk);
		rc = rocks_evgen_write(evs, s, wb, r->cf, &clk);
	}
	if (rc != 0) {
		sorted_clear(s);
		rocksdb_writebatch_clear(wb);
		return TALLY_ENOMEM;
	}
	return TALLY_OK;
}

/* RocksDB keeps a WAL file until every column family's memtable holding
 * entries from it is flushed. META takes few entries between checkpoints
 * (tokens, type changes, the markers), so its memtable fills last and
 * held on to every WAL file since the first: after 3M random likes and a
 * kill -9 the WAL was 294 to 329 MB (139 to 178 MB with this flush), and
 * with 400k live request IDs the open took 6 to 10 s (4 s with it: the
 * tokens come from table files, not from the WAL). So each checkpoint asks
 * for META's flush, without waiting for it to be written, at most once a
 * second (tiny checkpoints must not make a table file each). RocksDB
 * makes such a request wait while a flush would stall writes: skipped
 * while META has a memtable still to flush or a compaction due (a manual
 * compaction holds the automatic ones back), so a checkpoint does not
 * wait on it. A request that fails leaves the WAL as long as
 * before, nothing else: a failed flush puts RocksDB in its error state,
 * which the next write reports. */
static void meta_flush(rocks *r)
{
	uint64_t now = rocks_now_ns(), imm = 0, pending = 0;
	char *err = NULL;

	if (r->ck_meta_flush_ns != 0 &&
	    now - r->ck_meta_flush_ns < 1000000000u)
		return;
	if (rocksdb_property_int_cf(r->db, r->cf[CF_META],
	                            "rocksdb.num-immutable-mem-table",
	                            &imm) != 0 || imm > 0 ||
	    rocksdb_property_int_cf(r->db, r->cf[CF_META],
	                            "rocksdb.compaction-pending",
	                            &pending) != 0 || pending > 0)
		return;
	r->ck_meta_flush_ns = now;
	rocksdb_flush_cf(r->db, r->fo_nowait, r->cf[CF_META], &err);
	rocksdb_free(err);
}

/* Write the frozen tables and events to their column families, delete the
 * journal records of META that they cover (jm), and note upto, the number
 * of named counters and the last event seq as of it, in one synced atomic
 * write. Records in journal files need no delete: the files are written
 * over. */
static int ckpt_write(rocks *r, hmap *const tab[2], const rocks_evgen *evs,
                      const rocks_jlist *jm, uint64_t upto,
                      uint64_t counters, uint64_t seq)
{
	uint8_t k[JKEY_LEN], up[8], cn[8], sq[8];
	const uint8_t ukey = META_JCKPT, ckey = META_COUNTERS, skey = META_SEQ;
	uint64_t entries;
	char *err = NULL;
	int rc = mem_entries(r, &r->ck_ents, r->ck_wb, tab, evs);
	if (rc != TALLY_OK)
		return rc;
	for (size_t i = 0; i < jm->n; i++) {
		assert(jm->v[i] <= upto);
		jkey(k, jm->v[i]);
		rocksdb_writebatch_delete_cf(r->ck_wb, r->cf[CF_META],
		                             (const char *)k, sizeof k);
	}
	be64_put(up, upto);
	rocksdb_writebatch_put_cf(r->ck_wb, r->cf[CF_META], (const char *)&ukey,
	                          1, (const char *)up, sizeof up);
	be64_put(cn, counters);
	rocksdb_writebatch_put_cf(r->ck_wb, r->cf[CF_META], (const char *)&ckey,
	                          1, (const char *)cn, sizeof cn);
	be64_put(sq, seq);
	rocksdb_writebatch_put_cf(r->ck_wb, r->cf[CF_META], (const char *)&skey,
	                          1, (const char *)sq, sizeof sq);
	/* Synced: the journal file records it covers are written over once
	 * the committer sees it done (rocks_jfile_turn()). One fsync per
	 * checkpoint, on this thread. */
	entries = (uint64_t)rocksdb_writebatch_count(r->ck_wb);
	/* Its write syncs the WAL: not after a failed sync (rocks_int.h). */
	rc = atomic_load(&r->logs_failed);
	if (rc != TALLY_OK) {
		rocksdb_writebatch_clear(r->ck_wb);
		return rc;
	}
	rocksdb_write(r->db, r->wo_sync, r->ck_wb, &err);
	rocksdb_writebatch_clear(r->ck_wb);
	if (err)
		return rocks_logs_fail(r, rocks_write_err(err));
	atomic_fetch_add(&r->st_ck_entries, entries);
	meta_flush(r);
	return TALLY_OK;
}

int rocks_journal_spill(rocks *r)
{
	rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
	sorted ents = { 0 };
	int frozen_landed, rc;

	if (wb == NULL)
		return TALLY_ENOMEM;
	/* A running checkpoint lands first. Written apart from it, the
	 * newer events would be chunked from their own generation's first
	 * event, and a crash before it landed would replay both
	 * generations as one, chunked from the older one's first: the
	 * newer chunks would stay beside the replay's, and RECENT and
	 * HISTORY would list their events twice. Both locks held
	 * throughout (in freeze()'s order): no freeze, so no checkpoint
	 * starts or lands meanwhile, nor can a batch reach memory. */
	pthread_mutex_lock(&r->ck_mu);
	while (r->ck_state == CK_RUNNING && !r->ck_retrying)
		pthread_cond_wait(&r->ck_cv, &r->ck_mu);
	if (r->ck_state == CK_RUNNING) {
		/* It waits for memory, maybe for long: so would this. */
		pthread_mutex_unlock(&r->ck_mu);
		sorted_free(&ents);
		rocksdb_writebatch_destroy(wb);
		return TALLY_ENOMEM;
	}
	rocks_dirty_rdlock(r);
	/* Frozen tables still here are reaped next (their checkpoint
	 * landed: written again, the same keys would be rewritten), or
	 * their checkpoint failed and the store reopens: spill nothing. */
	frozen_landed = r->frozen[0] != NULL && r->ck_err == TALLY_OK;
	if (r->frozen[0] != NULL && r->ck_err != TALLY_OK)
		rc = r->ck_err;
	else
		rc = rocks_sync_logs(r);
	/* The records of what is spilled went to disk first (async
	 * durability leaves them unsynced for up to flush_ms): the tables
	 * may be flushed before them, and a machine crash that then lost
	 * some would replay only the keys of the records kept, leaving the
	 * others at the spilled values, batches in part. */
	for (int g = frozen_landed; g < 2 && rc == TALLY_OK; g++) {
		hmap *const *tab = g ? r->dirty : r->frozen;
		const rocks_evgen *evs = g ? r->ev_dirty : r->ev_frozen;
		char *err = NULL;

		if (evs == NULL)
			continue;
		rc = mem_entries(r, &ents, wb, tab, evs);
		if (rc != TALLY_OK)
			break;
		rocksdb_write(r->db, r->wo_nosync, wb, &err);
		rocksdb_writebatch_clear(wb);
		if (err) /* ENOSPC for a full disk */
			rc = rocks_logs_fail(r, rocks_write_err(err));
	}
	rocks_dirty_unlock(r);
	pthread_mutex_unlock(&r->ck_mu);
	sorted_free(&ents);
	rocksdb_writebatch_destroy(wb);
	return rc;
}

/* A checkpoint that fails for memory has written nothing: its whole
 * batch is built (mem_entries()) before the one write, and what it noted
 * in the clock is noted again alike. So it is tried again, after waits
 * from CK_RETRY_FIRST_MS doubling to CK_RETRY_MAX_MS, for CK_RETRY_FOR_MS
 * in all: a shortage that passes delays the checkpoint, where failing the
 * store refuses every write until a reopen, whose replay of the journal
 * needs memory too. Meanwhile batches go on into the dirty tables, as
 * behind a slow checkpoint, and a spill (tally_compact()) is refused
 * with TALLY_ENOMEM rather than held. Returns 0 to give up: the time is
 * spent, or the store closes (which then keeps the journal for the next
 * open). */
static int ck_retry_wait(rocks *r, uint64_t start, uint64_t *wait_ms)
{
	uint64_t until = rocks_now_ns() + *wait_ms * 1000000u;
	struct timespec ts = { (time_t)(until / 1000000000u),
	                       (long)(until % 1000000000u) };
	int go_on;

	if (until - start > (uint64_t)CK_RETRY_FOR_MS * 1000000u)
		return 0;
	pthread_mutex_lock(&r->ck_mu);
	r->ck_retrying = 1;
	pthread_cond_broadcast(&r->ck_cv); /* a spill waiting gives up */
	while (!r->ck_stop &&
	       pthread_cond_timedwait(&r->ck_cv, &r->ck_mu, &ts) != ETIMEDOUT)
		;
	r->ck_retrying = 0;
	go_on = !r->ck_stop;
	pthread_mutex_unlock(&r->ck_mu);
	if (go_on)
		atomic_fetch_add(&r->st_ck_retries, 1);
	*wait_ms = *wait_ms * 2 < CK_RETRY_MAX_MS ? *wait_ms * 2 :
	           CK_RETRY_MAX_MS;
	return go_on;
}

static void *ckpt_main(void *arg)
{
	rocks *r = arg;

	prctl(PR_SET_NAME, "tally-ckpt", 0, 0, 0);
	rocks_counters_off();
	pthread_mutex_lock(&r->ck_mu);
	for (;;) {
		while (r->ck_state != CK_RUNNING && !r->ck_stop)
			pthread_cond_wait(&r->ck_cv, &r->ck_mu);
		if (r->ck_state != CK_RUNNING)
			break;
		hmap *tab[2] = { r->frozen[0], r->frozen[1] };
		const rocks_evgen *evs = r->ev_frozen;
		uint64_t upto = r->ck_upto, counters = r->ck_counters;
		uint64_t seq = r->ck_seq;
		uint64_t start = rocks_now_ns(), wait_ms = CK_RETRY_FIRST_MS;
		int rc;

		pthread_mutex_unlock(&r->ck_mu);
		do {
			if (r->ck_hook != NULL)
				r->ck_hook(r->ck_hook_arg);
			rc = ckpt_write(r, tab, evs, &r->ck_jm, upto, counters,
			                seq);
		} while (rc == TALLY_ENOMEM && ck_retry_wait(r, start, &wait_ms));
		if (rc == TALLY_OK) {
			r->ck_jm.n = 0;
			carry_build(r, tab);
		}
		else
			r->carried[0] = r->carried[1] = 0;
		pthread_mutex_lock(&r->ck_mu);
		r->ck_err = rc;
		r->ck_state = CK_DONE;
		pthread_cond_broadcast(&r->ck_cv);
	}
	pthread_mutex_unlock(&r->ck_mu);
	return NULL;
}

/* ---- open and close ------------------------------------------------------- */

/* A condition variable whose timed waits (ck_retry_wait()) run on the
 * monotonic clock, not one that steps. 0, or -1. */
static int cond_init_monotonic(pthread_cond_t *cv)
{
	pthread_condattr_t ca;
	int bad;

	if (pthread_condattr_init(&ca) != 0)
		return -1;
	bad = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
	      pthread_cond_init(cv, &ca) != 0;
	pthread_condattr_destroy(&ca);
	return bad ? -1 : 0;
}

int rocks_journal_init(rocks *r, uint64_t journal_max)
{
	pthread_rwlockattr_t a;

	/* The journal bound also bounds what a restart replays; the other
	 * bound is cache_max changed values. */
	r->journal_max = journal_max ? journal_max : (uint64_t)64 << 20;
	for (int t = 0; t < 2; t++) {
		r->dirty[t] = hmap_create_arena(sizeof(rocks_val));
		r->spare[t] = hmap_create_arena(sizeof(rocks_val));
		r->clean[t] = hmap_create_arena(sizeof(rocks_val));
		r->carry[t] = hmap_create_arena(sizeof(rocks_val));
		if (r->dirty[t] == NULL || r->spare[t] == NULL ||
		    r->clean[t] == NULL || r->carry[t] == NULL)
			return TALLY_ENOMEM;
	}
	r->ev_dirty = rocks_evgen_create();
	r->ev_spare = rocks_evgen_create();
	r->ck_wb = rocksdb_writebatch_create();
	if (r->ev_dirty == NULL || r->ev_spare == NULL || r->ck_wb == NULL)
		return TALLY_ENOMEM;
	if (pthread_rwlockattr_init(&a) != 0)
		return TALLY_ENOMEM;
#ifdef __GLIBC__
	/* Readers come in streams; the committer must not wait them out. */
	pthread_rwlockattr_setkind_np(&a,
	        PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
	if (pthread_rwlock_init(&r->dirty_lock, &a) != 0) {
		pthread_rwlockattr_destroy(&a);
		return TALLY_ENOMEM;
	}
	pthread_rwlockattr_destroy(&a);
	r->locks_ok = 1;
	if (pthread_mutex_init(&r->ck_mu, NULL) != 0)
		return TALLY_ENOMEM;
	r->locks_ok = 2;
	if (cond_init_monotonic(&r->ck_cv) != 0)
		return TALLY_ENOMEM;
	r->locks_ok = 3;
	return TALLY_OK;
}

static int replay_one(rocks *r, const uint8_t *p, size_t n)
{
	while (n > 0) {
		uint8_t tag = p[0];
		uint64_t klen;
		size_t used;
		rocks_val v = { 0, 0, 0, 0 };

		p++, n--;
		if (tag == JT_COUNTERS) {
			if (varint_get_u64(p, n, &r->counters, &used))
				return TALLY_ECORRUPT;
			p += used;
			n -= used;
			continue;
		}
		if (tag & JT_EVENT) {
			rocks_ev ev;

			if (event_decode(p, n, tag, &ev, &used) ||
			    ev.seq <= (r->ev_dirty->n ? r->ev_dirty->ev[
			               r->ev_dirty->n - 1].seq : 0))
				return TALLY_ECORRUPT;
			p += used;
			n -= used;
			if (rocks_evgen_add(r->ev_dirty, &ev))
				return TALLY_ENOMEM;
			if (ev.seq > r->seq)
				r->seq = ev.seq;
			continue;
		}
		if (tag & ~(JT_EXISTS | JT_TOTALS))
			return TALLY_ECORRUPT;
		if (varint_get_u64(p, n, &klen, &used) || klen > n - used ||
		    klen > HMAP_KEY_MAX)
			return TALLY_ECORRUPT;
		/* A key no write makes (a checkpoint would write it to its
		 * table, where no read finds it, or assert on it) is damage:
		 * a total's key is an object's, a counter's 1..512 bytes. */
		if ((tag & JT_TOTALS) ? klen != KEY_OBJ_LEN
		                      : klen < 1 || klen > TALLY_KEY_MAX)
			return TALLY_ECORRUPT;
		const uint8_t *key = p + used;

		p += used + klen;
		n -= used + klen;
		v.exists = (tag & JT_EXISTS) != 0;
		if (v.exists) {
			if (varint_get_i64(p, n, &v.v, &used))
				return TALLY_ECORRUPT;
			p += used;
			n -= used;
		}
		if (tabs_put(r->dirty[(tag & JT_TOTALS) != 0], key, klen,
		             hash_bytes(key, klen), &v))
			return TALLY_ENOMEM;
	}
	return TALLY_OK;
}

/* Records above the checkpoint are numbered one after another, in the
 * files and META alike (a number is taken only by a record written).
 * Async durability, after a machine crash, can lose a record of a file
 * and keep a later one: the place of the lost one still holds a whole
 * record of an earlier turn, numbered lower, so the scan reads on. The
 * records after such a gap are not replayed (the batches survive as a
 * prefix of those acknowledged, as with a torn record), and are cut from
 * the files. */
typedef struct replay_pos {
	size_t next;     /* the next of the files' records */
	uint64_t expect; /* the number the next record must have */
	uint64_t gap;    /* 0, or the first file record found past a gap */
} replay_pos;

/* Replay the journal files' records numbered below upto (all: UINT64_MAX),
 * from pos->next on, up to a gap. */
static int replay_files(rocks *r, replay_pos *pos, uint64_t upto,
                        uint8_t **buf, size_t *cap)
{
	int rc = TALLY_OK;

	while (rc == TALLY_OK && pos->gap == 0 && pos->next < r->jf.nrecs &&
	       r->jf.recs[pos->next].num < upto) {
		const rocks_jrec *rec = &r->jf.recs[pos->next];

		if (rec->num != pos->expect) {
			pos->gap = rec->num;
			break;
		}
		pos->next++;
		pos->expect++;
		rc = rocks_jfile_read(r, rec, buf, cap);
		if (rc == TALLY_OK)
			rc = replay_one(r, *buf, rec->len);
		r->jseq = rec->num;
		r->journal_bytes += ROCKS_JF_HDR + rec->len;
	}
	return rc;
}

int rocks_journal_load(rocks *r, const char *dir)
{
	rocksdb_iterator_t *it;
	uint8_t lo[JKEY_LEN];
	uint8_t *buf = NULL;
	size_t cap = 0;
	char *err = NULL;
	replay_pos pos = { 0, r->ck_upto + 1, 0 };
	/* r->ck_upto holds META_JCKPT here (rocks.c). A file takes the
	 * records between two checkpoints' turns: about journal_max, more
	 * while a checkpoint runs. Past twice that, records go to RocksDB. */
	int rc = rocks_jfile_open(r, dir, r->ck_upto,
	                          2 * r->journal_max + ((uint64_t)1 << 20));

	if (rc != TALLY_OK)
		return rc;
	it = rocksdb_create_iterator_cf(r->db, r->ro, r->cf[CF_META]);
	if (it == NULL)
		return TALLY_ENOMEM;
	jkey(lo, 0);
	for (rocksdb_iter_seek(it, (const char *)lo, sizeof lo);
	     rc == TALLY_OK && rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
		size_t klen, vlen;
		const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &klen);
		const uint8_t *v = (const uint8_t *)rocksdb_iter_value(it, &vlen);

		if (klen == 0 || k[0] != META_JOURNAL)
			break;
		if (klen != JKEY_LEN) {
			rc = TALLY_ECORRUPT;
			break;
		}
		rc = replay_files(r, &pos, be64_get(k + 1), &buf, &cap);
		/* Deleted by the next checkpoint, like the ones to come. */
		if (rc == TALLY_OK)
			rc = jlist_add(&r->jm, be64_get(k + 1));
		if (rc != TALLY_OK)
			break;
		/* Covered by the last checkpoint already: its delete was
		 * lost with a failed one (see freeze()). */
		if (be64_get(k + 1) <= r->ck_upto)
			continue;
		/* A record goes to META only after every file record before
		 * it is synced (batch_write()), and RocksDB's WAL keeps a
		 * prefix: one past a gap is damage, not a crash. */
		if (pos.gap != 0 || be64_get(k + 1) != pos.expect) {
			rc = TALLY_ECORRUPT;
			break;
		}
		pos.expect++;
		r->jseq = be64_get(k + 1);
		r->journal_bytes += ROCKS_JF_HDR + vlen; /* as committed */
		rc = replay_one(r, v, vlen);
	}
	rocksdb_iter_get_error(it, &err);
	rocksdb_iter_destroy(it);
	if (err) {
		free(buf);
		return rocks_err(err);
	}
	if (rc == TALLY_OK)
		rc = replay_files(r, &pos, UINT64_MAX, &buf, &cap);
	if (rc == TALLY_OK && pos.gap != 0)
		rc = rocks_jfile_cut(r, pos.gap);
	free(buf);
	rocks_jfile_loaded(r);
	/* New records must sort after every one a file may still hold. */
	if (r->jseq < r->ck_upto)
		r->jseq = r->ck_upto;
	atomic_store(&r->st_counters, r->counters);
	atomic_store(&r->st_seq, r->seq);
	atomic_store(&r->st_dirty, hmap_count(r->dirty[0]) +
	                           hmap_count(r->dirty[1]));
	/* Read-only: the events stay in memory, never checkpointed. */
	if (rc == TALLY_OK && !r->read_only) {
		if (pthread_create(&r->ck_thread, NULL, ckpt_main, r) != 0)
			return TALLY_ENOMEM;
		r->ck_started = 1;
	}
	return rc;
}

/* Stop the checkpoint thread and, unless the store failed, write every
 * dirty value out, so that the next open replays nothing. */
void rocks_journal_close(rocks *r)
{
	int covered = 0;

	if (r->ck_started) {
		pthread_mutex_lock(&r->ck_mu);
		/* Set first: a checkpoint waiting to retry gives up on it
		 * (ck_retry_wait()); one writing finishes. */
		r->ck_stop = 1;
		pthread_cond_broadcast(&r->ck_cv);
		while (r->ck_state == CK_RUNNING)
			pthread_cond_wait(&r->ck_cv, &r->ck_mu);
		pthread_mutex_unlock(&r->ck_mu);
		pthread_join(r->ck_thread, NULL);
		r->ck_started = 0;
		if (!rocks_failed(r) && reap(r) == TALLY_OK &&
		    r->frozen[0] == NULL) {
			hmap *tab[2] = { r->dirty[0], r->dirty[1] };

			/* With nothing dirty, the last checkpoint covers
			 * every record. */
			covered = (hmap_count(r->dirty[0]) +
			           hmap_count(r->dirty[1]) == 0 &&
			           r->ev_dirty->n == 0) ||
			          ckpt_write(r, tab, r->ev_dirty, &r->jm,
			                     r->jseq, r->counters,
			                     r->seq) == TALLY_OK;
		}
	}
	rocks_jfile_close(r, covered);
	for (int t = 0; t < 2; t++) {
		hmap_free(r->dirty[t]);
		hmap_free(r->frozen[t]);
		hmap_free(r->spare[t]);
		hmap_free(r->clean[t]);
		hmap_free(r->carry[t]);
	}
	rocks_evgen_free(r->ev_dirty);
	rocks_evgen_free(r->ev_frozen);
	rocks_evgen_free(r->ev_spare);
	if (r->ck_wb)
		rocksdb_writebatch_destroy(r->ck_wb);
	sorted_free(&r->ck_ents);
	free(r->jm.v);
	free(r->ck_jm.v);
	free(r->jbuf);
	if (r->locks_ok >= 1)
		pthread_rwlock_destroy(&r->dirty_lock);
	if (r->locks_ok >= 2)
		pthread_mutex_destroy(&r->ck_mu);
	if (r->locks_ok >= 3)
		pthread_cond_destroy(&r->ck_cv);
}
