/* tally_bench.c: the in-process benchmark of libtally: write throughput of
 * hot and random counters and of likes, store entries and fsyncs per write,
 * and bytes on disk per like; and, without libtally, what one durable write
 * costs the disk (disk-flush). Every workload that counts checks its counts
 * for exactness and fails loudly: a benchmark that counts wrong is worse
 * than none. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>


#include "tally.h"

/* ---- limits: each bounds a loop, a buffer or a run ---------------------- */

#define PATH_CAP 4096
#define SECONDS_DEFAULT 5
#define SECONDS_MAX 3600
/* In-flight writes per thread: enough to fill a group commit, well under
 * the engine's default queue (65536) so the window, not the queue's
 * backpressure, is what paces a producer. */
#define WINDOW_DEFAULT 1024
#define WINDOW_MAX 65536
#define LIKES_DEFAULT 1000000
#define LIKES_MAX 100000000
#define KEYSPACE 1000000u        /* incr-random-sync: keys k0000000.. */
#define LIKE_CONTENTS 100000u    /* likes: content ids 1..this */
#define LIKE_MEMBERS 10000000u   /* likes: member ids 1..this */
/* Likes remembered for the exactness check (8 bytes each, 512 MiB at
 * most); a run that reaches it stops early and says so. */
#define PAIRS_MAX (64u << 20)
#define PAIRS_FIRST (1u << 20)
/* Bound of every producer loop; no real run comes near it. */
#define OPS_PER_THREAD_MAX (UINT64_C(1) << 40)
/* No completion for this long means the engine is stuck: fail. */
#define STALL_S 60
#define MULTI_CHUNK TALLY_MULTI_MAX
#define HAS_CHECKS 1000
#define WALK_DEPTH_MAX 8
#define WALK_ENTRIES_MAX 100000
#define CF_MAX 16
#define MISMATCH_SHOWN 5
/* disk-flush: records of about a batch of INCRs at -P 16 (a few hundred
 * journal entries), written in place over a file zeroed and synced first,
 * so that each fdatasync writes the record alone, as the journal's do. */
#define FLUSH_REC 3000
#define FLUSH_FILE ((size_t)16 << 20)
#define FLUSH_SAMPLES_MAX (1u << 20)

#define HOT_KEY "hot"
#define HOT_KEY_LEN 3
#define LIKE_CTYPE "article"
#define LIKE_KTYPE "like"

/* statfs magic numbers of the filesystems we name (linux/magic.h). */
#define FS_TMPFS 0x01021994L
#define FS_RAMFS 0x858458f6L

enum kind {
	K_HOT = 1,  /* pipelined tally_write_async INCRBY of one key */
	K_RANDOM,   /* pipelined INCRBY of random keys */
	K_LIKE,     /* pipelined ADD of likes */
	K_STRIPED,  /* blocking tally_counter_add of one key */
	K_INCRBY,   /* blocking tally_incrby of one key */
	K_BYTES,    /* a fixed number of likes, then bytes on disk */
	K_FLUSH     /* no libtally: one durable write's cost on this disk */
};

typedef struct workload {
	const char *name;    /* "group/variant"; selectable by either */
	int kind;
	int durability;
	int threads;
	uint32_t contents;   /* likes: articles 1..this (0: not a like workload) */
	const char *about;
} workload;

static const workload workloads[] = {
	{ "incr-hot-sync-1t", K_HOT, TALLY_DURABILITY_SYNC, 1, 0,
	  "one key, INCRBY via tally_write_async, window per thread" },
	{ "incr-hot-sync-2t", K_HOT, TALLY_DURABILITY_SYNC, 2, 0,
	  "as above, two threads" },
	{ "incr-hot-async-1t/counter_add", K_STRIPED, TALLY_DURABILITY_ASYNC, 1,
	  0, "one key, blocking tally_counter_add (striped cells)" },
	{ "incr-hot-async-1t/incrby", K_INCRBY, TALLY_DURABILITY_ASYNC, 1,
	  0, "one key, blocking tally_incrby" },
	{ "incr-hot-async-2t/counter_add", K_STRIPED, TALLY_DURABILITY_ASYNC, 2,
	  0, "as above, two threads" },
	{ "incr-hot-async-2t/incrby", K_INCRBY, TALLY_DURABILITY_ASYNC, 2,
	  0, "as above, two threads" },
	{ "incr-random-sync", K_RANDOM, TALLY_DURABILITY_SYNC, 1, 0,
	  "INCRBY of random keys out of 1M, pipelined" },
	{ "likes-sync", K_LIKE, TALLY_DURABILITY_SYNC, 1, LIKE_CONTENTS,
	  "ADD like on article 1..100000 by member 1..10M, pipelined" },
	{ "likes-hot-sync", K_LIKE, TALLY_DURABILITY_SYNC, 1, 1,
	  "ADD like on one article by member 1..10M, pipelined" },
	{ "bytes-per-like", K_BYTES, TALLY_DURABILITY_SYNC, 1, LIKE_CONTENTS,
	  "--likes likes pipelined, close, bytes on disk per like" },
	{ "disk-flush", K_FLUSH, TALLY_DURABILITY_SYNC, 1, 0,
	  "3000 bytes pwritten in place + fdatasync, one at a time" },
};
#define WORKLOADS_N (sizeof workloads / sizeof workloads[0])

typedef struct config {
	char dir[PATH_CAP];  /* parent of the per-workload databases */
	char fs[16];         /* its filesystem, for the report */
	uint64_t seconds;
	uint64_t window;
	uint64_t likes;
	uint64_t seed;
	int json, keep, allow_tmpfs;
	int selected[WORKLOADS_N];
} config;

/* One run of a workload: what every worker shares. */
typedef struct bench_run {
	tally *t;
	int kind;
	int threads;
	uint32_t contents;     /* likes: articles 1..this */
	uint64_t window;
	uint64_t limit;        /* writes per thread, 0 for none */
	uint64_t deadline_ns;  /* 0 for none */
	_Atomic int abort;     /* a worker failed: the others stop */
} bench_run;

