/* rocks_events.c: the events and memberships written since the last
 * checkpoint, held in memory until the checkpoint thread writes them to the
 * log, history and membership column families, sorted, in its one write.
 * Their journal records make them durable; reads merge them with the
 * column families.
 *
 * Why: a like cost three memtable inserts on the committer, and each
 * hashed memtable's flush sorted it whole first: half of tallyd's CPU
 * under random likes went to that sort alone (docs/PERFORMANCE.md). */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "core/varint.h"
#include "store/rocks_int.h"

/* Chain links are 1-based event numbers in a uint32_t. */
#define GEN_MAX_EVENTS (UINT32_MAX - 1)

rocks_evgen *rocks_evgen_create(void)
{
	rocks_evgen *g = calloc(1, sizeof *g);

	if (g == NULL)
		return NULL;
	g->by_obj = hmap_create_arena(sizeof(uint32_t));
	g->by_hist = hmap_create_arena(sizeof(uint32_t));
	g->members = hmap_create_arena(sizeof(rocks_mem));
	if (!g->by_obj || !g->by_hist || !g->members) {
		rocks_evgen_free(g);
		return NULL;
	}
	return g;
}

void rocks_evgen_free(rocks_evgen *g)
{
	if (g == NULL)
		return;
	hmap_free(g->by_obj);
	hmap_free(g->by_hist);
	hmap_free(g->members);
	free(g->ev);
	free(g);
}

void rocks_evgen_clear(rocks_evgen *g)
{
	g->n = 0;
	hmap_clear(g->by_obj);
	hmap_clear(g->by_hist);
	hmap_clear(g->members);
}

/* Room in *arr for more events after its n (doubling from 1024): 0, or
 * -1 out of memory with *arr as it was. */
static int ev_room(rocks_ev **arr, size_t n, size_t *cap, size_t more)
{
	size_t c = *cap ? *cap : 1024;
	rocks_ev *p;

	if (*cap - n >= more)
		return 0;
	while (c - n < more)
		c *= 2;
	p = realloc(*arr, c * sizeof *p);
	if (p == NULL)
		return -1;
	*arr = p;
	*cap = c;
	return 0;
}

int rocks_ev_push(rocks_ev **arr, size_t *n, size_t *cap, const rocks_ev *ev)
{
	if (ev_room(arr, *n, cap, 1))
		return -1;
	(*arr)[(*n)++] = *ev;
	return 0;
}

int rocks_evgen_reserve(rocks_evgen *g, size_t n)
{
	if (n == 0)
		return 0;
	if (n > GEN_MAX_EVENTS - g->n)
		return -1;
	if (ev_room(&g->ev, g->n, &g->cap, n) ||
	    hmap_reserve(g->by_obj, n, KEY_OBJ_LEN) ||
	    hmap_reserve(g->by_hist, n, KEY_HIST_PREFIX_LEN) ||
	    hmap_reserve(g->members, n, KEY_MEMBER_LEN))
		return -1;
	return 0;
}

int rocks_evgen_add(rocks_evgen *g, const rocks_ev *src)
{
	uint8_t okey[KEY_OBJ_LEN], hkey[KEY_HIST_PREFIX_LEN];
	uint32_t *head_obj, *head_hist = NULL;
	rocks_ev *ev;

	if (g->n >= GEN_MAX_EVENTS)
		return -1;
	key_obj_encode(okey, &src->obj);
	head_obj = hmap_put(g->by_obj, okey, sizeof okey, NULL);
	if (head_obj == NULL)
		return -1;
	if (src->member != 0) {
		key_hist_prefix_encode(hkey, src->member, src->obj.ktype);
		head_hist = hmap_put(g->by_hist, hkey, sizeof hkey, NULL);
		if (head_hist == NULL)
			return -1;
	}
	if (src->unique) {
		uint8_t mkey[KEY_MEMBER_LEN];
		rocks_mem *m;

		assert(src->member != 0 && (src->d == 1 || src->d == -1));
		key_member_encode(mkey, &src->obj, src->member);
		m = hmap_put(g->members, mkey, sizeof mkey, NULL);
		if (m == NULL)
			return -1;
		m->in = src->d > 0;
		m->at_ms = src->at_ms;
	}
	if (rocks_ev_push(&g->ev, &g->n, &g->cap, src))
		return -1;
	ev = &g->ev[g->n - 1];
	assert(g->n == 1 || g->ev[g->n - 2].seq < ev->seq);
	ev->prev_obj = *head_obj;
	*head_obj = (uint32_t)g->n;
	ev->prev_hist = 0;
	if (head_hist != NULL) {
		ev->prev_hist = *head_hist;
		*head_hist = (uint32_t)g->n;
	}
	return 0;
}

