/* cluster.c: the Redis Cluster client of cluster.h. Owns its sockets
 * (non-blocking, poll) and uses hiredis only to parse replies, so one exec
 * writes every node's pipeline before reading any and waits on all at once.
 *
 * Design note.
 *  1. Outside exec_run()'s I/O phase every node's reply queue is empty, so
 *     refresh and connect may talk to a node synchronously.
 *  2. A job is PENDING (not sent, or refused before running: safe to send),
 *     SENT (in a node's queue), or FINAL (CL_DONE, or CL_UNKNOWN when a sent
 *     command lost its connection or timed out). Only PENDING jobs are ever
 *     written; nothing moves a job from SENT back to PENDING except a reply
 *     that proves it did not run (MOVED, ASK, TRYAGAIN, ...) or a failure
 *     before any of its bytes left (bytes_written <= its first byte).
 *  3. A connection whose reply did not come in time is closed, never
 *     reused: a late reply would be taken as the answer to the next
 *     command.
 *  4. A refresh may free nodes (those no longer masters); it runs only
 *     between rounds, and the ASK targets of jobs are dropped after it. */
#include "store/cluster.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/slot.h"

#define CL_CONNECT_TIMEOUT_MS 1000
#define CL_COMMAND_TIMEOUT_MS 2000
#define CL_BACKOFF_MS_MAX 1000
#define CL_BACKOFF_MS_MIN 10
/* Redirects of one job in one exec before the loop backs off: a slot
 * bouncing between two nodes mid-migration must not spin the CPU. */
#define CL_REDIRECTS_FAST 8
#define CL_READ_CHUNK 16384

enum { IF_CMD = 1, IF_ASKING, IF_SCRIPT };
enum { J_PENDING = 0, J_SENT, J_FINAL };

struct inflight {
	int kind;
	size_t job;          /* IF_CMD: index in the jobs array */
	uint64_t start;      /* node->bytes_queued before this entry */
};

struct node {
	char host[CLUSTER_ADDR_MAX];
	int port;
	char addr[CLUSTER_ADDR_MAX]; /* "host:port" */
	int fd;                      /* -1: not connected */
	redisReader *reader;
	char *out;
	size_t out_len, out_off, out_cap;
	uint64_t bytes_queued, bytes_written;
	struct inflight *q;
	size_t q_head, q_len, q_cap;
	int need_scripts;
	int64_t retry_at_ms;         /* no connect attempt before this */
	int backoff_ms;
	int master;                  /* owns slots in the current map */
};

struct script {
	char *src;
	size_t len;
	char sha[41];
};

struct cluster {
	cluster_options opt;
	char *password;
	char seeds[CLUSTER_SEEDS_MAX][CLUSTER_ADDR_MAX];
	size_t n_seeds;
	struct node *nodes[CLUSTER_NODES_MAX];
	size_t n_nodes;
	struct node *slots[SLOT_COUNT];
	int topo_dirty;
	struct script scripts[CLUSTER_SCRIPTS_MAX];
	size_t n_scripts;
	cluster_stats st;
};

struct job {
	cluster_cmd *cmd;
	const char *forced;  /* route to this master addr; NULL: by slot */
	struct node *ask;    /* ASK target for the next send, or NULL */
	int state;
	int redirects;
};

/* What one round learnt, to decide whether to back off. */
struct round {
	int wait;            /* something asked to retry later */
	int redirected;      /* something moved: re-send at once */
};

