/* test_engine.c: black-box tests of the public libtally API (tally.h), one
 * test per behaviour, named for it. Each test gets a fresh database in its
 * own temporary folder (mkdtemp under /tmp), removed afterwards with nftw.
 *
 * Only tally.h is used: these tests hold the implementation to the contract
 * the header documents, not to its internals. Threads and write callbacks
 * never call cmocka assertions (cmocka unwinds with longjmp on the test's own
 * thread); they record what they saw and the test thread checks it. */
#ifndef _XOPEN_SOURCE
#define _XOPEN_SOURCE 700 /* nftw, FTW_DEPTH, FTW_PHYS */
#endif

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <rocksdb/c.h>

#include "tally.h"
#include "core/keys.h"
#include "engine/engine.h"   /* tokens_*: the token table alone */
#include "store/rocks_int.h" /* META_FORMAT, CF_*, ROCKS_FORMAT */

/* ------------------------------------------------------------------------
 * Assertion helpers: they print error codes as their names' descriptions
 * and int64 values signed (cmocka's own print them as unsigned).
 * --------------------------------------------------------------------- */

#define CHECK_RC(expr, want)                                                \
	do {                                                                \
		int rc_ = (expr);                                           \
		int want_ = (want);                                         \
		if (rc_ != want_)                                           \
			fail_msg("%s:%d: %s returned %d (%s), want %d (%s)",  \
			         __FILE__, __LINE__, #expr, rc_,              \
			         tally_strerror(rc_), want_,                  \
			         tally_strerror(want_));                      \
	} while (0)

#define CHECK_OK(expr) CHECK_RC(expr, TALLY_OK)

