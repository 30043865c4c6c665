/* crash_driver.c: load generator and checker of the crash matrix
 * (test_crash_matrix.sh): every kind of write against a real tallyd,
 * every acknowledgement on file, and after a kill -9 the proof that the
 * restarted tallyd (or a backup of it) holds what was acknowledged.
 *
 *   crash_driver load RESP_PORT HTTP_PORT DIR POINT SEED SECONDS
 *   crash_driver verify RESP_PORT HTTP_PORT DIR POINT
 *   crash_driver verify-backup RESP_PORT HTTP_PORT DIR POINT N
 *
 * Design
 *  - One point writes under its own names (content type cm<P>, counters
 *    cm:<P>:..., types cm<P>u<n>/cm<P>t<n>), so each point is checked on
 *    its own; DIR/final.log keeps what every earlier point read back, and
 *    each verify checks those values again (nothing settled may change).
 *  - load runs NW writer connections, one token connection and one backup
 *    thread until tallyd goes away or SECONDS pass. Writers pipeline
 *    batches of INCR/INCRBY/DECR/DECRBY/SET/DEL on counters of their own,
 *    INCRBY on one counter all share, likes and unlikes (TALLY.ADD/REMOVE
 *    on a unique type) of their own members on shared objects, view
 *    adds/removes (total type, DELTA) on their own objects; writer 0 also
 *    creates types (TALLY.TYPE ADD, alone in its batch) and then writes on
 *    them. Two token connections send only writes carrying ID tokens (one
 *    over RESP: likes, unlikes, views; one over HTTP: counter increments,
 *    POST /v1/counters/NAME/incr {"by","id"}) and now and then re-send an
 *    acknowledged one: it must answer the first result and change nothing. The backup thread takes TALLY.BACKUP
 *    checkpoints into DIR/bk/p<P>_<n>.
 *  - Each connection logs every op to DIR/p<P>/c<i>.log before it can be
 *    sent ("S ...", flushed) and each reply after it came ("A ..."); the
 *    backup thread logs, before each BACKUP, how many ops of each
 *    connection were acknowledged, and after OK how many had been sent.
 *  - tallyd applies one connection's writes in order and commits batches
 *    atomically and in order, so what survives of a connection is a prefix
 *    of its ops: at least every acknowledged one, at most every sent one.
 *    verify replays each connection's log on a model and looks for a
 *    prefix length k that explains every value read back (counters, each
 *    member's HAS, each owned count, each created type); there must be
 *    one. Lost acknowledged writes, a torn batch, a write applied twice or
 *    a phantom write leave no such k. The shared counter must lie between
 *    the sums the feasible prefixes allow; the COUNT of each shared object
 *    must equal its members found by HAS.
 *  - verify then re-sends the token connections' ops that were never
 *    acknowledged (and the last acknowledged ones), in order, with their
 *    tokens: each reply must be what applying every op once gives, and so
 *    must the state afterwards (exactly once across a crash).
 *  - verify-backup checks a tallyd started on backup N the same way, with
 *    bounds [acknowledged before BACKUP was sent, sent before its OK].
 *  - Every reply during the load is checked against the model too.
 * Output: "ok ..." / "FAIL ..." lines and notes; exit 1 on any failure.
 * Self-tests of the checker (verify, env TALLY_CRASH_SELFTEST): early-ack
 * takes every op sent as acknowledged, so writes lost in flight must be
 * reported missing; no-token re-sends the token ops without their tokens,
 * so the retries must be reported applied twice; tamper changes a value
 * an earlier point settled, which must be reported. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

enum {
	NW = 4,                 /* writer connections */
	TOKC = NW,              /* the RESP connection writing with tokens */
	HTTPC = NW + 1,         /* the HTTP one, counters with tokens */
	NC = NW + 2,            /* connections */
	HTTP_KEYS = 3,          /* counters of the HTTP connection */
	OWN_KEYS = 4,           /* counters per writer */
	OWN_VIEWS = 3,          /* total objects per writer */
	SHARED_OBJS = 3,        /* like objects all writers share */
	POOL = 40,              /* members per writer and object */
	TYPES_MAX = 2,          /* types created per point */
	TOK_OBJS = 3,           /* objects of the token connection */
	BATCH_MAX = 32,
	RETRY_ACKED = 3,        /* acknowledged token ops re-sent by verify */
	STR_MAX = 96,
};

typedef enum kind {
	K_INCR = 'I',   /* own counter += arg (INCR, DECR, INCRBY, DECRBY) */
	K_SET = 'T',    /* own counter = arg */
	K_DEL = 'D',    /* own counter deleted */
	K_HOT = 'H',    /* shared counter += arg (> 0) */
	K_ADD = 'L',    /* unique type: member in */
	K_REM = 'U',    /* unique type: member out */
	K_VADD = 'V',   /* total type: += arg */
	K_VREM = 'W',   /* total type: -= arg */
	K_TYPE = 'Y',   /* type created, arg 0 unique, 1 total */
	K_HTTP = 'C',   /* own counter += arg, POST /v1/counters/NAME/incr */
} kind;

typedef struct op {
	char kind;
	char shared;              /* a like on a shared object */
	char name[STR_MAX];       /* counter key, type name or ktype */
	char tok[STR_MAX];        /* ID token, "" for none */
	uint64_t content, member;
	int64_t arg;
	long dup;                 /* index of the op re-sent, or -1 */
	/* from the log */
	int acked;
	char rtype;               /* i integer, s status, n nil, e error */
	int64_t reply;
	/* from the model */
	char etype;
	int64_t expect;
} op;

typedef struct opv {
	op *v;
	size_t n, cap;
} opv;

static int g_port, g_http_port;
static unsigned g_point;
static const char *g_dir;
static char g_ctype[32];
static int g_fail, g_pass;
static const char *g_selftest = "";

static void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n);

	if (q == NULL) {
		perror("crash_driver: realloc");
		exit(2);
	}
	return q;
}

static op *opv_push(opv *a)
{
	if (a->n == a->cap) {
		a->cap = a->cap ? a->cap * 2 : 1024;
		a->v = xrealloc(a->v, a->cap * sizeof *a->v);
	}
	memset(&a->v[a->n], 0, sizeof a->v[0]);
	a->v[a->n].dup = -1;
	return &a->v[a->n++];
}

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
	fflush(stdout);
	if (ok)
		g_pass++;
	else
		g_fail++;
}

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

static uint64_t rnd(uint64_t *s, uint64_t n)
{
	return xorshift(s) % n;
}

