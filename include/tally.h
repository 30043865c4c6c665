/* tally.h: the public API of libtally, an embedded engine for exact, durable
 * counts: named counters and counted events (likes, views ...) with their
 * indexes (recent actors, "has X done it and when", a member's history).
 *
 * This header is the manual. Every function says what it does, what each
 * parameter is, which errors it returns and who owns memory.
 *
 * Conventions
 *  - Every function returns an int: TALLY_OK (0) on success, a negative
 *    TALLY_E* code from the enum below, or never anything else.
 *    tally_strerror() turns any of them (and positive errno values) into text.
 *  - A handle may be used by many threads at once. Writes from one thread are
 *    applied in the order that thread made them.
 *  - A write is acknowledged when the call returns TALLY_OK (or its callback
 *    runs with TALLY_OK). In TALLY_DURABILITY_SYNC mode (the default) that
 *    means the write is on disk (fsync). A read issued after an
 *    acknowledgement sees the write.
 *  - On any error a write changes nothing, but for a store failure
 *    (TALLY_EIO, TALLY_ENOSPC): its outcome is unknown, it may be stored.
 *    A write retried with the same id (tally_event.id, tally_write.id) is
 *    applied at most once, so retrying with an id is safe.
 *  - Wherever a function lists TALLY_EIO, it may return TALLY_ENOSPC too.
 *  - Strings are NUL-terminated unless a length is passed with them. Memory
 *    passed in stays the caller's; the library copies what it keeps.
 */
#ifndef TALLY_H
#define TALLY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the exported functions of the shared library. */
#if defined(__GNUC__) && __GNUC__ >= 4
#define TALLY_API __attribute__((visibility("default")))
#else
#define TALLY_API
#endif

#define TALLY_VERSION_MAJOR 0
#define TALLY_VERSION_MINOR 1
#define TALLY_VERSION_PATCH 0
#define TALLY_VERSION_STRING "0.1.0"

/* ---------------------------------------------------------------------------
 * Limits. Each is checked at the API and refused with an error, never
 * truncated.
 * ------------------------------------------------------------------------ */

/** Longest named-counter key in bytes (keys are 1..512 bytes, any bytes). */
#define TALLY_KEY_MAX 512
/** Longest counting-type or content-type name in bytes (1..64 bytes of
 *  [A-Za-z0-9_.:-]). */
#define TALLY_NAME_MAX 64
/** Longest idempotency token in bytes (1..128, any bytes). */
#define TALLY_ID_MAX 128
/** What tally_backup() adds to its folder's name for the copy in the
 *  making. */
#define TALLY_BACKUP_PARTIAL ".tally-partial"
/** Longest folder name tally_backup() takes: NAME_MAX (255) less the
 *  suffix's 14 bytes. */
#define TALLY_BACKUP_NAME_MAX 241
/** Most entries one tally_recent() or tally_history() call returns. */
#define TALLY_PAGE_MAX 1000
/** Most keys in one tally_mget() and most objects in one tally_mcount(). */
#define TALLY_MULTI_MAX 10000
/** Most counting types (built-in and added) in one database. */
#define TALLY_TYPES_MAX 1024
/** Most content types in one database. */
#define TALLY_CTYPES_MAX 65535
/** Latest explicit event time accepted, in ms since the Unix epoch
 *  (2100-01-01T00:00:00Z). Earliest is 1 (0 means "now"). */
#define TALLY_AT_MS_MAX INT64_C(4102444800000)

/* ---------------------------------------------------------------------------
 * Errors. A range of their own, so they never collide with errno values.
 * ------------------------------------------------------------------------ */
enum tally_error {
	TALLY_OK = 0,
	TALLY_EINVAL = -30700,  /**< an argument is invalid (NULL, out of range) */
	TALLY_EKEYSIZE,         /**< key or name empty or longer than its limit */
	TALLY_EOVERFLOW,        /**< the result would not fit in an int64 */
	TALLY_ENOTFOUND,        /**< no such counter, or member not in */
	TALLY_ENOTYPE,          /**< unknown counting type */
	TALLY_ETYPEEXISTS,      /**< a type of that name exists with another mode */
	TALLY_EMODE,            /**< operation needs a counting type of the
	                             other mode (e.g. has() on a total type) */
	TALLY_ELIMIT,           /**< a documented limit was reached (types ...) */
	TALLY_ENOMEM,           /**< out of memory */
	TALLY_EIO,              /**< the store failed to read, write or sync.
	                             After a failed write or sync the handle
	                             refuses writes (reads go on) until the
	                             store recovers: the committer reopens it
	                             once the disk takes writes again (tried
	                             every second), or the handle is reopened.
	                             The writes that got the error may or may
	                             not be stored: retry them with an id. */
	TALLY_ECORRUPT,         /**< stored data failed validation */
	TALLY_ECLOSED,          /**< the handle is closing */
	TALLY_EBUSY,            /**< the data folder is in use by another handle
	                             or process */
	TALLY_EVERSION,         /**< the data folder was written by an
	                             incompatible version */
	TALLY_ENOSPC,           /**< the store's disk is full: like TALLY_EIO
	                             (writes refused until it recovers), with
	                             the cause users can act on */
	TALLY_ENOTSUP,          /**< not supported by this store (e.g. a
	                             backup of the redis-cluster store) */
	TALLY_EREADONLY,        /**< a write on a handle opened with
	                             TALLY_OPEN_READ_ONLY */
	TALLY_ERROR_END         /**< one past the last code; not an error */
};

/**
 * Describe an error code.
 * @param err a TALLY_E* code, TALLY_OK, or a positive errno value.
 * @return a static string; never NULL.
 */
TALLY_API const char *tally_strerror(int err);

/* ---------------------------------------------------------------------------
 * Opening and closing
 * ------------------------------------------------------------------------ */

