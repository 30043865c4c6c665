/* net.c: tallyd's network layer: N I/O threads, each a libuv loop, and the
 * connections they own (RESP and HTTP). The first accepts on every port and
 * places each connection on the thread that holds the fewest.
 *
 * Design note: replies in order with asynchronous writes
 *  1. Each RESP connection keeps a FIFO of replies it owes (slots). A write
 *     command queues its writes in the engine and appends a slot; the
 *     engine's committer completes the slot on its own thread and hands it
 *     to the owning loop through the worker's done list and a uv_async.
 *  2. A reply is written only when every slot before it is complete, so
 *     pipelined replies keep request order. A reply made at once while
 *     slots are owed is queued as a ready slot.
 *  3. A read command waits (the connection stops parsing and reading)
 *     until the connection's queued writes completed, so it sees them.
 *  4. A connection is freed only when its socket is closed and no slot is
 *     owed: the committer may still hold slot pointers after a close.
 *  5. Memory per client is bounded: at most max_pending owed replies (then
 *     reading pauses) and max_output bytes of output (then it is closed).
 *  6. A command that may block (TALLY.BACKUP) runs on libuv's pool with an
 *     owed slot of its own; its connection runs nothing more until it is
 *     done, the loop's other connections carry on.
 *  7. A connection runs at most CMDS_PER_TURN commands at a time; the rest
 *     of its pipeline waits (reading paused) for the loop's idle turn,
 *     after the other clients' pending I/O.
 *  8. An HTTP connection answers one request at a time: a read at once, a
 *     write once its writes complete (they come back through the done
 *     list, carried by one slot that is never in the FIFO).
 *  9. Caller commits (the rocksdb store, sync durability): the writes a
 *     loop's turn queued are committed by that loop before it sleeps
 *     (on_prepare, through tally_commit), and its completions are drained
 *     at once, through a list of its own that takes no lock (own_done), so
 *     a batch costs no thread hand-off. First the loop polls
 *     again without sleeping, while each poll reads something (at most
 *     GATHER_POLLS), so what its other clients sent meanwhile joins the
 *     batch and its fsync. Meanwhile the loop
 *     serves nobody: it waits for its fsync, or for another loop's commit
 *     (which may take its writes too). Completions committed on another
 *     thread come back through the done list and the wake, as in point 1,
 *     where "the committer" is whichever thread committed. */
#define _GNU_SOURCE /* accept4 */
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "server/http.h"
#include "server/server.h"

/* Bytes asked of the parser per read. */
#define READ_CHUNK (64 * 1024)

typedef struct conn conn;

typedef struct slot {
	struct slot *next;
	struct slot *done_next;   /* in one of its worker's done lists */
	conn *c;
	uint8_t fmt;              /* enum reply_fmt; 0: text */
	uint8_t ready;
	_Atomic uint32_t remaining;
	int err;                  /* committer's first error */
	int64_t result;           /* committer: last result or sum */
	char *text;               /* fmt 0: the reply bytes */
	size_t text_len;
} slot;

/* A socket accepted by worker 0 for another worker to take. */
typedef struct placed_fd {
	int fd;
	int http;
} placed_fd;

typedef struct worker {
	srv *s;
	int idx;
	uv_loop_t loop;
	uv_thread_t thread;
	/* Worker 0 only: the listening sockets (-1 when not listening). */
	uv_poll_t resp_poll, http_poll;
	int resp_fd, http_fd;
	int resp_on, http_on;
	int accept_paused;        /* out of descriptors: resumed by the tick */
	int refused_open;         /* refused connections lingering (refuse()) */
	int lingering_open;       /* connections lingering (conn_linger()) */
	int place_next;           /* where the search for the fewest starts */
	/* Connections given to it and not yet freed, those still in its
	 * inbox included: it exits at shutdown once this is 0. */
	_Atomic uint32_t placed;
	pthread_mutex_t inbox_lock;
	placed_fd *inbox;         /* accepted by worker 0, not yet taken */
	size_t inbox_n, inbox_cap;
	int inbox_closed;         /* the worker has exited: take no more */
	uv_async_t wake;
	uv_timer_t tick;
	uv_idle_t more_idle;      /* runs the connections in more */
	uv_prepare_t commit_prep; /* point 9: commits before the loop sleeps */
	uv_idle_t commit_idle;    /* keeps it awake while writes are queued */
	pthread_t tid;            /* the loop's thread */
	int queued;               /* writes queued since the last commit */
	int read_turn;            /* a read since the last gather (point 9) */
	int gathered;             /* polls added before the next commit */
	conn *more;               /* connections that used up their turn */
	pthread_mutex_t done_lock;
	/* Completed slots of commits run on other threads (the committer,
	 * another loop), oldest first: linked through the slots, so a
	 * completion never allocates (a slot is in one of the two lists at
	 * most once: it completes once, an HTTP request's slot before the
	 * connection's next request). */
	slot *done_head, *done_tail;
	/* Completed slots of the commits this loop ran itself (point 9),
	 * newest first: only this thread touches them, so they take no lock
	 * (done_lock and its drain were 2.6% of tallyd's samples under
	 * pipelined hot INCR). */
	slot *own_done;
	conn *conns;              /* every live connection */
	rbuf scratch;             /* replies made while slots are owed */
	srv_stats *st;
	slot *spare;              /* freed slots, for the next commands */
	size_t spare_n;
	int stopping;
	uint64_t stop_ms;         /* when stopping began (now_ms) */
	int loop_on;              /* loop initialised: net_free closes it */
	int locks_on;             /* 0, 1 or 2 of its mutexes initialised */
	int ran;                  /* its thread was started */
} worker;

struct conn {
	uv_tcp_t tcp;
	worker *w;
	conn *prev, *next;        /* in w->conns */
	int http;
	client_info cl;
	resp_parser *rp;
	http_conn *hc;
	http_request rq;          /* HTTP: the request being answered */
	http_response rs;
	http_pending *pend;       /* its request's queued writes: it answers
	                             nothing more until they are done (one
	                             owed reply) */
	slot *hslot;              /* carries them back through the done list */
	rbuf out;                 /* replies ready to send */
	size_t inflight;          /* bytes in uv_write */
	int writing;
	slot *head, *tail;
	size_t nslots;
	size_t owed;              /* slots not complete */
	resp_cmd deferred;        /* a read waiting for owed writes */
	int deferred_ci;          /* its command table entry (cmd_find()) */
	int has_deferred;
	int offloaded;            /* a command runs on the pool (point 6) */
	int reading;
	int eof;                  /* the client shut its side: read no more */
	int drained;              /* the last run of its pipeline found no
	                             whole command left (RESP) */
	int closed;               /* uv_close called */
	int dead;                 /* socket closed: free when owed == 0 */
	int counted;              /* counts against maxclients */
	int refused;              /* refused at maxclients, in refused_open */
	int woken;                /* in this wake's list */
	conn *wake_next;
	int more;                 /* in w->more: input left after its turn */
	conn *more_prev, *more_next;
	int lingering;            /* write side shut, draining input */
	uint64_t linger_since_ms;
	uint64_t linger_bytes;    /* drained while lingering */
	uv_shutdown_t shut;
	uint64_t last_active_ms;
	size_t last_queued;        /* unsent(), at the last tick */
	uint64_t http_wait_ms;     /* HTTP: the next request (or the client's
	                              taking of an answer) awaited since */
	int http_put_off;          /* ... and its end put off once, for
	                              input not read yet */
};

static void conn_close(conn *c);
static void conn_free(conn *c);
static void conn_flush(conn *c);
static void slots_flush(conn *c);
static void worker_maybe_exit(worker *w);
static void resp_process(conn *c);
static void http_process(conn *c);
static void more_unlink(conn *c);

static uint64_t now_ms(worker *w)
{
	return uv_now(&w->loop);
}

/* ---- slots ------------------------------------------------------------------ */

static void slot_link(conn *c, slot *sl)
{
	if (c->tail)
		c->tail->next = sl;
	else
		c->head = sl;
	c->tail = sl;
	c->nslots++;
}

