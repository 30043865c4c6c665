/* hostile_client.c: hostile clients against one running tallyd, while a
 * well-behaved client keeps being served and tallyd's memory is measured.
 *
 *   hostile_client RESP_PORT HTTP_PORT TALLYD_PID MAXCLIENTS RSS_BOUND_KIB
 *                  LATENCY_BOUND_MS
 *
 * A good client (its own thread) does INCR, TALLY.ADD, GET and TALLY.COUNT
 * in a loop on one connection, checks every reply against the value it
 * must be, and times each one; it also opens a fresh RESP connection and a
 * fresh HTTP request every few hundred ms (except while maxclients is
 * filled on purpose). Meanwhile, one phase at a time: maxclients filled
 * and freed, hundreds of clients holding partial commands, clients that
 * never read their replies, huge declared sizes, deeply nested arrays,
 * commands with 100k arguments, random garbage from 1000 connections, and
 * slow or oversized HTTP requests. tallyd's VmRSS is sampled every 50 ms.
 *
 * Prints "ok   ..." and "FAIL ..." lines (the test script counts them),
 * "info ..." lines with figures, and exits 0 when nothing failed. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <hiredis/hiredis.h>

/* Connections of the phases: below maxclients (set by the script), and
 * below a default open-files limit of 1024 together. */
#define SLOW_CONNS 250
#define BIG_PARTIAL_CONNS 32
#define BIG_PARTIAL_BYTES (768u << 10)
#define NOREAD_CONNS 12
#define DECLARED_CONNS 100
#define GARBAGE_CONNS 1000
#define GARBAGE_AT_ONCE 100
#define HTTP_SLOW_CONNS 200
#define ARGS_100K 100000

static int g_resp_port, g_http_port, g_pid, g_maxclients;
static long g_rss_bound_kib;
static long g_latency_bound_ms;
static int g_failed;
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

/* ---- reporting -------------------------------------------------------------- */

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
	if (!ok)
		g_failed++;
	pthread_mutex_unlock(&g_print_lock);
}

static void info(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&g_print_lock);
	fputs("info ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	pthread_mutex_unlock(&g_print_lock);
}