/** Opaque engine handle. */
typedef struct tally tally;

enum tally_durability {
	/** Acknowledge a write only after its batch is fsynced (default). */
	TALLY_DURABILITY_SYNC = 0,
	/** Acknowledge after the in-memory apply; fsync every flush_interval_ms.
	 *  A crash of the machine (not of the process) can lose the writes of
	 *  the last interval; tally_counter_add()'s adds wait in memory until
	 *  the interval's fold, so a crash of the process can lose those too
	 *  (and a store failure during a fold the recovery cannot resolve:
	 *  with the redis-cluster store, or a fold made ahead of a write of
	 *  the same counter; see docs/RELIABILITY.md). */
	TALLY_DURABILITY_ASYNC = 1
};

/** Flags for tally_options.flags. */
enum tally_open_flags {
	/** Fail with TALLY_ENOTFOUND if the data folder does not exist
	 *  (the default creates it). */
	TALLY_OPEN_NO_CREATE = 1u << 0,
	/** Writes queued with tally_write_async() and
	 *  tally_write_group_async() are committed by their caller, in
	 *  tally_commit(), instead of waking the committer thread: a server
	 *  that queues a turn's writes and then commits them on the same
	 *  thread saves two thread hand-offs per batch, and most of its
	 *  callbacks run on that thread (see tally_write_cb for where else).
	 *  A write queued so is acknowledged only once some thread commits
	 *  it: the caller's tally_commit(), another caller's, or the
	 *  committer thread, which takes writes left queued for 100 ms.
	 *  Blocking writes (tally_add(), tally_write_sync(), ...) and
	 *  tally_sync() are still served by the committer thread. A caller in
	 *  tally_commit() waits for any commit running (an fsync, in sync
	 *  durability) and for the committer thread's upkeep (expired IDs,
	 *  async flushes); with the Redis Cluster store a commit waits for
	 *  the network. */
	TALLY_OPEN_CALLER_COMMITS = 1u << 1,
	/** Read an existing database without changing a byte of its folder
	 *  (a backup, say, or one on read-only media; the RocksDB store
	 *  only). What a crash left in the journal and the write-ahead log
	 *  is replayed into memory, as an open does, and not written back;
	 *  nothing is checkpointed, flushed or compacted. Every read works.
	 *  Every write returns TALLY_EREADONLY (tally_add(), tally_incrby(),
	 *  tally_write_async(), tally_counter_add(), tally_type_add() of a
	 *  new type, tally_compact(), ...). tally_backup() copies the
	 *  folder's files as they are (nothing writes them meanwhile), what
	 *  a crash left included, for the copy's first open to replay; its
	 *  table files are hard-linked when the copy is on the same
	 *  writable file system, as RocksDB's checkpoint does (their link
	 *  count changes, not their bytes). Implies
	 *  TALLY_OPEN_NO_CREATE. Any number of read-only handles may hold a
	 *  folder at once, in any processes; none while a handle that
	 *  writes holds it, and no handle that writes opens it while one
	 *  reads (TALLY_EBUSY either way: a shared flock() of the folder,
	 *  which a handle that writes holds exclusively, and a shared lock
	 *  on its LOCK file when it has one, against RocksDB's).
	 *  TALLY_ENOTSUP with TALLY_STORE_REDIS_CLUSTER. */
	TALLY_OPEN_READ_ONLY = 1u << 2
};

/**
 * Open options. A zero-filled struct means every default; each field says
 * what its zero value means.
 */