/* Freed slots a worker keeps for reuse: a pipeline's worth for each of
 * many clients. Every write command takes a slot; from glibc, calloc
 * and free were some 6% of a worker's CPU under pipelined INCR (calloc
 * does not take glibc's per-thread cache). */
#define SLOT_SPARE_MAX 4096

/* A zeroed slot: a spare one, or a new one (NULL when out of memory). */
static slot *slot_alloc(worker *w)
{
	slot *sl = w->spare;

	if (sl == NULL)
		return calloc(1, sizeof *sl);
	w->spare = sl->next;
	w->spare_n--;
	memset(sl, 0, sizeof *sl);
	return sl;
}

/* On the worker's thread: the slot is answered or given up. */
static void slot_release(worker *w, slot *sl)
{
	free(sl->text);
	if (w->spare_n >= SLOT_SPARE_MAX) {
		free(sl);
		return;
	}
	sl->next = w->spare;
	w->spare = sl;
	w->spare_n++;
}

static slot *slot_new(conn *c, int fmt)
{
	slot *sl = slot_alloc(c->w);

	if (sl == NULL)
		return NULL;
	sl->c = c;
	sl->fmt = (uint8_t)fmt;
	slot_link(c, sl);
	return sl;
}

static void done_push(worker *w, slot *sl);

/* The committing thread (point 9): one write of the slot is done. */
static void slot_write_done(void *arg, int err, int64_t result)
{
	slot *sl = arg;
	worker *w = sl->c->w;

	if (err != TALLY_OK && sl->err == TALLY_OK)
		sl->err = err;
	if (sl->fmt == FMT_SUM)
		sl->result += result;
	else
		sl->result = result;
	if (atomic_fetch_sub(&sl->remaining, 1) != 1)
		return;
	done_push(w, sl);
}

/* The committing thread: hand a completed slot to its worker's loop. An HTTP
 * connection has at most one slot out at a time (its c->hslot, for one
 * request's writes), so on_wake meets it once per drain. */
static void done_push(worker *w, slot *sl)
{
	/* A commit on the loop's own thread: drained when it returns. */
	if (w->s->caller_commits && pthread_equal(pthread_self(), w->tid)) {
		sl->done_next = w->own_done;
		w->own_done = sl;
		return;
	}
	pthread_mutex_lock(&w->done_lock);
	sl->done_next = NULL;
	if (w->done_tail != NULL)
		w->done_tail->done_next = sl;
	else
		w->done_head = sl;
	w->done_tail = sl;
	pthread_mutex_unlock(&w->done_lock);
	/* The wake after the unlock: the loop may have taken sl meanwhile,
	 * even freed its connection, but the worker itself (and w->wake)
	 * outlives every commit, since tally_close() joins the committer
	 * before net_free() (main.c). */
	uv_async_send(&w->wake);
}

/* A command's writes are one atomic group (multi-key DEL: all or none
 * after a crash, nothing of another client between them). */
static int conn_submit(void *cp, const tally_write *ws, size_t n, int fmt)
{
	conn *c = cp;
	slot *sl;
	int rc;

	assert(n > 0);
	sl = slot_alloc(c->w);
	if (sl == NULL)
		return TALLY_ENOMEM;
	sl->c = c;
	sl->fmt = (uint8_t)fmt;
	atomic_store(&sl->remaining, (uint32_t)n);
	/* The slot joins the FIFO only once its writes are queued, so a
	 * group refused at once is answered by the handler, with detail.
	 * Their completions cannot overtake this: they reach the loop
	 * through on_wake, which runs on this thread after us. */
	rc = tally_write_group_async(c->w->s->t, ws, n, slot_write_done, sl);
	if (rc != TALLY_OK) {
		slot_release(c->w, sl);
		return rc;
	}
	slot_link(c, sl);
	c->owed++;
	c->w->queued = 1;
	return TALLY_OK;
}

/* ---- commands run on the pool (design note, point 6) ------------------------ */

typedef struct offload_job {
	uv_work_t req;
	slot *sl;
	void (*fn)(void *arg, rbuf *out);
	void *arg;
	rbuf out;
} offload_job;

static void offload_work(uv_work_t *req)
{
	offload_job *j = req->data;

	j->fn(j->arg, &j->out);
}

static void offload_done(uv_work_t *req, int status)
{
	offload_job *j = req->data;
	slot *sl = j->sl;
	conn *c = sl->c;
	worker *w = c->w;

	/* Nothing cancels pool work, so status is 0; should that change,
	 * the client still gets an answer. */
	if (status != 0) {
		j->out.len = 0;
		reply_error(&j->out, "ERR the command was cancelled");
	}
	if (j->out.len > 0 && j->out.data[0] == '-')
		stat_add(&w->st->command_errors_total, 1);
	sl->text = j->out.data;
	sl->text_len = j->out.len;
	sl->ready = 1;
	free(j);
	c->owed--;
	c->offloaded = 0;
	if (c->dead) {
		slots_flush(c);
		if (c->owed == 0)
			conn_free(c);
		worker_maybe_exit(w);
		return;
	}
	resp_process(c);
}

static int conn_offload(void *cp, void (*fn)(void *arg, rbuf *out),
                        void *arg)
{
	conn *c = cp;
	offload_job *j = calloc(1, sizeof *j);
	slot *sl = slot_alloc(c->w);

	if (j == NULL || sl == NULL) {
		free(j);
		if (sl != NULL)
			slot_release(c->w, sl);
		return -1;
	}
	sl->c = c;
	j->sl = sl;
	j->fn = fn;
	j->arg = arg;
	j->req.data = j;
	rbuf_init(&j->out, 0, c->cl.proto);
	if (uv_queue_work(&c->w->loop, &j->req, offload_work,
	                  offload_done) != 0) {
		rbuf_free(&j->out);
		free(j);
		slot_release(c->w, sl);
		return -1;
	}
	/* Linked only now, as in conn_submit: offload_done runs on this
	 * loop, after this returns. */
	slot_link(c, sl);
	c->owed++;
	c->offloaded = 1;
	return 0;
}

static void slot_format(conn *c, slot *sl)
{
	int err = sl->err;

	if (sl->fmt == 0) {
		rbuf_append(&c->out, sl->text, sl->text_len);
		return;
	}
	if (err != TALLY_OK && !(sl->fmt == FMT_SUM &&
	                         err == TALLY_ENOTFOUND)) {
		stat_add(&c->w->st->command_errors_total, 1);
		cmd_reply_tally_error(&c->out, err);
		return;
	}
	if (sl->fmt == FMT_OK)
		reply_status(&c->out, "OK");
	else
		reply_int(&c->out, sl->result);
}

/* Move every ready slot at the head of the FIFO into the output. */
static void slots_flush(conn *c)
{
	while (c->head != NULL && c->head->ready) {
		slot *sl = c->head;

		c->head = sl->next;
		if (c->head == NULL)
			c->tail = NULL;
		c->nslots--;
		if (!c->dead)
			slot_format(c, sl);
		slot_release(c->w, sl);
	}
}

/* ---- connection lifetime --------------------------------------------------- */

static void conn_free(conn *c)
{
	worker *w = c->w;
	slot *sl = c->head;

	assert(c->owed == 0 && c->pend == NULL);
	while (sl != NULL) {
		slot *next = sl->next;

		slot_release(w, sl);
		sl = next;
	}
	if (c->hslot != NULL)
		slot_release(w, c->hslot);
	if (c->prev)
		c->prev->next = c->next;
	else
		w->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	more_unlink(c);
	resp_parser_free(c->rp);
	http_conn_free(c->hc);
	rbuf_free(&c->out);
	if (c->counted)
		atomic_fetch_sub(&w->s->clients, 1);
	if (c->refused)
		w->refused_open--;
	if (c->lingering)
		w->lingering_open--;
	free(c);
	atomic_fetch_sub(&w->placed, 1);
}

static void on_closed(uv_handle_t *h)
{
	conn *c = h->data;

	c->dead = 1;
	if (c->owed == 0)
		conn_free(c);
}