static redisContext *connect_to(int quiet)
{
	struct timeval tv = { 30, 0 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", g_port, tv);

	if (c == NULL || c->err) {
		if (!quiet)
			fprintf(stderr, "crash_driver: connect 127.0.0.1:%d: %s\n",
			        g_port, c ? c->errstr : "out of memory");
		if (c)
			redisFree(c);
		return NULL;
	}
	redisSetTimeout(c, tv);
	return c;
}

static int path_of(char *out, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int path_of(char *out, size_t cap, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(out, cap, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= cap) {
		fprintf(stderr, "crash_driver: path too long\n");
		exit(2);
	}
	return n;
}

/* ---- ops: command, log line, model ------------------------------------ */

/* The command of an op, as argv into bufs (each STR_MAX bytes). */
static int op_argv(const op *o, const char **argv, char bufs[][STR_MAX])
{
	int n = 0;

	switch (o->kind) {
	case K_INCR:
		if (o->arg == 1 || o->arg == -1) {
			argv[n++] = o->arg == 1 ? "INCR" : "DECR";
		} else {
			argv[n++] = o->arg > 0 ? "INCRBY" : "DECRBY";
		}
		argv[n++] = o->name;
		if (o->arg != 1 && o->arg != -1) {
			snprintf(bufs[0], STR_MAX, "%" PRId64,
			         o->arg > 0 ? o->arg : -o->arg);
			argv[n++] = bufs[0];
		}
		return n;
	case K_SET:
	case K_HOT:
		argv[n++] = o->kind == K_SET ? "SET" : "INCRBY";
		argv[n++] = o->name;
		snprintf(bufs[0], STR_MAX, "%" PRId64, o->arg);
		argv[n++] = bufs[0];
		return n;
	case K_DEL:
		argv[n++] = "DEL";
		argv[n++] = o->name;
		return n;
	case K_TYPE:
		argv[n++] = "TALLY.TYPE";
		argv[n++] = "ADD";
		argv[n++] = o->name;
		argv[n++] = o->arg ? "total" : "unique";
		return n;
	default:
		break;
	}
	argv[n++] = o->kind == K_ADD || o->kind == K_VADD ? "TALLY.ADD"
	                                                  : "TALLY.REMOVE";
	argv[n++] = g_ctype;
	argv[n++] = o->name;
	snprintf(bufs[0], STR_MAX, "%" PRIu64, o->content);
	argv[n++] = bufs[0];
	snprintf(bufs[1], STR_MAX, "%" PRIu64, o->member);
	argv[n++] = bufs[1];
	if (o->kind == K_VADD || o->kind == K_VREM) {
		argv[n++] = "DELTA";
		snprintf(bufs[2], STR_MAX, "%" PRId64, o->arg);
		argv[n++] = bufs[2];
	}
	if (o->tok[0]) {
		argv[n++] = "ID";
		argv[n++] = o->tok;
	}
	return n;
}

static void op_append(redisContext *c, const op *o)
{
	const char *argv[12];
	size_t lens[12];
	char bufs[3][STR_MAX];
	int n = op_argv(o, argv, bufs);

	for (int i = 0; i < n; i++)
		lens[i] = strlen(argv[i]);
	redisAppendCommandArgv(c, n, argv, lens);
}

static int op_format(const op *o, char *out, size_t cap)
{
	return snprintf(out, cap, "S %c %d %s %s %" PRIu64 " %" PRIu64 " %"
	                PRId64 " %ld\n", o->kind, o->shared, o->name,
	                o->tok[0] ? o->tok : "-", o->content, o->member, o->arg,
	                o->dup);
}

static int op_parse(const char *line, op *o)
{
	char k, tok[STR_MAX];
	int shared;

	if (sscanf(line, "S %c %d %95s %95s %" SCNu64 " %" SCNu64 " %" SCNd64
	           " %ld", &k, &shared, o->name, tok, &o->content, &o->member,
	           &o->arg, &o->dup) != 8)
		return -1;
	o->kind = k;
	o->shared = (char)shared;
	snprintf(o->tok, sizeof o->tok, "%s", strcmp(tok, "-") ? tok : "");
	return 0;
}

/* Entities: what one read returns. Keys are strings:
 *   "c NAME" counter, "m KTYPE CONTENT MEMBER" membership,
 *   "t KTYPE CONTENT" count of an owned object, "y NAME" type. */
typedef struct ent {
	char key[2 * STR_MAX];
	char what;                /* c m t y */
	int conn;                 /* owner, -1 when shared */
	char name[STR_MAX];       /* counter name, ktype or type name */
	uint64_t content, member;
	/* model */
	int present;
	int64_t v;
	/* read back */
	int obs_present;
	int64_t obs_v;
	int obs_err;              /* the read had an error reply */
} ent;

typedef struct emap {
	ent *v;
	size_t n, cap;
	long *slots;
	size_t nslots;
} emap;

static uint64_t fnv(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

static void emap_rehash(emap *m)
{
	free(m->slots);
	m->nslots = m->nslots ? m->nslots * 2 : 1024;
	m->slots = xrealloc(NULL, m->nslots * sizeof *m->slots);
	for (size_t i = 0; i < m->nslots; i++)
		m->slots[i] = -1;
	for (size_t i = 0; i < m->n; i++) {
		size_t s = fnv(m->v[i].key) & (m->nslots - 1);

		while (m->slots[s] >= 0)
			s = (s + 1) & (m->nslots - 1);
		m->slots[s] = (long)i;
	}
}

/* The entity of key, created (zero, absent) when new. */
static ent *emap_get(emap *m, const char *key, char what, int conn)
{
	size_t s;
	ent *e;

	if (m->n * 2 >= m->nslots)
		emap_rehash(m);
	s = fnv(key) & (m->nslots - 1);
	while (m->slots[s] >= 0) {
		e = &m->v[m->slots[s]];
		if (strcmp(e->key, key) == 0)
			return e;
		s = (s + 1) & (m->nslots - 1);
	}
	if (m->n == m->cap) {
		m->cap = m->cap ? m->cap * 2 : 1024;
		m->v = xrealloc(m->v, m->cap * sizeof *m->v);
	}
	e = &m->v[m->n];
	memset(e, 0, sizeof *e);
	snprintf(e->key, sizeof e->key, "%s", key);
	e->what = what;
	e->conn = conn;
	m->slots[s] = (long)m->n++;
	return e;
}

static void emap_free(emap *m)
{
	free(m->v);
	free(m->slots);
	memset(m, 0, sizeof *m);
}

/* The entities an op changes: at most two (membership and count). */
static int op_ents(emap *m, const op *o, int conn, ent **out)
{
	char key[2 * STR_MAX];
	int n = 0;

	switch (o->kind) {
	case K_INCR:
	case K_HTTP:
	case K_SET:
	case K_DEL:
		snprintf(key, sizeof key, "c %s", o->name);
		out[n] = emap_get(m, key, 'c', conn);
		snprintf(out[n]->name, STR_MAX, "%s", o->name);
		n++;
		break;
	case K_TYPE:
		snprintf(key, sizeof key, "y %s", o->name);
		out[n] = emap_get(m, key, 'y', conn);
		snprintf(out[n]->name, STR_MAX, "%s", o->name);
		n++;
		break;
	case K_ADD:
	case K_REM:
		snprintf(key, sizeof key, "m %s %" PRIu64 " %" PRIu64, o->name,
		         o->content, o->member);
		out[n] = emap_get(m, key, 'm', conn);
		snprintf(out[n]->name, STR_MAX, "%s", o->name);
		out[n]->content = o->content;
		out[n]->member = o->member;
		n++;
		/* fall through: the count, unless the object is shared */
		if (o->shared)
			break;
		/* fall through */
	case K_VADD:
	case K_VREM:
		snprintf(key, sizeof key, "t %s %" PRIu64, o->name, o->content);
		out[n] = emap_get(m, key, 't', conn);
		snprintf(out[n]->name, STR_MAX, "%s", o->name);
		out[n]->content = o->content;
		n++;
		break;
	default:
		break;
	}
	return n;
}

/* Apply o to the model; sets o->etype/expect (the reply it must get when
 * every earlier op applied). A re-sent token op changes nothing and
 * answers what its first sending did. hot: the shared counter. */
static void op_apply(emap *m, op *o, const opv *ops, int conn, int64_t *hot)
{
	ent *e[2];
	int n;

	if (o->dup >= 0) {
		o->etype = ops->v[o->dup].etype;
		o->expect = ops->v[o->dup].expect;
		return;
	}
	if (o->kind == K_HOT) {
		*hot += o->arg;
		o->etype = 'i';
		o->expect = 0;
		return;
	}
	n = op_ents(m, o, conn, e);
	o->etype = 'i';
	switch (o->kind) {
	case K_INCR:
	case K_HTTP:
		e[0]->v = (e[0]->present ? e[0]->v : 0) + o->arg;
		e[0]->present = 1;
		o->expect = e[0]->v;
		break;
	case K_SET:
		e[0]->v = o->arg;
		e[0]->present = 1;
		o->etype = 's';
		break;
	case K_DEL:
		o->expect = e[0]->present;
		e[0]->present = 0;
		e[0]->v = 0;
		break;
	case K_TYPE:
		e[0]->present = 1;
		e[0]->v = o->arg;
		o->etype = 's';
		break;
	case K_ADD:
	case K_REM: {
		int was = e[0]->present;

		e[0]->present = o->kind == K_ADD;
		if (n == 2) {
			e[1]->v += e[0]->present - was;
			o->expect = e[1]->v;
		}
		break;
	}
	case K_VADD:
	case K_VREM:
		e[0]->v += o->kind == K_VADD ? o->arg : -o->arg;
		o->expect = e[0]->v;
		break;
	default:
		break;
	}
}

/* Whether the reply of o is what the model expects. */
static int reply_ok(const op *o)
{
	if (o->rtype != o->etype)
		return 0;
	if (o->kind == K_HOT || (o->shared && o->dup < 0) || o->etype == 's')
		return 1;
	return o->reply == o->expect;
}

static void reply_take(op *o, const redisReply *r)
{
	o->acked = 1;
	o->reply = 0;
	switch (r->type) {
	case REDIS_REPLY_INTEGER:
		o->rtype = 'i';
		o->reply = r->integer;
		break;
	case REDIS_REPLY_STATUS:
		o->rtype = 's';
		break;
	case REDIS_REPLY_NIL:
		o->rtype = 'n';
		break;
	default:
		o->rtype = 'e';
		break;
	}
}

/* ---- HTTP: counter increments with a token ---------------------------- */

typedef struct hconn {
	int fd;
	char buf[8192];
	size_t len;
} hconn;

static int http_connect(hconn *h)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
	                         .sin_port = htons((uint16_t)g_http_port) };
	struct timeval tv = { 30, 0 };

	h->len = 0;
	h->fd = socket(AF_INET, SOCK_STREAM, 0);
	if (h->fd < 0)
		return -1;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (setsockopt(h->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0 ||
	    connect(h->fd, (struct sockaddr *)&a, sizeof a) != 0) {
		close(h->fd);
		h->fd = -1;
		return -1;
	}
	return 0;
}

/* The Content-Length of a response whose head ends at end (0 if none). */
static long content_length(const char *head, const char *end)
{
	for (const char *p = head; p < end; p++)
		if ((p == head || p[-1] == '\n') &&
		    strncasecmp(p, "content-length:", 15) == 0)
			return strtol(p + 15, NULL, 10);
	return 0;
}

/* Send one POST .../incr and take its reply into o (rtype 'i' and the
 * value on 200, 'e' otherwise). -1 when the connection is gone. */
static int http_incr(hconn *h, const op *o, op *got)
{
	char req[1024], body[256];
	size_t off = 0, need;
	int blen, rlen;
	char *end, *p;
	long status, clen;

	if (o->tok[0])
		blen = snprintf(body, sizeof body, "{\"by\":%" PRId64 ",\"id\":"
		                "\"%s\"}", o->arg, o->tok);
	else
		blen = snprintf(body, sizeof body, "{\"by\":%" PRId64 "}", o->arg);
	rlen = snprintf(req, sizeof req, "POST /v1/counters/%s/incr HTTP/1.1\r\n"
	                "Host: 127.0.0.1\r\nContent-Type: application/json\r\n"
	                "Content-Length: %d\r\n\r\n%s", o->name, blen, body);
	if (blen < 0 || rlen < 0 || (size_t)rlen >= sizeof req)
		return -1;
	while (off < (size_t)rlen) {
		ssize_t n = send(h->fd, req + off, (size_t)rlen - off, MSG_NOSIGNAL);

		if (n <= 0)
			return -1;
		off += (size_t)n;
	}
	for (;;) {
		h->buf[h->len] = '\0';
		end = strstr(h->buf, "\r\n\r\n");
		if (end != NULL) {
			clen = content_length(h->buf, end);
			need = (size_t)(end + 4 - h->buf) + (size_t)clen;
			if (clen >= 0 && h->len >= need)
				break;
		}
		if (h->len + 1 >= sizeof h->buf)
			return -1;
		ssize_t n = recv(h->fd, h->buf + h->len, sizeof h->buf - 1 - h->len,
		                 0);

		if (n <= 0)
			return -1;
		h->len += (size_t)n;
	}
	memset(got, 0, sizeof *got);
	got->acked = 1;
	status = strtol(h->buf + 9, NULL, 10);
	p = strstr(end + 4, "\"value\":");
	if (status == 200 && p != NULL && p < h->buf + need) {
		got->rtype = 'i';
		got->reply = strtoll(p + 8, NULL, 10);
	} else {
		got->rtype = 'e';
	}
	memmove(h->buf, h->buf + need, h->len - need);
	h->len -= need;
	return 0;
}

/* ---- load ----------------------------------------------------------------- */

typedef struct conn_state {
	int idx;
	uint64_t rng;
	FILE *log;
	opv ops;
	emap model;
	int64_t hot;
	int types;                      /* created and acknowledged */
	char type_name[TYPES_MAX][STR_MAX];
	int type_mode[TYPES_MAX];
	_Atomic long sent, acked;
	long bad_replies, error_replies;
} conn_state;

static conn_state g_conns[NC];
static double g_end;
static uint64_t g_seed;
static _Atomic int g_stop;
static _Atomic int g_dead;        /* a connection saw tallyd go away */
static _Atomic long g_backups_done;
static _Atomic int g_backup_inflight, g_type_inflight;
static int g_types_full;  /* tallyd's type table is nearly full: create none */

static void gen_writer(conn_state *cs, op *o)
{
	uint64_t r = rnd(&cs->rng, 100);
	int i = cs->idx;

	if (r < 16) {
		o->kind = K_INCR;
		snprintf(o->name, STR_MAX, "cm:%u:%d:%d", g_point, i,
		         (int)rnd(&cs->rng, OWN_KEYS));
		o->arg = (int64_t)rnd(&cs->rng, 11) - 5;
		if (o->arg == 0)
			o->arg = 1;
	} else if (r < 20) {
		o->kind = K_SET;
		snprintf(o->name, STR_MAX, "cm:%u:%d:%d", g_point, i,
		         (int)rnd(&cs->rng, OWN_KEYS));
		o->arg = (int64_t)rnd(&cs->rng, 2001) - 1000;
	} else if (r < 23) {
		o->kind = K_DEL;
		snprintf(o->name, STR_MAX, "cm:%u:%d:%d", g_point, i,
		         (int)rnd(&cs->rng, OWN_KEYS));
	} else if (r < 33) {
		o->kind = K_HOT;
		snprintf(o->name, STR_MAX, "cm:%u:hot", g_point);
		o->arg = 1 + (int64_t)rnd(&cs->rng, 3);
	} else if (r < 67 || (r >= 87 && cs->types == 0)) {
		o->kind = rnd(&cs->rng, 10) < 6 ? K_ADD : K_REM;
		o->shared = 1;
		snprintf(o->name, STR_MAX, "like");
		o->content = 1 + rnd(&cs->rng, SHARED_OBJS);
		o->member = (uint64_t)(i + 1) * 1000 + 1 + rnd(&cs->rng, POOL);
	} else if (r < 87) {
		o->kind = rnd(&cs->rng, 10) < 7 ? K_VADD : K_VREM;
		snprintf(o->name, STR_MAX, "view");
		o->content = 100 + (uint64_t)i * 10 + rnd(&cs->rng, OWN_VIEWS);
		o->arg = 1 + (int64_t)rnd(&cs->rng, 5);
	} else {
		int t = (int)rnd(&cs->rng, (uint64_t)cs->types);

		snprintf(o->name, STR_MAX, "%s", cs->type_name[t]);
		o->content = 200 + rnd(&cs->rng, 3);
		if (cs->type_mode[t] == 0) {
			o->kind = rnd(&cs->rng, 10) < 6 ? K_ADD : K_REM;
			o->member = 1 + rnd(&cs->rng, POOL);
		} else {
			o->kind = rnd(&cs->rng, 10) < 7 ? K_VADD : K_VREM;
			o->arg = 1 + (int64_t)rnd(&cs->rng, 5);
		}
	}
}

/* Now and then, make o a re-send of an acknowledged op, token and all. */
static int gen_dup(conn_state *cs, op *o)
{
	long a = atomic_load(&cs->acked);

	if (cs->ops.n == 0 || rnd(&cs->rng, 10) != 0)
		return 0;
	while (a > 0) {
		long j = (long)rnd(&cs->rng, (uint64_t)a);

		if (cs->ops.v[j].dup >= 0 || cs->ops.v[j].rtype != 'i') {
			a = j;
			continue;
		}
		*o = cs->ops.v[j];
		o->dup = j;
		o->acked = 0;
		return 1;
	}
	return 0;
}

static void gen_token(conn_state *cs, op *o, long nth)
{
	if (gen_dup(cs, o))
		return;
	snprintf(o->tok, STR_MAX, "cm%u-%" PRIx64 "-%ld", g_point, g_seed, nth);
	if (rnd(&cs->rng, 2)) {
		o->kind = rnd(&cs->rng, 10) < 6 ? K_ADD : K_REM;
		snprintf(o->name, STR_MAX, "like");
		o->content = 600 + rnd(&cs->rng, TOK_OBJS);
		o->member = 1 + rnd(&cs->rng, POOL);
	} else {
		o->kind = rnd(&cs->rng, 10) < 7 ? K_VADD : K_VREM;
		snprintf(o->name, STR_MAX, "view");
		o->content = 500 + rnd(&cs->rng, TOK_OBJS);
		o->arg = 1 + (int64_t)rnd(&cs->rng, 5);
	}
}

static void gen_http(conn_state *cs, op *o, long nth)
{
	if (gen_dup(cs, o))
		return;
	snprintf(o->tok, STR_MAX, "cmh%u-%" PRIx64 "-%ld", g_point, g_seed, nth);
	o->kind = K_HTTP;
	snprintf(o->name, STR_MAX, "cm:%u:h:%d", g_point,
	         (int)rnd(&cs->rng, HTTP_KEYS));
	o->arg = (int64_t)rnd(&cs->rng, 11) - 5;
	if (o->arg == 0)
		o->arg = 7;
}

/* Check a reply against the model; complain about the first few. */
static void reply_note(conn_state *cs, const op *o, size_t i)
{
	if (o->rtype == 'e') {
		if (cs->error_replies++ < 3)
			fprintf(stderr, "crash_driver: conn %d: error reply to "
			        "op %zu (%c)\n", cs->idx, i, o->kind);
	} else if (!reply_ok(o) && cs->bad_replies++ < 3) {
		fprintf(stderr, "crash_driver: conn %d op %zu (%c %s): reply %c %"
		        PRId64 ", model %c %" PRId64 "\n", cs->idx, i, o->kind,
		        o->name, o->rtype, o->reply, o->etype, o->expect);
	}
}

/* The HTTP connection: one request at a time (tallyd answers an HTTP
 * write after its fsync, like RESP). */
static void http_loop(conn_state *cs)
{
	hconn h;
	long nth = 0;
	char line[512];

	if (http_connect(&h) != 0) {
		fprintf(stderr, "crash_driver: HTTP connect to port %d failed\n",
		        g_http_port);
		return;
	}
	while (now_s() < g_end && !atomic_load(&g_stop)) {
		op *o = opv_push(&cs->ops), got;
		size_t i = cs->ops.n - 1;

		gen_http(cs, o, nth++);
		op_apply(&cs->model, o, &cs->ops, cs->idx, &cs->hot);
		op_format(o, line, sizeof line);
		fputs(line, cs->log);
		fflush(cs->log);
		atomic_fetch_add(&cs->sent, 1);
		if (http_incr(&h, o, &got) != 0) {
			atomic_store(&g_dead, 1);
			break;
		}
		o->acked = 1;
		o->rtype = got.rtype;
		o->reply = got.reply;
		atomic_fetch_add(&cs->acked, 1);
		fprintf(cs->log, "A %c %" PRId64 "\n", o->rtype, o->reply);
		fflush(cs->log);
		reply_note(cs, o, i);
	}
	close(h.fd);
}

/* One batch: ops [from, n) are sent; replies are taken in order. Returns
 * -1 once the connection is gone. */
static int run_batch(conn_state *cs, redisContext *c, size_t from)
{
	char line[512];
	size_t i;
	int dead = 0;

	for (i = from; i < cs->ops.n; i++) {
		op *o = &cs->ops.v[i];

		op_format(o, line, sizeof line);
		fputs(line, cs->log);
	}
	/* on file before it can reach tallyd */
	fflush(cs->log);
	for (i = from; i < cs->ops.n; i++) {
		op_append(c, &cs->ops.v[i]);
		atomic_fetch_add(&cs->sent, 1);
	}
	for (i = from; i < cs->ops.n; i++) {
		op *o = &cs->ops.v[i];
		void *vr = NULL;

		if (redisGetReply(c, &vr) != REDIS_OK || vr == NULL) {
			dead = 1;
			break;
		}
		reply_take(o, vr);
		freeReplyObject(vr);
		atomic_fetch_add(&cs->acked, 1);
		fprintf(cs->log, "A %c %" PRId64 "\n", o->rtype, o->reply);
		reply_note(cs, o, i);
		if (o->kind == K_TYPE && o->rtype == 's') {
			snprintf(cs->type_name[cs->types], STR_MAX, "%s", o->name);
			cs->type_mode[cs->types++] = (int)o->arg;
		}
	}
	fflush(cs->log);
	return dead ? -1 : 0;
}

static void *conn_thread(void *arg)
{
	conn_state *cs = arg;
	redisContext *c;
	long nth = 0;

	if (cs->idx == HTTPC) {
		http_loop(cs);
		return NULL;
	}
	c = connect_to(0);
	if (c == NULL)
		return NULL;
	while (now_s() < g_end && !atomic_load(&g_stop)) {
		size_t from = cs->ops.n, want;
		int type_batch = cs->idx == 0 && cs->types < TYPES_MAX &&
		                 !g_types_full && rnd(&cs->rng, 40) == 0;

		want = type_batch ? 1 : 1 + rnd(&cs->rng, BATCH_MAX);
		for (size_t k = 0; k < want; k++) {
			op *o = opv_push(&cs->ops);

			if (type_batch) {
				o->kind = K_TYPE;
				o->arg = (int64_t)rnd(&cs->rng, 2);
				snprintf(o->name, STR_MAX, "cm%u%c%d", g_point,
				         o->arg ? 't' : 'u', cs->types);
			} else if (cs->idx == TOKC) {
				gen_token(cs, o, nth++);
			} else {
				gen_writer(cs, o);
			}
			op_apply(&cs->model, o, &cs->ops, cs->idx, &cs->hot);
		}
		if (type_batch)
			atomic_store(&g_type_inflight, 1);
		if (run_batch(cs, c, from) != 0) {
			atomic_store(&g_dead, 1);
			break;
		}
		atomic_store(&g_type_inflight, 0);
	}
	redisFree(c);
	return NULL;
}

static void *backup_thread(void *arg)
{
	uint64_t rng = g_seed ^ 0xB4C0u;
	redisContext *c = connect_to(0);
	FILE *log = arg;
	long n = 0;

	if (c == NULL)
		return NULL;
	while (now_s() < g_end && !atomic_load(&g_stop)) {
		char dir[4096];
		long lo[NC], hi[NC];
		redisReply *r;
		double t0;

		usleep((useconds_t)(100000 + rnd(&rng, 700000)));
		/* none after the kill: it would not be in flight at the kill */
		if (atomic_load(&g_dead))
			break;
		n++;
		path_of(dir, sizeof dir, "%s/bk/p%u_%ld", g_dir, g_point, n);
		for (int i = 0; i < NC; i++)
			lo[i] = atomic_load(&g_conns[i].acked);
		fprintf(log, "P %ld\n", n);
		fflush(log);
		atomic_store(&g_backup_inflight, 1);
		t0 = now_s();
		r = redisCommand(c, "TALLY.BACKUP %s", dir);
		if (r == NULL)
			break;
		atomic_store(&g_backup_inflight, 0);
		for (int i = 0; i < NC; i++)
			hi[i] = atomic_load(&g_conns[i].sent);
		if (r->type == REDIS_REPLY_STATUS) {
			fprintf(log, "B %ld", n);
			for (int i = 0; i < NC; i++)
				fprintf(log, " %ld %ld", lo[i], hi[i]);
			fprintf(log, " %.0f\n", (now_s() - t0) * 1000);
			atomic_fetch_add(&g_backups_done, 1);
		} else {
			fprintf(log, "E %ld %s\n", n, r->str ? r->str : "?");
			fprintf(stderr, "crash_driver: backup %ld: %s\n", n,
			        r->str ? r->str : "?");
		}
		fflush(log);
		freeReplyObject(r);
	}
	redisFree(c);
	return NULL;
}

static int do_load(double seconds)
{
	pthread_t th[NC], bt;
	char path[4096];
	FILE *blog;
	long sent = 0, acked = 0, bad = 0, errs = 0, unacked_tok;
	int types = 0;

	path_of(path, sizeof path, "%s/p%u", g_dir, g_point);
	if (mkdir(path, 0755) != 0 && errno != EEXIST) {
		perror(path);
		return 2;
	}
	path_of(path, sizeof path, "%s/bk", g_dir);
	if (mkdir(path, 0755) != 0 && errno != EEXIST) {
		perror(path);
		return 2;
	}
	{
		/* 1024 types at most (TALLY_TYPES_MAX): a very long run stops
		 * creating them rather than fail */
		redisContext *c = connect_to(0);
		redisReply *r = c ? redisCommand(c, "TALLY.TYPES") : NULL;

		g_types_full = r == NULL || r->type != REDIS_REPLY_ARRAY ||
		               r->elements + TYPES_MAX >= 1024;
		if (r)
			freeReplyObject(r);
		if (c)
			redisFree(c);
	}
	g_end = now_s() + seconds;
	for (int i = 0; i < NC; i++) {
		conn_state *cs = &g_conns[i];

		cs->idx = i;
		cs->rng = (g_seed + 1) * 0x9E3779B97F4A7C15ull ^
		          ((uint64_t)(i + 1) << 32) ^ g_point;
		if (cs->rng == 0)
			cs->rng = 1;
		path_of(path, sizeof path, "%s/p%u/c%d.log", g_dir, g_point, i);
		cs->log = fopen(path, "w");
		if (cs->log == NULL) {
			perror(path);
			return 2;
		}
	}
	path_of(path, sizeof path, "%s/p%u/backups.log", g_dir, g_point);
	blog = fopen(path, "w");
	if (blog == NULL) {
		perror(path);
		return 2;
	}
	for (int i = 0; i < NC; i++)
		pthread_create(&th[i], NULL, conn_thread, &g_conns[i]);
	pthread_create(&bt, NULL, backup_thread, blog);
	for (int i = 0; i < NC; i++)
		pthread_join(th[i], NULL);
	/* the backup thread notices tallyd's death, or the writers' end */
	atomic_store(&g_stop, 1);
	pthread_join(bt, NULL);
	fclose(blog);
	for (int i = 0; i < NC; i++) {
		conn_state *cs = &g_conns[i];

		fclose(cs->log);
		free(cs->ops.v);
		emap_free(&cs->model);
		sent += atomic_load(&cs->sent);
		acked += atomic_load(&cs->acked);
		bad += cs->bad_replies;
		errs += cs->error_replies;
		types += cs->types;
	}
	unacked_tok = atomic_load(&g_conns[TOKC].sent) -
	              atomic_load(&g_conns[TOKC].acked) +
	              atomic_load(&g_conns[HTTPC].sent) -
	              atomic_load(&g_conns[HTTPC].acked);
	printf("load point %u: %ld ops sent, %ld acknowledged, %d types, %ld "
	       "backups\n", g_point, sent, acked, types,
	       atomic_load(&g_backups_done));
	printf("in flight at the end: %ld ops, %ld with a token, backup %d, "
	       "type creation %d\n", sent - acked, unacked_tok,
	       atomic_load(&g_backup_inflight), atomic_load(&g_type_inflight));
	check(errs == 0, "point %u: no error reply during the load (%ld)",
	      g_point, errs);
	check(bad == 0, "point %u: every reply during the load is the model's "
	      "(%ld differ)", g_point, bad);
	return g_fail ? 1 : 0;
}

/* ---- verify ----------------------------------------------------------------- */

typedef struct logs {
	opv ops[NC];
	long acked[NC];
	emap ents;
} logs;

static int read_logs(logs *L)
{
	char path[4096], line[1024];

	memset(L, 0, sizeof *L);
	for (int i = 0; i < NC; i++) {
		FILE *f;
		size_t a = 0;

		path_of(path, sizeof path, "%s/p%u/c%d.log", g_dir, g_point, i);
		f = fopen(path, "r");
		if (f == NULL) {
			perror(path);
			return -1;
		}
		while (fgets(line, sizeof line, f)) {
			if (line[0] == 'S') {
				op *o = opv_push(&L->ops[i]);

				if (op_parse(line, o) != 0) {
					fprintf(stderr, "bad log line: %s", line);
					fclose(f);
					return -1;
				}
			} else if (line[0] == 'A' && a < L->ops[i].n) {
				op *o = &L->ops[i].v[a++];
				char t;

				if (sscanf(line, "A %c %" SCNd64, &t, &o->reply) == 2) {
					o->rtype = t;
					o->acked = 1;
				}
			}
		}
		fclose(f);
		L->acked[i] = (long)a;
		/* self-test: what was in flight counts as acknowledged */
		if (strcmp(g_selftest, "early-ack") == 0)
			L->acked[i] = (long)L->ops[i].n;
	}
	/* every entity, with its owner, and the replies the model expects */
	for (int i = 0; i < NC; i++) {
		emap scratch = { 0 };
		int64_t hot = 0;

		for (size_t k = 0; k < L->ops[i].n; k++) {
			ent *e[2];

			op_ents(&L->ents, &L->ops[i].v[k], i, e);
			op_apply(&scratch, &L->ops[i].v[k], &L->ops[i], i, &hot);
		}
		emap_free(&scratch);
	}
	return 0;
}

static void read_ent_cmd(redisContext *c, const ent *e)
{
	char b1[32], b2[32];

	snprintf(b1, sizeof b1, "%" PRIu64, e->content);
	snprintf(b2, sizeof b2, "%" PRIu64, e->member);
	if (e->what == 'c')
		redisAppendCommand(c, "GET %s", e->name);
	else if (e->what == 'm')
		redisAppendCommand(c, "TALLY.HAS %s %s %s %s", g_ctype, e->name,
		                   b1, b2);
	else
		redisAppendCommand(c, "TALLY.COUNT %s %s %s", g_ctype, e->name,
		                   b1);
}

/* The types tallyd knows: name -> mode, into m as "y NAME" entities. */
static int read_types(redisContext *c, emap *m)
{
	redisReply *r = redisCommand(c, "TALLY.TYPES");

	if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
		if (r)
			freeReplyObject(r);
		return -1;
	}
	for (size_t i = 0; i < r->elements; i++) {
		const redisReply *t = r->element[i];
		char key[2 * STR_MAX];
		ent *e;

		if (t->type != REDIS_REPLY_ARRAY || t->elements != 2)
			continue;
		snprintf(key, sizeof key, "y %s", t->element[0]->str);
		e = emap_get(m, key, 'y', -1);
		e->present = 1;
		e->v = strcmp(t->element[1]->str, "total") == 0;
	}
	freeReplyObject(r);
	return 0;
}

/* Read every entity back (pipelined). -1 when tallyd stops answering. */
static int read_back(redisContext *c, emap *m)
{
	const size_t chunk = 1000;
	emap types = { 0 };

	if (read_types(c, &types) != 0)
		return -1;
	for (size_t i = 0; i < m->n; i += chunk) {
		size_t k = m->n - i < chunk ? m->n - i : chunk;

		for (size_t j = 0; j < k; j++)
			if (m->v[i + j].what != 'y')
				read_ent_cmd(c, &m->v[i + j]);
		for (size_t j = 0; j < k; j++) {
			ent *e = &m->v[i + j];
			redisReply *r;
			void *vr = NULL;

			if (e->what == 'y') {
				char key[2 * STR_MAX];
				ent *t;

				snprintf(key, sizeof key, "y %s", e->name);
				t = emap_get(&types, key, 'y', -1);
				e->obs_present = t->present;
				e->obs_v = t->present ? t->v : 0;
				continue;
			}
			if (redisGetReply(c, &vr) != REDIS_OK || vr == NULL) {
				emap_free(&types);
				return -1;
			}
			r = vr;
			e->obs_present = 0;
			e->obs_v = 0;
			e->obs_err = 0;
			if (r->type == REDIS_REPLY_INTEGER) {
				e->obs_present = 1;
				e->obs_v = e->what == 'm' ? 0 : r->integer;
			} else if (r->type == REDIS_REPLY_STRING) {
				e->obs_present = 1;
				e->obs_v = strtoll(r->str, NULL, 10);
			} else if (r->type == REDIS_REPLY_ERROR) {
				/* a type whose creation did not survive */
				e->obs_err = 1;
			}
			freeReplyObject(r);
		}
	}
	emap_free(&types);
	return 0;
}

/* Whether the model of e is what was read back. */
static int ent_matches(const ent *e)
{
	switch (e->what) {
	case 'c':
		return e->present == e->obs_present &&
		       (!e->present || e->v == e->obs_v);
	case 'm':
		return e->present == e->obs_present;
	case 't':
		return e->v == e->obs_v;
	case 'y':
		return e->present == e->obs_present &&
		       (!e->present || e->v == e->obs_v);
	default:
		return 1;
	}
}

static void ent_show(const ent *e)
{
	const char *err = e->obs_err ? " (error reply)" : "";

	if (e->what == 't')
		printf("       %s: model %" PRId64 ", read back %" PRId64 "%s\n",
		       e->key, e->v, e->obs_v, err);
	else if (e->what == 'm')
		printf("       %s: model %s, read back %s%s\n", e->key,
		       e->present ? "in" : "out", e->obs_present ? "in" : "out",
		       err);
	else
		printf("       %s: model %s %" PRId64 ", read back %s %" PRId64
		       "%s\n", e->key, e->present ? "present" : "absent", e->v,
		       e->obs_present ? "present" : "absent", e->obs_v, err);
}

typedef struct feas {
	long lo, hi;          /* bounds asked */
	long first, last;     /* feasible prefixes, -1 when none */
	long nfeas;
	int64_t hot_lo, hot_hi;
} feas;

/* For connection i, the prefixes k in [lo, hi] of its ops whose model
 * matches every entity it owns. */
static void feasible(logs *L, int i, long lo, long hi, feas *out)
{
	opv *ops = &L->ops[i];
	emap *m = &L->ents;
	long mism = 0;
	int64_t hot = 0;

	memset(out, 0, sizeof *out);
	out->lo = lo;
	out->hi = hi;
	out->first = out->last = -1;
	for (size_t j = 0; j < m->n; j++)
		if (m->v[j].conn == i) {
			m->v[j].present = 0;
			m->v[j].v = 0;
		}
	for (long k = 0; k < lo; k++)
		op_apply(m, &ops->v[k], ops, i, &hot);
	for (size_t j = 0; j < m->n; j++)
		if (m->v[j].conn == i && !ent_matches(&m->v[j]))
			mism++;
	for (long k = lo;; k++) {
		ent *e[2];
		int n, before[2];

		if (mism == 0) {
			if (out->first < 0) {
				out->first = k;
				out->hot_lo = hot;
			}
			out->last = k;
			out->hot_hi = hot;
			out->nfeas++;
		}
		if (k >= hi)
			break;
		n = ops->v[k].dup >= 0 || ops->v[k].kind == K_HOT ? 0 :
		    op_ents(m, &ops->v[k], i, e);
		for (int x = 0; x < n; x++)
			before[x] = !ent_matches(e[x]);
		op_apply(m, &ops->v[k], ops, i, &hot);
		for (int x = 0; x < n; x++)
			mism += !ent_matches(e[x]) - before[x];
	}
	if (out->first < 0) {
		/* no prefix fits: show what differs at both ends */
		long shown = 0;

		hot = 0;
		for (size_t j = 0; j < m->n; j++)
			if (m->v[j].conn == i) {
				m->v[j].present = 0;
				m->v[j].v = 0;
			}
		for (long k = 0; k < lo; k++)
			op_apply(m, &ops->v[k], ops, i, &hot);
		printf("     conn %d, prefix %ld (the acknowledged ones):\n", i, lo);
		for (size_t j = 0; j < m->n && shown < 8; j++)
			if (m->v[j].conn == i && !ent_matches(&m->v[j])) {
				ent_show(&m->v[j]);
				shown++;
			}
	}
}

/* COUNT of each shared object == its members that HAS finds. */
static void check_shared(redisContext *c, logs *L, const char *what)
{
	long in[SHARED_OBJS + 1] = { 0 };
	int bad = 0;

	for (size_t j = 0; j < L->ents.n; j++) {
		const ent *e = &L->ents.v[j];

		if (e->what == 'm' && strcmp(e->name, "like") == 0 &&
		    e->content >= 1 && e->content <= SHARED_OBJS && e->obs_present)
			in[e->content]++;
	}
	for (int o = 1; o <= SHARED_OBJS; o++) {
		redisReply *r = redisCommand(c, "TALLY.COUNT %s like %d", g_ctype,
		                             o);
		long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;

		if (n != in[o] && bad++ < 3)
			printf("     shared object %d: COUNT %lld, members in %ld\n",
			       o, n, in[o]);
		if (r)
			freeReplyObject(r);
	}
	check(bad == 0, "point %u%s: COUNT of each shared object equals its "
	      "members found by HAS", g_point, what);
}

static int64_t get_hot(redisContext *c)
{
	char key[64];
	redisReply *r;
	int64_t v = -1;

	snprintf(key, sizeof key, "cm:%u:hot", g_point);
	r = redisCommand(c, "GET %s", key);
	if (r && r->type == REDIS_REPLY_STRING)
		v = strtoll(r->str, NULL, 10);
	else if (r && r->type == REDIS_REPLY_NIL)
		v = 0;
	if (r)
		freeReplyObject(r);
	return v;
}

/* The prefix checks for every connection, and the shared counter. */
static void check_prefixes(redisContext *c, logs *L, const long *lo,
                           const long *hi, const char *what)
{
	int64_t hot_lo = 0, hot_hi = 0, hot;

	for (int i = 0; i < NC; i++) {
		feas f;

		feasible(L, i, lo[i], hi[i], &f);
		check(f.first >= 0, "point %u%s: conn %d: a prefix of its ops in "
		      "[%ld, %ld] explains every value read back (%s %ld..%ld "
		      "of %zu sent)", g_point, what, i, lo[i], hi[i],
		      f.first >= 0 ? "fits" : "none fits", f.first, f.last,
		      L->ops[i].n);
		hot_lo += f.first >= 0 ? f.hot_lo : 0;
		hot_hi += f.first >= 0 ? f.hot_hi : 0;
		if (f.first < 0) {
			/* bounds from the limits asked instead */
			int64_t h = 0;

			for (long k = 0; k < hi[i]; k++) {
				if (k == lo[i])
					hot_lo += h;
				if (L->ops[i].v[k].kind == K_HOT)
					h += L->ops[i].v[k].arg;
			}
			if (lo[i] == hi[i])
				hot_lo += h;
			hot_hi += h;
		}
	}
	hot = get_hot(c);
	check(hot >= hot_lo && hot <= hot_hi, "point %u%s: the shared counter "
	      "(%" PRId64 ") lies in [%" PRId64 ", %" PRId64 "], what the "
	      "feasible prefixes allow", g_point, what, hot, hot_lo, hot_hi);
	check_shared(c, L, what);
}

/* Re-send the unacknowledged ops of token connection i and its last
 * acknowledged ones: each answers what one application gives. */
static void retry_tokens(redisContext *c, logs *L, int i)
{
	opv *ops = &L->ops[i];
	long from = L->acked[i], n = (long)ops->n, bad = 0, cnt = 0;
	long start = from;
	/* self-test: retries without their tokens apply twice */
	int strip = strcmp(g_selftest, "no-token") == 0;
	hconn h = { .fd = -1 };

	for (long k = from - 1; k >= 0 && from - start < RETRY_ACKED; k--)
		if (ops->v[k].dup < 0)
			start = k;
	if (i == HTTPC && http_connect(&h) != 0) {
		check(0, "tallyd's HTTP port answers the token retries");
		return;
	}
	for (long k = start; k < n && i != HTTPC; k++) {
		op o = ops->v[k];

		if (strip)
			o.tok[0] = '\0';
		op_append(c, &o);
	}
	for (long k = start; k < n; k++) {
		op *o = &ops->v[k], got, sent = *o;
		void *vr = NULL;

		if (strip)
			sent.tok[0] = '\0';
		if (i == HTTPC ? http_incr(&h, &sent, &got) != 0 :
		    redisGetReply(c, &vr) != REDIS_OK || vr == NULL) {
			check(0, "tallyd answers the token retries");
			if (h.fd >= 0)
				close(h.fd);
			return;
		}
		if (i != HTTPC) {
			memset(&got, 0, sizeof got);
			reply_take(&got, vr);
			freeReplyObject(vr);
		}
		cnt++;
		if ((got.rtype != o->etype || got.reply != o->expect) &&
		    bad++ < 5)
			printf("     token op %ld (%c %s %" PRIu64 ", %s): retry "
			       "answers %c %" PRId64 ", once-applied %c %" PRId64
			       "\n", k, o->kind, o->name, o->content, o->tok,
			       got.rtype, got.reply, o->etype, o->expect);
	}
	if (h.fd >= 0)
		close(h.fd);
	check(bad == 0, "point %u: conn %d: %ld token writes re-sent after the "
	      "restart (%ld never acknowledged) answer what applying each "
	      "once gives", g_point, i, cnt, n - from);
}

/* Values settled by earlier points must still read the same. */
/* One line of DIR/final.log: what it reads now, into got; queues the
 * command on c (pipelined) when it needs one. */
static int final_ask(redisContext *c, const char *line)
{
	char a[STR_MAX], b[STR_MAX], want[128];
	unsigned long long ct;

	if (sscanf(line, "G %95s %127s", a, want) == 2) {
		redisAppendCommand(c, "GET %s", a);
		return 1;
	}
	if (sscanf(line, "C %95s %95s %llu %127s", a, b, &ct, want) == 4) {
		redisAppendCommand(c, "TALLY.COUNT %s %s %llu", a, b, ct);
		return 1;
	}
	return 0;
}

/* Compare one line with what tallyd answers now (the reply of the
 * command final_ask queued, when asked); -1 when tallyd stops. */
static int final_cmp(redisContext *c, emap *types, const char *line,
                     int asked, long *n, long *bad)
{
	char d[STR_MAX], want[128], got[128] = "";
	redisReply *r;
	void *vr = NULL;

	if (line[0] == 'Y') {
		char key[2 * STR_MAX];
		ent *t;

		if (sscanf(line, "Y %95s %127s", d, want) != 2)
			return 0;
		snprintf(key, sizeof key, "y %s", d);
		t = emap_get(types, key, 'y', -1);
		snprintf(got, sizeof got, "%s", !t->present ? "none" :
		         t->v ? "total" : "unique");
	} else if (asked) {
		if (sscanf(line, line[0] == 'G' ? "G %*s %127s" :
		           "C %*s %*s %*s %127s", want) != 1)
			want[0] = '\0';
		if (redisGetReply(c, &vr) != REDIS_OK || vr == NULL)
			return -1;
		r = vr;
		if (r->type == REDIS_REPLY_STRING)
			snprintf(got, sizeof got, "%s", r->str);
		else if (r->type == REDIS_REPLY_NIL)
			snprintf(got, sizeof got, "nil");
		else if (r->type == REDIS_REPLY_INTEGER)
			snprintf(got, sizeof got, "%lld", r->integer);
		freeReplyObject(r);
	} else {
		return 0;
	}
	(*n)++;
	if (strcmp(got, want) != 0 && (*bad)++ < 5)
		printf("     %s: now %s\n", line, got[0] ? got : "?");
	return 0;
}

/* Values settled by earlier points must still read the same. */
static void check_final(redisContext *c, const char *path)
{
	enum { CHUNK = 1000 };
	static char lines[CHUNK][256];
	static int asked[CHUNK];
	FILE *f = fopen(path, "r");
	long n = 0, bad = 0;
	emap types = { 0 };
	int more = 1;

	if (f == NULL) {
		check(1, "point %u: no earlier point to re-check", g_point);
		return;
	}
	if (read_types(c, &types) != 0) {
		check(0, "tallyd answers TALLY.TYPES");
		fclose(f);
		return;
	}
	while (more) {
		size_t k = 0;

		while (k < CHUNK && (more = fgets(lines[k], sizeof lines[k], f)
		                            != NULL)) {
			lines[k][strcspn(lines[k], "\n")] = '\0';
			asked[k] = final_ask(c, lines[k]);
			k++;
		}
		for (size_t j = 0; j < k; j++)
			if (final_cmp(c, &types, lines[j], asked[j], &n,
			              &bad) != 0) {
				check(0, "tallyd answers the re-check");
				more = 0;
				break;
			}
	}
	fclose(f);
	emap_free(&types);
	check(bad == 0, "point %u: all %ld values settled by earlier points "
	      "read the same (%ld differ)", g_point, n, bad);
}

/* Append this point's values, read back now, to DIR/final.log. */
static int write_final(redisContext *c, logs *L, const char *path)
{
	FILE *f = fopen(path, "a");
	int64_t hot = get_hot(c);

	if (f == NULL)
		return -1;
	if (read_back(c, &L->ents) != 0) {
		fclose(f);
		return -1;
	}
	for (size_t j = 0; j < L->ents.n; j++) {
		const ent *e = &L->ents.v[j];

		if (e->what == 'c') {
			if (e->obs_present)
				fprintf(f, "G %s %" PRId64 "\n", e->name, e->obs_v);
			else
				fprintf(f, "G %s nil\n", e->name);
		} else if (e->what == 't') {
			fprintf(f, "C %s %s %" PRIu64 " %" PRId64 "\n", g_ctype,
			        e->name, e->content, e->obs_v);
		} else if (e->what == 'y') {
			fprintf(f, "Y %s %s\n", e->name, !e->obs_present ? "none" :
			        e->obs_v ? "total" : "unique");
		}
	}
	fprintf(f, "G cm:%u:hot %" PRId64 "\n", g_point, hot);
	for (int o = 1; o <= SHARED_OBJS; o++) {
		redisReply *r = redisCommand(c, "TALLY.COUNT %s like %d", g_ctype,
		                             o);

		if (r && r->type == REDIS_REPLY_INTEGER)
			fprintf(f, "C %s like %d %lld\n", g_ctype, o, r->integer);
		if (r)
			freeReplyObject(r);
	}
	fclose(f);
	return 0;
}

static void check_load_replies(logs *L)
{
	long bad = 0, n = 0;

	for (int i = 0; i < NC; i++)
		for (size_t k = 0; k < L->ops[i].n; k++) {
			const op *o = &L->ops[i].v[k];

			if (!o->acked)
				continue;
			n++;
			if (!reply_ok(o) && bad++ < 5)
				printf("     conn %d op %zu (%c %s): reply %c %" PRId64
				       ", model %c %" PRId64 "\n", i, k, o->kind,
				       o->name, o->rtype, o->reply, o->etype,
				       o->expect);
		}
	check(bad == 0, "point %u: all %ld replies of the load are the "
	      "model's", g_point, n);
}

static void logs_free(logs *L)
{
	for (int i = 0; i < NC; i++)
		free(L->ops[i].v);
	emap_free(&L->ents);
}

static int verify_crash(logs *L, redisContext *c);
static int verify_backup(logs *L, long n);

static int do_verify(void)
{
	logs L;
	redisContext *c = NULL;
	int rc = 2;

	if (read_logs(&L) == 0) {
		check_load_replies(&L);
		c = connect_to(0);
		rc = c ? verify_crash(&L, c) : 1;
	}
	if (c)
		redisFree(c);
	logs_free(&L);
	printf("verify point %u: %d passed, %d failed\n", g_point, g_pass,
	       g_fail);
	return rc ? rc : g_fail ? 1 : 0;
}

static int do_verify_backup(long n)
{
	logs L;
	int rc = read_logs(&L) == 0 ? verify_backup(&L, n) : 2;

	logs_free(&L);
	printf("verify backup %ld of point %u: %d passed, %d failed\n", n,
	       g_point, g_pass, g_fail);
	return rc ? rc : g_fail ? 1 : 0;
}

/* Self-test: change a counter an earlier point settled. */
static void tamper(redisContext *c, const char *path)
{
	char line[512], key[STR_MAX];
	FILE *f = fopen(path, "r");
	redisReply *r = NULL;

	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "G %95s", key) == 1) {
			r = redisCommand(c, "INCR %s", key);
			break;
		}
	if (r)
		freeReplyObject(r);
	if (f)
		fclose(f);
}

