/* backup_load.c: a write load whose every prefix is recognisable, and the
 * checker that a backup holds exactly one such prefix (test_backup.sh).
 *
 *   backup_load load PORT DIR SECONDS THREADS
 *     THREADS connections (one thread each) pipeline batches of steps
 *     until SECONDS pass or the file DIR/stop appears. A step is one event on one of the thread's own
 *     objects, then INCRBY bk:n:THREAD 1, so the counter tells how many
 *     steps are in. Events: like or unlike (TALLY.ADD / TALLY.REMOVE of
 *     the unique type bkfav, members 1..16, so adds and removes hit members
 *     in and out), or views (TALLY.ADD of type view with a DELTA). Before a
 *     batch is sent its steps are appended to DIR/ops.THREAD ("L obj
 *     member", "U obj member", "V obj delta") and flushed; once all its
 *     replies are in, a line goes to DIR/acked.THREAD. So, at any moment,
 *     BATCH * lines(acked) steps are acknowledged and at most lines(ops)
 *     were sent. Any error reply is a failure (exit 1).
 *   backup_load verify PORT DIR THREADS BOUNDS
 *     Against a tallyd serving a copy: for each thread, with c the value of
 *     bk:n:THREAD, the objects must be exactly the replay of the first c
 *     steps, or of c steps plus the next event (a copy may fall between an
 *     event and its INCRBY): each like member in or out, the like count,
 *     the views, and the newest log entry. Each like count must also equal
 *     the members HAS finds, journal or not. BOUNDS holds "THREAD A S"
 *     lines: A steps acknowledged before the backup began, S sent when it
 *     ended; the prefix must lie in [A, S]. Prints "ok ..." or "FAIL ..."
 *     lines; exits 1 on any failure.
 * With TALLY_PASSWORD set, each connection first AUTHs with it. */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#define THREADS_MAX 16
#define NOBJ 4                 /* objects per thread */
#define NMEM 16                /* like members per object: 1..NMEM */
#define BATCH 32               /* steps per pipelined batch */
#define STEPS_MAX (1 << 20)    /* bound on one thread's journal */

static int g_port;
static const char *g_dir;
static double g_seconds;
static int g_failed;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static redisContext *connect_to(int port)
{
	struct timeval tv = { 30, 0 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);

	if (c == NULL || c->err) {
		fprintf(stderr, "backup_load: connect 127.0.0.1:%d: %s\n", port,
		        c ? c->errstr : "out of memory");
		if (c)
			redisFree(c);
		return NULL;
	}
	redisSetTimeout(c, tv);
	if (getenv("TALLY_PASSWORD") != NULL) {
		redisReply *r = redisCommand(c, "AUTH %s",
		                             getenv("TALLY_PASSWORD"));
		int ok = r != NULL && r->type == REDIS_REPLY_STATUS;

		if (r != NULL)
			freeReplyObject(r);
		if (!ok) {
			fprintf(stderr, "backup_load: AUTH failed\n");
			redisFree(c);
			return NULL;
		}
	}
	return c;
}

static uint64_t content_id(int t, int j)
{
	return 1 + (uint64_t)t * NOBJ + (uint64_t)j;
}

static FILE *open_file(const char *what, int t, const char *mode)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s.%d", g_dir, what, t);
	f = fopen(path, mode);
	if (f == NULL)
		perror(path);
	return f;
}

/* ---- load ----------------------------------------------------------------- */

typedef struct step {
	char kind;      /* 'L' like, 'U' unlike, 'V' views */
	int obj;
	int arg;        /* member, or the views' delta */
} step;

static void step_append(redisContext *c, int t, const step *s)
{
	unsigned long long cid = content_id(t, s->obj);

	if (s->kind == 'V')
		redisAppendCommand(c, "TALLY.ADD bkart view %llu 1 DELTA %d",
		                   cid, s->arg);
	else
		redisAppendCommand(c, "%s bkart bkfav %llu %d",
		                   s->kind == 'L' ? "TALLY.ADD" : "TALLY.REMOVE",
		                   cid, s->arg);
	redisAppendCommand(c, "INCRBY bk:n:%d 1", t);
}

/* One batch: journal, send, read every reply. 0, or -1 on any failure. */
static int batch(redisContext *c, int t, FILE *ops, FILE *acked,
                 unsigned *seed)
{
	step s[BATCH];

	for (int i = 0; i < BATCH; i++) {
		int r = rand_r(seed) % 100;

		s[i].obj = rand_r(seed) % NOBJ;
		s[i].kind = r < 45 ? 'L' : r < 75 ? 'U' : 'V';
		s[i].arg = s[i].kind == 'V' ? 1 + rand_r(seed) % 5
		                            : 1 + rand_r(seed) % NMEM;
		fprintf(ops, "%c %d %d\n", s[i].kind, s[i].obj, s[i].arg);
	}
	if (fflush(ops) != 0)
		return -1;
	for (int i = 0; i < BATCH; i++)
		step_append(c, t, &s[i]);
	for (int i = 0; i < 2 * BATCH; i++) {
		redisReply *r = NULL;

		if (redisGetReply(c, (void **)&r) != REDIS_OK || r == NULL) {
			fprintf(stderr, "backup_load: thread %d: %s\n", t,
			        c->errstr);
			return -1;
		}
		if (r->type != REDIS_REPLY_INTEGER) {
			fprintf(stderr, "backup_load: thread %d: reply %d of a "
			        "batch is not an integer: %s\n", t, i,
			        r->type == REDIS_REPLY_ERROR ? r->str : "?");
			freeReplyObject(r);
			return -1;
		}
		freeReplyObject(r);
	}
	fprintf(acked, "%d\n", BATCH);
	return fflush(acked) == 0 ? 0 : -1;
}