/* ---- time -------------------------------------------------------------- */

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms)
{
	struct timespec ts;
	if (ms <= 0)
		return;
	ts.tv_sec = (time_t)(ms / 1000);
	ts.tv_nsec = (long)(ms % 1000) * 1000000L;
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static int clamp_int(int64_t v)
{
	if (v < 0)
		return 0;
	return v > INT_MAX ? INT_MAX : (int)v;
}

/* ---- nodes ------------------------------------------------------------- */

static void node_close(cluster *c, struct node *n, int failed)
{
	if (n->fd >= 0) {
		close(n->fd);
		n->fd = -1;
		c->st.closes++;
		if (failed)
			c->st.conn_errors++;
	}
	if (n->reader) {
		redisReaderFree(n->reader);
		n->reader = NULL;
	}
	n->out_len = n->out_off = 0;
	n->q_head = n->q_len = 0;
	/* The unsent output is gone with the queue: were bytes_queued left
	 * ahead of bytes_written by it, every command queued later would
	 * start past what was written, and a failure would take commands
	 * fully sent (and perhaps run) as never sent, and send them again
	 * (design note 2). */
	n->bytes_queued = n->bytes_written = 0;
	if (failed) {
		int b = n->backoff_ms * 2;
		if (b < CL_BACKOFF_MS_MIN)
			b = CL_BACKOFF_MS_MIN;
		if (b > c->opt.refresh_backoff_ms_max)
			b = c->opt.refresh_backoff_ms_max;
		n->backoff_ms = b;
		n->retry_at_ms = now_ms() + b;
		c->topo_dirty = 1;
	}
}

static void node_free(cluster *c, struct node *n)
{
	if (!n)
		return;
	node_close(c, n, 0);
	free(n->out);
	free(n->q);
	free(n);
}

static struct node *node_find(cluster *c, const char *addr)
{
	for (size_t i = 0; i < c->n_nodes; i++)
		if (strcmp(c->nodes[i]->addr, addr) == 0)
			return c->nodes[i];
	return NULL;
}

/* Splits "host:port" (the last ':' separates, so IPv6 works unbracketed).
 * Returns 0, or -1 when malformed. */
static int addr_split(const char *addr, size_t len, char host[CLUSTER_ADDR_MAX],
                      int *port)
{
	size_t colon = len;
	long p = 0;

	for (size_t i = 0; i < len; i++)
		if (addr[i] == ':')
			colon = i;
	if (colon == len || colon == 0 || colon >= CLUSTER_ADDR_MAX - 8 ||
	    len - colon - 1 < 1 || len - colon - 1 > 5)
		return -1;
	for (size_t i = colon + 1; i < len; i++) {
		if (addr[i] < '0' || addr[i] > '9')
			return -1;
		p = p * 10 + (addr[i] - '0');
	}
	if (p < 1 || p > 65535)
		return -1;
	memcpy(host, addr, colon);
	host[colon] = '\0';
	*port = (int)p;
	return 0;
}

static int node_get(cluster *c, const char *host, int port, struct node **out)
{
	char addr[CLUSTER_ADDR_MAX];
	struct node *n;
	int w = snprintf(addr, sizeof(addr), "%s:%d", host, port);

	if (w < 0 || (size_t)w >= sizeof(addr))
		return TALLY_EINVAL;
	n = node_find(c, addr);
	if (n) {
		*out = n;
		return TALLY_OK;
	}
	if (c->n_nodes == CLUSTER_NODES_MAX)
		return TALLY_ELIMIT;
	n = calloc(1, sizeof(*n));
	if (!n)
		return TALLY_ENOMEM;
	snprintf(n->host, sizeof(n->host), "%s", host);
	memcpy(n->addr, addr, (size_t)w + 1);
	n->port = port;
	n->fd = -1;
	c->nodes[c->n_nodes++] = n;
	*out = n;
	return TALLY_OK;
}

static int node_get_addr(cluster *c, const char *addr, size_t len,
                         struct node **out)
{
	char host[CLUSTER_ADDR_MAX];
	int port;

	if (addr_split(addr, len, host, &port) != 0)
		return TALLY_EINVAL;
	return node_get(c, host, port, out);
}

/* ---- output: RESP encoding into a node's buffer ------------------------ */

static int out_reserve(struct node *n, size_t more)
{
	size_t need, cap;
	char *p;

	if (n->out_off == n->out_len)
		n->out_off = n->out_len = 0;
	need = n->out_len + more;
	if (need <= n->out_cap)
		return TALLY_OK;
	cap = n->out_cap ? n->out_cap : 4096;
	while (cap < need)
		cap *= 2;
	p = realloc(n->out, cap);
	if (!p)
		return TALLY_ENOMEM;
	n->out = p;
	n->out_cap = cap;
	return TALLY_OK;
}

static int out_append_cmd(struct node *n, int argc, const char **argv,
                          const size_t *argvlen)
{
	size_t total = 16;
	int rc;

	for (int i = 0; i < argc; i++)
		total += 32 + (argvlen ? argvlen[i] : strlen(argv[i]));
	rc = out_reserve(n, total);
	if (rc != TALLY_OK)
		return rc;
	n->out_len += (size_t)snprintf(n->out + n->out_len, 16, "*%d\r\n", argc);
	for (int i = 0; i < argc; i++) {
		size_t l = argvlen ? argvlen[i] : strlen(argv[i]);
		n->out_len += (size_t)snprintf(n->out + n->out_len, 32, "$%zu\r\n", l);
		memcpy(n->out + n->out_len, argv[i], l);
		n->out_len += l;
		n->out[n->out_len++] = '\r';
		n->out[n->out_len++] = '\n';
	}
	return TALLY_OK;
}

static int q_push(struct node *n, int kind, size_t job)
{
	if (n->q_head + n->q_len == n->q_cap) {
		if (n->q_head > 0) {
			memmove(n->q, n->q + n->q_head, n->q_len * sizeof(*n->q));
			n->q_head = 0;
		} else {
			size_t cap = n->q_cap ? n->q_cap * 2 : 64;
			struct inflight *p = realloc(n->q, cap * sizeof(*p));
			if (!p)
				return TALLY_ENOMEM;
			n->q = p;
			n->q_cap = cap;
		}
	}
	n->q[n->q_head + n->q_len] = (struct inflight){
		.kind = kind, .job = job, .start = n->bytes_queued};
	n->q_len++;
	return TALLY_OK;
}

/* Queue one command and its expected reply. */
static int node_send(struct node *n, int kind, size_t job, int argc,
                     const char **argv, const size_t *argvlen)
{
	size_t before = n->out_len - n->out_off;
	int rc = q_push(n, kind, job);

	if (rc != TALLY_OK)
		return rc;
	rc = out_append_cmd(n, argc, argv, argvlen);
	if (rc != TALLY_OK) {
		n->q_len--;
		return rc;
	}
	n->bytes_queued += (n->out_len - n->out_off) - before;
	return TALLY_OK;
}

/* ---- socket I/O -------------------------------------------------------- */

/* Writes what the socket takes. Returns 0, or -1 when the connection
 * failed. */
static int node_write(struct node *n)
{
	while (n->out_off < n->out_len) {
		ssize_t w = send(n->fd, n->out + n->out_off, n->out_len - n->out_off,
		                 MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -1;
		}
		n->out_off += (size_t)w;
		n->bytes_written += (uint64_t)w;
	}
	return 0;
}

/* Reads what is there into the reader. Returns 1 data read, 0 nothing
 * yet, -1 the connection failed or closed. */
static int node_read(struct node *n)
{
	char buf[CL_READ_CHUNK];
	int got = 0;

	for (;;) {
		ssize_t r = recv(n->fd, buf, sizeof(buf), 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return got;
			return -1;
		}
		if (r == 0)
			return -1;
		if (redisReaderFeed(n->reader, buf, (size_t)r) != REDIS_OK)
			return -1;
		got = 1;
		if ((size_t)r < sizeof(buf))
			return got;
	}
}

static int connect_addr(const char *host, int port, int timeout_ms)
{
	struct addrinfo hints, *res = NULL, *ai;
	char ps[8];
	int fd = -1;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	snprintf(ps, sizeof(ps), "%d", port);
	if (getaddrinfo(host, ps, &hints, &res) != 0)
		return -1;
	for (ai = res; ai; ai = ai->ai_next) {
		struct pollfd pfd;
		int err = 0, one = 1;
		socklen_t el = sizeof(err);

		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK |
		            SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0)
			continue;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
			if (errno != EINPROGRESS)
				goto next;
			pfd = (struct pollfd){.fd = fd, .events = POLLOUT};
			if (poll(&pfd, 1, timeout_ms) != 1)
				goto next;
			if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 ||
			    err != 0)
				goto next;
		}
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		break;
next:
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return fd;
}

