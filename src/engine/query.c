/* query.c: the read side of the public API. Reads run on the caller's
 * thread against the store; names resolve through the schema. A read after
 * an acknowledged write sees it: the store applied the write before the
 * acknowledgement, and striped cells are summed in under the fold lock. */
#include <assert.h>
#include <string.h>

#include "engine/engine.h"

/* Resolve an object's names. *absent is set when the content type was
 * never written: such an object has no events. */
static int obj_resolve(tally *t, const char *ctype, const char *ktype,
                       uint64_t content, key_obj *o, int *mode, int *absent)
{
	int rc;

	if (t == NULL || ctype == NULL || ktype == NULL)
		return TALLY_EINVAL;
	rc = schema_type(t, ktype, &o->ktype, mode);
	if (rc != TALLY_OK)
		return rc;
	rc = schema_ctype_read(t, ctype, &o->ctype);
	*absent = rc == TALLY_ENOTFOUND;
	o->content = content;
	return *absent ? TALLY_OK : rc;
}

static int key_check(const void *key, size_t len)
{
	if (key == NULL)
		return TALLY_EINVAL;
	return len == 0 || len > TALLY_KEY_MAX ? TALLY_EKEYSIZE : TALLY_OK;
}

/* A stored value plus the adds still in its striped cells. A sum past
 * int64 (a tally_set() near the limit racing adds that were taken
 * before it) leaves the value alone: the fold drops those adds and
 * counts them (tally_stats.fold_overflows). */
static int64_t with_cells(int64_t v, int64_t cells)
{
	int64_t sum;

	return __builtin_add_overflow(v, cells, &sum) ? v : sum;
}

static int get_one(tally *t, const void *key, size_t len, int64_t *out)
{
	int rc;

	if (t->opt.durability != TALLY_DURABILITY_ASYNC) {
		rc = eng_store_hold(t);
		if (rc == TALLY_OK) {
			rc = t->st->vt->get(t->st, key, len, out);
			eng_store_release(t);
		}
		return rc;
	}
	pthread_rwlock_rdlock(&t->fold_lock);
	rc = eng_store_hold(t);
	if (rc == TALLY_OK) {
		rc = t->st->vt->get(t->st, key, len, out);
		eng_store_release(t);
	}
	if (rc == TALLY_OK || rc == TALLY_ENOTFOUND) {
		int64_t cells = stripes_sum(t, key, len);

		/* Adds folded nowhere yet still make the counter exist. */
		if (cells != 0 || rc == TALLY_OK) {
			*out = with_cells(*out, cells);
			rc = TALLY_OK;
		}
	}
	pthread_rwlock_unlock(&t->fold_lock);
	return rc;
}

int tally_get(tally *t, const void *key, size_t key_len, int64_t *out)
{
	int rc;

	if (t == NULL || out == NULL)
		return TALLY_EINVAL;
	*out = 0;
	rc = key_check(key, key_len);
	return rc == TALLY_OK ? get_one(t, key, key_len, out) : rc;
}

/* tally_mget() through the store's own multi-read: its lookups overlap
 * instead of following one another. In async mode the striped cells are
 * added as get_one() adds them, under the same lock throughout. */
static int mget_batched(tally *t, const void *const *keys,
                        const size_t *lens, size_t n, int64_t *values,
                        int *found)
{
	int async = t->opt.durability == TALLY_DURABILITY_ASYNC;
	int rc;

	if (async)
		pthread_rwlock_rdlock(&t->fold_lock);
	rc = eng_store_hold(t);
	if (rc == TALLY_OK) {
		rc = t->st->vt->mget(t->st, (const uint8_t *const *)keys, lens,
		                     n, values, found);
		eng_store_release(t);
	}
	for (size_t i = 0; async && rc == TALLY_OK && i < n; i++) {
		int64_t cells = stripes_sum(t, keys[i], lens[i]);

		/* Adds folded nowhere yet still make the counter exist. */
		values[i] = with_cells(values[i], cells);
		if (found != NULL && cells != 0)
			found[i] = 1;
	}
	if (async)
		pthread_rwlock_unlock(&t->fold_lock);
	return rc;
}

int tally_mget(tally *t, const void *const *keys, const size_t *lens,
               size_t n, int64_t *values, int *found)
{
	if (t == NULL || keys == NULL || lens == NULL || values == NULL ||
	    n == 0 || n > TALLY_MULTI_MAX)
		return TALLY_EINVAL;
	for (size_t i = 0; i < n; i++) {
		int rc = key_check(keys[i], lens[i]);

		if (rc != TALLY_OK)
			return rc;
	}
	return mget_batched(t, keys, lens, n, values, found);
}