#define CHECK_I64(got, want)                                                \
	do {                                                                \
		int64_t g_ = (int64_t)(got);                                \
		int64_t w_ = (int64_t)(want);                               \
		if (g_ != w_)                                               \
			fail_msg("%s:%d: %s = %" PRId64 ", want %" PRId64,    \
			         __FILE__, __LINE__, #got, g_, w_);           \
	} while (0)

#define CHECK_U64(got, want)                                                \
	do {                                                                \
		uint64_t g_ = (uint64_t)(got);                              \
		uint64_t w_ = (uint64_t)(want);                             \
		if (g_ != w_)                                               \
			fail_msg("%s:%d: %s = %" PRIu64 ", want %" PRIu64,    \
			         __FILE__, __LINE__, #got, g_, w_);           \
	} while (0)

#define CHECK_STR(got, want)                                                \
	do {                                                                \
		const char *g_ = (got);                                     \
		const char *w_ = (want);                                    \
		if (strcmp(g_, w_) != 0)                                    \
			fail_msg("%s:%d: %s = \"%s\", want \"%s\"", __FILE__, \
			         __LINE__, #got, g_, w_);                     \
	} while (0)

#define CHECK_TRUE(cond)                                                    \
	do {                                                                \
		if (!(cond))                                                \
			fail_msg("%s:%d: expected %s", __FILE__, __LINE__,    \
			         #cond);                                      \
	} while (0)

/* ------------------------------------------------------------------------
 * Fixture: a fresh folder and an open handle per test.
 * --------------------------------------------------------------------- */

struct fx {
	char dir[128];      /* temporary root, removed by the teardown */
	char db[192];       /* dir/db: the database folder */
	tally_options opts; /* options of the current handle */
	tally *t;
};

static int rm_entry(const char *path, const struct stat *sb, int flag,
                    struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path) == 0 ? 0 : -1;
}

static void rm_tree(const char *dir)
{
	(void)nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int fx_setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	if (f == NULL)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/tally-test-XXXXXX");
	if (mkdtemp(f->dir) == NULL) {
		free(f);
		return -1;
	}
	snprintf(f->db, sizeof(f->db), "%s/db", f->dir);
	int rc = tally_open(f->db, &f->opts, &f->t);
	if (rc != TALLY_OK) {
		print_error("tally_open(%s): %d (%s)\n", f->db, rc,
		            tally_strerror(rc));
		rm_tree(f->dir);
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *f = *state;
	if (f == NULL)
		return 0;
	tally_closep(&f->t);
	rm_tree(f->dir);
	free(f);
	*state = NULL;
	return 0;
}

/* Close and open again with the same options. */
static void fx_reopen(struct fx *f)
{
	tally_closep(&f->t);
	assert_null(f->t);
	CHECK_OK(tally_open(f->db, &f->opts, &f->t));
	assert_non_null(f->t);
}

/* Close and open again with other options. */
static void fx_reopen_with(struct fx *f, const tally_options *opts)
{
	f->opts = *opts;
	fx_reopen(f);
}

static tally_event ev_of(const char *ctype, const char *ktype,
                         uint64_t content, uint64_t member)
{
	tally_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.ctype = ctype;
	ev.ktype = ktype;
	ev.content = content;
	ev.member = member;
	return ev;
}

static tally_write write_incrby(const void *key, size_t key_len,
                                int64_t delta)
{
	tally_write w;
	memset(&w, 0, sizeof(w));
	w.kind = TALLY_W_INCRBY;
	w.key = key;
	w.key_len = key_len;
	w.value = delta;
	return w;
}

static int64_t count_of(tally *t, const char *ctype, const char *ktype,
                        uint64_t content)
{
	int64_t c = INT64_MIN;
	CHECK_OK(tally_count(t, ctype, ktype, content, &c));
	return c;
}

static int64_t get_of(tally *t, const char *key)
{
	int64_t v = INT64_MIN;
	CHECK_OK(tally_get(t, key, strlen(key), &v));
	return v;
}

/* tally_add that must succeed; returns the count after. */
static int64_t add_ok(tally *t, const tally_event *ev)
{
	int64_t c = INT64_MIN;
	CHECK_OK(tally_add(t, ev, &c));
	return c;
}

static int64_t remove_ok(tally *t, const tally_event *ev)
{
	int64_t c = INT64_MIN;
	CHECK_OK(tally_remove(t, ev, &c));
	return c;
}

/* tally_write_sync that must succeed; returns the write's result. */
static int64_t write_ok(tally *t, const tally_write *w)
{
	int64_t r = INT64_MIN;
	CHECK_OK(tally_write_sync(t, w, &r));
	return r;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Every entry of tally_recent(), paged with `before`, newest first.
 * Returns a malloc'ed array (free it) and its length in *n. */
static tally_entry *recent_all(tally *t, const char *ctype, const char *ktype,
                               uint64_t content, size_t page, size_t *n)
{
	size_t cap = 64, len = 0;
	tally_entry *all = malloc(cap * sizeof(*all));
	tally_entry *buf = malloc(page * sizeof(*buf));
	assert_non_null(all);
	assert_non_null(buf);
	uint64_t before = 0;
	for (;;) {
		size_t got = SIZE_MAX;
		CHECK_OK(tally_recent(t, ctype, ktype, content, page, before,
		                      buf, &got));
		CHECK_TRUE(got <= page);
		if (len + got > cap) {
			while (len + got > cap)
				cap *= 2;
			all = realloc(all, cap * sizeof(*all));
			assert_non_null(all);
		}
		memcpy(all + len, buf, got * sizeof(*buf));
		len += got;
		if (got < page)
			break;
		before = buf[got - 1].seq;
	}
	free(buf);
	*n = len;
	return all;
}

/* ------------------------------------------------------------------------
 * Counting events
 * --------------------------------------------------------------------- */

static void test_like_twice_counts_once(void **state)
{
	struct fx *f = *state;
	tally_event ev = ev_of("article", "like", 42, 7);

	CHECK_I64(add_ok(f->t, &ev), 1);
	CHECK_I64(add_ok(f->t, &ev), 1);
	CHECK_I64(count_of(f->t, "article", "like", 42), 1);
	CHECK_OK(tally_has(f->t, "article", "like", 42, 7, NULL));

	ev.member = 8;
	CHECK_I64(add_ok(f->t, &ev), 2);
	CHECK_I64(add_ok(f->t, &ev), 2);
	CHECK_I64(count_of(f->t, "article", "like", 42), 2);
	/* Another object is untouched. */
	CHECK_I64(count_of(f->t, "article", "like", 43), 0);
}

static void test_remove_of_non_member_is_noop(void **state)
{
	struct fx *f = *state;
	tally_event ev = ev_of("article", "like", 1, 5);

	/* On an object with no events at all. */
	CHECK_I64(remove_ok(f->t, &ev), 0);
	CHECK_I64(count_of(f->t, "article", "like", 1), 0);
	CHECK_RC(tally_has(f->t, "article", "like", 1, 5, NULL),
	         TALLY_ENOTFOUND);

	ev.member = 1;
	CHECK_I64(add_ok(f->t, &ev), 1);
	ev.member = 2;
	CHECK_I64(remove_ok(f->t, &ev), 1);
	CHECK_I64(count_of(f->t, "article", "like", 1), 1);
	CHECK_OK(tally_has(f->t, "article", "like", 1, 1, NULL));
	CHECK_RC(tally_has(f->t, "article", "like", 1, 2, NULL),
	         TALLY_ENOTFOUND);

	/* Removing the member, then removing it again. */
	ev.member = 1;
	CHECK_I64(remove_ok(f->t, &ev), 0);
	CHECK_I64(remove_ok(f->t, &ev), 0);
	CHECK_I64(count_of(f->t, "article", "like", 1), 0);
	CHECK_RC(tally_has(f->t, "article", "like", 1, 1, NULL),
	         TALLY_ENOTFOUND);
}

static void test_total_type_adds_and_subtracts_delta(void **state)
{
	struct fx *f = *state;
	tally_event ev = ev_of("article", "view", 9, 3);

	ev.delta = 0; /* 0 means 1 */
	CHECK_I64(add_ok(f->t, &ev), 1);
	ev.delta = 5;
	CHECK_I64(add_ok(f->t, &ev), 6);
	ev.member = 4; /* the same member or another: a total adds anyway */
	ev.delta = 1;
	CHECK_I64(add_ok(f->t, &ev), 7);
	ev.delta = 2;
	CHECK_I64(remove_ok(f->t, &ev), 5);
	ev.delta = 0;
	CHECK_I64(remove_ok(f->t, &ev), 4);
	CHECK_I64(count_of(f->t, "article", "view", 9), 4);
	/* Other counting types of the same object are untouched. */
	CHECK_I64(count_of(f->t, "article", "read", 9), 0);
	CHECK_I64(count_of(f->t, "article", "like", 9), 0);
}

/* Completion record of a handful of async writes. */
#define BATCH_OPS 5
struct batch_rec {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done;
	int calls[BATCH_OPS];
	int errs[BATCH_OPS];
	int64_t results[BATCH_OPS];
};

struct batch_arg {
	struct batch_rec *rec;
	int idx;
};

static void batch_cb(void *arg, int err, int64_t result)
{
	struct batch_arg *a = arg;
	pthread_mutex_lock(&a->rec->mu);
	a->rec->calls[a->idx]++;
	a->rec->errs[a->idx] = err;
	a->rec->results[a->idx] = result;
	a->rec->done++;
	pthread_cond_broadcast(&a->rec->cv);
	pthread_mutex_unlock(&a->rec->mu);
}

/* Waits until *done (guarded by mu) reaches target; 0 on time-out. */
static int wait_done(pthread_mutex_t *mu, pthread_cond_t *cv,
                     const long *done, long target, int timeout_s)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_s;
	int ok = 1;
	pthread_mutex_lock(mu);
	while (*done < target) {
		if (pthread_cond_timedwait(cv, mu, &until) == ETIMEDOUT) {
			ok = *done >= target;
			break;
		}
	}
	pthread_mutex_unlock(mu);
	return ok;
}

/* Queues five ADD/REMOVE writes of one member without waiting, waits for
 * all five callbacks and checks their results. */
static void run_batch(tally *t, uint64_t content, const int *kinds,
                      const int64_t *want)
{
	/* Heap, and leaked on a time-out, so a late callback never writes
	 * into a dead stack frame. */
	struct batch_rec *rec = calloc(1, sizeof(*rec));
	struct batch_arg *args = calloc(BATCH_OPS, sizeof(*args));
	assert_non_null(rec);
	assert_non_null(args);
	pthread_mutex_init(&rec->mu, NULL);
	pthread_cond_init(&rec->cv, NULL);
	for (int i = 0; i < BATCH_OPS; i++) {
		tally_write w;
		memset(&w, 0, sizeof(w));
		w.kind = kinds[i];
		w.event = ev_of("article", "like", content, 3);
		args[i].rec = rec;
		args[i].idx = i;
		CHECK_OK(tally_write_async(t, &w, batch_cb, &args[i]));
	}
	long done = 0;
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 60;
	pthread_mutex_lock(&rec->mu);
	while (rec->done < BATCH_OPS &&
	       pthread_cond_timedwait(&rec->cv, &rec->mu, &until) == 0) {
	}
	done = rec->done;
	pthread_mutex_unlock(&rec->mu);
	if (done < BATCH_OPS)
		fail_msg("only %ld of %d callbacks ran within 60 s", done,
		         BATCH_OPS);
	for (int i = 0; i < BATCH_OPS; i++) {
		CHECK_I64(rec->calls[i], 1);
		CHECK_RC(rec->errs[i], TALLY_OK);
		if (rec->results[i] != want[i])
			fail_msg("write %d (%s) of the batch: result %" PRId64
			         ", want %" PRId64, i,
			         kinds[i] == TALLY_W_ADD ? "add" : "remove",
			         rec->results[i], want[i]);
	}
	pthread_mutex_destroy(&rec->mu);
	pthread_cond_destroy(&rec->cv);
	free(args);
	free(rec);
}

static void test_async_batch_add_remove_same_member_ends_right(void **state)
{
	struct fx *f = *state;
	static const int alt[BATCH_OPS] = {TALLY_W_ADD, TALLY_W_REMOVE,
	                                   TALLY_W_ADD, TALLY_W_REMOVE,
	                                   TALLY_W_ADD};
	static const int64_t alt_want[BATCH_OPS] = {1, 0, 1, 0, 1};
	run_batch(f->t, 1, alt, alt_want);
	CHECK_I64(count_of(f->t, "article", "like", 1), 1);
	CHECK_OK(tally_has(f->t, "article", "like", 1, 3, NULL));

	/* Every change is an event of the log, removes included, newest
	 * first. */
	size_t n = 0;
	tally_entry *e = recent_all(f->t, "article", "like", 1, 100, &n);
	CHECK_U64(n, 5);
	for (size_t i = 0; i < n; i++) {
		CHECK_U64(e[i].member, 3);
		CHECK_I64(e[i].delta, i % 2 == 0 ? 1 : -1);
		if (i > 0)
			CHECK_TRUE(e[i].seq < e[i - 1].seq);
	}
	free(e);

	/* No-ops inside one batch: add, add, remove, remove, add. */
	static const int noop[BATCH_OPS] = {TALLY_W_ADD, TALLY_W_ADD,
	                                    TALLY_W_REMOVE, TALLY_W_REMOVE,
	                                    TALLY_W_ADD};
	static const int64_t noop_want[BATCH_OPS] = {1, 1, 0, 0, 1};
	run_batch(f->t, 2, noop, noop_want);
	CHECK_I64(count_of(f->t, "article", "like", 2), 1);
	CHECK_OK(tally_has(f->t, "article", "like", 2, 3, NULL));
}

/* ------------------------------------------------------------------------
 * Named counters
 * --------------------------------------------------------------------- */

static void test_incrby_overflow_changes_nothing(void **state)
{
	struct fx *f = *state;
	const char *k = "ovf";
	int64_t v = 0;

	CHECK_OK(tally_set(f->t, k, 3, INT64_MAX - 1));
	CHECK_RC(tally_incrby(f->t, k, 3, 2, &v), TALLY_EOVERFLOW);
	CHECK_I64(get_of(f->t, k), INT64_MAX - 1);
	CHECK_RC(tally_incrby(f->t, k, 3, INT64_MAX, NULL), TALLY_EOVERFLOW);
	CHECK_I64(get_of(f->t, k), INT64_MAX - 1);

	/* The same through the other write paths. */
	tally_write w = write_incrby(k, 3, 2);
	CHECK_RC(tally_write_sync(f->t, &w, NULL), TALLY_EOVERFLOW);
	CHECK_I64(get_of(f->t, k), INT64_MAX - 1);
	CHECK_RC(tally_counter_add(f->t, k, 3, 2), TALLY_EOVERFLOW);
	CHECK_I64(get_of(f->t, k), INT64_MAX - 1);

	/* Reaching the limit exactly is fine; one more is not. */
	CHECK_OK(tally_incrby(f->t, k, 3, 1, &v));
	CHECK_I64(v, INT64_MAX);
	CHECK_RC(tally_incrby(f->t, k, 3, 1, &v), TALLY_EOVERFLOW);
	CHECK_I64(get_of(f->t, k), INT64_MAX);

	/* A failed write did not disturb later ones. */
	CHECK_OK(tally_incrby(f->t, k, 3, -5, &v));
	CHECK_I64(v, INT64_MAX - 5);
}

static void test_incrby_int64_min_on_negative_refused(void **state)
{
	struct fx *f = *state;
	int64_t v = 0;

	CHECK_OK(tally_set(f->t, "neg", 3, -1));
	CHECK_RC(tally_incrby(f->t, "neg", 3, INT64_MIN, &v), TALLY_EOVERFLOW);
	CHECK_I64(get_of(f->t, "neg"), -1);

	/* A missing counter starts from 0: INT64_MIN fits, then -1 does
	 * not. */
	CHECK_OK(tally_incrby(f->t, "min", 3, INT64_MIN, &v));
	CHECK_I64(v, INT64_MIN);
	CHECK_RC(tally_incrby(f->t, "min", 3, -1, &v), TALLY_EOVERFLOW);
	CHECK_I64(get_of(f->t, "min"), INT64_MIN);

	/* From a positive value INT64_MIN is fine. */
	CHECK_OK(tally_set(f->t, "pos", 3, 1));
	CHECK_OK(tally_incrby(f->t, "pos", 3, INT64_MIN, &v));
	CHECK_I64(v, INT64_MIN + 1);
	CHECK_OK(tally_incrby(f->t, "pos", 3, INT64_MAX, &v));
	CHECK_I64(v, 0);
}

static void test_total_type_overflow_changes_nothing(void **state)
{
	struct fx *f = *state;
	tally_event ev = ev_of("article", "view", 5, 1);
	int64_t c = 0;

	ev.delta = INT64_MAX - 1;
	CHECK_I64(add_ok(f->t, &ev), INT64_MAX - 1);
	ev.delta = 2;
	CHECK_RC(tally_add(f->t, &ev, &c), TALLY_EOVERFLOW);
	CHECK_I64(count_of(f->t, "article", "view", 5), INT64_MAX - 1);
	/* The refused event is not in the log either. */
	size_t n = 0;
	tally_entry *e = recent_all(f->t, "article", "view", 5, 10, &n);
	CHECK_U64(n, 1);
	CHECK_I64(e[0].delta, INT64_MAX - 1);
	free(e);
	ev.delta = 1;
	CHECK_I64(add_ok(f->t, &ev), INT64_MAX);
}

static void test_set_get_del_semantics(void **state)
{
	struct fx *f = *state;
	int64_t v = 42;
	int existed = -1;

	/* Missing counter: ENOTFOUND and *out 0. */
	CHECK_RC(tally_get(f->t, "k", 1, &v), TALLY_ENOTFOUND);
	CHECK_I64(v, 0);

	CHECK_OK(tally_set(f->t, "k", 1, 5));
	CHECK_I64(get_of(f->t, "k"), 5);
	CHECK_OK(tally_set(f->t, "k", 1, -9));
	CHECK_I64(get_of(f->t, "k"), -9);
	CHECK_OK(tally_set(f->t, "k", 1, INT64_MIN));
	CHECK_I64(get_of(f->t, "k"), INT64_MIN);
	CHECK_OK(tally_set(f->t, "k", 1, 0)); /* 0 is a value, not a delete */
	CHECK_I64(get_of(f->t, "k"), 0);

	CHECK_OK(tally_del(f->t, "k", 1, &existed));
	CHECK_I64(existed, 1);
	v = 42;
	CHECK_RC(tally_get(f->t, "k", 1, &v), TALLY_ENOTFOUND);
	CHECK_I64(v, 0);
	existed = -1;
	CHECK_OK(tally_del(f->t, "k", 1, &existed));
	CHECK_I64(existed, 0);
	CHECK_OK(tally_del(f->t, "k", 1, NULL));

	/* After a delete INCRBY starts from 0 again. */
	CHECK_OK(tally_incrby(f->t, "k", 1, 3, &v));
	CHECK_I64(v, 3);

	/* The write kinds through tally_write_sync. */
	tally_write w;
	int64_t r = -1;
	memset(&w, 0, sizeof(w));
	w.kind = TALLY_W_SET;
	w.key = "s";
	w.key_len = 1;
	w.value = 77;
	CHECK_OK(tally_write_sync(f->t, &w, &r));
	CHECK_I64(r, 77);
	CHECK_I64(get_of(f->t, "s"), 77);
	w = write_incrby("s", 1, -7);
	CHECK_OK(tally_write_sync(f->t, &w, &r));
	CHECK_I64(r, 70);
	memset(&w, 0, sizeof(w));
	w.kind = TALLY_W_DEL;
	w.key = "s";
	w.key_len = 1;
	CHECK_OK(tally_write_sync(f->t, &w, &r));
	CHECK_I64(r, 1);
	CHECK_OK(tally_write_sync(f->t, &w, &r));
	CHECK_I64(r, 0);
	CHECK_RC(tally_get(f->t, "s", 1, &v), TALLY_ENOTFOUND);
}

static void test_mget_missing_key_found_zero(void **state)
{
	struct fx *f = *state;
	CHECK_OK(tally_set(f->t, "a", 1, 1));
	CHECK_OK(tally_set(f->t, "c", 1, -3));

	const void *keys[4] = {"a", "b", "c", "a"};
	size_t lens[4] = {1, 1, 1, 1};
	int64_t vals[4] = {99, 99, 99, 99};
	int found[4] = {7, 7, 7, 7};
	CHECK_OK(tally_mget(f->t, keys, lens, 4, vals, found));
	CHECK_I64(vals[0], 1);
	CHECK_I64(vals[1], 0);
	CHECK_I64(vals[2], -3);
	CHECK_I64(vals[3], 1);
	CHECK_I64(found[0], 1);
	CHECK_I64(found[1], 0);
	CHECK_I64(found[2], 1);
	CHECK_I64(found[3], 1);

	/* found may be NULL. */
	vals[1] = 99;
	CHECK_OK(tally_mget(f->t, keys, lens, 3, vals, NULL));
	CHECK_I64(vals[0], 1);
	CHECK_I64(vals[1], 0);
	CHECK_I64(vals[2], -3);

	/* A deleted counter reads as missing. */
	CHECK_OK(tally_del(f->t, "a", 1, NULL));
	CHECK_OK(tally_mget(f->t, keys, lens, 1, vals, found));
	CHECK_I64(vals[0], 0);
	CHECK_I64(found[0], 0);
}

/* ------------------------------------------------------------------------
 * Idempotency
 * --------------------------------------------------------------------- */

static void test_idempotent_add_retry_returns_first_result(void **state)
{
	struct fx *f = *state;

	/* Total type: a retried token must not add twice. */
	tally_event ev = ev_of("article", "view", 1, 5);
	ev.delta = 5;
	ev.id = "tok-view";
	ev.id_len = 8;
	CHECK_I64(add_ok(f->t, &ev), 5);
	CHECK_I64(add_ok(f->t, &ev), 5);
	CHECK_I64(count_of(f->t, "article", "view", 1), 5);
	ev.id = NULL;
	ev.id_len = 0;
	CHECK_I64(add_ok(f->t, &ev), 10); /* no token: counts */
	ev.id = "tok-view";
	ev.id_len = 8;
	CHECK_I64(add_ok(f->t, &ev), 5); /* the first result, still */
	CHECK_I64(count_of(f->t, "article", "view", 1), 10);

	/* Unique type: the retry must not put the member back in. */
	tally_event like = ev_of("article", "like", 1, 1);
	like.id = "tok-like";
	like.id_len = 8;
	CHECK_I64(add_ok(f->t, &like), 1);
	tally_event rm = ev_of("article", "like", 1, 1);
	CHECK_I64(remove_ok(f->t, &rm), 0);
	CHECK_I64(add_ok(f->t, &like), 1);
	CHECK_I64(count_of(f->t, "article", "like", 1), 0);
	CHECK_RC(tally_has(f->t, "article", "like", 1, 1, NULL),
	         TALLY_ENOTFOUND);

	/* A remove with a token, retried after the member came back. */
	tally_event add2 = ev_of("article", "like", 1, 2);
	CHECK_I64(add_ok(f->t, &add2), 1);
	tally_event rm2 = add2;
	rm2.id = "tok-rm";
	rm2.id_len = 6;
	CHECK_I64(remove_ok(f->t, &rm2), 0);
	CHECK_I64(add_ok(f->t, &add2), 1);
	CHECK_I64(remove_ok(f->t, &rm2), 0);
	CHECK_OK(tally_has(f->t, "article", "like", 1, 2, NULL));
	CHECK_I64(count_of(f->t, "article", "like", 1), 1);

	/* Tokens are any bytes: a 128-byte binary token with NULs. */
	unsigned char tok[TALLY_ID_MAX];
	for (size_t i = 0; i < sizeof(tok); i++)
		tok[i] = (unsigned char)(i * 3);
	tally_event bin = ev_of("article", "view", 2, 9);
	bin.id = tok;
	bin.id_len = sizeof(tok);
	CHECK_I64(add_ok(f->t, &bin), 1);
	CHECK_I64(add_ok(f->t, &bin), 1);
	bin.id_len = sizeof(tok) - 1; /* a prefix is another token */
	CHECK_I64(add_ok(f->t, &bin), 2);
	CHECK_I64(count_of(f->t, "article", "view", 2), 2);
}

/* Default event times follow commit order even when writers wait for
 * room in a small queue (they wake in any order): the time was taken
 * before the wait, so later seqs got earlier times and count-at-time was
 * off by hundreds. */
#define ORDER_THREADS 6
#define ORDER_ADDS 1500

static atomic_int times_done;

static void deftime_cb(void *arg, int err, int64_t result)
{
	(void)arg, (void)result;
	if (err == TALLY_OK)
		atomic_fetch_add(&times_done, 1);
}

/* Writes not waited for: more than the queue holds, so writers wait for
 * room. */
static void *order_main(void *arg)
{
	tally *t = arg;
	tally_write w;

	memset(&w, 0, sizeof w);
	w.kind = TALLY_W_ADD;
	w.event = ev_of("article", "view", 77, 0);
	for (int i = 0; i < ORDER_ADDS; i++)
		if (tally_write_async(t, &w, deftime_cb, NULL) != TALLY_OK)
			return (void *)1;
	return NULL;
}

typedef struct order_scan {
	int64_t last_at;
	uint64_t last_seq, events, backwards;
} order_scan;

static int order_visit(void *arg, const tally_event_rec *ev)
{
	order_scan *o = arg;

	if (ev->content != 77)
		return 0;
	if (o->events > 0 && (ev->seq <= o->last_seq || ev->at_ms < o->last_at))
		o->backwards++;
	o->last_seq = ev->seq;
	o->last_at = ev->at_ms;
	o->events++;
	return 0;
}

static void test_default_times_follow_commit_order(void **state)
{
	struct fx *f = *state;
	pthread_t tids[ORDER_THREADS];
	order_scan o = { 0 };

	tally_closep(&f->t);
	f->opts.queue_ops_max = 16;
	f->opts.batch_ops_max = 16;
	CHECK_OK(tally_open(f->db, &f->opts, &f->t));
	atomic_store(&times_done, 0);
	for (int i = 0; i < ORDER_THREADS; i++)
		assert_int_equal(pthread_create(&tids[i], NULL, order_main,
		                                f->t), 0);
	for (int i = 0; i < ORDER_THREADS; i++) {
		void *res;

		assert_int_equal(pthread_join(tids[i], &res), 0);
		assert_null(res);
	}
	CHECK_OK(tally_sync(f->t));
	for (int i = 0; i < 6000 &&
	     atomic_load(&times_done) < ORDER_THREADS * ORDER_ADDS; i++)
		usleep(10000);
	CHECK_I64(atomic_load(&times_done), ORDER_THREADS * ORDER_ADDS);
	CHECK_OK(tally_events_scan(f->t, order_visit, &o));
	CHECK_U64(o.events, ORDER_THREADS * ORDER_ADDS);
	CHECK_U64(o.backwards, 0);
}

/* tally_write's token for an event: its id, or the event's own when it
 * has none (the way tally_add() takes it; it was dropped); two that
 * differ are refused. */
static void test_write_takes_the_event_id(void **state)
{
	struct fx *f = *state;
	tally_write w;
	int64_t r = 0;

	memset(&w, 0, sizeof w);
	w.kind = TALLY_W_ADD;
	w.event = ev_of("article", "view", 7, 5);
	w.event.id = "ev-tok";
	w.event.id_len = 6;
	CHECK_OK(tally_write_sync(f->t, &w, &r));
	CHECK_I64(r, 1);
	CHECK_OK(tally_write_sync(f->t, &w, &r));
	CHECK_I64(r, 1);
	w.id = "ev-tok";
	w.id_len = 6;
	CHECK_OK(tally_write_sync(f->t, &w, &r));
	CHECK_I64(r, 1);
	w.id = "other";
	w.id_len = 5;
	CHECK_RC(tally_write_sync(f->t, &w, &r), TALLY_EINVAL);
	CHECK_I64(count_of(f->t, "article", "view", 7), 1);
}

static void test_idempotent_incrby_retry_returns_first_result(void **state)
{
	struct fx *f = *state;
	int64_t r = -1;

	tally_write w = write_incrby("k", 1, 10);
	w.id = "inc-1";
	w.id_len = 5;
	CHECK_OK(tally_write_sync(f->t, &w, &r));
	CHECK_I64(r, 10);
	r = -1;
	CHECK_OK(tally_write_sync(f->t, &w, &r));
	CHECK_I64(r, 10);
	CHECK_I64(get_of(f->t, "k"), 10);

	int64_t v = 0;
	CHECK_OK(tally_incrby(f->t, "k", 1, 1, &v));
	CHECK_I64(v, 11);
	r = -1;
	CHECK_OK(tally_write_sync(f->t, &w, &r));
	CHECK_I64(r, 10);
	CHECK_I64(get_of(f->t, "k"), 11);

	/* Another token applies. */
	w.id = "inc-2";
	CHECK_OK(tally_write_sync(f->t, &w, &r));
	CHECK_I64(r, 21);
	CHECK_I64(get_of(f->t, "k"), 21);
}

static void test_idempotency_token_survives_reopen(void **state)
{
	struct fx *f = *state;
	int64_t r = -1;

	tally_event ev = ev_of("article", "view", 7, 1);
	ev.delta = 3;
	ev.id = "persist-add";
	ev.id_len = 11;
	CHECK_I64(add_ok(f->t, &ev), 3);

	tally_event like = ev_of("article", "like", 7, 4);
	like.id = "persist-like";
	like.id_len = 12;
	CHECK_I64(add_ok(f->t, &like), 1);

	tally_write w = write_incrby("k", 1, 7);
	w.id = "persist-inc";
	w.id_len = 11;
	CHECK_OK(tally_write_sync(f->t, &w, &r));
	CHECK_I64(r, 7);

	/* Take the member out so a replay of the like would show. */
	tally_event rm = ev_of("article", "like", 7, 4);
	CHECK_I64(remove_ok(f->t, &rm), 0);

	fx_reopen(f);

	CHECK_I64(add_ok(f->t, &ev), 3);
	CHECK_I64(count_of(f->t, "article", "view", 7), 3);
	CHECK_I64(add_ok(f->t, &like), 1);
	CHECK_I64(count_of(f->t, "article", "like", 7), 0);
	CHECK_RC(tally_has(f->t, "article", "like", 7, 4, NULL),
	         TALLY_ENOTFOUND);
	r = -1;
	CHECK_OK(tally_write_sync(f->t, &w, &r));
	CHECK_I64(r, 7);
	CHECK_I64(get_of(f->t, "k"), 7);

	/* New tokens still work after the reopen. */
	ev.id = "new-token";
	ev.id_len = 9;
	CHECK_I64(add_ok(f->t, &ev), 6);
	CHECK_I64(add_ok(f->t, &ev), 6);

	/* And twice over. */
	fx_reopen(f);
	ev.id = "persist-add";
	ev.id_len = 11;
	CHECK_I64(add_ok(f->t, &ev), 3);
	CHECK_I64(count_of(f->t, "article", "view", 7), 6);
}

static void count_purged(void *arg, const uint8_t *tok, size_t len)
{
	(void)tok;
	(void)len;
	(*(size_t *)arg)++;
}

/* A token used again after its window (before its purge) is queued again:
 * its old place at the head holds back no other token's expiry. */
static void test_tokens_renewed_after_expiry_hold_back_none(void **state)
{
	tokens k;
	size_t purged = 0;

	(void)state;
	CHECK_OK(tokens_init(&k, 1000, 1000));
	tokens_remember(&k, (const uint8_t *)"a", 1, 1, 1000);
	tokens_remember(&k, (const uint8_t *)"b", 1, 2, 1001);
	tokens_remember(&k, (const uint8_t *)"c", 1, 3, 1002);
	/* "a" expired at 1000 and is used again before the purge. */
	assert_null(tokens_find(&k, (const uint8_t *)"a", 1, 1500));
	tokens_remember(&k, (const uint8_t *)"a", 1, 4, 5000);
	/* b and c expire on time; a's first entry goes without a purge. */
	assert_int_equal(tokens_expire(&k, 2000, 100, count_purged, &purged), 3);
	assert_int_equal(purged, 2);
	assert_null(tokens_find(&k, (const uint8_t *)"b", 1, 2000));
	const tok_val *v = tokens_find(&k, (const uint8_t *)"a", 1, 2000);
	assert_non_null(v);
	CHECK_I64(v->result, 4);
	/* ... and a leaves at its new time. */
	assert_int_equal(tokens_expire(&k, 4999, 100, count_purged, &purged), 0);
	assert_int_equal(tokens_expire(&k, 5000, 100, count_purged, &purged), 1);
	assert_int_equal(purged, 3);
	assert_null(tokens_find(&k, (const uint8_t *)"a", 1, 5000));

	/* At tokens_max, an entry left behind is passed over and a live
	 * token goes. */
	tokens_free(&k);
	CHECK_OK(tokens_init(&k, 1000, 2));
	tokens_remember(&k, (const uint8_t *)"x", 1, 1, 1000);
	tokens_remember(&k, (const uint8_t *)"y", 1, 2, 1001);
	tokens_remember(&k, (const uint8_t *)"x", 1, 3, 3000);
	tokens_remember(&k, (const uint8_t *)"z", 1, 4, 3001);
	assert_null(tokens_find(&k, (const uint8_t *)"y", 1, 1500));
	assert_non_null(tokens_find(&k, (const uint8_t *)"x", 1, 1500));
	assert_non_null(tokens_find(&k, (const uint8_t *)"z", 1, 1500));
	assert_true(tokens_forgotten(&k, 1000));
	tokens_free(&k);
}

/* A token's window runs while the folder is open: the time it spends
 * closed does not end it, so a retry after an outage longer than the
 * window is answered, not applied again. It still ends, after a window
 * of open time. */
static void test_token_window_runs_while_open(void **state)
{
	struct fx *f = *state;
	tally_options o = f->opts;
	tally_write w = write_incrby("k", 1, 1);
	tally_write w2 = write_incrby("k", 1, 10);

	o.token_retention_ms = 2000;
	fx_reopen_with(f, &o);
	w.id = "outage";
	w.id_len = 6;
	CHECK_I64(write_ok(f->t, &w), 1);
	for (int round = 0; round < 2; round++) {
		/* Closed for longer than the window. */
		tally_closep(&f->t);
		usleep(2200 * 1000);
		CHECK_OK(tally_open(f->db, &f->opts, &f->t));
		CHECK_I64(write_ok(f->t, &w), 1);
		CHECK_I64(get_of(f->t, "k"), 10 * round + 1);
		/* A token taken after the reopen is kept beside it. */
		w2.id = round == 0 ? "after-0" : "after-1";
		w2.id_len = 7;
		CHECK_I64(write_ok(f->t, &w2), 10 * round + 11);
	}
	w2.id = "after-0";
	CHECK_I64(write_ok(f->t, &w2), 11);
	CHECK_I64(get_of(f->t, "k"), 21);

	/* Open for longer than the window: the retry applies anew. */
	usleep(2100 * 1000);
	CHECK_I64(write_ok(f->t, &w), 22);
	CHECK_I64(get_of(f->t, "k"), 22);
	/* And after a reopen the expired ones stay expired. */
	fx_reopen(f);
	CHECK_I64(write_ok(f->t, &w2), 32);
	/* The one renewed just now is answered. */
	CHECK_I64(write_ok(f->t, &w), 22);
	CHECK_I64(get_of(f->t, "k"), 32);
}

/* The time a folder was open after its newest token counts too: the
 * committer stores where the tokens' clock is, once a second while
 * tokens are stored, and an open resumes it there. Resumed where the
 * newest token began (as before this was stored), a window would run on
 * for all the time the folder was open after it, and tokens long
 * expired that the store still held would answer again. */
static void test_token_window_counts_time_before_close(void **state)
{
	struct fx *f = *state;
	tally_options o = f->opts;
	tally_write w = write_incrby("k", 1, 1);

	o.token_retention_ms = 3000;
	fx_reopen_with(f, &o);
	w.id = "before-close";
	w.id_len = 12;
	CHECK_I64(write_ok(f->t, &w), 1);
	/* Open and idle 2.6 s, then closed, which stores the clock (as the
	 * committer does each second while a token is stored: test_crash
	 * checks that, with no close). */
	usleep(2600 * 1000);
	fx_reopen(f);
	/* 2 s more: past the window, where a clock resumed at the token's
	 * start would be 1 s short of it. */
	usleep(2000 * 1000);
	CHECK_I64(write_ok(f->t, &w), 2);
	CHECK_I64(get_of(f->t, "k"), 2);
}

/* Past tokens_max the oldest tokens leave memory while still in their
 * window: a retry of one is answered from the store's copy, before and
 * after a reopen (which loads at most tokens_max of them). */
static void test_tokens_past_memory_answered_from_store(void **state)
{
	struct fx *f = *state;
	tally_options o = f->opts;
	char id[32];
	int64_t r;

	o.tokens_max = 16;
	fx_reopen_with(f, &o);
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < 64; i++) {
			tally_write w = write_incrby("k", 1, 1);

			snprintf(id, sizeof id, "tok-%d", i);
			w.id = id;
			w.id_len = strlen(id);
			r = -1;
			CHECK_OK(tally_write_sync(f->t, &w, &r));
			/* the first round applies each; the second is retries */
			CHECK_I64(r, i + 1);
		}
		CHECK_I64(get_of(f->t, "k"), 64);
		if (round > 0)
			continue;
		/* tok-0 left memory 48 tokens ago: a retry in this process */
		tally_write w = write_incrby("k", 1, 1);
		w.id = "tok-0";
		w.id_len = 5;
		r = -1;
		CHECK_OK(tally_write_sync(f->t, &w, &r));
		CHECK_I64(r, 1);
		CHECK_I64(get_of(f->t, "k"), 64);
		fx_reopen(f);
	}
	tally_stats st;
	CHECK_OK(tally_stats_get(f->t, &st));
	CHECK_I64((int64_t)st.token_hits, 64);

	/* Once expired, the tokens memory let go of are deleted from the
	 * store by the sweep (a slice a second, driven by the committer's
	 * loop: a write wakes it). */
	o.tokens_max = 16;
	o.token_retention_ms = 1000;
	fx_reopen_with(f, &o);
	for (int i = 0; i < 64; i++) {
		tally_write w = write_incrby("s", 1, 1);

		snprintf(id, sizeof id, "swp-%d", i);
		w.id = id;
		w.id_len = strlen(id);
		CHECK_OK(tally_write_sync(f->t, &w, &r));
	}
	usleep(1100 * 1000);
	for (int tries = 0; tries < 50; tries++) {
		int64_t v;

		CHECK_OK(tally_incrby(f->t, "wake", 4, 1, &v));
		CHECK_OK(tally_stats_get(f->t, &st));
		if (st.tokens_swept >= 48)
			break;
		usleep(100 * 1000);
	}
	/* the 48 let go; the 16 memory held are purged from it */
	CHECK_I64((int64_t)st.tokens_swept, 48);
	/* None is left on disk: a new handle finds none expired to sweep
	 * (a purge that stored its tokens again left 16). */
	fx_reopen(f);
	for (int tries = 0; tries < 15; tries++) {
		int64_t v;

		CHECK_OK(tally_incrby(f->t, "wake", 4, 1, &v));
		usleep(100 * 1000);
	}
	CHECK_OK(tally_stats_get(f->t, &st));
	CHECK_I64((int64_t)st.tokens_swept, 0);
	/* Expired and deleted: the same token applies anew. */
	{
		tally_write w = write_incrby("s", 1, 1);

		w.id = "swp-0";
		w.id_len = 5;
		CHECK_OK(tally_write_sync(f->t, &w, &r));
		CHECK_I64(r, 65);
	}

	/* Out of range: refused before anything is opened. */
	char other[256];
	tally *bad = NULL;

	snprintf(other, sizeof other, "%s/other", f->dir);
	o.tokens_max = 15;
	CHECK_RC(tally_open(other, &o, &bad), TALLY_EINVAL);
	o.tokens_max = (16u << 20) + 1;
	CHECK_RC(tally_open(other, &o, &bad), TALLY_EINVAL);
	assert_null(bad);
}

/* ------------------------------------------------------------------------
 * Queries
 * --------------------------------------------------------------------- */

static int64_t count_at_of(tally *t, const char *ctype, const char *ktype,
                           uint64_t content, int64_t at_ms)
{
	int64_t c = INT64_MIN;
	CHECK_OK(tally_count_at(t, ctype, ktype, content, at_ms, &c));
	return c;
}

static void test_count_at_time(void **state)
{
	struct fx *f = *state;
	tally_event ev = ev_of("article", "view", 1, 1);
	ev.at_ms = 1000;
	ev.delta = 1;
	CHECK_I64(add_ok(f->t, &ev), 1);
	ev.at_ms = 2000;
	ev.delta = 2;
	CHECK_I64(add_ok(f->t, &ev), 3);
	ev.at_ms = 3000;
	ev.delta = 3;
	CHECK_I64(add_ok(f->t, &ev), 6);

	CHECK_I64(count_at_of(f->t, "article", "view", 1, 1), 0);
	CHECK_I64(count_at_of(f->t, "article", "view", 1, 999), 0);
	CHECK_I64(count_at_of(f->t, "article", "view", 1, 1000), 1);
	CHECK_I64(count_at_of(f->t, "article", "view", 1, 1999), 1);
	CHECK_I64(count_at_of(f->t, "article", "view", 1, 2000), 3);
	CHECK_I64(count_at_of(f->t, "article", "view", 1, 2999), 3);
	CHECK_I64(count_at_of(f->t, "article", "view", 1, 3000), 6);
	CHECK_I64(count_at_of(f->t, "article", "view", 1, TALLY_AT_MS_MAX), 6);

	/* Unique type, a remove included. */
	tally_event l = ev_of("article", "like", 1, 1);
	l.at_ms = 1000;
	CHECK_I64(add_ok(f->t, &l), 1);
	l.member = 2;
	l.at_ms = 2000;
	CHECK_I64(add_ok(f->t, &l), 2);
	l.member = 1;
	l.at_ms = 3000;
	CHECK_I64(remove_ok(f->t, &l), 1);
	CHECK_I64(count_at_of(f->t, "article", "like", 1, 999), 0);
	CHECK_I64(count_at_of(f->t, "article", "like", 1, 1000), 1);
	CHECK_I64(count_at_of(f->t, "article", "like", 1, 2500), 2);
	CHECK_I64(count_at_of(f->t, "article", "like", 1, 3000), 1);
	CHECK_I64(count_at_of(f->t, "article", "like", 1, 4000), 1);

	/* An object with no events, and one stamped "now". */
	CHECK_I64(count_at_of(f->t, "article", "view", 2, TALLY_AT_MS_MAX), 0);
	tally_event now = ev_of("article", "view", 3, 1);
	CHECK_I64(add_ok(f->t, &now), 1);
	CHECK_I64(count_at_of(f->t, "article", "view", 3, 1), 0);
	CHECK_I64(count_at_of(f->t, "article", "view", 3, TALLY_AT_MS_MAX), 1);
	CHECK_I64(count_at_of(f->t, "article", "view", 3, now_ms() + 60000), 1);
}

static void test_recent_newest_first_paged(void **state)
{
	struct fx *f = *state;
	int64_t t0 = now_ms();
	for (uint64_t m = 1; m <= 25; m++) {
		tally_event ev = ev_of("article", "like", 9, m);
		CHECK_I64(add_ok(f->t, &ev), (int64_t)m);
	}
	int64_t t1 = now_ms();

	tally_entry full[TALLY_PAGE_MAX];
	size_t n = 0;
	CHECK_OK(tally_recent(f->t, "article", "like", 9, TALLY_PAGE_MAX, 0,
	                      full, &n));
	CHECK_U64(n, 25);
	for (size_t i = 0; i < n; i++) {
		CHECK_U64(full[i].member, 25 - i); /* newest first */
		CHECK_I64(full[i].delta, 1);
		CHECK_TRUE(full[i].at_ms >= t0 - 1000);
		CHECK_TRUE(full[i].at_ms <= t1 + 1000);
		if (i > 0) {
			CHECK_TRUE(full[i].seq < full[i - 1].seq);
			CHECK_TRUE(full[i].at_ms <= full[i - 1].at_ms);
		}
	}

	/* Pages of 10: 10 + 10 + 5, then nothing; together the full list. */
	tally_entry page[10];
	size_t total = 0, sizes[4] = {10, 10, 5, 0};
	uint64_t before = 0;
	for (int p = 0; p < 4; p++) {
		size_t got = SIZE_MAX;
		CHECK_OK(tally_recent(f->t, "article", "like", 9, 10, before,
		                      page, &got));
		CHECK_U64(got, sizes[p]);
		for (size_t i = 0; i < got; i++) {
			CHECK_U64(page[i].seq, full[total + i].seq);
			CHECK_U64(page[i].member, full[total + i].member);
			CHECK_I64(page[i].at_ms, full[total + i].at_ms);
			CHECK_TRUE(before == 0 || page[i].seq < before);
		}
		total += got;
		if (got > 0)
			before = page[got - 1].seq;
	}
	CHECK_U64(total, 25);

	/* limit 1 walks the same list one by one. */
	before = 0;
	for (size_t i = 0; i < 25; i++) {
		size_t got = 0;
		CHECK_OK(tally_recent(f->t, "article", "like", 9, 1, before,
		                      page, &got));
		CHECK_U64(got, 1);
		CHECK_U64(page[0].seq, full[i].seq);
		before = page[0].seq;
	}

	/* An object with no events lists nothing. */
	size_t none = SIZE_MAX;
	CHECK_OK(tally_recent(f->t, "article", "like", 10, 10, 0, page, &none));
	CHECK_U64(none, 0);
}

static void test_recent_lists_removes_of_unique_type(void **state)
{
	struct fx *f = *state;
	tally_event ev = ev_of("article", "like", 4, 1);
	CHECK_I64(add_ok(f->t, &ev), 1);
	ev.member = 2;
	CHECK_I64(add_ok(f->t, &ev), 2);
	ev.member = 1;
	CHECK_I64(remove_ok(f->t, &ev), 1);

	tally_entry e[10];
	size_t n = 0;
	CHECK_OK(tally_recent(f->t, "article", "like", 4, 10, 0, e, &n));
	CHECK_U64(n, 3);
	CHECK_U64(e[0].member, 1);
	CHECK_I64(e[0].delta, -1);
	CHECK_U64(e[1].member, 2);
	CHECK_I64(e[1].delta, 1);
	CHECK_U64(e[2].member, 1);
	CHECK_I64(e[2].delta, 1);

	/* A total type: adds and removes carry their delta. */
	tally_event v = ev_of("article", "view", 4, 6);
	v.delta = 4;
	CHECK_I64(add_ok(f->t, &v), 4);
	v.delta = 3;
	CHECK_I64(remove_ok(f->t, &v), 1);
	CHECK_OK(tally_recent(f->t, "article", "view", 4, 10, 0, e, &n));
	CHECK_U64(n, 2);
	CHECK_I64(e[0].delta, -3);
	CHECK_I64(e[1].delta, 4);
}

static void test_anonymous_member_counted_not_listed(void **state)
{
	struct fx *f = *state;
	tally_event ev = ev_of("article", "view", 3, 0);
	ev.delta = 1;
	CHECK_I64(add_ok(f->t, &ev), 1);
	ev.member = 5;
	ev.delta = 2;
	CHECK_I64(add_ok(f->t, &ev), 3);
	ev.member = 0;
	ev.delta = 4;
	CHECK_I64(add_ok(f->t, &ev), 7);
	CHECK_I64(count_of(f->t, "article", "view", 3), 7);

	tally_entry e[10];
	size_t n = 0;
	CHECK_OK(tally_recent(f->t, "article", "view", 3, 10, 0, e, &n));
	CHECK_U64(n, 1);
	CHECK_U64(e[0].member, 5);
	CHECK_I64(e[0].delta, 2);
}

static void test_has_returns_at_ms_given(void **state)
{
	struct fx *f = *state;
	tally_event ev = ev_of("article", "like", 2, 9);
	ev.at_ms = 123456789;
	CHECK_I64(add_ok(f->t, &ev), 1);
	int64_t at = 0;
	CHECK_OK(tally_has(f->t, "article", "like", 2, 9, &at));
	CHECK_I64(at, 123456789);

	/* Adding again is a no-op: the time of the first add stays. */
	ev.at_ms = 999999999;
	CHECK_I64(add_ok(f->t, &ev), 1);
	CHECK_OK(tally_has(f->t, "article", "like", 2, 9, &at));
	CHECK_I64(at, 123456789);

	/* Out and in again: the new time. */
	CHECK_I64(remove_ok(f->t, &ev), 0);
	CHECK_RC(tally_has(f->t, "article", "like", 2, 9, &at),
	         TALLY_ENOTFOUND);
	ev.at_ms = 5555;
	CHECK_I64(add_ok(f->t, &ev), 1);
	CHECK_OK(tally_has(f->t, "article", "like", 2, 9, &at));
	CHECK_I64(at, 5555);

	/* The limits of at_ms. */
	ev.member = 10;
	ev.at_ms = TALLY_AT_MS_MAX;
	CHECK_I64(add_ok(f->t, &ev), 2);
	CHECK_OK(tally_has(f->t, "article", "like", 2, 10, &at));
	CHECK_I64(at, TALLY_AT_MS_MAX);
	ev.member = 11;
	ev.at_ms = 1;
	CHECK_I64(add_ok(f->t, &ev), 3);
	CHECK_OK(tally_has(f->t, "article", "like", 2, 11, &at));
	CHECK_I64(at, 1);

	/* 0 means now. */
	int64_t t0 = now_ms();
	ev.member = 12;
	ev.at_ms = 0;
	CHECK_I64(add_ok(f->t, &ev), 4);
	int64_t t1 = now_ms();
	CHECK_OK(tally_has(f->t, "article", "like", 2, 12, &at));
	CHECK_TRUE(at >= t0 - 1000 && at <= t1 + 1000);
	/* at_ms may be NULL. */
	CHECK_OK(tally_has(f->t, "article", "like", 2, 12, NULL));
}

static void test_has_on_total_type_is_emode(void **state)
{
	struct fx *f = *state;
	tally_event ev = ev_of("article", "view", 2, 4);
	CHECK_I64(add_ok(f->t, &ev), 1);
	int64_t at = 0;
	CHECK_RC(tally_has(f->t, "article", "view", 2, 4, &at), TALLY_EMODE);
	CHECK_RC(tally_has(f->t, "article", "view", 2, 5, NULL), TALLY_EMODE);
	CHECK_RC(tally_has(f->t, "article", "share", 99, 4, NULL),
	         TALLY_EMODE);
}

static void test_history_across_objects_and_ctypes_paged(void **state)
{
	struct fx *f = *state;
	tally_event ev = ev_of("article", "like", 1, 77);
	ev.at_ms = 1000;
	CHECK_I64(add_ok(f->t, &ev), 1);
	ev.content = 2;
	ev.at_ms = 2000;
	CHECK_I64(add_ok(f->t, &ev), 1);
	ev.ctype = "video";
	ev.content = UINT64_MAX;
	ev.at_ms = 3000;
	CHECK_I64(add_ok(f->t, &ev), 1);
	tally_event view = ev_of("article", "view", 1, 77);
	view.at_ms = 4000;
	view.delta = 2;
	CHECK_I64(add_ok(f->t, &view), 2);
	tally_event rm = ev_of("article", "like", 2, 77);
	rm.at_ms = 5000;
	CHECK_I64(remove_ok(f->t, &rm), 0);
	/* Another member's events stay out of 77's history. */
	tally_event other = ev_of("article", "like", 1, 78);
	CHECK_I64(add_ok(f->t, &other), 2);

	tally_history_entry h[10];
	size_t n = 0;
	CHECK_OK(tally_history(f->t, 77, "like", 10, 0, h, &n));
	CHECK_U64(n, 4);
	static const struct {
		const char *ctype;
		uint64_t content;
		int64_t at_ms;
		int64_t delta;
	} want[4] = {{"article", 2, 5000, -1},
	             {"video", UINT64_MAX, 3000, 1},
	             {"article", 2, 2000, 1},
	             {"article", 1, 1000, 1}};
	for (size_t i = 0; i < 4; i++) {
		CHECK_STR(h[i].ctype, want[i].ctype);
		CHECK_U64(h[i].content, want[i].content);
		CHECK_I64(h[i].at_ms, want[i].at_ms);
		CHECK_I64(h[i].delta, want[i].delta);
		if (i > 0)
			CHECK_TRUE(h[i].seq < h[i - 1].seq);
	}

	/* Paged by 3: 3 + 1, then nothing. */
	tally_history_entry p[3];
	CHECK_OK(tally_history(f->t, 77, "like", 3, 0, p, &n));
	CHECK_U64(n, 3);
	for (size_t i = 0; i < 3; i++)
		CHECK_U64(p[i].seq, h[i].seq);
	CHECK_OK(tally_history(f->t, 77, "like", 3, p[2].seq, p, &n));
	CHECK_U64(n, 1);
	CHECK_U64(p[0].seq, h[3].seq);
	CHECK_STR(p[0].ctype, "article");
	CHECK_OK(tally_history(f->t, 77, "like", 3, p[0].seq, p, &n));
	CHECK_U64(n, 0);

	/* The other counting type. */
	CHECK_OK(tally_history(f->t, 77, "view", 10, 0, h, &n));
	CHECK_U64(n, 1);
	CHECK_STR(h[0].ctype, "article");
	CHECK_U64(h[0].content, 1);
	CHECK_I64(h[0].at_ms, 4000);
	CHECK_I64(h[0].delta, 2);

	/* A member with no events. */
	CHECK_OK(tally_history(f->t, 79, "like", 10, 0, h, &n));
	CHECK_U64(n, 0);
}

/* MGET over more keys than one RocksDB multi-get takes: values in the
 * tables only (after a reopen), in memory, deleted and never set, in
 * between; found says which exist, and may be NULL. */
#define MGET_KEYS 150
static void test_mget_mixes_memory_and_tables(void **state)
{
	struct fx *f = *state;
	static char names[MGET_KEYS][16];
	const void *keys[MGET_KEYS];
	size_t lens[MGET_KEYS];
	int64_t vals[MGET_KEYS];
	int found[MGET_KEYS];

	for (int i = 0; i < MGET_KEYS; i++) {
		snprintf(names[i], sizeof names[i], "mx:%d", i);
		keys[i] = names[i];
		lens[i] = strlen(names[i]);
		if (i % 5 != 4) /* every fifth never set */
			CHECK_OK(tally_set(f->t, keys[i], lens[i], i * 10));
	}
	fx_reopen(f);
	for (int i = 0; i < MGET_KEYS; i += 3) {
		if (i % 5 == 4)
			continue;
		if (i % 2 == 0)
			CHECK_OK(tally_incrby(f->t, keys[i], lens[i], 1, NULL));
		else
			CHECK_OK(tally_del(f->t, keys[i], lens[i], NULL));
	}
	for (int pass = 0; pass < 2; pass++) {
		memset(vals, 0x55, sizeof vals);
		memset(found, 0x55, sizeof found);
		CHECK_OK(tally_mget(f->t, keys, lens, MGET_KEYS, vals,
		                    pass ? NULL : found));
		for (int i = 0; i < MGET_KEYS; i++) {
			int exists = i % 5 != 4 && !(i % 3 == 0 && i % 2 == 1);
			int64_t want = exists ? i * 10 + (i % 3 == 0) : 0;

			CHECK_I64(vals[i], want);
			if (pass == 0)
				CHECK_I64(found[i], exists);
		}
	}
}

static void test_mcount_many_objects(void **state)
{
	struct fx *f = *state;
	for (uint64_t c = 1; c <= 5; c++) {
		tally_event ev = ev_of("article", "view", c, 1);
		ev.delta = (int64_t)c;
		CHECK_I64(add_ok(f->t, &ev), (int64_t)c);
	}
	uint64_t contents[6] = {1, 2, 3, 99, 5, 1};
	int64_t out[6] = {-1, -1, -1, -1, -1, -1};
	CHECK_OK(tally_mcount(f->t, "article", "view", contents, 6, out));
	CHECK_I64(out[0], 1);
	CHECK_I64(out[1], 2);
	CHECK_I64(out[2], 3);
	CHECK_I64(out[3], 0);
	CHECK_I64(out[4], 5);
	CHECK_I64(out[5], 1);
}

/* MCOUNT over more objects than one RocksDB multi-get takes, some totals
 * in memory and the rest in the tables only (after a reopen), in
 * between: each gets its own. */
#define MIX_OBJS 150
static void test_mcount_mixes_memory_and_tables(void **state)
{
	struct fx *f = *state;
	uint64_t contents[MIX_OBJS + 1];
	int64_t out[MIX_OBJS + 1];

	for (uint64_t c = 1; c <= MIX_OBJS; c++) {
		tally_event ev = ev_of("article", "view", c, 1);
		ev.delta = (int64_t)c * 10;
		CHECK_I64(add_ok(f->t, &ev), (int64_t)c * 10);
		contents[c - 1] = c;
	}
	contents[MIX_OBJS] = 99999; /* never counted */
	fx_reopen(f);
	for (uint64_t c = 3; c <= MIX_OBJS; c += 3) {
		tally_event ev = ev_of("article", "view", c, 1);
		CHECK_I64(add_ok(f->t, &ev), (int64_t)c * 10 + 1);
	}
	CHECK_OK(tally_mcount(f->t, "article", "view", contents, MIX_OBJS + 1,
	                      out));
	for (int i = 0; i < MIX_OBJS; i++)
		CHECK_I64(out[i], (i + 1) * 10 + ((i + 1) % 3 == 0));
	CHECK_I64(out[MIX_OBJS], 0);
}

static void test_counts_returns_every_type(void **state)
{
	struct fx *f = *state;
	CHECK_OK(tally_type_add(f->t, "vote", TALLY_MODE_UNIQUE));
	tally_event ev = ev_of("article", "like", 5, 1);
	CHECK_I64(add_ok(f->t, &ev), 1);
	ev.member = 2;
	CHECK_I64(add_ok(f->t, &ev), 2);
	ev.ktype = "view";
	ev.delta = 5;
	CHECK_I64(add_ok(f->t, &ev), 5);
	ev.ktype = "share";
	ev.delta = 1;
	CHECK_I64(add_ok(f->t, &ev), 1);
	ev.ktype = "vote";
	ev.delta = 0;
	CHECK_I64(add_ok(f->t, &ev), 1);

	tally_type_info types[64];
	size_t ntypes = 0;
	CHECK_OK(tally_types(f->t, types, 64, &ntypes));
	CHECK_U64(ntypes, 14);

	tally_type_count c[64];
	size_t n = 0;
	CHECK_OK(tally_counts(f->t, "article", 5, c, 64, &n));
	CHECK_U64(n, ntypes);
	for (size_t i = 0; i < n; i++) {
		CHECK_STR(c[i].ktype, types[i].name);
		CHECK_I64(c[i].mode, types[i].mode);
		int64_t want = 0;
		if (strcmp(c[i].ktype, "like") == 0)
			want = 2;
		else if (strcmp(c[i].ktype, "view") == 0)
			want = 5;
		else if (strcmp(c[i].ktype, "share") == 0 ||
		         strcmp(c[i].ktype, "vote") == 0)
			want = 1;
		if (c[i].count != want)
			fail_msg("counts: %s = %" PRId64 ", want %" PRId64,
			         c[i].ktype, c[i].count, want);
	}

	/* A small cap: n still tells every type. */
	tally_type_count small[3];
	CHECK_OK(tally_counts(f->t, "article", 5, small, 3, &n));
	CHECK_U64(n, ntypes);
	for (size_t i = 0; i < 3; i++) {
		CHECK_STR(small[i].ktype, c[i].ktype);
		CHECK_I64(small[i].count, c[i].count);
	}

	/* An object with no events, and an unknown content type: all 0. */
	CHECK_OK(tally_counts(f->t, "article", 6, c, 64, &n));
	CHECK_U64(n, ntypes);
	for (size_t i = 0; i < n; i++)
		CHECK_I64(c[i].count, 0);
	CHECK_OK(tally_counts(f->t, "neverseen", 5, c, 64, &n));
	CHECK_U64(n, ntypes);
	for (size_t i = 0; i < n; i++)
		CHECK_I64(c[i].count, 0);
}

/* ------------------------------------------------------------------------
 * Counting types
 * --------------------------------------------------------------------- */

static void test_unknown_type_is_enotype(void **state)
{
	struct fx *f = *state;
	tally_event ev = ev_of("article", "nosuch", 1, 1);
	int64_t c = 0;
	CHECK_RC(tally_add(f->t, &ev, &c), TALLY_ENOTYPE);
	CHECK_RC(tally_remove(f->t, &ev, &c), TALLY_ENOTYPE);
	CHECK_RC(tally_count(f->t, "article", "nosuch", 1, &c), TALLY_ENOTYPE);
	CHECK_RC(tally_count_at(f->t, "article", "nosuch", 1, 1000, &c),
	         TALLY_ENOTYPE);
	uint64_t contents[1] = {1};
	CHECK_RC(tally_mcount(f->t, "article", "nosuch", contents, 1, &c),
	         TALLY_ENOTYPE);
	tally_entry e[4];
	size_t n = 0;
	CHECK_RC(tally_recent(f->t, "article", "nosuch", 1, 4, 0, e, &n),
	         TALLY_ENOTYPE);
	CHECK_RC(tally_has(f->t, "article", "nosuch", 1, 1, NULL),
	         TALLY_ENOTYPE);
	tally_history_entry h[4];
	CHECK_RC(tally_history(f->t, 1, "nosuch", 4, 0, h, &n), TALLY_ENOTYPE);

	/* Type names are case-sensitive ASCII: "Like" is not "like". */
	CHECK_RC(tally_count(f->t, "article", "Like", 1, &c), TALLY_ENOTYPE);

	/* Async: refused at once, the callback never runs. */
	tally_write w;
	memset(&w, 0, sizeof(w));
	w.kind = TALLY_W_ADD;
	w.event = ev;
	struct batch_rec rec;
	memset(&rec, 0, sizeof(rec));
	pthread_mutex_init(&rec.mu, NULL);
	pthread_cond_init(&rec.cv, NULL);
	struct batch_arg a = {&rec, 0};
	CHECK_RC(tally_write_async(f->t, &w, batch_cb, &a), TALLY_ENOTYPE);
	CHECK_RC(tally_write_sync(f->t, &w, NULL), TALLY_ENOTYPE);
	/* A write queued after it completes; the refused one never calls. */
	tally_write ok = write_incrby("x", 1, 1);
	CHECK_OK(tally_write_sync(f->t, &ok, NULL));
	pthread_mutex_lock(&rec.mu);
	int calls = rec.done;
	pthread_mutex_unlock(&rec.mu);
	CHECK_I64(calls, 0);
	pthread_mutex_destroy(&rec.mu);
	pthread_cond_destroy(&rec.cv);
}

static int find_type(const tally_type_info *types, size_t n,
                     const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(types[i].name, name) == 0)
			return (int)i;
	return -1;
}

static void test_type_add_then_use_survives_reopen(void **state)
{
	struct fx *f = *state;
	CHECK_OK(tally_type_add(f->t, "vote", TALLY_MODE_UNIQUE));
	CHECK_OK(tally_type_add(f->t, "score", TALLY_MODE_TOTAL));

	tally_event ev = ev_of("article", "vote", 1, 1);
	CHECK_I64(add_ok(f->t, &ev), 1);
	CHECK_I64(add_ok(f->t, &ev), 1); /* unique */
	tally_event sc = ev_of("article", "score", 1, 1);
	sc.delta = 10;
	CHECK_I64(add_ok(f->t, &sc), 10);
	CHECK_I64(add_ok(f->t, &sc), 20); /* total */
	CHECK_RC(tally_has(f->t, "article", "score", 1, 1, NULL), TALLY_EMODE);

	tally_type_info before[64], after[64];
	size_t nb = 0, na = 0;
	CHECK_OK(tally_types(f->t, before, 64, &nb));
	CHECK_U64(nb, 15);
	for (size_t i = 1; i < nb; i++)
		CHECK_TRUE(before[i].id > before[i - 1].id);
	int iv = find_type(before, nb, "vote");
	int is = find_type(before, nb, "score");
	CHECK_TRUE(iv >= 13 && is >= 13); /* built-in first */
	CHECK_I64(before[iv].mode, TALLY_MODE_UNIQUE);
	CHECK_I64(before[is].mode, TALLY_MODE_TOTAL);

	fx_reopen(f);

	CHECK_OK(tally_types(f->t, after, 64, &na));
	CHECK_U64(na, nb);
	/* Still built-in first, then by id. */
	for (size_t i = 1; i < na; i++)
		if (after[i].id <= after[i - 1].id)
			fail_msg("after reopen, tally_types lists %s (id %u) "
			         "after %s (id %u)", after[i].name,
			         (unsigned)after[i].id, after[i - 1].name,
			         (unsigned)after[i - 1].id);
	for (size_t i = 0; i < na; i++) {
		CHECK_STR(after[i].name, before[i].name);
		CHECK_I64(after[i].mode, before[i].mode);
		CHECK_U64(after[i].id, before[i].id); /* stable ids */
	}
	CHECK_I64(count_of(f->t, "article", "vote", 1), 1);
	CHECK_OK(tally_has(f->t, "article", "vote", 1, 1, NULL));
	CHECK_I64(count_of(f->t, "article", "score", 1), 20);
	CHECK_OK(tally_type_add(f->t, "vote", TALLY_MODE_UNIQUE));
	CHECK_RC(tally_type_add(f->t, "vote", TALLY_MODE_TOTAL),
	         TALLY_ETYPEEXISTS);
	ev.member = 2;
	CHECK_I64(add_ok(f->t, &ev), 2);

	/* A type added after the reopen gets a new id. */
	CHECK_OK(tally_type_add(f->t, "rating", TALLY_MODE_TOTAL));
	CHECK_OK(tally_types(f->t, after, 64, &na));
	CHECK_U64(na, 16);
	int ir = find_type(after, na, "rating");
	CHECK_TRUE(ir >= 13);
	for (size_t i = 0; i < na; i++)
		if ((int)i != ir)
			CHECK_TRUE(after[i].id != after[ir].id);
}

static void test_type_add_same_mode_ok_other_mode_exists(void **state)
{
	struct fx *f = *state;
	size_t n = 0;

	CHECK_OK(tally_type_add(f->t, "like", TALLY_MODE_UNIQUE));
	CHECK_RC(tally_type_add(f->t, "like", TALLY_MODE_TOTAL),
	         TALLY_ETYPEEXISTS);
	CHECK_OK(tally_type_add(f->t, "view", TALLY_MODE_TOTAL));
	CHECK_RC(tally_type_add(f->t, "view", TALLY_MODE_UNIQUE),
	         TALLY_ETYPEEXISTS);
	CHECK_OK(tally_types(f->t, NULL, 0, &n));
	CHECK_U64(n, 13);

	/* Every allowed character, twice. */
	CHECK_OK(tally_type_add(f->t, "Az09_.:-x", TALLY_MODE_TOTAL));
	CHECK_OK(tally_type_add(f->t, "Az09_.:-x", TALLY_MODE_TOTAL));
	CHECK_RC(tally_type_add(f->t, "Az09_.:-x", TALLY_MODE_UNIQUE),
	         TALLY_ETYPEEXISTS);
	CHECK_OK(tally_types(f->t, NULL, 0, &n));
	CHECK_U64(n, 14);

	/* Names of the limit length and over it. */
	char name[TALLY_NAME_MAX + 2];
	memset(name, 'n', sizeof(name));
	name[TALLY_NAME_MAX] = '\0';
	CHECK_OK(tally_type_add(f->t, name, TALLY_MODE_UNIQUE));
	name[TALLY_NAME_MAX] = 'n';
	name[TALLY_NAME_MAX + 1] = '\0';
	CHECK_RC(tally_type_add(f->t, name, TALLY_MODE_UNIQUE),
	         TALLY_EKEYSIZE);
	CHECK_RC(tally_type_add(f->t, "", TALLY_MODE_UNIQUE), TALLY_EKEYSIZE);
	CHECK_RC(tally_type_add(f->t, "a b", TALLY_MODE_UNIQUE), TALLY_EINVAL);
	CHECK_RC(tally_type_add(f->t, "a/b", TALLY_MODE_UNIQUE), TALLY_EINVAL);
	CHECK_RC(tally_type_add(f->t, "caf\xc3\xa9", TALLY_MODE_UNIQUE),
	         TALLY_EINVAL);
	CHECK_RC(tally_type_add(f->t, "ok", 0), TALLY_EINVAL);
	CHECK_RC(tally_type_add(f->t, "ok", 3), TALLY_EINVAL);
	CHECK_RC(tally_type_add(f->t, "ok", -1), TALLY_EINVAL);
	/* None of the refused ones was added. */
	CHECK_OK(tally_types(f->t, NULL, 0, &n));
	CHECK_U64(n, 15);
}

static void test_types_lists_builtins_with_modes(void **state)
{
	struct fx *f = *state;
	static const struct {
		const char *name;
		int mode;
	} builtin[13] = {
	    {"like", TALLY_MODE_UNIQUE},    {"favorite", TALLY_MODE_UNIQUE},
	    {"praise", TALLY_MODE_UNIQUE},  {"down", TALLY_MODE_UNIQUE},
	    {"report", TALLY_MODE_UNIQUE},  {"view", TALLY_MODE_TOTAL},
	    {"read", TALLY_MODE_TOTAL},     {"comment", TALLY_MODE_TOTAL},
	    {"forward", TALLY_MODE_TOTAL},  {"share", TALLY_MODE_TOTAL},
	    {"buy", TALLY_MODE_TOTAL},      {"sale", TALLY_MODE_TOTAL},
	    {"taste", TALLY_MODE_TOTAL},
	};
	tally_type_info types[32];
	size_t n = 0;
	CHECK_OK(tally_types(f->t, types, 32, &n));
	CHECK_U64(n, 13);
	for (size_t i = 0; i < 13; i++) {
		int j = find_type(types, n, builtin[i].name);
		if (j < 0)
			fail_msg("built-in type %s not listed", builtin[i].name);
		CHECK_I64(types[j].mode, builtin[i].mode);
		/* Built-in ids are 1..13. */
		CHECK_TRUE(types[j].id >= 1 && types[j].id <= 13);
	}
	for (size_t i = 1; i < n; i++)
		CHECK_TRUE(types[i].id > types[i - 1].id); /* by id */

	/* cap 0 with out NULL tells the number only; a small cap fills
	 * what fits. */
	size_t m = 0;
	CHECK_OK(tally_types(f->t, NULL, 0, &m));
	CHECK_U64(m, 13);
	tally_type_info small[5];
	CHECK_OK(tally_types(f->t, small, 5, &m));
	CHECK_U64(m, 13);
	for (size_t i = 0; i < 5; i++) {
		CHECK_STR(small[i].name, types[i].name);
		CHECK_U64(small[i].id, types[i].id);
	}
}

/* ------------------------------------------------------------------------
 * Ids and keys
 * --------------------------------------------------------------------- */

static void test_ids_full_u64_range_do_not_collide(void **state)
{
	struct fx *f = *state;
	const uint64_t big = UINT64_C(1) << 32;
	tally_event ev = ev_of("article", "like", 0, 1);
	CHECK_I64(add_ok(f->t, &ev), 1);
	ev.content = UINT64_MAX;
	ev.member = UINT64_MAX;
	CHECK_I64(add_ok(f->t, &ev), 1);
	ev.member = 1;
	CHECK_I64(add_ok(f->t, &ev), 2);
	ev.content = big; /* equal to 0 in the low 32 bits */
	ev.member = big + 1;
	CHECK_I64(add_ok(f->t, &ev), 1);

	CHECK_I64(count_of(f->t, "article", "like", 0), 1);
	CHECK_I64(count_of(f->t, "article", "like", UINT64_MAX), 2);
	CHECK_I64(count_of(f->t, "article", "like", big), 1);
	CHECK_I64(count_of(f->t, "article", "like", 1), 0);
	CHECK_I64(count_of(f->t, "article", "like", UINT64_MAX - 1), 0);
	CHECK_I64(count_of(f->t, "video", "like", 0), 0);

	CHECK_OK(tally_has(f->t, "article", "like", 0, 1, NULL));
	CHECK_RC(tally_has(f->t, "article", "like", 0, UINT64_MAX, NULL),
	         TALLY_ENOTFOUND);
	CHECK_OK(tally_has(f->t, "article", "like", UINT64_MAX, UINT64_MAX,
	                   NULL));
	CHECK_OK(tally_has(f->t, "article", "like", UINT64_MAX, 1, NULL));
	CHECK_OK(tally_has(f->t, "article", "like", big, big + 1, NULL));
	CHECK_RC(tally_has(f->t, "article", "like", big, 1, NULL),
	         TALLY_ENOTFOUND);
	CHECK_RC(tally_has(f->t, "article", "like", 0, big + 1, NULL),
	         TALLY_ENOTFOUND);

	tally_entry e[10];
	size_t n = 0;
	CHECK_OK(tally_recent(f->t, "article", "like", UINT64_MAX, 10, 0, e,
	                      &n));
	CHECK_U64(n, 2);
	CHECK_U64(e[0].member, 1);
	CHECK_U64(e[1].member, UINT64_MAX);
	CHECK_OK(tally_recent(f->t, "article", "like", 0, 10, 0, e, &n));
	CHECK_U64(n, 1);
	CHECK_U64(e[0].member, 1);

	tally_history_entry h[10];
	CHECK_OK(tally_history(f->t, UINT64_MAX, "like", 10, 0, h, &n));
	CHECK_U64(n, 1);
	CHECK_U64(h[0].content, UINT64_MAX);
	CHECK_OK(tally_history(f->t, 1, "like", 10, 0, h, &n));
	CHECK_U64(n, 2);
	CHECK_U64(h[0].content, UINT64_MAX);
	CHECK_U64(h[1].content, 0);
	CHECK_OK(tally_history(f->t, big + 1, "like", 10, 0, h, &n));
	CHECK_U64(n, 1);
	CHECK_U64(h[0].content, big);
}

static void test_keys_512_binary_ok_513_and_0_refused(void **state)
{
	struct fx *f = *state;
	unsigned char key[TALLY_KEY_MAX + 1];
	for (size_t i = 0; i < sizeof(key); i++)
		key[i] = (unsigned char)(i * 7); /* key[0] is 0x00 */
	int64_t v = 0;

	CHECK_OK(tally_incrby(f->t, key, TALLY_KEY_MAX, 5, &v));
	CHECK_I64(v, 5);
	CHECK_OK(tally_get(f->t, key, TALLY_KEY_MAX, &v));
	CHECK_I64(v, 5);
	/* A prefix is another counter. */
	CHECK_RC(tally_get(f->t, key, TALLY_KEY_MAX - 1, &v), TALLY_ENOTFOUND);
	CHECK_OK(tally_incrby(f->t, key, TALLY_KEY_MAX - 1, 3, &v));
	CHECK_I64(v, 3);
	CHECK_OK(tally_get(f->t, key, TALLY_KEY_MAX, &v));
	CHECK_I64(v, 5);

	/* Keys with NUL bytes are keys of their full length. */
	CHECK_OK(tally_set(f->t, "a", 1, 1));
	CHECK_OK(tally_set(f->t, "a\0", 2, 2));
	CHECK_OK(tally_set(f->t, "a\0b", 3, 3));
	CHECK_OK(tally_set(f->t, "a\0c", 3, 4));
	CHECK_OK(tally_set(f->t, "\0", 1, 5));
	CHECK_OK(tally_set(f->t, "\xff", 1, 6));
	CHECK_OK(tally_get(f->t, "a", 1, &v));
	CHECK_I64(v, 1);
	CHECK_OK(tally_get(f->t, "a\0", 2, &v));
	CHECK_I64(v, 2);
	CHECK_OK(tally_get(f->t, "a\0b", 3, &v));
	CHECK_I64(v, 3);
	CHECK_OK(tally_get(f->t, "a\0c", 3, &v));
	CHECK_I64(v, 4);
	CHECK_OK(tally_get(f->t, "\0", 1, &v));
	CHECK_I64(v, 5);
	CHECK_OK(tally_get(f->t, "\xff", 1, &v));
	CHECK_I64(v, 6);

	/* 513 bytes and 0 bytes: refused everywhere. */
	const size_t bad[2] = {TALLY_KEY_MAX + 1, 0};
	for (int i = 0; i < 2; i++) {
		size_t len = bad[i];
		CHECK_RC(tally_incrby(f->t, key, len, 1, &v), TALLY_EKEYSIZE);
		CHECK_RC(tally_counter_add(f->t, key, len, 1), TALLY_EKEYSIZE);
		CHECK_RC(tally_get(f->t, key, len, &v), TALLY_EKEYSIZE);
		CHECK_RC(tally_set(f->t, key, len, 1), TALLY_EKEYSIZE);
		CHECK_RC(tally_del(f->t, key, len, NULL), TALLY_EKEYSIZE);
		const void *keys[2] = {key, key};
		size_t lens[2] = {TALLY_KEY_MAX, len};
		int64_t vals[2];
		CHECK_RC(tally_mget(f->t, keys, lens, 2, vals, NULL),
		         TALLY_EKEYSIZE);
		tally_write w = write_incrby(key, len, 1);
		CHECK_RC(tally_write_sync(f->t, &w, NULL), TALLY_EKEYSIZE);
		w.kind = TALLY_W_SET;
		CHECK_RC(tally_write_sync(f->t, &w, NULL), TALLY_EKEYSIZE);
		w.kind = TALLY_W_DEL;
		CHECK_RC(tally_write_sync(f->t, &w, NULL), TALLY_EKEYSIZE);
	}
	/* The refused writes changed nothing: the 512-byte key (whose
	 * first 512 bytes the 513-byte key shares) is still 5. */
	CHECK_OK(tally_get(f->t, key, TALLY_KEY_MAX, &v));
	CHECK_I64(v, 5);
}

/* ------------------------------------------------------------------------
 * Persistence
 * --------------------------------------------------------------------- */

struct snapshot {
	int64_t counter;
	int64_t like_count, view_count, vote_count;
	int64_t has_at;
	tally_entry recent[16];
	size_t nrecent;
	tally_history_entry history[16];
	size_t nhistory;
	tally_type_info types[32];
	size_t ntypes;
	tally_type_count counts[32];
	size_t ncounts;
};

static void take_snapshot(tally *t, struct snapshot *s)
{
	memset(s, 0, sizeof(*s));
	s->counter = get_of(t, "persist");
	s->like_count = count_of(t, "article", "like", 11);
	s->view_count = count_of(t, "video", "view", 12);
	s->vote_count = count_of(t, "article", "vote", 11);
	CHECK_OK(tally_has(t, "article", "like", 11, 2, &s->has_at));
	CHECK_OK(tally_recent(t, "article", "like", 11, 16, 0, s->recent,
	                      &s->nrecent));
	CHECK_OK(tally_history(t, 2, "like", 16, 0, s->history,
	                       &s->nhistory));
	CHECK_OK(tally_types(t, s->types, 32, &s->ntypes));
	CHECK_OK(tally_counts(t, "article", 11, s->counts, 32, &s->ncounts));
}

static void test_everything_survives_reopen(void **state)
{
	struct fx *f = *state;
	CHECK_OK(tally_set(f->t, "persist", 7, 41));
	CHECK_OK(tally_incrby(f->t, "persist", 7, 1, NULL));
	CHECK_OK(tally_set(f->t, "deleted", 7, 1));
	CHECK_OK(tally_del(f->t, "deleted", 7, NULL));
	CHECK_OK(tally_type_add(f->t, "vote", TALLY_MODE_UNIQUE));
	for (uint64_t m = 1; m <= 4; m++) {
		tally_event ev = ev_of("article", "like", 11, m);
		ev.at_ms = 1000 * (int64_t)m;
		add_ok(f->t, &ev);
	}
	tally_event rm = ev_of("article", "like", 11, 3);
	rm.at_ms = 9000;
	remove_ok(f->t, &rm);
	tally_event v = ev_of("video", "view", 12, 2);
	v.delta = 6;
	add_ok(f->t, &v);
	tally_event vote = ev_of("article", "vote", 11, 8);
	add_ok(f->t, &vote);

	struct snapshot *a = calloc(1, sizeof(*a));
	struct snapshot *b = calloc(1, sizeof(*b));
	assert_non_null(a);
	assert_non_null(b);
	take_snapshot(f->t, a);
	CHECK_I64(a->counter, 42);
	CHECK_I64(a->like_count, 3);
	CHECK_I64(a->view_count, 6);
	CHECK_I64(a->vote_count, 1);
	CHECK_I64(a->has_at, 2000);
	CHECK_U64(a->nrecent, 5);
	CHECK_U64(a->nhistory, 1);

	fx_reopen(f);
	take_snapshot(f->t, b);
	CHECK_I64(b->counter, a->counter);
	CHECK_I64(b->like_count, a->like_count);
	CHECK_I64(b->view_count, a->view_count);
	CHECK_I64(b->vote_count, a->vote_count);
	CHECK_I64(b->has_at, a->has_at);
	CHECK_U64(b->nrecent, a->nrecent);
	for (size_t i = 0; i < a->nrecent; i++) {
		CHECK_U64(b->recent[i].member, a->recent[i].member);
		CHECK_I64(b->recent[i].at_ms, a->recent[i].at_ms);
		CHECK_I64(b->recent[i].delta, a->recent[i].delta);
		CHECK_U64(b->recent[i].seq, a->recent[i].seq);
	}
	CHECK_U64(b->nhistory, a->nhistory);
	for (size_t i = 0; i < a->nhistory; i++) {
		CHECK_STR(b->history[i].ctype, a->history[i].ctype);
		CHECK_U64(b->history[i].content, a->history[i].content);
		CHECK_I64(b->history[i].at_ms, a->history[i].at_ms);
		CHECK_I64(b->history[i].delta, a->history[i].delta);
		CHECK_U64(b->history[i].seq, a->history[i].seq);
	}
	CHECK_U64(b->ntypes, a->ntypes);
	for (size_t i = 0; i < a->ntypes; i++) {
		CHECK_STR(b->types[i].name, a->types[i].name);
		CHECK_I64(b->types[i].mode, a->types[i].mode);
		CHECK_U64(b->types[i].id, a->types[i].id);
	}
	CHECK_U64(b->ncounts, a->ncounts);
	for (size_t i = 0; i < a->ncounts; i++) {
		CHECK_STR(b->counts[i].ktype, a->counts[i].ktype);
		CHECK_I64(b->counts[i].count, a->counts[i].count);
	}
	CHECK_RC(tally_has(f->t, "article", "like", 11, 3, NULL),
	         TALLY_ENOTFOUND);
	int64_t x = 1;
	CHECK_RC(tally_get(f->t, "deleted", 7, &x), TALLY_ENOTFOUND);

	/* Event numbers go on increasing after a reopen. */
	tally_event more = ev_of("article", "like", 11, 5);
	CHECK_I64(add_ok(f->t, &more), 4);
	tally_entry e[1];
	size_t n = 0;
	CHECK_OK(tally_recent(f->t, "article", "like", 11, 1, 0, e, &n));
	CHECK_U64(n, 1);
	CHECK_U64(e[0].member, 5);
	CHECK_TRUE(e[0].seq > a->recent[0].seq);
	tally_stats st;
	CHECK_OK(tally_stats_get(f->t, &st));
	CHECK_TRUE(st.last_seq >= e[0].seq);
	free(a);
	free(b);
}

/* Compaction folds merges and keeps every count; disk usage names each
 * part of the store with its entries; a scan visits every event, each
 * object's oldest first; DBSIZE-style counter count follows creates and
 * deletes. */
static int scan_collect(void *arg, const tally_event_rec *ev)
{
	uint64_t *seen = arg;

	/* Oldest first within an object: seqs grow while content stays. */
	if (seen[1] == ev->content && ev->seq <= seen[2])
		return 1;
	seen[0]++;
	seen[1] = ev->content;
	seen[2] = ev->seq;
	return 0;
}

/* A compaction writes the events held in memory out, and the next
 * checkpoint writes them again with the ones logged since: the second
 * write must land on the same entries, not beside them. 300 likes of one
 * article make chunks of it (128 events each). */
static void test_compact_then_checkpoint_logs_each_event_once(void **state)
{
	struct fx *f = *state;
	uint64_t seen[3] = { 0, UINT64_MAX, 0 };
	tally_entry recs[400];
	size_t n = 0;

	for (uint64_t m = 1; m <= 300; m++) {
		tally_event ev = ev_of("article", "like", 9, m);
		add_ok(f->t, &ev);
	}
	CHECK_OK(tally_compact(f->t));
	for (uint64_t m = 301; m <= 310; m++) {
		tally_event ev = ev_of("article", "like", 9, m);
		add_ok(f->t, &ev);
	}
	fx_reopen(f);
	CHECK_OK(tally_events_scan(f->t, scan_collect, seen));
	CHECK_U64(seen[0], 310);
	CHECK_OK(tally_recent(f->t, "article", "like", 9, 400, 0, recs, &n));
	CHECK_U64(n, 310);
	for (size_t i = 0; i < n; i++)
		CHECK_U64(recs[i].member, 310 - i);
}

/* A scan's events, in the order they were handed on. */
typedef struct scan_list {
	tally_event_rec *ev;
	size_t n, cap;
} scan_list;

static int scan_append(void *arg, const tally_event_rec *ev)
{
	scan_list *l = arg;

	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 256;
		tally_event_rec *p = realloc(l->ev, cap * sizeof *p);

		if (p == NULL)
			return 1;
		l->ev = p;
		l->cap = cap;
	}
	l->ev[l->n++] = *ev;
	return 0;
}

