/* test_oom.c: tally's own allocations fail, each in turn, under a workload
 * of opens, writes, checkpoints, reads and closes; every call must answer
 * an error or succeed, nothing may crash or leak, and a reopen without
 * failures must hold every acknowledged write and no write not sent.
 *
 * Design
 *  - This program defines malloc, calloc, realloc, aligned_alloc, strdup
 *    and free. They pass to glibc's, but while armed the allocation
 *    numbered `oom_target` (or every one from it on) among those called
 *    from this executable's own code fails: tally's objects are linked in
 *    statically; librocksdb's allocations come from its own library and
 *    never fail (it aborts on one). The test's own code allocates nothing
 *    while armed.
 *  - The blocks allocated from here while armed are remembered until
 *    freed: after the close none may be left (no global state).
 *  - A round: a fresh folder; arm; open with small checkpoint bounds, so
 *    checkpoints run within the workload; 1,500 counters written with
 *    tally_write_async() at once, so the maps grow; INCRBY, SET and DEL,
 *    likes (some with an id, sent twice), unlikes, views of 40 content
 *    types; tally_sync,
 *    every read, tally_compact, tally_backup; close; disarm; reopen and
 *    check against what was acknowledged: each counter between its
 *    acknowledged and its sent increments, each SET acknowledged there
 *    (only unacknowledged ones are deleted), each like acknowledged in
 *    (unlikes are of members never acknowledged in), each count equal to
 *    the members HAS reports; a backup that answered OK opens, a failed
 *    one left no folder.
 *  - Rounds go n = 1, 2, ... up to the allocations of a round with none
 *    failing; past the first ROUNDS_DENSE every STRIDE-th. Passes: sync
 *    durability, with one failure and with every allocation failing from
 *    the n-th on; async durability with tally_counter_add(); and caller
 *    commits (TALLY_OPEN_CALLER_COMMITS, as tallyd opens it).
 *  - A failure names the round and the stack of its first failed
 *    allocation, as offsets for addr2line.
 *  - Not built with the sanitizer (CMakeLists.txt): its allocator owns
 *    malloc. */
#define _GNU_SOURCE /* __libc_* */
#include <errno.h>
#include <execinfo.h>
#include <ftw.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tally.h"
#include "engine/engine.h"   /* the handle's store: its checkpoint hook, */
#include "store/rocks_int.h" /* for the checkpoint short of memory */


/* How the rounds open and write. */
enum mode {
	MODE_SYNC,          /* the default durability */
	MODE_ASYNC,         /* async durability, tally_counter_add() */
	MODE_CALLER         /* TALLY_OPEN_CALLER_COMMITS: tally_commit() */
};

enum {
	ROUNDS_DENSE = 400, /* every n up to here */
	STRIDE = 7,         /* then every STRIDE-th */
	NKEYS = 3,
	NOBJ = 5,
	NOPS = 120,
	NWIDE = 1500,       /* counters written async at once: maps grow */
	NMGET = 100,        /* of them read by one MGET */
	NCTYPES = 40        /* content types named by views: the table grows */
};

/* ---- the failing allocator ---------------------------------------------- */

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern void __libc_free(void *p);
extern char __executable_start[];
extern char etext[];

static atomic_int oom_armed;
static atomic_int oom_sticky;      /* fail every one from the target on */
static atomic_long oom_target;
static atomic_long oom_counted;    /* counted allocations since armed */
static atomic_long oom_failed;     /* allocations failed since armed */
static void *fail_bt[16];          /* the first failed one's stack */
static atomic_int fail_bt_n;
/* While set, every allocation of this executable's code on this thread
 * fails, armed or not (the checkpoint thread's, set by ck_fail_hook). */
static _Thread_local int thread_oom;
/* While above 0, the next allocations of this executable's code on this
 * thread fail, one each. */
static _Thread_local int thread_oom_next;

/* Blocks this executable's code allocated while armed and has not freed:
 * after a close, none may be left (the library keeps no global state). A
 * set of pointers, open addressing, a lock around it; tombstones until
 * the next round empties it. */
#define LIVE_CAP (1u << 18)
#define LIVE_TOMB ((void *)1)
static void *live[LIVE_CAP];
static const void *live_caller[LIVE_CAP];
static atomic_long live_n;
static atomic_int live_full;

static int from_here(const void *caller)
{
	return (const char *)caller >= __executable_start &&
	       (const char *)caller < etext;
}

static atomic_flag live_lock = ATOMIC_FLAG_INIT;