void rocks_evgen_prefetch(const rocks_evgen *g, const rocks_ev *ev, int deep)
{
	uint8_t okey[KEY_OBJ_LEN];

	key_obj_encode(okey, &ev->obj);
	hmap_prefetch(g->by_obj, okey, sizeof okey, deep);
	if (ev->member != 0) {
		uint8_t hkey[KEY_HIST_PREFIX_LEN];

		key_hist_prefix_encode(hkey, ev->member, ev->obj.ktype);
		hmap_prefetch(g->by_hist, hkey, sizeof hkey, deep);
	}
	if (ev->unique) {
		uint8_t mkey[KEY_MEMBER_LEN];

		key_member_encode(mkey, &ev->obj, ev->member);
		hmap_prefetch(g->members, mkey, sizeof mkey, deep);
	}
}

void rocks_events_member_prefetch(rocks *r, const uint8_t *key, int deep)
{
	if (r->ev_dirty != NULL)
		hmap_prefetch(r->ev_dirty->members, key, KEY_MEMBER_LEN,
		              deep);
	if (r->ev_frozen != NULL)
		hmap_prefetch(r->ev_frozen->members, key, KEY_MEMBER_LEN,
		              deep);
}

int rocks_events_member(rocks *r, const uint8_t *key, uint64_t h,
                        rocks_mem *out)
{
	const rocks_evgen *gens[2] = { r->ev_dirty, r->ev_frozen };

	for (int i = 0; i < 2; i++) {
		const rocks_mem *m;

		if (gens[i] == NULL)
			continue;
		m = hmap_get_h(gens[i]->members, key, KEY_MEMBER_LEN, h);
		if (m != NULL) {
			*out = *m;
			return 1;
		}
	}
	return 0;
}

uint64_t rocks_events_walk(rocks *r, int hist, const uint8_t *prefix,
                           int (*fn)(void *arg, const rocks_ev *ev),
                           void *arg)
{
	const rocks_evgen *gens[2] = { r->ev_dirty, r->ev_frozen };
	size_t plen = hist ? KEY_HIST_PREFIX_LEN : KEY_OBJ_LEN;
	uint64_t low = UINT64_MAX;

	for (int i = 0; i < 2; i++) {
		const rocks_evgen *g = gens[i];
		const uint32_t *head;

		if (g == NULL)
			continue;
		head = hmap_get(hist ? g->by_hist : g->by_obj, prefix, plen);
		for (uint32_t at = head ? *head : 0; at != 0;) {
			const rocks_ev *ev = &g->ev[at - 1];

			assert(ev->seq < low);
			low = ev->seq;
			if (fn(arg, ev))
				return low;
			at = hist ? ev->prev_hist : ev->prev_obj;
		}
	}
	return low;
}

/* A map's key, for sorting: a copy of its bytes (sorting on pointers into
 * the map took a cache miss per compare), and a copy of its value, a chain
 * head or a membership (read while the entry is in cache: reading it
 * through a pointer after the sort was a miss per key). */
#define SORT_KEY_MAX KEY_MEMBER_LEN
typedef struct keyref {
	uint8_t key[SORT_KEY_MAX];
	uint32_t u;         /* chains: the newest event, 1-based; memberships:
	                       in */
	int64_t at_ms;      /* memberships */
} keyref;

_Static_assert(sizeof(keyref) == 32, "the sort moves 32 bytes per key");

_Static_assert(KEY_OBJ_LEN <= SORT_KEY_MAX &&
               KEY_HIST_PREFIX_LEN <= SORT_KEY_MAX, "sort keys fit");

/* LSD radix sort of n refs on their first len key bytes, last byte
 * first, through tmp (n refs). A byte that is the same in every key (type
 * ids, the high bytes of ids: most of them) costs a counting pass and no
 * move. The qsort it replaced was a fifth of the checkpoint thread's
 * CPU under random likes. Returns the array that holds the result. */