typedef struct tally_options {
	/** enum tally_durability. 0: TALLY_DURABILITY_SYNC. */
	int durability;
	/** Async mode: how often acknowledged writes are fsynced, in ms.
	 *  0: 100. Range 1..60000. */
	uint32_t flush_interval_ms;
	/** Most writes waiting for the committer; writers block while it is
	 *  full (backpressure). 0: 65536. Range 16..16777216. */
	uint32_t queue_ops_max;
	/** Most writes the committer applies in one atomic store batch.
	 *  0: 8192. Range 1..1048576. */
	uint32_t batch_ops_max;
	/** How long an idempotency token is remembered, in ms of the
	 *  handle's open time: the window runs on the monotonic clock,
	 *  whose place the handle stores with every token, once a second
	 *  while tokens are stored (idle too; synced in sync durability)
	 *  and at the close, and an open resumes it there, so neither the
	 *  time the folder is closed nor a step of the system clock ends it
	 *  early (after a crash a window may run up to a second longer, or
	 *  up to flush_interval_ms more in async durability, and longer by
	 *  the time the store was failed). The
	 *  redis-cluster store also keeps tokens in Redis, which expires
	 *  them by its own clock, the time the handle is closed included.
	 *  0: 600000 (10 minutes). Range 1000..604800000 (7 days). */
	uint32_t token_retention_ms;
	/** Most counter values and totals the committer keeps in memory;
	 *  a quarter as many events wait in memory for a checkpoint.
	 *  0: 1048576. Range 1024..1073741824. */
	uint32_t cache_entries_max;
	/** RocksDB block cache in MiB. 0: 64. Range 1..1048576. */
	uint32_t block_cache_mb;
	/** rocksdb store: named counters, object totals and events are
	 *  journaled in each batch and written to their own tables by a
	 *  background checkpoint once this many KiB of journal have
	 *  accumulated (or cache_entries_max values, or a quarter as many
	 *  events, changed): it bounds what an open after a
	 *  crash replays, and each of the two journal files in the data
	 *  folder (twice this, plus 1 MiB). 0: 65536 (64 MiB). Range
	 *  4..4194304. */
	uint32_t checkpoint_kib;
	/** enum tally_open_flags, or 0. */
	uint32_t flags;
	/** enum tally_store. 0: TALLY_STORE_ROCKSDB. */
	int store;
	/** TALLY_STORE_REDIS_CLUSTER: seed nodes, "host:port[,host:port...]";
	 *  any one reachable is enough. Copied at open. Required there. */
	const char *cluster_seeds;
	/** TALLY_STORE_REDIS_CLUSTER: acknowledge a write only once this many
	 *  replicas of each master it touched have it (Redis WAIT); 0: no
	 *  WAIT, Redis's own persistence settings decide. Range 0..16. */
	uint32_t redis_wait;
	/** TALLY_STORE_REDIS_CLUSTER: AUTH password of the nodes, or NULL.
	 *  Copied at open. */
	const char *cluster_password;
	/** TALLY_STORE_REDIS_CLUSTER: a named counter is hot when this handle
	 *  applies more than this many increments per second per shard to
	 *  it, two whole seconds in a row; its shard count then grows (as
	 *  tally_shards() does) to that rate divided by this threshold,
	 *  rounded up, at most hot_shards_max. Counted: increments as the store receives them,
	 *  one per write (tally_incrby(), INCR of tallyd); the adds of
	 *  tally_counter_add() in async mode reach it folded, one per
	 *  counter per flush, and so hardly ever make a counter hot.
	 *  A counter that grew can no longer be set or deleted
	 *  (TALLY_ENOTSUP). 0: 100000; TALLY_HOT_SHARD_OFF: never grow
	 *  automatically. Range 1..100000000, or TALLY_HOT_SHARD_OFF. */
	uint32_t hot_shard_ops;
	/** TALLY_STORE_REDIS_CLUSTER: most shards automatic growth gives a
	 *  counter (tally_shards() may give more). 0: twice the number of
	 *  masters owning slots when the counter grows. Range 1..256. */
	uint32_t hot_shards_max;
	/** Most idempotency tokens kept in memory. Past it the oldest leave
	 *  memory early, and a retry of one still within its window is
	 *  answered from the store's copy (one read of the store for each
	 *  token not found in memory, until the last such token expires).
	 *  About 100 bytes each. 0: 16777216. Range 16..16777216. */
	uint32_t tokens_max;
	/** rocksdb store: most files RocksDB keeps open at once, its tables
	 *  and about 10 of its own (past it a read may reopen a table); with
	 *  a few more for the journal, what the handle needs of the
	 *  process's open-file limit. 0: 512. Range 20..1048576. */
	uint32_t open_files_max;
} tally_options;

/** tally_options.hot_shard_ops: no automatic shard growth. */
#define TALLY_HOT_SHARD_OFF UINT32_MAX

/** Where a handle keeps its data (tally_options.store). */
enum tally_store {
	/** Embedded RocksDB in the folder given to tally_open(). */
	TALLY_STORE_ROCKSDB = 0,
	/** A Redis Cluster (tally_options.cluster_seeds); tally_open()'s path
	 *  is not used (pass any non-empty string). Not supported there, with
	 *  TALLY_ENOTSUP: tally_count_at(), tally_events_scan(),
	 *  tally_backup(), tally_compact(), tally_disk_usage(), and
	 *  tally_set()/tally_del() of a counter with more than one shard. */
	TALLY_STORE_REDIS_CLUSTER = 1
};

/**
 * Open (or create) a database in a folder.
 *
 * @param path   folder of the database; created if missing unless
 *               TALLY_OPEN_NO_CREATE is given.
 * @param opts   options, or NULL for every default. Not kept after return.
 * @param out    receives the handle on success; set to NULL on failure.
 * @return TALLY_OK;
 *         TALLY_EINVAL (NULL path or out, an option out of range);
 *         TALLY_ENOTFOUND (no database there and TALLY_OPEN_NO_CREATE;
 *         or, without it, the folder's parent folder is missing: only
 *         the last folder of path is created);
 *         TALLY_EBUSY (another handle or process has it open; with
 *         TALLY_OPEN_READ_ONLY, a handle or process that writes);
 *         TALLY_ENOTSUP (TALLY_OPEN_READ_ONLY on the redis-cluster
 *         store); TALLY_EVERSION, TALLY_ECORRUPT, TALLY_EIO, TALLY_ENOMEM.
 * The handle is released with tally_close().
 */
TALLY_API int tally_open(const char *path, const tally_options *opts, tally **out);

/**
 * Close a handle: finish every queued write (their callbacks run), make
 * everything acknowledged durable, release all resources. In async mode
 * on a store that failed (TALLY_EIO, TALLY_ENOSPC) and has not recovered
 * yet, close first tries the recovery itself (a reopen of the store: as
 * long as an open, longer on a disk that hangs); if that fails too, the
 * adds of tally_counter_add() still in memory are lost, as in a crash.
 *
 * @param t handle, or NULL (then nothing happens).
 * No call on the handle may be running or start once close has begun; the
 * pointer is invalid afterwards. Closing twice is safe only if the caller
 * sets its pointer to NULL after the first close (use tally_closep()).
 */
TALLY_API void tally_close(tally *t);

/**
 * Close *tp (as tally_close) and set *tp to NULL, so a second call is a
 * no-op. @param tp pointer to a handle pointer; NULL or *tp NULL is a no-op.
 */
TALLY_API void tally_closep(tally **tp);

/**
 * Wait until every write acknowledged so far is durable. In sync mode this
 * returns at once; in async mode it forces an fsync.
 * @return TALLY_OK; TALLY_EINVAL (t NULL); TALLY_EIO; TALLY_ENOSPC (as
 *         the store failed with); TALLY_ECLOSED; TALLY_ENOMEM (async: a
 *         fold of tally_counter_add()'s cells ran out of memory; they
 *         keep their adds, and the writes applied before are synced).
 */
TALLY_API int tally_sync(tally *t);