/* The set's lock: free() on RocksDB's threads may be in it meanwhile. */
static void live_locked(int on)
{
	if (!on) {
		atomic_flag_clear_explicit(&live_lock, memory_order_release);
		return;
	}
	while (atomic_flag_test_and_set_explicit(&live_lock,
	                                         memory_order_acquire))
		;
}


static size_t live_slot(const void *p)
{
	uint64_t h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15u;

	return (size_t)(h >> 40) & (LIVE_CAP - 1);
}

static void live_add(void *p, const void *caller)
{
	size_t i = live_slot(p);

	live_locked(1);
	for (size_t k = 0; k < LIVE_CAP; k++, i = (i + 1) & (LIVE_CAP - 1))
		if (live[i] == NULL || live[i] == LIVE_TOMB) {
			live[i] = p;
			live_caller[i] = caller;
			atomic_fetch_add(&live_n, 1);
			goto out;
		}
	atomic_store(&live_full, 1);
out:
	live_locked(0);
}

static void live_del(void *p)
{
	size_t i = live_slot(p);

	if (p == NULL || atomic_load_explicit(&live_n, memory_order_relaxed) == 0)
		return;
	live_locked(1);
	for (size_t k = 0; k < LIVE_CAP && live[i] != NULL;
	     k++, i = (i + 1) & (LIVE_CAP - 1))
		if (live[i] == p) {
			live[i] = LIVE_TOMB;
			atomic_fetch_sub(&live_n, 1);
			break;
		}
	live_locked(0);
}

/* 1: this allocation fails. 0: it goes on, and *track says whether to
 * remember the block. */
static int oom_now(const void *caller, int *track)
{
	long k;

	*track = 0;
	if ((thread_oom || thread_oom_next > 0) && from_here(caller)) {
		if (thread_oom_next > 0)
			thread_oom_next--;
		errno = ENOMEM;
		return 1;
	}
	if (!atomic_load_explicit(&oom_armed, memory_order_relaxed) ||
	    !from_here(caller))
		return 0;
	k = atomic_fetch_add(&oom_counted, 1) + 1;
	if (k == atomic_load(&oom_target) ||
	    (atomic_load(&oom_sticky) && k > atomic_load(&oom_target))) {
		if (atomic_fetch_add(&oom_failed, 1) == 0)
			atomic_store(&fail_bt_n, backtrace(fail_bt, 16));
		errno = ENOMEM;
		return 1;
	}
	*track = 1;
	return 0;
}

static void *tracked(void *p, int track, const void *caller)
{
	if (p != NULL && track)
		live_add(p, caller);
	return p;
}

void *malloc(size_t n)
{
	const void *c = __builtin_return_address(0);
	int track;

	return oom_now(c, &track) ? NULL : tracked(__libc_malloc(n), track, c);
}

void *calloc(size_t n, size_t size)
{
	const void *c = __builtin_return_address(0);
	int track;

	return oom_now(c, &track) ? NULL
	                          : tracked(__libc_calloc(n, size), track, c);
}

void *realloc(void *p, size_t n)
{
	const void *c = __builtin_return_address(0);
	int track;
	void *q;

	if (oom_now(c, &track))
		return NULL;
	q = __libc_realloc(p, n);
	if (q != NULL || n == 0)
		live_del(p);
	return tracked(q, track, c);
}

void *aligned_alloc(size_t align, size_t n)
{
	const void *c = __builtin_return_address(0);
	int track;

	return oom_now(c, &track) ? NULL
	                          : tracked(__libc_memalign(align, n), track, c);
}

char *strdup(const char *s)
{
	const void *c = __builtin_return_address(0);
	size_t n = strlen(s) + 1;
	int track;
	char *p;

	if (oom_now(c, &track))
		return NULL;
	p = __libc_malloc(n);
	if (p != NULL)
		memcpy(p, s, n);
	return tracked(p, track, c);
}

void free(void *p)
{
	live_del(p);
	__libc_free(p);
}

static void arm(long target, int sticky)
{
	live_locked(1);
	memset(live, 0, sizeof live);
	live_locked(0);
	atomic_store(&live_n, 0);
	atomic_store(&live_full, 0);
	atomic_store(&oom_counted, 0);
	atomic_store(&oom_failed, 0);
	atomic_store(&fail_bt_n, 0);
	atomic_store(&oom_target, target);
	atomic_store(&oom_sticky, sticky);
	atomic_store(&oom_armed, 1);
}

static void disarm(void)
{
	atomic_store(&oom_armed, 0);
}

static char round_name[96];        /* the round, for its failures */
static char round_dir[64];         /* its folder, removed on failure */
static char backup_dir[80];
static void rm_rf(const char *dir);

/* Fail the round: what went wrong, and where the first allocation failed
 * (offsets in this executable, for addr2line). */
