/* ack_load.c: a load generator that records every acknowledged write, and
 * the checker that finds each of them after a crash (test_persistence.sh).
 *
 *   ack_load load PORT ROUND SECONDS CONNS DIR
 *     CONNS connections (one thread each) pipeline batches of INCRBY on a
 *     few hot keys, TALLY.ADD of likes with members never used before, and
 *     TALLY.ADD of views with a DELTA, until SECONDS pass or tallyd goes
 *     away. As each batch's replies arrive, every write acknowledged with
 *     a count is appended to DIR/ack.ROUND (flushed per batch):
 *       I key delta | L obj member | V obj delta
 *     Every like member sent (acked or not) goes to DIR/sent.ROUND before
 *     it is sent, and at the end the totals sent per key and per object:
 *       L obj member | IS key total | VS obj total
 *     With ACK_LOAD_RECONNECT set in the environment, a connection the
 *     server closes is opened again, until SECONDS pass (test_memory.sh:
 *     tallyd closes a connection whose request it has no memory for).
 *   ack_load verify PORT ROUND DIR
 *     With DIR/state.(ROUND-1) as the state after the previous round
 *     (values and present members), checks against the restarted tallyd:
 *       - counter:  before + acked <= value <= before + sent
 *       - views:    the same for each object's total
 *       - likes:    every acked member (of every round) HAS a time
 *       - no member present after an earlier round is gone
 *       - COUNT of each object == members of all rounds' sent ones that
 *         HAS finds (count and membership cannot drift)
 *     then writes DIR/state.ROUND. Prints "ok ..." / "FAIL ..." lines;
 *     exits 1 on any failure. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#define NKEYS 16
#define NOBJS 8
#define BATCH 64
#define MAX_CONNS 64

static int g_port;
static unsigned g_round;
static const char *g_dir;
static double g_seconds;
static FILE *g_ack, *g_sent;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic long long g_sent_i[NKEYS], g_sent_v[NOBJS];
static _Atomic long long g_acked, g_errors, g_reconnects;
/* ACK_LOAD_RECONNECT=1: a connection the server closes is opened again
 * (until SECONDS pass), instead of ending its thread. */