typedef struct worker {
	bench_run *r;
	pthread_t thread;
	uint64_t rng;
	uint64_t issued;           /* producer: writes queued */
	int rc;                    /* producer's verdict: 0 or -1 */
	/* Completions: callbacks on the committer, or the blocking caller. */
	_Atomic uint64_t done;
	_Atomic uint64_t failed;
	_Atomic int first_err;
	_Atomic int out_of_order;
	_Atomic int64_t last_result;
	/* A producer waiting for its window to drain. */
	_Atomic int waiting;
	_Atomic uint64_t wake_at;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* What this worker wrote, for the exactness check. */
	uint32_t *expect;          /* K_RANDOM: adds per key */
	uint64_t *pairs;           /* K_LIKE: content << 32 | member */
	size_t pairs_len, pairs_cap;
	int capped;
	char key[16];
} worker;

/* The state every check compares the database against. */
typedef struct truth {
	int64_t hot;               /* the hot key's value */
	uint32_t *keys;            /* K_RANDOM: value per key */
	uint32_t *per_content;     /* likes per content id */
	uint64_t *pairs;           /* distinct likes, sorted */
	size_t npairs;
	uint64_t submitted;        /* likes acknowledged */
} truth;

typedef struct result {
	double seconds;
	uint64_t ops;              /* acknowledged writes */
	tally_stats st;
	int capped;
} result;

/* ---- small helpers ------------------------------------------------------- */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int fail_tally(const char *what, int rc)
{
	fprintf(stderr, "tally_bench: %s: %s (%d)\n", what, tally_strerror(rc),
	        rc);
	return -1;
}

/* splitmix64: fast, and good enough to spread keys and members. */
static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static size_t key_format(char *buf, size_t cap, uint32_t k)
{
	int n = snprintf(buf, cap, "k%07" PRIu32, k);

	return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0.0;
}

/* ---- output: one line per result, key=value or a flat JSON object ------- */

typedef struct emit {
	int json;
	int first;
} emit;

static void emit_begin(emit *e, int json)
{
	e->json = json;
	e->first = 1;
	fputs(json ? "{" : "", stdout);
}

static void emit_key(emit *e, const char *k)
{
	if (e->json)
		printf("%s\"%s\":", e->first ? "" : ",", k);
	else
		printf("%s%s=", e->first ? "" : " ", k);
	e->first = 0;
}

static void emit_u64(emit *e, const char *k, uint64_t v)
{
	emit_key(e, k);
	printf("%" PRIu64, v);
}

static void emit_f(emit *e, const char *k, double v)
{
	emit_key(e, k);
	printf("%.6f", v);
}

/* Strings here are workload and filesystem names: no quotes, no
 * backslashes, no spaces; anything else is replaced so the line stays
 * valid JSON and one word. */
static void emit_str(emit *e, const char *k, const char *v)
{
	emit_key(e, k);
	fputs(e->json ? "\"" : "", stdout);
	for (size_t i = 0; v[i] != '\0' && i < PATH_CAP; i++) {
		char ch = v[i];

		putchar(ch == '"' || ch == '\\' || ch == ' ' ||
		        (unsigned char)ch < 0x20 ? '_' : ch);
	}
	fputs(e->json ? "\"" : "", stdout);
}

static void emit_end(emit *e)
{
	puts(e->json ? "}" : "");
	fflush(stdout);
}

/* ---- the data folder ----------------------------------------------------- */

static const char *fs_name(long type)
{
	switch (type) {
	case 0xEF53L: return "ext4";
	case 0x58465342L: return "xfs";
	case 0x9123683EL: return "btrfs";
	case 0x2FC12FC1L: return "zfs";
	case 0x794c7630L: return "overlayfs";
	case FS_TMPFS: return "tmpfs";
	case FS_RAMFS: return "ramfs";
	case 0x6969L: return "nfs";
	default: return "other";
	}
}

static int fs_type(const char *path, long *type)
{
	struct statfs sf;

	if (statfs(path, &sf) != 0)
		return -1;
	*type = (long)sf.f_type;
	return 0;
}

static int is_memory_fs(long type)
{
	return type == FS_TMPFS || type == FS_RAMFS;
}

/* The default parent folder: /tmp when it is on a disk (fsync on tmpfs
 * is free and would make every figure a lie), else ./bench-data. */
static int dir_default(config *c)
{
	long type = 0;

	if (fs_type("/tmp", &type) == 0 && !is_memory_fs(type)) {
		snprintf(c->dir, sizeof c->dir, "%s", "/tmp");
		return 0;
	}
	snprintf(c->dir, sizeof c->dir, "%s", "bench-data");
	if (mkdir(c->dir, 0755) != 0 && errno != EEXIST) {
		perror("tally_bench: mkdir bench-data");
		return -1;
	}
	return 0;
}

static int dir_prepare(config *c)
{
	long type = 0;

	if (c->dir[0] == '\0' && dir_default(c) != 0)
		return -1;
	if (mkdir(c->dir, 0755) != 0 && errno != EEXIST) {
		fprintf(stderr, "tally_bench: mkdir %s: %s\n", c->dir,
		        strerror(errno));
		return -1;
	}
	if (fs_type(c->dir, &type) != 0) {
		fprintf(stderr, "tally_bench: statfs %s: %s\n", c->dir,
		        strerror(errno));
		return -1;
	}
	snprintf(c->fs, sizeof c->fs, "%s", fs_name(type));
	if (is_memory_fs(type) && !c->allow_tmpfs) {
		fprintf(stderr, "tally_bench: %s is on %s: fsync costs nothing "
		        "there; use --dir on a disk (or --allow-tmpfs)\n",
		        c->dir, c->fs);
		return -1;
	}
	return 0;
}

/* A fresh folder for one workload's database, named after it. */
static int db_dir_make(const config *c, const workload *wl, char *path)
{
	int n = snprintf(path, PATH_CAP, "%s/tally-bench-%s-XXXXXX", c->dir,
	                 wl->name);

	if (n < 0 || n >= PATH_CAP) {
		fprintf(stderr, "tally_bench: --dir too long\n");
		return -1;
	}
	for (char *p = path + strlen(c->dir) + 1; *p != '\0'; p++)
		if (*p == '/')
			*p = '.';
	if (mkdtemp(path) == NULL) {
		fprintf(stderr, "tally_bench: mkdtemp %s: %s\n", path,
		        strerror(errno));
		return -1;
	}
	return 0;
}

