/* rocks_int.h: the RocksDB store's private state, shared by rocks.c (open,
 * close, meta), rocks_apply.c (the write path) and rocks_read.c (queries).
 * Nothing outside src/store/rocks*.c includes it. */
#ifndef TALLY_ROCKS_INT_H
#define TALLY_ROCKS_INT_H

#include <pthread.h>
#include <rocksdb/c.h>
#include <stdatomic.h>

#include "core/hmap.h"
#include "store/rocks_sorted.h"
#include "store/store.h"

/* Column families. Order is the on-disk open order; never reorder. */
enum rocks_cf {
	CF_META = 0,   /* "default": format, last seq, types, tokens */
	CF_NAMED,      /* counter name -> zigzag varint, as of the last
	                  checkpoint (rocks_journal.c) */
	CF_TOTALS,     /* object -> zigzag varint, likewise */
	CF_MEMBERS,    /* object | member -> at_ms (unique types) */
	CF_LOG,        /* object | ~seq -> a chunk of events, seq its
	                  oldest (core/keys.h; one event: val_log) */
	CF_HIST,       /* member | ktype | ~seq -> a chunk, as the log's */
	CF_COUNT
};

/* Meta keys: one tag byte, then the rest. */
#define META_FORMAT 'v'  /* -> format version, one byte */
#define META_SEQ    's'  /* -> last event seq, be64 */
#define META_TYPE   't'  /* 't' name -> id be16, mode byte */
#define META_CTYPE  'c'  /* 'c' name -> id be16 */
#define META_TOKEN  'k'  /* 'k' token -> result zigzag, expiry zigzag */
#define META_TOKEN_CLOCK 'w' /* -> the tokens' clock, ms zigzag */
/* Largest tokens' clock a load takes (some 73 million years). */
#define TOKEN_CLOCK_MAX_MS (INT64_C(1) << 61)
#define META_COUNTERS 'n' /* -> number of named counters, be64 */
#define META_JOURNAL 'j' /* 'j' be64 n -> the values batch n changed
                            (rocks_journal.c) */
#define META_JCKPT  'p'  /* -> journal records up to this number are in
                            the column families, be64 */
#define META_CLOCK  'm'  /* 'm' be64 k -> the time of event k * EV_CLOCK_EVERY
                            + 1, zigzag (rocks_clock.c) */
/* 2: journal records carry the number of named counters, and may be in
 * the journal files (rocks_jfile.c). 3: they carry the events too, which
 * reach the log, history and membership tables at checkpoints. 4: those
 * tables hold chunks of events too (core/keys.h). 5: chunks code their
 * times against the event clock (rocks_clock.c), each marked as such.
 * Formats 1 to 4 are upgraded at open: each is read as it is, since
 * every older entry is valid in the newer format. */
#define ROCKS_FORMAT 5

/* The journal files (rocks_jfile.c): names in the data folder (RocksDB
 * leaves files it does not know alone), record header size. */
#define ROCKS_JF_NAME "tally-counters-%d.journal"
#define ROCKS_JF_FILES 2
#define ROCKS_JF_HDR 24
/* rocks_jfile_append(): no room or paused; write the record to RocksDB. */
#define ROCKS_JF_FULL 1

/* A journal file record found at open, to replay. */
typedef struct rocks_jrec {
	uint64_t num;
	uint64_t off;        /* of the payload */
	uint32_t len;
	int file;
} rocks_jrec;

typedef struct rocks_jfile {
	int fd[ROCKS_JF_FILES];
	uint64_t end[ROCKS_JF_FILES];  /* end of the last whole record */
	uint64_t size[ROCKS_JF_FILES]; /* file size: zeros after end */
	uint8_t unsynced[ROCKS_JF_FILES]; /* async writes not fdatasynced */
	int sync_err;        /* a failed fdatasync's error, kept: one that
	                      * follows it can succeed with pages lost */
	int active;
	int paused;          /* backups copying the files (a count) */
	uint64_t cap;        /* largest file */
	pthread_mutex_t mu;  /* the committer's writes against a backup */
	int mu_ok;
	rocks_jrec *recs;    /* at open: records to replay, by number */
	size_t nrecs, caprecs;
	/* At open: whole records found past a damaged one (jf_scan()),
	 * dropped with the cut. */
	uint64_t dropped;
} rocks_jfile;

