/* store.h: the interface between the engine and a storage backend. The
 * engine hands a store logical batches (ordered writes in engine terms) and
 * gets a result per write back; how a store lays data out, checks unique
 * membership and coalesces is its own business. RocksDB (rocks.c) is the
 * embedded store; others plug in through the same vtable. */
#ifndef TALLY_STORE_H
#define TALLY_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "tally.h"
#include "core/keys.h"

enum store_op_kind {
	STORE_OP_INCRBY = 1, /* key, value = delta -> new value */
	STORE_OP_SET,        /* key, value -> value */
	STORE_OP_DEL,        /* key -> 1 existed, 0 not */
	STORE_OP_EVENT,      /* event fields -> count after */
	STORE_OP_TYPE,       /* persist counting type: name, id, mode */
	STORE_OP_CTYPE,      /* persist content type: name, id */
	STORE_OP_TOKEN_DEL   /* forget an expired token: token */
};

/* One write. Pointers reference memory the engine owns until apply()
 * returns. */
typedef struct store_op {
	uint8_t kind;        /* enum store_op_kind */
	uint8_t mode;        /* EVENT: TALLY_MODE_UNIQUE or _TOTAL; TYPE: mode */
	uint8_t remove;      /* EVENT: 1 remove, 0 add */
	uint8_t skip;        /* the engine answered it; the store ignores it */
	uint32_t key_len;    /* counter key, or type / content-type name */
	const uint8_t *key;
	int64_t value;       /* INCRBY delta, SET value */
	key_obj obj;         /* EVENT object; TYPE/CTYPE: id in obj.ktype /
	                        obj.ctype */
	uint64_t member;     /* EVENT */
	int64_t delta;       /* EVENT: > 0 */
	int64_t at_ms;       /* EVENT: ms since the Unix epoch */
	const uint8_t *token; /* persist (token -> result, expiry) with this
	                         write when it succeeds; NULL for none */
	uint32_t token_len;
	int64_t token_expiry_ms;
	/* An async fold's mark (stores with token_get only): the token is
	 * persisted whatever the op's outcome, with token_result as its
	 * result, in the batch's atomic write. */
	uint8_t token_mark;
	int64_t token_result;
	/* out */
	int err;             /* TALLY_OK or the write's own error (overflow) */
	int64_t result;
} store_op;

typedef struct store_batch {
	store_op *ops;
	size_t n;
	int sync;            /* make durable (fsync) before returning */
	/* out: set by apply() when it fails with nothing written (a read
	 * error before the write, out of memory); 0 when it cannot tell */
	int unwritten;
	/* Stores with a load of tokens: with token_clock set, where the
	 * engine's tokens' clock is (ms), stored in the batch's atomic
	 * write, and handed back by the next load (store_loader). The
	 * engine sets it on every batch that stores a token. */
	int token_clock;
	int64_t token_clock_ms;
} store_batch;

/* Per-store counters folded into tally_stats. */
typedef struct store_stats {
	uint64_t entries;    /* store entries written */
	uint64_t syncs;
	uint64_t sync_ns;
	uint64_t last_seq;
	uint64_t counters;   /* named counters that exist */
	uint64_t shard_growths; /* hot counters grown automatically */
	uint64_t dirty;      /* values held in memory, not yet in their
	                        column family (rocksdb) */
	uint64_t clean;      /* values as of the last checkpoint, held in
	                        memory (rocksdb) */
	uint64_t checkpoints; /* times those were written out */
	uint64_t checkpoint_entries; /* entries those wrote (rocksdb) */
	uint64_t journal_dropped; /* whole journal records past a damaged
	                             one, dropped at open (rocksdb) */
	uint64_t checkpoint_retries; /* retries of checkpoints that failed
	                                for memory (rocksdb) */
	uint64_t sync_hist[TALLY_HIST_BUCKETS];
} store_stats;

/* Visitors for store_vt.load. Each returns 0 to go on. */
typedef struct store_loader {
	void *arg;
	int (*type)(void *arg, const char *name, size_t len, uint16_t id,
	            int mode);
	int (*ctype)(void *arg, const char *name, size_t len, uint16_t id);
	int (*token)(void *arg, const uint8_t *tok, size_t len,
	             int64_t result, int64_t expiry_ms);
	/* The last batch's token_clock_ms, when one was stored. */
	int (*token_clock)(void *arg, int64_t ms);
} store_loader;

typedef struct store store;

/* The vtable. Every function returns TALLY_OK or a TALLY_E* code.
 * apply() and sync() are called from one thread at a time (the committer:
 * whichever thread holds the engine's commit lock);
 * the read functions from any thread, concurrently with them. */