static int same_object(const tally_event_rec *a, const tally_event_rec *b)
{
	return a->content == b->content && strcmp(a->ctype, b->ctype) == 0 &&
	       strcmp(a->ktype, b->ktype) == 0;
}

/* Each object once, as one run of events, oldest first; returns how many
 * objects. */
static size_t check_objects_together(const scan_list *l)
{
	size_t objects = 0;

	for (size_t i = 0; i < l->n; i++) {
		if (i > 0 && same_object(&l->ev[i - 1], &l->ev[i])) {
			CHECK_TRUE(l->ev[i].seq > l->ev[i - 1].seq);
			continue;
		}
		objects++;
		for (size_t j = 0; j < i; j++)
			CHECK_TRUE(!same_object(&l->ev[j], &l->ev[i]));
	}
	return objects;
}

/* The events since the last checkpoint join their objects in a scan, as
 * if they were in the tables: after a compaction (which writes the events
 * in memory out and keeps them there until the next checkpoint) and more
 * events, of objects in the tables and of new ones, on both sides of them
 * in the scan's order, the scan lists every object once, and lists the
 * same events in the same order as after a reopen has checkpointed them
 * all. Stats and export count objects this way. */
static void test_scan_lists_each_object_together(void **state)
{
	struct fx *f = *state;
	scan_list before = { 0 }, after = { 0 };
	size_t objects = 0;

	CHECK_OK(tally_type_add(f->t, "score", TALLY_MODE_TOTAL));
	for (uint64_t m = 1; m <= 120; m++) {
		tally_event ev = ev_of("article", "like", 3 + m % 4, m);
		add_ok(f->t, &ev);
	}
	CHECK_OK(tally_compact(f->t));
	for (uint64_t m = 121; m <= 300; m++) {
		tally_event ev = ev_of(m % 3 ? "article" : "video",
		                       m % 5 ? "like" : "score", m % 10, m);
		add_ok(f->t, &ev);
	}
	CHECK_OK(tally_events_scan(f->t, scan_append, &before));
	CHECK_U64(before.n, 300);
	objects = check_objects_together(&before);
	CHECK_TRUE(objects > 20);
	for (size_t i = 0, run = 0; i < before.n; i++) {
		const tally_event_rec *e = &before.ev[i];

		run = i > 0 && same_object(&before.ev[i - 1], e) ? run + 1 : 1;
		if (i + 1 == before.n || !same_object(&before.ev[i + 1], e))
			CHECK_I64((int64_t)run, count_of(f->t, e->ctype,
			                                 e->ktype, e->content));
	}
	fx_reopen(f);
	CHECK_OK(tally_events_scan(f->t, scan_append, &after));
	CHECK_U64(after.n, before.n);
	for (size_t i = 0; i < after.n; i++) {
		CHECK_TRUE(same_object(&after.ev[i], &before.ev[i]));
		CHECK_U64(after.ev[i].seq, before.ev[i].seq);
		CHECK_U64(after.ev[i].member, before.ev[i].member);
		CHECK_I64(after.ev[i].total, before.ev[i].total);
	}
	free(before.ev);
	free(after.ev);
}