/* A counter value or object total known to the committer. */
typedef struct rocks_val {
	int64_t v;       /* current value */
	int64_t acc;     /* this batch: sum of deltas to merge */
	uint8_t exists;  /* named: the counter exists */
	uint8_t put;     /* named: SET or DEL this batch: write v, not acc */
} rocks_val;

/* A value as one batch sees it (the overlays' entries), with where it was
 * loaded from, so that the commit does not look it up a second time. */
typedef struct rocks_ov {
	rocks_val val;
	rocks_val *home;  /* its entry in the dirty table, found at load */
	uint8_t cached;   /* loaded from the committer's cache */
} rocks_ov;

/* A membership: of one batch (committer), or of the events in memory. */
typedef struct rocks_mem {
	int64_t at_ms;
	uint8_t in;
} rocks_mem;

/* An event written since the last checkpoint (rocks_events.c). */
typedef struct rocks_ev {
	key_obj obj;
	uint64_t seq;
	uint64_t member;     /* 0: anonymous */
	int64_t at_ms, d, total;
	uint32_t prev_obj;   /* the object's event before, 1-based in the
	                        same generation; 0: none */
	uint32_t prev_hist;  /* likewise for member and type */
	uint8_t unique;      /* sets the membership of member (d is +-1) */
} rocks_ev;

/* The events between two freezes, with what reads look them up by. */
typedef struct rocks_evgen {
	rocks_ev *ev;        /* by seq */
	size_t n, cap;
	hmap *by_obj;        /* object key -> uint32_t, newest event */
	hmap *by_hist;       /* history prefix -> uint32_t, newest event */
	hmap *members;       /* member key -> rocks_mem, as of the newest */
} rocks_evgen;

/* Checkpoint thread states (rocks_journal.c). */
enum { CK_IDLE = 0, CK_RUNNING, CK_DONE };

/* A growing list of journal record numbers. */
typedef struct rocks_jlist {
	uint64_t *v;
	size_t n, cap;
} rocks_jlist;