/* A connection idle since the last call may have been closed by the peer
 * (a node killed, restarted): find that out before writing to it, so that
 * what we send is not lost with it and reported unknown for nothing. */
static int node_idle_alive(struct node *n)
{
	struct pollfd pfd = {.fd = n->fd, .events = POLLIN};
	char b;

	if (poll(&pfd, 1, 0) == 0)
		return 1;
	/* Readable while idle: EOF, an error, or bytes nobody asked for.
	 * Any of them ends this connection. */
	(void)recv(n->fd, &b, 1, MSG_PEEK);
	return 0;
}

static int node_sync_call(cluster *c, struct node *n, int argc,
                          const char **argv, const size_t *argvlen,
                          int64_t deadline, redisReply **out);

/* Connected and ready for commands, or an error (backoff applies). */
static int node_ensure(cluster *c, struct node *n, int64_t deadline)
{
	int64_t now = now_ms();
	int tmo;

	if (n->fd >= 0) {
		if (n->q_len > 0 || node_idle_alive(n))
			return TALLY_OK;
		node_close(c, n, 1);
		n->retry_at_ms = 0;  /* the node may be fine: try again at once */
	}
	if (now < n->retry_at_ms || now >= deadline)
		return TALLY_EIO;
	tmo = clamp_int(deadline - now);
	if (tmo > c->opt.connect_timeout_ms)
		tmo = c->opt.connect_timeout_ms;
	n->fd = connect_addr(n->host, n->port, tmo);
	if (n->fd < 0) {
		c->st.conn_errors++;
		node_close(c, n, 1);
		return TALLY_EIO;
	}
	n->reader = redisReaderCreate();
	if (!n->reader) {
		node_close(c, n, 0);
		return TALLY_ENOMEM;
	}
	c->st.connects++;
	n->need_scripts = c->n_scripts > 0;
	if (c->password) {
		const char *argv[2] = {"AUTH", c->password};
		redisReply *r = NULL;
		int rc = node_sync_call(c, n, 2, argv, NULL, deadline, &r);
		int ok = rc == TALLY_OK && r->type == REDIS_REPLY_STATUS;
		freeReplyObject(r);
		if (!ok) {
			node_close(c, n, 1);
			return rc == TALLY_ENOMEM ? rc : TALLY_EIO;
		}
	}
	n->backoff_ms = 0;
	return TALLY_OK;
}

/* One command, one reply, on a node with an empty queue (design note 1).
 * Any failure closes the connection. */
static int node_sync_call(cluster *c, struct node *n, int argc,
                          const char **argv, const size_t *argvlen,
                          int64_t deadline, redisReply **out)
{
	int64_t end = now_ms() + c->opt.command_timeout_ms;
	void *reply = NULL;
	int rc;

	if (end > deadline)
		end = deadline;
	*out = NULL;
	rc = node_send(n, IF_SCRIPT, 0, argc, argv, argvlen);
	if (rc != TALLY_OK)
		return rc;
	for (;;) {
		struct pollfd pfd = {.fd = n->fd, .events = POLLIN};
		int64_t left = end - now_ms();

		if (node_write(n) != 0)
			break;
		if (redisReaderGetReply(n->reader, &reply) != REDIS_OK)
			break;
		if (reply) {
			n->q_len = 0;
			n->q_head = 0;
			*out = reply;
			return TALLY_OK;
		}
		if (left <= 0)
			break;
		if (n->out_off < n->out_len)
			pfd.events |= POLLOUT;
		if (poll(&pfd, 1, clamp_int(left)) < 0 && errno != EINTR)
			break;
		if ((pfd.revents & (POLLIN | POLLHUP | POLLERR)) &&
		    node_read(n) < 0)
			break;
	}
	node_close(c, n, 1);
	return TALLY_EIO;
}

