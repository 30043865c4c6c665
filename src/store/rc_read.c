/* rc_read.c: the redis-cluster store's queries. Each takes a reader
 * handle, pipelines every command it needs (one round trip per node) and
 * sums or parses the replies. A read sees every write acknowledged before
 * it started: writes are acknowledged only after their nodes answered. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/rc_int.h"

static int exec_read(rcs *r, rc_cmds *c)
{
	rc_reader *rd = rc_reader_get(r);
	int rc = rc_exec(rd->cl, c);

	rc_reader_put(rd);
	return rc;
}

static int cmd2(rc_cmds *c, const char *verb, const char *key, size_t kl)
{
	cluster_cmd *cmd = rc_cmd(c, 2, rc_slot(key, kl));

	if (cmd == NULL || rc_arg(c, cmd, 0, verb, strlen(verb)) ||
	    rc_arg(c, cmd, 1, key, kl))
		return TALLY_ENOMEM;
	return TALLY_OK;
}

static int add_reply(const redisReply *rep, int64_t *sum, int *found)
{
	int64_t v;
	int nil, rc = rc_reply_i64(rep, &v, &nil);

	if (rc != TALLY_OK)
		return rc;
	*found |= !nil;
	return __builtin_add_overflow(*sum, v, sum) ? TALLY_EOVERFLOW
	                                            : TALLY_OK;
}

/* Counters read in one round trip (two when a shard count grew): bounds
 * the pipeline at RC_MGET_CHUNK * (RC_SHARDS_MAX + 1) commands. */
#define RC_MGET_CHUNK 64

/* Up to RC_MGET_CHUNK counters: one pipeline of every known shard of
 * each, then one of the shards other tallyds added since this one last
 * looked. out[i] is the sum, found[i] whether any shard exists. */
static int mget_chunk(rcs *r, const uint8_t *const *keys, const size_t *lens,
                      size_t n, int64_t *out, int *found)
{
	rc_arena a = { 0 };
	rc_cmds c = { .a = &a };
	char tag[RC_KEY_MAX];
	size_t first[RC_MGET_CHUNK], more[RC_MGET_CHUNK], round2 = 0;
	uint32_t known[RC_MGET_CHUNK], now[RC_MGET_CHUNK];
	int rc = TALLY_OK;

	assert(n >= 1 && n <= RC_MGET_CHUNK);
	for (size_t i = 0; rc == TALLY_OK && i < n; i++) {
		size_t tl = rc_esc(tag, keys[i], lens[i]);

		known[i] = rc_shards_get(r, keys[i], lens[i]);
		first[i] = c.n;
		rc = rc_counter_reads(&c, tag, tl, known[i]);
	}
	if (rc == TALLY_OK)
		rc = exec_read(r, &c);
	if (rc == TALLY_OK)
		round2 = c.n;
	for (size_t i = 0; rc == TALLY_OK && i < n; i++) {
		rc = rc_cfg_check(c.v[first[i]].reply, known[i], &now[i]);
		more[i] = c.n;
		if (rc == TALLY_OK && now[i] > known[i])
			rc = rc_shard_reads(&c, tag, rc_esc(tag, keys[i], lens[i]),
			                 known[i], now[i]);
	}
	if (rc == TALLY_OK && c.n > round2) {
		/* Another tallyd grew them: read the shards we did not know. */
		rc_cmds extra = { .v = c.v + round2, .n = c.n - round2,
		                  .a = &a };

		rc = exec_read(r, &extra);
		for (size_t i = 0; rc == TALLY_OK && i < n; i++)
			if (now[i] > known[i])
				rc_shards_seen(r, keys[i], lens[i], now[i]);
	}
	for (size_t i = 0; rc == TALLY_OK && i < n; i++) {
		const redisReply *mg = c.v[first[i]].reply;

		out[i] = 0;
		found[i] = 0;
		rc = add_reply(mg->element[0], &out[i], &found[i]);
		for (uint32_t k = 1; rc == TALLY_OK && k < known[i]; k++)
			rc = add_reply(c.v[first[i] + k].reply, &out[i],
			               &found[i]);
		for (uint32_t k = 0; rc == TALLY_OK && k < now[i] - known[i];
		     k++)
			rc = add_reply(c.v[more[i] + k].reply, &out[i],
			               &found[i]);
	}
	rc_cmds_free(&c);
	rc_arena_reset(&a);
	return rc;
}

