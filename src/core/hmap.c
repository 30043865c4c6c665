/* hmap.c: open-addressing hash map with linear probing, on the hot write
 * path. Slots hold the full 64-bit hash so a probe compares keys only when
 * hashes match; deletes leave tombstones so iteration can delete safely. */
#include "core/hmap.h"

#include <assert.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Inline xxh3 into this file: keys are short, and a call into the shared
 * library costs as much as hashing them. Symbols are renamed, so this does
 * not clash with the linked libxxhash. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#define HMAP_CAP_MIN 16 /* power of two */
#define HMAP_VALUE_MAX 256
/* Load limit, live entries plus tombstones: LOAD_NUM / LOAD_DEN. */
#define HMAP_LOAD_NUM 7
#define HMAP_LOAD_DEN 10

/* A slot is live when e != NULL. Otherwise hash tells empty from tombstone;
 * a probe stops at empty but walks over a tombstone. */
#define SLOT_EMPTY 0
#define SLOT_TOMB 1

typedef struct hmap_entry {
	size_t len;
	/* then padding up to ENTRY_VALUE_OFF, the value, the key bytes */
} hmap_entry;

/* The value sits at a max_align_t boundary so callers may store any type. */
#define ENTRY_VALUE_OFF                                                     \
	((sizeof(hmap_entry) + alignof(max_align_t) - 1) /                  \
	 alignof(max_align_t) * alignof(max_align_t))

typedef struct hmap_slot {
	uint64_t hash;
	hmap_entry *e;
} hmap_slot;

/* An arena map carves its entries from blocks of this many bytes, which it
 * keeps across hmap_clear(): under random likes, malloc and free of
 * entries were a third of the committer's CPU (free lists scattered over
 * memory, a cache miss per call, and consolidation). */
#define HMAP_BLOCK_BYTES (64 * 1024)

/* Big maps (a million counters or more) are looked up at random, and on a
 * VM each lookup's TLB miss is a two-level page walk, of which a core
 * runs only one or two at once: prefetches queue behind them. Slot tables
 * of this size or more, and an arena's blocks once it has this much in
 * small ones, are aligned to it and asked of the kernel as transparent
 * huge pages (madvise; where THP is off or "never", plain pages).
 * Committer CPU under random INCR over 1M keys: 15% less. */
#define HMAP_HUGE_BYTES (2u * 1024 * 1024)

typedef struct hmap_block {
	struct hmap_block *next;
	size_t used;            /* bytes of data carved */
	size_t cap;             /* bytes of data */
	max_align_t data[];
} hmap_block;

/* The largest entry, which any block holds. */
#define HMAP_BLOCK_DATA (HMAP_BLOCK_BYTES - sizeof(hmap_block))

struct hmap {
	hmap_slot *slots;
	size_t cap;   /* power of two */
	size_t count; /* live entries */
	size_t tombs; /* tombstones */
	size_t value_size;
	int arena;
	hmap_block *blocks; /* arena: in use, the one being carved first */
	hmap_block *spare;  /* arena: emptied by hmap_clear, for reuse */
	size_t block_bytes; /* arena: of all its blocks, in use or spare */
	int shrinks;           /* hmap_shrink_on_clear() was called */
	unsigned small_clears; /* hmap_clear()s in a row that found it small */
	size_t small_peak;     /* the most entries any of those found */
};

/* A map that asked for it (hmap_shrink_on_clear()), cleared this many
 * times in a row while holding at most an eighth of what its table was
 * grown for, gets a smaller table. A batch overlay (cleared after every
 * batch) keeps the table of its largest batch, and iteration and clearing
 * walk every slot of it: after one burst, each small batch paid for the
 * burst's table. Waiting for a run of small clears keeps maps whose sizes
 * alternate from regrowing each time; a map that does shrink regrows by
 * doubling, as it first grew, which is why big maps (the store's tables
 * of values, cleared at checkpoints) do not ask. Only the slot table is
 * given back: an arena map keeps its blocks for reuse, as it does at
 * every clear. */
#define HMAP_SHRINK_AFTER 16

uint64_t hash_bytes(const void *p, size_t len)
{
	assert(p != NULL || len == 0);
	return XXH3_64bits(p, len);
}

static void *entry_value(hmap_entry *e)
{
	return (char *)e + ENTRY_VALUE_OFF;
}