static keyref *radix_sort(keyref *a, keyref *tmp, size_t n, size_t len)
{
	size_t count[256];

	for (size_t b = len; n > 1 && b-- > 0;) {
		size_t pos = 0;
		keyref *t;

		memset(count, 0, sizeof count);
		for (size_t i = 0; i < n; i++)
			count[a[i].key[b]]++;
		if (count[a[0].key[b]] == n)
			continue;
		for (int d = 0; d < 256; d++) {
			size_t c = count[d];

			count[d] = pos;
			pos += c;
		}
		for (size_t i = 0; i < n; i++)
			tmp[count[a[i].key[b]]++] = a[i];
		t = a;
		a = tmp;
		tmp = t;
	}
	return a;
}

/* The map's keys (all of length len) in byte order, with their values
 * (members 1: rocks_mem; 0: a chain head): *out points into s's scratch,
 * valid until the next call. */
static int keys_sorted(sorted *s, const hmap *m, size_t len, int members,
                       keyref **out, size_t *n)
{
	size_t pos = 0, klen, k = 0;
	const void *key;
	void *val;
	keyref *a, *tmp, *res;

	assert(len <= SORT_KEY_MAX);
	*n = hmap_count(m);
	*out = NULL;
	if (*n == 0)
		return 0;
	if (*n > SIZE_MAX / 2 / sizeof *a)
		return -1;
	if (s->keys_bytes < 2 * *n * sizeof *a) {
		void *p = realloc(s->keys, 2 * *n * sizeof *a);

		if (p == NULL)
			return -1;
		s->keys = p;
		s->keys_bytes = 2 * *n * sizeof *a;
	}
	a = s->keys;
	tmp = a + *n;
	while (hmap_next(m, &pos, &key, &klen, &val)) {
		assert(klen == len && k < *n);
		memcpy(a[k].key, key, len);
		if (members) {
			const rocks_mem *mem = val;

			a[k].u = mem->in;
			a[k].at_ms = mem->at_ms;
		} else {
			a[k].u = *(const uint32_t *)val;
			a[k].at_ms = 0;
		}
		k++;
	}
	res = radix_sort(a, tmp, *n, len);
	*out = res;
#ifndef NDEBUG
	for (size_t i = 1; i < *n; i++)
		assert(memcmp(res[i - 1].key, res[i].key, len) < 0);
#endif
	return 0;
}

/* One chunk's entry: n events of one chain, newest first, under the key
 * of the oldest. */
static void put_chunk(const rocks_ev *const *ev, size_t n,
                      rocksdb_writebatch_t *wb,
                      rocksdb_column_family_handle_t *cf, int hist,
                      const ev_clock *clk)
{
	uint64_t seq[EV_CHUNK_MAX];
	uint8_t k[KEY_LOG_LEN], v[VAL_CHUNK_MAX];
	const rocks_ev *old = ev[n - 1];
	size_t klen, vlen;

	_Static_assert(KEY_HIST_LEN <= KEY_LOG_LEN, "key room");
	assert(n >= 1 && n <= EV_CHUNK_MAX);
	for (size_t i = 0; i < n; i++)
		seq[i] = ev[i]->seq;
	if (hist) {
		val_hist hv[EV_CHUNK_MAX];

		for (size_t i = 0; i < n; i++)
			hv[i] = (val_hist){ ev[i]->obj.ctype, ev[i]->obj.content,
			                    ev[i]->at_ms, ev[i]->d };
		key_hist_encode(k, old->member, old->obj.ktype, old->seq);
		klen = KEY_HIST_LEN;
		vlen = val_hist_chunk_encode(v, seq, hv, n, clk);
	} else {
		val_log lv[EV_CHUNK_MAX];

		for (size_t i = 0; i < n; i++)
			lv[i] = (val_log){ ev[i]->member, ev[i]->at_ms, ev[i]->d,
			                   ev[i]->total };
		key_log_encode(k, &old->obj, old->seq);
		klen = KEY_LOG_LEN;
		vlen = val_log_chunk_encode(v, seq, lv, n, clk);
	}
	rocksdb_writebatch_put_cf(wb, cf, (char *)k, klen, (char *)v, vlen);
}

#define CHAIN_PREFETCH 8