typedef struct rocks {
	store base;
	rocksdb_t *db;
	/* Opened read-only (store_options.read_only): nothing in the folder
	 * is written, renamed or removed, and lock_fd holds a shared lock on
	 * its LOCK file (-1: none, or a folder without one). dir_fd: the
	 * folder, whose flock() is the handle's (rocks.c, folder_lock()). */
	int read_only;
	int lock_fd;
	int dir_fd;
	store_vt vt_ro;      /* read-only: rocks_vt with the writes refused */
	rocksdb_options_t *db_opts;
	rocksdb_options_t *cf_opts[CF_COUNT];
	rocksdb_column_family_handle_t *cf[CF_COUNT];
	rocksdb_block_based_table_options_t *bbto;
	rocksdb_block_based_table_options_t *bbto_point;
	rocksdb_cache_t *block_cache;
	rocksdb_writeoptions_t *wo_sync;
	rocksdb_writeoptions_t *wo_nosync;
	rocksdb_flushoptions_t *fo_nowait;
	rocksdb_readoptions_t *ro;

	/* Committer-only state (apply and sync run on one thread at a time,
	 * under the engine's commit lock). */
	rocksdb_writebatch_t *wb;
	hmap *cache_named;   /* key -> rocks_val (v, exists) across batches */
	hmap *cache_totals;  /* object key -> rocks_val (v) across batches */
	hmap *ov_named;      /* this batch */
	hmap *ov_totals;     /* this batch */
	hmap *ov_members;    /* this batch: object|member -> rocks_mem */
	uint32_t cache_max;
	uint64_t seq;        /* last event seq written */
	uint64_t counters;   /* named counters that exist */
	int64_t counters_delta; /* this batch */
	/* The journal (rocks_journal.c). Index 0: named counters, 1: object
	 * totals. dirty: values changed since the last freeze; frozen: those
	 * the checkpoint thread is writing out (or NULL); clean: values as of
	 * the last checkpoint (those it wrote, and older ones unchanged
	 * since, carried), which agree with the column families and spare
	 * reads of them a RocksDB lookup; spare: an empty table for
	 * the next freeze. The committer changes them under dirty_lock
	 * (write); readers look up under it (read). */
	hmap *dirty[2], *frozen[2], *clean[2], *spare[2];
	/* The next clean tables, built by the checkpoint thread once its
	 * write is done (rocks_journal.c, carry_build()): the values it
	 * wrote, and those of the clean tables it did not replace, so that
	 * values untouched for a while stay readable from memory, up to
	 * cache_max / 2 each. carried[t]: carry[t] was built and replaces
	 * clean[t] at the reap (written before CK_DONE, which ck_mu
	 * publishes to the committer). */
	hmap *carry[2];
	uint8_t carried[2];
	/* The events' generations, likewise, under the same lock. */
	rocks_evgen *ev_dirty, *ev_frozen, *ev_spare;
	rocks_ev *bev;       /* this batch's events, committed into ev_dirty */
	size_t bev_n, bev_cap;
	pthread_rwlock_t dirty_lock;
	uint8_t *jbuf;       /* this batch's journal record: ROCKS_JF_HDR
	                        bytes of room for a file header, then jlen
	                        bytes of payload */
	size_t jlen, jcap;
	uint64_t jseq;       /* number of the last record written */
	uint64_t journal_bytes; /* written since the last freeze */
	uint64_t journal_max; /* freeze at this many journal bytes, or at
	                         cache_max dirty values */
	pthread_t ck_thread;
	pthread_mutex_t ck_mu;
	pthread_cond_t ck_cv;
	int ck_state;        /* CK_*, under ck_mu */
	int ck_err;          /* the last checkpoint's result, under ck_mu */
	int ck_stop;
	int ck_retrying;     /* the checkpoint waits to try again for memory
	                        (ck_retry_wait()), under ck_mu */
	int ck_started;
	/* Called by the checkpoint thread before each try of a checkpoint's
	 * write (a checkpoint short of memory is tried again), if set before
	 * the first one: tests hold a checkpoint running with it, or fail
	 * its allocations. NULL otherwise. */
	void (*ck_hook)(void *arg);
	void *ck_hook_arg;
	int locks_ok;        /* how many of the three locks exist */
	uint64_t ck_upto;    /* the frozen tables cover records up to this */
	uint64_t ck_counters; /* named counters as of ck_upto */
	uint64_t ck_seq;     /* last event seq as of ck_upto */
	/* The journal records written to META instead of a journal file
	 * (their batch had RocksDB entries, or the file was full), by jseq:
	 * jm since the last freeze (committer), ck_jm up to ck_upto (the
	 * checkpoint's to delete, one by one: a range delete per checkpoint
	 * nested every earlier one, and RocksDB's recovery of such ranges
	 * is quadratic in their number). */
	rocks_jlist jm, ck_jm;
	rocks_jfile jf;
	rocksdb_writebatch_t *ck_wb; /* checkpoint thread only */
	uint64_t ck_meta_flush_ns; /* when a checkpoint last flushed META */
	sorted ck_ents;      /* checkpoint thread only */

	/* Async mode: batches written to RocksDB's WAL without its fsync
	 * (committer only). A journal file record must not reach the disk
	 * before them (rocks_jfile_append syncs them first). */
	int wal_unsynced;
	/* rocks_tokens_sweep()'s place: the next token key to look at
	 * (committer only; sweep_len 0: the first) */
	uint8_t sweep_key[1 + TALLY_ID_MAX + 1];
	size_t sweep_len;
	/* r->wb holds what must keep its order with the journal files: the
	 * batch's record, or a type (events in later records name it); not
	 * purged tokens */
	int wb_ordered;
	int failed;          /* a write or sync failed: its TALLY_EIO or
	                        TALLY_ENOSPC; writes are refused until the
	                        engine closes this handle and opens anew */
	_Atomic int logs_failed; /* a write or sync of the logs failed, on
	                        any thread (rocks_logs_fail()): taken into
	                        failed at the committer's next call */

	/* The event clock (rocks_clock.c): EV_CLOCK_BLOCKS_MAX block
	 * pointers; slots below clk_n are filled. Writers hold clk_mu;
	 * readers take a snapshot (rocks_clock_get()) and no lock. */
	int64_t **clk_blocks;
	_Atomic uint64_t clk_n;
	pthread_mutex_t clk_mu;
	int clk_mu_ok;

	/* Read by other threads through stats(). */
	_Atomic uint64_t st_entries;
	_Atomic uint64_t st_syncs;
	_Atomic uint64_t st_sync_ns;
	_Atomic uint64_t st_seq;
	_Atomic uint64_t st_counters;
	_Atomic uint64_t st_dirty;
	_Atomic uint64_t st_clean;
	_Atomic uint64_t st_checkpoints;
	_Atomic uint64_t st_ck_retries; /* retries of checkpoints that
	                                   failed for memory */
	_Atomic uint64_t st_ck_entries; /* entries checkpoints wrote */
	_Atomic uint64_t st_sync_hist[TALLY_HIST_BUCKETS];
} rocks;