/* ---- read-only handles ---------------------------------------------------- */

/* What a folder holds, as a number: each file's name, size, modification
 * time and bytes, hashed (FNV-1a) and summed, so that the order a
 * directory lists its files in does not matter. */
static uint64_t folder_sig_acc;

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211u;
	return h;
}

static int sig_entry(const char *path, const struct stat *sb, int flag,
                     struct FTW *ftw)
{
	uint64_t h = 14695981039346656037u;
	unsigned char buf[65536];
	ssize_t got;
	int fd;

	(void)ftw;
	h = fnv(h, path, strlen(path));
	if (flag != FTW_F) {
		folder_sig_acc += h;
		return 0;
	}
	h = fnv(h, &sb->st_size, sizeof sb->st_size);
	h = fnv(h, &sb->st_mtim, sizeof sb->st_mtim);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	while ((got = read(fd, buf, sizeof buf)) > 0)
		h = fnv(h, buf, (size_t)got);
	close(fd);
	folder_sig_acc += h;
	return got < 0 ? -1 : 0;
}

static uint64_t folder_sig(const char *dir)
{
	folder_sig_acc = 0;
	assert_int_equal(nftw(dir, sig_entry, 16, FTW_PHYS), 0);
	return folder_sig_acc;
}

/* Whether a process other than this one finds a write lock on dir/LOCK
 * (POSIX locks are per process: the child asks). */
static int lock_held_elsewhere(const char *dir)
{
	char name[PATH_MAX];
	int status = 0;
	pid_t pid;

	snprintf(name, sizeof name, "%s/LOCK", dir);
	pid = fork();
	if (pid == 0) {
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
		int fd = open(name, O_RDWR);

		_exit(fd >= 0 && fcntl(fd, F_GETLK, &fl) == 0 &&
		      fl.l_type == F_WRLCK ? 0 : 1);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return 0;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* A read-only handle reads everything and writes nothing: every write
 * call is refused with TALLY_EREADONLY, and the folder's files (names,
 * sizes, times, bytes) are the same after it is closed, a backup made
 * through it included. Read-only
 * handles share a folder with each other, never with one that writes,
 * in either order; a missing folder is not created. */
static void test_read_only_handle_reads_and_writes_nothing(void **state)
{
	struct fx *f = *state;
	tally_options ro = { .flags = TALLY_OPEN_READ_ONLY };
	tally_options cl = { .flags = TALLY_OPEN_READ_ONLY,
	                     .store = TALLY_STORE_REDIS_CLUSTER,
	                     .cluster_seeds = "127.0.0.1:1" };
	tally *r = NULL, *r2 = NULL, *w = NULL;
	tally_event ev = ev_of("article", "like", 5, 9);
	tally_entry recs[8];
	tally_history_entry hist[8];
	scan_list l = { 0 };
	char missing[PATH_MAX], copy[PATH_MAX], copy2[PATH_MAX];
	char lockname[PATH_MAX + 8], copy3[64] = "";
	char shm[] = "/dev/shm/tally-test-XXXXXX";
	int64_t at = 0, v = 0;
	uint64_t sig;
	size_t n = 0;

	snprintf(copy, sizeof copy, "%s/copy", f->dir);
	snprintf(copy2, sizeof copy2, "%s/copy2", f->dir);
	snprintf(lockname, sizeof lockname, "%s/LOCK", copy);
	add_ok(f->t, &ev);
	ev.member = 10;
	add_ok(f->t, &ev);
	CHECK_OK(tally_incrby(f->t, "c", 1, 7, NULL));
	CHECK_OK(tally_type_add(f->t, "vote", TALLY_MODE_UNIQUE));
	CHECK_RC(tally_open(f->db, &ro, &r), TALLY_EBUSY);
	assert_null(r);
	CHECK_RC(tally_open(f->db, &f->opts, &w), TALLY_EBUSY);
	/* Neither refusal let go of RocksDB's lock, a POSIX lock of this
	 * process that any close of LOCK here would drop: another process
	 * still finds it. */
	CHECK_TRUE(lock_held_elsewhere(f->db));
	CHECK_OK(tally_backup(f->t, copy));
	tally_closep(&f->t);
	sig = folder_sig(f->db);

	CHECK_OK(tally_open(f->db, &ro, &r));
	CHECK_OK(tally_open(f->db, &ro, &r2));
	CHECK_RC(tally_open(f->db, &f->opts, &w), TALLY_EBUSY);
	assert_null(w);
	CHECK_I64(count_of(r, "article", "like", 5), 2);
	CHECK_I64(get_of(r2, "c"), 7);
	CHECK_OK(tally_has(r, "article", "like", 5, 9, &at));
	CHECK_TRUE(at > 0);
	CHECK_OK(tally_recent(r, "article", "like", 5, 8, 0, recs, &n));
	CHECK_U64(n, 2);
	CHECK_OK(tally_history(r, 10, "like", 8, 0, hist, &n));
	CHECK_U64(n, 1);
	CHECK_OK(tally_events_scan(r, scan_append, &l));
	CHECK_U64(l.n, 2);
	free(l.ev);

	ev.member = 11;
	CHECK_RC(tally_add(r, &ev, NULL), TALLY_EREADONLY);
	CHECK_RC(tally_remove(r, &ev, NULL), TALLY_EREADONLY);
	CHECK_RC(tally_incrby(r, "c", 1, 1, &v), TALLY_EREADONLY);
	CHECK_RC(tally_set(r, "c", 1, 1), TALLY_EREADONLY);
	CHECK_RC(tally_del(r, "c", 1, NULL), TALLY_EREADONLY);
	CHECK_RC(tally_counter_add(r, "c", 1, 1), TALLY_EREADONLY);
	CHECK_RC(tally_type_add(r, "score", TALLY_MODE_TOTAL), TALLY_EREADONLY);
	CHECK_OK(tally_type_add(r, "vote", TALLY_MODE_UNIQUE)); /* there */
	CHECK_RC(tally_type_add(r, "vote", TALLY_MODE_TOTAL),
	         TALLY_ETYPEEXISTS);
	CHECK_RC(tally_compact(r), TALLY_EREADONLY);
	CHECK_OK(tally_sync(r));
	CHECK_I64(count_of(r, "article", "like", 5), 2);
	CHECK_I64(get_of(r, "c"), 7);
	/* A backup copies the files (links the tables on one file system;
	 * /dev/shm is another where it is there): each copy opens to write,
	 * whole. */
	CHECK_OK(tally_backup(r, copy2));
	CHECK_RC(tally_backup(r, copy2), TALLY_EIO);
	if (mkdtemp(shm) != NULL) {
		snprintf(copy3, sizeof copy3, "%s/b", shm);
		CHECK_OK(tally_backup(r, copy3));
	}
	tally_closep(&r);
	tally_closep(&r2);
	CHECK_U64(folder_sig(f->db), sig);
	for (int i = 0; i < 2; i++) {
		if (i == 1 && copy3[0] == '\0')
			break;
		CHECK_OK(tally_open(i ? copy3 : copy2, &f->opts, &w));
		CHECK_I64(count_of(w, "article", "like", 5), 2);
		CHECK_I64(get_of(w, "c"), 7);
		ev.member = 12;
		CHECK_I64(add_ok(w, &ev), 3);
		tally_closep(&w);
	}
	if (copy3[0] != '\0')
		rm_tree(shm);

	/* Async durability: its cells and flushes write nothing either. */
	ro.durability = TALLY_DURABILITY_ASYNC;
	CHECK_OK(tally_open(f->db, &ro, &r));
	CHECK_RC(tally_counter_add(r, "c", 1, 1), TALLY_EREADONLY);
	CHECK_OK(tally_sync(r));
	tally_closep(&r);
	CHECK_U64(folder_sig(f->db), sig);

	/* A backup has no LOCK file: the folder's own lock still keeps
	 * a writer out while it is read, and a reader out while written. */
	CHECK_RC(access(lockname, F_OK), -1);
	CHECK_OK(tally_open(copy, &ro, &r));
	CHECK_RC(tally_open(copy, &f->opts, &w), TALLY_EBUSY);
	CHECK_I64(count_of(r, "article", "like", 5), 2);
	tally_closep(&r);
	CHECK_OK(tally_open(copy, &f->opts, &w));
	CHECK_RC(tally_open(copy, &ro, &r), TALLY_EBUSY);
	tally_closep(&w);

	snprintf(missing, sizeof missing, "%s/none", f->dir);
	CHECK_RC(tally_open(missing, &ro, &r), TALLY_ENOTFOUND);
	CHECK_RC(access(missing, F_OK), -1);
	CHECK_RC(tally_open(f->db, &cl, &r), TALLY_ENOTSUP);
	CHECK_RC(tally_open(f->db, &(tally_options){ .flags = 1u << 3 }, &r),
	         TALLY_EINVAL);
	CHECK_OK(tally_open(f->db, &f->opts, &f->t));
}

static void test_compact_usage_scan_and_counters(void **state)
{
	struct fx *f = *state;
	tally_disk_part parts[16];
	uint64_t seen[3] = { 0, UINT64_MAX, 0 };
	tally_stats st;
	size_t n = 0;

	for (uint64_t m = 1; m <= 200; m++) {
		tally_event ev = ev_of("article", "like", m % 7, m);
		add_ok(f->t, &ev);
	}
	CHECK_OK(tally_incrby(f->t, "a", 1, 5, NULL));
	CHECK_OK(tally_set(f->t, "b", 1, 5));
	CHECK_OK(tally_stats_get(f->t, &st));
	CHECK_U64(st.counters, 2);
	CHECK_OK(tally_del(f->t, "a", 1, NULL));
	CHECK_OK(tally_compact(f->t));
	CHECK_OK(tally_disk_usage(f->t, parts, 16, &n));
	assert_true(n >= 5);
	int found_log = 0;
	for (size_t i = 0; i < n; i++)
		if (strcmp(parts[i].name, "log") == 0) {
			/* One checkpoint held them all: a chunk per object
			 * (28 or 29 events each). */
			found_log = 1;
			CHECK_U64(parts[i].entries, 7);
			assert_true(parts[i].bytes > 0);
		}
	assert_true(found_log);
	int64_t total = 0;
	for (uint64_t c = 0; c < 7; c++)
		total += count_of(f->t, "article", "like", c);
	CHECK_I64(total, 200);
	CHECK_OK(tally_events_scan(f->t, scan_collect, seen));
	CHECK_U64(seen[0], 200);
	fx_reopen(f);
	CHECK_OK(tally_stats_get(f->t, &st));
	CHECK_U64(st.counters, 1);
	CHECK_I64(get_of(f->t, "b"), 5);
	CHECK_RC(tally_compact(NULL), TALLY_EINVAL);
	CHECK_RC(tally_disk_usage(f->t, NULL, 1, &n), TALLY_EINVAL);
	CHECK_RC(tally_events_scan(f->t, NULL, NULL), TALLY_EINVAL);
}

static void test_backup_copy_opens_with_data(void **state)
{
	struct fx *f = *state;
	CHECK_OK(tally_set(f->t, "k", 1, 5));
	tally_event ev = ev_of("article", "like", 1, 1);
	add_ok(f->t, &ev);
	CHECK_OK(tally_type_add(f->t, "vote", TALLY_MODE_TOTAL));

	char bk[256], bk2[256];
	snprintf(bk, sizeof(bk), "%s/backup", f->dir);
	snprintf(bk2, sizeof(bk2), "%s/backup2", f->dir);
	CHECK_OK(tally_backup(f->t, bk));

	/* Writes after the backup are not in it. */
	CHECK_OK(tally_set(f->t, "k", 1, 6));
	ev.member = 2;
	add_ok(f->t, &ev);
	/* The folder exists now: refused. */
	CHECK_RC(tally_backup(f->t, bk), TALLY_EIO);

	tally *copy = NULL;
	CHECK_OK(tally_open(bk, NULL, &copy));
	int64_t v = 0;
	CHECK_OK(tally_get(copy, "k", 1, &v));
	CHECK_I64(v, 5);
	CHECK_I64(count_of(copy, "article", "like", 1), 1);
	CHECK_OK(tally_has(copy, "article", "like", 1, 1, NULL));
	CHECK_RC(tally_has(copy, "article", "like", 1, 2, NULL),
	         TALLY_ENOTFOUND);
	size_t n = 0;
	CHECK_OK(tally_types(copy, NULL, 0, &n));
	CHECK_U64(n, 14);
	/* The copy is a database of its own. */
	CHECK_OK(tally_set(copy, "k", 1, 100));
	tally_closep(&copy);

	CHECK_I64(get_of(f->t, "k"), 6);
	CHECK_OK(tally_backup(f->t, bk2));
	CHECK_OK(tally_open(bk2, NULL, &copy));
	CHECK_OK(tally_get(copy, "k", 1, &v));
	CHECK_I64(v, 6);
	CHECK_I64(count_of(copy, "article", "like", 1), 2);
	tally_closep(&copy);
}

static void test_stats_count_writes(void **state)
{
	struct fx *f = *state;
	tally_stats a, b;
	CHECK_OK(tally_stats_get(f->t, &a));
	for (int i = 0; i < 3; i++)
		CHECK_OK(tally_incrby(f->t, "s", 1, 1, NULL));
	tally_event ev = ev_of("article", "like", 1, 1);
	add_ok(f->t, &ev);
	int64_t v = 0;
	CHECK_RC(tally_incrby(f->t, "s", 1, INT64_MAX, &v), TALLY_EOVERFLOW);
	CHECK_OK(tally_sync(f->t));
	CHECK_OK(tally_stats_get(f->t, &b));
	CHECK_TRUE(b.writes >= a.writes + 4);
	CHECK_TRUE(b.last_seq > a.last_seq);
	CHECK_TRUE(b.syncs >= 1);
}

/* ------------------------------------------------------------------------
 * Concurrency
 * --------------------------------------------------------------------- */

#define NTHREADS 8
#define NOPS 100000

struct inc_slot;

struct inc_thread {
	tally *t;
	int use_async; /* tally_write_async (2: and tally_commit every 64),
	                  else blocking tally_incrby */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	long queued;   /* writes queued (async) */
	long done;     /* callbacks run (async), guarded by mu */
	int queue_err; /* first error of a call, TALLY_OK if none */
	int cb_err;    /* first error seen by a callback */
	int timed_out;
	struct inc_slot *slots;
};

struct inc_slot {
	struct inc_thread *th;
	int64_t result;
};

static void inc_cb(void *arg, int err, int64_t result)
{
	struct inc_slot *s = arg;
	struct inc_thread *th = s->th;
	s->result = result;
	pthread_mutex_lock(&th->mu);
	if (err != TALLY_OK && th->cb_err == TALLY_OK)
		th->cb_err = err;
	th->done++;
	if (th->done == th->queued)
		pthread_cond_broadcast(&th->cv);
	pthread_mutex_unlock(&th->mu);
}

static void *inc_main(void *arg)
{
	struct inc_thread *th = arg;
	static const char key[] = "hot";
	if (!th->use_async) {
		for (long i = 0; i < NOPS; i++) {
			int rc = tally_incrby(th->t, key, 3, 1,
			                      &th->slots[i].result);
			if (rc != TALLY_OK) {
				th->queue_err = rc;
				break;
			}
		}
		return NULL;
	}
	tally_write w = write_incrby(key, 3, 1);
	long i = 0;
	for (; i < NOPS; i++) {
		pthread_mutex_lock(&th->mu);
		th->queued = i + 1;
		pthread_mutex_unlock(&th->mu);
		int rc = tally_write_async(th->t, &w, inc_cb, &th->slots[i]);
		if (rc == TALLY_OK && th->use_async == 2 && i % 64 == 63)
			rc = tally_commit(th->t);
		if (rc != TALLY_OK) {
			th->queue_err = rc;
			break;
		}
	}
	if (th->use_async == 2) {
		int rc = tally_commit(th->t);

		if (rc != TALLY_OK && th->queue_err == TALLY_OK)
			th->queue_err = rc;
	}
	pthread_mutex_lock(&th->mu);
	th->queued = i;
	pthread_mutex_unlock(&th->mu);
	if (!wait_done(&th->mu, &th->cv, &th->done, i, 300))
		th->timed_out = 1;
	return NULL;
}

/* Runs NTHREADS x NOPS increments by 1 of "hot" and checks: every call
 * succeeded, each thread saw its own results strictly increase (its writes
 * apply in order), and all results together are exactly 1..total. */
static void run_incr_threads(tally *t, int use_async)
{
	struct inc_thread *ths = calloc(NTHREADS, sizeof(*ths));
	pthread_t tids[NTHREADS];
	assert_non_null(ths);
	for (int i = 0; i < NTHREADS; i++) {
		ths[i].t = t;
		ths[i].use_async = use_async;
		pthread_mutex_init(&ths[i].mu, NULL);
		pthread_cond_init(&ths[i].cv, NULL);
		ths[i].slots = calloc(NOPS, sizeof(struct inc_slot));
		assert_non_null(ths[i].slots);
		for (long j = 0; j < NOPS; j++) {
			ths[i].slots[j].th = &ths[i];
			ths[i].slots[j].result = -1;
		}
	}
	for (int i = 0; i < NTHREADS; i++)
		assert_int_equal(pthread_create(&tids[i], NULL, inc_main,
		                                &ths[i]), 0);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(tids[i], NULL);

	const int64_t total = (int64_t)NTHREADS * NOPS;
	unsigned char *seen = calloc((size_t)total + 1, 1);
	assert_non_null(seen);
	for (int i = 0; i < NTHREADS; i++) {
		struct inc_thread *th = &ths[i];
		if (th->timed_out)
			fail_msg("thread %d: %ld of %ld callbacks after 300 s",
			         i, th->done, th->queued);
		CHECK_RC(th->queue_err, TALLY_OK);
		CHECK_RC(th->cb_err, TALLY_OK);
		int64_t prev = 0;
		for (long j = 0; j < NOPS; j++) {
			int64_t r = th->slots[j].result;
			if (r <= prev || r > total)
				fail_msg("thread %d write %ld: result %" PRId64
				         " after %" PRId64, i, j, r, prev);
			if (seen[r])
				fail_msg("result %" PRId64 " seen twice", r);
			seen[r] = 1;
			prev = r;
		}
	}
	/* NTHREADS * NOPS distinct values in 1..total: all of them. */
	CHECK_I64(get_of(t, "hot"), total);
	free(seen);
	for (int i = 0; i < NTHREADS; i++) {
		pthread_mutex_destroy(&ths[i].mu);
		pthread_cond_destroy(&ths[i].cv);
		free(ths[i].slots);
	}
	free(ths);
}

static void test_threads_incrby_async_writes_sync_durability_exact(
    void **state)
{
	struct fx *f = *state;
	run_incr_threads(f->t, 1);
	fx_reopen(f);
	CHECK_I64(get_of(f->t, "hot"), (int64_t)NTHREADS * NOPS);
}

/* Callers committing their own writes, 8 threads at once: each one's
 * commits take the others' writes too, and every write counts once. */
static void test_threads_incrby_caller_commits_exact(void **state)
{
	struct fx *f = *state;
	tally_options o = { .flags = TALLY_OPEN_CALLER_COMMITS };

	fx_reopen_with(f, &o);
	run_incr_threads(f->t, 2);
	fx_reopen(f);
	CHECK_I64(get_of(f->t, "hot"), (int64_t)NTHREADS * NOPS);
}

struct on_thread {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t caller;
	long done, here; /* callbacks run; of them on the caller's thread */
	int errs;
};

static void on_thread_cb(void *arg, int err, int64_t result)
{
	struct on_thread *o = arg;

	(void)result;
	pthread_mutex_lock(&o->mu);
	o->done++;
	o->here += pthread_equal(pthread_self(), o->caller) != 0;
	o->errs += err != TALLY_OK;
	pthread_cond_broadcast(&o->cv);
	pthread_mutex_unlock(&o->mu);
}

static long on_thread_get(struct on_thread *o, const long *field)
{
	long n;

	pthread_mutex_lock(&o->mu);
	n = *field;
	pthread_mutex_unlock(&o->mu);
	return n;
}

static void test_caller_commits_on_the_calling_thread(void **state)
{
	struct fx *f = *state;
	tally_options o = { .flags = TALLY_OPEN_CALLER_COMMITS };
	tally_write w = write_incrby("c", 1, 1);
	struct on_thread *ot = calloc(1, sizeof *ot);
	int rounds_here = 0;
	int64_t v;

	assert_non_null(ot);
	pthread_mutex_init(&ot->mu, NULL);
	pthread_cond_init(&ot->cv, NULL);
	ot->caller = pthread_self();
	fx_reopen_with(f, &o);
	CHECK_RC(tally_commit(NULL), TALLY_EINVAL);
	CHECK_OK(tally_commit(f->t)); /* nothing queued */
	/* Every write queued before tally_commit() is acknowledged when it
	 * returns, its callback run here, not on the committer thread, which
	 * is not woken for them: in the 2 ms (or, on a loaded machine, more)
	 * before the commit, only its poll (every 100 ms) may take a round's
	 * writes. 16 rounds of 100 must run here, in at most 200. */
	int rounds = 0;

	for (; rounds < 200 && rounds_here < 16; rounds++) {
		long before = on_thread_get(ot, &ot->done);
		long here = on_thread_get(ot, &ot->here);

		for (int i = 0; i < 100; i++)
			CHECK_OK(tally_write_async(f->t, &w, on_thread_cb, ot));
		nanosleep(&(struct timespec){ 0, 2000000 }, NULL);
		CHECK_OK(tally_commit(f->t));
		CHECK_I64(on_thread_get(ot, &ot->done), before + 100);
		rounds_here += on_thread_get(ot, &ot->here) - here == 100;
	}
	if (rounds_here < 16)
		fail_msg("callbacks on the calling thread in %d of %d rounds",
		         rounds_here, rounds);
	const long n = (long)rounds * 100; /* writes so far */

	CHECK_I64(get_of(f->t, "c"), n);
	/* A write nobody commits is taken by the committer thread's poll. */
	long here = on_thread_get(ot, &ot->here);

	CHECK_OK(tally_write_async(f->t, &w, on_thread_cb, ot));
	pthread_mutex_lock(&ot->mu);
	for (int i = 0; i < 50 && ot->done < n + 1; i++) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&ot->cv, &ot->mu, &ts);
	}
	pthread_mutex_unlock(&ot->mu);
	CHECK_I64(on_thread_get(ot, &ot->done), n + 1);
	CHECK_I64(on_thread_get(ot, &ot->here), here);
	/* Blocking writes wake the committer thread, with a write queued
	 * ahead of them or not. */
	CHECK_OK(tally_write_async(f->t, &w, on_thread_cb, ot));
	CHECK_OK(tally_incrby(f->t, "c", 1, 1, &v));
	CHECK_I64(v, n + 3);
	CHECK_I64(on_thread_get(ot, &ot->done), n + 2);
	CHECK_OK(tally_incrby(f->t, "c", 1, 1, &v));
	CHECK_I64(v, n + 4);
	/* A full queue hands its writes to the committer thread instead of
	 * waiting for a commit that this very thread would have to make. */
	o.queue_ops_max = 16;
	fx_reopen_with(f, &o);
	pthread_mutex_lock(&ot->mu);
	ot->done = ot->errs = 0;
	pthread_mutex_unlock(&ot->mu);
	for (int i = 0; i < 500; i++)
		CHECK_OK(tally_write_async(f->t, &w, on_thread_cb, ot));
	CHECK_OK(tally_commit(f->t));
	CHECK_I64(on_thread_get(ot, &ot->done), 500);
	pthread_mutex_lock(&ot->mu);
	CHECK_I64(ot->errs, 0);
	pthread_mutex_unlock(&ot->mu);
	CHECK_I64(get_of(f->t, "c"), n + 504);
	/* Async durability: acknowledged at the apply, kept by tally_sync. */
	o.queue_ops_max = 0;
	o.durability = TALLY_DURABILITY_ASYNC;
	fx_reopen_with(f, &o);
	for (int i = 0; i < 100; i++)
		CHECK_OK(tally_write_async(f->t, &w, on_thread_cb, ot));
	CHECK_OK(tally_commit(f->t));
	CHECK_I64(on_thread_get(ot, &ot->done), 600);
	CHECK_OK(tally_sync(f->t));
	fx_reopen(f);
	CHECK_I64(get_of(f->t, "c"), n + 604);
	pthread_cond_destroy(&ot->cv);
	pthread_mutex_destroy(&ot->mu);
	free(ot);
}

