/* schema.c: counting types (built-in and added, with their modes) and
 * content types (registered on first write), by name and by id. Readers on
 * any thread look names up under a read lock; registrations are serialised
 * and persisted through the write queue before they are published. */
#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/keys.h"
#include "engine/engine.h"

/* Ids of added types start here, leaving room for future built-ins. */
#define TYPE_FIRST_USER_ID 256

static const struct { const char *name; uint8_t mode; } builtins[] = {
	{ "like", TALLY_MODE_UNIQUE },    { "favorite", TALLY_MODE_UNIQUE },
	{ "praise", TALLY_MODE_UNIQUE },  { "down", TALLY_MODE_UNIQUE },
	{ "report", TALLY_MODE_UNIQUE },  { "view", TALLY_MODE_TOTAL },
	{ "read", TALLY_MODE_TOTAL },     { "comment", TALLY_MODE_TOTAL },
	{ "forward", TALLY_MODE_TOTAL },  { "share", TALLY_MODE_TOTAL },
	{ "buy", TALLY_MODE_TOTAL },      { "sale", TALLY_MODE_TOTAL },
	{ "taste", TALLY_MODE_TOTAL },
};

int schema_name_check(const char *name)
{
	size_t len;

	if (name == NULL)
		return TALLY_EINVAL;
	len = strnlen(name, TALLY_NAME_MAX + 1);
	if (len == 0 || len > TALLY_NAME_MAX)
		return TALLY_EKEYSIZE;
	return name_valid(name, len) ? TALLY_OK : TALLY_EINVAL;
}

/* Insert a type; caller holds the write lock (or is the opener). */
static int type_insert(schema *s, const char *name, size_t len, uint16_t id,
                       uint8_t mode)
{
	size_t *idx;
	int inserted;

	if (s->type_count == TALLY_TYPES_MAX)
		return TALLY_ELIMIT;
	idx = hmap_put(s->types, name, len, &inserted);
	if (idx == NULL)
		return TALLY_ENOMEM;
	if (!inserted)
		return TALLY_ECORRUPT;
	*idx = s->type_count;
	eng_type *ty = &s->type_list[s->type_count++];
	memcpy(ty->name, name, len);
	ty->name[len] = '\0';
	ty->id = id;
	ty->mode = mode;
	if (id >= s->type_next_id)
		s->type_next_id = (uint16_t)(id + 1);
	return TALLY_OK;
}

static int ctype_insert(schema *s, const char *name, size_t len, uint16_t id)
{
	uint16_t *slot;
	int inserted;

	if (id == 0)
		return TALLY_ECORRUPT;
	if (id >= s->ctype_cap) {
		/* Doubling: one id more each time copied the whole table at
		 * every new content type (65535 of them took minutes to load
		 * where realloc cannot grow in place). */
		uint32_t cap = s->ctype_cap ? s->ctype_cap : 64;
		void *p;

		/* At most 65536: ids are 16 bits. */
		while (cap <= id)
			cap *= 2;
		p = realloc(s->ctype_names, (size_t)cap * sizeof *s->ctype_names);
		if (p == NULL)
			return TALLY_ENOMEM;
		s->ctype_names = p;
		s->ctype_cap = cap;
	}
	if (id >= s->ctype_next_id) {
		for (uint32_t i = s->ctype_next_id; i <= id; i++)
			s->ctype_names[i][0] = '\0';
		s->ctype_next_id = (uint32_t)id + 1;
	}
	slot = hmap_put(s->ctypes, name, len, &inserted);
	if (slot == NULL)
		return TALLY_ENOMEM;
	*slot = id;
	memcpy(s->ctype_names[id], name, len);
	s->ctype_names[id][len] = '\0';
	return TALLY_OK;
}