int tally_count(tally *t, const char *ctype, const char *ktype,
                uint64_t content, int64_t *out)
{
	key_obj o;
	int mode, absent, rc;

	if (out == NULL)
		return TALLY_EINVAL;
	*out = 0;
	rc = obj_resolve(t, ctype, ktype, content, &o, &mode, &absent);
	if (rc != TALLY_OK || absent)
		return rc;
	rc = eng_store_hold(t);
	if (rc != TALLY_OK)
		return rc;
	rc = t->st->vt->total(t->st, &o, mode, out);
	eng_store_release(t);
	return rc;
}

int tally_count_at(tally *t, const char *ctype, const char *ktype,
                   uint64_t content, int64_t at_ms, int64_t *out)
{
	key_obj o;
	int mode, absent, rc;

	if (out == NULL || at_ms < 1 || at_ms > TALLY_AT_MS_MAX)
		return TALLY_EINVAL;
	*out = 0;
	rc = obj_resolve(t, ctype, ktype, content, &o, &mode, &absent);
	if (rc != TALLY_OK || absent)
		return rc;
	rc = eng_store_hold(t);
	if (rc != TALLY_OK)
		return rc;
	rc = t->st->vt->total_at(t->st, &o, at_ms, out);
	eng_store_release(t);
	return rc;
}

int tally_mcount(tally *t, const char *ctype, const char *ktype,
                 const uint64_t *contents, size_t n, int64_t *out)
{
	key_obj objs[256];
	uint8_t modes[256];
	key_obj o;
	int mode, absent, rc;

	if (contents == NULL || out == NULL || n == 0 || n > TALLY_MULTI_MAX)
		return TALLY_EINVAL;
	rc = obj_resolve(t, ctype, ktype, 0, &o, &mode, &absent);
	if (rc != TALLY_OK)
		return rc;
	if (absent) {
		memset(out, 0, n * sizeof *out);
		return TALLY_OK;
	}
	memset(modes, mode, sizeof modes);
	for (size_t i = 0; i < n; i += 256) {
		size_t k = n - i < 256 ? n - i : 256;

		for (size_t j = 0; j < k; j++)
			objs[j] = (key_obj){ o.ctype, o.ktype, contents[i + j] };
		rc = eng_store_hold(t);
		if (rc != TALLY_OK)
			return rc;
		rc = t->st->vt->mtotal(t->st, objs, modes, k, out + i);
		eng_store_release(t);
		if (rc != TALLY_OK)
			return rc;
	}
	return TALLY_OK;
}

int tally_counts(tally *t, const char *ctype, uint64_t content,
                 tally_type_count *out, size_t cap, size_t *n)
{
	tally_type_info types[TALLY_TYPES_MAX];
	key_obj objs[TALLY_TYPES_MAX];
	uint8_t modes[TALLY_TYPES_MAX];
	int64_t counts[TALLY_TYPES_MAX];
	uint16_t cid;
	size_t nt;
	int rc;

	if (t == NULL || ctype == NULL || n == NULL || (out == NULL && cap))
		return TALLY_EINVAL;
	rc = schema_ctype_read(t, ctype, &cid);
	if (rc != TALLY_OK && rc != TALLY_ENOTFOUND)
		return rc;
	schema_types(t, types, TALLY_TYPES_MAX, &nt);
	assert(nt <= TALLY_TYPES_MAX);
	memset(counts, 0, sizeof counts);
	if (rc == TALLY_OK) {
		for (size_t i = 0; i < nt; i++) {
			objs[i] = (key_obj){ cid, types[i].id, content };
			modes[i] = (uint8_t)types[i].mode;
		}
		rc = eng_store_hold(t);
		if (rc != TALLY_OK)
			return rc;
		rc = t->st->vt->mtotal(t->st, objs, modes, nt, counts);
		eng_store_release(t);
		if (rc != TALLY_OK)
			return rc;
	}
	*n = nt;
	for (size_t i = 0; i < nt && i < cap; i++) {
		memcpy(out[i].ktype, types[i].name, sizeof out[i].ktype);
		out[i].mode = types[i].mode;
		out[i].count = counts[i];
	}
	return TALLY_OK;
}

int tally_recent(tally *t, const char *ctype, const char *ktype,
                 uint64_t content, size_t limit, uint64_t before,
                 tally_entry *out, size_t *n)
{
	key_obj o;
	int mode, absent, rc;

	if (out == NULL || n == NULL || limit == 0 || limit > TALLY_PAGE_MAX)
		return TALLY_EINVAL;
	*n = 0;
	rc = obj_resolve(t, ctype, ktype, content, &o, &mode, &absent);
	if (rc != TALLY_OK || absent)
		return rc;
	rc = eng_store_hold(t);
	if (rc != TALLY_OK)
		return rc;
	rc = t->st->vt->recent(t->st, &o, limit, before, out, n);
	eng_store_release(t);
	return rc;
}