/* Bytes of a database folder by kind of file. */
typedef struct usage {
	uint64_t total, sst, wal, other, files;
} usage;

static int has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Walk a folder (depth and entries bounded); with usage, add up file
 * sizes; without, remove everything. */
static int dir_walk(const char *path, usage *u, int depth)
{
	DIR *d = opendir(path);
	struct dirent *de;
	int rc = 0, seen = 0;

	if (d == NULL)
		return -1;
	if (depth > WALK_DEPTH_MAX) {
		closedir(d);
		return -1;
	}
	while ((de = readdir(d)) != NULL && seen++ < WALK_ENTRIES_MAX) {
		char sub[PATH_CAP];
		struct stat sb;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (snprintf(sub, sizeof sub, "%s/%s", path, de->d_name) >=
		    (int)sizeof sub || lstat(sub, &sb) != 0) {
			rc = -1;
			continue;
		}
		if (S_ISDIR(sb.st_mode)) {
			rc |= dir_walk(sub, u, depth + 1);
			if (u == NULL && rmdir(sub) != 0)
				rc = -1;
		} else if (u == NULL) {
			rc |= unlink(sub) != 0 ? -1 : 0;
		} else {
			uint64_t sz = (uint64_t)sb.st_size;

			u->total += sz;
			u->files++;
			*(has_suffix(de->d_name, ".sst") ? &u->sst :
			  has_suffix(de->d_name, ".log") ? &u->wal : &u->other) += sz;
		}
	}
	closedir(d);
	return rc;
}

static void dir_remove(const char *path)
{
	if (dir_walk(path, NULL, 0) != 0 || rmdir(path) != 0)
		fprintf(stderr, "tally_bench: could not remove all of %s\n",
		        path);
}

/* ---- workers ------------------------------------------------------------- */

/* A result of one worker's write: its values of the hot key must grow
 * (its writes apply in its order), and with one thread be exactly n. */
static void result_check(worker *w, int64_t v, uint64_t n)
{
	if (v <= atomic_load(&w->last_result) ||
	    (w->r->threads == 1 && v != (int64_t)n))
		atomic_store(&w->out_of_order, 1);
	atomic_store(&w->last_result, v);
}

/* Completion of a pipelined write. Runs on the engine's committer: quick,
 * and it wakes the producer only when it waits for this many. */
static void on_done(void *arg, int err, int64_t value)
{
	worker *w = arg;
	uint64_t n;

	if (err != TALLY_OK) {
		int none = 0;

		atomic_compare_exchange_strong(&w->first_err, &none, err);
		atomic_fetch_add(&w->failed, 1);
	}
	n = atomic_fetch_add(&w->done, 1) + 1;
	if (err == TALLY_OK && w->r->kind == K_HOT)
		result_check(w, value, n);
	if (atomic_load(&w->waiting) && n >= atomic_load(&w->wake_at)) {
		pthread_mutex_lock(&w->lock);
		pthread_cond_signal(&w->cond);
		pthread_mutex_unlock(&w->lock);
	}
}

/* Wait until target writes of this worker completed. The waiting flag and
 * the done counter are both seq_cst, so either the callback sees the flag
 * or this thread sees the count: no lost wake-up. */