static void conn_close(conn *c)
{
	if (c->closed)
		return;
	c->closed = 1;
	c->reading = 0;
	uv_close((uv_handle_t *)&c->tcp, on_closed);
}

static void on_write(uv_write_t *req, int status)
{
	conn *c = req->data;

	free(req);
	c->writing = 0;
	c->inflight = 0;
	if (status < 0) {
		conn_close(c);
		return;
	}
	conn_flush(c);
}

/* Close after the last reply without losing it: closing a socket with
 * unread input makes the kernel send a reset, which can overtake the
 * reply (an error answer to a bad request, most of all). So shut the
 * write side down, drain input until the peer closes, and close at EOF,
 * after LINGER_MS without input, or LINGER_TOTAL_MS or LINGER_BYTES_MAX
 * in all (the worker's tick; as nginx's lingering close). */
#define LINGER_MS 1000
#define LINGER_TOTAL_MS 10000
#define LINGER_BYTES_MAX (2u << 20)
/* Lingering connections count against no limit: past this many on one
 * I/O thread, input no longer extends a linger past LINGER_MS. */
#define LINGER_EXTEND_MAX 64

/* Input that arrives while lingering is dropped; EOF ends the linger. */
static void on_alloc_discard(uv_handle_t *h, size_t want, uv_buf_t *buf)
{
	static _Thread_local char sink[4096];

	(void)h, (void)want;
	*buf = uv_buf_init(sink, sizeof sink);
}

static void on_read_discard(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	conn *c = s->data;

	(void)buf;
	if (n < 0) {
		conn_close(c);
		return;
	}
	/* A client still sending (a body refused on its head) is drained
	 * while bytes come, so that it reads its answer instead of a reset;
	 * within bounds, since it no longer counts against maxclients. */
	c->linger_bytes += (uint64_t)n;
	if (c->linger_bytes > LINGER_BYTES_MAX)
		conn_close(c);
	else if (n > 0 && c->w->lingering_open <= LINGER_EXTEND_MAX)
		c->last_active_ms = now_ms(c->w);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
	conn *c = req->data;

	if (status < 0 || c->closed) {
		conn_close(c);
		return;
	}
	uv_read_stop((uv_stream_t *)&c->tcp);
	uv_read_start((uv_stream_t *)&c->tcp, on_alloc_discard,
	              on_read_discard);
}

/* How long a shutdown waits for a client to read what it is sent. */
#define SHUTDOWN_GRACE_MS 10000

static void conn_linger(conn *c)
{
	if (c->lingering || c->closed)
		return;
	c->lingering = 1;
	c->w->lingering_open++;
	c->reading = 0;
	/* Leaving (QUIT, an error, a refusal): its place goes to the next
	 * client now, not when the peer closes or LINGER_MS is over. */
	if (c->counted) {
		atomic_fetch_sub(&c->w->s->clients, 1);
		c->counted = 0;
	}
	c->last_active_ms = c->linger_since_ms = now_ms(c->w);
	c->linger_bytes = 0;
	c->shut.data = c;
	if (uv_shutdown(&c->shut, (uv_stream_t *)&c->tcp, on_shutdown) != 0)
		conn_close(c);
}

/* A client that shut its side has had every whole command it sent run:
 * what is left is a command cut off by the shutdown, never completed. */
static int conn_input_done(const conn *c)
{
	return c->eof && c->drained && c->owed == 0 && !c->has_deferred &&
	       !c->offloaded && !c->more;
}

static void conn_maybe_done(conn *c)
{
	/* An HTTP request's writes owe an answer that is in no FIFO: the
	 * close waits for it too (a shutdown sets close_after meanwhile). */
	if ((c->cl.close_after || conn_input_done(c)) && c->out.len == 0 &&
	    !c->writing && c->head == NULL && c->pend == NULL)
		conn_linger(c);
}

/* The client left more output unread than --max-output-bytes allows:
 * conn_flush closes it. */
static int conn_over_output(const conn *c)
{
	return c->out.overflow ||
	       c->out.len + c->inflight > c->w->s->cfg.max_output;
}

/* A write takes at most this much of c->out: libuv's buffers count their
 * bytes in an unsigned int, and --max-output-bytes goes past 4 GiB; the
 * rest goes when the write completes (on_write flushes again). */
#define CONN_WRITE_MAX ((size_t)1 << 30)

static size_t write_len(const conn *c)
{
	return c->out.len < CONN_WRITE_MAX ? c->out.len : CONN_WRITE_MAX;
}

/* Send what is in c->out: uv_try_write first (usually all of it), then one
 * uv_write at a time that owns its buffer. */
static void conn_flush(conn *c)
{
	if (c->closed)
		return;
	slots_flush(c);
	if (conn_over_output(c)) {
		stat_add(&c->w->st->output_limit_closes_total, 1);
		conn_close(c);
		return;
	}
	if (!c->writing && c->out.len > 0) {
		uv_buf_t b = uv_buf_init(c->out.data, (unsigned)write_len(c));
		int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);

		if (n > 0) {
			stat_add(&c->w->st->bytes_out_total, (uint64_t)n);
			rbuf_consume(&c->out, (size_t)n);
		} else if (n < 0 && n != UV_EAGAIN) {
			conn_close(c);
			return;
		}
	}
	if (!c->writing && c->out.len > 0) {
		size_t len = write_len(c);
		uv_write_t *req = malloc(sizeof *req + len);
		uv_buf_t b;

		if (req == NULL) {
			conn_close(c);
			return;
		}
		memcpy(req + 1, c->out.data, len);
		b = uv_buf_init((char *)(req + 1), (unsigned)len);
		req->data = c;
		c->inflight = len;
		stat_add(&c->w->st->bytes_out_total, len);
		rbuf_consume(&c->out, len);
		c->writing = 1;
		if (uv_write(req, (uv_stream_t *)&c->tcp, &b, 1, on_write) < 0) {
			free(req);
			c->writing = 0;
			conn_close(c);
			return;
		}
	}
	conn_maybe_done(c);
}

/* ---- reading ------------------------------------------------------------- */

/* --http-timeout's clock starts again (http_deadline()). */
static void http_clock_restart(conn *c, uint64_t now)
{
	c->http_wait_ms = now;
	c->http_put_off = 0;
}

static void on_alloc(uv_handle_t *h, size_t want, uv_buf_t *buf)
{
	conn *c = h->data;
	size_t avail = 0;
	char *p;

	(void)want;
	if (c->http) {
		static _Thread_local char hbuf[READ_CHUNK];

		*buf = uv_buf_init(hbuf, sizeof hbuf);
		return;
	}
	p = resp_parser_space(c->rp, READ_CHUNK, &avail);
	*buf = uv_buf_init(p, p ? (unsigned)(avail < UINT32_MAX ? avail
	                                                     : UINT32_MAX) : 0);
}

static void reading_set(conn *c, int on);

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	conn *c = s->data;

	if (n < 0) {
		/* A client that only shut its side (shutdown(SHUT_WR)) still
		 * reads: the commands it sent are run and answered, then the
		 * connection closes (HTTP: the request in progress). What an
		 * error ends cannot be read. */
		if (n == UV_EOF && !c->closed &&
		    (c->owed > 0 || c->writing || c->out.len > 0 ||
		     c->head != NULL || c->pend != NULL || c->has_deferred ||
		     c->offloaded || c->more ||
		     (!c->http && resp_parser_pending(c->rp) > 0))) {
			reading_set(c, 0);
			c->eof = 1;
			if (c->http) {
				c->cl.close_after = 1;
				conn_flush(c);
			} else {
				resp_process(c);
			}
			return;
		}
		conn_close(c);
		return;
	}
	if (n == 0)
		return;
	stat_add(&c->w->st->bytes_in_total, (uint64_t)n);
	c->w->read_turn = 1;
	c->last_active_ms = now_ms(c->w);
	if (c->http) {
		int waiting = !http_conn_midway(c->hc);

		if (http_conn_feed(c->hc, buf->base, (size_t)n) != 0) {
			http_process(c); /* answers the error and closes */
			return;
		}
		/* The first bytes of a request start its --http-timeout:
		 * the keep-alive wait before them is over. Later bytes do
		 * not restart it, nor do the blank lines the parser skips
		 * before a request (they would, every S seconds, hold the
		 * connection for ever). */
		if (waiting && http_conn_midway(c->hc))
			http_clock_restart(c, c->last_active_ms);
		http_process(c);
		return;
	}
	resp_parser_commit(c->rp, (size_t)n);
	resp_process(c);
}