static uint64_t rnd(void)
{
	g_rng ^= g_rng << 13;
	g_rng ^= g_rng >> 7;
	g_rng ^= g_rng << 17;
	return g_rng;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ---- RSS sampling ------------------------------------------------------------- */

static atomic_int g_sampling = 1;
static _Atomic long g_rss_now, g_rss_phase_peak;

/* One field of /proc/PID/status in KiB, or -1. */
static long proc_kib(const char *field)
{
	char path[64], line[256];
	size_t flen = strlen(field);
	long v = -1;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%d/status", g_pid);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof line, f) != NULL)
		if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
			v = strtol(line + flen + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

static void *rss_main(void *arg)
{
	(void)arg;
	while (atomic_load(&g_sampling)) {
		long rss = proc_kib("VmRSS");

		if (rss > 0) {
			atomic_store(&g_rss_now, rss);
			if (rss > atomic_load(&g_rss_phase_peak))
				atomic_store(&g_rss_phase_peak, rss);
		}
		sleep_ms(50);
	}
	return NULL;
}

/* A reply as text for a message: CR and LF shown as \r and \n, cut. */
static const char *shown(const char *s)
{
	static _Thread_local char out[4][128];
	static _Thread_local int next;
	char *o = out[next++ % 4];
	size_t k = 0;

	for (; *s != '\0' && k + 3 < sizeof out[0]; s++) {
		if (*s == '\r' || *s == '\n') {
			o[k++] = '\\';
			o[k++] = *s == '\r' ? 'r' : 'n';
		} else {
			o[k++] = (unsigned char)*s < 32 ? '.' : *s;
		}
	}
	o[k] = '\0';
	return o;
}

/* ---- raw sockets ---------------------------------------------------------------- */

static int raw_open(int port)
{
	struct sockaddr_in a;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
	    fcntl(fd, F_SETFL, O_NONBLOCK) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Send len bytes within ms. Returns bytes sent; *gone is set when the
 * server closed or reset the connection. */
static size_t raw_send(int fd, const void *p, size_t len, int ms, int *gone)
{
	const char *s = p;
	uint64_t end = now_ms() + (uint64_t)ms;
	size_t sent = 0;

	*gone = 0;
	while (sent < len) {
		ssize_t k = send(fd, s + sent, len - sent, MSG_NOSIGNAL);

		if (k > 0) {
			sent += (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
			*gone = 1;
			break;
		}
		uint64_t now = now_ms();
		if (now >= end)
			break;
		struct pollfd pf = { fd, POLLOUT, 0 };
		if (poll(&pf, 1, (int)(end - now)) < 0 && errno != EINTR)
			break;
	}
	return sent;
}

/* Read until `want` bytes came (0: until a '\n'), the server closed
 * (*closed = 1), or ms passed. Returns bytes read, NUL-terminated. */
static size_t raw_recv(int fd, char *buf, size_t cap, size_t want, int ms,
                       int *closed)
{
	uint64_t end = now_ms() + (uint64_t)ms;
	size_t n = 0;

	*closed = 0;
	while (n < cap - 1) {
		if (want > 0 ? n >= want : memchr(buf, '\n', n) != NULL)
			break;
		ssize_t k = recv(fd, buf + n, cap - 1 - n, 0);
		if (k > 0) {
			n += (size_t)k;
			continue;
		}
		if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK &&
		               errno != EINTR)) {
			*closed = 1;
			break;
		}
		uint64_t now = now_ms();
		if (now >= end)
			break;
		struct pollfd pf = { fd, POLLIN, 0 };
		if (poll(&pf, 1, (int)(end - now)) < 0 && errno != EINTR)
			break;
	}
	buf[n] = '\0';
	return n;
}

/* Whether the server closes the connection within ms (input discarded). */
static int raw_closes(int fd, int ms)
{
	char sink[4096];
	uint64_t end = now_ms() + (uint64_t)ms;

	for (;;) {
		int closed;
		uint64_t now = now_ms();

		if (now >= end)
			return 0;
		raw_recv(fd, sink, sizeof sink, sizeof sink - 1,
		         (int)(end - now), &closed);
		if (closed)
			return 1;
	}
}

/* Send a request on a fresh connection and read until the server closes
 * or ms pass; the answer goes to buf. Returns 1 if the server closed. */
static int raw_exchange(int port, const void *req, size_t len, char *buf,
                        size_t cap, int ms)
{
	int fd = raw_open(port), gone, closed = 0;

	buf[0] = '\0';
	if (fd < 0)
		return 0;
	raw_send(fd, req, len, ms, &gone);
	raw_recv(fd, buf, cap, cap - 1, ms, &closed);
	close(fd);
	return closed;
}

static void close_all(int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (fds[i] >= 0) {
			close(fds[i]);
			fds[i] = -1;
		}
}

/* ---- the good client ------------------------------------------------------------ */

typedef struct good_stats {
	atomic_llong rounds;       /* INCR+ADD+GET+COUNT rounds done */
	atomic_llong replies;      /* replies checked */
	atomic_llong wrong;        /* replies not equal to the model */
	atomic_llong late;         /* replies later than the bound */
	atomic_llong max_ms;       /* slowest reply */
	atomic_llong phase_max_ms; /* slowest reply in this phase */
	atomic_llong fresh_ok, fresh_bad;  /* fresh RESP connections */
	atomic_llong http_ok, http_bad;    /* fresh HTTP requests */
} good_stats;

static good_stats g_good;
static atomic_int g_good_run = 1;
static atomic_int g_fresh_ok = 1;  /* new connections must be served */
static char g_good_err[256];

static void good_note_latency(uint64_t ms)
{
	long long m = atomic_load(&g_good.max_ms);

	if ((long long)ms > m)
		atomic_store(&g_good.max_ms, (long long)ms);
	if ((long long)ms > atomic_load(&g_good.phase_max_ms))
		atomic_store(&g_good.phase_max_ms, (long long)ms);
	if ((long)ms > g_latency_bound_ms)
		atomic_fetch_add(&g_good.late, 1);
	atomic_fetch_add(&g_good.replies, 1);
}

static void good_wrong(const char *fmt, ...)
{
	va_list ap;

	if (atomic_fetch_add(&g_good.wrong, 1) == 0) {
		va_start(ap, fmt);
		vsnprintf(g_good_err, sizeof g_good_err, fmt, ap);
		va_end(ap);
	}
}

/* One command through hiredis, timed; checks an integer or bulk answer. */
static void good_cmd(redisContext *c, long long want, int bulk,
                     const char *fmt, ...)
{
	va_list ap;
	uint64_t t0 = now_ms();
	redisReply *r;

	va_start(ap, fmt);
	r = redisvCommand(c, fmt, ap);
	va_end(ap);
	good_note_latency(now_ms() - t0);
	if (r == NULL) {
		good_wrong("%s: no reply (%s)", fmt, c->errstr);
		return;
	}
	if (bulk ? (r->type != REDIS_REPLY_STRING || r->str == NULL ||
	            strtoll(r->str, NULL, 10) != want)
	         : (r->type != REDIS_REPLY_INTEGER || r->integer != want))
		good_wrong("%s: want %lld, got type %d '%s' %lld", fmt, want,
		           r->type, r->str ? r->str : "", r->integer);
	freeReplyObject(r);
}

static void good_fresh_resp(void)
{
	struct timeval tv = { 10, 0 };
	uint64_t t0 = now_ms();
	redisContext *c = redisConnectWithTimeout("127.0.0.1", g_resp_port, tv);
	redisReply *r = NULL;

	if (c != NULL && !c->err && redisSetTimeout(c, tv) == REDIS_OK)
		r = redisCommand(c, "PING");
	good_note_latency(now_ms() - t0);
	if (r != NULL && r->type == REDIS_REPLY_STATUS &&
	    strcmp(r->str, "PONG") == 0)
		atomic_fetch_add(&g_good.fresh_ok, 1);
	else if (atomic_load(&g_fresh_ok))
		atomic_fetch_add(&g_good.fresh_bad, 1);
	if (r != NULL)
		freeReplyObject(r);
	redisFree(c);
}

static void good_fresh_http(void)
{
	static const char req[] = "GET /v1/objects/article/777/like HTTP/1.1\r\n"
	                          "Host: t\r\nConnection: close\r\n\r\n";
	char buf[2048];
	uint64_t t0 = now_ms();
	int closed = raw_exchange(g_http_port, req, sizeof req - 1, buf,
	                          sizeof buf, 10000);

	good_note_latency(now_ms() - t0);
	if (closed && strncmp(buf, "HTTP/1.1 200", 12) == 0 &&
	    strstr(buf, "{\"count\":") != NULL)
		atomic_fetch_add(&g_good.http_ok, 1);
	else if (atomic_load(&g_fresh_ok))
		atomic_fetch_add(&g_good.http_bad, 1);
}

static void *good_main(void *arg)
{
	struct timeval tv = { 30, 0 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", g_resp_port, tv);
	long long n = 0;
	uint64_t last_fresh = 0;

	(void)arg;
	if (c == NULL || c->err || redisSetTimeout(c, tv) != REDIS_OK) {
		good_wrong("cannot connect");
		redisFree(c);
		return NULL;
	}
	while (atomic_load(&g_good_run) && atomic_load(&g_good.wrong) == 0) {
		n++;
		good_cmd(c, n, 0, "INCR hostile:good");
		good_cmd(c, n, 0, "TALLY.ADD article like 777 %lld", n);
		good_cmd(c, n, 1, "GET hostile:good");
		good_cmd(c, n, 0, "TALLY.COUNT article like 777");
		atomic_fetch_add(&g_good.rounds, 1);
		if (atomic_load(&g_fresh_ok) && now_ms() - last_fresh >= 300) {
			last_fresh = now_ms();
			good_fresh_resp();
			good_fresh_http();
		}
		sleep_ms(2);
	}
	redisFree(c);
	return NULL;
}

/* ---- phases ----------------------------------------------------------------------- */

typedef struct phase {
	const char *name;
	long rss_start, rss_peak, rss_end;
	long long rounds;
	long long max_ms;
	uint64_t t0_ms;
} phase;

static phase g_phases[16];
static size_t g_nphases;
static long g_baseline;

static void phase_begin(const char *name)
{
	phase *p = &g_phases[g_nphases];

	p->name = name;
	p->t0_ms = now_ms();
	p->rss_start = proc_kib("VmRSS");
	p->rounds = atomic_load(&g_good.rounds);
	atomic_store(&g_rss_phase_peak, p->rss_start);
	atomic_store(&g_good.phase_max_ms, 0);
	info("phase %s: begins, tallyd RSS %ld KiB", name, p->rss_start);
}

static void phase_end(void)
{
	phase *p = &g_phases[g_nphases++];
	uint64_t until = now_ms() + (uint64_t)g_latency_bound_ms;

	/* A short phase may end before the good client's next round does:
	 * give it the latency bound to show it is still being served. */
	while (atomic_load(&g_good.rounds) == p->rounds && now_ms() < until)
		sleep_ms(10);
	p->rss_end = proc_kib("VmRSS");
	p->rss_peak = atomic_load(&g_rss_phase_peak);
	if (p->rss_end > p->rss_peak)
		p->rss_peak = p->rss_end;
	p->rounds = atomic_load(&g_good.rounds) - p->rounds;
	p->max_ms = atomic_load(&g_good.phase_max_ms);
	info("phase %s: %" PRIu64 " ms, RSS peak %ld KiB (+%ld over "
	     "baseline), end %ld KiB; good client did %lld rounds, slowest "
	     "reply %lld ms", p->name, now_ms() - p->t0_ms, p->rss_peak,
	     p->rss_peak - g_baseline, p->rss_end, p->rounds, p->max_ms);
	report(p->rounds > 0, "%s: the good client was served during it "
	       "(or within the latency bound after it)", p->name);
	report(proc_kib("VmRSS") > 0, "%s: tallyd is still running", p->name);
}

static redisContext *probe_connect(void)
{
	struct timeval tv = { 10, 0 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", g_resp_port, tv);

	if (c == NULL || c->err || redisSetTimeout(c, tv) != REDIS_OK) {
		redisFree(c);
		return NULL;
	}
	return c;
}

/* connected_clients of INFO, through a probe connection (counted too). */
static long connected_clients(void)
{
	redisContext *c = probe_connect();
	redisReply *r = c ? redisCommand(c, "INFO clients") : NULL;
	long n = -1;

	if (r != NULL && r->type == REDIS_REPLY_STRING) {
		const char *p = strstr(r->str, "connected_clients:");
		if (p != NULL)
			n = strtol(p + strlen("connected_clients:"), NULL, 10);
	}
	if (r != NULL)
		freeReplyObject(r);
	redisFree(c);
	return n;
}

/* Wait (bounded) until only `n` clients, the probe included, are left. */
static int wait_clients(long n, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;
	long got = -1;

	while (now_ms() < end) {
		got = connected_clients();
		if (got == n)
			return 1;
		sleep_ms(100);
	}
	info("connected_clients stayed at %ld (waited for %ld)", got, n);
	return 0;
}

/* A metric's value from GET /metrics, or -1. */
static long long metric(const char *name)
{
	static char buf[1 << 16];
	static const char req[] = "GET /metrics HTTP/1.1\r\nHost: t\r\n"
	                          "Connection: close\r\n\r\n";
	size_t nlen = strlen(name);

	raw_exchange(g_http_port, req, sizeof req - 1, buf, sizeof buf, 10000);
	for (const char *p = buf; (p = strstr(p, name)) != NULL; p += nlen)
		if ((p == buf || p[-1] == '\n') && p[nlen] == ' ')
			return strtoll(p + nlen + 1, NULL, 10);
	return -1;
}

/* 1. maxclients: fill it, check the refusals, free it, serve again. */
static void phase_maxclients(void)
{
	static int fds[2048];
	char buf[256];
	size_t total = (size_t)g_maxclients + 20, served = 0, refused = 0;
	size_t refused_closed = 0, other = 0, i;

	phase_begin("maxclients");
	atomic_store(&g_fresh_ok, 0);
	sleep_ms(400); /* the good thread's fresh connections end */
	/* Only the good client and the probe are connected. */
	report(wait_clients(2, 20000), "maxclients: only the good client is "
	       "connected before");
	for (i = 0; i < total && i < sizeof fds / sizeof fds[0]; i++) {
		int gone;

		fds[i] = raw_open(g_resp_port);
		if (fds[i] >= 0)
			raw_send(fds[i], "PING\r\n", 6, 5000, &gone);
	}
	for (i = 0; i < total; i++) {
		int closed;

		if (fds[i] < 0) {
			other++;
			continue;
		}
		raw_recv(fds[i], buf, sizeof buf, 0, 10000, &closed);
		if (strcmp(buf, "+PONG\r\n") == 0) {
			served++;
		} else if (strcmp(buf, "-ERR max number of clients reached\r\n")
		           == 0) {
			refused++;
			refused_closed += raw_closes(fds[i], 10000);
		} else {
			other++;
		}
	}
	info("maxclients %d: %zu of %zu connections served, %zu refused, "
	     "%zu other", g_maxclients, served, total, refused, other);
	/* The good client holds one place; a connection of the good thread
	 * may still be closing when the fill starts. */
	report(served + 1 <= (size_t)g_maxclients &&
	       served + 3 >= (size_t)g_maxclients,
	       "maxclients: %zu served, maxclients %d minus the good client",
	       served, g_maxclients);
	report(refused >= 20 && other == 0, "maxclients: every extra "
	       "connection is refused with Redis's error (%zu)", refused);
	report(refused_closed == refused, "maxclients: every refused "
	       "connection is closed by tallyd (%zu)", refused_closed);
	{
		static const char req[] = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
		raw_exchange(g_http_port, req, sizeof req - 1, buf, sizeof buf,
		             10000);
		report(strncmp(buf, "HTTP/1.1 503", 12) == 0, "maxclients: an "
		       "HTTP client is refused with 503 while full");
	}
	/* Still full: a served connection keeps working. */
	{
		int gone, closed;
		size_t k = 0;

		while (k < total && fds[k] < 0)
			k++;
		raw_send(fds[k], "INCR hostile:held\r\n", 19, 5000, &gone);
		raw_recv(fds[k], buf, sizeof buf, 0, 10000, &closed);
		report(strcmp(buf, ":1\r\n") == 0, "maxclients: a held "
		       "connection is served while full ('%s')", shown(buf));
	}
	close_all(fds, total);
	{
		uint64_t t0 = now_ms(), end = t0 + 20000;
		int ok = 0;

		while (!ok && now_ms() < end) {
			redisContext *c = probe_connect();
			redisReply *r = c ? redisCommand(c, "PING") : NULL;

			ok = r != NULL && r->type == REDIS_REPLY_STATUS;
			if (r != NULL)
				freeReplyObject(r);
			redisFree(c);
			if (!ok)
				sleep_ms(50);
		}
		report(ok, "maxclients: once they go, a new client is served "
		       "(after %" PRIu64 " ms)", now_ms() - t0);
	}
	report(wait_clients(2, 20000), "maxclients: every held connection "
	       "is gone");
	atomic_store(&g_fresh_ok, 1);
	phase_end();
}

/* 2. Clients holding partial commands: small ones stalled, then finished
 * a byte at a time; big partial arguments; both answered correctly. */
static void phase_slow(void)
{
	static const char cmd[] = "*3\r\n$6\r\nINCRBY\r\n$9\r\nhostile:s\r\n"
	                          "$1\r\n1\r\n";
	static int fds[SLOW_CONNS], big[BIG_PARTIAL_CONNS];
	size_t len = sizeof cmd - 1, cut[SLOW_CONNS], answered = 0, i;
	char buf[256];
	int gone;

	phase_begin("slow");
	for (i = 0; i < SLOW_CONNS; i++) {
		/* Every cut point, the first byte to the last but one. */
		cut[i] = 1 + i % (len - 1);
		fds[i] = raw_open(g_resp_port);
		if (fds[i] >= 0)
			raw_send(fds[i], cmd, cut[i], 5000, &gone);
	}
	sleep_ms(3000);
	/* The rest, one byte per connection per round. */
	for (size_t b = 1; b < len; b++) {
		for (i = 0; i < SLOW_CONNS; i++)
			if (fds[i] >= 0 && cut[i] < len) {
				raw_send(fds[i], cmd + cut[i], 1, 5000, &gone);
				cut[i]++;
			}
		sleep_ms(20);
	}
	for (i = 0; i < SLOW_CONNS; i++) {
		int closed;

		if (fds[i] < 0)
			continue;
		raw_recv(fds[i], buf, sizeof buf, 0, 10000, &closed);
		answered += buf[0] == ':';
	}
	close_all(fds, SLOW_CONNS);
	report(answered == SLOW_CONNS, "slow: %zu of %d stalled, then "
	       "dribbled commands answered", answered, SLOW_CONNS);
	{
		redisContext *c = probe_connect();
		redisReply *r = c ? redisCommand(c, "GET hostile:s") : NULL;
		long long v = r && r->type == REDIS_REPLY_STRING ?
		              strtoll(r->str, NULL, 10) : -1;

		report(v == SLOW_CONNS, "slow: hostile:s is %d (got %lld)",
		       SLOW_CONNS, v);
		if (r != NULL)
			freeReplyObject(r);
		redisFree(c);
	}
	/* Big partial arguments: each connection holds 768 KiB of a 1 MiB
	 * argument. tallyd must buffer them (they are within the limits)
	 * and free them when the clients go. */
	{
		static char chunk[BIG_PARTIAL_BYTES];
		static const char head[] = "*2\r\n$4\r\nECHO\r\n$1048576\r\n";
		long before = proc_kib("VmRSS"), held;

		memset(chunk, 'z', sizeof chunk);
		for (i = 0; i < BIG_PARTIAL_CONNS; i++) {
			big[i] = raw_open(g_resp_port);
			if (big[i] < 0)
				continue;
			raw_send(big[i], head, sizeof head - 1, 5000, &gone);
			raw_send(big[i], chunk, sizeof chunk, 10000, &gone);
		}
		sleep_ms(1500);
		held = proc_kib("VmRSS");
		info("slow: %d clients holding %u KiB of a 1 MiB argument each:"
		     " RSS %ld -> %ld KiB (+%ld KiB, %ld KiB per client)",
		     BIG_PARTIAL_CONNS, BIG_PARTIAL_BYTES >> 10, before, held,
		     held - before, (held - before) / BIG_PARTIAL_CONNS);
		close_all(big, BIG_PARTIAL_CONNS);
		sleep_ms(1000);
		info("slow: after they closed: RSS %ld KiB", proc_kib("VmRSS"));
	}
	phase_end();
}

/* Fill `out` with n copies of s; returns the length. */
static size_t repeat(char *out, size_t cap, const char *s, size_t n)
{
	size_t l = strlen(s), k = 0;

	for (size_t i = 0; i < n && k + l <= cap; i++, k += l)
		memcpy(out + k, s, l);
	return k;
}

/* 3. Clients that send and never read: each must be disconnected at the
 * output limit, and tallyd's memory stays bounded meanwhile. */
static void phase_noread(void)
{
	static char req[1 << 20], pad[65537], group[66000];
	static int fds[NOREAD_CONNS];
	size_t reqlen, sent[NOREAD_CONNS] = { 0 }, at[NOREAD_CONNS] = { 0 };
	size_t dropped = 0, i, k;
	long long closes0 = metric("tally_output_limit_closes_total"), closes1;
	int done[NOREAD_CONNS] = { 0 };
	uint64_t end;

	phase_begin("noread");
	/* Big read replies (RECENT LIMIT 1000 of 1000 members is ~30 KB)
	 * for most; for a quarter, 16 writes then a PING of 64 KiB, which
	 * waits for the writes (a read sees the writes before it): both
	 * ways of piling up output must be bounded. */
	for (i = 0; i < NOREAD_CONNS; i++)
		fds[i] = raw_open(g_resp_port);
	memset(pad, 'p', sizeof pad - 1);
	k = repeat(group, sizeof group, "INCR hostile:nr\r\n", 16);
	/* A bulk argument: as an inline line it would pass the 64 KiB
	 * inline limit. */
	snprintf(group + k, sizeof group - k, "*2\r\n$4\r\nPING\r\n$%zu\r\n"
	         "%s\r\n", sizeof pad - 1, pad);
	end = now_ms() + 60000;
	while (now_ms() < end && dropped < NOREAD_CONNS) {
		for (i = 0; i < NOREAD_CONNS; i++) {
			int gone = 0;

			if (done[i] || fds[i] < 0)
				continue;
			reqlen = i % 4 == 0 ?
			         repeat(req, sizeof req, group, 8) :
			         repeat(req, sizeof req, "TALLY.RECENT article "
			                "like 778 LIMIT 1000\r\n", 4096);
			/* One unbroken stream: go on where the last send
			 * stopped, mid-command maybe. */
			k = raw_send(fds[i], req + at[i], reqlen - at[i], 50,
			             &gone);
			sent[i] += k;
			at[i] = (at[i] + k) % reqlen;
			/* 256 MB unanswered is far past any limit; stop there
			 * and let the check below say what happened. */
			if (gone || sent[i] > (256u << 20)) {
				done[i] = 1;
				dropped += gone;
			}
		}
	}
	for (i = 0; i < NOREAD_CONNS; i++)
		info("noread: client %zu (%s) sent %zu KiB before %s", i,
		     i % 4 == 0 ? "INCR, PING" : "RECENT", sent[i] >> 10,
		     done[i] ? "it was disconnected" : "the test stopped");
	report(dropped == NOREAD_CONNS, "noread: all %d clients that never "
	       "read were disconnected (%zu)", NOREAD_CONNS, dropped);
	closes1 = metric("tally_output_limit_closes_total");
	report(closes1 - closes0 >= NOREAD_CONNS, "noread: "
	       "tally_output_limit_closes_total counts them (%lld -> %lld)",
	       closes0, closes1);
	close_all(fds, NOREAD_CONNS);
	phase_end();
}

/* Expect an exact answer and a close to a request on a fresh connection. */
static void expect_refused(const char *what, int port, const char *req,
                           size_t len, const char *want)
{
	static char buf[1 << 16];
	int closed = raw_exchange(port, req, len, buf, sizeof buf, 10000);

	report(strcmp(buf, want) == 0 && closed, "%s: answered '%s' and "
	       "closed (got '%s', closed %d)", what, shown(want), shown(buf),
	       closed);
}

/* 4. Huge declared sizes, refused at once or held without allocating
 * for them; deeply nested arrays. */
static void phase_sizes(void)
{
	static int fds[2 * DECLARED_CONNS];
	static char nested[400000];
	long before, held;
	int gone;
	size_t i;

	phase_begin("sizes");
	expect_refused("sizes: $2147483647", g_resp_port,
	               "*1\r\n$2147483647\r\n", 17,
	               "-ERR Protocol error: invalid bulk length\r\n");
	expect_refused("sizes: *2147483647", g_resp_port, "*2147483647\r\n", 13,
	               "-ERR Protocol error: invalid multibulk length\r\n");
	expect_refused("sizes: *99999999999999999999 (overflows int64)",
	               g_resp_port, "*99999999999999999999\r\n", 23,
	               "-ERR Protocol error: invalid multibulk length\r\n");
	expect_refused("sizes: $-2", g_resp_port, "*1\r\n$-2\r\n", 9,
	               "-ERR Protocol error: invalid bulk length\r\n");
	expect_refused("sizes: *1048577 (one over --max-args)", g_resp_port,
	               "*1048577\r\n", 10,
	               "-ERR Protocol error: invalid multibulk length\r\n");
	/* Within the limits, declared but never sent: nothing is allocated
	 * for the declared size, so these cost little. */
	before = proc_kib("VmRSS");
	for (i = 0; i < 2 * DECLARED_CONNS; i++) {
		const char *d = i % 2 ? "*1048576\r\n$3\r\nGET\r\n$1\r\n" :
		                "*2\r\n$4\r\nECHO\r\n$1048576\r\nabc";
		fds[i] = raw_open(g_resp_port);
		if (fds[i] >= 0)
			raw_send(fds[i], d, strlen(d), 5000, &gone);
	}
	sleep_ms(1500);
	held = proc_kib("VmRSS");
	info("sizes: %d clients that declared 1048576 arguments or a 1 MiB "
	     "argument and stalled: RSS %ld -> %ld KiB (+%ld KiB)",
	     2 * DECLARED_CONNS, before, held, held - before);
	/* Each holds a read buffer (64 KiB) and little else; a 1 MiB
	 * argument or 1048576 argument slots (24 MiB) allocated for what is
	 * only declared would show. */
	report(held - before < 2 * DECLARED_CONNS * 192L, "sizes: declared "
	       "sizes are not allocated (under 192 KiB per client)");
	close_all(fds, 2 * DECLARED_CONNS);
	/* 100000 levels of "*1\r\n": tally's commands are flat arrays. */
	repeat(nested, sizeof nested, "*1\r\n", 100000);
	expect_refused("sizes: arrays nested 100000 deep", g_resp_port, nested,
	               400000, "-ERR Protocol error: expected '$', got '*'\r\n");
	phase_end();
}

/* Send a multibulk of argc arguments (name, then "kN" keys) and read the
 * answer; returns its length in buf. */
static size_t big_command(int fd, const char *name, size_t argc, char *buf,
                          size_t cap, size_t want, int *closed)
{
	static char req[4 << 20];
	size_t n = 0;
	int gone;

	n += (size_t)snprintf(req + n, sizeof req - n, "*%zu\r\n$%zu\r\n%s\r\n",
	                      argc, strlen(name), name);
	for (size_t i = 1; i < argc && n + 40 < sizeof req; i++) {
		char key[24];
		int kl = snprintf(key, sizeof key, "%zu", i);

		n += (size_t)snprintf(req + n, sizeof req - n, "$%d\r\n%s\r\n",
		                      kl, key);
	}
	raw_send(fd, req, n, 30000, &gone);
	return raw_recv(fd, buf, cap, want, 60000, closed);
}

/* 5. Commands with 100k arguments: served, or refused with the
 * documented limit; the connection stays usable. */
static void phase_args(void)
{
	static char buf[1 << 20];
	size_t nil_reply = 9 + (size_t)ARGS_100K * 5, n;
	int fd = raw_open(g_resp_port), closed, gone;

	phase_begin("args");
	n = big_command(fd, "MGET", ARGS_100K + 1, buf, sizeof buf, nil_reply,
	                &closed);
	report(n == nil_reply && strncmp(buf, "*100000\r\n$-1\r\n", 14) == 0,
	       "args: MGET of 100000 keys is served (%zu bytes)", n);
	n = big_command(fd, "EXISTS", ARGS_100K + 1, buf, sizeof buf, 0,
	                &closed);
	report(strcmp(buf, ":0\r\n") == 0, "args: EXISTS of 100000 keys: 0 "
	       "('%s')", shown(buf));
	big_command(fd, "DEL", ARGS_100K + 1, buf, sizeof buf, 0, &closed);
	report(strcmp(buf, "-ERR DEL takes at most 1024 keys\r\n") == 0,
	       "args: DEL of 100000 keys is refused ('%s')", shown(buf));
	big_command(fd, "TALLY.MCOUNT", ARGS_100K + 1, buf, sizeof buf, 0,
	            &closed);
	report(strcmp(buf, "-ERR TALLY.MCOUNT takes at most 1000 objects\r\n")
	       == 0, "args: TALLY.MCOUNT of 100000 objects is refused "
	       "('%s')", shown(buf));
	big_command(fd, "INCR", ARGS_100K + 1, buf, sizeof buf, 0, &closed);
	report(strcmp(buf, "-ERR wrong number of arguments for 'incr' "
	              "command\r\n") == 0, "args: INCR with 100000 arguments "
	       "is refused ('%s')", shown(buf));
	big_command(fd, "NOSUCHCMD", ARGS_100K + 1, buf, sizeof buf, 0,
	            &closed);
	report(strncmp(buf, "-ERR unknown command 'NOSUCHCMD'", 32) == 0 &&
	       strlen(buf) < 1024, "args: an unknown command with 100000 "
	       "arguments is refused, with a bounded message ('%s')", shown(buf));
	raw_send(fd, "PING\r\n", 6, 5000, &gone);
	raw_recv(fd, buf, sizeof buf, 0, 10000, &closed);
	report(strcmp(buf, "+PONG\r\n") == 0, "args: the connection is "
	       "still usable after them");
	close(fd);
	/* An inline command of 100000 arguments is a 600 KB line: over the
	 * inline limit (64 KiB), refused. */
	{
		static char line[700000];
		size_t k = (size_t)snprintf(line, sizeof line, "MGET");

		for (size_t i = 0; i < ARGS_100K; i++)
			k += (size_t)snprintf(line + k, sizeof line - k, " k%zu",
			                      i % 10);
		k += (size_t)snprintf(line + k, sizeof line - k, "\r\n");
		expect_refused("args: an inline command of 100000 arguments",
		               g_resp_port, line, k, "-ERR Protocol error: too "
		               "big inline request\r\n");
	}
	phase_end();
}

static void fill_garbage(char *p, size_t n)
{
	static const char *const frags[] = { "*", "$", "\r\n", "*3\r\n",
		"$-1\r\n", "*-1\r\n", "$999999999\r\n", "INCR x\r\n", "\"",
		"'", "\\x", "GET /", " HTTP/1.1\r\n", "Content-Length: 99\r\n" };
	size_t i = 0;

	while (i < n) {
		if (rnd() % 4 == 0) {
			const char *f = frags[rnd() % (sizeof frags / sizeof *frags)];
			size_t l = strlen(f);

			if (l > n - i)
				l = n - i;
			memcpy(p + i, f, l);
			i += l;
		} else {
			p[i++] = (char)rnd();
		}
	}
}

/* 6. Random garbage from 1000 RESP connections (100 open at a time) and
 * 200 HTTP ones. */
static void phase_garbage(void)
{
	static char junk[32768], sink[65536];
	static int fds[GARBAGE_AT_ONCE];
	size_t done = 0, http_done = 0;
	uint64_t t0 = now_ms();
	int gone, closed;

	phase_begin("garbage");
	while (done < GARBAGE_CONNS) {
		size_t k;

		for (k = 0; k < GARBAGE_AT_ONCE; k++) {
			int http = done + k < 200 && k % 5 == 0;
			size_t len = 1 + rnd() % sizeof junk;

			fds[k] = raw_open(http ? g_http_port : g_resp_port);
			if (fds[k] < 0)
				continue;
			fill_garbage(junk, len);
			raw_send(fds[k], junk, len, 2000, &gone);
			http_done += http;
		}
		for (k = 0; k < GARBAGE_AT_ONCE; k++)
			if (fds[k] >= 0)
				raw_recv(fds[k], sink, sizeof sink, sizeof sink - 1,
				         20, &closed);
		close_all(fds, GARBAGE_AT_ONCE);
		done += GARBAGE_AT_ONCE;
	}
	info("garbage: %zu connections (%zu of them HTTP) in %" PRIu64 " ms",
	     done, http_done, now_ms() - t0);
	phase_end();
}

/* 7. HTTP: slow headers held by 200 clients, then completed; huge or
 * bad Content-Length; a client that pipelines and never reads. */
static void phase_http(void)
{
	static const char head[] = "GET /v1/objects/article/777/like HTTP/1.1\r\n"
	                           "Host: t\r\nX-Slow: ";
	static int fds[HTTP_SLOW_CONNS];
	static char buf[1 << 16], req[1 << 20];
	size_t ok = 0, i;
	int gone, closed;

	phase_begin("http");
	for (i = 0; i < HTTP_SLOW_CONNS; i++) {
		fds[i] = raw_open(g_http_port);
		if (fds[i] >= 0)
			raw_send(fds[i], head, 1 + i % (sizeof head - 1), 5000,
			         &gone);
	}
	sleep_ms(2000);
	for (i = 0; i < HTTP_SLOW_CONNS; i++) {
		size_t at = 1 + i % (sizeof head - 1);

		if (fds[i] < 0)
			continue;
		raw_send(fds[i], head + at, sizeof head - 1 - at, 5000, &gone);
		raw_send(fds[i], "x\r\nConnection: close\r\n\r\n", 25, 5000,
		         &gone);
	}
	for (i = 0; i < HTTP_SLOW_CONNS; i++) {
		if (fds[i] < 0)
			continue;
		raw_recv(fds[i], buf, sizeof buf, sizeof buf - 1, 10000, &closed);
		ok += strncmp(buf, "HTTP/1.1 200", 12) == 0 &&
		      strstr(buf, "{\"count\":") != NULL;
	}
	close_all(fds, HTTP_SLOW_CONNS);
	report(ok == HTTP_SLOW_CONNS, "http: %zu of %d slow requests answered "
	       "200 once complete", ok, HTTP_SLOW_CONNS);
	static const struct { const char *what, *req, *status; } bad[] = {
		{ "Content-Length 10^12", "POST /v1/events HTTP/1.1\r\nHost: t\r\n"
		  "Content-Length: 1000000000000\r\n\r\n{}", "HTTP/1.1 413" },
		{ "Content-Length 2^64", "POST /v1/events HTTP/1.1\r\nHost: t\r\n"
		  "Content-Length: 18446744073709551616\r\n\r\n{}", "HTTP/1.1 400" },
		{ "Content-Length -1", "POST /v1/events HTTP/1.1\r\nHost: t\r\n"
		  "Content-Length: -1\r\n\r\n{}", "HTTP/1.1 400" },
		{ "a chunk size over 2^64", "POST /v1/events HTTP/1.1\r\n"
		  "Host: t\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "fffffffffffffffff\r\nab", "HTTP/1.1 400" },
	};
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		raw_exchange(g_http_port, bad[i].req, strlen(bad[i].req), buf,
		             sizeof buf, 10000);
		report(strncmp(buf, bad[i].status, strlen(bad[i].status)) == 0,
		       "http: %s is refused (%s; got '%s')", bad[i].what,
		       bad[i].status, shown(buf));
	}
	/* A chunk of 2^63 bytes is held like any partial body: refused
	 * once more than the body limit (1 MiB) has come, never buffered
	 * beyond it. */
	{
		static const char h[] = "POST /v1/events HTTP/1.1\r\nHost: t\r\n"
		                        "Transfer-Encoding: chunked\r\n\r\n"
		                        "8000000000000000\r\n";
		int fd = raw_open(g_http_port);

		memset(req, 'x', sizeof req);
		buf[0] = '\0';
		if (fd >= 0) {
			raw_send(fd, h, sizeof h - 1, 5000, &gone);
			raw_send(fd, req, sizeof req, 10000, &gone);
			raw_send(fd, req, 128 << 10, 10000, &gone);
			raw_recv(fd, buf, sizeof buf, 0, 10000, &closed);
			close(fd);
		}
		report(strncmp(buf, "HTTP/1.1 413", 12) == 0, "http: a chunk "
		       "of 2^63 bytes is refused with 413 past 1 MiB ('%s')",
		       shown(buf));
	}
	/* 40 KB of headers: over the 16 KiB limit. */
	{
		size_t k = (size_t)snprintf(req, sizeof req, "GET /healthz "
		                            "HTTP/1.1\r\nHost: t\r\n");

		for (i = 0; i < 1000; i++)
			k += (size_t)snprintf(req + k, sizeof req - k,
			                      "X-Pad-%zu: %032zu\r\n", i, i);
		k += (size_t)snprintf(req + k, sizeof req - k, "\r\n");
		raw_exchange(g_http_port, req, k, buf, sizeof buf, 10000);
		report(strncmp(buf, "HTTP/1.1 431", 12) == 0, "http: 40 KB of "
		       "headers are refused with 431 ('%s')", shown(buf));
	}
	/* Pipelined requests, never read: disconnected at the output limit. */
	{
		static const char one[] = "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n";
		long long c0 = metric("tally_output_limit_closes_total");
		size_t len = repeat(req, sizeof req, one, 8192), sent = 0;
		int fd = raw_open(g_http_port);
		uint64_t end = now_ms() + 60000;

		gone = 0;
		while (fd >= 0 && !gone && now_ms() < end &&
		       sent < (256u << 20))
			sent += raw_send(fd, req + sent % len, len - sent % len,
			                 100, &gone);
		info("http: a client pipelining GET /metrics without reading "
		     "sent %zu KiB before %s", sent >> 10,
		     gone ? "it was disconnected" : "the test stopped");
		report(gone, "http: a pipelining client that never reads is "
		       "disconnected");
		report(metric("tally_output_limit_closes_total") > c0, "http: "
		       "... at the output limit");
		if (fd >= 0)
			close(fd);
	}
	phase_end();
}

/* ---- main --------------------------------------------------------------------------- */

static void setup_members(void)
{
	redisContext *c = probe_connect();

	/* 1000 members on another object, so RECENT LIMIT 1000 is big. */
	for (int i = 1; c != NULL && i <= 1000; i++)
		redisAppendCommand(c, "TALLY.ADD article like 778 %d", i);
	for (int i = 1; c != NULL && i <= 1000; i++) {
		redisReply *r = NULL;

		if (redisGetReply(c, (void **)&r) != REDIS_OK)
			break;
		freeReplyObject(r);
	}
	redisFree(c);
}

int main(int argc, char **argv)
{
	pthread_t good, rss;
	long hwm;

	if (argc != 7) {
		fprintf(stderr, "usage: hostile_client RESP_PORT HTTP_PORT "
		        "TALLYD_PID MAXCLIENTS RSS_BOUND_KIB LATENCY_BOUND_MS\n");
		return 2;
	}
	g_resp_port = atoi(argv[1]);
	g_http_port = atoi(argv[2]);
	g_pid = atoi(argv[3]);
	g_maxclients = atoi(argv[4]);
	g_rss_bound_kib = atol(argv[5]);
	g_latency_bound_ms = atol(argv[6]);
	if (g_maxclients < 30 || g_maxclients > 2000) {
		fprintf(stderr, "hostile_client: MAXCLIENTS 30..2000\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	setup_members();
	g_baseline = proc_kib("VmRSS");
	info("baseline: tallyd RSS %ld KiB, bound %ld KiB over it; good "
	     "client's latency bound %ld ms", g_baseline, g_rss_bound_kib,
	     g_latency_bound_ms);
	if (pthread_create(&rss, NULL, rss_main, NULL) != 0 ||
	    pthread_create(&good, NULL, good_main, NULL) != 0) {
		fprintf(stderr, "hostile_client: cannot start threads\n");
		return 2;
	}
	sleep_ms(500);
	phase_maxclients();
	phase_slow();
	phase_noread();
	phase_sizes();
	phase_args();
	phase_garbage();
	phase_http();
	sleep_ms(500);
	atomic_store(&g_good_run, 0);
	pthread_join(good, NULL);
	atomic_store(&g_sampling, 0);
	pthread_join(rss, NULL);

	info("good client: %lld rounds, %lld replies, slowest %lld ms, %lld "
	     "over %ld ms; fresh RESP connections %lld ok, HTTP requests %lld "
	     "ok", (long long)g_good.rounds, (long long)g_good.replies,
	     (long long)g_good.max_ms, (long long)g_good.late,
	     g_latency_bound_ms, (long long)g_good.fresh_ok,
	     (long long)g_good.http_ok);
	report(g_good.wrong == 0, "good client: every reply was right%s%s",
	       g_good.wrong ? ": " : "", g_good.wrong ? g_good_err : "");
	report(g_good.late == 0, "good client: every reply within %ld ms "
	       "(slowest %lld ms)", g_latency_bound_ms,
	       (long long)g_good.max_ms);
	report(g_good.fresh_bad == 0 && g_good.fresh_ok > 0, "good client: "
	       "every fresh RESP connection was served (%lld, %lld not)",
	       (long long)g_good.fresh_ok, (long long)g_good.fresh_bad);
	report(g_good.http_bad == 0 && g_good.http_ok > 0, "good client: "
	       "every fresh HTTP request was served (%lld, %lld not)",
	       (long long)g_good.http_ok, (long long)g_good.http_bad);
	hwm = proc_kib("VmHWM");
	info("tallyd RSS: baseline %ld KiB, peak (VmHWM) %ld KiB (+%ld KiB), "
	     "now %ld KiB", g_baseline, hwm, hwm - g_baseline,
	     proc_kib("VmRSS"));
	for (size_t i = 0; i < g_nphases; i++)
		info("  %-10s RSS start %7ld  peak %7ld  end %7ld KiB; good "
		     "client %6lld rounds, slowest %5lld ms", g_phases[i].name,
		     g_phases[i].rss_start, g_phases[i].rss_peak,
		     g_phases[i].rss_end, g_phases[i].rounds,
		     g_phases[i].max_ms);
	report(hwm > 0 && hwm - g_baseline < g_rss_bound_kib, "tallyd's peak "
	       "RSS stayed under baseline + %ld KiB (+%ld KiB)",
	       g_rss_bound_kib, hwm - g_baseline);
	return g_failed ? 1 : 0;
}