int tally_has(tally *t, const char *ctype, const char *ktype,
              uint64_t content, uint64_t member, int64_t *at_ms)
{
	key_obj o;
	int mode, absent, rc;

	rc = obj_resolve(t, ctype, ktype, content, &o, &mode, &absent);
	if (rc != TALLY_OK)
		return rc;
	if (mode != TALLY_MODE_UNIQUE)
		return TALLY_EMODE;
	if (member == 0)
		return TALLY_EINVAL;
	if (absent)
		return TALLY_ENOTFOUND;
	rc = eng_store_hold(t);
	if (rc != TALLY_OK)
		return rc;
	rc = t->st->vt->has(t->st, &o, member, at_ms);
	eng_store_release(t);
	return rc;
}

int tally_history(tally *t, uint64_t member, const char *ktype, size_t limit,
                  uint64_t before, tally_history_entry *out, size_t *n)
{
	uint16_t ids[TALLY_PAGE_MAX];
	uint16_t kid;
	int mode, rc;

	if (t == NULL || out == NULL || n == NULL || member == 0 ||
	    limit == 0 || limit > TALLY_PAGE_MAX)
		return TALLY_EINVAL;
	*n = 0;
	rc = schema_type(t, ktype, &kid, &mode);
	if (rc != TALLY_OK)
		return rc;
	rc = eng_store_hold(t);
	if (rc != TALLY_OK)
		return rc;
	rc = t->st->vt->history(t->st, member, kid, limit, before, out, ids, n);
	eng_store_release(t);
	/* Id 0: the store gave the name itself (a shared store's entries
	 * hold names). */
	for (size_t i = 0; rc == TALLY_OK && i < *n; i++)
		if (ids[i] != 0)
			rc = schema_ctype_name(t, ids[i], out[i].ctype);
	if (rc != TALLY_OK)
		*n = 0;
	return rc;
}

int tally_type_add(tally *t, const char *name, int mode)
{
	if (t == NULL)
		return TALLY_EINVAL;
	return schema_type_add(t, name, mode);
}

int tally_types(tally *t, tally_type_info *out, size_t cap, size_t *n)
{
	if (t == NULL || n == NULL || (out == NULL && cap > 0))
		return TALLY_EINVAL;
	return schema_types(t, out, cap, n);
}

typedef struct scan_ctx {
	tally *t;
	tally_event_fn fn;
	void *arg;
	int named;           /* rec's names are those of the ids below */
	uint16_t ctype, ktype;
	tally_event_rec rec;
} scan_ctx;

static void type_name_of(tally *t, uint16_t id, char *out, int *mode)
{
	pthread_rwlock_rdlock(&t->sch.lock);
	out[0] = '\0';
	*mode = 0;
	for (size_t i = 0; i < t->sch.type_count; i++) {
		if (t->sch.type_list[i].id == id) {
			memcpy(out, t->sch.type_list[i].name, TALLY_NAME_MAX + 1);
			*mode = t->sch.type_list[i].mode;
			break;
		}
	}
	pthread_rwlock_unlock(&t->sch.lock);
}

static int scan_one(void *arg, const key_obj *o, uint64_t seq,
                    const val_log *v)
{
	scan_ctx *c = arg;
	tally_event_rec *r = &c->rec;

	/* Names change rarely between neighbours: look them up on change. */
	if (!c->named || o->ctype != c->ctype || o->ktype != c->ktype) {
		/* A name the schema lacks is damage: an export would write
		 * events no import can take. */
		if (schema_ctype_name(c->t, o->ctype, r->ctype) != TALLY_OK)
			return TALLY_ECORRUPT;
		type_name_of(c->t, o->ktype, r->ktype, &r->mode);
		if (r->ktype[0] == '\0')
			return TALLY_ECORRUPT;
		c->named = 1;
		c->ctype = o->ctype;
		c->ktype = o->ktype;
	}
	r->content = o->content;
	r->member = v->member;
	r->at_ms = v->at_ms;
	r->delta = v->delta;
	r->total = v->total;
	r->seq = seq;
	return c->fn(c->arg, r);
}

int tally_events_scan(tally *t, tally_event_fn fn, void *arg)
{
	scan_ctx c;
	int rc;

	if (t == NULL || fn == NULL)
		return TALLY_EINVAL;
	memset(&c, 0, sizeof c);
	c.t = t;
	c.fn = fn;
	c.arg = arg;
	rc = eng_store_hold(t);
	if (rc != TALLY_OK)
		return rc;
	rc = t->st->vt->scan_log(t->st, scan_one, &c);
	eng_store_release(t);
	return rc;
}