/* ---- topology ---------------------------------------------------------- */

struct range {
	int start, end;
	struct node *n;
};

/* Parses a CLUSTER SLOTS reply into ranges. Returns the number of slots
 * covered, or a negative TALLY code. */
static int slots_parse(cluster *c, const redisReply *r, const struct node *asked,
                       struct range *ranges, size_t *n_ranges)
{
	int covered = 0;

	*n_ranges = 0;
	if (r->type != REDIS_REPLY_ARRAY || r->elements > SLOT_COUNT)
		return TALLY_EIO;
	for (size_t i = 0; i < r->elements; i++) {
		const redisReply *e = r->element[i], *m;
		const char *host;
		struct node *n;
		int rc;

		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
		    e->element[0]->type != REDIS_REPLY_INTEGER ||
		    e->element[1]->type != REDIS_REPLY_INTEGER ||
		    e->element[2]->type != REDIS_REPLY_ARRAY)
			return TALLY_EIO;
		m = e->element[2];
		if (m->elements < 2 || m->element[0]->type != REDIS_REPLY_STRING ||
		    m->element[1]->type != REDIS_REPLY_INTEGER)
			return TALLY_EIO;
		if (e->element[0]->integer < 0 ||
		    e->element[1]->integer >= SLOT_COUNT ||
		    e->element[0]->integer > e->element[1]->integer)
			return TALLY_EIO;
		host = m->element[0]->str;
		/* "" is "the address you reached me at"; "?" is unknown. */
		if (host[0] == '\0')
			host = asked->host;
		if (strcmp(host, "?") == 0 || m->element[1]->integer < 1 ||
		    m->element[1]->integer > 65535)
			continue;
		rc = node_get(c, host, (int)m->element[1]->integer, &n);
		if (rc != TALLY_OK)
			return rc;
		ranges[*n_ranges].start = (int)e->element[0]->integer;
		ranges[*n_ranges].end = (int)e->element[1]->integer;
		ranges[*n_ranges].n = n;
		(*n_ranges)++;
		covered += ranges[*n_ranges - 1].end - ranges[*n_ranges - 1].start + 1;
	}
	return covered;
}

/* Installs ranges as the slot map and frees the nodes no longer masters. */
static void slots_install(cluster *c, const struct range *ranges, size_t nr)
{
	size_t k = 0;

	for (size_t i = 0; i < c->n_nodes; i++)
		c->nodes[i]->master = 0;
	memset(c->slots, 0, sizeof(c->slots));
	for (size_t i = 0; i < nr; i++) {
		ranges[i].n->master = 1;
		for (int s = ranges[i].start; s <= ranges[i].end; s++)
			c->slots[s] = ranges[i].n;
	}
	for (size_t i = 0; i < c->n_nodes; i++) {
		if (c->nodes[i]->master)
			c->nodes[k++] = c->nodes[i];
		else
			node_free(c, c->nodes[i]);
	}
	c->n_nodes = k;
	c->topo_dirty = 0;
	c->st.refreshes++;
}

static int refresh_from(cluster *c, struct node *n, int64_t deadline,
                        struct range *ranges)
{
	const char *argv[2] = {"CLUSTER", "SLOTS"};
	redisReply *r = NULL;
	size_t nr = 0;
	int rc = node_ensure(c, n, deadline);

	if (rc != TALLY_OK)
		return rc;
	rc = node_sync_call(c, n, 2, argv, NULL, deadline, &r);
	if (rc != TALLY_OK)
		return rc;
	rc = slots_parse(c, r, n, ranges, &nr);
	freeReplyObject(r);
	if (rc < 0)
		return rc;
	if (rc == 0)
		return TALLY_EIO;  /* a node that knows no slots: ask another */
	slots_install(c, ranges, nr);
	return TALLY_OK;
}

static int refresh_run(cluster *c, int64_t deadline)
{
	struct range *ranges = malloc(SLOT_COUNT * sizeof(*ranges));
	int rc = TALLY_EIO;

	if (!ranges)
		return TALLY_ENOMEM;
	/* Masters first (most current view), then any node, then seeds. A
	 * refresh may free nodes, so the loop restarts from the array after
	 * each failed try rather than holding pointers into it. */
	for (int pass = 0; pass < 2 && rc != TALLY_OK; pass++) {
		for (size_t i = 0; i < c->n_nodes && rc != TALLY_OK; i++) {
			struct node *n = c->nodes[i];
			if ((pass == 0) != (n->master != 0))
				continue;
			rc = refresh_from(c, n, deadline, ranges);
			if (rc == TALLY_ENOMEM || rc == TALLY_ELIMIT)
				goto out;
		}
	}
	for (size_t i = 0; i < c->n_seeds && rc != TALLY_OK; i++) {
		struct node *n;
		rc = node_get_addr(c, c->seeds[i], strlen(c->seeds[i]), &n);
		if (rc != TALLY_OK)
			goto out;
		rc = refresh_from(c, n, deadline, ranges);
		if (rc == TALLY_ENOMEM || rc == TALLY_ELIMIT)
			goto out;
	}
out:
	free(ranges);
	return rc;
}

