/* resp_rate.c: an open-loop RESP load generator. It sends one command at a
 * fixed total rate over N connections and times each reply from the moment
 * its command was due, not from when it was sent, so a server that stalls is
 * charged for every command that waited behind the stall (a closed-loop
 * client such as redis-benchmark charges only the few it had in flight).
 * make bench uses it for the read latencies "at half load".
 *
 *   resp_rate [-h HOST] [-p PORT] [-c CONNS] -R RATE [-s SECONDS]
 *             [-w WARMUP_S] [-r KEYSPACE] CMD ARG...
 *
 * Every `__rand_int__` in an argument becomes a random number of 12 digits
 * below KEYSPACE, drawn anew for each occurrence, as redis-benchmark does.
 * Prints one JSON line: the rates asked and sent, replies, latency
 * percentiles in ms of the replies to commands due after the warm-up, and
 * how late this client sent those commands (send_lag_*: a client short of
 * CPU adds its own lateness to the latencies, and says how much).
 * Exit status: 0 when every command was answered without an error reply;
 * 1 on an error reply, a lost connection, a server that falls
 * IN_FLIGHT_MAX commands behind on a connection, or replies still missing
 * DRAIN_S after the last command; 2 on bad arguments. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

/* ---- limits ----------------------------------------------------------- */

#define CONNS_MAX 1000
#define RATE_MAX 10000000.0
#define SECONDS_MAX 3600.0
#define ARGS_MAX 256
#define CMD_BYTES_MAX 65536     /* one command, encoded */
/* Commands sent and not yet answered, per connection: a server this far
 * behind is not at the asked load, and the run says so instead of
 * queueing without end. */
#define IN_FLIGHT_MAX 4096
#define OUT_CAP (1u << 20)      /* unsent bytes per connection */
#define IN_CAP (1u << 20)       /* one reply must fit */
#define DEPTH_MAX 8             /* nested arrays in a reply */
#define DRAIN_S 10              /* wait for the last replies */
/* Latencies to 1 us up to HIST_FINE_US, then to 1 ms up to HIST_COARSE_MS;
 * beyond, the last bucket (and max_ms holds the exact worst). */
#define HIST_FINE_US 100000u
#define HIST_COARSE_MS 600000u
#define RAND_DIGITS 12
#define RAND_TOKEN "__rand_int__"

struct conn {
	int fd;
	char *out;              /* encoded commands not yet written */
	size_t out_len;
	char *in;               /* reply bytes not yet parsed */
	size_t in_len;
	uint64_t due_ns[IN_FLIGHT_MAX]; /* ring: due time of each sent command */
	unsigned head, count;
	int want_out;           /* EPOLLOUT registered */
};

struct hist {
	uint64_t fine[HIST_FINE_US];
	uint64_t coarse[HIST_COARSE_MS + 1];
	uint64_t n;
	double sum_ms, max_ms;
};

struct opts {
	const char *host, *port;
	unsigned conns;
	double rate, seconds, warmup;
	uint64_t keyspace;
	int argc;
	char **argv;
};

struct run {
	struct opts o;
	struct conn *conns;
	struct hist *hist;      /* reply latencies, from each command's due */
	struct hist *lag;       /* this client's own lateness in sending */
	int ep, tfd;
	uint64_t start_ns, end_ns, warm_ns;
	uint64_t sent, answered, errors;
	uint64_t rng;
	size_t cmd_len;         /* of every command encoded */
	char first_error[256];
};

