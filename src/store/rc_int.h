/* rc_int.h: the redis-cluster store's private state, shared by
 * redis_cluster.c (open, close, schema, key layout, command building),
 * rc_apply.c (the write path) and rc_read.c (queries). Nothing outside
 * src/store/rc*.c and redis_cluster.c includes it.
 *
 * Key layout (every key starts with "t:"; {...} is the hash tag):
 *   t:c:{N}          counter N, shard 0 (int)    t:c:{N#i}  shard i >= 1
 *   t:cfg:{N}        shard count of N when > 1 (same slot as shard 0);
 *                    set by TALLY.SHARDS or by hot growth (rc_hot.c)
 *   t:t:{O}          total of object O (total types)
 *   t:m:{O#s}        members of O with hash(member) % RC_SUBS == s
 *                    (member -> at_ms); count = sum of HLEN
 *   t:r:{O}, t:q:{O} recent events of O (capped list) and their numbering
 *   t:h:{uM}:K, t:hq:{uM}:K   history of member M for type K, numbering
 *   t:id:{TAG}:TOK   a client token of a counter's or a total's write, in
 *                    the slot of the data it guards; t:im: of a membership
 *                    change, t:ir: and t:ih: of an event's recent and
 *                    history entries (the kind before the token: IDs are
 *                    any bytes)
 *   t:b:{TAG}:I:B:J  a batch token (tallyd instance I, batch B, op J)
 *   t:schema         hash: c:ID -> content type name, k:ID -> "mode:name"
 * N is the counter name with '{', '}', '%', '#' and NUL escaped as %7B %7D
 * %25 %23 %00 (so no name reads as another's shard). O is
 * "ctype-name|K|content", K being "#id" for built-in counting types and the
 * name for added ones: keys hold names, not this process's numeric ids, so
 * several tallyd instances agree on them whatever ids each assigned. */
#ifndef TALLY_RC_INT_H
#define TALLY_RC_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/hmap.h"
#include "store/cluster.h"
#include "store/rc_lua.h"
#include "store/store.h"

/* Sub-hashes per unique-type object. Part of the key layout: changing it
 * would hide the members already stored. */
#define RC_SUBS 4
/* Most shards a counter may have (TALLY.SHARDS). */
#define RC_SHARDS_MAX 256
/* Entries kept per recent list and per history list. */
#define RC_LOG_CAP 1000
/* How long a batch token lives, s: far longer than any resend. */
#define RC_BATCH_TOKEN_TTL_S 120
/* Longest key built: prefix, escaped counter name (3 bytes per byte),
 * shard suffix, token. */
#define RC_KEY_MAX (32 + 3 * TALLY_KEY_MAX + 16 + 2 * TALLY_ID_MAX + 64)
/* How long one apply may keep resending commands whose outcome is unknown
 * before it gives up with TALLY_EIO. */
#define RC_APPLY_DEADLINE_MS 15000
/* Deadline of one cluster_exec() call, ms. */
#define RC_EXEC_TIMEOUT_MS 5000
/* Cluster handles for readers (each used by one thread at a time). */
#define RC_READERS 4
/* Ids below this are built-in counting types (schema.c). */
#define RC_TYPE_FIRST_USER_ID 256

/* Hot-counter table (rc_hot.c): sets x ways entries, a few KiB. */
#define RC_HOT_SETS 64
#define RC_HOT_WAYS 4
/* Whole seconds in a row above the threshold before a counter grows. */
#define RC_HOT_SECONDS 2

/* One counter's recent increments, per whole second (committer only). */
typedef struct rc_hot {
	uint64_t h;          /* hash of the counter name; 0: free */
	uint64_t sec;        /* the second cnt counts in (monotonic) */
	uint32_t cnt;        /* increments in second sec */
	uint32_t last;       /* increments in the second before sec */
	uint32_t streak;     /* whole seconds in a row above the threshold */
} rc_hot;

/* Chunked arena: pointers into it stay valid until it is reset. */
typedef struct rc_chunk {
	struct rc_chunk *next;
	size_t used, cap;
	char data[];
} rc_chunk;

typedef struct rc_arena {
	rc_chunk *head;
} rc_arena;

/* A growing list of commands for one cluster_exec(). */
typedef struct rc_cmds {
	cluster_cmd *v;
	size_t n, cap;
	rc_arena *a;
} rc_cmds;

typedef struct rc_reader {
	pthread_mutex_t lock;
	cluster *cl;
} rc_reader;

typedef struct rcs {
	store base;
	cluster *cl;                 /* the committer's handle */
	rc_reader readers[RC_READERS];
	_Atomic unsigned next_reader;
	char sha[RC_S_COUNT][41];
	uint64_t instance;           /* random id of this open, for batch
	                                tokens */
	uint64_t batch_no;
	int redis_wait;
	uint32_t token_ttl_s;
	int failed;                  /* TALLY_EIO once a batch failed */
	/* names by id (content types, added counting types): the committer
	 * writes, readers read, under names_lock */
	pthread_rwlock_t names_lock;
	hmap *ctype_by_id;           /* u16 id -> char[TALLY_NAME_MAX + 1] */
	hmap *ctype_by_name;         /* name -> u16 id */
	hmap *ktype_by_id;           /* u16 id -> char[TALLY_NAME_MAX + 1] */
	/* shard counts seen, counter name -> uint32 (under shards_lock) */
	pthread_mutex_t shards_lock;
	hmap *shards;
	rc_arena arena;              /* the committer's */
	/* automatic growth of hot counters (rc_hot.c), committer only */
	uint32_t hot_ops;            /* increments/s per shard; 0: off */
	uint32_t hot_max;            /* most shards it gives; 0: 2 x masters */
	rc_hot hot[RC_HOT_SETS * RC_HOT_WAYS];
	_Atomic uint64_t st_shard_growths;
	_Atomic uint64_t st_entries, st_syncs, st_sync_ns;
	_Atomic uint64_t st_sync_hist[TALLY_HIST_BUCKETS];
} rcs;

