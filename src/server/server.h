/* server.h: tallyd's shared state: configuration, the server with its I/O
 * workers, per-worker statistics (an X-macro list summed on demand) and the
 * interface between the network layer (net.c) and the commands
 * (commands.c): commands build replies and queue writes, never touching a
 * socket. */
#ifndef TALLY_SERVER_SERVER_H
#define TALLY_SERVER_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "server/resp.h"
#include "server/secret.h"
#include "tally.h"

/* ---- configuration: every limit a flag with a documented default ------- */

typedef struct srv_config {
	const char *data_dir;        /* --data, ./data */
	const char *bind;            /* --bind, 127.0.0.1 */
	int resp_port;               /* --resp-port, 6380; 0 off */
	int http_port;               /* --http-port, 8080; 0 off */
	int threads;                 /* --threads, number of cores */
	int durability;              /* --durability sync|async */
	uint32_t flush_ms;           /* --flush-ms, 100 */
	const char *store;           /* --store rocksdb */
	const char *cluster;         /* --cluster HOST:PORT,... */
	uint32_t redis_wait;         /* --redis-wait N, 0 */
	int cluster_flag;            /* a redis-cluster store's flag given */
	uint32_t hot_shard_ops;      /* --hot-shard-ops as tally_options has
	                                it: 0 not given (default), or
	                                TALLY_HOT_SHARD_OFF for 0 */
	uint32_t hot_shards_max;     /* --hot-shards-max N, 0 not given */
	uint32_t checkpoint_kib;     /* --checkpoint-kib N, 0: the default */
	uint32_t open_files_max;     /* --open-files-max N, 0: 512 */
	const char *requirepass;     /* --requirepass or --requirepass-file */
	const char *requirepass_file; /* --requirepass-file */
	uint32_t maxclients;         /* --maxclients, 10000 */
	size_t max_bulk;             /* --max-bulk-bytes, 1 MiB */
	size_t max_args;             /* --max-args, 1048576 */
	size_t max_request;          /* --max-request-bytes, 64 MiB */
	size_t max_pending;          /* --max-pipeline, 65536 replies owed */
	size_t max_output;           /* --max-output-bytes, 64 MiB */
	uint32_t idle_timeout_s;     /* --idle-timeout, 0 (never) */
	uint32_t tcp_keepalive_s;    /* --tcp-keepalive, 300 (0: off) */
	uint32_t http_timeout_s;     /* --http-timeout, 60 (0: never) */
	int log_level;               /* --log-level 0 error .. 3 debug */
	const char *backup_dir;      /* --backup-dir, resolved; NULL: any */
} srv_config;

/* Longest path TALLY.BACKUP takes (PATH_MAX less its NUL). */
#define SRV_BACKUP_PATH_MAX 4095

/* Longest password --requirepass-file takes (a line of a file). */
#define SRV_PASSWORD_MAX 4096