/* ---------------------------------------------------------------------------
 * Named counters: a key of 1..TALLY_KEY_MAX bytes holding an int64.
 * A counter that was never written (or was deleted) does not exist; INCRBY
 * on it starts from 0.
 * ------------------------------------------------------------------------ */

/**
 * Add delta to a counter and return the new value.
 *
 * @param t       handle.
 * @param key     key bytes (any bytes, not NUL-terminated).
 * @param key_len 1..TALLY_KEY_MAX.
 * @param delta   any int64.
 * @param out     receives the new value; may be NULL.
 * @return TALLY_OK; TALLY_EINVAL (t or key NULL); TALLY_EKEYSIZE;
 *         TALLY_EOVERFLOW (value + delta outside int64: nothing changes);
 *         TALLY_ECORRUPT (the stored value, or the stored result of
 *         this write's token, does not decode: this write alone fails);
 *         TALLY_EIO; TALLY_ECLOSED; TALLY_ENOMEM.
 */
TALLY_API int tally_incrby(tally *t, const void *key, size_t key_len, int64_t delta,
                 int64_t *out);

/**
 * Add delta to a counter without waiting for the new value: the cheapest
 * write for a hot counter. In async mode the add lands in a per-thread
 * striped cell and is folded into the store at the next flush (reads see it
 * at once); in sync mode it is tally_incrby() that discards the value.
 *
 * Limit: cells take adds only while the counter is within 2^62 of zero.
 * If other writes (tally_incrby, tally_set) push a striped counter past
 * that between two flushes, adds still in its cells that would overflow
 * at the fold are dropped (not silently: tally_stats.fold_overflows counts
 * them). Counters of such magnitude should use tally_incrby().
 *
 * Order: as for every write, a thread's adds are applied after the writes
 * it queued before them. While a write of the same counter (TALLY_W_SET,
 * _DEL, _INCRBY) that this thread queued with tally_write_async() or
 * tally_write_group_async() has not been applied, its adds take the queue
 * behind it instead of a cell (and cost as much as tally_incrby()); so
 * may, rarely, adds of another counter whose key shares its hash slot.
 *
 * @param delta must satisfy |delta| <= 2^32; larger adds use tally_incrby().
 * @return TALLY_OK (acknowledged, see the file comment); TALLY_EINVAL
 *         (t or key NULL, |delta| too large); TALLY_EKEYSIZE;
 *         TALLY_EOVERFLOW (sync mode, or a counter near the int64 limits:
 *         those take the exact path); TALLY_ECORRUPT (on the exact path,
 *         as tally_incrby()); TALLY_EIO; TALLY_ECLOSED; TALLY_ENOMEM.
 */
TALLY_API int tally_counter_add(tally *t, const void *key, size_t key_len,
                      int64_t delta);

/**
 * Read a counter.
 * @param out receives the value; may not be NULL.
 * @return TALLY_OK; TALLY_ENOTFOUND (no such counter; *out set to 0);
 *         TALLY_EINVAL; TALLY_EKEYSIZE; TALLY_EIO; TALLY_ECORRUPT.
 */
TALLY_API int tally_get(tally *t, const void *key, size_t key_len, int64_t *out);

/**
 * Read many counters, in one read of the store: with the rocksdb store
 * the lookups in memory overlap and the rest is one RocksDB multi-get per
 * 64 keys; with the redis-cluster store, one pipelined round trip per 64
 * keys (a second when another tallyd gave a counter more shards): far
 * cheaper than n tally_get() calls.
 * @param keys   n key pointers.
 * @param lens   n key lengths, each 1..TALLY_KEY_MAX.
 * @param n      1..TALLY_MULTI_MAX.
 * @param values receives n values (0 for a missing counter).
 * @param found  receives n flags (1 present, 0 missing); may be NULL.
 * @return TALLY_OK; TALLY_EINVAL; TALLY_EKEYSIZE (any key; nothing read);
 *         TALLY_EIO; TALLY_ECORRUPT.
 */
TALLY_API int tally_mget(tally *t, const void *const *keys, const size_t *lens,
               size_t n, int64_t *values, int *found);

/**
 * Set a counter to a value (creating it).
 * @return TALLY_OK; TALLY_EINVAL; TALLY_EKEYSIZE; TALLY_EIO; TALLY_ECLOSED;
 *         TALLY_ENOMEM.
 */
TALLY_API int tally_set(tally *t, const void *key, size_t key_len, int64_t value);

/**
 * Delete a counter.
 * @param existed receives 1 if it existed, 0 if not; may be NULL.
 * @return TALLY_OK; TALLY_EINVAL; TALLY_EKEYSIZE; TALLY_EIO; TALLY_ECLOSED;
 *         TALLY_ENOMEM.
 */
TALLY_API int tally_del(tally *t, const void *key, size_t key_len, int *existed);

/**
 * Shard count of a named counter: how many keys its value is spread over
 * (the redis-cluster store; the RocksDB store always answers 1).
 * @param grow_to 0 to only read; else grow to that many (never shrinks).
 * @param now     receives the shard count after the call.
 * @return TALLY_OK; TALLY_EINVAL; TALLY_EKEYSIZE; TALLY_ENOTSUP (growing
 *         past 1 on the RocksDB store, even past 256); TALLY_ELIMIT (more than
 *         256, on the redis-cluster store); TALLY_EIO.
 */
TALLY_API int tally_shards(tally *t, const void *key, size_t key_len,
                           uint32_t grow_to, uint32_t *now);

/* ---------------------------------------------------------------------------
 * Counting types
 *
 * A counting type has a name and a mode. Built-in types (ids 1..13):
 *   unique: like favorite praise down report
 *   total:  view read comment forward share buy sale taste
 * Content types ("article", "video" ...) need no declaration: a name is
 * registered on its first write.
 * ------------------------------------------------------------------------ */