static void reading_set(conn *c, int on)
{
	if (c->closed || c->lingering || c->reading == on || (on && c->eof))
		return;
	c->reading = on;
	if (on)
		uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
	else
		uv_read_stop((uv_stream_t *)&c->tcp);
}

/* ---- RESP ------------------------------------------------------------------- */

/* Commands one connection runs before the loop turns to its other
 * clients. A 64 KiB read holds ~1500 pipelined commands; run at once,
 * heavy ones (RECENT LIMIT 1000) kept the loop's other clients waiting
 * for seconds. The rest runs from the idle handle, after pending I/O. */
#define CMDS_PER_TURN 128

static void on_more(uv_idle_t *h);

static void more_link(conn *c)
{
	worker *w = c->w;

	if (c->more)
		return;
	c->more = 1;
	c->more_prev = NULL;
	c->more_next = w->more;
	if (w->more != NULL)
		w->more->more_prev = c;
	w->more = c;
	uv_idle_start(&w->more_idle, on_more);
}

static void more_unlink(conn *c)
{
	worker *w = c->w;

	if (!c->more)
		return;
	c->more = 0;
	if (c->more_prev != NULL)
		c->more_prev->more_next = c->more_next;
	else
		w->more = c->more_next;
	if (c->more_next != NULL)
		c->more_next->more_prev = c->more_prev;
	c->more_prev = c->more_next = NULL;
}

/* Give each waiting connection its next turn. One that uses it up links
 * itself again, behind the I/O that arrives meanwhile. */
static void on_more(uv_idle_t *h)
{
	worker *w = h->data;

	for (conn *c = w->more, *next; c != NULL; c = next) {
		next = c->more_next;
		more_unlink(c);
		if (c->http)
			http_process(c);
		else
			resp_process(c);
	}
	if (w->more == NULL)
		uv_idle_stop(h);
}

/* Run cmd, whose command table entry is ci (cmd_find()). */
static void resp_dispatch(conn *c, resp_cmd *cmd, int ci)
{
	worker *w = c->w;
	int queued = c->head != NULL;
	cmd_ctx ctx = { w->s, w->st, &c->cl, queued ? &w->scratch : &c->out,
	                c, conn_submit, conn_offload };

	size_t start;

	w->scratch.len = 0;
	w->scratch.overflow = 0;
	w->scratch.proto = c->cl.proto;
	start = ctx.out->len;
	stat_add(&w->st->commands_total, 1);
	cmd_run(&ctx, ci, cmd->argc, cmd->argv, cmd->lens);
	c->out.proto = c->cl.proto;
	/* An error answered now (a write's own comes later, in its slot):
	 * the reply starts where the output stood before the command. */
	if (ctx.out->len > start && (ctx.out->data[start] == '-' ||
	                             ctx.out->data[start] == '!'))
		stat_add(&w->st->command_errors_total, 1);
	if (queued && w->scratch.len > 0) {
		slot *sl = slot_new(c, 0);
		char *text = malloc(w->scratch.len);

		if (sl == NULL || text == NULL) {
			free(text);
			conn_close(c);
			return;
		}
		memcpy(text, w->scratch.data, w->scratch.len);
		sl->text = text;
		sl->text_len = w->scratch.len;
		sl->ready = 1;
	}
}

static void protocol_error(conn *c, int rc)
{
	char msg[256];

	/* Out of memory sets no parser message. */
	snprintf(msg, sizeof msg, "ERR %s",
	         rc == RESP_NOMEM ? "out of memory reading the request"
	                          : resp_parser_error(c->rp));
	stat_add(&c->w->st->protocol_errors_total, 1);
	if (c->head != NULL) {
		slot *sl = slot_new(c, 0);
		rbuf tmp;

		if (sl == NULL) {
			conn_close(c);
			return;
		}
		rbuf_init(&tmp, 0, c->cl.proto);
		reply_error(&tmp, msg);
		sl->text = tmp.data;
		sl->text_len = tmp.len;
		sl->ready = 1;
	} else {
		reply_error(&c->out, msg);
	}
	c->cl.close_after = 1;
}

/* Parse and run buffered commands until input runs out, a read must wait
 * for owed writes, or too many replies are owed. */
static void resp_process(conn *c)
{
	size_t max_pending = c->w->s->cfg.max_pending;
	size_t turn = 0;

	/* Completed replies leave the FIFO first, so that the pipeline bound
	 * below counts only what is still owed. */
	slots_flush(c);
	/* Past the output limit the rest of the pipeline is not run: its
	 * replies would be thrown away with the connection, and running
	 * them (a read chunk holds thousands of commands) would keep the
	 * loop's other clients waiting. */
	c->drained = 0;
	while (!c->closed && !c->cl.close_after && !conn_over_output(c)) {
		resp_cmd cmd;
		int rc, ci;

		if (c->offloaded)
			break;
		if (c->has_deferred) {
			if (c->owed > 0)
				break;
			c->has_deferred = 0;
			resp_dispatch(c, &c->deferred, c->deferred_ci);
			continue;
		}
		if (c->nslots >= max_pending)
			break;
		if (turn++ == CMDS_PER_TURN) {
			if (resp_parser_pending(c->rp) > 0)
				more_link(c);
			break;
		}
		/* AUTH or HELLO may have just authenticated the client. */
		resp_parser_set_unauth(c->rp, !c->cl.authed);
		rc = resp_parser_next(c->rp, &cmd);
		if (rc == RESP_AGAIN) {
			c->drained = 1;
			break;
		}
		if (rc != RESP_OK) {
			protocol_error(c, rc);
			break;
		}
		ci = cmd_find(c->w->s, cmd.argv[0], cmd.lens[0]);
		if (c->owed > 0 && !cmd_writes(ci)) {
			c->deferred = cmd;
			c->deferred_ci = ci;
			c->has_deferred = 1;
			break;
		}
		resp_dispatch(c, &cmd, ci);
	}
	/* Every command read is done with (none waits, none runs on a pool
	 * thread): a big one's buffers can go. */
	if (c->drained && !c->has_deferred && !c->offloaded && !c->closed)
		resp_parser_trim(c->rp);
	/* Not while its turn is over: its backlog would grow unparsed. */
	reading_set(c, !c->has_deferred && !c->offloaded &&
	            !c->cl.close_after && c->nslots < max_pending &&
	            !c->more);
	conn_flush(c);
}

/* ---- HTTP -------------------------------------------------------------------- */

static void http_respond(conn *c, const http_response *rs, int keep_alive)
{
	size_t len;
	char *bytes = http_response_format(rs, keep_alive, &len);

	stat_add(&c->w->st->http_requests_total, 1);
	if (bytes == NULL) {
		conn_close(c);
		return;
	}
	rbuf_append(&c->out, bytes, len);
	free(bytes);
	http_clock_restart(c, now_ms(c->w));
	if (!keep_alive)
		c->cl.close_after = 1;
}

/* The committing thread: the request's writes are all done. */
static void http_writes_done(void *arg)
{
	slot *sl = arg;

	done_push(sl->c->w, sl);
}

/* On the loop, from on_wake: answer the request whose writes are done,
 * then go on with the connection's next requests. */
static void http_writes_end(conn *c)
{
	assert(c->pend != NULL && c->hslot != NULL);
	http_api_finish(c->pend, &c->rs);
	c->pend = NULL;
	if (c->dead) {
		http_response_free(&c->rs);
		if (c->owed == 0)
			conn_free(c);
		return;
	}
	http_respond(c, &c->rs, c->rq.keep_alive && !c->w->stopping);
	http_response_free(&c->rs);
	http_process(c);
}