/* rocks.c */
int rocks_err(char *err);
/* TALLY_ENOSPC for ENOSPC and EDQUOT, else TALLY_EIO. */
int rocks_errno_code(int e);
/* The same for a failed write or sync: TALLY_ENOSPC or TALLY_EIO. */
int rocks_write_err(char *err);
/* A write or sync of the logs (RocksDB's WAL, the journal files) failed
 * with rc: kept in r->logs_failed for every thread (the first failure
 * stays), and rc returned. No thread syncs the WAL after it: librocksdb
 * 7.8 asserts (aborts the process) on a sync of a log writer that saw an
 * error, and a sync that succeeds after a failed one proves nothing (the
 * kernel may have dropped the pages it could not write). */
int rocks_logs_fail(rocks *r, int rc);
/* RocksDB's WAL synced, unless the logs failed before: TALLY_OK, or the
 * failure (kept, as above). The caller holds r->jf.mu: two threads
 * between the check and the sync could sync after a failure. */
int rocks_wal_sync(rocks *r);
/* The committer's check before it writes or syncs (or closes): a failure
 * of the logs on another thread fails the store as its own would. The
 * store's failure, or TALLY_OK. */
int rocks_failed(rocks *r);
uint64_t rocks_now_ns(void);
/* Count one fsync of ns in the histogram and totals. */
void rocks_sync_count(rocks *r, uint64_t ns);

/* rocks_apply.c */
int rocks_apply(store *s, store_batch *b);
int rocks_sync(store *s);

/* rocks_jfile.c: the journal's own files. Committer only, but for
 * rocks_jfile_pause() and rocks_jfile_copy() (a backup) and open and
 * close. */
void rocks_jfile_init(rocks *r);
/* Open (create) the files in dir and find the records above ckpt, in
 * r->jf.recs by number. cap bounds each file's size. */
int rocks_jfile_open(rocks *r, const char *dir, uint64_t ckpt, uint64_t cap);
/* fsync a folder (its entries): TALLY_OK or rocks_errno_code(). */
int rocks_dir_sync(const char *dir);
/* pwrite all of buf at off, again after EINTR or a short write:
 * TALLY_OK, or rocks_errno_code() of the failure (a write of nothing:
 * TALLY_ENOSPC). */
