/* rc_apply.c: the redis-cluster store's write path. A batch is cut into
 * segments in which no op depends on another's order but through a script
 * (SET/DEL of a counter, a member liked then unliked); each segment costs
 * two round trips, every node's commands pipelined in each:
 *  1. the writes: one script per coalesced counter (all its deltas, in
 *     order, each refused alone on overflow: when none has the other's
 *     sign, one INCRBY of their sum, see RC_LUA_ADD), per object total,
 *     per membership change, per SET/DEL, per op carrying a client id, and
 *     a GROW script for each counter found hot (rc_hot.c);
 *  2. the reads that results need (the shards of a sharded counter, the
 *     sub-hash sizes of a unique object) and the capped logs (recent,
 *     history) of the events that changed something.
 * Then WAIT on every master touched when redis_wait > 0. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/rc_int.h"

/* WAIT's own timeout stays below the cluster client's command timeout (2 s,
 * cluster.h): a replica that lags past it gets WAIT's count, a clean "not
 * on enough replicas", instead of a reply given up on, which costs the
 * connection and reads as an outcome unknown. */
#define RC_WAIT_TIMEOUT_MS 1500

/* G_HOT: increments of a counter that carry client ids (each its own
 * script), counted for hot-counter growth only. */
enum { G_ADD_NAMED = 1, G_ADD_TOTAL, G_SUM_NAMED, G_SUM_UNIQUE, G_HOT };

/* A coalesced script (ADD groups) or a sum read (SUM groups). */
typedef struct rc_grp {
	uint8_t kind;
	uint32_t n;          /* ADD: deltas; SUM: shards or sub-hashes read */
	uint32_t shard;      /* ADD_NAMED: the shard written */
	size_t op;           /* an op of the group (its key or object) */
	int32_t cmd;         /* ADD: index of its script in phase 1 */
	size_t first;        /* SUM: index of its first read in phase 2 */
	size_t more;         /* SUM_NAMED: index of its first read of the
	                        shards another tallyd added */
	uint32_t now;        /* SUM_NAMED: its shard count in the cluster */
	uint8_t bad;         /* SUM: a read met a value tally did not write */
	int64_t sum;         /* SUM: the sum read, less later ops' changes */
	uint32_t grow;       /* ADD_NAMED, HOT: 1 + index of the counter's
	                        GROW script in phase 1, or 0 */
	/* ADD: the deltas' sum and signs, and their runs of equal deltas */
	int64_t dsum;
	int64_t last;        /* the delta of the run being counted */
	int64_t acc;         /* deltas after the op being answered */
	uint32_t runs;       /* runs of equal deltas, in op order */
	uint32_t rl, k;      /* the run being written, runs written */
	uint8_t pos, neg;    /* a delta > 0, a delta < 0 was seen */
	uint8_t ovf;         /* dsum left int64 */
} rc_grp;

/* Per op: where its answer comes from. */
typedef struct rc_opx {
	int32_t grp;         /* ADD group, or -1 */
	int32_t sum;         /* SUM group the result is computed from, or -1 */
	uint32_t pos;        /* place among its ADD group's deltas */
	int32_t cmd;         /* its own phase-1 command, or -1 */
	int64_t d;           /* its change (its log entries' delta) */
	int64_t bd;          /* what this batch changed the sum by: d, or 0
	                        when an earlier request made the change */
	int64_t after;       /* its ADD group's deltas after it (summed
	                        groups: its value is the last one less this) */
	uint8_t changed;
} rc_opx;

typedef struct rc_seg {
	rcs *r;
	store_op *ops;
	size_t from, to;
	rc_opx *x;
	rc_grp *g;
	size_t ng, gcap;
	hmap *gidx;          /* group key -> index */
	rc_cmds c1, c2;
	int sent;            /* some segment's writes went out */
	char key[RC_KEY_MAX], key2[RC_KEY_MAX], key3[RC_KEY_MAX];
} rc_seg;

static int grp_get(rc_seg *s, uint8_t kind, const void *k, size_t len,
                   size_t op, size_t *out)
{
	uint8_t buf[1 + TALLY_KEY_MAX + sizeof(key_obj)];
	size_t *slot;
	int inserted;

	assert(len < sizeof buf);
	buf[0] = kind;
	memcpy(buf + 1, k, len);
	slot = hmap_put(s->gidx, buf, len + 1, &inserted);
	if (slot == NULL)
		return TALLY_ENOMEM;
	if (inserted) {
		if (s->ng == s->gcap) {
			size_t cap = s->gcap ? 2 * s->gcap : 64;
			rc_grp *g = realloc(s->g, cap * sizeof *g);

			if (g == NULL) {
				hmap_del(s->gidx, buf, len + 1);
				return TALLY_ENOMEM;
			}
			s->g = g;
			s->gcap = cap;
		}
		memset(&s->g[s->ng], 0, sizeof s->g[0]);
		s->g[s->ng].kind = kind;
		s->g[s->ng].op = op;
		*slot = s->ng++;
	}
	*out = *slot;
	return TALLY_OK;
}

/* This batch, among every batch of every tallyd: "instance:batch". */
#define RC_BATCH_FMT "%llx:%llx"
#define RC_BATCH_ARGS(s) (unsigned long long)(s)->r->instance, \
                         (unsigned long long)(s)->r->batch_no