/* One table's entries of the events: log (hist 0) or history (hist 1).
 * Each chain (an object's or a member's events, newest first) becomes
 * chunks of up to EV_CHUNK_MAX events, newest first, which is key order
 * too (seqs are stored inverted): only the distinct objects or members
 * are sorted. Chunks are counted from the chain's oldest event, the
 * newest chunk taking what is left over: a generation may be written
 * twice, by tally_compact() and then by its checkpoint with the events
 * logged since, and the second write must put each event under the key
 * it had in the first (the key of its chunk's oldest) rather than beside
 * it. Not covered: a compaction that wrote a running checkpoint's
 * generation and the next one apart, then a crash (or a failed
 * checkpoint) before that checkpoint landed: the replay joins the two,
 * so the next one's chunks from the compaction stay beside the replay's
 * unless the first held a multiple of EV_CHUNK_MAX of that chain. */
static int write_chains(const rocks_evgen *g, sorted *s,
                        rocksdb_writebatch_t *wb,
                        rocksdb_column_family_handle_t *cf, int hist,
                        const ev_clock *clk)
{
	const rocks_ev *chunk[EV_CHUNK_MAX];
	keyref *refs;
	size_t n;

	if (keys_sorted(s, hist ? g->by_hist : g->by_obj,
	                hist ? KEY_HIST_PREFIX_LEN : KEY_OBJ_LEN, 0, &refs, &n))
		return -1;
	for (size_t i = 0; i < n; i++) {
		size_t c = 0, want = 0;

		/* The chains' newest events lie all over the generation: a
		 * cache miss each, started CHAIN_PREFETCH chains ahead. */
		if (i + CHAIN_PREFETCH < n && refs[i + CHAIN_PREFETCH].u != 0)
			__builtin_prefetch(&g->ev[refs[i + CHAIN_PREFETCH].u -
			                          1]);
		for (uint32_t at = refs[i].u; at != 0; want++) {
			const rocks_ev *ev = &g->ev[at - 1];

			at = hist ? ev->prev_hist : ev->prev_obj;
		}
		if (want == 0)
			continue; /* a head left by a failed add: no events */
		want = (want - 1) % EV_CHUNK_MAX + 1;
		for (uint32_t at = refs[i].u; at != 0;) {
			const rocks_ev *ev = &g->ev[at - 1];

			chunk[c++] = ev;
			if (c == want) {
				put_chunk(chunk, c, wb, cf, hist, clk);
				c = 0;
				want = EV_CHUNK_MAX;
			}
			at = hist ? ev->prev_hist : ev->prev_obj;
		}
		assert(c == 0);
	}
	return 0;
}

int rocks_evgen_write(const rocks_evgen *g, sorted *s,
                      rocksdb_writebatch_t *wb,
                      rocksdb_column_family_handle_t *const *cfs,
                      const ev_clock *clk)
{
	keyref *refs;
	size_t n;

	assert(clk != NULL);
	if (write_chains(g, s, wb, cfs[CF_LOG], 0, clk) ||
	    write_chains(g, s, wb, cfs[CF_HIST], 1, clk) ||
	    keys_sorted(s, g->members, KEY_MEMBER_LEN, 1, &refs, &n))
		return -1;
	for (size_t i = 0; i < n; i++) {
		uint8_t buf[VARINT_MAX];

		if (refs[i].u)
			rocksdb_writebatch_put_cf(wb, cfs[CF_MEMBERS],
			                          (const char *)refs[i].key,
			                          KEY_MEMBER_LEN, (char *)buf,
			                          varint_put_i64(buf,
			                                         refs[i].at_ms));
		else
			rocksdb_writebatch_delete_cf(wb, cfs[CF_MEMBERS],
			                             (const char *)refs[i].key,
			                             KEY_MEMBER_LEN);
	}
	return 0;
}

int rocks_events_copy(rocks *r, rocks_ev **out, size_t *n)
{
	const rocks_evgen *gens[2] = { r->ev_frozen, r->ev_dirty };
	size_t total = 0, k = 0;

	*out = NULL;
	*n = 0;
	for (int i = 0; i < 2; i++)
		total += gens[i] ? gens[i]->n : 0;
	if (total == 0)
		return TALLY_OK;
	*out = malloc(total * sizeof **out);
	if (*out == NULL)
		return TALLY_ENOMEM;
	for (int i = 0; i < 2; i++) {
		if (gens[i] == NULL || gens[i]->n == 0)
			continue;
		memcpy(*out + k, gens[i]->ev, gens[i]->n * sizeof **out);
		k += gens[i]->n;
	}
	*n = total;
	return TALLY_OK;
}