int cluster_refresh(cluster *c, int timeout_ms)
{
	if (!c || timeout_ms <= 0)
		return TALLY_EINVAL;
	return refresh_run(c, now_ms() + timeout_ms);
}

/* ---- the exec engine --------------------------------------------------- */

static struct node *job_target(cluster *c, struct job *j)
{
	if (j->forced)
		return node_find(c, j->forced);
	if (j->ask)
		return j->ask;
	return c->slots[j->cmd->slot];
}

static void job_final(cluster *c, struct job *j, int outcome, redisReply *r)
{
	j->state = J_FINAL;
	j->cmd->outcome = outcome;
	j->cmd->reply = r;
	if (outcome == CL_UNKNOWN)
		c->st.unknown++;
}

/* A connection failed or timed out with replies owed (design note 2). */
static void node_fail(cluster *c, struct node *n, struct job *jobs)
{
	for (size_t i = 0; i < n->q_len; i++) {
		struct inflight *f = &n->q[n->q_head + i];
		if (f->kind != IF_CMD)
			continue;
		if (f->start >= n->bytes_written)
			jobs[f->job].state = J_PENDING;
		else
			job_final(c, &jobs[f->job], CL_UNKNOWN, NULL);
	}
	node_close(c, n, 1);
}

static int err_is(const redisReply *r, const char *prefix)
{
	size_t l = strlen(prefix);
	return r->len >= l && memcmp(r->str, prefix, l) == 0;
}

/* "MOVED 3999 127.0.0.1:6381": the node of the address, or NULL. */
static struct node *redirect_node(cluster *c, const redisReply *r)
{
	const char *sp = memchr(r->str, ' ', r->len), *sp2;
	struct node *n = NULL;

	if (!sp)
		return NULL;
	sp2 = memchr(sp + 1, ' ', r->len - (size_t)(sp + 1 - r->str));
	if (!sp2)
		return NULL;
	if (node_get_addr(c, sp2 + 1, r->len - (size_t)(sp2 + 1 - r->str), &n) !=
	    TALLY_OK)
		return NULL;
	return n;
}

static int is_evalsha(const cluster_cmd *cmd)
{
	size_t l = cmd->argvlen ? cmd->argvlen[0] : strlen(cmd->argv[0]);
	return l == 7 && strncasecmp(cmd->argv[0], "EVALSHA", 7) == 0;
}

static void job_reply(cluster *c, struct node *n, struct job *j, redisReply *r,
                      struct round *rd)
{
	struct node *to;

	if (r->type != REDIS_REPLY_ERROR || j->forced) {
		job_final(c, j, CL_DONE, r);
		return;
	}
	if (err_is(r, "MOVED ") && (to = redirect_node(c, r)) != NULL) {
		c->slots[j->cmd->slot] = to;
		c->topo_dirty = 1;
		c->st.moved++;
		j->ask = NULL;
	} else if (err_is(r, "ASK ") && (to = redirect_node(c, r)) != NULL) {
		c->st.ask++;
		j->ask = to;
	} else if (err_is(r, "TRYAGAIN") || err_is(r, "CLUSTERDOWN") ||
	           err_is(r, "LOADING") || err_is(r, "MASTERDOWN")) {
		c->st.retries++;
		if (err_is(r, "CLUSTERDOWN"))
			c->topo_dirty = 1;
		j->state = J_PENDING;
		rd->wait = 1;
		freeReplyObject(r);
		return;
	} else if (err_is(r, "NOSCRIPT") && is_evalsha(j->cmd) &&
	           c->n_scripts > 0) {
		c->st.noscript++;
		n->need_scripts = 1;
	} else {
		job_final(c, j, CL_DONE, r);
		return;
	}
	freeReplyObject(r);
	j->state = J_PENDING;
	if (++j->redirects > CL_REDIRECTS_FAST)
		rd->wait = 1;
	else
		rd->redirected = 1;
}

/* Takes every complete reply off a node's reader. Returns -1 on a protocol
 * error. */
static int node_drain(cluster *c, struct node *n, struct job *jobs,
                      struct round *rd)
{
	while (n->q_len > 0) {
		void *reply = NULL;
		struct inflight f;

		if (redisReaderGetReply(n->reader, &reply) != REDIS_OK)
			return -1;
		if (!reply)
			return 0;
		f = n->q[n->q_head];
		n->q_head++;
		n->q_len--;
		if (f.kind == IF_CMD)
			job_reply(c, n, &jobs[f.job], reply, rd);
		else
			freeReplyObject(reply);
	}
	if (n->q_len == 0)
		n->q_head = 0;
	return 0;
}

/* Writes and reads every node until each queue is empty or the reply
 * timeout passes; late nodes are failed (design note 3). */
static int io_phase(cluster *c, struct job *jobs, int64_t deadline,
                    struct round *rd)
{
	struct pollfd pfds[CLUSTER_NODES_MAX];
	struct node *pn[CLUSTER_NODES_MAX];
	int64_t end = now_ms() + c->opt.command_timeout_ms;

