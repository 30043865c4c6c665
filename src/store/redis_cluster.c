/* redis_cluster.c: the scale-out store. tallyd becomes a front end over a
 * Redis Cluster; this file opens it (cluster handles, scripts, schema), and
 * holds the key layout and the command-building helpers that rc_apply.c and
 * rc_read.c share. The layout is described in rc_int.h.
 *
 * Design note: what this store guarantees
 *  1. Every write is a Lua script guarded by a token key in its own slot
 *     (SET NX EX inside the script), so the one write the client could not
 *     see answered (CL_UNKNOWN) is resent safely: it runs once.
 *  2. A batch is not atomic across slots: after a batch error (TALLY_EIO)
 *     some of its writes may be applied. That is the same promise the
 *     engine makes for a store failure: the outcome is unknown, retry with
 *     an id.
 *  3. Durability is Redis's (its appendfsync setting), plus WAIT when
 *     redis_wait > 0: a batch is acknowledged only once every master it
 *     touched has that many replicas with it.
 *  4. Not supported here (TALLY_ENOTSUP): count at a time, backup, compact,
 *     disk usage, the event scan, and SET/DEL of a counter that has more
 *     than one shard. */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/slot.h"
#include "store/rc_int.h"

#define RC_CHUNK_MIN (64u << 10)

void *rc_alloc(rc_arena *a, size_t len)
{
	rc_chunk *c = a->head;

	len = (len + 7) & ~(size_t)7;
	if (c == NULL || c->cap - c->used < len) {
		size_t cap = len > RC_CHUNK_MIN ? len : RC_CHUNK_MIN;

		c = malloc(sizeof *c + cap);
		if (c == NULL)
			return NULL;
		c->cap = cap;
		c->used = 0;
		c->next = a->head;
		a->head = c;
	}
	c->used += len;
	return c->data + c->used - len;
}

void rc_arena_reset(rc_arena *a)
{
	while (a->head != NULL) {
		rc_chunk *next = a->head->next;

		free(a->head);
		a->head = next;
	}
}

cluster_cmd *rc_cmd(rc_cmds *c, int argc, uint16_t slot)
{
	cluster_cmd *cmd;

	assert(argc >= 1);
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 64;
		cluster_cmd *v;

		/* No cap of CLUSTER_EXEC_MAX here: rc_exec() sends a longer
		 * list in parts (a batch of many sharded counters reads
		 * every shard of each). */
		if (cap > SIZE_MAX / sizeof *v)
			return NULL;
		v = realloc(c->v, cap * sizeof *v);
		if (v == NULL)
			return NULL;
		c->v = v;
		c->cap = cap;
	}
	cmd = &c->v[c->n];
	memset(cmd, 0, sizeof *cmd);
	cmd->argv = rc_alloc(c->a, (size_t)argc * sizeof(char *));
	cmd->argvlen = rc_alloc(c->a, (size_t)argc * sizeof(size_t));
	if (cmd->argv == NULL || cmd->argvlen == NULL)
		return NULL;
	cmd->argc = argc;
	cmd->slot = slot;
	c->n++;
	return cmd;
}

int rc_arg(rc_cmds *c, cluster_cmd *cmd, int i, const void *p, size_t len)
{
	char *copy = rc_alloc(c->a, len + 1);

	assert(i >= 0 && i < cmd->argc);
	if (copy == NULL)
		return TALLY_ENOMEM;
	if (len)
		memcpy(copy, p, len);
	copy[len] = '\0';
	((const char **)cmd->argv)[i] = copy;
	((size_t *)cmd->argvlen)[i] = len;
	return TALLY_OK;
}

int rc_argf(rc_cmds *c, cluster_cmd *cmd, int i, const char *fmt, ...)
{
	char buf[128];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof buf)
		return TALLY_EINVAL;
	return rc_arg(c, cmd, i, buf, (size_t)n);
}