enum tally_mode {
	/** A member is in or out; the count is the number of members in. */
	TALLY_MODE_UNIQUE = 1,
	/** Every add adds delta, every remove subtracts it. */
	TALLY_MODE_TOTAL = 2
};

/** One counting type, as listed by tally_types(). */
typedef struct tally_type_info {
	char name[TALLY_NAME_MAX + 1]; /**< NUL-terminated */
	int mode;                      /**< enum tally_mode */
	uint16_t id;                   /**< stable numeric id */
} tally_type_info;

/**
 * Add a counting type (durably). Adding a type that exists with the same
 * mode is a no-op that succeeds.
 * @param name 1..TALLY_NAME_MAX bytes of [A-Za-z0-9_.:-].
 * @param mode TALLY_MODE_UNIQUE or TALLY_MODE_TOTAL.
 * @return TALLY_OK; TALLY_EINVAL (bad mode, bad characters);
 *         TALLY_EKEYSIZE; TALLY_ETYPEEXISTS (same name, other mode);
 *         TALLY_ELIMIT (TALLY_TYPES_MAX reached); TALLY_EIO; TALLY_ECLOSED;
 *         TALLY_ENOMEM (the type may be stored all the same: the next
 *         write then fails the store, whose recovery reloads the types).
 */
TALLY_API int tally_type_add(tally *t, const char *name, int mode);

/**
 * List counting types, built-in first, then by id.
 * @param out receives up to cap entries; may be NULL when cap is 0.
 * @param n   receives the total number of types (may exceed cap).
 * @return TALLY_OK; TALLY_EINVAL.
 */
TALLY_API int tally_types(tally *t, tally_type_info *out, size_t cap, size_t *n);

/* ---------------------------------------------------------------------------
 * Events
 * ------------------------------------------------------------------------ */

/**
 * One counting action: member `member` does `ktype` to object
 * (`ctype`, `content`).
 */
typedef struct tally_event {
	const char *ctype;  /**< content type name, 1..TALLY_NAME_MAX */
	const char *ktype;  /**< counting type name (must exist) */
	uint64_t content;   /**< content id, any u64 */
	uint64_t member;    /**< member id; 0 = anonymous: counted, never listed
	                         as an actor; refused for unique types */
	int64_t delta;      /**< total types: amount, 0 means 1, must be > 0;
	                         unique types: 0 or 1 */
	int64_t at_ms;      /**< event time in ms since the Unix epoch,
	                         0 = now; 1..TALLY_AT_MS_MAX */
	const void *id;     /**< idempotency token, or NULL */
	size_t id_len;      /**< token length, 1..TALLY_ID_MAX when id set */
} tally_event;

/**
 * Record an add: a unique type puts the member in (a no-op if it is in
 * already); a total type adds delta.
 *
 * @param ev    the event; not kept after return.
 * @param count receives the object's count after the event; may be NULL.
 * @return TALLY_OK; TALLY_EINVAL (NULL, member 0 on a unique type, delta or
 *         at_ms out of range); TALLY_EKEYSIZE (name or id length);
 *         TALLY_ENOTYPE; TALLY_EOVERFLOW (total would overflow);
 *         TALLY_ELIMIT (too many content types); TALLY_EIO; TALLY_ECLOSED;
 *         TALLY_ECORRUPT (a stored value it reads does not decode: this
 *         write alone fails); TALLY_ENOMEM.
 * With an id: a token seen within the retention window returns the result
 * of its first successful use and changes nothing, across restarts too.
 */
TALLY_API int tally_add(tally *t, const tally_event *ev, int64_t *count);

/**
 * Record a remove: a unique type takes the member out (a no-op if it is
 * not in); a total type subtracts delta. Parameters and errors as
 * tally_add().
 */
TALLY_API int tally_remove(tally *t, const tally_event *ev, int64_t *count);

/* ---------------------------------------------------------------------------
 * Asynchronous writes: the building block of servers. The calls above are
 * tally_write() + a wait.
 * ------------------------------------------------------------------------ */

enum tally_write_kind {
	TALLY_W_INCRBY = 1, /**< key, value = delta; result: new value */
	TALLY_W_SET,        /**< key, value; result: value */
	TALLY_W_DEL,        /**< key; result: 1 existed, 0 did not */
	TALLY_W_ADD,        /**< event; result: count after */
	TALLY_W_REMOVE      /**< event; result: count after */
};

/** One write. Only the fields of its kind are read. */
typedef struct tally_write {
	int kind;           /**< enum tally_write_kind */
	const void *key;    /**< counter kinds */
	size_t key_len;
	int64_t value;      /**< INCRBY delta or SET value */
	const void *id;     /**< optional idempotency token for INCRBY, ADD,
	                         REMOVE */
	size_t id_len;
	tally_event event;  /**< ADD and REMOVE; its id is the token when id
	                         is NULL; both set and different:
	                         TALLY_EINVAL */
} tally_write;

/**
 * Completion of an asynchronous write.
 * @param arg    the caller's pointer.
 * @param err    TALLY_OK or an error of the blocking call of that kind.
 * @param result the kind's result (see enum tally_write_kind), 0 on error.
 * Runs on the thread that commits the write's batch: the engine's committer
 * thread, or (TALLY_OPEN_CALLER_COMMITS) any thread in tally_commit(), the
 * caller's or another's, while that thread holds the engine's commit lock.
 * It must be quick, and must not call, for the same handle, a blocking
 * write, tally_sync(), tally_commit() or tally_write_async() (each can
 * wait for the commit lock: a deadlock), nor take a lock that a thread
 * may hold while it calls tally_commit().
 */
typedef void (*tally_write_cb)(void *arg, int err, int64_t result);