/* Answer an error that ends the connection, then close. */
static void http_reply_close(conn *c, int status, const char *msg)
{
	http_response rs = { 0 };
	char body[256];

	rs.status = status;
	snprintf(body, sizeof body, "{\"error\":\"%s\"}", msg);
	rs.body = body;
	rs.body_len = strlen(body);
	rs.content_type = "application/json";
	rs.head = http_conn_head_method(c->hc);
	http_respond(c, &rs, 0);
}

/* Answer the reader's error and close. */
static void http_reject(conn *c)
{
	const char *msg;
	int status = http_conn_error(c->hc, &msg);

	http_reply_close(c, status, msg);
}

/* Bytes the socket holds that tallyd has not read yet. */
static int unread(conn *c)
{
	uv_os_fd_t fd;
	int n = 0;

	return uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 &&
	       ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

/* An HTTP client's time is up (--http-timeout or --idle-timeout): one
 * midway through sending a request is told so (408), as a client expects;
 * any other is closed. */
static void http_timed_out(conn *c)
{
	stat_add(&c->w->st->idle_closes_total, 1);
	if (!http_conn_midway(c->hc) || c->out.len > 0 || c->writing) {
		conn_close(c);
		return;
	}
	reading_set(c, 0);
	http_reply_close(c, 408, "request not received in time");
	conn_flush(c);
}

/* --http-timeout: a client gets that long from its connection or its last
 * answer to begin a request (keep-alive), and that long from a request's
 * first byte to send the whole of it, so one that trickles a request (a
 * byte now and then) cannot hold its place for ever. Later bytes do not
 * restart the clock; output the client takes does (from the tick). */
static void http_deadline(conn *c, uint64_t now)
{
	uint32_t limit = c->w->s->cfg.http_timeout_s;
	int midway;

	if (limit == 0 || c->closed || c->lingering || c->owed > 0 ||
	    c->pend != NULL || c->more || c->cl.close_after ||
	    now - c->http_wait_ms <= (uint64_t)limit * 1000)
		return;
	midway = http_conn_midway(c->hc);
	/* The tick runs before the loop reads: a request that came just
	 * now is read first (its own time then starts), not cut off. Once:
	 * bytes that begin nothing (blank lines) must not put it off again
	 * and again. */
	if (!midway && c->out.len == 0 && !c->writing && !c->http_put_off &&
	    unread(c)) {
		c->http_put_off = 1;
		return;
	}
	http_timed_out(c);
}

/* Answer buffered requests in order, on this thread: reads at once;
 * writes are queued in the engine, and the connection answers nothing
 * more until they are done (http_writes_end), so a read sees the writes
 * sent before it. At most CMDS_PER_TURN requests at a time, as for RESP. */
static void http_process(conn *c)
{
	http_api api = { c->w->s->t, c->w->s->cfg.requirepass, metrics_text,
	                 c->w->s, &c->w->s->pass };
	size_t turn = 0;

	while (!c->closed && c->pend == NULL && !c->cl.close_after &&
	       !conn_over_output(c)) {
		int rc;

		if (turn++ == CMDS_PER_TURN) {
			if (http_conn_pending(c->hc) > 0)
				more_link(c);
			break;
		}
		rc = http_conn_next(c->hc, &c->rq);
		if (rc < 0) {
			http_reject(c);
			break;
		}
		if (rc == 0) {
			/* Every answer before this request is in c->out
			 * already, so the interim one goes in order. */
			int want_continue;

			/* The password is checked on the head: a client
			 * without it cannot make tallyd take in a body (up
			 * to 1 MiB each) for nothing, nor be invited to send
			 * one. RFC 9110 section 10.1.1 lets the final answer
			 * come instead of 100 Continue; closing spares
			 * reading the body. */
			if (http_conn_take_head(c->hc, &c->rq,
			                        &want_continue)) {
				static const char cont[] =
					"HTTP/1.1 100 Continue\r\n\r\n";

				if (!http_api_admits(&api, &c->rq)) {
					http_reply_close(c, 401,
					    "authentication required");
					break;
				}
				if (want_continue)
					rbuf_append(&c->out, cont,
					            sizeof cont - 1);
			}
			break;
		}
		/* Kept for the connection's life: the writes may complete
		 * before begin returns, so it must exist first. */
		if (c->hslot == NULL && (c->hslot = slot_alloc(c->w)) == NULL) {
			conn_close(c);
			return;
		}
		c->hslot->c = c;
		if (http_api_begin(&api, &c->rq, &c->rs, http_writes_done,
		                   c->hslot, &c->pend)) {
			/* Its completion comes through on_wake, which runs on
			 * this thread after us. */
			c->owed++;
			c->w->queued = 1;
			break;
		}
		http_respond(c, &c->rs, c->rq.keep_alive && !c->w->stopping);
		http_response_free(&c->rs);
	}
	reading_set(c, c->pend == NULL && !c->cl.close_after && !c->more);
	conn_flush(c);
}

/* ---- accepting --------------------------------------------------------------- */

static conn *conn_new(worker *w, int http)
{
	const srv_config *cfg = &w->s->cfg;
	resp_limits rl = { cfg->max_bulk, cfg->max_args, 0, cfg->max_request };
	conn *c = calloc(1, sizeof *c);

	if (c == NULL)
		return NULL;
	c->w = w;
	c->http = http;
	c->cl.proto = 2;
	c->cl.authed = cfg->requirepass == NULL;
	c->cl.id = atomic_fetch_add(&w->s->next_client_id, 1) + 1;
	rbuf_init(&c->out, cfg->max_output, 2);
	if (http)
		c->hc = http_conn_create(NULL);
	else
		c->rp = resp_parser_create(&rl);
	if ((http && c->hc == NULL) || (!http && c->rp == NULL)) {
		http_conn_free(c->hc);
		resp_parser_free(c->rp);
		free(c);
		return NULL;
	}
	return c;
}

/* Refused connections a worker lets linger at once; past them, a refused
 * one is closed as soon as its error is written, as Redis does. Lingering
 * keeps the error from being overtaken by a reset (input the client sent
 * before it was read), but holds the descriptor for up to LINGER_MS,
 * counted in no client limit: a burst of connections would take the
 * descriptors kept for the store and backups. */
#define REFUSED_LINGER_MAX 16

/* At maxclients: accept, answer with the error, and close gracefully
 * (REFUSED_LINGER_MAX at a time; the others at once). */
static void refuse(worker *w, conn *c, int http)
{
	static const char resp_msg[] = "-ERR max number of clients reached\r\n";
	static const char body[] = "{\"error\":\"max number of clients reached\"}\n";
	char head[160];
	int n;

	stat_add(&w->st->connections_rejected, 1);
	if (http) {
		n = snprintf(head, sizeof head, "HTTP/1.1 503 Service "
		             "Unavailable\r\nContent-Type: application/json\r\n"
		             "Content-Length: %zu\r\nConnection: close\r\n\r\n",
		             sizeof body - 1);
		rbuf_append(&c->out, head, (size_t)n);
		rbuf_append(&c->out, body, sizeof body - 1);
	} else {
		rbuf_append(&c->out, resp_msg, sizeof resp_msg - 1);
	}
	if (w->refused_open >= REFUSED_LINGER_MAX) {
		uv_buf_t b = uv_buf_init(c->out.data, (unsigned)c->out.len);
		char sink[4096];
		uv_os_fd_t fd;

		(void)uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
		/* What the client sent already is read first: closing on
		 * unread input sends a reset. */
		if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
			for (int i = 0; i < 16 && recv(fd, sink, sizeof sink,
			                               MSG_DONTWAIT) > 0; i++)
				;
		conn_close(c);
		return;
	}
	c->refused = 1;
	w->refused_open++;
	c->cl.close_after = 1;
	conn_flush(c);
}

/* Probes after idle seconds of silence, then every idle / 3 seconds, the
 * peer given up after 3 unanswered: a dead peer is found within about
 * twice idle, as Redis's tcp-keepalive does (the kernel's own interval
 * and count, 75 s and 9, would add 11 minutes). */
static void keepalive_set(conn *c, uint32_t idle)
{
	int intvl = idle / 3 > 0 ? (int)(idle / 3) : 1, cnt = 3;
	uv_os_fd_t fd;

	if (uv_tcp_keepalive(&c->tcp, 1, idle) != 0 ||
	    uv_fileno((uv_handle_t *)&c->tcp, &fd) != 0)
		return;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

/* Make fd a connection of w, on w's thread. It was counted in clients
 * unless full (then it is told so and closed), and in w->placed. */
static void conn_attach(worker *w, int fd, int http, int full)
{
	/* A stopping worker closes what it is given instead: a connection
	 * attached now would keep it from exiting. */
	assert(!w->stopping);
	assert(fd >= 0);
	conn *c = conn_new(w, http);

	if (c == NULL || uv_tcp_init(&w->loop, &c->tcp) != 0) {
		if (c != NULL) {
			resp_parser_free(c->rp);
			http_conn_free(c->hc);
			rbuf_free(&c->out);
			free(c);
		}
		close(fd);
		if (!full)
			atomic_fetch_sub(&w->s->clients, 1);
		atomic_fetch_sub(&w->placed, 1);
		return;
	}
	c->counted = !full;
	c->tcp.data = c;
	c->next = w->conns;
	if (w->conns)
		w->conns->prev = c;
	w->conns = c;
	/* Refused ones are not counted, as in Redis (rejected_connections
	 * counts them). */
	if (!full)
		stat_add(&w->st->connections_total, 1);
	if (uv_tcp_open(&c->tcp, fd) != 0) {
		close(fd); /* not the handle's: uv_tcp_open failed */
		conn_close(c);
		return;
	}
	uv_tcp_nodelay(&c->tcp, 1);
	/* A peer gone without a word (a host down, a cable pulled) is found
	 * and its place freed, as with Redis's tcp-keepalive. */
	if (w->s->cfg.tcp_keepalive_s > 0)
		keepalive_set(c, w->s->cfg.tcp_keepalive_s);
	c->last_active_ms = c->http_wait_ms = now_ms(w);
	if (full) {
		refuse(w, c, http);
		return;
	}
	reading_set(c, 1);
}

/* The worker holding the fewest connections; among equals, the first from
 * where the last search stopped, so that equal loads take turns. */
static worker *fewest_placed(worker *w0)
{
	srv *s = w0->s;
	int best = w0->place_next;
	uint32_t least = UINT32_MAX;

	assert(w0->idx == 0 && s->workers_n > 0);

	for (int k = 0; k < s->workers_n; k++) {
		int i = (w0->place_next + k) % s->workers_n;
		uint32_t n = atomic_load(&s->workers[i]->placed);

		if (n < least) {
			least = n;
			best = i;
		}
	}
	w0->place_next = (best + 1) % s->workers_n;
	return s->workers[best];
}

/* Give an accepted socket to the worker holding the fewest connections
 * (the kernel would wake every worker's loop for it, and the first to run
 * would take the whole backlog). Runs on worker 0. */
static void place(worker *w0, int fd, int http)
{
	srv *s = w0->s;
	worker *t;

	if (atomic_fetch_add(&s->clients, 1) >= s->cfg.maxclients) {
		/* Refused where it was accepted: it only gets the error. */
		atomic_fetch_sub(&s->clients, 1);
		atomic_fetch_add(&w0->placed, 1);
		conn_attach(w0, fd, http, 1);
		return;
	}
	t = fewest_placed(w0);
	atomic_fetch_add(&t->placed, 1);
	if (t == w0) {
		conn_attach(w0, fd, http, 0);
		return;
	}
	pthread_mutex_lock(&t->inbox_lock);
	if (!t->inbox_closed && t->inbox_n == t->inbox_cap) {
		size_t cap = t->inbox_cap ? t->inbox_cap * 2 : 16;
		placed_fd *p = realloc(t->inbox, cap * sizeof *p);

		if (p != NULL) {
			t->inbox = p;
			t->inbox_cap = cap;
		}
	}
	if (t->inbox_closed || t->inbox_n == t->inbox_cap) {
		pthread_mutex_unlock(&t->inbox_lock);
		close(fd);
		atomic_fetch_sub(&s->clients, 1);
		atomic_fetch_sub(&t->placed, 1);
		return;
	}
	t->inbox[t->inbox_n++] = (placed_fd){ fd, http };
	/* Sent under the lock: a worker closes its wake handle only after
	 * closing its inbox under that lock, so the handle is still open. */
	uv_async_send(&t->wake);
	pthread_mutex_unlock(&t->inbox_lock);
}

/* Take the sockets worker 0 placed here; close them when stopping (close
 * set too: the worker is exiting and takes no more). */
static void inbox_take(worker *w, int close_it)
{
	placed_fd *in;
	size_t n;

	pthread_mutex_lock(&w->inbox_lock);
	in = w->inbox;
	n = w->inbox_n;
	w->inbox = NULL;
	w->inbox_n = 0;
	w->inbox_cap = 0;
	if (close_it)
		w->inbox_closed = 1;
	pthread_mutex_unlock(&w->inbox_lock);
	for (size_t i = 0; i < n; i++) {
		if (close_it || w->stopping) {
			close(in[i].fd);
			atomic_fetch_sub(&w->s->clients, 1);
			atomic_fetch_sub(&w->placed, 1);
		} else {
			conn_attach(w, in[i].fd, in[i].http, 0);
		}
	}
	free(in);
}

/* Accept what the backlog holds, a bounded number per turn so that the
 * loop's own connections are not starved by a flood of new ones. */
#define ACCEPTS_PER_TURN 64

static void on_listen(uv_poll_t *p, int status, int events);

/* Worker 0: watch the listening sockets, or stop watching them. */
static void accepting_set(worker *w, int on)
{
	uv_poll_t *polls[2] = { w->resp_on ? &w->resp_poll : NULL,
	                        w->http_on ? &w->http_poll : NULL };

	for (int i = 0; i < 2; i++) {
		if (polls[i] == NULL)
			continue;
		if (on)
			uv_poll_start(polls[i], UV_READABLE, on_listen);
		else
			uv_poll_stop(polls[i]);
	}
}

/* Out of descriptors, or a poll error (after which libuv has stopped the
 * poll): the connections wait in the backlog, and the tick accepts again
 * in a second rather than spinning on the same error now. */
static void accepting_pause(worker *w, const char *why)
{
	srv_log(&w->s->cfg, LOG_WARN, "cannot accept: %s; accepting again in "
	        "a second", why);
	accepting_set(w, 0);
	w->accept_paused = 1;
}

static void on_listen(uv_poll_t *p, int status, int events)
{
	worker *w = p->data;
	int http = p == &w->http_poll;
	int lfd = http ? w->http_fd : w->resp_fd;

	(void)events;
	if (w->stopping)
		return;
	if (status < 0) {
		accepting_pause(w, uv_strerror(status));
		return;
	}
	for (int k = 0; k < ACCEPTS_PER_TURN; k++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd >= 0) {
			place(w, fd, http);
			continue;
		}
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
		    errno == ENOMEM)
			accepting_pause(w, strerror(errno));
		return; /* EAGAIN: the backlog is empty */
	}
}