static void test_threads_incrby_blocking_async_durability_exact(
    void **state)
{
	struct fx *f = *state;
	tally_options o;
	memset(&o, 0, sizeof(o));
	o.durability = TALLY_DURABILITY_ASYNC;
	fx_reopen_with(f, &o);
	run_incr_threads(f->t, 0);
	CHECK_OK(tally_sync(f->t));
	fx_reopen(f);
	CHECK_I64(get_of(f->t, "hot"), (int64_t)NTHREADS * NOPS);
}

struct add_thread {
	tally *t;
	int err;
};

static void *counter_add_main(void *arg)
{
	struct add_thread *th = arg;
	for (long i = 0; i < NOPS; i++) {
		int rc = tally_counter_add(th->t, "hot", 3, 1);
		if (rc == TALLY_OK)
			rc = tally_counter_add(th->t, "mix", 3,
			                       i % 2 == 0 ? 3 : -1);
		if (rc != TALLY_OK) {
			th->err = rc;
			break;
		}
	}
	return NULL;
}

static void test_threads_counter_add_exact(void **state)
{
	struct fx *f = *state;
	tally_options o;
	memset(&o, 0, sizeof(o));
	o.durability = TALLY_DURABILITY_ASYNC;
	fx_reopen_with(f, &o);

	struct add_thread ths[NTHREADS];
	pthread_t tids[NTHREADS];
	for (int i = 0; i < NTHREADS; i++) {
		ths[i].t = f->t;
		ths[i].err = TALLY_OK;
		assert_int_equal(pthread_create(&tids[i], NULL,
		                                counter_add_main, &ths[i]), 0);
	}
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(tids[i], NULL);
	for (int i = 0; i < NTHREADS; i++)
		CHECK_RC(ths[i].err, TALLY_OK);

	/* Reads see every acknowledged add at once. */
	CHECK_I64(get_of(f->t, "hot"), (int64_t)NTHREADS * NOPS);
	CHECK_I64(get_of(f->t, "mix"), (int64_t)NTHREADS * NOPS);
	const void *keys[2] = {"hot", "mix"};
	size_t lens[2] = {3, 3};
	int64_t vals[2] = {0, 0};
	int found2[2] = { 0, 0 };
	CHECK_OK(tally_mget(f->t, keys, lens, 2, vals, found2));
	CHECK_I64(vals[0], (int64_t)NTHREADS * NOPS);
	CHECK_I64(vals[1], (int64_t)NTHREADS * NOPS);
	CHECK_I64(found2[0], 1);
	CHECK_I64(found2[1], 1);
	/* An exact write on top of the striped adds. */
	int64_t v = 0;
	CHECK_OK(tally_incrby(f->t, "hot", 3, 1, &v));
	CHECK_I64(v, (int64_t)NTHREADS * NOPS + 1);

	/* Closing folds the cells into the store. */
	fx_reopen(f);
	CHECK_I64(get_of(f->t, "hot"), (int64_t)NTHREADS * NOPS + 1);
	CHECK_I64(get_of(f->t, "mix"), (int64_t)NTHREADS * NOPS);

	/* |delta| <= 2^32 only. */
	CHECK_OK(tally_counter_add(f->t, "big", 3, INT64_C(1) << 32));
	CHECK_OK(tally_counter_add(f->t, "big", 3, -(INT64_C(1) << 32)));
	CHECK_RC(tally_counter_add(f->t, "big", 3, (INT64_C(1) << 32) + 1),
	         TALLY_EINVAL);
	CHECK_RC(tally_counter_add(f->t, "big", 3, INT64_MIN), TALLY_EINVAL);
	CHECK_I64(get_of(f->t, "big"), 0);
}

/* Per-thread order holds for tally_counter_add(): an add made after a
 * SET or DEL of the same counter queued by this thread lands after it,
 * even when the counter has a striped cell that takes fast adds. */
static void order_cb(void *arg, int err, int64_t result)
{
	(void)result;
	if (err == TALLY_OK)
		atomic_fetch_add((_Atomic long *)arg, 1);
}

static void check_add_after_queued_write(tally *t, int caller_commits)
{
	_Atomic long done = 0;
	long queued = 0;

	for (int i = 0; i < 300; i++) {
		tally_write w;
		int64_t want;

		/* Keep the cell warm: these adds land in it once it is safe. */
		for (int j = 0; j < 20; j++)
			CHECK_OK(tally_counter_add(t, "ord", 3, 1));
		if (i % 10 == 0)
			CHECK_OK(tally_sync(t));
		memset(&w, 0, sizeof(w));
		w.key = "ord";
		w.key_len = 3;
		if (i % 3 == 2) {
			w.kind = TALLY_W_DEL;
			want = 1;
		} else {
			w.kind = TALLY_W_SET;
			w.value = 1000 * (int64_t)i;
			want = w.value + 1;
		}
		CHECK_OK(tally_write_async(t, &w, order_cb, (void *)&done));
		queued++;
		CHECK_OK(tally_counter_add(t, "ord", 3, 1));
		if (caller_commits)
			CHECK_OK(tally_commit(t));
		CHECK_OK(tally_sync(t));
		CHECK_I64(atomic_load(&done), queued);
		CHECK_I64(get_of(t, "ord"), want);
	}
	/* The cell took adds, or this checked nothing. */
	tally_stats st;
	CHECK_OK(tally_stats_get(t, &st));
	assert_true(st.striped_adds > 1000);
}

static void test_counter_add_after_queued_write_in_order(void **state)
{
	struct fx *f = *state;
	tally_options o;
	memset(&o, 0, sizeof(o));
	o.durability = TALLY_DURABILITY_ASYNC;
	fx_reopen_with(f, &o);
	check_add_after_queued_write(f->t, 0);
	/* A caller that commits holds its queued writes until it commits:
	 * an add out of turn would be folded ahead of every one of them. */
	o.flags = TALLY_OPEN_CALLER_COMMITS;
	fx_reopen_with(f, &o);
	check_add_after_queued_write(f->t, 1);

	/* More counters queued at once than a stripe has cells: every add
	 * still lands after its counter's write. */
	_Atomic long done = 0;
	char key[16];
	for (int i = 0; i < 700; i++) {
		tally_write w;
		memset(&w, 0, sizeof(w));
		snprintf(key, sizeof(key), "many%d", i);
		w.kind = TALLY_W_SET;
		w.key = key;
		w.key_len = strlen(key);
		w.value = i;
		CHECK_OK(tally_write_async(f->t, &w, order_cb, (void *)&done));
	}
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 700; i++) {
			snprintf(key, sizeof(key), "many%d", i);
			CHECK_OK(tally_counter_add(f->t, key, strlen(key), 1));
		}
		CHECK_OK(tally_commit(f->t));
		CHECK_OK(tally_sync(f->t));
	}
	CHECK_I64(atomic_load(&done), 700);
	for (int i = 0; i < 700; i++) {
		snprintf(key, sizeof(key), "many%d", i);
		CHECK_I64(get_of(f->t, key), i + 3);
	}
}

/* Holds cost adds little: a thread that queues writes of many other
 * counters while it adds to a hot one still lands most adds in cells. */
static void test_counter_add_beside_many_queued_writes(void **state)
{
	struct fx *f = *state;
	tally_options o;
	memset(&o, 0, sizeof(o));
	o.durability = TALLY_DURABILITY_ASYNC;
	fx_reopen_with(f, &o);

	_Atomic long done = 0;
	char key[16];
	const int rounds = 50000;
	for (int i = 0; i < rounds; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		tally_write w = write_incrby(key, strlen(key), 1);
		CHECK_OK(tally_write_async(f->t, &w, order_cb, (void *)&done));
		CHECK_OK(tally_counter_add(f->t, "hot", 3, 1));
	}
	for (int ms = 0; ms < 60000 && atomic_load(&done) < rounds; ms++)
		usleep(1000);
	CHECK_I64(atomic_load(&done), rounds);
	CHECK_I64(get_of(f->t, "hot"), rounds);
	CHECK_I64(get_of(f->t, "k0"), 1);
	CHECK_I64(get_of(f->t, "k49999"), 1);
	tally_stats st;
	CHECK_OK(tally_stats_get(f->t, &st));
	print_message("striped adds: %llu of %d\n",
	              (unsigned long long)st.striped_adds, rounds);
	assert_true(st.striped_adds >= (uint64_t)rounds / 2);
}

#define LIKE_MEMBERS 5000
#define LIKE_PER_THREAD 2500

struct like_thread {
	tally *t;
	int index;
	int err;
	int64_t bad_count; /* a returned count outside 1..LIKE_MEMBERS */
};

static void *like_main(void *arg)
{
	struct like_thread *th = arg;
	/* Threads 0, 2, 4, 6 add members 1..2500 and 1, 3, 5, 7 add
	 * 2501..5000, in step: every member is added by four threads at
	 * about the same moment. */
	long from = (long)th->index * LIKE_PER_THREAD;
	for (long i = from; i < from + LIKE_PER_THREAD; i++) {
		tally_event ev = ev_of("article", "like", 1,
		                       (uint64_t)(i % LIKE_MEMBERS) + 1);
		int64_t c = 0;
		int rc = tally_add(th->t, &ev, &c);
		if (rc != TALLY_OK) {
			th->err = rc;
			break;
		}
		if (c < 1 || c > LIKE_MEMBERS)
			th->bad_count = c;
	}
	return NULL;
}

static void test_threads_like_overlapping_members_exact(void **state)
{
	struct fx *f = *state;
	struct like_thread ths[NTHREADS];
	pthread_t tids[NTHREADS];
	for (int i = 0; i < NTHREADS; i++) {
		ths[i].t = f->t;
		ths[i].index = i;
		ths[i].err = TALLY_OK;
		ths[i].bad_count = 0;
		assert_int_equal(pthread_create(&tids[i], NULL, like_main,
		                                &ths[i]), 0);
	}
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(tids[i], NULL);
	for (int i = 0; i < NTHREADS; i++) {
		CHECK_RC(ths[i].err, TALLY_OK);
		CHECK_I64(ths[i].bad_count, 0);
	}
	CHECK_I64(count_of(f->t, "article", "like", 1), LIKE_MEMBERS);
	for (uint64_t m = 1; m <= LIKE_MEMBERS; m++) {
		int rc = tally_has(f->t, "article", "like", 1, m, NULL);
		if (rc != TALLY_OK)
			fail_msg("member %" PRIu64 ": has() = %d (%s)", m, rc,
			         tally_strerror(rc));
	}
	CHECK_RC(tally_has(f->t, "article", "like", 1, LIKE_MEMBERS + 1,
	                   NULL), TALLY_ENOTFOUND);
	fx_reopen(f);
	CHECK_I64(count_of(f->t, "article", "like", 1), LIKE_MEMBERS);
}

/* ------------------------------------------------------------------------
 * Bad input
 * --------------------------------------------------------------------- */

static int never_called;

static void never_cb(void *arg, int err, int64_t result)
{
	(void)arg;
	(void)err;
	(void)result;
	never_called++;
}

/* Groups (tally_write_group_async): contiguous in commit order, and never
 * split across store batches, even when the batch limit would cut them. */
struct grp_rec {
	pthread_mutex_t mu;
	int64_t results[3 * 600];
	int errs;
	size_t done;
};

static void grp_done(void *arg, int err, int64_t result)
{
	struct grp_rec *g = arg;

	pthread_mutex_lock(&g->mu);
	if (err != TALLY_OK)
		g->errs++;
	else if (g->done < sizeof g->results / sizeof g->results[0])
		g->results[g->done] = result;
	g->done++;
	pthread_mutex_unlock(&g->mu);
}

/* Wait (30 s at most) until n callbacks ran. */
static void grp_wait(struct grp_rec *g, size_t n)
{
	for (int spin = 0; spin < 30000; spin++) {
		pthread_mutex_lock(&g->mu);
		size_t done = g->done;
		pthread_mutex_unlock(&g->mu);
		if (done == n)
			return;
		usleep(1000);
	}
}

static void *grp_noise(void *arg)
{
	tally *t = arg;

	for (int i = 0; i < 2000; i++)
		if (tally_incrby(t, "g", 1, 1, NULL) != TALLY_OK)
			return (void *)1;
	return NULL;
}

static void test_write_group_is_contiguous_and_one_batch(void **state)
{
	struct fx *f = *state;
	tally_options o = { .batch_ops_max = 3 };
	tally_write w[3];
	struct grp_rec *g = calloc(1, sizeof *g);
	pthread_t noise;
	tally_stats st;
	void *nrc = NULL;

	/* (the tally_stats fields used: batches, batch_hist) */

	assert_non_null(g);
	pthread_mutex_init(&g->mu, NULL);
	fx_reopen_with(f, &o);
	for (int i = 0; i < 3; i++)
		w[i] = (tally_write){ .kind = TALLY_W_INCRBY, .key = "g",
		                      .key_len = 1, .value = 1 };
	CHECK_RC(tally_write_group_async(f->t, w, 4, grp_done, g),
	         TALLY_EINVAL);
	CHECK_RC(tally_write_group_async(f->t, w, 0, grp_done, g),
	         TALLY_EINVAL);
	/* Groups of 2 while another thread increments the same key one by
	 * one: each group's two results must be consecutive. */
	assert_int_equal(pthread_create(&noise, NULL, grp_noise, f->t), 0);
	for (int i = 0; i < 600; i++)
		CHECK_OK(tally_write_group_async(f->t, w, 2, grp_done, g));
	pthread_join(noise, &nrc);
	CHECK_TRUE(nrc == NULL);
	CHECK_OK(tally_sync(f->t));
	grp_wait(g, 1200);
	pthread_mutex_lock(&g->mu);
	CHECK_U64(g->done, 1200);
	CHECK_TRUE(g->errs == 0);
	for (size_t i = 0; i < 1200; i += 2)
		if (g->results[i + 1] != g->results[i] + 1)
			fail_msg("group %zu: results %" PRId64 ", %" PRId64,
			         i / 2, g->results[i], g->results[i + 1]);
	pthread_mutex_unlock(&g->mu);
	CHECK_I64(get_of(f->t, "g"), 1200 + 2000);
	/* Groups of 2 alone, with the limit at 3: taking 3 would cut one,
	 * so every batch must hold 2 writes (bucket 1), never 1 or 3. */
	fx_reopen_with(f, &o);
	g->done = 0;
	for (int i = 0; i < 600; i++)
		CHECK_OK(tally_write_group_async(f->t, w, 2, grp_done, g));
	grp_wait(g, 1200);
	CHECK_U64(g->done, 1200);
	CHECK_OK(tally_stats_get(f->t, &st));
	CHECK_U64(st.batch_hist[0], 0);
	CHECK_U64(st.batch_hist[2], 0);
	CHECK_U64(st.batch_hist[1], st.batches);
	CHECK_TRUE(st.batches >= 300);
	CHECK_I64(get_of(f->t, "g"), 1200 + 2000 + 1200);
	pthread_mutex_destroy(&g->mu);
	free(g);
}

static void test_bad_input_null_handle_einval(void **state)
{
	struct fx *f = *state;
	tally *t = NULL;
	int64_t v = 0;
	size_t n = 0;
	int existed = 0;
	const void *keys[1] = {"k"};
	size_t lens[1] = {1};
	int found[1];
	tally_type_info ti[2];
	tally_event ev = ev_of("article", "like", 1, 1);
	tally_write w = write_incrby("k", 1, 1);
	uint64_t contents[1] = {1};
	tally_type_count tc[2];
	tally_entry e[2];
	tally_history_entry h[2];
	tally_stats st;
	char bk[256];
	snprintf(bk, sizeof(bk), "%s/bk", f->dir);

	never_called = 0;
	CHECK_RC(tally_sync(t), TALLY_EINVAL);
	CHECK_RC(tally_incrby(t, "k", 1, 1, &v), TALLY_EINVAL);
	CHECK_RC(tally_counter_add(t, "k", 1, 1), TALLY_EINVAL);
	CHECK_RC(tally_get(t, "k", 1, &v), TALLY_EINVAL);
	CHECK_RC(tally_mget(t, keys, lens, 1, &v, found), TALLY_EINVAL);
	CHECK_RC(tally_set(t, "k", 1, 1), TALLY_EINVAL);
	CHECK_RC(tally_del(t, "k", 1, &existed), TALLY_EINVAL);
	CHECK_RC(tally_type_add(t, "x", TALLY_MODE_UNIQUE), TALLY_EINVAL);
	CHECK_RC(tally_types(t, ti, 2, &n), TALLY_EINVAL);
	CHECK_RC(tally_add(t, &ev, &v), TALLY_EINVAL);
	CHECK_RC(tally_remove(t, &ev, &v), TALLY_EINVAL);
	CHECK_RC(tally_write_async(t, &w, never_cb, NULL), TALLY_EINVAL);
	CHECK_RC(tally_write_sync(t, &w, &v), TALLY_EINVAL);
	CHECK_RC(tally_count(t, "article", "like", 1, &v), TALLY_EINVAL);
	CHECK_RC(tally_count_at(t, "article", "like", 1, 1, &v), TALLY_EINVAL);
	CHECK_RC(tally_mcount(t, "article", "like", contents, 1, &v),
	         TALLY_EINVAL);
	CHECK_RC(tally_counts(t, "article", 1, tc, 2, &n), TALLY_EINVAL);
	CHECK_RC(tally_recent(t, "article", "like", 1, 2, 0, e, &n),
	         TALLY_EINVAL);
	CHECK_RC(tally_has(t, "article", "like", 1, 1, &v), TALLY_EINVAL);
	CHECK_RC(tally_history(t, 1, "like", 2, 0, h, &n), TALLY_EINVAL);
	CHECK_RC(tally_stats_get(t, &st), TALLY_EINVAL);
	CHECK_RC(tally_backup(t, bk), TALLY_EINVAL);
	CHECK_I64(never_called, 0);
	struct stat sb;
	CHECK_TRUE(stat(bk, &sb) != 0);
}

static void test_bad_input_null_pointers_einval(void **state)
{
	struct fx *f = *state;
	tally *t = f->t;
	int64_t v = 0;
	size_t n = 0;
	const void *keys[2] = {"k", NULL};
	size_t lens[2] = {1, 1};
	int found[2];
	int64_t vals[2];

	never_called = 0;
	CHECK_RC(tally_incrby(t, NULL, 1, 1, &v), TALLY_EINVAL);
	CHECK_RC(tally_counter_add(t, NULL, 1, 1), TALLY_EINVAL);
	CHECK_RC(tally_get(t, NULL, 1, &v), TALLY_EINVAL);
	CHECK_RC(tally_get(t, "k", 1, NULL), TALLY_EINVAL);
	CHECK_RC(tally_set(t, NULL, 1, 1), TALLY_EINVAL);
	CHECK_RC(tally_del(t, NULL, 1, NULL), TALLY_EINVAL);
	CHECK_RC(tally_mget(t, NULL, lens, 1, vals, found), TALLY_EINVAL);
	CHECK_RC(tally_mget(t, keys, NULL, 1, vals, found), TALLY_EINVAL);
	CHECK_RC(tally_mget(t, keys, lens, 1, NULL, found), TALLY_EINVAL);
	CHECK_RC(tally_mget(t, keys, lens, 2, vals, found), TALLY_EINVAL);

	CHECK_RC(tally_type_add(t, NULL, TALLY_MODE_UNIQUE), TALLY_EINVAL);
	tally_type_info ti[2];
	CHECK_RC(tally_types(t, ti, 2, NULL), TALLY_EINVAL);
	CHECK_RC(tally_types(t, NULL, 2, &n), TALLY_EINVAL);

	tally_event ev = ev_of("article", "like", 1, 1);
	CHECK_RC(tally_add(t, NULL, &v), TALLY_EINVAL);
	CHECK_RC(tally_remove(t, NULL, &v), TALLY_EINVAL);
	ev.ctype = NULL;
	CHECK_RC(tally_add(t, &ev, &v), TALLY_EINVAL);
	CHECK_RC(tally_remove(t, &ev, &v), TALLY_EINVAL);
	ev.ctype = "article";
	ev.ktype = NULL;
	CHECK_RC(tally_add(t, &ev, &v), TALLY_EINVAL);
	CHECK_RC(tally_remove(t, &ev, &v), TALLY_EINVAL);

	tally_write w = write_incrby("k", 1, 1);
	CHECK_RC(tally_write_async(t, NULL, never_cb, NULL), TALLY_EINVAL);
	CHECK_RC(tally_write_async(t, &w, NULL, NULL), TALLY_EINVAL);
	CHECK_RC(tally_write_sync(t, NULL, &v), TALLY_EINVAL);
	w.key = NULL;
	CHECK_RC(tally_write_async(t, &w, never_cb, NULL), TALLY_EINVAL);
	CHECK_RC(tally_write_sync(t, &w, &v), TALLY_EINVAL);
	memset(&w, 0, sizeof(w));
	w.kind = TALLY_W_ADD;
	w.event = ev_of(NULL, "like", 1, 1);
	CHECK_RC(tally_write_async(t, &w, never_cb, NULL), TALLY_EINVAL);
	CHECK_RC(tally_write_sync(t, &w, &v), TALLY_EINVAL);
	w.event = ev_of("article", NULL, 1, 1);
	CHECK_RC(tally_write_async(t, &w, never_cb, NULL), TALLY_EINVAL);
	CHECK_RC(tally_write_sync(t, &w, &v), TALLY_EINVAL);

	CHECK_RC(tally_count(t, NULL, "like", 1, &v), TALLY_EINVAL);
	CHECK_RC(tally_count(t, "article", NULL, 1, &v), TALLY_EINVAL);
	CHECK_RC(tally_count(t, "article", "like", 1, NULL), TALLY_EINVAL);
	CHECK_RC(tally_count_at(t, "article", "like", 1, 1, NULL),
	         TALLY_EINVAL);
	CHECK_RC(tally_count_at(t, NULL, "like", 1, 1, &v), TALLY_EINVAL);
	uint64_t contents[1] = {1};
	CHECK_RC(tally_mcount(t, "article", "like", NULL, 1, &v), TALLY_EINVAL);
	CHECK_RC(tally_mcount(t, "article", "like", contents, 1, NULL),
	         TALLY_EINVAL);
	tally_type_count tc[2];
	CHECK_RC(tally_counts(t, NULL, 1, tc, 2, &n), TALLY_EINVAL);
	CHECK_RC(tally_counts(t, "article", 1, tc, 2, NULL), TALLY_EINVAL);
	CHECK_RC(tally_counts(t, "article", 1, NULL, 2, &n), TALLY_EINVAL);
	tally_entry e[2];
	CHECK_RC(tally_recent(t, NULL, "like", 1, 2, 0, e, &n), TALLY_EINVAL);
	CHECK_RC(tally_recent(t, "article", NULL, 1, 2, 0, e, &n),
	         TALLY_EINVAL);
	CHECK_RC(tally_recent(t, "article", "like", 1, 2, 0, NULL, &n),
	         TALLY_EINVAL);
	CHECK_RC(tally_recent(t, "article", "like", 1, 2, 0, e, NULL),
	         TALLY_EINVAL);
	CHECK_RC(tally_has(t, NULL, "like", 1, 1, NULL), TALLY_EINVAL);
	CHECK_RC(tally_has(t, "article", NULL, 1, 1, NULL), TALLY_EINVAL);
	tally_history_entry h[2];
	CHECK_RC(tally_history(t, 1, NULL, 2, 0, h, &n), TALLY_EINVAL);
	CHECK_RC(tally_history(t, 1, "like", 2, 0, NULL, &n), TALLY_EINVAL);
	CHECK_RC(tally_history(t, 1, "like", 2, 0, h, NULL), TALLY_EINVAL);
	CHECK_RC(tally_stats_get(t, NULL), TALLY_EINVAL);
	CHECK_RC(tally_backup(t, NULL), TALLY_EINVAL);

	tally *other = (tally *)&never_called;
	CHECK_RC(tally_open(NULL, NULL, &other), TALLY_EINVAL);
	assert_null(other);
	CHECK_RC(tally_open(f->db, NULL, NULL), TALLY_EINVAL);

	/* Nothing was written, no callback ran. */
	CHECK_I64(never_called, 0);
	CHECK_RC(tally_get(t, "k", 1, &v), TALLY_ENOTFOUND);
	CHECK_I64(count_of(t, "article", "like", 1), 0);
}

static void test_bad_input_sizes_and_limits_refused(void **state)
{
	struct fx *f = *state;
	tally *t = f->t;
	size_t n = 0;
	int64_t v = 0;

	/* limit 0 and > TALLY_PAGE_MAX; the limit itself is fine. */
	tally_entry *e = calloc(TALLY_PAGE_MAX + 1, sizeof(*e));
	tally_history_entry *h = calloc(TALLY_PAGE_MAX + 1, sizeof(*h));
	assert_non_null(e);
	assert_non_null(h);
	CHECK_RC(tally_recent(t, "article", "like", 1, 0, 0, e, &n),
	         TALLY_EINVAL);
	CHECK_RC(tally_recent(t, "article", "like", 1, TALLY_PAGE_MAX + 1, 0,
	                      e, &n), TALLY_EINVAL);
	CHECK_OK(tally_recent(t, "article", "like", 1, TALLY_PAGE_MAX, 0, e,
	                      &n));
	CHECK_RC(tally_history(t, 1, "like", 0, 0, h, &n), TALLY_EINVAL);
	CHECK_RC(tally_history(t, 1, "like", TALLY_PAGE_MAX + 1, 0, h, &n),
	         TALLY_EINVAL);
	CHECK_OK(tally_history(t, 1, "like", TALLY_PAGE_MAX, 0, h, &n));
	/* History of member 0 (anonymous) is refused. */
	CHECK_RC(tally_history(t, 0, "like", 10, 0, h, &n), TALLY_EINVAL);
	free(e);
	free(h);

	/* n 0 and > TALLY_MULTI_MAX; the arrays are valid for MULTI_MAX+1 so
	 * that only the count is wrong. */
	const size_t big = TALLY_MULTI_MAX + 1;
	const void **keys = calloc(big, sizeof(*keys));
	size_t *lens = calloc(big, sizeof(*lens));
	int64_t *vals = calloc(big, sizeof(*vals));
	int *found = calloc(big, sizeof(*found));
	uint64_t *contents = calloc(big, sizeof(*contents));
	assert_non_null(keys);
	assert_non_null(lens);
	assert_non_null(vals);
	assert_non_null(found);
	assert_non_null(contents);
	for (size_t i = 0; i < big; i++) {
		keys[i] = "k";
		lens[i] = 1;
		contents[i] = i;
	}
	CHECK_RC(tally_mget(t, keys, lens, 0, vals, found), TALLY_EINVAL);
	CHECK_RC(tally_mget(t, keys, lens, big, vals, found), TALLY_EINVAL);
	CHECK_OK(tally_mget(t, keys, lens, TALLY_MULTI_MAX, vals, found));
	CHECK_RC(tally_mcount(t, "article", "like", contents, 0, vals),
	         TALLY_EINVAL);
	CHECK_RC(tally_mcount(t, "article", "like", contents, big, vals),
	         TALLY_EINVAL);
	CHECK_OK(tally_mcount(t, "article", "like", contents, TALLY_MULTI_MAX,
	                      vals));
	/* A bad key anywhere refuses the whole read. */
	lens[TALLY_MULTI_MAX - 1] = 0;
	CHECK_RC(tally_mget(t, keys, lens, TALLY_MULTI_MAX, vals, found),
	         TALLY_EKEYSIZE);
	lens[TALLY_MULTI_MAX - 1] = TALLY_KEY_MAX + 1;
	CHECK_RC(tally_mget(t, keys, lens, TALLY_MULTI_MAX, vals, found),
	         TALLY_EKEYSIZE);
	free(keys);
	free(lens);
	free(vals);
	free(found);
	free(contents);

	/* Name lengths: empty and 65 bytes refused, 64 accepted. */
	char name64[TALLY_NAME_MAX + 1], name65[TALLY_NAME_MAX + 2];
	memset(name64, 'c', TALLY_NAME_MAX);
	name64[TALLY_NAME_MAX] = '\0';
	memset(name65, 'c', TALLY_NAME_MAX + 1);
	name65[TALLY_NAME_MAX + 1] = '\0';
	tally_event ev = ev_of("", "like", 1, 1);
	CHECK_RC(tally_add(t, &ev, &v), TALLY_EKEYSIZE);
	ev.ctype = name65;
	CHECK_RC(tally_add(t, &ev, &v), TALLY_EKEYSIZE);
	CHECK_RC(tally_remove(t, &ev, &v), TALLY_EKEYSIZE);
	ev.ctype = name64;
	CHECK_I64(add_ok(t, &ev), 1);
	CHECK_I64(count_of(t, name64, "like", 1), 1);
	ev.ctype = "article";
	ev.ktype = "";
	CHECK_RC(tally_add(t, &ev, &v), TALLY_EKEYSIZE);
	ev.ktype = name65;
	CHECK_RC(tally_add(t, &ev, &v), TALLY_EKEYSIZE);
	CHECK_RC(tally_count(t, "", "like", 1, &v), TALLY_EKEYSIZE);
	CHECK_RC(tally_count(t, name65, "like", 1, &v), TALLY_EKEYSIZE);
	CHECK_RC(tally_count(t, "article", "", 1, &v), TALLY_EKEYSIZE);
	CHECK_RC(tally_count(t, "article", name65, 1, &v), TALLY_EKEYSIZE);
	tally_entry e2[2];
	CHECK_RC(tally_recent(t, name65, "like", 1, 2, 0, e2, &n),
	         TALLY_EKEYSIZE);
	CHECK_RC(tally_has(t, name65, "like", 1, 1, NULL), TALLY_EKEYSIZE);
	tally_type_count tc[32];
	CHECK_RC(tally_counts(t, name65, 1, tc, 32, &n), TALLY_EKEYSIZE);
	CHECK_RC(tally_counts(t, "", 1, tc, 32, &n), TALLY_EKEYSIZE);
	/* A content type with a character outside [A-Za-z0-9_.:-]. */
	ev = ev_of("bad name", "like", 1, 1);
	int rc = tally_add(t, &ev, &v);
	if (rc >= 0)
		fail_msg("add with ctype \"bad name\" returned %d", rc);

	/* count_at outside 1..TALLY_AT_MS_MAX. */
	CHECK_RC(tally_count_at(t, "article", "like", 1, 0, &v), TALLY_EINVAL);
	CHECK_RC(tally_count_at(t, "article", "like", 1, -1, &v),
	         TALLY_EINVAL);
	CHECK_RC(tally_count_at(t, "article", "like", 1, TALLY_AT_MS_MAX + 1,
	                        &v), TALLY_EINVAL);
	CHECK_OK(tally_count_at(t, "article", "like", 1, TALLY_AT_MS_MAX, &v));
	CHECK_OK(tally_count_at(t, "article", "like", 1, 1, &v));
}