/**
 * Queue a write; cb runs once when it is acknowledged or failed.
 *
 * @param w   the write; copied, not kept.
 * @param cb  completion; must not be NULL.
 * @return TALLY_OK (queued; cb will run exactly once); or, with cb never
 *         run: TALLY_EINVAL, TALLY_EKEYSIZE, TALLY_ENOTYPE, TALLY_ELIMIT,
 *         TALLY_ECLOSED, TALLY_ENOMEM, TALLY_EIO (writes refused after a
 *         store failure).
 * Blocks while the queue is full (backpressure). Writes queued by one
 * thread are applied in the order queued.
 */
TALLY_API int tally_write_async(tally *t, const tally_write *w, tally_write_cb cb,
                      void *arg);

/**
 * Queue writes as one atomic group: they are applied in order, in one store
 * batch, with no other write between them, so after a crash either all of
 * them are there or none (what Redis's multi-key DEL promises).
 * Idempotency is per write, not per group: on a retry of the group, a
 * write with an id already used is answered from it and not applied
 * again, while a write without one is applied again. To retry a group
 * safely, give each of its writes an id.
 *
 * @param ws  n writes; copied, not kept.
 * @param n   1..batch_ops_max (tally_options; 8192 by default).
 * @param cb  runs once per write, in order, with that write's result.
 * @return TALLY_OK (all queued; cb will run n times); or, with nothing
 *         queued and cb never run: TALLY_EINVAL (n out of range, NULL
 *         arguments), and any error of tally_write_async() for any write.
 *         (Content types that writes before the failing one named for the
 *         first time stay registered: a type's id is taken as its write
 *         is prepared.)
 * Blocks until the queue has room for all n.
 */
TALLY_API int tally_write_group_async(tally *t, const tally_write *ws,
                                      size_t n, tally_write_cb cb, void *arg);

/**
 * Commit, on the calling thread, every write queued before the call (by
 * any thread), for a handle opened with TALLY_OPEN_CALLER_COMMITS (on
 * another it does the same, but writes are committed without it too).
 *
 * Waits while another commit runs (an fsync, in sync durability); that
 * commit may have taken these writes already, and then there is nothing
 * to do. Otherwise takes the waiting writes, those queued since by other
 * threads included, as one batch, applies it (fsynced in sync durability)
 * and runs its callbacks here; again, up to 4 batches, while writes
 * queued before the call remain (then the committer thread takes the
 * rest, and this call returns before they are acknowledged). So on return
 * the callbacks of those writes have run, unless more than 4 batches
 * (batch_ops_max writes each) were queued.
 *
 * @return TALLY_OK; TALLY_EINVAL (t is NULL). A batch's own errors
 *         (TALLY_EIO, ...) reach its writes' callbacks, not the caller.
 * Must not be called from a write callback.
 */
TALLY_API int tally_commit(tally *t);

/**
 * Queue a write and wait for it.
 * @param result receives the kind's result; may be NULL.
 * @return as tally_write_async() plus the kind's own errors.
 */
TALLY_API int tally_write_sync(tally *t, const tally_write *w, int64_t *result);

/* ---------------------------------------------------------------------------
 * Queries. An unknown content type reads as an object with no events.
 * ------------------------------------------------------------------------ */

/**
 * Count of one object for one counting type.
 * @param out receives the count (0 for an object with no events).
 * @return TALLY_OK; TALLY_EINVAL; TALLY_EKEYSIZE; TALLY_ENOTYPE; TALLY_EIO;
 *         TALLY_ECORRUPT (the stored total does not decode).
 */
TALLY_API int tally_count(tally *t, const char *ctype, const char *ktype,
                uint64_t content, int64_t *out);

/**
 * Count as of a time: the running total recorded by the newest event (in
 * commit order) whose time is <= at_ms; 0 if there is none. Exact when
 * event times follow commit order (the default, at_ms = 0); with explicit
 * out-of-order times it is the count after the last event stamped at or
 * before at_ms. Costs one step per event newer than at_ms.
 * @param at_ms 1..TALLY_AT_MS_MAX.
 * @return as tally_count().
 */
TALLY_API int tally_count_at(tally *t, const char *ctype, const char *ktype,
                   uint64_t content, int64_t at_ms, int64_t *out);

/**
 * Counts of many objects of one type.
 * @param contents n content ids; n 1..TALLY_MULTI_MAX.
 * @param out      receives n counts.
 * @return as tally_count().
 */
TALLY_API int tally_mcount(tally *t, const char *ctype, const char *ktype,
                 const uint64_t *contents, size_t n, int64_t *out);

/** One entry of tally_counts(). */
typedef struct tally_type_count {
	char ktype[TALLY_NAME_MAX + 1]; /**< counting type name */
	int mode;                       /**< enum tally_mode */
	int64_t count;
} tally_type_count;

/**
 * The count of every counting type for one object, types in tally_types()
 * order, zero counts included.
 * @param out receives up to cap entries; @param n receives the number of
 *        types (may exceed cap).
 * @return TALLY_OK; TALLY_EINVAL; TALLY_EKEYSIZE; TALLY_EIO;
 *         TALLY_ECORRUPT (a stored total does not decode).
 */
TALLY_API int tally_counts(tally *t, const char *ctype, uint64_t content,
                 tally_type_count *out, size_t cap, size_t *n);

/** One event of tally_recent(). */
typedef struct tally_entry {
	uint64_t member;
	int64_t at_ms;
	int64_t delta;  /**< > 0 for an add, < 0 for a remove (unique: +-1) */
	uint64_t seq;   /**< event number: pass as `before` for the next page */
} tally_entry;

