/* rocks_sorted.c: a batch's store entries, sorted before they reach the
 * RocksDB write batch (see rocks_sorted.h for why). */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "store/rocks_sorted.h"

void sorted_free(sorted *s)
{
	free(s->ents);
	free(s->order);
	free(s->keys);
	memset(s, 0, sizeof *s);
}

void sorted_clear(sorted *s)
{
	s->n = 0;
}

int sorted_add(sorted *s, int cf, int kind, const void *key, size_t klen,
               const void *val, size_t vlen)
{
	sorted_ent *e;

	assert(vlen <= VAL_EVENT_MAX);
	assert(klen > 0);
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 4096;
		sorted_ent *p = realloc(s->ents, cap * sizeof *p);

		if (p == NULL)
			return -1;
		s->ents = p;
		s->cap = cap;
	}
	e = &s->ents[s->n++];
	e->cf = (uint8_t)cf;
	e->kind = (uint8_t)kind;
	e->klen = (uint32_t)klen;
	e->vlen = (uint8_t)vlen;
	if (klen <= SORTED_KEY_INLINE) {
		memcpy(e->kbuf, key, klen);
		e->key = NULL;
	} else {
		e->key = key;
	}
	if (vlen)
		memcpy(e->val, val, vlen);
	return 0;
}

static const uint8_t *ent_key(const sorted_ent *e)
{
	return e->key ? e->key : e->kbuf;
}

static int ent_cmp(const void *a, const void *b)
{
	const sorted_ent *x = *(const sorted_ent *const *)a;
	const sorted_ent *y = *(const sorted_ent *const *)b;
	size_t n = x->klen < y->klen ? x->klen : y->klen;
	int c;

	if (x->cf != y->cf)
		return x->cf < y->cf ? -1 : 1;
	c = memcmp(ent_key(x), ent_key(y), n);
	if (c != 0)
		return c;
	return (x->klen > y->klen) - (x->klen < y->klen);
}

int sorted_flush(sorted *s, rocksdb_writebatch_t *wb,
                 rocksdb_column_family_handle_t *const *cfs)
{
	if (s->n == 0)
		return 0;
	if (s->n > s->order_cap) {
		const sorted_ent **p = realloc(s->order, s->n * sizeof *p);

		if (p == NULL)
			return -1;
		s->order = p;
		s->order_cap = s->n;
	}
	for (size_t i = 0; i < s->n; i++)
		s->order[i] = &s->ents[i];
	/* Keys within one batch are distinct per family (the overlays hold
	 * one entry per key), so the order of equal keys cannot matter. */
	qsort(s->order, s->n, sizeof *s->order, ent_cmp);
	for (size_t i = 0; i < s->n; i++) {
		const sorted_ent *e = s->order[i];
		const char *k = (const char *)ent_key(e);

		assert(i == 0 || ent_cmp(&s->order[i - 1], &s->order[i]) < 0);
		switch (e->kind) {
		case SORTED_PUT:
			rocksdb_writebatch_put_cf(wb, cfs[e->cf], k, e->klen,
			                          (const char *)e->val, e->vlen);
			break;
		case SORTED_MERGE:
			rocksdb_writebatch_merge_cf(wb, cfs[e->cf], k, e->klen,
			                            (const char *)e->val, e->vlen);
			break;
		default:
			rocksdb_writebatch_delete_cf(wb, cfs[e->cf], k, e->klen);
		}
	}
	s->n = 0;
	return 0;
}