int rc_mget(store *s, const uint8_t *const *keys, const size_t *lens,
            size_t n, int64_t *out, int *found)
{
	int ffound[RC_MGET_CHUNK];
	int rc = TALLY_OK;

	for (size_t at = 0; rc == TALLY_OK && at < n; at += RC_MGET_CHUNK) {
		size_t k = n - at < RC_MGET_CHUNK ? n - at : RC_MGET_CHUNK;

		rc = mget_chunk((rcs *)s, keys + at, lens + at, k, out + at,
		                found != NULL ? found + at : ffound);
	}
	if (rc != TALLY_OK)
		memset(out, 0, n * sizeof *out);
	return rc;
}

int rc_get(store *s, const uint8_t *key, size_t len, int64_t *out)
{
	int found = 0;
	int rc = rc_mget(s, &key, &len, 1, out, &found);

	return rc == TALLY_OK && !found ? TALLY_ENOTFOUND : rc;
}

/* The reads of one object's count: a total type's is the GET of its
 * total, a unique type's the HLEN of every sub-hash of its membership
 * (the other mode's keys are never written). */
static size_t total_nreads(uint8_t mode)
{
	return mode == TALLY_MODE_UNIQUE ? RC_SUBS : 1;
}

/* The reads of one object's count; *queued is set when there are any.
 * A content type this store has not been told the name of yet (the
 * engine names it as it assigns the id, a moment before) has no keys
 * that could be found: none, and the count is 0. */
static int total_reads(rcs *r, rc_cmds *c, const key_obj *o, uint8_t mode,
                       uint8_t *queued)
{
	char tag[RC_KEY_MAX], k[RC_KEY_MAX];
	size_t tl = rc_obj_tag(r, tag, sizeof tag, o);
	int n, rc = TALLY_OK;

	*queued = tl != 0;
	if (tl == 0)
		return TALLY_OK;
	if (mode != TALLY_MODE_UNIQUE) {
		n = snprintf(k, sizeof k, "t:t:{%.*s}", (int)tl, tag);
		return cmd2(c, "GET", k, (size_t)n);
	}
	for (unsigned s = 0; rc == TALLY_OK && s < RC_SUBS; s++) {
		n = snprintf(k, sizeof k, "t:m:{%.*s#%u}", (int)tl, tag, s);
		rc = cmd2(c, "HLEN", k, (size_t)n);
	}
	return rc;
}

int rc_mtotal(store *s, const key_obj *objs, const uint8_t *modes, size_t n,
              int64_t *out)
{
	rcs *r = (rcs *)s;
	rc_arena a = { 0 };
	rc_cmds c = { .a = &a };
	size_t at = 0;
	int rc = TALLY_OK;
	uint8_t queued[TALLY_TYPES_MAX];

	assert(n <= TALLY_TYPES_MAX);
	if (n > TALLY_TYPES_MAX)
		return TALLY_EINVAL;
	for (size_t i = 0; rc == TALLY_OK && i < n; i++)
		rc = total_reads(r, &c, &objs[i], modes[i], &queued[i]);
	if (rc == TALLY_OK)
		rc = exec_read(r, &c);
	for (size_t i = 0; rc == TALLY_OK && i < n; i++) {
		int found = 0;

		out[i] = 0;
		for (size_t k = 0; rc == TALLY_OK && queued[i] &&
		     k < total_nreads(modes[i]); k++)
			rc = add_reply(c.v[at++].reply, &out[i], &found);
	}
	assert(rc != TALLY_OK || at == c.n);
	rc_cmds_free(&c);
	rc_arena_reset(&a);
	return rc;
}

