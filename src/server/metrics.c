/* metrics.c: the server's numbers as text: Prometheus exposition for
 * GET /metrics, and Redis-style INFO sections. Both read the same sources:
 * per-worker counters (SRV_STATS), per-command calls and the engine's
 * tally_stats. */
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "server/server.h"

/* A growable text buffer for these pages (a few KiB). */
typedef struct text {
	char *p;
	size_t len, cap;
	int failed;
} text;

static void tx(text *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void tx(text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->failed)
		return;
	for (;;) {
		size_t room = t->cap - t->len;

		va_start(ap, fmt);
		n = vsnprintf(t->p ? t->p + t->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0) {
			t->failed = 1;
			return;
		}
		if ((size_t)n < room) {
			t->len += (size_t)n;
			return;
		}
		size_t cap = (t->cap + (size_t)n + 1) * 2;
		char *q = realloc(t->p, cap);

		if (q == NULL) {
			t->failed = 1;
			return;
		}
		t->p = q;
		t->cap = cap;
	}
}

static char *tx_done(text *t, size_t *len)
{
	if (t->failed) {
		free(t->p);
		return NULL;
	}
	/* Nothing written (an INFO section no one has): an empty text. */
	if (t->p == NULL && (t->p = calloc(1, 1)) == NULL)
		return NULL;
	*len = t->len;
	return t->p;
}

static void prom_counter(text *t, const char *name, const char *help,
                         uint64_t v)
{
	tx(t, "# HELP tally_%s %s\n# TYPE tally_%s counter\ntally_%s %" PRIu64
	   "\n", name, help, name, name, v);
}

static void prom_gauge(text *t, const char *name, const char *help,
                       uint64_t v)
{
	tx(t, "# HELP tally_%s %s\n# TYPE tally_%s gauge\ntally_%s %" PRIu64
	   "\n", name, help, name, name, v);
}