cluster_cmd *rc_eval(rcs *r, rc_cmds *c, int s, int nkeys, int nargs,
                     uint16_t slot)
{
	cluster_cmd *cmd = rc_cmd(c, 3 + nkeys + nargs, slot);

	if (cmd == NULL || rc_arg(c, cmd, 0, "EVALSHA", 7) ||
	    rc_arg(c, cmd, 1, r->sha[s], 40) ||
	    rc_argf(c, cmd, 2, "%d", nkeys))
		return NULL;
	return cmd;
}

void rc_cmds_free(rc_cmds *c)
{
	for (size_t i = 0; i < c->n; i++)
		cluster_cmd_reset(&c->v[i]);
	free(c->v);
	c->v = NULL;
	c->n = c->cap = 0;
}

static uint64_t now_ms_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* n (1..CLUSTER_EXEC_MAX) commands of v, resent until done or past the
 * deadline. */
static int exec_part(cluster *cl, cluster_cmd *v, size_t n)
{
	uint64_t end = now_ms_mono() + RC_APPLY_DEADLINE_MS;
	cluster_cmd *pend;
	size_t np = 0;
	int rc;

	assert(n > 0 && n <= CLUSTER_EXEC_MAX);
	rc = cluster_exec(cl, v, n, RC_EXEC_TIMEOUT_MS);
	if (rc != TALLY_EIO)
		return rc;
	/* Resend what did not complete: every write is token-guarded
	 * (design note 1) and every read may run twice. The commands are
	 * copied so that the ones done keep their replies. */
	pend = malloc(n * sizeof *pend);
	if (pend == NULL)
		return TALLY_ENOMEM;
	while (rc == TALLY_EIO && now_ms_mono() < end) {
		size_t k = 0;

		np = 0;
		for (size_t i = 0; i < n; i++)
			if (v[i].outcome != CL_DONE) {
				/* The first send may have run: a token it
				 * left answers the resend (rc_apply.c). */
				if (v[i].outcome == CL_UNKNOWN)
					v[i].resent = 1;
				pend[np] = v[i];
				pend[np].reply = NULL;
				pend[np++].outcome = CL_NOT_RUN;
			}
		if (np == 0)
			break;
		rc = cluster_exec(cl, pend, np, RC_EXEC_TIMEOUT_MS);
		for (size_t i = 0; i < n; i++)
			if (v[i].outcome != CL_DONE) {
				v[i].reply = pend[k].reply;
				v[i].outcome = pend[k++].outcome;
			}
	}
	free(pend);
	return rc == TALLY_OK ? TALLY_OK : TALLY_EIO;
}

int rc_exec(cluster *cl, rc_cmds *c)
{
	int rc = TALLY_OK;

	/* In parts of at most CLUSTER_EXEC_MAX, one after another: the
	 * commands of a list never depend on each other's order. */
	for (size_t i = 0; rc == TALLY_OK && i < c->n; i += CLUSTER_EXEC_MAX)
		rc = exec_part(cl, c->v + i, c->n - i < CLUSTER_EXEC_MAX
		                             ? c->n - i : CLUSTER_EXEC_MAX);
	return rc;
}

size_t rc_esc(char *buf, const uint8_t *name, size_t len)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++) {
		uint8_t b = name[i];

		/* A NUL too: keys are put together with "%.*s", which
		 * would end at it ("a\0b" became "a"). And '#', which
		 * names a shard: counter "x#2" was shard 2 of "x". */
		if (b == '{' || b == '}' || b == '%' || b == '#' ||
		    b == '\0') {
			n += (size_t)sprintf(buf + n, "%%%02X", b);
		} else {
			buf[n++] = (char)b;
		}
	}
	return n;
}