/* ---- worker loop ------------------------------------------------------------ */

static void worker_shutdown(worker *w)
{
	if (w->stopping)
		return;
	w->stopping = 1;
	w->stop_ms = now_ms(w);
	/* uv_close stops a poll at once, so its socket can go now: new
	 * connections are refused from here on. */
	if (w->resp_on) {
		uv_close((uv_handle_t *)&w->resp_poll, NULL);
		close(w->resp_fd);
		w->resp_fd = -1;
	}
	if (w->http_on) {
		uv_close((uv_handle_t *)&w->http_poll, NULL);
		close(w->http_fd);
		w->http_fd = -1;
	}
	inbox_take(w, 0);
	for (conn *c = w->conns; c != NULL; c = c->next) {
		/* Replies owed are still sent: close once they are. */
		c->cl.close_after = 1;
		reading_set(c, 0);
		conn_flush(c);
	}
}

static void worker_maybe_exit(worker *w)
{
	if (w->stopping && atomic_load(&w->placed) == 0 &&
	    !uv_is_closing((uv_handle_t *)&w->wake)) {
		inbox_take(w, 1);
		uv_close((uv_handle_t *)&w->wake, NULL);
		uv_close((uv_handle_t *)&w->tick, NULL);
		uv_close((uv_handle_t *)&w->more_idle, NULL);
		uv_close((uv_handle_t *)&w->commit_prep, NULL);
		uv_close((uv_handle_t *)&w->commit_idle, NULL);
	}
}