	if (end > deadline)
		end = deadline;
	for (;;) {
		size_t np = 0;
		int64_t left;

		for (size_t i = 0; i < c->n_nodes; i++) {
			struct node *n = c->nodes[i];
			if (n->fd < 0 || n->q_len == 0)
				continue;
			if (node_write(n) != 0) {
				node_fail(c, n, jobs);
				continue;
			}
			pn[np] = n;
			pfds[np].fd = n->fd;
			pfds[np].events = POLLIN;
			if (n->out_off < n->out_len)
				pfds[np].events |= POLLOUT;
			pfds[np].revents = 0;
			np++;
		}
		if (np == 0)
			return TALLY_OK;
		left = end - now_ms();
		if (left <= 0) {
			for (size_t i = 0; i < np; i++)
				node_fail(c, pn[i], jobs);
			rd->wait = 1;
			return TALLY_OK;
		}
		if (poll(pfds, (nfds_t)np, clamp_int(left)) < 0) {
			if (errno == EINTR)
				continue;
			return TALLY_EIO;
		}
		for (size_t i = 0; i < np; i++) {
			if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			if (node_read(pn[i]) < 0 ||
			    node_drain(c, pn[i], jobs, rd) != 0) {
				/* Replies already taken stand; the rest are
				 * unknown. */
				(void)node_drain(c, pn[i], jobs, rd);
				node_fail(c, pn[i], jobs);
				rd->wait = 1;
			}
		}
	}
}

/* Queues every PENDING job on its node. Returns how many were sent, or a
 * negative TALLY code. */
static long send_phase(cluster *c, struct job *jobs, size_t n, int64_t deadline,
                       struct round *rd)
{
	long sent = 0;

	for (size_t i = 0; i < n; i++) {
		struct job *j = &jobs[i];
		struct node *t;
		int rc;

		if (j->state != J_PENDING)
			continue;
		t = job_target(c, j);
		if (!t) {
			if (j->forced) {
				job_final(c, j, CL_NOT_RUN, NULL);
				continue;
			}
			c->topo_dirty = 1;
			rd->wait = 1;
			continue;
		}
		rc = node_ensure(c, t, deadline);
		if (rc == TALLY_ENOMEM)
			return rc;
		if (rc != TALLY_OK) {
			rd->wait = 1;
			continue;
		}
		if (t->need_scripts) {
			for (size_t s = 0; s < c->n_scripts; s++) {
				const char *argv[3] = {"SCRIPT", "LOAD",
				                       c->scripts[s].src};
				size_t lens[3] = {6, 4, c->scripts[s].len};
				rc = node_send(t, IF_SCRIPT, 0, 3, argv, lens);
				if (rc != TALLY_OK)
					return rc;
			}
			t->need_scripts = 0;
		}
		if (j->ask) {
			const char *argv[1] = {"ASKING"};
			rc = node_send(t, IF_ASKING, 0, 1, argv, NULL);
			if (rc != TALLY_OK)
				return rc;
			j->ask = NULL;
		}
		rc = node_send(t, IF_CMD, i, j->cmd->argc, j->cmd->argv,
		               j->cmd->argvlen);
		if (rc != TALLY_OK)
			return rc;
		j->state = J_SENT;
		sent++;
	}
	return sent;
}

static int exec_run(cluster *c, struct job *jobs, size_t n, int64_t deadline)
{
	int backoff = CL_BACKOFF_MS_MIN;

	for (;;) {
		struct round rd = {0, 0};
		size_t pending = 0;
		long sent;
		int rc;

		for (size_t i = 0; i < n; i++)
			pending += jobs[i].state == J_PENDING;
		if (pending == 0)
			return TALLY_OK;
		if (now_ms() >= deadline)
			return TALLY_EIO;
		if (c->topo_dirty) {
			rc = refresh_run(c, deadline);
			if (rc == TALLY_ENOMEM)
				return rc;
			/* ASK targets may be freed nodes now (design note 4);
			 * the owner will say ASK again if it still applies. */
			for (size_t i = 0; i < n; i++)
				jobs[i].ask = NULL;
		}
		sent = send_phase(c, jobs, n, deadline, &rd);
		if (sent < 0)
			return (int)sent;
		if (sent > 0) {
			rc = io_phase(c, jobs, deadline, &rd);
			if (rc != TALLY_OK)
				return rc;
		}
		if (rd.wait && !rd.redirected) {
			int64_t left = deadline - now_ms();
			sleep_ms(left < backoff ? left : backoff);
			backoff *= 2;
			if (backoff > c->opt.refresh_backoff_ms_max)
				backoff = c->opt.refresh_backoff_ms_max;
		}
	}
}

/* Nothing may stay queued after a call: a late reply would be taken for
 * the next call's (design note 1). */
static void exec_cleanup(cluster *c, struct job *jobs)
{
	for (size_t i = 0; i < c->n_nodes; i++)
		if (c->nodes[i]->q_len > 0)
			node_fail(c, c->nodes[i], jobs);
}

void cluster_cmd_reset(cluster_cmd *cmd)
{
	if (!cmd)
		return;
	if (cmd->reply)
		freeReplyObject(cmd->reply);
	cmd->reply = NULL;
	cmd->outcome = CL_NOT_RUN;
}

