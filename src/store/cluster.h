/* cluster.h: a Redis Cluster client over hiredis, for the redis_cluster
 * store. It routes commands by key slot (CLUSTER SLOTS, CRC16), pipelines
 * them per node with all nodes in flight at once, follows MOVED and ASK,
 * retries TRYAGAIN / CLUSTERDOWN / LOADING until a deadline, and re-makes
 * connections and the slot map (with backoff) after a failover.
 *
 * The one promise that matters for exactly-once: a command that may have
 * run is never sent again by this client. Each command ends in one of three
 * outcomes (enum cluster_outcome); only CL_NOT_RUN commands are retried
 * internally, and a CL_UNKNOWN command is the caller's to resend (the store
 * resends token-guarded scripts only, which makes a resend harmless).
 *
 * Thread-safety: a cluster handle is not thread-safe. One thread at a time
 * may use a handle (its own, or one guarded by the caller's mutex); two
 * handles are fully independent (own sockets, own slot map) and may be used
 * by two threads at once. cluster_slot() is pure and safe anywhere.
 *
 * Errors are TALLY_* codes from tally.h. */
#ifndef TALLY_STORE_CLUSTER_H
#define TALLY_STORE_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "tally.h"

/* Longest "host:port" the client keeps for a node (IPv6 included). */
#define CLUSTER_ADDR_MAX 64
/* Most nodes a cluster may have; more in CLUSTER SLOTS is TALLY_ELIMIT. */
#define CLUSTER_NODES_MAX 128
/* Most seeds in the string given to cluster_open(). */
#define CLUSTER_SEEDS_MAX 32
/* Most scripts cluster_script_load() remembers for reloading. */
#define CLUSTER_SCRIPTS_MAX 16
/* Most commands one cluster_exec() call takes. */
#define CLUSTER_EXEC_MAX 65536

/* The outcome of one command. CL_NOT_RUN is 0 so that a zeroed command is
 * "not run". */
enum cluster_outcome {
	CL_NOT_RUN = 0, /* definitely not executed: never sent, or refused by
	                   the cluster before running it (MOVED, ASK,
	                   TRYAGAIN, CLUSTERDOWN, LOADING, NOSCRIPT) and not
	                   resolved before the deadline */
	CL_DONE,        /* executed; reply holds the node's answer, which
	                   may be an error reply of the command's own (e.g.
	                   WRONGTYPE, a script error): check reply->type */
	CL_UNKNOWN      /* sent, then the connection failed or the command
	                   timeout passed before its reply: it may or may not
	                   have run. Never resent by the client. */
};

/* Options of cluster_open(). A zeroed struct gives the defaults. */
typedef struct cluster_options {
	/* TCP connect timeout per node, ms. 0: 1000. */
	int connect_timeout_ms;
	/* How long a sent command may wait for its reply before it is
	 * CL_UNKNOWN and its connection dropped, ms. 0: 2000. Within one
	 * cluster_exec() the exec's own deadline also bounds it. */
	int command_timeout_ms;
	/* Retry backoff (reconnect, topology refresh, TRYAGAIN ...) starts at
	 * 10 ms and doubles up to this, ms. 0: 1000. */
	int refresh_backoff_ms_max;
	/* AUTH sent on every new connection; NULL for none. Copied. */
	const char *password;
} cluster_options;

/* Counters of what the client did since cluster_open(); for tests and
 * metrics. */
typedef struct cluster_stats {
	uint64_t moved;       /* MOVED replies followed */
	uint64_t ask;         /* ASK replies followed */
	uint64_t retries;     /* TRYAGAIN / CLUSTERDOWN / LOADING retried */
	uint64_t refreshes;   /* slot maps fetched (CLUSTER SLOTS) */
	uint64_t connects;    /* connections made */
	uint64_t conn_errors; /* connections failed or dropped */
	uint64_t closes;      /* open connections closed, for any reason */
	uint64_t unknown;     /* commands ended CL_UNKNOWN */
	uint64_t noscript;    /* NOSCRIPT replies answered by a reload */
} cluster_stats;