int rocks_pwrite_all(int fd, const void *buf, size_t len, uint64_t off);
/* Read a found record's payload into *buf (grown as needed). */
int rocks_jfile_read(rocks *r, const rocks_jrec *rec, uint8_t **buf,
                     size_t *cap);
/* At open, after the scan: the record numbered num is missing while
 * records numbered above it were found. Cut each file before its first
 * record numbered num or above (fsynced), and carry on in the file that
 * holds the newest record left above the checkpoint. */
int rocks_jfile_cut(rocks *r, uint64_t num);
/* The found records are replayed: free their list. */
void rocks_jfile_loaded(rocks *r);
/* Append the record in r->jbuf (header filled in here) numbered num;
 * fdatasync it when sync. Async records before it elsewhere (RocksDB's
 * WAL, the other file) are synced first: after a machine crash the
 * records that survive are a prefix of those written. TALLY_OK,
 * ROCKS_JF_FULL, or an error. */
int rocks_jfile_append(rocks *r, uint64_t num, int sync);
/* fdatasync what async appends left unsynced. */
int rocks_jfile_sync(rocks *r);
/* Sync RocksDB's WAL and the journal files (counted as a sync); any
 * thread. TALLY_OK or the error. */
int rocks_sync_logs(rocks *r);
/* A checkpoint covering every record written so far is durable: write
 * over the other file from now on. */
void rocks_jfile_turn(rocks *r);
/* Pause (1) or resume (0), counted: while any backup holds a pause,
 * appends return ROCKS_JF_FULL and the files hold still. */
void rocks_jfile_pause(rocks *r, int paused);
/* Copy both files' records into dir (paused, or read-only). */
int rocks_jfile_copy(rocks *r, const char *dir);
/* Copy len bytes of from into a new file to, and fsync it. */
int rocks_copy_file(int from, uint64_t len, const char *to);
/* covered: every record is below a durable checkpoint; empty the files. */
void rocks_jfile_close(rocks *r, int covered);

/* rocks_journal.c */
int rocks_journal_init(rocks *r, uint64_t journal_max);
/* Open the journal files in dir, replay the journal (RocksDB's records
 * and the files', by number) into the dirty tables; start the checkpoint
 * thread. */
int rocks_journal_load(rocks *r, const char *dir);
void rocks_journal_close(rocks *r);
/* Write what memory holds (values and events of the dirty tables, and of
 * the frozen ones if their checkpoint has not landed) to the column
 * families as well, for a compaction to see it all, without covering any
 * journal record: they stay in memory and in the journal until their
 * checkpoint. Waits for a running checkpoint first. Any thread. */
int rocks_journal_spill(rocks *r);
/* The committer works through a batch's ops, and a commit through its
 * events, in blocks of this many: their map lookups hinted at once, their
 * memberships read at once. About as many cache misses as a core keeps
 * in flight, a few times over. */
#define ROCKS_BLOCK 64

/* RocksDB counts every key comparison, block read and lookup into a
 * thread-local perf context unless the calling thread says otherwise;
 * through the shared library each count is a __tls_get_addr call, which
 * under random likes was some 10% of the checkpoint thread's CPU (the
 * memtable's comparator counts). tally never reads those counts. The
 * level is per thread, and the store runs on threads it does not own
 * (the committer's, the server's), so every entry point that reaches
 * RocksDB sets it: one thread-local store. */
static inline void rocks_counters_off(void)
{
	rocksdb_set_perf_level(rocksdb_disable);
}

/* Length of the block starting at i of n items. */
static inline size_t rocks_block_len(size_t n, size_t i)
{
	return n - i < ROCKS_BLOCK ? n - i : ROCKS_BLOCK;
}

