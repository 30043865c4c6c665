/* soak_driver.c: a mixed-load soak of a running tallyd through hiredis:
 * several clients doing counters, likes and unlikes, views, idempotent
 * retries and reads, reconnecting now and then, each checking every reply
 * against its own model; tallyd's RSS sampled all along.
 *
 *   soak_driver RESP_PORT TALLYD_PID DATA_DIR SECONDS THREADS
 *
 * Each thread owns its keys and objects, so every reply has one right
 * value. At the end every counter, count and membership is read back and
 * compared with the models. Prints "ok   ..."/"FAIL ..." lines, "rss
 * SECONDS RSS_KIB WAL_KIB" samples and "info ..." figures; exits 0 when
 * nothing failed. The RSS verdict is the script's (it knows the build).
 * WAL_KIB, the size of RocksDB's write-ahead logs, tracks what the
 * memtables hold: they grow with every write until a flush, and are
 * not a leak. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <hiredis/hiredis.h>

#define THREADS_MAX 16
#define COUNTERS 8          /* named counters per thread */
#define LIKE_OBJS 20        /* unique-type objects per thread */
#define MEMBERS 64          /* members 1..64 per like object */
#define VIEW_OBJS 5         /* total-type objects per thread */
#define RECENT_N 5
#define PIPE_N 20

static int g_port, g_pid;
static const char *g_data;
static atomic_int g_failed;
static atomic_llong g_ops, g_reconnects, g_retries;
static pthread_mutex_t g_print_lock = PTHREAD_MUTEX_INITIALIZER;