int schema_init(schema *s)
{
	memset(s, 0, sizeof *s);
	if (pthread_rwlock_init(&s->lock, NULL) ||
	    pthread_mutex_init(&s->reg, NULL))
		return TALLY_ENOMEM;
	s->types = hmap_create(sizeof(size_t));
	s->ctypes = hmap_create(sizeof(uint16_t));
	s->ctype_next_id = 1;
	if (s->types == NULL || s->ctypes == NULL)
		return TALLY_ENOMEM;
	for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++) {
		int rc = type_insert(s, builtins[i].name,
		                     strlen(builtins[i].name), (uint16_t)(i + 1),
		                     builtins[i].mode);
		if (rc != TALLY_OK)
			return rc;
	}
	s->type_next_id = TYPE_FIRST_USER_ID;
	return TALLY_OK;
}

void schema_free(schema *s)
{
	hmap_free(s->types);
	hmap_free(s->ctypes);
	free(s->ctype_names);
	s->ctype_cap = 0;
	s->types = s->ctypes = NULL;
	s->ctype_names = NULL;
	pthread_rwlock_destroy(&s->lock);
	pthread_mutex_destroy(&s->reg);
}

int schema_load_type(void *arg, const char *name, size_t len, uint16_t id,
                     int mode)
{
	eng_loaded *l = arg;

	if (len > TALLY_NAME_MAX || !name_valid(name, len) ||
	    (mode != TALLY_MODE_UNIQUE && mode != TALLY_MODE_TOTAL) ||
	    id < TYPE_FIRST_USER_ID)
		return -1;
	return type_insert(l->sch, name, len, id, (uint8_t)mode) ? -1 : 0;
}

int schema_load_ctype(void *arg, const char *name, size_t len, uint16_t id)
{
	eng_loaded *l = arg;

	if (len > TALLY_NAME_MAX || !name_valid(name, len))
		return -1;
	return ctype_insert(l->sch, name, len, id) ? -1 : 0;
}

static int by_id(const void *a, const void *b)
{
	const eng_type *x = a, *y = b;

	return (x->id > y->id) - (x->id < y->id);
}

/* The store hands types over in name order; the list is kept in id order
 * (built-ins first), and the name index follows it. */
void schema_loaded(schema *s)
{
	qsort(s->type_list, s->type_count, sizeof s->type_list[0], by_id);
	for (size_t i = 0; i < s->type_count; i++) {
		const eng_type *ty = &s->type_list[i];
		size_t *idx = hmap_get(s->types, ty->name, strlen(ty->name));

		assert(idx != NULL);
		*idx = i;
	}
}

/* Everything of a schema after its two locks is its tables: swapped as one
 * block, so a field added to them is never forgotten here. */
_Static_assert(offsetof(schema, types) > offsetof(schema, reg) &&
               offsetof(schema, reg) > offsetof(schema, lock),
               "schema: the locks come before the tables");

void schema_replace(schema *live, schema *fresh, atomic_int *lost)
{
	const size_t off = offsetof(schema, types);
	unsigned char *a = (unsigned char *)live + off;
	unsigned char *b = (unsigned char *)fresh + off;

	/* reg first: a registration that queued its write before the store
	 * failed publishes it before the swap, never into the new tables. */
	pthread_mutex_lock(&live->reg);
	pthread_rwlock_wrlock(&live->lock);
	for (size_t i = 0; i < sizeof(schema) - off; i++) {
		unsigned char c = a[i];

		a[i] = b[i];
		b[i] = c;
	}
	/* A registration that lost its id in memory before now is in the
	 * tables just loaded from the store; one after now sets it again. */
	atomic_store(lost, 0);
	pthread_rwlock_unlock(&live->lock);
	pthread_mutex_unlock(&live->reg);
}

int schema_type(tally *t, const char *name, uint16_t *id, int *mode)
{
	int rc = schema_name_check(name);
	const size_t *idx;

	if (rc != TALLY_OK)
		return rc == TALLY_EINVAL && name != NULL ? TALLY_ENOTYPE : rc;
	pthread_rwlock_rdlock(&t->sch.lock);
	idx = hmap_get(t->sch.types, name, strlen(name));
	if (idx != NULL) {
		*id = t->sch.type_list[*idx].id;
		*mode = t->sch.type_list[*idx].mode;
	}
	pthread_rwlock_unlock(&t->sch.lock);
	return idx != NULL ? TALLY_OK : TALLY_ENOTYPE;
}