int rc_total(store *s, const key_obj *o, int mode, int64_t *out)
{
	uint8_t m = (uint8_t)mode;

	return rc_mtotal(s, o, &m, 1, out);
}

int rc_total_at(store *s, const key_obj *o, int64_t at_ms, int64_t *out)
{
	/* No event log with running totals here: see design note 4. */
	(void)s, (void)o, (void)at_ms;
	*out = 0;
	return TALLY_ENOTSUP;
}

int rc_has(store *s, const key_obj *o, uint64_t member, int64_t *at_ms)
{
	rcs *r = (rcs *)s;
	rc_arena a = { 0 };
	rc_cmds c = { .a = &a };
	char tag[RC_KEY_MAX], k[RC_KEY_MAX];
	size_t tl = rc_obj_tag(r, tag, sizeof tag, o);
	int n = snprintf(k, sizeof k, "t:m:{%.*s#%u}", (int)tl, tag,
	                 rc_sub_of(member));
	cluster_cmd *cmd = rc_cmd(&c, 3, rc_slot(k, (size_t)n));
	int64_t v = 0;
	int nil = 1, rc = TALLY_ENOMEM;

	if (tl == 0)
		rc = TALLY_ENOTFOUND;
	else if (cmd != NULL && !rc_arg(&c, cmd, 0, "HGET", 4) &&
	         !rc_arg(&c, cmd, 1, k, (size_t)n) &&
	         !rc_argf(&c, cmd, 2, "%llu", (unsigned long long)member))
		rc = exec_read(r, &c);
	if (rc == TALLY_OK)
		rc = rc_reply_i64(c.v[0].reply, &v, &nil);
	if (rc == TALLY_OK && nil)
		rc = TALLY_ENOTFOUND;
	if (at_ms != NULL)
		*at_ms = rc == TALLY_OK ? v : 0;
	rc_cmds_free(&c);
	rc_arena_reset(&a);
	return rc;
}

/* The whole capped list at key (at most RC_LOG_CAP entries). */
static int list_read(rcs *r, rc_cmds *c, const char *key, size_t kl,
                     const redisReply **out)
{
	cluster_cmd *cmd = rc_cmd(c, 4, rc_slot(key, kl));
	int rc = TALLY_ENOMEM;

	if (cmd != NULL && !rc_arg(c, cmd, 0, "LRANGE", 6) &&
	    !rc_arg(c, cmd, 1, key, kl) && !rc_arg(c, cmd, 2, "0", 1) &&
	    !rc_argf(c, cmd, 3, "%d", RC_LOG_CAP - 1))
		rc = exec_read(r, c);
	if (rc == TALLY_OK && c->v[0].reply->type != REDIS_REPLY_ARRAY)
		rc = TALLY_EIO;
	*out = rc == TALLY_OK ? c->v[0].reply : NULL;
	return rc;
}

/* An entry as written (rc_apply.c): "seq:id:at:delta[:rest]", the seq and
 * the id (member or content) unsigned 64-bit, at and delta signed. */
typedef struct rc_entry {
	uint64_t seq, id;
	int64_t at, delta;
} rc_entry;

/* One field of an entry, ending at ':' or at the end when last. */
static int entry_field(char **p, int last, int is_signed, uint64_t *u,
                       int64_t *s)
{
	char *end;

	errno = 0;
	if (is_signed)
		*s = strtoll(*p, &end, 10);
	else if (**p < '0' || **p > '9') /* strtoull takes "-1" */
		return TALLY_ECORRUPT;
	else
		*u = strtoull(*p, &end, 10);
	if (end == *p || errno != 0 || (*end != ':' && *end != '\0') ||
	    (*end == '\0' && !last))
		return TALLY_ECORRUPT;
	*p = *end ? end + 1 : end;
	return TALLY_OK;
}