static const void *entry_key(const hmap *m, const hmap_entry *e)
{
	return (const char *)e + ENTRY_VALUE_OFF + m->value_size;
}

/* n slots in use in a table of cap stay within the load limit. */
static int within_load(size_t n, size_t cap)
{
	return n * HMAP_LOAD_DEN <= cap * HMAP_LOAD_NUM;
}

static int slot_is_empty(const hmap_slot *s)
{
	return s->e == NULL && s->hash == SLOT_EMPTY;
}

/* bytes of memory, HMAP_HUGE_BYTES-aligned and advised as huge pages when
 * that large; zeroed when zero is set. NULL when out of memory. Freed
 * with free(). */
static void *mem_alloc(size_t bytes, int zero)
{
	void *p;

	if (bytes < HMAP_HUGE_BYTES)
		return zero ? calloc(1, bytes) : malloc(bytes);
	bytes = (bytes + HMAP_HUGE_BYTES - 1) & ~(size_t)(HMAP_HUGE_BYTES - 1);
	p = aligned_alloc(HMAP_HUGE_BYTES, bytes);
	if (p == NULL)
		return NULL;
#ifdef MADV_HUGEPAGE
	/* Advice only: without it the pages are small, nothing else. */
	(void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
	if (zero)
		memset(p, 0, bytes);
	return p;
}

static hmap *create(size_t value_size, int arena)
{
	assert(value_size >= 1);
	assert(value_size <= HMAP_VALUE_MAX);
	if (value_size < 1 || value_size > HMAP_VALUE_MAX)
		return NULL;
	hmap *m = calloc(1, sizeof(*m));
	if (m == NULL)
		return NULL;
	/* calloc: every slot starts empty (NULL entry, hash SLOT_EMPTY). */
	m->slots = calloc(HMAP_CAP_MIN, sizeof(hmap_slot));
	if (m->slots == NULL) {
		free(m);
		return NULL;
	}
	m->cap = HMAP_CAP_MIN;
	m->value_size = value_size;
	m->arena = arena;
	return m;
}

hmap *hmap_create(size_t value_size)
{
	return create(value_size, 0);
}

hmap *hmap_create_arena(size_t value_size)
{
	return create(value_size, 1);
}

static size_t entry_bytes(const hmap *m, size_t len)
{
	size_t n = ENTRY_VALUE_OFF + m->value_size + len;

	return (n + alignof(max_align_t) - 1) / alignof(max_align_t) *
	       alignof(max_align_t);
}

/* A new empty block for an arena map: 64 KiB ones until the map holds
 * 2 MiB of them, then huge ones. NULL when out of memory. */
static hmap_block *block_new(hmap *m)
{
	size_t size = m->block_bytes < HMAP_HUGE_BYTES ? HMAP_BLOCK_BYTES
	                                               : HMAP_HUGE_BYTES;
	hmap_block *b = mem_alloc(size, 0);

	if (b == NULL)
		return NULL;
	b->cap = size - sizeof(hmap_block);
	b->used = 0;
	m->block_bytes += size;
	return b;
}

static hmap_entry *entry_alloc(hmap *m, size_t bytes)
{
	hmap_block *b = m->blocks;

	if (!m->arena)
		return malloc(bytes);
	assert(bytes <= HMAP_BLOCK_DATA);
	if (b == NULL || b->cap - b->used < bytes) {
		b = m->spare;
		if (b != NULL) {
			m->spare = b->next;
		} else {
			b = block_new(m);
			if (b == NULL)
				return NULL;
		}
		assert(b->cap >= HMAP_BLOCK_DATA);
		b->used = 0;
		b->next = m->blocks;
		m->blocks = b;
	}
	b->used += bytes;
	return (hmap_entry *)((char *)b->data + b->used - bytes);
}

static void entry_release(const hmap *m, hmap_entry *e)
{
	if (!m->arena)
		free(e);
	/* An arena's entry is given back with its block, at hmap_clear. */
}

static void free_entries(hmap *m)
{
	if (!m->arena) {
		for (size_t i = 0; i < m->cap; i++)
			free(m->slots[i].e);
		return;
	}
	while (m->blocks != NULL) {
		hmap_block *b = m->blocks;

		m->blocks = b->next;
		b->next = m->spare;
		m->spare = b;
	}
}

void hmap_free(hmap *m)
{
	if (m == NULL)
		return;
	assert(m->slots != NULL);
	free_entries(m);
	while (m->spare != NULL) {
		hmap_block *b = m->spare;

		m->spare = b->next;
		free(b);
	}
	free(m->slots);
	free(m);
}

/* Smallest table (a power of two, at least HMAP_CAP_MIN) that takes count
 * entries and one more within the load limit, as make_room() grows it. */
static size_t cap_for(size_t count)
{
	size_t cap = HMAP_CAP_MIN;

	while (!within_load(count + 1, cap))
		cap *= 2;
	return cap;
}

/* After a run of small clears, a new empty table twice the size that
 * takes the run's largest count; 0 if it replaced the old one, -1 if not
 * (out of memory: the old one stays, and is emptied by the caller). */
static int shrink(hmap *m)
{
	size_t cap = cap_for(m->small_peak) * 2;
	hmap_slot *slots;

	if (cap >= m->cap)
		return -1;
	slots = mem_alloc(cap * sizeof(hmap_slot), 1);
	if (slots == NULL)
		return -1;
	free(m->slots);
	m->slots = slots;
	m->cap = cap;
	return 0;
}

/* Count a clear that found had entries towards a run of small ones; 1 when
 * the run is long enough and the table was replaced by a smaller, empty
 * one. */
static int shrink_after_clear(hmap *m, size_t had)
{
	if (!m->shrinks || m->cap <= HMAP_CAP_MIN ||
	    cap_for(had) > m->cap / 8) {
		m->small_clears = 0;
		return 0;
	}
	if (m->small_clears++ == 0 || had > m->small_peak)
		m->small_peak = had;
	if (m->small_clears < HMAP_SHRINK_AFTER)
		return 0;
	m->small_clears = 0;
	return shrink(m) == 0;
}

void hmap_clear(hmap *m)
{
	assert(m != NULL);
	assert(m->slots != NULL);
	size_t had = m->count;

	free_entries(m);
	m->count = 0;
	m->tombs = 0;
	if (!shrink_after_clear(m, had))
		memset(m->slots, 0, m->cap * sizeof(hmap_slot));
}

void hmap_shrink_on_clear(hmap *m)
{
	assert(m != NULL);
	m->shrinks = 1;
}

size_t hmap_capacity(const hmap *m)
{
	assert(m != NULL);
	return m->cap;
}

size_t hmap_count(const hmap *m)
{
	assert(m != NULL);
	assert(m->count + m->tombs < m->cap);
	return m->count;
}

static int key_matches(const hmap *m, const hmap_slot *s, uint64_t hash,
                       const void *key, size_t len)
{
	assert(s->e != NULL);
	if (s->hash != hash || s->e->len != len)
		return 0;
	return len == 0 || memcmp(entry_key(m, s->e), key, len) == 0;
}

/* Index of the live slot holding key, or m->cap if absent. When absent and
 * free_at is not NULL, *free_at is where an insert belongs: the first
 * tombstone on the probe path, else the empty slot that ended it. */
static size_t find(const hmap *m, uint64_t hash, const void *key, size_t len,
                   size_t *free_at)
{
	size_t mask = m->cap - 1;
	size_t tomb = m->cap;
	size_t i = (size_t)hash & mask;
	/* Bounded: the load limit guarantees an empty slot within cap steps. */
	for (size_t n = 0; n < m->cap; n++, i = (i + 1) & mask) {
		const hmap_slot *s = &m->slots[i];
		if (s->e != NULL) {
			if (key_matches(m, s, hash, key, len))
				return i;
		} else if (s->hash == SLOT_EMPTY) {
			if (free_at != NULL)
				*free_at = tomb < m->cap ? tomb : i;
			return m->cap;
		} else if (tomb == m->cap) {
			tomb = i;
		}
	}
	assert(0 && "hmap: no empty slot");
	return m->cap;
}

void *hmap_get_h(const hmap *m, const void *key, size_t len, uint64_t hash)
{
	assert(m != NULL);
	assert(key != NULL || len == 0);
	if (len > HMAP_KEY_MAX)
		return NULL; /* never stored */
	assert(hash == hash_bytes(key, len));
	size_t i = find(m, hash, key, len, NULL);
	return i < m->cap ? entry_value(m->slots[i].e) : NULL;
}

void *hmap_get(const hmap *m, const void *key, size_t len)
{
	return hmap_get_h(m, key, len,
	                  len > HMAP_KEY_MAX ? 0 : hash_bytes(key, len));
}

/* Probes this far from the home slot are looked at by a deep prefetch; a
 * key further away is rare at the load limit and merely not prefetched. */
#define PREFETCH_PROBES 4

void hmap_prefetch(const hmap *m, const void *key, size_t len, int deep)
{
	assert(m != NULL);
	assert(key != NULL || len == 0);
	if (len > HMAP_KEY_MAX)
		return;
	uint64_t hash = hash_bytes(key, len);
	size_t mask = m->cap - 1;
	size_t i = (size_t)hash & mask;

	if (!deep) {
		__builtin_prefetch(&m->slots[i]);
		return;
	}
	for (size_t n = 0; n < PREFETCH_PROBES; n++, i = (i + 1) & mask) {
		const hmap_slot *s = &m->slots[i];

		if (s->e != NULL && s->hash == hash) {
			/* An entry may straddle two cache lines: the value
			 * sits in the first, the key ends in the last. */
			__builtin_prefetch(s->e);
			__builtin_prefetch((const char *)entry_key(m, s->e) +
			                   (len > 0 ? len - 1 : 0));
			return;
		}
		if (slot_is_empty(s))
			return;
	}
}

/* Move every live entry into a fresh table of new_cap slots, which drops
 * the tombstones. Entries are not copied, only their slots. */
static int rehash(hmap *m, size_t new_cap)
{
	assert((new_cap & (new_cap - 1)) == 0);
	assert(m->count < new_cap);
	hmap_slot *slots = mem_alloc(new_cap * sizeof(hmap_slot), 1);
	if (slots == NULL)
		return -1;
	size_t mask = new_cap - 1;
	for (size_t i = 0; i < m->cap; i++) {
		if (m->slots[i].e == NULL)
			continue;
		size_t j = (size_t)m->slots[i].hash & mask;
		while (slots[j].e != NULL)
			j = (j + 1) & mask;
		slots[j] = m->slots[i];
	}
	free(m->slots);
	m->slots = slots;
	m->cap = new_cap;
	m->tombs = 0;
	return 0;
}

/* Make room for one more entry: double when live entries alone pass half
 * the load limit, otherwise rehash in place to sweep tombstones out.
 * Returns 0 when nothing moved, 1 after a rehash, -1 on failure. */
static int make_room(hmap *m)
{
	assert(m->count + m->tombs < m->cap);
	size_t used = m->count + m->tombs + 1;
	if (within_load(used, m->cap))
		return 0;
	size_t new_cap = m->cap;
	/* Live entries past half the limit: double, else sweep tombstones. */
	if (!within_load(m->count + 1, m->cap / 2)) {
		if (m->cap > SIZE_MAX / 2 / sizeof(hmap_slot))
			return -1; /* the table could not be addressed */
		new_cap = m->cap * 2;
	}
	return rehash(m, new_cap) == 0 ? 1 : -1;
}

/* Spare blocks enough that n entries of at most bytes each are carved
 * without an allocation: each fits whole in the rest of the block being
 * carved or in a spare block, so a block takes at least its space over
 * bytes of them. */
static int blocks_reserve(hmap *m, size_t n, size_t bytes)
{
	size_t fit = 0;

	assert(m->arena && bytes > 0 && bytes <= HMAP_BLOCK_DATA);
	if (m->blocks != NULL)
		fit = (m->blocks->cap - m->blocks->used) / bytes;
	for (hmap_block *b = m->spare; b != NULL && fit < n; b = b->next)
		fit += b->cap / bytes;
	while (fit < n) {
		hmap_block *b = block_new(m);

		if (b == NULL)
			return -1;
		b->next = m->spare;
		m->spare = b;
		fit += b->cap / bytes;
	}
	return 0;
}

int hmap_reserve(hmap *m, size_t n, size_t len)
{
	assert(m != NULL);
	assert(len <= HMAP_KEY_MAX);
	if (n == 0)
		return 0;
	if (n > SIZE_MAX / HMAP_LOAD_DEN - m->count - m->tombs)
		return -1;
	/* As make_room() would find it before each of the n inserts. */
	if (!within_load(m->count + m->tombs + n, m->cap)) {
		size_t cap = m->cap;

		while (!within_load(m->count + n, cap)) {
			if (cap > SIZE_MAX / 2 / sizeof(hmap_slot))
				return -1;
			cap *= 2;
		}
		if (rehash(m, cap) != 0)
			return -1;
	}
	return m->arena ? blocks_reserve(m, n, entry_bytes(m, len)) : 0;
}

static hmap_entry *entry_new(hmap *m, const void *key, size_t len)
{
	assert(len <= HMAP_KEY_MAX);
	hmap_entry *e = entry_alloc(m, entry_bytes(m, len));
	if (e == NULL)
		return NULL;
	e->len = len;
	memset(entry_value(e), 0, m->value_size);
	if (len > 0)
		memcpy((char *)entry_value(e) + m->value_size, key, len);
	return e;
}

void *hmap_put(hmap *m, const void *key, size_t len, int *inserted)
{
	return hmap_put_h(m, key, len,
	                  len > HMAP_KEY_MAX ? 0 : hash_bytes(key, len),
	                  inserted);
}

void *hmap_put_h(hmap *m, const void *key, size_t len, uint64_t hash,
                 int *inserted)
{
	assert(m != NULL);
	assert(key != NULL || len == 0);
	if (inserted != NULL)
		*inserted = 0;
	if (len > HMAP_KEY_MAX)
		return NULL;
	assert(hash == hash_bytes(key, len));
	size_t at = m->cap;
	size_t i = find(m, hash, key, len, &at);
	if (i < m->cap)
		return entry_value(m->slots[i].e);
	int room = make_room(m);
	if (room < 0)
		return NULL;
	if (room > 0)
		find(m, hash, key, len, &at); /* slots moved: probe again */
	hmap_entry *e = entry_new(m, key, len);
	if (e == NULL)
		return NULL;
	assert(at < m->cap && m->slots[at].e == NULL);
	if (m->slots[at].hash == SLOT_TOMB)
		m->tombs--;
	m->slots[at].hash = hash;
	m->slots[at].e = e;
	m->count++;
	if (inserted != NULL)
		*inserted = 1;
	return entry_value(e);
}

/* Turn slot i into a tombstone, or into an empty slot when the next slot is
 * empty (no probe can pass through it then); in that case tombstones just
 * before it are dead too. Never moves a live entry, so iteration is safe. */
static void slot_release(hmap *m, size_t i)
{
	assert(i < m->cap);
	assert(m->slots[i].e == NULL);
	size_t mask = m->cap - 1;
	if (!slot_is_empty(&m->slots[(i + 1) & mask])) {
		m->slots[i].hash = SLOT_TOMB;
		m->tombs++;
		return;
	}
	m->slots[i].hash = SLOT_EMPTY;
	for (size_t n = 1; n < m->cap; n++) {
		hmap_slot *s = &m->slots[(i - n) & mask];
		if (s->e != NULL || s->hash != SLOT_TOMB)
			break;
		s->hash = SLOT_EMPTY;
		m->tombs--;
	}
}

int hmap_del(hmap *m, const void *key, size_t len)
{
	return hmap_del_h(m, key, len,
	                  len > HMAP_KEY_MAX ? 0 : hash_bytes(key, len));
}

int hmap_del_h(hmap *m, const void *key, size_t len, uint64_t hash)
{
	assert(m != NULL);
	assert(key != NULL || len == 0);
	if (len > HMAP_KEY_MAX)
		return 0;
	assert(hash == hash_bytes(key, len));
	size_t i = find(m, hash, key, len, NULL);
	if (i == m->cap)
		return 0;
	entry_release(m, m->slots[i].e);
	m->slots[i].e = NULL;
	m->count--;
	slot_release(m, i);
	return 1;
}

int hmap_next(const hmap *m, size_t *pos, const void **key, size_t *len,
              void **value)
{
	uint64_t hash;

	return hmap_next_h(m, pos, key, len, value, &hash);
}

int hmap_next_h(const hmap *m, size_t *pos, const void **key, size_t *len,
                void **value, uint64_t *hash)
{
	assert(m != NULL);
	assert(pos != NULL && key != NULL && len != NULL && value != NULL);
	assert(hash != NULL);
	for (size_t i = *pos; i < m->cap; i++) {
		hmap_entry *e = m->slots[i].e;
		if (e == NULL)
			continue;
		*key = entry_key(m, e);
		*len = e->len;
		*value = entry_value(e);
		*hash = m->slots[i].hash;
		*pos = i + 1;
		return 1;
	}
	*pos = m->cap;
	return 0;
}