int cluster_exec(cluster *c, cluster_cmd *cmds, size_t n, int timeout_ms)
{
	struct job *jobs;
	int rc;

	if (!c || (n > 0 && !cmds) || n > CLUSTER_EXEC_MAX || timeout_ms <= 0)
		return TALLY_EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (cmds[i].argc < 1 || !cmds[i].argv ||
		    cmds[i].slot >= SLOT_COUNT)
			return TALLY_EINVAL;
		cluster_cmd_reset(&cmds[i]);
	}
	if (n == 0)
		return TALLY_OK;
	jobs = calloc(n, sizeof(*jobs));
	if (!jobs)
		return TALLY_ENOMEM;
	for (size_t i = 0; i < n; i++)
		jobs[i].cmd = &cmds[i];
	rc = exec_run(c, jobs, n, now_ms() + timeout_ms);
	exec_cleanup(c, jobs);
	free(jobs);
	if (rc != TALLY_OK)
		return rc;
	for (size_t i = 0; i < n; i++)
		if (cmds[i].outcome != CL_DONE)
			return TALLY_EIO;
	return TALLY_OK;
}

/* ---- per-master commands, scripts -------------------------------------- */

void cluster_master_replies_free(cluster_master_reply *r, size_t n)
{
	if (!r)
		return;
	for (size_t i = 0; i < n; i++)
		if (r[i].reply)
			freeReplyObject(r[i].reply);
	free(r);
}

/* The distinct masters of the given slots (all when slots is NULL), as
 * addresses copied into out. */
static size_t masters_of(const cluster *c, const uint16_t *slots,
                         size_t nslots, cluster_master_reply *out)
{
	size_t m = 0;

	for (size_t i = 0; i < c->n_nodes; i++) {
		const struct node *n = c->nodes[i];
		int want = 0;
		if (!n->master)
			continue;
		if (!slots)
			want = 1;
		for (size_t s = 0; slots && s < nslots && !want; s++)
			want = slots[s] < SLOT_COUNT && c->slots[slots[s]] == n;
		if (want)
			memcpy(out[m++].addr, n->addr, CLUSTER_ADDR_MAX);
	}
	return m;
}

int cluster_each_master(cluster *c, const uint16_t *slots, size_t nslots,
                        int argc, const char **argv, const size_t *argvlen,
                        int timeout_ms, cluster_master_reply **out,
                        size_t *n_out)
{
	int64_t deadline;
	cluster_master_reply *r;
	cluster_cmd *cmds;
	struct job *jobs;
	size_t m;
	int rc, uncovered = 0;

	if (!c || argc < 1 || !argv || timeout_ms <= 0 || !out || !n_out ||
	    (!slots && nslots > 0))
		return TALLY_EINVAL;
	deadline = now_ms() + timeout_ms;
	if (c->topo_dirty && refresh_run(c, deadline) == TALLY_ENOMEM)
		return TALLY_ENOMEM;
	r = calloc(CLUSTER_NODES_MAX, sizeof(*r));
	cmds = calloc(CLUSTER_NODES_MAX, sizeof(*cmds));
	jobs = calloc(CLUSTER_NODES_MAX, sizeof(*jobs));
	if (!r || !cmds || !jobs) {
		free(r);
		free(cmds);
		free(jobs);
		return TALLY_ENOMEM;
	}
	m = masters_of(c, slots, nslots, r);
	/* A slot no known master serves (its map refresh failed after a
	 * MOVED, say) has no one to ask: not "nothing to wait for". */
	for (size_t s = 0; s < nslots; s++) {
		const struct node *n = slots[s] < SLOT_COUNT ? c->slots[slots[s]]
		                                             : NULL;

		if (n == NULL || !n->master)
			uncovered = 1;
	}
	for (size_t i = 0; i < m; i++) {
		cmds[i] = (cluster_cmd){.argc = argc, .argv = argv,
		                        .argvlen = argvlen};
		jobs[i].cmd = &cmds[i];
		jobs[i].forced = r[i].addr;
	}
	rc = m ? exec_run(c, jobs, m, deadline) : TALLY_OK;
	exec_cleanup(c, jobs);
	for (size_t i = 0; i < m; i++) {
		r[i].reply = cmds[i].reply;
		r[i].outcome = cmds[i].outcome;
		if (r[i].outcome != CL_DONE && rc == TALLY_OK)
			rc = TALLY_EIO;
	}
	free(cmds);
	free(jobs);
	if (rc == TALLY_OK && ((m == 0 && !slots) || uncovered))
		rc = TALLY_EIO;
	if (rc != TALLY_OK && rc != TALLY_EIO) {
		cluster_master_replies_free(r, m);
		return rc;
	}
	*out = r;
	*n_out = m;
	return rc;
}