static void test_bad_input_event_fields_refused(void **state)
{
	struct fx *f = *state;
	tally *t = f->t;
	int64_t c = 0;

	/* Total type: delta must be > 0 (0 means 1). */
	tally_event ev = ev_of("article", "view", 1, 1);
	const int64_t bad_total[3] = {-1, -100, INT64_MIN};
	for (int i = 0; i < 3; i++) {
		ev.delta = bad_total[i];
		CHECK_RC(tally_add(t, &ev, &c), TALLY_EINVAL);
		CHECK_RC(tally_remove(t, &ev, &c), TALLY_EINVAL);
	}
	CHECK_I64(count_of(t, "article", "view", 1), 0);

	/* Unique type: delta 0 or 1 only, member 0 refused. */
	tally_event lk = ev_of("article", "like", 1, 1);
	const int64_t bad_unique[4] = {2, -1, INT64_MAX, INT64_MIN};
	for (int i = 0; i < 4; i++) {
		lk.delta = bad_unique[i];
		CHECK_RC(tally_add(t, &lk, &c), TALLY_EINVAL);
		CHECK_RC(tally_remove(t, &lk, &c), TALLY_EINVAL);
	}
	lk.delta = 0;
	lk.member = 0;
	CHECK_RC(tally_add(t, &lk, &c), TALLY_EINVAL);
	CHECK_RC(tally_remove(t, &lk, &c), TALLY_EINVAL);
	CHECK_I64(count_of(t, "article", "like", 1), 0);
	lk.member = 1;
	lk.delta = 1;
	CHECK_I64(add_ok(t, &lk), 1);
	CHECK_I64(remove_ok(t, &lk), 0);

	/* at_ms outside 0..TALLY_AT_MS_MAX. */
	const int64_t bad_at[3] = {-1, TALLY_AT_MS_MAX + 1, INT64_MIN};
	ev.delta = 1;
	for (int i = 0; i < 3; i++) {
		ev.at_ms = bad_at[i];
		CHECK_RC(tally_add(t, &ev, &c), TALLY_EINVAL);
		CHECK_RC(tally_remove(t, &ev, &c), TALLY_EINVAL);
	}
	CHECK_I64(count_of(t, "article", "view", 1), 0);
	ev.at_ms = TALLY_AT_MS_MAX;
	CHECK_I64(add_ok(t, &ev), 1);

	/* Token length: 0 with a token, or > TALLY_ID_MAX. */
	char tok[TALLY_ID_MAX + 1];
	memset(tok, 't', sizeof(tok));
	ev.at_ms = 0;
	ev.id = tok;
	ev.id_len = 0;
	CHECK_RC(tally_add(t, &ev, &c), TALLY_EKEYSIZE);
	ev.id_len = TALLY_ID_MAX + 1;
	CHECK_RC(tally_add(t, &ev, &c), TALLY_EKEYSIZE);
	CHECK_RC(tally_remove(t, &ev, &c), TALLY_EKEYSIZE);
	CHECK_I64(count_of(t, "article", "view", 1), 1);
	ev.id_len = TALLY_ID_MAX;
	CHECK_I64(add_ok(t, &ev), 2);

	tally_write w = write_incrby("k", 1, 1);
	w.id = tok;
	w.id_len = 0;
	CHECK_RC(tally_write_sync(t, &w, NULL), TALLY_EKEYSIZE);
	w.id_len = TALLY_ID_MAX + 1;
	CHECK_RC(tally_write_sync(t, &w, NULL), TALLY_EKEYSIZE);
	never_called = 0;
	CHECK_RC(tally_write_async(t, &w, never_cb, NULL), TALLY_EKEYSIZE);
	int64_t v = 0;
	CHECK_RC(tally_get(t, "k", 1, &v), TALLY_ENOTFOUND);

	/* Unknown write kinds. */
	const int bad_kind[4] = {0, -1, TALLY_W_REMOVE + 1, 1000};
	for (int i = 0; i < 4; i++) {
		memset(&w, 0, sizeof(w));
		w.kind = bad_kind[i];
		w.key = "k";
		w.key_len = 1;
		w.value = 1;
		w.event = ev_of("article", "view", 1, 1);
		CHECK_RC(tally_write_sync(t, &w, NULL), TALLY_EINVAL);
		CHECK_RC(tally_write_async(t, &w, never_cb, NULL),
		         TALLY_EINVAL);
	}
	/* The write path still works and no refused write called back. */
	w = write_incrby("k", 1, 1);
	CHECK_OK(tally_write_sync(t, &w, NULL));
	CHECK_I64(never_called, 0);
	CHECK_I64(get_of(t, "k"), 1);
	CHECK_I64(count_of(t, "article", "view", 1), 2);
}

static void expect_open_einval(const char *path, const tally_options *o,
                               const char *what)
{
	tally *out = (tally *)&never_called; /* must be set to NULL */
	int rc = tally_open(path, o, &out);
	if (rc != TALLY_EINVAL)
		fail_msg("tally_open with %s: %d (%s), want TALLY_EINVAL", what,
		         rc, tally_strerror(rc));
	if (out != NULL)
		fail_msg("tally_open with %s left *out non-NULL", what);
}

static void test_open_bad_options_einval(void **state)
{
	struct fx *f = *state;
	char path[256];
	snprintf(path, sizeof(path), "%s/other", f->dir);
	tally_options o;

#define BAD_OPTION(field, value)                                             \
	do {                                                                 \
		memset(&o, 0, sizeof(o));                                    \
		o.field = (value);                                           \
		expect_open_einval(path, &o, #field " = " #value);           \
	} while (0)

	BAD_OPTION(durability, 2);
	BAD_OPTION(durability, -1);
	BAD_OPTION(flush_interval_ms, 60001);
	BAD_OPTION(flush_interval_ms, UINT32_MAX);
	BAD_OPTION(queue_ops_max, 1);
	BAD_OPTION(queue_ops_max, 15);
	BAD_OPTION(queue_ops_max, 16777217);
	BAD_OPTION(batch_ops_max, 1048577);
	BAD_OPTION(token_retention_ms, 1);
	BAD_OPTION(token_retention_ms, 999);
	BAD_OPTION(token_retention_ms, 604800001);
	BAD_OPTION(cache_entries_max, 1);
	BAD_OPTION(cache_entries_max, 1023);
	BAD_OPTION(cache_entries_max, 1073741825);
	BAD_OPTION(block_cache_mb, 1048577);
	BAD_OPTION(flags, 1u << 7);
	BAD_OPTION(open_files_max, 1);
	BAD_OPTION(open_files_max, 19);
	BAD_OPTION(open_files_max, 1048577);
#undef BAD_OPTION

	/* The same folder opens with good options afterwards. */
	tally *t = NULL;
	CHECK_OK(tally_open(path, NULL, &t));
	assert_non_null(t);
	tally_closep(&t);
}

static void test_open_accepts_boundary_options(void **state)
{
	struct fx *f = *state;
	tally_options o;
	memset(&o, 0, sizeof(o));
	o.durability = TALLY_DURABILITY_ASYNC;
	o.flush_interval_ms = 1;
	o.queue_ops_max = 16;
	o.batch_ops_max = 1;
	o.token_retention_ms = 1000;
	o.cache_entries_max = 1024;
	o.block_cache_mb = 1;
	o.open_files_max = 20;
	fx_reopen_with(f, &o);

	/* More writes than the queue holds: writers wait, none is lost. */
	struct inc_thread th;
	memset(&th, 0, sizeof(th));
	pthread_mutex_init(&th.mu, NULL);
	pthread_cond_init(&th.cv, NULL);
	struct inc_slot *slots = calloc(1000, sizeof(*slots));
	assert_non_null(slots);
	tally_write w = write_incrby("q", 1, 1);
	th.queued = 1000;
	for (int i = 0; i < 1000; i++) {
		slots[i].th = &th;
		CHECK_OK(tally_write_async(f->t, &w, inc_cb, &slots[i]));
	}
	if (!wait_done(&th.mu, &th.cv, &th.done, 1000, 60))
		fail_msg("callbacks did not all run");
	CHECK_RC(th.cb_err, TALLY_OK);
	CHECK_I64(slots[999].result, 1000);
	CHECK_I64(get_of(f->t, "q"), 1000);
	CHECK_OK(tally_sync(f->t));
	free(slots);
	pthread_mutex_destroy(&th.mu);
	pthread_cond_destroy(&th.cv);

	memset(&o, 0, sizeof(o));
	o.durability = TALLY_DURABILITY_SYNC;
	o.flush_interval_ms = 60000;
	o.token_retention_ms = 604800000;
	o.batch_ops_max = 1048576;
	o.open_files_max = 1048576;
	fx_reopen_with(f, &o);
	CHECK_I64(get_of(f->t, "q"), 1000);
	CHECK_OK(tally_sync(f->t));
}

static void test_open_no_create_and_busy(void **state)
{
	struct fx *f = *state;
	char missing[256];
	snprintf(missing, sizeof(missing), "%s/missing", f->dir);
	tally_options o;
	memset(&o, 0, sizeof(o));
	o.flags = TALLY_OPEN_NO_CREATE;
	tally *t = (tally *)&never_called;
	CHECK_RC(tally_open(missing, &o, &t), TALLY_ENOTFOUND);
	assert_null(t);
	struct stat sb;
	CHECK_TRUE(stat(missing, &sb) != 0); /* not created */

	/* The folder is in use by f->t. */
	t = (tally *)&never_called;
	CHECK_RC(tally_open(f->db, NULL, &t), TALLY_EBUSY);
	assert_null(t);
	/* The failed open did not disturb the open handle. */
	CHECK_OK(tally_set(f->t, "k", 1, 1));

	/* An existing database opens with NO_CREATE. */
	CHECK_OK(tally_set(f->t, "k", 1, 2));
	tally_closep(&f->t);
	CHECK_OK(tally_open(f->db, &o, &f->t));
	CHECK_I64(get_of(f->t, "k"), 2);
}

static void test_close_null_and_closep_twice_safe(void **state)
{
	struct fx *f = *state;
	tally_close(NULL);
	tally_closep(NULL);
	tally *none = NULL;
	tally_closep(&none);
	assert_null(none);

	CHECK_OK(tally_set(f->t, "k", 1, 1));
	tally_closep(&f->t);
	assert_null(f->t);
	tally_closep(&f->t);
	assert_null(f->t);

	/* tally_close (not p) also releases the folder. */
	tally *t = NULL;
	CHECK_OK(tally_open(f->db, NULL, &t));
	tally_close(t);
	CHECK_OK(tally_open(f->db, NULL, &f->t));
	CHECK_I64(get_of(f->t, "k"), 1);
}

static void test_strerror_every_code_non_empty(void **state)
{
	(void)state;
	const char *texts[TALLY_ERROR_END - TALLY_EINVAL];
	const char *ok = tally_strerror(TALLY_OK);
	assert_non_null(ok);
	CHECK_TRUE(ok[0] != '\0');
	for (int code = TALLY_EINVAL; code < TALLY_ERROR_END; code++) {
		const char *s = tally_strerror(code);
		if (s == NULL || s[0] == '\0')
			fail_msg("tally_strerror(%d) is empty", code);
		/* Each code says something of its own. */
		for (int j = TALLY_EINVAL; j < code; j++)
			if (strcmp(texts[j - TALLY_EINVAL], s) == 0)
				fail_msg("codes %d and %d share the text \"%s\"",
				         j, code, s);
		CHECK_TRUE(strcmp(s, ok) != 0);
		texts[code - TALLY_EINVAL] = s;
	}
	const int unknown[] = {TALLY_ERROR_END, TALLY_ERROR_END + 1,
	                       TALLY_EINVAL - 1, -1, -12345, INT_MIN,
	                       INT_MAX, 100000};
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		const char *s = tally_strerror(unknown[i]);
		if (s == NULL || s[0] == '\0')
			fail_msg("tally_strerror(%d) is empty", unknown[i]);
	}
	const int errnos[] = {EPERM, ENOENT, EIO, ENOMEM, ENOSPC, EACCES};
	for (size_t i = 0; i < sizeof(errnos) / sizeof(errnos[0]); i++) {
		const char *s = tally_strerror(errnos[i]);
		if (s == NULL || s[0] == '\0')
			fail_msg("tally_strerror(%d) is empty", errnos[i]);
	}
}

/* Counter values and totals live in memory and a journal between
 * checkpoints: with the smallest journal bound, many checkpoints run while
 * values keep changing, and every read (single, mget-like, count, mcount)
 * must agree with a model throughout, after a clean reopen, and after
 * reopening a folder whose journal was left behind (the copy taken while
 * open). */
#define JN_KEYS 3000
#define JN_OBJS 200
static void jn_check(struct fx *f, const int64_t *model, const uint8_t *live,
                     const int64_t *views)
{
	char key[32];
	for (int k = 0; k < JN_KEYS; k++) {
		int64_t v = INT64_MIN;
		snprintf(key, sizeof key, "jn:%d", k);
		int rc = tally_get(f->t, key, strlen(key), &v);
		if (live[k]) {
			CHECK_OK(rc);
			CHECK_I64(v, model[k]);
		} else {
			CHECK_RC(rc, TALLY_ENOTFOUND);
		}
	}
	uint64_t contents[JN_OBJS];
	int64_t out[JN_OBJS];
	for (int o = 0; o < JN_OBJS; o++)
		contents[o] = (uint64_t)o + 1;
	CHECK_OK(tally_mcount(f->t, "article", "view", contents, JN_OBJS, out));
	for (int o = 0; o < JN_OBJS; o++) {
		CHECK_I64(out[o], views[o]);
		CHECK_I64(count_of(f->t, "article", "view", (uint64_t)o + 1),
		          views[o]);
	}
}

/* A batch with RocksDB entries of its own (here an idempotency token)
 * journals in META rather than in a journal file, and each checkpoint
 * deletes the records it covers, one by one. After 1000 such events over
 * many checkpoints and a compaction, META holds the 1000 tokens and a few
 * settings: no record is left (one per write were there otherwise). */
static void test_journal_records_in_meta_are_deleted(void **state)
{
	struct fx *f = *state;
	tally_options o = f->opts;
	tally_disk_part parts[16];
	tally_stats st;
	uint64_t meta = UINT64_MAX;
	size_t n = 0;
	char id[32];
	int64_t v = 0;

	o.checkpoint_kib = 4;
	o.cache_entries_max = 1024;
	fx_reopen_with(f, &o);
	for (int i = 0; i < 1000; i++) {
		/* Events: a checkpoint every cache_entries_max / 4 of them. */
		tally_write w = { .kind = TALLY_W_ADD,
		                  .event = ev_of("article", "view",
		                                 (uint64_t)(i % 50) + 1, 1) };

		snprintf(id, sizeof id, "mj-%d", i);
		w.id = id;
		w.id_len = strlen(id);
		CHECK_OK(tally_write_sync(f->t, &w, NULL));
	}
	CHECK_OK(tally_stats_get(f->t, &st));
	assert_true(st.store_checkpoints >= 3);
	fx_reopen_with(f, &o);
	for (uint64_t c = 1; c <= 50; c++)
		v += count_of(f->t, "article", "view", c);
	CHECK_I64(v, 1000);
	CHECK_OK(tally_compact(f->t));
	CHECK_OK(tally_disk_usage(f->t, parts, 16, &n));
	for (size_t i = 0; i < n; i++)
		if (strcmp(parts[i].name, "default") == 0)
			meta = parts[i].entries;
	assert_true(meta >= 1000 && meta < 1000 + 32);
}

static void test_journal_checkpoints_keep_every_value(void **state)
{
	struct fx *f = *state;
	tally_options o = f->opts;
	static int64_t model[JN_KEYS], views[JN_OBJS];
	static uint8_t live[JN_KEYS];
	char key[32];
	tally_stats st;

	memset(model, 0, sizeof model);
	memset(live, 0, sizeof live);
	memset(views, 0, sizeof views);
	o.checkpoint_kib = 4;
	o.cache_entries_max = 1024;
	fx_reopen_with(f, &o);
	uint64_t x = 88172645463325252ull;
	for (int round = 0; round < 6; round++) {
		for (int i = 0; i < 4000; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			int k = (int)(x % JN_KEYS);
			snprintf(key, sizeof key, "jn:%d", k);
			switch ((x >> 20) % 8) {
			case 0: {
				int existed = -1;
				CHECK_OK(tally_del(f->t, key, strlen(key), &existed));
				CHECK_I64(existed, live[k]);
				live[k] = 0;
				model[k] = 0;
				break;
			}
			case 1:
				CHECK_OK(tally_set(f->t, key, strlen(key),
				                   (int64_t)(x % 1000)));
				model[k] = (int64_t)(x % 1000);
				live[k] = 1;
				break;
			case 2: {
				tally_event ev = ev_of("article", "view",
				                       x % JN_OBJS + 1, 7);
				ev.delta = (int64_t)(x % 5) + 1;
				views[x % JN_OBJS] += ev.delta;
				CHECK_I64(add_ok(f->t, &ev), views[x % JN_OBJS]);
				break;
			}
			default: {
				int64_t v = INT64_MIN;
				int64_t d = (int64_t)(x % 11) - 3;
				CHECK_OK(tally_incrby(f->t, key, strlen(key), d, &v));
				model[k] += d;
				live[k] = 1;
				CHECK_I64(v, model[k]);
			}
			}
		}
		jn_check(f, model, live, views);
	}
	CHECK_OK(tally_stats_get(f->t, &st));
	if (st.store_checkpoints < 2)
		fail_msg("only %" PRIu64 " checkpoints ran", st.store_checkpoints);
	/* A clean close writes everything out: nothing left to replay. */
	fx_reopen(f);
	CHECK_OK(tally_stats_get(f->t, &st));
	CHECK_U64(st.store_dirty, 0);
	jn_check(f, model, live, views);
	/* A copy taken while open holds journal records not yet checkpointed
	 * (the default bound is far away): opening it replays them. */
	o.checkpoint_kib = 0;
	fx_reopen_with(f, &o);
	for (int k = 0; k < JN_KEYS; k += 3) {
		snprintf(key, sizeof key, "jn:%d", k);
		CHECK_OK(tally_incrby(f->t, key, strlen(key), 5, NULL));
		model[k] += 5;
		live[k] = 1;
	}
	CHECK_OK(tally_stats_get(f->t, &st));
	if (st.store_dirty < JN_KEYS / 3)
		fail_msg("%" PRIu64 " values dirty, want >= %d", st.store_dirty,
		         JN_KEYS / 3);
	char copy[PATH_MAX];
	snprintf(copy, sizeof copy, "%s/copy", f->dir);
	CHECK_OK(tally_backup(f->t, copy));
	tally *c = NULL;
	CHECK_OK(tally_open(copy, &o, &c));
	CHECK_OK(tally_stats_get(c, &st));
	if (st.store_dirty < JN_KEYS / 3)
		fail_msg("the copy replayed %" PRIu64 " values, want >= %d",
		         st.store_dirty, JN_KEYS / 3);
	tally *mine = f->t;
	f->t = c;
	jn_check(f, model, live, views);
	f->t = mine;
	tally_closep(&c);
}

/* Totals and counters that later checkpoints do not touch stay readable
 * from memory: each checkpoint's clean table carries the previous one's
 * unchanged values (up to cache_entries_max), and they read right. */
#define CARRY_OBJS 200
static void test_checkpoints_carry_clean_values(void **state)
{
	struct fx *f = *state;
	tally_options o = f->opts;
	uint64_t contents[CARRY_OBJS];
	int64_t out[CARRY_OBJS], v = 0;
	tally_stats st;

	o.cache_entries_max = 1024; /* a checkpoint every 256 events */
	fx_reopen_with(f, &o);
	for (uint64_t c = 1; c <= CARRY_OBJS; c++) {
		tally_event ev = ev_of("article", "view", c, 1);
		ev.delta = (int64_t)c;
		CHECK_I64(add_ok(f->t, &ev), (int64_t)c);
		contents[c - 1] = c;
	}
	CHECK_OK(tally_set(f->t, "cold", 4, 42));
	CHECK_OK(tally_set(f->t, "gone", 4, 7));
	CHECK_OK(tally_del(f->t, "gone", 4, NULL));
	CHECK_OK(tally_stats_get(f->t, &st));
	uint64_t first = st.store_checkpoints;
	/* Then one article only, through several checkpoints. */
	for (int i = 1; i <= 1500; i++) {
		tally_event ev = ev_of("article", "view", CARRY_OBJS + 1, 1);
		CHECK_I64(add_ok(f->t, &ev), i);
	}
	CHECK_OK(tally_stats_get(f->t, &st));
	if (st.store_checkpoints < first + 3)
		fail_msg("%" PRIu64 " checkpoints, want >= %" PRIu64,
		         st.store_checkpoints, first + 3);
	/* The 200 totals and the counter (and the hot total), carried. */
	if (st.store_clean < CARRY_OBJS + 1)
		fail_msg("%" PRIu64 " values in memory, want >= %d",
		         st.store_clean, CARRY_OBJS + 1);
	CHECK_OK(tally_mcount(f->t, "article", "view", contents, CARRY_OBJS,
	                      out));
	for (int i = 0; i < CARRY_OBJS; i++)
		CHECK_I64(out[i], i + 1);
	CHECK_OK(tally_get(f->t, "cold", 4, &v));
	CHECK_I64(v, 42);
	CHECK_RC(tally_get(f->t, "gone", 4, &v), TALLY_ENOTFOUND);
	/* Changed again, the carried value gives way to the new one, through
	 * checkpoints that carry it in turn. */
	CHECK_OK(tally_set(f->t, "cold", 4, 43));
	uint64_t second = st.store_checkpoints;
	for (int i = 0; i < 900; i++) {
		tally_event ev = ev_of("article", "view", CARRY_OBJS + 1, 1);
		add_ok(f->t, &ev);
	}
	CHECK_OK(tally_stats_get(f->t, &st));
	if (st.store_checkpoints < second + 2)
		fail_msg("%" PRIu64 " checkpoints, want >= %" PRIu64,
		         st.store_checkpoints, second + 2);
	CHECK_OK(tally_get(f->t, "cold", 4, &v));
	CHECK_I64(v, 43);
	CHECK_RC(tally_get(f->t, "gone", 4, &v), TALLY_ENOTFOUND);
	fx_reopen(f);
	CHECK_OK(tally_get(f->t, "cold", 4, &v));
	CHECK_I64(v, 43);
}

/* Copy every file of folder from into a new folder to, as it is: the
 * image a kill -9 leaves, as long as nothing writes meanwhile. */
static void copy_folder(const char *from, const char *to)
{
	DIR *d = opendir(from);
	struct dirent *e;
	static char buf[1 << 16];

	assert_non_null(d);
	CHECK_TRUE(mkdir(to, 0755) == 0);
	while ((e = readdir(d)) != NULL) {
		char a[PATH_MAX + 256], b[PATH_MAX + 256];
		struct stat st;
		ssize_t n;

		snprintf(a, sizeof a, "%s/%s", from, e->d_name);
		snprintf(b, sizeof b, "%s/%s", to, e->d_name);
		if (stat(a, &st) != 0 || !S_ISREG(st.st_mode))
			continue;
		int in = open(a, O_RDONLY), out = open(b, O_WRONLY | O_CREAT, 0644);

		CHECK_TRUE(in >= 0 && out >= 0);
		while ((n = read(in, buf, sizeof buf)) > 0)
			CHECK_TRUE(write(out, buf, (size_t)n) == n);
		CHECK_TRUE(n == 0);
		close(in);
		close(out);
	}
	closedir(d);
}

/* Flip the last byte that is not zero: the end of the newest record of a
 * journal file (zeros follow it). */
static void tear_last_record(const char *path)
{
	int fd = open(path, O_RDWR);
	struct stat st;
	uint8_t c = 0;
	off_t off;

	CHECK_TRUE(fd >= 0 && fstat(fd, &st) == 0);
	for (off = st.st_size - 1; off >= 0; off--) {
		CHECK_TRUE(pread(fd, &c, 1, off) == 1);
		if (c != 0)
			break;
	}
	CHECK_TRUE(off >= 0);
	c ^= 0xff;
	CHECK_TRUE(pwrite(fd, &c, 1, off) == 1);
	close(fd);
}

static void test_journal_files_hold_counter_batches(void **state)
{
	struct fx *f = *state;
	char jf[PATH_MAX + 32], img[PATH_MAX], key[32];
	tally_stats a, b;
	struct stat st;
	tally *c = NULL;
	int64_t v = 0;

	/* Batches of counters alone write no RocksDB entry: their records
	 * go to the journal file. */
	CHECK_OK(tally_stats_get(f->t, &a));
	for (int i = 0; i < 100; i++) {
		snprintf(key, sizeof key, "jf:%d", i);
		CHECK_OK(tally_incrby(f->t, key, strlen(key), i + 1, NULL));
	}
	CHECK_OK(tally_stats_get(f->t, &b));
	CHECK_U64(b.store_entries - a.store_entries, 0);
	snprintf(jf, sizeof jf, "%s/tally-counters-0.journal", f->db);
	CHECK_TRUE(stat(jf, &st) == 0 && st.st_size > 0);
	/* A like's record goes to the file too; a later counter batch
	 * after it: replay keeps their order. */
	tally_event ev = ev_of("article", "like", 1, 1);
	add_ok(f->t, &ev);
	CHECK_OK(tally_incrby(f->t, "jf:0", 4, 1, NULL));

	snprintf(img, sizeof img, "%s/img", f->dir);
	copy_folder(f->db, img);
	CHECK_OK(tally_open(img, NULL, &c));
	for (int i = 0; i < 100; i++) {
		snprintf(key, sizeof key, "jf:%d", i);
		CHECK_I64(get_of(c, key), i == 0 ? 2 : i + 1);
	}
	CHECK_I64(count_of(c, "article", "like", 1), 1);
	CHECK_OK(tally_stats_get(c, &a));
	CHECK_U64(a.counters, 100);
	tally_closep(&c);

	/* A torn last record is not replayed; the ones before it are. */
	CHECK_OK(tally_incrby(f->t, "jf:last", 7, 7, NULL));
	snprintf(img, sizeof img, "%s/img2", f->dir);
	copy_folder(f->db, img);
	snprintf(jf, sizeof jf, "%s/tally-counters-0.journal", img);
	tear_last_record(jf);
	CHECK_OK(tally_open(img, NULL, &c));
	CHECK_RC(tally_get(c, "jf:last", 7, &v), TALLY_ENOTFOUND);
	CHECK_I64(get_of(c, "jf:0"), 2);
	CHECK_I64(get_of(c, "jf:99"), 100);
	CHECK_OK(tally_stats_get(c, &a));
	CHECK_U64(a.counters, 100);
	/* The copy goes on writing where the torn record was. */
	CHECK_OK(tally_incrby(c, "jf:last", 7, 3, &v));
	CHECK_I64(v, 3);
	tally_closep(&c);
	CHECK_OK(tally_open(img, NULL, &c));
	CHECK_I64(get_of(c, "jf:last"), 3);
	tally_closep(&c);

	/* A clean close checkpoints every value: the files are empty. */
	fx_reopen(f);
	snprintf(jf, sizeof jf, "%s/tally-counters-0.journal", f->db);
	CHECK_TRUE(stat(jf, &st) == 0 && st.st_size == 0);
	CHECK_I64(get_of(f->t, "jf:last"), 7);
	CHECK_OK(tally_stats_get(f->t, &a));
	CHECK_U64(a.counters, 101);
}