/* The test says when it has what it needs: the load then ends at once
 * rather than at its time limit. */
static int stop_asked(void)
{
	char path[4096];

	snprintf(path, sizeof path, "%s/stop", g_dir);
	return access(path, F_OK) == 0;
}

static void *load_thread(void *arg)
{
	int t = (int)(intptr_t)arg;
	unsigned seed = 0x9e3779b9u * (unsigned)(t + 1);
	FILE *ops = open_file("ops", t, "w"), *acked = open_file("acked", t, "w");
	redisContext *c = connect_to(g_port);
	double end = now_s() + g_seconds;
	long batches = 0;

	while (c != NULL && ops != NULL && acked != NULL && now_s() < end &&
	       !stop_asked() && (long)BATCH * (batches + 1) <= STEPS_MAX) {
		if (batch(c, t, ops, acked, &seed) != 0) {
			__atomic_store_n(&g_failed, 1, __ATOMIC_SEQ_CST);
			break;
		}
		batches++;
	}
	if (c == NULL || ops == NULL || acked == NULL)
		__atomic_store_n(&g_failed, 1, __ATOMIC_SEQ_CST);
	printf("thread %d: %ld steps acknowledged\n", t, batches * BATCH);
	if (c)
		redisFree(c);
	if (ops)
		fclose(ops);
	if (acked)
		fclose(acked);
	return NULL;
}

static int run_load(int threads)
{
	pthread_t th[THREADS_MAX];

	for (int t = 0; t < threads; t++)
		if (pthread_create(&th[t], NULL, load_thread, (void *)(intptr_t)t)) {
			fprintf(stderr, "backup_load: cannot start a thread\n");
			return 1;
		}
	for (int t = 0; t < threads; t++)
		pthread_join(th[t], NULL);
	return g_failed ? 1 : 0;
}

/* ---- verify --------------------------------------------------------------- */

typedef struct state {
	int in[NOBJ][NMEM + 1];
	long long likes[NOBJ], views[NOBJ];
	int last_member[NOBJ];   /* newest effective like op; 0: none */
	int last_add[NOBJ];
} state;