static void round_fail(const char *fmt, ...)
{
	char msg[512], where[16 * 20 + 1] = "";
	size_t at = 0;
	int nbt = atomic_load(&fail_bt_n);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	for (int i = 0; i < nbt && at < sizeof where - 20; i++)
		if (from_here(fail_bt[i]))
			at += (size_t)snprintf(
				where + at, sizeof where - at, " %#lx",
				(unsigned long)((const char *)fail_bt[i] -
				                __executable_start));
	rm_rf(backup_dir);
	rm_rf(round_dir);
	fail_msg("%s: %s\n  first failed allocation: addr2line -f -i -e "
	         "test_oom%s", round_name, msg, where);
}

/* After a close: every block tally allocated while armed is freed. */
static void no_leaks(void)
{
	if (atomic_load(&live_full))
		round_fail("the leak table filled up");
	const void *leaked = NULL, *caller = NULL;

	if (atomic_load(&live_n) == 0)
		return;
	live_locked(1);
	for (size_t i = 0; i < LIVE_CAP && leaked == NULL; i++)
		if (live[i] != NULL && live[i] != LIVE_TOMB) {
			leaked = live[i];
			caller = live_caller[i];
		}
	live_locked(0);
	if (leaked != NULL)
		round_fail("%ld blocks leaked, one allocated at %#lx "
		           "(addr2line -f -e test_oom %#lx)",
		           atomic_load(&live_n), (unsigned long)(uintptr_t)caller,
		           (unsigned long)((const char *)caller -
		                           __executable_start));
}

/* ---- folders -------------------------------------------------------------- */