int schema_ctype(tally *t, const char *name, uint16_t *id)
{
	const uint16_t *slot;
	int rc = schema_name_check(name);

	if (rc != TALLY_OK)
		return rc;
	pthread_rwlock_rdlock(&t->sch.lock);
	slot = hmap_get(t->sch.ctypes, name, strlen(name));
	if (slot != NULL)
		*id = *slot;
	pthread_rwlock_unlock(&t->sch.lock);
	return slot != NULL ? TALLY_OK : TALLY_ENOTFOUND;
}

static void ctype_persisted(void *arg, int err, int64_t result)
{
	/* Nothing to do: a batch out of memory writes its types alone
	 * (ctypes_alone()), and a failure past that fails the store
	 * (batch_complete()), whose recovery reloads the types from disk. */
	(void)arg, (void)err, (void)result;
}

/* A content type's id goes into the tables readers look in (reg held). */
static int ctype_publish(schema *s, const char *name, size_t len,
                         uint32_t next, uint16_t *id)
{
	int rc;

	assert(next <= TALLY_CTYPES_MAX);
	pthread_rwlock_wrlock(&s->lock);
	rc = ctype_insert(s, name, len, (uint16_t)next);
	pthread_rwlock_unlock(&s->lock);
	*id = (uint16_t)next;
	return rc;
}

/* Whether the store has failed and is not recovered yet (a new store
 * may be open with the schema not reloaded). */
static int store_failed(tally *t)
{
	int failed;

	pthread_mutex_lock(&t->qlock);
	failed = t->failed;
	pthread_mutex_unlock(&t->qlock);
	return failed;
}

int schema_ctype_ensure(tally *t, const char *name, uint16_t *id)
{
	schema *s = &t->sch;
	size_t len;
	int rc = schema_ctype(t, name, id);

	if (rc != TALLY_ENOTFOUND)
		return rc;
	len = strlen(name);
	pthread_mutex_lock(&s->reg);
	rc = schema_ctype(t, name, id);
	if (rc == TALLY_ENOTFOUND) {
		uint32_t next = s->ctype_next_id;
		store_op op = { .kind = STORE_OP_CTYPE, .key = (const uint8_t *)name,
		                .key_len = (uint32_t)len,
		                .obj = { .ctype = (uint16_t)next } };

		rc = next > TALLY_CTYPES_MAX ? TALLY_ELIMIT :
		     eng_enqueue(t, &op, ctype_persisted, NULL);
		if (rc == TALLY_OK) {
			rc = ctype_publish(s, name, len, next, id);
			/* Set before reg is let go: the next name's record,
			 * which would take the same id, fails with its batch. */
			if (rc != TALLY_OK)
				atomic_store(&t->schema_lost, 1);
		}
	}
	pthread_mutex_unlock(&s->reg);
	/* A shared store learns the name now, not when the op is applied:
	 * reads of the id in between find the keys other instances wrote
	 * under it (writes of it come after the op, which teaches it too).
	 * Not while the store is failed: a new one may be open, under the
	 * old schema until it is reloaded. */
	if (rc == TALLY_OK && eng_store_hold(t) == TALLY_OK) {
		if (t->st->vt->ctype_named != NULL && !store_failed(t))
			(void)t->st->vt->ctype_named(t->st, name, len, *id);
		eng_store_release(t);
	}
	return rc;
}

/* schema_refresh()'s learn: a name another instance wrote takes this
 * instance's next id (ids are each instance's own there), without an op:
 * the name is in the store's schema already. */
static int ctype_learn(void *arg, const char *name, size_t len, uint16_t *id)
{
	tally *t = arg;
	schema *s = &t->sch;
	char buf[TALLY_NAME_MAX + 1];
	int rc;

	if (len == 0 || len > TALLY_NAME_MAX)
		return TALLY_EINVAL;
	memcpy(buf, name, len);
	buf[len] = '\0';
	if (schema_name_check(buf) != TALLY_OK)
		return TALLY_EINVAL; /* not a name tally writes: left out */
	pthread_mutex_lock(&s->reg);
	rc = schema_ctype(t, buf, id);
	if (rc == TALLY_ENOTFOUND) {
		uint32_t next = s->ctype_next_id;

		/* The store first (the caller holds it): a write that finds
		 * the id once it is published plans with its name. */
		rc = next > TALLY_CTYPES_MAX ? TALLY_ELIMIT :
		     t->st->vt->ctype_named(t->st, buf, len, (uint16_t)next);
		if (rc == TALLY_OK)
			rc = ctype_publish(s, buf, len, next, id);
	}
	pthread_mutex_unlock(&s->reg);
	return rc;
}