typedef struct store_vt {
	const char *name;
	/* Apply every op not marked skip, in order (a unique add sees the
	 * earlier ops of the same batch), as one atomic unit; durable when
	 * b->sync. Per-op errors (TALLY_EOVERFLOW; TALLY_ECORRUPT, a stored
	 * value the op reads that does not decode) go in op->err and change
	 * nothing for that op, with one exception: the redis-cluster store,
	 * whose answers are read after its writes, answers TALLY_ECORRUPT
	 * for an op whose change it may have made when a value read for
	 * the answer is not tally's (the op's outcome is then unknown, as
	 * after TALLY_EIO, and only its ID makes a retry safe). A batch error (TALLY_EIO) means no op was
	 * applied and the store refuses writes from then on. TALLY_ENOMEM
	 * means nothing was written and the store serves on: a store that
	 * runs out of memory after writing some of a batch answers
	 * TALLY_EIO. Async folds keep their adds on TALLY_ENOMEM, and on
	 * any error with b->unwritten set. */
	int (*apply)(store *s, store_batch *b);
	/* Make every applied write durable. */
	int (*sync)(store *s);
	int (*get)(store *s, const uint8_t *key, size_t len, int64_t *out);
	/* n named counters in one read: out[i] the value (0 when absent),
	 * found[i] (found may be NULL) whether it exists. */
	int (*mget)(store *s, const uint8_t *const *keys, const size_t *lens,
	            size_t n, int64_t *out, int *found);
	/* mode: the counting type's (enum tally_mode), so that a store that
	 * keeps each mode's count its own way reads only that one. */
	int (*total)(store *s, const key_obj *o, int mode, int64_t *out);
	int (*total_at)(store *s, const key_obj *o, int64_t at_ms,
	                int64_t *out);
	/* n objects, at most TALLY_TYPES_MAX (every type of one object, or
	 * a chunk of an MCOUNT); the order of objs is the order of out;
	 * modes[i] is the mode of objs[i]'s counting type. */
	int (*mtotal)(store *s, const key_obj *objs, const uint8_t *modes,
	              size_t n, int64_t *out);
	int (*recent)(store *s, const key_obj *o, size_t limit,
	              uint64_t before, tally_entry *out, size_t *n);
	/* TALLY_ENOTFOUND when not in. */
	int (*has)(store *s, const key_obj *o, uint64_t member,
	           int64_t *at_ms);
	/* ctype names are filled by the engine from the ctype ids the store
	 * sets in ctype_ids[i]; a store whose entries hold names fills
	 * out[i].ctype itself and sets ctype_ids[i] to 0. */
	int (*history)(store *s, uint64_t member, uint16_t ktype, size_t limit,
	               uint64_t before, tally_history_entry *out,
	               uint16_t *ctype_ids, size_t *n);
	/* Every log entry, object by object, each oldest first, from a
	 * snapshot; fn returns non-zero to stop (returned as is). */
	int (*scan_log)(store *s, int (*fn)(void *arg, const key_obj *o,
	                                    uint64_t seq, const val_log *v),
	                void *arg);
	int (*load)(store *s, const store_loader *l);
	/* The stored copy of one idempotency token: TALLY_OK with its
	 * result and expiry, TALLY_ENOTFOUND, or a read error. The engine
	 * asks only for tokens its memory may have let go within their
	 * window. NULL: the store answers retried tokens by itself in apply
	 * (redis-cluster's scripts check each token key). */
	int (*token_get)(store *s, const uint8_t *tok, size_t len,
	                 int64_t *result, int64_t *expiry_ms);
	/* Delete stored tokens expired by now_ms, looking at up to max of
	 * them from where the last call stopped (*deleted: how many were
	 * deleted); *wrapped is set to 1 when
	 * this call reached the last token (the next starts again from the
	 * first). For tokens the engine no longer holds in memory. NULL:
	 * the store's tokens expire by themselves. */
	int (*tokens_sweep)(store *s, int64_t now_ms, size_t max,
	                    size_t *deleted, int *wrapped);
	int (*backup)(store *s, const char *dir);
	int (*compact)(store *s);
	int (*disk_usage)(store *s, tally_disk_part *out, size_t cap,
	                  size_t *n);
	void (*stats)(store *s, store_stats *out);
	void (*close)(store *s);
	/* Shard count of a named counter, grown to grow_to when that is more
	 * (never shrunk); grow_to 0 only reads. NULL: the store keeps one
	 * record per counter (shard count 1, growing refused). */
	int (*shards)(store *s, const uint8_t *key, size_t len,
	              uint32_t grow_to, uint32_t *now);
	/* Stores shared by several instances, whose keys hold content type
	 * names (ids are each instance's own); NULL elsewhere.
	 * ctype_named: the engine gave name the id (before the op that
	 * registers it is applied): reads of the id find the name's keys at
	 * once.
	 * schema_refresh: read the shared schema again; learn(arg, name,
	 * len, &id) is called for each content type name the store does not
	 * know, names it to the store (ctype_named) with the engine's id
	 * for it and sets id; TALLY_EINVAL from it leaves the name out. */
	int (*ctype_named)(store *s, const char *name, size_t len,
	                   uint16_t id);
	int (*schema_refresh)(store *s,
	                      int (*learn)(void *arg, const char *name,
	                                   size_t len, uint16_t *id),
	                      void *arg);
} store_vt;

struct store {
	const store_vt *vt;
};

/* Options a store is opened with (from tally_options, defaults applied). */
typedef struct store_options {
	uint32_t cache_entries_max;
	uint32_t block_cache_mb;
	uint32_t open_files_max;     /* rocksdb: table files kept open */
	uint64_t checkpoint_bytes;   /* rocksdb: journal between checkpoints */
	int create;
	int read_only;               /* rocksdb: open without writing */
	/* redis-cluster store */
	const char *seeds;           /* "host:port[,host:port...]" */
	int redis_wait;              /* WAIT for this many replicas, 0: none */
	uint32_t token_retention_ms; /* client ids live this long */
	const char *redis_password;  /* AUTH on every node, or NULL */
	uint32_t hot_shard_ops;      /* increments/s per shard that make a
	                                counter hot, 0: no automatic growth */
	uint32_t hot_shards_max;     /* most shards growth gives, 0: twice
	                                the masters */
} store_options;

/* Open the RocksDB store in path. */
int rocks_open(const char *path, const store_options *o, store **out);
/* Whether the disk under path takes writes again: write and fsync a small
 * file there (then remove it). TALLY_OK, TALLY_EIO or TALLY_ENOSPC. */
int rocks_probe(const char *path);

/* Open the redis-cluster store on o->seeds (see redis_cluster.c). */
int redis_cluster_open(const store_options *o, store **out);
/* Whether the cluster answers again: TALLY_OK or TALLY_EIO. */
int redis_cluster_probe(const store_options *o);

#endif