/* Mark the completed slots of a done list ready, and link each connection
 * they belong to into woken once. Returns the new head of woken. */
static conn *done_mark(slot *done, conn *woken)
{
	for (slot *sl = done; sl != NULL; sl = sl->done_next) {
		conn *c = sl->c;

		sl->ready = 1;
		c->owed--;
		if (!c->woken) {
			c->woken = 1;
			c->wake_next = woken;
			woken = c;
		}
	}
	return woken;
}

static void on_wake(uv_async_t *a)
{
	worker *w = a->data;
	slot *done;
	conn *woken;

	inbox_take(w, 0);
	pthread_mutex_lock(&w->done_lock);
	done = w->done_head;
	w->done_head = w->done_tail = NULL;
	pthread_mutex_unlock(&w->done_lock);
	/* Mark every completion first, then run each connection once: its
	 * replies then leave in one write, not one per completed slot. The
	 * two lists' order does not matter: a connection's replies leave in
	 * its FIFO's order (point 2). */
	woken = done_mark(done, done_mark(w->own_done, NULL));
	w->own_done = NULL;
	while (woken != NULL) {
		conn *c = woken;

		woken = c->wake_next;
		c->woken = 0;
		if (c->http) {
			/* An HTTP connection owes at most its one request's
			 * writes, carried by c->hslot, never in the FIFO. */
			http_writes_end(c);
			continue;
		}
		if (c->dead) {
			slots_flush(c);
			if (c->owed == 0)
				conn_free(c);
			continue;
		}
		resp_process(c);
	}
	if (atomic_load(&w->s->stopping))
		worker_shutdown(w);
	worker_maybe_exit(w);
}

/* tally_commit calls a turn may make before the loop polls again: each
 * is an fsync or more (up to 4 batches), and the loop's other clients
 * wait for its end. */
#define COMMITS_PER_TURN 4

/* Polls (without sleeping) a loop may add before it commits what its turn
 * queued, while each one still reads something: what the loop's other
 * clients sent while it worked joins the same batch and fsync instead of
 * waiting through this one for the next. Each costs an epoll_wait; with
 * the client's core busy answering the last batch's replies, a batch took
 * 10 to 15% more writes, and INCR at -P 16 ran about 5% faster, random
 * keys and one hot key alike (docs/PERFORMANCE.md, "Gathering a batch
 * before its fsync"). With one connection nothing else can arrive, so
 * nothing is added. */
#define GATHER_POLLS 3

static void on_commit_idle(uv_idle_t *h)
{
	(void)h; /* active only to keep the loop's next poll from sleeping */
}

/* Point 9: commit what this turn queued, then answer it. Answering can
 * run more of a pipeline and queue more writes: up to COMMITS_PER_TURN
 * rounds, then the loop polls once (without sleeping) and comes back.
 * Before the first, up to GATHER_POLLS polls take in what arrived
 * meanwhile. */
static void on_prepare(uv_prepare_t *p)
{
	worker *w = p->data;

	if (w->queued && w->read_turn && w->gathered < GATHER_POLLS &&
	    atomic_load_explicit(&w->placed, memory_order_relaxed) > 1) {
		w->read_turn = 0;
		w->gathered++;
		uv_idle_start(&w->commit_idle, on_commit_idle);
		return;
	}
	w->read_turn = 0;
	w->gathered = 0;
	for (int round = 0; w->queued && round < COMMITS_PER_TURN; round++) {
		w->queued = 0;
		(void)tally_commit(w->s->t);
		if (w->own_done != NULL)
			on_wake(&w->wake);
		if (uv_is_closing((uv_handle_t *)p))
			return;
	}
	if (w->queued)
		uv_idle_start(&w->commit_idle, on_commit_idle);
	else
		uv_idle_stop(&w->commit_idle);
}

/* Bytes of output not yet taken by the client: what libuv holds and
 * what the socket has not sent (Linux's SIOCOUTQ). */
static size_t unsent(conn *c)
{
	uv_os_fd_t fd;
	int n = 0;
	size_t q;

	if (c->closed)
		return 0;
	q = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
	if (uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 &&
	    ioctl(fd, TIOCOUTQ, &n) == 0 && n > 0)
		q += (size_t)n;
	return q;
}

static void on_tick(uv_timer_t *tm)
{
	worker *w = tm->data;
	uint32_t idle = w->s->cfg.idle_timeout_s;

	if (atomic_load(&w->s->stopping))
		worker_shutdown(w);
	if (w->accept_paused && !w->stopping) {
		w->accept_paused = 0;
		accepting_set(w, 1);
	}
	for (conn *c = w->conns, *next; c != NULL; c = next) {
		next = c->next;
		if (c->lingering && !c->closed &&
		    (now_ms(w) - c->last_active_ms >= LINGER_MS ||
		     now_ms(w) - c->linger_since_ms >= LINGER_TOTAL_MS))
			conn_close(c);
		/* A client that stops reading would hold the shutdown for as
		 * long as it likes: past the grace, what it left unread is
		 * dropped. Replies still owed by the store are waited for. */
		else if (w->stopping && !c->closed && c->owed == 0 &&
		         now_ms(w) - w->stop_ms >= SHUTDOWN_GRACE_MS)
			conn_close(c);
	}
	if (idle > 0 || w->s->cfg.http_timeout_s > 0) {
		uint64_t now = now_ms(w);
		conn *c = w->conns;

		while (c != NULL) {
			conn *next = c->next;
			size_t queued;

			if (idle == 0 && !c->http) {
				c = next;
				continue;
			}
			/* A client taking in its replies is not idle (as in
			 * Redis, whose last interaction counts writes): seen
			 * here, once a tick, as output leaving, which libuv
			 * reports only when a whole write is sent. */
			queued = unsent(c);
			if (queued != c->last_queued) {
				c->last_queued = queued;
				if (!c->lingering) {
					c->last_active_ms = now;
					http_clock_restart(c, now);
				}
			}
			/* A lingering client is closed by the loop above. */
			if (idle > 0 && !c->closed && !c->lingering &&
			    c->owed == 0 &&
			    now - c->last_active_ms > (uint64_t)idle * 1000) {
				if (c->http && c->pend == NULL &&
				    !c->cl.close_after) {
					http_timed_out(c);
				} else {
					/* One answered 408 is counted. */
					if (!c->cl.close_after)
						stat_add(&w->st->idle_closes_total,
						         1);
					conn_close(c);
				}
			} else if (c->http) {
				http_deadline(c, now);
			}
			c = next;
		}
	}
	worker_maybe_exit(w);
}

static void worker_main(void *arg)
{
	worker *w = arg;
	char name[16]; /* a thread name's limit, with its NUL */

	snprintf(name, sizeof name, "tally-io-%d", w->idx);
	prctl(PR_SET_NAME, name, 0, 0, 0);
	w->tid = pthread_self();
	uv_run(&w->loop, UV_RUN_DEFAULT);
}

/* ---- start and stop ------------------------------------------------------ */

/* One listening socket per port, bound once: a second tallyd on the same
 * port fails with "address in use" instead of silently sharing it (as
 * SO_REUSEPORT would let it). Worker 0 accepts on it and places each
 * connection (place()). */