static int rm_one(const char *p, const struct stat *sb, int flag,
                  struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static void rm_rf(const char *dir)
{
	(void)nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- the workload and its model ------------------------------------------- */

static const char *const key_name[NKEYS] = {"oom:a", "oom:b", "oom:c"};

typedef struct model {
	int64_t acked[NKEYS];     /* increments acknowledged */
	int64_t sent[NKEYS];      /* increments sent */
	int like_acked[NOBJ][NOPS + 1]; /* member m acknowledged in */
	int like_sent[NOBJ][NOPS + 1];  /* an add of m was sent */
	int calls_failed;         /* calls that answered an error */
	_Atomic int64_t wide_acked[NWIDE]; /* by write callbacks */
	int64_t wide_sent[NWIDE];
	int set_acked[NOPS];      /* oom:s<i> set to i, acknowledged */
	int backup_ok;            /* tally_backup() answered TALLY_OK */
	int opened;               /* the round's own open succeeded */
} model;

static model M;               /* written while armed: no allocation */
static tally_entry recent_buf[20];
static tally_history_entry hist_buf[20];
static char wide_key[NWIDE][16];
static char like_id[NOPS][16];
static tally_disk_part parts_buf[8];
static tally_type_count counts_buf[8];
static char set_key[NOPS][16];
static char ctype_name[NCTYPES][16];
static const void *mget_keys[NMGET];
static size_t mget_lens[NMGET];
static int64_t mget_vals[NMGET];
static int mget_found[NMGET];
static int mode;               /* enum mode of the round */
static const char *const mode_name[] = {"sync", "async",
                                        "caller commits"};
static atomic_int cb_bad;      /* a callback's unexpected error */
static atomic_long cb_done;

static int expected_error(int rc)
{
	/* Out of memory, or a handle the failure left refusing writes (it
	 * says so with the error of what failed, or as closed). */
	return rc == TALLY_ENOMEM || rc == TALLY_EIO || rc == TALLY_ECLOSED;
}

static int bad_rc; /* first unexpected return code, its call's line */
static int bad_line;

#define NOTE(rc)                                                          \
	do {                                                              \
		int r_ = (rc);                                            \
		if (r_ != TALLY_OK) {                                     \
			M.calls_failed++;                                 \
			if (!expected_error(r_) && bad_line == 0) {       \
				bad_rc = r_;                              \
				bad_line = __LINE__;                      \
			}                                                 \
		}                                                         \
	} while (0)

static void wide_cb(void *arg, int err, int64_t result)
{
	size_t k = (size_t)(uintptr_t)arg;

	(void)result;
	if (err == TALLY_OK)
		atomic_fetch_add(&M.wide_acked[k], 1);
	else if (!expected_error(err))
		atomic_store(&cb_bad, err);
	atomic_fetch_add(&cb_done, 1);
}

/* Every wide counter gets one more increment, all queued at once with
 * tally_write_async() (the callbacks tell them apart by their counter),
 * then waited for. */
static void wide_round(tally *t)
{
	long queued = 0;
	struct timespec ms = {0, 1000000};

	atomic_store(&cb_done, 0);
	for (int k = 0; k < NWIDE; k++) {
		tally_write w = {.kind = TALLY_W_INCRBY, .key = wide_key[k],
		                 .key_len = strlen(wide_key[k]), .value = 1};
		int rc = tally_write_async(t, &w, wide_cb, (void *)(uintptr_t)k);

		NOTE(rc);
		if (rc == TALLY_OK) {
			M.wide_sent[k]++;
			queued++;
		}
	}
	if (mode == MODE_CALLER)
		NOTE(tally_commit(t));
	while (atomic_load(&cb_done) < queued)
		nanosleep(&ms, NULL);
}

static int scan_count(void *arg, const tally_event_rec *ev)
{
	(void)ev;
	++*(long *)arg;
	return 0;
}

static void reads(tally *t, int i)
{
	static const uint64_t contents[5] = {1, 2, 3, 4, 5};
	static int64_t counts[5];
	static tally_stats st;
	int64_t v;
	size_t n;
	long events = 0;
	int rc;

	NOTE(tally_count(t, "article", "like", 1, &v));
	NOTE(tally_mcount(t, "article", "like", contents, 5, counts));
	NOTE(tally_counts(t, "article", 2, counts_buf, 8, &n));
	NOTE(tally_count_at(t, "article", "view", 3, 1700000000000 + i, &v));
	NOTE(tally_recent(t, "article", "like", 2, 20, 0, recent_buf, &n));
	NOTE(tally_history(t, (uint64_t)i, "like", 20, 0, hist_buf, &n));
	rc = tally_has(t, "article", "like", 3, 1, NULL);
	if (rc != TALLY_ENOTFOUND)
		NOTE(rc);
	rc = tally_get(t, wide_key[i], strlen(wide_key[i]), &v);
	if (rc != TALLY_ENOTFOUND)
		NOTE(rc);
	NOTE(tally_events_scan(t, scan_count, &events));
	NOTE(tally_stats_get(t, &st));
	NOTE(tally_disk_usage(t, parts_buf, 8, &n));
	for (int k = 0; k < NMGET; k++) {
		mget_keys[k] = wide_key[k];
		mget_lens[k] = strlen(wide_key[k]);
	}
	NOTE(tally_mget(t, mget_keys, mget_lens, NMGET, mget_vals,
	                mget_found));
}

static void workload(tally *t)
{
	wide_round(t);
	for (int i = 0; i < NOPS; i++) {
		int k = i % NKEYS;
		int o = i % NOBJ;
		int64_t v;
		int rc;
		tally_event ev = {.ctype = "article", .ktype = "like",
		                  .content = (uint64_t)o + 1,
		                  .member = (uint64_t)i + 1};

		M.sent[k] += 2;
		if (mode == MODE_ASYNC)
			rc = tally_counter_add(t, key_name[k],
			                       strlen(key_name[k]), 2);
		else
			rc = tally_incrby(t, key_name[k], strlen(key_name[k]),
			                  2, &v);
		NOTE(rc);
		if (rc == TALLY_OK)
			M.acked[k] += 2;

		/* Every third like with an idempotency id, sent twice: the
		 * retry changes nothing. */
		if (i % 3 == 0) {
			ev.id = like_id[i];
			ev.id_len = strlen(like_id[i]);
		}
		M.like_sent[o][i + 1] = 1;
		for (int try = 0; try < (ev.id ? 2 : 1); try++) {
			rc = tally_add(t, &ev, NULL);
			NOTE(rc);
			if (rc == TALLY_OK)
				M.like_acked[o][i + 1] = 1;
		}
		ev.id = NULL;
		ev.id_len = 0;

		/* Unlike a member whose add was never acknowledged: the
		 * check then needs no order between the two. */
		if (i % 9 == 4 && !M.like_acked[o][i + 1]) {
			rc = tally_remove(t, &ev, NULL);
			NOTE(rc);
		}

		ev.ktype = "view";
		ev.member = i % 2 ? 0 : (uint64_t)i + 1;
		ev.delta = 3;
		NOTE(tally_add(t, &ev, NULL));
		ev.ctype = ctype_name[i % NCTYPES];
		NOTE(tally_add(t, &ev, NULL));

		rc = tally_set(t, set_key[i], strlen(set_key[i]), i);
		NOTE(rc);
		if (rc == TALLY_OK)
			M.set_acked[i] = 1;
		if (i % 4 == 3) {
			int existed;

			/* Of one never acknowledged: nothing to model. */
			if (!M.set_acked[i - 1])
				NOTE(tally_del(t, set_key[i - 1],
				               strlen(set_key[i - 1]), &existed));
		}

		if (i % 10 == 9) {
			NOTE(tally_sync(t));
			reads(t, i);
		}
		if (i == NOPS / 2) {
			NOTE(tally_compact(t));
			wide_round(t);
		}
		if (i == NOPS - 10) {
			rc = tally_backup(t, backup_dir);
			NOTE(rc);
			M.backup_ok = rc == TALLY_OK;
		}
	}
}

/* Reopen without failures and hold the folder to the model. */
static void check(const char *dir)
{
	tally *t = NULL;
	int rc = tally_open(dir, NULL, &t);

	if (rc != TALLY_OK)
		round_fail("reopen: %s (the round's own open %s)",
		           tally_strerror(rc), M.opened ? "succeeded" : "failed");
	for (int k = 0; k < NKEYS; k++) {
		int64_t v = -1;

		rc = tally_get(t, key_name[k], strlen(key_name[k]), &v);
		if (rc != TALLY_OK && rc != TALLY_ENOTFOUND)
			round_fail("get %s: %s", key_name[k],
			           tally_strerror(rc));
		if (rc == TALLY_ENOTFOUND)
			v = 0;
		if (v < M.acked[k] || v > M.sent[k])
			round_fail("%s = %" PRId64 ", acknowledged %" PRId64
			           ", sent %" PRId64, key_name[k], v,
			           M.acked[k], M.sent[k]);
	}
	for (int i = 0; i < NOPS; i++) {
		int64_t v = -1;

		/* Acknowledged and never deleted (only unacknowledged ones
		 * are): there with its value. Else absent, or the value. */
		rc = tally_get(t, set_key[i], strlen(set_key[i]), &v);
		if (rc != TALLY_OK && rc != TALLY_ENOTFOUND)
			round_fail("get %s: %s", set_key[i], tally_strerror(rc));
		if ((M.set_acked[i] && rc != TALLY_OK) ||
		    (rc == TALLY_OK && v != i))
			round_fail("%s: %s, %" PRId64 " (set to %d, %s)",
			           set_key[i], tally_strerror(rc), v, i,
			           M.set_acked[i] ? "acknowledged"
			                          : "not acknowledged");
	}
	for (int k = 0; k < NWIDE; k++) {
		int64_t v = -1;

		rc = tally_get(t, wide_key[k], strlen(wide_key[k]), &v);
		if (rc == TALLY_ENOTFOUND)
			v = 0;
		else if (rc != TALLY_OK)
			round_fail("get %s: %s", wide_key[k],
			           tally_strerror(rc));
		if (v < M.wide_acked[k] || v > M.wide_sent[k])
			round_fail("%s = %" PRId64 ", acknowledged %" PRId64
			           ", sent %" PRId64, wide_key[k], v,
			           (int64_t)M.wide_acked[k], M.wide_sent[k]);
	}
	for (int o = 0; o < NOBJ; o++) {
		int64_t count = -1, members = 0;

		rc = tally_count(t, "article", "like", (uint64_t)o + 1, &count);
		if (rc != TALLY_OK)
			round_fail("count %d: %s", o + 1,
			           tally_strerror(rc));
		for (int m = 1; m <= NOPS; m++) {
			rc = tally_has(t, "article", "like", (uint64_t)o + 1,
			               (uint64_t)m, NULL);
			if (rc != TALLY_OK && rc != TALLY_ENOTFOUND)
				round_fail("has %d %d: %s", o + 1, m,
				           tally_strerror(rc));
			if (rc == TALLY_OK) {
				members++;
				if (!M.like_sent[o][m])
					round_fail("member %d of %d was "
					           "never added", m, o + 1);
			} else if (M.like_acked[o][m]) {
				round_fail("acknowledged like %d of %d "
				           "lost", m, o + 1);
			}
		}
		if (count != members)
			round_fail("count %d = %" PRId64 ", members %"
			           PRId64, o + 1, count, members);
	}
	tally_close(t);
}

/* A backup that answered OK opens, and a failed one left nothing behind
 * (its partial folder removed). */
static void check_backup(void)
{
	char partial[sizeof backup_dir + 16];
	tally *t = NULL;
	int rc;

	snprintf(partial, sizeof partial, "%s%s", backup_dir,
	         TALLY_BACKUP_PARTIAL);
	if (access(partial, F_OK) == 0)
		round_fail("a backup's partial folder is left: %s", partial);
	if (!M.backup_ok) {
		if (access(backup_dir, F_OK) == 0)
			round_fail("a failed backup left %s", backup_dir);
		return;
	}
	rc = tally_open(backup_dir, NULL, &t);
	if (rc != TALLY_OK)
		round_fail("the backup does not open: %s", tally_strerror(rc));
	tally_close(t);
	rm_rf(backup_dir);
}

/* One round: returns how many allocations it counted. */
static long round_run(const char *dir, long n, int sticky)
{
	tally_options o = {.cache_entries_max = 1024, .checkpoint_kib = 4};

	if (mode == MODE_ASYNC) {
		o.durability = TALLY_DURABILITY_ASYNC;
		o.flush_interval_ms = 1;
	}
	if (mode == MODE_CALLER)
		o.flags = TALLY_OPEN_CALLER_COMMITS;
	tally *t = NULL;
	long counted;
	int rc;

	rm_rf(dir);
	snprintf(backup_dir, sizeof backup_dir, "%s.backup", dir);
	rm_rf(backup_dir);
	memset(&M, 0, sizeof M);
	atomic_store(&cb_bad, 0);
	bad_rc = 0;
	bad_line = 0;
	snprintf(round_name, sizeof round_name, "%s, allocation %ld%s fails",
	         mode_name[mode], n, sticky ? " and every one after" : "");
	arm(n, sticky);
	rc = tally_open(dir, &o, &t);
	M.opened = rc == TALLY_OK;
	if (rc == TALLY_OK) {
		/* Built in; adding them again with their mode changes
		 * nothing, and reads the schema. */
		rc = tally_type_add(t, "like", TALLY_MODE_UNIQUE);
		NOTE(rc);
		if (rc == TALLY_OK) {
			rc = tally_type_add(t, "view", TALLY_MODE_TOTAL);
			NOTE(rc);
		}
		if (rc == TALLY_OK)
			workload(t);
		tally_close(t);
	} else {
		NOTE(rc);
	}
	disarm();
	counted = atomic_load(&oom_counted);
	no_leaks();
	if (atomic_load(&cb_bad) != 0)
		round_fail("a write callback got %d (%s)", atomic_load(&cb_bad),
		             tally_strerror(atomic_load(&cb_bad)));
	if (bad_line != 0)
		round_fail("line %d answered %d (%s)", bad_line, bad_rc,
		             tally_strerror(bad_rc));
	check(dir);
	check_backup();
	return counted;
}

static void run_pass(int m, int sticky, long dense, long stride)
{
	char dir[] = "/tmp/tally-oom-XXXXXX";
	long total = -1, rounds = 0, failed_calls = 0;

	/* Its first call loads the unwinder: not while armed. */
	{
		void *b[4];

		(void)backtrace(b, 4);
	}
	mode = m;
	for (int k = 0; k < NWIDE; k++)
		snprintf(wide_key[k], sizeof wide_key[k], "wide:%d", k);
	for (int i = 0; i < NOPS; i++) {
		snprintf(like_id[i], sizeof like_id[i], "like-%d", i);
		snprintf(set_key[i], sizeof set_key[i], "oom:s%d", i);
	}
	for (int c = 0; c < NCTYPES; c++)
		snprintf(ctype_name[c], sizeof ctype_name[c], "kind%d", c);
	assert_non_null(mkdtemp(dir));
	snprintf(round_dir, sizeof round_dir, "%s", dir);
	/* A round with nothing failing: how many allocations there are. */
	total = round_run(dir, 0, 0);
	assert_true(total > 0);
	for (long n = 1; n <= total; n += n < dense ? 1 : stride) {
		(void)round_run(dir, n, sticky);
		rounds++;
		failed_calls += M.calls_failed;
	}
	rm_rf(dir);
	printf("# %s, %s: %ld allocations in the workload, %ld rounds, "
	       "%ld calls answered an error\n", mode_name[m],
	       sticky ? "every allocation from the n-th" : "the n-th allocation",
	       total, rounds, failed_calls);
	/* A harness whose failures never reach tally would pass above. */
	assert_true(failed_calls > 0);
}

static void test_each_allocation_fails_once(void **state)
{
	(void)state;
	run_pass(MODE_SYNC, 0, ROUNDS_DENSE, STRIDE);
}

static void test_each_allocation_fails_once_async(void **state)
{
	(void)state;
	run_pass(MODE_ASYNC, 0, 60, 4);
}

static void test_each_allocation_fails_once_caller_commits(void **state)
{
	(void)state;
	run_pass(MODE_CALLER, 0, 60, 4);
}

static void test_allocations_fail_from_one_on(void **state)
{
	(void)state;
	run_pass(MODE_SYNC, 1, 60, 4 * STRIDE);
}

/* ---- a checkpoint short of memory ---------------------------------------- */

static atomic_int ck_tries;      /* checkpoint writes begun (the hook) */
static atomic_int ck_fail_tries; /* the first this many fail for memory */

/* The checkpoint thread's hook, called before each try of a checkpoint:
 * the first ck_fail_tries find no memory on that thread. */
static void ck_fail_hook(void *arg)
{
	(void)arg;
	thread_oom = atomic_fetch_add(&ck_tries, 1) <
	             atomic_load(&ck_fail_tries);
}

/* Open dir with small checkpoints and the hook set before the first. */
static tally *ck_open(const char *dir, int fail_tries)
{
	tally_options o = { .checkpoint_kib = 4 };
	tally *t = NULL;

	atomic_store(&ck_tries, 0);
	atomic_store(&ck_fail_tries, fail_tries);
	assert_int_equal(tally_open(dir, &o, &t), TALLY_OK);
	((rocks *)t->st)->ck_hook = ck_fail_hook;
	return t;
}

static int ck_like(tally *t, uint64_t member)
{
	tally_event ev = { .ctype = "article", .ktype = "like",
	                   .content = 7, .member = member };

	return tally_add(t, &ev, NULL);
}

/* The n-th like and increment, each acknowledged. */
static void ck_write(tally *t, uint64_t n)
{
	int64_t v;

	assert_int_equal(ck_like(t, n), TALLY_OK);
	assert_int_equal(tally_incrby(t, "ck:n", 4, 1, &v), TALLY_OK);
	assert_int_equal(v, (int64_t)n);
}

/* Writes until done(t) holds, at most 100,000. Returns how many. */
static uint64_t ck_write_until(tally *t, int (*done)(tally *))
{
	uint64_t n = 0;

	while (!done(t)) {
		assert_true(n < 100000);
		ck_write(t, ++n);
	}
	return n;
}

static tally_stats ck_stats(tally *t)
{
	tally_stats st;

	assert_int_equal(tally_stats_get(t, &st), TALLY_OK);
	return st;
}

static int two_checkpoints(tally *t)
{
	return ck_stats(t).store_checkpoints >= 2;
}

static int one_retry(tally *t)
{
	return ck_stats(t).store_checkpoint_retries >= 1;
}

/* A reopen holds the n likes and increments. */
static void ck_check(const char *dir, uint64_t n)
{
	tally *t = NULL;
	int64_t v = -1;

	assert_int_equal(tally_open(dir, NULL, &t), TALLY_OK);
	assert_int_equal(tally_count(t, "article", "like", 7, &v), TALLY_OK);
	assert_int_equal(v, (int64_t)n);
	assert_int_equal(tally_get(t, "ck:n", 4, &v), TALLY_OK);
	assert_int_equal(v, (int64_t)n);
	tally_close(t);
}

/* A checkpoint that finds no memory has written nothing: it is tried
 * again, and the store serves on, where it used to fail (refusing every
 * write until a reopen). */
static void test_checkpoint_short_of_memory_is_retried(void **state)
{
	char dir[] = "/tmp/tally-oom-ck-XXXXXX";
	tally *t;
	tally_stats st;
	uint64_t n;

	(void)state;
	assert_non_null(mkdtemp(dir));
	t = ck_open(dir, 2);
	n = ck_write_until(t, two_checkpoints);
	st = ck_stats(t);
	assert_true(atomic_load(&ck_tries) >= 4);
	/* Two tries failed and waited; the third wrote it. */
	assert_int_equal(st.store_checkpoint_retries, 2);
	assert_int_equal(st.store_failures, 0);
	assert_int_equal(st.store_error, TALLY_OK);
	tally_close(t);
	ck_check(dir, n);
	rm_rf(dir);
}

/* A close does not wait out a checkpoint's retries: it stops them, and
 * the journal, kept, replays what the checkpoint did not write. */
static void test_close_stops_checkpoint_retries(void **state)
{
	char dir[] = "/tmp/tally-oom-ck-XXXXXX";
	struct timespec a, b;
	tally *t;
	uint64_t n;
	double s;

	(void)state;
	assert_non_null(mkdtemp(dir));
	t = ck_open(dir, 1 << 30);
	n = ck_write_until(t, one_retry);
	/* A compaction would wait for it: refused at once, nothing lost. */
	assert_int_equal(tally_compact(t), TALLY_ENOMEM);
	assert_int_equal(ck_stats(t).store_failures, 0);
	ck_write(t, ++n);
	clock_gettime(CLOCK_MONOTONIC, &a);
	tally_close(t);
	clock_gettime(CLOCK_MONOTONIC, &b);
	s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	/* The retries go on for 30 s; a close must not be held that long. */
	if (s >= 10.0)
		fail_msg("the close took %.1f s behind a checkpoint's retries", s);
	ck_check(dir, n);
	rm_rf(dir);
}

/* ---- a new content type in a batch short of memory ----------------------- */

/* Commits tried with more allocations failing, at most. */
#define CT_TRIES_MAX 32

typedef struct ct_done {
	int called, err;
} ct_done;

static void ct_cb(void *arg, int err, int64_t result)
{
	ct_done *d = arg;

	(void)result;
	d->called = 1;
	d->err = err;
}

/* Queue a like of content (by member 9) under the content type ctype,
 * then commit it (the handle commits on the caller's thread) with the
 * first `fail` allocations of that commit failing. Returns how the like
 * ended. */
static int ct_like(tally *t, const char *ctype, uint64_t content, int fail)
{
	tally_write w = {
		.kind = TALLY_W_ADD,
		.event = { .ctype = ctype, .ktype = "like", .content = content,
		           .member = 9 },
	};
	ct_done d = { 0, -1 };

	assert_int_equal(tally_write_async(t, &w, ct_cb, &d), TALLY_OK);
	thread_oom_next = fail;
	assert_int_equal(tally_commit(t), TALLY_OK);
	thread_oom_next = 0;
	assert_true(d.called);
	return d.err;
}

/* A batch that fails for memory while it names a new content type: the
 * name is written alone, the like fails alone, and the store serves on
 * (it used to fail, so that its recovery would reload the types, the id
 * having been given out with no name on disk). */
static void test_new_content_type_in_a_batch_out_of_memory(void **state)
{
	char dir[] = "/tmp/tally-oom-ct-XXXXXX", name[16] = "";
	tally_options o = { .flags = TALLY_OPEN_CALLER_COMMITS };
	tally_history_entry h[CT_TRIES_MAX + 2];
	tally_stats st;
	tally *t = NULL;
	int64_t v = -1;
	size_t n = 0;
	int k, err = TALLY_OK;

	(void)state;
	thread_oom_next = 0;
	assert_non_null(mkdtemp(dir));
	assert_int_equal(tally_open(dir, &o, &t), TALLY_OK);
	/* Some allocations fail harmlessly (a batched read falls back to a
	 * lookup of its own): fail the first k of the commit, k = 1, 2 ...,
	 * until the batch fails, each time naming a new content type. */
	for (k = 1; k <= CT_TRIES_MAX && err == TALLY_OK; k++) {
		snprintf(name, sizeof name, "fresh%d", k);
		err = ct_like(t, name, (uint64_t)k, k);
	}
	assert_int_equal(err, TALLY_ENOMEM);
	k--;
	st = ck_stats(t);
	assert_int_equal(st.store_failures, 0);
	assert_int_equal(st.store_error, TALLY_OK);
	/* The id is the type's: a like under it, and another new type. */
	assert_int_equal(ct_like(t, name, 100, 0), TALLY_OK);
	assert_int_equal(ct_like(t, "other", 101, 0), TALLY_OK);
	tally_close(t);
	assert_int_equal(tally_open(dir, NULL, &t), TALLY_OK);
	assert_int_equal(tally_count(t, name, "like", (uint64_t)k, &v), TALLY_OK);
	assert_int_equal(v, 0);
	assert_int_equal(tally_count(t, name, "like", 100, &v), TALLY_OK);
	assert_int_equal(v, 1);
	assert_int_equal(tally_count(t, "other", "like", 101, &v), TALLY_OK);
	assert_int_equal(v, 1);
	/* Every stored id has its own name (one with none reads as
	 * corrupt): the likes before the failed one, then the two after. */
	assert_int_equal(tally_history(t, 9, "like", CT_TRIES_MAX + 2, 0, h, &n),
	                 TALLY_OK);
	assert_int_equal(n, (size_t)k + 1);
	assert_string_equal(h[0].ctype, "other");
	assert_string_equal(h[1].ctype, name);
	for (size_t i = 2; i < n; i++) {
		char want[16];

		snprintf(want, sizeof want, "fresh%zu", (size_t)k + 1 - i);
		assert_string_equal(h[i].ctype, want);
	}
	tally_close(t);
	rm_rf(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_each_allocation_fails_once),
		cmocka_unit_test(test_allocations_fail_from_one_on),
		cmocka_unit_test(test_each_allocation_fails_once_async),
		cmocka_unit_test(test_each_allocation_fails_once_caller_commits),
		cmocka_unit_test(test_checkpoint_short_of_memory_is_retried),
		cmocka_unit_test(test_close_stops_checkpoint_retries),
		cmocka_unit_test(test_new_content_type_in_a_batch_out_of_memory),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