/* After the restart: prefixes, token retries, earlier points. */
static int verify_crash(logs *L, redisContext *c)
{
	long lo[NC], hi[NC];
	char path[4096];
	feas f;

	if (read_back(c, &L->ents) != 0) {
		check(0, "tallyd answers every read");
		return 1;
	}
	for (int i = 0; i < NC; i++) {
		lo[i] = L->acked[i];
		hi[i] = (long)L->ops[i].n;
	}
	check_prefixes(c, L, lo, hi, "");
	/* exactly once: the token connections, retried, hold every op */
	retry_tokens(c, L, TOKC);
	retry_tokens(c, L, HTTPC);
	if (read_back(c, &L->ents) != 0) {
		check(0, "tallyd answers every read");
		return 1;
	}
	for (int i = TOKC; i <= HTTPC; i++) {
		feasible(L, i, hi[i], hi[i], &f);
		check(f.first >= 0, "point %u: conn %d: after the retries its "
		      "objects hold each of its %zu ops exactly once", g_point,
		      i, L->ops[i].n);
	}
	path_of(path, sizeof path, "%s/final.log", g_dir);
	if (strcmp(g_selftest, "tamper") == 0)
		tamper(c, path);
	check_final(c, path);
	if (write_final(c, L, path) != 0)
		check(0, "point %u: final values recorded", g_point);
	return 0;
}