int schema_ctype_read(tally *t, const char *name, uint16_t *id)
{
	uint64_t now, last;
	int rc = schema_ctype(t, name, id);

	if (rc != TALLY_ENOTFOUND)
		return rc;
	now = eng_now_ns();
	last = atomic_load(&t->sch.refreshed_ns);
	if (now - last < (uint64_t)SCHEMA_REFRESH_MS * 1000000u ||
	    !atomic_compare_exchange_strong(&t->sch.refreshed_ns, &last, now))
		return rc;
	if (eng_store_hold(t) != TALLY_OK)
		return rc;
	/* Held, the store cannot be replaced meanwhile; not failed, it is
	 * the one the schema was loaded from. */
	if (t->st->vt->schema_refresh != NULL &&
	    t->st->vt->ctype_named != NULL && !store_failed(t) &&
	    t->st->vt->schema_refresh(t->st, ctype_learn, t) == TALLY_OK)
		rc = schema_ctype(t, name, id);
	eng_store_release(t);
	return rc;
}

int schema_ctype_name(tally *t, uint16_t id, char *out)
{
	pthread_rwlock_rdlock(&t->sch.lock);
	if (id < t->sch.ctype_next_id)
		memcpy(out, t->sch.ctype_names[id], TALLY_NAME_MAX + 1);
	else
		out[0] = '\0';
	pthread_rwlock_unlock(&t->sch.lock);
	/* Every id stored was given a name first (schema_ctype_ensure). */
	return out[0] != '\0' ? TALLY_OK : TALLY_ECORRUPT;
}

int schema_type_add(tally *t, const char *name, int mode)
{
	schema *s = &t->sch;
	uint16_t id;
	int cur, rc = schema_name_check(name);

	if (rc != TALLY_OK)
		return rc;
	if (mode != TALLY_MODE_UNIQUE && mode != TALLY_MODE_TOTAL)
		return TALLY_EINVAL;
	pthread_mutex_lock(&s->reg);
	rc = schema_type(t, name, &id, &cur);
	if (rc == TALLY_OK) {
		rc = cur == mode ? TALLY_OK : TALLY_ETYPEEXISTS;
	} else if (s->type_count == TALLY_TYPES_MAX ||
	           s->type_next_id == UINT16_MAX) {
		rc = TALLY_ELIMIT;
	} else {
		store_op op = { .kind = STORE_OP_TYPE, .mode = (uint8_t)mode,
		                .key = (const uint8_t *)name,
		                .key_len = (uint32_t)strlen(name),
		                .obj = { .ktype = s->type_next_id } };

		rc = eng_submit_wait(t, &op, NULL);
		if (rc == TALLY_OK) {
			pthread_rwlock_wrlock(&s->lock);
			rc = type_insert(s, name, op.key_len, op.obj.ktype,
			                 (uint8_t)mode);
			pthread_rwlock_unlock(&s->lock);
			/* Stored, yet not in memory: its id would be given
			 * again (engine.h, schema_lost). */
			if (rc != TALLY_OK)
				atomic_store(&t->schema_lost, 1);
		}
	}
	pthread_mutex_unlock(&s->reg);
	return rc;
}

int schema_types(tally *t, tally_type_info *out, size_t cap, size_t *n)
{
	pthread_rwlock_rdlock(&t->sch.lock);
	*n = t->sch.type_count;
	for (size_t i = 0; i < cap && i < t->sch.type_count; i++) {
		const eng_type *ty = &t->sch.type_list[i];

		memcpy(out[i].name, ty->name, sizeof out[i].name);
		out[i].mode = ty->mode;
		out[i].id = ty->id;
	}
	pthread_rwlock_unlock(&t->sch.lock);
	return TALLY_OK;
}
