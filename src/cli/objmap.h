/* objmap.h: running totals per object while importing (or exporting)
 * reference records:
 * a compact open-addressing map from a 48-bit object key (ktype id << 32 |
 * content) to the object's last total, 16 bytes a slot, no allocation per
 * entry, so files with tens of millions of objects fit in memory. */
#ifndef TALLY_CLI_OBJMAP_H
#define TALLY_CLI_OBJMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct objmap_slot {
	uint64_t key; /* OBJMAP_EMPTY when free */
	int64_t total;
} objmap_slot;

typedef struct objmap {
	objmap_slot *slots;
	size_t cap;   /* power of two, or 0 before the first put */
	size_t count;
} objmap;

/* No key of a record is this: its top 16 bits are always zero. */
#define OBJMAP_EMPTY UINT64_MAX

/* The key of an object of a record. */
static inline uint64_t objmap_key(uint16_t ktype, uint64_t content)
{
	return (uint64_t)ktype << 32 | content;
}

void objmap_init(objmap *m);
void objmap_free(objmap *m);
void objmap_clear(objmap *m);
/* The slot of key, inserting one (total 0, *inserted 1) if absent. NULL
 * when out of memory. Valid until the next put. */
objmap_slot *objmap_put(objmap *m, uint64_t key, int *inserted);

#endif