static void report(int ok, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&g_print_lock);
	fputs(ok ? "ok   " : "FAIL ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	pthread_mutex_unlock(&g_print_lock);
	if (!ok)
		atomic_fetch_add(&g_failed, 1);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static long proc_rss_kib(void)
{
	char path[64], line[256];
	long v = -1;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%d/status", g_pid);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof line, f) != NULL)
		if (strncmp(line, "VmRSS:", 6) == 0) {
			v = strtol(line + 6, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

/* Bytes of RocksDB's write-ahead logs (*.log) in the data folder, KiB. */
static long wal_kib(void)
{
	DIR *d = opendir(g_data);
	struct dirent *e;
	long long bytes = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		char path[4096];
		size_t n = strlen(e->d_name);
		struct stat st;

		if (n < 5 || strcmp(e->d_name + n - 4, ".log") != 0)
			continue;
		snprintf(path, sizeof path, "%s/%s", g_data, e->d_name);
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
			bytes += st.st_size;
	}
	closedir(d);
	return (long)(bytes >> 10);
}

/* ---- one client's model ------------------------------------------------------- */

typedef struct worker {
	int id;
	uint64_t deadline_ms;
	uint64_t rng;
	redisContext *c;
	long long ops, errors;
	char first_err[256];
	long long counter[COUNTERS];
	int counter_set[COUNTERS];          /* GET of an unset key is nil */
	uint8_t member[LIKE_OBJS][MEMBERS + 1];
	long long likes[LIKE_OBJS];
	long long events[LIKE_OBJS];        /* effective adds and removes */
	long long views[VIEW_OBJS];
	long long token_n;
} worker;

static uint64_t rnd(worker *w)
{
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return w->rng;
}

static void wrong(worker *w, const char *fmt, ...)
{
	va_list ap;

	if (w->errors++ == 0) {
		va_start(ap, fmt);
		vsnprintf(w->first_err, sizeof w->first_err, fmt, ap);
		va_end(ap);
	}
}

static int connect_w(worker *w)
{
	struct timeval tv = { 30, 0 };

	redisFree(w->c);
	w->c = redisConnectWithTimeout("127.0.0.1", g_port, tv);
	if (w->c == NULL || w->c->err || redisSetTimeout(w->c, tv) != REDIS_OK) {
		wrong(w, "connect: %s", w->c ? w->c->errstr : "no memory");
		return -1;
	}
	return 0;
}

static long long like_id(const worker *w, int o)
{
	return 100000LL * (w->id + 1) + o;
}

static long long view_id(const worker *w, int o)
{
	return 200000LL * (w->id + 1) + o;
}

/* An integer reply equal to want; frees the reply. */
static void want_int(worker *w, redisReply *r, long long want, const char *what)
{
	if (r == NULL)
		wrong(w, "%s: no reply (%s)", what, w->c->errstr);
	else if (r->type != REDIS_REPLY_INTEGER || r->integer != want)
		wrong(w, "%s: want %lld, got type %d %lld '%s'", what, want,
		      r->type, r->integer, r->str ? r->str : "");
	freeReplyObject(r);
}

static void op_incrby(worker *w)
{
	int k = (int)(rnd(w) % COUNTERS);
	long long d = (long long)(rnd(w) % 11) - 3;

	w->counter[k] += d;
	w->counter_set[k] = 1;
	want_int(w, redisCommand(w->c, "INCRBY soak:%d:c%d %lld", w->id, k, d),
	         w->counter[k], "INCRBY");
}

static void op_like(worker *w)
{
	int o = (int)(rnd(w) % LIKE_OBJS), m = 1 + (int)(rnd(w) % MEMBERS);
	int add = rnd(w) % 3 != 0;

	if (add != w->member[o][m]) {
		w->member[o][m] = (uint8_t)add;
		w->likes[o] += add ? 1 : -1;
		w->events[o]++;
	}
	want_int(w, redisCommand(w->c, "TALLY.%s soak like %lld %d",
	                         add ? "ADD" : "REMOVE", like_id(w, o), m),
	         w->likes[o], add ? "TALLY.ADD like" : "TALLY.REMOVE like");
}

static void op_view(worker *w)
{
	int o = (int)(rnd(w) % VIEW_OBJS);
	long long d = 1 + (long long)(rnd(w) % 5);

	w->views[o] += d;
	want_int(w, redisCommand(w->c, "TALLY.ADD soak view %lld 0 DELTA %lld",
	                         view_id(w, o), d), w->views[o], "TALLY.ADD view");
}

/* An idempotent write, then its retry: same answer, counted once. */
static void op_retry(worker *w)
{
	int o = (int)(rnd(w) % VIEW_OBJS);
	long long n = ++w->token_n;

	w->views[o] += 2;
	want_int(w, redisCommand(w->c, "TALLY.ADD soak view %lld 0 DELTA 2 ID "
	                         "soak-%d-%lld", view_id(w, o), w->id, n),
	         w->views[o], "TALLY.ADD ID");
	want_int(w, redisCommand(w->c, "TALLY.ADD soak view %lld 0 DELTA 2 ID "
	                         "soak-%d-%lld", view_id(w, o), w->id, n),
	         w->views[o], "TALLY.ADD ID (retried)");
	atomic_fetch_add(&g_retries, 1);
}

static void op_count(worker *w)
{
	int o = (int)(rnd(w) % LIKE_OBJS);

	want_int(w, redisCommand(w->c, "TALLY.COUNT soak like %lld",
	                         like_id(w, o)), w->likes[o], "TALLY.COUNT");
}

static void op_mcount(worker *w)
{
	int o = (int)(rnd(w) % (LIKE_OBJS - 4));
	redisReply *r = redisCommand(w->c, "TALLY.MCOUNT soak like %lld %lld "
	                             "%lld %lld %lld", like_id(w, o),
	                             like_id(w, o + 1), like_id(w, o + 2),
	                             like_id(w, o + 3), like_id(w, o + 4));

	if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 5) {
		wrong(w, "TALLY.MCOUNT: not an array of 5");
	} else {
		for (int i = 0; i < 5; i++)
			if (r->element[i]->type != REDIS_REPLY_INTEGER ||
			    r->element[i]->integer != w->likes[o + i])
				wrong(w, "TALLY.MCOUNT[%d]: want %lld", i,
				      w->likes[o + i]);
	}
	freeReplyObject(r);
}

static void op_has(worker *w)
{
	int o = (int)(rnd(w) % LIKE_OBJS), m = 1 + (int)(rnd(w) % MEMBERS);
	redisReply *r = redisCommand(w->c, "TALLY.HAS soak like %lld %d",
	                             like_id(w, o), m);

	if (r == NULL || (w->member[o][m] ? r->type != REDIS_REPLY_INTEGER ||
	                  r->integer <= 0 : r->type != REDIS_REPLY_NIL))
		wrong(w, "TALLY.HAS %lld %d: want %s", like_id(w, o), m,
		      w->member[o][m] ? "a time" : "nil");
	freeReplyObject(r);
}

static void op_recent(worker *w)
{
	int o = (int)(rnd(w) % LIKE_OBJS);
	long long want = w->events[o] < RECENT_N ? w->events[o] : RECENT_N;
	redisReply *r = redisCommand(w->c, "TALLY.RECENT soak like %lld LIMIT "
	                             "%d", like_id(w, o), RECENT_N);

	if (r == NULL || r->type != REDIS_REPLY_ARRAY ||
	    (long long)r->elements != want)
		wrong(w, "TALLY.RECENT %lld: want %lld entries, got %zu",
		      like_id(w, o), want, r ? r->elements : 0);
	freeReplyObject(r);
}

static void op_get(worker *w)
{
	int k = (int)(rnd(w) % COUNTERS);
	redisReply *r = redisCommand(w->c, "GET soak:%d:c%d", w->id, k);

	if (r == NULL || (w->counter_set[k] ?
	                  r->type != REDIS_REPLY_STRING ||
	                  strtoll(r->str, NULL, 10) != w->counter[k] :
	                  r->type != REDIS_REPLY_NIL))
		wrong(w, "GET soak:%d:c%d: want %lld", w->id, k, w->counter[k]);
	freeReplyObject(r);
}

/* PIPE_N pipelined INCRBY 1, answered in order. */
static void op_pipeline(worker *w)
{
	int k = (int)(rnd(w) % COUNTERS);

	for (int i = 0; i < PIPE_N; i++)
		redisAppendCommand(w->c, "INCRBY soak:%d:c%d 1", w->id, k);
	for (int i = 0; i < PIPE_N; i++) {
		redisReply *r = NULL;

		if (redisGetReply(w->c, (void **)&r) != REDIS_OK) {
			wrong(w, "pipeline: %s", w->c->errstr);
			return;
		}
		w->counter[k]++;
		want_int(w, r, w->counter[k], "pipelined INCRBY");
	}
	w->counter_set[k] = 1;
	w->ops += PIPE_N - 1;
}

static void *worker_main(void *arg)
{
	worker *w = arg;
	long long until_reconnect = 300;

	if (connect_w(w) != 0)
		return NULL;
	while (now_ms() < w->deadline_ms && w->errors == 0) {
		unsigned r = (unsigned)(rnd(w) % 100);

		if (r < 20) op_incrby(w);
		else if (r < 45) op_like(w);
		else if (r < 55) op_view(w);
		else if (r < 60) op_retry(w);
		else if (r < 70) op_count(w);
		else if (r < 75) op_mcount(w);
		else if (r < 80) op_has(w);
		else if (r < 85) op_recent(w);
		else if (r < 95) op_get(w);
		else op_pipeline(w);
		w->ops++;
		if (--until_reconnect <= 0) {
			until_reconnect = 200 + (long long)(rnd(w) % 600);
			atomic_fetch_add(&g_reconnects, 1);
			if (connect_w(w) != 0)
				break;
		}
	}
	atomic_fetch_add(&g_ops, w->ops);
	return NULL;
}

/* Every value of the model, read back on a fresh connection. */
static void verify(worker *w)
{
	long long before = w->errors;

	if (connect_w(w) != 0)
		return;
	for (int k = 0; k < COUNTERS; k++) {
		redisReply *r = redisCommand(w->c, "GET soak:%d:c%d", w->id, k);

		if (r == NULL || (w->counter_set[k] &&
		    (r->type != REDIS_REPLY_STRING ||
		     strtoll(r->str, NULL, 10) != w->counter[k])))
			wrong(w, "final GET soak:%d:c%d: want %lld", w->id, k,
			      w->counter[k]);
		freeReplyObject(r);
	}
	for (int o = 0; o < LIKE_OBJS; o++) {
		want_int(w, redisCommand(w->c, "TALLY.COUNT soak like %lld",
		                         like_id(w, o)), w->likes[o],
		         "final TALLY.COUNT like");
		for (int m = 1; m <= MEMBERS; m++) {
			redisReply *r = redisCommand(w->c, "TALLY.HAS soak like "
			                             "%lld %d", like_id(w, o), m);

			if (r == NULL || (w->member[o][m] ?
			                  r->type != REDIS_REPLY_INTEGER :
			                  r->type != REDIS_REPLY_NIL))
				wrong(w, "final TALLY.HAS %lld %d: want %s",
				      like_id(w, o), m,
				      w->member[o][m] ? "in" : "out");
			freeReplyObject(r);
		}
	}
	for (int o = 0; o < VIEW_OBJS; o++)
		want_int(w, redisCommand(w->c, "TALLY.COUNT soak view %lld",
		                         view_id(w, o)), w->views[o],
		         "final TALLY.COUNT view");
	report(w->errors == before, "client %d: every counter, count and "
	       "membership read back equals the model%s%s", w->id,
	       w->errors > before ? ": " : "",
	       w->errors > before ? w->first_err : "");
	redisFree(w->c);
	w->c = NULL;
}

int main(int argc, char **argv)
{
	static worker ws[THREADS_MAX];
	pthread_t th[THREADS_MAX];
	int seconds, threads, step_s;
	uint64_t t0, end;
	long long errors = 0;

	if (argc != 6) {
		fprintf(stderr, "usage: soak_driver RESP_PORT TALLYD_PID "
		        "DATA_DIR SECONDS THREADS\n");
		return 2;
	}
	g_port = atoi(argv[1]);
	g_pid = atoi(argv[2]);
	g_data = argv[3];
	seconds = atoi(argv[4]);
	threads = atoi(argv[5]);
	if (seconds < 6 || threads < 1 || threads > THREADS_MAX) {
		fprintf(stderr, "soak_driver: SECONDS >= 6, THREADS 1..%d\n",
		        THREADS_MAX);
		return 2;
	}
	/* About 30 samples whatever the length, at least 2 s apart. */
	step_s = seconds / 30 > 2 ? seconds / 30 : 2;
	t0 = now_ms();
	end = t0 + (uint64_t)seconds * 1000u;
	for (int i = 0; i < threads; i++) {
		ws[i].id = i;
		ws[i].deadline_ms = end;
		ws[i].rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
		if (pthread_create(&th[i], NULL, worker_main, &ws[i]) != 0) {
			fprintf(stderr, "soak_driver: cannot start threads\n");
			return 2;
		}
	}
	printf("rss 0 %ld %ld\n", proc_rss_kib(), wal_kib());
	for (int s = step_s; now_ms() < end; s += step_s) {
		uint64_t at = t0 + (uint64_t)s * 1000u;

		while (now_ms() < at && now_ms() < end) {
			struct timespec ts = { 0, 100 * 1000000L };
			nanosleep(&ts, NULL);
		}
		if (now_ms() >= at) {
			printf("rss %d %ld %ld\n", s, proc_rss_kib(),
			       wal_kib());
			fflush(stdout);
		}
	}
	for (int i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < threads; i++) {
		errors += ws[i].errors;
		if (ws[i].errors)
			report(0, "client %d: %lld wrong replies, first: %s", i,
			       ws[i].errors, ws[i].first_err);
	}
	report(errors == 0, "every reply during the soak was right (%lld ops)",
	       (long long)g_ops);
	for (int i = 0; i < threads; i++)
		verify(&ws[i]);
	printf("info %lld ops in %d s by %d clients (%lld/s), %lld "
	       "reconnects, %lld idempotent retries\n", (long long)g_ops,
	       seconds, threads, (long long)g_ops / seconds,
	       (long long)g_reconnects, (long long)g_retries);
	return atomic_load(&g_failed) ? 1 : 0;
}
