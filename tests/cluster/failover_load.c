/* failover_load.c: a client of a real tallyd on the redis-cluster store,
 * for tests/cluster/test_cluster_failover.sh. "load" writes counters (one of
 * them sharded), views and likes until a stop file appears, and keeps a
 * journal of what was acknowledged and what stayed unknown; "verify" reads
 * the counts back and checks them against one or more journals.
 *
 *   failover_load load RESP HTTP PREFIX CONTENT MEMBER_BASE MODE STOP JOURNAL
 *   failover_load verify RESP strict|loose LABEL JOURNAL...
 *
 * ids: every write carries an ID (counters over HTTP, which takes one); an
 * error is retried with the same ID until answered, so it counts once.
 * noids: plain INCRBY / TALLY.ADD; an error is unknown (may or may not have
 * applied). incr, incrid: like noids, ids, but only increments of
 * PREFIX.c, so that every batch writes that one key's node and nothing
 * else. strict: nothing acknowledged may be missing (--redis-wait);
 * loose: losses are counted and reported, not failed. Both: nothing counted
 * twice, and a like count equals the members that are in. */
#define _GNU_SOURCE /* strcasestr */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

/* A tallyd reply may wait out the store's whole resend deadline plus WAIT. */
#define REPLY_TIMEOUT_S 40
/* After the stop file, how long an unanswered ID is still retried. */
#define DRAIN_MS 60000
/* Whatever happens, a load ends this long after it began. */
#define LOAD_MAX_MS 240000
#define RETRY_PAUSE_US 200000
#define OP_PAUSE_US 2000
#define MEMBERS_MAX 400000
#define NAME_MAX_LEN 128
#define HTTP_BUF 8192

static int failures;