/**
 * The newest events of one object that name a member (anonymous events are
 * counted but not listed), newest first. Unique types list removes too.
 * Cost: a step per event read, anonymous ones included: on an object whose
 * events are nearly all anonymous (views with member 0), a page reads
 * every anonymous event newer than its last entry.
 *
 * @param limit  1..TALLY_PAGE_MAX; out must hold that many.
 * @param before 0 for the newest, or only events with seq < before.
 * @param n      receives the number of entries written.
 * @return TALLY_OK; TALLY_EINVAL; TALLY_EKEYSIZE; TALLY_ENOTYPE; TALLY_EIO;
 *         TALLY_ECORRUPT.
 */
TALLY_API int tally_recent(tally *t, const char *ctype, const char *ktype,
                 uint64_t content, size_t limit, uint64_t before,
                 tally_entry *out, size_t *n);

/**
 * Whether a member is in a unique type's membership of one object.
 * @param at_ms receives the time the member was added; may be NULL.
 * @return TALLY_OK (in); TALLY_ENOTFOUND (not in); TALLY_EMODE (a total
 *         type); TALLY_EINVAL; TALLY_EKEYSIZE; TALLY_ENOTYPE; TALLY_EIO;
 *         TALLY_ECORRUPT (the stored membership does not decode, or
 *         holds a time outside 1..TALLY_AT_MS_MAX).
 */
TALLY_API int tally_has(tally *t, const char *ctype, const char *ktype,
              uint64_t content, uint64_t member, int64_t *at_ms);

/** One event of tally_history(). */
typedef struct tally_history_entry {
	char ctype[TALLY_NAME_MAX + 1]; /**< content type name */
	uint64_t content;
	int64_t at_ms;
	int64_t delta;                  /**< as tally_entry.delta */
	uint64_t seq;                   /**< pass as `before` for the next page */
} tally_history_entry;

/**
 * A member's events of one counting type, newest first.
 * @param member non-zero member id.
 * Other parameters and errors as tally_recent().
 */
TALLY_API int tally_history(tally *t, uint64_t member, const char *ktype, size_t limit,
                  uint64_t before, tally_history_entry *out, size_t *n);

/** One stored event, as tally_events_scan() hands it over. */
typedef struct tally_event_rec {
	char ctype[TALLY_NAME_MAX + 1]; /**< content type name */
	char ktype[TALLY_NAME_MAX + 1]; /**< counting type name */
	int mode;                       /**< enum tally_mode */
	uint64_t content;
	uint64_t member;                /**< 0 for an anonymous event */
	int64_t at_ms;
	int64_t delta;                  /**< > 0 add, < 0 remove */
	int64_t total;                  /**< the object's count after it */
	uint64_t seq;
} tally_event_rec;

/**
 * Visitor of tally_events_scan(). @return 0 to go on, anything else to
 * stop the scan (tally_events_scan() then returns that value).
 */
typedef int (*tally_event_fn)(void *arg, const tally_event_rec *ev);

/**
 * Visit every stored event, object by object, each object's events
 * together and oldest first (so replaying them in order rebuilds the
 * object), those written since the last checkpoint included. Objects come
 * grouped by content type, then counting type (highest internal id
 * first), then content id, highest first; a change of object means the
 * one before is complete. The events since the last checkpoint (what
 * checkpoint_kib bounds) are copied and sorted first, in memory.
 * Reads a consistent snapshot; writes may go on meanwhile. It salvages:
 * an event whose stored time was damaged (outside 1..TALLY_AT_MS_MAX)
 * is handed on as stored, for the visitor to skip, and one whose seq
 * was damaged to 0 is passed over (the reads that answer with events
 * refuse both with TALLY_ECORRUPT).
 * @param fn  visitor; must not be NULL.
 * @return TALLY_OK; TALLY_EINVAL; TALLY_EIO; TALLY_ECORRUPT (an entry
 *         whose bytes do not decode); or the visitor's non-zero value.
 */
TALLY_API int tally_events_scan(tally *t, tally_event_fn fn, void *arg);

/* ---------------------------------------------------------------------------
 * Statistics and maintenance
 * ------------------------------------------------------------------------ */

/** Buckets of the histograms in tally_stats. */
#define TALLY_HIST_BUCKETS 16

/** Counters since open (tally_stats_get()), all monotonic but queue_depth,
 *  counters and last_seq. */