/* redis_cluster.c */
void *rc_alloc(rc_arena *a, size_t len);
void rc_arena_reset(rc_arena *a);
/* Append a command of argc arguments routed by slot; its arguments are
 * set with rc_arg(). NULL when out of memory. */
cluster_cmd *rc_cmd(rc_cmds *c, int argc, uint16_t slot);
/* Copy an argument into the arena: TALLY_OK or TALLY_ENOMEM. */
int rc_arg(rc_cmds *c, cluster_cmd *cmd, int i, const void *p, size_t len);
int rc_argf(rc_cmds *c, cluster_cmd *cmd, int i, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* EVALSHA of script s with nkeys keys, argc arguments to follow (keys
 * first, set with rc_arg from index 3). */
cluster_cmd *rc_eval(rcs *r, rc_cmds *c, int s, int nkeys, int nargs,
                     uint16_t slot);
void rc_cmds_free(rc_cmds *c);
/* Run cmds, in parts of at most CLUSTER_EXEC_MAX; resend CL_UNKNOWN /
 * CL_NOT_RUN ones (token-guarded or read-only) until RC_APPLY_DEADLINE_MS
 * per part. TALLY_OK, TALLY_EIO or TALLY_ENOMEM. */
int rc_exec(cluster *cl, rc_cmds *c);
/* Key builders: return the length written into buf (RC_KEY_MAX). */
size_t rc_esc(char *buf, const uint8_t *name, size_t len);
/* The object tag ("ctype|K|content") into buf; 0 if a name is unknown. */
size_t rc_obj_tag(rcs *r, char *buf, size_t cap, const key_obj *o);
/* The counting-type part K of keys; 0 if unknown. */
size_t rc_ktype_tag(rcs *r, char *buf, size_t cap, uint16_t ktype);
unsigned rc_sub_of(uint64_t member);
uint16_t rc_slot(const char *key, size_t len);
/* Shard count known for counter N (1 if never seen); update if larger. */
uint32_t rc_shards_get(rcs *r, const uint8_t *key, size_t len);
void rc_shards_seen(rcs *r, const uint8_t *key, size_t len, uint32_t n);
/* Content type id of a name known here, or 0. */
uint16_t rc_ctype_id(rcs *r, const char *name, size_t len);
/* Names taught by load() and by the schema ops. */
int rc_learn_ctype(rcs *r, const char *name, size_t len, uint16_t id);
int rc_learn_ktype(rcs *r, const char *name, size_t len, uint16_t id);
int rc_reply_i64(const redisReply *rep, int64_t *out, int *nil);
/* Append GET of shards [from, to) of the counter whose escaped name is
 * tag: TALLY_OK or TALLY_ENOMEM. */
int rc_shard_reads(rc_cmds *c, const char *tag, size_t tl, uint32_t from,
                   uint32_t to);
/* The reads of a counter's n known shards: MGET of shard 0 and its shard
 * count (t:cfg, the same slot), then GET of shards 1..n-1. TALLY_OK or
 * TALLY_ENOMEM. */
int rc_counter_reads(rc_cmds *c, const char *tag, size_t tl, uint32_t n);
/* The shard count another tallyd wrote for a counter (t:cfg, element 1
 * of the reply to MGET of its shard 0 and t:cfg): *now is raised to it
 * when it is more than known and within bounds, else is known.
 * TALLY_OK, TALLY_EIO (not such a reply) or TALLY_ECORRUPT. */
int rc_cfg_check(const redisReply *rep, uint32_t known, uint32_t *now);
/* Take a reader handle (release with rc_reader_put). */
rc_reader *rc_reader_get(rcs *r);
void rc_reader_put(rc_reader *rd);

/* rc_apply.c */
int rc_apply(store *s, store_batch *b);
int rc_sync(store *s);
int rc_wait(rcs *r, const uint16_t *slots, size_t nslots);
int rc_grow(rcs *r, const uint8_t *key, size_t len, uint32_t n,
            uint32_t *now);

/* rc_hot.c */
/* Note n increments of counter key applied in monotonic second now_s.
 * Returns the shard count it should grow to, or 0 to leave it. */
uint32_t rc_hot_note(rcs *r, const uint8_t *key, size_t len, uint32_t n,
                     uint64_t now_s);
/* The reply of a GROW script rc_hot_note() asked for: learn the count and
 * count the growth. Errors are ignored: growth is never needed for a
 * write to succeed. */
void rc_hot_grown(rcs *r, const uint8_t *key, size_t len,
                  const redisReply *rep);

/* rc_read.c */
int rc_get(store *s, const uint8_t *key, size_t len, int64_t *out);
int rc_mget(store *s, const uint8_t *const *keys, const size_t *lens,
            size_t n, int64_t *out, int *found);
int rc_total(store *s, const key_obj *o, int mode, int64_t *out);
int rc_total_at(store *s, const key_obj *o, int64_t at_ms, int64_t *out);
int rc_mtotal(store *s, const key_obj *objs, const uint8_t *modes,
              size_t n, int64_t *out);
int rc_recent(store *s, const key_obj *o, size_t limit, uint64_t before,
              tally_entry *out, size_t *n);
int rc_has(store *s, const key_obj *o, uint64_t member, int64_t *at_ms);
int rc_history(store *s, uint64_t member, uint16_t ktype, size_t limit,
               uint64_t before, tally_history_entry *out,
               uint16_t *ctype_ids, size_t *n);

#endif