static int wait_done(worker *w, uint64_t target)
{
	uint64_t seen = atomic_load(&w->done);
	int idle_s = 0;

	if (seen >= target)
		return 0;
	pthread_mutex_lock(&w->lock);
	atomic_store(&w->wake_at, target);
	atomic_store(&w->waiting, 1);
	while (idle_s < STALL_S) {
		uint64_t d = atomic_load(&w->done);
		struct timespec ts;

		if (d >= target)
			break;
		if (d != seen) {
			seen = d;
			idle_s = 0;
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		if (pthread_cond_timedwait(&w->cond, &w->lock, &ts) == ETIMEDOUT)
			idle_s++;
	}
	atomic_store(&w->waiting, 0);
	pthread_mutex_unlock(&w->lock);
	if (atomic_load(&w->done) < target) {
		fprintf(stderr, "tally_bench: no completion for %d s\n", STALL_S);
		return -1;
	}
	return 0;
}

static int go_on(worker *w, uint64_t i)
{
	bench_run *r = w->r;

	if (r->limit != 0 && i >= r->limit)
		return 0;
	if (atomic_load(&r->abort))
		return 0;
	/* The clock is cheap but not free: look at it every 64 writes. */
	return r->deadline_ns == 0 || (i & 63) != 0 || now_ns() < r->deadline_ns;
}

static int like_next(worker *w, tally_write *wr)
{
	uint64_t content = 1 + rng_next(&w->rng) % w->r->contents;
	uint64_t member = 1 + rng_next(&w->rng) % LIKE_MEMBERS;

	if (w->pairs_len == w->pairs_cap) {
		size_t cap = w->pairs_cap ? w->pairs_cap * 2 : PAIRS_FIRST;
		uint64_t *p = cap <= PAIRS_MAX ?
		              realloc(w->pairs, cap * sizeof *p) : NULL;

		if (p == NULL) {
			w->capped = 1; /* stop here; the report says so */
			return 1;
		}
		w->pairs = p;
		w->pairs_cap = cap;
	}
	w->pairs[w->pairs_len++] = content << 32 | member;
	*wr = (tally_write){ .kind = TALLY_W_ADD };
	wr->event = (tally_event){ .ctype = LIKE_CTYPE, .ktype = LIKE_KTYPE,
	                           .content = content, .member = member };
	return 0;
}

/* The next write of a pipelined worker; 1 means stop early. */
static int write_next(worker *w, tally_write *wr)
{
	uint32_t k;

	switch (w->r->kind) {
	case K_HOT:
		*wr = (tally_write){ .kind = TALLY_W_INCRBY, .key = HOT_KEY,
		                     .key_len = HOT_KEY_LEN, .value = 1 };
		return 0;
	case K_RANDOM:
		k = (uint32_t)(rng_next(&w->rng) % KEYSPACE);
		w->expect[k]++;
		*wr = (tally_write){ .kind = TALLY_W_INCRBY, .key = w->key,
		                     .key_len = key_format(w->key, sizeof w->key,
		                                           k),
		                     .value = 1 };
		return 0;
	default:
		return like_next(w, wr);
	}
}

/* A server with pipelined clients: keep up to window writes in flight,
 * refill when half of them completed. */
static int produce_pipelined(worker *w)
{
	const bench_run *r = w->r;

	for (uint64_t i = 0; i < OPS_PER_THREAD_MAX && go_on(w, i); i++) {
		tally_write wr;
		int rc;

		if (w->issued - atomic_load(&w->done) >= r->window &&
		    wait_done(w, w->issued - r->window / 2) != 0)
			return -1;
		if (write_next(w, &wr) != 0)
			break;
		rc = tally_write_async(r->t, &wr, on_done, w);
		if (rc != TALLY_OK)
			return fail_tally("tally_write_async", rc);
		w->issued++;
	}
	return wait_done(w, w->issued);
}

/* One blocking call at a time, as a plain in-process caller makes them. */
static int produce_blocking(worker *w)
{
	const bench_run *r = w->r;

	for (uint64_t i = 0; i < OPS_PER_THREAD_MAX && go_on(w, i); i++) {
		int64_t v = 0;
		int rc = r->kind == K_STRIPED ?
		         tally_counter_add(r->t, HOT_KEY, HOT_KEY_LEN, 1) :
		         tally_incrby(r->t, HOT_KEY, HOT_KEY_LEN, 1, &v);

		if (rc != TALLY_OK)
			return fail_tally(r->kind == K_STRIPED ? "tally_counter_add"
			                  : "tally_incrby", rc);
		atomic_fetch_add(&w->done, 1);
		if (r->kind == K_INCRBY)
			result_check(w, v, i + 1);
	}
	return 0;
}

static void *worker_main(void *arg)
{
	worker *w = arg;
	int k = w->r->kind;

	w->rc = k == K_STRIPED || k == K_INCRBY ? produce_blocking(w) :
	        produce_pipelined(w);
	if (w->rc != 0)
		atomic_store(&w->r->abort, 1);
	return NULL;
}

static void workers_free(worker *ws, int n)
{
	for (int i = 0; ws != NULL && i < n; i++) {
		pthread_cond_destroy(&ws[i].cond);
		pthread_mutex_destroy(&ws[i].lock);
		free(ws[i].expect);
		free(ws[i].pairs);
	}
	free(ws);
}

static worker *workers_new(bench_run *r, uint64_t seed)
{
	worker *ws = calloc((size_t)r->threads, sizeof *ws);

	for (int i = 0; ws != NULL && i < r->threads; i++) {
		worker *w = &ws[i];

		w->r = r;
		w->rng = seed * 1000003u + (uint64_t)i;
		atomic_init(&w->last_result, 0);
		pthread_mutex_init(&w->lock, NULL);
		pthread_cond_init(&w->cond, NULL);
		if (r->kind == K_RANDOM) {
			w->expect = calloc(KEYSPACE, sizeof *w->expect);
			if (w->expect == NULL) {
				workers_free(ws, i + 1);
				return NULL;
			}
		}
	}
	return ws;
}

/* Start the workers, wait for them, and take the time from the first write
 * to the last acknowledgement (drain included). */
static int workers_run(bench_run *r, worker *ws, uint64_t seconds,
                       result *res)
{
	uint64_t t0 = now_ns();
	int started = 0, rc = 0;

	r->deadline_ns = seconds ? t0 + seconds * 1000000000u : 0;
	for (; started < r->threads; started++)
		if (pthread_create(&ws[started].thread, NULL, worker_main,
		                   &ws[started]) != 0) {
			atomic_store(&r->abort, 1);
			rc = -1;
			break;
		}
	for (int i = 0; i < started; i++) {
		pthread_join(ws[i].thread, NULL);
		rc |= ws[i].rc;
	}
	res->seconds = (double)(now_ns() - t0) / 1e9;
	for (int i = 0; i < r->threads; i++) {
		res->ops += atomic_load(&ws[i].done) - atomic_load(&ws[i].failed);
		res->capped |= ws[i].capped;
		if (atomic_load(&ws[i].failed) != 0) {
			fail_tally("a write completed with",
			           atomic_load(&ws[i].first_err));
			rc = -1;
		}
	}
	return rc;
}

/* ---- the truth, and checking the database against it -------------------- */

static void truth_free(truth *tr)
{
	free(tr->keys);
	free(tr->per_content);
	free(tr->pairs);
	memset(tr, 0, sizeof *tr);
}

/* Distinct likes (a second like of the same member is a no-op) and the
 * count each content must have. */
static int truth_likes(worker *ws, int n, truth *tr)
{
	size_t total = 0, at = 0, distinct = 0;

	for (int i = 0; i < n; i++)
		total += ws[i].pairs_len;
	tr->pairs = malloc((total ? total : 1) * sizeof *tr->pairs);
	tr->per_content = calloc(LIKE_CONTENTS + 1, sizeof *tr->per_content);
	if (tr->pairs == NULL || tr->per_content == NULL)
		return -1;
	for (int i = 0; i < n; i++) {
		memcpy(tr->pairs + at, ws[i].pairs,
		       ws[i].pairs_len * sizeof *tr->pairs);
		at += ws[i].pairs_len;
	}
	qsort(tr->pairs, total, sizeof *tr->pairs, cmp_u64);
	for (size_t i = 0; i < total; i++) {
		if (i > 0 && tr->pairs[i] == tr->pairs[i - 1])
			continue;
		tr->pairs[distinct++] = tr->pairs[i];
		tr->per_content[tr->pairs[i] >> 32]++;
	}
	tr->npairs = distinct;
	tr->submitted = total;
	return 0;
}

static int truth_build(const bench_run *r, worker *ws, truth *tr)
{
	int64_t max = 0;
	int bad = 0;

	memset(tr, 0, sizeof *tr);
	for (int i = 0; i < r->threads; i++) {
		int64_t last = atomic_load(&ws[i].last_result);

		tr->hot += (int64_t)(atomic_load(&ws[i].done) -
		                     atomic_load(&ws[i].failed));
		max = last > max ? last : max;
		bad |= atomic_load(&ws[i].out_of_order);
	}
	if ((r->kind == K_HOT || r->kind == K_INCRBY) &&
	    (bad || max != tr->hot)) {
		fprintf(stderr, "tally_bench: EXACTNESS: hot key results out of "
		        "order or last %" PRId64 " != acknowledged %" PRId64 "\n",
		        max, tr->hot);
		return -1;
	}
	if (r->kind == K_LIKE || r->kind == K_BYTES)
		return truth_likes(ws, r->threads, tr);
	if (r->kind != K_RANDOM)
		return 0;
	tr->keys = ws[0].expect;
	ws[0].expect = NULL;
	for (int i = 1; i < r->threads; i++)
		for (uint32_t k = 0; k < KEYSPACE; k++)
			tr->keys[k] += ws[i].expect[k];
	return 0;
}

static int verify_hot(tally *t, const truth *tr)
{
	int64_t v = 0;
	int rc = tally_get(t, HOT_KEY, HOT_KEY_LEN, &v);

	if (rc != TALLY_OK)
		return fail_tally("tally_get", rc);
	if (v != tr->hot) {
		fprintf(stderr, "tally_bench: EXACTNESS: hot key is %" PRId64
		        ", acknowledged increments %" PRId64 "\n", v, tr->hot);
		return -1;
	}
	return 0;
}

/* Every key of the keyspace, MULTI_CHUNK at a time. */
static int verify_random(tally *t, const truth *tr)
{
	char (*names)[16] = malloc(MULTI_CHUNK * sizeof *names);
	const void **keys = malloc(MULTI_CHUNK * sizeof *keys);
	size_t *lens = malloc(MULTI_CHUNK * sizeof *lens);
	int64_t *vals = malloc(MULTI_CHUNK * sizeof *vals);
	uint64_t bad = 0;
	int rc = names && keys && lens && vals ? TALLY_OK : TALLY_ENOMEM;

	for (uint32_t base = 0; rc == TALLY_OK && base < KEYSPACE;
	     base += MULTI_CHUNK) {
		size_t n = KEYSPACE - base < MULTI_CHUNK ? KEYSPACE - base
		                                         : MULTI_CHUNK;

		for (size_t j = 0; j < n; j++) {
			lens[j] = key_format(names[j], sizeof names[j],
			                     base + (uint32_t)j);
			keys[j] = names[j];
		}
		rc = tally_mget(t, keys, lens, n, vals, NULL);
		for (size_t j = 0; rc == TALLY_OK && j < n; j++)
			if (vals[j] != (int64_t)tr->keys[base + j] &&
			    bad++ < MISMATCH_SHOWN)
				fprintf(stderr, "tally_bench: EXACTNESS: %s is %"
				        PRId64 ", want %" PRIu32 "\n", names[j],
				        vals[j], tr->keys[base + j]);
	}
	free(names);
	free(keys);
	free(lens);
	free(vals);
	if (rc != TALLY_OK)
		return fail_tally("tally_mget", rc);
	return bad ? -1 : 0;
}

static int verify_like_counts(tally *t, const truth *tr)
{
	uint64_t *ids = malloc(MULTI_CHUNK * sizeof *ids);
	int64_t *got = malloc(MULTI_CHUNK * sizeof *got);
	uint64_t bad = 0;
	int rc = ids && got ? TALLY_OK : TALLY_ENOMEM;

	for (uint32_t base = 1; rc == TALLY_OK && base <= LIKE_CONTENTS;
	     base += MULTI_CHUNK) {
		size_t n = LIKE_CONTENTS + 1 - base < MULTI_CHUNK ?
		           LIKE_CONTENTS + 1 - base : MULTI_CHUNK;

		for (size_t j = 0; j < n; j++)
			ids[j] = base + j;
		rc = tally_mcount(t, LIKE_CTYPE, LIKE_KTYPE, ids, n, got);
		for (size_t j = 0; rc == TALLY_OK && j < n; j++)
			if (got[j] != (int64_t)tr->per_content[base + j] &&
			    bad++ < MISMATCH_SHOWN)
				fprintf(stderr, "tally_bench: EXACTNESS: article %"
				        PRIu64 " has %" PRId64 " likes, want %"
				        PRIu32 "\n", ids[j], got[j],
				        tr->per_content[base + j]);
	}
	free(ids);
	free(got);
	if (rc != TALLY_OK)
		return fail_tally("tally_mcount", rc);
	return bad ? -1 : 0;
}

/* Counts of every content, events stored, and membership of a sample. */
static int verify_likes(tally *t, const truth *tr)
{
	size_t step = tr->npairs / HAS_CHECKS + 1;
	tally_stats st;
	int rc;

	if (verify_like_counts(t, tr) != 0)
		return -1;
	rc = tally_stats_get(t, &st);
	if (rc != TALLY_OK)
		return fail_tally("tally_stats_get", rc);
	if (st.last_seq != tr->npairs) {
		fprintf(stderr, "tally_bench: EXACTNESS: %" PRIu64 " events "
		        "stored, %zu distinct likes\n", st.last_seq, tr->npairs);
		return -1;
	}
	for (size_t i = 0; i < tr->npairs; i += step) {
		uint64_t p = tr->pairs[i];

		rc = tally_has(t, LIKE_CTYPE, LIKE_KTYPE, p >> 32,
		               p & 0xffffffffu, NULL);
		if (rc != TALLY_OK) {
			fprintf(stderr, "tally_bench: EXACTNESS: member %" PRIu64
			        " of article %" PRIu64 ": ", p & 0xffffffffu,
			        p >> 32);
			return fail_tally("tally_has", rc);
		}
	}
	return 0;
}

static int verify(tally *t, int kind, const truth *tr)
{
	switch (kind) {
	case K_RANDOM:
		return verify_random(t, tr);
	case K_LIKE:
	case K_BYTES:
		return verify_likes(t, tr);
	default:
		return verify_hot(t, tr);
	}
}

/* Reopen the closed database and check again: what was acknowledged must
 * have survived the close. */
static int verify_reopened(const char *path, const tally_options *o,
                           int kind, const truth *tr)
{
	tally *t = NULL;
	int rc = tally_open(path, o, &t);

	if (rc != TALLY_OK)
		return fail_tally("tally_open (reopen)", rc);
	rc = verify(t, kind, tr);
	tally_closep(&t);
	return rc;
}

/* ---- reporting ----------------------------------------------------------- */

static void emit_common(emit *e, const config *c, const workload *wl,
                        const result *res)
{
	const tally_stats *st = &res->st;
	int pipelined = wl->kind != K_STRIPED && wl->kind != K_INCRBY &&
	                wl->kind != K_FLUSH;

	emit_str(e, "name", wl->name);
	emit_str(e, "durability",
	         wl->durability == TALLY_DURABILITY_SYNC ? "sync" : "async");
	emit_u64(e, "threads", (uint64_t)wl->threads);
	emit_u64(e, "window", pipelined ? c->window : 1);
	emit_f(e, "seconds", res->seconds);
	emit_u64(e, "ops", res->ops);
	emit_f(e, "ops_per_s", res->seconds > 0 ? (double)res->ops /
	       res->seconds : 0.0);
	emit_u64(e, "writes", st->writes);
	emit_u64(e, "striped_adds", st->striped_adds);
	emit_u64(e, "write_errors", st->write_errors);
	emit_u64(e, "store_entries", st->store_entries);
	emit_u64(e, "checkpoint_entries", st->store_checkpoint_entries);
	emit_f(e, "entries_per_op", ratio(st->store_entries +
	                                  st->store_checkpoint_entries,
	                                  res->ops));
	emit_u64(e, "batches", st->batches);
	emit_f(e, "avg_batch", ratio(st->writes, st->batches));
	emit_u64(e, "batch_max", st->batch_ops_max);
	emit_u64(e, "syncs", st->syncs);
	emit_f(e, "fsync_ms", ratio(st->sync_ns_total, st->syncs) / 1e6);
	emit_u64(e, "capped", (uint64_t)res->capped);
	emit_str(e, "fs", c->fs);
}

/* ---- timed workloads ----------------------------------------------------- */

/* After the last acknowledgement: make everything durable (async mode
 * folds the striped cells) and read the engine's statistics. */
static int stats_settle(tally *t, result *res)
{
	int rc = tally_sync(t);

	if (rc == TALLY_OK)
		rc = tally_stats_get(t, &res->st);
	return rc == TALLY_OK ? 0 : fail_tally("tally_sync/stats", rc);
}

static int timed_run(const config *c, const workload *wl, const char *path)
{
	tally_options o = { .durability = wl->durability };
	bench_run r = { .kind = wl->kind, .threads = wl->threads,
	                .contents = wl->contents,
	                .window = c->window };
	result res = { 0 };
	truth tr = { 0 };
	worker *ws = NULL;
	emit e;
	int rc = tally_open(path, &o, &r.t);

	if (rc != TALLY_OK)
		return fail_tally("tally_open", rc);
	ws = workers_new(&r, c->seed);
	rc = ws ? workers_run(&r, ws, c->seconds, &res) : -1;
	if (rc == 0)
		rc = stats_settle(r.t, &res);
	if (rc == 0)
		rc = truth_build(&r, ws, &tr);
	if (rc == 0)
		rc = verify(r.t, wl->kind, &tr);
	tally_closep(&r.t);
	if (rc == 0)
		rc = verify_reopened(path, &o, wl->kind, &tr);
	if (rc == 0) {
		emit_begin(&e, c->json);
		emit_common(&e, c, wl, &res);
		if (wl->kind == K_LIKE) {
			emit_u64(&e, "stored", tr.npairs);
			emit_u64(&e, "noops", tr.submitted - tr.npairs);
		}
		emit_end(&e);
	}
	truth_free(&tr);
	workers_free(ws, r.threads);
	return rc;
}

/* ---- bytes per like ------------------------------------------------------ */

/* Compact through the engine and read each column family's table files:
 * the bytes per like with every index, and which index costs what. */
static int store_settle(const char *path, const tally_options *o,
                        tally_disk_part *cfs, size_t *ncf)
{
	tally *t = NULL;
	size_t n = 0;
	int rc = tally_open(path, o, &t);

	if (rc == TALLY_OK)
		rc = tally_compact(t);
	if (rc == TALLY_OK)
		rc = tally_disk_usage(t, cfs, CF_MAX, &n);
	tally_closep(&t);
	if (rc != TALLY_OK)
		return fail_tally("compact", rc);
	*ncf = n < CF_MAX ? n : CF_MAX;
	return 0;
}

static void emit_usage(emit *e, const char *stage, const usage *u,
                       uint64_t likes, uint64_t stored)
{
	char k[64];

	snprintf(k, sizeof k, "%s_bytes", stage);
	emit_u64(e, k, u->total);
	snprintf(k, sizeof k, "%s_sst_bytes", stage);
	emit_u64(e, k, u->sst);
	snprintf(k, sizeof k, "%s_wal_bytes", stage);
	emit_u64(e, k, u->wal);
	snprintf(k, sizeof k, "%s_other_bytes", stage);
	emit_u64(e, k, u->other);
	snprintf(k, sizeof k, "%s_bytes_per_like", stage);
	emit_f(e, k, ratio(u->total, likes));
	snprintf(k, sizeof k, "%s_bytes_per_stored_like", stage);
	emit_f(e, k, ratio(u->total, stored));
}

static void bytes_report(const config *c, const workload *wl,
                         const result *res, const truth *tr,
                         const usage u[3], const tally_disk_part *cfs, size_t ncf)
{
	static const char *const stages[3] = { "closed", "reopened",
	                                       "compacted" };
	emit e;

	emit_begin(&e, c->json);
	emit_common(&e, c, wl, res);
	emit_u64(&e, "likes", tr->submitted);
	emit_u64(&e, "stored", tr->npairs);
	emit_u64(&e, "noops", tr->submitted - tr->npairs);
	for (int i = 0; i < 3; i++)
		emit_usage(&e, stages[i], &u[i], tr->submitted, tr->npairs);
	for (size_t i = 0; i < ncf; i++) {
		char k[64];

		snprintf(k, sizeof k, "cf_%.31s_bytes", cfs[i].name);
		emit_u64(&e, k, cfs[i].bytes);
		snprintf(k, sizeof k, "cf_%.31s_entries", cfs[i].name);
		emit_u64(&e, k, cfs[i].entries);
		snprintf(k, sizeof k, "cf_%.31s_bytes_per_stored_like",
		         cfs[i].name);
		emit_f(&e, k, ratio(cfs[i].bytes, tr->npairs));
	}
	emit_end(&e);
}

/* Sizes as closed (WAL and all), after a reopen (RocksDB replays the WAL
 * into SST files), and after a full compaction; counts checked after each. */
static int bytes_measure(const char *path, const tally_options *o,
                         const truth *tr, usage u[3], tally_disk_part *cfs,
                         size_t *ncf)
{
	tally *t = NULL;
	int rc;

	if (dir_walk(path, &u[0], 0) != 0)
		return -1;
	rc = tally_open(path, o, &t);
	if (rc != TALLY_OK)
		return fail_tally("tally_open (reopen)", rc);
	tally_closep(&t);
	if (dir_walk(path, &u[1], 0) != 0)
		return -1;
	if (store_settle(path, o, cfs, ncf) != 0)
		return -1;
	if (dir_walk(path, &u[2], 0) != 0)
		return -1;
	return verify_reopened(path, o, K_BYTES, tr);
}

static int bytes_run(const config *c, const workload *wl, const char *path)
{
	tally_options o = { .durability = wl->durability };
	bench_run r = { .kind = wl->kind, .threads = wl->threads,
	                .contents = wl->contents,
	                .window = c->window, .limit = c->likes };
	usage u[3] = { { 0 }, { 0 }, { 0 } };
	tally_disk_part cfs[CF_MAX];
	size_t ncf = 0;
	result res = { 0 };
	truth tr = { 0 };
	worker *ws = NULL;
	int rc = tally_open(path, &o, &r.t);

	memset(cfs, 0, sizeof cfs);
	if (rc != TALLY_OK)
		return fail_tally("tally_open", rc);
	ws = workers_new(&r, c->seed);
	rc = ws ? workers_run(&r, ws, 0, &res) : -1;
	if (rc == 0)
		rc = stats_settle(r.t, &res);
	if (rc == 0)
		rc = truth_build(&r, ws, &tr);
	if (rc == 0)
		rc = verify(r.t, K_BYTES, &tr);
	tally_closep(&r.t);
	if (rc == 0)
		rc = bytes_measure(path, &o, &tr, u, cfs, &ncf);
	if (rc == 0)
		bytes_report(c, wl, &res, &tr, u, cfs, ncf);
	truth_free(&tr);
	workers_free(ws, r.threads);
	return rc;
}

/* ---- disk-flush ----------------------------------------------------------- */

static const uint8_t flush_zeros[1 << 16];

static int write_all(int fd, const uint8_t *buf, size_t len, off_t off)
{
	while (len > 0) {
		ssize_t n = pwrite(fd, buf, len, off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = ENOSPC; /* as the journal reads it */
			return -1;
		}
		buf += n;
		len -= (size_t)n;
		off += n;
	}
	return 0;
}

/* What one synced batch of the journal costs this disk, without libtally
 * around it: every figure of a sync workload (and of tallyd against a
 * Redis that never fsyncs) moves with it. A line on stderr says when the
 * file is ready and the timed writes begin (a test breaks the disk then). */
static int flush_run(const config *c, const workload *wl, const char *path)
{
	uint8_t rec[FLUSH_REC];
	char file[PATH_CAP];
	uint64_t *lat = NULL, t0, t_end, sum = 0;
	size_t n = 0;
	off_t off = 0;
	result res = { 0 };
	emit e;
	int fd = -1, rc = -1, len;

	len = snprintf(file, sizeof file, "%s/flush.dat", path);
	if (len < 0 || (size_t)len >= sizeof file) {
		fprintf(stderr, "tally_bench: --dir too long\n");
		return -1;
	}
	lat = malloc(FLUSH_SAMPLES_MAX * sizeof *lat);
	if (lat == NULL) {
		fprintf(stderr, "tally_bench: disk-flush: out of memory\n");
		return -1;
	}
	fd = open(file, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		goto io_err;
	for (size_t o = 0; o < FLUSH_FILE; o += sizeof flush_zeros)
		if (write_all(fd, flush_zeros, sizeof flush_zeros, (off_t)o) != 0)
			goto io_err;
	if (fsync(fd) != 0)
		goto io_err;
	for (size_t i = 0; i < sizeof rec; i++)
		rec[i] = (uint8_t)(i * 131u + 7u); /* not zeros: a real write */
	fprintf(stderr, "tally_bench: disk-flush: %s ready, timing writes "
	        "for %" PRIu64 " s\n", file, c->seconds);
	t0 = now_ns();
	t_end = t0 + c->seconds * 1000000000u;
	while (n < FLUSH_SAMPLES_MAX) {
		uint64_t a = now_ns(), b;

		if (a >= t_end)
			break;
		if ((size_t)off + sizeof rec > FLUSH_FILE)
			off = 0;
		if (write_all(fd, rec, sizeof rec, off) != 0 ||
		    fdatasync(fd) != 0)
			goto io_err;
		b = now_ns();
		lat[n++] = b - a;
		sum += b - a;
		off += (off_t)sizeof rec;
	}
	if (n == 0) {
		fprintf(stderr, "tally_bench: disk-flush: no write in %" PRIu64
		        " s\n", c->seconds);
		goto out;
	}
	res.seconds = (double)(now_ns() - t0) / 1e9;
	res.ops = n;
	res.st.syncs = n;
	res.st.sync_ns_total = sum;
	res.capped = n == FLUSH_SAMPLES_MAX;
	qsort(lat, n, sizeof *lat, cmp_u64);
	emit_begin(&e, c->json);
	emit_common(&e, c, wl, &res);
	emit_u64(&e, "write_bytes", sizeof rec);
	/* The upper median when n is even; p99 by nearest rank. */
	emit_f(&e, "fsync_p50_ms", (double)lat[n / 2] / 1e6);
	emit_f(&e, "fsync_p99_ms", (double)lat[n - 1 - n / 100] / 1e6);
	emit_end(&e);
	rc = 0;
	goto out;
io_err:
	fprintf(stderr, "tally_bench: %s: %s\n", file, strerror(errno));
out:
	if (fd >= 0)
		close(fd);
	free(lat);
	return rc;
}

/* ---- command line -------------------------------------------------------- */

static void usage_print(FILE *f)
{
	fputs("usage: tally_bench [options] [WORKLOAD...]\n"
	      "Runs each chosen workload (default: all) on a fresh database,\n"
	      "checks every count for exactness (exit 1 if one is wrong) and\n"
	      "prints one line per result. disk-flush opens no database: it\n"
	      "times 3000-byte writes in place, each fdatasynced, in a fresh\n"
	      "folder (write_bytes, fsync_p50_ms, fsync_p99_ms; at most 1M\n"
	      "writes, then capped=1).\n\n"
	      "options:\n"
	      "  --dir DIR      parent folder of the databases (each workload\n"
	      "                 makes DIR/tally-bench-NAME-XXXXXX and removes\n"
	      "                 it); default /tmp, or ./bench-data when /tmp is\n"
	      "                 tmpfs. Refused on tmpfs: fsync is free there.\n"
	      "  --allow-tmpfs  accept a memory filesystem anyway\n"
	      "  --seconds N    length of each timed workload (default 5)\n"
	      "  --window N     writes in flight per thread in pipelined\n"
	      "                 workloads (default 1024, 1..65536)\n"
	      "  --likes N      likes loaded by bytes-per-like (default 1000000)\n"
	      "  --seed N       random seed (default 1)\n"
	      "  --json         one flat JSON object per result line\n"
	      "  --keep         keep the databases\n"
	      "  --list         list the workloads and exit\n"
	      "  --help         this text\n\n"
	      "Figures per result: ops_per_s (acknowledged writes / time from the\n"
	      "first write to the last acknowledgement), entries_per_op (store\n"
	      "entries written by the batches and by the checkpoints that ran\n"
	      "during the workload / acknowledged writes), avg_batch (writes / store batches),\n"
	      "fsync_ms (time per fsynced store write). A workload NAME/VARIANT\n"
	      "is chosen by its full name or by NAME.\n", f);
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end = NULL;
	unsigned long long v;

	if (s == NULL || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < lo || v > hi)
		return -1;
	*out = (uint64_t)v;
	return 0;
}

static int select_workload(config *c, const char *name)
{
	size_t len = strlen(name);
	int found = 0;

	for (size_t i = 0; i < WORKLOADS_N; i++) {
		const char *w = workloads[i].name;

		if (strcmp(w, name) == 0 ||
		    (strncmp(w, name, len) == 0 && w[len] == '/')) {
			c->selected[i] = 1;
			found = 1;
		}
	}
	if (!found)
		fprintf(stderr, "tally_bench: no workload %s (see --list)\n",
		        name);
	return found ? 0 : -1;
}

/* A numeric option: its value, range-checked. */
static int opt_num(int argc, char **argv, int *i, uint64_t lo, uint64_t hi,
                   uint64_t *out)
{
	const char *name = argv[*i];

	if (*i + 1 >= argc || parse_u64(argv[*i + 1], lo, hi, out) != 0) {
		fprintf(stderr, "tally_bench: %s needs a number in %" PRIu64
		        "..%" PRIu64 "\n", name, lo, hi);
		return -1;
	}
	(*i)++;
	return 0;
}

static int opt_one(config *c, int argc, char **argv, int *i)
{
	const char *a = argv[*i];

	if (strcmp(a, "--json") == 0)
		c->json = 1;
	else if (strcmp(a, "--keep") == 0)
		c->keep = 1;
	else if (strcmp(a, "--allow-tmpfs") == 0)
		c->allow_tmpfs = 1;
	else if (strcmp(a, "--seconds") == 0)
		return opt_num(argc, argv, i, 1, SECONDS_MAX, &c->seconds);
	else if (strcmp(a, "--window") == 0)
		return opt_num(argc, argv, i, 1, WINDOW_MAX, &c->window);
	else if (strcmp(a, "--likes") == 0)
		return opt_num(argc, argv, i, 1, LIKES_MAX, &c->likes);
	else if (strcmp(a, "--seed") == 0)
		return opt_num(argc, argv, i, 0, UINT32_MAX, &c->seed);
	else if (strcmp(a, "--dir") == 0) {
		if (*i + 1 >= argc || argv[*i + 1][0] == '\0' ||
		    strlen(argv[*i + 1]) + 64 >= sizeof c->dir) {
			fprintf(stderr, "tally_bench: --dir needs a folder\n");
			return -1;
		}
		snprintf(c->dir, sizeof c->dir, "%s", argv[++*i]);
	} else if (a[0] != '-')
		return select_workload(c, a);
	else {
		fprintf(stderr, "tally_bench: bad option %s (see --help)\n", a);
		return -1;
	}
	return 0;
}

/* Returns 0 to run, 1 when done (help, list), -1 on bad usage. */
static int parse_args(config *c, int argc, char **argv)
{
	int any = 0;

	memset(c, 0, sizeof *c);
	c->seconds = SECONDS_DEFAULT;
	c->window = WINDOW_DEFAULT;
	c->likes = LIKES_DEFAULT;
	c->seed = 1;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage_print(stdout);
			return 1;
		}
		if (strcmp(argv[i], "--list") == 0) {
			for (size_t j = 0; j < WORKLOADS_N; j++)
				printf("%-32s %s\n", workloads[j].name,
				       workloads[j].about);
			return 1;
		}
		if (opt_one(c, argc, argv, &i) != 0)
			return -1;
	}
	for (size_t j = 0; j < WORKLOADS_N; j++)
		any |= c->selected[j];
	for (size_t j = 0; !any && j < WORKLOADS_N; j++)
		c->selected[j] = 1;
	return 0;
}

int main(int argc, char **argv)
{
	config c;
	int rc = parse_args(&c, argc, argv);

	if (rc != 0)
		return rc > 0 ? 0 : 2;
	if (dir_prepare(&c) != 0)
		return 1;
	for (size_t i = 0; i < WORKLOADS_N; i++) {
		const workload *wl = &workloads[i];
		char path[PATH_CAP];

		if (!c.selected[i])
			continue;
		if (db_dir_make(&c, wl, path) != 0)
			return 1;
		rc = wl->kind == K_BYTES ? bytes_run(&c, wl, path)
		   : wl->kind == K_FLUSH ? flush_run(&c, wl, path)
		                         : timed_run(&c, wl, path);
		if (!c.keep)
			dir_remove(path);
		if (rc != 0) {
			fprintf(stderr, "tally_bench: %s FAILED\n", wl->name);
			return 1;
		}
	}
	return 0;
}