/* When command i falls due: the one formula for the sends and the timer. */
static uint64_t due_of(const struct run *r, uint64_t i)
{
	return r->start_ns + (uint64_t)((double)i * 1e9 / r->o.rate);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(struct run *r)
{
	r->rng ^= r->rng << 13;
	r->rng ^= r->rng >> 7;
	r->rng ^= r->rng << 17;
	return r->rng;
}

static void hist_add(struct hist *h, uint64_t ns)
{
	uint64_t us = ns / 1000u;

	if (us < HIST_FINE_US)
		h->fine[us]++;
	else
		h->coarse[us / 1000u < HIST_COARSE_MS ? us / 1000u : HIST_COARSE_MS]++;
	h->n++;
	h->sum_ms += (double)ns / 1e6;
	if ((double)ns / 1e6 > h->max_ms)
		h->max_ms = (double)ns / 1e6;
}

/* The latency (ms) below which a share q of the samples lie: the upper
 * edge of the bucket holding the rank. */
static double hist_pct(const struct hist *h, double q)
{
	uint64_t rank = (uint64_t)(q * (double)h->n), seen = 0;

	if (h->n == 0)
		return 0;
	if (rank >= h->n)
		rank = h->n - 1;
	for (uint64_t i = 0; i < HIST_FINE_US; i++) {
		seen += h->fine[i];
		if (seen > rank)
			return (double)(i + 1) / 1000.0 < h->max_ms ? (double)(i + 1) / 1000.0
								 : h->max_ms;
	}
	for (uint64_t i = 0; i <= HIST_COARSE_MS; i++) {
		seen += h->coarse[i];
		if (seen > rank)
			return i == HIST_COARSE_MS || (double)(i + 1) > h->max_ms ? h->max_ms
										 : (double)(i + 1);
	}
	return h->max_ms;
}

/* ---- RESP ------------------------------------------------------------- */

/* Bytes of the one complete reply at p, 0 if more must be read, -1 if it
 * is not RESP. *err is set when the reply is an error. */
static long reply_len(const char *p, size_t n, int depth, int *err)
{
	const char *nl = memchr(p, '\n', n);
	long hdr, len;
	char *end;

	if (depth > DEPTH_MAX)
		return -1;
	if (nl == NULL)
		return n > 64 && p[0] != '+' && p[0] != '-' ? -1 : 0;
	if (nl == p || nl[-1] != '\r')
		return -1;
	hdr = (long)(nl - p) + 1;
	switch (p[0]) {
	case '-':
		if (depth == 0)
			*err = 1;
		return hdr;
	case '+':
		return hdr;
	case ':':
		return hdr;
	case '$':
		errno = 0;
		len = strtol(p + 1, &end, 10);
		if (errno != 0 || end != nl - 1 || len < -1 || len > (long)IN_CAP)
			return -1;
		if (len < 0)
			return hdr;
		if ((size_t)hdr + (size_t)len + 2 > n)
			return 0;
		return hdr + len + 2;
	case '*': {
		long count, at = hdr;

		errno = 0;
		count = strtol(p + 1, &end, 10);
		if (errno != 0 || end != nl - 1 || count < -1 || count > (long)IN_CAP)
			return -1;
		for (long i = 0; i < count; i++) {
			long one = reply_len(p + at, n - (size_t)at, depth + 1, err);

			if (one <= 0)
				return one;
			at += one;
		}
		return at;
	}
	default:
		return -1;
	}
}

/* The bytes of the command encoded: the same for every draw, as a number
 * drawn for __rand_int__ takes as many characters as the token. */
static size_t cmd_len(const struct opts *o)
{
	size_t n = (size_t)snprintf(NULL, 0, "*%d\r\n", o->argc);

	for (int i = 0; i < o->argc; i++) {
		size_t a = strlen(o->argv[i]);

		n += (size_t)snprintf(NULL, 0, "$%zu\r\n", a) + a + 2;
	}
	return n;
}

/* Appends the command to c's output, each __rand_int__ drawn anew: 0, or
 * -1 when the output has no room for it. */
static int encode(struct run *r, struct conn *c)
{
	char *start = c->out + c->out_len, *p = start;

	if (c->out_len + r->cmd_len > OUT_CAP)
		return -1;
	p += sprintf(p, "*%d\r\n", r->o.argc);
	for (int i = 0; i < r->o.argc; i++) {
		const char *a = r->o.argv[i], *t;

		p += sprintf(p, "$%zu\r\n", strlen(a));
		while ((t = strstr(a, RAND_TOKEN)) != NULL) {
			memcpy(p, a, (size_t)(t - a));
			p += t - a;
			/* Its NUL lands where the argument's CR goes next. */
			p += sprintf(p, "%0*" PRIu64, RAND_DIGITS, rnd(r) % r->o.keyspace);
			a = t + strlen(RAND_TOKEN);
		}
		memcpy(p, a, strlen(a));
		p += strlen(a);
		memcpy(p, "\r\n", 2);
		p += 2;
	}
	assert((size_t)(p - start) == r->cmd_len);
	c->out_len += r->cmd_len;
	return 0;
}

/* ---- I/O -------------------------------------------------------------- */

static int watch(struct run *r, struct conn *c, int out)
{
	struct epoll_event ev = { .events = EPOLLIN | (out ? EPOLLOUT : 0u) };

	ev.data.ptr = c;
	if (epoll_ctl(r->ep, EPOLL_CTL_MOD, c->fd, &ev) != 0)
		return -1;
	c->want_out = out;
	return 0;
}

static int flush_out(struct run *r, struct conn *c)
{
	while (c->out_len > 0) {
		ssize_t n = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return c->want_out ? 0 : watch(r, c, 1);
		if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
			fprintf(stderr, "resp_rate: the server closed a connection: %s\n",
				strerror(errno));
			return -1;
		}
		if (n <= 0) {
			fprintf(stderr, "resp_rate: send: %s\n", n < 0 ? strerror(errno)
								  : "nothing written");
			return -1;
		}
		memmove(c->out, c->out + n, c->out_len - (size_t)n);
		c->out_len -= (size_t)n;
	}
	return c->want_out ? watch(r, c, 0) : 0;
}