/* Offsets of the records of a journal file, from its start while headers
 * carry the file's magic (as the store reads them, without the hashes):
 * up to max, their count returned. */
static size_t journal_records(const char *path, off_t *off, size_t max)
{
	int fd = open(path, O_RDONLY);
	uint8_t h[ROCKS_JF_HDR];
	off_t at = 0;
	size_t n = 0;

	CHECK_TRUE(fd >= 0);
	while (n < max && pread(fd, h, sizeof h, at) == (ssize_t)sizeof h &&
	       h[8] == 0x74 && h[9] == 0x4a && h[10] == 0x72 && h[11] == 0x31) {
		uint32_t len = (uint32_t)h[12] << 24 | (uint32_t)h[13] << 16 |
		               (uint32_t)h[14] << 8 | h[15];

		off[n++] = at;
		at += (off_t)sizeof h + (off_t)len;
	}
	close(fd);
	return n;
}

/* A machine crash in async durability can keep some pages of a write and
 * lose an earlier one: the file then holds whole records after the one
 * that ends its scan. New records are written from that one's place with
 * its number; here each is as long as the one it replaces, so without
 * the cut at open the next open would read on into the old records
 * (numbers still growing) and take the counter back to their value. */
static void test_journal_file_cut_where_its_scan_ends(void **state)
{
	struct fx *f = *state;
	char jf[PATH_MAX + 32], img[PATH_MAX], img2[PATH_MAX];
	off_t off[64];
	struct stat st;
	tally_stats ts;
	tally *c = NULL;
	size_t n;
	uint8_t b;
	int fd;

	for (int i = 0; i < 10; i++)
		CHECK_OK(tally_incrby(f->t, "cut", 3, 1, NULL));
	snprintf(img, sizeof img, "%s/img", f->dir);
	copy_folder(f->db, img);
	snprintf(jf, sizeof jf, "%s/tally-counters-0.journal", img);
	n = journal_records(jf, off, 64);
	CHECK_TRUE(n >= 10);
	/* The record that took the counter to 4 is lost; 5 to 10 are not. */
	fd = open(jf, O_RDWR);
	CHECK_TRUE(fd >= 0);
	CHECK_TRUE(pread(fd, &b, 1, off[n - 7] + ROCKS_JF_HDR) == 1);
	b ^= 0xff;
	CHECK_TRUE(pwrite(fd, &b, 1, off[n - 7] + ROCKS_JF_HDR) == 1);
	close(fd);

	CHECK_OK(tally_open(img, NULL, &c));
	CHECK_I64(get_of(c, "cut"), 3);
	CHECK_TRUE(stat(jf, &st) == 0 && st.st_size == off[n - 7]);
	/* The six whole records after the damaged one are reported. */
	CHECK_OK(tally_stats_get(c, &ts));
	CHECK_U64(ts.journal_records_dropped, 6);
	CHECK_OK(tally_incrby(c, "cut", 3, 1, NULL));
	CHECK_I64(get_of(c, "cut"), 4);
	/* As kill -9 leaves it: the value acknowledged last is the one. */
	snprintf(img2, sizeof img2, "%s/img2", f->dir);
	copy_folder(img, img2);
	tally_closep(&c);
	CHECK_OK(tally_open(img2, NULL, &c));
	CHECK_I64(get_of(c, "cut"), 4);
	/* A copy as kill -9 leaves it: nothing damaged, nothing reported. */
	CHECK_OK(tally_stats_get(c, &ts));
	CHECK_U64(ts.journal_records_dropped, 0);
	CHECK_OK(tally_incrby(c, "cut", 3, 1, NULL));
	CHECK_I64(get_of(c, "cut"), 5);
	tally_closep(&c);
	CHECK_OK(tally_open(img2, NULL, &c));
	CHECK_I64(get_of(c, "cut"), 5);
	tally_closep(&c);
}

/* The number of the journal record at off of the file at path. */
static uint64_t journal_num(const char *path, off_t off)
{
	uint8_t h[ROCKS_JF_HDR];
	uint64_t num = 0;
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0 && pread(fd, h, sizeof h, off) == (ssize_t)sizeof h);
	close(fd);
	for (int i = 16; i < 24; i++)
		num = num << 8 | h[i];
	return num;
}

/* A copy of f's folder as kill -9 leaves it, named name, with the
 * first len bytes of its journal file 0 replaced by stale: a record lost
 * in a machine crash where an older one still is. Its path into img. */
static void copy_with_stale_start(struct fx *f, const char *name,
                                  const uint8_t *stale, off_t len,
                                  char *img, size_t cap)
{
	char jf[PATH_MAX + 32];
	int fd;

	snprintf(img, cap, "%s/%s", f->dir, name);
	copy_folder(f->db, img);
	snprintf(jf, sizeof jf, "%s/tally-counters-0.journal", img);
	fd = open(jf, O_RDWR);
	assert_true(fd >= 0 && pwrite(fd, stale, (size_t)len, 0) == len);
	close(fd);
}

/* A machine crash in async durability right after a turn: the first
 * record written over file 0 is lost, and its place still holds a whole
 * record of the turn before, numbered lower, while the next record
 * survives. Replaying that one without the lost one gives a state that
 * no prefix of the acknowledged batches gives: it is left out, and cut
 * from the file so that new records do not sort after it. */
static void test_journal_gap_after_turn_replays_none_past_it(void **state)
{
	struct fx *f = *state;
	tally_options o = f->opts;
	char jf[PATH_MAX + 32], img[PATH_MAX], img2[PATH_MAX];
	uint8_t stale[256];
	off_t off[64];
	tally_stats st;
	tally *c = NULL;
	struct stat sb;
	int64_t s = 0, v = 0;
	off_t stale_len;
	size_t n;
	int fd;

	o.checkpoint_kib = 4;
	snprintf(jf, sizeof jf, "%s/tally-counters-0.journal", f->db);
	for (int attempt = 0;; attempt++) {
		/* y and z go to file 0 one after the other, unless a third
		 * checkpoint (begun while the second ran, on a busy machine)
		 * turned the files between them: then again. */
		assert_true(attempt < 5);
		/* An empty folder each time (file 0 from its start, and no
		 * y or z of an attempt before in the tables). */
		tally_closep(&f->t);
		rm_tree(f->db);
		fx_reopen_with(f, &o);
		/* Records of the same length, as y's and z's below. */
		for (int i = 0;; i++) {
			CHECK_OK(tally_incrby(f->t, "s", 1, (i & 1) ? 1 : -1,
			                      NULL));
			if (i == 0) {
				/* The first record of file 0's first turn. */
				n = journal_records(jf, off, 64);
				CHECK_U64(n, 1);
			}
			CHECK_OK(tally_stats_get(f->t, &st));
			if (st.store_checkpoints >= 2)
				break;
			assert_true(i < 100000);
		}
		/* The second checkpoint turned the files back to file 0, to
		 * be written over from its start, where the first record
		 * still is. */
		n = journal_records(jf, off, 64);
		stale_len = off[1];
		assert_true(n >= 2 && stale_len <= (off_t)sizeof stale);
		fd = open(jf, O_RDONLY);
		assert_true(fd >= 0 &&
		            pread(fd, stale, (size_t)stale_len, 0) == stale_len);
		close(fd);
		s = get_of(f->t, "s");
		CHECK_OK(tally_incrby(f->t, "y", 1, 0, NULL));
		CHECK_OK(tally_incrby(f->t, "z", 1, 5, NULL));
		/* y's record takes exactly the place of the first one, and
		 * z's follows it. */
		n = journal_records(jf, off, 64);
		assert_true(n >= 2);
		CHECK_I64(off[1], stale_len);
		if (journal_num(jf, off[1]) == journal_num(jf, off[0]) + 1)
			break;
	}

	copy_with_stale_start(f, "img", stale, stale_len, img, sizeof img);
	snprintf(jf, sizeof jf, "%s/tally-counters-0.journal", img);
	CHECK_OK(tally_open(img, NULL, &c));
	CHECK_RC(tally_get(c, "y", 1, &v), TALLY_ENOTFOUND);
	CHECK_RC(tally_get(c, "z", 1, &v), TALLY_ENOTFOUND);
	CHECK_I64(get_of(c, "s"), s);
	CHECK_TRUE(stat(jf, &sb) == 0 && sb.st_size == stale_len);
	CHECK_OK(tally_incrby(c, "z", 1, 7, &v));
	CHECK_I64(v, 7);
	/* As kill -9 leaves it: the new record is replayed, after the rest. */
	snprintf(img2, sizeof img2, "%s/img2", f->dir);
	copy_folder(img, img2);
	tally_closep(&c);
	CHECK_OK(tally_open(img2, NULL, &c));
	CHECK_I64(get_of(c, "z"), 7);
	CHECK_I64(get_of(c, "s"), s);
	CHECK_RC(tally_get(c, "y", 1, &v), TALLY_ENOTFOUND);
	tally_closep(&c);

	/* A record in META (a write with an ID) is written only after the
	 * file records before it are synced: found past such a gap, it is
	 * damage, refused rather than replayed over a hole. */
	tally_write w = write_incrby("m", 1, 1);
	w.id = "gap-1";
	w.id_len = 5;
	CHECK_OK(tally_write_sync(f->t, &w, NULL));
	copy_with_stale_start(f, "img3", stale, stale_len, img, sizeof img);
	CHECK_RC(tally_open(img, NULL, &c), TALLY_ECORRUPT);
	assert_null(c);
}

/* tally_compact() writes the values in memory to the tables, which it
 * then flushes: in async durability the journal records of those values
 * must reach the disk first. Were the tables durable and a record not, a
 * machine crash would replay the keys of the records kept and leave the
 * others at the spilled values: a group in part (here b's +1 without
 * a's). */
static void test_compact_syncs_the_journal_first(void **state)
{
	struct fx *f = *state;
	tally_options o = f->opts;
	tally_write w[2] = { write_incrby("a", 1, 1), write_incrby("b", 1, 1) };
	static struct grp_rec g = { .mu = PTHREAD_MUTEX_INITIALIZER };
	tally_stats before, after;

	o.durability = TALLY_DURABILITY_ASYNC;
	o.flush_interval_ms = 60000;
	fx_reopen_with(f, &o);
	CHECK_OK(tally_incrby(f->t, "a", 1, 1, NULL));
	CHECK_OK(tally_write_group_async(f->t, w, 2, grp_done, &g));
	grp_wait(&g, 2);
	CHECK_I64(g.errs, 0);
	CHECK_OK(tally_stats_get(f->t, &before));
	CHECK_OK(tally_compact(f->t));
	CHECK_OK(tally_stats_get(f->t, &after));
	CHECK_U64(after.syncs - before.syncs, 1);
	fx_reopen_with(f, &o);
	CHECK_I64(get_of(f->t, "a"), 2);
	CHECK_I64(get_of(f->t, "b"), 1);
}

/* Every page of article 1's events, newest first: members n down to 1,
 * with the unlikes of every 10th member after its like. */
static void check_events_merged(tally *t, uint64_t n)
{
	tally_entry page[7];
	uint64_t before = 0, seen = 0, last_seq = UINT64_MAX;
	size_t got;
	int64_t at;

	CHECK_I64(count_of(t, "article", "like", 1), (int64_t)(n - n / 10));
	do {
		CHECK_OK(tally_recent(t, "article", "like", 1, 7, before, page,
		                      &got));
		for (size_t i = 0; i < got; i++) {
			/* Strictly older each time: no event twice, across
			 * memory and the tables. */
			CHECK_TRUE(page[i].seq < last_seq);
			last_seq = page[i].seq;
			before = page[i].seq;
			seen++;
		}
	} while (got == 7);
	CHECK_U64(seen, n + n / 10);
	for (uint64_t m = 1; m <= n; m++)
		CHECK_RC(tally_has(t, "article", "like", 1, m, &at),
		         m % 10 == 0 ? TALLY_ENOTFOUND : TALLY_OK);
	/* Member 7 liked articles 1 and 2, in that order. */
	tally_history_entry h[4];
	CHECK_OK(tally_history(t, 7, "like", 4, 0, h, &got));
	CHECK_U64(got, 2);
	CHECK_U64(h[0].content, 2);
	CHECK_U64(h[1].content, 1);
	CHECK_TRUE(h[0].seq > h[1].seq);
}

static int count_scanned(void *arg, const tally_event_rec *ev)
{
	uint64_t *seen = arg;

	/* Oldest first within an object; objects 1 and 2 only. */
	if (ev->content == 1) {
		if (ev->seq <= seen[1])
			return 1;
		seen[1] = ev->seq;
	}
	seen[0]++;
	return 0;
}

/* The store format byte, read or written with RocksDB's own API while the
 * handle is closed (every column family opened, the meta one written). */
static int raw_format(const char *dir, int put)
{
	rocksdb_options_t *o = rocksdb_options_create();
	rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
	rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
	const char key = META_FORMAT;
	char *err = NULL, **names, *val;
	size_t ncf = 0, vlen = 0;
	int got = -1;

	names = rocksdb_list_column_families(o, dir, &ncf, &err);
	assert_null(err);
	const rocksdb_options_t **opts = calloc(ncf, sizeof *opts);
	rocksdb_column_family_handle_t **h = calloc(ncf, sizeof *h);
	assert_non_null(opts);
	assert_non_null(h);
	for (size_t i = 0; i < ncf; i++)
		opts[i] = o;
	rocksdb_t *db = rocksdb_open_column_families(
		o, dir, (int)ncf, (const char *const *)names, opts, h, &err);
	assert_null(err);
	assert_string_equal(names[0], "default");
	if (put >= 0) {
		char v = (char)put;

		rocksdb_put_cf(db, wo, h[0], &key, 1, &v, 1, &err);
		assert_null(err);
	}
	val = rocksdb_get_cf(db, ro, h[0], &key, 1, &vlen, &err);
	assert_null(err);
	if (val != NULL && vlen == 1)
		got = (unsigned char)val[0];
	rocksdb_free(val);
	for (size_t i = 0; i < ncf; i++)
		rocksdb_column_family_handle_destroy(h[i]);
	rocksdb_close(db);
	rocksdb_list_column_families_destroy(names, ncf);
	free(opts);
	free(h);
	rocksdb_writeoptions_destroy(wo);
	rocksdb_readoptions_destroy(ro);
	rocksdb_options_destroy(o);
	return got;
}

/* Folders of formats 1 to 4 open (and are marked 5: chunks coded
 * against the clock may follow); a folder marked newer, or 0, is refused
 * with TALLY_EVERSION and left as it is. */
static void test_store_format_upgrade_and_refusal(void **state)
{
	struct fx *f = *state;
	tally_event ev = ev_of("article", "like", 1, 1);

	add_ok(f->t, &ev);
	tally_closep(&f->t);
	CHECK_I64(raw_format(f->db, -1), ROCKS_FORMAT);
	for (int old = 1; old < ROCKS_FORMAT; old++) {
		CHECK_I64(raw_format(f->db, old), old);
		CHECK_OK(tally_open(f->db, &f->opts, &f->t));
		CHECK_I64(count_of(f->t, "article", "like", 1), 1);
		tally_closep(&f->t);
		CHECK_I64(raw_format(f->db, -1), ROCKS_FORMAT);
	}
	int bad[] = { 0, ROCKS_FORMAT + 1, 255 };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK_I64(raw_format(f->db, bad[i]), bad[i]);
		CHECK_RC(tally_open(f->db, &f->opts, &f->t), TALLY_EVERSION);
		assert_null(f->t);
		CHECK_I64(raw_format(f->db, -1), bad[i]);
	}
	CHECK_I64(raw_format(f->db, ROCKS_FORMAT), ROCKS_FORMAT);
	CHECK_OK(tally_open(f->db, &f->opts, &f->t));
}

/* A closed folder opened with RocksDB's own API, every column family. */
typedef struct raw_db {
	rocksdb_options_t *o;
	rocksdb_t *db;
	rocksdb_column_family_handle_t *h[CF_COUNT];
	char **names;
	size_t ncf;
} raw_db;

static void raw_open(raw_db *d, const char *dir)
{
	const rocksdb_options_t *opts[CF_COUNT];
	char *err = NULL;

	d->o = rocksdb_options_create();
	d->names = rocksdb_list_column_families(d->o, dir, &d->ncf, &err);
	assert_null(err);
	assert_int_equal(d->ncf, CF_COUNT);
	for (size_t i = 0; i < d->ncf; i++)
		opts[i] = d->o;
	d->db = rocksdb_open_column_families(d->o, dir, (int)d->ncf,
	                                     (const char *const *)d->names,
	                                     opts, d->h, &err);
	assert_null(err);
}

static void raw_close(raw_db *d)
{
	for (size_t i = 0; i < d->ncf; i++)
		rocksdb_column_family_handle_destroy(d->h[i]);
	rocksdb_close(d->db);
	rocksdb_list_column_families_destroy(d->names, d->ncf);
	rocksdb_options_destroy(d->o);
}

static int scan_counts(void *arg, const tally_event_rec *ev)
{
	(void)ev;
	(*(size_t *)arg)++;
	return 0;
}

/* A damaged store of the tokens' clock (META 'w': a cut varint, a time
 * before 1970) leaves the folder whole: the open resumes the clock from
 * the tokens' own times, and a retry is still answered. */
static void test_damaged_token_clock_is_let_be(void **state)
{
	struct fx *f = *state;
	static const char *const bad[] = { "\x80", "\x09" };
	rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
	tally_write w = write_incrby("k", 1, 5);
	char *err = NULL;
	raw_db d;

	w.id = "clock-damaged";
	w.id_len = 13;
	CHECK_I64(write_ok(f->t, &w), 5);
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		tally_closep(&f->t);
		raw_open(&d, f->db);
		rocksdb_put_cf(d.db, wo, d.h[CF_META], "w", 1, bad[i], 1,
		               &err);
		assert_null(err);
		raw_close(&d);
		CHECK_OK(tally_open(f->db, &f->opts, &f->t));
		CHECK_I64(write_ok(f->t, &w), 5);
		CHECK_I64(get_of(f->t, "k"), 5);
	}
	rocksdb_writeoptions_destroy(wo);
}

/* A content type id stored without its name (META damaged) is corruption
 * where it is read back: HISTORY gave it an empty name, and the event scan
 * (tally export) wrote such events as if they were whole. */
static void test_unnamed_ctype_id_is_corrupt(void **state)
{
	struct fx *f = *state;
	tally_event a = ev_of("article", "like", 1, 7);
	tally_event v = ev_of("video", "like", 2, 7);
	rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
	tally_history_entry h[4];
	size_t n = 9, seen = 0;
	char *err = NULL;
	raw_db d;

	add_ok(f->t, &a);
	add_ok(f->t, &v);
	tally_closep(&f->t);
	raw_open(&d, f->db);
	rocksdb_delete_cf(d.db, wo, d.h[CF_META], "cvideo", 6, &err);
	assert_null(err);
	raw_close(&d);
	rocksdb_writeoptions_destroy(wo);
	CHECK_OK(tally_open(f->db, &f->opts, &f->t));
	CHECK_I64(count_of(f->t, "article", "like", 1), 1);
	CHECK_RC(tally_history(f->t, 7, "like", 4, 0, h, &n), TALLY_ECORRUPT);
	CHECK_U64(n, 0);
	CHECK_RC(tally_events_scan(f->t, scan_counts, &seen), TALLY_ECORRUPT);
}

/* The object of the first log entry of an open raw folder: the ids of
 * the one object tally wrote there. */
static void raw_first_log_obj(raw_db *d, key_obj *obj)
{
	rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
	rocksdb_iterator_t *it = rocksdb_create_iterator_cf(d->db, ro,
	                                                    d->h[CF_LOG]);
	const char *key;
	size_t klen;
	uint64_t s0;

	rocksdb_iter_seek_to_first(it);
	assert_true(rocksdb_iter_valid(it));
	key = rocksdb_iter_key(it, &klen);
	assert_int_equal(key_log_decode((const uint8_t *)key, klen, obj, &s0),
	                 0);
	rocksdb_iter_destroy(it);
	rocksdb_readoptions_destroy(ro);
}

/* Format 4 chunks (times whole or as differences, no mark), as builds
 * before the clock wrote them, put into a closed folder with RocksDB's
 * own API: an object's log of three events and a member's history of
 * two, under the type ids of an event tally wrote. */
#define OLD_SEQ 500000
static void raw_put_format4_chunks(const char *dir, const int64_t *at)
{
	rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
	char *err = NULL;
	raw_db d;
	uint8_t k[KEY_LOG_LEN], v[VAL_CHUNK_MAX];
	uint64_t seq[3] = { OLD_SEQ + 2, OLD_SEQ + 1, OLD_SEQ };
	val_log lv[3];
	val_hist hv[2];
	key_obj obj;

	raw_open(&d, dir);
	assert_string_equal(d.names[CF_LOG], "log");
	/* The ids of the one object tally wrote (article/view 1). */
	raw_first_log_obj(&d, &obj);
	obj.content = 77;
	for (int i = 0; i < 3; i++)
		lv[i] = (val_log){ 4242 + (uint64_t)i, at[i], 1, 3 - i };
	key_log_encode(k, &obj, seq[2]);
	size_t vlen = val_log_chunk_encode(v, seq, lv, 3, NULL);
	rocksdb_put_cf(d.db, wo, d.h[CF_LOG], (const char *)k, KEY_LOG_LEN,
	               (const char *)v, vlen, &err);
	assert_null(err);
	for (int i = 0; i < 2; i++)
		hv[i] = (val_hist){ obj.ctype, 80 + (uint64_t)i, at[i], 1 };
	key_hist_encode(k, 4343, obj.ktype, seq[1]);
	vlen = val_hist_chunk_encode(v, seq, hv, 2, NULL);
	rocksdb_put_cf(d.db, wo, d.h[CF_HIST], (const char *)k, KEY_HIST_LEN,
	               (const char *)v, vlen, &err);
	assert_null(err);
	raw_close(&d);
	rocksdb_writeoptions_destroy(wo);
}

/* A folder written before the clock (format 4) reads its chunks as they
 * were written, beside chunks of format 5 written after its upgrade. */
static void test_format4_chunks_read_after_upgrade(void **state)
{
	struct fx *f = *state;
	const int64_t at[3] = { INT64_C(1700000000900), INT64_C(1700000000500),
	                        INT64_C(1600000000000) };
	tally_event ev = ev_of("article", "view", 1, 1);
	tally_entry e[4];
	tally_history_entry hh[3];
	size_t got;

	ev.at_ms = INT64_C(1700000000000);
	add_ok(f->t, &ev);
	tally_closep(&f->t);
	raw_put_format4_chunks(f->db, at);
	CHECK_I64(raw_format(f->db, 4), 4);
	for (int round = 0; round < 2; round++) {
		CHECK_OK(tally_open(f->db, &f->opts, &f->t));
		CHECK_OK(tally_recent(f->t, "article", "view", 77, 4, 0, e,
		                      &got));
		CHECK_U64(got, 3);
		for (size_t i = 0; i < 3; i++) {
			CHECK_U64(e[i].member, 4242 + i);
			CHECK_I64(e[i].at_ms, at[i]);
			CHECK_U64(e[i].seq, OLD_SEQ + 2 - i);
		}
		CHECK_OK(tally_history(f->t, 4343, "view", 3, 0, hh, &got));
		CHECK_U64(got, 2);
		for (size_t i = 0; i < 2; i++) {
			CHECK_U64(hh[i].content, 80 + i);
			CHECK_I64(hh[i].at_ms, at[i]);
		}
		/* The event tally wrote, and one written after the upgrade
		 * (format 5 once the close checkpoints it). */
		CHECK_OK(tally_recent(f->t, "article", "view", 1, 4, 0, e,
		                      &got));
		CHECK_U64(got, 1 + (size_t)round);
		CHECK_I64(e[got - 1].at_ms, INT64_C(1700000000000));
		if (round == 0) {
			ev.at_ms = INT64_C(1700000000007);
			add_ok(f->t, &ev);
		} else {
			CHECK_I64(e[0].at_ms, INT64_C(1700000000007));
		}
		tally_closep(&f->t);
		CHECK_I64(raw_format(f->db, -1), ROCKS_FORMAT);
	}
	CHECK_OK(tally_open(f->db, &f->opts, &f->t));
}

/* Stored events whose fields no write gives (a time outside AT's range, a
 * seq of 0, a content type id of 0) are damage: the reads that meet them
 * answer TALLY_ECORRUPT, never the damaged field. (Before, RECENT gave a
 * time of -5, and a seq of 0 sent a pager back to the newest for ever.)
 * The event scan, which export and stats salvage with, hands the times on
 * for them to skip and count. */
static void raw_put(raw_db *d, int cf, const uint8_t *k, size_t klen,
                    const uint8_t *v, size_t vlen)
{
	rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
	char *err = NULL;

	rocksdb_put_cf(d->db, wo, d->h[cf], (const char *)k, klen,
	               (const char *)v, vlen, &err);
	assert_null(err);
	rocksdb_writeoptions_destroy(wo);
}

typedef struct damaged_scan {
	int64_t at[2]; /* of contents 90 and 91 */
} damaged_scan;

static int damaged_scan_fn(void *arg, const tally_event_rec *ev)
{
	damaged_scan *d = arg;

	if (ev->content == 90 || ev->content == 91)
		d->at[ev->content - 90] = ev->at_ms;
	return 0;
}

static void test_damaged_event_fields_are_corrupt(void **state)
{
	struct fx *f = *state;
	tally_event ev = ev_of("article", "like", 1, 1);
	const int64_t bad_at[2] = { -5, TALLY_AT_MS_MAX + 1 };
	uint8_t k[KEY_LOG_LEN], v[VAL_CHUNK_MAX];
	uint64_t seq = 700000;
	tally_entry e[2];
	tally_history_entry h[2];
	key_obj obj;
	int64_t c;
	size_t n;
	raw_db d;

	add_ok(f->t, &ev);
	tally_closep(&f->t);
	raw_open(&d, f->db);
	raw_first_log_obj(&d, &obj);
	for (int i = 0; i < 2; i++) {
		val_log lv = { 5, bad_at[i], 1, 1 };

		obj.content = 90 + (uint64_t)i;
		key_log_encode(k, &obj, seq);
		raw_put(&d, CF_LOG, k, KEY_LOG_LEN, v,
		        val_log_chunk_encode(v, &seq, &lv, 1, NULL));
	}
	{
		val_log lv = { 5, INT64_C(1700000000000), 1, 1 };
		uint64_t zero = 0;

		obj.content = 92;
		key_log_encode(k, &obj, 0);
		raw_put(&d, CF_LOG, k, KEY_LOG_LEN, v,
		        val_log_chunk_encode(v, &zero, &lv, 1, NULL));
	}
	{
		val_hist hv = { 0, 93, INT64_C(1700000000000), 1 };

		key_hist_encode(k, 4444, obj.ktype, seq);
		raw_put(&d, CF_HIST, k, KEY_HIST_LEN, v,
		        val_hist_chunk_encode(v, &seq, &hv, 1, NULL));
	}
	obj.content = 94;
	key_member_encode(k, &obj, 5);
	raw_put(&d, CF_MEMBERS, k, KEY_MEMBER_LEN, v, val_i64_encode(v, -5));
	raw_close(&d);
	CHECK_OK(tally_open(f->db, &f->opts, &f->t));
	for (uint64_t content = 90; content <= 92; content++) {
		CHECK_RC(tally_recent(f->t, "article", "like", content, 2, 0, e,
		                      &n), TALLY_ECORRUPT);
		CHECK_RC(tally_count_at(f->t, "article", "like", content,
		                        TALLY_AT_MS_MAX, &c), TALLY_ECORRUPT);
	}
	CHECK_RC(tally_history(f->t, 4444, "like", 2, 0, h, &n),
	         TALLY_ECORRUPT);
	CHECK_RC(tally_has(f->t, "article", "like", 94, 5, &c), TALLY_ECORRUPT);
	/* The rest reads on. */
	CHECK_OK(tally_recent(f->t, "article", "like", 1, 2, 0, e, &n));
	CHECK_U64(n, 1);
	CHECK_OK(tally_has(f->t, "article", "like", 1, 1, &c));
	{
		damaged_scan ds = { { 0, 0 } };

		CHECK_OK(tally_events_scan(f->t, damaged_scan_fn, &ds));
		CHECK_I64(ds.at[0], bad_at[0]);
		CHECK_I64(ds.at[1], bad_at[1]);
	}
}