static int g_reconnect;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static redisContext *connect_to(void)
{
	struct timeval tv = { 10, 0 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", g_port, tv);

	if (c == NULL || c->err) {
		fprintf(stderr, "ack_load: connect 127.0.0.1:%d: %s\n", g_port,
		        c ? c->errstr : "out of memory");
		if (c)
			redisFree(c);
		return NULL;
	}
	redisSetTimeout(c, tv);
	return c;
}

/* ---- load --------------------------------------------------------------- */

typedef struct op {
	char kind;            /* 'I', 'L', 'V' */
	unsigned idx;         /* key or object */
	long long delta;
	uint64_t member;
} op;

static void *load_thread(void *arg)
{
	unsigned t = (unsigned)(uintptr_t)arg;
	uint64_t rng = 0x9E3779B97F4A7C15ull * (t + 1) ^ (uint64_t)time(NULL) ^
	               ((uint64_t)g_round << 40);
	uint64_t seq = 0;
	double end = now_s() + g_seconds;
	redisContext *c = connect_to();
	char sent[BATCH * 48], acked[BATCH * 48];

	if (c == NULL)
		return NULL;
	while (now_s() < end) {
		op ops[BATCH];
		size_t sl = 0, al = 0;
		int i, dead = 0;

		for (i = 0; i < BATCH; i++) {
			op *o = &ops[i];
			uint64_t r = xorshift(&rng) % 100;
			char a[3][32];
			const char *argv[7];
			size_t lens[7];
			int argc, k;

			if (r < 50) {
				o->kind = 'I';
				o->idx = (unsigned)(xorshift(&rng) % NKEYS);
				o->delta = 1 + (long long)(xorshift(&rng) % 5);
				snprintf(a[0], sizeof a[0], "ack:%u", o->idx);
				snprintf(a[1], sizeof a[1], "%lld", o->delta);
				argv[0] = "INCRBY";
				argv[1] = a[0];
				argv[2] = a[1];
				argc = 3;
				atomic_fetch_add(&g_sent_i[o->idx], o->delta);
			} else if (r < 85) {
				o->kind = 'L';
				o->idx = (unsigned)(xorshift(&rng) % NOBJS);
				/* never used before: round, thread, sequence */
				o->member = (uint64_t)g_round * 1000000000000ull +
				            (uint64_t)t * 1000000000ull + ++seq;
				snprintf(a[0], sizeof a[0], "%u", o->idx);
				snprintf(a[1], sizeof a[1], "%" PRIu64, o->member);
				argv[0] = "TALLY.ADD";
				argv[1] = "ack";
				argv[2] = "like";
				argv[3] = a[0];
				argv[4] = a[1];
				argc = 5;
				sl += (size_t)snprintf(sent + sl, sizeof sent - sl,
				                       "L %u %" PRIu64 "\n", o->idx,
				                       o->member);
			} else {
				o->kind = 'V';
				o->idx = (unsigned)(xorshift(&rng) % NOBJS);
				o->delta = 1 + (long long)(xorshift(&rng) % 5);
				snprintf(a[0], sizeof a[0], "%u", o->idx);
				snprintf(a[1], sizeof a[1], "%lld", o->delta);
				argv[0] = "TALLY.ADD";
				argv[1] = "ack";
				argv[2] = "view";
				argv[3] = a[0];
				argv[4] = "0";
				argv[5] = "DELTA";
				argv[6] = a[1];
				argc = 7;
				atomic_fetch_add(&g_sent_v[o->idx], o->delta);
			}
			for (k = 0; k < argc; k++)
				lens[k] = strlen(argv[k]);
			redisAppendCommandArgv(c, argc, argv, lens);
		}
		/* what is sent is on file before it can be acknowledged */
		pthread_mutex_lock(&g_mu);
		fwrite(sent, 1, sl, g_sent);
		fflush(g_sent);
		pthread_mutex_unlock(&g_mu);
		for (i = 0; i < BATCH; i++) {
			void *vr = NULL;
			redisReply *r;
			op *o = &ops[i];

			if (redisGetReply(c, &vr) != REDIS_OK || vr == NULL) {
				dead = 1;
				break;
			}
			r = vr;
			if (r->type == REDIS_REPLY_INTEGER) {
				if (o->kind == 'L')
					al += (size_t)snprintf(acked + al,
					        sizeof acked - al, "L %u %" PRIu64
					        "\n", o->idx, o->member);
				else
					al += (size_t)snprintf(acked + al,
					        sizeof acked - al, "%c %u %lld\n",
					        o->kind, o->idx, o->delta);
				atomic_fetch_add(&g_acked, 1);
			} else if (atomic_fetch_add(&g_errors, 1) < 5) {
				fprintf(stderr, "ack_load: %c reply type %d: %s\n",
				        o->kind, r->type, r->str ? r->str : "");
			}
			freeReplyObject(r);
		}
		pthread_mutex_lock(&g_mu);
		fwrite(acked, 1, al, g_ack);
		fflush(g_ack);
		pthread_mutex_unlock(&g_mu);
		if (dead && g_reconnect) {
			/* A server that closed this connection (out of
			 * memory, say) may take the next. */
			struct timespec ms = {0, 10 * 1000000};

			redisFree(c);
			while ((c = connect_to()) == NULL && now_s() < end)
				nanosleep(&ms, NULL);
			if (c == NULL)
				return NULL;
			atomic_fetch_add(&g_reconnects, 1);
			continue;
		}
		if (dead)
			break;
	}
	redisFree(c);
	return NULL;
}

static FILE *open_round(const char *what, unsigned round, const char *mode)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s.%u", g_dir, what, round);
	f = fopen(path, mode);
	if (f == NULL && mode[0] == 'w')
		fprintf(stderr, "ack_load: %s: %s\n", path, strerror(errno));
	return f;
}

static int do_load(int conns)
{
	pthread_t th[MAX_CONNS];
	int i;

	g_ack = open_round("ack", g_round, "w");
	g_sent = open_round("sent", g_round, "w");
	if (g_ack == NULL || g_sent == NULL)
		return 2;
	for (i = 0; i < conns; i++)
		pthread_create(&th[i], NULL, load_thread, (void *)(uintptr_t)i);
	for (i = 0; i < conns; i++)
		pthread_join(th[i], NULL);
	for (i = 0; i < NKEYS; i++)
		fprintf(g_sent, "IS %d %lld\n", i, atomic_load(&g_sent_i[i]));
	for (i = 0; i < NOBJS; i++)
		fprintf(g_sent, "VS %d %lld\n", i, atomic_load(&g_sent_v[i]));
	fclose(g_sent);
	fclose(g_ack);
	printf("ack_load: round %u: %lld writes acknowledged, %lld error "
	       "replies, %lld reconnections\n", g_round, atomic_load(&g_acked),
	       atomic_load(&g_errors), atomic_load(&g_reconnects));
	return 0;
}

