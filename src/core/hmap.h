/* hmap.h: an open-addressing hash map from byte-string keys to fixed-size
 * values, for the engine's and store's in-memory tables (value caches,
 * batch overlays, tokens, names). Not thread-safe: one owner at a time. */
#ifndef TALLY_CORE_HMAP_H
#define TALLY_CORE_HMAP_H

#include <stddef.h>
#include <stdint.h>

/* Keys are 0..HMAP_KEY_MAX bytes of anything. The empty key (len 0) is an
 * ordinary key, distinct from every other; key may be NULL when len is 0. */
#define HMAP_KEY_MAX 1024

typedef struct hmap hmap;

/* Create a map whose values are value_size bytes (1..256). Values are
 * aligned for any type (max_align_t). Returns NULL on allocation failure. */
hmap *hmap_create(size_t value_size);
/* Like hmap_create, for a map emptied often by hmap_clear and rarely by
 * hmap_del: entries are carved from 64 KiB blocks that the map keeps, and
 * reuses after hmap_clear, instead of one malloc and free each. An entry
 * removed by hmap_del keeps its memory until the next hmap_clear. */
hmap *hmap_create_arena(size_t value_size);
/* Free the map and every entry; NULL is a no-op. */
void hmap_free(hmap *m);

/* Value of key, or NULL (also for a key longer than HMAP_KEY_MAX). The
 * pointer is valid until the next put, del or clear. */
void *hmap_get(const hmap *m, const void *key, size_t len);
/* Value slot of key, inserting a zero-filled one if absent (*inserted set
 * to 1, else 0; inserted may be NULL). NULL on allocation failure or a key
 * longer than HMAP_KEY_MAX. Valid until the next put, del or clear. */
void *hmap_put(hmap *m, const void *key, size_t len, int *inserted);
/* Make room for n more entries, none with a key longer than len bytes,
 * so that the next n inserts by hmap_put (with no hmap_del between)
 * allocate nothing: the table grows now if they would make it grow, and
 * an arena map keeps enough spare blocks for their entries. A map made by
 * hmap_create allocates each entry at its insert still, so only its
 * table is made ready. For a caller that must not fail after a point of
 * no return (the store's commit after its journal write). 0, or -1 when
 * out of memory (the map holds what it held). */
int hmap_reserve(hmap *m, size_t n, size_t len);
/* Remove key; returns 1 if it was there. */
int hmap_del(hmap *m, const void *key, size_t len);
/* Remove every entry. The table keeps its capacity, unless the map asked
 * for hmap_shrink_on_clear() and the last HMAP_SHRINK_AFTER (hmap.c)
 * clears each found it at most an eighth as full as its table allows:
 * then it gets a smaller one. */
void hmap_clear(hmap *m);
/* Let hmap_clear() give back a table grown by a burst, for a small map
 * cleared often (a batch overlay); a big map would pay for regrowing. */
void hmap_shrink_on_clear(hmap *m);
size_t hmap_count(const hmap *m);
/* Slots in the table (a power of two): what iteration and hmap_clear
 * walk. */
size_t hmap_capacity(const hmap *m);

/* Hint that key is about to be looked up: with deep == 0, start loading
 * the slot where its probe begins; with deep != 0 (a second pass, once the
 * slots are in), start loading the entry of the slot holding key. Changes
 * nothing and never faults, so a batch can overlap the cache misses of all
 * its lookups instead of taking them one after another. */
void hmap_prefetch(const hmap *m, const void *key, size_t len, int deep);

/* Iterate: start with *pos = 0; each call returns 1 and sets key, len and
 * value of the next entry, or 0 at the end. The map must not change during
 * the walk, except that hmap_del of the entry just returned is allowed. */
int hmap_next(const hmap *m, size_t *pos, const void **key, size_t *len,
              void **value);

/* 64-bit hash of bytes (xxh3). */
uint64_t hash_bytes(const void *p, size_t len);

/* The same as the forms above, for a key whose hash_bytes() the caller
 * has already (hash must be it: debug builds check): a key looked up in
 * several maps, or several times, is hashed once. hmap_next_h also gives
 * each entry's hash. hmap_prefetch has no such form, on purpose: hashing
 * there spaces a batch's prefetches, and without it the misses came
 * back in the lookups (docs/PERFORMANCE.md, "Instructions per command:
 * lookups trimmed"). */
void *hmap_get_h(const hmap *m, const void *key, size_t len, uint64_t hash);
void *hmap_put_h(hmap *m, const void *key, size_t len, uint64_t hash,
                 int *inserted);
int hmap_del_h(hmap *m, const void *key, size_t len, uint64_t hash);
int hmap_next_h(const hmap *m, size_t *pos, const void **key, size_t *len,
                void **value, uint64_t *hash);

#endif