static void apply(state *s, const step *p)
{
	int *in = &s->in[p->obj][p->arg];

	if (p->kind == 'V') {
		s->views[p->obj] += p->arg;
		return;
	}
	if ((p->kind == 'L') == (*in != 0))
		return;         /* adding a member in, or removing one out */
	*in = p->kind == 'L';
	s->likes[p->obj] += *in ? 1 : -1;
	s->last_member[p->obj] = p->arg;
	s->last_add[p->obj] = *in;
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
	va_list ap;

	printf("FAIL ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	g_failed = 1;
	return -1;
}

static long long int_of(const redisReply *r)
{
	if (r->type == REDIS_REPLY_INTEGER)
		return r->integer;
	if (r->type == REDIS_REPLY_STRING)
		return strtoll(r->str, NULL, 10);
	return -1;
}

static step *read_ops(int t, size_t *n)
{
	FILE *f = open_file("ops", t, "r");
	step *v = f ? calloc(STEPS_MAX, sizeof *v) : NULL;
	size_t k = 0;

	while (v != NULL && k < STEPS_MAX &&
	       fscanf(f, " %c %d %d", &v[k].kind, &v[k].obj, &v[k].arg) == 3)
		k++;
	if (f)
		fclose(f);
	*n = k;
	return v;
}

/* What the copy holds for thread t, read as a state. -1 on a bad reply. */
static int read_state(redisContext *c, int t, state *s, long long *steps)
{
	redisReply *r;
	int rc = 0;

	memset(s, 0, sizeof *s);
	redisAppendCommand(c, "GET bk:n:%d", t);
	for (int j = 0; j < NOBJ; j++) {
		unsigned long long cid = content_id(t, j);

		redisAppendCommand(c, "TALLY.COUNT bkart bkfav %llu", cid);
		redisAppendCommand(c, "TALLY.COUNT bkart view %llu", cid);
		redisAppendCommand(c, "TALLY.RECENT bkart bkfav %llu LIMIT 1", cid);
		for (int m = 1; m <= NMEM; m++)
			redisAppendCommand(c, "TALLY.HAS bkart bkfav %llu %d", cid, m);
	}
	if (redisGetReply(c, (void **)&r) != REDIS_OK)
		return fail("thread %d: GET: %s", t, c->errstr);
	*steps = r->type == REDIS_REPLY_NIL ? 0 : strtoll(r->str, NULL, 10);
	freeReplyObject(r);
	for (int j = 0; j < NOBJ; j++) {
		redisReply *likes, *views, *recent;

		if (redisGetReply(c, (void **)&likes) != REDIS_OK ||
		    redisGetReply(c, (void **)&views) != REDIS_OK ||
		    redisGetReply(c, (void **)&recent) != REDIS_OK)
			return fail("thread %d: reads: %s", t, c->errstr);
		s->likes[j] = int_of(likes);
		s->views[j] = int_of(views);
		if (recent->type == REDIS_REPLY_ARRAY && recent->elements == 1 &&
		    recent->element[0]->elements >= 3) {
			redisReply **e = recent->element[0]->element;

			s->last_member[j] = (int)int_of(e[0]);
			s->last_add[j] = e[2]->str != NULL &&
			                 strcmp(e[2]->str, "add") == 0;
		} else if (recent->type != REDIS_REPLY_ARRAY) {
			rc = fail("thread %d: TALLY.RECENT is not an array", t);
		}
		freeReplyObject(likes);
		freeReplyObject(views);
		freeReplyObject(recent);
		for (int m = 1; m <= NMEM; m++) {
			if (redisGetReply(c, (void **)&r) != REDIS_OK)
				return fail("thread %d: HAS: %s", t, c->errstr);
			s->in[j][m] = r->type == REDIS_REPLY_INTEGER;
			freeReplyObject(r);
		}
	}
	return rc;
}

/* Count equals membership, in the copy alone. */
static void check_members(int t, const state *got)
{
	for (int j = 0; j < NOBJ; j++) {
		long long n = 0;

		for (int m = 1; m <= NMEM; m++)
			n += got->in[j][m];
		if (n != got->likes[j])
			fail("thread %d object %" PRIu64 ": count %lld but %lld "
			     "members", t, content_id(t, j), got->likes[j], n);
	}
}

static int verify_thread(redisContext *c, int t, long long lo, long long hi)
{
	state want, got;
	long long steps;
	size_t n;
	step *ops = read_ops(t, &n);
	int same;

	if (ops == NULL)
		return fail("thread %d: cannot read its journal", t);
	if (read_state(c, t, &got, &steps) != 0) {
		free(ops);
		return -1;
	}
	check_members(t, &got);
	if (steps < lo || steps > hi || (size_t)steps > n) {
		free(ops);
		return fail("thread %d: %lld steps in the copy, outside [%lld "
		            "acked before, %lld sent after] (journal %zu)", t,
		            steps, lo, hi, n);
	}
	memset(&want, 0, sizeof want);
	for (long long i = 0; i < steps; i++)
		apply(&want, &ops[i]);
	same = memcmp(&want, &got, sizeof want) == 0;
	if (!same && (size_t)steps < n && steps + 1 <= hi) {
		apply(&want, &ops[steps]);
		same = memcmp(&want, &got, sizeof want) == 0;
		if (same)
			printf("ok   thread %d: the copy is the first %lld steps "
			       "and the next event, in [%lld, %lld]\n", t, steps,
			       lo, hi);
	} else if (same) {
		printf("ok   thread %d: the copy is exactly the first %lld "
		       "steps, in [%lld, %lld]\n", t, steps, lo, hi);
	}
	free(ops);
	if (!same)
		return fail("thread %d: the copy is no prefix of the writes "
		            "(counter %lld): members, counts, views or newest "
		            "log entry differ", t, steps);
	return 0;
}

static int run_verify(int port, int threads, const char *bounds)
{
	FILE *f = fopen(bounds, "r");
	redisContext *c = connect_to(port);
	int t, seen = 0;
	long long lo, hi;

	if (f == NULL || c == NULL) {
		if (f == NULL)
			perror(bounds);
		if (f)
			fclose(f);
		if (c)
			redisFree(c);
		return 1;
	}
	while (fscanf(f, "%d %lld %lld", &t, &lo, &hi) == 3 && t >= 0 &&
	       t < threads) {
		verify_thread(c, t, lo, hi);
		seen++;
	}
	fclose(f);
	redisFree(c);
	if (seen != threads)
		fail("bounds for %d of %d threads", seen, threads);
	return g_failed ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc == 6 && strcmp(argv[1], "load") == 0) {
		int threads = atoi(argv[5]);

		g_port = atoi(argv[2]);
		g_dir = argv[3];
		g_seconds = atof(argv[4]);
		if (threads < 1 || threads > THREADS_MAX || g_seconds <= 0)
			return 2;
		return run_load(threads);
	}
	if (argc == 6 && strcmp(argv[1], "verify") == 0) {
		int threads = atoi(argv[4]);

		g_dir = argv[3];
		if (threads < 1 || threads > THREADS_MAX)
			return 2;
		return run_verify(atoi(argv[2]), threads, argv[5]);
	}
	fprintf(stderr, "usage: backup_load load PORT DIR SECONDS THREADS\n"
	        "       backup_load verify PORT DIR THREADS BOUNDS\n");
	return 2;
}