enum { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* Parse argv into cfg (defaults first). Returns 0 to run, 1 when --help or
 * --version was printed, -1 on a usage error (message printed). */
int config_parse(srv_config *cfg, int argc, char **argv);
/* --bind's address (IPv4, IPv6 with an optional %zone, or "localhost")
 * and a port into ss: 0, or -1 when host is no address. */
int srv_addr_parse(const char *host, int port, struct sockaddr_storage *ss);
/* What a parsed address is to clients: SRV_ADDR_LOOPBACK (127/8, ::1, or
 * 127/8 mapped into IPv6), SRV_ADDR_ANY (the wildcard, in any spelling:
 * "0.0.0.0", "::", "::0"), or SRV_ADDR_OTHER. */
enum { SRV_ADDR_OTHER, SRV_ADDR_LOOPBACK, SRV_ADDR_ANY };
int srv_addr_kind(const struct sockaddr_storage *ss);
void srv_log(const srv_config *cfg, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- statistics ---------------------------------------------------------- */

/* Per-worker counters, declared once: X(name, help). */
#define SRV_STATS(X)                                                        \
	X(connections_total, "Connections accepted")                        \
	X(connections_rejected, "Connections refused at maxclients")        \
	X(commands_total, "Commands processed")                             \
	X(command_errors_total, "Commands answered with an error")          \
	X(protocol_errors_total, "Connections closed on a protocol error")  \
	X(output_limit_closes_total, "Clients closed at the output limit")  \
	X(idle_closes_total, "Clients closed at the idle timeout")          \
	X(http_requests_total, "HTTP requests answered")                    \
	X(bytes_in_total, "Bytes read from clients")                        \
	X(bytes_out_total, "Bytes written to clients")

/* Commands counted per table entry (see commands.c). */
#define CMD_TABLE_MAX 64
/* Slots of the command name index: a power of two, twice the table's
 * room, so that a probe meets an empty slot soon. */
#define CMD_INDEX_SLOTS 128

/* Each worker's counters, written by that worker alone (stat_add) and
 * read by any thread. On cache lines of their own: the workers' counts
 * sharing a line, or one shared count per command, bounced the line
 * between cores on every command. */
typedef struct srv_stats {
	/* Aligned, so the struct's size is whole cache lines too. */
	_Alignas(64) _Atomic uint64_t cmd_calls[CMD_TABLE_MAX];
#define X(name, help) _Atomic uint64_t name;
	SRV_STATS(X)
#undef X
} srv_stats;

/* Add to a counter only its own worker writes: a plain load and store,
 * no locked instruction (readers still see whole values). */
static inline void stat_add(_Atomic uint64_t *c, uint64_t n)
{
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
	                      memory_order_relaxed);
}

typedef struct srv srv;

/* ---- a client as commands see it ---------------------------------------- */

typedef struct client_info {
	uint64_t id;
	int proto;                  /* 2 or 3 */
	int authed;
	int close_after;            /* close once replies are flushed */
	char name[128];
	char lib_name[64];
	char lib_ver[32];
} client_info;

/* How a queued write's result becomes a reply. */
enum reply_fmt {
	FMT_INT = 1,     /* :result */
	FMT_OK,          /* +OK */
	FMT_SUM,         /* :sum of results (DEL of many keys) */
};

/* What a command handler gets. Replies go to `out` (which keeps the order
 * of replies, whatever is pending before). */
typedef struct cmd_ctx {
	srv *s;
	srv_stats *st;              /* the running worker's counters */
	client_info *cl;
	rbuf *out;
	void *conn;
	/* Queue n writes answered by one reply of format fmt; the reply's
	 * place in the output is fixed now. 0, or a TALLY_E* code (nothing
	 * was queued; the handler replies with the error). */
	int (*submit)(void *conn, const tally_write *w, size_t n, int fmt);
	/* Run fn(arg, out) on a pool thread, for work that may block (a
	 * backup); out becomes this command's reply, in its place, and the
	 * client's next command waits for it. 0: fn will be called once (it
	 * owns arg). -1: nothing was queued, the handler answers. NULL: the
	 * handler runs such work itself. */
	int (*offload)(void *conn, void (*fn)(void *arg, rbuf *out),
	               void *arg);
} cmd_ctx;

/* Run one command (argv[0] is its name). */
void cmd_dispatch(cmd_ctx *c, size_t argc, char **argv, size_t *lens);
/* The command table entry of a name, -1 for none: found once, then
 * asked cmd_writes() and run by cmd_run() (which answers -1 as an
 * unknown command). */
int cmd_find(const srv *s, const char *name, size_t len);
/* Whether entry i queues writes (reads wait for a client's writes). */
int cmd_writes(int i);
void cmd_run(cmd_ctx *c, int i, size_t argc, char **argv, size_t *lens);
/* The reply text of an engine error for a write, e.g. overflow. */
void cmd_reply_tally_error(rbuf *out, int err);
/* Fill s->cmd_index from the command table: before any command runs. */
void cmd_index_build(srv *s);
/* Name of command table entry i, or NULL past the end. */
const char *cmd_name(size_t i);

/* ---- the server ---------------------------------------------------------- */

struct srv {
	srv_config cfg;
	tally *t;
	int caller_commits;              /* t opened TALLY_OPEN_CALLER_COMMITS */
	int workers_n;
	struct worker **workers;
	_Atomic uint32_t clients;       /* connected now, both protocols */
	_Atomic uint64_t next_client_id;
	_Atomic int stopping;
	int64_t started_ms;
	srv_stats *stats;                /* one per worker, 64-byte aligned */
	secret pass;                     /* digest of requirepass (main.c) */
	/* Command table entry + 1 at a hash of its name, 0 for none
	 * (commands.c, cmd_index_build()). */
	uint8_t cmd_index[CMD_INDEX_SLOTS];
	uint64_t cmd_words[CMD_TABLE_MAX][2]; /* each name, folded */
};

/* Sum of stat `field` over workers. */
uint64_t srv_stat_sum(const srv *s, size_t offset);
#define SRV_STAT(s, field) srv_stat_sum((s), offsetof(srv_stats, field))
/* Calls of command table entry i, over workers. */
uint64_t srv_cmd_calls(const srv *s, size_t i);

/* net.c */
int net_start(srv *s);            /* bind, start workers; 0 or -1 */
void net_wait(srv *s);            /* until net_stop() */
void net_stop(srv *s);            /* from any thread or a signal handler */
void net_free(srv *s);
uint32_t net_clients(const srv *s);
/* Connections I/O thread i holds now (refused ones until they close). */
uint32_t net_thread_clients(const srv *s, int i);

/* metrics.c */
char *metrics_text(void *s, size_t *len);      /* Prometheus, malloc'd */
/* INFO of the sections named (none: the default ones), malloc'd; an
 * unknown section adds nothing, as in Redis. NULL when out of memory. */
char *info_text(srv *s, size_t n, char *const *sections, size_t *len);

/* backup.c: the last component of path, and its parent folder copied into
 * parent, of cap bytes, more than path's length ("." for a bare name, "/"
 * for a name at the root). */
const char *srv_path_split(const char *path, char *parent, size_t cap);
/* backup.c: check TALLY.BACKUP's path arg (len bytes) and write the path
 * to create into out (cap > SRV_BACKUP_PATH_MAX): inside cfg->backup_dir
 * when that is set. 0, or -1 with the error reply's text in err. */
int backup_target(const srv_config *cfg, const char *arg, size_t len,
                  char *out, size_t cap, char *err, size_t ecap);

/* auth: whether given is the password, in time independent of the
 * password (secret.h); 0 when s->pass was never set up. */
int srv_password_ok(const srv *s, const char *given, size_t len);

#endif
