/* rocks_sorted.h: a checkpoint's values collected, then handed to the
 * RocksDB write batch sorted by column family and key (events are sorted
 * by rocks_events.c, along their chains). RocksDB's memtable inserts
 * reuse the previous insert's skiplist position, so sorted inserts cost a
 * short local search instead of a full descent each (the profile of a like
 * load spent half its time in that descent). */
#ifndef TALLY_ROCKS_SORTED_H
#define TALLY_ROCKS_SORTED_H

#include <rocksdb/c.h>
#include <stddef.h>
#include <stdint.h>

#include "core/keys.h"

enum { SORTED_PUT = 0, SORTED_MERGE, SORTED_DELETE };

/* Longest key kept inside an entry; longer keys are referenced. */
#define SORTED_KEY_INLINE KEY_LOG_LEN

typedef struct sorted_ent {
	const uint8_t *key;      /* NULL: the key is kbuf */
	uint32_t klen;
	uint8_t cf;
	uint8_t kind;            /* SORTED_PUT, _MERGE, _DELETE */
	uint8_t vlen;
	uint8_t kbuf[SORTED_KEY_INLINE];
	uint8_t val[VAL_EVENT_MAX];
} sorted_ent;

typedef struct sorted {
	sorted_ent *ents;
	size_t n, cap;
	const sorted_ent **order;  /* sort scratch */
	size_t order_cap;
	/* The events' key sort's scratch (rocks_events.c), kept from one
	 * checkpoint to the next: fresh megabytes each time were page
	 * faults. */
	void *keys;
	size_t keys_bytes;
} sorted;

void sorted_free(sorted *s);
/* Add an entry. A key up to SORTED_KEY_INLINE bytes is copied; a longer
 * one must stay valid until sorted_flush(). Returns 0, or -1 when out of
 * memory. */
int sorted_add(sorted *s, int cf, int kind, const void *key, size_t klen,
               const void *val, size_t vlen);
/* Write every entry into wb, ordered by (cf, key), and empty s. Returns
 * 0, or -1 when out of memory (wb then holds nothing of s). */
int sorted_flush(sorted *s, rocksdb_writebatch_t *wb,
                 rocksdb_column_family_handle_t *const *cfs);
void sorted_clear(sorted *s);

#endif