/* ---- verify ----------------------------------------------------------------- */

typedef struct mem {
	unsigned obj;
	uint64_t member;
} mem;

typedef struct memv {
	mem *v;
	size_t n, cap;
} memv;

static void memv_push(memv *a, unsigned obj, uint64_t m)
{
	if (a->n == a->cap) {
		a->cap = a->cap ? a->cap * 2 : 4096;
		a->v = realloc(a->v, a->cap * sizeof *a->v);
		if (a->v == NULL) {
			perror("realloc");
			exit(2);
		}
	}
	a->v[a->n].obj = obj;
	a->v[a->n].member = m;
	a->n++;
}

static int mem_cmp(const void *x, const void *y)
{
	const mem *a = x, *b = y;

	if (a->obj != b->obj)
		return a->obj < b->obj ? -1 : 1;
	return a->member < b->member ? -1 : a->member > b->member;
}

static int g_fail, g_pass;

static void check(int ok, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void check(int ok, const char *fmt, ...)
{
	va_list ap;

	printf(ok ? "ok   " : "FAIL ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (ok)
		g_pass++;
	else
		g_fail++;
}

/* HAS for every member of a (pipelined); present[i] = 1 when it has a
 * time. Returns -1 when tallyd stops answering. */
static int has_all(redisContext *c, const memv *a, unsigned char *present,
                   long long *bad_time)
{
	const size_t chunk = 2000;

	*bad_time = 0;
	for (size_t i = 0; i < a->n; i += chunk) {
		size_t k = a->n - i < chunk ? a->n - i : chunk;

		for (size_t j = 0; j < k; j++) {
			char o[16], m[32];
			const char *argv[5] = { "TALLY.HAS", "ack", "like", o, m };
			size_t lens[5];

			snprintf(o, sizeof o, "%u", a->v[i + j].obj);
			snprintf(m, sizeof m, "%" PRIu64, a->v[i + j].member);
			for (int x = 0; x < 5; x++)
				lens[x] = strlen(argv[x]);
			redisAppendCommandArgv(c, 5, argv, lens);
		}
		for (size_t j = 0; j < k; j++) {
			void *vr = NULL;
			redisReply *r;

			if (redisGetReply(c, &vr) != REDIS_OK || vr == NULL)
				return -1;
			r = vr;
			present[i + j] = r->type == REDIS_REPLY_INTEGER;
			if (r->type == REDIS_REPLY_INTEGER &&
			    r->integer < 1500000000000ll)
				(*bad_time)++;
			else if (r->type != REDIS_REPLY_INTEGER &&
			         r->type != REDIS_REPLY_NIL)
				(*bad_time)++;
			freeReplyObject(r);
		}
	}
	return 0;
}

static long long get_int(redisContext *c, const char *a0, const char *a1,
                         const char *a2, const char *a3)
{
	const char *argv[4] = { a0, a1, a2, a3 };
	size_t lens[4];
	int argc = a2 ? (a3 ? 4 : 3) : 2;
	redisReply *r;
	long long v = 0;

	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	r = redisCommandArgv(c, argc, argv, lens);
	if (r == NULL) {
		fprintf(stderr, "ack_load verify: no reply: %s\n", c->errstr);
		exit(1);
	}
	if (r->type == REDIS_REPLY_INTEGER)
		v = r->integer;
	else if (r->type == REDIS_REPLY_STRING)
		v = strtoll(r->str, NULL, 10);
	else if (r->type != REDIS_REPLY_NIL)
		fprintf(stderr, "ack_load verify: %s %s: reply type %d %s\n",
		        a0, a1, r->type, r->str ? r->str : "");
	freeReplyObject(r);
	return v;
}

static int do_verify(void)
{
	long long before_i[NKEYS] = { 0 }, before_v[NOBJS] = { 0 };
	long long acked_i[NKEYS] = { 0 }, acked_v[NOBJS] = { 0 };
	long long sent_i[NKEYS] = { 0 }, sent_v[NOBJS] = { 0 };
	long long count[NOBJS] = { 0 }, in_obj[NOBJS] = { 0 };
	memv acked_l = { 0 }, sent_l = { 0 }, prev_in = { 0 };
	unsigned char *present;
	long long bad_time = 0, missing = 0, lost = 0;
	redisContext *c;
	char line[256];
	FILE *f;
	unsigned r;
	int i;

	/* the state after the previous round */
	if (g_round > 1) {
		f = open_round("state", g_round - 1, "r");
		if (f == NULL) {
			fprintf(stderr, "ack_load verify: no state of round %u\n",
			        g_round - 1);
			return 2;
		}
		while (fgets(line, sizeof line, f)) {
			unsigned idx;
			long long v;
			uint64_t m;

			if (sscanf(line, "I %u %lld", &idx, &v) == 2 && idx < NKEYS)
				before_i[idx] = v;
			else if (sscanf(line, "V %u %lld", &idx, &v) == 2 &&
			         idx < NOBJS)
				before_v[idx] = v;
			else if (sscanf(line, "P %u %" SCNu64, &idx, &m) == 2)
				memv_push(&prev_in, idx, m);
		}
		fclose(f);
	}
	/* this round's acks; every round's acked and sent members */
	for (r = 1; r <= g_round; r++) {
		f = open_round("ack", r, "r");
		if (f == NULL)
			continue;
		while (fgets(line, sizeof line, f)) {
			unsigned idx;
			long long d;
			uint64_t m;

			if (sscanf(line, "L %u %" SCNu64, &idx, &m) == 2)
				memv_push(&acked_l, idx, m);
			else if (r == g_round &&
			         sscanf(line, "I %u %lld", &idx, &d) == 2 &&
			         idx < NKEYS)
				acked_i[idx] += d;
			else if (r == g_round &&
			         sscanf(line, "V %u %lld", &idx, &d) == 2 &&
			         idx < NOBJS)
				acked_v[idx] += d;
		}
		fclose(f);
		f = open_round("sent", r, "r");
		if (f == NULL)
			continue;
		while (fgets(line, sizeof line, f)) {
			unsigned idx;
			long long d;
			uint64_t m;

			if (sscanf(line, "L %u %" SCNu64, &idx, &m) == 2)
				memv_push(&sent_l, idx, m);
			else if (r == g_round &&
			         sscanf(line, "IS %u %lld", &idx, &d) == 2 &&
			         idx < NKEYS)
				sent_i[idx] = d;
			else if (r == g_round &&
			         sscanf(line, "VS %u %lld", &idx, &d) == 2 &&
			         idx < NOBJS)
				sent_v[idx] = d;
		}
		fclose(f);
	}
	c = connect_to();
	if (c == NULL)
		return 1;

	/* named counters and view totals: acked <= gained <= sent */
	{
		long long now_i[NKEYS], now_v[NOBJS];
		int bad = 0;

		for (i = 0; i < NKEYS; i++) {
			char key[32];

			snprintf(key, sizeof key, "ack:%d", i);
			now_i[i] = get_int(c, "GET", key, NULL, NULL);
			if (now_i[i] - before_i[i] < acked_i[i] ||
			    now_i[i] - before_i[i] > sent_i[i]) {
				if (bad++ < 5)
					printf("     ack:%d before %lld now %lld: "
					       "gained %lld, acked %lld, sent "
					       "%lld\n", i, before_i[i], now_i[i],
					       now_i[i] - before_i[i], acked_i[i],
					       sent_i[i]);
			}
		}
		check(bad == 0, "round %u: each counter gained at least its "
		      "acknowledged increments and at most what was sent",
		      g_round);
		bad = 0;
		for (i = 0; i < NOBJS; i++) {
			char o[16];

			snprintf(o, sizeof o, "%d", i);
			now_v[i] = get_int(c, "TALLY.COUNT", "ack", "view", o);
			if (now_v[i] - before_v[i] < acked_v[i] ||
			    now_v[i] - before_v[i] > sent_v[i]) {
				if (bad++ < 5)
					printf("     view %d before %lld now %lld: "
					       "acked %lld, sent %lld\n", i,
					       before_v[i], now_v[i], acked_v[i],
					       sent_v[i]);
			}
		}
		check(bad == 0, "round %u: each view total gained at least its "
		      "acknowledged deltas and at most what was sent", g_round);
		memcpy(before_i, now_i, sizeof now_i);
		memcpy(before_v, now_v, sizeof now_v);
	}

	/* likes: every acked member is in */
	present = calloc(acked_l.n + 1, 1);
	if (has_all(c, &acked_l, present, &bad_time) != 0) {
		check(0, "tallyd answers HAS for every acked member");
		return 1;
	}
	for (size_t k = 0; k < acked_l.n; k++)
		if (!present[k] && missing++ < 5)
			printf("     acked like missing: obj %u member %" PRIu64
			       "\n", acked_l.v[k].obj, acked_l.v[k].member);
	check(missing == 0, "round %u: all %zu acknowledged likes (all rounds) "
	      "are present (%lld missing)", g_round, acked_l.n, missing);
	free(present);

	/* likes: membership over the whole member space, and COUNT */
	qsort(sent_l.v, sent_l.n, sizeof *sent_l.v, mem_cmp);
	present = calloc(sent_l.n + 1, 1);
	if (has_all(c, &sent_l, present, &bad_time) != 0) {
		check(0, "tallyd answers HAS for every sent member");
		return 1;
	}
	check(bad_time == 0, "round %u: HAS answers a plausible time or nil",
	      g_round);
	for (size_t k = 0; k < sent_l.n; k++)
		if (present[k] && sent_l.v[k].obj < NOBJS)
			in_obj[sent_l.v[k].obj]++;
	for (size_t k = 0; k < prev_in.n; k++) {
		mem *hit = bsearch(&prev_in.v[k], sent_l.v, sent_l.n,
		                   sizeof *sent_l.v, mem_cmp);

		if (hit == NULL || !present[hit - sent_l.v])
			if (lost++ < 5)
				printf("     member present before, gone now: obj "
				       "%u member %" PRIu64 "\n", prev_in.v[k].obj,
				       prev_in.v[k].member);
	}
	check(lost == 0, "round %u: no like present after an earlier round "
	      "is gone (%zu checked)", g_round, prev_in.n);
	{
		int bad = 0;

		for (i = 0; i < NOBJS; i++) {
			char o[16];

			snprintf(o, sizeof o, "%d", i);
			count[i] = get_int(c, "TALLY.COUNT", "ack", "like", o);
			if (count[i] != in_obj[i] && bad++ < 5)
				printf("     like %d: COUNT %lld, members in %lld\n",
				       i, count[i], in_obj[i]);
		}
		check(bad == 0, "round %u: COUNT of every object equals its "
		      "members found by HAS over all %zu members sent",
		      g_round, sent_l.n);
	}

	/* the state after this round */
	f = open_round("state", g_round, "w");
	if (f == NULL)
		return 2;
	for (i = 0; i < NKEYS; i++)
		fprintf(f, "I %d %lld\n", i, before_i[i]);
	for (i = 0; i < NOBJS; i++)
		fprintf(f, "V %d %lld\n", i, before_v[i]);
	for (size_t k = 0; k < sent_l.n; k++)
		if (present[k])
			fprintf(f, "P %u %" PRIu64 "\n", sent_l.v[k].obj,
			        sent_l.v[k].member);
	fclose(f);
	free(present);
	free(acked_l.v);
	free(sent_l.v);
	free(prev_in.v);
	redisFree(c);
	printf("verify round %u: %d passed, %d failed\n", g_round, g_pass,
	       g_fail);
	return g_fail ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc == 7 && strcmp(argv[1], "load") == 0) {
		int conns = atoi(argv[5]);

		g_port = atoi(argv[2]);
		g_round = (unsigned)atoi(argv[3]);
		g_seconds = atof(argv[4]);
		g_dir = argv[6];
		if (conns < 1 || conns > MAX_CONNS)
			conns = 4;
		g_reconnect = getenv("ACK_LOAD_RECONNECT") != NULL;
		return do_load(conns);
	}
	if (argc == 5 && strcmp(argv[1], "verify") == 0) {
		g_port = atoi(argv[2]);
		g_round = (unsigned)atoi(argv[3]);
		g_dir = argv[4];
		return do_verify();
	}
	fprintf(stderr, "usage: ack_load load PORT ROUND SECONDS CONNS DIR\n"
	        "       ack_load verify PORT ROUND DIR\n");
	return 2;
}