typedef struct cluster cluster;

/* One command for cluster_exec(). The caller fills argc, argv, argvlen and
 * slot; the client fills reply and outcome. */
typedef struct cluster_cmd {
	int argc;
	const char **argv;     /* caller-owned until cluster_exec() returns */
	const size_t *argvlen; /* caller-owned; NULL: argv are C strings */
	uint16_t slot;         /* cluster_slot() of the routing key */
	/* out */
	redisReply *reply;     /* set when outcome is CL_DONE; owned by the
	                          command: free it with cluster_cmd_reset() */
	int outcome;           /* enum cluster_outcome */
	/* the caller's, never read or written by cluster_exec() */
	int resent;            /* sent again after a CL_UNKNOWN outcome */
} cluster_cmd;

/**
 * The Redis Cluster hash slot of a key: CRC16-XMODEM of the key, or of its
 * hash tag (the bytes between the first '{' and the first '}' after it,
 * when there are any), modulo 16384. Same rules as Redis's CLUSTER KEYSLOT.
 * @param key bytes of the key (may hold NULs); NULL only with len 0.
 * @return the slot, 0..16383. Pure; thread-safe.
 */
uint16_t cluster_slot(const void *key, size_t len);

/**
 * Connect to a cluster and fetch its slot map.
 * @param seeds "host:port[,host:port...]", at most CLUSTER_SEEDS_MAX; any one
 *        reachable seed is enough. Copied.
 * @param o options, or NULL for the defaults. Copied.
 * @param out the new handle, set on TALLY_OK only.
 * @return TALLY_OK; TALLY_EINVAL (NULL argument, malformed seed list or
 *         option < 0); TALLY_EIO (no seed answered CLUSTER SLOTS, or the
 *         cluster has no slots assigned); TALLY_ELIMIT (more than
 *         CLUSTER_NODES_MAX nodes); TALLY_ENOMEM.
 */
int cluster_open(const char *seeds, const cluster_options *o, cluster **out);

/**
 * Close every connection and free the handle. Safe on NULL. Does not free
 * replies still held by cluster_cmd structs (they are the caller's).
 */
void cluster_close(cluster *c);

/**
 * Run n commands. They are grouped per node by slot and pipelined, all
 * nodes written before any is read, so one call costs about one round trip
 * to the slowest node. Replies land in each command, whatever the order in
 * which nodes answer. Every command's reply and outcome are reset first
 * (any old reply freed).
 *
 * Inside the deadline the client retries what surely did not run: MOVED
 * (slot map updated, command re-sent to the new owner, a full refresh
 * follows), ASK (ASKING + the command to the target, once), TRYAGAIN /
 * CLUSTERDOWN / LOADING / MASTERDOWN (backoff, refresh, re-send), NOSCRIPT
 * for an EVALSHA of a script given to cluster_script_load() (the node gets
 * the script, then the command), a node it cannot connect to (backoff,
 * refresh, re-send). It never re-sends a command that was sent and not
 * answered: that one is CL_UNKNOWN, and so are the commands pipelined after
 * it on the same connection.
 *
 * @param cmds n commands, argc >= 1 each; n <= CLUSTER_EXEC_MAX.
 * @param timeout_ms deadline of the whole call, > 0. A reply is waited for
 *        at most min(command_timeout_ms, what is left of the deadline).
 * @return TALLY_OK when every command is CL_DONE (a reply may still be an
 *         error reply); TALLY_EIO when at least one is not (look at each
 *         outcome: the others did complete); TALLY_EINVAL (NULL with n > 0,
 *         argc < 1, n too large, timeout_ms <= 0); TALLY_ENOMEM (outcomes
 *         as far as known: commands already sent may be CL_UNKNOWN).
 */
int cluster_exec(cluster *c, cluster_cmd *cmds, size_t n, int timeout_ms);