/* Split an entry into its four numbers and the rest. */
static int entry_split(const redisReply *e, rc_entry *f, const char **rest,
                       size_t *rest_len)
{
	char buf[160], *p;
	int rc;

	if (e->type != REDIS_REPLY_STRING || e->len >= sizeof buf)
		return TALLY_ECORRUPT;
	memcpy(buf, e->str, e->len);
	buf[e->len] = '\0';
	p = buf;
	rc = entry_field(&p, 0, 0, &f->seq, NULL);
	if (rc == TALLY_OK)
		rc = entry_field(&p, 0, 0, &f->id, NULL);
	if (rc == TALLY_OK)
		rc = entry_field(&p, 0, 1, NULL, &f->at);
	if (rc == TALLY_OK)
		rc = entry_field(&p, 1, 1, NULL, &f->delta);
	if (rc != TALLY_OK)
		return rc;
	*rest = e->str + (p - buf);
	*rest_len = e->len - (size_t)(p - buf);
	return TALLY_OK;
}

int rc_recent(store *s, const key_obj *o, size_t limit, uint64_t before,
              tally_entry *out, size_t *n)
{
	rcs *r = (rcs *)s;
	rc_arena a = { 0 };
	rc_cmds c = { .a = &a };
	char tag[RC_KEY_MAX], k[RC_KEY_MAX];
	size_t tl = rc_obj_tag(r, tag, sizeof tag, o);
	const redisReply *l;
	int kl = snprintf(k, sizeof k, "t:r:{%.*s}", (int)tl, tag);
	int rc;

	*n = 0;
	if (tl == 0)
		return TALLY_OK;
	rc = list_read(r, &c, k, (size_t)kl, &l);
	for (size_t i = 0; rc == TALLY_OK && i < l->elements && *n < limit;
	     i++) {
		rc_entry f;
		const char *rest;
		size_t rl;

		rc = entry_split(l->element[i], &f, &rest, &rl);
		if (rc != TALLY_OK || (before && f.seq >= before))
			continue;
		out[*n] = (tally_entry){ f.id, f.at, f.delta, f.seq };
		(*n)++;
	}
	rc_cmds_free(&c);
	rc_arena_reset(&a);
	return rc;
}

int rc_history(store *s, uint64_t member, uint16_t ktype, size_t limit,
               uint64_t before, tally_history_entry *out,
               uint16_t *ctype_ids, size_t *n)
{
	rcs *r = (rcs *)s;
	rc_arena a = { 0 };
	rc_cmds c = { .a = &a };
	char kt[TALLY_NAME_MAX + 8], k[RC_KEY_MAX];
	size_t ktl = rc_ktype_tag(r, kt, sizeof kt, ktype);
	const redisReply *l;
	int kl, rc;

	*n = 0;
	if (ktl == 0)
		return TALLY_OK;
	kl = snprintf(k, sizeof k, "t:h:{u%llu}:%s", (unsigned long long)member,
	              kt);
	rc = list_read(r, &c, k, (size_t)kl, &l);
	for (size_t i = 0; rc == TALLY_OK && i < l->elements && *n < limit;
	     i++) {
		rc_entry f;
		const char *rest;
		size_t rl;

		rc = entry_split(l->element[i], &f, &rest, &rl);
		if (rc != TALLY_OK || (before && f.seq >= before))
			continue;
		/* The entry holds the content type's name: given as it is
		 * (id 0), so that one another tallyd registered after this
		 * one loaded the schema is listed too. */
		if (rl == 0 || rl > TALLY_NAME_MAX) {
			rc = TALLY_ECORRUPT;
			continue;
		}
		memset(&out[*n], 0, sizeof out[*n]);
		memcpy(out[*n].ctype, rest, rl);
		out[*n].content = f.id;
		out[*n].at_ms = f.at;
		out[*n].delta = f.delta;
		out[*n].seq = f.seq;
		ctype_ids[*n] = 0;
		(*n)++;
	}
	rc_cmds_free(&c);
	rc_arena_reset(&a);
	return rc;
}