typedef struct tally_stats {
	uint64_t writes;          /**< writes acknowledged */
	uint64_t write_errors;    /**< writes completed with an error */
	uint64_t token_hits;      /**< retried tokens answered (from memory,
	                               or the store's copy past tokens_max) */
	uint64_t batches;         /**< store batches committed */
	uint64_t batch_ops_max;   /**< largest batch seen, in writes */
	uint64_t store_entries;   /**< RocksDB entries written by the
	                               batches themselves (puts, merges,
	                               deletes: types, request IDs); values
	                               and events reach their tables later,
	                               at checkpoints, counted in
	                               store_checkpoint_entries */
	uint64_t syncs;           /**< durable store writes (each ends in an
	                               fsync), async-mode flushes, and the
	                               flush that begins tally_compact() */
	uint64_t sync_ns_total;   /**< time spent in them: the whole store
	                               write with its fsync, not the fsync
	                               alone */
	uint64_t striped_adds;    /**< adds taken by striped cells */
	uint64_t fold_overflows;  /**< cell folds refused for overflow (see
	                               tally_counter_add()), or for a
	                               stored value that is corrupt */
	uint64_t queue_depth;     /**< writes waiting now */
	uint64_t last_seq;        /**< newest event number */
	uint64_t counters;        /**< named counters that exist now */
	/** batch_hist[i]: batches of at most 2^i writes (the last bucket:
	 *  any larger). */
	uint64_t batch_hist[TALLY_HIST_BUCKETS];
	/** sync_hist[i]: durable writes (as syncs) that took at most
	 *  100 us * 2^i (the last bucket: any longer). */
	uint64_t sync_hist[TALLY_HIST_BUCKETS];
	/** 0 while the store takes writes; else the TALLY_EIO or TALLY_ENOSPC
	 *  that writes are refused with until it recovers. */
	int store_error;
	uint64_t store_failures;  /**< times the store failed a write or sync */
	uint64_t store_recoveries; /**< times it was reopened after one */
	uint64_t shard_growths;   /**< hot counters whose shard count this
	                               handle grew automatically (redis-cluster
	                               store; see hot_shard_ops) */
	/** rocksdb store: named counters and object totals changed since the
	 *  last checkpoint, held in memory and in the journal (written in
	 *  every batch) but not yet in their own tables. */
	uint64_t store_dirty;
	/** rocksdb store: named counters and object totals (and deletions)
	 *  as of the last checkpoint held in memory, read without a RocksDB
	 *  lookup: kept across checkpoints while they stay unchanged, up to
	 *  cache_entries_max / 2 of each kind. */
	uint64_t store_clean;
	/** rocksdb store: checkpoints done (dirty values written out to their
	 *  tables in the background, and the journal behind them dropped). */
	uint64_t store_checkpoints;
	/** rocksdb store: RocksDB entries those checkpoints wrote (values
	 *  and their deletions, events, memberships and the journal
	 *  position). With store_entries, all that reaches RocksDB but
	 *  what tally_compact() writes out of memory first. */
	uint64_t store_checkpoint_entries;
	/** rocksdb store: expired idempotency tokens deleted from the store
	 *  by the sweep, which runs while the store holds tokens memory does
	 *  not (past tokens_max, or expired when loaded). */
	uint64_t tokens_swept;
	/** rocksdb store: journal records found whole past a damaged one
	 *  when the store was opened (by this handle, and by its
	 *  recoveries), and dropped: a record that does not match its hash
	 *  ends the replay, since what follows it builds on it. In sync
	 *  durability those writes had been acknowledged; media damage, not
	 *  a crash, leaves them (a crash cuts only the tail). 0 normally. */
	uint64_t journal_records_dropped;
	/** rocksdb store: retries of checkpoints that failed for memory,
	 *  having written nothing: each is a wait (10 ms, doubling to 1 s),
	 *  then the same checkpoint tried again. One whose next wait would
	 *  end past 30 s from its first try fails the store instead, as a
	 *  write error does. 0 normally. */
	uint64_t store_checkpoint_retries;
} tally_stats;

/**
 * Read statistics. @return TALLY_OK; TALLY_EINVAL.
 */
TALLY_API int tally_stats_get(tally *t, tally_stats *out);

/**
 * Write a consistent copy of the database (a RocksDB checkpoint; on a
 * read-only handle, a copy of the folder's files) into a new folder, while
 * the handle keeps serving. The copy opens with tally_open().
 * It is made in the folder dir + TALLY_BACKUP_PARTIAL, then renamed to
 * dir, so a failure (a disk full) or a crash never leaves dir with part of
 * the data in it: a failure removes the partial folder; a crash leaves it,
 * to be deleted by hand.
 * @param dir folder to create (trailing slashes ignored); must not exist,
 *        nor its partial folder.
 * @return TALLY_OK; TALLY_EINVAL (an empty path, or a folder name longer
 *         than NAME_MAX less the suffix's length); TALLY_EIO (including
 *         dir or its partial folder exists); TALLY_ENOSPC (the disk of dir
 *         is full: nothing is left there, and the handle serves on);
 *         while the store refuses writes after a failure, the error it
 *         refuses them with (TALLY_EIO, or TALLY_ENOSPC for a full disk
 *         of the store's own), and no copy is made; TALLY_ENOMEM.
 */
TALLY_API int tally_backup(tally *t, const char *dir);

/** Disk use of one part of the store (tally_disk_usage()). */
typedef struct tally_disk_part {
	char name[32];      /**< "log", "members", "by_member", "totals",
	                         "named", "default" (meta) */
	uint64_t bytes;     /**< bytes of its table files */
	uint64_t entries;   /**< entries in them (a merge or delete counts) */
} tally_disk_part;

/**
 * Disk use per part of the store, from its table files (data still only in
 * the write-ahead log is not counted; see tally_compact()).
 * @param out receives up to cap parts; @param n receives how many exist.
 * @return TALLY_OK; TALLY_EINVAL; TALLY_ENOMEM; TALLY_EIO while the store
 *         is closed after a failure whose reopen has not succeeded yet;
 *         TALLY_ENOTSUP on the redis-cluster store.
 */
TALLY_API int tally_disk_usage(tally *t, tally_disk_part *out, size_t cap,
                               size_t *n);

/**
 * Compact the whole store: flush memory to table files and rewrite every
 * level into the bottom one (ZSTD), folding merges and dropping deleted
 * entries. It first waits for a background checkpoint that is running,
 * and holds writes while it writes out what memory holds (the journal's
 * worth, up to the checkpoint bound); writes go on during the rewrite.
 * Takes long on big databases (minutes for GiBs): an operator's or a
 * benchmark's tool, never needed for correctness.
 * @return TALLY_OK; TALLY_EINVAL; TALLY_EIO (a write, a sync of the
 *         journal, or RocksDB's flush or compaction failed: the store then
 *         refuses writes until it is reopened, as after any disk fault);
 *         TALLY_ENOSPC (the disk is full); TALLY_ENOMEM (no memory for
 *         what it writes out, or the running checkpoint failed for memory
 *         and waits to be tried again (tally_stats'
 *         store_checkpoint_retries), which it would wait out: nothing
 *         written, the store serves on).
 */
TALLY_API int tally_compact(tally *t);

#ifdef __cplusplus
}
#endif
#endif /* TALLY_H */