static int listen_socket(const srv_config *cfg, int port)
{
	struct sockaddr_storage ss;
	int fd, one = 1;

	if (srv_addr_parse(cfg->bind, port, &ss) != 0) {
		srv_log(cfg, LOG_ERROR, "cannot parse --bind '%s'", cfg->bind);
		return -1;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
	            0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&ss, ss.ss_family == AF_INET ?
	         sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)) != 0 ||
	    listen(fd, 511) != 0) {
		srv_log(cfg, LOG_ERROR, "cannot listen on %s:%d: %s", cfg->bind,
		        port, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* Worker 0 watches a listening socket (it owns fd from here on). */
static int listen_on(worker *w, uv_poll_t *p, int fd)
{
	int rc = uv_poll_init(&w->loop, p, fd);

	p->data = w;
	if (rc == 0)
		rc = uv_poll_start(p, UV_READABLE, on_listen);
	if (rc != 0) {
		srv_log(&w->s->cfg, LOG_ERROR, "cannot listen: %s",
		        uv_strerror(rc));
		return -1;
	}
	return 0;
}

static int worker_init(srv *s, worker *w, int idx, int resp_fd,
                       int http_fd)
{
	w->s = s;
	w->idx = idx;
	w->st = &s->stats[idx];
	w->resp_fd = idx == 0 ? resp_fd : -1;
	w->http_fd = idx == 0 ? http_fd : -1;
	rbuf_init(&w->scratch, s->cfg.max_output, 2);
	if (uv_loop_init(&w->loop) != 0)
		return -1;
	w->loop_on = 1;
	if (pthread_mutex_init(&w->done_lock, NULL) != 0)
		return -1;
	w->locks_on = 1;
	if (pthread_mutex_init(&w->inbox_lock, NULL) != 0)
		return -1;
	w->locks_on = 2;
	if (uv_async_init(&w->loop, &w->wake, on_wake) != 0 ||
	    uv_timer_init(&w->loop, &w->tick) != 0 ||
	    uv_idle_init(&w->loop, &w->more_idle) != 0 ||
	    uv_prepare_init(&w->loop, &w->commit_prep) != 0 ||
	    uv_idle_init(&w->loop, &w->commit_idle) != 0)
		return -1;
	w->wake.data = w;
	w->tick.data = w;
	w->more_idle.data = w;
	w->commit_prep.data = w;
	w->commit_idle.data = w;
	if (s->caller_commits)
		uv_prepare_start(&w->commit_prep, on_prepare);
	uv_timer_start(&w->tick, on_tick, 1000, 1000);
	if (w->resp_fd >= 0) {
		if (listen_on(w, &w->resp_poll, w->resp_fd) != 0)
			return -1;
		w->resp_on = 1;
	}
	if (w->http_fd >= 0) {
		if (listen_on(w, &w->http_poll, w->http_fd) != 0)
			return -1;
		w->http_on = 1;
	}
	return 0;
}

static int net_workers_start(srv *s, int resp_fd, int http_fd);

int net_start(srv *s)
{
	int resp_fd = -1, http_fd = -1, rc = 0;

	if (s->cfg.resp_port > 0 &&
	    (resp_fd = listen_socket(&s->cfg, s->cfg.resp_port)) < 0)
		return -1;
	if (s->cfg.http_port > 0 &&
	    (http_fd = listen_socket(&s->cfg, s->cfg.http_port)) < 0) {
		if (resp_fd >= 0)
			close(resp_fd);
		return -1;
	}
	rc = net_workers_start(s, resp_fd, http_fd);
	/* Worker 0 owns the sockets once it exists: its shutdown closes
	 * them (net_free, when it never ran). */
	if (s->workers == NULL || s->workers[0] == NULL) {
		if (resp_fd >= 0)
			close(resp_fd);
		if (http_fd >= 0)
			close(http_fd);
	}
	return rc;
}

static int net_workers_start(srv *s, int resp_fd, int http_fd)
{
	s->workers_n = s->cfg.threads;
	s->workers = calloc((size_t)s->workers_n, sizeof *s->workers);
	s->stats = aligned_alloc(_Alignof(srv_stats),
	                         (size_t)s->workers_n * sizeof *s->stats);
	if (s->stats != NULL)
		memset(s->stats, 0, (size_t)s->workers_n * sizeof *s->stats);
	if (s->workers == NULL || s->stats == NULL)
		return -1;
	for (int i = 0; i < s->workers_n; i++) {
		s->workers[i] = calloc(1, sizeof(worker));
		if (s->workers[i] == NULL ||
		    worker_init(s, s->workers[i], i, resp_fd, http_fd) != 0)
			return -1;
	}
	for (int i = 0; i < s->workers_n; i++) {
		int rc = uv_thread_create(&s->workers[i]->thread, worker_main,
		                          s->workers[i]);

		if (rc != 0) {
			srv_log(&s->cfg, LOG_ERROR,
			        "cannot start I/O thread %d of %d (tally-io-%d): "
			        "%s", i + 1, s->workers_n, i, uv_strerror(rc));
			/* The ones running serve the sockets and the handle:
			 * they must be gone before the caller closes it. */
			net_stop(s);
			net_wait(s);
			if (i > 0)
				srv_log(&s->cfg, LOG_INFO,
				        "stopped the %d I/O thread%s already "
				        "running", i, i == 1 ? "" : "s");
			return -1;
		}
		s->workers[i]->ran = 1;
	}
	return 0;
}

static void close_handle(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

void net_stop(srv *s)
{
	atomic_store(&s->stopping, 1);
	for (int i = 0; i < s->workers_n; i++)
		if (s->workers[i] != NULL)
			uv_async_send(&s->workers[i]->wake);
}

void net_wait(srv *s)
{
	for (int i = 0; i < s->workers_n; i++)
		if (s->workers[i]->ran)
			uv_thread_join(&s->workers[i]->thread);
}

void net_free(srv *s)
{
	for (int i = 0; s->workers && i < s->workers_n; i++) {
		worker *w = s->workers[i];

		if (w == NULL)
			continue;
		/* A loop whose thread never ran (a failed start) still has
		 * its handles: close them, and let it run their callbacks. */
		if (w->loop_on && uv_loop_close(&w->loop) == UV_EBUSY) {
			int rc;

			assert(!w->ran);
			uv_walk(&w->loop, close_handle, NULL);
			uv_run(&w->loop, UV_RUN_DEFAULT);
			rc = uv_loop_close(&w->loop);
			if (rc != 0)
				srv_log(&s->cfg, LOG_ERROR,
				        "I/O thread %d of %d: its loop did not "
				        "close: %s", i + 1, s->workers_n,
				        uv_strerror(rc));
		}
		if (w->locks_on > 0)
			pthread_mutex_destroy(&w->done_lock);
		if (w->locks_on > 1)
			pthread_mutex_destroy(&w->inbox_lock);
		if (w->resp_fd >= 0)
			close(w->resp_fd);
		if (w->http_fd >= 0)
			close(w->http_fd);
		for (size_t k = 0; k < w->inbox_n; k++)
			close(w->inbox[k].fd);
		free(w->inbox);
		while (w->spare != NULL) {
			slot *next = w->spare->next;

			free(w->spare);
			w->spare = next;
		}
		rbuf_free(&w->scratch);
		free(w);
	}
	free(s->workers);
	free(s->stats);
	s->workers = NULL;
	s->stats = NULL;
}

uint32_t net_clients(const srv *s)
{
	return atomic_load(&s->clients);
}

uint32_t net_thread_clients(const srv *s, int i)
{
	assert(i >= 0 && i < s->workers_n);
	return atomic_load(&s->workers[i]->placed);
}

uint64_t srv_cmd_calls(const srv *s, size_t i)
{
	assert(i < CMD_TABLE_MAX);
	return srv_stat_sum(s, offsetof(srv_stats, cmd_calls) +
	                       i * sizeof s->stats->cmd_calls[0]);
}

uint64_t srv_stat_sum(const srv *s, size_t offset)
{
	uint64_t sum = 0;

	for (int i = 0; s->stats != NULL && i < s->workers_n; i++)
		sum += atomic_load((_Atomic uint64_t *)((char *)&s->stats[i] +
		                                         offset));
	return sum;
}