/* A tallyd on backup n: prefixes within the backup's bounds. */
static int verify_backup(logs *L, long n)
{
	long lo[NC], hi[NC];
	char path[4096], line[1024];
	redisContext *c;
	FILE *f;
	int found = 0;

	path_of(path, sizeof path, "%s/p%u/backups.log", g_dir, g_point);
	f = fopen(path, "r");
	if (f == NULL) {
		perror(path);
		return 2;
	}
	while (fgets(line, sizeof line, f)) {
		char *p = line + 2, *end;

		if (line[0] != 'B' || strtol(p, &end, 10) != n)
			continue;
		p = end;
		for (int i = 0; i < NC; i++) {
			lo[i] = strtol(p, &end, 10);
			p = end;
			hi[i] = strtol(p, &end, 10);
			p = end;
			if (hi[i] > (long)L->ops[i].n)
				hi[i] = (long)L->ops[i].n;
		}
		found = 1;
	}
	fclose(f);
	if (!found) {
		check(0, "point %u: backup %ld is in the log", g_point, n);
		return 1;
	}
	c = connect_to(0);
	if (c == NULL)
		return 1;
	if (read_back(c, &L->ents) != 0) {
		check(0, "the backup's tallyd answers every read");
		redisFree(c);
		return 1;
	}
	snprintf(path, sizeof path, " backup %ld", n);
	check_prefixes(c, L, lo, hi, path);
	redisFree(c);
	return 0;
}

int main(int argc, char **argv)
{
	const char *st = getenv("TALLY_CRASH_SELFTEST");

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 6) {
		g_port = atoi(argv[2]);
		g_http_port = atoi(argv[3]);
		g_dir = argv[4];
		g_point = (unsigned)strtoul(argv[5], NULL, 10);
		snprintf(g_ctype, sizeof g_ctype, "cm%u", g_point);
	}
	if (argc == 8 && strcmp(argv[1], "load") == 0) {
		g_seed = strtoull(argv[6], NULL, 10);
		return do_load(atof(argv[7]));
	}
	g_selftest = st ? st : "";
	if (argc == 6 && strcmp(argv[1], "verify") == 0)
		return do_verify();
	if (argc == 7 && strcmp(argv[1], "verify-backup") == 0)
		return do_verify_backup(strtol(argv[6], NULL, 10));
	fprintf(stderr, "usage: crash_driver load RESP_PORT HTTP_PORT DIR POINT "
	        "SEED SECONDS\n"
	        "       crash_driver verify RESP_PORT HTTP_PORT DIR POINT\n"
	        "       crash_driver verify-backup RESP_PORT HTTP_PORT DIR POINT "
	        "N\n");
	return 2;
}