/* Whether an overlay entry changed its value in this batch. */
static inline int rocks_val_changed(const rocks_val *v)
{
	return v->put || v->acc != 0;
}
/* Add one changed value to this batch's record. */
int rocks_journal_add(rocks *r, int cf, const void *key, size_t len,
                      const rocks_val *v);
/* Add one event to this batch's record. */
int rocks_journal_event(rocks *r, const rocks_ev *ev);
/* Add the number of named counters after this batch to its record. */
int rocks_journal_counters(rocks *r, uint64_t counters);
/* Write this batch's record (if any): to the active journal file when
 * r->wb holds nothing else and the file has room, else into r->wb, for
 * the caller's RocksDB write. TALLY_OK, or the file's write error. */
int rocks_journal_write(rocks *r, int sync);
void rocks_journal_discard(rocks *r);
/* The batch is written: its changed values are copied from the overlays to the
 * dirty tables; reap a finished checkpoint; freeze when due. On an error
 * that leaves the tables behind the store, sets r->failed. */
void rocks_journal_commit(rocks *r);
/* Before the batch's record is written: room in the dirty tables and
 * events for everything rocks_journal_commit() will put there (n[t]
 * values of table t, keys of at most len[t] bytes; this batch's events),
 * so that the commit cannot fail for memory after the write. TALLY_OK,
 * or TALLY_ENOMEM with nothing written (the batch fails alone). */
int rocks_journal_reserve(rocks *r, const size_t n[2], const size_t len[2]);
/* A value of cf (CF_NAMED or CF_TOTALS) held in memory (dirty, frozen, or
 * clean: written by the last checkpoint): 1 and *out, or 0.
 * The committer calls it bare; other threads between rdlock and unlock. */
int rocks_dirty_find(rocks *r, int cf, const void *key, size_t len,
                     uint64_t h, rocks_val *out);
/* Committer only: like rocks_dirty_find, and *home is the entry when it
 * is in the dirty table (else NULL). The entry stays where it is until the
 * batch's commit, which alone freezes the dirty table. */
int rocks_dirty_load(rocks *r, int cf, const void *key, size_t len,
                     uint64_t h, rocks_val *out, rocks_val **home);
/* Prefetch hint for a coming rocks_dirty_find of key (hmap_prefetch's
 * deep); committer only. h, here and below, is hash_bytes(key, len): a
 * key's hash is computed once for all of its lookups (not its
 * prefetches, which are spaced by hashing: hmap.h). */
void rocks_dirty_prefetch(rocks *r, int cf, const void *key, size_t len,
                          int deep);
void rocks_dirty_rdlock(rocks *r);
void rocks_dirty_unlock(rocks *r);

/* rocks_events.c */
rocks_evgen *rocks_evgen_create(void);
void rocks_evgen_free(rocks_evgen *g);
void rocks_evgen_clear(rocks_evgen *g);
/* Append ev to *arr (grown by doubling): 0, or -1 out of memory. */
int rocks_ev_push(rocks_ev **arr, size_t *n, size_t *cap, const rocks_ev *ev);
/* Add an event (seqs increasing; its links are set here) and, when
 * unique, its membership. 0, or -1 out of memory, after which g may
 * hold the membership without the event: the store must fail. */
int rocks_evgen_add(rocks_evgen *g, const rocks_ev *ev);
/* Room for n more rocks_evgen_add calls that allocate nothing (the
 * event array and the three maps): 0, or -1 out of memory, g unchanged in
 * what it holds. */
int rocks_evgen_reserve(rocks_evgen *g, size_t n);
/* The membership of a member key in the dirty or frozen events: 1 and
 * *out, or 0. Committer bare; other threads under the read lock. */
int rocks_events_member(rocks *r, const uint8_t *key, uint64_t h,
                        rocks_mem *out);
/* Prefetch hints, committer only (hmap_prefetch's deep): for a coming
 * rocks_events_member of key, and for a coming rocks_evgen_add of ev. */