/* A histogram from tally_stats buckets: bucket i's bound is base * 2^i. */
static void prom_hist(text *t, const char *name, const char *help,
                      const uint64_t *b, double base, double sum)
{
	uint64_t cum = 0;
	double bound = base;

	tx(t, "# HELP tally_%s %s\n# TYPE tally_%s histogram\n", name, help,
	   name);
	for (int i = 0; i < TALLY_HIST_BUCKETS - 1; i++, bound *= 2) {
		cum += b[i];
		tx(t, "tally_%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, bound,
		   cum);
	}
	cum += b[TALLY_HIST_BUCKETS - 1];
	tx(t, "tally_%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, cum);
	tx(t, "tally_%s_sum %g\ntally_%s_count %" PRIu64 "\n", name, sum, name,
	   cum);
}

char *metrics_text(void *arg, size_t *len)
{
	srv *s = arg;
	text t = { 0 };
	tally_stats st;

	tally_stats_get(s->t, &st);
#define X(name, help) prom_counter(&t, #name, help, SRV_STAT(s, name));
	SRV_STATS(X)
#undef X
	prom_gauge(&t, "connected_clients", "Clients connected now",
	           net_clients(s));
	tx(&t, "# HELP tally_io_thread_clients Connections each I/O thread "
	   "holds\n# TYPE tally_io_thread_clients gauge\n");
	for (int i = 0; i < s->workers_n; i++)
		tx(&t, "tally_io_thread_clients{thread=\"%d\"} %" PRIu32 "\n",
		   i, net_thread_clients(s, i));
	tx(&t, "# HELP tally_command_calls_total Commands by name\n"
	   "# TYPE tally_command_calls_total counter\n");
	for (size_t i = 0; cmd_name(i) != NULL; i++)
		tx(&t, "tally_command_calls_total{cmd=\"%s\"} %" PRIu64 "\n",
		   cmd_name(i), srv_cmd_calls(s, i));
	prom_counter(&t, "writes_total", "Writes acknowledged", st.writes);
	prom_counter(&t, "write_errors_total", "Writes failed",
	             st.write_errors);
	prom_counter(&t, "token_hits_total", "Retried idempotency tokens",
	             st.token_hits);
	prom_counter(&t, "tokens_swept_total",
	             "Expired idempotency tokens deleted by the store's sweep",
	             st.tokens_swept);
	prom_counter(&t, "store_entries_total", "Store entries written",
	             st.store_entries);
	prom_counter(&t, "striped_adds_total", "Adds taken by striped cells",
	             st.striped_adds);
	prom_counter(&t, "fold_overflows_total",
	             "Striped adds dropped at a fold for overflow",
	             st.fold_overflows);
	prom_gauge(&t, "queue_depth", "Writes waiting for the committer",
	           st.queue_depth);
	prom_gauge(&t, "store_failed",
	           "1 while writes are refused after a store write failure",
	           st.store_error != TALLY_OK);
	prom_counter(&t, "store_failures_total",
	             "Store write or sync failures", st.store_failures);
	prom_counter(&t, "store_recoveries_total",
	             "Store reopened after a failure", st.store_recoveries);
	prom_counter(&t, "shard_growths_total",
	             "Hot counters whose shards grew automatically",
	             st.shard_growths);
	/* The redis-cluster store does not count its counters. */
	if (strcmp(s->cfg.store, "redis-cluster") != 0) {
		prom_gauge(&t, "counters", "Named counters", st.counters);
		prom_gauge(&t, "store_dirty",
		           "Counter values in memory and the journal, not yet "
		           "in their tables", st.store_dirty);
		prom_gauge(&t, "store_clean",
		           "Counter values as of the last checkpoint, held in "
		           "memory", st.store_clean);
		prom_counter(&t, "store_checkpoints_total",
		             "Dirty counter values written out to their tables",
		             st.store_checkpoints);
		prom_counter(&t, "store_checkpoint_entries_total",
		             "RocksDB entries written by checkpoints",
		             st.store_checkpoint_entries);
		prom_counter(&t, "journal_records_dropped_total",
		             "Journal records found whole past a damaged one "
		             "at open, and dropped", st.journal_records_dropped);
		prom_counter(&t, "store_checkpoint_retries_total",
		             "Retries of checkpoints that failed for memory",
		             st.store_checkpoint_retries);
	}
	prom_gauge(&t, "last_seq", "Newest event number", st.last_seq);
	prom_hist(&t, "batch_size", "Writes per committed batch",
	          st.batch_hist, 1, (double)st.writes + (double)st.write_errors);
	prom_hist(&t, "fsync_seconds",
	          "Time of one durable store write, its fsync included",
	          st.sync_hist,
	          0.0001, (double)st.sync_ns_total / 1e9);
	return tx_done(&t, len);
}

/* Whether any of the n sections asked for (none: "default") holds name:
 * every section here is a default one. */
static int section_on(size_t n, char *const *want, const char *name)
{
	if (n == 0)
		return 1;
	for (size_t i = 0; i < n; i++)
		if (!strcasecmp(want[i], "default") ||
		    !strcasecmp(want[i], "all") ||
		    !strcasecmp(want[i], "everything") ||
		    !strcasecmp(want[i], name))
			return 1;
	return 0;
}

/* The folder served, resolved (`tally backup` checks that the server it
 * reaches holds the folder it names), the --backup-dir folder (resolved
 * at start: `tally backup` sends a bare name there), and the section's
 * end. A path with a line break in it would break INFO's lines: it is
 * left out. */
static void data_dir_line(text *t, const srv *s)
{
	char real[PATH_MAX];

	if (strcmp(s->cfg.store, "rocksdb") == 0 &&
	    realpath(s->cfg.data_dir, real) != NULL &&
	    strpbrk(real, "\r\n") == NULL)
		tx(t, "data_dir:%s\r\n", real);
	if (s->cfg.backup_dir != NULL && strpbrk(s->cfg.backup_dir, "\r\n") == NULL)
		tx(t, "backup_dir:%s\r\n", s->cfg.backup_dir);
	tx(t, "\r\n");
}

char *info_text(srv *s, size_t n, char *const *section, size_t *len)
{
	text t = { 0 };
	tally_stats st;

	tally_stats_get(s->t, &st);
	if (section_on(n, section, "server")) {
		/* redis_version: clients that check it for features see a
		 * Redis whose commands tally answers. */
		tx(&t, "# Server\r\nredis_version:7.0.0\r\ntally_version:%s\r\n"
		   "redis_mode:standalone\r\nprocess_id:%ld\r\n"
		   "tcp_port:%d\r\nhttp_port:%d\r\nio_threads:%d\r\n"
		   "durability:%s\r\nstore:%s\r\n", TALLY_VERSION_STRING,
		   (long)getpid(), s->cfg.resp_port, s->cfg.http_port,
		   s->workers_n, s->cfg.durability ? "async" : "sync",
		   s->cfg.store);
		data_dir_line(&t, s);
	}
	if (section_on(n, section, "clients"))
		tx(&t, "# Clients\r\nconnected_clients:%u\r\nmaxclients:%u\r\n"
		   "\r\n", net_clients(s), s->cfg.maxclients);
	if (section_on(n, section, "persistence"))
		tx(&t, "# Persistence\r\nloading:0\r\nstore_status:%s\r\n"
		   "store_failures:%" PRIu64 "\r\nstore_recoveries:%" PRIu64
		   "\r\nstore_dirty:%" PRIu64 "\r\nstore_clean:%" PRIu64
		   "\r\nstore_checkpoints:%" PRIu64
		   "\r\nstore_checkpoint_entries:%" PRIu64
		   "\r\njournal_records_dropped:%" PRIu64
		   "\r\nstore_checkpoint_retries:%" PRIu64
		   "\r\n\r\n", st.store_error == TALLY_OK ? "ok" :
		   st.store_error == TALLY_ENOSPC ? "failed-no-space" :
		   "failed-io-error", st.store_failures, st.store_recoveries,
		   st.store_dirty, st.store_clean, st.store_checkpoints,
		   st.store_checkpoint_entries, st.journal_records_dropped,
		   st.store_checkpoint_retries);
	if (section_on(n, section, "stats"))
		tx(&t, "# Stats\r\ntotal_connections_received:%" PRIu64 "\r\n"
		   "total_commands_processed:%" PRIu64 "\r\n"
		   "rejected_connections:%" PRIu64 "\r\n"
		   "writes:%" PRIu64 "\r\nwrite_errors:%" PRIu64 "\r\n"
		   "batches:%" PRIu64 "\r\nfsyncs:%" PRIu64 "\r\n"
		   "store_entries:%" PRIu64 "\r\nqueue_depth:%" PRIu64 "\r\n"
		   "shard_growths:%" PRIu64 "\r\n"
		   "\r\n", SRV_STAT(s, connections_total),
		   SRV_STAT(s, commands_total),
		   SRV_STAT(s, connections_rejected), st.writes,
		   st.write_errors, st.batches, st.syncs, st.store_entries,
		   st.queue_depth, st.shard_growths);
	if (section_on(n, section, "keyspace") &&
	    strcmp(s->cfg.store, "redis-cluster") != 0)
		tx(&t, "# Keyspace\r\ndb0:keys=%" PRIu64 ",expires=0\r\n",
		   st.counters);
	return tx_done(&t, len);
}