/* Chunks that hold the same events, as a compaction that wrote a running
 * checkpoint's events apart from the newer ones leaves beside the
 * replay's chunks when the process dies before that checkpoint lands:
 * the replay's chunks hold events 1-4 and 5-8 (keyed at 1 and 5), the
 * compaction's left-over one 6-7 (keyed at 6). */
#define DUP_SEQ 600000
static void raw_put_overlapping_chunks(const char *dir, key_obj *obj)
{
	static const size_t from[3] = { 0, 4, 5 }, to[3] = { 4, 8, 7 };
	rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
	char *err = NULL;
	raw_db d;
	uint8_t k[KEY_LOG_LEN], v[VAL_CHUNK_MAX];
	uint64_t seq[8];
	val_log lv[8];

	raw_open(&d, dir);
	raw_first_log_obj(&d, obj);
	obj->content = 78;
	for (size_t c = 0; c < 3; c++) {
		size_t n = to[c] - from[c];

		/* Newest first: seq DUP_SEQ + to - 1 down to DUP_SEQ + from. */
		for (size_t i = 0; i < n; i++) {
			uint64_t e = to[c] - 1 - i; /* event 0..7 */

			seq[i] = DUP_SEQ + e;
			lv[i] = (val_log){ 5000 + e, INT64_C(1700000000000) +
			                   (int64_t)e, 1, (int64_t)e + 1 };
		}
		key_log_encode(k, obj, seq[n - 1]);
		size_t vlen = val_log_chunk_encode(v, seq, lv, n, NULL);
		rocksdb_put_cf(d.db, wo, d.h[CF_LOG], (const char *)k,
		               KEY_LOG_LEN, (const char *)v, vlen, &err);
		assert_null(err);
	}
	raw_close(&d);
	rocksdb_writeoptions_destroy(wo);
}

typedef struct dup_scan {
	uint64_t seq[16];
	size_t n;
} dup_scan;

static int dup_scan_fn(void *arg, const tally_event_rec *ev)
{
	dup_scan *d = arg;

	if (ev->content == 78 && d->n < 16)
		d->seq[d->n++] = ev->seq;
	return 0;
}

/* The event scan (tally export) lists each event of overlapping chunks
 * once, oldest first. (Builds whose compaction did not wait for a running
 * checkpoint left such chunks; RECENT and HISTORY list the left-over
 * chunk's events twice: docs/RELIABILITY.md.) */
static void test_overlapping_chunks_scanned_once(void **state)
{
	struct fx *f = *state;
	tally_event ev = ev_of("article", "view", 1, 1);
	dup_scan sc = { .n = 0 };
	key_obj obj;

	add_ok(f->t, &ev);
	tally_closep(&f->t);
	raw_put_overlapping_chunks(f->db, &obj);
	CHECK_OK(tally_open(f->db, &f->opts, &f->t));
	CHECK_OK(tally_events_scan(f->t, dup_scan_fn, &sc));
	CHECK_U64(sc.n, 8);
	for (size_t i = 0; i < sc.n; i++)
		CHECK_U64(sc.seq[i], DUP_SEQ + i);
}

/* Results of a group's writes, in order (callbacks run in order). */
typedef struct group_res {
	int err[4];
	size_t n;
} group_res;

static void group_res_cb(void *arg, int err, int64_t result)
{
	group_res *g = arg;

	(void)result;
	if (g->n < 4)
		g->err[g->n++] = err;
}

/* A stored value that does not decode fails the writes that read it, not
 * their batch: a corrupt counter in the same group as the first like of
 * a new content type fails alone; the like, and the type's record, go in,
 * so the next open gives the next new name an id of its own. (Before, the
 * whole batch failed, the type's id stayed published with no name on
 * disk, and the next open gave it, events and all, to "video".) */
static void test_corrupt_value_fails_only_its_writes(void **state)
{
	struct fx *f = *state;
	tally_options o = { .flags = TALLY_OPEN_CALLER_COMMITS };
	tally_event post = ev_of("post", "like", 1, 1);
	tally_event video = ev_of("video", "like", 1, 2);
	static const uint8_t bad[11] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	                                 0xff, 0xff, 0xff, 0xff, 0xff };
	rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
	tally_write ws[2] = { write_incrby("k", 1, 1) };
	group_res g = { .n = 0 };
	char *err = NULL;
	raw_db d;

	tally_event first = ev_of("article", "like", 1, 1);

	add_ok(f->t, &first);
	tally_closep(&f->t);
	raw_open(&d, f->db);
	rocksdb_put_cf(d.db, wo, d.h[CF_NAMED], "k", 1, (const char *)bad,
	               sizeof bad, &err);
	assert_null(err);
	raw_close(&d);
	rocksdb_writeoptions_destroy(wo);
	fx_reopen_with(f, &o);
	{
		int64_t v;

		CHECK_RC(tally_get(f->t, "k", 1, &v), TALLY_ECORRUPT);
	}
	/* The add queues "post"'s record, then the group: one batch. */
	ws[1].kind = TALLY_W_ADD;
	ws[1].event = post;
	CHECK_OK(tally_write_group_async(f->t, ws, 2, group_res_cb, &g));
	CHECK_OK(tally_commit(f->t));
	CHECK_U64(g.n, 2);
	CHECK_RC(g.err[0], TALLY_ECORRUPT);
	CHECK_OK(g.err[1]);
	{
		int64_t c;

		/* A retry counts once; the store serves on. */
		CHECK_OK(tally_add(f->t, &post, &c));
		CHECK_I64(c, 1);
		CHECK_RC(tally_incrby(f->t, "k", 1, 1, &c), TALLY_ECORRUPT);
		/* SET writes over the corrupt value: the counter is mended. */
		CHECK_OK(tally_set(f->t, "k", 1, 5));
		CHECK_OK(tally_incrby(f->t, "k", 1, 1, &c));
		CHECK_I64(c, 6);
	}
	fx_reopen(f);
	CHECK_I64(get_of(f->t, "k"), 6);
	CHECK_I64(add_ok(f->t, &video), 1);
	CHECK_I64(count_of(f->t, "post", "like", 1), 1);
	CHECK_I64(count_of(f->t, "video", "like", 1), 1);
	fx_reopen(f);
	CHECK_I64(count_of(f->t, "post", "like", 1), 1);
	CHECK_I64(count_of(f->t, "video", "like", 1), 1);
}

/* Makes a closed folder look written before the clock at seq: format 4,
 * the last seq `seq`, no samples in META. */
static void raw_as_format4_at(const char *dir, uint64_t seq)
{
	rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
	rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
	rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
	const char tag = META_CLOCK, skey = META_SEQ, fkey = META_FORMAT;
	char *err = NULL, sval[8], fval = 4;
	size_t klen;
	raw_db d;

	raw_open(&d, dir);
	rocksdb_iterator_t *it = rocksdb_create_iterator_cf(d.db, ro,
	                                                    d.h[CF_META]);
	for (rocksdb_iter_seek(it, &tag, 1); rocksdb_iter_valid(it);
	     rocksdb_iter_next(it)) {
		const char *k = rocksdb_iter_key(it, &klen);

		if (klen == 0 || k[0] != META_CLOCK)
			break;
		rocksdb_writebatch_delete_cf(wb, d.h[CF_META], k, klen);
	}
	rocksdb_iter_destroy(it);
	for (int i = 0; i < 8; i++)
		sval[i] = (char)(seq >> (56 - 8 * i));
	rocksdb_writebatch_put_cf(wb, d.h[CF_META], &skey, 1, sval, 8);
	rocksdb_writebatch_put_cf(wb, d.h[CF_META], &fkey, 1, &fval, 1);
	rocksdb_write(d.db, wo, wb, &err);
	assert_null(err);
	raw_close(&d);
	rocksdb_writebatch_destroy(wb);
	rocksdb_writeoptions_destroy(wo);
	rocksdb_readoptions_destroy(ro);
}

/* Events of seqs from UP_FROM + 1 on, by seq. */
#define UP_N 1500
#define UP_FROM ((EV_CLOCK_BLOCK * EV_CLOCK_EVERY) - 700)
static int up_scan_fn(void *arg, const tally_event_rec *ev)
{
	int64_t *seen = arg;

	if (ev->seq <= UP_FROM)
		return 0;
	if (ev->seq > UP_FROM + UP_N || seen[ev->seq - UP_FROM - 1] != 0)
		return 1;
	seen[ev->seq - UP_FROM - 1] = ev->at_ms;
	return 0;
}

/* A folder upgraded from format 4 in the middle of a clock block, and of
 * the last block of the clock's first table of blocks: the events of
 * that block have no sample (their chunks stay format 4) and the clock
 * goes on from the next block, in a table of its own, leaving the
 * first unallocated. Every time reads back exact, before and after a
 * reopen loads the clock from META. */
static void test_clock_after_upgrade_mid_block(void **state)
{
	struct fx *f = *state;
	static int64_t at[UP_N], seen[UP_N];
	tally_event ev;

	/* An empty folder: a format 5 chunk would need the samples that
	 * raw_as_format4_at() takes away. */
	tally_closep(&f->t);
	raw_as_format4_at(f->db, UP_FROM);
	CHECK_OK(tally_open(f->db, &f->opts, &f->t));
	for (size_t i = 0; i < UP_N; i++) {
		ev = ev_of("article", "view", i % 5, 1 + i % 13);
		at[i] = INT64_C(1700000000000) + (int64_t)i * 2;
		ev.at_ms = at[i];
		add_ok(f->t, &ev);
	}
	/* Before any checkpoint, after the close's (chunks), after a
	 * reopen of that. */
	for (int round = 0; round < 3; round++) {
		if (round > 0)
			fx_reopen(f);
		memset(seen, 0, sizeof seen);
		CHECK_OK(tally_events_scan(f->t, up_scan_fn, seen));
		for (size_t i = 0; i < UP_N; i++)
			CHECK_I64(seen[i], at[i]);
	}
}

/* Times coded against the clock (a sample every EV_CLOCK_EVERY events,
 * kept in META) read back exact: after a reopen (samples from META),
 * through RECENT, HISTORY and the scan, with checkpoints every 256
 * events, and with samples whose own time is far from their
 * neighbours' (an AT in the past). */
#define CLK_N 5000
static int clk_scan_fn(void *arg, const tally_event_rec *ev)
{
	int64_t *seen = arg;

	if (ev->seq < 1 || ev->seq > CLK_N || seen[ev->seq - 1] != 0)
		return 1;
	seen[ev->seq - 1] = ev->at_ms;
	return 0;
}

static void test_clock_times_read_back(void **state)
{
	struct fx *f = *state;
	tally_options o = f->opts;
	static int64_t at[CLK_N], seen[CLK_N];
	tally_entry page[64];
	tally_history_entry hp[64];
	uint64_t before;
	size_t got, k;

	o.cache_entries_max = 1024;
	fx_reopen_with(f, &o);
	for (size_t i = 0; i < CLK_N; i++) {
		tally_event ev = ev_of("article", "view", i % 7, 1 + i % 11);

		/* Seq i + 1: slot i / EV_CLOCK_EVERY samples event i. */
		at[i] = INT64_C(1700000000000) + (int64_t)i * 3;
		if (i % EV_CLOCK_EVERY == 0 && i % (2 * EV_CLOCK_EVERY) != 0)
			at[i] = INT64_C(1500000000000) + (int64_t)i;
		if (i % 97 == 5)
			at[i] = INT64_C(1800000000000) - (int64_t)i;
		ev.at_ms = at[i];
		add_ok(f->t, &ev);
	}
	for (int round = 0; round < 2; round++) {
		fx_reopen_with(f, &o);
		memset(seen, 0, sizeof seen);
		CHECK_OK(tally_events_scan(f->t, clk_scan_fn, seen));
		for (size_t i = 0; i < CLK_N; i++)
			CHECK_I64(seen[i], at[i]);
		/* Object 3's events, newest first. */
		before = 0;
		k = CLK_N;
		do {
			CHECK_OK(tally_recent(f->t, "article", "view", 3, 64,
			                      before, page, &got));
			for (size_t j = 0; j < got; j++) {
				while (k > 0 && (k - 1) % 7 != 3)
					k--;
				assert_true(k > 0);
				k--;
				CHECK_U64(page[j].seq, k + 1);
				CHECK_I64(page[j].at_ms, at[k]);
				before = page[j].seq;
			}
		} while (got == 64);
		/* Member 5's history, newest first. */
		before = 0;
		k = CLK_N;
		do {
			CHECK_OK(tally_history(f->t, 5, "view", 64, before, hp,
			                       &got));
			for (size_t j = 0; j < got; j++) {
				while (k > 0 && (k - 1) % 11 != 4)
					k--;
				assert_true(k > 0);
				k--;
				CHECK_U64(hp[j].seq, k + 1);
				CHECK_I64(hp[j].at_ms, at[k]);
				before = hp[j].seq;
			}
		} while (got == 64);
	}
}

/* Events written by checkpoints in chunks (up to EV_CHUNK_MAX of one
 * object's or one member's events per entry) read back field by field:
 * RECENT and HISTORY page through them with cursors that land inside
 * chunks, count-at-time walks them, and the scan hands them over oldest
 * first. Times go back now and then (AT), deltas vary, and some events
 * are anonymous. */
#define CK_N 700
#define CK_H 300

struct ck_scan {
	size_t n;
	uint64_t last_seq;
	int64_t delta[CK_N];
	int64_t total[CK_N];
};

static int ck_scan_fn(void *arg, const tally_event_rec *ev)
{
	struct ck_scan *c = arg;

	if (ev->content != 5 || strcmp(ev->ktype, "view") != 0)
		return 0;
	if (c->n >= CK_N || ev->seq <= c->last_seq)
		return 1;
	c->last_seq = ev->seq;
	c->delta[c->n] = ev->delta;
	c->total[c->n++] = ev->total;
	return 0;
}

static void test_chunked_events_read_back(void **state)
{
	struct fx *f = *state;
	tally_options o = f->opts;
	static uint64_t member[CK_N];
	static int64_t at[CK_N], delta[CK_N], total[CK_N];
	static struct ck_scan sc;
	tally_entry page[50];
	tally_history_entry hp[40];
	uint64_t before = 0;
	size_t got, k;
	int64_t sum = 0;

	o.cache_entries_max = 1024; /* a checkpoint every 256 events */
	fx_reopen_with(f, &o);
	for (size_t i = 0; i < CK_N; i++) {
		tally_event ev = ev_of("article", "view", 5,
		                       i % 50 == 0 ? 0 : 1000 + (i * 7919) % 5000);

		member[i] = ev.member;
		at[i] = INT64_C(1700000000000) + (int64_t)i * 10 -
		        (i % 13 == 0 ? 5000 : 0);
		delta[i] = 1 + (int64_t)(i % 5);
		ev.at_ms = at[i];
		ev.delta = delta[i];
		sum += delta[i];
		total[i] = sum;
		CHECK_I64(add_ok(f->t, &ev), sum);
	}
	for (uint64_t c = 0; c < CK_H; c++) {
		tally_event ev = ev_of("article", "view", 100 + c, 9999999);

		ev.at_ms = INT64_C(1700000000000) + (int64_t)c;
		add_ok(f->t, &ev);
	}
	fx_reopen(f); /* every event in the tables, none in memory */

	/* RECENT: the named events, newest first, in pages of 50. */
	k = CK_N;
	do {
		CHECK_OK(tally_recent(f->t, "article", "view", 5, 50, before,
		                      page, &got));
		for (size_t j = 0; j < got; j++) {
			while (k > 0 && member[k - 1] == 0)
				k--;
			assert_true(k > 0);
			k--;
			CHECK_U64(page[j].member, member[k]);
			CHECK_I64(page[j].at_ms, at[k]);
			CHECK_I64(page[j].delta, delta[k]);
			assert_true(before == 0 || page[j].seq < before);
			before = page[j].seq;
		}
	} while (got == 50);
	while (k > 0 && member[k - 1] == 0)
		k--;
	CHECK_U64(k, 0);

	/* Count at a time: the total after the newest event at or before
	 * it (times are not in seq order here). */
	for (size_t i = 0; i < CK_N; i += 37) {
		int64_t want = 0;

		for (size_t j = CK_N; j-- > 0;)
			if (at[j] <= at[i]) {
				want = total[j];
				break;
			}
		CHECK_I64(count_at_of(f->t, "article", "view", 5, at[i]), want);
	}

	/* HISTORY: member 9999999's 300 views, newest first, in pages of 40. */
	before = 0;
	k = CK_H;
	do {
		CHECK_OK(tally_history(f->t, 9999999, "view", 40, before, hp,
		                       &got));
		for (size_t j = 0; j < got; j++) {
			assert_true(k > 0);
			k--;
			CHECK_U64(hp[j].content, 100 + k);
			CHECK_I64(hp[j].at_ms, INT64_C(1700000000000) + (int64_t)k);
			CHECK_I64(hp[j].delta, 1);
			assert_string_equal(hp[j].ctype, "article");
			before = hp[j].seq;
		}
	} while (got == 40);
	CHECK_U64(k, 0);

	/* The scan: every event of the object, oldest first, with its
	 * running total. */
	memset(&sc, 0, sizeof sc);
	CHECK_OK(tally_events_scan(f->t, ck_scan_fn, &sc));
	CHECK_U64(sc.n, CK_N);
	for (size_t i = 0; i < CK_N; i++) {
		CHECK_I64(sc.delta[i], delta[i]);
		CHECK_I64(sc.total[i], total[i]);
	}
}

/* Events stay in memory until a checkpoint writes them to the tables
 * (here every 256 events: cache_entries_max / 4). Reads merge both,
 * without losing or repeating an event, and a crash image replays the
 * ones in memory from the journal. */
static void test_events_in_memory_merge_with_tables(void **state)
{
	struct fx *f = *state;
	tally_options o = f->opts;
	char img[PATH_MAX];
	uint64_t seen[2] = { 0, 0 };
	tally_stats st;
	tally *c = NULL;
	const uint64_t n = 1000;

	o.cache_entries_max = 1024;
	fx_reopen_with(f, &o);
	for (uint64_t m = 1; m <= n; m++) {
		tally_event ev = ev_of("article", "like", 1, m);

		add_ok(f->t, &ev);
		if (m % 10 == 0)
			remove_ok(f->t, &ev);
	}
	tally_event ev7 = ev_of("article", "like", 2, 7);
	add_ok(f->t, &ev7);
	CHECK_OK(tally_stats_get(f->t, &st));
	CHECK_TRUE(st.store_checkpoints >= 2);
	/* Each checkpoint took a quarter of cache_entries_max events: 256
	 * events of one object (its log in two chunks) and of 232 or more
	 * members (a history entry and a membership each, the removed ones'
	 * add and remove in one chunk and one delete); the batches themselves
	 * wrote the content type's registration only. */
	if (st.store_checkpoint_entries < st.store_checkpoints * (2 + 232 * 2))
		fail_msg("%" PRIu64 " checkpoints wrote %" PRIu64 " entries",
		         st.store_checkpoints, st.store_checkpoint_entries);
	CHECK_TRUE(st.store_entries <= 2);
	check_events_merged(f->t, n);
	CHECK_OK(tally_events_scan(f->t, count_scanned, seen));
	CHECK_U64(seen[0], n + n / 10 + 1);

	/* What kill -9 leaves: the events of the records after the last
	 * checkpoint come back from the journal. */
	snprintf(img, sizeof img, "%s/img", f->dir);
	copy_folder(f->db, img);
	CHECK_OK(tally_open(img, &o, &c));
	check_events_merged(c, n);
	CHECK_OK(tally_stats_get(c, &st));
	CHECK_U64(st.last_seq, n + n / 10 + 1);
	tally_closep(&c);

	/* A clean close writes them all to the tables. */
	fx_reopen(f);
	check_events_merged(f->t, n);
	seen[0] = seen[1] = 0;
	CHECK_OK(tally_events_scan(f->t, count_scanned, seen));
	CHECK_U64(seen[0], n + n / 10 + 1);
}

/* Completions of one group of writes (one callback per write). */
struct group_rec {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	size_t done, errs;
};

static void group_cb(void *arg, int err, int64_t result)
{
	struct group_rec *g = arg;

	(void)result;
	pthread_mutex_lock(&g->mu);
	g->done++;
	g->errs += err != TALLY_OK;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

/* Whether a like counts is decided by the membership wherever it is: in
 * the batch, in the events in memory, or, once checkpoints wrote it and
 * left memory, in the table only, which a batch reads in one batched
 * lookup per block of its writes. One group (one batch) re-adds members
 * of all three kinds, one of them twice, and removes one. */
static void test_membership_from_tables_decides_unique(void **state)
{
	struct fx *f = *state;
	tally_options o = f->opts;
	enum { N = 600, RE = 200, G = RE + 2 };
	tally_write *ws = calloc(G, sizeof *ws);
	/* Heap, and leaked on a time-out, as in run_batch(). */
	struct group_rec *g = calloc(1, sizeof *g);
	struct timespec until;
	tally_stats st;
	int64_t at = 0;

	assert_non_null(ws);
	assert_non_null(g);
	o.cache_entries_max = 1024; /* a checkpoint every 256 events */
	fx_reopen_with(f, &o);
	for (uint64_t m = 1; m <= N; m++) {
		tally_event ev = ev_of("article", "like", 1, m);

		ev.at_ms = (int64_t)(1000 + m);
		add_ok(f->t, &ev);
		if (m % 10 == 0)
			remove_ok(f->t, &ev);
	}
	CHECK_OK(tally_stats_get(f->t, &st));
	CHECK_TRUE(st.store_checkpoints >= 2);
	CHECK_I64(count_of(f->t, "article", "like", 1), N - N / 10);

	for (size_t i = 0; i < RE; i++) {
		ws[i].kind = TALLY_W_ADD;
		ws[i].event = ev_of("article", "like", 1, i + 1);
	}
	ws[RE].kind = TALLY_W_ADD;
	ws[RE].event = ev_of("article", "like", 1, 1);
	ws[RE + 1].kind = TALLY_W_REMOVE;
	ws[RE + 1].event = ev_of("article", "like", 1, 5);
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cv, NULL);
	CHECK_OK(tally_write_group_async(f->t, ws, G, group_cb, g));
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 60;
	pthread_mutex_lock(&g->mu);
	while (g->done < G &&
	       pthread_cond_timedwait(&g->cv, &g->mu, &until) == 0) {
	}
	pthread_mutex_unlock(&g->mu);
	if (g->done < G)
		fail_msg("only %zu of %d callbacks ran within 60 s", g->done, G);
	CHECK_U64(g->errs, 0);
	/* Of members 1..200, the 20 removed ones count again; member 1's
	 * second add changes nothing; member 5 leaves. */
	CHECK_I64(count_of(f->t, "article", "like", 1),
	          N - N / 10 + RE / 10 - 1);
	CHECK_OK(tally_has(f->t, "article", "like", 1, 1, &at));
	CHECK_I64(at, 1001); /* the first add's time: the re-add was a no-op */
	CHECK_RC(tally_has(f->t, "article", "like", 1, 5, NULL),
	         TALLY_ENOTFOUND);
	CHECK_OK(tally_has(f->t, "article", "like", 1, 10, NULL));
	CHECK_OK(tally_has(f->t, "article", "like", 1, 599, NULL));
	pthread_cond_destroy(&g->cv);
	pthread_mutex_destroy(&g->mu);
	free(g);
	free(ws);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_like_twice_counts_once),
	    T(test_remove_of_non_member_is_noop),
	    T(test_total_type_adds_and_subtracts_delta),
	    T(test_async_batch_add_remove_same_member_ends_right),
	    T(test_incrby_overflow_changes_nothing),
	    T(test_incrby_int64_min_on_negative_refused),
	    T(test_total_type_overflow_changes_nothing),
	    T(test_set_get_del_semantics),
	    T(test_mget_missing_key_found_zero),
	    T(test_idempotent_add_retry_returns_first_result),
	    T(test_write_takes_the_event_id),
	    T(test_default_times_follow_commit_order),
	    T(test_idempotent_incrby_retry_returns_first_result),
	    T(test_idempotency_token_survives_reopen),
	    T(test_token_window_runs_while_open),
	    T(test_token_window_counts_time_before_close),
	    T(test_tokens_past_memory_answered_from_store),
	    T(test_count_at_time),
	    T(test_recent_newest_first_paged),
	    T(test_recent_lists_removes_of_unique_type),
	    T(test_anonymous_member_counted_not_listed),
	    T(test_has_returns_at_ms_given),
	    T(test_has_on_total_type_is_emode),
	    T(test_history_across_objects_and_ctypes_paged),
	    T(test_mcount_many_objects),
	    T(test_journal_checkpoints_keep_every_value),
	    T(test_journal_records_in_meta_are_deleted),
	    T(test_checkpoints_carry_clean_values),
	    T(test_mcount_mixes_memory_and_tables),
	    T(test_mget_mixes_memory_and_tables),
	    T(test_journal_files_hold_counter_batches),
	    T(test_journal_file_cut_where_its_scan_ends),
	    T(test_journal_gap_after_turn_replays_none_past_it),
	    T(test_compact_syncs_the_journal_first),
	    T(test_events_in_memory_merge_with_tables),
	    T(test_membership_from_tables_decides_unique),
	    T(test_chunked_events_read_back),
	    T(test_store_format_upgrade_and_refusal),
	    T(test_unnamed_ctype_id_is_corrupt),
	    T(test_damaged_token_clock_is_let_be),
	    T(test_format4_chunks_read_after_upgrade),
	    T(test_overlapping_chunks_scanned_once),
	    T(test_damaged_event_fields_are_corrupt),
	    T(test_corrupt_value_fails_only_its_writes),
	    T(test_clock_after_upgrade_mid_block),
	    T(test_clock_times_read_back),
	    T(test_counts_returns_every_type),
	    T(test_unknown_type_is_enotype),
	    T(test_type_add_then_use_survives_reopen),
	    T(test_type_add_same_mode_ok_other_mode_exists),
	    T(test_types_lists_builtins_with_modes),
	    T(test_ids_full_u64_range_do_not_collide),
	    T(test_keys_512_binary_ok_513_and_0_refused),
	    T(test_everything_survives_reopen),
	    T(test_backup_copy_opens_with_data),
	    T(test_scan_lists_each_object_together),
	    T(test_read_only_handle_reads_and_writes_nothing),
	    T(test_compact_usage_scan_and_counters),
	    T(test_compact_then_checkpoint_logs_each_event_once),
	    T(test_stats_count_writes),
	    T(test_threads_incrby_async_writes_sync_durability_exact),
	    T(test_threads_incrby_blocking_async_durability_exact),
	    T(test_threads_incrby_caller_commits_exact),
	    T(test_caller_commits_on_the_calling_thread),
	    T(test_threads_counter_add_exact),
	    T(test_counter_add_after_queued_write_in_order),
	    T(test_tokens_renewed_after_expiry_hold_back_none),
	    T(test_counter_add_beside_many_queued_writes),
	    T(test_threads_like_overlapping_members_exact),
	    T(test_write_group_is_contiguous_and_one_batch),
	    T(test_bad_input_null_handle_einval),
	    T(test_bad_input_null_pointers_einval),
	    T(test_bad_input_sizes_and_limits_refused),
	    T(test_bad_input_event_fields_refused),
	    T(test_open_bad_options_einval),
	    T(test_open_accepts_boundary_options),
	    T(test_open_no_create_and_busy),
	    T(test_close_null_and_closep_twice_safe),
	    T(test_strerror_every_code_non_empty),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