size_t rc_ktype_tag(rcs *r, char *buf, size_t cap, uint16_t ktype)
{
	const char *name;
	int n = 0;

	if (ktype < RC_TYPE_FIRST_USER_ID)
		return (size_t)snprintf(buf, cap, "#%u", ktype);
	pthread_rwlock_rdlock(&r->names_lock);
	name = hmap_get(r->ktype_by_id, &ktype, sizeof ktype);
	if (name != NULL)
		n = snprintf(buf, cap, "%s", name);
	pthread_rwlock_unlock(&r->names_lock);
	return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

size_t rc_obj_tag(rcs *r, char *buf, size_t cap, const key_obj *o)
{
	char kt[TALLY_NAME_MAX + 8];
	const char *name;
	int n = 0;

	if (rc_ktype_tag(r, kt, sizeof kt, o->ktype) == 0)
		return 0;
	pthread_rwlock_rdlock(&r->names_lock);
	name = hmap_get(r->ctype_by_id, &o->ctype, sizeof o->ctype);
	if (name != NULL)
		n = snprintf(buf, cap, "%s|%s|%llu", name, kt,
		             (unsigned long long)o->content);
	pthread_rwlock_unlock(&r->names_lock);
	return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

unsigned rc_sub_of(uint64_t member)
{
	/* splitmix64's finaliser: sequential member ids spread evenly, and
	 * every tallyd computes the same sub-hash. */
	uint64_t z = member + 0x9e3779b97f4a7c15u;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	z ^= z >> 31;
	return (unsigned)(z % RC_SUBS);
}

uint16_t rc_slot(const char *key, size_t len)
{
	return slot_of_key(key, len);
}

uint32_t rc_shards_get(rcs *r, const uint8_t *key, size_t len)
{
	const uint32_t *v;
	uint32_t n = 1;

	pthread_mutex_lock(&r->shards_lock);
	v = hmap_get(r->shards, key, len);
	if (v != NULL)
		n = *v;
	pthread_mutex_unlock(&r->shards_lock);
	return n;
}

void rc_shards_seen(rcs *r, const uint8_t *key, size_t len, uint32_t n)
{
	uint32_t *v;

	if (n <= 1 || n > RC_SHARDS_MAX)
		return;
	pthread_mutex_lock(&r->shards_lock);
	v = hmap_put(r->shards, key, len, NULL);
	if (v != NULL && *v < n)
		*v = n;
	pthread_mutex_unlock(&r->shards_lock);
}

uint16_t rc_ctype_id(rcs *r, const char *name, size_t len)
{
	const uint16_t *id;
	uint16_t out = 0;

	pthread_rwlock_rdlock(&r->names_lock);
	id = hmap_get(r->ctype_by_name, name, len);
	if (id != NULL)
		out = *id;
	pthread_rwlock_unlock(&r->names_lock);
	return out;
}

int rc_reply_i64(const redisReply *rep, int64_t *out, int *nil)
{
	char buf[32], *end;
	long long v;

	*nil = 0;
	*out = 0;
	if (rep == NULL)
		return TALLY_EIO;
	if (rep->type == REDIS_REPLY_NIL) {
		*nil = 1;
		return TALLY_OK;
	}
	if (rep->type == REDIS_REPLY_INTEGER) {
		*out = rep->integer;
		return TALLY_OK;
	}
	if (rep->type != REDIS_REPLY_STRING || rep->len == 0 ||
	    rep->len >= sizeof buf)
		return rep->type == REDIS_REPLY_ERROR ? TALLY_EIO
		                                      : TALLY_ECORRUPT;
	memcpy(buf, rep->str, rep->len);
	buf[rep->len] = '\0';
	errno = 0;
	v = strtoll(buf, &end, 10);
	if (errno || *end != '\0')
		return TALLY_ECORRUPT;
	*out = v;
	return TALLY_OK;
}

int rc_shard_reads(rc_cmds *c, const char *tag, size_t tl, uint32_t from,
                   uint32_t to)
{
	char k[RC_KEY_MAX];

	assert(from >= 1); /* shard 0 is t:c:{N} */
	for (uint32_t i = from; i < to; i++) {
		int n = snprintf(k, sizeof k, "t:c:{%.*s#%u}", (int)tl, tag, i);
		cluster_cmd *cmd;

		if (n < 0 || n >= (int)sizeof k)
			return TALLY_ENOMEM;
		cmd = rc_cmd(c, 2, rc_slot(k, (size_t)n));
		if (cmd == NULL || rc_arg(c, cmd, 0, "GET", 3) ||
		    rc_arg(c, cmd, 1, k, (size_t)n))
			return TALLY_ENOMEM;
	}
	return TALLY_OK;
}

int rc_counter_reads(rc_cmds *c, const char *tag, size_t tl, uint32_t n)
{
	char k0[RC_KEY_MAX], kc[RC_KEY_MAX];
	int l0 = snprintf(k0, sizeof k0, "t:c:{%.*s}", (int)tl, tag);
	int lc = snprintf(kc, sizeof kc, "t:cfg:{%.*s}", (int)tl, tag);
	cluster_cmd *cmd = rc_cmd(c, 3, rc_slot(k0, (size_t)l0));

	if (cmd == NULL || rc_arg(c, cmd, 0, "MGET", 4) ||
	    rc_arg(c, cmd, 1, k0, (size_t)l0) ||
	    rc_arg(c, cmd, 2, kc, (size_t)lc))
		return TALLY_ENOMEM;
	return rc_shard_reads(c, tag, tl, 1, n);
}

int rc_cfg_check(const redisReply *rep, uint32_t known, uint32_t *now)
{
	int64_t cfg;
	int nil, rc;

	*now = known;
	if (rep == NULL || rep->type != REDIS_REPLY_ARRAY ||
	    rep->elements != 2)
		return TALLY_EIO;
	rc = rc_reply_i64(rep->element[1], &cfg, &nil);
	if (rc == TALLY_OK && !nil && cfg > known && cfg <= RC_SHARDS_MAX)
		*now = (uint32_t)cfg;
	return rc;
}

rc_reader *rc_reader_get(rcs *r)
{
	unsigned i = atomic_fetch_add(&r->next_reader, 1) % RC_READERS;

	/* A free handle if there is one, else wait for ours. */
	for (unsigned k = 0; k < RC_READERS; k++) {
		rc_reader *rd = &r->readers[(i + k) % RC_READERS];

		if (pthread_mutex_trylock(&rd->lock) == 0)
			return rd;
	}
	pthread_mutex_lock(&r->readers[i].lock);
	return &r->readers[i];
}

void rc_reader_put(rc_reader *rd)
{
	pthread_mutex_unlock(&rd->lock);
}

/* ---- names: what load() and the schema ops teach the store ------------- */

static int name_put(hmap *by_id, uint16_t id, const char *name, size_t len)
{
	char *slot = hmap_put(by_id, &id, sizeof id, NULL);

	if (slot == NULL)
		return TALLY_ENOMEM;
	memcpy(slot, name, len);
	slot[len] = '\0';
	return TALLY_OK;
}

int rc_learn_ctype(rcs *r, const char *name, size_t len, uint16_t id)
{
	uint16_t *slot;
	int rc;

	if (len == 0 || len > TALLY_NAME_MAX)
		return TALLY_ECORRUPT;
	pthread_rwlock_wrlock(&r->names_lock);
	rc = name_put(r->ctype_by_id, id, name, len);
	slot = rc == TALLY_OK ? hmap_put(r->ctype_by_name, name, len, NULL)
	                      : NULL;
	if (slot != NULL)
		*slot = id;
	else
		rc = TALLY_ENOMEM;
	pthread_rwlock_unlock(&r->names_lock);
	return rc;
}

int rc_learn_ktype(rcs *r, const char *name, size_t len, uint16_t id)
{
	int rc;

	if (len == 0 || len > TALLY_NAME_MAX)
		return TALLY_ECORRUPT;
	pthread_rwlock_wrlock(&r->names_lock);
	rc = name_put(r->ktype_by_id, id, name, len);
	pthread_rwlock_unlock(&r->names_lock);
	return rc;
}

/* One field of t:schema: "c:ID" -> name or "k:ID" -> "mode:name". */
static int load_field(rcs *r, const store_loader *l, const redisReply *f,
                      const redisReply *v)
{
	char buf[16];
	unsigned long id;
	char *end;

	if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
	    f->len < 3 || f->len >= sizeof buf || f->str[1] != ':')
		return TALLY_ECORRUPT;
	memcpy(buf, f->str, f->len);
	buf[f->len] = '\0';
	id = strtoul(buf + 2, &end, 10);
	if (*end != '\0' || id == 0 || id > UINT16_MAX)
		return TALLY_ECORRUPT;
	if (buf[0] == 'c') {
		if (rc_learn_ctype(r, v->str, v->len, (uint16_t)id) != TALLY_OK ||
		    l->ctype(l->arg, v->str, v->len, (uint16_t)id))
			return TALLY_ECORRUPT;
		return TALLY_OK;
	}
	if (buf[0] != 'k' || v->len < 3 || v->str[1] != ':' ||
	    (v->str[0] != '1' && v->str[0] != '2'))
		return TALLY_ECORRUPT;
	if (rc_learn_ktype(r, v->str + 2, v->len - 2, (uint16_t)id) ||
	    l->type(l->arg, v->str + 2, v->len - 2, (uint16_t)id,
	            v->str[0] - '0'))
		return TALLY_ECORRUPT;
	return TALLY_OK;
}

/* HGETALL t:schema on cl, into c: *rep the field, value array. */
static int schema_read(cluster *cl, rc_cmds *c, const redisReply **rep)
{
	cluster_cmd *cmd = rc_cmd(c, 2, rc_slot("t:schema", 8));
	int rc;

	if (cmd == NULL || rc_arg(c, cmd, 0, "HGETALL", 7) ||
	    rc_arg(c, cmd, 1, "t:schema", 8))
		return TALLY_ENOMEM;
	rc = rc_exec(cl, c);
	if (rc != TALLY_OK)
		return rc;
	*rep = c->v[0].reply;
	return (*rep)->type == REDIS_REPLY_ARRAY && (*rep)->elements % 2 == 0
	       ? TALLY_OK : TALLY_ECORRUPT;
}

static int rc_ctype_named(store *s, const char *name, size_t len,
                          uint16_t id)
{
	return rc_learn_ctype((rcs *)s, name, len, id);
}

/* Read t:schema; each "c:" name not known here is handed to learn(). */
static int rc_schema_refresh(store *s,
                             int (*learn)(void *arg, const char *name,
                                          size_t len, uint16_t *id),
                             void *arg)
{
	rcs *r = (rcs *)s;
	rc_arena a = { 0 };
	rc_cmds c = { .a = &a };
	const redisReply *rep = NULL;
	/* A reader's connection: this runs on a reading thread. */
	rc_reader *rd = rc_reader_get(r);
	int rc = schema_read(rd->cl, &c, &rep);

	rc_reader_put(rd);
	for (size_t i = 0; rc == TALLY_OK && i < rep->elements; i += 2) {
		const redisReply *f = rep->element[i];
		const redisReply *v = rep->element[i + 1];
		uint16_t id = 0;

		/* A field tally did not write is left out, not a
		 * reason to learn nothing more. */
		if (f->type != REDIS_REPLY_STRING ||
		    v->type != REDIS_REPLY_STRING || f->len < 2 ||
		    memcmp(f->str, "c:", 2) != 0 || v->len == 0 ||
		    v->len > TALLY_NAME_MAX ||
		    rc_ctype_id(r, v->str, v->len) != 0)
			continue;
		/* learn() names it to the store (ctype_named) before
		 * the engine publishes its id. */
		rc = learn(arg, v->str, v->len, &id);
		if (rc == TALLY_EINVAL) /* not a name: left out */
			rc = TALLY_OK;
	}
	rc_cmds_free(&c);
	rc_arena_reset(&a);
	return rc;
}

/* Schema only: tokens live in the cluster (each script checks its own), so
 * none is handed to the engine. */
static int rc_load(store *s, const store_loader *l)
{
	rcs *r = (rcs *)s;
	rc_cmds c = { .a = &r->arena };
	const redisReply *rep = NULL;
	int rc = schema_read(r->cl, &c, &rep);

	for (size_t i = 0; rc == TALLY_OK && i < rep->elements; i += 2)
		rc = load_field(r, l, rep->element[i], rep->element[i + 1]);
	rc_cmds_free(&c);
	rc_arena_reset(&r->arena);
	return rc;
}

static int rc_scan_log(store *s, int (*fn)(void *arg, const key_obj *o,
                                          uint64_t seq, const val_log *v),
                       void *arg)
{
	(void)s, (void)fn, (void)arg;
	return TALLY_ENOTSUP;
}

static int rc_backup(store *s, const char *dir)
{
	(void)s, (void)dir;
	return TALLY_ENOTSUP;
}

static int rc_compact(store *s)
{
	(void)s;
	return TALLY_ENOTSUP;
}

static int rc_disk_usage(store *s, tally_disk_part *out, size_t cap,
                         size_t *n)
{
	(void)s, (void)out, (void)cap;
	*n = 0;
	return TALLY_ENOTSUP;
}

static void rc_stats(store *s, store_stats *out)
{
	rcs *r = (rcs *)s;

	memset(out, 0, sizeof *out);
	out->entries = atomic_load(&r->st_entries);
	out->syncs = atomic_load(&r->st_syncs);
	out->sync_ns = atomic_load(&r->st_sync_ns);
	out->shard_growths = atomic_load(&r->st_shard_growths);
	for (int i = 0; i < TALLY_HIST_BUCKETS; i++)
		out->sync_hist[i] = atomic_load(&r->st_sync_hist[i]);
}

static int rc_shards(store *s, const uint8_t *key, size_t len,
                     uint32_t grow_to, uint32_t *now)
{
	rcs *r = (rcs *)s;

	if (grow_to > RC_SHARDS_MAX)
		return TALLY_ELIMIT;
	return rc_grow(r, key, len, grow_to, now);
}

static void rc_close(store *s)
{
	rcs *r = (rcs *)s;

	if (r == NULL)
		return;
	cluster_close(r->cl);
	for (int i = 0; i < RC_READERS; i++) {
		cluster_close(r->readers[i].cl);
		pthread_mutex_destroy(&r->readers[i].lock);
	}
	hmap_free(r->ctype_by_id);
	hmap_free(r->ctype_by_name);
	hmap_free(r->ktype_by_id);
	hmap_free(r->shards);
	pthread_rwlock_destroy(&r->names_lock);
	pthread_mutex_destroy(&r->shards_lock);
	rc_arena_reset(&r->arena);
	free(r);
}

static const store_vt rc_vt = {
	.name = "redis-cluster",
	.apply = rc_apply,
	.sync = rc_sync,
	.get = rc_get,
	.mget = rc_mget,
	.total = rc_total,
	.total_at = rc_total_at,
	.mtotal = rc_mtotal,
	.recent = rc_recent,
	.has = rc_has,
	.history = rc_history,
	.scan_log = rc_scan_log,
	.load = rc_load,
	.ctype_named = rc_ctype_named,
	.schema_refresh = rc_schema_refresh,
	.backup = rc_backup,
	.compact = rc_compact,
	.disk_usage = rc_disk_usage,
	.stats = rc_stats,
	.close = rc_close,
	.shards = rc_shards,
};

static const char *const scripts[RC_S_COUNT] = {
	[RC_S_ADD] = RC_LUA_ADD,
	[RC_S_SETDEL] = RC_LUA_SETDEL,
	[RC_S_MEMBER] = RC_LUA_MEMBER,
	[RC_S_LOG] = RC_LUA_LOG,
	[RC_S_GROW] = RC_LUA_GROW,
	[RC_S_TYPE] = RC_LUA_TYPE,
	[RC_S_CTYPE] = RC_LUA_CTYPE,
};

static uint64_t instance_id(void)
{
	struct timespec ts;
	uint64_t x = 0;
	FILE *f = fopen("/dev/urandom", "rb");

	if (f != NULL) {
		if (fread(&x, sizeof x, 1, f) != 1)
			x = 0;
		fclose(f);
	}
	/* Without urandom: time and address still differ between the
	 * tallyd instances of one cluster in practice. */
	clock_gettime(CLOCK_REALTIME, &ts);
	return x ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^
	       (uint64_t)(uintptr_t)&x;
}

static int rc_init(rcs *r, const store_options *o)
{
	cluster_options co = { .password = o->redis_password };
	int rc;

	r->base.vt = &rc_vt;
	r->instance = instance_id();
	r->redis_wait = o->redis_wait;
	r->hot_ops = o->hot_shard_ops;
	r->hot_max = o->hot_shards_max;
	r->token_ttl_s = (o->token_retention_ms + 999) / 1000;
	if (pthread_rwlock_init(&r->names_lock, NULL) ||
	    pthread_mutex_init(&r->shards_lock, NULL))
		return TALLY_ENOMEM;
	for (int i = 0; i < RC_READERS; i++)
		if (pthread_mutex_init(&r->readers[i].lock, NULL))
			return TALLY_ENOMEM;
	r->ctype_by_id = hmap_create(TALLY_NAME_MAX + 1);
	r->ctype_by_name = hmap_create(sizeof(uint16_t));
	r->ktype_by_id = hmap_create(TALLY_NAME_MAX + 1);
	r->shards = hmap_create(sizeof(uint32_t));
	if (!r->ctype_by_id || !r->ctype_by_name || !r->ktype_by_id ||
	    !r->shards)
		return TALLY_ENOMEM;
	rc = cluster_open(o->seeds, &co, &r->cl);
	for (int i = 0; rc == TALLY_OK && i < RC_READERS; i++)
		rc = cluster_open(o->seeds, &co, &r->readers[i].cl);
	/* Every handle knows every script, so that a node promoted after a
	 * failover, which never saw SCRIPT LOAD, gets them from any handle. */
	for (int i = 0; rc == TALLY_OK && i < RC_S_COUNT; i++) {
		rc = cluster_script_load(r->cl, scripts[i], strlen(scripts[i]),
		                         r->sha[i], RC_EXEC_TIMEOUT_MS);
		for (int k = 0; rc == TALLY_OK && k < RC_READERS; k++)
			rc = cluster_script_load(r->readers[k].cl, scripts[i],
			                         strlen(scripts[i]), r->sha[i],
			                         RC_EXEC_TIMEOUT_MS);
	}
	return rc;
}

int redis_cluster_open(const store_options *o, store **out)
{
	rcs *r;
	int rc;

	*out = NULL;
	if (o->seeds == NULL || o->seeds[0] == '\0')
		return TALLY_EINVAL;
	r = calloc(1, sizeof *r);
	if (r == NULL)
		return TALLY_ENOMEM;
	rc = rc_init(r, o);
	if (rc != TALLY_OK) {
		rc_close(&r->base);
		return rc;
	}
	*out = &r->base;
	return TALLY_OK;
}

/* The engine closes a failed store once this says a new one would open.
 * Opening loads the scripts on every master: while one master cannot
 * answer (hung, or dead and not yet replaced), an open fails, and closing
 * the old store would only stop the reads it still serves from the
 * others. So every master must answer a PING, not just one seed. Short:
 * the committer waits for it, and it runs every second while failed. */
#define RC_PROBE_TIMEOUT_MS 2000

int redis_cluster_probe(const store_options *o)
{
	const char *argv[1] = { "PING" };
	cluster_options co = { .password = o->redis_password };
	cluster_master_reply *mr = NULL;
	cluster *c = NULL;
	size_t nm = 0;
	int rc = cluster_open(o->seeds, &co, &c);

	if (rc == TALLY_OK)
		rc = cluster_each_master(c, NULL, 0, 1, argv, NULL,
		                         RC_PROBE_TIMEOUT_MS, &mr, &nm);
	for (size_t i = 0; rc == TALLY_OK && i < nm; i++)
		if (mr[i].reply == NULL ||
		    mr[i].reply->type == REDIS_REPLY_ERROR)
			rc = TALLY_EIO;
	cluster_master_replies_free(mr, nm);
	cluster_close(c);
	return rc;
}