static int read_in(struct run *r, struct conn *c)
{
	for (;;) {
		ssize_t n = read(c->fd, c->in + c->in_len, IN_CAP - c->in_len);
		size_t at = 0;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return 0;
		if (n <= 0) {
			fprintf(stderr, "resp_rate: the server closed a connection%s%s\n",
				n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
			return -1;
		}
		c->in_len += (size_t)n;
		for (;;) {
			int err = 0;
			long len = reply_len(c->in + at, c->in_len - at, 0, &err);
			uint64_t t = now_ns(), due;

			if (len < 0) {
				fprintf(stderr, "resp_rate: a reply that is not RESP\n");
				return -1;
			}
			if (len == 0)
				break;
			if (c->count == 0) {
				fprintf(stderr, "resp_rate: a reply to no command\n");
				return -1;
			}
			due = c->due_ns[c->head];
			c->head = (c->head + 1) % IN_FLIGHT_MAX;
			c->count--;
			r->answered++;
			if (err) {
				if (r->errors++ == 0) {
					int l = (int)(len - 3 < 200 ? len - 3 : 200);

					snprintf(r->first_error, sizeof r->first_error, "%.*s",
						 l, c->in + at + 1);
				}
			} else if (due >= r->warm_ns) {
				hist_add(r->hist, t > due ? t - due : 0);
			}
			at += (size_t)len;
		}
		memmove(c->in, c->in + at, c->in_len - at);
		c->in_len -= at;
		if (c->in_len == IN_CAP) {
			fprintf(stderr, "resp_rate: a reply larger than %u bytes\n", IN_CAP);
			return -1;
		}
	}
}

/* Sends every command due by now, round robin over the connections; a
 * late loop sends the backlog at once, each still timed from its due. */
static int send_due(struct run *r, uint64_t now)
{
	for (;;) {
		uint64_t due = due_of(r, r->sent);
		struct conn *c = &r->conns[r->sent % r->o.conns];

		if (due > now || due >= r->end_ns)
			return 0;
		if (c->count == IN_FLIGHT_MAX) {
			fprintf(stderr, "resp_rate: %d commands unanswered on a connection: "
				"the server does not keep up with %.0f/s\n",
				IN_FLIGHT_MAX, r->o.rate);
			return -1;
		}
		if (encode(r, c) != 0) {
			fprintf(stderr, "resp_rate: the server reads no more (%zu bytes "
				"unsent on a connection)\n", c->out_len);
			return -1;
		}
		c->due_ns[(c->head + c->count) % IN_FLIGHT_MAX] = due;
		c->count++;
		r->sent++;
		if (due >= r->warm_ns)
			hist_add(r->lag, now - due);
		if (flush_out(r, c) != 0)
			return -1;
	}
}

static int arm(struct run *r, uint64_t at_ns)
{
	struct itimerspec it = { 0 };

	it.it_value.tv_sec = (time_t)(at_ns / 1000000000u);
	it.it_value.tv_nsec = (long)(at_ns % 1000000000u);
	return timerfd_settime(r->tfd, TFD_TIMER_ABSTIME, &it, NULL);
}

static uint64_t in_flight(const struct run *r)
{
	return r->sent - r->answered;
}

static int loop(struct run *r)
{
	uint64_t drain_until = r->end_ns + (uint64_t)DRAIN_S * 1000000000u;

	for (;;) {
		struct epoll_event evs[64];
		uint64_t now = now_ns(), next;
		int n;

		if (send_due(r, now) != 0)
			return -1;
		next = due_of(r, r->sent);
		if (next >= r->end_ns) {
			if (in_flight(r) == 0)
				return 0;
			if (now >= drain_until) {
				fprintf(stderr, "resp_rate: %" PRIu64 " replies missing %d s after "
					"the last command\n", in_flight(r), DRAIN_S);
				return -1;
			}
			next = drain_until;
		}
		if (arm(r, next) != 0)
			return -1;
		n = epoll_wait(r->ep, evs, 64, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;
			uint64_t ticks;

			if (c == NULL) {
				if (read(r->tfd, &ticks, sizeof ticks) < 0 && errno != EAGAIN)
					return -1;
				continue;
			}
			if ((evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && read_in(r, c) != 0)
				return -1;
			if ((evs[i].events & EPOLLOUT) && flush_out(r, c) != 0)
				return -1;
		}
	}
}

static int dial(const struct opts *o)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res, *ai;
	int fd = -1, rc, one = 1, err = 0;

	rc = getaddrinfo(o->host, o->port, &hints, &res);
	if (rc != 0) {
		fprintf(stderr, "resp_rate: %s:%s: %s\n", o->host, o->port, gai_strerror(rc));
		return -1;
	}
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
		if (fd < 0) {
			err = errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		err = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0) {
		fprintf(stderr, "resp_rate: cannot connect to %s:%s: %s\n", o->host,
			o->port, strerror(err));
		return -1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* ---- setup ------------------------------------------------------------ */

static void usage(void)
{
	fprintf(stderr,
		"usage: resp_rate [-h HOST] [-p PORT] [-c CONNS] -R RATE [-s SECONDS]\n"
		"                 [-w WARMUP_S] [-r KEYSPACE] CMD ARG...\n"
		"  -c 1..%d connections (default 50), -R commands/s in all (1..%.0f),\n"
		"  -s 0.1..%.0f seconds (default 4), -w seconds of replies not timed\n"
		"  (default 0, less than -s), -r __rand_int__ below this (default 100000)\n",
		CONNS_MAX, RATE_MAX, SECONDS_MAX);
}

/* The flags that take a number: its range, and whether it must be whole. */
struct num_flag {
	const char *name;
	double lo, hi;
	int whole;
};

static const struct num_flag num_flags[] = {
	{ "-c", 1, CONNS_MAX, 1 },
	{ "-R", 1, RATE_MAX, 0 },
	{ "-s", 0.1, SECONDS_MAX, 0 },
	{ "-w", 0, SECONDS_MAX, 0 },
	{ "-r", 1, 1e12, 1 },
};
#define NUM_FLAGS (sizeof num_flags / sizeof num_flags[0])

/* The number s for flag nf into *out: 0, or -1 after a message. */
static int num_arg(const struct num_flag *nf, const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || !(v >= nf->lo && v <= nf->hi) ||
	    (nf->whole && v != (double)(uint64_t)v)) {
		fprintf(stderr, "resp_rate: %s %s: want a%s number from %g to %g\n", nf->name,
			s, nf->whole ? " whole" : "", nf->lo, nf->hi);
		return -1;
	}
	*out = v;
	return 0;
}

/* One flag and its value into o: 0, or -1 after a message. */
static int flag_arg(const char *f, const char *val, struct opts *o)
{
	double v;
	size_t k;

	if (strcmp(f, "-h") == 0) {
		o->host = val;
		return 0;
	}
	if (strcmp(f, "-p") == 0) {
		o->port = val;
		return 0;
	}
	for (k = 0; k < NUM_FLAGS && strcmp(f, num_flags[k].name) != 0; k++)
		;
	if (k == NUM_FLAGS) {
		fprintf(stderr, "resp_rate: unknown flag %s\n", f);
		return -1;
	}
	if (num_arg(&num_flags[k], val, &v) != 0)
		return -1;
	switch (f[1]) {
	case 'c': o->conns = (unsigned)v; break;
	case 'R': o->rate = v; break;
	case 's': o->seconds = v; break;
	case 'w': o->warmup = v; break;
	default: o->keyspace = (uint64_t)v; break;
	}
	return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	int i;

	*o = (struct opts){ .host = "127.0.0.1", .port = "6379", .conns = 50,
			    .seconds = 4, .keyspace = 100000 };
	for (i = 1; i < argc && argv[i][0] == '-'; i += 2) {
		if (i + 1 >= argc) {
			fprintf(stderr, "resp_rate: %s needs a value\n", argv[i]);
			return -1;
		}
		if (flag_arg(argv[i], argv[i + 1], o) != 0)
			return -1;
	}
	if (o->rate == 0) {
		fprintf(stderr, "resp_rate: -R RATE is required\n");
		return -1;
	}
	if (o->warmup >= o->seconds) {
		fprintf(stderr, "resp_rate: -w %g must be less than -s %g\n", o->warmup, o->seconds);
		return -1;
	}
	if (i >= argc || argc - i > ARGS_MAX) {
		fprintf(stderr, "resp_rate: want a command of 1 to %d words\n", ARGS_MAX);
		return -1;
	}
	o->argc = argc - i;
	o->argv = argv + i;
	return 0;
}

static int setup(struct run *r)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };

	/* Written through now, so that no page fault of the client's own
	 * falls into the timed run. */
	r->conns = malloc(r->o.conns * sizeof *r->conns);
	r->hist = malloc(sizeof *r->hist);
	r->lag = malloc(sizeof *r->lag);
	if (r->conns != NULL)
		memset(r->conns, 0, r->o.conns * sizeof *r->conns);
	if (r->hist != NULL)
		memset(r->hist, 0, sizeof *r->hist);
	if (r->lag != NULL)
		memset(r->lag, 0, sizeof *r->lag);
	r->ep = epoll_create1(0);
	r->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
	if (r->conns == NULL || r->hist == NULL || r->lag == NULL || r->ep < 0 || r->tfd < 0 ||
	    epoll_ctl(r->ep, EPOLL_CTL_ADD, r->tfd, &ev) != 0) {
		fprintf(stderr, "resp_rate: setup: %s\n", strerror(errno));
		return -1;
	}
	for (unsigned i = 0; i < r->o.conns; i++) {
		struct conn *c = &r->conns[i];

		c->fd = dial(&r->o);
		if (c->fd < 0)
			return -1;
		c->out = malloc(OUT_CAP);
		c->in = malloc(IN_CAP);
		if (c->out != NULL && c->in != NULL) {
			memset(c->out, 0, OUT_CAP);
			memset(c->in, 0, IN_CAP);
		}
		ev = (struct epoll_event){ .events = EPOLLIN, .data.ptr = c };
		if (c->out == NULL || c->in == NULL ||
		    epoll_ctl(r->ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
			fprintf(stderr, "resp_rate: setup: %s\n", strerror(errno));
			return -1;
		}
	}
	return 0;
}

static void teardown(struct run *r)
{
	for (unsigned i = 0; r->conns != NULL && i < r->o.conns; i++) {
		if (r->conns[i].fd > 0)
			close(r->conns[i].fd);
		free(r->conns[i].out);
		free(r->conns[i].in);
	}
	free(r->conns);
	free(r->hist);
	free(r->lag);
	if (r->ep >= 0)
		close(r->ep);
	if (r->tfd >= 0)
		close(r->tfd);
}

static void report(const struct run *r)
{
	const struct hist *h = r->hist;
	double secs = (double)(r->end_ns - r->start_ns) / 1e9;

	printf("{\"name\":\"resp-rate\",\"connections\":%u,\"seconds\":%g,\"warmup\":%g,"
	       "\"target_rate\":%.0f,\"rate\":%.1f,\"sent\":%" PRIu64 ",\"answered\":%" PRIu64
	       ",\"errors\":%" PRIu64 ",\"timed\":%" PRIu64 ",\"send_lag_p50_ms\":%.3f,"
	       "\"send_lag_p99_ms\":%.3f,\"send_lag_max_ms\":%.3f,"
	       "\"mean_ms\":%.3f,\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,"
	       "\"p999_ms\":%.3f,\"max_ms\":%.3f}\n",
	       r->o.conns, r->o.seconds, r->o.warmup, r->o.rate, (double)r->sent / secs,
	       r->sent, r->answered, r->errors, h->n, hist_pct(r->lag, 0.5),
	       hist_pct(r->lag, 0.99), r->lag->max_ms,
	       h->n ? h->sum_ms / (double)h->n : 0.0, hist_pct(h, 0.5), hist_pct(h, 0.9),
	       hist_pct(h, 0.99), hist_pct(h, 0.999), h->max_ms);
}

int main(int argc, char **argv)
{
	static struct run r = { .ep = -1, .tfd = -1 };
	int rc;

	if (parse_args(argc, argv, &r.o) != 0) {
		usage();
		return 2;
	}
	r.rng = (uint64_t)now_ns() | 1u;
	r.cmd_len = cmd_len(&r.o);
	if (r.cmd_len > CMD_BYTES_MAX) {
		fprintf(stderr, "resp_rate: command longer than %d bytes\n", CMD_BYTES_MAX);
		return 1;
	}
	if (setup(&r) != 0) {
		teardown(&r);
		return 1;
	}
	r.start_ns = now_ns();
	r.end_ns = r.start_ns + (uint64_t)(r.o.seconds * 1e9);
	r.warm_ns = r.start_ns + (uint64_t)(r.o.warmup * 1e9);
	rc = loop(&r);
	if (rc == 0 && r.errors > 0)
		fprintf(stderr, "resp_rate: %" PRIu64 " error replies, the first: %s\n",
			r.errors, r.first_error);
	if (rc == 0)
		report(&r);
	teardown(&r);
	return rc == 0 && r.errors == 0 ? 0 : 1;
}
