/* objmap.c: the object map of import and export. Linear probing at a load of at most
 * one half keeps probes short; keys are already well spread in their low
 * bits (content ids), a multiplicative mix spreads sequential ones. */
#include "objmap.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* Small: an export keeps a map per content type, most of them small. */
#define OBJMAP_CAP_MIN 16

void objmap_init(objmap *m)
{
	memset(m, 0, sizeof *m);
}

void objmap_free(objmap *m)
{
	free(m->slots);
	objmap_init(m);
}

void objmap_clear(objmap *m)
{
	for (size_t i = 0; i < m->cap; i++)
		m->slots[i].key = OBJMAP_EMPTY;
	m->count = 0;
}

static size_t slot_of(uint64_t key, size_t cap)
{
	/* Fibonacci hashing: the top bits of key * 2^64/phi. */
	return (size_t)((key * UINT64_C(0x9e3779b97f4a7c15)) >> 32) &
	       (cap - 1);
}

static objmap_slot *find(objmap_slot *slots, size_t cap, uint64_t key)
{
	size_t i = slot_of(key, cap);

	while (slots[i].key != OBJMAP_EMPTY && slots[i].key != key)
		i = (i + 1) & (cap - 1);
	return &slots[i];
}

static int grow(objmap *m)
{
	size_t cap = m->cap ? m->cap * 2 : OBJMAP_CAP_MIN;
	objmap_slot *s;

	if (cap > SIZE_MAX / sizeof *s)
		return -1;
	s = malloc(cap * sizeof *s);
	if (s == NULL)
		return -1;
	for (size_t i = 0; i < cap; i++)
		s[i].key = OBJMAP_EMPTY;
	for (size_t i = 0; i < m->cap; i++)
		if (m->slots[i].key != OBJMAP_EMPTY)
			*find(s, cap, m->slots[i].key) = m->slots[i];
	free(m->slots);
	m->slots = s;
	m->cap = cap;
	return 0;
}

objmap_slot *objmap_put(objmap *m, uint64_t key, int *inserted)
{
	objmap_slot *s;

	assert(key != OBJMAP_EMPTY);
	if ((m->count + 1) * 2 > m->cap && grow(m) != 0)
		return NULL;
	s = find(m->slots, m->cap, key);
	*inserted = s->key == OBJMAP_EMPTY;
	if (*inserted) {
		s->key = key;
		s->total = 0;
		m->count++;
	}
	return s;
}