static void check(int cond, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void check(int cond, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	printf(cond ? "ok   " : "FAIL ");
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
	va_end(ap);
	if (!cond)
		failures++;
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t real_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- RESP (hiredis) ------------------------------------------------------ */

static redisContext *resp_connect(int port)
{
	struct timeval tv = { REPLY_TIMEOUT_S, 0 };
	redisContext *r = redisConnectWithTimeout("127.0.0.1", port,
	                                          (struct timeval){ 5, 0 });

	if (r == NULL)
		return NULL;
	if (r->err || redisSetTimeout(r, tv) != REDIS_OK) {
		redisFree(r);
		return NULL;
	}
	return r;
}

/* One command; the reply (caller frees) or NULL when the connection broke
 * (it is then closed and *r set to NULL, to be made again). */
static redisReply *resp_cmd(redisContext **r, int port, int argc,
                            const char **argv)
{
	redisReply *x;

	if (*r == NULL)
		*r = resp_connect(port);
	if (*r == NULL)
		return NULL;
	x = redisCommandArgv(*r, argc, argv, NULL);
	if (x == NULL) {
		redisFree(*r);
		*r = NULL;
	}
	return x;
}

/* ---- HTTP: keep-alive POST, enough for tallyd's answers ------------------ */

typedef struct hconn {
	int fd;
	int port;
} hconn;

static int http_connect(hconn *h)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct timeval tv = { REPLY_TIMEOUT_S, 0 };

	a.sin_port = htons((uint16_t)h->port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	h->fd = socket(AF_INET, SOCK_STREAM, 0);
	if (h->fd < 0)
		return -1;
	if (setsockopt(h->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) ||
	    setsockopt(h->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) ||
	    connect(h->fd, (struct sockaddr *)&a, sizeof a)) {
		close(h->fd);
		h->fd = -1;
		return -1;
	}
	return 0;
}

static void http_close(hconn *h)
{
	if (h->fd >= 0)
		close(h->fd);
	h->fd = -1;
}

/* POST body to path; the status, or -1 when the connection broke. */
static int http_post(hconn *h, const char *path, const char *body)
{
	char buf[HTTP_BUF], *end, *cl;
	size_t len = 0, need;
	int n, status;

	if (h->fd < 0 && http_connect(h) != 0)
		return -1;
	n = snprintf(buf, sizeof buf, "POST %s HTTP/1.1\r\nHost: t\r\n"
	             "Content-Type: application/json\r\nContent-Length: %zu"
	             "\r\n\r\n%s", path, strlen(body), body);
	if (n < 0 || (size_t)n >= sizeof buf ||
	    send(h->fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
		goto broken;
	for (;;) {
		ssize_t got = recv(h->fd, buf + len, sizeof buf - 1 - len, 0);

		if (got <= 0)
			goto broken;
		len += (size_t)got;
		buf[len] = '\0';
		end = strstr(buf, "\r\n\r\n");
		if (end != NULL)
			break;
		if (len == sizeof buf - 1)
			goto broken;
	}
	if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
		goto broken;
	*end = '\0';
	cl = strcasestr(buf, "\r\nContent-Length:");
	need = cl ? (size_t)strtoul(cl + 17, NULL, 10) : 0;
	need += (size_t)(end + 4 - buf);
	if (need >= sizeof buf)
		goto broken;
	while (len < need) {
		ssize_t got = recv(h->fd, buf + len, need - len, 0);

		if (got <= 0)
			goto broken;
		len += (size_t)got;
	}
	if (strcasestr(buf, "\r\nConnection: close"))
		http_close(h);
	return status;
broken:
	http_close(h);
	return -1;
}

/* ---- load ------------------------------------------------------------------ */

typedef struct journal {
	int64_t c_ack[2], c_unk[2];   /* PREFIX.c, PREFIX.sh */
	int64_t v_ack, v_unk;         /* views of CONTENT */
	uint64_t *members;            /* likes sent */
	char *state;                  /* 'a' acked, 'u' unknown */
	size_t nm;
	/* figures */
	int64_t acked, errors, unknown, retried;
	int64_t gap_ms, gap_end_ms, last_ack_mono;
} journal;

typedef struct loader {
	int resp_port;
	hconn http;
	redisContext *r;
	const char *prefix, *content;
	uint64_t member_base;
	int ids, incr_only;
	const char *stop;
	journal j;
} loader;

static int stop_seen(const loader *l)
{
	return access(l->stop, F_OK) == 0;
}

/* One attempt: 1 acknowledged, 0 answered with an error or not at all. */
static int attempt(loader *l, int kind, int64_t d, uint64_t member,
                   const char *id)
{
	char name[NAME_MAX_LEN], ds[24], ms[24], path[NAME_MAX_LEN + 32];
	char body[160];
	const char *argv[10];
	redisReply *x;
	int argc = 0, ok;

	snprintf(ds, sizeof ds, "%" PRId64, d);
	snprintf(ms, sizeof ms, "%" PRIu64, member);
	if (kind < 2) {
		snprintf(name, sizeof name, "%s.%s", l->prefix,
		         kind == 0 ? "c" : "sh");
		if (l->ids) {
			snprintf(path, sizeof path, "/v1/counters/%s/incr", name);
			snprintf(body, sizeof body, "{\"by\":%s,\"id\":\"%s\"}",
			         ds, id);
			return http_post(&l->http, path, body) == 200;
		}
		argv[argc++] = "INCRBY";
		argv[argc++] = name;
		argv[argc++] = ds;
	} else {
		argv[argc++] = "TALLY.ADD";
		argv[argc++] = "article";
		argv[argc++] = kind == 2 ? "view" : "like";
		argv[argc++] = l->content;
		argv[argc++] = ms;
		if (kind == 2) {
			argv[argc++] = "DELTA";
			argv[argc++] = ds;
		}
		if (l->ids) {
			argv[argc++] = "ID";
			argv[argc++] = id;
		}
	}
	x = resp_cmd(&l->r, l->resp_port, argc, argv);
	ok = x != NULL && x->type == REDIS_REPLY_INTEGER;
	if (x != NULL)
		freeReplyObject(x);
	return ok;
}

static void record(journal *j, int kind, int64_t d, int acked)
{
	int64_t *ack = kind < 2 ? &j->c_ack[kind] : &j->v_ack;
	int64_t *unk = kind < 2 ? &j->c_unk[kind] : &j->v_unk;

	if (kind == 3)
		return; /* likes are journaled per member */
	*(acked ? ack : unk) += d;
}

/* Run op seq: retried with its ID until answered (ids), or tried once. */
static void run_op(loader *l, uint64_t seq, int64_t start, int64_t *stop_at)
{
	int kind = l->incr_only ? 0 : (int)(seq % 4);
	int64_t d = 1 + (int64_t)(seq % 5);
	uint64_t member = l->member_base + seq;
	char id[64];
	int acked = 0, tries;

	snprintf(id, sizeof id, "%s-%" PRIu64, l->prefix, seq);
	for (tries = 0;; tries++) {
		int64_t now = mono_ms();

		acked = attempt(l, kind, d, member, id);
		if (acked)
			break;
		l->j.errors++;
		if (*stop_at == 0 && stop_seen(l))
			*stop_at = now;
		if (!l->ids || now - start > LOAD_MAX_MS ||
		    (*stop_at != 0 && now - *stop_at > DRAIN_MS))
			break;
		usleep(RETRY_PAUSE_US);
	}
	if (acked) {
		int64_t now = mono_ms();

		l->j.acked++;
		l->j.retried += tries > 0;
		if (now - l->j.last_ack_mono > l->j.gap_ms) {
			l->j.gap_ms = now - l->j.last_ack_mono;
			l->j.gap_end_ms = real_ms();
		}
		l->j.last_ack_mono = now;
	} else {
		l->j.unknown++;
	}
	record(&l->j, kind, d, acked);
	if (kind == 3 && l->j.nm < MEMBERS_MAX) {
		l->j.members[l->j.nm] = member;
		l->j.state[l->j.nm++] = acked ? 'a' : 'u';
	}
}

static int write_journal(const loader *l, const char *path)
{
	const journal *j = &l->j;
	FILE *f = fopen(path, "w");

	if (f == NULL)
		return -1;
	fprintf(f, "c %s.c %" PRId64 " %" PRId64 "\n", l->prefix, j->c_ack[0],
	        j->c_unk[0]);
	fprintf(f, "c %s.sh %" PRId64 " %" PRId64 "\n", l->prefix, j->c_ack[1],
	        j->c_unk[1]);
	fprintf(f, "v %s %" PRId64 " %" PRId64 "\n", l->content, j->v_ack,
	        j->v_unk);
	for (size_t i = 0; i < j->nm; i++)
		fprintf(f, "l %s %" PRIu64 " %c\n", l->content, j->members[i],
		        j->state[i]);
	return fclose(f) == 0 ? 0 : -1;
}

static int mode_load(char **argv)
{
	loader l = { .resp_port = atoi(argv[2]), .prefix = argv[4],
	             .content = argv[5],
	             .member_base = strtoull(argv[6], NULL, 10),
	             .ids = strcmp(argv[7], "ids") == 0 ||
	                    strcmp(argv[7], "incrid") == 0,
	             .incr_only = strncmp(argv[7], "incr", 4) == 0,
	             .stop = argv[8] };
	const char *shards[3] = { "TALLY.SHARDS", NULL, "3" };
	char sh[NAME_MAX_LEN];
	int64_t start = mono_ms(), stop_at = 0;
	uint64_t seq = 0;
	redisReply *x = NULL;

	l.http = (hconn){ .fd = -1, .port = atoi(argv[3]) };
	l.j.members = calloc(MEMBERS_MAX, sizeof *l.j.members);
	l.j.state = calloc(MEMBERS_MAX, 1);
	if (l.j.members == NULL || l.j.state == NULL)
		return 2;
	/* The sharded counter: grown before any write (grows only, so every
	 * loader may ask). */
	snprintf(sh, sizeof sh, "%s.sh", l.prefix);
	shards[1] = sh;
	for (int i = 0; i < 50 && (x == NULL || x->type != REDIS_REPLY_INTEGER);
	     i++) {
		if (x != NULL)
			freeReplyObject(x);
		x = resp_cmd(&l.r, l.resp_port, 3, shards);
	}
	if (x == NULL || x->type != REDIS_REPLY_INTEGER || x->integer < 3) {
		printf("FAIL TALLY.SHARDS %s 3 before the load\n", sh);
		return 1;
	}
	freeReplyObject(x);
	l.j.last_ack_mono = mono_ms();
	while (stop_at == 0 && mono_ms() - start < LOAD_MAX_MS) {
		run_op(&l, ++seq, start, &stop_at);
		if (stop_at == 0 && stop_seen(&l))
			stop_at = mono_ms();
		usleep(OP_PAUSE_US);
	}
	printf("# %s (%s): %" PRIu64 " writes: %" PRId64 " acknowledged, %"
	       PRId64 " error replies, %" PRId64 " acknowledged on a retry of "
	       "their ID, %" PRId64 " unknown; longest time without an "
	       "acknowledgement %" PRId64 " ms, ended at %" PRId64 "\n",
	       l.prefix, argv[7], seq, l.j.acked, l.j.errors,
	       l.j.retried, l.j.unknown, l.j.gap_ms, l.j.gap_end_ms);
	if (l.r != NULL)
		redisFree(l.r);
	http_close(&l.http);
	if (write_journal(&l, argv[9]) != 0) {
		printf("FAIL writing the journal %s\n", argv[9]);
		return 1;
	}
	free(l.j.members);
	free(l.j.state);
	return 0;
}

/* ---- verify ---------------------------------------------------------------- */

typedef struct total {
	char kind;                   /* 'c' counter, 'v' views */
	char name[NAME_MAX_LEN];
	int64_t ack, unk;
} total;

#define TOTALS_MAX 64

/* A read, retried while the cluster settles: the integer (nil is 0), or
 * -1 with *ok 0 when no answer came. */
static int64_t read_int(redisContext **r, int port, int argc,
                        const char **argv, int *ok)
{
	for (int i = 0; i < 50; i++) {
		redisReply *x = resp_cmd(r, port, argc, argv);
		int64_t v = -1;

		*ok = 1;
		if (x != NULL && x->type == REDIS_REPLY_INTEGER)
			v = x->integer;
		else if (x != NULL && x->type == REDIS_REPLY_NIL)
			v = 0;
		else if (x != NULL && x->type == REDIS_REPLY_STRING)
			v = strtoll(x->str, NULL, 10);
		else
			*ok = 0;
		if (x != NULL)
			freeReplyObject(x);
		if (*ok)
			return v;
		usleep(RETRY_PAUSE_US);
	}
	return -1;
}

static int check_total(redisContext **r, int port, int strict,
                       const char *label, const total *t)
{
	const char *get[2] = { "GET", t->name };
	const char *cnt[4] = { "TALLY.COUNT", "article", "view", t->name };
	int ok;
	int64_t v = t->kind == 'c' ? read_int(r, port, 2, get, &ok)
	                           : read_int(r, port, 4, cnt, &ok);
	const char *what = t->kind == 'c' ? "counter" : "views of";

	if (!ok) {
		check(0, "%s: %s %s could be read", label, what, t->name);
		return -1;
	}
	check(v <= t->ack + t->unk, "%s: %s %s = %" PRId64 ", not above "
	      "acknowledged %" PRId64 " + unknown %" PRId64 " (nothing counted "
	      "twice)", label, what, t->name, v, t->ack, t->unk);
	if (strict)
		check(v >= t->ack, "%s: %s %s = %" PRId64 " holds every "
		      "acknowledged increment (%" PRId64 ")", label, what,
		      t->name, v, t->ack);
	else
		printf("# %s: %s %s = %" PRId64 ", acknowledged %" PRId64
		       ", unknown %" PRId64 ", acknowledged but lost %" PRId64
		       "\n", label, what, t->name, v, t->ack, t->unk,
		       v < t->ack ? t->ack - v : 0);
	return 0;
}

/* Every like of content: acked ones present (strict), and the count equal
 * to the members present. */
static int check_likes(redisContext **r, int port, int strict,
                       const char *label, const char *content,
                       char **jpaths, int nj)
{
	const char *has[5] = { "TALLY.HAS", "article", "like", content, NULL };
	const char *cnt[4] = { "TALLY.COUNT", "article", "like", content };
	int64_t present = 0, acked = 0, lost = 0, unk_in = 0, n;
	char line[256], c[NAME_MAX_LEN], m[32], st;
	int ok = 1;

	for (int k = 0; k < nj; k++) {
		FILE *f = fopen(jpaths[k], "r");

		if (f == NULL)
			return -1;
		while (fgets(line, sizeof line, f)) {
			int in;

			if (sscanf(line, "l %127s %31s %c", c, m, &st) != 3 ||
			    strcmp(c, content) != 0)
				continue;
			has[4] = m;
			in = read_int(r, port, 5, has, &ok) > 0;
			if (!ok)
				break;
			present += in;
			acked += st == 'a';
			lost += st == 'a' && !in;
			unk_in += st == 'u' && in;
		}
		fclose(f);
	}
	check(ok, "%s: HAS answered for every like of %s", label, content);
	if (strict)
		check(lost == 0, "%s: every acknowledged like of %s is there "
		      "(%" PRId64 " acknowledged, %" PRId64 " missing)", label,
		      content, acked, lost);
	else
		printf("# %s: likes of %s: %" PRId64 " acknowledged, %" PRId64
		       " acknowledged but lost\n", label, content, acked, lost);
	n = read_int(r, port, 4, cnt, &ok);
	check(ok && n == present, "%s: like count of %s (%" PRId64 ") equals "
	      "the members in (%" PRId64 ", %" PRId64 " of them unknown)",
	      label, content, n, present, unk_in);
	return 0;
}

static int mode_verify(int argc, char **argv)
{
	int port = atoi(argv[2]), strict = strcmp(argv[3], "strict") == 0;
	const char *label = argv[4];
	total t[TOTALS_MAX];
	char contents[TOTALS_MAX][NAME_MAX_LEN];
	size_t nt = 0, nc = 0;
	redisContext *r = NULL;
	char line[256];

	for (int k = 5; k < argc; k++) {
		FILE *f = fopen(argv[k], "r");

		if (f == NULL) {
			check(0, "%s: journal %s is there", label, argv[k]);
			return 1;
		}
		while (fgets(line, sizeof line, f)) {
			total x = { 0 };
			size_t i;

			if (sscanf(line, "%c %127s %" SCNd64 " %" SCNd64, &x.kind,
			           x.name, &x.ack, &x.unk) != 4 ||
			    (x.kind != 'c' && x.kind != 'v'))
				continue;
			for (i = 0; i < nt; i++)
				if (t[i].kind == x.kind &&
				    strcmp(t[i].name, x.name) == 0)
					break;
			if (i == nt) {
				if (nt == TOTALS_MAX)
					return 2;
				t[nt] = x;
				t[nt].ack = t[nt].unk = 0;
				nt++;
			}
			t[i].ack += x.ack;
			t[i].unk += x.unk;
			if (x.kind == 'v' && nc < TOTALS_MAX)
				snprintf(contents[nc++], NAME_MAX_LEN, "%s", x.name);
		}
		fclose(f);
	}
	for (size_t i = 0; i < nt; i++)
		check_total(&r, port, strict, label, &t[i]);
	for (size_t i = 0; i < nc; i++) {
		int dup = 0;

		for (size_t k = 0; k < i; k++)
			dup |= strcmp(contents[k], contents[i]) == 0;
		if (!dup)
			check_likes(&r, port, strict, label, contents[i],
			            argv + 5, argc - 5);
	}
	if (r != NULL)
		redisFree(r);
	return failures != 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 10 && strcmp(argv[1], "load") == 0)
		return mode_load(argv);
	if (argc >= 6 && strcmp(argv[1], "verify") == 0)
		return mode_verify(argc, argv);
	fprintf(stderr, "usage: failover_load load RESP HTTP PREFIX CONTENT "
	        "MEMBER_BASE ids|noids|incr|incrid STOPFILE JOURNAL\n"
	        "       failover_load verify RESP strict|loose LABEL "
	        "JOURNAL...\n");
	return 2;
}