void rocks_events_member_prefetch(rocks *r, const uint8_t *key, int deep);
void rocks_evgen_prefetch(const rocks_evgen *g, const rocks_ev *ev, int deep);
/* Call fn on the events in memory of an object (hist 0, prefix an object
 * key) or of a member's history of one type (hist 1, prefix a history
 * prefix), newest first, until fn returns nonzero. Returns the lowest seq
 * visited, UINT64_MAX if none: the column family may hold events at or
 * above it too (a checkpoint written, not yet reaped), so a scan that
 * follows starts below it. Under the read lock. */
uint64_t rocks_events_walk(rocks *r, int hist, const uint8_t *prefix,
                           int (*fn)(void *arg, const rocks_ev *ev),
                           void *arg);
/* Put a generation's log, history and membership entries into wb, each
 * table's in key order, sorting in s's scratch (its other contents are
 * not touched), times coded against clk, which holds the generation's
 * samples (rocks_clock_note()). 0, or -1 out of memory (wb then holds
 * some). */
int rocks_evgen_write(const rocks_evgen *g, sorted *s,
                      rocksdb_writebatch_t *wb,
                      rocksdb_column_family_handle_t *const *cfs,
                      const ev_clock *clk);
/* A copy of the frozen then the dirty events, by seq (*out malloc()ed, or
 * NULL when none). Under the read lock. TALLY_OK or TALLY_ENOMEM. */
int rocks_events_copy(rocks *r, rocks_ev **out, size_t *n);

/* rocks_clock.c */
int rocks_clock_init(rocks *r);
/* Safe on a store whose init failed, and twice. */
void rocks_clock_free(rocks *r);
/* Read the samples META holds (at open, before any read or write). */
int rocks_clock_load(rocks *r);
/* Take the samples among g's events into memory and put them into wb
 * (into META, with g's chunks). 0, or -1 out of memory (wb then holds
 * some). Any thread. */
int rocks_clock_note(rocks *r, const rocks_evgen *g, rocksdb_writebatch_t *wb);
/* The clock as it is now, for coding chunks: its slots below out->n stay
 * as they are until close. */
void rocks_clock_get(rocks *r, ev_clock *out);

/* rocks_read.c */
int rocks_get(store *s, const uint8_t *key, size_t len, int64_t *out);
int rocks_token_get(store *s, const uint8_t *tok, size_t len, int64_t *result,
                    int64_t *expiry_ms);
/* A stored token's value, as put_token() (rocks_apply.c) writes it: 0, or
 * -1 when the bytes are not exactly one. */
int rocks_token_decode(const uint8_t *v, size_t vlen, int64_t *result,
                       int64_t *expiry_ms);
int rocks_tokens_sweep(store *s, int64_t now_ms, size_t max, size_t *deleted,
                       int *wrapped);
int rocks_total(store *s, const key_obj *o, int mode, int64_t *out);
int rocks_total_at(store *s, const key_obj *o, int64_t at_ms, int64_t *out);
int rocks_mtotal(store *s, const key_obj *objs, const uint8_t *modes,
                 size_t n, int64_t *out);
int rocks_mget(store *s, const uint8_t *const *keys, const size_t *lens,
               size_t n, int64_t *out, int *found);
int rocks_recent(store *s, const key_obj *o, size_t limit, uint64_t before,
                 tally_entry *out, size_t *n);
int rocks_has(store *s, const key_obj *o, uint64_t member, int64_t *at_ms);
int rocks_history(store *s, uint64_t member, uint16_t ktype, size_t limit,
                  uint64_t before, tally_history_entry *out,
                  uint16_t *ctype_ids, size_t *n);
int rocks_scan_log(store *s, int (*fn)(void *arg, const key_obj *o,
                                       uint64_t seq, const val_log *v),
                   void *arg);
/* Read one value of a CF into a zigzag int64; TALLY_ENOTFOUND if absent. */
int rocks_get_i64(rocks *r, int cf, const uint8_t *key, size_t len,
                  int64_t *out);

#endif