/* Batch tokens name this open, this segment and a position in it. */
static size_t batch_tok(rc_seg *s, char *buf, size_t cap, const char *tag,
                        size_t tag_len, char what, size_t i)
{
	int n = snprintf(buf, cap, "t:b:{%.*s}:" RC_BATCH_FMT ":%c%zu",
	                 (int)tag_len, tag, RC_BATCH_ARGS(s), what, i);

	return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* A client token: what it guards comes before the token, never after it
 * ('d' a counter's or a total's write, 'm' a membership's, 'r' and 'h'
 * an event's recent and history entries). IDs are any bytes and tags
 * can coincide (a counter may be named like an object's sub-hash, "u5"
 * like a member's history), so with the kind after the ID the log token
 * of ID "x" was the write token of ID "x:r", and a write could find
 * another script's saved reply under its key. Counter and total writes
 * share 'd': their replies have one form, and the same ID on both is the
 * same request, answered as first run. */
static size_t client_tok(char *buf, size_t cap, const char *tag,
                         size_t tag_len, const store_op *op, char what)
{
	int n = snprintf(buf, cap, "t:i%c:{%.*s}:", what, (int)tag_len, tag);

	if (n < 0 || (size_t)n + op->token_len >= cap)
		return 0;
	memcpy(buf + n, op->token, op->token_len);
	return (size_t)n + op->token_len;
}

/* The token key guarding op (what: 'm' its membership change, 'r' or 'h'
 * a log's): the client's when it has one, else a batch token. */
static size_t op_tok(rc_seg *s, char *buf, size_t cap, const char *tag,
                     size_t tag_len, size_t i, char what)
{
	const store_op *op = &s->ops[i];

	if (op->token != NULL)
		return client_tok(buf, cap, tag, tag_len, op, what);
	return batch_tok(s, buf, cap, tag, tag_len, what, i);
}

static size_t counter_tag(char *buf, const store_op *op, uint32_t shard)
{
	size_t n = rc_esc(buf, op->key, op->key_len);

	if (shard > 0)
		n += (size_t)sprintf(buf + n, "#%u", shard);
	return n;
}

/* What op changes its integer key by (counter or object total). */
static int64_t op_delta(const store_op *op)
{
	return op->kind == STORE_OP_INCRBY ? op->value
	       : op->remove ? -op->delta : op->delta;
}

/* Note the next delta of an ADD group (op order). */
static void grp_delta(rc_grp *g, int64_t d)
{
	if (g->n == 0 || d != g->last)
		g->runs++;
	g->last = d;
	g->pos |= d > 0;
	g->neg |= d < 0;
	if (!g->ovf && __builtin_add_overflow(g->dsum, d, &g->dsum))
		g->ovf = 1;
	g->n++;
}

/* Whether one INCRBY of the group's sum may stand for its deltas: with no
 * two of opposite signs the values in between are passed on the way from
 * the first to the last, so only the last can overflow (then Redis
 * refuses the INCRBY and the script adds the deltas one by one). */
static int grp_summed(const rc_grp *g)
{
	return !(g->pos && g->neg) && !g->ovf;
}

/* An ADD script: value key, token key, optional cfg key, ttl, this
 * batch, the sum (summed) or "", then npairs (delta, run length) pairs,
 * set with put_pair(). */
static cluster_cmd *add_cmd(rc_seg *s, const char *tag, size_t tl,
                            const char *vkey, size_t vl, const char *tkey,
                            size_t tkl, int with_cfg, uint32_t ttl,
                            int summed, int64_t sum, uint32_t npairs)
{
	int nkeys = with_cfg ? 3 : 2;
	cluster_cmd *cmd = rc_eval(s->r, &s->c1, RC_S_ADD, nkeys,
	                           3 + 2 * (int)npairs, rc_slot(vkey, vl));
	char cfg[RC_KEY_MAX];
	int n;

	if (cmd == NULL || rc_arg(&s->c1, cmd, 3, vkey, vl) ||
	    rc_arg(&s->c1, cmd, 4, tkey, tkl) ||
	    rc_argf(&s->c1, cmd, 3 + nkeys, "%u", ttl) ||
	    rc_argf(&s->c1, cmd, 4 + nkeys, RC_BATCH_FMT, RC_BATCH_ARGS(s)))
		return NULL;
	if (summed ? rc_argf(&s->c1, cmd, 5 + nkeys, "%lld", (long long)sum)
	           : rc_arg(&s->c1, cmd, 5 + nkeys, "", 0))
		return NULL;
	if (with_cfg) {
		n = snprintf(cfg, sizeof cfg, "t:cfg:{%.*s}", (int)tl, tag);
		if (n < 0 || (size_t)n >= sizeof cfg ||
		    rc_arg(&s->c1, cmd, 5, cfg, (size_t)n))
			return NULL;
	}
	return cmd;
}

/* Pair k of an ADD script with npairs pairs: delta d, cnt times. */
static int put_pair(rc_seg *s, cluster_cmd *cmd, uint32_t npairs,
                    uint32_t k, int64_t d, uint32_t cnt)
{
	int i = cmd->argc - 2 * (int)npairs + 2 * (int)k;

	if (rc_argf(&s->c1, cmd, i, "%lld", (long long)d) ||
	    rc_argf(&s->c1, cmd, i + 1, "%u", cnt))
		return TALLY_ENOMEM;
	return TALLY_OK;
}

static int plan_incr(rc_seg *s, size_t i)
{
	store_op *op = &s->ops[i];
	rcs *r = s->r;
	char *tag = s->key3, *vk = s->key, *tk = s->key2;
	size_t tl, vl, tkl, gi;
	cluster_cmd *cmd;
	int rc;

	if (op->token != NULL) {
		/* A client id is checked in shard 0's slot, where any tallyd
		 * looks for it. */
		tl = counter_tag(tag, op, 0);
		vl = (size_t)snprintf(vk, RC_KEY_MAX, "t:c:{%.*s}", (int)tl, tag);
		tkl = client_tok(tk, RC_KEY_MAX, tag, tl, op, 'd');
		cmd = tkl ? add_cmd(s, tag, tl, vk, vl, tk, tkl, 1,
		                    r->token_ttl_s, 0, 0, 1) : NULL;
		if (cmd == NULL || put_pair(s, cmd, 1, 0, op->value, 1))
			return TALLY_ENOMEM;
		s->x[i].cmd = (int32_t)(s->c1.n - 1);
		rc = grp_get(s, G_HOT, op->key, op->key_len, i, &gi);
		if (rc == TALLY_OK)
			s->g[gi].n++;
		return rc;
	}
	rc = grp_get(s, G_ADD_NAMED, op->key, op->key_len, i, &gi);
	if (rc != TALLY_OK)
		return rc;
	s->x[i].grp = (int32_t)gi;
	s->x[i].pos = s->g[gi].n;
	grp_delta(&s->g[gi], op->value);
	return TALLY_OK;
}

static int plan_setdel(rc_seg *s, size_t i)
{
	store_op *op = &s->ops[i];
	char *tag = s->key3;
	size_t tl = counter_tag(tag, op, 0), tkl;
	int set = op->kind == STORE_OP_SET;
	cluster_cmd *cmd = rc_eval(s->r, &s->c1, RC_S_SETDEL, 3, set ? 3 : 2,
	                           0);
	int n;

	if (cmd == NULL)
		return TALLY_ENOMEM;
	n = snprintf(s->key, RC_KEY_MAX, "t:c:{%.*s}", (int)tl, tag);
	cmd->slot = rc_slot(s->key, (size_t)n);
	if (rc_arg(&s->c1, cmd, 3, s->key, (size_t)n))
		return TALLY_ENOMEM;
	n = snprintf(s->key, RC_KEY_MAX, "t:cfg:{%.*s}", (int)tl, tag);
	tkl = batch_tok(s, s->key2, RC_KEY_MAX, tag, tl, 'w', i);
	if (rc_arg(&s->c1, cmd, 4, s->key, (size_t)n) || tkl == 0 ||
	    rc_arg(&s->c1, cmd, 5, s->key2, tkl) ||
	    rc_argf(&s->c1, cmd, 6, "%u", RC_BATCH_TOKEN_TTL_S) ||
	    rc_arg(&s->c1, cmd, 7, set ? "s" : "d", 1))
		return TALLY_ENOMEM;
	if (set && rc_argf(&s->c1, cmd, 8, "%lld", (long long)op->value))
		return TALLY_ENOMEM;
	s->x[i].cmd = (int32_t)(s->c1.n - 1);
	return TALLY_OK;
}

static int plan_unique(rc_seg *s, size_t i, const char *otag, size_t ol)
{
	store_op *op = &s->ops[i];
	unsigned sub = rc_sub_of(op->member);
	char tag[RC_KEY_MAX];
	size_t tl, tkl, gi;
	cluster_cmd *cmd;
	int n, rc;

	tl = (size_t)snprintf(tag, sizeof tag, "%.*s#%u", (int)ol, otag, sub);
	n = snprintf(s->key, RC_KEY_MAX, "t:m:{%.*s}", (int)tl, tag);
	tkl = op_tok(s, s->key2, RC_KEY_MAX, tag, tl, i, 'm');
	cmd = rc_eval(s->r, &s->c1, RC_S_MEMBER, 2, 4,
	              rc_slot(s->key, (size_t)n));
	if (cmd == NULL || tkl == 0 ||
	    rc_arg(&s->c1, cmd, 3, s->key, (size_t)n) ||
	    rc_arg(&s->c1, cmd, 4, s->key2, tkl) ||
	    rc_argf(&s->c1, cmd, 5, "%u", op->token ? s->r->token_ttl_s
	                                            : RC_BATCH_TOKEN_TTL_S) ||
	    rc_argf(&s->c1, cmd, 6, "%llu", (unsigned long long)op->member) ||
	    rc_argf(&s->c1, cmd, 7, "%lld", (long long)op->at_ms) ||
	    rc_arg(&s->c1, cmd, 8, op->remove ? "r" : "a", 1))
		return TALLY_ENOMEM;
	s->x[i].cmd = (int32_t)(s->c1.n - 1);
	rc = grp_get(s, G_SUM_UNIQUE, &op->obj, sizeof op->obj, i, &gi);
	if (rc == TALLY_OK)
		s->x[i].sum = (int32_t)gi;
	return rc;
}

static int plan_total(rc_seg *s, size_t i, const char *otag, size_t ol)
{
	store_op *op = &s->ops[i];
	int64_t d = op->remove ? -op->delta : op->delta;
	size_t gi, tkl;
	cluster_cmd *cmd;
	int n, rc;

	if (op->token == NULL) {
		rc = grp_get(s, G_ADD_TOTAL, &op->obj, sizeof op->obj, i, &gi);
		if (rc != TALLY_OK)
			return rc;
		s->x[i].grp = (int32_t)gi;
		s->x[i].pos = s->g[gi].n;
		grp_delta(&s->g[gi], d);
		return TALLY_OK;
	}
	n = snprintf(s->key, RC_KEY_MAX, "t:t:{%.*s}", (int)ol, otag);
	tkl = client_tok(s->key2, RC_KEY_MAX, otag, ol, op, 'd');
	cmd = tkl ? add_cmd(s, otag, ol, s->key, (size_t)n, s->key2, tkl, 0,
	                    s->r->token_ttl_s, 0, 0, 1) : NULL;
	if (cmd == NULL || put_pair(s, cmd, 1, 0, d, 1))
		return TALLY_ENOMEM;
	s->x[i].cmd = (int32_t)(s->c1.n - 1);
	return TALLY_OK;
}

/* Schema entries. Keys hold names, so ids are each instance's own: a
 * content type's name goes under its id or the next free one
 * (RC_LUA_CTYPE). A counting type's name keeps its first mode across
 * instances (RC_LUA_TYPE). */
static int plan_schema(rc_seg *s, size_t i)
{
	store_op *op = &s->ops[i];
	int ctype = op->kind == STORE_OP_CTYPE;
	uint16_t id = ctype ? op->obj.ctype : op->obj.ktype;
	uint16_t slot = rc_slot("t:schema", 8);
	cluster_cmd *cmd;
	char val[TALLY_NAME_MAX + 3];
	int n, rc;

	rc = ctype ? rc_learn_ctype(s->r, (const char *)op->key, op->key_len, id)
	           : rc_learn_ktype(s->r, (const char *)op->key, op->key_len,
	                            id);
	if (rc != TALLY_OK)
		return rc;
	if (ctype) {
		n = snprintf(val, sizeof val, "%.*s", (int)op->key_len,
		             (const char *)op->key);
		cmd = rc_eval(s->r, &s->c1, RC_S_CTYPE, 1, 2, slot);
		if (cmd == NULL || rc_arg(&s->c1, cmd, 3, "t:schema", 8) ||
		    rc_argf(&s->c1, cmd, 4, "%u", id) ||
		    rc_arg(&s->c1, cmd, 5, val, (size_t)n))
			return TALLY_ENOMEM;
	} else {
		cmd = rc_eval(s->r, &s->c1, RC_S_TYPE, 1, 3, slot);
		if (cmd == NULL || rc_arg(&s->c1, cmd, 3, "t:schema", 8) ||
		    rc_argf(&s->c1, cmd, 4, "%u", id) ||
		    rc_arg(&s->c1, cmd, 5, op->key, op->key_len) ||
		    rc_argf(&s->c1, cmd, 6, "%u", op->mode))
			return TALLY_ENOMEM;
	}
	s->x[i].cmd = (int32_t)(s->c1.n - 1);
	return TALLY_OK;
}

static int plan_op(rc_seg *s, size_t i)
{
	store_op *op = &s->ops[i];
	char otag[RC_KEY_MAX];
	size_t ol;

	switch (op->kind) {
	case STORE_OP_INCRBY:
		return plan_incr(s, i);
	case STORE_OP_SET:
	case STORE_OP_DEL:
		return plan_setdel(s, i);
	case STORE_OP_EVENT:
		ol = rc_obj_tag(s->r, otag, sizeof otag, &op->obj);
		if (ol == 0)
			return TALLY_ECORRUPT; /* a name the engine never gave */
		return op->mode == TALLY_MODE_UNIQUE ? plan_unique(s, i, otag, ol)
		                                     : plan_total(s, i, otag, ol);
	case STORE_OP_TYPE:
	case STORE_OP_CTYPE:
		return plan_schema(s, i);
	case STORE_OP_TOKEN_DEL:
		return TALLY_OK; /* tokens expire in Redis (EX) */
	default:
		return TALLY_EINVAL;
	}
}

/* A GROW script for a counter found hot, in phase 1's pipeline: no round
 * trip of its own, and the batch's WAIT covers it like the writes. */
static int plan_grow(rc_seg *s, rc_grp *g, const store_op *op, uint32_t n)
{
	char tag[RC_KEY_MAX];
	size_t tl = rc_esc(tag, op->key, op->key_len);
	int kl = snprintf(s->key, RC_KEY_MAX, "t:cfg:{%.*s}", (int)tl, tag);
	cluster_cmd *cmd;

	if (kl < 0 || kl >= RC_KEY_MAX)
		return TALLY_ENOMEM;
	cmd = rc_eval(s->r, &s->c1, RC_S_GROW, 1, 1,
	              rc_slot(s->key, (size_t)kl));
	if (cmd == NULL || rc_arg(&s->c1, cmd, 3, s->key, (size_t)kl) ||
	    rc_argf(&s->c1, cmd, 4, "%u", n))
		return TALLY_ENOMEM;
	g->grow = (uint32_t)s->c1.n;
	return TALLY_OK;
}

/* Count a counter group's increments; grow the counter if it is hot. */
static int note_hot(rc_seg *s, rc_grp *g, uint64_t now_s)
{
	const store_op *op = &s->ops[g->op];
	uint32_t want = rc_hot_note(s->r, op->key, op->key_len, g->n, now_s);

	return want ? plan_grow(s, g, op, want) : TALLY_OK;
}

static uint64_t now_s_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec;
}

/* The ADD script of each group: its deltas in op order, run-length
 * coded, and their sum when one INCRBY may add them (grp_summed). */
static int plan_groups(rc_seg *s)
{
	rcs *r = s->r;
	uint64_t now_s = now_s_mono();

	for (size_t gi = 0; gi < s->ng; gi++) {
		rc_grp *g = &s->g[gi];
		const store_op *op = &s->ops[g->op];
		char *tag = s->key3;
		size_t tl, vl, tkl;

		if ((g->kind == G_ADD_NAMED || g->kind == G_HOT) &&
		    note_hot(s, g, now_s) != TALLY_OK)
			return TALLY_ENOMEM;
		if (g->kind == G_ADD_NAMED) {
			uint32_t n = rc_shards_get(r, op->key, op->key_len);

			/* Instances start at different shards, then turn. */
			g->shard = (uint32_t)((r->instance + r->batch_no) % n);
			tl = counter_tag(tag, op, g->shard);
			vl = (size_t)snprintf(s->key, RC_KEY_MAX, "t:c:{%.*s}",
			                      (int)tl, tag);
		} else if (g->kind == G_ADD_TOTAL) {
			tl = rc_obj_tag(r, tag, RC_KEY_MAX, &op->obj);
			vl = (size_t)snprintf(s->key, RC_KEY_MAX, "t:t:{%.*s}",
			                      (int)tl, tag);
		} else {
			continue;
		}
		tkl = batch_tok(s, s->key2, RC_KEY_MAX, tag, tl, 'g', gi);
		if (tkl == 0 || add_cmd(s, tag, tl, s->key, vl, s->key2, tkl,
		                        g->kind == G_ADD_NAMED && g->shard == 0,
		                        RC_BATCH_TOKEN_TTL_S, grp_summed(g),
		                        g->dsum, g->runs) == NULL)
			return TALLY_ENOMEM;
		g->cmd = (int32_t)(s->c1.n - 1);
	}
	for (size_t i = s->from; i < s->to; i++) {
		rc_grp *g;
		int64_t d;

		if (s->ops[i].skip || s->x[i].grp < 0)
			continue;
		g = &s->g[s->x[i].grp];
		d = op_delta(&s->ops[i]);
		if (g->rl > 0 && d != g->last) {
			if (put_pair(s, &s->c1.v[g->cmd], g->runs, g->k++,
			             g->last, g->rl))
				return TALLY_ENOMEM;
			g->rl = 0;
		}
		g->last = d;
		g->rl++;
	}
	for (size_t gi = 0; gi < s->ng; gi++) {
		rc_grp *g = &s->g[gi];

		if (g->rl > 0 && put_pair(s, &s->c1.v[g->cmd], g->runs, g->k++,
		                          g->last, g->rl))
			return TALLY_ENOMEM;
		assert(g->k == g->runs);
	}
	/* A summed group answers with its last value: each op's is that less
	 * the deltas after it (partial sums of one sign, within the sum). */
	for (size_t i = s->to; i-- > s->from;) {
		rc_grp *g;

		if (s->ops[i].skip || s->x[i].grp < 0)
			continue;
		g = &s->g[s->x[i].grp];
		if (!grp_summed(g))
			continue;
		s->x[i].after = g->acc;
		if (__builtin_add_overflow(g->acc, op_delta(&s->ops[i]), &g->acc))
			return TALLY_ECORRUPT; /* cannot be: |acc| <= |dsum| */
	}
	return TALLY_OK;
}

/* "n|v1,v2,..." or "n|=v" of an ADD script: the shard count read, and
 * the value after delta pos (TALLY_EOVERFLOW for "E"); for "=v", v less
 * after, the sum of the deltas that followed pos. */
static int add_reply(const redisReply *rep, uint32_t pos, int64_t after,
                     uint32_t *n, int64_t *v, int *saved)
{
	const char *p, *end;
	char buf[32], *e;
	unsigned long shards;

	if (rep == NULL || rep->type != REDIS_REPLY_STRING)
		return TALLY_EIO;
	p = rep->str;
	end = rep->str + rep->len;
	/* A token's saved answer: the change was made by a run before. */
	*saved = p < end && *p == '=';
	p += *saved;
	/* The count is read from t:cfg, which tally keeps within 1..RC_SHARDS_MAX;
	 * past that it would plan a read of every shard named. */
	shards = strtoul(p, &e, 10);
	if (e == p || e >= end || *e != '|' || shards < 1 ||
	    shards > RC_SHARDS_MAX)
		return TALLY_ECORRUPT;
	*n = (uint32_t)shards;
	p = e + 1;
	if (p < end && *p == '=') {
		if (end - p - 1 < 1 || (size_t)(end - p - 1) >= sizeof buf)
			return TALLY_ECORRUPT;
		memcpy(buf, p + 1, (size_t)(end - p - 1));
		buf[end - p - 1] = '\0';
		*v = strtoll(buf, &e, 10);
		if (*e != '\0' || __builtin_sub_overflow(*v, after, v))
			return TALLY_ECORRUPT;
		return TALLY_OK;
	}
	for (uint32_t i = 0; i < pos; i++) {
		p = memchr(p, ',', (size_t)(end - p));
		if (p == NULL)
			return TALLY_ECORRUPT;
		p++;
	}
	e = memchr(p, ',', (size_t)(end - p));
	if (e == NULL)
		e = (char *)end;
	if (e - p == 1 && *p == 'E')
		return TALLY_EOVERFLOW;
	if (e - p == 0 || (size_t)(e - p) >= sizeof buf)
		return TALLY_ECORRUPT;
	memcpy(buf, p, (size_t)(e - p));
	buf[e - p] = '\0';
	*v = strtoll(buf, &e, 10);
	return *e == '\0' ? TALLY_OK : TALLY_ECORRUPT;
}

/* A named counter whose result must be summed over its shards. */
static int need_sum(rc_seg *s, size_t i, uint32_t n)
{
	const store_op *op = &s->ops[i];
	size_t gi;
	int rc = grp_get(s, G_SUM_NAMED, op->key, op->key_len, i, &gi);

	if (rc != TALLY_OK)
		return rc;
	if (s->g[gi].n < n)
		s->g[gi].n = n;
	s->x[i].sum = (int32_t)gi;
	return TALLY_OK;
}

/* What op changed in this batch, for the answers of the ops before it
 * (phase2): its delta, unless a token's saved answer says an earlier
 * request made the change. A resent command's own first send may have
 * left that token, and then the change is this batch's; which of the two
 * cannot be known, and the batch's own is taken (the likelier). */
static int64_t batch_delta(int64_t d, const cluster_cmd *cmd, int saved)
{
	return saved && !cmd->resent ? 0 : d;
}

static int parse_member(store_op *op, rc_opx *x, const cluster_cmd *cmd)
{
	const redisReply *rep = cmd->reply;
	const char *p;
	int saved;

	if (rep->type != REDIS_REPLY_STRING || rep->len < 1)
		return TALLY_EIO;
	saved = rep->str[0] == '=';
	p = rep->str + saved;
	/* "0" or "1", "=" first when a token answered: anything else is
	 * another script's saved reply under the same token key. */
	if (rep->str + rep->len - p != 1 || (*p != '0' && *p != '1'))
		return TALLY_ECORRUPT;
	/* Changed, even when saved: its log entries are written (their own
	 * tokens keep them once), in case the first run stopped short. */
	x->changed = *p == '1';
	x->d = x->changed ? (op->remove ? -1 : 1) : 0;
	x->bd = batch_delta(x->d, cmd, saved);
	return TALLY_OK;
}

static int parse_setdel(store_op *op, const redisReply *rep)
{
	int nil;

	if (rep->type == REDIS_REPLY_STRING && rep->len == 1 &&
	    rep->str[0] == 'S') {
		op->err = TALLY_ENOTSUP; /* sharded: see design note 4 */
		return TALLY_OK;
	}
	return rc_reply_i64(rep, &op->result, &nil) == TALLY_OK && !nil
	       ? TALLY_OK : TALLY_EIO;
}

/* Phase 1's answers into each op: a result, an error, or a sum to read. */
static int parse_phase1(rc_seg *s)
{
	for (size_t i = s->from; i < s->to; i++) {
		store_op *op = &s->ops[i];
		rc_opx *x = &s->x[i];
		const cluster_cmd *cmd;
		const redisReply *rep;
		uint32_t n = 1, pos = 0;
		int rc = TALLY_OK, saved = 0;

		if (op->skip || (x->cmd < 0 && x->grp < 0))
			continue;
		if (x->grp >= 0) {
			cmd = &s->c1.v[s->g[x->grp].cmd];
			pos = x->pos;
		} else {
			cmd = &s->c1.v[x->cmd];
		}
		rep = cmd->reply;
		if (rep->type == REDIS_REPLY_ERROR) {
			op->err = TALLY_EIO; /* e.g. WRONGTYPE: a foreign key */
			continue;
		}
		if (op->kind == STORE_OP_TYPE) {
			if (rep->type != REDIS_REPLY_STRING || rep->len != 1)
				rc = TALLY_ECORRUPT;
			else if (rep->str[0] == 'M')
				op->err = TALLY_ETYPEEXISTS;
		} else if (op->kind == STORE_OP_SET ||
		           op->kind == STORE_OP_DEL) {
			rc = parse_setdel(op, rep);
		} else if (op->kind == STORE_OP_EVENT &&
		           op->mode == TALLY_MODE_UNIQUE) {
			rc = parse_member(op, x, cmd);
		} else if (op->kind == STORE_OP_INCRBY ||
		           op->kind == STORE_OP_EVENT) {
			rc = add_reply(rep, pos, x->after, &n, &op->result,
			               &saved);
			if (rc == TALLY_EOVERFLOW) {
				op->err = rc;
				rc = TALLY_OK;
				continue;
			}
			if (rc == TALLY_OK) {
				x->changed = 1;
				x->d = op_delta(op);
				x->bd = batch_delta(x->d, cmd, saved);
			}
		}
		if (rc == TALLY_ECORRUPT) {
			/* A value tally did not write (a shard count out of
			 * range, a token key of another form): this op's
			 * answer alone is wrong. It may have run, so it is
			 * answered with an error; the segment's others
			 * stand, and the store serves on (a reopen would not
			 * mend the value). */
			op->err = TALLY_ECORRUPT;
			x->changed = 0;
			x->d = x->bd = 0;
			continue;
		}
		if (rc != TALLY_OK)
			return rc;
		if (op->kind == STORE_OP_INCRBY) {
			uint32_t known = rc_shards_get(s->r, op->key, op->key_len);

			rc_shards_seen(s->r, op->key, op->key_len, n);
			if (n > 1 || known > 1)
				rc = need_sum(s, i, n > known ? n : known);
		}
		if (rc != TALLY_OK)
			return rc;
	}
	return TALLY_OK;
}

static int plan_sums(rc_seg *s)
{
	for (size_t gi = 0; gi < s->ng; gi++) {
		rc_grp *g = &s->g[gi];
		const store_op *op = &s->ops[g->op];
		char tag[RC_KEY_MAX];
		size_t tl = 0;

		if (g->kind != G_SUM_NAMED && g->kind != G_SUM_UNIQUE)
			continue;
		g->first = s->c2.n;
		if (g->kind == G_SUM_NAMED) {
			/* As a read does: shard 0 with the shard count,
			 * which another tallyd may have raised
			 * (sums_grown()). */
			tl = counter_tag(tag, op, 0);
			if (rc_counter_reads(&s->c2, tag, tl, g->n) != TALLY_OK)
				return TALLY_ENOMEM;
			continue;
		}
		g->n = RC_SUBS;
		tl = rc_obj_tag(s->r, tag, sizeof tag, &op->obj);
		for (uint32_t k = 0; k < g->n; k++) {
			cluster_cmd *cmd = rc_cmd(&s->c2, 2, 0);
			int n = snprintf(s->key, RC_KEY_MAX, "t:m:{%.*s#%u}",
			                 (int)tl, tag, k);

			if (cmd == NULL || n < 0 || n >= RC_KEY_MAX ||
			    rc_arg(&s->c2, cmd, 0, "HLEN", 4) ||
			    rc_arg(&s->c2, cmd, 1, s->key, (size_t)n))
				return TALLY_ENOMEM;
			cmd->slot = rc_slot(s->key, (size_t)n);
		}
	}
	return TALLY_OK;
}

/* One capped-log append: list and sequence keys in tag's slot. */
static int plan_log(rc_seg *s, size_t i, const char *tag, size_t tl,
                    const char *list, const char *seq, char what,
                    const char *entry, size_t el)
{
	cluster_cmd *cmd;
	size_t tkl = op_tok(s, s->key2, RC_KEY_MAX, tag, tl, i, what);
	int n = snprintf(s->key, RC_KEY_MAX, "%s", list);

	cmd = rc_eval(s->r, &s->c2, RC_S_LOG, 3, 3, rc_slot(list, (size_t)n));
	if (cmd == NULL || tkl == 0 ||
	    rc_arg(&s->c2, cmd, 3, list, (size_t)n) ||
	    rc_arg(&s->c2, cmd, 4, seq, strlen(seq)) ||
	    rc_arg(&s->c2, cmd, 5, s->key2, tkl) ||
	    rc_argf(&s->c2, cmd, 6, "%u", s->ops[i].token ? s->r->token_ttl_s
	                                                  : RC_BATCH_TOKEN_TTL_S) ||
	    rc_argf(&s->c2, cmd, 7, "%d", RC_LOG_CAP) ||
	    rc_arg(&s->c2, cmd, 8, entry, el))
		return TALLY_ENOMEM;
	return TALLY_OK;
}

/* Recent and history entries of an event that changed something and
 * names a member (anonymous events are counted, never listed). */
static int plan_logs(rc_seg *s, size_t i)
{
	const store_op *op = &s->ops[i];
	char otag[RC_KEY_MAX], kt[TALLY_NAME_MAX + 8], list[RC_KEY_MAX];
	char seq[RC_KEY_MAX], utag[32], entry[3 * 24 + TALLY_NAME_MAX + 8];
	size_t ol = rc_obj_tag(s->r, otag, sizeof otag, &op->obj);
	size_t kl = rc_ktype_tag(s->r, kt, sizeof kt, op->obj.ktype);
	int64_t d = s->x[i].d;
	const char *cname = otag;
	size_t cl;
	int el, ul, rc;

	if (ol == 0 || kl == 0)
		return TALLY_ECORRUPT;
	cl = (size_t)((const char *)memchr(otag, '|', ol) - otag);
	snprintf(list, sizeof list, "t:r:{%.*s}", (int)ol, otag);
	snprintf(seq, sizeof seq, "t:q:{%.*s}", (int)ol, otag);
	el = snprintf(entry, sizeof entry, "%llu:%lld:%lld",
	              (unsigned long long)op->member, (long long)op->at_ms,
	              (long long)d);
	rc = plan_log(s, i, otag, ol, list, seq, 'r', entry, (size_t)el);
	if (rc != TALLY_OK)
		return rc;
	ul = snprintf(utag, sizeof utag, "u%llu", (unsigned long long)op->member);
	snprintf(list, sizeof list, "t:h:{%s}:%s", utag, kt);
	snprintf(seq, sizeof seq, "t:hq:{%s}:%s", utag, kt);
	el = snprintf(entry, sizeof entry, "%llu:%lld:%lld:%.*s",
	              (unsigned long long)op->obj.content, (long long)op->at_ms,
	              (long long)d, (int)cl, cname);
	return plan_log(s, i, utag, (size_t)ul, list, seq, 'h', entry,
	                (size_t)el);
}

/* Whether a sum's read met a value tally did not write (not an integer,
 * a key of another type): the ops answered from that sum fail alone, as
 * in phase 1, and the store serves on (a reopen would not mend it). */
static int read_not_ours(int rc, const redisReply *rep)
{
	return rc == TALLY_ECORRUPT ||
	       (rc == TALLY_EIO && rep != NULL &&
	        rep->type == REDIS_REPLY_ERROR &&
	        strncmp(rep->str, "WRONGTYPE", 9) == 0);
}

/* After phase 2's reads: a summed counter whose shard count in the
 * cluster (read with its shard 0) is more than this tallyd knew has had
 * shards added by another tallyd, and they are read too, in one more
 * round trip. Without them an INCR's answer left out what those shards
 * held, until this tallyd next wrote shard 0 (whose script reads the
 * count). */
static int sums_grown(rc_seg *s)
{
	size_t from = s->c2.n;
	int rc = TALLY_OK;

	for (size_t gi = 0; rc == TALLY_OK && gi < s->ng; gi++) {
		rc_grp *g = &s->g[gi];
		char tag[RC_KEY_MAX];

		if (g->kind != G_SUM_NAMED)
			continue;
		rc = rc_cfg_check(s->c2.v[g->first].reply, g->n, &g->now);
		g->more = s->c2.n;
		if (rc == TALLY_ECORRUPT) { /* the count is not tally's */
			g->bad = 1;
			rc = TALLY_OK;
		}
		if (rc == TALLY_OK && g->now > g->n)
			rc = rc_shard_reads(&s->c2, tag,
			                    counter_tag(tag, &s->ops[g->op], 0),
			                    g->n, g->now);
	}
	if (rc == TALLY_OK && s->c2.n > from) {
		rc_cmds more = { .v = s->c2.v + from, .n = s->c2.n - from,
		                 .a = s->c2.a };

		rc = rc_exec(s->r->cl, &more);
		for (size_t gi = 0; rc == TALLY_OK && gi < s->ng; gi++) {
			const rc_grp *g = &s->g[gi];
			const store_op *op = &s->ops[g->op];

			if (g->kind == G_SUM_NAMED && g->now > g->n)
				rc_shards_seen(s->r, op->key, op->key_len,
				               g->now);
		}
	}
	return rc;
}

static int phase2(rc_seg *s)
{
	int rc = plan_sums(s);

	for (size_t i = s->from; rc == TALLY_OK && i < s->to; i++) {
		const store_op *op = &s->ops[i];

		if (!op->skip && op->kind == STORE_OP_EVENT && op->err == 0 &&
		    s->x[i].changed && op->member != 0)
			rc = plan_logs(s, i);
	}
	if (rc == TALLY_OK)
		rc = rc_exec(s->r->cl, &s->c2);
	if (rc == TALLY_OK)
		rc = sums_grown(s);
	for (size_t gi = 0; rc == TALLY_OK && gi < s->ng; gi++) {
		rc_grp *g = &s->g[gi];
		uint32_t reads;

		if (g->kind != G_SUM_NAMED && g->kind != G_SUM_UNIQUE)
			continue;
		g->sum = 0;
		reads = g->kind == G_SUM_NAMED ? g->now : g->n;
		for (uint32_t k = 0; rc == TALLY_OK && k < reads; k++) {
			const redisReply *rep =
				k >= g->n ? s->c2.v[g->more + k - g->n].reply
				          : s->c2.v[g->first + k].reply;
			int64_t v;
			int nil;

			if (g->kind == G_SUM_NAMED && k == 0)
				rep = rep->element[0]; /* checked: sums_grown() */
			rc = rc_reply_i64(rep, &v, &nil);
			if (read_not_ours(rc, rep)) {
				g->bad = 1;
				rc = TALLY_OK;
				break;
			}
			if (rc == TALLY_OK &&
			    __builtin_add_overflow(g->sum, v, &g->sum))
				rc = TALLY_EOVERFLOW;
		}
		if (rc == TALLY_EOVERFLOW) { /* a sharded sum out of int64 */
			g->sum = INT64_MAX;
			rc = TALLY_OK;
		}
	}
	/* Each op's result: the sum less what the later ops changed. */
	for (size_t i = s->to; rc == TALLY_OK && i-- > s->from;) {
		store_op *op = &s->ops[i];
		rc_grp *g;

		if (op->skip || op->err || s->x[i].sum < 0)
			continue;
		g = &s->g[s->x[i].sum];
		if (g->bad) {
			op->err = TALLY_ECORRUPT; /* it may have been made */
			continue;
		}
		op->result = g->sum;
		g->sum -= s->x[i].bd;
	}
	return rc;
}

static int segment_run(rc_seg *s)
{
	int rc = TALLY_OK;

	s->r->batch_no++;
	s->ng = 0;
	hmap_clear(s->gidx);
	for (size_t i = s->from; i < s->to; i++) {
		s->x[i] = (rc_opx){ .grp = -1, .sum = -1, .cmd = -1 };
		/* A skipped op keeps the engine's answer: its error (a
		 * token that could not be tracked, a token read that
		 * failed) is what its caller must see. */
		if (!s->ops[i].skip)
			s->ops[i].err = TALLY_OK;
	}
	for (size_t i = s->from; rc == TALLY_OK && i < s->to; i++)
		if (!s->ops[i].skip)
			rc = plan_op(s, i);
	if (rc == TALLY_OK)
		rc = plan_groups(s);
	if (rc == TALLY_OK) {
		s->sent = 1;
		rc = rc_exec(s->r->cl, &s->c1);
	}
	/* Growths first, so that this batch's results sum the new shards. */
	for (size_t gi = 0; rc == TALLY_OK && gi < s->ng; gi++) {
		const store_op *op = &s->ops[s->g[gi].op];

		if (s->g[gi].grow > 0)
			rc_hot_grown(s->r, op->key, op->key_len,
			             s->c1.v[s->g[gi].grow - 1].reply);
	}
	if (rc == TALLY_OK)
		rc = parse_phase1(s);
	if (rc == TALLY_OK)
		rc = phase2(s);
	atomic_fetch_add(&s->r->st_entries, s->c1.n + s->c2.n);
	return rc;
}

/* What a segment did to one key, for segment_cut(). */
#define SEEN_ADD 1    /* added to without a client id: a shared script */
#define SEEN_WRITE 2  /* SET/DEL, or a membership change */
#define SEEN_ADD_ID 4 /* added to with a client id: a script of its own */

/* Whether op i must start a new segment: its order against an earlier op
 * of the segment is not kept by one script. seen: 'n'+key (a counter),
 * 't'+object (a total), 'm'+object+member -> SEEN_* bits. An add with a
 * client id runs its own script, which plan_groups() sends ahead of the
 * shared ones: after an add without one to the same key it would be
 * applied first, and the two replies (and an overflow refusal) swapped. */
static int segment_cut(rc_seg *s, hmap *seen, size_t i)
{
	const store_op *op = &s->ops[i];
	uint8_t k[1 + TALLY_KEY_MAX + KEY_OBJ_LEN + 8];
	size_t len;
	uint8_t *v, want;
	int inserted;

	if (op->kind == STORE_OP_INCRBY || op->kind == STORE_OP_SET ||
	    op->kind == STORE_OP_DEL) {
		k[0] = 'n';
		memcpy(k + 1, op->key, op->key_len);
		len = 1 + op->key_len;
		want = op->kind != STORE_OP_INCRBY ? SEEN_WRITE
		       : op->token != NULL ? SEEN_ADD_ID : SEEN_ADD;
	} else if (op->kind == STORE_OP_EVENT &&
	           op->mode == TALLY_MODE_UNIQUE) {
		/* Encoded, not copied: key_obj has padding bytes. */
		k[0] = 'm';
		key_obj_encode(k + 1, &op->obj);
		memcpy(k + 1 + KEY_OBJ_LEN, &op->member, 8);
		len = 1 + KEY_OBJ_LEN + 8;
		want = SEEN_WRITE;
	} else if (op->kind == STORE_OP_EVENT) {
		k[0] = 't';
		key_obj_encode(k + 1, &op->obj);
		len = 1 + KEY_OBJ_LEN;
		want = op->token != NULL ? SEEN_ADD_ID : SEEN_ADD;
	} else {
		return 0;
	}
	v = hmap_get(seen, k, len);
	if (v != NULL && ((*v & SEEN_WRITE) || want == SEEN_WRITE ||
	                  (want == SEEN_ADD_ID && (*v & SEEN_ADD))))
		return 1;
	v = hmap_put(seen, k, len, &inserted);
	if (v == NULL)
		return -1;
	*v = (uint8_t)(inserted ? want : *v | want);
	return 0;
}

static void segment_reset(rc_seg *s)
{
	rc_cmds_free(&s->c1);
	rc_cmds_free(&s->c2);
	rc_arena_reset(&s->r->arena);
}

/* Every master that owns a slot written gets WAIT redis_wait. */
int rc_wait(rcs *r, const uint16_t *slots, size_t nslots)
{
	cluster_master_reply *mr = NULL;
	char n[16], to[16];
	const char *argv[3] = { "WAIT", n, to };
	size_t nm = 0;
	int rc;

	snprintf(n, sizeof n, "%d", r->redis_wait);
	snprintf(to, sizeof to, "%d", RC_WAIT_TIMEOUT_MS);
	rc = cluster_each_master(r->cl, slots, nslots, 3, argv, NULL,
	                         RC_WAIT_TIMEOUT_MS + 2000, &mr, &nm);
	for (size_t i = 0; rc == TALLY_OK && i < nm; i++)
		if (mr[i].reply == NULL ||
		    mr[i].reply->type != REDIS_REPLY_INTEGER ||
		    mr[i].reply->integer < r->redis_wait)
			rc = TALLY_EIO; /* not on enough replicas: no ack */
	cluster_master_replies_free(mr, nm);
	atomic_fetch_add(&r->st_syncs, 1);
	return rc == TALLY_OK ? TALLY_OK : TALLY_EIO;
}

static int slots_add(uint16_t **v, size_t *n, size_t *cap, const rc_cmds *c)
{
	for (size_t i = 0; i < c->n; i++) {
		if (*n == *cap) {
			size_t nc = *cap ? 2 * *cap : 64;
			uint16_t *p = realloc(*v, nc * sizeof *p);

			if (p == NULL)
				return TALLY_ENOMEM;
			*v = p;
			*cap = nc;
		}
		(*v)[(*n)++] = c->v[i].slot;
	}
	return TALLY_OK;
}

static int apply_all(rc_seg *s, store_batch *b, uint16_t **slots,
                     size_t *nslots)
{
	hmap *seen = hmap_create(1);
	size_t cap = 0;
	int rc = seen ? TALLY_OK : TALLY_ENOMEM;

	s->from = 0;
	for (size_t i = 0; rc == TALLY_OK && i <= b->n; i++) {
		int cut = i == b->n;

		if (!cut && !b->ops[i].skip) {
			cut = segment_cut(s, seen, i);
			if (cut < 0)
				rc = TALLY_ENOMEM;
		}
		if (rc != TALLY_OK || !cut || i == s->from)
			continue;
		s->to = i;
		rc = segment_run(s);
		if (rc == TALLY_OK && b->sync && s->r->redis_wait > 0) {
			rc = slots_add(slots, nslots, &cap, &s->c1);
			if (rc == TALLY_OK)
				rc = slots_add(slots, nslots, &cap, &s->c2);
		}
		segment_reset(s);
		s->from = i;
		hmap_clear(seen);
		if (i < b->n && !b->ops[i].skip &&
		    segment_cut(s, seen, i) < 0)
			rc = TALLY_ENOMEM;
	}
	hmap_free(seen);
	return rc;
}

int rc_apply(store *st, store_batch *b)
{
	rcs *r = (rcs *)st;
	rc_seg *s;
	uint16_t *slots = NULL;
	size_t nslots = 0;
	cluster_stats before, after;
	int rc;

	if (r->failed)
		return r->failed;
	if (b->n == 0)
		return TALLY_OK;
	cluster_get_stats(r->cl, &before);
	s = calloc(1, sizeof *s);
	if (s == NULL)
		return TALLY_ENOMEM;
	s->r = r;
	s->ops = b->ops;
	s->c1.a = s->c2.a = &r->arena;
	s->x = calloc(b->n, sizeof *s->x);
	s->gidx = hmap_create(sizeof(size_t));
	rc = s->x && s->gidx ? apply_all(s, b, &slots, &nslots) : TALLY_ENOMEM;
	/* Out of memory means nothing was written (store.h): once writes
	 * went out, the batch may be partly applied, an I/O error. */
	if (rc == TALLY_ENOMEM && s->sent)
		rc = TALLY_EIO;
	if (rc == TALLY_OK && nslots > 0) {
		rc = rc_wait(r, slots, nslots);
		/* WAIT counts what its own connection wrote: after a close
		 * (a timeout, a failover) it may have run on a new connection
		 * to that master, or to another one, and vouch for none of
		 * this batch. Not acknowledged then; a retry with its ID runs
		 * on the new connection (its token is written again there,
		 * so a WAIT after it covers it). */
		cluster_get_stats(r->cl, &after);
		if (rc == TALLY_OK && after.closes != before.closes)
			rc = TALLY_EIO;
	}
	segment_reset(s);
	hmap_free(s->gidx);
	free(s->g);
	free(s->x);
	free(s);
	free(slots);
	/* A batch that failed part-way may be partly applied: refuse
	 * writes until the engine reopens the store (design note 2). */
	if (rc == TALLY_EIO || rc == TALLY_ECORRUPT)
		r->failed = TALLY_EIO;
	return rc == TALLY_ECORRUPT ? TALLY_EIO : rc;
}

int rc_sync(store *st)
{
	rcs *r = (rcs *)st;

	if (r->failed)
		return r->failed;
	return r->redis_wait > 0 ? rc_wait(r, NULL, 0) : TALLY_OK;
}

int rc_grow(rcs *r, const uint8_t *key, size_t len, uint32_t n,
            uint32_t *now)
{
	rc_arena a = { 0 };
	rc_cmds c = { .a = &a };
	char tag[RC_KEY_MAX], k[RC_KEY_MAX];
	size_t tl = rc_esc(tag, key, len);
	int kl = snprintf(k, sizeof k, "t:cfg:{%.*s}", (int)tl, tag);
	cluster_cmd *cmd = rc_eval(r, &c, RC_S_GROW, 1, 1,
	                           rc_slot(k, (size_t)kl));
	rc_reader *rd;
	int64_t v = 0;
	int nil, rc = TALLY_ENOMEM;

	if (cmd != NULL && rc_arg(&c, cmd, 3, k, (size_t)kl) == TALLY_OK &&
	    rc_argf(&c, cmd, 4, "%u", n ? n : 1) == TALLY_OK) {
		rd = rc_reader_get(r);
		rc = rc_exec(rd->cl, &c);
		rc_reader_put(rd);
	}
	if (rc == TALLY_OK)
		rc = rc_reply_i64(c.v[0].reply, &v, &nil);
	if (rc == TALLY_OK && (nil || v < 1 || v > RC_SHARDS_MAX))
		rc = TALLY_ECORRUPT;
	if (rc == TALLY_OK) {
		*now = (uint32_t)v;
		rc_shards_seen(r, key, len, (uint32_t)v);
	}
	rc_cmds_free(&c);
	rc_arena_reset(&a);
	return rc;
}