/**
 * Free a command's reply and set its outcome back to CL_NOT_RUN, keeping
 * argc/argv/argvlen/slot. Safe on a command never run.
 */
void cluster_cmd_reset(cluster_cmd *cmd);

/* One master's answer to cluster_each_master(). */
typedef struct cluster_master_reply {
	char addr[CLUSTER_ADDR_MAX]; /* "host:port" of the master */
	redisReply *reply;           /* set when outcome is CL_DONE */
	int outcome;                 /* enum cluster_outcome */
} cluster_master_reply;

/**
 * Send one command to every master (slots NULL), or to every master owning
 * at least one of the given slots, in parallel, on the same connections
 * cluster_exec() uses. That is what WAIT needs: it counts the replicas
 * that have the writes made on this very connection. So when a connection
 * was closed between the writes and the WAIT (stats.closes moved), the
 * WAIT may have run on a new one, which has written nothing, and its
 * answer says nothing of them. Redirect replies are
 * not followed here (they are answers like any other). A master that
 * cannot be reached is retried with backoff until the deadline.
 * @param slots NULL, or nslots slots picking the masters.
 * @param argc, argv, argvlen the command (argvlen NULL: C strings);
 *        caller-owned until the call returns.
 * @param timeout_ms deadline of the whole call, > 0.
 * @param out an array of *n_out replies, one per master, allocated by the
 *        call; free with cluster_master_replies_free(). Set on TALLY_OK and
 *        TALLY_EIO.
 * @return TALLY_OK (every master CL_DONE); TALLY_EIO (some not: see their
 *         outcomes; also when no master is known, or when a slot given
 *         has no known master); TALLY_EINVAL; TALLY_ENOMEM.
 */
int cluster_each_master(cluster *c, const uint16_t *slots, size_t nslots,
                        int argc, const char **argv, const size_t *argvlen,
                        int timeout_ms, cluster_master_reply **out,
                        size_t *n_out);

/** Free what cluster_each_master() returned. Safe on NULL. */
void cluster_master_replies_free(cluster_master_reply *r, size_t n);

/**
 * SCRIPT LOAD a Lua script on every master and remember it: every new
 * connection (a promoted replica, a new master after resharding) gets it
 * again, and an EVALSHA answered NOSCRIPT is loaded and re-sent by
 * cluster_exec() (NOSCRIPT means it did not run, so that is safe). Loading
 * the same source twice is harmless and returns the same sha.
 * @param src, len the script; copied.
 * @param sha_out 40 hex digits and a NUL.
 * @param timeout_ms deadline, > 0.
 * @return TALLY_OK; TALLY_EIO (a master did not load it; it is remembered
 *         anyway and loaded on the next connection); TALLY_EINVAL (a
 *         script error, or NULL); TALLY_ELIMIT (CLUSTER_SCRIPTS_MAX
 *         scripts already); TALLY_ENOMEM.
 */
int cluster_script_load(cluster *c, const char *src, size_t len,
                        char sha_out[41], int timeout_ms);

/**
 * Fetch the slot map again now (CLUSTER SLOTS from any reachable node).
 * cluster_exec() does this by itself after redirects and failures; tests
 * and the store's start-up may want it explicitly.
 * @return TALLY_OK; TALLY_EIO (no node answered within timeout_ms);
 *         TALLY_ELIMIT; TALLY_ENOMEM.
 */
int cluster_refresh(cluster *c, int timeout_ms);

/**
 * The "host:port" of the master owning slot in the current slot map (no
 * I/O). @return TALLY_OK; TALLY_ENOTFOUND (slot not covered);
 * TALLY_EINVAL (buf too small: needs CLUSTER_ADDR_MAX).
 */
int cluster_slot_addr(const cluster *c, uint16_t slot, char *buf,
                      size_t len);

/** How many masters own slots in the current slot map (no I/O). */
size_t cluster_master_count(const cluster *c);

/** Counters since cluster_open(). */
void cluster_get_stats(const cluster *c, cluster_stats *out);

#endif