int cluster_script_load(cluster *c, const char *src, size_t len,
                        char sha_out[41], int timeout_ms)
{
	const char *argv[3] = {"SCRIPT", "LOAD", src};
	size_t lens[3] = {6, 4, len};
	cluster_master_reply *r = NULL;
	struct script *s = NULL;
	size_t m = 0;
	int rc, bad = 0;

	if (!c || !src || !sha_out || timeout_ms <= 0)
		return TALLY_EINVAL;
	for (size_t i = 0; i < c->n_scripts && !s; i++)
		if (c->scripts[i].len == len &&
		    memcmp(c->scripts[i].src, src, len) == 0)
			s = &c->scripts[i];
	if (!s) {
		if (c->n_scripts == CLUSTER_SCRIPTS_MAX)
			return TALLY_ELIMIT;
		s = &c->scripts[c->n_scripts];
		s->src = malloc(len + 1);
		if (!s->src)
			return TALLY_ENOMEM;
		memcpy(s->src, src, len);
		s->src[len] = '\0';
		s->len = len;
		s->sha[0] = '\0';
		c->n_scripts++;
	}
	rc = cluster_each_master(c, NULL, 0, 3, argv, lens, timeout_ms, &r, &m);
	if (rc != TALLY_OK && rc != TALLY_EIO)
		return rc;
	for (size_t i = 0; i < m; i++) {
		const redisReply *x = r[i].reply;
		if (r[i].outcome != CL_DONE)
			continue;
		if (x->type == REDIS_REPLY_STRING && x->len == 40)
			memcpy(s->sha, x->str, 41);
		else
			bad = 1;
	}
	cluster_master_replies_free(r, m);
	if (bad) {
		/* A script that does not compile: forget it, it would only be
		 * reloaded in vain on every connection. */
		free(s->src);
		c->n_scripts--;
		if (s != &c->scripts[c->n_scripts])
			*s = c->scripts[c->n_scripts];
		return TALLY_EINVAL;
	}
	if (s->sha[0] == '\0')
		return TALLY_EIO;
	memcpy(sha_out, s->sha, 41);
	return rc;
}

/* ---- open, close, introspection ---------------------------------------- */

static int seeds_parse(cluster *c, const char *seeds)
{
	const char *p = seeds;

	while (*p) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		char host[CLUSTER_ADDR_MAX];
		int port;

		if (c->n_seeds == CLUSTER_SEEDS_MAX || l >= CLUSTER_ADDR_MAX ||
		    addr_split(p, l, host, &port) != 0)
			return TALLY_EINVAL;
		memcpy(c->seeds[c->n_seeds], p, l);
		c->seeds[c->n_seeds][l] = '\0';
		c->n_seeds++;
		if (!e)
			break;
		p = e + 1;
	}
	return c->n_seeds > 0 ? TALLY_OK : TALLY_EINVAL;
}

int cluster_open(const char *seeds, const cluster_options *o, cluster **out)
{
	cluster *c;
	int rc;

	if (!seeds || !out)
		return TALLY_EINVAL;
	if (o && (o->connect_timeout_ms < 0 || o->command_timeout_ms < 0 ||
	          o->refresh_backoff_ms_max < 0))
		return TALLY_EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return TALLY_ENOMEM;
	if (o)
		c->opt = *o;
	if (c->opt.connect_timeout_ms == 0)
		c->opt.connect_timeout_ms = CL_CONNECT_TIMEOUT_MS;
	if (c->opt.command_timeout_ms == 0)
		c->opt.command_timeout_ms = CL_COMMAND_TIMEOUT_MS;
	if (c->opt.refresh_backoff_ms_max == 0)
		c->opt.refresh_backoff_ms_max = CL_BACKOFF_MS_MAX;
	if (c->opt.refresh_backoff_ms_max < CL_BACKOFF_MS_MIN)
		c->opt.refresh_backoff_ms_max = CL_BACKOFF_MS_MIN;
	c->opt.password = NULL;
	if (o && o->password) {
		c->password = strdup(o->password);
		if (!c->password) {
			rc = TALLY_ENOMEM;
			goto fail;
		}
	}
	rc = seeds_parse(c, seeds);
	if (rc != TALLY_OK)
		goto fail;
	rc = refresh_run(c, now_ms() + (int64_t)c->opt.connect_timeout_ms +
	                    c->opt.command_timeout_ms);
	if (rc != TALLY_OK)
		goto fail;
	*out = c;
	return TALLY_OK;
fail:
	cluster_close(c);
	return rc;
}

void cluster_close(cluster *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n_nodes; i++)
		node_free(c, c->nodes[i]);
	for (size_t i = 0; i < c->n_scripts; i++)
		free(c->scripts[i].src);
	if (c->password) {
		/* The password is a secret: wipe it before it is freed. */
		volatile char *p = c->password;
		while (*p)
			*p++ = '\0';
		free(c->password);
	}
	free(c);
}

uint16_t cluster_slot(const void *key, size_t len)
{
	return slot_of_key(key, len);
}

int cluster_slot_addr(const cluster *c, uint16_t slot, char *buf, size_t len)
{
	if (!c || !buf || slot >= SLOT_COUNT || len < CLUSTER_ADDR_MAX)
		return TALLY_EINVAL;
	if (!c->slots[slot])
		return TALLY_ENOTFOUND;
	memcpy(buf, c->slots[slot]->addr, CLUSTER_ADDR_MAX);
	return TALLY_OK;
}

size_t cluster_master_count(const cluster *c)
{
	size_t m = 0;

	if (!c)
		return 0;
	for (size_t i = 0; i < c->n_nodes; i++)
		m += c->nodes[i]->master != 0;
	return m;
}

void cluster_get_stats(const cluster *c, cluster_stats *out)
{
	if (!c || !out)
		return;
	*out = c->st;
}
